"""The interface a kind implements to run on the shared roles (docs/architecture.md, "The kind
interface and the registry").

A *kind* is a subscription language with its score (spatial-keyword, ranked matching, range
top-k, ...). The runtime (:class:`~rankcast.runtime.coordinator.CoordinatorBase`) orders the
stream, keeps the write-ahead log, takes checkpoints and recovers, answers client retries,
loads bulk tables in two phases and delivers every change to listeners. What differs by kind
is written here, as the abstract methods of :class:`KindCoordinator`, in five duties:

1. **roles, and which of them snapshot** (:meth:`~KindCoordinator.init_kind`,
   :meth:`~KindCoordinator.build_roles`, :meth:`~KindCoordinator.role_groups`,
   :meth:`~KindCoordinator.snapshot_groups`);
2. **validation and encoding**, of calls and of bulk-load tables
   (:meth:`~KindCoordinator.encode_subscriptions`, :meth:`~KindCoordinator.encode_publish`;
   a kind with a growing dictionary also :meth:`~KindCoordinator.commit_encoding`,
   :meth:`~KindCoordinator.mark_encoding`, :meth:`~KindCoordinator.rollback_encoding`);
3. **routing and placement** (:meth:`~KindCoordinator.place`,
   :meth:`~KindCoordinator.apply_unsubscribe`, :meth:`~KindCoordinator.apply_publish`);
4. **a partition's local step** (:meth:`~KindCoordinator.dispatch`,
   :meth:`~KindCoordinator.harvest`, :meth:`~KindCoordinator.quiesce`);
5. **merge and emit** (:meth:`~KindCoordinator.emit`, :meth:`~KindCoordinator.baseline`),
   and the kind's queries (:meth:`~KindCoordinator.topk`, :meth:`~KindCoordinator.topk_many`,
   :meth:`~KindCoordinator.stats`).

A kind's coordinator derives from ``CoordinatorBase`` (which derives from this class) and is
named, with its config class, in :mod:`rankcast.runtime.registry`. A coordinator class that
leaves one of the abstract methods out cannot be instantiated (``abc``), and the registry
refuses it when a cluster of the kind starts.

What the runtime gives a kind's methods (attributes of ``CoordinatorBase``): ``ccfg`` (the
:class:`~rankcast.config.ClusterConfig`), ``cfg`` (its ``engine``), ``rt`` (the
:class:`~rankcast.runtime.backends.Runtime`: ``create``, ``get``, ``wait``, ``put``,
``share``), ``metrics``, ``live`` (subscription id -> what the kind keeps of it, usually its
partition), ``inflight`` (the unfinished steps, oldest first, as :meth:`dispatch` appended
them), ``pending_ops`` (partition -> control operations of the next step, added with
``_add_ops``), ``step``, ``last_seq`` (last stream position handed out), ``published``,
``dispatched_pos`` and ``applied_pos`` (last position dispatched, harvested) and ``counters``;
and the methods ``_role_maker`` (builds or resumes roles, reusing live processes after a
death), ``_add_ops``, ``_cut_group`` (deliver the pipelined calls before this one) and
``_publish_result`` (the end of :meth:`apply_publish`).

The roles are plain classes (Ray actors, or objects called in-process: the same code) that
follow :class:`Role`: each derives from :class:`~rankcast.runtime.recovery.Recoverable`, which
gives ``snapshot`` / resume, ``reinit``, ``pid`` and ``warm``.

The update arrays that steps produce and :meth:`emit` returns are :data:`UpdateArrays`: one
list per key (a subscription, or for ranked matching an event), laid end to end.
"""
from __future__ import annotations

import abc
from typing import Any, Protocol, runtime_checkable

import numpy as np

from rankcast.common.routing import Routing
from rankcast.errors import InvalidInput

__all__ = ["KindCoordinator", "PlacementPolicy", "Role", "UpdateArrays", "NO_UPDATES", "LOCAL_METHODS"]

#: ``(keys, offsets, item_ids, scores)``: key ``keys[i]``'s list is ``item_ids[offsets[i]:
#: offsets[i + 1]]`` with its ``scores``, best first (int64, int64 of len(keys) + 1, int64,
#: float64). A key with an empty range lost every item of its list.
UpdateArrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]

#: No update.
NO_UPDATES: UpdateArrays = (np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0))


@runtime_checkable
class Role(Protocol):
    """What the coordinator calls on every role it builds (``handle.method.remote(...)``).

    A role class takes ``resume=None`` as its last keyword argument and ends its
    ``__init__`` with ``self._resume(resume)``; it keeps a
    :class:`~rankcast.runtime.metrics.RoleMetrics` as ``metrics`` and lists what it resumes
    from in ``_STATE`` (or overrides ``_state`` / ``_restore``).
    :class:`~rankcast.runtime.recovery.Recoverable` implements every method but ``stats``."""

    def snapshot(self, store, rel: str) -> str:
        """Copy the state at this position and write it to ``rel`` of ``store``."""

    def snapshot_written(self) -> str:
        """Wait until the last snapshot is on disk."""

    def snapshot_done(self) -> bool:
        """Whether the last snapshot is on disk, without waiting."""

    def reinit(self, *args, **kw) -> int:
        """Become a new role of the same class in this process; returns the pid."""

    def pid(self) -> int:
        """The process id (fault-injection tests kill it)."""

    def node(self) -> str | None:
        """The id of the Ray node the role runs on (``stats()["placement"]``)."""

    def warm(self) -> int:
        """Load what the role runs (compiled kernels); returns the pid."""

    def stats(self) -> dict:
        """The role's figures (``metrics.snapshot()`` and the kind's own)."""


class PlacementPolicy(abc.ABC):
    """Where a kind's subscriptions live and where its messages go: the base of every kind's
    distribution policy (``rankcast.kinds.spatial.roles.policies.Policy``, the ranked-matching
    ``MatchPolicy``, the range ``RangePolicy``). The coordinator fits it on a sample, places
    each subscription with the kind's own method (its arguments differ by kind: a
    subscription batch, expressions, or points), and asks ``route_messages`` where a step's
    messages go; a :class:`~rankcast.runtime.distributor.Distributor` calls it off the
    coordinator.

    Class attributes: ``name`` (the policy's name in the config), ``replicates`` (a
    subscription may live in several partitions), ``prefix`` (routes by a prefix that
    reallocation may grow)."""

    name = "?"
    replicates = False
    prefix = False

    def __init__(self, n_partitions: int):
        if isinstance(n_partitions, bool) or not isinstance(n_partitions, (int, np.integer)) \
                or n_partitions < 1:
            raise InvalidInput(f"policy: partitions must be an integer >= 1, got {n_partitions!r}")
        self.n_partitions = int(n_partitions)

    @abc.abstractmethod
    def fit(self, *sample: Any) -> "PlacementPolicy":
        """Learn the placement from a sample of the kind's inputs; returns ``self``."""

    def route_messages(self, msgs: Any) -> Routing:
        """The partitions each message of a step goes to (default: every partition)."""
        return Routing.everywhere(len(msgs), self.n_partitions)

    @property
    def broadcasts(self) -> bool:
        """Whether every message goes to every partition (``route_messages`` is not
        overridden): routing a step is then no work, and no distributor is asked to."""
        return type(self).route_messages is PlacementPolicy.route_messages

    @abc.abstractmethod
    def describe(self) -> dict[str, Any]:
        """The policy's state for ``stats()``: at least ``policy`` and ``partitions``."""


class KindCoordinator(abc.ABC):
    """The kind's side of a cluster's coordinator: see the module docstring.

    Class attributes: ``KIND_STATE``, the coordinator attributes a checkpoint keeps besides
    the runtime's own (what :meth:`init_kind` sets and the calls change: encoders, policies,
    validation state); ``ITEM``, what a subscription is called in error messages.

    Optional refinements, with defaults that suit a kind whose steps are independent calls
    (only the spatial-keyword kind overrides them): ``_snapshot_behind`` (checkpoints
    queued behind the steps in flight), ``_hold_point`` and ``_heal`` (partial recovery of a
    dead role in place), ``_emit_start`` / ``_emit_finish`` (cuts started behind the steps in
    flight), ``_release_held`` (publishes gathered in the coordinator), ``_after_publish``
    (load monitoring), ``_nothing_to_dispatch``, ``_duties`` (``Cluster.topology``) and
    ``_filter_delivery`` (``listen(subscription_ids=...)`` for a kind whose keys are not
    subscriptions)."""

    KIND_STATE: tuple[str, ...] = ()
    ITEM = "subscription"

    # ------------------------------------------------------------------ 1. roles
    @abc.abstractmethod
    def init_kind(self, sample: Any) -> None:
        """Set up the kind's coordinator state, once, before any role exists: its encoder,
        its placement policy (fitted on ``sample`` when given: subscriptions, or the pair
        (subscriptions, publish items), in any input form the kind accepts) and its stream
        state. Called from ``__init__``; the attributes named in ``KIND_STATE`` are then
        replaced by a checkpoint's when the cluster resumes."""

    @abc.abstractmethod
    def build_roles(self, ckpt: str | None, reuse: list[tuple[str, Any]] | None = None) -> None:
        """Create every role and keep the handles. ``ckpt``: the checkpoint folder each role
        resumes from (``<ckpt>/<role>-<i>``), None for new roles. ``reuse``: after a death,
        the (role, handle) pairs whose process still answers; each becomes a role again in
        place. Use ``make, finish = self._role_maker(ckpt, reuse)``, then
        ``make(role, cls, i, *args, snapshot=True)`` per role (``snapshot=False``: a role
        that keeps no state resumes from nothing) and ``finish()`` to wait for them."""

    @abc.abstractmethod
    def role_groups(self) -> list[tuple[str, list]]:
        """``(role name, handles)`` of every role, in a fixed order: what ``pids``, ``warm``,
        ``shutdown`` and the liveness checks of a recovery go through. Role names are the
        runtime's vocabulary: ``distributor``, ``partition``, ``shard``, ``aggregator``."""

    @abc.abstractmethod
    def snapshot_groups(self) -> list[tuple[str, list]]:
        """``(role name, handles)`` of the roles that snapshot their state at a checkpoint
        (the others are rebuilt empty: ``make(..., snapshot=False)``); the i-th handle of a
        group resumes from ``<ckpt>/<role>-<i>``."""

    def reset_transient(self) -> None:
        """Forget what steps in flight and a call in progress left in the coordinator (their
        harvested results): a checkpoint is about to be loaded and the log replayed."""

    # ------------------------------------------------------------------ 2. validation and encoding
    @abc.abstractmethod
    def encode_subscriptions(self, items: Any) -> tuple[Any, Any]:
        """Validate and encode subscriptions (objects, columns or a table: every form the
        kind's engine accepts), atomically. Returns ``(batch, pending)``: ``batch`` has
        ``ids`` (int64 array) and ``len``, and is what :meth:`place` receives; ``pending`` is
        what the batch adds to the kind's dictionary, for :meth:`commit_encoding` (None when
        nothing). Raises ``InvalidInput`` naming the item by position and id. Used by
        ``subscribe`` and by each part of a bulk load (``stage_batch``); the runtime then
        checks that no id is live."""

    @abc.abstractmethod
    def encode_publish(self, items: Any, **kw) -> tuple[Any, Any]:
        """Validate and encode a publish call's items (``kw``: the kind's per-call options,
        such as ranked matching's ``k``), atomically and against the current state (ids in
        the window, live objects). Returns ``(batch, extra)``, both written to the log
        and passed to :meth:`apply_publish` (on a replay too)."""

    def commit_encoding(self, pending: Any) -> None:
        """Make ``pending`` (from :meth:`encode_subscriptions` or :meth:`encode_publish`)
        part of the dictionary. No dictionary: nothing to do."""

    def mark_encoding(self) -> Any:
        """A mark of the dictionary now, for :meth:`rollback_encoding` (a bulk load that
        fails drops the terms its staged parts committed)."""
        return None

    def rollback_encoding(self, mark: Any) -> None:
        """Return the dictionary to ``mark``."""

    # ------------------------------------------------------------------ 3. routing and placement
    @abc.abstractmethod
    def place(self, batch: Any) -> None:
        """Route new subscriptions (a :meth:`encode_subscriptions` batch) to partitions: record
        each in ``self.live`` and add the partitions' control operations of the next step
        (``self._add_ops(p, ops)``). The runtime then dispatches, quiesces and calls
        :meth:`baseline`."""

    @abc.abstractmethod
    def apply_unsubscribe(self, ids: np.ndarray) -> None:
        """Remove the live subscriptions ``ids`` (int64, validated): deliver the pipelined
        calls first (``self._cut_group()``), drop them from ``self.live``, dispatch the step
        that removes them and quiesce; count the call (``self.counters["calls"] += 1``)."""

    @abc.abstractmethod
    def apply_publish(self, batch: Any, extra: Any, wait: bool, client: Any) -> Any:
        """Apply a publish call (live, or replayed from the log): commit ``extra``'s encoding,
        cut the pipelined calls before a waited call (``if wait: self._cut_group()``), advance
        ``self.last_seq`` and ``self.published`` by the items, dispatch their steps and end
        with ``return self._publish_result(n, wait, client)``."""

    # ------------------------------------------------------------------ 4. a partition's local step
    @abc.abstractmethod
    def dispatch(self) -> None:
        """Submit one step to the roles without waiting for it: the control operations of
        ``self.pending_ops`` (then emptied) and, when the kind's own calls pass them (extra
        optional arguments), a publish step's items. First harvest the oldest steps while
        ``len(self.inflight) >= self.ccfg.max_in_flight`` (backpressure); increment
        ``self.step`` and give each role call the step number (roles check their order);
        append the step's entry to ``self.inflight`` (what :meth:`harvest` receives; a tuple
        whose fourth item is its stream position is the convention) and count it in
        ``self.counters["steps"]``. The runtime calls it with no argument."""

    @abc.abstractmethod
    def harvest(self, entry: Any) -> None:
        """Wait for one step (an ``inflight`` entry, already removed from it): keep its results
        for :meth:`emit` and advance ``self.applied_pos`` to its position. A role's death
        raises from here (the runtime recovers)."""

    def quiesce(self) -> None:
        """Finish every step in flight, so that the roles hold the exact results of every
        call so far (a call boundary). By default: harvest the steps, oldest first."""
        while self.inflight:
            self.harvest(self.inflight.popleft())
        self.metrics.set("queue_depth", 0)

    # ------------------------------------------------------------------ 5. merge and emit
    @abc.abstractmethod
    def emit(self) -> UpdateArrays:
        """The changes since the previous emit, merged: one list per key, its latest
        (:data:`UpdateArrays`, or :class:`~rankcast.runtime.coordinator.UpdateParts` left in
        the roles' results), :data:`NO_UPDATES` when none. Called quiesced, at a delivery
        cut; the runtime delivers it at the current stream position."""

    def baseline(self, ids: np.ndarray) -> None:
        """New subscriptions ``ids`` got their initial results (quiesced, after :meth:`place`):
        whatever tracks changes must not report those as updates. By default nothing (the
        kind's roles report only later changes)."""

    @abc.abstractmethod
    def topk(self, sub_id: int) -> list[tuple[int, float]]:
        """The current top-k of one subscription (``UnknownSubscription`` if not live; a kind
        whose subscriptions hold no standing list raises ``InvalidInput``)."""

    @abc.abstractmethod
    def topk_many(self, sub_ids: list[int]) -> dict[int, list[tuple[int, float]]]:
        """:meth:`topk` of several subscriptions."""

    @abc.abstractmethod
    def stats(self) -> dict:
        """The cluster's figures: at least ``subscriptions``, ``published``, ``partitions``,
        ``policy``, ``roles`` (each role's ``stats()``), ``delivery`` and ``recovery``
        (``self._recovery_stats()``), after a quiesce."""


#: The methods of the interface that only the coordinator's own code calls (not client
#: calls): Ray's actor wrapper leaves them alone (``backends.writable_class``).
LOCAL_METHODS = frozenset({
    "init_kind", "build_roles", "role_groups", "snapshot_groups", "reset_transient",
    "encode_subscriptions", "encode_publish", "commit_encoding", "mark_encoding", "rollback_encoding",
    "place", "apply_unsubscribe", "apply_publish", "dispatch", "harvest", "quiesce", "emit", "baseline"})
KindCoordinator.LOCAL_METHODS = LOCAL_METHODS

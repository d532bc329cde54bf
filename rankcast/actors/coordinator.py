"""Coordinator: the one place that orders the stream (the named, detached actor a client attaches to).

It owns what must be global and consistent for every attached client: the term dictionary
(:class:`~rankcast.columns.Encoder`), validation state (live subscriptions, message ids in
the window, time order), the window clock, the sequence numbers, the policy and the
subscriptions' routed prefix lengths. It cuts every call into *steps* (micro-batches of
``batch_size`` messages, or one step of control operations) and submits, per step:

    distributor[j mod D].route(step)  -> one payload per partition and per shard (object store)
    shard[s].append(j, payload_s)                         for every window shard
    partition[p].process(j, ops_p, payload_p, *appends)   for every subscription partition

Ray runs the calls of one submitter in order, so partitions and shards see the steps in
order whatever the distributors' timing; passing the shards' append results as arguments
makes a partition start step j only when every shard holds it (then "as of position b"
questions are answerable). At most ``max_in_flight`` steps are unfinished (a step is
finished when its partitions and their aggregator updates are done): backpressure.

One partition that no split can grow (``solo``) is an engine in an actor: the
:class:`~rankcast.actors.partition.SoloPartition` holds the window too, and a step is one
call, ``partition.process(j, ops, (msgs, seqs, exp))``, with no distributor, window shard
or aggregator process (``options["solo"]=False`` keeps them); its subscriptions are two
hash halves whose steps run on two threads (``options["solo_halves"]=False``: one core). So are up to
``solo_partitions`` partitions under a policy that sends every message to every partition
and no split can grow (hash; location with ``max_partitions`` reached): each appends every
message to a window of its own, and its questions never leave its process. On 2 cores
that costs less than a window shard's process and the questions' round trips to it.

Pipelined publishes (``wait=False``) that find :data:`GATHER_DEPTH` steps unfinished wait in
the coordinator and go out together, as steps of up to ``ClusterConfig.coalesce`` messages
(:meth:`Coordinator._gather`): a step's cost is largely fixed, so a publisher faster than the
partitions gets fewer, larger steps. Every other call, cut and checkpoint sends them first.

At a call boundary (``publish(wait=True)``, ``subscribe``, ``unsubscribe``, ``flush``,
``topk``) the coordinator *quiesces*: waits for every step, then turns the partitions'
reallocation requests into control operations and runs them, until none is left. The
aggregators then hold the exact global top-k of every subscription.

Prefix reallocation (paper 7.3.4, lazy): a replica reports that its kScore fell to the
bound of the terms beyond the routed prefix. From position n0 (the next step) messages are
routed by the longer prefix; partitions newly covered get the subscription with initial
results as of n0 (a re-evaluation over the whole window); the other replicas learn the new
length and check their kScore against it.

Why the union of the replicas' top-k lists holds the global top-k at a boundary: a replica
is an exact Skype core over the messages routed to it plus the whole window at its last
re-evaluation, so it holds every global top-k message among those. A message that no
replica has seen shares no term of the current prefix (a term of a partition added later
was covered by that partition's initial re-evaluation), so it scores below the bound of
the current prefix; and every replica keeps its kScore, which never exceeds the global one,
above that bound (it checks whenever its top-k or the prefix changes) or asks for a longer
prefix before the boundary is reached.

Load monitoring (paper 7.4) also runs at call boundaries: at the end of a publish call,
once ``monitor_every`` seconds have passed, the partitions' busy time since the previous
check decides on a rebalance (``rebalance``), which re-places the moved subscriptions at
one stream position.
"""
from __future__ import annotations

import functools
import os
import time
from collections import OrderedDict, deque
from numbers import Integral

import numpy as np

from .._arrays import concat_offsets, runs
from ..columns import Encoder, MessageBatch, SubscriptionBatch, item_error, shift_position, too_many
from ..config import ClusterConfig, EngineConfig, limits
from ..engine import check_ids_arg, check_message_state, check_not_live
from ..errors import InvalidInput, UnknownSubscription
from ..indexing.window import WindowClock
from .aggregator import Aggregator
from .distributor import Distributor, shard_payloads
from .metrics import RoleMetrics
from .partition import PartitionOps, SoloPartition, SubscriptionPartition
from .policies import Policy, Routing, make_policy
from .recovery import STATE_FORMAT, StateStore, Writer, is_role_death, shared_config, write_snapshots
from .runtime import InprocRuntime, RayRuntime, Runtime
from .shard import WindowShard

__all__ = ["CoordinatorBase", "Coordinator", "check_resumable", "coordinator_class", "UpdateParts",
           "RemoteUpdates", "update_arrays"]

_NO_UPDATES = (np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0))
_NOT_DONE = object()
# the most partitions that hold the whole window each (SoloPartition) under a broadcasting
# policy: every partition appends every message, where one window shard would once
SOLO_PARTITIONS = 2
# unfinished steps from which pipelined publishes wait in the coordinator to go out together
# (Coordinator._gather): one running in every partition and one queued behind it
GATHER_DEPTH = 2


class RemoteUpdates:
    """What a client gets for a call's updates that are still in the partitions' results:
    the references, which it fetches itself (``Cluster._get``). The update rows (5 MB
    per call of 1,000 messages at 20k subscriptions) then cross the object store once,
    partition to client, instead of twice through the coordinator."""

    __slots__ = ("refs",)

    def __init__(self, refs: list):
        self.refs = refs

    def __getstate__(self):
        return self.refs

    def __setstate__(self, refs):
        self.refs = refs


class UpdateParts:
    """A delivery's update arrays left in the partitions' results (object references; each
    part is id-ordered, the parts are laid end to end), with the number of subscriptions
    they hold. The coordinator fetches them only where it reads them (a listener, a
    ``flush`` of several deliveries, a checkpoint); a pickle holds the arrays."""

    __slots__ = ("refs", "n", "_rt", "_arrays")

    def __init__(self, rt: Runtime, refs: list, n: int):
        self.refs, self.n, self._rt, self._arrays = list(refs), int(n), rt, None

    def arrays(self) -> tuple:
        if self._arrays is None:
            self._arrays = concat_updates([o for o in self._rt.get(self.refs) if len(o[0])])
        return self._arrays

    def __reduce__(self):
        return tuple, (self.arrays(),)


def update_arrays(out) -> tuple:
    """The update arrays of ``out`` (arrays, or :class:`UpdateParts`)."""
    return out.arrays() if isinstance(out, UpdateParts) else out


def n_updates(out) -> int:
    """Subscriptions updated in ``out`` (arrays, or :class:`UpdateParts`)."""
    return out.n if isinstance(out, UpdateParts) else len(out[0])


def for_client(out):
    """A call's result as sent to the client: update parts as their references."""
    return RemoteUpdates(out.refs) if isinstance(out, UpdateParts) else out


def _select(arrays: tuple, keep: np.ndarray) -> tuple:
    """The rows ``keep`` (a mask) of update arrays (sub_ids, offsets, msg_ids, scores)."""
    ids, off, mids, scs = arrays
    rows = np.flatnonzero(keep)
    new_off, idx = runs(off[rows], off[rows + 1] - off[rows])
    return ids[rows], new_off, mids[idx], scs[idx]


def check_resumable(store: StateStore, given: ClusterConfig) -> None:
    """A restart resumes the stored cluster only from state of this version's format
    (:data:`~rankcast.actors.recovery.STATE_FORMAT`) and under the same semantics (the kind,
    its engine config and the policy); the stored topology (partitions added by load
    monitoring) is kept."""
    found = store.read("MANIFEST").get("format", 0)
    if found != STATE_FORMAT:
        raise InvalidInput(f"Cluster.start: field 'state_dir': the durable state of cluster {given.name!r} "
                           f"under {given.state_dir!r} has state format {found}, and this rankcast "
                           f"reads format {STATE_FORMAT}; start it with another name or state_dir, "
                           f"or Cluster.start(..., fresh=True) to discard that state")
    stored = store.read_config()
    a, b = stored.engine, given.engine
    if type(a) is not type(b):
        same = False
    elif hasattr(a, "vocabulary"):
        va = a.vocabulary.to_dict() if a.vocabulary is not None else None
        vb = b.vocabulary.to_dict() if b.vocabulary is not None else None
        same = a.replace(vocabulary=None) == b.replace(vocabulary=None) and va == vb
    else:
        same = a == b
    if not same or stored.policy != given.policy:
        raise InvalidInput(f"Cluster.start: field 'engine'/'policy': the durable state of cluster "
                           f"{given.name!r} under {given.state_dir!r} was made with another engine config "
                           f"or policy; start it with the same config, another name or state_dir, "
                           f"or Cluster.start(..., fresh=True) to discard that state")


def coordinator_class(ccfg: ClusterConfig):
    """The coordinator of the kind of ``ccfg.engine`` (spatial-keyword, ranked matching or
    range top-k)."""
    from ..config import MatchConfig, RangeConfig
    if isinstance(ccfg.engine, MatchConfig):
        from .matching import MatchCoordinator
        return MatchCoordinator
    if isinstance(ccfg.engine, RangeConfig):
        from .rangekind import RangeCoordinator
        return RangeCoordinator
    return Coordinator


def concat_updates(outs: list[tuple]) -> tuple:
    """Update arrays (ids, offsets, item ids, scores) of several parts, laid end to end."""
    if not outs:
        return _NO_UPDATES
    if len(outs) == 1:
        return outs[0]
    return (np.concatenate([o[0] for o in outs]), concat_offsets([o[1] for o in outs]),
            np.concatenate([o[2] for o in outs]), np.concatenate([o[3] for o in outs]))


def _latest(outs: list[tuple]) -> tuple:
    """Concatenate update arrays keeping, per subscription, the list of the last part (in
    the order of those last occurrences)."""
    ids = np.concatenate([o[0] for o in outs])
    off = concat_offsets([o[1] for o in outs])
    mids = np.concatenate([o[2] for o in outs])
    scs = np.concatenate([o[3] for o in outs])
    _, first_from_end = np.unique(ids[::-1], return_index=True)
    keep = np.sort(len(ids) - 1 - first_from_end)
    new_off, idx = runs(off[keep], off[keep + 1] - off[keep])
    return ids[keep].astype(np.int64), new_off, mids[idx].astype(np.int64), scs[idx].astype(np.float64)


STANDBY_WARM_SECONDS = 120.0  # how long warm() waits for the standby processes
# a broadcast step's messages go inside the partitions' calls where Ray sends them so
# (RayRuntime.inline_bytes) and at most this many partitions get a copy (Coordinator._broadcast)
INLINE_COPIES = 2
INLINE_SLACK = 4096           # bytes of pickling around the arrays
# A direct-mode partition's results cross the object store, one object per call (4.6 MB per
# 1,000 messages at 20k subscriptions), and the deliveries keep them for ``retention``
# positions: each lands on pages of the store that the partition's process has not written
# yet, one page fault each (about 1,200 per call, measured), until its process has written
# the store's pages that the objects cycle through (the client, which reads them, maps them
# 16 pages a fault). warm() writes STORE_WARM_BYTES through the partitions (a P-th each: the
# results shrink with P) at once, in objects of STORE_WARM_CHUNK, all alive together, then
# freed: the store hands the same pages out again
STORE_WARM_BYTES = 256 << 20
STORE_WARM_CHUNK = 8 << 20
MAX_RECOVERIES = 3      # deaths in a row one call survives before it gives up
HEAL_SETTLE_SECONDS = 120.0   # a partial recovery waits this long for the steps in flight
MAX_CLIENTS = 10_000    # clients whose last call's result is kept for their retries


def _guarded(fn):
    """A client call that survives the death of a role: on a death the coordinator recovers
    (every role from the checkpoint, then the log replayed) and the call completes. A call
    that reached the log was replayed with it: its result is the replay's. Other calls run
    again. Nested calls pass through; the outermost also takes a checkpoint when one is due."""
    @functools.wraps(fn)
    def call(self, *args, **kw):
        if self._depth:
            return fn(self, *args, **kw)
        self._depth += 1
        self._current = None
        try:
            for _ in range(MAX_RECOVERIES + 1):
                try:
                    out = fn(self, *args, **kw)
                except Exception as e:
                    if self.store is None or not is_role_death(e):
                        raise
                    results = self._recover(e)
                    if self._current is not None and self._current >= 0:
                        return results[self._current]
                    # not logged, or already in the checkpoint: a call with a client token
                    # that was applied returns its recorded result (_retried)
                    continue
                try:
                    self._maybe_checkpoint()
                except Exception as e:         # the call is complete: its result stands
                    if self.store is None or not is_role_death(e):
                        raise
                    self._recover(e)
                return out
            raise RuntimeError(f"rankcast: {MAX_RECOVERIES + 1} role deaths in one call; giving up")
        finally:
            self._depth -= 1
    return call


# what a checkpoint keeps of every coordinator (the rest is rebuilt or is about this
# process); a kind adds its own in KIND_STATE
# ``deliveries`` is not copied whole at each checkpoint: each checkpoint writes the deliveries
# made since the previous one as a chunk (``deliv-<epoch>``), and the state lists the chunks
# that still hold a retained position (``_deliv_chunks``)
_COORD_STATE = ("policy", "last_seq", "dispatched_pos", "step", "published", "live", "applied_pos",
                "counters", "evicted_upto", "_group", "_group_t0", "_flush_pos", "_done",
                "_deliv_chunks", "_deliv_saved_upto")


class CoordinatorBase:
    """What every kind's coordinator shares (the ARCHITECTURE's "written once"): sequencing
    of steps with backpressure, the write-ahead log, checkpoints and recovery, client
    tokens, bulk loading in two phases, deliveries to listeners and ``flush``.

    A kind implements the hooks: ``_init_kind`` (its encoder, policy and stream state),
    ``_build_roles`` / ``_role_groups`` / ``_snapshot_groups`` (its roles), ``_reset_transient``,
    the ``_apply_*`` of its calls, ``_place`` / ``_dispatch`` / ``_harvest`` / ``_quiesce`` /
    ``_emit`` / ``_baseline`` (its steps and results), and the encoding hooks of bulk loads
    (``_encode_subscriptions``, ``_commit``, ``_mark``, ``_rollback``)."""

    KIND_STATE: tuple[str, ...] = ()
    ITEM = "subscription"          # what a subscription is called in errors

    def __init__(self, ccfg: ClusterConfig | None, runtime: str = "ray", sample=None, *,
                 state: tuple[str, str] | None = None):
        if ccfg is None:
            # a durable cluster's coordinator takes (state_dir, name) only, and reads its
            # config and fitting sample from there: Ray restarts it from these arguments
            # after the client that started it is gone
            ccfg, sample = StateStore(*state).read("START")
        self.ccfg = ccfg
        self.cfg = ccfg.engine
        opts = ccfg.options
        self.rt: Runtime = InprocRuntime() if runtime == "inproc" else RayRuntime()
        self._export = not self.rt.inproc
        self.metrics = RoleMetrics("coordinator", 0, ccfg.name, self._export)
        # stream state
        self.last_seq = -1          # last sequence number handed out (stream position - 1)
        self.dispatched_pos = -1    # last position covered by a dispatched step
        self.step = 0
        self.published = 0
        self.live: dict[int, int] = {}            # subscription id -> what the kind keeps of it
        self.inflight: deque = deque()            # unfinished steps
        self.applied_pos = -1       # last position of the steps harvested
        self.pending_ops: dict[int, list] = {}    # partition -> control operations of the next step
        self._staged: list | None = None          # bulk load in progress
        self._staged_terms: list = []              # what each staged part adds to the encoder
        self._stage_lost = False                   # a recovery dropped a load being staged
        self._staged_ids: set[int] = set()
        self._stage_mark = None
        self.counters = dict(steps=0, publish_seconds=0.0, calls=0)
        # delivery (CONTRACT "Delivery to subscribers"): (position, update arrays) per cut
        self.deliveries: deque[tuple[int, tuple]] = deque()
        self.evicted_upto = 0                     # deliveries at positions <= this are gone
        self._deliv_chunks: list[tuple[str, int]] = []   # (file, last position) on disk
        self._deliv_saved_upto = -1               # deliveries up to here are in a chunk
        self._group: set = set()                  # clients with pipelined calls not yet delivered
        self._group_t0 = 0.0
        self._flush_pos: dict = {}                # client -> positions delivering its pipelined calls
        self._cuts: deque = deque()               # cuts started, not delivered: (position, handle, clients)
        self._done: OrderedDict = OrderedDict()   # client -> (token, result) of its last call
        # recovery
        self._role_specs: dict[str, tuple] = {}   # role -> (class, arguments) of its last build
        self._standby: dict[str, object] = {}     # role -> a warm process that is no role yet
        self._standby_warm: dict[str, object] = {}
        self._role_args: dict[tuple[str, int], tuple] = {}   # (role, i) -> (class, arguments)
        # partial recovery (see _heal): what every step since the committed checkpoint sent
        self._journal: list = []
        self._breaks = 0                # changes of the roles' layout (rebalancing) so far
        self._journal_breaks = 0        # ... when the committed checkpoint was taken
        self._replaying = False         # a full recovery or a restart is replaying the log
        self._hold = None               # _hold_point() of the committed checkpoint
        self._init_kind(sample)
        self._depth = 0
        self._current = None                      # log index of the running call's record
        self.recoveries: deque[dict] = deque(maxlen=50)
        self.epoch = 0
        self._n_logged = 0
        self._checkpoints = 0
        self._last_ckpt = time.perf_counter()
        self._ckpt_seconds = 0.0
        self._ckpt_parts: dict = {}
        self._config_written = False
        self._pending: dict | None = None   # the checkpoint taken, not committed yet
        self._log_epoch = 0             # the epoch of the open log
        self._n_open = 0                # records in the open log
        self.store: StateStore | None = None
        if ccfg.state_dir is not None and (not self.rt.inproc or opts.get("durable")):
            self.store = StateStore(ccfg.state_dir, ccfg.name)
            self.store.fsync = bool(ccfg.fsync)
        if self.store is not None and self.store.exists("MANIFEST"):
            self._resume_from_store()           # a restart: this process or the whole cluster
        else:
            self._build_roles(None)
            if self.store is not None:
                self._checkpoint(wait=True)
        self._fill_standby()

    # ------------------------------------------------------------------ kind hooks
    def _init_kind(self, sample) -> None:
        raise NotImplementedError

    def _build_roles(self, ckpt: str | None, reuse: list | None = None) -> None:
        raise NotImplementedError

    def _role_groups(self) -> list[tuple[str, list]]:
        """(role name, handles) of every role."""
        raise NotImplementedError

    def _snapshot_groups(self) -> list[tuple[str, list]]:
        """(role name, handles) of the roles that snapshot their state."""
        raise NotImplementedError

    def _reset_transient(self) -> None:
        """Forget what a step in flight or a call in progress left (before a checkpoint loads)."""

    def _snapshot_behind(self) -> bool:
        """Whether the roles' snapshots may be queued behind the steps in flight (each role
        takes it after them, in order) instead of after a quiesce: the kind cuts that way
        too, and no reallocation asked by a step in flight could be lost with it."""
        return False

    def _hold_point(self):
        """What the roles must keep for a partial recovery from a checkpoint taken now
        (the spatial kind: the expiry watermark; its shards keep the messages after it)."""
        return None

    def _heal(self, cause: BaseException) -> bool:
        """Partial recovery in place, where the kind supports it; False: a full one is needed."""
        return False

    def _get_healing(self, make_refs):
        """``rt.get(make_refs())``, asked again of the rebuilt roles after a partial recovery."""
        for attempt in range(MAX_RECOVERIES + 1):
            try:
                return self.rt.get(make_refs())
            except Exception as e:
                if attempt == MAX_RECOVERIES or not self._heal(e):
                    raise

    def _roles(self) -> list:
        return [h for _, hs in self._role_groups() for h in hs]

    def _add_ops(self, p: int, ops) -> None:
        """Control operations for partition ``p`` in the next step."""
        self.pending_ops.setdefault(p, []).append(ops)

    def _filter_delivery(self, arrays: tuple, ids: np.ndarray) -> tuple:
        """A delivery's update arrays restricted to the subscriptions ``ids`` (``listen``)."""
        return _select(arrays, np.isin(arrays[0], ids))

    def _role_maker(self, ckpt: str | None, reuse: list | None):
        """``make(role, cls, i, *args, snapshot=True)`` that builds role ``i`` (resumed from
        ``ckpt`` when given; in a live process of ``reuse`` when one of that role is left),
        and ``finish()`` that waits for every role built and kills the unused live ones."""
        spare: dict[str, list] = {}
        for role, h in reuse or []:
            spare.setdefault(role, []).append(h)
        started, labels = [], []

        def make(role, cls, i, *args, snapshot=True):
            kw = {"resume": (self.store, f"{ckpt}/{role}-{i}")} if ckpt is not None and snapshot else {}
            self._role_specs[role] = (cls, args)
            self._role_args[(role, i)] = (cls, args)
            if spare.get(role):
                h = spare[role].pop()
                started.append(h.reinit.remote(*args, **kw))
                labels.append(f"{role}-{i}")
                return h
            h, ref, how = self._spawn(role, cls, args, kw)
            started.append(ref)
            labels.append(f"{role}-{i}{how}")
            return h

        def finish():
            try:
                self._role_seconds = self._wait_timed(started, labels)     # every role is up
            finally:
                for hs in spare.values():
                    for h in hs:
                        self._kill([h])
        return make, finish

    def _spawn(self, role: str, cls, args: tuple, kw: dict):
        """A process for a role: the warm standby's where there is one, else a new one.
        Returns (handle, a reference that resolves when it is up, how: for the phases)."""
        if role in self._standby:
            h = self._standby.pop(role)
            return h, h.reinit.remote(*args, **kw), " (standby)"
        h = self.rt.create(cls, *args, num_cpus=self.ccfg.actor_cpus, **kw)
        return h, h.pid.remote(), " (new process)"

    def _fill_standby(self) -> None:
        """Start a standby process for every role that has none (``options["standby"]``,
        on by default for a durable cluster on Ray): it loads its kernels (:meth:`warm`)
        while the cluster runs, and the next recovery that needs a new process of that role
        takes it instead (no process start, no kernel loading in the recovery). Called once
        the roles serve (after a start, a restart, or a recovery's replay).

        A standby asks no logical CPU: it idles until it replaces a dead role, whose CPU
        it then uses; asking for one would take a slot from the roles and tasks that run
        (a Spark executor's conversion tasks waited for a CPU that standbys held)."""
        if self.store is None or self.rt.inproc or not self.ccfg.options.get("standby", True):
            return
        for role, (cls, args) in self._role_specs.items():
            if role not in self._standby:
                h = self.rt.create(cls, *args, num_cpus=0)
                self._standby[role] = h
                self._standby_warm[role] = h.warm.remote()

    # ------------------------------------------------------------------ roles
    def _wait_timed(self, refs: list, labels: list[str]) -> dict[str, float]:
        """Wait for ``refs``; seconds until each was done, by label (recovery phases)."""
        t0 = time.perf_counter()
        out, left = {}, list(refs)
        names = dict(zip(refs, labels))
        while left:
            done, left = self.rt.wait(left, num_returns=1)
            for r in done:
                self.rt.get(r)
                out[names[r]] = time.perf_counter() - t0
        return out

    def _kill(self, handles) -> None:
        if self.rt.inproc:
            return
        import ray
        for h in handles:
            try:
                ray.kill(h, no_restart=True)
            except Exception:  # already gone
                pass

    def _live_roles(self) -> list[tuple[str, object]]:
        """(role, handle) of the roles whose process still answers; the others are killed
        for good (a role that hangs is as good as dead)."""
        roles = [(r, h) for r, hs in self._role_groups() for h in hs]
        if self.rt.inproc:
            return roles
        refs = [h.pid.remote() for _, h in roles]
        ready, _ = self.rt.wait(refs, num_returns=len(refs), timeout=5.0)
        ready = set(ready)
        out, dead = [], []
        for (r, h), ref in zip(roles, refs):
            ok = ref in ready
            if ok:
                try:
                    self.rt.get(ref)
                except Exception:
                    ok = False
            (out if ok else dead).append((r, h))
        self._kill([h for _, h in dead])
        return out

    @_guarded
    def warm(self) -> dict[str, list[int]]:
        """Every role loads what it runs (its compiled kernels, from numba's cache) now, so
        that the first steps of a stream do not wait for it, and the standby processes
        finish starting and loading theirs (about 1.5 s of CPU each, which would otherwise
        land in the first seconds of a stream). Returns the pids by role."""
        out = {"coordinator": [os.getpid()]}
        for role, hs in self._role_groups():
            out[role] = self.rt.get([h.warm.remote() for h in hs])
        pending = [ref for role, ref in self._standby_warm.items() if role in self._standby]
        if pending:         # a standby that failed is reported by stats (_standby_state)
            self.rt.wait(pending, num_returns=len(pending), timeout=STANDBY_WARM_SECONDS)
        return out

    def pids(self) -> dict[str, list[int]]:
        """Process ids by role (fault-injection tests kill them)."""
        out = {"coordinator": [os.getpid()]}
        for role, hs in self._role_groups():
            out[role] = self.rt.get([h.pid.remote() for h in hs])
        return out

    def topology(self) -> dict[str, list[int]]:
        """Process ids by what the processes do: every role this cluster runs (none with no
        process), and each duty of the kind (:meth:`_duties`) under the processes that carry it."""
        out = {role: ps for role, ps in self.pids().items() if ps}
        for duty, role in self._duties().items():
            if role in out:
                out[duty] = out[role]
        return out

    def _duties(self) -> dict[str, str]:
        """duty -> the role whose processes carry it (a kind's data that moves between roles
        with the layout, such as the spatial kind's window)."""
        return {}

    # ------------------------------------------------------------------ checkpoints and recovery
    def _maybe_checkpoint(self) -> None:
        if self.store is None:
            return
        if self._pending is not None:
            self._commit_checkpoint(block=False)
        if (self._pending is None and self._n_open
                and time.perf_counter() - self._last_ckpt >= self.ccfg.checkpoint_every):
            self._checkpoint()

    def checkpoint(self) -> int:
        """Snapshot every role now (at a quiesced position) and wait until it is durable;
        returns the epoch."""
        if self.store is None:
            raise RuntimeError("this cluster keeps no durable state (ClusterConfig.state_dir is None)")
        with self.metrics.busy():
            self._checkpoint(wait=True)
        return self.epoch

    def _checkpoint(self, wait: bool = False) -> None:
        """Every role and the coordinator start writing their state under ckpt-<e> (copied
        in memory and written by a thread, or by a forked child: see ``recovery``); log-<e>
        starts at once. The checkpoint commits (the
        MANIFEST switches to e: :meth:`_commit_checkpoint`) when every write is done; until
        then a recovery replays the logs from the MANIFEST's epoch on, log-<e> included.
        ``wait``: until it commits (taken again if a partial recovery abandoned it).

        Where the kind can (:meth:`_snapshot_behind`), the roles' snapshots are only queued
        behind the steps in flight, like an asynchronous cut, and the stream goes on;
        otherwise the steps are finished first (quiesced)."""
        t0 = time.perf_counter()
        self._release_held()                  # the checkpoint's position is after them
        if self._pending is not None and not self._commit_checkpoint(block=True):
            self._abandon_checkpoint()        # a role was rebuilt meanwhile
        # a checkpoint is a delivery cut: the roles then hold no change still to deliver, so
        # a role restored from it reports what the lost one would have (and a partition can
        # snapshot its subscriptions instead of its buffers). The cut is logged as the first
        # record of the new log: a recovery from this checkpoint finds nothing to cut there,
        # one from the previous checkpoint replays its log and then this cut, where it was
        # made. (Nobody sees the cut's delivery before that: the coordinator serves one call
        # at a time.)
        cut = bool(self._group)
        behind = self._snapshot_behind()
        if behind:
            # the cut's takes, then the snapshots, run behind the steps in flight; the cuts
            # still running are delivered before the commit, which writes their deliveries
            if cut:
                self._cut_group(wait=False)
            if self.pending_ops:
                self._dispatch()
        else:
            if cut:
                self._cut_group()
            self._quiesce()
            self._drain_cuts(block=True)
        e = self._log_epoch + 1
        d = f"ckpt-{e}"
        handles = [(h, f"{d}/{role}-{i}") for role, hs in self._snapshot_groups() for i, h in enumerate(hs)]
        snaps = [h.snapshot.remote(self.store, rel) for h, rel in handles]
        if not behind:
            self._get_healing(lambda: snaps)
        t_roles = time.perf_counter()
        # the deliveries since the last checkpoint, up to this position (those of the cuts
        # still running included: no delivery made before the commit is later), are written
        # at the commit; a client gets a running cut's from its flush
        pos = self.last_seq + 1
        deliv = (f"deliv-{e}", pos, [(p, update_arrays(a)) for p, a in self.deliveries
                                     if p > self._deliv_saved_upto], self._deliv_saved_upto)
        self._deliv_chunks.append((f"deliv-{e}", pos))
        self._deliv_saved_upto = pos
        state = {k: getattr(self, k) for k in _COORD_STATE + self.KIND_STATE}
        state["metrics"] = dict(self.metrics.values)
        if self._cuts:
            flush_pos = {c: list(ps) for c, ps in self._flush_pos.items()}
            for p, _, clients in self._cuts:
                for c in clients:
                    flush_pos.setdefault(c, []).append(p)
            state["_flush_pos"] = flush_pos
        # its own state is megabytes: copied in memory
        writers = [write_snapshots(self.store, [(f"{d}/coordinator", lambda: state, shared_config(self.cfg))],
                                   fork=False)]
        self.store.open_log(f"log-{e}")
        self._log_epoch, self._n_open = e, 0
        if cut:
            self._append_log(("cut", None, None))
        self._pending = {"epoch": e, "roles": [h for h, _ in handles], "snaps": snaps,
                         "writers": writers, "deliv": deliv, "t0": t0,
                         "polls": None, "evicted_upto": self.evicted_upto, "journal": len(self._journal),
                         "breaks": self._breaks, "hold": self._hold_point()}
        self._ckpt_parts = {"quiesce_and_copies": t_roles - t0, "coordinator_copy": time.perf_counter() - t_roles,
                            "behind": behind}
        self._last_ckpt = time.perf_counter()
        if wait and not self._commit_checkpoint(block=True):
            self._checkpoint(wait=True)

    def _abandon_checkpoint(self) -> None:
        """Drop the pending checkpoint (a role it snapshots was rebuilt): its deliveries,
        written only at a commit, go into the next one's chunk."""
        pend, self._pending = self._pending, None
        if pend is not None:
            if pend.get("chunk") is not None:
                pend["chunk"].join()          # not written over the next checkpoint's files
            rel, _, _, saved = pend["deliv"]
            self._deliv_chunks = [c for c in self._deliv_chunks if c[0] != rel]
            self._deliv_saved_upto = min(self._deliv_saved_upto, saved)

    def _commit_checkpoint(self, block: bool) -> bool:
        """Switch the MANIFEST to the pending checkpoint once all of it is on disk (``block``:
        wait for that) and drop what is older; False when it is not written yet."""
        pend = self._pending
        e, writers, deliv = pend["epoch"], pend["writers"], pend["deliv"]
        try:
            if pend.get("chunk") is None and not self._snapshots_written(pend, block):
                return False
        except Exception as exc:
            # a role died with its snapshot: a partial recovery abandons this checkpoint
            if not self._heal(exc):
                raise
            if self._pending is pend:
                pend["polls"] = None
            return False
        for w in writers:
            w.done()
        rel, pos, early, saved = deliv
        if pend.get("chunk") is None:
            # the deliveries since the previous checkpoint (a delivery's arrays never change
            # once made): written by a thread at nice 19, as the snapshots are (at 300k
            # update rows per 1,000 messages they are hundreds of megabytes per checkpoint,
            # which held the stream for seconds when written here). Not compressed, the
            # arrays' bytes written from where they are (``StateStore.write_raw``): ids and
            # scores shrink by a fifth only, and lz4 took 6.6 ms of CPU per MB against 0.8
            # to write them as they are (a loaded 2-core machine): under per-call publishes
            # (5 MB per 1,000 messages) that CPU came from the core a solo partition's side
            # thread uses
            chunk = dict(early)
            chunk.update((p, update_arrays(a)) for p, a in self.deliveries if saved < p <= pos)
            pend["chunk"] = Writer(self.store, [(rel, sorted(chunk.items(), key=lambda x: x[0]))], pickled=False,
                                   raw=True)
        if not block and pend["chunk"].is_alive():
            return False
        pend["chunk"].done()
        if not self._config_written:          # the config (its vocabulary: megabytes) once
            self.store.write("CONFIG", self.ccfg)
            self._config_written = True
        self.store.write("MANIFEST", {"epoch": e, "time": time.time(), "format": STATE_FORMAT})
        for old in self.store.list():
            if old.startswith(("ckpt-", "log-")) and old.split(".")[0].split("-")[-1].isdigit() \
                    and int(old.split(".")[0].split("-")[-1]) < e:
                self.store.remove(old)
        # delivery chunks whose every position was evicted when this checkpoint was taken
        # (the checkpoint's own list still names the others)
        # and those of a checkpoint abandoned by a recovery
        self._deliv_chunks = [c for c in self._deliv_chunks if c[1] > pend["evicted_upto"]]
        keep = {rel for rel, _ in self._deliv_chunks}
        for old in self.store.list():
            if old.startswith("deliv-") and old.split(".")[0] not in keep:
                self.store.remove(old)
        self.epoch, self._pending = e, None
        # the steps the new checkpoint holds leave the journal
        del self._journal[:pend["journal"]]
        self._journal_breaks, self._hold = pend["breaks"], pend["hold"]
        if self._current is not None:         # the replay after a recovery starts later now
            self._current -= self._n_logged - self._n_open
        self._n_logged = self._n_open
        self._checkpoints += 1
        self._ckpt_seconds = time.perf_counter() - pend["t0"]
        return True

    def _snapshots_written(self, pend: dict, block: bool) -> bool:
        """Whether every snapshot of the pending checkpoint is on disk and the cuts started
        before it are delivered (``block``: wait for both)."""
        handles, writers = pend["roles"], pend["writers"]
        if block:
            self.rt.get(pend["snaps"] + [h.snapshot_written.remote() for h in handles])
        else:
            # poll without waiting: a role answers after the steps queued before the poll
            if pend["polls"] is None:
                pend["polls"] = pend["snaps"] + [h.snapshot_done.remote() for h in handles]
            ready, _ = self.rt.wait(pend["polls"], num_returns=len(pend["polls"]), timeout=0)
            if len(ready) < len(pend["polls"]):
                return False
            done, pend["polls"] = all(self.rt.get(ready)), None
            if not done or any(w.is_alive() for w in writers):
                return False
        if self._cuts:                    # the cuts started before the checkpoint first
            self._drain_cuts(block)
            if self._pending is not pend or (self._cuts and self._cuts[0][0] <= pend["deliv"][1]):
                return False
        return True

    def _recovery_stats(self) -> dict:
        return {"durable": self.store is not None,
                "state": None if self.store is None else self.store.path(""),
                "epoch": self.epoch, "checkpoints": self._checkpoints,
                "checkpoint_pending": self._pending is not None,
                # seconds from the quiesce to the commit (the stream goes on after the copies)
                "last_checkpoint_seconds": self._ckpt_seconds, "last_checkpoint_parts": self._ckpt_parts,
                "log_records": self._n_logged, "recoveries": list(self.recoveries),
                "standby": self._standby_state()}

    def _standby_state(self) -> dict[str, str]:
        """role -> 'warm', 'warming' or the error its warm-up raised, for each standby."""
        out = {}
        for role, ref in self._standby_warm.items():
            if role not in self._standby:
                continue
            ready, _ = self.rt.wait([ref], num_returns=1, timeout=0)
            if not ready:
                out[role] = "warming"
                continue
            try:
                self.rt.get(ref)
                out[role] = "warm"
            except Exception as e:       # reported, not raised: the standby may still serve
                out[role] = f"{type(e).__name__}: {e}"
        return out

    def _load_checkpoint(self, reuse: list | None = None) -> list:
        """Coordinator state and every role from the MANIFEST's checkpoint (in the live role
        processes ``reuse`` where given); returns the log records since it (the logs of its
        epoch and of every later, uncommitted snapshot, in order)."""
        t0 = time.perf_counter()
        man = self.store.read("MANIFEST")
        e = man["epoch"]
        state = self.store.read(f"ckpt-{e}/coordinator", shared_config(self.cfg))
        self._read_seconds = time.perf_counter() - t0
        self.metrics.values.update(state.pop("metrics"))
        live_evicted = self.evicted_upto
        for k, v in state.items():
            setattr(self, k, v)
        if "deliveries" in state:             # a checkpoint of an older version
            pass
        elif reuse is not None:
            # this coordinator lives (a role died): its deliveries up to the checkpoint are the
            # chunks' (the replay makes the later ones again); those it evicted since stay gone
            self.evicted_upto = max(self.evicted_upto, live_evicted)
            self.deliveries = deque((p, a) for p, a in self.deliveries
                                    if self.evicted_upto < p <= self._deliv_saved_upto)
        else:                                 # a restart: the retained deliveries from the chunks
            self.deliveries = deque((p, a) for rel, last in self._deliv_chunks if last > self.evicted_upto
                                    for p, a in self.store.read(rel) if p > self.evicted_upto)
        self.inflight.clear()
        self._cuts.clear()                    # their records are in the log: the replay cuts again
        self.pending_ops = {}
        self._reset_transient()
        if self._staged is not None:          # staged parts are not in the log: that load fails
            self._staged, self._stage_lost = None, True
        self.epoch = e
        self._pending = None                  # a checkpoint not committed is abandoned
        self._journal, self._journal_breaks, self._hold = [], self._breaks, self._hold_point()
        self._build_roles(f"ckpt-{e}", reuse)
        records, x = [], e
        while self.store.exists(f"log-{x}"):
            records += self.store.read_log(f"log-{x}")
            x += 1
        self._log_epoch = max(self._log_epoch, x - 1)
        return records

    def _recover(self, cause: BaseException) -> list:
        """A role died: rebuild every role from the checkpoint and replay the log (each call
        again, with its delivery cuts). Returns the replayed calls' results."""
        t0 = time.perf_counter()
        for attempt in range(MAX_RECOVERIES):
            try:
                self._replaying = True
                live = self._live_roles()
                t1 = time.perf_counter()
                records = self._load_checkpoint(live)
                t2 = time.perf_counter()
                results = [self._apply(r) for r in records]
                t3 = time.perf_counter()
                self._fill_standby()              # after the replay: it needs the cores more
                # no checkpoint here: the log goes on from the same checkpoint
                phases = {"find_dead": t1 - t0, "restore": t2 - t1, "replay": t3 - t2,
                          "read_coordinator": self._read_seconds, "restore_by_role": self._role_seconds}
                self.recoveries.append({"cause": type(cause).__name__, "mode": "full", "seconds": t3 - t0, "phases": phases,
                                        "replayed_calls": len(records), "attempts": attempt + 1,
                                        "position": self.last_seq + 1, "time": time.time()})
                return results
            except Exception as e:
                if not is_role_death(e):
                    raise
                cause = e
            finally:
                self._replaying = False
        raise RuntimeError(f"rankcast: recovery failed {MAX_RECOVERIES} times") from cause

    def _resume_from_store(self) -> None:
        """Start from the durable state (after the coordinator's own death, or a restart of
        the whole cluster): the checkpoint, then the log replayed."""
        t0 = time.perf_counter()
        check_resumable(self.store, self.ccfg)
        self._depth += 1
        self._replaying = True
        try:
            records = self._load_checkpoint()
            for r in records:
                self._apply(r)
            self._checkpoint(wait=True)
        finally:
            self._depth -= 1
            self._replaying = False
        self.recoveries.append({"cause": "restart", "mode": "full", "seconds": time.perf_counter() - t0,
                                "replayed_calls": len(records), "attempts": 1,
                                "position": self.last_seq + 1, "time": time.time()})

    # ------------------------------------------------------------------ the log
    def _log_apply(self, rec: tuple):
        """Write-ahead: the record reaches the log, then it is applied."""
        if self.store is not None:
            if self._current is None:
                self._current = self._n_logged
            self._append_log(rec)
        return self._apply(rec)

    def _append_log(self, rec: tuple) -> None:
        """``rec`` to the open log, counted among the records since the committed checkpoint
        (``_n_logged``) and in the open log (``_n_open``)."""
        self.store.append(rec)
        self._n_logged += 1
        self._n_open += 1

    def _apply(self, rec: tuple):
        """Apply one logged call (live, or replayed after a recovery). Pipelined publishes
        that wait in the coordinator (:meth:`_release_held`) go out before any other call."""
        kind = rec[0]
        if kind != "publish" or rec[3]:
            self._release_held()
        if kind == "publish":
            out = self._apply_publish(*rec[1:5])
        elif kind == "subscribe":
            out = self._apply_subscribe(*rec[1:3])
        elif kind == "unsubscribe":
            out = self._apply_unsubscribe(rec[1])
        elif kind == "flush":
            out = self._apply_flush(rec[1])
        elif kind == "cut":
            out = self._cut_group(wait=False)
        elif kind == "load":
            out = None
            for out in self._apply_load(rec[1], rec[2]):
                pass
        else:
            raise RuntimeError(f"unknown log record {kind!r}")
        client, token = rec[-2], rec[-1]
        if kind != "cut" and client is not None and token is not None:
            self._done[client] = (token, out)
            self._done.move_to_end(client)
            while len(self._done) > MAX_CLIENTS:
                self._done.popitem(last=False)
        return out

    def _retried(self, client, token):
        """The recorded result when this call (client, token) was applied already (a client
        resending a call after the coordinator restarted), else ``_NOT_DONE``."""
        if client is None or token is None:
            return _NOT_DONE
        got = self._done.get(client)
        return got[1] if got is not None and got[0] == token else _NOT_DONE

    def ready(self) -> bool:
        return True

    def config(self) -> ClusterConfig:
        return self.ccfg

    # ------------------------------------------------------------------ subscriptions
    @_guarded
    def subscribe(self, subs, client=None, token=None) -> None:
        if (done := self._retried(client, token)) is not _NOT_DONE:
            return done
        with self.metrics.busy():
            batch, pending = self._encode_subscriptions(subs)
            check_not_live(batch.ids, self.live, 0, self.ITEM)
            self._log_apply(("subscribe", batch, pending, client, token))

    def _apply_subscribe(self, batch, pending) -> None:
        self._commit(pending)
        if len(batch) == 0:
            return
        self._cut_group()
        self._place(batch)
        self._dispatch()
        self._quiesce()
        self._baseline(batch.ids)
        self.counters["calls"] += 1

    @_guarded
    def unsubscribe(self, ids, client=None, token=None) -> None:
        if (done := self._retried(client, token)) is not _NOT_DONE:
            return done
        with self.metrics.busy():
            arr = check_ids_arg(ids)
            missing = [i for i in arr.tolist() if i not in self.live]
            if missing:
                raise UnknownSubscription(f"unknown {self.ITEM} id={missing[0]!r}")
            if len(arr) == 0:
                return
            self._log_apply(("unsubscribe", arr, client, token))

    # ------------------------------------------------------------------ bulk load
    def stage_batch(self, subs) -> int:
        """Bulk load, phase 1: validate and encode one part of the table. Nothing takes effect
        before ``commit_load``; an error anywhere in the table (positions count from the
        table's first row) discards every staged part, so a bad table loads nothing."""
        with self.metrics.busy():
            if self._staged is None:
                self._staged, self._staged_ids, self._staged_terms = [], set(), []
                self._stage_mark = self._mark()
            offset = sum(len(b) for b in self._staged)
            try:
                try:
                    batch, pending = self._encode_subscriptions(subs)
                except InvalidInput as e:
                    raise shift_position(e, offset) from None
                check_not_live(batch.ids, self.live, offset, self.ITEM)
                for i, sid in enumerate(batch.ids.tolist()):
                    if sid in self._staged_ids:
                        raise item_error("subscription", offset + i, sid, "id", "duplicate id within the table")
            except Exception:
                self.abort_load()
                raise
            self._commit(pending)   # later parts must see the ids of new terms
            self._staged_terms.append(pending)
            self._staged_ids.update(batch.ids.tolist())
            self._staged.append(batch)
            return len(batch)

    def abort_load(self) -> None:
        """Drop what ``stage_batch`` staged, and the terms it met."""
        if self._staged is not None:
            self._rollback(self._stage_mark)
        self._staged = None

    def commit_load(self, client=None, token=None):
        """Bulk load, phase 2, in one call: place every staged part (routed by the policy, one
        index build per partition and part) and dispatch its step, which computes the initial
        results. A generator (Ray streams its values): yields (rows whose initial results are
        in, rows staged) as steps finish, the last one once everything is in place. The
        staged parts and their terms are one log record: a recovery loads them whole."""
        if self._stage_lost:
            self._stage_lost = False
            raise RuntimeError("a recovery during this bulk load dropped its staged parts; nothing "
                               "of it was loaded: load the table again")
        staged, self._staged = self._staged or [], None
        terms = self._staged_terms if staged else []
        rec = ("load", staged, terms, client, token)
        total = sum(len(b) for b in staged)
        if self.store is not None:
            self._append_log(rec)
        try:
            with self.metrics.busy():
                for progress in self._apply_load(staged, terms):
                    yield progress
        except Exception as e:
            if self.store is None or not is_role_death(e):
                raise
            self._depth += 1
            try:
                self._recover(e)
            finally:
                self._depth -= 1
        self._done[client] = (token, (total, total))
        self._maybe_checkpoint()
        yield total, total

    def _apply_load(self, staged: list[SubscriptionBatch], terms: list):
        for pending in terms:
            self._commit(pending)
        total = sum(len(b) for b in staged)
        rows_of_step: dict[int, int] = {}
        placed = 0

        def done() -> int:
            return placed - sum(rows_of_step.get(e[0], 0) for e in self.inflight)

        self._cut_group()
        for batch in staged:
            if not len(batch):
                continue
            self._place(batch)
            self._dispatch()
            rows_of_step[self.step] = len(batch)
            placed += len(batch)
            yield done(), total         # _dispatch waits for old steps beyond max_in_flight
        while self.inflight:
            self._harvest(self.inflight.popleft())
            yield done(), total
        self._quiesce()
        if staged:
            self._baseline(np.concatenate([b.ids for b in staged]))
        yield total, total

    # ------------------------------------------------------------------ publish
    @_guarded
    def publish(self, items, wait: bool = True, client=None, token=None, **kw):
        """wait=True: the update arrays of this call (its delivery). wait=False: (items
        published, items applied) so far, once the call's steps are dispatched (or, behind
        busy roles, gathered into a later step: :meth:`Coordinator._gather`); its
        changes are delivered at the next cut (at most ``delivery_interval`` seconds later,
        or the caller's ``flush``). ``kw``: the kind's per-call options."""
        if (done := self._retried(client, token)) is not _NOT_DONE:
            return for_client(done)
        t0 = time.perf_counter()
        with self.metrics.busy():
            batch, extra = self._encode_publish(items, **kw)
        out = self._log_apply(("publish", batch, extra, bool(wait), client, token))
        if not wait:
            self._cut_if_due()
        self._drain_cuts(block=False)
        self._after_publish()
        self.counters["publish_seconds"] += time.perf_counter() - t0
        return for_client(out)

    def _encode_publish(self, items, **kw):
        """(batch, what its log record carries besides it) of a publish call, validated."""
        raise NotImplementedError

    def _after_publish(self) -> None:
        """What the kind does at the end of every publish call (load monitoring)."""

    def _release_held(self) -> None:
        """Dispatch the pipelined publishes that wait in the coordinator for busy roles (a
        kind that gathers them into larger steps: :meth:`Coordinator._gather`); every call
        other than a pipelined publish, every cut and every checkpoint calls it first, so
        that they come after those messages in the stream, as they were called."""

    def _publish_result(self, n: int, wait: bool, client):
        """The end of an applied publish of ``n`` items: its delivery (wait), or joining the
        group of pipelined calls that the next cut delivers."""
        self.counters["calls"] += 1
        if not wait:
            if n:
                if not self._group:
                    self._group_t0 = time.perf_counter()
                self._group.add(client)
            return self.published, self.applied_pos + 1
        return self._cut()

    # ------------------------------------------------------------------ delivery
    @_guarded
    def flush(self, client=None, token=None) -> tuple:
        """Wait for the pipelined calls, deliver them, and return the updates of the
        deliveries that hold this client's pipelined calls since its last flush (per
        subscription its latest list)."""
        if (done := self._retried(client, token)) is not _NOT_DONE:
            return for_client(done)
        t0 = time.perf_counter()
        out = self._log_apply(("flush", client, token))
        self.counters["publish_seconds"] += time.perf_counter() - t0
        return for_client(out)

    def _apply_flush(self, client) -> tuple:
        with self.metrics.busy():
            self._cut_group()
            want = set(self._flush_pos.pop(client, ()))
            outs = [arr for pos, arr in self.deliveries if pos in want]
        if not outs:
            return _NO_UPDATES
        return outs[0] if len(outs) == 1 else _latest([update_arrays(o) for o in outs])

    def _cut(self) -> tuple:
        """Finish every step and deliver what changed since the previous cut, at the
        current stream position (the number of messages published). Returns the arrays.
        Where the kind can (:meth:`_emit_start`) and nothing is left to dispatch, the
        updates are asked for behind the steps in flight before waiting for them: each
        role answers right after its last step instead of a round trip later."""
        self._release_held()
        handle = None
        if self._nothing_to_dispatch():
            self._drain_cuts(block=True)    # the cuts started before come first
            handle = self._emit_start()
        self._quiesce()
        self._drain_cuts(block=True)
        out = self._emit() if handle is None else self._emit_finish(handle, block=True)
        if n_updates(out):
            self._deliver(self.last_seq + 1, out)
        return out

    def _nothing_to_dispatch(self) -> bool:
        """Whether finishing the steps in flight dispatches no more of them."""
        return not self.pending_ops

    def _cut_group(self, wait: bool = True):
        """Deliver the pipelined calls not yet delivered; each client among them will get
        the delivery from its flush. ``wait=False`` (the delivery interval's cut, logged as a
        ``cut`` record): where the kind can (:meth:`_emit_start`), the cut only starts here,
        behind the steps in flight, and is delivered once done (:meth:`_drain_cuts`, at the
        next call or listener poll), so the stream does not stall at every cut. A log replay
        cuts at once, at the same positions. ``wait``: also every started cut is delivered."""
        self._release_held()
        if not self._group:
            if wait:
                self._drain_cuts(block=True)
            return None
        clients, self._group = self._group, set()
        pos = self.last_seq + 1
        if not wait and not self._replaying:
            handle = self._emit_start()
            if handle is not None:
                self._cuts.append((pos, handle, clients))
                return None
        self._delivered(pos, self._cut(), clients)
        return None

    def _cut_if_due(self) -> None:
        """The pipelined calls' cut, once the oldest of them waited ``delivery_interval``."""
        if self._group and time.perf_counter() - self._group_t0 >= self.ccfg.delivery_interval:
            if self.store is not None:
                self._append_log(("cut", None, None))
            self._apply(("cut", None, None))

    def _drain_cuts(self, block: bool) -> None:
        """Deliver the started cuts that are done, in order (``block``: every one)."""
        while self._cuts:
            pos, handle, clients = self._cuts[0]
            out = self._emit_finish(handle, block)
            if out is None:
                return
            self._cuts.popleft()
            if n_updates(out):
                self._deliver(pos, out)
            self._delivered(pos, out, clients)

    def _delivered(self, pos: int, out: tuple, clients) -> None:
        """The clients of a group's cut at ``pos`` get its delivery from their flush."""
        if not n_updates(out):
            return
        for c in clients:
            got = self._flush_pos.setdefault(c, [])
            if len(got) >= 64:       # a client that never flushes: only what is kept
                got[:] = [p for p in got if p > self.evicted_upto]
            got.append(pos)

    def _emit_start(self):
        """Start taking the updates since the previous cut behind the steps in flight, without
        waiting; a handle for :meth:`_emit_finish`. None: the kind cuts only when quiesced."""
        return None

    def _emit_finish(self, handle, block: bool):
        """The update arrays of a started cut; None while not done (``block=False``)."""
        raise NotImplementedError

    def _deliver(self, pos: int, arrays) -> None:
        if self.deliveries and self.deliveries[-1][0] == pos:      # same position: one delivery
            arrays = _latest([update_arrays(self.deliveries.pop()[1]), update_arrays(arrays)])
        self.deliveries.append((pos, arrays))
        self.metrics.inc("updates", n_updates(arrays))
        while self.deliveries and self.deliveries[0][0] <= pos - self.ccfg.retention:
            self.evicted_upto = self.deliveries.popleft()[0]

    def position(self) -> int:
        """The current stream position: messages published so far (deliveries carry the
        position of the call that caused them)."""
        return self.last_seq + 1

    @_guarded
    def deliveries_from(self, from_position: int, ids=None, limit: int = 256):
        """Deliveries at positions >= ``from_position`` (at most ``limit``), restricted to the
        subscriptions ``ids`` (None: all) and skipping those left empty; returns (list of
        (position, arrays), the position to ask from next). A listener's poll also cuts the
        pipelined calls once they waited ``delivery_interval`` and delivers the started cuts
        that are done: a stream of pipelined calls reaches listeners without a flush."""
        if isinstance(from_position, bool) or not isinstance(from_position, Integral) or from_position < 0:
            raise InvalidInput(f"listen: field 'from_position': must be a non-negative int, got {from_position!r}")
        self._cut_if_due()
        self._drain_cuts(block=False)
        if from_position <= self.evicted_upto:
            raise InvalidInput(f"listen: field 'from_position': position {from_position} is no longer kept "
                               f"(retention {self.ccfg.retention}); the oldest kept is {self.evicted_upto + 1}")
        picked = []
        for pos, arr in reversed(self.deliveries):
            if pos < from_position:
                break
            picked.append((pos, arr))
        picked.reverse()
        picked = [(p, update_arrays(a)) for p, a in picked[:limit]]
        nxt = picked[-1][0] + 1 if picked else from_position
        if ids is not None:
            ids = np.asarray(ids, np.int64)
            picked = [(p, self._filter_delivery(a, ids)) for p, a in picked]
            picked = [(p, a) for p, a in picked if len(a[0])]
        return picked, nxt

    # ------------------------------------------------------------------ lifecycle
    def shutdown(self, keep_state: bool = False) -> None:
        """Stop every role; the durable state is removed unless ``keep_state`` (then
        ``Cluster.start`` with the same name and state_dir resumes from it)."""
        if self.store is not None:
            if self._pending is not None:     # its writes end before the state is kept or removed
                try:
                    self._commit_checkpoint(block=True)
                except Exception:         # a role already gone: the older epoch stays the state
                    self._pending = None
            if keep_state:
                self.store.close_log()
            else:
                self.store.destroy()
        self._kill(self._roles() + list(self._standby.values()))
        self._standby = {}


class Coordinator(CoordinatorBase):
    """The spatial-keyword kind (Skype / DSkype): see the module docstring."""

    KIND_STATE = ("encoder", "clock", "exp_dispatched", "win_ids", "win_fifo", "_stash", "_last_busy",
                  "monitor_log")

    def _init_kind(self, sample) -> None:
        ccfg, cfg, opts = self.ccfg, self.cfg, self.ccfg.options
        self.encoder = Encoder(cfg.bounds, cfg.vocabulary)
        self.clock = WindowClock(cfg)
        self.policy: Policy = make_policy(ccfg.policy, ccfg.partitions, cfg.bounds, cfg.max_dist,
                                          window=cfg.window or int(opts.get("window_estimate", 100_000)),
                                          options=opts)
        self.policy.fit(*self._encode_sample(sample))
        self.exp_dispatched = -1
        self.win_ids: dict[int, int] = {}
        self.win_fifo: deque[tuple[np.ndarray, np.ndarray]] = deque()
        self.realloc_queue: list[dict] = []
        self._stash: list[tuple] = []              # direct-mode updates taken before a move
        self._taken = None                         # (counts, refs): the takes of the last step
        self._last_busy = np.zeros(ccfg.partitions)
        self.counters.update(reallocations=0, realloc_new_replicas=0, load_checks=0, rebalances=0,
                             rebalance_moved=0, inline_steps=0, stored_steps=0, held_calls=0,
                             gathered_steps=0, ticks=0)
        self._held: list[tuple] = []               # pipelined (msgs, seqs, exp) not dispatched yet
        self._held_n = 0
        self._tick_step = None                     # the step whose end the last tick() awaits
        self._next_check = time.perf_counter() + ccfg.monitor_every
        self.monitor_log: deque[dict] = deque(maxlen=20)   # the latest automatic actions

    def _reset_transient(self) -> None:
        self.realloc_queue = []
        self._taken = None
        # held messages are in the log, which a recovery replays
        self._held, self._held_n, self._tick_step = [], 0, None

    def _hold_point(self):
        return self.exp_dispatched

    def _snapshot_behind(self) -> bool:
        # direct mode: every subscription in one partition, no replica to reallocate
        return self.direct and not self._replaying and not self.realloc_queue

    def _journal_on(self) -> bool:
        """Whether steps are journaled for partial recoveries: a durable cluster on Ray in
        direct mode (no aggregator state depends on a partition's past)."""
        return self.store is not None and self.direct and not self.rt.inproc

    def _heal(self, cause: BaseException) -> bool:
        """Partial recovery, in place, of dead subscription partitions and window shards
        (direct mode): the call in progress goes on afterwards as if nothing happened.

        1. Every step in flight ends (the dead roles' calls fail at once); roles that do not
           answer are dead.
        2. Each dead role gets a process (the standby's) and its snapshot of the committed
           checkpoint (a partition's is its subscriptions: it rebuilds its buffers by one
           re-evaluation as of the checkpoint, in ``resume``); the live roles keep their state.
        3. The journal of the steps since that checkpoint catches them up: a new shard
           appends every step again; a partition, new or live, gets the steps after the
           last it applied (a live one first finishes a step that a shard's death held, see
           ``SubscriptionPartition.resume``); a new partition's updates taken at the cuts
           already delivered are dropped (the shards answer re-evaluations of past steps by
           sequence range: they keep what expired since the checkpoint, ``hold``).

        False (nothing done) when a full recovery is needed instead: another role died, the
        roles' layout changed since the checkpoint (rebalancing), or no journal is kept."""
        if (not self._journal_on() or self._replaying or self._breaks != self._journal_breaks
                or not is_role_death(cause)):
            return False
        t0 = time.perf_counter()
        waiting = [r for _, refs, app, *_ in self.inflight for r in list(refs) + list(app)]
        waiting += [r for _, (_, counts, _), _ in self._cuts for r in counts]
        if waiting:
            self.rt.wait(waiting, num_returns=len(waiting), timeout=HEAL_SETTLE_SECONDS)
        live = {id(h) for _, h in self._live_roles()}
        dead = [(role, i) for role, hs in self._role_groups() for i, h in enumerate(hs) if id(h) not in live]
        if any(role not in ("partition", "shard") for role, _ in dead):
            return False
        if self._pending is not None and dead:   # its snapshots are not all there: abandoned
            self._abandon_checkpoint()
        t1 = time.perf_counter()
        ready, labels = [], []
        for role, i in sorted(dead, key=lambda d: d[0] != "shard"):     # shards first
            cls, args = self._role_args[(role, i)]
            h, ref, how = self._spawn(role, cls, args, {"resume": (self.store, f"ckpt-{self.epoch}/{role}-{i}")})
            (self.shards if role == "shard" else self.parts)[i] = h
            ready.append(ref)
            labels.append(f"{role}-{i}{how}")
        self._role_seconds = self._wait_timed(ready, labels)
        t2 = time.perf_counter()
        P = len(self.parts)
        new_shards = [i for role, i in dead if role == "shard"]
        new_parts = {i for role, i in dead if role == "partition"}
        hold = -1 if self._hold is None else self._hold     # replayed steps ask from there on
        steps = [x for x in self._journal if x[0] == "step"]
        for s in new_shards:
            for _, j, pos_end, exp_end, ops, payloads, appended, refs in steps:
                appended[s] = self.shards[s].append.remote(j, payloads[P + s], exp_end, hold, hold)
        applied = dict(enumerate(self.rt.get([pt.resume.remote(self.shards, self.aggs) for pt in self.parts])))
        t_rebuilt = time.perf_counter()
        sent, replayed = [], 0
        for x in self._journal:
            if x[0] == "take":
                # a cut: a new partition takes again (dropped where the cut was delivered), and
                # so does a live one whose take a held step failed (it took nothing)
                counts, refs = x[1], x[2]
                for p in range(P):
                    if p in new_parts or self._failed(counts[p]):
                        counts[p], refs[p] = self.parts[p].take_updates.options(num_returns=2).remote(counted=True)
                        sent.append(counts[p])
                continue
            _, j, pos_end, exp_end, ops, payloads, appended, refs = x
            for p in range(P):
                if applied[p] < j:
                    refs[p] = self.parts[p].process.remote(j, pos_end, exp_end, ops.get(p), payloads[p], list(appended))
                    sent.append(refs[p])
                    replayed += 1
                elif p not in new_parts and self._failed(refs[p]):     # held, then finished by resume
                    refs[p] = self.rt.put({"step": j, "partition": p})
        self.rt.get(sent + [a for x in steps for a in x[6]])
        t3 = time.perf_counter()
        self.recoveries.append({
            "cause": type(cause).__name__, "mode": "partial", "seconds": t3 - t0,
            "restored": labels, "replayed_calls": 0, "replayed_steps": replayed, "attempts": 1,
            "phases": {"find_dead": t1 - t0, "restore": t2 - t1, "rebuild": t_rebuilt - t2,
                       "replay": t3 - t_rebuilt, "restore_by_role": self._role_seconds},
            "position": self.last_seq + 1, "time": time.time()})
        self._fill_standby()
        return True

    def _failed(self, ref) -> bool:
        """Whether a finished role call failed (a partial recovery's settled references)."""
        try:
            self.rt.get(ref)
        except Exception:
            return True
        return False

    def _role_groups(self) -> list[tuple[str, list]]:
        return [("distributor", self.dists), ("partition", self.parts), ("shard", self.shards),
                ("aggregator", self.aggs)]

    def _snapshot_groups(self) -> list[tuple[str, list]]:
        return [("partition", self.parts), ("shard", self.shards), ("aggregator", self.aggs)]

    def _duties(self) -> dict[str, str]:
        # the window: its shards, or the partitions that hold it whole (solo)
        return {"window": "shard" if self.shards else "partition"}

    # bulk-load encoding hooks
    def _encode_subscriptions(self, subs):
        return self.encoder.encode_subscriptions(subs)

    def _commit(self, pending) -> None:
        self.encoder.commit(pending)

    def _mark(self):
        return self.encoder.terms.mark()

    def _rollback(self, mark) -> None:
        self.encoder.terms.rollback(mark)


    def _build_roles(self, ckpt: str | None, reuse: list | None = None) -> None:
        """Create every role (resumed from the snapshots under ``ckpt`` when given). After a
        death, ``reuse`` lists the live role processes: each becomes a role again in place
        (:meth:`Recoverable.reinit`), and only the dead ones get a new process."""
        ccfg, cfg, opts = self.ccfg, self.rt.share(self.cfg), self.ccfg.options
        name, export = ccfg.name, self._export
        delay, seed = float(opts.get("delay", 0.0)), int(opts.get("seed", 0))
        P, S, A, D = self.policy.n_partitions, ccfg.window_shards, ccfg.aggregators, ccfg.distributors
        make, finish = self._role_maker(ckpt, reuse)
        self.solo = self._solo_layout(ckpt)
        # direct: every subscription lives in one partition, whose core reports its updates
        # (and whose snapshot is its subscriptions: see SubscriptionPartition); replicated:
        # the aggregators merge the replicas' lists
        self.direct = (not self.policy.replicates) or ccfg.partitions == 1
        if self.solo:
            # its index drops what each step expires: the window and one step
            held = 0 if self.cfg.window is None else self.cfg.window + self._max_step()
            self.shards, self.aggs, self.dists, self._part_args = [], [], [], ()
            # the only partition: its subscriptions in two halves, a thread each (SoloPartition)
            halves = P == 1 and bool(opts.get("solo_halves", True))
            # the match's side thread (SoloPartition; options["solo_side"]=False: none)
            side = bool(opts.get("solo_side", True))
            self.parts = [make("partition", SoloPartition, p, cfg, p, held, name, export, delay, seed, halves,
                               side) for p in range(P)]
        else:
            # a shard's index holds its share of the window plus that of the steps in flight
            held = 0 if self.cfg.window is None else -(-(self.cfg.window + ccfg.max_in_flight * self._max_step()) // S)
            self.shards = [make("shard", WindowShard, s, cfg, s, name, export, delay, seed, held)
                           for s in range(S)]
            self.aggs = [make("aggregator", Aggregator, a, a, P, name, export) for a in range(A)]
            # with one partition there is nothing to reallocate to: no prefix checks
            self._part_args = (self.shards, self.aggs, self.rt, self.policy.prefix and ccfg.partitions > 1,
                               bool(opts.get("merge_via_aggregator", True)), name, export, delay, seed,
                               self.direct)
            part_cfg = self._partition_cfg()
            pcfg = cfg if part_cfg is self.cfg else self.rt.share(part_cfg)
            self.parts = [make("partition", SubscriptionPartition, p, pcfg, p, *self._part_args) for p in range(P)]
            self.dists = [make("distributor", Distributor, d, self.policy, S, d, name, export, delay, seed,
                               snapshot=False) for d in range(D)]
        finish()
        if ckpt is not None:
            # restored partitions rebuild their buffers as of the checkpoint now, while the
            # shards hold what that asks about (the next steps let them drop it)
            self.rt.get([p.resume.remote(self.shards, self.aggs) for p in self.parts])

    def _max_step(self) -> int:
        """The most messages of one step: a call's (``batch_size``) or gathered ones'."""
        return max(self.ccfg.batch_size, getattr(self.ccfg, "coalesce", 0))

    def _partition_cfg(self) -> EngineConfig:
        """The subscription partitions' engine configuration: the engine's, with the policy's
        finer Quadtree leaves (``Policy.leaf_capacity``) when there are several partitions:
        a partition of a replicating policy holds a few thousand replicas, which the
        engine's leaf capacity leaves in a few loose leaves. One partition holds every
        subscription, as the engine does."""
        a = self.policy.leaf_capacity
        if a is None or self.ccfg.partitions == 1 or a >= self.cfg.leaf_capacity:
            return self.cfg
        return self.cfg.replace(leaf_capacity=a)

    def _solo_layout(self, ckpt: str | None) -> bool:
        """Whether every partition is a :class:`SoloPartition` holding the whole window in its
        own process (no window shard, distributor or aggregator process): one partition, or
        up to ``options["solo_partitions"]`` (default :data:`SOLO_PARTITIONS`) under a policy
        that sends every message to every partition and keeps every subscription in one
        (hash, location), that no split can grow (a location policy splits up to
        ``max_partitions``); unless ``options["solo"]`` is False, or the checkpoint resumed
        from was taken with window shards of their own."""
        opts, P = self.ccfg.options, self.policy.n_partitions
        if not opts.get("solo", True) or (self.policy.name == "location" and self.ccfg.partition_cap > P):
            return False
        if P > 1 and (P > int(opts.get("solo_partitions", SOLO_PARTITIONS)) or not self.policy.broadcasts
                      or self.policy.replicates):
            return False
        return ckpt is None or not self.store.exists(f"{ckpt}/shard-0")

    def encoder_copy(self) -> Encoder:
        """An encoder with this one's vocabulary and committed terms (nothing pending): what
        it encodes without meeting a new term, this one would encode the same."""
        enc = Encoder(self.cfg.bounds, self.cfg.vocabulary)
        enc.terms.extra = dict(self.encoder.terms.extra)
        return enc

    def _encode_sample(self, sample):
        """Encode a fitting sample without committing its new terms: term ids must evolve
        exactly as an Engine's would for the same calls (scores sum terms in id order)."""
        if sample is None:
            return None, None
        subs, msgs = sample if isinstance(sample, tuple) else (sample, None)
        enc = self.encoder_copy()
        sb = mb = None
        if subs is not None:
            sb, pending = enc.encode_subscriptions(subs)
            enc.commit(pending)
        if msgs is not None:
            mb = enc.encode_messages(msgs, time_window=False)[0]
        return sb, mb

    # ------------------------------------------------------------------ calls
    def _place(self, batch: SubscriptionBatch) -> None:
        """Initial placement of new subscriptions (prefix policies: one term, grown later)."""
        plen = self.policy.initial_prefix(batch)
        routing = self.policy.route_subscriptions(batch, plen)
        self.live.update(zip(batch.ids.tolist(), plen.tolist()))
        self._add_replicas(batch, plen, routing, np.arange(len(batch)))

    def _add_replicas(self, batch: SubscriptionBatch, plen: np.ndarray, routing, rows: np.ndarray) -> None:
        """Additions of the ``rows`` of ``batch`` to every partition ``routing`` places them
        in, with their replica counts and, where the policy ``index_placed``, the terms each
        replica indexes (those placing it there)."""
        reps = routing.counts()
        where = self.policy.placement(batch, plen) if self.policy.index_placed else None
        lens = np.diff(batch.offsets)
        for p, at in enumerate(routing.rows_of(self.policy.n_partitions)):
            r = np.intersect1d(at, rows) if len(rows) < len(batch) else at
            if len(r):
                indexed = None if where is None else where[runs(batch.offsets[r], lens[r])[1]] == p
                self._add_ops(p, PartitionOps(add=batch.take(r), add_plen=plen[r], add_replicas=reps[r],
                                              add_indexed=indexed))

    def _apply_unsubscribe(self, arr: np.ndarray) -> None:
        self._cut_group()
        for i in arr.tolist():
            del self.live[i]
        for p in range(self.policy.n_partitions):
            self._add_ops(p, PartitionOps(remove=arr))
        self._dispatch()
        self._quiesce()
        if not self.direct:
            self._ship()
            self.rt.get([agg.forget.remote(arr[np.mod(arr, len(self.aggs)) == a])
                         for a, agg in enumerate(self.aggs)])
        self.counters["calls"] += 1

    def _encode_publish(self, msgs):
        batch, pending = self.encoder.encode_messages(msgs, time_window=self.cfg.time_window)
        self._check_messages(batch)
        return batch, pending

    def _after_publish(self) -> None:
        self._monitor()

    def _apply_publish(self, batch: MessageBatch, pending, wait: bool, client):
        with self.metrics.busy():
            self.encoder.commit(pending)
            n = len(batch)
            if wait:
                self._cut_group()
            if n:
                seqs = np.arange(self.last_seq + 1, self.last_seq + 1 + n, dtype=np.int64)
                exp = self.clock.advance(seqs, batch.t)
                self.last_seq = int(seqs[-1])
                self.published += n
                self._window_add(batch.ids, seqs, int(exp[-1]))
                step = self.ccfg.batch_size
                pieces = [(batch.take(np.arange(a, min(n, a + step))) if n > step else batch,
                           seqs[a:a + step], exp[a:a + step]) for a in range(0, n, step)]
                if not wait and self._gathering():
                    self._gather(pieces)
                else:
                    self._release_held()
                    for i, (part, s, e) in enumerate(pieces):
                        self._dispatch(part, s, e, take=wait and i == len(pieces) - 1)
            return self._publish_result(n, wait, client)

    # ------------------------------------------------------------------ gathered steps
    def _gathering(self) -> bool:
        """Whether pipelined publishes may wait here for busy partitions (:meth:`_gather`):
        ``ClusterConfig.coalesce`` on, on Ray (in process every step is done when
        dispatched), not replaying the log (a replay dispatches each call at once)."""
        return getattr(self.ccfg, "coalesce", 0) > 0 and not self.rt.inproc and not self._replaying \
            and self.rt.self_handle() is not None

    def _gather(self, pieces: list[tuple]) -> None:
        """A pipelined publish's steps, ``pieces``: dispatched at once while fewer than
        :data:`GATHER_DEPTH` steps are unfinished (one running, one queued in every
        partition: none idles); otherwise they wait here, with the calls after them, and go
        out together as steps of up to ``ClusterConfig.coalesce`` messages: when one is
        full, or when the oldest unfinished step ends, at the next call or at this actor's
        own :meth:`tick`, which Ray runs then. Every other call, cut and checkpoint sends
        them first (:meth:`_release_held`).

        A step's cost is largely fixed (each partition's walk of its index, its
        re-evaluations, the calls and their arguments): a publisher faster than the
        partitions gets fewer, larger steps, as if it had published larger calls. Nothing
        observable changes: the messages, their order, sequence numbers and expiries are the
        calls'; pipelined calls are delivered at cuts, to which the held messages go first;
        the log holds every call, and a recovery replays it."""
        self._reap()
        self._held += pieces
        self._held_n += sum(len(p[0]) for p in pieces)
        self.counters["held_calls"] += 1
        if len(self.inflight) < GATHER_DEPTH:
            self._release_held()
            return
        while self._held_n >= self.ccfg.coalesce:
            self._dispatch_held()
        self._post_tick()

    def _reap(self) -> None:
        """Harvest the steps at the front that are done, without waiting."""
        while self.inflight and self._finished(self.inflight[0]):
            self._harvest(self.inflight.popleft())

    def _post_tick(self) -> None:
        """While messages are held, a :meth:`tick` of this actor that Ray runs once the
        oldest unfinished step is done: its results are the call's arguments (Ray resolves
        them first). One per step: a tick whose step failed (a role died) never runs, and
        the recovery's next steps get their own."""
        if not self._held or not self.inflight:
            return
        j, refs, appended = self.inflight[0][:3]
        if self._tick_step == j:
            return
        self._tick_step = j
        self.rt.self_handle().tick.remote(j, *refs, *appended)

    @_guarded
    def tick(self, step: int, *done) -> None:
        """This actor's own call once step ``step`` is done (``done``: its results, which Ray
        resolved first; see :meth:`_post_tick`): what is still held goes out now that the
        partitions have less to do (or waits for the next step to end)."""
        if not self._held:
            return
        self.counters["ticks"] += 1
        self._reap()
        if len(self.inflight) < GATHER_DEPTH:
            self._release_held()
        else:
            self._post_tick()

    def _dispatch_held(self) -> None:
        """One step of the held pieces, from the oldest: as many whole pieces as fit in
        ``ClusterConfig.coalesce`` messages (at least one)."""
        cap, n, j = self.ccfg.coalesce, 0, 0
        while j < len(self._held) and (j == 0 or n + len(self._held[j][0]) <= cap):
            n += len(self._held[j][0])
            j += 1
        take, self._held = self._held[:j], self._held[j:]
        self._held_n -= n
        if j == 1:
            self._dispatch(*take[0])
            return
        self.counters["gathered_steps"] += 1
        self._dispatch(MessageBatch.concat([p[0] for p in take]), np.concatenate([p[1] for p in take]),
                       np.concatenate([p[2] for p in take]))

    def _release_held(self) -> None:
        """Every held piece out, in order, as steps of up to ``coalesce`` messages."""
        while self._held:
            self._dispatch_held()


    @_guarded
    def topk(self, sub_id) -> list[tuple[int, float]]:
        if isinstance(sub_id, bool) or not isinstance(sub_id, Integral) or int(sub_id) not in self.live:
            raise UnknownSubscription(f"unknown subscription id={sub_id!r}")
        return self.topk_many([int(sub_id)])[int(sub_id)]

    @_guarded
    def topk_many(self, sub_ids) -> dict[int, list[tuple[int, float]]]:
        """topk of several subscriptions in one round trip (tests and tools)."""
        limit = limits().max_items
        if len(sub_ids) > limit:
            raise too_many("subscription id", len(sub_ids), limit)
        ids = [int(i) for i in sub_ids]
        for i in ids:
            if i not in self.live:
                raise UnknownSubscription(f"unknown subscription id={i!r}")
        self._quiesce()
        out: dict[int, list] = {}
        if self.direct:
            for d in self._get_healing(lambda: [p.topk_many.remote(ids) for p in self.parts]):
                out.update(d)
        else:
            self._ship()
            A = len(self.aggs)
            groups = [[i for i in ids if i % A == a] for a in range(A)]
            lists = self.rt.get([agg.topk_many.remote(g) for agg, g in zip(self.aggs, groups)])
            for g, l in zip(groups, lists):
                out.update(zip(g, l))
        return {i: out.get(i, []) for i in ids}

    def live_ids(self) -> np.ndarray:
        return np.fromiter(self.live.keys(), np.int64, len(self.live))

    # ------------------------------------------------------------------ validation state
    def _check_messages(self, batch: MessageBatch) -> None:
        d = self.win_ids
        inw = np.fromiter((i in d for i in batch.ids.tolist()), bool, len(batch))
        check_message_state(batch, inw, self.cfg.time_window, self.clock.t_max)

    def _window_add(self, ids: np.ndarray, seqs: np.ndarray, expire_upto: int) -> None:
        self.win_ids.update(zip(ids.tolist(), seqs.tolist()))
        self.win_fifo.append((ids, seqs))
        pop = self.win_ids.pop
        while self.win_fifo:
            fids, fseqs = self.win_fifo[0]
            if fseqs[0] > expire_upto:
                break
            cut = int(np.searchsorted(fseqs, expire_upto, side="right"))
            for i in fids[:cut].tolist():
                pop(i, None)
            if cut == len(fseqs):
                self.win_fifo.popleft()
            else:
                self.win_fifo[0] = (fids[cut:], fseqs[cut:])
                break

    # ------------------------------------------------------------------ steps
    def _dispatch(self, msgs: MessageBatch | None = None, seqs=None, exp=None, take: bool = False) -> None:
        """Submit one step (messages and/or the pending control operations). ``take`` (direct
        mode, the last step of a ``publish(wait=True)``): each partition also returns its
        updates once the step is done, the cut's ``take_updates`` folded into the step's call
        (:meth:`_emit_start`), one actor call less per partition and call."""
        while len(self.inflight) >= self.ccfg.max_in_flight:
            self._harvest(self.inflight.popleft())
        self._reap()
        if self._taken is not None:
            # a step's takes that no cut consumed: they wait in the stash, and the next cut's
            # own takes, later, win over them (_combine)
            updates, self._taken = self._taken[1], None
            self._stash += [o for o in self._get_healing(lambda: list(updates)) if len(o[0])]
        self._plan_reallocs()
        ops = {p: PartitionOps.combine(o) for p, o in self.pending_ops.items()}
        self.pending_ops = {}
        j = self.step = self.step + 1
        P, S = self.policy.n_partitions, len(self.shards)
        if msgs is not None and len(msgs):
            pos_end, exp_end = int(seqs[-1]), int(exp[-1])
            if self.solo or self.policy.broadcasts:
                payloads = self._broadcast(msgs, seqs, exp)
            else:
                self._send_assignments()
                d = self.dists[j % len(self.dists)]
                payloads = d.route.options(num_returns=P + S).remote(j, msgs, seqs, exp)
        else:
            pos_end, exp_end = self.dispatched_pos, self.exp_dispatched
            payloads = [None] * (P + S)
        self.dispatched_pos, self.exp_dispatched = pos_end, exp_end
        journal = self._journal_on()
        # what the shards keep for later questions: the steps in flight ask as of their own
        # watermarks (the oldest one's is the lowest); a partial recovery replays the steps
        # since the committed checkpoint's (see WindowShard)
        keep = self.inflight[0][4] if self.inflight else exp_end
        hold = self._hold if journal and self._hold is not None else None
        appended = [sh.append.remote(j, payloads[P + s], exp_end, keep, hold) for s, sh in enumerate(self.shards)]
        take = take and self.direct and not self._stash
        if take:
            out = [pt.process.options(num_returns=3).remote(j, pos_end, exp_end, ops.get(p), payloads[p],
                                                            list(appended), take=True)
                   for p, pt in enumerate(self.parts)]
            refs, counts, updates = ([o[i] for o in out] for i in range(3))
        else:
            refs = [pt.process.remote(j, pos_end, exp_end, ops.get(p), payloads[p], list(appended))
                    for p, pt in enumerate(self.parts)]
        self.inflight.append((j, refs, appended, pos_end, exp_end))
        if journal:       # the same lists: a partial recovery replaces the dead roles' references
            self._journal.append(("step", j, pos_end, exp_end, ops, payloads, appended, refs))
        if take:          # the step's takes, journaled as a cut's (a replayed step takes nothing)
            self._taken = (counts, updates)
            if journal:
                self._journal.append(("take", counts, updates))
        self.counters["steps"] += 1
        self.metrics.set("queue_depth", len(self.inflight))

    def _send_assignments(self) -> None:
        """Routing state the policy gave out since the last step (the prefix policy's groups
        of terms first met in subscriptions) to every distributor, before the step that may
        route by it (Ray runs one submitter's calls to an actor in order)."""
        new = self.policy.take_assignments()
        if new is not None:
            for d in self.dists:
                d.set_assignments.remote(*new)

    def _broadcast(self, msgs: MessageBatch, seqs: np.ndarray, exp: np.ndarray) -> list:
        """A step's payloads under a policy that sends every message to every partition (or
        to a :class:`SoloPartition`, which holds the window too), and each shard's share. No
        distributor is asked (it would only copy the batch): a hop less on the step's path.
        Counted as a distributor counts its routing.

        The messages go inside the partitions' calls where Ray sends an argument of their
        size so (:meth:`Runtime.inline_bytes`) and at most :data:`INLINE_COPIES` calls carry
        them (each call carries its own copy); otherwise as one object in the store that
        every partition reads. Inside the calls there is no put here, no object for the
        raylet to track and none for each partition to fetch."""
        P = self.policy.n_partitions
        payload = (msgs, seqs, exp)
        inline = P <= INLINE_COPIES and \
            msgs.nbytes + seqs.nbytes + exp.nbytes + INLINE_SLACK <= self.rt.inline_bytes()
        part = payload if inline else self.rt.put(payload)
        key = "inline_steps" if inline else "stored_steps"
        self.counters[key] = self.counters.get(key, 0) + 1     # (a state from before lacks them)
        shards = [None if x is None else self.rt.put(x) for x in shard_payloads(msgs, seqs, len(self.shards))] \
            if self.shards else []
        self.metrics.inc("messages", len(msgs))
        self.metrics.inc("tuples_out", len(msgs) * P)
        return [part] * P + shards

    def _finished(self, entry) -> bool:
        """Whether a step in flight is done (its harvest will not wait): steps are harvested
        as they finish, so that the shards drop what only they asked about (``keep_after``)."""
        refs = list(entry[1]) + list(entry[2])
        return len(self.rt.wait(refs, num_returns=len(refs), timeout=0)[0]) == len(refs)

    def _harvest(self, entry) -> None:
        """Wait for one step: partitions, shards, and the aggregator updates they sent. A
        partition or shard that died is rebuilt in place (:meth:`_heal`) and the step's
        references, replaced, are waited for again."""
        _, refs, appended, pos, _ = entry
        with self.metrics.waiting():        # _heal replaces references in these same lists
            results = self._get_healing(lambda: refs + appended)[:len(refs)]
        self.applied_pos = max(self.applied_pos, pos)
        for res in results:
            if res.get("realloc") is not None:
                self.realloc_queue.append(res["realloc"])

    def _quiesce(self) -> None:
        """Send what is held (:meth:`_gather`), deliver the started cuts, finish every step,
        then run reallocations until none is asked for."""
        self._release_held()
        self._drain_cuts(block=True)
        while True:
            while self.inflight:
                self._harvest(self.inflight.popleft())
            self.metrics.set("queue_depth", 0)
            if not self.realloc_queue and not self.pending_ops:
                return
            self._dispatch()

    def _nothing_to_dispatch(self) -> bool:
        return not self.pending_ops and not self.realloc_queue and not self._held

    def _plan_reallocs(self) -> None:
        """Turn reallocation requests into control operations of the step about to start."""
        if not self.realloc_queue:
            return
        reqs, self.realloc_queue = self.realloc_queue, []
        rows = SubscriptionBatch.concat([r["subs"] for r in reqs])
        need = np.concatenate([r["plen"] for r in reqs])
        part = np.concatenate([np.full(len(r["plen"]), r["partition"], np.int64) for r in reqs])
        live = self.live
        cur = np.fromiter((live.get(i, -1) for i in rows.ids.tolist()), np.int64, len(rows))
        alive = cur >= 0
        if not alive.any():
            return
        rows, need, part, cur = rows.take(alive), need[alive], part[alive], cur[alive]
        self.counters["reallocations"] += len(rows)
        P = self.policy.n_partitions
        # the longest prefix asked for each subscription (one row per subscription)
        order = np.lexsort((-need, rows.ids))
        first = order[np.r_[True, rows.ids[order][1:] != rows.ids[order][:-1]]]
        grow = first[need[first] > cur[first]]
        if len(grow):
            sub = rows.take(grow)
            old_plen, new_plen = cur[grow], need[grow]
            old = self.policy.route_subscriptions(sub, old_plen)
            new = self.policy.route_subscriptions(sub, new_plen)
            old_key = np.repeat(np.arange(len(sub)), old.counts()) * P + old.parts
            new_row = np.repeat(np.arange(len(sub)), new.counts())
            added = ~np.isin(new_row * P + new.parts, old_key)
            # a replica's indexed terms do not depend on its prefix (Policy.placement): a kept
            # one indexes its new prefix terms already, a fresh one gets them here
            where = self.policy.placement(sub, new_plen) if self.policy.index_placed else None
            lens, reps = np.diff(sub.offsets), new.counts()
            # the (row, partition) pairs grouped by partition, fresh replicas first: one pass
            # per partition over its own pairs (rows in order within each group)
            order = np.lexsort((added, new.parts))
            fresh_of = added[order]
            bounds = np.searchsorted(new.parts[order], np.arange(P + 1))
            for p in np.flatnonzero(np.diff(bounds)).tolist():
                a, b = int(bounds[p]), int(bounds[p + 1])
                cut = a + int(np.count_nonzero(~fresh_of[a:b]))
                kept, fresh = new_row[order[a:cut]], new_row[order[cut:b]]
                if len(fresh):
                    indexed = None if where is None else where[runs(sub.offsets[fresh], lens[fresh])[1]] == p
                    self._add_ops(p, PartitionOps(add=sub.take(fresh), add_plen=new_plen[fresh],
                                                  add_replicas=reps[fresh], add_indexed=indexed))
                if len(kept):
                    self._add_ops(p, PartitionOps(plen_ids=sub.ids[kept], plen=new_plen[kept]))
            n_new = int(added.sum())
            self.counters["realloc_new_replicas"] += n_new
            live.update(zip(sub.ids.tolist(), new_plen.tolist()))
        # requesters whose prefix an earlier request already grew learn the current length
        # (and check their kScore against it): ``cur``, as no request of this call grew them;
        # each (partition, subscription) once
        stale = np.flatnonzero(~np.isin(rows.ids, rows.ids[grow]))
        if len(stale) == 0:
            return
        sp, sid, spl = part[stale], rows.ids[stale], cur[stale]
        order = np.lexsort((sid, sp))
        sp, sid, spl = sp[order], sid[order], spl[order]
        one = np.r_[True, (sp[1:] != sp[:-1]) | (sid[1:] != sid[:-1])]
        sp, sid, spl = sp[one], sid[one], spl[one]
        bounds = np.flatnonzero(np.r_[True, sp[1:] != sp[:-1], True])
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            self._add_ops(int(sp[a]), PartitionOps(plen_ids=sid[a:b], plen=spl[a:b]))

    # ------------------------------------------------------------------ results
    def _ship(self) -> None:
        """Replicated mode: partitions send their changed lists to the aggregators."""
        refs = [r for rs in self.rt.get([p.ship.remote() for p in self.parts]) for r in rs]
        if refs:
            with self.metrics.waiting():
                self.rt.get(refs)

    def _emit(self) -> tuple:
        """The update arrays (sub_ids, offsets, msg_ids, scores) since the previous emit, or
        the :class:`UpdateParts` holding them; the client turns them into ``Update`` objects
        (arrays cross process boundaries cheaply)."""
        if self.direct:
            return self._emit_finish(self._emit_start(), block=True)
        self._ship()
        # each aggregator owns its subscriptions (id mod A): the parts laid end to end are the
        # delivery, left in the aggregators' results for whoever reads them (UpdateParts)
        out = [a.emit.options(num_returns=2).remote(counted=True) for a in self.aggs]
        with self.metrics.waiting():
            n = self.rt.get([c for c, _ in out])
        return self._parts([r for _, r in out], n)

    def _emit_start(self):
        """Direct mode: every partition's ``take_updates``, submitted behind its steps (Ray
        runs one submitter's calls in order), and the updates kept from a move (``_stash``).
        Each take returns two objects: the number of subscriptions updated (small: it comes
        back with the reply) and the arrays (left in the object store for whoever reads
        them: :class:`UpdateParts`). The references are journaled: a partial recovery
        replaces those of a dead partition, and of a live one whose step a peer's death held
        (its take failed, taking nothing)."""
        if not self.direct:
            return None
        if self._taken is not None:         # taken by the last step dispatched
            (counts, refs), self._taken = self._taken, None
            return [], counts, refs
        counts, refs = [], []
        for p in self.parts:
            c, r = p.take_updates.options(num_returns=2).remote(counted=True)
            counts.append(c)
            refs.append(r)
        if self._journal_on():
            self._journal.append(("take", counts, refs))
        stash, self._stash = self._stash, []
        return stash, counts, refs

    def _emit_finish(self, handle, block: bool):
        stash, counts, refs = handle
        if not block and len(self.rt.wait(counts, num_returns=len(counts), timeout=0)[0]) < len(counts):
            return None
        with self.metrics.waiting():
            n = self._get_healing(lambda: list(counts))
        if stash:           # a subscription moved: its latest list wins (see _combine)
            return self._combine(stash + self.rt.get([r for r, c in zip(refs, n) if c]))
        return self._parts(refs, n)

    def _parts(self, refs: list, counts: list[int]):
        """One delivery left in the results ``refs`` (partitions' or aggregators', each
        holding ``counts`` subscriptions): :class:`UpdateParts` of the non-empty ones."""
        some = [r for r, c in zip(refs, counts) if c]
        return UpdateParts(self.rt, some, sum(counts)) if some else _NO_UPDATES

    def _combine(self, outs: list[tuple]) -> tuple:
        """One delivery's arrays from the partitions' updates and those kept from a move."""
        outs = [o for o in outs if len(o[0])]
        if not outs:
            return _NO_UPDATES
        if len(outs) > len(self.parts):      # a subscription moved: its latest list wins
            outs = [_latest(outs)]
        return concat_updates(outs)

    def warm(self) -> dict:
        """:meth:`CoordinatorBase.warm`, and in direct mode on Ray each partition writes the
        object store's pages that its results will cross (:data:`STORE_WARM_BYTES`); their
        references come back under ``"store"`` for the client, which reads them (its
        ``Cluster.warm``): the pages are then mapped in both processes."""
        out = super().warm()
        if self.direct and not self.rt.inproc:
            n = -(-STORE_WARM_BYTES // (STORE_WARM_CHUNK * len(self.parts)))    # results shrink with P
            refs = [p.store_pages.remote(STORE_WARM_CHUNK) for p in self.parts for _ in range(n)]
            self.rt.wait(refs, num_returns=len(refs), timeout=STANDBY_WARM_SECONDS)
            out["store"] = refs
        return out

    def _baseline(self, ids: np.ndarray) -> None:
        """New subscriptions: their initial results are not updates."""
        if self.direct:
            return      # a core does not report a subscription in the epoch that added it
        self._ship()
        A = len(self.aggs)
        self.rt.get([agg.baseline.remote(ids[np.mod(ids, A) == a]) for a, agg in enumerate(self.aggs)])

    # ------------------------------------------------------------------ load monitoring
    REBALANCING = ("location", "keyword", "prefix")     # policies with online rebalancing

    @_guarded
    def rebalance(self, threshold: float = 1.5, sample: int = 5000) -> dict:
        """Paper 7.4: when the busiest partition worked ``threshold`` times the mean since the
        previous check, split its KD leaf (location: a new partition takes part of its
        subscriptions, up to ``max_partitions``) or refit the keyword ranges (keyword,
        prefix). Exact: moved subscriptions are re-placed at one stream position with initial
        results there."""
        with self.metrics.busy():
            out = self._rebalance(threshold, sample)
        if out["action"] is not None and self.store is not None:
            self._checkpoint(wait=True)
        return out

    def _monitor(self) -> None:
        """Automatic load monitoring (paper 7.4: periodic, in the background of the stream):
        at the end of a publish call, once ``monitor_every`` seconds passed since the last
        check, the rule of ``rebalance`` with ``rebalance_threshold``. It runs between steps,
        so it is as exact as an explicit call."""
        every = self.ccfg.monitor_every
        if every <= 0 or self.policy.name not in self.REBALANCING or time.perf_counter() < self._next_check:
            return
        with self.metrics.busy():
            res = self._rebalance(self.ccfg.rebalance_threshold, 5000)
        self._next_check = time.perf_counter() + every
        self.counters["load_checks"] += 1
        if res["action"] is not None:
            if self.store is not None:
                self._checkpoint(wait=True)     # the log does not hold rebalances: a checkpoint does
            self.counters["rebalances"] += 1
            self.counters["rebalance_moved"] += int(res.get("moved", 0))
            self.monitor_log.append({"step": self.step, "published": self.published, **res})

    def _rebalance(self, threshold: float, sample: int) -> dict:
        self._quiesce()
        loads = self.rt.get([p.load.remote() for p in self.parts])
        busy = np.array([l["busy_seconds"] for l in loads])
        last = np.zeros(len(busy))
        last[: len(self._last_busy)] = self._last_busy[: len(busy)]
        delta = busy - last
        self._last_busy = busy
        mean = float(delta.mean()) if len(delta) else 0.0
        hot = int(delta.argmax()) if len(delta) else 0
        ratio = float(delta[hot] / mean) if mean > 0 else 0.0
        out = {"busy": delta.tolist(), "ratio": ratio, "action": None}
        if ratio < threshold or len(delta) == 0:
            return out
        if self.policy.name not in self.REBALANCING:
            out["reason"] = f"no online rebalancing for policy {self.policy.name!r}"
        elif self.policy.name == "location" and self.policy.n_partitions >= self.ccfg.partition_cap:
            out["reason"] = f"max_partitions ({self.ccfg.partition_cap}) reached"
        elif self.policy.name == "location":
            out.update(self._split(hot, self._message_sample(sample)))
        else:
            out.update(self._refit_ranges(self._message_sample(sample), sample))
        return out

    def _message_sample(self, n: int) -> MessageBatch:
        if self.solo:
            return self.rt.get(self.parts[0].message_sample.remote(n))
        per = max(1, n // len(self.shards))
        return MessageBatch.concat(self.rt.get([s.sample.remote(per) for s in self.shards]))

    def _split(self, hot: int, msgs: MessageBatch) -> dict:
        self._breaks += 1         # partial recoveries wait for the next checkpoint
        subs, plen = self.rt.get(self.parts[hot].held.remote())
        new = self.policy.split(hot, subs, msgs)
        self.parts.append(self.rt.create(SubscriptionPartition, self._partition_cfg(), new, *self._part_args,
                                         start_step=self.step, num_cpus=self.ccfg.actor_cpus))
        self.rt.get([a.set_partitions.remote(self.policy.n_partitions) for a in self.aggs]
                    + [d.set_policy.remote(self.policy) for d in self.dists])
        self._last_busy = np.append(self._last_busy, 0.0)
        moving = np.flatnonzero(self.policy.route_subscriptions(subs, plen).parts == new)
        if len(moving):
            if self.direct:       # keep the updates the leaving lists still owe
                self._stash.append(self.rt.get(self.parts[hot].take_updates.remote()))
            mv = subs.take(moving)
            self._add_ops(hot, PartitionOps(remove=mv.ids))
            self._add_ops(new, PartitionOps(add=mv, add_plen=plen[moving]))
            self._dispatch()
            self._quiesce()
        return {"action": "split", "partition": hot, "new_partition": new, "moved": int(len(moving))}

    def _refit_ranges(self, msgs: MessageBatch, sample: int) -> dict:
        self._breaks += 1
        held = self.rt.get([p.held.remote() for p in self.parts])
        subs = SubscriptionBatch.concat([h[0] for h in held])
        plen = np.concatenate([h[1] for h in held])
        _, first = np.unique(subs.ids, return_index=True)        # one row per subscription
        subs, plen = subs.take(first), plen[first]
        rng = np.random.default_rng(len(subs))
        pick = np.sort(rng.choice(len(subs), min(sample, len(subs)), replace=False))
        before = self.policy.route_subscriptions(subs, plen)
        old = self.policy.rebalance(subs.take(pick), msgs, plen[pick], len(subs))
        after = self.policy.route_subscriptions(subs, plen)
        # a subscription is re-placed when a term of its prefix changed partition: its old
        # replicas may have seen messages that the new ones would not (and vice versa); where
        # replicas index their placed terms beyond the prefix too (prefix), when any term did
        from .policies import _take_prefix
        whole = self.policy.prefix and self.policy.index_placed
        off, terms = _take_prefix(subs.offsets, subs.term_ids, np.diff(subs.offsets) if whole else plen)
        row = np.repeat(np.arange(len(subs)), np.diff(off))
        moved_term = old.parts(terms, subs.ids[row]) != self.policy.kmap.parts(terms, subs.ids[row])
        affected = np.unique(row[moved_term])
        self.rt.get([d.set_policy.remote(self.policy) for d in self.dists])
        P = self.policy.n_partitions
        if len(affected):
            for p, rows in enumerate(Routing(before.offsets, before.parts).rows_of(P)):
                r = np.intersect1d(rows, affected)
                if len(r):
                    self._add_ops(p, PartitionOps(remove=subs.ids[r]))
            self._add_replicas(subs, plen, after, affected)
            self._dispatch()
            self._quiesce()
        return {"action": "rebalance", "moved": int(len(affected)),
                "ranges": self.policy.describe().get("ranges")}

    # ------------------------------------------------------------------ stats
    @_guarded
    def stats(self) -> dict:
        self._quiesce()
        parts = self.rt.get([p.stats.remote() for p in self.parts])
        shards = self.rt.get([p.window_stats.remote() for p in self.parts] if self.solo
                             else [s.stats.remote() for s in self.shards])
        dists = self.rt.get([d.stats.remote() for d in self.dists])
        aggs = self.rt.get([a.stats.remote() for a in self.aggs])
        held = sum(p["subscriptions"] for p in parts)
        n_live = len(self.live)
        secs = self.counters["publish_seconds"]
        coord = self.metrics.snapshot()
        coord.update(self.counters)
        tuples = sum(d["tuples_out"] for d in dists) + coord["tuples_out"]     # see _broadcast
        out = {
            "subscriptions": n_live,
            "window": len(self.win_ids),
            "published": self.published,
            "policy": self.policy.name,
            "partitions": self.policy.n_partitions,
            "window_shards": len(shards),
            "solo": self.solo,
            "distributors": len(self.dists),
            "aggregators": len(self.aggs),
            "replication_ratio": held / n_live if n_live else 0.0,
            "communication_cost": tuples / self.published if self.published else 0.0,
            "throughput": self.published / secs if secs > 0 else 0.0,
            "reevaluations": sum(p["reevaluations"] for p in parts),
            "reallocations": self.counters["reallocations"],
            "load_monitoring": {"every_seconds": self.ccfg.monitor_every, "checks": self.counters["load_checks"],
                                "rebalances": self.counters["rebalances"],
                                "moved": self.counters["rebalance_moved"], "recent": list(self.monitor_log)},
            "queue_depth": len(self.inflight),
            "max_queue_depth": coord["max_queue_depth"],
            "busy_seconds": {"coordinator": coord["busy_seconds"],
                             "distributor": [d["busy_seconds"] for d in dists],
                             "partition": [p["busy_seconds"] for p in parts],
                             "shard": [s["busy_seconds"] for s in shards],
                             "aggregator": [a["busy_seconds"] for a in aggs]},
            "roles": {"coordinator": coord, "distributor": dists, "partition": parts,
                      "shard": shards, "aggregator": aggs},
            "routing": self.policy.describe(),
            "delivery": {"position": self.last_seq + 1, "retained": len(self.deliveries),
                         "oldest_kept": self.evicted_upto + 1, "retention": self.ccfg.retention,
                         "clients_awaiting_flush": len(self._flush_pos)},
            "recovery": self._recovery_stats(),
        }
        return out


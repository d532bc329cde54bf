"""The coordinator every kind shares: the one place that orders the stream (the named,
detached actor a client attaches to).

:class:`CoordinatorBase` sequences every call into steps with backpressure, keeps the
write-ahead log, takes checkpoints and recovers from them, remembers each client's last
result for its retries, loads bulk inputs in two phases and keeps the deliveries that
``listen`` and ``flush`` serve. A kind's coordinator derives from it and implements the
interface of :mod:`rankcast.runtime.kind`; the registry (:mod:`rankcast.runtime.registry`)
maps each kind's config class to that coordinator.
"""
from __future__ import annotations

import functools
import os
import time
import uuid
from collections import OrderedDict, deque
from numbers import Integral

import numpy as np

from rankcast.common.arrays import concat_offsets, runs
from rankcast.common.diffs import compose_diffs, concat_diffs, is_diff, n_keys
from rankcast.common.validation import check_ids_arg, check_not_live, item_error, shift_position
from rankcast.config import ClusterConfig
from rankcast.errors import InvalidInput, NoCapacity, UnknownSubscription
from .kind import NO_UPDATES, KindCoordinator, UpdateArrays
from .metrics import RoleMetrics
from .recovery import STATE_FORMAT, StateStore, Writer, is_role_death, shared_config, write_snapshots
from .backends import InprocRuntime, RayRuntime, Runtime
from .placement import Placer, live_nodes, node_id

__all__ = ["CoordinatorBase", "AdoptionMismatch", "check_resumable", "UpdateParts", "RemoteUpdates",
           "update_arrays", "concat_updates", "latest_lists", "select_rows", "select_diff_runs", "guarded",
           "NO_UPDATES"]

_NOT_DONE = object()


class AdoptionMismatch(RuntimeError):
    """A role adopted at a restart did not end where the replay of the log did."""


# between two logs of a replay (not a log record): a checkpoint started there, which sent
# the held publishes out first
LOG_END = ("log-end", None, None)


def _calls(records: list) -> int:
    """The calls among log records (not the moments held publishes went out)."""
    return sum(r[0] not in ("release", "log-end") for r in records)


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
    """Subscriptions updated in ``out`` (arrays, diff arrays, or :class:`UpdateParts`)."""
    if isinstance(out, UpdateParts):
        return out.n
    return n_keys(out[0]) if is_diff(out) else len(out[0])


def for_client(out):
    """A call's result as sent to the client: update parts as their references."""
    return RemoteUpdates(out.refs) if isinstance(out, UpdateParts) else out


def select_rows(arrays: UpdateArrays, keep: np.ndarray) -> UpdateArrays:
    """The rows ``keep`` (a mask) of update arrays (sub_ids, offsets, msg_ids, scores)."""
    ids, off, mids, scs = arrays
    rows = np.flatnonzero(keep)
    new_off, idx = runs(off[rows], off[rows + 1] - off[rows])
    return ids[rows], new_off, mids[idx], scs[idx]


def select_diff_runs(diffs: tuple, hit: np.ndarray) -> tuple:
    """The rows of diff arrays whose run (the rows of one key, together) has a row in
    ``hit`` (a mask over the rows)."""
    keys = diffs[0]
    if not len(keys):
        return diffs
    run = np.cumsum(np.r_[True, keys[1:] != keys[:-1]]) - 1
    keep = np.zeros(int(run[-1]) + 1, np.bool_)
    keep[run[hit]] = True
    rows = keep[run]
    return tuple(c[rows] for c in diffs)


def check_resumable(store: StateStore, given: ClusterConfig) -> None:
    """A restart resumes the stored cluster only from state of this version's format
    (:data:`~rankcast.runtime.recovery.STATE_FORMAT`) and under the same semantics (the kind,
    its engine config and the policy); the stored topology (partitions added by load
    monitoring) is kept, and so is the form of its deliveries (``updates``)."""
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
    if stored.updates != given.updates:
        raise InvalidInput(f"Cluster.start: field 'updates': the durable state of cluster {given.name!r} under "
                           f"{given.state_dir!r} keeps its deliveries as {stored.updates!r}, not "
                           f"{given.updates!r}; start it with updates={stored.updates!r}, another name or "
                           f"state_dir, or Cluster.start(..., fresh=True) to discard that state")



def concat_updates(outs: list[UpdateArrays]) -> UpdateArrays:
    """Update arrays (ids, offsets, item ids, scores) of several parts, laid end to end (diff
    arrays likewise: parts of different keys)."""
    if not outs:
        return NO_UPDATES
    if len(outs) == 1:
        return outs[0]
    if is_diff(outs[0]):
        return concat_diffs(outs)
    return (np.concatenate([o[0] for o in outs]), concat_offsets([o[1] for o in outs]),
            np.concatenate([o[2] for o in outs]), np.concatenate([o[3] for o in outs]))


def latest_lists(outs: list[UpdateArrays]) -> UpdateArrays:
    """Concatenate update arrays keeping, per subscription, the list of the last part (in
    the order of those last occurrences); diff arrays of consecutive changes compose into
    one diff per subscription (:func:`~rankcast.common.diffs.compose_diffs`)."""
    if is_diff(outs[0]):
        return compose_diffs(outs)
    ids = np.concatenate([o[0] for o in outs])
    off = concat_offsets([o[1] for o in outs])
    mids = np.concatenate([o[2] for o in outs])
    scs = np.concatenate([o[3] for o in outs])
    _, first_from_end = np.unique(ids[::-1], return_index=True)
    keep = np.sort(len(ids) - 1 - first_from_end)
    new_off, idx = runs(off[keep], off[keep + 1] - off[keep])
    return ids[keep].astype(np.int64), new_off, mids[idx].astype(np.int64), scs[idx].astype(np.float64)


STANDBY_WARM_SECONDS = 120.0  # how long warm() waits for the standby processes
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
# role processes still starting after placement_timeout while CPUs are free start slowly (a
# loaded host), they are not short of room: waited for up to this many times the timeout
SLOW_START_LIMIT = 10
ADOPT_SECONDS = 30.0    # how long a restarted coordinator waits for a live role to answer
ROLE_SEP = "::role::"   # a detached role's actor name: <cluster name>::role::<unique id>
MAX_CLIENTS = 10_000    # clients whose last call's result is kept for their retries
MAX_REJECTED = 1_000    # rejected batch ids kept per sink (apply_batch)
BATCH_CALLS = ("publish", "subscribe", "unsubscribe")


def _key(handle) -> str:
    """A role process's key in the placement record: its actor id."""
    return handle._actor_id.hex()


def guarded(fn):
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
            if self._waiting is not None:         # roles lost with a node wait for room
                try:
                    self._resume_if_room()
                except NoCapacity:
                    if fn.__name__ == "stats":
                        return self._waiting_stats()
                    raise
            for _ in range(MAX_RECOVERIES + 1):
                try:
                    out = fn(self, *args, **kw)
                except Exception as e:
                    if self.store is None or not is_role_death(e):
                        raise
                    results = self._recover(e)
                    if self._current is not None and self._current >= 0:
                        return for_client(results[self._current])     # as the call would return it
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
        except NoCapacity as e:
            # logged: the call takes effect when the cluster resumes (its replay applies it)
            e.accepted = self._current is not None
            if e.accepted:
                e.args = (f"{e.args[0]} This call is in the cluster's log: it takes effect when the cluster "
                          f"resumes (do not send it again).",)
            raise
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
                "_deliv_chunks", "_deliv_saved_upto", "_batches", "_mark")


class CoordinatorBase(KindCoordinator):
    """What every kind's coordinator shares (docs/architecture.md, "The kind interface and the registry"): sequencing
    of steps with backpressure, the write-ahead log, checkpoints and recovery, client
    tokens, bulk loading in two phases, deliveries to listeners and ``flush``.

    A kind's coordinator derives from it and implements the abstract methods of
    :class:`~rankcast.runtime.kind.KindCoordinator` (its roles, encoding, placement, steps
    and emit); a class that leaves one out cannot be instantiated."""

    KIND_STATE: tuple[str, ...] = ()
    ITEM = "subscription"          # what a subscription is called in errors

    def __init__(self, ccfg: ClusterConfig | None, runtime: str = "ray", sample=None, *,
                 state: tuple[str, str] | None = None):
        self._t_init = time.time()          # a restart's record: when this process took over
        t0 = time.perf_counter()
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
        # delivery (docs/contract.md, "Delivery"): (position, update arrays) per cut
        self.deliveries: deque[tuple[int, tuple]] = deque()
        self.evicted_upto = 0                     # deliveries at positions <= this are gone
        self._deliv_chunks: list[tuple[str, int]] = []   # (file, last position) on disk
        self._deliv_saved_upto = -1               # deliveries up to here are in a chunk
        self._group: set = set()                  # clients with pipelined calls not yet delivered
        self._group_t0 = 0.0
        self._flush_pos: dict = {}                # client -> positions delivering its pipelined calls
        self._cuts: deque = deque()               # cuts started, not delivered: (position, handle, clients)
        self._done: OrderedDict = OrderedDict()   # client -> (token, result) of its last call
        self._batches: dict[str, dict] = {}       # sink -> its last batch id and rejections (apply_batch)
        # recovery
        self._role_specs: dict[str, tuple] = {}   # role -> (class, arguments) of its last build
        self._standby: dict[str, object] = {}     # role -> a warm process that is no role yet
        self._standby_warm: dict[str, object] = {}
        self._role_args: dict[tuple[str, int], tuple] = {}   # (role, i) -> (class, arguments)
        # this coordinator's id: the roles refuse calls of another (Recoverable.own)
        self._owner = uuid.uuid4().hex
        self._mark = None               # the id of the checkpoint the state descends from
        self._committed_mark = None     # ... of the committed one (roles keep their lineage from it)
        self._applying = 0              # applying a logged record (its releases need no record)
        self._adopted: dict[tuple[str, int], dict] = {}   # roles a restart kept live: their progress
        # partial recovery (see _heal): what every step since the committed checkpoint sent
        self._journal: list = []
        self._breaks = 0                # changes of the roles' layout (rebalancing) so far
        self._journal_breaks = 0        # ... when the committed checkpoint was taken
        self._replaying = False         # a full recovery or a restart is replaying the log
        self._hold = None               # _hold_point() of the committed checkpoint
        self.policy = None              # the kind's placement policy, if it has one (init_kind)
        # where the role processes run (Ray): see rankcast.runtime.placement
        self.placer = None if self.rt.inproc else Placer(ccfg.placement, ccfg.control_node)
        self._waiting: dict | None = None         # roles lost with a node, waiting for room
        self.init_kind(sample)
        self._init_seconds = time.perf_counter() - t0
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
        # a durable cluster's role processes on Ray are named and outlive this process: a
        # coordinator that Ray restarts finds them (_found_processes) and keeps them
        self._detached = self.store is not None and not self.rt.inproc
        self._watch = (ccfg.name, ccfg.namespace) if self._detached else None
        if self.store is not None and self.store.exists("MANIFEST"):
            self._resume_from_store()           # a restart: this process or the whole cluster
        else:
            self._kill(self._named_processes())   # left by an earlier cluster of this name
            self.build_roles(None)
            if self.store is not None:
                self._checkpoint(wait=True)
        self._fill_standby()

    # ------------------------------------------------------------------ optional refinements of a kind
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
        return [h for _, hs in self.role_groups() for h in hs]

    def _add_ops(self, p: int, ops) -> None:
        """Control operations for partition ``p`` in the next step."""
        self.pending_ops.setdefault(p, []).append(ops)

    @property
    def diffs(self) -> bool:
        """Whether the roles report diffs, not whole lists (``ClusterConfig.updates``)."""
        return self.ccfg.updates == "diff"

    def _filter_delivery(self, arrays: tuple, ids: np.ndarray) -> tuple:
        """A delivery's update arrays restricted to the subscriptions ``ids`` (``listen``)."""
        if is_diff(arrays):
            return select_diff_runs(arrays, np.isin(arrays[0], ids))
        return select_rows(arrays, np.isin(arrays[0], ids))

    def _merge_deliveries(self, outs: list) -> tuple:
        """One delivery's arrays from several (in stream order: a ``flush`` of several, two
        cuts at one position): per subscription its latest list, or its diffs composed."""
        return latest_lists([update_arrays(o) for o in outs])

    def _role_maker(self, ckpt: str | None, reuse: list | None):
        """``make(role, cls, i, *args, snapshot=True)`` that builds role ``i`` (resumed from
        ``ckpt`` when given; in a live process of ``reuse`` when one of that role is left),
        and ``finish()`` that waits for every role built and kills the unused live ones.

        After a restart, the live processes of the cluster before it (:meth:`_found_processes`,
        kept by :meth:`_load_checkpoint` for this build): the one that played role ``i`` is
        kept as it is where the kind can take it over from its checkpoint
        (:meth:`_adoptable`); any other of the same class becomes a role again in place (as
        ``reuse``); a standby stays a standby (:meth:`_keep_standbys`)."""
        spare: dict[str, list] = {}
        for role, h in reuse or []:
            spare.setdefault(role, []).append((h, None))
        by_label: dict[str, tuple] = {}
        found, self._found = getattr(self, "_found", None), None
        self._found_standby = []
        for h, info in found or []:
            label = info.get("label") or ""
            if label.startswith("standby-"):
                self._found_standby.append((label[len("standby-"):], h, info))
            elif label:
                by_label[label] = (h, info)
        started, labels = [], []

        def make(role, cls, i, *args, snapshot=True):
            kw = {"resume": (self.store, f"{ckpt}/{role}-{i}")} if ckpt is not None and snapshot else {}
            self._role_specs[role] = (cls, args)
            self._role_args[(role, i)] = (cls, args)
            label = f"{role}-{i}"
            got = by_label.pop(label, None)
            if got is not None:
                h, info = got
                if ckpt is not None and info["class"] == cls.__name__ and self._adoptable(role, i, info):
                    self._adopted[(role, i)] = info
                    self._own(h, label)
                    if self.placer is not None:
                        self.placer.on(_key(h), info.get("node"), role)
                    started.append(self.rt.put(info["pid"]))
                    labels.append(f"{label} (adopted)")
                    return h
                spare.setdefault(role, []).append((h, info["class"]))
            for n, (h, name) in enumerate(spare.get(role, ())):
                if name is None or name == cls.__name__:
                    del spare[role][n]
                    started.append(h.reinit.remote(*args, **kw))
                    self._own(h, label)
                    labels.append(f"{label} (in place)" if name else label)
                    return h
            h, ref, how = self._spawn(role, cls, args, kw, label)
            started.append(ref)
            labels.append(f"{label}{how}")
            return h

        def finish():
            try:
                self._role_seconds = self._wait_timed(started, labels)     # every role is up
            finally:
                for hs in list(spare.values()) + [list(by_label.values())]:
                    for h, _ in hs:
                        self._kill([h])
        return make, finish

    def _adoptable(self, role: str, i: int, info: dict) -> bool:
        """Whether the live process ``info`` (:meth:`Recoverable.adopt`) that played role
        ``i`` may go on as it is after a restart from the loaded checkpoint: the calls since
        that checkpoint are then replayed to it only from where it stands. No kind's role by
        default (each is rebuilt from the checkpoint, in its process)."""
        return False

    def _keep_standbys(self) -> None:
        """A restart keeps the live standby processes of the roles it runs (the others end)."""
        for role, h, info in getattr(self, "_found_standby", ()):
            spec = self._role_specs.get(role)
            if spec is not None and role not in self._standby and info["class"] == spec[0].__name__:
                self._standby[role] = h
                self._standby_warm[role] = h.warm.remote()
                self._own(h, f"standby-{role}")
                if self.placer is not None:
                    self.placer.on(_key(h), info.get("node"), "standby")
            else:
                self._kill([h])
        self._found_standby = []

    def _own(self, h, label: str) -> None:
        """Make ``h`` this coordinator's process for ``label`` (:meth:`Recoverable.own`)."""
        h.own.remote(self._owner, label, self._watch, self._retains(label))

    def _retains(self, label: str) -> bool:
        """Whether the role ``label`` keeps what an adoption needs (the kind's choice)."""
        return False

    def _named_processes(self) -> list:
        """Handles of the live role processes named after this cluster (detached ones)."""
        if not self._detached:
            return []
        import ray
        from ray.util import list_named_actors
        prefix, ns = self.ccfg.name + ROLE_SEP, self.ccfg.namespace
        out = []
        for a in list_named_actors(all_namespaces=True):
            if a.get("namespace") == ns and a.get("name", "").startswith(prefix):
                try:
                    out.append(ray.get_actor(a["name"], namespace=ns))
                except ValueError:              # gone meanwhile
                    pass
        return out

    def _found_processes(self) -> list[tuple[object, dict]]:
        """The live processes of this cluster from before a restart, each taken over
        (:meth:`Recoverable.adopt`: calls of the dead coordinator are refused from now on)
        with what it said; one that does not answer within :data:`ADOPT_SECONDS` is ended."""
        handles = self._named_processes()
        if not handles:
            return []
        refs = [h.adopt.remote(self._owner) for h in handles]
        ready, _ = self.rt.wait(refs, num_returns=len(refs), timeout=ADOPT_SECONDS)
        ready = set(ready)
        out = []
        for h, ref in zip(handles, refs):
            try:
                if ref in ready:
                    out.append((h, self.rt.get(ref)))
                    continue
            except Exception:           # it died meanwhile
                pass
            self._kill([h])
        return out

    def _spawn(self, role: str, cls, args: tuple, kw: dict, label: str | None = None):
        """A process for a role: the warm standby's where there is one, else a new one.
        Returns (handle, a reference that resolves when it is up, how: for the phases)."""
        label = label or role
        if role in self._standby:
            h = self._standby.pop(role)
            ref = h.reinit.remote(*args, **kw)
            self._own(h, label)
            return h, ref, " (standby)"
        h = self._create(role, cls, args, kw, self.ccfg.actor_cpus, label)
        return h, h.pid.remote(), " (new process)"

    def _create(self, role: str, cls, args: tuple, kw: dict, num_cpus: float, label: str | None = None):
        """A new process for ``role``, on the node the placement rule picks
        (:class:`~rankcast.runtime.placement.Placer`); named after the cluster and detached
        where the cluster is durable (it outlives a coordinator that Ray restarts)."""
        named = {}
        if self._detached:
            named = {"name": f"{self.ccfg.name}{ROLE_SEP}{uuid.uuid4().hex}", "namespace": self.ccfg.namespace,
                     "detached": True}
        if self.placer is None:
            h = self.rt.create(cls, *args, num_cpus=num_cpus, **named, **kw)
        else:
            opts, target = self.placer.options(role)
            h = self.rt.create(cls, *args, num_cpus=num_cpus, actor_options=opts, **named, **kw)
            self.placer.on(_key(h), target, role)
        self._own(h, label or role)
        return h

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
            self._kill([h for _, h, _ in getattr(self, "_found_standby", ())])
            self._found_standby = []
            return
        self._keep_standbys()
        for role, (cls, args) in self._role_specs.items():
            if role not in self._standby:
                h = self._create("standby", cls, args, {}, 0, f"standby-{role}")
                self._standby[role] = h
                self._standby_warm[role] = h.warm.remote()

    # ------------------------------------------------------------------ roles
    def _wait_timed(self, refs: list, labels: list[str]) -> dict[str, float]:
        """Wait for ``refs`` (roles starting); seconds until each was done, by label (recovery
        phases). Roles not up after ``placement_timeout`` seconds have no node with room: the
        cluster waits for one (:meth:`_no_room`)."""
        t0 = time.perf_counter()
        out, left = {}, list(refs)
        names = dict(zip(refs, labels))
        limit = None if self.rt.inproc else self.ccfg.placement_timeout
        while left:
            wait = None if limit is None else max(0.0, limit - (time.perf_counter() - t0))
            done, left = self.rt.wait(left, num_returns=1, timeout=wait)
            if not done:
                if self._cpus_free() >= self.ccfg.actor_cpus and limit < SLOW_START_LIMIT * self.ccfg.placement_timeout:
                    limit += self.ccfg.placement_timeout      # room: the processes start slowly
                    continue
                self._no_room([names[r] for r in left], left)
            for r in done:
                self.rt.get(r)
                out[names[r]] = time.perf_counter() - t0
        return out

    def _cpus_free(self) -> float:
        """Logical CPUs not taken on the live nodes (Ray's last report)."""
        import ray
        return float(ray.available_resources().get("CPU", 0.0))

    def _no_room(self, labels: list[str], refs: list) -> None:
        """Roles ``labels`` could not start within ``placement_timeout``: no live node has
        room for them. The requests stay with Ray (``refs`` resolve once a node with room
        joined); raises :class:`NoCapacity`, and every call raises it until then."""
        nodes = live_nodes()
        cpus = sum(n["resources"].get("CPU", 0.0) for n in nodes)
        reason = (f"rankcast cluster {self.ccfg.name!r}: no node has room for {', '.join(labels)} "
                  f"({self.ccfg.actor_cpus:g} CPU each; {len(nodes)} live node(s), {cpus:g} CPUs in all, "
                  f"none of them free for it after {self.ccfg.placement_timeout:g} s). The cluster keeps its "
                  f"state and resumes at the first call after a node with room joins.")
        self._waiting = {"since": time.time(), "roles": list(labels), "reason": reason, "probes": list(refs)}
        raise NoCapacity(reason)

    def _resume_if_room(self) -> None:
        """While roles wait for room: once every one of them started (a node with room
        joined), a full recovery (the checkpoint, then the log) makes the cluster whole
        again; before that, :class:`NoCapacity`."""
        w = self._waiting
        probes = w["probes"]
        ready, _ = self.rt.wait(probes, num_returns=len(probes), timeout=0)
        if len(ready) < len(probes) and self._cpus_free() < self.ccfg.actor_cpus * (len(probes) - len(ready)):
            raise NoCapacity(w["reason"])
        # every waiting role started, or there is room for them now (those that still wait
        # for Ray do not answer the recovery, which starts them anew)
        self._waiting = None
        t0 = time.time()
        self._recover(NoCapacity(w["reason"]))
        self.recoveries[-1]["waited_seconds"] = t0 - w["since"]

    def _waiting_stats(self) -> dict:
        """What ``stats()`` says while roles wait for room (no role is asked anything)."""
        return {"subscriptions": len(self.live), "published": self.published,
                "placement": self._placement_stats(ask=False), "recovery": self._recovery_stats()}

    def _placement_stats(self, ask: bool = True) -> dict:
        """Where every role runs (``ask``: each role says its node) and the live nodes."""
        out = {"placement": self.ccfg.placement, "control_node": self.ccfg.control_node,
               "waiting": None if self._waiting is None else
               {k: v for k, v in self._waiting.items() if k != "probes"}}
        if self.placer is None:
            return dict(out, nodes=[], roles={})
        nodes = live_nodes()
        roles = {"coordinator": node_id()}
        if ask:
            labelled = [(f"{role}-{i}", role, h) for role, hs in self.role_groups() for i, h in enumerate(hs)]
            for (label, role, h), node in zip(labelled, self.rt.get([h.node.remote() for _, _, h in labelled])):
                roles[label] = node
                self.placer.on(_key(h), node, role)
        by_node = {n["node"]: [] for n in nodes}
        for label, node in roles.items():
            by_node.setdefault(node, []).append(label)
        out["nodes"] = [{"node": n["node"], "address": n["address"], "head": n["head"],
                         "cpus": n["resources"].get("CPU", 0.0), "roles": by_node[n["node"]]} for n in nodes]
        out["roles"] = roles
        return out

    def _kill(self, handles) -> None:
        if self.rt.inproc:
            return
        import ray
        for h in handles:
            self.placer.forget(_key(h))
            try:
                ray.kill(h, no_restart=True)
            except Exception:  # already gone
                pass

    def _live_roles(self) -> list[tuple[str, object]]:
        """(role, handle) of the roles whose process still answers; the others are killed
        for good (a role that hangs is as good as dead)."""
        roles = [(r, h) for r, hs in self.role_groups() for h in hs]
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
        if self.placer is not None:       # their nodes may be gone: new processes go elsewhere
            self.placer.avoid = {self.placer.where.get(_key(h)) for _, h in dead} - {None}
        self._kill([h for _, h in dead])
        self._drop_dead_standbys()
        return out

    def _drop_dead_standbys(self) -> None:
        """Forget the standby processes whose node is gone: a recovery must not hand a role to
        one (standbys run where the control roles do, by default on the head)."""
        if not self._standby or self.placer is None:
            return
        live = {n["node"] for n in self.placer.nodes(fresh=True)}
        for role, h in list(self._standby.items()):
            node = self.placer.where.get(_key(h))
            if node is not None and node not in live:
                del self._standby[role]
                self._standby_warm.pop(role, None)
                self._kill([h])

    @guarded
    def warm(self) -> dict[str, list[int]]:
        """Every role loads what it runs (its compiled kernels, from numba's cache) now, so
        that the first steps of a stream do not wait for it, and the standby processes
        finish starting and loading theirs (about 1.5 s of CPU each, which would otherwise
        land in the first seconds of a stream). Returns the pids by role."""
        out = {"coordinator": [os.getpid()]}
        for role, hs in self.role_groups():
            out[role] = self.rt.get([h.warm.remote() for h in hs])
        pending = [ref for role, ref in self._standby_warm.items() if role in self._standby]
        if pending:         # a standby that failed is reported by stats (_standby_state)
            self.rt.wait(pending, num_returns=len(pending), timeout=STANDBY_WARM_SECONDS)
        return out

    def pids(self) -> dict[str, list[int]]:
        """Process ids by role (fault-injection tests kill them)."""
        out = {"coordinator": [os.getpid()]}
        for role, hs in self.role_groups():
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
                self.dispatch()
        else:
            if cut:
                self._cut_group()
            self.quiesce()
            self._drain_cuts(block=True)
        e = self._log_epoch + 1
        d = f"ckpt-{e}"
        # the checkpoint's id: each role records its progress under it (Recoverable.snapshot)
        self._mark = uuid.uuid4().hex
        handles = [(h, f"{d}/{role}-{i}") for role, hs in self.snapshot_groups() for i, h in enumerate(hs)]
        snaps = [h.snapshot.remote(self.store, rel, self._mark, self._committed_mark) for h, rel in handles]
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
        self._pending = {"epoch": e, "mark": self._mark, "roles": [h for h, _ in handles], "snaps": snaps,
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
        self._committed_mark = pend["mark"]
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

    def _load_checkpoint(self, reuse: list | None = None, found: list | None = None) -> list:
        """Coordinator state and every role from the MANIFEST's checkpoint (in the live role
        processes ``reuse`` where given; ``found``: those of the cluster before a restart,
        see :meth:`_role_maker`); returns the log records since it (the logs of its epoch
        and of every later, uncommitted snapshot, in order)."""
        t0 = time.perf_counter()
        man = self.store.read("MANIFEST")
        e = man["epoch"]
        state = self.store.read(f"ckpt-{e}/coordinator", shared_config(self.cfg))
        self._read_seconds = time.perf_counter() - t0
        phases = self._load_phases = {"read_coordinator": self._read_seconds}
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
            t1 = time.perf_counter()
            self.deliveries = deque((p, a) for rel, last in self._deliv_chunks if last > self.evicted_upto
                                    for p, a in self.store.read(rel) if p > self.evicted_upto)
            phases["read_deliveries"] = time.perf_counter() - t1
        self.inflight.clear()
        self._cuts.clear()                    # their records are in the log: the replay cuts again
        self.pending_ops = {}
        self.reset_transient()
        if self._staged is not None:          # staged parts are not in the log: that load fails
            self._staged, self._stage_lost = None, True
        self.epoch = e
        self._committed_mark = self._mark
        self._pending = None                  # a checkpoint not committed is abandoned
        self._journal, self._journal_breaks, self._hold = [], self._breaks, self._hold_point()
        t1 = time.perf_counter()
        self._role_seconds = {}
        self._adopted = {}
        self._found = found                   # for the build's _role_maker
        try:
            self.build_roles(f"ckpt-{e}", reuse)
        finally:
            self._found = None
        phases["roles"] = time.perf_counter() - t1
        phases["restore_by_role"] = self._role_seconds
        phases["role_parts"] = self._role_parts([(f"{role}-{i}", h) for role, hs in self.role_groups()
                                                 for i, h in enumerate(hs) if (role, i) not in self._adopted])
        t1 = time.perf_counter()
        records, x = [], e
        while self.store.exists(f"log-{x}"):
            if records:     # a log ends where a checkpoint started, which sent the held publishes
                records.append(LOG_END)
            records += self.store.read_log(f"log-{x}")
            x += 1
        self._log_epoch = max(self._log_epoch, x - 1)
        phases["read_log"] = time.perf_counter() - t1
        return records

    def _role_parts(self, handles: list | None = None) -> dict[str, dict]:
        """Seconds of each part of the roles' restores (``Recoverable.restore_phases``), by
        role label: those of ``handles`` ((label, handle)), by default every role's."""
        if handles is None:
            handles = [(f"{role}-{i}", h) for role, hs in self.role_groups() for i, h in enumerate(hs)]
        if not handles:
            return {}
        got = self.rt.get([h.restore_phases.remote() for _, h in handles])
        return {label: {k: round(v, 3) for k, v in ph.items()} for (label, _), ph in zip(handles, got) if ph}

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
                results = []            # by log record (_current): a log's end is none
                for r in records:
                    out = self._apply(r)
                    if r is not LOG_END:
                        results.append(out)
                t3 = time.perf_counter()
                self._fill_standby()              # after the replay: it needs the cores more
                # no checkpoint here: the log goes on from the same checkpoint
                phases = {"find_dead": t1 - t0, "restore": t2 - t1, "replay": t3 - t2, **self._load_phases}
                self.recoveries.append({"cause": type(cause).__name__, "mode": "full", "seconds": t3 - t0, "phases": phases,
                                        "replayed_calls": _calls(records),
                                        "attempts": attempt + 1,
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
        the whole cluster): the checkpoint, then the log replayed.

        The cluster's live role processes are taken over (:meth:`_found_processes`). A role
        that the kind can adopt (:meth:`_adoptable`: it descends from the checkpoint and
        went on from it by the calls of the log) keeps its state: the replay sends it only
        the calls it lacks and takes the updates it delivered since the checkpoint from what
        it kept. The other live processes are rebuilt from the checkpoint in place, and new
        ones start for the dead. Where an adopted role does not end where the replay does
        (:meth:`_check_adopted`), or dies meanwhile, every role is rebuilt from the
        checkpoint and the log replayed again."""
        t0 = time.perf_counter()
        check_resumable(self.store, self.ccfg)
        self._depth += 1
        self._replaying = True
        try:
            found = self._found_processes()
            t_found = time.perf_counter()
            records = self._load_checkpoint(found=found)
            adopted = sorted(f"{r}-{i}" for r, i in self._adopted)
            try:
                self._replay_and_go_on(records)
            except Exception as e:
                if not self._adopted or not (isinstance(e, AdoptionMismatch) or is_role_death(e)):
                    raise
                # rebuilt from the checkpoint in the live processes, the log replayed to all
                adopted, self._adopted = [], {}
                self._replaying = True
                records = self._load_checkpoint(self._live_roles())
                self._replay_and_go_on(records)
        finally:
            self._depth -= 1
            self._replaying = False
        # init: reading the config and the start of the kind; the rest after it
        phases = {"init": self._init_seconds, "find_roles": t_found - t0, **self._load_phases}
        self.recoveries.append({"cause": "restart", "mode": "adopted" if adopted else "full",
                                "seconds": time.perf_counter() - t0, "phases": phases, "started": self._t_init,
                                "adopted": adopted, "restored": sorted(self._role_seconds),
                                "replayed_calls": _calls(records), "attempts": 1,
                                "position": self.last_seq + 1, "time": time.time()})

    def _replay_and_go_on(self, records: list) -> None:
        """A restart's replay of ``records``, the held publishes sent (as at the end of every
        log), the adopted roles checked, then a checkpoint: a cut and a new log (where roles
        were adopted, its snapshots are written and committed while the cluster serves)."""
        t0 = time.perf_counter()
        for r in records:
            self._apply(r)
        self._release_held()
        t1 = time.perf_counter()
        self._check_adopted()
        t2 = time.perf_counter()
        self._n_logged = sum(r is not LOG_END for r in records)   # since the committed checkpoint
        self._replaying = False       # the checkpoint as in the stream (behind the steps, where it can)
        # with every role rebuilt, committed before serving (a restart that dies again
        # replays from it); with roles adopted, written while the cluster serves
        self._checkpoint(wait=not self._adopted)
        self._load_phases.update(replay=t1 - t0, check_adopted=t2 - t1, checkpoint=time.perf_counter() - t2)

    def _check_adopted(self) -> None:
        """After a restart's replay: every adopted role stands where the replay ended, or
        :class:`AdoptionMismatch` (the kind's check; none by default)."""

    # ------------------------------------------------------------------ the log
    def _log_apply(self, rec: tuple):
        """Write-ahead: the record reaches the log, then it is applied."""
        if self.store is not None:
            if self._current is None:
                self._current = self._n_logged
            self._append_log(rec)
            self._crash_point(rec)
        return self._apply(rec)

    def _crash_point(self, rec: tuple) -> None:
        """Fault injection for the recovery tests (``ClusterConfig.options["crash_after_log"]``:
        client tokens): this process ends right after the log record of the call with one of
        those tokens is written, before anything of the call is applied; once per token (a
        marker in the durable state records it). On Ray only."""
        tokens = self.ccfg.options.get("crash_after_log")
        if not tokens or self._replaying or self.rt.inproc or rec[-1] not in tokens:
            return
        marker = f"crashed-{rec[-1]}"
        if not self.store.exists(marker):
            self.store.write(marker, True)
            os._exit(1)

    def _append_log(self, rec: tuple) -> None:
        """``rec`` to the open log, counted among the records since the committed checkpoint
        (``_n_logged``) and in the open log (``_n_open``)."""
        self.store.append(rec)
        self._n_logged += 1
        self._n_open += 1

    def _apply(self, rec: tuple):
        """Apply one logged call (live, or replayed after a recovery). Pipelined publishes
        that wait in the coordinator (:meth:`_release_held`) go out before any other call."""
        self._applying += 1
        try:
            return self._apply_record(rec)
        finally:
            self._applying -= 1

    def _apply_record(self, rec: tuple):
        kind = rec[0]
        if kind in ("release", "log-end"):    # held publishes went out here (_log_release)
            self._release_held()
            return None
        if kind != "publish" or rec[3]:
            self._release_held()
        if kind == "publish":
            out = self.apply_publish(*rec[1:5])
        elif kind == "subscribe":
            out = self._apply_subscribe(*rec[1:3])
        elif kind == "unsubscribe":
            out = self.apply_unsubscribe(rec[1])
        elif kind == "flush":
            out = self._apply_flush(rec[1])
        elif kind == "cut":
            out = self._cut_group(wait=False)
        elif kind == "load":
            out = None
            for out in self._apply_load(rec[1], rec[2]):
                pass
        elif kind == "batch":
            out = self._apply_batch(*rec[1:7])
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
    @guarded
    def subscribe(self, subs, client=None, token=None) -> None:
        if (done := self._retried(client, token)) is not _NOT_DONE:
            return done
        with self.metrics.busy():
            batch, pending = self.encode_subscriptions(subs)
            check_not_live(batch.ids, self.live, 0, self.ITEM)
            self._log_apply(("subscribe", batch, pending, client, token))

    def _apply_subscribe(self, batch, pending) -> None:
        self.commit_encoding(pending)
        if len(batch) == 0:
            return
        self._cut_group()
        self.place(batch)
        self.dispatch()
        self.quiesce()
        self.baseline(batch.ids)
        self.counters["calls"] += 1

    @guarded
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

    # ------------------------------------------------------------------ batches by id
    @guarded
    def apply_batch(self, sink: str, batch_id: int, call: str, parts: list, client=None, token=None,
                    on_invalid: str = "raise") -> dict:
        """Apply the batch ``batch_id`` of ``sink`` once (docs/streaming.md): ``call`` is
        ``publish`` (``parts``: one or more publish calls' items, applied in order),
        ``subscribe`` or ``unsubscribe`` (one part). The batch's items and its id are one log
        record, so a batch id at or below the sink's last one (a batch replayed after a crash
        or a restart) changes nothing and returns ``applied=False``. An invalid item rejects
        the whole batch before anything is applied: ``on_invalid="raise"`` raises the error
        (naming the item by its position in the batch and its field) and records nothing;
        ``"record"`` records the batch id as rejected, with the error, and returns it."""
        if not isinstance(sink, str) or not sink:
            raise InvalidInput(f"apply_batch: field 'sink': must be a non-empty string, got {sink!r}")
        if isinstance(batch_id, bool) or not isinstance(batch_id, Integral) or batch_id < 0:
            raise InvalidInput(f"apply_batch: field 'batch_id': must be an integer >= 0, got {batch_id!r}")
        if call not in BATCH_CALLS:
            raise InvalidInput(f"apply_batch: field 'call': must be one of {BATCH_CALLS}, got {call!r}")
        if on_invalid not in ("raise", "record"):
            raise InvalidInput(f"apply_batch: field 'on_invalid': must be 'raise' or 'record', got {on_invalid!r}")
        if call != "publish" and len(parts) != 1:
            raise InvalidInput(f"apply_batch: a {call} batch is one part, got {len(parts)}")
        if (done := self._retried(client, token)) is not _NOT_DONE:
            return done
        batch_id = int(batch_id)
        seen = self._batches.get(sink)
        if seen is not None and batch_id <= seen["last"]:
            return self._batch_result(sink, batch_id, False, seen["rejected"].get(batch_id), 0)
        error = None
        with self.metrics.busy():
            try:
                inner = self._encode_batch(call, parts)
            except InvalidInput as e:
                if on_invalid == "raise":
                    raise
                inner, error = [], str(e)
        out = self._log_apply(("batch", sink, batch_id, call, inner, error, client, token))
        if call == "publish" and inner:
            self._cut_if_due()
            self._drain_cuts(block=False)
            self._after_publish()
        return out

    def _encode_batch(self, call: str, parts: list) -> list:
        """The log records of a batch's parts, every item validated (positions count from the
        batch's first item); raises before anything is applied."""
        if call == "publish":
            return [("publish", b, extra) for b, extra in self.encode_publish_parts(parts)]
        if call == "subscribe":
            batch, pending = self.encode_subscriptions(parts[0])
            check_not_live(batch.ids, self.live, 0, self.ITEM)
            return [("subscribe", batch, pending)]
        arr = check_ids_arg(parts[0])
        missing = [i for i in arr.tolist() if i not in self.live]
        if missing:
            raise UnknownSubscription(f"unknown {self.ITEM} id={missing[0]!r}")
        return [("unsubscribe", arr)]

    def encode_publish_parts(self, parts: list) -> list:
        """``encode_publish`` of consecutive publish calls, validated together before any is
        applied: errors name the item by its position in all of them. A kind whose checks of
        a call depend on the calls before it overrides this."""
        out, offset = [], 0
        for items in parts:
            try:
                out.append(self.encode_publish(items))
            except InvalidInput as e:
                raise shift_position(e, offset) from None
            offset += len(items)
        return out

    def _apply_batch(self, sink: str, batch_id: int, call: str, inner: list, error, client) -> dict:
        published, live = self.published, len(self.live)
        for rec in inner:
            if rec[0] == "publish":
                self.apply_publish(rec[1], rec[2], False, client)
            elif rec[0] == "subscribe":
                self._apply_subscribe(rec[1], rec[2])
            else:
                self.apply_unsubscribe(rec[1])
        n = self.published - published if call == "publish" else abs(len(self.live) - live)
        seen = self._batches.setdefault(sink, {"last": -1, "rejected": {}})
        seen["last"] = batch_id
        if error is not None:
            seen["rejected"][batch_id] = error
            while len(seen["rejected"]) > MAX_REJECTED:
                seen["rejected"].pop(next(iter(seen["rejected"])))
        return self._batch_result(sink, batch_id, error is None, error, n)

    def _batch_result(self, sink: str, batch_id: int, applied: bool, rejected, n: int) -> dict:
        return {"sink": sink, "batch_id": batch_id, "applied": applied, "rejected": rejected, "items": n,
                "position": self.last_seq + 1}

    def batch_state(self, sink: str) -> dict:
        """The last batch id applied for ``sink`` (-1: none yet) and its recent rejections
        (batch id -> error)."""
        seen = self._batches.get(sink, {"last": -1, "rejected": {}})
        return {"last": seen["last"], "rejected": dict(seen["rejected"])}

    # ------------------------------------------------------------------ bulk load
    def stage_batch(self, subs) -> int:
        """Bulk load, phase 1: validate and encode one part of the table. Nothing takes effect
        before ``commit_load``; an error anywhere in the table (positions count from the
        table's first row) discards every staged part, so a bad table loads nothing."""
        with self.metrics.busy():
            if self._staged is None:
                self._staged, self._staged_ids, self._staged_terms = [], set(), []
                self._stage_mark = self.mark_encoding()
            offset = sum(len(b) for b in self._staged)
            try:
                try:
                    batch, pending = self.encode_subscriptions(subs)
                except InvalidInput as e:
                    raise shift_position(e, offset) from None
                check_not_live(batch.ids, self.live, offset, self.ITEM)
                for i, sid in enumerate(batch.ids.tolist()):
                    if sid in self._staged_ids:
                        raise item_error("subscription", offset + i, sid, "id", "duplicate id within the table")
            except Exception:
                self.abort_load()
                raise
            self.commit_encoding(pending)   # later parts must see the ids of new terms
            self._staged_terms.append(pending)
            self._staged_ids.update(batch.ids.tolist())
            self._staged.append(batch)
            return len(batch)

    def abort_load(self) -> None:
        """Drop what ``stage_batch`` staged, and the terms it met."""
        if self._staged is not None:
            self.rollback_encoding(self._stage_mark)
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
                self._applying += 1         # a logged record (a replay applies it the same way)
                try:
                    for progress in self._apply_load(staged, terms):
                        yield progress
                finally:
                    self._applying -= 1
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

    def _apply_load(self, staged: list, terms: list):
        for pending in terms:
            self.commit_encoding(pending)
        total = sum(len(b) for b in staged)
        rows_of_step: dict[int, int] = {}
        placed = 0

        def done() -> int:
            return placed - sum(rows_of_step.get(e[0], 0) for e in self.inflight)

        self._cut_group()
        for batch in staged:
            if not len(batch):
                continue
            self.place(batch)
            self.dispatch()
            rows_of_step[self.step] = len(batch)
            placed += len(batch)
            yield done(), total         # dispatch waits for old steps beyond max_in_flight
        while self.inflight:
            self.harvest(self.inflight.popleft())
            yield done(), total
        self.quiesce()
        if staged:
            self.baseline(np.concatenate([b.ids for b in staged]))
        yield total, total

    # ------------------------------------------------------------------ publish
    @guarded
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
            batch, extra = self.encode_publish(items, **kw)
        out = self._log_apply(("publish", batch, extra, bool(wait), client, token))
        if not wait:
            self._cut_if_due()
        self._drain_cuts(block=False)
        self._after_publish()
        self.counters["publish_seconds"] += time.perf_counter() - t0
        return for_client(out)

    def _after_publish(self) -> None:
        """What the kind does at the end of every publish call (load monitoring)."""

    def _release_held(self) -> None:
        """Dispatch the pipelined publishes that wait in the coordinator for busy roles (a
        kind that gathers them into larger steps: :meth:`Coordinator._gather`); every call
        other than a pipelined publish, every cut and every checkpoint calls it first, so
        that they come after those messages in the stream, as they were called."""

    def _log_release(self) -> None:
        """Record that the held publishes go out now, at a moment that the log does not
        otherwise show (the roles' progress, a checkpoint, a tick): a replay sends them
        out at the same point of the stream, so its steps are the ones the roles were sent
        (a restart can then replay only what a live role lacks)."""
        if self.store is not None and not self._replaying:
            self._append_log(("release", None, None))

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
    @guarded
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
            return NO_UPDATES
        return outs[0] if len(outs) == 1 else self._merge_deliveries(outs)

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
        self.quiesce()
        self._drain_cuts(block=True)
        out = self.emit() if handle is None else self._emit_finish(handle, block=True)
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
            arrays = self._merge_deliveries([self.deliveries.pop()[1], arrays])
        self.deliveries.append((pos, arrays))
        self.metrics.inc("updates", n_updates(arrays))
        while self.deliveries and self.deliveries[0][0] <= pos - self.ccfg.retention:
            self.evicted_upto = self.deliveries.popleft()[0]

    def position(self) -> int:
        """The current stream position: messages published so far (deliveries carry the
        position of the call that caused them)."""
        return self.last_seq + 1

    def peek_counters(self) -> dict:
        """The coordinator's counters as they stand, and ``held``: the pipelined publishes
        waiting in it. Waits for nothing and sends nothing (``stats`` first sends what is
        held and finishes every step): a probe that leaves the stream as it is, for a test
        that waits for the coordinator to act on its own."""
        return dict(self.counters, held=len(getattr(self, "_held", ())))

    @guarded
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

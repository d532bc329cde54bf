"""SubscriptionPartition (DSkype subscription bolt): a Skype core for its subscriptions.

One call per step, in step order (Ray runs the calls of one submitter in order; the step
number is checked):

1. control operations at the step's start position: removals, then additions (new
   subscriptions and replicas; each gets its initial results from the re-evaluation below),
   then prefix-length changes;
2. the step's messages routed here, with their global sequence numbers and expiry bounds
   (``SkypeCore.process``), then the expiry watermark of the step's end;
3. re-evaluations "as of" the step's last position b: every shard is asked for the top-K
   with ``expire_upto(b) < seq <= b``, the answers are merged (directly or by an aggregator)
   and installed; repeated while the core asks for a larger K;
4. prefix policies: a replica whose kScore fell so that terms beyond the routed loose
   prefix could reach its top-k asks for reallocation
   (:func:`rankcast.kinds.spatial.prefix.needed_prefix`);
Results leave a partition only at call boundaries: in *direct* mode (every subscription
lives in one partition: hash, location, or a single partition) the coordinator takes the
core's updates (``take_updates``, the Engine's semantics); in *replicated* mode ``ship``
sends the local top-k lists that changed since the last shipment to the aggregators, which
merge the replicas. Under diffs (``ClusterConfig(updates="diff")``, ``diff``) the core
snapshots each list before its first change of an epoch, and ``take_updates`` returns the
entries that left and entered the changed lists (``SkypeCore.take_update_diff``), not the
lists.
"""
from __future__ import annotations

import time

import numpy as np

from rankcast.common.arrays import grow
from rankcast.common.diffs import n_keys
from rankcast.kinds.spatial.columns import MessageBatch, SubscriptionBatch
from rankcast.config import EngineConfig
from ..core import SkypeCore
from ..halves import HalvesCore, merge_plan, merge_updates, scatter_lists
from ..window import CandidateLists
from ..igpt import SideThread
from .aggregator import merge_candidates, shard_candidates
from rankcast.runtime.metrics import RoleMetrics
from ..prefix import needed_prefix, prefix_bound, unsafe_replicas
from rankcast.runtime.recovery import PeerLost, Recoverable, is_role_death
from rankcast.runtime.backends import STEP_ROLE_ENV, InprocRuntime, LocalHandle, writable
from .shard import QUESTIONS, WindowShard
from ..warmup import warm_spatial

__all__ = ["SubscriptionPartition", "SoloPartition", "PartitionOps", "partial_arrival"]

FLOOR_FROM = 64     # re-evaluation rows from which the shards are asked one, then the rest
# the most bytes of takes a partition keeps for an adoption (see SubscriptionPartition._takes):
# beyond them (a checkpoint that takes long to commit) it drops them and its lineage, and a
# restart rebuilds it from the checkpoint instead
RETAIN_MAX_BYTES = 256 << 20


def partial_arrival(replicas, plen, tlen, prefix: bool = True) -> np.ndarray:
    """Whether each added subscription gets only some of the messages that can enter its
    buffer: a replica (in more than one partition), or, under a prefix policy, one routed
    by a loose prefix (shorter than its terms). See :meth:`SubscriptionPartition._set_share`."""
    return (np.asarray(replicas) > 1) | (prefix & (np.asarray(plen) < np.asarray(tlen)))


class PartitionOps:
    """Control operations of one step for one partition (all optional)."""

    __slots__ = ("remove", "add", "add_plen", "add_replicas", "add_indexed", "plen_ids", "plen", "add_given")

    def __init__(self, remove=None, add: SubscriptionBatch | None = None, add_plen=None,
                 plen_ids=None, plen=None, add_replicas=None, add_indexed=None, add_given=None):
        self.remove = remove
        self.add = add
        self.add_plen = add_plen
        self.add_replicas = add_replicas      # partitions holding each added subscription
        self.add_indexed = add_indexed        # bool per term of ``add``: the terms indexed here
        self.plen_ids = plen_ids
        self.plen = plen
        # [(rows of ``add``, a reference to CandidateLists, their rows there, how many of each
        # list to take)]: the initial re-evaluation's answer of those additions, found by the
        # coordinator as of the step's position (a step without messages) and put once for
        # every partition, which the partition installs instead of asking the shards
        # (SubscriptionPartition._install_given)
        self.add_given = add_given

    def without_given(self) -> "PartitionOps":
        """The same operations without ``add_given`` (a replay of the step asks the shards:
        a journal does not keep the candidates)."""
        if self.add_given is None:
            return self
        return PartitionOps(self.remove, self.add, self.add_plen, self.plen_ids, self.plen, self.add_replicas,
                            self.add_indexed)

    @staticmethod
    def combine(ops: list["PartitionOps"]) -> "PartitionOps":
        """One set of operations from several (applied as removals, additions, lengths)."""
        if len(ops) == 1:
            return ops[0]

        def cat(name):
            xs = [getattr(o, name) for o in ops if getattr(o, name) is not None]
            return np.concatenate(xs) if xs else None

        adds = [o for o in ops if o.add is not None]
        reps = (np.concatenate([o.add_replicas if o.add_replicas is not None else np.ones(len(o.add), np.int64)
                                for o in adds]) if any(o.add_replicas is not None for o in adds) else None)
        indexed = (np.concatenate([o.add_indexed if o.add_indexed is not None
                                   else np.ones(len(o.add.term_ids), np.bool_) for o in adds])
                   if any(o.add_indexed is not None for o in adds) else None)
        given, at = [], 0
        for o in adds:
            given += [(rows + at, *rest) for rows, *rest in o.add_given or ()]
            at += len(o.add)
        return PartitionOps(cat("remove"), SubscriptionBatch.concat([o.add for o in adds]) if adds else None,
                            cat("add_plen"), cat("plen_ids"), cat("plen"), reps, indexed, given or None)


class SubscriptionPartition(Recoverable):
    """See the module docstring. Its snapshot (``rebuild``, direct mode) is its
    subscriptions at the step it was taken, with each buffer cut at its k-th score
    (:data:`SNAPSHOT_BUFFERS`, ``SkypeCore.cut_state``: the top-k and its ties, a valid
    buffer of the highest threshold), not its core: a restored partition rebuilds its index
    and installs the cut buffers (the cost model deepens each again at its next
    re-evaluation). Without the cut (or from a core of the other kind, halves or not) it
    rebuilds the buffers by one re-evaluation as of that step's positions before it serves
    (:meth:`_finish_rebuild`; the shards keep what expired since the checkpoint, so they
    answer it). Every checkpoint is a delivery cut, so the core then holds no change still
    to report, and a restored core reports exactly what the lost one would have. The
    snapshot is then megabytes instead of the buffers and index (hundreds of megabytes at
    50k subscriptions: the buffers are many times k deep), which checkpoints would copy,
    compress and write every few seconds, and the restore skips the re-evaluation of every
    subscription (seconds). In replicated mode the aggregators merge lists that depend on
    each replica's past: the whole core is the snapshot there.

    Its takes of updates are counted (:meth:`_progress`) and, where the coordinator may be
    restarted and adopt it, kept since the oldest checkpoint of its lineage (:meth:`retained`):
    the deliveries made of them since died with the coordinator, and its replay makes them
    again from these."""

    _STATE = ("core", "plen", "ub", "step", "exp_end", "pos_end", "_dropped", "_new_ids", "_new_slots", "_n_takes")
    # a direct-mode snapshot holds each buffer cut at its k-th score (SkypeCore.cut_state):
    # a restore installs them instead of re-evaluating every subscription
    SNAPSHOT_BUFFERS = True
    RAY_ENV = STEP_ROLE_ENV      # its steps' arrays reuse the heap's pages (rankcast.runtime.backends)

    def __init__(self, cfg: EngineConfig, index: int, shards: list, aggregators: list, runtime,
                 prefix: bool, merge_via_aggregator: bool = True, cluster: str = "rankcast",
                 export_metrics: bool = True, delay: float = 0.0, seed: int = 0, rebuild: bool = False,
                 diff: bool = False, start_step: int = 0, resume=None):
        self.cfg = cfg
        self.index = index
        self.core = self._make_core(cfg)
        self.shards = list(shards)
        self.aggs = list(aggregators)
        self.rt = runtime
        self.prefix = bool(prefix)
        self.via_agg = bool(merge_via_aggregator)
        self.plen = np.zeros(1024, np.int64)        # prefix length messages are routed by (known)
        self.ub = np.full(1024, -np.inf)            # bound of the terms beyond it (Eq. 18)
        self.step = int(start_step)                 # a partition added later joins at a step
        self.exp_end = -1
        self.pos_end = -1                           # last position of the last step applied
        self.rebuild = bool(rebuild)                # snapshots: subscriptions, not the core
        self.diff = bool(diff)                      # updates as diffs (ClusterConfig.updates)
        self._rebuild = None                        # a restore's re-evaluation, still to run
        self._dropped: list[np.ndarray] = []        # since the last shipment to the aggregators
        self._new_ids: list[np.ndarray] = []
        self._new_slots: list[np.ndarray] = []      # the slots of _new_ids, when added
        self.metrics = RoleMetrics("partition", index, cluster, export_metrics)
        self._delay = float(delay)
        self._rng = np.random.default_rng(seed + 104729 * index + 1)
        self._held = None                           # a step a peer's death interrupted (resume)
        self._shards_ready = None                   # this step's shard appends, not yet waited for
        self._given: list[tuple] = []               # this step's initial answers (PartitionOps.add_given)
        self._n_takes = 0                           # takes of updates so far (take_updates)
        # (take number, updates) since the oldest checkpoint of the lineage, kept when the
        # coordinator may be restarted and adopt this role: the deliveries made of them
        # since that checkpoint died with it (see Recoverable.adopt)
        self._takes: list[tuple[int, tuple]] = []
        self._retained_bytes = 0
        self._resume(resume)

    def _make_core(self, cfg: EngineConfig):
        return SkypeCore(cfg)

    def _warm(self) -> None:
        warm_spatial(self.cfg)

    # ------------------------------------------------------------------ the step
    def process(self, step: int, pos_end: int, exp_end: int, ops: PartitionOps | None, payload,
                shards_ready: list | None = None, take: bool = False, owner: str | None = None):
        """Apply step ``step``: control operations, its messages and the watermark, then its
        re-evaluations. ``shards_ready``: the shards' ``append`` references of this step, in a
        list so that the call starts without them: the matching runs side by side with the
        shards' appends, and only the first question to a shard waits for them. ``take``:
        then also :meth:`take_updates` (``counted``), three results (``num_returns=3``): the
        step ends the core's epoch, and with no control operation nothing but its
        re-evaluations touches the buffers before it ends (``SkypeCore.process``'s ``last``).
        ``owner``: the calling coordinator (``Recoverable.own``)."""
        self._check_owner(owner)
        out = self._process(step, pos_end, exp_end, ops, payload, shards_ready, last=take and ops is None)
        return (out, *self.take_updates(counted=True)) if take else out

    def _process(self, step, pos_end, exp_end, ops, payload, shards_ready, last: bool = False) -> dict:
        if self._delay:
            time.sleep(self._rng.random() * self._delay)
        self._check_whole()
        with self.metrics.busy(step_histogram=True):
            if step != self.step + 1:
                raise RuntimeError(f"subscription partition {self.index}: step {step} after {self.step}")
            self.step, self.pos_end = step, int(pos_end)
            self._shards_ready = shards_ready
            added = self._apply_ops(ops) if ops is not None else None
            n_msgs = 0 if payload is None else len(payload[0])
            window_size = int(pos_end - exp_end)
            expiries = max(0, int(exp_end) - self.exp_end)
            self._advance(step, int(exp_end), payload, last, window_size, n_msgs, expiries)
            self.exp_end = max(self.exp_end, int(exp_end))
            self.metrics.inc("messages", n_msgs)
            return self._finish_step(step, int(pos_end), int(exp_end), window_size, added)

    def _advance(self, step: int, exp_end: int, payload, last: bool, window_size: int, n_msgs: int,
                 expiries: int) -> None:
        """The step's messages (or None) through the core, then its watermark and window."""
        if payload is not None:
            self._disseminate(step, exp_end, payload, last)
        self.core.expire(exp_end)
        self.core.observe_window(window_size, n_msgs, expiries)

    def _disseminate(self, step: int, exp_end: int, payload, last: bool) -> None:
        """The step's messages through the core (matching, buffers)."""
        msgs, seqs, exp = payload
        self.core.process(msgs, seqs, exp, last, diff=self.diff)

    def _finish_step(self, step: int, pos_end: int, exp_end: int, window_size: int, added) -> dict:
        """The step's re-evaluations and what follows them. A shard (or the aggregator
        merging for it) that dies meanwhile leaves the step *held* here, consistent: the
        messages and expiries applied, the re-evaluations still asked for by the core; the
        partition refuses every call (:class:`PeerLost`) until :meth:`resume` finishes it."""
        try:
            self._reevaluate(step, pos_end, exp_end, window_size)
        except Exception as e:
            if not is_role_death(e):
                raise
            self._held = (step, pos_end, exp_end, window_size, added)
            raise PeerLost(f"subscription partition {self.index}: a peer died during step {step}") from e
        core = self.core
        if added is not None:
            core.settle_initial(added)      # initial results are not updates
        out: dict = {"step": step, "partition": self.index}
        if self.prefix:
            out["realloc"] = self._realloc_requests(pos_end)
        self.metrics.set("subscriptions", len(core.subs))
        return out

    def _check_whole(self) -> None:
        if self._held is not None:
            raise PeerLost(f"subscription partition {self.index}: step {self._held[0]} is held "
                           "until a peer that died is replaced (resume)")
        if self._rebuild is not None:
            self._finish_rebuild()

    # ------------------------------------------------------------------ snapshot and restore
    def _state(self) -> dict:
        if not self.rebuild:
            return super()._state()
        live = self.core.subs.live_slots()
        out = {"rebuild": True, "subs": self.core.subs.batch(live), "plen": self.plen[live].copy(),
               "step": self.step, "pos_end": self.pos_end, "exp_end": self.exp_end, "_n_takes": self._n_takes}
        if self.SNAPSHOT_BUFFERS:
            out["cut"] = (type(self.core).__name__, self.core.cut_state(live))
        return out

    def _progress(self) -> dict:
        return {"step": self.step, "takes": self._n_takes, "pos_end": self.pos_end}

    def _prune_retained(self, oldest: dict) -> None:
        self._takes = [t for t in self._takes if t[0] > oldest.get("takes", 0)]
        self._retained_bytes = sum(_nbytes(out) for _, out in self._takes)

    def retained(self, after: int) -> list[tuple[int, tuple]]:
        """The updates of the takes numbered above ``after`` that this role kept (those since
        the oldest checkpoint of its lineage): (take number, update arrays) in order."""
        return [t for t in self._takes if t[0] > after]

    def _snapshot_by_fork(self) -> bool:
        return not self.rebuild           # the whole core: buffers and index

    def _snapshot_compressed(self) -> bool:
        return not self.rebuild           # subscriptions, cut buffers (and a window): dense

    def _snapshot_raw(self) -> bool:
        return self.rebuild               # copies of the subscriptions and cut buffers

    def _restore(self, state: dict) -> None:
        if not state.pop("rebuild", False):
            super()._restore(state)
            return
        subs, plen = state.pop("subs"), state.pop("plen")
        cut = state.pop("cut", None)
        super()._restore(state)
        if not len(subs):
            return
        with self._phase("index"):
            self._rebuild = self._add(subs, plen)
        if cut is not None and cut[0] == type(self.core).__name__:
            with self._phase("buffers"):
                self.core.install_cut(self._rebuild, cut[1])
            self._rebuild = self._rebuild[:0]        # nothing to re-evaluate

    def _finish_rebuild(self) -> None:
        """The restored subscriptions' buffers: one re-evaluation as of the snapshot's step
        (positions ``exp_end < seq <= pos_end``), whose results are the state to go on from,
        not updates. Run before the partition serves anything (a peer dying meanwhile
        leaves it to run again, as a held step)."""
        slots = self._rebuild
        self._rebuild = None
        if not len(slots):                  # restored with its buffers
            self.metrics.inc("rebuilds", 1)
            return
        with self.metrics.busy(), self._phase("reevaluate"):
            try:
                self._reevaluate(self.step, self.pos_end, self.exp_end, self.pos_end - self.exp_end, floor=False)
            except Exception as e:
                if not is_role_death(e):
                    raise
                self._rebuild = slots
                raise PeerLost(f"subscription partition {self.index}: a peer died while it was rebuilt") from e
            self.core.settle_initial(slots)
            self.core.discard_updates()
        self.metrics.inc("rebuilds", 1)

    def resume(self, shards: list, aggregators: list) -> int:
        """After a recovery replaced a peer: take the new handles, finish a restore's
        re-evaluation or a held step (its re-evaluations as of its own positions: the shards
        answer by sequence range) and return the last step applied."""
        self.shards, self.aggs = list(shards), list(aggregators)
        self._shards_ready = None           # stale: the recovery re-sent the shards' appends first
        if self._rebuild is not None:
            self._finish_rebuild()
        if self._held is not None:
            held, self._held = self._held, None
            with self.metrics.busy():
                self._finish_step(*held)
        return self.step

    def _apply_ops(self, ops: PartitionOps) -> np.ndarray | None:
        """Removals, additions, prefix lengths; returns the slots added."""
        core = self.core
        slots_added = None
        if ops.remove is not None and len(ops.remove):
            dropped = np.asarray(ops.remove, np.int64)[core.find_slots(ops.remove) >= 0]
            if len(dropped):
                core.remove(dropped)
                self._dropped.append(dropped)
        if ops.add is not None and len(ops.add):
            slots = self._add(ops.add, ops.add_plen, ops.add_indexed)
            self._set_share(slots, ops.add_replicas)
            self._given += [(slots[rows], *rest) for rows, *rest in ops.add_given or ()]
            self._new_ids.append(ops.add.ids)
            self._new_slots.append(slots)
            slots_added = slots
        if ops.plen_ids is not None and len(ops.plen_ids):
            slots = core.find_slots(ops.plen_ids)
            keep = slots >= 0
            slots = slots[keep]
            self._set_plen(slots, np.maximum(self.plen[slots], ops.plen[keep]))
        return slots_added

    def _add(self, subs: SubscriptionBatch, plen: np.ndarray, indexed=None) -> np.ndarray:
        """Subscriptions into the core, routed by prefixes of length ``plen``, indexed by
        the terms ``indexed`` marks (None: all); their slots (marked for their initial
        re-evaluation)."""
        slots = self.core.add(subs, indexed)
        self.plen = grow(self.plen, int(slots.max()) + 1)
        self.ub = grow(self.ub, int(slots.max()) + 1, -np.inf)
        self._set_plen(slots, plen)
        return slots

    def _set_share(self, slots: np.ndarray, replicas) -> None:
        """The cost model's arrival share of added subscriptions (``core.set_arrival_share``).
        A replica, or a subscription routed by a loose prefix, gets only some of the messages
        that can enter its buffer, while the rows it got from the whole window at its
        re-evaluation all expire: its buffer drifts down, and a buffer as thin as an engine's
        falls below k within a fraction of a window, each time a question to every shard.
        The worst case, no arrival, sizes its buffer: a deeper cut, of more candidates
        (``rankcast.kinds.spatial.core.REPLICA_CANDIDATES``)."""
        if replicas is None or self.rebuild:
            return
        s = self.core.subs
        self.core.set_arrival_share(slots[partial_arrival(replicas, self.plen[slots], s.tlen[slots], self.prefix)], 0.0)

    def _set_plen(self, slots: np.ndarray, plen: np.ndarray) -> None:
        s = self.core.subs
        self.plen[slots] = plen
        self.ub[slots] = prefix_bound(slots, s.toff, s.tlen, s.wtsum, s.alpha, self.plen)

    def _reevaluate(self, step: int, pos_end: int, exp_end: int, window_size: int, floor: bool = True) -> None:
        """Re-evaluations as of ``pos_end`` until the core asks for nothing more (``floor``:
        see :meth:`_ask_shards`)."""
        core = self.core
        if self._given:
            self._install_given(window_size)
        while True:
            slots, req, K = core.reeval_requests()
            if len(slots) == 0:
                break
            if self._shards_ready:
                with self.metrics.waiting():
                    self.rt.get(list(self._shards_ready))
                self._shards_ready = None
            refs, asked = self._ask_shards(step, req, K, exp_end, pos_end, floor)
            # writable: Ray's answers are read-only, and a kernel given a read-only array is
            # compiled once more (seconds, in a stream's first steps on a cold cache)
            with self.metrics.waiting():
                if self.via_agg and len(self.shards) > 1:
                    agg = self.aggs[(self.index + step) % len(self.aggs)]
                    cands = writable(self.rt.get(agg.merge_candidates.remote(K, *refs, asked=asked)))
                else:
                    cands = merge_candidates(writable(self.rt.get(refs)), K, asked)
            more = core.apply_reevals(slots, cands, window_size)
            self.metrics.inc("reevaluations", len(slots) - len(more))

    def _install_given(self, window_size: int) -> None:
        """The initial re-evaluations the coordinator answered with the step's additions
        (``PartitionOps.add_given``), each list cut to what this core asks for (a search for
        fewer lists the best of a search for more); a list too short for it, and not complete,
        is left to the shards."""
        given, self._given = self._given, []
        slots = np.concatenate([g[0] for g in given])
        with self.metrics.waiting():
            lists = self.rt.get([g[1] for g in given])
        cands = CandidateLists.concat([c.take(rows, K) for c, (_, _, rows, K) in zip(lists, given)])
        K = self.core.reeval_depth(slots)
        use = np.flatnonzero((K > 0) & (cands.complete | (np.diff(cands.offsets) >= K)))
        if len(use):
            more = self.core.apply_reevals(slots[use], cands.take(use, K[use]), window_size)
            self.metrics.inc("reevaluations", len(use) - len(more))

    def _ask_shards(self, step: int, req: SubscriptionBatch, K: np.ndarray, after: int, upto: int,
                    floor: bool = True) -> tuple[list, np.ndarray]:
        """Every shard's answer (refs), and how many candidates per row each was asked for.
        A batch of at least ``FLOOR_FROM`` rows asks one shard first (rotating) for K and
        gives the others its K-th scores as a floor: what scores under it cannot be in the
        union's top K, so they prune from their first posting on (about a quarter of their
        work). Smaller batches, and any with ``floor=False`` (a rebuild, which the stream
        waits for: the shards answer side by side), ask all at once, each shard for its share
        of K (``shard_candidates``; the merge keeps what the answers certify)."""
        S = len(self.shards)
        first = (self.index + step) % S
        if S == 1 or len(K) < FLOOR_FROM or not floor:
            # asked from a rotating one on (in process they answer in turn, and the first one
            # asked after the partition's own work found the caches cold), listed in order
            asked = shard_candidates(K, S)
            refs = {(first + i) % S: _ask(self.shards[(first + i) % S], step, req, asked, after, upto)
                    for i in range(S)}
            return [refs[i] for i in range(S)], asked
        ref = _ask(self.shards[first], step, req, K, after, upto)
        with self.metrics.waiting():
            floor = self.rt.get(ref).kth_scores(K)
        return [ref if i == first else _ask(s, step, req, K, after, upto, floor)
                for i, s in enumerate(self.shards)], K

    def _realloc_requests(self, pos_end: int):
        """Replicas whose kScore no longer stays above the bound of the terms beyond the
        routed prefix (checked for every replica after every step: one vectorised pass)."""
        s = self.core.subs
        live = s.live_slots()
        live = live[self.plen[live] < s.tlen[live]]       # replicas routed by a loose prefix
        kscore = self.core.kth_scores(live)
        unsafe = unsafe_replicas(kscore, self.ub[live])
        if len(unsafe) == 0:
            return None
        slots, kscore = live[unsafe], kscore[unsafe]
        need = needed_prefix(slots, s.toff, s.tlen, s.wtsum, s.alpha, kscore, self.plen[slots])
        self.metrics.inc("reallocations", len(slots))
        return {"subs": s.batch(slots), "plen": need, "pos": pos_end, "partition": self.index}

    # ------------------------------------------------------------------ results
    def take_updates(self, counted: bool = False, owner: str | None = None):
        """Direct mode (every subscription in one partition): (sub_ids, offsets, msg_ids,
        scores) of the top-k lists changed since the previous call (the core's epochs), or
        under diffs their diff arrays (sub ids, rank, msg ids, scores, sign).
        ``counted``: (number of subscriptions, those arrays), two results (``num_returns=2``).
        ``owner``: the calling coordinator (``Recoverable.own``)."""
        self._check_owner(owner)
        self._check_whole()
        with self.metrics.busy():
            return self._took(self.core.take_update_diff() if self.diff else self.core.take_updates(), counted)

    def _took(self, out: tuple, counted: bool):
        """A take's result from the core's arrays ``out``: counted, and kept for an adoption
        (see ``_takes``)."""
        self._n_takes += 1
        if getattr(self, "_retain", False):
            self._takes.append((self._n_takes, out))
            self._retained_bytes += _nbytes(out)
            if self._retained_bytes > RETAIN_MAX_BYTES:
                self._takes, self._retained_bytes, self._lineage = [], 0, {}
        n = n_keys(out[0]) if self.diff else len(out[0])
        self.metrics.inc("updates", n)
        return (n, out) if counted else out

    def ship(self) -> list:
        """Replicated mode: send the aggregators the local lists changed since the previous
        shipment (and new replicas', and dropped ones); returns the calls' references."""
        self._check_whole()
        with self.metrics.busy():
            core = self.core
            s = core.subs
            slots = core.take_changed()
            if self._new_slots:       # new replicas still held (a slot may have been reused)
                new = np.concatenate(self._new_slots)
                new = new[s.alive[new] & (s.ids[new] == np.concatenate(self._new_ids))]
                slots = np.union1d(slots, new)
            dropped = np.concatenate(self._dropped) if self._dropped else np.zeros(0, np.int64)
            self._new_ids, self._new_slots, self._dropped = [], [], []
            if len(slots) == 0 and len(dropped) == 0:
                return []
            A = len(self.aggs)
            # by aggregator, then id: each aggregator's lists are one run of the gathered CSR
            slots = slots[np.lexsort((s.ids[slots], np.mod(s.ids[slots], A)))]
            ids, ks, off, mid, mseq, msc = core.topk_rows(slots)
            cuts = np.searchsorted(np.mod(ids, A), np.arange(A + 1))
            downer = np.mod(dropped, A)
            refs = []
            for a in range(A):
                lo, hi = int(cuts[a]), int(cuts[a + 1])
                drop = dropped[downer == a]
                if lo == hi and len(drop) == 0:
                    continue
                r0, r1 = off[lo], off[hi]
                refs.append(self.aggs[a].apply.remote(self.index, drop, ids[lo:hi], ks[lo:hi],
                                                      off[lo:hi + 1] - r0, mid[r0:r1], mseq[r0:r1],
                                                      msc[r0:r1]))
            self.metrics.inc("updates", len(slots))
            return refs

    def topk_many(self, ids) -> dict[int, list[tuple[int, float]]]:
        """Direct mode: the current top-k of the ``ids`` held here."""
        self._check_whole()
        slots = self.core.find_slots(ids)
        held = [i for i, sl in zip(ids, slots.tolist()) if sl >= 0]
        if not held:
            return {}
        _, _, off, mid, _, msc = self.core.topk_rows(slots[slots >= 0])
        mids, scs, o = mid.tolist(), msc.tolist(), off.tolist()
        return {i: list(zip(mids[o[r]:o[r + 1]], scs[o[r]:o[r + 1]])) for r, i in enumerate(held)}

    # ------------------------------------------------------------------ queries and tools
    def sample(self, n: int, seed: int = 0) -> SubscriptionBatch:
        """Up to ``n`` of the subscriptions held (load monitoring samples)."""
        live = self.core.subs.live_slots()
        rng = np.random.default_rng(seed)
        if len(live) > n:
            live = np.sort(rng.choice(live, n, replace=False))
        return self.core.subs.batch(live)

    def store_pages(self, nbytes: int) -> np.ndarray:
        """``nbytes`` bytes, which Ray writes into the object store as this call's result:
        the store's pages they land on are then mapped in this process (``Coordinator.warm``)."""
        return np.zeros(nbytes, np.uint8)

    def held(self) -> tuple[SubscriptionBatch, np.ndarray]:
        """Every subscription held, with the prefix length each is routed by."""
        self._check_whole()
        live = self.core.subs.live_slots()
        return self.core.subs.batch(live), self.plen[live].copy()

    def load(self) -> dict:
        """Load monitoring (paper 7.4): busy time so far, subscriptions, messages received."""
        return {"busy_seconds": self.metrics.values["busy_seconds"], "subscriptions": len(self.core.subs),
                "messages": self.metrics.values["messages"]}

    def stats(self) -> dict:
        out = self.metrics.snapshot()
        core = self.core.stats()
        out.update({f"core_{k}": v for k, v in core.items()})
        out.update(index=self.index, step=self.step, subscriptions=len(self.core.subs),
                   retained_takes=len(self._takes), retained_bytes=self._retained_bytes)
        return out


class SoloPartition(SubscriptionPartition):
    """A subscription partition with the whole message window in its own process: an engine
    in an actor (the only partition of a cluster, or one of a few that every message
    reaches, each holding the window). The coordinator sends it each step whole (no
    distributor, no window shard, no aggregator: :attr:`Coordinator.solo`); ``process``
    appends the step's messages to its own :class:`WindowShard`, then runs the step, whose
    re-evaluation questions are direct calls on that shard. A ``publish(wait=True)`` is then
    one hop (client, coordinator, this actor, results to the client) instead of a shard's
    append, a partition's step and its questions' round trips to the shard's process.

    The window's index drops at every step what the step's watermark expired (as an engine
    does): a question comes only from this partition's own step, after its append, or from
    a restore's re-evaluation, which runs before the next step's append (``_check_whole``).
    Its snapshot is the partition's (its subscriptions) with the shard's (its messages),
    taken at one step: a restored one rebuilds the index, then its buffers as of that step.
    A partial recovery replays the journal's steps to it like to any partition.

    A step runs on two threads (:class:`~rankcast.kinds.spatial.igpt.SideThread`; the kernels of
    the match and of the window's append and expiry run without the GIL): the window's
    append goes first on the second thread, which then matches the last messages of the step
    while this thread matches the first ones. The re-evaluations, which read the window, come
    after both. A ``publish(wait=True)`` waits for this actor alone while the machine's
    other core would be idle.

    ``halves`` (the cluster's only partition): the subscriptions are two cores, the hash
    halves (:class:`~rankcast.kinds.spatial.halves.HalvesCore`), and a step with messages runs
    each half's whole step on a thread of its own: matching, buffers, re-evaluations (the
    window, which the step's append on the second thread fills first, is read-only then) and,
    when the step ends the epoch, its updates, merged into subscription id order. The
    SideThread's measure of the overlap decides, as for the match: on a machine whose cores
    are all taken both halves run on this thread. The snapshot is the same (subscriptions
    and messages): a restore with or without halves rebuilds either."""

    def __init__(self, cfg: EngineConfig, index: int, capacity: int, cluster: str = "rankcast",
                 export_metrics: bool = True, delay: float = 0.0, seed: int = 0, halves: bool = False,
                 side: bool = True, diff: bool = False, resume=None):
        # before the partition's __init__, which restores both from ``resume``
        self.window_shard = WindowShard(cfg, index, cluster, export_metrics, 0.0, seed, capacity)
        self._side: SideThread | None = None        # made at the first step (it does not pickle)
        self.halves = bool(halves)
        self.side = bool(side)       # the match's SideThread (see _disseminate); False: none
        self._scratch = [[], []]                    # each half's room for the window's searches
        self._taken = None                          # (step, updates) a halves' step took
        super().__init__(cfg, index, [LocalHandle(self.window_shard)], [], InprocRuntime(), False,
                         cluster=cluster, export_metrics=export_metrics, delay=delay, seed=seed,
                         rebuild=True, diff=diff, resume=resume)

    def process(self, step: int, pos_end: int, exp_end: int, ops: PartitionOps | None, payload,
                shards_ready: list | None = None, take: bool = False, owner: str | None = None):
        """Append the step's messages to the window (what expired up to ``exp_end`` leaves
        it; beside the matching, :meth:`_disseminate`), then
        :meth:`SubscriptionPartition.process`. ``shards_ready`` is not used."""
        self._check_owner(owner)
        # a restore's re-evaluation asks about what this append expires: it runs first
        # (every recovery runs it in ``resume``; this covers a step that comes before one)
        self._check_whole()
        if step != self.step + 1:
            raise RuntimeError(f"subscription partition {self.index}: step {step} after {self.step}")
        self._taken = None
        if payload is None:
            self.window_shard.append(step, None, exp_end, exp_end)
        return super().process(step, pos_end, exp_end, ops, payload, None, take, owner)

    def _make_core(self, cfg: EngineConfig):
        return HalvesCore(cfg) if self.halves else SkypeCore(cfg)

    def _warm(self) -> None:
        super()._warm()
        if self.halves:
            e = np.zeros(0, np.int64)
            z = np.zeros(1, np.int64)
            merge_updates(e, z, e, np.zeros(0), e, z, e, np.zeros(0))
            merge_plan(e, z, e, z)
            scatter_lists(z, e, np.zeros(0), e, e, np.zeros(0))

    # "no free core" verdicts in a row keep a halves' step on one thread for 1, 2, 4, then at
    # most HALVES_PROBE_EVERY - 1 steps (SideThread.verdict): a wrong verdict costs one step
    HALVES_PROBE_EVERY = 8

    def _side_thread(self) -> SideThread:
        if self._side is None:
            self._side = SideThread(self.HALVES_PROBE_EVERY) if self.halves else SideThread()
        return self._side

    def _advance(self, step: int, exp_end: int, payload, last: bool, window_size: int, n_msgs: int,
                 expiries: int) -> None:
        """With halves, a step with messages runs each half on a thread of its own (see the
        class docstring); otherwise as any partition (:meth:`_disseminate`)."""
        if not self.halves or payload is None:
            return super()._advance(step, exp_end, payload, last, window_size, n_msgs, expiries)
        msgs, seqs, exp = payload
        side = self._side_thread()
        pool = side.pool if side.active() else None
        shard, upto = self.window_shard, self.pos_end

        def observe(core):
            core.expire(exp_end)
            core.observe_window(window_size, n_msgs, expiries)

        def search(h, req, K):
            return shard.window.search(req, K, after_seq=exp_end, upto_seq=upto, scratch=self._scratch[h])

        w0, c0 = time.perf_counter(), time.process_time()
        updates, done, asked = self.core.step(
            msgs, seqs, exp, last, pool, lambda: shard.append(step, (msgs, seqs), exp_end, exp_end),
            search, observe, take=last, diff=self.diff)
        h0, h1 = self.core.half_cpu
        if pool is not None and min(h0, h1) > 0.25 * max(h0, h1):
            # a verdict only where both threads had work: a step of a window still filling, or
            # of few subscriptions, is the append on one thread while the other waits. "No
            # free core" where neither each thread's CPU against its wall clock nor the
            # process's says a second core ran
            side.threads_ran(self.core.half_cpu, self.core.half_wall,
                             (time.process_time() - c0) / max(time.perf_counter() - w0, 1e-9))
        self._taken = (step, updates) if last else None
        self.metrics.inc("halves_steps", 1)
        self.metrics.inc("halves_threaded_steps", int(pool is not None))
        self.metrics.inc("reevaluations", done)
        shard.metrics.inc("searches", asked)

    def take_updates(self, counted: bool = False, owner: str | None = None):
        """As :meth:`SubscriptionPartition.take_updates`; a halves' step that ended the epoch
        took them already (on its threads)."""
        self._check_owner(owner)
        taken, self._taken = self._taken, None
        if taken is None or taken[0] != self.step:
            return super().take_updates(counted)
        self._check_whole()
        with self.metrics.busy():
            return self._took(taken[1], counted)

    def _set_plen(self, slots: np.ndarray, plen: np.ndarray) -> None:
        if not self.halves:
            return super()._set_plen(slots, plen)
        # a solo partition is routed no prefix (it gets every message): no bound beyond one
        self.plen[slots] = plen
        self.ub[slots] = -np.inf

    def _disseminate(self, step: int, exp_end: int, payload, last: bool) -> None:
        """The step's messages: appended to the window on the side thread, which then
        matches its share of them, while this thread matches the others."""
        msgs, seqs, exp = payload

        def append():
            self.window_shard.append(step, (msgs, seqs), exp_end, exp_end)
        if not self.side:
            append()
            self.core.process(msgs, seqs, exp, last, diff=self.diff)
            self.metrics.inc("side_steps", 1)
            return
        side = self._side_thread()
        before = sum(side.verdicts)
        self.core.process(msgs, seqs, exp, last, side=side, run=append, diff=self.diff)
        self.metrics.inc("side_steps", 1)
        # a batch matched on two threads gives one verdict
        self.metrics.inc("side_threaded_steps", sum(side.verdicts) - before)

    def resume(self, shards: list, aggregators: list) -> int:
        """As :meth:`SubscriptionPartition.resume`; the shard is its own (``shards`` is empty)."""
        return super().resume([LocalHandle(self.window_shard)], [])

    def _state(self) -> dict:
        return {**super()._state(), "window": self.window_shard._state(),
                "window_metrics": dict(self.window_shard.metrics.values)}

    def _restore(self, state: dict) -> None:
        self.window_shard.metrics.values.update(state.pop("window_metrics"))
        with self._phase("window"):
            self.window_shard._restore(state.pop("window"))
        super()._restore(state)

    def message_sample(self, n: int) -> MessageBatch:
        """Up to ``n`` of the most recent messages of the window (load monitoring refits)."""
        return self.window_shard.sample(n)

    def window_stats(self) -> dict:
        """The window shard's stats (its busy time is its own, not the partition's)."""
        return self.window_shard.stats()


def _nbytes(arrays) -> int:
    return sum(a.nbytes for a in arrays)


def _ask(shard, *args):
    """A shard's ``search``, in its questions' own concurrency group: not behind the appends
    queued before it (see rankcast.kinds.spatial.roles.shard)."""
    return shard.search.options(concurrency_group=QUESTIONS).remote(*args)

"""The spatial-keyword kind's coordinator (DSkype on the runtime's roles).

It owns what must be global and consistent for every attached client: the term dictionary
(:class:`~rankcast.kinds.spatial.columns.Encoder`), validation state (live subscriptions, message ids in
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
:class:`~rankcast.kinds.spatial.roles.partition.SoloPartition` holds the window too, and a step is one
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

import time
from collections import deque
from numbers import Integral

import numpy as np
from rankcast.kinds.spatial.columns import Encoder, MessageBatch, SubscriptionBatch
from rankcast.common.validation import too_many
from rankcast.common.arrays import runs
from rankcast.errors import UnknownSubscription
from rankcast.kinds.spatial.engine import check_message_state
from rankcast.kinds.spatial.core import candidates_asked
from rankcast.kinds.spatial.prefix import needed_prefix
from rankcast.kinds.spatial.roles.aggregator import Aggregator, merge_candidates, shard_candidates
from rankcast.runtime.distributor import Distributor, shard_payloads
from rankcast.kinds.spatial.roles.partition import PartitionOps, SoloPartition, SubscriptionPartition, partial_arrival
from rankcast.kinds.spatial.roles.policies import Policy, Routing, make_policy
from rankcast.kinds.spatial.roles.shard import WindowShard
from rankcast.kinds.spatial.subtable import SubTable
from rankcast.kinds.spatial.window import WindowClock
from rankcast.runtime.coordinator import AdoptionMismatch, CoordinatorBase, STANDBY_WARM_SECONDS, STORE_WARM_BYTES, STORE_WARM_CHUNK, UpdateParts, NO_UPDATES, guarded, latest_lists, concat_updates
from rankcast.runtime.recovery import is_role_death
from rankcast.config import EngineConfig, limits

# the most partitions that hold the whole window each (SoloPartition) under a broadcasting
# policy: every partition appends every message, where one window shard would once
SOLO_PARTITIONS = 2
# unfinished steps from which pipelined publishes wait in the coordinator to go out together
# (Coordinator._gather): a step running, and what arrives meanwhile goes out as the next step
# when it ends. (With a second step queued in every partition, a publisher below the
# partitions' speed got steps of one call each, whose walks cost several times more per
# message: the stream fell behind until steps grew again, seconds of latency at 80% of the
# sustainable rate.)
GATHER_DEPTH = 1
# a broadcast step's messages go inside the partitions' calls where Ray sends them so
# (RayRuntime.inline_bytes) and at most this many partitions get a copy (Coordinator._broadcast)
INLINE_COPIES = 2
INLINE_SLACK = 4096           # bytes of pickling around the arrays
HEAL_SETTLE_SECONDS = 120.0   # a partial recovery waits this long for the steps in flight


class WindowIds:
    """The ids of the messages in the window (a message id may not be published again while
    its message is there): id -> sequence number, and the calls' (ids, seqs) in order, to
    drop them as they expire. A checkpoint keeps the ids and seqs as two arrays, not the
    dictionary and one pair of arrays per call (thousands of small objects under calls of 50
    messages, which took the coordinator tens of milliseconds to pickle at each
    checkpoint); the dictionary is rebuilt from them."""

    __slots__ = ("ids", "fifo")

    def __init__(self):
        self.ids: dict[int, int] = {}
        self.fifo: deque[tuple[np.ndarray, np.ndarray]] = deque()

    def __len__(self) -> int:
        return len(self.ids)

    def contains(self, ids: np.ndarray) -> np.ndarray:
        """Whether each of ``ids`` is in the window (a mask)."""
        d = self.ids
        return np.fromiter((i in d for i in ids.tolist()), bool, len(ids))

    def add(self, ids: np.ndarray, seqs: np.ndarray, expire_upto: int) -> None:
        """Messages ``ids`` entered at ``seqs`` (ascending); those up to ``expire_upto`` left."""
        self.ids.update(zip(ids.tolist(), seqs.tolist()))
        self.fifo.append((ids, seqs))
        pop = self.ids.pop
        while self.fifo:
            fids, fseqs = self.fifo[0]
            if fseqs[0] > expire_upto:
                break
            cut = int(np.searchsorted(fseqs, expire_upto, side="right"))
            for i in fids[:cut].tolist():
                pop(i, None)
            if cut == len(fseqs):
                self.fifo.popleft()
            else:
                self.fifo[0] = (fids[cut:], fseqs[cut:])
                break

    def __getstate__(self):
        if not self.fifo:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        return (np.concatenate([a for a, _ in self.fifo]).astype(np.int64, copy=False),
                np.concatenate([b for _, b in self.fifo]).astype(np.int64, copy=False))

    def __setstate__(self, state) -> None:
        ids, seqs = state
        self.ids = dict(zip(ids.tolist(), seqs.tolist()))
        self.fifo = deque([(ids, seqs)] if len(ids) else [])


class Coordinator(CoordinatorBase):
    """The spatial-keyword kind (Skype / DSkype): see the module docstring."""

    KIND_STATE = ("encoder", "clock", "exp_dispatched", "window_ids", "_stash", "_last_busy", "monitor_log")
    # prefix policies: new subscriptions are placed at the prefix their initial top-k needs,
    # their replicas given that answer (place); False: at one term, grown by reallocation
    INITIAL_LISTS = True

    def init_kind(self, sample) -> None:
        ccfg, cfg, opts = self.ccfg, self.cfg, self.ccfg.options
        self.encoder = Encoder(cfg.bounds, cfg.vocabulary)
        self.clock = WindowClock(cfg)
        self.policy: Policy = make_policy(ccfg.policy, ccfg.partitions, cfg.bounds, cfg.max_dist,
                                          window=cfg.window or int(opts.get("window_estimate", 100_000)),
                                          options=opts)
        self.policy.fit(*self._encode_sample(sample))
        self.exp_dispatched = -1
        self.window_ids = WindowIds()
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
        # a restart's replay to adopted partitions (see _adoptable): partition -> its
        # progress and the updates it kept; the takes since the checkpoint, counted
        self._ahead: dict[int, dict] = {}
        self._take_no = 0

    def reset_transient(self) -> None:
        self.realloc_queue = []
        self._taken = None
        self._ahead, self._take_no = {}, 0
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
        settled = []
        if waiting:
            settled, _ = self.rt.wait(waiting, num_returns=len(waiting), timeout=HEAL_SETTLE_SECONDS)
        t_settled = time.perf_counter()
        live = {id(h) for _, h in self._live_roles(self._deaths_seen(cause, settled))}
        dead = [(role, i) for role, hs in self.role_groups() for i, h in enumerate(hs) if id(h) not in live]
        if any(role not in ("partition", "shard") for role, _ in dead):
            return False
        if self._pending is not None and dead:   # its snapshots are not all there: abandoned
            self._abandon_checkpoint()
        t1 = time.perf_counter()
        ready, labels = [], []
        for role, i in sorted(dead, key=lambda d: d[0] != "shard"):     # shards first
            cls, args = self._role_args[(role, i)]
            h, ref, how = self._spawn(role, cls, args, {"resume": (self.store, f"ckpt-{self.epoch}/{role}-{i}")},
                                      f"{role}-{i}")
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
        parts = self._role_parts([(f"{role}-{i}", (self.shards if role == "shard" else self.parts)[i])
                                  for role, i in dead])
        sent, replayed = [], 0
        for x in self._journal:
            if x[0] == "take":
                # a cut: a new partition takes again (dropped where the cut was delivered), and
                # so does a live one whose take a held step failed (it took nothing)
                counts, refs = x[1], x[2]
                for p in range(P):
                    if p in new_parts or self._failed(counts[p]):
                        counts[p], refs[p] = self.parts[p].take_updates.options(num_returns=2).remote(
                            counted=True, owner=self._owner)
                        sent.append(counts[p])
                continue
            _, j, pos_end, exp_end, ops, payloads, appended, refs = x
            for p in range(P):
                if applied[p] < j:
                    refs[p] = self.parts[p].process.remote(j, pos_end, exp_end, ops.get(p), payloads[p],
                                                           list(appended), owner=self._owner)
                    sent.append(refs[p])
                    replayed += 1
                elif p not in new_parts and self._failed(refs[p]):     # held, then finished by resume
                    refs[p] = self.rt.put({"step": j, "partition": p})
        self.rt.get(sent + [a for x in steps for a in x[6]])
        t3 = time.perf_counter()
        self.recoveries.append({
            "cause": type(cause).__name__, "mode": "partial", "seconds": t3 - t0,
            "restored": labels, "replayed_calls": 0, "replayed_steps": replayed, "attempts": 1,
            "phases": {"settle": t_settled - t0, "find_dead": t1 - t_settled, "restore": t2 - t1,
                       "rebuild": t_rebuilt - t2, "replay": t3 - t_rebuilt,
                       "restore_by_role": self._role_seconds, "role_parts": parts},
            "position": self.last_seq + 1, "time": time.time()})
        self._fill_standby()
        return True

    def _adoptable(self, role: str, i: int, info: dict) -> bool:
        """A partition that holds the window (solo, direct mode) is adopted by a restart when
        its lineage holds the checkpoint resumed from, at the checkpoint's step: its state
        went on from there by the steps of the log, which the replay rebuilds one for one
        (the log records when held publishes went out), so it is sent only the steps and
        takes past its own, and its takes since the checkpoint come from what it kept."""
        at = info["lineage"].get(self._mark)
        if role != "partition" or not (self.solo and self.direct) or at is None or at.get("step") != self.step:
            return False
        prog = info["progress"]
        self._ahead[i] = {"step": prog["step"], "takes": prog["takes"], "mark_takes": at["takes"],
                          "retained": None}
        return True

    def _retains(self, label: str) -> bool:
        return self._detached and self.solo and self.direct and label.startswith("partition-")

    def _skips(self, p: int, j: int) -> bool:
        """Whether adopted partition ``p`` applied step ``j`` already (a restart's replay)."""
        a = self._ahead.get(p)
        return a is not None and j <= a["step"]

    def _kept_take(self, p: int):
        """The current take of adopted partition ``p`` from what it kept, as (count, updates)
        references; None where it did not take it yet (then it is asked)."""
        a = self._ahead.get(p)
        if a is None:
            return None
        n = a["mark_takes"] + self._take_no
        if n > a["takes"]:
            return None
        if a["retained"] is None:
            a["retained"] = dict(self.rt.get(self.parts[p].retained.remote(a["mark_takes"])))
        out = a["retained"].pop(n, None)
        if out is None:
            raise AdoptionMismatch(f"partition {p} kept no take {n} (it took {a['takes']})")
        return self.rt.put(len(out[0])), self.rt.put(out)

    def _check_adopted(self) -> None:
        """Every adopted partition applied the steps and takes of the replay, no more, no less."""
        if not self._adopted:
            return
        self.quiesce()
        self._ahead = {}
        for (role, i), info in self._adopted.items():
            got = self.rt.get(self.parts[i].adopt.remote(self._owner))["progress"]
            want = {"step": self.step, "takes": info["lineage"][self._mark]["takes"] + self._take_no,
                    "pos_end": self.dispatched_pos}
            if got != want:
                raise AdoptionMismatch(f"{role}-{i} stands at {got} after the replay, which ended at {want}")

    def _failed(self, ref) -> bool:
        """Whether a finished role call failed (a partial recovery's settled references)."""
        try:
            self.rt.get(ref)
        except Exception:
            return True
        return False

    def role_groups(self) -> list[tuple[str, list]]:
        return [("distributor", self.dists), ("partition", self.parts), ("shard", self.shards),
                ("aggregator", self.aggs)]

    def snapshot_groups(self) -> list[tuple[str, list]]:
        return [("partition", self.parts), ("shard", self.shards), ("aggregator", self.aggs)]

    def _duties(self) -> dict[str, str]:
        # the window: its shards, or the partitions that hold it whole (solo)
        return {"window": "shard" if self.shards else "partition"}

    # validation and encoding (the term dictionary)
    def encode_subscriptions(self, subs):
        return self.encoder.encode_subscriptions(subs)

    def commit_encoding(self, pending) -> None:
        self.encoder.commit(pending)

    def mark_encoding(self):
        return self.encoder.terms.mark()

    def rollback_encoding(self, mark) -> None:
        self.encoder.terms.rollback(mark)


    def build_roles(self, ckpt: str | None, reuse: list | None = None) -> None:
        """Create every role (resumed from the snapshots under ``ckpt`` when given). After a
        death, ``reuse`` lists the live role processes: each becomes a role again in place
        (:meth:`Recoverable.reinit`), and only the dead ones get a new process."""
        role_cfg = self._role_cfg()
        ccfg, cfg, opts = self.ccfg, self.rt.share(role_cfg), self.ccfg.options
        name, export = ccfg.name, self._export
        delay, seed = float(opts.get("delay", 0.0)), int(opts.get("seed", 0))
        P, S, A, D = self.policy.n_partitions, ccfg.window_shards, ccfg.aggregators, ccfg.distributors
        if self.policy.broadcasts:
            D = 0       # the coordinator sends each step to every partition itself (_broadcast)
        make, finish = self._role_maker(ckpt, reuse)
        self.solo = self._solo_layout(ckpt)
        diff = self.diffs           # the roles report diffs (ClusterConfig.updates)
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
                               side, diff) for p in range(P)]
        else:
            # a shard's index holds its share of the window plus that of the steps in flight
            held = 0 if self.cfg.window is None else -(-(self.cfg.window + ccfg.max_in_flight * self._max_step()) // S)
            self.shards = [make("shard", WindowShard, s, cfg, s, name, export, delay, seed, held)
                           for s in range(S)]
            self.aggs = [make("aggregator", Aggregator, a, a, P, name, export, diff) for a in range(A)]
            # with one partition there is nothing to reallocate to: no prefix checks
            self._part_args = (self.shards, self.aggs, self.rt, self.policy.prefix and ccfg.partitions > 1,
                               bool(opts.get("merge_via_aggregator", True)), name, export, delay, seed,
                               self.direct, diff)
            part_cfg = self._partition_cfg()
            pcfg = cfg if part_cfg is role_cfg else self.rt.share(part_cfg)
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

    def _role_cfg(self) -> EngineConfig:
        """The engine configuration the roles get: the engine's without its vocabulary. Only
        the coordinator encodes text (the roles get term ids and weights), and a vocabulary
        fitted on a corpus is tens of megabytes of Python strings and floats in every
        process that holds one."""
        if self.cfg.vocabulary is None:
            return self.cfg
        if getattr(self, "_bare_cfg", None) is None:
            self._bare_cfg = self.cfg.replace(vocabulary=None)
        return self._bare_cfg

    def _partition_cfg(self) -> EngineConfig:
        """The subscription partitions' engine configuration: the roles' (:meth:`_role_cfg`), with the policy's
        finer Quadtree leaves (``Policy.leaf_capacity``) when there are several partitions:
        a partition of a replicating policy holds a few thousand replicas, which the
        engine's leaf capacity leaves in a few loose leaves. One partition holds every
        subscription, as the engine does."""
        a, cfg = self.policy.leaf_capacity, self._role_cfg()
        if a is None or self.ccfg.partitions == 1 or a >= cfg.leaf_capacity:
            return cfg
        return cfg.replace(leaf_capacity=a)

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
    def place(self, batch: SubscriptionBatch) -> None:
        """Initial placement of new subscriptions, for the step without messages that its
        callers (``subscribe``, the bulk load) dispatch next. Prefix policies route by the
        prefix each one's initial top-k needs (:meth:`_initial_lists`), and its replicas get
        that answer with their additions; without window shards, by one term, grown later
        by reallocation."""
        plen = self.policy.initial_prefix(batch)
        if self.INITIAL_LISTS and self.policy.prefix and self.shards and not self.solo and len(batch):
            plen, routing, cands, K = self._initial_lists(batch, plen)
            given = (self.rt.put(cands), K)         # once, for every partition
        else:
            routing, given = self.policy.route_subscriptions(batch, plen), None
        self.live.update(zip(batch.ids.tolist(), plen.tolist()))
        self._add_replicas(batch, plen, routing, np.arange(len(batch)), given)

    def _initial_lists(self, batch: SubscriptionBatch, plen: np.ndarray) -> tuple:
        """(prefix lengths, routing, candidate lists, depths) of new subscriptions: the window
        shards' answer to their initial re-evaluation as of the last dispatched step (the next
        one, without messages, has its positions), how much of each list its replicas will ask
        for (``candidates_asked``), and the prefix that answer's kScore needs
        (:func:`~rankcast.kinds.spatial.prefix.needed_prefix`, the reallocation test). A
        replica then starts at the prefix it would have asked for after its first step,
        without a second search per replica; one whose own kScore disagrees still asks for
        reallocation, as any replica does."""
        tab = SubTable(len(batch))
        slots = tab.add(batch)
        k = batch.k.astype(np.int64)
        deep = candidates_asked(self.cfg, k, np.ones(len(batch), np.bool_))
        asked = shard_candidates(deep, len(self.shards))
        refs = [sh.search.remote(self.step, batch, asked, self.exp_dispatched, self.dispatched_pos)
                for sh in self.shards]
        with self.metrics.waiting():
            answers = self.rt.get(refs)
        cands = merge_candidates(answers, deep, asked)
        plen = needed_prefix(slots, tab.toff, tab.tlen, tab.wtsum, tab.alpha, cands.kth_scores(k), plen)
        routing = self.policy.route_subscriptions(batch, plen)
        partial = partial_arrival(routing.counts(), plen, tab.tlen[slots])
        return plen, routing, cands, candidates_asked(self.cfg, k, partial)

    def _add_replicas(self, batch: SubscriptionBatch, plen: np.ndarray, routing, rows: np.ndarray,
                      given=None) -> None:
        """Additions of the ``rows`` of ``batch`` to every partition ``routing`` places them
        in, with their replica counts and, where the policy ``index_placed``, the terms each
        replica indexes (those placing it there); ``given``: (a reference to their initial
        candidate lists, a row per row of ``batch``; how many of each to take), sent with them."""
        reps = routing.counts()
        where = self.policy.placement(batch, plen) if self.policy.index_placed else None
        lens = np.diff(batch.offsets)
        for p, at in enumerate(routing.rows_of(self.policy.n_partitions)):
            r = np.intersect1d(at, rows) if len(rows) < len(batch) else at
            if len(r):
                indexed = None if where is None else where[runs(batch.offsets[r], lens[r])[1]] == p
                self._add_ops(p, PartitionOps(add=batch.take(r), add_plen=plen[r], add_replicas=reps[r],
                                              add_indexed=indexed,
                                              add_given=None if given is None else
                                              [(np.arange(len(r)), given[0], r, given[1][r])]))

    def apply_unsubscribe(self, arr: np.ndarray) -> None:
        self._cut_group()
        for i in arr.tolist():
            del self.live[i]
        for p in range(self.policy.n_partitions):
            self._add_ops(p, PartitionOps(remove=arr))
        self.dispatch()
        self.quiesce()
        if not self.direct:
            self._ship()
            self.rt.get([agg.forget.remote(arr[np.mod(arr, len(self.aggs)) == a])
                         for a, agg in enumerate(self.aggs)])
        self.counters["calls"] += 1

    def encode_publish(self, msgs):
        batch, pending = self.encoder.encode_messages(msgs, time_window=self.cfg.time_window)
        self._check_messages(batch)
        return batch, pending

    def _after_publish(self) -> None:
        self._monitor()

    def apply_publish(self, batch: MessageBatch, pending, wait: bool, client):
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
                        self.dispatch(part, s, e, take=wait and i == len(pieces) - 1)
            return self._publish_result(n, wait, client)

    # ------------------------------------------------------------------ gathered steps
    def _gathering(self) -> bool:
        """Whether pipelined publishes may wait here for busy partitions (:meth:`_gather`):
        ``ClusterConfig.coalesce`` on, on Ray (in process every step is done when
        dispatched). A replay of the log gathers them as the live run did: they go out at
        the ``release`` records, and when ``coalesce`` messages are held."""
        return getattr(self.ccfg, "coalesce", 0) > 0 and not self.rt.inproc \
            and (self._replaying or self.rt.self_handle() is not None)

    def _gather(self, pieces: list[tuple]) -> None:
        """A pipelined publish's steps, ``pieces``: dispatched at once while fewer than
        :data:`GATHER_DEPTH` steps are unfinished (while a step runs); otherwise they wait
        here, with the calls after them, and go out together as steps of up to
        ``ClusterConfig.coalesce`` messages: when one is full, or when the oldest
        unfinished step ends, at the next call or at this actor's
        own :meth:`tick`, which Ray runs then. Every other call, cut and checkpoint sends
        them first (:meth:`_release_held`); a cut that falls due while they wait behind a
        step waits for the tick (:meth:`_cut_deferred`).

        A step's cost is largely fixed (each partition's walk of its index, its
        re-evaluations, the calls and their arguments): a publisher faster than the
        partitions gets fewer, larger steps, as if it had published larger calls. Nothing
        observable changes: the messages, their order, sequence numbers and expiries are the
        calls'; pipelined calls are delivered at cuts, to which the held messages go first;
        the log holds every call, and a recovery replays it."""
        if not self._replaying:
            self._reap()
        self._held += pieces
        self._held_n += sum(len(p[0]) for p in pieces)
        self.counters["held_calls"] += 1
        if not self._replaying and len(self.inflight) < GATHER_DEPTH:
            self._log_release()     # a replay holds them until this record: the same steps
            self._release_held()
            return
        while self._held_n >= self.ccfg.coalesce:
            self._dispatch_held()
        if not self._replaying:
            self._post_tick()

    def _reap(self) -> None:
        """Harvest the steps at the front that are done, without waiting."""
        while self.inflight and self._finished(self.inflight[0]):
            self.harvest(self.inflight.popleft())

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

    @guarded
    def tick(self, step: int, *done) -> None:
        """This actor's own call once step ``step`` is done (``done``: its results, which Ray
        resolved first; see :meth:`_post_tick`): what is still held goes out now that the
        partitions have less to do (or waits for the next step to end)."""
        if not self._held:
            return
        self.counters["ticks"] += 1
        self._reap()
        # a cut deferred behind the busy step (_cut_deferred) happens now, even behind a full
        # step sent meanwhile (``coalesce``): what is held goes out and its last step takes
        # the updates, so the partitions end the epoch in that call
        if self._cut_due():
            self._cut_now()
        elif len(self.inflight) < GATHER_DEPTH:
            self._release_held()
        else:
            self._post_tick()

    def _cut_deferred(self) -> bool:
        """A due cut waits while pipelined calls are held behind a step in flight: it would
        send them out as a step of their own, queued behind the busy one, and a step's cost
        is largely fixed (:meth:`_gather`). The :meth:`tick` that runs when that step ends
        cuts: what is held goes out then, with what arrived meanwhile, in one step."""
        return bool(self._held) and bool(self.inflight) and self._gathering()

    def _dispatch_held(self, take: bool = False) -> None:
        """One step of the held pieces, from the oldest: as many whole pieces as fit in
        ``ClusterConfig.coalesce`` messages (at least one). ``take``: the last of them takes
        the updates (:meth:`dispatch`)."""
        cap, n, j = self.ccfg.coalesce, 0, 0
        while j < len(self._held) and (j == 0 or n + len(self._held[j][0]) <= cap):
            n += len(self._held[j][0])
            j += 1
        out, self._held = self._held[:j], self._held[j:]
        self._held_n -= n
        take = take and not self._held
        if j == 1:
            self.dispatch(*out[0], take=take)
            return
        self.counters["gathered_steps"] += 1
        self.dispatch(MessageBatch.concat([p[0] for p in out]), np.concatenate([p[1] for p in out]),
                      np.concatenate([p[2] for p in out]), take=take)

    def _release_held(self, take: bool = False) -> None:
        """Every held piece out, in order, as steps of up to ``coalesce`` messages; ``take``:
        the last one takes the updates, for the cut that follows at once (``_cut_group``).
        Outside a logged call (a tick, a checkpoint, a query that quiesces) the log records
        it."""
        if self._held and not self._applying:
            self._log_release()
        while self._held:
            self._dispatch_held(take)


    @guarded
    def topk(self, sub_id) -> list[tuple[int, float]]:
        if isinstance(sub_id, bool) or not isinstance(sub_id, Integral) or int(sub_id) not in self.live:
            raise UnknownSubscription(f"unknown subscription id={sub_id!r}")
        return self.topk_many([int(sub_id)])[int(sub_id)]

    @guarded
    def topk_many(self, sub_ids) -> dict[int, list[tuple[int, float]]]:
        """topk of several subscriptions in one round trip (tests and tools)."""
        limit = limits().max_items
        if len(sub_ids) > limit:
            raise too_many("subscription id", len(sub_ids), limit)
        ids = [int(i) for i in sub_ids]
        for i in ids:
            if i not in self.live:
                raise UnknownSubscription(f"unknown subscription id={i!r}")
        self.quiesce()
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
        check_message_state(batch, self.window_ids.contains(batch.ids), self.cfg.time_window, self.clock.t_max)

    def _window_add(self, ids: np.ndarray, seqs: np.ndarray, expire_upto: int) -> None:
        self.window_ids.add(ids, seqs, expire_upto)

    # ------------------------------------------------------------------ steps
    def dispatch(self, msgs: MessageBatch | None = None, seqs=None, exp=None, take: bool = False) -> None:
        """Submit one step (messages and/or the pending control operations). ``take`` (direct
        mode, the last step of a ``publish(wait=True)``): each partition also returns its
        updates once the step is done, the cut's ``take_updates`` folded into the step's call
        (:meth:`_emit_start`), one actor call less per partition and call."""
        while len(self.inflight) >= self.ccfg.max_in_flight:
            self.harvest(self.inflight.popleft())
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
            self._take_no += 1
        refs, counts, updates = [], [], []
        for p, pt in enumerate(self.parts):
            if self._skips(p, j):       # an adopted partition has it (its take too: one call)
                refs.append(self.rt.put({"step": j, "partition": p}))
                if take:
                    kept = self._kept_take(p)
                    if kept is None:
                        raise AdoptionMismatch(f"partition {p} applied step {j} but not its take")
                    counts.append(kept[0])
                    updates.append(kept[1])
            elif take:
                r, c, u = pt.process.options(num_returns=3).remote(j, pos_end, exp_end, ops.get(p), payloads[p],
                                                                   list(appended), take=True, owner=self._owner)
                refs.append(r)
                counts.append(c)
                updates.append(u)
            else:
                refs.append(pt.process.remote(j, pos_end, exp_end, ops.get(p), payloads[p], list(appended),
                                              owner=self._owner))
        self.inflight.append((j, refs, appended, pos_end, exp_end))
        if journal:       # the same lists: a partial recovery replaces the dead roles' references
            self._journal.append(("step", j, pos_end, exp_end, {p: o.without_given() for p, o in ops.items()},
                                  payloads, appended, refs))
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

    def harvest(self, entry) -> None:
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

    def quiesce(self) -> None:
        """Send what is held (:meth:`_gather`), deliver the started cuts, finish every step,
        then run reallocations until none is asked for."""
        self._release_held()
        self._drain_cuts(block=True)
        while True:
            while self.inflight:
                self.harvest(self.inflight.popleft())
            self.metrics.set("queue_depth", 0)
            if not self.realloc_queue and not self.pending_ops:
                return
            self.dispatch()

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

    def emit(self) -> tuple:
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
        self._take_no += 1
        for i, p in enumerate(self.parts):
            kept = self._kept_take(i)
            c, r = kept if kept is not None else p.take_updates.options(num_returns=2).remote(
                counted=True, owner=self._owner)
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
        return UpdateParts(self.rt, some, sum(counts)) if some else NO_UPDATES

    def _combine(self, outs: list[tuple]) -> tuple:
        """One delivery's arrays from the partitions' updates and those kept from a move
        (first: taken before it)."""
        outs = [o for o in outs if len(o[0])]
        if not outs:
            return NO_UPDATES
        if len(outs) > len(self.parts) or (self.diffs and len(outs) > 1):
            outs = [latest_lists(outs)]     # a subscription moved: its latest list wins, its diffs compose
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

    def baseline(self, ids: np.ndarray) -> None:
        """New subscriptions: their initial results are not updates."""
        if self.direct:
            return      # a core does not report a subscription in the epoch that added it
        self._ship()
        A = len(self.aggs)
        self.rt.get([agg.baseline.remote(ids[np.mod(ids, A) == a]) for a, agg in enumerate(self.aggs)])

    # ------------------------------------------------------------------ load monitoring
    REBALANCING = ("location", "keyword", "prefix")     # policies with online rebalancing

    @guarded
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
        self.quiesce()
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
        self.parts.append(self._create("partition", SubscriptionPartition, (self._partition_cfg(), new, *self._part_args),
                                       {"start_step": self.step}, self.ccfg.actor_cpus))
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
            self.dispatch()
            self.quiesce()
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
        from rankcast.kinds.spatial.prefix import take_prefix as _take_prefix
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
            self.dispatch()
            self.quiesce()
        return {"action": "rebalance", "moved": int(len(affected)),
                "ranges": self.policy.describe().get("ranges")}

    # ------------------------------------------------------------------ stats
    @guarded
    def stats(self) -> dict:
        self.quiesce()
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
            "window": len(self.window_ids),
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
            "placement": self._placement_stats(),
        }
        return out


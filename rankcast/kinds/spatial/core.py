"""SkypeCore: subscriptions, their index and their k-skyband buffers (paper Sections 5-6).

The core owns no window: message batches come in with their global sequence numbers and
expiry boundaries, and re-evaluations go out as requests answered by a
:class:`~rankcast.kinds.spatial.window.MessageWindow` (the local one in :class:`rankcast.Engine`,
or the window shards of a cluster). That split is what lets the same core run inside a
subscription partition actor.

One publish batch is: ``process`` (dissemination with the thresholds as they stand, then
the batch's expiries and insertions, one merge per buffer: ``skyband.process_batch``),
``reeval_requests`` / ``apply_reevals`` for the buffers that fell below k (deferred to the
batch's end: the buffer invariant holds all along, only the top-k of those buffers waits),
and ``take_updates``.
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np

from rankcast.common.arrays import expand_runs
from rankcast.kinds.spatial.columns import MessageBatch, SubscriptionBatch
from rankcast.config import EngineConfig
from rankcast.errors import UnknownSubscription
from . import skyband as sk
from .subtable import SubTable
from .window import CandidateLists

__all__ = ["SkypeCore", "POLICIES", "candidates_asked"]

POLICIES = {"cskyband": 0, "skyband": 1, "kmax": 2}
KMAX = 60          # k' of the kmax baseline (paper 8.1.2)
# a cluster replica's re-evaluation fetches this many times the candidates (room for a deeper
# buffer: keyword at 64 partitions over 15,000 messages, 76,552 -> 14,903 re-evaluations)
REPLICA_CANDIDATES = 2


def candidates_asked(cfg: EngineConfig, k: np.ndarray, partial: np.ndarray) -> np.ndarray:
    """How many candidates a re-evaluation asks for, per subscription of top-``k``:
    ``max(candidate_factor * k, k + candidate_extra)``, and :data:`REPLICA_CANDIDATES` times
    that where ``partial`` (a replica, or one routed by a loose prefix: its buffer is cut
    for no arrivals, ``skyband.BufferState.arrival_share``; the deeper the cut the longer it
    lasts, and the cut can only be as deep as the candidates)."""
    k = np.asarray(k, np.int64)
    K = np.maximum(np.ceil(cfg.candidate_factor * k).astype(np.int64), k + cfg.candidate_extra)
    return np.where(partial, REPLICA_CANDIDATES * K, K)


def _default_disseminator():
    from .igpt import IGPT
    return IGPT


class SkypeCore:
    """Subscriptions + cost-based k-skyband buffers; see the module docstring.

    ``subs`` (the subscription table: ids, k, alpha, term lists by slot) may be read from
    outside; the buffers (``buf``) are the core's own: callers go through ``kth_scores``,
    ``topk_rows``, ``settle_initial`` and ``take_updates``."""

    COMPACT_FROM = 1 << 16      # pool rows from which the buffers' pool is compacted

    def __init__(self, cfg: EngineConfig, *, disseminator: Callable | None = None,
                 policy: str = "cskyband"):
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {sorted(POLICIES)}, got {policy!r}")
        self.cfg = cfg
        self.policy = POLICIES[policy]
        self.mode = sk.KMAX if policy == "kmax" else sk.SKYBAND
        self.subs = SubTable()
        self.index = (disseminator or _default_disseminator())(self.subs, cfg)
        span = cfg.window if cfg.window is not None else 1 << 16
        self.buf = sk.BufferState(slots=len(self.subs.ids),
                                  buckets=1 << max(10, min(22, int(2 * span).bit_length())))
        self._live_rows = 0
        # Eq. 9 and 10 in one unit: seconds. C_topk is the measured time of one re-evaluation,
        # C_sm counts buffer rows visited, each costing the measured seconds per row.
        self.c_topk_seconds = 1e-4
        self.c_row_seconds = 1e-8
        self.window_size = float(cfg.window or 1)
        self.p_arr = self.p_exp = 0.5
        self._arrivals = 0.0
        self._expiries = 0.0
        self._extra_k: dict[int, int] = {}   # slot -> larger K after an ambiguous cut
        self.counters = dict(messages=0, inserted=0, reevaluations=0, reeval_candidates=0,
                             verified=0, amp_seconds=0.0, amp_cpu_seconds=0.0, emp_seconds=0.0, updates=0,
                             compactions=0)

    # ------------------------------------------------------------------ subscriptions
    def __len__(self) -> int:
        return len(self.subs)

    def add(self, b: SubscriptionBatch, indexed: np.ndarray | None = None) -> np.ndarray:
        """Insert ``b``; returns the slots. ``indexed`` (bool per term of ``b``, None: all):
        the terms the index holds. A subscription whose index leaves out some of its terms
        still gets every message whose first term shared with it (in term-id order) is
        indexed: there the bound covers the whole score (see ``rankcast.kinds.spatial.igpt``)."""
        slots = self.subs.add(b, indexed)
        self.buf.grow_slots(len(self.subs.ids))
        bf = self.buf
        bf.blen[slots] = 0
        bf.bcap[slots] = 0
        bf.oldest[slots] = -1
        bf.lnext[slots] = -1
        bf.lprev[slots] = -1
        bf.reeval[slots] = True           # initial results (paper 6.3)
        bf.arrival_share[slots] = 1.0
        bf.epoch_of[slots] = bf.epoch     # new: nothing to report for this epoch
        bf.snap_len[slots] = 0            # (a reused slot's, of an older epoch, no longer counts)
        bf.pn[slots] = 0
        self.index.add(slots)
        return slots

    def set_arrival_share(self, slots, share) -> None:
        """The share of the window's arrivals that reach these slots' buffers (1 by default;
        a cluster's replicas: see ``skyband.BufferState``): the cost model's buffer depth."""
        self.buf.arrival_share[np.asarray(slots, np.int64)] = share

    def find_slots(self, ids) -> np.ndarray:
        """The slot of each id, -1 for an id not held."""
        get = self.subs.slot_of.get
        ids = np.asarray(ids, np.int64)
        return np.fromiter((get(i, -1) for i in ids.tolist()), np.int64, len(ids))

    def slots_of(self, ids) -> np.ndarray:
        """The slot of each id; an id not held raises UnknownSubscription."""
        ids = np.asarray(ids, np.int64)
        slots = self.find_slots(ids)
        if (slots < 0).any():
            raise UnknownSubscription(f"unknown subscription id={int(ids[np.argmin(slots)])!r}")
        return slots

    def remove(self, ids) -> None:
        slots = self.slots_of(ids)
        if len(np.unique(slots)) != len(slots):
            raise UnknownSubscription("unsubscribe names a subscription twice")
        bf = self.buf
        for s in slots.tolist():
            sk._unlink(s, bf.oldest, bf.lnext, bf.lprev, bf.head)
        bf.blen[slots] = 0
        bf.pn[slots] = 0
        bf.reeval[slots] = False
        self.index.remove(slots)
        self.subs.remove(slots)
        for s in slots.tolist():
            self._extra_k.pop(s, None)

    # ------------------------------------------------------------------ messages
    def process(self, msgs: MessageBatch, seqs: np.ndarray, expire_upto: np.ndarray, last: bool = False,
                side=None, run=None, diff: bool = False) -> None:
        """Disseminate a batch and maintain the buffers (arrivals and expiries, in order).
        ``last``: the caller ends the epoch after this batch and its re-evaluations (the
        engine's last part of a publish call), so the buffers keep no snapshot of top-k lists
        that the batch changes (``skyband.process_batch``). ``side``: a
        :class:`~rankcast.kinds.spatial.igpt.SideThread` that runs ``run`` (the caller's work, which
        touches nothing of the core) and a share of the matching beside this thread. ``diff``:
        the epoch's updates are taken as diffs (``take_update_diff``): in every batch a list's
        first change of the epoch leaves its diff rows as the merge makes it, an unchanged
        list leaves nothing (``skyband.process_batch``, ``DIFF_CHANGED``)."""
        t0 = time.perf_counter()
        c0 = time.thread_time()
        midx, slots, scores = self.index.match(msgs) if side is None else self.index.match(msgs, side, run)
        cand_off = np.zeros(len(msgs) + 1, np.int64)
        np.cumsum(np.bincount(midx, minlength=len(msgs)), out=cand_off[1:])
        t1 = time.perf_counter()
        s, b = self.subs, self.buf
        if self.mode == sk.SKYBAND:     # one merge per buffer and batch
            out = sk.process_batch(
                seqs, msgs.ids, msgs.t, expire_upto, cand_off, slots, scores,
                s.k, s.theta, s.alive, b.expired_upto,
                b.bstart, b.blen, b.bcap, b.bi, b.bf, b.used, b.oldest, b.lnext, b.lprev, b.head,
                b.reeval, b.epoch, b.epoch_of, b.snap_off, b.snap_len, b.snap, b.snap_used,
                sk.DIFF_CHANGED if diff else sk.MARK_CHANGED if last else 0, b.pn, b.pend)
        else:                           # kmax raises theta as it goes: message by message
            out = sk.process(
                seqs, msgs.ids, msgs.t, expire_upto, cand_off, slots, scores,
                s.k, s.theta, s.alive, self.mode, KMAX, b.expired_upto,
                b.bstart, b.blen, b.bcap, b.bi, b.bf, b.used, b.oldest, b.lnext, b.lprev, b.head,
                b.reeval, b.epoch, b.epoch_of, b.snap_off, b.snap_len, b.snap, b.snap_used)
        (b.bi, b.bf, b.used, b.snap, b.snap_used, b.expired_upto, touched, raised, inserted, ops) = out
        b.touched.append(touched)
        opened = sk.raise_open(touched, s.k, s.theta, b.bstart, b.blen, b.bi, b.bf,
                               b.oldest, b.lnext, b.lprev, b.head) if self.mode == sk.SKYBAND else touched[:0]
        changed = np.concatenate([raised, opened])
        if len(changed):
            self.index.thresholds_changed(np.unique(changed))
        t2 = time.perf_counter()
        if ops > 1000:
            self.c_row_seconds = 0.8 * self.c_row_seconds + 0.2 * (t2 - t1) / ops
        n = len(msgs)
        if self.cfg.window is not None:     # Eq. 9-12 take |W| as the configured count
            self.window_size = float(self.cfg.window)
        c = self.counters
        c["messages"] += n
        c["inserted"] += int(inserted)
        verified = getattr(self.index, "verified", None)       # IGPT's, without its stats' sums
        c["verified"] = verified() if verified is not None else int(self.index.stats().get("verified", 0))
        # AMP: dissemination + insertion; expiries are inside the same kernel pass and
        # cheap next to re-evaluation, which EMP accounts for (apply_reevals / search).
        c["amp_seconds"] += (t1 - t0) + (t2 - t1)
        c["amp_cpu_seconds"] += time.thread_time() - c0     # the same, in this thread's CPU time
        self._maybe_compact()

    def expire(self, upto_seq: int) -> None:
        """Advance the expiry watermark without messages (a partition that got none)."""
        b, s = self.buf, self.subs
        if upto_seq <= b.expired_upto:
            return
        self.merge_pending()            # an expiry may reach a top-k: the rows below it complete
        b.snap, b.snap_used, touched = sk.expire_only(
            b.expired_upto, upto_seq, s.k, s.theta, b.bstart, b.blen, b.bi, b.bf, b.oldest,
            b.lnext, b.lprev, b.head, b.reeval, b.epoch, b.epoch_of, b.snap_off, b.snap_len,
            b.snap, b.snap_used)
        b.expired_upto = upto_seq
        b.touched.append(touched)

    def merge_pending(self, slots=None) -> None:
        """Merge the deferred candidates of ``slots`` (None: every slot) into their buffers
        (``skyband`` module docstring); the top-k lists stay as they are."""
        b = self.buf
        n = self.subs.n
        slots = np.flatnonzero(b.pn[:n]) if slots is None else np.asarray(slots, np.int64)
        if len(slots):
            b.bi, b.bf, b.used = sk.merge_pending(
                slots, self.subs.k, b.expired_upto, b.bstart, b.blen, b.bcap, b.bi, b.bf, b.used,
                b.oldest, b.lnext, b.lprev, b.head, b.pn, b.pend)

    def observe_window(self, size: int, arrivals: int = 0, expiries: int = 0) -> None:
        """The window's current size and recent flow (time windows, paper 6.3)."""
        self.window_size = float(max(size, 1))
        if arrivals or expiries:
            self._arrivals = 0.9 * self._arrivals + arrivals
            self._expiries = 0.9 * self._expiries + expiries
            tot = self._arrivals + self._expiries
            if tot > 0 and self.cfg.time_window:
                self.p_arr = self._arrivals / tot
                self.p_exp = self._expiries / tot

    # ------------------------------------------------------------------ re-evaluation
    def reeval_requests(self) -> tuple[np.ndarray, SubscriptionBatch, np.ndarray]:
        """Subscriptions whose buffer fell below k with theta > 0, and new ones."""
        b, s = self.buf, self.subs
        slots = np.flatnonzero(b.reeval[: s.n] & s.alive[: s.n])
        return slots, s.batch(slots), self.reeval_depth(slots)

    def reeval_depth(self, slots: np.ndarray) -> np.ndarray:
        """How many candidates the re-evaluation of each of ``slots`` asks for (the K of
        :meth:`reeval_requests`); 0 where the slot asks for none (not marked, or removed)."""
        b, s = self.buf, self.subs
        slots = np.asarray(slots, np.int64)
        K = candidates_asked(self.cfg, s.k[slots], b.arrival_share[slots] < 1.0)
        if self.policy == POLICIES["kmax"]:
            K = np.maximum(K, KMAX)
        if self._extra_k:
            K = np.array([max(Ki, self._extra_k.get(sl, 0)) for sl, Ki in zip(slots.tolist(), K.tolist())],
                         np.int64)
        return np.where(b.reeval[slots] & s.alive[slots], K, 0)

    def apply_reevals(self, slots: np.ndarray, cands: CandidateLists, window_size: int | None = None,
                      seconds: float | None = None) -> np.ndarray:
        """Install re-evaluation results; returns slots that need a larger K (asked again by
        the next ``reeval_requests``). ``seconds``: what answering the requests took, the
        measured C_topk of the cost model."""
        t0 = time.perf_counter()
        if window_size is not None:
            self.window_size = float(max(window_size, 1))
        if seconds is not None and len(slots):
            self.c_topk_seconds = 0.8 * self.c_topk_seconds + 0.2 * seconds / len(slots)
            self.counters["emp_seconds"] += seconds
        s, b = self.subs, self.buf
        alive = s.alive[slots]
        if not alive.all():   # unsubscribed while the question was out (cluster)
            keep = np.flatnonzero(alive)
            slots = slots[keep]
            cands = cands.take(keep)
        (b.bi, b.bf, b.used, b.snap, b.snap_used, more, touched) = sk.apply_reevals(
            slots, cands.offsets, cands.seq, cands.ids, cands.t, cands.score, cands.complete,
            s.k, s.theta, self.policy, self.mode, KMAX, self.window_size, self.c_topk,
            self.p_arr, self.p_exp, b.arrival_share,
            b.bstart, b.blen, b.bcap, b.bi, b.bf, b.used, b.oldest, b.lnext, b.lprev, b.head, b.reeval,
            b.epoch, b.epoch_of, b.snap_off, b.snap_len, b.snap, b.snap_used)
        b.touched.append(touched)
        done = np.setdiff1d(slots, more)
        b.pn[done] = 0          # their pending rows are window messages: the answers hold them
        for sl in done.tolist():
            self._extra_k.pop(sl, None)
        if len(more):
            _, _, K = self.reeval_requests()
            req = dict(zip(np.flatnonzero(b.reeval[: s.n] & s.alive[: s.n]).tolist(), K.tolist()))
            for sl in more.tolist():
                self._extra_k[sl] = 2 * req.get(sl, int(s.k[sl]))
        if len(done):
            self.index.thresholds_changed(done)
        c = self.counters
        c["reevaluations"] += len(done)
        c["reeval_candidates"] += int(cands.offsets[-1])
        c["emp_seconds"] += time.perf_counter() - t0
        return more

    # ------------------------------------------------------------------ results
    def take_updates(self):
        """(sub_ids, offsets, msg_ids, scores) of the subscriptions whose top-k changed since
        the previous call, in subscription id order (the order of an update table and of the
        Update list: their builders then sort nothing)."""
        slots = self._end_epoch()
        return self._gather(slots[np.argsort(self.subs.ids[slots], kind="stable")])

    def take_update_columns(self):
        """``take_updates`` as the columns of an update table (rankcast.kinds.spatial.engine.updates_table),
        read from the buffers in subscription id order without the intermediate lists:
        (subscription ids, rank, message ids, scores, empty)."""
        slots = self._end_epoch()
        order = np.argsort(self.subs.ids[slots], kind="stable")
        slots = slots[order]
        b = self.buf
        lens = np.minimum(self.subs.k[slots], b.blen[slots])
        return expand_runs(self.subs.ids[slots], b.bstart[slots], lens, b.bi, sk.ID, b.bf, sk.SC)

    def take_update_diff(self):
        """``take_updates`` as the columns of a diff table (``rankcast.common.updates.diff_table``):
        (subscription ids, rank, message ids, scores, sign) of the entries that left and
        entered each changed top-k, by subscription id. Every changed buffer must hold its
        epoch's snapshot or the diff rows of its one change: the calls were processed with
        ``diff`` (``process``)."""
        slots = self._end_epoch()
        slots = slots[np.argsort(self.subs.ids[slots], kind="stable")]
        b = self.buf
        which, rank, ids, sc, sign = sk.diff_topk(slots, self.subs.k, b.bstart, b.blen, b.bi, b.bf,
                                                  b.snap_off, b.snap_len, b.snap)
        return self.subs.ids[slots][which], rank, ids, sc, sign

    def discard_updates(self) -> None:
        """``take_updates`` for a caller that does not want them (publish ``updates="none"``)."""
        self._end_epoch()

    def take_changed(self) -> np.ndarray:
        """``take_updates`` for a caller that reads the lists itself (``topk_rows``): the
        slots whose top-k changed since the previous call, ascending."""
        return self._end_epoch()

    def _end_epoch(self) -> np.ndarray:
        """The slots whose top-k changed in this epoch; the next epoch starts."""
        b, s = self.buf, self.subs
        mark = np.zeros(s.n, np.bool_)       # a mark per slot: sorted and distinct, no sort
        for t in b.touched:
            mark[t] = True
        touched = np.flatnonzero(mark & s.alive[: s.n])
        changed = touched[sk.changed_topk(touched, s.k, b.bstart, b.blen, b.bi, b.snap_off,
                                          b.snap_len, b.snap)]
        b.touched = []
        b.epoch += 1
        b.snap_used = 0
        self.counters["updates"] += len(changed)
        return changed

    def topk_rows(self, slots) -> tuple:
        """(sub ids, k, offsets, msg ids, seqs, scores) of the top-k of ``slots``: the first
        min(k, buffered) rows of each buffer, (score, seq) descending; the seqs order equal
        scores when lists of several cores are merged."""
        s, b = self.subs, self.buf
        slots = np.asarray(slots, np.int64)
        off, ids, seqs, sc = sk.gather_topk(slots, s.k, b.bstart, b.blen, b.bi, b.bf)
        return s.ids[slots], s.k[slots], off, ids, seqs, sc

    def _gather(self, slots):
        s, b = self.subs, self.buf
        off, mid, _, msc = sk.gather_topk(slots, s.k, b.bstart, b.blen, b.bi, b.bf, False)
        return s.ids[slots], off, mid, msc

    def topk_arrays(self, slots) -> tuple:
        return self._gather(np.asarray(slots, np.int64))

    def kth_scores(self, slots) -> np.ndarray:
        """The score of the k-th buffered row of each slot (its kScore); -inf where the
        buffer holds fewer than k rows."""
        b = self.buf
        return sk.kth_scores(np.asarray(slots, np.int64), self.subs.k, b.bstart, b.blen, b.bf)

    def settle_initial(self, slots) -> None:
        """Initial results just installed for ``slots`` (a cluster adds subscriptions and
        answers them in one step) are not updates: a later change in this epoch reports the
        list, measured against a snapshot of the initial one."""
        slots = np.asarray(slots, np.int64)
        live = slots[self.subs.alive[slots]]
        self.buf.epoch_of[live] = self.buf.epoch - 1

    def topk(self, sub_id: int) -> list[tuple[int, float]]:
        slot = self.subs.slot(sub_id)
        _, _, mid, msc = self._gather(np.array([slot]))
        return list(zip(mid.tolist(), msc.tolist()))

    def buffer(self, sub_id: int):
        """(seq, id, dominance counter, score) rows of the whole buffer, for tests and tools."""
        slot = self.subs.slot(sub_id)
        self.merge_pending([slot])
        b = self.buf
        a, n = b.bstart[slot], b.blen[slot]
        return b.bi[a:a + n].copy(), b.bf[a:a + n].copy(), float(self.subs.theta[slot])

    def pending(self) -> bool:
        s = self.subs
        return bool((self.buf.reeval[: s.n] & s.alive[: s.n]).any())

    @property
    def c_topk(self) -> float:
        """C_topk of Eq. 10 in buffer-row operations (the unit of Eq. 9)."""
        return self.c_topk_seconds / max(self.c_row_seconds, 1e-12)

    def stats(self) -> dict:
        s, b = self.subs, self.buf
        live = s.live_slots()
        sizes = b.blen[live]
        out = dict(self.counters)
        out.update(subscriptions=len(s), avg_buffer=float(sizes.mean()) if len(live) else 0.0,
                   max_buffer=int(sizes.max()) if len(live) else 0,
                   buffer_pool_rows=int(b.used), c_topk=self.c_topk)
        out.update({f"index_{k}": v for k, v in self.index.stats().items()})
        return out

    # ------------------------------------------------------------------ snapshots
    def cut_state(self, slots) -> tuple:
        """The buffers of ``slots`` cut at their k-th score (``skyband.cut_rows``): what a
        snapshot keeps of them instead of every row (a buffer is many times k deep)."""
        b, s = self.buf, self.subs
        return sk.cut_rows(np.asarray(slots, np.int64), s.k, s.theta, b.bstart, b.blen, b.bi, b.bf)

    def install_cut(self, slots, cut: tuple) -> None:
        """Buffers of ``slots`` (just added, in the order of :meth:`cut_state`) from a cut:
        their results as they were, not updates, and nothing to re-evaluate (the cost model
        deepens each buffer again at its next re-evaluation)."""
        slots = np.asarray(slots, np.int64)
        b, s = self.buf, self.subs
        b.bi, b.bf, b.used = sk.install_rows(slots, *cut, s.theta, b.bstart, b.blen, b.bcap, b.bi, b.bf, b.used,
                                             b.oldest, b.lnext, b.lprev, b.head, b.reeval)
        if len(slots):
            self.index.thresholds_changed(slots)
        self.settle_initial(slots)
        self.discard_updates()

    def _maybe_compact(self) -> None:
        """Buffers that outgrow their room move to the pool's end, leaving garbage: the pool
        is compacted in place once half of it is garbage, or once it is nearly full with a
        quarter garbage (before the next batch would double it: a doubling copies the whole
        pool at once, seconds of stall and a step in memory that stays)."""
        b, s = self.buf, self.subs
        if b.used <= self.COMPACT_FROM:
            return
        live = s.live_slots()
        held = int(b.bcap[live].sum())
        garbage = b.used - held
        if garbage > held or (b.used > 0.85 * len(b.bi) and garbage > b.used // 4):
            b.used = sk.compact(live, b.bstart, b.blen, b.bcap, b.bi, b.bf)
            self.counters["compactions"] += 1
            if len(b.bi) > 4 * b.used:        # the subscriptions shrank: so does the pool
                b.bi, b.bf = b.bi[: 2 * b.used].copy(), b.bf[: 2 * b.used].copy()

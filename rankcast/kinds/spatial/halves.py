"""HalvesCore: two Skype cores over the hash halves of one set of subscriptions.

A solo partition (an engine in an actor, the only partition of a cluster) runs each step's
two halves on two threads (:meth:`HalvesCore.step`): the machine's other core is idle while
a ``publish(wait=True)`` waits for it. A subscription lives in half ``id % 2``. The window is
one, the caller's: its append goes first on the second thread, the halves' re-evaluations
read it (read-only meanwhile) once the append is done. Every kernel of a half's step runs
without the GIL.

Outside :meth:`step` the pair answers the :class:`~rankcast.kinds.spatial.core.SkypeCore` calls a
subscription partition makes, one after the other on the caller's thread. Its slots are
``2 * slot + half`` (the partition's per-slot arrays are indexed by them); its updates are
the halves' merged into subscription id order, as one core's, and so are its diffs
(:meth:`HalvesCore.take_update_diff`).
"""
from __future__ import annotations

import threading
import time

import numba
import numpy as np

from rankcast.common.arrays import runs
from rankcast.kinds.spatial.columns import SubscriptionBatch
from rankcast.config import EngineConfig
from rankcast.errors import UnknownSubscription
from .core import SkypeCore
from .window import CandidateLists

__all__ = ["HalvesCore", "merge_updates", "merge_updates_beside", "merge_diffs"]

HALVES = 2


@numba.njit(cache=True, nogil=True, inline="always")
def _copy_list(src_off, src_mid, src_sc, i, mid, sc, r):
    """List ``i``'s rows of (``src_mid``, ``src_sc``) copied to ``mid``/``sc`` from row ``r``
    on; returns the row after them."""
    for p in range(src_off[i], src_off[i + 1]):
        mid[r] = src_mid[p]
        sc[r] = src_sc[p]
        r += 1
    return r


@numba.njit(cache=True, nogil=True)
def merge_updates(a_ids, a_off, a_mid, a_sc, b_ids, b_off, b_mid, b_sc):
    """Two id-ordered update lists (ids, offsets, message ids, scores) as one, id-ordered."""
    n, m = a_ids.shape[0], b_ids.shape[0]
    rows = a_off[n] - a_off[0] + b_off[m] - b_off[0]
    ids = np.empty(n + m, np.int64)
    off = np.empty(n + m + 1, np.int64)
    mid = np.empty(rows, np.int64)
    sc = np.empty(rows)
    i = j = w = r = 0
    off[0] = 0
    while i < n or j < m:
        if j >= m or (i < n and a_ids[i] < b_ids[j]):
            ids[w] = a_ids[i]
            r = _copy_list(a_off, a_mid, a_sc, i, mid, sc, r)
            i += 1
        else:
            ids[w] = b_ids[j]
            r = _copy_list(b_off, b_mid, b_sc, j, mid, sc, r)
            j += 1
        w += 1
        off[w] = r
    return ids, off, mid, sc


@numba.njit(cache=True, nogil=True)
def merge_plan(a_ids, a_off, b_ids, b_off):
    """:func:`merge_updates` without its rows: (ids, offsets) of the merged lists and, for
    each list of either half, its first row in the merged rows (``a_at``, ``b_at``), so that
    each half's rows can then be copied on a thread of its own (:func:`scatter_lists`)."""
    n, m = a_ids.shape[0], b_ids.shape[0]
    ids = np.empty(n + m, np.int64)
    off = np.empty(n + m + 1, np.int64)
    a_at = np.empty(n, np.int64)
    b_at = np.empty(m, np.int64)
    i = j = w = r = 0
    off[0] = 0
    while i < n or j < m:
        if j >= m or (i < n and a_ids[i] < b_ids[j]):
            ids[w] = a_ids[i]
            a_at[i] = r
            r += a_off[i + 1] - a_off[i]
            i += 1
        else:
            ids[w] = b_ids[j]
            b_at[j] = r
            r += b_off[j + 1] - b_off[j]
            j += 1
        w += 1
        off[w] = r
    return ids, off, a_at, b_at


@numba.njit(cache=True, nogil=True)
def scatter_lists(src_off, src_mid, src_sc, at, mid, sc):
    """Each list ``i`` of (``src_mid``, ``src_sc``) copied to ``mid``/``sc`` from row ``at[i]`` on."""
    for i in range(at.shape[0]):
        _copy_list(src_off, src_mid, src_sc, i, mid, sc, at[i])


def merge_updates_beside(a, b, pool):
    """:func:`merge_updates` of the halves' updates ``a`` and ``b`` (ids, offsets, message
    ids, scores), the rows of ``b`` copied on ``pool``'s thread while this one copies
    ``a``'s: on two free cores about 0.6 of the one-thread merge's wall clock (the plan, an
    interleave of the lists' ids, stays on this thread)."""
    ids, off, a_at, b_at = merge_plan(a[0], a[1], b[0], b[1])
    rows = int(off[-1])
    mid, sc = np.empty(rows, np.int64), np.empty(rows)
    fut = pool.submit(scatter_lists, b[1], b[2], b[3], b_at, mid, sc)
    try:
        scatter_lists(a[1], a[2], a[3], a_at, mid, sc)
    finally:
        fut.result()
    return ids, off, mid, sc


def merge_diffs(a: tuple, b: tuple) -> tuple:
    """Two id-ordered diffs (sub ids, rank, msg ids, scores, sign) of disjoint subscriptions
    as one, id-ordered: a stable sort of the two runs of ids (a merge) keeps each
    subscription's rows in their order."""
    if not len(b[0]):
        return a
    if not len(a[0]):
        return b
    order = np.argsort(np.concatenate([a[0], b[0]]), kind="stable")
    return tuple(np.concatenate([x, y])[order] for x, y in zip(a, b))


def _split(slots) -> list[tuple[np.ndarray, np.ndarray]]:
    """(positions in ``slots``, local slots) of each half."""
    slots = np.asarray(slots, np.int64)
    return [(pos, slots[pos] // HALVES) for pos in (np.flatnonzero(slots % HALVES == h) for h in range(HALVES))]


class _Subs:
    """The subscription table calls a partition makes, over both halves' tables."""

    def __init__(self, cores: list[SkypeCore]):
        self._cores = cores

    def __len__(self) -> int:
        return sum(len(c.subs) for c in self._cores)

    def live_slots(self) -> np.ndarray:
        return np.sort(np.concatenate([c.subs.live_slots() * HALVES + h for h, c in enumerate(self._cores)]))

    def batch(self, slots) -> SubscriptionBatch:
        parts = _split(slots)
        got = [c.subs.batch(loc) for c, (_, loc) in zip(self._cores, parts)]
        both = SubscriptionBatch.concat(got)
        order = np.empty(len(both), np.int64)
        order[np.concatenate([pos for pos, _ in parts])] = np.arange(len(both))
        return both.take(order)


class HalvesCore:
    """See the module docstring."""

    def __init__(self, cfg: EngineConfig):
        self.cfg = cfg
        self.cores = [SkypeCore(cfg) for _ in range(HALVES)]
        self.subs = _Subs(self.cores)
        self.half_cpu = [0.0] * HALVES      # each half's thread CPU seconds in the last step
        self.half_wall = [0.0] * HALVES     # and its wall-clock seconds, less its wait for the append
        self.merge_cpu = 0.0                # this thread's CPU seconds in the last step's merge
        self.merge_wall = 0.0               # and its wall-clock seconds

    # ------------------------------------------------------------------ subscriptions
    def add(self, b: SubscriptionBatch, indexed: np.ndarray | None = None) -> np.ndarray:
        out = np.empty(len(b), np.int64)
        for h, core in enumerate(self.cores):
            pos = np.flatnonzero(b.ids % HALVES == h)
            if len(pos):
                ind = None if indexed is None else np.asarray(indexed)[runs(b.offsets[pos], np.diff(b.offsets)[pos])[1]]
                out[pos] = core.add(b.take(pos), ind) * HALVES + h
        return out

    def find_slots(self, ids) -> np.ndarray:
        ids = np.asarray(ids, np.int64)
        out = np.full(len(ids), -1, np.int64)
        for h, core in enumerate(self.cores):
            pos = np.flatnonzero(ids % HALVES == h)
            if len(pos):
                s = core.find_slots(ids[pos])
                out[pos] = np.where(s >= 0, s * HALVES + h, -1)
        return out

    def remove(self, ids) -> None:
        ids = np.asarray(ids, np.int64)
        # every id checked before any is removed (SkypeCore.remove raises before it changes anything)
        if len(np.unique(ids)) != len(ids):
            raise UnknownSubscription("unsubscribe names a subscription twice")
        for h, core in enumerate(self.cores):
            core.slots_of(ids[ids % HALVES == h])
        for h, core in enumerate(self.cores):
            part = ids[ids % HALVES == h]
            if len(part):
                core.remove(part)

    def set_arrival_share(self, slots, share) -> None:
        for core, (pos, loc) in zip(self.cores, _split(slots)):
            core.set_arrival_share(loc, share if np.ndim(share) == 0 else np.asarray(share)[pos])

    def settle_initial(self, slots) -> None:
        for core, (_, loc) in zip(self.cores, _split(slots)):
            core.settle_initial(loc)

    # ------------------------------------------------------------------ the step on two threads
    def step(self, msgs, seqs, expire_upto, last: bool, pool, append, search, observe, take: bool,
             diff: bool = False):
        """Both halves' step: ``append`` (the window's, on the second thread), then on each
        thread a half's matching and buffers (``SkypeCore.process``), ``observe(core)`` (its
        expiries and window), its re-evaluations (``search(half, requests, K)``, once the
        append is done) and, with ``take``, its updates, merged into id order (each half's
        rows copied on its own thread: :func:`merge_updates_beside`). ``pool``: an executor
        of one thread (None: both halves and the merge on this thread). Returns (updates or
        None, re-evaluations done, re-evaluation rows asked); ``half_cpu``: each half's CPU
        time (the append's with half 1), ``half_wall``: its wall-clock time less its wait for
        the append (with a core of its own, about its CPU time: :meth:`SideThread.threads_ran`).
        ``diff``: the halves keep snapshots for diffs, and the updates taken are diffs
        (``SkypeCore.take_update_diff``), merged by :func:`merge_diffs`."""
        appended = threading.Event()
        counts = [[0, 0] for _ in self.cores]
        waited = [0.0] * HALVES

        def half(h: int, with_append: bool):
            w0, c0 = time.perf_counter(), time.thread_time()
            try:
                return _half(h, with_append)
            finally:
                self.half_cpu[h] = time.thread_time() - c0
                self.half_wall[h] = time.perf_counter() - w0 - waited[h]

        def _half(h: int, with_append: bool):
            if with_append:
                try:
                    append()
                finally:
                    appended.set()
            core = self.cores[h]
            core.process(msgs, seqs, expire_upto, last, diff=diff)
            observe(core)
            if not appended.is_set():
                t0 = time.perf_counter()
                appended.wait()
                waited[h] = time.perf_counter() - t0
            while True:
                slots, req, K = core.reeval_requests()
                if len(slots) == 0:
                    break
                t0 = time.perf_counter()
                cands = search(h, req, K)
                more = core.apply_reevals(slots, cands, seconds=time.perf_counter() - t0)
                counts[h][0] += len(slots) - len(more)
                counts[h][1] += len(slots)
            if not take:
                return None
            return core.take_update_diff() if diff else core.take_updates()

        if pool is None:
            outs = [half(0, True), half(1, False)]
        else:
            fut = pool.submit(half, 1, True)
            try:
                mine = half(0, False)
            finally:
                other = fut.result()        # the side's work ends here, raising or not
            outs = [mine, other]
        m0, mw = time.thread_time(), time.perf_counter()
        if not take:
            updates = None
        elif diff:
            updates = merge_diffs(*outs)
        elif pool is None:
            updates = merge_updates(*outs[0], *outs[1])
        else:           # each half's rows copied on its own thread
            updates = merge_updates_beside(outs[0], outs[1], pool)
        self.merge_cpu, self.merge_wall = time.thread_time() - m0, time.perf_counter() - mw
        return updates, sum(c[0] for c in counts), sum(c[1] for c in counts)

    # ------------------------------------------------------------------ the SkypeCore calls, in turn
    def process(self, msgs, seqs, expire_upto, last: bool = False, diff: bool = False) -> None:
        for core in self.cores:
            core.process(msgs, seqs, expire_upto, last, diff=diff)

    def expire(self, upto_seq: int) -> None:
        for core in self.cores:
            core.expire(upto_seq)

    def observe_window(self, size: int, arrivals: int = 0, expiries: int = 0) -> None:
        for core in self.cores:
            core.observe_window(size, arrivals, expiries)

    def reeval_requests(self) -> tuple[np.ndarray, SubscriptionBatch, np.ndarray]:
        got = [core.reeval_requests() for core in self.cores]
        slots = np.concatenate([s * HALVES + h for h, (s, _, _) in enumerate(got)])
        return slots, SubscriptionBatch.concat([r for _, r, _ in got]), np.concatenate([K for _, _, K in got])

    def apply_reevals(self, slots: np.ndarray, cands: CandidateLists, window_size: int | None = None,
                      seconds: float | None = None) -> np.ndarray:
        more = []
        for h, (core, (pos, loc)) in enumerate(zip(self.cores, _split(slots))):
            if len(pos):
                share = None if seconds is None else seconds * len(pos) / len(slots)
                more.append(core.apply_reevals(loc, cands.take(pos), window_size, share) * HALVES + h)
        return np.concatenate(more) if more else np.zeros(0, np.int64)

    def pending(self) -> bool:
        return any(core.pending() for core in self.cores)

    # ------------------------------------------------------------------ results
    def take_updates(self):
        """Both halves' updates, merged into subscription id order (``SkypeCore.take_updates``)."""
        a, b = (core.take_updates() for core in self.cores)
        return merge_updates(*a, *b)

    def take_update_diff(self):
        """Both halves' diffs, merged into subscription id order (``SkypeCore.take_update_diff``)."""
        return merge_diffs(*(core.take_update_diff() for core in self.cores))

    def discard_updates(self) -> None:
        for core in self.cores:
            core.discard_updates()

    def topk_rows(self, slots) -> tuple:
        """``SkypeCore.topk_rows`` of ``slots``, in their order."""
        slots = np.asarray(slots, np.int64)
        n = len(slots)
        ids, ks, lens = np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64)
        got = []
        for core, (pos, loc) in zip(self.cores, _split(slots)):
            i, k, off, mid, seq, sc = core.topk_rows(loc)
            ids[pos], ks[pos], lens[pos] = i, k, np.diff(off)
            got.append((pos, off, mid, seq, sc))
        # rows of both halves end to end, then each list's rows in the order of ``slots``
        starts = np.zeros(n, np.int64)
        base = 0
        for pos, off, mid, _, _ in got:
            starts[pos] = off[:-1] + base
            base += len(mid)
        off, rows = runs(starts, lens)
        mid, seq, sc = (np.concatenate([g[j] for g in got])[rows] for j in (2, 3, 4))
        return ids, ks, off, mid, seq, sc

    def kth_scores(self, slots) -> np.ndarray:
        slots = np.asarray(slots, np.int64)
        out = np.empty(len(slots))
        for core, (pos, loc) in zip(self.cores, _split(slots)):
            out[pos] = core.kth_scores(loc)
        return out

    def topk(self, sub_id: int) -> list[tuple[int, float]]:
        return self.cores[int(sub_id) % HALVES].topk(sub_id)

    def cut_state(self, slots) -> tuple:
        """Each half's ``SkypeCore.cut_state`` of its share of ``slots``."""
        return tuple(core.cut_state(loc) for core, (_, loc) in zip(self.cores, _split(slots)))

    def install_cut(self, slots, cut: tuple) -> None:
        for core, (_, loc), part in zip(self.cores, _split(slots), cut):
            core.install_cut(loc, part)

    def stats(self) -> dict:
        """The halves' stats: counts summed; buffer sizes over both; the cost model's C_topk
        and the index's non-count figures of half 0."""
        a, b = (core.stats() for core in self.cores)
        out = dict(a)
        for key, v in b.items():
            if key in ("avg_buffer", "max_buffer", "c_topk") or not isinstance(v, (int, float)):
                continue
            out[key] = a.get(key, 0) + v
        n = out["subscriptions"]
        out["avg_buffer"] = ((a["avg_buffer"] * a["subscriptions"] + b["avg_buffer"] * b["subscriptions"]) / n
                             if n else 0.0)
        out["max_buffer"] = max(a["max_buffer"], b["max_buffer"])
        out["halves"] = HALVES
        return out

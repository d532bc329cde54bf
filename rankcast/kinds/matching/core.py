"""The ranked-matching core: expressions in flat tables, one scored interval index per
attribute, and the multi-attribute drivers of the ranked pub/sub paper (Section 4).

- ``static`` (exact matching, score = the expression's score) and ``weighted`` (every
  predicate must hold, score = sum of ``weight * event weight``): each expression is placed in
  the index of one of its attributes, its *driver* (the predicate most likely to be selective:
  ``==`` before ``in`` before ranges before ``!=`` / ``not in``; then the attribute with fewer
  expressions). An event opens a cursor on the index of every attribute it has (an expression
  driven by an attribute the event lacks cannot match) and the cursors are merged in key order,
  every candidate checked exactly, until the k-th verified result is ahead of everything not
  yet read: for ``static`` the keys are the scores themselves (exact order: stop at k verified);
  for ``weighted`` the key is the expression's weight sum S and an unread expression scores at
  most ``S * max event weight``.
- ``relaxed`` (at least one predicate holds, score = sum of the weights of those that hold):
  Fagin's Threshold Algorithm. Every predicate is in its attribute's index with its weight as
  score and its slot as item; sorted access round-robin (in batches), and the run stops once the
  k-th score beats the threshold (the sum of the last weights read of every cursor still open).
  Random accesses are lazy (:func:`ta_round`): an expression first seen in a round is checked
  only if its upper bound (the weights it was read with, plus the last weight of every open
  cursor it was not read from) can still reach the k-th score; checks run in slot order.

Every comparison of a score with a bound keeps the relative slack ``EPS`` of
:func:`rankcast.common.tolerance.below`, and ties need a strict win (an unread expression with
an equal score and a smaller id would come first), so results are exact.
"""
from __future__ import annotations

import time

import numba
import numpy as np

from rankcast.common.arrays import runs
from rankcast.common.idmap import IdMap
from .intervals import make_index
from rankcast.common.tolerance import EPS

__all__ = ["MatchCore", "evaluate", "check_slot", "STATIC", "RELAXED", "WEIGHTED", "MODES"]

STATIC, RELAXED, WEIGHTED = 0, 1, 2
MODES = {"static": STATIC, "relaxed": RELAXED, "weighted": WEIGHTED}
LT, LE, EQ, NE, GE, GT, IN, NIN, BETWEEN = range(9)
_DRIVER_RANK = np.array([3, 3, 0, 4, 3, 3, 1, 4, 2], np.int64)   # by operator: lower drives first


@numba.njit(cache=True, inline="always")
def lower_bound(vals, lo, hi, x):
    """The first position of the sorted ``vals[lo:hi]`` whose value is >= ``x`` (``hi`` if none)."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if vals[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True, inline="always")
def find_sorted(vals, lo, hi, x):
    """The position of ``x`` in the sorted ``vals[lo:hi]``, -1 when absent."""
    i = lower_bound(vals, lo, hi, x)
    return i if i < hi and vals[i] == x else -1


@numba.njit(cache=True, inline="always")
def _member(vals, lo, end, x):
    """Whether ``x`` is in the sorted ``vals[lo:end]`` (binary search)."""
    return find_sorted(vals, lo, end, x) >= 0


@numba.njit(cache=True, inline="always")
def holds(op, a, b, set_vals, s_lo, s_hi, x):
    """Whether predicate (op, a, b, set) holds for the value ``x``."""
    if op == LT:
        return x < a
    if op == LE:
        return x <= a
    if op == EQ:
        return x == a
    if op == NE:
        return x != a
    if op == GE:
        return x >= a
    if op == GT:
        return x > a
    if op == BETWEEN:
        return a <= x and x <= b
    found = _member(set_vals, s_lo, s_hi, x)
    return found if op == IN else not found


@numba.njit(cache=True, inline="always")
def holds_row(p_op, p_a, p_b, set_off, set_vals, p, x):
    """Whether predicate row ``p`` holds for ``x`` (its set offsets read only for ``in`` / ``not
    in``: one array less to fetch per row otherwise)."""
    op = p_op[p]
    if op == IN or op == NIN:
        return holds(op, 0.0, 0.0, set_vals, set_off[p], set_off[p + 1], x)
    return holds(op, p_a[p], p_b[p], set_vals, 0, 0, x)


@numba.njit(cache=True, inline="always")
def check_slot(s, mode, p_start, p_end, score, p_attr, p_op, p_a, p_b, p_w, set_off, set_vals, val, has, ew):
    """(matches, score) of expression slot ``s`` for the event (:func:`evaluate`, one slot)."""
    acc = 0.0
    ok = mode != RELAXED
    for p in range(p_start[s], p_end[s]):
        at = p_attr[p]
        h = has[at] and holds_row(p_op, p_a, p_b, set_off, set_vals, p, val[at])
        if mode == RELAXED:
            if h:
                ok = True
                acc += p_w[p]
        elif not h:
            ok = False
            break
        elif mode == WEIGHTED:
            acc += p_w[p] * ew[at]
    return ok, (score[s] if mode == STATIC else acc)


@numba.njit(cache=True)
def evaluate(slots, mode, p_start, p_end, score, p_attr, p_op, p_a, p_b, p_w, set_off, set_vals,
             val, has, ew, out_ok, out_score):
    """Check expressions ``slots`` exactly against one event and score them.

    The event is dense over attribute ids: ``val[a]`` its value, ``has[a]`` whether it has
    one, ``ew[a]`` its weight. Expression ``s`` has predicates ``p_start[s]:p_end[s]``.
    ``mode``: STATIC (all hold; ``score[s]``), WEIGHTED (all hold; sum of ``p_w * ew``, in
    predicate order), RELAXED (at least one holds; sum of ``p_w`` of those that hold). Writes
    ``out_ok[i]`` (a match) and ``out_score[i]``."""
    for i in range(slots.shape[0]):
        out_ok[i], out_score[i] = check_slot(slots[i], mode, p_start, p_end, score, p_attr, p_op, p_a, p_b,
                                             p_w, set_off, set_vals, val, has, ew)


def top_of(ids: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``k`` of (ids, scores) by score descending, then id ascending."""
    n = len(scores)
    if 0 < k and n > 4 * k + 64:      # only those at least the k-th largest score are sorted
        keep = scores >= np.partition(scores, n - k)[n - k]
        ids, scores = ids[keep], scores[keep]
    order = np.lexsort((ids, -scores))[:k]
    return ids[order], scores[order]


@numba.njit(cache=True, inline="always")
def ranks_after(s1, i1, s2, i2):
    """(s1, i1) ranks after (s2, i2): lower score, or equal score and larger id."""
    return s1 < s2 or (s1 == s2 and i1 > i2)


@numba.njit(cache=True)
def offer_topk(tsc, tid, n, k, sc, eid):
    """Offer (sc, eid) to the top-k heap ``tsc/tid[:n]`` (a min-heap in the order of
    :func:`ranks_after`: the k-th best at the root); returns the new size."""
    if n < k:
        j = n
        n += 1
        while j > 0:
            par = (j - 1) >> 1
            if ranks_after(sc, eid, tsc[par], tid[par]):
                tsc[j] = tsc[par]
                tid[j] = tid[par]
                j = par
            else:
                break
        tsc[j] = sc
        tid[j] = eid
        return n
    if ranks_after(tsc[0], tid[0], sc, eid):
        sift_down_topk(tsc, tid, n, sc, eid)
    return n


@numba.njit(cache=True, inline="always")
def sift_down_topk(tsc, tid, n, sc, eid):
    """Put (sc, eid) at the root of the top-k heap ``tsc/tid[:n]`` (:func:`offer_topk`) and
    sift it down to its place."""
    j = 0
    while True:
        l = 2 * j + 1
        if l >= n:
            break
        m = l
        if l + 1 < n and ranks_after(tsc[l + 1], tid[l + 1], tsc[l], tid[l]):
            m = l + 1
        if ranks_after(tsc[m], tid[m], sc, eid):
            tsc[j] = tsc[m]
            tid[j] = tid[m]
            j = m
        else:
            break
    tsc[j] = sc
    tid[j] = eid


@numba.njit(cache=True)
def ta_round(slots, weights, lists, last_open, threshold, k, state, acc, touched, n_touched, h_score, h_id, h_size,
             ids, p_start, p_end, p_attr, p_op, p_a, p_b, p_w, set_off, set_vals, val, has, counts):
    """One round of the Threshold Algorithm for ``relaxed`` scoring, its random accesses made
    lazily (Fagin's combined algorithm): the round's sorted accesses are accumulated first, then
    each expression first seen in it is either dropped, when its upper bound is already below
    the k-th score, or checked exactly and offered to the top-k heap.

    slots, weights, lists: (m,) int64 / float64 / int64: the round's sorted accesses (slot read,
    its weight, the cursor it came from); ``last_open[c]``: the last weight cursor c read if it
    is still open, else 0; ``threshold`` = sum(last_open). ``state`` (n_slots,) int8: 0 unseen,
    1 seen this round, 3 to be checked, 2 done; ``acc`` (n_slots, 2) float64: weights read and the sum of
    ``last_open`` of the cursors it was read from. An expression first seen this round scores at
    most ``acc[s, 0] + threshold - acc[s, 1]``: what it was read with, plus the last weight of
    every open cursor it was not read from (unread rows of a cursor weigh at most its last).
    ``touched[:n_touched]`` lists every slot not 0 (cleared by :func:`ta_clear`); the heap
    ``h_score/h_id[:h_size]`` holds the best k so far (ids). ``counts``: (2,) int64 random
    accesses and expressions dropped, added to. Returns (n_touched, h_size)."""
    start = n_touched
    for i in range(slots.shape[0]):
        s = slots[i]
        st = state[s]
        if st == 2:
            continue
        if st == 0:
            state[s] = 1
            touched[n_touched] = s
            n_touched += 1
        acc[s, 0] += weights[i]
        acc[s, 1] += last_open[lists[i]]
    # drop what cannot reach the k-th score; the rest is checked in slot order, bucketed by
    # blocks of 1024 slots (a counting sort): its predicate rows are then read in memory order,
    # about 20x fewer cache and TLB misses than in the order the cursors gave them
    shift = 10
    n_blocks = (state.shape[0] >> shift) + 1
    count = np.zeros(n_blocks + 1, np.int64)
    survivors = 0
    for j in range(start, n_touched):
        s = touched[j]
        if h_size == k and (acc[s, 0] + (threshold - acc[s, 1])) * (1.0 + EPS) + EPS < h_score[0]:
            state[s] = 2
            counts[1] += 1
        else:
            state[s] = 3
            survivors += 1
            count[(s >> shift) + 1] += 1
    for b in range(n_blocks):
        count[b + 1] += count[b]
    order = np.empty(survivors, np.int64)
    for j in range(start, n_touched):
        s = touched[j]
        if state[s] == 3:
            state[s] = 2
            order[count[s >> shift]] = s
            count[s >> shift] += 1
    for j in range(survivors):
        h_size = _ta_check(order[j], k, h_score, h_id, h_size, ids, p_start, p_end, p_attr, p_op, p_a, p_b,
                           p_w, set_off, set_vals, val, has)
    counts[0] += survivors
    return n_touched, h_size


@numba.njit(cache=True, inline="always")
def _ta_check(s, k, h_score, h_id, h_size, ids, p_start, p_end, p_attr, p_op, p_a, p_b, p_w, set_off, set_vals,
              val, has):
    """Random access: the relaxed score of slot ``s``, offered to the heap if it matches."""
    sc = 0.0
    ok = False
    for p in range(p_start[s], p_end[s]):
        at = p_attr[p]
        if has[at] and holds_row(p_op, p_a, p_b, set_off, set_vals, p, val[at]):
            ok = True
            sc += p_w[p]
    if ok:
        h_size = offer_topk(h_score, h_id, h_size, k, sc, ids[s])
    return h_size


@numba.njit(cache=True)
def ta_clear(touched, n_touched, state, acc):
    """Reset the per-slot state of the slots an event touched."""
    for j in range(n_touched):
        s = touched[j]
        state[s] = 0
        acc[s, 0] = 0.0
        acc[s, 1] = 0.0


class ExpressionTable:
    """Live expressions in slots (flat arrays, predicates CSR per slot, append-only with
    compaction), and the id -> slot map the index outputs are translated through."""

    _PRED = ("p_attr", "p_op", "p_a", "p_b", "p_w", "p_lo", "p_hi")

    def __init__(self):
        self.n_slots = 0
        self.ids = np.zeros(0, np.int64)
        self.score = np.zeros(0)
        self.wsum = np.zeros(0)
        self.live = np.zeros(0, bool)
        self.p_start = np.zeros(0, np.int64)
        self.p_end = np.zeros(0, np.int64)
        self.p_attr = np.zeros(0, np.int32)
        self.p_op = np.zeros(0, np.int8)
        self.p_a = self.p_b = self.p_w = self.p_lo = self.p_hi = np.zeros(0)
        self.set_off = np.zeros(1, np.int64)
        self.set_vals = np.zeros(0)
        self.id2slot = IdMap()
        self.n_live = 0

    def __setstate__(self, state) -> None:
        self.__dict__.update(state)
        if not isinstance(self.id2slot, IdMap):      # a snapshot of an older version
            live = np.flatnonzero(self.live[: self.n_slots])
            self.id2slot = IdMap(2 * len(live))
            self.id2slot.put(self.ids[live], live)

    def add(self, batch) -> np.ndarray:
        """Append the expressions of an ExpressionBatch; returns their slots."""
        n = len(batch)
        slots = np.arange(self.n_slots, self.n_slots + n, dtype=np.int64)
        base = len(self.p_attr)
        self.ids = np.concatenate((self.ids, batch.ids))
        self.score = np.concatenate((self.score, batch.score))
        counts = np.diff(batch.pred_off)
        ws = np.add.reduceat(batch.weight, batch.pred_off[:-1]) if n else np.zeros(0)
        self.wsum = np.concatenate((self.wsum, np.where(counts > 0, ws, 0.0)))
        self.live = np.concatenate((self.live, np.ones(n, bool)))
        self.p_start = np.concatenate((self.p_start, base + batch.pred_off[:-1]))
        self.p_end = np.concatenate((self.p_end, base + batch.pred_off[1:]))
        self.p_attr = np.concatenate((self.p_attr, batch.attr))
        self.p_op = np.concatenate((self.p_op, batch.op))
        self.p_a = np.concatenate((self.p_a, batch.a))
        self.p_b = np.concatenate((self.p_b, batch.b))
        self.p_w = np.concatenate((self.p_w, batch.weight))
        self.p_lo = np.concatenate((self.p_lo, batch.lo))
        self.p_hi = np.concatenate((self.p_hi, batch.hi))
        self.set_off = np.concatenate((self.set_off, self.set_off[-1] + batch.set_off[1:]))
        self.set_vals = np.concatenate((self.set_vals, batch.set_vals))
        self.id2slot.put(batch.ids, slots)
        self.n_slots += n
        self.n_live += n
        return slots

    def remove(self, ids: np.ndarray) -> np.ndarray:
        slots = self.slots(ids)
        self.live[slots] = False
        self.id2slot.delete(ids)
        self.n_live -= len(ids)
        return slots

    def slots(self, ids: np.ndarray) -> np.ndarray:
        return self.id2slot.get(ids)

    def pred_rows(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(offsets, predicate rows) of the expressions in ``slots``, laid end to end."""
        return runs(self.p_start[slots], self.p_end[slots] - self.p_start[slots])

    def batch(self):
        """The live expressions as an ExpressionBatch (snapshots, moves between partitions)."""
        from .predicates import ExpressionBatch
        keep = np.flatnonzero(self.live[: self.n_slots])
        off, rows = self.pred_rows(keep)
        s_off, s_rows = runs(self.set_off[rows], self.set_off[rows + 1] - self.set_off[rows])
        return ExpressionBatch(self.ids[keep], self.score[keep], off, self.p_attr[rows], self.p_op[rows],
                               self.p_a[rows], self.p_b[rows], self.p_w[rows], self.p_lo[rows], self.p_hi[rows],
                               s_off, self.set_vals[s_rows])

    def compact(self) -> np.ndarray | None:
        """Drop dead slots once they are the majority (slots change; ids do not). Returns the
        old slot of every new one, None when nothing moved."""
        if self.n_slots < 64 or self.n_live * 2 > self.n_slots:
            return None
        keep = np.flatnonzero(self.live)
        new_off, rows = self.pred_rows(keep)
        for name in self._PRED:
            setattr(self, name, getattr(self, name)[rows])
        s_off, s_rows = runs(self.set_off[rows], self.set_off[rows + 1] - self.set_off[rows])
        self.set_vals = self.set_vals[s_rows]
        self.set_off = s_off
        self.p_start, self.p_end = new_off[:-1], new_off[1:]
        self.ids, self.score, self.wsum = self.ids[keep], self.score[keep], self.wsum[keep]
        self.live = np.ones(len(keep), bool)
        self.n_slots = len(keep)
        self.id2slot = IdMap(2 * len(keep))
        self.id2slot.put(self.ids, np.arange(len(keep), dtype=np.int64))
        return keep

    def evaluate(self, slots, mode, ev) -> tuple[np.ndarray, np.ndarray]:
        ok = np.empty(len(slots), np.bool_)
        sc = np.empty(len(slots), np.float64)
        evaluate(slots, mode, self.p_start, self.p_end, self.score, self.p_attr, self.p_op, self.p_a, self.p_b,
                 self.p_w, self.set_off, self.set_vals, ev.val, ev.has, ev.ew, ok, sc)
        return ok, sc


class DenseEvent:
    """One event scattered over attribute ids (reused from event to event)."""

    def __init__(self, n_attrs: int):
        self.val = np.zeros(n_attrs)
        self.has = np.zeros(n_attrs, np.bool_)
        self.ew = np.ones(n_attrs)
        self.attrs = np.zeros(0, np.int32)

    def grow(self, n_attrs: int) -> None:
        if n_attrs > len(self.val):
            extra = n_attrs - len(self.val)
            self.val = np.r_[self.val, np.zeros(extra)]
            self.has = np.r_[self.has, np.zeros(extra, np.bool_)]
            self.ew = np.r_[self.ew, np.ones(extra)]

    def set(self, attrs, vals, weights) -> None:
        self.has[self.attrs] = False
        self.ew[self.attrs] = 1.0
        self.attrs = attrs
        self.val[attrs] = vals
        self.has[attrs] = True
        self.ew[attrs] = weights


class MatchCore:
    """Expressions, their per-attribute indexes and the drivers (see the module docstring).

    ``index``: an index name of :func:`rankcast.kinds.matching.intervals.make_index`; ``stats``
    counts sorted accesses (rows read from cursors), random accesses (expressions checked),
    nodes visited and holes met."""

    def __init__(self, scoring: str, index: str, *, b: int = 50, rebuild_fraction: float = 0.05,
                 rebuild_min: int = 1024, **_):
        self.mode = MODES[scoring]
        self.index_name = index
        self._index_opts = dict(b=b, rebuild_fraction=rebuild_fraction, rebuild_min=rebuild_min)
        self.table = ExpressionTable()
        self.indexes: dict[int, object] = {}     # attribute id -> index
        self.driver = np.zeros(0, np.int32)      # per slot: attribute whose index holds it (static, weighted)
        self.attr_count = np.zeros(0, np.int64)  # expressions with a predicate on each attribute
        self.ev = DenseEvent(0)
        # the Threshold Algorithm's per-slot state (ta_round), cleared after every event
        self._ta_state = np.zeros(0, np.int8)
        self._ta_acc = np.zeros((0, 2))
        self._ta_touched = np.zeros(0, np.int64)
        self.counters = dict(events=0, sorted_accesses=0, random_accesses=0, dropped=0, nodes=0, holes=0, rounds=0)
        # seconds of the Threshold Algorithm in its sorted accesses (the cursors) and in the rest
        # (ta_round: the per-slot bookkeeping and the checks); read by the benchmarks
        self.ta_seconds = [0.0, 0.0]

    def __len__(self) -> int:
        return self.table.n_live

    # ------------------------------------------------------------------ updates
    def _grow_attrs(self, n_attrs: int) -> None:
        if n_attrs > len(self.attr_count):
            self.attr_count = np.r_[self.attr_count, np.zeros(n_attrs - len(self.attr_count), np.int64)]
        self.ev.grow(n_attrs)

    def _entries(self, slots: np.ndarray):
        """Index rows of the new expressions in ``slots``: (attr, lo, hi, key, item)."""
        t = self.table
        off, rows = t.pred_rows(slots)
        if self.mode == RELAXED:
            return t.p_attr[rows], t.p_lo[rows], t.p_hi[rows], t.p_w[rows], np.repeat(slots, np.diff(off))
        # the driver: by operator class, then the attribute with fewer expressions, then its id
        owner = np.repeat(np.arange(len(slots)), np.diff(off))
        at = t.p_attr[rows]
        order = np.lexsort((at, self.attr_count[at], _DRIVER_RANK[t.p_op[rows]], owner))
        rows = rows[order][off[:-1]]
        key = t.score[slots] if self.mode == STATIC else t.wsum[slots]
        return t.p_attr[rows], t.p_lo[rows], t.p_hi[rows], key, t.ids[slots]

    def add(self, batch, n_attrs: int) -> None:
        self._grow_attrs(n_attrs)
        np.add.at(self.attr_count, batch.attr, 1)
        slots = self.table.add(batch)
        attr, lo, hi, key, item = self._entries(slots)
        if self.mode != RELAXED:
            self.driver = np.r_[self.driver, attr].astype(np.int32)
        self._index(attr, lo, hi, key, item)

    def _index(self, attr, lo, hi, key, item) -> None:
        for a in np.unique(attr).tolist():
            m = attr == a
            idx = self.indexes.get(a)
            if idx is None:
                self.indexes[a] = make_index(self.index_name, lo[m], hi[m], key[m], item[m], **self._index_opts)
            else:
                idx.insert(lo[m], hi[m], key[m], item[m])

    def remove(self, ids: np.ndarray) -> None:
        t = self.table
        slots = t.slots(ids)
        _, rows = t.pred_rows(slots)
        np.subtract.at(self.attr_count, t.p_attr[rows], 1)
        if self.mode == RELAXED:
            attr, item = t.p_attr[rows], np.repeat(slots, t.p_end[slots] - t.p_start[slots])
        else:
            attr, item = self.driver[slots], ids
        for a in np.unique(attr).tolist():
            self.indexes[a].delete(item[attr == a])
        t.remove(ids)
        keep = t.compact()
        if keep is None:
            return
        if self.mode == RELAXED:                # the indexes hold slots, which moved
            self.indexes = {}
            self._index(*self._entries(np.arange(t.n_slots, dtype=np.int64)))
        else:
            self.driver = self.driver[keep]

    # ------------------------------------------------------------------ queries
    def match(self, events, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Top-k (ids, scores) of every event of an EventBatch."""
        out = []
        ev = self.ev
        for i in range(len(events)):
            a, b = events.off[i], events.off[i + 1]
            attrs = events.attr[a:b]
            ev.set(attrs, events.val[a:b], events.weight[a:b])
            self.counters["events"] += 1
            if self.mode == RELAXED:
                out.append(self._threshold(attrs, k))
            else:
                out.append(self._merge(attrs, k))
        return out

    def _cursors(self, attrs):
        curs = []
        for a in attrs.tolist():
            idx = self.indexes.get(a)
            if idx is not None and len(idx):
                curs.append(idx.open(float(self.ev.val[a])))
        return curs

    def _sorted_round(self, curs, open_: list[bool], n: int):
        """One round of sorted access: the next ``n`` rows of every open cursor, as (cursor,
        items, keys) where any were left; a cursor that gave fewer than ``n`` is closed."""
        for c, cur in enumerate(curs):
            if not open_[c]:
                continue
            items, keys = cur.next(n)
            self.counters["sorted_accesses"] += len(items)
            if len(items) < n:
                open_[c] = False
            if len(items):
                yield c, items, keys

    def _count(self, curs) -> None:
        for c in curs:
            self.counters["nodes"] += int(c.counters[0])
            self.counters["holes"] += int(c.counters[1])

    def _merge(self, attrs, k: int):
        """static / weighted: merge the driver cursors in key order, verify, stop when the
        k-th result is ahead of every unread expression."""
        curs = self._cursors(attrs)
        open_ = [True] * len(curs)
        last = [(np.inf, -1)] * len(curs)
        got_ids, got_sc = [], []
        n = max(2 * k, 16)
        max_ew = float(self.ev.ew[attrs].max()) if len(attrs) else 0.0
        t = self.table
        top_ids = top_sc = np.zeros(0)
        while True:
            self.counters["rounds"] += 1
            for c, items, keys in self._sorted_round(curs, open_, n):
                last[c] = (float(keys[-1]), int(items[-1]))
                slots = t.slots(items)
                ok, sc = t.evaluate(slots, self.mode, self.ev)
                self.counters["random_accesses"] += len(items)
                got_ids.append(items[ok])
                got_sc.append(sc[ok])
            ids = np.concatenate(got_ids) if got_ids else np.zeros(0, np.int64)
            scs = np.concatenate(got_sc) if got_sc else np.zeros(0)
            top_ids, top_sc = top_of(ids, scs, k)
            got_ids, got_sc = [top_ids], [top_sc]
            live = [last[c] for c in range(len(curs)) if open_[c]]
            if not live:
                break
            if len(top_ids) == k:
                ks, ki = float(top_sc[-1]), int(top_ids[-1])
                if self.mode == STATIC:
                    # unread rows of a cursor come after its last row: the best bound is the
                    # earliest last row of the open cursors
                    bs, bi = max(live, key=lambda x: (x[0], -x[1]))
                    if ks > bs or (ks == bs and ki < bi):
                        break
                else:
                    bound = max(x[0] for x in live) * max_ew
                    if ks > bound * (1.0 + EPS):
                        break
            n *= 2
        self._count(curs)
        return top_ids, top_sc

    def _threshold(self, attrs, k: int):
        """relaxed: the Threshold Algorithm over the attributes' predicate indexes (their items
        are slots), random accesses made lazily by :func:`ta_round`."""
        curs = self._cursors(attrs)
        t = self.table
        if len(self._ta_state) < t.n_slots:
            self._ta_state = np.zeros(2 * t.n_slots, np.int8)
            self._ta_acc = np.zeros((2 * t.n_slots, 2))
            self._ta_touched = np.zeros(2 * t.n_slots, np.int64)
        state, acc, touched = self._ta_state, self._ta_acc, self._ta_touched
        open_ = [True] * len(curs)
        last_w = np.zeros(len(curs))
        h_score, h_id = np.zeros(max(k, 1)), np.zeros(max(k, 1), np.int64)
        n_touched = h_size = 0
        counts = np.zeros(2, np.int64)
        ev = self.ev
        n = max(k, 16)
        try:
            while k > 0:
                self.counters["rounds"] += 1
                t0 = time.perf_counter()
                got = [(c, items, w) for c, items, w in self._sorted_round(curs, open_, n)]
                t1 = time.perf_counter()
                self.ta_seconds[0] += t1 - t0
                for c, _, w in got:
                    last_w[c] = w[-1]
                last_open = np.where(open_, last_w, 0.0)
                if got:
                    n_touched, h_size = ta_round(
                        np.concatenate([x[1] for x in got]), np.concatenate([x[2] for x in got]),
                        np.repeat(np.array([x[0] for x in got], np.int64), [len(x[1]) for x in got]),
                        last_open, float(last_open.sum()), k, state, acc, touched, n_touched, h_score, h_id,
                        h_size, t.ids, t.p_start, t.p_end, t.p_attr, t.p_op, t.p_a, t.p_b, t.p_w, t.set_off,
                        t.set_vals, ev.val, ev.has, counts)
                self.ta_seconds[1] += time.perf_counter() - t1
                if not any(open_):
                    break
                if h_size == k and h_score[0] > float(last_open.sum()) * (1.0 + EPS):
                    break
                n *= 2
        finally:
            ta_clear(touched, n_touched, state, acc)
        self.counters["random_accesses"] += int(counts[0])
        self.counters["dropped"] += int(counts[1])
        self._count(curs)
        order = np.lexsort((h_id[:h_size], -h_score[:h_size]))
        return h_id[:h_size][order], h_score[:h_size][order]

    def stats(self) -> dict:
        nbytes = sum(ix.nbytes() for ix in self.indexes.values())
        return {"expressions": len(self), "attributes_indexed": len(self.indexes), "index": self.index_name,
                "index_bytes": int(nbytes), **self.counters}

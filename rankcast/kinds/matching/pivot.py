"""The pivot driver of ranked matching (``driver="pivot"``; docs/matching.md).

Every predicate is in its attribute's scored interval index with, as its score, a bound on the
whole expression's score (``bound[s]``: the weight sum for ``relaxed`` and ``weighted``, the
expression's score for ``static``) and its slot as item. An event:

1. **pivot**: the event's attribute whose index has the fewest stabbed intervals (counted from
   sorted endpoints, :class:`StabCounts`; for ``static`` / ``weighted`` only among the
   attributes every expression has a predicate on) is read in bound order, each expression
   checked exactly and offered to the top-k heap, until the k-th score beats the next bound
   (nothing unread in that list can still enter).
2. **the rest**: an expression not read from the pivot has no stabbed predicate on it, so its
   pivot predicate does not hold. Under ``relaxed`` it scores at most ``R``, the sum over the
   event's other attributes of the largest weight indexed on them; once the k-th score beats
   ``R`` the run stops. Under ``static`` / ``weighted`` it cannot match (every expression has a
   pivot predicate). Otherwise the other attributes' lists are read the same way, each until
   the k-th score beats its next bound (or ``R``): what no list read holds has no stabbed
   predicate and does not match.

A score *beats* a bound when it is above it with the relative slack ``EPS`` (static: strictly
above, the bound being the score itself), so an unread expression with an equal score and a
smaller id is never missed: results equal the brute force, ties included. Entries are checked
one by one in list order and the check stops at the first that cannot enter, so reading ahead
in batches costs cursor steps only; a byte per slot marks the expressions already checked.

Under ``relaxed`` with low weights or many dimensions, where partial matches make the top-k,
``R`` is not beaten and step 2 reads the other lists: exact, but slower than the Threshold
Algorithm or the scan there.
"""
from __future__ import annotations

import numba
import numpy as np

from rankcast.common.tolerance import EPS
from .core import RELAXED, STATIC, WEIGHTED, MatchCore, check_slot, offer_topk
from .intervals import AUTO_INDEX

__all__ = ["PivotCore", "StabCounts", "pivot_drain"]


@numba.njit(cache=True, inline="always")
def _beats(kth, bound, static):
    """The k-th score is ahead of everything whose bound is ``bound``."""
    if static:
        return kth > bound
    return kth > bound * (1.0 + EPS) + EPS


@numba.njit(cache=True)
def pivot_drain(items, keys, scale, mode, k, h_score, h_id, h_size, seen, touched, n_touched, ids, score,
                p_start, p_end, p_attr, p_op, p_a, p_b, p_w, set_off, set_vals, val, has, ew, counts):
    """Check the entries ``items`` (slots) of one list in order, ``keys`` their bounds (times
    ``scale``), until the top-k heap ``h_score/h_id[:h_size]`` is full and its k-th beats the
    next bound. ``seen`` (per slot, 1 once checked; the slots set are appended to ``touched``).
    ``counts[0]`` += expressions checked. Returns (h_size, n_touched, position stopped at: the
    number of entries consumed, ``len(items)`` when none stopped it)."""
    static = mode == STATIC
    for i in range(items.shape[0]):
        if h_size == k and _beats(h_score[0], keys[i] * scale, static):
            return h_size, n_touched, i
        s = items[i]
        if seen[s]:
            continue
        seen[s] = 1
        touched[n_touched] = s
        n_touched += 1
        counts[0] += 1
        ok, sc = check_slot(s, mode, p_start, p_end, score, p_attr, p_op, p_a, p_b, p_w, set_off, set_vals,
                            val, has, ew)
        if ok:
            h_size = offer_topk(h_score, h_id, h_size, k, sc, ids[s])
    return h_size, n_touched, items.shape[0]


@numba.njit(cache=True)
def _clear(seen, touched, n):
    for j in range(n):
        seen[touched[j]] = 0


class StabCounts:
    """How many of an attribute's predicate intervals a value stabs: sorted ``lo`` and ``hi``
    per attribute, ``#(lo <= q) - #(hi < q)``. Only the choice of the pivot reads them, so they
    may lag behind updates; an attribute's are re-sorted once its updates exceed a quarter of
    what they were built from."""

    def __init__(self):
        self.lo: dict[int, np.ndarray] = {}
        self.hi: dict[int, np.ndarray] = {}
        self.changes: dict[int, int] = {}

    def touch(self, attrs: np.ndarray) -> None:
        a, c = np.unique(attrs, return_counts=True)
        for x, n in zip(a.tolist(), c.tolist()):
            self.changes[x] = self.changes.get(x, 0) + n

    def clear(self) -> None:
        self.__init__()

    def count(self, t, a: int, q: float) -> int:
        lo = self.lo.get(a)
        if lo is None or self.changes.get(a, 0) > len(lo) // 4 + 256:
            live_rows = np.repeat(t.live[: t.n_slots], t.p_end[: t.n_slots] - t.p_start[: t.n_slots])
            rows = np.flatnonzero((t.p_attr[: len(live_rows)] == a) & live_rows)
            self.lo[a] = lo = np.sort(t.p_lo[rows])
            self.hi[a] = np.sort(t.p_hi[rows])
            self.changes[a] = 0
        return int(np.searchsorted(lo, q, "right") - np.searchsorted(self.hi[a], q, "left"))


class PivotCore(MatchCore):
    """The pivot driver (see the module docstring) over the scored interval index ``index``
    ("auto": the SOPT-R-tree); the interface of :class:`~rankcast.kinds.matching.core.MatchCore`."""

    driver_name = "pivot"
    FIRST, MAX_BATCH = 64, 16384        # entries read from a list at once: first, at most

    def __init__(self, scoring: str, index: str, **kw):
        super().__init__(scoring, AUTO_INDEX if index == "auto" else index, **kw)
        self.wmax = np.zeros(0)                     # per attribute: largest weight indexed (a bound)
        self.expr_count = np.zeros(0, np.int64)     # per attribute: expressions with a predicate on it
        self.stab = StabCounts()
        self._seen = np.zeros(0, np.uint8)
        self._touched = np.zeros(0, np.int64)
        self.counters.update(beyond_pivot=0)

    def _grow_attrs(self, n_attrs: int) -> None:
        super()._grow_attrs(n_attrs)
        if n_attrs > len(self.wmax):
            self.wmax = np.r_[self.wmax, np.zeros(n_attrs - len(self.wmax))]
            self.expr_count = np.r_[self.expr_count, np.zeros(n_attrs - len(self.expr_count), np.int64)]

    def _entries(self, slots: np.ndarray):
        """Every predicate of ``slots``: (attr, lo, hi, bound of its expression, slot)."""
        t = self.table
        off, rows = t.pred_rows(slots)
        owner = np.repeat(slots, np.diff(off))
        bound = t.score if self.mode == STATIC else t.wsum
        return t.p_attr[rows], t.p_lo[rows], t.p_hi[rows], bound[owner], owner

    def _expr_attrs(self, slots: np.ndarray) -> np.ndarray:
        """The attributes of each expression of ``slots`` (each once per expression)."""
        t = self.table
        off, rows = t.pred_rows(slots)
        owner = np.repeat(np.arange(len(slots), dtype=np.int64), np.diff(off))
        pairs = np.unique(owner * (len(self.attr_count) + 1) + t.p_attr[rows])
        return pairs % (len(self.attr_count) + 1)

    def add(self, batch, n_attrs: int) -> None:
        self._grow_attrs(n_attrs)
        np.add.at(self.attr_count, batch.attr, 1)
        np.maximum.at(self.wmax, batch.attr, batch.weight)
        slots = self.table.add(batch)
        np.add.at(self.expr_count, self._expr_attrs(slots), 1)
        self.stab.touch(batch.attr)
        self._index(*self._entries(slots))

    def remove(self, ids: np.ndarray) -> None:
        t = self.table
        slots = t.slots(ids)
        off, rows = t.pred_rows(slots)
        attr = t.p_attr[rows]
        np.subtract.at(self.attr_count, attr, 1)
        np.subtract.at(self.expr_count, self._expr_attrs(slots), 1)
        self.stab.touch(attr)
        item = np.repeat(slots, np.diff(off))
        for a in np.unique(attr).tolist():
            self.indexes[a].delete(np.unique(item[attr == a]))
        t.remove(ids)
        if t.compact() is None:
            return
        # the indexes hold slots, which moved: rebuild them (and the bounds they keep)
        n = t.n_slots
        live_rows = t.pred_rows(np.arange(n, dtype=np.int64))[1]
        self.wmax[:] = 0.0
        np.maximum.at(self.wmax, t.p_attr[live_rows], t.p_w[live_rows])
        self.indexes = {}
        self.stab.clear()
        self._index(*self._entries(np.arange(n, dtype=np.int64)))

    # ------------------------------------------------------------------ queries
    def match(self, events, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        out = []
        ev = self.ev
        t = self.table
        if len(self._seen) < t.n_slots:
            self._seen = np.zeros(2 * t.n_slots, np.uint8)
            self._touched = np.zeros(2 * t.n_slots, np.int64)
        for i in range(len(events)):
            a, b = events.off[i], events.off[i + 1]
            attrs = events.attr[a:b]
            ev.set(attrs, events.val[a:b], events.weight[a:b])
            self.counters["events"] += 1
            out.append(self._event(attrs, k))
        return out

    def _event(self, attrs, k: int):
        return self._pivot(attrs, k, None)

    def _plan(self, attrs):
        """(lists as [attribute, stabbed count] pivot first, ``R``: the bound of what the lists
        after the pivot can add, None when every expression has a pivot predicate and the
        others need no reading)."""
        t = self.table
        lists = []
        for a in attrs.tolist():
            idx = self.indexes.get(a)
            if idx is not None and len(idx):
                lists.append((a, self.stab.count(t, a, float(self.ev.val[a]))))
        if not lists:
            return [], None
        if self.mode == RELAXED:
            lists.sort(key=lambda x: x[1])
            rest = float(sum(self.wmax[a] for a, _ in lists[1:]))
            return lists, rest
        full = [x for x in lists if self.expr_count[x[0]] == t.n_live]
        if full:
            p = min(full, key=lambda x: x[1])
            return [p], None
        lists.sort(key=lambda x: x[1])
        return lists, np.inf

    def _pivot(self, attrs, k: int, budget: int | None):
        """Top-k of the current event (module docstring); ``budget``: give up (return None)
        once that many entries have been read."""
        t = self.table
        ev = self.ev
        lists, rest = self._plan(attrs)
        h_score, h_id = np.zeros(max(k, 1)), np.zeros(max(k, 1), np.int64)
        h_size = n_touched = 0
        counts = np.zeros(1, np.int64)
        seen, touched = self._seen, self._touched
        static = self.mode == STATIC
        scale = 1.0
        if self.mode == WEIGHTED and len(attrs):
            scale = float(ev.ew[attrs].max())
        read = 0
        gave_up = False
        try:
            for j, (a, _) in enumerate(lists):
                if j >= 1 and (rest is None or h_size == k and (
                        h_score[0] > rest if static else h_score[0] > rest * (1.0 + EPS) + EPS)):
                    break
                if j == 1:
                    self.counters["beyond_pivot"] += 1
                cur = self.indexes[a].open(float(ev.val[a]))
                n = max(self.FIRST, 2 * k)
                while k > 0:
                    items, keys = cur.next(n)
                    self.counters["rounds"] += 1
                    h_size, n_touched, stop = pivot_drain(
                        items, keys, scale, self.mode, k, h_score, h_id, h_size, seen, touched, n_touched,
                        t.ids, t.score, t.p_start, t.p_end, t.p_attr, t.p_op, t.p_a, t.p_b, t.p_w, t.set_off,
                        t.set_vals, ev.val, ev.has, ev.ew, counts)
                    read += stop
                    if stop < len(items) or len(items) < n:
                        break
                    if budget is not None and read > budget:
                        gave_up = True
                        break
                    n = min(2 * n, self.MAX_BATCH)
                self.counters["nodes"] += int(cur.counters[0])
                self.counters["holes"] += int(cur.counters[1])
                if gave_up:
                    break
        finally:
            _clear(seen, touched, n_touched)
        self.counters["sorted_accesses"] += read
        self.counters["random_accesses"] += int(counts[0])
        if gave_up:
            return None
        order = np.lexsort((h_id[:h_size], -h_score[:h_size]))
        return h_id[:h_size][order], h_score[:h_size][order]

    def stats(self) -> dict:
        return {**super().stats(), "driver": self.driver_name}

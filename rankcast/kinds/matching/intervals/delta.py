"""Insertions and deletions for a static scored interval index, exact after every call.

A static index (SOPT-R-tree, scored R-tree, segment tree, score-sorted interval tree) is
built once from arrays. :class:`DeltaIndex` keeps it as the *base*, plus

- ``dead``: items deleted since the build, dropped from the base cursor's output;
- the *delta*: intervals inserted since the build, small, checked by one vectorised pass
  per query and merged with the base cursor in the total order.

Once ``len(delta) + len(dead)`` exceeds ``max(rebuild_min, rebuild_fraction * n)`` the base
is rebuilt from the live intervals, so a query pays at most that many extra checks and an
update costs ``O(build / (rebuild_fraction * n))`` amortised.
"""
from __future__ import annotations

import numba
import numpy as np

from .base import Cursor, IntervalIndex, check_intervals

__all__ = ["DeltaIndex"]


@numba.njit(cache=True)
def _merge_upto(b_items, b_scores, d_items, d_scores, d_from, limit_score, limit_item, bounded):
    """Merge base rows (in order) with delta rows ``d_from:`` (in order) that come before
    (limit_score, limit_item) when ``bounded`` (all of them otherwise). Returns the merged
    (items, scores) and the new ``d_from``."""
    d_end = d_from
    nd = d_items.shape[0]
    while d_end < nd and (not bounded or d_scores[d_end] > limit_score
                          or (d_scores[d_end] == limit_score and d_items[d_end] < limit_item)):
        d_end += 1
    n = b_items.shape[0] + d_end - d_from
    items = np.empty(n, np.int64)
    scores = np.empty(n, np.float64)
    i = 0
    j = d_from
    for o in range(n):
        if j < d_end and (i >= b_items.shape[0] or d_scores[j] > b_scores[i]
                          or (d_scores[j] == b_scores[i] and d_items[j] < b_items[i])):
            items[o] = d_items[j]
            scores[o] = d_scores[j]
            j += 1
        else:
            items[o] = b_items[i]
            scores[o] = b_scores[i]
            i += 1
    return items, scores, d_end


class _DeltaCursor(Cursor):
    def __init__(self, base: Cursor, dead: np.ndarray, d_items: np.ndarray, d_scores: np.ndarray):
        self.base, self.dead = base, dead
        self.d_items, self.d_scores, self.d_from = d_items, d_scores, 0
        self.counters = base.counters
        self.ready_items = np.zeros(0, np.int64)
        self.ready_scores = np.zeros(0, np.float64)
        self.base_done = False

    def next(self, n: int):
        while len(self.ready_items) < n and not (self.base_done and self.d_from >= len(self.d_items)):
            m = max(n, 16)
            bi, bs = self.base.next(m)
            if len(bi) < m:
                self.base_done = True
            if len(bi):
                last_s, last_i = bs[-1], bi[-1]
            else:
                last_s, last_i = 0.0, 0
            if len(self.dead) and len(bi):
                keep = ~np.isin(bi, self.dead, assume_unique=False)
                bi, bs = bi[keep], bs[keep]
            items, scores, self.d_from = _merge_upto(bi, bs, self.d_items, self.d_scores, self.d_from,
                                                     last_s, last_i, not self.base_done)
            self.ready_items = np.concatenate((self.ready_items, items))
            self.ready_scores = np.concatenate((self.ready_scores, scores))
        out = self.ready_items[:n], self.ready_scores[:n]
        self.ready_items, self.ready_scores = self.ready_items[n:], self.ready_scores[n:]
        return out


class DeltaIndex(IntervalIndex):
    """A static index class ``cls`` made dynamic (see the module docstring)."""

    dynamic = True

    def __init__(self, cls, lo, hi, score, item, *, b: int = 50, rebuild_fraction: float = 0.05,
                 rebuild_min: int = 1024):
        self.cls, self.b = cls, b
        self.name = cls.name
        self.rebuild_fraction, self.rebuild_min = rebuild_fraction, rebuild_min
        self.rebuilds = 0
        self._build(*check_intervals(lo, hi, score, item))

    def _build(self, lo, hi, score, item):
        self.base = self.cls(lo, hi, score, item, b=self.b)
        self.cols = (lo, hi, score, item)          # the base's intervals, for the next rebuild
        self.dead: set[int] = set()
        self._dead_arr = np.zeros(0, np.int64)
        self.d_lo, self.d_hi = np.zeros(0), np.zeros(0)
        self.d_score, self.d_item = np.zeros(0), np.zeros(0, np.int64)
        self._base_items = set(item.tolist())

    def __len__(self) -> int:
        return len(self._base_items) - len(self.dead) + len(self.d_item)

    def nbytes(self) -> int:
        return self.base.nbytes() + sum(a.nbytes for a in (self.d_lo, self.d_hi, self.d_score, self.d_item))

    def open(self, q: float) -> Cursor:
        if not len(self.d_item) and not self.dead:
            return self.base.open(q)            # just rebuilt: nothing to merge or drop
        d = (self.d_lo <= q) & (q <= self.d_hi)
        di, ds = self.d_item[d], self.d_score[d]
        order = np.lexsort((di, -ds))
        return _DeltaCursor(self.base.open(q), self._dead_arr, di[order], ds[order])

    def insert(self, lo, hi, score, item) -> None:
        lo, hi, score, item = check_intervals(lo, hi, score, item)
        self.d_lo = np.concatenate((self.d_lo, lo))
        self.d_hi = np.concatenate((self.d_hi, hi))
        self.d_score = np.concatenate((self.d_score, score))
        self.d_item = np.concatenate((self.d_item, item))
        self._maybe_rebuild()

    def delete(self, item) -> None:
        item = np.asarray(item, np.int64)
        in_delta = np.isin(item, self.d_item)
        if in_delta.any():
            keep = ~np.isin(self.d_item, item[in_delta])
            self.d_lo, self.d_hi = self.d_lo[keep], self.d_hi[keep]
            self.d_score, self.d_item = self.d_score[keep], self.d_item[keep]
        for i in item[~in_delta].tolist():
            if i not in self._base_items or i in self.dead:
                raise KeyError(f"item {i} is not in the index")
            self.dead.add(i)
        self._dead_arr = np.fromiter(self.dead, np.int64, len(self.dead))
        self._maybe_rebuild()

    def _maybe_rebuild(self) -> None:
        if len(self.d_item) + len(self.dead) > max(self.rebuild_min, self.rebuild_fraction * len(self)):
            self.rebuild()

    def rebuild(self) -> None:
        lo, hi, score, item = self.cols
        keep = ~np.isin(item, self._dead_arr) if len(self.dead) else np.ones(len(item), bool)
        self._build(np.concatenate((lo[keep], self.d_lo)), np.concatenate((hi[keep], self.d_hi)),
                    np.concatenate((score[keep], self.d_score)), np.concatenate((item[keep], self.d_item)))
        self.rebuilds += 1

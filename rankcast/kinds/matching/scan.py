"""The scan index of ranked matching (``index="scan"``): every live expression checked against
every event, then the top-k kept. Exact by construction: the floor every ranked index is
measured against (docs/BENCHMARKS.md).

:class:`ScanCore` is the scan at its best: the expressions' interval predicates (``<``,
``<=``, ``==``, ``>=``, ``>``, ``between``: each one exactly a closed interval ``[lo, hi]`` of
its attribute) are held in columns, one ``lo`` / ``hi`` / weight array per attribute over the
expression slots (:class:`ScanColumns`), and one compiled pass (:func:`fused_scan`) reads
only the columns of the event's attributes, scores every expression and keeps the top-k in a
heap as it goes (a partial selection: an expression below the k-th is dropped at one
comparison). Expressions the columns cannot hold (``!=``, ``in``, ``not in``, two predicates on
one attribute, predicates not in attribute order) are checked row by row on the flat table.
Scores are summed in predicate order, as the contract defines them.

:class:`TableScanCore` checks every expression row by row on the flat table (the plain scan).
"""
from __future__ import annotations

import numba
import numpy as np

from .core import (BETWEEN, EQ, GE, GT, LE, LT, MODES, RELAXED, STATIC, WEIGHTED, DenseEvent, ExpressionTable,
                   offer_topk, ranks_after, top_of)

__all__ = ["ScanCore", "TableScanCore", "ScanColumns", "fused_scan", "offer_all", "heap_sorted"]

MAX_COLUMNS = 64        # attributes held in columns; expressions on others are checked row by row
_INTERVAL_OPS = np.zeros(16, np.bool_)
_INTERVAL_OPS[[LT, LE, EQ, GE, GT, BETWEEN]] = True


@numba.njit(cache=True)
def fused_scan(mode, lo2, hi2, w2, npred, exact, live, score, ids, start, n_slots, ev_attr, ev_val, ev_w, k,
               h_score, h_id, h_size):
    """One pass over slots ``start..n_slots``: every live ``exact`` expression scored against the
    event (``ev_attr`` ascending attribute ids with a column, values ``ev_val``, weights
    ``ev_w``) and offered to the top-k heap ``h_score/h_id`` (``offer_topk`` order) when it can
    enter it. A slot's predicate on attribute ``a`` is ``lo2[a, s] <= x <= hi2[a, s]`` (no
    predicate: ``lo = +inf``, never holds); static and weighted need all ``npred[s]`` to hold.
    ``h_size``: the heap's size before; returns it after."""
    m = ev_attr.shape[0]
    for s in range(start, n_slots):
        if not exact[s] or not live[s]:
            continue
        acc = 0.0
        hits = 0
        for j in range(m):
            a = ev_attr[j]
            x = ev_val[j]
            if lo2[a, s] <= x and x <= hi2[a, s]:
                hits += 1
                if mode == RELAXED:
                    acc += w2[a, s]
                elif mode == WEIGHTED:
                    acc += w2[a, s] * ev_w[j]
        if mode == RELAXED:
            if hits == 0:
                continue
        elif hits != npred[s]:
            continue
        sc = score[s] if mode == STATIC else acc
        if h_size < k or ranks_after(h_score[0], h_id[0], sc, ids[s]):
            h_size = offer_topk(h_score, h_id, h_size, k, sc, ids[s])
    return h_size


@numba.njit(cache=True)
def offer_all(ids, scores, k, h_score, h_id, h_size):
    """Offer every (score, id) to the top-k heap; returns its size."""
    for i in range(ids.shape[0]):
        if k > 0:
            h_size = offer_topk(h_score, h_id, h_size, k, scores[i], ids[i])
    return h_size


def heap_sorted(h_score, h_id, h_size: int) -> tuple[np.ndarray, np.ndarray]:
    """The heap's (ids, scores), score descending then id ascending."""
    order = np.lexsort((h_id[:h_size], -h_score[:h_size]))
    return h_id[:h_size][order], h_score[:h_size][order]


class ScanColumns:
    """The columns of :class:`ScanCore` over an :class:`ExpressionTable`'s slots: per attribute
    ``lo2[a]``, ``hi2[a]``, ``w2[a]`` (every predicate's index interval ``[lo, hi]``: exactly
    where it holds for the interval operators, a superset for ``!=``, ``in``, ``not in``); per
    slot its predicate count, whether all its attributes have columns (``columnar``) and whether
    the columns decide it exactly (``exact``: interval operators only, attributes ascending);
    the slots not ``exact`` are in ``generic``, checked row by row."""

    def __init__(self):
        self.n = 0
        self.lo2 = np.full((0, 0), np.inf)
        self.hi2 = np.full((0, 0), -np.inf)
        self.w2 = np.zeros((0, 0))
        self.npred = np.zeros(0, np.int32)
        self.columnar = np.zeros(0, np.bool_)
        self.exact = np.zeros(0, np.bool_)
        self.generic = np.zeros(0, np.int64)

    def nbytes(self) -> int:
        return int(self.lo2.nbytes + self.hi2.nbytes + self.w2.nbytes + self.npred.nbytes + self.columnar.nbytes)

    def _reserve(self, n_attrs: int, n: int) -> None:
        rows, cap = self.lo2.shape
        n_attrs = min(max(n_attrs, rows), MAX_COLUMNS)
        if n_attrs <= rows and n <= cap:
            return
        cap2 = max(n, cap + cap // 2, 64) if n > cap else cap
        for name, fill in (("lo2", np.inf), ("hi2", -np.inf), ("w2", 0.0)):
            new = np.full((n_attrs, cap2), fill)
            old = getattr(self, name)
            new[: old.shape[0], : old.shape[1]] = old
            setattr(self, name, new)
        for name, dt in (("npred", np.int32), ("columnar", np.bool_), ("exact", np.bool_)):
            new = np.zeros(cap2, dt)
            old = getattr(self, name)
            new[: len(old)] = old
            setattr(self, name, new)

    def append(self, t: ExpressionTable, slots: np.ndarray, n_attrs: int) -> None:
        """Hold the new slots ``slots`` (consecutive, from ``self.n``) of table ``t``."""
        if not len(slots):
            return
        self._reserve(n_attrs, int(slots[-1]) + 1)
        off, rows = t.pred_rows(slots)
        cnt = np.diff(off)
        owner = np.repeat(slots, cnt)
        at = t.p_attr[rows].astype(np.int64)
        first = np.zeros(len(rows), bool)
        first[off[:-1][cnt > 0]] = True
        # columnar: every attribute has a column; exact: besides, interval operators only and
        # attributes strictly ascending within the expression (the order scores are summed in)
        out = at >= self.lo2.shape[0]
        loose = ~_INTERVAL_OPS[t.p_op[rows]]
        loose[1:] |= ~first[1:] & (at[1:] <= at[:-1])
        out_slot = np.zeros(len(slots), bool)
        np.logical_or.at(out_slot, owner - slots[0], out)
        loose_slot = np.zeros(len(slots), bool)
        np.logical_or.at(loose_slot, owner - slots[0], loose)
        good = ~out_slot[owner - slots[0]]
        r, s, a = rows[good], owner[good], at[good]
        self.lo2[a, s] = t.p_lo[r]
        self.hi2[a, s] = t.p_hi[r]
        self.w2[a, s] = t.p_w[r]
        self.npred[slots] = cnt
        self.columnar[slots] = ~out_slot
        self.exact[slots] = ~out_slot & ~loose_slot
        bad_slot = out_slot | loose_slot
        if bad_slot.any():
            self.generic = np.r_[self.generic, slots[bad_slot]]
        self.n = int(slots[-1]) + 1

    def rebuild(self, t: ExpressionTable, n_attrs: int) -> None:
        """Start again from the table (after it compacted: slots moved)."""
        self.__init__()
        self.append(t, np.arange(t.n_slots, dtype=np.int64), n_attrs)

    def scan_into(self, t: ExpressionTable, mode: int, ev: DenseEvent, k: int, start: int, h_score, h_id,
                  h_size: int, generic: np.ndarray | None = None) -> int:
        """Offer slots ``start..`` (:func:`fused_scan`) and the generic expressions (``generic``
        if given, else all) to the heap ``h_score/h_id``; returns its size."""
        attrs = ev.attrs[ev.attrs < self.lo2.shape[0]].astype(np.int64)
        h_size = fused_scan(mode, self.lo2, self.hi2, self.w2, self.npred, self.exact, t.live, t.score, t.ids,
                            start, self.n, attrs, ev.val[attrs], ev.ew[attrs], k, h_score, h_id, h_size)
        if generic is None:
            self.generic = generic = self.generic[t.live[self.generic]]
        if len(generic):
            gen = generic[t.live[generic]]
            ok, gsc = t.evaluate(gen, mode, ev)
            h_size = offer_all(t.ids[gen[ok]], gsc[ok], k, h_score, h_id, h_size)
        return h_size

    def top(self, t: ExpressionTable, mode: int, ev: DenseEvent, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The event's top-k (ids, scores), score descending then id ascending."""
        h_score, h_id = np.zeros(max(k, 1)), np.zeros(max(k, 1), np.int64)
        h = self.scan_into(t, mode, ev, k, 0, h_score, h_id, 0)
        return heap_sorted(h_score, h_id, h)


class _ScanBase:
    def __init__(self, scoring: str, index: str = "scan", **_):
        self.mode = MODES[scoring]
        self.table = ExpressionTable()
        self.ev = DenseEvent(0)
        self.counters = dict(events=0, random_accesses=0)

    def __len__(self) -> int:
        return self.table.n_live

    def stats(self) -> dict:
        return {"expressions": len(self), "index": "scan", **self.counters}


class ScanCore(_ScanBase):
    """The columnar scan (see the module docstring); the interface of
    :class:`~rankcast.kinds.matching.core.MatchCore`."""

    index_name = "scan"

    def __init__(self, scoring: str, index: str = "scan", **kw):
        super().__init__(scoring, index, **kw)
        self.columns = ScanColumns()
        self.n_attrs = 0

    def add(self, batch, n_attrs: int) -> None:
        self.ev.grow(n_attrs)
        self.n_attrs = max(self.n_attrs, n_attrs)
        slots = self.table.add(batch)
        self.columns.append(self.table, slots, self.n_attrs)

    def remove(self, ids) -> None:
        self.table.remove(ids)
        if self.table.compact() is not None:
            self.columns.rebuild(self.table, self.n_attrs)

    def match(self, events, k: int):
        out = []
        for i in range(len(events)):
            a, b = events.off[i], events.off[i + 1]
            self.ev.set(events.attr[a:b], events.val[a:b], events.weight[a:b])
            self.counters["events"] += 1
            self.counters["random_accesses"] += self.table.n_live
            out.append(self.columns.top(self.table, self.mode, self.ev, k))
        return out

    def stats(self) -> dict:
        return {**super().stats(), "index_bytes": self.columns.nbytes()}


class TableScanCore(_ScanBase):
    """Every expression checked row by row on the flat table (see the module docstring)."""

    index_name = "table-scan"

    def add(self, batch, n_attrs: int) -> None:
        self.ev.grow(n_attrs)
        self.table.add(batch)

    def remove(self, ids) -> None:
        self.table.remove(ids)
        self.table.compact()

    def match(self, events, k: int):
        t = self.table
        live = np.flatnonzero(t.live[: t.n_slots])
        out = []
        for i in range(len(events)):
            a, b = events.off[i], events.off[i + 1]
            self.ev.set(events.attr[a:b], events.val[a:b], events.weight[a:b])
            ok, sc = t.evaluate(live, self.mode, self.ev)
            self.counters["events"] += 1
            self.counters["random_accesses"] += len(live)
            out.append(top_of(t.ids[live][ok], sc[ok], k))
        return out

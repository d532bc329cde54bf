"""The box driver of ranked matching (``driver="box"``, and what ``index="auto"`` serves;
docs/matching.md): one tree over whole expressions, searched best first by a bound on the
whole expression's score.

An expression whose predicates are all intervals (``<``, ``<=``, ``==``, ``>=``, ``>``,
``between``; :class:`~rankcast.kinds.matching.scan.ScanColumns`) is a box: per attribute its
interval, or nothing. The boxes are ordered as the SOPT-R-tree orders intervals, scores first:
sorted by their bound (``key``: the weight sum for ``relaxed`` and ``weighted``, the score for
``static``) and cut into bands of ``BAND`` boxes; inside a band, halved recursively at the
median centre of the attribute whose centres spread most (a k-d split) down to leaves of
``LEAF`` boxes, which are stored attribute by attribute in that order; ``FAN`` consecutive
nodes make a parent. A node keeps, per attribute, the least ``lo`` and largest ``hi`` of its
boxes that have that attribute and whether some box lacks it; its largest key; and per
attribute the largest key less that attribute's weight (``mwx``: the best a box can still
score when its predicate there fails).

The bound of a node for an event:

- ``relaxed``: its largest key; for every attribute where the node's boxes do not reach the
  event's value (or the event lacks the attribute) no box's predicate there holds, so the
  bound is also at most ``mwx`` of that attribute. Partial matches are bounded too: nothing is
  assumed about how many predicates hold.
- ``static`` / ``weighted``: the largest key (times the event's largest weight for
  ``weighted``) when every attribute of the event is reached or lacked by some box and every
  other attribute is lacked by some box; otherwise nothing in it can match (-inf).

The search pops the node of the highest bound from a heap, pushes its children, checks a
leaf's boxes straight from the leaf's columns (each box's own key first), and stops once the
k-th score beats the highest bound left (with the relative slack ``EPS``; ``static``: strictly),
so an unread expression with an equal score and a smaller id is never missed: results equal
the brute force, ties included. Scores are summed in predicate order (attributes ascending, as
the columns require), as the contract defines them.

Expressions added after the tree was built, and those that are not boxes, are scanned every
event (:meth:`ScanColumns.scan_into`) before the search, seeding its heap; removed ones stay in
the tree until the next build, skipped when they would enter the top-k. The tree is rebuilt
when the expressions added since exceed ``rebuild_fraction`` of it (and ``rebuild_min``), and
when the table compacts. A search that cannot prune visits every leaf: about one scan.
"""
from __future__ import annotations

import warnings

import numba
import numpy as np

from rankcast.common.tolerance import EPS
from .core import (MODES, RELAXED, STATIC, WEIGHTED, DenseEvent, ExpressionTable, check_slot, offer_topk,
                   ranks_after)
from .scan import ScanColumns, heap_sorted

__all__ = ["BoxCore", "BoxTree", "box_search"]

_NO_ID = np.iinfo(np.int64).max
_LOOSE_SLACK = 1e-12      # relative: far above the rounding of a sum of a few hundred weights


@numba.njit(cache=True, inline="always")
def _beats(kth, bound, static):
    if static:
        return kth > bound
    return kth > bound * (1.0 + EPS) + EPS


@numba.njit(cache=True, inline="always")
def _node_bound(v, mode, n_cols, has_q, q, nlo, nhi, lacks, maxkey, mwx, scale):
    """(bound, exact): exact when the bound is the node's largest key itself (``relaxed`` with
    every attribute reached, ``static``), so that ties can be decided by id."""
    if mode == RELAXED:
        b = maxkey[v]
        exact = True
        for a in range(n_cols):
            if not has_q[a] or q[a] < nlo[v, a] or q[a] > nhi[v, a]:
                if mwx[v, a] < b:
                    b = mwx[v, a]
                    exact = False
        return b, exact
    for a in range(n_cols):
        if has_q[a]:
            if not lacks[v, a] and (q[a] < nlo[v, a] or q[a] > nhi[v, a]):
                return -np.inf, True
        elif not lacks[v, a]:
            return -np.inf, True
    if mode == STATIC:
        return maxkey[v], True
    return maxkey[v] * scale, False


@numba.njit(cache=True, inline="always")
def _cannot_enter(h_size, k, kth, kth_id, b, exact, min_id):
    """Nothing bounded by ``b`` (exact: its best is (b, min_id) in the result order) can enter
    a full top-k whose k-th is (kth, kth_id)."""
    if h_size < k:
        return False
    if exact:
        return ranks_after(b, min_id, kth, kth_id)
    return kth > b * (1.0 + EPS) + EPS


@numba.njit(cache=True, inline="always")
def _heap_push(pb, pv, n, b, v):
    j = n
    while j > 0:
        par = (j - 1) >> 1
        if pb[par] >= b:
            break
        pb[j] = pb[par]
        pv[j] = pv[par]
        j = par
    pb[j] = b
    pv[j] = v
    return n + 1


@numba.njit(cache=True, inline="always")
def _heap_pop(pb, pv, n):
    """Remove the root of the max-heap ``pb/pv[:n]``; returns the new size."""
    n -= 1
    b = pb[n]
    v = pv[n]
    j = 0
    while True:
        c = 2 * j + 1
        if c >= n:
            break
        if c + 1 < n and pb[c + 1] > pb[c]:
            c += 1
        if pb[c] <= b:
            break
        pb[j] = pb[c]
        pv[j] = pv[c]
        j = c
    if n > 0:
        pb[j] = b
        pv[j] = v
    return n


@numba.njit(cache=True)
def box_search(mode, root, child_first, child_count, e_start, e_end, nlo, nhi, lacks, maxkey, minid, mwx,
               lo, hi, w, npred, key, eid, slot, loose, live, ev_attr, ev_val, ev_w, has_q, q, scale, k,
               h_score, h_id, h_size, pb, pv, counts, score, p_start, p_end, p_attr, p_op, p_a, p_b, p_w,
               set_off, set_vals, val, has, ew):
    """Best-first search of the tree (module docstring) for one event, into the top-k heap
    ``h_score/h_id[:h_size]``. ``ev_attr`` (ascending) / ``ev_val`` / ``ev_w``: the event's
    attributes that have columns; ``has_q``, ``q``: the same, dense. ``pb/pv``: the node heap's
    room. ``counts`` += (nodes popped, boxes checked). A ``loose`` box (its intervals a superset
    of where its predicates hold) that passes is checked exactly on the table (``score``,
    ``p_*``, ``set_*``; the dense event ``val``, ``has``, ``ew``). Returns the heap's size."""
    exact_keys = mode != WEIGHTED
    n_cols = nlo.shape[1]
    m = ev_attr.shape[0]
    n = 0
    b0, ex0 = _node_bound(root, mode, n_cols, has_q, q, nlo, nhi, lacks, maxkey, mwx, scale)
    if b0 == -np.inf:
        return h_size
    n = _heap_push(pb, pv, n, b0, root)
    while n > 0:
        b = pb[0]
        v = pv[0]
        if h_size == k and h_score[0] > b * (1.0 + EPS) + EPS:
            break                   # nothing left in the heap is bounded higher
        n = _heap_pop(pb, pv, n)
        b, ex = _node_bound(v, mode, n_cols, has_q, q, nlo, nhi, lacks, maxkey, mwx, scale)
        if _cannot_enter(h_size, k, h_score[0], h_id[0], b, ex, minid[v]):
            continue
        counts[0] += 1
        if child_count[v] == 0:
            for i in range(e_start[v], e_end[v]):
                if _cannot_enter(h_size, k, h_score[0], h_id[0], key[i] * scale, exact_keys, eid[i]):
                    continue
                counts[1] += 1
                acc = 0.0
                hits = 0
                for j in range(m):
                    a = ev_attr[j]
                    x = ev_val[j]
                    if lo[i, a] <= x and x <= hi[i, a]:
                        hits += 1
                        if mode == RELAXED:
                            acc += w[i, a]
                        elif mode == WEIGHTED:
                            acc += w[i, a] * ev_w[j]
                if mode == RELAXED:
                    if hits == 0:
                        continue
                elif hits != npred[i]:
                    continue
                sc = key[i] if mode == STATIC else acc
                if loose[i]:
                    ok, sc = check_slot(slot[i], mode, p_start, p_end, score, p_attr, p_op, p_a, p_b, p_w,
                                        set_off, set_vals, val, has, ew)
                    if not ok:
                        continue
                if h_size == k and not ranks_after(h_score[0], h_id[0], sc, eid[i]):
                    continue
                if live[slot[i]]:
                    h_size = offer_topk(h_score, h_id, h_size, k, sc, eid[i])
        else:
            for c in range(child_first[v], child_first[v] + child_count[v]):
                bc, exc = _node_bound(c, mode, n_cols, has_q, q, nlo, nhi, lacks, maxkey, mwx, scale)
                if bc == -np.inf or _cannot_enter(h_size, k, h_score[0], h_id[0], bc, exc, minid[c]):
                    continue
                n = _heap_push(pb, pv, n, bc, c)
    return h_size


class BoxTree:
    """The tree over the box expressions of a table (module docstring), built once."""

    LEAF, FAN, BAND = 4, 8, 4096

    def __init__(self, t: ExpressionTable, cols: ScanColumns, mode: int):
        n_cols = cols.lo2.shape[0]
        slots = np.flatnonzero(cols.columnar[: cols.n] & t.live[: cols.n])
        if mode == STATIC:
            key = t.score[slots]
        else:       # the weights summed in predicate order (attributes ascending), as a score is
            key = np.zeros(len(slots))
            for a in range(n_cols):
                key = key + cols.w2[a, slots]
            # a box summed in another order may round above: its bound is raised past that
            lz = ~cols.exact[slots]
            key[lz] = key[lz] * (1.0 + _LOOSE_SLACK) + _LOOSE_SLACK
        order = np.argsort(-key, kind="stable")
        slots, key = slots[order], key[order]
        lo, hi = cols.lo2[:, slots], cols.hi2[:, slots]
        has = lo <= hi
        perm = self._kd_order(lo, hi, has)
        self.slot = np.ascontiguousarray(slots[perm])
        self.key = np.ascontiguousarray(key[perm])
        lo, hi, w = lo[:, perm], hi[:, perm], cols.w2[:, self.slot]
        self.npred = np.ascontiguousarray(cols.npred[self.slot])
        self.eid = np.ascontiguousarray(t.ids[self.slot])
        self.loose = np.ascontiguousarray(~cols.exact[self.slot])
        has = has[:, perm]
        self.n = n = len(self.slot)
        # leaves, then parents of FAN consecutive nodes, up to one root
        starts = np.arange(0, max(n, 1), self.LEAF)
        e_start, e_end = [starts], [np.minimum(starts + self.LEAF, n)]
        if n:
            wa = np.where(has, w, 0.0)
            lvl = [np.minimum.reduceat(np.where(has, lo, np.inf), starts, axis=1),
                   np.maximum.reduceat(np.where(has, hi, -np.inf), starts, axis=1),
                   np.logical_or.reduceat(~has, starts, axis=1),
                   np.maximum.reduceat(self.key, starts),
                   np.maximum.reduceat(self.key[None, :] - wa, starts, axis=1)]
            at_max = self.key == np.repeat(lvl[3], np.diff(np.r_[starts, n]))
            lvl.append(np.minimum.reduceat(np.where(at_max, self.eid, _NO_ID), starts))
        else:
            lvl = [np.full((n_cols, 1), np.inf), np.full((n_cols, 1), -np.inf), np.ones((n_cols, 1), bool),
                   np.full(1, -np.inf), np.full((n_cols, 1), -np.inf), np.full(1, _NO_ID)]
        levels = [lvl]
        # box-major (a leaf's boxes side by side)
        self.lo, self.hi, self.w = (np.ascontiguousarray(x.T) for x in (lo, hi, w))
        child_first, child_count = [np.zeros(len(starts), np.int64)], [np.zeros(len(starts), np.int64)]
        base = 0
        while len(levels[-1][3]) > 1:
            m = len(levels[-1][3])
            ps = np.arange(0, m, self.FAN)
            lv = levels[-1]
            mk = np.maximum.reduceat(lv[3], ps)
            at_max = lv[3] == np.repeat(mk, np.diff(np.r_[ps, m]))
            levels.append([np.minimum.reduceat(lv[0], ps, axis=1), np.maximum.reduceat(lv[1], ps, axis=1),
                           np.logical_or.reduceat(lv[2], ps, axis=1), mk,
                           np.maximum.reduceat(lv[4], ps, axis=1),
                           np.minimum.reduceat(np.where(at_max, lv[5], _NO_ID), ps)])
            child_first.append(base + ps)
            child_count.append(np.minimum(ps + self.FAN, m) - ps)
            e_start.append(np.zeros(len(ps), np.int64))
            e_end.append(np.zeros(len(ps), np.int64))
            base += m
        # node-major (a node's attributes side by side: a parent's children are read together)
        self.nlo = np.ascontiguousarray(np.concatenate([x[0] for x in levels], axis=1).T)
        self.nhi = np.ascontiguousarray(np.concatenate([x[1] for x in levels], axis=1).T)
        self.lacks = np.ascontiguousarray(np.concatenate([x[2] for x in levels], axis=1).T)
        self.maxkey = np.concatenate([x[3] for x in levels]).astype(np.float64)
        self.mwx = np.ascontiguousarray(np.concatenate([x[4] for x in levels], axis=1).T)
        self.minid = np.concatenate([x[5] for x in levels]).astype(np.int64)
        self.child_first = np.concatenate(child_first).astype(np.int64)
        self.child_count = np.concatenate(child_count).astype(np.int64)
        self.e_start = np.concatenate(e_start).astype(np.int64)
        self.e_end = np.concatenate(e_end).astype(np.int64)
        self.root = len(self.maxkey) - 1
        self.pb = np.zeros(len(self.maxkey) + 1)
        self.pv = np.zeros(len(self.maxkey) + 1, np.int64)

    def _kd_order(self, lo, hi, has) -> np.ndarray:
        """The order of boxes (given sorted by key) with every band k-d split (module docstring)."""
        n = lo.shape[1]
        if n == 0:
            return np.zeros(0, np.int64)
        fin_lo = np.where(has & np.isfinite(lo), lo, np.nan)
        fin_hi = np.where(has & np.isfinite(hi), hi, np.nan)
        with warnings.catch_warnings():          # an attribute without finite ends: 0
            warnings.simplefilter("ignore", RuntimeWarning)
            a_min = np.nan_to_num(np.nanmin(np.fmin(fin_lo, fin_hi), axis=1), nan=0.0)
            a_max = np.nan_to_num(np.nanmax(np.fmax(fin_lo, fin_hi), axis=1), nan=0.0)
        c_lo = np.where(has, np.clip(lo, a_min[:, None], a_max[:, None]), a_min[:, None])
        c_hi = np.where(has, np.clip(hi, a_min[:, None], a_max[:, None]), a_max[:, None])
        cen = 0.5 * (c_lo + c_hi)
        perm = np.arange(n)
        pos = np.arange(n)
        g = self.BAND
        while g > self.LEAF:
            gid = pos // g
            gs = np.arange(0, n, g)
            spread = np.maximum.reduceat(cen, gs, axis=1) - np.minimum.reduceat(cen, gs, axis=1)
            best = np.argmax(spread, axis=0)
            p = np.lexsort((cen[best[gid], pos], gid))
            perm, cen = perm[p], cen[:, p]
            g //= 2
        return perm

    def nbytes(self) -> int:
        return int(sum(x.nbytes for x in (self.slot, self.key, self.eid, self.minid, self.loose, self.lo, self.hi, self.w,
                                          self.npred, self.nlo,
                                          self.nhi, self.lacks, self.maxkey, self.mwx, self.child_first,
                                          self.child_count, self.e_start, self.e_end)))


class BoxCore:
    """The box driver (module docstring) with the interface of
    :class:`~rankcast.kinds.matching.core.MatchCore`."""

    driver_name = "box"

    def __init__(self, scoring: str, index: str = "auto", *, rebuild_fraction: float = 0.05,
                 rebuild_min: int = 1024, **_):
        self.mode = MODES[scoring]
        self.index_name = index
        self.table = ExpressionTable()
        self.cols = ScanColumns()
        self.ev = DenseEvent(0)
        self.n_attrs = 0
        self.rebuild_fraction, self.rebuild_min = rebuild_fraction, rebuild_min
        self.tree: BoxTree | None = None
        self.built_n = 0                    # slots below this are in the tree (or not boxes)
        self.counters = dict(events=0, nodes=0, random_accesses=0, scanned=0, builds=0)

    def __len__(self) -> int:
        return self.table.n_live

    def add(self, batch, n_attrs: int) -> None:
        self.ev.grow(n_attrs)
        self.n_attrs = max(self.n_attrs, n_attrs)
        slots = self.table.add(batch)
        self.cols.append(self.table, slots, self.n_attrs)

    def remove(self, ids) -> None:
        self.table.remove(ids)
        if self.table.compact() is not None:
            self.cols.rebuild(self.table, self.n_attrs)
            self.tree, self.built_n = None, 0

    def _fresh_tree(self) -> BoxTree:
        pending = self.cols.n - self.built_n
        if self.tree is None or pending > max(self.rebuild_min, self.rebuild_fraction * self.tree.n):
            self.tree = BoxTree(self.table, self.cols, self.mode)
            self.built_n = self.cols.n
            self.counters["builds"] += 1
        return self.tree

    def match(self, events, k: int):
        out = []
        tree = self._fresh_tree()
        t, ev, cols = self.table, self.ev, self.cols
        n_cols = cols.lo2.shape[0]
        has_q, q = np.zeros(n_cols, np.bool_), np.zeros(n_cols)
        counts = np.zeros(2, np.int64)
        g = cols.generic[t.live[cols.generic]]
        outside = g[(g >= self.built_n) | ~cols.columnar[g]]     # generic and not in the tree
        for i in range(len(events)):
            a, b = events.off[i], events.off[i + 1]
            ev.set(events.attr[a:b], events.val[a:b], events.weight[a:b])
            self.counters["events"] += 1
            h_score, h_id = np.zeros(max(k, 1)), np.zeros(max(k, 1), np.int64)
            h = cols.scan_into(t, self.mode, ev, k, self.built_n, h_score, h_id, 0, outside)
            self.counters["scanned"] += cols.n - self.built_n + len(outside)
            attrs = ev.attrs[ev.attrs < n_cols].astype(np.int64)
            has_q[:] = False
            has_q[attrs] = True
            q[attrs] = ev.val[attrs]
            scale = float(ev.ew[ev.attrs].max()) if self.mode == WEIGHTED and len(ev.attrs) else 1.0
            if tree.n:
                attrs = attrs[attrs < tree.nlo.shape[1]]      # attributes new since the build: no box has them
                h = box_search(self.mode, tree.root, tree.child_first, tree.child_count, tree.e_start, tree.e_end,
                               tree.nlo, tree.nhi, tree.lacks, tree.maxkey, tree.minid, tree.mwx, tree.lo, tree.hi,
                               tree.w, tree.npred, tree.key, tree.eid, tree.slot, tree.loose, t.live, attrs,
                               ev.val[attrs], ev.ew[attrs], has_q, q, scale, k, h_score, h_id, h, tree.pb, tree.pv,
                               counts, t.score, t.p_start, t.p_end, t.p_attr, t.p_op, t.p_a, t.p_b, t.p_w,
                               t.set_off, t.set_vals, ev.val, ev.has, ev.ew)
            out.append(heap_sorted(h_score, h_id, h))
        self.counters["nodes"] += int(counts[0])
        self.counters["random_accesses"] += int(counts[1])
        return out

    def stats(self) -> dict:
        nbytes = self.cols.nbytes() + (self.tree.nbytes() if self.tree is not None else 0)
        return {"expressions": len(self), "index": self.index_name, "driver": self.driver_name,
                "index_bytes": int(nbytes), **self.counters}

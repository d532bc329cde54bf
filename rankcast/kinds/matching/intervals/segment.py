"""The scored segment tree (paper §2.2.1; notes ``ranked-pubsub-interval-indexes.md`` §2.2).

Leaves are the elementary intervals of the ``m`` sorted distinct endpoints ``p``, with each
endpoint a leaf of its own so that closed endpoints are exact: leaf ``2j + 1`` is the point
``{p[j]}``, leaf ``2j`` the open gap ``(p[j-1], p[j])`` (``p[-1] = -inf``, ``p[m] = +inf``),
``2m + 1`` leaves in all. ``[p[a], p[b]]`` covers leaves ``2a+1 .. 2b+1`` (from leaf 0 when
``lo = -inf``, to the last when ``hi = inf``: those add only empty sets); a query ``q``
falls in leaf ``2j + 1`` when ``q == p[j]`` and in leaf ``2j`` otherwise (``j`` = the number
of endpoints ``< q``). ±inf endpoints are ordinary endpoints.

The tree is the complete binary tree over ``P`` (a power of two >= the leaf count) leaves in
heap numbering: node 1 is the root, node ``v`` has children ``2v, 2v + 1``, leaf ``i`` is
node ``P + i``. An interval is stored at its canonical cover (the maximal nodes whose leaves
it covers; at most 2 per level). Intervals are kept in the total order (score desc, item
asc), so a *row* is a position in that order, and node ``v``'s list is
``rows[offsets[v]:offsets[v + 1]]``, ascending, i.e. best first.

A cursor keeps a max-heap over the heads of the lists of the nodes on q's root-to-leaf path
(the path heap below, shared with the interval tree): ``(hscore, hitem)`` is the head in the
total order, ``hslot`` the path slot it came from. Every row on the path is stabbed, so
``next`` pops a head and pushes the next row of the same list.

Counters: ``nodes`` = the path's nodes; ``holes`` = path nodes with nothing stored at them or
below them on the path; ``entries`` = rows read (each stabbed row once, when it becomes a head).
"""
from __future__ import annotations

import numba
import numpy as np

from .base import read_args, Cursor, IntervalIndex, before, check_intervals

__all__ = ["SegmentTreeIndex", "SegmentTreeCursor", "heap_push", "heap_sift_down", "heap_pop"]


# ----------------------------------------------------------------------------- path heap

@numba.njit(cache=True, inline="always")
def heap_sift_down(hscore, hitem, hslot, size, i):
    """Restore the max-heap (in the total order) below position ``i``.

    hscore float64[cap], hitem int64[cap], hslot int64[cap]: the heap's parallel columns;
    size: entries in use."""
    s = hscore[i]
    it = hitem[i]
    sl = hslot[i]
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and before(hscore[c + 1], hitem[c + 1], hscore[c], hitem[c]):
            c += 1
        if not before(hscore[c], hitem[c], s, it):
            break
        hscore[i] = hscore[c]
        hitem[i] = hitem[c]
        hslot[i] = hslot[c]
        i = c
    hscore[i] = s
    hitem[i] = it
    hslot[i] = sl


@numba.njit(cache=True, inline="always")
def heap_push(hscore, hitem, hslot, size, score, item, slot):
    """Insert ``(score, item, slot)`` into the heap of ``size`` entries; returns the new size."""
    i = size
    while i > 0:
        p = (i - 1) // 2
        if not before(score, item, hscore[p], hitem[p]):
            break
        hscore[i] = hscore[p]
        hitem[i] = hitem[p]
        hslot[i] = hslot[p]
        i = p
    hscore[i] = score
    hitem[i] = item
    hslot[i] = slot
    return size + 1


@numba.njit(cache=True, inline="always")
def heap_pop(hscore, hitem, hslot, size):
    """Drop the top entry of the heap of ``size`` entries; returns the new size."""
    size -= 1
    if size > 0:
        hscore[0] = hscore[size]
        hitem[0] = hitem[size]
        hslot[0] = hslot[size]
        heap_sift_down(hscore, hitem, hslot, size, 0)
    return size


# ----------------------------------------------------------------------------- kernels

@numba.njit(cache=True)
def _cover_counts(first_leaf, last_leaf, n_leaves_pow2):
    """Rows per node of the canonical covers.

    first_leaf, last_leaf int64[n]: inclusive leaf range of each row; n_leaves_pow2: P.
    Returns offsets int64[2P + 1] (node v's rows are offsets[v]:offsets[v + 1])."""
    offsets = np.zeros(2 * n_leaves_pow2 + 1, np.int64)
    for r in range(first_leaf.shape[0]):
        lo = first_leaf[r] + n_leaves_pow2
        hi = last_leaf[r] + n_leaves_pow2 + 1
        while lo < hi:
            if lo & 1:
                offsets[lo + 1] += 1
                lo += 1
            if hi & 1:
                hi -= 1
                offsets[hi + 1] += 1
            lo >>= 1
            hi >>= 1
    for v in range(1, offsets.shape[0]):
        offsets[v] += offsets[v - 1]
    return offsets


@numba.njit(cache=True)
def _cover_fill(first_leaf, last_leaf, n_leaves_pow2, offsets):
    """The flat row array of the node lists (see ``_cover_counts``); rows are visited in
    ascending order, so every list comes out in the total order. Returns rows int32[total]."""
    rows = np.empty(offsets[-1], np.int32)
    fill = offsets[:-1].copy()
    for r in range(first_leaf.shape[0]):
        lo = first_leaf[r] + n_leaves_pow2
        hi = last_leaf[r] + n_leaves_pow2 + 1
        while lo < hi:
            if lo & 1:
                rows[fill[lo]] = r
                fill[lo] += 1
                lo += 1
            if hi & 1:
                hi -= 1
                rows[fill[hi]] = r
                fill[hi] += 1
            lo >>= 1
            hi >>= 1
    return rows


@numba.njit(cache=True)
def _seg_open(q, points, n_leaves_pow2, offsets, rows, score, item,
              pos, end, hscore, hitem, hslot, counters):
    """Start a stabbing query at ``q``: push the head of every non-empty list on q's path.

    points float64[m]: sorted distinct endpoints; offsets, rows: the node lists; score, item:
    columns in the total order; pos, end int64[levels]: per path slot (slot s = the node s
    levels above the leaf), the next unread row and the end of the list; h*: the path heap;
    counters int64[3]: nodes, holes, entries. Returns the heap size."""
    j = np.searchsorted(points, q)
    leaf = 2 * j
    if j < points.shape[0] and points[j] == q:
        leaf += 1
    v = n_leaves_pow2 + leaf
    size = 0
    found = False
    for s in range(pos.shape[0]):
        u = v >> s
        counters[0] += 1
        a = offsets[u]
        b = offsets[u + 1]
        pos[s] = a
        end[s] = b
        if a < b:
            found = True
            r = rows[a]
            counters[2] += 1
            size = heap_push(hscore, hitem, hslot, size, score[r], item[r], s)
        elif not found:
            counters[1] += 1      # nothing stored here nor anywhere below on the path
    return size


@numba.njit(cache=True)
def _seg_next(n, state, rows, score, item, pos, end, hscore, hitem, hslot, counters):
    """Up to ``n`` further stabbed rows in the total order.

    state int64[1]: the heap size (updated); other arguments as in ``_seg_open``.
    Returns (items int64[<= n], scores float64[<= n])."""
    size = state[0]
    left = 0
    for i in range(size):
        s = hslot[i]
        left += end[s] - pos[s]
    m = min(n, left)
    out_item = np.empty(m, np.int64)
    out_score = np.empty(m, np.float64)
    for k in range(m):
        out_score[k] = hscore[0]
        out_item[k] = hitem[0]
        s = hslot[0]
        p = pos[s] + 1
        pos[s] = p
        if p < end[s]:
            r = rows[p]
            counters[2] += 1
            hscore[0] = score[r]
            hitem[0] = item[r]
            heap_sift_down(hscore, hitem, hslot, size, 0)
        else:
            size = heap_pop(hscore, hitem, hslot, size)
    state[0] = size
    return out_item, out_score


@numba.njit(cache=True)
def _seg_read_many(queries, g, points, n_leaves_pow2, offsets, rows, score, item, levels, out_item, out_score,
                   out_off, counters):
    """``read_many`` (:mod:`.base`): for every query a fresh path heap, its first ``g[i]``
    stabbed rows written from ``out_off[i]`` on."""
    pos = np.empty(levels, np.int64)
    end = np.empty(levels, np.int64)
    hscore = np.empty(levels, np.float64)
    hitem = np.empty(levels, np.int64)
    hslot = np.empty(levels, np.int64)
    p = 0
    out_off[0] = 0
    for i in range(queries.shape[0]):
        size = _seg_open(queries[i], points, n_leaves_pow2, offsets, rows, score, item, pos, end, hscore, hitem,
                         hslot, counters)
        k = 0
        while k < g[i] and size > 0:
            out_score[p] = hscore[0]
            out_item[p] = hitem[0]
            p += 1
            k += 1
            s = hslot[0]
            a = pos[s] + 1
            pos[s] = a
            if a < end[s]:
                r = rows[a]
                counters[2] += 1
                hscore[0] = score[r]
                hitem[0] = item[r]
                heap_sift_down(hscore, hitem, hslot, size, 0)
            else:
                size = heap_pop(hscore, hitem, hslot, size)
        out_off[i + 1] = p
    return p


@numba.njit(cache=True)
def _rows_per_level(offsets, rows, n_rows, levels):
    """counts int64[n_rows, levels]: how many nodes of each level (0 = root) store each row."""
    counts = np.zeros((n_rows, levels), np.int64)
    for v in range(1, offsets.shape[0] - 1):
        lev = 0
        u = v
        while u > 1:
            u >>= 1
            lev += 1
        for k in range(offsets[v], offsets[v + 1]):
            counts[rows[k], lev] += 1
    return counts


# ----------------------------------------------------------------------------- Python layer

class SegmentTreeCursor(Cursor):
    """A resumable query on a :class:`SegmentTreeIndex` (state in a few arrays)."""

    def __init__(self, index: "SegmentTreeIndex", q: float):
        q = float(q)
        if q != q:
            raise ValueError("query point is NaN")
        levels = index.levels
        self._ix = index
        self.counters = np.zeros(3, np.int64)
        self._pos = np.empty(levels, np.int64)
        self._end = np.empty(levels, np.int64)
        self._hscore = np.empty(levels, np.float64)
        self._hitem = np.empty(levels, np.int64)
        self._hslot = np.empty(levels, np.int64)
        self._state = np.zeros(1, np.int64)
        self._state[0] = _seg_open(q, index.points, index.n_leaves_pow2, index.offsets,
                                   index.rows, index.score, index.item, self._pos, self._end,
                                   self._hscore, self._hitem, self._hslot, self.counters)

    def next(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        if n < 0:
            raise ValueError("n must be >= 0")
        ix = self._ix
        return _seg_next(int(n), self._state, ix.rows, ix.score, ix.item, self._pos, self._end,
                         self._hscore, self._hitem, self._hslot, self.counters)


class SegmentTreeIndex(IntervalIndex):
    """The scored segment tree: exact top-k stabbing in O(log n log log n + k log log n),
    O(n log n) space (each interval at <= 2 nodes per level). ``b`` is unused."""

    name = "segment-tree"
    dynamic = False

    def __init__(self, lo, hi, score, item, *, b: int = 50):
        lo, hi, score, item = check_intervals(lo, hi, score, item)
        n = len(lo)
        if n >= 2**31:
            raise ValueError("at most 2**31 - 1 intervals")
        order = np.lexsort((item, -score))
        self.score = score[order]
        self.item = item[order]
        lo = lo[order]
        hi = hi[order]
        # distinct endpoints and each endpoint's index among them (one sort, no searches)
        ends = np.concatenate((lo, hi))
        by_value = np.argsort(ends, kind="stable")
        sorted_ends = ends[by_value]
        is_new = np.empty(len(ends), np.bool_)
        is_new[:1] = True
        np.not_equal(sorted_ends[1:], sorted_ends[:-1], out=is_new[1:])
        self.points = sorted_ends[is_new]
        point_of = np.empty(len(ends), np.int64)
        point_of[by_value] = np.cumsum(is_new) - 1
        n_leaves = 2 * len(self.points) + 1
        self.n_leaves_pow2 = 1 << max(0, int(n_leaves - 1).bit_length())
        self.levels = self.n_leaves_pow2.bit_length()
        first_leaf = 2 * point_of[:n] + 1
        last_leaf = 2 * point_of[n:] + 1
        # an infinite end also takes the empty leaf beyond it (and the padding), so that the
        # cover stays maximal: [-inf, inf] is stored at the root alone
        first_leaf[lo == -np.inf] = 0
        last_leaf[hi == np.inf] = self.n_leaves_pow2 - 1
        self.offsets = _cover_counts(first_leaf, last_leaf, self.n_leaves_pow2)
        self.rows = _cover_fill(first_leaf, last_leaf, self.n_leaves_pow2, self.offsets)
        self._n = n

    def open(self, q: float) -> SegmentTreeCursor:
        return SegmentTreeCursor(self, q)

    def __len__(self) -> int:
        return self._n

    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.score, self.item, self.points, self.offsets, self.rows))

    def entries(self) -> int:
        """Canonical-cover entries (node list rows): about 2 per level per interval."""
        return len(self.rows)

    def read_many(self, queries, g):
        queries, g, off = read_args(queries, g, self._n)
        out_item = np.empty(off[-1], np.int64)
        out_score = np.empty(off[-1], np.float64)
        out_off = np.zeros(len(queries) + 1, np.int64)
        _seg_read_many(queries, g, self.points, self.n_leaves_pow2, self.offsets, self.rows, self.score, self.item,
                       self.levels, out_item, out_score, out_off, np.zeros(3, np.int64))
        return out_off, out_item[: out_off[-1]], out_score[: out_off[-1]]

    # -- structure, for the invariant tests

    def stored(self) -> tuple[np.ndarray, np.ndarray]:
        """Every stored row as (node int64, item int64), node lists in node order."""
        per_node = np.diff(self.offsets)
        nodes = np.repeat(np.arange(len(per_node), dtype=np.int64), per_node)
        return nodes, self.item[self.rows]

    def node_extents(self, nodes) -> tuple[np.ndarray, np.ndarray]:
        """Closure ``[lo, hi]`` on the real line of the union of each node's real leaves
        (NaN for a node entirely in the padding past the last leaf)."""
        nodes = np.asarray(nodes, np.int64)
        depth = np.zeros(len(nodes), np.int64)
        u = nodes.copy()
        while (u > 1).any():
            depth += u > 1
            u = np.maximum(u >> 1, 1)
        height = (self.levels - 1) - depth
        first = (nodes << height) - self.n_leaves_pow2
        last = first + (np.int64(1) << height) - 1
        n_leaves = 2 * len(self.points) + 1
        padding = first >= n_leaves
        last = np.minimum(last, n_leaves - 1)
        ext = np.concatenate(([-np.inf], self.points, [np.inf]))
        # point leaf 2j+1 -> p[j]; gap leaf 2j -> (p[j-1], p[j]) with p[-1] = -inf, p[m] = inf
        lo = np.where(first % 2 == 1, ext[np.minimum((first - 1) // 2 + 1, len(ext) - 1)],
                      ext[np.minimum(first // 2, len(ext) - 1)])
        hi = np.where(last % 2 == 1, ext[(last - 1) // 2 + 1], ext[last // 2 + 1])
        return np.where(padding, np.nan, lo), np.where(padding, np.nan, hi)

    def cover_levels(self) -> tuple[np.ndarray, np.ndarray]:
        """(items int64[n], counts int64[n, levels]): nodes of each level (0 = root) that
        store each interval."""
        return self.item, _rows_per_level(self.offsets, self.rows, self._n, self.levels)

"""The score-sorted interval tree (paper §2.2.2; notes ``ranked-pubsub-interval-indexes.md``
§2.2, "Score-sorted interval tree").

Node ``v`` has a median endpoint ``median[v]`` (an endpoint of one of its intervals, so every
node stores at least one); the intervals containing it are stored at ``v`` in ONE list in the
total order (score desc, item asc), with ``lo_min[v]`` / ``hi_max[v]`` over the list so a node
that cannot hold a stabbed interval is skipped at once; intervals entirely left (``hi <
median``) or right (``lo > median``) recurse into ``left[v]`` / ``right[v]`` (-1: none).
Nodes are numbered breadth first; the columns ``lo, hi, score, item`` are stored in node
order, node ``v``'s list being rows ``start[v]:start[v + 1]``.

A query ``q`` walks path(q) from the root (left if ``q < median``, right if ``q > median``,
stop at ``q == median``). Every interval at a node contains its median, so an entry is
stabbed iff ``lo <= q`` when ``q < median``, iff ``hi >= q`` when ``q > median``, always when
``q == median``; the next stabbed entry of a node is found by a linear scan that discards the
others, resumed where it stopped. A max-heap over path(q) (the segment tree's path heap)
holds each node's next stabbed entry.

Counters: ``nodes`` = path(q); ``holes`` = path nodes with ``q`` in ``[lo_min, hi_max]`` but no
stabbed entry (none can exist: all of a node's intervals contain its median, the paper's
Lemma 3.1); ``entries`` = entries scanned, stabbed or not.
"""
from __future__ import annotations

import numba
import numpy as np

from .base import Cursor, IntervalIndex, check_intervals, read_args
from .segment import heap_pop, heap_push, heap_sift_down

__all__ = ["IntervalTreeIndex", "IntervalTreeCursor"]

# how a path node tests its entries (see the module docstring)
_BELOW, _ABOVE, _AT = 0, 1, 2


@numba.njit(cache=True)
def _select(a, k):
    """The k-th smallest of a float64[:] (0-based), reordering ``a`` in place (quickselect
    with a three-way partition, so runs of equal endpoints cost one pass)."""
    left = 0
    right = a.shape[0] - 1
    while True:
        if left == right:
            return a[left]
        mid = (left + right) // 2
        x, y, z = a[left], a[mid], a[right]
        pivot = max(min(x, y), min(max(x, y), z))       # median of three
        lt = left
        gt = right
        i = left
        while i <= gt:
            v = a[i]
            if v < pivot:
                a[i] = a[lt]
                a[lt] = v
                lt += 1
                i += 1
            elif v > pivot:
                a[i] = a[gt]
                a[gt] = v
                gt -= 1
            else:
                i += 1
        if k < lt:
            right = lt - 1
        elif k > gt:
            left = gt + 1
        else:
            return pivot


@numba.njit(cache=True)
def _build(lo, hi):
    """The tree over intervals given in the total order.

    lo, hi float64[n]. Returns (perm int64[n]: input row of each node-ordered row, start
    int64[nodes + 1], median, lo_min, hi_max float64[nodes], left, right int64[nodes], depth:
    nodes on the longest root-to-leaf path)."""
    n = lo.shape[0]
    perm = np.empty(n, np.int64)
    start = np.zeros(n + 1, np.int64)
    median = np.empty(n, np.float64)
    lo_min = np.empty(n, np.float64)
    hi_max = np.empty(n, np.float64)
    left = np.full(n, -1, np.int64)
    right = np.full(n, -1, np.int64)
    # the rows of the nodes of one level, node after node, each in the total order
    cur = np.arange(n)
    nxt = np.empty(n, np.int64)
    seg_start = np.zeros(n + 1, np.int64)   # node (first + i) owns cur[seg_start[i]:seg_start[i + 1]]
    nxt_start = np.zeros(n + 1, np.int64)
    seg_start[1] = n
    level_nodes = 1 if n > 0 else 0
    first = 0            # id of the level's first node
    nodes = level_nodes  # ids handed out so far
    written = 0          # node-ordered rows written to perm
    depth = 0
    ends = np.empty(2 * n, np.float64)
    while level_nodes > 0:
        depth += 1
        w = 0            # rows written to nxt
        made = 0         # nodes of the next level
        for i in range(level_nodes):
            v = first + i
            a = seg_start[i]
            b = seg_start[i + 1]
            k = b - a
            for t in range(k):
                ends[2 * t] = lo[cur[a + t]]
                ends[2 * t + 1] = hi[cur[a + t]]
            x = _select(ends[: 2 * k], k)
            median[v] = x
            start[v] = written
            n_left = 0
            n_right = 0
            mn = np.inf
            mx = -np.inf
            for t in range(a, b):
                r = cur[t]
                if hi[r] < x:
                    n_left += 1
                elif lo[r] > x:
                    n_right += 1
                else:
                    perm[written] = r
                    written += 1
                    mn = min(mn, lo[r])
                    mx = max(mx, hi[r])
            lo_min[v] = mn
            hi_max[v] = mx
            wl = w
            wr = w + n_left
            for t in range(a, b):
                r = cur[t]
                if hi[r] < x:
                    nxt[wl] = r
                    wl += 1
                elif lo[r] > x:
                    nxt[wr] = r
                    wr += 1
            if n_left > 0:
                left[v] = nodes + made
                made += 1
                nxt_start[made] = w + n_left
            if n_right > 0:
                right[v] = nodes + made
                made += 1
                nxt_start[made] = w + n_left + n_right
            w += n_left + n_right
        first = nodes
        nodes += made
        level_nodes = made
        cur, nxt = nxt, cur
        seg_start, nxt_start = nxt_start, seg_start
    start[nodes] = written
    return (perm, start[: nodes + 1].copy(), median[:nodes].copy(), lo_min[:nodes].copy(),
            hi_max[:nodes].copy(), left[:nodes].copy(), right[:nodes].copy(), depth)


@numba.njit(cache=True, inline="always")
def _scan(q, mode, p, stop, lo, hi, counters):
    """First stabbed row in ``p .. stop - 1`` (``stop`` when none); counts the rows looked at."""
    if mode == _AT:
        if p < stop:
            counters[2] += 1
        return p
    while p < stop:
        counters[2] += 1
        if mode == _BELOW:
            if lo[p] <= q:
                return p
        elif hi[p] >= q:
            return p
        p += 1
    return stop


@numba.njit(cache=True)
def _it_open(q, start, median, lo_min, hi_max, left, right, lo, hi, score, item,
             mode, pos, end, hscore, hitem, hslot, counters):
    """Start a stabbing query at ``q``: walk path(q), push each node's first stabbed row.

    start..right: the tree; lo, hi, score, item: node-ordered columns; mode, pos, end
    int64[depth]: per path slot, the entry test, the row of the node's next stabbed entry and
    the end of its list; h*: the path heap; counters int64[3]: nodes, holes, entries.
    Returns the heap size."""
    size = 0
    v = 0 if median.shape[0] > 0 else -1
    s = 0
    while v >= 0:
        counters[0] += 1
        x = median[v]
        if q < x:
            md = _BELOW
            nxt = left[v]
        elif q > x:
            md = _ABOVE
            nxt = right[v]
        else:
            md = _AT
            nxt = -1
        if lo_min[v] <= q <= hi_max[v]:
            b = start[v + 1]
            p = _scan(q, md, start[v], b, lo, hi, counters)
            if p < b:
                mode[s] = md
                pos[s] = p
                end[s] = b
                size = heap_push(hscore, hitem, hslot, size, score[p], item[p], s)
                s += 1
            else:
                counters[1] += 1    # extent holds q but no entry does (cannot happen: Lemma 3.1)
        v = nxt
    return size


@numba.njit(cache=True)
def _it_next(n, q, state, lo, hi, score, item, mode, pos, end, hscore, hitem, hslot, counters):
    """Up to ``n`` further stabbed rows in the total order.

    state int64[1]: the heap size (updated); other arguments as in ``_it_open``.
    Returns (items int64[<= n], scores float64[<= n])."""
    size = state[0]
    bound = 0
    for i in range(size):
        s = hslot[i]
        bound += end[s] - pos[s]
    m = min(n, bound)
    out_item = np.empty(m, np.int64)
    out_score = np.empty(m, np.float64)
    k = 0
    while k < m and size > 0:
        out_score[k] = hscore[0]
        out_item[k] = hitem[0]
        k += 1
        s = hslot[0]
        p = _scan(q, mode[s], pos[s] + 1, end[s], lo, hi, counters)
        pos[s] = p
        if p < end[s]:
            hscore[0] = score[p]
            hitem[0] = item[p]
            heap_sift_down(hscore, hitem, hslot, size, 0)
        else:
            size = heap_pop(hscore, hitem, hslot, size)
    state[0] = size
    return out_item[:k], out_score[:k]


@numba.njit(cache=True)
def _it_read_many(queries, g, depth, start, median, lo_min, hi_max, left, right, lo, hi, score, item, out_item,
                  out_score, out_off, counters):
    """``read_many`` (:mod:`.base`): for every query a fresh path heap, its first ``g[i]``
    stabbed rows written from ``out_off[i]`` on."""
    mode = np.empty(depth, np.int64)
    pos = np.empty(depth, np.int64)
    end = np.empty(depth, np.int64)
    hscore = np.empty(depth, np.float64)
    hitem = np.empty(depth, np.int64)
    hslot = np.empty(depth, np.int64)
    p = 0
    out_off[0] = 0
    for i in range(queries.shape[0]):
        q = queries[i]
        size = _it_open(q, start, median, lo_min, hi_max, left, right, lo, hi, score, item, mode, pos, end,
                        hscore, hitem, hslot, counters)
        k = 0
        while k < g[i] and size > 0:
            out_score[p] = hscore[0]
            out_item[p] = hitem[0]
            p += 1
            k += 1
            s = hslot[0]
            a = _scan(q, mode[s], pos[s] + 1, end[s], lo, hi, counters)
            pos[s] = a
            if a < end[s]:
                hscore[0] = score[a]
                hitem[0] = item[a]
                heap_sift_down(hscore, hitem, hslot, size, 0)
            else:
                size = heap_pop(hscore, hitem, hslot, size)
        out_off[i + 1] = p
    return p


class IntervalTreeCursor(Cursor):
    """A resumable query on an :class:`IntervalTreeIndex` (state in a few arrays)."""

    def __init__(self, index: "IntervalTreeIndex", q: float):
        q = float(q)
        if q != q:
            raise ValueError("query point is NaN")
        depth = max(index.depth, 1)
        self._ix = index
        self._q = q
        self.counters = np.zeros(3, np.int64)
        self._mode = np.empty(depth, np.int64)
        self._pos = np.empty(depth, np.int64)
        self._end = np.empty(depth, np.int64)
        self._hscore = np.empty(depth, np.float64)
        self._hitem = np.empty(depth, np.int64)
        self._hslot = np.empty(depth, np.int64)
        self._state = np.zeros(1, np.int64)
        ix = index
        self._state[0] = _it_open(q, ix.start, ix.median, ix.lo_min, ix.hi_max, ix.left,
                                  ix.right, ix.lo, ix.hi, ix.score, ix.item, self._mode,
                                  self._pos, self._end, self._hscore, self._hitem, self._hslot,
                                  self.counters)

    def next(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        if n < 0:
            raise ValueError("n must be >= 0")
        ix = self._ix
        return _it_next(int(n), self._q, self._state, ix.lo, ix.hi, ix.score, ix.item,
                        self._mode, self._pos, self._end, self._hscore, self._hitem,
                        self._hslot, self.counters)


class IntervalTreeIndex(IntervalIndex):
    """The score-sorted interval tree: O(n) space, top-k in
    O(sum over path(q) of m_v(not q) + (log n + k) log log n). ``b`` is unused."""

    name = "interval-tree"
    dynamic = False

    def __init__(self, lo, hi, score, item, *, b: int = 50):
        lo, hi, score, item = check_intervals(lo, hi, score, item)
        order = np.lexsort((item, -score))
        lo, hi, score, item = lo[order], hi[order], score[order], item[order]
        (perm, self.start, self.median, self.lo_min, self.hi_max, self.left, self.right,
         self.depth) = _build(lo, hi)
        self.lo, self.hi, self.score, self.item = lo[perm], hi[perm], score[perm], item[perm]

    def open(self, q: float) -> IntervalTreeCursor:
        return IntervalTreeCursor(self, q)

    def __len__(self) -> int:
        return len(self.lo)

    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.lo, self.hi, self.score, self.item, self.start,
                                      self.median, self.lo_min, self.hi_max, self.left,
                                      self.right))

    def entries(self) -> int:
        """Interval rows (each stored once, in its node's list)."""
        return len(self.lo)

    def read_many(self, queries, g):
        queries, g, off = read_args(queries, g, len(self))
        out_item = np.empty(off[-1], np.int64)
        out_score = np.empty(off[-1], np.float64)
        out_off = np.zeros(len(queries) + 1, np.int64)
        _it_read_many(queries, g, max(self.depth, 1), self.start, self.median, self.lo_min, self.hi_max, self.left,
                      self.right, self.lo, self.hi, self.score, self.item, out_item, out_score, out_off,
                      np.zeros(3, np.int64))
        return out_off, out_item[: out_off[-1]], out_score[: out_off[-1]]

    def node_of_rows(self) -> np.ndarray:
        """The node of each stored row (int64[n], rows in node order like ``lo .. item``)."""
        return np.repeat(np.arange(len(self.median), dtype=np.int64), np.diff(self.start))

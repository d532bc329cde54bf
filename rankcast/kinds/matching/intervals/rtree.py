"""Scored R-tree and SOPT-R-tree (paper §2.2.3 and §3.2; notes §2.2, §2.4) as numba kernels.

Both are the same **packed R-tree** over an *arrangement* (an order of the rows): consecutive
blocks of ``b`` rows form the leaves, consecutive blocks of ``b`` nodes the next level up, up
to one root. Depth 0 is the root, depth ``H - 1`` the leaves. ``node_cnt[d]`` nodes sit at
depth ``d`` (``node_cnt[H] = n``, the rows); node ``j`` of depth ``d`` has the entries
``j*b .. min(j*b + b, node_cnt[d+1])`` of depth ``d + 1`` and its extent
``[ext_lo[node_off[d] + j], ext_hi[node_off[d] + j]]`` = [min lo, max hi] of its subtree.

A query is the paper's resumable left-first DFS: at an internal node scan the entries left to
right and descend into a child only when its extent contains ``q``; at a leaf report the
stabbed rows in order. Its state is an explicit stack (``stack[0]``: next entry to scan,
``stack[1]``: end of the node's entries, ``stack[2]``: something stabbed found below it on this
visit; one column per depth) and ``top`` (the depth of the current node, -1 when done).

* :class:`RTreeIndex` (the scored R-tree) packs the total order itself (score desc, item asc).
* :class:`SoptRTreeIndex` packs the order of Algorithm 1: a topological sort of the reduced
  constraint graph G that always takes, among the intervals with no unplaced predecessor, the
  one with the smallest left endpoint (ties: the total order). G comes from Algorithm 2 in
  O(n log n): a painter's structure over the compressed line.

Ties: G is defined with the *total order* in place of the score (an edge joins tied intervals
that intersect), so Lemma 3.2 holds with "score" = position in the total order and the DFS
yields the stabbed intervals exactly in the total order, for both trees.

Closed intervals, ±inf included as points: two intervals that touch at one endpoint intersect.
The line is compressed to the distinct endpoint values ``v_0 < ... < v_{m-1}`` and the
``2m + 1`` *pieces* ``(-inf, v_0), {v_0}, (v_0, v_1), {v_1}, ..., {v_{m-1}}, (v_{m-1}, inf)``
(piece ``2a + 1`` is the point ``v_a``); membership in every interval is constant on a piece.
"""
from __future__ import annotations

import numba
import numpy as np
from numba.cpython.unsafe.numbers import leading_zeros, trailing_zeros

from rankcast.common.arrays import prefetch

from .base import COUNTERS, Cursor, IntervalIndex, check_intervals, read_args, stab8

__all__ = [
    "PackedRTree", "RTreeCursor", "RTreeIndex", "SoptRTreeIndex",
    "total_order", "constraint_graph", "sopt_arrangement",
]

DEEP = 128                     # rows a query from which the cursor loads ahead
_U0 = np.uint64(0)
_U1 = np.uint64(1)
_ONE = np.uint64(1)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
_NONE = -1                       # owner of a block painted by no interval yet: the sentinel


# ----------------------------------------------------------------------------- packed R-tree

def _level_counts(n: int, b: int) -> np.ndarray:
    """node_cnt for n rows: nodes per depth, root first, then n (the rows)."""
    counts = [n]
    while n > 0 and (len(counts) == 1 or counts[-1] > 1):
        n = -(-n // b)
        counts.append(n)
    return np.array(counts[::-1], np.int64)


@numba.njit(cache=True)
def _pack_extents(lo, hi, b, node_cnt):
    """Extents of every node of the packed tree over rows already in arrangement order.

    lo, hi: (n,) float64 in packed order; node_cnt: (H + 1,) int64 (see the module docstring).
    Returns ext_lo, ext_hi ((nodes,) float64) and node_off ((H + 1,) int64, start of depth d).
    """
    H = node_cnt.shape[0] - 1
    node_off = np.zeros(H + 1, np.int64)
    for d in range(H):
        node_off[d + 1] = node_off[d] + node_cnt[d]
    total = node_off[H]
    ext_lo = np.empty(total, np.float64)
    ext_hi = np.empty(total, np.float64)
    for d in range(H - 1, -1, -1):
        n_below = node_cnt[d + 1]
        for j in range(node_cnt[d]):
            s = j * b
            e = min(s + b, n_below)
            if d == H - 1:
                mlo = lo[s]
                mhi = hi[s]
                for r in range(s + 1, e):
                    mlo = min(mlo, lo[r])
                    mhi = max(mhi, hi[r])
            else:
                c = node_off[d + 1]
                mlo = ext_lo[c + s]
                mhi = ext_hi[c + s]
                for r in range(s + 1, e):
                    mlo = min(mlo, ext_lo[c + r])
                    mhi = max(mhi, ext_hi[c + r])
            ext_lo[node_off[d] + j] = mlo
            ext_hi[node_off[d] + j] = mhi
    return ext_lo, ext_hi, node_off


@numba.njit(cache=True, inline="always")
def _dfs(deep, queries, g, fresh, b, node_cnt, node_off, ext_lo, ext_hi, lo, hi, score, item,
         stack, top, counters, level_nodes, out_item, out_score, out_off):
    """Every cursor step in one kernel (a compiled call counts references to every array it is
    passed, which costs more than most steps). For each query ``q = queries[x]``: when ``fresh``,
    start a DFS for q (push the root when its extent contains q, else mark the cursor done);
    then resume the left-first DFS until ``g[x]`` more stabbed rows are reported or none is
    left, writing their items and scores to out_item/out_score from ``out_off[x]`` on
    (``out_off[x + 1]`` set to where they end). Returns the rows written.

    A leaf is read as bit masks of its stabbed rows (:func:`.base.stab8`: 8 rows a vector
    compare, no branch per row), whose set bits are reported in order until enough are; the rows are
    reported as positions first and given their items and scores at the end of the query, in
    one pass whose loads do not wait on each other. When ``deep`` (a constant of the two
    kernels below), entering a leaf also finds the next leaf holding q and hints its rows into
    the cache, and every reported row's item and score are hinted when it is found: on a long
    read the leaves that hold q lie apart and the rows' lines would otherwise be loaded one
    miss after another.

    Tree arrays as built by :func:`_pack_extents` (lo, hi, score, item: (n,) in packed order).
    Cursor state, updated in place: stack (3, H) int64 (next entry, end of entries, found flag
    per depth); top (1,) int64; counters (3,) int64 (nodes, holes, entries); level_nodes (H,)
    int64 nodes entered per depth.
    """
    H = node_cnt.shape[0] - 1
    leaf = H - 1
    n_rows = node_cnt[H]
    p = 0
    out_off[0] = 0
    for x in range(queries.shape[0]):
        q = queries[x]
        if fresh:
            if H == 0 or not (ext_lo[0] <= q and q <= ext_hi[0]):
                top[0] = -1
            else:
                top[0] = 0
                stack[0, 0] = 0
                stack[1, 0] = min(b, node_cnt[1])
                stack[2, 0] = 0
                counters[0] += 1
                level_nodes[0] += 1
        k = g[x]
        t = top[0]
        got = p
        end = p + k
        while t >= 0 and got < end:
            e = stack[0, t]
            stop = stack[1, t]
            if t == leaf:
                # the stabbed rows of the rest of the leaf as bit masks of up to 64 rows,
                # 8 rows a vector compare, then their positions in order until enough
                nxt = stop
                r = e
                while r < stop:
                    w = min(64, stop - r)
                    m = _U0
                    for c in range(0, w, 8):
                        if r + c + 8 <= n_rows:
                            m |= stab8(lo, hi, r + c, q) << np.uint64(c)
                        else:
                            for y in range(r + c, n_rows):
                                if lo[y] <= q and q <= hi[y]:
                                    m |= _U1 << np.uint64(y - r)
                    if w < 64:
                        m &= (_U1 << np.uint64(w)) - _U1
                    while m != _U0 and got < end:
                        y = r + np.int64(trailing_zeros(m))
                        out_item[got] = y
                        if deep:
                            prefetch(item, y)
                            prefetch(score, y)
                        got += 1
                        stack[2, t] = 1
                        m &= m - _U1
                        nxt = y + 1
                    if got == end:
                        break
                    nxt = stop
                    r += w
                counters[2] += nxt - e
                e = nxt
                stack[0, t] = e
                if e < stop:
                    break
            else:
                base = node_off[t + 1]
                while e < stop and not (ext_lo[base + e] <= q and q <= ext_hi[base + e]):
                    e += 1
                if e < stop:
                    nx = e + 1
                    if t + 1 == leaf and deep:
                        # entering a leaf on a deep read: the next leaf holding q starts loading
                        while nx < stop and not (ext_lo[base + nx] <= q and q <= ext_hi[base + nx]):
                            nx += 1
                        if nx < stop:
                            for y in range(nx * b, min(nx * b + b, n_rows), 8):
                                prefetch(lo, y)
                                prefetch(hi, y)
                    stack[0, t] = nx
                    t += 1
                    stack[0, t] = e * b
                    stack[1, t] = min(e * b + b, node_cnt[t + 1])
                    stack[2, t] = 0
                    counters[0] += 1
                    level_nodes[t] += 1
                    continue
                stack[0, t] = e
            # every entry of the node at depth t is done: leave it
            if stack[2, t] == 0:
                counters[1] += 1
            elif t > 0:
                stack[2, t - 1] = 1
            t -= 1
        top[0] = t
        for i in range(p, got):          # the positions found, then their items and scores
            r = out_item[i]
            out_item[i] = item[r]
            out_score[i] = score[r]
        p = got
        out_off[x + 1] = p
    return p


@numba.njit(cache=True)
def _rtree_cursors(queries, g, fresh, b, node_cnt, node_off, ext_lo, ext_hi, lo, hi, score, item,
                   stack, top, counters, level_nodes, out_item, out_score, out_off):
    """:func:`_dfs` for reads of up to ``DEEP`` rows a query."""
    return _dfs(False, queries, g, fresh, b, node_cnt, node_off, ext_lo, ext_hi, lo, hi, score, item,
                stack, top, counters, level_nodes, out_item, out_score, out_off)


@numba.njit(cache=True)
def _rtree_cursors_deep(queries, g, fresh, b, node_cnt, node_off, ext_lo, ext_hi, lo, hi, score, item,
                        stack, top, counters, level_nodes, out_item, out_score, out_off):
    """:func:`_dfs` for deeper reads: the next leaf and the rows' items and scores are loaded
    ahead (cache prefetch hints)."""
    return _dfs(True, queries, g, fresh, b, node_cnt, node_off, ext_lo, ext_hi, lo, hi, score, item,
                stack, top, counters, level_nodes, out_item, out_score, out_off)


def _kernel(most: int):
    """The cursor kernel for reads of at most ``most`` rows a query."""
    return _rtree_cursors_deep if most > DEEP else _rtree_cursors


_NO_ROWS = np.zeros(1, np.int64)           # a fresh cursor reads nothing yet
_NO_OUT_I = np.empty(0, np.int64)
_NO_OUT_F = np.empty(0, np.float64)


class PackedRTree:
    """The packed R-tree over ``lo, hi, score, item`` given in arrangement order (see the
    module docstring for the layout). ``b >= 2`` entries per node."""

    def __init__(self, lo: np.ndarray, hi: np.ndarray, score: np.ndarray, item: np.ndarray, b: int):
        if int(b) < 2:
            raise ValueError("an R-tree needs b >= 2")
        self.b = int(b)
        self.lo, self.hi = np.ascontiguousarray(lo, np.float64), np.ascontiguousarray(hi, np.float64)
        self.score, self.item = np.ascontiguousarray(score, np.float64), np.ascontiguousarray(item, np.int64)
        self.node_cnt = _level_counts(len(lo), self.b)
        self.ext_lo, self.ext_hi, self.node_off = _pack_extents(self.lo, self.hi, self.b, self.node_cnt)

    @property
    def height(self) -> int:
        """Number of node levels (0 for an empty tree)."""
        return len(self.node_cnt) - 1

    def extents(self, depth: int) -> tuple[np.ndarray, np.ndarray]:
        """(ext_lo, ext_hi) of the nodes at ``depth`` (0 = root, height - 1 = leaves)."""
        s, e = self.node_off[depth], self.node_off[depth] + self.node_cnt[depth]
        return self.ext_lo[s:e], self.ext_hi[s:e]

    def open(self, q: float) -> "RTreeCursor":
        return RTreeCursor(self, q)

    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.lo, self.hi, self.score, self.item, self.node_cnt,
                                      self.ext_lo, self.ext_hi, self.node_off))

    def _arrays(self) -> tuple:
        """The tree's arguments of :func:`_rtree_cursors`, in order."""
        return (self.b, self.node_cnt, self.node_off, self.ext_lo, self.ext_hi, self.lo, self.hi, self.score,
                self.item)

    def entries(self) -> int:
        """Rows plus node entries (one per node below the root: its extent in its parent)."""
        return len(self.lo) + max(0, len(self.ext_lo) - 1)

    def read_many(self, queries, g):
        queries, g, off = read_args(queries, g, len(self))
        out_item = np.empty(off[-1], np.int64)
        out_score = np.empty(off[-1], np.float64)
        out_off = np.zeros(len(queries) + 1, np.int64)
        if self.height:
            H = self.height
            _kernel(int(g.max(initial=0)))(queries, g, True, *self._arrays(), np.zeros((3, H), np.int64),
                                           np.full(1, -1, np.int64), np.zeros(len(COUNTERS), np.int64),
                                           np.zeros(H, np.int64), out_item, out_score, out_off)
        return out_off, out_item[: out_off[-1]], out_score[: out_off[-1]]

    def __len__(self) -> int:
        return len(self.lo)


class RTreeCursor(Cursor):
    """A resumable left-first DFS over a :class:`PackedRTree`. ``counters`` as in base (nodes
    entered, holes, rows tested at leaves; internal entries scanned are not counted: each node
    entered costs at most b of them); ``level_nodes[d]``: nodes entered at depth d (Theorem 3.2
    bounds it by 2k for a SOPT-R-tree top-k)."""

    def __init__(self, tree: PackedRTree, q: float):
        q = float(q)
        if q != q:
            raise ValueError("query point is NaN")
        self.tree = tree
        self.q = q
        H = tree.height
        self.stack = np.zeros((3, H), np.int64)
        self.top = np.full(1, -1, np.int64)
        self.counters = np.zeros(len(COUNTERS), np.int64)
        self.level_nodes = np.zeros(H, np.int64)
        self.left = len(tree)          # rows not yet reported: bounds any batch
        self._q = np.array([q], np.float64)
        self._state = (self.stack, self.top, self.counters, self.level_nodes)
        _rtree_cursors(self._q, _NO_ROWS, True, *tree._arrays(), *self._state, _NO_OUT_I, _NO_OUT_F,
                       np.zeros(2, np.int64))

    def next(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        n = min(int(n), self.left)
        if n <= 0 or self.top[0] < 0:
            return np.empty(0, np.int64), np.empty(0, np.float64)
        out_item = np.empty(n, np.int64)
        out_score = np.empty(n, np.float64)
        got = _kernel(n)(self._q, np.array([n], np.int64), False, *self.tree._arrays(), *self._state, out_item,
                             out_score, np.zeros(2, np.int64))
        self.left -= got
        return out_item[:got], out_score[:got]


# ----------------------------------------------------------------------------- orders

def total_order(score: np.ndarray, item: np.ndarray) -> np.ndarray:
    """Rows sorted by the total order: score descending, then item ascending."""
    return np.lexsort((item, -score)).astype(np.int64)


def _check_items_unique(item: np.ndarray) -> None:
    if len(item) > 1:
        s = np.sort(item)
        if (s[1:] == s[:-1]).any():
            raise ValueError("items must be unique within an index")


# ----------------------------------------------------------------------------- painter's structure
# A set of piece positions (the starts of the visible blocks) as a 64-ary bit tree: level 0
# has one bit per position, a bit of level l + 1 says whether its word of level l is non-zero.

@numba.njit(cache=True)
def _bits_new(size):
    """An empty bit tree over positions 0 .. size - 1 (size >= 1).

    Returns words ((total,) uint64), word_off ((L + 1,) int64: start of level l in words).
    """
    L = 1
    w = (size + 63) >> 6
    while w > 1:
        w = (w + 63) >> 6
        L += 1
    word_off = np.zeros(L + 1, np.int64)
    w = (size + 63) >> 6
    for lev in range(L):
        word_off[lev + 1] = word_off[lev] + w
        w = (w + 63) >> 6
    return np.zeros(word_off[L], np.uint64), word_off


@numba.njit(cache=True)
def _bits_set(words, word_off, x):
    """Add position x."""
    L = word_off.shape[0] - 1
    for lev in range(L):
        i = word_off[lev] + (x >> 6)
        was = words[i]
        words[i] = was | (_ONE << np.uint64(x & 63))
        if was != 0:
            return
        x >>= 6


@numba.njit(cache=True)
def _bits_clear(words, word_off, x):
    """Remove position x."""
    L = word_off.shape[0] - 1
    for lev in range(L):
        i = word_off[lev] + (x >> 6)
        words[i] = words[i] & ~(_ONE << np.uint64(x & 63))
        if words[i] != 0:
            return
        x >>= 6


@numba.njit(cache=True)
def _bits_has(words, x):
    """Whether position x is in the set."""
    return (words[x >> 6] >> np.uint64(x & 63)) & _ONE != 0


@numba.njit(cache=True)
def _bits_next(words, word_off, x):
    """Smallest position >= x in the set, -1 if none."""
    L = word_off.shape[0] - 1
    lev = 0
    while lev < L:
        w = x >> 6
        if w >= word_off[lev + 1] - word_off[lev]:
            return -1
        m = words[word_off[lev] + w] & (_ALL << np.uint64(x & 63))
        if m != 0:
            x = (w << 6) + np.int64(trailing_zeros(m))
            while lev > 0:
                lev -= 1
                x = (x << 6) + np.int64(trailing_zeros(words[word_off[lev] + x]))
            return x
        x = w + 1
        lev += 1
    return -1


@numba.njit(cache=True)
def _bits_prev(words, word_off, x):
    """Largest position <= x in the set, -1 if none."""
    L = word_off.shape[0] - 1
    lev = 0
    while lev < L:
        if x < 0:
            return -1
        w = x >> 6
        m = words[word_off[lev] + w] & (_ALL >> np.uint64(63 - (x & 63)))
        if m != 0:
            x = (w << 6) + 63 - np.int64(leading_zeros(m))
            while lev > 0:
                lev -= 1
                x = (x << 6) + 63 - np.int64(leading_zeros(words[word_off[lev] + x]))
            return x
        x = w - 1
        lev += 1
    return -1


# ----------------------------------------------------------------------------- Algorithm 2

@numba.njit(cache=True)
def _constraint_edges(lo_code, hi_code, m):
    """Algorithm 2: the edges of the reduced constraint graph G.

    lo_code, hi_code: (n,) int64, indices of each interval's endpoints among the m distinct
    endpoint values, intervals given in the total order (rank 0 first). The line is painted
    interval by interval over its 2m + 1 pieces; before interval j paints its pieces
    [2 lo + 1, 2 hi + 1], the distinct owners (last painter) of those pieces are exactly its
    in-neighbours (Lemma 3.3); the sentinel owner (never painted) gives no edge.
    Returns src, dst ((E,) int64 ranks, src < dst, grouped by dst ascending).
    """
    n = lo_code.shape[0]
    n_pieces = 2 * m + 1
    words, word_off = _bits_new(n_pieces)
    owner = np.full(n_pieces, _NONE, np.int64)     # owner of the block starting at a piece
    seen = np.full(n, -1, np.int64)                # seen[o] = j: edge o -> j already added
    src = np.empty(3 * n + 1, np.int64)            # block visits <= n + starts set <= 3n + 1
    dst = np.empty(3 * n + 1, np.int64)
    n_edges = 0
    _bits_set(words, word_off, 0)
    for j in range(n):
        s = 2 * lo_code[j] + 1
        e = 2 * hi_code[j] + 1
        c = _bits_prev(words, word_off, s)
        last = _NONE
        while True:
            o = owner[c]
            if o != _NONE and seen[o] != j:
                seen[o] = j
                src[n_edges] = o
                dst[n_edges] = j
                n_edges += 1
            last = o
            nx = _bits_next(words, word_off, c + 1)
            if nx < 0 or nx > e:
                break
            _bits_clear(words, word_off, nx)       # a block starting inside (s, e] is covered
            c = nx
        if e + 1 < n_pieces and not _bits_has(words, e + 1):
            _bits_set(words, word_off, e + 1)      # the right remnant keeps the old owner
            owner[e + 1] = last
        _bits_set(words, word_off, s)
        owner[s] = j
    return src[:n_edges].copy(), dst[:n_edges].copy()


@numba.njit(cache=True)
def _csr(src, dst, n):
    """Out-edge CSR of a graph on n nodes: indptr ((n + 1,) int64), indices ((E,) int64,
    each node's out-neighbours in the order the edges were given)."""
    indptr = np.zeros(n + 1, np.int64)
    for i in range(src.shape[0]):
        indptr[src[i] + 1] += 1
    for v in range(n):
        indptr[v + 1] += indptr[v]
    fill = indptr[:n].copy()
    indices = np.empty(src.shape[0], np.int64)
    for i in range(src.shape[0]):
        indices[fill[src[i]]] = dst[i]
        fill[src[i]] += 1
    return indptr, indices


# ----------------------------------------------------------------------------- Algorithm 1

@numba.njit(cache=True)
def _heap_push(heap_key, heap_id, size, key, v):
    """Push v with key onto the min-heap (heap_key, heap_id)[:size] ordered by (key, id)."""
    i = size
    while i > 0:
        p = (i - 1) >> 1
        if heap_key[p] < key or (heap_key[p] == key and heap_id[p] < v):
            break
        heap_key[i] = heap_key[p]
        heap_id[i] = heap_id[p]
        i = p
    heap_key[i] = key
    heap_id[i] = v
    return size + 1


@numba.njit(cache=True)
def _heap_pop(heap_key, heap_id, size):
    """Remove the smallest (key, id) of the heap; returns (id, new size)."""
    top = heap_id[0]
    size -= 1
    key = heap_key[size]
    v = heap_id[size]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and (heap_key[c + 1] < heap_key[c]
                             or (heap_key[c + 1] == heap_key[c] and heap_id[c + 1] < heap_id[c])):
            c += 1
        if key < heap_key[c] or (key == heap_key[c] and v < heap_id[c]):
            break
        heap_key[i] = heap_key[c]
        heap_id[i] = heap_id[c]
        i = c
    heap_key[i] = key
    heap_id[i] = v
    return top, size


@numba.njit(cache=True)
def _arrange(lo, indptr, indices):
    """Algorithm 1: topological order of the DAG (indptr, indices) over nodes 0..n-1 (ranks in
    the total order) that always takes the ready node with the smallest lo (ties: smaller rank).

    lo: (n,) float64 left endpoints by rank. Returns (n,) int64 ranks in arrangement order.
    """
    n = lo.shape[0]
    indeg = np.zeros(n, np.int64)
    for i in range(indices.shape[0]):
        indeg[indices[i]] += 1
    heap_key = np.empty(n, np.float64)
    heap_id = np.empty(n, np.int64)
    size = 0
    for v in range(n):
        if indeg[v] == 0:
            size = _heap_push(heap_key, heap_id, size, lo[v], v)
    out = np.empty(n, np.int64)
    k = 0
    while size > 0:
        v, size = _heap_pop(heap_key, heap_id, size)
        out[k] = v
        k += 1
        for i in range(indptr[v], indptr[v + 1]):
            w = indices[i]
            indeg[w] -= 1
            if indeg[w] == 0:
                size = _heap_push(heap_key, heap_id, size, lo[w], w)
    return out


def _ranked_edges(lo: np.ndarray, hi: np.ndarray, order: np.ndarray):
    """Algorithm 2 over rows taken in ``order``: edges (src, dst) as ranks."""
    n = len(order)
    if n == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    ends = np.concatenate((lo, hi))
    by_value = np.argsort(ends, kind="stable")
    sorted_ends = ends[by_value]
    distinct = np.empty(2 * n, np.int64)
    distinct[0] = 0
    distinct[1:] = sorted_ends[1:] != sorted_ends[:-1]
    code = np.empty(2 * n, np.int64)
    code[by_value] = np.cumsum(distinct)      # index of each endpoint among the distinct values
    return _constraint_edges(code[:n][order], code[n:][order], int(code[by_value[-1]]) + 1)


def constraint_graph(lo, hi, score, item) -> tuple[np.ndarray, np.ndarray]:
    """The reduced constraint graph G (Algorithm 2) over the rows of the input, as CSR: the
    out-neighbours of row r are ``indices[indptr[r]:indptr[r + 1]]`` (row numbers)."""
    lo, hi, score, item = check_intervals(lo, hi, score, item)
    order = total_order(score, item)
    src, dst = _ranked_edges(lo, hi, order)
    return _csr(order[src], order[dst], len(order))


def _sopt(lo, hi, score, item) -> tuple[np.ndarray, int]:
    """The SOPT arrangement (rows) and |E| of the graph it respects."""
    order = total_order(score, item)
    indptr, indices = _csr(*_ranked_edges(lo, hi, order), len(order))
    return order[_arrange(lo[order], indptr, indices)], len(indices)


def sopt_arrangement(lo, hi, score, item) -> np.ndarray:
    """Rows in the SOPT order: Algorithm 1 over the graph of Algorithm 2."""
    return _sopt(*check_intervals(lo, hi, score, item))[0]


# ----------------------------------------------------------------------------- indexes

class _PackedIndex(IntervalIndex):
    """A static scored interval index: a packed R-tree over the arrangement of a subclass."""

    def __init__(self, lo, hi, score, item, *, b: int = 50):
        lo, hi, score, item = check_intervals(lo, hi, score, item)
        _check_items_unique(item)
        if int(b) < 2:
            raise ValueError("an R-tree needs b >= 2")
        self.arrangement = self._arrangement(lo, hi, score, item)
        a = self.arrangement
        self.tree = PackedRTree(lo[a], hi[a], score[a], item[a], int(b))

    def _arrangement(self, lo, hi, score, item) -> np.ndarray:
        raise NotImplementedError

    @property
    def b(self) -> int:
        return self.tree.b

    def open(self, q: float) -> RTreeCursor:
        return RTreeCursor(self.tree, q)

    def __len__(self) -> int:
        return len(self.tree)

    def nbytes(self) -> int:
        return self.tree.nbytes() + self.arrangement.nbytes

    def entries(self) -> int:
        return self.tree.entries()

    def read_many(self, queries, g):
        return self.tree.read_many(queries, g)

    def extents(self, depth: int) -> tuple[np.ndarray, np.ndarray]:
        """Node extents at ``depth`` (0 = root); ``self.tree.height`` levels."""
        return self.tree.extents(depth)

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """lo, hi, score, item in the input's row order (rebuilt from the packed arrays)."""
        packed = (self.tree.lo, self.tree.hi, self.tree.score, self.tree.item)
        out = tuple(np.empty_like(c) for c in packed)
        for o, c in zip(out, packed):
            o[self.arrangement] = c
        return out


class RTreeIndex(_PackedIndex):
    """The scored R-tree (§2.2.3): packed in the total order (score desc, item asc)."""

    name = "r-tree"

    def _arrangement(self, lo, hi, score, item):
        return total_order(score, item)


class SoptRTreeIndex(_PackedIndex):
    """The SOPT-R-tree (§3.2): packed in the order of Algorithm 1 over the graph of Algorithm 2."""

    name = "sopt-r-tree"

    def _arrangement(self, lo, hi, score, item):
        arrangement, self.n_edges = _sopt(lo, hi, score, item)     # |E| of G (<= 3n)
        return arrangement

    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        """The reduced constraint graph G over the input's rows, CSR (indptr, indices);
        recomputed (the index keeps only the packed tree)."""
        return constraint_graph(*self.columns())

"""The Z-order (Morton) curve index over the reduced points (paper IV.D).

Each coordinate is quantised to ``B`` bits by a monotone map (the number of per-dimension
boundaries below it; boundaries at quantiles of the points when the index is built, so that
any value range, the ``ABSENT`` coordinate included, spreads over the cells), ``B = min(16,
62 // D)``. A point's key interleaves the bits (bit ``l D + d`` is bit ``l`` of dimension
``d``) under a leading 1 bit, the paper's notation for cells of any resolution: the cell of
key prefix ``c`` (leading bit included) holds the keys ``[c << t, ((c + 1) << t) - 1]``.
Cells are not separated to single points (the paper "relaxes" that too): points of one cell
are told apart by comparisons.

The keys are kept in a dynamic sorted order, ordered by (key, slot): a list of blocks of at
most ``CAP`` entries in key order (sortedcontainers' layout, here instead of the paper's AVL
tree: the same O(log n) search, memory moves bounded by a block).

A query, the orthant ``[q, max]`` of quantised space, is walked from its high corner down
(where dominating points are likeliest, as the k-d tree's rightmost-leaf start): the last key
at or below the cursor is found by binary search (a node visited); if its cell lies in the
orthant, the maximal cell holding it inside the orthant is taken (clearing the key's low bits
while the cell's lower corner stays in the orthant) and that segment of the curve is read,
points compared only when the cell touches the orthant's lower faces; otherwise the cursor
jumps to LITMAX (Tropf and Herzog), the largest key below it inside the orthant. So the
orthant is cut into maximal cells, visited largest keys first, and the walk stops at k.
"""
from __future__ import annotations

import numba
import numpy as np

from .semantic import dominates, verify

__all__ = ["ZOrder", "insert", "delete", "query", "bits_for", "CAP"]

BLEN, ORDER, KEY, FREE, META = 0, 1, 2, 3, 11
M_NORD, M_HW, M_NFREE, M_BITS, M_SIZE = range(5)
CAP = 64


def bits_for(dims: int) -> int:
    return min(16, 62 // dims)


@numba.njit(cache=True, inline="always")
def _quant(qb, d, x):
    """The cell coordinate of ``x`` on dimension ``d``: boundaries of ``qb[d]`` below it."""
    lo, hi = 0, qb.shape[1]
    while lo < hi:
        m = (lo + hi) >> 1
        if qb[d, m] < x:
            lo = m + 1
        else:
            hi = m
    return lo


@numba.njit(cache=True)
def _key(qb, pts, s, bits):
    D = pts.shape[1]
    key = np.int64(1) << (D * bits)
    for d in range(D):
        c = _quant(qb, d, pts[s, d])
        for lv in range(bits):
            if (c >> lv) & 1:
                key |= np.int64(1) << (lv * D + d)
    return key


@numba.njit(cache=True, inline="always")
def _less(k1, s1, k2, s2):
    return k1 < k2 or (k1 == k2 and s1 < s2)


@numba.njit(cache=True)
def _find_block(I, X, key, s):
    """The order position of the block that holds (or would take) (key, s)."""
    order, bk, bs = I[ORDER], X[0], X[1]
    lo, hi = 0, I[META][M_NORD]
    while lo < hi:                          # first block whose first entry is after (key, s)
        m = (lo + hi) >> 1
        b = order[m]
        if _less(key, s, bk[b, 0], bs[b, 0]):
            hi = m
        else:
            lo = m + 1
    return max(lo - 1, 0)


@numba.njit(cache=True)
def _alloc_block(I):
    meta = I[META]
    if meta[M_NFREE] > 0:
        meta[M_NFREE] -= 1
        return I[FREE][meta[M_NFREE]]
    b = meta[M_HW]
    meta[M_HW] += 1
    return b


@numba.njit(cache=True)
def insert(I, X, pts, s):
    """Insert slot ``s`` under the key of ``pts[s]``."""
    meta, order, blen, bk, bs = I[META], I[ORDER], I[BLEN], X[0], X[1]
    key = _key(X[2], pts, s, meta[M_BITS])
    I[KEY][s] = key
    meta[M_SIZE] += 1
    if meta[M_NORD] == 0:
        b = _alloc_block(I)
        order[0] = b
        meta[M_NORD] = 1
        blen[b] = 0
    i = _find_block(I, X, key, s)
    b = order[i]
    n = blen[b]
    j = n
    while j > 0 and _less(key, s, bk[b, j - 1], bs[b, j - 1]):
        bk[b, j] = bk[b, j - 1]
        bs[b, j] = bs[b, j - 1]
        j -= 1
    bk[b, j] = key
    bs[b, j] = s
    blen[b] = n + 1
    if n + 1 == CAP:                        # full: the upper half moves to a new block
        nb = _alloc_block(I)
        h = CAP // 2
        bk[nb, :CAP - h] = bk[b, h:]
        bs[nb, :CAP - h] = bs[b, h:]
        blen[nb] = CAP - h
        blen[b] = h
        for t in range(meta[M_NORD], i + 1, -1):
            order[t] = order[t - 1]
        order[i + 1] = nb
        meta[M_NORD] += 1


@numba.njit(cache=True)
def delete(I, X, pts, s):
    """Delete slot ``s``; an emptied block leaves the order."""
    meta, order, blen, bk, bs = I[META], I[ORDER], I[BLEN], X[0], X[1]
    key = I[KEY][s]
    i = _find_block(I, X, key, s)
    b = order[i]
    n = blen[b]
    j = 0
    while bs[b, j] != s or bk[b, j] != key:
        j += 1
    for t in range(j, n - 1):
        bk[b, t] = bk[b, t + 1]
        bs[b, t] = bs[b, t + 1]
    blen[b] = n - 1
    meta[M_SIZE] -= 1
    if n == 1:
        for t in range(i, meta[M_NORD] - 1):
            order[t] = order[t + 1]
        meta[M_NORD] -= 1
        I[FREE][meta[M_NFREE]] = b
        meta[M_NFREE] += 1


@numba.njit(cache=True)
def _litmax(z, mn, mx, D, nbits):
    """The largest key below ``z`` (outside the box) inside the box of corner keys ``mn``,
    ``mx`` (Morton keys without the leading bit), or -1 (Tropf and Herzog)."""
    best = np.int64(-1)
    for i in range(nbits - 1, -1, -1):
        d = i % D
        dm = np.int64(0)
        for lv in range(i // D + 1):
            dm |= np.int64(1) << (lv * D + d)
        le = dm & ((np.int64(2) << i) - 1)          # bits of d at i and below
        lt = dm & ((np.int64(1) << i) - 1)          # bits of d below i
        bz, bmin, bmax = (z >> i) & 1, (mn >> i) & 1, (mx >> i) & 1
        if bz == 0:
            if bmin == 0 and bmax == 1:
                mx = (mx & ~le) | lt
            elif bmin == 1:
                return best
        else:
            if bmin == 0 and bmax == 0:
                return mx
            if bmin == 0 and bmax == 1:
                best = (mx & ~le) | lt
                mn = (mn & ~le) | (np.int64(1) << i)
    return best


@numba.njit(cache=True)
def query(I, X, pts, S, vals, plain, q, k, out, cnt):
    """Up to ``k`` covers of ``q`` (not ``q``) into ``out``; ``cnt[0]`` += cells located,
    ``cnt[1]`` += point comparisons. Returns how many."""
    meta, order, blen, bk, bs, qb = I[META], I[ORDER], I[BLEN], X[0], X[1], X[2]
    if meta[M_NORD] == 0 or k <= 0:
        return 0
    D = pts.shape[1]
    bits = meta[M_BITS]
    nbits = D * bits
    lead = np.int64(1) << nbits
    qx = np.empty(D, np.int64)
    zmin = np.int64(0)
    for d in range(D):
        qx[d] = _quant(qb, d, pts[q, d])
        for lv in range(bits):
            if (qx[d] >> lv) & 1:
                zmin |= np.int64(1) << (lv * D + d)
    zmax = lead - 1
    cur = zmax
    c = np.empty(D, np.int64)
    found = 0
    while cur >= zmin:
        # the last entry with key <= cur: block by binary search, then inside it
        lo, hi = 0, meta[M_NORD]
        target = lead | cur
        while lo < hi:
            m = (lo + hi) >> 1
            if bk[order[m], 0] <= target:
                lo = m + 1
            else:
                hi = m
        i = lo - 1
        if i < 0:
            break
        b = order[i]
        j = blen[b] - 1
        while bk[b, j] > target:
            j -= 1
        cnt[0] += 1
        z = bk[b, j] ^ lead
        if z < zmin:
            break
        inside = True
        for d in range(D):
            c[d] = 0
        for t in range(nbits):
            if (z >> t) & 1:
                c[t % D] |= np.int64(1) << (t // D)
        for d in range(D):
            if c[d] < qx[d]:
                inside = False
                break
        if not inside:
            cur = _litmax(z, zmin, zmax, D, nbits)
            continue
        t = 0                                  # the maximal cell holding z inside the orthant
        while t < nbits:
            if (z >> t) & 1:
                d = t % D
                v = c[d] - (np.int64(1) << (t // D))
                if v < qx[d]:
                    break
                c[d] = v
            t += 1
        cell_lo = (z >> t) << t
        strict = True
        for d in range(D):
            if c[d] <= qx[d]:
                strict = False
                break
        stop = lead | cell_lo
        while True:
            s = bs[b, j]
            if s != q:
                ok = True
                if not strict:
                    cnt[1] += 1
                    ok = dominates(pts, s, q)
                if ok and (plain[s] or verify(S, vals, s, q)):
                    out[found] = s
                    found += 1
                    if found == k:
                        return found
            j -= 1
            if j < 0:
                i -= 1
                if i < 0:
                    break
                b = order[i]
                j = blen[b] - 1
            if bk[b, j] < stop:
                break
        cur = cell_lo - 1
    return found


class ZOrder:
    """The blocks and quantisation boundaries, grown between kernel calls (a call inserting
    ``m`` points opens at most ``m`` blocks)."""

    name = "z-order"

    def __init__(self, dims: int):
        self.dims = dims
        self.bits = bits_for(dims)
        if self.bits < 1:
            raise ValueError(f"the Z-order index takes at most 62 dimensions (31 attributes), got {dims}")
        self.reset(64, 0)

    def reset(self, slot_cap: int, node_cap: int = 0, boundaries: np.ndarray | None = None) -> None:
        nb = 8
        e = np.zeros(0, np.int64)
        meta = np.zeros(5, np.int64)
        meta[M_BITS] = self.bits
        self.I = (np.zeros(nb, np.int64), np.zeros(nb, np.int64), np.zeros(slot_cap, np.int64),
                  np.zeros(nb, np.int64)) + (e,) * 7 + (meta,)
        if boundaries is None:
            boundaries = np.zeros((self.dims, (1 << self.bits) - 1), np.int64)
        self.X = (np.zeros((nb, CAP), np.int64), np.zeros((nb, CAP), np.int64), boundaries)

    def boundaries(self, pts: np.ndarray) -> np.ndarray:
        """Quantisation boundaries at the quantiles of ``pts`` (rows), per dimension."""
        n_cells = 1 << self.bits
        if len(pts) == 0:
            return np.zeros((self.dims, n_cells - 1), np.int64)
        srt = np.sort(pts, axis=0)
        at = (np.arange(1, n_cells) * len(pts)) // n_cells
        return np.ascontiguousarray(srt[np.minimum(at, len(pts) - 1)].T)

    def ensure(self, slot_cap: int, new_points: int) -> None:
        I = list(self.I)
        need = int(I[META][M_HW]) + new_points + 2
        if need > len(I[BLEN]):
            cap = max(need, 2 * len(I[BLEN]))
            for i in (BLEN, ORDER, FREE):
                I[i] = np.concatenate([I[i], np.zeros(cap - len(I[i]), np.int64)])
            grow = np.zeros((cap - len(self.X[0]), CAP), np.int64)
            self.X = (np.concatenate([self.X[0], grow]), np.concatenate([self.X[1], grow]), self.X[2])
        if slot_cap > len(I[KEY]):
            I[KEY] = np.concatenate([I[KEY], np.zeros(slot_cap - len(I[KEY]), np.int64)])
        self.I = tuple(I)

    def size(self) -> int:
        return int(self.I[META][M_SIZE])

"""The adaptive k-d tree of Bentley and Friedman over the reduced points (paper IV.C).

Points live only in leaves, *buckets* of any size kept as doubly linked lists of slots; a
bucket over ``over`` points splits at the median of the dimension its depth names (level i
splits dimension i mod D; the next dimensions when every value there is equal), points
``<=`` the median going left; a bucket under ``under`` points merges with its sibling when
that sibling is a leaf (not yet split) and the two hold at most ``over`` points together.

A dominance query ``[q, inf)`` starts at the rightmost leaf (the high corner, where points
most likely dominate q) and backtracks: a depth-first walk visiting the right child first.
A left child is skipped when its split value is below q on its dimension, any subtree when
its maximum corner (kept on insert, an upper bound after deletes) is below q; once every
dimension is known to be above q on the path, the points of the region are reported without
comparisons. The walk stops at k answers.

State (the shapes every index of :mod:`rankcast.kinds.matching.covering` shares): ``I``, a tuple of 12
int64 vectors (per node: left, right, parent, dim, split, head, count, depth; per slot:
next, prev, leaf; meta), ``X``, a tuple of 3 int64 matrices (per node: the maximum corner).
"""
from __future__ import annotations

import numba
import numpy as np

from .semantic import dominates, verify

__all__ = ["KdTree", "insert", "delete", "query"]

LEFT, RIGHT, PARENT, DIM, SPLIT, HEAD, COUNT, DEPTH, NEXT, PREV, LEAF, META = range(12)
M_ROOT, M_HW, M_FREE, M_OVER, M_UNDER, M_SIZE, M_MAXDEPTH = range(7)
_MIN = np.iinfo(np.int64).min


@numba.njit(cache=True)
def _new_node(I, X, parent, depth):
    meta = I[META]
    n = meta[M_FREE]
    if n >= 0:
        meta[M_FREE] = I[LEFT][n]
    else:
        n = meta[M_HW]
        meta[M_HW] += 1
    I[LEFT][n] = -1
    I[RIGHT][n] = -1
    I[PARENT][n] = parent
    I[HEAD][n] = -1
    I[COUNT][n] = 0
    I[DEPTH][n] = depth
    if depth > meta[M_MAXDEPTH]:
        meta[M_MAXDEPTH] = depth
    X[0][n, :] = _MIN
    return n


@numba.njit(cache=True)
def _free_node(I, n):
    I[LEFT][n] = I[META][M_FREE]
    I[META][M_FREE] = n


@numba.njit(cache=True)
def _push(I, X, pts, leaf, s):
    """Put slot ``s`` at the head of ``leaf``'s bucket and raise the leaf's maximum corner."""
    h = I[HEAD][leaf]
    I[NEXT][s] = h
    I[PREV][s] = -1
    if h >= 0:
        I[PREV][h] = s
    I[HEAD][leaf] = s
    I[LEAF][s] = leaf
    I[COUNT][leaf] += 1
    mx = X[0]
    for d in range(pts.shape[1]):
        if pts[s, d] > mx[leaf, d]:
            mx[leaf, d] = pts[s, d]


@numba.njit(cache=True)
def _split(I, X, pts, n):
    """Split leaf ``n`` at the median of its depth's dimension (or the next that separates)."""
    c = I[COUNT][n]
    D = pts.shape[1]
    slots = np.empty(c, np.int64)
    s = I[HEAD][n]
    for i in range(c):
        slots[i] = s
        s = I[NEXT][s]
    vals = np.empty(c, np.int64)
    for t in range(D):
        d = (I[DEPTH][n] + t) % D
        for i in range(c):
            vals[i] = pts[slots[i], d]
        vals.sort()
        if vals[0] == vals[c - 1]:
            continue
        v = vals[(c - 1) // 2]
        if v == vals[c - 1]:               # the median is the maximum: the largest value below it
            j = (c - 1) // 2
            while vals[j] == v:
                j -= 1
            v = vals[j]
        left = _new_node(I, X, n, I[DEPTH][n] + 1)
        right = _new_node(I, X, n, I[DEPTH][n] + 1)
        for i in range(c):
            _push(I, X, pts, left if pts[slots[i], d] <= v else right, slots[i])
        I[LEFT][n], I[RIGHT][n], I[DIM][n], I[SPLIT][n] = left, right, d, v
        I[HEAD][n] = -1
        I[COUNT][n] = 0
        return
    # every point equal: the bucket stays over its limit


@numba.njit(cache=True)
def insert(I, X, pts, s):
    """Insert slot ``s`` (its point is ``pts[s]``)."""
    meta = I[META]
    if meta[M_ROOT] < 0:
        meta[M_ROOT] = _new_node(I, X, -1, 0)
    n = meta[M_ROOT]
    mx = X[0]
    D = pts.shape[1]
    while I[LEFT][n] >= 0:
        for d in range(D):
            if pts[s, d] > mx[n, d]:
                mx[n, d] = pts[s, d]
        n = I[LEFT][n] if pts[s, I[DIM][n]] <= I[SPLIT][n] else I[RIGHT][n]
    _push(I, X, pts, n, s)
    meta[M_SIZE] += 1
    if I[COUNT][n] > meta[M_OVER]:
        _split(I, X, pts, n)


@numba.njit(cache=True)
def delete(I, X, pts, s):
    """Delete slot ``s``; an underflowing bucket merges with its sibling leaf."""
    meta = I[META]
    n = I[LEAF][s]
    p, q = I[PREV][s], I[NEXT][s]
    if p >= 0:
        I[NEXT][p] = q
    else:
        I[HEAD][n] = q
    if q >= 0:
        I[PREV][q] = p
    I[COUNT][n] -= 1
    meta[M_SIZE] -= 1
    while n != meta[M_ROOT] and I[COUNT][n] < meta[M_UNDER]:
        par = I[PARENT][n]
        sib = I[RIGHT][par] if I[LEFT][par] == n else I[LEFT][par]
        if I[LEFT][sib] >= 0 or I[COUNT][n] + I[COUNT][sib] > meta[M_OVER]:
            break
        a, b = I[LEFT][par], I[RIGHT][par]
        I[LEFT][par] = -1
        I[RIGHT][par] = -1
        X[0][par, :] = _MIN
        for child in (a, b):
            s2 = I[HEAD][child]
            while s2 >= 0:
                nxt = I[NEXT][s2]
                _push(I, X, pts, par, s2)
                s2 = nxt
            _free_node(I, child)
        n = par


@numba.njit(cache=True)
def query(I, X, pts, S, vals, plain, q, k, out, cnt):
    """Up to ``k`` slots other than ``q`` whose points dominate ``pts[q]`` and which cover
    ``q`` exactly (:func:`~rankcast.kinds.matching.covering.semantic.verify` when not plain), into ``out``.
    Returns how many; ``cnt[0]`` += nodes visited, ``cnt[1]`` += point comparisons."""
    meta = I[META]
    root = meta[M_ROOT]
    if root < 0 or k <= 0:
        return 0
    D = pts.shape[1]
    mx = X[0]
    left, right, dim, split = I[LEFT], I[RIGHT], I[DIM], I[SPLIT]
    sat = np.zeros(D, np.int64)           # ancestors on the path putting dimension d above q
    nsat = 0
    stack = np.empty(3 * (meta[M_MAXDEPTH] + 2), np.int64)
    top = 0
    stack[top] = 2 * root
    top += 1
    found = 0
    while top > 0:
        top -= 1
        e = stack[top]
        n = e >> 1
        if e & 1:                          # leaving n: undo its mark
            par = I[PARENT][n]
            d = dim[par]
            sat[d] -= 1
            if sat[d] == 0:
                nsat -= 1
            continue
        cnt[0] += 1
        pruned = False
        for d in range(D):
            if mx[n, d] < pts[q, d]:
                pruned = True
                break
        if pruned:
            continue
        par = I[PARENT][n]
        if par >= 0 and right[par] == n and split[par] >= pts[q, dim[par]]:
            d = dim[par]
            sat[d] += 1
            if sat[d] == 1:
                nsat += 1
            stack[top] = 2 * n + 1
            top += 1
        if left[n] < 0:
            s = I[HEAD][n]
            while s >= 0:
                if s != q:
                    ok = True
                    if nsat < D:
                        cnt[1] += 1
                        ok = dominates(pts, s, q)
                    if ok and (plain[s] or verify(S, vals, s, q)):
                        out[found] = s
                        found += 1
                        if found == k:
                            return found
                s = I[NEXT][s]
        else:
            if split[n] >= pts[q, dim[n]]:
                stack[top] = 2 * left[n]
                top += 1
            stack[top] = 2 * right[n]
            top += 1
    return found


class KdTree:
    """The tree's arrays, grown between kernel calls (a call inserting ``m`` points creates at
    most ``2 m`` nodes)."""

    name = "kd-tree"

    def __init__(self, dims: int, over: int = 32, under: int = 8):
        self.dims, self.over, self.under = dims, over, under
        self.reset(64, 64)

    def reset(self, slot_cap: int, node_cap: int) -> None:
        self.I = tuple(np.full(node_cap if i < NEXT else slot_cap, -1, np.int64) for i in range(META)) + (
            np.array([-1, 0, -1, self.over, self.under, 0, 0], np.int64),)
        self.X = (np.full((node_cap, self.dims), _MIN, np.int64), np.zeros((0, 0), np.int64),
                  np.zeros((0, 0), np.int64))

    def ensure(self, slot_cap: int, new_points: int) -> None:
        I = list(self.I)
        need = int(I[META][M_HW]) + 2 * new_points + 2
        if need > len(I[LEFT]):
            cap = max(need, 2 * len(I[LEFT]))
            for i in range(NEXT):
                I[i] = np.concatenate([I[i], np.full(cap - len(I[i]), -1, np.int64)])
            self.X = (np.concatenate([self.X[0], np.full((cap - len(self.X[0]), self.dims), _MIN, np.int64)]),
                      ) + self.X[1:]
        if slot_cap > len(I[NEXT]):
            for i in (NEXT, PREV, LEAF):
                I[i] = np.concatenate([I[i], np.full(slot_cap - len(I[i]), -1, np.int64)])
        self.I = tuple(I)

    def size(self) -> int:
        return int(self.I[META][M_SIZE])

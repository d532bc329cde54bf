"""The naive index of the paper's comparison (V.C): no index, a sequential scan of the live
points in the order they are kept, stopping at k covers. Same state shapes and kernels as
:mod:`~rankcast.kinds.matching.covering.kdtree` (``I``: the live slots, each slot's position, meta)."""
from __future__ import annotations

import numba
import numpy as np

from .semantic import dominates, verify

__all__ = ["Naive", "insert", "delete", "query"]

LIVE, POS, META = 0, 1, 11


@numba.njit(cache=True)
def insert(I, X, pts, s):
    """Append slot ``s`` to the scan order."""
    n = I[META][0]
    I[LIVE][n] = s
    I[POS][s] = n
    I[META][0] = n + 1


@numba.njit(cache=True)
def delete(I, X, pts, s):
    """Remove slot ``s`` (the last one takes its place)."""
    n = I[META][0] - 1
    p = I[POS][s]
    last = I[LIVE][n]
    I[LIVE][p] = last
    I[POS][last] = p
    I[META][0] = n


@numba.njit(cache=True)
def query(I, X, pts, S, vals, plain, q, k, out, cnt):
    """Up to ``k`` covers of ``q`` (not ``q``) by a scan; counters as the k-d tree's."""
    found = 0
    if k <= 0:
        return 0
    cnt[0] += 1
    live = I[LIVE]
    for i in range(I[META][0]):
        s = live[i]
        if s == q:
            continue
        cnt[1] += 1
        if dominates(pts, s, q) and (plain[s] or verify(S, vals, s, q)):
            out[found] = s
            found += 1
            if found == k:
                break
    return found


class Naive:
    name = "naive"

    def __init__(self, dims: int):
        self.dims = dims
        self.reset(64, 0)

    def reset(self, slot_cap: int, node_cap: int = 0) -> None:
        e = np.zeros(0, np.int64)
        self.I = (np.zeros(slot_cap, np.int64), np.zeros(slot_cap, np.int64)) + (e,) * 9 + (np.zeros(1, np.int64),)
        self.X = (np.zeros((0, 0), np.int64),) * 3

    def ensure(self, slot_cap: int, new_points: int) -> None:
        if slot_cap > len(self.I[LIVE]):
            grow = slot_cap - len(self.I[LIVE])
            self.I = tuple(np.concatenate([a, np.zeros(grow, np.int64)]) if i in (LIVE, POS) else a
                           for i, a in enumerate(self.I))

    def size(self) -> int:
        return int(self.I[META][0])

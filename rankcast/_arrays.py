"""Array growth shared by every pool and table that grows in place, and the expansion of
runs of rows into update rows."""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["grow", "grown", "runs", "concat_offsets", "expand_runs"]


def grow(arr: np.ndarray, n: int, fill=0) -> np.ndarray:
    """``arr`` with room for at least ``n`` rows (doubling, at least 16), new rows set to
    ``fill``; ``arr`` itself when it is long enough. Rows may be multi-dimensional."""
    if n <= arr.shape[0]:
        return arr
    new = np.full((max(n, 2 * arr.shape[0], 16),) + arr.shape[1:], fill, dtype=arr.dtype)
    new[: arr.shape[0]] = arr
    return new


@numba.njit(cache=True)
def grown(arr, cap):
    """:func:`grow` for numba kernels: ``arr`` copied into a new 1-d array of its dtype with
    ``cap`` rows (the rows past ``arr``'s are left unset)."""
    new = np.empty(cap, arr.dtype)
    new[: arr.shape[0]] = arr
    return new


def runs(starts: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A CSR gather: row r takes ``lens[r]`` consecutive elements from ``starts[r]`` on.
    Returns the offsets of the rows laid end to end and the source index of every element."""
    off = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=off[1:])
    idx = np.repeat(starts, lens) + (np.arange(off[-1], dtype=np.int64) - np.repeat(off[:-1], lens))
    return off, idx


def concat_offsets(offsets: list[np.ndarray]) -> np.ndarray:
    """The CSR offsets of several CSR tables laid end to end (each starts at 0)."""
    base = np.cumsum([0] + [int(o[-1]) for o in offsets[:-1]])
    return np.concatenate([np.zeros(1, np.int64)] + [o[1:] + b for o, b in zip(offsets, base)]).astype(np.int64)


@numba.njit(cache=True)
def expand_runs(keys, starts, lens, ids, id_col, scores, sc_col):
    """The rows of an update table (rankcast.engine.updates_table): list ``i`` is rows
    ``starts[i] .. starts[i] + lens[i]`` of the 2-d tables ``ids`` (column ``id_col``) and
    ``scores`` (column ``sc_col``), best first. Returns (key, rank from 1, id, score, empty);
    an empty list is one row flagged ``empty`` (its other columns 0)."""
    n = keys.shape[0]
    total = 0
    for i in range(n):
        total += max(lens[i], 1)
    key = np.empty(total, np.int64)
    rank = np.zeros(total, np.int32)
    out_id = np.zeros(total, np.int64)
    out_sc = np.zeros(total)
    empty = np.zeros(total, np.bool_)
    w = 0
    for i in range(n):
        if lens[i] == 0:
            key[w] = keys[i]
            empty[w] = True
            w += 1
            continue
        a = starts[i]
        for r in range(lens[i]):
            key[w] = keys[i]
            rank[w] = r + 1
            out_id[w] = ids[a + r, id_col]
            out_sc[w] = scores[a + r, sc_col]
            w += 1
    return key, rank, out_id, out_sc, empty

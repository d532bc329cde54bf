"""Array growth shared by every pool and table that grows in place."""
from __future__ import annotations

import numpy as np

__all__ = ["grow", "runs", "concat_offsets"]


def grow(arr: np.ndarray, n: int, fill=0) -> np.ndarray:
    """``arr`` with room for at least ``n`` rows (doubling, at least 16), new rows set to
    ``fill``; ``arr`` itself when it is long enough. Rows may be multi-dimensional."""
    if n <= arr.shape[0]:
        return arr
    new = np.full((max(n, 2 * arr.shape[0], 16),) + arr.shape[1:], fill, dtype=arr.dtype)
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

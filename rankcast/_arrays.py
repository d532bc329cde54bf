"""Array growth shared by every pool and table that grows in place."""
from __future__ import annotations

import numpy as np

__all__ = ["grow"]


def grow(arr: np.ndarray, n: int, fill=0) -> np.ndarray:
    """``arr`` with room for at least ``n`` rows (doubling, at least 16), new rows set to
    ``fill``; ``arr`` itself when it is long enough. Rows may be multi-dimensional."""
    if n <= arr.shape[0]:
        return arr
    new = np.full((max(n, 2 * arr.shape[0], 16),) + arr.shape[1:], fill, dtype=arr.dtype)
    new[: arr.shape[0]] = arr
    return new

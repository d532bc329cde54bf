"""The slack of every comparison of a bound with a threshold, shared by every kind.

An upper bound computed in another order than the exact score may round a few ulps away
from it; pruning with the relative slack ``EPS`` (:func:`below`) never drops an item whose
exact score reaches the threshold (ties count: they are decided by the items' order).
"""
from __future__ import annotations

import numba

__all__ = ["EPS", "below"]

EPS = 1e-9           # relative slack of every pruning comparison


@numba.njit(cache=True, inline="always")
def below(upper, threshold):
    """True when an upper bound is safely below a threshold (so the pair can be pruned).

    upper, threshold: float64 scalars. Returns bool."""
    return upper < threshold - EPS * (1.0 + abs(threshold))

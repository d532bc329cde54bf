"""Baselines of the range top-k kind, apart from the Paint path (paper Section V).

- :func:`brute_topk`: the oracle of the notes (section 4): sort the live objects in range.
- :func:`unicast_online` (``RangeConfig(method="unicast")``, a method of the kind:
  :mod:`rankcast.kinds.range.unicast`): Unicast, the paper's comparison point.
"""
from __future__ import annotations

from rankcast.kinds.range.unicast import report, unicast_online

__all__ = ["unicast_online", "report", "brute_topk"]


def brute_topk(objects: dict, lo: float, hi: float, k: int) -> list[tuple[int, float]]:
    """The oracle: the k live objects with lo <= x <= hi of lowest y (equal y: smaller id
    first); ``objects`` maps id -> (x, y)."""
    inside = sorted((y, i) for i, (x, y) in objects.items() if lo <= x <= hi)
    return [(i, y) for y, i in inside[:k]]

"""What every scored interval index of the ranked pub/sub paper offers (Machanavajjhala et al.,
"Scalable Ranked Publish/Subscribe"; notes: ``shared/notes/ranked-pubsub-interval-indexes.md``).

One index holds closed intervals ``[lo, hi]`` of one attribute (``lo`` may be ``-inf``, ``hi``
``+inf``; ``lo <= hi``), each with a ``score`` (float64, finite, >= 0) and an ``item`` (int64,
unique within the index: the expression id). A query point ``q`` (finite float64) *stabs*
``[lo, hi]`` iff ``lo <= q <= hi``.

Every index answers in one **total order**: score descending, then item ascending
(:func:`before`). ``idx.open(q)`` returns a :class:`Cursor` whose ``next(n)`` gives the next
``n`` stabbed intervals in that order (the paper's resumable ``getnext``, in batches so that
the Python layer is crossed once per batch, not once per interval); fewer than ``n`` only when
none is left. Exact: the concatenation of every ``next`` equals
``sorted(stabbed, key=(-score, item))``.

A cursor counts its work in ``cursor.counters`` (int64 array, :data:`COUNTERS` names the
slots): ``nodes`` visited, ``holes`` (nodes visited whose extent contains ``q`` but below
which nothing stabbed was found on that visit: the paper's holes of R-tree extents), and
``entries`` (intervals looked at).

Static indexes (built once from arrays) get insertions and deletions through
:class:`~rankcast.kinds.matching.intervals.delta.DeltaIndex`; dynamic ones (``dynamic = True``)
implement ``insert`` / ``delete`` themselves.
"""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["IntervalIndex", "Cursor", "before", "COUNTERS", "check_intervals", "read_args"]

COUNTERS = ("nodes", "holes", "entries")


@numba.njit(cache=True, inline="always")
def before(score_a, item_a, score_b, item_b):
    """True when (score_a, item_a) comes first in the total order: higher score, then smaller item."""
    return score_a > score_b or (score_a == score_b and item_a < item_b)


def check_intervals(lo, hi, score, item) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The four columns as contiguous arrays of the right dtypes (a programming error, not user
    input, raises ValueError: user input is validated before it reaches an index)."""
    lo = np.ascontiguousarray(lo, np.float64)
    hi = np.ascontiguousarray(hi, np.float64)
    score = np.ascontiguousarray(score, np.float64)
    item = np.ascontiguousarray(item, np.int64)
    n = len(lo)
    if not (len(hi) == len(score) == len(item) == n):
        raise ValueError("interval columns of different lengths")
    if n and (np.isnan(lo).any() or np.isnan(hi).any() or (lo > hi).any()):
        raise ValueError("intervals need lo <= hi, no NaN")
    if n and (not np.isfinite(score).all() or (score < 0).any()):
        raise ValueError("scores must be finite and >= 0")
    return lo, hi, score, item


def read_args(queries, g, most: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(queries float64, counts int64 capped at ``most``, output offsets) for ``read_many``."""
    queries = np.ascontiguousarray(queries, np.float64).reshape(-1)
    if np.isnan(queries).any():
        raise ValueError("query point is NaN")
    g = np.broadcast_to(np.asarray(g, np.int64), queries.shape)
    if (g < 0).any():
        raise ValueError("counts must be >= 0")
    g = np.minimum(g, most).astype(np.int64)
    off = np.zeros(len(queries) + 1, np.int64)
    np.cumsum(g, out=off[1:])
    return queries, g, off


class Cursor:
    """A resumable top-k stabbing query (see the module docstring)."""

    counters: np.ndarray

    def next(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Up to ``n`` further stabbed intervals in the total order: (items int64, scores float64)."""
        raise NotImplementedError


class IntervalIndex:
    """A scored interval index over one attribute (see the module docstring)."""

    name: str = ""
    dynamic: bool = False

    def __init__(self, lo, hi, score, item, *, b: int = 50):
        raise NotImplementedError

    def open(self, q: float) -> Cursor:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def nbytes(self) -> int:
        """Bytes of every array the index holds (the memory experiment, paper Table 2)."""
        raise NotImplementedError

    def entries(self) -> int:
        """Entries the index stores (the paper's measure of Table 2): stored interval rows, node
        entries and list rows, each counted once however many fields it has."""
        raise NotImplementedError

    def read_many(self, queries, g) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For every query point ``queries[i]``, open a cursor and read its first ``g[i]``
        stabbed intervals (``g``: one count for all, or one per query), all in one compiled
        call: what the cursors cost with no Python layer between the calls (the paper's
        Fig. 6 measure). Returns (offsets int64[len(queries) + 1], items, scores), query
        ``i``'s rows being ``offsets[i]:offsets[i + 1]``: the same rows as
        ``open(queries[i]).next(g[i])``."""
        raise NotImplementedError

    # dynamic indexes only
    def insert(self, lo, hi, score, item) -> None:
        raise NotImplementedError(f"{self.name} is static: wrap it in DeltaIndex")

    def delete(self, item) -> None:
        raise NotImplementedError(f"{self.name} is static: wrap it in DeltaIndex")

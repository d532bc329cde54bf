"""Plain data objects of the public contract.

They hold what the user gave, unchanged; validation happens when a call uses them,
because only the call knows an item's position (see :mod:`rankcast.kinds.spatial.columns`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

__all__ = ["Subscription", "Message", "Update", "Delivery", "Predicate", "Expression", "Event", "Match",
           "RangeSubscription", "ObjectUpdate"]


@dataclass(frozen=True, slots=True)
class Subscription:
    """A standing top-k spatial-keyword interest (paper Definition 2)."""

    id: int
    x: float
    y: float
    text: str | None = field(default=None, kw_only=True)
    terms: Mapping[str, float] | None = field(default=None, kw_only=True)
    k: int = field(default=20, kw_only=True)
    alpha: float = field(default=0.5, kw_only=True)


@dataclass(frozen=True, slots=True)
class Message:
    """A geo-textual message (paper Definition 1); ``t`` is needed under a time window."""

    id: int
    x: float
    y: float
    text: str | None = field(default=None, kw_only=True)
    terms: Mapping[str, float] | None = field(default=None, kw_only=True)
    t: float | None = field(default=None, kw_only=True)


@dataclass(frozen=True, slots=True)
class Update:
    """The top-k of one subscription after a call that changed it: ``topk``, (item_id, score)
    pairs, best first (spatial-keyword: (message_id, score); range top-k: (object_id, y),
    lowest y first)."""

    subscription_id: int
    topk: tuple[tuple[int, float], ...]


@dataclass(frozen=True, slots=True)
class Delivery:
    """What one call (or one cut of pipelined calls) changed, as a listener receives it:
    ``position`` is the stream position of that call (messages published up to its end),
    increasing along the stream; ``updates`` its updates (per subscription, its top-k after)."""

    position: int
    updates: list


@dataclass(frozen=True, slots=True)
class BatchResult:
    """What ``Cluster.apply_batch`` did with batch ``batch_id`` of ``sink`` (docs/streaming.md):
    ``applied`` False when the id was applied (or rejected) before, so nothing changed now;
    ``rejected`` the error that rejected the batch (then nothing of it was applied), else
    None; ``items`` the items it applied; ``position`` the stream position after it."""

    sink: str
    batch_id: int
    applied: bool
    rejected: str | None
    items: int
    position: int


# ----------------------------------------------------------------------------- ranked matching

OPERATORS = ("<", "<=", "==", "!=", ">=", ">", "in", "not in", "between")


@dataclass(frozen=True, slots=True)
class Predicate:
    """One condition of an expression on one attribute (docs/contract.md, "Ranked matching").

    ``op`` is one of ``< <= == != >= > in not in between``; ``value`` a finite number, or a
    string for ``== != in not in``; a non-empty sequence for ``in`` / ``not in``; a pair
    ``(lo, hi)`` with ``lo <= hi`` for ``between`` (closed). ``weight`` counts under the
    ``relaxed`` and ``weighted`` scorings."""

    attr: str
    op: str
    value: Any
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class Expression:
    """A ranked-matching subscription: a conjunction of predicates (at most one per
    attribute) with a score (``static`` scoring)."""

    id: int
    predicates: Sequence[Predicate]
    score: float = field(default=1.0, kw_only=True)


@dataclass(frozen=True, slots=True)
class Event:
    """A point of attribute values (numbers or strings); ``weights`` (default 1 for every
    attribute) scale the predicate weights under ``weighted`` scoring."""

    id: int
    values: Mapping[str, Any]
    weights: Mapping[str, float] | None = field(default=None, kw_only=True)


@dataclass(frozen=True, slots=True, init=False)
class Match:
    """The top-k expressions of one event: ``topk``, (expression_id, score) pairs, best
    first (equal scores: smaller id first); the field has ``rc.Update``'s name.

    ``top`` is the field's former name: a deprecated alias kept for one release (the
    attribute ``m.top`` and the keyword ``Match(event_id, top=...)`` both still work)."""

    event_id: int
    topk: tuple[tuple[int, float], ...]

    def __init__(self, event_id: int, topk: tuple[tuple[int, float], ...] | None = None, *,
                 top: tuple[tuple[int, float], ...] | None = None):
        if top is not None:
            if topk is not None:
                raise TypeError("Match: give topk or its deprecated alias top, not both")
            topk = top
        elif topk is None:
            raise TypeError("Match: missing the field 'topk'")
        object.__setattr__(self, "event_id", event_id)
        object.__setattr__(self, "topk", topk)

    @property
    def top(self) -> tuple[tuple[int, float], ...]:
        """Deprecated alias of :attr:`topk`, kept for one release."""
        return self.topk


# ----------------------------------------------------------------------------- range top-k


@dataclass(frozen=True, slots=True)
class RangeSubscription:
    """A range top-k subscription: the k live objects of lowest ``y`` with ``lo <= x <= hi``
    (closed range; equal y: the smaller object id first)."""

    id: int
    lo: float
    hi: float


@dataclass(frozen=True, slots=True)
class ObjectUpdate:
    """An object event: a new id inserts (x, y); a live id changes y (and moves to ``x`` if
    given); ``y=None`` deletes it."""

    id: int
    x: float | None = None
    y: float | None = None

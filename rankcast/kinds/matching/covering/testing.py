"""A reference for covering tests, independent of the kernels: ``covers(a, b)`` over
``rc.Expression`` objects by the definition (every event matching ``b`` matches ``a``),
decided on a finite set of witness values per attribute.

Every predicate's set is a union of its operands and of open gaps between consecutive
operands, so the operands of all expressions, one float inside each gap between consecutive
ones (and ``-DBL_MAX``, ``DBL_MAX``) witness every difference between two such sets; for
strings, the strings named plus one no expression names."""
from __future__ import annotations

import math
from collections.abc import Iterable

from rankcast.model import Event, Expression

__all__ = ["Witnesses", "covers", "matches"]

_MAX = 1.7976931348623157e308
UNSEEN = "\x00unseen"


def _holds(op: str, v, x) -> bool:
    if op == "<":
        return x < v
    if op == "<=":
        return x <= v
    if op == "==":
        return x == v
    if op == "!=":
        return x != v
    if op == ">=":
        return x >= v
    if op == ">":
        return x > v
    if op == "in":
        return x in set(v)
    if op == "not in":
        return x not in set(v)
    return v[0] <= x <= v[1]                  # between


def matches(e: Expression, values: dict) -> bool:
    """Exact matching (docs/contract.md, static scoring): every attribute named present, every predicate holds."""
    for p in e.predicates:
        if p.attr not in values:
            return False
        x = values[p.attr]
        if isinstance(x, str) != _is_str(p):
            return False
        if not _holds(p.op, p.value, x):
            return False
    return True


def _is_str(p) -> bool:
    v = p.value
    if isinstance(v, str):
        return True
    return isinstance(v, (list, tuple)) and p.op in ("in", "not in") and all(isinstance(x, str) for x in v)


class Witnesses:
    """The witness values of a set of expressions, per attribute."""

    def __init__(self, exprs: Iterable[Expression]):
        nums: dict[str, set] = {}
        strs: dict[str, set] = {}
        for e in exprs:
            for p in e.predicates:
                if _is_str(p):
                    vals = [p.value] if isinstance(p.value, str) else list(p.value)
                    strs.setdefault(p.attr, set()).update(vals)
                else:
                    vals = [p.value] if not isinstance(p.value, (list, tuple)) else list(p.value)
                    nums.setdefault(p.attr, set()).update(float(v) for v in vals)
        self.values: dict[str, list] = {}
        for a, vs in nums.items():
            pts = sorted(vs | {-_MAX, _MAX})
            out = list(pts)
            for x, y in zip(pts, pts[1:]):
                m = x / 2 + y / 2
                if x < m < y:
                    out.append(m)
                elif math.nextafter(x, math.inf) < y:
                    out.append(math.nextafter(x, math.inf))
            self.values[a] = out
        for a, vs in strs.items():
            self.values[a] = sorted(vs) + [UNSEEN]

    def allowed(self, e: Expression, attr: str) -> frozenset:
        p = next(p for p in e.predicates if p.attr == attr)
        return frozenset(x for x in self.values[p.attr] if _holds(p.op, p.value, x))

    def void(self, e: Expression) -> bool:
        return any(not self.allowed(e, p.attr) for p in e.predicates)

    def covers(self, a: Expression, b: Expression) -> bool:
        if self.void(b):
            return True
        named_b = {p.attr for p in b.predicates}
        for p in a.predicates:
            if p.attr not in named_b:
                return False
            if not self.allowed(b, p.attr) <= self.allowed(a, p.attr):
                return False
        return True

    def random_event(self, rng, attrs: list[str], eid: int = 0) -> Event:
        """An event over witness values (some attributes missing)."""
        vals = {}
        for a in attrs:
            if a in self.values and rng.random() < 0.85:
                w = self.values[a]
                vals[a] = w[int(rng.integers(len(w)))]
        return Event(eid, vals)


def covers(a: Expression, b: Expression) -> bool:
    """Whether ``a`` covers ``b`` (witnesses from the two alone)."""
    return Witnesses([a, b]).covers(a, b)

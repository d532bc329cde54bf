"""What an expression matches, as exact integer sets per attribute, and the reduction to points.

Every finite float64 gets its *ordinal*: an int64, monotone in the value, consecutive floats
consecutive integers, ``-0.0`` and ``0.0`` the same (they compare equal in an event), the
largest float ``ORD_MAX``. A string gets its code (:mod:`rankcast.kinds.matching.predicates`). An expression
then allows, on each attribute it names, one of:

- ``RNG``: the integers ``[lo, hi]`` minus a sorted set ``E`` of interior exclusions
  (``<`` ``<=`` ``==`` ``>=`` ``>`` ``between`` and a contiguous ``in`` on numbers: ``E``
  empty; ``!=`` / ``not in``: ``[-ORD_MAX, ORD_MAX]`` minus the values, its ends walked in
  past excluded extremes; on strings the whole line minus the codes: unseen strings stay
  allowed);
- ``FIN``: a finite sorted set ``F`` (``in`` and ``==`` on strings; ``in`` on numbers with a gap).

This form is canonical: two expressions match the same events iff their rows are equal, so
:func:`identity` finds identical expressions whatever operators spelled them. An expression
whose interval is empty (``x < -DBL_MAX``, ``x > DBL_MAX``) matches nothing: it is *void*.

**Reduction** (paper, Fact 1): a named attribute with hull ``[lo, hi]`` (``RNG``: its ends;
``FIN``: min and max) gives the coordinates ``(-lo, hi)``; an attribute the expression does not
name gives ``(ABSENT, ABSENT)`` with ``ABSENT = ORD_MAX + 1``, above every named range, since
not naming an attribute is weaker than any range on it (an event without the attribute
matches only the expressions that do not name it). ``s1`` covers ``s2`` only if ``p(s1)``
dominates ``p(s2)``; the converse holds when ``s1`` is *plain* (every row an ``RNG`` without
exclusions), and otherwise :func:`verify` decides exactly from the rows.
"""
from __future__ import annotations

import numba
import numpy as np

from ..predicates import BETWEEN, EQ, GE, GT, IN, LE, LT, NE, NUM

__all__ = ["ORD_MAX", "ABSENT", "ABS", "RNG", "FIN", "ordinals", "canonical_rows", "identity", "Store",
           "verify", "dominates"]

ORD_MAX = int(np.float64(np.finfo(np.float64).max).view(np.int64))   # 0x7FEFFFFFFFFFFFFF
ABSENT = ORD_MAX + 1
ABS, RNG, FIN = 0, 1, 2
_SIGN_OFF = np.int64(0x7FFFFFFFFFFFFFFF)


def ordinals(x) -> np.ndarray:
    """The ordinals of finite float64 values (monotone, -0.0 == 0.0)."""
    b = np.asarray(x, np.float64).view(np.int64)
    return np.where(b >= 0, b, -(b & _SIGN_OFF))


def _num_row(op: int, oa: int, ob: int, vals: np.ndarray):
    """(kind, lo, hi, values) of a predicate on a numeric attribute (``oa``, ``ob``: the
    ordinals of its operands)."""
    if op == LT:
        return RNG, -ORD_MAX, oa - 1, ()
    if op == LE:
        return RNG, -ORD_MAX, oa, ()
    if op == EQ:
        return RNG, oa, oa, ()
    if op == GE:
        return RNG, oa, ORD_MAX, ()
    if op == GT:
        return RNG, oa + 1, ORD_MAX, ()
    if op == BETWEEN:
        return RNG, oa, ob, ()
    v = np.unique(ordinals(vals)) if op != NE else np.array([oa])
    if op == IN:
        if int(v[-1]) - int(v[0]) == len(v) - 1:
            return RNG, int(v[0]), int(v[-1]), ()
        return FIN, int(v[0]), int(v[-1]), tuple(int(x) for x in v)
    # NE / NIN: the whole line minus v, ends walked in past excluded extremes
    ex = [int(x) for x in v]
    lo, hi = -ORD_MAX, ORD_MAX
    while ex and ex[0] == lo:
        ex.pop(0)
        lo += 1
    while ex and ex[-1] == hi:
        ex.pop()
        hi -= 1
    return RNG, lo, hi, tuple(ex)


def _str_row(op: int, a: float, vals: np.ndarray):
    if op == EQ:
        return FIN, int(a), int(a), (int(a),)
    if op == IN:
        v = sorted({int(x) for x in vals})
        return FIN, v[0], v[-1], tuple(v)
    if op == NE:
        return RNG, -ORD_MAX, ORD_MAX, (int(a),)
    return RNG, -ORD_MAX, ORD_MAX, tuple(sorted({int(x) for x in vals}))     # NIN


def canonical_rows(batch, kinds) -> list[tuple]:
    """Per expression of an :class:`~rankcast.kinds.matching.predicates.ExpressionBatch`: its rows
    ``((attr, kind, lo, hi, values), ...)`` sorted by attribute, or ``()`` when it is void.
    ``kinds``: the attribute types (``AttributeTable.kinds``)."""
    out = []
    oa = ordinals(np.where(np.isfinite(batch.a), batch.a, 0.0)).tolist()    # strings' codes are finite too
    ob = ordinals(np.where(np.isfinite(batch.b), batch.b, 0.0)).tolist()
    for i in range(len(batch)):
        rows, void = [], False
        for p in range(int(batch.pred_off[i]), int(batch.pred_off[i + 1])):
            at, op = int(batch.attr[p]), int(batch.op[p])
            vals = batch.set_vals[batch.set_off[p]:batch.set_off[p + 1]]
            if kinds[at] == NUM:
                row = _num_row(op, oa[p], ob[p], vals)
            else:
                row = _str_row(op, float(batch.a[p]), vals)
            if row[1] > row[2]:
                void = True
            rows.append((at,) + row)
        out.append(() if void else tuple(sorted(rows)))
    return out


def identity(rows: tuple) -> tuple:
    """The key under which identical expressions share one node (the rows are canonical)."""
    return rows


class Store:
    """The canonical rows of the nodes, dense over attributes, and their points.

    ``kind``, ``lo``, ``hi``, ``voff``, ``vlen``: ``(cap, n_attrs)`` int64; the values (``E`` or
    ``F``) of row ``(s, a)`` are ``vals[voff:voff+vlen]``. ``plain[s]``: every row of ``s`` is
    an ``RNG`` without exclusions; ``void[s]``: ``s`` matches nothing. ``pts``: ``(cap,
    2 n_attrs)`` int64, the reduction."""

    def __init__(self, n_attrs: int = 0, cap: int = 64):
        self.n_attrs = n_attrs
        self.cap = 0
        z2 = np.zeros((0, n_attrs), np.int64)
        self.kind, self.lo, self.hi, self.voff, self.vlen = z2, z2.copy(), z2.copy(), z2.copy(), z2.copy()
        self.pts = np.zeros((0, 2 * n_attrs), np.int64)
        self.plain = np.zeros(0, np.int64)
        self.void = np.zeros(0, np.int64)
        self.vals = np.zeros(64, np.int64)
        self.n_vals = 0
        self.ensure(cap)

    def ensure(self, cap: int) -> None:
        if cap <= self.cap:
            return
        new = max(cap, 2 * self.cap, 64)
        extra = new - self.cap

        def grow(a, fill):
            return np.concatenate([a, np.full((extra,) + a.shape[1:], fill, np.int64)])
        self.kind, self.lo, self.hi = grow(self.kind, ABS), grow(self.lo, 0), grow(self.hi, 0)
        self.voff, self.vlen = grow(self.voff, 0), grow(self.vlen, 0)
        self.pts = grow(self.pts, ABSENT)
        self.plain, self.void = grow(self.plain, 1), grow(self.void, 0)
        self.cap = new

    def grow_attrs(self, n_attrs: int) -> bool:
        """Room for ``n_attrs`` attributes (new ones absent everywhere); True if it grew."""
        extra = n_attrs - self.n_attrs
        if extra <= 0:
            return False

        def grow(a, fill, width=extra):
            return np.concatenate([a, np.full((a.shape[0], width), fill, np.int64)], axis=1)
        self.kind, self.lo, self.hi = grow(self.kind, ABS), grow(self.lo, 0), grow(self.hi, 0)
        self.voff, self.vlen = grow(self.voff, 0), grow(self.vlen, 0)
        self.pts = grow(self.pts, ABSENT, 2 * extra)
        self.n_attrs = n_attrs
        return True

    def put(self, slot: int, rows: tuple) -> None:
        """Write node ``slot``'s canonical rows (``()``: void)."""
        self.kind[slot] = ABS
        self.vlen[slot] = 0
        self.pts[slot] = ABSENT
        self.void[slot] = int(rows == ())
        plain = 1
        for at, kind, lo, hi, vals in rows:
            self.kind[slot, at], self.lo[slot, at], self.hi[slot, at] = kind, lo, hi
            self.pts[slot, 2 * at], self.pts[slot, 2 * at + 1] = -lo, hi
            if vals:
                plain = 0
                need = self.n_vals + len(vals)
                if need > len(self.vals):
                    self.vals = np.concatenate([self.vals, np.zeros(max(need, len(self.vals)), np.int64)])
                self.vals[self.n_vals:need] = vals
                self.voff[slot, at], self.vlen[slot, at] = self.n_vals, len(vals)
                self.n_vals = need
        self.plain[slot] = plain

    def put_rectangles(self, slots: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> None:
        """Closed numeric ranges ``[lo, hi]`` (``(n, n_attrs)`` ordinals) on every attribute."""
        self.kind[slots] = RNG
        self.lo[slots], self.hi[slots], self.vlen[slots] = lo, hi, 0
        self.pts[slots, 0::2], self.pts[slots, 1::2] = -lo, hi
        self.plain[slots], self.void[slots] = 1, 0

    def rows(self, slot: int) -> tuple:
        """Node ``slot``'s canonical rows, read back (``()``: void)."""
        if self.void[slot]:
            return ()
        out = []
        for at in range(self.n_attrs):
            k = int(self.kind[slot, at])
            if k != ABS:
                v = self.vals[self.voff[slot, at]:self.voff[slot, at] + self.vlen[slot, at]]
                out.append((at, k, int(self.lo[slot, at]), int(self.hi[slot, at]), tuple(int(x) for x in v)))
        return tuple(out)

    def compact(self, live: np.ndarray) -> None:
        """Drop the values no live node reads (called when most of the pool is garbage)."""
        parts, off = [], 0
        for s in live:
            for at in np.flatnonzero(self.vlen[s]):
                n = int(self.vlen[s, at])
                parts.append(self.vals[self.voff[s, at]:self.voff[s, at] + n])
                self.voff[s, at] = off
                off += n
        self.vals = np.concatenate(parts + [np.zeros(64, np.int64)])
        self.n_vals = off

    def sem(self):
        """The arrays :func:`verify` reads, as the kernels take them."""
        return (self.kind, self.lo, self.hi, self.voff, self.vlen), self.vals, self.plain


@numba.njit(cache=True, inline="always")
def dominates(pts, s, q):
    """Whether point ``s`` dominates point ``q`` (rows of ``pts``): s covers q geometrically."""
    for d in range(pts.shape[1]):
        if pts[s, d] < pts[q, d]:
            return False
    return True


@numba.njit(cache=True, inline="always")
def _member(vals, a, n, x):
    """Whether ``x`` is in the sorted ``vals[a:a+n]``."""
    lo, hi = a, a + n
    while lo < hi:
        m = (lo + hi) >> 1
        if vals[m] < x:
            lo = m + 1
        else:
            hi = m
    return lo < a + n and vals[lo] == x


@numba.njit(cache=True)
def verify(S, vals, s, q):
    """Whether stored node ``s`` covers node ``q`` exactly, given that ``p(s)`` dominates
    ``p(q)`` (so ``q`` names every attribute ``s`` names, within its hull).

    ``S`` = (kind, lo, hi, voff, vlen), each ``(cap, n_attrs)`` int64; ``vals`` int64, the
    pool of exclusions and finite sets (:class:`Store`)."""
    kind, lo, hi, voff, vlen = S
    for a in range(kind.shape[1]):
        ks = kind[s, a]
        n1 = vlen[s, a]
        if ks == ABS or n1 == 0:
            continue                       # an interval: the hull test decided it
        o1 = voff[s, a]
        kq, o2, n2 = kind[q, a], voff[q, a], vlen[q, a]
        if ks == RNG:                      # s allows [lo, hi] minus E1: q must avoid E1
            if kq == FIN:
                for i in range(n2):
                    if _member(vals, o1, n1, vals[o2 + i]):
                        return False
            else:
                for i in range(n1):
                    e = vals[o1 + i]
                    if lo[q, a] <= e <= hi[q, a] and not _member(vals, o2, n2, e):
                        return False
        else:                              # s allows the finite F1: q must be a subset
            if kq == FIN:
                for i in range(n2):
                    if not _member(vals, o1, n1, vals[o2 + i]):
                        return False
            else:                          # [l2, h2] minus E2, counted without overflow
                l2, h2 = lo[q, a], hi[q, a]
                if h2 - (n1 + n2) >= l2:
                    return False
                v = l2
                while v <= h2:
                    if not _member(vals, o2, n2, v) and not _member(vals, o1, n1, v):
                        return False
                    v += 1
    return True

"""Unicast, the range top-k method Paint is measured against (paper Section V;
``RangeConfig(method="unicast")``).

The server knows every subscription; for each update it enumerates the subscriptions of
(l, x_i] x [x_i, r) (II_old u II_new), keeps those whose top-k the update changes
(membership in IR by the first_k lists), and sends each one its change addressed by id: the
object's new value, and for one that loses the object its old (k+1)-th, found by one min_y
call per subscription (Table III's Unicast column).
"""
from __future__ import annotations

import numba
import numpy as np

from .objects import first_k, set_value, topk_range
from .paint import C_FIRST_K, C_MIN_Y, MF, MI, UNICAST, _lbound, _push, _rbound
from .points import _disjoint, _inside

__all__ = ["unicast_online", "report"]


@numba.njit(cache=True)
def report(box, start, end, lo, hi, leaves, a0, a1, b0, b1, out):
    """The tree positions of the points in the closed box [a0, a1] x [b0, b1], into ``out``;
    returns how many."""
    c = 0
    if a0 > a1 or b0 > b1:
        return 0
    stack = np.empty(64, np.int64)
    sp = 1
    stack[0] = 1
    while sp > 0:
        sp -= 1
        v = stack[sp]
        if _disjoint(box, v, a0, a1, b0, b1):
            continue
        if _inside(box, v, a0, a1, b0, b1):
            for t in range(start[v], end[v]):
                out[c] = t
                c += 1
            continue
        if v >= leaves:
            for t in range(start[v], end[v]):
                if a0 <= lo[t] <= a1 and b0 <= hi[t] <= b1:
                    out[c] = t
                    c += 1
            continue
        stack[sp] = 2 * v
        stack[sp + 1] = 2 * v + 1
        sp += 2
    return c


@numba.njit(cache=True, inline="always")
def _rank_below(xs, L, a, R, b, lo, hi):
    """How many entries of the first_k lists lie in [lo, hi] (the objects ahead of i there)."""
    c = 0
    for j in range(a):
        if xs[L[j]] >= lo:
            c += 1
    for j in range(b):
        if xs[R[j]] <= hi:
            c += 1
    return c


@numba.njit(cache=True)
def unicast_online(ev_slot, ev_yold, ev_ynew, ev_idx, tree, size, ys, ids, xs, n, k,
                   pbox, pstart, pend, plo, phi, pkey, leaves, cnt):
    """Unicast messages (see the module docstring), one update at a time, applied to the tree:
    float64[nm, 5] (the box columns unused: NaN), int64[nm, 4] (object, event, target id, kind)."""
    mf = np.empty((1024, MF))
    mi = np.empty((1024, MI), np.int64)
    nm = 0
    L = np.empty(k, np.int64)
    R = np.empty(k, np.int64)
    L2 = np.empty(k, np.int64)
    R2 = np.empty(k, np.int64)
    cand = np.empty(plo.shape[0], np.int64)
    top = np.empty(k, np.int64)
    nan = np.nan
    for j in range(ev_slot.shape[0]):
        p = ev_slot[j]
        yo = ev_yold[j]
        yn = ev_ynew[j]
        if yo == yn:
            continue
        obj = ids[p]
        xi = xs[p]
        if yn < yo:
            set_value(tree, size, ys, ids, p, yn)
            a = first_k(tree, size, ys, ids, p, yn, obj, p, k, True, L)
            b = first_k(tree, size, ys, ids, p, yn, obj, p, k, False, R)
            cnt[C_FIRST_K] += 2
            m = report(pbox, pstart, pend, plo, phi, leaves, _lbound(xs, L[k - 1] if a == k else -1), xi,
                       xi, _rbound(xs, R[k - 1] if b == k else n, n), cand)
            for t in range(m):
                s = cand[t]
                if _rank_below(xs, L, a, R, b, plo[s], phi[s]) <= k - 1:
                    mf, mi, nm = _push(mf, mi, nm, nan, nan, nan, nan, yn, obj, ev_idx[j], pkey[s], UNICAST)
            continue
        a = first_k(tree, size, ys, ids, p, yo, obj, p, k, True, L)
        b = first_k(tree, size, ys, ids, p, yo, obj, p, k, False, R)
        set_value(tree, size, ys, ids, p, yn)
        a2 = 0
        b2 = 0
        if yn < np.inf:
            a2 = first_k(tree, size, ys, ids, p, yn, obj, p, k, True, L2)
            b2 = first_k(tree, size, ys, ids, p, yn, obj, p, k, False, R2)
        cnt[C_FIRST_K] += 4 if yn < np.inf else 2
        m = report(pbox, pstart, pend, plo, phi, leaves, _lbound(xs, L[k - 1] if a == k else -1), xi,
                   xi, _rbound(xs, R[k - 1] if b == k else n, n), cand)
        for t in range(m):
            s = cand[t]
            if _rank_below(xs, L, a, R, b, plo[s], phi[s]) > k - 1:
                continue
            mf, mi, nm = _push(mf, mi, nm, nan, nan, nan, nan, yn, obj, ev_idx[j], pkey[s], UNICAST)
            if yn < np.inf and _rank_below(xs, L2, a2, R2, b2, plo[s], phi[s]) <= k - 1:
                continue
            cnt[C_MIN_Y] += 1
            sa = np.searchsorted(xs[:n], plo[s], side="left")
            sb = np.searchsorted(xs[:n], phi[s], side="right")
            c = topk_range(tree, size, ys, ids, sa, sb, k, top)
            if c == k:
                h = top[k - 1]
                mf, mi, nm = _push(mf, mi, nm, nan, nan, nan, nan, ys[h], ids[h], ev_idx[j], pkey[s], UNICAST)
    return mf[:nm], mi[:nm]

"""Splitting an overflowing leaf bucket into L/O/R (Alg. 5; :mod:`.update` calls it): the
exhaustive split (minimum overlap length; every split point of both orderings in
O(n log n) with Fenwick trees over lower bounds; both sides need ``alpha`` of the bucket) or
the approximate one, with the space-clustering fallback (halving the bucket).
"""
from __future__ import annotations

import numba
import numpy as np

from .nodes import INF


# ----------------------------------------------------------------------------- splitting
@numba.njit(cache=True)
def _fen_add(cnt, mx, i, h):
    """Fenwick trees ``cnt``/``mx`` (counts, maxima): one more entry at position ``i`` with value ``h``."""
    n = cnt.shape[0]
    i += 1
    while i <= n:
        cnt[i - 1] += 1
        if h > mx[i - 1]:
            mx[i - 1] = h
        i += i & (-i)


@numba.njit(cache=True)
def _fen_query(cnt, mx, i):
    """(count, max) over positions < i."""
    c = 0
    m = -INF
    while i > 0:
        c += cnt[i - 1]
        if mx[i - 1] > m:
            m = mx[i - 1]
        i -= i & (-i)
    return c, m


@numba.njit(cache=True)
def _best_split_up(lo, hi, alpha):
    """The exhaustive split over the ordering by upper bound (left side = first I).
    Returns (overlap length, overlap count, imbalance, I, threshold) of the best valid I, or
    overlap = -1 when none is valid. Every I in O(log n) with Fenwick trees over the lower
    bounds of the suffix (count and max upper bound of those <= threshold)."""
    n = lo.shape[0]
    order = np.argsort(hi, kind="mergesort")
    l_s = lo[order]
    h_s = hi[order]
    lo_sorted = np.sort(lo)
    rank = np.searchsorted(lo_sorted, l_s)              # rank of each element's lower bound
    cnt = np.zeros(n, np.int64)
    mx = np.full(n, -INF)
    suf_min = INF
    best_ov, best_oc, best_imb, best_i, best_t = -1.0, 0, 0, -1, 0.0
    for I in range(n - 1, alpha - 1, -1):
        _fen_add(cnt, mx, rank[I], h_s[I])
        suf_min = min(suf_min, l_s[I])
        if I > n - alpha:
            continue
        t = h_s[I - 1]
        r = np.searchsorted(lo_sorted, t, side="right")
        oc, omax = _fen_query(cnt, mx, r)
        size = n - I
        rc = size - oc
        if rc < alpha:
            continue
        ov = 0.0 if oc == 0 else omax - suf_min
        imb = abs(I - rc)
        if (best_ov < 0 or ov < best_ov or (ov == best_ov and (oc < best_oc or (oc == best_oc and imb < best_imb)))):
            best_ov, best_oc, best_imb, best_i, best_t = ov, oc, imb, I, t
    return best_ov, best_oc, best_imb, best_i, best_t


@numba.njit(cache=True)
def _split(lo, hi, alpha, exhaustive, blo, bhi):
    """Sides (0 overlap, 1 left, 2 right) of a leaf bucket's expressions, or an empty array
    when no split separates anything. ``blo, bhi``: the bucket on the active dimension."""
    n = lo.shape[0]
    side = np.zeros(n, np.int8)
    found = False
    if exhaustive:
        a = _best_split_up(lo, hi, alpha)
        b = _best_split_up(-hi, -lo, alpha)              # the mirrored ordering
        use_b = b[0] >= 0 and (a[0] < 0 or b[0] < a[0] or (b[0] == a[0] and (b[1] < a[1] or (b[1] == a[1] and b[2] < a[2]))))
        if a[0] >= 0 or b[0] >= 0:
            found = True
            if not use_b:
                # left: the first I by (hi, stable); they all end at or before t
                order = np.argsort(hi, kind="mergesort")
                t = a[4]
                for j in range(n):
                    e = order[j]
                    if j < a[3]:
                        side[e] = 1
                    elif lo[e] > t:
                        side[e] = 2
            else:
                order = np.argsort(-lo, kind="mergesort")
                t = -b[4]                                  # right side starts at or after t
                for j in range(n):
                    e = order[j]
                    if j < b[3]:
                        side[e] = 2
                    elif hi[e] < t:
                        side[e] = 1
    else:
        # approximate: leftmost by upper bound to the left, rightmost by lower bound to the
        # right, alternately; what would touch the other side stays in the overlap bucket
        up = np.argsort(hi, kind="mergesort")
        dn = np.argsort(-lo, kind="mergesort")
        done = np.zeros(n, np.bool_)
        llo, lhi, rlo, rhi = INF, -INF, INF, -INF
        nl = nr = 0
        i = j = 0
        turn = 0
        left = n
        while left > 0:
            if turn == 0:
                while done[up[i]]:
                    i += 1
                e = up[i]
                if lo[e] <= rhi and hi[e] >= rlo:
                    side[e] = 0
                else:
                    side[e] = 1
                    nl += 1
                    llo = min(llo, lo[e])
                    lhi = max(lhi, hi[e])
            else:
                while done[dn[j]]:
                    j += 1
                e = dn[j]
                if lo[e] <= lhi and hi[e] >= llo:
                    side[e] = 0
                else:
                    side[e] = 2
                    nr += 1
                    rlo = min(rlo, lo[e])
                    rhi = max(rhi, hi[e])
            done[e] = True
            left -= 1
            turn = 1 - turn
        # an element placed left before a later right one overlapped it goes to the middle
        for e in range(n):
            if side[e] == 1 and hi[e] >= rlo:
                side[e] = 0
                nl -= 1
            elif side[e] == 2 and lo[e] <= lhi:
                side[e] = 0
                nr -= 1
        found = nl >= alpha and nr >= alpha
        if not found:
            side[:] = 0
    if not found:
        # space clustering: halve the bucket (the median of the finite bounds if it is unbounded)
        if np.isfinite(blo) and np.isfinite(bhi):
            s = 0.5 * (blo + bhi)
        else:
            fin = np.concatenate((lo[np.isfinite(lo)], hi[np.isfinite(hi)]))
            if fin.shape[0] == 0:
                return np.zeros(0, np.int8)
            s = np.median(fin)
        nl = nr = 0
        for e in range(n):
            if hi[e] < s:
                side[e] = 1
                nl += 1
            elif lo[e] > s:
                side[e] = 2
                nr += 1
            else:
                side[e] = 0
        if nl == 0 and nr == 0:
            return np.zeros(0, np.int8)
        return _mark_space(side)
    return side


@numba.njit(cache=True)
def _mark_space(side):
    """The sides of a space-clustering split, shifted by 3 so that the caller counts such
    splits apart: ``side`` int64[n], updated in place and returned."""
    # space splits are reported with side + 3 so that the caller can count them
    for e in range(side.shape[0]):
        side[e] += 3
    return side

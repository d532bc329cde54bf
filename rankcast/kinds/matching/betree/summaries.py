"""Upper-bound summaries of the BE*-tree (package docstring, "Shape" and "Bounds"): per l-node
and per p-node, for ``weighted`` the largest predicate weight per attribute and size class
(sorted (size, attribute) keys, pooled), for ``static`` the largest score. Kept up per
expression (:func:`_sum_add`) in small batches, or recomputed exactly once at the end of a
large one (:func:`_exact_summaries`, :mod:`.update`).
"""
from __future__ import annotations

import numba
import numpy as np

from ..core import STATIC, lower_bound
from .nodes import (C_ALIVE, C_DC, C_DEP, C_DS, C_L, C_LH, C_R, F_CS, F_PS, F_WM, INF, I_C, I_DIRTY, I_DP, I_NUM,
                    I_P, I_WA, NC, NMAX, NP, P_ALIVE, P_OWN, P_ROOT, Q_LAZY, Q_MODE, SZ_CAP, U_NDIRTY, U_W, WC, WK,
                    WS, _grow_f, _grow_i, _touch_c, _touch_p)


# ----------------------------------------------------------------------------- summaries
@numba.njit(cache=True, inline="always")
def _lower_bound(AR, base, stride, n, a):
    """The first of ``n`` keys ``AR[base + stride * i]`` (ascending) not below ``a``."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) >> 1
        if AR[base + stride * mid] < a:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True, inline="always")
def _sort_desc(tb, n):
    """``tb[:n]`` sorted descending in place (insertion sort: n is an event's size)."""
    for i in range(1, n):
        x = tb[i]
        y = i - 1
        while y >= 0 and tb[y] < x:
            tb[y + 1] = tb[y]
            y -= 1
        tb[y + 1] = x


@numba.njit(cache=True, inline="always")
def _wkey(size, attr):
    """The summary key of attribute ``attr`` in the class of expressions of ``size``
    predicates: sorted by size descending, then attribute."""
    return ((SZ_CAP - size) << 32) | attr


@numba.njit(cache=True)
def _sum_add(IL, FL, q, rec, node, s, p_start, p_end, p_attr, p_w, score):
    """Expression ``s`` into the summary of c-node (``rec`` = I_C) or p-node ``node``
    (``weighted``: its size class, package docstring, "Bounds"). In a lazy batch
    (``q[Q_LAZY]``) the node is only marked changed: ``_exact_summaries`` recomputes it."""
    if q[Q_LAZY] > 0:
        if rec == I_C:
            _touch_c(IL, node)
        else:
            _touch_p(IL, node)
        return
    if int(q[Q_MODE]) == STATIC:
        S = FL[F_CS] if rec == I_C else FL[F_PS]
        if S[node] < score[s]:
            S[node] = score[s]
            if rec == I_C:
                _touch_c(IL, node)
            else:
                _touch_p(IL, node)
        return
    base = node * (NC if rec == I_C else NP)
    if rec == I_C:
        _touch_c(IL, node)
    else:
        _touch_p(IL, node)
    R = IL[rec]
    size = p_end[s] - p_start[s]
    if R[base + NMAX] < size:
        R[base + NMAX] = size
    # one pass: the keys already there get their maxima raised in place, the others are
    # gathered sorted (an attribute twice kept once, with its larger weight) in the scratch at
    # the end of the pool, past its last summary, then merged in at once from the back (one
    # shift or relocation of the summary per expression, not one per key)
    ws, wc = R[base + WS], R[base + WC]
    sk = IL[I_NUM][U_W]
    _grow_i(IL, I_WA, sk + size)
    _grow_f(FL, F_WM, sk + size, 0.0)
    WA = IL[I_WA]
    WM = FL[F_WM]
    n = 0
    c0 = lower_bound(WA, ws, ws + wc, _wkey(size, 0))          # the expression's size class:
    c1 = lower_bound(WA, c0, ws + wc, _wkey(size - 1, 0))      # its keys are looked up there only
    for p in range(p_start[s], p_end[s]):
        key = _wkey(size, p_attr[p])
        w = p_w[p]
        lo = lower_bound(WA, c0, c1, key)
        if lo < c1 and WA[lo] == key:
            if WM[lo] < w:
                WM[lo] = w
            continue
        y = sk + n - 1                                 # insertion sort into the scratch
        while y >= sk and WA[y] > key:
            y -= 1
        if y >= sk and WA[y] == key:                   # the attribute again: its larger weight
            if WM[y] < w:
                WM[y] = w
            continue
        for x in range(sk + n - 1, y, -1):
            WA[x + 1] = WA[x]
            WM[x + 1] = WM[x]
        WA[y + 1] = key
        WM[y + 1] = w
        n += 1
    if n > 0:
        _sum_merge(IL, FL, R, base, sk, n)


@numba.njit(cache=True)
def _sum_merge(IL, FL, R, base, sk, n):
    """The ``n`` sorted new keys at ``sk`` (the scratch past the pool's last summary, with
    their weights) merged into the summary of record ``base`` of ``R`` (relocated to the end
    of the pool, doubled, when they do not fit: the merge from the back then writes over the
    scratch only where it has already been read)."""
    ws, wc, wk = R[base + WS], R[base + WC], R[base + WK]
    WA = IL[I_WA]
    WM = FL[F_WM]
    dst = ws
    if wc + n > wk:                                    # relocate to the end of the pool, doubled
        num = IL[I_NUM]
        nk = max(4, 2 * wk)
        while nk < wc + n:
            nk *= 2
        nb = num[U_W]
        num[U_W] = nb + nk
        _grow_i(IL, I_WA, nb + nk)
        _grow_f(FL, F_WM, nb + nk, 0.0)
        WA = IL[I_WA]
        WM = FL[F_WM]
        dst = nb
        R[base + WS] = nb
        R[base + WK] = nk
    # merge from the back: old entries ws..ws+wc and the n new ones into dst..dst+wc+n
    i = wc - 1
    j = n - 1
    o = wc + n - 1
    while j >= 0:
        if i >= 0 and WA[ws + i] > WA[sk + j]:
            WA[dst + o] = WA[ws + i]
            WM[dst + o] = WM[ws + i]
            i -= 1
        else:
            WA[dst + o] = WA[sk + j]
            WM[dst + o] = WM[sk + j]
            j -= 1
        o -= 1
    if dst != ws:
        for x in range(i + 1):
            WA[dst + x] = WA[ws + x]
            WM[dst + x] = WM[ws + x]
    R[base + WC] = wc + n


@numba.njit(cache=True)
def _lnode_summary(IL, FL, q, c, NEXT, p_start, p_end, p_attr, p_w, score):
    """Recompute the l-node summary of ``c`` exactly from its expressions (in a lazy batch:
    only mark it changed, ``_exact_summaries`` does it once at the batch's end)."""
    _touch_c(IL, c)
    if q[Q_LAZY] > 0:
        return
    CI = IL[I_C]
    CI[c * NC + WC] = 0
    CI[c * NC + NMAX] = 0
    FL[F_CS][c] = -INF
    s = CI[c * NC + C_LH]
    while s >= 0:
        _sum_add(IL, FL, q, I_C, c, s, p_start, p_end, p_attr, p_w, score)
        s = NEXT[s]


@numba.njit(cache=True)
def _sum_put(IL, FL, R, base, tk, tw, n):
    """The sorted, deduplicated keys ``tk[:n]`` (weights ``tw``) as the summary of record
    ``base`` of ``R``: in place when they fit its capacity, else in a region of exactly ``n``
    at the end of the pool."""
    if n > R[base + WK]:
        num = IL[I_NUM]
        nb = num[U_W]
        num[U_W] = nb + n
        _grow_i(IL, I_WA, nb + n)
        _grow_f(FL, F_WM, nb + n, 0.0)
        R[base + WS] = nb
        R[base + WK] = n
    WA = IL[I_WA]
    WM = FL[F_WM]
    ws = R[base + WS]
    for i in range(n):
        WA[ws + i] = tk[i]
        WM[ws + i] = tw[i]
    R[base + WC] = n


@numba.njit(cache=True)
def _sorted_unique(tk, tw, m, ok, ow):
    """``tk[:m]`` sorted into ``ok`` with each key once (its largest weight from ``tw`` in
    ``ow``); returns how many."""
    o = np.argsort(tk[:m])
    n = 0
    for i in range(m):
        j = o[i]
        k = tk[j]
        w = tw[j]
        if n > 0 and ok[n - 1] == k:
            if ow[n - 1] < w:
                ow[n - 1] = w
        else:
            ok[n] = k
            ow[n] = w
            n += 1
    return n


@numba.njit(cache=True)
def _dense_unique(tk, tw, m, ok, ow, pos, na):
    """``_sorted_unique`` through ``pos`` (-1 throughout, again on return), a place per key
    (size * ``na`` + attribute): each key found once in one pass, then only the distinct keys
    sorted."""
    n = 0
    for i in range(m):
        k = tk[i]
        x = (SZ_CAP - (k >> 32)) * na + (k & 0xFFFFFFFF)
        j = pos[x]
        if j < 0:
            pos[x] = n
            ok[n] = k
            ow[n] = tw[i]
            n += 1
        elif ow[j] < tw[i]:
            ow[j] = tw[i]
    keys = np.sort(ok[:n])
    for i in range(n):
        tw[i] = ow[pos[(SZ_CAP - (keys[i] >> 32)) * na + (keys[i] & 0xFFFFFFFF)]]
    for i in range(n):
        k = keys[i]
        pos[(SZ_CAP - (k >> 32)) * na + (k & 0xFFFFFFFF)] = -1
        ok[i] = k
        ow[i] = tw[i]
    return n


@numba.njit(cache=True)
def _unique(tk, tw, m, ok, ow, pos, na):
    """The (key, weight) pairs ``tk/tw[:m]`` with one entry per key, the largest weight, into
    ``ok/ow``: through a place per key (``pos``, ``na`` attributes) when ``pos`` is given, else
    by sorting; returns the count."""
    if pos.shape[0] > 0:
        return _dense_unique(tk, tw, m, ok, ow, pos, na)
    return _sorted_unique(tk, tw, m, ok, ow)


@numba.njit(cache=True)
def _room(tk, tw, m, need):
    """``tk/tw`` with room for ``need`` entries (their first ``m`` kept; doubled at least when
    grown); returns (tk, tw)."""
    if need <= tk.shape[0]:
        return tk, tw
    nk = max(need, 2 * tk.shape[0])
    k2 = np.empty(nk, np.int64)
    w2 = np.empty(nk)
    k2[:m] = tk[:m]
    w2[:m] = tw[:m]
    return k2, w2


@numba.njit(cache=True)
def _put_unique(IL, FL, R, base, tk, tw, m, ok, ow, pos, na):
    """The gathered keys ``tk/tw[:m]``, deduplicated and sorted (``_unique`` into ``ok/ow``,
    grown to ``tk``'s size when short), as the summary of record ``base`` of ``R``; returns
    (ok, ow)."""
    if ok.shape[0] < m:
        ok = np.empty(tk.shape[0], np.int64)
        ow = np.empty(tk.shape[0])
    n = _unique(tk, tw, m, ok, ow, pos, na)
    _sum_put(IL, FL, R, base, ok, ow, n)
    return ok, ow


@numba.njit(cache=True)
def _gather(IL, FL, R, base, tk, tw, m):
    """The summary of record ``base`` of ``R`` appended to ``tk/tw[:m]`` (grown as needed);
    returns (tk, tw, m)."""
    ws, wc = R[base + WS], R[base + WC]
    tk, tw = _room(tk, tw, m, m + wc)
    WA = IL[I_WA]
    WM = FL[F_WM]
    for i in range(wc):
        tk[m + i] = WA[ws + i]
        tw[m + i] = WM[ws + i]
    return tk, tw, m + wc


@numba.njit(cache=True)
def _exact_summaries(IL, FL, q, NEXT, p_start, p_end, p_attr, p_w, score, pos, na):
    """The end of a lazy batch (``q[Q_LAZY]``: ``_sum_add`` and ``_lnode_summary`` only
    marked nodes changed): the summary of every node changed since the last view refresh (the
    view's dirty list, a superset of those whose summaries the batch changed) recomputed
    exactly, once: each c-node's l-node summary from its expressions, then each p-node's
    bottom-up (deepest owners first) as the union of the l-node summaries of its
    c-directory's c-nodes and the summaries of their p-nodes (largest weight per key; the most
    predicates and the static bound likewise the largest): the keys gathered, deduplicated
    through ``pos`` (a place per (size, attribute), ``na`` attributes; empty: by a sort of
    all of them instead), the distinct ones sorted. Nodes not
    changed keep theirs: an l-node summary is always exact, a p-node summary at least an upper
    bound (a deletion leaves it stale), so the union is a bound too, and after inserts only
    every summary equals the incremental upkeep's."""
    num = IL[I_NUM]
    nd = num[U_NDIRTY]
    DL = IL[I_DIRTY]
    static = int(q[Q_MODE]) == STATIC
    tk = np.empty(256, np.int64)
    tw = np.empty(256)
    ok = np.empty(256, np.int64)
    ow = np.empty(256)
    pnodes = np.empty(nd, np.int64)
    n_p = 0
    for i in range(nd):
        x = DL[i]
        if x & 1 == 1:
            pnodes[n_p] = x >> 1
            n_p += 1
            continue
        c = x >> 1
        CI = IL[I_C]
        if CI[c * NC + C_ALIVE] != 1:
            continue
        m = 0
        most = 0
        best = -INF
        s = CI[c * NC + C_LH]
        while s >= 0:
            size = p_end[s] - p_start[s]
            if static:
                best = max(best, score[s])
            else:
                most = max(most, size)
                tk, tw = _room(tk, tw, m, m + size)
                for p in range(p_start[s], p_end[s]):
                    tk[m] = _wkey(size, p_attr[p])
                    tw[m] = p_w[p]
                    m += 1
            s = NEXT[s]
        if static:
            FL[F_CS][c] = best
            continue
        CI[c * NC + NMAX] = most
        ok, ow = _put_unique(IL, FL, CI, c * NC, tk, tw, m, ok, ow, pos, na)
    # p-nodes, deepest owners first: a p-node's c-directory holds the p-nodes of the next depth
    PI = IL[I_P]
    CI = IL[I_C]
    dep = np.empty(n_p, np.int64)
    for i in range(n_p):
        dep[i] = -CI[PI[pnodes[i] * NP + P_OWN] * NC + C_DEP]
    order = np.argsort(dep)
    stack = np.empty(64, np.int64)
    DP = IL[I_DP]
    for i in range(n_p):
        p = pnodes[order[i]]
        PI = IL[I_P]
        CI = IL[I_C]
        if PI[p * NP + P_ALIVE] != 1:
            continue
        m = 0
        most = 0
        best = -INF
        stack[0] = PI[p * NP + P_ROOT]
        ns = 1
        while ns > 0:
            ns -= 1
            c = stack[ns]
            ds, dc = CI[c * NC + C_DS], CI[c * NC + C_DC]
            if ns + 2 > stack.shape[0]:
                bigger = np.empty(2 * stack.shape[0], np.int64)
                bigger[:ns] = stack[:ns]
                stack = bigger
            for ch in (CI[c * NC + C_L], CI[c * NC + C_R]):
                if ch >= 0:
                    stack[ns] = ch
                    ns += 1
            if static:
                best = max(best, FL[F_CS][c])
                for x in range(ds, ds + dc):
                    best = max(best, FL[F_PS][DP[x]])
                continue
            most = max(most, CI[c * NC + NMAX])
            tk, tw, m = _gather(IL, FL, CI, c * NC, tk, tw, m)
            for x in range(ds, ds + dc):
                most = max(most, PI[DP[x] * NP + NMAX])
                tk, tw, m = _gather(IL, FL, PI, DP[x] * NP, tk, tw, m)
        if static:
            FL[F_PS][p] = best
            continue
        PI[p * NP + NMAX] = most
        ok, ow = _put_unique(IL, FL, PI, p * NP, tk, tw, m, ok, ow, pos, na)

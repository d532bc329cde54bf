"""Match view: matching does not walk the node tables. Every c-node has a hot row (its active
dimension's own and subtree bounds, its c-directory children, the offset of its block, and
the most predicates of an expression in its l-node or below its p-nodes (``static``: their
bound), so that a bucket that cannot beat the k-th score is passed over unread; one cache
line, all the c-directory search reads) and a contiguous block in one float arena (its
p-directory, its l-node summary, then its l-node's expressions as packed predicate rows, each
behind a header with its id and static score, so that a match needs no random read of the id
table), every p-node a small block (summary, root, attribute). A p-directory entry holds its
p-node's block place and most predicates or static bound (a p-node's change therefore marks
its owner too) and its
c-directory box on the p-node's attribute (the root's subtree box: every expression below has
its interval there), so a p-node whose box misses the event's value, or whose ``G`` of its
most predicates cannot beat the k-th score, is passed over without reading its block; a
c-directory root's change therefore marks its owner c-node too. Updates mark the nodes they change (a dirty
list); before the next match the changed nodes' blocks are rewritten at the end of the arena,
or everything anew in depth-first order when most nodes changed (a build) or the arena is half
garbage; every block starts a 64-byte cache line (the arena's copy is line-aligned). A visited bucket is thus one sequential read instead of a pointer chase per
expression. The search hides what latency it can behind other work: a c-node's p-nodes on
the event's attributes are found first and their blocks prefetched together, then its l-node
bounded and scanned, then their bounds computed; a pushed p-node's c-directory root row and a
c-directory node's children rows are prefetched, and so are the next rows of the p-node at the
heap's top while a popped one is searched; a popped p-node's c-directory is searched whole first (the blocks of the
buckets holding the event's value prefetched as they are found), then those buckets visited.
The search itself runs without reference counting (``_match_events``). Summaries are
32-bit words (``_write_sum``): attributes and class headers as uint32, weights as float32
rounded up (the smallest float32 at or above the weight: a bound still, and only bounds read
them; scores come from the float64 weights of the expression rows), half the cache lines of
float64 pairs (at 1M: the arena 442 MiB instead of 559, top-1 and top-5 0.88x the time side by
side on one tree). A class whose attributes all fit 16 bits (any tree of fewer than 65,536
attributes) is *packed*: one 32-bit word per (attribute, weight), the weight as a 16-bit
multiple of the class's scale (its largest stored weight / 65,534, a float32 rounded up),
rounded up, so still a bound, within 1/65,534 of the class's largest weight (at 1M: the arena
401 MiB instead of 442, top-1 0.96x and top-5 0.97x the time side by side). A short summary class's attributes are read in one sequential pass (with A = 5 most classes are short). A
long one (at least ``long_class`` = 32 attributes besides the path's: the top levels' classes
hold hundreds) is kept as 32-attribute bit words only (which attributes), and its bound takes
each attribute's global maximum weight (the one ``G`` uses) instead of the class's own: the
event's attributes, by that product largest first, are taken while the class has them until
it has enough. That still bounds the class (its weights are at most the global ones; with the
paper's weights, where an attribute weighs nearly the same everywhere, it is as tight), reads
a few words instead of scattered weights and needs no sort (at 1M, side by side on one tree:
0.94x the time at top-1 and top-5; a few more nodes visited, 75 instead of 73 at top-5).
A node with few expressions below (at most ``list_cap`` = 128: an l-node, a deep p-node's
subtree) writes its packed short classes as *list classes*: the path's words as before, then
each expression's own other attributes (``size - path`` words each) instead of their union.
Its bound is the path's products plus the best sum over the expressions whose attributes the
event all has (one it misses cannot match): the exact attribute-set bound, where the union's
per-attribute maxima mix attributes of different expressions. A p-node's view is therefore
rewritten whenever an expression enters or leaves below it while it has at most
``list_cap`` (``_rank_add``), so that its lists hold exactly the expressions below it (at
1M, side by side on one tree: top-1 0.70x and top-5 0.64x the time; pops 19.7 instead of 37.4
at top-5, the arena 417 MiB instead of 401).
"""
from __future__ import annotations

import numba
import numpy as np

from ..core import IN, NIN, STATIC, find_sorted
from .nodes import (B_OH, B_OL, B_SH, B_SL, C_ALIVE, C_BOX, C_DC, C_DEP, C_DIRTY, C_DS, C_L, C_LH, C_R, F_AR, F_BX,
                    F_CS, F_HV, F_PS, F_WM, INF, I_BA, I_C, I_DA, I_DIRTY, I_DP, I_NUM, I_P, I_PV, I_WA, LISTC, NC,
                    ND, NMAX, NP, NV, PACKED, PACK_ATTRS, PACK_Q, P_ALIVE, P_ATTR, P_CNT, P_DIRTY, P_ROOT,
                    Q_VSHARE, Q_VSLACK, SZ_CAP, U_AR, U_ARLIVE, U_C, U_LISTC, U_LIVEC, U_LIVEP, U_LONG, U_NDIRTY,
                    U_P, VIEW_ALIGN, V_B, V_L, V_M, V_OH, V_OL, V_R, V_SH, V_SL, WC, WS, _grow_f, _grow_i,
                    _grow_view)
from .summaries import _wkey


# ----------------------------------------------------------------------------- the match view
@numba.njit(cache=True, inline="always")
def _on_path(BA, pb, pd, a):
    """Whether attribute ``a`` is one of the path's ``BA[pb:pb + pd]``."""
    for j in range(pb, pb + pd):
        if BA[j] == a:
            return True
    return False


@numba.njit(cache=True, inline="always")
def _mark_path(MK, BA, pb, pd):
    """The path ``BA[pb:pb + pd]`` marked in ``MK`` (when not empty: a place per attribute
    below ``MK.shape[0] - 1``, the current stamp last; ``_full_write``), so that ``_on_path_m``
    is one read instead of a pass over the path."""
    n = MK.shape[0] - 1
    if n >= 0:
        t = MK[n] + 1
        MK[n] = t
        for j in range(pb, pb + pd):
            if BA[j] < n:
                MK[BA[j]] = t


@numba.njit(cache=True, inline="always")
def _on_path_m(MK, BA, pb, pd, a):
    """``_on_path`` through the marks of ``_mark_path`` (the path last marked) where ``MK``
    holds a place for ``a``."""
    n = MK.shape[0] - 1
    if a < n:
        return MK[a] == MK[n]
    return _on_path(BA, pb, pd, a)


@numba.njit(cache=True)
def _class_shape(WA, i0, i1, BA, pb, pd, MK):
    """Of the size class ``WA[i0:i1]`` under the path ``BA[pb:pb + pd]``: its path attributes,
    its other attributes, the first and the number of 32-attribute words they span
    (``MK``: ``_on_path_m``)."""
    npath = 0
    amin, amax = -1, -1
    for x in range(i0, i1):
        a = WA[x] & 0xFFFFFFFF
        if _on_path_m(MK, BA, pb, pd, a):
            npath += 1
        else:
            if amin < 0:
                amin = a
            amax = a
    if amin < 0:
        return npath, 0, 0, 0
    return npath, i1 - i0 - npath, amin >> 5, (amax >> 5) - (amin >> 5) + 1


@numba.njit(cache=True, inline="always")
def _class_packed(WA, i1):
    """Whether the size class ending at ``WA[i1 - 1]`` (sorted by attribute) is packed: all its
    attributes fit 16 bits."""
    return (WA[i1 - 1] & 0xFFFFFFFF) < PACK_ATTRS


@numba.njit(cache=True, inline="always")
def _quant(w, sc):
    """The fewest multiples of ``sc`` at or above ``w`` (>= 0): a packed weight, still a bound.
    A scale beyond float32 (weights above about 2e43) is infinite: one multiple, an infinite
    bound, as an unpacked float32 weight beyond its range."""
    if sc == np.inf:
        return 1
    q = int(np.ceil(w / sc))
    if q * sc < w:
        q += 1
    return q


@numba.njit(cache=True, inline="always")
def _stack_room(stack, ns, more):
    """``stack`` (``ns`` held) with room for ``more`` entries: itself, or a copy twice that
    size (a c-node's children and its p-nodes' roots, pushed by a walk of the tree)."""
    if ns + more <= stack.shape[0]:
        return stack
    bigger = np.empty(2 * (ns + more), np.int64)
    bigger[:ns] = stack[:ns]
    return bigger


@numba.njit(cache=True, inline="always")
def _gather_l(CI, c, NEXT, XS, nx):
    """The expression slots of c-node ``c``'s l-node appended to ``XS[:nx]``: the new count,
    or -1 when ``XS`` cannot hold them (``_below``)."""
    s = CI[c * NC + C_LH]
    while s >= 0:
        if nx == XS.shape[0]:
            return -1
        XS[nx] = s
        nx += 1
        s = NEXT[s]
    return nx


@numba.njit(cache=True)
def _below(IL, isp, node, NEXT, XS, p_start, p_end, p_attr, BA, pb, pd, MK):
    """The expression slots below p-node ``node`` (``isp``: in its c-directory and every
    p-node below it) or in c-node ``node``'s l-node, into ``XS``; their number, or -1 (no list
    class then) when there are more than ``XS`` holds or one has an attribute twice (its
    predicates off the path ``BA[pb:pb + pd]`` are not its size minus the path's; ``MK``:
    the path's marks, ``_mark_path``, or empty)."""
    cap = XS.shape[0]
    if cap == 0:
        return -1                              # list_cap 0: no list classes
    CI = IL[I_C]
    if not isp:
        nx = _gather_l(CI, node, NEXT, XS, 0)
        return nx if nx < 0 else _once(XS, nx, p_start, p_end, p_attr, BA, pb, pd, MK)
    PI = IL[I_P]
    if PI[node * NP + P_CNT] > cap:
        return -1
    DP = IL[I_DP]
    stack = np.empty(64, np.int64)
    stack[0] = PI[node * NP + P_ROOT]
    ns = 1
    nx = 0
    while ns > 0:
        ns -= 1
        c = stack[ns]
        nx = _gather_l(CI, c, NEXT, XS, nx)
        if nx < 0:
            return -1
        ds, dc = CI[c * NC + C_DS], CI[c * NC + C_DC]
        stack = _stack_room(stack, ns, dc + 2)
        for ch in (CI[c * NC + C_L], CI[c * NC + C_R]):
            if ch >= 0:
                stack[ns] = ch
                ns += 1
        for x in range(ds, ds + dc):
            stack[ns] = PI[DP[x] * NP + P_ROOT]
            ns += 1
    return _once(XS, nx, p_start, p_end, p_attr, BA, pb, pd, MK)


@numba.njit(cache=True)
def _once(XS, nx, p_start, p_end, p_attr, BA, pb, pd, MK):
    """``nx``, or -1 when an expression of ``XS[:nx]`` has other than its size minus ``pd``
    predicates off the path ``BA[pb:pb + pd]`` (an attribute twice: no list class). ``MK``: the
    path's marks (``_mark_path``, ``_on_path_m``: at 1M the full view's gathering 1.3 s ->
    0.3 s), or empty."""
    for i in range(nx):
        s = XS[i]
        o = 0
        for p in range(p_start[s], p_end[s]):
            if not _on_path_m(MK, BA, pb, pd, p_attr[p]):
                o += 1
        if o != p_end[s] - p_start[s] - pd:
            return -1
    return nx


@numba.njit(cache=True)
def _list_count(XS, nx, size, npath, p_start, p_end):
    """Whether the packed short size class ``size`` (``npath`` path attributes) of a node
    whose expressions below are ``XS[:nx]`` is written as a list class: its number of
    expressions if so, else -1. A list class lists each expression's own ``size -
    npath`` other attributes (``_below``: each has exactly that many), where there is at least
    one to list. (Lists only where they take at most 1, 1.5, 2, 3 or 4 times
    the union's words were slower on the bench's 1M tree.)"""
    need = size - npath
    if nx < 0 or need < 1:
        return -1
    n = 0
    for i in range(nx):
        s = XS[i]
        n += p_end[s] - p_start[s] == size
    return n


@numba.njit(cache=True)
def _sum_floats(IL, R, base, mode, pb, pd, XS, nx, p_start, p_end, p_attr, MK):
    """Floats of the view of the summary of record ``base`` of ``R`` under the path
    ``BA[pb:pb + pd]`` (``_write_sum``)."""
    if mode == STATIC:
        return 0
    WA, BA = IL[I_WA], IL[I_BA]
    long_from = IL[I_NUM][U_LONG]
    ws, wc = R[base + WS], R[base + WC]
    n = 0
    i0 = ws
    while i0 < ws + wc:
        i1 = i0 + 1
        while i1 < ws + wc and (WA[i1] >> 32) == (WA[i0] >> 32):
            i1 += 1
        npath, nother, _, nw = _class_shape(WA, i0, i1, BA, pb, pd, MK)
        pk = _class_packed(WA, i1)
        if pk and nother < long_from:
            size = SZ_CAP - (WA[i0] >> 32)
            nl = _list_count(XS, nx, size, npath, p_start, p_end)
            if nl >= 0:                         # a list class: header, scale, path words, the lists
                n += 5 + npath + nl * (size - npath)
                i0 = i1
                continue
        per = 1 if pk else 2
        n += 4 + pk + per * npath               # a packed class's body starts with its scale
        n += 1 + nw if nother >= long_from else per * nother
        i0 = i1
    return (n + 1) // 2                         # 32-bit words (_write_sum), two a float


@numba.njit(cache=True)
def _p_sum_floats(IL, p, mode, NEXT, p_start, p_end, p_attr, XS, MK):
    """Floats of the view of p-node ``p``'s summary (its path: its root's)."""
    CI = IL[I_C]
    r = IL[I_P][p * NP + P_ROOT]
    pb, pd = CI[r * NC + C_BOX], CI[r * NC + C_DEP]
    _mark_path(MK, IL[I_BA], pb, pd)
    nx = _below(IL, True, p, NEXT, XS, p_start, p_end, p_attr, IL[I_BA], pb, pd, MK) if mode != STATIC else -1
    return _sum_floats(IL, IL[I_P], p * NP, mode, pb, pd, XS, nx, p_start, p_end, p_attr, MK)


@numba.njit(cache=True, inline="always")
def _put_up(S, SU, i, w):
    """``w`` (non-negative) at 32-bit place ``i`` as the smallest float32 at or above it: a
    float32 rounded to nearest may lie below ``w``, and a summary must bound it."""
    S[i] = w
    if S[i] < w:
        SU[i] += 1                              # the next float32 up (w >= 0, finite)


@numba.njit(cache=True)
def _write_sum(IL, FL, R, base, pb, pd, pos, XS, nx, p_start, p_end, p_attr, p_w, MK):
    """The summary of record ``base`` of ``R`` in the view at ``pos`` (returns the end) as
    32-bit words (``AR.view(uint32)`` from ``2 * pos``; half the cache lines of floats): per
    size class, largest first, (size, path attributes, body words, bit words), then the path's
    (attribute, weight) pairs (``BA[pb:pb + pd]``: every expression below has them), then the
    others. A weight is a float32 rounded up (``_put_up``: the bound stays a bound; scores are
    computed from the float64 weights of the expression rows). A short class (fewer others
    than ``num[U_LONG]``; bit words 0) lists them as (attribute, weight) pairs by attribute. A
    long one holds the first 32-attribute word they span, then per word the bit set of its
    attributes, and no weights: its bound takes the global maximum weight of each attribute
    (``_vbound``). An odd word count ends with a 0 word. A packed class (its attributes all
    below ``PACK_ATTRS``; flag ``PACKED`` in its bit-word count) has its body start with a
    float32 scale (its largest stored weight / ``PACK_Q``, rounded up) and holds each pair as
    one word, attribute | (the fewest multiples of the scale at or above the weight) << 16.
    A *list class* (``_list_count``: a packed short class of a node with at most ``num[U_LISTC]``
    expressions below, ``XS[:nx]``; flag ``LISTC``) holds, after its path words, each of its
    expressions' other attributes as packed words, ``size - path`` per expression: its bound
    (``_vbound``) is then exact up to the path's maxima, as the union's is not."""
    AR = FL[F_AR]
    S = AR.view(np.float32)
    SU = AR.view(np.uint32)
    WA = IL[I_WA]
    WM = FL[F_WM]
    BA = IL[I_BA]
    long_from = IL[I_NUM][U_LONG]
    ws, wc = R[base + WS], R[base + WC]
    i0 = ws
    w = 2 * pos
    while i0 < ws + wc:
        cls = WA[i0] >> 32
        i1 = i0 + 1
        while i1 < ws + wc and (WA[i1] >> 32) == cls:
            i1 += 1
        size = SZ_CAP - cls
        npath, nother, wlo, nw = _class_shape(WA, i0, i1, BA, pb, pd, MK)
        if nother < long_from:
            nw = 0
        pk = _class_packed(WA, i1)
        nl = _list_count(XS, nx, size, npath, p_start, p_end) if pk and nw == 0 else -1
        h = w
        SU[h] = size
        SU[h + 1] = npath
        SU[h + 3] = nw | (PACKED if pk else 0) | (LISTC if nl >= 0 else 0)
        w += 4
        sc = 0.0
        if pk:
            # the scale: the largest weight the class stores / PACK_Q, as a float32 rounded up
            wmx = 0.0
            for x in range(i0, i1):
                if nw == 0 or _on_path_m(MK, BA, pb, pd, WA[x] & 0xFFFFFFFF):
                    wmx = max(wmx, WM[x])
            _put_up(S, SU, w, wmx / PACK_Q if wmx > 0 else 1.0)
            sc = float(S[w])
            w += 1
        for j in range(pb, pb + pd):
            x = find_sorted(WA, i0, i1, _wkey(size, BA[j]))
            if x >= 0:
                if pk:
                    SU[w] = BA[j] | (_quant(WM[x], sc) << 16)
                    w += 1
                else:
                    SU[w] = BA[j]
                    _put_up(S, SU, w + 1, WM[x])
                    w += 2
        if nw > 0:
            SU[w] = wlo
            SU[w + 1: w + 1 + nw] = 0
            for x in range(i0, i1):
                a = WA[x] & 0xFFFFFFFF
                if not _on_path_m(MK, BA, pb, pd, a):
                    SU[w + 1 + (a >> 5) - wlo] |= np.uint32(1 << (a & 31))
            w += 1 + nw
        elif nl >= 0:
            for i in range(nx):
                s = XS[i]
                if p_end[s] - p_start[s] == size:
                    for p in range(p_start[s], p_end[s]):
                        a = p_attr[p]
                        if not _on_path_m(MK, BA, pb, pd, a):
                            SU[w] = a | (_quant(p_w[p], sc) << 16)
                            w += 1
        else:
            for x in range(i0, i1):
                a = WA[x] & 0xFFFFFFFF
                if not _on_path_m(MK, BA, pb, pd, a):
                    if pk:
                        SU[w] = a | (_quant(WM[x], sc) << 16)
                        w += 1
                    else:
                        SU[w] = a
                        _put_up(S, SU, w + 1, WM[x])
                        w += 2
        SU[h + 2] = w - h - 4
        i0 = i1
    if w & 1:
        SU[w] = 0
        w += 1
    return w // 2


@numba.njit(cache=True)
def _size_c(IL, c, mode, NEXT, p_start, p_end, p_attr, XS, MK):
    """Floats of the view block of c-node ``c`` (``_write_c``)."""
    CI = IL[I_C]
    base = c * NC
    _mark_path(MK, IL[I_BA], CI[base + C_BOX], CI[base + C_DEP])
    nx = _below(IL, False, c, NEXT, XS, p_start, p_end, p_attr, IL[I_BA], CI[base + C_BOX], CI[base + C_DEP], MK) \
        if mode != STATIC else -1
    return (4 + ND * CI[base + C_DC] + _sum_floats(IL, CI, base, mode, CI[base + C_BOX], CI[base + C_DEP], XS, nx,
                                                   p_start, p_end, p_attr, MK)
            + _expr_floats(CI, c, NEXT, p_start, p_end))


@numba.njit(cache=True, inline="always")
def _expr_floats(CI, c, NEXT, p_start, p_end):
    """Floats of c-node ``c``'s expressions in its view block (``_write_c``: 3 + 4 per
    predicate each)."""
    n = 0
    s = CI[c * NC + C_LH]
    while s >= 0:
        n += 3 + 4 * (p_end[s] - p_start[s])
        s = NEXT[s]
    return n


@numba.njit(cache=True)
def _write_c(IL, FL, c, pos, mode, NEXT, p_start, p_end, p_attr, p_op, p_a, p_b, p_w, set_off, ids, score, XS, MK):
    """The hot row of c-node ``c`` and its block at ``pos`` (returns the end): header
    (summary floats, most predicates or static bound, p-directory size, expression floats),
    the p-directory (attribute, the p-node's block, the p-node's c-directory box on the
    attribute: an event value outside it reaches nothing below, and its most predicates or
    static bound: a p-node that cannot beat the k-th score is passed over unread), the summary
    (``_write_sum``), then per expression (predicates, id as int64 bits, static score) and its predicate rows (attribute * 16 + operator, a or set start, b or
    set end, weight)."""
    CI = IL[I_C]
    HV = FL[F_HV]
    BX = FL[F_BX]
    base = c * NC
    h = c * NV
    dep = CI[base + C_DEP]
    if dep > 0:
        j = CI[base + C_BOX] + dep - 1
        HV[h + V_SL] = BX[4 * j + B_SL]
        HV[h + V_SH] = BX[4 * j + B_SH]
        HV[h + V_OL] = BX[4 * j + B_OL]
        HV[h + V_OH] = BX[4 * j + B_OH]
    else:
        HV[h + V_SL] = -INF
        HV[h + V_SH] = INF
        HV[h + V_OL] = -INF
        HV[h + V_OH] = INF
    HV[h + V_L] = CI[base + C_L]
    HV[h + V_R] = CI[base + C_R]
    HV[h + V_B] = pos
    nd, ds = CI[base + C_DC], CI[base + C_DS]
    _mark_path(MK, IL[I_BA], CI[base + C_BOX], dep)
    nx = _below(IL, False, c, NEXT, XS, p_start, p_end, p_attr, IL[I_BA], CI[base + C_BOX], dep, MK) if mode != STATIC \
        else -1
    nsum = _sum_floats(IL, CI, base, mode, CI[base + C_BOX], dep, XS, nx, p_start, p_end, p_attr, MK)
    _grow_view(FL, pos + 4 + ND * nd + nsum + _expr_floats(CI, c, NEXT, p_start, p_end))
    AR = FL[F_AR]
    AR[pos] = nsum
    AR[pos + 1] = FL[F_CS][c] if mode == STATIC else CI[base + NMAX]
    AR[pos + 2] = nd
    most = AR[pos + 1]
    w = pos + 4
    DA, DP = IL[I_DA], IL[I_DP]
    PI = IL[I_P]
    PV = IL[I_PV]
    for x in range(ds, ds + nd):
        AR[w] = DA[x]
        AR[w + 1] = PV[DP[x]]                  # its block (_full_view sets it once written)
        r = PI[DP[x] * NP + P_ROOT]
        j = CI[r * NC + C_BOX] + CI[r * NC + C_DEP] - 1
        AR[w + 2] = BX[4 * j + B_SL]
        AR[w + 3] = BX[4 * j + B_SH]
        AR[w + 4] = FL[F_PS][DP[x]] if mode == STATIC else PI[DP[x] * NP + NMAX]
        most = max(most, AR[w + 4])
        w += ND
    HV[h + V_M] = most
    if mode != STATIC:
        w = _write_sum(IL, FL, CI, base, CI[base + C_BOX], dep, w, XS, nx, p_start, p_end, p_attr, p_w, MK)
    e0 = w
    ARI = AR.view(np.int64)
    s = CI[base + C_LH]
    while s >= 0:
        AR[w] = p_end[s] - p_start[s]
        ARI[w + 1] = ids[s]                    # its id's bits: no random read of the id table
        AR[w + 2] = score[s] if mode == STATIC else 0.0
        w += 3
        for p in range(p_start[s], p_end[s]):
            op = p_op[p]
            AR[w] = p_attr[p] * 16 + op
            if op == IN or op == NIN:
                AR[w + 1] = set_off[p]
                AR[w + 2] = set_off[p + 1]
            else:
                AR[w + 1] = p_a[p]
                AR[w + 2] = p_b[p]
            AR[w + 3] = p_w[p]
            w += 4
        s = NEXT[s]
    AR[pos + 3] = w - e0
    return w


@numba.njit(cache=True)
def _write_p(IL, FL, p, pos, mode, NEXT, p_start, p_end, p_attr, p_w, XS, MK):
    """The block of p-node ``p`` at ``pos``: (summary floats, most predicates or static bound,
    root c-node, attribute), then its summary (``_write_sum``)."""
    PI = IL[I_P]
    base = p * NP
    IL[I_PV][p] = pos
    r = PI[base + P_ROOT]
    CI = IL[I_C]
    _mark_path(MK, IL[I_BA], CI[r * NC + C_BOX], CI[r * NC + C_DEP])
    nx = _below(IL, True, p, NEXT, XS, p_start, p_end, p_attr, IL[I_BA], CI[r * NC + C_BOX], CI[r * NC + C_DEP], MK) \
        if mode != STATIC else -1
    nsum = _sum_floats(IL, PI, base, mode, CI[r * NC + C_BOX], CI[r * NC + C_DEP], XS, nx, p_start, p_end, p_attr, MK)
    _grow_view(FL, pos + 4 + nsum)
    AR = FL[F_AR]
    AR[pos] = nsum
    AR[pos + 1] = FL[F_PS][p] if mode == STATIC else PI[base + NMAX]
    AR[pos + 2] = r
    AR[pos + 3] = PI[base + P_ATTR]
    w = pos + 4
    if mode != STATIC:
        w = _write_sum(IL, FL, PI, base, CI[r * NC + C_BOX], CI[r * NC + C_DEP], w, XS, nx, p_start, p_end, p_attr, p_w,
                       MK)
    return w


@numba.njit(cache=True, inline="always")
def _aligned(pos):
    """The first place from ``pos`` on where a view block starts a cache line."""
    return (pos + VIEW_ALIGN - 1) & ~(VIEW_ALIGN - 1)


@numba.njit(cache=True)
def _full_view(IL, FL, mode, NEXT, p_start, p_end, p_attr, p_op, p_a, p_b, p_w, set_off, ids, score):
    """Every live node's view anew, blocks in depth-first order (a c-node, its p-nodes, then
    their c-directories and its children)."""
    FL[F_AR] = np.empty(_full_size(IL, mode, NEXT, p_start, p_end, p_attr))
    _full_write(IL, FL, mode, NEXT, p_start, p_end, p_attr, p_op, p_a, p_b, p_w, set_off, ids, score)


@numba.njit(cache=True)
def _marks(p_attr):
    """``_mark_path``'s marks: a place per attribute an expression has, then the stamp."""
    na = 0
    for p in range(p_attr.shape[0]):
        na = max(na, p_attr[p] + 1)
    return np.zeros(na + 1, np.int64)


@numba.njit(cache=True)
def _full_size(IL, mode, NEXT, p_start, p_end, p_attr):
    """Floats of the full view's arena: every live node's block sized without list classes
    (no gathering below every small node: at 1M about 2 s), an eighth more (the writers grow
    the arena where the lists take more than that; by 4% at 1M)."""
    num = IL[I_NUM]
    CI = IL[I_C]
    PI = IL[I_P]
    XS0 = np.empty(0, np.int64)
    MK = _marks(p_attr)
    total = 0
    for c in range(num[U_C]):
        if CI[c * NC + C_ALIVE] == 1:
            total += _size_c(IL, c, mode, NEXT, p_start, p_end, p_attr, XS0, MK) + VIEW_ALIGN - 1
    for p in range(num[U_P]):
        if PI[p * NP + P_ALIVE] == 1:
            total += 4 + _p_sum_floats(IL, p, mode, NEXT, p_start, p_end, p_attr, XS0, MK) + VIEW_ALIGN - 1
    return max(total + total // 8, 64)


@numba.njit(cache=True)
def _full_begin(IL, FL, mode, NEXT, p_start, p_end, p_attr):
    """A full rewrite's start (``_refresh_view`` when most of the tree changed, or
    ``BETreeCore._refresh`` before it writes into an arena of its own): the changed nodes'
    marks cleared, the hot rows and p-node places sized to the tree; returns ``_full_size``."""
    num = IL[I_NUM]
    CI = IL[I_C]
    PI = IL[I_P]
    DL = IL[I_DIRTY]
    for i in range(num[U_NDIRTY]):
        x = DL[i]
        if x & 1 == 0:
            CI[(x >> 1) * NC + C_DIRTY] = 0
        else:
            PI[(x >> 1) * NP + P_DIRTY] = 0
    num[U_NDIRTY] = 0
    _grow_f(FL, F_HV, num[U_C] * NV, -1.0)
    _grow_i(IL, I_PV, num[U_P])
    return _full_size(IL, mode, NEXT, p_start, p_end, p_attr)


@numba.njit(cache=True)
def _full_write(IL, FL, mode, NEXT, p_start, p_end, p_attr, p_op, p_a, p_b, p_w, set_off, ids, score):
    """``_full_view``'s writing into the arena ``FL[F_AR]`` (at least ``_full_size`` floats)."""
    num = IL[I_NUM]
    nc, npn = num[U_C], num[U_P]
    CI = IL[I_C]
    PI = IL[I_P]
    HV = FL[F_HV]
    PV = IL[I_PV]
    for c in range(nc):
        HV[c * NV + V_B] = -1.0
    for p in range(npn):
        PV[p] = -1
    XS = np.empty(num[U_LISTC], np.int64)
    MK = _marks(p_attr)
    stack = np.empty(64, np.int64)
    stack[0] = 0
    ns = 1
    pos = 0
    DP = IL[I_DP]
    while ns > 0:
        ns -= 1
        c = stack[ns]
        cpos = _aligned(pos)
        pos = _write_c(IL, FL, c, cpos, mode, NEXT, p_start, p_end, p_attr, p_op, p_a, p_b, p_w, set_off, ids, score, XS,
                       MK)
        ds, dc = CI[c * NC + C_DS], CI[c * NC + C_DC]
        stack = _stack_room(stack, ns, dc + 2)
        for ch in (CI[c * NC + C_R], CI[c * NC + C_L]):
            if ch >= 0:
                stack[ns] = ch
                ns += 1
        for x in range(ds + dc - 1, ds - 1, -1):
            p = DP[x]
            pos = _write_p(IL, FL, p, _aligned(pos), mode, NEXT, p_start, p_end, p_attr, p_w, XS, MK)
            FL[F_AR][cpos + 4 + ND * (x - ds) + 1] = PV[p]
            stack[ns] = PI[p * NP + P_ROOT]
            ns += 1
    num[U_AR] = pos
    num[U_ARLIVE] = pos


@numba.njit(cache=True)
def _refresh_view(IL, FL, q, mode, NEXT, p_start, p_end, p_attr, p_op, p_a, p_b, p_w, set_off, ids, score):
    """Rewrite the view of every node changed since the last refresh (at the end of the
    arena); everything anew, in depth-first order, when that is most of the tree or the
    arena is more than half garbage (``q[Q_VSHARE]``: the share of live nodes changed above
    which everything is rewritten; ``q[Q_VSLACK]``: arena floats of garbage tolerated beyond
    half)."""
    num = IL[I_NUM]
    nd = num[U_NDIRTY]
    if nd == 0:
        return
    if nd > q[Q_VSHARE] * (num[U_LIVEC] + num[U_LIVEP]):
        # most of the tree changed (a build): everything anew, without sizing the changed
        # nodes first (their gathering below every small node: at 1M about 1.4 s)
        FL[F_AR] = np.empty(_full_begin(IL, FL, mode, NEXT, p_start, p_end, p_attr))
        _full_write(IL, FL, mode, NEXT, p_start, p_end, p_attr, p_op, p_a, p_b, p_w, set_off, ids, score)
        return
    _grow_f(FL, F_HV, num[U_C] * NV, -1.0)
    _grow_i(IL, I_PV, num[U_P])
    CI = IL[I_C]
    PI = IL[I_P]
    HV = FL[F_HV]
    PV = IL[I_PV]
    AR = FL[F_AR]
    DL = IL[I_DIRTY]
    XS = np.empty(num[U_LISTC], np.int64)
    MK = np.empty(0, np.int64)                  # no marks (they take a pass over every predicate)
    freed = 0
    need = 0
    for i in range(nd):
        x = DL[i]
        node = x >> 1
        if x & 1 == 0:
            CI[node * NC + C_DIRTY] = 0
            b = int(HV[node * NV + V_B])
            if b >= 0:
                freed += 4 + ND * int(AR[b + 2]) + int(AR[b]) + int(AR[b + 3])
                HV[node * NV + V_B] = -1.0
            if CI[node * NC + C_ALIVE] == 1:
                need += _size_c(IL, node, mode, NEXT, p_start, p_end, p_attr, XS, MK) + VIEW_ALIGN - 1
        else:
            PI[node * NP + P_DIRTY] = 0
            b = PV[node]
            if b >= 0:
                freed += 4 + int(AR[b])
                PV[node] = -1
            if PI[node * NP + P_ALIVE] == 1:
                need += 4 + _p_sum_floats(IL, node, mode, NEXT, p_start, p_end, p_attr, XS, MK) + VIEW_ALIGN - 1
    num[U_NDIRTY] = 0
    live = num[U_ARLIVE] - freed + need
    if num[U_AR] + need > 2 * live + q[Q_VSLACK]:
        _full_view(IL, FL, mode, NEXT, p_start, p_end, p_attr, p_op, p_a, p_b, p_w, set_off, ids, score)
        return
    _grow_f(FL, F_AR, num[U_AR] + need, 0.0)
    pos = num[U_AR]
    for i in range(nd):                         # p-nodes first: c-nodes' entries hold their places
        x = DL[i]
        node = x >> 1
        if x & 1 == 1 and PI[node * NP + P_ALIVE] == 1:
            pos = _write_p(IL, FL, node, _aligned(pos), mode, NEXT, p_start, p_end, p_attr, p_w, XS, MK)
    for i in range(nd):
        x = DL[i]
        node = x >> 1
        if x & 1 == 0 and CI[node * NC + C_ALIVE] == 1:
            pos = _write_c(IL, FL, node, _aligned(pos), mode, NEXT, p_start, p_end, p_attr, p_op, p_a, p_b, p_w, set_off, ids, score,
                           XS, MK)
    num[U_AR] = pos
    num[U_ARLIVE] = live

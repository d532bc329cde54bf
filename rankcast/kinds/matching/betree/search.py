"""Top-k search of the BE*-tree over the match view (:mod:`.view`).

Top-k (Alg. 6, with one global best-first heap): the root's l-node is scanned unless its bound
cannot beat the k-th score, its p-nodes on attributes the event has are pushed with their
bound; popped in bound order, each p-node's c-directory is searched for the buckets whose
boxes hold the event's value, whose l-nodes are scanned (or pushed, when something with a
higher bound waits in the heap) and whose p-nodes are pushed in turn.
The search stops once the best bound left is below the k-th score (with the relative slack
``EPS``; an equal bound is still searched because a smaller id would win the tie).

Speculative threshold (``weighted``; not in the paper): until k matches are held nothing can be
pruned, and at 1M expressions most of a search happens then (top-5: 53 of its 65 pushes, 41
of them never popped). So the events of one ``match`` call lend each other a threshold: after
each event, its k-th score over ``G[s]`` (the sum of its ``s`` largest products with the
global maximum weights) is kept for every ``s`` up to ``SPEC_SIZES``, over the last
``SPEC_WINDOW`` events; an event searches from ``cut`` = the least kept ratio of the size
whose ratios spread least, times its own ``G[s]``, pruning against it as against a k-th
score. Where the search ends with k matches and the k-th score at or above ``cut``, every
node it pruned had a bound below that k-th score, as without speculation, and it stands;
else the event is searched again from -inf (``speculation_retries`` in ``stats()``), so the
top-k is exact either way. On the bench's workload the ratio over ``G[10]`` varies by 1.5%
between events, and at 1M top-5 944 of 978 speculated searches stand (34 searched again);
speculation pauses while more than a quarter of the recent ones fail.
"""
from __future__ import annotations

import numba
import numpy as np

from rankcast.common.arrays import prefetch
from rankcast.common.tolerance import EPS
from ..core import IN, NIN, STATIC, holds
from ..core import offer_topk as _offer, ranks_after as _worse
from .nodes import (INF, LISTC, M_CDIR, M_CNODES, M_EVALS, M_EVENTS, M_LNODES, M_POPPED, M_PRUNED, M_PUSHED,
                    M_RETRY, M_SPEC, ND, NV, PACKED, VIEW_ALIGN, V_B, V_L, V_M, V_OH, V_OL, V_R, V_SH, V_SL)
from .summaries import _lower_bound, _sort_desc


# the speculative threshold (module docstring, "Speculative threshold"): the k-th score of each of
# the last SPEC_WINDOW events of a call over G[s] (s = 1..SPEC_SIZES), kept in a ring; once
# SPEC_MIN are kept, an event's search starts from the least ratio of the size whose ratios
# spread least, times its own G[s]; paused while the failures' moving average (each speculated
# event weighing 1/SPEC_DECAY) exceeds SPEC_PAUSE, which fades by 1/SPEC_WINDOW per paused event
SPEC_WINDOW = 32
SPEC_MIN = 8
SPEC_SIZES = 16
SPEC_DECAY = 10.0
SPEC_PAUSE = 0.25
# state (``_match_many``'s SS): ratios kept, failure average, the size used, the ring's next row
S_KEPT, S_FAIL, S_SIZE, S_NEXT = range(4)
BLOCK_LINES = 4       # cache lines prefetched of a block to visit (c-node) or to bound (p-node)
# ----------------------------------------------------------------------------- top-k
@numba.njit(cache=True, inline="always")
def _hpush(hb, hp, n, b, p):
    """Push (b, p) on the max-heap ``hb/hp[:n]`` (the caller keeps room for it); returns the
    new size."""
    j = n
    while j > 0:
        par = (j - 1) >> 1
        if hb[par] < b:
            hb[j] = hb[par]
            hp[j] = hp[par]
            j = par
        else:
            break
    hb[j] = b
    hp[j] = p
    return n + 1


@numba.njit(cache=True, inline="always")
def _hpop(hb, hp, n):
    """Pop the largest (b, p) off the max-heap ``hb/hp[:n]``; returns (b, p, new size)."""
    b, p = hb[0], hp[0]
    n -= 1
    xb, xp = hb[n], hp[n]
    j = 0
    while True:
        l = 2 * j + 1
        if l >= n:
            break
        m = l
        if l + 1 < n and hb[l + 1] > hb[l]:
            m = l + 1
        if hb[m] > xb:
            hb[j] = hb[m]
            hp[j] = hp[m]
            j = m
        else:
            break
    if n > 0:
        hb[j] = xb
        hp[j] = xp
    return b, p, n


@numba.njit(cache=True, inline="always")
def _vbound(mode, S, SU, at, slen, nmx, ev_attr, e0, e1, has, ew, EO, EP, tb, G, cut):
    """The bound of a node's summary (``slen`` floats at ``AR[at:]``, read as 32-bit words:
    ``S``/``SU``, the arena as float32/uint32, ``_write_sum``; package docstring,
    "Bounds"): the largest over its size classes of (the path's products, then the largest
    products of the other attributes the event has, up to the class's size); 0 when no class
    can match. ``G[s]``: the sum of the event's ``s`` largest products with the global
    maximum weights, a bound of every expression of ``s`` predicates; a class whose ``G`` is
    below ``cut`` (the k-th score once k are held, else -inf) is not read, nor any smaller
    one. ``EO``/``EP``: the event's attributes and their products with the global maximum
    weights, largest first (``G``'s terms; a long class's bound takes them)."""
    if mode == STATIC:
        return nmx
    m = e1 - e0
    best = 0.0
    j = 2 * at
    end = j + 2 * slen - 1                     # an odd count's last word is padding
    while j < end:
        size = int(SU[j])
        npath = int(SU[j + 1])
        nwf = int(SU[j + 3])
        nw = nwf & (LISTC - 1)
        body = j + 4
        j = body + int(SU[j + 2])
        if size > m:
            continue                           # more attributes than the event has
        g = G[size]
        if g <= best or cut > g * (1.0 + EPS):
            break                              # G grows with the size: no smaller class can do better
        acc = 0.0
        ok = True
        pk = nwf >= PACKED
        sc = 0.0
        if pk:                                 # (attribute | multiple of the scale << 16) words
            sc = float(S[body])
            body += 1
            r0 = body + npath
            for x in range(body, r0):
                u = int(SU[x])
                a = u & 0xFFFF
                if not has[a]:
                    ok = False
                    break
                acc += ew[a] * float(u >> 16)
            if acc > 0.0:                      # an infinite scale times 0 would be NaN
                acc *= sc
        else:                                  # (attribute, float32 weight) pairs
            r0 = body + 2 * npath
            for x in range(body, r0, 2):
                a = int(SU[x])
                if not has[a]:
                    ok = False
                    break
                if ew[a] > 0.0:                # a weight beyond float32 is inf: inf times 0 is NaN
                    acc += ew[a] * S[x + 1]
        if not ok:
            continue
        need = size - npath
        c = 0
        if nw == 0:
            if nwf & LISTC:
                # a list class: per expression its own other attributes; the best of those the
                # event all has (one it misses cannot match)
                lb = -1.0
                x = r0
                while x < j:
                    y = x
                    x += need
                    t = 0.0
                    while y < x:
                        u = int(SU[y])
                        a = u & 0xFFFF
                        if not has[a]:
                            break
                        t += ew[a] * float(u >> 16)
                        y += 1
                    if y == x and t > lb:
                        lb = t
                if lb < 0.0:
                    continue
                if lb > 0.0:                   # an infinite scale times 0 would be NaN
                    acc += lb * sc
                if acc > best:
                    best = acc
                continue
            if pk:
                for x in range(r0, j):         # short: sequential
                    u = int(SU[x])
                    a = u & 0xFFFF
                    if has[a]:
                        tb[c] = ew[a] * float(u >> 16) * sc if ew[a] > 0.0 else 0.0
                        c += 1
            else:
                for x in range(r0, j, 2):
                    a = int(SU[x])
                    if has[a]:
                        tb[c] = ew[a] * S[x + 1] if ew[a] > 0.0 else 0.0
                        c += 1
        else:
            # long: the event's attributes by product with the global maximum weight, largest
            # first, taken while the class has them (a bit of its words) until it has enough.
            # That maximum bounds the class's own weight, so the sum still bounds the class
            # (equal where, as with the paper's weights, an attribute weighs the same
            # everywhere), reads a few words instead of scattered weights, and needs no sort
            wlo = int(SU[r0])
            mw = r0 + 1
            for i in range(m if need > 0 else 0):
                a = EO[i]
                wi = (a >> 5) - wlo
                if wi >= 0 and wi < nw and (int(SU[mw + wi]) >> (a & 31)) & 1:
                    acc += EP[i]
                    c += 1
                    if c == need:
                        break
            if c == need and acc > best:
                best = acc
            continue
        if c < need:
            continue                           # too few of the event's attributes below
        if c > need:
            _sort_desc(tb, c)                  # c is at most the event's size
        for i in range(need):
            acc += tb[i]
        if acc > best:
            best = acc
    return best


@numba.njit(cache=True, inline="always")
def _entry_beaten(mode, nmx, m, G, cut):
    """Whether the p-node of a p-directory entry cannot beat ``cut`` (the search's threshold:
    the k-th score once k are held, or the speculative one), known from the entry alone (its
    block not read): its expressions have at most ``nmx`` predicates, and at most ``m`` can
    match, so each scores at most ``G[min(nmx, m)]`` (``static``: ``nmx`` is the p-node's
    bound)."""
    ebound = nmx if mode == STATIC else G[min(int(nmx), m)]
    return cut > ebound * (1.0 + EPS)


@numba.njit(cache=True, inline="always")
def _consider(mode, HV, AR, S, SU, pb, ev_attr, e0, e1, has, ew, EO, EP, tb, G, cut, hb, hp, nh, cnt):
    """Push the p-node whose block is at ``pb`` (on an attribute the event has, its value in
    the p-node's c-directory box) unless its bound cannot beat ``cut`` (the search's threshold)
    (and prefetch its c-directory root's hot row, read when it is popped); returns the heap's
    size."""
    bnd = _vbound(mode, S, SU, pb + 4, int(AR[pb]), AR[pb + 1], ev_attr, e0, e1, has, ew, EO, EP, tb, G, cut)
    if cut > bnd * (1.0 + EPS):
        cnt[M_PRUNED] += 1
        return nh
    cnt[M_PUSHED] += 1
    prefetch(HV, int(AR[pb + 2]) * NV)
    return _hpush(hb, hp, nh, bnd, pb)


@numba.njit(cache=True, inline="always")
def _scan(mode, AR, ARI, r, end, m, G, has, val, ew, set_vals, tsc, tid, n, k, cnt, cut):
    """Check the expressions of an l-node's view (``AR[r:end]``) against the event, offering
    each match to the top-k (``tsc``/``tid``, ``n`` held); returns ``n`` and the search's
    threshold ``cut``, raised to the k-th score once k are held. An expression with more
    predicates than the event has attributes cannot match, and one of ``s`` predicates scores
    at most ``G[s]``: where that cannot beat ``cut``, neither is read."""
    while r < end:
        hd = r          # (predicates, id bits, static score), then the rows. Not named h: inlined into
                        # _match_events, an h here was read as that function's own h
        size = int(AR[hd])
        q = hd + 3
        r = q + 4 * size
        if size > m or (mode != STATIC and cut > G[size] * (1.0 + EPS)):
            continue                            # cannot match, or cannot enter
        cnt[M_EVALS] += 1
        acc = 0.0
        ok = True
        while q < r:
            code = int(AR[q])
            at = code >> 4
            if not has[at]:
                ok = False
                break
            op = code & 15
            if op == IN or op == NIN:
                h = holds(op, 0.0, 0.0, set_vals, int(AR[q + 1]), int(AR[q + 2]), val[at])
            else:
                h = holds(op, AR[q + 1], AR[q + 2], set_vals, 0, 0, val[at])
            if not h:
                ok = False
                break
            acc += AR[q + 3] * ew[at]
            q += 4
        if ok:
            sc = AR[hd + 2] if mode == STATIC else acc
            if n < k or sc >= tsc[0]:
                n = _offer(tsc, tid, n, k, sc, ARI[hd + 1])
                if n == k and tsc[0] > cut:
                    cut = tsc[0]
    return n, cut


@numba.njit(cache=True, inline="always")
def _found_entry(mode, AR, x, m, G, cut, pbs, npb, cnt):
    """A p-directory entry (at ``AR[x]``) on an attribute the event has, its value in the
    entry's box: its p-node's block is listed in ``pbs`` (and prefetched) unless the entry
    alone shows that it cannot beat ``cut``; returns the count listed."""
    if _entry_beaten(mode, AR[x + 4], m, G, cut):
        cnt[M_PRUNED] += 1
        return npb
    pbs[npb] = int(AR[x + 1])
    _prefetch_block(AR, pbs[npb])
    return npb + 1


@numba.njit(cache=True, inline="always")
def _prefetch_block(AR, b):
    """Prefetch the first ``BLOCK_LINES`` cache lines of the view block at ``AR[b]`` (a block starts
    a line; past its end the hints are wasted, never wrong)."""
    for j in range(b, b + BLOCK_LINES * VIEW_ALIGN, VIEW_ALIGN):
        prefetch(AR, j)


@numba.njit(cache=True)
def _match_many(HV, AR, PV, mode, k, ev_off, ev_attr, ev_val, ev_w, val, has, ew, wmax, set_vals, out_id, out_sc,
                out_n, cnt, spec_scale):
    """Top-k of every event (module docstring) over the match view: the c-directory search
    reads one hot row per node, a visited bucket one contiguous block (its p-directory,
    summary and expressions), a p-node one small block. ``spec_scale``: the speculative
    threshold's factor (1.0; 0 turns speculation off; tests raise it to force retries)."""
    tsc = np.empty(k)
    tid = np.empty(k, np.int64)
    # fixed sizes, so that no array is replaced inside the loops: a p-node is pushed at most
    # once per event, and the c-directory search holds fewer entries than there are c-nodes
    hb = np.empty(PV.shape[0] + HV.shape[0] // NV + 1)
    hp = np.empty(PV.shape[0] + HV.shape[0] // NV + 1, np.int64)
    stack = np.empty(HV.shape[0] // NV + 2, np.int64)
    cq = np.empty(HV.shape[0] // NV + 2, np.int64)
    max_ev = 1
    for e in range(ev_off.shape[0] - 1):
        max_ev = max(max_ev, ev_off[e + 1] - ev_off[e])
    tb = np.empty(max_ev)
    pbs = np.empty(max_ev, np.int64)
    G = np.zeros(max_ev + 1)
    order = np.empty(k, np.int64)
    EO = np.empty(max_ev, np.int64)
    EP = np.empty(max_ev)
    RR = np.full((SPEC_WINDOW, SPEC_SIZES + 1), np.nan)
    SS = np.zeros(4)
    scale = spec_scale if mode != STATIC else 0.0
    _match_events(HV, AR, AR.view(np.int64), AR.view(np.float32), AR.view(np.uint32), mode, k, ev_off, ev_attr, ev_val, ev_w, val, has, ew, wmax, set_vals,
                  out_id, out_sc, out_n, cnt, tsc, tid, hb, hp, stack, cq, tb, pbs, G, order, EO, EP, RR, SS, scale)


@numba.njit(cache=True, inline="always")
def _spec_cut(RR, SS, G, m, scale):
    """The speculative threshold of an event (module docstring, "Speculative threshold"):
    the least kept ratio of the chosen size times the event's ``G[s]`` and ``scale``; -inf
    while too few ratios are kept, while paused, or where the event has fewer attributes."""
    if scale <= 0.0 or SS[S_KEPT] < SPEC_MIN or SS[S_FAIL] > SPEC_PAUSE:
        return -INF
    s = int(SS[S_SIZE])
    if s < 1 or s > m:
        return -INF
    lo = INF
    for i in range(min(int(SS[S_KEPT]), SPEC_WINDOW)):
        x = RR[i, s]
        if x < lo:                     # NaN (an event with fewer attributes) compares false
            lo = x
    if lo == INF or not lo > 0.0:
        return -INF
    return lo * G[s] * scale


@numba.njit(cache=True, inline="always")
def _spec_keep(RR, SS, G, m, kth):
    """Keep an event's k-th score over its ``G[s]`` for every size in the ring, and choose the
    size whose kept ratios spread least (largest over least) among those kept at least
    ``SPEC_MIN`` times and for nine in ten of the events kept (a size that most events exceed
    would leave them without a threshold)."""
    row = int(SS[S_NEXT])
    for s in range(1, SPEC_SIZES + 1):
        RR[row, s] = kth / G[s] if s <= m and G[s] > 0.0 else np.nan
    SS[S_NEXT] = (row + 1) % SPEC_WINDOW
    SS[S_KEPT] += 1
    rows = min(int(SS[S_KEPT]), SPEC_WINDOW)
    best = INF
    for s in range(1, SPEC_SIZES + 1):
        lo, hi, c = INF, 0.0, 0
        for i in range(rows):
            x = RR[i, s]
            if x > 0.0:
                c += 1
                lo = min(lo, x)
                hi = max(hi, x)
        if c >= SPEC_MIN and 10 * c >= 9 * rows and hi / lo < best:
            best = hi / lo
            SS[S_SIZE] = s


@numba.njit(cache=True, _nrt=False)
def _match_events(HV, AR, ARI, S, SU, mode, k, ev_off, ev_attr, ev_val, ev_w, val, has, ew, wmax, set_vals, out_id,
                  out_sc, out_n, cnt, tsc, tid, hb, hp, stack, cq, tb, pbs, G, order, EO, EP, RR, SS, spec_scale):
    """The search of ``_match_many`` over its scratch arrays (allocated there). It allocates
    nothing, so it is compiled without reference counting (numba's ``_nrt=False``): with it,
    every inlined helper that takes arrays (``_vbound``, ``_consider``, ``_scan``) increfs and
    decrefs each of them per call, atomic operations that were ~14% of the samples in ``perf``
    at 1M (top-5 0.046 to 0.040 ms per event side by side). ``RR``/``SS``: the speculative
    threshold's ratios and state (``_spec_cut``)."""
    for e in range(ev_off.shape[0] - 1):
        e0, e1 = ev_off[e], ev_off[e + 1]
        for i in range(e0, e1):
            a = ev_attr[i]
            val[a] = ev_val[i]
            has[a] = True
            ew[a] = ev_w[i]
        # the event's attributes by product of event and global maximum weight, largest first;
        # G[s]: the s largest summed
        m = e1 - e0
        for i in range(m):
            a = ev_attr[e0 + i]
            x = ew[a] * wmax[a]
            j = i - 1
            while j >= 0 and EP[j] < x:
                EP[j + 1] = EP[j]
                EO[j + 1] = EO[j]
                j -= 1
            EP[j + 1] = x
            EO[j + 1] = a
        for i in range(m):
            G[i + 1] = G[i] + EP[i]
        cnt[M_EVENTS] += 1
        spec = _spec_cut(RR, SS, G, m, spec_scale)
        if spec == -INF and SS[S_FAIL] > 0.0:
            SS[S_FAIL] *= 1.0 - 1.0 / SPEC_WINDOW      # paused: the failures fade, slowly
        n = 0
        while True:
            # the search: from the speculative threshold where there is one; it stands (the top-k
            # is exact) where it ends with k held and the k-th score at or above it, else the
            # event is searched again from -inf
            cut = spec
            n = 0
            nh = 0
            c = 0                          # the root first, then the popped p-nodes' buckets
            nq = 0
            qi = 0
            while True:
                if c >= 0:
                    cnt[M_CNODES] += 1
                    b = int(HV[c * NV + V_B])
                    nsum, nd, elen = int(AR[b]), int(AR[b + 2]), int(AR[b + 3])
                    dir0 = b + 4
                    r = dir0 + ND * nd + nsum
                    # the p-nodes on the event's attributes whose box holds its value, found first:
                    # their blocks load while the l-node is bounded and scanned
                    npb = 0
                    if nd > 0:
                        if nd <= 2 * (e1 - e0):
                            for x in range(dir0, dir0 + ND * nd, ND):
                                a = int(AR[x])
                                if has[a] and AR[x + 2] <= val[a] and val[a] <= AR[x + 3]:
                                    npb = _found_entry(mode, AR, x, m, G, cut, pbs, npb, cnt)
                        else:
                            for i in range(e0, e1):
                                a = ev_attr[i]
                                lo = _lower_bound(AR, dir0, ND, nd, a)
                                x = dir0 + ND * lo
                                if lo < nd and AR[x] == a and AR[x + 2] <= val[a] and val[a] <= AR[x + 3]:
                                    npb = _found_entry(mode, AR, x, m, G, cut, pbs, npb, cnt)
                    if elen > 0:
                        bnd = _vbound(mode, S, SU, dir0 + ND * nd, nsum, AR[b + 1], ev_attr, e0, e1, has, ew, EO, EP, tb, G,
                                      cut)
                        if cut > bnd * (1.0 + EPS):
                            cnt[M_PRUNED] += 1
                        elif nh == 0 or bnd >= hb[0]:
                            cnt[M_LNODES] += 1      # nothing better waits: scan it now
                            n, cut = _scan(mode, AR, ARI, r, r + elen, m, G, has, val, ew, set_vals, tsc, tid, n, k,
                                           cnt, cut)
                        else:
                            nh = _hpush(hb, hp, nh, bnd, -1 - c)
                    for i in range(npb):
                        nh = _consider(mode, HV, AR, S, SU, pbs[i], ev_attr, e0, e1, has, ew, EO, EP, tb, G, cut, hb, hp,
                                       nh, cnt)
                # next bucket: from the c-directory searched last, else the best p-node left
                if qi < nq:
                    c = cq[qi]
                    qi += 1
                    continue
                c = -1
                if nh == 0:
                    break
                bnd, pn, nh = _hpop(hb, hp, nh)
                if cut > bnd * (1.0 + EPS):
                    break
                if pn < 0:                          # an l-node left for later
                    b = int(HV[(-1 - pn) * NV + V_B])
                    r = b + 4 + ND * int(AR[b + 2]) + int(AR[b])
                    cnt[M_LNODES] += 1
                    n, cut = _scan(mode, AR, ARI, r, r + int(AR[b + 3]), m, G, has, val, ew, set_vals, tsc, tid,
                                   n, k, cnt, cut)
                    continue
                cnt[M_POPPED] += 1
                if nh > 0 and hp[0] >= 0:
                    # the p-node likely popped next: its c-directory root's row (prefetched when it was
                    # pushed) names the next rows of its search, which load while this one is searched
                    hx = int(AR[hp[0] + 2]) * NV
                    vx = val[int(AR[hp[0] + 3])]
                    for ch in (int(HV[hx + V_L]), int(HV[hx + V_R])):
                        if ch >= 0:
                            prefetch(HV, ch * NV)
                    if HV[hx + V_OL] <= vx and vx <= HV[hx + V_OH]:
                        prefetch(AR, int(HV[hx + V_B]))
                # its c-directory's buckets whose boxes hold the event's value, found first (each
                # found bucket's block prefetched: they load together), then visited in turn
                stack[0] = int(AR[pn + 2])
                v = val[int(AR[pn + 3])]
                ns = 1
                nq = 0
                qi = 0
                while ns > 0:
                    ns -= 1
                    x = stack[ns]
                    cnt[M_CDIR] += 1
                    h = x * NV
                    if v < HV[h + V_SL] or v > HV[h + V_SH]:
                        continue
                    for ch in (int(HV[h + V_L]), int(HV[h + V_R])):
                        if ch >= 0:
                            stack[ns] = ch
                            prefetch(HV, ch * NV)
                            ns += 1
                    if HV[h + V_OL] <= v and v <= HV[h + V_OH]:
                        if _entry_beaten(mode, HV[h + V_M], m, G, cut):
                            cnt[M_PRUNED] += 1      # nothing in its l-node or below its p-nodes can beat the threshold
                            continue
                        cq[nq] = x
                        _prefetch_block(AR, int(HV[h + V_B]))
                        nq += 1
            if spec == -INF:
                break
            if n == k and tsc[0] >= spec:
                cnt[M_SPEC] += 1
                SS[S_FAIL] *= 1.0 - 1.0 / SPEC_DECAY
                break
            cnt[M_RETRY] += 1
            SS[S_FAIL] += (1.0 - SS[S_FAIL]) / SPEC_DECAY
            spec = -INF
        if mode != STATIC and n == k:
            _spec_keep(RR, SS, G, m, tsc[0])
        # best first
        for i in range(n):
            order[i] = i
        for i in range(1, n):
            x = order[i]
            j = i - 1
            while j >= 0 and _worse(tsc[order[j]], tid[order[j]], tsc[x], tid[x]):
                order[j + 1] = order[j]
                j -= 1
            order[j + 1] = x
        for i in range(n):
            out_id[e * k + i] = tid[order[i]]
            out_sc[e * k + i] = tsc[order[i]]
        out_n[e] = n
        for i in range(e0, e1):
            a = ev_attr[i]
            has[a] = False
            ew[a] = 1.0

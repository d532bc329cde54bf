"""The Paint algorithms (paper Sections III and IV) as numba kernels: from a sequence of
object updates to a columnar batch of messages, each a box of (l, r) subscription space
carrying one object's value.

A message is delivered to every subscription (lo, hi) with ``l0 <= lo <= l1`` and
``r0 <= hi <= r1``; boxes are closed (the paper's ``Msg(l_I, r_I, l_O, r_O)`` is
``[nextup(l_O), l_I] x [r_I, nextdown(r_O)]``), so that MEBs and snaps are plain min / max.
Positions in this module are *slots* (:mod:`.objects`): ``p`` the updated object's slot, ``L``
(``a`` entries, nearest first) and ``R`` (``b`` entries) its ``first_k`` lists, ``n`` the dummy
slot standing for +inf and ``-1`` for -inf.

- Paint-Dense, rank-raising (Alg. 4): the influence region IR(i) is tiled by at most k column
  boxes (:func:`tile`); rank-lowering: IR_old(i) tiled with the new value, then the sweep
  (:func:`sweep`) exposes the objects that enter top-k lists, each painted as the chain of
  level-exactly-k cells of i's partition inside its quadrant (:func:`chain`, notes 2.1).
- Paint-Sparse: every list of boxes is snapped on the subscription index and greedily merged
  when the merged box holds no extra subscription (:func:`emit`); the sweep looks for the next
  exposed object only inside [l*, r*], the span of the subscriptions still in IR(i).
- epsilon: runs of ceil(eps * k) adjacent boxes are sent as their MEB (before the merge).
- Paint-Batch (:func:`paint_batch`): E-down applied silently, E-up in descending new value with
  the exposures of objects still to be updated dropped, then E-down painted on the final state.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from .objects import below, first_k, range_min, set_value
from .points import _local, any_outside_at, extreme_at, localize, snap_at, snap_boxes

__all__ = ["NEW", "EXPOSED", "UNICAST", "C_FIRST_K", "C_MIN_Y", "C_SNAP", "C_EMPTY", "C_EXPOSED",
           "C_DROPPED", "N_COUNTERS", "COUNTER_NAMES", "run_length", "paint_online", "paint_batch"]

NEW, EXPOSED, UNICAST = 0, 1, 2          # kinds of message: the updated object, an exposed one
# counters of data-structure calls (paper Table III) and of the sweep
C_FIRST_K, C_MIN_Y, C_SNAP, C_EMPTY, C_EXPOSED, C_DROPPED = range(6)
N_COUNTERS = 6
COUNTER_NAMES = ("first_k", "min_y", "snap", "empty_test", "exposed", "dropped_messages")
MF, MI = 5, 4       # message columns: float (l0, l1, r0, r1, y), int (object, event, target, kind)


def run_length(epsilon: float, k: int) -> int:
    """Boxes per MEB of the epsilon variants: ceil(eps * k), at least 1 (exact)."""
    return max(1, math.ceil(epsilon * k - 1e-12))


@numba.njit(cache=True)
def _push(mf, mi, nm, l0, l1, r0, r1, y, obj, ev, target, kind):
    """Append one message, doubling the buffers when full; returns (mf, mi, nm)."""
    if nm == mf.shape[0]:
        nf = np.empty((2 * nm + 16, MF))
        ni = np.empty((2 * nm + 16, MI), np.int64)
        nf[:nm] = mf[:nm]
        ni[:nm] = mi[:nm]
        mf = nf
        mi = ni
    mf[nm, 0] = l0
    mf[nm, 1] = l1
    mf[nm, 2] = r0
    mf[nm, 3] = r1
    mf[nm, 4] = y
    mi[nm, 0] = obj
    mi[nm, 1] = ev
    mi[nm, 2] = target
    mi[nm, 3] = kind
    return mf, mi, nm + 1


@numba.njit(cache=True, inline="always")
def _lbound(xs, s):
    """The smallest l above slot ``s`` (-inf for -1): the closed form of an open bound."""
    return -np.inf if s < 0 else np.nextafter(xs[s], np.inf)


@numba.njit(cache=True, inline="always")
def _rbound(xs, s, n):
    """The largest r below slot ``s`` (+inf for the dummy ``n``)."""
    return np.inf if s >= n else np.nextafter(xs[s], -np.inf)


@numba.njit(cache=True, inline="always")
def _top(R, b, k, cnt, p, n):
    """The exclusive r bound (a slot) of the column whose l segment has ``cnt`` L entries at
    or east of it: r_{k - cnt} (``n``: +inf), or ``p`` when the column is outside IR."""
    z = cnt + 1
    if z > k:
        return p
    j = k - z
    return R[j] if j < b else n


@numba.njit(cache=True)
def tile(p, xs, n, k, LF, aF, RF, bF, use_f, LA, aA, RA, bA, LB, aB, RB, bB, use_ab, gb):
    """Column boxes (west to east, into ``gb``; returns how many) tiling the staircase
    F (lists LF, RF) or F u (A n B) (batch, :func:`paint_batch`): the column of l in
    (l_z, l_{z-1}] reaches r < r_{k+1-z}; adjacent columns of equal reach are one box (Alg. 4)."""
    iF = 0
    iA = 0
    iB = 0
    hi_bp = p
    ng = 0
    cur_top = -2
    cur_hi = p
    cur_lo = p
    while True:
        nxt = -1
        if use_f and iF < aF and LF[iF] > nxt:
            nxt = LF[iF]
        if use_ab:
            if iA < aA and LA[iA] > nxt:
                nxt = LA[iA]
            if iB < aB and LB[iB] > nxt:
                nxt = LB[iB]
        t = p
        if use_f:
            t = _top(RF, bF, k, iF, p, n)
        if use_ab:
            ta = _top(RA, bA, k, iA, p, n)
            tb = _top(RB, bB, k, iB, p, n)
            t = max(t, min(ta, tb))
        if t == cur_top:
            cur_lo = nxt
        else:
            if cur_top > p:
                gb[ng, 0] = _lbound(xs, cur_lo)
                gb[ng, 1] = xs[cur_hi]
                gb[ng, 2] = xs[p]
                gb[ng, 3] = _rbound(xs, cur_top, n)
                ng += 1
            cur_top = t
            cur_hi = hi_bp
            cur_lo = nxt
        if nxt < 0:
            break
        if use_f and iF < aF and LF[iF] == nxt:
            iF += 1
        if use_ab:
            if iA < aA and LA[iA] == nxt:
                iA += 1
            if iB < aB and LB[iB] == nxt:
                iB += 1
        hi_bp = nxt
    if cur_top > p:
        gb[ng, 0] = _lbound(xs, cur_lo)
        gb[ng, 1] = xs[cur_hi]
        gb[ng, 2] = xs[p]
        gb[ng, 3] = _rbound(xs, cur_top, n)
        ng += 1
    for j in range(ng // 2):            # east to west -> west to east
        for c in range(4):
            gb[j, c], gb[ng - 1 - j, c] = gb[ng - 1 - j, c], gb[j, c]
    return ng


@numba.njit(cache=True)
def chain(p, q, xs, n, k, L, a, R, b, gb):
    """The boxes (west to east, into ``gb``; returns how many) gained by the exposed object at
    slot ``q``: the cells of level exactly k of i's current partition inside q's quadrant
    (Lemma 3; the explicit form of the notes, 2.1)."""
    ng = 0
    if q > p:
        pc = 0
        while pc < b and R[pc] < q:
            pc += 1
        for bb in range(max(pc, k - 1 - a), min(b, k - 1) + 1):
            aa = k - 1 - bb
            lhi = p if aa == 0 else L[aa - 1]
            llo = L[aa] if aa < a else -1
            rlo = q if bb == pc else R[bb - 1]
            rhi = R[bb] if bb < b else n
            gb[ng, 0] = _lbound(xs, llo)
            gb[ng, 1] = xs[lhi]
            gb[ng, 2] = xs[rlo]
            gb[ng, 3] = _rbound(xs, rhi, n)
            ng += 1
    else:
        qc = 0
        while qc < a and L[qc] > q:
            qc += 1
        for aa in range(min(a, k - 1), max(qc, k - 1 - b) - 1, -1):
            bb = k - 1 - aa
            lhi = q if aa == qc else L[aa - 1]
            llo = L[aa] if aa < a else -1
            rlo = p if bb == 0 else R[bb - 1]
            rhi = R[bb] if bb < b else n
            gb[ng, 0] = _lbound(xs, llo)
            gb[ng, 1] = xs[lhi]
            gb[ng, 2] = xs[rlo]
            gb[ng, 3] = _rbound(xs, rhi, n)
            ng += 1
    return ng


@numba.njit(cache=True)
def _insert(lst, cnt, k, pos, q):
    """Insert slot ``q`` at ``pos`` of a first_k list of ``cnt`` entries, dropping the farthest
    when it is full; returns the new count."""
    last = cnt if cnt < k else k - 1
    for t in range(last, pos, -1):
        lst[t] = lst[t - 1]
    lst[pos] = q
    return cnt + 1 if cnt < k else k


@numba.njit(cache=True, inline="always")
def _gap_min(tree, size, ys, ids, n, prev, nxt, sl, sr, best):
    """``best`` or the lowest slot strictly between ``prev`` and ``nxt`` within ``sl .. sr``,
    whichever comes first in (y, id, slot) order (the dummy ``n``: none yet)."""
    lo = max(prev + 1, sl)
    hi = min(nxt, sr + 1)
    if lo < hi:
        c = range_min(tree, size, ys, ids, lo, hi, n)
        if c != n and (best == n or (ys[c] < ys[best] or (ys[c] == ys[best] and (ids[c] < ids[best] or (ids[c] == ids[best] and c < best))))):
            best = c
    return best


@numba.njit(cache=True)
def next_exposed(tree, size, ys, ids, n, p, L, a, R, b, k, sl, sr):
    """min_y(II(i), z): the lowest slot strictly inside (l_k, r_k) other than i and the list
    entries (exactly the slots there at or below the sweep level z), restricted to slots
    ``sl .. sr``; the dummy ``n`` if none."""
    best = n
    prev = L[k - 1] if a == k else -1
    top_l = a - 2 if a == k else a - 1
    for j in range(top_l, -2, -1):          # L entries westmost first, then p
        nxt = L[j] if j >= 0 else p
        best = _gap_min(tree, size, ys, ids, n, prev, nxt, sl, sr, best)
        prev = nxt
    last_r = b - 1 if b == k else b
    for j in range(0, last_r + 1):          # R entries, then r_k (or +inf)
        if j < last_r:
            nxt = R[j]
        else:
            nxt = R[k - 1] if b == k else n
        best = _gap_min(tree, size, ys, ids, n, prev, nxt, sl, sr, best)
        prev = nxt
    return best


@numba.njit(cache=True)
def _localize_boxes(gb, ng, pbox, pstart, pend, plo, phi, leaves, lq, lpt):
    """The local copy made to cover the boxes ``gb[:ng]`` (their MEB); returns whether it
    holds their points (else they are more than it holds)."""
    q0 = gb[0, 0]
    q1 = gb[0, 1]
    q2 = gb[0, 2]
    q3 = gb[0, 3]
    for j in range(1, ng):
        q0 = min(q0, gb[j, 0])
        q1 = max(q1, gb[j, 1])
        q2 = min(q2, gb[j, 2])
        q3 = max(q3, gb[j, 3])
    localize(pbox, pstart, pend, plo, phi, leaves, q0, q1, q2, q3, lq, lpt)
    return _local(lq, q0, q1, q2, q3)


@numba.njit(cache=True)
def emit(gb, ng, c, sparse, obj, y, ev, kind, mf, mi, nm, pbox, pstart, pend, plo, phi, leaves, lq, lpt, cnt,
         scratch):
    """Turn one object's ordered boxes into messages: drop empty boxes, MEBs of runs of ``c``
    (epsilon), and for Paint-Sparse snap each box and merge greedily while the merged box holds
    no subscription outside the parts (paper III-B), on the local copy ``lq``, ``lpt`` of the
    points around the boxes where it is small (:func:`~.points.localize`), else with the snaps
    of all the boxes from one walk of the tree (:func:`~.points.snap_boxes`). ``scratch``:
    float64[3 + boxes, 4]. Returns (mf, mi, nm)."""
    w = 0
    for j in range(ng):                         # empty boxes: equal x values, nothing between
        if gb[j, 0] <= gb[j, 1] and gb[j, 2] <= gb[j, 3]:
            for t in range(4):
                gb[w, t] = gb[j, t]
            w += 1
    ng = w
    if c > 1:
        w = 0
        for s in range(0, ng, c):
            e = min(ng, s + c)
            l0 = gb[s, 0]
            l1 = gb[s, 1]
            r0 = gb[s, 2]
            r1 = gb[s, 3]
            for j in range(s + 1, e):
                l0 = min(l0, gb[j, 0])
                l1 = max(l1, gb[j, 1])
                r0 = min(r0, gb[j, 2])
                r1 = max(r1, gb[j, 3])
            gb[w, 0] = l0
            gb[w, 1] = l1
            gb[w, 2] = r0
            gb[w, 3] = r1
            w += 1
        ng = w
    if not sparse:
        for j in range(ng):
            mf, mi, nm = _push(mf, mi, nm, gb[j, 0], gb[j, 1], gb[j, 2], gb[j, 3], y, obj, ev, -1, kind)
        return mf, mi, nm
    if ng == 0:
        return mf, mi, nm
    snapped = scratch[3:]
    if _localize_boxes(gb, ng, pbox, pstart, pend, plo, phi, leaves, lq, lpt):
        for j in range(ng):
            snap_at(pbox, pstart, pend, plo, phi, leaves, lq, lpt, gb[j, 0], gb[j, 1], gb[j, 2], gb[j, 3],
                    snapped[j])
    else:                               # too many points around: one walk of the tree for all
        snap_boxes(pbox, pstart, pend, plo, phi, leaves, gb, ng, snapped)
    cnt[C_SNAP] += ng
    g = scratch[0]
    s = scratch[1]
    meb = scratch[2]
    have = False
    for j in range(ng):
        s[:] = snapped[j]
        if not s[0] <= s[1]:
            continue
        if not have:
            g[:] = s
            have = True
            continue
        meb[0] = min(g[0], s[0])
        meb[1] = max(g[1], s[1])
        meb[2] = min(g[2], s[2])
        meb[3] = max(g[3], s[3])
        cnt[C_EMPTY] += 1
        if not any_outside_at(pbox, pstart, pend, plo, phi, leaves, lq, lpt, meb, g, s):
            g[:] = meb
        else:
            mf, mi, nm = _push(mf, mi, nm, g[0], g[1], g[2], g[3], y, obj, ev, -1, kind)
            g[:] = s
    if have:
        mf, mi, nm = _push(mf, mi, nm, g[0], g[1], g[2], g[3], y, obj, ev, -1, kind)
    return mf, mi, nm


@numba.njit(cache=True)
def sweep(p, obj, yn, ev, tree, size, ys, ids, xs, n, k, L, a, R, b, c, sparse, drop,
          mf, mi, nm, pbox, pstart, pend, plo, phi, leaves, lq, lpt, cnt, gb, scratch):
    """The sweep of a rank-lowering update of slot ``p`` (value already set to its new value
    ``yn``) from the level of its lists ``L``/``R`` (its old value) up to ``yn``: each exposed
    object's gained cells are painted with its value, unless ``drop[h]`` (Paint-Batch: an
    object still to be updated). Paint-Sparse looks only inside [l*, r*] and stops once no
    subscription is left in IR(i). Returns (mf, mi, nm)."""
    sl = 0
    sr = n - 1
    lstar = -np.inf
    rstar = np.inf
    while True:
        if sparse:          # l*, r*: the span of the subscriptions still in IR^z(i)
            ng = tile(p, xs, n, k, L, a, R, b, True, L, 0, R, 0, L, 0, R, 0, False, gb)
            # columns are west to east with l ranges in that order and r reaches growing:
            # the least lo is in the first column holding a point, the greatest hi is looked
            # for east to west until a column cannot reach above it
            if ng:                  # IR only shrinks: its first box covers the sweep
                _localize_boxes(gb, ng, pbox, pstart, pend, plo, phi, leaves, lq, lpt)
            nl = np.inf
            for j in range(ng):
                if max(gb[j, 0], lstar) >= nl:
                    break
                cnt[C_SNAP] += 1
                nl = extreme_at(pbox, pstart, pend, plo, phi, leaves, lq, lpt, max(gb[j, 0], lstar), gb[j, 1],
                                gb[j, 2], min(gb[j, 3], rstar), 0, nl)
            if nl == np.inf:
                break
            nr = np.inf
            for j in range(ng - 1, -1, -1):
                if -min(gb[j, 3], rstar) >= nr:
                    continue
                cnt[C_SNAP] += 1
                nr = extreme_at(pbox, pstart, pend, plo, phi, leaves, lq, lpt, max(gb[j, 0], lstar), gb[j, 1],
                                gb[j, 2], min(gb[j, 3], rstar), 3, nr)
            nr = -nr
            lstar = nl
            rstar = nr
            sl = np.searchsorted(xs[:n], lstar, side="left")
            sr = np.searchsorted(xs[:n], rstar, side="right") - 1
        cnt[C_MIN_Y] += 1
        h = next_exposed(tree, size, ys, ids, n, p, L, a, R, b, k, sl, sr)
        if h == n or not below(ys, ids, h, yn, ids[p], p):
            break
        cnt[C_EXPOSED] += 1
        ng = chain(p, h, xs, n, k, L, a, R, b, gb)
        if drop[h]:
            cnt[C_DROPPED] += ng
        else:
            if sparse:
                for j in range(ng):
                    gb[j, 0] = max(gb[j, 0], lstar)
                    gb[j, 3] = min(gb[j, 3], rstar)
            mf, mi, nm = emit(gb, ng, c, sparse, ids[h], ys[h], ev, EXPOSED, mf, mi, nm,
                              pbox, pstart, pend, plo, phi, leaves, lq, lpt, cnt, scratch)
        if h > p:
            pos = 0
            while pos < b and R[pos] < h:
                pos += 1
            b = _insert(R, b, k, pos, h)
        else:
            pos = 0
            while pos < a and L[pos] > h:
                pos += 1
            a = _insert(L, a, k, pos, h)
    return mf, mi, nm


@numba.njit(cache=True)
def paint_online(ev_slot, ev_yold, ev_ynew, ev_idx, tree, size, ys, ids, xs, n, k, c, sparse,
                 pbox, pstart, pend, plo, phi, leaves, cnt, cap):
    """Paint-Dense / Paint-Sparse, one update at a time (and, on coalesced updates, Coalesce):
    update ``j`` moves slot ``ev_slot[j]`` from ``ev_yold[j]`` to ``ev_ynew[j]`` (+inf: no
    object) and is applied to the tree. Returns the messages (float64[nm, 5], int64[nm, 4])."""
    mf = np.empty((1024, MF))
    mi = np.empty((1024, MI), np.int64)
    nm = 0
    L = np.empty(k + 1, np.int64)
    R = np.empty(k + 1, np.int64)
    gb = np.empty((3 * k + 4, 4))
    scratch = np.empty((3 * k + 7, 4))     # g, s, MEB, then a snap per box
    lq = np.array([np.inf, -np.inf, np.inf, -np.inf, -1.0])     # the local copy of points (``cap``)
    lpt = np.empty((2, cap))
    drop = np.zeros(n + 1, np.bool_)
    for j in range(ev_slot.shape[0]):
        p = ev_slot[j]
        yo = ev_yold[j]
        yn = ev_ynew[j]
        if yo == yn:
            continue
        obj = ids[p]
        if yn < yo:                                 # rank-raising: IR_new(i), Alg. 4
            set_value(tree, size, ys, ids, p, yn)
            a = first_k(tree, size, ys, ids, p, yn, obj, p, k, True, L)
            b = first_k(tree, size, ys, ids, p, yn, obj, p, k, False, R)
            cnt[C_FIRST_K] += 2
            ng = tile(p, xs, n, k, L, a, R, b, True, L, 0, R, 0, L, 0, R, 0, False, gb)
            mf, mi, nm = emit(gb, ng, c, sparse, obj, yn, ev_idx[j], NEW, mf, mi, nm,
                              pbox, pstart, pend, plo, phi, leaves, lq, lpt, cnt, scratch)
        else:                                       # rank-lowering: IR_old(i), then the sweep
            a = first_k(tree, size, ys, ids, p, yo, obj, p, k, True, L)
            b = first_k(tree, size, ys, ids, p, yo, obj, p, k, False, R)
            cnt[C_FIRST_K] += 2
            set_value(tree, size, ys, ids, p, yn)
            ng = tile(p, xs, n, k, L, a, R, b, True, L, 0, R, 0, L, 0, R, 0, False, gb)
            mf, mi, nm = emit(gb, ng, c, sparse, obj, yn, ev_idx[j], NEW, mf, mi, nm,
                              pbox, pstart, pend, plo, phi, leaves, lq, lpt, cnt, scratch)
            mf, mi, nm = sweep(p, obj, yn, ev_idx[j], tree, size, ys, ids, xs, n, k, L, a, R, b, c, sparse,
                               drop, mf, mi, nm, pbox, pstart, pend, plo, phi, leaves, lq, lpt, cnt, gb,
                               scratch)
    return mf[:nm], mi[:nm]


@numba.njit(cache=True)
def paint_batch(dn_slot, dn_ynew, dn_idx, up_slot, up_yold, up_ynew, up_idx, tree, size, ys, ids, xs, n,
                k, c, sparse, pbox, pstart, pend, plo, phi, leaves, cnt, cap):
    """Paint-Batch (paper IV-A) over coalesced updates (one per slot): ``dn_*`` lower a value
    (E-down), ``up_*`` raise it (E-up), the latter sorted by descending new value (y, id,
    slot). Steps: E-down applied silently; each E-up update painted in order with the sweep's
    messages for objects still to be updated dropped; then every E-down object painted on the
    final state. An E-up object's new value goes to IR_final(i) u (IR_before(i) n IR_final,old(i))
    (IR_final,old: its old value against the final objects): every subscription that needs it,
    or still holds its old value and would keep it otherwise. Returns the messages."""
    mf = np.empty((1024, MF))
    mi = np.empty((1024, MI), np.int64)
    nm = 0
    LF = np.empty(k + 1, np.int64)
    RF = np.empty(k + 1, np.int64)
    LA = np.empty(k + 1, np.int64)
    RA = np.empty(k + 1, np.int64)
    LB = np.empty(k + 1, np.int64)
    RB = np.empty(k + 1, np.int64)
    gb = np.empty((3 * k + 4, 4))
    scratch = np.empty((3 * k + 7, 4))     # g, s, MEB, then a snap per box
    lq = np.array([np.inf, -np.inf, np.inf, -np.inf, -1.0])     # the local copy of points (``cap``)
    lpt = np.empty((2, cap))
    ys0 = ys.copy()                       # T before the call
    tree0 = tree.copy()
    ysf = ys.copy()                       # T after the call
    treef = tree.copy()
    for j in range(dn_slot.shape[0]):
        set_value(treef, size, ysf, ids, dn_slot[j], dn_ynew[j])
    for j in range(up_slot.shape[0]):
        set_value(treef, size, ysf, ids, up_slot[j], up_ynew[j])
    drop = np.zeros(n + 1, np.bool_)
    for j in range(dn_slot.shape[0]):     # step 2: E-down applied, no messages
        set_value(tree, size, ys, ids, dn_slot[j], dn_ynew[j])
        drop[dn_slot[j]] = True
    for j in range(up_slot.shape[0]):
        drop[up_slot[j]] = True
    for j in range(up_slot.shape[0]):     # step 3: E-up by descending new value
        p = up_slot[j]
        yo = up_yold[j]
        yn = up_ynew[j]
        obj = ids[p]
        use_f = yn < np.inf
        aF = 0
        bF = 0
        if use_f:
            aF = first_k(treef, size, ysf, ids, p, yn, obj, p, k, True, LF)
            bF = first_k(treef, size, ysf, ids, p, yn, obj, p, k, False, RF)
        aA = first_k(tree0, size, ys0, ids, p, yo, obj, p, k, True, LA)
        bA = first_k(tree0, size, ys0, ids, p, yo, obj, p, k, False, RA)
        aB = first_k(treef, size, ysf, ids, p, yo, obj, p, k, True, LB)
        bB = first_k(treef, size, ysf, ids, p, yo, obj, p, k, False, RB)
        cnt[C_FIRST_K] += 6 if use_f else 4
        ng = tile(p, xs, n, k, LF, aF, RF, bF, use_f, LA, aA, RA, bA, LB, aB, RB, bB, True, gb)
        mf, mi, nm = emit(gb, ng, c, sparse, obj, yn, up_idx[j], NEW, mf, mi, nm,
                          pbox, pstart, pend, plo, phi, leaves, lq, lpt, cnt, scratch)
        a = first_k(tree, size, ys, ids, p, yo, obj, p, k, True, LA)
        b = first_k(tree, size, ys, ids, p, yo, obj, p, k, False, RA)
        cnt[C_FIRST_K] += 2
        set_value(tree, size, ys, ids, p, yn)
        drop[p] = False
        mf, mi, nm = sweep(p, obj, yn, up_idx[j], tree, size, ys, ids, xs, n, k, LA, a, RA, b, c, sparse,
                           drop, mf, mi, nm, pbox, pstart, pend, plo, phi, leaves, lq, lpt, cnt, gb, scratch)
    for j in range(dn_slot.shape[0]):     # step 4: E-down on the final state
        p = dn_slot[j]
        yn = dn_ynew[j]
        obj = ids[p]
        a = first_k(tree, size, ys, ids, p, yn, obj, p, k, True, LF)
        b = first_k(tree, size, ys, ids, p, yn, obj, p, k, False, RF)
        cnt[C_FIRST_K] += 2
        ng = tile(p, xs, n, k, LF, a, RF, b, True, LF, 0, RF, 0, LF, 0, RF, 0, False, gb)
        mf, mi, nm = emit(gb, ng, c, sparse, obj, yn, dn_idx[j], NEW, mf, mi, nm,
                          pbox, pstart, pend, plo, phi, leaves, lq, lpt, cnt, scratch)
    return mf[:nm], mi[:nm]

"""IGPT: the Skype subscription index with individual and group pruning (paper Section 5).

Layout (Figure 5, flattened): a Quadtree over subscription locations whose leaves hold an
inverted file; the posting list of term w in leaf c (a *segment*) is split into alpha*-groups
(global quantile boundaries, 5.2.1) and each group is sorted by kScore* ascending with the
suffix maxima maxwt(G[s]) and G[s].alpha* (Eq. 6, 7) stored per entry, so that the group's
own statistics are those of its first entry. A term directory lists the segments of every
term, so a message only visits the leaves that index its terms.

Dissemination (Algorithm 1, TAAT over the message's terms) per segment: cell pruning (Lemma
6), then per group a bound from the group's record (the maxima of alpha and of the entries'
text weights, the least threshold: a bound on every entry's Theorem 5.1 test, which prunes
where the alpha*-group's own bounds do not), group pruning (Theorem 5.3) and early
termination by binary search (Theorem 5.4) in segments longer than ``FLAT``, then per
subscription location-aware prefix filtering with max-weight refinement (Theorem 5.1, with
inner + outer spatial bounds, Definition 8), and finally exact verification. s.theta replaces
kScore (Remark in 6.2). A batch of messages is answered in one walk of the index: term by term
in increasing order, each segment read once for all the batch's messages that hold its term.
An entry holds its own Theorem 5.1 bound in parts, so the entries that fail it are decided
from the segment alone; segments of at most ``FLAT`` entries test their entries one by one
after the group record, without Theorems 5.3 and 5.4, which cost more than they save when
groups hold a few entries.

No score is accumulated across terms, so the unseen-keyword bound (Theorem 5.2) is not used:
a (message, subscription) pair is a candidate when its entry passes Theorem 5.1 at any of its
shared terms (at the first one the bound covers the whole score, so no result is lost), and
every candidate is verified once. On the TWEETS-like stream at 300k subscriptions that
verifies about 3% more pairs (101 against 98 per message), while accumulating cost a hash
table probe and random reads of the subscription's row and terms per passing entry, several
times what verifying the pairs in slot order costs.

A term position that the subscription table does not mark ``indexed`` gets no entry (a
cluster replica that indexes only the terms it is placed for): a message whose first term
shared with the subscription (in term-id order) is indexed is still found, since the bound
there covers the whole score; one met only at a later shared term may be found or not, and
is verified exactly like any other when it is, unless ``OWN_PAIRS`` leaves it to the replica
that indexes that first term (the verification's merge stops there,
``scoring.owned_score_at``; off, see there).

Maintenance (5.5): inserts and deletes mark their leaf dirty; dirty leaves are rebuilt
(sorted, statistics recomputed) before the next dissemination. A threshold change re-keys the
subscription's entries in place instead (``_rekey``: each entry moves inside its group to its
new kScore*, the group's suffix maxima are recomputed, the leaf's minimum lambda_s is lowered
if needed): on dense streams re-evaluations change hundreds of thresholds per batch spread
over almost every leaf, and rebuilding those leaves cost more than the dissemination. Every
stored bound stays conservative: a key is exact, and a leaf's minimum lambda_s may only be
lower than the true one (a rise does not raise it until the next rebuild), which prunes less.
Leaves split when they exceed the leaf capacity.

A batch may be matched on two threads (:class:`SideThread`): the walk kernel runs without the
GIL, each thread walks the index for its share of the messages, and the two results laid end
to end are the one walk's (grouped by message, each message's in slot order).
"""
from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

from rankcast.common.arrays import grow
from rankcast.config import EngineConfig
from .scoring import (EPS, NO_MATCH, NOT_OURS, alpha_star, below, kscore_star, lambda_s, owned_score_at, score_at,
                      ssim, ssim_ub_out)
from .subtable import SubTable

__all__ = ["IGPT", "SideThread"]

# entry columns, in two tables of equal rows: ENTRY what group pruning, early termination
# and a passing entry read (the bounds of the suffix it starts, its group's end, the
# subscription and term position), HOT the entry's own Theorem 5.1 bound in parts (see
# _entry_bound), which is all that the ~99% of entries that fail it read
ENTRY = np.dtype([("key", np.float64), ("smaxwt", np.float64), ("sastar", np.float64), ("sub", np.int64),
                  ("pos", np.int64), ("gend", np.int64)], align=True)
HOT = np.dtype([("alpha", np.float64), ("sa", np.float64), ("sb", np.float64), ("tc", np.float64),
                ("tw", np.float64), ("thb", np.float64)], align=True)
# one record per group (a run of one alpha*-group inside a segment): its entries end at
# ``end`` and every entry's own Theorem 5.1 bound is at most ``alpha * max(SSimUB_out, 0) +
# min(tc * maxwt_m, tw * wtsum_m)`` with the group's maxima of alpha, tc and tw, pruned below
# the group's least ``thb`` (see _group_bound); float32, rounded outwards
GROUP = np.dtype([("alpha", np.float32), ("tc", np.float32), ("tw", np.float32), ("thb", np.float32),
                  ("end", np.int64)], align=True)
# segments of at most this many entries are read entry by entry (each entry's own test is
# cheaper than a group test plus the early-termination search when groups are short; on the
# TWEETS-like stream at 300k subscriptions 128 beat 8 and 32 by 1.16x and 1.04x)
FLAT = 128
# a replica leaves the pairs whose first shared term it does not index to the replica that
# does (``_match``'s ``own``). Off: on GeoNames at 64 partitions it cut 4-7% of the pairs and
# 3-9% of the buffer rows but no partition CPU that could be measured, and the replicas' lower
# local kScores raised the re-evaluations 7% (keyword) and 16% (prefix) over 15,000 messages,
# the shards' work, the slowest stage there
OWN_PAIRS = False
# a second test of an entry that passes its leaf's bound (``_walk``): the score's bound at the
# subscription's own location (exact SSim) instead of its leaf's box. "off": none (the default:
# no partition CPU gained). "whole": the bound covers the pair's whole score, the
# terms before the entry's included, so a replica keeps every pair it met before (its buffer and
# kScore unchanged); on GeoNames at 64 prefix partitions 20% fewer pairs verified, and 2-4% more
# partition CPU. "suffix": in tables whose rows index some of their terms (replicas) the bound
# from the entry's term on (exact, as at the pair's first shared term, where that bound covers
# the whole score): 4x fewer pairs, 15-26% less partition CPU, but a replica drops pairs whose
# first shared term another replica indexes, so its kScore is lower: re-evaluations +2.6% over
# 15,000 messages. A table that indexes every term (an engine's) takes the bound from the
# entry's term on under both.
LOCATION = "off"
_LOCATION_MODES = {"off": 0, "whole": 1, "suffix": 2}
# segment columns (G_GROUPS .. G_GROUPS_END: the segment's rows of the group table)
G_LEAF, G_TERM, G_START, G_END, G_DIRPOS, G_GROUPS, G_GROUPS_END = 0, 1, 2, 3, 4, 5, 6
# term directory columns; its pool lists a term's segments as rows (segment, leaf, entries,
# groups) so that a message reads them in sequence, without a visit to the segment table
D_START, D_LEN, D_CAP = 0, 1, 2
P_SEG, P_LEAF, P_START, P_END, P_GROUPS, P_GROUPS_END = 0, 1, 2, 3, 4, 5
P_COLS = 6
N_COUNTS = 8          # the walk's counters (see _match)
# one record per subscription for what a candidate's verification reads
# (alpha, theta, its term run: kept equal to the subscription table's by add,
# thresholds_changed, flush and, after the table moves its term pool, match) and the inner
# distance to its leaf's border (set when it is linked into a leaf)
ROW = np.dtype([("alpha", np.float64), ("theta", np.float64), ("sdin", np.float64), ("toff", np.int64),
                ("tlen", np.int64)], align=True)


@numba.njit(cache=True)
def _locate(xs, ys, nbox, nchild):
    """Leaf of each point: descend by x >= mid, y >= mid (children ordered SW, SE, NW, NE)."""
    out = np.empty(xs.shape[0], np.int64)
    for i in range(xs.shape[0]):
        n = 0
        while nchild[n] >= 0:
            mx = 0.5 * (nbox[n, 0] + nbox[n, 2])
            my = 0.5 * (nbox[n, 1] + nbox[n, 3])
            n = nchild[n] + (1 if xs[i] >= mx else 0) + (2 if ys[i] >= my else 0)
        out[i] = n
    return out


@numba.njit(cache=True)
def _link(slots, leaves, xs, ys, nbox, ncount, nhead, sleaf, snext, sprev, sdin):
    for i in range(slots.shape[0]):
        s = slots[i]
        L = leaves[i]
        sleaf[s] = L
        sprev[s] = -1
        snext[s] = nhead[L]
        if nhead[L] >= 0:
            sprev[nhead[L]] = s
        nhead[L] = s
        ncount[L] += 1
        b = nbox[L]
        sdin[s] = min(xs[s] - b[0], b[2] - xs[s], ys[s] - b[1], b[3] - ys[s])


@numba.njit(cache=True)
def _unlink(slots, ncount, nhead, sleaf, snext, sprev):
    for s in slots:
        L = sleaf[s]
        if sprev[s] >= 0:
            snext[sprev[s]] = snext[s]
        else:
            nhead[L] = snext[s]
        if snext[s] >= 0:
            sprev[snext[s]] = sprev[s]
        ncount[L] -= 1
        sleaf[s] = -1


@numba.njit(cache=True)
def _members(L, nhead, snext, count):
    out = np.empty(count, np.int64)
    s = nhead[L]
    i = 0
    while s >= 0:
        out[i] = s
        i += 1
        s = snext[s]
    return out[:i]


@numba.njit(cache=True, inline="always")
def _entry_bound(en, alpha, theta, sdin, wts, mxw, max_dist):
    """Set the parts of the entry's own Theorem 5.1 test: for a message at outer distance
    d_out > 0 from the leaf, alpha * SSimUB + (1 - alpha) * TSimUB (Definition 8, Eq. 5)
    is ``sa - sb * d_out + min(tc * maxwt_m, tw * wtsum_m)`` (``alpha`` in place of the
    spatial part when the message lies in the leaf), pruned below ``thb``: theta less the
    slack of :func:`below`. Rounding differs from the unsplit expression by a few ulps,
    far inside that slack."""
    en.alpha = alpha
    en.sa = alpha * (1.0 - sdin / max_dist)
    en.sb = alpha / max_dist
    en.tc = (1.0 - alpha) * wts
    en.tw = (1.0 - alpha) * mxw
    en.thb = theta - EPS * (1.0 + abs(theta))


@numba.njit(cache=True, inline="always")
def _up32(x):
    """A float32 at least ``x >= 0`` (the relative margin is far above float32 rounding)."""
    return np.float32(x * (1.0 + 1e-6) + 1e-30)


@numba.njit(cache=True, inline="always")
def _down32(x):
    """A float32 at most ``x``."""
    return np.float32(x - 1e-6 * (1.0 + abs(x)) - 1e-30)


@numba.njit(cache=True, inline="always")
def _group_record(gr, hot, a, b):
    """The group record of entries a .. b (see :data:`GROUP`): maxima of alpha, tc and tw
    rounded up, the least thb rounded down."""
    ma = 0.0
    mc = 0.0
    mw = 0.0
    mt = math.inf
    for e in range(a, b):
        h = hot[e]
        ma = max(ma, h.alpha)
        mc = max(mc, h.tc)
        mw = max(mw, h.tw)
        mt = min(mt, h.thb)
    gr.alpha = _up32(ma)
    gr.tc = _up32(mc)
    gr.tw = _up32(mw)
    gr.thb = _down32(mt)
    gr.end = b


@numba.njit(cache=True, nogil=True)
def _rebuild(leaves, fresh, nchild, nhead, snext, ncount, n_ne, n_g0, n_ng, nminls,
             toff, tlen, terms, indexed, wtsum, maxwt, alpha, theta, sdin, max_dist, group_bounds,
             ent, hot, e_used, gI, g_used, grp, r_used, td, td_pool, td_used):
    """Rebuild the inverted file of each leaf in ``leaves`` (see module docstring): an entry
    for every term position of its subscriptions that ``indexed`` (bool per pool position)
    marks.

    Capacity of ent/hot/gI/grp is ensured by the caller; td_pool grows here.
    Returns (e_used, g_used, r_used, td_pool, td_used)."""
    for L in leaves:
        if not fresh:
            for g in range(n_g0[L], n_g0[L] + n_ng[L]):
                t = gI[g, G_TERM]
                pos = gI[g, G_DIRPOS]
                last_i = td[t, D_START] + td[t, D_LEN] - 1
                last = td_pool[last_i, P_SEG]
                for c in range(P_COLS):
                    td_pool[td[t, D_START] + pos, c] = td_pool[last_i, c]
                gI[last, G_DIRPOS] = pos
                td[t, D_LEN] -= 1
        n_ng[L] = 0
        n_ne[L] = 0
        nminls[L] = math.inf
        if nchild[L] >= 0 or ncount[L] == 0:
            continue
        mem = _members(L, nhead, snext, ncount[L])
        ne = 0
        for s in mem:
            for p in range(tlen[s]):
                if indexed[toff[s] + p]:
                    ne += 1
        e_term = np.empty(ne, np.int64)
        e_grp = np.empty(ne, np.int64)
        e_key = np.empty(ne)
        e_sub = np.empty(ne, np.int64)
        e_pos = np.empty(ne, np.int64)
        i = 0
        mls = math.inf
        for s in mem:
            a = alpha[s]
            g = np.searchsorted(group_bounds, a, side="right")
            ks = kscore_star(theta[s], a)
            mls = min(mls, lambda_s(theta[s], a))
            for p in range(tlen[s]):
                if not indexed[toff[s] + p]:
                    continue
                e_term[i] = terms[toff[s] + p]
                e_grp[i] = g
                e_key[i] = ks
                e_sub[i] = s
                e_pos[i] = p
                i += 1
        nminls[L] = mls
        o1 = np.argsort(e_key, kind="mergesort")
        o2 = o1[np.argsort(e_grp[o1], kind="mergesort")]
        order = o2[np.argsort(e_term[o2], kind="mergesort")]
        base = e_used
        n_ne[L] = ne
        n_g0[L] = g_used
        for r in range(ne):
            q = order[r]
            s = e_sub[q]
            ent[base + r].sub = s
            ent[base + r].pos = e_pos[q]
            ent[base + r].key = e_key[q]
            _entry_bound(hot[base + r], alpha[s], theta[s], sdin[s], wtsum[toff[s] + e_pos[q]],
                         maxwt[toff[s] + e_pos[q]], max_dist)
            ent[base + r].smaxwt = maxwt[toff[s] + e_pos[q]]
        # segments (term runs) and groups (group runs inside them)
        r = 0
        while r < ne:
            t = e_term[order[r]]
            r2 = r
            while r2 < ne and e_term[order[r2]] == t:
                r2 += 1
            g = g_used
            g_used += 1
            n_ng[L] += 1
            gI[g, G_LEAF] = L
            gI[g, G_TERM] = t
            gI[g, G_START] = base + r
            gI[g, G_END] = base + r2
            # term directory append (relocate the term's list when full)
            if td[t, D_LEN] == td[t, D_CAP]:
                cap = 2 * td[t, D_CAP] + 2
                if td_used + cap > td_pool.shape[0]:
                    nb = np.empty((max(2 * td_pool.shape[0], td_used + cap), P_COLS), np.int64)
                    nb[:td_used] = td_pool[:td_used]
                    td_pool = nb
                for u in range(td[t, D_LEN]):
                    for c in range(P_COLS):
                        td_pool[td_used + u, c] = td_pool[td[t, D_START] + u, c]
                td[t, D_START] = td_used
                td[t, D_CAP] = cap
                td_used += cap
            gI[g, G_DIRPOS] = td[t, D_LEN]
            row = td[t, D_START] + td[t, D_LEN]
            td_pool[row, P_SEG] = g
            td_pool[row, P_LEAF] = L
            td_pool[row, P_START] = base + r
            td_pool[row, P_END] = base + r2
            td[t, D_LEN] += 1
            # groups
            gI[g, G_GROUPS] = r_used
            td_pool[row, P_GROUPS] = r_used
            u = r
            while u < r2:
                eg = e_grp[order[u]]
                u2 = u
                while u2 < r2 and e_grp[order[u2]] == eg:
                    u2 += 1
                mw = 0.0
                ma = 0.0
                for v in range(u2 - 1, u - 1, -1):
                    mw = max(mw, ent[base + v].smaxwt)
                    ma = max(ma, alpha_star(hot[base + v].alpha))
                    ent[base + v].smaxwt = mw
                    ent[base + v].sastar = ma
                    ent[base + v].gend = base + u2
                _group_record(grp[r_used], hot, base + u, base + u2)
                r_used += 1
                u = u2
            gI[g, G_GROUPS_END] = r_used
            td_pool[row, P_GROUPS_END] = r_used
            r = r2
        e_used = base + ne
    return e_used, g_used, r_used, td_pool, td_used


@numba.njit(cache=True, inline="always")
def _move_entry(ent, hot, d, r):
    a = ent[d]
    b = ent[r]
    a.key = b.key
    a.smaxwt = b.smaxwt
    a.sastar = b.sastar
    a.sub = b.sub
    a.pos = b.pos
    a.gend = b.gend
    h = hot[d]
    g = hot[r]
    h.alpha = g.alpha
    h.sa = g.sa
    h.sb = g.sb
    h.tc = g.tc
    h.tw = g.tw
    h.thb = g.thb


@numba.njit(cache=True, nogil=True)
def _rekey(slots, skip_leaf, sleaf, n_g0, n_ng, nminls, toff, tlen, terms, indexed, maxwt, alpha, theta,
           built_theta, ent, hot, gI, grp):
    """Give the entries of ``slots`` the key of their current theta in place: each entry
    moves inside its group to keep the keys ascending, and the group's suffix maxima and
    record are recomputed. Leaves flagged in ``skip_leaf`` (about to be rebuilt) are left
    alone. Returns the number of entries re-keyed."""
    moved = 0
    for s in slots:
        L = sleaf[s]
        if L < 0 or skip_leaf[L]:
            continue
        a = alpha[s]
        key = kscore_star(theta[s], a)
        nminls[L] = min(nminls[L], lambda_s(theta[s], a))
        for p in range(tlen[s]):
            if not indexed[toff[s] + p]:
                continue
            t = terms[toff[s] + p]
            e = -1
            g0 = 0
            seg = -1
            for g in range(n_g0[L], n_g0[L] + n_ng[L]):
                if gI[g, G_TERM] == t:
                    for q in range(gI[g, G_START], gI[g, G_END]):
                        if ent[q].sub == s and ent[q].pos == p:
                            e = q
                            break
                    g0 = gI[g, G_START]
                    seg = g
                    break
            if e < 0:
                continue
            gend = ent[e].gend
            gstart = e
            while gstart > g0 and ent[gstart - 1].gend == gend:
                gstart -= 1
            e_sa = hot[e].sa
            e_sb = hot[e].sb
            e_tc = hot[e].tc
            e_tw = hot[e].tw
            while e > gstart and ent[e - 1].key > key:
                _move_entry(ent, hot, e, e - 1)
                e -= 1
            while e + 1 < gend and ent[e + 1].key < key:
                _move_entry(ent, hot, e, e + 1)
                e += 1
            ent[e].sub = s
            ent[e].pos = p
            ent[e].gend = gend
            ent[e].key = key
            hot[e].alpha = a
            hot[e].sa = e_sa
            hot[e].sb = e_sb
            hot[e].tc = e_tc
            hot[e].tw = e_tw
            hot[e].thb = theta[s] - EPS * (1.0 + abs(theta[s]))   # as _entry_bound
            mw = 0.0
            ma = 0.0
            for v in range(gend - 1, gstart - 1, -1):
                u = ent[v].sub
                mw = max(mw, maxwt[toff[u] + ent[v].pos])
                ma = max(ma, alpha_star(hot[v].alpha))
                ent[v].smaxwt = mw
                ent[v].sastar = ma
            for q in range(gI[seg, G_GROUPS], gI[seg, G_GROUPS_END]):
                if grp[q].end == gend:
                    _group_record(grp[q], hot, gstart, gend)
                    break
            moved += 1
        built_theta[s] = theta[s]
    return moved


@numba.njit(cache=True, inline="always")
def _group_skip(smaxwt, key, sastar, m_wtsum, ss_out):
    """Theorem 5.3 / 5.4 test for the suffix starting at an entry: no subscription there can
    get the term into its refined prefix. The slack scales with the magnitudes involved
    (kScore* and alpha* grow without bound as alpha approaches 1)."""
    lhs = smaxwt * m_wtsum
    rhs = key - sastar * ss_out
    return lhs < rhs - EPS * (1.0 + abs(key) + sastar)


@numba.njit(cache=True, inline="always")
def _group_bound(g_alpha, g_tc, g_tw, g_thb, ss_pos, m_maxwt, m_wtsum):
    """The group record's test (see :data:`GROUP`): no entry of the group passes its own
    Theorem 5.1 test. An entry's spatial part, ``alpha`` inside the leaf and ``alpha * (1 -
    (d_in + d_out) / MaxDist)`` outside, is at most ``alpha * max(SSimUB_out, 0)``; its text
    part at most the group maxima's; the margin of the record's rounding is far above the
    rounding of either test."""
    return g_alpha * ss_pos + min(g_tc * m_maxwt, g_tw * m_wtsum) < g_thb


@numba.njit(cache=True)
def _walk(n_m, m_terms, m_x, m_y, max_dist, nbox, nminls, ent, hot, grp, td, td_pool, n_dir, flat_upto,
          records, m_ws, occ_msg, order, c_key, cnt, m_off, s_x, s_y, row, p_wtsum, p_maxwt, mode):
    """The index walk of :func:`_match` into a candidate array of fixed size (a kernel of its
    own so that no array is reassigned inside its loops, which would cost numba a reference
    count update per iteration): one key ``slot * messages + message`` per entry that passes
    its test (a pair sharing several terms may come more than once). Returns the number of
    keys, or ``-1 - k`` when they do not fit, ``k`` the occurrences (of ``order``) walked
    before the term where they ran out (the caller retries with more room)."""
    n_occ = order.shape[0]
    c_cap = c_key.shape[0]
    n_c = 0
    k = 0
    while k < n_occ:
        t = m_terms[order[k]]
        k2 = k + 1
        while k2 < n_occ and m_terms[order[k2]] == t:
            k2 += 1
        if t >= n_dir:
            k = k2
            continue
        d0 = td[t, D_START]
        for d in range(d0, d0 + td[t, D_LEN]):
            L = td_pool[d, P_LEAF]
            bx0 = nbox[L, 0]
            by0 = nbox[L, 1]
            bx1 = nbox[L, 2]
            by1 = nbox[L, 3]
            mls = nminls[L]
            p0 = td_pool[d, P_START]
            end = td_pool[d, P_END]
            q0 = td_pool[d, P_GROUPS]
            q1 = td_pool[d, P_GROUPS_END]
            for kk in range(k, k2):
                u = order[kk]
                i = occ_msg[u]
                cnt[0] += 1
                dx = max(bx0 - m_x[i], 0.0, m_x[i] - bx1)     # MinDist(m, cell)
                dy = max(by0 - m_y[i], 0.0, m_y[i] - by1)
                dout = math.sqrt(dx * dx + dy * dy)
                inside = dout <= 0.0
                ss_out = ssim_ub_out(dout, max_dist)
                # Lemma 6: even TSim = 1 cannot lift any subscription of the cell
                if below(ss_out, mls):
                    cnt[1] += 1
                    continue
                wsum = m_ws[u]
                wmax = m_ws[u + m_ws.shape[0] // 2]
                flat = end - p0 <= flat_upto
                ss_pos = max(ss_out, 0.0)
                p = p0
                for q in range(q0, q1):
                    gr = grp[q]
                    gend = gr.end
                    if records and _group_bound(gr.alpha, gr.tc, gr.tw, gr.thb, ss_pos, wmax, wsum):
                        p = gend
                        cnt[5] += 1
                        continue
                    if flat:       # every entry's own test
                        lo = gend
                    else:
                        if _group_skip(ent[p].smaxwt, ent[p].key, ent[p].sastar, wsum, ss_out):
                            p = gend   # Theorem 5.3
                            cnt[2] += 1
                            continue
                        lo = p + 1     # Theorem 5.4: first entry from which all can be skipped
                        hi = gend
                        while lo < hi:
                            mid = (lo + hi) // 2
                            if _group_skip(ent[mid].smaxwt, ent[mid].key, ent[mid].sastar, wsum, ss_out):
                                hi = mid
                            else:
                                lo = mid + 1
                    cnt[3] += lo - p
                    for e in range(p, lo):
                        en = hot[e]
                        # Theorem 5.1 (as TSimUB from this term on: both prefixes' bound),
                        # from the entry alone; a pair that passes at any of its shared
                        # terms is a candidate (at its first shared term the bound holds the
                        # whole score, so no result is lost)
                        sp = en.alpha if inside else en.sa - en.sb * dout
                        tb = min(en.tc * wmax, en.tw * wsum)
                        if sp + tb < en.thb:
                            continue
                        # a bound of the pair's whole score with the subscription's own location
                        # in place of its leaf's box (a partition's few subscriptions make large
                        # leaves, whose box bounds SSim by about 1): the score's spatial part as
                        # ``combine`` computes it, the text bound from this term on (``tb``) and
                        # one of the terms before it, which a shared term lies among in both
                        # rows (none where this term opens either row: then this is the first
                        # shared term). A pair it prunes scores below theta, which its
                        # verification would find: the results and every buffer stay the same,
                        # only fewer pairs are verified (rounding inside thb's slack)
                        if mode > 0:
                            sb = ent[e].sub
                            ps = ent[e].pos
                            m0 = m_off[i]
                            pre = 0.0
                            if mode == 1 and ps > 0 and u > m0:
                                a0 = row[sb].toff
                                pre = (1.0 - en.alpha) * min(
                                    max(p_wtsum[a0] - p_wtsum[a0 + ps], 0.0) * m_ws[m0 + m_ws.shape[0] // 2],
                                    p_maxwt[a0] * max(m_ws[m0] - wsum, 0.0))
                            if en.alpha * ssim(s_x[sb], s_y[sb], m_x[i], m_y[i], max_dist) + tb + pre < en.thb:
                                cnt[7] += 1
                                continue
                        if n_c == c_cap:
                            return -1 - k      # k: the occurrences walked before this term
                        c_key[n_c] = ent[e].sub * n_m + i
                        n_c += 1
                    p = gend
        k = k2
    return n_c


@numba.njit(cache=True)
def _radix_sort(a):
    """The non-negative int64 keys ``a`` in ascending order (LSD radix). The digit is 8 to 16
    bits, whichever pass count reads the fewest counts and keys: a walk of a few thousand
    keys (a partition's step) pays passes of 2 x 65,536 counts at 16 bits, several times
    its keys, where 3 passes of 11 bits read 2 x 2,048."""
    n = a.shape[0]
    out = a.copy()
    if n < 2:
        return out
    top = out.max()
    nbits = 1
    while (top >> nbits) > 0:
        nbits += 1
    width = 16
    best = -1
    for d in range(8, 17):
        cost = ((nbits + d - 1) // d) * (2 * n + 2 * (1 << d))
        if best < 0 or cost < best:
            best = cost
            width = d
    mask = (1 << width) - 1
    tmp = np.empty(n, np.int64)
    count = np.empty(1 << width, np.int64)
    for shift in range(0, nbits, width):     # no shift by 64 or more (undefined)
        count[:] = 0
        for x in range(n):
            count[(out[x] >> shift) & mask] += 1
        tot = 0
        for d in range(1 << width):
            c = count[d]
            count[d] = tot
            tot += c
        for x in range(n):
            d = (out[x] >> shift) & mask
            tmp[count[d]] = out[x]
            count[d] += 1
        out, tmp = tmp, out
    return out


@numba.njit(cache=True, nogil=True)
def _match(m_off, m_terms, m_w, m_x, m_y, max_dist, s_x, s_y, p_terms, p_w, row,
           nbox, nminls, ent, hot, grp, td, td_pool, n_dir, flat_upto, records, cap, indexed, own,
           p_wtsum, p_maxwt, mode=0):
    """Algorithm 1 over a batch, in one walk of the index: the batch's term occurrences are
    taken in increasing term order and each segment of a term is read once for every message
    that holds the term, while its group records and entries stay in cache for all of them.
    A group whose record bounds every entry below its threshold is skipped whole; an entry
    of any other group passes its own Theorem 5.1 test (the bound of its term and the unseen
    ones, from what the entry holds) or is dropped. Every (message, subscription) pair with a
    passing entry is verified once, exactly, in slot order.

    ``row``: one :data:`ROW` record per slot; ``records``: test the group records (off only
    in tests of Theorems 5.3 and 5.4); ``cap``: room for this many passing entries
    (doubled until they fit). ``own`` (a table whose replicas index only some of their terms,
    ``indexed`` per pool position): a pair whose first shared term (in term-id order) is not
    indexed here is left to the replica that indexes it (see the module docstring), neither
    verified nor returned. Returns (msg_idx, slots, scores, counters, cap) with counters =
    [segments visited, cells pruned, groups pruned (Theorem 5.3), entries checked, verified,
    groups pruned by their record, pairs left to another replica, pairs pruned by the
    bound of their whole score at the subscription's own location]; ``p_wtsum`` /
    ``p_maxwt``: the table's pools (Eq. 3, 4 per term position); results come grouped by
    message, each message's in slot order."""
    n_m = m_off.shape[0] - 1
    if n_m <= 0:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0), np.zeros(N_COUNTS, np.int64), cap
    u0 = m_off[0]
    u1 = m_off[n_m]
    # per occurrence: its message and the message's wtsum / maxwt from it on (Eq. 3, 4),
    # wtsum in the first half of m_ws and maxwt in the second (one slot past the end: 0)
    m_ws = np.zeros(2 * (u1 + 1))
    h2 = u1 + 1
    occ_msg = np.empty(u1, np.int64)
    for i in range(n_m):
        ws = 0.0
        mx = 0.0
        for u in range(m_off[i + 1] - 1, m_off[i] - 1, -1):
            ws += m_w[u]
            mx = max(mx, m_w[u])
            m_ws[u] = ws
            m_ws[h2 + u] = mx
            occ_msg[u] = i
    order = np.argsort(m_terms[u0:u1], kind="mergesort") + u0
    while True:
        c_key = np.empty(cap, np.int64)
        cnt = np.zeros(N_COUNTS, np.int64)
        n_c = _walk(n_m, m_terms, m_x, m_y, max_dist, nbox, nminls, ent, hot, grp, td, td_pool, n_dir,
                    flat_upto, records, m_ws, occ_msg, order, c_key, cnt, m_off, s_x, s_y, row, p_wtsum, p_maxwt,
                    mode)
        if n_c >= 0:
            break
        # room for as many as the occurrences walked so far suggest for the whole batch (a
        # first batch finds the room of a new index: doubling from a small one re-walked it
        # about once more in all), at least twice and at most 64 times the room that was short
        done = -1 - n_c
        cap = min(64 * cap, max(2 * cap, (cap * (u1 - u0)) // max(done, 1) * 5 // 4 + 1))
    # verification of each distinct pair, in slot order (the subscriptions' rows and terms
    # are read in sequence, not at random), then grouped by message (a stable counting sort)
    keys = _radix_sort(c_key[:n_c])
    v_m = np.empty(n_c, np.int64)
    v_s = np.empty(n_c, np.int64)
    v_sc = np.empty(n_c)
    per_msg = np.zeros(n_m + 1, np.int64)
    n_v = 0
    for x in range(n_c):
        if x > 0 and keys[x] == keys[x - 1]:
            continue
        s = keys[x] // n_m
        i = keys[x] - s * n_m
        r = row[s]
        base = r.toff
        am = m_off[i]
        cnt[4] += 1
        if own:
            sc = owned_score_at(s_x[s], s_y[s], r.alpha, p_terms, p_w, base, base + r.tlen,
                                m_x[i], m_y[i], m_terms, m_w, am, m_off[i + 1], max_dist, indexed)
            if sc == NOT_OURS:
                cnt[4] -= 1
                cnt[6] += 1
                continue
        else:
            sc = score_at(s_x[s], s_y[s], r.alpha, p_terms, p_w, base, base + r.tlen,
                          m_x[i], m_y[i], m_terms, m_w, am, m_off[i + 1], max_dist)
        if sc == NO_MATCH or sc < r.theta:
            continue
        v_m[n_v] = i
        v_s[n_v] = s
        v_sc[n_v] = sc
        per_msg[i + 1] += 1
        n_v += 1
    for i in range(n_m):
        per_msg[i + 1] += per_msg[i]
    o_m = np.empty(n_v, np.int64)
    o_s = np.empty(n_v, np.int64)
    o_sc = np.empty(n_v)
    for x in range(n_v):
        i = v_m[x]
        d = per_msg[i]
        per_msg[i] = d + 1
        o_m[d] = i
        o_s[d] = v_s[x]
        o_sc[d] = v_sc[x]
    n_out = n_v
    return o_m[:n_out], o_s[:n_out], o_sc[:n_out], cnt, cap


@numba.njit(cache=True)
def _term_major(td, td_pool, gI, e_used, r_used, lo):
    """New places for the entries and group records of every live segment, term by term and
    each term's segments in directory order (the order a walk reads them), with the segment
    table and the directory pointed at them. Returns (new place of each entry, of each group
    record: -1 for garbage, entries kept, records kept)."""
    epos = np.full(e_used, -1, np.int64)
    rpos = np.full(r_used, -1, np.int64)
    ne = 0
    nr = 0
    for t in range(lo, td.shape[0]):      # no term under ``lo`` has a segment
        for d in range(td[t, D_START], td[t, D_START] + td[t, D_LEN]):
            a = td_pool[d, P_START]
            b = td_pool[d, P_END]
            for e in range(a, b):
                epos[e] = ne + e - a
            q0 = td_pool[d, P_GROUPS]
            q1 = td_pool[d, P_GROUPS_END]
            for q in range(q0, q1):
                rpos[q] = nr + q - q0
            g = td_pool[d, P_SEG]
            td_pool[d, P_START] = ne
            td_pool[d, P_END] = ne + b - a
            td_pool[d, P_GROUPS] = nr
            td_pool[d, P_GROUPS_END] = nr + q1 - q0
            for c, col in ((G_START, P_START), (G_END, P_END), (G_GROUPS, P_GROUPS),
                           (G_GROUPS_END, P_GROUPS_END)):
                gI[g, c] = td_pool[d, col]
            ne += b - a
            nr += q1 - q0
    return epos, rpos, ne, nr


@numba.njit(cache=True)
def _places(pos, n):
    """``pos`` (a new place for each row, -1 for rows dropped, ``n`` rows kept) made a
    permutation: the dropped rows go to the places from ``n`` on."""
    full = pos.copy()
    nxt = n
    for r in range(full.shape[0]):
        if full[r] < 0:
            full[r] = nxt
            nxt += 1
    return full


@numba.njit(cache=True)
def _permute(arr, full):
    """Row r of ``arr`` to row ``full[r]``, in place (cycle by cycle: no second table)."""
    done = np.zeros(full.shape[0], np.bool_)
    tmp = np.empty(2, arr.dtype)
    for r in range(full.shape[0]):
        if done[r] or full[r] == r:
            continue
        tmp[0] = arr[r]                # the row in hand
        q = full[r]
        while True:
            tmp[1] = arr[q]
            arr[q] = tmp[0]
            done[q] = True
            tmp[0] = tmp[1]
            if q == r:
                break
            q = full[q]


@numba.njit(cache=True)
def _moved_ends(ent, grp, epos):
    """Group ends (entry indices, exclusive) after the entries moved by ``epos`` (a group
    stays contiguous and in order)."""
    for e in range(ent.shape[0]):
        ent[e].gend = epos[ent[e].gend - 1] + 1
    for q in range(grp.shape[0]):
        grp[q].end = epos[grp[q].end - 1] + 1


def _location_mode(partial: bool) -> int:
    """``_walk``'s location test for a table (see :data:`LOCATION`): 0 none, 1 the bound of the
    whole score, 2 the bound from the entry's term on."""
    mode = _LOCATION_MODES[LOCATION]
    return 2 if mode and not partial else mode


class IGPT:
    """The production disseminator (Disseminator interface of :mod:`rankcast.kinds.spatial.core`)."""

    RELAYOUT = 0.25          # entries rebuilt since the last relayout, as a share of all, for another
    # an index pickled before it kept its smallest indexed term (a checkpoint of older code) has
    # its directory's rows from term 0 on
    _td_lo = 0

    def __init__(self, subs: SubTable, cfg: EngineConfig):
        self.subs = subs
        self.cfg = cfg
        self.max_dist = cfg.max_dist
        self.capacity = cfg.leaf_capacity
        self.max_depth = cfg.max_depth
        self.groups = cfg.groups
        # alpha-partition boundaries: quantiles of the alphas seen (uniform until data arrives)
        self.group_bounds = np.linspace(0, 1, cfg.groups + 1)[1:-1]
        self._bounds_from = 0
        # Quadtree
        self.nbox = np.zeros((16, 4))
        self.nbox[0] = cfg.bounds
        self.nchild = np.full(16, -1, np.int64)
        self.ndepth = np.zeros(16, np.int64)
        self.ncount = np.zeros(16, np.int64)
        self.nhead = np.full(16, -1, np.int64)
        self.n_ne = np.zeros(16, np.int64)
        self.n_g0 = np.zeros(16, np.int64)
        self.n_ng = np.zeros(16, np.int64)
        self.nminls = np.full(16, np.inf)
        self.n_nodes = 1
        # per slot
        self.sleaf = np.full(0, -1, np.int64)
        self.snext = np.full(0, -1, np.int64)
        self.sprev = np.full(0, -1, np.int64)
        self.row = np.zeros(0, ROW)
        self._moves = 0                          # the subscription table's pool moves seen
        self._cand_cap = 1024                    # candidates a batch's walk has room for
        self.flat_upto = FLAT                    # segments read entry by entry up to this size
        self.records = True                      # groups skipped by their record's bound
        # pools
        self.ent = np.zeros(1024, ENTRY)
        self.hot = np.zeros(1024, HOT)
        self.e_used = 0
        self.gI = np.zeros((1024, 7), np.int64)
        self.g_used = 0
        self.grp = np.zeros(1024, GROUP)
        self.r_used = 0
        self.td = np.zeros((1024, 3), np.int64)
        self.td_pool = np.zeros((4096, P_COLS), np.int64)
        self.td_used = 0
        self.dirty: set[int] = set()
        self.built_theta = np.zeros(0)           # theta of each slot's stored keys
        self.rekeyed = 0                         # entries re-keyed in place
        self.counts = np.zeros(N_COUNTS, np.int64)   # see _match
        self.rebuilds = 0
        self._td_lo = 1 << 62                    # the smallest term id indexed so far
        self._scattered = 0                      # entries placed by rebuilds since _relayout
        self.relayouts = 0

    # ------------------------------------------------------------------ sizing
    def _grow_slots(self):
        n = len(self.subs.ids)
        if len(self.sleaf) < n:
            self.sleaf = grow(self.sleaf, n, -1)
            self.snext = grow(self.snext, n, -1)
            self.sprev = grow(self.sprev, n, -1)
            self.row = grow(self.row, n)
            self.built_theta = grow(self.built_theta, n)

    def _grow_nodes(self, n):
        if n <= len(self.nchild):
            return
        for name, fill in (("nbox", 0), ("nchild", -1), ("ndepth", 0), ("ncount", 0), ("nhead", -1),
                           ("n_ne", 0), ("n_g0", 0), ("n_ng", 0), ("nminls", np.inf)):
            setattr(self, name, grow(getattr(self, name), n, fill))

    # ------------------------------------------------------------------ interface
    def add(self, slots: np.ndarray) -> None:
        self._grow_slots()
        s = self.subs
        self._maybe_regroup(slots)
        leaves = _locate(s.x[slots], s.y[slots], self.nbox, self.nchild)
        _link(slots, leaves, s.x, s.y, self.nbox, self.ncount, self.nhead, self.sleaf, self.snext,
              self.sprev, self.row["sdin"])
        self._sync_toff()
        row = self.row
        row["alpha"][slots] = s.alpha[slots]
        row["theta"][slots] = s.theta[slots]
        row["toff"][slots] = s.toff[slots]
        row["tlen"][slots] = s.tlen[slots]
        self.dirty.update(np.unique(leaves).tolist())
        self._split()

    def _sync_toff(self) -> None:
        s = self.subs
        if s.moves != self._moves:               # the term pool moved: every toff changed
            self.row["toff"][: s.n] = s.toff[: s.n]
            self._moves = s.moves

    def remove(self, slots: np.ndarray) -> None:
        leaves = self.sleaf[slots].copy()
        _unlink(slots, self.ncount, self.nhead, self.sleaf, self.snext, self.sprev)
        self.dirty.update(np.unique(leaves).tolist())

    def thresholds_changed(self, slots: np.ndarray) -> None:
        """Re-key the entries of ``slots`` in place (see the module docstring)."""
        if not len(slots):
            return
        slots = np.asarray(slots, np.int64)
        self.row["theta"][slots] = self.subs.theta[slots]
        slots = slots[self.subs.theta[slots] != self.built_theta[slots]]
        if not len(slots):
            return
        skip = np.zeros(self.n_nodes, np.bool_)
        if self.dirty:
            skip[np.fromiter(self.dirty, np.int64, len(self.dirty))] = True
        s = self.subs
        self.rekeyed += int(_rekey(slots, skip, self.sleaf, self.n_g0, self.n_ng, self.nminls, s.toff,
                                   s.tlen, s.terms, s.indexed, s.maxwt, s.alpha, s.theta, self.built_theta,
                                   self.ent, self.hot, self.gI, self.grp))

    def match(self, msgs, side: "SideThread | None" = None, run=None):
        """(message positions, slots, scores) of every match of ``msgs``, grouped by message.
        ``side``: ``run`` (the caller's work, which touches nothing of this index) goes first on
        that thread, which then walks the index for the last messages of the batch while this
        thread walks it for the first ones (:meth:`SideThread.cut`)."""
        self.flush()
        self._sync_toff()
        if side is None or len(msgs) < 2 or not side.active():
            if run is not None:
                run()
            midx, slots, scores, cnt, self._cand_cap = self._walk(msgs, 0, len(msgs), self._cand_cap)
        else:
            midx, slots, scores, cnt = self._match_beside(msgs, side, run)
        if len(self.counts) < N_COUNTS:      # an index pickled with fewer counters (older code)
            self.counts = np.concatenate([self.counts, np.zeros(N_COUNTS - len(self.counts), np.int64)])
        self.counts += cnt
        return midx, slots, scores

    def _walk(self, msgs, a: int, b: int, cap: int):
        """``_match`` of messages a..b of ``msgs`` (positions from a), without copying them."""
        s = self.subs
        return _match(msgs.offsets[a:b + 1], msgs.term_ids, msgs.weights, msgs.x[a:b], msgs.y[a:b], self.max_dist,
                      s.x, s.y, s.terms, s.w, self.row,
                      self.nbox, self.nminls, self.ent, self.hot, self.grp, self.td, self.td_pool, len(self.td),
                      self.flat_upto, self.records, cap, s.indexed, OWN_PAIRS and s.partial, s.wtsum, s.maxwt,
                      _location_mode(s.partial))

    def _match_beside(self, msgs, side: "SideThread", run):
        n = len(msgs)
        cut = side.cut(n)
        cap = self._cand_cap

        def beside():
            t0 = time.perf_counter()
            if run is not None:
                run()
            t1 = time.perf_counter()
            out = self._walk(msgs, cut, n, cap) if cut < n else None
            return out, t1 - t0, time.perf_counter() - t1

        w0, c0 = time.perf_counter(), time.process_time()
        fut = side.pool.submit(beside)
        try:
            t0 = time.perf_counter()
            head = self._walk(msgs, 0, cut, cap) if cut else None
            t_head = time.perf_counter() - t0
        finally:
            tail, t_run, t_tail = fut.result()      # the side's work ends here, raising or not
        side.learn(n, t_head, t_run, t_tail)
        side.overlap((time.process_time() - c0) / max(time.perf_counter() - w0, 1e-9))
        parts = [p for p in (head, tail) if p is not None]
        self._cand_cap = max(p[4] for p in parts)
        if len(parts) == 1:
            midx, slots, scores, cnt, _ = parts[0]
            return (midx if head is not None else midx + cut), slots, scores, cnt
        return (np.concatenate([head[0], tail[0] + cut]), np.concatenate([head[1], tail[1]]),
                np.concatenate([head[2], tail[2]]), head[3] + tail[3])

    def verified(self) -> int:
        """The pairs verified so far (``stats()["verified"]`` without the leaves' sums: the
        core reads it after every batch)."""
        return int(self.counts[4])

    def stats(self) -> dict:
        leaves = np.flatnonzero((self.nchild[: self.n_nodes] < 0))
        c = self.counts
        return dict(verified=int(c[4]), segments_visited=int(c[0]), cells_pruned=int(c[1]),
                    groups_pruned=int(c[2]), group_records_pruned=int(c[5]), left_to_replicas=int(c[6]), location_pruned=int(c[7]), entries_checked=int(c[3]), leaves=int(len(leaves)), segments=int(self.n_ng[leaves].sum()),
                    entries=int(self.n_ne[leaves].sum()), rebuilds=self.rebuilds, rekeyed=self.rekeyed,
                    relayouts=self.relayouts)

    # ------------------------------------------------------------------ maintenance
    def _maybe_regroup(self, slots):
        """Quantile boundaries of alpha (equivalently alpha*) once enough subscriptions exist."""
        s = self.subs
        n_live = len(s)
        if n_live >= 2 * max(self._bounds_from, 500):
            alphas = s.alpha[s.live_slots()]
            qs = np.quantile(alphas, np.linspace(0, 1, self.groups + 1)[1:-1])
            self.group_bounds = np.unique(qs)
            self._bounds_from = n_live
            self.dirty.update(np.flatnonzero(self.nchild[: self.n_nodes] < 0).tolist())

    def _split(self):
        s = self.subs
        todo = [L for L in self.dirty if self.nchild[L] < 0 and self.ncount[L] > self.capacity
                and self.ndepth[L] < self.max_depth]
        while todo:
            L = todo.pop()
            first = self.n_nodes
            self._grow_nodes(first + 4)
            x0, y0, x1, y1 = self.nbox[L]
            mx, my = 0.5 * (x0 + x1), 0.5 * (y0 + y1)
            self.nbox[first: first + 4] = [(x0, y0, mx, my), (mx, y0, x1, my), (x0, my, mx, y1), (mx, my, x1, y1)]
            self.ndepth[first: first + 4] = self.ndepth[L] + 1
            self.n_nodes += 4
            mem = _members(L, self.nhead, self.snext, self.ncount[L])
            _unlink(mem, self.ncount, self.nhead, self.sleaf, self.snext, self.sprev)
            self.nchild[L] = first
            leaves = _locate(s.x[mem], s.y[mem], self.nbox, self.nchild)
            _link(mem, leaves, s.x, s.y, self.nbox, self.ncount, self.nhead, self.sleaf, self.snext,
                  self.sprev, self.row["sdin"])
            self.dirty.update(range(first, first + 4))
            for c in range(first, first + 4):
                if self.ncount[c] > self.capacity and self.ndepth[c] < self.max_depth:
                    todo.append(c)

    def flush(self) -> None:
        """Rebuild dirty leaves (before any dissemination)."""
        if not self.dirty:
            return
        s = self.subs
        live_entries = int(self.n_ne[: self.n_nodes].sum())
        fresh = False
        if self.e_used > 4 * max(live_entries, 1 << 14):
            # pools are mostly garbage: start them afresh and rebuild every leaf
            self.dirty = set(np.flatnonzero(self.nchild[: self.n_nodes] < 0).tolist())
            self.e_used = self.g_used = self.r_used = self.td_used = 0
            self.td[self._td_lo:, D_LEN] = 0
            self.td[self._td_lo:, D_CAP] = 0
            self.n_ng[:] = 0
            self.n_ne[:] = 0
            fresh = True
        leaves = np.fromiter(sorted(self.dirty), np.int64, len(self.dirty))
        need = int(sum(int(s.tlen[_members(L, self.nhead, self.snext, self.ncount[L])].sum())
                       for L in leaves.tolist() if self.nchild[L] < 0))
        self.ent = grow(self.ent, self.e_used + need)
        self.hot = grow(self.hot, self.e_used + need)
        self.gI = grow(self.gI, self.g_used + need)
        self.grp = grow(self.grp, self.r_used + need)
        # the directory has a row per term id up to the largest *indexed* one (a keyword
        # partition indexes a range of the vocabulary: rows past it are never read or written,
        # ``_walk`` skips a term past the directory), and the rows under the smallest indexed
        # term, zero and never touched (``grow`` leaves them unmapped), are skipped
        held = s.terms[: s.pool_used][s.indexed[: s.pool_used]]
        if len(held):
            self.td = grow(self.td, int(held.max()) + 1)
            self._td_lo = min(self._td_lo, int(held.min()))
        self.e_used, self.g_used, self.r_used, self.td_pool, self.td_used = _rebuild(
            leaves, fresh, self.nchild, self.nhead, self.snext, self.ncount, self.n_ne,
            self.n_g0, self.n_ng, self.nminls, s.toff, s.tlen, s.terms, s.indexed, s.wtsum, s.maxwt,
            s.alpha, s.theta,
            self.row["sdin"], self.max_dist, self.group_bounds, self.ent, self.hot, self.e_used, self.gI,
            self.g_used, self.grp, self.r_used, self.td, self.td_pool, self.td_used)
        for L in leaves.tolist():
            if self.nchild[L] < 0 and self.ncount[L]:
                mem = _members(L, self.nhead, self.snext, self.ncount[L])
                self.built_theta[mem] = s.theta[mem]
                self.row["theta"][mem] = s.theta[mem]
        self.rebuilds += len(leaves)
        self.dirty.clear()
        self._scattered += need
        if self._scattered > self.RELAYOUT * max(int(self.n_ne[: self.n_nodes].sum()), 1):
            self._relayout()

    def _relayout(self) -> None:
        """Entries and group records term-major (see _term_major): a term's segments are
        read in sequence by the walk instead of one leaf's block each (at 1M subscriptions
        the entry tables are far larger than the caches); garbage goes past the end. The rows
        move in place, so no table is copied."""
        epos, rpos, ne, nr = _term_major(self.td, self.td_pool, self.gI, self.e_used, self.r_used,
                                           self._td_lo)
        full = _places(epos, ne)
        _permute(self.ent[: self.e_used], full)
        _permute(self.hot[: self.e_used], full)
        _permute(self.grp[: self.r_used], _places(rpos, nr))
        _moved_ends(self.ent[:ne], self.grp[:nr], epos)
        self.e_used, self.r_used = ne, nr
        self._scattered = 0
        self.relayouts += 1


class SideThread:
    """A second thread for matching a batch (:meth:`IGPT.match`): first the caller's own work
    (a window append), then the walk for the last messages of the batch, while the calling
    thread walks it for the first ones. The share of messages given to it follows the measured
    times, so that both threads end together. An actor that holds the only partition of a
    cluster uses it: the machine's other core is idle while a call waits for that actor. Not
    pickled: whoever holds one makes it (``ThreadPoolExecutor`` does not pickle)."""

    SMOOTH = 0.3        # weight of the last batch in the share
    # Two threads pay only where a second core is free. On a machine whose cores are all
    # taken (other processes; or their sessions, which Linux's autogroups share the CPU
    # between: a session gets its share whatever its threads), the process's CPU time over
    # a split batch grows no faster than the wall clock (below MIN_OVERLAP), or a thread's
    # CPU time falls well below its wall-clock time (below MIN_OWN: two threads on one core
    # get about half each), and the hand-over costs about 5% of a step: a "no free core"
    # verdict sends the next batches to one thread, 1 the first time, twice as many at each
    # verdict that follows (at most PROBE_EVERY - 1: every PROBE_EVERY-th batch then tries
    # two again), and a batch that finds its core again resets it to 1. A wrong verdict (a
    # warm-up, a GC, Ray's own threads) then costs one batch on one thread, not PROBE_EVERY.
    MIN_OVERLAP = 1.2
    MIN_OWN = 0.75
    PROBE_EVERY = 16

    def __init__(self, probe_every: int = PROBE_EVERY):
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="rankcast-side")
        self.probe_every = int(probe_every)     # the longest a "no free core" verdict holds, + 1
        self.share = 0.3            # of the batch's messages walked on the side thread
        self.batches = 0
        self.one_until = 0          # batches before this one run on one thread
        self.hold = 1               # batches the next "no free core" verdict sends to one thread
        self.verdicts = [0, 0]      # ("no free core", free) verdicts so far

    def active(self) -> bool:
        """Whether this batch runs on two threads (counts the batch)."""
        self.batches += 1
        return self.batches > self.one_until

    def verdict(self, free: bool) -> None:
        """A batch run on two threads found a free core (``free``), or not: the next
        ``hold`` batches on one thread, ``hold`` doubled (see above)."""
        self.verdicts[bool(free)] += 1
        if free:
            self.hold = 1
            return
        self.one_until = self.batches + self.hold
        self.hold = min(2 * self.hold, max(1, self.probe_every - 1))

    def overlap(self, cpu_per_wall: float) -> None:
        """The process's CPU time per wall-clock second over a batch run on two threads."""
        self.verdict(cpu_per_wall >= self.MIN_OVERLAP)

    def threads_ran(self, cpu, wall, cpu_per_wall: float | None = None) -> None:
        """Each thread's CPU and wall-clock seconds over its part of a batch run on two
        threads (less its waits for the other): free where each got at least MIN_OWN of a
        core (two threads sharing one core get about half each: 0.41-0.54 measured), or
        where the process's CPU per wall second over the batch (``cpu_per_wall``, if given)
        reached MIN_OVERLAP: "no free core" only where both measures say so, so that a
        thread's waits for the GIL on a free core do not read as a lost core."""
        own = min(c / max(w, 1e-9) for c, w in zip(cpu, wall))
        self.verdict(own >= self.MIN_OWN or (cpu_per_wall is not None and cpu_per_wall >= self.MIN_OVERLAP))

    def cut(self, n: int) -> int:
        """Messages 0..cut of a batch of ``n`` are walked on the calling thread, the rest beside."""
        return n - int(round(self.share * n))

    def learn(self, n: int, t_head: float, t_run: float, t_tail: float) -> None:
        """The share that ends both threads together, from one batch's times: both walk at the
        rate r of the messages walked, the side thread first runs the caller's work
        (``t_run``), so (n - m) r = t_run + m r for the m messages beside."""
        if n <= 0 or (t_head + t_tail) <= 0:
            return
        rate = (t_head + t_tail) / n
        want = min(0.5, max(0.0, (1.0 - t_run / (n * rate)) / 2.0)) if rate > 0 else 0.0
        self.share += self.SMOOTH * (want - self.share)

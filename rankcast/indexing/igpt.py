"""IGPT: the Skype subscription index with individual and group pruning (paper Section 5).

Layout (Figure 5, flattened): a Quadtree over subscription locations whose leaves hold an
inverted file; the posting list of term w in leaf c (a *segment*) is split into alpha*-groups
(global quantile boundaries, 5.2.1) and each group is sorted by kScore* ascending with the
suffix maxima maxwt(G[s]) and G[s].alpha* (Eq. 6, 7) stored per entry, so that the group's
own statistics are those of its first entry. A term directory lists the segments of every
term, so a message only visits the leaves that index its terms.

Dissemination (Algorithm 1, TAAT over the message's terms) per segment: cell pruning (Lemma
6), group pruning (Theorem 5.3), early termination by binary search (Theorem 5.4), then per
subscription location-aware prefix filtering with max-weight refinement (Theorem 5.1, with
inner + outer spatial bounds, Definition 8) and the unseen-keyword bound (Theorem 5.2), and
finally exact verification. s.theta replaces kScore (Remark in 6.2).

One correction to the paper: Theorem 5.2 adds the score accumulated *so far* to the bound of
the unseen keywords, but a subscription already in the candidate map can be skipped for one
of its terms by group pruning or early termination, which ignore what was accumulated; the
sum then misses that term and a later Theorem 5.2 test could drop a true result (the
GeoNames benchmark stream hits this). Here, when a subscription is met again, the exact
contributions of the shared terms skipped since its last accumulated term are added first
(a short merge of the two term lists), so the accumulated sum is always complete up to the
current term and every Theorem 5.2 test (including the last one, before verification) is
sound.

Maintenance (5.5): inserts and deletes mark their leaf dirty; dirty leaves are rebuilt
(sorted, statistics recomputed) before the next dissemination. A threshold change re-keys the
subscription's entries in place instead (``_rekey``: each entry moves inside its group to its
new kScore*, the group's suffix maxima are recomputed, the leaf's minimum lambda_s is lowered
if needed): on dense streams re-evaluations change hundreds of thresholds per batch spread
over almost every leaf, and rebuilding those leaves cost more than the dissemination. Every
stored bound stays conservative: a key is exact, and a leaf's minimum lambda_s may only be
lower than the true one (a rise does not raise it until the next rebuild), which prunes less.
Leaves split when they exceed the leaf capacity.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from .._arrays import grow
from ..config import EngineConfig
from .scoring import (EPS, NO_MATCH, alpha_star, below, kscore_star, lambda_s, score, ssim_ub,
                      ssim_ub_out, tsim_ub)
from .subtable import SubTable

__all__ = ["IGPT"]

# entry columns
# one entry (a subscription in a segment's group) per cache line: the bounds of the suffix
# it starts (group pruning and the early-termination search read them), its group's end,
# and the subscription and term position the entry check reads
ENTRY = np.dtype([("key", np.float64), ("smaxwt", np.float64), ("sastar", np.float64), ("astar", np.float64),
                  ("sub", np.int64), ("pos", np.int64), ("gend", np.int64)], align=True)
# segment columns
G_LEAF, G_TERM, G_START, G_END, G_DIRPOS = 0, 1, 2, 3, 4
# term directory columns; its pool lists a term's segments as rows (segment, leaf, entries)
# so that a message reads them in sequence, without a visit to the segment table
D_START, D_LEN, D_CAP = 0, 1, 2
P_SEG, P_LEAF, P_START, P_END = 0, 1, 2, 3
# one cache line per subscription for the entry loop of _match: what its tests read (alpha,
# theta, the inner distance to its leaf's border, its term run: kept equal to the subscription
# table's by add, thresholds_changed, flush and, after the table moves its term pool, match)
# and the per-message accumulator (valid while stamp is the message's)
ROW = np.dtype([("alpha", np.float64), ("theta", np.float64), ("sdin", np.float64), ("toff", np.int64),
                ("tlen", np.int64), ("stamp", np.int64), ("acc", np.float64), ("pprev", np.int32),
                ("jprev", np.int32)], align=True)


@numba.njit(cache=True, inline="always")
def _mindist(px, py, box):
    dx = max(box[0] - px, 0.0, px - box[2])
    dy = max(box[1] - py, 0.0, py - box[3])
    return math.sqrt(dx * dx + dy * dy)


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


@numba.njit(cache=True)
def _rebuild(leaves, fresh, nchild, nhead, snext, ncount, n_e0, n_ne, n_g0, n_ng, nminls,
             toff, tlen, terms, maxwt, alpha, theta, group_bounds,
             ent, e_used, gI, g_used, td, td_pool, td_used):
    """Rebuild the inverted file of each leaf in ``leaves`` (see module docstring).

    Capacity of ent/gI is ensured by the caller; td_pool grows here.
    Returns (e_used, g_used, td_pool, td_used)."""
    for L in leaves:
        if not fresh:
            for g in range(n_g0[L], n_g0[L] + n_ng[L]):
                t = gI[g, G_TERM]
                pos = gI[g, G_DIRPOS]
                last_i = td[t, D_START] + td[t, D_LEN] - 1
                last = td_pool[last_i, P_SEG]
                for c in range(4):
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
            ne += tlen[s]
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
        n_e0[L] = base
        n_ne[L] = ne
        n_g0[L] = g_used
        for r in range(ne):
            q = order[r]
            s = e_sub[q]
            ent[base + r].sub = s
            ent[base + r].pos = e_pos[q]
            ent[base + r].key = e_key[q]
            ent[base + r].astar = alpha_star(alpha[s])
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
                    nb = np.empty((max(2 * td_pool.shape[0], td_used + cap), 4), np.int64)
                    nb[:td_used] = td_pool[:td_used]
                    td_pool = nb
                for u in range(td[t, D_LEN]):
                    for c in range(4):
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
            u = r
            while u < r2:
                grp = e_grp[order[u]]
                u2 = u
                while u2 < r2 and e_grp[order[u2]] == grp:
                    u2 += 1
                mw = 0.0
                ma = 0.0
                for v in range(u2 - 1, u - 1, -1):
                    mw = max(mw, ent[base + v].smaxwt)
                    ma = max(ma, ent[base + v].astar)
                    ent[base + v].smaxwt = mw
                    ent[base + v].sastar = ma
                    ent[base + v].gend = base + u2
                u = u2
            r = r2
        e_used = base + ne
    return e_used, g_used, td_pool, td_used


@numba.njit(cache=True, inline="always")
def _move_entry(ent, d, r):
    a = ent[d]
    b = ent[r]
    a.key = b.key
    a.smaxwt = b.smaxwt
    a.sastar = b.sastar
    a.astar = b.astar
    a.sub = b.sub
    a.pos = b.pos
    a.gend = b.gend


@numba.njit(cache=True)
def _rekey(slots, skip_leaf, sleaf, n_g0, n_ng, nminls, toff, tlen, terms, maxwt, alpha, theta,
           built_theta, ent, gI):
    """Give the entries of ``slots`` the key of their current theta in place: each entry
    moves inside its group to keep the keys ascending, and the group's suffix maxima are
    recomputed. Leaves flagged in ``skip_leaf`` (about to be rebuilt) are left alone.
    Returns the number of entries re-keyed."""
    moved = 0
    for s in slots:
        L = sleaf[s]
        if L < 0 or skip_leaf[L]:
            continue
        a = alpha[s]
        key = kscore_star(theta[s], a)
        nminls[L] = min(nminls[L], lambda_s(theta[s], a))
        for p in range(tlen[s]):
            t = terms[toff[s] + p]
            e = -1
            g0 = 0
            for g in range(n_g0[L], n_g0[L] + n_ng[L]):
                if gI[g, G_TERM] == t:
                    for q in range(gI[g, G_START], gI[g, G_END]):
                        if ent[q].sub == s and ent[q].pos == p:
                            e = q
                            break
                    g0 = gI[g, G_START]
                    break
            if e < 0:
                continue
            gend = ent[e].gend
            gstart = e
            while gstart > g0 and ent[gstart - 1].gend == gend:
                gstart -= 1
            astar = ent[e].astar
            while e > gstart and ent[e - 1].key > key:
                _move_entry(ent, e, e - 1)
                e -= 1
            while e + 1 < gend and ent[e + 1].key < key:
                _move_entry(ent, e, e + 1)
                e += 1
            ent[e].sub = s
            ent[e].pos = p
            ent[e].gend = gend
            ent[e].key = key
            ent[e].astar = astar
            mw = 0.0
            ma = 0.0
            for v in range(gend - 1, gstart - 1, -1):
                u = ent[v].sub
                mw = max(mw, maxwt[toff[u] + ent[v].pos])
                ma = max(ma, ent[v].astar)
                ent[v].smaxwt = mw
                ent[v].sastar = ma
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


@numba.njit(cache=True)
def _match(m_off, m_terms, m_w, m_x, m_y, max_dist,
           s_x, s_y, p_terms, p_w, p_wtsum, p_maxwt, row,
           nbox, nminls, ent, td, td_pool, n_dir,
           leaf_stamp, leaf_dout, leaf_skip, stamp0):
    """Algorithm 1 over a batch. ``row``: one :data:`ROW` record per slot (what an entry's
    tests read, and the per-message accumulator). Returns (msg_idx, slots, scores, counters,
    stamp) with counters = [segments visited, cells pruned, groups pruned, entries checked,
    verified]."""
    cap = 1024
    o_m = np.empty(cap, np.int64)
    o_s = np.empty(cap, np.int64)
    o_sc = np.empty(cap)
    n_out = 0
    cnt = np.zeros(5, np.int64)
    stamp = stamp0
    touched = np.empty(1024, np.int64)
    for i in range(m_off.shape[0] - 1):
        stamp += 1
        a = m_off[i]
        q = m_off[i + 1] - a
        if q == 0:
            continue
        mt = m_terms[a:a + q]
        mw = m_w[a:a + q]
        mx = m_x[i]
        my = m_y[i]
        m_wtsum = np.zeros(q + 1)
        m_maxwt = np.zeros(q + 1)
        for j in range(q - 1, -1, -1):
            m_wtsum[j] = m_wtsum[j + 1] + mw[j]
            m_maxwt[j] = max(m_maxwt[j + 1], mw[j])
        n_t = 0
        for j in range(q):
            t = mt[j]
            if t >= n_dir:
                continue
            d0 = td[t, D_START]
            for d in range(d0, d0 + td[t, D_LEN]):
                L = td_pool[d, P_LEAF]
                if leaf_stamp[L] != stamp:
                    leaf_stamp[L] = stamp
                    dout = _mindist(mx, my, nbox[L])
                    leaf_dout[L] = dout
                    # Lemma 6: even TSim = 1 cannot lift any subscription of the cell
                    leaf_skip[L] = below(ssim_ub_out(dout, max_dist), nminls[L])
                cnt[0] += 1
                if leaf_skip[L]:
                    cnt[1] += 1
                    continue
                dout = leaf_dout[L]
                ss_out = ssim_ub_out(dout, max_dist)
                p = td_pool[d, P_START]
                end = td_pool[d, P_END]
                while p < end:
                    gend = ent[p].gend
                    if _group_skip(ent[p].smaxwt, ent[p].key, ent[p].sastar, m_wtsum[j], ss_out):
                        p = gend   # Theorem 5.3
                        cnt[2] += 1
                        continue
                    lo = p + 1     # Theorem 5.4: first entry from which all can be skipped
                    hi = gend
                    while lo < hi:
                        mid = (lo + hi) // 2
                        if _group_skip(ent[mid].smaxwt, ent[mid].key, ent[mid].sastar, m_wtsum[j], ss_out):
                            hi = mid
                        else:
                            lo = mid + 1
                    cnt[3] += lo - p
                    for e in range(p, lo):
                        s = ent[e].sub
                        r = row[s]
                        first = r.stamp != stamp
                        if not first and r.acc == -math.inf:
                            continue
                        pos = ent[e].pos
                        base = r.toff
                        al = r.alpha
                        th = r.theta
                        ss = ssim_ub(r.sdin, dout, max_dist)
                        if first:
                            # Theorem 5.1 (as TSimUB from this term on: both prefixes' bound)
                            ub = tsim_ub(p_wtsum[base + pos], p_maxwt[base + pos], m_wtsum[j], m_maxwt[j])
                            if below(al * ss + (1.0 - al) * ub, th):
                                continue
                            r.stamp = stamp
                            r.acc = 0.0
                            if n_t == touched.shape[0]:
                                nt = np.empty(2 * n_t, np.int64)
                                nt[:n_t] = touched
                                touched = nt
                            touched[n_t] = s
                            n_t += 1
                        else:
                            # shared terms skipped since the last accumulated one (group
                            # pruning / early termination ignore the accumulated score): add
                            # them exactly, so that acc is complete before this term
                            u = r.pprev + 1
                            v = r.jprev + 1
                            a_s = r.acc
                            while u < pos and v < j:
                                tu = p_terms[base + u]
                                if tu == mt[v]:
                                    a_s += p_w[base + u] * mw[v]
                                    u += 1
                                    v += 1
                                elif tu < mt[v]:
                                    u += 1
                                else:
                                    v += 1
                            r.acc = a_s
                            # Theorem 5.2: what is accumulated plus this term and the unseen ones
                            ub = a_s + tsim_ub(p_wtsum[base + pos], p_maxwt[base + pos], m_wtsum[j], m_maxwt[j])
                            if below(al * ss + (1.0 - al) * ub, th):
                                r.acc = -math.inf
                                continue
                        r.acc += p_w[base + pos] * mw[j]
                        r.pprev = pos
                        r.jprev = j
                    p = gend
        # verification
        for u in range(n_t):
            s = touched[u]
            r = row[s]
            if r.acc == -math.inf:
                continue
            base = r.toff
            n_s = r.tlen
            pp = r.pprev + 1
            jj = r.jprev + 1
            ub = r.acc
            if pp < n_s and jj < q:
                ub += tsim_ub(p_wtsum[base + pp], p_maxwt[base + pp], m_wtsum[jj], m_maxwt[jj])
            al = r.alpha
            L_ss = 1.0  # spatial part checked exactly below
            if below(al * L_ss + (1.0 - al) * ub, r.theta):
                continue
            cnt[4] += 1
            sc = score(s_x[s], s_y[s], al, p_terms[base:base + n_s], p_w[base:base + n_s],
                       mx, my, mt, mw, max_dist)
            if sc == NO_MATCH or sc < r.theta:
                continue
            if n_out == o_m.shape[0]:
                nm = np.empty(2 * n_out, np.int64)
                ns = np.empty(2 * n_out, np.int64)
                nsc = np.empty(2 * n_out)
                nm[:n_out] = o_m
                ns[:n_out] = o_s
                nsc[:n_out] = o_sc
                o_m, o_s, o_sc = nm, ns, nsc
            o_m[n_out] = i
            o_s[n_out] = s
            o_sc[n_out] = sc
            n_out += 1
    return o_m[:n_out], o_s[:n_out], o_sc[:n_out], cnt, stamp


class IGPT:
    """The production disseminator (Disseminator interface of :mod:`rankcast.indexing.core`)."""

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
        self.n_e0 = np.zeros(16, np.int64)
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
        self.stamp = 0
        # pools
        self.ent = np.zeros(1024, ENTRY)
        self.e_used = 0
        self.gI = np.zeros((1024, 5), np.int64)
        self.g_used = 0
        self.td = np.zeros((1024, 3), np.int64)
        self.td_pool = np.zeros((4096, 4), np.int64)
        self.td_used = 0
        self.leaf_stamp = np.zeros(16, np.int64)
        self.leaf_dout = np.zeros(16)
        self.leaf_skip = np.zeros(16, np.bool_)
        self.dirty: set[int] = set()
        self.built_theta = np.zeros(0)           # theta of each slot's stored keys
        self.rekeyed = 0                         # entries re-keyed in place
        self.counts = np.zeros(5, np.int64)   # see _match
        self.rebuilds = 0

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
                           ("n_e0", 0), ("n_ne", 0), ("n_g0", 0), ("n_ng", 0), ("nminls", np.inf),
                           ("leaf_stamp", 0), ("leaf_dout", 0), ("leaf_skip", False)):
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
                                   s.tlen, s.terms, s.maxwt, s.alpha, s.theta, self.built_theta,
                                   self.ent, self.gI))

    def match(self, msgs):
        self.flush()
        s = self.subs
        self._sync_toff()
        midx, slots, scores, cnt, self.stamp = _match(
            msgs.offsets, msgs.term_ids, msgs.weights, msgs.x, msgs.y, self.max_dist,
            s.x, s.y, s.terms, s.w, s.wtsum, s.maxwt, self.row,
            self.nbox, self.nminls, self.ent, self.td, self.td_pool, len(self.td),
            self.leaf_stamp, self.leaf_dout, self.leaf_skip, self.stamp)
        self.counts += cnt
        return midx, slots, scores

    def stats(self) -> dict:
        leaves = np.flatnonzero((self.nchild[: self.n_nodes] < 0))
        c = self.counts
        return dict(verified=int(c[4]), segments_visited=int(c[0]), cells_pruned=int(c[1]),
                    groups_pruned=int(c[2]), entries_checked=int(c[3]), leaves=int(len(leaves)), segments=int(self.n_ng[leaves].sum()),
                    entries=int(self.n_ne[leaves].sum()), rebuilds=self.rebuilds, rekeyed=self.rekeyed)

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
            self.e_used = self.g_used = self.td_used = 0
            self.td[:, D_LEN] = 0
            self.td[:, D_CAP] = 0
            self.n_ng[:] = 0
            self.n_ne[:] = 0
            fresh = True
        leaves = np.fromiter(sorted(self.dirty), np.int64, len(self.dirty))
        need = int(sum(int(s.tlen[_members(L, self.nhead, self.snext, self.ncount[L])].sum())
                       for L in leaves.tolist() if self.nchild[L] < 0))
        self.ent = grow(self.ent, self.e_used + need)
        self.gI = grow(self.gI, self.g_used + need)
        max_term = int(s.terms[: s.pool_used].max()) if s.pool_used else 0
        self.td = grow(self.td, max_term + 1)
        self.e_used, self.g_used, self.td_pool, self.td_used = _rebuild(
            leaves, fresh, self.nchild, self.nhead, self.snext, self.ncount, self.n_e0, self.n_ne,
            self.n_g0, self.n_ng, self.nminls, s.toff, s.tlen, s.terms, s.maxwt, s.alpha, s.theta,
            self.group_bounds, self.ent, self.e_used, self.gI, self.g_used, self.td,
            self.td_pool, self.td_used)
        for L in leaves.tolist():
            if self.nchild[L] < 0 and self.ncount[L]:
                mem = _members(L, self.nhead, self.snext, self.ncount[L])
                self.built_theta[mem] = s.theta[mem]
                self.row["theta"][mem] = s.theta[mem]
        self.rebuilds += len(leaves)
        self.dirty.clear()

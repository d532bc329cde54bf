"""IPT: dissemination with the individual pruning technique only (paper 5.1, Fig. 12).

One inverted list per term over all subscriptions, no Quadtree, no alpha*-groups, no cell
pruning; so the spatial bound is the trivial ``SSimUB = 1``. For each message, the lists of
its terms are traversed term-at-a-time (TAAT) in increasing term id, with

- location-aware prefix filtering with max-weight refinement (Theorem 5.1): a posting of
  term ``w = m[j] = s[pos]`` is skipped when ``maxwt(m[j:]) * wtsum(s[pos:])`` cannot reach
  lambda_T (Eq. 2);
- the unseen-keyword bound (Theorem 5.2): after accumulating ``w``, a subscription whose
  partial TSim plus ``TSimUB(s[pos+1:], m[j+1:])`` (Eq. 5) cannot reach lambda_T is dropped;

then the surviving candidates are verified with :func:`~rankcast.kinds.spatial.scoring.score`.
The threshold is ``subs.theta`` (Remark in 6.2). Bounds are compared in score space,
``alpha * SSimUB + (1 - alpha) * TSimUB`` against theta through
:func:`~rankcast.kinds.spatial.scoring.below` -- the same test as ``TSimUB < lambda_T`` without
dividing by ``1 - alpha``, so rounding stays small for any alpha, alpha = 1 included.
"""
from __future__ import annotations

import numba
import numpy as np

from rankcast.kinds.spatial.columns import MessageBatch
from rankcast.kinds.spatial.scoring import below, tsim_ub
from rankcast.kinds.spatial.subtable import SubTable
from rankcast.common.arrays import grow
from ._postings import term_postings, verify_append

__all__ = ["IPT"]

_UNSEEN, _CANDIDATE, _PRUNED = 0, 1, 2


@numba.njit(cache=True)
def _message_suffix_stats(w, a, b, wtsum, maxwt):
    """wtsum (Eq. 3) and maxwt (Eq. 4) of the message terms ``w[a:b]`` into the first
    ``b - a + 1`` slots of ``wtsum`` / ``maxwt`` (the last one 0: nothing unseen)."""
    n = b - a
    wtsum[n] = 0.0
    maxwt[n] = 0.0
    for i in range(n - 1, -1, -1):
        wtsum[i] = wtsum[i + 1] + w[a + i]
        maxwt[i] = max(maxwt[i + 1], w[a + i])


@numba.njit(cache=True)
def _ipt_match(m_off, m_terms, m_w, m_x, m_y,
               p_off, p_slot, p_pos,
               toff, tlen, s_terms, s_w, s_wtsum, s_maxwt, sx, sy, alpha, theta,
               max_dist, state, acc, touched):
    """TAAT dissemination of a message batch over per-term lists (Algorithm 1 without
    cells and groups).

    m_*: the batch (CSR terms, sorted ids); p_off/p_slot/p_pos: per-term postings;
    toff..theta: the SubTable arrays; state int8[slots], acc float64[slots],
    touched int64[slots]: scratch, all zero/unseen on entry and on return.
    Returns (msg_idx int64[r], slots int64[r], scores float64[r], verified, scanned):
    the pairs with exact score >= theta, sorted by message then slot."""
    n = m_off.shape[0] - 1
    n_terms = p_off.shape[0] - 1
    out_m = np.empty(1024, np.int64)
    out_s = np.empty(1024, np.int64)
    out_v = np.empty(1024, np.float64)
    r = 0
    verified = 0
    scanned = 0
    longest = 1
    for i in range(n):
        longest = max(longest, m_off[i + 1] - m_off[i])
    m_wtsum = np.empty(longest + 1)
    m_maxwt = np.empty(longest + 1)
    for i in range(n):
        a = m_off[i]
        b = m_off[i + 1]
        _message_suffix_stats(m_w, a, b, m_wtsum, m_maxwt)
        nt = 0
        for j in range(b - a):
            term = m_terms[a + j]
            if term >= n_terms:
                break                       # ids are sorted: no later term has a list either
            wm = m_w[a + j]
            m_rest_max = m_maxwt[j]
            for e in range(p_off[term], p_off[term + 1]):
                scanned += 1
                s = p_slot[e]
                st = state[s]
                if st == _PRUNED:
                    continue
                al = alpha[s]
                one_minus = 1.0 - al
                th = theta[s]
                q = toff[s] + p_pos[e]
                # Theorem 5.1 (SSimUB = 1): w outside the refined prefix pref+(s|m)
                if below(al + one_minus * (m_rest_max * s_wtsum[q]), th):
                    continue
                if st == _UNSEEN:
                    state[s] = _CANDIDATE
                    acc[s] = 0.0
                    touched[nt] = s
                    nt += 1
                acc[s] += s_w[q] * wm
                # Theorem 5.2: partial TSim plus the bound of the unseen keywords
                if p_pos[e] + 1 < tlen[s]:
                    rest = tsim_ub(s_wtsum[q + 1], s_maxwt[q + 1], m_wtsum[j + 1], m_maxwt[j + 1])
                else:
                    rest = 0.0
                if below(al + one_minus * (acc[s] + rest), th):
                    state[s] = _PRUNED
        start = r
        for c in range(nt):
            s = touched[c]
            if state[s] == _CANDIDATE:
                verified += 1
                out_m, out_s, out_v, r = verify_append(s, i, a, b, sx, sy, alpha, theta, toff, tlen, s_terms, s_w,
                                                    m_x, m_y, m_terms, m_w, max_dist, out_m, out_s, out_v, r)
            state[s] = _UNSEEN
        if r - start > 1:
            order = np.argsort(out_s[start:r])
            out_s[start:r] = out_s[start:r][order]
            out_v[start:r] = out_v[start:r][order]
    return out_m[:r].copy(), out_s[:r].copy(), out_v[:r].copy(), verified, scanned


class IPT:
    """Disseminator with individual pruning only (baseline of paper Fig. 12)."""

    def __init__(self, subs: SubTable, cfg):
        self.subs = subs
        self.max_dist = float(cfg.max_dist)
        self._dirty = True
        self._lists = None
        self._state = np.zeros(0, np.int8)
        self._acc = np.zeros(0)
        self._touched = np.zeros(0, np.int64)
        self._stats = {"messages": 0, "verified": 0, "matched": 0, "scanned": 0, "rebuilds": 0}

    # The lists are rebuilt lazily: add/remove only mark them stale.
    def add(self, slots) -> None:
        self._dirty = True

    def remove(self, slots) -> None:
        self._dirty = True

    def thresholds_changed(self, slots) -> None:
        """Nothing is precomputed from theta: the bounds read subs.theta at match time."""

    def flush(self) -> None:
        """Bring the posting lists up to date (match does it first)."""
        if self._dirty:
            self._lists = term_postings(self.subs)
            self._dirty = False
            self._stats["rebuilds"] += 1
        n = len(self.subs.alive)
        self._state = grow(self._state, n)
        self._acc = grow(self._acc, n)
        self._touched = grow(self._touched, n)

    def match(self, msgs: MessageBatch):
        """(msg_idx, slots, scores): every live pair sharing a term with score >= theta."""
        self.flush()
        p_off, p_slot, p_pos = self._lists
        t = self.subs
        mi, sl, sc, verified, scanned = _ipt_match(
            msgs.offsets, msgs.term_ids, msgs.weights, msgs.x, msgs.y,
            p_off, p_slot, p_pos, t.toff, t.tlen, t.terms, t.w, t.wtsum, t.maxwt,
            t.x, t.y, t.alpha, t.theta, self.max_dist, self._state, self._acc, self._touched)
        st = self._stats
        st["messages"] += len(msgs)
        st["verified"] += int(verified)
        st["scanned"] += int(scanned)
        st["matched"] += len(mi)
        return mi, sl, sc

    def stats(self) -> dict:
        out = dict(self._stats)
        out["postings"] = 0 if self._lists is None else int(len(self._lists[1]))
        out["index_bytes"] = 0 if self._lists is None else int(sum(a.nbytes for a in self._lists))
        return out

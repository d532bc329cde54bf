"""Posting lists over the live subscriptions of a SubTable, shared by the baselines.

The baselines rebuild their lists from the table when subscriptions come or go (a
counting sort, linear in the number of terms): they are measured on dissemination, not on
online index maintenance, which is IGPT's subject (paper 5.5).
"""
from __future__ import annotations

import numba
import numpy as np

from rankcast.common.arrays import grown
from rankcast.kinds.spatial.scoring import score
from rankcast.kinds.spatial.subtable import SubTable

__all__ = ["term_postings", "n_terms_of", "verify_append"]


@numba.njit(cache=True)
def _term_postings(live, toff, tlen, terms, n_terms):
    """Per-term posting lists (CSR) of the subscriptions in ``live``.

    live: int64[n] slots in increasing order; toff/tlen/terms: the SubTable pool;
    n_terms: one more than the largest term id. Returns (off int64[n_terms + 1],
    slot int64[nnz], pos int64[nnz]) with ``pos`` the term's position inside the
    subscription; each list is in increasing slot order."""
    off = np.zeros(n_terms + 1, np.int64)
    for q in range(live.shape[0]):
        s = live[q]
        for p in range(tlen[s]):
            off[terms[toff[s] + p] + 1] += 1
    for t in range(n_terms):
        off[t + 1] += off[t]
    fill = off[:-1].copy()
    nnz = off[n_terms]
    slot = np.empty(nnz, np.int64)
    pos = np.empty(nnz, np.int64)
    for q in range(live.shape[0]):
        s = live[q]
        for p in range(tlen[s]):
            t = terms[toff[s] + p]
            e = fill[t]
            slot[e] = s
            pos[e] = p
            fill[t] = e + 1
    return off, slot, pos


def n_terms_of(subs: SubTable) -> int:
    """One more than the largest term id of a live subscription (0 when none)."""
    live = subs.live_slots()
    if len(live) == 0:
        return 0
    lens = subs.tlen[live]
    ends = subs.toff[live] + lens - 1            # terms are sorted: the last is the largest
    return int(subs.terms[ends[lens > 0]].max(initial=-1)) + 1


def term_postings(subs: SubTable):
    """(off, slot, pos) per-term posting lists of the live subscriptions of ``subs``."""
    live = subs.live_slots().astype(np.int64)
    return _term_postings(live, subs.toff, subs.tlen, subs.terms, n_terms_of(subs))


@numba.njit(cache=True)
def verify_append(s, i, a, b, sx, sy, alpha, theta, toff, tlen, s_terms, s_w,
                  m_x, m_y, m_terms, m_w, max_dist, out_m, out_s, out_v, r):
    """The verification step of the baselines: the exact score of subscription ``s`` for
    message ``i`` (its terms ``m_terms[a:b]``), appended as the pair (i, s, score) at row
    ``r`` of the output (doubled when full) if it reaches ``theta[s]``.
    Returns (out_m, out_s, out_v, r)."""
    q = toff[s]
    sc = score(sx[s], sy[s], alpha[s], s_terms[q:q + tlen[s]], s_w[q:q + tlen[s]],
               m_x[i], m_y[i], m_terms[a:b], m_w[a:b], max_dist)
    if sc >= theta[s]:
        if r == out_m.shape[0]:
            out_m = grown(out_m, 2 * r)
            out_s = grown(out_s, 2 * r)
            out_v = grown(out_v, 2 * r)
        out_m[r] = i
        out_s[r] = s
        out_v[r] = sc
        r += 1
    return out_m, out_s, out_v, r

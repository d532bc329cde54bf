"""The score of the contract and the bounds of the Skype paper, each in one place.

Every caller (engine kernels, message index, baselines, the Spark evaluator through
:func:`score_py`) computes a score with :func:`score`, so that equal inputs give equal bits
everywhere: ``alpha * SSim + (1 - alpha) * TSim`` with ``SSim = 1 - sqrt(dx*dx + dy*dy) /
MaxDist`` and ``TSim`` summed over shared terms in increasing term id.

Pruning compares an upper bound with a threshold through :func:`below`, which keeps a
relative slack of ``EPS`` so that rounding can never prune a message whose exact score
reaches the threshold (ties count: a newer equal score wins); both live in
:mod:`rankcast.common.tolerance`, shared by every kind.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from rankcast.common.tolerance import EPS, below

__all__ = ["NO_MATCH", "EPS", "score", "score_at", "combine", "score_py", "tsim", "tsim_at", "ssim", "below",
           "lambda_t",
           "ssim_ub", "ssim_ub_out", "tsim_ub", "kscore_star", "alpha_star", "lambda_s",
           "suffix_stats"]

NO_MATCH = -1.0      # score of a pair that shares no term (never a result)
NOT_OURS = -2.0      # a replica's pair whose first shared term it does not index (owned_score_at)


@numba.njit(cache=True, inline="always")
def tsim_at(s_terms, s_w, s0, s1, m_terms, m_w, m0, m1):
    """:func:`tsim` of ``s_terms[s0:s1]`` and ``m_terms[m0:m1]``, read in place (no array
    view: a view costs numba a reference count update on the pool each time it is made and
    dropped)."""
    i = s0
    j = m0
    acc = 0.0
    shared = 0
    while i < s1 and j < m1:
        a = s_terms[i]
        b = m_terms[j]
        if a == b:
            acc += s_w[i] * m_w[j]
            shared += 1
            i += 1
            j += 1
        elif a < b:
            i += 1
        else:
            j += 1
    return acc, shared


@numba.njit(cache=True, inline="always")
def tsim(s_terms, s_w, m_terms, m_w):
    """Textual similarity (paper Eq. 1): sum of w_s * w_m over shared terms, in term order.

    Returns (tsim, shared) with ``shared`` the number of shared terms. Term arrays are
    sorted int64, weights float64."""
    return tsim_at(s_terms, s_w, 0, s_terms.shape[0], m_terms, m_w, 0, m_terms.shape[0])


@numba.njit(cache=True, inline="always")
def ssim(sx, sy, mx, my, max_dist):
    """Spatial similarity (paper Eq. 1): 1 - EDist / MaxDist."""
    dx = sx - mx
    dy = sy - my
    return 1.0 - math.sqrt(dx * dx + dy * dy) / max_dist


@numba.njit(cache=True, inline="always")
def combine(alpha, ss, ts):
    """alpha * SSim + (1 - alpha) * TSim: the one expression every score goes through."""
    return alpha * ss + (1.0 - alpha) * ts


@numba.njit(cache=True, inline="always")
def score_at(sx, sy, alpha, s_terms, s_w, s0, s1, mx, my, m_terms, m_w, m0, m1, max_dist):
    """:func:`score` of the subscription's terms ``s_terms[s0:s1]`` and the message's
    ``m_terms[m0:m1]``, read in place (:func:`tsim_at`) and inlined into its hot loop
    (``igpt._match``'s verification): the same operations in the same order, equal bits."""
    acc, shared = tsim_at(s_terms, s_w, s0, s1, m_terms, m_w, m0, m1)
    if shared == 0:
        return NO_MATCH
    return combine(alpha, ssim(sx, sy, mx, my, max_dist), acc)


@numba.njit(cache=True, inline="always")
def owned_score_at(sx, sy, alpha, s_terms, s_w, s0, s1, mx, my, m_terms, m_w, m0, m1, max_dist, indexed):
    """:func:`score_at` for a replica that indexes only the pool positions ``indexed`` marks:
    NOT_OURS when the first shared term (in term-id order) sits at a position not indexed (the
    replica that indexes it finds the pair, see ``rankcast.kinds.spatial.igpt``); otherwise the
    merge goes on from that term (nothing was summed before it): the same operations in the
    same order as :func:`score_at`, equal bits."""
    i = s0
    j = m0
    while i < s1 and j < m1 and s_terms[i] != m_terms[j]:
        if s_terms[i] < m_terms[j]:
            i += 1
        else:
            j += 1
    if i == s1 or j == m1:
        return NO_MATCH
    if not indexed[i]:
        return NOT_OURS
    return score_at(sx, sy, alpha, s_terms, s_w, i, s1, mx, my, m_terms, m_w, j, m1, max_dist)


@numba.njit(cache=True)
def score(sx, sy, alpha, s_terms, s_w, mx, my, m_terms, m_w, max_dist):
    """Score(s, m) (paper Eq. 1), or NO_MATCH when s and m share no term."""
    t, shared = tsim(s_terms, s_w, m_terms, m_w)
    if shared == 0:
        return NO_MATCH
    return combine(alpha, ssim(sx, sy, mx, my, max_dist), t)


def score_py(sx, sy, alpha, s_terms, s_w, mx, my, m_terms, m_w, max_dist) -> float:
    """:func:`score` for Python callers (arrays are converted once)."""
    return float(score(float(sx), float(sy), float(alpha), np.asarray(s_terms, np.int64),
                       np.asarray(s_w, np.float64), float(mx), float(my),
                       np.asarray(m_terms, np.int64), np.asarray(m_w, np.float64), float(max_dist)))


@numba.njit(cache=True, inline="always")
def lambda_t(kscore, alpha, ssim_upper):
    """lambda_T (paper Eq. 2): the TSim a message needs to reach kscore; +inf never met."""
    if alpha >= 1.0:
        return 0.0 if ssim_upper >= kscore else math.inf
    return kscore / (1.0 - alpha) - alpha / (1.0 - alpha) * ssim_upper


@numba.njit(cache=True, inline="always")
def ssim_ub(d_in, d_out, max_dist):
    """SSimUB (paper Definition 8): inner plus outer distance; 1 when m lies in the cell."""
    if d_out <= 0.0:
        return 1.0
    return 1.0 - (d_in + d_out) / max_dist


@numba.njit(cache=True, inline="always")
def ssim_ub_out(d_out, max_dist):
    """SSimUB_out (paper Definition 7)."""
    return 1.0 - d_out / max_dist


@numba.njit(cache=True, inline="always")
def tsim_ub(s_wtsum_next, s_maxwt_next, m_wtsum_next, m_maxwt_next):
    """TSimUB of the unseen keywords (paper Eq. 5)."""
    return min(s_wtsum_next * m_maxwt_next, m_wtsum_next * s_maxwt_next)


@numba.njit(cache=True, inline="always")
def alpha_star(alpha):
    """alpha* = alpha / (1 - alpha) (paper 5.2.1); +inf for alpha = 1."""
    if alpha >= 1.0:
        return math.inf
    return alpha / (1.0 - alpha)


@numba.njit(cache=True, inline="always")
def kscore_star(kscore, alpha):
    """kScore* = kScore / (1 - alpha) (paper 5.2.1). For alpha = 1 the text part has no
    weight, so no textual threshold exists: -inf keeps every group bound conservative."""
    if alpha >= 1.0:
        return -math.inf
    return kscore / (1.0 - alpha)


@numba.njit(cache=True, inline="always")
def lambda_s(kscore, alpha):
    """lambda_S (paper Eq. 8): the SSim a message needs with TSim = 1; -inf when alpha = 0."""
    if alpha <= 0.0:
        return -math.inf
    return kscore / alpha - (1.0 - alpha) / alpha


@numba.njit(cache=True)
def suffix_stats(w, wtsum, maxwt):
    """wtsum (paper Eq. 3) and maxwt (Eq. 4) of one weight vector, in place.

    ``wtsum[i] = sum(w[i:])``, ``maxwt[i] = max(w[i:])``; both arrays have len(w) + 1 slots,
    the last one 0 (nothing unseen)."""
    n = w.shape[0]
    wtsum[n] = 0.0
    maxwt[n] = 0.0
    for i in range(n - 1, -1, -1):
        wtsum[i] = wtsum[i + 1] + w[i]
        maxwt[i] = max(maxwt[i + 1], w[i])

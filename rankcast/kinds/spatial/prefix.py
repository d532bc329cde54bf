"""Loose prefixes (paper Definition 12) and the bound of the terms beyond them (Eq. 18 with
SSimUB = 1): the kernels the prefix policies route by and the partitions check their
replicas with.

A subscription's terms are in term-id order (increasing frequency); its loose prefix for a
threshold ``tau`` is its shortest head whose tail cannot lift a message sharing only the tail
to ``tau``: ``alpha + (1 - alpha) * wtsum(tail)`` safely below it (:mod:`rankcast.common.tolerance`).
"""
from __future__ import annotations

import numba
import numpy as np

from rankcast.common.tolerance import EPS

__all__ = ["take_prefix", "prefix_lengths", "needed_prefix", "prefix_bound", "unsafe_replicas"]


@numba.njit(cache=True)
def take_prefix(offsets, term_ids, plen):
    """The first ``plen[i]`` terms of every row, as CSR.

    offsets int64[n + 1], term_ids int64[nnz], plen int64[n]. Returns (offsets int64[n + 1],
    term ids int64[...])."""
    n = offsets.shape[0] - 1
    out_off = np.zeros(n + 1, np.int64)
    for r in range(n):
        out_off[r + 1] = out_off[r] + min(plen[r], offsets[r + 1] - offsets[r])
    out = np.empty(out_off[n], np.int64)
    for r in range(n):
        a = offsets[r]
        for i in range(out_off[r + 1] - out_off[r]):
            out[out_off[r] + i] = term_ids[a + i]
    return out_off, out


@numba.njit(cache=True)
def prefix_lengths(offsets, weights, alpha, tau):
    """Length of the loose prefix (paper Definition 12) of every row for threshold ``tau``.

    The smallest ``p >= 1`` with ``alpha + (1 - alpha) * wtsum(w[p:]) `` safely below
    ``tau[i]`` (Eq. 18 with SSimUB = 1), or the row length. ``tau = +inf`` means "no threshold
    known yet" and gives 1; ``-inf``/NaN give the whole row. wtsum is accumulated from the
    end of the row, in the same order as :class:`~rankcast.kinds.spatial.subtable.SubTable`, so
    a partition reaches the same bits. offsets int64[n+1], weights float64[nnz],
    alpha float64[n], tau float64[n] -> int64[n]."""
    n = offsets.shape[0] - 1
    out = np.empty(n, np.int64)
    for r in range(n):
        a = offsets[r]
        b = offsets[r + 1]
        ln = b - a
        t = tau[r]
        if ln <= 1 or t == np.inf:
            out[r] = min(ln, 1) if ln > 0 else 0
            continue
        if not (t > -np.inf):
            out[r] = ln
            continue
        # suffix sums from the end: acc after adding w[j] = wtsum(w[j:])
        p = ln
        acc = 0.0
        for j in range(b - 1, a, -1):      # candidate prefix length p = j - a
            acc += weights[j]
            ub = alpha[r] * 1.0 + (1.0 - alpha[r]) * acc
            if ub < t - EPS * (1.0 + abs(t)):
                p = j - a
            else:
                break
        out[r] = p
    return out


@numba.njit(cache=True)
def needed_prefix(slots, toff, tlen, wtsum, alpha, kscore, plen):
    """The prefix length each replica needs for its current kScore (lazy reallocation test).

    For subscription-table ``slots`` (toff/tlen/wtsum/alpha of
    :class:`~rankcast.kinds.spatial.subtable.SubTable`), ``kscore[i]`` the score of the k-th row
    of the replica's buffer (-inf when it holds fewer than k) and ``plen[i]`` the prefix the
    replica is checked against: returns ``plen[i]`` when the terms beyond it cannot reach
    kScore (their bound ``alpha + (1 - alpha) * wtsum`` is safely below it, Eq. 18), else the
    smallest longer prefix that is safe, or the whole row. int64[n]."""
    n = slots.shape[0]
    out = np.empty(n, np.int64)
    for i in range(n):
        s = slots[i]
        ln = tlen[s]
        p = plen[i]
        t = kscore[i]
        a = alpha[s]
        while p < ln:
            ub = a * 1.0 + (1.0 - a) * wtsum[toff[s] + p]
            if t > -np.inf and ub < t - EPS * (1.0 + abs(t)):
                break
            p += 1
        out[i] = p
    return out


@numba.njit(cache=True)
def prefix_bound(slots, toff, tlen, wtsum, alpha, plen):
    """Eq. 18 with SSimUB = 1: the best score of a message sharing only terms beyond the
    prefix of each slot (-inf when the prefix is the whole term list).

    slots int64[n]: rows of a :class:`~rankcast.kinds.spatial.subtable.SubTable` (its toff,
    tlen, wtsum, alpha); plen int64[table rows]: each row's routed prefix. Returns
    float64[n]."""
    out = np.empty(slots.shape[0])
    for i in range(slots.shape[0]):
        s = slots[i]
        if plen[s] >= tlen[s]:
            out[i] = -np.inf
        else:
            out[i] = alpha[s] * 1.0 + (1.0 - alpha[s]) * wtsum[toff[s] + plen[s]]
    return out


@numba.njit(cache=True)
def unsafe_replicas(kscore, ub):
    """Positions whose kScore (-inf with fewer than k rows) is not safely above the bound
    ``ub`` of the terms beyond the routed prefix.

    kscore, ub: float64[n]. Returns int64[m], ascending."""
    out = np.empty(kscore.shape[0], np.int64)
    m = 0
    for i in range(kscore.shape[0]):
        ks = kscore[i]
        if not (ub[i] < ks - EPS * (1.0 + abs(ks))):
            out[m] = i
            m += 1
    return out[:m]

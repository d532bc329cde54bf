"""The kernels that fit a policy's placement on a sample of subscriptions and messages: the
scores of the sample's pairs (kScore estimates, candidate pairs per term), the terms' costs
(postings walked, cost-bounded sweeps of term ranges) and the greedy placement of terms
into groups (:mod:`rankcast.kinds.spatial.roles.policies` fits with them).

Batches are CSR: ``offsets`` int64[n + 1], ``terms`` int64[nnz] ascending within a row,
weights float64[nnz]; inverted lists by term likewise (``post_off`` int64[v + 1], rows).
"""
from __future__ import annotations

import math

import numba
import numpy as np

from .scoring import NO_MATCH, score

__all__ = ["kth_scores", "first_term_pairs", "row_min_max_in", "by_term_prev", "sweep", "shared_postings",
           "place_light", "first_sight"]


@numba.njit(cache=True)
def _row_pairs(r, s_x, s_y, s_alpha, s_off, s_terms, s_w, m_x, m_y, m_off, m_terms, m_w, post_off, post_msg,
               max_dist, seen, sc_out, term_out):
    """The sampled messages that share a term with subscription ``r``, each once: their
    scores into ``sc_out`` and their first shared term (in term-id order) into ``term_out``;
    returns how many. ``seen``: int64[messages], no entry equal to ``r`` yet."""
    cnt = 0
    for i in range(s_off[r], s_off[r + 1]):     # ascending ids: m is first met at its first shared term
        t = s_terms[i]
        if t + 1 >= post_off.shape[0]:
            continue
        for j in range(post_off[t], post_off[t + 1]):
            m = post_msg[j]
            if seen[m] == r:
                continue
            seen[m] = r
            sc_out[cnt] = score(s_x[r], s_y[r], s_alpha[r], s_terms[s_off[r]:s_off[r + 1]],
                                s_w[s_off[r]:s_off[r + 1]], m_x[m], m_y[m],
                                m_terms[m_off[m]:m_off[m + 1]], m_w[m_off[m]:m_off[m + 1]], max_dist)
            term_out[cnt] = t
            cnt += 1
    return cnt


@numba.njit(cache=True)
def kth_scores(s_x, s_y, s_alpha, s_off, s_terms, s_w, rank,
               m_x, m_y, m_off, m_terms, m_w, post_off, post_msg, max_dist):
    """The ``rank[i]``-th best score of subscription ``i`` over a message sample (-inf when
    fewer messages share a term).

    Subscriptions: s_x, s_y, s_alpha float64[n], CSR s_off/s_terms/s_w; rank int64[n].
    Messages: m_x, m_y float64[nm], CSR m_off/m_terms/m_w; post_off/post_msg: their inverted
    lists by term. Returns float64[n]."""
    n = s_off.shape[0] - 1
    nm = m_off.shape[0] - 1
    out = np.full(n, -np.inf)
    seen = np.full(nm, -1, np.int64)
    buf = np.empty(nm, np.float64)
    first = np.empty(nm, np.int64)
    for r in range(n):
        cnt = _row_pairs(r, s_x, s_y, s_alpha, s_off, s_terms, s_w, m_x, m_y, m_off, m_terms, m_w,
                         post_off, post_msg, max_dist, seen, buf, first)
        k = rank[r]
        if cnt >= k:
            srt = np.sort(buf[:cnt])
            out[r] = srt[cnt - k]
    return out


@numba.njit(cache=True)
def first_term_pairs(s_x, s_y, s_alpha, s_off, s_terms, s_w, tau,
                     m_x, m_y, m_off, m_terms, m_w, post_off, post_msg, max_dist, n_terms):
    """For each term: the sampled (subscription, message) pairs whose first shared term (in
    term-id order) it is and whose score reaches the subscription's ``tau`` (float64[n]).

    Arrays as :func:`kth_scores`'. Returns float64[n_terms]."""
    n = s_off.shape[0] - 1
    nm = m_off.shape[0] - 1
    out = np.zeros(n_terms)
    seen = np.full(nm, -1, np.int64)
    buf = np.empty(nm, np.float64)
    first = np.empty(nm, np.int64)
    for r in range(n):
        cnt = _row_pairs(r, s_x, s_y, s_alpha, s_off, s_terms, s_w, m_x, m_y, m_off, m_terms, m_w,
                         post_off, post_msg, max_dist, seen, buf, first)
        for c in range(cnt):
            if buf[c] != NO_MATCH and buf[c] >= tau[r]:
                out[first[c]] += 1.0
    return out


@numba.njit(cache=True)
def row_min_max_in(offsets, terms, lo, hi):
    """Smallest and largest term of every row inside [lo, hi) (-1 when none).

    offsets int64[n + 1], terms int64[nnz]. Returns (min int64[n], max int64[n])."""
    n = offsets.shape[0] - 1
    mn = np.full(n, -1, np.int64)
    mx = np.full(n, -1, np.int64)
    for r in range(n):
        for i in range(offsets[r], offsets[r + 1]):
            t = terms[i]
            if lo <= t < hi:
                if mn[r] < 0 or t < mn[r]:
                    mn[r] = t
                if t > mx[r]:
                    mx[r] = t
    return mn, mx


@numba.njit(cache=True)
def by_term_prev(offsets, terms, v):
    """Every term occurrence of a CSR batch grouped by term: (offsets int64[v + 1], the
    previous term of the occurrence's row, -1 for a row's first term). A range [lo, hi)
    meets a row once, at its occurrence inside the range whose previous term is below lo."""
    n = offsets.shape[0] - 1
    cnt = np.zeros(v + 1, np.int64)
    for i in range(offsets[n] - offsets[0]):
        t = terms[offsets[0] + i]
        if t < v:
            cnt[t + 1] += 1
    for t in range(v):
        cnt[t + 1] += cnt[t]
    fill = cnt[:v].copy()
    prev = np.empty(cnt[v], np.int64)
    for r in range(n):
        last = -1
        for i in range(offsets[r], offsets[r + 1]):
            t = terms[i]
            if t < v:
                prev[fill[t]] = last
                fill[t] += 1
            last = t
    return cnt, prev


@numba.njit(cache=True)
def sweep(limit, n_max, additive, s_off, s_prev, m_off, m_prev, per_sub, per_msg, lo_out, copies_out):
    """Term ranges in order, each as long as its cost stays within ``limit`` (a single term
    above it gets the copies that bring its subscriptions' share within it; its messages
    reach every copy). The cost of [lo, hi): ``additive`` summed over its terms, plus
    ``per_sub`` per row of s_off/s_prev meeting it and ``per_msg`` per row of m_off/m_prev
    (see :func:`~rankcast.kinds.spatial.placement.by_term_prev`). Writes the ranges' first terms and copies; returns the
    partitions used (stops once past ``n_max``) and the ranges."""
    v = additive.shape[0]
    used = 0
    n_r = 0
    lo = 0
    while lo < v:
        sub_side = 0.0
        msgs = 0.0
        hi = lo
        while hi < v:
            dn = 0
            for j in range(s_off[hi], s_off[hi + 1]):
                if s_prev[j] < lo:
                    dn += 1
            dm = 0
            for j in range(m_off[hi], m_off[hi + 1]):
                if m_prev[j] < lo:
                    dm += 1
            ns = sub_side + additive[hi] + per_sub * dn
            nmsg = msgs + per_msg * dm
            if ns + nmsg > limit and hi > lo:
                break
            sub_side = ns
            msgs = nmsg
            hi += 1
            if ns + nmsg > limit:
                break
        c = 1
        if sub_side + msgs > limit:
            c = n_max + 1 if msgs >= limit else int(math.ceil(sub_side / (limit - msgs)))
        if n_r < lo_out.shape[0]:
            lo_out[n_r] = lo
            copies_out[n_r] = c
        n_r += 1
        used += c
        if used > n_max:
            return used, n_r
        lo = hi
    return used, n_r


@numba.njit(cache=True)
def shared_postings(v, t_moff, t_msgs, m_off, m_terms, t_soff, t_subs, s_off, s_terms):
    """For every term ``t``: the postings that ``t``'s messages walk among ``t``'s
    subscriptions, ``sum over s with t, m with t of |terms(s) & terms(m)|`` (every shared term
    is a posting entry walked, not only ``t``'s). float64[v]."""
    out = np.zeros(v)
    seen = np.zeros(v, np.int64)
    for t in range(v):
        if t_moff[t] == t_moff[t + 1] or t_soff[t] == t_soff[t + 1]:
            continue
        for a in range(t_moff[t], t_moff[t + 1]):
            m = t_msgs[a]
            for b in range(m_off[m], m_off[m + 1]):
                seen[m_terms[b]] += 1
        acc = 0.0
        for a in range(t_soff[t], t_soff[t + 1]):
            s = t_subs[a]
            for b in range(s_off[s], s_off[s + 1]):
                acc += seen[s_terms[b]]
        out[t] = acc
        for a in range(t_moff[t], t_moff[t + 1]):
            m = t_msgs[a]
            for b in range(m_off[m], m_off[m + 1]):
                seen[m_terms[b]] = 0
    return out


@numba.njit(cache=True)
def place_light(order, t_soff, t_subs, sp_off, sp_terms, t_moff, t_msgs, m_cnt, walk, group, load,
                copies, covered, cap, msg_cost, per_rep):
    """Greedy co-location of the sample's light terms (``order``): each goes to the group
    holding other prefix terms of most of the sample subscriptions whose prefix has it (one
    replica less for each), among the groups it fits in (``load`` per copy plus its cost
    at most ``cap``), else to the group where it costs least on top of its load. A term's
    cost in group ``g``: ``msg_cost`` per sample message of it that ``g`` does not already
    receive (``covered``), plus ``walk / copies[g]`` (the postings its messages walk,
    :func:`~rankcast.kinds.spatial.placement.shared_postings`, or its cost under a model, replicas included), less
    ``per_rep`` for each of those subscriptions already held by ``g`` (the replica it does
    not add); a group of several copies takes it only when its messages already reach them."""
    G = load.shape[0]
    gain = np.zeros(G, np.int64)
    last = np.full(G, -1, np.int64)
    extra = np.zeros(G)
    for t in order:
        gain[:] = 0
        last[:] = -1
        for a in range(t_soff[t], t_soff[t + 1]):
            s = t_subs[a]
            for b in range(sp_off[s], sp_off[s + 1]):
                u = sp_terms[b]
                if u != t and group[u] >= 0 and last[group[u]] != s:
                    gain[group[u]] += 1
                    last[group[u]] = s
        for g in range(G):
            new = 0
            for a in range(t_moff[t], t_moff[t + 1]):
                if not covered[g, t_msgs[a]]:
                    new += 1
            extra[g] = msg_cost * new + (walk[t] - per_rep * gain[g]) / copies[g]
            if copies[g] > 1 and new > 0.1 * m_cnt[t]:
                extra[g] = np.inf      # its messages would reach every copy: only if they do already
        best = -1
        for g in range(G):
            if gain[g] > 0 and load[g] + extra[g] <= cap:
                if best < 0 or gain[g] > gain[best] or (gain[g] == gain[best]
                                                         and load[g] + extra[g] < load[best] + extra[best]):
                    best = g
        if best < 0:
            for g in range(G):
                if best < 0 or load[g] + extra[g] < load[best] + extra[best]:
                    best = g
        group[t] = best
        load[best] += extra[best]
        for a in range(t_moff[t], t_moff[t + 1]):
            covered[best, t_msgs[a]] = True


@numba.njit(cache=True)
def first_sight(offsets, terms, group, load, cap, unit):
    """Groups for the terms no group holds yet, row by row (new subscriptions): a row's new
    terms join the group holding most of its other terms (least loaded first among equals)
    while that group is within ``cap``, else the least loaded group; each adds ``unit`` to
    its load. ``group`` is updated in place; returns the new terms (their groups are then in
    ``group``)."""
    G = load.shape[0]
    cnt = np.zeros(G, np.int64)
    out = np.empty(terms.shape[0], np.int64)
    n_new = 0
    for r in range(offsets.shape[0] - 1):
        a, b = offsets[r], offsets[r + 1]
        fresh = False
        for i in range(a, b):
            if group[terms[i]] < 0:
                fresh = True
        if not fresh:
            continue
        for i in range(a, b):
            g = group[terms[i]]
            if g >= 0:
                cnt[g] += 1
        best = -1
        for g in range(G):
            if cnt[g] > 0 and load[g] < cap and (best < 0 or cnt[g] > cnt[best]
                                                 or (cnt[g] == cnt[best] and load[g] < load[best])):
                best = g
        if best < 0:
            for g in range(G):
                if best < 0 or load[g] < load[best]:
                    best = g
        for i in range(a, b):
            g = group[terms[i]]
            if g >= 0:
                cnt[g] = 0
            else:
                group[terms[i]] = best
                load[best] += unit
                out[n_new] = terms[i]
                n_new += 1
    return out[:n_new]

"""Distribution mechanisms of DSkype (paper 7.3) and the two hybrids of 8.2.

A policy decides which subscription partitions hold a subscription and which receive a
message. It is fitted once from a sample of subscriptions and messages, then routes whole
columnar batches: ``route_subscriptions`` and ``route_messages`` return a :class:`Routing`
(CSR: the partitions of row ``i`` are ``parts[offsets[i]:offsets[i+1]]``, sorted, unique).

Exactness rests on one property per policy:

* hash (7.3.1), location (7.3.2): a subscription lives in exactly one partition and every
  message goes to every partition.
* keyword (7.3.3): term ``t`` belongs to exactly one partition (``term_parts``); a
  subscription lives in the partitions of all its terms and a message goes to the
  partitions of all its terms, so a message sharing a term with ``s`` meets a replica of ``s``.
* prefix (7.3.4): as keyword, but a subscription lives only in the partitions of its loose
  prefix ``pref(s) = s.psi[:p]`` (Definition 12, terms in term-id order = increasing
  frequency). A message sharing only terms beyond the prefix has
  ``Score <= alpha + (1 - alpha) * wtsum(s.psi[p:])`` (Eq. 18 with SSimUB = 1), so it cannot
  reach the top-k while that bound is below kScore. Each replica checks this against its own
  kScore (never above the global one) whenever its top-k changes (:func:`needed_prefix`);
  when it fails, the prefix grows (lazy reallocation, never shrinks) and that replica is
  re-evaluated, since messages it did not see may now matter (see
  ``rankcast.runtime.coordinator``).
* spatial-first / keyword-first (8.2): location x prefix, partition ``c * l2 + g`` / ``g * l2 + c``.

Terms that the fitting sample never saw (ids at or beyond ``v_fit``) are spread by
``id mod partitions``: any fixed term -> partition map keeps the keyword argument valid.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from rankcast.common.routing import Routing, csr_by, dedupe_rows, join_rows
from rankcast.kinds.spatial.columns import MessageBatch, SubscriptionBatch
from rankcast.errors import InvalidInput
from ..scoring import EPS, NO_MATCH, score

__all__ = ["Routing", "Policy", "HashPolicy", "LocationPolicy", "KeywordPolicy", "PrefixPolicy",
           "SpatialFirstPolicy", "KeywordFirstPolicy", "KDTree", "KeywordMap", "PlacedCost", "TermGroups",
           "make_policy", "prefix_lengths", "needed_prefix", "estimate_kscores", "candidate_pairs"]


@numba.njit(cache=True)
def _take_prefix(offsets, term_ids, plen):
    """The first ``plen[i]`` terms of every row, as CSR (offsets, term ids)."""
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


# ----------------------------------------------------------------------------- loose prefix

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
def _kth_scores(s_x, s_y, s_alpha, s_off, s_terms, s_w, rank,
                m_x, m_y, m_off, m_terms, m_w, post_off, post_msg, max_dist):
    """The ``rank[i]``-th best score of subscription ``i`` over a message sample (-inf when
    fewer messages share a term). post_off/post_msg: inverted lists of the sample by term."""
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
def _first_term_pairs(s_x, s_y, s_alpha, s_off, s_terms, s_w, tau,
                      m_x, m_y, m_off, m_terms, m_w, post_off, post_msg, max_dist, n_terms):
    """For each term: the sampled (subscription, message) pairs whose first shared term (in
    term-id order) it is and whose score reaches the subscription's ``tau``, float64[n_terms].
    post_off/post_msg: inverted lists of the message sample by term."""
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


def _postings(msgs: MessageBatch, v: int) -> tuple[np.ndarray, np.ndarray]:
    """Inverted lists of a message batch by term: (offsets int64[v + 1], message rows)."""
    rows = np.repeat(np.arange(len(msgs), dtype=np.int64), np.diff(msgs.offsets))
    return csr_by(msgs.term_ids, rows, v)


def candidate_pairs(subs: SubscriptionBatch, msgs: MessageBatch, max_dist: float, window: int,
                    depth: float, n_terms: int) -> np.ndarray:
    """Per term, the candidates a replica indexing only its placed terms verifies and buffers,
    estimated on the samples: the pairs whose first shared term it is (where the index's
    bound covers the whole score) scoring at least the ``depth * k``-th best score of the
    subscription over the sample scaled to the window (a replica's buffer is about that
    deep). float64[n_terms], in sample pairs."""
    out = np.zeros(n_terms)
    if len(subs) == 0 or len(msgs) == 0:
        return out
    rank = np.maximum(1, np.ceil(depth * subs.k * len(msgs) / max(window, 1))).astype(np.int64)
    v = max(n_terms, int(max(subs.term_ids.max(initial=-1), msgs.term_ids.max(initial=-1))) + 1)
    post_off, post_msg = _postings(msgs, v)
    tau = _kth_scores(subs.x, subs.y, subs.alpha, subs.offsets, subs.term_ids, subs.weights, rank,
                      msgs.x, msgs.y, msgs.offsets, msgs.term_ids, msgs.weights,
                      post_off, post_msg, float(max_dist))
    pairs = _first_term_pairs(subs.x, subs.y, subs.alpha, subs.offsets, subs.term_ids, subs.weights, tau,
                              msgs.x, msgs.y, msgs.offsets, msgs.term_ids, msgs.weights,
                              post_off, post_msg, float(max_dist), v)
    return pairs[:n_terms]


def estimate_kscores(subs: SubscriptionBatch, msgs: MessageBatch, max_dist: float,
                     window: int) -> np.ndarray:
    """kScore of each sampled subscription estimated over a message sample: the
    ``ceil(k * |sample| / window)``-th best score (-inf when too few messages match).
    Only steers the balance of the prefix partition; routing stays exact regardless."""
    if len(subs) == 0:
        return np.zeros(0)
    if len(msgs) == 0:
        return np.full(len(subs), -np.inf)
    rank = np.maximum(1, np.ceil(subs.k * len(msgs) / max(window, 1))).astype(np.int64)
    v = int(max(subs.term_ids.max(initial=-1), msgs.term_ids.max(initial=-1))) + 1
    post_off, post_msg = _postings(msgs, v)
    return _kth_scores(subs.x, subs.y, subs.alpha, subs.offsets, subs.term_ids, subs.weights, rank,
                       msgs.x, msgs.y, msgs.offsets, msgs.term_ids, msgs.weights,
                       post_off, post_msg, float(max_dist))


# ----------------------------------------------------------------------------- KD partition

@numba.njit(cache=True)
def _kd_route(x, y, dim, val, left, right, part):
    """Leaf partition of every point of a KD partition (Algorithm 3's leaves)."""
    n = x.shape[0]
    out = np.empty(n, np.int64)
    for i in range(n):
        node = 0
        while part[node] < 0:
            c = x[i] if dim[node] == 0 else y[i]
            node = left[node] if c <= val[node] else right[node]
        out[i] = part[node]
    return out


@dataclass
class KDTree:
    """Cost-based KD partition of the plane (paper Algorithm 3), as flat node arrays."""

    dim: np.ndarray     # int64[nodes]: 0 split by x, 1 by y
    val: np.ndarray     # float64[nodes]: points with coordinate <= val go left
    left: np.ndarray    # int64[nodes]
    right: np.ndarray   # int64[nodes]
    part: np.ndarray    # int64[nodes]: leaf partition, -1 for an inner node
    cell: np.ndarray    # float64[nodes, 4]: the node's rectangle (xmin, ymin, xmax, ymax)

    @property
    def n_leaves(self) -> int:
        return int((self.part >= 0).sum())

    def route(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return _kd_route(np.asarray(x, np.float64), np.asarray(y, np.float64), self.dim, self.val,
                         self.left, self.right, self.part)

    @staticmethod
    def build(bounds, n_leaves: int, sx, sy, mx, my, first_part: int = 0) -> "KDTree":
        """Algorithm 3 for ``n_leaves`` leaves (any count: a node with ``n`` leaves gives
        ``n // 2`` to the left child and the rest to the right, and the split balances the
        per-leaf cost ``C(nd) / leaves``; for powers of two this is the paper's rule)."""
        nodes: list[list] = []

        def new(dim=0, val=0.0, part=-1, cell=None):
            nodes.append([dim, val, -1, -1, part, cell])
            return len(nodes) - 1

        def rec(sxy, mxy, n, depth, cell, next_part):
            if n == 1:
                return new(part=next_part, cell=cell), next_part + 1
            axis = depth % 2
            v = _best_split(sxy[axis], mxy[axis], n // 2, n - n // 2, cell, axis)
            me = new(dim=axis, val=v, cell=cell)
            lc = list(cell)
            rc = list(cell)
            lc[2 + axis] = min(max(v, cell[axis]), cell[2 + axis])
            rc[axis] = lc[2 + axis]
            ls, rs = sxy[axis] <= v, sxy[axis] > v
            lm, rm = mxy[axis] <= v, mxy[axis] > v
            l, next_part = rec((sxy[0][ls], sxy[1][ls]), (mxy[0][lm], mxy[1][lm]), n // 2,
                               depth + 1, tuple(lc), next_part)
            r, next_part = rec((sxy[0][rs], sxy[1][rs]), (mxy[0][rm], mxy[1][rm]), n - n // 2,
                               depth + 1, tuple(rc), next_part)
            nodes[me][2] = l
            nodes[me][3] = r
            return me, next_part

        f = lambda a: np.asarray(a, np.float64)
        rec((f(sx), f(sy)), (f(mx), f(my)), int(n_leaves), 0, tuple(float(b) for b in bounds),
            first_part)
        return KDTree(np.array([n[0] for n in nodes], np.int64),
                      np.array([n[1] for n in nodes], np.float64),
                      np.array([n[2] for n in nodes], np.int64),
                      np.array([n[3] for n in nodes], np.int64),
                      np.array([n[4] for n in nodes], np.int64),
                      np.array([n[5] for n in nodes], np.float64).reshape(-1, 4))

    def split_leaf(self, part: int, new_part: int, sx, sy, mx, my) -> "KDTree":
        """Split the leaf of ``part`` in two by Algorithm 3's rule (load monitoring, 7.4):
        points of the leaf with coordinate above the split go to ``new_part``."""
        leaf = int(np.flatnonzero(self.part == part)[0])
        depth = self._depth(leaf)
        cell = tuple(self.cell[leaf])
        axis = depth % 2
        sxy = (np.asarray(sx, np.float64), np.asarray(sy, np.float64))
        mxy = (np.asarray(mx, np.float64), np.asarray(my, np.float64))
        v = _best_split(sxy[axis], mxy[axis], 1, 1, cell, axis)
        lc, rc = list(cell), list(cell)
        lc[2 + axis] = min(max(v, cell[axis]), cell[2 + axis])
        rc[axis] = lc[2 + axis]
        n = len(self.part)
        dim = np.append(self.dim, [0, 0])
        val = np.append(self.val, [0.0, 0.0])
        left = np.append(self.left, [-1, -1])
        right = np.append(self.right, [-1, -1])
        prt = np.append(self.part, [part, new_part])
        cells = np.vstack([self.cell, [lc, rc]])
        dim[leaf], val[leaf], left[leaf], right[leaf], prt[leaf] = axis, v, n, n + 1, -1
        return KDTree(dim, val, left, right, prt, cells)

    def _depth(self, node: int) -> int:
        parent = {int(c): i for i in range(len(self.part)) for c in (self.left[i], self.right[i])
                  if c >= 0}
        d = 0
        while node in parent:
            node = parent[node]
            d += 1
        return d


def _best_split(s: np.ndarray, m: np.ndarray, n1: int, n2: int, cell, axis: int) -> float:
    """Split value minimising |C(nd1)/n1 - C(nd2)/n2| with C = N x p (paper Eq. 15),
    chosen among the subscription coordinates; ties favour the more even subscription count.
    Without subscriptions in the node, the middle of the cell."""
    if len(s) == 0:
        return 0.5 * (cell[axis] + cell[2 + axis])
    ss = np.sort(s)
    cand = np.unique(ss)
    if len(cand) > 1:                   # putting every point left leaves an empty child
        cand = cand[:-1]
    n_left = np.searchsorted(ss, cand, side="right").astype(np.float64)
    n_right = len(ss) - n_left
    if len(m):
        ms = np.sort(m)
        p_left = np.searchsorted(ms, cand, side="right").astype(np.float64)
        p_right = len(ms) - p_left
    else:                               # no message sample: balance subscription counts
        p_left = p_right = np.ones(len(cand))
    diff = np.abs(n_left * p_left / n1 - n_right * p_right / n2)
    even = np.abs(n_left / n1 - n_right / n2)
    best = np.lexsort((even, diff))[0]
    return float(cand[best])


# ----------------------------------------------------------------------------- keyword ranges

@numba.njit(cache=True)
def _row_min_max_in(offsets, terms, lo, hi):
    """Smallest and largest term of every row inside [lo, hi) (-1 when none)."""
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


@numba.njit(cache=True, inline="always")
def _put_group(out, w, start, copies, owner, one):
    """The partitions of a term group, ``copies`` of them from ``start``, written at
    ``out[w:]``: the one copy ``owner % copies`` of a subscription ``owner`` where ``one``,
    every copy (a message's) otherwise. Returns the next ``w``."""
    if one:
        out[w] = start + owner % copies
        return w + 1
    for j in range(copies):
        out[w + j] = start + j
    return w + copies


@numba.njit(cache=True)
def _group_route(offsets, terms, owners, group, first, copies, n_mod, base):
    """Partitions of every row of a CSR of terms (not yet sorted or deduplicated).

    Term ``t`` of group ``g = group[t]`` gives every copy ``first[g] .. first[g] + copies[g]
    - 1`` (a message: ``owners`` empty) or the one copy ``first[g] + owner mod copies[g]``
    (a subscription, ``owners`` int64[nnz]: its id per term). A term beyond ``group`` gives
    partition ``t mod n_mod`` where ``n_mod > 0``, none otherwise; a term of group -1 gives
    none. Returns (offsets, parts), int64[n + 1] and int64[...], each partition shifted by
    ``base``."""
    n = offsets.shape[0] - 1
    one = owners.shape[0] > 0
    nv = group.shape[0]
    out_off = np.zeros(n + 1, np.int64)
    for r in range(n):
        c = 0
        for i in range(offsets[r], offsets[r + 1]):
            t = terms[i]
            if t >= nv:
                c += 1 if n_mod > 0 else 0
            elif group[t] >= 0:
                c += 1 if one else copies[group[t]]
        out_off[r + 1] = out_off[r] + c
    out = np.empty(out_off[n], np.int64)
    w = 0
    for r in range(n):
        for i in range(offsets[r], offsets[r + 1]):
            t = terms[i]
            if t >= nv:
                if n_mod > 0:
                    out[w] = base + t % n_mod
                    w += 1
                continue
            g = group[t]
            if g >= 0:
                w = _put_group(out, w, base + first[g], copies[g], owners[i] if one else 0, one)
    return out_off, out


@dataclass
class KeywordMap:
    """Term -> partitions: consecutive term-id ranges ``[bounds[i], bounds[i+1])`` (Algorithm 4)
    for ids below ``v_fit``, range ``i`` owning ``copies[i]`` partitions (more than one for a
    single keyword whose cost no one partition can carry, and, under :class:`PlacedCost`, for
    the costliest ranges when partitions are left over); ``id mod n`` beyond.

    Exactness (the keyword argument): a message goes to every partition of each of its
    terms, and a subscription to one partition of each of its routing terms (``id mod
    copies``), so a message sharing a term with ``s`` meets a replica of ``s``."""

    bounds: np.ndarray   # int64[R + 1], bounds[0] = 0, bounds[R] = v_fit
    v_fit: int
    copies: np.ndarray | None = None   # int64[R]: partitions of each range (None: one each)

    def __post_init__(self):
        if self.copies is None:
            self.copies = np.ones(len(self.bounds) - 1, np.int64)
        self.bounds = np.asarray(self.bounds, np.int64)
        self.copies = np.asarray(self.copies, np.int64)
        self.first = np.concatenate([[0], np.cumsum(self.copies)[:-1]]).astype(np.int64)
        # the range of every fitted term: the routing kernel is TermGroups' (a table per term)
        self.group = (np.searchsorted(self.bounds, np.arange(int(self.v_fit), dtype=np.int64), side="right")
                      - 1).astype(np.int64)

    @property
    def n(self) -> int:
        return int(self.copies.sum())

    def route(self, offsets, term_ids, owners=None, base: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """(offsets, parts) of every row, sorted and unique: ``owners`` (int64 per row, the
        subscriptions' ids) gives a subscription's placement, None a message's partitions."""
        offsets = np.asarray(offsets, np.int64)
        own = (np.repeat(np.asarray(owners, np.int64), np.diff(offsets)) if owners is not None
               else np.zeros(0, np.int64))
        off, parts = _group_route(offsets, np.asarray(term_ids, np.int64), own, self.group, self.first,
                                  self.copies, self.n, base)
        return dedupe_rows(off, parts)

    def parts(self, term_ids: np.ndarray, owners: np.ndarray) -> np.ndarray:
        """The partition a subscription ``owners[i]`` is placed in for ``term_ids[i]``."""
        term_ids = np.asarray(term_ids, np.int64)
        off = np.arange(len(term_ids) + 1, dtype=np.int64)
        return _group_route(off, term_ids, np.asarray(owners, np.int64), self.group, self.first,
                            self.copies, self.n, 0)[1]

    @staticmethod
    def build(n_parts: int, s_off, s_terms, m_off, m_terms, v_fit: int,
              cost: "PlacedCost | None" = None) -> "KeywordMap":
        """Algorithm 4: recursive split of [0, v_fit) at the keyword that balances the
        per-partition cost C(W) = N(W) x p(W) (Eq. 16) of both sides (:func:`_best_keyword`);
        the leaves' costs are then reported by :func:`keyword_variance` (Eq. 17). A single keyword left with
        ``n > 1`` partitions keeps all ``n``: its subscriptions are spread over them and its
        messages reach every one (a range cannot split one keyword's cost). ``cost``: the
        cost model of replicas that index only their placed terms (:class:`PlacedCost`), in
        place of N x p and of the recursion (:func:`_placed_ranges`)."""
        if cost is not None:
            return _placed_ranges(int(n_parts), s_off, s_terms, m_off, m_terms, max(int(v_fit), 1), cost)
        leaves: list[tuple[int, int]] = []      # (first term, partitions), in term order

        def rec(lo, hi, n):
            if n == 1 or hi - lo <= 1:
                leaves.append((lo, n))
                return
            w, n1 = _best_keyword(s_off, s_terms, m_off, m_terms, lo, hi, n)
            rec(lo, w + 1, n1)
            rec(w + 1, hi, n - n1)

        v_fit = max(int(v_fit), 1)
        rec(0, v_fit, int(n_parts))
        return KeywordMap(np.array([lo for lo, _ in leaves] + [v_fit], np.int64), v_fit,
                          np.array([c for _, c in leaves], np.int64))

    def costs(self, s_off, s_terms, m_off, m_terms, cost: "PlacedCost | None" = None) -> np.ndarray:
        """C = N(W_i) x p(W_i) / copies_i of every partition over a sample (Eq. 16; a range's
        copies share its subscriptions), or ``cost``'s model (:class:`PlacedCost`)."""
        out = np.zeros(self.n)
        nm = max(len(m_off) - 1, 1)
        for i in range(len(self.copies)):
            lo, hi = int(self.bounds[i]), int(self.bounds[i + 1])
            sm, _ = _row_min_max_in(s_off, s_terms, lo, hi)
            mm, _ = _row_min_max_in(m_off, m_terms, lo, hi)
            c = int(self.copies[i])
            n_s, p = float((sm >= 0).sum()), (mm >= 0).sum() / nm
            out[self.first[i]: self.first[i] + c] = (
                n_s * p / c if cost is None
                else cost.of(cost.pairs[lo:hi].sum() / c, cost.walks[lo:hi].sum() / c, n_s / c, p))
        return out


@dataclass
class PlacedCost:
    """Cost of a keyword partition whose replicas index only their placed terms, in CPU
    microseconds per stream message: ``A_PAIR`` per candidate verified and buffered (the
    sampled pairs whose first shared term lies in the range and whose score reaches a
    replica buffer's depth: :func:`candidate_pairs`), ``D_POSTING`` per posting a message
    meets (a term's subscriptions times its messages), ``B_REPLICA`` per replica held
    (buffers, expiries, deliveries) and ``C_MESSAGE`` per message received. The factors are
    a least-squares fit of the partitions' CPU time in two runs with different ranges
    (GeoNames, 100k subscriptions, 64 partitions, `rankcast bench cluster`): the model
    follows the measured 0.015-0.12 s within 0.015 s, where N x p (Eq. 16) ranks the
    partitions of the most frequent terms, whose low weights prune most pairs, as the
    costliest. ``scale``: subscriptions per sampled one."""

    pairs: np.ndarray        # float64[v_fit]: candidate pairs of each term, in the sample
    walks: np.ndarray        # float64[v_fit]: subscriptions x messages of each term, in the sample
    n_msgs: int              # messages of the sample
    scale: float = 1.0

    A_PAIR = 0.3
    D_POSTING = 0.0026
    B_REPLICA = 0.00076
    C_MESSAGE = 3.8

    def of(self, pairs, walks, n_subs, p):
        """Cost of ``pairs`` sampled candidate pairs, ``walks`` sampled postings met,
        ``n_subs`` sampled replicas and a share ``p`` of the messages."""
        per_msg = 1.0 / max(self.n_msgs, 1)
        return (self.scale * (per_msg * (self.A_PAIR * pairs + self.D_POSTING * walks) + self.B_REPLICA * n_subs)
                + self.C_MESSAGE * p)


class GroupCost(PlacedCost):
    """:class:`PlacedCost` for the prefix policy's term groups, refitted on its own partitions
    (GeoNames, 100k subscriptions, 64 partitions, in process, two runs with different groups:
    a least-squares fit of each partition's CPU time over the stream against its messages
    received, replicas held and its terms' sampled candidates and postings): a prefix replica is routed by part of its
    terms and keeps a deeper buffer (no arrival share), and a partition's messages carry
    every term of the message, so a message received and a posting met cost more than in a
    keyword partition. Unlike the keyword fit, a group also pays ``B_REPLICA`` per replica
    its terms place (:meth:`TermGroups.build`). Refitted (stop 44) for the prefix partitions'
    finer leaves (``Policy.leaf_capacity``), on four maps' warm runs: the heavy
    terms' copies no longer verify most of their pairs, so a candidate, a posting and a
    message cost less against a replica; the fit follows the measured partitions with
    correlation 0.85 where stop 35's factors (0.16, 0.0066, 0.00113, 5.8) gave 0.06 and
    priced a heavy copy at twice its time."""

    A_PAIR = 0.066
    D_POSTING = 0.0033
    B_REPLICA = 0.00127
    C_MESSAGE = 1.0


@numba.njit(cache=True)
def _by_term_prev(offsets, terms, v):
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
def _sweep(limit, n_max, additive, s_off, s_prev, m_off, m_prev, per_sub, per_msg, lo_out, copies_out):
    """Term ranges in order, each as long as its cost stays within ``limit`` (a single term
    above it gets the copies that bring its subscriptions' share within it; its messages
    reach every copy). The cost of [lo, hi): ``additive`` summed over its terms, plus
    ``per_sub`` per row of s_off/s_prev meeting it and ``per_msg`` per row of m_off/m_prev
    (see :func:`_by_term_prev`). Writes the ranges' first terms and copies; returns the
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


def _placed_ranges(n: int, s_off, s_terms, m_off, m_terms, v_fit: int, cost: "PlacedCost") -> KeywordMap:
    """The term ranges (and copies) of ``n`` partitions whose largest :class:`PlacedCost` is
    least: the least limit under which :func:`_sweep` needs at most ``n`` partitions (a
    bisection), the partitions it leaves over given, one at a time, as another copy to the
    range of the largest cost per copy (copies of any range keep routing exact)."""
    s_off, s_terms = np.asarray(s_off, np.int64), np.asarray(s_terms, np.int64)
    m_off, m_terms = np.asarray(m_off, np.int64), np.asarray(m_terms, np.int64)
    so, sp = _by_term_prev(s_off, s_terms, v_fit)
    mo, mp = _by_term_prev(m_off, m_terms, v_fit)
    nm = max(len(m_off) - 1, 1)
    per_pair = cost.scale * cost.A_PAIR / max(cost.n_msgs, 1)
    per_walk = cost.scale * cost.D_POSTING / max(cost.n_msgs, 1)
    additive = per_pair * cost.pairs[:v_fit] + per_walk * cost.walks[:v_fit]
    if len(additive) < v_fit:
        additive = np.concatenate([additive, np.zeros(v_fit - len(additive))])
    per_sub = cost.scale * cost.B_REPLICA
    per_msg = cost.C_MESSAGE / nm
    lo_out = np.zeros(v_fit, np.int64)
    cp_out = np.zeros(v_fit, np.int64)
    args = (additive, so, sp, mo, mp, per_sub, per_msg, lo_out, cp_out)
    top = float(additive.sum() + per_sub * (len(s_off) - 1) + per_msg * nm) + 1e-9
    a, b = 0.0, top
    for _ in range(60):
        mid = 0.5 * (a + b)
        if _sweep(mid, n, *args)[0] <= n:
            b = mid
        else:
            a = mid
    used, n_r = _sweep(b, n, *args)
    if used > n:       # no limit fits (too few terms): one range per partition, in halves
        return KeywordMap.build(n, s_off, s_terms, m_off, m_terms, v_fit)
    lows = lo_out[:n_r].copy()
    copies = cp_out[:n_r].copy()
    bounds = np.append(lows, v_fit).astype(np.int64)
    km = KeywordMap(bounds, v_fit, copies)
    while km.n < n:
        per_copy = km.costs(s_off, s_terms, m_off, m_terms, cost)[km.first]
        grow_at = int(np.argmax(per_copy))
        copies = km.copies.copy()
        copies[grow_at] += 1
        km = KeywordMap(bounds, v_fit, copies)
    return km


def keyword_variance(costs: np.ndarray) -> float:
    """Var of the partition costs (paper Eq. 17)."""
    return float(np.mean((costs - costs.mean()) ** 2)) if len(costs) else 0.0


def _best_keyword(s_off, s_terms, m_off, m_terms, lo, hi, n) -> tuple[int, int]:
    """Splitting keyword w of [lo, hi) and the partitions n1 of W1 = [lo, w] (W2 = (w, hi)
    gets n - n1) for ``n >= 2`` partitions (Algorithm 4, line 2). Each side gets partitions
    in proportion to its cost C = N x p (Eq. 16), and w minimises the larger per-partition
    cost max(C(W1)/n1, C(W2)/n2): with n a power of two and even costs this is the paper's
    halving, and a keyword carrying more than its share of the cost gets the partitions it
    needs (see :meth:`KeywordMap.build`)."""
    if hi - lo <= 1:
        return lo, n // 2
    width = hi - lo
    smin, smax = _row_min_max_in(s_off, s_terms, lo, hi)
    mmin, mmax = _row_min_max_in(m_off, m_terms, lo, hi)

    def left_right(mn, mx):
        has = mn >= 0
        left = np.cumsum(np.bincount(mn[has] - lo, minlength=width)).astype(np.float64)
        right = has.sum() - np.cumsum(np.bincount(mx[has] - lo, minlength=width)).astype(np.float64)
        return left[:-1], right[:-1]     # w ranges over [lo, hi - 1): both sides non-empty

    n_left, n_right = left_right(smin, smax)
    if len(m_off) > 1 and (mmin >= 0).any():
        p_left, p_right = left_right(mmin, mmax)
    else:
        p_left = p_right = np.ones(width - 1)
    if len(s_off) <= 1 or not (smin >= 0).any():   # nothing to balance: halve the range
        n_left = n_right = np.ones(width - 1)
        p_left = np.arange(1, width, dtype=np.float64)
        p_right = width - p_left
    c1, c2 = n_left * p_left, n_right * p_right
    tot = c1 + c2
    n1 = np.where(tot > 0, np.rint(n * c1 / np.where(tot > 0, tot, 1.0)), n // 2)
    n1 = np.clip(n1, 1, n - 1)
    worst = np.maximum(c1 / n1, c2 / (n - n1))
    mid = np.abs(np.arange(width - 1) - (width - 1) * (n // 2) / n)
    best = int(np.lexsort((mid, worst))[0])
    return lo + best, int(n1[best])


# ----------------------------------------------------------------------------- term groups (prefix)

MSG_COST = 8.0      # cost of one message reaching a partition, in posting entries of the sample
SLACK = 0.1         # a group may exceed the even share of the cost by this fraction
PLACE_SLACK = (-0.35, -0.2, -0.1, 0.0, 0.1)
UNSEEN_COST = 0.3   # a replica (or a new term) the fitting sample did not see, per a sampled one's cost


@numba.njit(cache=True)
def _shared_postings(v, t_moff, t_msgs, m_off, m_terms, t_soff, t_subs, s_off, s_terms):
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
def _place_light(order, t_soff, t_subs, sp_off, sp_terms, t_moff, t_msgs, m_cnt, walk, group, load,
                 copies, covered, cap, msg_cost, per_rep):
    """Greedy co-location of the sample's light terms (``order``): each goes to the group
    holding other prefix terms of most of the sample subscriptions whose prefix has it (one
    replica less for each), among the groups it fits in (``load`` per copy plus its cost
    at most ``cap``), else to the group where it costs least on top of its load. A term's
    cost in group ``g``: ``msg_cost`` per sample message of it that ``g`` does not already
    receive (``covered``), plus ``walk / copies[g]`` (the postings its messages walk,
    :func:`_shared_postings`, or its cost under a model, replicas included), less
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
def _first_sight(offsets, terms, group, load, cap, unit):
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


def _heavy_copies(fixed: np.ndarray, shared: np.ndarray, light: float, n: int,
                  min_light: int) -> tuple[np.ndarray, int]:
    """Copies of each heavy term and the partitions left to the light terms, for ``n``
    partitions: a copy of heavy term ``h`` costs ``fixed[h]`` (its messages reach every
    copy) plus ``shared[h] / copies`` (its postings, candidates and replicas, split), a light
    partition ``light / partitions`` (at least ``min_light`` of them). Each partition beyond
    one per heavy term and ``min_light`` goes, one at a time, to the costliest per partition
    (for these costs, which only fall as partitions are added, the least largest cost)."""
    fixed, shared = np.asarray(fixed, np.float64), np.asarray(shared, np.float64)
    copies = np.ones(len(fixed), np.int64)
    n_light = min_light
    for _ in range(n - len(fixed) - min_light):
        per = fixed + shared / copies
        h = int(np.argmax(per)) if len(per) else -1
        if h < 0 or light / n_light >= per[h]:
            n_light += 1
        else:
            copies[h] += 1
    return copies, n_light


class TermGroups:
    """Term -> group of partitions for the prefix policy: groups of terms that co-occur in
    subscriptions' loose prefixes, so that the prefix terms of one subscription mostly lie in
    one partition (replication counts partitions, not terms), balanced by a cost measured
    on the fitting sample. Group ``g`` owns the ``copies[g]`` partitions from ``first[g]``
    (more than one for a term whose cost no one partition can carry).

    Exactness (the keyword argument, Lemma 7): a message goes to every partition of the
    group of each of its terms, and a subscription to one partition (``id mod copies``) of
    the group of each of its routing terms, so a message sharing a prefix term with ``s``
    meets a replica of ``s``. A term gets its group once and keeps it (:meth:`assign` gives
    the new terms of subscriptions a group before they are routed; a term no subscription
    has is routed nowhere, as no prefix can hold it); only a refit (load monitoring) moves
    terms, and the coordinator then re-places the subscriptions concerned."""

    # a map pickled before replicas were counted (a snapshot's policy) counts none
    replica = 0.0
    fitted = 0
    fitted_mask = np.zeros(0, np.bool_)

    def __init__(self, group: np.ndarray, first: np.ndarray, copies: np.ndarray, load: np.ndarray,
                 cap: float, unit: float, replica: float = 0.0):
        self.group = np.asarray(group, np.int64)
        self.fitted = len(self.group)           # terms below: grouped by the fit (their replicas in load)
        self.fitted_mask = self.group >= 0
        self.replica = float(replica)           # load of a replica routed by a term the fit did not see
        self.first = np.asarray(first, np.int64)
        self.copies = np.asarray(copies, np.int64)
        self.load = np.asarray(load, np.float64)
        self.cap = float(cap)
        self.unit = float(unit)
        self._new: list[np.ndarray] = []    # terms given a group since take_new

    @property
    def n(self) -> int:
        return int(self.copies.sum())

    def _grow(self, v: int) -> None:
        if v > len(self.group):
            self.group = np.concatenate([self.group, np.full(max(v, 2 * len(self.group)) - len(self.group),
                                                             -1, np.int64)])

    def assign(self, offsets, term_ids) -> None:
        """Give every term of these rows (subscriptions) a group (:func:`_first_sight`)."""
        term_ids = np.asarray(term_ids, np.int64)
        if len(term_ids) == 0:
            return
        self._grow(int(term_ids.max()) + 1)
        new = _first_sight(np.asarray(offsets, np.int64), term_ids, self.group, self.load,
                           self.cap * (1.0 + SLACK), self.unit)
        if len(new):
            self._new.append(new)

    def take_new(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(terms, groups) given since the previous call (for the distributors' copies)."""
        if not self._new:
            return None
        terms = np.concatenate(self._new)
        self._new = []
        return terms, self.group[terms]

    def set_groups(self, terms: np.ndarray, groups: np.ndarray) -> None:
        """Install groups given by another copy of this map (a distributor's)."""
        terms = np.asarray(terms, np.int64)
        if len(terms):
            self._grow(int(terms.max()) + 1)
            self.group[terms] = groups

    def route(self, offsets, term_ids, owners=None, base: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """(offsets, parts) of every row, sorted and unique: ``owners`` (the subscriptions' ids)
        gives a subscription's placement, None a message's partitions."""
        offsets = np.asarray(offsets, np.int64)
        own = (np.repeat(np.asarray(owners, np.int64), np.diff(offsets)) if owners is not None
               else np.zeros(0, np.int64))
        term_ids = np.asarray(term_ids, np.int64)
        if owners is not None and self.replica > 0 and len(term_ids):
            self._count_replicas(term_ids)
        off, parts = _group_route(offsets, term_ids, own, self.group, self.first,
                                  self.copies, 0, base)
        return dedupe_rows(off, parts)

    def _count_replicas(self, term_ids: np.ndarray) -> None:
        """Load of the replicas that terms the fit did not see place (routing terms of
        subscriptions): ``replica`` per copy's share, so that :meth:`assign` gives new terms
        to the groups holding fewest (the fit's load counts its own terms' replicas)."""
        g = self.group[term_ids[term_ids < len(self.group)]]
        t = term_ids[term_ids < len(self.group)]
        new = g >= 0
        new[t < self.fitted] &= ~self.fitted_mask[t[t < self.fitted]]
        g = g[new]
        if len(g):
            self.load += self.replica * np.bincount(g, minlength=len(self.load)) / self.copies

    def parts(self, term_ids: np.ndarray, owners: np.ndarray) -> np.ndarray:
        """The partition a subscription ``owners[i]`` is placed in for ``term_ids[i]`` (-1
        for a term with no group)."""
        term_ids = np.asarray(term_ids, np.int64)
        g = np.full(len(term_ids), -1, np.int64)
        known = term_ids < len(self.group)
        g[known] = self.group[term_ids[known]]
        gg = np.maximum(g, 0)
        return np.where(g >= 0, self.first[gg] + np.asarray(owners, np.int64) % self.copies[gg], -1)

    @staticmethod
    def build(n_parts: int, s_off, s_terms, sp_off, sp_terms, m_off, m_terms, v: int,
              msg_cost: float = MSG_COST, model: "PlacedCost | None" = None,
              replicas: bool = True, unseen_cost: float = 1.0) -> "TermGroups":
        """Fit on a sample: subscriptions' terms (``s_off``/``s_terms``) and their loose
        prefixes (``sp_off``/``sp_terms``), messages. A term's cost is what it brings to the
        partition holding it: ``msg_cost`` per message of it plus the posting entries those
        messages walk among its subscriptions (every shared term: :func:`_shared_postings`,
        counted on the sample). A term costing more than an even share ``cap`` gets a group
        of its own, with copies (at least a quarter of the partitions stay groups of one):
        :func:`_heavy_copies` splits the partitions so that the largest cost per partition,
        a heavy copy's or a light partition's, is least. The other partitions are groups of
        one, and the remaining terms of the sample's subscriptions join them by
        :func:`_place_light`, those in most sampled prefixes first, each group up to the
        light partitions' share times one of ``PLACE_SLACK``; the split is made again with
        the light groups' load as placed (co-location and shared messages lower it), and the
        slack whose placement has the least largest load is kept. Terms only messages hold
        get no group (:meth:`assign` gives one when a subscription holds one).
        ``model``: the cost of replicas that index their placed terms (:class:`PlacedCost`,
        :class:`GroupCost` for the prefix policy), in CPU microseconds per stream message: a
        term's own candidates and postings (in place of every shared term's postings) and
        ``C_MESSAGE`` x its share of the messages (in place of ``msg_cost`` per message);
        with ``replicas``, also ``B_REPLICA`` per replica its sampled prefixes place (less
        where co-located), the replicas of terms the sample does not hold spread over the
        light partitions (estimated leave-one-out: the sampled prefix terms no other sampled
        row holds), and the map then counts each replica routed by a term the fit did not
        see as it comes (:meth:`route`), so that :meth:`assign` gives new terms to the
        groups holding fewest. Such a replica, and a new term, cost ``unseen_cost`` times a
        sampled one (:data:`UNSEEN_COST`: their terms are rare, so few candidates reach their
        buffers; at the full price the light groups that took most of them measured the
        least busy, and the heavy terms got too few copies). A term under ``cap`` that costs
        more than a light partition's share as placed (co-location makes the share less than
        the even one) gets a group of its own with copies too, the costliest first, while the
        largest load falls: in one light partition it alone would be the largest."""
        v = max(int(v), int(s_terms.max(initial=-1)) + 1, int(m_terms.max(initial=-1)) + 1, 1)
        ns, nm = len(s_off) - 1, len(m_off) - 1
        m_rows = np.repeat(np.arange(nm, dtype=np.int64), np.diff(m_off))
        t_moff, t_msgs = csr_by(np.asarray(m_terms, np.int64), m_rows, v)
        m_cnt = np.diff(t_moff).astype(np.float64)
        s_rows = np.repeat(np.arange(ns, dtype=np.int64), np.diff(s_off))
        ta_off, ta_subs = csr_by(np.asarray(s_terms, np.int64), s_rows, v)
        sp_rows = np.repeat(np.arange(ns, dtype=np.int64), np.diff(sp_off))
        t_soff, t_subs = csr_by(np.asarray(sp_terms, np.int64), sp_rows, v)
        n_pref = np.diff(t_soff)
        per_rep = 0.0       # the cost of a replica, where counted (a co-located term saves it)
        if model is None:
            walk = _shared_postings(v, t_moff, t_msgs, np.asarray(m_off, np.int64), np.asarray(m_terms, np.int64),
                                    ta_off, ta_subs, np.asarray(s_off, np.int64), np.asarray(s_terms, np.int64))
        else:       # replicas index their placed terms: a term's own postings and candidates
            per_msg = model.scale / max(model.n_msgs, 1)
            walk = np.zeros(v)
            n = min(v, len(model.pairs))
            walk[:n] = per_msg * (model.A_PAIR * model.pairs[:n] + model.D_POSTING * model.walks[:n])
            msg_cost = model.C_MESSAGE / max(nm, 1)
            if replicas:     # the replicas its sampled prefixes place (fewer where co-located)
                per_rep = model.scale * model.B_REPLICA
                walk += per_rep * n_pref
        placed = np.flatnonzero(np.diff(ta_off) > 0)
        cost = msg_cost * m_cnt + walk
        cap = max(cost[placed].sum() / n_parts, 1e-9)
        # heavy terms: their own groups, with copies
        heavy = placed[cost[placed] > cap]
        heavy = heavy[np.argsort(-cost[heavy], kind="stable")]
        min_light = max(n_parts // 4, 1)
        heavy = heavy[: max(n_parts - min_light, 0)]
        # replicas of terms the sample does not hold: their terms join groups as first seen,
        # spread over the light groups (_first_sight); their share of the prefix terms,
        # leave-one-out, is that of the sampled prefix terms no other sampled row holds, each
        # at ``unseen_cost`` times a sampled replica's cost
        unseen = unseen_cost * per_rep * float((np.diff(ta_off)[np.asarray(sp_terms, np.int64)] == 1).sum())
        rest = placed[np.argsort(-cost[placed], kind="stable")][len(heavy):]
        sp_off, sp_terms = np.asarray(sp_off, np.int64), np.asarray(sp_terms, np.int64)

        def place(heavy, light, light_cost, slack):
            copies_h, n_light = _heavy_copies(msg_cost * m_cnt[heavy], walk[heavy], light_cost, n_parts,
                                              min_light)
            copies = np.concatenate([copies_h, np.ones(n_parts - int(copies_h.sum()), np.int64)])
            G = len(copies)
            group = np.full(v, -1, np.int64)
            load = np.zeros(G)
            covered = np.zeros((G, max(nm, 1)), np.bool_)
            for g, t in enumerate(heavy.tolist()):
                group[t] = g
                load[g] = msg_cost * m_cnt[t] + walk[t] / copies[g]
                covered[g, t_msgs[t_moff[t]:t_moff[t + 1]]] = True
            _place_light(light, t_soff, t_subs, sp_off, sp_terms, t_moff, t_msgs, m_cnt, walk, group, load,
                         copies.astype(np.float64), covered, light_cost / n_light * (1.0 + slack),
                         float(msg_cost), per_rep)
            return copies, group, load

        def split(heavy, rest):
            """The placement of least largest load over PLACE_SLACK: (largest load, copies,
            group, load, the light groups' load as placed)."""
            light = np.sort(rest)
            light = light[np.lexsort((-cost[light], -n_pref[light]))]
            best = None
            for slack in PLACE_SLACK:
                lc = cost[placed].sum() - cost[heavy].sum() + unseen
                for _ in range(2):      # again with the light groups' load as placed (shared messages, co-location)
                    copies, group, load = place(heavy, light, lc, slack) if lc > 0 else place(heavy, light, cap, slack)
                    lc = float(load[len(heavy):].sum()) + unseen
                worst = max(load[:len(heavy)].max(initial=0.0),
                            load[len(heavy):].max(initial=0.0) + unseen / max(len(load) - len(heavy), 1))
                if best is None or worst < best[0]:
                    best = (worst, copies, group, load, lc)
            return best

        best = split(heavy, rest)
        # a light term costing more than a light partition's share as placed (co-location and
        # shared messages make it lower than the fit's estimate) would alone be the largest
        # light load: a group of its own, with the copies _heavy_copies gives it, one term at
        # a time while the largest load falls
        while len(rest) and len(heavy) < n_parts - min_light:
            n_light = len(best[1]) - len(heavy)
            if cost[rest[0]] <= best[4] / max(n_light, 1):
                break
            more = split(np.append(heavy, rest[0]), rest[1:])
            if more[0] >= best[0]:
                break
            best, heavy, rest = more, np.append(heavy, rest[0]), rest[1:]
        _, copies, group, load, _ = best
        first = np.concatenate([[0], np.cumsum(copies)[:-1]]).astype(np.int64)
        if replicas and model is not None:      # replicas are counted as routed (route)
            return TermGroups(group, first, copies, load, cap, unseen_cost * msg_cost,
                              unseen_cost * model.B_REPLICA)
        unit = msg_cost + (1.0 if model is None else model.scale * model.B_REPLICA)
        return TermGroups(group, first, copies, load, cap, unit)

    def describe(self) -> dict[str, Any]:
        return {"groups": len(self.copies), "copies": self.copies.tolist(), "load": self.load.tolist(),
                "cap": self.cap, "terms": int((self.group >= 0).sum())}


# ----------------------------------------------------------------------------- policies

class Policy:
    """Base of the distribution mechanisms. ``prefix`` policies route subscriptions by a
    loose prefix whose length the caller passes (``plen``); the others ignore it."""

    name = "?"
    prefix = False       # routes by a threshold-dependent prefix (may reallocate)
    replicates = False   # a subscription may live in several partitions
    # a replica indexes only the terms that place it in its partition (``placement``)
    index_placed = False
    # the Quadtree leaf capacity of its partitions' indexes when there are several (None:
    # the engine's; the coordinator's ``_partition_cfg`` takes the smaller of the two)
    leaf_capacity: int | None = None

    def __init__(self, n_partitions: int, bounds, max_dist: float, window: int = 100_000,
                 options: dict | None = None):
        if isinstance(n_partitions, bool) or not isinstance(n_partitions, (int, np.integer)) \
                or n_partitions < 1:
            raise InvalidInput(f"policy: partitions must be an integer >= 1, got {n_partitions!r}")
        self.n_partitions = int(n_partitions)
        self.bounds = tuple(float(b) for b in bounds)
        self.max_dist = float(max_dist)
        self.window = int(window)
        self.options = dict(options or {})
        self.fitted = False

    # -- to override
    def fit(self, subs: SubscriptionBatch | None = None, msgs: MessageBatch | None = None) -> "Policy":
        self.fitted = True
        return self

    def route_subscriptions(self, subs: SubscriptionBatch, plen: np.ndarray | None = None) -> Routing:
        raise NotImplementedError

    def route_messages(self, msgs: MessageBatch) -> Routing:
        return Routing.everywhere(len(msgs), self.n_partitions)

    def placement(self, subs: SubscriptionBatch, plen: np.ndarray | None = None) -> np.ndarray:
        """For policies that ``index_placed``: the partition each term of ``subs`` places its
        subscription in (int64 per term, -1 for a term that places it nowhere)."""
        raise NotImplementedError

    def take_assignments(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Routing state given out since the previous call that the distributors' copies of
        this policy must have before they route the next step (None: nothing new)."""
        return None

    def set_assignments(self, terms, groups) -> None:
        """Install what another copy's :meth:`take_assignments` gave out."""

    @property
    def broadcasts(self) -> bool:
        """Whether every message goes to every partition (``route_messages`` is not
        overridden): routing a step is then no work, and no distributor is asked to."""
        return type(self).route_messages is Policy.route_messages

    # -- shared
    def initial_prefix(self, subs: SubscriptionBatch) -> np.ndarray:
        """Prefix length a new subscription is routed with before its threshold is known:
        one term for prefix policies (reallocation grows it), every term otherwise."""
        lens = np.diff(subs.offsets)
        return np.minimum(lens, 1) if self.prefix else lens

    def describe(self) -> dict[str, Any]:
        return {"policy": self.name, "partitions": self.n_partitions}


def _empty_sample_subs() -> SubscriptionBatch:
    return SubscriptionBatch.empty()


class HashPolicy(Policy):
    """Paper 7.3.1: h(s) = s.id mod N_sb (Eq. 14); every message to every partition."""

    name = "hash"

    def route_subscriptions(self, subs, plen=None):
        return Routing.from_single(np.mod(subs.ids, self.n_partitions))


class LocationPolicy(Policy):
    """Paper 7.3.2: the leaves of the cost-based KD partition (Algorithm 3) are the partitions;
    a subscription goes to the leaf holding its location, a message everywhere."""

    name = "location"

    def fit(self, subs=None, msgs=None):
        subs = subs if subs is not None else _empty_sample_subs()
        msgs = msgs if msgs is not None else MessageBatch.empty()
        self.tree = KDTree.build(self.bounds, self.n_partitions, subs.x, subs.y, msgs.x, msgs.y)
        self.fitted = True
        return self

    def route_subscriptions(self, subs, plen=None):
        return Routing.from_single(self.tree.route(subs.x, subs.y))

    def split(self, part: int, subs: SubscriptionBatch, msgs: MessageBatch) -> int:
        """Load monitoring (7.4): split the leaf of ``part``; returns the new partition index.
        ``subs``/``msgs`` sample the leaf's subscriptions and the message stream."""
        new_part = self.n_partitions
        self.tree = self.tree.split_leaf(part, new_part, subs.x, subs.y, msgs.x, msgs.y)
        self.n_partitions += 1
        return new_part

    def describe(self):
        return {**super().describe(), "leaves": self.tree.cell[self.tree.part >= 0].tolist()}


class KeywordPolicy(Policy):
    """Paper 7.3.3: consecutive term-id ranges from Algorithm 4; a subscription lives in the
    partitions of all its terms, a message goes to the partitions of its terms."""

    name = "keyword"
    replicates = True
    # A replica indexes only its placed terms: a message reaches the partition of every one of
    # its terms, so the one of its first term shared with ``s`` (in term-id order) finds ``s``
    # there, where the index's bound covers the whole score (rankcast.kinds.spatial.igpt). Each
    # term's postings then live in one partition (or one copy), not in every replica.
    index_placed = True
    cost_model = PlacedCost
    # A partition holds few replicas (GeoNames, 100k subscriptions, 64 partitions: 1,500-8,500
    # per keyword range, about 700 per copy of prefix's heaviest term): at the engine's 1,000 its
    # index is a few leaves whose boxes bound SSim loosely, and the frequent terms' pairs are
    # verified. At 100: pairs verified 5.74 M -> 3.24 M over 5,000 messages for keyword, 10.5 M
    # -> 3.8 M for prefix (README, stops 43 and 44)
    leaf_capacity = 100

    def _routing_terms(self, subs, plen):
        if plen is None:
            return subs.offsets, subs.term_ids
        return _take_prefix(subs.offsets, subs.term_ids, np.asarray(plen, np.int64))

    def _sample_terms(self, subs, msgs):
        """Routing terms of the sampled subscriptions (all terms for keyword)."""
        return subs.offsets, subs.term_ids

    def fit(self, subs=None, msgs=None):
        subs = subs if subs is not None else _empty_sample_subs()
        msgs = msgs if msgs is not None else MessageBatch.empty()
        s_off, s_terms = self._sample_terms(subs, msgs)
        v_fit = int(max(subs.term_ids.max(initial=-1), msgs.term_ids.max(initial=-1))) + 1
        v_fit = max(v_fit, int(self.options.get("v_fit", 0)))
        self.cost = self._cost(subs, msgs, v_fit, self.options.get("subscriptions_estimate"))
        self.kmap = KeywordMap.build(self.n_partitions, s_off, s_terms, msgs.offsets,
                                     msgs.term_ids, v_fit, self.cost)
        self.sample_costs = self.kmap.costs(s_off, s_terms, msgs.offsets, msgs.term_ids, self.cost)
        self.fitted = True
        return self

    # a replica's buffer, cut for no arrivals from twice the candidates, holds about this
    # many times k rows (the candidates of PlacedCost: the sampled pairs scoring above it)
    REPLICA_DEPTH = 4.0

    def _cost(self, subs, msgs, v_fit: int, total) -> PlacedCost | None:
        """The cost model of the fit: :class:`PlacedCost` where replicas index only their
        placed terms (``total``: the subscriptions expected, None: as many as sampled),
        else None (N x p, Eq. 16)."""
        if not self.index_placed:
            return None
        pairs = candidate_pairs(subs, msgs, self.max_dist, self.window, self.REPLICA_DEPTH, v_fit)
        walks = (np.bincount(subs.term_ids, minlength=v_fit)[:v_fit].astype(np.float64)
                 * np.bincount(msgs.term_ids, minlength=v_fit)[:v_fit])
        scale = float(total) / len(subs) if total and len(subs) else 1.0
        return self.cost_model(pairs, walks, len(msgs), scale)

    def route_subscriptions(self, subs, plen=None):
        off, terms = self._routing_terms(subs, plen)
        return Routing(*self.kmap.route(off, terms, subs.ids))

    def route_messages(self, msgs):
        return Routing(*self.kmap.route(msgs.offsets, msgs.term_ids))

    def placement(self, subs, plen=None):
        lens = np.diff(subs.offsets)
        out = self.kmap.parts(subs.term_ids, np.repeat(subs.ids, lens))
        if plen is not None:     # terms beyond the routed prefix place the subscription nowhere
            pos = np.arange(len(out)) - np.repeat(subs.offsets[:-1], lens)
            out[pos >= np.repeat(np.asarray(plen, np.int64), lens)] = -1
        return out

    def rebalance(self, subs: SubscriptionBatch, msgs: MessageBatch,
                  plen: np.ndarray | None = None, total: int | None = None) -> "KeywordMap":
        """Load monitoring (7.4): refit the ranges on a fresh sample (current subscriptions with
        their current prefixes, recent messages; ``total``: the subscriptions live). Returns
        the previous map."""
        old = self.kmap
        off, terms = self._routing_terms(subs, plen)
        v_fit = max(int(max(subs.term_ids.max(initial=-1), msgs.term_ids.max(initial=-1))) + 1,
                    old.v_fit)
        self.cost = self._cost(subs, msgs, v_fit, total)
        self.kmap = KeywordMap.build(self.n_partitions, off, terms, msgs.offsets, msgs.term_ids, v_fit,
                                     self.cost)
        self.sample_costs = self.kmap.costs(off, terms, msgs.offsets, msgs.term_ids, self.cost)
        return old

    def describe(self):
        return {**super().describe(), "ranges": self.kmap.bounds.tolist(), "copies": self.kmap.copies.tolist(),
                "sample_costs": self.sample_costs.tolist(),
                "variance": keyword_variance(self.sample_costs)}


class PrefixPolicy(KeywordPolicy):
    """Paper 7.3.4: a subscription lives only in the partitions of its loose prefix, a
    message goes to the partitions of its terms. The term -> partition map is
    :class:`TermGroups`, fitted on the prefixes of the sample (kScores estimated on the
    message sample): terms that share prefixes share partitions, so a subscription needs
    fewer replicas than its prefix has terms. Definition 12 is unchanged (terms in id order);
    only which partition holds which term differs from Algorithm 4's ranges."""

    name = "prefix"
    prefix = True
    cost_model = GroupCost
    # A replica indexes every term of its subscription that the map places in its partition,
    # inside the routed prefix or beyond it (``placement``): that set does not depend on the
    # prefix, so a replica kept when the prefix grows indexes its new prefix terms already.
    # Exact (Definition 12): a message that can reach the top-k shares a term of the current
    # prefix, so its first term shared with ``s`` (term-id order) lies in the prefix; the
    # message goes to every partition of that term, and the one holding ``s`` for it indexes
    # it, where the IGPT bound covers the whole score. That replica held ``s`` when the
    # message arrived, or was added later with a re-evaluation over the whole window.
    index_placed = True

    def fit(self, subs=None, msgs=None):
        subs = subs if subs is not None else _empty_sample_subs()
        msgs = msgs if msgs is not None else MessageBatch.empty()
        self.kmap = self._build(subs, msgs, None)
        self.fitted = True
        return self

    def _build(self, subs, msgs, plen) -> TermGroups:
        """The groups fitted on a sample (``plen``: its prefixes, None: estimated), under
        :class:`PlacedCost` (option ``group_cost``: ``"placed"``, the default) or the shared
        postings of the sample (``"postings"``)."""
        if plen is None:
            tau = estimate_kscores(subs, msgs, self.max_dist, self.window)
            plen = self.sample_plen = prefix_lengths(subs.offsets, subs.weights, subs.alpha, tau)
        sp_off, sp_terms = _take_prefix(subs.offsets, subs.term_ids, np.asarray(plen, np.int64))
        v = max(int(self.options.get("v_fit", 0)),
                int(max(subs.term_ids.max(initial=-1), msgs.term_ids.max(initial=-1))) + 1)
        cost = (self._cost(subs, msgs, v, self.options.get("subscriptions_estimate"))
                if self.options.get("group_cost", "placed") == "placed" else None)
        return TermGroups.build(self.n_partitions, subs.offsets, subs.term_ids, sp_off, sp_terms,
                                msgs.offsets, msgs.term_ids, v,
                                float(self.options.get("msg_cost", MSG_COST)), cost,
                                bool(self.options.get("group_replicas", True)),
                                float(self.options.get("unseen_cost", UNSEEN_COST)))

    def route_subscriptions(self, subs, plen=None):
        if plen is None:
            plen = self.initial_prefix(subs)
        self.kmap.assign(subs.offsets, subs.term_ids)      # every term, for later prefixes
        return super().route_subscriptions(subs, plen)

    def placement(self, subs, plen=None):
        """Every term's partition, whatever the prefix (see ``index_placed``): a replica
        indexes the terms placed in its partition; it exists only where a prefix term is."""
        return super().placement(subs, None)

    def take_assignments(self):
        return self.kmap.take_new()

    def set_assignments(self, terms, groups) -> None:
        self.kmap.set_groups(terms, groups)

    def rebalance(self, subs: SubscriptionBatch, msgs: MessageBatch,
                  plen: np.ndarray | None = None, total: int | None = None) -> TermGroups:
        """Load monitoring (7.4): refit the groups on a fresh sample (current subscriptions
        with their current prefixes, recent messages). Returns the previous map; the terms
        of subscriptions outside the sample get their groups when next routed."""
        old = self.kmap
        self.kmap = self._build(subs, msgs, plen if plen is not None else np.diff(subs.offsets))
        self.kmap.assign(subs.offsets, subs.term_ids)
        self.kmap.take_new()           # the coordinator sends the whole policy after a refit
        return old

    def describe(self):
        return {"policy": self.name, "partitions": self.n_partitions, **self.kmap.describe()}


class _HybridPolicy(Policy):
    """What the two paper 8.2 hybrids share: ``l1`` x ``l2`` partitions, prefix routing with
    replication, and the fit inputs (samples, estimated kScores, prefix lengths)."""

    prefix = True
    replicates = True
    leaf_capacity = 100      # as prefix's: not measured for the hybrids apart

    def __init__(self, n_partitions, bounds, max_dist, window=100_000, options=None):
        super().__init__(n_partitions, bounds, max_dist, window, options)
        self.l1, self.l2 = _levels(self.n_partitions, self.options)

    def _fit_inputs(self, subs, msgs):
        """(subs, msgs, plen): the samples (empty if None) and their prefix lengths."""
        subs = subs if subs is not None else _empty_sample_subs()
        msgs = msgs if msgs is not None else MessageBatch.empty()
        tau = estimate_kscores(subs, msgs, self.max_dist, self.window)
        return subs, msgs, prefix_lengths(subs.offsets, subs.weights, subs.alpha, tau)

    def _routed_terms(self, subs, plen):
        """The prefix terms each subscription is routed by (CSR): ``plen`` of them, or the
        initial prefix when ``plen`` is None."""
        if plen is None:
            plen = self.initial_prefix(subs)
        return _take_prefix(subs.offsets, subs.term_ids, np.asarray(plen, np.int64))

    def describe(self):
        return {**super().describe(), "l1": self.l1, "l2": self.l2}


class SpatialFirstPolicy(_HybridPolicy):
    """Paper 8.2 hybrid: ``l1`` KD cells (Algorithm 3), each split into ``l2`` prefix ranges
    (Algorithm 4 on the cell's subscriptions). Partition ``cell * l2 + group``. A message goes
    to every cell, within a cell to the groups of its terms."""

    name = "spatial-first"

    def fit(self, subs=None, msgs=None):
        subs, msgs, plen = self._fit_inputs(subs, msgs)
        self.tree = KDTree.build(self.bounds, self.l1, subs.x, subs.y, msgs.x, msgs.y)
        cell = self.tree.route(subs.x, subs.y)
        v_fit = int(max(subs.term_ids.max(initial=-1), msgs.term_ids.max(initial=-1))) + 1
        self.kmaps = []
        for c in range(self.l1):
            sc = subs.take(cell == c)
            off, terms = _take_prefix(sc.offsets, sc.term_ids, plen[cell == c])
            self.kmaps.append(KeywordMap.build(self.l2, off, terms, msgs.offsets, msgs.term_ids, v_fit))
        self.fitted = True
        return self

    def route_subscriptions(self, subs, plen=None):
        off, terms = self._routed_terms(subs, plen)
        cell = self.tree.route(subs.x, subs.y)
        parts = np.empty(len(terms), np.int64)
        row_cell = np.repeat(cell, np.diff(off))
        owners = np.repeat(subs.ids, np.diff(off))
        for c in range(self.l1):
            sel = row_cell == c
            if sel.any():
                parts[sel] = self.kmaps[c].parts(terms[sel], owners[sel]) + c * self.l2
        return Routing(*dedupe_rows(off, parts))

    def route_messages(self, msgs):
        # every cell's partitions of each row, joined row by row, then deduplicated
        per_cell = [self.kmaps[c].route(msgs.offsets, msgs.term_ids, base=c * self.l2)
                    for c in range(self.l1)]
        return Routing(*dedupe_rows(*join_rows(per_cell, len(msgs))))


class KeywordFirstPolicy(_HybridPolicy):
    """Paper 8.2 hybrid: ``l1`` prefix ranges (Algorithm 4), each split into ``l2`` KD cells
    (Algorithm 3 on the group's subscriptions). Partition ``group * l2 + cell``. A message goes
    to every cell of the groups of its terms."""

    name = "keyword-first"

    def fit(self, subs=None, msgs=None):
        subs, msgs, plen = self._fit_inputs(subs, msgs)
        off, terms = _take_prefix(subs.offsets, subs.term_ids, plen)
        v_fit = int(max(subs.term_ids.max(initial=-1), msgs.term_ids.max(initial=-1))) + 1
        self.kmap = KeywordMap.build(self.l1, off, terms, msgs.offsets, msgs.term_ids, v_fit)
        s_groups = Routing(*self.kmap.route(off, terms, subs.ids))
        m_groups = Routing(*self.kmap.route(msgs.offsets, msgs.term_ids))
        s_rows, m_rows = s_groups.rows_of(self.l1), m_groups.rows_of(self.l1)
        self.trees = [KDTree.build(self.bounds, self.l2, subs.x[s_rows[g]], subs.y[s_rows[g]],
                                   msgs.x[m_rows[g]], msgs.y[m_rows[g]]) for g in range(self.l1)]
        self.fitted = True
        return self

    def route_subscriptions(self, subs, plen=None):
        off, terms = self._routed_terms(subs, plen)
        groups = Routing(*self.kmap.route(off, terms, subs.ids))
        row = np.repeat(np.arange(len(subs)), groups.counts())
        cells = np.empty(len(groups.parts), np.int64)
        for g in range(self.l1):
            sel = groups.parts == g
            if sel.any():
                cells[sel] = self.trees[g].route(subs.x[row[sel]], subs.y[row[sel]])
        return Routing(groups.offsets, groups.parts * self.l2 + cells)

    def route_messages(self, msgs):
        groups = Routing(*self.kmap.route(msgs.offsets, msgs.term_ids))
        cnt = groups.counts() * self.l2
        off = np.zeros(len(msgs) + 1, np.int64)
        np.cumsum(cnt, out=off[1:])
        parts = (np.repeat(groups.parts, self.l2) * self.l2
                 + np.tile(np.arange(self.l2, dtype=np.int64), len(groups.parts)))
        return Routing(off, parts)

    def describe(self):
        return {**super().describe(), "ranges": self.kmap.bounds.tolist()}


def _levels(n: int, options: dict) -> tuple[int, int]:
    l1 = options.get("l1")
    l2 = options.get("l2")
    if l1 is None and l2 is None:
        l1 = 1 << (int(math.log2(n)) // 2) if n > 1 else 1
        while n % l1:
            l1 -= 1
    if l1 is None:
        l1 = n // int(l2)
    l1 = int(l1)
    l2 = n // l1 if l2 is None else int(l2)
    if l1 < 1 or l2 < 1 or l1 * l2 != n:
        raise InvalidInput(f"ClusterConfig: field 'options': hybrid levels l1={l1} x l2={l2} "
                           f"must multiply to partitions={n}")
    return l1, l2


_POLICIES = {p.name: p for p in (HashPolicy, LocationPolicy, KeywordPolicy, PrefixPolicy,
                                 SpatialFirstPolicy, KeywordFirstPolicy)}


def make_policy(name: str, n_partitions: int, bounds, max_dist: float, window: int = 100_000,
                options: dict | None = None) -> Policy:
    """The policy called ``name`` (one of ``rankcast.config.POLICIES``), unfitted."""
    try:
        cls = _POLICIES[name]
    except KeyError:
        raise InvalidInput(f"ClusterConfig: field 'policy': unknown policy {name!r}") from None
    return cls(n_partitions, bounds, max_dist, window, options)

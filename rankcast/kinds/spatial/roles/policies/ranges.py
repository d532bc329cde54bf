"""The keyword policy (paper 7.3.3): consecutive term-id ranges (Algorithm 4, or the least
largest cost under :class:`~.cost.PlacedCost`), each owning one partition or more."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rankcast.common.routing import Routing, dedupe_rows
from ...columns import MessageBatch, SubscriptionBatch
from ...placement import by_term_prev, row_min_max_in, sweep
from ...prefix import take_prefix
from ...routing import group_route
from .base import Policy, _empty_sample_subs
from .cost import PlacedCost, candidate_pairs, keyword_variance

__all__ = ["KeywordMap", "KeywordPolicy"]


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
        off, parts = group_route(offsets, np.asarray(term_ids, np.int64), own, self.group, self.first,
                                 self.copies, self.n, base)
        return dedupe_rows(off, parts)

    def parts(self, term_ids: np.ndarray, owners: np.ndarray) -> np.ndarray:
        """The partition a subscription ``owners[i]`` is placed in for ``term_ids[i]``."""
        term_ids = np.asarray(term_ids, np.int64)
        off = np.arange(len(term_ids) + 1, dtype=np.int64)
        return group_route(off, term_ids, np.asarray(owners, np.int64), self.group, self.first,
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
            sm, _ = row_min_max_in(s_off, s_terms, lo, hi)
            mm, _ = row_min_max_in(m_off, m_terms, lo, hi)
            c = int(self.copies[i])
            n_s, p = float((sm >= 0).sum()), (mm >= 0).sum() / nm
            out[self.first[i]: self.first[i] + c] = (
                n_s * p / c if cost is None
                else cost.of(cost.pairs[lo:hi].sum() / c, cost.walks[lo:hi].sum() / c, n_s / c, p))
        return out


def _placed_ranges(n: int, s_off, s_terms, m_off, m_terms, v_fit: int, cost: "PlacedCost") -> KeywordMap:
    """The term ranges (and copies) of ``n`` partitions whose largest :class:`PlacedCost` is
    least: the least limit under which :func:`sweep` needs at most ``n`` partitions (a
    bisection), the partitions it leaves over given, one at a time, as another copy to the
    range of the largest cost per copy (copies of any range keep routing exact)."""
    s_off, s_terms = np.asarray(s_off, np.int64), np.asarray(s_terms, np.int64)
    m_off, m_terms = np.asarray(m_off, np.int64), np.asarray(m_terms, np.int64)
    so, sp = by_term_prev(s_off, s_terms, v_fit)
    mo, mp = by_term_prev(m_off, m_terms, v_fit)
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
        if sweep(mid, n, *args)[0] <= n:
            b = mid
        else:
            a = mid
    used, n_r = sweep(b, n, *args)
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
    smin, smax = row_min_max_in(s_off, s_terms, lo, hi)
    mmin, mmax = row_min_max_in(m_off, m_terms, lo, hi)

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
    # -> 3.8 M for prefix
    leaf_capacity = 100

    def _routing_terms(self, subs, plen):
        if plen is None:
            return subs.offsets, subs.term_ids
        return take_prefix(subs.offsets, subs.term_ids, np.asarray(plen, np.int64))

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

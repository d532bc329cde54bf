"""The two hybrids of paper 8.2: location x prefix, ``l1`` x ``l2`` partitions
(spatial-first: KD cells split into term ranges; keyword-first: term ranges split into KD
cells)."""
from __future__ import annotations

import math

import numpy as np

from rankcast.common.routing import Routing, dedupe_rows, join_rows
from rankcast.errors import InvalidInput
from ...columns import MessageBatch
from ...prefix import prefix_lengths, take_prefix
from .base import Policy, _empty_sample_subs
from .cost import estimate_kscores
from .location import KDTree
from .ranges import KeywordMap

__all__ = ["SpatialFirstPolicy", "KeywordFirstPolicy"]


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
        return take_prefix(subs.offsets, subs.term_ids, np.asarray(plen, np.int64))

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
            off, terms = take_prefix(sc.offsets, sc.term_ids, plen[cell == c])
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
        off, terms = take_prefix(subs.offsets, subs.term_ids, plen)
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

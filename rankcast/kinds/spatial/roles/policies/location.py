"""The location policy (paper 7.3.2): the leaves of a cost-based KD partition of the plane
(Algorithm 3) are the partitions."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rankcast.common.routing import Routing
from ...columns import MessageBatch, SubscriptionBatch
from ...routing import kd_route
from .base import Policy, _empty_sample_subs

__all__ = ["KDTree", "LocationPolicy"]


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
        return kd_route(np.asarray(x, np.float64), np.asarray(y, np.float64), self.dim, self.val,
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

"""The relation graph G_k over a covering index (paper III.B-C), as one numba kernel.

Nodes are slots of the :class:`~rankcast.kinds.matching.covering.semantic.Store`; identical expressions share
a node (the caller merges them), so every edge ``c -> t`` is a strict cover and G_k has no
cycle (the paper's algorithm builds one between two equal ranges: notes, section 5).

- subscribe(s): ``C = cov_k(s)`` (the index holds only the other live nodes), edges ``c -> s``,
  ``s`` enters the index; ``s`` is forwarded iff ``C`` is empty.
- unsubscribe(s): ``s`` leaves the index and the graph; each child left with no parent, in
  the order of ``s``'s out-list, is re-queried (``cov_k``), gets its edges, and is forwarded
  when none covers it (a *re-forward*); then, if ``s`` was forwarded, its unsubscription.

Invariant: a live node is forwarded iff its in-degree is 0. A void node (matches nothing) is
covered by any other live node: its ``cov_k`` takes the first ``k`` of the live list.

Graph state: ``G``, a tuple of 11 int64 vectors (per node: in-degree, forwarded, out-list
head, out-degree, position in the live list; per edge: source, target, next, prev; the live
list; meta: live count, free edge, edges used), ``P``: ``(cap, k)`` parents and their edges.
The message log: ``(kind, node)`` rows, kinds :data:`FORWARD`, :data:`REFORWARD`,
:data:`UNFORWARD`.
"""
from __future__ import annotations

import numba
import numpy as np

from . import kdtree, naive, zorder

__all__ = ["FORWARD", "REFORWARD", "UNFORWARD", "SUBSCRIBE", "UNSUBSCRIBE", "INDEX_CODES", "Graph",
           "apply_ops"]

FORWARD, REFORWARD, UNFORWARD = 0, 1, 2
SUBSCRIBE, UNSUBSCRIBE = 0, 1
KD, ZORDER, NAIVE = 0, 1, 2
INDEX_CODES = {"kd-tree": KD, "z-order": ZORDER, "naive": NAIVE}
NPAR, FWD, OHEAD, ODEG, LPOS, ESRC, EDST, ENEXT, EPREV, LIVE, GMETA = range(11)
G_NLIVE, G_FREE, G_HW = range(3)
# counters: cov calls, nodes visited, point comparisons; for subscribes then unsubscribes
Q_S, Q_U, NV_S, NV_U, PC_S, PC_U = range(6)


@numba.njit(cache=True)
def _cov(index, I, X, pts, S, vals, plain, void, G, q, k, out, c2):
    """cov_k(q): up to k live nodes other than q covering q, into ``out``."""
    if void[q]:
        live = G[LIVE]
        f = 0
        for i in range(G[GMETA][G_NLIVE]):
            if f == k:
                break
            if live[i] != q:
                out[f] = live[i]
                f += 1
        return f
    if index == KD:
        return kdtree.query(I, X, pts, S, vals, plain, q, k, out, c2)
    if index == ZORDER:
        return zorder.query(I, X, pts, S, vals, plain, q, k, out, c2)
    return naive.query(I, X, pts, S, vals, plain, q, k, out, c2)


@numba.njit(cache=True)
def _index_op(index, I, X, pts, s, add):
    if index == KD:
        if add:
            kdtree.insert(I, X, pts, s)
        else:
            kdtree.delete(I, X, pts, s)
    elif index == ZORDER:
        if add:
            zorder.insert(I, X, pts, s)
        else:
            zorder.delete(I, X, pts, s)
    else:
        if add:
            naive.insert(I, X, pts, s)
        else:
            naive.delete(I, X, pts, s)


@numba.njit(cache=True)
def _add_edge(G, P, c, t):
    meta = G[GMETA]
    e = meta[G_FREE]
    if e >= 0:
        meta[G_FREE] = G[ENEXT][e]
    else:
        e = meta[G_HW]
        meta[G_HW] += 1
    G[ESRC][e], G[EDST][e] = c, t
    h = G[OHEAD][c]
    G[ENEXT][e], G[EPREV][e] = h, -1
    if h >= 0:
        G[EPREV][h] = e
    G[OHEAD][c] = e
    G[ODEG][c] += 1
    n = G[NPAR][t]
    P[0][t, n], P[1][t, n] = c, e
    G[NPAR][t] = n + 1


@numba.njit(cache=True)
def _unlink_out(G, e):
    c = G[ESRC][e]
    p, n = G[EPREV][e], G[ENEXT][e]
    if p >= 0:
        G[ENEXT][p] = n
    else:
        G[OHEAD][c] = n
    if n >= 0:
        G[EPREV][n] = p
    G[ODEG][c] -= 1


@numba.njit(cache=True)
def _free_edge(G, e):
    G[ENEXT][e] = G[GMETA][G_FREE]
    G[GMETA][G_FREE] = e


@numba.njit(cache=True)
def apply_ops(ops_kind, ops_node, start, index, k, I, X, pts, S, vals, plain, void, G, P,
              log_kind, log_node, n_log, cnt):
    """Apply node operations ``start..`` (``ops_kind``: SUBSCRIBE / UNSUBSCRIBE of node
    ``ops_node``) in order, appending control messages to the log from row ``n_log``.

    Stops early when the log may not hold the next operation's messages. Returns (the next
    operation to apply, the log rows used). ``cnt``: int64[6] counters (Q_S .. PC_U)."""
    out = np.empty(max(k, 1), np.int64)
    c2 = np.zeros(2, np.int64)
    meta = G[GMETA]
    live, lpos = G[LIVE], G[LPOS]
    npar, fwd = G[NPAR], G[FWD]
    pidx, pedge = P[0], P[1]
    i = start
    cap_log = log_kind.shape[0]
    while i < ops_kind.shape[0]:
        s = ops_node[i]
        if ops_kind[i] == SUBSCRIBE:
            if n_log + 1 > cap_log:
                break
            c2[0] = 0
            c2[1] = 0
            f = _cov(index, I, X, pts, S, vals, plain, void, G, s, k, out, c2)
            cnt[Q_S] += 1
            cnt[NV_S] += c2[0]
            cnt[PC_S] += c2[1]
            npar[s] = 0
            G[OHEAD][s] = -1
            G[ODEG][s] = 0
            for j in range(f):
                _add_edge(G, P, out[j], s)
            if not void[s]:
                _index_op(index, I, X, pts, s, True)
            n = meta[G_NLIVE]
            live[n] = s
            lpos[s] = n
            meta[G_NLIVE] = n + 1
            fwd[s] = 1 if f == 0 else 0
            if f == 0:
                log_kind[n_log], log_node[n_log] = FORWARD, s
                n_log += 1
        else:
            if n_log + G[ODEG][s] + 1 > cap_log:
                break
            if not void[s]:
                _index_op(index, I, X, pts, s, False)
            n = meta[G_NLIVE] - 1
            last = live[n]
            live[lpos[s]] = last
            lpos[last] = lpos[s]
            meta[G_NLIVE] = n
            for j in range(npar[s]):             # in-edges: out of their sources' lists
                e = pedge[s, j]
                _unlink_out(G, e)
                _free_edge(G, e)
            npar[s] = 0
            orphans = np.empty(G[ODEG][s], np.int64)
            no = 0
            e = G[OHEAD][s]
            while e >= 0:                         # out-edges: out of their targets' parents
                nxt = G[ENEXT][e]
                t = G[EDST][e]
                m = npar[t] - 1
                for j in range(m + 1):
                    if pedge[t, j] == e:
                        pidx[t, j], pedge[t, j] = pidx[t, m], pedge[t, m]
                        break
                npar[t] = m
                if m == 0:
                    orphans[no] = t
                    no += 1
                _free_edge(G, e)
                e = nxt
            G[OHEAD][s] = -1
            G[ODEG][s] = 0
            for j in range(no):
                t = orphans[j]
                c2[0] = 0
                c2[1] = 0
                f = _cov(index, I, X, pts, S, vals, plain, void, G, t, k, out, c2)
                cnt[Q_U] += 1
                cnt[NV_U] += c2[0]
                cnt[PC_U] += c2[1]
                for jj in range(f):
                    _add_edge(G, P, out[jj], t)
                if f == 0:
                    fwd[t] = 1
                    log_kind[n_log], log_node[n_log] = REFORWARD, t
                    n_log += 1
            if fwd[s]:
                log_kind[n_log], log_node[n_log] = UNFORWARD, s
                n_log += 1
                fwd[s] = 0
        i += 1
    return i, n_log


class Graph:
    """G_k's arrays, grown between kernel calls (node capacity: the store's; edges: ``k``
    per node)."""

    def __init__(self, k: int, cap: int = 64):
        self.k = k
        self.cap = 0
        self.G = tuple(np.zeros(0, np.int64) for _ in range(GMETA)) + (np.array([0, -1, 0], np.int64),)
        self.P = (np.zeros((0, k), np.int64), np.zeros((0, k), np.int64))
        self.ensure(cap)

    def ensure(self, cap: int) -> None:
        if cap <= self.cap:
            return
        new = max(cap, 2 * self.cap, 64)
        G = list(self.G)
        for i in range(GMETA):
            want = new * self.k if ESRC <= i <= EPREV else new
            G[i] = np.concatenate([G[i], np.full(want - len(G[i]), -1 if i == OHEAD else 0, np.int64)])
        self.G = tuple(G)
        self.P = tuple(np.concatenate([p, np.zeros((new - len(p), self.k), np.int64)]) for p in self.P)
        self.cap = new

    def live(self) -> np.ndarray:
        return self.G[LIVE][:self.G[GMETA][G_NLIVE]].copy()

    def parents(self, s: int) -> np.ndarray:
        return self.P[0][s, :self.G[NPAR][s]].copy()

    def children(self, s: int) -> list[int]:
        out, e = [], int(self.G[OHEAD][s])
        while e >= 0:
            out.append(int(self.G[EDST][e]))
            e = int(self.G[ENEXT][e])
        return out

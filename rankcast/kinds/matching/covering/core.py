"""``Covering``: subscription covering for the distribution role (Shen, Tirthapura, Aluru).

A distribution actor holds one ``Covering`` per routing table: ``subscribe(expressions)`` and
``unsubscribe(ids)`` return the control messages to send on, in the paper's order, and
``forwarded()`` is the set of expressions the next hop must know. ``snapshot()`` /
``Covering.restore(snap)`` carry it across a restart as plain numpy arrays (``state()`` /
``from_state()``: their former names, deprecated aliases kept for one release).

**What "covers" means.** ``a`` covers ``b`` iff every event matching ``b`` matches ``a``
(paper, Definition 1), under the matching of docs/contract.md, "Ranked matching" (``static`` and
``weighted``: the event has every attribute named and every predicate holds). Per attribute:

- ``a`` does not name it: no condition (weaker than any range: an event may lack it);
- ``a`` names it, ``b`` does not: ``a`` does not cover ``b`` (an event without it);
- both name it: ``b``'s allowed set is a subset of ``a``'s, over finite float64 values (open
  bounds exact: ``x < 5`` is ``x <= nextafter(5, -inf)``; ``-0.0 == 0.0``) or over all
  strings, unseen ones included: ``x != "a"`` covers ``x == "b"`` and ``x not in ["a", "b"]``;
  ``x in S`` covers ``x == v`` / ``x in T`` for ``v in S`` / ``T <= S``, never a ``!=``;
  ``x not in S`` covers ``x not in T`` iff ``S <= T``; on numbers an interval minus values
  covers what avoids those values, and ``in`` covers an interval only if it lists every
  float of it.

An expression matching nothing (``x < -DBL_MAX``) is covered by every other. Identical
expressions (mutual covers, however spelled) share one node, forwarded under the id of the
first of them; the others are its *members* and produce no messages until the last leaves.
Weights and scores play no part: covering is a filter notion, so the forwarded set routes
events, and ranking stays where every expression is registered.

**Matching against the forwarded set.** An event that matches any live expression matches a
forwarded one (every live node is covered, through its parents, by a forwarded root), so a
routing test checks the event against the expressions of ``forwarded()`` only, with the usual exact
evaluation (``rankcast.kinds.matching.core.evaluate``), and sends it on when one matches.

**Messages**, as ``(kind, expression_id)``: ``("forward", i)`` a new uncovered expression,
``("reforward", i)`` an expression left uncovered by an unsubscription (sent before it),
``("unforward", i)`` the unsubscription of a forwarded expression.
"""
from __future__ import annotations

import time

import numba
import numpy as np

from rankcast.common.snapshots import checked, tagged
from rankcast.errors import InvalidInput, UnknownSubscription
from ..predicates import AttributeTable, check_expression_ids, encode_expressions
from . import kdtree, naive, zorder
from .graph import (FORWARD, GMETA, G_NLIVE, INDEX_CODES, KD, REFORWARD, SUBSCRIBE, UNFORWARD,
                    UNSUBSCRIBE, ZORDER, Graph, _cov, _index_op, apply_ops)
from .semantic import RNG, Store, canonical_rows, dominates, ordinals, verify

__all__ = ["Covering", "MESSAGE_KINDS", "INDEXES"]

MESSAGE_KINDS = {FORWARD: "forward", REFORWARD: "reforward", UNFORWARD: "unforward"}
INDEXES = tuple(INDEX_CODES)


@numba.njit(cache=True)
def _bulk_insert(index, I, X, pts, slots):
    for s in slots:
        _index_op(index, I, X, pts, s, True)


@numba.njit(cache=True)
def _covers_all(pts, S, vals, plain, live, q):
    """Every node of ``live`` other than ``q`` covering ``q`` (a scan: the reference)."""
    out = np.empty(live.shape[0], np.int64)
    n = 0
    for s in live:
        if s != q and dominates(pts, s, q) and (plain[s] or verify(S, vals, s, q)):
            out[n] = s
            n += 1
    return out[:n]


class Covering:
    """G_k over one of the three indexes (``"kd-tree"``, ``"z-order"``, ``"naive"``).

    ``over`` / ``under``: the k-d tree's bucket limits. Counters in ``stats()``: covering
    queries, nodes visited and point comparisons, for subscribes and unsubscribes.

    A routing structure, not an engine: it shares the engines' verbs ``subscribe(expressions)``,
    ``unsubscribe(ids)`` (both return the control messages to send on), ``stats()``,
    ``snapshot()`` / ``Covering.restore(snap)`` and ``len()`` (live expressions), and has no
    ``publish`` or ``topk``: an event is routed by matching it against :meth:`forwarded`."""

    KIND = "covering"

    def __init__(self, k: int = 1, index: str = "kd-tree", *, over: int = 32, under: int = 8):
        if index not in INDEX_CODES:
            raise InvalidInput(f"covering: field 'index': unknown index {index!r}; use one of {', '.join(INDEXES)}")
        if not isinstance(k, int) or k < 1:
            raise InvalidInput(f"covering: field 'k': must be an int >= 1, got {k!r}")
        self.k, self.index_name, self.over, self.under = k, index, over, under
        self.index_code = INDEX_CODES[index]
        self.attrs = AttributeTable()
        self.store = Store(0)
        self.graph = Graph(k)
        self.rep = np.full(0, -1, np.int64)        # node -> the id it is forwarded under
        self.refs = np.zeros(0, np.int64)          # node -> expressions sharing it
        self.node_of: dict[int, int] = {}          # expression id -> node
        self.key_node: dict[tuple, int] = {}       # canonical rows -> live node
        self.node_key: dict[int, tuple] = {}
        self.free: list[int] = []
        self.hw = 0
        self.counters = np.zeros(6, np.int64)
        self.kernel_seconds = 0.0
        self._built_at = 0
        self._make_index()

    # ---- index ----------------------------------------------------------------------------
    def _make_index(self) -> None:
        dims = 2 * self.store.n_attrs
        cap = max(self.store.cap, 64)
        if self.index_code == KD:
            self.index = kdtree.KdTree(dims, self.over, self.under)
        elif self.index_code == ZORDER:
            self.index = zorder.ZOrder(max(dims, 2))
        else:
            self.index = naive.Naive(dims)
        self.index.reset(cap, 64)

    def rebuild(self, boundaries_from: np.ndarray | None = None) -> None:
        """A fresh index holding the live nodes (after new attributes; the Z-order index also
        when the live set doubled, so that its cells follow the points). The graph is kept."""
        self._make_index()
        live = self.graph.live()
        live = live[self.store.void[live] == 0]
        if self.index_code == ZORDER:
            src = self.store.pts[live] if boundaries_from is None else boundaries_from
            self.index.reset(max(self.store.cap, 64), 0, self.index.boundaries(src))
        self.index.ensure(self.store.cap, len(live))
        _bulk_insert(self.index_code, self.index.I, self.index.X, self.store.pts, live)
        self._built_at = len(live)

    # ---- nodes ----------------------------------------------------------------------------
    def _ensure(self, n_new: int) -> None:
        need = self.hw + n_new
        if need > self.store.cap:
            self.store.ensure(need)
        cap = self.store.cap
        if len(self.rep) < cap:
            self.rep = np.concatenate([self.rep, np.full(cap - len(self.rep), -1, np.int64)])
            self.refs = np.concatenate([self.refs, np.zeros(cap - len(self.refs), np.int64)])
        self.graph.ensure(cap)
        self.index.ensure(cap, n_new)

    def _slot(self) -> int:
        if self.free:
            return self.free.pop()
        self.hw += 1
        return self.hw - 1

    def _add(self, eid: int, key: tuple, ops: list, put) -> None:
        """Expression ``eid`` with canonical rows ``key``: a member of an identical live node,
        or a new node (``put(slot)`` writes its rows) and a SUBSCRIBE operation."""
        node = self.key_node.get(key)
        if node is None:
            node = self._slot()
            put(node)
            self.key_node[key], self.node_key[node] = node, key
            self.rep[node] = eid
            ops.append((SUBSCRIBE, node))
        self.refs[node] += 1
        self.node_of[eid] = node

    def _remove(self, eid: int, ops: list, freed: list) -> None:
        node = self.node_of.pop(eid)
        self.refs[node] -= 1
        if self.refs[node] == 0:
            del self.key_node[self.node_key.pop(node)]
            ops.append((UNSUBSCRIBE, node))
            freed.append(node)

    def _run(self, ops: list) -> list[tuple[str, int]]:
        if not ops:
            self.last_log = (np.zeros(0, np.int64), np.zeros(0, np.int64))
            return []
        kinds = np.array([o[0] for o in ops], np.int64)
        nodes = np.array([o[1] for o in ops], np.int64)
        log_kind = np.zeros(2 * len(ops) + 16, np.int64)
        log_node = np.zeros_like(log_kind)
        done, used = 0, 0
        S, vals, plain = self.store.sem()
        t0 = time.perf_counter()
        while True:
            done, used = apply_ops(kinds, nodes, done, self.index_code, self.k, self.index.I, self.index.X,
                                   self.store.pts, S, vals, plain, self.store.void, self.graph.G, self.graph.P,
                                   log_kind, log_node, used, self.counters)
            if done == len(ops):
                break
            log_kind = np.concatenate([log_kind, np.zeros(len(log_kind) + self.graph.cap, np.int64)])
            log_node = np.concatenate([log_node, np.zeros(len(log_node) + self.graph.cap, np.int64)])
        self.kernel_seconds += time.perf_counter() - t0
        # the raw log, by node: a node outlives the id it is forwarded under when identical
        # members remain, so a caller keying its routing entries by node reads this
        self.last_log = (log_kind[:used].copy(), log_node[:used].copy())
        return [(MESSAGE_KINDS[int(c)], int(self.rep[n])) for c, n in zip(log_kind[:used], log_node[:used])]

    def _after(self, freed: list) -> None:
        self.free.extend(freed)
        if self.store.n_vals > 1024 and self.store.n_vals > 4 * int(self.store.vlen.sum()):
            self.store.compact(np.flatnonzero(self.refs > 0))
        n = self.n_nodes()
        if self.index_code == ZORDER and n >= 64 and n >= 2 * self._built_at:
            self.rebuild()

    # ---- the API of the distribution role ----------------------------------------------------
    def subscribe(self, expressions) -> list[tuple[str, int]]:
        """Add expressions (``rc.Expression`` or mappings, in order); returns the control
        messages. Atomic: invalid input or a live id raises before anything changes."""
        batch, pend = encode_expressions(expressions, self.attrs)
        self._check_new(batch)
        self.attrs.commit(pend)
        return self._insert(batch)

    def subscribe_batch(self, batch, kinds) -> list[tuple[str, int]]:
        """Add expressions already encoded (an :class:`~rankcast.kinds.matching.predicates.ExpressionBatch`)
        under another attribute table whose types are ``kinds`` (``AttributeTable.kinds``; its
        ids and string codes are used as they are): the distribution role's path, which gets
        the coordinator's encoding. Attributes this covering has not seen get placeholder
        names ``#<id>`` (kept by :meth:`snapshot`). Ids must not be live here."""
        self._check_new(batch)
        for a in range(len(self.attrs.kinds), len(kinds)):
            self.attrs.ids[f"#{a}"] = a
            self.attrs.kinds.append(int(kinds[a]))
            self.attrs.codes.append({})
        return self._insert(batch)

    def _check_new(self, batch) -> None:
        for pos, eid in enumerate(batch.ids.tolist()):
            if eid in self.node_of:
                raise InvalidInput(f"expression #{pos} (id={eid}): field 'id': already subscribed")

    def _insert(self, batch) -> list[tuple[str, int]]:
        """The encoded, checked expressions into the store and the graph; the control messages."""
        rows = canonical_rows(batch, self.attrs.kinds)
        if self.store.grow_attrs(len(self.attrs)):
            self.rebuild()
        self._ensure(len(batch))
        ops: list = []
        for eid, r in zip(batch.ids.tolist(), rows):
            self._add(eid, r, ops, lambda slot, r=r: self.store.put(slot, r))
        msgs = self._run(ops)
        self._after([])
        return msgs

    def unsubscribe(self, ids) -> list[tuple[str, int]]:
        """Remove expressions by id; returns the control messages (re-forwards before the
        unsubscription that caused them). Unknown ids raise ``rc.UnknownSubscription``."""
        ids = check_expression_ids(ids, self.node_of)
        ops: list = []
        freed: list = []
        for eid in ids.tolist():
            self._remove(eid, ops, freed)
        msgs = self._run(ops)
        self._after(freed)
        return msgs

    def replay_rectangles(self, kinds: np.ndarray, ids: np.ndarray, lo: np.ndarray, hi: np.ndarray):
        """The paper's workload in one kernel call: command ``i`` subscribes expression
        ``ids[i]`` with the closed ranges ``lo[i, a] <= attr a <= hi[i, a]`` on attributes
        ``"0"``.. (``kinds[i] == 0``) or unsubscribes ``ids[i]`` (1). Returns the messages.
        Node operations are found first (identical rectangles merged); ``kernel_seconds``
        times the kernel alone."""
        n_attrs = lo.shape[1]
        names = [str(a) for a in range(n_attrs)]
        for a in names:
            if a not in self.attrs.ids:
                self.attrs.ids[a] = len(self.attrs.kinds)
                self.attrs.kinds.append(0)
                self.attrs.codes.append({})
        cols = np.array([self.attrs.ids[a] for a in names])
        if self.store.grow_attrs(len(self.attrs)):
            self.rebuild()
        olo, ohi = ordinals(lo), ordinals(hi)
        subs = np.flatnonzero(kinds == 0)
        full_lo = np.full((len(lo), self.store.n_attrs), 0, np.int64)
        full_hi = np.zeros_like(full_lo)
        full_lo[:, cols], full_hi[:, cols] = olo, ohi
        if self.index_code == ZORDER and self.n_nodes() == 0:    # the paper's fixed domain
            pts = np.empty((len(subs), 2 * self.store.n_attrs), np.int64)
            pts[:, 0::2], pts[:, 1::2] = -full_lo[subs], full_hi[subs]
            self.rebuild(boundaries_from=pts)
        self._ensure(len(subs))
        ops: list = []
        freed: list = []
        for i in range(len(kinds)):
            eid = int(ids[i])
            if kinds[i] == 0:
                if eid in self.node_of:
                    raise InvalidInput(f"command #{i} (id={eid}): field 'id': already subscribed")
                key = tuple(sorted((int(a), RNG, int(full_lo[i, a]), int(full_hi[i, a]), ()) for a in cols))
                self._add(eid, key, ops, lambda slot, i=i: self.store.put_rectangles(
                    np.array([slot]), full_lo[i:i + 1], full_hi[i:i + 1]))
            else:
                if eid not in self.node_of:
                    raise UnknownSubscription(f"unknown expression id={eid}")
                self._remove(eid, ops, freed)
        # a slot freed in this replay is not reused by it: the kernel runs after the pre-pass
        msgs = self._run(ops)
        self.free.extend(freed)
        return msgs

    def forwarded(self) -> np.ndarray:
        """The ids of the forwarded expressions (one per forwarded node)."""
        live = self.graph.live()
        return np.sort(self.rep[live[self.graph.G[1][live] == 1]])

    def members(self, eid: int) -> list[int]:
        """The live expression ids sharing ``eid``'s node (identical expressions)."""
        node = self.node_of[eid]
        return sorted(i for i, n in self.node_of.items() if n == node)

    def covers(self, a: int, b: int) -> bool:
        """Whether live expression ``a`` covers live expression ``b`` (exact)."""
        na, nb = self.node_of[a], self.node_of[b]
        st = self.store
        if st.void[nb]:
            return True
        if st.void[na]:
            return False
        S, vals, _ = st.sem()
        return bool(dominates(st.pts, na, nb) and verify(S, vals, na, nb))

    def cov(self, eid: int, k: int | None = None) -> np.ndarray:
        """``cov_k`` of live expression ``eid`` through the index: the ids (representatives)
        of up to ``k`` other live nodes covering it."""
        q = self.node_of[eid]
        k = self.k if k is None else k
        out = np.empty(max(k, 1), np.int64)
        S, vals, plain = self.store.sem()
        f = _cov(self.index_code, self.index.I, self.index.X, self.store.pts, S, vals, plain, self.store.void,
                 self.graph.G, q, k, out, np.zeros(2, np.int64))
        return self.rep[out[:f]]

    def covering_all(self, eid: int) -> np.ndarray:
        """Every other live node covering ``eid`` (a scan; representatives' ids)."""
        q = self.node_of[eid]
        live = self.graph.live()
        if self.store.void[q]:
            return self.rep[live[live != q]]
        live = live[self.store.void[live] == 0]
        S, vals, plain = self.store.sem()
        return self.rep[_covers_all(self.store.pts, S, vals, plain, live, q)]

    def __len__(self) -> int:
        """The number of live expressions (identical ones counted each)."""
        return len(self.node_of)

    def n_nodes(self) -> int:
        return int(self.graph.G[GMETA][G_NLIVE])

    def stats(self) -> dict:
        c = self.counters
        return {"expressions": len(self.node_of), "nodes": self.n_nodes(), "forwarded": len(self.forwarded()),
                "k": self.k, "index": self.index_name, "queries_subscribe": int(c[0]),
                "queries_unsubscribe": int(c[1]), "nodes_visited_subscribe": int(c[2]),
                "nodes_visited_unsubscribe": int(c[3]), "comparisons_subscribe": int(c[4]),
                "comparisons_unsubscribe": int(c[5]), "kernel_seconds": self.kernel_seconds}

    # ---- recovery ---------------------------------------------------------------------------
    def snapshot(self) -> dict:
        """Everything to resume from, as a picklable dict of plain numpy arrays (copies: later
        calls do not change it); :meth:`restore` rebuilds the index from it. See
        :mod:`rankcast.common.snapshots`."""
        return tagged(self.KIND, self._arrays())

    @classmethod
    def restore(cls, snap: dict) -> "Covering":
        """A new covering in the state of ``snap`` (from :meth:`snapshot`, or the untagged
        dict of the former :meth:`state`)."""
        return cls._from_arrays(checked(snap, cls.KIND, cls.__name__, untagged=True))

    def state(self) -> dict:
        """Deprecated alias of :meth:`snapshot`, kept for one release."""
        return self.snapshot()

    @classmethod
    def from_state(cls, state: dict) -> "Covering":
        """Deprecated alias of :meth:`restore`, kept for one release."""
        return cls.restore(state)

    def _arrays(self) -> dict[str, np.ndarray]:
        st, g = self.store, self.graph
        codes = [(a, s, c) for a, cs in enumerate(self.attrs.codes) for s, c in cs.items()]
        names = sorted(self.attrs.ids, key=self.attrs.ids.get)
        out = {"config": np.array([self.k, self.index_code, self.over, self.under, self.hw], np.int64),
               "attr_names": np.array(names, dtype=str), "attr_kinds": np.array(self.attrs.kinds, np.int64),
               "code_attr": np.array([c[0] for c in codes], np.int64),
               "code_str": np.array([c[1] for c in codes], dtype=str),
               "code_val": np.array([c[2] for c in codes], np.int64),
               "ids": np.array(list(self.node_of), np.int64),
               "id_node": np.array(list(self.node_of.values()), np.int64),
               "rep": self.rep.copy(), "refs": self.refs.copy(), "free": np.array(self.free, np.int64),
               "counters": self.counters.copy(), "vals": st.vals[:st.n_vals].copy()}
        for name in ("kind", "lo", "hi", "voff", "vlen", "pts", "plain", "void"):
            out["store_" + name] = getattr(st, name).copy()
        for i, a in enumerate(g.G):
            out[f"graph_{i}"] = a.copy()
        out["graph_parents"], out["graph_pedges"] = g.P[0].copy(), g.P[1].copy()
        return out

    @classmethod
    def _from_arrays(cls, state: dict[str, np.ndarray]) -> "Covering":
        k, code, over, under, hw = (int(x) for x in state["config"])
        index = {v: n for n, v in INDEX_CODES.items()}[code]
        self = cls(k, index, over=over, under=under)
        for name, kind in zip(state["attr_names"].tolist(), state["attr_kinds"].tolist()):
            self.attrs.ids[name] = len(self.attrs.kinds)
            self.attrs.kinds.append(int(kind))
            self.attrs.codes.append({})
        for a, s, c in zip(state["code_attr"].tolist(), state["code_str"].tolist(), state["code_val"].tolist()):
            self.attrs.codes[a][s] = c
        st = self.store
        st.n_attrs = len(self.attrs.kinds)
        for name in ("kind", "lo", "hi", "voff", "vlen", "pts", "plain", "void"):
            setattr(st, name, state["store_" + name].copy())
        st.cap = len(st.plain)
        st.vals = np.concatenate([state["vals"], np.zeros(64, np.int64)])
        st.n_vals = len(state["vals"])
        g = self.graph
        g.G = tuple(state[f"graph_{i}"].copy() for i in range(GMETA + 1))
        g.P = (state["graph_parents"].copy(), state["graph_pedges"].copy())
        g.cap = len(g.G[0])
        self.rep, self.refs = state["rep"].copy(), state["refs"].copy()
        self.node_of = dict(zip(state["ids"].tolist(), state["id_node"].tolist()))
        self.free, self.hw = state["free"].tolist(), hw
        self.counters = state["counters"].copy()
        for node in np.flatnonzero(self.refs > 0).tolist():
            key = st.rows(node)
            self.key_node[key], self.node_key[node] = node, key
        self.rebuild()
        return self

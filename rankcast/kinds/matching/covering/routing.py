"""Covering routing for the ranked-matching kind (Shen, Tirthapura, Aluru).

The distribution role of a ranked-matching cluster with ``static`` or ``weighted`` scoring
sends an event only to the subscription partitions holding an expression it matches,
instead of to all of them:

- every distributor *owns* the expressions its clients subscribe (the coordinator names the
  owner: a CRC of the calling client's token); per partition it keeps a
  :class:`~rankcast.kinds.matching.covering.Covering` (G_1 over the k-d tree) of the expressions it owns
  there *and* of the entries the other distributors sent it for that partition;
- an own expression becomes an *entry* (is forwarded into every distributor's routing table)
  only when nothing in that G_1 covers it: neither an own expression nor one another
  distributor already sends (the paper: a subscription goes to the other routers only if no
  expression they know covers it); an unsubscription re-forwards the own expressions it
  leaves uncovered, then un-forwards its own (the paper's order), and an un-forward received
  from another distributor re-queries what that entry covered here, which may make entries
  of this one in answer (:meth:`MatchDistributor.apply_remote`);
- every distributor keeps the same :class:`RouteTable`: the entries of every distributor,
  each with its partition. A call's changes travel as one :class:`RouteUpdate` per
  distributor (only the uncovered expressions travel), spread by the coordinator before the
  next step is routed;
- an event goes to partition ``p`` iff it matches an entry of ``p``. Every expression placed
  on ``p`` lies, through its parents in its owner's G_1, under a forwarded root that is an
  entry or holds one of another distributor, so an event matching it matches an entry of
  ``p``: the routing is exact (exactly the partitions holding a match), and ranking stays in
  the partitions, where every expression is registered.

Covering is a conjunctive notion: ``relaxed`` scoring (an event matches when any predicate
holds) keeps broadcasting.

Matching an event against the table is one numba kernel over flat arrays per step
(:mod:`~rankcast.kinds.matching.covering.route_table`).

Recovery: the coverings, the owned expressions and the table are the distributor's snapshot
(the covering forest is history-dependent: it is restored, not recomputed).
"""
from __future__ import annotations

import time

import numpy as np

from . import Covering
from rankcast.errors import InvalidInput
from ..core import ExpressionTable
from ..predicates import EventBatch, ExpressionBatch
from .route_table import RouteTable, RouteUpdate, route_kernel
from rankcast.runtime.distributor import Distributor

__all__ = ["RouteTable", "RouteUpdate", "MatchDistributor", "route_kernel", "covering_enabled", "owner_of",
           "client_of"]

_NODE_BITS = 32
_PART_BITS = 16


def covering_enabled(scoring: str, options: dict) -> bool:
    """ClusterConfig ``options["covering"]``: ``"auto"`` (default: on for ``static`` and
    ``weighted``), True or False. ``relaxed`` scoring always broadcasts."""
    v = options.get("covering", "auto")
    if v not in ("auto", True, False):
        raise InvalidInput(f"ClusterConfig: field 'options.covering': must be 'auto', True or False, got {v!r}")
    if scoring == "relaxed":
        if v is True:
            raise InvalidInput("ClusterConfig: field 'options.covering': relaxed scoring matches when any "
                               "predicate holds, which covering cannot route; use 'auto' or False")
        return False
    return v is not False


def owner_of(client, n_distributors: int) -> int:
    """The distributor that owns the expressions a client subscribes (stable across
    processes: a CRC of its token, not Python's salted hash)."""
    import zlib
    if client is None or n_distributors == 1:
        return 0
    return zlib.crc32(str(client).encode()) % n_distributors


def client_of(d: int, n_distributors: int) -> str:
    """A client token owned by distributor ``d`` (tests and benchmarks that stand for the
    clients of every distributor)."""
    return next(f"client-{d}-{j}" for j in range(100_000) if owner_of(f"client-{d}-{j}", n_distributors) == d)


def _key(owner: int, part: int, nodes: np.ndarray) -> np.ndarray:
    """Routing-entry keys: (owner, partition, covering node); an entry outlives the id it was
    forwarded under while identical members remain, so entries are keyed by node."""
    return (np.int64(owner) << np.int64(_NODE_BITS + _PART_BITS)) | (np.int64(part) << np.int64(_NODE_BITS)) \
        | np.asarray(nodes, np.int64)


def _with_ids(batch: ExpressionBatch, ids: np.ndarray) -> ExpressionBatch:
    from dataclasses import replace
    return replace(batch, ids=np.asarray(ids, np.int64))


def _take_slots(t: ExpressionTable, slots: np.ndarray) -> ExpressionBatch:
    """The expressions in ``slots`` of an ExpressionTable, as a batch (their ids: the table's)."""
    from rankcast.common.arrays import runs
    off, rows = t.pred_rows(slots)
    s_off, s_rows = runs(t.set_off[rows], t.set_off[rows + 1] - t.set_off[rows])
    return ExpressionBatch(t.ids[slots], t.score[slots], off, t.p_attr[rows], t.p_op[rows], t.p_a[rows],
                           t.p_b[rows], t.p_w[rows], t.p_lo[rows], t.p_hi[rows], s_off, t.set_vals[s_rows])


class _Side:
    """One partition's covering at one distributor: its own expressions and the entries of
    the other distributors' tables (remote), as nodes of one G_1 under internal ids, and
    which nodes are this distributor's entries."""

    def __init__(self, index: str):
        self.cov = Covering(1, index)
        self.local: dict[int, int] = {}       # expression id -> internal id
        self.remote: dict[int, int] = {}      # entry key of another distributor -> internal id
        self.loc: dict[int, set] = {}         # node -> internal ids of its own expressions
        self.nrem: dict[int, int] = {}        # node -> remote entries in it
        self.entries: dict[int, int] = {}     # node -> this distributor's entry key

    def state(self) -> dict:
        return {"cov": self.cov.state(), "local": self.local, "remote": self.remote, "loc": self.loc,
                "nrem": self.nrem, "entries": self.entries}

    @classmethod
    def from_state(cls, st: dict, index: str) -> "_Side":
        self = cls.__new__(cls)
        self.cov = Covering.from_state(st["cov"])
        for k in ("local", "remote", "loc", "nrem", "entries"):
            setattr(self, k, st[k])
        return self


class MatchDistributor(Distributor):
    """A ranked-matching distributor with covering routing (module docstring).

    Per partition (:class:`_Side`) one G_1 holds its own expressions and the other
    distributors' entries. A node is this distributor's *entry* (in every routing table) when
    it is forwarded in G_1 (in-degree 0), holds one of its own expressions, and held no remote
    entry when it became forwarded-and-owned: an expression covered by a cover that another
    distributor already sends (or identical to one) is not forwarded (the paper: forwarded
    only if no expression the others know covers it). An entry stays until its node has no
    own expression left (the paper never un-forwards on a later arrival). Removing a remote
    entry re-queries what it covered (G_1) and may make entries here: the answer to another
    distributor's update is an update of this one's (:meth:`apply_remote`), which the
    coordinator spreads in turn (it adds entries only, so it ends there).

    Every table is the union of every distributor's entries: an expression lies under a
    forwarded root of its G_1, which is an entry here or holds a remote entry, so an event
    matching it reaches its partition."""

    def __init__(self, policy, index: int, n_distributors: int, cluster: str = "rankcast",
                 export_metrics: bool = True, delay: float = 0.0, seed: int = 0, covering_index: str = "kd-tree",
                 resume=None):
        super().__init__(policy, 0, index, cluster, export_metrics, delay, seed)
        self.P = policy.n_partitions
        self.D = int(n_distributors)
        self.covering_index = covering_index
        self.sides: dict[int, _Side] = {}
        self.content = ExpressionTable()           # own expressions, by internal id
        self.next_iid = 0
        self.kinds: list[int] = []
        self.table = RouteTable(self.P)
        self.counts = dict(subscribed=0, unsubscribed=0, forward=0, reforward=0, unforward=0,
                           remote_updates=0, remote_entries=0, events=0, partitions_reached=0,
                           route_seconds=0.0, covering_seconds=0.0)
        self._resume(resume)

    # ---- recovery -----------------------------------------------------------------------
    def _state(self) -> dict:
        return {"sides": {p: sd.state() for p, sd in self.sides.items()}, "content": self.content,
                "next_iid": self.next_iid, "kinds": list(self.kinds), "table": self.table.t,
                "table_part": self.table.part, "counts": dict(self.counts),
                "route_counters": self.table.counters.copy()}

    def _restore(self, state: dict) -> None:
        self.sides = {p: _Side.from_state(st, self.covering_index) for p, st in state["sides"].items()}
        self.content, self.next_iid, self.kinds = state["content"], state["next_iid"], state["kinds"]
        self.table = RouteTable(self.P)
        self.table.t, self.table.part = state["table"], state["table_part"]
        self.table.counters = state["route_counters"]
        self.counts = state["counts"]

    def _shared(self) -> dict:
        return {}

    def _warm(self) -> None:
        """The route kernel and the covering's kernels, on a throwaway table and covering."""
        from rankcast.model import Expression, Predicate
        t = RouteTable(1)
        t.route(EventBatch(np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.int32), np.zeros(0),
                           np.zeros(0)))
        c = Covering(1, self.covering_index)
        c.subscribe([Expression(1, [Predicate("x", "<=", 1.0)]), Expression(2, [Predicate("x", "<=", 0.0)])])
        c.unsubscribe([1])

    # ---- the coverings ------------------------------------------------------------------
    def _side(self, p: int) -> _Side:
        sd = self.sides.get(p)
        if sd is None:
            sd = self.sides[p] = _Side(self.covering_index)
        return sd

    def _iids(self, n: int) -> np.ndarray:
        out = np.arange(self.next_iid, self.next_iid + n, dtype=np.int64)
        self.next_iid += n
        return out

    def _settle(self, p: int, sd: _Side, nodes, out: dict, new_kind: str) -> None:
        """Make or drop this distributor's entries among ``nodes`` (module rules); the
        changes go to ``out`` (add: (key, internal id of the content, partition); remove: key)."""
        cov = sd.cov
        fwd = cov.graph.G[1]
        for n in set(nodes):
            alive = n < len(cov.refs) and cov.refs[n] > 0
            own = alive and bool(sd.loc.get(n))
            has = n in sd.entries
            if has and not own:
                out["remove"].append(sd.entries.pop(n))
                self.counts["unforward"] += 1
            elif not has and own and fwd[n] == 1 and sd.nrem.get(n, 0) == 0:
                key = int(_key(self.index, p, np.array([n]))[0])
                sd.entries[n] = key
                out["add"].append((key, min(sd.loc[n]), p))
                self.counts[new_kind] += 1
            if not alive:
                sd.loc.pop(n, None)
                sd.nrem.pop(n, None)

    def _finish(self, out: dict, kinds: list) -> RouteUpdate:
        add = None
        parts = np.array([a[2] for a in out["add"]], np.int64)
        if out["add"]:
            keys = np.array([a[0] for a in out["add"]], np.int64)
            src = np.array([a[1] for a in out["add"]], np.int64)
            add = _with_ids(_take_slots(self.content, self.content.slots(src)), keys)
        upd = RouteUpdate(add, parts, np.array(out["remove"], np.int64), list(kinds))
        self.table.apply(upd)
        return upd

    def subscribe_exprs(self, batch: ExpressionBatch, parts: np.ndarray, kinds: list) -> RouteUpdate:
        """Own the expressions of ``batch`` (placed on ``parts``); returns the update for the
        other distributors (already applied to this one's table)."""
        with self.metrics.busy():
            return self._subscribe_exprs(batch, parts, kinds)

    def _subscribe_exprs(self, batch, parts, kinds) -> RouteUpdate:
        t0 = time.perf_counter()
        self.kinds = list(kinds)
        out: dict = {"add": [], "remove": []}
        for p in np.unique(parts).tolist():
            sub = batch.take(parts == p)
            sd = self._side(p)
            iids = self._iids(len(sub))
            mine = _with_ids(sub, iids)
            self.content.add(mine)
            sd.local.update(zip(sub.ids.tolist(), iids.tolist()))
            sd.cov.subscribe_batch(mine, kinds)
            nodes = [sd.cov.node_of[i] for i in iids.tolist()]
            for n, i in zip(nodes, iids.tolist()):
                sd.loc.setdefault(n, set()).add(i)
            self._settle(p, sd, nodes + sd.cov.last_log[1].tolist(), out, "forward")
        self.counts["subscribed"] += len(batch)
        self.counts["covering_seconds"] += time.perf_counter() - t0
        return self._finish(out, kinds)

    def unsubscribe_exprs(self, ids: np.ndarray, parts: np.ndarray) -> RouteUpdate:
        """Drop own expressions; returns the re-forwards, then the un-forwards."""
        with self.metrics.busy():
            return self._unsubscribe_exprs(ids, parts)

    def _unsubscribe_exprs(self, ids, parts) -> RouteUpdate:
        t0 = time.perf_counter()
        out: dict = {"add": [], "remove": []}
        gone = []
        for p in np.unique(parts).tolist():
            sd = self.sides[p]
            iids = [sd.local.pop(i) for i in ids[parts == p].tolist()]
            nodes = [sd.cov.node_of[i] for i in iids]
            for n, i in zip(nodes, iids):
                sd.loc[n].discard(i)
            sd.cov.unsubscribe(np.array(iids, np.int64))
            self._settle(p, sd, nodes + sd.cov.last_log[1].tolist(), out, "reforward")
            gone += iids
        upd = self._finish(out, self.kinds)
        if gone:
            self.content.remove(np.array(gone, np.int64))
            self.content.compact()
        self.counts["unsubscribed"] += len(ids)
        self.counts["covering_seconds"] += time.perf_counter() - t0
        return upd

    def apply_remote(self, upd: RouteUpdate) -> RouteUpdate | None:
        """Another distributor's update: into the table, and into the coverings (its entries
        cover expressions here; removing them re-queries what they covered). Returns this
        distributor's own update in answer (re-forwards), or None."""
        with self.metrics.busy():
            return self._apply_remote(upd)

    def _apply_remote(self, upd) -> RouteUpdate | None:
        t0 = time.perf_counter()
        self.table.apply(upd)
        self.counts["remote_updates"] += 1
        self.counts["remote_entries"] += upd.n_messages()
        if len(upd.kinds) > len(self.kinds):
            self.kinds = list(upd.kinds)
        out: dict = {"add": [], "remove": []}
        if upd.add is not None and len(upd.add):
            for p in np.unique(upd.add_parts).tolist():
                sub = upd.add.take(upd.add_parts == p)
                sd = self._side(p)
                iids = self._iids(len(sub))
                sd.remote.update(zip(sub.ids.tolist(), iids.tolist()))
                sd.cov.subscribe_batch(_with_ids(sub, iids), self.kinds)
                nodes = [sd.cov.node_of[i] for i in iids.tolist()]
                for n in nodes:
                    sd.nrem[n] = sd.nrem.get(n, 0) + 1
                self._settle(p, sd, nodes + sd.cov.last_log[1].tolist(), out, "reforward")
        if len(upd.remove):
            rp = (upd.remove >> np.int64(_NODE_BITS)) & np.int64((1 << _PART_BITS) - 1)
            for p in np.unique(rp).tolist():
                sd = self.sides[p]
                iids = [sd.remote.pop(k) for k in upd.remove[rp == p].tolist()]
                nodes = [sd.cov.node_of[i] for i in iids]
                for n in nodes:
                    sd.nrem[n] -= 1
                sd.cov.unsubscribe(np.array(iids, np.int64))
                self._settle(p, sd, nodes + sd.cov.last_log[1].tolist(), out, "reforward")
        self.counts["covering_seconds"] += time.perf_counter() - t0
        if not out["add"] and not out["remove"]:
            return None
        return self._finish(out, self.kinds)

    # ---- events -------------------------------------------------------------------------
    def route_rows(self, step: int, events: EventBatch, seqs: np.ndarray):
        """One payload per partition ((events, seqs, seqs) or None), then the rows of the
        step's events each partition got (the aggregator's map back to the step)."""
        if self._delay:
            time.sleep(self._rng.random() * self._delay)
        with self.metrics.busy():
            t0 = time.perf_counter()
            routing = self.table.route(events)
            rows_of = routing.rows_of(self.P)
            out = [(events.take(r), seqs[r], seqs[r]) if len(r) else None for r in rows_of]
            out.append(rows_of)
            self.counts["route_seconds"] += time.perf_counter() - t0
            self.counts["events"] += len(events)
            self.counts["partitions_reached"] += int(len(routing.parts))
            self.metrics.inc("messages", len(events))
            self.metrics.inc("tuples_out", int(len(routing.parts)))
        return out

    def stats(self) -> dict:
        out = super().stats()
        own = sum(len(sd.local) for sd in self.sides.values())
        out.update(covering={**self.counts, "owned": own, "routing_table": len(self.table),
                             "routing_table_by_partition": self.table.per_partition().tolist(),
                             "entries": sum(len(sd.entries) for sd in self.sides.values()),
                             "entries_checked": int(self.table.counters[0]),
                             "groups_searched": int(self.table.counters[1])})
        return out

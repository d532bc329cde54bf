"""Covering routing for the ranked-matching kind (issue 12; Shen, Tirthapura, Aluru).

The distribution role of a ranked-matching cluster with ``static`` or ``weighted`` scoring
sends an event only to the subscription partitions holding an expression it matches,
instead of to all of them:

- every distributor *owns* the expressions its clients subscribe (the coordinator names the
  owner: a hash of the calling client); per partition it keeps a
  :class:`~rankcast.covering.Covering` (G_1 over the k-d tree) of the expressions it owns
  there. An expression is *forwarded* (enters the routing tables) only when no expression
  of that distributor in that partition covers it; an unsubscription re-forwards the
  expressions it leaves uncovered, then un-forwards its own (the paper's order);
- every distributor keeps the same :class:`RouteTable`: the forwarded expressions of every
  owner, each with its partition. An owner's forwards go to the other distributors as one
  :class:`RouteUpdate` per call (the paper's subscription forwarding between routers: only
  the uncovered expressions travel);
- an event goes to partition ``p`` iff it matches a forwarded expression of ``p``. Every
  expression placed on ``p`` is covered, through its parents, by a forwarded root of ``p``
  of its owner, so an event matching it matches that root: the routing is exact (a superset
  of the partitions with a match), and ranking stays in the partitions, where every
  expression is registered.

Covering is a conjunctive notion: ``relaxed`` scoring (an event matches when any predicate
holds) keeps broadcasting.

Matching an event against the table is one numba kernel over flat arrays per step
(:func:`route_kernel`): the table is the matching kind's own
:class:`~rankcast.indexing.matching.ExpressionTable`; each entry is found through one
*driver* predicate (its narrowest interval, as the partitions' cores choose one), entries
grouped by (partition, driver attribute) and sorted by the interval's low end with a running
maximum of the high ends, so that a stabbing walk from the event's value down stops at the
first entry that cannot contain it; a partition already reached is skipped, and the first
exact match (:func:`~rankcast.indexing.matching.holds_row` on every predicate) reaches it.

Recovery: the coverings, the owned expressions and the table are the distributor's snapshot
(the covering forest is history-dependent: it is restored, not recomputed).
"""
from __future__ import annotations

import time

import numba
import numpy as np

from ..covering import Covering
from ..covering.graph import FORWARD, REFORWARD, UNFORWARD
from ..errors import InvalidInput
from ..indexing.matching import ExpressionTable, holds_row
from ..predicates import EventBatch, ExpressionBatch
from .distributor import Distributor
from .policies import Routing

__all__ = ["RouteTable", "RouteUpdate", "MatchDistributor", "route_kernel", "covering_enabled", "owner_of"]

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
    from .._arrays import runs
    off, rows = t.pred_rows(slots)
    s_off, s_rows = runs(t.set_off[rows], t.set_off[rows + 1] - t.set_off[rows])
    return ExpressionBatch(t.ids[slots], t.score[slots], off, t.p_attr[rows], t.p_op[rows], t.p_a[rows],
                           t.p_b[rows], t.p_w[rows], t.p_lo[rows], t.p_hi[rows], s_off, t.set_vals[s_rows])


class RouteUpdate:
    """An owner's changes of one call to the routing tables: ``add`` (keyed expressions, in
    the partitions ``add_parts``) then ``remove`` (keys)."""

    __slots__ = ("add", "add_parts", "remove", "counts")

    def __init__(self, add: ExpressionBatch | None, add_parts: np.ndarray, remove: np.ndarray, counts: dict):
        self.add, self.add_parts, self.remove, self.counts = add, add_parts, remove, counts

    def n_messages(self) -> int:
        return len(self.add_parts) + len(self.remove)


@numba.njit(cache=True)
def route_kernel(ev_off, ev_attr, ev_val, n_attrs, P, always, g_part, g_attr, g_start, g_end, e_slot, e_lo,
                 e_hi, e_pmax, p_start, p_end, p_attr, p_op, p_a, p_b, set_off, set_vals, counters):
    """The partitions every event reaches, as CSR (offsets, partitions ascending).

    Groups ``g`` (sorted by partition): entries ``g_start[g]:g_end[g]`` of partition
    ``g_part[g]`` driven by attribute ``g_attr[g]``, sorted by ``e_lo``; ``e_pmax`` the
    running maximum of ``e_hi`` in the group; ``e_slot`` the entry's slot in the table
    (predicates ``p_start[s]:p_end[s]``). ``always[p]``: ``p`` holds an entry without
    predicates. ``counters``: [entries checked exactly, groups searched]."""
    n = ev_off.shape[0] - 1
    val = np.zeros(n_attrs)
    has = np.zeros(n_attrs, np.bool_)
    reached = np.zeros(P, np.bool_)
    out_off = np.zeros(n + 1, np.int64)
    out = np.empty(n * P, np.int64)
    w = 0
    G = g_part.shape[0]
    for i in range(n):
        for j in range(ev_off[i], ev_off[i + 1]):
            val[ev_attr[j]] = ev_val[j]
            has[ev_attr[j]] = True
        for p in range(P):
            reached[p] = always[p]
        for g in range(G):
            p = g_part[g]
            if reached[p]:
                continue
            a = g_attr[g]
            if not has[a]:
                continue
            x = val[a]
            lo, hi = g_start[g], g_end[g]
            while lo < hi:                      # past the last entry with e_lo <= x
                m = (lo + hi) >> 1
                if e_lo[m] <= x:
                    lo = m + 1
                else:
                    hi = m
            counters[1] += 1
            e = lo - 1
            while e >= g_start[g] and e_pmax[e] >= x:
                if e_hi[e] >= x:
                    s = e_slot[e]
                    counters[0] += 1
                    ok = True
                    for q in range(p_start[s], p_end[s]):
                        at = p_attr[q]
                        if not has[at] or not holds_row(p_op, p_a, p_b, set_off, set_vals, q, val[at]):
                            ok = False
                            break
                    if ok:
                        reached[p] = True
                        break
                e -= 1
        for p in range(P):
            if reached[p]:
                out[w] = p
                w += 1
        out_off[i + 1] = w
        for j in range(ev_off[i], ev_off[i + 1]):
            has[ev_attr[j]] = False
    return out_off, out[:w]


class RouteTable:
    """The forwarded expressions of every owner, keyed, with their partitions (module
    docstring); the driver groups are rebuilt at the first event after a change."""

    def __init__(self, n_partitions: int):
        self.P = int(n_partitions)
        self.t = ExpressionTable()
        self.part = np.zeros(0, np.int64)          # per slot of ``t``
        self._built = None
        self.counters = np.zeros(2, np.int64)

    def __len__(self) -> int:
        return self.t.n_live

    def apply(self, upd: RouteUpdate) -> None:
        if upd.add is not None and len(upd.add):
            self.t.add(upd.add)
            self.part = np.concatenate([self.part, np.asarray(upd.add_parts, np.int64)])
        if len(upd.remove):
            self.t.remove(np.asarray(upd.remove, np.int64))
            keep = self.t.compact()
            if keep is not None:
                self.part = self.part[keep]
        self._built = None

    def per_partition(self) -> np.ndarray:
        live = np.flatnonzero(self.t.live[: self.t.n_slots])
        return np.bincount(self.part[live], minlength=self.P)

    def _build(self):
        t = self.t
        live = np.flatnonzero(t.live[: t.n_slots])
        n_pred = t.p_end[live] - t.p_start[live]
        always = np.zeros(self.P, np.bool_)
        always[self.part[live[n_pred == 0]]] = True
        live = live[n_pred > 0]
        off, rows = t.pred_rows(live)
        owner = np.repeat(np.arange(len(live)), np.diff(off))
        width = t.p_hi[rows] - t.p_lo[rows]
        order = np.lexsort((width, owner))              # per entry, its narrowest interval first
        drv = rows[order][off[:-1]] if len(live) else np.zeros(0, np.int64)
        part, attr = self.part[live], t.p_attr[drv].astype(np.int64)
        lo, hi = t.p_lo[drv], t.p_hi[drv]
        order = np.lexsort((lo, attr, part))
        part, attr, lo, hi, slot = part[order], attr[order], lo[order], hi[order], live[order]
        if len(part):
            starts = np.flatnonzero(np.r_[True, (part[1:] != part[:-1]) | (attr[1:] != attr[:-1])])
        else:
            starts = np.zeros(0, np.int64)
        ends = np.r_[starts[1:], len(part)].astype(np.int64)
        pmax = hi.copy()
        for a, b in zip(starts.tolist(), ends.tolist()):
            np.maximum.accumulate(pmax[a:b], out=pmax[a:b])
        n_attrs = int(t.p_attr.max()) + 1 if len(t.p_attr) else 0
        self._built = (always, part[starts].astype(np.int64), attr[starts].astype(np.int64),
                       starts.astype(np.int64), ends, slot.astype(np.int64), lo, hi, pmax, n_attrs)

    def route(self, events: EventBatch) -> Routing:
        if self._built is None:
            self._build()
        always, g_part, g_attr, g_start, g_end, e_slot, e_lo, e_hi, e_pmax, n_attrs = self._built
        t = self.t
        n_attrs = max(n_attrs, int(events.attr.max()) + 1 if len(events.attr) else 0)
        off, parts = route_kernel(events.off.astype(np.int64), events.attr.astype(np.int64),
                                  events.val.astype(np.float64), n_attrs, self.P, always, g_part, g_attr, g_start,
                                  g_end, e_slot, e_lo, e_hi, e_pmax, t.p_start, t.p_end, t.p_attr, t.p_op, t.p_a,
                                  t.p_b, t.set_off, t.set_vals, self.counters)
        return Routing(off, parts)


class MatchDistributor(Distributor):
    """A ranked-matching distributor with covering routing (module docstring): it owns the
    expressions of its clients (per partition a Covering and their contents, to re-forward
    them), keeps the routing table of every owner's forwarded expressions, and routes
    events by it. Its state is part of every checkpoint."""

    def __init__(self, policy, index: int, n_distributors: int, cluster: str = "rankcast",
                 export_metrics: bool = True, delay: float = 0.0, seed: int = 0, covering_index: str = "kd-tree",
                 resume=None):
        super().__init__(policy, 0, index, cluster, export_metrics, delay, seed)
        self.P = policy.n_partitions
        self.D = int(n_distributors)
        self.covering_index = covering_index
        self.covs: dict[int, Covering] = {}        # partition -> covering of the owned expressions there
        self.content = ExpressionTable()           # owned node contents, by routing key
        self.content_keys: set[int] = set()
        self.table = RouteTable(self.P)
        self.counts = dict(subscribed=0, unsubscribed=0, forward=0, reforward=0, unforward=0,
                           remote_updates=0, remote_entries=0, events=0, partitions_reached=0,
                           route_seconds=0.0, covering_seconds=0.0)
        self._resume(resume)

    # ---- recovery -----------------------------------------------------------------------
    def _state(self) -> dict:
        return {"covs": {p: c.state() for p, c in self.covs.items()}, "content": self.content,
                "content_keys": np.fromiter(self.content_keys, np.int64, len(self.content_keys)),
                "table": self.table.t, "table_part": self.table.part, "counts": dict(self.counts),
                "route_counters": self.table.counters.copy()}

    def _restore(self, state: dict) -> None:
        self.covs = {p: Covering.from_state(s) for p, s in state["covs"].items()}
        self.content = state["content"]
        self.content_keys = set(state["content_keys"].tolist())
        self.table = RouteTable(self.P)
        self.table.t, self.table.part = state["table"], state["table_part"]
        self.table.counters = state["route_counters"]
        self.counts = state["counts"]

    def _shared(self) -> dict:
        return {}

    def _warm(self) -> None:
        t = RouteTable(1)
        t.route(EventBatch(np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.int32), np.zeros(0),
                           np.zeros(0)))

    # ---- subscriptions (this distributor owns them) ---------------------------------------
    def _cov(self, p: int) -> Covering:
        c = self.covs.get(p)
        if c is None:
            c = self.covs[p] = Covering(1, self.covering_index)
        return c

    def _update(self, adds: list, add_parts: list, removes: list, counts: dict) -> RouteUpdate:
        add = None
        if adds:
            keys = np.concatenate(adds)
            add = _with_ids(_take_slots(self.content, self.content.slots(keys)), keys)
        upd = RouteUpdate(add, np.concatenate(add_parts) if add_parts else np.zeros(0, np.int64),
                          np.concatenate(removes) if removes else np.zeros(0, np.int64), counts)
        self.table.apply(upd)
        return upd

    def subscribe_exprs(self, batch: ExpressionBatch, parts: np.ndarray, kinds: list) -> RouteUpdate:
        """Own the expressions of ``batch`` (placed on ``parts``); returns the forwards for
        the other distributors (already applied to this one's table)."""
        t0 = time.perf_counter()
        adds, add_parts = [], []
        n_fwd = 0
        for p in np.unique(parts).tolist():
            sub = batch.take(parts == p)
            cov = self._cov(p)
            cov.subscribe_batch(sub, kinds)
            kinds_log, nodes_log = cov.last_log
            nodes = np.fromiter((cov.node_of[i] for i in sub.ids.tolist()), np.int64, len(sub))
            keys = _key(self.index, p, nodes)
            new = np.array([cov.rep[n] == i and k not in self.content_keys
                            for n, i, k in zip(nodes.tolist(), sub.ids.tolist(), keys.tolist())], bool)
            if new.any():
                self.content.add(_with_ids(sub.take(new), keys[new]))
                self.content_keys.update(keys[new].tolist())
            fwd = nodes_log[(kinds_log == FORWARD) | (kinds_log == REFORWARD)]
            if len(fwd):
                adds.append(_key(self.index, p, fwd))
                add_parts.append(np.full(len(fwd), p, np.int64))
                n_fwd += len(fwd)
        self.counts["subscribed"] += len(batch)
        self.counts["forward"] += n_fwd
        self.counts["covering_seconds"] += time.perf_counter() - t0
        return self._update(adds, add_parts, [], {"forward": n_fwd, "expressions": len(batch)})

    def unsubscribe_exprs(self, ids: np.ndarray, parts: np.ndarray) -> RouteUpdate:
        """Drop owned expressions; returns the re-forwards, then the un-forwards."""
        t0 = time.perf_counter()
        adds, add_parts, removes, dead = [], [], [], []
        n_re = n_un = 0
        for p in np.unique(parts).tolist():
            sub = ids[parts == p]
            cov = self.covs[p]
            nodes = np.fromiter((cov.node_of[i] for i in sub.tolist()), np.int64, len(sub))
            un, cnt = np.unique(nodes, return_counts=True)
            dying = un[cov.refs[un] == cnt]
            cov.unsubscribe(sub)
            kinds_log, nodes_log = cov.last_log
            re = nodes_log[kinds_log == REFORWARD]
            gone = nodes_log[kinds_log == UNFORWARD]
            if len(re):
                adds.append(_key(self.index, p, re))
                add_parts.append(np.full(len(re), p, np.int64))
            if len(gone):
                removes.append(_key(self.index, p, gone))
            dead.append(_key(self.index, p, dying))
            n_re += len(re)
            n_un += len(gone)
        upd = self._update(adds, add_parts, removes, {"reforward": n_re, "unforward": n_un, "expressions": len(ids)})
        dead_keys = np.concatenate(dead) if dead else np.zeros(0, np.int64)
        if len(dead_keys):
            self.content.remove(dead_keys)
            self.content.compact()
            self.content_keys.difference_update(dead_keys.tolist())
        self.counts["unsubscribed"] += len(ids)
        self.counts["reforward"] += n_re
        self.counts["unforward"] += n_un
        self.counts["covering_seconds"] += time.perf_counter() - t0
        return upd

    def apply_remote(self, upd: RouteUpdate) -> int:
        """Another owner's forwards, re-forwards and un-forwards; returns the table size."""
        self.table.apply(upd)
        self.counts["remote_updates"] += 1
        self.counts["remote_entries"] += upd.n_messages()
        return len(self.table)

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
        own = sum(len(c.node_of) for c in self.covs.values())
        out.update(covering={**self.counts, "owned": own, "routing_table": len(self.table),
                             "routing_table_by_partition": self.table.per_partition().tolist(),
                             "entries_checked": int(self.table.counters[0]),
                             "groups_searched": int(self.table.counters[1])})
        return out

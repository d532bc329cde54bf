"""The ranked-matching kind on the roles (docs/architecture.md, "Roles per kind").

- distribution (:class:`~rankcast.runtime.distributor.Distributor` with a :class:`MatchPolicy`):
  places expressions on subscription partitions (``hash``, or ``attribute``: ranges of the
  attribute the expressions use most, split at quantiles like the location policy's KD
  leaves; or ``replicate``: every expression in every partition, each event to one of them,
  the step's events cut into one run per partition, no merge needed) and, for ``static``
  and ``weighted`` scoring, sends each event only to the
  partitions holding an expression it matches (covering routing,
  :mod:`~rankcast.kinds.matching.covering.routing`; ``options["covering"]``, on by default); ``relaxed``
  scoring, or covering off, sends every event to every partition;
- subscription partition (:class:`MatchPartition`): a
  :class:`~rankcast.kinds.matching.core.MatchCore` over its expressions, answering each event
  with its local top-k;
- aggregation (:class:`MatchAggregator`): merges the partitions' lists of each event into its
  global top-k (the k best of the union: every expression lives in exactly one partition);
  under diffs (``ClusterConfig(updates="diff")``) as each list's entries entering it (an
  event's list starts empty), the form the other kinds' diffs take.

Recovery: with covering routing, every distributor snapshots its coverings and routing
table (:class:`~rankcast.kinds.matching.covering.routing.MatchDistributor`). A partition snapshots its live expressions as columns and rebuilds its indexes
from them when resumed (docs/architecture.md, "How recovery holds": a structure that is not
snapshotted is rebuilt from the subscriptions); the aggregator holds no state between steps.
"""
from __future__ import annotations

import time
from numbers import Integral
from typing import Any

import numpy as np

from rankcast.config import MATCH_POLICIES, MatchConfig
from rankcast.common.arrays import key_rank
from rankcast.common.diffs import concat_diffs, diffs_of_new_lists, is_diff
from rankcast.errors import InvalidInput
from .predicates import AttributeTable, EventBatch, ExpressionBatch, encode_events, encode_expressions
from rankcast.runtime.coordinator import (NO_UPDATES, CoordinatorBase, guarded, select_diff_runs, select_rows,
                                         concat_updates)
from .covering.routing import MatchDistributor, covering_enabled, owner_of
from rankcast.runtime.distributor import Distributor
from rankcast.runtime.kind import PlacementPolicy
from rankcast.runtime.metrics import RoleMetrics
from rankcast.runtime.recovery import Recoverable

__all__ = ["MatchPolicy", "MatchOps", "MatchPartition", "MatchAggregator", "MatchCoordinator", "merge_topk",
           "MATCH_POLICIES"]



def _best_per_event(rows_ev: np.ndarray, ids: np.ndarray, sc: np.ndarray, n: int, k: int) -> tuple:
    """(offsets, expr_ids, scores) of the ``k`` best rows (score desc, id asc) of each of the
    ``n`` events, from rows in any order (``rows_ev``: each row's event position)."""
    order = np.lexsort((ids, -sc, rows_ev))
    rows_ev, ids, sc = rows_ev[order], ids[order], sc[order]
    start = np.searchsorted(rows_ev, np.arange(n))
    rank = np.arange(len(rows_ev)) - start[rows_ev]
    keep = rank < k
    off = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(rows_ev[keep], minlength=n), out=off[1:])
    return off, ids[keep], sc[keep]


def merge_topk(parts: list[tuple], k: int) -> tuple:
    """Per event, the ``k`` best (score desc, id asc) of the union of the partial lists.

    Every part is (event_ids, offsets, expr_ids, scores) over the same events in the same
    order; returns the same form."""
    parts = [p for p in parts if p is not None]
    ev = parts[0][0]
    n = len(ev)
    rows_ev = np.concatenate([np.repeat(np.arange(n), np.diff(p[1])) for p in parts])
    ids = np.concatenate([p[2] for p in parts])
    sc = np.concatenate([p[3] for p in parts])
    return (ev,) + _best_per_event(rows_ev, ids, sc, n, k)


def merge_routed(parts: list, rows: list[np.ndarray], ev: np.ndarray, k: int) -> tuple:
    """:func:`merge_topk` when each partition saw only some events of the step: ``rows[p]``
    are the positions (in ``ev``, the step's event ids) of the events partition ``p`` got, in
    its order; ``parts[p]`` its answer or None. Every event of the step gets a (maybe empty) list."""
    n = len(ev)
    got = [(p, r) for p, r in zip(parts, rows) if p is not None and len(r)]
    if not got:
        return ev, np.zeros(n + 1, np.int64), np.zeros(0, np.int64), np.zeros(0)
    rows_ev = np.concatenate([r[np.repeat(np.arange(len(r)), np.diff(p[1]))] for p, r in got])
    ids = np.concatenate([p[2] for p, _ in got])
    sc = np.concatenate([p[3] for p, _ in got])
    return (ev,) + _best_per_event(rows_ev, ids, sc, n, k)


def concat_runs(parts: list, n: int) -> tuple:
    """``replicate``: the partitions' answers to consecutive runs of a step's ``n`` events,
    each event's list whole (every partition holds every expression), laid end to end in the
    form :func:`merge_topk` returns. ``parts[p]``: partition ``p``'s answer, None for an
    empty run."""
    got = [p for p in parts if p is not None]
    ev = np.concatenate([p[0] for p in got])
    off = np.zeros(n + 1, np.int64)
    np.cumsum(np.concatenate([np.diff(p[1]) for p in got]), out=off[1:])
    return ev, off, np.concatenate([p[2] for p in got]), np.concatenate([p[3] for p in got])


def answer_form(lists: tuple, diff: bool) -> tuple:
    """The merged lists (events, offsets, expression ids, scores) as the cluster delivers
    them: as they are, or (``diff``) as diff arrays, every entry entering (an event's list
    starts empty)."""
    if not diff:
        return lists
    ev, off, ids, sc = lists
    key, rank = key_rank(np.asarray(ev, np.int64), np.asarray(off, np.int64))
    return diffs_of_new_lists(key, rank, ids, sc)


def covering_stats(per_dist: list[dict], n_live: int, n_parts: int) -> dict:
    """The cluster's figures of covering routing from its distributors' counters.

    ``routing_table``: entries of one distributor's table (all hold the same) against
    ``expressions``; ``partitions_reached_per_event`` against ``broadcast`` (the partitions);
    ``control_messages``: forwards, re-forwards and un-forwards that entered a routing table,
    each sent to every other distributor (``sent_between_distributors``); ``without_covering``:
    the same for forwarding every subscription and unsubscription as it comes."""
    D = len(per_dist)
    tot = {k: sum(d[k] for d in per_dist) for k in ("subscribed", "unsubscribed", "forward", "reforward",
                                                      "unforward", "events", "partitions_reached")}
    msgs = tot["forward"] + tot["reforward"] + tot["unforward"]
    plain = tot["subscribed"] + tot["unsubscribed"]
    return {"expressions": n_live, "routing_table": per_dist[0]["routing_table"],
            "routing_table_by_partition": per_dist[0]["routing_table_by_partition"],
            "partitions_reached_per_event": tot["partitions_reached"] / tot["events"] if tot["events"] else 0.0,
            "broadcast": float(n_parts), "events_routed": tot["events"],
            "control_messages": msgs, "forward": tot["forward"], "reforward": tot["reforward"],
            "unforward": tot["unforward"], "control_messages_without_covering": plain,
            "sent_between_distributors": msgs * (D - 1),
            "sent_between_distributors_without_covering": plain * (D - 1),
            "saved_between_distributors": (plain - msgs) * (D - 1),
            "owned_by_distributor": [d["owned"] for d in per_dist],
            "route_seconds": [d["route_seconds"] for d in per_dist],
            "covering_seconds": [d["covering_seconds"] for d in per_dist],
            "entries_checked": sum(d["entries_checked"] for d in per_dist)}


def results_arrays(event_ids: np.ndarray, results: list[tuple[np.ndarray, np.ndarray]]) -> tuple:
    """(event_ids, offsets, expr_ids, scores) from a core's per-event (ids, scores)."""
    off = np.zeros(len(results) + 1, np.int64)
    np.cumsum([len(r[0]) for r in results], out=off[1:])
    ids = np.concatenate([r[0] for r in results]).astype(np.int64) if results else np.zeros(0, np.int64)
    sc = np.concatenate([r[1] for r in results]).astype(np.float64) if results else np.zeros(0)
    return event_ids, off, ids, sc


class MatchPolicy(PlacementPolicy):
    """Placement of expressions and routing of events (module docstring): every event goes
    to every partition, or under ``replicate`` every expression lives in every partition and
    each event goes to one (:meth:`event_runs`)."""

    def __init__(self, name: str, n_partitions: int, options: dict | None = None):
        if name not in MATCH_POLICIES:
            raise ValueError(name)
        super().__init__(n_partitions)
        self.name = name
        self.attr = -1                              # the attribute ranges are cut on
        self.cuts = np.zeros(0)                     # n_partitions - 1 bounds of its ranges

    def fit(self, exprs: ExpressionBatch | None = None, _events=None) -> "MatchPolicy":
        """attribute: the numeric attribute most expressions name, cut at the quantiles of
        their interval midpoints (``between`` and ``==`` give finite midpoints)."""
        if self.name != "attribute" or exprs is None or not len(exprs):
            return self
        finite = np.isfinite(exprs.lo) & np.isfinite(exprs.hi)
        if not finite.any():
            return self
        counts = np.bincount(exprs.attr[finite])
        self.attr = int(counts.argmax())
        sel = finite & (exprs.attr == self.attr)
        mids = (exprs.lo[sel] + exprs.hi[sel]) / 2
        self.cuts = np.quantile(mids, np.arange(1, self.n_partitions) / self.n_partitions)
        return self

    @property
    def replicated(self) -> bool:
        """Every expression lives in every partition (``replicate``)."""
        return self.name == "replicate"

    def event_runs(self, n: int) -> list[np.ndarray]:
        """``replicate``: the positions of a step's ``n`` events each partition answers, one
        contiguous run per partition (the runs as even as they can be)."""
        bounds = np.linspace(0, n, self.n_partitions + 1).round().astype(np.int64)
        return [np.arange(bounds[p], bounds[p + 1], dtype=np.int64) for p in range(self.n_partitions)]

    def place(self, exprs: ExpressionBatch) -> np.ndarray:
        """The partition of every expression (each lives in exactly one; ``replicate``: -1,
        all of them)."""
        if self.replicated:
            return np.full(len(exprs), -1, np.int64)
        part = np.mod(exprs.ids, self.n_partitions)
        if self.attr < 0 or not len(exprs):
            return part
        row = np.repeat(np.arange(len(exprs)), np.diff(exprs.pred_off))
        sel = (exprs.attr == self.attr) & np.isfinite(exprs.lo) & np.isfinite(exprs.hi)
        mids = (exprs.lo[sel] + exprs.hi[sel]) / 2
        part[row[sel]] = np.searchsorted(self.cuts, mids, side="right")
        return part

    def describe(self) -> dict[str, Any]:
        return {"policy": self.name, "partitions": self.n_partitions, "attribute": self.attr,
                "cuts": self.cuts.tolist(), "events": "split" if self.replicated else "broadcast"}


class MatchOps:
    """Control operations of one step for one partition."""

    __slots__ = ("remove", "add")

    def __init__(self, remove: np.ndarray | None = None, add: ExpressionBatch | None = None):
        self.remove = remove
        self.add = add

    @staticmethod
    def combine(ops: list["MatchOps"]) -> "MatchOps":
        if len(ops) == 1:
            return ops[0]
        rem = [o.remove for o in ops if o.remove is not None]
        add = [o.add for o in ops if o.add is not None]
        return MatchOps(np.concatenate(rem) if rem else None, ExpressionBatch.concat(add) if add else None)


class MatchPartition(Recoverable):
    """A MatchCore for the expressions placed here (module docstring)."""

    def __init__(self, cfg: MatchConfig, index: int, cluster: str = "rankcast", export_metrics: bool = True,
                 delay: float = 0.0, seed: int = 0, resume=None):
        self.cfg = cfg
        self.index = index
        self.core = self._new_core()
        self.n_attrs = 0
        self.step = 0
        self.metrics = RoleMetrics("partition", index, cluster, export_metrics)
        self._delay = float(delay)
        self._rng = np.random.default_rng(seed + 104729 * index + 1)
        self._resume(resume)

    def _new_core(self):
        from .matcher import new_core
        return new_core(self.cfg)

    def _warm(self) -> None:
        from .warmup import warm_matching
        warm_matching(self.cfg)

    def _state(self) -> dict:
        return {"exprs": self.core.table.batch(), "n_attrs": self.n_attrs, "step": self.step}

    def _restore(self, state: dict) -> None:
        self.core = self._new_core()
        self.n_attrs, self.step = state["n_attrs"], state["step"]
        if len(state["exprs"]):
            self.core.add(state["exprs"], self.n_attrs)
        self.core.ev.grow(self.n_attrs)

    def process(self, step: int, n_attrs: int, k: int, ops: MatchOps | None, payload):
        """Step ``step``: the control operations, then the local top-k of the events of
        ``payload`` (the distributor's (events, positions, positions), or None) as
        (event_ids, offsets, expr_ids, scores), or None without events."""
        if self._delay:
            time.sleep(self._rng.random() * self._delay)
        with self.metrics.busy(step_histogram=True):
            if step != self.step + 1:
                raise RuntimeError(f"match partition {self.index}: step {step} after {self.step}")
            self.step = step
            self.n_attrs = max(self.n_attrs, int(n_attrs))
            self.core.ev.grow(self.n_attrs)
            if ops is not None:
                if ops.remove is not None and len(ops.remove):
                    self.core.remove(ops.remove)
                if ops.add is not None and len(ops.add):
                    self.core.add(ops.add, self.n_attrs)
            if payload is None:
                return None
            events = payload[0]
            self.metrics.inc("messages", len(events))
            return results_arrays(events.ids, self.core.match(events, int(k)))

    def stats(self) -> dict:
        out = self.metrics.snapshot()
        out.update(index=self.index, subscriptions=len(self.core), **{f"core_{k}": v for k, v in self.core.stats().items()
                                                                       if isinstance(v, (int, float))})
        return out


class MatchAggregator(Recoverable):
    """Merges each event's partial lists (stateless between steps); ``diff``: answers the
    merged lists as diff arrays (every entry +1), not as lists."""

    def __init__(self, index: int, n_partitions: int, cluster: str = "rankcast", export_metrics: bool = True,
                 diff: bool = False):
        self.index = index
        self.n_partitions = n_partitions
        self.diff = bool(diff)
        self.metrics = RoleMetrics("aggregator", index, cluster, export_metrics)

    def merge(self, k: int, *parts):
        with self.metrics.busy():
            parts = [p for p in parts if p is not None]
            if not parts:
                return None
            return self._form(merge_topk(parts, int(k)))

    def merge_routed(self, k: int, event_ids: np.ndarray, rows: list, *parts):
        """Covering routing: each partition answered only the events routed to it."""
        with self.metrics.busy():
            return self._form(merge_routed(list(parts), rows, event_ids, int(k)))

    def _form(self, lists: tuple) -> tuple:
        """The merged lists (events, offsets, expression ids, scores) as this role answers them."""
        return answer_form(lists, self.diff)

    def stats(self) -> dict:
        out = self.metrics.snapshot()
        out.update(index=self.index)
        return out


# ----------------------------------------------------------------------------- coordinator

class MatchCoordinator(CoordinatorBase):
    """The ranked-matching kind on the shared coordinator: expressions are placed once (the
    policy) and live in one partition each; a step carries control operations and events,
    every partition answers the events' local top-k and an aggregator merges them. The stream
    position counts events published; a delivery holds one Match per event of its calls."""

    KIND_STATE = ("attrs", "owner")
    ITEM = "expression"

    def init_kind(self, sample) -> None:
        ccfg = self.ccfg
        self.attrs = AttributeTable()
        self.policy = MatchPolicy(ccfg.policy, ccfg.partitions, ccfg.options)
        self.covering = covering_enabled(self.cfg.scoring, ccfg.options)
        if self.policy.replicated:
            if ccfg.options.get("covering") is True:
                raise InvalidInput("ClusterConfig: field 'options.covering': the replicate policy sends each "
                                   "event to one partition, which holds every expression: nothing to route; "
                                   "use 'auto' or False")
            self.covering = False
        self.owner: dict[int, int] = {}         # expression id -> its distributor (covering routing)
        self._client_now = None
        self._routing: list = []                # routing updates spread, not waited for yet
        if sample is not None:
            exprs = sample[0] if isinstance(sample, tuple) else sample
            batch, _ = encode_expressions(exprs, AttributeTable())     # ids as a fresh table gives them
            self.policy.fit(batch)
        self._results: list[tuple] = []         # merged per-event arrays of harvested steps
        self._k: dict[int, int] = {}            # step -> k of its events

    def role_groups(self):
        return [("distributor", self.dists), ("partition", self.parts), ("aggregator", self.aggs)]

    def snapshot_groups(self):
        if self.covering:
            return [("partition", self.parts), ("distributor", self.dists)]
        return [("partition", self.parts)]

    def _apply(self, rec: tuple):
        """The calling client names the distributor that owns what it subscribes."""
        self._client_now = rec[-2] if rec[0] in ("subscribe", "load") else None
        return super()._apply(rec)

    def reset_transient(self) -> None:
        self._results, self._k, self._routing = [], {}, []

    def build_roles(self, ckpt, reuse=None) -> None:
        ccfg, cfg, opts = self.ccfg, self.rt.share(self.cfg), self.ccfg.options
        name, export = ccfg.name, self._export
        delay, seed = float(opts.get("delay", 0.0)), int(opts.get("seed", 0))
        make, finish = self._role_maker(ckpt, reuse)
        P = self.policy.n_partitions
        self.parts = [make("partition", MatchPartition, p, cfg, p, name, export, delay, seed) for p in range(P)]
        self.aggs = [make("aggregator", MatchAggregator, a, a, P, name, export, self.diffs, snapshot=False)
                     for a in range(ccfg.aggregators)]
        D = ccfg.distributors
        if self.covering:
            cidx = str(opts.get("covering_index", "kd-tree"))
            self.dists = [make("distributor", MatchDistributor, d, self.policy, d, D, name, export, delay, seed,
                               cidx) for d in range(D)]
        else:
            self.dists = [make("distributor", Distributor, d, self.policy, 0, d, name, export, delay, seed,
                               snapshot=False) for d in range(D)]
        finish()

    def warm(self) -> dict:
        """:meth:`CoordinatorBase.warm`, and this process reads an event table once (on a
        throw-away attribute table): the column reading's modules (Arrow's JSON reader, its
        compute functions) load now, not in a stream's first call."""
        from .warmup import random_event_table
        encode_events(random_event_table(np.random.default_rng(0), 20), AttributeTable())
        return super().warm()

    # validation and encoding (the attribute table is the dictionary)
    def encode_subscriptions(self, exprs):
        return encode_expressions(exprs, self.attrs)

    def commit_encoding(self, pending) -> None:
        self.attrs.commit(pending)

    def mark_encoding(self):
        return self.attrs.mark()

    def rollback_encoding(self, mark) -> None:
        self.attrs.rollback(mark)

    # ------------------------------------------------------------------ calls
    def place(self, batch: ExpressionBatch) -> None:
        parts = self.policy.place(batch)
        self.live.update(zip(batch.ids.tolist(), parts.tolist()))
        if self.policy.replicated:
            for p in range(len(self.parts)):
                self._add_ops(p, MatchOps(add=batch))
            return
        for p in np.unique(parts).tolist():
            self._add_ops(p, MatchOps(add=batch.take(parts == p)))
        if self.covering:
            o = owner_of(self._client_now, len(self.dists))
            self.owner.update(zip(batch.ids.tolist(), [o] * len(batch)))
            self._settle_routing()      # a distributor's updates reach the others in the order it made them
            self._spread(o, self.dists[o].subscribe_exprs.remote(batch, parts, list(self.attrs.kinds)))

    def _spread(self, o: int, upd) -> None:
        """Distributor ``o``'s routing update ``upd`` (a reference) to every other one. Not
        waited for here (on Ray the distributors work while the partitions take the step's
        operations): a distributor runs the calls of the coordinator in order, so the next
        step it routes comes after them; :meth:`_settle_routing` waits at the quiesce and
        spreads the answers (re-forwards of what an un-forward uncovered) in turn."""
        self._routing.append((o, upd, [(i, d.apply_remote.remote(upd)) for i, d in enumerate(self.dists) if i != o]))

    def _settle_routing(self) -> None:
        """Wait for the routing updates spread, spreading every answer, until none is left:
        every table then holds every entry (before the call returns, so before any event of a
        later call is routed)."""
        while self._routing:
            o, upd, refs = self._routing.pop(0)
            self.rt.get(upd)
            for (i, ref), got in zip(refs, self.rt.get([r for _, r in refs])):
                if got is not None:
                    self._spread(i, ref)

    def baseline(self, ids) -> None:
        """Expressions have no standing results: nothing to settle."""

    def apply_unsubscribe(self, arr: np.ndarray) -> None:
        self._cut_group()
        parts = np.fromiter((self.live.pop(i) for i in arr.tolist()), np.int64, len(arr))
        if self.policy.replicated:
            for p in range(len(self.parts)):
                self._add_ops(p, MatchOps(remove=arr))
        for p in np.unique(parts[parts >= 0]).tolist():
            self._add_ops(p, MatchOps(remove=arr[parts == p]))
        if self.covering:
            owners = np.fromiter((self.owner.pop(i) for i in arr.tolist()), np.int64, len(arr))
            for o in np.unique(owners).tolist():
                m = owners == o
                self._settle_routing()
                self._spread(o, self.dists[o].unsubscribe_exprs.remote(arr[m], parts[m]))
        self.dispatch()
        self.quiesce()
        self.counters["calls"] += 1

    def encode_publish(self, events, k=None):
        """The events, and (their new attribute types, the call's k) for the log record."""
        if k is None:
            k = self.cfg.k
        elif isinstance(k, bool) or not isinstance(k, Integral) or k < 1:
            raise InvalidInput(f"publish: field 'k': must be an integer >= 1, got {k!r}")
        batch, pending = encode_events(events, self.attrs)
        return batch, (pending, int(k))

    def apply_publish(self, batch: EventBatch, pending_k, wait: bool, client):
        pending, k = pending_k
        with self.metrics.busy():
            self.attrs.commit(pending)
            n = len(batch)
            if wait:
                self._cut_group()
            if n:
                first = self.last_seq + 1
                self.last_seq += n
                self.published += n
                step = self.ccfg.batch_size
                for a in range(0, n, step):
                    part = batch.take(np.arange(a, min(n, a + step))) if n > step else batch
                    self.dispatch(part, np.arange(first + a, first + a + len(part), dtype=np.int64), k)
            return self._publish_result(n, wait, client)

    def topk(self, sub_id):
        raise InvalidInput("topk: a ranked-matching expression holds no standing top-k; publish returns "
                           "each event's top-k expressions (rc.Match)")

    def topk_many(self, sub_ids):
        return self.topk(None)

    # ------------------------------------------------------------------ steps
    def dispatch(self, events: EventBatch | None = None, seqs=None, k: int | None = None) -> None:
        while len(self.inflight) >= self.ccfg.max_in_flight:
            self.harvest(self.inflight.popleft())
        ops = {p: MatchOps.combine(o) for p, o in self.pending_ops.items()}
        self.pending_ops = {}
        j = self.step = self.step + 1
        P = len(self.parts)
        n_attrs = len(self.attrs)
        merged = None
        if events is not None and len(events) and self.policy.replicated:
            # each partition answers a run of the events from the whole table: sent from here
            # (no routing to do); each event's list is whole, the answers are laid end to end
            # at the harvest (concat_runs: no aggregator)
            rows = self.policy.event_runs(len(events))
            refs = [pt.process.remote(j, n_attrs, k, ops.get(p), (events.take(r), seqs[r], seqs[r]) if len(r) else None)
                    for p, (pt, r) in enumerate(zip(self.parts, rows))]
            merged = len(events)
            self.dispatched_pos = int(seqs[-1])
        elif events is not None and len(events):
            d = self.dists[j % len(self.dists)]
            if self.covering:
                outs = d.route_rows.options(num_returns=P + 1).remote(j, events, seqs)
                payloads, rows = outs[:P], outs[P]
            else:
                payloads = d.route.options(num_returns=P).remote(j, events, seqs, seqs)
                if P == 1:
                    payloads = [payloads]
            refs = [pt.process.remote(j, n_attrs, k, ops.get(p), payloads[p]) for p, pt in enumerate(self.parts)]
            agg = self.aggs[j % len(self.aggs)]
            if self.covering:
                merged = agg.merge_routed.remote(k, events.ids, rows, *refs)
            else:
                merged = agg.merge.remote(k, *refs)
            self.dispatched_pos = int(seqs[-1])
        else:
            refs = [pt.process.remote(j, n_attrs, 1, ops.get(p), None) for p, pt in enumerate(self.parts)]
        self.inflight.append((j, refs, merged, self.dispatched_pos))
        self.counters["steps"] += 1
        self.metrics.set("queue_depth", len(self.inflight))

    def harvest(self, entry) -> None:
        _, refs, merged, pos = entry
        with self.metrics.waiting():
            got = self.rt.get(refs)
            if isinstance(merged, int):     # replicate: the runs' answers (dispatch)
                self._results.append(answer_form(concat_runs(got, merged), self.diffs))
            elif merged is not None:
                self._results.append(self.rt.get(merged))
        self.applied_pos = max(self.applied_pos, pos)

    def quiesce(self) -> None:
        while self.inflight:
            self.harvest(self.inflight.popleft())
        self._settle_routing()
        self.metrics.set("queue_depth", 0)

    def emit(self) -> tuple:
        outs, self._results = self._results, []
        if not outs:
            return NO_UPDATES
        return concat_updates(outs)

    def _merge_deliveries(self, outs: list) -> tuple:
        """Events are not standing lists: diffs of several deliveries are laid end to end
        (an event id may come back in a later call), whole lists as before."""
        return concat_diffs(outs) if is_diff(outs[0]) else super()._merge_deliveries(outs)

    def _filter_delivery(self, arrays: tuple, ids: np.ndarray) -> tuple:
        """Ranked matching: the events whose top-k holds one of the expressions ``ids``."""
        if is_diff(arrays):
            return select_diff_runs(arrays, np.isin(arrays[2], ids))
        ev, off, eids, _ = arrays
        hit = np.isin(eids, ids)
        keep = np.add.reduceat(hit, off[:-1]) > 0 if len(eids) else np.zeros(len(ev), bool)
        keep &= np.diff(off) > 0
        return select_rows(arrays, keep)

    # ------------------------------------------------------------------ stats
    @guarded
    def stats(self) -> dict:
        self.quiesce()
        parts = self.rt.get([p.stats.remote() for p in self.parts])
        dists = self.rt.get([d.stats.remote() for d in self.dists])
        aggs = self.rt.get([a.stats.remote() for a in self.aggs])
        coord = self.metrics.snapshot()
        coord.update(self.counters)
        secs = self.counters["publish_seconds"]
        core_keys = ("sorted_accesses", "random_accesses", "nodes", "holes")
        # replicate: each event is answered by one partition
        routing, cov = self.policy.describe(), None
        reached = 1.0 if self.policy.replicated else float(len(self.parts))
        if self.covering:
            cov = covering_stats([d["covering"] for d in dists], len(self.live), len(self.parts))
            routing["events"] = "covering"
            reached = cov["partitions_reached_per_event"]
        return {
            "kind": "ranked-matching", "scoring": self.cfg.scoring, "index": self.cfg.index,
            "subscriptions": len(self.live), "published": self.published, "attributes": len(self.attrs),
            "policy": self.policy.name, "partitions": len(self.parts), "distributors": len(self.dists),
            "aggregators": len(self.aggs), "routing": routing,
            "partitions_reached_per_event": reached,
            "covering": cov,
            "throughput": self.published / secs if secs > 0 else 0.0,
            **{k: sum(p.get(f"core_{k}", 0) for p in parts) for k in core_keys},
            "busy_seconds": {"coordinator": coord["busy_seconds"],
                             "distributor": [d["busy_seconds"] for d in dists],
                             "partition": [p["busy_seconds"] for p in parts],
                             "aggregator": [a["busy_seconds"] for a in aggs]},
            "roles": {"coordinator": coord, "distributor": dists, "partition": parts, "aggregator": aggs},
            "delivery": {"position": self.last_seq + 1, "retained": len(self.deliveries),
                         "oldest_kept": self.evicted_upto + 1, "retention": self.ccfg.retention},
            "recovery": self._recovery_stats(),
            "placement": self._placement_stats(),
        }

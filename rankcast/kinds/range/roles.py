"""The range top-k kind on the roles (docs/architecture.md, "Roles per kind").

- subscription partition (:class:`RangePartition`): the subscriptions of its region of the
  (lo, hi) plane in a :class:`~rankcast.kinds.range.subscribers.SubscriberStore`, and a Paint
  server (:class:`~rankcast.kinds.range.server.RangeServer`) over the objects of its *span*,
  the x interval from the lowest ``lo`` to the highest ``hi`` of the subscriptions it was
  given. A subscription's top-k only holds objects of its range, so the partition is a
  :class:`~rankcast.RangeEngine` of its own subscriptions and the objects of its span: it
  turns its updates into messages, delivers them with the paper's protocol and answers the
  rows whose top-k changed in the step (their new lists), or under diffs
  (``ClusterConfig(updates="diff")``) the entries that left and entered them. Paint-Sparse
  snaps on, and Unicast enumerates, the partition's own subscriptions.
- placement (:class:`RangePolicy`): ``kd`` splits the (lo, hi) plane into one region per
  partition by a k-d split at the quantiles of the subscriptions (the fitting sample, else
  the first subscribe call), alternating lo and hi, like the location policy splits space;
  ``hash`` places by id (every span is then about the whole line: a comparison).
- routing (:func:`route_updates`, on the coordinator): an update goes to the partitions
  whose span holds the object's position before or after it: as it is where both do, as an
  insert where it enters the span, as a delete where it leaves it. The coordinator keeps
  every live object's position and value (:class:`ObjectPositions`, also its validation
  state); a partition whose span grows with new subscriptions is first sent the objects of
  the part it gains.

Every subscription lives in one partition, whose answers are the subscription's updates:
there is no distribution or aggregation role, and the partitions' Paint servers work in
parallel, each on the updates of its span. A publish call is one step whatever
``batch_size`` (Paint-Batch is per call, and a subscription is reported when its list after
the call differs from its list before it), so the updates of each call are the engine's; a
delivery of several pipelined calls keeps, per subscription, its latest list (diffs: the
calls' diffs composed into one per subscription, ``rankcast.common.diffs.compose_diffs``).
The messages are each partition's own (``stats()``: their sums): an update near the border
of two spans is painted in both.

Recovery: a partition snapshots its objects and its store (subscriptions and their lists);
a death rebuilds every role from the checkpoint and the coordinator replays the log (its
validation state, the live objects and the partitions' spans, is in its own checkpoint).
"""
from __future__ import annotations

import time
from numbers import Integral

import numpy as np

from rankcast.config import RANGE_POLICIES, RangeConfig
from rankcast.common.validation import check_ids_arg, shift_position
from rankcast.errors import InvalidInput, UnknownSubscription
from rankcast.common.idmap import IdMap
from .inputs import check_update_state, encode_subscriptions, encode_updates
from .server import RangeServer
from .subscribers import SubscriberStore
from rankcast.runtime.coordinator import NO_UPDATES, CoordinatorBase, guarded, latest_lists, concat_updates
from rankcast.runtime.kind import PlacementPolicy
from rankcast.runtime.metrics import RoleMetrics
from rankcast.runtime.recovery import Recoverable

__all__ = ["RANGE_POLICIES", "RangePolicy", "RangeRows", "RangePartition", "RangeCoordinator", "ObjectPositions",
           "route_updates"]


class RangeRows:
    """The columns of validated range subscriptions (what a subscribe call's log record holds)."""

    __slots__ = ("ids", "lo", "hi")

    def __init__(self, ids: np.ndarray, lo: np.ndarray, hi: np.ndarray):
        self.ids, self.lo, self.hi = ids, lo, hi

    def __len__(self) -> int:
        return len(self.ids)

    @staticmethod
    def concat(rows: list["RangeRows"]) -> "RangeRows":
        return RangeRows(np.concatenate([r.ids for r in rows]), np.concatenate([r.lo for r in rows]),
                         np.concatenate([r.hi for r in rows]))


# ----------------------------------------------------------------------------- placement

class RangePolicy(PlacementPolicy):
    """Regions of the (lo, hi) plane, one per partition (module docstring). A node of the
    k-d split is (axis, cut, left, right): a point goes left when its coordinate on ``axis``
    (0: lo, 1: hi) is below ``cut``; a child < 0 is the leaf of partition ``-child - 1``.

    Updates do not go everywhere: the coordinator sends each to the partitions whose span
    holds the object's position before or after it (:func:`route_updates`), so the policy
    itself does not broadcast."""

    def __init__(self, name: str, n_partitions: int):
        if name not in RANGE_POLICIES:
            raise ValueError(name)
        super().__init__(n_partitions)
        self.name = name
        self.fitted = name == "hash" or self.n_partitions == 1
        self.axis = np.zeros(0, np.int64)
        self.cut = np.zeros(0)
        self.left = np.zeros(0, np.int64)
        self.right = np.zeros(0, np.int64)

    def fit(self, lo: np.ndarray, hi: np.ndarray) -> "RangePolicy":
        """Split the sample points (lo, hi) into ``n_partitions`` regions of about equal counts."""
        if self.fitted or not len(lo):
            return self
        pts = np.stack([np.asarray(lo, np.float64), np.asarray(hi, np.float64)], axis=1)
        nodes: list[list] = []

        def build(sel: np.ndarray, first: int, count: int, depth: int) -> int:
            if count == 1:
                return -first - 1
            axis = depth % 2
            n_left = count // 2
            vals = pts[sel, axis]
            cut = float(np.quantile(vals, n_left / count)) if len(vals) else 0.0
            me = len(nodes)
            nodes.append([axis, cut, 0, 0])
            goes_left = vals < cut
            nodes[me][2] = build(sel[goes_left], first, n_left, depth + 1)
            nodes[me][3] = build(sel[~goes_left], first + n_left, count - n_left, depth + 1)
            return me

        build(np.arange(len(pts)), 0, self.n_partitions, 0)
        self.axis = np.array([n[0] for n in nodes], np.int64)
        self.cut = np.array([n[1] for n in nodes], np.float64)
        self.left = np.array([n[2] for n in nodes], np.int64)
        self.right = np.array([n[3] for n in nodes], np.int64)
        self.fitted = True
        return self

    def place(self, ids: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """The partition of every subscription (each lives in exactly one)."""
        if self.name == "hash" or not len(self.axis):
            return np.mod(ids, self.n_partitions).astype(np.int64)
        pts = np.stack([lo, hi], axis=1)
        node = np.zeros(len(ids), np.int64)
        inner = np.ones(len(ids), bool)
        while inner.any():
            r = np.flatnonzero(inner)
            v = node[r]
            go_left = pts[r, self.axis[v]] < self.cut[v]
            node[r] = np.where(go_left, self.left[v], self.right[v])
            inner[r] = node[r] >= 0
        return -node - 1

    def route_messages(self, msgs):
        raise NotImplementedError("range updates are routed by the coordinator to the partitions whose "
                                  "span they touch (route_updates of this module)")

    def describe(self) -> dict:
        return {"policy": self.name, "partitions": self.n_partitions, "fitted": bool(self.fitted),
                "splits": [{"axis": "lo" if a == 0 else "hi", "cut": c}
                           for a, c in zip(self.axis.tolist(), self.cut.tolist())],
                "updates": "to the partitions whose span holds the object before or after the update"}


def route_updates(x: np.ndarray, y: np.ndarray, old_x: np.ndarray, spans: np.ndarray) -> list:
    """What each partition takes of a call's updates (``x``: NaN where not given, ``y``: +inf
    to delete; ``old_x``: each object's position before the call, NaN where not live; the
    ids of one call are distinct): for partition p of span ``spans[p]`` = (lo, hi), closed,
    ``(rows, x, y)`` of the updates whose object lies in the span before or after it, or
    None. Where the object stays in the span the update goes as it is; where it enters, as
    an insert at its new position; where it leaves (or is deleted), as a delete."""
    new_x = np.where(np.isnan(x), old_x, x)
    stays = np.isfinite(y)
    out = []
    for a, b in spans.tolist():
        was = (old_x >= a) & (old_x <= b)                   # NaN compares False
        now = stays & (new_x >= a) & (new_x <= b)
        rows = np.flatnonzero(was | now)
        if not len(rows):
            out.append(None)
            continue
        w, n = was[rows], now[rows]
        px = np.where(n & ~w, new_x[rows], np.where(n, x[rows], np.nan))
        py = np.where(n, y[rows], np.inf)
        out.append((rows, px, py))
    return out


class ObjectPositions:
    """The live objects' positions and values, by id (the coordinator's validation state, and
    what a partition whose span grows is sent): an :class:`~rankcast.common.idmap.IdMap` from
    id to a slot of flat arrays; freed slots are taken again first."""

    def __init__(self):
        self.map = IdMap()
        self.ids = np.zeros(0, np.int64)
        self.x = np.zeros(0)
        self.y = np.zeros(0)
        self.live = np.zeros(0, bool)
        self.free = np.zeros(0, np.int64)

    def __len__(self) -> int:
        return len(self.map)

    def slots(self, ids: np.ndarray) -> np.ndarray:
        """The slot of each id, -1 where the object is not live."""
        return self.map.find(ids)

    def positions(self, slots: np.ndarray) -> np.ndarray:
        """The position of each slot's object, NaN for slot -1."""
        out = np.full(len(slots), np.nan)
        have = slots >= 0
        out[have] = self.x[slots[have]]
        return out

    def apply(self, ids: np.ndarray, x: np.ndarray, y: np.ndarray, slots: np.ndarray) -> None:
        """Apply a call's updates (distinct ids; ``slots`` from :meth:`slots`)."""
        gone = np.isinf(y)
        old = slots >= 0
        d = gone & old
        if d.any():
            s = slots[d]
            self.live[s] = False
            self.free = np.concatenate([self.free, s])
            self.map.delete(ids[d])
        u = ~gone & old
        if u.any():
            s = slots[u]
            self.y[s] = y[u]
            moved = ~np.isnan(x[u])
            self.x[s[moved]] = x[u][moved]
        new = np.flatnonzero(~gone & ~old)
        if len(new):
            take = min(len(new), len(self.free))
            s = np.empty(len(new), np.int64)
            s[:take] = self.free[len(self.free) - take:]
            self.free = self.free[:len(self.free) - take]
            if take < len(new):
                first = len(self.ids)
                grow = len(new) - take
                cap = max(2 * first, first + grow, 1024)
                for name in ("ids", "x", "y", "live"):
                    arr = getattr(self, name)
                    ext = np.zeros(cap, arr.dtype)
                    ext[:first] = arr
                    setattr(self, name, ext)
                self.free = np.arange(cap - 1, first + grow - 1, -1, dtype=np.int64)    # (all others taken)
                s[take:] = np.arange(first, first + grow)
            self.ids[s], self.x[s], self.y[s], self.live[s] = ids[new], x[new], y[new], True
            self.map.put(ids[new], s)

    def between(self, a: float, b: float, a0: float, b0: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ids, x, y) of the live objects in [a, b] and not in [a0, b0]: what a span that grew
        from [a0, b0] to [a, b] gains."""
        x = self.x
        sel = self.live & (x >= a) & (x <= b) & ~((x >= a0) & (x <= b0))
        return self.ids[sel], x[sel], self.y[sel]


# ----------------------------------------------------------------------------- roles

def _warm_range(cfg: RangeConfig) -> None:
    """Run every kernel of the kind once on a toy workload (loads them from numba's cache)."""
    for method in ("paint-dense", "paint-sparse", "unicast"):
        for mode in ("online", "batch"):
            srv = RangeServer(2, method, 0.0, mode)
            store = SubscriberStore(2, cfg.leaf_size)
            sid, lo, hi = np.arange(3, dtype=np.int64), np.array([0.0, 1.0, 0.0]), np.array([2.0, 3.0, 3.0])
            store.add(sid, lo, hi, *srv.topk(lo, hi))
            srv.set_subscriptions(store.points)
            for ids, x, y in ((np.array([1, 2, 3]), np.array([0.5, 1.5, 2.5]), np.array([3.0, 1.0, 2.0])),
                              (np.array([2, 3]), np.array([np.nan, 0.2]), np.array([np.inf, 0.5]))):
                m = srv.process(ids, x, y)
                store.deliver(m.f, m.i)


class RangePartition(Recoverable):
    """The subscriptions of one region, their top-k lists, and the Paint server over the
    objects of the region's span (module docstring)."""

    def __init__(self, cfg: RangeConfig, index: int, cluster: str = "rankcast", export_metrics: bool = True,
                 delay: float = 0.0, seed: int = 0, diff: bool = False, resume=None):
        self.cfg = cfg
        self.index = index
        self.diff = bool(diff)          # answer diffs, not lists (ClusterConfig.updates)
        self.server = RangeServer(cfg.k, cfg.method, cfg.epsilon, "batch" if cfg.batch else "online")
        self.store = SubscriberStore(cfg.k, cfg.leaf_size)
        self.step = 0
        self.totals = {"updates": 0, "objects_gained": 0, "messages_generated": 0, "bytes_generated": 0,
                       "messages_delivered": 0, "messages_received": 0}
        self.metrics = RoleMetrics("partition", index, cluster, export_metrics)
        self._delay = float(delay)
        self._rng = np.random.default_rng(seed + 104729 * index + 1)
        self._resume(resume)

    def _state(self) -> dict:
        return {"server": self.server.state(), "store": self.store.state(), "step": self.step,
                "totals": dict(self.totals)}

    def _restore(self, st: dict) -> None:
        self.server.restore(st["server"])
        self.store = SubscriberStore.from_state(st["store"], self.cfg.k, self.cfg.leaf_size)
        self.step, self.totals = st["step"], dict(st["totals"])
        self._share()

    def _warm(self) -> None:
        _warm_range(self.cfg)

    def _share(self) -> None:
        """Paint-Sparse and Unicast know the partition's subscriptions; Paint-Dense does not."""
        self.server.set_subscriptions(self.store.points if self.cfg.method != "paint-dense" else None)

    def _paint(self, ids, x, y, counted: str = "updates"):
        """The server's messages for the updates, delivered: the changed rows (or diff columns)."""
        msgs = self.server.process(ids, x, y)
        rows, recv, _ = self.store.deliver(msgs.f, msgs.i, diff=self.diff)
        t = self.totals
        t[counted] += len(ids)
        t["messages_generated"] += len(msgs)
        t["bytes_generated"] += msgs.nbytes_on_wire
        t["messages_delivered"] += int(np.count_nonzero(recv))
        t["messages_received"] += int(recv.sum())
        return rows

    def process(self, step: int, payload):
        """Step ``step``: ``payload`` is None (nothing for this partition), ("add", ids, lo, hi,
        objects) (new subscriptions, after the objects ``(ids, x, y)`` their span gains),
        ("remove", ids) or ("pub", ids, x, y); returns, for a publish, the update arrays
        (sub_ids, offsets, object_ids, y) of the rows whose list changed, or under diffs
        their diff arrays (sub ids, rank, object ids, y, sign), else None."""
        if self._delay:
            time.sleep(self._rng.random() * self._delay)
        with self.metrics.busy(step_histogram=True):
            if step != self.step + 1:
                raise RuntimeError(f"range partition {self.index}: step {step} after {self.step}")
            self.step = step
            if payload is None:
                return None
            s = self.store
            kind = payload[0]
            if kind == "add":
                _, ids, lo, hi, objs = payload
                if objs is not None and len(objs[0]):
                    # outside every range the partition holds: no list changes
                    self._paint(*objs, counted="objects_gained")
                s.add(ids, lo, hi, *self.server.topk(lo, hi))
                self._share()
                return None
            if kind == "remove":
                s.remove(payload[1])
                self._share()
                return None
            rows = self._paint(*payload[1:])
            self.metrics.inc("messages", len(payload[1]))
            if self.diff:               # the diff columns, made as the lists were changed
                return rows if len(rows[0]) else None
            if not len(rows):
                return None
            n = s.topn[rows]
            off = np.zeros(len(rows) + 1, np.int64)
            np.cumsum(n, out=off[1:])
            col = np.arange(int(off[-1])) - np.repeat(off[:-1], n)
            r = np.repeat(np.arange(len(rows)), n)
            ids, ys = s.lists(rows)
            return s.sid[rows], off, ids[r, col], ys[r, col]

    def topk_many(self, ids: list[int]) -> dict[int, list[tuple[int, float]]]:
        rows = self.store.rows(np.asarray(ids, np.int64))
        return {i: self.store.topk(int(r)) for i, r in zip(ids, rows.tolist()) if r >= 0}

    def stats(self) -> dict:
        out = self.metrics.snapshot()
        out.update(index=self.index, subscriptions=len(self.store), **self.totals, **self.server.stats())
        return out


# ----------------------------------------------------------------------------- coordinator

class RangeCoordinator(CoordinatorBase):
    """The range top-k kind on the shared coordinator: it validates every call (the live
    subscriptions and objects are its state), places new subscriptions by the policy, and
    cuts every call into one step of the partitions, each sent the updates of its span
    (:func:`route_updates`). The stream position counts object updates published."""

    KIND_STATE = ("objs", "spans")
    ITEM = "range subscription"

    def init_kind(self, sample) -> None:
        self.objs = ObjectPositions()       # the live objects
        # each partition's span: the x interval of the subscriptions placed in it (empty: +inf, -inf)
        self.spans = np.tile([np.inf, -np.inf], (self.ccfg.partitions, 1))
        self.policy = RangePolicy(self.ccfg.policy, self.ccfg.partitions)
        if sample is not None:
            subs = sample[0] if isinstance(sample, tuple) else sample
            ids, lo, hi = encode_subscriptions(subs)
            self.policy.fit(lo, hi)
        self.reset_transient()

    def reset_transient(self) -> None:
        self._results: list[tuple] = []     # update arrays of each publish step harvested
        self._subs_pending: list[list] = []  # each placed call's payload per partition

    def role_groups(self):
        return [("partition", self.parts)]

    def snapshot_groups(self):
        return [("partition", self.parts)]

    def build_roles(self, ckpt, reuse=None) -> None:
        ccfg, cfg, opts = self.ccfg, self.rt.share(self.cfg), self.ccfg.options
        name, export = ccfg.name, self._export
        delay, seed = float(opts.get("delay", 0.0)), int(opts.get("seed", 0))
        make, finish = self._role_maker(ckpt, reuse)
        P = self.policy.n_partitions
        self.parts = [make("partition", RangePartition, p, cfg, p, name, export, delay, seed, self.diffs)
                      for p in range(P)]
        finish()

    @guarded
    def warm(self) -> dict[str, list[int]]:
        """The roles' kernels, and the coordinator's object lookups, loaded now (not in the
        first publish call)."""
        probe = ObjectPositions()
        one = np.zeros(1, np.int64)
        probe.apply(one, np.zeros(1), np.zeros(1), probe.slots(one))
        probe.apply(one, np.full(1, np.nan), np.full(1, np.inf), probe.slots(one))
        return super().warm()

    # validation and encoding: nothing is encoded against a dictionary (the defaults of
    # commit_encoding, mark_encoding and rollback_encoding)
    def encode_subscriptions(self, subs):
        return RangeRows(*encode_subscriptions(subs)), None

    # ------------------------------------------------------------------ calls
    def place(self, batch: RangeRows) -> None:
        if not self.policy.fitted:
            self.policy.fit(batch.lo, batch.hi)        # the first subscriptions fit the regions
        parts = self.policy.place(batch.ids, batch.lo, batch.hi)
        self.live.update(zip(batch.ids.tolist(), parts.tolist()))
        out: list = [None] * len(self.spans)
        for p in np.unique(parts).tolist():
            s = parts == p
            a0, b0 = self.spans[p]
            a, b = min(a0, float(batch.lo[s].min())), max(b0, float(batch.hi[s].max()))
            gained = self.objs.between(a, b, a0, b0) if (a, b) != (a0, b0) else None
            self.spans[p] = a, b
            out[p] = ("add", batch.ids[s], batch.lo[s], batch.hi[s], gained)
        self._subs_pending.append(out)

    def baseline(self, ids) -> None:
        """Initial lists are not updates (as in RangeEngine.subscribe)."""

    def apply_unsubscribe(self, arr: np.ndarray) -> None:
        self._cut_group()
        parts = np.fromiter((self.live[i] for i in arr.tolist()), np.int64, len(arr))
        for i in arr.tolist():
            del self.live[i]
        out: list = [None] * len(self.spans)
        for p in np.unique(parts).tolist():
            out[p] = ("remove", arr[parts == p])
        self.dispatch(out)
        self.quiesce()
        self.counters["calls"] += 1

    def encode_publish(self, objs):
        ids, x, y = encode_updates(objs)
        check_update_state(ids, x, y, self.objs.slots(ids) >= 0)
        return (ids, x, y), None

    def encode_publish_parts(self, parts: list) -> list:
        """Consecutive publish calls checked together: an id is live in a call when the calls
        before it left it live (a new object, then an update of it, is valid)."""
        out, offset = [], 0
        after: dict[int, bool] = {}       # id -> live after the calls so far
        for items in parts:
            try:
                ids, x, y = encode_updates(items)
                live = self.objs.slots(ids) >= 0
                if after:
                    live = np.fromiter((after.get(i, v) for i, v in zip(ids.tolist(), live.tolist())),
                                       np.bool_, len(ids))
                check_update_state(ids, x, y, live)
            except InvalidInput as e:
                raise shift_position(e, offset) from None
            after.update(zip(ids.tolist(), np.isfinite(y).tolist()))
            out.append(((ids, x, y), None))
            offset += len(ids)
        return out

    def apply_publish(self, batch: tuple, _extra, wait: bool, client):
        ids, x, y = batch
        with self.metrics.busy():
            slots = self.objs.slots(ids)
            routed = route_updates(x, y, self.objs.positions(slots), self.spans)
            self.objs.apply(ids, x, y, slots)
            n = len(ids)
            if wait:
                self._cut_group()
            if n:
                self.last_seq += n
                self.published += n
                self.dispatch([None if r is None else ("pub", ids[r[0]], r[1], r[2]) for r in routed],
                              pos=self.last_seq)
                self.metrics.inc("tuples_out", sum(len(r[0]) for r in routed if r is not None))
            return self._publish_result(n, wait, client)

    @guarded
    def topk(self, sub_id) -> list[tuple[int, float]]:
        arr = check_ids_arg(sub_id)
        if len(arr) != 1:
            raise InvalidInput("topk: expected one subscription id")
        return self.topk_many([int(arr[0])])[int(arr[0])]

    @guarded
    def topk_many(self, sub_ids) -> dict[int, list[tuple[int, float]]]:
        ids = [int(i) for i in sub_ids]
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, Integral) or i not in self.live:
                raise UnknownSubscription(f"unknown range subscription id={i!r}")
        self.quiesce()
        groups: dict[int, list[int]] = {}
        for i in ids:
            groups.setdefault(self.live[i], []).append(i)
        out: dict = {}
        for d in self.rt.get([self.parts[p].topk_many.remote(g) for p, g in groups.items()]):
            out.update(d)
        return {i: out[i] for i in ids}

    # ------------------------------------------------------------------ steps
    def dispatch(self, payloads: list | None = None, pos: int | None = None) -> None:
        """Submit one step: every partition's call with its payload (None: the placed
        subscriptions waiting, a step for each placed call)."""
        if payloads is None:
            pending, self._subs_pending = self._subs_pending, []
            for out in pending:
                self.dispatch(out)
            return
        while len(self.inflight) >= self.ccfg.max_in_flight:
            self.harvest(self.inflight.popleft())
        j = self.step = self.step + 1
        refs = [pt.process.remote(j, payloads[p]) for p, pt in enumerate(self.parts)]
        if pos is not None:
            self.dispatched_pos = pos
        publish = any(x is not None and x[0] == "pub" for x in payloads)
        self.inflight.append((j, refs, publish, self.dispatched_pos))
        self.counters["steps"] += 1
        self.metrics.set("queue_depth", len(self.inflight))

    def harvest(self, entry) -> None:
        _, refs, publish, pos = entry
        with self.metrics.waiting():
            outs = self.rt.get(refs)
        outs = [o for o in outs if o is not None]
        if publish and outs:
            self._results.append(concat_updates(outs))
        self.applied_pos = max(self.applied_pos, pos)

    def emit(self) -> tuple:
        outs, self._results = self._results, []
        if not outs:
            return NO_UPDATES
        return outs[0] if len(outs) == 1 else latest_lists(outs)

    # ------------------------------------------------------------------ stats
    @guarded
    def stats(self) -> dict:
        self.quiesce()
        parts = self.rt.get([p.stats.remote() for p in self.parts])
        coord = self.metrics.snapshot()
        coord.update(self.counters)
        secs = self.counters["publish_seconds"]
        per = max(self.published, 1)
        total = {key: sum(p[key] for p in parts) for key in
                 ("updates", "messages_generated", "bytes_generated", "messages_delivered", "messages_received")}
        return {
            "kind": "range-topk", "method": self.cfg.method, "epsilon": self.cfg.epsilon, "batch": self.cfg.batch,
            "k": self.cfg.k, "subscriptions": len(self.live), "objects": len(self.objs),
            "published": self.published, "policy": self.policy.name, "partitions": len(self.parts),
            "distributors": 0, "aggregators": 0, "routing": self.policy.describe(),
            "spans": self.spans.tolist(),
            "updates_routed": total["updates"], "messages_generated": total["messages_generated"],
            "messages_received": total["messages_received"], "bytes_generated": total["bytes_generated"],
            "partitions_reached_per_update": total["updates"] / per,
            "generated_per_update": total["messages_generated"] / per,
            "received_per_update": total["messages_received"] / per,
            "throughput": self.published / secs if secs > 0 else 0.0,
            "busy_seconds": {"coordinator": coord["busy_seconds"], "partition": [p["busy_seconds"] for p in parts]},
            "roles": {"coordinator": coord, "partition": parts},
            "delivery": {"position": self.last_seq + 1, "retained": len(self.deliveries),
                         "oldest_kept": self.evicted_upto + 1, "retention": self.ccfg.retention},
            "recovery": self._recovery_stats(),
            "placement": self._placement_stats(),
        }

"""The range top-k kind on the roles (docs/architecture.md, "Roles per kind").

- distribution and window role (:class:`RangeServerRole`, reported as the ``distributor``):
  the objects and the Paint server (:class:`~rankcast.kinds.range.server.RangeServer`). A
  publish step turns the call's object updates into its message batch (each message a box
  of (lo, hi) subscription space, or a unicast message naming one subscription) and sends
  each message to the partitions it can reach: a box to every partition whose
  subscriptions' bounding box it meets (the paper's content-based network), a unicast
  message to its subscription's partition. A subscribe step computes the new
  subscriptions' initial top-k from the objects. It knows the subscription points (ids,
  lo, hi and partition): Paint-Sparse snaps on them and Unicast enumerates them, as in
  :class:`~rankcast.RangeEngine`; Paint-Dense's messages do not depend on them.
- subscription partition (:class:`RangePartition`): a
  :class:`~rankcast.kinds.range.subscribers.SubscriberStore` over the subscriptions of its
  region of the (lo, hi) plane; it delivers its messages in batch order with the paper's
  protocol and answers the rows whose top-k changed in the step (their new lists), or under
  diffs (``ClusterConfig(updates="diff")``) the entries that left and entered them, written
  by the subscriber kernels as they change the lists.
- placement (:class:`RangePolicy`): ``kd`` splits the (lo, hi) plane into one region per
  partition by a k-d split at the quantiles of the subscriptions (the fitting sample, else
  the first subscribe call), alternating lo and hi, like the location policy splits space;
  ``hash`` places by id (every region is then the whole plane: a comparison).

Every subscription lives in one partition, whose answers are the subscription's updates:
there is no aggregation role. A publish call is one step whatever ``batch_size``
(Paint-Batch is per call, and a subscription is reported when its list after the call
differs from its list before it), so the updates of each call are the engine's; a
delivery of several pipelined calls keeps, per subscription, its latest list (diffs: the
calls' diffs composed into one per subscription, ``rankcast.common.diffs.compose_diffs``).

Recovery: the server snapshots its objects and subscription points, a partition its store
(subscriptions and their lists); a death rebuilds every role from the checkpoint and the
coordinator replays the log (its validation state, the live objects, is in its own
checkpoint).
"""
from __future__ import annotations

import time
from numbers import Integral

import numpy as np

from rankcast.config import RANGE_POLICIES, RangeConfig
from rankcast.common.validation import check_ids_arg, shift_position
from rankcast.errors import InvalidInput, UnknownSubscription
from rankcast.common.idmap import IdMap, _get
from .inputs import check_update_state, encode_subscriptions, encode_updates
from .points import PointIndex
from .server import RangeServer
from .subscribers import SubscriberStore
from rankcast.runtime.coordinator import NO_UPDATES, CoordinatorBase, guarded, latest_lists, concat_updates
from rankcast.runtime.kind import PlacementPolicy
from rankcast.runtime.metrics import RoleMetrics
from rankcast.runtime.recovery import Recoverable

__all__ = ["RANGE_POLICIES", "RangePolicy", "RangeRows", "RangeServerRole", "RangePartition", "RangeCoordinator",
           "route_messages"]


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

    Messages do not go everywhere: the server role sends each one to the partitions whose
    subscriptions' bounding box its box meets (:func:`route_messages`), from the boxes it
    keeps, so the policy itself does not broadcast."""

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
        raise NotImplementedError("range messages are routed by the server role from the "
                                  "partitions' bounding boxes (route_messages of this module)")

    def describe(self) -> dict:
        return {"policy": self.name, "partitions": self.n_partitions, "fitted": bool(self.fitted),
                "splits": [{"axis": "lo" if a == 0 else "hi", "cut": c}
                           for a, c in zip(self.axis.tolist(), self.cut.tolist())],
                "messages": "to the partitions whose subscriptions' bounding box the message box meets"}


def route_messages(f: np.ndarray, i: np.ndarray, bbox: np.ndarray, target_part: np.ndarray) -> np.ndarray:
    """bool[n, P]: which partitions each message goes to. ``bbox[p]`` = (lo min, lo max, hi
    min, hi max) of partition p's subscriptions (empty: +inf, -inf, +inf, -inf); a box
    [l0, l1] x [r0, r1] reaches p when it meets that box; a unicast message (``i[:, 2] >= 0``)
    reaches its subscription's partition ``target_part`` (given for those rows)."""
    n, P = len(i), len(bbox)
    if not n:
        return np.zeros((0, P), bool)
    uni = i[:, 2] >= 0
    hit = ((f[:, 0:1] <= bbox[None, :, 1]) & (f[:, 1:2] >= bbox[None, :, 0])
           & (f[:, 2:3] <= bbox[None, :, 3]) & (f[:, 3:4] >= bbox[None, :, 2]))
    if uni.any():
        hit[uni] = False
        hit[np.flatnonzero(uni), target_part[uni]] = True
    return hit


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


class RangeServerRole(Recoverable):
    """The objects and the Paint server; routes each step's messages (module docstring)."""

    def __init__(self, cfg: RangeConfig, n_partitions: int, index: int = 0, cluster: str = "rankcast",
                 export_metrics: bool = True, delay: float = 0.0, seed: int = 0, resume=None):
        self.cfg = cfg
        self.index = index
        self.n_partitions = int(n_partitions)
        self.server = RangeServer(cfg.k, cfg.method, cfg.epsilon, "batch" if cfg.batch else "online")
        # the subscription points, by subscription id
        self.sid = np.zeros(0, np.int64)
        self.lo = np.zeros(0)
        self.hi = np.zeros(0)
        self.part = np.zeros(0, np.int64)
        self.step = 0
        self.totals = {"updates": 0, "messages_generated": 0, "messages_sent": 0, "bytes_generated": 0}
        self.metrics = RoleMetrics("distributor", index, cluster, export_metrics)
        self._delay = float(delay)
        self._rng = np.random.default_rng(seed + 31 * index + 2)
        self._derive()
        self._resume(resume)

    # ------------------------------------------------------------------ state
    def _state(self) -> dict:
        return {"server": self.server.state(), "sid": self.sid, "lo": self.lo, "hi": self.hi, "part": self.part,
                "step": self.step, "totals": dict(self.totals)}

    def _restore(self, st: dict) -> None:
        self.server.restore(st["server"])
        self.sid, self.lo, self.hi, self.part = st["sid"], st["lo"], st["hi"], st["part"]
        self.step, self.totals = st["step"], dict(st["totals"])
        self._derive()

    def _derive(self) -> None:
        """The routing boxes of the partitions and the server's view of the subscriptions."""
        P = self.n_partitions
        bbox = np.empty((P, 4))
        bbox[:, 0::2] = np.inf
        bbox[:, 1::2] = -np.inf
        if len(self.sid):
            np.minimum.at(bbox[:, 0], self.part, self.lo)
            np.maximum.at(bbox[:, 1], self.part, self.lo)
            np.minimum.at(bbox[:, 2], self.part, self.hi)
            np.maximum.at(bbox[:, 3], self.part, self.hi)
        self.bbox = bbox
        if self.cfg.method != "paint-dense":
            self.server.set_subscriptions(PointIndex(self.lo, self.hi, self.sid, self.cfg.leaf_size))

    def _warm(self) -> None:
        _warm_range(self.cfg)

    # ------------------------------------------------------------------ the step
    def _out(self, payloads: list):
        return payloads if len(payloads) > 1 else payloads[0]   # num_returns=1: the value itself

    def step_call(self, step: int, op: tuple):
        """Step ``step``: ``op`` is ("sub", ids, lo, hi, parts), ("unsub", ids) or ("pub", ids,
        x, y); returns one payload per partition (None: nothing for it)."""
        if self._delay:
            time.sleep(self._rng.random() * self._delay)
        with self.metrics.busy(step_histogram=True):
            if step != self.step + 1:
                raise RuntimeError(f"range server: step {step} after {self.step}")
            self.step = step
            P = self.n_partitions
            out: list = [None] * P
            kind = op[0]
            if kind == "sub":
                _, ids, lo, hi, parts = op
                top_id, top_y, cnt = self.server.topk(lo, hi)
                for p in np.unique(parts).tolist():
                    s = parts == p
                    out[p] = ("add", ids[s], lo[s], hi[s], top_id[s], top_y[s], cnt[s])
                self._set_points(np.concatenate([self.sid, ids]), np.concatenate([self.lo, lo]),
                                 np.concatenate([self.hi, hi]), np.concatenate([self.part, parts]))
            elif kind == "unsub":
                ids = op[1]
                rows = np.searchsorted(self.sid, ids)
                parts = self.part[rows]
                for p in np.unique(parts).tolist():
                    out[p] = ("remove", ids[parts == p])
                keep = np.ones(len(self.sid), bool)
                keep[rows] = False
                self._set_points(self.sid[keep], self.lo[keep], self.hi[keep], self.part[keep])
            else:
                _, ids, x, y = op
                msgs = self.server.process(ids, x, y)
                f, i = msgs.f, msgs.i
                target = np.zeros(len(i), np.int64)
                uni = i[:, 2] >= 0 if len(i) else np.zeros(0, bool)
                if uni.any():
                    target[uni] = self.part[np.searchsorted(self.sid, i[uni, 2])]
                hit = route_messages(f, i, self.bbox, target)
                for p in range(P):
                    rows = np.flatnonzero(hit[:, p])
                    if len(rows):
                        out[p] = ("msgs", f[rows], i[rows])
                t = self.totals
                t["updates"] += len(ids)
                t["messages_generated"] += len(i)
                t["messages_sent"] += int(hit.sum())
                t["bytes_generated"] += msgs.nbytes_on_wire
                self.metrics.inc("messages", len(ids))
                self.metrics.inc("tuples_out", int(hit.sum()))
        return self._out(out)

    def _set_points(self, sid, lo, hi, part) -> None:
        order = np.argsort(sid, kind="stable")
        self.sid, self.lo, self.hi, self.part = sid[order], lo[order], hi[order], part[order]
        self._derive()

    def stats(self) -> dict:
        out = self.metrics.snapshot()
        out.update(index=self.index, subscriptions=len(self.sid), **self.totals, **self.server.stats(),
                   partition_boxes=self.bbox.tolist())
        return out


class RangePartition(Recoverable):
    """The subscriptions of one region and their top-k lists (module docstring)."""

    def __init__(self, cfg: RangeConfig, index: int, cluster: str = "rankcast", export_metrics: bool = True,
                 delay: float = 0.0, seed: int = 0, diff: bool = False, resume=None):
        self.cfg = cfg
        self.index = index
        self.diff = bool(diff)          # answer diffs, not lists (ClusterConfig.updates)
        self.store = SubscriberStore(cfg.k, cfg.leaf_size)
        self.step = 0
        self.totals = {"messages": 0, "messages_delivered": 0, "messages_received": 0}
        self.metrics = RoleMetrics("partition", index, cluster, export_metrics)
        self._delay = float(delay)
        self._rng = np.random.default_rng(seed + 104729 * index + 1)
        self._resume(resume)

    def _state(self) -> dict:
        return {"store": self.store.state(), "step": self.step, "totals": dict(self.totals)}

    def _restore(self, st: dict) -> None:
        self.store = SubscriberStore.from_state(st["store"], self.cfg.k, self.cfg.leaf_size)
        self.step, self.totals = st["step"], dict(st["totals"])

    def _warm(self) -> None:
        _warm_range(self.cfg)

    def process(self, step: int, payload):
        """Step ``step``: add or remove subscriptions, or deliver messages; returns the update
        arrays (sub_ids, offsets, object_ids, y) of the rows whose list changed, or under
        diffs their diff arrays (sub ids, rank, object ids, y, sign), or None."""
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
                _, ids, lo, hi, top_id, top_y, cnt = payload
                s.add(ids, lo, hi, top_id, top_y, cnt)
                return None
            if kind == "remove":
                s.remove(payload[1])
                return None
            _, f, i = payload
            rows, recv, _ = s.deliver(f, i, diff=self.diff)
            t = self.totals
            t["messages"] += len(i)
            t["messages_delivered"] += int(np.count_nonzero(recv))
            t["messages_received"] += int(recv.sum())
            self.metrics.inc("messages", len(i))
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
        out.update(index=self.index, subscriptions=len(self.store), **self.totals)
        return out


# ----------------------------------------------------------------------------- coordinator

class RangeCoordinator(CoordinatorBase):
    """The range top-k kind on the shared coordinator: it validates every call (the live
    subscriptions and objects are its state), places new subscriptions by the policy and
    cuts every call into one step: the server's, then every partition's. The stream
    position counts object updates published."""

    KIND_STATE = ("objs",)
    ITEM = "range subscription"

    def init_kind(self, sample) -> None:
        self.objs = IdMap()                 # live object ids
        self.policy = RangePolicy(self.ccfg.policy, self.ccfg.partitions)
        if sample is not None:
            subs = sample[0] if isinstance(sample, tuple) else sample
            ids, lo, hi = encode_subscriptions(subs)
            self.policy.fit(lo, hi)
        self.reset_transient()

    def reset_transient(self) -> None:
        self._results: list[tuple] = []     # update arrays of each publish step harvested
        self._subs_pending: list[tuple] = []

    def role_groups(self):
        return [("distributor", self.servers), ("partition", self.parts)]

    def snapshot_groups(self):
        return [("distributor", self.servers), ("partition", self.parts)]

    def build_roles(self, ckpt, reuse=None) -> None:
        ccfg, cfg, opts = self.ccfg, self.rt.share(self.cfg), self.ccfg.options
        name, export = ccfg.name, self._export
        delay, seed = float(opts.get("delay", 0.0)), int(opts.get("seed", 0))
        make, finish = self._role_maker(ckpt, reuse)
        P = self.policy.n_partitions
        self.parts = [make("partition", RangePartition, p, cfg, p, name, export, delay, seed, self.diffs)
                      for p in range(P)]
        self.servers = [make("distributor", RangeServerRole, 0, cfg, P, 0, name, export, delay, seed)]
        finish()

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
        self._subs_pending.append(("sub", batch.ids, batch.lo, batch.hi, parts))

    def baseline(self, ids) -> None:
        """Initial lists are not updates (as in RangeEngine.subscribe)."""

    def apply_unsubscribe(self, arr: np.ndarray) -> None:
        self._cut_group()
        for i in arr.tolist():
            del self.live[i]
        self.dispatch(("unsub", np.sort(arr)))
        self.quiesce()
        self.counters["calls"] += 1

    def encode_publish(self, objs):
        ids, x, y = encode_updates(objs)
        out = np.empty(len(ids), np.int64)
        m = self.objs
        _get(m.state, m.keys, m.vals, ids, out)
        check_update_state(ids, x, y, out >= 0)
        return (ids, x, y), None

    def encode_publish_parts(self, parts: list) -> list:
        """Consecutive publish calls checked together: an id is live in a call when the calls
        before it left it live (a new object, then an update of it, is valid)."""
        out, offset = [], 0
        after: dict[int, bool] = {}       # id -> live after the calls so far
        m = self.objs
        for items in parts:
            try:
                ids, x, y = encode_updates(items)
                got = np.empty(len(ids), np.int64)
                _get(m.state, m.keys, m.vals, ids, got)
                live = got >= 0
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
            gone = np.isinf(y)
            if gone.any():
                self.objs.delete(ids[gone])
            if not gone.all():
                self.objs.put(ids[~gone], np.ones(int((~gone).sum()), np.int64))
            n = len(ids)
            if wait:
                self._cut_group()
            if n:
                self.last_seq += n
                self.published += n
                self.dispatch(("pub", ids, x, y), pos=self.last_seq)
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
    def dispatch(self, op: tuple | None = None, pos: int | None = None) -> None:
        """Submit one step: the server's call, then every partition's with its payload."""
        if op is None:
            if not self._subs_pending:
                return
            subs, self._subs_pending = self._subs_pending, []
            op = subs[0] if len(subs) == 1 else ("sub", *(np.concatenate([s[c] for s in subs]) for c in range(1, 5)))
        while len(self.inflight) >= self.ccfg.max_in_flight:
            self.harvest(self.inflight.popleft())
        j = self.step = self.step + 1
        P = len(self.parts)
        payloads = self.servers[0].step_call.options(num_returns=P).remote(j, op)
        if P == 1:
            payloads = [payloads]
        refs = [pt.process.remote(j, payloads[p]) for p, pt in enumerate(self.parts)]
        if pos is not None:
            self.dispatched_pos = pos
        self.inflight.append((j, refs, op[0] == "pub", self.dispatched_pos))
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
        srv = self.rt.get(self.servers[0].stats.remote())
        coord = self.metrics.snapshot()
        coord.update(self.counters)
        secs = self.counters["publish_seconds"]
        per = max(srv["updates"], 1)
        recv = sum(p["messages_received"] for p in parts)
        got = sum(p["messages"] for p in parts)
        return {
            "kind": "range-topk", "method": self.cfg.method, "epsilon": self.cfg.epsilon, "batch": self.cfg.batch,
            "k": self.cfg.k, "subscriptions": len(self.live), "objects": srv["objects"],
            "published": self.published, "policy": self.policy.name, "partitions": len(self.parts),
            "distributors": 1, "aggregators": 0, "routing": self.policy.describe(),
            "messages_generated": srv["messages_generated"], "messages_sent": srv["messages_sent"],
            "messages_received": recv, "bytes_generated": srv["bytes_generated"],
            "generated_per_update": srv["messages_generated"] / per,
            "partitions_reached_per_message": srv["messages_sent"] / max(srv["messages_generated"], 1),
            "partitions_reached_per_update": srv["messages_sent"] / per,
            "partition_messages_per_update": got / per,
            "received_per_update": recv / per,
            "throughput": self.published / secs if secs > 0 else 0.0,
            "busy_seconds": {"coordinator": coord["busy_seconds"], "distributor": [srv["busy_seconds"]],
                             "partition": [p["busy_seconds"] for p in parts]},
            "roles": {"coordinator": coord, "distributor": [srv], "partition": parts},
            "delivery": {"position": self.last_seq + 1, "retained": len(self.deliveries),
                         "oldest_kept": self.evicted_upto + 1, "retention": self.ccfg.retention},
            "recovery": self._recovery_stats(),
            "placement": self._placement_stats(),
        }

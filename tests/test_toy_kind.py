"""A sixth kind written in this module alone, run by the shared runtime: the Kind interface
(rankcast.runtime.kind) and one registry line are all it needs.

The toy kind: top-k of messages by a numeric field. A subscription is (id, k, min); a
message is (id, value); a subscription holds the k messages of largest value among those
published with value >= min (equal values: the smaller message id first). It has a config
class, a single-process engine (its brute-force core), one partition role and a coordinator
implementing KindCoordinator. On a real Ray cluster with durable state, a partition is
SIGKILLed between calls and during one; every answer and every topk equal a recomputation
from scratch after every call, and a listener in another handle receives every delivery
once, in stream order."""
from __future__ import annotations

import math
import os
import signal
import threading
import time
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
import pyarrow as pa
import pytest

import rankcast as rc
from rankcast.common.validation import check_ids_arg, item_error
from rankcast.runtime import registry
from rankcast.runtime.coordinator import NO_UPDATES, CoordinatorBase, concat_updates, guarded, latest_lists
from rankcast.runtime.metrics import RoleMetrics
from rankcast.runtime.recovery import Recoverable


# ----------------------------------------------------------------------------- the kind

@dataclass(frozen=True)
class ToyConfig:
    """The toy kind's engine config: the largest k a subscription may ask for."""

    k_max: int = 50

    def __post_init__(self):
        if isinstance(self.k_max, bool) or not isinstance(self.k_max, int) or self.k_max < 1:
            raise rc.InvalidInput(f"ToyConfig: field 'k_max': must be an integer >= 1, got {self.k_max!r}")


class ToySubs:
    """Validated subscriptions: ids, k and min as columns."""

    def __init__(self, ids, k, lo):
        self.ids, self.k, self.lo = np.asarray(ids, np.int64), np.asarray(k, np.int64), np.asarray(lo, np.float64)

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, rows) -> "ToySubs":
        return ToySubs(self.ids[rows], self.k[rows], self.lo[rows])


def _rows(items, names):
    """Tuples of ``items`` (tuples, or an Arrow table with the columns ``names``)."""
    if isinstance(items, pa.Table):
        return list(zip(*(items.column(n).to_pylist() for n in names)))
    try:
        return [tuple(r) for r in items]
    except TypeError:
        raise rc.InvalidInput(f"expected an iterable of tuples or a table, got {type(items).__name__}") from None


def encode_subs(items, cfg: ToyConfig) -> ToySubs:
    """Validate subscriptions (id, k, min), atomically: an error names the item."""
    rows = _rows(items, ("id", "k", "min"))
    seen = set()
    for i, r in enumerate(rows):
        sid = r[0] if r else None
        if len(r) != 3:
            raise item_error("toy subscription", i, sid, "id", "expected (id, k, min)")
        sid, k, lo = r
        if isinstance(sid, bool) or not isinstance(sid, Integral) or sid in seen:
            raise item_error("toy subscription", i, sid, "id", "must be a new int")
        if isinstance(k, bool) or not isinstance(k, Integral) or not 1 <= k <= cfg.k_max:
            raise item_error("toy subscription", i, sid, "k", f"must be an integer in [1, {cfg.k_max}]")
        if isinstance(lo, bool) or not isinstance(lo, Real) or not math.isfinite(lo):
            raise item_error("toy subscription", i, sid, "min", "must be a finite number")
        seen.add(sid)
    return ToySubs([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])


def encode_msgs(items, published) -> tuple[np.ndarray, np.ndarray]:
    """Validate messages (id, value) against the ids ``published`` so far: (ids, values)."""
    rows = _rows(items, ("id", "value"))
    seen = set()
    for i, r in enumerate(rows):
        mid = r[0] if r else None
        if len(r) != 2:
            raise item_error("toy message", i, mid, "id", "expected (id, value)")
        mid, v = r
        if isinstance(mid, bool) or not isinstance(mid, Integral) or mid in seen or mid in published:
            raise item_error("toy message", i, mid, "id", "must be an int not published before")
        if isinstance(v, bool) or not isinstance(v, Real) or not math.isfinite(v):
            raise item_error("toy message", i, mid, "value", "must be a finite number")
        seen.add(mid)
    return np.array([r[0] for r in rows], np.int64), np.array([r[1] for r in rows], np.float64)


def brute_topk(msgs: dict[int, float], k: int, lo: float) -> list[tuple[int, float]]:
    """The definition: the k largest values >= lo, equal values by smaller id first."""
    return sorted(((m, v) for m, v in msgs.items() if v >= lo), key=lambda p: (-p[1], p[0]))[:k]


class ToyCore:
    """Every message and the subscriptions' lists, kept by merging each call's messages into
    the lists (the brute-force core of both the engine and a partition)."""

    def __init__(self):
        self.msgs: dict[int, float] = {}
        self.subs: dict[int, tuple[int, float]] = {}
        self.lists: dict[int, list[tuple[int, float]]] = {}

    def add(self, subs: ToySubs) -> None:
        for sid, k, lo in zip(subs.ids.tolist(), subs.k.tolist(), subs.lo.tolist()):
            self.subs[sid] = (k, lo)
            self.lists[sid] = brute_topk(self.msgs, k, lo)

    def remove(self, ids) -> None:
        for sid in np.asarray(ids).tolist():
            del self.subs[sid], self.lists[sid]

    def publish(self, ids: np.ndarray, values: np.ndarray) -> dict[int, list[tuple[int, float]]]:
        """Add the messages; the subscriptions whose list changed, with their new list."""
        new = list(zip(ids.tolist(), values.tolist()))
        self.msgs.update(new)
        changed = {}
        for sid, (k, lo) in self.subs.items():
            cand = self.lists[sid] + [(m, v) for m, v in new if v >= lo]
            top = sorted(cand, key=lambda p: (-p[1], p[0]))[:k]
            if top != self.lists[sid]:
                self.lists[sid] = changed[sid] = top
        return changed


def _arrays(changed: dict[int, list]) -> tuple:
    """Update arrays (sub ids, offsets, message ids, values) of changed lists, by id."""
    ids = sorted(changed)
    off = np.zeros(len(ids) + 1, np.int64)
    np.cumsum([len(changed[i]) for i in ids], out=off[1:])
    pairs = [p for i in ids for p in changed[i]]
    return (np.array(ids, np.int64), off, np.array([m for m, _ in pairs], np.int64),
            np.array([v for _, v in pairs], np.float64))


class ToyEngine:
    """The toy kind in one process (the verbs of every engine)."""

    def __init__(self, cfg: ToyConfig | None = None):
        self.cfg = cfg or ToyConfig()
        self.core = ToyCore()

    def subscribe(self, items) -> None:
        subs = encode_subs(items, self.cfg)
        for i, sid in enumerate(subs.ids.tolist()):
            if sid in self.core.subs:
                raise item_error("toy subscription", i, sid, "id", "already subscribed")
        self.core.add(subs)

    def unsubscribe(self, ids) -> None:
        arr = check_ids_arg(ids)
        missing = [i for i in arr.tolist() if i not in self.core.subs]
        if missing:
            raise rc.UnknownSubscription(f"unknown toy subscription id={missing[0]!r}")
        self.core.remove(arr)

    def publish(self, items) -> list[rc.Update]:
        ids, values = encode_msgs(items, self.core.msgs)
        changed = self.core.publish(ids, values)
        return [rc.Update(s, tuple(changed[s])) for s in sorted(changed)]

    def topk(self, sub_id) -> list[tuple[int, float]]:
        return list(self.core.lists[sub_id])

    def stats(self) -> dict:
        return {"subscriptions": len(self.core.subs), "published": len(self.core.msgs)}


class ToyPartition(Recoverable):
    """The one role of the toy kind: a ToyCore for the subscriptions placed here, and every
    message (a new subscription's first list needs them all)."""

    _STATE = ("core", "step")

    def __init__(self, cfg: ToyConfig, index: int, cluster: str = "rankcast", export_metrics: bool = True,
                 resume=None):
        self.cfg, self.index = cfg, index
        self.core = ToyCore()
        self.step = 0
        self.metrics = RoleMetrics("partition", index, cluster, export_metrics)
        self._resume(resume)

    def process(self, step: int, ops: list, msgs) -> tuple:
        """Step ``step``: the control operations, then the messages; the update arrays of the
        subscriptions here whose list the messages changed."""
        with self.metrics.busy():
            if step != self.step + 1:
                raise RuntimeError(f"toy partition {self.index}: step {step} after {self.step}")
            self.step = step
            for op, arg in ops:
                if op == "add":
                    self.core.add(arg)
                else:
                    self.core.remove(arg)
            if msgs is None:
                return NO_UPDATES
            self.metrics.inc("messages", len(msgs[0]))
            return _arrays(self.core.publish(*msgs))

    def topk_many(self, ids: list[int]) -> dict[int, list[tuple[int, float]]]:
        return {i: list(self.core.lists[i]) for i in ids}

    def stats(self) -> dict:
        out = self.metrics.snapshot()
        out.update(index=self.index, subscriptions=len(self.core.subs))
        return out


class ToyCoordinator(CoordinatorBase):
    """The toy kind on the shared coordinator: subscriptions placed by id, every message to
    every partition, one step per call; the partitions' answers are the updates."""

    KIND_STATE = ("published_ids",)
    ITEM = "toy subscription"

    # 1. roles
    def init_kind(self, sample) -> None:
        self.published_ids: set[int] = set()     # validation: message ids are never reused
        self.reset_transient()

    def build_roles(self, ckpt, reuse=None) -> None:
        make, finish = self._role_maker(ckpt, reuse)
        cfg, export = self.rt.share(self.cfg), not self.rt.inproc
        self.parts = [make("partition", ToyPartition, p, cfg, p, self.ccfg.name, export)
                      for p in range(self.ccfg.partitions)]
        finish()

    def role_groups(self):
        return [("partition", self.parts)]

    def snapshot_groups(self):
        return [("partition", self.parts)]

    def reset_transient(self) -> None:
        self._results: list[tuple] = []

    # 2. validation and encoding
    def encode_subscriptions(self, items):
        return encode_subs(items, self.cfg), None

    def encode_publish(self, items):
        return encode_msgs(items, self.published_ids), None

    # 3. routing and placement
    def place(self, batch: ToySubs) -> None:
        parts = np.mod(batch.ids, len(self.parts))
        self.live.update(zip(batch.ids.tolist(), parts.tolist()))
        for p in np.unique(parts).tolist():
            self._add_ops(p, ("add", batch.take(parts == p)))

    def apply_unsubscribe(self, ids: np.ndarray) -> None:
        self._cut_group()
        parts = np.array([self.live.pop(i) for i in ids.tolist()], np.int64)
        for p in np.unique(parts).tolist():
            self._add_ops(p, ("remove", ids[parts == p]))
        self.dispatch()
        self.quiesce()
        self.counters["calls"] += 1

    def apply_publish(self, batch, extra, wait: bool, client):
        ids, values = batch
        self.published_ids.update(ids.tolist())
        n = len(ids)
        if wait:
            self._cut_group()
        if n:
            self.last_seq += n
            self.published += n
            self.dispatch(batch, self.last_seq)
        return self._publish_result(n, wait, client)

    # 4. a partition's local step
    def dispatch(self, msgs=None, pos: int | None = None) -> None:
        while len(self.inflight) >= self.ccfg.max_in_flight:
            self.harvest(self.inflight.popleft())
        ops, self.pending_ops = self.pending_ops, {}
        j = self.step = self.step + 1
        refs = [pt.process.remote(j, [o for o in ops.get(p, [])], msgs) for p, pt in enumerate(self.parts)]
        if pos is not None:
            self.dispatched_pos = pos
        self.inflight.append((j, refs, msgs is not None, self.dispatched_pos))
        self.counters["steps"] += 1

    def harvest(self, entry) -> None:
        _, refs, _, pos = entry
        outs = [o for o in self.rt.get(refs) if len(o[0])]
        if outs:
            self._results.append(concat_updates(outs))
        self.applied_pos = max(self.applied_pos, pos)

    # 5. merge and emit, queries
    def emit(self):
        outs, self._results = self._results, []
        return latest_lists(outs) if outs else NO_UPDATES

    @guarded
    def topk(self, sub_id) -> list[tuple[int, float]]:
        return self.topk_many([sub_id])[sub_id]

    @guarded
    def topk_many(self, sub_ids) -> dict[int, list[tuple[int, float]]]:
        for i in sub_ids:
            if i not in self.live:
                raise rc.UnknownSubscription(f"unknown toy subscription id={i!r}")
        self.quiesce()
        groups: dict[int, list[int]] = {}
        for i in sub_ids:
            groups.setdefault(self.live[i], []).append(i)
        out: dict = {}
        for d in self.rt.get([self.parts[p].topk_many.remote(g) for p, g in groups.items()]):
            out.update(d)
        return {i: out[i] for i in sub_ids}

    @guarded
    def stats(self) -> dict:
        self.quiesce()
        parts = self.rt.get([p.stats.remote() for p in self.parts])
        return {"kind": "toy", "subscriptions": len(self.live), "published": self.published,
                "partitions": len(self.parts), "policy": self.policy,
                "roles": {"coordinator": self.metrics.snapshot(), "partition": parts},
                "delivery": {"position": self.last_seq + 1, "retained": len(self.deliveries)},
                "recovery": self._recovery_stats()}


registry.register(registry.KindEntry("toy", ToyConfig, ToyCoordinator, engine=ToyEngine, label="toy top-k"))


# ----------------------------------------------------------------------------- the tests

class Oracle:
    """The toy's brute force: every message published, the live subscriptions, and the
    stream a listener must see ((position, updates) of each call that changed something)."""

    def __init__(self):
        self.msgs: dict[int, float] = {}
        self.subs: dict[int, tuple[int, float]] = {}
        self.stream: list[tuple[int, list]] = []

    def topk(self, sid) -> list[tuple[int, float]]:
        return brute_topk(self.msgs, *self.subs[sid])

    def publish(self, msgs) -> list[rc.Update]:
        before = {s: self.topk(s) for s in self.subs}
        self.msgs.update(msgs)
        out = [rc.Update(s, tuple(self.topk(s))) for s in sorted(self.subs) if self.topk(s) != before[s]]
        if out:
            self.stream.append((len(self.msgs), out))
        return out


def _messages(rng, first: int, n: int) -> list[tuple[int, float]]:
    return [(first + i, float(rng.integers(0, 40))) for i in range(n)]


def _subs(rng, first: int, n: int) -> list[tuple[int, int, float]]:
    return [(first + i, int(rng.integers(1, 5)), float(rng.integers(0, 30))) for i in range(n)]


def _check(cl, oracle: Oracle) -> None:
    got = cl.topk_many(list(oracle.subs))
    assert got == {s: oracle.topk(s) for s in oracle.subs}


def test_the_engine_is_its_brute_force():
    rng = np.random.default_rng(1)
    eng, oracle = ToyEngine(), Oracle()
    subs = _subs(rng, 0, 30)
    eng.subscribe(subs)
    oracle.subs.update((s, (k, lo)) for s, k, lo in subs)
    for i in range(20):
        msgs = _messages(rng, 100 * i, int(rng.integers(1, 8)))
        assert eng.publish(msgs) == oracle.publish(msgs)
        assert all(eng.topk(s) == oracle.topk(s) for s in oracle.subs)


def test_the_toy_kind_is_known_by_name_policy_and_config():
    ccfg = rc.ClusterConfig(engine=ToyConfig())
    assert ccfg.kind == "toy" and ccfg.policy == "hash"
    assert registry.by_name("toy").engine_class() is ToyEngine
    with pytest.raises(rc.InvalidInput, match="field 'policy'.*for toy top-k"):
        rc.ClusterConfig(engine=ToyConfig(), policy="prefix")


def test_in_process_cluster_equals_brute_force():
    rng = np.random.default_rng(2)
    ccfg = rc.ClusterConfig(engine=ToyConfig(), partitions=3, name="toy-inproc", options={"runtime": "inproc"})
    oracle = Oracle()
    with rc.Cluster.start(ccfg) as cl:
        assert cl.kind == "toy"
        subs = _subs(rng, 0, 20)
        cl.load_subscriptions(pa.table({"id": [s[0] for s in subs], "k": [s[1] for s in subs],
                                        "min": [s[2] for s in subs]}), batch_rows=7, progress=False)
        oracle.subs.update((s, (k, lo)) for s, k, lo in subs)
        _check(cl, oracle)
        for i in range(15):
            if i == 5:
                cl.unsubscribe([0, 1, 2])
                for s in (0, 1, 2):
                    del oracle.subs[s]
            if i == 9:
                more = _subs(rng, 500, 5)
                cl.subscribe(more)
                oracle.subs.update((s, (k, lo)) for s, k, lo in more)
            msgs = _messages(rng, 1000 * i, int(rng.integers(1, 8)))
            assert cl.publish(msgs) == oracle.publish(msgs)
            _check(cl, oracle)
        with pytest.raises(rc.InvalidInput, match=r"toy message #1 \(id=1000\): field 'id'"):
            cl.publish([(90_000, 1.0), (1000, 2.0)])       # 1000 was published: nothing applied
        assert cl.stats()["published"] == len(oracle.msgs)
        with pytest.raises(rc.UnknownSubscription):
            cl.unsubscribe([0])
        assert [(d.position, d.updates) for d in cl.listen(from_position=1, timeout=0.1)] == oracle.stream
        assert cl.publish([(90_001, 39.0)], updates="arrow").column_names == \
            ["subscription_id", "rank", "message_id", "score"]


def test_a_coordinator_missing_a_method_is_refused():
    """The Kind interface is checked: a coordinator without ``emit`` cannot be built, and
    the registry names what it lacks before a cluster starts."""
    @dataclass(frozen=True)
    class HalfConfig:
        pass

    NoEmit = type("NoEmit", (CoordinatorBase,), {k: v for k, v in vars(ToyCoordinator).items()
                                                 if k not in ("emit", "__dict__", "__weakref__")})
    assert NoEmit.__abstractmethods__ == frozenset({"emit"})
    registry.register(registry.KindEntry("half", HalfConfig, NoEmit))
    try:
        with pytest.raises(TypeError, match="does not implement emit"):
            rc.Cluster.start(rc.ClusterConfig(engine=HalfConfig(), options={"runtime": "inproc"}))
        with pytest.raises(TypeError, match="abstract"):
            NoEmit(rc.ClusterConfig(engine=HalfConfig()), "inproc")
    finally:
        registry.unregister("half")


def test_on_ray_a_killed_partition_recovers_and_a_listener_gets_every_delivery_once(ray_session, tmp_path):
    """Partitions SIGKILLed between two calls and during one: the calls recover from the
    durable state (checkpoint + log), every answer and topk equal the brute force after every
    call, and a listener attached from another handle receives each delivery once, in order."""
    rng = np.random.default_rng(7)
    ccfg = rc.ClusterConfig(engine=ToyConfig(), partitions=2, name="toy-kill", namespace="rankcast-tests",
                            actor_cpus=0.05, state_dir=str(tmp_path), checkpoint_every=0.2)
    oracle = Oracle()
    cl = rc.Cluster.start(ccfg, fresh=True)
    seen: list[tuple[int, list]] = []
    done = threading.Event()

    def consume():
        follower = rc.Cluster.attach("toy-kill", namespace="rankcast-tests")
        pos = 1
        while True:
            last = done.is_set()
            for d in follower.listen(from_position=pos, timeout=0.3):
                seen.append((d.position, d.updates))
                pos = d.position + 1
            if last:
                return

    listener = threading.Thread(target=consume, daemon=True)
    try:
        assert cl.kind == "toy"
        subs = _subs(rng, 0, 40)
        cl.subscribe(subs)
        oracle.subs.update((s, (k, lo)) for s, k, lo in subs)
        listener.start()
        for i in range(14):
            if i == 4:
                os.kill(cl.pids()["partition"][0], signal.SIGKILL)
            if i == 9:
                pid = cl.pids()["partition"][-1]
                threading.Thread(target=lambda: (time.sleep(0.01), os.kill(pid, signal.SIGKILL)),
                                 daemon=True).start()
            if i == 6:
                more = _subs(rng, 1000, 8)
                cl.subscribe(more)
                oracle.subs.update((s, (k, lo)) for s, k, lo in more)
            msgs = _messages(rng, 10_000 * (i + 1), int(rng.integers(1, 10)))
            assert cl.publish(msgs) == oracle.publish(msgs)
            _check(cl, oracle)
        done.set()
        listener.join(timeout=120)
        assert not listener.is_alive()
        assert seen == oracle.stream
        recoveries = cl.stats()["recovery"]["recoveries"]
        assert len(recoveries) >= 2, recoveries
        assert [(d.position, d.updates) for d in cl.listen(from_position=1, timeout=0.3)] == oracle.stream
    finally:
        done.set()
        cl.shutdown()

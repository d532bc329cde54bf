"""Updates as diffs on a cluster (``ClusterConfig(updates="diff")``), every kind: applied
from the start (each subscription's list as subscribe left it) with rc.apply_diffs, the
diffs of ``publish``, of ``flush`` (pipelined calls, composed into one diff per list) and of
``listen`` reproduce after every call exactly the lists that rc.Engine / rc.RangeEngine
return (and the cluster's ``topk``); a list that did not change has no row; a listener
resumed from a position rebuilds the same lists; so does one after a partition's death
(the roles rebuilt from a checkpoint and the log replayed) and after a restart of the
whole cluster from its durable state. The roles in process (``runtime: inproc``) here;
on Ray with SIGKILLs in the slow tier."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import rankcast as rc
from rankcast.kinds.spatial.testing import Call, random_calls
from rankcast.runtime.recovery import PeerLost

from .test_range_cluster import _subs as range_subs, _updates as range_updates
from .test_update_diffs import DIFF_COLUMNS, check_diff
from .test_update_forms import updates_from_table

BOUNDS = (0.0, 0.0, 10.0, 10.0)


def _ccfg(engine, name: str, *, durable_dir=None, **kw) -> rc.ClusterConfig:
    opts = {"runtime": "inproc", **kw.pop("options", {})}
    if durable_dir is not None:
        opts["durable"] = True
        kw.update(state_dir=str(durable_dir), checkpoint_every=3600)
    return rc.ClusterConfig(engine=engine, name=name, updates="diff", options=opts, **kw)


class Follower:
    """A subscriber of every subscription: its own copy of the lists, kept from diffs alone.
    ``seeds``: (position, {id: list, or None for an unsubscribed one}) at each subscribe
    and unsubscribe, which a listener needs besides the deliveries (subscribing returns no
    update: a subscriber's list starts from ``topk`` at subscribe)."""

    def __init__(self):
        self.lists: dict[int, list] = {}
        self.seeds: list[tuple[int, dict]] = []


def rebuild(deliveries, seeds, start: dict | None = None, after: int = 0) -> dict:
    """The lists a listener keeps: ``start`` (its lists at position ``after``), then the
    deliveries (position, diff table) and seeds after ``after`` in stream order (a delivery
    at a position before a subscribe at that position)."""
    lists = {k: list(v) for k, v in (start or {}).items()}
    events = [(p, 0, d) for p, d in deliveries if p > after] + [(p, 1, s) for p, s in seeds if p > after]
    for _, kind, x in sorted(events, key=lambda e: (e[0], e[1])):
        if kind == 0:
            rc.apply_diffs(lists, x)
        else:
            for k, v in x.items():
                if v is None:
                    lists.pop(k, None)
                else:
                    lists[k] = list(v)
    return lists


def check_composed(before: dict, d: pa.Table, after: dict, columns: list[str], by_key: bool) -> dict:
    """A flush's diff of several calls: one run of rows per list whose entries (ids and
    scores) differ from before the calls (``by_key``: by key); -1 rows then +1 rows, each
    by rank; applied to ``before`` it gives ``after``."""
    assert d.column_names == columns
    keys = d.column(columns[0]).to_pylist()
    runs = [k for i, k in enumerate(keys) if i == 0 or keys[i - 1] != k]
    assert len(runs) == len(set(runs)) and (runs == sorted(runs) or not by_key), "one run of rows per list"
    assert sorted(runs) == sorted(k for k in after if after[k] != before.get(k)), "rows exactly for the changed lists"
    signs, ranks = d.column("sign").to_pylist(), d.column("rank").to_pylist()
    for k in runs:
        rows = [(s, r) for kk, s, r in zip(keys, signs, ranks) if kk == k]
        assert rows == sorted(rows), "-1 rows first, each sign by rank"
    got = rc.apply_diffs({k: list(v) for k, v in before.items()}, d)
    assert {k: got[k] for k in after} == after
    return {k: got[k] for k in after}


def _pipelined(calls: list[Call], rng) -> list[Call]:
    """``calls`` with some runs of consecutive publishes made one ``pipe`` call (published
    with wait=False, then one flush)."""
    out, i = [], 0
    while i < len(calls):
        j = i
        while j < len(calls) and calls[j].op == "publish" and j - i < 4:
            j += 1
        if j - i >= 2 and rng.random() < 0.5:
            out.append(Call("pipe", [c.arg for c in calls[i:j]]))
            i = j
        else:
            out.append(calls[i])
            i += 1
    return out


def play(cl, eng, calls: list[Call], columns: list[str], follower: Follower | None = None) -> Follower:
    """Every call on the diff cluster ``cl`` and the whole-list engine ``eng``; after each,
    the follower's lists (diffs applied) equal the engine's topk and the cluster's. A call
    that one refuses the other refuses too. Range top-k's rows come in the roles' order
    (each list's together), the spatial kind's by subscription id."""
    f = follower or Follower()
    by_key = columns != DIFF_COLUMNS["range"]
    for c in calls:
        if c.op == "pipe":
            before = {k: list(v) for k, v in f.lists.items()}
            for part in c.arg:
                try:
                    assert cl.publish(part, wait=False) is None
                except rc.InvalidInput:
                    with pytest.raises(rc.InvalidInput):
                        eng.publish(part)
                    continue
                eng.publish(part, updates="none")
            d = cl.flush()
            f.lists = check_composed(before, d, {i: eng.topk(i) for i in f.lists}, columns, by_key)
        else:
            try:
                out = getattr(cl, c.op)(c.arg)
            except (rc.InvalidInput, rc.UnknownSubscription) as e:
                with pytest.raises(type(e)):
                    getattr(eng, c.op)(c.arg)
                continue
            if c.op == "subscribe":
                eng.subscribe(c.arg)
                new = cl.topk_many([s.id for s in c.arg])
                f.lists.update(new)
                f.seeds.append((cl.position(), new))
            elif c.op == "unsubscribe":
                eng.unsubscribe(c.arg)
                for i in c.arg:
                    del f.lists[i]
                f.seeds.append((cl.position(), {i: None for i in c.arg}))
            else:
                w = eng.publish(c.arg, updates="arrow")
                f.lists = check_diff(f.lists, out, w, {i: eng.topk(i) for i in f.lists}, columns, by_key)
        want = {i: eng.topk(i) for i in f.lists}
        assert f.lists == want
        if f.lists:
            assert cl.topk_many(list(f.lists)) == want
    return f


def check_listeners(cl, f: Follower) -> None:
    """A listener from the start rebuilds the follower's lists; so does one that stops at a
    delivery in the middle, keeps its lists, and resumes from the position after it."""
    seen = [(d.position, d.updates) for d in cl.listen(from_position=1, timeout=0)]
    assert seen and all(d.column_names == seen[0][1].column_names for _, d in seen)
    assert [p for p, _ in seen] == sorted({p for p, _ in seen}), "increasing positions, each once"
    assert rebuild(seen, f.seeds) == f.lists
    mid = seen[len(seen) // 2][0]
    at_mid = rebuild([s for s in seen if s[0] <= mid], [s for s in f.seeds if s[0] <= mid])
    rest = [(d.position, d.updates) for d in cl.listen(from_position=mid + 1, timeout=0)]
    assert rest == [s for s in seen if s[0] > mid]
    assert rebuild(rest, f.seeds, at_mid, after=mid) == f.lists


# ----------------------------------------------------------------------------- spatial-keyword

SPATIAL_LAYOUTS = {   # (policy, partitions, window shards, aggregators, options)
    "one-halves": ("hash", 1, 1, 1, {}),
    "two-hash-solo": ("hash", 2, 1, 1, {}),
    "location-shards": ("location", 3, 2, 1, {}),
    "prefix-aggregators": ("prefix", 3, 2, 2, {}),
    "keyword-first": ("keyword-first", 4, 2, 1, {"l1": 2}),
}


def _spatial_cluster(layout: str, cfg, name: str, **kw):
    policy, P, S, A, opts = SPATIAL_LAYOUTS[layout]
    return rc.Cluster.start(_ccfg(cfg, name, policy=policy, partitions=P, window_shards=S, aggregators=A,
                                  batch_size=6, max_in_flight=3, options=dict(opts), **kw), fresh=True)


@pytest.mark.parametrize("layout", list(SPATIAL_LAYOUTS))
@pytest.mark.parametrize("time_window", [False, True], ids=["count", "time"])
def test_spatial_cluster_diffs_rebuild_every_list(layout, time_window):
    cfg = rc.EngineConfig(bounds=BOUNDS, window=None if time_window else 30,
                          window_seconds=6.0 if time_window else None, batch_size=7, candidate_extra=0)
    seed = sum(map(ord, layout)) + 7 * time_window
    calls = _pipelined(random_calls(seed, 45, time_window=time_window), np.random.default_rng(seed))
    assert any(c.op == "pipe" for c in calls)
    cl = _spatial_cluster(layout, cfg, f"diff-{layout}-{time_window}")
    try:
        f = play(cl, rc.Engine(cfg), calls, DIFF_COLUMNS["spatial"])
        check_listeners(cl, f)
        only = sorted(f.lists)[::3]
        got = [d.updates for d in cl.listen(subscription_ids=only, from_position=1, timeout=0)]
        assert got and all(set(d.column("subscription_id").to_pylist()) <= set(only) for d in got)
    finally:
        cl.shutdown()


@pytest.mark.parametrize("policy, partitions", [("location", 2), ("keyword", 3)])
def test_spatial_cluster_diffs_through_load_monitoring(policy, partitions):
    """A load check after every publish with threshold 1 splits location leaves (the moved
    subscriptions' diffs taken before the move and after it composed) and refits keyword
    ranges, between pipelined calls and their flush too: the diffs stay exact."""
    cfg = rc.EngineConfig(bounds=BOUNDS, window=40, batch_size=16, candidate_extra=0)
    calls = _pipelined(random_calls(4242 + partitions, 50, vocab=40, sub_terms=(2, 5), invalid=False),
                       np.random.default_rng(partitions))
    cl = rc.Cluster.start(_ccfg(cfg, f"diff-monitor-{policy}", policy=policy, partitions=partitions, window_shards=2,
                                batch_size=6, max_in_flight=3, monitor_every=1e-9, rebalance_threshold=1.0,
                                max_partitions=partitions + 2), fresh=True)
    try:
        f = play(cl, rc.Engine(cfg), calls, DIFF_COLUMNS["spatial"])
        mon = cl.stats()["load_monitoring"]
        assert mon["rebalances"] > 0
        check_listeners(cl, f)
    finally:
        cl.shutdown()


def test_spatial_diff_cluster_serves_diffs_and_none_only():
    cfg = rc.EngineConfig(bounds=BOUNDS, window=10)
    with rc.Cluster.start(_ccfg(cfg, "diff-forms", partitions=2, window_shards=1)) as cl:
        cl.subscribe([rc.Subscription(1, 0, 0, terms={"a": 1.0}, k=2)])
        for form in ("objects", "arrow"):
            with pytest.raises(rc.InvalidInput, match="field 'updates'.*reports diffs"):
                cl.publish([rc.Message(1, 0, 0, terms={"a": 1.0})], updates=form)
            with pytest.raises(rc.InvalidInput, match="field 'updates'.*reports diffs"):
                next(iter(cl.listen(from_position=1, timeout=0, updates=form)))
        assert cl.position() == 0 and cl.topk(1) == []
        assert cl.publish([rc.Message(1, 0, 0, terms={"a": 1.0})], updates="none") is None
        d = cl.publish([rc.Message(2, 1, 1, terms={"b": 1.0})])          # no change: no row
        assert d.num_rows == 0 and d.column_names == DIFF_COLUMNS["spatial"]
        assert cl.flush().num_rows == 0
        (dl,) = list(cl.listen(from_position=1, timeout=0))
        assert dl.position == 1 and dl.updates.to_pylist() == [
            {"subscription_id": 1, "rank": 1, "message_id": 1, "score": cl.topk(1)[0][1], "sign": 1}]
    with pytest.raises(rc.InvalidInput, match="field 'updates'"):
        rc.ClusterConfig(engine=cfg, updates="objects")


# ----------------------------------------------------------------------------- range top-k

def _range_calls(seed: int, n: int) -> list[Call]:
    """Random subscribes, unsubscribes, publishes and pipelined publishes of object updates
    (inserts, moves, y changes, deletes)."""
    rng = np.random.default_rng(seed)
    calls, live, objs = [], [], {}
    sid = nxt = 0
    for _ in range(n):
        r = rng.random()
        if r < 0.2 or not live:
            new = range_subs(rng, sid, int(rng.integers(1, 20)))
            sid += len(new) + 1
            live += [s.id for s in new]
            calls.append(Call("subscribe", new))
        elif r < 0.28:
            gone = [int(i) for i in rng.choice(live, max(1, len(live) // 4), replace=False)]
            live = [i for i in live if i not in gone]
            calls.append(Call("unsubscribe", gone))
        elif r < 0.45:
            parts = []
            for _ in range(int(rng.integers(2, 5))):
                ups, nxt = range_updates(rng, objs, nxt)
                parts.append(ups)
            calls.append(Call("pipe", parts))
        else:
            ups, nxt = range_updates(rng, objs, nxt)
            calls.append(Call("publish", ups))
    return calls


RANGE_LAYOUTS = [("paint-sparse", 0.0, True, "kd", 3), ("paint-dense", 0.5, False, "hash", 2),
                 ("unicast", 0.0, False, "kd", 1)]


@pytest.mark.parametrize("method, epsilon, batch, policy, partitions", RANGE_LAYOUTS)
def test_range_cluster_diffs_rebuild_every_list(method, epsilon, batch, policy, partitions):
    rcfg = rc.RangeConfig(k=3, method=method, epsilon=epsilon, batch=batch, leaf_size=4)
    cl = rc.Cluster.start(_ccfg(rcfg, f"diff-range-{method}", policy=policy, partitions=partitions), fresh=True)
    try:
        f = play(cl, rc.RangeEngine(rcfg), _range_calls(partitions * 31 + len(method), 40), DIFF_COLUMNS["range"])
        check_listeners(cl, f)
    finally:
        cl.shutdown()


def test_delivery_files_of_a_cluster_of_diffs_rebuild_the_lists(tmp_path):
    """DeliveryWriter on a cluster of diffs writes its diff rows (with ``position`` and
    ``sign``): read back and applied position by position, they give the lists."""
    import pyarrow.compute as pc

    from rankcast.ingest.streaming import DeliveryWriter, read_deliveries

    rcfg = rc.RangeConfig(k=3, leaf_size=4)
    cl = rc.Cluster.start(_ccfg(rcfg, "diff-files", partitions=2), fresh=True)
    try:
        f = play(cl, rc.RangeEngine(rcfg), _range_calls(17, 25), DIFF_COLUMNS["range"])
        w = DeliveryWriter(cl, tmp_path, max_seconds=0.0)
        while w.step(wait=False) is not None:
            pass
        t = read_deliveries(tmp_path)
        assert t.column_names == ["position"] + DIFF_COLUMNS["range"] and w.files_written >= 1
        pos = t.column("position")
        got = [(p, t.filter(pc.equal(pos, p)).drop_columns(["position"])) for p in sorted(set(pos.to_pylist()))]
        assert rebuild(got, f.seeds) == f.lists
    finally:
        cl.shutdown()


# ----------------------------------------------------------------------------- ranked matching

@pytest.mark.parametrize("policy, partitions", [("hash", 3), ("attribute", 2)])
def test_matching_cluster_diffs_are_each_events_list_entering(policy, partitions):
    """Each event's list starts empty: its diff is every entry of its top-k, +1, events in
    input order, on publish, flush and listen alike."""
    from rankcast.testing import random_events, random_expressions

    rng = np.random.default_rng(partitions)
    m = rc.Matcher(rc.MatchConfig(k=4))
    cl = rc.Cluster.start(_ccfg(rc.MatchConfig(k=4), f"diff-match-{policy}", policy=policy,
                                partitions=partitions, batch_size=16), fresh=True)
    try:
        exprs = random_expressions(rng, 0, 300)
        m.subscribe(exprs)
        cl.subscribe(exprs)
        stream = []
        for i in range(6):
            events = random_events(rng, 100 * i, 40)
            if i % 2:
                for part in (events[:15], events[15:]):
                    assert cl.publish(part, wait=False, k=3) is None
                    stream.append(m.publish(part, k=3))
                d = cl.flush()
                want = [x for w in stream[-2:] for x in w]
            else:
                d = cl.publish(events, k=3)
                want = m.publish(events, k=3)
                stream.append(want)
            assert d.column_names == DIFF_COLUMNS["matching"] and set(d.column("sign").to_pylist()) <= {1}
            assert updates_from_table(d.drop_columns(["sign"]), "event_id", "expression_id") == \
                [(x.event_id, list(x.topk)) for x in want if x.topk]
        seen = [d.updates for d in cl.listen(from_position=1, timeout=0)]
        assert pa.concat_tables(seen).column("event_id").to_pylist() == \
            [x.event_id for w in stream for x in w for _ in x.topk]
        one = exprs[5].id
        for d in cl.listen(subscription_ids=[one], from_position=1, timeout=0):
            ev = d.updates.column("event_id").to_pylist()
            hit = {e for e, x in zip(ev, d.updates.column("expression_id").to_pylist()) if x == one}
            assert hit and set(ev) == hit
    finally:
        cl.shutdown()


# ----------------------------------------------------------------------------- recovery

def _die_once(monkeypatch, cls, at: int) -> list:
    """``cls.process`` raises PeerLost (a death: the coordinator rebuilds every role from the
    checkpoint and replays the log) on its ``at``-th call that carries messages, once."""
    orig = cls.process
    calls = [0]

    def process(self, step, *args, **kw):
        payload = args[0] if cls.__name__ == "RangePartition" else args[3]     # (spatial: pos_end, exp_end, ops, payload)
        if payload is not None and not (isinstance(payload[0], str) and payload[0] != "pub"):
            calls[0] += 1
            if calls[0] == at:
                raise PeerLost(f"{cls.__name__} {self.index}: died (test)")
        return orig(self, step, *args, **kw)
    monkeypatch.setattr(cls, "process", process)
    return calls


@pytest.mark.parametrize("kind", ["spatial-hash", "spatial-prefix", "range"])
def test_diffs_survive_a_partition_death_and_a_restart(kind, tmp_path, monkeypatch):
    """A partition dies in the middle of the stream (after a checkpoint): every role is
    rebuilt from the checkpoint and the log replayed, and the diffs go on from the lists as
    they were. Then the whole cluster stops and restarts from its durable state, and the
    diffs go on again. A listener that resumes after the death, after the restart, or from
    the start, rebuilds the same lists."""
    from rankcast.kinds.range.roles import RangePartition
    from rankcast.kinds.spatial.roles.partition import SoloPartition, SubscriptionPartition

    if kind == "range":
        eng_cfg = rc.RangeConfig(k=3, method="paint-sparse", leaf_size=4)
        ccfg = _ccfg(eng_cfg, "diff-death-range", durable_dir=tmp_path, policy="kd", partitions=3)
        calls, eng, cols, cls = _range_calls(5, 45), rc.RangeEngine(eng_cfg), DIFF_COLUMNS["range"], RangePartition
    else:
        policy = kind.split("-")[1]
        eng_cfg = rc.EngineConfig(bounds=BOUNDS, window=30, batch_size=7, candidate_extra=0)
        ccfg = _ccfg(eng_cfg, f"diff-death-{policy}", durable_dir=tmp_path, policy=policy, partitions=2,
                     window_shards=2, batch_size=6)
        calls = _pipelined(random_calls(len(kind), 50), np.random.default_rng(3))
        eng, cols = rc.Engine(eng_cfg), DIFF_COLUMNS["spatial"]
        cls = SoloPartition if policy == "hash" else SubscriptionPartition
    cl = rc.Cluster.start(ccfg, fresh=True)
    third = len(calls) // 3
    f = play(cl, eng, calls[:third], cols)
    cl.checkpoint()
    seen_before = [(d.position, d.updates) for d in cl.listen(from_position=1, timeout=0)]
    got = _die_once(monkeypatch, cls, 3)
    f = play(cl, eng, calls[third:2 * third], cols, f)
    assert got[0] >= 3 and cl.stats()["recovery"]["recoveries"], "the partition died and the cluster recovered"
    monkeypatch.undo()
    # a listener that had read up to the death resumes after it
    last = seen_before[-1][0] if seen_before else 0
    at = rebuild(seen_before, [s for s in f.seeds if s[0] <= last])
    after = [(d.position, d.updates) for d in cl.listen(from_position=last + 1, timeout=0)]
    assert rebuild(after, f.seeds, at, after=last) == f.lists
    # the whole cluster stops, and restarts from its durable state
    cl._coord.local.store.close_log()
    pos = cl.position()
    cl2 = rc.Cluster.start(ccfg)
    f = play(cl2, eng, calls[2 * third:], cols, f)
    check_listeners(cl2, f)
    upto = rebuild([(d.position, d.updates) for d in cl2.listen(from_position=1, timeout=0) if d.position <= pos],
                   [s for s in f.seeds if s[0] <= pos])
    rest = [(d.position, d.updates) for d in cl2.listen(from_position=pos + 1, timeout=0)]
    assert rebuild(rest, f.seeds, upto, after=pos) == f.lists
    cl2.shutdown()


# ----------------------------------------------------------------------------- on Ray, SIGKILLs

class DiffListener:
    """A subscriber process's loop over ``listen``: its own lists from diffs, the position
    it handled last, and a saved copy of both (what it would keep on disk) that it restarts
    from when told to crash."""

    def __init__(self, ccfg, lists: dict, position: int):
        import threading

        self.ccfg = ccfg
        self.lists = {k: list(v) for k, v in lists.items()}
        self.pos = position
        self.saved = (position, {k: list(v) for k, v in lists.items()})
        self.crash = threading.Event()
        self.stop = threading.Event()
        self.crashes = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        cl = rc.Cluster.attach(self.ccfg.name, namespace=self.ccfg.namespace)
        while True:
            n = self.pos
            for d in cl.listen(from_position=self.pos + 1, timeout=1.0):
                rc.apply_diffs(self.lists, d.updates)
                self.pos = d.position
                if self.crash.is_set():         # its memory lost: back to the saved copy
                    self.crash.clear()
                    self.crashes += 1
                    self.pos, lists = self.saved
                    self.lists = {k: list(v) for k, v in lists.items()}
                    break
                if d.position % 3 == 0:
                    self.saved = (self.pos, {k: list(v) for k, v in self.lists.items()})
            if self.stop.is_set() and self.pos == n:
                return


def _kill_run(cl, eng, ccfg, subs, publishes, roles, seed):
    """Subscribe ``subs``, then play ``publishes`` on the diff cluster and the engine with a
    SIGKILL of each of ``roles`` at a random moment of a random call, a listener following
    (and once losing its memory, resuming from its saved lists); the diffs applied after
    every call, and the listener's lists at the end, equal the engine's."""
    import random

    from tests.kills import Kill, assert_one_recovery

    cl.subscribe(subs)
    eng.subscribe(subs)
    ids = [s.id for s in subs]
    lists = cl.topk_many(ids)
    assert lists == {i: eng.topk(i) for i in ids}
    listener = DiffListener(ccfg, lists, cl.position())
    listener.thread.start()
    rng = random.Random(seed)
    kills = sorted(rng.sample(range(3, len(publishes) - 3), len(roles)))
    pending = None
    for n, msgs in enumerate(publishes):
        if pending is not None and n in kills:
            assert_one_recovery(cl, pending)
            pending = None
        if n in kills:
            pending = Kill(cl, roles[kills.index(n)], delay=rng.uniform(0.0, 0.05), seed=n)
            pending.start()
        if n == len(publishes) // 2:
            listener.crash.set()
        try:
            d = cl.publish(msgs)
        except rc.InvalidInput:
            with pytest.raises(rc.InvalidInput):
                eng.publish(msgs)
            continue
        eng.publish(msgs, updates="none")
        rc.apply_diffs(lists, d)
        assert lists == {i: eng.topk(i) for i in ids}
    if pending is not None:
        assert_one_recovery(cl, pending)
    listener.stop.set()
    listener.thread.join(120)
    assert listener.crashes == 1, "the listener lost its memory once, and resumed"
    assert listener.lists == lists


@pytest.mark.parametrize("policy, partitions, roles", [("hash", 2, ("partition", "partition")),
                                                        ("prefix", 3, ("partition", "aggregator"))])
@pytest.mark.slow     # kills and restarts of Ray processes
def test_spatial_diffs_across_killed_roles_on_ray(ray_session, tmp_path, policy, partitions, roles):
    """Two hash partitions holding the window (a dead one rebuilt alone, from its snapshot and
    the journal), or prefix partitions with an aggregator merging replicas (every role rebuilt
    from the checkpoint, the log replayed): the diffs go on exactly."""
    cfg = rc.EngineConfig(bounds=BOUNDS, window=40, candidate_extra=0)
    ccfg = rc.ClusterConfig(engine=cfg, policy=policy, partitions=partitions, window_shards=2, batch_size=6,
                            max_in_flight=3, actor_cpus=0.05, name=f"diff-kill-{policy}", updates="diff",
                            state_dir=str(tmp_path), checkpoint_every=0.5)
    calls = random_calls(sum(map(ord, policy)), 40, invalid=True)
    subs = list({s.id: s for c in calls if c.op == "subscribe" for s in c.arg}.values())
    cl = rc.Cluster.start(ccfg)
    try:
        _kill_run(cl, rc.Engine(cfg), ccfg, subs, [c.arg for c in calls if c.op == "publish"], roles, 5)
    finally:
        cl.shutdown()


@pytest.mark.slow     # kills and restarts of Ray processes
def test_range_diffs_across_killed_partitions_on_ray(ray_session, tmp_path):
    rcfg = rc.RangeConfig(k=3, method="paint-sparse", epsilon=0.5, leaf_size=4)
    ccfg = rc.ClusterConfig(engine=rcfg, policy="kd", partitions=3, actor_cpus=0.05, name="diff-kill-range",
                            updates="diff", state_dir=str(tmp_path), checkpoint_every=0.3)
    rng = np.random.default_rng(8)
    subs = range_subs(rng, 0, 80)
    objs: dict = {}
    nxt = 0
    publishes = []
    for _ in range(16):
        ups, nxt = range_updates(rng, objs, nxt)
        publishes.append(ups)
    cl = rc.Cluster.start(ccfg)
    try:
        _kill_run(cl, rc.RangeEngine(rcfg), ccfg, subs, publishes, ("partition", "partition"), 9)
    finally:
        cl.shutdown()


# ----------------------------------------------------------------------------- composition

def _diff_rows(key, old: list, new: list) -> list:
    """The rows of one list's diff: entries of ``old`` not in ``new`` (-1, rank before), then
    entries of ``new`` not in ``old`` (+1, rank after)."""
    return [(key, r + 1, e[0], e[1], -1) for r, e in enumerate(old) if e not in new] + \
        [(key, r + 1, e[0], e[1], 1) for r, e in enumerate(new) if e not in old]


def _as_arrays(rows: list) -> tuple:
    cols = list(zip(*rows)) if rows else [[]] * 5
    return (np.array(cols[0], np.int64), np.array(cols[1], np.int32), np.array(cols[2], np.int64),
            np.array(cols[3], np.float64), np.array(cols[4], np.int8))


@pytest.mark.parametrize("seed", range(6))
def test_composed_diffs_apply_as_the_parts_in_turn(seed):
    """compose_diffs of random consecutive diffs of random lists (entries by score desc,
    then id; entries leave, enter, come back with their score or another; lists empty out,
    refill, stay as they were): applied to the lists before the first part, the result
    gives the lists after the last, with one run of rows per key, no row for a list
    that came back to where it was, and no entry that both leaves and enters."""
    from rankcast.common.diffs import compose_diffs
    from rankcast.common.updates import diff_table

    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 8))
    pool = [(int(i), float(rng.integers(0, 6))) for i in range(40)]
    order = lambda lst: sorted(lst, key=lambda e: (-e[1], e[0]))    # noqa: E731
    keys = list(range(int(rng.integers(1, 12))))
    start = {key: order([pool[i] for i in rng.choice(len(pool), int(rng.integers(0, k + 1)), replace=False)])
             for key in keys}
    lists = {key: list(v) for key, v in start.items()}
    parts = []
    for _ in range(int(rng.integers(1, 6))):
        rows = []
        for key in rng.permutation(keys).tolist():
            if rng.random() < 0.4:
                continue
            old = lists[key]
            new = [e for e in old if rng.random() < 0.6]
            for i in rng.choice(len(pool), int(rng.integers(0, 4)), replace=False).tolist():
                e = pool[i]
                if all(x[0] != e[0] for x in new):
                    new.append(e if rng.random() < 0.7 else (e[0], float(rng.integers(0, 6))))
            new = order(new)[:k]
            rows += _diff_rows(key, old, new)
            lists[key] = new
        parts.append(_as_arrays(rows))
    got = compose_diffs(parts)
    table = diff_table(*got)
    keys_out = got[0].tolist()
    runs = [x for i, x in enumerate(keys_out) if i == 0 or keys_out[i - 1] != x]
    assert len(runs) == len(set(runs)) and sorted(runs) == sorted(x for x in keys if lists[x] != start[x])
    for x in runs:
        rows = [(s, r) for kk, s, r in zip(keys_out, got[4].tolist(), got[1].tolist()) if kk == x]
        assert rows == sorted(rows)
        ent = [(i, s, g) for kk, i, s, g in zip(keys_out, got[2].tolist(), got[3].tolist(), got[4].tolist()) if kk == x]
        assert not {(i, s) for i, s, g in ent if g < 0} & {(i, s) for i, s, g in ent if g > 0}
    assert rc.apply_diffs({x: list(v) for x, v in start.items()}, table) == lists

"""rc.Cluster on Ray: the roles as actors (fractional CPUs, one Ray per test run) against
rc.Engine and the brute-force engine, equal after every call, for every policy, one and
several partitions / shards / distributors / aggregators, both window kinds, churn, ties,
and with every actor delayed at random."""
from __future__ import annotations

import os
import time

import pytest

import rankcast as rc
from rankcast.kinds.spatial.testing import play, random_calls
from rankcast.baselines import BruteForceEngine
from rankcast.config import RAY_INLINE_BYTES, RAY_INLINE_VAR
from tests.kills import Kill, assert_one_recovery
from tests.waits import wait_until

BOUNDS = (0.0, 0.0, 10.0, 10.0)

CASES = [
    # policy,          P, S, D, A, time,  delay
    ("hash",           1, 1, 1, 1, False, 0.0),
    ("location",       3, 2, 2, 2, True,  0.0),
    ("keyword",        4, 2, 2, 1, False, 0.0),
    ("prefix",         4, 3, 2, 2, False, 0.004),
    ("prefix",         2, 1, 1, 1, True,  0.0),
    ("spatial-first",  4, 2, 1, 2, False, 0.0),
    ("keyword-first",  4, 2, 2, 1, True,  0.004),
]


@pytest.mark.parametrize("policy,P,S,D,A,time_window,delay", CASES,
                         ids=[f"{c[0]}-{c[1]}x{c[2]}x{c[3]}x{c[4]}-{'time' if c[5] else 'count'}"
                              f"{'-delayed' if c[6] else ''}" for c in CASES])
def test_cluster_on_ray_equals_engine(ray_session, policy, P, S, D, A, time_window, delay):
    if time_window:
        cfg = rc.EngineConfig(bounds=BOUNDS, window_seconds=7.5)
    else:
        cfg = rc.EngineConfig(bounds=BOUNDS, window=40)
    opts = {"delay": delay, "seed": P * 10 + S}
    if "-" in policy:
        opts["l1"] = 2
    ccfg = rc.ClusterConfig(engine=cfg, policy=policy, partitions=P, window_shards=S, distributors=D,
                            aggregators=A, batch_size=6, max_in_flight=3, actor_cpus=0.05,
                            # the roles are counted below: no load monitoring splits a leaf
                            # (it would on a machine slow enough for a check to come due)
                            monitor_every=0.0,
                            name=f"test-{policy}-{P}{S}{D}{A}{int(time_window)}", options=opts)
    cl = rc.Cluster.start(ccfg)
    try:
        calls = random_calls(P * 100 + S * 10 + D, 24, time_window=time_window)
        eng = rc.Engine(cfg)
        assert play({"engine": eng, "cluster": cl, "brute": BruteForceEngine(cfg)}, calls) == len(calls)
        st = cl.stats()
        assert (st["subscriptions"], st["window"], st["published"]) == \
            (eng.stats()["subscriptions"], eng.stats()["window"], eng.stats()["published"])
        roles = st["roles"]
        # one partition that cannot split is an engine in an actor: its window is its own
        # (reported as the shard's), no distributor or aggregator
        solo = P == 1 and policy != "location"
        assert st["solo"] is solo
        assert len(roles["partition"]) == P and len(roles["shard"]) == S
        # a policy that sends every message everywhere (hash, location) has no distributor:
        # the coordinator sends each step to every partition itself
        broadcasts = policy in ("hash", "location")
        assert (len(roles["distributor"]), len(roles["aggregator"])) == \
            ((0, 0) if solo else (0 if broadcasts else D, A))
        # each message routed once: by a distributor, or by the coordinator where the policy
        # sends every message everywhere (no routing to do)
        assert sum(d["messages"] for d in roles["distributor"]) + roles["coordinator"]["messages"] == st["published"]
        assert sum(s["messages"] for s in roles["shard"]) == st["published"], "each message stored once"
        assert st["reevaluations"] > 0
        assert all(p["busy_seconds"] > 0 for p in roles["partition"])
        assert "rankcast_busy_seconds" in roles["partition"][0]["exported"], "ray.util.metrics export"
        if policy in ("hash", "location"):
            assert st["replication_ratio"] == 1.0 and st["communication_cost"] == P
        else:
            assert 1.0 <= st["replication_ratio"] and st["communication_cost"] <= P
    finally:
        cl.shutdown()


@pytest.mark.smoke     # make test's one check on Ray
def test_named_cluster_lifecycle(ray_session):
    """start refuses a second cluster of the same name; warm loads every role's kernels;
    attach finds it; errors arrive as the contract's exceptions; shutdown removes it."""
    cfg = rc.EngineConfig(bounds=BOUNDS, window=10)
    ccfg = rc.ClusterConfig(engine=cfg, policy="hash", partitions=2, window_shards=1, actor_cpus=0.05,
                            name="test-lifecycle", namespace="rankcast-test-ns")
    cl = rc.Cluster.start(ccfg)
    try:
        with pytest.raises(RuntimeError, match="already runs"):
            rc.Cluster.start(ccfg)
        # warm: every role's process answers, after loading its kernels, with its pid
        pids = cl.warm()
        assert pids == cl.pids()
        # the stream's roles run with the heap that reuses a step's pages, the others not
        from rankcast.runtime.backends import ROLE_ENV, STEP_ROLE_ENV
        for role, want in (("partition", STEP_ROLE_ENV), ("shard", STEP_ROLE_ENV), ("aggregator", ROLE_ENV)):
            for pid in pids[role]:
                with open(f"/proc/{pid}/environ") as f:
                    env = dict(e.split("=", 1) for e in f.read().split("\0") if "=" in e)
                assert {k: env.get(k) for k in want} == want, role
        other = rc.Cluster.attach("test-lifecycle", namespace="rankcast-test-ns")
        other.subscribe([rc.Subscription(1, 1.0, 1.0, terms={"a": 1.0}, k=2)])
        assert cl.publish([rc.Message(7, 1.0, 1.0, terms={"a": 1.0})]) == \
            [rc.Update(1, ((7, 1.0),))]
        with pytest.raises(rc.InvalidInput, match=r"subscription #0 \(id=2\): field 'k'"):
            cl.subscribe([rc.Subscription(2, 1.0, 1.0, terms={"a": 1.0}, k=0)])
        with pytest.raises(rc.UnknownSubscription, match="id=5"):
            other.unsubscribe([1, 5])
        assert other.topk(1) == [(7, 1.0)]
        with pytest.raises(rc.UnknownSubscription):
            other.topk(2)
    finally:
        cl.shutdown()
    with pytest.raises(RuntimeError, match="no rankcast cluster"):
        rc.Cluster.attach("test-lifecycle", namespace="rankcast-test-ns")


def test_split_partition_online_on_ray(ray_session):
    """Load monitoring on Ray: a location partition is split into a new actor that joins the
    step sequence mid-stream; results stay equal to the engine."""
    cfg = rc.EngineConfig(bounds=BOUNDS, window=40)
    ccfg = rc.ClusterConfig(engine=cfg, policy="location", partitions=2, window_shards=2, batch_size=6,
                            actor_cpus=0.05, name="test-split")
    cl = rc.Cluster.start(ccfg)
    try:
        calls = random_calls(31, 30, invalid=False)
        eng = rc.Engine(cfg)
        targets = {"engine": eng, "cluster": cl}
        live: set[int] = set()
        play(targets, calls[:15], live=live)
        res = cl.rebalance(threshold=0.0)
        assert res["action"] == "split" and res["new_partition"] == 2
        play(targets, calls[15:], live=live)
        st = cl.stats()
        assert st["partitions"] == 3 and len(st["roles"]["partition"]) == 3
        assert st["roles"]["partition"][2]["subscriptions"] > 0
    finally:
        cl.shutdown()


def test_broadcast_steps_go_inside_the_calls_up_to_rays_inline_size(ray_session):
    """2 hash partitions, each holding the window: a step's messages travel inside both
    partitions' calls up to the size Ray sends so (rankcast's Ray and role processes: 256
    KiB), through the object store above it; equal to the engine and brute force after every
    call either way, and after a partition killed between calls is rebuilt."""
    assert os.environ[RAY_INLINE_VAR] == str(RAY_INLINE_BYTES), "local_ray_options sets it"
    cfg = rc.EngineConfig(bounds=BOUNDS, window=500)
    # steps of up to 4,096 messages: a publish of 2,000 messages of 8 to 14 terms is about
    # 360 KB (stored), one of a few hundred fits (inside the calls)
    ccfg = rc.ClusterConfig(engine=cfg, policy="hash", partitions=2, batch_size=4096, actor_cpus=0.05,
                            name="test-inline-steps")
    cl = rc.Cluster.start(ccfg)
    try:
        calls = random_calls(57, 14, max_publish=2000, msg_terms=(8, 14), vocab=80, invalid=False)
        targets = {"engine": rc.Engine(cfg), "cluster": cl, "brute": BruteForceEngine(cfg)}
        live: set[int] = set()
        play(targets, calls[:8], live=live)
        co = cl.stats()["roles"]["coordinator"]
        assert co["inline_steps"] > 0 and co["stored_steps"] > 0, co
        kill = Kill(cl, "partition", index=1).now()
        play(targets, calls[8:], live=live)
        assert_one_recovery(cl, kill)            # the killed partition was rebuilt
    finally:
        cl.shutdown()


# options["seed"] with which each of 2 partitions sleeps at least half of options["delay"]
# in each of its first eight steps (np.random.default_rng(seed + 104729 * index + 1), as
# SubscriptionPartition draws them)
SLOW_SEED = 34955


def test_pipelined_publishes_behind_busy_partitions_go_out_together(ray_session, tmp_path):
    """2 hash partitions whose steps are slow (at least 0.2 s each): pipelined publishes that find two
    steps unfinished wait in the coordinator and go out together, as steps of up to
    ``coalesce`` messages, when the oldest step ends, at the coordinator's own tick (no
    call comes) or first thing at the next call that is not a pipelined publish (a
    subscribe, an unsubscribe, a flush). Calls are the same messages in the same order
    whatever their steps: the flushes' updates and every top-k equal the engine and brute
    force, also with a partition killed while messages wait; with ``coalesce=0`` every
    call's steps go out at once."""
    cfg = rc.EngineConfig(bounds=BOUNDS, window=300)
    calls = random_calls(61, 60, max_publish=60, invalid=False)
    subs = [c.arg for c in calls if c.op == "subscribe"]
    batches = [c.arg for c in calls if c.op == "publish" and c.arg]
    for coalesce in (600, 0):
        ccfg = rc.ClusterConfig(engine=cfg, policy="hash", partitions=2, batch_size=64, coalesce=coalesce,
                                actor_cpus=0.05, name=f"test-gather-{coalesce}", state_dir=str(tmp_path),
                                checkpoint_every=3600.0, options={"delay": 0.4, "seed": SLOW_SEED})
        cl = rc.Cluster.start(ccfg, fresh=True)
        eng, brute = rc.Engine(cfg), BruteForceEngine(cfg)
        try:
            live = set()

            def call(op, arg):
                for t in (cl, eng, brute):
                    if op == "publish" and t is cl:
                        assert cl.publish(arg, wait=False) is None
                    else:
                        getattr(t, op)(arg)
                if op == "subscribe":
                    live.update(s.id for s in arg)
                elif op == "unsubscribe":
                    live.difference_update(arg)

            def flush_equal(before):
                got = {u.subscription_id: list(u.topk) for u in cl.flush()}
                ids = sorted(live)
                want = {i: eng.topk(i) for i in ids if eng.topk(i) != before.get(i)}
                # (a subscription removed since was delivered at a cut before its removal)
                assert got.keys() >= want.keys() and all(got[i] == eng.topk(i) for i in got if i in live)
                assert cl.topk_many(ids) == {i: eng.topk(i) for i in ids} == {i: brute.topk(i) for i in ids}
                return {i: eng.topk(i) for i in ids}

            for s in subs[:3]:
                call("subscribe", s)
            co0 = cl.stats()["roles"]["coordinator"]
            # five calls in a row: the first goes out, the other four wait for its step to
            # end and then go out as one step, from the tick (nothing else is
            # called); the engine and brute force get them after (an engine's first publish
            # loads its kernels, which may take longer than a step)
            for b in batches[:5]:
                assert cl.publish(b, wait=False) is None
            for b in batches[:5]:
                eng.publish(b)
                brute.publish(b)
            # the held calls go out at the coordinator's own tick: wait for that (a probe that
            # sends nothing; stats would send them itself)
            wait_until(lambda: cl._call("peek_counters")["held"] == 0, "the held calls went out")
            co = cl.stats()["roles"]["coordinator"]
            got = {k: co[k] - co0[k] for k in ("held_calls", "gathered_steps", "ticks", "steps")}
            if coalesce:
                assert got == {"held_calls": 5, "gathered_steps": 1, "ticks": 1, "steps": 2}, got
            else:
                assert got == {"held_calls": 0, "gathered_steps": 0, "ticks": 0, "steps": 5}, got
            at = flush_equal({})
            # a burst with a subscribe and an unsubscribe inside: what waits goes out first
            for n, b in enumerate(batches[5:25]):
                call("publish", b)
                if n == 6:
                    call("subscribe", subs[3])
                if n == 12:
                    call("unsubscribe", sorted(live)[:4])
            at = flush_equal(at)
            # a partition killed while messages wait: the release's step finds it dead
            for n, b in enumerate(batches[25:40]):
                call("publish", b)
                if n == 8:
                    kill = Kill(cl, "partition", index=1).now()
            flush_equal(at)
            co = cl.stats()["roles"]["coordinator"]
            assert (co["gathered_steps"] > 1) == bool(coalesce), co
            assert_one_recovery(cl, kill)
        finally:
            cl.shutdown()


def test_a_due_cut_behind_a_busy_step_waits_for_it_and_takes_with_the_held_calls(ray_session, tmp_path):
    """Pipelined calls held behind a slow step (at least 0.2 s) while listeners poll past the
    delivery interval: the cut waits for that step to end (a cut then would send the held
    calls as a step of their own, queued behind it), and at the coordinator's tick the held
    calls go out as one step that takes the updates (no step of their own). The delivery at
    the last call's position holds every list those calls changed, equal to the engine and
    brute force."""
    cfg = rc.EngineConfig(bounds=BOUNDS, window=300)
    calls = random_calls(67, 60, max_publish=60, invalid=False)
    subs = [c.arg for c in calls if c.op == "subscribe"]
    batches = [c.arg for c in calls if c.op == "publish" and c.arg][:6]
    ccfg = rc.ClusterConfig(engine=cfg, policy="hash", partitions=2, batch_size=64, coalesce=600,
                            actor_cpus=0.05, name="test-deferred-cut", state_dir=str(tmp_path),
                            checkpoint_every=3600.0, delivery_interval=0.02,
                            options={"delay": 0.4, "seed": SLOW_SEED})
    cl = rc.Cluster.start(ccfg, fresh=True)
    eng, brute = rc.Engine(cfg), BruteForceEngine(cfg)
    try:
        for s in subs[:3]:
            for t in (cl, eng, brute):
                t.subscribe(s)
        start = cl.position() + 1
        co0 = cl.stats()["roles"]["coordinator"]
        for b in batches:
            assert cl.publish(b, wait=False) is None
        # polls past the interval while the first step runs (at least 0.2 s): none of them
        # cuts
        for _ in range(6):
            time.sleep(0.01)
            cl._call("deliveries_from", start, None)
            assert cl._call("peek_counters")["held"] == len(batches) - 1
        wait_until(lambda: cl._call("peek_counters")["held"] == 0, "the held calls went out")
        for b in batches:
            eng.publish(b)
            brute.publish(b)
        # the flush finds the cut made: it sends nothing more
        lists = {u.subscription_id: list(u.topk) for u in cl.flush()}
        co = cl.stats()["roles"]["coordinator"]
        done = {k: co[k] - co0[k] for k in ("held_calls", "gathered_steps", "ticks", "steps")}
        assert done == {"held_calls": len(batches), "gathered_steps": 1, "ticks": 1, "steps": 2}, done
        ids = sorted(s.id for b in subs[:3] for s in b)
        assert cl.topk_many(ids) == {i: eng.topk(i) for i in ids} == {i: brute.topk(i) for i in ids}
        assert lists and all(lists[i] == eng.topk(i) for i in lists)
        assert {i for i in ids if eng.topk(i)} <= lists.keys()
    finally:
        cl.shutdown()


def test_bulk_load_on_ray_encodes_in_two_processes(ray_session, monkeypatch):
    """Every other batch is encoded by the caller with a copy of the coordinator's terms and
    sent as columns (or as the raw table when it meets a new term or an error): bad rows in
    either kind of batch are named by their position in the whole table and load nothing;
    a good table loads equal to subscribing it, new terms included."""
    import pyarrow as pa

    from rankcast.runtime import cluster as cluster_mod
    from rankcast.kinds.spatial.columns import SubscriptionBatch

    sent = []
    pre = cluster_mod._pre_encoded

    def spy(enc, table):
        out = pre(enc, table)
        sent.append("columns" if isinstance(out, SubscriptionBatch) else "table")
        return out

    monkeypatch.setattr(cluster_mod, "_pre_encoded", spy)
    texts = [f"w{i % 6} w{i % 4} v{i % 9}" for i in range(40)]
    cfg = rc.EngineConfig(bounds=BOUNDS, window=40, vocabulary=rc.Vocabulary.fit(texts))
    ccfg = rc.ClusterConfig(engine=cfg, policy="hash", partitions=2, window_shards=2, actor_cpus=0.05,
                            name="test-bulk-two-encoders")
    cl = rc.Cluster.start(ccfg)
    eng = rc.Engine(cfg)
    try:
        msgs = [rc.Message(i, (i * 7) % 10, (i * 3) % 10, text=texts[i]) for i in range(40)]
        cl.publish(msgs)
        eng.publish(msgs)
        n = 60
        # rows 30..39 (batch 3, encoded by the caller) meet a word no vocabulary knows
        good = pa.table({"id": list(range(n)), "x": [float(i % 10) for i in range(n)],
                         "y": [float(i * 7 % 10) for i in range(n)], "k": [1 + i % 4 for i in range(n)],
                         "alpha": [(i % 5) / 4 for i in range(n)],
                         "text": [texts[i % 40] + (" fresh" if 30 <= i < 40 else "") for i in range(n)]})
        for row, col, val, msg in [(15, 3, 0, r"#15 \(id=15\).*'k'"),       # batch 1: caller's
                                   (42, 4, 2.0, r"#42 \(id=42\).*'alpha'")]:  # batch 4: coordinator's
            column = good.column(col).to_pylist()
            column[row] = val
            with pytest.raises(rc.InvalidInput, match=msg):
                cl.load_subscriptions(good.set_column(col, good.schema.field(col), pa.array(column)),
                                      batch_rows=10)
            assert cl.stats()["subscriptions"] == 0
        sent.clear()
        assert cl.load_subscriptions(good, batch_rows=10) == n
        assert sent == ["columns", "table", "columns"]      # batches 1, 3 (new term), 5
        eng.subscribe(good)
        for i in range(n):
            assert cl.topk(i) == eng.topk(i)
        more = [rc.Message(100 + i, (i * 3) % 10, (i * 7) % 10, text=texts[(i * 5) % 40] + " fresh")
                for i in range(30)]
        by_id = lambda ups: sorted(ups, key=lambda u: u.subscription_id)
        assert by_id(cl.publish(more)) == by_id(eng.publish(more))
        for i in range(n):
            assert cl.topk(i) == eng.topk(i)
    finally:
        cl.shutdown()

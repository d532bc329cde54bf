"""The DSkype protocol itself, many random workloads: every role of the cluster run
in-process (``options={"runtime": "inproc"}``: the same classes, direct calls) against
rc.Engine and the brute-force engine, equal after every call, and against the plain-Python
reference (rankcast.testing.ReferenceEngine: its own encoding, windows and score). The Ray transport is covered
by test_cluster_ray.py with fewer, slower runs."""
from __future__ import annotations

import numpy as np
import pytest

import rankcast as rc
from rankcast.kinds.spatial.testing import play, random_calls
from rankcast.baselines import BruteForceEngine
from rankcast.config import POLICIES
from rankcast.kinds.spatial.roles.coordinator import Coordinator
from rankcast.testing import ReferenceEngine

BOUNDS = (0.0, 0.0, 10.0, 10.0)

# (partitions, shards, distributors, aggregators, batch_size, max_in_flight)
TOPOLOGIES = [(1, 1, 1, 1, 1024, 8), (4, 3, 2, 2, 7, 3), (6, 2, 3, 1, 5, 2)]


def _cfg(time_window: bool) -> rc.EngineConfig:
    """Re-evaluations fetch 2k candidates (no k + 16 floor): the small windows here then
    often hold more, so shards answer incompletely and floors engage."""
    if time_window:
        return rc.EngineConfig(bounds=BOUNDS, window_seconds=7.5, batch_size=16, candidate_extra=0)
    return rc.EngineConfig(bounds=BOUNDS, window=40, batch_size=16, candidate_extra=0)


def _start(policy, cfg, topo, **extra) -> rc.Cluster:
    P, S, D, A, batch, inflight = topo
    opts = {"runtime": "inproc", **extra}
    if policy in ("spatial-first", "keyword-first"):
        opts["l1"] = 2 if P % 2 == 0 else 1
    return rc.Cluster.start(rc.ClusterConfig(engine=cfg, policy=policy, partitions=P, window_shards=S,
                                             distributors=D, aggregators=A, batch_size=batch,
                                             max_in_flight=inflight, options=opts))


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("time_window", [False, True], ids=["count", "time"])
@pytest.mark.parametrize("topo", TOPOLOGIES, ids=lambda t: "x".join(map(str, t[:4])))
def test_cluster_equals_engine_and_brute_force(policy, time_window, topo):
    seed = hash((policy, time_window, topo)) % 10_000
    cfg = _cfg(time_window)
    calls = random_calls(seed, 35, time_window=time_window)
    cl = _start(policy, cfg, topo)
    eng = rc.Engine(cfg)
    checks = play({"engine": eng, "cluster": cl, "brute": BruteForceEngine(cfg), "reference": ReferenceEngine(cfg)},
                  calls)
    assert checks == len(calls)
    st, est = cl.stats(), eng.stats()
    assert (st["subscriptions"], st["window"], st["published"]) == \
        (est["subscriptions"], est["window"], est["published"])
    if policy in ("hash", "location"):
        assert st["replication_ratio"] in (0.0, 1.0)
        assert st["communication_cost"] in (0.0, float(topo[0]))


def _shadow_asks(monkeypatch, compare):
    """Every question a partition asks its window shards is asked of each shard once more,
    for all of K and with no floor: ``compare(K, asked, answers, whole)`` sees both answers."""
    from rankcast.kinds.spatial.roles import partition

    ask = partition.SubscriptionPartition._ask_shards

    def shadowed(self, step, req, K, after, upto, floor=True):
        refs, asked = ask(self, step, req, K, after, upto, floor)
        whole = [s.search.remote(step, req, K, after, upto) for s in self.shards]
        compare(K, asked, self.rt.get(refs), self.rt.get(whole))
        return refs, asked

    monkeypatch.setattr(partition.SubscriptionPartition, "_ask_shards", shadowed)


@pytest.mark.parametrize("policy", ["hash", "prefix", "keyword-first"])
@pytest.mark.parametrize("time_window", [False, True], ids=["count", "time"])
def test_shard_floor_keeps_results_exact(policy, time_window, monkeypatch):
    """Every re-evaluation asks one shard first and floors the others by its K-th scores
    (the path of large batches, forced here for every batch): each merged answer equals the
    unfloored one, and the results stay exact after every call."""
    from rankcast.kinds.spatial.roles import partition
    from rankcast.kinds.spatial.roles.aggregator import merge_candidates

    monkeypatch.setattr(partition, "FLOOR_FROM", 1)
    # new subscriptions' initial re-evaluations asked by the partitions too (the rows of K)
    monkeypatch.setattr(Coordinator, "INITIAL_LISTS", False)
    seen = {"rows": 0, "floored": 0, "differ": 0}

    def compare(K, asked, answers, whole):
        a, b = merge_candidates(answers, K, asked), merge_candidates(whole, K)
        seen["rows"] += len(K)
        seen["floored"] += int(np.isfinite(whole[0].kth_scores(K)).sum())
        if not (np.array_equal(a.offsets, b.offsets) and np.array_equal(a.seq, b.seq)
                and np.array_equal(a.score, b.score)):
            seen["differ"] += 1

    _shadow_asks(monkeypatch, compare)
    seed = 7100 + 10 * ["hash", "prefix", "keyword-first"].index(policy) + time_window
    cfg = _cfg(time_window)
    calls = random_calls(seed, 35, time_window=time_window)
    cl = _start(policy, cfg, TOPOLOGIES[1])
    checks = play({"engine": rc.Engine(cfg), "cluster": cl, "brute": BruteForceEngine(cfg)}, calls)
    assert checks == len(calls)
    assert seen["differ"] == 0 and seen["rows"] > 0
    if not time_window:                   # floors pruned (short time windows rarely hold K)
        assert seen["floored"] > 0


@pytest.mark.parametrize("share", [1.0, 3.0])
@pytest.mark.parametrize("policy,via_agg", [("hash", True), ("prefix", True), ("prefix", False)])
def test_shards_asked_for_a_share_of_k_keep_results_exact(policy, via_agg, share, monkeypatch):
    """Six window shards, each asked for ceil(share * K / 6) candidates of a row (a share of
    1: the merges often certify fewer than K, and the partitions ask again for more): every
    merged answer is a prefix of the merge of the shards' whole answers, the partition's
    merge is told the shares, and the results stay exact after every call, merged at an
    aggregator or in the partition."""
    from rankcast.kinds.spatial.roles import aggregator, partition

    monkeypatch.setattr(aggregator, "SHARD_SHARE", share)
    seen = {"cut": 0, "short": 0, "differ": 0}

    def compare(K, asked, answers, whole):
        # each merged answer is a prefix of the merge of the shards' whole answers (K each)
        a, b = merge(answers, K, asked), merge(whole, K)
        seen["cut"] += int((asked < K).sum())
        for i in range(len(K)):
            ra = list(zip(a.score[a.offsets[i]:a.offsets[i + 1]], a.seq[a.offsets[i]:a.offsets[i + 1]]))
            rb = list(zip(b.score[b.offsets[i]:b.offsets[i + 1]], b.seq[b.offsets[i]:b.offsets[i + 1]]))
            seen["short"] += len(ra) < len(rb)
            if ra != rb[: len(ra)] or (a.complete[i] and (ra != rb or not b.complete[i])):
                seen["differ"] += 1

    merge = aggregator.merge_candidates

    def merged(parts, K, asked=None):        # the partition's own merge is told the shares
        seen["merged_cut"] += 0 if asked is None else int((np.asarray(asked) < K).sum())
        return merge(parts, K, asked)

    seen["merged_cut"] = 0
    _shadow_asks(monkeypatch, compare)
    monkeypatch.setattr(aggregator, "merge_candidates", merged)
    monkeypatch.setattr(partition, "merge_candidates", merged)
    seed = 7300 + 10 * ["hash", "prefix"].index(policy) + via_agg + 2 * int(share)
    cfg = _cfg(False)
    calls = random_calls(seed, 35)
    cl = _start(policy, cfg, (4, 6, 2, 2, 7, 3), merge_via_aggregator=via_agg)
    checks = play({"engine": rc.Engine(cfg), "cluster": cl, "brute": BruteForceEngine(cfg)}, calls)
    assert checks == len(calls)
    assert seen["differ"] == 0 and seen["cut"] > 0 and seen["merged_cut"] == seen["cut"]
    if share == 1.0:
        assert seen["short"] > 0


@pytest.mark.parametrize("policy", ["prefix", "keyword", "spatial-first"])
def test_sample_fitted_policy_with_vocabulary(policy):
    """Text input through a Vocabulary (term ids by frequency, the order prefixes rely on),
    policies fitted on a sample; words unseen by the fit land on hashed partitions."""
    from rankcast.kinds.spatial.testing import Call

    words = [f"w{i}" for i in range(25)]
    texts = [" ".join(words[: 1 + (i * 7) % 25][::-1][: 1 + i % 6]) for i in range(200)]
    vocab = rc.Vocabulary.fit(texts)
    cfg = rc.EngineConfig(bounds=BOUNDS, window=30, vocabulary=vocab)
    subs = [rc.Subscription(i, (i * 37 % 100) / 10, (i * 53 % 100) / 10, text=texts[(i * 11) % 200],
                            k=1 + i % 4, alpha=(i % 5) / 4) for i in range(60)]
    msgs = [rc.Message(i, (i * 29 % 100) / 10, (i * 71 % 100) / 10,
                       text=texts[(i * 13) % 200] + (" novel%d" % (i % 3) if i % 4 == 0 else ""))
            for i in range(150)]
    cl = rc.Cluster.start(rc.ClusterConfig(engine=cfg, policy=policy, partitions=4, window_shards=2,
                                           batch_size=9, options={"runtime": "inproc", "l1": 2}),
                          sample=(subs[:40], msgs[:60]))
    calls = [Call("publish", msgs[:40]), Call("subscribe", subs[:30]), Call("publish", msgs[40:90]),
             Call("subscribe", subs[30:]), Call("unsubscribe", [3, 4, 5]), Call("publish", msgs[90:])]
    play({"engine": rc.Engine(cfg), "cluster": cl, "brute": BruteForceEngine(cfg)}, calls)
    routing = cl.stats()["routing"]
    assert routing["policy"] == policy


@pytest.mark.parametrize("policy", ["hash", "prefix"])
def test_pipelined_publish_then_flush(policy):
    """publish(wait=False) calls, with a subscribe among them, then flush(): the updates of
    every subscription whose top-k differs from the one at the previous flush (or, for a
    new one, from its initial results), and the engine's final state; validation errors
    still come at once."""
    cfg = _cfg(False)
    eng = rc.Engine(cfg)
    cl = _start(policy, cfg, (3, 2, 2, 1, 4, 2))
    calls = random_calls(5, 40, invalid=False)
    subs = [c.arg for c in calls if c.op == "subscribe"]
    msgs = [c.arg for c in calls if c.op == "publish"]
    half = len(subs) // 2
    for s in subs[:half]:
        eng.subscribe(s)
        cl.subscribe(s)
    before = {x.id: eng.topk(x.id) for s in subs[:half] for x in s}
    for n, m in enumerate(msgs):
        eng.publish(m)
        assert cl.publish(m, wait=False) is None
        if n == len(msgs) // 2:
            for s in subs[half:]:
                eng.subscribe(s)
                cl.subscribe(s)
                before.update({x.id: eng.topk(x.id) for x in s})
    with pytest.raises(rc.InvalidInput, match="id"):
        cl.publish([rc.Message(-5, 1.0, 1.0, terms={"t1": 1.0}), rc.Message(-5, 1.0, 1.0, terms={"t1": 1.0})],
                   wait=False)
    got = {u.subscription_id: list(u.topk) for u in cl.flush()}
    want = {i: eng.topk(i) for i in before if eng.topk(i) != before[i]}
    # every net change, each with its current list; a subscription may also be reported
    # whose list changed and came back (delivered as two changes to listeners)
    assert got.keys() >= want.keys() and len(want) > 3
    assert all(got[i] == eng.topk(i) for i in got)
    assert cl.flush() == []
    for i in before:
        assert cl.topk(i) == eng.topk(i)


@pytest.mark.parametrize("policy", ["prefix", "spatial-first", "keyword-first"])
@pytest.mark.parametrize("time_window", [False, True], ids=["count", "time"])
@pytest.mark.parametrize("searched", [True, False], ids=["searched", "one-term"])
def test_prefix_reallocation_keeps_results_exact(policy, time_window, searched, monkeypatch):
    """Text-heavy subscriptions with long term lists: loose prefixes grow lazily as kScores
    fall (expiries, churn), from the prefix a new subscription's initial top-k needs
    (``searched``, the default) or from one term. Many seeds; a check that only looked at
    re-evaluated replicas, or no reallocation at all, fails here."""
    monkeypatch.setattr(Coordinator, "INITIAL_LISTS", searched)
    cfg = (rc.EngineConfig(bounds=BOUNDS, window_seconds=10.0, batch_size=16) if time_window
           else rc.EngineConfig(bounds=BOUNDS, window=60, batch_size=16))
    reallocs = 0
    for seed in range(6):
        calls = random_calls(1000 + seed, 40, time_window=time_window, vocab=60, sub_terms=(3, 7),
                             msg_terms=(1, 6), alphas=(0.0, 0.1, 0.3, None), max_publish=30)
        cl = rc.Cluster.start(rc.ClusterConfig(engine=cfg, policy=policy, partitions=8, window_shards=3,
                                               batch_size=5, max_in_flight=3,
                                               options={"runtime": "inproc", "l1": 2}))
        play({"engine": rc.Engine(cfg), "cluster": cl, "brute": BruteForceEngine(cfg)}, calls)
        reallocs += cl.stats()["reallocations"]
    assert reallocs > (20 if searched else 50), "the workload must exercise reallocation"


@pytest.mark.parametrize("policy,topo", [("location", (3, 2, 1, 1, 6, 3)), ("keyword", (4, 2, 2, 2, 6, 3)),
                                         ("prefix", (4, 3, 1, 2, 6, 3)), ("hash", (2, 1, 1, 1, 6, 3))])
def test_rebalance_online_stays_exact(policy, topo):
    """Load monitoring (7.4): a forced split (location) or range refit (keyword, prefix) in
    the middle of a workload, then more calls: equal to the engine throughout."""
    cfg = _cfg(False)
    calls = random_calls(77, 50, vocab=40, sub_terms=(2, 5), invalid=False)
    cl = _start(policy, cfg, topo)
    eng = rc.Engine(cfg)
    targets = {"engine": eng, "cluster": cl, "brute": BruteForceEngine(cfg)}
    live: set[int] = set()
    play(targets, calls[:25], live=live)
    res = cl.rebalance(threshold=0.0)
    if policy == "hash":
        assert res["action"] is None and "reason" in res
    else:
        assert res["action"] == ("split" if policy == "location" else "rebalance")
        assert res["moved"] > 0
    if policy == "location":
        assert cl.stats()["partitions"] == topo[0] + 1
    assert cl.topk_many(sorted(live)) == {i: eng.topk(i) for i in sorted(live)}
    play(targets, calls[25:], live=live)
    assert cl.rebalance(threshold=1e9)["action"] is None


class _NoWait:
    """A cluster whose ``publish`` is ``publish(wait=False)`` then ``flush()``."""

    def __init__(self, cl):
        self.cl = cl

    def publish(self, msgs):
        assert self.cl.publish(msgs, wait=False) is None
        return self.cl.flush()

    def __getattr__(self, name):
        return getattr(self.cl, name)


@pytest.mark.parametrize("policy,partitions", [("location", 2), ("keyword", 3), ("prefix", 3)])
@pytest.mark.parametrize("wait", [True, False], ids=["publish", "publish-nowait"])
def test_automatic_load_monitoring_stays_exact(policy, partitions, wait):
    """Load monitoring by itself (7.4): a check after every publish call with threshold 1
    (any imbalance acts) splits location leaves up to ``max_partitions`` and refits keyword
    ranges in the middle of the stream, also between ``publish(wait=False)`` and ``flush``;
    updates and every top-k stay equal to the engine and brute force after every call."""
    cfg = _cfg(False)
    calls = random_calls(4242 + partitions, 50, vocab=40, sub_terms=(2, 5), invalid=False)
    cl = rc.Cluster.start(rc.ClusterConfig(
        engine=cfg, policy=policy, partitions=partitions, window_shards=2, batch_size=6, max_in_flight=3,
        monitor_every=1e-9, rebalance_threshold=1.0, max_partitions=partitions + 2,
        options={"runtime": "inproc"}))
    target = cl if wait else _NoWait(cl)
    checks = play({"engine": rc.Engine(cfg), "cluster": target, "brute": BruteForceEngine(cfg)}, calls)
    assert checks == len(calls)
    st = cl.stats()
    mon = st["load_monitoring"]
    publishes = sum(c.op == "publish" for c in calls)
    assert mon["checks"] == publishes and mon["rebalances"] > 0
    assert all(r["action"] in ("split", "rebalance") and r["ratio"] >= 1.0 for r in mon["recent"])
    if policy == "location":
        assert st["partitions"] == partitions + 2          # split until the cap, then no more
        assert mon["rebalances"] == 2


def test_load_monitoring_off_or_not_due():
    """``monitor_every=0`` turns automatic checks off; a long interval is not due yet; a
    policy without online rebalancing (hash) is never checked."""
    cfg = _cfg(False)
    calls = random_calls(17, 20, invalid=False)
    for policy, every in (("location", 0.0), ("location", 3600.0), ("hash", 1e-9)):
        cl = rc.Cluster.start(rc.ClusterConfig(engine=cfg, policy=policy, partitions=2, window_shards=1,
                                               monitor_every=every, rebalance_threshold=1.0,
                                               options={"runtime": "inproc"}))
        play({"engine": rc.Engine(cfg), "cluster": cl}, calls)
        st = cl.stats()
        assert st["load_monitoring"]["checks"] == 0 and st["partitions"] == 2, (policy, every)


def test_merge_candidates_matches_window_merge():
    """The aggregator's compiled k-way merge gives CandidateLists.merge's answer."""

    from rankcast.kinds.spatial.roles.aggregator import merge_candidates
    from rankcast.kinds.spatial.window import CandidateLists

    rng = np.random.default_rng(3)
    n = 40
    K = rng.integers(1, 8, n)
    parts = []
    for s in range(3):
        lens = rng.integers(0, 9, n)
        off = np.zeros(n + 1, np.int64)
        np.cumsum(lens, out=off[1:])
        sc = np.round(rng.random(off[-1]), 1)                  # many equal scores
        seq = rng.permutation(10_000)[: off[-1]] * 3 + s       # disjoint message sets
        for i in range(n):                                     # rows sorted (score, seq) desc
            a, b = off[i], off[i + 1]
            o = np.lexsort((-seq[a:b], -sc[a:b]))
            sc[a:b], seq[a:b] = sc[a:b][o], seq[a:b][o]
        parts.append(CandidateLists(off, seq.astype(np.int64), seq.astype(np.int64) + 7, seq * 0.5, sc,
                                    rng.random(n) < 0.5, lens.astype(np.int64)))
    got, want = merge_candidates(parts, K), CandidateLists.merge(parts, K)
    for f in ("offsets", "seq", "ids", "t", "score", "complete", "work"):
        assert np.array_equal(getattr(got, f), getattr(want, f)), f
    # and row by row against a sort of every part's rows
    for i in range(n):
        rows = sorted(((float(p.score[j]), int(p.seq[j]), int(p.ids[j]), float(p.t[j]))
                       for p in parts for j in range(p.offsets[i], p.offsets[i + 1])), reverse=True)
        a, b = got.offsets[i], got.offsets[i + 1]
        assert list(zip(got.score[a:b].tolist(), got.seq[a:b].tolist(), got.ids[a:b].tolist(),
                        got.t[a:b].tolist())) == rows[: K[i]], i
        assert bool(got.complete[i]) == (all(p.complete[i] for p in parts) and len(rows) <= K[i]), i
        assert got.work[i] == sum(int(p.work[i]) for p in parts), i


def test_aggregator_merges_replicas_and_forgets():
    """Replica lists merge into the global top-k (a message held twice counts once, ties by
    newer seq); emit reports changes against the last report; forget and pool compaction
    keep the others intact."""

    from rankcast.kinds.spatial.roles.aggregator import Aggregator

    agg = Aggregator(0, 3, export_metrics=False)
    csr = lambda lists: (np.cumsum([0] + [len(l) for l in lists]),
                         np.array([m for l in lists for m, _, _ in l], np.int64),
                         np.array([q for l in lists for _, q, _ in l], np.int64),
                         np.array([c for l in lists for _, _, c in l], float))
    # sub 5 (k=3) on partitions 0 and 2, sub 8 (k=1) on partition 1
    agg.apply(0, np.zeros(0, np.int64), np.array([5]), np.array([3]), *csr([[(100, 10, 0.9), (101, 4, 0.5)]]))
    agg.apply(2, np.zeros(0, np.int64), np.array([5]), np.array([3]),
              *csr([[(102, 12, 0.9), (100, 10, 0.9), (103, 3, 0.5)]]))
    agg.apply(1, np.zeros(0, np.int64), np.array([8]), np.array([1]), *csr([[(200, 20, 0.3)]]))
    assert agg.topk(5) == [(102, 0.9), (100, 0.9), (101, 0.5)]
    agg.baseline(np.array([5, 8]))
    assert len(agg.emit()[0]) == 0
    agg.apply(2, np.array([5]), np.zeros(0, np.int64), np.zeros(0, np.int64), *csr([]))   # replica dropped
    ids, off, mids, scs = agg.emit()
    assert ids.tolist() == [5] and mids.tolist() == [100, 101]
    agg.forget(np.array([5]))
    assert agg.topk(5) == [] and agg.replicas(8) == [1]
    agg._compact()
    assert agg.topk(8) == [(200, 0.3)]
    assert agg.stats()["subscriptions"] == 1


def _streamed_pair(msg_text, sub_text, **ccfg):
    """An in-process cluster and an engine that saw the same 30 messages (``msg_text(i)``), and
    a table of 25 subscriptions (``sub_text(i)``) to load."""
    import pyarrow as pa

    cfg = rc.EngineConfig(bounds=(0, 0, 1, 1), window=50)
    cl = rc.Cluster.start(rc.ClusterConfig(engine=cfg, options={"runtime": "inproc"}, **ccfg))
    eng = rc.Engine(cfg)
    msgs = [rc.Message(i, (i % 7) / 7, (i % 5) / 5, text=msg_text(i)) for i in range(30)]
    cl.publish(msgs)
    eng.publish(msgs)
    n = 25
    subs = pa.table({"id": list(range(n)), "x": [(i % 9) / 9 for i in range(n)],
                     "y": [(i % 4) / 4 for i in range(n)], "k": [3] * n, "alpha": [0.3] * n,
                     "text": [sub_text(i) for i in range(n)]})
    return cl, eng, subs


def test_bulk_load_is_atomic_per_call():
    """A bad row in a later part of the table loads nothing (not even the earlier parts),
    names its position in the whole table, and leaves the cluster as it was; a good table
    then loads completely and equals subscribing it."""
    import pyarrow as pa

    cl, eng, good = _streamed_pair(lambda i: f"w{i % 4} w{i % 3} zz{i}", lambda i: f"w{i % 4} new{i}",
                                   policy="prefix", partitions=3)
    n = good.num_rows
    bad = good.set_column(3, "k", pa.array([3] * 22 + [0] + [3] * 2))      # row 22: k = 0
    with pytest.raises(rc.InvalidInput, match=r"#22 \(id=22\).*'k'"):
        cl.load_subscriptions(bad, batch_rows=10)
    assert cl.stats()["subscriptions"] == 0
    dup = good.set_column(0, "id", pa.array(list(range(n - 1)) + [3]))     # row 24 repeats id 3
    with pytest.raises(rc.InvalidInput, match=r"#24 \(id=3\).*duplicate"):
        cl.load_subscriptions(dup, batch_rows=10)
    assert cl.stats()["subscriptions"] == 0
    assert cl.load_subscriptions(good, batch_rows=10) == n
    eng.subscribe(good)
    for i in range(n):
        assert cl.topk(i) == eng.topk(i)
    cl.shutdown()


@pytest.mark.parametrize("in_flight", [1, 8])
def test_bulk_load_streams_progress(in_flight):
    """Phase 2 of a bulk load is one coordinator call that yields (rows with initial results,
    rows staged) as the parts' steps finish: never decreasing, partial values on the way,
    and the total at the end, whatever the pipeline depth; the load equals subscribing."""
    cl, eng, subs = _streamed_pair(lambda i: f"w{i % 4} w{i % 3}", lambda i: f"w{i % 4} w{i % 5}",
                                   policy="hash", partitions=2, max_in_flight=in_flight)
    n = subs.num_rows
    coord = cl._coord._obj
    for a in (0, 10, 20):
        coord.stage_batch(subs.slice(a, 10))
    values = list(coord.commit_load())
    done = [d for d, _ in values]
    assert values[-1] == (n, n) and {t for _, t in values} == {n}
    assert done == sorted(done) and any(0 < d < n for d in done)
    eng.subscribe(subs)
    assert cl.topk_many(range(n)) == {i: eng.topk(i) for i in range(n)}
    assert cl.load_subscriptions(subs.slice(0, 0), progress=False) == 0      # an empty table


def test_latest_keeps_each_subscriptions_last_list():
    """Deliveries joined at one position (and a flush over several): per subscription the
    list of the last part that holds it, in the order of those last occurrences."""
    from rankcast.runtime.coordinator import latest_lists
    rng = np.random.default_rng(5)
    for _ in range(100):
        outs, want = [], {}
        for _part in range(int(rng.integers(1, 5))):
            ids = rng.choice(30, int(rng.integers(0, 12)), replace=False).astype(np.int64)
            lens = rng.integers(0, 4, len(ids))
            off = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
            mids, scs = rng.integers(0, 999, off[-1]).astype(np.int64), rng.random(off[-1])
            outs.append((ids, off, mids, scs))
            for r, i in enumerate(ids.tolist()):
                want.pop(i, None)           # re-inserted: its last occurrence decides the order
                want[i] = (mids[off[r]:off[r + 1]].tolist(), scs[off[r]:off[r + 1]].tolist())
        ids, off, mids, scs = latest_lists(outs)
        got = {i: (mids[off[r]:off[r + 1]].tolist(), scs[off[r]:off[r + 1]].tolist())
               for r, i in enumerate(ids.tolist())}
        assert list(got) == sorted(want, key=lambda i: _last_position(outs, i)) and got == want


def _last_position(outs, i):
    pos = [(k, r) for k, o in enumerate(outs) for r, x in enumerate(o[0].tolist()) if x == i]
    return pos[-1]


@pytest.mark.parametrize("policy,partitions", [("hash", 2), ("location", 3), ("prefix", 1)])
def test_updates_go_from_the_partitions_to_the_client(policy, partitions):
    """Direct mode: a call's updates reach the client as the partitions' results
    (``RemoteUpdates``), which the coordinator keeps unread for its deliveries; they equal
    the engine's updates per call, in every form, and a listener, which reads them through
    the coordinator, gets the same stream. Pickled (a checkpoint), a delivery is its arrays."""
    import pickle

    from rankcast.runtime.coordinator import RemoteUpdates, UpdateParts, update_arrays
    from rankcast.common.updates import updates_from_arrays

    cfg = _cfg(False)
    cl = _start(policy, cfg, (partitions, 2, 1, 1, 7, 3))
    co = cl._coord.local
    takes = []          # the cut's takes ride on the call's last step: no take_updates call
    for h in co.parts:
        part = h.local
        part.take_updates = _spy(part.take_updates, lambda kw: takes.append("alone"))
        part.process = _spy(part.process, lambda kw: takes.append(kw.get("take", False)), quiet=part)
    eng = rc.Engine(cfg)
    calls = random_calls(11, 40, invalid=False)
    start = cl.position() + 1
    stream, unread = [], 0
    for n, call in enumerate(calls):
        if call.op != "publish":
            getattr(eng, call.op)(call.arg)
            getattr(cl, call.op)(call.arg)
            continue
        want = eng.publish(call.arg)
        form = ("objects", "arrow", "none")[n % 3]
        takes.clear()
        got = cl.publish(call.arg, updates=form)
        assert "alone" not in takes and takes.count(True) == (partitions if len(call.arg) else 0), str(takes)
        if form == "objects":
            assert got == want, n
        elif form == "arrow":
            assert got.equals(_as_table(want)), n
        else:
            assert got is None
        if want:
            stream.append((cl.position(), want))
            last = co.deliveries[-1][1]
            assert isinstance(last, UpdateParts) and last.n == len(want)
            unread += last._arrays is None
            raw = co.publish([], True)       # no message: no update, nothing to fetch
            assert not isinstance(raw, RemoteUpdates) and len(raw[0]) == 0
            assert updates_from_arrays(*pickle.loads(pickle.dumps(last))) == want
    assert unread == len(stream) > 5, "the coordinator fetched the updates it only passes on"
    got = [(d.position, d.updates) for d in cl.listen(from_position=start, timeout=0)]
    assert got == stream
    assert all(update_arrays(a) is a._arrays for _, a in co.deliveries)
    cl.shutdown()


def _spy(fn, seen, quiet=None):
    """``fn`` that first calls ``seen(kwargs)``; ``quiet``: an object whose spies (its
    attributes) see nothing while ``fn`` runs."""
    def call(*args, **kw):
        if getattr(_spy, "inside", None) is None:
            seen(kw)
        if quiet is None:
            return fn(*args, **kw)
        _spy.inside = quiet
        try:
            return fn(*args, **kw)
        finally:
            _spy.inside = None
    return call


def _as_table(updates):
    """The update table of a list of ``rc.Update``."""
    from rankcast.common.updates import updates_table
    lens = [len(u.topk) for u in updates]
    return updates_table([u.subscription_id for u in updates], np.r_[0, np.cumsum(lens)].astype(np.int64),
                         np.array([m for u in updates for m, _ in u.topk], np.int64),
                         np.array([s for u in updates for _, s in u.topk], np.float64))


def test_a_steps_takes_left_by_its_cut_wait_for_the_next_one():
    """The takes folded into a step (``dispatch(take=True)``) that no cut consumes, because
    another step follows, go to the stash: the next cut delivers them under the later lists."""
    from rankcast.common.updates import updates_from_arrays

    cfg = _cfg(False)
    cl = _start("hash", cfg, (2, 1, 1, 1, 7, 3))
    co = cl._coord.local
    eng = rc.Engine(cfg)
    calls = [c for c in random_calls(4, 60, invalid=False) if c.op != "unsubscribe"]
    subs = [c for c in calls if c.op == "subscribe"]
    pubs = [c.arg for c in calls if c.op == "publish" and len(c.arg) > 2]
    for c in subs:
        eng.subscribe(c.arg)
        cl.subscribe(c.arg)
    checked = 0
    for a, b in zip(pubs[::2], pubs[1::2]):
        want = {u.subscription_id: u for u in eng.publish(a) + eng.publish(b)}
        for msgs, take in ((a, True), (b, False)):
            batch, pending = co.encode_publish(msgs)
            co.encoder.commit(pending)
            seqs = np.arange(co.last_seq + 1, co.last_seq + 1 + len(batch), dtype=np.int64)
            exp = co.clock.advance(seqs, batch.t)
            co.last_seq = int(seqs[-1])
            co.published += len(batch)
            co._window_add(batch.ids, seqs, int(exp[-1]))
            co.dispatch(batch, seqs, exp, take=take)
        assert co._taken is None and co._stash
        got = updates_from_arrays(*co._cut())
        assert got == sorted(want.values(), key=lambda u: u.subscription_id)
        checked += len(got)
    assert checked > 10
    ids = [s.id for c in subs for s in c.arg]
    assert cl.topk_many(ids) == {i: eng.topk(i) for i in ids}
    cl.shutdown()


def _placed_terms_indexed(cl) -> None:
    """Every keyword or prefix replica indexes exactly the terms that place it in its
    partition (prefix: inside its routed prefix or beyond it), and at least one term of its
    routed prefix is placed there. Keyword: each live subscription's terms are indexed once
    in all (one partition, or one copy of a range); prefix: at most once, and every replica
    knows the prefix length its messages are routed by (the coordinator's)."""
    coord = cl._coord.local
    kmap = coord.policy.kmap
    prefix = coord.policy.prefix
    entries = placed_total = 0
    held = {}
    for p, handle in enumerate(coord.parts):
        part = handle.local
        core = part.core
        s = core.subs
        for slot in s.live_slots().tolist():
            pos = np.arange(s.toff[slot], s.toff[slot] + s.tlen[slot])
            placed = kmap.parts(s.terms[pos], np.full(len(pos), s.ids[slot])) == p
            routed = placed[: part.plen[slot]] if prefix else placed
            assert routed.any()
            if prefix:
                assert part.plen[slot] == coord.live[int(s.ids[slot])]
            assert (s.indexed[pos] == placed).all()
            placed_total += int(placed.sum())
            held[int(s.ids[slot])] = int(s.tlen[slot])
        core.index.flush()
        entries += core.index.stats()["entries"]
    assert entries == placed_total
    total_terms = sum(held.values())
    assert entries <= total_terms if prefix else entries == total_terms


@pytest.mark.parametrize("seed", [91, 92])
def test_keyword_replicas_index_only_their_placed_terms(seed):
    """A keyword replica's index holds only the terms placing it in its partition (each
    term's postings in one partition), yet every top-k stays the engine's and brute force's
    after every call, through a refit of the ranges (which re-places subscriptions)."""
    cfg = _cfg(False)
    calls = random_calls(seed, 60, vocab=25, sub_terms=(2, 6), msg_terms=(1, 6), invalid=False)
    cl = _start("keyword", cfg, (5, 2, 2, 2, 6, 3))
    eng = rc.Engine(cfg)
    targets = {"engine": eng, "cluster": cl, "brute": BruteForceEngine(cfg)}
    live: set[int] = set()
    play(targets, calls[:30], live=live)
    assert cl.stats()["replication_ratio"] > 1.5
    _placed_terms_indexed(cl)
    assert cl.rebalance(threshold=0.0)["action"] == "rebalance"
    assert cl.topk_many(sorted(live)) == {i: eng.topk(i) for i in sorted(live)}
    play(targets, calls[30:], live=live)
    _placed_terms_indexed(cl)


@pytest.mark.parametrize("policy,partitions", [("hash", 1), ("keyword", 1), ("prefix", 1), ("location", 1),
                                              ("hash", 2), ("location", 2)])
@pytest.mark.parametrize("time_window", [False, True], ids=["count", "time"])
def test_partitions_holding_the_window_are_engines_in_actors(policy, partitions, time_window, tmp_path):
    """One partition that no split can grow, or two under a policy that sends every message
    to both (hash, location): each partition holds the whole window in its process
    (``SoloPartition``; no shard, distributor or aggregator role), its questions answered
    there. Equal to the engine and brute force after every call; then resumed from its
    durable state (a checkpoint and the log after it: each partition rebuilds its window and
    its buffers from its snapshot) it goes on equal."""
    from rankcast.kinds.spatial.roles.partition import SoloPartition

    cfg = _cfg(time_window)
    calls = random_calls(sum(map(ord, policy)) * 7 + 31 * partitions + time_window + 17, 50, time_window=time_window)
    ccfg = rc.ClusterConfig(engine=cfg, policy=policy, partitions=partitions, batch_size=7, max_in_flight=3,
                            max_partitions=partitions, name=f"solo-{policy}-{partitions}-{time_window}",
                            state_dir=str(tmp_path), checkpoint_every=3600,
                            options={"runtime": "inproc", "durable": True})
    cl = rc.Cluster.start(ccfg, fresh=True)
    co = cl._coord.local
    assert co.solo and [type(p.local) for p in co.parts] == [SoloPartition] * partitions
    assert (co.shards, co.dists, co.aggs) == ([], [], [])
    eng, brute = rc.Engine(cfg), BruteForceEngine(cfg)
    live: set[int] = set()
    assert play({"engine": eng, "cluster": cl, "brute": brute}, calls[:20], live=live) == 20
    cl.checkpoint()
    play({"engine": eng, "cluster": cl, "brute": brute}, calls[20:32], live=live)     # only in the log
    st = cl.stats()
    assert st["solo"] and st["window"] == eng.stats()["window"]
    # every partition holds the whole window and asks its own
    assert [s["held"] for s in st["roles"]["shard"]] == [eng.stats()["window"]] * partitions
    assert [s["messages"] for s in st["roles"]["shard"]] == [st["published"]] * partitions
    assert all(s["searches"] > 0 for s in st["roles"]["shard"])
    assert all(p["subscriptions"] > 0 for p in st["roles"]["partition"])
    assert sum(p["subscriptions"] for p in st["roles"]["partition"]) == st["subscriptions"]
    co.store.close_log()                                     # the cluster's processes are gone
    cl2 = rc.Cluster.start(ccfg)
    assert cl2._coord.local.solo and cl2.stats()["recovery"]["recoveries"][-1]["replayed_calls"] > 0
    assert play({"engine": eng, "cluster": cl2, "brute": brute}, calls[32:], live=live) == len(calls) - 32
    cl2.shutdown()


@pytest.mark.parametrize("time_window", [False, True], ids=["count", "time"])
@pytest.mark.parametrize("side", [False, True], ids=["one-thread", "side-thread"])
def test_partitions_holding_the_window_with_and_without_the_side_thread(time_window, side):
    """Two hash partitions holding the window, their match with its side thread (the
    window's append and a share of the match beside the step's thread) or without
    (``options["solo_side"]`` False: the append, then the match, on the actor's thread):
    equal to the engine and brute force after every call either way, and the partitions
    count their steps (``side_steps``) and those matched on two threads."""
    cfg = _cfg(time_window)
    calls = random_calls(4242 + time_window, 40, time_window=time_window)
    ccfg = rc.ClusterConfig(engine=cfg, policy="hash", partitions=2, batch_size=7, max_in_flight=3,
                            max_partitions=2, name=f"solo-side-{side}-{time_window}",
                            options={"runtime": "inproc", "solo_side": side})
    cl = rc.Cluster.start(ccfg)
    co = cl._coord.local
    assert co.solo and [p.local.side for p in co.parts] == [side, side]
    eng, brute = rc.Engine(cfg), BruteForceEngine(cfg)
    assert play({"engine": eng, "cluster": cl, "brute": brute}, calls, live=set()) == len(calls)
    st = cl.stats()
    steps = [p["side_steps"] for p in st["roles"]["partition"]]
    assert min(steps) > 0 and [s["messages"] for s in st["roles"]["shard"]] == [st["published"]] * 2
    if not side:
        assert [p["side_threaded_steps"] for p in st["roles"]["partition"]] == [0, 0]
        assert all(p.local._side is None for p in co.parts)
    cl.shutdown()


@pytest.mark.parametrize("time_window", [False, True], ids=["count", "time"])
def test_only_partition_runs_its_halves_on_two_threads(time_window, tmp_path, monkeypatch):
    """The cluster's only partition holds its subscriptions in two hash halves
    (``HalvesCore``), each step's halves on two threads: equal to the engine and brute force
    after every call, both halves holding subscriptions and steps run on both threads; then
    resumed from its durable state (a checkpoint and the log after it: the halves rebuilt
    from the subscriptions) it goes on equal. ``options["solo_halves"]`` False: one core."""
    from rankcast.kinds.spatial.core import SkypeCore
    from rankcast.kinds.spatial.halves import HalvesCore
    from rankcast.kinds.spatial.igpt import SideThread

    monkeypatch.setattr(SideThread, "MIN_OVERLAP", 0.0)     # two threads, however loaded the machine
    monkeypatch.setattr(SideThread, "MIN_OWN", 0.0)
    cfg = _cfg(time_window)
    calls = random_calls(4242 + time_window, 60, time_window=time_window)
    ccfg = rc.ClusterConfig(engine=cfg, policy="hash", partitions=1, batch_size=7, max_in_flight=3,
                            name=f"halves-{time_window}", state_dir=str(tmp_path), checkpoint_every=3600,
                            options={"runtime": "inproc", "durable": True})
    cl = rc.Cluster.start(ccfg, fresh=True)
    part = cl._coord.local.parts[0].local
    assert part.halves and isinstance(part.core, HalvesCore)
    eng, brute = rc.Engine(cfg), BruteForceEngine(cfg)
    targets = {"engine": eng, "cluster": cl, "brute": brute}
    live: set[int] = set()
    play(targets, calls[:25], live=live)
    cl.checkpoint()
    play(targets, calls[25:40], live=live)                  # only in the log
    assert all(len(c.subs) > 0 for c in part.core.cores)
    assert {int(i) % 2 for c in part.core.cores for i in c.subs.ids[c.subs.live_slots()]} == {0, 1}
    st = cl.stats()["roles"]["partition"][0]
    assert 0 < st["halves_threaded_steps"] <= st["halves_steps"]
    assert st["subscriptions"] == len(live) == st["core_subscriptions"]
    cl._coord.local.store.close_log()                       # the cluster's processes are gone
    cl2 = rc.Cluster.start(ccfg)
    part2 = cl2._coord.local.parts[0].local
    assert isinstance(part2.core, HalvesCore) and len(part2.core.subs) == len(live)
    assert cl2.stats()["recovery"]["recoveries"][-1]["replayed_calls"] > 0
    targets["cluster"] = cl2
    play(targets, calls[40:], live=live)
    assert cl2.stats()["roles"]["partition"][0]["halves_threaded_steps"] > 0
    cl2.shutdown()
    off = rc.Cluster.start(ccfg.replace(name=f"halves-off-{time_window}", state_dir=None,
                                        options={"runtime": "inproc", "solo_halves": False}))
    assert type(off._coord.local.parts[0].local.core) is SkypeCore
    off.shutdown()


@pytest.mark.parametrize("free", [False, True], ids=["no-core", "free"])
def test_only_partitions_halves_back_off_from_two_threads_where_no_core_is_free(free, monkeypatch):
    """The halves' verdict in a cluster: where neither each thread's CPU nor the process's
    says a second core ran, every verdict is "no free core" and the steps go back to one
    thread (1, 2, 4, ... steps: some steps still probe two); where both say free, no step
    leaves two threads. Equal to the engine and brute force after every call either way."""
    from rankcast.kinds.spatial.igpt import SideThread

    monkeypatch.setattr(SideThread, "MIN_OVERLAP", 0.0 if free else 1e9)
    monkeypatch.setattr(SideThread, "MIN_OWN", 0.0 if free else 1e9)
    cfg = _cfg(False)
    cl = rc.Cluster.start(rc.ClusterConfig(engine=cfg, policy="hash", partitions=1, batch_size=7, max_in_flight=3,
                                           name=f"halves-verdict-{free}", options={"runtime": "inproc"}))
    part = cl._coord.local.parts[0].local
    targets = {"engine": rc.Engine(cfg), "cluster": cl, "brute": BruteForceEngine(cfg)}
    play(targets, random_calls(4343, 60, time_window=False), live=set())
    st = cl.stats()["roles"]["partition"][0]
    side = part._side
    if free:
        assert side.verdicts[0] == 0 and side.verdicts[1] > 0
        assert st["halves_threaded_steps"] == st["halves_steps"]
    else:
        assert side.verdicts[1] == 0 and side.verdicts[0] >= 2
        assert 2 <= st["halves_threaded_steps"] < st["halves_steps"]
    cl.shutdown()


@pytest.mark.parametrize("seed", range(4))
def test_halves_updates_merge_on_two_threads_as_on_one(seed):
    """The halves' updates (id-ordered lists, some empty: a top-k that became empty) merged
    into one id order: ``merge_updates_beside`` (each half's rows copied on its own thread)
    gives exactly ``merge_updates`` and a sort of both halves' lists, also with a half
    without updates."""
    from concurrent.futures import ThreadPoolExecutor

    from rankcast.kinds.spatial.halves import merge_updates, merge_updates_beside

    rng = np.random.default_rng(seed)

    def half(h, n):
        ids = np.sort(rng.choice(np.arange(h, 4000, 2), n, replace=False)).astype(np.int64)
        off = np.zeros(n + 1, np.int64)
        off[1:] = np.cumsum(rng.integers(0, 6, n))
        base = int(rng.integers(0, 3))      # lists that start past row 0 of their arrays
        mid = rng.integers(0, 10**6, off[-1] + base).astype(np.int64)
        sc = rng.random(off[-1] + base)
        return ids, off + base, mid, sc

    sizes = [(300, 250), (0, 40), (40, 0), (0, 0)][seed]
    a, b = half(0, sizes[0]), half(1, sizes[1])
    ids = np.concatenate([a[0], b[0]])
    lists = {int(i): (x[2][x[1][k]:x[1][k + 1]], x[3][x[1][k]:x[1][k + 1]])
             for x in (a, b) for k, i in enumerate(x[0])}
    want_ids = np.sort(ids)
    want_off = np.concatenate([[0], np.cumsum([len(lists[int(i)][0]) for i in want_ids])]).astype(np.int64)
    want_mid = np.concatenate([lists[int(i)][0] for i in want_ids] + [np.zeros(0, np.int64)])
    want_sc = np.concatenate([lists[int(i)][1] for i in want_ids] + [np.zeros(0)])
    with ThreadPoolExecutor(1) as pool:
        for got in (merge_updates(*a, *b), merge_updates_beside(a, b, pool)):
            for g, w in zip(got, (want_ids, want_off, want_mid, want_sc)):
                assert g.dtype == w.dtype and np.array_equal(g, w)


def test_partitions_hold_the_window_only_where_it_pays():
    """A location cluster that may split, ``options["solo"]`` False, more partitions than
    ``solo_partitions``, or a policy that replicates subscriptions or routes messages keeps
    window shards."""
    cfg = _cfg(False)
    for policy, P, extra, want in (("location", 1, {}, False), ("location", 1, {"max_partitions": 1}, True),
                                   ("hash", 1, {"options": {"solo": False}}, False),
                                   ("hash", 2, {}, True), ("location", 2, {"max_partitions": 2}, True),
                                   ("location", 2, {}, False), ("hash", 3, {}, False),
                                   ("hash", 3, {"options": {"solo_partitions": 3}}, True),
                                   ("hash", 2, {"options": {"solo_partitions": 1}}, False),
                                   ("keyword", 2, {}, False), ("prefix", 2, {}, False)):
        kw = {**extra, "options": {"runtime": "inproc", **extra.get("options", {})}}
        cl = rc.Cluster.start(rc.ClusterConfig(engine=cfg, policy=policy, partitions=P, **kw))
        co = cl._coord.local
        assert co.solo is want and (len(co.shards) == 0) is want, (policy, P, extra)
        cl.shutdown()


@pytest.mark.parametrize("time_window", [False, True], ids=["count", "time"])
def test_prefix_replicas_index_their_placed_terms_as_prefixes_grow(time_window):
    """A prefix replica indexes every term placed in its partition, beyond its routed prefix
    too, so one kept when the prefix grows already indexes the new prefix terms: with long
    term lists whose prefixes grow many times (reallocations), through a refit of the
    ranges, every top-k stays the engine's and brute force's after every call. A replica
    indexing only its prefix's placed terms misses messages that arrived before the prefix
    reached a term of its partition, and fails here."""
    cfg = (rc.EngineConfig(bounds=BOUNDS, window_seconds=10.0, batch_size=16) if time_window
           else rc.EngineConfig(bounds=BOUNDS, window=60, batch_size=16))
    reallocs = 0
    for seed in range(4):
        calls = random_calls(2000 + seed, 50, time_window=time_window, vocab=30, sub_terms=(3, 7),
                             msg_terms=(1, 6), alphas=(0.0, 0.1, 0.3, None), max_publish=30, invalid=False)
        cl = _start("prefix", cfg, (3, 2, 1, 2, 5, 3))
        eng = rc.Engine(cfg)
        targets = {"engine": eng, "cluster": cl, "brute": BruteForceEngine(cfg)}
        live: set[int] = set()
        play(targets, calls[:30], live=live)
        _placed_terms_indexed(cl)
        assert cl.rebalance(threshold=0.0)["action"] == "rebalance"
        assert cl.topk_many(sorted(live)) == {i: eng.topk(i) for i in sorted(live)}
        play(targets, calls[30:], live=live)
        _placed_terms_indexed(cl)
        reallocs += cl.stats()["reallocations"]
    assert reallocs > 30, "the workload must exercise reallocation"


def test_prefix_distributors_with_their_own_policy_copy_stay_exact():
    """Under Ray every distributor routes with its own copy of the policy; in process they
    share the coordinator's. Here each gets a copy, as under Ray: the groups the prefix
    policy gives terms first met in subscriptions must reach the copies before the steps
    that route by them (``Coordinator._send_assignments``), or messages sharing only such
    terms with a subscription miss its replicas."""
    import copy
    cfg = rc.EngineConfig(bounds=BOUNDS, window=60, batch_size=16)
    for seed in range(3):
        calls = random_calls(2000 + seed, 40, vocab=60, sub_terms=(2, 6), msg_terms=(1, 6), max_publish=30)
        cl = rc.Cluster.start(rc.ClusterConfig(engine=cfg, policy="prefix", partitions=6, window_shards=2,
                                               distributors=2, batch_size=5, max_in_flight=3,
                                               options={"runtime": "inproc"}))
        for d in cl._coord.local.dists:
            d.local.policy = copy.deepcopy(d.local.policy)
        play({"engine": rc.Engine(cfg), "cluster": cl, "brute": BruteForceEngine(cfg)}, calls)


def test_prefix_reallocation_plan_against_its_definition():
    """``Coordinator._plan_reallocs`` (grouped by partition) against a row-by-row statement of
    what it plans: requests from several partitions, several per subscription, some for a
    prefix longer than the routed one (grown to the longest asked), some not (stale). A grown
    subscription is added with its new length and indexed terms where its new prefix places
    it and was not before, and its kept replicas learn the new length; every partition that
    asked for a stale one learns the current length, once per subscription."""
    cfg = _cfg(False)
    cl = _start("prefix", cfg, (6, 2, 1, 2, 5, 3))
    calls = [c for c in random_calls(41, 40, vocab=30, sub_terms=(4, 8), invalid=False) if c.op != "unsubscribe"]
    play({"cluster": cl}, calls)
    coord = cl._coord.local
    coord.quiesce()
    policy = coord.policy
    rng = np.random.default_rng(3)
    # routed prefixes of every length (this workload's grew to whole term lists): only the
    # plan reads them, no step runs after it
    lens = {}
    for h in coord.parts:
        s = h.local.core.subs
        lens.update(zip(s.ids[s.live_slots()].tolist(), s.tlen[s.live_slots()].tolist()))
    coord.live.update((i, int(rng.integers(1, n + 1))) for i, n in lens.items())
    reqs = []
    for p, h in enumerate(coord.parts):
        s = h.local.core.subs
        slots = s.live_slots()
        slots = slots[rng.random(len(slots)) < 0.6]
        if len(slots):
            batch = s.batch(slots)
            top = np.diff(batch.offsets)
            need = rng.integers(1, top + 1)
            reqs.append({"subs": batch, "plen": need, "pos": 0, "partition": p})
    cur = dict(coord.live)
    rows = {}
    for r in reqs:
        for i, sid in enumerate(r["subs"].ids.tolist()):
            rows.setdefault(sid, []).append((r["partition"], int(r["plen"][i]), r["subs"].take([i])))
    want_add, want_plen = set(), set()
    grown = 0
    for sid, asks in rows.items():
        need = max(a[1] for a in asks)
        if need > cur[sid]:
            grown += 1
            one = asks[0][2]
            old = set(policy.route_subscriptions(one, np.array([cur[sid]])).row(0).tolist())
            new = policy.route_subscriptions(one, np.array([need]))
            where = policy.placement(one, np.array([need]))
            for p in new.row(0).tolist():
                if p in old:
                    want_plen.add((p, sid, need))
                else:
                    want_add.add((p, sid, need, int(new.counts()[0]), tuple((where == p).tolist())))
        else:
            want_plen.update((p, sid, cur[sid]) for p, _, _ in asks)
    assert grown > 5 and len(rows) - grown > 5, "the requests must hold grown and stale subscriptions"
    coord.pending_ops = {}
    coord.realloc_queue = reqs
    coord._plan_reallocs()
    got_add, got_plen, n_plen = set(), set(), 0
    for p, ops in coord.pending_ops.items():
        for o in ops:
            if o.add is not None:
                lens = np.diff(o.add.offsets)
                for i, sid in enumerate(o.add.ids.tolist()):
                    a, b = o.add.offsets[i], o.add.offsets[i + 1]
                    assert lens[i] == len(o.add.term_ids[a:b])
                    got_add.add((p, sid, int(o.add_plen[i]), int(o.add_replicas[i]),
                                 tuple(o.add_indexed[a:b].tolist())))
            if o.plen_ids is not None:
                n_plen += len(o.plen_ids)
                got_plen.update(zip([p] * len(o.plen_ids), o.plen_ids.tolist(), o.plen.tolist()))
    assert got_add == want_add
    assert got_plen == want_plen and n_plen == len(want_plen)


@pytest.mark.parametrize("time_window", [False, True])
def test_warm_asks_the_one_walk_question(monkeypatch, time_window):
    """A role's warm-up (``warm_spatial``) reaches the kernel that answers a few
    subscriptions' questions to a full window in one call (``window._walk``, a partition's
    re-evaluations in a stream); otherwise that kernel is loaded inside the stream. A count
    window too small for the question skips it."""
    from rankcast.kinds.spatial.roles.partition import warm_spatial
    from rankcast.kinds.spatial import window

    calls = []
    real = window._walk

    def spy(*args):
        calls.append(len(args[0]) - 1)
        return real(*args)
    monkeypatch.setattr(window, "_walk", spy)
    cfg = rc.EngineConfig(bounds=BOUNDS, window_seconds=60.0) if time_window else \
        rc.EngineConfig(bounds=BOUNDS, window=2000)
    warm_spatial(cfg)
    assert calls and min(calls) == 1, calls
    calls.clear()
    warm_spatial(rc.EngineConfig(bounds=BOUNDS, window=40))
    assert not calls


def test_warm_loads_the_buffers_compaction(monkeypatch):
    """A role's warm-up (``warm_spatial``) calls the buffers' compaction kernel with the
    argument types a core's own compaction passes: otherwise a partition loads it at its
    first compaction, inside a stream."""
    import numba
    from rankcast.kinds.spatial.roles.partition import warm_spatial
    from rankcast.kinds.spatial.testing import random_calls
    from rankcast.kinds.spatial import core, skyband

    seen = []
    real = skyband.compact

    def spy(*args):
        seen.append(tuple(numba.typeof(a) for a in args))
        return real(*args)
    monkeypatch.setattr(skyband, "compact", spy)
    cfg = rc.EngineConfig(bounds=BOUNDS, window=2000)
    warm_spatial(cfg)
    warmed = set(seen)
    assert warmed
    seen.clear()
    eng = rc.Engine(cfg)
    for call in random_calls(1, 30, bounds=BOUNDS, time_window=False, invalid=False):
        getattr(eng, call.op)(call.arg)
    # a pool whose every row was handed out, most of them garbage: the core compacts it
    monkeypatch.setattr(core.SkypeCore, "COMPACT_FROM", 0)
    eng.core.buf.used = len(eng.core.buf.bi)
    eng.core._maybe_compact()
    assert seen, "no compaction"
    assert set(seen) <= warmed


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_window_ids_follow_the_window_through_a_checkpoint(seed):
    """The coordinator's window ids (message id -> sequence number, dropped as they expire)
    equal a plain model after every call of random sizes and expiries, and a pickled copy
    (as a checkpoint keeps it: two arrays) goes on exactly as the original."""
    import pickle

    from rankcast.kinds.spatial.roles.coordinator import WindowIds

    rng = np.random.default_rng(seed)
    win, model = WindowIds(), {}
    seq, next_id = 0, 0
    for step in range(200):
        n = int(rng.integers(1, 40))
        ids = rng.permutation(np.arange(next_id, next_id + 2 * n))[:n].astype(np.int64)
        next_id += 2 * n
        seqs = np.arange(seq, seq + n, dtype=np.int64)
        seq += n
        upto = seq - 1 - int(rng.integers(0, 150))
        win.add(ids, seqs, upto)
        model.update(zip(ids.tolist(), seqs.tolist()))
        model = {i: s for i, s in model.items() if s > upto}
        assert win.ids == model
        probe = np.concatenate([ids, np.array(list(model)[:5] + [-1], np.int64)])
        assert win.contains(probe).tolist() == [int(i) in model for i in probe]
        if step % 37 == 5:
            win = pickle.loads(pickle.dumps(win))
            assert win.ids == model and len(win) == len(model)


@pytest.mark.parametrize("load", [True, False], ids=["bulk-load", "subscribe"])
def test_prefix_subscriptions_start_at_the_prefix_their_initial_top_k_needs(load, monkeypatch):
    """Under a prefix policy a new subscription is placed at the prefix its initial top-k
    needs: the coordinator searches the window shards once per subscription and every
    replica installs that answer, where placing at one term searched again for every
    replica reallocation then added. Both place the same replicas, and both equal the
    engine's and brute force's top-k."""
    got = {}
    for searched in (True, False):
        monkeypatch.setattr(Coordinator, "INITIAL_LISTS", searched)
        cl, eng, subs = _streamed_pair(lambda i: f"w{i % 4} w{i % 3} w{i % 6}",
                                       lambda i: f"w{i % 4} w{i % 5} w{i % 6} zz{i % 3}",
                                       policy="prefix", partitions=3, window_shards=2)
        brute = BruteForceEngine(eng.cfg)
        brute.publish([rc.Message(i, (i % 7) / 7, (i % 5) / 5, text=f"w{i % 4} w{i % 3} w{i % 6}")
                       for i in range(30)])
        searches = lambda: sum(s["searches"] for s in cl.stats()["roles"]["shard"])
        before = searches()
        if load:
            assert cl.load_subscriptions(subs, batch_rows=10) == subs.num_rows
        else:
            cl.subscribe(subs)
        eng.subscribe(subs)
        brute.subscribe(subs)
        n = subs.num_rows
        assert [cl.topk(i) for i in range(n)] == [eng.topk(i) for i in range(n)] == [brute.topk(i) for i in range(n)]
        st = cl.stats()
        got[searched] = (searches() - before, st["reallocations"], st["replication_ratio"])
        cl.shutdown()
    assert got[True][0] == 2 * n, "each shard searched once per subscription"
    assert got[False][0] > got[True][0] and got[False][1] > 0 == got[True][1]
    assert got[True][2] == got[False][2] > 1

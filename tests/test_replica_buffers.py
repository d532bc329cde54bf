"""A cluster replica's buffer depth (the cost model's arrival share, skyband.apply_reevals):
a replica gets only part of the arrivals that could refill its buffer, so the cost model
sizes it for none and cuts its re-evaluation deeper; results stay exact either way."""
from __future__ import annotations

import numpy as np

import rankcast as rc
from rankcast.kinds.spatial.testing import play, random_calls
from rankcast.kinds.spatial.columns import SubscriptionBatch
from rankcast.kinds.spatial.core import REPLICA_CANDIDATES, SkypeCore
from rankcast.kinds.spatial.window import CandidateLists

BOUNDS = (0.0, 0.0, 10.0, 10.0)


def _two_same_subscriptions():
    return SubscriptionBatch(ids=np.array([1, 2]), x=np.array([5.0, 5.0]), y=np.array([5.0, 5.0]),
                                          k=np.array([3, 3]), alpha=np.array([0.5, 0.5]),
                                          offsets=np.array([0, 1, 2]), term_ids=np.array([0, 0]),
                                          weights=np.array([1.0, 1.0]))


def test_no_arrival_share_cuts_deeper_with_the_same_top_k():
    core = SkypeCore(rc.EngineConfig(bounds=BOUNDS, window=1000))
    slots = core.add(_two_same_subscriptions())
    core.set_arrival_share(slots[1:], 0.0)
    core.c_topk_seconds = 100 * core.c_row_seconds      # C_topk of 100 buffer rows (Eq. 10)
    n = 12                                   # the same candidates for both, best first
    sc = np.linspace(0.9, 0.5, n)
    seq = np.arange(n, dtype=np.int64)      # the best oldest: no row dominates another
    one = (np.arange(n, dtype=np.int64), seq, np.zeros(n), sc)
    cands = CandidateLists(np.array([0, n, 2 * n]), np.concatenate([seq, seq]),
                           np.concatenate([one[0], one[0]]), np.zeros(2 * n), np.concatenate([sc, sc]),
                           np.array([False, False]))
    more = core.apply_reevals(slots, cands, 1000)
    assert len(more) == 0
    rows_engine, rows_replica = (len(core.buffer(i)[0]) for i in (1, 2))
    assert (rows_engine, rows_replica) == (4, 7)
    assert core.subs.theta[slots[1]] < core.subs.theta[slots[0]]
    assert core.topk(1) == core.topk(2)


def test_replicas_ask_for_more_candidates():
    core = SkypeCore(rc.EngineConfig(bounds=BOUNDS, window=1000, candidate_extra=0))
    slots = core.add(_two_same_subscriptions())
    core.set_arrival_share(slots[1:], 0.0)
    asked, _, K = core.reeval_requests()
    assert asked.tolist() == slots.tolist()
    assert K.tolist() == [6, 6 * REPLICA_CANDIDATES] and REPLICA_CANDIDATES > 1


def test_replicas_get_no_arrival_share_and_stay_exact():
    cfg = rc.EngineConfig(bounds=BOUNDS, window=40, batch_size=16, candidate_extra=0)
    cl = rc.Cluster.start(rc.ClusterConfig(engine=cfg, policy="keyword", partitions=4, window_shards=2,
                                           distributors=1, aggregators=2, batch_size=7,
                                           options={"runtime": "inproc"}))
    calls = random_calls(11, 35)
    checks = play({"engine": rc.Engine(cfg), "cluster": cl}, calls)
    assert checks == len(calls)
    coord = cl._coord._obj
    held: dict[int, int] = {}
    for p in coord.parts:
        part = p._obj if hasattr(p, "_obj") else p
        live = part.core.subs.live_slots()
        for i in part.core.subs.ids[live].tolist():
            held[i] = held.get(i, 0) + 1
    seen = {True: 0, False: 0}
    for p in coord.parts:
        part = p._obj if hasattr(p, "_obj") else p
        s = part.core.subs
        live = s.live_slots()
        share = part.core.buf.arrival_share[live]
        replica = np.array([held[i] > 1 for i in s.ids[live].tolist()], bool)
        assert (share[replica] == 0.0).all() and (share[~replica] == 1.0).all()
        seen[True] += int(replica.sum())
        seen[False] += int((~replica).sum())
    assert seen[True] and seen[False]


def test_replicating_partitions_index_with_finer_leaves():
    """A keyword or prefix partition holds few replicas: its index takes the policy's smaller
    leaf capacity (``Policy.leaf_capacity``), a smaller one of the engine's stays, and the
    cluster's own configuration (its shards') keeps the engine's."""
    from rankcast.kinds.spatial.roles.policies import KeywordPolicy, PrefixPolicy
    engine = rc.EngineConfig(bounds=BOUNDS).leaf_capacity
    assert KeywordPolicy.leaf_capacity and KeywordPolicy.leaf_capacity < engine
    for policy, capacity, want in (("keyword", engine, KeywordPolicy.leaf_capacity),
                                   ("prefix", engine, PrefixPolicy.leaf_capacity), ("keyword", 7, 7)):
        cfg = rc.EngineConfig(bounds=BOUNDS, window=40, batch_size=16, candidate_extra=0, leaf_capacity=capacity)
        cl = rc.Cluster.start(rc.ClusterConfig(engine=cfg, policy=policy, partitions=2, window_shards=1,
                                               distributors=1, aggregators=1, batch_size=7,
                                               options={"runtime": "inproc"}))
        try:
            coord = cl._coord._obj
            assert coord.cfg.leaf_capacity == capacity
            for p in coord.parts:
                part = p._obj if hasattr(p, "_obj") else p
                assert part.core.index.capacity == want
        finally:
            cl.shutdown()

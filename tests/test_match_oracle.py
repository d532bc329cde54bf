"""Ranked matching: after every call, every rc.Match equals brute force (filter, sort by score
descending then id, take k), for every index and scoring, with churn between events."""
from __future__ import annotations

import numpy as np
import pytest

import rankcast as rc
from rankcast.baselines.matching import NaiveStabCore
from rankcast.config import INDEX_SCORINGS
from rankcast.testing import assert_matches_exact, random_events, random_expressions

INDEXES = ["ir-tree", "sopt-r-tree", "segment-tree", "interval-tree", "r-tree", "be-tree", "scan"]
SCORINGS = ["static", "relaxed", "weighted"]
_expressions, _events = random_expressions, random_events


def _run(index, scoring, seed, steps=30, core=None, driver="auto"):
    rng = np.random.default_rng(seed)
    cfg = rc.MatchConfig(scoring=scoring, index=index, k=5, branching=int(rng.choice([2, 3, 8])),
                         rebuild_fraction=0.2, rebuild_min=8, driver=driver)  # small: deltas and rebuilds happen
    m = rc.Matcher(cfg, core=core)
    live: dict[int, rc.Expression] = {}
    next_id, next_ev = 0, 0
    for step in range(steps):
        r = rng.random()
        if r < 0.35 or not live:
            new = _expressions(rng, next_id, int(rng.integers(1, 25)))
            next_id += len(new) + int(rng.integers(0, 3))
            m.subscribe(new)
            live.update((e.id, e) for e in new)
        elif r < 0.5:
            gone = [int(i) for i in rng.choice(list(live), int(rng.integers(1, max(2, len(live) // 3))), replace=False)]
            m.unsubscribe(gone)
            for i in gone:
                del live[i]
        evs = _events(rng, next_ev, int(rng.integers(1, 8)))
        next_ev += len(evs)
        k = int(rng.choice([1, 3, 5, 40]))        # 40: more than the matches
        got = m.publish(evs, k=k)
        assert_matches_exact(got, list(live.values()), evs, scoring, k)
        assert m.stats()["subscriptions"] == len(live)
    if live and rng.random() < 0.5:          # deletion down to empty, then refill
        m.unsubscribe(list(live))
        live.clear()
        evs = _events(rng, next_ev, 3)
        assert all(x.top == () for x in m.publish(evs))
        new = _expressions(rng, 10_000, 10)
        m.subscribe(new)
        evs = _events(rng, next_ev + 3, 5)
        assert_matches_exact(m.publish(evs, k=3), new, evs, scoring, 3)


@pytest.mark.parametrize("scoring", SCORINGS)
@pytest.mark.parametrize("index", INDEXES)
def test_matcher_equals_brute_force_after_every_call(index, scoring):
    if scoring not in INDEX_SCORINGS[index]:
        with pytest.raises(rc.InvalidInput, match="field 'index'"):
            rc.MatchConfig(scoring=scoring, index=index)
        return
    for seed in range(3):
        _run(index, scoring, seed)


# every driver (docs/matching.md) over the indexes it takes
DRIVERS = [("auto", "box"), ("auto", "paper"), ("auto", "pivot"), ("sopt-r-tree", "pivot"), ("ir-tree", "pivot"),
           ("interval-tree", "pivot"), ("segment-tree", "pivot")]


@pytest.mark.parametrize("scoring", SCORINGS)
@pytest.mark.parametrize("index,driver", DRIVERS)
def test_every_driver_equals_brute_force_after_every_call(index, driver, scoring):
    for seed in range(3):
        _run(index, scoring, 10 + seed, driver=driver)


@pytest.mark.parametrize("scoring", SCORINGS)
def test_naive_stabbing_baseline_equals_brute_force(scoring):
    _run("interval-tree", scoring, 7, core=NaiveStabCore)


def test_ties_break_by_smaller_id_and_k_above_matches():
    m = rc.Matcher(rc.MatchConfig(scoring="static", index="sopt-r-tree", k=3))
    m.subscribe([rc.Expression(i, [rc.Predicate("x", "between", (0, 10))], score=1.0) for i in (9, 3, 7, 1)])
    m.subscribe([rc.Expression(20, [rc.Predicate("x", "==", 10)], score=2.0)])
    (got,) = m.publish([rc.Event(1, {"x": 10})])
    assert got.top == ((20, 2.0), (1, 1.0), (3, 1.0))
    (got,) = m.publish([rc.Event(2, {"x": 10.5})], k=10)
    assert got.top == ()
    (got,) = m.publish([rc.Event(3, {"x": 0})], k=10)
    assert [i for i, _ in got.top] == [1, 3, 7, 9]


def test_stats_count_accesses_and_index():
    m = rc.Matcher(rc.MatchConfig(scoring="relaxed", index="ir-tree"))
    m.subscribe(_expressions(np.random.default_rng(1), 0, 200))
    m.publish(_events(np.random.default_rng(2), 0, 20))
    s = m.stats()
    assert s["index"] == "ir-tree" and s["events"] == 20 and s["subscriptions"] == 200
    assert s["sorted_accesses"] > 0 and s["random_accesses"] > 0 and s["nodes"] > 0


@pytest.mark.parametrize("index", ["sopt-r-tree", "ir-tree"])
def test_threshold_algorithm_drops_and_compacts_exactly(index):
    """relaxed on the paper's workload (ties everywhere: 100 distinct weights): the TA drops
    candidates whose upper bound is below the k-th score without checking them, and its
    indexes, which hold slots, are rebuilt when the table compacts; exact after every call."""
    from rankcast.ingest.match_workloads import zipf_workload
    w = zipf_workload(1500, 3, 12, seed=3)
    exprs = w.expressions()
    m = rc.Matcher(rc.MatchConfig(scoring="relaxed", index=index, k=10))
    m.subscribe(exprs)
    live = {e.id: e for e in exprs}
    rng = np.random.default_rng(4)
    evs = w.events()
    added = len(exprs)
    for step in range(4):
        got = m.publish(evs, k=10)
        assert_matches_exact(got, list(live.values()), evs, "relaxed", 10)
        gone = [int(i) for i in rng.choice(list(live), len(live) // 2, replace=False)]
        m.unsubscribe(gone)                 # halving the live set compacts the table
        for i in gone:
            del live[i]
        back = [live.get(i) or exprs[i] for i in gone[: len(gone) // 4]]
        m.subscribe(back)
        added += len(back)
        live.update((e.id, e) for e in back)
    s = m.stats()
    assert s["dropped"] > 0 and s["random_accesses"] < s["sorted_accesses"]
    assert m.core.table.n_slots < added       # compacted at least once

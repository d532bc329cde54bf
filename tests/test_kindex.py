"""The k-index baseline (rankcast.baselines.kindex): after every call, every rc.Match equals
brute force on integer-valued workloads with every enumerable operator, for static and
weighted scoring, with churn; predicates it cannot enumerate are refused without effect."""
from __future__ import annotations

import functools

import numpy as np
import pytest

import rankcast as rc
from rankcast.baselines.kindex import KIndexCore
from rankcast.testing import assert_matches_exact, random_events, random_expressions

SCORINGS = ["static", "weighted"]


def _num(rng):
    return int(rng.integers(0, 7))       # a small grid: ranges nest, repeat and touch


# k-index enumerates discrete values: no ordering operators
_expressions = functools.partial(random_expressions, num=_num, ops_num=("==", "!=", "in", "not in", "between"))
_events = functools.partial(random_events, num=_num)


def _matcher(scoring, k=5, **opts):
    core = functools.partial(KIndexCore, **opts) if opts else KIndexCore
    return rc.Matcher(rc.MatchConfig(scoring=scoring, index="scan", k=k), core=core)


def _run(scoring, seed, steps=25):
    rng = np.random.default_rng(seed)
    m = _matcher(scoring)
    live: dict[int, rc.Expression] = {}
    next_id, next_ev = 0, 0
    for step in range(steps):
        r = rng.random()
        if r < 0.4 or not live:
            new = _expressions(rng, next_id, int(rng.integers(1, 30)))
            next_id += len(new) + int(rng.integers(0, 3))
            m.subscribe(new)
            live.update((e.id, e) for e in new)
        elif r < 0.6:
            gone = [int(i) for i in rng.choice(list(live), int(rng.integers(1, max(2, len(live) // 3))), replace=False)]
            m.unsubscribe(gone)
            for i in gone:
                del live[i]
        evs = _events(rng, next_ev, int(rng.integers(1, 10)))
        next_ev += len(evs)
        k = int(rng.choice([1, 3, 5, 200]))        # 200: more than the matches
        assert_matches_exact(m.publish(evs, k=k), list(live.values()), evs, scoring, k)
        s = m.stats()
        assert s["subscriptions"] == s["expressions"] == len(live)
    # deletion down to empty, then refill
    m.unsubscribe(list(live))
    live.clear()
    assert m.stats()["postings"] == 0
    evs = _events(rng, next_ev, 3)
    assert all(x.top == () for x in m.publish(evs))
    new = _expressions(rng, 10_000, 10)
    m.subscribe(new)
    evs = _events(rng, next_ev + 3, 5)
    assert_matches_exact(m.publish(evs, k=3), new, evs, scoring, 3)


@pytest.mark.parametrize("scoring", SCORINGS)
def test_kindex_equals_brute_force_after_every_call(scoring):
    for seed in range(4):
        _run(scoring, seed)


@pytest.mark.parametrize("scoring", SCORINGS)
def test_ties_break_by_smaller_id_and_k_above_matches(scoring):
    m = _matcher(scoring, k=3)
    m.subscribe([rc.Expression(i, [rc.Predicate("x", "between", (0, 10))], score=1.0) for i in (9, 3, 7, 1)])
    m.subscribe([rc.Expression(20, [rc.Predicate("x", "==", 10, weight=2.0)], score=2.0)])
    (got,) = m.publish([rc.Event(1, {"x": 10})])
    assert got.top == ((20, 2.0), (1, 1.0), (3, 1.0))
    (got,) = m.publish([rc.Event(2, {"x": 11})], k=10)
    assert got.top == ()
    (got,) = m.publish([rc.Event(3, {"x": 0})], k=10)
    assert [i for i, _ in got.top] == [1, 3, 7, 9]
    for k in (1, 2, 3, 4):       # an equal bound must still be explored: smaller ids come later in size order
        (got,) = m.publish([rc.Event(4, {"x": 5})], k=k)
        assert [i for i, _ in got.top] == [1, 3, 7, 9][:k]


@pytest.mark.parametrize("scoring", SCORINGS)
def test_sizes_zero_list_and_absent_attributes(scoring):
    """Size-0 conjunctions (only != / not in) come from the Z list, and need their attributes."""
    m = _matcher(scoring)
    exprs = [rc.Expression(1, [rc.Predicate("c", "!=", "red")], score=3.0),
             rc.Expression(2, [rc.Predicate("c", "not in", ["red", "blue"]), rc.Predicate("x", "!=", 4)], score=2.0),
             rc.Expression(3, [rc.Predicate("c", "==", "blue"), rc.Predicate("x", "not in", [1, 2])], score=1.0),
             rc.Expression(4, [rc.Predicate("x", "in", [1, 2, 4]), rc.Predicate("y", "between", (3, 3))], score=4.0)]
    m.subscribe(exprs)
    evs = [rc.Event(0, {}), rc.Event(1, {"c": "blue"}), rc.Event(2, {"c": "blue", "x": 3}),
           rc.Event(3, {"c": "green", "x": 3}), rc.Event(4, {"c": "unseen", "x": 4, "y": 3}),
           rc.Event(5, {"c": "red", "x": 2, "y": 3}, weights={"x": 0.5, "y": 2.0}), rc.Event(6, {"x": 1})]
    for k in (1, 2, 10):
        assert_matches_exact(m.publish(evs, k=k), exprs, evs, scoring, k)


@pytest.mark.parametrize("scoring", SCORINGS)
def test_unsupported_predicates_raise_and_change_nothing(scoring):
    m = _matcher(scoring, max_enumerate=50)
    base = [rc.Expression(1, [rc.Predicate("x", "between", (0, 9))], score=1.0),
            rc.Expression(2, [rc.Predicate("c", "in", ["a", "b"]), rc.Predicate("x", "==", 3)], score=2.0)]
    m.subscribe(base)
    before = m.stats()
    evs = [rc.Event(0, {"x": 3, "c": "a"}), rc.Event(1, {"x": 5})]
    bad = [("<", 3), ("<=", 3), (">", 3), (">=", 3), ("between", (0.5, 3)), ("between", (1, 2.5)),
           ("between", (0, 50)), ("between", (-1e300, 1e300)), ("between", (2.0 ** 60, 2.0 ** 60 + 4096))]
    for op, v in bad:
        new = [rc.Expression(7, [rc.Predicate("c", "==", "a")]),
               rc.Expression(8, [rc.Predicate("c", "==", "b"), rc.Predicate("x", op, v)])]
        with pytest.raises(rc.InvalidInput, match=r"expression #1 \(id=8\): field 'predicates\[1\]'"):
            m.subscribe(new)
        after = m.stats()
        assert {k: after[k] for k in ("expressions", "postings", "index_bytes")} == \
               {k: before[k] for k in ("expressions", "postings", "index_bytes")}
        assert_matches_exact(m.publish(evs, k=5), base, evs, scoring, 5)
    m.subscribe([rc.Expression(8, [rc.Predicate("x", "between", (0, 49))])])      # 50 values: allowed
    assert m.stats()["postings"] == before["postings"] + 50


def test_relaxed_scoring_is_refused():
    with pytest.raises(rc.InvalidInput, match="field 'scoring'"):
        _matcher("relaxed")


@pytest.mark.parametrize("scoring", SCORINGS)
def test_non_integral_event_values(scoring):
    """A discrete domain: a non-integral value inside the hull of an attribute's ranges is
    refused; elsewhere (or on attributes without ranges) values compare exactly."""
    m = _matcher(scoring)
    exprs = [rc.Expression(1, [rc.Predicate("x", "between", (2, 6))]),
             rc.Expression(2, [rc.Predicate("x", "between", (10, 12))]),
             rc.Expression(3, [rc.Predicate("y", "in", [0.5, 1.5])]),
             rc.Expression(4, [rc.Predicate("y", "!=", 0.5), rc.Predicate("x", "==", 20)])]
    m.subscribe(exprs)
    for x in (2.5, 6.0000001, 9.5, 11.5):
        with pytest.raises(rc.InvalidInput, match=r"event #1 \(id=11\): field 'values'.*non-integral"):
            m.publish([rc.Event(10, {"x": 3}), rc.Event(11, {"x": x})])
    assert m.stats()["events"] == 0
    evs = [rc.Event(0, {"x": 1.5, "y": 0.5}), rc.Event(1, {"x": 12.5, "y": 1.5}), rc.Event(2, {"x": 20, "y": 0.25}),
           rc.Event(3, {"x": 6, "y": 0.5}), rc.Event(4, {"x": -3.25})]
    assert_matches_exact(m.publish(evs, k=5), exprs, evs, scoring, 5)


def test_driven_through_matcher_stats_and_pruning():
    m = _matcher("static", k=1)
    # size 2 (read first) with high scores, size 1 with lower ones: top-1 skips the size-1
    # partition whole, and the size-0 one (the Z list)
    m.subscribe([rc.Expression(i, [rc.Predicate("a", "between", (0, 9)), rc.Predicate("b", "==", 1)],
                               score=10.0 + i % 5) for i in range(50)])
    m.subscribe([rc.Expression(100 + i, [rc.Predicate("a", "in", [1, 2, 3])], score=float(i % 3)) for i in range(20)])
    m.subscribe([rc.Expression(200 + i, [rc.Predicate("c", "!=", "x")], score=1.0) for i in range(5)])
    s = m.stats()
    assert s["index"] == "k-index" and s["expressions"] == 75 and s["max_size"] == 2
    assert s["postings"] == 50 * 11 + 20 * 3 + 5 * 2      # ranges enumerated; size 0: a != entry and a Z entry
    assert s["index_bytes"] > 0
    (got,) = m.publish([rc.Event(0, {"a": 2, "b": 1, "c": "y"})])
    assert got.top == ((4, 14.0),)
    s = m.stats()
    assert s["events"] == 1 and s["partitions"] == 3 and s["partitions_pruned"] == 2
    assert s["candidates"] == 50                           # none of the 25 matches of sizes 1 and 0 read
    (got,) = m.publish([rc.Event(1, {"a": 2, "c": "y"})], k=3)
    assert got.top == ((102, 2.0), (105, 2.0), (108, 2.0))
    # a miss of every list: only the Z list's conjunctions are candidates (absent attribute c)
    s = m.stats()
    assert m.publish([rc.Event(2, {"a": 42})])[0].top == ()
    assert m.stats()["candidates"] == s["candidates"] + 5
    tab = m.publish([rc.Event(3, {"a": 1, "b": 1})], k=2, updates="arrow")
    assert tab.column("expression_id").to_pylist() == [4, 9]
    assert m.publish([rc.Event(4, {"a": 1})], k=2, updates="none") is None

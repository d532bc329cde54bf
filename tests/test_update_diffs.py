"""publish(..., updates="diff"): applied from the start (each subscription's list as
subscribe left it) with rc.apply_diffs, the diff stream reproduces after every call exactly
the lists topk returns and the whole-list form delivers; a list that did not change has no
row; no entry both leaves and enters a list in one call. Every kind's engine, with ties,
window slides, unsubscribes, churn, bad calls and snapshots."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import rankcast as rc
from rankcast.common.updates import diff_table
from rankcast.kinds.spatial.testing import random_calls

from .test_range_oracle import CONFIGS as RANGE_CONFIGS, Oracle as RangeOracle, _random_run
from .test_update_forms import updates_from_table

DIFF_COLUMNS = {"spatial": ["subscription_id", "rank", "message_id", "score", "sign"],
                "range": ["subscription_id", "rank", "object_id", "score", "sign"],
                "matching": ["event_id", "rank", "expression_id", "score", "sign"]}


def check_diff(before: dict, diffs: pa.Table, whole: pa.Table, after: dict, columns: list[str],
               by_key: bool = True) -> dict:
    """``diffs`` applied to a copy of ``before`` gives ``after`` for every key; its keys are
    exactly the whole-list table's (the changed lists), each once in a run, ascending
    (``by_key``; else in any order); a key's -1 rows come before its +1 rows, each by rank;
    nothing leaves and enters one list. Returns the lists after."""
    assert diffs.column_names == columns
    key, item = columns[0], columns[2]
    keys = diffs.column(key).to_pylist()
    changed = [k for k, _ in updates_from_table(whole, key, item)]
    runs = [k for i, k in enumerate(keys) if i == 0 or keys[i - 1] != k]
    assert (runs if by_key else sorted(runs)) == changed, "one run of rows per changed list"
    d = diffs.to_pydict()
    for k in runs:
        rows = [(s, r, i, sc) for kk, s, r, i, sc in zip(keys, d["sign"], d["rank"], d[item], d["score"]) if kk == k]
        signs = [s for s, *_ in rows]
        assert signs == sorted(signs), "-1 rows first"
        for sgn in (-1, 1):
            ranks = [r for s, r, *_ in rows if s == sgn]
            assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks)
        left = {(i, sc) for s, _, i, sc in rows if s < 0}
        entered = {(i, sc) for s, _, i, sc in rows if s > 0}
        assert not left & entered, "an entry that stays has no row"
    got = rc.apply_diffs({k: list(v) for k, v in before.items()}, diffs)
    for k, lst in got.items():
        assert lst == after[k], (k, lst, after[k])
    for k, lst in updates_from_table(whole, key, item):
        assert lst == after[k]
    return got


# ----------------------------------------------------------------------------- spatial-keyword

def _play_spatial(cfg, calls):
    diff, whole = rc.Engine(cfg), rc.Engine(cfg)
    lists: dict[int, list] = {}
    n_rows = 0
    for c in calls:
        try:
            if c.op == "subscribe":
                diff.subscribe(c.arg)
            elif c.op == "unsubscribe":
                diff.unsubscribe(c.arg)
            else:
                d = diff.publish(c.arg, updates="diff")
        except rc.InvalidInput:
            with pytest.raises(rc.InvalidInput):
                getattr(whole, c.op)(c.arg)
            continue
        if c.op == "subscribe":
            whole.subscribe(c.arg)
            lists.update((s.id, diff.topk(s.id)) for s in c.arg)    # where a subscriber's list starts
        elif c.op == "unsubscribe":
            whole.unsubscribe(c.arg)
            for i in c.arg:
                del lists[i]
        else:
            w = whole.publish(c.arg, updates="arrow")
            after = {s: diff.topk(s) for s in lists}
            lists = check_diff(lists, d, w, after, DIFF_COLUMNS["spatial"])
            n_rows += d.num_rows
        assert lists == {s: whole.topk(s) for s in lists}
    return n_rows


@pytest.mark.parametrize("seed", range(4))
def test_spatial_diffs_rebuild_every_list_after_every_call(seed):
    cfg = rc.EngineConfig(bounds=(0.0, 0.0, 10.0, 10.0), window=30, batch_size=7)
    assert _play_spatial(cfg, random_calls(seed, 50)) > 0


def test_spatial_diffs_under_a_time_window_and_large_calls():
    cfg = rc.EngineConfig(bounds=(0.0, 0.0, 10.0, 10.0), window=None, window_seconds=6.0, batch_size=5)
    assert _play_spatial(cfg, random_calls(11, 40, time_window=True, max_publish=60)) > 0


def test_spatial_diff_rows_of_a_small_stream():
    eng = rc.Engine(rc.EngineConfig(bounds=(0, 0, 10, 10), window=2))
    eng.subscribe([rc.Subscription(1, 0, 0, terms={"a": 1.0}, k=2), rc.Subscription(2, 9, 9, terms={"b": 1.0})])
    d = eng.publish([rc.Message(10, 0, 0, terms={"a": 1.0}), rc.Message(11, 0, 0, terms={"a": 1.0})],
                    updates="diff")
    s10, s11 = eng.topk(1)[1][1], eng.topk(1)[0][1]
    assert d.to_pylist() == [{"subscription_id": 1, "rank": 1, "message_id": 11, "score": s11, "sign": 1},
                             {"subscription_id": 1, "rank": 2, "message_id": 10, "score": s10, "sign": 1}]
    d = eng.publish([rc.Message(12, 5, 5, terms={"c": 1.0})], updates="diff")     # 10 slides out
    assert d.to_pylist() == [{"subscription_id": 1, "rank": 2, "message_id": 10, "score": s10, "sign": -1}]
    assert eng.publish([rc.Message(13, 5, 5, terms={"c": 1.0})], updates="diff").to_pylist() == [
        {"subscription_id": 1, "rank": 1, "message_id": 11, "score": s11, "sign": -1}]
    assert eng.publish([rc.Message(14, 5, 5, terms={"c": 1.0})], updates="diff").num_rows == 0
    assert eng.publish([], updates="diff").schema == diff_table([], [], [], [], []).schema


def test_spatial_diffs_continue_across_a_snapshot():
    cfg = rc.EngineConfig(bounds=(0.0, 0.0, 10.0, 10.0), window=25, batch_size=6)
    calls = random_calls(7, 40, invalid=False)
    eng = rc.Engine(cfg)
    lists: dict[int, list] = {}
    for i, c in enumerate(calls):
        if i == 20:
            eng = rc.Engine.restore(eng.snapshot())
        if c.op == "publish":
            rc.apply_diffs(lists, eng.publish(c.arg, updates="diff"))
        else:
            getattr(eng, c.op)(c.arg)
            if c.op == "subscribe":
                lists.update((s.id, eng.topk(s.id)) for s in c.arg)
            else:
                for s in c.arg:
                    del lists[s]
        assert lists == {s: eng.topk(s) for s in lists}


def test_a_core_without_snapshots_refuses_diffs_and_changes_nothing():
    from rankcast.baselines import BruteForceEngine
    eng = BruteForceEngine(rc.EngineConfig(bounds=(0, 0, 10, 10), window=5))
    if hasattr(eng.core, "take_update_diff"):
        pytest.skip("the brute-force core gives diffs")
    eng.subscribe([rc.Subscription(1, 0, 0, text="a", k=2)])
    with pytest.raises(rc.InvalidInput, match="field 'updates'"):
        eng.publish([rc.Message(1, 0, 0, text="a")], updates="diff")
    assert eng.stats()["window"] == 0


# ----------------------------------------------------------------------------- range top-k

class RangeDiffOracle(RangeOracle):
    """The range oracle with a twin engine that publishes diffs, applied to its own copy of
    every subscription's list and checked against the brute-force lists after every call."""

    pack_upto = None    # the store's entry-set bound: 0 keeps every leaf a column block

    def __init__(self, cfg):
        super().__init__(cfg)
        self.twin = rc.RangeEngine(cfg)
        if self.pack_upto is not None:
            self.twin.subs.pack_upto = self.pack_upto
        self.lists: dict[int, list] = {}
        self.rows = 0

    def subscribe(self, items):
        super().subscribe(items)
        self.twin.subscribe(items)
        self.lists.update((s.id, self.twin.topk(s.id)) for s in items)

    def unsubscribe(self, ids):
        super().unsubscribe(ids)
        self.twin.unsubscribe(ids)
        for i in ids:
            del self.lists[i]

    def publish(self, ups):
        before = dict(self.lists)
        got = super().publish(ups)
        d = self.twin.publish(ups, updates="diff")
        after = self.check()
        whole = pa.table({"subscription_id": [u.subscription_id for u in got for _ in (u.topk or [None])],
                          "rank": [r + 1 if u.topk else None for u in got for r in range(max(1, len(u.topk)))],
                          "object_id": [e[0] if e else None for u in got for e in (u.topk or [None])],
                          "score": [e[1] if e else None for u in got for e in (u.topk or [None])]})
        self.lists = check_diff(before, d, whole, after, DIFF_COLUMNS["range"], by_key=False)
        self.rows += d.num_rows
        return got


FAST_RANGE = {("paint-sparse", 0.0, True, None), ("paint-dense", 1.0, False, 0), ("unicast", 0.0, False, None)}


@pytest.mark.parametrize("method, epsilon, batch, pack_upto", [
    pytest.param(*c, p, marks=() if (*c, p) in FAST_RANGE else pytest.mark.slow)
    for c in RANGE_CONFIGS if c[1] in (0.0, 1.0) for p in (None, 0)])
def test_range_diffs_rebuild_every_list_after_every_call(method, epsilon, batch, pack_upto, monkeypatch):
    monkeypatch.setattr(RangeDiffOracle, "pack_upto", pack_upto)
    monkeypatch.setattr("tests.test_range_oracle.Oracle", RangeDiffOracle)
    for seed in range(2):
        for k in (1, 3, 8):
            o = _random_run(rc.RangeConfig(k=k, method=method, epsilon=epsilon, batch=batch), seed)
            assert isinstance(o, RangeDiffOracle) and o.rows > 0


def test_range_diff_rows_of_a_small_stream():
    eng = rc.RangeEngine(rc.RangeConfig(k=2))
    eng.subscribe([rc.RangeSubscription(1, 0.0, 10.0), rc.RangeSubscription(2, 20.0, 30.0)])
    assert eng.publish([rc.ObjectUpdate(5, 1.0, 3.0), rc.ObjectUpdate(6, 2.0, 4.0)], updates="diff").to_pylist() == [
        {"subscription_id": 1, "rank": 1, "object_id": 5, "score": 3.0, "sign": 1},
        {"subscription_id": 1, "rank": 2, "object_id": 6, "score": 4.0, "sign": 1}]
    # 6 moves ahead of 5: only its y changed, and its entry is (6, 4.0) no more
    assert eng.publish([rc.ObjectUpdate(6, None, 2.0)], updates="diff").to_pylist() == [
        {"subscription_id": 1, "rank": 2, "object_id": 6, "score": 4.0, "sign": -1},
        {"subscription_id": 1, "rank": 1, "object_id": 6, "score": 2.0, "sign": 1}]
    assert eng.publish([rc.ObjectUpdate(7, 25.0, 9.0)], updates="diff").to_pylist() == [
        {"subscription_id": 2, "rank": 1, "object_id": 7, "score": 9.0, "sign": 1}]
    assert eng.publish([rc.ObjectUpdate(8, 1.0, 50.0)], updates="diff").num_rows == 0     # not in a top 2
    assert eng.publish([rc.ObjectUpdate(6), rc.ObjectUpdate(5)], updates="diff").to_pylist() == [
        {"subscription_id": 1, "rank": 1, "object_id": 6, "score": 2.0, "sign": -1},
        {"subscription_id": 1, "rank": 2, "object_id": 5, "score": 3.0, "sign": -1},
        {"subscription_id": 1, "rank": 1, "object_id": 8, "score": 50.0, "sign": 1}]
    assert eng.stats()["subscriptions_changed"] == 4


# ----------------------------------------------------------------------------- ranked matching

def test_matching_diffs_are_each_events_list_entering():
    from rankcast.testing import random_events, random_expressions
    rng = np.random.default_rng(3)
    m = rc.Matcher(rc.MatchConfig(k=4))
    m.subscribe(random_expressions(rng, 0, 300))
    for i in range(5):
        events = random_events(rng, 100 * i, 40)
        for k in (None, 1, 7):
            objs = m.publish(events, k=k)
            d = m.publish(events, k=k, updates="diff")
            assert d.column_names == DIFF_COLUMNS["matching"]
            assert set(d.column("sign").to_pylist()) <= {1}
            got = rc.apply_diffs({}, d)
            assert got == {x.event_id: list(x.topk) for x in objs if x.topk}
            assert list(got) == [x.event_id for x in objs if x.topk]    # input order
    assert m.publish([], updates="diff").num_rows == 0


# ----------------------------------------------------------------------------- apply_diffs

def test_apply_diffs_refuses_rows_that_do_not_fit_the_lists():
    d = diff_table([1, 1], [2, 1], [7, 8], [0.5, 0.9], [-1, 1])
    assert rc.apply_diffs({1: [(3, 1.0), (7, 0.5)]}, d) == {1: [(8, 0.9), (3, 1.0)]}
    with pytest.raises(ValueError, match="item 7 is not at rank 2"):
        rc.apply_diffs({1: [(7, 0.5), (3, 1.0)]}, d)
    with pytest.raises(ValueError, match="past the list's end"):
        rc.apply_diffs({}, diff_table([4], [3], [1], [0.1], [1]))
    with pytest.raises(ValueError, match="columns"):
        rc.apply_diffs({}, pa.table({"a": [1]}))
    assert rc.apply_diffs({2: [(1, 1.0)]}, diff_table([2], [1], [1], [1.0], [-1])) == {2: []}


def test_a_cluster_of_whole_lists_refuses_the_diff_form_and_changes_nothing():
    """A cluster whose roles report whole lists (``ClusterConfig(updates="lists")``, the
    default) has no diffs to return (tests/test_cluster_diffs.py: a cluster of diffs)."""
    cfg = rc.EngineConfig(bounds=(0.0, 0.0, 10.0, 10.0), window=10)
    with rc.Cluster.start(rc.ClusterConfig(engine=cfg, partitions=2, window_shards=1, name="test-diff-refused",
                                           options={"runtime": "inproc"})) as cl:
        cl.subscribe([rc.Subscription(1, 0, 0, terms={"a": 1.0}, k=2)])
        with pytest.raises(rc.InvalidInput, match="field 'updates'.*'diff'"):
            cl.publish([rc.Message(1, 0, 0, terms={"a": 1.0})], updates="diff")
        with pytest.raises(rc.InvalidInput, match="field 'updates'.*'diff'"):
            cl.flush(updates="diff")
        assert cl.position() == 0 and cl.topk(1) == []

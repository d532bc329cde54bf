"""Every malformed input of the contract: the error, its message, and nothing changed."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import rankcast as rc

CFG = rc.EngineConfig(bounds=(0, 0, 10, 10), window=5)


def _engine(time_window=False):
    cfg = rc.EngineConfig(bounds=(0, 0, 10, 10), window_seconds=5.0) if time_window else CFG
    eng = rc.Engine(cfg)
    eng.subscribe([rc.Subscription(1, 1, 1, text="coffee shop", k=2)])
    eng.publish([rc.Message(100, 1, 1, text="coffee", t=1.0)])
    return eng


def _state(eng):
    return (eng.stats()["subscriptions"], eng.stats()["window"], eng.stats()["published"],
            eng.topk(1), len(eng.encoder.terms))


S = rc.Subscription
M = rc.Message
BAD_SUBS = [
    ([S(2, math.nan, 1, text="a")], "#0 (id=2)", "'x'"),
    ([S(2, 1, 11, text="a")], "#0 (id=2)", "'y'"),
    ([S(2, 1, 1, text="a"), S(3, math.inf, 1, text="a")], "#1 (id=3)", "'x'"),
    ([S(2, 1, 1, text="a", k=0)], "#0 (id=2)", "'k'"),
    ([S(2, 1, 1, text="a", k=2.5)], "#0 (id=2)", "'k'"),
    ([S(2, 1, 1, text="a", k=True)], "#0 (id=2)", "'k'"),
    ([S(2, 1, 1, text="a", alpha=1.5)], "#0 (id=2)", "'alpha'"),
    ([S(2, 1, 1, text="a", alpha=math.nan)], "#0 (id=2)", "'alpha'"),
    ([S(2, 1, 1, text="a", terms={"a": 1})], "#0 (id=2)", "text/terms"),
    ([S(2, 1, 1)], "#0 (id=2)", "text/terms"),
    ([S(2, 1, 1, terms={"": 1.0})], "#0 (id=2)", "'terms'"),
    ([S(2, 1, 1, terms={"a": 0.0})], "#0 (id=2)", "'terms'"),
    ([S(2, 1, 1, terms={"a": math.inf})], "#0 (id=2)", "'terms'"),
    ([S(2, 1, 1, terms={"a": -1.0})], "#0 (id=2)", "'terms'"),
    ([S(2, 1, 1, terms={})], "#0 (id=2)", "at least one term"),
    ([S(2, 1, 1, text="  ,, ")], "#0 (id=2)", "at least one term"),
    ([S(2**63, 1, 1, text="a")], "#0", "'id'"),
    ([S(2.0, 1, 1, text="a")], "#0", "'id'"),
    ([S(1, 1, 1, text="a")], "#0 (id=1)", "already subscribed"),
    ([S(5, 1, 1, text="a"), S(5, 2, 2, text="b")], "#1 (id=5)", "duplicate"),
    ([M(5, 1, 1, text="a")], "#0", "expected Subscription"),
    (42, "", "expected an iterable"),
]


@pytest.mark.parametrize("subs,where,field", BAD_SUBS)
def test_bad_subscriptions(subs, where, field):
    eng = _engine()
    before = _state(eng)
    with pytest.raises(rc.InvalidInput) as e:
        eng.subscribe(subs)
    assert where in str(e.value) and field in str(e.value)
    assert _state(eng) == before


BAD_MSGS = [
    ([M(1, -1, 1, text="a")], "#0 (id=1)", "'x'"),
    ([M(1, 1, 1, text="a"), M(1, 2, 2, text="b")], "#1 (id=1)", "duplicate"),
    ([M(100, 1, 1, text="a")], "#0 (id=100)", "in the window"),
    ([M(1, 1, 1, text="a", terms={"a": 1})], "#0 (id=1)", "text/terms"),
    ([M(1, 1, 1, terms={"a": "x"})], "#0 (id=1)", "'terms'"),
    ([M(1, 1, 1, text=3)], "#0 (id=1)", "'text'"),
    ([S(1, 1, 1, text="a")], "#0", "expected Message"),
]


@pytest.mark.parametrize("msgs,where,field", BAD_MSGS)
def test_bad_messages(msgs, where, field):
    eng = _engine()
    before = _state(eng)
    with pytest.raises(rc.InvalidInput) as e:
        eng.publish(msgs)
    assert where in str(e.value) and field in str(e.value)
    assert _state(eng) == before


BAD_TIMES = [   # under a time window, after a message at t=1.0
    ([M(1, 1, 1, text="a")], "#0 (id=1)"),                                   # t missing
    ([M(1, 1, 1, text="a", t=math.nan)], "#0 (id=1)"),                       # t not finite
    ([M(1, 1, 1, text="a", t=3.0), M(2, 1, 1, text="a", t=2.0)], "#1 (id=2)"),  # decreasing in call
    ([M(1, 1, 1, text="a", t=0.5)], "#0 (id=1)"),                            # before t_max
]


@pytest.mark.parametrize("msgs,where", BAD_TIMES)
def test_bad_times_under_time_window(msgs, where):
    eng = _engine(time_window=True)
    before = _state(eng)
    with pytest.raises(rc.InvalidInput) as e:
        eng.publish(msgs)
    assert where in str(e.value) and "'t'" in str(e.value)
    assert _state(eng) == before


def test_unsubscribe_unknown_is_atomic():
    eng = _engine()
    eng.subscribe([rc.Subscription(2, 1, 1, text="shop")])
    with pytest.raises(rc.UnknownSubscription) as e:
        eng.unsubscribe([2, 77])
    assert "77" in str(e.value)
    assert eng.stats()["subscriptions"] == 2
    with pytest.raises(rc.InvalidInput):
        eng.unsubscribe(["x"])
    with pytest.raises(rc.UnknownSubscription):
        eng.topk(77)
    eng.unsubscribe([2])
    with pytest.raises(rc.UnknownSubscription):
        eng.topk(2)


def test_tables_accepted_and_checked():
    eng = rc.Engine(CFG)
    df = pd.DataFrame({"id": [1, 2], "x": [1.0, 2.0], "y": [1.0, 2.0], "k": [3, 3],
                       "alpha": [0.5, 0.2], "text": ["a b", "b c"]})
    eng.subscribe(df)
    tbl = pa.table({"id": [10, 11], "x": [1.0, 2.0], "y": [1.0, 2.0],
                    "terms": pa.array([[("a", 1.0)], [("c", 2.0), ("b", 1.0)]],
                                      type=pa.map_(pa.string(), pa.float64()))})
    ups = eng.publish(tbl)
    assert {u.subscription_id for u in ups} == {1, 2}
    bad = df.assign(id=[3, 4], alpha=[0.1, 7.0])
    with pytest.raises(rc.InvalidInput, match=r"#1 \(id=4\).*'alpha'"):
        eng.subscribe(bad)
    assert eng.stats()["subscriptions"] == 2


def test_config_errors():
    with pytest.raises(rc.InvalidInput, match="bounds"):
        rc.EngineConfig(bounds=(0, 0, 0, 1))
    with pytest.raises(rc.InvalidInput, match="window"):
        rc.EngineConfig(bounds=(0, 0, 1, 1), window=0)
    with pytest.raises(rc.InvalidInput, match="window_seconds"):
        rc.EngineConfig(bounds=(0, 0, 1, 1), window_seconds=-1)
    with pytest.raises(rc.InvalidInput, match="candidate_extra"):
        rc.EngineConfig(bounds=(0, 0, 1, 1), candidate_extra=-1)
    with pytest.raises(rc.InvalidInput, match="candidate_factor"):
        rc.EngineConfig(bounds=(0, 0, 1, 1), candidate_factor=0.5)


def test_vocabulary_weights_and_order():
    v = rc.Vocabulary.fit(["a b", "a c", "a b d"])
    assert v.terms[-1] == "a"                   # most frequent gets the largest id
    w = v.weights("a a zzz")
    assert list(w)[-1] == "zzz"                 # unknown terms after known ones
    assert math.isclose(sum(x * x for x in w.values()), 1.0)
    assert v.idf("zzz") == max(v.idfs.max(), v.unknown_idf)


def test_columnar_batches_must_be_sorted_and_unit_length():
    """Pre-encoded columns skip the encoder, so the properties the index bounds rely on are
    checked: term ids increasing within a row, weights of unit length; nothing changes."""
    from rankcast.kinds.spatial.columns import MessageBatch, SubscriptionBatch

    eng = rc.Engine(rc.EngineConfig(bounds=(0, 0, 1, 1), window=10,
                                    vocabulary=rc.Vocabulary.fit(["a b c"])))
    w = np.array([0.6, 0.8, 1.0])

    def subs(term_ids, weights):
        return SubscriptionBatch(np.array([1, 2]), np.array([0.1, 0.2]), np.array([0.1, 0.2]),
                                 np.array([2, 2]), np.array([0.5, 0.5]), np.array([0, 2, 3]),
                                 np.asarray(term_ids, np.int64), np.asarray(weights, np.float64))

    with pytest.raises(rc.InvalidInput, match=r"subscription #0 \(id=1\).*increase"):
        eng.subscribe(subs([1, 0, 2], w))
    with pytest.raises(rc.InvalidInput, match=r"subscription #1 \(id=2\).*unit length"):
        eng.subscribe(subs([0, 1, 2], [0.6, 0.8, 0.5]))
    msgs = MessageBatch(np.array([7]), np.array([0.5]), np.array([0.5]), np.array([np.nan]),
                        np.array([0, 2]), np.array([0, 2]), np.array([1.0, 1.0]))
    with pytest.raises(rc.InvalidInput, match=r"message #0 \(id=7\).*unit length"):
        eng.publish(msgs)
    assert eng.stats()["subscriptions"] == 0 and eng.stats()["window"] == 0
    eng.subscribe(subs([0, 1, 2], w))
    assert eng.stats()["subscriptions"] == 2


@pytest.mark.parametrize("field,value", [("policy", "nope"), ("partitions", 0), ("window_shards", True),
                                         ("actor_cpus", 0.0), ("monitor_every", -1.0),
                                         ("monitor_every", float("nan")), ("rebalance_threshold", 0.5),
                                         ("max_partitions", 1), ("max_partitions", 2.5), ("coalesce", -1),
                                         ("coalesce", 1.5), ("coalesce", True)])
def test_cluster_config_fields_are_checked(field, value):
    cfg = rc.EngineConfig(bounds=(0, 0, 1, 1), window=10)
    with pytest.raises(rc.InvalidInput, match=f"field '{field}'"):
        rc.ClusterConfig(engine=cfg, **{"partitions": 2, field: value})


def test_cluster_config_partition_cap():
    cfg = rc.EngineConfig(bounds=(0, 0, 1, 1), window=10)
    c = rc.ClusterConfig(engine=cfg, partitions=3)
    assert c.max_partitions is None and c.partition_cap == 6
    assert c.replace(partitions=20).partition_cap == 40          # follows the partitions
    assert rc.ClusterConfig(engine=cfg, partitions=3, max_partitions=3).partition_cap == 3

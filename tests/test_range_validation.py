"""Range top-k: every malformed input is an InvalidInput naming the item and the field (an
unknown subscription an UnknownSubscription), and the call changes nothing."""
from __future__ import annotations

import math

import numpy as np
import pytest

import rankcast as rc

S, U = rc.RangeSubscription, rc.ObjectUpdate


def _engine():
    e = rc.RangeEngine(rc.RangeConfig(k=2))
    e.subscribe([S(1, 0.0, 10.0), S(2, 3.0, 4.0)])
    e.publish([U(10, 1.0, 5.0), U(11, 3.5, 2.0), U(12, 8.0, 1.0)])
    return e


def _state(e):
    return e.topk(1), e.topk(2), e.stats()["subscriptions"], e.stats()["objects"]


BAD_SUBS = [
    (S(5, 3.0, 1.0), "range subscription #1 (id=5): field 'hi': must be >= lo"),
    (S(5, math.nan, 1.0), "(id=5): field 'lo': must be finite"),
    (S(5, 0.0, math.inf), "(id=5): field 'hi': must be finite"),
    (S(5, None, 1.0), "field 'lo': must be a real number"),
    (S(5, True, 1.0), "field 'lo': must be a real number"),
    (S("a", 0.0, 1.0), "field 'id': must be an int64"),
    (S(2**63, 0.0, 1.0), "field 'id': must be an int64"),
    (S(1, 0.0, 1.0), "(id=1): field 'id': already subscribed"),
    (S(4, 0.0, 1.0), "(id=4): field 'id': duplicate id within the call"),
    ("nope", "expected RangeSubscription"),
]


@pytest.mark.parametrize("bad, msg", BAD_SUBS)
def test_bad_subscription_is_rejected_whole(bad, msg):
    e = _engine()
    before = _state(e)
    with pytest.raises(rc.InvalidInput) as err:
        e.subscribe([S(4, 0.0, 9.0), bad])
    assert msg in str(err.value)
    assert _state(e) == before
    with pytest.raises(rc.UnknownSubscription):
        e.topk(4)


BAD_UPDATES = [
    (U(20, 1.0), "object update #1 (id=20): field 'y': no live object with this id: a delete (y=None)"),
    (U(20, None, 1.0), "(id=20): field 'x': no live object"),
    (U(20), "(id=20): field 'y': no live object with this id: a delete"),
    (U(20, 1.0, math.nan), "(id=20): field 'y': must be finite"),
    (U(11, math.inf, 1.0), "(id=11): field 'x': must be finite"),
    (U(11, None, -math.inf), "(id=11): field 'y': must be finite"),
    (U(11, "3", 1.0), "field 'x': must be a real number"),
    (U(11, None, False), "field 'y': must be a real number"),
    (U(10, None, 0.0), "(id=10): field 'id': duplicate id within the call"),
    (U(1.5, 1.0, 1.0), "field 'id': must be an int64"),
    (("id", 3), "expected ObjectUpdate"),
]


@pytest.mark.parametrize("bad, msg", BAD_UPDATES)
def test_bad_update_is_rejected_whole(bad, msg):
    e = _engine()
    before = _state(e)
    with pytest.raises(rc.InvalidInput) as err:
        e.publish([U(10, None, 0.0), bad])
    assert msg in str(err.value)
    assert _state(e) == before
    assert e.publish([U(10, None, 0.0)])            # the good item was not applied before


def test_columns_nulls_mean_not_given_and_bad_rows_are_named():
    e = _engine()
    # 10 keeps its x, gets y 0.5; 12 has no y: deleted (its x is ignored)
    got = e.publish({"id": np.array([10, 12]), "x": np.array([np.nan, 3.2]), "y": np.array([0.5, np.nan])})
    assert e.topk(2) == [(11, 2.0)]
    assert e.topk(1) == [(10, 0.5), (11, 2.0)] and [u.subscription_id for u in got] == [1]
    with pytest.raises(rc.InvalidInput, match=r"object update #1 \(id=7\): field 'y'"):
        e.publish({"id": [3, 7], "x": [1.0, 2.0], "y": [1.0, np.inf]})
    with pytest.raises(rc.InvalidInput, match=r"range subscription #0 \(id=9\): field 'hi'"):
        e.subscribe({"id": [9], "lo": [2.0], "hi": [1.0]})


def test_unsubscribe_unknown_and_config():
    e = _engine()
    with pytest.raises(rc.UnknownSubscription, match="id=3"):
        e.unsubscribe([1, 3])
    assert e.stats()["subscriptions"] == 2
    with pytest.raises(rc.InvalidInput, match="duplicate"):
        e.unsubscribe([1, 1])
    for kw, field in (({"k": 0}, "k"), ({"k": True}, "k"), ({"method": "paint"}, "method"),
                      ({"epsilon": -0.1}, "epsilon"), ({"epsilon": math.nan}, "epsilon"),
                      ({"batch": 1}, "batch"), ({"method": "unicast", "epsilon": 0.5}, "epsilon")):
        with pytest.raises(rc.InvalidInput, match=f"field '{field}'"):
            rc.RangeConfig(**kw)
    with pytest.raises(rc.InvalidInput, match="RangeConfig"):
        rc.RangeEngine(rc.MatchConfig())

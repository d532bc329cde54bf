"""Ranked matching: every malformed input is an InvalidInput naming the item and the field, and
the call changes nothing (the matcher answers as before, attribute types included)."""
from __future__ import annotations

import math

import pytest

import rankcast as rc

P = rc.Predicate
GOOD = [rc.Expression(1, [P("age", ">=", 18), P("city", "==", "paris")], score=2.0),
        rc.Expression(2, [P("age", "between", (10, 30), 2.0)], score=1.0)]
EVENTS = [rc.Event(1, {"age": 20, "city": "paris"}), rc.Event(2, {"age": 12})]


def _matcher():
    m = rc.Matcher(rc.MatchConfig(scoring="weighted", index="interval-tree", k=5))
    m.subscribe(GOOD)
    return m


BAD_EXPRESSIONS = [
    (rc.Expression(5, [P("age", "~", 3)]), "expression #1 (id=5): field 'predicates[0].op'"),
    (rc.Expression(5, [P("age", "<", "ten")]), "field 'predicates[0].value'"),
    (rc.Expression(5, [P("age", "between", (5, 1))]), "lo <= hi"),
    (rc.Expression(5, [P("age", "between", (1,))]), "pair"),
    (rc.Expression(5, [P("age", ">", 1), P("age", "<", 9)]), "a second predicate on attribute 'age'"),
    (rc.Expression(5, [P("city", ">", "rome")]), "orders numbers"),
    (rc.Expression(5, [P("city", "==", 3)]), "attribute 'city' holds strings"),
    (rc.Expression(5, [P("age", "in", ["a", "b"])]), "attribute 'age' holds numbers"),
    (rc.Expression(5, [P("age", "in", [1, "b"])]), "not both"),
    (rc.Expression(5, [P("age", "in", [])]), "non-empty"),
    (rc.Expression(5, [P("age", "==", math.nan)]), "finite"),
    (rc.Expression(5, [P("age", "==", math.inf)]), "finite"),
    (rc.Expression(5, [P("age", "==", True)]), "finite number"),
    (rc.Expression(5, [P("age", "==", 1, -1.0)]), "field 'predicates[0].weight'"),
    (rc.Expression(5, [P("age", "==", 1, math.nan)]), "field 'predicates[0].weight'"),
    (rc.Expression(5, [P("age", "==", 1)], score=-2.0), "field 'score'"),
    (rc.Expression(5, [P("age", "==", 1)], score=math.inf), "field 'score'"),
    (rc.Expression(5, []), "at least one predicate"),
    (rc.Expression(5, [P("", "==", 1)]), "predicates[0].attr"),
    (rc.Expression(1, [P("age", "==", 1)]), "(id=1): field 'id': already subscribed"),
    (rc.Expression("x", [P("age", "==", 1)]), "field 'id': must be an int64"),
    (rc.Expression(2**63, [P("age", "==", 1)]), "field 'id': must be an int64"),
    ("not an expression", "expected rankcast.Expression"),
]


@pytest.mark.parametrize("bad, msg", BAD_EXPRESSIONS)
def test_bad_expression_is_rejected_whole(bad, msg):
    m = _matcher()
    before = m.publish(EVENTS)
    ok = rc.Expression(4, [P("age", "<", 100), P("size", "==", 1.0)])   # a good item first: not applied
    with pytest.raises(rc.InvalidInput) as e:
        m.subscribe([ok, bad])
    assert msg in str(e.value)
    assert m.publish(EVENTS) == before and m.stats()["subscriptions"] == 2
    m.subscribe([rc.Expression(4, [P("size", "==", "big")])])   # 'size' was not typed by the failed call


def test_duplicate_ids_within_a_call():
    m = _matcher()
    with pytest.raises(rc.InvalidInput, match=r"expression #1 \(id=7\): field 'id': duplicate"):
        m.subscribe([rc.Expression(7, [P("a", "==", 1)]), rc.Expression(7, [P("a", "==", 2)])])


BAD_EVENTS = [
    (rc.Event(3, {"age": "old"}), "event #1 (id=3): field 'values['age']': attribute 'age' holds numbers"),
    (rc.Event(3, {"age": math.nan}), "field 'values['age']': must be a finite number or a string"),
    (rc.Event(3, {"age": None}), "field 'values['age']'"),
    (rc.Event(3, {"city": 4}), "attribute 'city' holds strings"),
    (rc.Event(3, {"age": 3}, weights={"age": -1}), "field 'weights['age']'"),
    (rc.Event(3, {"age": 3}, weights={"size": 1}), "field 'weights['size']'"),
    (rc.Event(3, [("age", 3)]), "field 'values'"),
    (rc.Event(1, {"age": 3}), "(id=1): field 'id': duplicate id within the call"),
]


@pytest.mark.parametrize("bad, msg", BAD_EVENTS)
def test_bad_event_is_rejected_whole(bad, msg):
    m = _matcher()
    before = m.publish(EVENTS)
    published = m.stats()["published"]
    with pytest.raises(rc.InvalidInput) as e:
        m.publish([EVENTS[0], bad])
    assert msg in str(e.value)
    assert m.stats()["published"] == published and m.publish(EVENTS) == before


def test_unsubscribe_unknown_and_bad_ids_change_nothing():
    m = _matcher()
    before = m.publish(EVENTS)
    with pytest.raises(rc.UnknownSubscription, match="id=9"):
        m.unsubscribe([1, 9])
    with pytest.raises(rc.InvalidInput, match="duplicate"):
        m.unsubscribe([1, 1])
    with pytest.raises(rc.InvalidInput, match="int64"):
        m.unsubscribe(["1"])
    assert m.publish(EVENTS) == before
    m.unsubscribe([1])
    assert [x.top for x in m.publish(EVENTS)] == [((2, 2.0),), ((2, 2.0),)]


def test_config_and_publish_arguments():
    with pytest.raises(rc.InvalidInput, match="field 'scoring'"):
        rc.MatchConfig(scoring="fuzzy")
    with pytest.raises(rc.InvalidInput, match="field 'index'"):
        rc.MatchConfig(index="b-tree")
    with pytest.raises(rc.InvalidInput, match="field 'k'"):
        rc.MatchConfig(k=0)
    with pytest.raises(rc.InvalidInput, match="field 'k'"):
        _matcher().publish(EVENTS, k=0)
    with pytest.raises(rc.InvalidInput, match="expected a MatchConfig"):
        rc.Matcher(rc.EngineConfig(bounds=(0, 0, 1, 1)))


def test_limits_reject_oversized_items(monkeypatch):
    monkeypatch.setenv("RANKCAST_MAX_PREDICATES", "2")
    monkeypatch.setenv("RANKCAST_MAX_SET_VALUES", "3")
    m = _matcher()
    with pytest.raises(rc.InvalidInput, match="max_predicates=2"):
        m.subscribe([rc.Expression(9, [P("a", "==", 1), P("b", "==", 1), P("c", "==", 1)])])
    with pytest.raises(rc.InvalidInput, match="max_set_values=3"):
        m.subscribe([rc.Expression(9, [P("a", "in", [1, 2, 3, 4])])])
    with pytest.raises(rc.InvalidInput, match="max_predicates=2"):
        m.publish([rc.Event(1, {"a": 1, "b": 2, "c": 3})])

"""Event tables read column by column (Arrow parses the JSON texts) give exactly what the
row by row reading of the same events as objects gives: the batch, the attributes and string
codes a call adds; and every table the column reading is unsure of is read row by row,
whose error names the item and field."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

import rankcast as rc
from rankcast.ingest.match_tables import EVENT_SCHEMA, events_table
from rankcast.kinds.matching import predicates as pr
from rankcast.kinds.matching.warmup import random_events, random_expressions


def _both(table_or_rows, known=None):
    """encode_events of the table by columns (checked to be taken) and by rows."""
    def fresh():
        t = pr.AttributeTable()
        if known is not None:
            _, pend = pr.encode_expressions(known, t)
            t.commit(pend)
            _, pend = pr.encode_events(known_events, t)
            t.commit(pend)
        return t
    known_events = random_events(np.random.default_rng(1), 10_000, 30)
    tab = table_or_rows
    fast = pr._encode_event_table(tab, fresh(), rc.config.limits())
    slow = pr.encode_events(pr._table_rows(tab, "event"), fresh())
    return fast, slow


def _same(fast, slow):
    assert fast is not None, "the column reading declined a plain table"
    (fb, fp), (sb, sp) = fast, slow
    for f in ("ids", "off", "attr", "val", "weight"):
        a, b = getattr(fb, f), getattr(sb, f)
        assert a.dtype == b.dtype and np.array_equal(a, b), f
    assert fp.new_attrs == sp.new_attrs and fp.new_codes == sp.new_codes


@pytest.mark.parametrize("seed", range(6))
def test_column_reading_equals_row_reading(seed):
    rng = np.random.default_rng(seed)
    events = random_events(rng, 0, int(rng.integers(1, 300)))
    rng.shuffle(events)
    known = random_expressions(rng, 0, 50) if seed % 2 else None
    _same(*_both(events_table(events), known))


def test_new_attributes_are_numbered_as_the_row_reading_meets_them():
    rows = [{"id": 1, "values": json.dumps({"b": 1, "z": "x"})},
            {"id": 2, "values": json.dumps({"q": 2.5, "a": 3, "b": 4})},
            {"id": 3, "values": json.dumps({"y": "s", "q": 1})}]
    _same(*_both(pa.Table.from_pylist(rows, schema=EVENT_SCHEMA)))


def _table(values, weights=None, ids=None):
    n = len(values)
    return pa.Table.from_pylist([{"id": (ids or list(range(1, n + 1)))[i], "values": values[i],
                                  "weights": None if weights is None else weights[i]} for i in range(n)],
                                schema=EVENT_SCHEMA)


DOUBTFUL = [
    (_table(['{"a": null}']), "values['a']"),
    (_table(['{"a": NaN}']), "finite"),
    (_table(['{"a": true}']), "values['a']"),
    (_table(['{"a": [1]}']), "values['a']"),
    (_table(['{"a": {"b": 1}}']), "values['a']"),
    (_table(['{"a": 1, "a": 2}', '{"b": 1}']), None),          # json.loads keeps the last: valid
    (_table(['{"a": 1}', '{"a": "x"}']), "attribute 'a' holds numbers"),
    (_table(['{"a": 1}{"a": 2}', ' ']), "not valid JSON"),
    (_table(['']), "not valid JSON"),
    (_table(['[1, 2]']), "values"),
    (_table(['{"": 1}']), "non-empty"),
    (_table(['{"a": 1}'], ['{"b": 1}']), "weights['b']"),
    (_table(['{"a": 1}'], ['{"a": -1}']), "weights['a']"),
    (_table(['{"a": 1}'], ['{"a": "x"}']), "weights['a']"),
    (_table(['{"a": 1}', '{"a": 2}'], ids=[4, 4]), "duplicate id"),
    (_table(['{"a": "' + "x" * 100_001 + '"}']), "characters"),
    (_table(['{' + ", ".join(f'"a{i}": {i}' for i in range(1001)) + "}"]), "values"),
]


@pytest.mark.parametrize("table,error", DOUBTFUL, ids=range(len(DOUBTFUL)))
def test_a_doubtful_table_is_read_row_by_row(table, error):
    """The column reading declines (None) and the row reading decides: its error, or its
    batch for a table that is valid after all."""
    assert pr._encode_event_table(table, pr.AttributeTable(), rc.config.limits()) is None
    if error is None:
        pr.encode_events(table, pr.AttributeTable())
        return
    with pytest.raises(rc.InvalidInput, match=error.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        pr.encode_events(table, pr.AttributeTable())


def test_a_matcher_answers_tables_as_objects():
    rng = np.random.default_rng(3)
    exprs = random_expressions(rng, 0, 400)
    events = random_events(rng, 0, 200)
    for scoring in ("static", "relaxed", "weighted"):
        a, b = rc.Matcher(rc.MatchConfig(scoring=scoring, k=4)), rc.Matcher(rc.MatchConfig(scoring=scoring, k=4))
        a.subscribe(exprs)
        b.subscribe(exprs)
        assert a.publish(events_table(events)) == b.publish(events)

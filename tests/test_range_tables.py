"""Range subscription and object update tables (rankcast.ingest.range_tables): every source
form reads the same typed table, the engine takes it, and a bad row is named by position,
id, column and reason (with the file line or row when the source is a file)."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rankcast as rc
from rankcast.ingest.range_tables import (OBJECT_UPDATE_SCHEMA, RANGE_SUBSCRIPTION_SCHEMA, read_object_updates,
                                          read_range_subscriptions)

SUBS = {"id": [1, 2, 3], "lo": [0.0, 0.25, 0.5], "hi": [0.5, 0.75, 1.0]}
UPDS = {"id": [10, 11, 12, 10, 11], "x": [0.1, 0.6, 0.4, None, 0.9], "y": [3.0, 1.0, 2.0, 0.5, None]}


def _write(tmp_path, name, cols, fmt):
    path = tmp_path / f"{name}.{fmt}"
    if fmt == "parquet":
        pq.write_table(pa.table(cols), path)
    elif fmt == "csv":
        lines = [",".join(cols)] + [",".join("" if v is None else str(v) for v in row) for row in zip(*cols.values())]
        path.write_text("\n".join(lines) + "\n")
    else:
        path.write_text("".join(json.dumps(dict(zip(cols, row))) + "\n" for row in zip(*cols.values())))
    return path


def _forms(tmp_path, name, cols):
    yield pa.table(cols)
    yield pd.DataFrame(cols)
    for fmt in ("parquet", "csv", "jsonl"):
        yield _write(tmp_path, name, cols, fmt)


def test_every_form_reads_the_same_table(tmp_path):
    for src in _forms(tmp_path, "subs", SUBS):
        t = read_range_subscriptions(src)
        assert t.schema == RANGE_SUBSCRIPTION_SCHEMA and t.to_pydict() == SUBS, type(src)
    for src in _forms(tmp_path, "upds", UPDS):
        t = read_object_updates(src)
        assert t.schema == OBJECT_UPDATE_SCHEMA, type(src)
        assert t.column("id").to_pylist() == UPDS["id"]
        for c in ("x", "y"):      # null (or NaN from pandas) where not given
            got = [None if v is None or math.isnan(v) else v for v in t.column(c).to_pylist()]
            assert got == UPDS[c], (type(src), c)


def test_engine_takes_the_tables_as_it_takes_objects(tmp_path):
    a = rc.RangeEngine(rc.RangeConfig(k=2))
    b = rc.RangeEngine(rc.RangeConfig(k=2))
    a.subscribe(read_range_subscriptions(_write(tmp_path, "s", SUBS, "csv")))
    b.subscribe([rc.RangeSubscription(i, lo, hi) for i, lo, hi in zip(*SUBS.values())])
    upd = read_object_updates(_write(tmp_path, "u", UPDS, "parquet"))
    rows = list(zip(*UPDS.values()))
    for part, objs in ((upd.slice(0, 3), rows[:3]), (upd.slice(3), rows[3:])):   # an id once per call
        got_a = a.publish(part)
        got_b = b.publish([rc.ObjectUpdate(i, x, y) for i, x, y in objs])
        assert got_a == got_b
    assert all(a.topk(s) == b.topk(s) for s in SUBS["id"])
    assert a.topk(1) == [(10, 0.5), (12, 2.0)]      # 11 deleted


@pytest.mark.parametrize("kind, cols, fmt, where, item, column, reason", [
    ("subs", {"id": [1, 2, 3], "lo": [0.0, 0.6, 0.1], "hi": [1.0, 0.5, 0.2]}, "csv", "line 3", "#1 (id=2)", "hi",
     "must be >= lo"),
    ("subs", {"id": [1, 2, 3], "lo": [0.0, "abc", 0.1], "hi": [1.0, 0.5, 0.2]}, "csv", "line 3", "#1 (id=2)", "lo",
     "must be a real number"),
    ("subs", {"id": [1, 2, 3], "lo": [0.0, 0.1, None], "hi": [1.0, 0.5, 0.2]}, "parquet", "row 3", "#2 (id=3)", "lo",
     "missing value"),
    ("subs", {"id": [1, 2, 1], "lo": [0.0, 0.1, 0.2], "hi": [1.0, 0.5, 0.3]}, "jsonl", "line 3", "#2 (id=1)", "id",
     "duplicate id"),
    ("subs", {"id": [1, 2, 3], "lo": [0.0, 0.1, "-inf"], "hi": [1.0, 0.5, 0.3]}, "csv", "line 4", "#2 (id=3)", "lo",
     "must be finite"),
    ("upds", {"id": [1, "x7", 3], "x": [0.0, 0.1, 0.2], "y": [1.0, 0.5, 0.3]}, "csv", "line 3", "#1", "id",
     "must be an int64, got 'x7'"),
    ("upds", {"id": [1, 2, 3], "x": [0.0, 0.1, 0.2], "y": [1.0, "inf", 0.3]}, "csv", "line 3", "#1 (id=2)", "y",
     "must be finite"),
    ("upds", {"id": [1, 2, 3], "x": [0.0, "left", 0.2], "y": [1.0, 0.5, 0.3]}, "csv", "line 3", "#1 (id=2)", "x",
     "must be a real number"),
])
def test_bad_rows_are_named(tmp_path, kind, cols, fmt, where, item, column, reason):
    path = _write(tmp_path, kind, cols, fmt)
    read = read_range_subscriptions if kind == "subs" else read_object_updates
    with pytest.raises(rc.InvalidInput) as e:
        read(path)
    msg = str(e.value)
    label = "range subscription" if kind == "subs" else "object update"
    assert str(path) in msg and where in msg and f"{label} {item}" in msg, msg
    assert f"field '{column}'" in msg and reason in msg, msg


def test_missing_columns_and_in_memory_errors():
    with pytest.raises(rc.InvalidInput, match="missing column 'hi'"):
        read_range_subscriptions(pa.table({"id": [1], "lo": [0.0]}))
    with pytest.raises(rc.InvalidInput, match="needs an 'x' or a 'y' column"):
        read_object_updates(pa.table({"id": [1]}))
    with pytest.raises(rc.InvalidInput, match=r"range subscription #1 \(id=2\): field 'hi': must be >= lo"):
        read_range_subscriptions(pd.DataFrame({"id": [1, 2], "lo": [0.0, 0.5], "hi": [1.0, 0.25]}))
    t = read_range_subscriptions(pa.table({"id": [1], "lo": [2.0], "hi": [1.0]}), validate=False)
    assert t.num_rows == 1                      # schema checks only
    assert read_object_updates(pa.table({"id": np.arange(3), "y": [1.0, None, 2.0]})).column("x").null_count == 3


def test_packed_calls_keep_each_objects_order_and_the_final_objects():
    """A GeoNames update stream packed into calls of 100: each call at most 100 distinct ids,
    every row once, each object's rows in order; the calls applied in turn to an engine leave
    the objects the stream leaves (and equal brute force)."""
    from rankcast.baselines.rangetopk import brute_topk
    from rankcast.ingest.range_tables import final_objects, packed_calls
    from rankcast.ingest.range_workloads import geonames_range_workload

    subs, ups = geonames_range_workload(600, 40, 3000, seed=3)
    ids = ups.column("id").to_numpy()
    calls = packed_calls(ids, 100)
    assert sorted(np.concatenate(calls).tolist()) == list(range(len(ids)))
    assert all(len(c) <= 100 and len(np.unique(ids[c])) == len(c) for c in calls)
    assert sum(len(c) == 100 for c in calls) >= len(calls) - 3
    where = np.empty(len(ids), np.int64)
    for n, c in enumerate(calls):
        where[c] = n
    for i in np.unique(ids):
        assert np.all(np.diff(where[ids == i]) > 0)          # an object's updates, in order, a call each
    with pytest.raises(ValueError, match="size"):
        packed_calls(ids, 0)
    eng = rc.RangeEngine(rc.RangeConfig(k=3))
    eng.subscribe(subs)
    for c in calls:
        eng.publish(ups.take(pa.array(c)))
    final = final_objects(ups)
    objs = dict(zip(final.column("id").to_pylist(), zip(final.column("x").to_pylist(), final.column("y").to_pylist())))
    assert eng.stats()["objects"] == len(objs)
    for i, lo, hi in zip(*(subs.column(c).to_pylist() for c in ("id", "lo", "hi"))):
        assert eng.topk(i) == brute_topk(objs, lo, hi, 3)

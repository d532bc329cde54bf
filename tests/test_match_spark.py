"""Ranked matching through Spark (RayDP): expressions bulk-loaded from Parquet and from a
Spark DataFrame, events replayed from JSONL, and the offline brute-force join in Spark agreeing
with the live answers; bad tables load nothing."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from rankcast import cli

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


@pytest.mark.parametrize("index", ["sopt-r-tree", "be-tree"])
def test_load_replay_and_offline_evaluation(spark, ray_session, workload, tmp_path, index):
    exprs, events = workload
    pq.write_table(expressions_table(exprs), tmp_path / "exprs.parquet")
    _write_jsonl(tmp_path / "events.jsonl", events)
    mcfg = rc.MatchConfig(scoring="weighted", index=index, k=5)
    m = rc.Matcher(mcfg)
    m.subscribe(exprs)
    want = m.publish(events)
    ccfg = rc.ClusterConfig(engine=mcfg, policy="attribute", partitions=2, actor_cpus=0.05, name=f"match-spark-{index}",
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



def _cli(argv, capsys):
    code = cli.main(argv)
    cap = capsys.readouterr()
    return code, (json.loads(cap.out) if code in (0, 1) else cap.err)


def test_cli_load_replay_evaluate_ranked_matching(spark, ray_session, workload, tmp_path, capsys):
    """rankcast load expressions / replay / evaluate on a ranked-matching cluster and on a
    Matcher: 100% agreement with the join in Spark; expressions the cluster lost are
    reported (exit status 1); a subscription table for a matching cluster is refused."""
    exprs, events = workload
    xp, ep = tmp_path / "exprs.parquet", tmp_path / "events.jsonl"
    pq.write_table(expressions_table(exprs), xp)
    _write_jsonl(ep, events)
    ccfg = rc.ClusterConfig(engine=rc.MatchConfig(scoring="static", k=4), partitions=2, actor_cpus=0.05,
                            name="match-cli", namespace="rankcast-match-tests", state_dir=None)
    where = ["--cluster", "match-cli", "--namespace", "rankcast-match-tests"]
    cl = rc.Cluster.start(ccfg)
    try:
        code, out = _cli(["load", "expressions", str(xp), *where], capsys)
        assert code == 0 and out["loaded"] == len(exprs)
        code, out = _cli(["replay", str(ep), "--batch-rows", "40", *where], capsys)
        assert code == 0 and out["messages"] == len(events)
        code, rep = _cli(["evaluate", "--live", *where, "--expressions", str(xp), "--events", str(ep)], capsys)
        assert code == 0 and rep["agreement"] == 100.0 and rep["events"] == len(events)
        assert rep["target"] == "cluster" and rep["scoring"] == "static" and rep["k"] == 4
        assert cl.stats()["subscriptions"] == len(exprs)            # evaluating changed nothing
        code, err = _cli(["load", "subscriptions", str(xp), *where], capsys)
        assert code == 2 and "ranked matching" in err and "takes no subscriptions" in err
        cl.unsubscribe([e.id for e in exprs[::3]])                  # the live answers lose these
        code, rep = _cli(["evaluate", "--live", *where, "--expressions", str(xp), "--events", str(ep)], capsys)
        assert code == 1 and rep["agreement"] < 100.0 and rep["differing"], {k: rep[k] for k in ("agreement", "events")}
    finally:
        cl.shutdown()
    code, rep = _cli(["evaluate", "--expressions", str(xp), "--events", str(ep), "--scoring", "weighted",
                      "--k", "6", "--index", "ir-tree"], capsys)
    assert code == 0 and rep["agreement"] == 100.0 and rep["target"] == "matcher" and rep["k"] == 6

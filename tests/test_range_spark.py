"""Range top-k through Spark (RayDP): range subscriptions bulk-loaded from a Spark DataFrame
and from JSONL, the GeoNames object update stream replayed from Parquet (ids come back: the
replay cuts it into calls), the live lists equal rc.RangeEngine's and the brute-force
evaluation in Spark; the CLI's load / replay / evaluate; a bad row loads nothing."""
from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

import rankcast as rc
from rankcast import cli
from rankcast.ingest.evaluate import compare_ranges, exact_range_topk_spark
from rankcast.ingest.range_tables import distinct_runs
from rankcast.ingest.range_workloads import geonames_range_workload

RCFG = rc.RangeConfig(k=4, method="paint-sparse", epsilon=0.5)


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    subs, ups = geonames_range_workload(1500, 400, 1500, seed=3)
    d = tmp_path_factory.mktemp("range")
    pq.write_table(subs, d / "ranges.parquet")
    pq.write_table(ups, d / "updates.parquet", row_group_size=700)
    with open(d / "ranges.jsonl", "w") as f:
        for r in subs.to_pylist():
            f.write(json.dumps(r) + "\n")
    eng = rc.RangeEngine(RCFG)
    eng.subscribe(subs)
    for c in range(0, ups.num_rows, 500):        # the calls of a replay with batch_rows=500
        part = ups.slice(c, 500)
        for a, b in distinct_runs(part.column("id").to_numpy()):
            eng.publish(part.slice(a, b - a))
    return subs, ups, d, eng


def test_load_replay_and_offline_evaluation(spark, ray_session, workload):
    subs, ups, d, eng = workload
    ccfg = rc.ClusterConfig(engine=RCFG, partitions=2, actor_cpus=0.05, name="range-spark", state_dir=None)
    cl = rc.Cluster.start(ccfg)
    try:
        assert cl.load_subscriptions(spark.read.parquet(str(d / "ranges.parquet")), batch_rows=150,
                                     progress=False) == subs.num_rows
        out = cl.replay(d / "updates.parquet", batch_rows=500, progress=False)
        assert out["messages"] == ups.num_rows
        ids = subs.column("id").to_pylist()
        live = cl.topk_many(ids)
        assert all(live[i] == eng.topk(i) for i in ids)
        exact = exact_range_topk_spark(d / "ranges.parquet", d / "updates.parquet", RCFG.k, spark)
        report = compare_ranges(exact, cl)
        assert report["subscriptions"] == subs.num_rows and report["agreement"] == 100.0, report["examples"][:3]
        assert sum(len(v) for v in exact.values()) > subs.num_rows      # real lists, not empty ones
        st = cl.stats()
        assert st["published"] == ups.num_rows and st["objects"] == eng.stats()["objects"]
    finally:
        cl.shutdown()


def test_a_bad_row_loads_nothing(ray_session, workload, tmp_path):
    subs, ups, d, eng = workload
    rows = subs.slice(0, 300).to_pylist()
    rows[250]["hi"] = rows[250]["lo"] - 1.0
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ccfg = rc.ClusterConfig(engine=RCFG, partitions=2, actor_cpus=0.05, name="range-bad", state_dir=None,
                            options={"runtime": "inproc"})
    cl = rc.Cluster.start(ccfg)
    try:
        with pytest.raises(rc.InvalidInput, match=r"#250 \(id=251\): field 'hi'"):
            cl.load_subscriptions(bad, batch_rows=100, progress=False)
        assert cl.stats()["subscriptions"] == 0
        assert cl.load_subscriptions(d / "ranges.jsonl", batch_rows=100, progress=False) == subs.num_rows
    finally:
        cl.shutdown()


def _cli(argv, capsys):
    code = cli.main(argv)
    cap = capsys.readouterr()
    return code, (json.loads(cap.out) if code in (0, 1) else cap.err)


def test_cli_load_replay_evaluate_range_topk(spark, ray_session, workload, capsys):
    """rankcast load ranges / replay / evaluate on a range top-k cluster and on a RangeEngine:
    100% agreement with the evaluation in Spark; subscriptions the cluster lost are reported
    (exit status 1); another kind's table is refused."""
    subs, ups, d, eng = workload
    rp, up = str(d / "ranges.jsonl"), str(d / "updates.parquet")
    ccfg = rc.ClusterConfig(engine=RCFG, partitions=3, actor_cpus=0.05, name="range-cli",
                            namespace="rankcast-range-tests", state_dir=None)
    where = ["--cluster", "range-cli", "--namespace", "rankcast-range-tests"]
    cl = rc.Cluster.start(ccfg)
    try:
        code, err = _cli(["load", "subscriptions", rp, *where], capsys)
        assert code == 2 and "missing column" in err
        code, out = _cli(["load", "ranges", str(d / "ranges.parquet"), *where], capsys)
        assert code == 0 and out["loaded"] == subs.num_rows
        code, out = _cli(["replay", up, "--batch-rows", "400", *where], capsys)
        assert code == 0 and out["messages"] == ups.num_rows
        code, rep = _cli(["evaluate", "--live", *where, "--ranges", rp, "--updates", up, "--sample", "0"], capsys)
        assert code == 0 and rep["agreement"] == 100.0 and rep["subscriptions"] == subs.num_rows
        assert rep["target"] == "cluster" and rep["k"] == RCFG.k and rep["method"] == RCFG.method
        gone = subs.column("id").to_pylist()[::3]
        cl.unsubscribe(gone)                                         # the live answers lose these
        code, rep = _cli(["evaluate", "--live", *where, "--ranges", rp, "--updates", up, "--sample", "0"], capsys)
        assert code == 1 and sorted(rep["differing"]) == sorted(gone)
    finally:
        cl.shutdown()
    code, rep = _cli(["evaluate", "--ranges", rp, "--updates", up, "--k", "6", "--method", "paint-dense",
                      "--sample", "100"], capsys)
    assert code == 0 and rep["agreement"] == 100.0 and rep["target"] == "range-engine" and rep["k"] == 6
    assert rep["subscriptions"] == 100
    assert np.isfinite(rep["seconds"])


def test_final_objects_and_calls_of_a_stream():
    """What the offline evaluation and the replay read from an update table: the live
    objects after it (moves, deletes, re-inserts elsewhere, value-only changes) and its cut
    into calls of distinct ids, equal to applying it update by update."""
    import pyarrow as pa

    from rankcast.ingest.range_tables import final_objects
    from tests.test_range_cluster import _updates
    rng = np.random.default_rng(8)
    objs: dict = {}
    rows, nxt = [], 0
    for _ in range(60):
        ups, nxt = _updates(rng, objs, nxt)
        rows += [(u.id, u.x, u.y) for u in ups]
    table = pa.table({"id": [r[0] for r in rows], "x": [r[1] for r in rows], "y": [r[2] for r in rows]})
    fin = final_objects(table)
    assert dict(zip(fin.column("id").to_pylist(), zip(fin.column("x").to_pylist(), fin.column("y").to_pylist()))) == objs
    runs = distinct_runs(table.column("id").to_numpy())
    assert runs[0][0] == 0 and runs[-1][1] == len(rows) and all(a[1] == b[0] for a, b in zip(runs, runs[1:]))
    ids = table.column("id").to_pylist()
    assert all(len(set(ids[a:b])) == b - a for a, b in runs)
    assert all(ids[b] in ids[a:b] for a, b in runs[:-1])           # each cut where an id repeats

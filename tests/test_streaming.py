"""Spark Structured Streaming in and out, exactly once, on GeoNames: Parquet files landing in
a folder are a file-source stream; ``ClusterSink`` publishes each micro-batch to a cluster
on the shared Ray (Spark through RayDP); ``DeliveryWriter`` (and ``rankcast deliver``)
writes the delivery stream as Parquet; Spark reads it back. After a crash of the query
between the publish and Spark's commit, a stop and restart from its checkpoint, the SIGKILL
of a rankcast role or of the writer, every delivery is written once and, folded in stream
order, equals rc.Engine's top-k over the same input at every delivered position."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rankcast as rc
from rankcast.ingest import datasets
from rankcast.ingest.streaming import ClusterSink, DeliveryWriter, delivery_files, fold_deliveries, read_deliveries
from tests.kills import Kill, assert_one_recovery

pytestmark = [pytest.mark.spark, pytest.mark.ray, pytest.mark.slow]

N_MSGS, N_FILES, N_SUBS, WINDOW = 1200, 12, 300, 300


@pytest.fixture(scope="module")
def workload():
    msgs = datasets.geonames_messages(limit=N_MSGS, seed=3)
    vocab = rc.Vocabulary.fit(msgs.column("text").to_pylist())
    subs = datasets.make_subscriptions(msgs, N_SUBS, vocab, seed=4, k=5)
    cfg = rc.EngineConfig(bounds=datasets.GEONAMES_BOUNDS, window=WINDOW, vocabulary=vocab)
    return cfg, msgs, subs


def _cluster(name, cfg, state_dir, **kw):
    ccfg = rc.ClusterConfig(engine=cfg, policy="prefix", partitions=2, window_shards=2, actor_cpus=0.05,
                            name=name, state_dir=str(state_dir), delivery_interval=0.05, checkpoint_every=2.0,
                            **kw)
    return rc.Cluster.start(ccfg, fresh=True)


def _land(msgs: pa.Table, folder: Path, files=range(N_FILES)) -> None:
    """Message files landing in ``folder``, in stream order (modification times increasing:
    the file source takes them in that order, one per micro-batch)."""
    folder.mkdir(parents=True, exist_ok=True)
    per = msgs.num_rows // N_FILES
    t0 = time.time() - 10_000
    for i in files:
        f = folder / f"msgs-{i:04d}.parquet"
        pq.write_table(msgs.slice(i * per, per), f)
        os.utime(f, (t0 + i, t0 + i))


def _query(spark, landing: Path, sink, ckpt: Path, schema):
    stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(landing))
    return stream.writeStream.foreachBatch(sink).option("checkpointLocation", str(ckpt)).start()


def _drain(query):
    query.processAllAvailable()


def _check_against_engine(cfg, subs, msgs, deliveries, n_published):
    """Fold the deliveries in stream order: at every delivered position the lists equal the
    engine's top-k after the same messages, for every subscription (a change not delivered
    would show as a difference at the next delivered position)."""
    eng = rc.Engine(cfg)
    eng.subscribe(subs)
    ids = subs.column("id").to_pylist()
    folded = {i: [] for i in ids}
    at = 0
    assert deliveries, "no delivery"
    for pos in sorted(deliveries):
        assert pos <= n_published
        eng.publish(msgs.slice(at, pos - at))
        at = pos
        folded.update(deliveries[pos])
        want = {i: eng.topk(i) for i in ids}
        bad = [i for i in ids if [tuple(p) for p in folded[i]] != [tuple(p) for p in want[i]]]
        assert not bad, f"position {pos}: subscription {bad[0]}: {folded[bad[0]]} != engine {want[bad[0]]}"
    assert at == max(deliveries)
    return eng


def _tiled(out: Path, start: int = 1) -> None:
    """The delivery files tile the stream: each starts right after the previous one."""
    files = delivery_files(out)
    assert files and files[0][0] == start
    for (a0, b0, _), (a1, b1, _) in zip(files, files[1:]):
        assert a1 == b0 + 1, f"gap or overlap between {a0}-{b0} and {a1}-{b1}"


class CrashAfter(ClusterSink):
    """A sink whose driver dies (raises) right after the cluster applied batch ``at``,
    before Spark commits it: the restarted query runs that batch again."""

    def __init__(self, *a, at: int, **kw):
        super().__init__(*a, **kw)
        self.at = at

    def __call__(self, df, batch_id):
        out = super().__call__(df, batch_id)
        if batch_id == self.at and out.applied:
            raise RuntimeError(f"crash after batch {batch_id}")
        return out


def test_stream_in_and_out_exactly_once_across_query_crash_and_restart(spark, workload, tmp_path):
    cfg, msgs, subs = workload
    landing, ckpt, out = tmp_path / "landing", tmp_path / "ckpt", tmp_path / "updates"
    cl = _cluster("stream-q", cfg, tmp_path / "state")
    try:
        cl.load_subscriptions(subs, progress=False)
        schema = spark.read.parquet(str(_land_first(msgs, landing))).schema
        _land(msgs, landing)
        # 1. the driver dies after the cluster applied batch 2, before Spark's commit
        sink = CrashAfter(cl.name, sink="geonames", at=2)
        q = _query(spark, landing, sink, ckpt, schema)
        with pytest.raises(Exception, match="crash after batch 2"):
            q.awaitTermination(240)
        assert [r.batch_id for r in sink.results] == [0, 1, 2] and all(r.applied for r in sink.results)
        assert cl.position() == 3 * (N_MSGS // N_FILES)
        # 2. restarted from its checkpoint: batch 2 again changes nothing; stopped mid-stream
        sink = ClusterSink(cl.name, sink="geonames")
        q = _query(spark, landing, sink, ckpt, schema)
        _wait(lambda: len(sink.results) >= 4)
        q.stop()
        assert sink.results[0].batch_id == 2 and not sink.results[0].applied
        # 3. restarted again: the rest of the stream
        sink = ClusterSink(cl.name, sink="geonames")
        q = _query(spark, landing, sink, ckpt, schema)
        _drain(q)
        q.stop()
        assert cl.position() == N_MSGS
        assert cl.batch_state("geonames")["last"] == N_FILES - 1
        assert not any(r.applied for r in sink.results if r.batch_id <= 2)
        cl.flush()
        w = DeliveryWriter(cl, out, max_rows=2000, max_seconds=0.2)
        w.run(timeout=1.0)
        _tiled(out)
        got = fold_deliveries(read_deliveries(out))
        eng = _check_against_engine(cfg, subs, msgs, got, N_MSGS)
        ids = subs.column("id").to_pylist()
        assert cl.topk_many(ids) == {i: eng.topk(i) for i in ids}
        # Spark reads the files back, as a table and as a stream
        table = spark.read.parquet(str(out))
        assert table.count() == sum(pq.read_metadata(f).num_rows for _, _, f in delivery_files(out))
        back = spark.readStream.schema(table.schema).parquet(str(out))
        sq = back.writeStream.format("memory").queryName("stream_back").start()
        sq.processAllAvailable()
        sq.stop()
        rows = spark.sql("select position, subscription_id, rank, message_id, score from stream_back").toPandas()
        assert fold_deliveries(pa.Table.from_pandas(rows, preserve_index=False)) == got
    finally:
        cl.shutdown()


def _land_first(msgs, landing):
    """A schema sample outside the landing folder."""
    f = landing.parent / "schema.parquet"
    pq.write_table(msgs.slice(0, 1), f)
    return f


def _wait(cond, timeout=240):
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout, "timed out"
        time.sleep(0.1)


def test_role_and_writer_killed_mid_stream(spark, ray_session, workload, tmp_path):
    """A partition's and the coordinator's processes SIGKILLed while micro-batches arrive,
    and the ``rankcast deliver`` process SIGKILLed and started again: the query goes on,
    and the files hold every delivery once, equal to the engine's."""
    cfg, msgs, subs = workload
    landing, ckpt, out = tmp_path / "landing", tmp_path / "ckpt", tmp_path / "updates"
    cl = _cluster("stream-kill", cfg, tmp_path / "state")
    try:
        cl.load_subscriptions(subs, progress=False)
        cl.warm()
        schema = spark.read.parquet(str(_land_first(msgs, landing))).schema
        address = ray_session.get_runtime_context().gcs_address
        cmd = [sys.executable, "-m", "rankcast", "deliver", str(out), "--cluster", cl.name, "--address", address,
               "--max-rows", "500", "--max-seconds", "0.1"]
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
        writer = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        sink = ClusterSink(cl.name, sink="geonames")
        _land(msgs, landing, range(4))
        q = _query(spark, landing, sink, ckpt, schema)
        _drain(q)
        kill = Kill(cl, "partition", seed=1)
        _land(msgs, landing, range(4, 7))
        kill.now()
        _drain(q)
        assert_one_recovery(cl, kill)
        _wait(lambda: delivery_files(out))
        writer.send_signal(signal.SIGKILL)
        writer.wait(60)
        kill = Kill(cl, "coordinator")
        _land(msgs, landing, range(7, 10))
        kill.now()
        _drain(q)
        assert_one_recovery(cl, kill)
        writer = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _land(msgs, landing, range(10, N_FILES))
        _drain(q)
        q.stop()
        assert cl.position() == N_MSGS and all(r.applied for r in sink.results)
        assert sorted(r.batch_id for r in sink.results) == list(range(N_FILES))
        cl.flush()
        _wait(lambda: delivery_files(out) and delivery_files(out)[-1][1] >= _last_position(cl))
        writer.send_signal(signal.SIGINT)
        writer.wait(60)
        _tiled(out)
        _check_against_engine(cfg, subs, msgs, fold_deliveries(read_deliveries(out)), N_MSGS)
    finally:
        if writer.poll() is None:
            writer.kill()
        cl.shutdown()


def _last_position(cl) -> int:
    pos, last = 1, 0
    while True:
        got, pos = cl.deliveries(pos, updates="none")
        if not got:
            return last
        last = got[-1].position


def _land_with_bad_row(msgs, landing, a, per=50, row=7):
    """Three files of ``per`` messages from ``a`` on, the second with row ``row`` outside the
    bounds; returns that row."""
    landing.mkdir()
    t0 = time.time() - 1000
    bad = msgs.slice(a + per, per).to_pylist()
    bad[row]["y"] = 123.0                                 # outside the bounds' latitudes
    parts = [msgs.slice(a, per), pa.Table.from_pylist(bad, schema=msgs.schema), msgs.slice(a + 2 * per, per)]
    for i, t in enumerate(parts):
        pq.write_table(t, landing / f"m-{i}.parquet")
        os.utime(landing / f"m-{i}.parquet", (t0 + i, t0 + i))
    return bad[row]


def test_a_malformed_row_rejects_its_micro_batch_and_the_stream_goes_on(spark, workload, tmp_path):
    from pyspark.sql.pandas.types import from_arrow_schema

    cfg, msgs, subs = workload
    per = 50
    schema = from_arrow_schema(msgs.schema)
    cl = _cluster("stream-bad", cfg, tmp_path / "state")
    try:
        cl.load_subscriptions(subs, progress=False)
        bad = _land_with_bad_row(msgs, tmp_path / "landing", 0, per)
        sink = ClusterSink(cl.name, sink="geonames", rejected_path=tmp_path / "dead",
                           columns={"id": "id", "x": "x", "y": "y", "text": "text"})
        q = _query(spark, tmp_path / "landing", sink, tmp_path / "ckpt", schema)
        _drain(q)
        q.stop()
        assert [(r.batch_id, r.applied) for r in sink.results] == [(0, True), (1, False), (2, True)]
        err = sink.results[1].rejected
        assert f"#7 (id={bad['id']})" in err and "field 'y'" in err
        assert cl.position() == 2 * per                    # the bad micro-batch: none of its rows
        assert cl.batch_state("geonames")["rejected"] == {1: err}
        dead = pq.read_table(tmp_path / "dead" / "rejected" / f"batch-{1:020d}.parquet")
        assert dead.num_rows == per and set(dead.column("error").to_pylist()) == {err}
        eng = rc.Engine(cfg)
        eng.subscribe(subs)
        eng.publish(msgs.slice(0, per))
        eng.publish(msgs.slice(2 * per, per))
        ids = subs.column("id").to_pylist()
        cl.flush()
        assert cl.topk_many(ids) == {i: eng.topk(i) for i in ids}
        # on_invalid="raise": the query fails on the bad micro-batch, and again when restarted
        _land_with_bad_row(msgs, tmp_path / "landing2", 3 * per, per)
        for _ in range(2):
            q = _query(spark, tmp_path / "landing2", ClusterSink(cl.name, sink="strict", on_invalid="raise"),
                       tmp_path / "ckpt2", schema)
            with pytest.raises(Exception, match="field 'y'"):
                q.awaitTermination(240)
            assert cl.position() == 3 * per and cl.batch_state("strict") == {"last": 0, "rejected": {}}
    finally:
        cl.shutdown()


def _driver(address, cl, sink, landing, ckpt, log, hang_at=None):
    """The query's driver in a Spark of its own (tests/separate_spark.py), in a process
    group of its own (its JVM included), printing each micro-batch's result; its log (Spark's
    too) goes to the file ``log``."""
    cmd = [sys.executable, "-m", "tests.separate_spark", address, cl.namespace, cl.name, sink, str(landing),
           str(ckpt)] + ([str(hang_at)] if hang_at is not None else [])
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    env.pop("RAY_ADDRESS", None)
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=err, text=True,
                                start_new_session=True)
    proc.log = log
    return proc


def _lines_until(proc, key, timeout=600):
    """The JSON lines the driver prints until one with ``key``."""
    import json
    import queue
    import threading

    if not hasattr(proc, "lines"):
        proc.lines = queue.Queue()
        threading.Thread(target=lambda: [proc.lines.put(x) for x in proc.stdout] + [proc.lines.put(None)],
                         daemon=True).start()
    out, t0 = [], time.monotonic()
    while True:
        left = timeout - (time.monotonic() - t0)
        try:
            line = proc.lines.get(timeout=max(left, 0.01))
        except queue.Empty:
            raise AssertionError(f"the driver printed no {key!r} in {timeout} s: {out}") from None
        if line is None:
            raise AssertionError(f"the driver ended (status {proc.wait()}) before {key!r}: {out}\n"
                                 f"{Path(proc.log).read_text()[-4000:]}")
        if line.startswith("{"):
            rec = json.loads(line)
            out.append(rec)
            if key in rec:
                return out


def test_a_separate_spark_driver_killed_mid_stream_and_restarted(ray_session, workload, tmp_path):
    """A plain local Spark (not RayDP) in another process reaches the named cluster by its
    Ray address; its driver is SIGKILLed (the JVM with it) after the cluster applied a
    micro-batch that Spark had not committed, and restarted from its checkpoint: that
    micro-batch changes nothing the second time, and the deliveries hold every update once,
    equal to the engine's over the same input."""
    cfg, msgs, subs = workload
    n_files, per = 6, 40
    msgs = msgs.slice(0, n_files * per)
    landing, ckpt, out = tmp_path / "landing", tmp_path / "ckpt", tmp_path / "updates"
    cl = _cluster("stream-separate", cfg, tmp_path / "state")
    address = ray_session.get_runtime_context().gcs_address
    driver = None
    try:
        cl.load_subscriptions(subs, progress=False)
        landing.mkdir()
        t0 = time.time() - 10_000
        for i in range(n_files):
            f = landing / f"msgs-{i:04d}.parquet"
            pq.write_table(msgs.slice(i * per, per), f)
            os.utime(f, (t0 + i, t0 + i))
        # 1. the driver applies micro-batches 0..2 and is killed before Spark commits 2
        driver = _driver(address, cl, "separate", landing, ckpt, tmp_path / "driver-1.log", hang_at=2)
        first = _lines_until(driver, "hang")
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(60)
        assert [(r["batch_id"], r["applied"]) for r in first if "batch_id" in r] == [(0, True), (1, True), (2, True)]
        assert cl.position() == 3 * per and cl.batch_state("separate")["last"] == 2
        # 2. restarted from its checkpoint: micro-batch 2 again changes nothing, then the rest
        driver = _driver(address, cl, "separate", landing, ckpt, tmp_path / "driver-2.log")
        second = [r for r in _lines_until(driver, "done") if "batch_id" in r]
        assert driver.wait(120) == 0
        assert [(r["batch_id"], r["applied"]) for r in second] == \
            [(2, False)] + [(b, True) for b in range(3, n_files)]
        assert cl.position() == n_files * per and cl.batch_state("separate")["last"] == n_files - 1
        cl.flush()
        DeliveryWriter(cl, out, max_rows=2000, max_seconds=0.2).run(timeout=1.0)
        _tiled(out)
        eng = _check_against_engine(cfg, subs, msgs, fold_deliveries(read_deliveries(out)), n_files * per)
        ids = subs.column("id").to_pylist()
        assert cl.topk_many(ids) == {i: eng.topk(i) for i in ids}
    finally:
        if driver is not None and driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(60)
        cl.shutdown()

"""The Spark path on the shared RayDP session: session and Java settings, Spark -> Ray Data,
vocabulary and weights equal to the Python path, readers, offline evaluation."""
from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest

import rankcast as rc
from rankcast.kinds.spatial.columns import Encoder
from rankcast.kinds.spatial.scoring import score_py
from rankcast.ingest import datasets as D
from rankcast.ingest.bulk import iter_batches
from rankcast.ingest.evaluate import (compare, exact_topk_spark, offline_evaluation,
                                      policy_costs_spark, workload_stats_spark)
from rankcast.ingest.readers import read_subscriptions, to_spark
from rankcast.ingest.session import get_spark
from rankcast.ingest.vocab import fit_vocabulary_spark, weigh_spark
from rankcast.kinds.spatial.text import TermDictionary, Vocabulary


@pytest.fixture(scope="module")
def gn():
    msgs = D.geonames_messages(limit=1500, seed=11)
    return msgs, D.make_subscriptions(msgs, 300, None, seed=12)


@pytest.mark.smoke     # make test's one check of Spark through RayDP
def test_session_and_ray_data(spark, ray_session):
    """One session, reused; Java 17 flags set by rankcast; Spark -> Ray Data works (the
    known failure mode without --add-opens), in order, also through iter_batches."""
    assert get_spark() is spark
    assert "--add-opens=java.base/java.nio=ALL-UNNAMED" in os.environ["JAVA_TOOL_OPTIONS"]
    conf = spark.sparkContext.getConf()
    assert "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED" in conf.get("spark.executor.extraJavaOptions")
    table = pa.table({"id": np.arange(1000, dtype=np.int64), "x": np.linspace(0, 1, 1000),
                      "y": np.zeros(1000), "text": [f"w{i % 7} v{i}" for i in range(1000)]})
    df = to_spark(table, spark)                      # rows in table order, 2 partitions
    ds = ray_session.data.from_spark(df)
    assert ds.count() == 1000
    assert sorted(r["id"] for r in ds.take_all()) == list(range(1000))
    back = pa.concat_tables(iter_batches(df, 300, progress=False))
    assert back.column("id").to_pylist() == list(range(1000))
    assert back.column("text").to_pylist() == table.column("text").to_pylist()


def test_vocabulary_equals_python_path(spark, gn):
    msgs, _ = gn
    texts = msgs.column("text").to_pylist()
    v = fit_vocabulary_spark(msgs, spark)
    assert v == Vocabulary.fit(texts)
    assert v.terms == Vocabulary.fit(texts).terms and np.array_equal(v.idfs, Vocabulary.fit(texts).idfs)
    st = workload_stats_spark(msgs, spark)
    assert st == D.workload_stats(msgs)


def test_weights_equal_the_encoder(spark, gn):
    """Term ids and weights bit for bit, including terms the vocabulary has not seen (ids
    in order of first appearance) and a dictionary that already holds later terms."""
    msgs, subs = gn
    vocab = Vocabulary.fit(msgs.column("text").to_pylist()[:700])
    enc = Encoder(D.GEONAMES_BOUNDS, vocab)
    pre, pending0 = enc.encode_messages(msgs.slice(700, 50), time_window=False)
    enc.commit(pending0)
    expected, pending = enc.encode_subscriptions(subs)
    assert pending                                  # the case under test: unknown terms
    dictionary = TermDictionary(vocab)
    dictionary.commit(pending0)
    sdf = to_spark(subs, spark)
    assert sdf.rdd.getNumPartitions() >= 2            # first appearance spans partitions
    df, got_pending = weigh_spark(sdf, vocab, dictionary=dictionary)
    assert got_pending == pending
    rows = df.select("id", "term_ids", "weights").toPandas()
    assert rows["id"].tolist() == subs.column("id").to_pylist()
    offsets = np.concatenate([[0], np.cumsum([len(t) for t in rows["term_ids"]])])
    assert np.array_equal(offsets, expected.offsets)
    assert np.array_equal(np.concatenate(rows["term_ids"].to_list()), expected.term_ids)
    assert np.concatenate(rows["weights"].to_list()).tobytes() == expected.weights.tobytes()


def test_readers_take_spark_dataframes_and_name_bad_rows(spark, gn):
    _, subs = gn
    assert read_subscriptions(to_spark(subs, spark)).equals(subs)
    bad = subs.set_column(subs.schema.get_field_index("alpha"), "alpha",
                          pa.array(np.r_[subs.column("alpha").to_numpy()[:41], 2.0,
                                         subs.column("alpha").to_numpy()[42:]]))
    with pytest.raises(rc.InvalidInput, match=r"subscription #41 \(id=41\): field 'alpha'"):
        read_subscriptions(to_spark(bad, spark))
    sdf = to_spark(subs, spark)
    broken = sdf.withColumn("x", sdf["text"])
    with pytest.raises(rc.InvalidInput, match=r"subscription #0 \(id=0\): field 'x': must be a real"):
        read_subscriptions(broken)


def _brute_force(subs, window, cfg):
    """The oracle, written independently: every pair that shares a term, score_py, sort."""
    enc = Encoder(cfg.bounds, cfg.vocabulary)
    sb, p = enc.encode_subscriptions(subs)
    enc.commit(p)
    mb, _ = enc.encode_messages(window, time_window=False)
    out = {}
    for i in range(len(sb)):
        st, sw = sb.row_terms(i)
        cands = []
        for j in range(len(mb)):
            mt, mw = mb.row_terms(j)
            if np.intersect1d(st, mt).size:
                s = score_py(sb.x[i], sb.y[i], sb.alpha[i], st, sw, mb.x[j], mb.y[j], mt, mw, cfg.max_dist)
                cands.append((-s, -j, int(mb.ids[j]), s))
        cands.sort()
        out[int(sb.ids[i])] = [(m, s) for _, _, m, s in cands[: int(sb.k[i])]]
    return out


def test_exact_topk_and_compare(spark, gn):
    msgs, subs = gn
    window = msgs.slice(500, 1000)
    cfg = rc.EngineConfig(bounds=D.GEONAMES_BOUNDS, window=1000,
                          vocabulary=Vocabulary.fit(msgs.column("text").to_pylist()))
    sample = subs.slice(0, 80)
    oracle = _brute_force(sample, window, cfg)
    got = exact_topk_spark(sample, window, cfg, spark)
    assert got == oracle                              # ids, order and score bits
    assert sum(len(v) for v in got.values()) > 200
    rep = compare(oracle, got)
    assert rep["agreement"] == 100.0 and rep["differing"] == []
    planted = {k: list(v) for k, v in got.items()}
    victim = next(k for k, v in planted.items() if len(v) >= 2)
    planted[victim][0], planted[victim][1] = planted[victim][1], planted[victim][0]
    if planted[victim][0][1] == planted[victim][1][1]:   # a tie would be a legal order
        planted[victim] = planted[victim][1:]
    rep = compare(oracle, planted)
    assert rep["differing"] == [victim] and rep["agree"] == 79 and rep["agreement"] == 100 * 79 / 80
    assert rep["examples"][0]["id"] == victim


def test_offline_evaluation_of_an_engine(spark, gn):
    """A correct engine agrees 100% on a sample; Table 3 of the stream comes with it."""
    msgs, subs = gn
    vocab = fit_vocabulary_spark(msgs, spark)
    cfg = rc.EngineConfig(bounds=D.GEONAMES_BOUNDS, window=600, vocabulary=vocab)
    eng = rc.Engine(cfg)
    eng.subscribe(subs)
    for a in range(0, msgs.num_rows, 500):
        eng.publish(msgs.slice(a, 500))
    rep = offline_evaluation(eng, subs, msgs, cfg, spark, sample=60, policies=False)
    assert rep["subscriptions"] == 60 and rep["agreement"] == 100.0, rep["examples"][:2]
    assert rep["window"] == 600 and rep["table3"] == D.workload_stats(msgs)


def _cli(argv, capsys) -> tuple[int, dict]:
    import argparse
    import json

    from rankcast.ingest.commands import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(argv)
    code = args.func(args)
    out = capsys.readouterr().out
    return code, json.loads(out[out.index("{"):])


def test_cli_load_replay_evaluate_a_live_cluster(spark, ray_session, tmp_path, capsys):
    """rankcast load / replay / evaluate --live on a running cluster: 100% agreement and the
    policy estimates; a stream that differs from what the cluster got is reported."""
    bounds, msgs, subs, vocab = D.dataset("geonames", 1200, 150, seed=4)
    sp, mp = D.write_parquet(subs, tmp_path / "subs.parquet"), D.write_parquet(msgs, tmp_path / "msgs.parquet")
    ccfg = rc.ClusterConfig(engine=rc.EngineConfig(bounds=bounds, window=500, vocabulary=vocab),
                            partitions=2, name="ingest-cli", namespace="rankcast-ingest-tests")
    cl = rc.Cluster.start(ccfg)
    where = ["--cluster", "ingest-cli", "--namespace", "rankcast-ingest-tests"]
    try:
        code, out = _cli(["load", "subscriptions", str(sp), *where], capsys)
        assert code == 0 and out["loaded"] == 150
        code, out = _cli(["replay", str(mp), "--batch-rows", "250", *where], capsys)
        assert code == 0 and out["messages"] == 1200 and out["throughput"] > 0
        code, rep = _cli(["evaluate", "--live", *where, "--subscriptions", str(sp), "--messages", str(mp),
                          "--sample", "0", "--out", str(tmp_path / "rep.json")], capsys)
        assert code == 0 and rep["agreement"] == 100.0 and rep["subscriptions"] == 150
        assert (tmp_path / "rep.json").exists()
        pol = rep["policies"]
        assert pol["hash"]["replication_ratio"] == 1.0 and pol["hash"]["communication_cost"] == 2.0
        assert 1.0 <= pol["prefix"]["replication_ratio"] <= pol["keyword"]["replication_ratio"] <= 2.0
        assert 0.0 < pol["keyword"]["communication_cost"] <= 2.0
        # planted difference: the window's messages say something else than what was published
        texts = msgs.column("text").to_pylist()
        texts[-500:] = ["planted nowhere"] * 500
        changed = msgs.set_column(msgs.schema.get_field_index("text"), "text", pa.array(texts))
        cp = D.write_parquet(changed, tmp_path / "changed.parquet")
        code, rep = _cli(["evaluate", "--live", *where, "--subscriptions", str(sp), "--messages", str(cp),
                          "--sample", "0", "--no-policies"], capsys)
        live = cl.topk_many(subs.column("id").to_pylist())
        assert code == 1 and rep["differing"] == sorted(s for s, top in live.items() if top)
    finally:
        cl.shutdown()
    # a fresh deployment (every kScore 0): the loose prefix is the whole text
    fresh = policy_costs_spark(subs, msgs, 2, spark, vocabulary=vocab)
    assert fresh["prefix"] == fresh["keyword"]

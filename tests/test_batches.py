"""Batches applied exactly once by (sink, batch id): the id is logged with the items, so a
batch sent again - in the same run, after a restart that replays the log, after one that
reads a checkpoint - changes nothing, and results equal the engine fed each batch once.
An invalid item rejects the whole batch, named by its position in the batch and its field."""
from __future__ import annotations

import pyarrow as pa
import pytest

import rankcast as rc

BOUNDS = (0.0, 0.0, 10.0, 10.0)


def _spatial(name, tmp_path, **kw):
    cfg = rc.EngineConfig(bounds=BOUNDS, window=30, candidate_extra=0)
    return rc.ClusterConfig(engine=cfg, policy="prefix", partitions=2, batch_size=8, name=name,
                            state_dir=str(tmp_path), options={"runtime": "inproc", "durable": True}, **kw)


def _msgs(a, b):
    words = ["park", "cafe", "river", "museum", "school", "bridge"]
    return pa.table({"id": list(range(a, b)), "x": [(i * 37 % 100) / 10 for i in range(a, b)],
                     "y": [(i * 53 % 100) / 10 for i in range(a, b)],
                     "text": [f"{words[i % 6]} {words[(i * 7) % 6]}" for i in range(a, b)]})


SUBS = [rc.Subscription(i, (i * 13 % 10) * 1.0, (i * 29 % 10) * 1.0, text=["park cafe", "river", "museum school"][i % 3],
                        k=3, alpha=0.4) for i in range(12)]


def _restart(cl, cfg):
    cl._coord.local.store.close_log()        # the coordinator's process is gone
    return rc.Cluster.start(cfg)


def test_a_batch_sent_again_changes_nothing_across_restarts(tmp_path):
    cfg = _spatial("batches", tmp_path, checkpoint_every=3600)
    eng = rc.Engine(cfg.engine)
    cl = rc.Cluster.start(cfg, fresh=True)
    r = cl.apply_batch("subs", 0, SUBS, call="subscribe")
    assert (r.applied, r.items, r.rejected) == (True, 12, None)
    eng.subscribe(SUBS)
    for b in range(4):
        r = cl.apply_batch("msgs", b, _msgs(10 * b, 10 * b + 10))
        assert r.applied and r.items == 10 and r.position == 10 * b + 10
        eng.publish(_msgs(10 * b, 10 * b + 10))
    again = cl.apply_batch("msgs", 3, _msgs(30, 40))
    assert not again.applied and again.items == 0 and again.position == 40
    assert not cl.apply_batch("msgs", 1, _msgs(10, 20)).applied     # an older id: applied before
    assert not cl.apply_batch("subs", 0, SUBS, call="subscribe").applied
    assert cl.batch_state("msgs") == {"last": 3, "rejected": {}}
    # a restart that replays the log (no checkpoint since the start)
    cl = _restart(cl, cfg)
    assert cl.batch_state("msgs")["last"] == 3 and cl.position() == 40
    assert not cl.apply_batch("msgs", 3, _msgs(30, 40)).applied
    assert cl.apply_batch("msgs", 4, _msgs(40, 50)).applied
    eng.publish(_msgs(40, 50))
    cl.checkpoint()
    # a restart from a checkpoint that holds the sink's id
    cl = _restart(cl, cfg)
    assert cl.batch_state("msgs")["last"] == 4 and cl.position() == 50
    assert not cl.apply_batch("msgs", 4, _msgs(40, 50)).applied
    cl.flush()
    assert cl.topk_many(range(12)) == {s.id: eng.topk(s.id) for s in SUBS}
    cl.shutdown()


def test_an_invalid_row_rejects_the_whole_batch(tmp_path):
    cfg = _spatial("batches-bad", tmp_path)
    cl = rc.Cluster.start(cfg, fresh=True)
    cl.subscribe(SUBS)
    bad = _msgs(0, 10).to_pylist()
    bad[6]["x"] = float("nan")
    with pytest.raises(rc.InvalidInput, match=r"#6 \(id=6\): field 'x'"):
        cl.apply_batch("msgs", 0, pa.Table.from_pylist(bad))
    assert cl.position() == 0 and cl.batch_state("msgs")["last"] == -1     # nothing recorded
    r = cl.apply_batch("msgs", 0, pa.Table.from_pylist(bad), on_invalid="record")
    assert not r.applied and "#6 (id=6): field 'x'" in r.rejected and cl.position() == 0
    assert cl.batch_state("msgs") == {"last": 0, "rejected": {0: r.rejected}}
    again = cl.apply_batch("msgs", 0, _msgs(0, 10))     # the id is handled: a resend changes nothing
    assert not again.applied and again.rejected == r.rejected and cl.position() == 0
    assert cl.apply_batch("msgs", 1, _msgs(0, 10)).applied and cl.position() == 10
    with pytest.raises(rc.InvalidInput, match="field 'batch_id'"):
        cl.apply_batch("msgs", -1, _msgs(10, 11))
    with pytest.raises(rc.InvalidInput, match="field 'call'"):
        cl.apply_batch("msgs", 5, _msgs(10, 11), call="load")
    cl = _restart(cl, cfg)
    assert cl.batch_state("msgs") == {"last": 1, "rejected": {0: r.rejected}}
    cl.shutdown()


def test_object_updates_repeating_an_id_are_one_batch(tmp_path):
    """Range top-k takes each id once per publish call: a batch where ids repeat is applied
    as its runs of distinct ids, validated together (an insert then an update of the same
    id is valid; a bad row anywhere applies nothing), and equals the engine fed those runs."""
    rcfg = rc.RangeConfig(k=2)
    cfg = rc.ClusterConfig(engine=rcfg, partitions=2, name="batches-range", state_dir=str(tmp_path),
                           options={"runtime": "inproc", "durable": True})
    eng = rc.RangeEngine(rcfg)
    cl = rc.Cluster.start(cfg, fresh=True)
    subs = [rc.RangeSubscription(i, float(i), float(i) + 3.0) for i in range(6)]
    cl.subscribe(subs)
    eng.subscribe(subs)
    rows = pa.table({"id": [1, 2, 1, 3, 2, 1], "x": [1.0, 2.0, None, 4.0, 2.5, None],
                     "y": [5.0, 4.0, 3.0, 2.0, 1.0, None]})
    r = cl.apply_batch("objs", 0, rows)
    assert r.applied and r.items == 6
    for part in ([(1, 1.0, 5.0), (2, 2.0, 4.0)], [(1, None, 3.0), (3, 4.0, 2.0), (2, 2.5, 1.0)], [(1, None, None)]):
        eng.publish([rc.ObjectUpdate(i, x, y) for i, x, y in part])
    assert not cl.apply_batch("objs", 0, rows).applied
    bad = pa.table({"id": [7, 7], "x": [1.0, None], "y": [None, None]})    # a delete of an id never live
    with pytest.raises(rc.InvalidInput, match=r"#0 \(id=7\): field 'y'"):
        cl.apply_batch("objs", 1, bad)
    bad = pa.table({"id": [8, 8, 9], "x": [1.0, None, None], "y": [1.0, None, None]})
    with pytest.raises(rc.InvalidInput, match=r"#2 \(id=9\): field 'y'"):
        cl.apply_batch("objs", 1, bad)
    cl.flush()
    assert cl.topk_many(range(6)) == {s.id: eng.topk(s.id) for s in subs}
    cl = _restart(cl, cfg)
    assert cl.topk_many(range(6)) == {s.id: eng.topk(s.id) for s in subs}
    assert not cl.apply_batch("objs", 0, rows).applied
    cl.shutdown()


def test_delivery_files_tile_the_stream_and_a_writer_resumes_after_the_last(tmp_path):
    """DeliveryWriter: files named by their range of positions, each starting after the
    previous one; a new writer on the same folder (the old one crashed, leaving a temporary
    file) resumes after the last file; the files hold exactly the deliveries listen gives."""
    from rankcast.ingest.streaming import DeliveryWriter, delivery_files, fold_deliveries, read_deliveries

    cfg = _spatial("batches-deliver", tmp_path / "state")
    cl = rc.Cluster.start(cfg, fresh=True)
    cl.subscribe(SUBS)
    out = tmp_path / "updates"
    w = DeliveryWriter(cl, out, max_rows=4, max_seconds=0.0)
    for b in range(3):
        cl.apply_batch("msgs", b, _msgs(10 * b, 10 * b + 10))
        cl.flush()
        while w.step(wait=False) is not None:
            pass
    (out / ".updates-crashed.parquet.tmp").write_bytes(b"partial")
    w = DeliveryWriter(cl, out, max_rows=1000)       # a writer started again on the folder
    assert not (out / ".updates-crashed.parquet.tmp").exists()
    assert w.position == delivery_files(out)[-1][1] + 1
    for b in range(3, 6):
        cl.apply_batch("msgs", b, _msgs(10 * b, 10 * b + 10))
    cl.flush()
    w.run(timeout=0.2)
    files = delivery_files(out)
    assert files[0][0] == 1 and all(a1 == b0 + 1 for (_, b0, _), (a1, _, _) in zip(files, files[1:]))
    want = {d.position: {u.subscription_id: list(u.topk) for u in d.updates}
            for d in cl.listen(from_position=1, timeout=0)}
    assert fold_deliveries(read_deliveries(out)) == want and max(want) == files[-1][1]
    cl.shutdown()

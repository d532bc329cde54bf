"""``rankcast bench range`` on a tiny workload: it writes range.json and range.png, and its
figures agree with each other (exact methods reach the same subscriptions, bytes follow the
message counts, Paint-Batch receives no more than Online)."""
from __future__ import annotations

import json

from rankcast.cli import main


def test_bench_range_writes_consistent_json_and_png(tmp_path):
    rc = main(["bench", "range", "--m", "3000,6000", "--k", "2,5", "--objects", "300", "--events", "150",
               "--epsilons", "1", "--batch-events", "600", "--batch-k", "3", "--tp-m", "4000", "--tp-k", "5",
               "--tp-call", "100,200", "--tp-updates", "300", "--out", str(tmp_path)])
    assert rc == 0
    res = json.loads((tmp_path / "range.json").read_text())
    assert (tmp_path / "range.png").stat().st_size > 10_000
    t = res["targets"]
    assert t["exact_methods_receive_the_same"] and t["batch_received_at_most_online"]
    for r in res["k"] + res["m"]:
        per = 24 if r["method"] == "unicast" else 48
        assert abs(r["bytes_per_event"] - per * r["generated_per_event"]) < 1e-6
        paper = 16 if r["method"] == "unicast" else 24
        assert abs(r["paper_bytes_per_event"] - paper * r["generated_per_event"]) < 1e-6
        assert r["m"] in (3000, 6000) and r["received_per_event"] > 0
        if r["method"] == "paint-sparse":
            assert r["empty_messages"] == 0
        if r["method"] == "unicast":
            assert r["generated_per_event"] == r["received_per_event"]
        if r["epsilon"]:
            assert r["redundancy"] >= 0
        else:
            assert abs(r["redundancy"]) < 1e-12
    assert {r["m"] for r in res["k"]} == {6000} and {r["k"] for r in res["m"]} == {10}
    assert set(t["received_per_event_vs_table_I"]) == {"2", "5"}
    assert "unicast_over_paint-dense_bytes" in t and "unicast_over_paint-sparse_bytes" in t
    assert "unicast_over_paint-sparse_bytes_paper_sizes" in t
    tp = res["throughput"]["forms"]
    assert set(tp) == {f"{c}/{f}" for c in (100, 200) for f in ("none", "arrow", "diff", "objects")}
    for c in (100, 200):        # rows and bytes of the table forms only
        for f in ("arrow", "diff"):
            assert tp[f"{c}/{f}"]["rows_per_update"] > 0 and tp[f"{c}/{f}"]["bytes_per_update"] > 0
        assert tp[f"{c}/none"]["rows_per_update"] == tp[f"{c}/objects"]["rows_per_update"] == 0
    assert t["updates_per_second"]["200/diff"]["target"] == ">= 15000"
    assert tp["100/objects"]["updates"] == 300 and tp["200/none"]["updates_per_second"] > 0
    assert tp["200/none"]["updates_per_cpu_second"] > 0
    assert all(r["changed_per_call"] > 0 for r in tp.values())


def test_warmup_events_leave_each_object_at_its_last_warmed_value():
    """``--warmup-events W``: the first W events of the stream are applied to the objects
    (each ends at its last value among them) and the measured events are the stream after."""
    import numpy as np
    from rankcast.bench.rangetopk import _World, events_stream
    w0 = _World(50, 10, 400, 3)
    w = _World(50, 10, 100, 3, warmup=300)
    rng = np.random.default_rng(3)
    rng.random(50)
    y = rng.random(50)
    ids, ys = events_stream(y, 400, rng)
    for i, v in zip(ids[:300], ys[:300]):
        y[i] = v
    assert np.array_equal(w.oy, y) and np.array_equal(w.ev_id, ids[300:]) and np.array_equal(w.ev_y, ys[300:])
    assert np.array_equal(w0.ev_id, ids) and np.array_equal(w0.ox, w.ox)


def test_measure_in_chunks_equals_one_call():
    """Online figures counted chunk by chunk (messages dropped after each) equal one call's."""
    from rankcast.bench.rangetopk import _World, _measure
    w = _World(200, 3000, 300, 5)
    for method in ("unicast", "paint-dense", "paint-sparse"):
        a = _measure(w, 4, method, 0.0, chunk=37)
        b = _measure(w, 4, method, 0.0, chunk=10 ** 9)
        for key in ("generated_per_event", "bytes_per_event", "max_bytes_per_event", "paper_bytes_per_event",
                    "received_per_event", "received_per_event_stderr", "affected_per_event", "empty_messages",
                    "calls_per_event"):
            assert a[key] == b[key], (method, key)
        assert a["received_per_event"] > 0


def test_unicast_derived_from_receipts_equals_unicast_run():
    """``--unicast-m-max``: above it Unicast's traffic is Paint-Sparse's receipts times its
    message size; where both exist they are equal, per event (the maximum) and on average."""
    from rankcast.bench.rangetopk import _World, _sweep
    w = _World(300, 4000, 200, 7)
    ran = {r["k"]: r for r in _sweep(w, [3, 6], [], "k") if r["method"] == "unicast"}
    der = {r["k"]: r for r in _sweep(w, [3, 6], [], "k", unicast_m_max=1000) if r["method"] == "unicast"}
    assert set(ran) == set(der) == {3, 6}
    for k in ran:
        assert der[k]["derived_from"] == "paint-sparse receipts" and "derived_from" not in ran[k]
        for key in ("generated_per_event", "bytes_per_event", "max_bytes_per_event", "paper_bytes_per_event",
                    "paper_max_bytes_per_event", "received_per_event", "affected_per_event"):
            assert abs(der[k][key] - ran[k][key]) < 1e-9 * max(1, ran[k][key]), (k, key)
        assert 0 < ran[k]["affected_per_event"] < ran[k]["received_per_event"]

"""``rankcast bench covering`` on a tiny workload: it writes covering.json and covering.png,
and its figures agree with each other (same commands, same forwarded set for every index;
work split between subscribes and unsubscribes adds up; one cov call per subscribe)."""
from __future__ import annotations

import json

from rankcast.cli import main


def test_bench_covering_writes_consistent_json_and_png(tmp_path):
    rc = main(["bench", "covering", "--table-commands", "1500", "--ks", "1,2", "--commands", "800,1600",
               "--dims", "6,16", "--repeat", "1", "--out", str(tmp_path)])
    assert rc == 0
    res = json.loads((tmp_path / "covering.json").read_text())
    assert (tmp_path / "covering.png").stat().st_size > 10_000
    rep, cmp = res["reporting"], res["compare"]
    assert {(r["p"], r["index"], r["k"]) for r in rep} == {(p, i, k) for p in (0.05, 0.4)
                                                           for i in ("kd-tree", "z-order") for k in (1, 2)}
    for r in rep + cmp:
        assert r["nv"] == r["nv_s"] + r["nv_u"] and r["pc"] == r["pc_s"] + r["pc_u"]
        assert r["seconds"] > 0 and r["forwarded"] <= r["live"]
    subs = {}
    for r in rep + cmp:
        key = (r.get("p"), r.get("dims"), r["commands"], r["k"])
        # every index forwards the same number of expressions at arrival: G_k's forwarding
        # depends only on whether a cover exists, not on which one is found
        subs.setdefault(key, set()).add((r["q_s"], r["live"]))
    assert all(len(v) == 1 for v in subs.values())
    assert {r["dims"] for r in cmp} == {6, 16} and {r["index"] for r in cmp} == {"kd-tree", "z-order", "naive"}
    t = res["targets"]
    assert "naive_over_kd" in t["dims=16"] and "kd_10x_naive_at_16" in t and "k1_cheapest" in t


def test_bench_covering_cluster_family(tmp_path):
    """``--cluster``: the same calls with covering routing and broadcasting, two distributors;
    the answers equal rc.Matcher's and the figures agree with each other."""
    rc = main(["bench", "covering", "--cluster", "--cluster-expressions", "1500", "--cluster-events", "120",
               "--cluster-partitions", "4", "--cluster-distributors", "2", "--cluster-batch", "500",
               "--cluster-groups", "20", "--out", str(tmp_path)])
    assert rc == 0
    res = json.loads((tmp_path / "covering_cluster.json").read_text())
    assert (tmp_path / "covering_cluster.png").stat().st_size > 10_000
    t = res["targets"]
    assert t["identical_to_matcher"] and t["expressions"] == 1500 - 150
    assert 0 < t["routing_table"] < t["expressions"] and 0 < t["partitions_reached_per_event"] < 4
    assert t["control_messages"] < t["control_messages_without_covering"]
    assert t["sent_between_distributors_without_covering"] == t["control_messages_without_covering"]
    on, off = res["runs"]
    assert on["covering"] and not off["covering"] and off["stats"]["covering"] is None
    assert sum(on["stats"]["covering"]["owned_by_distributor"]) == t["expressions"]

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

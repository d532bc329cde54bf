"""``rankcast bench match --paper betree`` end to end at a tiny scale (the figures come from
the real runs): every family is measured, every method agrees with BE*, the targets block and
the PNG are written."""
from __future__ import annotations

import argparse
import json

import pytest

from rankcast.bench import betree, match


def _args(tmp_path, *extra):
    p = argparse.ArgumentParser()
    match.add_arguments(p)
    return p.parse_args(["--paper", "betree", "--sizes", "2000,4000", "--family-n", "2000", "--events", "50",
                         "--dims-list", "50,100", "--match-probs", "0.01", "--sub-event", "5:13",
                         "--scan-events", "5", "--out", str(tmp_path), *extra])


@pytest.mark.slow
def test_betree_paper_bench_runs_every_family(tmp_path):
    args = _args(tmp_path)
    assert args.paper == "betree" and args.k == 20          # the ranked paper's options are still there
    assert match.main(args) == 0
    out = json.loads((tmp_path / "betree.json").read_text())
    assert (tmp_path / "betree.png").stat().st_size > 10_000
    assert not (tmp_path / "match.json").exists()
    expect = {"size": 2, "dims": 2, "match_prob": 1, "sizes_sub_event": 1, "geonames": 1}
    for fam, n_workloads in expect.items():
        rows = out[fam]
        # k-index enumerates discrete values: GeoNames (continuous boxes, open ranges) is not for it
        methods = set(betree.METHODS) - ({"k-index"} if fam == "geonames" else set())
        assert len(rows) == n_workloads * len(methods) * 2, fam      # k = 1 and 5
        assert {r["method"] for r in rows} == methods
        assert {r["k"] for r in rows} == {1, 5}
        assert all(r["agrees_with_betree"] for r in rows), [r for r in rows if not r["agrees_with_betree"]]
        assert all(r["ms_per_event"] > 0 and r["build_seconds"] >= 0 for r in rows)
        assert all(r["index_bytes"] > 0 for r in rows if r["method"] != "scan")
        assert all(r["events"] == (5 if r["method"] == "scan" else 50) for r in rows)
        # side by side: every method timed in each of the (default 7) rounds, the median counts
        assert all(len(r["ms_per_event_rounds"]) == 7 for r in rows)
        assert all(r["ms_per_event"] == sorted(r["ms_per_event_rounds"])[3] for r in rows)
    assert sorted({r["size"] for r in out["size"]}) == [2000, 4000]
    assert out["all_agree"] is True
    assert [(s["family"], s["method"]) for s in out["skipped"]] == [("geonames", "k-index")]
    tg = out["targets"]
    assert tg["at"]["n"] == 4000
    for name in ("kindex_over_betree", "scan_over_betree", "betree_build_seconds", "betree_memory_bytes"):
        assert set(tg[name]) >= {"value", "target", "met"} and tg[name]["value"] is not None, name
        assert isinstance(tg[name]["met"], bool)
    assert set(tg["kindex_over_betree"]["per_k"]) == {"k=1", "k=5"}
    # the side-by-side ratio: the median of each round's own ratio, the ratio of medians beside it
    big = [r for r in out["size"] if r["size"] == 4000]
    for k in (1, 5):
        ki, be = (next(r for r in big if r["method"] == m and r["k"] == k) for m in ("k-index", "BE*"))
        paired = sorted(x / y for x, y in zip(ki["ms_per_event_rounds"], be["ms_per_event_rounds"]))[3]
        assert tg["kindex_over_betree"]["per_k"][f"k={k}"] == pytest.approx(paired, rel=1e-12)
        assert tg["kindex_over_betree"]["per_k_ratio_of_medians"][f"k={k}"] == pytest.approx(
            ki["ms_per_event"] / be["ms_per_event"], rel=1e-12)
    assert tg["kindex_over_betree"]["value"] == min(tg["kindex_over_betree"]["per_k"].values())


def test_betree_paper_bench_options(tmp_path):
    """--no-scan, --full and --families: scan dropped, the all-matches k added, one family run."""
    args = _args(tmp_path, "--no-scan", "--full", "--full-k", "100000", "--families", "size",
                 "--sizes", "2000", "--attr-dist", "zipf", "--rounds", "2")
    res = betree.run_betree(args)
    rows = res["size"]
    assert {r["method"] for r in rows} == {"BE*", "BE*-B", "k-index"}
    assert {r["k"] for r in rows} == {1, 5, 100000} and all(r["agrees_with_betree"] for r in rows)
    assert all(len(r["ms_per_event_rounds"]) == 2 for r in rows)
    assert all(res[f] == [] for f in betree.FAMILIES if f != "size")
    assert res["targets"]["scan_over_betree"]["met"] is None

"""``rankcast bench match`` (the ranked pub/sub paper's experiments) end to end at a tiny scale:
the memory rows carry bytes and entries per interval for every structure, the cursors
experiment times every structure at d = 1 and at the Threshold Algorithm's depth with the
same rows read by all, the drivers and auto experiments agree with the scan, and the targets
block and the PNG are written."""
from __future__ import annotations

import argparse
import json

import pytest

from rankcast.bench import match


@pytest.mark.slow
def test_ranked_match_bench_small(tmp_path):
    p = argparse.ArgumentParser()
    match.add_arguments(p)
    args = p.parse_args(["--n", "3000", "--n-queries", "30", "--warmup", "5", "--dims", "2", "--dims-n", "3000",
                         "--skews", "", "--getnext", "1,20", "--cursor-g", "1,20,500", "--cursor-dims", "1,2",
                         "--driver-dims", "2", "--driver-queries", "10", "--reps", "2",
                         "--auto-workloads", "paper-shared", "--scan-queries", "5", "--out", str(tmp_path)])
    assert match.main(args) == 0
    out = json.loads((tmp_path / "match.json").read_text())
    assert (tmp_path / "match.png").stat().st_size > 10_000
    names = set(match.INDEXES)
    mem = out["memory"]
    assert {r["index"] for r in mem} == names
    for r in mem:
        assert r["bytes_per_interval"] > 0 and r["entries_per_interval"] >= 1.0 and r["build_seconds"] >= 0
    per = out["targets"]["memory_per_interval"]
    assert per["segment-tree"]["entries"] > 2 and per["interval-tree"]["entries"] == 1.0
    assert "ir_over_interval_bytes" in out["targets"]["memory_targets"]
    cur = out["cursors"]
    assert {(r["d"], str(r["getnext"])) for r in cur} == {(1, "1"), (1, "20"), (1, "500"), (1, "ta-depth"),
                                                          (2, "ta-depth")}
    assert all(r["agrees"] and r["seconds_per_query"] > 0 for r in cur), [r for r in cur if not r["agrees"]]
    assert all({r["index"] for r in cur if (r["d"], str(r["getnext"])) == key} == names
               for key in {(r["d"], str(r["getnext"])) for r in cur})
    assert "cursors d=1 g=20" in out["targets"]
    assert all(r["agrees"] for r in out["drivers"] + out["auto"])
    auto = [r for r in out["auto"] if r["method"] == "auto"]
    assert auto and all("first_pass_seconds" in r and r["auto_driver"] for r in auto)

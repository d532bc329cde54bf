"""``rankcast bench cluster --memory`` at a tiny scale (the figures come from the real runs,
docs/BENCHMARKS.md; here: both sides run, every process is labelled and counted, and the
cluster's top-k lists are the engine's)."""
from __future__ import annotations

import argparse
import json
import os

import pytest


def test_processes_are_labelled_by_what_they_do():
    """The driver, its roles by topology, a role's forked child, a standby, Ray's own."""
    import psutil

    from rankcast.bench.memory import _ray_label, label_processes

    me = os.getpid()
    assert label_processes({}, me)[0] == (me, "client", "client")
    assert _ray_label("/venv/bin/gcs_server --a", "gcs_server") == "ray: gcs server"
    assert _ray_label("python -u /venv/ray/dashboard/agent.py --node-id=1", "python") == "ray: dashboard agent"
    assert _ray_label("ray::IDLE", "ray::IDLE") == "ray: idle worker"
    assert _ray_label("something else", "other") == "ray: other"
    child = psutil.Popen(["sleep", "5"])
    try:
        got = {pid: (label, group) for pid, label, group in label_processes({"partition": [child.pid]}, me)}
        assert got[child.pid] == ("partition-0", "partitions")
    finally:
        child.kill()
        child.wait()


@pytest.mark.slow
@pytest.mark.ray
def test_memory_section_measures_both_sides(tmp_path):
    """Both sides in fresh processes: the engine's one process, the cluster's processes by
    group (the client, the coordinator, the two partitions, Ray's own), every figure
    positive, and the cluster's top-k lists equal to the engine's."""
    from rankcast.bench import cluster

    p = argparse.ArgumentParser()
    cluster.add_arguments(p)
    args = p.parse_args(["--policies", "--scale", "--no-ray", "--memory", "--subs", "300", "--window", "500",
                         "--messages", "300", "--batch", "100", "--out", str(tmp_path)])
    assert cluster.main(args) == 0
    res = json.loads((tmp_path / "cluster.json").read_text())["memory"]
    assert (tmp_path / "cluster_memory.png").stat().st_size > 10_000
    assert res["topk_equal_engine"]
    eng = res["engine"]["memory"]
    assert [p["label"] for p in eng["processes"]] == ["engine"]
    groups = res["cluster"]["memory"]["by_group"]
    assert {"client", "coordinator", "partitions", "ray"} <= set(groups)
    assert groups["partitions"]["processes"] == 2
    total = res["cluster"]["memory"]["total"]
    assert 0 < total["uss"] <= total["pss"] <= total["rss"]
    assert total["pss"] == pytest.approx(sum(g["pss"] for g in groups.values()), abs=1.0)
    assert res["ratio"]["pss"] == pytest.approx(total["pss"] / eng["total"]["pss"])

"""``rankcast bench soak`` end to end at a tiny scale (the figures come from the real runs,
README and the issue notes; here: the protocol runs, a kill recovers, the report is whole)."""
from __future__ import annotations

import argparse
import json


def test_soak_runs_its_two_phases_and_reports(ray_session, tmp_path):
    from rankcast.bench import soak

    p = argparse.ArgumentParser()
    soak.add_arguments(p)
    args = p.parse_args(["--subs", "400", "--window", "600", "--seconds", "6", "--load", "0.5",
                         "--batch", "20", "--kill", "partition", "--kills", "1", "--kill-every", "8",
                         "--checkpoint-every", "2", "--out", str(tmp_path)])
    assert soak.main(args) == 0
    out = json.loads((tmp_path / "soak.json").read_text())
    assert (tmp_path / "soak.png").stat().st_size > 10_000
    assert out["sustainable_rate"] > 0 and 0 < out["achieved_rate"] <= 1.2 * out["target_rate"]
    assert out["latency_seconds"]["calls"] > 0 and out["latency_seconds"]["p99"] >= out["latency_seconds"]["p50"]
    assert out["checkpoints_at_soak_end"]["taken"] >= 2 and out["checkpoint_every"] == 2
    (kill,) = out["kills"]
    assert kill["role"] == "partition" and kill["recovery_seconds"] > 0 and kill["replayed_calls"] >= 0
    assert out["recovery_seconds"] == [kill["recovery_seconds"]]
    assert set(out["met"]) == {"recovery", "memory", "latency"}
    mem = out["memory_mib"]
    assert 0 < mem["private_last_quarter"] <= mem["cluster_last_quarter"]

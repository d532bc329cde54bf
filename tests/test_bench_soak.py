"""``rankcast bench soak`` end to end at a tiny scale (the figures come from the real runs,
docs/BENCHMARKS.md; here: the protocol runs, a kill recovers, the report is whole)."""
from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

def test_the_listener_resumes_inside_the_retention_and_counts_the_gap():
    """A listener left behind the retention (``listen`` raises "no longer kept") resumes half
    a retention behind the stream's position and goes on; another error stops it, kept."""
    import time

    import rankcast as rc
    from rankcast.bench.soak import _Listener

    class Behind:       # a cluster handle whose stream moved on past the retention once
        def __init__(self):
            self.calls = []

        def position(self):
            return 10_000

        def listen(self, from_position, timeout, updates):
            self.calls.append(from_position)
            if len(self.calls) == 1:
                raise rc.InvalidInput("listen: field 'from_position': position 5 is no longer kept")
            if len(self.calls) == 2:
                yield rc.Delivery(from_position + 3, [])
                return
            raise rc.InvalidInput("listen: field 'updates': something else")

    cl = Behind()
    ls = _Listener(cl, 5, "arrow", retention=2_000)
    ls.start()
    ls.join(5)
    assert cl.calls[:2] == [5, 9_000] and [g[0] for g in ls.gaps] == [5]
    assert ls.gaps[0][1] == 9_000 and [a[0] for a in ls.arrivals] == [9_003]
    assert isinstance(ls.error, rc.InvalidInput) and "something else" in str(ls.error)
    assert ls.arrivals[0][1] <= time.time()


def _probe(latency, seconds=30.0, rate=100.0, sent_share=1.0):
    """A probe's stream as ``stream`` reports it: a call of one message every 1/rate s (the
    share ``sent_share`` of them sent), each delivered ``latency(t)`` after its submission."""
    n = int(seconds * rate * sent_share)
    t = np.arange(n) / (rate * sent_share)
    submits = [(i + 1, float(x)) for i, x in enumerate(t)]
    arrivals = [(i + 1, float(x + latency(x)), None) for i, x in enumerate(t)]
    return {"submits": submits, "arrivals": arrivals, "sent": n, "elapsed": seconds}


def test_a_probe_keeps_up_only_at_its_rate_with_a_latency_that_does_not_grow():
    """The sustainable rate's probe: a steady latency with its checkpoints' sawtooth keeps up;
    a latency that grows (a cluster behind its rate: its queue grows), one that stays over a
    second (a standing queue: the cluster at its capacity), a publisher held back by
    backpressure, or calls never delivered do not."""
    from rankcast.bench.soak import _keeps_up

    sawtooth = lambda t: 0.3 + 0.4 * ((t % 5.0) / 5.0)      # noqa: E731
    kept, got = _keeps_up(_probe(sawtooth), 100.0)
    assert kept and abs(got["latency_first_third"] - got["latency_last_third"]) < 0.1
    assert _keeps_up(_probe(lambda t: 0.3 + 0.03 * t), 100.0)[0] is False      # 3% behind: +0.6 s
    assert _keeps_up(_probe(lambda t: 0.3 + 0.005 * t), 100.0)[0] is True      # within noise
    assert _keeps_up(_probe(sawtooth, sent_share=0.9), 100.0)[0] is False      # held back
    assert _keeps_up(_probe(lambda t: 1.5 + 0.4 * ((t % 5.0) / 5.0)), 100.0)[0] is False   # a standing queue
    lost = _probe(sawtooth)
    lost["arrivals"] = lost["arrivals"][: len(lost["arrivals"]) // 2]
    assert _keeps_up(lost, 100.0)[0] is False
    assert _keeps_up(_probe(sawtooth, seconds=0.01), 100.0)[0] is False        # nothing to judge


@pytest.mark.slow     # a stream of seconds with kills, on Ray
def test_soak_runs_its_two_phases_and_reports(ray_session, tmp_path):
    from rankcast.bench import soak

    p = argparse.ArgumentParser()
    soak.add_arguments(p)
    args = p.parse_args(["--subs", "400", "--window", "600", "--seconds", "6", "--load", "0.5",
                         "--batch", "20", "--kill", "partition", "--kills", "1", "--kill-every", "8",
                         "--checkpoint-every", "2", "--calibrate", "3", "--probe", "3", "--out", str(tmp_path)])
    assert soak.main(args) == 0
    out = json.loads((tmp_path / "soak.json").read_text())
    assert (tmp_path / "soak.png").stat().st_size > 10_000
    assert out["sustainable_rate"] > 0 and 0 < out["achieved_rate"] <= 1.2 * out["target_rate"]
    # the sustainable rate: the first probe that kept up (or the lowest probed), from the peak down
    probes = out["probes"]
    assert probes and [p["fraction"] for p in probes] == list(soak.PROBE_FRACTIONS[:len(probes)])
    assert all(abs(p["rate"] - p["fraction"] * out["peak_rate"]) < 1e-6 * out["peak_rate"] for p in probes)
    assert not any(p["kept_up"] for p in probes[:-1])
    assert probes[-1]["kept_up"] or len(probes) == len(soak.PROBE_FRACTIONS)
    assert out["sustainable_rate"] == probes[-1]["rate"] and out["target_rate"] == 0.5 * out["sustainable_rate"]
    assert out["latency_seconds"]["calls"] > 0 and out["latency_seconds"]["p99"] >= out["latency_seconds"]["p50"]
    assert out["checkpoints_at_soak_end"]["taken"] >= 2 and out["checkpoint_every"] == 2
    (kill,) = out["kills"]
    assert kill["role"] == "partition" and kill["recovery_seconds"] > 0 and kill["replayed_calls"] >= 0
    assert out["recovery_seconds"] == [kill["recovery_seconds"]]
    assert set(out["met"]) == {"recovery", "memory", "latency"}
    assert out["listener_gaps"] == 0 and out["latency_by_10_seconds"][0]["calls"] > 0
    mem = out["memory_mib"]
    assert 0 < mem["private_last_quarter"] <= mem["cluster_last_quarter"]
    pauses = out["pauses_at_soak_end"]          # each process's collector and snapshot copies
    assert {"driver", "coordinator-0", "partition-0"} <= set(pauses)
    assert pauses["partition-0"]["snapshots"] >= 1 and pauses["partition-0"]["snapshot_seconds"] > 0
    assert all(p["gc_collections"] >= 0 and p["gc_seconds"] >= 0 for p in pauses.values())
    assert all(0 <= at <= out["seconds"] + 60 and secs >= 0.01
               for p in pauses.values() for at, secs, _ in p["gc_long_pauses"])


def _args(tmp_path, *extra):
    from rankcast.bench import soak

    p = argparse.ArgumentParser()
    soak.add_arguments(p)
    return p.parse_args(["--subs", "400", "--window", "600", "--seconds", "4", "--load", "0.5", "--batch", "20",
                         "--kill-every", "8", "--checkpoint-every", "2", "--calibrate", "3", "--probe", "0",
                         "--out", str(tmp_path), *extra])


@pytest.mark.slow     # a stream of seconds with kills, on Ray
def test_soak_default_command_line_kills_every_default_role(ray_session, tmp_path):
    """The documented command line with its defaults (policy, partitions, shards and the
    roles killed), shortened: every kill finds its victim in the cluster's topology, each
    recovers, and the JSON and PNG are whole at the end."""
    from rankcast.bench import soak

    args = _args(tmp_path)
    assert args.kill == "partition,window,coordinator" and args.kills == 3
    assert args.policy == "hash" and args.partitions == 2
    assert soak.main(args) == 0
    out = json.loads((tmp_path / "soak.json").read_text())
    assert (tmp_path / "soak.png").stat().st_size > 10_000
    assert [k["role"] for k in out["kills"]] == ["partition", "window", "coordinator"]
    assert all("missed" not in k and k["recovery_seconds"] > 0 for k in out["kills"]), out["kills"]
    assert len(out["recovery_seconds"]) == 3
    # the partitions (each holding the window here) are counted in the cluster's memory
    assert set(out["memory_mib"]["private_by_role"]) >= {"Coordinator", "SoloPartition"}


@pytest.mark.slow     # a stream of seconds with kills, on Ray
def test_soak_refuses_a_role_the_cluster_does_not_run(ray_session, tmp_path):
    """A 2-partition hash cluster holds the window in its partitions and runs no aggregator:
    asking to kill one is an error naming the roles it has, before anything streams."""
    from rankcast.bench import soak
    from rankcast.errors import CommandError

    with pytest.raises(CommandError, match="runs no 'aggregator' process.*partition"):
        soak.run_soak(_args(tmp_path, "--kill", "aggregator", "--kills", "1"))
    assert not (tmp_path / "soak.json").exists()
    with pytest.raises(CommandError, match="unknown role 'router'"):
        soak.kill_roles("partition,router")
    assert soak.kill_roles("partition, shard") == ["partition", "window"]

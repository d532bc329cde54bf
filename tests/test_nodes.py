"""Loopback, placement and node loss.

The test session's Ray (tests/conftest.py) starts the way the embedded default does, so its
processes must listen on loopback only while a cluster runs. The scenarios on several Ray
nodes (tests/multinode.py: a head and workers of their own, on loopback, with their own
resources) each run in a child process, which starts its own nodes and cluster and checks
the oracle after every call and the listener's stream position by position."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import rankcast as rc
from tests.sockets import is_loopback, listening, ray_pids

ROOT = Path(__file__).resolve().parents[1]


def test_the_session_ray_listens_on_loopback_only(ray_session, tmp_path):
    """Every listening socket of the driver and of the Ray node's processes (the control
    store, the raylet, the agents, every worker: a cluster's roles among them) is on
    loopback while a cluster runs."""
    cfg = rc.EngineConfig(bounds=(0.0, 0.0, 10.0, 10.0), window=20)
    cl = rc.Cluster.start(rc.ClusterConfig(engine=cfg, partitions=2, window_shards=1, actor_cpus=0.05,
                                           name="test-loopback", state_dir=str(tmp_path)))
    try:
        cl.subscribe([rc.Subscription(1, 1.0, 1.0, text="a b", k=2)])
        cl.publish([rc.Message(1, 1.0, 1.0, text="a")])
        roles = cl.pids()
        socks = listening(ray_pids())
        names = {s[1] for s in socks}
        assert any(n.startswith("gcs_server") for n in names) and "raylet" in names, names
        pids = {s[0] for s in socks}
        assert set(roles["partition"]) <= pids, "the roles' own servers are among the sockets read"
        bad = [s for s in socks if not is_loopback(s[2])]
        assert not bad, f"listening beyond loopback: {bad}"
    finally:
        cl.shutdown()


def test_placement_settings_are_checked():
    cfg = rc.EngineConfig(bounds=(0.0, 0.0, 1.0, 1.0))
    for field, value in (("placement", "scatter"), ("control_node", ""), ("placement_timeout", 0)):
        with pytest.raises(rc.InvalidInput, match=f"field '{field}'"):
            rc.ClusterConfig(engine=cfg, **{field: value})
    c = rc.ClusterConfig(engine=cfg)
    assert (c.placement, c.control_node) == ("spread", "head")


def test_the_spread_rule_evens_out_data_roles_and_keeps_control_roles_on_the_head():
    """Pure logic of the rule (a list of nodes stands in for Ray's)."""
    from rankcast.runtime.placement import Placer

    h, a, b, z = (c * 56 for c in "1abc")       # node ids: 28 bytes in hex
    p = Placer("spread", "head")
    nodes = [{"node": h, "address": "127.0.0.1", "head": True, "resources": {"CPU": 2.0}},
             {"node": a, "address": "127.0.0.1", "head": False, "resources": {"CPU": 2.0}},
             {"node": b, "address": "127.0.0.1", "head": False, "resources": {"CPU": 2.0}},
             {"node": z, "address": "127.0.0.1", "head": False, "resources": {}}]
    p.nodes = lambda fresh=False: nodes
    got = []
    for i in range(7):
        _, target = p.options("partition")
        p.on(f"k{i}", target, "partition")
        got.append(target)
    assert got == [a, b, h, a, b, h, a]         # workers first among equals; no CPU: none
    opts, target = p.options("aggregator")
    assert target == h and opts["scheduling_strategy"].soft
    assert not p.options("standby")[0]["scheduling_strategy"].soft
    p.forget("k0")
    p.forget("k3")
    assert p.options("shard")[1] == a
    assert Placer("pack", "head").options("partition") == ({}, None)


def _scenario(*args, timeout: float = 1800) -> dict:
    """Run tests/multinode.py's scenario in a child process with Ray files of its own."""
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    env.pop("RAY_ADDRESS", None)
    with tempfile.TemporaryDirectory(prefix="rcn-") as tmp:
        env["RAY_TMPDIR"] = tmp
        p = subprocess.run([sys.executable, "-m", "tests.multinode", *args], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        err = "\n".join(line for line in p.stderr.splitlines() if "state-dump" not in line)
        raise AssertionError(f"scenario {args} failed (status {p.returncode}):\n{err[-6000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.parametrize("kind", ["spatial", "matching", "range"])
def test_a_node_lost_mid_stream_a_node_added_and_a_restart_onto_other_nodes(kind):
    out = _scenario("spread", kind)
    assert out["lost_roles"] and out["recoveries"] and out["deliveries"] > 0


@pytest.mark.slow
@pytest.mark.ray
def test_no_room_for_a_lost_nodes_roles_then_a_node_joins():
    out = _scenario("noroom", "spatial")
    assert "no node has room" in out["error"] and out["resume"]["replayed_calls"] >= 1


@pytest.mark.slow
@pytest.mark.ray
def test_the_embedded_default_listens_on_loopback_only():
    """A new user's ``rc.Cluster.start`` with no Ray running and no address, in a fresh
    process: every listening socket of Ray's processes and the driver on loopback."""
    out = _scenario("loopback")
    assert out["sockets"] >= 5

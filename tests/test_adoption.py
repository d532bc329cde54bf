"""A restarted coordinator adopts the live role processes of its cluster.

A durable cluster's role processes on Ray are named after it and outlive its coordinator.
When Ray restarts a killed coordinator, the partitions that hold the window (solo layout,
direct mode) whose lineage holds the checkpoint resumed from keep their state: the replay of
the log sends them only the steps and takes they lack, and their takes since the checkpoint
come from what they kept. A process that does not descend from that checkpoint is rebuilt
from it in place. Results equal rc.Engine and brute force after every call, and a
listener's stream is exactly the engine's, before and after every restart."""
from __future__ import annotations

import random
import time

import numpy as np
import pytest

import rankcast as rc
from rankcast.baselines import BruteForceEngine
from rankcast.kinds.spatial.columns import Encoder
from rankcast.kinds.spatial.roles.partition import PartitionOps, SoloPartition
from rankcast.kinds.spatial.testing import play, random_calls
from rankcast.runtime.coordinator import ROLE_SEP
from rankcast.runtime.recovery import StaleCall, StateStore
from tests.kills import Kill, assert_one_recovery
from tests.test_recovery import BOUNDS, Listener, Recorder, _deliveries_exact, _pipelined_cluster
from tests.waits import listen_until


def _solo_cfg(name, state_dir, **kw):
    """Two hash partitions, each holding the window (the default cluster's layout)."""
    cfg = rc.EngineConfig(bounds=BOUNDS, window=40, candidate_extra=0)
    opts = {"checkpoint_every": 3600.0, **kw}
    return rc.ClusterConfig(engine=cfg, policy="hash", partitions=2, batch_size=6, max_in_flight=3,
                            actor_cpus=0.05, name=name, state_dir=str(state_dir), **opts)


def _last_restart(cl, since: float) -> dict:
    recs = [r for r in cl.stats()["recovery"]["recoveries"] if r["time"] >= since and r["cause"] == "restart"]
    assert len(recs) == 1, recs
    return recs[0]


@pytest.mark.slow     # kills and restarts of Ray processes
def test_a_restarted_coordinator_adopts_the_live_partitions_and_stays_exact(ray_session, tmp_path):
    """The coordinator killed twice at random moments of random calls (a checkpoint before,
    calls in the log after it): each restart keeps both partitions' processes and state
    (mode ``adopted``), and every call's results and the listener's stream are the engine's."""
    cfg = _solo_cfg("test-adopt", tmp_path)
    calls = random_calls(41, 40, invalid=True)
    rec = Recorder(cfg.engine)
    targets = {"engine": rec, "cluster": None, "brute": BruteForceEngine(cfg.engine)}
    cl = rc.Cluster.start(cfg)
    targets["cluster"] = cl
    live: set[int] = set()
    try:
        listener = Listener(cfg)
        listener.start()
        parts = cl.pids()["partition"]
        assert len(parts) == 2 and cl.stats()["solo"]
        rng = random.Random(13)
        at = 0
        for stop in (14, 27):
            play(targets, calls[at:stop - 4], live=live)
            cl.checkpoint()                        # then calls only in the log
            play(targets, calls[stop - 4:stop], live=live)
            kill = Kill(cl, "coordinator", delay=rng.uniform(0.0, 0.05))
            kill.start()
            play(targets, calls[stop:stop + 3], live=live)
            r = assert_one_recovery(cl, kill)
            assert r["mode"] == "adopted" and r["adopted"] == ["partition-0", "partition-1"], r
            assert r["replayed_calls"] >= 1, r
            assert cl.pids()["partition"] == parts, "the partitions' processes were replaced"
            at = stop + 3
        play(targets, calls[at:], live=live)
        listener.stop.set()
        listener.join(120)
        assert listener.seen == rec.stream, "the listener's stream differs from the engine's updates"
    finally:
        cl.shutdown()


@pytest.mark.slow     # kills and restarts of Ray processes
def test_pipelined_calls_through_a_restart_that_adopts_the_partitions(ray_session, tmp_path):
    """Pipelined calls behind slow partitions (held in the coordinator and sent together,
    at moments the log records), the coordinator killed in the middle: the replay rebuilds
    the same steps, sends the adopted partitions only those they lack, and every delivery
    holds exactly the changes at its position (the takes made before the kill from what the
    partitions kept)."""
    cfg = _solo_cfg("test-adopt-pipelined", tmp_path, delivery_interval=0.01, options={"delay": 0.03})
    cl, eng, ids, batches, start, states = _pipelined_cluster(cfg, 47)
    try:
        cl.checkpoint()
        parts = cl.pids()["partition"]
        kill = None
        for n, b in enumerate(batches):
            if n == len(batches) // 2:
                kill = Kill(cl, "coordinator", delay=0.02)
                kill.start()
            cl.publish(b, wait=False)
            eng.publish(b)
            states[eng.stats()["published"]] = {i: tuple(eng.topk(i)) for i in ids}
        cl.flush()
        r = assert_one_recovery(cl, kill)
        assert r["mode"] == "adopted" and r["adopted"] == ["partition-0", "partition-1"], r
        assert cl.pids()["partition"] == parts
        assert cl.stats()["roles"]["coordinator"]["held_calls"] > 0
        got = [(d.position, {u.subscription_id: tuple(u.topk) for u in d.updates})
               for d in listen_until(cl, start + 1, max(states))]
        assert _deliveries_exact(got, states, ids, start) == max(states)
        assert cl.topk_many(ids) == {i: list(states[max(states)][i]) for i in ids}
    finally:
        cl.shutdown()


@pytest.mark.slow     # kills and restarts of Ray processes
def test_a_partition_that_does_not_descend_from_the_checkpoint_is_rebuilt_not_adopted(ray_session, tmp_path):
    """One partition's lineage no longer holds the checkpoint (as a process from another
    history): the restart adopts the other one and rebuilds this one from the checkpoint in
    its own process; the results stay exact."""
    import ray
    from ray.util import list_named_actors

    cfg = _solo_cfg("test-adopt-stale", tmp_path)
    calls = random_calls(43, 30, invalid=False)
    rec = Recorder(cfg.engine)
    targets = {"engine": rec, "cluster": None, "brute": BruteForceEngine(cfg.engine)}
    cl = rc.Cluster.start(cfg)
    targets["cluster"] = cl
    live: set[int] = set()
    try:
        play(targets, calls[:12], live=live)
        cl.checkpoint()
        play(targets, calls[12:18], live=live)
        parts = cl.pids()["partition"]
        handles = [ray.get_actor(a["name"], namespace=cfg.namespace) for a in list_named_actors(all_namespaces=True)
                   if a["namespace"] == cfg.namespace and a["name"].startswith(cfg.name + ROLE_SEP)]
        stale = next(h for h in handles if ray.get(h.pid.remote()) == parts[1])
        # a snapshot under another checkpoint id, kept from alone: the lineage forgets ours
        ray.get(stale.snapshot.remote(StateStore(cfg.state_dir, cfg.name), "elsewhere/partition", "other", "other"))
        ray.get(stale.snapshot_written.remote())
        t0 = time.time()
        Kill(cl, "coordinator").now()
        play(targets, calls[18:], live=live)
        r = _last_restart(cl, t0)
        assert r["mode"] == "adopted" and r["adopted"] == ["partition-0"], r
        assert "partition-1 (in place)" in r["restored"], r
        assert cl.pids()["partition"] == parts
    finally:
        cl.shutdown()


def test_a_partition_refuses_other_coordinators_and_keeps_its_takes_since_the_committed_checkpoint(tmp_path):
    """The role side of an adoption, in process: calls of a coordinator other than the
    owner are refused and change nothing; each snapshot records the checkpoint id with the
    progress (steps, takes) then; the takes kept are those after the oldest checkpoint of
    the lineage, which the committed one bounds; a role restored from a snapshot has that
    checkpoint as its lineage."""
    cfg = rc.EngineConfig(bounds=BOUNDS, window=40, candidate_extra=0)
    calls = random_calls(7, 40, invalid=False)
    enc = Encoder(cfg.bounds, cfg.vocabulary)
    p = SoloPartition(cfg, 0, 64, "t", False)
    p.own("a", "partition-0", None, retain=True)
    subs, pending = enc.encode_subscriptions([s for c in calls if c.op == "subscribe" for s in c.arg])
    enc.commit(pending)
    with pytest.raises(StaleCall):
        p.process(1, -1, -1, PartitionOps(add=subs, add_plen=np.diff(subs.offsets)), None, owner="b")
    assert p.step == 0 and len(p.core.subs) == 0
    p.process(1, -1, -1, PartitionOps(add=subs, add_plen=np.diff(subs.offsets)), None, owner="a")
    step, pos = 1, -1
    store = StateStore(str(tmp_path), "t")
    marks = []
    for n, batch in enumerate(c.arg for c in calls if c.op == "publish" and c.arg):
        msgs, pending = enc.encode_messages(batch, time_window=False)
        enc.commit(pending)
        seqs = np.arange(pos + 1, pos + 1 + len(msgs), dtype=np.int64)
        exp = np.maximum(seqs - 40, -1)
        pos, step = int(seqs[-1]), step + 1
        p.process(step, pos, int(exp[-1]), None, (msgs, seqs, exp), owner="a")
        p.take_updates(owner="a")
        if n % 3 == 2:
            marks.append(f"m{n}")
            p.snapshot(store, f"ckpt-{n}/partition-0", marks[-1], marks[-2] if len(marks) > 1 else None)
            p.snapshot_written()
    with pytest.raises(StaleCall):
        p.take_updates(owner="b")
    info = p.adopt("c")
    assert list(info["lineage"]) == marks[-2:]
    assert info["progress"] == {"step": step, "takes": p._n_takes, "pos_end": pos}
    oldest = info["lineage"][marks[-2]]["takes"]
    assert [n for n, _ in p.retained(0)] == list(range(oldest + 1, p._n_takes + 1))
    with pytest.raises(StaleCall):                 # adopted by "c": "a" is refused now
        p.take_updates(owner="a")
    q = SoloPartition(cfg, 0, 64, "t", False, resume=(store, f"ckpt-{marks[-1][1:]}/partition-0"))
    got = q.adopt("d")
    assert got["lineage"] == {marks[-1]: info["lineage"][marks[-1]]} and got["progress"] == info["lineage"][marks[-1]]

"""Recovery and delivery on Ray: any role's process killed (SIGKILL, by pid) at random
points of a stream, the whole cluster restarted from its state directory; afterwards every
result equals rc.Engine and the brute-force engine after every call, and the update stream
a listener saw is exactly the engine's, position by position: no gap, no duplicate."""
from __future__ import annotations

import os
import random
import threading
import time

import pytest

import rankcast as rc
from rankcast.runtime.recovery import STATE_FORMAT, StateStore
from rankcast.kinds.spatial.testing import play, random_calls
from rankcast.baselines import BruteForceEngine
from tests.kills import Kill, assert_one_recovery, recoveries_since
from tests.waits import listen_until, wait_actor_gone

BOUNDS = (0.0, 0.0, 10.0, 10.0)


class Recorder:
    """rc.Engine that also records the delivery stream a listener must see: (position,
    updates) of every call that changed something."""

    def __init__(self, cfg):
        self.eng = rc.Engine(cfg)
        self.stream: list[tuple[int, list]] = []

    def publish(self, msgs):
        out = self.eng.publish(msgs)
        if out:
            self.stream.append((self.eng.stats()["published"], out))
        return out

    def __getattr__(self, name):
        return getattr(self.eng, name)


def _ccfg(name, state_dir, policy="prefix", **kw):
    cfg = rc.EngineConfig(bounds=BOUNDS, window=40, candidate_extra=0)
    return rc.ClusterConfig(engine=cfg, policy=policy, partitions=3, window_shards=2, aggregators=2,
                            distributors=2, batch_size=6, max_in_flight=3, actor_cpus=0.05, name=name,
                            state_dir=str(state_dir), **kw)


def _play_with_kills(cl, targets, calls, kills, roles, rng) -> list[dict]:
    """Play ``calls``; before each call of ``kills`` (ascending), the next role of ``roles``
    gets a SIGKILL at a random moment of the calls that follow (up to 50 ms in). Each kill
    must happen and be followed by exactly one recovery (checked once the calls up to the
    next kill are played, and before that kill); returns the recoveries, one per kill."""
    live: set[int] = set()
    recs, at, pending = [], 0, None
    for i, n in enumerate(kills + [len(calls)]):
        play(targets, calls[at:n], live=live)
        if pending is not None:
            recs.append(assert_one_recovery(cl, pending))
        if n < len(calls):
            pending = Kill(cl, roles[i], delay=rng.uniform(0.0, 0.05), seed=n)
            pending.start()
        at = n
    assert len(recs) == len(kills)
    return recs


class Listener(threading.Thread):
    """Follows the stream from position 1 through its own handle, resuming (from the
    position after the last one it handled) each time its listen call ends, until told
    to stop and nothing more comes."""

    def __init__(self, cfg):
        super().__init__(daemon=True)
        self.cfg = cfg
        self.seen: list[tuple[int, list]] = []
        self.stop = threading.Event()

    def run(self):
        cl = rc.Cluster.attach(self.cfg.name, namespace=self.cfg.namespace)
        pos = 1
        while True:
            n = len(self.seen)
            for d in cl.listen(from_position=pos, timeout=1.0):
                self.seen.append((d.position, d.updates))
                pos = d.position + 1
            if self.stop.is_set() and len(self.seen) == n:
                return


@pytest.mark.parametrize("roles,policy", [(("partition", "shard"), "prefix"),
                                          (("aggregator", "distributor"), "keyword"),
                                          (("coordinator", "shard"), "hash"),
                                          (("partition", "shard"), "hash")],
                         ids=["partition+shard-prefix", "aggregator+distributor-keyword", "coordinator+shard-hash",
                              "partition+shard-hash-partial"])
@pytest.mark.slow     # kills and restarts of Ray processes
def test_kill_roles_mid_stream(ray_session, tmp_path, roles, policy):
    """Two kills at random calls, each at a random moment of that call (or between calls).
    Direct mode (hash) rebuilds only a dead partition or shard and catches it up from the
    journal of steps (partial recovery); the others rebuild every role from the checkpoint."""
    cfg = _ccfg(f"test-kill-{roles[0]}", tmp_path, policy=policy, checkpoint_every=0.5)
    calls = random_calls(sum(map(ord, policy)), 36, invalid=True)
    rec = Recorder(cfg.engine)
    cl = rc.Cluster.start(cfg)
    try:
        listener = Listener(cfg)
        listener.start()
        rng = random.Random(7)
        kills = sorted(rng.sample(range(4, len(calls) - 4), 2))
        recs = _play_with_kills(cl, {"engine": rec, "cluster": cl, "brute": BruteForceEngine(cfg.engine)},
                                calls, kills, roles, rng)
        if roles == ("partition", "shard") and policy == "hash":
            partial = [r for r in recs if r.get("mode") == "partial"]
            assert partial, recs
            assert all(len(r["restored"]) <= 1 and r["restored"][0].split("-")[0] in roles
                       for r in partial if r["restored"])
        listener.stop.set()
        listener.join(120)
        assert listener.seen == rec.stream, "the listener's stream differs from the engine's updates"
        # a late listener resumes from any kept position with the same stream
        mid = rec.stream[len(rec.stream) // 2][0]
        late = [(d.position, d.updates) for d in cl.listen(from_position=mid, timeout=0)]
        assert late == [s for s in rec.stream if s[0] >= mid]
    finally:
        cl.shutdown()


@pytest.mark.parametrize("policy,partitions", [("hash", 1), ("prefix", 1), ("hash", 2)])
@pytest.mark.slow     # kills and restarts of Ray processes
def test_partitions_holding_the_window_killed_mid_stream(ray_session, tmp_path, policy, partitions):
    """One partition, or two hash partitions, run as engines in actors (each holds the whole
    window in its process: no shard, distributor or aggregator process). A partition's
    process killed twice at random moments of random calls: it is rebuilt from its snapshot
    (subscriptions and window) and the journal's steps (partial recovery); every result
    equals the engine and brute force after every call, and a listener's stream is exactly
    the engine's."""
    cfg = _ccfg(f"test-solo-{policy}-{partitions}", tmp_path, policy=policy,
                checkpoint_every=0.5).replace(partitions=partitions)
    calls = random_calls(sum(map(ord, policy)) + 5 * partitions, 36, invalid=True)
    rec = Recorder(cfg.engine)
    cl = rc.Cluster.start(cfg)
    try:
        pids = cl.pids()
        assert len(pids["partition"]) == partitions
        assert not (pids["shard"] or pids["distributor"] or pids["aggregator"])
        listener = Listener(cfg)
        listener.start()
        rng = random.Random(11)
        kills = sorted(rng.sample(range(4, len(calls) - 4), 2))
        recs = _play_with_kills(cl, {"engine": rec, "cluster": cl, "brute": BruteForceEngine(cfg.engine)},
                                calls, kills, ["partition", "partition"], rng)
        st = cl.stats()
        assert st["solo"] and all(s["searches"] > 0 for s in st["roles"]["shard"])
        assert any(r.get("mode") == "partial" and r["restored"] and r["restored"][0].startswith("partition-")
                   for r in recs), recs
        listener.stop.set()
        listener.join(120)
        assert listener.seen == rec.stream, "the listener's stream differs from the engine's updates"
    finally:
        cl.shutdown()


@pytest.mark.slow     # kills and restarts of Ray processes
def test_whole_cluster_restart_resumes(ray_session, tmp_path):
    """Every process of the cluster gone at once (the coordinator killed for good, its roles
    with it); Cluster.start with the same name and state directory resumes with identical
    results and delivery stream. Another config, or state of another format, is refused."""
    import ray

    cfg = _ccfg("test-restart", tmp_path, checkpoint_every=3600)
    calls = random_calls(11, 40, invalid=False)
    rec, brute = Recorder(cfg.engine), BruteForceEngine(cfg.engine)
    live: set[int] = set()
    cl = rc.Cluster.start(cfg)
    play({"engine": rec, "cluster": cl, "brute": brute}, calls[:15], live=live)
    cl.checkpoint()
    play({"engine": rec, "cluster": cl, "brute": brute}, calls[15:25], live=live)     # only in the log

    def crash():
        ray.kill(ray.get_actor(cfg.name, namespace=cfg.namespace), no_restart=True)
        wait_actor_gone(cfg.name, cfg.namespace)

    crash()
    cl2 = rc.Cluster.start(cfg)
    st = cl2.stats()
    assert st["recovery"]["recoveries"][-1]["cause"] == "restart"
    assert st["recovery"]["recoveries"][-1]["replayed_calls"] == 10
    assert play({"engine": rec, "cluster": cl2, "brute": brute}, calls[25:], live=live) == 15
    got = [(d.position, d.updates) for d in cl2.listen(from_position=1, timeout=0)]
    assert got == rec.stream
    crash()
    with pytest.raises(rc.InvalidInput, match="another engine config"):
        rc.Cluster.start(cfg.replace(engine=cfg.engine.replace(window=41)))
    # state written by a version without the format (or another one) is refused, untouched
    store = StateStore(cfg.state_dir, cfg.name)
    manifest = store.read("MANIFEST")
    assert manifest["format"] == STATE_FORMAT
    store.write("MANIFEST", {k: v for k, v in manifest.items() if k != "format"})
    with pytest.raises(rc.InvalidInput, match="field 'state_dir'.*state format 0"):
        rc.Cluster.start(cfg)
    assert "format" not in store.read("MANIFEST")
    cl3 = rc.Cluster.start(cfg, fresh=True)
    assert cl3.stats()["subscriptions"] == 0
    cl3.shutdown()
    assert not os.path.exists(tmp_path / cfg.name)


@pytest.mark.slow     # kills and restarts of Ray processes
def test_a_crash_between_a_log_append_and_its_step_loses_and_duplicates_nothing(ray_session, tmp_path):
    """The coordinator's process ends right after a call's log record is written, before
    any of the call is applied (``options["crash_after_log"]``): a subscribe, a publish, an
    unsubscribe and a pipelined publish. Ray restarts it, it replays the log (the call
    included) and the client's resent call gets the recorded result: every result equals
    the engine and brute force after every call, the stream position counts each message
    once, and a listener's stream is exactly the engine's."""
    calls = random_calls(31, 30, invalid=False)
    ops = [c.op for c in calls]
    # the cluster handle's tokens count its state-changing calls from 1
    crash = [ops.index("subscribe", 3) + 1, ops.index("publish", 5) + 1, ops.index("unsubscribe") + 1]
    n_pipelined = 6
    crash.append(len(calls) + 3)        # the third pipelined publish
    cfg = _ccfg("test-crash-log", tmp_path, checkpoint_every=3600, options={"crash_after_log": crash})
    rec, brute = Recorder(cfg.engine), BruteForceEngine(cfg.engine)
    live: set[int] = set()
    cl = rc.Cluster.start(cfg)
    try:
        listener = Listener(cfg)
        listener.start()
        t0 = time.time()
        assert play({"engine": rec, "cluster": cl, "brute": brute}, calls, live=live) == len(calls)
        more = [c.arg for c in random_calls(32, 40, invalid=False) if c.op == "publish"][:n_pipelined]
        for b in more:
            cl.publish(b, wait=False)
            rec.eng.publish(b)
        cl.flush()
        ids = sorted(live)
        assert cl.topk_many(ids) == {i: rec.eng.topk(i) for i in ids}
        assert cl.position() == rec.eng.stats()["published"]
        store = StateStore(cfg.state_dir, cfg.name)
        assert all(store.exists(f"crashed-{t}") for t in crash), "a planned crash did not happen"
        # a restarted coordinator keeps only its own restart's record: the last crash's
        last = recoveries_since(cl, t0)
        assert [r["cause"] for r in last] == ["restart"] and last[0]["replayed_calls"] >= 1, last
        listener.stop.set()
        listener.join(120)
        played = [s for s in listener.seen if s[0] <= rec.stream[-1][0]]
        assert played == rec.stream, "the listener's stream differs from the engine's updates"
    finally:
        cl.shutdown()


def test_a_checkpoint_not_yet_on_disk_chains_the_logs(tmp_path):
    """A checkpoint commits (the MANIFEST switches) only when every role's background write
    is done. A crash before that resumes from the older checkpoint and replays its log and
    the newer one, in order: same results and delivery stream. (In process: the commit is
    held back by hand, as a slow disk would.)"""
    cfg = _ccfg("test-chain", tmp_path, checkpoint_every=3600,
                options={"runtime": "inproc", "durable": True})
    calls = random_calls(5, 45, invalid=False)
    rec, brute = Recorder(cfg.engine), BruteForceEngine(cfg.engine)
    live: set[int] = set()
    cl = rc.Cluster.start(cfg, fresh=True)
    co = cl._coord.local
    play({"engine": rec, "cluster": cl, "brute": brute}, calls[:12], live=live)
    epoch = cl.checkpoint()
    play({"engine": rec, "cluster": cl, "brute": brute}, calls[12:22], live=live)
    co._commit_checkpoint = lambda block: False         # the next checkpoint's writes never end
    co._checkpoint()
    assert co.stats()["recovery"]["checkpoint_pending"]
    play({"engine": rec, "cluster": cl, "brute": brute}, calls[22:32], live=live)
    assert co.store.read("MANIFEST")["epoch"] == epoch
    assert co.store.exists(f"log-{epoch}") and co.store.exists(f"log-{epoch + 1}")
    co.store.close_log()                                # the coordinator's process is gone
    cl2 = rc.Cluster.start(cfg)                        # resumes from the state directory
    last = cl2.stats()["recovery"]["recoveries"][-1]
    assert last["cause"] == "restart" and last["replayed_calls"] == 20
    play({"engine": rec, "cluster": cl2, "brute": brute}, calls[32:], live=live)
    got = [(d.position, d.updates) for d in cl2.listen(from_position=1, timeout=0)]
    assert got == rec.stream
    man = cl2._coord.local.store.read("MANIFEST")["epoch"]
    cl2._coord.local._removed()                         # the commits' removals are done
    assert man > epoch + 1 and not any(n.endswith(f"-{epoch}") for n in cl2._coord.local.store.list()
                                       if n.startswith(("ckpt-", "log-")))
    cl2.shutdown()


def test_deliveries_are_written_once_in_chunks_and_evicted_with_retention(tmp_path):
    """A checkpoint writes only the deliveries made since the previous one (``deliv-<e>``);
    chunks whose positions all left the retention are removed; a restart rebuilds the
    retained deliveries from the chunks and the log: the same stream from the oldest kept
    position on, and an evicted position refused."""
    cfg = _ccfg("test-deliv", tmp_path, checkpoint_every=3600, retention=60,
                options={"runtime": "inproc", "durable": True})
    calls = random_calls(8, 60, invalid=False)
    rec, brute = Recorder(cfg.engine), BruteForceEngine(cfg.engine)
    live: set[int] = set()
    cl = rc.Cluster.start(cfg, fresh=True)
    co = cl._coord.local
    for a in range(0, 50, 10):
        play({"engine": rec, "cluster": cl, "brute": brute}, calls[a:a + 10], live=live)
        cl.checkpoint()
        chunks = [n for n in co.store.list() if n.startswith("deliv-")]
        assert sorted(chunks) == sorted(rel for rel, _ in co._deliv_chunks)
        assert all(last > co.evicted_upto for _, last in co._deliv_chunks[1:])
    assert co.evicted_upto > 0, "the stream outgrew the retention"
    assert len(co._deliv_chunks) < 5, "evicted chunks are removed"
    play({"engine": rec, "cluster": cl, "brute": brute}, calls[50:55], live=live)   # only in the log
    oldest = co.evicted_upto + 1
    co.store.close_log()
    cl2 = rc.Cluster.start(cfg)
    play({"engine": rec, "cluster": cl2, "brute": brute}, calls[55:], live=live)
    co2 = cl2._coord.local
    got = [(d.position, d.updates) for d in cl2.listen(from_position=co2.evicted_upto + 1, timeout=0)]
    assert got == [(p, u) for p, u in rec.stream if p > co2.evicted_upto]
    assert co2.evicted_upto >= oldest - 1
    with pytest.raises(rc.InvalidInput, match="no longer kept"):
        next(iter(cl2.listen(from_position=co2.evicted_upto, timeout=0)))
    cl2.shutdown()


def test_snapshots_refer_to_the_shared_objects_by_name(tmp_path):
    """A state's references to the config and the vocabulary are written as their names and
    come back as the reader's own objects (compressed, uncompressed and raw files), also where they
    sit deep inside plain containers; a shared object of a plain type (not seen by the fast
    pickler) is named too; a reader without them gets an error, not a copy."""
    import numpy as np

    from rankcast.runtime.recovery import StateStore, dumps
    store = StateStore(str(tmp_path), "shared")
    cfg = rc.EngineConfig(bounds=BOUNDS, window=7, vocabulary=rc.Vocabulary())
    vocab = cfg.vocabulary
    state = {"live": {i: (i, i * 2) for i in range(1000)}, "deep": [(1, {"c": cfg}), vocab],
             "arr": np.arange(5), "cfg": cfg}
    shared = {"cfg": cfg, "vocabulary": vocab}
    store.write("c", state, shared)
    store.write_bytes("u", dumps(state, shared), compress=False)
    store.write_raw("r", state, shared)
    cfg2 = rc.EngineConfig(bounds=BOUNDS, window=9, vocabulary=rc.Vocabulary())
    for rel in ("c", "u", "r"):
        got = store.read(rel, {"cfg": cfg2, "vocabulary": cfg2.vocabulary})
        assert got["cfg"] is cfg2 and got["deep"][0][1]["c"] is cfg2
        assert got["deep"][1] is cfg2.vocabulary and cfg2.vocabulary is not None
        assert got["live"] == state["live"] and np.array_equal(got["arr"], state["arr"])
        with pytest.raises(KeyError):
            store.read(rel)
    plain = {"x": [1, 2, 3]}
    store.write("p", {"a": plain["x"], "b": 4}, plain)
    assert store.read("p", {"x": "mine"}) == {"a": "mine", "b": 4}


def test_committed_deliveries_are_kept_in_their_chunks_alone(tmp_path):
    """Once a checkpoint commits, the coordinator keeps the deliveries it wrote only in their
    chunk (memory holds one checkpoint interval of them); a listener from the first position
    reads them back: the same stream as the engine's, before and after later calls."""
    from rankcast.runtime.delivery import Spilled

    cfg = _ccfg("test-spill", tmp_path, checkpoint_every=3600, options={"runtime": "inproc", "durable": True})
    calls = random_calls(9, 40, invalid=False)
    rec, brute = Recorder(cfg.engine), BruteForceEngine(cfg.engine)
    live: set[int] = set()
    cl = rc.Cluster.start(cfg, fresh=True)
    co = cl._coord.local
    play({"engine": rec, "cluster": cl, "brute": brute}, calls[:25], live=live)
    cl.checkpoint()
    assert co.deliveries and all(isinstance(a, Spilled) for _, a in co.deliveries)
    assert [(d.position, d.updates) for d in cl.listen(from_position=1, timeout=0)] == rec.stream
    play({"engine": rec, "cluster": cl, "brute": brute}, calls[25:], live=live)
    assert not isinstance(co.deliveries[-1][1], Spilled), "made since the commit: in memory"
    assert [(d.position, d.updates) for d in cl.listen(from_position=1, timeout=0)] == rec.stream
    cl.shutdown()


def test_raw_files_hold_their_arrays_beside_compressed_ones(tmp_path):
    """``StateStore.write_raw`` (a pickle and its arrays' buffers, not compressed) reads back
    equal, with writable arrays, next to files that ``write`` compressed."""
    import numpy as np

    from rankcast.runtime.recovery import StateStore
    store = StateStore(str(tmp_path), "raw")
    rng = np.random.default_rng(3)
    obj = [(5, (np.arange(7), np.zeros(0, np.int64), rng.random(9), np.asfortranarray(rng.random((3, 4))))),
           (9, (rng.integers(0, 99, 4)[::2], "text"))]
    store.write_raw("a", obj)
    store.write("b", obj)
    store.write_raw("c", obj, compress=True)
    for got in (store.read("a"), store.read("b"), store.read("c")):
        for (p, arrays), (q, want) in zip(got, obj):
            assert p == q
            for x, y in zip(arrays, want):
                if isinstance(y, np.ndarray):
                    assert x.dtype == y.dtype and np.array_equal(x, y) and x.flags.writeable
                else:
                    assert x == y
    with open(store.path("a"), "rb") as f:
        head = f.read()
    assert obj[0][1][2].tobytes() in head, "the arrays' bytes are in the file as they are"
    with open(store.path("c"), "rb") as f:
        assert f.read(4) == b"\x04\x22\x4d\x18", "compressed: an lz4 frame"


def test_raw_files_read_as_views_of_their_mapping(tmp_path):
    """``StateStore.read_view`` maps a file of ``write_raw`` (a delivery chunk) instead of
    reading it: the same objects, the arrays read-only views that outlive the file's removal
    (a later commit removes evicted chunks); a compressed file reads as ``read`` does."""
    import numpy as np

    from rankcast.runtime.recovery import StateStore
    store = StateStore(str(tmp_path), "view")
    rng = np.random.default_rng(4)
    obj = [(p, (rng.integers(0, 1 << 40, 50 + p), rng.random(50 + p), np.zeros(0, np.int64))) for p in range(30)]
    store.write_raw("chunk", obj)
    store.write("packed", obj)
    mapped, packed = store.read_view("chunk"), store.read_view("packed")
    store.remove("chunk")
    for got, writable in ((mapped, False), (packed, True)):
        assert [p for p, _ in got] == [p for p, _ in obj]
        for (_, arrays), (_, want) in zip(got, obj):
            for x, y in zip(arrays, want):
                assert x.dtype == y.dtype and np.array_equal(x, y) and x.flags.writeable is writable
    with pytest.raises(ValueError):
        mapped[3][1][0][0] = 1


class CutRecorder:
    """rc.Engine that predicts the deliveries of pipelined calls: at each cut, the
    subscriptions whose top-k differs from their list at the previous cut (or their initial
    list), with the top-k now: a delivery holds the net changes since the previous one."""

    def __init__(self, cfg):
        self.eng = rc.Engine(cfg)
        self.at_cut: dict[int, tuple] = {}
        self.touched: set[int] = set()
        self.stream: list[tuple[int, list]] = []

    def subscribe(self, subs):
        self.cut()
        self.eng.subscribe(subs)
        self.at_cut.update((s.id, tuple(self.eng.topk(s.id))) for s in subs)

    def unsubscribe(self, ids):
        self.cut()
        self.eng.unsubscribe(ids)
        for i in ids:
            self.at_cut.pop(i, None)
            self.touched.discard(i)

    def publish(self, msgs):
        self.touched |= {u.subscription_id for u in self.eng.publish(msgs)}

    def topk(self, sub_id):
        return self.eng.topk(sub_id)

    def cut(self):
        ups = []
        for i in sorted(self.touched):
            now = tuple(self.eng.topk(i))
            if now != self.at_cut[i]:
                ups.append(rc.Update(i, now))
                self.at_cut[i] = now
        self.touched = set()
        if ups:
            self.stream.append((self.eng.stats()["published"], ups))


def test_a_partition_rebuilt_from_its_subscriptions_goes_on_exactly(tmp_path):
    """Direct mode (hash): a partition's snapshot is its subscriptions, not its core, and a
    restore rebuilds its buffers by one re-evaluation as of the checkpoint. Pipelined calls
    (delivered only at cuts here), checkpoints in the middle of their groups (a checkpoint is
    a cut), then a restart from the state directory with pipelined calls only in the log:
    after every call every top-k equals brute force, and the deliveries a listener sees are
    exactly the net changes between consecutive cuts."""
    cfg = _ccfg("test-rebuild", tmp_path, policy="hash", checkpoint_every=3600, delivery_interval=3600.0,
                options={"runtime": "inproc", "durable": True})
    calls = random_calls(31, 70, invalid=False)
    rec, brute = CutRecorder(cfg.engine), BruteForceEngine(cfg.engine)
    cl = rc.Cluster.start(cfg, fresh=True)
    live: set[int] = set()

    def run(cl, part):
        for n, call in enumerate(part):
            if call.op == "publish":
                cl.publish(call.arg, wait=False)
            else:
                getattr(cl, call.op)(call.arg)
            getattr(rec, call.op)(call.arg)
            getattr(brute, call.op)(call.arg)
            if call.op == "subscribe":
                live.update(s.id for s in call.arg)
            elif call.op == "unsubscribe":
                live.difference_update(call.arg)
            if n % 5 == 4:
                cl.checkpoint()
                rec.cut()
            ids = sorted(live)
            got = cl.topk_many(ids)
            assert got == {i: brute.topk(i) for i in ids} == {i: rec.topk(i) for i in ids}

    run(cl, calls[:33])
    co = cl._coord.local
    cl.checkpoint()
    rec.cut()
    snap = co.store.read(f"ckpt-{co.epoch}/partition-0", {"cfg": cfg.engine, "vocabulary": None})
    assert snap["state"]["rebuild"] and "core" not in snap["state"]
    assert len(snap["state"]["subs"]) == len(co.parts[0].local.core.subs)
    run(cl, calls[33:37])                              # only in the log: pipelined, not cut
    co.store.close_log()
    cl2 = rc.Cluster.start(cfg)                        # restored: every partition rebuilt
    rec.cut()                                          # ... and checkpointed: a cut
    assert [p.local.metrics.values["rebuilds"] for p in cl2._coord.local.parts] == [1] * cfg.partitions
    run(cl2, calls[37:])
    cl2.flush()
    rec.cut()
    got = [(d.position, d.updates) for d in cl2.listen(from_position=1, timeout=0)]
    assert got == rec.stream
    cl2.shutdown()


def _pipelined_cluster(cfg, seed: int):
    """A cluster and an engine with the same subscriptions of ``random_calls(seed)``: (cluster,
    engine, subscription ids, the publish batches, the start position, {position: top-k of
    every subscription} at the start)."""
    calls = random_calls(seed, 90, invalid=False)
    subs = [s for c in calls if c.op == "subscribe" for s in c.arg]
    eng = rc.Engine(cfg.engine)
    cl = rc.Cluster.start(cfg)
    cl.subscribe(subs)
    eng.subscribe(subs)
    ids = [s.id for s in subs]
    start = cl.position()
    return cl, eng, ids, [c.arg for c in calls if c.op == "publish"], start, \
        {start: {i: tuple(eng.topk(i)) for i in ids}}


def _deliveries_exact(got, states, ids, start) -> int:
    """Every delivery (position, {id: top-k}) holds exactly the subscriptions whose top-k
    differs from the previous delivery's position, each with its top-k there; returns the
    last position delivered."""
    prev = start
    for pos, ups in got:
        assert pos > prev and pos in states
        changed = {i for i in ids if states[pos][i] != states[prev][i]}
        assert ups.keys() == changed, pos
        assert all(ups[i] == states[pos][i] for i in ups)
        prev = pos
    return prev


@pytest.mark.slow     # kills and restarts of Ray processes
def test_pipelined_calls_reach_a_listener_at_the_interval_through_a_kill(ray_session, tmp_path):
    """Pipelined calls only, never a flush: their cuts start behind the steps in flight
    (delivered when done, at the next call or a listener's poll), a partition is killed
    while cuts are pending, and the last group is cut by the listener's poll alone. Every
    delivery holds exactly the subscriptions whose top-k differs from the previous
    delivery's position, each with its top-k at its own position (the engine's)."""
    # no checkpoint after the first (one would cut too): the partial recovery replays the
    # journal from it
    cfg = _ccfg("test-async-cut", tmp_path, policy="hash", checkpoint_every=3600, delivery_interval=0.01,
                options={"delay": 0.03})     # slow steps: cuts are pending at the kill
    cl, eng, ids, batches, start, states = _pipelined_cluster(cfg, 23)
    try:
        rng = random.Random(5)
        kill_at = len(batches) // 2
        for n, b in enumerate(batches):
            if n == kill_at:
                pids = cl.pids()["partition"]
                kill = Kill(cl, "partition", index=pids.index(rng.choice(pids))).now()
                kill_pos = eng.stats()["published"]
            cl.publish(b, wait=False)
            eng.publish(b)
            states[eng.stats()["published"]] = {i: tuple(eng.topk(i)) for i in ids}
            time.sleep(rng.choice([0.0, 0.0, 0.02]))
        last, before_last = sorted(states)[-1], sorted(states)[-2]
        assert states[last] != states[before_last]     # the last call, cut by the listener alone
        got = [(d.position, {u.subscription_id: tuple(u.topk) for u in d.updates})
               for d in listen_until(cl, start + 1, last)]
        assert _deliveries_exact(got, states, ids, start) == last, "the last call was not delivered"
        # cut at the interval while the stream ran, before the kill and again after it (how
        # many calls each delivery groups depends on the machine's speed; a delivery at the
        # kill's position was cut before the call that followed the kill)
        at = [p for p, _ in got]
        assert any(p <= kill_pos for p in at) and any(kill_pos < p < last for p in at), (kill_pos, at)
        assert assert_one_recovery(cl, kill)["mode"] == "partial"
        assert cl.topk_many(ids) == {i: list(states[max(states)][i]) for i in ids}
    finally:
        cl.shutdown()


@pytest.mark.slow     # kills and restarts of Ray processes
def test_checkpoints_behind_the_steps_in_flight_through_kills_and_a_restart(ray_session, tmp_path):
    """Direct mode checkpoints without draining the pipeline: each role's snapshot is queued
    behind its steps in flight and the cut's take; the cuts still running are delivered, and
    their deliveries written, before the commit. Pipelined calls only, a checkpoint due at
    every call, a partition and then a shard killed while checkpoints are pending: every
    delivery holds exactly the changes at its position. Then every process goes at once,
    and the cluster restarted from its state holds the same results and deliveries."""
    import ray

    cfg = _ccfg("test-ckpt-behind", tmp_path, policy="hash", checkpoint_every=0.0, delivery_interval=0.01,
                options={"delay": 0.03})     # slow steps: snapshots and cuts queue behind them
    cl, eng, ids, batches, start, states = _pipelined_cluster(cfg, 31)
    try:
        rng = random.Random(9)
        kills = {len(batches) // 3: "partition", 2 * len(batches) // 3: "shard"}
        behind, done = 0, []
        for n, b in enumerate(batches):
            if n in kills:
                pids = cl.pids()[kills[n]]
                done.append(Kill(cl, kills[n], index=pids.index(rng.choice(pids))).now())
            cl.publish(b, wait=False)
            eng.publish(b)
            states[eng.stats()["published"]] = {i: tuple(eng.topk(i)) for i in ids}
            rec = cl.stats()["recovery"]
            behind += bool(rec["checkpoint_pending"] and rec["last_checkpoint_parts"].get("behind"))
            time.sleep(rng.choice([0.0, 0.0, 0.02]))
        assert behind > 3, "no checkpoint was pending behind the steps"
        got = [(d.position, {u.subscription_id: tuple(u.topk) for u in d.updates})
               for d in listen_until(cl, start + 1, max(states))]
        assert _deliveries_exact(got, states, ids, start) == max(states) and len(got) > 5
        rec = cl.stats()["recovery"]
        # each kill, its own recovery: the partition's before the shard's kill
        assert [len(recoveries_since(cl, k.at)) for k in done] == [2, 1], rec["recoveries"]
        recs = recoveries_since(cl, done[0].at)
        assert all(r["mode"] == "partial" and r["cause"] != "restart" for r in recs), recs
        assert rec["checkpoints"] > 5
        final = {i: list(states[max(states)][i]) for i in ids}
        assert cl.topk_many(ids) == final
        cl.checkpoint()
        ray.kill(ray.get_actor(cfg.name, namespace=cfg.namespace), no_restart=True)
        wait_actor_gone(cfg.name, cfg.namespace)
        cl = rc.Cluster.start(cfg)
        assert cl.stats()["recovery"]["recoveries"][-1]["cause"] == "restart"
        assert cl.topk_many(ids) == final
        again = [(d.position, {u.subscription_id: tuple(u.topk) for u in d.updates})
                 for d in cl.listen(from_position=start + 1, timeout=0)]
        assert again == got
    finally:
        cl.shutdown()


def test_a_core_restored_from_its_snapshot_goes_on_exactly():
    """What a partition snapshots (its SkypeCore, buffer pools trimmed to the rows handed
    out) restores to a core that goes on with the same results as the one never stopped."""
    import pickle

    from rankcast.kinds.spatial.engine import Engine

    cfg = rc.EngineConfig(bounds=BOUNDS, window=40, candidate_extra=0)
    calls = random_calls(23, 70, invalid=False)
    a, b, brute = Engine(cfg), Engine(cfg), BruteForceEngine(cfg)
    live: set[int] = set()
    play({"a": a, "b": b, "brute": brute}, calls[:35], live=live)
    b.core = pickle.loads(pickle.dumps(a.core, protocol=pickle.HIGHEST_PROTOCOL))   # b's own window stays
    assert b.core.buf.bi.shape[0] == max(1, a.core.buf.used) < a.core.buf.bi.shape[0]
    play({"a": a, "restored": b, "brute": brute}, calls[35:], live=live)


def test_a_death_while_a_checkpoint_is_taken_after_a_call(tmp_path):
    """A role dies while the coordinator checkpoints at the end of a call, right after the
    previous checkpoint committed: the call's own result stands, the recovery replays from
    the new checkpoint, and every later result equals the engine's and brute force."""
    from ray.exceptions import RayActorError

    cfg = _ccfg("test-ckpt-death", tmp_path, checkpoint_every=3600,
                options={"runtime": "inproc", "durable": True})
    calls = random_calls(9, 40, invalid=False)
    rec, brute = Recorder(cfg.engine), BruteForceEngine(cfg.engine)
    live: set[int] = set()
    cl = rc.Cluster.start(cfg, fresh=True)
    co = cl._coord.local
    play({"engine": rec, "cluster": cl, "brute": brute}, calls[:15], live=live)
    co._checkpoint()                                    # pending; it commits at the next call's end
    pend = co._pending                                  # (its writes, at nice 19, finished first:
    co.rt.get(pend["snaps"] + [h.snapshot_written.remote() for h in pend["roles"]])
    for w in pend["writers"]:                           # under load they could outlast the calls)
        w.done()
    co.ccfg = co.ccfg.replace(checkpoint_every=0.0)    # ... which then takes the next one
    quiesce, died = co.quiesce, []

    def dies_once():
        if not died and co._pending is None and co._n_open:
            died.append(True)
            raise RayActorError()
        return quiesce()
    co.quiesce = dies_once
    play({"engine": rec, "cluster": cl, "brute": brute}, calls[15:], live=live)
    assert died and len(co.recoveries) == 1
    got = [(d.position, d.updates) for d in cl.listen(from_position=1, timeout=0)]
    assert got == rec.stream
    cl.shutdown()


@pytest.mark.parametrize("fork", ["1", "0", "raw"])
def test_a_snapshot_holds_the_state_at_its_start_and_reports_write_errors(tmp_path, monkeypatch, fork):
    """A snapshot (by a forked child, from an in-memory copy by a thread, or raw: a copy
    that the role made and the thread pickles) holds the state as it was when it started,
    though the role changes it at once; a write that fails is raised by ``done`` with its
    cause, not lost with the child or the thread."""
    import numpy as np

    from rankcast.runtime.recovery import ForkWriter, StateStore, Writer, write_snapshot

    raw = fork == "raw"
    monkeypatch.setenv("RANKCAST_SNAPSHOT_FORK", "0" if raw else fork)
    store = StateStore(str(tmp_path), "snap")
    cfg = rc.EngineConfig(bounds=BOUNDS, window=7)
    state = {"a": np.arange(200_000), "n": 1, "cfg": cfg}
    copy = (lambda: {**state, "a": state["a"].copy()}) if raw else (lambda: state)
    w = write_snapshot(store, "ckpt-1/role-0", copy, {"cfg": cfg}, raw=raw)
    assert isinstance(w, ForkWriter if fork == "1" else Writer)
    state["a"][:] = -1                                  # the role goes on at once
    state["n"] = 2
    assert w.done() == "ckpt-1/role-0" and not w.is_alive()
    got = store.read("ckpt-1/role-0", {"cfg": "mine"})
    assert got["n"] == 1 and np.array_equal(got["a"], np.arange(200_000)) and got["cfg"] == "mine"
    if fork == "1":         # the child wrote the arrays from the shared pages, not a pickle's copy
        import pyarrow as pa

        from rankcast.runtime.recovery import RAW_MAGIC
        with pa.input_stream(store.path("ckpt-1/role-0"), compression="lz4") as f:
            assert f.read(len(RAW_MAGIC)) == RAW_MAGIC

    class Unpicklable:
        def __reduce__(self):
            raise TypeError("cannot pickle this role's socket")

    if fork != "0":                                     # the child or thread fails: done() says why
        bad = write_snapshot(store, "ckpt-1/role-1", lambda: {"s": Unpicklable()}, raw=raw)
        with pytest.raises(RuntimeError, match="ckpt-1/role-1.*cannot pickle this role's socket"):
            bad.done()
    else:                                               # the copy fails in the role itself
        with pytest.raises(TypeError, match="cannot pickle this role's socket"):
            write_snapshot(store, "ckpt-1/role-1", lambda: {"s": Unpicklable()})
    assert not store.exists("ckpt-1/role-1")

    if fork == "1":                                     # a wedged child is ended, not waited for
        import time

        import rankcast.runtime.recovery as recovery

        monkeypatch.setattr(recovery, "SNAPSHOT_TIMEOUT", 0.5)
        t0 = time.monotonic()
        stuck = write_snapshot(store, "ckpt-1/role-2", lambda: time.sleep(60))
        with pytest.raises(RuntimeError, match="ckpt-1/role-2.*did not finish in 0.5 s"):
            stuck.done()
        assert time.monotonic() - t0 < 30 and not stuck.is_alive()
        assert not store.exists("ckpt-1/role-2")


def test_a_shard_answers_the_questions_a_partial_recovery_asks_about_messages_it_dropped():
    """A window shard drops from its index what the steps in flight no longer ask about
    (``keep_after``); a partial recovery asks again about the steps since the checkpoint
    (seqs above ``hold``), answered from the batches it kept: equal, row by row, to a window
    that never dropped a message; questions older than what is kept, or than the index
    when nothing is kept (``hold`` None), raise."""
    import numpy as np
    from rankcast.kinds.spatial.roles.shard import WindowShard
    from rankcast.kinds.spatial.columns import Encoder
    from rankcast.kinds.spatial.window import MessageWindow

    cfg = rc.EngineConfig(bounds=BOUNDS, window=20, candidate_extra=0)
    enc = Encoder(cfg.bounds, cfg.vocabulary)
    calls = random_calls(5, 120, invalid=False, max_publish=12)
    msgs = [m for c in calls if c.op == "publish" for m in c.arg]
    subs = [s for c in calls if c.op == "subscribe" for s in c.arg][:25]
    sb, pending = enc.encode_subscriptions(subs)
    enc.commit(pending)
    shard = WindowShard(cfg, 0, export_metrics=False)
    whole = MessageWindow(cfg)
    K = np.full(len(sb), 6, np.int64)
    steps, seq, hold = [], 0, None
    for j in range(1, 41):
        part = msgs[(j - 1) * 5: j * 5]
        mb, pending = enc.encode_messages(part, time_window=False)
        enc.commit(pending)
        seqs = np.arange(seq, seq + len(mb), dtype=np.int64)
        seq += len(mb)
        exp_end = seq - 1 - 20
        if j in (15, 25):
            hold = steps[-1][2]              # a checkpoint committed after step 14, then 24
        shard.append(j, (mb, seqs) if len(mb) else None, exp_end, exp_end, hold)
        if len(mb):
            whole.append(mb, seqs, None)
        steps.append((j, seq - 1, exp_end))

    def same(j, upto, after):
        got = shard.search(j, sb, K, after, upto)
        want = whole.search(sb, K, after_seq=after, upto_seq=upto)
        for f in ("offsets", "seq", "ids", "score", "complete"):
            assert np.array_equal(getattr(got, f), getattr(want, f)), (j, f)

    asked = 0
    for j, upto, after in steps:          # every answer given is exact; those about seqs above
        if after >= shard.expired or after >= shard.kept_after:       # hold are all given
            same(j, upto, after)
            asked += after < shard.expired
        else:
            assert after < hold
            with pytest.raises(RuntimeError, match="are gone"):
                shard.search(j, sb, K, after, upto)
    assert asked >= 10, "questions about dropped messages"
    shard.append(41, None, steps[-1][2], steps[-1][2], None)     # nothing kept any more
    with pytest.raises(RuntimeError, match="are gone"):
        shard.search(20, sb, K, steps[19][2], steps[19][1])

"""Scenarios on a Ray cluster of several nodes, every one of them on loopback only
(``ray.cluster_utils.Cluster``, each node with its own resources, Ray's health checks of
``rankcast.config.NODE_HEALTH_CHECKS``: a crashed node is counted dead in about a second),
for the tests of placement and node loss (tests/test_nodes.py) and the node-loss benchmark.

Each scenario runs in a process of its own, which starts its Ray nodes and its rankcast
cluster and checks everything itself: ``python -m tests.multinode SCENARIO [KIND]`` exits
with status 0 when every check held, and prints its figures as one JSON line last. The
process never joins a Ray that runs already: its Ray files live in a directory of its own
(``RAY_TMPDIR``), so no other ``ray.init()`` finds its nodes either.

- ``spread KIND``: roles spread over 3 nodes on purpose; the worker holding the most data
  roles removed at a random moment of a call (a crash: its processes killed); a new node
  added; the whole cluster restarted, its roles now on other nodes. The oracle after every
  call; a listener sees the oracle's stream position by position, no gap, no duplicate.
- ``noroom``: a node lost when the others have no room for its roles: calls raise
  ``rc.NoCapacity`` (and stats() says why), the state is kept, and the cluster resumes
  exactly once a node joins.
- ``loopback``: ``rc.Cluster.start`` with no address, as a new user runs it: every listening
  socket of Ray's processes is on loopback.
"""
from __future__ import annotations

import collections
import json
import os
import random
import sys
import tempfile
import threading
import time
import traceback

import numpy as np

import rankcast as rc
from rankcast.config import NODE_HEALTH_CHECKS
from rankcast.runtime.placement import CONTROL_ROLES, DATA_ROLES
from tests.sockets import is_loopback, listening, ray_pids

BOUNDS = (0.0, 0.0, 10.0, 10.0)
NODE_STORE = 200 << 20      # object store of each node


# ---------------------------------------------------------------------------------- nodes
class Nodes:
    """A head and workers on loopback; ``crash(node)`` kills a node's processes at once."""

    def __init__(self, head_cpus: float, worker_cpus: list[float], store: int = NODE_STORE):
        import ray
        from ray.cluster_utils import Cluster

        self.c = Cluster(initialize_head=True, connect=False, head_node_args={
            "num_cpus": head_cpus, "include_dashboard": False, "object_store_memory": store,
            "_system_config": dict(NODE_HEALTH_CHECKS)})
        ray.init(address=self.c.address, log_to_driver=False)
        self.store = store
        self.workers = [self.add(c) for c in worker_cpus]

    def add(self, cpus: float):
        node = self.c.add_node(num_cpus=cpus, object_store_memory=self.store)
        self.c.wait_for_nodes()
        return node

    def crash(self, node) -> None:
        self.c.remove_node(node, allow_graceful=False)

    def wait_dead(self, node, deadline: float = 120.0) -> float:
        """Seconds until Ray's control store counts ``node`` dead."""
        t0 = time.monotonic()
        while node.node_id in live_node_ids():
            assert time.monotonic() - t0 < deadline, "the lost node is still counted alive"
            time.sleep(0.2)
        return time.monotonic() - t0

    @property
    def head_id(self) -> str:
        return self.c.head_node.node_id

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is not None:         # said before the nodes go (a thread may end the process then)
            traceback.print_exception(kind, exc, tb)
            sys.stderr.flush()
        for listener in LISTENERS:
            listener.stop.set()
        self.shutdown()

    def shutdown(self) -> None:
        import ray
        ray.shutdown()
        for node in list(self.c.worker_nodes):
            self.c.remove_node(node, allow_graceful=False)
        self.c.head_node.kill_all_processes(check_alive=False, allow_graceful=False)


# ---------------------------------------------------------------------------------- kinds
class Recorder:
    """The kind's engine, recording the stream a listener must see: (position, updates)."""

    def __init__(self, eng, position):
        self.eng, self._pos = eng, position
        self.stream: list[tuple[int, list]] = []

    def publish(self, items, **kw):
        out = self.eng.publish(items, **kw)
        if out:
            self.stream.append((self._pos(self.eng), out))
        return out

    def __getattr__(self, name):
        return getattr(self.eng, name)


class Spatial:
    name = "spatial"

    def __init__(self, seed: int):
        from rankcast.baselines import BruteForceEngine
        from rankcast.kinds.spatial.testing import random_calls

        self.cfg = rc.EngineConfig(bounds=BOUNDS, window=40, candidate_extra=0)
        self.calls = random_calls(seed, 400, invalid=False)
        self.oracle = Recorder(rc.Engine(self.cfg), lambda e: e.stats()["published"])
        self.brute = BruteForceEngine(self.cfg)
        self.live: set[int] = set()
        self.at = 0

    def ccfg(self, **kw):
        return rc.ClusterConfig(engine=self.cfg, policy="prefix", partitions=3, window_shards=2, batch_size=6,
                                max_in_flight=3, **kw)

    def step(self, cl) -> None:
        from rankcast.kinds.spatial.testing import play
        play({"engine": self.oracle, "cluster": cl, "brute": self.brute}, [self.calls[self.at]], live=self.live)
        self.at += 1

    def publish_only(self):
        """The next publish call's messages (the calls before it are played by ``step``)."""
        while self.calls[self.at].op != "publish":
            self.at += 1
        self.at += 1
        return self.calls[self.at - 1].arg

    def applied(self, items):
        self.brute.publish(items)
        return self.oracle.publish(items)

    def check(self, cl) -> None:
        ids = sorted(self.live)
        got = cl.topk_many(ids)
        assert all(got[i] == self.oracle.topk(i) == self.brute.topk(i) for i in ids)


class Matching:
    name = "matching"

    def __init__(self, seed: int):
        self.cfg = rc.MatchConfig(scoring="relaxed", index="sopt-r-tree", k=4, rebuild_min=4)
        self.rng = np.random.default_rng(seed)
        self.oracle = Recorder(rc.Matcher(self.cfg), lambda m: m.stats()["published"])
        self.live: dict[int, object] = {}
        self.nid = self.nev = 0

    def ccfg(self, **kw):
        return rc.ClusterConfig(engine=self.cfg, policy="attribute", partitions=3, batch_size=4, **kw)

    def step(self, cl) -> None:
        from rankcast.testing import assert_matches_exact, random_expressions
        rng = self.rng
        r = rng.random()
        if r < 0.3 or not self.live:
            new = random_expressions(rng, self.nid, int(rng.integers(1, 20)))
            self.nid += len(new) + 1
            cl.subscribe(new)
            self.oracle.subscribe(new)
            self.live.update((e.id, e) for e in new)
            return
        if r < 0.4:
            gone = [int(i) for i in rng.choice(list(self.live), max(1, len(self.live) // 5), replace=False)]
            cl.unsubscribe(gone)
            self.oracle.unsubscribe(gone)
            for i in gone:
                del self.live[i]
            return
        evs = self.publish_only()
        got = cl.publish(evs)
        assert got == self.oracle.publish(evs)
        assert_matches_exact(got, list(self.live.values()), evs, self.cfg.scoring, self.cfg.k)

    def publish_only(self):
        from rankcast.testing import random_events
        evs = random_events(self.rng, self.nev, int(self.rng.integers(1, 8)))
        self.nev += len(evs)
        return evs

    def applied(self, items):
        return self.oracle.publish(items)

    def check(self, cl) -> None:
        assert cl.stats()["subscriptions"] == len(self.live)


class Range:
    name = "range"

    def __init__(self, seed: int):
        self.cfg = rc.RangeConfig(k=3, method="paint-sparse", epsilon=0.5, leaf_size=4)
        self.rng = np.random.default_rng(seed)
        self.oracle = Recorder(rc.RangeEngine(self.cfg), lambda e: e.stats()["published"])
        self.subs: dict[int, tuple[float, float]] = {}
        self.objs: dict = {}
        self.nid = self.next_obj = 0

    def ccfg(self, **kw):
        return rc.ClusterConfig(engine=self.cfg, policy="kd", partitions=3, **kw)

    def step(self, cl) -> None:
        from tests.test_range_cluster import _as_updates, _subs
        rng = self.rng
        r = rng.random()
        if r < 0.25 or not self.subs:
            new = _subs(rng, self.nid, int(rng.integers(1, 20)))
            self.nid += len(new) + 1
            cl.subscribe(new)
            self.oracle.subscribe(new)
            self.subs.update((s.id, (s.lo, s.hi)) for s in new)
        elif r < 0.32:
            gone = [int(i) for i in rng.choice(list(self.subs), max(1, len(self.subs) // 5), replace=False)]
            cl.unsubscribe(gone)
            self.oracle.unsubscribe(gone)
            for i in gone:
                del self.subs[i]
        else:
            ups = self.publish_only()
            assert _as_updates(cl.publish(ups)) == _as_updates(self.oracle.publish(ups))
        self.check(cl)

    def publish_only(self):
        from tests.test_range_cluster import _updates
        ups, self.next_obj = _updates(self.rng, self.objs, self.next_obj)
        return ups

    def applied(self, items):
        return self.oracle.publish(items)

    def check(self, cl) -> None:
        from rankcast.baselines.rangetopk import brute_topk
        ids = sorted(self.subs)
        got = cl.topk_many(ids)
        assert all(got[i] == self.oracle.topk(i) == brute_topk(self.objs, *self.subs[i], self.cfg.k) for i in ids)


KINDS = {"spatial": Spatial, "matching": Matching, "range": Range}


# ---------------------------------------------------------------------------------- checks
LISTENERS: list = []


class Listener(threading.Thread):
    """Follows the stream from ``start`` through its own handle, resuming after the last
    position it handled each time its listen call ends, until told to stop."""

    def __init__(self, name: str, namespace: str, start: int = 1):
        super().__init__(daemon=True)
        self.name_, self.namespace, self.pos = name, namespace, start
        self.seen: list[tuple[int, list]] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None
        LISTENERS.append(self)

    def run(self):
        try:
            cl = rc.Cluster.attach(self.name_, namespace=self.namespace)
            while True:
                n = len(self.seen)
                for d in cl.listen(from_position=self.pos, timeout=1.0):
                    self.seen.append((d.position, d.updates))
                    self.pos = d.position + 1
                if self.stop.is_set() and len(self.seen) == n:
                    return
        except BaseException as e:     # reported by finish()
            self.error = e

    def finish(self) -> list:
        self.stop.set()
        self.join(300)
        assert not self.is_alive(), "the listener did not finish"
        if self.error is not None:
            raise self.error
        return self.seen


def placement(cl) -> dict[str, str]:
    """role label -> node id, from stats()."""
    return cl.stats()["placement"]["roles"]


def check_spread(roles: dict[str, str], nodes: set[str], head: str | None) -> None:
    """Data roles spread evenly over ``nodes``; control roles on the head (when given)."""
    data = collections.Counter(n for label, n in roles.items() if label.split("-")[0] in DATA_ROLES)
    assert set(data) <= nodes, (data, nodes)
    counts = [data.get(n, 0) for n in nodes]
    assert max(counts) - min(counts) <= 1, f"data roles not spread: {data}"
    if head is not None:
        ctl = {label: n for label, n in roles.items() if label.split("-")[0] in CONTROL_ROLES}
        assert all(n == head for n in ctl.values()), f"control roles off the head: {ctl}"


def live_node_ids() -> set[str]:
    import ray
    return {n["NodeID"] for n in ray.nodes() if n["Alive"]}


# ---------------------------------------------------------------------------------- scenarios
T0 = time.monotonic()


def log(what: str) -> None:
    print(f"[{time.monotonic() - T0:7.1f} s] {what}", file=sys.stderr, flush=True)


def scenario_spread(kind: str, seed: int = 3) -> dict:
    drv = KINDS[kind](seed)
    state = tempfile.mkdtemp(prefix="rc-nodes-state-")
    out = {"kind": kind}
    with Nodes(head_cpus=2, worker_cpus=[2, 2]) as nodes:
        ccfg = drv.ccfg(name=f"nodes-{kind}", state_dir=state, actor_cpus=0.1, checkpoint_every=0.5)
        cl = rc.Cluster.start(ccfg)
        listener = Listener(ccfg.name, ccfg.namespace)
        listener.start()
        roles0 = placement(cl)
        log(f"started: {roles0}")
        check_spread(roles0, live_node_ids(), nodes.head_id)
        for _ in range(12):
            drv.step(cl)
        # the worker with the most data roles crashes at a random moment of the next calls
        data = collections.Counter(n for label, n in roles0.items() if label.split("-")[0] in DATA_ROLES)
        victim = max(nodes.workers, key=lambda w: data.get(w.node_id, 0))
        lost = sorted(label for label, n in roles0.items() if n == victim.node_id)
        assert lost, roles0
        t_crash = threading.Timer(random.Random(seed).uniform(0.0, 0.05), nodes.crash, (victim,))
        t_crash.start()
        for _ in range(12):
            drv.step(cl)
        t_crash.join()
        log(f"crashed {victim.node_id[:8]} holding {lost}")
        # where the calls above ended before the crash, the stream goes on until a call
        # meets a lost role (a publish reaches every partition), each call checked
        for _ in range(24):
            if cl.stats()["recovery"]["recoveries"]:
                break
            drv.step(cl)
        drv.check(cl)
        st = cl.stats()
        recs = st["recovery"]["recoveries"]
        assert recs, "no recovery after the node was lost"
        roles1 = st["placement"]["roles"]
        nodes.wait_dead(victim)
        alive = live_node_ids()
        assert set(roles1.values()) <= alive, roles1
        check_spread(roles1, alive, nodes.head_id)
        log(f"recovered: {recs}")
        out["lost_roles"] = lost
        out["recoveries"] = [{k: r.get(k) for k in ("cause", "mode", "seconds", "replayed_calls")} for r in recs]
        # a node joins: the stream goes on exactly
        new = nodes.add(2)
        log("node added")
        for _ in range(8):
            drv.step(cl)
        seen = listener.finish()
        assert seen == drv.oracle.stream, "the listener's stream differs from the oracle's"
        # the whole cluster restarted: its roles land on the nodes there are now
        before = placement(cl)
        cl.shutdown(keep_state=True)
        cl = rc.Cluster.start(ccfg)
        listener = Listener(ccfg.name, ccfg.namespace, start=(seen[-1][0] + 1) if seen else 1)
        listener.start()
        after = placement(cl)
        log(f"restarted: {after}")
        check_spread(after, live_node_ids(), nodes.head_id)
        assert new.node_id in after.values(), f"no role on the new node after the restart: {after}"
        assert {k: v for k, v in after.items() if k != "coordinator"} != \
            {k: v for k, v in before.items() if k != "coordinator"}
        for _ in range(8):
            drv.step(cl)
        drv.check(cl)
        seen2 = listener.finish()
        assert seen + seen2 == drv.oracle.stream, "the stream after the restart differs from the oracle's"
        out["deliveries"] = len(seen) + len(seen2)
        cl.shutdown()
        return out


def scenario_noroom(kind: str = "spatial", seed: int = 5) -> dict:
    """Every node full; the worker holding two data roles lost: one fits in the room left,
    the other waits. Calls say so (the one that met the loss was logged: it takes effect at
    the resume), stats() too; a node joins and the cluster resumes exactly."""
    drv = KINDS[kind](seed)
    state = tempfile.mkdtemp(prefix="rc-nodes-state-")
    # control roles 3 x 0.5 on the head (2 CPUs: room for one data role); 4 data roles
    # (3 partitions + 1 shard, or 3 partitions + a distributor's place): 1 on the head, the rest on workers
    out = {"kind": kind}
    with Nodes(head_cpus=2, worker_cpus=[1, 1]) as nodes:
        ccfg = drv.ccfg(name=f"noroom-{kind}", state_dir=state, actor_cpus=0.5, checkpoint_every=0.5,
                        placement_timeout=6.0, options={"standby": False})
        if kind == "spatial":
            ccfg = ccfg.replace(window_shards=1)
        cl = rc.Cluster.start(ccfg)
        listener = Listener(ccfg.name, ccfg.namespace)
        listener.start()
        roles0 = placement(cl)
        for _ in range(10):
            drv.step(cl)
        data = collections.Counter(n for label, n in roles0.items() if label.split("-")[0] in DATA_ROLES)
        victim = max(nodes.workers, key=lambda w: data.get(w.node_id, 0))
        assert data[victim.node_id] == 2, roles0
        log(f"started: {roles0}; crashing {victim.node_id[:8]}")
        nodes.crash(victim)
        nodes.wait_dead(victim)
        # the calls go on until one meets a lost role (a call reaches only some roles)
        for _ in range(50):
            items = drv.publish_only()
            try:
                got = cl.publish(items)
            except rc.NoCapacity as e:
                # the call that met the loss (this one, or a listener's poll before it)
                assert "no node has room" in str(e), e
                out["error"], out["accepted"] = str(e), e.accepted
                log(f"no room (accepted: {e.accepted}): {e}")
                if e.accepted:              # in the log: applied when the cluster resumes
                    assert "in the cluster's log" in str(e)
                    drv.applied(items)
                break
            assert got == drv.applied(items)
        else:
            raise AssertionError("no call met the lost roles")
        st = cl.stats()
        w = st["placement"]["waiting"]
        assert w is not None and "no node has room" in w["reason"] and w["roles"], st["placement"]
        assert st["subscriptions"] == (len(drv.live) if hasattr(drv, "live") else len(drv.subs))
        t0 = time.monotonic()
        try:
            cl.publish(drv.publish_only())
            raise AssertionError("a call succeeded while the cluster waited for room")
        except rc.NoCapacity as e:
            assert not e.accepted, e
        out["refused_in_seconds"] = time.monotonic() - t0
        nodes.add(1)
        log("node added")
        end = time.monotonic() + 300
        while cl.stats()["placement"]["waiting"] is not None:
            assert time.monotonic() < end, "the cluster did not resume after a node joined"
            time.sleep(0.5)
        rec = cl.stats()["recovery"]["recoveries"][-1]
        assert rec["cause"] == "NoCapacity", rec
        out["resume"] = {k: rec.get(k) for k in ("seconds", "waited_seconds", "replayed_calls")}
        log(f"resumed: {out['resume']}")
        drv.check(cl)
        for _ in range(8):
            drv.step(cl)
        drv.check(cl)
        seen = listener.finish()
        assert seen == drv.oracle.stream, "the listener's stream differs from the oracle's"
        assert set(placement(cl).values()) <= live_node_ids()
        cl.shutdown()
        return out


def scenario_loopback(kind: str = "spatial") -> dict:
    """The embedded default, as a new user starts it (no Ray running, no address)."""
    __import__("ray")           # imported before rankcast starts it, with Ray's own setting
    drv = KINDS[kind](1)
    cl = rc.Cluster.start(drv.ccfg(name="loopback", state_dir=tempfile.mkdtemp(prefix="rc-nodes-state-"),
                                   actor_cpus=0.1))
    try:
        for _ in range(4):
            drv.step(cl)
        socks = listening(ray_pids())
        bad = [s for s in socks if not is_loopback(s[2])]
        assert socks and not bad, f"listening beyond loopback: {bad}"
        return {"sockets": len(socks), "processes": len({s[0] for s in socks})}
    finally:
        cl.shutdown()


def main(argv: list[str]) -> int:
    name, rest = argv[0], argv[1:]
    if name != "loopback":      # before Ray is imported: every node on loopback
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    fn = {"spread": scenario_spread, "noroom": scenario_noroom, "loopback": scenario_loopback}[name]
    out = fn(*rest)
    print(json.dumps({"scenario": name, **out}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

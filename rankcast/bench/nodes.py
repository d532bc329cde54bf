"""``rankcast bench nodes``: recovery after a Ray node is lost, at a given number of
subscriptions.

Protocol: start a Ray cluster of ``1 + workers`` nodes on loopback in this process (a head
and workers with ``cpus`` logical CPUs each, ``ray.cluster_utils``), and a spatial-keyword
cluster on it with partitions and window shards spread over the nodes (``placement:
spread``) and durable state (Ray's health checks of ``rankcast.config.NODE_HEALTH_CHECKS``:
a crashed node is counted dead in about a second); subscribe ``subs`` subscriptions of the dataset, fill the
window, take a checkpoint, publish ``after`` more calls (they are in the log only). Then,
``repeats`` times: the worker node holding the most data roles is killed (every process of
it at once: a crash), the next call (``publish``, waiting for its updates) meets the lost
roles, the cluster recreates them on the nodes left from the checkpoint and replays the
log; a node is added back before the next repeat.

Measured per repeat: seconds from the crash to the end of that call (results exact
again), the recovery's own phases (finding the dead roles, restoring every role from the
checkpoint, replaying the log), the calls replayed, and whether every sampled
subscription's top-k equals that of a single-process ``rc.Engine`` fed the same stream
(``exact``). Writes ``nodes.json`` and ``nodes.png``.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from ._common import build_workload, hardware, progress, pyplot, save_figure, write_json

__all__ = ["add_arguments", "main", "run_nodes"]

TARGETS = {"recovery_seconds": 15.0}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default="geonames", help="geonames | tweets | yelp (rankcast.ingest.datasets)")
    p.add_argument("--subs", type=int, default=100_000)
    p.add_argument("--window", type=int, default=50_000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--shards", type=int, default=2)
    p.add_argument("--policy", default="prefix")
    p.add_argument("--workers", type=int, default=2, help="worker nodes beside the head")
    p.add_argument("--cpus", type=int, default=2, help="logical CPUs of each node")
    p.add_argument("--batch", type=int, default=500, help="messages per publish call")
    p.add_argument("--after", type=int, default=10, help="calls between the checkpoint and the crash")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--sample", type=int, default=2000, help="subscriptions whose top-k is checked")
    p.add_argument("--out", default="out/bench")


def run_nodes(args) -> dict:
    import rankcast as rc
    from rankcast.config import NODE_HEALTH_CHECKS, loopback_only

    loopback_only()
    # Ray's files of these nodes in a folder of their own: no other ray.init() here finds them
    os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="rankcast-nodes-")
    import ray
    from ray.cluster_utils import Cluster

    n_msgs = args.window + args.batch * (args.after + 2) * (args.repeats + 1) + 10_000
    w = build_workload(args.dataset, n_msgs, args.subs)
    store = 1 << 30
    # the health checks that count a crashed node dead in about 1.5 s (Ray's default: 15 s)
    c = Cluster(initialize_head=True, connect=False, head_node_args={
        "num_cpus": args.cpus, "include_dashboard": False, "object_store_memory": store,
        "_system_config": dict(NODE_HEALTH_CHECKS)})
    workers = [c.add_node(num_cpus=args.cpus, object_store_memory=store) for _ in range(args.workers)]
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    cfg = rc.EngineConfig(bounds=w.bounds, window=args.window, vocabulary=w.vocab)
    ccfg = rc.ClusterConfig(engine=cfg, policy=args.policy, partitions=args.partitions, window_shards=args.shards,
                            name="rankcast-nodes", state_dir=tempfile.mkdtemp(prefix="rankcast-nodes-state-"),
                            monitor_every=0.0, checkpoint_every=3600.0)
    eng = rc.Engine(cfg)
    cl = rc.Cluster.start(ccfg, fresh=True)
    at = 0

    def take(n):
        nonlocal at
        b = w.msgs.take(np.arange(at, at + n))
        at += n
        return b

    rng = np.random.default_rng(0)
    sample = np.sort(rng.choice(w.subs.ids, min(args.sample, len(w.subs)), replace=False))
    repeats = []
    try:
        with progress(len(w.subs), "nodes: subscribe", unit="sub") as bar:
            for a in range(0, len(w.subs), 20_000):
                part = w.subs.take(np.arange(a, min(len(w.subs), a + 20_000)))
                cl.subscribe(part)
                eng.subscribe(part)
                bar.update(len(part))
        with progress(args.window, "nodes: fill window") as bar:
            for _ in range(0, args.window, 5000):
                b = take(5000)
                cl.publish(b, wait=False)
                eng.publish(b)
                bar.update(5000)
            cl.flush()
        cl.warm()
        for r in range(args.repeats):
            cl.checkpoint()
            for _ in range(args.after):          # in the log only: replayed by the recovery
                b = take(args.batch)
                cl.publish(b, updates="none")
                eng.publish(b)
            roles = cl.stats()["placement"]["roles"]
            held = {wk.node_id: sorted(k for k, v in roles.items() if v == wk.node_id) for wk in workers}
            victim = max(workers, key=lambda wk: len(held[wk.node_id]))
            b = take(args.batch)
            t0 = time.perf_counter()
            c.remove_node(victim, allow_graceful=False)
            cl.publish(b, updates="none")
            seconds = time.perf_counter() - t0
            eng.publish(b)
            got = cl.topk_many(sample.tolist())
            exact = all(got[i] == eng.topk(i) for i in sample.tolist())
            rec = cl.stats()["recovery"]["recoveries"][-1]
            workers.remove(victim)
            repeats.append({"lost_roles": held[victim.node_id], "seconds": seconds, "exact": exact,
                            "recovery": {k: rec.get(k) for k in ("cause", "mode", "seconds", "phases",
                                                                  "replayed_calls", "attempts")}})
            print(f"repeat {r}: lost {held[victim.node_id]}, exact again after {seconds:.2f} s "
                  f"(recovery {rec['seconds']:.2f} s, exact: {exact})", flush=True)
            workers.append(c.add_node(num_cpus=args.cpus, object_store_memory=store))
            c.wait_for_nodes()
    finally:
        cl.shutdown()
        ray.shutdown()
        for node in list(c.worker_nodes):
            c.remove_node(node, allow_graceful=False)
        c.head_node.kill_all_processes(check_alive=False, allow_graceful=False)
    worst = max(r["seconds"] for r in repeats)
    return {"bench": "nodes", "hardware": hardware(), "load_average": os.getloadavg(),
            "config": {k: getattr(args, k) for k in ("dataset", "subs", "window", "partitions", "shards", "policy",
                                                     "workers", "cpus", "batch", "after", "repeats", "sample")},
            "repeats": repeats, "recovery_seconds_max": worst, "targets": TARGETS,
            "met": {"recovery_seconds": worst <= TARGETS["recovery_seconds"] and all(r["exact"] for r in repeats)}}


def plot(report: dict, path: Path) -> None:
    plt = pyplot("rankcast bench nodes")
    fig, ax = plt.subplots(figsize=(7, 4))
    reps = report["repeats"]
    xs = np.arange(len(reps))
    bottom = np.zeros(len(reps))
    for phase, color in (("find_dead", "#c44"), ("restore", "#48c"), ("replay", "#4a4")):
        vals = np.array([r["recovery"]["phases"].get(phase, 0.0) for r in reps])
        ax.bar(xs, vals, 0.5, bottom=bottom, color=color, label=phase.replace("_", " "))
        bottom += vals
    ax.plot(xs, [r["seconds"] for r in reps], "ko", label="crash to exact results")
    ax.axhline(TARGETS["recovery_seconds"], color="0.4", ls="--", lw=1, label="target")
    ax.set_xticks(xs, [f"repeat {i + 1}\n{len(r['lost_roles'])} roles lost" for i, r in enumerate(reps)])
    ax.set_ylabel("seconds")
    cfg = report["config"]
    ax.set_title(f"A Ray node lost: {cfg['subs']:,} subscriptions, {cfg['partitions']} partitions, "
                 f"{cfg['shards']} shards, {cfg['workers'] + 1} nodes", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)


def main(args) -> int:
    import json

    report = run_nodes(args)
    out = Path(args.out)
    write_json(report, out / "nodes.json")
    plot(report, out / "nodes.png")
    print(json.dumps({k: report[k] for k in ("recovery_seconds_max", "met")}, indent=2))
    return 0

"""``rankcast bench cluster``: the DSkype roles on Ray (paper 8.2) through ``rc.Cluster``.

For each distribution policy: start a cluster, subscribe, fill the window, then stream M
messages pipelined (``publish(wait=False)`` then ``flush()``) and report throughput and the
per-role figures of ``Cluster.stats()`` (replication, communication, busy time). With
``--check`` the same calls also go through ``rc.Engine`` and the final top-k lists of a
sample of subscriptions must agree. JSON on stdout and in ``--out``/cluster.json, bars in
``--out``/cluster.png.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from ._common import build_workload, chunks, progress, write_json

__all__ = ["add_arguments", "main"]

POLICIES = ("hash", "location", "keyword", "prefix")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default="geonames", choices=["geonames", "tweets", "yelp"])
    p.add_argument("--subs", type=int, default=20_000)
    p.add_argument("--window", type=int, default=20_000)
    p.add_argument("--messages", type=int, default=5_000)
    p.add_argument("--policy", default="all", choices=[*POLICIES, "all"])
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--window-shards", type=int, default=2)
    p.add_argument("--batch", type=int, default=1_000, help="messages per publish call")
    p.add_argument("--address", default=None, help="Ray address (default: start a local one)")
    p.add_argument("--check", action="store_true", help="compare final top-k with rc.Engine")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="out/bench")


def _cluster_class():
    try:
        import rankcast as rc
        return rc.Cluster
    except (ImportError, AttributeError) as e:
        raise SystemExit(f"rankcast bench cluster: rc.Cluster is not available ({e})") from None


def _run_policy(work, policy: str, args) -> dict:
    import rankcast as rc

    Cluster = _cluster_class()
    cfg = rc.EngineConfig(bounds=work.bounds, window=args.window, vocabulary=work.vocab)
    ccfg = rc.ClusterConfig(engine=cfg, policy=policy, partitions=args.partitions,
                            window_shards=args.window_shards, name=f"rankcast-bench-{policy}")
    t0 = time.perf_counter()
    cl = Cluster.start(ccfg, address=args.address)
    t_start = time.perf_counter() - t0
    try:
        msgs, subs = work.msgs, work.subs
        t0 = time.perf_counter()
        cl.subscribe(subs)
        t_sub = time.perf_counter() - t0
        with progress(args.window, f"{policy}: fill") as bar:
            for a, b in chunks(args.window, max(args.batch, 5000)):
                cl.publish(msgs.take(np.arange(a, b)), wait=False)
                bar.update(b - a)
            cl.flush()
        stream = [msgs.take(np.arange(args.window + a, args.window + b))
                  for a, b in chunks(args.messages, args.batch)]
        t0 = time.perf_counter()
        with progress(args.messages, f"{policy}: stream") as bar:
            for part in stream:
                cl.publish(part, wait=False)
                bar.update(len(part))
            cl.flush()
        wall = time.perf_counter() - t0
        stats = cl.stats()
        res = {"policy": policy, "start_seconds": t_start, "subscribe_seconds": t_sub,
               "stream_seconds": wall, "throughput": args.messages / wall, "stats": _jsonable(stats)}
        if args.check:
            res["exact_sample"] = _check(cl, work, cfg, args)
        return res
    finally:
        cl.shutdown()


def _check(cl, work, cfg, args) -> bool:
    import rankcast as rc

    eng = rc.Engine(cfg)
    eng.subscribe(work.subs)
    for a, b in chunks(args.window + args.messages, 10_000):
        eng.publish(work.msgs.take(np.arange(a, b)))
    rng = np.random.default_rng(args.seed)
    sample = rng.choice(work.subs.ids, size=min(200, len(work.subs)), replace=False)
    return all([m for m, _ in cl.topk(int(s))] == [m for m, _ in eng.topk(int(s))] for s in sample)


def _jsonable(obj):
    return json.loads(json.dumps(obj, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o)))


def _plot(results: dict, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pols = list(results)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.bar(pols, [results[p].get("throughput", np.nan) for p in pols])
    ax.set_yscale("log")
    ax.set_ylabel("messages / second")
    ax.set_title(title)
    ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(args: argparse.Namespace) -> dict:
    _cluster_class()
    policies = POLICIES if args.policy == "all" else (args.policy,)
    print(f"[bench cluster] {args.dataset}: building {args.window + args.messages} messages, "
          f"{args.subs} subscriptions", file=sys.stderr, flush=True)
    work = build_workload(args.dataset, args.window + args.messages, args.subs, args.seed)
    results = {}
    for pol in policies:
        results[pol] = _run_policy(work, pol, args)
        print(f"[bench cluster] {pol}: {results[pol]['throughput']:.0f} msg/s", file=sys.stderr)
    out = Path(args.out)
    report = {"benchmark": "cluster", "config": {k: v for k, v in vars(args).items() if k != "func"},
              "workload": work.describe(), "results": results}
    write_json(report, out / "cluster.json")
    _plot(results, out / "cluster.png",
          f"rc.Cluster, {args.partitions} partitions, {args.window_shards} window shards")
    print(json.dumps(report, indent=2))
    return report

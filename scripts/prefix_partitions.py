"""Where the prefix policy's partitions spend their time at P partitions (default 64).

The in-process, pipelined stream of `rankcast bench cluster --scale P --scale-policies prefix`
(GeoNames, 100k subscriptions, window 20k, 5,000 messages, fit sample 5,000), once per
``--options`` given (policy options as JSON, e.g. '{"unseen_cost": 1.0}'; a key "factors"
sets GroupCost's factors for that run, e.g. '{"factors": {"C_MESSAGE": 5.8}}'), alternating
``--rounds`` times: the stages' CPU seconds, the slowest partition over the other stages'
sum (the machine's speed drifts), then per group of partitions (the heavy terms'
copies, the light groups) the busy CPU seconds with the replicas, messages and candidate rows
inserted, and the slowest light partitions with the group's load at the fit and as routed.

    PYTHONPATH=$PWD python scripts/prefix_partitions.py --options '{}' '{"unseen_cost": 1.0}'
"""
from __future__ import annotations

import argparse
import json

import numpy as np

import rankcast as rc
from rankcast.actors import bench as B
from rankcast.actors.policies import GroupCost
from rankcast.bench._common import build_workload


def run(work, cfg, P: int, opts: dict) -> dict:
    S, D, A = max(2, P // 4), max(1, P // 16), max(1, P // 8)
    opts = dict(opts)
    factors = opts.pop("factors", {})
    saved = {k: getattr(GroupCost, k) for k in factors}
    for k, val in factors.items():
        setattr(GroupCost, k, float(val))
    try:
        cl = B._inproc_cluster(work, cfg, "prefix", P, S, D, 1024, 5000, options={"aggregators": A, **opts},
                               monitor_every=0.0, delivery_interval=B.SCALE_DELIVERY)
    finally:
        for k, val in saved.items():
            setattr(GroupCost, k, val)
    km = cl._coord.local.policy.kmap
    load0 = km.load.copy()
    r = B._drive(cl, work, 20_000, 5_000, 1000, collect=False)
    st = cl.stats()
    pr = B._projected(B._delta(st, r["before"])["busy"], 5_000)
    after, before = st["roles"]["partition"], r["before"]["roles"]["partition"]
    cl.shutdown()

    def delta(k):
        return np.array([a[k] - b.get(k, 0) for a, b in zip(after, before)], float)
    return {"stages": pr["stage_seconds"], "balance": pr["partition_balance"], "throughput": pr["throughput"],
            "busy": delta("cpu_seconds"), "messages": delta("messages"), "inserted": delta("core_inserted"),
            "replicas": np.array([a["subscriptions"] for a in after], float),
            "group": np.repeat(np.arange(len(km.copies)), km.copies), "copies": km.copies.copy(),
            "load0": load0, "load": km.load.copy()}


def report(name: str, r: dict) -> None:
    b, g, cp = r["busy"], r["group"], r["copies"]
    print(f"{name}: {r['throughput']:.0f} msg/s, partition max {b.max():.4f} mean {b.mean():.4f} "
          f"balance {r['balance']:.3f}; " + " ".join(f"{k} {v:.4f}" for k, v in r["stages"].items())
          + f"; over the other stages {b.max() / sum(v for k, v in r['stages'].items() if k != 'partition'):.3f}"
          + f"; copies {cp[cp > 1].tolist()}, {int((cp == 1).sum())} light")
    for h in np.flatnonzero(cp > 1):
        m = g == h
        print(f"  heavy group {h} x{cp[h]}: busy mean {b[m].mean():.4f} max {b[m].max():.4f}, replicas "
              f"{r['replicas'][m].mean():.0f}, messages {r['messages'][m].mean():.0f}, inserted {r['inserted'][m].mean():.0f}")
    light = np.flatnonzero(cp[g] == 1)
    print(f"  light x{len(light)}: busy mean {b[light].mean():.4f} max {b[light].max():.4f} min {b[light].min():.4f}")
    for i in light[np.argsort(-b[light])][:5]:
        print(f"    partition {i}: {b[i]:.4f} s, replicas {r['replicas'][i]:.0f}, messages {r['messages'][i]:.0f}, "
              f"inserted {r['inserted'][i]:.0f}, load at the fit {r['load0'][g[i]]:.3f}, routed {r['load'][g[i]]:.3f}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--partitions", type=int, default=64)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--options", nargs="*", default=["{}"])
    a = p.parse_args()
    work = build_workload("geonames", 25_000, 100_000, 0)
    cfg = rc.EngineConfig(bounds=work.bounds, window=20_000, vocabulary=work.vocab)
    small = build_workload("geonames", 600, 200, 0)      # load every kernel once
    wcfg = rc.EngineConfig(bounds=small.bounds, window=300, vocabulary=small.vocab)
    B._drive(B._inproc_cluster(small, wcfg, "prefix", 2, 2, 1, 64, 200), small, 300, 300, 100)
    for k in range(a.rounds):
        for o in a.options:
            report(f"round {k} {o}", run(work, cfg, a.partitions, json.loads(o)))


if __name__ == "__main__":
    main()

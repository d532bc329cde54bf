"""DSkype figures (paper 8.2) for ``rankcast bench cluster``: :func:`run_cluster_bench`.

Three parts, JSON + PNG:

1. **policies** (Table 5, Figure 21): replication ratio of the subscriptions and
   communication cost (message tuples from distributors to partitions, per message) of every
   policy at ``partitions`` (32) subscription partitions. These counts do not depend on the
   transport, so the topology runs in-process (same roles, same protocol, direct calls).
2. **scaling**: per-role busy time measured in-process for 4..64 partitions, turned into the
   projected throughput of a deployment with one core per role instance (the slowest
   instance of the slowest stage bounds the pipeline), and the projected speed-up over the
   single-process engine on the same stream (the paper reports 26-49x at 32 bolts).
3. **ray**: real wall-clock throughput on this machine of the engine, and of the cluster on
   Ray with 1 and 2 subscription partitions (Ray's own overhead).

Protocol of every run (paper 8.1.1): fill the window, subscribe, then stream ``messages``
pipelined (``publish(wait=False)``, ``flush()``); figures are taken on the stream.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

__all__ = ["run_cluster_bench", "PAPER"]

PAPER = {
    "table5_replication": {"hash": 1.0, "location": 1.0, "keyword": [3.2, 3.3, 3.3], "prefix": [1.9, 1.9, 2.1]},
    "fig21_comm_reduction_vs_hash": 0.80,
    "speedup_over_skype": [26, 49],
}
ALL_POLICIES = ("hash", "location", "keyword", "prefix", "spatial-first", "keyword-first")


def _take(b, a, z):
    return b.take(np.arange(a, min(z, len(b))))


def _drive(target, work, window: int, messages: int, batch: int, sub_batch: int = 20_000,
           pipelined: bool = True) -> dict:
    """Fill, subscribe, stream; returns the stream's wall time."""
    msgs, subs = work.msgs, work.subs
    for a in range(0, window, max(batch, 5000)):
        part = _take(msgs, a, min(window, a + max(batch, 5000)))
        if pipelined:
            target.publish(part, wait=False)
        else:
            target.publish(part)
    if pipelined:
        target.flush()
    for a in range(0, len(subs), sub_batch):
        target.subscribe(_take(subs, a, a + sub_batch))
    before = target.stats() if hasattr(target, "flush") else None
    t0 = time.perf_counter()
    n_updates = 0
    for a in range(window, window + messages, batch):
        part = _take(msgs, a, min(window + messages, a + batch))
        if pipelined:
            target.publish(part, wait=False)
        else:
            n_updates += len(target.publish(part))
    if pipelined:
        n_updates += len(target.flush())
    wall = time.perf_counter() - t0
    return {"seconds": wall, "throughput": messages / wall, "updates": n_updates, "before": before}


def _delta(after: dict, before: dict | None) -> dict:
    """Stream-phase figures from two Cluster.stats() snapshots."""
    b = before or {"roles": {r: [] for r in after["roles"]}, "published": 0}

    def busy(role):
        a = after["roles"][role]
        if role == "coordinator":
            return [a["busy_seconds"] - (b["roles"]["coordinator"]["busy_seconds"] if before else 0.0)]
        prev = b["roles"].get(role) or [{"busy_seconds": 0.0}] * len(a)
        return [x["busy_seconds"] - y["busy_seconds"] for x, y in zip(a, prev)]

    def total(role, key):
        a = after["roles"][role]
        prev = b["roles"].get(role) or [{key: 0}] * len(a)
        return sum(x[key] - y.get(key, 0) for x, y in zip(a, prev))

    n = after["published"] - b["published"]
    return {"messages": n,
            "tuples": total("distributor", "tuples_out"),
            "communication_cost": total("distributor", "tuples_out") / n if n else 0.0,
            "reevaluations": total("partition", "reevaluations"),
            "busy": {r: busy(r) for r in ("coordinator", "distributor", "partition", "shard", "aggregator")}}


def _projected(busy: dict, messages: int) -> dict:
    """One core per role instance: the stage whose slowest instance is busiest bounds it."""
    stages = {r: max(v) if v else 0.0 for r, v in busy.items()}
    bottleneck = max(stages, key=stages.get)
    t = stages[bottleneck]
    return {"stage_seconds": stages, "bottleneck": bottleneck,
            "throughput": messages / t if t > 0 else float("inf"),
            "partition_balance": (float(np.mean(busy["partition"]) / max(busy["partition"]))
                                  if busy["partition"] and max(busy["partition"]) > 0 else 1.0)}


def _inproc_cluster(work, cfg, policy, P, shards, distributors, batch_size, sample_rows, options=None):
    import rankcast as rc
    opts = {"runtime": "inproc", **(options or {})}
    aggregators = int(opts.pop("aggregators", 1))
    if policy in ("spatial-first", "keyword-first") and "l1" not in opts:
        opts["l1"] = max(1, int(round(np.sqrt(P))) // 2 * 2) or 1
        while P % opts["l1"]:
            opts["l1"] -= 1
    ccfg = rc.ClusterConfig(engine=cfg, policy=policy, partitions=P, window_shards=shards,
                            distributors=distributors, aggregators=aggregators, batch_size=batch_size,
                            options=opts)
    sample = (_take(work.subs, 0, sample_rows), _take(work.msgs, 0, sample_rows))
    return rc.Cluster.start(ccfg, sample=sample)


def run_cluster_bench(dataset: str = "geonames", subs: int = 20_000, window: int = 20_000,
                      messages: int = 5_000, partitions: int = 32, policies=ALL_POLICIES,
                      scale=(4, 8, 16, 32, 64), scale_policy: str = "prefix", batch: int = 1_000,
                      cluster_batch: int = 1_024, shards: int = 2, ray: bool = True,
                      address: str | None = None, seed: int = 0, out: str | None = "out/bench",
                      progress=print) -> dict:
    """Run the three parts (see the module docstring); returns the JSON-able result and
    writes ``cluster.json`` / ``cluster.png`` under ``out``."""
    import rankcast as rc
    from ..bench._common import build_workload

    progress(f"workload {dataset}: {subs} subscriptions, window {window}, stream {messages}")
    work = build_workload(dataset, window + messages, subs, seed)
    cfg = rc.EngineConfig(bounds=work.bounds, window=window, vocabulary=work.vocab)
    res: dict = {"workload": {**work.describe(), "window": window, "stream": messages, "batch": batch},
                 "paper": PAPER}

    # single-process engine: the reference throughput
    eng = rc.Engine(cfg)
    r = _drive(eng, work, window, messages, batch, pipelined=False)
    res["engine"] = {"throughput": r["throughput"], "seconds": r["seconds"], "updates": r["updates"]}
    progress(f"engine: {r['throughput']:.0f} msg/s")
    rng = np.random.default_rng(seed)
    check_ids = np.sort(rng.choice(work.subs.ids, size=min(300, len(work.subs)), replace=False)).tolist()
    want = {i: eng.topk(i) for i in check_ids}
    del eng

    def same_topk(cl) -> bool:
        return cl.topk_many(check_ids) == want

    # 1. policies at `partitions`
    res["policies"] = {}
    for pol in policies:
        cl = _inproc_cluster(work, cfg, pol, partitions, shards, 1, cluster_batch, min(5000, subs))
        r = _drive(cl, work, window, messages, batch)
        st = cl.stats()
        d = _delta(st, r["before"])
        res["policies"][pol] = {"replication_ratio": st["replication_ratio"],
                                "communication_cost": d["communication_cost"],
                                "reallocations": st["reallocations"],
                                "reevaluations": d["reevaluations"],
                                "topk_equal_engine": same_topk(cl),
                                "projected": _projected(d["busy"], messages)}
        progress(f"{pol} x{partitions}: replication {st['replication_ratio']:.2f}, "
                 f"communication {d['communication_cost']:.2f} tuples/msg")
    if "hash" in res["policies"]:
        h = res["policies"]["hash"]["communication_cost"]
        for pol, v in res["policies"].items():
            v["communication_vs_hash"] = 1.0 - v["communication_cost"] / h if h else 0.0

    # 2. projected scale-out
    res["scaling"] = {"policy": scale_policy, "points": []}
    for P in scale:
        S, D, A = max(shards, P // 4), max(1, P // 16), max(1, P // 8)
        cl = _inproc_cluster(work, cfg, scale_policy, P, S, D, cluster_batch, min(5000, subs),
                             options={"aggregators": A})
        r = _drive(cl, work, window, messages, batch)
        d = _delta(cl.stats(), r["before"])
        pr = _projected(d["busy"], messages)
        pt = {"partitions": P, "window_shards": S, "distributors": D, "aggregators": A,
              "topk_equal_engine": same_topk(cl),
              "projected_throughput": pr["throughput"],
              "speedup_vs_engine": pr["throughput"] / res["engine"]["throughput"],
              "bottleneck": pr["bottleneck"], "partition_balance": pr["partition_balance"],
              "stage_seconds": pr["stage_seconds"]}
        res["scaling"]["points"].append(pt)
        progress(f"{scale_policy} x{P}: projected {pt['projected_throughput']:.0f} msg/s "
                 f"({pt['speedup_vs_engine']:.1f}x, bottleneck {pr['bottleneck']})")

    # 3. Ray overhead, real wall clock on this machine
    if ray:
        res["ray"] = _ray_overhead(work, cfg, window, messages, batch, cluster_batch, address, progress,
                                   same_topk)
        for v in res["ray"].values():
            v["vs_engine"] = v["throughput"] / res["engine"]["throughput"]

    if out:
        outdir = Path(out)
        outdir.mkdir(parents=True, exist_ok=True)
        (outdir / "cluster.json").write_text(json.dumps(res, indent=2, default=float))
        _plot(res, outdir / "cluster.png")
    return res


def _ray_overhead(work, cfg, window, messages, batch, cluster_batch, address, progress, same_topk) -> dict:
    import ray as _ray

    import rankcast as rc
    if not _ray.is_initialized():
        if address:
            _ray.init(address=address, log_to_driver=False)
        else:
            _ray.init(include_dashboard=False, log_to_driver=False)
    out = {}
    for label, policy, P in (("1 partition", "hash", 1), ("2 partitions", "hash", 2),
                             ("2 partitions prefix", "prefix", 2)):
        ccfg = rc.ClusterConfig(engine=cfg, policy=policy, partitions=P, window_shards=1, distributors=1,
                                aggregators=1, batch_size=cluster_batch, actor_cpus=0.01,
                                name=f"rankcast-bench-{P}-{policy}")
        cl = rc.Cluster.start(ccfg, address=address,
                              sample=(_take(work.subs, 0, 5000), _take(work.msgs, 0, 5000)))
        try:
            r = _drive(cl, work, window, messages, batch)
            st = cl.stats()
            d = _delta(st, r["before"])
            out[label] = {"policy": policy, "partitions": P, "throughput": r["throughput"],
                          "seconds": r["seconds"], "busy": d["busy"], "topk_equal_engine": same_topk(cl)}
            progress(f"ray {label}: {r['throughput']:.0f} msg/s")
        finally:
            cl.shutdown()
    return out


def _plot(res: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(16, 4.5))
    pols = list(res["policies"])
    rep = [res["policies"][p]["replication_ratio"] for p in pols]
    com = [res["policies"][p]["communication_cost"] for p in pols]
    x = np.arange(len(pols))
    ax[0].bar(x - 0.2, rep, 0.4, label="replication ratio")
    ax[0].bar(x + 0.2, com, 0.4, label="tuples / message")
    ax[0].set_xticks(x, pols, rotation=20)
    ax[0].set_yscale("log")
    ax[0].set_title(f"policies at {res['scaling']['points'][0]['partitions'] if False else ''}"
                    f"{len(res['policies']) and ''} partitions (Table 5, Fig. 21)")
    ax[0].legend()
    pts = res["scaling"]["points"]
    ax[1].plot([p["partitions"] for p in pts], [p["speedup_vs_engine"] for p in pts], "o-",
               label=f"projected ({res['scaling']['policy']})")
    ax[1].axhspan(26, 49, color="tab:green", alpha=0.15, label="paper: 26-49x")
    ax[1].set_xscale("log", base=2)
    ax[1].set_xlabel("subscription partitions (one core each)")
    ax[1].set_ylabel("speed-up over the engine")
    ax[1].legend()
    ax[1].set_title("scale-out from measured busy time")
    labels = ["engine"] + list(res.get("ray", {}))
    thr = [res["engine"]["throughput"]] + [v["throughput"] for v in res.get("ray", {}).values()]
    ax[2].bar(labels, thr)
    ax[2].set_ylabel("messages / s (this machine)")
    ax[2].set_title("Ray overhead (real, 2 cores)")
    for lab in ax[2].get_xticklabels():
        lab.set_rotation(15)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

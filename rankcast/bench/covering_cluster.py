"""``rankcast bench covering --cluster``: covering routing in the ranked-matching cluster.

Workload (clustered): ``--cluster-groups`` interest regions, each a center in a 3-attribute
space (``a0`` in [0, 10000], ``a1``, ``a2`` in [0, 1000]). An expression picks a region (Zipf
weights: some are popular) and names ``a0`` and each of ``a1``, ``a2`` with probability 1/2,
each as a ``between`` range around the region's center: width log-uniform (0.5% to 30% of
the region's extent) and offset uniformly inside the region, so broad interests cover narrow
ones in the same region. Static scores are uniform. Expressions arrive in random order.
Events fall in a region (the same Zipf weights) with every attribute present, values around
its center.

Subscribe calls of ``--cluster-batch`` expressions come from one client per distributor in
turn (``--cluster-distributors``), each owned by its distributor. The cluster runs in process (``options={"runtime": "inproc"}``) with the ``attribute``
policy (expressions placed by ranges of ``a0``), ``--cluster-partitions`` partitions, once
with covering routing and once broadcasting, on the same calls. Reported: the routing table
against the expressions, partitions reached per event against the broadcast, control
messages, busy seconds by role, and whether every answer equals ``rc.Matcher``'s (compared
on every event). Targets (docs/BENCHMARKS.md): routing table at most half the expressions, events
reaching at most a third of the partitions, identical results.
Writes ``covering_cluster.json`` and ``covering_cluster.png`` under ``--out``.
"""
from __future__ import annotations

import copy
import time
from pathlib import Path

import numpy as np

from ._common import pyplot, save_figure, write_json

__all__ = ["add_arguments", "run_cluster", "cluster_workload", "main_cluster"]


def add_arguments(p) -> None:
    p.add_argument("--cluster", action="store_true", help="only the cluster family (covering routing)")
    p.add_argument("--cluster-expressions", type=int, default=100_000)
    p.add_argument("--cluster-partitions", type=int, default=8)
    p.add_argument("--cluster-distributors", type=int, default=1)
    p.add_argument("--cluster-events", type=int, default=2000)
    p.add_argument("--cluster-groups", type=int, default=200, help="interest regions of the workload")
    p.add_argument("--cluster-unsubscribe", type=float, default=0.1,
                   help="fraction of the expressions unsubscribed (in random order) before the events")
    p.add_argument("--cluster-k", type=int, default=10)
    p.add_argument("--cluster-batch", type=int, default=10_000, help="expressions per subscribe call (calls "
                   "go to the distributors' clients in turn)")


def cluster_workload(n: int, n_events: int, groups: int, seed: int):
    """(expressions, events) of the module docstring's workload."""
    import rankcast as rc
    rng = np.random.default_rng(seed)
    span = np.array([10_000.0, 1000.0, 1000.0])
    ext = span / np.sqrt(groups) * np.array([1.0, 2.0, 2.0])          # a region's extent per attribute
    centers = rng.random((groups, 3)) * span
    w = 1.0 / np.arange(1, groups + 1) ** 0.8
    w /= w.sum()
    g = rng.choice(groups, n, p=w)
    exprs = []
    for i in range(n):
        c = centers[g[i]]
        named = [0] + [a for a in (1, 2) if rng.random() < 0.5]
        preds = []
        for a in named:
            width = ext[a] * np.exp(rng.uniform(np.log(0.005), np.log(0.3)))
            lo = c[a] - ext[a] / 2 + rng.random() * max(ext[a] - width, 0.0)
            preds.append(rc.Predicate(f"a{a}", "between", (round(float(lo), 2), round(float(lo + width), 2))))
        exprs.append(rc.Expression(i, preds, score=float(rng.random())))
    ge = rng.choice(groups, n_events, p=w)
    vals = centers[ge] + (rng.random((n_events, 3)) - 0.5) * ext
    events = [rc.Event(j, {f"a{a}": round(float(vals[j, a]), 2) for a in range(3)}) for j in range(n_events)]
    return exprs, events


def _run_one(exprs, gone, events, k, P, D, covering: bool, batch: int) -> dict:
    import rankcast as rc
    from rankcast.kinds.matching.covering.routing import client_of
    mcfg = rc.MatchConfig(scoring="static", index="auto", k=k)
    ccfg = rc.ClusterConfig(engine=mcfg, policy="attribute", partitions=P, distributors=D, batch_size=256,
                            name=f"bench-cover-{int(covering)}", options={"runtime": "inproc", "covering": covering})
    cl = rc.Cluster.start(ccfg, sample=exprs[:5000], fresh=True)
    try:
        cl.warm()
        hs = []                                   # one client per distributor, in turn
        for d in range(D):
            h = copy.copy(cl)
            h._client = client_of(d, D)
            hs.append(h)
        owner = {}
        t0 = time.perf_counter()
        for i, a in enumerate(range(0, len(exprs), batch)):
            hs[i % D].subscribe(exprs[a:a + batch])
            owner.update((e.id, i % D) for e in exprs[a:a + batch])
        for d in range(D):
            mine = [i for i in gone if owner[i] == d]
            if mine:
                hs[d].unsubscribe(mine)
        t_sub = time.perf_counter() - t0
        cl.publish(events[:32], k=k)              # every role's kernels loaded before the timing
        t0 = time.perf_counter()
        got = []
        for a in range(0, len(events), 256):
            got += cl.publish(events[a:a + 256], k=k)
        t_pub = time.perf_counter() - t0
        st = cl.stats()
    finally:
        cl.shutdown()
    return {"covering": covering, "subscribe_seconds": t_sub, "publish_seconds": t_pub,
            "events_per_second": len(events) / t_pub, "stats": {
                "partitions_reached_per_event": st["partitions_reached_per_event"],
                "busy_seconds": st["busy_seconds"], "covering": st["covering"], "routing": st["routing"]},
            "matches": got}


def run_cluster(args) -> dict:
    import rankcast as rc
    n, P, D = args.cluster_expressions, args.cluster_partitions, args.cluster_distributors
    exprs, events = cluster_workload(n, args.cluster_events, args.cluster_groups, args.seed)
    rng = np.random.default_rng(args.seed + 1)
    gone = rng.choice(n, int(n * args.cluster_unsubscribe), replace=False).tolist()
    order = rng.permutation(n)
    exprs = [exprs[i] for i in order]
    t0 = time.perf_counter()
    m = rc.Matcher(rc.MatchConfig(scoring="static", index="auto", k=args.cluster_k))
    m.subscribe(exprs)
    m.unsubscribe(gone)
    want = m.publish(events, k=args.cluster_k)
    t_matcher = time.perf_counter() - t0
    runs = [_run_one(exprs, gone, events, args.cluster_k, P, D, c, args.cluster_batch) for c in (True, False)]
    on, off = runs
    cov = on["stats"]["covering"]
    live = n - len(gone)
    res = {"config": {"expressions": n, "live": live, "partitions": P, "distributors": D,
                      "events": len(events), "groups": args.cluster_groups, "k": args.cluster_k,
                      "unsubscribed": len(gone), "seed": args.seed},
           "matcher_seconds": t_matcher,
           "runs": [{k: v for k, v in r.items() if k != "matches"} for r in runs]}
    reached = on["stats"]["partitions_reached_per_event"]
    res["targets"] = {
        "routing_table": cov["routing_table"], "expressions": live,
        "routing_table_fraction": cov["routing_table"] / live,
        "routing_table_at_most_half": cov["routing_table"] <= live / 2,
        "partitions_reached_per_event": reached, "broadcast": float(P),
        "reached_fraction": reached / P, "reached_at_most_a_third": reached <= P / 3,
        "control_messages": cov["control_messages"],
        "control_messages_without_covering": cov["control_messages_without_covering"],
        "sent_between_distributors": cov["sent_between_distributors"],
        "sent_between_distributors_without_covering": cov["sent_between_distributors_without_covering"],
        "saved_between_distributors": cov["saved_between_distributors"],
        "identical_to_matcher": on["matches"] == want and off["matches"] == want,
        "partition_busy_seconds_covering": float(sum(on["stats"]["busy_seconds"]["partition"])),
        "partition_busy_seconds_broadcast": float(sum(off["stats"]["busy_seconds"]["partition"])),
        "route_seconds_covering": float(sum(cov["route_seconds"])),
        "publish_seconds_covering": on["publish_seconds"], "publish_seconds_broadcast": off["publish_seconds"],
    }
    return res


def _plot(res, path: Path) -> None:
    plt = pyplot("rankcast bench covering")
    t = res["targets"]
    on, off = res["runs"]
    fig, ax = plt.subplots(1, 3, figsize=(13, 4))
    ax[0].bar(["expressions", "routing table"], [t["expressions"], t["routing_table"]], color=["grey", "C0"])
    ax[0].axhline(t["expressions"] / 2, color="k", ls=":", label="target: half")
    ax[0].set(title="routing table (entries)")
    ax[0].legend(fontsize=8)
    ax[1].bar(["broadcast", "covering"], [t["broadcast"], t["partitions_reached_per_event"]], color=["grey", "C0"])
    ax[1].axhline(t["broadcast"] / 3, color="k", ls=":", label="target: a third")
    ax[1].set(title="partitions reached per event")
    ax[1].legend(fontsize=8)
    roles = ["distributor", "partition", "aggregator"]
    x = np.arange(len(roles))
    for i, (r, name) in enumerate(((off, "broadcast"), (on, "covering"))):
        ax[2].bar(x + 0.4 * i, [float(np.sum(r["stats"]["busy_seconds"][ro])) for ro in roles], 0.4, label=name)
    ax[2].set_xticks(x + 0.2, roles)
    ax[2].set(title="busy seconds by role (publish + subscribe)")
    ax[2].legend(fontsize=8)
    fig.suptitle(f"{res['config']['live']} expressions, {res['config']['partitions']} partitions, "
                 f"identical to rc.Matcher: {t['identical_to_matcher']}")
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)


def main_cluster(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    res = run_cluster(args)
    write_json(res, out / "covering_cluster.json")
    _plot(res, out / "covering_cluster.png")
    print(res["targets"])
    print(f"wrote {out / 'covering_cluster.json'} and {out / 'covering_cluster.png'}")
    return 0

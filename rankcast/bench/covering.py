"""``rankcast bench covering``: the subscription covering paper's experiments (Section V),
the three indexes side by side on the same commands.

Workload (paper V.A): a command subscribes (probability 1 - p) a random rectangle, each edge
a segment between two uniform points of ``[0, 2^B - 1]`` (``--domain-bits`` B), or
unsubscribes (p) a uniformly chosen live one.

1. **reporting mode** (``--table-commands`` commands, ``--table-attrs`` attributes, p = 5% and
   40%, k = ``--ks``): per index, nodes visited and point comparisons due to subscribes and
   unsubscribes (Tables I and II, k-d tree; the Z-order rows alongside), cov_k calls due to
   unsubscribes (Fig. 9) and the runtime (Fig. 8);
2. **index comparison** (p = ``--p``, k = 1, ``--commands``, dimensions ``--dims`` = 2 x
   attributes): total runtime of the k-d tree, Z-order and naive (Figs. 10-12).

Runtime is the kernel's: one call applies every command (subscribe and unsubscribe through
G_k and the index), compiled beforehand. Targets (docs/BENCHMARKS.md): in 16 dimensions the k-d tree at
least 10x faster than naive and 2x faster than Z-order; k = 1 cheapest overall (Theorem 1).
Writes ``covering.json`` and ``covering.png`` under ``--out``.

``--cluster``: covering routing in the ranked-matching cluster instead
(:mod:`rankcast.bench.covering_cluster`).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from ._common import pyplot, save_figure, write_json

__all__ = ["add_arguments", "main", "run_covering", "workload", "TABLE_I", "TABLE_II"]

INDEXES = ("kd-tree", "z-order", "naive")
# the paper's k-d tree figures, x 1000: k -> (nv, nv_s, nv_u, pc, pc_s, pc_u)
TABLE_I = {1: (813, 782, 31, 6147, 5993, 154), 2: (983, 974, 9, 9967, 9852, 115),
           3: (1140, 1131, 9, 13111, 12973, 138), 4: (1275, 1266, 9, 15816, 15663, 153),
           5: (1400, 1390, 10, 18274, 18111, 163), 6: (1508, 1498, 10, 20407, 20237, 170)}
TABLE_II = {1: (556, 415, 141, 6192, 4684, 1508), 2: (634, 529, 105, 8952, 7376, 1576),
            3: (714, 615, 99, 11026, 9365, 1661), 4: (780, 683, 97, 12661, 10936, 1725),
            5: (839, 740, 99, 14050, 12260, 1790), 6: (889, 789, 100, 15233, 13389, 1844)}


def _ints(s: str) -> list[int]:
    return [int(float(x)) for x in s.split(",") if x]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--table-commands", type=int, default=60_000)
    p.add_argument("--table-attrs", type=int, default=5, help="attributes (dimension 10 = 5 attributes)")
    p.add_argument("--loads", default="0.05,0.4", help="unsubscribe probabilities p of experiment 1")
    p.add_argument("--ks", type=_ints, default=[1, 2, 3, 4, 5, 6])
    p.add_argument("--commands", type=_ints, default=list(range(10_000, 100_001, 10_000)))
    p.add_argument("--dims", type=_ints, default=[6, 12, 16], help="point dimensions (2 x attributes)")
    p.add_argument("--p", type=float, default=0.15)
    p.add_argument("--domain-bits", type=int, default=10)
    p.add_argument("--indexes", default=",".join(INDEXES))
    p.add_argument("--over", type=int, default=32, help="k-d tree bucket overflow limit")
    p.add_argument("--under", type=int, default=8, help="k-d tree bucket underflow limit")
    p.add_argument("--repeat", type=int, default=2, help="runs of each experiment-1 cell (the fastest is kept)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="out/bench")
    from .covering_cluster import add_arguments as cluster_arguments
    cluster_arguments(p)


def workload(n: int, attrs: int, p: float, bits: int, seed: int):
    """Commands (kinds 0 subscribe / 1 unsubscribe, ids) and every id's rectangle."""
    rng = np.random.default_rng(seed)
    hi_v = (1 << bits) - 1
    a = rng.integers(0, hi_v + 1, (n, attrs))
    b = rng.integers(0, hi_v + 1, (n, attrs))
    lo, hi = np.minimum(a, b).astype(np.float64), np.maximum(a, b).astype(np.float64)
    unsub = rng.random(n) < p
    pick = rng.random(n)
    kinds = np.zeros(n, np.int64)
    ids = np.zeros(n, np.int64)
    live: list[int] = []
    nxt = 0
    for i in range(n):
        if unsub[i] and live:
            j = int(pick[i] * len(live))
            ids[i] = live[j]
            live[j] = live[-1]
            live.pop()
            kinds[i] = 1
        else:
            ids[i] = nxt
            live.append(nxt)
            nxt += 1
    return kinds, ids, lo, hi


def _run(index, k, kinds, ids, lo, hi, args) -> dict:
    from rankcast.kinds.matching.covering import Covering
    c = Covering(k=k, index=index, over=args.over, under=args.under)
    rlo = np.zeros((len(kinds), lo.shape[1]))
    rhi = np.zeros_like(rlo)
    sub = kinds == 0
    rlo[sub], rhi[sub] = lo[ids[sub]], hi[ids[sub]]
    msgs = c.replay_rectangles(kinds, ids, rlo, rhi)
    s = c.stats()
    return {"index": index, "k": k, "commands": len(kinds), "seconds": s["kernel_seconds"],
            "nv_s": s["nodes_visited_subscribe"], "nv_u": s["nodes_visited_unsubscribe"],
            "pc_s": s["comparisons_subscribe"], "pc_u": s["comparisons_unsubscribe"],
            "nv": s["nodes_visited_subscribe"] + s["nodes_visited_unsubscribe"],
            "pc": s["comparisons_subscribe"] + s["comparisons_unsubscribe"],
            "q_s": s["queries_subscribe"], "q_u": s["queries_unsubscribe"], "live": s["nodes"],
            "forwarded": s["forwarded"], "messages": len(msgs)}


def _warm(names, args) -> None:
    kinds, ids, lo, hi = workload(300, 2, 0.3, 4, 1)
    for name in names:
        _run(name, 2, kinds, ids, lo, hi, args)


def _reporting(args, names) -> list[dict]:
    rows = []
    for p in [float(x) for x in args.loads.split(",") if x]:
        kinds, ids, lo, hi = workload(args.table_commands, args.table_attrs, p, args.domain_bits, args.seed)
        for name in names:
            if name == "naive":
                continue
            for k in args.ks:
                r = min((_run(name, k, kinds, ids, lo, hi, args) for _ in range(max(args.repeat, 1))),
                        key=lambda r: r["seconds"])
                r["p"] = p
                rows.append(r)
                print(f"p={p:<4} {name:<8} k={k} {r['seconds']:7.3f} s  nv {r['nv'] / 1e3:8.0f}k "
                      f"(s {r['nv_s'] / 1e3:.0f}k u {r['nv_u'] / 1e3:.0f}k)  pc {r['pc'] / 1e3:8.0f}k "
                      f"(s {r['pc_s'] / 1e3:.0f}k u {r['pc_u'] / 1e3:.0f}k)  q_u {r['q_u']}", flush=True)
    return rows


def _compare(args, names) -> list[dict]:
    rows = []
    for dims in args.dims:
        for n in args.commands:
            kinds, ids, lo, hi = workload(n, dims // 2, args.p, args.domain_bits, args.seed)
            for name in names:
                r = _run(name, 1, kinds, ids, lo, hi, args)
                r["dims"] = dims
                rows.append(r)
                print(f"dims={dims:<3} n={n:>7} {name:<8} {r['seconds']:8.3f} s  nv {r['nv']:>10} pc {r['pc']:>12}",
                      flush=True)
    return rows


def _targets(rep, cmp) -> dict:
    out = {}
    for dims in sorted({r["dims"] for r in cmp}):
        big = max(r["commands"] for r in cmp if r["dims"] == dims)
        t = {r["index"]: r["seconds"] for r in cmp if r["dims"] == dims and r["commands"] == big}
        row = {"commands": big, "seconds": t}
        if "kd-tree" in t and "naive" in t:
            row["naive_over_kd"] = t["naive"] / t["kd-tree"]
        if "kd-tree" in t and "z-order" in t:
            row["zorder_over_kd"] = t["z-order"] / t["kd-tree"]
        out[f"dims={dims}"] = row
    if 16 in {r["dims"] for r in cmp}:
        row = out["dims=16"]
        out["kd_10x_naive_at_16"] = row.get("naive_over_kd", 0) >= 10
        out["kd_2x_zorder_at_16"] = row.get("zorder_over_kd", 0) >= 2
    k1 = {}
    for p in sorted({r["p"] for r in rep}):
        for name in sorted({r["index"] for r in rep}):
            rs = [r for r in rep if r["p"] == p and r["index"] == name]
            if len(rs) < 2:
                continue
            cost = {r["k"]: r["nv"] + r["pc"] for r in rs}
            secs = {r["k"]: r["seconds"] for r in rs}
            k1[f"p={p} {name}"] = {"cheapest_k_by_work": min(cost, key=cost.get),
                                   "cheapest_k_by_seconds": min(secs, key=secs.get)}
    if k1:
        out["k1_cheapest"] = k1
        out["k1_cheapest_by_work_everywhere"] = all(v["cheapest_k_by_work"] == 1 for v in k1.values())
    return out


def _plot(res, path: Path) -> None:
    plt = pyplot("rankcast bench covering")
    rep, cmp = res["reporting"], res["compare"]
    loads = sorted({r["p"] for r in rep})
    dims = sorted({r["dims"] for r in cmp})
    ncol = max(len(loads) + 2, len(dims), 1)
    fig, ax = plt.subplots(2, ncol, figsize=(4.6 * ncol, 8.5), squeeze=False)
    for j, p in enumerate(loads):
        a = ax[0, j]
        for name in sorted({r["index"] for r in rep}):
            rs = sorted((r for r in rep if r["p"] == p and r["index"] == name), key=lambda r: r["k"])
            ks = [r["k"] for r in rs]
            a.plot(ks, [r["nv"] / 1e3 for r in rs], "o-", label=f"{name} nv")
            a.plot(ks, [r["pc"] / 1e3 for r in rs], "s--", label=f"{name} pc")
        paper = TABLE_I if p == 0.05 else TABLE_II if p == 0.4 else None
        if paper:
            a.plot(list(paper), [v[0] for v in paper.values()], "k:", label="paper nv")
            a.plot(list(paper), [v[3] for v in paper.values()], "k-.", label="paper pc")
        a.set(xlabel="k (reporting mode)", ylabel="x 1000", yscale="log",
              title=f"Table {'I' if p == 0.05 else 'II' if p == 0.4 else ''}: p = {p:g}")
        a.legend(fontsize=7)
    a = ax[0, len(loads)]
    for name in sorted({r["index"] for r in rep}):
        for p in loads:
            rs = sorted((r for r in rep if r["p"] == p and r["index"] == name), key=lambda r: r["k"])
            a.plot([r["k"] for r in rs], [r["seconds"] for r in rs], "o-", label=f"{name} p={p:g}")
    a.set(xlabel="k", ylabel="seconds", title="Fig. 8: runtime against k")
    a.legend(fontsize=7)
    a = ax[0, len(loads) + 1]
    for name in sorted({r["index"] for r in rep}):
        for p in loads:
            rs = sorted((r for r in rep if r["p"] == p and r["index"] == name), key=lambda r: r["k"])
            a.plot([r["k"] for r in rs], [r["q_u"] for r in rs], "o-", label=f"{name} p={p:g}")
    a.set(xlabel="k", ylabel="cov_k calls by unsubscribes", title="Fig. 9")
    a.legend(fontsize=7)
    for j, d in enumerate(dims):
        a = ax[1, j]
        for name in sorted({r["index"] for r in cmp}):
            rs = sorted((r for r in cmp if r["dims"] == d and r["index"] == name), key=lambda r: r["commands"])
            a.plot([r["commands"] for r in rs], [r["seconds"] for r in rs], "o-", label=name)
        a.set(xlabel="commands", ylabel="seconds", title=f"Fig. {10 + j if j < 3 else ''}: dimension {d}")
        a.legend(fontsize=7)
    for j in range(len(dims), ncol):
        ax[1, j].axis("off")
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)


def run_covering(args) -> dict:
    names = [x for x in args.indexes.split(",") if x]
    t0 = time.perf_counter()
    _warm(names, args)
    res = {"config": {k: v for k, v in vars(args).items() if k != "func"}}
    res["reporting"] = _reporting(args, names)
    res["compare"] = _compare(args, names)
    res["paper"] = {"table_I": TABLE_I, "table_II": TABLE_II}
    res["targets"] = _targets(res["reporting"], res["compare"])
    res["seconds"] = time.perf_counter() - t0
    return res


def main(args) -> int:
    if getattr(args, "cluster", False):
        from .covering_cluster import main_cluster
        return main_cluster(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    res = run_covering(args)
    write_json(res, out / "covering.json")
    _plot(res, out / "covering.png")
    print({k: v for k, v in res["targets"].items()})
    print(f"wrote {out / 'covering.json'} and {out / 'covering.png'}")
    return 0

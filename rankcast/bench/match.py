"""``rankcast bench match``: the ranked pub/sub paper's experiments (Section 5) on its Zipfian
generator (Table 1 defaults; :mod:`rankcast.ingest.match_workloads`), every index side by side
in one run.

1. **memory and build** per attribute at each ``--n`` (d = 1): bytes of every index (paper
   Table 2) and its build time;
2. **time against getnext calls** (d = 1, the largest n): the time to read the first g stabbed
   intervals of a query in score order, per index (paper Figure 6);
3. **dimensions** (``--dims``): top-k per event with relaxed scoring (the Threshold Algorithm,
   as in every experiment of the paper) through :class:`~rankcast.kinds.matching.core.MatchCore`,
   per index and against ``scan`` (every expression checked) (Figures 7-8);
4. **skew_length** (``--skews``, d = 4): the same, as intervals get shorter (Figure 9).

Targets (docs/BENCHMARKS.md, at 1M expressions): SOPT-R-tree fastest and IR-tree within 2x of it; 1.5x
to 16x over the other structures at d = 1 to 4; segment tree at least 20x the IR-tree's memory;
build under a minute per attribute; the best index at least 50x faster than scan at d = 4,
k = 20. Writes ``match.json`` and ``match.png``.

``--paper betree`` runs the BE*-tree paper's experiments instead (Table III families, BE*,
BE*-B, k-index and scan; :mod:`rankcast.bench.betree`): ``betree.json`` and ``betree.png``.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from ._common import pyplot, save_figure, write_json

__all__ = ["add_arguments", "main", "run_match"]

INDEXES = ("sopt-r-tree", "ir-tree", "segment-tree", "interval-tree", "r-tree")


def _ints(s: str) -> list[int]:
    return [int(float(x)) for x in s.split(",") if x]


def _floats(s: str) -> list[float]:
    return [float(x) for x in s.split(",") if x]


def add_arguments(p: argparse.ArgumentParser) -> None:
    from . import betree
    p.add_argument("--paper", choices=("ranked", "betree"), default="ranked",
                   help="ranked: the ranked pub/sub paper's experiments (default); "
                        "betree: the BE*-tree paper's (rankcast.bench.betree)")
    p.add_argument("--n", type=_ints, default=[100_000, 200_000, 500_000, 1_000_000],
                   help="expressions for the memory experiment (comma-separated)")
    p.add_argument("--n-queries", type=int, default=1000)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--k", type=int, default=20)
    p.add_argument("--b", type=int, default=50)
    p.add_argument("--dims", type=_ints, default=[1, 2, 4, 8])
    p.add_argument("--dims-n", type=int, default=1_000_000, help="expressions for experiments 3 and 4")
    p.add_argument("--skews", type=_floats, default=[0.25, 0.75, 1.5])
    p.add_argument("--skew-length", type=float, default=0.75)
    p.add_argument("--lengths", type=int, default=100,
                   help="support of the half-length Zipf: ranks 1..L, half-length rank / (2 L) (the paper "
                        "leaves it open; more ranks, fewer tied scores)")
    p.add_argument("--getnext", type=_ints, default=[1, 10, 100, 1000, 10000])
    p.add_argument("--indexes", default=",".join(INDEXES))
    p.add_argument("--scan-queries", type=int, default=50, help="queries timed for scan (it is slow)")
    p.add_argument("--skip-segment-above", type=int, default=4,
                   help="no segment tree above this many dimensions (the paper: out of memory at 8)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ta-bound", action="store_true",
                   help="instead: the fewest sorted accesses any TA needs at --dims-n, d = max(--dims), k, "
                        "and the speed-up over scan that bounds (rankcast.bench.ta_bound; ta_bound.json)")
    p.add_argument("--out", default="out/bench")
    betree.add_arguments(p)


def _build_1d(name, w, b):
    from rankcast.kinds.matching.intervals import index_class
    cls = index_class(name)
    t0 = time.perf_counter()
    idx = cls(w.lo[:, 0], w.hi[:, 0], w.score[:, 0], np.arange(len(w.lo), dtype=np.int64), b=b)
    return idx, time.perf_counter() - t0


def _memory(args, names) -> list[dict]:
    from rankcast.ingest.match_workloads import zipf_workload
    rows = []
    for n in args.n:
        w = zipf_workload(n, 1, 10, skew_length=args.skew_length, lengths=args.lengths, seed=args.seed)
        raw = 4 * 8 * n          # lo, hi, score, item
        for name in names:
            idx, secs = _build_1d(name, w, args.b)
            row = {"n": n, "index": name, "bytes": int(idx.nbytes()), "raw_bytes": raw, "build_seconds": secs}
            stored = getattr(getattr(idx, "base", idx), "rows", None)
            if stored is not None:      # the segment tree: canonical-cover entries per interval
                row["entries_per_interval"] = len(stored) / n
            rows.append(row)
            print(f"memory n={n:>8} {name:<14} {idx.nbytes() / 2**20:9.1f} MiB  build {secs:6.2f} s", flush=True)
            del idx
    return rows


def _getnext(args, names) -> list[dict]:
    from rankcast.ingest.match_workloads import zipf_workload
    n = max(args.n)
    w = zipf_workload(n, 1, args.n_queries, skew_length=args.skew_length, lengths=args.lengths, seed=args.seed)
    rows = []
    for name in names:
        idx, _ = _build_1d(name, w, args.b)
        for q in w.queries[: args.warmup, 0]:
            idx.open(float(q)).next(args.k)
        for g in args.getnext:
            qs = w.queries[: max(10, min(args.n_queries, 200_000 // max(g, 1))), 0]
            t0 = time.perf_counter()
            got = 0
            for q in qs:
                got += len(idx.open(float(q)).next(g)[0])
            secs = (time.perf_counter() - t0) / len(qs)
            rows.append({"index": name, "getnext": g, "seconds_per_query": secs, "read": got / len(qs)})
            print(f"getnext n={n} {name:<14} g={g:>6} {secs * 1e6:10.1f} us/query", flush=True)
        del idx
    return rows


def _topk(core_cls, name, w, k, queries, scoring="relaxed", b=50):
    from rankcast.ingest.match_workloads import event_batch, expression_batch
    from rankcast.kinds.matching.predicates import EventBatch
    core = core_cls(scoring, name, b=b)
    t0 = time.perf_counter()
    core.add(expression_batch(w), w.lo.shape[1])
    build = time.perf_counter() - t0
    ev = event_batch(w)
    d = w.lo.shape[1]

    def part(a, z):
        return EventBatch(ids=ev.ids[a:z], off=ev.off[a:z + 1] - ev.off[a], attr=ev.attr[a * d:z * d],
                          val=ev.val[a * d:z * d], weight=ev.weight[a * d:z * d])
    core.match(part(0, min(5, queries)), k)          # compile / warm
    before = dict(core.counters)
    t0 = time.perf_counter()
    res = core.match(part(0, queries), k)
    secs = (time.perf_counter() - t0) / queries
    after = core.counters
    per = {c: (after[c] - before.get(c, 0)) / queries for c in ("sorted_accesses", "random_accesses", "nodes", "holes")
           if c in after}
    return {"build_seconds": build, "seconds_per_query": secs, **per}, res


def _dims(args, names, dims, skews) -> list[dict]:
    from rankcast.baselines.matching import ScanCore
    from rankcast.kinds.matching.core import MatchCore
    from rankcast.ingest.match_workloads import zipf_workload
    rows = []
    for d in dims:
        for skew in skews:
            w = zipf_workload(args.dims_n, d, args.n_queries, skew_length=skew, lengths=args.lengths, seed=args.seed)
            q = min(args.n_queries, 1000)
            ref = None
            for name in names:
                if name == "segment-tree" and d > args.skip_segment_above:
                    continue
                row, res = _topk(MatchCore, name, w, args.k, q, b=args.b)
                ids = [r[0].tolist() for r in res]
                if ref is None:
                    ref = ids
                row.update(d=d, skew_length=skew, index=name, agrees=ids == ref)
                rows.append(row)
                print(f"d={d} skew={skew} {name:<14} {row['seconds_per_query'] * 1e3:9.3f} ms/event "
                      f"sorted {row.get('sorted_accesses', 0):9.0f} random {row.get('random_accesses', 0):9.0f} "
                      f"build {row['build_seconds']:6.1f} s", flush=True)
            sq = min(q, args.scan_queries)
            row, res = _topk(ScanCore, "scan", w, args.k, sq)
            row.update(d=d, skew_length=skew, index="scan",
                       agrees=[r[0].tolist() for r in res] == ref[:sq] if ref is not None else True)
            rows.append(row)
            print(f"d={d} skew={skew} {'scan':<14} {row['seconds_per_query'] * 1e3:9.3f} ms/event", flush=True)
    return rows


def _targets(mem, dims) -> dict:
    out = {}
    big = max(r["n"] for r in mem) if mem else None
    m = {r["index"]: r for r in mem if r["n"] == big}
    if "segment-tree" in m and "ir-tree" in m:
        out["segment_over_ir_memory"] = {"value": m["segment-tree"]["bytes"] / m["ir-tree"]["bytes"], "target": ">= 20"}
    if m:
        out["max_build_seconds_per_attribute"] = {"value": max(r["build_seconds"] for r in m.values()),
                                                  "target": "< 60"}
    for d in sorted({r["d"] for r in dims}):
        t = {r["index"]: r["seconds_per_query"] for r in dims if r["d"] == d and r["skew_length"] == dims[0]["skew_length"]}
        idx = {k: v for k, v in t.items() if k != "scan"}
        if not idx:
            continue
        best = min(idx, key=idx.get)
        row = {"fastest": best}
        if "sopt-r-tree" in idx and "ir-tree" in idx:
            row["ir_over_sopt"] = idx["ir-tree"] / idx["sopt-r-tree"]
        if "sopt-r-tree" in idx:
            row["sopt_speedup_over"] = {k: v / idx["sopt-r-tree"] for k, v in idx.items() if k != "sopt-r-tree"}
        if "scan" in t:
            row["scan_over_best"] = t["scan"] / idx[best]
        out[f"d={d}"] = row
    return out


def _plot(res, path: Path) -> None:
    plt = pyplot("rankcast bench match")
    fig, ax = plt.subplots(2, 2, figsize=(13, 9))
    mem = res["memory"]
    for name in sorted({r["index"] for r in mem}):
        rs = [r for r in mem if r["index"] == name]
        ax[0, 0].plot([r["n"] for r in rs], [r["bytes"] / 2**20 for r in rs], "o-", label=name)
    ax[0, 0].set(xlabel="intervals", ylabel="MiB per attribute", yscale="log", title="1. memory (Table 2)")
    ax[0, 0].legend()
    for name in sorted({r["index"] for r in res["getnext"]}):
        rs = [r for r in res["getnext"] if r["index"] == name]
        ax[0, 1].plot([r["getnext"] for r in rs], [r["seconds_per_query"] * 1e3 for r in rs], "o-", label=name)
    ax[0, 1].set(xlabel="getnext calls", ylabel="ms per query", xscale="log", yscale="log",
                 title="2. time against getnext calls (Fig. 6)")
    ax[0, 1].legend()
    skew0 = res["dims"][0]["skew_length"] if res["dims"] else None
    for name in sorted({r["index"] for r in res["dims"]}):
        rs = [r for r in res["dims"] if r["index"] == name and r["skew_length"] == skew0]
        ax[1, 0].plot([r["d"] for r in rs], [r["seconds_per_query"] * 1e3 for r in rs], "o-", label=name)
    ax[1, 0].set(xlabel="dimensions d", ylabel="ms per event (top-k, TA)", yscale="log",
                 title="3. dimensions (Figs. 7-8)")
    ax[1, 0].legend()
    for name in sorted({r["index"] for r in res["skew"]}):
        rs = [r for r in res["skew"] if r["index"] == name]
        ax[1, 1].plot([r["skew_length"] for r in rs], [r["seconds_per_query"] * 1e3 for r in rs], "o-", label=name)
    ax[1, 1].set(xlabel="skew_length", ylabel="ms per event", yscale="log", title="4. skew_length, d = 4 (Fig. 9)")
    if res["skew"]:                     # --skews "" leaves the panel empty
        ax[1, 1].legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def run_match(args) -> dict:
    names = [x for x in args.indexes.split(",") if x]
    t0 = time.perf_counter()
    res = {"config": {k: v for k, v in vars(args).items() if k != "func"}}
    res["memory"] = _memory(args, names)
    res["getnext"] = _getnext(args, names)
    res["dims"] = _dims(args, names, args.dims, [args.skew_length])
    res["skew"] = _dims(args, names, [4], args.skews) if args.skews else []
    res["targets"] = _targets(res["memory"], res["dims"])
    res["seconds"] = time.perf_counter() - t0
    return res


def main(args) -> int:
    if getattr(args, "paper", "ranked") == "betree":
        from . import betree
        return betree.main(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.ta_bound:
        from .ta_bound import ta_bound
        res = ta_bound(args.dims_n, max(args.dims), args.k, min(args.n_queries, 50), args.skew_length,
                       lengths=args.lengths, seed=args.seed)
        write_json(res, out / "ta_bound.json")
        print({k: v for k, v in res.items() if k != "per_query"})
        return 0
    res = run_match(args)
    write_json(res, out / "match.json")
    _plot(res, out / "match.png")
    print(f"wrote {out / 'match.json'} and {out / 'match.png'}")
    return 0

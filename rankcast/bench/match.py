"""``rankcast bench match``: the ranked pub/sub paper's experiments (Section 5) on its Zipfian
generator (Table 1 defaults; :mod:`rankcast.ingest.match_workloads`), every index side by side
in one run.

1. **memory and build** per attribute at each ``--n`` (d = 1): bytes of every index (paper
   Table 2) and its build time;
2. **time against getnext calls** (d = 1, the largest n): the time to read the first g stabbed
   intervals of a query in score order, per index (paper Figure 6), through the Python cursors
   (``getnext``) and the cursors alone (``cursors``: one compiled call over every query), the
   latter also at the depth the Threshold Algorithm reads each list at ``--cursor-dims``;
3. **dimensions** (``--dims``): top-k per event with relaxed scoring (the Threshold Algorithm,
   as in every experiment of the paper) through :class:`~rankcast.kinds.matching.core.MatchCore`,
   per index and against ``scan`` (every expression checked) (Figures 7-8);
4. **skew_length** (``--skews``, d = 4): the same, as intervals get shorter (Figure 9);
5. **drivers** (``--driver-dims``, at ``--dims-n``): every exact method of
   :mod:`rankcast.kinds.matching` on the paper's workload (queries from the subscriptions'
   distribution, ``--queries``) for relaxed and static scoring: the columnar scan
   (``index="scan"``), the row-by-row table scan, the paper's drivers, the pivot driver and the
   box driver over SOPT-R-trees, and ``index="auto"``; each event timed as the best of
   ``--reps`` runs, every ratio beside the scan's milliseconds per event;
6. **auto** (``--auto-n``): ``index="auto"`` against every method on the paper's workload
   with both query distributions (d = 4, relaxed), BEGen and GeoNames (weighted).

``--sections`` picks among ``memory,getnext,cursors,dims,skew,drivers,auto`` (all by default).

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
    p.add_argument("--queries", choices=("shared", "separate"), default="shared",
                   help="the paper workload's queries: sampled from the subscriptions' distribution (shared, the "
                        "paper's) or from a generator with regions of their own (separate)")
    p.add_argument("--cursor-g", type=_ints, default=[1, 10, 20, 100, 1000, 10000],
                   help="getnext calls per query of the cursors experiment at d = 1")
    p.add_argument("--cursor-dims", type=_ints, default=[1, 2, 4],
                   help="dimensions at which the cursors experiment reads each list as deep as the Threshold "
                        "Algorithm does (at --dims-n)")
    p.add_argument("--sections", default="memory,getnext,cursors,dims,skew,drivers,auto",
                   help="which experiments to run (comma-separated)")
    p.add_argument("--driver-dims", type=_ints, default=[1, 2, 4], help="dimensions of experiment 5")
    p.add_argument("--driver-methods", default="scan,table-scan,paper,pivot,box,auto",
                   help="methods of experiment 5 (comma-separated; scan first: the ratios' base)")
    p.add_argument("--driver-queries", type=int, default=100, help="events timed per method in experiments 5 and 6")
    p.add_argument("--reps", type=int, default=3, help="runs per event in experiments 5 and 6 (the best counts)")
    p.add_argument("--auto-workloads", default="paper-shared,paper-separate,begen,geonames",
                   help="workloads of experiment 6 (comma-separated)")
    p.add_argument("--auto-n", type=int, default=100_000, help="expressions of BEGen and GeoNames in experiment 6")
    p.add_argument("--out", default="out/bench")
    betree.add_arguments(p)


def _build_1d(name, w, b):
    return _build_1d_col(name, w, 0, b)


def _build_1d_col(name, w, j, b):
    """The index ``name`` over column ``j`` of the workload (items: the rows), its build seconds."""
    from rankcast.kinds.matching.intervals import index_class
    cls = index_class(name)
    t0 = time.perf_counter()
    idx = cls(w.lo[:, j], w.hi[:, j], w.score[:, j], np.arange(len(w.lo), dtype=np.int64), b=b)
    return idx, time.perf_counter() - t0


def _memory(args, names) -> list[dict]:
    from rankcast.ingest.match_workloads import zipf_workload
    rows = []
    for n in args.n:
        w = zipf_workload(n, 1, 10, skew_length=args.skew_length, lengths=args.lengths, seed=args.seed)
        raw = 4 * 8 * n          # lo, hi, score, item
        for name in names:
            idx, secs = _build_1d(name, w, args.b)
            row = {"n": n, "index": name, "bytes": int(idx.nbytes()), "raw_bytes": raw, "build_seconds": secs,
                   "bytes_per_interval": idx.nbytes() / n, "entries_per_interval": idx.entries() / n}
            rows.append(row)
            print(f"memory n={n:>8} {name:<14} {idx.nbytes() / 2**20:9.1f} MiB  {row['bytes_per_interval']:6.1f} B "
                  f"and {row['entries_per_interval']:6.2f} entries per interval  build {secs:6.2f} s", flush=True)
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


def _cursor_race(idxs: dict, runs: list, reps: int = 5) -> dict:
    """Time ``read_many`` of every structure on every run ``(key, column, queries, counts)``,
    the structures side by side in an order rotated from pass to pass, each the
    best of its passes: {(key, name): (seconds per query, rows read, the rows)}; ``idxs[name]``
    is the list of a structure's indexes by column."""
    out = {}
    names = list(idxs)
    for rep in range(reps):
        for key, cols, qs, g in runs:
            for name in names[rep % len(names):] + names[: rep % len(names)]:
                secs, rows = 0.0, []
                for j in cols:
                    idxs[name][j].read_many(qs[j][:5], g[:5] if np.ndim(g) else g)     # its own data in the caches
                    t0 = time.perf_counter()
                    _, items, _ = idxs[name][j].read_many(qs[j], g)
                    secs += time.perf_counter() - t0
                    rows.append(items)
                per = secs / len(qs[cols[0]])
                if (key, name) not in out or per < out[(key, name)][0]:
                    out[(key, name)] = (per, sum(len(x) for x in rows) / len(qs[cols[0]]), rows)
    return out


def _cursors(args, names) -> list[dict]:
    """The structures on the paper's Fig. 6 measure: the time of g getnext calls per query,
    the cursors alone (``read_many``: one compiled call over every query, nothing between the
    calls), at d = 1 for every g of ``--cursor-g``; then at the depth the Threshold Algorithm
    reads each list at every d of ``--cursor-dims`` (its sorted accesses per event over d, per
    event), summed over the event's d cursors. Every structure is built first, then all are
    timed side by side (:func:`_cursor_race`), so that the machine's other load falls on all."""
    from rankcast.ingest.match_workloads import event_batch, expression_batch, zipf_workload
    from rankcast.kinds.matching.core import MatchCore
    rows = []
    n = max(args.n)
    w = zipf_workload(n, 1, args.n_queries, skew_length=args.skew_length, lengths=args.lengths, seed=args.seed,
                      queries=args.queries)
    idxs = {name: [_build_1d(name, w, args.b)[0]] for name in names}
    runs = [(g, [0], [w.queries[: max(10, min(len(w.queries), 2_000_000 // max(g, 1))), 0]], g) for g in args.cursor_g]
    res = _cursor_race(idxs, runs)
    for g in args.cursor_g:
        ref = res[(g, names[0])][2]
        for name in names:
            secs, read, got = res[(g, name)]
            rows.append({"d": 1, "index": name, "getnext": g, "seconds_per_query": secs, "read": read,
                         "agrees": all(np.array_equal(a, b) for a, b in zip(got, ref))})
            print(f"cursors n={n} d=1 {name:<14} g={g:>6} {secs * 1e6:10.2f} us/query", flush=True)
    del idxs, res
    for d in args.cursor_dims:
        w = zipf_workload(args.dims_n, d, args.n_queries, skew_length=args.skew_length, lengths=args.lengths,
                          seed=args.seed, queries=args.queries)
        q = min(args.n_queries, args.driver_queries)
        core = MatchCore("relaxed", "sopt-r-tree", b=args.b)
        core.add(expression_batch(w), d)
        depth = np.zeros(q, np.int64)
        for i, e in enumerate(_split_events(event_batch(w), q)):
            before = core.counters["sorted_accesses"]
            core.match(e, args.k)
            depth[i] = -(-(core.counters["sorted_accesses"] - before) // d)
        del core
        print(f"cursors d={d}: the Threshold Algorithm reads {depth.mean():.0f} rows per list per event "
              f"(median {np.median(depth):.0f})", flush=True)
        here = [x for x in names if not (x == "segment-tree" and d > args.skip_segment_above)]
        idxs = {name: [_build_1d_col(name, w, j, args.b)[0] for j in range(d)] for name in here}
        res = _cursor_race(idxs, [("ta", list(range(d)), [w.queries[:q, j] for j in range(d)], depth)])
        ref = res[("ta", here[0])][2]
        for name in here:
            secs, read, got = res[("ta", name)]
            rows.append({"d": d, "index": name, "getnext": "ta-depth", "depth_mean": float(depth.mean()),
                         "seconds_per_query": secs, "read": read,
                         "agrees": all(np.array_equal(a, b) for a, b in zip(got, ref))})
            print(f"cursors n={args.dims_n} d={d} {name:<14} TA depth {secs * 1e3:9.3f} ms/event", flush=True)
        del idxs, res
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
            w = zipf_workload(args.dims_n, d, args.n_queries, skew_length=skew, lengths=args.lengths, seed=args.seed,
                              queries=args.queries)
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


# experiments 5 and 6: method -> the configuration serving it (None: the row-by-row table scan)
METHODS = {"scan": dict(index="scan"), "table-scan": None, "paper": dict(index="sopt-r-tree", driver="paper"),
           "pivot": dict(index="sopt-r-tree", driver="pivot"), "box": dict(index="auto", driver="box"),
           "auto": dict(index="auto"), "be-tree": dict(index="be-tree")}


def _method_core(method: str, scoring: str, b: int):
    from rankcast.config import MatchConfig
    from rankcast.kinds.matching.matcher import new_core
    from rankcast.kinds.matching.scan import TableScanCore
    cfg = METHODS[method]
    if cfg is None:
        return TableScanCore(scoring)
    return new_core(MatchConfig(scoring=scoring, branching=b, **cfg))


def _split_events(ev, q: int) -> list:
    """The first ``q`` events of an EventBatch, one batch each."""
    from rankcast.kinds.matching.predicates import EventBatch
    out = []
    for i in range(min(q, len(ev.ids))):
        a, z = int(ev.off[i]), int(ev.off[i + 1])
        out.append(EventBatch(ids=ev.ids[i:i + 1], off=np.array([0, z - a], np.int64), attr=ev.attr[a:z],
                              val=ev.val[a:z], weight=ev.weight[a:z]))
    return out


WARM_EVENTS = 10        # events each method answers untimed before each of its timed runs


def _time_methods(methods, scoring, exprs, n_attrs, events, k, reps, b, tag) -> list[dict]:
    """Build every method's core over ``exprs``, time each event of ``events`` (single-event
    batches) as the best of ``reps`` runs after one untimed pass, method by method within each
    run (side by side, in an order rotated from run to run, each run of a method after
    ``WARM_EVENTS`` untimed events of its own), and check that all return the same top-k."""
    cores, rows = {}, {}
    for name in methods:
        core = _method_core(name, scoring, b)
        t0 = time.perf_counter()
        core.add(exprs, n_attrs)
        core.match(events[0], k)            # compile, build what is built lazily
        cores[name] = core
        rows[name] = {"method": name, "scoring": scoring, "build_seconds": time.perf_counter() - t0, **tag}
        # one untimed pass over the events: index="auto" decides what serves the table on its
        # first events (its race, timed in its row), and every method then gets the same number
        # of timed runs of every event
        t0 = time.perf_counter()
        for e in events:
            core.match(e, k)
        rows[name]["first_pass_seconds"] = time.perf_counter() - t0
        if name == "auto":
            st = core.stats()
            rows[name].update(auto_driver=st.get("driver"), raced_events=st.get("raced_events", 0),
                              raced_box_seconds=st.get("raced_box_seconds", 0.0),
                              raced_be_tree_seconds=st.get("raced_be_tree_seconds", 0.0))
    best = {name: np.full(len(events), np.inf) for name in methods}
    answers = {name: [None] * len(events) for name in methods}
    for rep in range(reps):
        # the order of the methods rotates from run to run: none runs twice in a row (its data
        # still in the caches) or always after the same neighbour
        items = list(cores.items())
        for name, core in items[rep % len(items):] + items[: rep % len(items)]:
            times = best[name]
            for e in events[:WARM_EVENTS]:      # its own data in the caches, whichever method ran before
                core.match(e, k)
            for i, e in enumerate(events):
                t0 = time.perf_counter()
                res = core.match(e, k)
                times[i] = min(times[i], time.perf_counter() - t0)
                answers[name][i] = res[0][0].tolist()
    ref = answers["scan"] if "scan" in answers else next(iter(answers.values()))
    scan_s = float(best["scan"].mean()) if "scan" in best else None
    out = []
    for name in methods:
        row = rows[name]
        row.update(seconds_per_event=float(best[name].mean()), median_seconds=float(np.median(best[name])),
                   agrees=answers[name] == ref)
        if scan_s is not None:
            row.update(scan_seconds_per_event=scan_s, speedup_over_scan=scan_s / row["seconds_per_event"])
        out.append(row)
        print(f"{' '.join(f'{k}={v}' for k, v in tag.items())} {scoring:<8} {name:<10} "
              f"{row['seconds_per_event'] * 1e3:9.3f} ms/event  x{row.get('speedup_over_scan', 0):7.1f} over scan "
              f"({scan_s * 1e3 if scan_s else 0:.2f} ms)  build {row['build_seconds']:6.1f} s  agrees={row['agrees']}",
              flush=True)
    return out


def _drivers(args) -> list[dict]:
    from rankcast.ingest.match_workloads import event_batch, expression_batch, zipf_workload
    rows = []
    for d in args.driver_dims:
        w = zipf_workload(args.dims_n, d, args.driver_queries, skew_length=args.skew_length, lengths=args.lengths,
                          seed=args.seed, queries=args.queries)
        events = _split_events(event_batch(w), args.driver_queries)
        for scoring in ("relaxed", "static"):
            methods = [x for x in args.driver_methods.split(",") if x]
            rows += _time_methods(methods, scoring, expression_batch(w), d, events, args.k, args.reps, args.b,
                                  {"workload": "paper", "queries": args.queries, "d": d, "n": args.dims_n})
    return rows


def _auto(args) -> list[dict]:
    from rankcast.ingest.begen import begen, geonames_betree
    from rankcast.ingest.match_workloads import event_batch, expression_batch, zipf_workload
    rows = []
    wanted = set(args.auto_workloads.split(","))
    for queries in ("shared", "separate"):
        if f"paper-{queries}" not in wanted:
            continue
        w = zipf_workload(args.dims_n, 4, args.driver_queries, skew_length=args.skew_length, lengths=args.lengths,
                          seed=args.seed, queries=queries)
        rows += _time_methods(["scan", "paper", "pivot", "box", "auto"], "relaxed", expression_batch(w), 4,
                              _split_events(event_batch(w), args.driver_queries), args.k, args.reps, args.b,
                              {"workload": f"paper-{queries}", "d": 4, "n": args.dims_n})
    for name, make in (("begen", lambda: begen(args.auto_n, n_events=args.driver_queries, seed=args.seed)),
                       ("geonames", lambda: geonames_betree(args.auto_n, n_events=args.driver_queries,
                                                            seed=args.seed))):
        if name not in wanted:
            continue
        w = make()
        rows += _time_methods(["scan", "paper", "box", "auto", "be-tree"], "weighted", w.exprs, w.n_attrs,
                              _split_events(w.events, args.driver_queries), args.k, args.reps, args.b,
                              {"workload": name, "n": args.auto_n})
    return rows


def _driver_targets(drivers, auto) -> dict:
    out = {}
    want = {1: 100, 2: 20, 4: 50}
    for r in drivers:
        if r["scoring"] != "relaxed" or r["method"] in ("scan", "table-scan"):
            continue
        key = f"drivers d={r['d']}"
        cur = out.get(key)
        if cur is None or r["speedup_over_scan"] > cur["best_speedup_over_scan"]:
            out[key] = {"best_method": r["method"], "best_speedup_over_scan": r["speedup_over_scan"],
                        "best_ms": r["seconds_per_event"] * 1e3, "scan_ms": r["scan_seconds_per_event"] * 1e3,
                        "target": f">= {want.get(r['d'], 50)}"}
    for wl in sorted({r["workload"] for r in auto}):
        rs = [r for r in auto if r["workload"] == wl and r["method"] != "scan"]
        fastest = min(rs, key=lambda r: r["seconds_per_event"])
        a = next(r for r in rs if r["method"] == "auto")
        out[f"auto {wl}"] = {"auto_over_fastest": a["seconds_per_event"] / fastest["seconds_per_event"],
                             "fastest": fastest["method"], "auto_speedup_over_scan": a["speedup_over_scan"],
                             "target": "auto_over_fastest <= 1.1, auto_speedup_over_scan >= 1"}
    return out


def _cursor_targets(rows) -> dict:
    """Fig. 6 targets: SOPT-R-tree fastest, IR-tree within 2x of it, the slowest at least 2x it."""
    out = {}
    for key in sorted({(r["d"], str(r["getnext"])) for r in rows}):
        t = {r["index"]: r["seconds_per_query"] for r in rows if (r["d"], str(r["getnext"])) == key}
        if "sopt-r-tree" not in t:
            continue
        sopt = t["sopt-r-tree"]
        out[f"cursors d={key[0]} g={key[1]}"] = {
            "fastest": min(t, key=t.get), "over_sopt": {k: v / sopt for k, v in t.items()},
            "target": "fastest sopt-r-tree, ir-tree <= 2x sopt, slowest >= 2x sopt (d = 1)"}
    return out


def _targets(mem, dims) -> dict:
    out = {}
    big = max(r["n"] for r in mem) if mem else None
    m = {r["index"]: r for r in mem if r["n"] == big}
    if "segment-tree" in m and "ir-tree" in m:
        out["segment_over_ir_memory"] = {"value": m["segment-tree"]["bytes"] / m["ir-tree"]["bytes"], "target": ">= 20"}
    if m:
        out["memory_per_interval"] = {k: {"bytes": r["bytes_per_interval"], "entries": r["entries_per_interval"]}
                                      for k, r in m.items()}
        out["memory_targets"] = {"target": "segment >= 15 entries per interval; ir-tree, r-tree <= 1.1; ir-tree bytes "
                                           "<= 2x interval-tree's"}
        if "interval-tree" in m and "ir-tree" in m:
            out["memory_targets"]["ir_over_interval_bytes"] = m["ir-tree"]["bytes"] / m["interval-tree"]["bytes"]
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


def _legend(ax) -> None:
    if ax.get_legend_handles_labels()[0]:       # an experiment not run leaves its panel empty
        ax.legend()


def _plot(res, path: Path) -> None:
    plt = pyplot("rankcast bench match")
    fig, ax = plt.subplots(3, 2, figsize=(13, 13))
    mem = res["memory"]
    for name in sorted({r["index"] for r in mem}):
        rs = [r for r in mem if r["index"] == name]
        ax[0, 0].plot([r["n"] for r in rs], [r["bytes"] / 2**20 for r in rs], "o-", label=name)
    ax[0, 0].set(xlabel="intervals", ylabel="MiB per attribute", yscale="log", title="1. memory (Table 2)")
    _legend(ax[0, 0])
    fig6 = [r for r in res.get("cursors", []) if r["d"] == 1 and r["getnext"] != "ta-depth"]
    label = "cursors alone"
    if not fig6:
        fig6, label = res["getnext"], "through the Python cursors"
    for name in sorted({r["index"] for r in fig6}):
        rs = [r for r in fig6 if r["index"] == name]
        ax[0, 1].plot([r["getnext"] for r in rs], [r["seconds_per_query"] * 1e3 for r in rs], "o-", label=name)
    ax[0, 1].set(xlabel="getnext calls", ylabel="ms per query", xscale="log", yscale="log",
                 title=f"2. time against getnext calls, {label} (Fig. 6)")
    _legend(ax[0, 1])
    skew0 = res["dims"][0]["skew_length"] if res["dims"] else None
    for name in sorted({r["index"] for r in res["dims"]}):
        rs = [r for r in res["dims"] if r["index"] == name and r["skew_length"] == skew0]
        ax[1, 0].plot([r["d"] for r in rs], [r["seconds_per_query"] * 1e3 for r in rs], "o-", label=name)
    ax[1, 0].set(xlabel="dimensions d", ylabel="ms per event (top-k, TA)", yscale="log",
                 title="3. dimensions (Figs. 7-8)")
    _legend(ax[1, 0])
    for name in sorted({r["index"] for r in res["skew"]}):
        rs = [r for r in res["skew"] if r["index"] == name]
        ax[1, 1].plot([r["skew_length"] for r in rs], [r["seconds_per_query"] * 1e3 for r in rs], "o-", label=name)
    ax[1, 1].set(xlabel="skew_length", ylabel="ms per event", yscale="log", title="4. skew_length, d = 4 (Fig. 9)")
    if res["skew"]:                     # --skews "" leaves the panel empty
        _legend(ax[1, 1])
    drv = [r for r in res.get("drivers", []) if r["scoring"] == "relaxed"]
    for name in sorted({r["method"] for r in drv}):
        rs = sorted((r for r in drv if r["method"] == name), key=lambda r: r["d"])
        ax[2, 0].plot([r["d"] for r in rs], [r["seconds_per_event"] * 1e3 for r in rs], "o-", label=name)
    ax[2, 0].set(xlabel="dimensions d", ylabel="ms per event (best of runs)", yscale="log",
                 title="5. exact methods, relaxed, queries from the subscriptions")
    if drv:
        _legend(ax[2, 0])
    auto = res.get("auto", [])
    wls = sorted({r["workload"] for r in auto})
    methods = sorted({r["method"] for r in auto})
    for j, name in enumerate(methods):
        xs = [i + j / (len(methods) + 1) for i, wl in enumerate(wls)
              if any(r["workload"] == wl and r["method"] == name for r in auto)]
        ys = [r["seconds_per_event"] * 1e3 for wl in wls for r in auto if r["workload"] == wl and r["method"] == name]
        ax[2, 1].bar(xs, ys, width=1 / (len(methods) + 1), label=name)
    ax[2, 1].set_xticks(range(len(wls)))
    ax[2, 1].set_xticklabels(wls)
    ax[2, 1].set(ylabel="ms per event", yscale="log", title="6. index=auto against every method")
    if auto:
        _legend(ax[2, 1])
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def run_match(args) -> dict:
    names = [x for x in args.indexes.split(",") if x]
    sections = set(args.sections.split(","))
    t0 = time.perf_counter()
    res = {"config": {k: v for k, v in vars(args).items() if k != "func"}}
    res["memory"] = _memory(args, names) if "memory" in sections else []
    res["getnext"] = _getnext(args, names) if "getnext" in sections else []
    res["cursors"] = _cursors(args, names) if "cursors" in sections else []
    res["dims"] = _dims(args, names, args.dims, [args.skew_length]) if "dims" in sections else []
    res["skew"] = _dims(args, names, [4], args.skews) if args.skews and "skew" in sections else []
    res["drivers"] = _drivers(args) if "drivers" in sections else []
    res["auto"] = _auto(args) if "auto" in sections else []
    res["targets"] = _targets(res["memory"], res["dims"])
    res["targets"].update(_cursor_targets(res["cursors"]))
    res["targets"].update(_driver_targets(res["drivers"], res["auto"]))
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
        res = {}
        for queries in ("shared", "separate"):
            res[queries] = ta_bound(args.dims_n, max(args.dims), args.k, min(args.n_queries, 50), args.skew_length,
                                    lengths=args.lengths, seed=args.seed, queries_from=queries)
            print(queries, {k: v for k, v in res[queries].items() if k != "per_query"}, flush=True)
        write_json(res, out / "ta_bound.json")
        return 0
    res = run_match(args)
    write_json(res, out / "match.json")
    _plot(res, out / "match.png")
    print(f"wrote {out / 'match.json'} and {out / 'match.png'}")
    return 0

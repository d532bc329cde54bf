"""How far any Threshold-Algorithm run can get below ``scan`` on the ranked pub/sub paper's
workload (the target "best index at least 50x faster than scan at d = 4, k = 20" of docs/BENCHMARKS.md).

For each query of :func:`~rankcast.ingest.match_workloads.zipf_workload` this computes, from
the data alone (numpy, no index):

- the exact top-k relaxed score ``S_k`` (brute force);
- per dimension, the stabbed intervals' weights in the indexes' order (weight descending);
- the fewest sorted accesses with which *any* algorithm that reads the dimensions' lists in
  order (TA, NRA and their variants, any depth per list, ties resolved in its favour) can
  know that no unread expression beats the k-th: the smallest total depth ``sum_j t_j``
  whose threshold ``sum_j w_j[t_j]`` (the next weight not read in each list, 0 past its end)
  is at most ``S_k``. TA's own round-robin depth is reported beside it.

With the measured cost of one sorted access of the fastest index (a cursor read straight
through, nothing else done) and of ``scan`` per event, this bounds the speed-up over scan
that an index-driven TA can reach: ``scan seconds / (accesses x seconds per access)``,
random accesses left out (they only add). Beside the floor, the Threshold Algorithm of
:class:`~rankcast.kinds.matching.core.MatchCore` runs on the same events, its time split into
the sorted accesses and the rest (``ta``). ``rankcast bench match --ta-bound`` runs it and
writes ``ta_bound.json``, for queries drawn from the subscriptions' distribution (``shared``,
the paper's) and from regions of their own (``separate``).
"""
from __future__ import annotations

import time

import numpy as np

__all__ = ["ta_bound"]


def _combos(cuts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Every choice of one cut per list: (total depth, threshold) arrays."""
    cost, thr = np.zeros(1, np.int64), np.zeros(1)
    for idx, val in cuts:
        cost = (cost[:, None] + idx[None, :]).ravel()
        thr = (thr[:, None] + val[None, :]).ravel()
    return cost, thr


def _min_total_depth(ws: list[np.ndarray], s_k: float) -> tuple[int, int]:
    """(fewest total sorted accesses over every depth vector, TA's round-robin total) such
    that the threshold sum_j next_weight_j <= s_k; ``ws[j]`` sorted descending."""
    nxt = [np.r_[w, 0.0] for w in ws]          # nxt[j][t]: the first weight not read at depth t
    lo, hi = 0, max((len(w) for w in ws), default=0)
    while lo < hi:                              # round-robin: the threshold falls with t
        mid = (lo + hi) // 2
        if sum(float(n[min(mid, len(n) - 1)]) for n in nxt) <= s_k:
            hi = mid
        else:
            lo = mid + 1
    rr = sum(min(lo, len(w)) for w in ws)
    # any depth vector: only depths where a list's weight drops matter (reading into a group
    # of equal weights does not lower the threshold); meet in the middle over two halves
    cuts = []
    for n in nxt:
        idx = np.flatnonzero(np.r_[True, n[1:] != n[:-1]])
        cuts.append((idx.astype(np.int64), n[idx]))
    h = len(cuts) // 2
    c1, t1 = _combos(cuts[:h])
    c2, t2 = _combos(cuts[h:])
    order = np.argsort(t2, kind="stable")
    t2s, best2 = t2[order], np.minimum.accumulate(c2[order])
    at = np.searchsorted(t2s, s_k - t1 + 1e-12, side="right") - 1    # the largest t2 <= s_k - t1
    ok = at >= 0
    best = int((c1[ok] + best2[at[ok]]).min()) if ok.any() else rr
    return min(best, rr), rr


def _ta_split(w, ev, d: int, k: int, queries: int, index: str) -> dict:
    """The Threshold Algorithm itself (``MatchCore``, relaxed, over ``index``) on the same
    events: its time per event split into the sorted accesses (the cursors) and the rest (the
    per-slot bookkeeping and the checks), with its sorted and random accesses; each event timed
    as the best of three runs."""
    from rankcast.ingest.match_workloads import expression_batch
    from rankcast.kinds.matching.core import MatchCore
    from rankcast.kinds.matching.predicates import EventBatch
    core = MatchCore("relaxed", index)
    core.add(expression_batch(w), d)
    one = [EventBatch(ids=ev.ids[i:i + 1], off=np.array([0, d], np.int64), attr=ev.attr[i * d:(i + 1) * d],
                      val=ev.val[i * d:(i + 1) * d], weight=ev.weight[i * d:(i + 1) * d]) for i in range(queries)]
    core.match(one[0], k)                       # compile
    best = np.full((queries, 3), np.inf)
    acc = np.zeros((queries, 2))
    for _ in range(3):
        for i, e in enumerate(one):
            s0, c0 = list(core.ta_seconds), dict(core.counters)
            t0 = time.perf_counter()
            core.match(e, k)
            total = time.perf_counter() - t0
            if total < best[i, 0]:
                best[i] = (total, core.ta_seconds[0] - s0[0], core.ta_seconds[1] - s0[1])
            acc[i] = (core.counters["sorted_accesses"] - c0["sorted_accesses"],
                      core.counters["random_accesses"] - c0["random_accesses"])
    mean = best.mean(axis=0)
    return {"seconds_per_event": float(mean[0]), "sorted_access_seconds": float(mean[1]),
            "bookkeeping_and_check_seconds": float(mean[2]), "other_seconds": float(mean[0] - mean[1] - mean[2]),
            "sorted_accesses": float(acc[:, 0].mean()), "random_accesses": float(acc[:, 1].mean())}


def ta_bound(n: int = 1_000_000, d: int = 4, k: int = 20, queries: int = 50, skew_length: float = 0.75,
             index: str = "sopt-r-tree", lengths: int = 100, seed: int = 0, queries_from: str = "shared") -> dict:
    from rankcast.baselines.matching import ScanCore
    from rankcast.kinds.matching.intervals import make_index
    from rankcast.ingest.match_workloads import event_batch, expression_batch, zipf_workload

    w = zipf_workload(n, d, queries, skew_length=skew_length, lengths=lengths, seed=seed, queries=queries_from)
    items = np.arange(n, dtype=np.int64)
    rows = []
    for qi in range(queries):
        q = w.queries[qi]
        stab = (w.lo <= q) & (q <= w.hi)
        rel = (w.score * stab).sum(axis=1)
        hit = stab.any(axis=1)
        sc = np.sort(rel[hit])[::-1]
        s_k = float(sc[k - 1]) if len(sc) >= k else 0.0
        ws = [np.sort(w.score[stab[:, j], j])[::-1] for j in range(d)]
        best, rr = _min_total_depth(ws, s_k)
        rows.append({"stabbed": [len(x) for x in ws], "s_k": s_k, "min_sorted_accesses": best,
                     "round_robin_sorted_accesses": rr})
    # the cost of one sorted access: the index's cursor read straight through
    idxs = [make_index(index, w.lo[:, j], w.hi[:, j], w.score[:, j], items) for j in range(d)]
    for j in range(d):
        idxs[j].open(float(w.queries[0, j])).next(1000)
    # both timed as the best of three passes (other load scatters single passes): each at its fastest
    per_access = np.inf
    for _ in range(3):
        t0 = time.perf_counter()
        read = 0
        for qi in range(queries):
            for j in range(d):
                got, _ = idxs[j].open(float(w.queries[qi, j])).next(10 ** 9)
                read += len(got)
        per_access = min(per_access, (time.perf_counter() - t0) / max(read, 1))
    del idxs
    scan = ScanCore("relaxed")
    scan.add(expression_batch(w), d)
    ev = event_batch(w)
    scan.match(ev, k)                           # warm
    scan_s = np.inf
    for _ in range(3):
        t0 = time.perf_counter()
        scan.match(ev, k)
        scan_s = min(scan_s, (time.perf_counter() - t0) / queries)
    ta = _ta_split(w, ev, d, k, queries, index)
    mins = np.array([r["min_sorted_accesses"] for r in rows], float)
    rrs = np.array([r["round_robin_sorted_accesses"] for r in rows], float)
    floor = mins * per_access
    return {"n": n, "d": d, "k": k, "queries": queries, "queries_from": queries_from, "skew_length": skew_length,
            "lengths": lengths, "index": index,
            "stabbed_per_dimension_mean": float(np.mean([np.mean(r["stabbed"]) for r in rows])),
            "min_sorted_accesses": {"mean": float(mins.mean()), "median": float(np.median(mins)),
                                    "min": float(mins.min())},
            "round_robin_sorted_accesses_mean": float(rrs.mean()),
            "seconds_per_sorted_access": per_access, "scan_seconds_per_event": scan_s,
            "floor_seconds_per_event_mean": float(floor.mean()),
            "max_speedup_over_scan": {"mean_event": scan_s / float(floor.mean()),
                                      "median_event": scan_s / float(np.median(floor))},
            "ta": {**ta, "over_floor": ta["seconds_per_event"] / float(floor.mean()),
                   "sorted_accesses_over_fewest": ta["sorted_accesses"] / float(mins.mean())},
            "per_query": rows}

"""The ranked-matching and range top-k kinds on Ray against their single-process engines
(``rankcast bench cluster --kinds matching range``): real wall clock, the same calls and
the same update form on both sides, side by side in one run.

- ``matching``: GeoNames places as events against expressions drawn around other places
  (:mod:`rankcast.ingest.match_workloads`), ``weighted`` scoring, k = 5; ``rc.Matcher``
  against a cluster of ``partitions`` under the ``replicate`` policy (every expression in
  every partition, each event answered by one) and under ``attribute`` (each expression in
  one partition, every event to each holding a match), the second as ``matching attribute``;
- ``matching-paper``: the ranked-matching paper's workload (:func:`~rankcast.ingest.match_workloads.zipf_workload`:
  ten times ``size`` expressions of four ``between`` predicates, events drawn from the
  expressions' own distribution), ``relaxed`` scoring, k = 20, ``index="auto"`` (the drivers
  of docs/matching.md), the ``replicate`` policy; 8,000 events in calls of 1,000, after a
  first untimed call on each side (it builds the indexes: the engine's tree, and each
  partition's own);
- ``range``: GeoNames places as objects and ranges of longitude
  (:mod:`rankcast.ingest.range_workloads`), k = 10, ``paint-sparse``, the ``kd`` policy;
  the update stream (the objects' inserts, then their changes) in calls of 1,000 updates,
  each object at most once a call and its updates in order
  (:func:`~rankcast.ingest.range_tables.packed_calls`); ``rc.RangeEngine`` against the
  cluster.

Each cluster runs twice, per call (``publish(wait=True)`` per call, its updates returned)
and streamed (``publish(wait=False)``, one ``flush``), each against the faster of two engine
runs right before it (its kernels loaded first, on every subscription); with the CPU time
per item in each role's methods (``Cluster.stats()``), which says where a cluster's time
goes."""
from __future__ import annotations

import os
import time

__all__ = ["run_kind_clusters", "KINDS"]

KINDS = ("matching", "matching-paper", "range")
PAPER_DIMS, PAPER_EVENTS = 4, 8_000


def _workload(kind: str, seed: int, size: int):
    """(engine config, policies, subscriptions table, the calls' tables, the fitting sample,
    the first untimed call or None)."""
    import rankcast as rc
    if kind == "matching-paper":
        from rankcast.ingest.match_tables import events_table, expressions_table
        from rankcast.ingest.match_workloads import zipf_workload
        w = zipf_workload(10 * size, PAPER_DIMS, PAPER_EVENTS + 1000, seed=seed + 9)
        events = w.events()
        calls = [events_table(events[a:a + 1000]) for a in range(0, len(events), 1000)]
        return rc.MatchConfig(scoring="relaxed", index="auto", k=20), ("replicate",), \
            expressions_table(w.expressions()), calls[1:], None, calls[0]
    if kind == "matching":
        from rankcast.ingest.match_tables import events_table, expressions_table
        from rankcast.ingest.match_workloads import geonames_events, geonames_expressions
        n_events = min(5 * size, 200_000)
        events = geonames_events(limit=n_events + 20_000, seed=seed + 7)
        exprs = geonames_expressions(events[n_events:], size, seed=seed + 8)
        events = events[:n_events]
        calls = [events_table(events[a:a + 1000]) for a in range(0, len(events), 1000)]
        return rc.MatchConfig(scoring="weighted", index="auto", k=5), ("replicate", "attribute"), \
            expressions_table(exprs), calls, exprs[:2000], None
    import pyarrow as pa

    from rankcast.ingest.range_tables import packed_calls
    from rankcast.ingest.range_workloads import geonames_range_workload
    subs, ups = geonames_range_workload(size, size // 4, size, seed=seed + 11)
    calls = [ups.take(pa.array(rows)) for rows in packed_calls(ups.column("id").to_numpy(), 1000)]
    return rc.RangeConfig(k=10, method="paint-sparse"), ("kd",), subs, calls, subs.slice(0, 1000), None


def _stream(target, subs, calls, wait: bool, updates: str, at_start=None, first=None) -> float:
    """Subscribe, then the calls; seconds of the calls (and the flush). ``at_start``: called
    right before the calls; ``first``: an untimed call before them."""
    target.subscribe(subs)
    if first is not None:
        target.publish(first, updates=updates)
    if at_start is not None:
        at_start()
    t0 = time.perf_counter()
    for c in calls:
        if wait:
            target.publish(c, updates=updates)
        else:
            target.publish(c, wait=False)
    if not wait:
        target.flush(updates=updates)
    return time.perf_counter() - t0


def _role_cpu(stats: dict) -> dict:
    """CPU seconds in each role's methods (the coordinator's a number, the others' a list)."""
    return {r: (v.get("cpu_seconds", 0.0) if isinstance(v, dict) else [x.get("cpu_seconds", 0.0) for x in v])
            for r, v in stats["roles"].items()}


def run_kind_clusters(kinds=KINDS, partitions: int = 2, updates: str = "objects", size: int = 20_000,
                      seed: int = 0, address: str | None = None, progress=print) -> dict:
    """Each kind's engine and its cluster of ``partitions``, per call and streamed (see the
    module docstring). ``size``: subscriptions (matching: expressions; events, five times as many, at most 200,000;
    matching-paper: ten times as many expressions, 8,000 events; range: objects and updates, with a quarter as
    many ranges)."""
    import ray

    import rankcast as rc
    from rankcast.config import local_ray_options

    if not ray.is_initialized():
        ray.init(**(dict(address=address, log_to_driver=False) if address
                    else local_ray_options(log_to_driver=False)))
    out: dict = {}
    for kind in kinds:
        cfg, policies, subs, calls, sample, first = _workload(kind, seed, size)
        engine_cls = rc.RangeEngine if kind == "range" else rc.Matcher
        items = sum(c.num_rows for c in calls)
        # the engine's kernels loaded before it is timed: on every subscription, so that it
        # picks (index="auto") and compiles the drivers the timed runs use (on a few hundred
        # it picked others, and the first timed run compiled its own for minutes)
        warm = engine_cls(cfg)
        warm.subscribe(subs)
        for c in calls[:3]:
            warm.publish(c, updates=updates)
        del warm
        for policy, mode, wait in ((p, m, w) for p in policies for m, w in (("per_call", True), ("streamed", False))):
            key = kind if policy == policies[0] else f"{kind} {policy}"
            row = out.setdefault(key, {"policy": policy, "partitions": partitions, "updates_form": updates,
                                       "subscriptions": subs.num_rows, "items": items, "calls": len(calls)})
            # the faster of two engine runs: the strongest reference
            e = max(items / _stream(engine_cls(cfg), subs, calls, True, updates, first=first) for _ in range(2))
            ccfg = rc.ClusterConfig(engine=cfg, policy=policy, partitions=partitions, actor_cpus=0.01,
                                    name=f"rankcast-bench-{kind}-{partitions}-{os.getpid()}")
            cl = rc.Cluster.start(ccfg, address=address, sample=sample, fresh=True)
            try:
                cl.warm()
                before = {}
                c = items / _stream(cl, subs, calls, wait, updates,
                                    at_start=lambda: before.update(_role_cpu(cl.stats())), first=first)
                after = _role_cpu(cl.stats())
            finally:
                cl.shutdown()

            def per_item(a, b):
                if isinstance(a, list):
                    return [round((x - y) / items * 1e6, 1) for x, y in zip(a, b)]
                return round((a - b) / items * 1e6, 1)
            row[mode] = {"throughput": c, "engine_throughput": e, "vs_engine": c / e,
                         "cpu_us_per_item": {r: per_item(after[r], before[r]) for r in after}}
            progress(f"{kind} cluster of {partitions} ({policy}), {mode}: {c:.0f} items/s against the engine's {e:.0f} "
                     f"(just before): {c / e:.2f}x; CPU us per item in each role's methods "
                     f"{row[mode]['cpu_us_per_item']}")
    return out

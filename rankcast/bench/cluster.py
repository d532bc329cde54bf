"""DSkype figures (paper 8.2) for ``rankcast bench cluster``: :func:`run_cluster_bench`.

Three parts, JSON + PNG:

1. **policies** (Table 5, Figure 21): replication ratio of the subscriptions and
   communication cost (message tuples from distributors to partitions, per message) of every
   policy at ``partitions`` (32) subscription partitions. These counts do not depend on the
   transport, so the topology runs in-process (same roles, same protocol, direct calls).
2. **scaling**: per-role CPU time measured in-process for 4..64 partitions (at
   ``scale_subs`` subscriptions, 100k by default, against an engine of the same size: at
   20k, 64 partitions hold about 300 subscriptions each and the per-step costs that do not
   shrink with a partition decide the figure, where the paper's are at 1M-5M; ``--scale-subs
   0`` runs it at ``--subs`` as before; load monitoring is off there, since the in-process
   subscribe phase outlasts its period and a rebalance would land in the measured stream), turned into the
   projected throughput of a deployment with one core per role instance (the slowest
   instance of the slowest stage bounds the pipeline), and the projected speed-up over the
   single-process engine's CPU time on the same stream (the paper reports 26-49x at 32
   bolts; the engine's stream runs ``engine_repeats`` times, 3, before the clusters and once
   more right after each of a cluster's ``scale_repeats`` headline streams, 3, and the least
   CPU time of all those runs is the reference: the machine's speed drifts by a third within
   minutes, and a reference taken in a slow spell alone inflated every speed-up; each role
   instance of the cluster counts likewise with its least CPU time over the cluster's runs,
   which put the same work on it: the slowest of 64 partitions measured once takes the worst
   moment of any of them). CPU time, not wall time: other processes on the same cores do not count, and
   no garbage collection runs during the measured streams (engine and clusters alike: in
   process, one collection scans every role's objects and lands on one role). The
   headline streams pipelined (``publish(wait=False)``, ``flush()``, delivered at the flush
   as a deployment at the projected rate would: ``SCALE_DELIVERY``) and compares with the
   engine's processing without building Python ``Update`` objects (serial work of whoever
   consumes results, about a third of the engine's time here); ``per_call`` streams like
   the engine (every call's updates as objects) and charges the caller's work to the
   coordinator stage.
3. **ray**: real wall-clock throughput of the engine, and of the cluster on
   Ray with 1 and 2 subscription partitions (Ray's own overhead), each publish returning its
   updates as one Arrow table by default (``--updates objects`` for Update objects,
   ``--updates diff`` for diffs: a cluster started with ``ClusterConfig(updates="diff")``,
   whose roles report diffs; several forms, ``--updates arrow diff``, run each cluster and
   mode once per form, side by side, with the rows and bytes of updates per message of each
   form and the throughput of each against the first form, under ``updates_forms``); every
   cluster twice, per call (``publish(wait=True)`` per batch, like the engine) and streamed
   (``publish(wait=False)``, one ``flush``), each against the engine measured right before;
   with the CPU time per message of each role (busy) and of every process of the cluster
   (roles, client, Ray's raylet and GCS: ``cpu_us_per_message``), which other load on the
   same cores leaves nearly unchanged where it scatters the wall-clock ratios.

4. **memory** (``--memory``): the resident memory of the default cluster (hash, 2 partitions,
   durable state) against one engine on the same workload, every process measured, Ray's
   own included (:mod:`rankcast.bench.memory`).

Protocol of every run (paper 8.1.1): fill the window, subscribe, then stream ``messages``
in calls of ``batch`` messages, each returning its updates as the engine's do; figures are
taken on the stream.
"""
from __future__ import annotations

import gc
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from rankcast.config import local_ray_options

from ._common import hardware, hardware_label, save_figure

from ._common import pyplot

__all__ = ["run_cluster_bench", "add_arguments", "main", "PAPER"]

PAPER = {
    "table5_replication": {"hash": 1.0, "location": 1.0, "keyword": [3.2, 3.3, 3.3], "prefix": [1.9, 1.9, 2.1]},
    "fig21_comm_reduction_vs_hash": 0.80,
    "speedup_over_skype": [26, 49],
}
SCALE_SUBS = 100_000    # subscriptions of the scaling part (see run_cluster_bench)
ENGINE_REPEATS = 3      # runs of the engine reference stream, the fastest CPU time taken
SCALE_REPEATS = 3       # runs of each scaling cluster's stream, each role instance's least CPU taken
# The scaling part's pipelined stream is delivered at its flush: a deployment at the projected
# rates (10^4-10^5 messages/s) cuts every delivery_interval (0.1 s), so not within a stream of
# a few thousand messages, which the in-process run, one core for every role, would cut at
# its own wall-clock pace (dozens of times), each cut shipping every changed replica list
SCALE_DELIVERY = 3600.0
ALL_POLICIES = ("hash", "location", "keyword", "prefix", "spatial-first", "keyword-first")
# the Ray runs' clusters: key -> (label, policy, partitions, cluster options). "1" runs as an
# engine in an actor (SoloPartition), "2" as two of them, each holding the window; "1-shard"
# and "2-shard" are the same clusters with a window shard of their own, the layout before
# (for comparison, not run by default); "2-volatile" is "2" without durable state (ClusterConfig
# state_dir None: no log, no checkpoints)
RAY_CLUSTERS = {"1": ("1 partition", "hash", 1, {}),
                "1-one-core": ("1 partition, one core", "hash", 1, {"solo_halves": False}),
                "1-shard": ("1 partition, window shard", "hash", 1, {"solo": False}),
                "2": ("2 partitions", "hash", 2, {}),
                "2-shard": ("2 partitions, window shard", "hash", 2, {"solo": False}),
                "2-location": ("2 partitions location", "location", 2, {}),
                "2-prefix": ("2 partitions prefix", "prefix", 2, {}),
                "2-volatile": ("2 partitions, state_dir=None", "hash", 2, {"state_dir": None})}
DEFAULT_RAY_CLUSTERS = ("1", "2", "2-location", "2-prefix")


def _take(b, a, z):
    return b.take(np.arange(a, min(z, len(b))))


class _BuildTimer:
    """CPU time spent turning update arrays into ``Update`` objects (engine and client): every
    such build, the engine's and the cluster handle's through its kind's entry, ends in
    :func:`rankcast.common.updates.results_from_arrays`, which is timed while the timer is
    entered."""

    def __init__(self):
        from rankcast.common import updates as mod
        self.mod = mod
        self.orig = mod.results_from_arrays
        self.seconds = 0.0

    def __enter__(self):
        def timed(*a, **kw):
            c0 = time.thread_time()
            try:
                return self.orig(*a, **kw)
            finally:
                self.seconds += time.thread_time() - c0
        self.mod.results_from_arrays = timed
        return self

    def __exit__(self, *exc):
        self.mod.results_from_arrays = self.orig


def _drive(target, work, window: int, messages: int, batch: int, sub_batch: int = 20_000,
           pipelined: bool = True, updates: str = "objects", collect: bool = True, at_start=None,
           settle=None) -> dict:
    """Fill, subscribe, stream; returns the stream's wall time, CPU time of the calling
    thread, and the part of it spent building ``Update`` objects. ``updates``: the form each
    per-call publish returns (``"arrow"``: one table, no Python object per update).
    ``collect=False``: no garbage collection during the stream (in-process runs: every role
    shares one heap there, and a full collection, tenths of a second over the whole
    simulated cluster's objects, lands in the busy time of whichever role triggers it).
    ``at_start``: called right before the stream (after the fill and the subscriptions);
    ``settle``: called before that, and before the stats the stream's figures start from."""
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
    if settle is not None:
        settle()
    before = target.stats() if hasattr(target, "topk_many") else None
    if at_start is not None:
        at_start()
    n_updates = rows = nbytes = 0
    paused = not collect and gc.isenabled()
    if paused:
        gc.collect()
        gc.disable()
    try:
        with _BuildTimer() as bt:
            t0, c0 = time.perf_counter(), time.thread_time()
            for a in range(window, window + messages, batch):
                part = _take(msgs, a, min(window + messages, a + batch))
                if pipelined:
                    target.publish(part, wait=False)
                elif updates == "objects":
                    n_updates += len(target.publish(part))
                else:
                    t = target.publish(part, updates=updates)
                    n_updates += len(t.column(0).unique())
                    rows += t.num_rows
                    nbytes += t.nbytes
            if pipelined and updates == "objects":
                n_updates += len(target.flush())
            elif pipelined:
                n_updates += len(target.flush(updates=updates).column(0).unique())
            wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
    finally:
        if paused:
            gc.enable()
    # rows and bytes of the per-call tables (pipelined: the flush's alone, not counted)
    return {"seconds": wall, "cpu_seconds": cpu, "build_seconds": bt.seconds,
            "throughput": messages / wall, "updates": n_updates, "before": before,
            "rows": rows, "bytes": nbytes}


def _delta(after: dict, before: dict | None) -> dict:
    """Stream-phase figures from two Cluster.stats() snapshots."""
    b = before or {"roles": {r: [] for r in after["roles"]}, "published": 0}

    def busy(role, key="cpu_seconds"):
        a = after["roles"][role]
        if role == "coordinator":
            return [a[key] - (b["roles"]["coordinator"][key] if before else 0.0)]
        prev = b["roles"].get(role) or [{key: 0.0}] * len(a)
        return [x[key] - y[key] for x, y in zip(a, prev)]

    def total(role, key):
        a = after["roles"][role]
        prev = b["roles"].get(role) or [{key: 0}] * len(a)
        return sum(x[key] - y.get(key, 0) for x, y in zip(a, prev))

    def coord(key):
        return after["roles"]["coordinator"].get(key, 0) - (b["roles"]["coordinator"].get(key, 0) if before else 0)

    n = after["published"] - b["published"]
    # a broadcasting policy's steps are routed by the coordinator itself (no distributor hop)
    tuples = total("distributor", "tuples_out") + (after["roles"]["coordinator"]["tuples_out"]
                                                   - (b["roles"]["coordinator"]["tuples_out"] if before else 0))
    return {"messages": n,
            "tuples": tuples,
            "communication_cost": tuples / n if n else 0.0,
            "reevaluations": total("partition", "reevaluations"),
            # the only partition's subscription halves: steps, and those run on two threads
            "halves_steps": total("partition", "halves_steps"),
            "halves_threaded_steps": total("partition", "halves_threaded_steps"),
            # partitions holding the window, not in halves: steps, those matched on two threads
            "side_steps": total("partition", "side_steps"),
            "side_threaded_steps": total("partition", "side_threaded_steps"),
            # the coordinator's steps, and those gathered from pipelined calls (Coordinator._gather)
            "steps": coord("steps"),
            "gathered_steps": coord("gathered_steps"),
            "busy": {r: busy(r) for r in ("coordinator", "distributor", "partition", "shard", "aggregator")},
            "busy_wall": {r: busy(r, "busy_seconds")
                          for r in ("coordinator", "distributor", "partition", "shard", "aggregator")}}


def _client_share(r: dict, d: dict, with_build: bool) -> dict:
    """In-process runs: the calling thread's own CPU is charged to the coordinator stage;
    ``with_build``: including the building of ``Update`` objects (the engine's figure then
    includes it too)."""
    roles = sum(sum(v) for v in d["busy"].values())
    own = max(0.0, r["cpu_seconds"] - roles - (0.0 if with_build else r["build_seconds"]))
    busy = dict(d["busy"])
    busy["coordinator"] = [busy["coordinator"][0] + own]
    return busy


def _projected(busy: dict, messages: int) -> dict:
    """One core per role instance: the stage whose slowest instance is busiest bounds it
    (``busy``: CPU seconds per instance, measured in-process, so other load does not count)."""
    stages = {r: max(v) if v else 0.0 for r, v in busy.items()}
    bottleneck = max(stages, key=stages.get)
    t = stages[bottleneck]
    return {"stage_seconds": stages, "bottleneck": bottleneck,
            "throughput": messages / t if t > 0 else float("inf"),
            "partition_balance": (float(np.mean(busy["partition"]) / max(busy["partition"]))
                                  if busy["partition"] and max(busy["partition"]) > 0 else 1.0)}


def _instance_work(after: dict, before: dict | None) -> dict:
    """What each role instance did over a stream (the work its CPU time is for): per partition
    the messages it handled and the subscriptions it holds; the other roles' work follows from
    the partitions' and the stream's (every shard, distributor and aggregator sees what the
    same map routes to it)."""
    prev = (before or {"roles": {}})["roles"].get("partition") or [{"messages": 0}] * len(after["roles"]["partition"])
    return {"partition": [(x["messages"] - y.get("messages", 0), x.get("subscriptions"))
                          for x, y in zip(after["roles"]["partition"], prev)]}


def _least_busy(runs: list[dict]) -> tuple[dict, bool]:
    """Per-instance CPU seconds over several runs of one cluster on one stream: each role
    instance's least, where every run placed the same work on every instance (the map is
    fitted from the same sample, so it does), as the engine reference is the least of its
    runs: what other load on the machine adds to one instance's run only ever slows it, and
    the slowest instance (a maximum over dozens) would take every instance's worst moment.
    Where the work differs between runs, the run whose slowest stage is fastest, whole.
    Returns (busy, whether the work was the same)."""
    if all(x["work"] == runs[0]["work"] for x in runs[1:]):
        roles = runs[0]["busy"]
        return {r: [min(x["busy"][r][i] for x in runs) for i in range(len(v))] for r, v in roles.items()}, True
    best = min(runs, key=lambda x: max(x["stage_seconds"].values()))
    return best["busy"], False


def _inproc_cluster(work, cfg, policy, P, shards, distributors, batch_size, sample_rows, options=None,
                    monitor_every: float | None = None, delivery_interval: float | None = None):
    import rankcast as rc
    # the keyword policy's cost model scales its sample to the subscriptions to come
    opts = {"runtime": "inproc", "subscriptions_estimate": len(work.subs), **(options or {})}
    more = {} if monitor_every is None else {"monitor_every": monitor_every}
    if delivery_interval is not None:
        more["delivery_interval"] = delivery_interval
    aggregators = int(opts.pop("aggregators", 1))
    if policy in ("spatial-first", "keyword-first") and "l1" not in opts:
        opts["l1"] = max(1, int(round(np.sqrt(P))) // 2 * 2) or 1
        while P % opts["l1"]:
            opts["l1"] -= 1
    ccfg = rc.ClusterConfig(engine=cfg, policy=policy, partitions=P, window_shards=shards,
                            distributors=distributors, aggregators=aggregators, batch_size=batch_size,
                            options=opts, **more)
    sample = (_take(work.subs, 0, sample_rows), _take(work.msgs, 0, sample_rows))
    return rc.Cluster.start(ccfg, sample=sample, fresh=True)


def run_cluster_bench(dataset: str = "geonames", subs: int = 20_000, window: int = 20_000,
                      messages: int = 5_000, partitions: int = 32, policies=ALL_POLICIES,
                      scale=(4, 8, 16, 32, 64), scale_policies=("location", "prefix"), batch: int = 1_000,
                      cluster_batch: int = 1_024, shards: int = 2, ray: bool = True,
                      address: str | None = None, seed: int = 0, out: str | None = "out/bench",
                      progress=print, updates: str = "arrow", scale_subs: int | None = SCALE_SUBS,
                      fit_sample: int = 5_000, ray_clusters=DEFAULT_RAY_CLUSTERS,
                      engine_repeats: int = ENGINE_REPEATS, ray_repeats: int = 1,
                      ray_wait_quiet: float = 0.0, scale_repeats: int = SCALE_REPEATS, kinds=(),
                      kind_size: int = 20_000, memory: bool = False) -> dict:
    """Run the three parts (see the module docstring); returns the JSON-able result and
    writes ``cluster.json`` / ``cluster.png`` under ``out``. ``scale_subs``: subscriptions of
    the scaling part (None: ``subs``); ``fit_sample``: rows of the policies' fitting sample;
    ``ray_clusters``: the keys of :data:`RAY_CLUSTERS` that the Ray part runs;
    ``engine_repeats``: runs of each engine reference stream (the fastest CPU time taken);
    ``scale_repeats``: runs of each scaling cluster's stream, each followed by one of the
    engine's (each role instance's least CPU taken, :func:`_least_busy`);
    ``ray_repeats``: runs of each Ray cluster and mode, each against the engine just before it
    (the median ratio reported, every run kept); ``ray_wait_quiet``: seconds each Ray run
    waits at most for the rest of the machine to go quiet. ``kinds``: also the ranked-matching
    and range top-k clusters against their engines (:mod:`rankcast.bench.kinds_cluster`, at
    ``kind_size``), under ``"kinds"``. ``memory``: also the resident memory of the default
    cluster against one engine (:mod:`rankcast.bench.memory`), under ``"memory"``, drawn in
    ``cluster_memory.png``."""
    import rankcast as rc
    from ._common import build_workload

    res: dict = {"machine": {"cpus": os.cpu_count(), "loadavg_start": os.getloadavg()}, "paper": PAPER}
    if memory:
        # first, each side in a fresh process of its own (this one loads nothing for it)
        from .memory import plot_memory, run_memory_bench
        res["memory"] = run_memory_bench(dataset, subs, window, messages, batch, seed, progress)
        if out:
            plot_memory(res["memory"], Path(out) / "cluster_memory.png")
        if not (policies or (scale and scale_policies) or ray or kinds):
            return _write_result(res, out)
    progress(f"workload {dataset}: {subs} subscriptions, window {window}, stream {messages}")
    work = build_workload(dataset, window + messages, subs, seed)
    cfg = rc.EngineConfig(bounds=work.bounds, window=window, vocabulary=work.vocab)
    res["workload"] = {**work.describe(), "window": window, "stream": messages, "batch": batch}

    # load every kernel once (numba caches) so that no run pays for it
    small = build_workload(dataset, 600, 200, seed)
    wcfg = rc.EngineConfig(bounds=small.bounds, window=300, vocabulary=small.vocab)
    for pol, n in (("hash", 2), ("prefix", 2), ("keyword", 16)):   # 16: partitions a step misses
        _drive(_inproc_cluster(small, wcfg, pol, n, 2, 1, 64, 200), small, 300, 300, 100)
    _drive(rc.Engine(wcfg), small, 300, 300, 100, pipelined=False)
    forms = (updates,) if isinstance(updates, str) else tuple(updates)
    for form in forms:              # the runs' forms
        _drive(rc.Engine(wcfg), small, 300, 300, 100, pipelined=False, updates=form)

    # single-process engine: the reference throughput
    res["engine"], same_topk = _engine_reference(work, cfg, window, messages, batch, seed, progress,
                                                 engine_repeats)

    # 1. policies at `partitions`
    res["partitions"] = partitions
    res["policies"] = {}
    for pol in policies:
        cl = _inproc_cluster(work, cfg, pol, partitions, shards, 1, cluster_batch, min(fit_sample, subs))
        r = _drive(cl, work, window, messages, batch, pipelined=False)
        st = cl.stats()
        d = _delta(st, r["before"])
        res["policies"][pol] = {"replication_ratio": st["replication_ratio"],
                                "communication_cost": d["communication_cost"],
                                "reallocations": st["reallocations"],
                                "reevaluations": d["reevaluations"],
                                "topk_equal_engine": same_topk(cl),
                                "projected": _projected(_client_share(r, d, False), messages)}
        progress(f"{pol} x{partitions}: replication {st['replication_ratio']:.2f}, "
                 f"communication {d['communication_cost']:.2f} tuples/msg")
    if "hash" in res["policies"]:
        h = res["policies"]["hash"]["communication_cost"]
        for pol, v in res["policies"].items():
            v["communication_vs_hash"] = 1.0 - v["communication_cost"] / h if h else 0.0

    # 2. projected scale-out, at `scale_subs` subscriptions against an engine of the same size
    ssubs = scale_subs or subs
    res["scaling_workload"] = {"subscriptions": ssubs, "fit_sample": min(fit_sample, ssubs),
                               "monitor_every": 0.0}
    if ssubs != subs and scale_policies and scale:
        progress(f"scaling workload: {ssubs} subscriptions")
        swork = build_workload(dataset, window + messages, ssubs, seed)
        scfg = rc.EngineConfig(bounds=swork.bounds, window=window, vocabulary=swork.vocab)
        res["scaling_engine"], s_same = _engine_reference(swork, scfg, window, messages, batch, seed, progress,
                                                          engine_repeats)
    else:
        swork, scfg, s_same = work, cfg, same_topk
        res["scaling_engine"] = dict(res["engine"], repeats=list(res["engine"]["repeats"]))
    s_eng = res["scaling_engine"]
    res["scaling"] = {}
    for pol in scale_policies:
        pts = res["scaling"][pol] = []
        for P in scale:
            S, D, A = max(shards, P // 4), max(1, P // 16), max(1, P // 8)
            pt = {"partitions": P, "window_shards": S, "distributors": D, "aggregators": A}

            def start():
                # load monitoring off: in process, the subscribe phase of a large run outlasts
                # its period, and a rebalance would land inside the measured stream
                return _inproc_cluster(swork, scfg, pol, P, S, D, cluster_batch, min(fit_sample, ssubs),
                                       options={"aggregators": A}, monitor_every=0.0,
                                       delivery_interval=SCALE_DELIVERY)
            # pipelined stream: the roles' own capacity, next to the engine's processing, run
            # `scale_repeats` times, each followed by the engine again: the machine's speed
            # drifts between the first engine runs and this cluster's; every speed-up is taken
            # against the fastest engine run of the whole bench (below), and each role instance
            # counts with its least CPU over the cluster's runs (:func:`_least_busy`)
            runs = []
            for _ in range(max(1, scale_repeats)):
                cl = start()
                r = _drive(cl, swork, window, messages, batch, collect=False)
                st = cl.stats()
                busy = _delta(st, r["before"])["busy"]
                one = _projected(busy, messages)
                runs.append({"busy": busy, "work": _instance_work(st, r["before"]),
                             "topk_equal_engine": s_same(cl), "projected_throughput": one["throughput"],
                             "bottleneck": one["bottleneck"], "partition_balance": one["partition_balance"],
                             "stage_seconds": one["stage_seconds"]})
                cl.shutdown()
                pt["engine_after"] = _engine_run(swork, scfg, window, messages, batch)
                s_eng["repeats"].append(pt["engine_after"])
            least, same_work = _least_busy(runs)
            pr = _projected(least, messages)
            pt.update(topk_equal_engine=all(x["topk_equal_engine"] for x in runs),
                      projected_throughput=pr["throughput"], bottleneck=pr["bottleneck"],
                      partition_balance=pr["partition_balance"], stage_seconds=pr["stage_seconds"],
                      instances_same_work=same_work,
                      runs=[{k: v for k, v in x.items() if k not in ("busy", "work")} for x in runs])
            so_far = pr["throughput"] / _best_processing(s_eng, messages)
            # per-call updates as the engine returns them, the caller's work (validation,
            # building Update objects) charged to the serial front stage
            cl = start()
            r = _drive(cl, swork, window, messages, batch, pipelined=False, collect=False)
            e2e = _projected(_client_share(r, _delta(cl.stats(), r["before"]), True), messages)
            pt["per_call"] = {"projected_throughput": e2e["throughput"], "bottleneck": e2e["bottleneck"],
                              "speedup_vs_engine": e2e["throughput"] / s_eng["cpu_throughput"],
                              "stage_seconds": e2e["stage_seconds"], "topk_equal_engine": s_same(cl)}
            cl.shutdown()
            pts.append(pt)
            progress(f"{pol} x{P}: projected {pt['projected_throughput']:.0f} msg/s "
                     f"({so_far:.1f}x so far, bottleneck {pr['bottleneck']}; engine right after "
                     f"{messages / pt['engine_after']['processing_cpu_seconds']:.0f} per CPU second); per call "
                     f"{pt['per_call']['speedup_vs_engine']:.1f}x (bottleneck {e2e['bottleneck']})")
    if res["scaling"]:
        # against the fastest engine run of all (the first ones and one after each cluster)
        best = _best_processing(s_eng, messages)
        best_cpu = messages / min(x["cpu_seconds"] for x in s_eng["repeats"])
        s_eng["processing_cpu_throughput"], s_eng["cpu_throughput"] = best, best_cpu
        for pol, pts in res["scaling"].items():
            for pt in pts:
                pt["speedup_vs_engine"] = pt["projected_throughput"] / best
                pt["per_call"]["speedup_vs_engine"] = pt["per_call"]["projected_throughput"] / best_cpu
        progress("projected speed-up against the fastest of "
                 f"{len(s_eng['repeats'])} engine runs ({best:.0f} msg per CPU second): "
                 + ", ".join(f"{pol} x{pt['partitions']} {pt['speedup_vs_engine']:.1f}x"
                             for pol, pts in res["scaling"].items() for pt in pts))

    # 3. Ray overhead, real wall clock
    if ray:
        res["ray"] = _ray_overhead(work, cfg, window, messages, batch, cluster_batch, address, progress,
                                   same_topk, forms, ray_clusters, ray_repeats, ray_wait_quiet)
        if len(forms) > 1:
            res["updates_forms"] = _forms_summary(res["ray"], forms, ray_clusters, messages, progress)

    if kinds:
        from .kinds_cluster import run_kind_clusters
        res["kinds"] = run_kind_clusters(kinds, updates="objects" if forms[0] == "objects" else "arrow",
                                         size=kind_size, seed=seed, address=address, progress=progress)

    return _write_result(res, out, plot=True)


def _write_result(res: dict, out: str | None, plot: bool = False) -> dict:
    """``cluster.json`` (and ``cluster.png``, ``plot``) under ``out``; returns ``res``."""
    res["machine"]["loadavg_end"] = os.getloadavg()
    if out:
        outdir = Path(out)
        outdir.mkdir(parents=True, exist_ok=True)
        res.setdefault("hardware", hardware())
        (outdir / "cluster.json").write_text(json.dumps(res, indent=2, default=float))
        if plot:
            _plot(res, outdir / "cluster.png")
    return res


def _run_figures(x: dict) -> dict:
    """An engine run's (``_drive``'s result) seconds and CPU seconds, with and without building
    Update objects."""
    return {"seconds": x["seconds"], "cpu_seconds": x["cpu_seconds"],
            "processing_cpu_seconds": x["cpu_seconds"] - x["build_seconds"]}


def _engine_run(work, cfg, window, messages, batch) -> dict:
    """One run of the engine reference stream on a fresh engine: :func:`_run_figures`."""
    import rankcast as rc
    return _run_figures(_drive(rc.Engine(cfg), work, window, messages, batch, pipelined=False, collect=False))


def _best_processing(eng: dict, messages: int) -> float:
    """Messages per CPU second of the fastest of the engine's runs so far (processing, without
    building Update objects)."""
    return messages / min(x["processing_cpu_seconds"] for x in eng["repeats"])


def _engine_reference(work, cfg, window, messages, batch, seed, progress, repeats: int = ENGINE_REPEATS):
    """The single-process engine on ``work``: its figures, and a check that a cluster's
    top-k equals the engine's for a sample of 300 subscriptions. The stream runs ``repeats``
    times, each on a fresh engine, and each CPU figure is the least of them (the engine's
    fastest: what other load on the machine adds to a run, page reclaim, a busy sibling
    core, only ever slows it; a single run once read half its usual rate)."""
    import rankcast as rc
    runs = []
    for _ in range(max(1, repeats)):
        eng = rc.Engine(cfg)
        runs.append(_drive(eng, work, window, messages, batch, pipelined=False, collect=False))
    reps = [_run_figures(x) for x in runs]
    cpu = min(x["cpu_seconds"] for x in reps)
    r = min(runs, key=lambda x: x["seconds"])
    out = {"subscriptions": len(work.subs), "throughput": r["throughput"], "seconds": r["seconds"],
           "cpu_seconds": cpu, "update_objects_cpu_seconds": min(x["build_seconds"] for x in runs),
           "cpu_throughput": messages / cpu, "updates": r["updates"], "repeats": reps}
    out["processing_cpu_throughput"] = _best_processing(out, messages)
    progress(f"engine ({len(work.subs)} subscriptions, best of {len(runs)}): {r['throughput']:.0f} msg/s; "
             f"per CPU second {messages / cpu:.0f} ({out['processing_cpu_throughput']:.0f} without building Update objects; "
             f"runs: {', '.join(str(round(messages / x['processing_cpu_seconds'])) for x in reps)})")
    rng = np.random.default_rng(seed)
    check_ids = np.sort(rng.choice(work.subs.ids, size=min(300, len(work.subs)), replace=False)).tolist()
    want = {i: eng.topk(i) for i in check_ids}

    def same_topk(cl) -> bool:
        return cl.topk_many(check_ids) == want
    return out, same_topk


def _machine_busy() -> float | None:
    """CPU seconds the whole machine has spent busy since boot, every CPU and every process
    (``/proc/stat``: user, nice, system, irq, softirq, steal); None where there is no such file."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf("SC_CLK_TCK")


class _OtherCPU:
    """The CPU the rest of the machine took over a timed stretch, in cores (CPU seconds per
    wall second): the machine's busy time less that of ``ours`` (a callable: our processes'
    CPU seconds so far). On a machine shared with other sessions this is what decides a
    run: Linux's autogroups give every session (a client and every Ray process it started
    are one) an equal share of the cores, so one other busy session leaves the whole cluster
    about one core, as much as the engine's one thread gets."""

    def __init__(self, ours, machine=None, clock=time.perf_counter):
        self.ours, self.machine, self.clock = ours, machine or _machine_busy, clock
        self.t0 = self.m0 = self.o0 = None

    def start(self) -> None:
        self.t0, self.m0, self.o0 = self.clock(), self.machine(), self.ours()

    def cores(self) -> float | None:
        m1, o1, wall = self.machine(), self.ours(), self.clock() - self.t0
        if self.m0 is None or m1 is None or wall <= 0:
            return None
        return max(0.0, (m1 - self.m0) - (o1 - self.o0)) / wall


def _own_cpu() -> float:
    t = os.times()
    return t.user + t.system


class _ProcessCPU:
    """CPU time (user + system) of every process of a Ray cluster over a stream: the roles'
    (by their pids), this client's, and Ray's own (raylet, GCS, other workers: the
    processes this one started, when it started Ray). Unlike the roles' busy time, it
    includes what Ray does in a role's process outside its methods (serialising arguments
    and results, its own threads)."""

    def __init__(self, pids: dict[str, list[int]]):
        import psutil
        self.me = psutil.Process()
        self.label = {pid: f"{role}{i}" for role, ps in pids.items() for i, pid in enumerate(ps)}
        self.label[self.me.pid] = "client"
        self.t0: dict[int, tuple[str, float]] = {}

    def _procs(self) -> dict:
        """pid -> psutil.Process: this process's children and every labelled process."""
        import psutil
        procs = {p.pid: p for p in self.me.children(recursive=True)}
        for pid in self.label:
            if pid not in procs:
                try:
                    procs[pid] = psutil.Process(pid)
                except psutil.Error:
                    pass
        return procs

    def _now(self) -> dict[int, tuple[str, float]]:
        import psutil
        out = {}
        procs = self._procs()
        for pid, p in procs.items():
            try:
                t = p.cpu_times()
                out[pid] = (self.label.get(pid) or f"ray: {p.name()}", t.user + t.system)
            except psutil.Error:
                pass
        return out

    def start(self) -> None:
        self.t0 = self._now()
        self.other = _OtherCPU(lambda: sum(c for _, c in self._now().values()))
        self.other.start()

    def rss_mib(self) -> dict[str, float]:
        """Resident memory (MiB) now by process label (Ray's own processes summed by name)."""
        import psutil
        out: dict[str, float] = {}
        procs = self._procs()
        for pid, p in procs.items():
            try:
                label = self.label.get(pid) or f"ray: {p.name()}"
                out[label] = round(out.get(label, 0.0) + p.memory_info().rss / 2 ** 20, 1)
            except psutil.Error:
                pass
        return out

    def seconds(self) -> dict[str, float]:
        """CPU seconds since :meth:`start` by process label (Ray's own processes by name)."""
        out: dict[str, float] = {}
        for pid, (label, c1) in self._now().items():
            out[label] = out.get(label, 0.0) + c1 - self.t0.get(pid, (label, 0.0))[1]
        return out


def _cpu_per_message(busy: dict, procs: dict, client_thread: float, engine_cpu: float, n: int) -> dict:
    """The CPU accounting of one Ray run, in microseconds per message: each role's busy CPU
    (its methods' own thread time), each process's CPU (the role's process, the client's,
    Ray's own), their total, and the engine's, measured right before."""
    us = 1e6 / n
    total = sum(procs.values())
    return {"engine": engine_cpu * us,
            "roles_busy": {r: [round(x * us, 2) for x in v] for r, v in busy.items() if v and max(v) > 0},
            "client_thread": client_thread * us,
            "processes": {k: round(v * us, 2) for k, v in sorted(procs.items(), key=lambda kv: -kv[1]) if v > 0},
            "total": total * us,
            "total_vs_engine": total / engine_cpu if engine_cpu else 0.0}


SETTLE_CHECKPOINT = True    # a checkpoint right before each Ray run's timed stream (see _ray_run)
# A run is quiet where the rest of the machine took at most this many cores during both its
# engine stream and its cluster stream (_OtherCPU): one other busy session halves what a
# cluster of several processes gets, not what the engine's one thread gets
QUIET_OTHER_CORES = 0.25


def _quiet(run: dict) -> bool:
    oc = run.get("other_cores") or {}
    return all(v is not None and v <= QUIET_OTHER_CORES for v in (oc.get("engine"), oc.get("cluster")))


def _wait_quiet(seconds: float, progress, probe: float = 1.0) -> float | None:
    """Wait, at most ``seconds``, for a probe of ``probe`` seconds in which the rest of the
    machine took at most QUIET_OTHER_CORES; the cores of the last probe (None: not measured)."""
    deadline = time.monotonic() + seconds
    cores = None
    while seconds > 0:
        o = _OtherCPU(_own_cpu)
        o.start()
        time.sleep(probe)
        cores = o.cores()
        if cores is None or cores <= QUIET_OTHER_CORES or time.monotonic() >= deadline:
            break
    if cores is not None and cores > QUIET_OTHER_CORES:
        progress(f"the rest of the machine still takes {cores:.2f} cores: running anyway")
    return cores


def _median_run(runs: list[dict]) -> dict:
    return sorted(runs, key=lambda r: r["vs_engine"])[(len(runs) - 1) // 2]


def _forms_label(label: str, form: str, forms) -> str:
    """The key of a Ray cluster's row: its label, with the updates form when several run."""
    return label if len(forms) == 1 else f"{label}, {form}"


def _forms_summary(ray: dict, forms, clusters, messages: int, progress) -> dict:
    """Per cluster and mode: each form's throughput (median run), against the first form's;
    per call, each form's update rows and bytes per message."""
    out = {}
    for label in (RAY_CLUSTERS[c][0] for c in clusters):
        row = out[label] = {}
        for mode in ("per_call", "streamed"):
            got = {f: ray[_forms_label(label, f, forms)][mode] for f in forms}
            base = got[forms[0]]["throughput"]
            row[mode] = {f: {"throughput": g["throughput"], "vs_" + forms[0]: g["throughput"] / base,
                             "cpu_us_per_message": g["cpu_us_per_message"]["total"],
                             **({"rows_per_message": g["rows"] / messages, "bytes_per_message": g["bytes"] / messages}
                                if mode == "per_call" else {})}
                         for f, g in got.items()}
            progress(f"ray {label}, {mode}: " + ", ".join(
                f"{f} {v['throughput']:.0f} msg/s ({v['vs_' + forms[0]]:.2f}x"
                + (f"; {v['rows_per_message']:.0f} rows, {v['bytes_per_message'] / 1e3:.1f} kB per message"
                   if "rows_per_message" in v else "") + ")" for f, v in row[mode].items()))
    return out


def _ray_overhead(work, cfg, window, messages, batch, cluster_batch, address, progress, same_topk,
                  updates=("arrow",), clusters=DEFAULT_RAY_CLUSTERS, repeats: int = 1,
                  wait_quiet: float = 0.0) -> dict:
    """Each cluster in two modes, each ``repeats`` times against the engine measured right
    before it: ``per_call`` publishes like the engine (``publish(wait=True)`` per batch, every
    call's updates returned in the ``updates`` form), so every call pays the roles' round
    trips; ``streamed`` publishes the same batches with ``wait=False`` and takes the updates
    with one ``flush`` at the end (every call's changes are still computed and delivered to
    listeners at the cuts; the flush returns each subscription's latest list), so the roles
    work side by side. ``wait_quiet``: seconds each run waits at most for the rest of the
    machine to go quiet (:func:`_wait_quiet`). A mode's figures are those of its median run
    by ratio among the quiet runs (:data:`QUIET_OTHER_CORES`; all runs where none is quiet:
    ``quiet_runs`` 0), with ``median_all_runs``; ``runs`` keeps every run's ratio, both
    throughputs and the cores the rest of the machine took. ``updates``: the forms, each run
    in turn for every repeat of a cluster and mode (side by side), a row per form
    (:func:`_forms_label`)."""
    import ray as _ray

    if not _ray.is_initialized():
        if address:
            _ray.init(address=address, log_to_driver=False)
        else:
            _ray.init(**local_ray_options(log_to_driver=False))
    forms = (updates,) if isinstance(updates, str) else tuple(updates)
    out = {}
    for label, policy, P, options in (RAY_CLUSTERS[c] for c in clusters):
        rows = {f: {"policy": policy, "partitions": P, "updates_form": f} for f in forms}
        for f in forms:
            out[_forms_label(label, f, forms)] = rows[f]
        for mode in ("per_call", "streamed"):
            by_form: dict = {f: [] for f in forms}
            for _ in range(max(1, repeats)):
                for f in forms:
                    _wait_quiet(wait_quiet, progress)
                    by_form[f].append(_ray_run(work, cfg, window, messages, batch, cluster_batch, address,
                                               same_topk, f, _forms_label(label, f, forms), policy, P, options,
                                               mode, progress))
            for f, runs in by_form.items():
                _ray_row(rows[f], mode, runs, _forms_label(label, f, forms), progress)
    for row in out.values():
        row["vs_engine"] = row["per_call"]["vs_engine"]
    return out


def _ray_row(row: dict, mode: str, runs: list[dict], label: str, progress) -> None:
    """A cluster's figures in one mode from its runs: the median run by ratio among the quiet
    ones (all where none is quiet), and every run's ratio."""
    quiet = [r for r in runs if _quiet(r)]
    med = _median_run(quiet or runs)
    row[mode] = {**med, "quiet_runs": len(quiet),
                 "median_all_runs": _median_run(runs)["vs_engine"],
                 "runs": [{k: r[k] for k in ("vs_engine", "throughput", "engine_throughput",
                                             "halves_steps", "halves_threaded_steps", "steps",
                                             "gathered_steps", "other_cores", "checkpoints")}
                          for r in runs]}
    if len(runs) > 1:
        each = ", ".join(f"{r['vs_engine']:.2f}x" + ("" if _quiet(r) else " (busy)") for r in runs)
        progress(f"ray {label}, {mode}: median of {len(quiet) or len(runs)} "
                 f"{'quiet ' if quiet else ''}runs {med['vs_engine']:.2f}x the engine "
                 f"(runs {each}; median of all {row[mode]['median_all_runs']:.2f}x)")


def _ray_run(work, cfg, window, messages, batch, cluster_batch, address, same_topk, updates,
             label, policy, P, options, mode, progress) -> dict:
    """One run of a cluster in one mode, after the engine's run right before it, so that both
    see the same load from other processes."""
    import rankcast as rc
    other = _OtherCPU(_own_cpu)
    er = _drive(rc.Engine(cfg), work, window, messages, batch, pipelined=False, updates=updates,
                at_start=other.start)
    e, e_other = er["throughput"], other.cores()
    options = dict(options)
    fields = {k: options.pop(k) for k in ("state_dir",) if k in options}     # ClusterConfig's own
    ccfg = rc.ClusterConfig(engine=cfg, policy=policy, partitions=P, window_shards=1, distributors=1,
                            aggregators=1, batch_size=cluster_batch, actor_cpus=0.01,
                            # the process id in the name: two benches at once keep their state apart
                            name=f"rankcast-bench-{P}-{policy}-{os.getpid()}", options=options,
                            updates="diff" if updates == "diff" else "lists", **fields)
    cl = rc.Cluster.start(ccfg, address=address, fresh=True,
                          sample=(_take(work.subs, 0, 5000), _take(work.msgs, 0, 5000)))
    try:
        # kernels loaded before the timings, as the engine's already are
        procs = _ProcessCPU(cl.warm())
        # a durable cluster checkpoints every checkpoint_every seconds (5): the fill and the
        # subscriptions take about that long, so one used to begin inside the timed stream
        # in some runs and not in others (its snapshots beside the steps: 1,045 msg/s once,
        # a loaded run). One taken right before the stream leaves the stream none
        settle = cl.checkpoint if SETTLE_CHECKPOINT and cl.stats()["recovery"]["durable"] else None
        r = _drive(cl, work, window, messages, batch, pipelined=mode == "streamed", updates=updates,
                   at_start=procs.start, settle=settle)
        c_other = procs.other.cores()
        cpu = procs.seconds()
        rss = procs.rss_mib()
        after = cl.stats()
        d = _delta(after, r["before"])
        run = {"throughput": r["throughput"], "engine_throughput": e,
               "vs_engine": r["throughput"] / e, "seconds": r["seconds"], "updates": r["updates"],
               "rows": r["rows"], "bytes": r["bytes"],
               "busy": d["busy_wall"], "topk_equal_engine": same_topk(cl),
               "halves_steps": d["halves_steps"], "halves_threaded_steps": d["halves_threaded_steps"],
               "side_steps": d["side_steps"], "side_threaded_steps": d["side_threaded_steps"],
               "steps": d["steps"], "gathered_steps": d["gathered_steps"],
               # checkpoints begun inside the timed stream (a durable cluster's, every
               # checkpoint_every seconds: its snapshots run beside the steps)
               "checkpoints": after["recovery"]["checkpoints"] - r["before"]["recovery"]["checkpoints"],
               # cores the rest of the machine took during the engine's stream and the cluster's
               "other_cores": {"engine": e_other, "cluster": c_other},
               "cpu_us_per_message": _cpu_per_message(d["busy"], cpu, r["cpu_seconds"],
                                                      er["cpu_seconds"], messages),
               # resident memory of each process at the stream's end (the client's includes
               # the engine of the run before and the workload)
               "rss_mib": rss}
        c = run["cpu_us_per_message"]
        oc = run["other_cores"]
        progress(f"ray {label}, {mode}: {r['throughput']:.0f} msg/s (engine just before: {e:.0f}); "
                 f"CPU {c['total']:.0f} us/msg in all against the engine's {c['engine']:.0f}"
                 + ("" if None in oc.values() else
                    f"; other processes {oc['engine']:.2f} / {oc['cluster']:.2f} cores (engine / cluster)")
                 + (f"; halves on two threads in {d['halves_threaded_steps']:.0f} of {d['halves_steps']:.0f} steps"
                    if d["halves_steps"] else "")
                 + f"; {d['steps']:.0f} steps, {d['gathered_steps']:.0f} gathered from pipelined calls")
        return run
    finally:
        cl.shutdown()


def add_arguments(p) -> None:
    p.add_argument("--dataset", default="geonames", choices=["geonames", "tweets", "yelp", "dense"])
    p.add_argument("--subs", type=int, default=20_000)
    p.add_argument("--window", type=int, default=20_000)
    p.add_argument("--messages", type=int, default=5_000)
    p.add_argument("--partitions", type=int, default=32, help="partitions of the policy comparison")
    p.add_argument("--policies", nargs="*", default=list(ALL_POLICIES))
    p.add_argument("--scale", type=int, nargs="*", default=[4, 8, 16, 32, 64])
    p.add_argument("--scale-policies", nargs="*", default=["location", "prefix"])
    p.add_argument("--scale-subs", type=int, default=SCALE_SUBS,
                   help="subscriptions of the scaling part (0: --subs, the size before it had its own)")
    p.add_argument("--fit-sample", type=int, default=5_000, help="rows of the policies' fitting sample")
    p.add_argument("--batch", type=int, default=1_000, help="messages per publish call")
    p.add_argument("--no-ray", action="store_true", help="skip the real Ray overhead runs")
    p.add_argument("--engine-repeats", type=int, default=ENGINE_REPEATS,
                   help="runs of the engine reference stream of the policy and scaling parts "
                        "(each CPU figure: the least of them)")
    p.add_argument("--scale-repeats", type=int, default=SCALE_REPEATS,
                   help="runs of each scaling cluster's pipelined stream, each followed by an engine run "
                        "(each role instance's CPU: the least of its runs)")
    p.add_argument("--updates", nargs="+", default=["arrow"], choices=["objects", "arrow", "diff"],
                   help="what each publish returns in the Ray runs (engine and cluster alike; diff: the "
                        "cluster's roles report diffs); several forms run side by side, each against the first")
    p.add_argument("--ray-clusters", nargs="*", default=list(DEFAULT_RAY_CLUSTERS), choices=list(RAY_CLUSTERS),
                   help="the clusters of the Ray runs (1-shard, 2-shard: partitions with a window "
                        "shard of their own, the layout before partitions held the window)")
    p.add_argument("--ray-repeats", type=int, default=1,
                   help="runs of each Ray cluster and mode, each against the engine right before it "
                        "(the median ratio reported, every run kept under 'runs')")
    p.add_argument("--ray-wait-quiet", type=float, default=0.0,
                   help="seconds each Ray run waits at most for the rest of the machine to take at most "
                        f"{QUIET_OTHER_CORES} cores (other sessions' load halves what a cluster gets)")
    p.add_argument("--kinds", nargs="*", default=[], choices=["matching", "matching-paper", "range"],
                   help="also the ranked-matching and range top-k clusters of 2 partitions on Ray against "
                        "rc.Matcher and rc.RangeEngine, per call and streamed (rankcast.bench.kinds_cluster; "
                        "matching-paper: the ranked-matching paper's workload, ten times --kind-size expressions)")
    p.add_argument("--kind-size", type=int, default=20_000,
                   help="expressions (matching) or objects (range) of the --kinds workloads")
    p.add_argument("--memory", action="store_true",
                   help="also the resident memory of the default cluster (hash, 2 partitions, durable state) "
                        "against one engine on --subs and --window, every process measured "
                        "(rankcast.bench.memory; with --policies --scale --no-ray: that alone)")
    p.add_argument("--address", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="out/bench")


def main(args) -> int:
    res = run_cluster_bench(dataset=args.dataset, subs=args.subs, window=args.window,
                            messages=args.messages, partitions=args.partitions,
                            policies=tuple(args.policies), scale=tuple(args.scale),
                            scale_policies=tuple(args.scale_policies), batch=args.batch,
                            ray=not args.no_ray, address=args.address, seed=args.seed, out=args.out,
                            progress=lambda m: print(m, file=sys.stderr), updates=tuple(args.updates),
                            scale_subs=args.scale_subs or None, fit_sample=args.fit_sample,
                            ray_clusters=tuple(args.ray_clusters), engine_repeats=args.engine_repeats,
                            ray_repeats=args.ray_repeats, ray_wait_quiet=args.ray_wait_quiet,
                            scale_repeats=args.scale_repeats, kinds=tuple(args.kinds),
                            kind_size=args.kind_size, memory=args.memory)
    print(json.dumps(res, indent=2, default=float))
    return 0


def _plot(res: dict, path: Path) -> None:
    """One panel per part that ran: the policies, the projected scale-out, the clusters on
    Ray against their engines."""
    plt = pyplot("rankcast bench cluster")

    rows = {**res.get("ray", {}), **{f"{k} x{v['partitions']}": v for k, v in res.get("kinds", {}).items()}}
    panels = [name for name, has in (("policies", res.get("policies")), ("scaling", any(res.get("scaling", {}).values())),
                                     ("ray", rows)) if has]
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(16 * len(panels) / 3 + 1, 4.5), squeeze=False)
    ax = dict(zip(panels, axes[0]))
    if "policies" in ax:
        pols = list(res["policies"])
        rep = [res["policies"][p]["replication_ratio"] for p in pols]
        com = [res["policies"][p]["communication_cost"] for p in pols]
        x = np.arange(len(pols))
        a0 = ax["policies"]
        a0.bar(x - 0.2, rep, 0.4, label="replication ratio")
        a0.bar(x + 0.2, com, 0.4, label="tuples / message")
        a0.set_xticks(x, pols, rotation=20)
        a0.set_yscale("log")
        a0.set_title(f"policies at {res['partitions']} partitions (Table 5, Fig. 21)")
        a0.legend()
    if "scaling" in ax:
        a1 = ax["scaling"]
        for pol, pts in res["scaling"].items():
            a1.plot([p["partitions"] for p in pts], [p["speedup_vs_engine"] for p in pts], "o-",
                    label=f"{pol}, pipelined")
            a1.plot([p["partitions"] for p in pts], [p["per_call"]["speedup_vs_engine"] for p in pts], "s--",
                    label=f"{pol}, per call")
        a1.axhspan(26, 49, color="tab:green", alpha=0.15, label="paper: 26-49x")
        a1.set_xscale("log", base=2)
        a1.set_xlabel("subscription partitions (one core each)")
        a1.set_ylabel("speed-up over the engine")
        a1.legend()
        a1.set_title("scale-out from measured busy time")
    if "ray" in ax:
        a2 = ax["ray"]
        labels = list(rows)
        x = np.arange(len(labels))
        for dx, mode in ((-0.2, "per_call"), (0.2, "streamed")):
            a2.bar(x + dx, [v[mode]["vs_engine"] for v in rows.values()], 0.4, label=mode.replace("_", " "))
        a2.set_xticks(x, labels)
        a2.legend()
        a2.axhline(1.0, color="k", lw=0.8)
        a2.set_ylabel("throughput / engine's (measured just before)")
        a2.set_title(f"Ray, real wall clock\n{hardware_label()}", fontsize=9)
        for lab in a2.get_xticklabels():
            lab.set_rotation(15)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)

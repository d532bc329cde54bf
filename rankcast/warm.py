"""``rankcast warm``: compile every kind's kernels into numba's cache once (what ``make``
runs after installing), so that the first engine, cluster role or demo step loads them in
milliseconds instead of compiling them for seconds.

Each job runs a tiny workload of one kind through its engine and its roles in this process
(the in-process cluster runs the code a cluster's roles run on Ray, and each role's own
warm-up, which ``Cluster.warm`` runs on Ray), in every input and output form, so that numba
compiles each kernel for the argument types real calls give it;
``cache=True`` writes them under the cache directory of this source version
(:mod:`rankcast.common.jitcache`), which processes started later (Ray workers included)
read. The jobs run in parallel processes, one per core."""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable

import numpy as np
import pyarrow as pa

__all__ = ["JOBS", "warm", "add_arguments", "main"]

_B = (0.0, 0.0, 10.0, 10.0)
_WORDS = ["cafe", "tea", "bar", "park", "museum", "bakery", "river", "market", "bridge", "tower"]


def _texts(rng, n: int) -> list[str]:
    return [" ".join(rng.choice(_WORDS, int(rng.integers(1, 4)), replace=False)) for _ in range(n)]


def _spatial_tables(rng, n_subs: int, n_msgs: int, t: bool = False):
    subs = pa.table({"id": np.arange(n_subs, dtype=np.int64), "x": rng.uniform(0, 10, n_subs),
                     "y": rng.uniform(0, 10, n_subs), "text": _texts(rng, n_subs),
                     "k": rng.integers(1, 6, n_subs).astype(np.int64), "alpha": rng.random(n_subs)})
    cols = {"id": np.arange(10_000, 10_000 + n_msgs, dtype=np.int64), "x": rng.uniform(0, 10, n_msgs),
            "y": rng.uniform(0, 10, n_msgs), "text": _texts(rng, n_msgs)}
    if t:
        cols["t"] = np.arange(n_msgs, dtype=np.float64)
    return subs, pa.table(cols)


def _forms(x) -> tuple[str, ...]:
    """The updates forms ``x`` serves, each asked for once: an engine's include diffs; a
    cluster's are those of what its roles report (``ClusterConfig.updates``)."""
    if hasattr(x, "KIND"):
        return ("objects", "arrow", "none", "diff")
    return ("diff", "none") if x.config().updates == "diff" else ("objects", "arrow", "none")


def _engine_calls(x, subs, msgs, step: int) -> None:
    """subscribe, publish in every updates form, unsubscribe, publish again: the calls every kind has."""
    import rankcast as rc

    rows = subs.to_pylist()
    half = len(rows) // 2
    x.subscribe(subs.slice(0, half))
    x.subscribe([rc.Subscription(r["id"], r["x"], r["y"], text=r["text"], k=r["k"], alpha=r["alpha"])
                 for r in rows[half:]])
    forms = _forms(x)
    for i, a in enumerate(range(0, msgs.num_rows, step)):
        x.publish(msgs.slice(a, step), updates=forms[i % len(forms)])
    x.unsubscribe(subs.column("id").to_numpy()[::3].tolist())
    last = msgs.slice(msgs.num_rows - step, step).to_pylist()
    x.publish([rc.Message(r["id"] + 100_000, r["x"], r["y"], text=r["text"],
                          t=None if r.get("t") is None else r["t"] + msgs.num_rows) for r in last])
    for sid in subs.column("id").to_numpy()[1:6].tolist():
        if sid % 3:                 # still subscribed
            x.topk(sid)


def spatial() -> None:
    """The spatial-keyword kind: a synthetic dataset as the benchmarks and the demo make one,
    rc.Engine on count and time windows (large enough for the window to wrap and the tables
    to compact), and its cluster roles under every placement policy."""
    import rankcast as rc
    from rankcast.config import POLICIES
    from rankcast.ingest import datasets

    bounds, msgs, subs, vocab = datasets.dataset("tweets", 6000, 2000, seed=1)
    for cfg in (rc.EngineConfig(bounds=bounds, window=1500, vocabulary=vocab), rc.EngineConfig(bounds=bounds, window=1500)):
        _engine_calls(rc.Engine(cfg), subs, msgs, 1000)
    rng = np.random.default_rng(1)
    tsubs, tmsgs = _spatial_tables(rng, 300, 800, t=True)
    _engine_calls(rc.Engine(rc.EngineConfig(bounds=_B, window_seconds=100.0)), tsubs, tmsgs, 200)
    csubs, cmsgs = subs.slice(0, 600), msgs.slice(0, 1200)
    # every policy reporting whole lists; diffs in each layout (solo, direct, replicated)
    for policy, updates in [(p, "lists") for p in POLICIES] + [("hash", "diff"), ("location", "diff"),
                                                             ("prefix", "diff")]:
        ccfg = rc.ClusterConfig(engine=rc.EngineConfig(bounds=bounds, window=400, vocabulary=vocab), policy=policy,
                                partitions=2, window_shards=2, batch_size=100, state_dir=None, updates=updates,
                                options={"runtime": "inproc"})
        cl = rc.Cluster.start(ccfg, sample=(csubs, cmsgs))
        try:
            cl.warm()                   # the roles' own warm-ups (kernels a stream may reach late)
            _engine_calls(cl, csubs, cmsgs, 300)
            more = subs.slice(1000, 100)
            cl.load_subscriptions(more, progress=False)
            cl.replay(msgs.slice(2000, 600), batch_rows=200, progress=False)
        finally:
            cl.shutdown()


def _expressions(rng, start: int, n: int):
    from rankcast.kinds.matching.warmup import random_expressions
    return random_expressions(rng, start, n)


def _events(rng, start: int, n: int):
    from rankcast.kinds.matching.warmup import random_events
    return random_events(rng, start, n)


def _match_calls(x, rng, n: int = 300) -> None:
    exprs = _expressions(rng, 0, n)
    x.subscribe(exprs[: n // 2])
    x.subscribe(exprs[n // 2:])
    for i, form in enumerate(_forms(x)):
        x.publish(_events(rng, 100 * i, 40), updates=form)
    x.unsubscribe([e.id for e in exprs[::4]])
    x.subscribe(_expressions(rng, n, 20))
    x.publish(_events(rng, 1000, 40), k=3)


def matching() -> None:
    """Ranked matching: rc.Matcher with every index and scoring, and the cluster's roles
    (placement policies, covering routing between distributors)."""
    import rankcast as rc
    from rankcast.config import MATCH_INDEXES, MATCH_POLICIES, SCORINGS

    rng = np.random.default_rng(2)
    for index in MATCH_INDEXES:
        for scoring in SCORINGS:
            if index == "be-tree" and scoring == "relaxed":
                continue
            _match_calls(rc.Matcher(rc.MatchConfig(scoring=scoring, index=index, k=5)), rng)
    for driver in ("pivot", "box", "paper"):
        for scoring in SCORINGS:
            _match_calls(rc.Matcher(rc.MatchConfig(scoring=scoring, index="auto", driver=driver, k=5)), rng)
    # a larger table, as the demo's: the BE*-tree splits its buckets and keeps summary classes
    for index, scoring in (("be-tree", "weighted"), ("be-tree", "static"), ("auto", "weighted")):
        _match_calls(rc.Matcher(rc.MatchConfig(scoring=scoring, index=index, k=5)), rng, 5000)
    for policy in MATCH_POLICIES:
        for scoring, distributors, updates in (("weighted", 1, "lists"), ("static", 2, "lists"),
                                               ("relaxed", 1, "lists"), ("weighted", 1, "diff")):
            ccfg = rc.ClusterConfig(engine=rc.MatchConfig(scoring=scoring, k=5), policy=policy, partitions=2,
                                    distributors=distributors, batch_size=50, state_dir=None, updates=updates,
                                    options={"runtime": "inproc"})
            cl = rc.Cluster.start(ccfg, sample=_expressions(rng, 0, 50))
            try:
                cl.warm()
                _match_calls(cl, rng)
            finally:
                cl.shutdown()


def covering() -> None:
    """Subscription covering over each of its indexes."""
    import rankcast as rc
    from rankcast.kinds.matching.covering import INDEXES, Covering

    rng = np.random.default_rng(3)
    exprs = _expressions(rng, 0, 300)
    for index in INDEXES:
        for k in (1, 3):
            cov = Covering(k=k, index=index)
            cov.subscribe(exprs[:150])
            cov.subscribe(exprs[150:])
            cov.unsubscribe([e.id for e in exprs[::3]])
            cov.forwarded()
            Covering.from_state(cov.state())
    del rc


def range_topk() -> None:
    """Range top-k: rc.RangeEngine with every method, batched or not, and its cluster roles."""
    import rankcast as rc
    from rankcast.config import RANGE_METHODS, RANGE_POLICIES

    rng = np.random.default_rng(4)
    n = 300
    lo = rng.uniform(0, 100, n)
    subs = pa.table({"id": np.arange(n, dtype=np.int64), "lo": lo, "hi": lo + rng.uniform(0, 30, n)})
    ids = np.arange(400, dtype=np.int64)
    inserts = pa.table({"id": ids, "x": rng.uniform(0, 130, 400), "y": rng.uniform(0, 1e3, 400)})
    # on even ids: 100 new values, 50 moves, 50 deletes
    moves = pa.table({"id": ids[::2], "x": pa.array([None] * 100 + list(rng.uniform(0, 130, 50)) + [None] * 50,
                                                    pa.float64()),
                      "y": pa.array(list(rng.uniform(0, 1e3, 150)) + [None] * 50, pa.float64())})

    def calls(x):
        x.subscribe(subs.slice(0, 200))
        x.subscribe([rc.RangeSubscription(i, float(a), float(b)) for i, a, b in
                     zip(range(200, n), subs.column("lo").to_numpy()[200:], subs.column("hi").to_numpy()[200:])])
        for i, form in enumerate((_forms(x) * 2)[:4]):
            x.publish(inserts.slice(i * 100, 100), updates=form)
        x.publish(moves)
        x.publish([rc.ObjectUpdate(int(i), y=float(v)) for i, v in zip(ids[1::2], rng.uniform(0, 1e3, 200))])
        x.unsubscribe(list(range(0, n, 5)))
        x.topk(1)

    for method in RANGE_METHODS:
        for batch in (True, False):
            for eps in (0.0, 0.5) if method != "unicast" else (0.0,):
                calls(rc.RangeEngine(rc.RangeConfig(k=5, method=method, batch=batch, epsilon=eps)))
    for policy, updates in [(p, "lists") for p in RANGE_POLICIES] + [("kd", "diff")]:
        ccfg = rc.ClusterConfig(engine=rc.RangeConfig(k=5), policy=policy, partitions=2, batch_size=50,
                                state_dir=None, updates=updates, options={"runtime": "inproc"})
        cl = rc.Cluster.start(ccfg, sample=subs.slice(0, 100))
        try:
            cl.warm()
            calls(cl)
            cl.replay(inserts, batch_rows=200, progress=False)
            for _ in range(2):          # pipelined calls, delivered together: diffs composed
                cl.publish([rc.ObjectUpdate(int(i), y=float(v)) for i, v in zip(ids[1::2], rng.uniform(0, 1e3, 200))],
                           wait=False)
            cl.flush()
        finally:
            cl.shutdown()


def baselines() -> None:
    """The baselines the benchmarks compare against (brute force, IPT, CIQ, kmax, Skyband, and
    numpy/scipy.sparse where SciPy is installed), on the spatial-keyword engine."""
    import importlib.util

    import rankcast as rc
    from rankcast.bench.engine import _factory
    from rankcast.ingest import datasets

    bounds, msgs, subs, vocab = datasets.dataset("tweets", 3000, 1000, seed=5)
    keys = ["brute", "ipt", "ciq", "kmax", "skyband"] + (["sparse"] if importlib.util.find_spec("scipy") else [])
    for key in keys:
        eng = rc.Engine(rc.EngineConfig(bounds=bounds, window=1000, vocabulary=vocab), core=_factory(key))
        eng.publish(msgs.slice(0, 1000), updates="none")
        eng.subscribe(subs)
        for i, form in enumerate(("objects", "arrow", "none", "objects")):
            eng.publish(msgs.slice(1000 + 500 * i, 500), updates=form)


JOBS: dict[str, Callable[[], None]] = {"spatial": spatial, "matching": matching, "range": range_topk,
                                       "covering": covering, "baselines": baselines}


def _run(name: str) -> tuple[str, float]:
    t0 = time.perf_counter()
    JOBS[name]()
    return name, time.perf_counter() - t0


def warm(jobs: list[str] | None = None, processes: int | None = None, log=print) -> dict[str, float]:
    """Run ``jobs`` (default: every kind) in ``processes`` parallel processes (default: one
    per core, at most one per job); returns each job's seconds."""
    names = list(jobs or JOBS)
    procs = max(1, min(processes or os.cpu_count() or 1, len(names)))
    done: dict[str, float] = {}
    if procs == 1:
        for name in names:
            _, done[name] = _run(name)
            log(f"[warm] {name}: {done[name]:.1f} s")
        return done
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(procs, mp_context=mp.get_context("spawn")) as pool:
        for fut in as_completed([pool.submit(_run, n) for n in names]):
            name, done[name] = fut.result()
            log(f"[warm] {name}: {done[name]:.1f} s")
    return done


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jobs", default=",".join(JOBS), help=f"comma-separated, of {','.join(JOBS)}")
    p.add_argument("--processes", type=int, default=None, help="parallel processes (default: one per core)")


def main(args: argparse.Namespace) -> int:
    names = [j.strip() for j in args.jobs.split(",") if j.strip()]
    bad = [j for j in names if j not in JOBS]
    if bad:
        raise SystemExit(f"rankcast warm: unknown job(s) {bad}; jobs are {list(JOBS)}")
    from rankcast.common.jitcache import configure

    t0 = time.perf_counter()
    warm(names, args.processes)
    where = os.environ.get("NUMBA_CACHE_DIR") or configure() or "numba's default"
    print(f"[warm] kernels compiled into {where} in {time.perf_counter() - t0:.1f} s", file=sys.stdout)
    return 0

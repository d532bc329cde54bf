"""The floor of a one-hop Ray design for `rankcast bench cluster --ray-clusters 1` per call.

An `rc.Engine` held by one Ray actor, configured like the bench's engine (and its one-partition
cluster), is called once per batch of 1,000 messages with ``updates="arrow"``: one hop there,
one back, no coordinator. In each round, right after the same engine in this process. Also
a trivial round trip: an actor that takes the same message batch and returns a table of the
same size as the engine's (the hop's own cost, nothing computed).

Wall-clock ratios (actor over local: < 1 is slower) and CPU us/msg of the client thread, the
actor's process and the raylet are printed, one line per round, then the medians.

    PYTHONPATH=$PWD python scripts/ray_floor.py [--messages 10000] [--rounds 3]
"""
from __future__ import annotations

import argparse
import gc
import statistics
import time

import numpy as np
import psutil
import ray

import rankcast as rc
from rankcast.actors.bench import _take
from rankcast.bench._common import build_workload
from rankcast.config import local_ray_options
from rankcast.engine import columns_table


@ray.remote
class EngineActor:
    def __init__(self, cfg):
        self.eng = rc.Engine(cfg)
        self.reply = None

    def pid(self):
        import os
        return os.getpid()

    def publish(self, part, updates="arrow"):
        return self.eng.publish(part, updates=updates)

    def publish_columns(self, part):
        """The update table's columns as the engine makes them, numpy arrays (Ray ships them
        out of band); the client wraps them in the table (``columns_table``)."""
        import rankcast.engine as em
        real, em.columns_table = em.columns_table, lambda *cols: cols
        try:
            return self.eng.publish(part, updates="arrow")
        finally:
            em.columns_table = real

    def fill(self, part):
        self.eng.publish(part, updates="none")

    def subscribe(self, subs):
        self.eng.subscribe(subs)

    def warm(self, work, cfg, batch):
        _warm(work, cfg, batch)

    def keep(self, table):
        self.reply = table

    def echo(self, part):
        return self.reply


def _load(target, work, window, remote):
    call = (lambda f, *a: ray.get(getattr(target, f).remote(*a))) if remote else \
        (lambda f, *a: getattr(target, "publish" if f == "fill" else f)(*a, **({"updates": "none"} if f == "fill" else {})))
    for a in range(0, window, 5000):
        call("fill", _take(work.msgs, a, min(window, a + 5000)))
    for a in range(0, len(work.subs), 20_000):
        call("subscribe", _take(work.subs, a, a + 20_000))


def _columns(tab):
    """A table's columns as numpy arrays (nulls: the mask)."""
    cols = [c.to_numpy(zero_copy_only=False) for c in tab.columns]
    mask = np.asarray(tab.column(1).is_null())
    return (cols[0], np.nan_to_num(cols[1]).astype(np.int32), np.nan_to_num(cols[2]).astype(np.int64),
            cols[3], mask)


def _table(cols):
    return columns_table(*cols)


def _warm(work, cfg, batch):
    """Kernels loaded (numba's cache) and run once, on a throwaway engine."""
    eng = rc.Engine(cfg)
    eng.publish(_take(work.msgs, 0, 3000), updates="none")
    eng.subscribe(_take(work.subs, 0, 2000))
    eng.publish(_take(work.msgs, 3000, 3000 + batch), updates="arrow")


def _stream(fn, work, window, messages, batch):
    gc.collect()
    gc.disable()
    try:
        t0, c0 = time.perf_counter(), time.thread_time()
        rows, tabs = 0, []
        for a in range(window, window + messages, batch):
            tabs.append(fn(_take(work.msgs, a, min(window + messages, a + batch))))
            rows += tabs[-1].num_rows
        return time.perf_counter() - t0, time.thread_time() - c0, rows, tabs
    finally:
        gc.enable()


def _cpu(procs):
    return {k: p.cpu_times().user + p.cpu_times().system for k, p in procs.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="geonames")
    ap.add_argument("--subs", type=int, default=20_000)
    ap.add_argument("--window", type=int, default=20_000)
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=1_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--transport", default="arrow", choices=["arrow", "columns"],
                    help="what the actor returns: the Arrow table, or its columns as numpy arrays "
                         "(the client makes the table, zero copy)")
    a = ap.parse_args()
    work = build_workload(a.dataset, a.window + a.messages, a.subs, 0)
    cfg = rc.EngineConfig(bounds=work.bounds, window=a.window, vocabulary=work.vocab)
    ray.init(**local_ray_options(log_to_driver=False))
    raylet = [p for p in psutil.Process().children(recursive=True) if "raylet" in p.name()]
    res = {"ratio_engine_actor": [], "echo_ms": []}
    for r in range(a.rounds):
        eng = rc.Engine(cfg)
        _load(eng, work, a.window, False)
        act = EngineActor.options(num_cpus=0.01).remote(cfg)
        _load(act, work, a.window, True)
        procs = {"actor": psutil.Process(ray.get(act.pid.remote())), "client": psutil.Process()}
        procs.update({f"raylet{i}": p for i, p in enumerate(raylet)})
        _warm(work, cfg, a.batch)
        ray.get(act.warm.remote(work, cfg, a.batch))
        le = _stream(lambda p: eng.publish(p, updates="arrow"), work, a.window, a.messages, a.batch)
        c0 = _cpu(procs)
        if a.transport == "arrow":
            ae = _stream(lambda p: ray.get(act.publish.remote(p)), work, a.window, a.messages, a.batch)
        else:
            ae = _stream(lambda p: _table(ray.get(act.publish_columns.remote(p))), work, a.window,
                         a.messages, a.batch)
        c1 = _cpu(procs)
        # echo: the same message batches out, a table of the engine's mean size back
        mean_rows = ae[2] // max(1, a.messages // a.batch)
        tab = min(le[3], key=lambda t: abs(t.num_rows - mean_rows))
        ray.get(act.keep.remote(tab if a.transport == "arrow" else _columns(tab)))
        ray.get(act.echo.remote(_take(work.msgs, 0, a.batch)))
        c2 = _cpu(procs)
        if a.transport == "arrow":
            ee = _stream(lambda p: ray.get(act.echo.remote(p)), work, a.window, a.messages, a.batch)
        else:
            ee = _stream(lambda p: _table(ray.get(act.echo.remote(p))), work, a.window, a.messages, a.batch)
        c3 = _cpu(procs)
        # the same hop with a reply of one row: the latency of the hop alone
        ray.get(act.keep.remote(tab.slice(0, 1) if a.transport == "arrow" else _columns(tab.slice(0, 1))))
        if a.transport == "arrow":
            e1 = _stream(lambda p: ray.get(act.echo.remote(p)), work, a.window, a.messages, a.batch)
        else:
            e1 = _stream(lambda p: _table(ray.get(act.echo.remote(p))), work, a.window, a.messages, a.batch)
        n = a.messages
        us = {k: round((c1[k] - c0[k]) * 1e6 / n, 1) for k in c0}
        us_echo = {k: round((c3[k] - c2[k]) * 1e6 / n, 1) for k in c2}
        calls = n / a.batch
        res["ratio_engine_actor"].append(le[0] / ae[0])
        res["echo_ms"].append(ee[0] / calls * 1e3)
        print(f"round {r}: local engine {le[0] / calls * 1e3:.1f} ms/call (client CPU {le[1] * 1e6 / n:.1f} us/msg); "
              f"engine actor {ae[0] / calls * 1e3:.1f} ms/call -> {le[0] / ae[0]:.3f}x the local engine; "
              f"CPU us/msg {us}; echo of {tab.num_rows} rows ({tab.nbytes / 1e6:.2f} MB, mean rows {mean_rows}) "
              f"{ee[0] / calls * 1e3:.2f} ms/call, CPU us/msg {us_echo}; echo of 1 row {e1[0] / calls * 1e3:.2f} ms/call", flush=True)
        ray.kill(act)
    print(f"median engine actor / local: {statistics.median(res['ratio_engine_actor']):.3f}x; "
          f"median echo {statistics.median(res['echo_ms']):.2f} ms/call")


if __name__ == "__main__":
    main()

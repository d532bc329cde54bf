"""The floor of a one-hop Ray design for `rankcast bench cluster --ray-clusters 1` per call.

An `rc.Engine` held by one Ray actor, configured like the bench's engine (and its one-partition
cluster), is called once per batch of 1,000 messages with ``updates="arrow"``: one hop there,
one back, no coordinator. In each round, right after the same engine in this process. Also
a trivial round trip: an actor that takes the same message batch and returns a table of the
same size as the engine's (the hop's own cost, nothing computed).

Wall-clock ratios (actor over local: < 1 is slower) and CPU us/msg of the client thread, the
actor's process and the raylet are printed, one line per round, then the medians.

    PYTHONPATH=$PWD python scripts/ray_floor.py [--messages 10000] [--rounds 3]

``--transport cgraph`` drives the same actors through a Ray Compiled Graph (shared-memory
channels, `dag.experimental_compile()`) instead of actor calls, each variant on fresh actors
right after a fresh engine in this process: classic actor calls and the compiled graph, per
call (one call at a time) and streamed (``--depth`` calls in flight). ``--engines 2`` holds two
engines, each with the whole window and the hash half of the subscriptions (id % 2), called
with every batch (a `MultiOutputNode` for the graph); the client concatenates both parts into
one Arrow table. Every variant's tables are checked against the local engine's (sorted).

    PYTHONPATH=$PWD python scripts/ray_floor.py --transport cgraph [--engines 2] [--depth 4]
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
from collections import deque

import pyarrow as pa
from rankcast.engine import columns_table


@ray.remote
class EngineActor:
    def __init__(self, cfg):
        self.eng = rc.Engine(cfg)
        self.reply = None
        self.busy = 0.0

    def busy_seconds(self):
        """CPU seconds spent inside ``publish`` and ``step`` (their threads)."""
        return self.busy

    def pid(self):
        import os
        return os.getpid()

    def publish(self, part, updates="arrow"):
        c = time.thread_time()
        try:
            return self.eng.publish(part, updates=updates)
        finally:
            self.busy += time.thread_time() - c

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

    def step(self, arg):
        """A compiled graph's one method: ``("publish", batch)`` or ``("echo", batch)``."""
        kind, part = arg
        return self.reply if kind == "echo" else self.publish(part)


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
    ap.add_argument("--engines", type=int, default=1, choices=[1, 2],
                    help="cgraph: engines each holding the hash half of the subscriptions")
    ap.add_argument("--depth", type=int, default=4, help="cgraph: calls in flight when streamed")
    ap.add_argument("--variants", nargs="+", default=["classic", "classic-stream", "cgraph",
                                                       "cgraph-stream", "cgraph-poll", "cgraph-poll-stream"],
                    help="cgraph: which variants, in order, each on fresh actors")
    ap.add_argument("--transport", default="arrow", choices=["arrow", "columns", "cgraph"],
                    help="what the actor returns: the Arrow table, or its columns as numpy arrays "
                         "(the client makes the table, zero copy)")
    a = ap.parse_args()
    work = build_workload(a.dataset, a.window + a.messages, a.subs, 0)
    cfg = rc.EngineConfig(bounds=work.bounds, window=a.window, vocabulary=work.vocab)
    ray.init(**local_ray_options(log_to_driver=False))
    raylet = [p for p in psutil.Process().children(recursive=True) if "raylet" in p.name()]
    if a.transport == "cgraph":
        return cgraph_main(a, work, cfg, raylet)
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


# -- compiled graphs -----------------------------------------------------------------------

def _pipelined(submit, get, work, window, messages, batch, depth):
    """``_stream`` with up to ``depth`` calls in flight: ``submit(batch)`` gives a handle,
    ``get(handle)`` the call's table, in order."""
    gc.collect()
    gc.disable()
    try:
        t0, c0 = time.perf_counter(), time.thread_time()
        rows, tabs, q = 0, [], deque()
        for a in range(window, window + messages, batch):
            if len(q) >= depth:
                tabs.append(get(q.popleft()))
                rows += tabs[-1].num_rows
            q.append(submit(_take(work.msgs, a, min(window + messages, a + batch))))
        while q:
            tabs.append(get(q.popleft()))
            rows += tabs[-1].num_rows
        return time.perf_counter() - t0, time.thread_time() - c0, rows, tabs
    finally:
        gc.enable()


def _concat(parts):
    return parts[0] if len(parts) == 1 else pa.concat_tables(parts)


def _owned(parts):
    """The tables of a compiled graph's result, copied out of its channels' buffers. A table
    read from a channel holds that buffer (zero copy) until it is freed, and the graph's next
    executions wait for a free buffer: results kept (as a client's are) must be copied, or the
    stream hangs once ``_max_inflight_executions`` buffers are held."""
    def copy(arr):
        bufs = [None if b is None else pa.py_buffer(np.frombuffer(b, np.uint8).copy())
                for b in arr.buffers()]
        return pa.Array.from_buffers(arr.type, len(arr), bufs, offset=arr.offset)
    return _concat([pa.table([pa.chunked_array([copy(c) for c in col.chunks], col.type)
                              for col in t.columns], schema=t.schema) for t in parts])


def _same(tabs, ref):
    """Each call's table holds the rows of the engine's (in any order)."""
    keys = [("subscription_id", "ascending"), ("rank", "ascending")]
    for t, r in zip(tabs, ref, strict=True):
        if not t.sort_by(keys).equals(r.sort_by(keys)):
            return False
    return True


def _actors(work, cfg, batch, n):
    """``n`` engine actors holding the whole window and subscription ``id % n == i``, warmed."""
    acts = [EngineActor.options(num_cpus=0.01).remote(cfg) for _ in range(n)]
    for a in range(0, cfg.window, 5000):
        part = _take(work.msgs, a, min(cfg.window, a + 5000))
        ray.get([act.fill.remote(part) for act in acts])
    ids = np.asarray(work.subs.ids)
    for i, act in enumerate(acts):
        mine = work.subs.take(np.nonzero(ids % n == i)[0])
        for a in range(0, len(mine), 20_000):
            ray.get(act.subscribe.remote(mine.take(np.arange(a, min(len(mine), a + 20_000)))))
    ray.get([act.warm.remote(work, cfg, batch) for act in acts])
    return acts


def _graph(acts):
    from ray.dag import InputNode, MultiOutputNode
    with InputNode() as inp:
        dag = MultiOutputNode([act.step.bind(inp) for act in acts])
    return dag.experimental_compile(_max_inflight_executions=16)


class _Graphs:
    """One compiled graph per actor, read by polling (``-poll`` variants): a graph's reader
    waits by spinning (Ray 2.60's shared-memory channels poll, `sched_yield` between tries),
    a whole core for the wait; this client instead asks each graph with a zero timeout and
    sleeps ``pause`` seconds between tries. One output channel per graph, so that a try that
    times out has read nothing (a `MultiOutputNode` read that times out half way loses the
    parts it read)."""

    def __init__(self, acts, pause=0.0005):
        from ray.dag import InputNode
        self.pause, self.graphs = pause, []
        for act in acts:
            with InputNode() as inp:
                dag = act.step.bind(inp)
            self.graphs.append(dag.experimental_compile(_max_inflight_executions=16))

    def execute(self, arg):
        return [g.execute(arg) for g in self.graphs]

    def get(self, refs):
        from ray.exceptions import RayChannelTimeoutError
        from ray.experimental.compiled_dag_ref import _process_return_vals
        out = []
        for ref in refs:
            dag = ref._dag
            while True:
                try:
                    dag._execute_until(ref._execution_index, ref._channel_index, 0)
                    break
                except RayChannelTimeoutError:
                    time.sleep(self.pause)
            ref._ray_get_called = True
            out.append(_process_return_vals(
                dag._get_execution_results(ref._execution_index, ref._channel_index), True))
        return out

    def teardown(self):
        for g in self.graphs:
            g.teardown()


def _run(kind, acts, g, work, a, method="publish"):
    """One variant's stream of ``method`` (publish or echo) on ``acts`` through actor calls
    (``classic``) or the compiled graph ``g``: (seconds, client CPU, rows, tables)."""
    w, m, b, d = a.window, a.messages, a.batch, a.depth
    if kind == "classic":
        return _stream(lambda p: _concat(ray.get([getattr(x, method).remote(p) for x in acts])),
                       work, w, m, b)
    if kind == "classic-stream":
        return _pipelined(lambda p: [getattr(x, method).remote(p) for x in acts],
                          lambda refs: _concat(ray.get(refs)), work, w, m, b, d)
    if kind == "cgraph":
        return _stream(lambda p: _owned(ray.get(g.execute((method, p)))), work, w, m, b)
    if kind == "cgraph-poll":
        return _stream(lambda p: _owned(g.get(g.execute((method, p)))), work, w, m, b)
    if kind == "cgraph-poll-stream":
        return _pipelined(lambda p: g.execute((method, p)), lambda refs: _owned(g.get(refs)),
                          work, w, m, b, d)
    return _pipelined(lambda p: g.execute((method, p)), lambda ref: _owned(ray.get(ref)),
                      work, w, m, b, d)


def _keep(acts, tab):
    """Each actor stores its share of ``tab`` for the echo."""
    share = (tab.num_rows + len(acts) - 1) // len(acts)
    ray.get([x.keep.remote(tab.slice(i * share, share)) for i, x in enumerate(acts)])


def cgraph_main(a, work, cfg, raylet):
    n, calls = a.messages, a.messages / a.batch
    res = {}
    for r in range(a.rounds):
        for kind in a.variants:
            eng = rc.Engine(cfg)
            _load(eng, work, a.window, False)
            _warm(work, cfg, a.batch)
            le = _stream(lambda p: eng.publish(p, updates="arrow"), work, a.window, n, a.batch)
            eng = None
            acts = _actors(work, cfg, a.batch, a.engines)
            procs = {f"actor{i}": psutil.Process(ray.get(x.pid.remote())) for i, x in enumerate(acts)}
            procs["client"] = psutil.Process()
            procs.update({f"raylet{i}": p for i, p in enumerate(raylet)})
            # the result of the engine's mean size, echoed once: the graph's channels sized
            mean_rows = le[2] // max(1, int(calls))
            tab = min(le[3], key=lambda t: abs(t.num_rows - mean_rows))
            _keep(acts, tab)
            g = None if not kind.startswith("cgraph") else \
                _Graphs(acts) if "poll" in kind else _graph(acts)
            try:
                if isinstance(g, _Graphs):
                    g.get(g.execute(("echo", None)))
                elif g is not None:
                    ray.get(g.execute(("echo", None)))
                b0 = ray.get([x.busy_seconds.remote() for x in acts])
                c0 = _cpu(procs)
                ae = _run(kind, acts, g, work, a)
                c1 = _cpu(procs)
                b1 = ray.get([x.busy_seconds.remote() for x in acts])
                us = {k: round((c1[k] - c0[k]) * 1e6 / n, 1) for k in c0}
                us.update({f"actor{i}.busy": round((y - x) * 1e6 / n, 1) for i, (x, y) in enumerate(zip(b0, b1))})
                ok = _same(ae[3], le[3])
                ratio = le[0] / ae[0]
                res.setdefault(kind, []).append(ratio)
                line = (f"round {r} {kind} x{a.engines}: local engine {le[0] / calls * 1e3:.1f} ms/call "
                        f"(CPU {le[1] * 1e6 / n:.1f} us/msg); actors {ae[0] / calls * 1e3:.1f} ms/call -> "
                        f"{ratio:.3f}x; client CPU {ae[1] * 1e6 / n:.1f} us/msg (thread); "
                        f"CPU us/msg {us}; equal to the engine: {ok}")
                if kind in ("classic", "cgraph", "cgraph-poll"):
                    # stored-result round trips on the same actors: the engine's mean size, 1 row
                    for label, keep in (("echo", tab), ("echo1", tab.slice(0, a.engines))):
                        _keep(acts, keep)
                        ee = _run(kind, acts, g, work, a, "echo")
                        res.setdefault(f"{label}-{kind}", []).append(ee[0] / calls * 1e3)
                        line += f"; {label} ({keep.num_rows} rows) {ee[0] / calls * 1e3:.2f} ms/call"
            finally:
                if g is not None:
                    g.teardown()
            print(line, flush=True)
            for x in acts:
                ray.kill(x)
    print("medians: " + "; ".join(f"{k} {statistics.median(v):.3f}" for k, v in res.items()))


if __name__ == "__main__":
    main()

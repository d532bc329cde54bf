"""What a Ray Compiled Graph's shared-memory channel costs the processes that wait on it.

One actor; each probe runs through classic actor calls (`ray.get(actor.step.remote(x))`) and
through a compiled graph of the same method (`ray.get(graph.execute(x))`): a tiny result, a
50-ms sleep in the actor (the client's CPU while it waits), a table of 294k update rows
(the size of one call's updates in `rankcast bench cluster`) as Arrow and as four numpy
arrays. Then the actor's CPU over 3 idle seconds: without a graph, with a compiled graph that
nothing executes, and after its teardown. Wall ms per call and the calling thread's CPU ms.

    python scripts/cgraph_spin.py
"""
import os
import time

import numpy as np
import psutil
import pyarrow as pa
import ray
from ray.dag import InputNode

N = 294_000


@ray.remote(num_cpus=0.01)
class Probe:
    def __init__(self):
        self.cols = (np.arange(N, dtype=np.int64), np.arange(N, dtype=np.int32),
                     np.arange(N, dtype=np.int64), np.random.rand(N))
        self.tab = pa.table(dict(zip(("subscription_id", "rank", "message_id", "score"), self.cols)))

    def pid(self):
        return os.getpid()

    def step(self, kind):
        if kind == "sleep":
            time.sleep(0.05)
        return {"table": self.tab, "columns": self.cols}.get(kind, 1)


def bench(name, f, n=20):
    for _ in range(3):
        f()
    t, c = time.perf_counter(), time.thread_time()
    for _ in range(n):
        r = f()
        del r      # a graph's result holds its channel's buffer until freed
    print(f"{name}: {(time.perf_counter() - t) / n * 1e3:.2f} ms/call, calling thread "
          f"{(time.thread_time() - c) / n * 1e3:.2f} ms CPU/call", flush=True)


def idle(p, label):
    c = sum(p.cpu_times()[:2])
    time.sleep(3)
    print(f"actor idle, {label}: {(sum(p.cpu_times()[:2]) - c) / 3 * 100:.0f}% of a core", flush=True)


def main():
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    a = Probe.remote()
    p = psutil.Process(ray.get(a.pid.remote()))
    kinds = ("tiny", "sleep", "table", "columns")
    for k in kinds:
        bench(f"classic {k}", lambda: ray.get(a.step.remote(k)))
    idle(p, "no graph")
    with InputNode() as inp:
        dag = a.step.bind(inp)
    g = dag.experimental_compile()
    for k in kinds:
        bench(f"cgraph {k}", lambda: ray.get(g.execute(k)))
    idle(p, "compiled graph, nothing executed")
    g.teardown()
    idle(p, "graph torn down")


if __name__ == "__main__":
    main()

"""Where the wall time of a streamed run of 2 hash partitions on Ray goes (issue #15): the
bench's workload, the client's publish returns and flush, and from ``ray.timeline()`` each
partition's steps (``process``, then the flush's ``take_updates``): when its first step
starts and its last ends, each step's length and the gaps between them. Under ``flock
/tmp/rankcast-ray.lock`` with a private ``RANKCAST_STATE_DIR``:

    PYTHONPATH=$PWD python scripts/two_part_timeline.py [reps 3]
"""
import sys
import time

import ray

import rankcast as rc
from rankcast.actors import bench as B
from rankcast.bench._common import build_workload
from rankcast.config import local_ray_options

M = 10_000
work = build_workload("geonames", 20_000 + M, 20_000, 0)
cfg = rc.EngineConfig(bounds=work.bounds, window=20_000, vocabulary=work.vocab)
ray.init(**local_ray_options(log_to_driver=False))
for rep in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
    er = B._drive(rc.Engine(cfg), work, 20_000, M, 1000, pipelined=False, updates="arrow")
    ccfg = rc.ClusterConfig(engine=cfg, policy="hash", partitions=2, window_shards=1, distributors=1,
                            aggregators=1, batch_size=1024, actor_cpus=0.01, name=f"timeline-{rep}")
    cl = rc.Cluster.start(ccfg, fresh=True, sample=(B._take(work.subs, 0, 5000), B._take(work.msgs, 0, 5000)))
    try:
        cl.warm()
        for a in range(0, 20_000, 5000):
            cl.publish(B._take(work.msgs, a, a + 5000), wait=False)
        cl.flush()
        cl.subscribe(work.subs)
        if cl.stats()["recovery"]["durable"]:
            cl.checkpoint()
        ts = []
        t0 = time.perf_counter()
        wall0 = time.time()
        for a in range(20_000, 20_000 + M, 1000):
            cl.publish(B._take(work.msgs, a, a + 1000), wait=False)
            ts.append(time.perf_counter() - t0)
        tf = time.perf_counter()
        tab = cl.flush(updates="arrow")
        t1 = time.perf_counter()
        print(f"rep {rep}: engine {M / er['seconds']:.0f} msg/s, cluster {M / (t1 - t0):.0f} msg/s "
              f"({(t1 - t0) * 1e3:.1f} ms); publishes returned at {[round(x * 1e3, 1) for x in ts]} ms; "
              f"flush {(t1 - tf) * 1e3:.1f} ms ({tab.num_rows} rows)", flush=True)
        by: dict = {}
        for e in ray.timeline():
            if e.get("ph") != "X" or e["name"] not in ("process", "take_updates") \
                    or float(e["ts"]) / 1e6 < wall0 - 0.01:
                continue
            st = float(e["ts"]) / 1e3 - wall0 * 1e3
            by.setdefault(e["tid"][-6:], []).append((st, st + float(e["dur"]) / 1e3, e["name"]))
        for tid, xs in sorted(by.items()):
            xs.sort()
            steps = [b - a for a, b, n in xs if n == "process"]
            gaps = [xs[i + 1][0] - xs[i][1] for i in range(len(xs) - 1)]
            print(f"   partition {tid}: first step at {xs[0][0]:.1f} ms, last end {xs[-1][1]:.1f} ms; steps "
                  f"{[round(x) for x in steps]} ms (sum {sum(steps):.0f}); gaps {sum(gaps):.1f} ms "
                  f"(longest {max(gaps, default=0):.1f})", flush=True)
    finally:
        cl.shutdown()

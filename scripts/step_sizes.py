"""What a step's size does to throughput (issue #15): the bench's workload (GeoNames, 20k
subscriptions, a 20k window, Arrow updates) streamed in calls of each size, by the engine
(each call returns its updates) and by 2 hash partitions on Ray publishing pipelined with
``coalesce=0`` (a call is one step), ``reps`` times in one Ray session, alternating; the
first rep runs colder and is left out of the medians. The gap between the sizes is what
``ClusterConfig.coalesce`` gathers for a publisher faster than the partitions. Under
``flock /tmp/rankcast-ray.lock`` with a private ``RANKCAST_STATE_DIR``:

    PYTHONPATH=$PWD python scripts/step_sizes.py [sizes 1000,2000,4000] [reps 4]
"""
import statistics as S
import sys

import ray

import rankcast as rc
from rankcast.actors import bench as B
from rankcast.bench._common import build_workload
from rankcast.config import local_ray_options

M = 10_000
SIZES = [int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "1000,2000,4000").split(",")]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 4
work = build_workload("geonames", 20_000 + M, 20_000, 0)
cfg = rc.EngineConfig(bounds=work.bounds, window=20_000, vocabulary=work.vocab)
ray.init(**local_ray_options(log_to_driver=False))
rows = {c: [] for c in SIZES}
for rep in range(N):
    for c in SIZES:
        er = B._drive(rc.Engine(cfg), work, 20_000, M, c, pipelined=False, updates="arrow")
        ccfg = rc.ClusterConfig(engine=cfg, policy="hash", partitions=2, window_shards=1, distributors=1,
                                aggregators=1, batch_size=max(1024, c), coalesce=0, actor_cpus=0.01,
                                name=f"steps-{rep}-{c}")
        cl = rc.Cluster.start(ccfg, fresh=True, sample=(B._take(work.subs, 0, 5000), B._take(work.msgs, 0, 5000)))
        try:
            procs = B._ProcessCPU(cl.warm())
            r = B._drive(cl, work, 20_000, M, c, pipelined=True, updates="arrow", at_start=procs.start,
                         settle=cl.checkpoint if cl.stats()["recovery"]["durable"] else None)
            cpu = sum(procs.seconds().values()) * 1e6 / M
        finally:
            cl.shutdown()
        rows[c].append((er["throughput"], r["throughput"], cpu))
        print(f"rep {rep} calls of {c}: engine {er['throughput']:.0f} msg/s, 2 partitions {r['throughput']:.0f} "
              f"msg/s, cluster CPU {cpu:.1f} us/msg", flush=True)
for c in SIZES:
    w = rows[c][1:] or rows[c]
    print(f"calls of {c}: engine {S.median(x[0] for x in w):.0f} msg/s, 2 partitions "
          f"{S.median(x[1] for x in w):.0f} msg/s (CPU {S.median(x[2] for x in w):.1f} us/msg)")

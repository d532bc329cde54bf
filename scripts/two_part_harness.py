"""Side-by-side runs of the engine and of 2 hash partitions on Ray (each holding the window),
streamed as the bench's target measures them (issue #15): the bench's workload (GeoNames,
20k subscriptions, a 20k window, calls of 1,000 messages, Arrow updates, a checkpoint
before the stream), ``reps`` times in one Ray session, each cluster run against the engine
run right before it, with every process's CPU per message. For A/B runs of two codes (call
it alternately from each worktree); the first rep's engine runs colder, leave it out. Under
``flock /tmp/rankcast-ray.lock`` with a private ``RANKCAST_STATE_DIR``:

    PYTHONPATH=$PWD python scripts/two_part_harness.py [reps 6]
"""
import statistics as S
import sys
import time

import ray

import rankcast as rc
from rankcast.actors import bench as B
from rankcast.bench._common import build_workload
from rankcast.config import local_ray_options

M = 10_000
N = int(sys.argv[1]) if len(sys.argv) > 1 else 6
work = build_workload("geonames", 20_000 + M, 20_000, 0)
cfg = rc.EngineConfig(bounds=work.bounds, window=20_000, vocabulary=work.vocab)
ray.init(**local_ray_options(log_to_driver=False))
rows = []
for rep in range(N):
    er = B._drive(rc.Engine(cfg), work, 20_000, M, 1000, pipelined=False, updates="arrow")
    ccfg = rc.ClusterConfig(engine=cfg, policy="hash", partitions=2, window_shards=1, distributors=1,
                            aggregators=1, batch_size=1024, actor_cpus=0.01, name=f"harness-{rep}")
    cl = rc.Cluster.start(ccfg, fresh=True, sample=(B._take(work.subs, 0, 5000), B._take(work.msgs, 0, 5000)))
    try:
        procs = B._ProcessCPU(cl.warm())
        r = B._drive(cl, work, 20_000, M, 1_000, pipelined=True, updates="arrow", at_start=procs.start,
                     settle=cl.checkpoint if cl.stats()["recovery"]["durable"] else None)
        cpu = {k: v * 1e6 / M for k, v in procs.seconds().items() if v > 0}
    finally:
        cl.shutdown()
    ratio = er["seconds"] / r["seconds"]
    tot = sum(cpu.values())
    rows.append((ratio, tot, 1e6 * er["cpu_seconds"] / M, M / r["seconds"]))
    print(f"rep {rep} {time.strftime('%H:%M:%S')}: ratio {ratio:.3f} (engine {M / er['seconds']:.0f}, cluster "
          f"{M / r['seconds']:.0f} msg/s); cpu us/msg total {tot:.0f} engine {1e6 * er['cpu_seconds'] / M:.1f}: "
          + ", ".join(f"{k.replace('ray: ', '')} {v:.0f}" for k, v in sorted(cpu.items(), key=lambda kv: -kv[1])),
          flush=True)
warm = rows[1:] or rows
print(f"reps 1-{len(rows) - 1}: median ratio {S.median(x[0] for x in warm):.3f}, cluster "
      f"{S.median(x[3] for x in warm):.0f} msg/s, CPU in all {S.median(x[1] for x in warm):.1f} us/msg, "
      f"engine {S.median(x[2] for x in warm):.1f}")

"""What each of 2 hash partitions (each holding the window) costs for the same work, in one
process with no Ray (issue #15): the bench's engine workload (GeoNames, 20k subscriptions, a
20k window, calls of 1,000 messages, Arrow updates) through an Engine (its thread's CPU per
message), then through an ``inproc`` cluster of 2 hash partitions, pipelined as the
streamed run (each role's busy CPU per message: a partition's excludes its window's,
``shard``), and each partition's core counters (matching, re-evaluations, compactions).

    PYTHONPATH=$PWD python scripts/two_part_inproc.py [messages 10000] [rounds 2]
"""
import sys
import rankcast as rc
from rankcast.actors import bench as B
from rankcast.bench._common import build_workload
window, nsubs, M = 20_000, 20_000, int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
work = build_workload("geonames", window + M, nsubs, 0)
cfg = rc.EngineConfig(bounds=work.bounds, window=window, vocabulary=work.vocab)
for rnd in range(int(sys.argv[2]) if len(sys.argv) > 2 else 2):
    e = B._drive(rc.Engine(cfg), work, window, M, 1000, pipelined=False, updates="arrow")
    print("engine cpu us/msg", round(1e6 * e["cpu_seconds"] / M, 1), flush=True)
    ccfg = rc.ClusterConfig(engine=cfg, policy="hash", partitions=2, window_shards=1, distributors=1,
                            aggregators=1, batch_size=1024, options={"runtime": "inproc", "solo_halves": False},
                            delivery_interval=B.SCALE_DELIVERY, name=f"ip{rnd}")
    cl = rc.Cluster.start(ccfg, fresh=True, sample=(B._take(work.subs, 0, 5000), B._take(work.msgs, 0, 5000)))
    cl.warm()
    r = B._drive(cl, work, window, M, 1000, pipelined=True, updates="arrow", collect=False)
    d = B._delta(cl.stats(), r["before"])
    print("cluster thread cpu us/msg", round(1e6 * r["cpu_seconds"] / M, 1),
          {k: [round(1e6 * x / M, 1) for x in v] for k, v in d["busy"].items() if v}, flush=True)
    coord = cl._coord.local
    for p in coord.parts:
        p = getattr(p, "local", p)
        c = p.core.subs
        print(" part", p.index, "core", p.core.counters, "subs", len(c.live_slots()), "stats", {k: v for k, v in p.metrics.values.items() if isinstance(v, (int, float))}, flush=True)
    cl.shutdown()

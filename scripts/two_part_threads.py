"""Where each process of 2 hash partitions streamed spends its CPU, thread by thread (issue
#15): the bench's streamed workload (GeoNames, 20k subscriptions, a 20k window, calls of
1,000 messages pipelined, one flush, Arrow updates, a checkpoint right before the stream),
a fresh cluster per run, and for the coordinator, both partitions, the client and the
raylet: CPU per message of each thread (``/proc/<pid>/task/*/stat``, by thread name, in
clock ticks: 1 tick = 1 us per message at 10,000 messages) and the scheduler's switches
and migrations (``/proc/<pid>/sched``) over the stream; each role's busy wall time beside.
Under ``flock /tmp/rankcast-ray.lock`` with a private ``RANKCAST_STATE_DIR``:

    PYTHONPATH=$PWD python scripts/two_part_threads.py [messages 10000] [runs 2] [--pin]

``--pin``: runs alternate between unpinned and each partition process pinned to a CPU of
its own (``sched_setaffinity``, partition i on CPU i; the coordinator, client and raylet
stay free): whether the partition that shares its core with them is the one whose CPU
inflates (stop 39; not measured on a quiet machine yet).
"""
import os, sys
from collections import defaultdict
from pathlib import Path
import ray
import rankcast as rc
from rankcast.actors import bench as B
from rankcast.bench._common import build_workload
from rankcast.config import local_ray_options
PIN = "--pin" in sys.argv
args = [a for a in sys.argv[1:] if a != "--pin"]
M = int(args[0]) if args else 10_000
RUNS = int(args[1]) if len(args) > 1 else 2
HZ = os.sysconf("SC_CLK_TCK")
work = build_workload("geonames", 20_000 + M, 20_000, 0)
cfg = rc.EngineConfig(bounds=work.bounds, window=20_000, vocabulary=work.vocab)
ray.init(**local_ray_options(log_to_driver=False))

def threads(pid):
    out = defaultdict(float)
    if not Path(f"/proc/{pid}/task").exists():
        return out
    for t in Path(f"/proc/{pid}/task").iterdir():
        try:
            s = (t / "stat").read_text()
        except OSError:
            continue
        comm = s[s.index("(") + 1:s.rindex(")")]
        f = s[s.rindex(")") + 2:].split()
        out[comm] += (int(f[11]) + int(f[12])) / HZ
    return out

def sched(pid):
    d = {}
    if not Path(f"/proc/{pid}/sched").exists():
        return d
    for line in Path(f"/proc/{pid}/sched").read_text().splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            k = k.strip()
            if k in ("nr_switches", "nr_voluntary_switches", "nr_involuntary_switches", "se.nr_migrations"):
                d[k] = float(v)
    return d

def raylet():
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if "raylet" in (p / "comm").read_text():
                    return int(p.name)
            except OSError:
                pass

for run in range(RUNS):
    ccfg = rc.ClusterConfig(engine=cfg, policy="hash", partitions=2, window_shards=1, distributors=1,
                            aggregators=1, batch_size=1024, actor_cpus=0.01, name=f"threads-{run}",
                            delivery_interval=B.SCALE_DELIVERY)
    cl = rc.Cluster.start(ccfg, fresh=True, sample=(B._take(work.subs, 0, 5000), B._take(work.msgs, 0, 5000)))
    pids = cl.warm()
    print(pids, flush=True)
    procs = {"coord": pids["coordinator"][0], "p0": pids["partition"][0], "p1": pids["partition"][1],
             "client": os.getpid(), "raylet": raylet()}
    pinned = PIN and run % 2 == 1
    if pinned:
        for i in range(2):
            os.sched_setaffinity(procs[f"p{i}"], {sorted(os.sched_getaffinity(0))[i]})
    snap = {}
    def start():
        snap.update({k: (threads(p), sched(p)) for k, p in procs.items()})
    durable = cl.stats()["recovery"]["durable"]
    r = B._drive(cl, work, 20_000, M, 1_000, pipelined=True, updates="arrow", at_start=start,
                 settle=cl.checkpoint if durable else None)
    after = {k: (threads(p), sched(p)) for k, p in procs.items()}
    d = B._delta(cl.stats(), r["before"])
    cl.shutdown()
    print(f"run {run} {'pinned' if pinned else 'free'} load {os.getloadavg()[0]:.1f} stream {r['seconds']:.3f} s {M / r['seconds']:.0f} msg/s busy us/msg "
          f"{ {k: [round(1e6*x/M, 1) for x in v] for k, v in d['busy'].items() if v} }", flush=True)
    for k in procs:
        t0, s0 = snap[k]; t1, s1 = after[k]
        per = {n: round(1e6 * (t1[n] - t0.get(n, 0)) / M, 1) for n in t1}
        per = {n: v for n, v in sorted(per.items(), key=lambda x: -x[1]) if v > 0}
        print(f"  {k}: total {sum(per.values()):.1f} {per} sched {{{', '.join(f'{a}: {s1[a]-s0.get(a, 0):.0f}' for a in s1)}}}", flush=True)

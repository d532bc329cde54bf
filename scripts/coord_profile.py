"""py-spy profile of the coordinator of 2 hash partitions (each holding the window) over a
streamed run of the bench's workload (GeoNames, 20k subscriptions, a 20k window, calls of
1,000 messages, Arrow updates, a checkpoint before the stream as the bench takes it), and
its roles' busy CPU. Under ``flock /tmp/rankcast-ray.lock`` with a private
``RANKCAST_STATE_DIR``:

    PYTHONPATH=$PWD python scripts/coord_profile.py [--messages 40000] [--out coord.raw]

Prints the stream's rate, the roles' busy CPU seconds, and the functions holding the most
samples (inclusive) of the raw py-spy file it writes.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=40_000)
    ap.add_argument("--out", default="coord.raw")
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()

    import ray
    import rankcast as rc
    from rankcast.actors import bench as B
    from rankcast.bench._common import build_workload
    from rankcast.config import local_ray_options

    work = build_workload("geonames", 20_000 + a.messages, 20_000, 0)
    cfg = rc.EngineConfig(bounds=work.bounds, window=20_000, vocabulary=work.vocab)
    ray.init(**local_ray_options(log_to_driver=False))
    ccfg = rc.ClusterConfig(engine=cfg, policy="hash", partitions=2, window_shards=1, distributors=1,
                            aggregators=1, batch_size=1024, actor_cpus=0.01, name="coord-profile-2")
    cl = rc.Cluster.start(ccfg, fresh=True, sample=(B._take(work.subs, 0, 5000), B._take(work.msgs, 0, 5000)))
    coord = cl.warm()["coordinator"][0]
    spy = []
    py_spy = str(Path(sys.executable).with_name("py-spy"))

    def start():
        spy.append(subprocess.Popen([py_spy, "record", "-p", str(coord), "-r", "250", "-f", "raw", "-o", a.out,
                                     "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(1.0)

    durable = cl.stats()["recovery"]["durable"]
    r = B._drive(cl, work, 20_000, a.messages, 1_000, pipelined=True, updates="arrow", at_start=start,
                 settle=cl.checkpoint if durable else None)
    spy[0].send_signal(2)
    spy[0].wait(timeout=60)
    d = B._delta(cl.stats(), r["before"])
    cl.shutdown()
    print(f"stream {r['seconds']:.2f} s, {a.messages / r['seconds']:.0f} msg/s; busy CPU s: "
          f"{ {k: [round(x, 3) for x in v] for k, v in d['busy'].items() if v} }")
    incl, total = Counter(), 0
    for line in Path(a.out).read_text().splitlines():
        if not line.strip():
            continue
        stack, n = line.rsplit(" ", 1)
        total += int(n)
        for f in {f.split(" (")[0] for f in stack.split(";")}:
            incl[f] += int(n)
    print(f"{total} samples ({total / 250:.2f} s at 250 Hz)")
    for f, n in incl.most_common(a.top):
        print(f"{n:6d} {100 * n / max(total, 1):5.1f}%  {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

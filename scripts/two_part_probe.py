"""Where the wall time of 2 hash partitions streamed goes (issue #15): the bench's Ray run
(``rankcast.actors.bench._ray_run``, mode ``streamed``: GeoNames, 20k subscriptions, a 20k
window, 10,000 messages in calls of 1,000, Arrow updates) for each variant in turn, round
after round, each against the engine run just before it *and* one right after it, with
every figure of the run: CPU per process and per role, each partition's busy wall time,
the steps matched on two threads.

    RANKCAST_STATE_DIR=/tmp/x PYTHONPATH=$PWD python scripts/two_part_probe.py --rounds 3 \\
        --variants main side-off

Variants: ``main`` (the cluster's defaults), ``side-on`` / ``side-off`` (each partition's
match on a second thread, ``options["solo_side"]``), ``no-settle`` (the defaults, without the
checkpoint that the bench now takes right before the timed stream: a durable cluster's
periodic checkpoint may then begin inside it). One JSON line per run on stdout, with the
cores the rest of the machine took during the engine's stream and the cluster's.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

VARIANTS = {"main": {}, "side-on": {"solo_side": True}, "side-off": {"solo_side": False},
            "no-settle": {}}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variants", nargs="+", default=["side-on", "side-off"], choices=list(VARIANTS))
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=2)
    a = ap.parse_args()

    import rankcast as rc
    from rankcast.actors import bench as B
    from rankcast.config import local_ray_options
    from rankcast.bench._common import build_workload
    import ray

    window, subs, batch = 20_000, 20_000, 1_000
    work = build_workload("geonames", window + a.messages, subs, 0)
    cfg = rc.EngineConfig(bounds=work.bounds, window=window, vocabulary=work.vocab)
    small = build_workload("geonames", 600, 200, 0)
    wcfg = rc.EngineConfig(bounds=small.bounds, window=300, vocabulary=small.vocab)
    B._drive(rc.Engine(wcfg), small, 300, 300, 100, pipelined=False, updates="arrow")
    _, same_topk = B._engine_reference(work, cfg, window, a.messages, batch, 0, lambda m: None, 1)
    ray.init(**local_ray_options(log_to_driver=False))
    log = lambda m: print(m, file=sys.stderr, flush=True)
    for rnd in range(a.rounds):
        order = a.variants if rnd % 2 == 0 else a.variants[::-1]
        for v in order:
            load0 = os.getloadavg()[0]
            B.SETTLE_CHECKPOINT = v != "no-settle"     # main before this branch: no checkpoint first
            r = B._ray_run(work, cfg, window, a.messages, batch, 1_024, None, same_topk, "arrow", v,
                           "hash", a.partitions, VARIANTS[v], "streamed", log)
            after = B._drive(rc.Engine(cfg), work, window, a.messages, batch, pipelined=False,
                             updates="arrow")["throughput"]
            c = r["cpu_us_per_message"]
            row = {"round": rnd, "variant": v, "load": [load0, os.getloadavg()[0]],
                   "msg_s": round(r["throughput"]), "engine_before": round(r["engine_throughput"]),
                   "engine_after": round(after), "vs_before": round(r["vs_engine"], 3),
                   "vs_mean": round(r["throughput"] / ((r["engine_throughput"] + after) / 2), 3),
                   "seconds": round(r["seconds"], 4), "topk_equal": r["topk_equal_engine"],
                   "side": [r["side_steps"], r["side_threaded_steps"]],
                   "checkpoints": r["checkpoints"], "other_cores": r["other_cores"],
                   "busy_wall": {k: [round(x, 3) for x in v] for k, v in r["busy"].items() if v},
                   "engine_cpu": round(c["engine"], 1), "total_cpu": round(c["total"], 1),
                   "roles_busy": c["roles_busy"], "processes": c["processes"],
                   "client_thread": round(c["client_thread"], 1), "t": time.strftime("%H:%M:%S")}
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

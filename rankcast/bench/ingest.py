"""``rankcast bench ingest``: the Spark path through RayDP, timed.

Writes the workload's subscription and message tables to Parquet, starts ``rc.Cluster``,
then times ``Cluster.load_subscriptions(path)`` (bulk load through Spark) and
``Cluster.replay(path)`` (the message table published in order). JSON on stdout and in
``--out``/ingest.json.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from ._common import write_json

__all__ = ["add_arguments", "main"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default="geonames", choices=["geonames", "tweets", "yelp"])
    p.add_argument("--subs", type=int, default=50_000)
    p.add_argument("--messages", type=int, default=50_000)
    p.add_argument("--window", type=int, default=20_000)
    p.add_argument("--policy", default="prefix")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--address", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="out/bench")


def main(args: argparse.Namespace) -> dict:
    import rankcast as rc
    from ..ingest import datasets

    try:
        Cluster = rc.Cluster
    except (ImportError, AttributeError) as e:
        raise SystemExit(f"rankcast bench ingest: rc.Cluster is not available ({e})") from None
    print(f"[bench ingest] {args.dataset}: {args.messages} messages, {args.subs} subscriptions",
          file=sys.stderr, flush=True)
    bounds, msgs, subs, vocab = datasets.dataset(args.dataset, args.messages, args.subs, args.seed)
    res: dict = {}
    with tempfile.TemporaryDirectory(prefix="rankcast-ingest-") as tmp:
        sp = datasets.write_parquet(subs, Path(tmp) / "subscriptions.parquet")
        mp = datasets.write_parquet(msgs, Path(tmp) / "messages.parquet")
        cfg = rc.EngineConfig(bounds=bounds, window=args.window, vocabulary=vocab)
        ccfg = rc.ClusterConfig(engine=cfg, policy=args.policy, partitions=args.partitions,
                                name="rankcast-bench-ingest")
        t0 = time.perf_counter()
        cl = Cluster.start(ccfg, address=args.address)
        res["start_seconds"] = time.perf_counter() - t0
        try:
            t0 = time.perf_counter()
            cl.load_subscriptions(str(sp))
            dt = time.perf_counter() - t0
            res["load_subscriptions"] = {"rows": subs.num_rows, "seconds": dt,
                                         "rows_per_s": subs.num_rows / dt}
            t0 = time.perf_counter()
            cl.replay(str(mp))
            cl.flush()
            dt = time.perf_counter() - t0
            res["replay"] = {"rows": msgs.num_rows, "seconds": dt, "rows_per_s": msgs.num_rows / dt}
            res["stats"] = json.loads(json.dumps(cl.stats(), default=str))
        finally:
            cl.shutdown()
    report = {"benchmark": "ingest", "config": {k: v for k, v in vars(args).items() if k != "func"},
              "results": res}
    write_json(report, Path(args.out) / "ingest.json")
    print(json.dumps(report, indent=2))
    return report

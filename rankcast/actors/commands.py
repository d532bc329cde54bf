"""``rankcast run``: start (or attach to) a cluster from a YAML config and stream a source
through it, the way Ray users submit work::

    ray job submit --address http://HEAD:8265 -- rankcast run --config cluster.yaml \\
        --subscriptions subs.parquet --source messages.parquet

Config file (every key but ``engine.bounds`` optional; unknown keys are errors)::

    engine:
      bounds: [-180, -90, 180, 90]
      window: 100000            # or window_seconds: 3600
      vocabulary: vocab.json    # a Vocabulary.to_dict() JSON file (optional)
      leaf_capacity: 1000
    cluster:
      name: rankcast
      namespace: rankcast
      policy: prefix            # hash | location | keyword | prefix | spatial-first | keyword-first
      partitions: 4
      window_shards: 2
      distributors: 1
      aggregators: 1
      batch_size: 1024
      max_in_flight: 8
      actor_cpus: 0.25
      options: {l1: 2}
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import fields
from pathlib import Path

from ..config import local_ray_options

__all__ = ["register", "cmd_run", "load_cluster_config", "cluster_config_from_dict", "main"]


def cluster_config_from_dict(d: dict, base: Path | None = None):
    """A ClusterConfig from the parsed YAML mapping (see the module docstring)."""
    from ..config import ClusterConfig, EngineConfig
    from ..errors import InvalidInput
    from ..text import Vocabulary

    if not isinstance(d, dict):
        raise InvalidInput("cluster config: expected a mapping with 'engine' and 'cluster' sections")
    unknown = set(d) - {"engine", "cluster"}
    if unknown:
        raise InvalidInput(f"cluster config: unknown section(s) {sorted(unknown)}")
    eng = dict(d.get("engine") or {})
    clu = dict(d.get("cluster") or {})
    e_names = {f.name for f in fields(EngineConfig)}
    c_names = {f.name for f in fields(ClusterConfig)} - {"engine"}
    for section, given, known in (("engine", eng, e_names), ("cluster", clu, c_names)):
        bad = set(given) - known
        if bad:
            raise InvalidInput(f"cluster config: section '{section}': unknown field(s) {sorted(bad)}")
    if "bounds" not in eng:
        raise InvalidInput("cluster config: section 'engine': field 'bounds' is required")
    voc = eng.get("vocabulary")
    if voc is not None:
        p = Path(voc)
        if base is not None and not p.is_absolute():
            p = base / p
        with open(p) as f:
            eng["vocabulary"] = Vocabulary.from_dict(json.load(f))
    if "window_seconds" in eng and "window" not in eng:
        eng["window"] = None
    cfg = EngineConfig(**eng)
    return ClusterConfig(engine=cfg, **clu)


def load_cluster_config(path):
    """Read a YAML cluster config file into a ClusterConfig."""
    import yaml

    path = Path(path)
    with open(path) as f:
        d = yaml.safe_load(f)
    return cluster_config_from_dict(d, base=path.parent)


def register(subparsers) -> None:
    """Add ``run`` to an argparse subparsers object."""
    p = subparsers.add_parser("run", help="start or attach a cluster from a YAML config and stream a source",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.set_defaults(func=cmd_run)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="YAML cluster config")
    p.add_argument("--source", help="message table to publish in order (Parquet, CSV, JSONL)")
    p.add_argument("--subscriptions", help="subscription table to bulk-load first")
    p.add_argument("--address", default=None,
                   help="Ray address (default: the job's cluster, or a new local Ray)")
    p.add_argument("--rate", type=float, default=None, help="messages per second (default: unpaced)")
    p.add_argument("--batch-rows", type=int, default=10_000)
    p.add_argument("--topk", type=int, nargs="*", default=[], metavar="ID",
                   help="print the top-k of these subscriptions at the end")
    p.add_argument("--keep", action="store_true",
                   help="leave a cluster this command started running (default: shut it down)")
    p.add_argument("--stop", action="store_true", help="shut the cluster down at the end even if attached")
    p.add_argument("--out", default=None, help="also write the JSON summary to this file")


def cmd_run(args) -> int:
    import os

    import ray

    from .cluster import Cluster

    ccfg = load_cluster_config(args.config)
    address = args.address
    if address is None and (os.environ.get("RAY_ADDRESS") or _in_ray_job()):
        address = "auto"
    if not ray.is_initialized():
        if address is None:
            ray.init(**local_ray_options(namespace=ccfg.namespace, log_to_driver=False))
        else:
            ray.init(address=address, namespace=ccfg.namespace, log_to_driver=False)
    started = False
    try:
        cl = Cluster.attach(ccfg.name, namespace=ccfg.namespace)
    except RuntimeError:
        cl = Cluster.start(ccfg)
        started = True
    out: dict = {"cluster": ccfg.name, "started": started}
    t0 = time.perf_counter()
    try:
        if args.subscriptions:
            out["subscriptions_loaded"] = cl.load_subscriptions(args.subscriptions)
        if args.source:
            out["replay"] = cl.replay(args.source, rate=args.rate, batch_rows=args.batch_rows)
        st = cl.stats()
        out["stats"] = {k: st[k] for k in ("subscriptions", "window", "published", "policy", "partitions",
                                           "replication_ratio", "communication_cost", "throughput",
                                           "reevaluations", "reallocations")}
        if args.topk:
            out["topk"] = {str(i): cl.topk(i) for i in args.topk}
        out["seconds"] = time.perf_counter() - t0
    finally:
        if (started and not args.keep) or args.stop:
            cl.shutdown()
    text = json.dumps(out, indent=2, default=str)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


def _in_ray_job() -> bool:
    import os
    return bool(os.environ.get("RAY_JOB_ID") or os.environ.get("RAY_JOB_SUBMISSION_ID"))


def main(argv: list[str] | None = None) -> int:
    """``python -m rankcast.actors.commands run ...`` (same as ``rankcast run``)."""
    parser = argparse.ArgumentParser(prog="rankcast")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())

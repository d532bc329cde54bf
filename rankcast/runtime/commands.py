"""``rankcast run``: start (or attach to) a cluster from a YAML config and stream a source
through it, the way Ray users submit work::

    ray job submit --address http://HEAD:8265 -- rankcast run --config cluster.yaml \\
        --subscriptions subs.parquet --source messages.parquet

Config file (every key but ``engine.bounds`` optional; unknown keys are errors, as are a
file that does not parse and a value of the wrong type: the command then prints one line
naming the file, the section and the field, and exits with status 2)::

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
      coalesce: 4096
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

from rankcast.config import local_ray_options

__all__ = ["register", "cmd_run", "load_cluster_config", "cluster_config_from_dict", "main"]


def cluster_config_from_dict(d: dict, base: Path | None = None):
    """A ClusterConfig from the parsed YAML mapping (see the module docstring)."""
    from rankcast.config import ClusterConfig, EngineConfig
    from rankcast.errors import InvalidInput
    from rankcast.kinds.spatial.text import Vocabulary

    if not isinstance(d, dict):
        raise InvalidInput("cluster config: expected a mapping with 'engine' and 'cluster' sections")
    unknown = set(d) - {"engine", "cluster"}
    if unknown:
        raise InvalidInput(f"cluster config: unknown section(s) {sorted(unknown)}")
    for section in ("engine", "cluster"):
        if not isinstance(d.get(section) or {}, dict):
            raise InvalidInput(f"cluster config: section '{section}': expected a mapping of field to "
                               f"value, got {d[section]!r}")
    eng = dict(d.get("engine") or {})
    clu = dict(d.get("cluster") or {})
    e_names = {f.name for f in fields(EngineConfig)}
    c_names = {f.name for f in fields(ClusterConfig)} - {"engine"}
    for section, given, known, cls in (("engine", eng, e_names, EngineConfig),
                                       ("cluster", clu, c_names, ClusterConfig)):
        bad = set(given) - known
        if bad:
            raise InvalidInput(f"cluster config: section '{section}': unknown field(s) {sorted(bad)}")
        _check_types(section, given, cls)
    if "bounds" not in eng:
        raise InvalidInput("cluster config: section 'engine': field 'bounds' is required")
    voc = eng.get("vocabulary")
    if voc is not None:
        p = Path(voc)
        if base is not None and not p.is_absolute():
            p = base / p
        try:
            with open(p) as f:
                eng["vocabulary"] = Vocabulary.from_dict(json.load(f))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise InvalidInput(f"cluster config: section 'engine': field 'vocabulary': {p}: not a "
                               f"readable vocabulary file ({type(e).__name__}: {e})") from None
    if "window_seconds" in eng and "window" not in eng:
        eng["window"] = None
    try:
        cfg = EngineConfig(**eng)
    except InvalidInput as e:
        raise InvalidInput(f"cluster config: section 'engine': {e}") from None
    try:
        return ClusterConfig(engine=cfg, **clu)
    except InvalidInput as e:
        raise InvalidInput(f"cluster config: section 'cluster': {e}") from None
    except TypeError as e:   # a check of ClusterConfig that meets a value of another type
        raise InvalidInput(f"cluster config: section 'cluster': {e}") from None


def _check_types(section: str, given: dict, cls) -> None:
    """Each given value has the type of its field's default (an int where a float is due, None
    where the field allows it): the config classes' range checks assume the type."""
    from dataclasses import MISSING

    from rankcast.errors import InvalidInput

    for f in fields(cls):
        if f.name not in given:
            continue
        v = given[f.name]
        d = f.default if f.default is not MISSING else (f.default_factory() if f.default_factory is not MISSING
                                                         else None)
        if d is None or (v is None and "None" in str(f.type)):
            continue
        want = float if isinstance(d, float) else type(d)
        ok = isinstance(v, bool) == isinstance(d, bool) and \
            (isinstance(v, want) or (want is float and isinstance(v, int)))
        if not ok:
            raise InvalidInput(f"cluster config: section '{section}': field '{f.name}': expected "
                               f"{'a mapping' if want is dict else want.__name__}, got {v!r}")


def load_cluster_config(path):
    """Read a YAML cluster config file into a ClusterConfig; every error is an InvalidInput
    naming the file (and the line of a YAML syntax error)."""
    import yaml

    from rankcast.errors import InvalidInput

    path = Path(path)
    try:
        with open(path) as f:
            d = yaml.safe_load(f)
    except OSError as e:
        raise InvalidInput(f"{path}: cannot read the cluster config: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = getattr(e, "problem", None) or str(e)
        raise InvalidInput(f"{path}{where}: not valid YAML: {what}") from None
    try:
        return cluster_config_from_dict(d, base=path.parent)
    except InvalidInput as e:
        raise InvalidInput(f"{path}: {e}") from None


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

    from rankcast.errors import CommandError
    from rankcast.ingest.commands import load_file, open_source, replay_file

    ccfg = load_cluster_config(args.config)
    # bad files fail before Ray is reached or a cluster started
    subs = open_source(args.subscriptions, "subscription") if args.subscriptions else None
    source = open_source(args.source, "message") if args.source else None

    from rankcast.common.extras import require

    ray = require("ray", "rankcast run")

    from .cluster import Cluster

    address = args.address
    if address is None and (os.environ.get("RAY_ADDRESS") or _in_ray_job()):
        address = "auto"
    if not ray.is_initialized():
        if address is None:
            ray.init(**local_ray_options(namespace=ccfg.namespace, log_to_driver=False))
        else:
            try:
                ray.init(address=address, namespace=ccfg.namespace, log_to_driver=False)
            except ConnectionError as e:
                raise CommandError(f"cannot reach Ray at {address!r}: {e}") from None
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
            out["subscriptions_loaded"] = load_file(cl, args.subscriptions, subs, 100_000)
        if args.source:
            out["replay"] = replay_file(cl, args.source, source, args.rate, args.batch_rows)
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
    """``python -m rankcast.runtime.commands run ...`` (same as ``rankcast run``)."""
    parser = argparse.ArgumentParser(prog="rankcast")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())

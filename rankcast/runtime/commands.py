"""``rankcast run``: start (or attach to) a cluster of any kind from a YAML config (or flags)
and stream a source through it, the way Ray users submit work::

    ray job submit --address http://HEAD:8265 -- rankcast run --config cluster.yaml \\
        --subscriptions subs.parquet --source messages.parquet

Config file (unknown keys are errors, as are a file that does not parse and a value of the
wrong type: the command then prints one line naming the file, the section and the field,
and exits with status 2). ``kind`` names a registered kind (:mod:`rankcast.runtime.registry`:
``spatial``, the default, ``matching`` or ``range``); ``engine`` holds the fields of that
kind's config class (``rc.EngineConfig``, ``rc.MatchConfig``, ``rc.RangeConfig``), of which
only the spatial kind's ``bounds`` is required::

    kind: spatial               # spatial | matching | range
    engine:
      bounds: [-180, -90, 180, 90]
      window: 100000            # or window_seconds: 3600
      vocabulary: vocab.json    # a Vocabulary.to_dict() JSON file (optional)
      leaf_capacity: 1000
    cluster:
      name: rankcast
      namespace: rankcast
      policy: prefix            # the kind's: hash | location | keyword | prefix | spatial-first | keyword-first
      partitions: 4
      window_shards: 2
      distributors: 1
      aggregators: 1
      batch_size: 1024
      max_in_flight: 8
      coalesce: 4096
      actor_cpus: 0.25
      placement: spread         # partitions and shards over the Ray nodes | pack
      control_node: head        # coordinator, distributors, aggregators: head | any | a custom resource
      options: {l1: 2}

A ranked-matching cluster, for example, needs no file: ``rankcast run --kind matching --set
engine.k=5 --set cluster.partitions=2 --keep`` starts one and leaves it running, for
``rankcast load expressions`` and ``rankcast replay``. ``--set SECTION.FIELD=VALUE`` (the
value read as YAML) overrides the file's field, and ``--kind`` its kind.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import MISSING, fields
from pathlib import Path

from rankcast.config import local_ray_options

__all__ = ["register", "cmd_run", "load_cluster_config", "cluster_config_from_dict", "main"]


def cluster_config_from_dict(d: dict, base: Path | None = None, kind: str | None = None):
    """A ClusterConfig from the parsed YAML mapping (see the module docstring); ``kind``
    replaces the mapping's ``kind``."""
    from rankcast.config import ClusterConfig
    from rankcast.errors import InvalidInput

    from . import registry

    if not isinstance(d, dict):
        raise InvalidInput("cluster config: expected a mapping with 'engine' and 'cluster' sections")
    unknown = set(d) - {"kind", "engine", "cluster"}
    if unknown:
        raise InvalidInput(f"cluster config: unknown section(s) {sorted(unknown)}")
    name = kind if kind is not None else d.get("kind") or "spatial"
    if name not in registry.names():
        raise InvalidInput(f"cluster config: field 'kind': must be one of {list(registry.names())}, got {name!r}")
    entry = registry.by_name(name)
    cls = entry.config_class()
    for section in ("engine", "cluster"):
        if not isinstance(d.get(section) or {}, dict):
            raise InvalidInput(f"cluster config: section '{section}': expected a mapping of field to "
                               f"value, got {d[section]!r}")
    eng = dict(d.get("engine") or {})
    clu = dict(d.get("cluster") or {})
    e_names = {f.name for f in fields(cls)}
    c_names = {f.name for f in fields(ClusterConfig)} - {"engine"}
    for section, given, known, c in (("engine", eng, e_names, cls), ("cluster", clu, c_names, ClusterConfig)):
        bad = set(given) - known
        if bad:
            raise InvalidInput(f"cluster config: section '{section}': unknown field(s) {sorted(bad)}")
        _check_types(section, given, c)
    for f in fields(cls):
        if f.default is MISSING and f.default_factory is MISSING and f.name not in eng:
            raise InvalidInput(f"cluster config: section 'engine': field '{f.name}' is required")
    for field_name, make in entry.file_fields.items():
        if eng.get(field_name) is None:
            continue
        p = Path(eng[field_name])
        if base is not None and not p.is_absolute():
            p = base / p
        try:
            with open(p) as f:
                eng[field_name] = registry.load(make)(json.load(f))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise InvalidInput(f"cluster config: section 'engine': field '{field_name}': {p}: not a "
                               f"readable {field_name} file ({type(e).__name__}: {e})") from None
    try:
        cfg = cls(**eng)
    except InvalidInput as e:
        raise InvalidInput(f"cluster config: section 'engine': {e}") from None
    except TypeError as e:   # a check of the config that meets a value of another type
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
        # a field of several types (``int | str``) takes a value of any of them
        ok = ok or (not isinstance(v, bool) and type(v).__name__ in str(f.type).replace("|", " ").split())
        if not ok:
            raise InvalidInput(f"cluster config: section '{section}': field '{f.name}': expected "
                               f"{'a mapping' if want is dict else want.__name__}, got {v!r}")


def load_cluster_config(path=None, *, kind: str | None = None, sets: list[str] | None = None):
    """Read a YAML cluster config file (None: none, every field from ``sets``) into a
    ClusterConfig; ``kind`` replaces the file's kind, ``sets`` ("SECTION.FIELD=VALUE", the
    value read as YAML) its fields. Every error is an InvalidInput naming the file (and the
    line of a YAML syntax error)."""
    import yaml

    from rankcast.errors import InvalidInput

    d: dict = {}
    if path is not None:
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
    if sets:
        if not isinstance(d, dict):
            d = {"engine": d}            # refused below, as the file's
        else:
            d = {k: dict(v) if isinstance(v, dict) else v for k, v in d.items()}
        for item in sets:
            key, eq, text = item.partition("=")
            section, dot, name = key.partition(".")
            if not eq or not dot or section not in ("engine", "cluster") or not name:
                raise InvalidInput(f"--set {item!r}: expected engine.FIELD=VALUE or cluster.FIELD=VALUE")
            try:
                value = yaml.safe_load(text)
            except yaml.YAMLError:
                value = text
            if not isinstance(d.get(section) or {}, dict):
                raise InvalidInput(f"--set {item!r}: section '{section}' is not a mapping")
            d[section] = {**(d.get(section) or {}), name: value}
    try:
        return cluster_config_from_dict(d, base=path.parent if path is not None else None, kind=kind)
    except InvalidInput as e:
        raise InvalidInput(f"{path}: {e}" if path is not None else str(e)) from None


def register(subparsers) -> None:
    """Add ``run`` to an argparse subparsers object."""
    p = subparsers.add_parser("run", help="start or attach a cluster of any kind from a YAML config (or flags) and "
                                          "stream a source",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.set_defaults(func=cmd_run)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=None, help="YAML cluster config (default: none, the fields from --set)")
    p.add_argument("--kind", default=None, help="the kind of the cluster (default: the config's, else spatial)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                   help="a config field (engine.* or cluster.*), over the file's; repeatable")
    p.add_argument("--source", help="the kind's stream to publish in order (messages, events, object updates: "
                                    "Parquet, CSV, JSONL)")
    p.add_argument("--subscriptions", help="the kind's subscription table to bulk-load first (subscriptions, "
                                           "expressions, range subscriptions)")
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

    from . import registry

    ccfg = load_cluster_config(args.config, kind=args.kind, sets=args.sets)
    kind = registry.entry(ccfg.engine)
    # bad files fail before Ray is reached or a cluster started
    subs = open_source(args.subscriptions, kind.subscription_table.name) if args.subscriptions else None
    source = open_source(args.source, kind.publish_table.name) if args.source else None

    from rankcast.common.extras import require

    from .cluster import Cluster

    started = False
    if ccfg.options.get("runtime") == "inproc":       # every role in this process: no Ray
        cl = Cluster.start(ccfg)
        started = True
    else:
        ray = require("ray", "rankcast run")

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
        try:
            cl = Cluster.attach(ccfg.name, namespace=ccfg.namespace)
        except RuntimeError:
            cl = Cluster.start(ccfg)
            started = True
        if not started and cl.kind != kind.name:
            raise CommandError(f"cluster {ccfg.name!r} in namespace {ccfg.namespace!r} runs and serves "
                               f"{registry.by_name(cl.kind).serves}, not {kind.label}: shut it down or "
                               f"give another cluster.name")
    out: dict = {"cluster": ccfg.name, "kind": kind.name, "started": started}
    t0 = time.perf_counter()
    try:
        if args.subscriptions:
            out["subscriptions_loaded"] = load_file(cl, args.subscriptions, subs, 100_000)
        if args.source:
            out["replay"] = replay_file(cl, args.source, source, args.rate, args.batch_rows)
        st = cl.stats()
        out["stats"] = {k: st[k] for k in ("subscriptions", "window", "published", "policy", "partitions",
                                           "replication_ratio", "communication_cost", "throughput",
                                           "reevaluations", "reallocations") if k in st}
        if args.topk:
            out["topk"] = {str(i): cl.topk(i) for i in args.topk}
        out["seconds"] = time.perf_counter() - t0
    finally:
        if (started and (not args.keep or cl._inproc)) or args.stop:
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

"""CLI subcommands of the Spark path: ``load``, ``replay``, ``evaluate``, ``deliver``.

``rankcast.cli`` calls :func:`register` with its subparsers; every subcommand stores its
handler as ``func`` (``args.func(args)`` returns the exit code) and prints a JSON summary.
The Cluster and Spark are imported inside the handlers, so ``rankcast --help`` stays fast.

Bad input fails before anything is applied and names where it is: a missing file, or a CSV
or JSONL row that does not type, before the cluster is reached; a row the cluster rejects
with its line in the file (:func:`rankcast.ingest.readers.locate`). ``rankcast.cli`` prints
the error as one line and exits with status 2.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rankcast.errors import CommandError, InvalidInput
from rankcast.runtime import registry

__all__ = ["register", "cmd_deliver", "cmd_load", "cmd_replay", "cmd_evaluate", "cmd_evaluate_matching", "cmd_evaluate_range",
           "open_source",
           "load_file", "replay_file"]


def _cluster_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster", default="rankcast", help="name of the running cluster (default rankcast)")
    p.add_argument("--namespace", default="rankcast", help="Ray namespace of the cluster")
    p.add_argument("--address", default=None, help="Ray address (default: auto)")


def register(subparsers) -> None:
    """Add ``load``, ``replay``, ``evaluate`` and ``deliver`` to an argparse subparsers object."""
    p = subparsers.add_parser("load", help="bulk-load a table into a running cluster")
    p.add_argument("what", choices=[k.load_name for k in registry.kinds()],
                   help="what the table holds: " + "; ".join(
                       f"{k.load_name}: {k.subscription_table.name}s, a {k.label} cluster" for k in registry.kinds()))
    p.add_argument("path", help="Parquet file or folder, CSV or JSONL file")
    p.add_argument("--batch-rows", type=int, default=100_000)
    _cluster_args(p)
    p.set_defaults(func=cmd_load)

    p = subparsers.add_parser("replay", help="publish a message (or, to a ranked-matching cluster, an event; to "
                                             "a range top-k cluster, an object update) table into a running "
                                             "cluster, in order")
    p.add_argument("path", help="Parquet file or folder, CSV or JSONL file")
    p.add_argument("--rate", type=float, default=None, help="messages per second (default: as fast as it takes)")
    p.add_argument("--batch-rows", type=int, default=10_000)
    _cluster_args(p)
    p.set_defaults(func=cmd_replay)

    p = subparsers.add_parser(
        "evaluate", help="exact top-k by brute force in Spark vs the live system, Table 3, policy costs",
        description="Without --live, an Engine subscribes the subscriptions and publishes the "
                    "messages, then is evaluated. With --live, the running cluster named by "
                    "--cluster is evaluated; it must have received exactly these tables "
                    "(subscriptions first, then the messages in order).")
    src = p.add_argument_group("workload (paths, or a generated dataset)")
    src.add_argument("--subscriptions", help="subscription table path")
    src.add_argument("--messages", help="message table path (the published stream, in order)")
    src.add_argument("--dataset", choices=["geonames", "tweets", "yelp", "dense"], help="generate the workload")
    src.add_argument("--expressions", help="ranked matching: expression table path (Parquet or JSONL)")
    src.add_argument("--events", help="ranked matching: event table path (Parquet or JSONL), in order")
    src.add_argument("--ranges", help="range top-k: range subscription table path")
    src.add_argument("--updates", help="range top-k: object update table path (the published stream, in order)")
    src.add_argument("--n-messages", type=int, default=20_000)
    src.add_argument("--n-subscriptions", type=int, default=5_000)
    src.add_argument("--seed", type=int, default=0)
    eng = p.add_argument_group("engine (without --live)")
    eng.add_argument("--bounds", type=float, nargs=4, metavar=("XMIN", "YMIN", "XMAX", "YMAX"))
    eng.add_argument("--window", type=int, default=10_000)
    eng.add_argument("--window-seconds", type=float, default=None)
    eng.add_argument("--scoring", choices=["static", "relaxed", "weighted"], default="weighted",
                     help="ranked matching: the Matcher's scoring")
    eng.add_argument("--k", type=int, default=None, help="ranked matching: expressions per event "
                     "(default: MatchConfig's, or the cluster's)")
    eng.add_argument("--index", default="auto", help="ranked matching: the Matcher's index")
    eng.add_argument("--method", default=None, help="range top-k: the RangeEngine's method (default: RangeConfig's)")
    p.add_argument("--live", action="store_true", help="evaluate the running cluster --cluster")
    _cluster_args(p)
    p.add_argument("--sample", type=int, default=1000, help="subscriptions checked (0: all)")
    p.add_argument("--partitions", type=int, default=None,
                   help="partitions for the policy cost estimates (default: the cluster's, or 4)")
    p.add_argument("--no-policies", action="store_true", help="skip the policy cost estimates")
    p.add_argument("--out", type=Path, default=None, help="write the JSON report here too")
    p.set_defaults(func=cmd_evaluate)

    p = subparsers.add_parser(
        "deliver", help="write a running cluster's delivery stream as Parquet files (docs/streaming.md)",
        description="Follow the cluster's deliveries and write them under OUT as "
                    "updates-<first>-<last>.parquet, one file per range of stream positions, each "
                    "written atomically. Run again after a crash: it resumes after the last file, "
                    "with no gap and no duplicate.")
    p.add_argument("out", help="folder of the Parquet files")
    p.add_argument("--from-position", type=int, default=1,
                   help="where the first file starts when OUT holds none (default 1: the stream's start)")
    p.add_argument("--subscriptions", type=int, nargs="*", default=None, metavar="ID",
                   help="only these subscriptions' updates (default: all)")
    p.add_argument("--max-rows", type=int, default=100_000, help="rows per file at most")
    p.add_argument("--max-seconds", type=float, default=1.0,
                   help="a file is written at most this long after its first delivery")
    p.add_argument("--timeout", type=float, default=None,
                   help="stop after this many seconds without a delivery (default: run until stopped)")
    _cluster_args(p)
    p.set_defaults(func=cmd_deliver)


def _attach(args):
    from rankcast.runtime.cluster import Cluster

    try:
        return Cluster.attach(args.cluster, args.address, namespace=args.namespace)
    except (RuntimeError, ConnectionError) as e:
        raise CommandError(f"cannot attach to cluster {args.cluster!r}: {e}") from None


def open_source(path: str, kind: str):
    """A table path of the command line, checked before any cluster is reached: a missing
    file fails here; a CSV or JSONL file is read and typed now (read whole either way), its
    bad rows named by line; a Parquet file or folder, or a remote path, is returned as it is
    for the load to stream. ``kind``: a registered table kind ("subscription", "message",
    "expression", "event", "range subscription", "object update"; nested rows such as
    expressions and events are typed as they stream), or "stream" (a replay: the kind whose
    stream the file holds is told by its columns, :func:`rankcast.runtime.registry.publish_table_of`)."""
    from .readers import conform_table
    from .sources import _suffix, locate
    from .tables import read_table

    s = str(path)
    if "://" in s and not s.startswith("file://"):
        return s
    p = Path(s.removeprefix("file://"))
    if not p.exists():
        raise InvalidInput(f"{kind.split()[0] if kind != 'stream' else 'message'} table: no such file or folder: {s}")
    if p.is_dir() or _suffix(p) in (".parquet", ".pq"):
        return s
    spec = registry.table_spec(kind)
    if spec is not None and spec.nested:
        return s            # typed while it streams: a bad row is named with its line
    try:
        if kind == "stream":
            table = read_table(s, "message")
            _, spec = registry.publish_table_of(table)
            return s if spec.nested else spec.conformed(table)
        return conform_table(read_table(s, kind), kind)
    except InvalidInput as e:
        raise locate(s, e) from None


def load_file(cl, path: str, source, batch_rows: int) -> int:
    """Bulk-load the subscription table at ``path`` (atomic), ``source`` what
    :func:`open_source` made of it; a rejected row is named with its line (or Parquet row)
    in the file."""
    from .readers import locate

    try:
        return cl.load_subscriptions(source, batch_rows=batch_rows)
    except InvalidInput as e:     # positions count from the table's first row
        raise locate(path, e) from None


def replay_file(cl, path: str, source, rate: float | None, batch_rows: int) -> dict:
    """Replay the message table at ``path`` (``source``: what :func:`open_source` made of
    it); a rejected row is named with its line (or Parquet row) in the file. Each batch is
    one atomic publish: the batches before the bad one stay published."""
    from .readers import locate

    try:
        return cl.replay(source, rate=rate, batch_rows=batch_rows)
    except InvalidInput as e:      # the replay names the row by its position in the table
        raise locate(path, e) from None


def _print(summary: dict, out: Path | None = None) -> None:
    text = json.dumps(summary, indent=2, default=float)
    print(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")


def _check_kind(cl, want: str, what: str) -> None:
    """Refuse a table for a cluster of another kind (``want``: the kind the table is for)."""
    if cl.kind != want:
        raise CommandError(f"cluster {cl.name!r} serves {registry.by_name(cl.kind).serves}: it takes no {what}")


def _load_kind(what: str):
    """The kind whose subscriptions ``rankcast load <what>`` loads."""
    return next(k for k in registry.kinds() if k.load_name == what)


def cmd_deliver(args) -> int:
    from .streaming import DeliveryWriter

    cl = _attach(args)
    w = DeliveryWriter(cl, args.out, subscription_ids=args.subscriptions, from_position=args.from_position,
                       max_rows=args.max_rows, max_seconds=args.max_seconds)
    try:
        summary = w.run(timeout=args.timeout)
    except KeyboardInterrupt:
        summary = {"files": w.files_written, "rows": w.rows_written, "position": w.position}
    _print(dict(summary, out=str(args.out)))
    return 0


def cmd_load(args) -> int:
    kind = _load_kind(args.what)
    source = open_source(args.path, kind.subscription_table.name)  # fails before the cluster
    cl = _attach(args)
    _check_kind(cl, kind.name, args.what)
    t0 = time.perf_counter()
    n = load_file(cl, args.path, source, args.batch_rows)
    dt = time.perf_counter() - t0
    _print({"loaded": n, "seconds": round(dt, 3), "rows_per_second": round(n / dt, 1) if dt else None})
    return 0


def cmd_replay(args) -> int:
    source = open_source(args.path, "stream")    # a bad file fails before the cluster is reached
    cl = _attach(args)
    import pyarrow as pa

    if isinstance(source, pa.Table):     # a CSV or JSONL file typed here: whose stream it is
        kind, spec = registry.publish_table_of(source)
        _check_kind(cl, kind.name, f"{spec.name}s")
    res = replay_file(cl, args.path, source, args.rate, args.batch_rows)
    secs = res.get("seconds") or 0.0
    res["throughput"] = round(res["messages"] / secs, 1) if secs else None
    _print(res)
    return 0


def _workload(args):
    """(subs, msgs, bounds or None, vocabulary or None) from paths or a generated dataset."""
    if args.dataset:
        from .datasets import dataset
        bounds, msgs, subs, vocab = dataset(args.dataset, args.n_messages, args.n_subscriptions, args.seed)
        return subs, msgs, bounds, vocab
    if not (args.subscriptions and args.messages):
        raise CommandError("give --subscriptions and --messages, or --dataset")
    from .readers import read_messages, read_subscriptions
    return read_subscriptions(args.subscriptions), read_messages(args.messages), None, None


def _extent(subs, msgs) -> tuple[float, float, float, float]:
    import numpy as np
    xs = np.concatenate([subs.column("x").to_numpy(), msgs.column("x").to_numpy()])
    ys = np.concatenate([subs.column("y").to_numpy(), msgs.column("y").to_numpy()])
    pad = lambda lo, hi: (lo, hi) if hi > lo else (lo - 0.5, hi + 0.5)
    (x0, x1), (y0, y1) = pad(float(xs.min()), float(xs.max())), pad(float(ys.min()), float(ys.max()))
    return x0, y0, x1, y1


def _in_parts(call, table, step: int, path: str | None, done=lambda n: None) -> None:
    """``call`` on ``table`` in parts of ``step`` rows; an error names the row of the file."""
    from .readers import locate

    for a in range(0, table.num_rows, step):
        part = table.slice(a, step)
        try:
            call(part)
        except InvalidInput as e:
            raise (locate(path, e, a) if path else e) from None
        done(part.num_rows)


def cmd_evaluate_matching(args) -> int:
    """Ranked matching: every event's top-k from the live cluster (``--live``: the events are
    published to it; they change nothing there) or from an ``rc.Matcher`` fed the expression
    table, against the brute-force join in Spark."""
    import pyarrow as pa

    from rankcast import Matcher, MatchConfig
    from .bulk import iter_batches
    from .evaluate import compare_matches, exact_matches_spark
    from .session import get_spark

    if not (args.expressions and args.events):
        raise CommandError("ranked matching: give both --expressions and --events")
    open_source(args.expressions, "expression")         # a missing file fails before Spark starts
    open_source(args.events, "event")
    spark = get_spark()
    t0 = time.perf_counter()
    if args.live:
        target = _attach(args)
        _check_kind(target, "matching", "expressions")
        mcfg = target.config().engine
        k = args.k
    else:
        mcfg = MatchConfig(scoring=args.scoring, index=args.index, **({"k": args.k} if args.k else {}))
        target, k = Matcher(mcfg), None
        for table in iter_batches(args.expressions, 50_000, kind="expression", desc="subscribe"):
            target.subscribe(table)
    events, got = [], []
    for table in iter_batches(args.events, 5_000, kind="event", desc="publish"):
        events.append(table)
        got += target.publish(table, k=k)
    k = k or mcfg.k
    exact = exact_matches_spark(args.expressions, pa.concat_tables(events, promote_options="permissive"),
                                mcfg.scoring, k, spark)
    report = compare_matches(exact, got)
    report.update(kind="matching", scoring=mcfg.scoring, k=k, index=getattr(mcfg, "index", None),
                  target="cluster" if args.live else "matcher", seconds=round(time.perf_counter() - t0, 3))
    _print(report, args.out)
    return 0 if report["agreement"] == 100.0 else 1


def cmd_evaluate_range(args) -> int:
    """Range top-k: every (or ``--sample``) range subscription's top-k from the live cluster
    (``--live``: it must have received exactly these tables) or from an ``rc.RangeEngine``
    fed them, against the brute-force evaluation in Spark."""
    from rankcast import RangeConfig, RangeEngine
    from .evaluate import compare_ranges, exact_range_topk_spark
    from .range_tables import distinct_runs, read_object_updates, read_range_subscriptions
    from .session import get_spark

    if not (args.ranges and args.updates):
        raise CommandError("range top-k: give both --ranges and --updates")
    subs = read_range_subscriptions(args.ranges)          # bad tables fail before Spark starts
    ups = read_object_updates(args.updates)
    spark = get_spark()
    t0 = time.perf_counter()
    if args.live:
        target = _attach(args)
        _check_kind(target, "range", "range subscriptions")
        rcfg = target.config().engine
        published = target.stats()["published"]
        if published != ups.num_rows:
            raise CommandError(f"the cluster published {published} object updates, the table has "
                               f"{ups.num_rows}: it must have received exactly this stream")
    else:
        kw = {k: v for k, v in (("k", args.k), ("method", args.method)) if v}
        rcfg = RangeConfig(**kw)
        target = RangeEngine(rcfg)
        _in_parts(target.subscribe, subs, 100_000, args.ranges)
        for a, b in distinct_runs(ups.column("id").to_numpy()):
            _in_parts(target.publish, ups.slice(a, b - a), 100_000, args.updates)
    exact = exact_range_topk_spark(subs, ups, rcfg.k, spark, sample=args.sample or None, seed=args.seed)
    report = compare_ranges(exact, target)
    report.update(kind="range", method=rcfg.method, epsilon=rcfg.epsilon, k=rcfg.k,
                  target="cluster" if args.live else "range-engine", updates=ups.num_rows,
                  seconds=round(time.perf_counter() - t0, 3))
    _print(report, args.out)
    return 0 if report["agreement"] == 100.0 else 1


def cmd_evaluate(args) -> int:
    if args.expressions or args.events:
        return cmd_evaluate_matching(args)
    if args.ranges or args.updates:
        return cmd_evaluate_range(args)
    from tqdm.auto import tqdm

    from .evaluate import offline_evaluation
    from .session import get_spark
    from .vocab import fit_vocabulary_spark

    subs, msgs, bounds, vocab = _workload(args)
    spark = get_spark()
    sample = args.sample or None
    t0 = time.perf_counter()
    partitions = args.partitions or 4
    if args.live:
        target = _attach(args)
        ccfg = target.config()
        cfg = ccfg.engine
        partitions = args.partitions or ccfg.partitions
        published = target.stats().get("published")
        if published is not None and published != msgs.num_rows:
            raise CommandError(f"the cluster published {published} messages, the table has "
                               f"{msgs.num_rows}: it must have received exactly this stream")
    else:
        from rankcast import Engine, EngineConfig
        from rankcast.config import limits
        if vocab is None:
            vocab = fit_vocabulary_spark(msgs, spark)
        cfg = EngineConfig(bounds=tuple(args.bounds or bounds or _extent(subs, msgs)),
                           window=args.window, window_seconds=args.window_seconds, vocabulary=vocab)
        target = Engine(cfg)
        _in_parts(target.subscribe, subs, limits().max_items, args.subscriptions)
        with tqdm(total=msgs.num_rows, unit="msg", desc="publish", leave=False) as bar:
            _in_parts(target.publish, msgs, 10_000, args.messages, bar.update)
    report = offline_evaluation(target, subs, msgs, cfg, spark, sample=sample, seed=args.seed,
                                partitions=partitions, policies=not args.no_policies)
    report["seconds"] = round(time.perf_counter() - t0, 3)
    _print(report, args.out)
    return 0 if report["agreement"] == 100.0 else 1

"""Spark Structured Streaming in and out of a cluster, exactly once (docs/streaming.md).

In: :class:`ClusterSink` is a ``writeStream.foreachBatch`` function. It publishes each
micro-batch (messages, events or object updates; or subscriptions) to a named cluster with
:meth:`~rankcast.runtime.cluster.Cluster.apply_batch`, keyed by the sink's name and Spark's
batch id: the id is logged with the items, so a micro-batch that Spark runs again after a
crash or a restart from its checkpoint changes nothing the second time.

Out: :class:`DeliveryWriter` follows the cluster's delivery stream (``listen``) and writes it
as Parquet files, one per range of stream positions, ``updates-<first>-<last>.parquet``
(positions zero-padded, so names sort in stream order), each written to a hidden temporary
name and renamed. The files tile the stream: each starts one position after the previous
one ends, so a writer restarted after a crash resumes after the last file's range, with no
gap and no duplicate. Spark reads the folder as a table or with ``readStream`` (it skips the
hidden temporary names).
"""
from __future__ import annotations

import os
import re
import time
import uuid
from pathlib import Path
from typing import Iterable, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

from rankcast.errors import InvalidInput, NoCapacity
from rankcast.model import BatchResult

__all__ = ["ClusterSink", "DeliveryWriter", "spark_to_arrow", "delivery_files", "read_deliveries",
           "fold_deliveries"]

_FILE = re.compile(r"^updates-(\d{20})-(\d{20})\.parquet$")


def spark_to_arrow(df) -> pa.Table:
    """A Spark DataFrame's rows as one Arrow table, in the DataFrame's order (collected to
    the driver through Arrow: Spark 4's ``toArrow``, else the same path ``toPandas`` takes)."""
    if hasattr(df, "toArrow"):
        return df.toArrow()
    batches = df._collect_as_arrow()
    return pa.Table.from_batches(batches) if batches else _arrow_schema(df).empty_table()


def _arrow_schema(df) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema
    return to_arrow_schema(df.schema)


class ClusterSink:
    """A ``writeStream.foreachBatch`` function that applies each micro-batch to a cluster
    exactly once (docs/streaming.md)::

        sink = ClusterSink("geo", sink="places", columns={"id": "geonameid", "x": "lon",
                                                          "y": "lat", "text": "name"})
        stream.writeStream.foreachBatch(sink).option("checkpointLocation", ckpt).start()

    ``cluster``: the running cluster's name (attached on the first micro-batch, from the
    driver's Ray connection or ``address``/``namespace``), or a ``Cluster`` handle.
    ``sink``: the name the batch ids are recorded under (one per query: two queries into one
    cluster need two names). ``call``: ``"publish"`` (messages, events, object updates: the
    cluster's kind decides), ``"subscribe"`` or ``"unsubscribe"`` (a column ``id``).
    ``columns``: the cluster's field -> the DataFrame's column (each DataFrame column kept
    under its own name when None); a column may also be a Spark column expression.

    A micro-batch with an invalid row changes nothing; the error names the row (its position
    in the micro-batch) and the field. ``on_invalid="record"`` (the default) records the
    batch id as handled, with the error, in the cluster (``Cluster.batch_state``), writes the
    micro-batch's rows to ``rejected/batch-<id>.parquet`` under ``rejected_path`` (when given)
    and lets the query go on: one bad row does not stop the stream, and Spark running the
    same micro-batch again finds it handled. ``"raise"`` fails the query instead (Spark
    retries the micro-batch when the query is restarted, and fails again until the input
    is fixed). ``results`` keeps the :class:`~rankcast.BatchResult` of every micro-batch this
    object applied (in the driver)."""

    def __init__(self, cluster="rankcast", *, sink: str, call: str = "publish",
                 columns: Mapping[str, object] | None = None, on_invalid: str = "record",
                 rejected_path: str | os.PathLike | None = None, address: str | None = None,
                 namespace: str = "rankcast"):
        if not isinstance(sink, str) or not sink:
            raise InvalidInput(f"ClusterSink: field 'sink': must be a non-empty string, got {sink!r}")
        if call not in ("publish", "subscribe", "unsubscribe"):
            raise InvalidInput(f"ClusterSink: field 'call': must be 'publish', 'subscribe' or 'unsubscribe', "
                               f"got {call!r}")
        if on_invalid not in ("raise", "record"):
            raise InvalidInput(f"ClusterSink: field 'on_invalid': must be 'raise' or 'record', got {on_invalid!r}")
        self._cluster = cluster if not isinstance(cluster, str) else None
        self.cluster_name = cluster if isinstance(cluster, str) else cluster.name
        self.sink, self.call, self.columns, self.on_invalid = sink, call, dict(columns or {}), on_invalid
        self.rejected_path = None if rejected_path is None else Path(rejected_path)
        self.address, self.namespace = address, namespace
        self.results: list[BatchResult] = []

    def cluster(self):
        if self._cluster is None:
            from rankcast.runtime.cluster import Cluster
            self._cluster = Cluster.attach(self.cluster_name, self.address, namespace=self.namespace)
        return self._cluster

    def table(self, df) -> pa.Table:
        """The micro-batch ``df`` as the Arrow table the cluster takes (``columns`` applied)."""
        if self.columns:
            from pyspark.sql import functions as F
            df = df.select(*[(F.col(src) if isinstance(src, str) else src).alias(dst)
                             for dst, src in self.columns.items()])
        return spark_to_arrow(df)

    def __call__(self, df, batch_id: int) -> BatchResult:
        table = self.table(df)
        if self.call == "unsubscribe":
            if "id" not in table.column_names:
                raise InvalidInput("ClusterSink: an unsubscribe micro-batch needs a column 'id'")
            items = table.column("id").to_pylist()
        else:
            items = table
        out = self.cluster().apply_batch(self.sink, int(batch_id), items, call=self.call,
                                         on_invalid=self.on_invalid)
        if out.rejected is not None and self.rejected_path is not None:
            # written on every run of the micro-batch that finds it rejected: a crash between
            # the cluster's record and this file leaves no rejection without its rows
            _write_atomic(table.append_column("error", pa.array([out.rejected] * table.num_rows, pa.string())),
                          self.rejected_path / "rejected" / f"batch-{int(batch_id):020d}.parquet")
        self.results.append(out)
        return out


def _write_atomic(table: pa.Table, path: Path) -> None:
    """``table`` to ``path``: written under a hidden name in the same folder, flushed to
    disk, then renamed (a reader sees the whole file or none)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    try:
        with open(tmp, "wb") as f:
            pq.write_table(table, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    try:
        fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def delivery_files(path: str | os.PathLike) -> list[tuple[int, int, Path]]:
    """The delivery files under ``path``: (first position, last position, file), in stream
    order."""
    path = Path(path)
    if not path.is_dir():
        return []
    out = []
    for f in path.iterdir():
        m = _FILE.match(f.name)
        if m:
            out.append((int(m.group(1)), int(m.group(2)), f))
    return sorted(out)


def read_deliveries(path: str | os.PathLike) -> pa.Table:
    """Every delivery file under ``path`` as one table (rows in stream order)."""
    files = delivery_files(path)
    if not files:
        return pa.table({})
    return pa.concat_tables([pq.read_table(f) for _, _, f in files], promote_options="default")


class DeliveryWriter:
    """Writes a cluster's delivery stream as Parquet files under ``path`` (docs/streaming.md).

    Each file holds the deliveries at positions ``first..last`` of its name: one row per
    (subscription, rank) of each delivered top-k, as the kind's Arrow form of updates
    (``Cluster.publish(updates="arrow")``), with the delivery's ``position`` as the first
    column; a top-k that became empty is one row with nulls. On a cluster of diffs
    (``ClusterConfig(updates="diff")``) the rows are its diff tables (the same columns and
    ``sign``: ``Cluster.publish(updates="diff")``). A file is cut once it holds
    ``max_rows`` rows or its first delivery waited ``max_seconds``. ``subscription_ids``
    keeps only those subscriptions' updates. The first file starts at ``from_position``
    (default 1: the stream's start, which the cluster must still retain) when ``path`` holds
    none; otherwise after the last file's range."""

    def __init__(self, cluster, path: str | os.PathLike, *, subscription_ids: Iterable[int] | None = None,
                 from_position: int = 1, max_rows: int = 100_000, max_seconds: float = 1.0,
                 poll: float = 0.02):
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
            raise InvalidInput(f"DeliveryWriter: field 'max_rows': must be an integer >= 1, got {max_rows!r}")
        if isinstance(from_position, bool) or not isinstance(from_position, int) or from_position < 1:
            raise InvalidInput(f"DeliveryWriter: field 'from_position': must be an integer >= 1, "
                               f"got {from_position!r}")
        self.cluster = cluster
        self.path = Path(path)
        self.ids = None if subscription_ids is None else sorted({int(i) for i in subscription_ids})
        self.max_rows, self.max_seconds, self.poll = max_rows, float(max_seconds), poll
        self.path.mkdir(parents=True, exist_ok=True)
        for f in self.path.iterdir():           # a crash's leftovers: never renamed, never read
            if f.name.startswith(".updates-") and f.name.endswith(".tmp"):
                f.unlink()
        files = delivery_files(self.path)
        self.position = files[-1][1] + 1 if files else from_position
        # the cluster's table form: whole lists, or diffs where its roles report diffs
        self.form = "diff" if cluster.config().updates == "diff" else "arrow"
        self.files_written = 0
        self.rows_written = 0

    def step(self, wait: bool = True) -> Path | None:
        """Write the next file once there is something to write: deliveries gathered until
        ``max_rows`` rows, or ``max_seconds`` after the first (``wait=False``: only what is
        delivered now). Returns the file, or None when nothing was delivered."""
        parts: list[tuple[int, pa.Table]] = []
        rows = 0
        first = self.position
        pos = first
        t0 = None
        while True:
            try:
                got, pos = self.cluster.deliveries(pos, self.ids, updates=self.form)
            except NoCapacity:      # roles lost with a node wait for room: nothing new yet
                got = []
            for d in got:
                parts.append((d.position, d.updates))
                rows += d.updates.num_rows
            if got and t0 is None:
                t0 = time.monotonic()
            if rows >= self.max_rows:
                break
            if not got:
                if t0 is None or not wait or time.monotonic() - t0 >= self.max_seconds:
                    break
                time.sleep(self.poll)
        if not parts:
            return None
        last = parts[-1][0]
        tables = [t.add_column(0, "position", pa.array([p] * t.num_rows, pa.int64())) for p, t in parts]
        table = pa.concat_tables(tables)
        f = self.path / f"updates-{first:020d}-{last:020d}.parquet"
        _write_atomic(table, f)
        self.position = last + 1
        self.files_written += 1
        self.rows_written += table.num_rows
        return f

    def run(self, timeout: float | None = None, *, stop=None) -> dict:
        """Write files until ``timeout`` seconds pass without a delivery (None: until
        ``stop()`` returns true, or forever). Returns {"files", "rows", "position"}."""
        quiet = time.monotonic()
        while stop is None or not stop():
            f = self.step()
            if f is not None:
                quiet = time.monotonic()
                continue
            if timeout is not None and time.monotonic() - quiet >= timeout:
                break
            time.sleep(self.poll)
        return {"files": self.files_written, "rows": self.rows_written, "position": self.position}


def fold_deliveries(table: pa.Table) -> dict[int, dict[int, list[tuple[int, float]]]]:
    """The deliveries of a delivery table (:func:`read_deliveries`, or Spark's rows as Arrow):
    position -> {key (subscription or event id) -> its top-k list, (item id, score) best
    first; [] for a list that became empty}. Raises when a (position, key) occurs in two
    places (a delivery written twice)."""
    out: dict[int, dict[int, list]] = {}
    if not table.num_rows:
        return out
    names = table.column_names
    key, item, score = names[1], names[3], names[4]
    table = table.sort_by([("position", "ascending"), (key, "ascending"), ("rank", "ascending")])
    cols = [table.column(c).to_pylist() for c in ("position", key, "rank", item, score)]
    last = None
    for pos, k, rank, it, sc in zip(*cols):
        got = out.setdefault(pos, {})
        if rank is None or rank == 1:
            if k in got or (pos, k) == last:
                raise ValueError(f"position {pos}: {key} {k} delivered twice")
            got[k] = []
        if rank is not None:
            got[k].append((it, sc))
        last = (pos, k)
    return out

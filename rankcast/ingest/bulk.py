"""Ordered batch streams for bulk load and replay, and a rate limiter.

:func:`iter_batches` turns any table source into pyarrow Tables of ``batch_rows`` rows in
source order: Parquet files and folders stream through pyarrow (never the whole file in
memory), Spark DataFrames go to Ray Data through RayDP (``ray.data.from_spark``), CSV and
JSONL files are read and typed by :mod:`.readers`, Arrow and pandas tables are sliced.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Iterable, Iterator

import pyarrow as pa

from rankcast.common.validation import _is_spark_df
from rankcast.config import limits
from rankcast.errors import InvalidInput
from .readers import conform_table
from .sources import _parquet_files, _suffix, locate
from .tables import read_table

__all__ = ["iter_batches", "count_rows", "rate_limiter", "RateLimiter"]


def _rebatch(batches: Iterable[pa.RecordBatch | pa.Table], rows: int) -> Iterator[pa.Table]:
    """Re-cut a stream of batches into tables of exactly ``rows`` rows (the last may be shorter)."""
    buf: list[pa.Table] = []
    have = 0
    for b in batches:
        t = pa.Table.from_batches([b]) if isinstance(b, pa.RecordBatch) else b
        while t.num_rows:
            take = min(rows - have, t.num_rows)
            buf.append(t.slice(0, take))
            have += take
            t = t.slice(take)
            if have == rows:
                yield _concat(buf)
                buf, have = [], 0
    if have:
        yield _concat(buf)


def _concat(tables: list[pa.Table]) -> pa.Table:
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="default")


def count_rows(source) -> int | None:
    """Rows of a Parquet path or an in-memory table without reading the data (None if unknown)."""
    if isinstance(source, (pa.Table, pa.RecordBatch)):
        return source.num_rows
    if type(source).__module__.startswith("pandas") and hasattr(source, "columns"):
        return len(source)
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_dir() or _suffix(path) in (".parquet", ".pq"):
            import pyarrow.parquet as pq
            return sum(pq.ParquetFile(f).metadata.num_rows for f in _parquet_files(path))
    return None


def _spark_batches(df, batch_rows: int) -> tuple[Iterator[pa.Table], int]:
    import ray

    ctx = ray.data.DataContext.get_current()
    saved = (ctx.execution_options.preserve_order, ctx.enable_progress_bars)
    ctx.execution_options.preserve_order = True     # replay order is the table's order
    ctx.enable_progress_bars = False
    try:
        ds = ray.data.from_spark(df)
        total = ds.count()
    finally:
        ctx.execution_options.preserve_order, ctx.enable_progress_bars = saved

    def gen():
        ctx.execution_options.preserve_order = True
        try:
            for b in ds.iter_batches(batch_size=batch_rows, batch_format="pyarrow"):
                yield b
        finally:
            ctx.execution_options.preserve_order = saved[0]

    return _rebatch(gen(), batch_rows), total


def iter_batches(source, batch_rows: int, spark=None, *, kind: str | None = None,
                 progress: bool = True, desc: str | None = None) -> Iterator[pa.Table]:
    """pyarrow Tables of ``batch_rows`` rows of ``source``, in order, with a progress bar.

    ``source``: a Parquet file or folder, a CSV or JSONL file, a Spark DataFrame (through
    ``ray.data.from_spark``), a pyarrow Table or a pandas DataFrame. CSV and JSONL are typed
    as ``kind`` tables (a registered table kind: "subscription", "message", "range
    subscription", "object update", ...; subscription or message, guessed from the columns,
    if None; nested rows such as "expression" and "event" are typed as they stream).
    ``spark`` is needed only for remote paths. A row that CSV or JSONL typing rejects is
    named with its line in the file.
    """
    from tqdm.auto import tqdm

    if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
        raise InvalidInput(f"iter_batches: field 'batch_rows': must be an integer >= 1, got {batch_rows!r}")
    max_items = limits().max_items
    if batch_rows > max_items:
        raise InvalidInput(f"iter_batches: field 'batch_rows': {batch_rows} rows, more than the limit "
                           f"max_items={max_items} items per call (RANKCAST_MAX_ITEMS)")
    total = count_rows(source)
    if _is_spark_df(source):
        stream, total = _spark_batches(source, batch_rows)
    elif isinstance(source, (str, os.PathLike)) and "://" not in str(source) and \
            (Path(source).is_dir() or _suffix(Path(source)) in (".parquet", ".pq")):
        import pyarrow.parquet as pq
        files = _parquet_files(Path(source))
        stream = _rebatch((b for f in files for b in pq.ParquetFile(f).iter_batches(batch_size=batch_rows)),
                          batch_rows)
    else:
        table = read_table(source, kind or "row", spark)
        if isinstance(source, (str, os.PathLike)) and _suffix(Path(str(source))) not in (".parquet", ".pq"):
            try:   # CSV/JSONL cells are strings (nested rows are typed as they stream)
                table = conform_table(table, kind)
            except InvalidInput as e:
                raise locate(source, e) from None
        total = table.num_rows
        stream = _rebatch(table.to_batches(max_chunksize=batch_rows), batch_rows)
    bar = tqdm(total=total, unit="rows", desc=desc, disable=not progress, leave=False,
               dynamic_ncols=True)
    try:
        for t in stream:
            yield t
            bar.update(t.num_rows)
    finally:
        bar.close()


class RateLimiter:
    """Paces a stream at ``rate`` rows per second: :meth:`wait` before sending ``n`` rows
    sleeps until their turn (row i is due at start + i / rate). ``rate`` None: no pacing."""

    def __init__(self, rate: float | None):
        if rate is not None and not (isinstance(rate, (int, float)) and rate > 0):
            raise InvalidInput(f"rate: must be a positive number of rows per second, got {rate!r}")
        self.rate = rate
        self.sent = 0
        self.start: float | None = None

    def wait(self, n: int) -> float:
        """Block until ``n`` more rows may go; returns the seconds slept."""
        now = time.perf_counter()
        if self.start is None:
            self.start = now
        slept = 0.0
        if self.rate:
            due = self.start + self.sent / self.rate
            if due > now:
                slept = due - now
                time.sleep(slept)
        self.sent += n
        return slept

    __call__ = wait


def rate_limiter(rate: float | None) -> RateLimiter:
    """A :class:`RateLimiter` for ``rate`` rows per second (None: unlimited)."""
    return RateLimiter(rate)

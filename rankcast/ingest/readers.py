"""Readers of the contract's subscription and message tables (docs/contract.md, "Tables").

Sources: a Parquet file or folder (Spark writes folders), a CSV or JSONL file (text form),
a pandas DataFrame, a Spark DataFrame, a pyarrow Table or RecordBatch. The result is one
pyarrow Table with the contract's columns and types, in source row order:

* subscriptions: ``id`` int64, ``x``, ``y`` double, ``k`` int32 (default 20), ``alpha``
  double (default 0.5), ``text`` string and/or ``terms`` map<string, double>;
* messages: ``id`` int64, ``x``, ``y`` double, ``text`` and/or ``terms``, ``t`` double if
  the source has it.

Other columns are dropped. Checks happen in two layers and a failure raises
:class:`~rankcast.InvalidInput` naming the row (position and id), the column and the
reason, before anything is returned - a table is read whole or not at all:

1. here: missing columns, types, missing values, values that do not parse;
2. with ``validate=True`` (the default): every value rule of the contract, by running
   :class:`rankcast.kinds.spatial.columns.Encoder` over the table (bounds only when given).

When the source is a file, the error also says where the row is (:func:`locate`):
``bad.jsonl, line 4: subscription #3 (id=1004): field 'alpha': must be in [0, 1], got 2.0``.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa

from rankcast.kinds.spatial.columns import Encoder
from rankcast.common.validation import _check_unique, _is_spark_df, shift_position
from rankcast.config import limits
from rankcast.errors import InvalidInput
from rankcast.kinds.spatial.text import Vocabulary
from rankcast.runtime.registry import table_spec
from .sources import _spark_read, _suffix, locate
from .tables import _INT32_MAX, _INT64_MAX, MESSAGE_COLUMNS, SUBSCRIPTION_COLUMNS, TERMS_TYPE, _Checker, read_table

__all__ = ["read_subscriptions", "read_messages", "read_table", "to_spark", "guess_kind", "locate",
           "conform_table", "conform_spatial", "TERMS_TYPE", "SUBSCRIPTION_COLUMNS", "MESSAGE_COLUMNS"]

_UNBOUNDED = (-math.inf, -math.inf, math.inf, math.inf)


# ----------------------------------------------------------------------------- column checks

def conform_table(table: pa.Table, kind: str | None) -> pa.Table:
    """``table`` (a CSV's or JSONL's cells) typed as a table of the registered table kind
    ``kind`` ("subscription", "event", "object update", ...; None or "row": a subscription or
    message table, guessed from the columns), without the value checks. Nested rows (ranked
    matching's) are typed as they stream: returned as they are."""
    if kind is None or kind == "row":
        kind = guess_kind(table)
    spec = table_spec(kind)
    return _conform(table, kind) if spec is None else spec.conformed(table)


def conform_spatial(table: pa.Table, kind: str) -> pa.Table:
    """A subscription or message table of the spatial-keyword kind, typed (see the module
    docstring, layer 1)."""
    return _conform(table, kind)


def _conform(table: pa.Table, kind: str) -> pa.Table:
    names = set(table.column_names)
    label = f"{kind} table"
    for need in ("id", "x", "y"):
        if need not in names:
            raise InvalidInput(f"{label}: missing column '{need}' (columns: {sorted(names)})")
    if "text" not in names and "terms" not in names:
        raise InvalidInput(f"{label}: needs a 'text' or a 'terms' column (columns: {sorted(names)})")
    ck = _Checker(table, kind)
    ids = ck.integer("id", pa.int64(), hi=_INT64_MAX)
    ck.ids = ids.to_numpy()
    cols: dict[str, pa.ChunkedArray] = {"id": ids, "x": ck.real("x"), "y": ck.real("y")}
    n = table.num_rows
    if kind == "subscription":
        cols["k"] = ck.integer("k", pa.int32(), hi=_INT32_MAX) if "k" in names \
            else pa.chunked_array([pa.array(np.full(n, 20, np.int32))])
        cols["alpha"] = ck.real("alpha") if "alpha" in names \
            else pa.chunked_array([pa.array(np.full(n, 0.5))])
    if "text" in names:
        cols["text"] = ck.text()
    if "terms" in names:
        cols["terms"] = ck.terms()
    if kind == "message" and "t" in names:
        cols["t"] = ck.real("t", nullable=True)
    return pa.table({k: v.combine_chunks() if isinstance(v, pa.ChunkedArray) else v
                     for k, v in cols.items()})


def _read(source, kind: str, spark, validate: bool, bounds, vocabulary) -> pa.Table:
    try:
        table = _conform(read_table(source, kind, spark), kind)
        if validate and table.num_rows:
            _validate(table, kind, bounds, vocabulary)
    except InvalidInput as e:
        raise locate(source, e) from None
    return table


def _validate(table: pa.Table, kind: str, bounds, vocabulary) -> None:
    """The Encoder's checks over ``table`` in parts of at most ``max_items`` rows (a table
    may be longer than one call), positions counted from the table's first row."""
    enc = Encoder(bounds if bounds is not None else _UNBOUNDED, vocabulary)
    step = limits().max_items
    for a in range(0, table.num_rows, step):
        part = table.slice(a, step)
        try:
            if kind == "subscription":
                enc.encode_subscriptions(part)
            else:
                enc.encode_messages(part, time_window=False)
        except InvalidInput as e:
            raise shift_position(e, a) from None
    if kind == "subscription" and table.num_rows > step:
        _check_unique(kind, table.column("id").to_numpy())


def read_subscriptions(source, spark=None, *, validate: bool = True,
                       bounds: Sequence[float] | None = None,
                       vocabulary: Vocabulary | None = None) -> pa.Table:
    """The subscription table in ``source`` as pyarrow, checked (see the module docstring).

    ``bounds`` adds the location-in-bounds rule; ``validate=False`` keeps only the schema
    checks (for callers that encode the table right after, which validates it anyway).
    ``spark`` is needed only for remote paths (``hdfs://``, ``s3a://`` ...).
    """
    return _read(source, "subscription", spark, validate, bounds, vocabulary)


def read_messages(source, spark=None, *, validate: bool = True,
                  bounds: Sequence[float] | None = None,
                  vocabulary: Vocabulary | None = None) -> pa.Table:
    """The message table in ``source`` as pyarrow, checked (see the module docstring)."""
    return _read(source, "message", spark, validate, bounds, vocabulary)


def guess_kind(table: pa.Table) -> str:
    """"subscription" when the table has a ``k`` or ``alpha`` column, else "message"."""
    return "subscription" if {"k", "alpha"} & set(table.column_names) else "message"


def to_spark(source, spark, kind: str = "row"):
    """``source`` as a Spark DataFrame: itself; a Parquet path read by Spark; a CSV or JSONL
    file typed by the readers (as a ``kind`` table, guessed from its columns for "row"); an
    Arrow or pandas table handed over through Arrow."""
    from pyspark.sql.pandas.types import from_arrow_schema

    if _is_spark_df(source):
        return source
    if isinstance(source, (str, os.PathLike)):
        s = str(source)
        local = "://" not in s or s.startswith("file://")
        if local and not Path(s.removeprefix("file://")).exists():
            raise InvalidInput(f"{kind} table: no such file or folder: {s}")
        if not local or Path(s).is_dir() or _suffix(Path(s)) in (".parquet", ".pq"):
            return _spark_read(spark, s)
    table = read_table(source, kind, spark)
    if isinstance(source, (str, os.PathLike)):
        table = conform_table(table, kind)
    return spark.createDataFrame(table.to_pandas(maps_as_pydicts="strict"),
                                 schema=from_arrow_schema(table.schema))

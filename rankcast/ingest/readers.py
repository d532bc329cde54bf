"""Readers of the contract's subscription and message tables (CONTRACT.md "Tables").

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

import csv
import json
import math
import os
from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rankcast.kinds.spatial.columns import Encoder
from rankcast.common.validation import _check_unique, _is_spark_df, item_error, item_position, shift_position
from rankcast.config import limits
from rankcast.errors import InvalidInput
from rankcast.kinds.spatial.text import Vocabulary
from .match_tables import MATCH_KINDS, read_match_jsonl

__all__ = ["read_subscriptions", "read_messages", "read_table", "to_spark", "guess_kind", "locate",
           "TERMS_TYPE", "SUBSCRIPTION_COLUMNS", "MESSAGE_COLUMNS"]

TERMS_TYPE = pa.map_(pa.string(), pa.float64())
SUBSCRIPTION_COLUMNS = ("id", "x", "y", "k", "alpha", "text", "terms")
MESSAGE_COLUMNS = ("id", "x", "y", "text", "terms", "t")
RANGE_SUBSCRIPTION_COLUMNS = ("id", "lo", "hi")          # the range top-k kind (range_tables.py)
OBJECT_UPDATE_COLUMNS = ("id", "x", "y")
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
_UNBOUNDED = (-math.inf, -math.inf, math.inf, math.inf)


# ----------------------------------------------------------------------------- sources

def _suffix(path: Path) -> str:
    name = path.name.lower()
    for suf in (".parquet", ".pq", ".csv", ".jsonl", ".ndjson", ".json"):
        if name.endswith(suf) or name.endswith(suf + ".gz"):
            return suf
    return ""


def _read_csv(path: Path, names: Sequence[str]) -> pa.Table:
    import pyarrow.csv as pcsv

    # Every known column as a string: the checks below parse numbers themselves so that a
    # bad value is reported with its row, and a text like "007" stays "007".
    conv = pcsv.ConvertOptions(column_types={n: pa.string() for n in names},
                               strings_can_be_null=True)
    try:
        return pcsv.read_csv(path, convert_options=conv)
    except pa.ArrowInvalid as e:
        raise InvalidInput(f"{path}: not a readable CSV table: {e}") from None


def json_lines(path: Path, kind: str) -> list[dict]:
    """The JSON objects of a JSONL file (gzip too); a line that is not one is named by its
    number and the item it would have been."""
    rows: list[dict] = []
    opener = open
    if str(path).endswith(".gz"):
        import gzip
        opener = gzip.open
    with opener(path, "rt", encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise InvalidInput(f"{path}: {kind} #{len(rows)} (line {line_no}): not valid JSON: {e}") from None
            if not isinstance(row, dict):
                raise InvalidInput(f"{path}: {kind} #{len(rows)} (line {line_no}): expected a JSON object")
            rows.append(row)
    return rows


def _read_jsonl(path: Path, kind: str) -> pa.Table:
    import pyarrow.json as pj

    try:
        return pj.read_json(path)
    except pa.ArrowInvalid:
        pass  # mixed types or a broken line: find it with Python to name the row
    rows = json_lines(path, kind)
    names = list(dict.fromkeys(n for r in rows for n in r))
    return _from_python({n: [r.get(n) for r in rows] for n in names}, kind)


def _spark_to_arrow(df) -> pa.Table:
    """A Spark DataFrame as Arrow, in order (collects through Arrow, no row objects)."""
    try:
        batches = df._collect_as_arrow()  # what toPandas uses; public toArrow is Spark 4
        if batches:
            return pa.Table.from_batches(batches)
        from pyspark.sql.pandas.types import to_arrow_schema
        return to_arrow_schema(df.schema).empty_table()
    except (AttributeError, TypeError):
        return pa.Table.from_pandas(df.toPandas(), preserve_index=False)


def read_table(source, kind: str, spark=None) -> pa.Table:
    """``source`` as a raw Arrow table (no checks); ``kind`` names the rows in errors."""
    if isinstance(source, pa.RecordBatch):
        return pa.Table.from_batches([source])
    if isinstance(source, pa.Table):
        return source
    if _is_spark_df(source):
        return _spark_to_arrow(source)
    if type(source).__module__.startswith("pandas") and hasattr(source, "columns"):
        try:
            return pa.Table.from_pandas(source, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            # A column of mixed Python objects: check value by value to name the bad row.
            return _from_python({str(c): source[c].tolist() for c in source.columns}, kind)
    if isinstance(source, (str, os.PathLike)):
        s = str(source)
        if "://" in s and not s.startswith("file://"):
            if spark is None:
                raise InvalidInput(f"{kind} table {s!r}: a remote path needs a Spark session")
            return _spark_to_arrow(_spark_read(spark, s))
        path = Path(s.removeprefix("file://"))
        if not path.exists():
            raise InvalidInput(f"{kind} table: no such file or folder: {s}")
        suf = _suffix(path)
        names = {"subscription": SUBSCRIPTION_COLUMNS, "range subscription": RANGE_SUBSCRIPTION_COLUMNS,
                 "object update": OBJECT_UPDATE_COLUMNS}.get(kind, MESSAGE_COLUMNS)
        if kind in MATCH_KINDS and suf not in (".parquet", ".pq") and not path.is_dir():
            if suf in (".jsonl", ".ndjson", ".json"):
                return read_match_jsonl(path, kind)
            raise InvalidInput(f"{kind} table {s!r}: {kind}s are nested rows: use Parquet or JSONL")
        if path.is_dir() or suf in (".parquet", ".pq"):
            import pyarrow.parquet as pq
            try:
                return pq.read_table(path)
            except (pa.ArrowInvalid, OSError) as e:
                raise InvalidInput(f"{kind} table {s!r}: not a readable Parquet table: {e}") from None
        if suf == ".csv":
            return _read_csv(path, names)
        if suf in (".jsonl", ".ndjson", ".json"):
            return _read_jsonl(path, kind)
        raise InvalidInput(f"{kind} table {s!r}: unknown format (use .parquet, .csv or .jsonl)")
    raise InvalidInput(f"{kind} table: expected a path, a pandas or Spark DataFrame or a pyarrow "
                       f"Table, got {type(source).__name__}")


def _spark_read(spark, path: str):
    suf = _suffix(Path(path))
    if suf == ".csv":
        return spark.read.option("header", True).csv(path)
    if suf in (".jsonl", ".ndjson", ".json"):
        return spark.read.json(path)
    return spark.read.parquet(path)


def _from_python(cols: dict[str, list], kind: str) -> pa.Table:
    """Columns of Python values (JSON rows, pandas object columns) as a typed Arrow table;
    the first value of the wrong type is reported with its row. Unknown columns are dropped."""
    ids = cols.get("id")

    def fail(pos, field, v, what):
        item = ids[pos] if ids is not None and pos < len(ids) else None
        return item_error(kind, pos, item, field, f"must be {what}, got {v!r}")

    out: dict[str, pa.Array] = {}
    for name, values in cols.items():
        if name in ("id", "k"):
            for pos, v in enumerate(values):
                if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer))):
                    raise fail(pos, name, v, "an integer")
            try:
                out[name] = pa.array([None if v is None else int(v) for v in values], pa.int64())
            except OverflowError:
                pos = next(p for p, v in enumerate(values) if v is not None and abs(int(v)) > _INT64_MAX)
                raise fail(pos, name, values[pos], "an int64") from None
        elif name in ("x", "y", "alpha", "t", "lo", "hi"):
            for pos, v in enumerate(values):
                if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float, np.number))):
                    raise fail(pos, name, v, "a real number")
            out[name] = pa.array([None if v is None else float(v) for v in values], pa.float64())
        elif name == "text":
            for pos, v in enumerate(values):
                if v is not None and not isinstance(v, str) and not _is_nan(v):
                    raise fail(pos, name, v, "a string")
            out[name] = pa.array([v if isinstance(v, str) else None for v in values], pa.string())
        elif name == "terms":
            for pos, v in enumerate(values):
                if v is not None and not _is_nan(v) and not isinstance(v, (dict, list, tuple)):
                    raise fail(pos, name, v, "a mapping of term to weight")
            rows = []
            for pos, v in enumerate(values):
                if v is None or _is_nan(v):
                    rows.append(None)
                    continue
                try:
                    pairs = list(v.items()) if isinstance(v, dict) else [tuple(p) for p in v]
                    rows.append([{"key": kk, "value": json.dumps(w)} for kk, w in pairs])
                except (TypeError, ValueError):
                    raise fail(pos, name, v, "a mapping of term to weight") from None
                bad = next((kk for kk in (r["key"] for r in rows[-1]) if not isinstance(kk, str)), None)
                if bad is not None:
                    raise fail(pos, name, v, f"a mapping of term to weight (term {bad!r} is not a string)")
            out[name] = pa.array(rows, _LOOSE_TERMS)
    return pa.table(out)


# Terms as JSON gave them: weights stay JSON text until the checker reads them as numbers.
_LOOSE_TERMS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())]))


def _is_nan(v) -> bool:
    return isinstance(v, float) and math.isnan(v)


# ----------------------------------------------------------------------------- column checks

class _Checker:
    def __init__(self, table: pa.Table, kind: str):
        self.table = table
        self.kind = kind
        self.ids: np.ndarray | None = None

    def _id_at(self, pos: int):
        if self.ids is not None:
            return int(self.ids[pos])
        try:
            return self.table.column("id")[pos].as_py()
        except Exception:
            return None

    def fail(self, pos: int, field: str, reason: str) -> InvalidInput:
        return item_error(self.kind, pos, self._id_at(pos), field, reason)

    def _first_null(self, col: pa.ChunkedArray, name: str) -> None:
        if col.null_count:
            pos = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
            raise self.fail(pos, name, "missing value")

    def _parse(self, col: pa.ChunkedArray, name: str, target: pa.DataType, what: str) -> pa.ChunkedArray:
        """String column -> numbers; the first value that does not parse is reported."""
        trimmed = pc.utf8_trim_whitespace(col)
        try:
            return pc.cast(trimmed, target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            conv = int if pa.types.is_integer(target) else float
            for pos, v in enumerate(trimmed.to_pylist()):
                if v is None:
                    continue
                try:
                    conv(v)
                except ValueError:
                    raise self.fail(pos, name, f"must be {what}, got {v!r}") from None
            raise self.fail(0, name, f"must be {what}")  # out-of-range: cast reported it

    def integer(self, name: str, target: pa.DataType, *, hi: int) -> pa.ChunkedArray:
        col = self.table.column(name)
        t = col.type
        self._first_null(col, name)
        what = "an int64" if target == pa.int64() else "an integer"
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            col = self._parse(col, name, pa.int64(), what)
        elif not pa.types.is_integer(t):
            pos = 0
            raise self.fail(pos, name, f"must be {what}, got {col[pos].as_py()!r} "
                                       f"(column type {t})")
        vals = col.to_numpy()
        if vals.dtype.kind == "u":
            bad = vals > np.uint64(hi)
        else:
            bad = (vals > hi) | (vals < -hi - 1)
        if bad.any():
            pos = int(np.flatnonzero(bad)[0])
            raise self.fail(pos, name, f"must be {what}, got {int(vals[pos])}")
        return pc.cast(col, target)

    def real(self, name: str, *, nullable: bool = False) -> pa.ChunkedArray:
        col = self.table.column(name)
        t = col.type
        if not nullable:
            self._first_null(col, name)
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            col = self._parse(col, name, pa.float64(), "a real number")
        elif pa.types.is_null(t) and nullable:
            return pa.chunked_array([pa.nulls(len(col), pa.float64())])
        elif not (pa.types.is_floating(t) or pa.types.is_integer(t) or pa.types.is_decimal(t)):
            pos = _first_valid(col)
            raise self.fail(pos, name, f"must be a real number, got {col[pos].as_py()!r} "
                                       f"(column type {t})")
        return pc.cast(col, pa.float64())

    def text(self) -> pa.ChunkedArray:
        col = self.table.column("text")
        t = col.type
        if pa.types.is_null(t):
            return pa.chunked_array([pa.nulls(len(col), pa.string())])
        if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
            pos = _first_valid(col)
            raise self.fail(pos, "text", f"must be a string, got {col[pos].as_py()!r} "
                                         f"(column type {t})")
        return pc.cast(col, pa.string())

    def terms(self) -> pa.ChunkedArray:
        col = self.table.column("terms")
        t = col.type
        if pa.types.is_null(t):
            return pa.chunked_array([pa.nulls(len(col), TERMS_TYPE)])
        if pa.types.is_map(t) and (pa.types.is_string(t.key_type) or pa.types.is_large_string(t.key_type)) \
                and (pa.types.is_floating(t.item_type) or pa.types.is_integer(t.item_type)):
            return pc.cast(col, TERMS_TYPE) if t != TERMS_TYPE else col
        # Anything else (JSON objects, lists of pairs, pandas dicts): check value by value.
        values = col.to_pylist()
        out = []
        for pos, v in enumerate(values):
            if v is None:
                out.append(None)
                continue
            if isinstance(v, dict):
                pairs = [(k, w) for k, w in v.items() if w is not None] if pa.types.is_struct(t) \
                    else list(v.items())
            elif isinstance(v, list):
                try:
                    pairs = [(p["key"], p["value"]) if isinstance(p, dict) else tuple(p) for p in v]
                except (KeyError, TypeError, ValueError):
                    raise self.fail(pos, "terms", "must map term to weight") from None
            else:
                raise self.fail(pos, "terms", f"must map term to weight, got {v!r}")
            row = []
            for key, w in pairs:
                if not isinstance(key, str):
                    raise self.fail(pos, "terms", f"term must be a string, got {key!r}")
                if isinstance(w, str):
                    try:
                        w = json.loads(w)  # JSON text of a number (loose JSON terms, Spark strings)
                    except ValueError:
                        pass  # reported as it is below
                if isinstance(w, bool) or not isinstance(w, (int, float)):
                    raise self.fail(pos, "terms", f"weight of {key!r} must be a number, got {w!r}")
                row.append((key, float(w)))
            out.append(row)
        return pa.chunked_array([pa.array(out, TERMS_TYPE)])


def _first_valid(col: pa.ChunkedArray) -> int:
    valid = col.is_valid().to_numpy(zero_copy_only=False)
    return int(np.flatnonzero(valid)[0]) if valid.any() else 0


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


# ----------------------------------------------------------------------------- file locations

def locate(source, exc: InvalidInput, offset: int | None = 0) -> InvalidInput:
    """``exc`` prefixed with where its item is when ``source`` is a file path.

    An error naming an item (``subscription #3 (id=1004): ...``) at position ``offset + 3``
    of the file's table gets ``path, line L`` (CSV and JSONL: the 1-based line in the file,
    the CSV header counted) or ``file, row R`` (Parquet: the 1-based row of the file, or of
    the part file of a folder that holds it). ``offset`` None: the position is not known, and
    the path alone is added, as to any other error that does not already name it. Other
    sources leave ``exc`` unchanged."""
    if not isinstance(source, (str, os.PathLike)):
        return exc
    s = str(source)
    msg = str(exc)
    pos = item_position(msg)
    if pos is None or offset is None:
        return exc if s in msg else InvalidInput(f"{s}: {msg}")
    where = None
    if "://" not in s or s.startswith("file://"):
        try:
            where = _row_location(Path(s.removeprefix("file://")), offset + pos)
        except (OSError, ValueError, csv.Error, pa.ArrowException):
            where = None
    return InvalidInput(f"{where or s}: {shift_position(exc, offset)}")


def _open_text(path: Path):
    if str(path).endswith(".gz"):
        import gzip
        return gzip.open(path, "rt", encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def _row_location(path: Path, row: int) -> str | None:
    """``path, line L`` or ``file, row R`` of table row ``row`` (0-based) of the file or
    folder ``path``, as its reader numbers rows; None past the end. Reads the file up to that
    row: only an error pays for it."""
    suf = _suffix(path)
    if path.is_dir() or suf in (".parquet", ".pq"):
        import pyarrow.parquet as pq

        from .bulk import _parquet_files
        for f in _parquet_files(path):
            n = pq.ParquetFile(f).metadata.num_rows
            if row < n:
                return f"{f}, row {row + 1}"
            row -= n
        return None
    seen = -1 if suf == ".csv" else 0      # the CSV header is a record before row 0
    with _open_text(path) as f:
        if suf == ".csv":
            reader = csv.reader(f)
            for record in reader:          # empty lines are no rows (pyarrow skips them too)
                if record:
                    if seen == row:
                        return f"{path}, line {reader.line_num}"
                    seen += 1
            return None
        for line_no, line in enumerate(f, 1):
            if line.strip():               # blank lines are no rows (both JSON readers skip them)
                if seen == row:
                    return f"{path}, line {line_no}"
                seen += 1
    return None


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
    if isinstance(source, (str, os.PathLike)) and kind not in MATCH_KINDS:
        from .range_tables import RANGE_KINDS, conform_range
        table = conform_range(table, kind) if kind in RANGE_KINDS else \
            _conform(table, kind if kind != "row" else guess_kind(table))
    return spark.createDataFrame(table.to_pandas(maps_as_pydicts="strict"),
                                 schema=from_arrow_schema(table.schema))

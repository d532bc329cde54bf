"""A raw Arrow table from any source (:func:`read_table`: Parquet, CSV, JSONL, pandas, Spark,
Arrow) and the column checker every kind's reader types its columns with (:class:`_Checker`:
integers, reals, text and terms, each failure naming the row, its id and the column).
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rankcast.common.validation import _is_spark_df, item_error
from rankcast.errors import InvalidInput
from rankcast.runtime.registry import load, table_spec
from .sources import _read_csv, _spark_read, _spark_to_arrow, _suffix, json_lines

__all__ = ["read_table", "TERMS_TYPE", "SUBSCRIPTION_COLUMNS", "MESSAGE_COLUMNS", "RANGE_SUBSCRIPTION_COLUMNS",
           "OBJECT_UPDATE_COLUMNS"]

TERMS_TYPE = pa.map_(pa.string(), pa.float64())
SUBSCRIPTION_COLUMNS = ("id", "x", "y", "k", "alpha", "text", "terms")
MESSAGE_COLUMNS = ("id", "x", "y", "text", "terms", "t")
RANGE_SUBSCRIPTION_COLUMNS = ("id", "lo", "hi")          # the range top-k kind (range_tables.py)
OBJECT_UPDATE_COLUMNS = ("id", "x", "y")
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1


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
        spec = table_spec(kind)     # the registered table kind of that name (None: "row", ...)
        names = load(spec.columns) if spec is not None and spec.columns is not None else MESSAGE_COLUMNS
        if spec is not None and spec.nested and suf not in (".parquet", ".pq") and not path.is_dir():
            if suf in (".jsonl", ".ndjson", ".json") and spec.jsonl is not None:
                return load(spec.jsonl)(path, kind)
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


def _read_jsonl(path: Path, kind: str) -> pa.Table:
    import pyarrow.json as pj

    try:
        return pj.read_json(path)
    except pa.ArrowInvalid:
        pass  # mixed types or a broken line: find it with Python to name the row
    rows = json_lines(path, kind)
    names = list(dict.fromkeys(n for r in rows for n in r))
    return _from_python({n: [r.get(n) for r in rows] for n in names}, kind)


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

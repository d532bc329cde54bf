"""Tables of the range top-k kind (docs/contract.md, "Tables").

Range subscription table: ``id`` int64, ``lo``, ``hi`` double (a closed range of x, finite,
``lo <= hi``, ids unique). Object update table: ``id`` int64, ``x``, ``y`` double, null (or
NaN) where not given: a new id needs both, a live id with only ``y`` changes its value, with
``x`` too moves it, and ``y`` null deletes it. An update table is a sequence: an id may come
back (each call of ``rc.RangeEngine.publish`` takes distinct ids, so a replay cuts it there).

Sources as for the other tables (:func:`rankcast.ingest.tables.read_table`): Parquet file
or folder, CSV, JSONL, pandas / Spark DataFrame, pyarrow Table. Other columns are dropped. A
bad row raises :class:`~rankcast.InvalidInput` naming the row (position and id), the column
and the reason, prefixed with the file and line or row when the source is a file; a table is
read whole or not at all. Whether an update fits the engine's state (a delete needs a live
id, a new id x and y) is the engine's check, when the update is published.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from rankcast.common.validation import _check_unique, shift_position
from rankcast.config import limits
from rankcast.errors import InvalidInput
from .sources import locate
from .tables import _INT64_MAX, _Checker, read_table

__all__ = ["read_range_subscriptions", "read_object_updates", "RANGE_SUBSCRIPTION_SCHEMA",
           "OBJECT_UPDATE_SCHEMA", "RANGE_KINDS", "distinct_runs", "packed_calls", "final_objects", "conform_range",
           "is_object_update_table"]

SUB, UPD = "range subscription", "object update"
RANGE_KINDS = (SUB, UPD)
RANGE_SUBSCRIPTION_SCHEMA = pa.schema([("id", pa.int64()), ("lo", pa.float64()), ("hi", pa.float64())])
OBJECT_UPDATE_SCHEMA = pa.schema([("id", pa.int64()), ("x", pa.float64()), ("y", pa.float64())])


def _conform(table: pa.Table, kind: str) -> pa.Table:
    names = set(table.column_names)
    need = ("id", "lo", "hi") if kind == SUB else ("id",)
    for n in need:
        if n not in names:
            raise InvalidInput(f"{kind} table: missing column '{n}' (columns: {sorted(names)})")
    if kind == UPD and not {"x", "y"} & names:
        raise InvalidInput(f"{kind} table: needs an 'x' or a 'y' column (columns: {sorted(names)})")
    ck = _Checker(table, kind)
    ids = ck.integer("id", pa.int64(), hi=_INT64_MAX)
    ck.ids = ids.to_numpy()
    if kind == SUB:
        cols = {"id": ids, "lo": ck.real("lo"), "hi": ck.real("hi")}
    else:
        n = table.num_rows
        cols = {"id": ids}
        for c in ("x", "y"):
            cols[c] = ck.real(c, nullable=True) if c in names else pa.chunked_array([pa.nulls(n, pa.float64())])
    return pa.table({k: v.combine_chunks() for k, v in cols.items()})


def _validate(table: pa.Table, kind: str) -> None:
    """The engine's value checks (:mod:`rankcast.kinds.range.inputs`) over the table, in parts
    of at most ``max_items`` rows, positions counted from the table's first row."""
    from rankcast.kinds.range.inputs import encode_subscriptions
    step = limits().max_items
    if kind == SUB:
        for a in range(0, table.num_rows, step):
            try:
                encode_subscriptions(table.slice(a, step))
            except InvalidInput as e:
                raise shift_position(e, a) from None
        if table.num_rows > step:
            _check_unique(kind, table.column("id").to_numpy())
        return
    ck = _Checker(table, kind)
    ck.ids = table.column("id").to_numpy()
    for c in ("x", "y"):
        v = table.column(c).to_numpy(zero_copy_only=False)
        bad = np.isinf(v)
        if bad.any():
            pos = int(np.flatnonzero(bad)[0])
            raise ck.fail(pos, c, f"must be finite or null, got {float(v[pos])!r}")


def _read(source, kind: str, spark, validate: bool) -> pa.Table:
    try:
        table = _conform(read_table(source, kind, spark), kind)
        if validate and table.num_rows:
            _validate(table, kind)
    except InvalidInput as e:
        raise locate(source, e) from None
    return table


def read_range_subscriptions(source, spark=None, *, validate: bool = True) -> pa.Table:
    """The range subscription table in ``source`` (columns ``id, lo, hi``) as pyarrow, checked
    (see the module docstring); ``validate=False`` keeps only the schema checks."""
    return _read(source, SUB, spark, validate)


def read_object_updates(source, spark=None, *, validate: bool = True) -> pa.Table:
    """The object update table in ``source`` (columns ``id, x, y``, null: not given) as
    pyarrow, checked (see the module docstring)."""
    return _read(source, UPD, spark, validate)


def conform_range(table: pa.Table, kind: str) -> pa.Table:
    """``table`` typed as a ``kind`` table (a CSV's or JSONL's cells), without the value checks."""
    return _conform(table, kind)


def is_object_update_table(table: pa.Table) -> bool:
    """An object update table (``id`` and ``x`` / ``y``, no text, terms or values): what a
    replay of a range top-k stream reads."""
    names = set(table.column_names)
    return "id" in names and bool({"x", "y"} & names) and not {"text", "terms", "values", "lo", "hi"} & names


def distinct_runs(ids: np.ndarray) -> list[tuple[int, int]]:
    """Cut a sequence of ids into consecutive runs without a repeated id: [(start, stop)], each
    as long as it can be (one publish call takes distinct ids; a replay publishes each run)."""
    ids = np.asarray(ids, np.int64)
    n = len(ids)
    if not n:
        return []
    if len(np.unique(ids)) == n:
        return [(0, n)]
    out, start, seen = [], 0, set()
    for j, i in enumerate(ids.tolist()):
        if i in seen:
            out.append((start, j))
            start, seen = j, set()
        seen.add(i)
    out.append((start, n))
    return out


def packed_calls(ids: np.ndarray, size: int) -> list[np.ndarray]:
    """Cut a sequence of object updates (their ids) into calls of at most ``size`` updates, an
    id at most once a call, each object's updates in their order: an update goes to the first
    call after its object's previous one that has room. Returns each call's row numbers
    (ascending); the calls applied in turn leave every object as the sequence does."""
    if size < 1:
        raise ValueError(f"packed_calls: size must be at least 1, got {size}")
    last: dict[int, int] = {}
    calls: list[list[int]] = []
    first_open = 0
    for j, i in enumerate(np.asarray(ids, np.int64).tolist()):
        c = max(last.get(i, -1) + 1, first_open)
        while c < len(calls) and len(calls[c]) >= size:
            c += 1
        if c == len(calls):
            calls.append([])
        calls[c].append(j)
        last[i] = c
        while first_open < len(calls) and len(calls[first_open]) >= size:
            first_open += 1
    return [np.array(c, np.int64) for c in calls]


def final_objects(updates: pa.Table) -> pa.Table:
    """The live objects (``id, x, y``) after an object update table applied in order (a valid
    stream): an object lives when its last row gives a y; its y is that row's, its x the last
    x given for it (an insert, a move, or the re-insert after a delete)."""
    t = conform_range(updates, UPD) if set(updates.column_names) != {"id", "x", "y"} else updates
    ids = t.column("id").to_numpy()
    x = t.column("x").to_numpy(zero_copy_only=False).astype(np.float64)
    y = t.column("y").to_numpy(zero_copy_only=False).astype(np.float64)
    n = len(ids)
    rev = np.arange(n)[::-1]
    uniq, last = np.unique(ids[rev], return_index=True)
    last = rev[last]                                  # each id's last row
    has_x = ~np.isnan(x)
    rx = rev[has_x[rev]]
    ux, lx = np.unique(ids[rx], return_index=True)
    xs = np.full(len(uniq), np.nan)
    xs[np.searchsorted(uniq, ux)] = x[rx[lx]]
    ys = y[last]
    live = ~np.isnan(ys)
    return pa.table({"id": pa.array(uniq[live], pa.int64()), "x": pa.array(xs[live], pa.float64()),
                     "y": pa.array(ys[live], pa.float64())})

"""Validation shared by every kind: the item and field named in every error, the limits on
what one call may carry, ids arguments and the columns of tables."""
from __future__ import annotations

from itertools import islice
from numbers import Integral, Real
from typing import Iterable, Sized
import numpy as np
from rankcast.config import limits
from rankcast.errors import InvalidInput
import dataclasses
from typing import Any
from typing import Mapping
import math
import re

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

__all__ = ["check_ids_arg", "check_not_live"]



def check_ids_arg(ids) -> np.ndarray:
    """The ids argument of unsubscribe: one int or an iterable of ints (int64)."""
    if isinstance(ids, Integral) and not isinstance(ids, bool):
        ids = [ids]
    if isinstance(ids, np.ndarray):
        ids = ids.reshape(-1)
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
        raise InvalidInput(f"unsubscribe: expected subscription ids, got {type(ids).__name__}")
    max_items = limits().max_items
    if isinstance(ids, Sized) and len(ids) > max_items:
        raise too_many("subscription id", len(ids), max_items)
    if isinstance(ids, np.ndarray) and ids.dtype.kind in "iu":
        return ids.astype(np.int64)
    ids = list(islice(ids, max_items + 1))
    if len(ids) > max_items:
        raise too_many("subscription id", None, max_items)
    out = []
    for pos, v in enumerate(ids):
        if isinstance(v, bool) or not isinstance(v, Integral) or not -(2**63) <= int(v) < 2**63:
            raise item_error("id", pos, v, "id", f"must be an int64, got {v!r}")
        out.append(int(v))
    arr = np.asarray(out, np.int64)
    if len(np.unique(arr)) != len(arr):
        u, c = np.unique(arr, return_counts=True)
        dup = int(u[c > 1][0])
        second = out.index(dup, out.index(dup) + 1)
        raise InvalidInput(f"id #{second} (id={dup}): field 'id': duplicate id within the call")
    return arr



def check_not_live(ids: np.ndarray, live, offset: int = 0, kind: str = "subscription") -> None:
    """A subscribe call's ids must not be live; ``offset`` is the call's position of ids[0]."""
    for i, sid in enumerate(ids.tolist()):
        if sid in live:
            raise item_error(kind, offset + i, sid, "id", "already subscribed")



def plain(v):
    """``v`` as a Python scalar where it is a numpy one: errors show ``2.0``, not ``np.float64(2.0)``."""
    return v.item() if isinstance(v, np.generic) else v



def item_error(kind: str, pos: int, item_id: Any, field: str, reason: str) -> InvalidInput:
    return InvalidInput(f"{kind} #{pos} (id={item_id!r}): field '{field}': {reason}")



_ITEM = re.compile(r"([a-z ]+) #(\d+) \(id=")



def item_position(message: str) -> int | None:
    """The position of the item that an :func:`item_error` message names, None for other
    messages (a message already prefixed with where its item is in a file included)."""
    m = _ITEM.match(message)
    return int(m.group(2)) if m else None



def shift_position(exc: InvalidInput, offset: int) -> InvalidInput:
    """``exc`` with its item's position moved by ``offset``: an error of a part of a larger
    table (a batch of a bulk load, of a replay) named by its position in the whole table."""
    msg = str(exc)
    m = _ITEM.match(msg)
    if m is None or not offset:
        return exc
    return InvalidInput(f"{m.group(1)} #{int(m.group(2)) + offset} (id={msg[m.end():]}")



def too_many(kind: str, n: int | None, limit: int) -> InvalidInput:
    """The error of a call with more than ``max_items`` items (``n`` None: an iterator that
    was stopped at the limit)."""
    got = "" if n is None else f" {n} in one call,"
    return InvalidInput(f"{kind}s:{got} more than the limit max_items={limit} items per call "
                        f"(RANKCAST_MAX_ITEMS); split the call")



def over_limit(what: str, n: int, name: str, limit: int) -> str:
    """The reason of an item over a size limit."""
    return f"{n} {what}, more than the limit {name}={limit} (RANKCAST_{name.upper()})"



def _is_spark_df(obj) -> bool:
    return type(obj).__module__.startswith("pyspark.sql") and hasattr(obj, "toPandas")



def _raw_columns(items, kind: str, cls, max_items: int, names: tuple[str, ...] | None = None,
                 lists: tuple[str, ...] = ("text", "terms")) -> dict[str, list | np.ndarray]:
    """Columns ``names`` (by default the fields of the dataclass ``cls``) of ``items`` (objects of ``cls``, or a
    table: a mapping of columns, pandas, Spark or Arrow) as lists or arrays (``lists``: the
    columns kept as Python lists), refused with more than ``max_items`` rows before they
    are built (an iterator is read up to the limit only)."""
    if names is None:
        names = tuple(f.name for f in dataclasses.fields(cls))
    if _is_spark_df(items):
        items = items.limit(max_items + 1).toPandas()
    if isinstance(items, Mapping):
        n = len(items["id"]) if isinstance(items.get("id"), Sized) else 0
    elif isinstance(items, Sized) and not isinstance(items, (str, bytes)):
        n = len(items)
    else:
        n = 0
    if n > max_items:
        raise too_many(kind, n, max_items)
    try:
        import pyarrow as pa
        if isinstance(items, (pa.Table, pa.RecordBatch)):
            return {n: (items.column(n).to_pylist() if n in lists
                        else items.column(n).to_numpy(zero_copy_only=False))
                    for n in names if n in items.schema.names}
    except ImportError:  # pragma: no cover - pyarrow is a dependency
        pass
    if type(items).__module__.startswith("pandas") and hasattr(items, "columns"):
        return {n: (list(items[n]) if n in lists else items[n].to_numpy())
                for n in names if n in items.columns}
    if isinstance(items, Mapping):
        return {n: (list(items[n]) if n in lists else np.asarray(items[n]))
                for n in names if n in items}
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise InvalidInput(f"expected an iterable of {cls.__name__} or a table, "
                           f"got {type(items).__name__}")
    items = list(islice(items, max_items + 1))
    if len(items) > max_items:
        raise too_many(kind, None, max_items)
    cols: dict[str, list] = {n: [] for n in names}
    for pos, it in enumerate(items):
        if not isinstance(it, cls):
            raise InvalidInput(f"{kind} #{pos} (id={getattr(it, 'id', None)!r}): expected "
                               f"{cls.__name__}, got {type(it).__name__}")
        for n in names:
            cols[n].append(getattr(it, n))
    return cols



def _check_ids(kind, ids) -> np.ndarray:
    ids_arr = np.asarray(ids)
    if ids_arr.dtype.kind in "iu" and ids_arr.dtype != np.uint64:
        return ids_arr.astype(np.int64)
    if ids_arr.dtype == np.uint64:
        bad = np.flatnonzero(ids_arr > np.uint64(INT64_MAX))
        if len(bad):
            raise item_error(kind, int(bad[0]), int(ids_arr[bad[0]]), "id", "must be an int64")
        return ids_arr.astype(np.int64)
    out = np.empty(len(ids_arr), np.int64)
    for pos, v in enumerate(ids_arr.tolist() if ids_arr.dtype != object else ids_arr):
        if isinstance(v, bool) or not isinstance(v, Integral) or not INT64_MIN <= int(v) <= INT64_MAX:
            raise item_error(kind, pos, v, "id", f"must be an int64, got {plain(v)!r}")
        out[pos] = int(v)
    return out



def _check_real(kind, ids, values, field, *, integer=False) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind in "fiu" and not (integer and arr.dtype.kind == "f"):
        return arr.astype(np.int64 if integer else np.float64)
    want = Integral if integer else Real
    out = np.empty(len(arr), np.int64 if integer else np.float64)
    for pos, v in enumerate(arr.tolist() if arr.dtype != object else arr):
        if isinstance(v, bool) or not isinstance(v, want):
            what = "an integer" if integer else "a real number"
            raise item_error(kind, pos, int(ids[pos]), field, f"must be {what}, got {plain(v)!r}")
        out[pos] = v
    return out



def _first(mask) -> int:
    return int(np.flatnonzero(mask)[0])



def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))



def _check_unique(kind, ids: np.ndarray) -> None:
    if len(ids) < 2:
        return
    order = np.argsort(ids, kind="stable")
    s = ids[order]
    dup = np.flatnonzero(s[1:] == s[:-1])
    if len(dup):
        p = int(order[dup[0] + 1])
        raise item_error(kind, p, int(ids[p]), "id", "duplicate id within the call")

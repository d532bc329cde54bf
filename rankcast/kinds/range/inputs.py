"""Validation and columnar form of the range top-k kind's inputs (docs/contract.md, "Range top-k").

A call's items are checked whole before anything takes effect; an error names the item by
position and id and the field: ``range subscription #3 (id=17): field 'hi': must be >= lo``.
Accepted forms: an iterable of :class:`~rankcast.RangeSubscription` /
:class:`~rankcast.ObjectUpdate`, or columns (a mapping of arrays, a pyarrow Table or a pandas
DataFrame) ``id, lo, hi`` / ``id, x, y`` where a missing x or y is null (NaN).
"""
from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

from rankcast.common.validation import INT64_MAX, INT64_MIN
from rankcast.common.validation import _check_unique, _raw_columns, item_error, plain
from rankcast.config import limits
from rankcast.errors import InvalidInput
from rankcast.model import ObjectUpdate, RangeSubscription

__all__ = ["encode_subscriptions", "encode_updates", "check_update_state"]

SUB, UPD = "range subscription", "object update"


def _columns(items, kind: str, cls, names: tuple[str, ...]) -> tuple[dict, bool]:
    """Columns of ``items`` and whether they came as columns (nulls allowed as NaN)."""
    cols = _raw_columns(items, kind, cls, limits().max_items, names, lists=())
    return cols, not all(isinstance(v, list) for v in cols.values()) or not cols


def _ids(kind: str, col) -> np.ndarray:
    arr = np.asarray(col)
    if arr.dtype.kind in "i":
        return arr.astype(np.int64)
    out = np.empty(len(arr), np.int64)
    for pos, v in enumerate(arr.tolist() if arr.dtype != object else arr):
        if isinstance(v, bool) or not isinstance(v, Integral) or not INT64_MIN <= int(v) <= INT64_MAX:
            raise item_error(kind, pos, plain(v), "id", f"must be an int64, got {plain(v)!r}")
        out[pos] = int(v)
    return out


def _reals(kind: str, ids, col, field: str, *, optional: bool, nulls: bool) -> np.ndarray:
    """float64 values; NaN marks a missing optional value (None, or null / NaN in columns)."""
    arr = np.asarray(col) if not isinstance(col, list) else None
    if arr is not None and arr.dtype.kind in "fiu":
        out = arr.astype(np.float64)
    else:
        vals = col if isinstance(col, list) else list(arr)
        out = np.empty(len(vals), np.float64)
        for pos, v in enumerate(vals):
            if v is None and optional:
                out[pos] = np.nan
            elif isinstance(v, bool) or not isinstance(v, Real):
                raise item_error(kind, pos, int(ids[pos]), field, f"must be a real number, got {plain(v)!r}")
            elif math.isnan(v) and optional and nulls:
                out[pos] = np.nan
            elif not math.isfinite(v):
                raise item_error(kind, pos, int(ids[pos]), field, f"must be finite, got {plain(v)!r}")
            else:
                out[pos] = float(v)
        return out
    bad = np.isinf(out) | (np.isnan(out) & ~(optional and nulls))
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise item_error(kind, pos, int(ids[pos]), field, f"must be finite, got {plain(out[pos])!r}")
    return out


def encode_subscriptions(items) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids, lo, hi) of a subscribe call, every field checked (live ids are the engine's)."""
    cols, _ = _columns(items, SUB, RangeSubscription, ("id", "lo", "hi"))
    for need in ("id", "lo", "hi"):
        if need not in cols:
            raise InvalidInput(f"range subscription table: missing column '{need}'")
    ids = _ids(SUB, cols["id"])
    lo = _reals(SUB, ids, cols["lo"], "lo", optional=False, nulls=False)
    hi = _reals(SUB, ids, cols["hi"], "hi", optional=False, nulls=False)
    bad = lo > hi
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise item_error(SUB, pos, int(ids[pos]), "hi", f"must be >= lo, got lo={plain(lo[pos])!r} > "
                                                        f"hi={plain(hi[pos])!r}")
    _check_unique(SUB, ids)
    return ids, lo, hi


def encode_updates(items) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids, x, y) of a publish call, every field checked: x NaN where not given, y +inf for a
    delete (the state checks: :func:`check_update_state`)."""
    cols, as_columns = _columns(items, UPD, ObjectUpdate, ("id", "x", "y"))
    if "id" not in cols:
        raise InvalidInput("object update table: missing column 'id'")
    ids = _ids(UPD, cols["id"])
    n = len(ids)
    x = _reals(UPD, ids, cols["x"], "x", optional=True, nulls=as_columns) if "x" in cols else np.full(n, np.nan)
    y = _reals(UPD, ids, cols["y"], "y", optional=True, nulls=as_columns) if "y" in cols else np.full(n, np.nan)
    _check_unique(UPD, ids)
    y = np.where(np.isnan(y), np.inf, y)
    return ids, x, y


def check_update_state(ids: np.ndarray, x: np.ndarray, y: np.ndarray, live: np.ndarray) -> None:
    """State checks of a publish call: a new id needs x and y, a delete needs a live id."""
    new = ~live
    bad = new & np.isinf(y)
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise item_error(UPD, pos, int(ids[pos]), "y", "no live object with this id: a delete (y=None) "
                                                      "needs a live id, a new object needs x and y")
    bad = new & np.isnan(x)
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise item_error(UPD, pos, int(ids[pos]), "x", "no live object with this id: a new object needs x and y")

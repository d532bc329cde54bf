"""The forms of a call's updates that every kind returns: ``rc.Update`` objects, one Arrow
table, or nothing (``updates="objects" | "arrow" | "none"``), built from update arrays
(keys, offsets, item ids, scores) without a Python object per row where it can."""
from __future__ import annotations

import gc
from contextlib import contextmanager
from itertools import islice
import numpy as np
import pyarrow as pa
from rankcast.common.arrays import expand_runs, key_rank, runs
from rankcast.errors import InvalidInput
from rankcast.model import Update

__all__ = ["UPDATE_FORMS", "updates_from_arrays", "results_from_arrays", "no_gc", "check_updates_form", "updates_table", "columns_table"]



# what publish returns: Update objects (default), one Arrow table, or nothing (read topk later)
UPDATE_FORMS = ("objects", "arrow", "none")



def updates_from_arrays(sub_ids, offsets, msg_ids, scores) -> list[Update]:
    """Update objects, ordered by subscription id. The lists are put in that order first,
    so that one iterator over the (id, score) pairs hands each update its run."""
    return results_from_arrays(sub_ids, offsets, msg_ids, scores)


def results_from_arrays(keys, offsets, item_ids, scores, *, cls=Update, by_key: bool = True) -> list:
    """Result objects ``cls(key, ((item_id, score), ...))`` from update arrays: ordered by key
    (``by_key``: ``rc.Update``) or in the arrays' order (ranked matching's ``rc.Match``, one
    per event in input order)."""
    keys = np.asarray(keys, np.int64)
    offsets = np.asarray(offsets, np.int64)
    item_ids, scores = np.asarray(item_ids), np.asarray(scores)
    lens = np.diff(offsets)
    if by_key:
        order = np.argsort(keys, kind="stable")
        if len(order) and (order[1:] < order[:-1]).any():
            _, rows = runs(offsets[:-1][order], lens[order])
            keys, lens = keys[order], lens[order]
            item_ids, scores = item_ids[rows], scores[rows]
    pairs = iter(zip(item_ids.tolist(), scores.tolist()))
    with no_gc():
        return [cls(s, tuple(islice(pairs, m))) for s, m in zip(keys.tolist(), lens.tolist())]



@contextmanager
def no_gc():
    """The cyclic garbage collector off while result objects are built: millions of small
    tuples that all survive would make it scan the growing heap again and again (none of
    them can be part of a cycle). Building 59k Update objects of 20 entries took 1.5 to 2.4
    times longer with it on."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()



def check_updates_form(form) -> str:
    """The ``updates`` argument of publish / flush: one of :data:`UPDATE_FORMS`."""
    if not isinstance(form, str) or form not in UPDATE_FORMS:
        raise InvalidInput(f"publish: field 'updates': must be one of {', '.join(map(repr, UPDATE_FORMS))}, "
                           f"got {form!r}")
    return form



def updates_table(keys, offsets, item_ids, scores, *, key: str = "subscription_id",
                  item: str = "message_id", by_key: bool = True) -> pa.Table:
    """The columnar form of a call's updates: one row per (subscription, rank) of each new
    top-k, ``rank`` 1 for the best; a subscription whose top-k became empty has one row with
    ``rank``, ``item`` and ``score`` null. Rows by ``key`` ascending (``by_key``, as the
    Update list is ordered) or in the given order (ranked matching: events in input order),
    then by rank. No Python object per row: lists that already lie in the table's order,
    none of them empty (a cluster partition's, by id), keep their ids and scores as the
    columns and only the key and rank columns are made (one kernel: ``key_rank``);
    otherwise one kernel (``expand_runs``) writes every column."""
    keys = np.asarray(keys, np.int64)
    offsets = np.asarray(offsets, np.int64)
    lens = np.diff(offsets)
    in_order = not by_key or len(keys) < 2 or bool((keys[1:] > keys[:-1]).all())
    if in_order and (lens > 0).all():
        a, b = int(offsets[0]), int(offsets[-1])
        k_col, rank = key_rank(_read_only(keys), _read_only(offsets))
        return columns_table(k_col, rank, np.asarray(item_ids, np.int64)[a:b],
                             np.asarray(scores, np.float64)[a:b], None, key=key, item=item)
    order = np.argsort(keys, kind="stable") if by_key else np.arange(len(keys))
    cols = expand_runs(keys[order], offsets[:-1][order], lens[order],
                       _read_only(np.asarray(item_ids, np.int64).reshape(-1, 1)), 0,
                       _read_only(np.asarray(scores, np.float64).reshape(-1, 1)), 0)
    return columns_table(*cols, key=key, item=item)



def _read_only(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a`` (no copy). Numba compiles a kernel once per read-only-ness
    of its arguments, and a cluster client's arrays come read-only from Ray's object store:
    with the engine's arrays passed read-only too, both use one compiled ``expand_runs``
    (a client otherwise compiled its own, 0.4-0.8 s in its first calls on a cold cache)."""
    v = a.view()
    v.flags.writeable = False
    return v



def columns_table(k_col, rank, i_col, s_col, empty, *, key: str = "subscription_id",
                  item: str = "message_id") -> pa.Table:
    """The update table of :func:`updates_table` from its columns (``empty``: the rows of an
    empty top-k, null in ``rank``, ``item`` and ``score``; None: no such row)."""
    if empty is None or not empty.any():
        return pa.table({
            key: pa.array(k_col, pa.int64()),
            "rank": pa.array(rank, pa.int32()),
            item: pa.array(i_col, pa.int64()),
            "score": pa.array(s_col, pa.float64()),
        })
    # the validity bitmap made once and shared, the values' buffers as they are: pa.array
    # with a mask converts every value (about 0.8 ms per call of 300k update rows)
    n, nulls = len(k_col), int(np.count_nonzero(empty))
    valid = pa.py_buffer(np.packbits(~np.asarray(empty, np.bool_), bitorder="little"))

    def col(values, typ, dtype):
        return pa.Array.from_buffers(typ, n, [valid, pa.py_buffer(np.ascontiguousarray(values, dtype))],
                                     null_count=nulls)
    return pa.table({
        key: pa.array(k_col, pa.int64()),
        "rank": col(rank, pa.int32(), np.int32),
        item: col(i_col, pa.int64(), np.int64),
        "score": col(s_col, pa.float64(), np.float64),
    })



def _empty_result(form: str):
    return [] if form == "objects" else updates_table([], [0], [], []) if form == "arrow" else None

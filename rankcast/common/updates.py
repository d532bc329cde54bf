"""The forms of a call's updates that every kind returns: ``rc.Update`` objects, one Arrow
table of whole lists, one Arrow table of diffs, or nothing (``updates="objects" | "arrow" |
"diff" | "none"``), built from update arrays (keys, offsets, item ids, scores) without a
Python object per row where it can."""
from __future__ import annotations

import gc
from contextlib import contextmanager
from itertools import islice
import numpy as np
import pyarrow as pa
from rankcast.common.arrays import expand_runs, key_rank, runs
from rankcast.errors import InvalidInput
from rankcast.model import Update

__all__ = ["UPDATE_FORMS", "DIFF_SIGN", "diff_table", "apply_diffs", "updates_from_arrays", "results_from_arrays", "no_gc", "check_updates_form", "updates_table", "columns_table"]



# what publish returns: Update objects (default), one Arrow table of whole lists, one of the
# entries that entered and left the lists (diffs), or nothing (read topk later)
UPDATE_FORMS = ("objects", "arrow", "diff", "none")
DIFF_SIGN = "sign"      # the diff table's last column: +1 entered, -1 left



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



def diff_table(keys, rank, item_ids, scores, sign, *, key: str = "subscription_id",
               item: str = "message_id") -> pa.Table:
    """The diff form of a call's updates (``updates="diff"``, docs/contract.md): one row per
    entry that left (``sign`` -1, ``rank`` its rank before the call) or entered (+1, its
    rank after) a list, the columns ``key``, ``rank`` int32, ``item``, ``score``, ``sign``
    int8, as the kernel that found them wrote them (a key's -1 rows, then its +1 rows, each
    by rank)."""
    return pa.table({
        key: pa.array(np.asarray(keys, np.int64), pa.int64()),
        "rank": pa.array(np.asarray(rank, np.int32), pa.int32()),
        item: pa.array(np.asarray(item_ids, np.int64), pa.int64()),
        "score": pa.array(np.asarray(scores, np.float64), pa.float64()),
        DIFF_SIGN: pa.array(np.asarray(sign, np.int8), pa.int8()),
    })


def _empty_result(form: str, *, key: str = "subscription_id", item: str = "message_id"):
    if form == "objects":
        return []
    if form == "arrow":
        return updates_table([], [0], [], [], key=key, item=item)
    if form == "diff":
        return diff_table([], [], [], [], [], key=key, item=item)
    return None



def apply_diffs(lists: dict, diffs) -> dict:
    """Apply a diff table (``publish(..., updates="diff")``, a ``listen`` delivery's
    ``updates`` in that form) to ``lists``, a dict of key (subscription or event id) to
    list of ``(item_id, score)`` pairs, best first, in place; returns ``lists``. For each key:
    its -1 rows leave (each must be at its ``rank`` in the list), then its +1 rows enter at
    their ``rank``, in rank order. A key not in ``lists`` starts empty; a list that becomes
    empty stays, as ``[]``. A row that does not fit the list (an entry to remove that is not
    where its rank says, a rank past the end) raises ``ValueError``: the diffs were not
    applied to the lists they were made for (a gap in the stream, or lists not seeded with
    each subscription's ``topk`` at subscribe time)."""
    if isinstance(diffs, pa.RecordBatch):
        diffs = pa.Table.from_batches([diffs])
    names = diffs.column_names
    if len(names) != 5 or names[1] != "rank" or names[3] != "score" or names[4] != DIFF_SIGN:
        raise ValueError(f"apply_diffs: expected the columns (key, rank, item, score, {DIFF_SIGN}), got {names}")
    keys = diffs.column(0).to_numpy()
    if len(keys) == 0:
        return lists
    ranks = diffs.column(1).to_pylist()
    items = diffs.column(2).to_pylist()
    scores = diffs.column(3).to_pylist()
    signs = diffs.column(4).to_pylist()
    cut = np.flatnonzero(keys[1:] != keys[:-1]) + 1
    bounds = [0, *cut.tolist(), len(keys)]
    keys_l = keys.tolist()
    for a, b in zip(bounds[:-1], bounds[1:]):
        key = keys_l[a]
        cur = lists.setdefault(key, [])
        for r in range(b - 1, a - 1, -1):          # leaving rows by rank: remove from the back
            if signs[r] < 0:
                q = ranks[r] - 1
                if not 0 <= q < len(cur) or cur[q][0] != items[r]:
                    raise ValueError(f"apply_diffs: key {key}: item {items[r]} is not at rank {ranks[r]} "
                                     f"of its list")
                del cur[q]
        for r in range(a, b):
            if signs[r] > 0:
                q = ranks[r] - 1
                if not 0 <= q <= len(cur):
                    raise ValueError(f"apply_diffs: key {key}: rank {ranks[r]} is past the list's end")
                cur.insert(q, (items[r], scores[r]))
    return lists

"""rc.Engine: the single-process Skype engine of the contract."""
from __future__ import annotations

import gc
import time
from contextlib import contextmanager
from itertools import islice
from numbers import Integral
from typing import Callable, Iterable, Sized

import numpy as np
import pyarrow as pa

from ._arrays import expand_runs, key_rank, runs
from .columns import Encoder, MessageBatch, item_error, plain, too_many
from .config import EngineConfig, limits
from .errors import InvalidInput, UnknownSubscription
from .indexing.core import SkypeCore
from .indexing.window import MessageWindow, WindowClock
from .model import Update

__all__ = ["Engine", "check_ids_arg", "check_not_live", "check_message_state", "updates_from_arrays",
           "updates_table", "columns_table", "check_updates_form", "UPDATE_FORMS", "no_gc"]

# what publish returns: Update objects (default), one Arrow table, or nothing (read topk later)
UPDATE_FORMS = ("objects", "arrow", "none")


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


def check_message_state(batch: MessageBatch, in_window: np.ndarray, time_window: bool, t_max: float) -> None:
    """A publish call's state checks: no id already in the window (``in_window`` mask), and
    under a time window no time before the largest published so far."""
    if in_window.any():
        p = int(np.flatnonzero(in_window)[0])
        raise item_error("message", p, int(batch.ids[p]), "id", "a message with this id is in the window")
    if time_window and len(batch) and batch.t[0] < t_max:
        raise item_error("message", 0, int(batch.ids[0]), "t",
                         f"must not decrease, got {plain(batch.t[0])!r} after {plain(t_max)!r}")


def updates_from_arrays(sub_ids, offsets, msg_ids, scores) -> list[Update]:
    """Update objects, ordered by subscription id. The lists are put in that order first,
    so that one iterator over the (id, score) pairs hands each update its run."""
    sub_ids = np.asarray(sub_ids, np.int64)
    offsets = np.asarray(offsets, np.int64)
    lens = np.diff(offsets)
    order = np.argsort(sub_ids, kind="stable")
    if len(order) and (order[1:] < order[:-1]).any():
        _, rows = runs(offsets[:-1][order], lens[order])
        sub_ids, lens = sub_ids[order], lens[order]
        msg_ids, scores = np.asarray(msg_ids)[rows], np.asarray(scores)[rows]
    pairs = iter(zip(msg_ids.tolist(), scores.tolist()))
    with no_gc():
        return [Update(s, tuple(islice(pairs, m))) for s, m in zip(sub_ids.tolist(), lens.tolist())]


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


class Engine:
    """Exact continuous top-k over a sliding window for spatial-keyword subscriptions.

    ``core`` replaces the Skype core by another one with the same interface (the baselines
    of :mod:`rankcast.baselines` use it)."""

    def __init__(self, cfg: EngineConfig, *, core: Callable[[EngineConfig], object] | None = None):
        if not isinstance(cfg, EngineConfig):
            raise InvalidInput(f"Engine: expected an EngineConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        self.encoder = Encoder(cfg.bounds, cfg.vocabulary)
        self.clock = WindowClock(cfg)
        self.window = MessageWindow(cfg)
        self.core = core(cfg) if core is not None else SkypeCore(cfg)
        self.last_seq = -1
        self.published = 0

    # ------------------------------------------------------------------ calls
    def subscribe(self, subs) -> None:
        batch, pending = self.encoder.encode_subscriptions(subs)
        check_not_live(batch.ids, self.core.subs)
        self.encoder.commit(pending)
        if len(batch) == 0:
            return
        self.core.add(batch)
        self._reevaluate()
        self.core.take_updates()   # initial results are not updates

    def unsubscribe(self, ids) -> None:
        arr = check_ids_arg(ids)
        self.core.remove(arr)

    def publish(self, msgs, updates: str = "objects") -> list[Update] | pa.Table | None:
        """Apply ``msgs``; return the call's updates as ``rc.Update`` objects (default), as
        one Arrow table (``updates="arrow"``: :func:`updates_table`) or not at all
        (``"none"``: read ``topk`` later)."""
        form = check_updates_form(updates)
        batch, pending = self.encoder.encode_messages(msgs, time_window=self.cfg.time_window)
        self._check_messages(batch)
        self.encoder.commit(pending)
        n = len(batch)
        if n == 0:
            return _empty_result(form)
        seqs = np.arange(self.last_seq + 1, self.last_seq + 1 + n, dtype=np.int64)
        step = self.cfg.batch_size
        for a in range(0, n, step):
            part = batch.take(np.arange(a, min(n, a + step))) if n > step else batch
            s = seqs[a:a + step]
            expire_upto = self.clock.advance(s, part.t)
            before = len(self.window)
            self.window.append(part, s, expire_upto)
            if hasattr(self.core, "observe_window"):   # cost model input (paper 6.3)
                self.core.observe_window(len(self.window), len(part), before + len(part) - len(self.window))
            self.core.process(part, s, expire_upto, last=a + step >= n)
        self.last_seq = int(seqs[-1])
        self.published += n
        self._reevaluate()
        if form == "none" and hasattr(self.core, "discard_updates"):
            self.core.discard_updates()
            return None
        if form == "arrow" and hasattr(self.core, "take_update_columns"):
            return columns_table(*self.core.take_update_columns())
        arrays = self.core.take_updates()
        if form == "arrow":
            return updates_table(*arrays)
        return updates_from_arrays(*arrays) if form == "objects" else None

    def _check_messages(self, batch: MessageBatch) -> None:
        check_message_state(batch, self.window.has_ids(batch.ids), self.cfg.time_window, self.clock.t_max)

    def _reevaluate(self) -> None:
        while True:
            slots, req, K = self.core.reeval_requests()
            if len(slots) == 0:
                return
            t0 = time.perf_counter()
            cands = self.window.search(req, K)
            self.core.apply_reevals(slots, cands, len(self.window), time.perf_counter() - t0)

    # ------------------------------------------------------------------ queries
    def topk(self, sub_id) -> list[tuple[int, float]]:
        if isinstance(sub_id, bool) or not isinstance(sub_id, Integral):
            raise UnknownSubscription(f"unknown subscription id={sub_id!r}")
        return self.core.topk(int(sub_id))

    def stats(self) -> dict:
        out = {"subscriptions": len(self.core.subs), "window": len(self.window),
               "published": self.published}
        out.update(self.core.stats())
        out["subscriptions"] = len(self.core.subs)
        return out

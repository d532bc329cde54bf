"""The Paint server: the objects and the generation of messages (paper's "server").

:class:`RangeServer` turns a sequence of object updates into a :class:`Messages` batch and
applies the updates to its objects. What it sends is a function of its objects and, for
Paint-Sparse and Unicast, of the subscription set it was given (:meth:`set_subscriptions`: a
:class:`~.points.PointIndex`, the whole set or a sketch of it); it never reads a
subscriber's list. Updates (``ids``, ``x``: NaN where not given, ``y``: +inf to delete) are
applied in order, the same id may come back (a batch of a stream); each becomes slot events
(:mod:`.objects`): a value change in place, or a move as a delete at the old position and an
insert at the new one.

Processing modes: ``online`` (one update at a time), ``coalesce`` (one event per slot, first
old value to last new value, then online: the paper's Coalesce) and ``batch`` (Paint-Batch).
Unicast has no Paint-Batch: under ``batch`` it coalesces.
"""
from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from .objects import ObjectTable
from .paint import COUNTER_NAMES, MF, MI, N_COUNTERS, UNICAST, paint_batch, paint_online, run_length
from .points import PointIndex

__all__ = ["RangeServer", "Messages", "METHODS", "MODES", "PAINT_BYTES", "UNICAST_BYTES", "PAPER_PAINT_BYTES",
           "PAPER_UNICAST_BYTES"]

METHODS = ("paint-dense", "paint-sparse", "unicast")
MODES = ("online", "coalesce", "batch")
# bytes on the wire, 8 per field: a Paint message is a box (4) + object id + y; a unicast one
# a subscription id + object id + y
PAINT_BYTES = 48
UNICAST_BYTES = 24
# the paper's sizes (Section V), 4 bytes per field, read off its figures: a Paint message
# Msg(l_I, r_I, l_O, r_O, x, y) is 24 bytes (Paint-Dense's 3,501 bytes per event at m = 5M,
# k = 20 is 24 x 146 messages; the bench's Paint-Dense sends 138-148 per event at k = 20,
# n = 10k), a Unicast one 16 (a subscription id and an object: its mean, 316,158 bytes, is
# 16 x 19,760 = 16 x 2.5 x Table I's 7,904 receipts at m = 2M; its maximum, 39,998,000 bytes,
# is 16 x 2,499,875, about the m / 2 subscriptions around the middle x: there the paper seems
# to count one message per affected subscription, where this Unicast sends one that loses the
# object two, its new value and the replacement)
PAPER_PAINT_BYTES = 24
PAPER_UNICAST_BYTES = 16
# Paint-Sparse's queries around an update go to a local copy of the points there when they
# are at most this many (:func:`~.points.localize`)
LOCAL_CAP = 128


@dataclass
class Messages:
    """A columnar batch of messages, in delivery order: ``f`` float64[n, 5] (box l0, l1, r0,
    r1 closed, y; y = +inf: the object is gone), ``i`` int64[n, 4] (object id, index of the
    update that caused it, target subscription id or -1 for a box, kind: 0 the updated object,
    1 an exposed one, 2 unicast)."""

    f: np.ndarray
    i: np.ndarray

    def __len__(self) -> int:
        return len(self.i)

    @property
    def nbytes_on_wire(self) -> int:
        uni = int(np.count_nonzero(self.i[:, 3] == UNICAST)) if len(self.i) else 0
        return uni * UNICAST_BYTES + (len(self.i) - uni) * PAINT_BYTES

    @classmethod
    def empty(cls) -> "Messages":
        return cls(np.zeros((0, MF)), np.zeros((0, MI), np.int64))


@numba.njit(cache=True)
def _walk(inv, x, y, live, cur_x, cur_y, old_x, new_x, y_old, y_new):
    """The sequence of updates against the objects' state (by unique index ``inv[j]``): each
    update's old and new position x (NaN: not live) and values (+inf: none)."""
    for j in range(inv.shape[0]):
        u = inv[j]
        if live[u]:
            old_x[j] = cur_x[u]
            y_old[j] = cur_y[u]
        else:
            old_x[j] = np.nan
            y_old[j] = np.inf
        if y[j] == np.inf:
            new_x[j] = np.nan
            y_new[j] = np.inf
            live[u] = False
        else:
            nx = cur_x[u] if np.isnan(x[j]) else x[j]
            new_x[j] = nx
            y_new[j] = y[j]
            live[u] = True
            cur_x[u] = nx
            cur_y[u] = y[j]


class RangeServer:
    """Objects and Paint message generation (see the module docstring)."""

    def __init__(self, k: int, method: str = "paint-sparse", epsilon: float = 0.0, mode: str = "batch"):
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        self.k = int(k)
        self.method = method
        self.epsilon = float(epsilon)
        self.mode = mode
        self.objects = ObjectTable()
        self.points: PointIndex | None = None
        self.counters = np.zeros(N_COUNTERS, np.int64)
        self.seconds = 0.0
        # Paint-Sparse's queries around an update are answered from a copy of the points there
        # when they are at most this many (:func:`~.points.localize`); 0: always the k-d tree
        self.local_cap = LOCAL_CAP

    @property
    def run(self) -> int:
        return run_length(self.epsilon, self.k)

    def set_subscriptions(self, points: PointIndex | None) -> None:
        """The subscription set Paint-Sparse snaps on and Unicast enumerates."""
        self.points = points

    def object_state(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(live, x, y) of objects by id."""
        o = self.objects
        s = o.lookup(ids)
        live = s >= 0
        s = np.where(live, s, o.n)
        return live, o.xs[s], o.ys[s]

    def topk(self, lo: np.ndarray, hi: np.ndarray):
        """Initial lists of new subscriptions: (ids int64[m, k], y float64[m, k], counts)."""
        return self.objects.topk(lo, hi, self.k)

    def slot_events(self, ids, x, y):
        """The slot events of a sequence of updates: (slot, y_old, y_new, update index), moves
        split into a delete and an insert; the table gets the slots it lacks."""
        ids = np.ascontiguousarray(ids, np.int64)
        x = np.ascontiguousarray(x, np.float64)
        y = np.ascontiguousarray(y, np.float64)
        uniq, inv = np.unique(ids, return_inverse=True)
        live, cx, cy = self.object_state(uniq)
        n = len(ids)
        old_x, new_x, y_old, y_new = (np.empty(n) for _ in range(4))
        _walk(inv.astype(np.int64), x, y, live.copy(), cx.copy(), cy.copy(), old_x, new_x, y_old, y_new)
        has_new = ~np.isnan(new_x)
        self.objects.ensure(new_x[has_new], ids[has_new])
        has_old = ~np.isnan(old_x)
        s_old = np.full(n, -1, np.int64)
        s_new = np.full(n, -1, np.int64)
        s_old[has_old] = self.objects.slots(old_x[has_old], ids[has_old])
        s_new[has_new] = self.objects.slots(new_x[has_new], ids[has_new])
        move = has_old & has_new & (s_old != s_new)
        # per update: the event at the old slot (delete, or change in place), then at the new
        first_slot = np.where(has_old, s_old, s_new)
        first_new = np.where(move, np.inf, y_new)
        first_old = np.where(has_old, y_old, np.inf)
        ev = np.arange(n, dtype=np.int64)
        slot = np.concatenate([first_slot, s_new[move]])
        yo = np.concatenate([first_old, np.full(int(move.sum()), np.inf)])
        yn = np.concatenate([first_new, y_new[move]])
        idx = np.concatenate([ev, ev[move]])
        order = np.argsort(2 * idx + np.concatenate([np.zeros(n, np.int64), np.ones(int(move.sum()), np.int64)]),
                           kind="stable")
        slot, yo, yn, idx = slot[order], yo[order], yn[order], idx[order]
        ok = slot >= 0                  # an update that changes nothing (deleting a dead object)
        return slot[ok], yo[ok], yn[ok], idx[ok]

    def process(self, ids, x, y, mode: str | None = None) -> Messages:
        """Apply a sequence of updates and return the messages they cause, in order."""
        import time
        t0 = time.perf_counter()
        mode = self.mode if mode is None else mode
        slot, yo, yn, idx = self.slot_events(ids, x, y)
        if self.method == "unicast" and mode == "batch":
            mode = "coalesce"
        if mode in ("coalesce", "batch"):
            slot, yo, yn, idx = _coalesce(slot, yo, yn, idx)
        o = self.objects
        pts = self.points if self.points is not None else _EMPTY_POINTS()
        sparse = self.method == "paint-sparse"
        cnt = np.zeros(N_COUNTERS, np.int64)
        if self.method == "unicast":
            from .unicast import unicast_online
            mf, mi = unicast_online(slot, yo, yn, idx, o.tree, o.size, o.ys, o.ids, o.xs, o.n, self.k,
                                    pts.box, pts.start, pts.end, pts.lo, pts.hi, pts.key, pts.leaves, cnt)
        elif mode == "batch":
            dn = yn < yo
            up = yn > yo
            u = np.flatnonzero(up)
            u = u[np.lexsort((slot[u], o.ids[slot[u]], yn[u]))[::-1]]
            d = np.flatnonzero(dn)
            mf, mi = paint_batch(slot[d], yn[d], idx[d], slot[u], yo[u], yn[u], idx[u], o.tree, o.size, o.ys,
                                 o.ids, o.xs, o.n, self.k, self.run, sparse, pts.box, pts.start, pts.end,
                                 pts.lo, pts.hi, pts.leaves, cnt, self.local_cap)
        else:
            mf, mi = paint_online(slot, yo, yn, idx, o.tree, o.size, o.ys, o.ids, o.xs, o.n, self.k, self.run,
                                  sparse, pts.box, pts.start, pts.end, pts.lo, pts.hi, pts.leaves, cnt,
                                  self.local_cap)
        self._commit_slots(slot, yn)
        self.counters += cnt
        self.seconds += time.perf_counter() - t0
        return Messages(mf, mi)

    def _commit_slots(self, slot, yn) -> None:
        """Objects' live slots after the events (the kernels set the values): a slot that died
        is forgotten if its object still points at it (a moved object points at its new one)."""
        o = self.objects
        if not len(slot):
            return
        touched = np.unique(slot)
        alive = np.isfinite(o.ys[touched])
        dead = touched[~alive]
        if len(dead):
            o.slot_of.delete(o.ids[dead[o.lookup(o.ids[dead]) == dead]])
        if alive.any():
            o.slot_of.put(o.ids[touched[alive]], touched[alive])
        o.live = int(np.count_nonzero(np.isfinite(o.ys[: o.n])))

    def stats(self) -> dict:
        return {"objects": self.objects.live, "slots": self.objects.n,
                "calls": dict(zip(COUNTER_NAMES, self.counters.tolist())), "server_seconds": self.seconds}

    def state(self) -> dict:
        return {"objects": self.objects.state(), "counters": self.counters.copy()}

    def restore(self, st: dict) -> None:
        self.objects = ObjectTable.from_state(st["objects"])
        self.counters = np.asarray(st["counters"], np.int64).copy()


def _coalesce(slot, yo, yn, idx):
    """One event per slot, from its first old value to its last new value, in the order of
    first occurrence; events that change nothing dropped (paper IV-A, step 1)."""
    if not len(slot):
        return slot, yo, yn, idx
    order = np.argsort(slot, kind="stable")
    s = slot[order]
    start = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    stop = np.r_[start[1:], len(s)] - 1
    first = order[start]
    last = order[stop]
    keep = yo[first] != yn[last]
    first, last = first[keep], last[keep]
    o = np.argsort(first, kind="stable")
    first, last = first[o], last[o]
    return slot[first], yo[first], yn[last], idx[last]


_EMPTY = None


def _EMPTY_POINTS() -> PointIndex:
    global _EMPTY
    if _EMPTY is None:
        _EMPTY = PointIndex(np.zeros(0), np.zeros(0), np.zeros(0, np.int64))
    return _EMPTY

"""The routing table of covering routing (:mod:`rankcast.kinds.matching.covering.routing`):
the forwarded expressions of every distributor, each with its partition
(:class:`RouteTable`), the changes that travel between distributors (:class:`RouteUpdate`),
and the kernel that routes events by it (:func:`route_kernel`).

Matching an event against the table is one numba kernel over flat arrays per step
(:func:`route_kernel`): the table is the matching kind's own
:class:`~rankcast.kinds.matching.core.ExpressionTable`; each entry is found through one
*driver* predicate (its narrowest interval, as the partitions' cores choose one), entries
grouped by (partition, driver attribute) and sorted by the interval's low end with a running
maximum of the high ends, so that a stabbing walk from the event's value down stops at the
first entry that cannot contain it; a partition already reached is skipped, and the first
exact match (:func:`~rankcast.kinds.matching.core.holds_row` on every predicate) reaches it.
"""
from __future__ import annotations

import numba
import numpy as np

from rankcast.common.routing import Routing
from ..core import ExpressionTable, holds_row
from ..predicates import EventBatch, ExpressionBatch

__all__ = ["RouteTable", "RouteUpdate", "route_kernel"]


class RouteUpdate:
    """An owner's changes of one call to the routing tables: ``add`` (keyed expressions, in
    the partitions ``add_parts``) then ``remove`` (keys)."""

    __slots__ = ("add", "add_parts", "remove", "kinds")

    def __init__(self, add: ExpressionBatch | None, add_parts: np.ndarray, remove: np.ndarray, kinds: list):
        self.add, self.add_parts, self.remove, self.kinds = add, add_parts, remove, kinds

    def n_messages(self) -> int:
        return len(self.add_parts) + len(self.remove)


@numba.njit(cache=True)
def route_kernel(ev_off, ev_attr, ev_val, n_attrs, P, always, g_part, g_attr, g_start, g_end, e_slot, e_lo,
                 e_hi, e_pmax, p_start, p_end, p_attr, p_op, p_a, p_b, set_off, set_vals, counters):
    """The partitions every event reaches, as CSR (offsets, partitions ascending).

    Groups ``g`` (sorted by partition): entries ``g_start[g]:g_end[g]`` of partition
    ``g_part[g]`` driven by attribute ``g_attr[g]``, sorted by ``e_lo``; ``e_pmax`` the
    running maximum of ``e_hi`` in the group; ``e_slot`` the entry's slot in the table
    (predicates ``p_start[s]:p_end[s]``). ``always[p]``: ``p`` holds an entry without
    predicates. ``counters``: [entries checked exactly, groups searched], int64[2], updated in
    place. Events: CSR ``ev_off`` int64[n + 1], ``ev_attr`` int64, ``ev_val`` float64; the
    table's predicate columns as :class:`~rankcast.kinds.matching.core.ExpressionTable` holds
    them. Returns (offsets int64[n + 1], partitions int64[...])."""
    n = ev_off.shape[0] - 1
    val = np.zeros(n_attrs)
    has = np.zeros(n_attrs, np.bool_)
    reached = np.zeros(P, np.bool_)
    out_off = np.zeros(n + 1, np.int64)
    out = np.empty(n * P, np.int64)
    w = 0
    G = g_part.shape[0]
    for i in range(n):
        for j in range(ev_off[i], ev_off[i + 1]):
            val[ev_attr[j]] = ev_val[j]
            has[ev_attr[j]] = True
        for p in range(P):
            reached[p] = always[p]
        for g in range(G):
            p = g_part[g]
            if reached[p]:
                continue
            a = g_attr[g]
            if not has[a]:
                continue
            x = val[a]
            lo, hi = g_start[g], g_end[g]
            while lo < hi:                      # past the last entry with e_lo <= x
                m = (lo + hi) >> 1
                if e_lo[m] <= x:
                    lo = m + 1
                else:
                    hi = m
            counters[1] += 1
            e = lo - 1
            while e >= g_start[g] and e_pmax[e] >= x:
                if e_hi[e] >= x:
                    s = e_slot[e]
                    counters[0] += 1
                    ok = True
                    for q in range(p_start[s], p_end[s]):
                        at = p_attr[q]
                        if not has[at] or not holds_row(p_op, p_a, p_b, set_off, set_vals, q, val[at]):
                            ok = False
                            break
                    if ok:
                        reached[p] = True
                        break
                e -= 1
        for p in range(P):
            if reached[p]:
                out[w] = p
                w += 1
        out_off[i + 1] = w
        for j in range(ev_off[i], ev_off[i + 1]):
            has[ev_attr[j]] = False
    return out_off, out[:w]


class RouteTable:
    """The forwarded expressions of every owner, keyed, with their partitions (module
    docstring); the driver groups are rebuilt at the first event after a change."""

    def __init__(self, n_partitions: int):
        self.P = int(n_partitions)
        self.t = ExpressionTable()
        self.part = np.zeros(0, np.int64)          # per slot of ``t``
        self._built = None
        self.counters = np.zeros(2, np.int64)

    def __len__(self) -> int:
        return self.t.n_live

    def apply(self, upd: RouteUpdate) -> None:
        if upd.add is not None and len(upd.add):
            self.t.add(upd.add)
            self.part = np.concatenate([self.part, np.asarray(upd.add_parts, np.int64)])
        if len(upd.remove):
            self.t.remove(np.asarray(upd.remove, np.int64))
            keep = self.t.compact()
            if keep is not None:
                self.part = self.part[keep]
        self._built = None

    def per_partition(self) -> np.ndarray:
        live = np.flatnonzero(self.t.live[: self.t.n_slots])
        return np.bincount(self.part[live], minlength=self.P)

    def _build(self):
        t = self.t
        live = np.flatnonzero(t.live[: t.n_slots])
        n_pred = t.p_end[live] - t.p_start[live]
        always = np.zeros(self.P, np.bool_)
        always[self.part[live[n_pred == 0]]] = True
        live = live[n_pred > 0]
        off, rows = t.pred_rows(live)
        owner = np.repeat(np.arange(len(live)), np.diff(off))
        width = t.p_hi[rows] - t.p_lo[rows]
        order = np.lexsort((width, owner))              # per entry, its narrowest interval first
        drv = rows[order][off[:-1]] if len(live) else np.zeros(0, np.int64)
        part, attr = self.part[live], t.p_attr[drv].astype(np.int64)
        lo, hi = t.p_lo[drv], t.p_hi[drv]
        order = np.lexsort((lo, attr, part))
        part, attr, lo, hi, slot = part[order], attr[order], lo[order], hi[order], live[order]
        if len(part):
            starts = np.flatnonzero(np.r_[True, (part[1:] != part[:-1]) | (attr[1:] != attr[:-1])])
        else:
            starts = np.zeros(0, np.int64)
        ends = np.r_[starts[1:], len(part)].astype(np.int64)
        pmax = hi.copy()
        for a, b in zip(starts.tolist(), ends.tolist()):
            np.maximum.accumulate(pmax[a:b], out=pmax[a:b])
        n_attrs = int(t.p_attr.max()) + 1 if len(t.p_attr) else 0
        self._built = (always, part[starts].astype(np.int64), attr[starts].astype(np.int64),
                       starts.astype(np.int64), ends, slot.astype(np.int64), lo, hi, pmax, n_attrs)

    def route(self, events: EventBatch) -> Routing:
        if self._built is None:
            self._build()
        always, g_part, g_attr, g_start, g_end, e_slot, e_lo, e_hi, e_pmax, n_attrs = self._built
        t = self.t
        n_attrs = max(n_attrs, int(events.attr.max()) + 1 if len(events.attr) else 0)
        off, parts = route_kernel(events.off.astype(np.int64), events.attr.astype(np.int64),
                                  events.val.astype(np.float64), n_attrs, self.P, always, g_part, g_attr, g_start,
                                  g_end, e_slot, e_lo, e_hi, e_pmax, t.p_start, t.p_end, t.p_attr, t.p_op, t.p_a,
                                  t.p_b, t.set_off, t.set_vals, self.counters)
        return Routing(off, parts)

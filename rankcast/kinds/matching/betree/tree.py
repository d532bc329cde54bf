"""The engine-facing BE*-tree (:class:`BETreeCore`): the interface of
:class:`~rankcast.kinds.matching.core.MatchCore` over the node tables, calling into the
kernels of the package.

``build="batch"`` (the paper's BE*-B) puts a whole initial table in the root l-node and
partitions it top-down once; later calls insert one expression at a time.
"""
from __future__ import annotations

import numpy as np
from numba.typed import List

from ..core import MODES, RELAXED, DenseEvent, ExpressionTable
from .nodes import (F_AR, F_HV, INF, I_DIRTY, I_NUM, I_PV, LIST_CAP, M_CDIR, M_CNODES, M_EVALS, M_EVENTS, M_LNODES,
                    M_POPPED, M_PRUNED, M_PUSHED, M_RETRY, M_SPEC, NC, NM, NP, NU, NV, Q_LAZY, Q_VSHARE, U_BOX,
                    U_C, U_D, U_DEADC, U_EXPAND, U_LISTC, U_LIVEC, U_LIVEP, U_LONG, U_MERGE, U_NDIRTY, U_P, U_PART,
                    U_SPACE, U_SPLIT, U_W, _new_c)
from .summaries import _exact_summaries
from .update import _bulk_load, _insert_many, _remove_many
from .view import _full_begin, _full_write, _refresh_view
from .search import _match_many

__all__ = ["BETreeCore"]


# lazy summaries (``_exact_summaries``): a batch of at least max(LAZY_MIN, live / LAZY_SHARE)
# expressions (live: before it) skips the per-expression summary upkeep and recomputes the
# summaries of the nodes it changed once at its end
LAZY_MIN = 512
LAZY_SHARE = 4.0
LAZY_DENSE = 1 << 24   # most (size, attribute) places the recomputation's deduplication may take
HUGE_BYTES = 4 << 20   # numpy asks for transparent huge pages from this size on
# ----------------------------------------------------------------------------- the core
def _line_aligned_copy(a: np.ndarray) -> np.ndarray:
    """A copy of ``a`` whose data starts a 64-byte cache line (numpy aligns to 16 bytes)."""
    buf = np.empty(a.nbytes + 64, np.uint8)
    start = -buf.ctypes.data % 64
    out = buf[start: start + a.nbytes].view(a.dtype)
    out[:] = a
    return out


def _line_aligned_empty(n: int) -> np.ndarray:
    """``n`` uninitialised floats starting a 64-byte cache line, in numpy's memory (transparent
    huge pages from ``HUGE_BYTES`` on: ``BETreeCore._refresh``)."""
    buf = np.empty(8 * n + 64, np.uint8)
    start = -buf.ctypes.data % 64
    return buf[start: start + 8 * n].view(np.float64)


class BETreeCore:
    """The BE*-tree behind the interface of :class:`~rankcast.kinds.matching.core.MatchCore`
    (see the package docstring). ``leaf_capacity`` is A, ``alpha`` the minimum share of each
    split side, ``beta`` the growth that triggers bottom-up expansion, ``split``
    ``"exhaustive"`` or ``"approximate"``, ``build`` ``"dynamic"`` (one expression at a time)
    or ``"batch"`` (BE*-B: a first table bulk-loaded top-down); ``view_full_share`` and
    ``view_slack`` when the match view is rewritten whole rather than node by node
    (``_refresh_view``; tests set them to exercise both ways); ``lazy_min`` and ``lazy_share``
    which batches recompute summaries once at their end (:mod:`.update`);
    ``spec_scale`` the speculative threshold's factor (:mod:`.search`,
    "Speculative threshold": 1.0; 0 turns it off; tests raise it to force searches again)."""

    index_name = "be-tree"

    def __init__(self, scoring: str, index: str = "be-tree", *, leaf_capacity: int = 5, alpha: float = 0.1,
                 beta: float = 4.0, split: str = "exhaustive", build: str = "dynamic", view_full_share: float = 0.25,
                 view_slack: int = 65536, long_class: int = 32, list_cap: int = LIST_CAP, lazy_min: int = LAZY_MIN,
                 lazy_share: float = LAZY_SHARE, spec_scale: float = 1.0, **_):
        self.mode = MODES[scoring]
        if self.mode == RELAXED:
            from rankcast.errors import InvalidInput
            raise InvalidInput("BETreeCore: field 'scoring': the be-tree serves 'static' and 'weighted', not 'relaxed'")
        self.table = ExpressionTable()
        self.ev = DenseEvent(0)
        self.build = build
        self.q = np.array([leaf_capacity, alpha, beta, 1.0 if split == "exhaustive" else 0.0, self.mode,
                           view_full_share, view_slack, 0.0], np.float64)
        self.lazy_min, self.lazy_share = lazy_min, lazy_share
        self.counters = np.zeros(NM, np.int64)
        self.spec_scale = spec_scale
        self.long_class = long_class
        self.list_cap = list_cap
        self._reset_tree()

    def _reset_tree(self):
        self.IL = List([np.full(16 * NC, -1, np.int64), np.full(16 * NP, -1, np.int64), np.zeros(64, np.int64),
                        np.zeros(64, np.int64), np.zeros(NU, np.int64), np.zeros(64, np.int64),
                        np.zeros(64, np.int64), np.zeros(64, np.int64), np.full(16, -1, np.int64)])
        self.FL = List([np.full(16, -INF), np.full(16, -INF), np.zeros(64), np.full(256, INF),
                        np.full(16 * NV, -1.0), np.zeros(64)])
        self.IL[I_NUM][U_LONG] = self.long_class
        self.IL[I_NUM][U_LISTC] = self.list_cap
        _new_c(self.IL, self.FL, 0, -1, -1, 0, -1)                     # the root
        n = self.table.n_slots
        self.home = np.full(n, -1, np.int64)
        self.nxt = np.full(n, -1, np.int64)
        self.prv = np.full(n, -1, np.int64)
        self.mark = np.full(len(self.ev.val), -1, np.int64)
        self.acnt = np.zeros(len(self.ev.val), np.int64)
        if not hasattr(self, "wmax"):
            self.wmax = np.zeros(len(self.ev.val))    # per attribute, the largest weight ever added

    def __len__(self) -> int:
        return self.table.n_live

    # ------------------------------------------------------------------ updates
    def _grow(self, n_attrs: int) -> None:
        self.ev.grow(n_attrs)
        if n_attrs > len(self.mark):
            extra = n_attrs - len(self.mark)
            self.mark = np.r_[self.mark, np.full(extra, -1, np.int64)]
            self.acnt = np.r_[self.acnt, np.zeros(extra, np.int64)]
        if n_attrs > len(self.wmax):
            self.wmax = np.r_[self.wmax, np.zeros(n_attrs - len(self.wmax))]
        n = self.table.n_slots
        if n > len(self.home):
            extra = max(n, 2 * len(self.home)) - len(self.home)
            self.home = np.r_[self.home, np.full(extra, -1, np.int64)]
            self.nxt = np.r_[self.nxt, np.full(extra, -1, np.int64)]
            self.prv = np.r_[self.prv, np.full(extra, -1, np.int64)]

    def _expr_args(self):
        t = self.table
        return t.p_start, t.p_end, t.p_attr, t.p_lo, t.p_hi, t.p_w, t.score

    def add(self, batch, n_attrs: int) -> None:
        slots = self.table.add(batch)
        self._grow(n_attrs)
        np.maximum.at(self.wmax, batch.attr, batch.weight)
        self._insert(slots)
        self._refresh()

    def _refresh(self) -> None:
        """Bring the match view up to date with the tree (the nodes changed since the last
        call; see ``_refresh_view``)."""
        t = self.table
        num = self.IL[I_NUM]
        if num[U_NDIRTY] > self.q[Q_VSHARE] * (num[U_LIVEC] + num[U_LIVEP]):
            # everything anew (a build; _refresh_view's own test): the arena is numpy's
            # line-aligned memory from the start, written in place instead of copied below
            # (at 1M 0.7 s)
            hv = self.FL[F_HV].ctypes.data            # (its hot rows grown: copied below)
            n = _full_begin(self.IL, self.FL, self.mode, self.nxt, t.p_start, t.p_end, t.p_attr)
            self.FL[F_AR] = _line_aligned_empty(n)
            before = [hv, self.FL[F_AR].ctypes.data]
            _full_write(self.IL, self.FL, self.mode, self.nxt, t.p_start, t.p_end, t.p_attr, t.p_op, t.p_a, t.p_b,
                        t.p_w, t.set_off, t.ids, t.score)
        else:
            before = [self.FL[w].ctypes.data for w in (F_HV, F_AR)]
            _refresh_view(self.IL, self.FL, self.q, self.mode, self.nxt, t.p_start, t.p_end, t.p_attr, t.p_op, t.p_a,
                          t.p_b, t.p_w, t.set_off, t.ids, t.score)
        # a view array the kernel replaced is copied once into numpy's memory, which asks the
        # kernel for transparent huge pages (numba's allocator does not): the search's reads
        # land all over these arrays, and with 4 KiB pages most of them also miss the TLB
        # (at 1M, 15% of the top-5 time); the copy starts a cache line, so that a hot row is one
        # line and a block's first line holds as much of it as a line can
        for w, ptr in zip((F_HV, F_AR), before):
            a = self.FL[w]
            if a.ctypes.data != ptr and a.nbytes >= HUGE_BYTES:
                self.FL[w] = _line_aligned_copy(a)

    def _insert(self, slots: np.ndarray) -> None:
        fn = _bulk_load if (self.build == "batch" and self.table.n_live == len(slots)) else _insert_many
        # a batch large against the tree: summaries recomputed once at its end (_exact_summaries)
        lazy = len(slots) >= max(self.lazy_min, (self.table.n_live - len(slots)) / self.lazy_share)
        self.q[Q_LAZY] = 1.0 if lazy else 0.0
        try:
            fn(self.IL, self.FL, self.q, slots, self.home, self.nxt, self.prv, self.mark, self.acnt,
               *self._expr_args())
        finally:
            self.q[Q_LAZY] = 0.0
        if lazy:
            t = self.table
            na = len(self.mark)
            most = int((t.p_end[: t.n_slots] - t.p_start[: t.n_slots]).max(initial=0))
            # a place per (size, attribute) key for the deduplication, unless that is too many
            pos = np.full((most + 1) * na if (most + 1) * na <= LAZY_DENSE else 0, -1, np.int64)
            _exact_summaries(self.IL, self.FL, self.q, self.nxt, t.p_start, t.p_end, t.p_attr, t.p_w, t.score, pos, na)

    def remove(self, ids: np.ndarray) -> None:
        slots = self.table.remove(np.asarray(ids, np.int64))
        t = self.table
        _remove_many(self.IL, self.FL, self.q, slots, self.home, self.nxt, self.prv, t.p_start, t.p_end, t.p_attr,
                     t.p_lo, t.p_hi, t.p_w, t.score)
        num = self.IL[I_NUM]
        keep = t.compact()
        if keep is not None or num[U_DEADC] > max(1024, 2 * num[U_LIVEC]):
            self.rebuild()
        else:
            self._refresh()

    def rebuild(self) -> None:
        """A new tree over the live expressions (dead nodes and slots reclaimed): bulk-loaded
        under ``build="batch"``, else inserted one by one."""
        t = self.table
        t.compact()
        self._reset_tree()
        self._grow(len(self.ev.val))
        live = np.flatnonzero(t.live[: t.n_slots])
        self._insert(live)
        self._refresh()

    # ------------------------------------------------------------------ queries
    def match(self, events, k: int):
        n = len(events)
        out_id = np.empty(n * k, np.int64)
        out_sc = np.empty(n * k)
        out_n = np.zeros(n, np.int64)
        t = self.table
        ev = self.ev
        if len(self.wmax) < len(ev.val):            # the event table was grown from outside
            self.wmax = np.r_[self.wmax, np.zeros(len(ev.val) - len(self.wmax))]
        self._refresh()
        _match_many(self.FL[F_HV], self.FL[F_AR], self.IL[I_PV], self.mode, k, events.off, events.attr, events.val,
                    events.weight, ev.val, ev.has, ev.ew, self.wmax, t.set_vals, out_id, out_sc, out_n, self.counters,
                    float(self.spec_scale))
        return [(out_id[i * k: i * k + out_n[i]], out_sc[i * k: i * k + out_n[i]]) for i in range(n)]

    def stats(self) -> dict:
        num = self.IL[I_NUM]
        c = self.counters
        return {"expressions": len(self), "index": "be-tree", "build": self.build,
                "cnodes": int(num[U_LIVEC]), "pnodes": int(num[U_LIVEP]), "splits": int(num[U_SPLIT]),
                "space_splits": int(num[U_SPACE]), "partitions": int(num[U_PART]),
                "expansions": int(num[U_EXPAND]), "merges": int(num[U_MERGE]), "index_bytes": self.nbytes(),
                "events": int(c[M_EVENTS]), "nodes": int(c[M_CNODES]), "lnodes_scanned": int(c[M_LNODES]),
                "random_accesses": int(c[M_EVALS]), "pnodes_pushed": int(c[M_PUSHED]),
                "pnodes_popped": int(c[M_POPPED]), "pruned": int(c[M_PRUNED]),
                "cdir_nodes": int(c[M_CDIR]), "speculated": int(c[M_SPEC]),
                "speculation_retries": int(c[M_RETRY])}

    def nbytes(self) -> int:
        num = self.IL[I_NUM]
        return int(num[U_C] * NC * 8 + num[U_P] * NP * 8 + num[U_W] * 16 + num[U_D] * 16 + num[U_BOX] * 40
                   + 8 * (num[U_C] + num[U_P]) + 3 * 8 * len(self.home)
                   + self.FL[F_HV].nbytes + self.FL[F_AR].nbytes + self.IL[I_PV].nbytes + self.IL[I_DIRTY].nbytes)

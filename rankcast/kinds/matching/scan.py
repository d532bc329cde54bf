"""The scan index of ranked matching (``index="scan"``): every live expression checked
against every event by one compiled pass over the flat tables
(:meth:`~rankcast.kinds.matching.core.ExpressionTable.evaluate`), then the top-k sorted out.
Exact by construction: the brute force the oracle tests compare with, and the benchmarks'
floor."""
from __future__ import annotations

import numpy as np

from .core import MODES, DenseEvent, ExpressionTable, top_of

__all__ = ["ScanCore"]


class ScanCore:
    """Every expression checked (see the module docstring); the interface of
    :class:`~rankcast.kinds.matching.core.MatchCore`."""

    index_name = "scan"

    def __init__(self, scoring: str, index: str = "scan", **_):
        self.mode = MODES[scoring]
        self.table = ExpressionTable()
        self.ev = DenseEvent(0)
        self.counters = dict(events=0, random_accesses=0)

    def __len__(self) -> int:
        return self.table.n_live

    def add(self, batch, n_attrs: int) -> None:
        self.ev.grow(n_attrs)
        self.table.add(batch)

    def remove(self, ids) -> None:
        self.table.remove(ids)
        self.table.compact()

    def match(self, events, k: int):
        t = self.table
        live = np.flatnonzero(t.live[: t.n_slots])
        out = []
        for i in range(len(events)):
            a, b = events.off[i], events.off[i + 1]
            self.ev.set(events.attr[a:b], events.val[a:b], events.weight[a:b])
            ok, sc = t.evaluate(live, self.mode, self.ev)
            self.counters["events"] += 1
            self.counters["random_accesses"] += len(live)
            out.append(top_of(t.ids[live][ok], sc[ok], k))
        return out

    def stats(self) -> dict:
        return {"expressions": len(self), "index": "scan", **self.counters}

"""Baselines of ranked matching, apart from the production paths, behind the interface of
:class:`rankcast.kinds.matching.core.MatchCore` (``rc.Matcher(cfg, core=...)``):

- :class:`ScanCore` (``index="scan"``, an index of the kind:
  :mod:`rankcast.kinds.matching.scan`): every live expression checked against every event,
  then the top-k sorted out: the brute force the oracle tests compare with, and the
  benchmark's floor;
- :class:`NaiveStabCore`: the per-attribute interval indexes asked for *every* stabbed
  interval, every candidate checked, then sorted (the approach the paper argues against).
"""
from __future__ import annotations

import numpy as np

from rankcast.kinds.matching.core import MatchCore, RELAXED, top_of
from rankcast.kinds.matching.scan import ScanCore

__all__ = ["ScanCore", "NaiveStabCore"]


class NaiveStabCore(MatchCore):
    """All stabbed intervals of every attribute the event has, checked, then sorted."""

    def match(self, events, k: int):
        out = []
        t = self.table
        for i in range(len(events)):
            a, b = events.off[i], events.off[i + 1]
            attrs = events.attr[a:b]
            self.ev.set(attrs, events.val[a:b], events.weight[a:b])
            self.counters["events"] += 1
            items = [cur.next(len(idx))[0] for cur, idx in self._all_cursors(attrs)]
            cand = np.unique(np.concatenate(items)) if items else np.zeros(0, np.int64)
            self.counters["sorted_accesses"] += sum(len(x) for x in items)
            self.counters["random_accesses"] += len(cand)
            slots = cand if self.mode == RELAXED else t.slots(cand)    # relaxed indexes hold slots
            ok, sc = t.evaluate(slots, self.mode, self.ev)
            out.append(top_of(t.ids[slots[ok]], sc[ok], k))
        return out

    def _all_cursors(self, attrs):
        for a in attrs.tolist():
            idx = self.indexes.get(a)
            if idx is not None and len(idx):
                yield idx.open(float(self.ev.val[a])), idx

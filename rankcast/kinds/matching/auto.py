"""``index="auto"``: the core that chooses how a table of expressions is served, from its
statistics (docs/matching.md).

- **box** (:class:`~rankcast.kinds.matching.boxtree.BoxCore`) while the expressions are boxes
  over at most :data:`~rankcast.kinds.matching.scan.MAX_COLUMNS` attributes: one tree over
  whole expressions, searched best first; with nothing to prune it visits every leaf, about one
  scan, so it is not slower than the columnar scan by more than the tree's overhead;
- once more than half of at least ``MIN_SWITCH`` live expressions name attributes beyond the
  columns (wide schemas: hundreds of attributes, a few per expression), which the box tree
  would only scan: the **BE*-tree** (:class:`~rankcast.kinds.matching.betree.BETreeCore`,
  built for such schemas) for ``static`` / ``weighted``, the **paper** driver
  (:class:`~rankcast.kinds.matching.core.MatchCore` over SOPT-R-trees: the Threshold
  Algorithm) for ``relaxed``.

Under ``static`` / ``weighted`` both the box tree and the BE*-tree suit narrow schemas, and
which is faster depends on the data (how selective the boxes are, how many attributes an
expression names). When the expressions name most of the attributes in use (predicates per
expression at least ``RACE_DENSITY`` of them) the box tree keeps the table: its nodes prune on
every attribute, and the BE*-tree, which partitions by attribute first, has nothing to gain
there. Otherwise, once the table holds ``RACE_MIN`` expressions, the first match call builds
a BE*-tree beside the box tree and answers its next ``RACE_EVENTS`` events with both, timing
each side on parts of each call with the collector off (the first event of the race is
answered by both untimed: the box tree is built on its first event, and a build is not time
per event); the faster one keeps the table (the median of the parts' time ratios, or the
total times over fewer than five parts), the other is dropped.

The expressions move from one core to the other when the statistics cross (a rebuild from the
table); a batch that makes the table wide moves it before the box tree's columns are filled for
it. Answers are the same either way, exact.
"""
from __future__ import annotations

import gc
import time

import numpy as np

from .boxtree import BoxCore
from .core import MatchCore
from .scan import MAX_COLUMNS

__all__ = ["AutoCore"]


class AutoCore:
    """See the module docstring; the interface of
    :class:`~rankcast.kinds.matching.core.MatchCore`."""

    MIN_SWITCH = 256
    RACE_MIN, RACE_EVENTS, RACE_DENSITY = 4096, 24, 0.9
    RACE_PARTS = 8                  # samples of the verdict per raced call (_race_parts)

    def __init__(self, scoring: str, index: str = "auto", **kw):
        self.scoring = scoring
        self.index_name = "auto"
        self._kw = kw
        self.inner = BoxCore(scoring, "auto", **kw)
        self.n_attrs = 0
        self.switches = 0
        self.rival = None               # the BE*-tree racing the box tree (module docstring)
        self.raced = scoring == "relaxed"
        self._race = [0.0, 0.0, 0]      # seconds of the box tree, of the rival; events raced (timed)
        self._calls: list[tuple[float, float]] = []     # per raced call: seconds of the box tree, of the rival
        self._warm = False              # the race's first event answered (untimed)

    @property
    def table(self):
        return self.inner.table

    @property
    def ev(self):
        return self.inner.ev

    @property
    def mode(self):
        return self.inner.mode

    @property
    def counters(self):
        return self.inner.counters

    def __len__(self) -> int:
        return len(self.inner)

    def _wide(self) -> bool:
        """Whether more than half of the live expressions are outside the box tree's columns."""
        core = self.inner
        if not isinstance(core, BoxCore) or len(core) < self.MIN_SWITCH:
            return False
        t, cols = core.table, core.cols
        out = np.count_nonzero(~cols.columnar[: cols.n] & t.live[: cols.n])
        return 2 * out > len(core)

    def _wide_with(self, batch) -> bool:
        """Whether the table would be wide (:meth:`_wide`) once ``batch`` is added: decided
        from the batch's attributes before the box tree's columns are filled for it."""
        core = self.inner
        if not isinstance(core, BoxCore) or len(core) + len(batch) < self.MIN_SWITCH or not len(batch):
            return False
        t, cols = core.table, core.cols
        out = np.count_nonzero(~cols.columnar[: cols.n] & t.live[: cols.n])
        cnt = np.diff(batch.pred_off)
        top = np.full(len(batch), -1, np.int64)
        top[cnt > 0] = np.maximum.reduceat(batch.attr.astype(np.int64), batch.pred_off[:-1][cnt > 0])
        out += np.count_nonzero(top >= MAX_COLUMNS)
        return 2 * out > len(core) + len(batch)

    def add(self, batch, n_attrs: int) -> None:
        self.n_attrs = max(self.n_attrs, n_attrs)
        if self._wide_with(batch):
            self._move(batch)
            return
        self.inner.add(batch, n_attrs)
        if self.rival is not None:
            self.rival.add(batch, n_attrs)
        if self._wide():
            self._move(None)

    def _move(self, batch) -> None:
        """Serve the table (and ``batch``, not yet added anywhere) by the core for wide schemas."""
        self.rival = None
        self.raced = True
        old = self.inner
        ev = old.ev
        if self.scoring == "relaxed":
            self.inner = MatchCore(self.scoring, "sopt-r-tree", **self._kw)
        else:
            from .betree import BETreeCore
            self.inner = BETreeCore(self.scoring, "be-tree", **self._kw)
        if len(old):
            self.inner.add(old.table.batch(), self.n_attrs)
        if batch is not None:
            self.inner.add(batch, self.n_attrs)
        self.inner.ev.grow(max(len(ev.val), self.n_attrs))
        self.switches += 1

    def remove(self, ids) -> None:
        self.inner.remove(ids)
        if self.rival is not None:
            self.rival.remove(ids)

    def match(self, events, k: int):
        if not self.raced and isinstance(self.inner, BoxCore) and len(self.inner) >= self.RACE_MIN:
            self.raced = True
            if self._sparse():
                from .betree import BETreeCore
                self.rival = BETreeCore(self.scoring, "be-tree", **self._kw)
                self.rival.add(self.inner.table.batch(), self.n_attrs)
        if self.rival is None:
            return self.inner.match(events, k)
        self.rival.ev.grow(len(self.inner.ev.val))
        out = []
        if not self._warm and len(events):
            # the race's first event, answered by both untimed: what either builds lazily (the
            # box tree is built on its first event) is no part of the time per event compared
            first = events.take([0])
            out += self.inner.match(first, k)
            self.rival.match(first, k)
            self._warm = True
            events = events.take(np.arange(1, len(events)))
        if len(events):
            out += self._race_parts(events, k)
        if self._race[2] >= self.RACE_EVENTS:
            if self._rival_faster():
                self.inner = self.rival
                self.switches += 1
            self.rival = None
        return out

    def _race_parts(self, events, k: int) -> list:
        """The timed part of the race: ``events`` in up to :data:`RACE_PARTS` parts, each
        answered by the box tree, then by the rival, the collector off meanwhile. Each part is
        one sample of the verdict's median (:meth:`_rival_faster`): a collection, a page fault
        or a neighbour's burst slows one part of one side, not the whole race (timed as one
        sample, a single collection inside one side's time can decide it). Returns the box
        tree's answers, in order."""
        n = len(events)
        size = -(-n // self.RACE_PARTS)
        out: list = []
        collecting = gc.isenabled()
        gc.disable()
        try:
            for a in range(0, n, size):
                part = events if size >= n else events.take(np.arange(a, min(n, a + size)))
                t0 = time.perf_counter()
                out += self.inner.match(part, k)
                t1 = time.perf_counter()
                self.rival.match(part, k)
                t2 = time.perf_counter()
                self._race[0] += t1 - t0
                self._race[1] += t2 - t1
                self._race[2] += len(part)
                self._calls.append((t1 - t0, t2 - t1))
        finally:
            if collecting:
                gc.enable()
        return out

    def _sparse(self) -> bool:
        """Whether the expressions name few of the attributes in use (predicates per expression
        below ``RACE_DENSITY`` of them): only then can the BE*-tree, which partitions by
        attribute first, gain on the box tree, whose nodes prune on every attribute their boxes
        all name; on dense tables its build is all the race would add (one-attribute tables of
        long intervals take it minutes at 200k)."""
        t = self.inner.table
        live = np.flatnonzero(t.live[: t.n_slots])
        if not len(live):
            return False
        _, rows = t.pred_rows(live)
        in_use = len(np.unique(t.p_attr[rows]))
        return len(rows) < self.RACE_DENSITY * in_use * len(live)

    def _rival_faster(self) -> bool:
        """The race's verdict: over at least five parts (:meth:`_race_parts`) the median of
        their time ratios (a part slowed by something else does not decide), over fewer the
        ratio of the total times."""
        if len(self._calls) >= 5:
            return float(np.median([a / max(b, 1e-12) for a, b in self._calls])) > 1.0
        return self._race[1] < self._race[0]

    def stats(self) -> dict:
        s = self.inner.stats()
        driver = "box" if isinstance(self.inner, BoxCore) else "paper" if isinstance(self.inner, MatchCore) else "be-tree"
        s.update(index="auto", driver=driver, switches=self.switches, raced_events=self._race[2],
                 raced_box_seconds=self._race[0], raced_be_tree_seconds=self._race[1])
        return s

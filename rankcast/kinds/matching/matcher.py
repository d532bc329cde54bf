"""rc.Matcher: the single-process engine of the ranked-matching kind (docs/contract.md).

Every call is validated whole before anything takes effect (errors name item and field);
then the expressions go into :class:`~rankcast.kinds.matching.core.MatchCore` (or a baseline
core with its interface) and events are answered with their top-k expressions.
"""
from __future__ import annotations

import copy
import time

import numpy as np

from rankcast.config import MatchConfig
from rankcast.common.validation import check_ids_arg
from rankcast.common.snapshots import checked, tagged
from rankcast.common.arrays import key_rank
from rankcast.common.updates import check_updates_form, diff_table, no_gc, updates_table
from rankcast.errors import InvalidInput, UnknownSubscription
from .core import MatchCore
from rankcast.model import Match
from .predicates import AttributeTable, encode_events, encode_expressions

__all__ = ["Matcher", "matches_from_arrays", "new_core"]


def matches_from_arrays(event_ids, results) -> list[Match]:
    """``rc.Match`` objects from per-event (ids, scores) arrays."""
    with no_gc():
        return [Match(e, tuple(zip(ids.tolist(), sc.tolist()))) for e, (ids, sc) in zip(event_ids.tolist(), results)]


def new_core(cfg: MatchConfig, cls=None):
    """The core serving ``cfg.index`` (``cls`` replaces its class: baselines)."""
    if cls is None:
        driver = getattr(cfg, "driver", "auto")     # configurations pickled before drivers existed
        if cfg.index == "scan":
            from .scan import ScanCore
            cls = ScanCore
        elif cfg.index == "be-tree":
            from .betree import BETreeCore
            cls = BETreeCore
        elif driver == "pivot":
            from .pivot import PivotCore
            cls = PivotCore
        elif cfg.index == "auto" and driver == "auto":
            from .auto import AutoCore
            cls = AutoCore
        elif driver == "box":
            from .boxtree import BoxCore
            cls = BoxCore
        else:
            cls = MatchCore
    return cls(cfg.scoring, cfg.index, b=cfg.branching, rebuild_fraction=cfg.rebuild_fraction,
               rebuild_min=cfg.rebuild_min, leaf_capacity=cfg.leaf_size, alpha=cfg.alpha, beta=cfg.beta,
               split=cfg.split, build=cfg.build)


class Matcher:
    """Top-k expressions per event (see the module docstring). ``core`` replaces the core
    class (baselines: ``rankcast.baselines.matching``).

    The verbs every kind's engine has (``docs/contract-changes.md``), read for this kind:
    ``subscribe(expressions)`` / ``unsubscribe(ids)`` add and remove expressions (the kind's
    subscriptions); ``publish(events, k=None, updates=...)`` answers each event with its
    top-k expressions (``rc.Match``) and changes no subscription's state; ``topk(sub_id)``
    has no meaning here (an expression holds no standing top-k) and raises
    ``rc.InvalidInput``; ``stats()``; ``snapshot()`` / ``Matcher.restore(snap)``; ``len()``
    (live expressions)."""

    KIND = "ranked-matching"

    def __init__(self, cfg: MatchConfig | None = None, *, core=None):
        cfg = MatchConfig() if cfg is None else cfg
        if not isinstance(cfg, MatchConfig):
            raise InvalidInput(f"Matcher: expected a MatchConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        self.attrs = AttributeTable()
        self.core = new_core(cfg, core)
        self.live: set[int] = set()
        self.published = 0
        self._seconds = {"subscribe": 0.0, "unsubscribe": 0.0, "publish": 0.0}

    def subscribe(self, exprs) -> None:
        t0 = time.perf_counter()
        batch, pending = encode_expressions(exprs, self.attrs)
        for pos, eid in enumerate(batch.ids.tolist()):
            if eid in self.live:
                raise InvalidInput(f"expression #{pos} (id={eid}): field 'id': already subscribed")
        self.attrs.commit(pending)
        if len(batch):
            self.core.add(batch, len(self.attrs))
            self.live.update(batch.ids.tolist())
        self._seconds["subscribe"] += time.perf_counter() - t0

    def unsubscribe(self, ids) -> None:
        t0 = time.perf_counter()
        arr = check_ids_arg(ids)
        for i in arr.tolist():
            if i not in self.live:
                raise UnknownSubscription(f"unknown expression id={i}")
        if len(arr):
            self.core.remove(arr)
            self.live.difference_update(arr.tolist())
        self._seconds["unsubscribe"] += time.perf_counter() - t0

    def publish(self, events, k: int | None = None, updates: str = "objects"):
        """Each event's top-k expressions (``k`` defaults to the config's), in input order:
        ``rc.Match`` objects, or (``updates="arrow"``) one Arrow table of ``event_id``,
        ``rank``, ``expression_id``, ``score``, or (``"diff"``) the same rows with ``sign`` +1
        (an event's list starts empty: every entry enters it), or nothing (``"none"``)."""
        t0 = time.perf_counter()
        form = check_updates_form(updates)
        if k is None:
            k = self.cfg.k
        elif isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise InvalidInput(f"publish: field 'k': must be an integer >= 1, got {k!r}")
        batch, pending = encode_events(events, self.attrs)
        self.attrs.commit(pending)      # new attributes' types (no expression names them yet)
        self.core.ev.grow(len(self.attrs))
        res = self.core.match(batch, int(k))
        if form == "objects":
            out = matches_from_arrays(batch.ids, res)
        elif form in ("arrow", "diff"):
            lens = np.fromiter((len(r[0]) for r in res), np.int64, len(res))
            off = np.zeros(len(res) + 1, np.int64)
            np.cumsum(lens, out=off[1:])
            ids = np.concatenate([r[0] for r in res]) if res else np.zeros(0, np.int64)
            sc = np.concatenate([r[1] for r in res]) if res else np.zeros(0)
            if form == "arrow":
                out = updates_table(batch.ids, off, ids, sc, key="event_id", item="expression_id", by_key=False)
            else:       # each event's list is new: every entry entered it (+1), events in input order
                key, rank = key_rank(np.asarray(batch.ids, np.int64), off)
                out = diff_table(key, rank, ids, sc, np.ones(len(key), np.int8), key="event_id",
                                 item="expression_id")
        else:
            out = None
        self.published += len(batch)
        self._seconds["publish"] += time.perf_counter() - t0
        return out

    def topk(self, sub_id):
        """Not a verb of this kind: an expression holds no standing top-k, each event gets
        its own (the ``rc.Match`` objects :meth:`publish` returns). Always raises
        ``rc.InvalidInput`` (as ``rc.Cluster.topk`` of a ranked-matching cluster does)."""
        raise InvalidInput("topk: a ranked-matching expression holds no standing top-k; publish returns "
                           "each event's top-k expressions (rc.Match)")

    def __len__(self) -> int:
        """The number of live expressions."""
        return len(self.live)

    def stats(self) -> dict:
        return {"kind": self.KIND, "scoring": self.cfg.scoring, "subscriptions": len(self.live),
                "published": self.published, "attributes": len(self.attrs),
                "seconds": dict(self._seconds), **self.core.stats()}

    # ------------------------------------------------------------------ snapshot and restore
    def snapshot(self) -> dict:
        """The matcher's state as a picklable dict that later calls do not change (see
        :mod:`rankcast.common.snapshots`): the configuration, the core's class, the
        attribute table (names, types, string codes), the live expressions as encoded columns
        and the counters. The indexes are not in it (the BE*-tree's do not pickle):
        :meth:`restore` rebuilds them from the expressions, as a cluster partition does."""
        return tagged(self.KIND, {
            "cfg": self.cfg, "core_class": type(self.core), "attrs": copy.deepcopy(self.attrs),
            "expressions": self.core.table.batch(), "published": self.published,
            "seconds": dict(self._seconds)})

    @classmethod
    def restore(cls, snap: dict) -> "Matcher":
        """A new matcher in the state of ``snap`` (from :meth:`snapshot`, possibly pickled
        and read back): every later call returns what the snapshotted matcher's would."""
        snap = checked(snap, cls.KIND, cls.__name__)
        m = cls(snap["cfg"], core=snap["core_class"])
        m.attrs = copy.deepcopy(snap["attrs"])
        exprs = snap["expressions"]
        if len(exprs):
            m.core.add(exprs, len(m.attrs))
        m.core.ev.grow(len(m.attrs))
        m.live = set(exprs.ids.tolist())
        m.published = int(snap["published"])
        m._seconds.update(snap["seconds"])
        return m

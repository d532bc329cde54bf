"""rc.Engine: the single-process Skype engine of the contract."""
from __future__ import annotations

import pickle
import time
from numbers import Integral
from typing import Callable

import numpy as np
import pyarrow as pa

from rankcast.kinds.spatial.columns import Encoder, MessageBatch
from rankcast.common.validation import item_error, plain
from rankcast.config import EngineConfig
from rankcast.errors import InvalidInput, UnknownSubscription
from .core import SkypeCore
from .window import MessageWindow, WindowClock
from rankcast.model import Update
from rankcast.common.updates import (_empty_result, check_updates_form, columns_table, diff_table, updates_from_arrays,
                                     updates_table)
from rankcast.common.validation import check_ids_arg, check_not_live
from rankcast.common.snapshots import checked, tagged

__all__ = ["Engine", "check_message_state"]


def check_message_state(batch: MessageBatch, in_window: np.ndarray, time_window: bool, t_max: float) -> None:
    """A publish call's state checks: no id already in the window (``in_window`` mask), and
    under a time window no time before the largest published so far."""
    if in_window.any():
        p = int(np.flatnonzero(in_window)[0])
        raise item_error("message", p, int(batch.ids[p]), "id", "a message with this id is in the window")
    if time_window and len(batch) and batch.t[0] < t_max:
        raise item_error("message", 0, int(batch.ids[0]), "t",
                         f"must not decrease, got {plain(batch.t[0])!r} after {plain(t_max)!r}")


class Engine:
    """Exact continuous top-k over a sliding window for spatial-keyword subscriptions.

    The verbs every kind's engine has (``docs/contract-changes.md``): ``subscribe(subs)``,
    ``unsubscribe(ids)``, ``publish(msgs, updates=...)`` (the call's ``rc.Update`` list),
    ``topk(sub_id)``, ``stats()``, ``snapshot()`` / ``Engine.restore(snap)`` and ``len()``
    (live subscriptions).

    ``core`` replaces the Skype core by another one with the same interface (the baselines
    of :mod:`rankcast.baselines` use it)."""

    KIND = "spatial-keyword"

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
        one Arrow table of whole lists (``updates="arrow"``: :func:`updates_table`), as one
        Arrow table of the entries that left and entered the lists (``"diff"``:
        :func:`diff_table`) or not at all (``"none"``: read ``topk`` later)."""
        form = check_updates_form(updates)
        if form == "diff" and not hasattr(self.core, "take_update_diff"):
            raise InvalidInput(f"publish: field 'updates': 'diff' needs a core that keeps its lists' "
                               f"snapshots, not {type(self.core).__name__}")
        batch, pending = self.encoder.encode_messages(msgs, time_window=self.cfg.time_window)
        self._check_messages(batch)
        self.encoder.commit(pending)
        n = len(batch)
        if n == 0:
            return _empty_result(form)
        seqs = np.arange(self.last_seq + 1, self.last_seq + 1 + n, dtype=np.int64)
        diff = {"diff": True} if form == "diff" else {}     # a core that gives diffs snapshots for them
        step = self.cfg.batch_size
        for a in range(0, n, step):
            part = batch.take(np.arange(a, min(n, a + step))) if n > step else batch
            s = seqs[a:a + step]
            expire_upto = self.clock.advance(s, part.t)
            before = len(self.window)
            self.window.append(part, s, expire_upto)
            if hasattr(self.core, "observe_window"):   # cost model input (paper 6.3)
                self.core.observe_window(len(self.window), len(part), before + len(part) - len(self.window))
            self.core.process(part, s, expire_upto, last=a + step >= n, **diff)
        self.last_seq = int(seqs[-1])
        self.published += n
        self._reevaluate()
        if form == "none" and hasattr(self.core, "discard_updates"):
            self.core.discard_updates()
            return None
        if form == "arrow" and hasattr(self.core, "take_update_columns"):
            return columns_table(*self.core.take_update_columns())
        if form == "diff":
            return diff_table(*self.core.take_update_diff())
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

    def __len__(self) -> int:
        """The number of live subscriptions."""
        return len(self.core.subs)

    def stats(self) -> dict:
        out = {"kind": self.KIND, "subscriptions": len(self.core.subs), "window": len(self.window),
               "published": self.published}
        out.update(self.core.stats())
        out["subscriptions"] = len(self.core.subs)
        return out

    # ------------------------------------------------------------------ snapshot and restore
    def snapshot(self) -> dict:
        """The engine's state as a picklable dict that later calls do not change (see
        :mod:`rankcast.common.snapshots`): the configuration, the term dictionary, the window's
        messages with their positions and the window's clock, the core (subscriptions, their
        buffers and index, pickled) and the counters. The window's message index is not in
        it: :meth:`restore` rebuilds it from the messages."""
        win = self.window
        return tagged(self.KIND, {
            "cfg": self.cfg, "encoder": pickle.dumps(self.encoder, protocol=5),
            "clock": pickle.dumps(self.clock, protocol=5), "core": pickle.dumps(self.core, protocol=5),
            "messages": win.snapshot(), "seqs": win.seqs(),
            "window": {"fine_from": win.fine_from, "split_at": win.split_at, "flat_upto": win.flat_upto,
                       "last_seq": win.last_seq, "t_max": win.t_max},
            "last_seq": self.last_seq, "published": self.published})

    @classmethod
    def restore(cls, snap: dict) -> "Engine":
        """A new engine in the state of ``snap`` (from :meth:`snapshot`, possibly pickled and
        read back): every later call returns what the snapshotted engine's would."""
        snap = checked(snap, cls.KIND, cls.__name__)
        core = pickle.loads(snap["core"])
        eng = cls(snap["cfg"], core=lambda _cfg: core)
        eng.encoder = pickle.loads(snap["encoder"])
        eng.clock = pickle.loads(snap["clock"])
        win, w = eng.window, snap["window"]
        win.fine_from, win.split_at, win.flat_upto = w["fine_from"], w["split_at"], w["flat_upto"]
        msgs, seqs = snap["messages"], snap["seqs"]
        step = eng.cfg.batch_size         # in the slices publish appends (index nodes reserved per slice)
        for a in range(0, len(msgs), step):
            win.append(msgs.take(np.arange(a, min(len(msgs), a + step))), seqs[a:a + step], None)
        win.last_seq, win.t_max = w["last_seq"], w["t_max"]
        eng.last_seq, eng.published = int(snap["last_seq"]), int(snap["published"])
        return eng

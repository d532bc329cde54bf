"""rc.RangeEngine: the single-process engine of the range top-k kind (docs/contract.md).

It joins the two sides of :mod:`rankcast.kinds.range`: every call is validated whole first
(:mod:`.inputs`), then a publish call goes to the :class:`~.server.RangeServer`, which turns
the updates into a message batch, and the batch to the :class:`~.subscribers.SubscriberStore`,
which delivers it and says which top-k lists changed; those are the call's updates.
"""
from __future__ import annotations

import time

import numpy as np

from rankcast.config import RangeConfig
from rankcast.common.arrays import expand_runs
from rankcast.common.validation import check_ids_arg
from rankcast.common.snapshots import checked, tagged
from rankcast.common.updates import check_updates_form, columns_table, diff_table, updates_from_arrays
from rankcast.errors import InvalidInput, UnknownSubscription
from rankcast.common.validation import item_error
from .inputs import check_update_state, encode_subscriptions, encode_updates
from .server import RangeServer
from .subscribers import SubscriberStore

__all__ = ["RangeEngine"]


class RangeEngine:
    """The k objects of lowest y in each subscription's x range, kept exact under object
    inserts, changes, moves and deletes (see the module docstring).

    The verbs every kind's engine has (``docs/contract-changes.md``): ``subscribe(subs)``
    (``rc.RangeSubscription``), ``unsubscribe(ids)``, ``publish(objs, updates=...)``
    (``rc.ObjectUpdate``; the call's ``rc.Update`` list), ``topk(sub_id)``, ``stats()``,
    ``snapshot()`` / ``RangeEngine.restore(snap)`` and ``len()`` (live subscriptions).

    ``trace=True`` keeps the last publish call's messages and receipts in ``self.last``
    (tests and benchmarks: ``messages``, ``receipts`` per message, ``trace`` (row, message)
    pairs, ``rows_sid`` the subscription id of each row)."""

    KIND = "range-topk"

    def __init__(self, cfg: RangeConfig | None = None, *, trace: bool = False):
        cfg = RangeConfig() if cfg is None else cfg
        if not isinstance(cfg, RangeConfig):
            raise InvalidInput(f"RangeEngine: expected a RangeConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        self.server = RangeServer(cfg.k, cfg.method, cfg.epsilon, "batch" if cfg.batch else "online")
        self.subs = SubscriberStore(cfg.k, cfg.leaf_size)
        self.trace = trace
        self.last: dict | None = None
        self._totals = {"updates": 0, "events": 0, "messages_generated": 0, "messages_delivered": 0,
                        "messages_received": 0, "bytes_generated": 0, "subscriptions_changed": 0}
        self._seconds = {"subscribe": 0.0, "unsubscribe": 0.0, "publish": 0.0, "deliver": 0.0}

    # ------------------------------------------------------------------ subscriptions
    def _share_subscriptions(self) -> None:
        """Paint-Sparse and Unicast know the subscription set; Paint-Dense does not."""
        self.server.set_subscriptions(self.subs.points if self.cfg.method != "paint-dense" else None)

    def subscribe(self, subs) -> None:
        t0 = time.perf_counter()
        ids, lo, hi = encode_subscriptions(subs)
        live = self.subs.rows(ids) >= 0
        if live.any():
            pos = int(np.flatnonzero(live)[0])
            raise item_error("range subscription", pos, int(ids[pos]), "id", "already subscribed")
        if len(ids):
            top_id, top_y, cnt = self.server.topk(lo, hi)
            self.subs.add(ids, lo, hi, top_id, top_y, cnt)
            self._share_subscriptions()
        self._seconds["subscribe"] += time.perf_counter() - t0

    def unsubscribe(self, ids) -> None:
        t0 = time.perf_counter()
        arr = check_ids_arg(ids)
        rows = self.subs.rows(arr)
        if (rows < 0).any():
            raise UnknownSubscription(f"unknown range subscription id={int(arr[np.flatnonzero(rows < 0)[0]])}")
        if len(arr):
            self.subs.remove(arr)
            self._share_subscriptions()
        self._seconds["unsubscribe"] += time.perf_counter() - t0

    # ------------------------------------------------------------------ objects
    def publish(self, objs, updates: str = "objects"):
        """Apply object updates; returns one ``rc.Update`` per subscription whose top-k changed
        in the call (its top-k after it: (object_id, y), lowest y first), by subscription id;
        or (``updates="arrow"``) one Arrow table ``subscription_id, rank, object_id, score``
        (score: y); or (``"diff"``) one Arrow table of the entries that left and entered the
        lists, with ``sign`` (docs/contract.md); or nothing (``"none"``)."""
        t0 = time.perf_counter()
        form = check_updates_form(updates)
        ids, x, y = encode_updates(objs)
        live, _, _ = self.server.object_state(ids)
        check_update_state(ids, x, y, live)
        msgs = self.server.process(ids, x, y)
        t1 = time.perf_counter()
        rows, recv, tr = self.subs.deliver(msgs.f, msgs.i, trace=self.trace, diff=form == "diff")
        self._seconds["deliver"] += time.perf_counter() - t1
        if form == "diff":          # the diff columns, made as the lists were changed
            keys = rows[0]
            n_changed = int(np.count_nonzero(keys[1:] != keys[:-1])) + int(len(keys) > 0)
        else:
            n_changed = len(rows)
        tot = self._totals
        tot["updates"] += len(ids)
        tot["events"] += 1
        tot["messages_generated"] += len(msgs)
        tot["messages_delivered"] += int(np.count_nonzero(recv))
        tot["messages_received"] += int(recv.sum())
        tot["bytes_generated"] += msgs.nbytes_on_wire
        tot["subscriptions_changed"] += n_changed
        if self.trace:
            self.last = {"messages": msgs, "receipts": recv, "trace": tr, "rows_sid": self.subs.sid}
        out = diff_table(*rows, item="object_id") if form == "diff" else self._updates(rows, form)
        self._seconds["publish"] += time.perf_counter() - t0
        return out

    def _updates(self, rows: np.ndarray, form: str):
        """The call's updates from the changed rows (by subscription id): their lists read from
        the store's leaf blocks and laid out as update rows by one kernel (``expand_runs``)."""
        if form == "none":
            return None
        s = self.subs
        ids, ys = s.lists(rows)
        cols = expand_runs(s.sid[rows], np.arange(len(rows), dtype=np.int64) * s.k, s.topn[rows],
                           ids.reshape(-1, 1), 0, ys.reshape(-1, 1), 0)
        if form == "arrow":
            return columns_table(*cols, key="subscription_id", item="object_id")
        _, _, oid, oy, empty = cols
        off = np.zeros(len(rows) + 1, np.int64)
        np.cumsum(s.topn[rows], out=off[1:])
        full = ~empty
        return updates_from_arrays(s.sid[rows], off, oid[full], oy[full])

    # ------------------------------------------------------------------ reading
    def topk(self, sub_id) -> list[tuple[int, float]]:
        arr = check_ids_arg(sub_id)
        if len(arr) != 1:
            raise InvalidInput("topk: expected one subscription id")
        row = int(self.subs.rows(arr)[0])
        if row < 0:
            raise UnknownSubscription(f"unknown range subscription id={int(arr[0])}")
        return self.subs.topk(row)

    def __len__(self) -> int:
        """The number of live subscriptions."""
        return len(self.subs)

    def stats(self) -> dict:
        tot = self._totals
        per = max(tot["updates"], 1)
        return {"kind": self.KIND, "method": self.cfg.method, "epsilon": self.cfg.epsilon,
                "batch": self.cfg.batch, "k": self.cfg.k, "subscriptions": len(self.subs),
                **self.server.stats(), "published": tot["updates"], **tot,
                "generated_per_update": tot["messages_generated"] / per,
                "delivered_per_update": tot["messages_delivered"] / per,
                "received_per_update": tot["messages_received"] / per,
                "bytes_per_update": tot["bytes_generated"] / per,
                "seconds": dict(self._seconds)}

    # ------------------------------------------------------------------ recovery
    def snapshot(self) -> dict:
        """The engine's state as a picklable dict of plain numpy arrays and numbers that later
        calls do not change (see :mod:`rankcast.common.snapshots`): the configuration, the
        server's objects, the subscriptions with their top-k lists and the counters."""
        return tagged(self.KIND, {"cfg": self.cfg, "server": self.server.state(), "subscribers": self.subs.state(),
                                  "totals": dict(self._totals), "seconds": dict(self._seconds)})

    @classmethod
    def restore(cls, snap: dict) -> "RangeEngine":
        """A new engine in the state of ``snap`` (from :meth:`snapshot`, possibly pickled and
        read back): every later call returns what the snapshotted engine's would."""
        snap = checked(snap, cls.KIND, cls.__name__, untagged=True)
        eng = cls(snap["cfg"])
        eng.server.restore(snap["server"])
        eng.subs = SubscriberStore.from_state(snap["subscribers"], eng.cfg.k, eng.cfg.leaf_size)
        eng._share_subscriptions()
        eng._totals.update(snap["totals"])
        eng._seconds.update(snap.get("seconds", {}))
        return eng

"""WindowShard: one share of the sliding window with its message index (DSkype message bolt).

Each message lives in exactly one shard (``id mod shards``). A shard applies the steps in
order (step numbers are checked) and answers re-evaluation questions "as of position b":
the top-K messages with ``after_seq < seq <= b``. Partitions ask only once the shard holds
step b (the dispatcher passes the shard's append result as an argument of the partition's
step), and a shard keeps messages ``retain_steps`` steps past their expiry so that a
partition that lags behind by up to the in-flight bound still gets a complete answer, and
keeps every message expired since the coordinator's last checkpoint (``hold``): a partition
rebuilt from that checkpoint replays its steps and asks about them again. A question older
than that raises instead of answering wrongly.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from ..columns import MessageBatch, SubscriptionBatch
from ..config import EngineConfig
from ..indexing.window import CandidateLists, MessageWindow
from .metrics import RoleMetrics
from .recovery import Recoverable

__all__ = ["WindowShard"]

RESTORE_SLICE = 8192        # messages per append when a shard rebuilds its index


class WindowShard(Recoverable):
    _STATE = ("step", "expired", "history")

    def __init__(self, cfg: EngineConfig, index: int, retain_steps: int, cluster: str = "rankcast",
                 export_metrics: bool = True, delay: float = 0.0, seed: int = 0, resume=None):
        self.cfg = cfg
        self.index = index
        self.window = MessageWindow(cfg)
        self.retain_steps = int(retain_steps)
        self.step = 0                   # last step applied
        self.expired = -1               # every seq <= expired has been dropped here
        self.history: deque[tuple[int, int]] = deque()   # (step, expire_upto at its end)
        self.metrics = RoleMetrics("shard", index, cluster, export_metrics)
        self._delay = float(delay)
        self._rng = np.random.default_rng(seed + 7919 * index)
        self._resume(resume)

    def _state(self) -> dict:
        # the message index does not pickle: it is rebuilt from the messages held
        return {**super()._state(), "messages": self.window.snapshot(), "seqs": self.window.seqs()}

    def _restore(self, state: dict) -> None:
        msgs, seqs = state.pop("messages"), state.pop("seqs")
        super()._restore(state)
        # in slices: one append of the whole window reserves index nodes for its worst case
        for a in range(0, len(msgs), RESTORE_SLICE):
            b = min(len(msgs), a + RESTORE_SLICE)
            self.window.append(msgs.take(np.arange(a, b)), seqs[a:b], None)

    def _warm(self) -> None:
        from .partition import warm_spatial
        warm_spatial(self.cfg)

    def _jitter(self):
        if self._delay:
            import time
            time.sleep(self._rng.random() * self._delay)

    def append(self, step: int, payload, exp_end: int, hold: int = -1) -> int:
        """Apply step ``step``: its messages for this shard (or None) and the watermark.
        ``hold``: messages with seq > hold stay even when expired (the coordinator's last
        checkpoint expired up to there: a partition rebuilt from it asks about them again)."""
        self._jitter()
        with self.metrics.busy():
            if step != self.step + 1:
                raise RuntimeError(f"window shard {self.index}: step {step} after {self.step}")
            if payload is not None:
                msgs, seqs = payload
                self.window.append(msgs, seqs, None)
                self.metrics.inc("messages", len(msgs))
            self.step = step
            self.history.append((step, int(exp_end)))
            # keep what a lagging partition may still ask about
            while self.history and self.history[0][0] <= step - self.retain_steps:
                if self.history[0][1] > hold:
                    break
                _, e = self.history.popleft()
                if e > self.expired:
                    self.window.expire(e)
                    self.expired = e
            self.metrics.set("window", len(self.window))
        return step

    def search(self, step: int, subs: SubscriptionBatch, K: np.ndarray, after_seq: int,
               upto_seq: int, floor: np.ndarray | None = None) -> CandidateLists:
        """Top-K[i] messages of this shard with after_seq < seq <= upto_seq (as of ``step``),
        only those scoring at least ``floor[i]`` if given (see ``MessageWindow.search``)."""
        self._jitter()
        with self.metrics.busy():
            if step > self.step:
                raise RuntimeError(f"window shard {self.index}: asked as of step {step}, holds {self.step}")
            if after_seq < self.expired:
                raise RuntimeError(f"window shard {self.index}: question after seq {after_seq} but "
                                   f"messages up to {self.expired} are gone (retain_steps too small)")
            self.metrics.inc("searches", len(subs))
            return self.window.search(subs, K, after_seq=after_seq, upto_seq=upto_seq, floor=floor)

    def sample(self, n: int, seed: int = 0) -> MessageBatch:
        """Up to ``n`` of the most recent messages held (load monitoring refits)."""
        snap = self.window.snapshot()
        return snap.take(np.arange(max(0, len(snap) - n), len(snap)))

    def stats(self) -> dict:
        out = self.metrics.snapshot()
        out.update(index=self.index, step=self.step, held=len(self.window), expired_upto=self.expired)
        return out

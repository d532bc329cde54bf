"""WindowShard: one share of the sliding window with its message index (DSkype message bolt).

Each message lives in exactly one shard (``id mod shards``). A shard applies the steps in
order (step numbers are checked) and answers re-evaluation questions "as of position b":
the top-K messages with ``after_seq < seq <= b``. Partitions ask only once the shard holds
step b (a partition waits for the shards' appends of its step before its first question).

Which messages a question may still need, two kinds:

- *the steps in flight*: a partition that lags behind asks as of its own step. The
  coordinator passes with every append the expiry watermark of its oldest unfinished step
  (``keep_after``); the index drops what expired up to there, so it holds what an engine's
  window holds plus the steps in flight (none between two ``publish(wait=True)`` calls).
- *a partial recovery* replays the steps since the committed checkpoint to a rebuilt
  partition, which asks about them again. For these the shard keeps the raw batches it
  appended since the checkpoint's watermark (``hold``), outside the index: a question about
  messages the index dropped is answered from an index built of those batches for it
  (recoveries only). Holding them in the index instead made it hold up to a checkpoint
  interval of messages more than the window (at 10k messages a second, 50k over a 20k
  window): larger searches, and a pool doubling of hundreds of milliseconds in the stream.

A question older than what is kept raises instead of answering wrongly.

Questions do not wait behind the appends queued before them: on Ray, ``search`` runs in
its own concurrency group (:data:`QUESTIONS`, one thread) while the appends and every other
call run in order in the default one; a lock keeps a question off the index while an
append changes it. With steps in flight (pipelined publishes), the coordinator has queued
the appends of up to ``max_in_flight`` later steps when a partition asks as of its own:
answered in order, the question waited for all of them (head-of-line blocking), and so did
the partition. Answering ahead is exact: the index keeps what the oldest unfinished step
asks about (``keep_after``), and a question reads only seqs up to its own step's position.
"""
from __future__ import annotations

import threading
from collections import deque

import numpy as np

from rankcast.kinds.spatial.columns import MessageBatch, SubscriptionBatch
from rankcast.config import EngineConfig
from ..window import CandidateLists, MessageWindow
from rankcast.runtime.metrics import RoleMetrics
from rankcast.runtime.recovery import Recoverable
from rankcast.runtime.backends import STEP_ROLE_ENV

__all__ = ["WindowShard"]

RESTORE_SLICE = 8192        # messages per append when a shard rebuilds its index
QUESTIONS = "questions"     # the concurrency group of ``search`` (see the module docstring)
STEP_WAIT_SECONDS = 600.0   # how long a question waits for its step's append


class WindowShard(Recoverable):
    _STATE = ("step", "expired")
    RAY_OPTIONS = {"concurrency_groups": {QUESTIONS: 1}}
    RAY_ENV = STEP_ROLE_ENV      # its steps' arrays reuse the heap's pages (rankcast.runtime.backends)

    def __init__(self, cfg: EngineConfig, index: int, cluster: str = "rankcast",
                 export_metrics: bool = True, delay: float = 0.0, seed: int = 0, capacity: int = 0,
                 resume=None):
        self.cfg = cfg
        self.index = index
        self.window = MessageWindow(cfg, track_ids=False)      # no one asks it about ids
        # messages the index may hold at most: its share of the window and of the steps in
        # flight (0: not known, a time window)
        self.capacity = int(capacity)
        self._reserved = False          # the index was sized for ``capacity``
        self.step = 0                   # last step applied
        self.expired = -1               # every seq <= expired has been dropped from the index
        # raw batches holding every message with seq > kept_after (None: none kept), for
        # the questions of a partial recovery (see the module docstring)
        self.kept: deque[tuple[MessageBatch, np.ndarray]] = deque()
        self.kept_after: int | None = -1
        self._kept_window: MessageWindow | None = None   # the index of ``kept``, once asked
        # questions run on their own thread (QUESTIONS): the index changes under this lock,
        # and a question waits on it for its step's append
        self._step_done = threading.Condition()
        self.metrics = RoleMetrics("shard", index, cluster, export_metrics)
        self._delay = float(delay)
        self._rng = np.random.default_rng(seed + 7919 * index)
        self._resume(resume)

    def _snapshot_compressed(self) -> bool:
        return False                      # its messages: dense arrays

    def _snapshot_raw(self) -> bool:
        return True                       # copies of its messages

    def _state(self) -> dict:
        # the message index does not pickle: it is rebuilt from the messages held
        return {**super()._state(), "messages": self.window.snapshot(), "seqs": self.window.seqs()}

    def _restore(self, state: dict) -> None:
        msgs, seqs = state.pop("messages"), state.pop("seqs")
        super()._restore(state)
        # in slices: one append of the whole window reserves index nodes for its worst case
        with self._phase("window"):
            self.window = _indexed(self.cfg, msgs, seqs)
        self._reserved = False
        # a partial recovery's replay asks about these again once the index dropped them
        self.kept, self.kept_after = deque([(msgs, seqs)] if len(msgs) else []), self.expired

    def _warm(self) -> None:
        from ..warmup import warm_spatial
        warm_spatial(self.cfg)

    def _jitter(self):
        if self._delay:
            import time
            time.sleep(self._rng.random() * self._delay)

    def append(self, step: int, payload, exp_end: int, keep_after: int = -1, hold: int | None = None) -> int:
        """Apply step ``step``: its messages for this shard (or None), then drop from the
        index what expired up to ``min(exp_end, keep_after)`` (``keep_after``: the steps in
        flight ask about seqs above it; -1 drops nothing). ``hold``: a partial recovery may
        ask about seqs above it again, keep their batches (None: no such recovery)."""
        self._jitter()
        with self._step_done, self.metrics.busy():
            if step != self.step + 1:
                raise RuntimeError(f"window shard {self.index}: step {step} after {self.step}")
            if hold is None:
                self.kept.clear()
                self.kept_after = None
            elif self.kept_after is None:       # keeping starts: with what the index holds
                self.kept = deque([(self.window.snapshot(), self.window.seqs())] if len(self.window) else [])
                self.kept_after = self.expired
            # what expired goes first (the step's own messages are newer, unless the step
            # pushes some of them out): the index then never holds more than it keeps, and
            # the postings' pools fill the room that expiry frees instead of growing
            upto = min(int(exp_end), int(keep_after))
            first = payload is None or upto < int(payload[1][0])
            if first:
                self._expire(upto)
            if payload is not None:
                msgs, seqs = payload
                self.window.append(msgs, seqs, None)
                self.metrics.inc("messages", len(msgs))
                if hold is not None:
                    self.kept.append((msgs, seqs))
                    self._kept_window = None
            if not first:
                self._expire(upto)
            self.step = step
            self._reserve()
            while hold is not None and self.kept and self.kept[0][1][-1] <= hold:
                self.kept_after = max(self.kept_after, int(self.kept.popleft()[1][-1]))
                self._kept_window = None
            self.metrics.set("window", len(self.window))
            self._step_done.notify_all()
        return step

    def _reserve(self) -> None:
        """Once the index holds half its ``capacity``: sized for all of it, with the terms
        and chunks per message it holds (``MessageWindow.reserve``). Otherwise it grows inside
        the stream, when the steps in flight first push it past its initial size: a copy of
        hundreds of milliseconds in the middle of a step (it grows while the window fills
        anyway)."""
        if not self._reserved and self.capacity and 2 * len(self.window) >= self.capacity:
            self.window.reserve(self.capacity)
            self._reserved = True

    def _expire(self, upto: int) -> None:
        if upto > self.expired:
            self.window.expire(upto)
            self.expired = upto

    def search(self, step: int, subs: SubscriptionBatch, K: np.ndarray, after_seq: int,
               upto_seq: int, floor: np.ndarray | None = None) -> CandidateLists:
        """Top-K[i] messages of this shard with after_seq < seq <= upto_seq (as of ``step``),
        only those scoring at least ``floor[i]`` if given (see ``MessageWindow.search``)."""
        self._jitter()
        with self._step_done:
            # a question follows its step's append (a partition waits for the appends of its
            # step), but a recovery may resume a partition before a rebuilt shard replayed
            if not self._step_done.wait_for(lambda: self.step >= step, timeout=STEP_WAIT_SECONDS):
                raise RuntimeError(f"window shard {self.index}: asked as of step {step}, holds {self.step}")
            return self._search(subs, K, after_seq, upto_seq, floor)

    def _search(self, subs, K, after_seq, upto_seq, floor) -> CandidateLists:
        with self.metrics.busy():
            window = self.window
            if after_seq < self.expired:            # a partial recovery's question
                if self.kept_after is None or after_seq < self.kept_after:
                    raise RuntimeError(f"window shard {self.index}: question after seq {after_seq} but "
                                       f"messages up to {self.expired} are gone")
                window = self._kept_index()
            self.metrics.inc("searches", len(subs))
            return window.search(subs, K, after_seq=after_seq, upto_seq=upto_seq, floor=floor)

    def _kept_index(self) -> MessageWindow:
        """An index of the kept batches (every message with seq > kept_after), built at the
        first question about messages the shard's index dropped and kept until the batches
        change: a recovery asks once per replayed step."""
        if self._kept_window is None:
            msgs = MessageBatch.concat([m for m, _ in self.kept]) if self.kept else MessageBatch.empty()
            seqs = np.concatenate([q for _, q in self.kept]) if self.kept else np.zeros(0, np.int64)
            self._kept_window = _indexed(self.cfg, msgs, seqs)
        return self._kept_window

    def sample(self, n: int, seed: int = 0) -> MessageBatch:
        """Up to ``n`` of the most recent messages held (load monitoring refits)."""
        with self._step_done:
            snap = self.window.snapshot()
        return snap.take(np.arange(max(0, len(snap) - n), len(snap)))

    def stats(self) -> dict:
        out = self.metrics.snapshot()
        out.update(index=self.index, step=self.step, held=len(self.window), expired_upto=self.expired,
                   kept=sum(len(q) for _, q in self.kept))
        return out


def _indexed(cfg: EngineConfig, msgs: MessageBatch, seqs: np.ndarray) -> MessageWindow:
    """A message window holding ``msgs`` (seqs increasing), appended in slices: one append
    of a whole window reserves index nodes for its worst case."""
    window = MessageWindow(cfg, track_ids=False)
    for a in range(0, len(msgs), RESTORE_SLICE):
        b = min(len(msgs), a + RESTORE_SLICE)
        window.append(msgs.take(np.arange(a, b)), seqs[a:b], None)
    return window

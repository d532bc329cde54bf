"""The coordinator's deliveries: cutting the stream into positions, keeping them for
``listen`` and ``flush``, and serving them (:class:`Deliveries`, a part of
:class:`~rankcast.runtime.coordinator.CoordinatorBase`)."""
from __future__ import annotations

import time
from numbers import Integral

import numpy as np

from rankcast.errors import InvalidInput

from .kind import NO_UPDATES
from .guard import _NOT_DONE, guarded
from .results import for_client, n_updates, stored_arrays, stored_updates, update_arrays


class Spilled:
    """A retained delivery that only its chunk of the state directory holds (``deliv-<e>``,
    written by a committed checkpoint): read back from there when asked for."""

    __slots__ = ("rel",)

    def __init__(self, rel: str):
        self.rel = rel


class Deliveries:
    """Deliveries of a coordinator (mixed into :class:`~rankcast.runtime.coordinator.CoordinatorBase`).

    A durable cluster keeps in memory only the deliveries made since its last committed
    checkpoint: each commit writes those before it to a chunk of the state directory and
    keeps them there alone (:meth:`_spill`); a listener or a ``flush`` that asks for one of
    them reads its chunk back (:meth:`_arrays_at`). The retention (``retention`` positions)
    is the same; what memory holds is a checkpoint interval of the stream, not the whole
    retention (at 100k subscriptions, tens of kilobytes of updates per message)."""

    # ------------------------------------------------------------------ delivery
    @guarded
    def flush(self, client=None, token=None) -> tuple:
        """Wait for the pipelined calls, deliver them, and return the updates of the
        deliveries that hold this client's pipelined calls since its last flush (per
        subscription its latest list)."""
        if (done := self._retried(client, token)) is not _NOT_DONE:
            return for_client(done)
        t0 = time.perf_counter()
        out = self._log_apply(("flush", client, token))
        self.counters["publish_seconds"] += time.perf_counter() - t0
        return for_client(out)

    def _apply_flush(self, client) -> tuple:
        with self.metrics.busy():
            self._cut_group()
            want = set(self._flush_pos.pop(client, ()))
            outs = [self._arrays_at(pos, arr) for pos, arr in self.deliveries if pos in want]
        if not outs:
            return NO_UPDATES
        return outs[0] if len(outs) == 1 else self._merge_deliveries(outs)

    def _cut(self) -> tuple:
        """Finish every step and deliver what changed since the previous cut, at the
        current stream position (the number of messages published). Returns the arrays.
        Where the kind can (:meth:`_emit_start`) and nothing is left to dispatch, the
        updates are asked for behind the steps in flight before waiting for them: each
        role answers right after its last step instead of a round trip later."""
        self._release_held()
        handle = None
        if self._nothing_to_dispatch():
            self._drain_cuts(block=True)    # the cuts started before come first
            handle = self._emit_start()
        self.quiesce()
        self._drain_cuts(block=True)
        out = self.emit() if handle is None else self._emit_finish(handle, block=True)
        if n_updates(out):
            self._deliver(self.last_seq + 1, out)
        return out

    def _nothing_to_dispatch(self) -> bool:
        """Whether finishing the steps in flight dispatches no more of them."""
        return not self.pending_ops

    def _cut_group(self, wait: bool = True):
        """Deliver the pipelined calls not yet delivered; each client among them will get
        the delivery from its flush. ``wait=False`` (the delivery interval's cut, logged as a
        ``cut`` record): where the kind can (:meth:`_emit_start`), the cut only starts here,
        behind the steps in flight, and is delivered once done (:meth:`_drain_cuts`, at the
        next call or listener poll), so the stream does not stall at every cut. A log replay
        cuts at once, at the same positions. ``wait``: also every started cut is delivered."""
        if not self._group:
            self._release_held()
            if wait:
                self._drain_cuts(block=True)
            return None
        clients, self._group = self._group, set()
        pos = self.last_seq + 1
        if not wait and not self._replaying:
            # the last step of what is held takes the updates (the roles end their epoch in
            # that call), and the cut starts at once, behind it
            self._release_held(take=True)
            handle = self._emit_start()
            if handle is not None:
                self._cuts.append((pos, handle, clients))
                return None
        self._release_held()
        self._delivered(pos, self._cut(), clients)
        return None

    def _cut_if_due(self) -> None:
        """The pipelined calls' cut, once the oldest of them waited ``delivery_interval``
        (unless the kind defers it: :meth:`_cut_deferred`)."""
        if self._cut_due() and not self._cut_deferred():
            self._cut_now()

    def _cut_now(self) -> None:
        """The pipelined calls' cut (logged as a ``cut`` record): :meth:`_cut_group`."""
        if self.store is not None:
            self._append_log(("cut", None, None))
        self._apply(("cut", None, None))

    def _cut_due(self) -> bool:
        """Whether the oldest pipelined call not yet delivered waited ``delivery_interval``."""
        return bool(self._group) and time.perf_counter() - self._group_t0 >= self.ccfg.delivery_interval

    def _cut_deferred(self) -> bool:
        """Whether a due cut waits for a moment the kind chooses (it then cuts itself)."""
        return False

    def _drain_cuts(self, block: bool) -> None:
        """Deliver the started cuts that are done, in order (``block``: every one)."""
        while self._cuts:
            pos, handle, clients = self._cuts[0]
            out = self._emit_finish(handle, block)
            if out is None:
                return
            self._cuts.popleft()
            if n_updates(out):
                self._deliver(pos, out)
            self._delivered(pos, out, clients)

    def _delivered(self, pos: int, out: tuple, clients) -> None:
        """The clients of a group's cut at ``pos`` get its delivery from their flush."""
        if not n_updates(out):
            return
        for c in clients:
            got = self._flush_pos.setdefault(c, [])
            if len(got) >= 64:       # a client that never flushes: only what is kept
                got[:] = [p for p in got if p > self.evicted_upto]
            got.append(pos)

    def _emit_start(self):
        """Start taking the updates since the previous cut behind the steps in flight, without
        waiting; a handle for :meth:`_emit_finish`. None: the kind cuts only when quiesced."""
        return None

    def _emit_finish(self, handle, block: bool):
        """The update arrays of a started cut; None while not done (``block=False``)."""
        raise NotImplementedError

    def _deliver(self, pos: int, arrays) -> None:
        if self.deliveries and self.deliveries[-1][0] == pos:      # same position: one delivery
            arrays = self._merge_deliveries([self._arrays_at(*self.deliveries.pop()), arrays])
        self.deliveries.append((pos, arrays))
        self.metrics.inc("updates", n_updates(arrays))
        while self.deliveries and self.deliveries[0][0] <= pos - self.ccfg.retention:
            self.evicted_upto = self.deliveries.popleft()[0]

    def _arrays_at(self, pos: int, out):
        """A retained delivery's updates (``out`` as kept: arrays, update parts, or
        :class:`Spilled`, then read from its chunk, the last chunk read kept for the next; a
        local chunk is mapped, and only the pages of the deliveries asked for are read)."""
        if not isinstance(out, Spilled):
            return out
        cached = getattr(self, "_spill_read", None)
        if cached is None or cached[0] != out.rel:
            t0 = time.perf_counter()
            cached = self._spill_read = (out.rel, dict(self.store.read_view(out.rel)))
            self.counters["chunk_reads"] = self.counters.get("chunk_reads", 0) + 1
            self.counters["chunk_read_seconds"] = self.counters.get("chunk_read_seconds", 0.0) \
                + time.perf_counter() - t0
        return stored_arrays(cached[1][pos])

    def _spill(self, chunk: str, written: dict) -> None:
        """Keep the deliveries that chunk ``chunk`` holds (``written``: position -> the arrays
        written there) only there. A delivery made again at the same position since (merged
        with a later one, :meth:`_deliver`) is not the one written: it stays."""
        self._spill_read = None
        for i, (pos, out) in enumerate(self.deliveries):
            if pos > self._deliv_saved_upto:
                break
            got = written.get(pos)
            if got is not None and not isinstance(out, Spilled) and stored_updates(out) is got:
                self.deliveries[i] = (pos, Spilled(chunk))

    def position(self) -> int:
        """The current stream position: messages published so far (deliveries carry the
        position of the call that caused them)."""
        return self.last_seq + 1

    def peek_counters(self) -> dict:
        """The coordinator's counters as they stand, and ``held``: the pipelined publishes
        waiting in it. Waits for nothing and sends nothing (``stats`` first sends what is
        held and finishes every step): a probe that leaves the stream as it is, for a test
        that waits for the coordinator to act on its own."""
        return dict(self.counters, held=len(getattr(self, "_held", ())))

    @guarded
    def deliveries_from(self, from_position: int, ids=None, limit: int = 256):
        """Deliveries at positions >= ``from_position`` (at most ``limit``), restricted to the
        subscriptions ``ids`` (None: all) and skipping those left empty; returns (list of
        (position, arrays), the position to ask from next). A listener's poll also cuts the
        pipelined calls once they waited ``delivery_interval`` and delivers the started cuts
        that are done: a stream of pipelined calls reaches listeners without a flush."""
        if isinstance(from_position, bool) or not isinstance(from_position, Integral) or from_position < 0:
            raise InvalidInput(f"listen: field 'from_position': must be a non-negative int, got {from_position!r}")
        self._cut_if_due()
        self._drain_cuts(block=False)
        if from_position <= self.evicted_upto:
            raise InvalidInput(f"listen: field 'from_position': position {from_position} is no longer kept "
                               f"(retention {self.ccfg.retention}); the oldest kept is {self.evicted_upto + 1}")
        picked = []
        for pos, arr in reversed(self.deliveries):
            if pos < from_position:
                break
            picked.append((pos, arr))
        picked.reverse()
        picked = [(p, update_arrays(self._arrays_at(p, a))) for p, a in picked[:limit]]
        nxt = picked[-1][0] + 1 if picked else from_position
        if ids is not None:
            ids = np.asarray(ids, np.int64)
            picked = [(p, self._filter_delivery(a, ids)) for p, a in picked]
            picked = [(p, a) for p, a in picked if len(a[0])]
        return picked, nxt

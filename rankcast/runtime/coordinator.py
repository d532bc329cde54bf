"""The coordinator every kind shares: the one place that orders the stream (the named,
detached actor a client attaches to).

:class:`CoordinatorBase` sequences every call into steps with backpressure, keeps the
write-ahead log, takes checkpoints and recovers from them, remembers each client's last
result for its retries, loads bulk inputs in two phases and keeps the deliveries that
``listen`` and ``flush`` serve. A kind's coordinator derives from it and implements the
interface of :mod:`rankcast.runtime.kind`; the registry (:mod:`rankcast.runtime.registry`)
maps each kind's config class to that coordinator.
"""
from __future__ import annotations

import os
import time
import uuid
from collections import OrderedDict, deque
from numbers import Integral

import numpy as np

from rankcast.common.diffs import is_diff
from rankcast.common.validation import check_ids_arg, check_not_live, item_error, shift_position
from rankcast.config import ClusterConfig
from rankcast.errors import InvalidInput, UnknownSubscription

from .kind import NO_UPDATES, KindCoordinator
from .metrics import RoleMetrics
from .recovery import StateStore, is_role_death
from .backends import InprocRuntime, RayRuntime, Runtime
from .placement import Placer
from .results import (RemoteUpdates, UpdateParts, concat_updates, for_client, latest_lists, n_updates,
                      select_diff_runs, select_rows, update_arrays)
from .guard import _NOT_DONE, MAX_RECOVERIES, guarded
from .roleset import ROLE_SEP, STANDBY_WARM_SECONDS, STORE_WARM_BYTES, STORE_WARM_CHUNK, RoleSet
from .checkpoints import AdoptionMismatch, Checkpoints, check_resumable
from .delivery import Deliveries

__all__ = ["CoordinatorBase", "AdoptionMismatch", "check_resumable", "UpdateParts", "RemoteUpdates",
           "update_arrays", "concat_updates", "latest_lists", "select_rows", "select_diff_runs", "guarded",
           "NO_UPDATES", "n_updates", "ROLE_SEP", "STANDBY_WARM_SECONDS", "STORE_WARM_BYTES", "STORE_WARM_CHUNK"]


MAX_CLIENTS = 10_000    # clients whose last call's result is kept for their retries
MAX_REJECTED = 1_000    # rejected batch ids kept per sink (apply_batch)
BATCH_CALLS = ("publish", "subscribe", "unsubscribe")


class CoordinatorBase(RoleSet, Checkpoints, Deliveries, KindCoordinator):
    """What every kind's coordinator shares (docs/architecture.md, "The kind interface and the registry"): sequencing
    of steps with backpressure, the write-ahead log, checkpoints and recovery, client
    tokens, bulk loading in two phases, deliveries to listeners and ``flush``.

    A kind's coordinator derives from it and implements the abstract methods of
    :class:`~rankcast.runtime.kind.KindCoordinator` (its roles, encoding, placement, steps
    and emit); a class that leaves one out cannot be instantiated."""

    KIND_STATE: tuple[str, ...] = ()
    ITEM = "subscription"          # what a subscription is called in errors

    def __init__(self, ccfg: ClusterConfig | None, runtime: str = "ray", sample=None, *,
                 state: tuple[str, str] | None = None):
        self._t_init = time.time()          # a restart's record: when this process took over
        t0 = time.perf_counter()
        if ccfg is None:
            # a durable cluster's coordinator takes (state_dir, name) only, and reads its
            # config and fitting sample from there: Ray restarts it from these arguments
            # after the client that started it is gone
            ccfg, sample = StateStore(*state).read("START")
        self.ccfg = ccfg
        self.cfg = ccfg.engine
        opts = ccfg.options
        self.rt: Runtime = InprocRuntime() if runtime == "inproc" else RayRuntime()
        self._export = not self.rt.inproc
        self.metrics = RoleMetrics("coordinator", 0, ccfg.name, self._export)
        # stream state
        self.last_seq = -1          # last sequence number handed out (stream position - 1)
        self.dispatched_pos = -1    # last position covered by a dispatched step
        self.step = 0
        self.published = 0
        self.live: dict[int, int] = {}            # subscription id -> what the kind keeps of it
        self.inflight: deque = deque()            # unfinished steps
        self.applied_pos = -1       # last position of the steps harvested
        self.pending_ops: dict[int, list] = {}    # partition -> control operations of the next step
        self._staged: list | None = None          # bulk load in progress
        self._staged_terms: list = []              # what each staged part adds to the encoder
        self._stage_lost = False                   # a recovery dropped a load being staged
        self._staged_ids: set[int] = set()
        self._stage_mark = None
        self.counters = dict(steps=0, publish_seconds=0.0, calls=0)
        # delivery (docs/contract.md, "Delivery"): (position, update arrays) per cut
        self.deliveries: deque[tuple[int, tuple]] = deque()
        self.evicted_upto = 0                     # deliveries at positions <= this are gone
        self._deliv_chunks: list[tuple[str, int]] = []   # (file, last position) on disk
        self._deliv_saved_upto = -1               # deliveries up to here are in a chunk
        self._group: set = set()                  # clients with pipelined calls not yet delivered
        self._group_t0 = 0.0
        self._flush_pos: dict = {}                # client -> positions delivering its pipelined calls
        self._cuts: deque = deque()               # cuts started, not delivered: (position, handle, clients)
        self._done: OrderedDict = OrderedDict()   # client -> (token, result) of its last call
        self._batches: dict[str, dict] = {}       # sink -> its last batch id and rejections (apply_batch)
        # recovery
        self._role_specs: dict[str, tuple] = {}   # role -> (class, arguments) of its last build
        self._standby: dict[str, object] = {}     # role -> a warm process that is no role yet
        self._standby_warm: dict[str, object] = {}
        self._role_args: dict[tuple[str, int], tuple] = {}   # (role, i) -> (class, arguments)
        # this coordinator's id: the roles refuse calls of another (Recoverable.own)
        self._owner = uuid.uuid4().hex
        self._mark = None               # the id of the checkpoint the state descends from
        self._committed_mark = None     # ... of the committed one (roles keep their lineage from it)
        self._applying = 0              # applying a logged record (its releases need no record)
        self._adopted: dict[tuple[str, int], dict] = {}   # roles a restart kept live: their progress
        # partial recovery (see _heal): what every step since the committed checkpoint sent
        self._journal: list = []
        self._breaks = 0                # changes of the roles' layout (rebalancing) so far
        self._journal_breaks = 0        # ... when the committed checkpoint was taken
        self._replaying = False         # a full recovery or a restart is replaying the log
        self._hold = None               # _hold_point() of the committed checkpoint
        self.policy = None              # the kind's placement policy, if it has one (init_kind)
        # where the role processes run (Ray): see rankcast.runtime.placement
        self.placer = None if self.rt.inproc else Placer(ccfg.placement, ccfg.control_node)
        self._waiting: dict | None = None         # roles lost with a node, waiting for room
        self.init_kind(sample)
        self._init_seconds = time.perf_counter() - t0
        self._depth = 0
        self._current = None                      # log index of the running call's record
        self.recoveries: deque[dict] = deque(maxlen=50)
        self.epoch = 0
        self._n_logged = 0
        self._checkpoints = 0
        self._last_ckpt = time.perf_counter()
        self._ckpt_seconds = 0.0
        self._ckpt_parts: dict = {}
        self._config_written = False
        self._pending: dict | None = None   # the checkpoint taken, not committed yet
        self._log_epoch = 0             # the epoch of the open log
        self._n_open = 0                # records in the open log
        self.store: StateStore | None = None
        if ccfg.state_dir is not None and (not self.rt.inproc or opts.get("durable")):
            self.store = StateStore(ccfg.state_dir, ccfg.name)
            self.store.fsync = bool(ccfg.fsync)
        # a durable cluster's role processes on Ray are named and outlive this process: a
        # coordinator that Ray restarts finds them (_found_processes) and keeps them
        self._detached = self.store is not None and not self.rt.inproc
        self._watch = (ccfg.name, ccfg.namespace) if self._detached else None
        if self.store is not None and self.store.exists("MANIFEST"):
            self._resume_from_store()           # a restart: this process or the whole cluster
        else:
            self._kill(self._named_processes())   # left by an earlier cluster of this name
            self.build_roles(None)
            if self.store is not None:
                self._checkpoint(wait=True)
        self._fill_standby()

    # ------------------------------------------------------------------ optional refinements of a kind
    def _snapshot_behind(self) -> bool:
        """Whether the roles' snapshots may be queued behind the steps in flight (each role
        takes it after them, in order) instead of after a quiesce: the kind cuts that way
        too, and no reallocation asked by a step in flight could be lost with it."""
        return False

    def _hold_point(self):
        """What the roles must keep for a partial recovery from a checkpoint taken now
        (the spatial kind: the expiry watermark; its shards keep the messages after it)."""
        return None

    def _heal(self, cause: BaseException) -> bool:
        """Partial recovery in place, where the kind supports it; False: a full one is needed."""
        return False

    def _get_healing(self, make_refs):
        """``rt.get(make_refs())``, asked again of the rebuilt roles after a partial recovery."""
        for attempt in range(MAX_RECOVERIES + 1):
            try:
                return self.rt.get(make_refs())
            except Exception as e:
                if attempt == MAX_RECOVERIES or not self._heal(e):
                    raise

    def _roles(self) -> list:
        return [h for _, hs in self.role_groups() for h in hs]

    def _add_ops(self, p: int, ops) -> None:
        """Control operations for partition ``p`` in the next step."""
        self.pending_ops.setdefault(p, []).append(ops)

    @property
    def diffs(self) -> bool:
        """Whether the roles report diffs, not whole lists (``ClusterConfig.updates``)."""
        return self.ccfg.updates == "diff"

    def _filter_delivery(self, arrays: tuple, ids: np.ndarray) -> tuple:
        """A delivery's update arrays restricted to the subscriptions ``ids`` (``listen``)."""
        if is_diff(arrays):
            return select_diff_runs(arrays, np.isin(arrays[0], ids))
        return select_rows(arrays, np.isin(arrays[0], ids))

    def _merge_deliveries(self, outs: list) -> tuple:
        """One delivery's arrays from several (in stream order: a ``flush`` of several, two
        cuts at one position): per subscription its latest list, or its diffs composed."""
        return latest_lists([update_arrays(o) for o in outs])

    # ------------------------------------------------------------------ the log
    def _log_apply(self, rec: tuple):
        """Write-ahead: the record reaches the log, then it is applied."""
        if self.store is not None:
            if self._current is None:
                self._current = self._n_logged
            self._append_log(rec)
            self._crash_point(rec)
        return self._apply(rec)

    def _crash_point(self, rec: tuple) -> None:
        """Fault injection for the recovery tests (``ClusterConfig.options["crash_after_log"]``:
        client tokens): this process ends right after the log record of the call with one of
        those tokens is written, before anything of the call is applied; once per token (a
        marker in the durable state records it). On Ray only."""
        tokens = self.ccfg.options.get("crash_after_log")
        if not tokens or self._replaying or self.rt.inproc or rec[-1] not in tokens:
            return
        marker = f"crashed-{rec[-1]}"
        if not self.store.exists(marker):
            self.store.write(marker, True)
            os._exit(1)

    def _append_log(self, rec: tuple) -> None:
        """``rec`` to the open log, counted among the records since the committed checkpoint
        (``_n_logged``) and in the open log (``_n_open``)."""
        self.store.append(rec)
        self._n_logged += 1
        self._n_open += 1

    def _apply(self, rec: tuple):
        """Apply one logged call (live, or replayed after a recovery). Pipelined publishes
        that wait in the coordinator (:meth:`_release_held`) go out before any other call."""
        self._applying += 1
        try:
            return self._apply_record(rec)
        finally:
            self._applying -= 1

    def _apply_record(self, rec: tuple):
        kind = rec[0]
        if kind in ("release", "log-end"):    # held publishes went out here (_log_release)
            self._release_held()
            return None
        if kind != "publish" or rec[3]:
            self._release_held()
        if kind == "publish":
            out = self.apply_publish(*rec[1:5])
        elif kind == "subscribe":
            out = self._apply_subscribe(*rec[1:3])
        elif kind == "unsubscribe":
            out = self.apply_unsubscribe(rec[1])
        elif kind == "flush":
            out = self._apply_flush(rec[1])
        elif kind == "cut":
            out = self._cut_group(wait=False)
        elif kind == "load":
            out = None
            for out in self._apply_load(rec[1], rec[2]):
                pass
        elif kind == "batch":
            out = self._apply_batch(*rec[1:7])
        else:
            raise RuntimeError(f"unknown log record {kind!r}")
        client, token = rec[-2], rec[-1]
        if kind != "cut" and client is not None and token is not None:
            self._done[client] = (token, out)
            self._done.move_to_end(client)
            while len(self._done) > MAX_CLIENTS:
                self._done.popitem(last=False)
        return out

    def _retried(self, client, token):
        """The recorded result when this call (client, token) was applied already (a client
        resending a call after the coordinator restarted), else ``_NOT_DONE``."""
        if client is None or token is None:
            return _NOT_DONE
        got = self._done.get(client)
        return got[1] if got is not None and got[0] == token else _NOT_DONE

    def ready(self) -> bool:
        return True

    def config(self) -> ClusterConfig:
        return self.ccfg

    # ------------------------------------------------------------------ subscriptions
    @guarded
    def subscribe(self, subs, client=None, token=None) -> None:
        if (done := self._retried(client, token)) is not _NOT_DONE:
            return done
        with self.metrics.busy():
            batch, pending = self.encode_subscriptions(subs)
            check_not_live(batch.ids, self.live, 0, self.ITEM)
            self._log_apply(("subscribe", batch, pending, client, token))

    def _apply_subscribe(self, batch, pending) -> None:
        self.commit_encoding(pending)
        if len(batch) == 0:
            return
        self._cut_group()
        self.place(batch)
        self.dispatch()
        self.quiesce()
        self.baseline(batch.ids)
        self.counters["calls"] += 1

    @guarded
    def unsubscribe(self, ids, client=None, token=None) -> None:
        if (done := self._retried(client, token)) is not _NOT_DONE:
            return done
        with self.metrics.busy():
            arr = check_ids_arg(ids)
            missing = [i for i in arr.tolist() if i not in self.live]
            if missing:
                raise UnknownSubscription(f"unknown {self.ITEM} id={missing[0]!r}")
            if len(arr) == 0:
                return
            self._log_apply(("unsubscribe", arr, client, token))

    # ------------------------------------------------------------------ batches by id
    @guarded
    def apply_batch(self, sink: str, batch_id: int, call: str, parts: list, client=None, token=None,
                    on_invalid: str = "raise") -> dict:
        """Apply the batch ``batch_id`` of ``sink`` once (docs/streaming.md): ``call`` is
        ``publish`` (``parts``: one or more publish calls' items, applied in order),
        ``subscribe`` or ``unsubscribe`` (one part). The batch's items and its id are one log
        record, so a batch id at or below the sink's last one (a batch replayed after a crash
        or a restart) changes nothing and returns ``applied=False``. An invalid item rejects
        the whole batch before anything is applied: ``on_invalid="raise"`` raises the error
        (naming the item by its position in the batch and its field) and records nothing;
        ``"record"`` records the batch id as rejected, with the error, and returns it."""
        if not isinstance(sink, str) or not sink:
            raise InvalidInput(f"apply_batch: field 'sink': must be a non-empty string, got {sink!r}")
        if isinstance(batch_id, bool) or not isinstance(batch_id, Integral) or batch_id < 0:
            raise InvalidInput(f"apply_batch: field 'batch_id': must be an integer >= 0, got {batch_id!r}")
        if call not in BATCH_CALLS:
            raise InvalidInput(f"apply_batch: field 'call': must be one of {BATCH_CALLS}, got {call!r}")
        if on_invalid not in ("raise", "record"):
            raise InvalidInput(f"apply_batch: field 'on_invalid': must be 'raise' or 'record', got {on_invalid!r}")
        if call != "publish" and len(parts) != 1:
            raise InvalidInput(f"apply_batch: a {call} batch is one part, got {len(parts)}")
        if (done := self._retried(client, token)) is not _NOT_DONE:
            return done
        batch_id = int(batch_id)
        seen = self._batches.get(sink)
        if seen is not None and batch_id <= seen["last"]:
            return self._batch_result(sink, batch_id, False, seen["rejected"].get(batch_id), 0)
        error = None
        with self.metrics.busy():
            try:
                inner = self._encode_batch(call, parts)
            except InvalidInput as e:
                if on_invalid == "raise":
                    raise
                inner, error = [], str(e)
        out = self._log_apply(("batch", sink, batch_id, call, inner, error, client, token))
        if call == "publish" and inner:
            self._cut_if_due()
            self._drain_cuts(block=False)
            self._after_publish()
        return out

    def _encode_batch(self, call: str, parts: list) -> list:
        """The log records of a batch's parts, every item validated (positions count from the
        batch's first item); raises before anything is applied."""
        if call == "publish":
            return [("publish", b, extra) for b, extra in self.encode_publish_parts(parts)]
        if call == "subscribe":
            batch, pending = self.encode_subscriptions(parts[0])
            check_not_live(batch.ids, self.live, 0, self.ITEM)
            return [("subscribe", batch, pending)]
        arr = check_ids_arg(parts[0])
        missing = [i for i in arr.tolist() if i not in self.live]
        if missing:
            raise UnknownSubscription(f"unknown {self.ITEM} id={missing[0]!r}")
        return [("unsubscribe", arr)]

    def encode_publish_parts(self, parts: list) -> list:
        """``encode_publish`` of consecutive publish calls, validated together before any is
        applied: errors name the item by its position in all of them. A kind whose checks of
        a call depend on the calls before it overrides this."""
        out, offset = [], 0
        for items in parts:
            try:
                out.append(self.encode_publish(items))
            except InvalidInput as e:
                raise shift_position(e, offset) from None
            offset += len(items)
        return out

    def _apply_batch(self, sink: str, batch_id: int, call: str, inner: list, error, client) -> dict:
        published, live = self.published, len(self.live)
        for rec in inner:
            if rec[0] == "publish":
                self.apply_publish(rec[1], rec[2], False, client)
            elif rec[0] == "subscribe":
                self._apply_subscribe(rec[1], rec[2])
            else:
                self.apply_unsubscribe(rec[1])
        n = self.published - published if call == "publish" else abs(len(self.live) - live)
        seen = self._batches.setdefault(sink, {"last": -1, "rejected": {}})
        seen["last"] = batch_id
        if error is not None:
            seen["rejected"][batch_id] = error
            while len(seen["rejected"]) > MAX_REJECTED:
                seen["rejected"].pop(next(iter(seen["rejected"])))
        return self._batch_result(sink, batch_id, error is None, error, n)

    def _batch_result(self, sink: str, batch_id: int, applied: bool, rejected, n: int) -> dict:
        return {"sink": sink, "batch_id": batch_id, "applied": applied, "rejected": rejected, "items": n,
                "position": self.last_seq + 1}

    def batch_state(self, sink: str) -> dict:
        """The last batch id applied for ``sink`` (-1: none yet) and its recent rejections
        (batch id -> error)."""
        seen = self._batches.get(sink, {"last": -1, "rejected": {}})
        return {"last": seen["last"], "rejected": dict(seen["rejected"])}

    # ------------------------------------------------------------------ bulk load
    def stage_batch(self, subs) -> int:
        """Bulk load, phase 1: validate and encode one part of the table. Nothing takes effect
        before ``commit_load``; an error anywhere in the table (positions count from the
        table's first row) discards every staged part, so a bad table loads nothing."""
        with self.metrics.busy():
            if self._staged is None:
                self._staged, self._staged_ids, self._staged_terms = [], set(), []
                self._stage_mark = self.mark_encoding()
            offset = sum(len(b) for b in self._staged)
            try:
                try:
                    batch, pending = self.encode_subscriptions(subs)
                except InvalidInput as e:
                    raise shift_position(e, offset) from None
                check_not_live(batch.ids, self.live, offset, self.ITEM)
                for i, sid in enumerate(batch.ids.tolist()):
                    if sid in self._staged_ids:
                        raise item_error("subscription", offset + i, sid, "id", "duplicate id within the table")
            except Exception:
                self.abort_load()
                raise
            self.commit_encoding(pending)   # later parts must see the ids of new terms
            self._staged_terms.append(pending)
            self._staged_ids.update(batch.ids.tolist())
            self._staged.append(batch)
            return len(batch)

    def abort_load(self) -> None:
        """Drop what ``stage_batch`` staged, and the terms it met."""
        if self._staged is not None:
            self.rollback_encoding(self._stage_mark)
        self._staged = None

    def commit_load(self, client=None, token=None):
        """Bulk load, phase 2, in one call: place every staged part (routed by the policy, one
        index build per partition and part) and dispatch its step, which computes the initial
        results. A generator (Ray streams its values): yields (rows whose initial results are
        in, rows staged) as steps finish, the last one once everything is in place. The
        staged parts and their terms are one log record: a recovery loads them whole."""
        if self._stage_lost:
            self._stage_lost = False
            raise RuntimeError("a recovery during this bulk load dropped its staged parts; nothing "
                               "of it was loaded: load the table again")
        staged, self._staged = self._staged or [], None
        terms = self._staged_terms if staged else []
        rec = ("load", staged, terms, client, token)
        total = sum(len(b) for b in staged)
        if self.store is not None:
            self._append_log(rec)
        try:
            with self.metrics.busy():
                self._applying += 1         # a logged record (a replay applies it the same way)
                try:
                    for progress in self._apply_load(staged, terms):
                        yield progress
                finally:
                    self._applying -= 1
        except Exception as e:
            if self.store is None or not is_role_death(e):
                raise
            self._depth += 1
            try:
                self._recover(e)
            finally:
                self._depth -= 1
        self._done[client] = (token, (total, total))
        self._maybe_checkpoint()
        yield total, total

    def _apply_load(self, staged: list, terms: list):
        for pending in terms:
            self.commit_encoding(pending)
        total = sum(len(b) for b in staged)
        rows_of_step: dict[int, int] = {}
        placed = 0

        def done() -> int:
            return placed - sum(rows_of_step.get(e[0], 0) for e in self.inflight)

        self._cut_group()
        for batch in staged:
            if not len(batch):
                continue
            self.place(batch)
            self.dispatch()
            rows_of_step[self.step] = len(batch)
            placed += len(batch)
            yield done(), total         # dispatch waits for old steps beyond max_in_flight
        while self.inflight:
            self.harvest(self.inflight.popleft())
            yield done(), total
        self.quiesce()
        if staged:
            self.baseline(np.concatenate([b.ids for b in staged]))
        yield total, total

    # ------------------------------------------------------------------ publish
    @guarded
    def publish(self, items, wait: bool = True, client=None, token=None, **kw):
        """wait=True: the update arrays of this call (its delivery). wait=False: (items
        published, items applied) so far, once the call's steps are dispatched (or, behind
        busy roles, gathered into a later step: :meth:`Coordinator._gather`); its
        changes are delivered at the next cut (at most ``delivery_interval`` seconds later,
        or the caller's ``flush``). ``kw``: the kind's per-call options."""
        if (done := self._retried(client, token)) is not _NOT_DONE:
            return for_client(done)
        t0 = time.perf_counter()
        with self.metrics.busy():
            batch, extra = self.encode_publish(items, **kw)
        out = self._log_apply(("publish", batch, extra, bool(wait), client, token))
        if not wait:
            self._cut_if_due()
        self._drain_cuts(block=False)
        self._after_publish()
        self.counters["publish_seconds"] += time.perf_counter() - t0
        return for_client(out)

    def _after_publish(self) -> None:
        """What the kind does at the end of every publish call (load monitoring)."""

    def _release_held(self, take: bool = False) -> None:
        """Dispatch the pipelined publishes that wait in the coordinator for busy roles (a
        kind that gathers them into larger steps: :meth:`Coordinator._gather`); every call
        other than a pipelined publish, every cut and every checkpoint calls it first, so
        that they come after those messages in the stream, as they were called. ``take``:
        a cut's :meth:`_emit_start` follows at once, and the last step sent may take the
        roles' updates with it (the kind's :meth:`_emit_start` then uses them)."""

    def _log_release(self) -> None:
        """Record that the held publishes go out now, at a moment that the log does not
        otherwise show (the roles' progress, a checkpoint, a tick): a replay sends them
        out at the same point of the stream, so its steps are the ones the roles were sent
        (a restart can then replay only what a live role lacks)."""
        if self.store is not None and not self._replaying:
            self._append_log(("release", None, None))

    def _publish_result(self, n: int, wait: bool, client):
        """The end of an applied publish of ``n`` items: its delivery (wait), or joining the
        group of pipelined calls that the next cut delivers."""
        self.counters["calls"] += 1
        if not wait:
            if n:
                if not self._group:
                    self._group_t0 = time.perf_counter()
                self._group.add(client)
            return self.published, self.applied_pos + 1
        return self._cut()

    # ------------------------------------------------------------------ lifecycle
    def shutdown(self, keep_state: bool = False) -> None:
        """Stop every role; the durable state is removed unless ``keep_state`` (then
        ``Cluster.start`` with the same name and state_dir resumes from it)."""
        if self.store is not None:
            if self._pending is not None:     # its writes end before the state is kept or removed
                try:
                    self._commit_checkpoint(block=True)
                except Exception:         # a role already gone: the older epoch stays the state
                    self._pending = None
            self._removed()
            if keep_state:
                self.store.close_log()
            else:
                self.store.destroy()
        self._kill(self._roles() + list(self._standby.values()))
        self._standby = {}

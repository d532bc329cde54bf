"""The coordinator's checkpoints and recovery: snapshots of every role and of the
coordinator, a crashed role or a restarted coordinator brought back to the logged state
(:class:`Checkpoints`, a part of :class:`~rankcast.runtime.coordinator.CoordinatorBase`)."""
from __future__ import annotations

import threading
import time
import uuid
from collections import deque

from rankcast.config import ClusterConfig
from rankcast.errors import InvalidInput

from .metrics import settle_heap
from .recovery import STATE_FORMAT, StateStore, Writer, is_role_death, shared_config, write_snapshots
from .guard import MAX_RECOVERIES
from .delivery import Spilled
from .results import stored_updates


class AdoptionMismatch(RuntimeError):
    """A role adopted at a restart did not end where the replay of the log did."""


# between two logs of a replay (not a log record): a checkpoint started there, which sent
# the held publishes out first
LOG_END = ("log-end", None, None)


def _calls(records: list) -> int:
    """The calls among log records (not the moments held publishes went out)."""
    return sum(r[0] not in ("release", "log-end") for r in records)


def check_resumable(store: StateStore, given: ClusterConfig) -> None:
    """A restart resumes the stored cluster only from state of this version's format
    (:data:`~rankcast.runtime.recovery.STATE_FORMAT`) and under the same semantics (the kind,
    its engine config and the policy); the stored topology (partitions added by load
    monitoring) is kept, and so is the form of its deliveries (``updates``)."""
    found = store.read("MANIFEST").get("format", 0)
    if found != STATE_FORMAT:
        raise InvalidInput(f"Cluster.start: field 'state_dir': the durable state of cluster {given.name!r} "
                           f"under {given.state_dir!r} has state format {found}, and this rankcast "
                           f"reads format {STATE_FORMAT}; start it with another name or state_dir, "
                           f"or Cluster.start(..., fresh=True) to discard that state")
    stored = store.read_config()
    a, b = stored.engine, given.engine
    if type(a) is not type(b):
        same = False
    elif hasattr(a, "vocabulary"):
        va = a.vocabulary.to_dict() if a.vocabulary is not None else None
        vb = b.vocabulary.to_dict() if b.vocabulary is not None else None
        same = a.replace(vocabulary=None) == b.replace(vocabulary=None) and va == vb
    else:
        same = a == b
    if not same or stored.policy != given.policy:
        raise InvalidInput(f"Cluster.start: field 'engine'/'policy': the durable state of cluster "
                           f"{given.name!r} under {given.state_dir!r} was made with another engine config "
                           f"or policy; start it with the same config, another name or state_dir, "
                           f"or Cluster.start(..., fresh=True) to discard that state")
    if stored.updates != given.updates:
        raise InvalidInput(f"Cluster.start: field 'updates': the durable state of cluster {given.name!r} under "
                           f"{given.state_dir!r} keeps its deliveries as {stored.updates!r}, not "
                           f"{given.updates!r}; start it with updates={stored.updates!r}, another name or "
                           f"state_dir, or Cluster.start(..., fresh=True) to discard that state")


# what a checkpoint keeps of every coordinator (the rest is rebuilt or is about this
# process); a kind adds its own in KIND_STATE
# ``deliveries`` is not copied whole at each checkpoint: each checkpoint writes the deliveries
# made since the previous one as a chunk (``deliv-<epoch>``), and the state lists the chunks
# that still hold a retained position (``_deliv_chunks``)
_COORD_STATE = ("policy", "last_seq", "dispatched_pos", "step", "published", "live", "applied_pos",
                "counters", "evicted_upto", "_group", "_group_t0", "_flush_pos", "_done",
                "_deliv_chunks", "_deliv_saved_upto", "_batches", "_mark")


class Checkpoints:
    """Checkpoints and recovery of a coordinator (mixed into :class:`~rankcast.runtime.coordinator.CoordinatorBase`)."""

    # ------------------------------------------------------------------ checkpoints and recovery
    def _maybe_checkpoint(self) -> None:
        if self.store is None:
            return
        if self._pending is not None:
            self._commit_checkpoint(block=False)
        if (self._pending is None and self._n_open
                and time.perf_counter() - self._last_ckpt >= self.ccfg.checkpoint_every):
            self._checkpoint()

    def checkpoint(self) -> int:
        """Snapshot every role now (at a quiesced position) and wait until it is durable;
        returns the epoch."""
        if self.store is None:
            raise RuntimeError("this cluster keeps no durable state (ClusterConfig.state_dir is None)")
        with self.metrics.busy():
            self._checkpoint(wait=True)
            self._removed()
        return self.epoch

    def _remove_later(self, names: list[str]) -> None:
        """Remove the files ``names`` of the state directory on a thread: freeing a
        checkpoint's files (the roles' snapshots and the deliveries: hundreds of megabytes)
        took the coordinator's thread 30-80 ms per commit, a stall of the whole stream. A
        file no longer named by the MANIFEST is never read again, so nothing waits for it
        but the next commit's removals (in order) and :meth:`_removed`."""
        if not names:
            return
        prev = getattr(self, "_remover", None)

        def run():
            if prev is not None:
                prev.join()
            for rel in names:
                try:
                    self.store.remove(rel)
                except OSError:             # gone already: a later commit or a shutdown
                    pass

        self._remover = threading.Thread(target=run, daemon=True, name="rankcast-remove")
        self._remover.start()

    def _removed(self) -> None:
        """Wait until the files of the commits so far are removed."""
        remover = getattr(self, "_remover", None)
        if remover is not None:
            remover.join()

    def _checkpoint(self, wait: bool = False) -> None:
        """Every role and the coordinator start writing their state under ckpt-<e> (copied
        in memory and written by a thread, or by a forked child: see ``recovery``); log-<e>
        starts at once. The checkpoint commits (the
        MANIFEST switches to e: :meth:`_commit_checkpoint`) when every write is done; until
        then a recovery replays the logs from the MANIFEST's epoch on, log-<e> included.
        ``wait``: until it commits (taken again if a partial recovery abandoned it).

        Where the kind can (:meth:`_snapshot_behind`), the roles' snapshots are only queued
        behind the steps in flight, like an asynchronous cut, and the stream goes on;
        otherwise the steps are finished first (quiesced)."""
        t0 = time.perf_counter()
        self._release_held()                  # the checkpoint's position is after them
        if self._pending is not None and not self._commit_checkpoint(block=True):
            self._abandon_checkpoint()        # a role was rebuilt meanwhile
        # a checkpoint is a delivery cut: the roles then hold no change still to deliver, so
        # a role restored from it reports what the lost one would have (and a partition can
        # snapshot its subscriptions instead of its buffers). The cut is logged as the first
        # record of the new log: a recovery from this checkpoint finds nothing to cut there,
        # one from the previous checkpoint replays its log and then this cut, where it was
        # made. (Nobody sees the cut's delivery before that: the coordinator serves one call
        # at a time.)
        cut = bool(self._group)
        behind = self._snapshot_behind()
        if behind:
            # the cut's takes, then the snapshots, run behind the steps in flight; the cuts
            # still running are delivered before the commit, which writes their deliveries
            if cut:
                self._cut_group(wait=False)
            if self.pending_ops:
                self.dispatch()
        else:
            if cut:
                self._cut_group()
            self.quiesce()
            self._drain_cuts(block=True)
        e = self._log_epoch + 1
        d = f"ckpt-{e}"
        # the checkpoint's id: each role records its progress under it (Recoverable.snapshot)
        self._mark = uuid.uuid4().hex
        handles = [(h, f"{d}/{role}-{i}") for role, hs in self.snapshot_groups() for i, h in enumerate(hs)]
        snaps = [h.snapshot.remote(self.store, rel, self._mark, self._committed_mark) for h, rel in handles]
        if not behind:
            self._get_healing(lambda: snaps)
        t_roles = time.perf_counter()
        # the deliveries since the last checkpoint, up to this position (those of the cuts
        # still running included: no delivery made before the commit is later), are written
        # at the commit; a client gets a running cut's from its flush
        pos = self.last_seq + 1
        deliv = (f"deliv-{e}", pos, [(p, a) for p, a in self.deliveries if p > self._deliv_saved_upto],
                 self._deliv_saved_upto)
        self._deliv_chunks.append((f"deliv-{e}", pos))
        self._deliv_saved_upto = pos
        state = {k: getattr(self, k) for k in _COORD_STATE + self.KIND_STATE}
        state["metrics"] = dict(self.metrics.values)
        if self._cuts:
            flush_pos = {c: list(ps) for c, ps in self._flush_pos.items()}
            for p, _, clients in self._cuts:
                for c in clients:
                    flush_pos.setdefault(c, []).append(p)
            state["_flush_pos"] = flush_pos
        # its own state is megabytes: copied in memory (pickled here), and written as it is:
        # lz4 would cost the thread more CPU than the bytes it saves
        writers = [write_snapshots(self.store, [(f"{d}/coordinator", lambda: state, shared_config(self.cfg))],
                                   fork=False, compress=False)]
        self.store.open_log(f"log-{e}")
        self._log_epoch, self._n_open = e, 0
        if cut:
            self._append_log(("cut", None, None))
        self._pending = {"epoch": e, "mark": self._mark, "roles": [h for h, _ in handles], "snaps": snaps,
                         "writers": writers, "deliv": deliv, "t0": t0,
                         "polls": None, "evicted_upto": self.evicted_upto, "journal": len(self._journal),
                         "breaks": self._breaks, "hold": self._hold_point()}
        self._ckpt_parts = {"quiesce_and_copies": t_roles - t0, "coordinator_copy": time.perf_counter() - t_roles,
                            "behind": behind}
        self._last_ckpt = time.perf_counter()
        settle_heap()                  # the first time: see rankcast.runtime.metrics
        if wait and not self._commit_checkpoint(block=True):
            self._checkpoint(wait=True)

    def _abandon_checkpoint(self) -> None:
        """Drop the pending checkpoint (a role it snapshots was rebuilt): its deliveries,
        written only at a commit, go into the next one's chunk."""
        pend, self._pending = self._pending, None
        if pend is not None:
            if pend.get("chunk") is not None:
                pend["chunk"].join()          # not written over the next checkpoint's files
            rel, _, _, saved = pend["deliv"]
            self._deliv_chunks = [c for c in self._deliv_chunks if c[0] != rel]
            self._deliv_saved_upto = min(self._deliv_saved_upto, saved)

    def _commit_checkpoint(self, block: bool) -> bool:
        """Switch the MANIFEST to the pending checkpoint once all of it is on disk (``block``:
        wait for that) and drop what is older; False when it is not written yet."""
        pend = self._pending
        e, writers, deliv = pend["epoch"], pend["writers"], pend["deliv"]
        try:
            if pend.get("chunk") is None and not self._snapshots_written(pend, block):
                return False
        except Exception as exc:
            # a role died with its snapshot: a partial recovery abandons this checkpoint
            if not self._heal(exc):
                raise
            if self._pending is pend:
                pend["polls"] = None
            return False
        for w in writers:
            w.done()
        rel, pos, early, saved = deliv
        if pend.get("chunk") is None:
            # the deliveries since the previous checkpoint (a delivery's arrays never change
            # once made): written by a thread at nice 19, as the snapshots are (at 300k
            # update rows per 1,000 messages they are hundreds of megabytes per checkpoint,
            # which held the stream for seconds when written here). Not compressed, the
            # arrays' bytes written from where they are (``StateStore.write_raw``): ids and
            # scores shrink by a fifth only, and lz4 took 6.6 ms of CPU per MB against 0.8
            # to write them as they are (a loaded 2-core machine): under per-call publishes
            # (5 MB per 1,000 messages) that CPU came from the core a solo partition's side
            # thread uses
            chunk = {p: stored_updates(a) for p, a in early}
            chunk.update((p, stored_updates(a)) for p, a in self.deliveries if saved < p <= pos)
            pend["chunk"] = Writer(self.store, [(rel, sorted(chunk.items(), key=lambda x: x[0]))], pickled=False,
                                   raw=True)
            pend["chunk_arrays"] = chunk
        if not block and pend["chunk"].is_alive():
            return False
        pend["chunk"].done()
        if not self._config_written:          # the config (its vocabulary: megabytes) once
            self.store.write("CONFIG", self.ccfg)
            self._config_written = True
        self.store.write("MANIFEST", {"epoch": e, "time": time.time(), "format": STATE_FORMAT})
        # what is older than this checkpoint, and delivery chunks whose every position was
        # evicted when this checkpoint was taken (the checkpoint's own list still names the
        # others) and those of a checkpoint abandoned by a recovery
        self._deliv_chunks = [c for c in self._deliv_chunks if c[1] > pend["evicted_upto"]]
        keep = {rel for rel, _ in self._deliv_chunks}
        self._remove_later([old for old in self.store.list()
                            if (old.startswith(("ckpt-", "log-")) and old.split(".")[0].split("-")[-1].isdigit()
                                and int(old.split(".")[0].split("-")[-1]) < e)
                            or (old.startswith("deliv-") and old.split(".")[0] not in keep)])
        self.epoch, self._pending = e, None
        # the deliveries it wrote are kept in the chunk alone from now on
        self._spill(rel, pend.pop("chunk_arrays"))
        self._committed_mark = pend["mark"]
        # the steps the new checkpoint holds leave the journal
        del self._journal[:pend["journal"]]
        self._journal_breaks, self._hold = pend["breaks"], pend["hold"]
        if self._current is not None:         # the replay after a recovery starts later now
            self._current -= self._n_logged - self._n_open
        self._n_logged = self._n_open
        self._checkpoints += 1
        self._ckpt_seconds = time.perf_counter() - pend["t0"]
        return True

    def _snapshots_written(self, pend: dict, block: bool) -> bool:
        """Whether every snapshot of the pending checkpoint is on disk and the cuts started
        before it are delivered (``block``: wait for both)."""
        handles, writers = pend["roles"], pend["writers"]
        if block:
            self.rt.get(pend["snaps"] + [h.snapshot_written.remote() for h in handles])
        else:
            # poll without waiting: a role answers after the steps queued before the poll
            if pend["polls"] is None:
                pend["polls"] = pend["snaps"] + [h.snapshot_done.remote() for h in handles]
            ready, _ = self.rt.wait(pend["polls"], num_returns=len(pend["polls"]), timeout=0)
            if len(ready) < len(pend["polls"]):
                return False
            done, pend["polls"] = all(self.rt.get(ready)), None
            if not done or any(w.is_alive() for w in writers):
                return False
        if self._cuts:                    # the cuts started before the checkpoint first
            self._drain_cuts(block)
            if self._pending is not pend or (self._cuts and self._cuts[0][0] <= pend["deliv"][1]):
                return False
        return True

    def _recovery_stats(self) -> dict:
        return {"durable": self.store is not None,
                "state": None if self.store is None else self.store.path(""),
                "epoch": self.epoch, "checkpoints": self._checkpoints,
                "checkpoint_pending": self._pending is not None,
                # seconds from the quiesce to the commit (the stream goes on after the copies)
                "last_checkpoint_seconds": self._ckpt_seconds, "last_checkpoint_parts": self._ckpt_parts,
                "log_records": self._n_logged, "recoveries": list(self.recoveries),
                "standby": self._standby_state()}

    def _standby_state(self) -> dict[str, str]:
        """role -> 'warm', 'warming' or the error its warm-up raised, for each standby."""
        out = {}
        for role, ref in self._standby_warm.items():
            if role not in self._standby:
                continue
            ready, _ = self.rt.wait([ref], num_returns=1, timeout=0)
            if not ready:
                out[role] = "warming"
                continue
            try:
                self.rt.get(ref)
                out[role] = "warm"
            except Exception as e:       # reported, not raised: the standby may still serve
                out[role] = f"{type(e).__name__}: {e}"
        return out

    def _load_checkpoint(self, reuse: list | None = None, found: list | None = None) -> list:
        """Coordinator state and every role from the MANIFEST's checkpoint (in the live role
        processes ``reuse`` where given; ``found``: those of the cluster before a restart,
        see :meth:`_role_maker`); returns the log records since it (the logs of its epoch
        and of every later, uncommitted snapshot, in order)."""
        t0 = time.perf_counter()
        man = self.store.read("MANIFEST")
        e = man["epoch"]
        state = self.store.read(f"ckpt-{e}/coordinator", shared_config(self.cfg))
        self._read_seconds = time.perf_counter() - t0
        phases = self._load_phases = {"read_coordinator": self._read_seconds}
        self.metrics.values.update(state.pop("metrics"))
        live_evicted = self.evicted_upto
        for k, v in state.items():
            setattr(self, k, v)
        if "deliveries" in state:             # a checkpoint of an older version
            pass
        elif reuse is not None:
            # this coordinator lives (a role died): its deliveries up to the checkpoint are the
            # chunks' (the replay makes the later ones again); those it evicted since stay gone
            self.evicted_upto = max(self.evicted_upto, live_evicted)
            self.deliveries = deque((p, a) for p, a in self.deliveries
                                    if self.evicted_upto < p <= self._deliv_saved_upto)
        else:                                 # a restart: the retained deliveries from the chunks
            t1 = time.perf_counter()
            self.deliveries = deque((p, Spilled(rel)) for rel, last in self._deliv_chunks if last > self.evicted_upto
                                    for p, _ in self.store.read_view(rel) if p > self.evicted_upto)
            self._spill_read = None
            phases["read_deliveries"] = time.perf_counter() - t1
        self.inflight.clear()
        self._cuts.clear()                    # their records are in the log: the replay cuts again
        self.pending_ops = {}
        self.reset_transient()
        if self._staged is not None:          # staged parts are not in the log: that load fails
            self._staged, self._stage_lost = None, True
        self.epoch = e
        self._committed_mark = self._mark
        self._pending = None                  # a checkpoint not committed is abandoned
        self._journal, self._journal_breaks, self._hold = [], self._breaks, self._hold_point()
        t1 = time.perf_counter()
        self._role_seconds = {}
        self._adopted = {}
        self._found = found                   # for the build's _role_maker
        try:
            self.build_roles(f"ckpt-{e}", reuse)
        finally:
            self._found = None
        phases["roles"] = time.perf_counter() - t1
        phases["restore_by_role"] = self._role_seconds
        phases["role_parts"] = self._role_parts([(f"{role}-{i}", h) for role, hs in self.role_groups()
                                                 for i, h in enumerate(hs) if (role, i) not in self._adopted])
        t1 = time.perf_counter()
        records, x = [], e
        while self.store.exists(f"log-{x}"):
            if records:     # a log ends where a checkpoint started, which sent the held publishes
                records.append(LOG_END)
            records += self.store.read_log(f"log-{x}")
            x += 1
        self._log_epoch = max(self._log_epoch, x - 1)
        phases["read_log"] = time.perf_counter() - t1
        return records

    def _role_parts(self, handles: list | None = None) -> dict[str, dict]:
        """Seconds of each part of the roles' restores (``Recoverable.restore_phases``), by
        role label: those of ``handles`` ((label, handle)), by default every role's."""
        if handles is None:
            handles = [(f"{role}-{i}", h) for role, hs in self.role_groups() for i, h in enumerate(hs)]
        if not handles:
            return {}
        got = self.rt.get([h.restore_phases.remote() for _, h in handles])
        return {label: {k: round(v, 3) for k, v in ph.items()} for (label, _), ph in zip(handles, got) if ph}

    def _recover(self, cause: BaseException) -> list:
        """A role died: rebuild every role from the checkpoint and replay the log (each call
        again, with its delivery cuts). Returns the replayed calls' results."""
        t0 = time.perf_counter()
        for attempt in range(MAX_RECOVERIES):
            try:
                self._replaying = True
                live = self._live_roles(self._deaths_seen(cause))
                t1 = time.perf_counter()
                records = self._load_checkpoint(live)
                t2 = time.perf_counter()
                results = []            # by log record (_current): a log's end is none
                for r in records:
                    out = self._apply(r)
                    if r is not LOG_END:
                        results.append(out)
                t3 = time.perf_counter()
                self._fill_standby()              # after the replay: it needs the cores more
                # no checkpoint here: the log goes on from the same checkpoint
                phases = {"find_dead": t1 - t0, "restore": t2 - t1, "replay": t3 - t2, **self._load_phases}
                self.recoveries.append({"cause": type(cause).__name__, "mode": "full", "seconds": t3 - t0, "phases": phases,
                                        "replayed_calls": _calls(records),
                                        "attempts": attempt + 1,
                                        "position": self.last_seq + 1, "time": time.time()})
                return results
            except Exception as e:
                if not is_role_death(e):
                    raise
                cause = e
            finally:
                self._replaying = False
        raise RuntimeError(f"rankcast: recovery failed {MAX_RECOVERIES} times") from cause

    def _resume_from_store(self) -> None:
        """Start from the durable state (after the coordinator's own death, or a restart of
        the whole cluster): the checkpoint, then the log replayed.

        The cluster's live role processes are taken over (:meth:`_found_processes`). A role
        that the kind can adopt (:meth:`_adoptable`: it descends from the checkpoint and
        went on from it by the calls of the log) keeps its state: the replay sends it only
        the calls it lacks and takes the updates it delivered since the checkpoint from what
        it kept. The other live processes are rebuilt from the checkpoint in place, and new
        ones start for the dead. Where an adopted role does not end where the replay does
        (:meth:`_check_adopted`), or dies meanwhile, every role is rebuilt from the
        checkpoint and the log replayed again."""
        t0 = time.perf_counter()
        check_resumable(self.store, self.ccfg)
        self._depth += 1
        self._replaying = True
        try:
            found = self._found_processes()
            t_found = time.perf_counter()
            records = self._load_checkpoint(found=found)
            adopted = sorted(f"{r}-{i}" for r, i in self._adopted)
            try:
                self._replay_and_go_on(records)
            except Exception as e:
                if not self._adopted or not (isinstance(e, AdoptionMismatch) or is_role_death(e)):
                    raise
                # rebuilt from the checkpoint in the live processes, the log replayed to all
                adopted, self._adopted = [], {}
                self._replaying = True
                records = self._load_checkpoint(self._live_roles())
                self._replay_and_go_on(records)
        finally:
            self._depth -= 1
            self._replaying = False
        # init: reading the config and the start of the kind; the rest after it
        phases = {"init": self._init_seconds, "find_roles": t_found - t0, **self._load_phases}
        self.recoveries.append({"cause": "restart", "mode": "adopted" if adopted else "full",
                                "seconds": time.perf_counter() - t0, "phases": phases, "started": self._t_init,
                                "adopted": adopted, "restored": sorted(self._role_seconds),
                                "replayed_calls": _calls(records), "attempts": 1,
                                "position": self.last_seq + 1, "time": time.time()})

    def _replay_and_go_on(self, records: list) -> None:
        """A restart's replay of ``records``, the held publishes sent (as at the end of every
        log), the adopted roles checked, then a checkpoint: a cut and a new log (where roles
        were adopted, its snapshots are written and committed while the cluster serves)."""
        t0 = time.perf_counter()
        for r in records:
            self._apply(r)
        self._release_held()
        t1 = time.perf_counter()
        self._check_adopted()
        t2 = time.perf_counter()
        self._n_logged = sum(r is not LOG_END for r in records)   # since the committed checkpoint
        self._replaying = False       # the checkpoint as in the stream (behind the steps, where it can)
        # with every role rebuilt, committed before serving (a restart that dies again
        # replays from it); with roles adopted, written while the cluster serves
        self._checkpoint(wait=not self._adopted)
        self._load_phases.update(replay=t1 - t0, check_adopted=t2 - t1, checkpoint=time.perf_counter() - t2)

    def _check_adopted(self) -> None:
        """After a restart's replay: every adopted role stands where the replay ended, or
        :class:`AdoptionMismatch` (the kind's check; none by default)."""

"""``rc.Cluster``: the client handle of a deployment of any kind (contract: "Distributed").

A cluster is a named, detached coordinator actor (its kind's, from
:mod:`rankcast.runtime.registry`) in ``ClusterConfig.namespace`` that owns the other roles;
any process or Ray job attaches to it by name. Every call is forwarded to the coordinator,
which validates it exactly as the kind's engine does (errors come back as the same
exceptions); what differs by kind here (the result objects, the tables a bulk load and a
replay read) is the kind's registry entry.

``ClusterConfig.options`` understood here: ``l1``/``l2`` (hybrid levels, l1 x l2 =
partitions), ``window_estimate`` (messages in a time window, for fitting prefixes),
``v_fit`` (term ids below it are split into ranges, above hashed), ``merge_via_aggregator``
(re-evaluation answers merged by an aggregator, default True, else in the partition),
``runtime: inproc`` (every role in the calling process), ``delay`` / ``seed`` (testing: every
role call sleeps up to ``delay`` seconds at random; ``crash_after_log``: client tokens whose
calls end the coordinator's process right after their log record is written, once each),
``solo`` (default True: a cluster of one
partition that no split can grow runs as an engine in an actor, the window in the
partition's process, :class:`~rankcast.kinds.spatial.roles.partition.SoloPartition`; so do up to
``solo_partitions`` (default 2) partitions of a policy that sends every message to every
partition (hash, or location without splits), each holding the whole window; False keeps
window shards, distributors and aggregators of their own).
"""
from __future__ import annotations

import time
import uuid
from typing import Any, Iterable, Iterator

import numpy as np
import pyarrow as pa

from rankcast.config import ClusterConfig, local_ray_options
from rankcast.common.updates import check_updates_form, updates_table
from rankcast.common.extras import require
from rankcast.common.validation import shift_position
from rankcast.errors import InvalidInput, NoCapacity, UnknownSubscription
from rankcast.model import BatchResult, Delivery
from . import registry
from .coordinator import RemoteUpdates, check_resumable, concat_updates, n_updates
from .registry import KindEntry, coordinator_class
from .recovery import StateStore, is_role_death
from .backends import INLINE_ENV, LocalHandle, writable_class
from .placement import control_options

__all__ = ["Cluster"]


def _warm_client() -> None:
    """Load the kernels that turn a call's updates into an Arrow table here: a list that
    became empty, or lists out of id order, take ``expand_runs``, which a client otherwise
    loaded (or, on a cold cache, compiled: 0.4-0.8 s) in the first call that met one; lists
    in id order, ``key_rank``. ``updates_table`` passes them read-only views, so these
    writable arrays load the versions that arrays from Ray's object store use."""
    updates_table(np.array([2, 1], np.int64), np.array([0, 1, 1], np.int64), np.array([7], np.int64),
                  np.array([0.5]))
    updates_table(np.array([1, 2], np.int64), np.array([0, 1, 2], np.int64), np.array([7, 8], np.int64),
                  np.array([0.5, 0.25]))


def _unwrap(exc: BaseException) -> BaseException:
    cause = getattr(exc, "cause", None)
    if isinstance(cause, (InvalidInput, UnknownSubscription, RuntimeError)):
        return cause
    return exc


# the forms of updates a cluster serves, by what its roles report (ClusterConfig.updates)
_SERVES = {"lists": ("objects", "arrow", "none"), "diff": ("diff", "none")}


def _cluster_form(updates, verb: str, reported: str) -> str:
    """The ``updates`` argument of a cluster's publish, flush, deliveries and listen: a form
    of :data:`~rankcast.common.updates.UPDATE_FORMS` that the cluster serves, given what its
    roles report (``reported``: ``ClusterConfig.updates``). None: the natural one,
    ``"objects"`` (whole lists) or ``"diff"``."""
    if updates is None:
        return "diff" if reported == "diff" else "objects"
    form = check_updates_form(updates)
    if form not in _SERVES[reported]:
        if reported == "diff":
            raise InvalidInput(f"{verb}: field 'updates': this cluster reports diffs (ClusterConfig(updates='diff')): "
                               f"it returns 'diff' or 'none', got {form!r}")
        raise InvalidInput(f"{verb}: field 'updates': this cluster reports whole lists: it returns 'objects', "
                           f"'arrow' or 'none', got {form!r}; a cluster started with "
                           f"ClusterConfig(updates='diff') returns 'diff'")
    return form


class Cluster:
    """Handle of a running cluster; see :meth:`start` and :meth:`attach`."""

    def __init__(self, coordinator, name: str, namespace: str | None, *, inproc: bool = False,
                 owner: bool = False, ccfg: ClusterConfig | None = None):
        self._coord = coordinator
        self._ccfg = ccfg
        self._entry: KindEntry | None = None
        self.name = name
        self.namespace = namespace
        self._inproc = inproc
        self._owner = owner
        self._closed = False
        self._client = uuid.uuid4().hex     # the coordinator keeps this client's last result
        self._calls = 0                     # token of the next state-changing call

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    def start(cls, ccfg: ClusterConfig, address: str | None = None, *, sample=None,
              fresh: bool = False) -> "Cluster":
        """Start the topology of ``ccfg``: on the Ray cluster at ``address`` (or the one this
        process is connected to), or on a new local Ray instance. ``sample`` = (subscriptions,
        messages), in any accepted input form, fits the partitioning policy (paper 7.3);
        without it, location splits the space evenly and keyword ranges fall back to hashing
        terms. ``ClusterConfig(options={"runtime": "inproc"})`` runs every role in this process.

        When ``<state_dir>/<name>`` holds the durable state of a cluster of that name (it
        crashed, or was shut down with ``keep_state=True``), the cluster resumes from it with
        the same subscriptions, window and results; ``fresh=True`` discards that state first."""
        if not isinstance(ccfg, ClusterConfig):
            raise InvalidInput(f"Cluster.start: expected a ClusterConfig, got {type(ccfg).__name__}")
        if ccfg.options.get("runtime") == "inproc":
            return cls(LocalHandle(coordinator_class(ccfg)(ccfg, "inproc", sample)), ccfg.name, None,
                       inproc=True, owner=True, ccfg=ccfg)
        ray = require("ray", "rc.Cluster")
        _ensure_ray(address, ccfg.namespace)
        try:
            ray.get_actor(ccfg.name, namespace=ccfg.namespace)
        except ValueError:
            pass
        else:
            raise RuntimeError(f"a rankcast cluster named {ccfg.name!r} already runs in namespace "
                               f"{ccfg.namespace!r}: attach to it or shut it down first")
        args, kw = (ccfg, "ray", sample), {}
        if ccfg.state_dir is not None:
            store = StateStore(ccfg.state_dir, ccfg.name)
            if fresh:
                store.destroy()
                store = StateStore(ccfg.state_dir, ccfg.name)
            elif store.exists("MANIFEST"):      # refused here: Ray keeps no error type of an __init__
                check_resumable(store, ccfg)
            # the coordinator reads its config from the state: Ray restarts it from tiny
            # arguments, whoever started it and whether that process still runs
            store.write("START", (ccfg, sample))
            args, kw = (None, "ray", None), {"state": (ccfg.state_dir, ccfg.name)}
        actor = ray.remote(writable_class(coordinator_class(ccfg))).options(
            name=ccfg.name, namespace=ccfg.namespace, lifetime="detached",
            num_cpus=ccfg.actor_cpus, max_concurrency=1, runtime_env={"env_vars": dict(INLINE_ENV)},
            # a coordinator that dies restarts and resumes from the durable state
            max_restarts=-1 if ccfg.state_dir is not None else 0,
            # on the head by default (ClusterConfig.control_node; docs/operations.md, "Placement")
            **control_options(ccfg.control_node)).remote(*args, **kw)
        try:
            ray.get(actor.ready.remote())
        except Exception as e:
            try:
                ray.kill(actor)
            except Exception:
                pass
            raise _unwrap(e) from None
        return cls(actor, ccfg.name, ccfg.namespace, owner=True, ccfg=ccfg)

    @classmethod
    def attach(cls, name: str = "rankcast", address: str | None = None, *,
               namespace: str = "rankcast") -> "Cluster":
        """Attach to the running cluster ``name`` (from any process, driver or Ray job)."""
        ray = require("ray", "rc.Cluster")
        _ensure_ray(address or "auto", namespace)
        try:
            actor = ray.get_actor(name, namespace=namespace)
        except ValueError:
            raise RuntimeError(f"no rankcast cluster named {name!r} in namespace {namespace!r}") from None
        return cls(actor, name, namespace)

    def shutdown(self, keep_state: bool = False) -> None:
        """Stop every role of the cluster (for every attached client). Its durable state is
        removed, unless ``keep_state``: then ``Cluster.start`` with the same config resumes."""
        if self._closed:
            return
        self._closed = True
        if self._inproc:
            self._coord.local.shutdown(keep_state)
            return
        import ray
        try:
            self._retrying(lambda: self._coord.shutdown.remote(keep_state))
        finally:
            ray.kill(self._coord, no_restart=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()

    # ------------------------------------------------------------------ calls
    def _method(self, name: str):
        """The coordinator's method ``name`` (call ``.remote``), on an open handle."""
        if self._closed:
            raise RuntimeError("this cluster handle is shut down")
        return getattr(self._coord, name)

    def _call(self, method: str, *args, **kw):
        m = self._method(method)
        return self._retrying(lambda: m.remote(*args, **kw))

    def _change(self, method: str, *args):
        """A state-changing call, with this client's token: resent after a coordinator
        restart, it is applied once (the coordinator returns the recorded result)."""
        return self._change_kw(method, *args)

    def _change_kw(self, method: str, *args, **kw):
        self._calls += 1
        return self._call(method, *args, client=self._client, token=self._calls, **kw)

    RECONNECT_SECONDS = 120.0
    RETRY_POLL = 0.1        # seconds between resubmissions while the coordinator restarts

    def _retrying(self, submit):
        """``self._get(submit())``, resubmitted while the coordinator restarts (Ray restarts
        it; it resumes from the durable state before it answers). A call whose updates were
        lost with the coordinator that owned them (:class:`RemoteUpdates`) is resubmitted
        too: with its token, the restarted coordinator returns the call's recorded result."""
        if self._inproc:
            return self._get(submit())
        import ray
        deadline = time.monotonic() + self.RECONNECT_SECONDS
        while True:
            try:
                return self._get(submit())
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError,
                    ray.exceptions.ObjectLostError) as e:
                if not is_role_death(e) or time.monotonic() > deadline:
                    raise
                time.sleep(self.RETRY_POLL)

    def _get(self, ref):
        """The call's result; update arrays that the coordinator left in the partitions'
        results (:class:`RemoteUpdates`) are fetched from there and laid end to end."""
        if self._inproc:
            out = ref.value
            return concat_updates([o.value for o in out.refs]) if isinstance(out, RemoteUpdates) else out
        import ray
        try:
            out = ray.get(ref)
        except ray.exceptions.RayTaskError as e:
            raise _unwrap(e) from None
        return concat_updates(ray.get(out.refs)) if isinstance(out, RemoteUpdates) else out

    def subscribe(self, subs) -> None:
        self._change("subscribe", subs)

    def unsubscribe(self, ids) -> None:
        self._change("unsubscribe", ids)

    @property
    def kind(self) -> str:
        """The name of the kind this cluster serves (``"spatial"``, ``"matching"``, ``"range"``:
        :mod:`rankcast.runtime.registry`)."""
        return self._kind.name

    @property
    def _kind(self) -> KindEntry:
        """The registry's entry of this cluster's kind (its config read once)."""
        if self._entry is None:
            self._entry = registry.entry(self._config.engine)
        return self._entry

    @property
    def _config(self) -> ClusterConfig:
        """The cluster's config, read once."""
        if self._ccfg is None:
            self._ccfg = self._call("config")
        return self._ccfg

    def _form(self, updates, verb: str) -> str:
        """The form of updates a call of this handle returns (:func:`_cluster_form`)."""
        return _cluster_form(updates, verb, self._config.updates)

    @property
    def matching(self) -> bool:
        """Whether this cluster serves ranked matching. An alias of ``kind == "matching"``,
        kept for one release."""
        return self.kind == "matching"

    @property
    def ranged(self) -> bool:
        """Whether this cluster serves range top-k. An alias of ``kind == "range"``, kept for
        one release."""
        return self.kind == "range"

    def _objects(self, arrays, form: str = "objects"):
        """Result objects (the kind's: ``rc.Update``, or ``rc.Match`` for ranked matching) from
        update arrays; or their Arrow table (``form="arrow"``), the diff table of diff arrays
        (``"diff"``), or None (``"none"``)."""
        if form == "none":
            return None
        if form == "diff":
            return self._kind.diffs(arrays)
        return self._kind.arrow(arrays) if form == "arrow" else self._kind.objects(arrays)

    def publish(self, msgs, wait: bool = True, k: int | None = None, updates: str | None = None):
        """wait=True: the updates of this call once applied (whoever else publishes); for
        ranked matching, one ``rc.Match`` per event in input order (``k`` as in
        ``Matcher.publish``). ``updates="arrow"`` returns them as one Arrow table
        (:func:`rankcast.kinds.spatial.engine.updates_table`; ranked matching: ``event_id``, ``rank``,
        ``expression_id``, ``score``, events in input order), ``"none"`` returns nothing. A
        cluster started with ``ClusterConfig(updates="diff")`` returns ``"diff"``: one Arrow
        table of the entries that left and entered each list (docs/contract.md, "Updates as
        diffs"), or ``"none"``. None: ``"objects"``, or ``"diff"`` on such a cluster.
        wait=False: returns None once the items are validated and in the pipeline; their
        changes are delivered to listeners within ``delivery_interval`` seconds, and
        :meth:`flush` waits and returns those of this client's pipelined calls."""
        form = self._form(updates, "publish")
        if k is not None and "k" not in self._kind.publish_options:
            takes = " and ".join(e.label for e in registry.kinds() if "k" in e.publish_options) or "no kind"
            raise InvalidInput(f"publish: field 'k': only {takes} takes k per call")
        out = self._change("publish", msgs, bool(wait)) if k is None else \
            self._change_kw("publish", msgs, bool(wait), k=k)
        return self._objects(out, form) if wait else None

    def apply_batch(self, sink: str, batch_id: int, items, *, call: str = "publish",
                    on_invalid: str = "raise") -> BatchResult:
        """Apply batch ``batch_id`` of the stream ``sink`` exactly once (docs/streaming.md):
        ``call`` is ``"publish"`` (messages, events or object updates), ``"subscribe"`` or
        ``"unsubscribe"``. The batch id is recorded in the cluster's durable state in the same
        log record as the items, so a batch sent again (an id at or below the sink's last one:
        a stream engine replaying it after a crash or a restart) changes nothing and returns
        ``applied=False``. A publish batch is pipelined (``publish(wait=False)``): its updates
        reach listeners within ``delivery_interval``. An invalid item rejects the whole batch,
        nothing of it applied: ``on_invalid="raise"`` raises the :class:`~rankcast.InvalidInput`
        (the item named by its position in the batch, and its field) and records nothing;
        ``"record"`` records the id as handled with the error, returned in ``rejected``."""
        parts = [items]
        if call == "publish" and isinstance(items, pa.Table):
            calls = _calls_of(items, self._kind.distinct_publish_ids)
            if len(calls) > 1:      # ids repeat: consecutive calls, validated and applied as one
                parts = [items.slice(a, b - a) for a, b in calls]
        out = self._change_kw("apply_batch", sink, batch_id, call, parts, on_invalid=on_invalid)
        return BatchResult(**out)

    def batch_state(self, sink: str) -> dict:
        """``{"last": the last batch id applied or rejected for sink (-1: none), "rejected":
        {batch id: error} of its recent rejections}``."""
        return self._call("batch_state", sink)

    def flush(self, updates: str | None = None):
        """Wait for this client's pipelined publishes; their updates since its last flush
        (per subscription, its latest list, or its diffs composed into one; ranked matching:
        per event), in the form ``updates`` names (as in :meth:`publish`)."""
        form = self._form(updates, "flush")
        return self._objects(self._change("flush"), form)

    def position(self) -> int:
        """The stream position now: messages published so far (by any client)."""
        return self._call("position")

    def deliveries(self, from_position: int, subscription_ids: Iterable[int] | None = None, *,
                   updates: str | None = None, limit: int = 256) -> tuple[list[Delivery], int]:
        """One poll of the delivery stream (what :meth:`listen` repeats): the deliveries at
        positions >= ``from_position`` that are made (at most ``limit``), with their updates in
        the form ``updates`` names (as in :meth:`publish`), and the position to ask from next."""
        form = self._form(updates, "listen")
        ids = None if subscription_ids is None else np.unique(np.fromiter(
            (int(i) for i in subscription_ids), np.int64))
        got, pos = self._call("deliveries_from", from_position, ids, int(limit))
        return [Delivery(p, self._objects(arrays, form)) for p, arrays in got], pos

    def listen(self, subscription_ids: Iterable[int] | None = None, from_position: int | None = None,
               timeout: float | None = None, *, poll: float = 0.02,
               updates: str | None = None) -> Iterator[Delivery]:
        """Follow every change, whoever published it, in stream order (docs/contract.md,
        "Delivery"): yields a :class:`~rankcast.Delivery` (``position``, ``updates``)
        per delivered call. ``subscription_ids`` keeps only those subscriptions' updates;
        ``from_position`` replays from that position on (deliveries at positions >= it; a
        listener that handled position p resumes with p + 1: no gap, no duplicate), None
        starts after the current position. Ends after ``timeout`` seconds without a new
        delivery (None: never). Survives a coordinator restart, and waits through a time without
        room for the roles of a lost node (:class:`~rankcast.NoCapacity`). ``updates``: each
        delivery's updates as objects, or ``"arrow"``: one Arrow table (as in :meth:`publish`);
        on a cluster of diffs (``ClusterConfig(updates="diff")``) ``"diff"``, the default
        there: the delivery's entries that left and entered each list, which
        :func:`rankcast.apply_diffs` applies to a listener's copy of its lists."""
        form = self._form(updates, "listen")
        ids = None if subscription_ids is None else np.unique(np.fromiter(
            (int(i) for i in subscription_ids), np.int64))
        pos = self.position() + 1 if from_position is None else from_position
        quiet_since = time.monotonic()
        while True:
            try:
                got, pos = self._call("deliveries_from", pos, ids)
            except NoCapacity:      # roles lost with a node wait for room: nothing new yet
                got = []
            for p, arrays in got:
                yield Delivery(p, self._objects(arrays, form))
            now = time.monotonic()
            if got:
                quiet_since = now
                continue
            if timeout is not None and now - quiet_since >= timeout:
                return
            time.sleep(poll)

    def checkpoint(self) -> int:
        """Snapshot every role now (otherwise every ``checkpoint_every`` seconds)."""
        return self._call("checkpoint")

    def warm(self) -> dict[str, list[int]]:
        """Every role loads its compiled kernels now (a subscription partition or window
        shard otherwise does it in its first steps, which then take seconds instead of
        milliseconds), and a durable cluster's standby processes finish starting (otherwise
        in the first seconds of a stream); so does this client, and it maps the object
        store's pages that the partitions' results will cross (``Coordinator.warm``). Returns
        the process ids by role."""
        pids = self._call("warm")
        store = pids.pop("store", None)
        if store:       # the object store's pages the partitions' results cross: mapped here too
            import ray
            for pages in ray.get(store):
                pages[::4096].sum()     # a read per page maps it
            del store, pages
        _warm_client()
        return pids

    def pids(self) -> dict[str, list[int]]:
        """Process ids of the roles (fault-injection tests)."""
        return self._call("pids")

    def topology(self) -> dict[str, list[int]]:
        """Process ids by what they do: each role the cluster runs (``coordinator``,
        ``distributor``, ``partition``, ``shard``, ``aggregator``; a role with no process is
        absent) and each duty a kind's processes carry besides their role (the spatial kind's
        ``window``: its shards, or the partitions that each hold the whole window)."""
        return self._call("topology")

    def topk(self, sub_id) -> list[tuple[int, float]]:
        return self._call("topk", sub_id)

    def topk_many(self, sub_ids: Iterable[int]) -> dict[int, list[tuple[int, float]]]:
        return self._call("topk_many", list(sub_ids))

    def stats(self) -> dict[str, Any]:
        return self._call("stats")

    def config(self) -> ClusterConfig:
        return self._call("config")

    def rebalance(self, threshold: float = 1.5, sample: int = 5000) -> dict:
        """Load monitoring (paper 7.4): split the busiest location partition or refit the
        keyword ranges when one partition is ``threshold`` times busier than the mean since
        the previous check; results stay exact. Returns what was done."""
        return self._call("rebalance", float(threshold), int(sample))

    # ------------------------------------------------------------------ bulk
    def load_subscriptions(self, source, *, batch_rows: int = 100_000, spark=None,
                           progress: bool = True) -> int:
        """Bulk-load a subscription table (Spark DataFrame, Parquet/CSV/JSONL path, Arrow or
        pandas): batches of ``batch_rows`` are routed by the policy and indexed with one
        ``SkypeCore.add`` per partition and batch; initial results follow in batches. The
        call is atomic: every batch is validated first, and a bad row anywhere (named by its
        position in the table) loads nothing. Returns the number of subscriptions. With
        ``progress``, two bars on stderr: rows validated, then rows with initial results.

        Validation and encoding use two processes: the coordinator encodes every other batch
        while this process encodes the next one with a copy of the coordinator's term
        dictionary; a batch encoded here is sent as columns only if all its terms were
        known (then its ids are the coordinator's), otherwise as the raw table."""
        from rankcast.ingest.bulk import iter_batches
        refs = []
        self._calls += 1
        token = self._calls
        try:
            kind = self._kind
            enc = self._call("encoder_copy") if kind.pre_encode and not self._inproc else None
            for i, table in enumerate(iter_batches(source, batch_rows, spark=spark, kind=kind.subscription_table.name,
                                                   progress=progress, desc="load: validate")):
                refs.append(self._method("stage_batch").remote(_pre_encoded(enc, table) if i % 2 else table))
                if len(refs) > 2:
                    self._get(refs[-3])     # at most two parts in flight; errors in table order
            for r in refs[-2:]:
                self._get(r)
        except BaseException:
            self._call("abort_load")
            raise
        return self._commit_load(progress, token)

    def _commit_load(self, progress: bool, token: int) -> int:
        """The coordinator's ``commit_load``, one call whose progress values stream back."""
        from tqdm.auto import tqdm

        commit = self._method("commit_load")
        if self._inproc:
            values = commit.remote(self._client, token).value
        else:
            values = (self._get(r) for r in commit.options(num_returns="streaming").remote(self._client, token))
        done = total = 0
        with tqdm(unit="rows", desc="load: initial top-k", disable=not progress, leave=False,
                  dynamic_ncols=True) as bar:
            for done, total in values:
                bar.total = total
                bar.update(done - bar.n)
        return total

    def replay(self, source, rate: float | None = None, *, batch_rows: int = 10_000, spark=None,
               progress: bool = True) -> dict:
        """Publish a message table in order (pipelined), at most ``rate`` messages/second;
        returns {"messages", "seconds", "updates"} once everything is applied. Each batch is
        one atomic publish: a bad row (named by its position in the whole table) stops the
        replay, and the batches before it stay published. With
        ``progress``, bars on stderr: rows read, and messages applied by the cluster."""
        from tqdm.auto import tqdm

        from rankcast.ingest.bulk import iter_batches
        t0 = time.perf_counter()
        n = 0
        base = None
        with tqdm(unit="msg", desc="replay: applied", disable=not progress, leave=False,
                  dynamic_ncols=True) as bar:
            kind = self._kind
            for table in iter_batches(source, batch_rows, spark=spark, kind=kind.publish_table.name,
                                      progress=progress, desc="replay: read"):
                for a, b in _calls_of(table, kind.distinct_publish_ids):
                    part = table.slice(a, b - a) if (a, b) != (0, table.num_rows) else table
                    try:
                        published, applied = self._change("publish", part, False)
                    except InvalidInput as e:      # named by its position in the whole table
                        raise shift_position(e, n) from None
                    n += part.num_rows
                    if base is None:
                        base = published - part.num_rows      # the stream position this replay began at
                    bar.update(min(n, max(0, applied - base)) - bar.n)
                if rate:
                    ahead = n / rate - (time.perf_counter() - t0)
                    if ahead > 0:
                        time.sleep(ahead)
            updates = n_updates(self._change("flush"))
            bar.update(n - bar.n)
        return {"messages": n, "seconds": time.perf_counter() - t0, "updates": updates}


def _calls_of(table, distinct_ids: bool) -> list[tuple[int, int]]:
    """The row ranges of ``table`` that a replay publishes as one call each: the whole table,
    or for a kind whose publish call takes each id once (range top-k: an id may come back in
    its stream) its runs of distinct ids."""
    if not distinct_ids or "id" not in table.column_names:
        return [(0, table.num_rows)]
    from rankcast.ingest.range_tables import distinct_runs
    ids = table.column("id")
    try:
        return distinct_runs(ids.to_numpy()) or [(0, 0)]
    except (TypeError, ValueError, pa.ArrowException):   # not int ids: the call names the bad row
        return [(0, table.num_rows)]


def _pre_encoded(enc, table):
    """``table`` encoded by ``enc`` (a copy of the coordinator's encoder) when that gives the
    coordinator's own result: no error (the coordinator reports errors, with positions in the
    whole table) and no term unknown to the copy (a new term's id depends on what the
    coordinator met since). Otherwise the table itself."""
    if enc is None:
        return table
    try:
        batch, pending = enc.encode_subscriptions(table)
    except InvalidInput:
        return table
    return table if pending else batch


def _ensure_ray(address: str | None, namespace: str) -> None:
    import ray
    if ray.is_initialized():
        return
    if address is None:
        ray.init(**local_ray_options(namespace=namespace, log_to_driver=False))
        return
    try:
        ray.init(address=address, namespace=namespace, log_to_driver=False)
    except ConnectionError as e:
        # Ray's own message does not say that a missing or wrong token looks the same
        raise ConnectionError(f"cannot attach to the Ray cluster at {address!r}: {e}. A cluster with token "
                              f"authentication (RAY_AUTH_MODE=token) accepts only clients that present its "
                              f"token: set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH, "
                              f"default ~/.ray/auth_token) to the cluster's token (docs/operations.md, \"Security\")") from None

"""``rankcast bench soak``: a cluster streaming for a given time at a given rate, then kills.

Protocol: subscribe ``subs`` subscriptions, fill the window, measure the peak rate (the
stream as fast as the pipelined cluster takes it, over ``calibrate`` seconds: by default four
checkpoint intervals, so that their cost is in it), then the sustainable rate: the highest of
:data:`PROBE_FRACTIONS` of the peak rate that the cluster keeps up with for ``probe`` seconds
(:func:`_keeps_up`: the publisher held its rate, and the latency did not grow from the
probe's first third to its last, nor exceed a second). At full speed the calls gather into
steps of up to ``ClusterConfig.coalesce`` messages, which cost less per message than the
smaller steps of a slower stream, so the peak rate is more than the cluster sustains at that
rate's pace.
Then publish at ``rate`` messages/s (default: ``load`` x the sustainable rate) in calls of
``batch`` messages (``publish(wait=False)``: backpressure blocks the publisher when the
cluster falls behind):

1. the soak: ``seconds`` of stream, no faults: memory and update latency at that rate;
2. the kill phase: ``kills`` x ``kill_every`` seconds more of the same stream, one process of
   the roles in ``kill`` SIGKILLed (in turn) every ``kill_every`` seconds: recovery time
   (from the kill to the end of the recovery that followed) and the time until calls sent
   after the kill are delivered within the latency target again.

The victims come from the cluster's own description of its processes
(:meth:`rankcast.Cluster.topology`): ``partition``, ``window`` (the processes that hold the
window: its shards, or the partitions that each hold the whole window; ``shard`` names the
same processes), ``aggregator``, ``distributor`` and ``coordinator``. A role the started
cluster does not run is an error before the stream starts, naming the roles it has.

Meanwhile a listener (``Cluster.listen``, its own thread; Arrow tables by default,
``--listen-updates objects`` for ``rc.Update`` objects, built in this process beside the
publisher) receives every delivery: the latency of a call is the time from its submission
to the arrival of the delivery holding its position; the resident memory of every process
of the cluster (coordinator, roles and standby processes, new ones after a recovery
included; not the short-lived children that write snapshots) and of this driver is sampled
every second.

A listener that falls behind the cluster's retention (at full speed, during the sustainable
rate's measurement) resumes inside it and counts the gap (``listener_gaps``); one that stops
on any other error stops the soak with that error.

Writes ``soak.json`` (throughput, latency p50/p99 of each phase and of each 10 seconds of the
soak, memory at start and end of the soak and its drift, recoveries, checkpoints and the
delivery chunks read back, each process's collector pauses and snapshot copies during the
soak) and ``soak.png`` (memory and latency over time, kills
marked). Both are written after the soak and again after each kill, so a run that ends early
keeps what it measured.
"""
from __future__ import annotations

import argparse
import gc
import os
import signal
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from rankcast.errors import CommandError, InvalidInput
from rankcast.runtime.metrics import gc_pauses
from ._common import build_workload, progress, pyplot, save_figure, write_json

__all__ = ["add_arguments", "main", "run_soak"]

TARGETS = {"recovery_seconds": 10.0, "memory_drift": 0.10, "p99_latency_seconds": 1.0}

# the rates probed for the sustainable one, as fractions of the peak rate, highest first
PROBE_FRACTIONS = (0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.6, 0.5)
# a probe kept up: the publisher sent at least this share of its rate...
PROBE_MIN_SENT = 0.97
# ... the median latency of its last third's calls exceeds its first third's by at most this...
PROBE_GROWTH_SECONDS = 0.25
# ... and is at most this (the latency target): a stream whose calls wait a second in its queue
# is at the edge of the cluster's capacity, where steps grow until they cost little enough per
# message to keep pace, not below it
PROBE_MAX_MEDIAN_SECONDS = TARGETS["p99_latency_seconds"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default="geonames", help="geonames | tweets | yelp (rankcast.ingest.datasets)")
    p.add_argument("--subs", type=int, default=100_000)
    p.add_argument("--window", type=int, default=100_000)
    p.add_argument("--seconds", type=float, default=600.0, help="length of the soak")
    p.add_argument("--rate", type=float, default=None, help="messages/s (default: --load x sustainable)")
    p.add_argument("--load", type=float, default=0.8, help="fraction of the sustainable rate")
    p.add_argument("--calibrate", type=float, default=None,
                   help="seconds of stream that measure the peak rate (default: 4 checkpoint "
                        "intervals, at least 20)")
    p.add_argument("--probe", type=float, default=40.0,
                   help="seconds of each probe of the sustainable rate (0: the peak rate is taken as sustainable)")
    p.add_argument("--batch", type=int, default=50, help="messages per publish call")
    p.add_argument("--kill", default="partition,window,coordinator",
                   help="roles killed in turn: partition, window (its holders; alias shard), aggregator, "
                        "distributor, coordinator; '' none")
    p.add_argument("--kills", type=int, default=3, help="kills in the kill phase, after the soak (0: none)")
    p.add_argument("--kill-every", type=float, default=60.0, help="seconds between kills")
    p.add_argument("--policy", default="hash")
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--shards", type=int, default=2)
    p.add_argument("--checkpoint-every", type=float, default=None, help="ClusterConfig.checkpoint_every")
    p.add_argument("--delivery-interval", type=float, default=None, help="ClusterConfig.delivery_interval")
    p.add_argument("--coalesce", type=int, default=None, help="ClusterConfig.coalesce")
    p.add_argument("--listen-updates", default="arrow", choices=("arrow", "objects"),
                   help="the form the listener takes deliveries in (Cluster.listen's updates)")
    p.add_argument("--out", default="out/bench")


ROLES = ("Coordinator", "SoloPartition", "SubscriptionPartition", "WindowShard", "Aggregator", "Distributor")


def _cluster_rss_mb() -> tuple[float, float, dict[str, float]]:
    """Resident memory of every process of this run's Ray that runs a rankcast role (Ray
    titles an actor's process ``ray::<class>``; the processes this one started, its Ray's
    among them: not another Ray's on the same host), replacements after a recovery included:
    (all of it, its private part, the private part by role). The private part leaves out
    resident shared pages, chiefly Ray's object store, which every process maps and which
    counts in each one's resident memory once it touched those pages (it is bounded by the
    store's size)."""
    import psutil
    found = {}
    for p in psutil.Process(os.getpid()).children(recursive=True):
        try:
            p.info = p.as_dict(["cmdline", "memory_info", "ppid"])
        except psutil.Error:          # ended meanwhile
            continue
        cmd = " ".join(p.info["cmdline"] or ())
        mi = p.info["memory_info"]
        role = next((r for r in ROLES if r in cmd), None) if cmd.startswith("ray::") else None
        if role is not None and mi:
            found[p.pid] = (p.info["ppid"], role, mi.rss, mi.rss - getattr(mi, "shared", 0))
    # a role's snapshot writer is a forked child with the role's title and pages (shared
    # copy-on-write): not counted again
    roles = [(role, rss, own) for ppid, role, rss, own in found.values() if ppid not in found]
    by_role = {r: sum(o for role, _, o in roles if role == r) / 2**20 for r in ROLES}
    return sum(r for _, r, _ in roles) / 2**20, sum(o for _, _, o in roles) / 2**20, by_role


def _rss_mb(pid: int) -> float:
    import psutil
    return psutil.Process(pid).memory_info().rss / 2**20


class _Listener(threading.Thread):
    def __init__(self, cl, start_pos, form, retention: int):
        super().__init__(daemon=True)
        self.cl, self.pos, self.form, self.retention = cl, start_pos, form, int(retention)
        self.arrivals: list[tuple[int, float, int]] = []    # (position, time, updates)
        self.gaps: list[tuple[int, int, float]] = []         # (from, resumed at, time): positions missed
        self.error: BaseException | None = None
        self.stop = threading.Event()

    def run(self):
        try:
            while not self.stop.is_set():
                try:
                    for d in self.cl.listen(from_position=self.pos, timeout=0.5, updates=self.form):
                        self.arrivals.append((d.position, time.time(), len(d.updates)))
                        self.pos = d.position + 1
                        if self.stop.is_set():
                            break
                except InvalidInput as e:
                    # fell behind the retention (a publisher at full speed holds this process's
                    # GIL): resume half a retention behind the stream's position, inside what
                    # is kept; the calls skipped are timed by the next delivery (a later
                    # arrival: never an earlier one) and the gap is counted
                    if "no longer kept" not in str(e):
                        raise
                    resume = max(self.pos, self.cl.position() - self.retention // 2)
                    self.gaps.append((self.pos, resume, time.time()))
                    self.pos = resume
        except BaseException as e:      # noqa: BLE001 - reported by the soak, which stops
            self.error = e


KILL_ROLES = ("partition", "window", "aggregator", "distributor", "coordinator")
ALIASES = {"shard": "window"}


def kill_roles(spec: str) -> list[str]:
    """The roles of ``--kill`` (comma-separated), aliases resolved; an unknown one is an error."""
    roles = [ALIASES.get(r.strip(), r.strip()) for r in spec.split(",") if r.strip()]
    bad = [r for r in roles if r not in KILL_ROLES]
    if bad:
        raise CommandError(f"--kill: unknown role {bad[0]!r} (roles: {', '.join(KILL_ROLES)}; shard = window)")
    return roles


def check_victims(topology: dict[str, list[int]], roles: list[str]) -> None:
    """Every role to kill has processes in this cluster, or a CommandError naming the missing
    role and the roles the cluster runs."""
    for r in roles:
        if not topology.get(r):
            raise CommandError(f"--kill: this cluster runs no {r!r} process (it runs: "
                             f"{', '.join(sorted(k for k, v in topology.items() if v))})")


def run_soak(args, write=None) -> dict:
    """The soak and its kill phase; ``write(report)``, when given, receives the report after
    the soak and after each kill (the last one is the value returned)."""
    import ray

    import rankcast as rc
    from rankcast.config import local_ray_options

    # the stream wraps around with fresh ids when it runs out (see stream())
    w = build_workload(args.dataset, args.window + int((args.seconds + args.kills * args.kill_every) * 500) + 20_000,
                       args.subs)
    gc_pauses()                     # the driver's collector, watched from here
    state = tempfile.mkdtemp(prefix="rankcast-soak-")
    cfg = rc.EngineConfig(bounds=w.bounds, window=args.window, vocabulary=w.vocab)
    extra = {k: getattr(args, k) for k in ("checkpoint_every", "delivery_interval", "coalesce") if getattr(args, k) is not None}
    ccfg = rc.ClusterConfig(engine=cfg, policy=args.policy, partitions=args.partitions,
                            window_shards=args.shards, name="rankcast-soak", state_dir=state,
                            monitor_every=0.0, **extra)
    args.checkpoint_every, args.delivery_interval = ccfg.checkpoint_every, ccfg.delivery_interval
    kills = kill_roles(args.kill) if args.kills else []
    if not ray.is_initialized():
        ray.init(**local_ray_options(namespace=ccfg.namespace, log_to_driver=False))
    cl = rc.Cluster.start(ccfg, fresh=True)
    msgs = w.msgs
    at = 0

    def take(n):
        nonlocal at
        if at + n > len(msgs):
            at = args.window        # the stream is finite: replay it with fresh ids
            msgs.ids = msgs.ids + int(msgs.ids.max()) + 1
        b = msgs.take(np.arange(at, at + n))
        at += n
        return b

    report = None

    def publish_report(soak: dict, faults: dict | None) -> None:
        nonlocal report
        report = _report(args, w, sustainable, rate, soak, faults, peak, probes)
        if write is not None:
            write(report)

    try:
        check_victims(cl.topology(), kills)
        with progress(len(w.subs), "soak: subscribe", unit="sub") as bar:
            for a in range(0, len(w.subs), 20_000):
                part = w.subs.take(np.arange(a, min(len(w.subs), a + 20_000)))
                cl.subscribe(part)
                bar.update(len(part))
        with progress(args.window, "soak: fill window") as bar:
            for _ in range(0, args.window, 5000):
                cl.publish(take(5000), wait=False)
                bar.update(5000)
            cl.flush()
        cl.checkpoint()
        # the driver's own data (the workload and its vocabulary: 600k terms) out of its
        # collector's sight, as the roles do theirs (rankcast.runtime.metrics.settle_heap):
        # otherwise each full collection pauses the publisher and the listener
        gc.collect()
        gc.freeze()
        listener = _Listener(rc.Cluster.attach(ccfg.name, namespace=ccfg.namespace), cl.position() + 1,
                             args.listen_updates, ccfg.retention)
        listener.start()
        # the peak rate: pipelined, as fast as the cluster takes it, with the listener on,
        # over several checkpoint intervals (a rate that leaves out the checkpoints' cost
        # is not sustained)
        cal_s = args.calibrate if args.calibrate is not None else max(20.0, 4 * args.checkpoint_every)
        n_cal = 0
        t0 = time.perf_counter()
        with progress(int(cal_s), "soak: peak rate", unit="s") as bar:
            while n_cal < 10_000 or time.perf_counter() - t0 < cal_s:
                cl.publish(take(args.batch), wait=False)
                n_cal += args.batch
                bar.update(min(int(cal_s), int(time.perf_counter() - t0)) - bar.n)
            cl.flush()
        peak = sustainable = n_cal / (time.perf_counter() - t0)
        probes: list[dict] = []
        rate = args.rate

        def stream(seconds: float, kills: list[str], label: str, soak: dict | None = None,
                   at_rate: float | None = None) -> dict:
            """Publish at ``rate`` (or ``at_rate``) for ``seconds``; kill one process of
            ``kills`` (in turn) every ``kill_every`` seconds from the first one on, the report
            so far written before each kill after the first; sample memory every second. With
            ``kills``, the stream goes on past ``seconds`` until all ``args.kills`` are made
            (a call held up by a slow recovery does not end the phase before its last kill)."""
            r = rate if at_rate is None else at_rate
            listener.arrivals.clear()
            listener.gaps.clear()
            submits: list[tuple[int, float]] = []      # (position at the call's end, submit time)
            mem: list[tuple[float, ...]] = []  # (seconds, cluster MiB, driver MiB, cluster private MiB)
            mem_roles: list[dict[str, float]] = []     # private MiB by role, at the same times
            kill_log: list[dict] = []
            recs_seen: dict[tuple[float, str], dict] = {}

            def result(elapsed: float) -> dict:
                # a coordinator's restart (cause "restart") forgets the recoveries before it:
                # they are kept here, read before each kill
                st = cl.stats()
                rec = st["recovery"]
                for r in rec["recoveries"]:
                    if r["time"] >= start:
                        recs_seen[(r["time"], r["cause"])] = r
                recs = sorted(recs_seen.values(), key=lambda r: r["time"])
                counters = cl._call("peek_counters")
                return {"sent": sent, "elapsed": elapsed, "submits": list(submits),
                        "arrivals": list(listener.arrivals), "listener_gaps": list(listener.gaps),
                        "mem": list(mem), "mem_roles": list(mem_roles),
                        "kills": [dict(k) for k in kill_log], "recoveries": recs,
                        "pauses": _since(pauses0, _pauses(st["roles"]), start),
                        "checkpoints": {"taken": rec["checkpoints"], "last_seconds": rec["last_checkpoint_seconds"],
                                        "last_stall": rec["last_checkpoint_parts"],
                                        "delivery_chunks_read": counters.get("chunk_reads", 0),
                                        "delivery_chunk_read_seconds": counters.get("chunk_read_seconds", 0.0)}}

            pauses0 = _pauses(cl.stats()["roles"])
            pos = cl.position()
            start = time.time()
            next_kill = start + (args.kill_every / 2 if kills else float("inf"))
            next_mem = start
            sent = 0
            with progress(int(seconds), label, unit="s") as bar:
                while True:
                    now = time.time()
                    if now - start >= seconds and len(kill_log) >= (args.kills if kills else 0):
                        break
                    if listener.error is not None:
                        raise RuntimeError(f"soak: the listener stopped: {listener.error!r}") from listener.error
                    if now >= next_mem:
                        rss, own, by_role = _cluster_rss_mb()
                        mem.append((now - start, rss, _rss_mb(os.getpid()), own))
                        mem_roles.append(by_role)
                        next_mem += 1.0
                        bar.update(int(now - start) - bar.n)
                    if now >= next_kill:
                        if kill_log:
                            publish_report(soak, result(time.time() - start))
                        role = kills[len(kill_log) % len(kills)]
                        victims = cl.topology().get(role, [])
                        entry = {"role": role, "time": time.time(), "at": time.time() - start, "position": pos}
                        if victims:
                            entry["pid"] = victims[len(kill_log) % len(victims)]
                            try:
                                os.kill(entry["pid"], signal.SIGKILL)
                            except ProcessLookupError:
                                entry["missed"] = "the process was gone already"
                        else:
                            entry["missed"] = "no process of this role"
                        kill_log.append(entry)
                        next_kill += args.kill_every
                    due = start + sent / r
                    if now < due:
                        time.sleep(min(due - now, 0.05))
                        continue
                    b = take(args.batch)
                    t_sub = time.time()
                    cl.publish(b, wait=False)
                    pos += len(b)
                    sent += len(b)
                    submits.append((pos, t_sub))
            elapsed = time.time() - start
            # the last calls' deliveries reach the listener before this client's flush, which
            # composes every update since its last one (the whole phase's) and is not part of
            # the stream: a latency is the stream's own
            t_end = time.time() + max(10.0, 20 * args.delivery_interval)
            while listener.pos <= pos and time.time() < t_end and listener.error is None:
                time.sleep(0.02)
            cl.flush()
            time.sleep(2.0)             # the listener polls every 0.5 s: the last deliveries arrive
            return result(elapsed)

        if args.rate is None and args.probe > 0:
            # the sustainable rate: the highest probed rate the cluster keeps up with; each
            # probe starts on a drained cluster (a stream's end waits for its deliveries)
            for f in PROBE_FRACTIONS:
                got = stream(args.probe, [], f"soak: probe {f:.0%} of peak", at_rate=f * peak)
                kept, detail = _keeps_up(got, f * peak)
                probes.append({"fraction": f, "rate": f * peak, "kept_up": kept, **detail})
                sustainable = f * peak
                if kept:
                    break
        rate = args.rate or args.load * sustainable
        soak = stream(args.seconds, [], "soak")
        publish_report(soak, None)
        if kills:
            publish_report(soak, stream(args.kills * args.kill_every, kills, "kills", soak))
        listener.stop.set()
        listener.join(10)
    finally:
        cl.shutdown()
    return report


PAUSE_KEYS = ("gc_collections", "gc_seconds", "gc_max_pause_seconds", "gc_full_collections",
              "gc_full_seconds", "gc_long_pauses", "snapshots", "snapshot_seconds")


def _pauses(roles: dict) -> dict:
    """What stopped each role's process besides its work, since it started: the garbage
    collector's pauses and the snapshots' copies (keyed ``role-i``), and this driver's
    collector (the publisher and the listener)."""
    out = {"driver": gc_pauses()}
    for role, got in roles.items():
        for i, r in enumerate(got if isinstance(got, list) else [got]):
            out[f"{role}-{i}"] = {k: r[k] for k in PAUSE_KEYS if k in r}
    return out


def _since(before: dict, now: dict, start: float) -> dict:
    """The pauses of each process during a phase that began at ``start`` (wall time): counts
    and seconds since (a process new since: all of its own), and its collector's pauses of
    at least 10 ms as ``[seconds into the phase, seconds, generation]``."""
    out = {}
    for proc, got in now.items():
        was = before.get(proc, {})
        out[proc] = {k: v - was.get(k, 0) for k, v in got.items()
                     if k not in ("gc_max_pause_seconds", "gc_long_pauses")}
        out[proc]["gc_long_pauses"] = [[t - start, p, g] for t, p, g in got.get("gc_long_pauses", ()) if t >= start]
    return out


def _latencies(submits, arrivals) -> tuple[np.ndarray, np.ndarray]:
    """(submit time, latency) of every call: a delivery at position p means every call up to
    p was applied (a call that changed nothing has no delivery of its own)."""
    sub_pos = np.array([p for p, _ in submits], np.int64)
    sub_t = np.array([t for _, t in submits])
    lat = np.full(len(sub_t), np.nan)
    lo = 0
    for p, t, _ in arrivals:
        hi = int(np.searchsorted(sub_pos, p, side="right"))
        if hi > lo:
            lat[lo:hi] = t - sub_t[lo:hi]
        lo = max(lo, hi)
    return sub_t, lat


def _quantiles(lat: np.ndarray) -> dict:
    lat = lat[np.isfinite(lat)]
    if not len(lat):
        return {"p50": float("nan"), "p99": float("nan"), "max": float("nan"), "calls": 0}
    return {"p50": float(np.percentile(lat, 50)), "p99": float(np.percentile(lat, 99)),
            "max": float(lat.max()), "calls": int(len(lat))}


def _by_10_seconds(sub_t: np.ndarray, lat: np.ndarray) -> list[dict]:
    """Latency quantiles of the calls submitted in each 10 seconds of a phase."""
    if not len(sub_t):
        return []
    at = ((sub_t - sub_t[0]) // 10).astype(np.int64)
    return [dict(_quantiles(lat[at == i]), at=10 * int(i)) for i in range(int(at.max()) + 1)]


def _keeps_up(res: dict, rate: float) -> tuple[bool, dict]:
    """Whether a probe's stream (``stream``'s result) at ``rate`` kept up: the publisher sent
    at least :data:`PROBE_MIN_SENT` of the rate (backpressure did not hold it back), and the
    median latency of the calls of its last third (by submission) exceeds that of its first
    third by at most :data:`PROBE_GROWTH_SECONDS` (a cluster behind its rate queues more with
    every second: 5% behind, 0.05 s more latency per second) and is at most
    :data:`PROBE_MAX_MEDIAN_SECONDS` (a cluster at its capacity holds a standing queue: its
    steps grow until they are cheap enough per message, and the latency with them). Also
    returns what decided."""
    sub_t, lat = _latencies(res["submits"], res["arrivals"])
    sent = res["sent"] / res["elapsed"] if res["elapsed"] > 0 else 0.0
    out = {"achieved": sent, "latency_first_third": float("nan"), "latency_last_third": float("nan")}
    if len(sub_t) < 3:
        return False, out
    third = (sub_t - sub_t[0]) * 3 // max(sub_t[-1] - sub_t[0], 1e-9)
    first, last = lat[third == 0], lat[third >= 2]
    if not np.isfinite(first).any() or not np.isfinite(last).all():
        return False, out                    # a call of the last third never delivered
    out["latency_first_third"] = float(np.nanmedian(first))
    out["latency_last_third"] = float(np.median(last))
    kept = (sent >= PROBE_MIN_SENT * rate
            and out["latency_last_third"] <= out["latency_first_third"] + PROBE_GROWTH_SECONDS
            and out["latency_last_third"] <= PROBE_MAX_MEDIAN_SECONDS)
    return bool(kept), out


def _report(args, w, sustainable, rate, soak: dict, faults: dict | None, peak: float,
            probes: list[dict]) -> dict:
    sub_t, lat = _latencies(soak["submits"], soak["arrivals"])
    m = np.array(soak["mem"]) if soak["mem"] else np.zeros((1, 4))
    roles = [r for r in ROLES if any(x.get(r) for x in soak["mem_roles"])]
    by_role = np.array([[x.get(r, 0.0) for r in roles] for x in soak["mem_roles"]]).reshape(len(m), len(roles))
    m = np.hstack([m, by_role]) if len(by_role) == len(m) else m
    warm = m[m[:, 0] >= min(60.0, args.seconds / 4)] if len(m) > 4 else m
    q = max(1, len(warm) // 4)

    def quarters(col: int) -> tuple[float, float, float]:
        """(first quarter's mean, last quarter's mean, drift) of a memory column."""
        a, b = float(warm[:q, col].mean()), float(warm[-q:, col].mean())
        return a, b, (b - a) / a if a else 0.0

    first, last, drift = quarters(1)
    own_first, own_last, own_drift = quarters(3)
    role_quarters = {r: dict(zip(("first_quarter", "last_quarter", "drift"), quarters(4 + i)))
                     for i, r in enumerate(roles) if m.shape[1] > 4 + i}
    kill_log, rec_s, fault_lat = [], [], None
    if faults is not None:
        kill_log, recs = faults["kills"], faults["recoveries"]
        f_t, f_lat = _latencies(faults["submits"], faults["arrivals"])
        fault_lat = _quantiles(f_lat)
        for k in kill_log:            # the recovery that ended first after the kill
            if "missed" in k:
                continue
            after = [r for r in recs if r["time"] >= k["time"]]
            if after:
                r = min(after, key=lambda r: r["time"])
                k["recovery_seconds"] = r["time"] - k["time"]
                k["replayed_calls"] = r["replayed_calls"]
                k["replayed_steps"] = r.get("replayed_steps")
                k["phases"] = r.get("phases")
                k["mode"] = r.get("mode", "full")          # partial: only the dead roles rebuilt
                k["restored"] = r.get("restored")
                k["adopted"] = r.get("adopted")             # a restart: the live roles kept as they were
                # where the time went before the recovery's own phases: the death noticed (a
                # call meeting it), or the restarted coordinator's process taking over
                start = r["started"] if "started" in r else r["time"] - r["seconds"]
                k["noticed_seconds"] = start - k["time"]
            # back to normal: the first call sent after the kill delivered within the target
            ok = np.flatnonzero((f_t >= k["time"]) & (f_lat <= TARGETS["p99_latency_seconds"]))
            if len(ok):
                k["caught_up_seconds"] = float(f_t[ok[0]] + f_lat[ok[0]] - k["time"])
        rec_s = [k["recovery_seconds"] for k in kill_log if "recovery_seconds" in k]
    lq = _quantiles(lat)
    out = {
        "workload": w.describe(), "window": args.window, "partitions": args.partitions,
        "shards": args.shards, "policy": args.policy, "batch": args.batch, "seconds": soak["elapsed"],
        "checkpoint_every": args.checkpoint_every, "delivery_interval": args.delivery_interval,
        "listen_updates": args.listen_updates,
        "peak_rate": peak, "probe_seconds": args.probe, "probes": list(probes),
        "sustainable_rate": sustainable, "target_rate": rate, "achieved_rate": soak["sent"] / soak["elapsed"],
        "latency_seconds": lq, "latency_by_10_seconds": _by_10_seconds(sub_t, lat),
        "listener_gaps": len(soak.get("listener_gaps", ())),
        "memory_mib": {"cluster_first_quarter": first, "cluster_last_quarter": last,
                       "drift": drift,
                       "private_first_quarter": own_first, "private_last_quarter": own_last,
                       "private_drift": own_drift, "private_by_role": role_quarters,
                       "cluster_max": float(m[:, 1].max()), "driver_max": float(m[:, 2].max())},
        "checkpoints_at_soak_end": soak["checkpoints"],   # last_stall: what the stream waited for
        "pauses_at_soak_end": soak.get("pauses"),
        "kills": kill_log, "recovery_seconds": rec_s, "latency_during_kills_seconds": fault_lat,
        "targets": TARGETS,
        "met": {"recovery": bool(rec_s) and len(rec_s) == len(kill_log)
                            and max(rec_s) <= TARGETS["recovery_seconds"],
                "memory": abs(drift) <= TARGETS["memory_drift"],
                "latency": lq["p99"] <= TARGETS["p99_latency_seconds"]},
    }
    _plot(out, m, (sub_t, lat), faults, Path(args.out) / "soak.png")
    return out


def _plot(out, m, soak_lat, faults, path: Path) -> None:
    plt = pyplot("rankcast bench soak")

    rows = 3 if faults is not None else 2
    fig, axes = plt.subplots(rows, 1, figsize=(10, 3.2 * rows))
    a1, a2 = axes[0], axes[1]
    a1.plot(m[:, 0], m[:, 1], label="cluster processes")
    a1.plot(m[:, 0], m[:, 3], label="cluster processes, private (no shared pages)")
    a1.plot(m[:, 0], m[:, 2], label="driver")
    for i, r in enumerate(out["memory_mib"]["private_by_role"]):
        a1.plot(m[:, 0], m[:, 4 + i], lw=0.8, ls="--", label=f"{r}, private")
    a1.set_ylabel("resident memory (MiB)")
    a1.set_xlabel("seconds into the soak")
    a1.set_title(f"rankcast soak: {out['workload']['subscriptions']:,} subscriptions, window {out['window']:,}, "
                 f"{out['achieved_rate']:.0f} msg/s ({out['target_rate'] / out['sustainable_rate']:.0%} of "
                 f"{out['sustainable_rate']:.0f} sustainable), {out['batch']} per call")
    a1.legend(loc="lower right", fontsize=7)

    def lat_panel(ax, t, lat, title):
        t0 = t[0] if len(t) else 0.0
        ax.plot(t - t0, lat, ".", ms=2)
        ax.axhline(out["targets"]["p99_latency_seconds"], color="r", lw=0.8, ls="--", label="p99 target")
        ax.set_yscale("log")
        ax.set_ylabel("update latency (s)")
        ax.set_title(title, fontsize=9)
        ax.legend(loc="upper right")
        return t0

    lq = out["latency_seconds"]
    lat_panel(a2, *soak_lat, f"soak: p50 {lq['p50']:.2f} s, p99 {lq['p99']:.2f} s")
    a2.set_xlabel("seconds into the soak")
    if faults is not None:
        a3 = axes[2]
        f_t, f_lat = _latencies(faults["submits"], faults["arrivals"])
        t0 = lat_panel(a3, f_t, f_lat, "kill phase: one role process SIGKILLed at each dotted line")
        a3.set_xlabel("seconds into the kill phase")
        for k in out["kills"]:
            a3.axvline(k["time"] - t0, color="k", lw=0.8, ls=":")
            a3.annotate(f"{k['role']}\n{k.get('recovery_seconds', float('nan')):.1f} s", (k["time"] - t0, 0.95),
                        xycoords=("data", "axes fraction"), fontsize=7, va="top")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path, dpi=120)
    plt.close(fig)


def main(args) -> int:
    import json

    out = run_soak(args, write=lambda report: write_json(report, Path(args.out) / "soak.json"))
    print(json.dumps({k: out[k] for k in ("achieved_rate", "peak_rate", "sustainable_rate", "latency_seconds", "memory_mib",
                                          "recovery_seconds", "latency_during_kills_seconds", "met")}, indent=2))
    return 0

"""Per-role measurements (paper 8.2), kept as plain counters for ``stats()`` and exported
through ``ray.util.metrics`` so that they show in the Ray dashboard / Prometheus.

``busy_seconds`` is the time a role spent working (its own method time minus the time it
sat waiting for peers), ``cpu_seconds`` the CPU time of that work (insensitive to other
processes on the machine); the benchmark turns them into projected throughput for N cores.
"""
from __future__ import annotations

import gc
import threading
import time
from contextlib import contextmanager

__all__ = ["RoleMetrics", "add_nested", "gc_pauses", "settle_heap"]

# In-process runs call peers directly: the time of a nested call belongs to the callee, so
# each busy block keeps the (wall, cpu) time spent in the direct calls it made (a stack per
# thread: a role may run part of a step on a second thread, rankcast.kinds.spatial.igpt.SideThread).
_LOCAL = threading.local()


def _nested() -> list[list[float]]:
    stack = getattr(_LOCAL, "nested", None)
    if stack is None:
        stack = _LOCAL.nested = []
    return stack


def add_nested(seconds: float, cpu_seconds: float) -> None:
    """Charge a direct in-process call to the caller's open busy block."""
    stack = _nested()
    if stack:
        stack[-1][0] += seconds
        stack[-1][1] += cpu_seconds

# The garbage collector's pauses in this process (all its threads stop while it runs): a
# role that holds millions of Python objects pauses for its full collections, which shows
# as latency of the whole stream. Summed from a ``gc.callbacks`` hook, installed once.
_GC = {"collections": 0, "seconds": 0.0, "max_pause": 0.0, "full": 0, "full_seconds": 0.0, "long": 0}
_gc_started: list[float] = []
GC_LONG = 0.01                 # a pause at least this long is kept with its time
GC_LONG_KEPT = 256
# (wall time, seconds, generation) of the latest long pauses, a ring written by the callback:
# a collection can run while a reader copies it (any allocation may start one), so the
# callback only assigns a slot of a list that never changes its size
_gc_long: list = [None] * GC_LONG_KEPT


def _gc_callback(phase: str, info: dict) -> None:
    if phase == "start":
        _gc_started[:] = [time.perf_counter()]
    elif _gc_started:
        pause = time.perf_counter() - _gc_started.pop()
        _GC["collections"] += 1
        _GC["seconds"] += pause
        _GC["max_pause"] = max(_GC["max_pause"], pause)
        if info.get("generation") == 2:
            _GC["full"] += 1
            _GC["full_seconds"] += pause
        if pause >= GC_LONG:
            _gc_long[_GC["long"] % GC_LONG_KEPT] = (time.time(), pause, info.get("generation"))
            _GC["long"] += 1


def _watch_gc() -> None:
    if _gc_callback not in gc.callbacks:
        gc.callbacks.append(_gc_callback)


def gc_pauses() -> dict:
    """This process's garbage-collector pauses since its first :class:`RoleMetrics` (or this
    call): collections, seconds, the longest pause, full (generation 2) collections and
    their seconds, and the latest pauses of at least :data:`GC_LONG` seconds as
    ``[wall time, seconds, generation]``."""
    _watch_gc()
    return {"gc_collections": _GC["collections"], "gc_seconds": _GC["seconds"],
            "gc_max_pause_seconds": _GC["max_pause"], "gc_full_collections": _GC["full"],
            "gc_full_seconds": _GC["full_seconds"], "gc_long_pauses": _long_pauses()}


def _long_pauses() -> list[list]:
    """The kept long pauses, oldest first."""
    ring = _gc_long[:]             # one copy of a fixed-size list: safe under a collection
    n = _GC["long"]
    order = ring[n % GC_LONG_KEPT:] + ring[:n % GC_LONG_KEPT] if n >= GC_LONG_KEPT else ring[:n]
    return [list(p) for p in order if p is not None]


_settled: list[bool] = []


def settle_heap() -> None:
    """Once per role process (a Ray actor): move every object alive now (modules, compiled
    kernels' metadata, the vocabulary, a restored state) out of the collector's sight
    (``gc.freeze``). Its full collections then visit only what was made since: a partition
    holding a vocabulary of 600k terms otherwise paused for 0.1-0.5 s at each of them, about
    five a minute under a stream. Called when the role has warmed up, restored or taken its
    first snapshot (its kernels are loaded by then); later calls, and calls in a process
    that is not a role's own (a role run in the caller's process), do nothing.

    Once only: an object frozen here is freed by its reference count as usual, but a cycle
    of frozen objects that becomes garbage later is never collected, so freezing again and
    again could leak."""
    if _settled:
        return
    try:
        import ray
        if not ray.is_initialized() or ray.get_runtime_context().get_actor_id() is None:
            return
    except Exception:      # noqa: BLE001 - no Ray here: not a role's own process
        return
    _settled.append(True)
    gc.collect()
    gc.freeze()


_DEFS = {
    # name: (kind, description)
    "messages": ("counter", "messages handled"),
    "tuples_out": ("counter", "message tuples sent to subscription partitions (by distributors, or by the coordinator for a broadcasting policy)"),
    "reevaluations": ("counter", "top-k re-evaluations applied"),
    "reallocations": ("counter", "prefix reallocation requests"),
    "searches": ("counter", "re-evaluation questions answered by a window shard"),
    "updates": ("counter", "subscription top-k lists changed"),
    "rebuilds": ("counter", "restores that rebuilt a partition's buffers from its subscriptions"),
    "halves_steps": ("counter", "steps of the only partition's two subscription halves (HalvesCore)"),
    "halves_threaded_steps": ("counter", "of those, steps whose halves ran on two threads"),
    "side_steps": ("counter", "steps with messages of a partition holding the window, not in halves"),
    "side_threaded_steps": ("counter", "of those, steps whose match ran on two threads (SideThread)"),
    "busy_seconds": ("counter", "seconds spent working"),
    "snapshots": ("counter", "snapshots started"),
    "snapshot_seconds": ("counter", "seconds the role's own thread spent on its snapshots (the copy of its state; the rest is written in the background)"),
    "cpu_seconds": ("counter", "CPU seconds of this role's thread while working"),
    "queue_depth": ("gauge", "steps dispatched and not yet finished"),
    "subscriptions": ("gauge", "subscriptions (replicas) held"),
    "window": ("gauge", "messages held"),
    "step_seconds": ("histogram", "time to handle one step"),
}
_BOUNDARIES = [1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0]


class RoleMetrics:
    """Counters of one role instance; mirrored to ray.util.metrics when running in Ray."""

    def __init__(self, role: str, index: int, cluster: str, export: bool = True):
        self.role = role
        self.index = index
        self.values: dict[str, float] = {k: 0.0 for k in _DEFS}
        self.max_queue_depth = 0.0
        self._waiting = 0.0
        self._ray = {}
        self._tags = {"role": role, "actor": f"{role}-{index}", "cluster": cluster}
        _watch_gc()
        if export:
            self._ray = _make_ray_metrics()

    def inc(self, name: str, v: float = 1.0) -> None:
        if v:
            self.values[name] += v
            m = self._ray.get(name)
            if m is not None:
                m.inc(v, tags=self._tags)

    def set(self, name: str, v: float) -> None:
        self.values[name] = v
        if name == "queue_depth":
            self.max_queue_depth = max(self.max_queue_depth, v)
        m = self._ray.get(name)
        if m is not None:
            m.set(v, tags=self._tags)

    def observe(self, name: str, v: float) -> None:
        m = self._ray.get(name)
        if m is not None:
            m.observe(v, tags=self._tags)

    @contextmanager
    def busy(self, step_histogram: bool = False):
        """Time a method; time spent in :meth:`waiting` blocks is not counted as busy."""
        t0 = time.perf_counter()
        c0 = time.thread_time()
        w0 = self._waiting
        stack = _nested()
        stack.append([0.0, 0.0])
        try:
            yield
        finally:
            nested, nested_cpu = stack.pop()
            total = time.perf_counter() - t0
            self.inc("busy_seconds", max(0.0, total - (self._waiting - w0) - nested))
            self.inc("cpu_seconds", max(0.0, time.thread_time() - c0 - nested_cpu))
            if step_histogram:
                self.observe("step_seconds", total)

    @contextmanager
    def waiting(self):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._waiting += time.perf_counter() - t0

    def snapshot(self) -> dict:
        out = {k: (float(v) if k.endswith("seconds") else int(v)) for k, v in self.values.items()}
        out["max_queue_depth"] = int(self.max_queue_depth)
        out["waiting_seconds"] = self._waiting
        out["exported"] = sorted(f"rankcast_{k}" for k in self._ray)
        out.update(gc_pauses())               # the process's, shared by the roles it runs
        return out


_METRICS: dict | None = None


def _make_ray_metrics() -> dict:
    """One metric object per name per process (Ray aggregates by tags)."""
    global _METRICS
    if _METRICS is not None:
        return _METRICS
    try:
        import ray
        from ray.util import metrics as rm
        if not ray.is_initialized():
            return {}
    except ImportError:  # pragma: no cover - ray is a dependency
        return {}
    tag_keys = ("role", "actor", "cluster")
    out = {}
    for name, (kind, desc) in _DEFS.items():
        full = f"rankcast_{name}"
        if kind == "counter":
            out[name] = rm.Counter(full, description=desc, tag_keys=tag_keys)
        elif kind == "gauge":
            out[name] = rm.Gauge(full, description=desc, tag_keys=tag_keys)
        else:
            out[name] = rm.Histogram(full, description=desc, boundaries=_BOUNDARIES, tag_keys=tag_keys)
    _METRICS = out
    return out

"""Per-role measurements (paper 8.2), kept as plain counters for ``stats()`` and exported
through ``ray.util.metrics`` so that they show in the Ray dashboard / Prometheus.

``busy_seconds`` is the time a role spent working (its own method time minus the time it
sat waiting for peers), ``cpu_seconds`` the CPU time of that work (insensitive to other
processes on the machine); the benchmark turns them into projected throughput for N cores.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager

__all__ = ["RoleMetrics", "add_nested"]

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

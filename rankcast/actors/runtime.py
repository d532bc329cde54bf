"""How roles talk: Ray actors, or the same role objects called in-process.

Every role calls its peers as ``handle.method.remote(...)`` and waits with
``runtime.get(...)``. Under Ray the handles are actor handles. The in-process runtime runs
the very same role classes with a direct call per ``.remote`` (no queues, no threads): the
benchmark uses it to time each role's own work without Ray in the way, and it is what
``ClusterConfig(options={"runtime": "inproc"})`` selects.
"""
from __future__ import annotations

import time
from typing import Any

from .metrics import add_nested

__all__ = ["Runtime", "RayRuntime", "InprocRuntime", "LocalRef", "LocalHandle"]


class LocalRef:
    """A finished in-process call: the stand-in of an ObjectRef."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def _resolve(a):
    return a.value if isinstance(a, LocalRef) else a


class _LocalMethod:
    def __init__(self, obj, name, num_returns=1):
        self._fn = getattr(obj, name)
        self._n = num_returns

    def options(self, num_returns: int = 1, **_):
        m = _LocalMethod.__new__(_LocalMethod)
        m._fn, m._n = self._fn, num_returns
        return m

    def remote(self, *args, **kw):
        t0, c0 = time.perf_counter(), time.thread_time()
        out = self._fn(*[_resolve(a) for a in args], **{k: _resolve(v) for k, v in kw.items()})
        add_nested(time.perf_counter() - t0, time.thread_time() - c0)
        if self._n == 1:
            return LocalRef(out)
        return [LocalRef(v) for v in out]


class LocalHandle:
    """``handle.method.remote(...)`` calls ``obj.method(...)`` at once."""

    def __init__(self, obj):
        self._obj = obj

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return _LocalMethod(self._obj, name)

    @property
    def local(self):
        return self._obj


class Runtime:
    inproc = False

    def share(self, obj):
        """``obj`` in the form to pass to several role calls."""
        raise NotImplementedError

    def get(self, refs):
        raise NotImplementedError

    def wait(self, refs: list, num_returns: int = 1, timeout: float | None = None):
        raise NotImplementedError

    def create(self, cls, *args, name: str | None = None, namespace: str | None = None,
               num_cpus: float = 0.25, detached: bool = False, **kw):
        raise NotImplementedError


class InprocRuntime(Runtime):
    inproc = True

    def share(self, obj):
        return obj

    def get(self, refs):
        if isinstance(refs, list):
            return [_resolve(r) for r in refs]
        return _resolve(refs)

    def wait(self, refs, num_returns=1, timeout=None):
        return list(refs), []

    def create(self, cls, *args, name=None, namespace=None, num_cpus=0.25, detached=False, **kw):
        return LocalHandle(cls(*args, **kw))


class RayRuntime(Runtime):
    def share(self, obj):
        """One copy in the object store for the calls that pass ``obj`` (a config with its
        vocabulary goes to every role once, not once per call)."""
        import ray
        return ray.put(obj)

    def get(self, refs):
        import ray
        return ray.get(refs)

    def wait(self, refs, num_returns=1, timeout=None):
        import ray
        return ray.wait(list(refs), num_returns=min(num_returns, len(refs)), timeout=timeout)

    def create(self, cls, *args, name=None, namespace=None, num_cpus=0.25, detached=False,
               max_concurrency: int | None = None, **kw):
        import ray
        opts: dict[str, Any] = {"num_cpus": num_cpus}
        if name is not None:
            opts["name"] = name
            opts["namespace"] = namespace
            opts["get_if_exists"] = False
        if detached:
            opts["lifetime"] = "detached"
        if max_concurrency is not None:
            opts["max_concurrency"] = max_concurrency
        return ray.remote(cls).options(**opts).remote(*args, **kw)

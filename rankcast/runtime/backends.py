"""How roles talk: Ray actors, or the same role objects called in-process.

Every role calls its peers as ``handle.method.remote(...)`` and waits with
``runtime.get(...)``. Under Ray the handles are actor handles. The in-process runtime runs
the very same role classes with a direct call per ``.remote`` (no queues, no threads): the
benchmark uses it to time each role's own work without Ray in the way, and it is what
``ClusterConfig(options={"runtime": "inproc"})`` selects.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import inspect
import os
import time
from typing import Any

import numpy as np

from rankcast.config import RAY_INLINE_BYTES, RAY_INLINE_VAR
from .metrics import add_nested

__all__ = ["Runtime", "RayRuntime", "InprocRuntime", "LocalRef", "LocalHandle", "writable", "writable_class"]


def writable(obj, depth: int = 0):
    """``obj`` with its read-only numpy arrays replaced by writable copies, in rankcast's
    own objects (batches, candidate lists, configs) and in tuples, lists and dicts, a few
    levels deep. Ray hands out arrays of its object store read-only, and numba compiles a
    kernel anew for every read-only argument: every actor process would compile each of
    its kernels once more, minutes on a cold cache. Copies cost microseconds per batch."""
    if isinstance(obj, np.ndarray):
        return obj if obj.flags.writeable else obj.copy()
    if depth >= 4 or obj is None or isinstance(obj, (str, bytes, int, float, bool)):
        return obj
    if type(obj) in (tuple, list) and len(obj) > 256:
        return obj          # items of the model (Python values), a vocabulary's terms: no arrays
    if type(obj) is tuple:
        return tuple(writable(v, depth + 1) for v in obj)
    if type(obj) is list:
        return [writable(v, depth + 1) for v in obj]
    if type(obj) is dict:
        return {k: writable(v, depth + 1) for k, v in obj.items()}
    if type(obj).__module__.startswith("rankcast") and hasattr(obj, "__dict__"):
        for k, v in vars(obj).items():
            w = writable(v, depth + 1)
            if w is not v:
                object.__setattr__(obj, k, w)      # frozen configs too: this copy is ours
    return obj


# glibc malloc settings of role processes. Long-running roles allocate and free arrays of a
# few MB; under glibc's default the threshold above which it maps such an allocation on its
# own grows with the largest freed one (up to 32 MB), so most of them come from the heap
# arenas, whose free holes the process keeps: resident memory crept up in steps over a soak.
# ROLE_ENV maps every allocation of 1 MiB or more on its own and returns it at once; two
# arenas bound the per-thread heaps.
ROLE_ENV = {"MALLOC_MMAP_THRESHOLD_": str(1 << 20), "MALLOC_ARENA_MAX": "2"}
# The roles that allocate such arrays in every step of a stream (a subscription partition's
# candidates and updates, a window shard's answers: a role class's ``RAY_ENV``) pay for that
# at every step: an array mapped anew is faulted in and cleared page by page (numpy asks for
# huge pages on arrays of 4 MiB or more: a fault then clears 2 MiB). Under Ray that was about
# a tenth of a partition's CPU (with glibc's default, 28% of its samples were the kernel's
# clear_page). Under STEP_ROLE_ENV every allocation under 256 MiB comes from the heap and
# the heap is never trimmed on a free, so a step reuses the pages of the step before; what
# the heap keeps goes back to the system at :func:`trim_heap` once the process grew.
STEP_ROLE_ENV = {"MALLOC_MMAP_THRESHOLD_": str(256 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 40),
                 "MALLOC_ARENA_MAX": "2"}
# every role process sends arguments and results up to RAY_INLINE_BYTES inside its calls,
# whoever started Ray (rankcast.config.local_ray_options sets it for the Ray it starts)
INLINE_ENV = {RAY_INLINE_VAR: str(RAY_INLINE_BYTES)}
TRIM_CHECK_SECONDS = 1.0    # how often a role process looks at its resident memory
# private resident memory grown by TRIM_GROWTH, and at least TRIM_BYTES, since the last trim: trim
TRIM_GROWTH = 0.05
TRIM_BYTES = 64 << 20       # more than a step's own arrays: a small role does not trim every step


def _private_resident() -> int:
    """This process's resident bytes less its resident shared pages (Ray's object store)."""
    with open("/proc/self/statm") as f:
        _, resident, shared = f.read().split()[:3]
    return (int(resident) - int(shared)) * os.sysconf("SC_PAGE_SIZE")


class _HeapTrim:
    """``malloc_trim(0)`` (glibc) once this process's private resident memory grew by
    :data:`TRIM_GROWTH` (and :data:`TRIM_BYTES`) since it was last trimmed, or since it was
    smallest, looked at every :data:`TRIM_CHECK_SECONDS` at most. A steady stream, whose
    steps reuse the same pages, never trims (a trim costs the next steps a fault per page
    they touch again)."""

    def __init__(self):
        name = ctypes.util.find_library("c")
        self.trim = getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
        self.due = time.monotonic() + TRIM_CHECK_SECONDS
        self.floor: int | None = None
        self.count = 0

    def __call__(self) -> None:
        now = time.monotonic()
        if self.trim is None or now < self.due:
            return
        self.due = now + TRIM_CHECK_SECONDS
        rss = _private_resident()
        if self.floor is None or rss < self.floor:
            self.floor = rss
        elif rss > self.floor + max(TRIM_GROWTH * self.floor, TRIM_BYTES):
            self.trim(0)
            self.count += 1
            self.floor = _private_resident()


_heap_trim: _HeapTrim | None = None     # this process's, made at the first call


def trim_heap() -> None:
    """Give the heap's free pages back to the system when due (see :class:`_HeapTrim` and
    :data:`STEP_ROLE_ENV`). A module function, so that the role classes Ray pickles refer to it
    by name (a ctypes function does not pickle)."""
    global _heap_trim
    if _heap_trim is None:
        _heap_trim = _HeapTrim()
    _heap_trim()


def _writable_method(fn):
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def gen(self, *args, **kw):
            yield from fn(self, *writable(args), **writable(kw))
            trim_heap()
        return gen

    @functools.wraps(fn)
    def call(self, *args, **kw):
        try:
            return fn(self, *writable(args), **writable(kw))
        finally:
            trim_heap()
    return call


@functools.lru_cache(maxsize=None)
def writable_class(cls):
    """``cls`` whose ``__init__`` and public methods take their arguments through
    :func:`writable` and end with :func:`trim_heap`: the class Ray runs as an actor (same
    name, same behaviour). The methods a class lists in ``LOCAL_METHODS`` (a coordinator's
    Kind interface: :mod:`rankcast.runtime.kind`) are called by its own code only, and stay
    as they are."""
    ns = {"__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": cls.__doc__}
    local = getattr(cls, "LOCAL_METHODS", frozenset())
    for name in dir(cls):
        if (name.startswith("_") and name != "__init__") or name in local:
            continue
        fn = inspect.getattr_static(cls, name)
        if inspect.isfunction(fn):
            ns[name] = _writable_method(fn)
    return type(cls.__name__, (cls,), ns)


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

    def put(self, value):
        """A reference holding ``value``."""
        raise NotImplementedError

    def inline_bytes(self) -> int:
        """The largest argument a call from this process carries inside itself (0: none; a
        larger one goes through the object store, once per call that passes it)."""
        return 0

    def self_handle(self):
        """A handle on the actor this code runs in, to queue a call to itself behind the
        calls already waiting (None: not in an actor)."""
        return None

    def create(self, cls, *args, name: str | None = None, namespace: str | None = None,
               num_cpus: float = 0.25, detached: bool = False, actor_options: dict | None = None, **kw):
        """A role process of ``cls(*args, **kw)``; ``actor_options``: Ray's, such as where it
        runs (:mod:`rankcast.runtime.placement`)."""
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

    def put(self, value):
        return LocalRef(value)

    def create(self, cls, *args, name=None, namespace=None, num_cpus=0.25, detached=False, actor_options=None,
               **kw):
        return LocalHandle(cls(*args, **kw))




class RayRuntime(Runtime):
    _me = None          # this actor's own handle (self_handle), looked up once

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

    def put(self, value):
        import ray
        return ray.put(value)

    def inline_bytes(self) -> int:
        """Ray's ``max_direct_call_object_size`` in this process: what its environment sets
        (:data:`INLINE_ENV` in a role's), else Ray's default of 100 KiB."""
        try:
            return int(os.environ.get(RAY_INLINE_VAR, 100 * 1024))
        except ValueError:
            return 100 * 1024

    def self_handle(self):
        if self._me is None:
            import ray
            try:
                self._me = ray.get_runtime_context().current_actor
            except Exception:        # not in an actor (a driver): nothing to call
                self._me = False
        return self._me or None

    def create(self, cls, *args, name=None, namespace=None, num_cpus=0.25, detached=False,
               max_concurrency: int | None = None, actor_options: dict | None = None, **kw):
        import ray
        env = getattr(cls, "RAY_ENV", ROLE_ENV)
        opts: dict[str, Any] = {"num_cpus": num_cpus, "runtime_env": {"env_vars": {**INLINE_ENV, **env}}}
        opts.update(actor_options or {})      # where it runs (rankcast.runtime.placement)
        if name is not None:
            opts["name"] = name
            opts["namespace"] = namespace
            opts["get_if_exists"] = False
        if detached:
            opts["lifetime"] = "detached"
        if max_concurrency is not None:
            opts["max_concurrency"] = max_concurrency
        # a role's own class options (a shard's concurrency groups: set here, not in options())
        actor = ray.remote(**cls.RAY_OPTIONS)(writable_class(cls)) if getattr(cls, "RAY_OPTIONS", None) \
            else ray.remote(writable_class(cls))
        return actor.options(**opts).remote(*args, **kw)

"""Recovery in the role protocol: durable state, a write-ahead log, and what counts as a death.

A cluster's durable state lives under ``<state_dir>/<name>/`` (``ClusterConfig.state_dir``:
a local path, or a URI that ``pyarrow.fs`` opens, such as ``file:///mnt/shared/rankcast`` or
``hdfs://namenode/rankcast``, for a filesystem every node sees)::

    MANIFEST          the live checkpoint's epoch (replaced atomically, last step of a checkpoint)
    ckpt-<e>/         one snapshot per role, taken at one quiesced stream position
    log-<e>           every call accepted since checkpoint e, appended before it is applied

Every role has ``snapshot(store, path)`` (writes the state it resumes from) and takes
``resume=(store, path)`` when built; the coordinator snapshots itself last. A role that dies
is rebuilt, with every other role, from the checkpoint, and the coordinator replays the log:
each call again, with the same delivery cuts, so results, deliveries and the per-client
results of retried calls come out as they were.
"""
from __future__ import annotations

import io
import os
import pickle
import struct

__all__ = ["StateStore", "Recoverable", "is_role_death", "shared_config", "LOG_HEADER"]

LOG_HEADER = struct.Struct("<Q")      # byte length of the pickled record that follows


class StateStore:
    """Files of one cluster's durable state, on a local path or a ``pyarrow.fs`` URI."""

    def __init__(self, root: str, name: str):
        from pyarrow import fs

        root = os.path.expanduser(str(root))
        if "://" in root:
            self.fs, base = fs.FileSystem.from_uri(root)
        else:
            self.fs, base = fs.LocalFileSystem(), os.path.abspath(root)
        self.uri = root
        self.name = name
        self.root = f"{base.rstrip('/')}/{name}"
        self.fs.create_dir(self.root, recursive=True)
        self._log = None
        self.fsync = False

    def __getstate__(self):
        return {"uri": self.uri, "name": self.name, "fsync": self.fsync}

    def __setstate__(self, st):
        self.__init__(st["uri"], st["name"])
        self.fsync = st["fsync"]

    def path(self, rel: str) -> str:
        return f"{self.root}/{rel}"

    # ------------------------------------------------------------------ whole files
    def write(self, rel: str, obj, shared: dict | None = None) -> None:
        """Pickle ``obj`` to ``rel`` atomically (a temporary file, then a rename), lz4
        compressed (snapshots are mostly preallocated arrays: about a fifth of the bytes).
        Objects in ``shared`` (name -> object, by identity) are written as their name and
        come back from the reader's own ``shared``: a role's config and vocabulary are not
        copied into every snapshot."""
        by_id = {id(v): k for k, v in (shared or {}).items() if v is not None}
        buf = io.BytesIO()
        p = pickle.Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
        p.persistent_id = lambda o: by_id.get(id(o))
        p.dump(obj)
        parent = self.path(rel).rsplit("/", 1)[0]
        self.fs.create_dir(parent, recursive=True)
        tmp = self.path(rel + ".tmp")
        with self.fs.open_output_stream(tmp, compression="lz4") as f:
            f.write(buf.getbuffer())
        self.fs.move(tmp, self.path(rel))

    def read(self, rel: str, shared: dict | None = None):
        with self.fs.open_input_stream(self.path(rel), compression="lz4") as f:
            u = pickle.Unpickler(io.BytesIO(f.read()))
        u.persistent_load = (shared or {}).__getitem__
        return u.load()

    def exists(self, rel: str) -> bool:
        from pyarrow import fs
        return self.fs.get_file_info(self.path(rel)).type != fs.FileType.NotFound

    def list(self) -> list[str]:
        """Names directly under the cluster's root."""
        from pyarrow import fs
        return [i.base_name for i in self.fs.get_file_info(fs.FileSelector(self.root, allow_not_found=True))]

    def remove(self, rel: str) -> None:
        from pyarrow import fs
        info = self.fs.get_file_info(self.path(rel))
        if info.type == fs.FileType.Directory:
            self.fs.delete_dir(self.path(rel))
        elif info.type == fs.FileType.File:
            self.fs.delete_file(self.path(rel))

    def destroy(self) -> None:
        """Remove the cluster's whole state."""
        self.close_log()
        self.remove("")

    # ------------------------------------------------------------------ the log
    def open_log(self, rel: str) -> None:
        """Append from now on to ``rel`` (a new, empty log)."""
        self.close_log()
        self._log = self.fs.open_output_stream(self.path(rel))

    def append(self, record) -> None:
        """One record, written through to the OS (to the disk too with ``fsync``) before the
        call goes on: the write-ahead of a call."""
        data = pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
        self._log.write(LOG_HEADER.pack(len(data)) + data)
        self._log.flush()
        if self.fsync:
            fd = getattr(self._log, "fileno", None)
            if fd is not None:
                os.fsync(fd())

    def close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def read_log(self, rel: str) -> list:
        """The complete records of ``rel`` in order (a record torn by a crash is dropped:
        its call never returned)."""
        if not self.exists(rel):
            return []
        with self.fs.open_input_stream(self.path(rel)) as f:
            buf = io.BytesIO(f.read())
        out = []
        while True:
            head = buf.read(LOG_HEADER.size)
            if len(head) < LOG_HEADER.size:
                break
            (n,) = LOG_HEADER.unpack(head)
            data = buf.read(n)
            if len(data) < n:
                break
            out.append(pickle.loads(data))
        return out


def is_role_death(exc: BaseException) -> bool:
    """True when ``exc`` (or what it wraps) says an actor or an object it owned is gone:
    the cue for recovery. Errors of the roles' own code are not deaths."""
    try:
        from ray import exceptions as rex
    except ImportError:  # pragma: no cover - ray is a dependency
        return False
    deaths = tuple(c for c in (getattr(rex, n, None) for n in (
        "RayActorError", "ActorDiedError", "ActorUnavailableError", "ObjectLostError",
        "OwnerDiedError", "ObjectReconstructionFailedError", "WorkerCrashedError",
        "NodeDiedError", "LocalRayletDiedError")) if c is not None)
    if getattr(exc, "actor_init_failed", False):
        return False            # an actor whose __init__ raised: an error, not a death
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, deaths):
            return True
        exc = getattr(exc, "cause", None) or exc.__cause__
        seen += 1
    return False


def shared_config(cfg) -> dict:
    """The objects snapshots refer to by name: the engine config and its vocabulary (a kind
    without one: the config)."""
    if cfg is None:
        return {}
    return {"cfg": cfg, "vocabulary": getattr(cfg, "vocabulary", None)}


class Recoverable:
    """The role side of the protocol. A role lists in ``_STATE`` the attributes it resumes
    from (or overrides :meth:`_state` / :meth:`_restore` for what does not pickle as is);
    ``snapshot`` writes them, and a role built with ``resume=(store, path)`` calls
    :meth:`_resume` at the end of its ``__init__``."""

    _STATE: tuple[str, ...] = ()

    def _state(self) -> dict:
        return {k: getattr(self, k) for k in self._STATE}

    def _restore(self, state: dict) -> None:
        for k, v in state.items():
            setattr(self, k, v)

    def _shared(self) -> dict:
        """What a snapshot refers to instead of copying (the role has it from its arguments)."""
        return shared_config(getattr(self, "cfg", None))

    def snapshot(self, store: StateStore, rel: str) -> str:
        """Write the state to resume from at this (quiesced) position; returns ``rel``."""
        store.write(rel, {"state": self._state(), "metrics": dict(self.metrics.values)}, self._shared())
        return rel

    def _resume(self, resume) -> None:
        if resume is None:
            return
        store, rel = resume
        snap = store.read(rel, self._shared())
        self._restore(snap["state"])
        self.metrics.values.update(snap["metrics"])

    def reinit(self, *args, **kw) -> int:
        """Become a new role of the same class in this process (recovery reuses the live
        processes: they have every module and compiled kernel loaded); returns the pid."""
        self.__init__(*args, **kw)
        return os.getpid()

    def pid(self) -> int:
        """The process id of this role (fault-injection tests kill it)."""
        return os.getpid()

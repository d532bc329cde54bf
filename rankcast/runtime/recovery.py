"""Recovery in the role protocol: durable state, a write-ahead log, and what counts as a death.

A cluster's durable state lives under ``<state_dir>/<name>/`` (``ClusterConfig.state_dir``:
a local path, or a URI that ``pyarrow.fs`` opens, such as ``file:///mnt/shared/rankcast`` or
``hdfs://namenode/rankcast``, for a filesystem every node sees)::

    CONFIG            the cluster's ClusterConfig (written once; a restart must match it)
    MANIFEST          the live checkpoint's epoch and the state format (replaced atomically,
                      last step of a checkpoint)
    ckpt-<e>/         one snapshot per role, taken at one quiesced stream position
    log-<e>           every call accepted since snapshot e was taken, appended before it is
                      applied; the logs of the MANIFEST's epoch and after replay in order

Every role has ``snapshot(store, path)`` and takes ``resume=(store, path)`` when built; the
coordinator snapshots itself last. A snapshot is written by a forked child, which sees the
role's memory as it was at the fork (copy-on-write, as Redis' BGSAVE): a checkpoint stalls
the stream only for the quiesce and the forks, the next log starts at once, and the
MANIFEST moves to the new epoch when every write is done (without fork, or with
``RANKCAST_SNAPSHOT_FORK=0``: an in-memory copy that a thread writes). A checkpoint is a
delivery cut, so no role holds a change still to deliver at it; a role snapshots what it
cannot rebuild cheaply and rebuilds the rest on restore (a subscription partition in direct
mode: its subscriptions and each buffer cut at its k-th score, with its index built again;
a window shard: its messages, with their index built again). A role that dies is rebuilt from the
checkpoint in a warm standby process where there is one. A dead subscription partition or
window shard alone is caught up from the coordinator's journal of the steps since the
checkpoint while the live roles keep their state (partial recovery); any other death
rebuilds every role from the checkpoint (the live ones in their own processes) and the
coordinator replays the log: each call again, with the same delivery cuts, so results,
deliveries and the per-client results of retried calls come out as they were.

A durable cluster's role processes on Ray are named after it and detached: they outlive
its coordinator. A coordinator that Ray restarts takes them over (``Recoverable.adopt``:
from then on they refuse the dead one's calls still queued) and keeps as they are the roles
whose lineage (the checkpoint ids they snapshotted or were restored from, with their
progress then) holds the checkpoint it resumes from, where the kind allows it; the replay
sends those only what they lack. A detached role ends itself once its coordinator has been
gone for good for a minute (``Recoverable.own``).
"""
from __future__ import annotations

import contextlib
import io
import os
import pickle
import signal
import struct
import threading
import time

from .metrics import settle_heap

__all__ = ["StateStore", "Recoverable", "Writer", "ForkWriter", "write_snapshot", "write_snapshots",
           "fork_snapshots", "dumps", "PeerLost", "StaleCall", "is_role_death", "dead_actors", "shared_config", "LOG_HEADER",
           "STATE_FORMAT"]

LOG_HEADER = struct.Struct("<Q")      # byte length of the pickled record that follows
RAW_MAGIC = b"RCR1"      # the first bytes of a file of a pickle and its buffers (write_raw)
RAW_HEADER = struct.Struct("<QQ")     # the pickle's byte length, its buffers' count
SNAPSHOT_TIMEOUT = 600.0              # seconds a forked writer may take before it is killed


_PLAIN = (int, float, bytes, str, dict, set, frozenset, list, tuple)
_reading = threading.local()     # the ``shared`` objects of the snapshot being read here


def _shared_object(name: str):
    """A ``shared`` object of the snapshot being read (how :func:`dumps` refers to one)."""
    return _reading.shared[name]


class _SharedPickler(pickle.Pickler):
    """Refers to the ``shared`` objects by name. ``reducer_override`` is asked only about
    objects that are not plain ints, floats, strings, tuples, lists or dicts, so the large
    containers of a state (a coordinator's maps of 100k subscriptions and messages) pickle
    at C speed; a ``persistent_id`` was a Python call per object (85 ms for one such map
    against a few ms), which stalled a coordinator at every checkpoint."""

    def __init__(self, buf, by_id: dict, buffer_callback=None):
        super().__init__(buf, protocol=pickle.HIGHEST_PROTOCOL, buffer_callback=buffer_callback)
        self._by_id = by_id

    def reducer_override(self, obj):
        name = self._by_id.get(id(obj))
        return NotImplemented if name is None else (_shared_object, (name,))


def dumps(obj, shared: dict | None = None, buffer_callback=None):
    """``obj`` pickled in memory (``shared`` objects by name, see :meth:`StateStore.write`):
    the copy of a state at one position, which a thread then writes. ``buffer_callback``:
    the arrays' buffers are handed to it instead of being copied in (pickle protocol 5's
    out-of-band buffers, :meth:`StateStore.write_raw`)."""
    shared = {k: v for k, v in (shared or {}).items() if v is not None}
    by_id = {id(v): k for k, v in shared.items()}
    buf = io.BytesIO()
    if any(type(v) in _PLAIN for v in shared.values()):     # not seen by reducer_override
        p = pickle.Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL, buffer_callback=buffer_callback)
        p.persistent_id = lambda o: by_id.get(id(o))
    else:
        p = _SharedPickler(buf, by_id, buffer_callback)
    p.dump(obj)
    return buf.getbuffer()


def _load(u: pickle.Unpickler, shared: dict | None):
    """``u.load()`` with ``shared`` objects found by name (both ways :func:`dumps` names them)."""
    shared = shared or {}
    u.persistent_load = shared.__getitem__
    before = getattr(_reading, "shared", None)
    _reading.shared = shared
    try:
        return u.load()
    finally:
        _reading.shared = before


def _yield_cpu() -> None:
    """Lower the calling writer (a forked child, or a thread: Linux sets the priority of one
    thread) to nice 19: a snapshot's pickling and compression take the CPU the stream leaves
    idle instead of competing with the roles' steps (at nice 0, every checkpoint showed as a
    latency spike of the stream); it still progresses under a stream that keeps every core busy."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):         # no per-thread priority here: full speed
        pass


class Writer(threading.Thread):
    """Writes one snapshot's bytes in the background (lz4 and the file system release the
    GIL): the role goes on with the stream while its snapshot reaches the disk. ``pickled``
    False: the files are objects that no one changes any more, pickled by the thread too;
    ``raw`` (with ``pickled`` False): written by :meth:`StateStore.write_raw`, each file
    ``(rel, obj)`` or ``(rel, obj, shared)``; ``compress`` False: pickled bytes written as
    they are (:meth:`StateStore.write_bytes`)."""

    def __init__(self, store: "StateStore", files: list[tuple], pickled: bool = True,
                 raw: bool = False, compress: bool = True):
        self.rel = ", ".join(f[0] for f in files)
        super().__init__(daemon=True, name=f"rankcast-snapshot {self.rel}")
        self.store, self.files, self.pickled, self.error = store, files, pickled, None
        self.raw, self.compress = raw, compress
        self.start()

    def run(self):
        try:
            _yield_cpu()
            for rel, data, *shared in self.files:
                if self.raw:
                    self.store.write_raw(rel, data, *shared)
                else:
                    self.store.write_bytes(rel, data if self.pickled else dumps(data), self.compress)
        except BaseException as e:   # reported by done()
            self.error = e
        finally:
            self.files = None

    def done(self) -> str:
        """Wait for the write; raise what it raised; returns ``rel``."""
        self.join()
        if self.error is not None:
            raise RuntimeError(f"snapshot {self.rel}: {self.error}") from self.error
        return self.rel


def fork_snapshots() -> bool:
    """Whether snapshots of large states may be written by a forked child
    (``RANKCAST_SNAPSHOT_FORK=0`` turns it off: then every role copies its state in memory
    and a thread writes the copy)."""
    return hasattr(os, "fork") and os.environ.get("RANKCAST_SNAPSHOT_FORK", "1") != "0"


class ForkWriter:
    """Writes one snapshot from a forked child process, as Redis' BGSAVE does: the child
    sees the role's memory as it was at the fork (copy-on-write) and writes the state, while
    the role goes on with the stream. The role stalls for the fork (page tables:
    milliseconds) instead of an in-memory copy of its whole state. The child writes the
    state's arrays from the pages it shares with the role (:meth:`StateStore.write_raw`,
    compressed as they are written): its own memory is the pickle of the other objects and
    the pages the role writes meanwhile, not a second copy of a state of gigabytes.

    The child runs only pickling and the store's file writes, and leaves with ``os._exit``
    (no finalizer, no Ray or log stream of the parent is touched); it reports through a
    pipe: ``ok``, or the error's text."""

    def __init__(self, store: "StateStore", files: list[tuple], compress: bool = True):
        self.rel, self.error = ", ".join(f[0] for f in files), None
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:                                        # the child
            code, msg = 0, b"ok"
            try:
                os.close(r)
                _yield_cpu()
                for rel, make_obj, shared in files:     # no copy of the state: see write_raw
                    store.write_raw(rel, make_obj(), shared, compress)
            except BaseException as e:                      # reported to the parent
                code, msg = 1, f"{type(e).__name__}: {e}".encode()[:4000]
            try:
                os.write(w, msg)
            finally:
                os._exit(code)
        os.close(w)
        self.pid, self._fd, self._msg = pid, r, b""

    def is_alive(self) -> bool:
        if self._fd is None:
            return False
        import select
        ready, _, _ = select.select([self._fd], [], [], 0)
        if not ready:
            return True
        self._finish()
        return False

    def _finish(self) -> None:
        import select
        deadline = time.monotonic() + SNAPSHOT_TIMEOUT
        while self._fd is not None:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._fd], [], [], max(left, 0.0))
            if not ready:                           # wedged (a lock held at the fork?): ended
                os.kill(self.pid, signal.SIGKILL)
                self._msg = f"the writer process did not finish in {SNAPSHOT_TIMEOUT:g} s".encode()
                chunk = b""
            else:
                chunk = os.read(self._fd, 4096)
            if chunk:
                self._msg += chunk
                continue
            os.close(self._fd)
            self._fd = None
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:               # reaped elsewhere (SIGCHLD ignored)
                pass
            if self._msg != b"ok":
                self.error = RuntimeError(self._msg.decode(errors="replace") or "the writer process died")

    def join(self) -> None:
        self._finish()

    def done(self) -> str:
        """Wait for the child; raise what it reported; returns ``rel``."""
        self._finish()
        if self.error is not None:
            raise RuntimeError(f"snapshot {self.rel}: {self.error}") from self.error
        return self.rel


def write_snapshot(store: "StateStore", rel: str, make_obj, shared: dict | None = None, fork: bool = True,
                   compress: bool = True, raw: bool = False):
    """Start writing ``make_obj()`` (the state at this moment) to ``rel``: with ``fork`` (and
    :func:`fork_snapshots`), by a forked child, else from an in-memory copy by a thread;
    lz4 compressed unless ``compress`` is False (:meth:`StateStore.write_bytes`).
    Returns the writer (``is_alive()``, ``join()``, ``done()``).

    Forking costs the process its page tables and then a copy-on-write fault for every page
    it writes while the child lives, whatever the state's size: measured in the soak (1 GiB
    role processes, a checkpoint every 5 s), each checkpoint cost the stream about half a
    second of capacity and showed as a latency spike, where in-memory copies of the same
    states (megabytes) did not. So a fork pays only for a state that is most of the process
    (a replicating partition's whole core).

    ``raw`` (not forked): ``make_obj()`` returns objects that nobody changes afterwards
    (fresh arrays), so the thread pickles them too, their arrays' bytes written from where
    they are (:meth:`StateStore.write_raw`): the role pays for the copy only, not for
    the pickling."""
    return write_snapshots(store, [(rel, make_obj, shared)], fork, compress, raw)


def write_snapshots(store: "StateStore", files: list[tuple], fork: bool = True, compress: bool = True,
                    raw: bool = False):
    """:func:`write_snapshot` of several files ``(rel, make_obj, shared)`` by one writer."""
    if fork and fork_snapshots():
        return ForkWriter(store, files, compress)
    if raw:
        return Writer(store, [(rel, make_obj(), shared) for rel, make_obj, shared in files], pickled=False, raw=True)
    return Writer(store, [(rel, dumps(make_obj(), shared)) for rel, make_obj, shared in files], compress=compress)


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
        self.write_bytes(rel, dumps(obj, shared))

    def write_raw(self, rel: str, obj, shared: dict | None = None, compress: bool = False) -> None:
        """``obj`` to ``rel``, atomically, its arrays' bytes written from where they are
        (pickle protocol 5 out-of-band buffers) instead of being copied into a pickle
        first: the file is the header, the pickle, then each buffer. ``compress``: the same
        bytes through lz4 as they are written (:meth:`read` reads either), so that a state
        of gigabytes is never copied whole in memory to be compressed (a forked writer's:
        its copy would be private pages of the child). ``shared``: as in :meth:`write`."""
        bufs: list = []
        data = dumps(obj, shared, bufs.append)
        raws = [b.raw() for b in bufs]
        sizes = struct.pack(f"<{len(raws)}Q", *(r.nbytes for r in raws))
        self._write_atomic(rel, [RAW_MAGIC + RAW_HEADER.pack(len(data), len(raws)) + sizes, data, *raws],
                           compression="lz4" if compress else None)

    def write_bytes(self, rel: str, data, compress: bool = True) -> None:
        """``data`` (from :func:`dumps`) to ``rel``, atomically; lz4 compressed, or as they
        are (``compress`` False: a state of dense arrays, which lz4 shrinks little for about
        8x the CPU of writing it, read back as a file of :meth:`write_raw` without buffers)."""
        if compress:
            self._write_atomic(rel, [data], compression="lz4")
        else:
            self._write_atomic(rel, [RAW_MAGIC + RAW_HEADER.pack(len(data), 0), data])

    def _write_atomic(self, rel: str, parts, compression: str | None = None) -> None:
        """``parts`` one after the other to a temporary file, then moved to ``rel``."""
        parent = self.path(rel).rsplit("/", 1)[0]
        self.fs.create_dir(parent, recursive=True)
        tmp = self.path(rel + ".tmp")
        with self.fs.open_output_stream(tmp, compression=compression) as f:
            for part in parts:
                f.write(part)
        self.fs.move(tmp, self.path(rel))

    def read(self, rel: str, shared: dict | None = None):
        with self.fs.open_input_stream(self.path(rel)) as f:
            data = f.read()                 # one open: the first bytes tell the kind
        if data[:len(RAW_MAGIC)] == RAW_MAGIC:              # an lz4 frame starts otherwise
            return self._parse_raw(data, shared)
        import pyarrow as pa
        with pa.input_stream(pa.py_buffer(data), compression="lz4") as f:
            head = f.read(len(RAW_MAGIC) + RAW_HEADER.size)
            if head[:len(RAW_MAGIC)] != RAW_MAGIC:          # a pickle (write)
                return _load(pickle.Unpickler(io.BytesIO(head + f.read())), shared)
            # write_raw, compressed: decompressed once, into the buffer its arrays view
            n_pickle, n_bufs = RAW_HEADER.unpack(head[len(RAW_MAGIC):])
            sizes = f.read(8 * n_bufs)
            buf = bytearray(len(head) + len(sizes) + n_pickle + sum(struct.unpack(f"<{n_bufs}Q", sizes)))
            at = len(head) + len(sizes)
            buf[:at] = head + sizes
            view = memoryview(buf)
            while at < len(buf):
                got = f.readinto(view[at:])
                if not got:
                    raise EOFError(f"state file {rel}: {len(buf) - at} bytes missing")
                at += got
        return self._parse_raw(view, shared)

    def read_view(self, rel: str, shared: dict | None = None):
        """:meth:`read` of a file that nobody changes once written and whose reader only
        reads it (a delivery chunk): a file of :meth:`write_raw` on a local path is mapped,
        not read, and its arrays are read-only views of the mapping, so that only the pages
        of the arrays used are read (a listener asking for one delivery of a chunk of
        hundreds of megabytes). Other files and stores: :meth:`read`."""
        from pyarrow import fs

        if isinstance(self.fs, fs.LocalFileSystem):
            import mmap
            with open(self.path(rel), "rb") as f:
                if f.read(len(RAW_MAGIC)) == RAW_MAGIC:
                    return self._parse_raw(memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)), shared)
        return self.read(rel, shared)

    @staticmethod
    def _parse_raw(raw, shared: dict | None = None):
        """What :meth:`write_raw` wrote; its arrays are views of one buffer: writable ones of
        a copy of ``raw`` (bytes), or of ``raw`` itself (a memoryview, as it is: writable over
        a bytearray, read-only over a read-only mapping). ``shared``: as in :meth:`read`."""
        data = raw if isinstance(raw, memoryview) else memoryview(bytearray(raw))
        at = len(RAW_MAGIC) + RAW_HEADER.size
        n_pickle, n_bufs = RAW_HEADER.unpack(data[len(RAW_MAGIC):at])
        sizes = struct.unpack(f"<{n_bufs}Q", data[at:at + 8 * n_bufs])
        at += 8 * n_bufs
        body, at = data[at:at + n_pickle], at + n_pickle
        bufs = []
        for n in sizes:
            bufs.append(data[at:at + n])
            at += n
        u = pickle.Unpickler(io.BytesIO(body), buffers=bufs)
        return _load(u, shared)

    def read_config(self):
        """The ClusterConfig the state belongs to."""
        return self.read("CONFIG")

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


MAX_LINEAGE = 4          # checkpoint ids a role remembers (the committed one and newer)
WATCH_SECONDS = 60.0      # a detached role outlives its coordinator's name this long


def _watch_coordinator(name: str, namespace: str) -> None:
    """A detached role's watch: end this process once the coordinator ``name`` has been
    gone (killed for good: its name is free) for :data:`WATCH_SECONDS`. A coordinator
    that Ray restarts keeps its name meanwhile."""
    import ray
    gone_since = None
    while True:
        time.sleep(WATCH_SECONDS / 4)
        try:
            ray.get_actor(name, namespace=namespace)
            gone_since = None
        except ValueError:
            gone_since = gone_since or time.monotonic()
            if time.monotonic() - gone_since >= WATCH_SECONDS:
                os._exit(0)
        except Exception:       # Ray itself shutting down: the process goes with it
            pass


class StaleCall(RuntimeError):
    """A call of a coordinator that no longer owns the role (see ``Recoverable.own``)."""


class PeerLost(RuntimeError):
    """A role could not finish a step because a role it called died; what it holds is
    consistent and it finishes the step when the coordinator replaces the dead one (a death
    for :func:`is_role_death`)."""


def is_role_death(exc: BaseException) -> bool:
    """True when ``exc`` (or what it wraps) says an actor or an object it owned is gone:
    the cue for recovery. Errors of the roles' own code are not deaths."""
    try:
        from ray import exceptions as rex
    except ImportError:  # pragma: no cover - ray is a dependency
        return False
    deaths = (PeerLost,) + tuple(c for c in (getattr(rex, n, None) for n in (
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


def dead_actors(exc: BaseException | None) -> set[str]:
    """The ids (hex) of the actors that ``exc`` (or what it wraps) says are gone: a role
    whose own call failed so needs no ping to be counted dead (a ping of a process lost
    with its node fails only after Ray's wait for news of its death, seconds)."""
    try:
        from ray.exceptions import RayActorError
    except ImportError:  # pragma: no cover - ray is a dependency
        return set()
    out, seen = set(), 0
    while exc is not None and seen < 8:
        if isinstance(exc, RayActorError) and not getattr(exc, "actor_init_failed", False):
            actor = getattr(exc, "actor_id", None)
            if actor:
                out.add(actor if isinstance(actor, str) else actor.hex())
        exc = getattr(exc, "cause", None) or exc.__cause__
        seen += 1
    return out


def shared_config(cfg) -> dict:
    """The objects snapshots refer to by name: the engine config and its vocabulary (a kind
    without one: the config)."""
    if cfg is None:
        return {}
    return {"cfg": cfg, "vocabulary": getattr(cfg, "vocabulary", None)}


# The layout of the roles' snapshots and the coordinator's checkpoint. Bump it when a role's
# ``_STATE`` (or what one of its attributes holds) changes, so that a restart refuses state
# written by another version instead of failing part way through a restore. A MANIFEST
# without it was written before it existed (format 0). 2: the message index's node rows
# (MessageWindow: closed nodes, sibling links both ways). 3: the log records when pipelined
# publishes gathered in the coordinator went out (``release``), checkpoints carry an id
# (``mark``) and partitions count their takes. 4: the spatial coordinator's window ids as
# one object (``window_ids``: two arrays in a checkpoint), delivery chunks hold a delivery's
# parts as a list. 5: range top-k: each partition holds its span's objects and Paint server
# (no distributor role), the coordinator the objects' positions and the partitions' spans.
STATE_FORMAT = 5


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

    def snapshot(self, store: StateStore, rel: str, mark: str | None = None, keep: str | None = None) -> str:
        """Copy the state to resume from at this position (after the calls queued before
        this one) and start writing it to ``rel`` in the background (:meth:`snapshot_written`
        waits); returns ``rel``. ``mark``: the checkpoint's id, recorded in this role's
        lineage with its progress (a restarted coordinator adopts a live role that descends
        from its checkpoint, :meth:`adopt`); ``keep``: the committed checkpoint's id, the
        oldest a restart may resume from (older lineage is dropped)."""
        t0 = time.perf_counter()
        prev = getattr(self, "_writer", None)
        if prev is not None:
            prev.join()            # an older snapshot's write (abandoned or not) finishes first
        if mark is not None:
            self._record_mark(mark, keep)
        self._writer = write_snapshot(
            store, rel, lambda: {"state": self._state(), "metrics": dict(self.metrics.values), "mark": mark},
            self._shared(), self._snapshot_by_fork(), self._snapshot_compressed(), self._snapshot_raw())
        self.metrics.inc("snapshots", 1)
        self.metrics.inc("snapshot_seconds", time.perf_counter() - t0)
        settle_heap()                  # the first time: the kernels are loaded by now
        return rel

    def _snapshot_compressed(self) -> bool:
        """Whether this role's snapshot is lz4 compressed (a state with preallocated room:
        about a fifth of the bytes); a state of dense arrays is written as it is."""
        return True

    def _snapshot_raw(self) -> bool:
        """Whether :meth:`_state` returns only objects that later calls do not change (fresh
        copies), so the writer thread may pickle them too (see :func:`write_snapshot`); such a
        snapshot is written uncompressed."""
        return False

    # ------------------------------------------------------------------ lineage and adoption
    def _record_mark(self, mark: str, keep: str | None = None) -> None:
        """This role's state is the one checkpoint ``mark`` holds: its progress then. Lineage
        older than ``keep`` (when this role has it) is dropped, and what it retained for it."""
        lineage = self.__dict__.setdefault("_lineage", {})
        lineage[mark] = self._progress()
        if keep is not None and keep in lineage:
            for m in list(lineage):
                if m == keep:
                    break
                del lineage[m]
        while len(lineage) > MAX_LINEAGE:
            del lineage[next(iter(lineage))]
        self._prune_retained(next(iter(lineage.values())))

    def _progress(self) -> dict:
        """Where this role stands in its coordinator's sequence of calls (a kind's roles that
        can be adopted say: the steps and takes they applied); compared at an adoption."""
        return {}

    def _prune_retained(self, oldest: dict) -> None:
        """Drop what this role keeps for an adoption from before the lineage's ``oldest``
        progress (a kind's roles that retain their results)."""

    def own(self, owner: str, label: str, watch: tuple[str, str] | None = None, retain: bool = False) -> int:
        """This process serves the coordinator ``owner`` as ``label`` (``partition-0``,
        ``standby-partition``): calls that carry another owner are refused
        (:meth:`_check_owner`). ``watch`` (a detached role: the coordinator's name and
        namespace): the process ends once no coordinator of that name exists for
        :data:`WATCH_SECONDS` (it was killed for good, with nobody to restart it).
        ``retain``: keep what a restarted coordinator needs to adopt this role. Returns
        the pid."""
        self._owner, self._label, self._retain = owner, label, bool(retain)
        if watch is not None and getattr(self, "_watchdog", None) is None:
            self._watchdog = threading.Thread(target=_watch_coordinator, args=watch, daemon=True,
                                              name="rankcast-watch")
            self._watchdog.start()
        return os.getpid()

    def adopt(self, owner: str) -> dict:
        """A restarted coordinator ``owner`` takes this process over: from now on only its
        calls are served (those still queued from the dead one are refused). Returns what
        decides whether it keeps this role as it is: its label, class, lineage (checkpoint
        id -> progress at it), progress now, node and pid."""
        self._owner = owner
        from .placement import node_id
        return {"label": getattr(self, "_label", None), "class": type(self).__name__,
                "lineage": dict(getattr(self, "_lineage", {})), "progress": self._progress(),
                "node": node_id(), "pid": os.getpid()}

    def _check_owner(self, owner) -> None:
        """Refuse a call of another coordinator than this role's (one that died, whose calls
        were still queued here when a restarted one adopted this role)."""
        if owner is not None and owner != getattr(self, "_owner", None):
            raise StaleCall(f"{getattr(self, '_label', type(self).__name__)}: a call of a coordinator that "
                            f"no longer owns this role")

    def _snapshot_by_fork(self) -> bool:
        """Whether this role's state is most of its process (then a forked child writes it,
        see :func:`write_snapshot`); by default it is copied in memory."""
        return False

    def snapshot_written(self) -> str:
        """Wait until the last snapshot is on disk (raises if its write failed)."""
        return self._writer.done()

    def snapshot_done(self) -> bool:
        """Whether the last snapshot is on disk, without waiting (raises if its write failed)."""
        if self._writer.is_alive():
            return False
        self._writer.done()
        return True

    def _resume(self, resume) -> None:
        self._phases = {}
        self._lineage = {}
        if resume is None:
            return
        store, rel = resume
        with self._phase("read"):
            snap = store.read(rel, self._shared())
        self._restore(snap["state"])
        self.metrics.values.update(snap["metrics"])
        if snap.get("mark") is not None:
            self._record_mark(snap["mark"])
        settle_heap()

    @contextlib.contextmanager
    def _phase(self, name: str):
        """Time a part of this role's restore (read, indexes, re-evaluation): the recovery
        record of the coordinator reports them (:meth:`restore_phases`)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            phases = self.__dict__.setdefault("_phases", {})
            phases[name] = phases.get(name, 0.0) + time.perf_counter() - t0

    def restore_phases(self) -> dict[str, float]:
        """Seconds of each part of this role's last restore (empty: it was built new)."""
        return dict(getattr(self, "_phases", {}))

    def reinit(self, *args, **kw) -> int:
        """Become a new role of the same class in this process (recovery reuses the live
        processes: they have every module and compiled kernel loaded); returns the pid."""
        writer = getattr(self, "_writer", None)
        if writer is not None:
            writer.join()          # not one of this role's: it must not write over a restore
        t0 = time.perf_counter()
        self.__init__(*args, **kw)
        # the whole of it, restore included (a role that resumes from nothing has no parts)
        self.__dict__.setdefault("_phases", {})["init"] = time.perf_counter() - t0
        return os.getpid()

    def pid(self) -> int:
        """The process id of this role (fault-injection tests kill it)."""
        return os.getpid()

    def node(self) -> str | None:
        """The id of the Ray node this role runs on (None: not on Ray)."""
        from .placement import node_id
        return node_id()

    def warm(self) -> int:
        """Load what this role runs (its compiled kernels, from the cache) without touching
        its state: a standby process does it once started, so that the recovery that makes
        it a role does not wait for it. Returns the pid."""
        self._warm()
        settle_heap()
        return os.getpid()

    def _warm(self) -> None:
        """The role's own warm-up (none by default)."""

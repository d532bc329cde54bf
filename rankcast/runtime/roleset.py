"""The coordinator's roles as processes: making them (fresh, from a checkpoint or adopted
alive at a restart), standbys, waiting for room, placement, and the topology it reports
(:class:`RoleSet`, a part of :class:`~rankcast.runtime.coordinator.CoordinatorBase`)."""
from __future__ import annotations

import os
import time
import uuid

from rankcast.errors import NoCapacity

from .placement import live_nodes, node_id
from .guard import guarded
from .metrics import settle_heap
from .recovery import dead_actors


STANDBY_WARM_SECONDS = 120.0  # how long warm() waits for the standby processes
# A direct-mode partition's results cross the object store, one object per call (4.6 MB per
# 1,000 messages at 20k subscriptions), and the deliveries keep them for ``retention``
# positions: each lands on pages of the store that the partition's process has not written
# yet, one page fault each (about 1,200 per call, measured), until its process has written
# the store's pages that the objects cycle through (the client, which reads them, maps them
# 16 pages a fault). warm() writes STORE_WARM_BYTES through the partitions (a P-th each: the
# results shrink with P) at once, in objects of STORE_WARM_CHUNK, all alive together, then
# freed: the store hands the same pages out again
STORE_WARM_BYTES = 256 << 20
STORE_WARM_CHUNK = 8 << 20
# role processes still starting after placement_timeout while CPUs are free start slowly (a
# loaded host), they are not short of room: waited for up to this many times the timeout
SLOW_START_LIMIT = 10
ADOPT_SECONDS = 30.0    # how long a restarted coordinator waits for a live role to answer
PING_SECONDS = 5.0      # how long a recovery waits for a role to answer before it counts it dead
ROLE_SEP = "::role::"   # a detached role's actor name: <cluster name>::role::<unique id>


def _key(handle) -> str:
    """A role process's key in the placement record: its actor id."""
    return handle._actor_id.hex()


class RoleSet:
    """The roles' processes of a coordinator (mixed into :class:`~rankcast.runtime.coordinator.CoordinatorBase`)."""

    def _role_maker(self, ckpt: str | None, reuse: list | None):
        """``make(role, cls, i, *args, snapshot=True)`` that builds role ``i`` (resumed from
        ``ckpt`` when given; in a live process of ``reuse`` when one of that role is left),
        and ``finish()`` that waits for every role built and kills the unused live ones.

        After a restart, the live processes of the cluster before it (:meth:`_found_processes`,
        kept by :meth:`_load_checkpoint` for this build): the one that played role ``i`` is
        kept as it is where the kind can take it over from its checkpoint
        (:meth:`_adoptable`); any other of the same class becomes a role again in place (as
        ``reuse``); a standby stays a standby (:meth:`_keep_standbys`)."""
        spare: dict[str, list] = {}
        for role, h in reuse or []:
            spare.setdefault(role, []).append((h, None))
        by_label: dict[str, tuple] = {}
        found, self._found = getattr(self, "_found", None), None
        self._found_standby = []
        for h, info in found or []:
            label = info.get("label") or ""
            if label.startswith("standby-"):
                self._found_standby.append((label[len("standby-"):], h, info))
            elif label:
                by_label[label] = (h, info)
        started, labels = [], []

        def make(role, cls, i, *args, snapshot=True):
            kw = {"resume": (self.store, f"{ckpt}/{role}-{i}")} if ckpt is not None and snapshot else {}
            self._role_specs[role] = (cls, args)
            self._role_args[(role, i)] = (cls, args)
            label = f"{role}-{i}"
            got = by_label.pop(label, None)
            if got is not None:
                h, info = got
                if ckpt is not None and info["class"] == cls.__name__ and self._adoptable(role, i, info):
                    self._adopted[(role, i)] = info
                    self._own(h, label)
                    if self.placer is not None:
                        self.placer.on(_key(h), info.get("node"), role)
                    started.append(self.rt.put(info["pid"]))
                    labels.append(f"{label} (adopted)")
                    return h
                spare.setdefault(role, []).append((h, info["class"]))
            for n, (h, name) in enumerate(spare.get(role, ())):
                if name is None or name == cls.__name__:
                    del spare[role][n]
                    started.append(h.reinit.remote(*args, **kw))
                    self._own(h, label)
                    labels.append(f"{label} (in place)" if name else label)
                    return h
            h, ref, how = self._spawn(role, cls, args, kw, label)
            started.append(ref)
            labels.append(f"{label}{how}")
            return h

        def finish():
            try:
                self._role_seconds = self._wait_timed(started, labels)     # every role is up
            finally:
                for hs in list(spare.values()) + [list(by_label.values())]:
                    for h, _ in hs:
                        self._kill([h])
        return make, finish

    def _adoptable(self, role: str, i: int, info: dict) -> bool:
        """Whether the live process ``info`` (:meth:`Recoverable.adopt`) that played role
        ``i`` may go on as it is after a restart from the loaded checkpoint: the calls since
        that checkpoint are then replayed to it only from where it stands. No kind's role by
        default (each is rebuilt from the checkpoint, in its process)."""
        return False

    def _keep_standbys(self) -> None:
        """A restart keeps the live standby processes of the roles it runs (the others end)."""
        for role, h, info in getattr(self, "_found_standby", ()):
            spec = self._role_specs.get(role)
            if spec is not None and role not in self._standby and info["class"] == spec[0].__name__:
                self._standby[role] = h
                self._standby_warm[role] = h.warm.remote()
                self._own(h, f"standby-{role}")
                if self.placer is not None:
                    self.placer.on(_key(h), info.get("node"), "standby")
            else:
                self._kill([h])
        self._found_standby = []

    def _own(self, h, label: str) -> None:
        """Make ``h`` this coordinator's process for ``label`` (:meth:`Recoverable.own`)."""
        h.own.remote(self._owner, label, self._watch, self._retains(label))

    def _retains(self, label: str) -> bool:
        """Whether the role ``label`` keeps what an adoption needs (the kind's choice)."""
        return False

    def _named_processes(self) -> list:
        """Handles of the live role processes named after this cluster (detached ones)."""
        if not self._detached:
            return []
        import ray
        from ray.util import list_named_actors
        prefix, ns = self.ccfg.name + ROLE_SEP, self.ccfg.namespace
        out = []
        for a in list_named_actors(all_namespaces=True):
            if a.get("namespace") == ns and a.get("name", "").startswith(prefix):
                try:
                    out.append(ray.get_actor(a["name"], namespace=ns))
                except ValueError:              # gone meanwhile
                    pass
        return out

    def _found_processes(self) -> list[tuple[object, dict]]:
        """The live processes of this cluster from before a restart, each taken over
        (:meth:`Recoverable.adopt`: calls of the dead coordinator are refused from now on)
        with what it said; one that does not answer within :data:`ADOPT_SECONDS` is ended."""
        handles = self._named_processes()
        if not handles:
            return []
        refs = [h.adopt.remote(self._owner) for h in handles]
        ready, _ = self.rt.wait(refs, num_returns=len(refs), timeout=ADOPT_SECONDS)
        ready = set(ready)
        out = []
        for h, ref in zip(handles, refs):
            try:
                if ref in ready:
                    out.append((h, self.rt.get(ref)))
                    continue
            except Exception:           # it died meanwhile
                pass
            self._kill([h])
        return out

    def _spawn(self, role: str, cls, args: tuple, kw: dict, label: str | None = None):
        """A process for a role: the warm standby's where there is one, else a new one.
        Returns (handle, a reference that resolves when it is up, how: for the phases)."""
        label = label or role
        if role in self._standby:
            h = self._standby.pop(role)
            ref = h.reinit.remote(*args, **kw)
            self._own(h, label)
            return h, ref, " (standby)"
        h = self._create(role, cls, args, kw, self.ccfg.actor_cpus, label)
        return h, h.pid.remote(), " (new process)"

    def _create(self, role: str, cls, args: tuple, kw: dict, num_cpus: float, label: str | None = None):
        """A new process for ``role``, on the node the placement rule picks
        (:class:`~rankcast.runtime.placement.Placer`); named after the cluster and detached
        where the cluster is durable (it outlives a coordinator that Ray restarts)."""
        named = {}
        if self._detached:
            named = {"name": f"{self.ccfg.name}{ROLE_SEP}{uuid.uuid4().hex}", "namespace": self.ccfg.namespace,
                     "detached": True}
        if self.placer is None:
            h = self.rt.create(cls, *args, num_cpus=num_cpus, **named, **kw)
        else:
            opts, target = self.placer.options(role)
            h = self.rt.create(cls, *args, num_cpus=num_cpus, actor_options=opts, **named, **kw)
            self.placer.on(_key(h), target, role)
        self._own(h, label or role)
        return h

    def _fill_standby(self) -> None:
        """Start a standby process for every role that has none (``options["standby"]``,
        on by default for a durable cluster on Ray): it loads its kernels (:meth:`warm`)
        while the cluster runs, and the next recovery that needs a new process of that role
        takes it instead (no process start, no kernel loading in the recovery). Called once
        the roles serve (after a start, a restart, or a recovery's replay).

        A standby asks no logical CPU: it idles until it replaces a dead role, whose CPU
        it then uses; asking for one would take a slot from the roles and tasks that run
        (a Spark executor's conversion tasks waited for a CPU that standbys held)."""
        if self.store is None or self.rt.inproc or not self.ccfg.options.get("standby", True):
            self._kill([h for _, h, _ in getattr(self, "_found_standby", ())])
            self._found_standby = []
            return
        self._keep_standbys()
        for role, (cls, args) in self._role_specs.items():
            if role not in self._standby:
                h = self._create("standby", cls, args, {}, 0, f"standby-{role}")
                self._standby[role] = h
                self._standby_warm[role] = h.warm.remote()

    # ------------------------------------------------------------------ roles
    def _wait_timed(self, refs: list, labels: list[str]) -> dict[str, float]:
        """Wait for ``refs`` (roles starting); seconds until each was done, by label (recovery
        phases). Roles not up after ``placement_timeout`` seconds have no node with room: the
        cluster waits for one (:meth:`_no_room`)."""
        t0 = time.perf_counter()
        out, left = {}, list(refs)
        names = dict(zip(refs, labels))
        limit = None if self.rt.inproc else self.ccfg.placement_timeout
        while left:
            wait = None if limit is None else max(0.0, limit - (time.perf_counter() - t0))
            done, left = self.rt.wait(left, num_returns=1, timeout=wait)
            if not done:
                if self._cpus_free() >= self.ccfg.actor_cpus and limit < SLOW_START_LIMIT * self.ccfg.placement_timeout:
                    limit += self.ccfg.placement_timeout      # room: the processes start slowly
                    continue
                self._no_room([names[r] for r in left], left)
            for r in done:
                self.rt.get(r)
                out[names[r]] = time.perf_counter() - t0
        return out

    def _cpus_free(self) -> float:
        """Logical CPUs not taken on the live nodes (Ray's last report)."""
        import ray
        return float(ray.available_resources().get("CPU", 0.0))

    def _no_room(self, labels: list[str], refs: list) -> None:
        """Roles ``labels`` could not start within ``placement_timeout``: no live node has
        room for them. The requests stay with Ray (``refs`` resolve once a node with room
        joined); raises :class:`NoCapacity`, and every call raises it until then."""
        nodes = live_nodes()
        cpus = sum(n["resources"].get("CPU", 0.0) for n in nodes)
        reason = (f"rankcast cluster {self.ccfg.name!r}: no node has room for {', '.join(labels)} "
                  f"({self.ccfg.actor_cpus:g} CPU each; {len(nodes)} live node(s), {cpus:g} CPUs in all, "
                  f"none of them free for it after {self.ccfg.placement_timeout:g} s). The cluster keeps its "
                  f"state and resumes at the first call after a node with room joins.")
        self._waiting = {"since": time.time(), "roles": list(labels), "reason": reason, "probes": list(refs)}
        raise NoCapacity(reason)

    def _resume_if_room(self) -> None:
        """While roles wait for room: once every one of them started (a node with room
        joined), a full recovery (the checkpoint, then the log) makes the cluster whole
        again; before that, :class:`NoCapacity`."""
        w = self._waiting
        probes = w["probes"]
        ready, _ = self.rt.wait(probes, num_returns=len(probes), timeout=0)
        if len(ready) < len(probes) and self._cpus_free() < self.ccfg.actor_cpus * (len(probes) - len(ready)):
            raise NoCapacity(w["reason"])
        # every waiting role started, or there is room for them now (those that still wait
        # for Ray do not answer the recovery, which starts them anew)
        self._waiting = None
        t0 = time.time()
        self._recover(NoCapacity(w["reason"]))
        self.recoveries[-1]["waited_seconds"] = t0 - w["since"]

    def _waiting_stats(self) -> dict:
        """What ``stats()`` says while roles wait for room (no role is asked anything)."""
        return {"subscriptions": len(self.live), "published": self.published,
                "placement": self._placement_stats(ask=False), "recovery": self._recovery_stats()}

    def _placement_stats(self, ask: bool = True) -> dict:
        """Where every role runs (``ask``: each role says its node) and the live nodes."""
        out = {"placement": self.ccfg.placement, "control_node": self.ccfg.control_node,
               "waiting": None if self._waiting is None else
               {k: v for k, v in self._waiting.items() if k != "probes"}}
        if self.placer is None:
            return dict(out, nodes=[], roles={})
        nodes = live_nodes()
        roles = {"coordinator": node_id()}
        if ask:
            labelled = [(f"{role}-{i}", role, h) for role, hs in self.role_groups() for i, h in enumerate(hs)]
            for (label, role, h), node in zip(labelled, self.rt.get([h.node.remote() for _, _, h in labelled])):
                roles[label] = node
                self.placer.on(_key(h), node, role)
        by_node = {n["node"]: [] for n in nodes}
        for label, node in roles.items():
            by_node.setdefault(node, []).append(label)
        out["nodes"] = [{"node": n["node"], "address": n["address"], "head": n["head"],
                         "cpus": n["resources"].get("CPU", 0.0), "roles": by_node[n["node"]]} for n in nodes]
        out["roles"] = roles
        return out

    def _kill(self, handles) -> None:
        if self.rt.inproc:
            return
        import ray
        for h in handles:
            self.placer.forget(_key(h))
            try:
                ray.kill(h, no_restart=True)
            except Exception:  # already gone
                pass

    def _live_roles(self, known_dead: set[str] = frozenset()) -> list[tuple[str, object]]:
        """(role, handle) of the roles whose process still answers; the others are killed
        for good (a role that hangs is as good as dead). ``known_dead``: the actor ids that
        death errors named (:func:`~rankcast.runtime.recovery.dead_actors`): those roles are
        dead without a ping, which for a process lost with its node fails only after Ray's
        wait for news of the death (seconds); the others are pinged together."""
        roles = [(r, h) for r, hs in self.role_groups() for h in hs]
        if self.rt.inproc:
            return roles
        asked = [(r, h) for r, h in roles if _key(h) not in known_dead]
        refs = [h.pid.remote() for _, h in asked]
        ready, _ = self.rt.wait(refs, num_returns=len(refs), timeout=PING_SECONDS) if refs else ([], [])
        ready = set(ready)
        out, dead = [], [(r, h) for r, h in roles if _key(h) in known_dead]
        for (r, h), ref in zip(asked, refs):
            ok = ref in ready
            if ok:
                try:
                    self.rt.get(ref)
                except Exception:
                    ok = False
            (out if ok else dead).append((r, h))
        if self.placer is not None:       # their nodes may be gone: new processes go elsewhere
            self.placer.avoid = {self.placer.where.get(_key(h)) for _, h in dead} - {None}
        self._kill([h for _, h in dead])
        self._drop_dead_standbys()
        return out

    def _deaths_seen(self, cause: BaseException | None, settled=()) -> set[str]:
        """The actor ids of the roles that ``cause`` and the failed calls among ``settled``
        (finished references) name dead (:func:`~rankcast.runtime.recovery.dead_actors`)."""
        out = dead_actors(cause)
        for ref in settled:
            try:
                self.rt.get(ref)
            except Exception as e:
                out |= dead_actors(e)
        return out

    def _drop_dead_standbys(self) -> None:
        """Forget the standby processes whose node is gone: a recovery must not hand a role to
        one (standbys run where the control roles do, by default on the head)."""
        if not self._standby or self.placer is None:
            return
        live = {n["node"] for n in self.placer.nodes(fresh=True)}
        for role, h in list(self._standby.items()):
            node = self.placer.where.get(_key(h))
            if node is not None and node not in live:
                del self._standby[role]
                self._standby_warm.pop(role, None)
                self._kill([h])

    @guarded
    def warm(self) -> dict[str, list[int]]:
        """Every role loads what it runs (its compiled kernels, from numba's cache) now, so
        that the first steps of a stream do not wait for it, and the standby processes
        finish starting and loading theirs (about 1.5 s of CPU each, which would otherwise
        land in the first seconds of a stream). Returns the pids by role."""
        out = {"coordinator": [os.getpid()]}
        for role, hs in self.role_groups():
            out[role] = self.rt.get([h.warm.remote() for h in hs])
        pending = [ref for role, ref in self._standby_warm.items() if role in self._standby]
        if pending:         # a standby that failed is reported by stats (_standby_state)
            self.rt.wait(pending, num_returns=len(pending), timeout=STANDBY_WARM_SECONDS)
        settle_heap()
        return out

    def pids(self) -> dict[str, list[int]]:
        """Process ids by role (fault-injection tests kill them)."""
        out = {"coordinator": [os.getpid()]}
        for role, hs in self.role_groups():
            out[role] = self.rt.get([h.pid.remote() for h in hs])
        return out

    def topology(self) -> dict[str, list[int]]:
        """Process ids by what the processes do: every role this cluster runs (none with no
        process), and each duty of the kind (:meth:`_duties`) under the processes that carry it."""
        out = {role: ps for role, ps in self.pids().items() if ps}
        for duty, role in self._duties().items():
            if role in out:
                out[duty] = out[role]
        return out

    def _duties(self) -> dict[str, str]:
        """duty -> the role whose processes carry it (a kind's data that moves between roles
        with the layout, such as the spatial kind's window)."""
        return {}

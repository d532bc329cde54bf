"""Typed configuration: dataclasses with defaults from ``defaults.yaml`` and
``RANKCAST_<FIELD>`` environment overrides (for example ``RANKCAST_LEAF_CAPACITY=500``)."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from rankcast.errors import InvalidInput
from rankcast.kinds.spatial.text import Vocabulary
from rankcast.runtime import registry
from rankcast.runtime.placement import PLACEMENTS

__all__ = ["EngineConfig", "MatchConfig", "RangeConfig", "RANGE_METHODS", "ClusterConfig", "SCORINGS", "MATCH_INDEXES", "MATCH_DRIVERS", "MATCH_POLICIES", "RANGE_POLICIES", "Limits", "defaults", "limits", "POLICIES", "local_ray_options", "loopback_only", "NODE_HEALTH_CHECKS",
           "PLACEMENTS", "CLUSTER_UPDATES"]

_DEFAULTS_FILE = Path(__file__).with_name("defaults.yaml")
# each kind's placement policies, from its registry entry (rankcast.runtime.registry)
POLICIES = registry.by_name("spatial").policies         # spatial-keyword (DSkype, paper 7.3)
MATCH_POLICIES = registry.by_name("matching").policies  # ranked matching: placement of expressions
RANGE_POLICIES = registry.by_name("range").policies     # range top-k: regions of the (lo, hi) plane
# what a cluster's roles report and its deliveries hold (ClusterConfig.updates)
CLUSTER_UPDATES = ("lists", "diff")


def defaults() -> dict[str, Any]:
    """The shipped defaults, with environment overrides applied."""
    with open(_DEFAULTS_FILE) as f:
        d = yaml.safe_load(f)
    for section in d.values():
        for key, val in section.items():
            env = os.environ.get("RANKCAST_" + key.upper())
            if env is not None:
                section[key] = _env_value(key, env, val)
    return d


def _env_value(key: str, env: str, val):
    """The value of ``RANKCAST_<KEY>=env`` for a default ``val`` (its type decides)."""
    if val is None or isinstance(val, bool):
        return yaml.safe_load(env)
    try:
        return type(val)(env)
    except ValueError:
        raise InvalidInput(f"environment RANKCAST_{key.upper()}: expected {type(val).__name__}, "
                           f"got {env!r}") from None


@dataclass(frozen=True)
class Limits:
    """Sizes of input beyond which an item or a call is rejected with InvalidInput before
    anything is allocated in proportion to it (docs/contract.md, "Limits")."""

    max_text_chars: int   # characters of one item's text
    max_terms: int        # distinct terms of one item
    max_items: int        # items in one call
    max_predicates: int   # predicates of one expression, values of one event
    max_set_values: int   # values of one 'in' / 'not in' predicate


def limits() -> Limits:
    """The limits in force: ``defaults.yaml`` section ``limits``, with ``RANKCAST_MAX_*``
    overrides read from the environment now (so a process may change them at run time)."""
    vals = {}
    for key, val in _LIMITS.items():
        env = os.environ.get("RANKCAST_" + key.upper())
        v = val if env is None else _env_value(key, env, val)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InvalidInput(f"limits: field '{key}': must be an integer >= 1, got {v!r}")
        vals[key] = v
    return Limits(**vals)


# Ray sends a task argument or result of at most this many bytes inside the call, not through
# the object store (``max_direct_call_object_size``, 100 KiB by default): a publish of 1,000
# GeoNames messages is a 206 KB batch. Ray reads it from the environment of each process
# (``RAY_max_direct_call_object_size``); rankcast sets it for the Ray it starts
# (:func:`local_ray_options`) and for every process of its roles (``runtime.INLINE_ENV``)
RAY_INLINE_BYTES = 256 * 1024
RAY_INLINE_VAR = "RAY_max_direct_call_object_size"


# Ray's control store counts a node dead after ``health_check_failure_threshold`` failed
# health checks ``health_check_period_ms`` apart: by default 5 x 3 s, and until then a call to
# a role on a crashed node fails only as "unavailable", after a wait of its own (about 2 s per
# call). These settings (Ray's ``_system_config``, or ``ray start --head --system-config``)
# make a crashed node dead in about 1.5 s, so the roles it held are recreated that much
# sooner; a node that answers slowly still has ``health_check_timeout_ms`` per check
NODE_HEALTH_CHECKS = {"health_check_initial_delay_ms": 1000, "health_check_period_ms": 500,
                      "health_check_timeout_ms": 2000, "health_check_failure_threshold": 3}


# Ray reads this variable when ``ray`` is imported: "0" makes a node it starts take loopback as
# its address, and then every one of its processes (the GCS, the raylet, the agents, every
# worker) listens on 127.0.0.1 only. Without it, Ray replaces a loopback node address by the
# machine's routable one (``resolve_ip_for_localhost``) and its gRPC servers bind every
# interface, whatever ``_node_ip_address`` says.
RAY_LOOPBACK_VAR = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def local_ray_options(**extra) -> dict[str, Any]:
    """Options for a Ray that rankcast starts itself (the embedded default): call it just
    before ``ray.init(**local_ray_options(...))``.

    Ray's CPUs are logical: actors of a topology ask fractional CPUs and mostly wait on one
    another, so the local Ray advertises at least ``RANKCAST_LOCAL_CPUS`` (default 8) even on a
    2-core machine; otherwise a 4-partition topology plus a Spark executor cannot be placed.

    Locked down (docs/operations.md, "Security"): loopback only (every listening socket of
    Ray's processes on 127.0.0.1: :func:`loopback_only`), no dashboard
    (``RANKCAST_DASHBOARD=1`` starts one, on 127.0.0.1), and token authentication, which Ray
    2.60 turns on for every new local cluster unless ``RAY_AUTH_MODE`` says otherwise (it
    writes the token to ``~/.ray/auth_token``; every process that attaches must present it).
    Ray reads the mode when it is imported, so it is not set from here.

    It always starts a new Ray (``address="local"``): a Ray that another program left
    running on this host (``ray start``, its address file) is not joined by accident; pass
    its address to attach to it.

    Task arguments and results up to :data:`RAY_INLINE_BYTES` go inside the calls: the
    variable Ray reads (:data:`RAY_INLINE_VAR`) is set in this process's environment, unless
    it is set already, before ``ray.init`` starts Ray's processes, which inherit it."""
    os.environ.setdefault(RAY_INLINE_VAR, str(RAY_INLINE_BYTES))
    loopback_only()
    cpus = max(int(os.environ.get("RANKCAST_LOCAL_CPUS", "8")), os.cpu_count() or 1)
    dashboard = os.environ.get("RANKCAST_DASHBOARD", "0") not in ("", "0", "false", "False")
    # no idle worker processes started ahead for the first driver (40 MiB each, which no role
    # takes: every role is an actor with a process of its own, started when it is made)
    system = {"prestart_worker_first_driver": False, **extra.pop("_system_config", {})}
    return {"address": "local", "num_cpus": cpus, "include_dashboard": dashboard, "dashboard_host": "127.0.0.1",
            "_node_ip_address": "127.0.0.1", "_system_config": system, **extra}


def loopback_only() -> None:
    """Make the next Ray node this process starts listen on loopback only: sets
    :data:`RAY_LOOPBACK_VAR` in the environment (Ray's processes inherit it; a ``ray`` imported
    later reads it) and, when ``ray`` is imported already, the flag Ray read it into. A
    process that did this serves a Ray on its host; one that attaches to a cluster of
    several machines (``ray.init(address=...)``) must not have done it."""
    import sys

    os.environ[RAY_LOOPBACK_VAR] = "0"
    consts = sys.modules.get("ray._private.ray_constants")
    if consts is not None and hasattr(consts, "ENABLE_RAY_CLUSTER"):
        consts.ENABLE_RAY_CLUSTER = False


_ENGINE = defaults()["engine"]
_CLUSTER = defaults()["cluster"]
_MATCH = defaults()["match"]
_RANGE = defaults()["range"]
with open(_DEFAULTS_FILE) as _f:
    _LIMITS = yaml.safe_load(_f)["limits"]     # environment overrides apply in limits()


@dataclass(frozen=True)
class EngineConfig:
    """Configuration of one Skype engine (paper Sections 4 to 6).

    ``window`` (count) or ``window_seconds`` (time): exactly one is used; giving
    ``window_seconds`` switches to the time-based window.
    """

    bounds: tuple[float, float, float, float]
    window: int | None = 100_000
    window_seconds: float | None = None
    vocabulary: Vocabulary | None = None
    leaf_capacity: int = _ENGINE["leaf_capacity"]        # Quadtree leaf capacity (paper 8.1.1)
    groups: int = _ENGINE["groups"]                      # alpha*-partition groups (paper 5.2.1)
    max_depth: int = _ENGINE["max_depth"]                # Quadtree depth limit (coincident points)
    # a re-evaluation fetches max(candidate_factor * k, k + candidate_extra) candidates: the
    # cost model keeps a buffer of j rows, j - k about 1-3 at k = 1, 4-10 at k = 5 and 6-12 at
    # k = 20 (GeoNames, TWEETS- and YELP-like windows of 100k); candidates fetched beyond the
    # buffer are wasted search work, as the K-th score bounds the search's pruning
    candidate_factor: float = _ENGINE["candidate_factor"]
    candidate_extra: int = _ENGINE["candidate_extra"]
    batch_size: int = _ENGINE["batch_size"]              # messages per kernel call inside publish

    def __post_init__(self):
        try:
            b = tuple(float(v) for v in self.bounds)
        except (TypeError, ValueError):
            raise InvalidInput(f"EngineConfig: field 'bounds': expected 4 numbers, got {self.bounds!r}") from None
        if len(b) != 4 or not all(math.isfinite(v) for v in b) or not (b[0] < b[2] and b[1] < b[3]):
            raise InvalidInput(f"EngineConfig: field 'bounds': need finite xmin < xmax, ymin < ymax, got {self.bounds!r}")
        object.__setattr__(self, "bounds", b)
        if self.window_seconds is not None:
            ws = self.window_seconds
            if isinstance(ws, bool) or not isinstance(ws, (int, float)) or not (ws > 0 and math.isfinite(ws)):
                raise InvalidInput(f"EngineConfig: field 'window_seconds': must be a positive number, got {ws!r}")
            object.__setattr__(self, "window", None)
        else:
            w = self.window
            if isinstance(w, bool) or not isinstance(w, int) or w < 1:
                raise InvalidInput(f"EngineConfig: field 'window': must be an integer >= 1, got {w!r}")
        if self.vocabulary is not None and not isinstance(self.vocabulary, Vocabulary):
            raise InvalidInput("EngineConfig: field 'vocabulary': must be a rankcast.Vocabulary or None")
        for name in ("leaf_capacity", "groups", "max_depth", "batch_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidInput(f"EngineConfig: field '{name}': must be an integer >= 1, got {v!r}")
        cf = self.candidate_factor
        if isinstance(cf, bool) or not isinstance(cf, (int, float)) or not cf >= 1:
            raise InvalidInput(f"EngineConfig: field 'candidate_factor': must be a number >= 1, got {cf!r}")
        ce = self.candidate_extra
        if isinstance(ce, bool) or not isinstance(ce, int) or ce < 0:
            raise InvalidInput(f"EngineConfig: field 'candidate_extra': must be an integer >= 0, got {ce!r}")

    @property
    def time_window(self) -> bool:
        return self.window_seconds is not None

    @property
    def max_dist(self) -> float:
        """MaxDist of the score: the diagonal of ``bounds``."""
        xmin, ymin, xmax, ymax = self.bounds
        return math.hypot(xmax - xmin, ymax - ymin)

    def replace(self, **kw) -> "EngineConfig":
        return replace(self, **kw)


SCORINGS = ("static", "relaxed", "weighted")
MATCH_INDEXES = ("auto", "ir-tree", "sopt-r-tree", "segment-tree", "interval-tree", "r-tree", "be-tree", "scan")
# which index serves which scoring (an unsupported pair is an InvalidInput naming 'index')
INDEX_SCORINGS = {"auto": SCORINGS, "ir-tree": SCORINGS, "sopt-r-tree": SCORINGS, "segment-tree": SCORINGS,
                  "interval-tree": SCORINGS, "r-tree": SCORINGS, "be-tree": ("static", "weighted"), "scan": SCORINGS}
# how an event is answered (docs/matching.md): "paper" (the Threshold Algorithm for relaxed,
# the driver attribute merge for static / weighted, over the named index), "pivot" (one
# attribute's list in order of the whole expression's bound, over the named index), "box" (one
# tree over whole expressions, rankcast.kinds.matching.boxtree: index="auto" only); "auto":
# "box" under index="auto", "paper" over a named index
MATCH_DRIVERS = ("auto", "paper", "pivot", "box")
BE_SPLITS = ("exhaustive", "approximate")
BE_BUILDS = ("dynamic", "batch")


def leaf_capacity_for(match_probability: float) -> int:
    """The BE*-tree's leaf capacity A by the expected match probability (paper Table II)."""
    return 5 if match_probability < 0.01 else 20 if match_probability < 0.10 else 160


@dataclass(frozen=True)
class MatchConfig:
    """Configuration of the ranked-matching kind (docs/contract.md): its scoring, the default
    ``k`` of ``publish`` and the index serving it (docs/matching.md)."""

    scoring: str = _MATCH["scoring"]
    k: int = _MATCH["k"]
    index: str = _MATCH["index"]
    driver: str = _MATCH["driver"]
    branching: int = _MATCH["branching"]                # b of the R-trees (paper Table 1: 50)
    rebuild_fraction: float = _MATCH["rebuild_fraction"]  # static index: delta share that rebuilds it
    rebuild_min: int = _MATCH["rebuild_min"]
    # BE*-tree (index="be-tree"; paper Table II): leaf capacity A ("auto": by the expected
    # match probability), minimum split share alpha, expansion growth beta, split algorithm,
    # and "batch" (BE*-B: a first table bulk-loaded top-down) or "dynamic" construction
    leaf_capacity: int | str = _MATCH["leaf_capacity"]
    match_probability: float = _MATCH["match_probability"]
    alpha: float = _MATCH["alpha"]
    beta: float = _MATCH["beta"]
    split: str = _MATCH["split"]
    build: str = _MATCH["build"]

    def __post_init__(self):
        if self.scoring not in SCORINGS:
            raise InvalidInput(f"MatchConfig: field 'scoring': must be one of {SCORINGS}, got {self.scoring!r}")
        if self.index not in MATCH_INDEXES:
            raise InvalidInput(f"MatchConfig: field 'index': must be one of {MATCH_INDEXES}, got {self.index!r}")
        if self.scoring not in INDEX_SCORINGS[self.index]:
            served = ", ".join(INDEX_SCORINGS[self.index])
            raise InvalidInput(f"MatchConfig: field 'index': {self.index!r} does not serve scoring "
                               f"{self.scoring!r} (it serves: {served})")
        if self.driver not in MATCH_DRIVERS:
            raise InvalidInput(f"MatchConfig: field 'driver': must be one of {MATCH_DRIVERS}, got {self.driver!r}")
        if self.driver != "auto" and self.index in ("scan", "be-tree"):
            raise InvalidInput(f"MatchConfig: field 'driver': index {self.index!r} has no driver to choose "
                               f"(only 'auto'), got {self.driver!r}")
        if self.driver == "box" and self.index != "auto":
            raise InvalidInput(f"MatchConfig: field 'driver': 'box' builds its own tree and needs index='auto', "
                               f"got index={self.index!r}")
        for name, low in (("k", 1), ("branching", 2), ("rebuild_min", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise InvalidInput(f"MatchConfig: field '{name}': must be an integer >= {low}, got {v!r}")
        f = self.rebuild_fraction
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not (0 < f <= 1):
            raise InvalidInput(f"MatchConfig: field 'rebuild_fraction': must be in (0, 1], got {f!r}")
        a = self.leaf_capacity
        if a != "auto" and (isinstance(a, bool) or not isinstance(a, int) or a < 1):
            raise InvalidInput(f"MatchConfig: field 'leaf_capacity': must be 'auto' or an integer >= 1, got {a!r}")
        for name, lo, hi in (("match_probability", 0.0, 1.0), ("alpha", 0.0, 0.5)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (lo < v <= hi):
                raise InvalidInput(f"MatchConfig: field '{name}': must be in ({lo}, {hi}], got {v!r}")
        b = self.beta
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not (1.0 <= b < math.inf):
            raise InvalidInput(f"MatchConfig: field 'beta': must be a finite number >= 1, got {b!r}")
        for name, allowed in (("split", BE_SPLITS), ("build", BE_BUILDS)):
            if getattr(self, name) not in allowed:
                raise InvalidInput(f"MatchConfig: field '{name}': must be one of {allowed}, got {getattr(self, name)!r}")

    @property
    def leaf_size(self) -> int:
        """A: ``leaf_capacity``, or by ``match_probability`` under "auto"."""
        return leaf_capacity_for(self.match_probability) if self.leaf_capacity == "auto" else int(self.leaf_capacity)

    def replace(self, **kw) -> "MatchConfig":
        return replace(self, **kw)


RANGE_METHODS = ("paint-dense", "paint-sparse", "unicast")


@dataclass(frozen=True)
class RangeConfig:
    """Configuration of the range top-k kind (docs/contract.md, "Range top-k"): ``k``, the message
    ``method`` (Paint-Dense, Paint-Sparse or the Unicast baseline), ``epsilon`` (> 0: the
    approximate Paint(epsilon) messages, results still exact) and ``batch`` (Paint-Batch per
    publish call; Unicast then coalesces)."""

    k: int = _RANGE["k"]
    method: str = _RANGE["method"]
    epsilon: float = _RANGE["epsilon"]
    batch: bool = _RANGE["batch"]
    leaf_size: int = _RANGE["leaf_size"]       # points per leaf of the subscription k-d tree

    def __post_init__(self):
        for name in ("k", "leaf_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidInput(f"RangeConfig: field '{name}': must be an integer >= 1, got {v!r}")
        if self.method not in RANGE_METHODS:
            raise InvalidInput(f"RangeConfig: field 'method': must be one of {RANGE_METHODS}, got {self.method!r}")
        e = self.epsilon
        if isinstance(e, bool) or not isinstance(e, (int, float)) or not (0.0 <= e <= 1.0):
            raise InvalidInput(f"RangeConfig: field 'epsilon': must be a number in [0, 1], got {e!r}")
        if self.method == "unicast" and e != 0:
            raise InvalidInput("RangeConfig: field 'epsilon': the unicast method sends exact messages only")
        if not isinstance(self.batch, bool):
            raise InvalidInput(f"RangeConfig: field 'batch': must be True or False, got {self.batch!r}")

    def replace(self, **kw) -> "RangeConfig":
        return replace(self, **kw)


@dataclass(frozen=True)
class ClusterConfig:
    """Topology of a deployment on Ray: DSkype's roles (paper Section 7) for the spatial-keyword
    kind (``engine`` an EngineConfig), the same roles for ranked matching (``engine`` a
    MatchConfig: policies ``hash``, ``attribute`` or ``replicate``, no window shards) and range top-k
    (``engine`` a RangeConfig: policies ``kd`` or ``hash``, one Paint server), and for any
    other kind registered in :mod:`rankcast.runtime.registry` (``engine`` its config).
    ``policy`` None: the kind's default (``defaults.yaml``: prefix, hash, kd)."""

    engine: EngineConfig | MatchConfig | RangeConfig     # or the config of another registered kind
    policy: str | None = None
    partitions: int = _CLUSTER["partitions"]
    window_shards: int = _CLUSTER["window_shards"]
    distributors: int = _CLUSTER["distributors"]
    aggregators: int = _CLUSTER["aggregators"]
    name: str = _CLUSTER["name"]
    namespace: str = _CLUSTER["namespace"]
    batch_size: int = _CLUSTER["batch_size"]          # micro-batch of messages between actors
    max_in_flight: int = _CLUSTER["max_in_flight"]    # batches in flight under publish(wait=False)
    # pipelined publishes that arrive while the partitions are busy wait in the coordinator
    # and go out together, as steps of up to this many messages (0: every call's own steps)
    coalesce: int = _CLUSTER["coalesce"]
    actor_cpus: float = _CLUSTER["actor_cpus"]        # fractional CPUs per actor
    monitor_every: float = _CLUSTER["monitor_every"]  # seconds between automatic load checks; 0: off
    rebalance_threshold: float = _CLUSTER["rebalance_threshold"]   # busiest / mean busy time
    max_partitions: int | None = _CLUSTER["max_partitions"]       # splits stop here (None: 2 x)
    # recovery and delivery (docs/operations.md, "State directory"): durable state of the cluster under
    # <state_dir>/<name> (a path or a pyarrow.fs URI; None: not durable, no recovery)
    state_dir: str | None = _CLUSTER["state_dir"]
    checkpoint_every: float = _CLUSTER["checkpoint_every"]   # seconds of stream between checkpoints
    fsync: bool = _CLUSTER["fsync"]                          # the log reaches the disk, not only the OS
    retention: int = _CLUSTER["retention"]                   # stream positions of deliveries kept
    delivery_interval: float = _CLUSTER["delivery_interval"]  # seconds: pipelined publishes are cut
    # what the roles report and the deliveries hold: "lists" (each changed list whole: updates
    # "objects" / "arrow") or "diff" (the entries that left and entered each list: "diff")
    updates: str = _CLUSTER["updates"]
    # where the roles run on a Ray cluster of several nodes (docs/operations.md, "Placement"):
    # partitions and window shards spread over the nodes or packed by Ray; the coordinator,
    # distributors and aggregators on the head, anywhere, or on the nodes with a custom resource
    placement: str = _CLUSTER["placement"]
    control_node: str = _CLUSTER["control_node"]
    # seconds a role process waits for a node with room before the call says none has one
    placement_timeout: float = _CLUSTER["placement_timeout"]
    options: dict = field(default_factory=dict)        # policy-specific tuning (l1, l2, sample sizes)

    def __post_init__(self):
        try:
            kind = registry.entry(self.engine)
        except TypeError:
            raise InvalidInput(f"ClusterConfig: field 'engine': must be {registry.config_classes()}") from None
        allowed = kind.policies
        if self.policy is None:
            object.__setattr__(self, "policy", kind.default_policy(_CLUSTER))
        if self.policy not in allowed:
            raise InvalidInput(f"ClusterConfig: field 'policy': must be one of {allowed} for {kind.label}"
                               f", got {self.policy!r}")
        for name in ("partitions", "window_shards", "distributors", "aggregators", "batch_size", "max_in_flight"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidInput(f"ClusterConfig: field '{name}': must be an integer >= 1, got {v!r}")
        for name in kind.single_roles:
            if getattr(self, name) != 1:
                raise InvalidInput(f"ClusterConfig: field '{name}': {kind.single_reason}: must be 1, got "
                                   f"{getattr(self, name)!r}")
        c = self.coalesce
        if isinstance(c, bool) or not isinstance(c, int) or c < 0:
            raise InvalidInput(f"ClusterConfig: field 'coalesce': must be an integer >= 0, got {c!r}")
        if not (0 < self.actor_cpus <= 64):
            raise InvalidInput("ClusterConfig: field 'actor_cpus': must be in (0, 64]")
        for name, low in (("monitor_every", 0.0), ("rebalance_threshold", 1.0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v >= low):
                raise InvalidInput(f"ClusterConfig: field '{name}': must be a finite number >= {low:g}, got {v!r}")
        mp = self.max_partitions
        if mp is not None and (isinstance(mp, bool) or not isinstance(mp, int) or mp < self.partitions):
            raise InvalidInput(f"ClusterConfig: field 'max_partitions': must be None or an integer >= "
                               f"partitions ({self.partitions}), got {mp!r}")
        for name, low in (("checkpoint_every", 0.0), ("delivery_interval", 0.0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v >= low):
                raise InvalidInput(f"ClusterConfig: field '{name}': must be a finite number >= {low:g}, got {v!r}")
        r = self.retention
        if isinstance(r, bool) or not isinstance(r, int) or r < 1:
            raise InvalidInput(f"ClusterConfig: field 'retention': must be an integer >= 1, got {r!r}")
        if self.updates not in CLUSTER_UPDATES:
            raise InvalidInput(f"ClusterConfig: field 'updates': must be one of {CLUSTER_UPDATES}, got {self.updates!r}")
        if self.placement not in PLACEMENTS:
            raise InvalidInput(f"ClusterConfig: field 'placement': must be one of {PLACEMENTS}, got {self.placement!r}")
        if not isinstance(self.control_node, str) or not self.control_node:
            raise InvalidInput("ClusterConfig: field 'control_node': must be 'head', 'any' or the name of a "
                               f"custom Ray resource, got {self.control_node!r}")
        pt = self.placement_timeout
        if isinstance(pt, bool) or not isinstance(pt, (int, float)) or not (math.isfinite(pt) and pt > 0):
            raise InvalidInput(f"ClusterConfig: field 'placement_timeout': must be a positive number, got {pt!r}")
        if self.state_dir is not None and (not isinstance(self.state_dir, str) or not self.state_dir):
            raise InvalidInput("ClusterConfig: field 'state_dir': must be None or a non-empty path or URI")
        if not isinstance(self.name, str) or not self.name:
            raise InvalidInput("ClusterConfig: field 'name': must be a non-empty string")

    @property
    def partition_cap(self) -> int:
        """The most partitions that load-monitoring splits may create."""
        return self.max_partitions if self.max_partitions is not None else 2 * self.partitions

    @property
    def kind(self) -> str:
        """The name of the kind of ``engine`` (:mod:`rankcast.runtime.registry`)."""
        return registry.entry(self.engine).name

    def replace(self, **kw) -> "ClusterConfig":
        return replace(self, **kw)

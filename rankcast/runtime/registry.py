"""Which kinds there are: the one place that names them.

A kind is a subscription language with its score. Everything that differs by kind outside
the kind's own package is a field of its :class:`KindEntry` here: the config of a cluster
(:class:`~rankcast.config.ClusterConfig` checks its engine config and policy against it), the
cluster handle (``rc.Cluster``: how a call's update arrays become objects or an Arrow table,
what a bulk load and a replay read), the ingest path and the command line (the kind's table
kinds, ``rankcast load``, ``rankcast run``). The runtime, config, ingest and CLI import no kind:
they ask the registry, which names classes and functions as ``"module:attr"`` strings,
imported when first used (so that ``rankcast.config`` can read the registry while the
kinds, which import the config, are not loaded).

A new kind is one package under ``rankcast/kinds/`` (its config class, its engine, its
coordinator implementing :class:`~rankcast.runtime.kind.KindCoordinator` and its roles) and one
:func:`register` call, here or in the code that uses it::

    registry.register(KindEntry("toy", ToyConfig, ToyCoordinator, engine=ToyEngine,
                                label="toy top-k", policies=("hash",)))
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, field
from typing import Any, Iterator

__all__ = ["KindEntry", "TableSpec", "register", "unregister", "entry", "by_name", "kinds", "names", "coordinator_class",
           "table_spec", "publish_table_of", "config_classes", "load", "KINDS"]

Ref = Any       # an object, or its "module:attr" name (attr may be dotted), imported when used


def load(ref: Ref):
    """The object ``ref`` names (``"module:attr"``, imported now), or ``ref`` itself."""
    if not isinstance(ref, str):
        return ref
    module, _, attr = ref.partition(":")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _ref_name(ref: Ref) -> str:
    """``"module:qualname"`` of a class or of its name."""
    return ref if isinstance(ref, str) else f"{ref.__module__}:{ref.__qualname__}"


@dataclass(frozen=True)
class TableSpec:
    """A kind of table the ingest path reads (a bulk load's subscriptions, a replay's stream).

    ``name`` names its rows in errors ("subscription", "event", ...). ``columns``: the columns
    a CSV file's cells are read as strings for (Ref to a tuple; None: the message columns).
    ``conform``: ``conform(table, name) -> table`` types a CSV or JSONL table's cells (no value
    checks); None: nested rows, which CSV cannot hold and which are typed as they stream
    (``jsonl(path, name) -> table`` reads a JSONL file of them). ``detect(table) -> bool``
    tells a replayed file of this kind's stream from the others' (None: the fallback)."""

    name: str
    columns: Ref = None
    conform: Ref = None
    jsonl: Ref = None
    detect: Ref = None

    @property
    def nested(self) -> bool:
        return self.conform is None

    def conformed(self, table):
        """``table`` typed as a table of this kind (nested rows: as it is)."""
        return table if self.conform is None else load(self.conform)(table, self.name)


@dataclass(frozen=True)
class KindEntry:
    """A kind and everything the runtime, config, client, ingest and CLI need to know of it.

    - ``name``: ``Cluster.kind``, ``rankcast run --kind``; ``label``: the kind in messages
      ("ranked matching"); ``serves``: what a cluster of it takes, in the CLI's refusals.
    - ``config``, ``coordinator``, ``engine``: its engine config class, its coordinator (a
      :class:`~rankcast.runtime.kind.KindCoordinator`) and its single-process engine.
    - ``policies``: the placement policies of ``ClusterConfig.policy``; the default is the
      value of ``policy_setting`` in ``defaults.yaml``'s cluster section (``RANKCAST_<KEY>``
      overrides it), else the first policy. ``single_roles``: ``ClusterConfig`` fields that
      must be 1 for this kind, and why (``single_reason``).
    - results: ``result`` is the class of a result (``rc.Update``, ``rc.Match``), built as
      ``result(key, ((item, score), ...))``; ``key`` / ``item`` name the Arrow columns of
      ``updates="arrow"``; ``by_key``: results in key order (else in the order of the call's
      items: one per event); ``diffs_by_key``: diff tables in key order too (False: the
      roles' order, each key's rows together, as the kind's engine leaves them);
      ``publish_options``: keyword arguments ``publish`` passes on.
    - tables: ``subscription_table`` (bulk load; ``rankcast load <load_name>``) and
      ``publish_table`` (replay); ``distinct_publish_ids``: one publish call takes each id
      once (a replay cuts its table where an id comes back); ``pre_encode``: the client
      encodes every other bulk-load part with a copy of the coordinator's encoder
      (``encoder_copy``).
    - ``file_fields``: config fields that a YAML cluster config gives as a JSON file, and the
      function that makes the value from the file's content."""

    name: str
    config: Ref
    coordinator: Ref
    engine: Ref = None
    label: str = ""
    serves: str = ""
    policies: tuple[str, ...] = ("hash",)
    policy_setting: str | None = None
    single_roles: tuple[str, ...] = ()
    single_reason: str = ""
    result: Ref = "rankcast.model:Update"
    key: str = "subscription_id"
    item: str = "message_id"
    by_key: bool = True
    diffs_by_key: bool = True
    publish_options: tuple[str, ...] = ()
    subscription_table: TableSpec | None = None     # None: "<name> subscription" (nested rows)
    publish_table: TableSpec | None = None          # None: "<name> message" (nested rows)
    load_name: str = "subscriptions"
    distinct_publish_ids: bool = False
    pre_encode: bool = False
    file_fields: dict = field(default_factory=dict)

    def __post_init__(self):
        if not self.label:
            object.__setattr__(self, "label", self.name)
        if self.subscription_table is None:
            object.__setattr__(self, "subscription_table", TableSpec(f"{self.name} subscription"))
        if self.publish_table is None:
            object.__setattr__(self, "publish_table", TableSpec(f"{self.name} message"))
        if not self.serves:
            object.__setattr__(self, "serves", f"{self.label} ({self.subscription_table.name}s and "
                                               f"{self.publish_table.name}s)")

    @staticmethod
    def load(ref: Ref):
        """The object ``ref`` names (see :func:`load`)."""
        return load(ref)

    @property
    def config_name(self) -> str:
        """The config class's name (``MatchConfig``), without importing it."""
        return _ref_name(self.config).rpartition(":")[2].rpartition(".")[2]

    def config_class(self) -> type:
        return load(self.config)

    def coordinator_class(self) -> type:
        """The coordinator class, checked: one that leaves a method of the Kind interface
        out is refused here, before a cluster starts."""
        cls = load(self.coordinator)
        if inspect.isabstract(cls):
            missing = ", ".join(sorted(cls.__abstractmethods__))
            raise TypeError(f"kind {self.name!r}: coordinator {cls.__name__} does not implement {missing} "
                            f"(rankcast.runtime.kind.KindCoordinator)")
        return cls

    def engine_class(self) -> type:
        if self.engine is None:
            raise TypeError(f"kind {self.name!r} has no single-process engine")
        return load(self.engine)

    def default_policy(self, settings: dict) -> str:
        """The policy of a ClusterConfig that names none (``settings``: the cluster defaults)."""
        if self.policy_setting is not None and settings.get(self.policy_setting) is not None:
            return settings[self.policy_setting]
        return self.policies[0]

    def objects(self, arrays) -> list:
        """Result objects from update arrays (keys, offsets, item ids, scores)."""
        from rankcast.common.updates import results_from_arrays
        return results_from_arrays(*arrays, cls=load(self.result), by_key=self.by_key)

    def arrow(self, arrays):
        """The Arrow table of update arrays (``updates="arrow"``)."""
        from rankcast.common.updates import updates_table
        return updates_table(*arrays, key=self.key, item=self.item, by_key=self.by_key)

    def diffs(self, arrays):
        """The Arrow table of diff arrays (``updates="diff"``: keys, rank, item ids, scores,
        sign), by key when ``by_key`` and ``diffs_by_key`` (a stable sort: the parts of
        several roles, each in key order, merged; a key's rows, together, keep their order);
        empty whole-list arrays (no change) give an empty table."""
        import numpy as np
        from rankcast.common.updates import diff_table
        if len(arrays) != 5:
            if len(arrays[0]):
                raise ValueError("diffs: expected diff arrays, got whole lists")
            arrays = ([], [], [], [], [])
        keys = np.asarray(arrays[0])
        if self.by_key and self.diffs_by_key and len(keys) > 1 and (keys[1:] < keys[:-1]).any():
            order = np.argsort(keys, kind="stable")
            arrays = [np.asarray(c)[order] for c in arrays]
        return diff_table(*arrays, key=self.key, item=self.item)

    def matches(self, cfg) -> bool:
        """Whether ``cfg`` is an engine config of this kind (its class or a subclass)."""
        if not isinstance(self.config, str):
            return isinstance(cfg, self.config)
        want = self.config
        return any(f"{c.__module__}:{c.__qualname__}" == want for c in type(cfg).__mro__)


KINDS: dict[str, KindEntry] = {}


def register(kind: KindEntry) -> KindEntry:
    """Add a kind (or replace the one of that name); returns it."""
    if not isinstance(kind, KindEntry):
        raise TypeError(f"register: expected a KindEntry, got {type(kind).__name__}")
    for other in KINDS.values():
        if other.name != kind.name and _ref_name(other.config) == _ref_name(kind.config):
            raise ValueError(f"register: {kind.config_name} is the config of kind {other.name!r} already")
    KINDS[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    """Remove the kind called ``name`` (tests of a kind defined on the fly)."""
    KINDS.pop(name, None)


def kinds() -> Iterator[KindEntry]:
    """Every registered kind, in registration order."""
    return iter(list(KINDS.values()))


def names() -> tuple[str, ...]:
    return tuple(KINDS)


def by_name(name: str) -> KindEntry:
    try:
        return KINDS[name]
    except KeyError:
        raise KeyError(f"no kind named {name!r} (kinds: {', '.join(KINDS)})") from None


def entry(cfg) -> KindEntry:
    """The kind of an engine configuration (an instance of a registered config class);
    TypeError for anything else."""
    for kind in reversed(list(KINDS.values())):     # the latest registered wins (a subclass)
        if kind.matches(cfg):
            return kind
    raise TypeError(f"no kind is registered for a {type(cfg).__name__} "
                    f"(kinds: {', '.join(k.name for k in KINDS.values())})")


def coordinator_class(ccfg) -> type:
    """The coordinator class of the kind of ``ccfg.engine``."""
    return entry(ccfg.engine).coordinator_class()


def config_classes() -> str:
    """The registered engine config classes, for messages: "an EngineConfig (spatial-keyword),
    a MatchConfig (ranked matching) or a RangeConfig (range top-k)"."""
    parts = [f"{'an' if k.config_name[0] in 'AEIOU' else 'a'} {k.config_name} ({k.label})" for k in KINDS.values()]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " or " + parts[-1]


def table_spec(name: str | None) -> TableSpec | None:
    """The table kind called ``name`` (a kind's subscription or publish table), or None."""
    for kind in KINDS.values():
        for spec in (kind.subscription_table, kind.publish_table):
            if spec.name == name:
                return spec
    return None


def publish_table_of(table) -> tuple[KindEntry, TableSpec]:
    """Whose stream a replayed table is: the kind whose publish table's ``detect`` accepts
    it, else the one without a ``detect`` (the fallback)."""
    fallback = None
    for kind in KINDS.values():
        spec = kind.publish_table
        if spec.detect is None:
            fallback = fallback or (kind, spec)
        elif load(spec.detect)(table):
            return kind, spec
    if fallback is None:
        raise TypeError("no kind's stream matches the table's columns")
    return fallback


_INGEST = "rankcast.ingest"

register(KindEntry(
    "spatial", "rankcast.config:EngineConfig", "rankcast.kinds.spatial.roles.coordinator:Coordinator",
    engine="rankcast.kinds.spatial.engine:Engine", label="spatial-keyword",
    serves="spatial-keyword subscriptions",
    policies=("hash", "location", "keyword", "prefix", "spatial-first", "keyword-first"), policy_setting="policy",
    subscription_table=TableSpec("subscription", f"{_INGEST}.tables:SUBSCRIPTION_COLUMNS",
                                 f"{_INGEST}.readers:conform_spatial"),
    publish_table=TableSpec("message", f"{_INGEST}.tables:MESSAGE_COLUMNS", f"{_INGEST}.readers:conform_spatial"),
    pre_encode=True, file_fields={"vocabulary": "rankcast.kinds.spatial.text:Vocabulary.from_dict"}))
register(KindEntry(
    "matching", "rankcast.config:MatchConfig", "rankcast.kinds.matching.roles:MatchCoordinator",
    engine="rankcast.kinds.matching.matcher:Matcher", label="ranked matching",
    policies=("hash", "attribute", "replicate"), policy_setting="match_policy",
    result="rankcast.model:Match", key="event_id", item="expression_id", by_key=False, publish_options=("k",),
    subscription_table=TableSpec("expression", jsonl=f"{_INGEST}.match_tables:read_match_jsonl"),
    publish_table=TableSpec("event", jsonl=f"{_INGEST}.match_tables:read_match_jsonl",
                            detect=f"{_INGEST}.match_tables:is_event_table"),
    load_name="expressions"))
register(KindEntry(
    "range", "rankcast.config:RangeConfig", "rankcast.kinds.range.roles:RangeCoordinator",
    engine="rankcast.kinds.range.engine:RangeEngine", label="range top-k",
    policies=("kd", "hash"), policy_setting="range_policy",
    single_roles=("distributors", "aggregators"),
    single_reason="range top-k runs its Paint servers in the partitions, and no aggregator",
    item="object_id", diffs_by_key=False,
    subscription_table=TableSpec("range subscription", f"{_INGEST}.tables:RANGE_SUBSCRIPTION_COLUMNS",
                                 f"{_INGEST}.range_tables:conform_range"),
    publish_table=TableSpec("object update", f"{_INGEST}.tables:OBJECT_UPDATE_COLUMNS",
                            f"{_INGEST}.range_tables:conform_range",
                            detect=f"{_INGEST}.range_tables:is_object_update_table"),
    load_name="ranges", distinct_publish_ids=True))

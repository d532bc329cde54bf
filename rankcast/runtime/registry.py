"""Which kind serves which configuration: the one place the runtime learns of the kinds.

A kind is named by its engine configuration class (``rc.EngineConfig``, ``rc.MatchConfig``,
``rc.RangeConfig``); the runtime looks its coordinator up here and imports nothing of a
kind itself.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from rankcast.config import EngineConfig, MatchConfig, RangeConfig

__all__ = ["KindEntry", "register", "entry", "coordinator_class", "KINDS"]


@dataclass(frozen=True)
class KindEntry:
    """A kind: its name, its engine configuration class and its coordinator
    (``"module:Class"``, imported when a cluster of the kind starts)."""
    name: str
    config: type
    coordinator: str

    def load(self, ref: str):
        module, _, attr = ref.partition(":")
        return getattr(importlib.import_module(module), attr)


KINDS: dict[type, KindEntry] = {}


def register(kind: KindEntry) -> KindEntry:
    """Add (or replace) a kind; returns it."""
    KINDS[kind.config] = kind
    return kind


def entry(cfg) -> KindEntry:
    """The kind of an engine configuration (an instance of a registered config class)."""
    for cls in type(cfg).__mro__:
        if cls in KINDS:
            return KINDS[cls]
    raise TypeError(f"no kind is registered for a {type(cfg).__name__} "
                    f"(kinds: {', '.join(k.name for k in KINDS.values())})")


def coordinator_class(ccfg):
    """The coordinator class of the kind of ``ccfg.engine``."""
    kind = entry(ccfg.engine)
    return kind.load(kind.coordinator)


register(KindEntry("spatial", EngineConfig, "rankcast.kinds.spatial.roles.coordinator:Coordinator"))
register(KindEntry("matching", MatchConfig, "rankcast.kinds.matching.roles:MatchCoordinator"))
register(KindEntry("range", RangeConfig, "rankcast.kinds.range.roles:RangeCoordinator"))

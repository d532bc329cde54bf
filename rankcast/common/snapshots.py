"""The snapshot convention every single-process engine follows (``rc.Engine``,
``rc.Matcher``, ``rc.RangeEngine``, and ``rc.Covering``).

- ``eng.snapshot()`` returns a plain ``dict``: picklable, and independent of the engine (the
  engine's later calls do not change it; it holds copies, never the engine's own arrays).
  ``snap["kind"]`` names the kind it was taken of, ``snap["version"]`` its layout; the other
  keys are the kind's own and not part of the contract.
- ``EngineClass.restore(snap)`` is a classmethod that returns a **new** engine in exactly the
  state of the snapshot: the same ``topk``, ``stats()`` counters and results of every later
  call as the engine it was taken of would give. A snapshot of another kind is an
  ``rc.InvalidInput`` naming both kinds.
"""
from __future__ import annotations

from rankcast.errors import InvalidInput

__all__ = ["SNAPSHOT_VERSION", "tagged", "checked"]

SNAPSHOT_VERSION = 1


def tagged(kind: str, state: dict) -> dict:
    """``state`` as a snapshot of ``kind`` (the ``kind`` and ``version`` keys added)."""
    return {"kind": kind, "version": SNAPSHOT_VERSION, **state}


def checked(snap, kind: str, who: str, *, untagged: bool = False) -> dict:
    """``snap`` if it is a snapshot of ``kind`` (``who``: the class restoring it, for the
    message). ``untagged``: also accept a dict with no ``kind`` key (a snapshot taken before
    the key existed)."""
    if not isinstance(snap, dict):
        raise InvalidInput(f"{who}.restore: expected the dict returned by snapshot(), got {type(snap).__name__}")
    got = snap.get("kind")
    if got is None and untagged:
        return snap
    if got != kind:
        raise InvalidInput(f"{who}.restore: field 'kind': a snapshot of a {got!r} engine, not of {kind!r}")
    version = snap.get("version")
    if version != SNAPSHOT_VERSION:
        raise InvalidInput(f"{who}.restore: field 'version': snapshot layout {version!r}, this code reads "
                           f"{SNAPSHOT_VERSION}")
    return snap

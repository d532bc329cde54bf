"""One larger randomized run per kind, exact against its oracle after every call (the full
tier: ``-m slow``): thousands of subscriptions with churn, thousands of messages, events or
object updates, where the small runs of the other oracle tests hold a few dozen."""
from __future__ import annotations

import bisect
import heapq

import numpy as np
import pytest

import rankcast as rc
from rankcast.baselines import BruteForceEngine
from rankcast.config import INDEX_SCORINGS
from rankcast.kinds.spatial.testing import play, random_calls
from rankcast.testing import (ReferenceEngine, assert_matches_equal, brute_match, random_events,
                              random_expressions)

pytestmark = pytest.mark.slow

BOUNDS = (0.0, 0.0, 10.0, 10.0)


# ----------------------------------------------------------------------------- spatial keyword
@pytest.mark.parametrize("time_window", [False, True], ids=["count", "time"])
def test_spatial_thousands_of_subscriptions_engine_and_cluster(time_window):
    """About 2,400 subscriptions and 4,800 messages in 300 calls (subscriptions coming and
    going all along, ties, malformed calls), on rc.Engine and the in-process cluster, against
    the plain-Python reference (and, for the count window, the brute-force engine) after
    every call: every outcome, every update and the top-k of every live subscription."""
    calls = random_calls(1 + time_window, 300, bounds=BOUNDS, vocab=200, sub_batch=60, max_publish=48,
                         time_window=time_window)
    assert sum(len(c.arg) for c in calls if c.op == "subscribe") > 2000
    assert sum(len(c.arg) for c in calls if c.op == "publish") > 4000
    cfg = rc.EngineConfig(bounds=BOUNDS, **({"window_seconds": 300.0} if time_window else {"window": 500}))
    cl = rc.Cluster.start(rc.ClusterConfig(engine=cfg, policy="hash" if time_window else "prefix", partitions=3,
                                           window_shards=2, options={"runtime": "inproc"}))
    targets = {"engine": rc.Engine(cfg), "cluster": cl, "reference": ReferenceEngine(cfg)}
    if not time_window:
        targets["brute"] = BruteForceEngine(cfg)
    try:
        assert play(targets, calls) == len(calls)
        st = cl.stats()
        assert st["window"] == len(targets["reference"].msgs) and st["subscriptions"] > 1500
    finally:
        cl.shutdown()


# ----------------------------------------------------------------------------- ranked matching
def _matching_script(seed: int):
    """5,000 expressions, then 50 rounds of churn (50 leave, 50 arrive) each with 10 events
    (500 in all) and a k among 1, 5, 10 and 100."""
    rng = np.random.default_rng(seed)
    live: dict[int, rc.Expression] = {}
    script = []
    nid, nev = 0, 0
    for _ in range(5):
        new = random_expressions(rng, nid, 1000)
        nid += 1000
        script.append(("subscribe", new))
        live.update((e.id, e) for e in new)
    for _ in range(50):
        gone = [int(i) for i in rng.choice(list(live), 50, replace=False)]
        script.append(("unsubscribe", gone))
        for i in gone:
            del live[i]
        new = random_expressions(rng, nid, 50)
        nid += 50
        script.append(("subscribe", new))
        live.update((e.id, e) for e in new)
        evs = random_events(rng, nev, 10)
        nev += 10
        script.append(("publish", (evs, int(rng.choice([1, 5, 10, 100])), list(live.values()))))
    return script


@pytest.mark.parametrize("scoring", ["static", "relaxed", "weighted"])
def test_matching_thousands_of_expressions_every_index(scoring):
    """The same calls on every index serving the scoring (and the default), each publish's
    matches equal to brute force (computed once per scoring from the live expressions)."""
    script = _matching_script(7)
    wants = {n: [brute_match(live, ev, scoring, k) for ev in evs]
             for n, (op, arg) in enumerate(script) if op == "publish" for evs, k, live in [arg]}
    indexes = [ix for ix, served in INDEX_SCORINGS.items() if scoring in served]
    assert len(indexes) >= 6
    for index in indexes:
        m = rc.Matcher(rc.MatchConfig(scoring=scoring, index=index, k=10))
        for n, (op, arg) in enumerate(script):
            if op == "publish":
                evs, k, _ = arg
                assert_matches_equal(m.publish(evs, k=k), wants[n], evs)
            else:
                getattr(m, op)(arg)
        assert m.stats()["subscriptions"] == 5000


# ----------------------------------------------------------------------------- range top-k
class RangeOracle:
    """Brute force for many subscriptions, kept incrementally and checked against itself:
    the live objects of each x value in (y, id) order, and each subscription's top-k as a
    sorted list of (y, id). An object that arrives at an x enters the lists, of the
    subscriptions covering x, that are short or whose last entry it beats; one that leaves
    an x makes each list that held it recomputed from scratch (:meth:`brute`: the first k of
    every x value in the range, merged). :meth:`check_self` compares every list with
    :meth:`brute`."""

    def __init__(self, xs, k: int):
        self.xs = list(xs)                       # the x values objects take, ascending
        self.k = k
        self.by_x: dict[float, list[tuple[float, int]]] = {x: [] for x in self.xs}
        self.cover: dict[float, set[int]] = {x: set() for x in self.xs}
        self.objs: dict[int, tuple[float, float]] = {}
        self.subs: dict[int, tuple[float, float]] = {}
        self.cur: dict[int, list[tuple[float, int]]] = {}

    def _xs_in(self, lo, hi):
        return self.xs[bisect.bisect_left(self.xs, lo):bisect.bisect_right(self.xs, hi)]

    def brute(self, lo, hi) -> list[tuple[float, int]]:
        return heapq.nsmallest(self.k, (e for x in self._xs_in(lo, hi) for e in self.by_x[x][:self.k]))

    def topk(self, sid) -> list[tuple[int, float]]:
        return [(i, y) for y, i in self.cur[sid]]

    def check_self(self) -> None:
        for sid, (lo, hi) in self.subs.items():
            assert self.cur[sid] == self.brute(lo, hi), sid

    def subscribe(self, subs):
        for s in subs:
            self.subs[s.id] = (s.lo, s.hi)
            self.cur[s.id] = self.brute(s.lo, s.hi)
            for x in self._xs_in(s.lo, s.hi):
                self.cover[x].add(s.id)

    def unsubscribe(self, ids):
        for i in ids:
            lo, hi = self.subs.pop(i)
            del self.cur[i]
            for x in self._xs_in(lo, hi):
                self.cover[x].discard(i)

    def publish(self, ups) -> list[tuple[int, tuple]]:
        """Apply ``ups`` in order; the (subscription id, top-k) of every subscription whose
        top-k changed (ids, order or a listed y), in id order."""
        k, before = self.k, {}
        for u in ups:
            old = self.objs.pop(u.id, None)
            if old is not None:
                e = (old[1], u.id)
                self.by_x[old[0]].remove(e)
                for sid in self.cover[old[0]]:
                    if e in self.cur[sid]:
                        before.setdefault(sid, self.cur[sid])
                        self.cur[sid] = self.brute(*self.subs[sid])
            if u.y is not None:
                x = old[0] if u.x is None else u.x
                e = (u.y, u.id)
                bisect.insort(self.by_x[x], e)
                self.objs[u.id] = (x, u.y)
                for sid in self.cover[x]:
                    c = self.cur[sid]
                    if len(c) < k or e < c[-1]:
                        if sid not in before:
                            before[sid] = c
                            self.cur[sid] = c = list(c)
                        bisect.insort(c, e)
                        del c[k:]
        return [(sid, tuple((i, y) for y, i in self.cur[sid])) for sid in sorted(before)
                if self.cur[sid] != before[sid]]


def test_range_thousands_of_subscriptions_and_object_updates():
    """5,000 range subscriptions (ends on and between the objects' x values) and 20,000
    object updates (inserts, moves, y changes, deletes, re-inserts) in calls of up to 12, with
    subscription churn: after every call, publish returns exactly the subscriptions whose
    top-k changed, each with its new list (so the engine's lists follow the oracle's call by
    call); every 100 calls and at the end, topk of every subscription equals the oracle's,
    and the oracle's lists equal their recomputation from scratch."""
    rng = np.random.default_rng(11)
    xs = np.arange(0.0, 200.0, 1.0)
    k = 3
    eng = rc.RangeEngine(rc.RangeConfig(k=k, method="paint-sparse", epsilon=0.5))
    o = RangeOracle(xs.tolist(), k)
    nsub = 0

    def new_subs(n):
        nonlocal nsub
        out = []
        for _ in range(n):
            lo = float(rng.integers(-2, 400)) / 2
            hi = lo + float(rng.integers(0, 40)) / 2
            out.append(rc.RangeSubscription(nsub, lo, hi))
            nsub += 1
        return out

    first = new_subs(5000)
    eng.subscribe(first)
    o.subscribe(first)
    next_obj, done, calls = 0, 0, 0
    while done < 20_000:
        ups, used = [], set()
        for _ in range(int(rng.integers(1, 13))):
            r = rng.random()
            if r < 0.3 or len(o.objs) < 50:
                i = next_obj if rng.random() < 0.9 or not o.objs else int(rng.integers(0, next_obj))
                if i in o.objs or i in used:
                    i = next_obj
                next_obj = max(next_obj, i + 1)
                ups.append(rc.ObjectUpdate(i, float(rng.choice(xs)), float(rng.integers(0, 50))))
            else:
                i = int(rng.choice(list(o.objs)))
                if i in used:
                    continue
                r2 = rng.random()
                ups.append(rc.ObjectUpdate(i) if r2 < 0.2 else
                           rc.ObjectUpdate(i, float(rng.choice(xs)), float(rng.integers(0, 50))) if r2 < 0.4 else
                           rc.ObjectUpdate(i, None, float(rng.integers(0, 50))))
            used.add(ups[-1].id)
        got = [(u.subscription_id, tuple(u.topk)) for u in eng.publish(ups)]
        assert got == o.publish(ups), calls
        done += len(ups)
        calls += 1
        if calls % 25 == 0:
            gone = [int(i) for i in rng.choice(list(o.subs), 50, replace=False)]
            eng.unsubscribe(gone)
            o.unsubscribe(gone)
            more = new_subs(50)
            eng.subscribe(more)
            o.subscribe(more)
        if calls % 100 == 0:
            assert all(eng.topk(s) == o.topk(s) for s in o.subs)
            o.check_self()
    assert all(eng.topk(s) == o.topk(s) for s in o.subs)
    o.check_self()
    assert len(o.subs) == 5000 and len(o.objs) > 1000

"""One verb set across kinds: every single-process engine (``rc.Engine``, ``rc.Matcher``,
``rc.RangeEngine``) has the same verbs, and ``snapshot()`` / ``Kind.restore(snap)`` round-trip
exactly. Each kind runs a random workload (valid and invalid calls); midway both the engine
and the kind's brute force are snapshotted, run on for a few calls, and then restored into
fresh engines (one from the dict as it is, one through pickle), which replay those calls and
then go on with the others in lockstep: after every call each engine's result (or error) and
its state (``topk`` of every live subscription, ``len``, ``stats`` counters) equal the
engine it was restored from exactly, and the kind's brute force (ids exactly, scores within
1e-9)."""
from __future__ import annotations

import pickle

import numpy as np
import pyarrow as pa
import pytest

import rankcast as rc
from rankcast.baselines.brute import BruteForceCore
from rankcast.baselines.matching import ScanCore
from rankcast.baselines.rangetopk import brute_topk
from rankcast.config import INDEX_SCORINGS
from rankcast.model import Update
from rankcast.testing import random_events, random_expressions

TOL = 1e-9
FORMS = ("objects", "objects", "arrow", "none")


# ----------------------------------------------------------------------------- comparing

def _outcome(eng, verb: str, args: tuple, kw: dict):
    """What one call gave: ("ok", result) or ("error", the exception's type)."""
    try:
        return "ok", getattr(eng, verb)(*args, **kw)
    except (rc.InvalidInput, rc.UnknownSubscription) as e:
        return "error", type(e)


def _pairs_close(a, b, tol: float) -> bool:
    a, b = list(a), list(b)
    return [i for i, _ in a] == [i for i, _ in b] and all(abs(x - y) <= tol for (_, x), (_, y) in zip(a, b))


def _same_result(a, b, tol: float) -> bool:
    """Equal results of one call: exactly (``tol`` None) or ids exactly and scores within tol."""
    if tol is None:
        if isinstance(a, pa.Table):
            return isinstance(b, pa.Table) and a.equals(b)
        return a == b
    if isinstance(a, pa.Table):
        if not isinstance(b, pa.Table) or a.column_names != b.column_names:
            return False
        ra, rb = a.to_pylist(), b.to_pylist()
        return len(ra) == len(rb) and all(
            {k: v for k, v in x.items() if k != "score"} == {k: v for k, v in y.items() if k != "score"}
            and (x["score"] is None) == (y["score"] is None)
            and (x["score"] is None or abs(x["score"] - y["score"]) <= tol) for x, y in zip(ra, rb))
    if isinstance(a, list):
        if not isinstance(b, list) or len(a) != len(b):
            return False
        key = (lambda u: u.subscription_id) if a and isinstance(a[0], Update) else (lambda m: m.event_id)
        return all(key(x) == key(y) and _pairs_close(x.topk, y.topk, tol) for x, y in zip(a, b))
    return a == b


def _assert_same_outcome(got, want, tol, where):
    assert got[0] == want[0], (where, got, want)
    if got[0] == "error":
        assert got[1] is want[1], (where, got, want)
    else:
        assert _same_result(got[1], want[1], tol), (where, got[1], want[1])


class Lockstep:
    """Runs ``calls`` on the engine and its brute force; snapshots both at ``cut``, restores
    them ``lag`` calls later (replaying those calls on the restored ones) and from then on runs
    all four. ``state(eng)``: what must be equal after every call (a dict of comparable
    values; ``"topk"``: a dict of ranked lists compared with ``tol`` against the brute force)."""

    def __init__(self, cls, make, make_ref, state):
        self.cls, self.make, self.make_ref, self.state = cls, make, make_ref, state

    def run(self, calls, cut: int, lag: int):
        eng, ref = self.make(), self.make_ref()
        twins: list[tuple[object, object]] = []        # (restored engine, the engine it mirrors)
        history: dict[int, list] = {id(eng): [], id(ref): []}
        snaps = None
        for i, (verb, args, kw) in enumerate(calls):
            if i == cut:
                snaps = eng.snapshot(), ref.snapshot()
            if i == cut + lag:
                # the engine's from the dict as it is (later calls must not have changed it),
                # the brute force's through pickle
                restored = [(self.cls.restore(snaps[0]), eng),
                            (self.cls.restore(pickle.loads(pickle.dumps(snaps[1]))), ref)]
                for twin, origin in restored:
                    assert type(getattr(twin, "core", None)) is type(getattr(origin, "core", None))
                    for j in range(cut, i):
                        v, a, k = calls[j]
                        _assert_same_outcome(_outcome(twin, v, a, k), history[id(origin)][j], None, ("replay", j))
                    self._check(twin, origin, None, ("replayed", i))
                twins += restored
            want = _outcome(eng, verb, args, kw)
            history[id(eng)].append(want)
            history[id(ref)].append(_outcome(ref, verb, args, kw))
            _assert_same_outcome(history[id(ref)][-1], want, TOL, i)
            self._check(ref, eng, TOL, i)
            for twin, origin in twins:
                _assert_same_outcome(_outcome(twin, verb, args, kw), history[id(origin)][-1], None, i)
                self._check(twin, origin, None, i)
        assert twins, "the workload ended before the restore"
        return eng

    def _check(self, a, b, tol, where):
        sa, sb = self.state(a), self.state(b)
        ta, tb = sa.pop("topk", {}), sb.pop("topk", {})
        assert sa == sb, (where, sa, sb)
        assert ta.keys() == tb.keys(), where
        for s in ta:
            if tol is None:
                assert ta[s] == tb[s], (where, s, ta[s], tb[s])
            else:
                assert _pairs_close(ta[s], tb[s], tol), (where, s, ta[s], tb[s])


# ----------------------------------------------------------------------------- spatial-keyword

WORDS = [f"w{i}" for i in range(12)]


def _loc(rng):
    return float(rng.choice([0.0, 0.25, 0.5, 1.0, rng.random()])), float(rng.choice([0.0, 0.5, rng.random()]))


def _text(rng, lo, hi):
    return " ".join(rng.choice(WORDS, int(rng.integers(lo, hi + 1))))


def _spatial_calls(rng, n_calls: int, time_window: bool):
    calls, live = [], []
    sid, mid, t = 0, 0, 0.0
    for _ in range(n_calls):
        r = rng.random()
        if r < 0.18 or not live:
            subs = []
            for _ in range(int(rng.integers(1, 6))):
                x, y = _loc(rng)
                k, alpha = int(rng.integers(1, 6)), float(rng.choice([0.0, 0.5, 1.0, rng.random()]))
                if rng.random() < 0.3:
                    terms = {str(w): float(rng.choice([1.0, 2.0])) for w in rng.choice(WORDS, 2, replace=False)}
                    subs.append(rc.Subscription(sid, x, y, terms=terms, k=k, alpha=alpha))
                else:
                    subs.append(rc.Subscription(sid, x, y, text=_text(rng, 1, 3), k=k, alpha=alpha))
                sid += 1
            live += [s.id for s in subs]
            calls.append(("subscribe", (subs,), {}))
        elif r < 0.26:
            gone = [int(i) for i in rng.choice(live, min(len(live), int(rng.integers(1, 3))), replace=False)]
            live = [i for i in live if i not in gone]
            calls.append(("unsubscribe", (gone,), {}))
        elif r < 0.30:                   # invalid calls: every engine refuses them alike
            bad = rng.integers(0, 4)
            if bad == 0:
                calls.append(("unsubscribe", ([sid + 1000],), {}))
            elif bad == 1:
                calls.append(("subscribe", ([rc.Subscription(int(rng.choice(live)), 0.5, 0.5, text="w1")],), {}))
            elif bad == 2 and mid:       # an id maybe still in the window
                calls.append(("publish", ([rc.Message(mid - 1, 0.5, 0.5, text="w1", t=t)],), {}))
            else:                        # a time before the last (refused under a time window only)
                calls.append(("publish", ([rc.Message(mid, 0.5, 0.5, text="w2", t=t - 1.0)],), {}))
                mid += 1
        else:
            msgs = []
            for _ in range(int(rng.integers(1, 12))):
                x, y = _loc(rng)
                t += float(rng.integers(0, 3)) * 0.5             # equal times included
                msgs.append(rc.Message(mid, x, y, text="" if rng.random() < 0.1 else _text(rng, 1, 5), t=t))
                mid += 1
            calls.append(("publish", (msgs,), {"updates": str(rng.choice(FORMS))}))
    return calls


def _spatial_state(eng):
    st = eng.stats()
    return {"len": len(eng), "subscriptions": st["subscriptions"], "window": st["window"],
            "published": st["published"], "kind": st["kind"],
            "topk": {i: eng.topk(i) for i in sorted(eng.core.subs.slot_of)}}


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("window, window_seconds", [(25, None), (None, 4.0)])
def test_spatial_snapshot_restore_in_lockstep(seed, window, window_seconds):
    rng = np.random.default_rng(seed)
    cfg = rc.EngineConfig(bounds=(0, 0, 1, 1), window=window, window_seconds=window_seconds, leaf_capacity=4,
                          batch_size=5)
    calls = _spatial_calls(rng, 70, window_seconds is not None)
    run = Lockstep(rc.Engine, lambda: rc.Engine(cfg), lambda: rc.Engine(cfg, core=BruteForceCore), _spatial_state)
    eng = run.run(calls, cut=int(rng.integers(15, 40)), lag=int(rng.integers(0, 6)))
    assert eng.stats()["published"] > 0 and len(eng) > 0


# ----------------------------------------------------------------------------- ranked matching

def _match_calls(rng, n_calls: int):
    calls, live = [], []
    nid, nev = 0, 0
    for _ in range(n_calls):
        r = rng.random()
        if r < 0.3 or not live:
            new = random_expressions(rng, nid, int(rng.integers(1, 15)))
            nid += len(new) + int(rng.integers(0, 3))
            live += [e.id for e in new]
            calls.append(("subscribe", (new,), {}))
        elif r < 0.42:
            gone = [int(i) for i in rng.choice(live, int(rng.integers(1, max(2, len(live) // 3))), replace=False)]
            live = [i for i in live if i not in gone]
            calls.append(("unsubscribe", (gone,), {}))
        elif r < 0.47:
            bad = rng.integers(0, 3)
            if bad == 0:
                calls.append(("unsubscribe", ([nid + 1000],), {}))
            elif bad == 1:
                calls.append(("subscribe", (random_expressions(rng, int(rng.choice(live)), 1),), {}))
            else:
                calls.append(("topk", (int(rng.choice(live)),), {}))       # no meaning: InvalidInput
        else:
            evs = random_events(rng, nev, int(rng.integers(1, 8)))
            nev += len(evs)
            kw = {"updates": str(rng.choice(FORMS))}
            if rng.random() < 0.7:
                kw["k"] = int(rng.choice([1, 3, 5, 40]))
            calls.append(("publish", (evs,), kw))
    return calls


def _match_state(m):
    st = m.stats()
    return {"len": len(m), "subscriptions": st["subscriptions"], "published": st["published"],
            "attributes": st["attributes"], "kind": st["kind"]}


MATCH_PAIRS = [(i, s) for i in ("ir-tree", "sopt-r-tree", "segment-tree", "interval-tree", "r-tree", "be-tree",
                                "scan") for s in ("static", "relaxed", "weighted") if s in INDEX_SCORINGS[i]]


@pytest.mark.parametrize("index, scoring", MATCH_PAIRS)
def test_matching_snapshot_restore_in_lockstep(index, scoring):
    for seed in range(2):
        rng = np.random.default_rng(seed)
        cfg = rc.MatchConfig(scoring=scoring, index=index, k=5, branching=int(rng.choice([2, 3, 8])),
                             rebuild_fraction=0.2, rebuild_min=8)
        calls = _match_calls(rng, 40)
        run = Lockstep(rc.Matcher, lambda: rc.Matcher(cfg), lambda: rc.Matcher(cfg, core=ScanCore), _match_state)
        run.run(calls, cut=int(rng.integers(8, 25)), lag=int(rng.integers(0, 5)))


# ----------------------------------------------------------------------------- range top-k

class BruteRange:
    """The range kind's brute force as an engine (objects and ranges in dicts,
    :func:`rankcast.baselines.rangetopk.brute_topk` after every call); valid input assumed,
    apart from unknown ids in unsubscribe."""

    def __init__(self, k: int):
        self.k = k
        self.objs: dict[int, tuple[float, float]] = {}
        self.subs: dict[int, tuple[float, float]] = {}
        self.core = None

    def __len__(self):
        return len(self.subs)

    def subscribe(self, items):
        self.subs.update((s.id, (s.lo, s.hi)) for s in items)

    def unsubscribe(self, ids):
        if any(i not in self.subs for i in ids):
            raise rc.UnknownSubscription("unknown")
        for i in ids:
            del self.subs[i]

    def _lists(self):
        return {s: brute_topk(self.objs, lo, hi, self.k) for s, (lo, hi) in self.subs.items()}

    def publish(self, ups, updates="objects"):
        before = self._lists()
        for u in ups:
            if u.y is None:
                del self.objs[u.id]
            else:
                self.objs[u.id] = (self.objs[u.id][0] if u.x is None else u.x, u.y)
        after = self._lists()
        out = [Update(s, tuple(after[s])) for s in sorted(self.subs) if before[s] != after[s]]
        if updates == "none":
            return None
        if updates == "arrow":
            rows = [(u.subscription_id, r + 1, i, y) for u in out for r, (i, y) in enumerate(u.topk)]
            rows += [(u.subscription_id, None, None, None) for u in out if not u.topk]
            rows.sort(key=lambda r: (r[0], r[1] or 0))
            return pa.table({"subscription_id": pa.array([r[0] for r in rows], pa.int64()),
                             "rank": pa.array([r[1] for r in rows], pa.int32()),
                             "object_id": pa.array([r[2] for r in rows], pa.int64()),
                             "score": pa.array([r[3] for r in rows], pa.float64())})
        return out

    def topk(self, sub_id):
        lo, hi = self.subs[sub_id]
        return brute_topk(self.objs, lo, hi, self.k)

    def stats(self):
        return {"subscriptions": len(self.subs)}

    def snapshot(self):
        return {"kind": "brute", "k": self.k, "objs": dict(self.objs), "subs": dict(self.subs)}


def _range_calls(rng, n_calls: int):
    xs, ys = np.arange(0, 12, 1.0), np.arange(0, 6, 1.0)     # few values: equal x and y everywhere
    calls, objs, subs = [], {}, []
    sid, oid = 0, 0
    for _ in range(n_calls):
        r = rng.random()
        if r < 0.15 or not subs:
            new = []
            for _ in range(int(rng.integers(1, 8))):
                lo, hi = sorted(rng.choice(np.arange(-1.0, 13.0, 0.5), 2))
                new.append(rc.RangeSubscription(sid, float(lo), float(hi)))
                sid += 1
            subs += [s.id for s in new]
            calls.append(("subscribe", (new,), {}))
        elif r < 0.22:
            gone = [int(i) for i in rng.choice(subs, min(len(subs), int(rng.integers(1, 4))), replace=False)]
            subs = [i for i in subs if i not in gone]
            calls.append(("unsubscribe", (gone,), {}))
        elif r < 0.25:
            calls.append(("unsubscribe", ([sid + 1000],), {}))
        else:
            ups, used = [], set()
            for _ in range(int(rng.integers(1, 9))):
                if rng.random() < 0.35 or not objs:
                    i, oid = oid, oid + 1
                    ups.append(rc.ObjectUpdate(i, float(rng.choice(xs)), float(rng.choice(ys))))
                else:
                    i = int(rng.choice(list(objs)))
                    if i in used:
                        continue
                    r2 = rng.random()
                    if r2 < 0.2:
                        ups.append(rc.ObjectUpdate(i))                                    # delete
                    elif r2 < 0.4:
                        ups.append(rc.ObjectUpdate(i, float(rng.choice(xs)), float(rng.choice(ys))))   # move
                    else:
                        ups.append(rc.ObjectUpdate(i, None, float(rng.choice(ys))))
                u = ups[-1]
                used.add(u.id)
                if u.y is None:
                    del objs[u.id]
                else:
                    objs[u.id] = u
            calls.append(("publish", (ups,), {"updates": str(rng.choice(FORMS))}))
    return calls


def _range_state(eng):
    out = {"len": len(eng), "subscriptions": eng.stats()["subscriptions"],
           "topk": {i: eng.topk(i) for i in sorted(_range_ids(eng))}}
    if isinstance(eng, rc.RangeEngine):
        st = eng.stats()
        out.update({k: st[k] for k in ("kind", "published", "messages_generated", "messages_received",
                                       "subscriptions_changed", "objects")})
    return out


def _range_ids(eng):
    return eng.subs.sid.tolist() if isinstance(eng, rc.RangeEngine) else list(eng.subs)


class _RangeLockstep(Lockstep):
    """The brute force restores itself from its own snapshot (a copy of its dicts)."""

    def run(self, calls, cut, lag):
        cls = self.cls

        class Restore:
            @staticmethod
            def restore(snap):
                if snap.get("kind") == "brute":
                    b = BruteRange(snap["k"])
                    b.objs, b.subs = dict(snap["objs"]), dict(snap["subs"])
                    return b
                return cls.restore(snap)

        self.cls = Restore
        try:
            return super().run(calls, cut, lag)
        finally:
            self.cls = cls

    def _check(self, a, b, tol, where):
        if isinstance(a, BruteRange) or isinstance(b, BruteRange):   # counters: the engine's own
            sa, sb = _range_state(a), _range_state(b)
            for s in (sa, sb):
                for k in ("kind", "published", "messages_generated", "messages_received", "subscriptions_changed",
                          "objects"):
                    s.pop(k, None)
            assert sa == sb, (where, sa, sb)
            return
        super()._check(a, b, tol, where)


@pytest.mark.parametrize("method, epsilon, batch", [("paint-dense", 0.0, True), ("paint-sparse", 0.5, False),
                                                     ("paint-sparse", 0.0, True), ("unicast", 0.0, True)])
def test_range_snapshot_restore_in_lockstep(method, epsilon, batch):
    for seed in range(2):
        rng = np.random.default_rng(seed)
        cfg = rc.RangeConfig(k=int(rng.choice([1, 3])), method=method, epsilon=epsilon, batch=batch)
        calls = _range_calls(rng, 50)
        run = _RangeLockstep(rc.RangeEngine, lambda: rc.RangeEngine(cfg), lambda: BruteRange(cfg.k), _range_state)
        run.run(calls, cut=int(rng.integers(10, 30)), lag=int(rng.integers(0, 6)))


# ----------------------------------------------------------------------------- the verbs themselves

VERBS = ("subscribe", "unsubscribe", "publish", "topk", "stats", "snapshot", "restore", "__len__")


@pytest.mark.parametrize("cls", [rc.Engine, rc.Matcher, rc.RangeEngine])
def test_every_engine_has_the_verbs(cls):
    for verb in VERBS:
        assert callable(getattr(cls, verb, None)), (cls.__name__, verb)
    assert isinstance(cls.__dict__["restore"], classmethod)     # one convention: a new engine
    assert "updates" in cls.publish.__code__.co_varnames


def test_restore_refuses_another_kinds_snapshot():
    eng = rc.Engine(rc.EngineConfig(bounds=(0, 0, 1, 1), window=10))
    m = rc.Matcher(rc.MatchConfig())
    r = rc.RangeEngine(rc.RangeConfig())
    cov = rc.Covering()
    for cls, snap in ((rc.Matcher, eng.snapshot()), (rc.RangeEngine, m.snapshot()), (rc.Engine, r.snapshot()),
                      (rc.Engine, cov.snapshot()), (rc.Covering, eng.snapshot())):
        with pytest.raises(rc.InvalidInput, match="field 'kind'"):
            cls.restore(snap)
    with pytest.raises(rc.InvalidInput, match="snapshot"):
        rc.Matcher.restore(b"bytes")
    bad = {**m.snapshot(), "version": 99}
    with pytest.raises(rc.InvalidInput, match="field 'version'"):
        rc.Matcher.restore(bad)


def test_empty_engines_round_trip():
    for eng in (rc.Engine(rc.EngineConfig(bounds=(0, 0, 1, 1), window_seconds=5.0)), rc.Matcher(),
                rc.RangeEngine(), rc.Covering(k=2)):
        back = type(eng).restore(pickle.loads(pickle.dumps(eng.snapshot())))
        assert type(back) is type(eng) and len(back) == 0
        assert back.stats()["subscriptions" if not isinstance(eng, rc.Covering) else "expressions"] == 0


def test_matcher_topk_has_no_meaning():
    m = rc.Matcher(rc.MatchConfig(scoring="static", index="scan"))
    m.subscribe([rc.Expression(1, [rc.Predicate("x", "<", 3)])])
    with pytest.raises(rc.InvalidInput, match="no standing top-k"):
        m.topk(1)
    assert len(m) == 1 and m.stats()["kind"] == "ranked-matching"


def test_match_topk_field_and_its_alias():
    (m,) = rc.Matcher(rc.MatchConfig(scoring="static", index="scan")).publish([rc.Event(7, {"x": 1})])
    assert m.topk == () and m.top is m.topk
    a = rc.Match(7, ((1, 2.0),))
    assert a.topk == a.top == ((1, 2.0),)
    assert rc.Match(7, top=((1, 2.0),)) == a == rc.Match(event_id=7, topk=((1, 2.0),))
    assert pickle.loads(pickle.dumps(a)) == a and hash(a) == hash(rc.Match(7, ((1, 2.0),)))
    assert a.__match_args__ == ("event_id", "topk")
    with pytest.raises(TypeError):
        rc.Match(7, ((1, 2.0),), top=((1, 2.0),))
    with pytest.raises(TypeError):
        rc.Match(7)
    # the same field name as an Update's ranked list
    assert rc.Update(1, ((2, 0.5),)).topk == ((2, 0.5),)


def test_covering_exported_with_the_verbs_and_old_names():
    from rankcast.kinds.matching.covering import Covering
    assert rc.Covering is Covering and "Covering" in rc.__all__
    rng = np.random.default_rng(3)
    exprs = random_expressions(rng, 0, 60, ops_num=("<", "<=", "==", ">=", ">", "between"))
    a = rc.Covering(k=2, index="kd-tree", over=4, under=2)
    a.subscribe(exprs[:40])
    a.unsubscribe(list(range(0, 40, 4)))
    snap = a.snapshot()
    old = a.state()                                   # deprecated alias: the same dict
    assert snap.keys() == old.keys() and snap["kind"] == "covering"
    more = a.subscribe(exprs[40:]) + a.unsubscribe(list(range(1, 40, 4)))
    for b in (rc.Covering.restore(pickle.loads(pickle.dumps(snap))), rc.Covering.from_state(old)):
        assert len(b) == 30
        assert b.subscribe(exprs[40:]) + b.unsubscribe(list(range(1, 40, 4))) == more
        assert (b.forwarded() == a.forwarded()).all() and len(b) == len(a) == 40
    # a state dict written before snapshots had a kind (checkpoints of the former name)
    untagged = {k: v for k, v in snap.items() if k not in ("kind", "version")}
    assert len(rc.Covering.restore(untagged)) == 30


def test_stats_name_the_kind():
    assert rc.Engine(rc.EngineConfig(bounds=(0, 0, 1, 1), window=5)).stats()["kind"] == "spatial-keyword"
    assert rc.Matcher().stats()["kind"] == "ranked-matching"
    assert rc.RangeEngine().stats()["kind"] == "range-topk"


def test_snapshots_do_not_follow_the_engine():
    """A snapshot keeps the state it was taken in: the engine's later calls (new terms,
    attributes, string values, subscriptions, messages, objects) leave it as it was."""
    eng = rc.Engine(rc.EngineConfig(bounds=(0, 0, 1, 1), window=3))
    eng.subscribe([rc.Subscription(1, 0.5, 0.5, text="a b", k=2)])
    eng.publish([rc.Message(1, 0.1, 0.1, text="a")])
    m = rc.Matcher(rc.MatchConfig(scoring="static", index="segment-tree"))
    m.subscribe([rc.Expression(1, [rc.Predicate("x", "<", 3)])])
    r = rc.RangeEngine(rc.RangeConfig(k=2))
    r.subscribe([rc.RangeSubscription(1, 0.0, 5.0)])
    r.publish([rc.ObjectUpdate(1, 1.0, 2.0)])
    snaps = [(e, e.snapshot()) for e in (eng, m, r)]
    before = [(len(e), e.stats()["published"], e.topk(1) if e is not m else None) for e in (eng, m, r)]
    eng.subscribe([rc.Subscription(2, 0.5, 0.5, text="c d", k=2)])
    eng.publish([rc.Message(i, 0.2, 0.2, text="c e f") for i in range(2, 6)])
    m.subscribe([rc.Expression(2, [rc.Predicate("color", "==", "teal")])])
    m.publish([rc.Event(1, {"size": 2.0, "color": "plum"})])
    r.subscribe([rc.RangeSubscription(2, 0.0, 1.0)])
    r.publish([rc.ObjectUpdate(1, None, 0.5), rc.ObjectUpdate(2, 1.0, 1.0)])
    for (e, snap), (n, published, top) in zip(snaps, before):
        back = type(e).restore(snap)
        assert (len(back), back.stats()["published"], back.topk(1) if e is not m else None) == (n, published, top)
    back = rc.Matcher.restore(snaps[1][1])
    assert back.stats()["attributes"] == 1 and back.attrs.ids == {"x": 0}
    back = rc.Engine.restore(snaps[0][1])
    assert len(back.encoder.terms) == 2 and back.stats()["window"] == 1

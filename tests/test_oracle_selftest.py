"""The oracles' own test: each comparison the suite relies on fails on a corrupted answer.

For every kind, a correct answer is corrupted the ways a wrong engine would be wrong (an
entry dropped, two swapped, a score moved, a window or range boundary shifted by one) and
the check the suite uses on that kind must reject it; the uncorrupted answer must pass, so
the check is not simply failing on everything. Spatial keyword: the reference's
``topk_mismatch`` / ``assert_reference_exact``, the brute force's ``assert_engine_exact`` and
the driver ``play``; ranked matching: ``assert_matches_exact``; range top-k: the
``Oracle`` of test_range_oracle."""
from __future__ import annotations

import numpy as np
import pytest

import rankcast as rc
from rankcast.baselines import BruteForceEngine
from rankcast.kinds.spatial.testing import Call, Mismatch, play, random_calls
from rankcast.testing import (ReferenceEngine, assert_engine_exact, assert_matches_exact, assert_reference_exact,
                              brute_match, topk_mismatch)

BOUNDS = (0.0, 0.0, 10.0, 10.0)


# ----------------------------------------------------------------------------- spatial keyword
def _drop(top):
    return top[:-1]


def _swap(top):
    """The first two entries of different scores exchanged (None when all scores tie)."""
    for i in range(len(top) - 1):
        if top[i][1] != top[i + 1][1]:
            out = list(top)
            out[i], out[i + 1] = out[i + 1], out[i]
            return out
    return None


def _perturb(top, by=1e-6):
    return [(top[0][0], top[0][1] + by)] + list(top[1:])


CORRUPTIONS = {"drop": _drop, "swap": _swap, "perturb": _perturb}


class Corrupted:
    """An engine whose answers for one subscription (its ``topk`` and its updates) are
    corrupted by ``how``, once ``armed``."""

    def __init__(self, eng, sid, how):
        self.eng, self.sid, self.how, self.armed = eng, sid, how, False

    def _bad(self, top):
        out = CORRUPTIONS[self.how](list(top))
        return list(top) if out is None else out

    def subscribe(self, subs):
        return self.eng.subscribe(subs)

    def unsubscribe(self, ids):
        return self.eng.unsubscribe(ids)

    def publish(self, msgs):
        ups = self.eng.publish(msgs)
        if not self.armed:
            return ups
        return [rc.Update(u.subscription_id, tuple(self._bad(u.topk))) if u.subscription_id == self.sid else u
                for u in ups]

    def topk(self, sub_id):
        top = self.eng.topk(sub_id)
        return self._bad(top) if self.armed and sub_id == self.sid else top

    def stats(self):
        return self.eng.stats()


def _filled(cfg, seed=3):
    """An engine and the reference after a random workload, and a subscription whose top-k
    holds at least three entries of distinct scores."""
    calls = random_calls(seed, 40, invalid=False, bounds=BOUNDS)
    eng, ref = rc.Engine(cfg), ReferenceEngine(cfg)
    play({"engine": eng, "reference": ref}, calls)
    for sid in ref.live():
        top = eng.topk(sid)
        if len(top) >= 3 and len({s for _, s in top}) == len(top):
            return eng, ref, sid
    raise AssertionError("no subscription with three distinct scores")


def test_topk_mismatch_rejects_each_corruption_and_accepts_rounding():
    cfg = rc.EngineConfig(bounds=BOUNDS, window=40)
    eng, ref, sid = _filled(cfg)
    top = eng.topk(sid)
    assert ref.mismatch(sid, top) is None
    for how, corrupt in CORRUPTIONS.items():
        assert ref.mismatch(sid, corrupt(top)) is not None, how
    assert ref.mismatch(sid, _perturb(top, 1e-8)) is not None           # beyond 1e-9
    assert ref.mismatch(sid, _perturb(top, 1e-12)) is None               # rounding
    assert ref.mismatch(sid, top + [(10 ** 9, 0.0)]) is not None         # an entry too many
    assert ref.mismatch(sid, [(10 ** 9, top[0][1])] + top[1:]) is not None  # a message not in the window
    assert ref.mismatch(sid, [top[0]] + top[:-1]) is not None            # an entry twice


def test_topk_mismatch_near_ties():
    """Scores within 1e-9 of each other are ranked either way (the engine's last bits
    decide); equal scores as the engine reports them go newer first; a near-tie at the k-th
    place may be cut either way; nothing else may move."""
    ranked = [(0.9, 5, 50), (0.7 + 1e-12, 3, 30), (0.7, 4, 40), (0.5, 1, 10), (0.5 + 1e-13, 0, 0)]
    ok = [[(50, 0.9), (30, 0.7 + 1e-12), (40, 0.7)], [(50, 0.9), (40, 0.7 + 1e-12), (30, 0.7)]]
    for got in ok:
        assert topk_mismatch(got, ranked, 3) is None, got
    assert topk_mismatch([(50, 0.9), (30, 0.7), (40, 0.7)], ranked, 3) is not None    # equal: 40 is newer
    assert topk_mismatch([(50, 0.9), (40, 0.7)], ranked, 2) is None                    # the cut in a near-tie
    assert topk_mismatch([(50, 0.9), (30, 0.7)], ranked, 2) is None
    assert topk_mismatch([(30, 0.7), (50, 0.9)], ranked, 2) is not None
    assert topk_mismatch([(50, 0.9), (40, 0.7), (10, 0.5)], ranked, 3) is not None     # 30 belongs before 10
    assert topk_mismatch([(50, 0.9), (40, 0.7), (30, 0.7), (0, 0.5)], ranked, 4) is None
    assert topk_mismatch([(50, 0.9), (40, 0.7), (30, 0.7), (10, 0.5)], ranked, 4) is None


@pytest.mark.parametrize("how", sorted(CORRUPTIONS))
def test_the_brute_force_check_fails_on_a_corrupted_engine(how, monkeypatch):
    """``assert_engine_exact`` (the brute force over the engine's own window) and
    ``assert_reference_exact`` both reject an engine whose top-k of one subscription is
    corrupted."""
    cfg = rc.EngineConfig(bounds=BOUNDS, window=40)
    eng, ref, sid = _filled(cfg)
    assert_engine_exact(eng)
    assert_reference_exact(eng, ref)
    right = eng.topk
    bad = Corrupted(eng, sid, how)
    monkeypatch.setattr(eng, "topk", lambda i: bad._bad(right(i)) if i == sid else right(i))
    with pytest.raises(AssertionError):
        assert_engine_exact(eng)
    with pytest.raises(AssertionError):
        assert_reference_exact(eng, ref)


@pytest.mark.parametrize("how", sorted(CORRUPTIONS))
@pytest.mark.parametrize("against", ["brute", "reference"])
def test_play_fails_on_a_corrupted_engine(how, against):
    """The driver stops at the call where the corruption starts, against the brute force
    (exact) and against the reference (within its tolerance), with no other engine beside;
    corrupted updates alone (``topk`` left right) are caught too."""
    cfg = rc.EngineConfig(bounds=BOUNDS, window=40)
    calls = random_calls(5, 60, invalid=False, bounds=BOUNDS)
    probe = rc.Engine(cfg)                # the first publish after call 20 that updates a list
    at = sid = None                       # of two or more distinct scores
    for n, call in enumerate(calls):
        out = getattr(probe, call.op)(call.arg)
        if n >= 20 and call.op == "publish":
            u = next((u for u in out if len(u.topk) >= 2 and len({s for _, s in u.topk}) == len(u.topk)), None)
            if u is not None:
                at, sid = n, u.subscription_id
                break
    assert at is not None
    for updates_only in (False, True):
        bad = Corrupted(rc.Engine(cfg), sid, how)
        if updates_only:
            bad.topk = bad.eng.topk
        targets = {"bad": bad, against: BruteForceEngine(cfg) if against == "brute" else ReferenceEngine(cfg)}
        live: set[int] = set()
        assert play(targets, calls[:at], live=live) == at
        bad.armed = True
        with pytest.raises(Mismatch):
            play(targets, calls[at:at + 1], live=live)


class _Wider(ReferenceEngine):
    """A reference whose window keeps one message more (a count window), or keeps a message
    exactly ``window_seconds`` old (a time window): the boundary shifted by one."""

    def _keeps(self, m):
        if self.window is not None:
            return len(self.msgs) <= self.window + 1
        return m.t >= self.t_max - self.window_seconds


@pytest.mark.parametrize("time_window", [False, True], ids=["count", "time"])
def test_a_window_boundary_shifted_by_one_is_caught(time_window):
    """The workload's windows end exactly on messages (times on a 0.5 grid): the reference
    with its boundary shifted by one disagrees with the engine, and so does an engine
    whose window holds one message more (count) or half a second more (time)."""
    cfg = rc.EngineConfig(bounds=BOUNDS, **({"window_seconds": 5.0} if time_window else {"window": 30}))
    calls = random_calls(21, 60, invalid=False, time_window=time_window, bounds=BOUNDS)
    for t in ({"engine": rc.Engine(cfg), "reference": ReferenceEngine(cfg)},
              {"engine": rc.Engine(cfg), "brute": BruteForceEngine(cfg)}):
        assert play(t, calls) == len(calls)
    wider = cfg.replace(window_seconds=5.5) if time_window else cfg.replace(window=31)
    for t in ({"engine": rc.Engine(cfg), "reference": _Wider(cfg)},
              {"engine": rc.Engine(wider), "reference": ReferenceEngine(cfg)},
              {"engine": rc.Engine(wider), "brute": BruteForceEngine(cfg)}):
        with pytest.raises(Mismatch):
            play(t, calls)


def test_only_the_reference_sees_a_window_kept_one_message_too_long(monkeypatch):
    """An engine whose clock expires one message too few is exact over its own window, so
    the brute force over that window (``assert_engine_exact``) passes it: the reference,
    with its own window, does not."""
    cfg = rc.EngineConfig(bounds=BOUNDS, window=30)
    eng, ref = rc.Engine(cfg), ReferenceEngine(cfg)
    advance = eng.clock.advance
    monkeypatch.setattr(eng.clock, "advance", lambda seqs, t: advance(seqs, t) - 1)
    calls = random_calls(8, 50, invalid=False, bounds=BOUNDS)
    failed = False
    for call in calls:
        getattr(eng, call.op)(call.arg)
        getattr(ref, call.op)(call.arg)
        assert_engine_exact(eng)
        try:
            assert_reference_exact(eng, ref)
        except AssertionError:
            failed = True
    assert failed


def test_a_wrong_weighting_is_caught_only_by_the_reference(monkeypatch):
    """An engine that weights a text's terms by their idf alone (tf dropped) is exact over
    its own encoded messages; the reference, which weights the texts itself, rejects it."""
    from rankcast.kinds.spatial.text import Vocabulary

    corpus = ["a b", "a c", "b", "d d e"]
    cfg = rc.EngineConfig(bounds=BOUNDS, window=20, vocabulary=Vocabulary.fit(corpus))
    eng, ref = rc.Engine(cfg), ReferenceEngine(cfg, corpus=corpus)
    raw = Vocabulary.raw_weights
    monkeypatch.setattr(Vocabulary, "raw_weights", lambda self, text: {t: self.idf(t) for t in raw(self, text)})
    subs = [rc.Subscription(1, 5, 5, text="a b", k=2, alpha=0.0)]
    msgs = [rc.Message(1, 5, 5, text="a a a b"), rc.Message(2, 5, 5, text="a b b b")]
    for target in (eng, ref):
        target.subscribe(subs)
        target.publish(msgs)
    assert_engine_exact(eng)
    with pytest.raises(AssertionError):
        assert_reference_exact(eng, ref)


def test_updates_mismatch_rejects_missing_extra_and_corrupted_updates():
    cfg = rc.EngineConfig(bounds=BOUNDS, window=40)
    calls = random_calls(9, 50, invalid=False, bounds=BOUNDS)
    eng, ref = rc.Engine(cfg), ReferenceEngine(cfg)
    seen = 0
    for call in calls:
        got, want = getattr(eng, call.op)(call.arg), getattr(ref, call.op)(call.arg)
        if call.op != "publish":
            continue
        assert ref.updates_mismatch(got, want) is None
        sure = [u for u in got if u.subscription_id not in ref.unsure]
        if not sure:
            continue
        seen += 1
        u = sure[0]
        assert ref.updates_mismatch([x for x in got if x is not u], want) is not None         # missing
        assert ref.updates_mismatch(list(reversed(got)) if len(got) > 1 else got + got, want) is not None
        if len(u.topk) >= 2:
            bad = rc.Update(u.subscription_id, tuple(reversed(u.topk)))
            if u.topk[0][1] != u.topk[-1][1]:
                assert ref.updates_mismatch([bad if x is u else x for x in got], want) is not None
        quiet = [i for i in ref.live() if i not in {x.subscription_id for x in got} and i not in ref.unsure]
        if quiet:
            extra = sorted(got + [rc.Update(quiet[0], tuple(eng.topk(quiet[0])))], key=lambda x: x.subscription_id)
            assert ref.updates_mismatch(extra, want) is not None                           # extra
    assert seen >= 5


def test_the_reference_fails_calls_as_the_engine_does():
    """Malformed calls raise the same exception types in the reference and change nothing
    there either (the driver compares the types)."""
    cfg = rc.EngineConfig(bounds=BOUNDS, window_seconds=5.0)
    ok = [rc.Subscription(1, 1, 1, text="a", k=2)]
    bad_calls = [
        Call("subscribe", [rc.Subscription(2, 1, 1, text="a", k=0)]),
        Call("subscribe", [rc.Subscription(2, 11, 1, text="a")]),
        Call("subscribe", [rc.Subscription(2, 1, 1, text="a", alpha=float("nan"))]),
        Call("subscribe", [rc.Subscription(2, 1, 1, text="a", terms={"a": 1.0})]),
        Call("subscribe", [rc.Subscription(2, 1, 1, text="  ,")]),
        Call("subscribe", [rc.Subscription(2, 1, 1, terms={"a": -1.0})]),
        Call("subscribe", [rc.Subscription(2, 1, 1, terms={"": 1.0})]),
        Call("subscribe", [rc.Subscription(1, 1, 1, text="b")]),
        Call("subscribe", [rc.Subscription(3, 1, 1, text="b"), rc.Subscription(3, 2, 2, text="c")]),
        Call("subscribe", [rc.Subscription(2 ** 63, 1, 1, text="b")]),
        Call("unsubscribe", [1, 99]),
        Call("unsubscribe", [1, 1]),
        Call("publish", [rc.Message(5, 1, 1, text="a")]),                       # no t
        Call("publish", [rc.Message(5, 1, 1, text="a", t=3.0), rc.Message(6, 1, 1, text="a", t=2.0)]),
        Call("publish", [rc.Message(5, 1, 1, text="a", t=float("inf"))]),
        Call("publish", [rc.Message(5, 1, 1, text="a", t=9.0), rc.Message(5, 1, 1, text="b", t=9.0)]),
        Call("publish", [rc.Message(4, 1, 1, text="a", t=9.0)]),                 # in the window
        Call("publish", [rc.Message(6, 1, 1, text="a", t=0.5)]),                 # before t_max
    ]
    calls = [Call("subscribe", ok), Call("publish", [rc.Message(4, 1, 1, text="a", t=1.0)])] + bad_calls \
        + [Call("publish", [rc.Message(7, 1, 1, text="A", t=1.0)])]          # equal: newer first
    eng, ref = rc.Engine(cfg), ReferenceEngine(cfg)
    for call in calls:
        outs = []
        for target in (eng, ref):
            try:
                getattr(target, call.op)(call.arg)
                outs.append(None)
            except Exception as e:
                outs.append(type(e))
        assert outs[0] == outs[1], (call, outs)
        assert (call in bad_calls) == (outs[0] is not None), (call, outs)
        assert_reference_exact(eng, ref)
    assert ref.topk(1)[0][0] == 7 and eng.topk(1)[0][0] == 7


# ----------------------------------------------------------------------------- ranked matching
def _match_case(scoring):
    from rankcast.testing import random_events, random_expressions

    rng = np.random.default_rng(4)
    exprs = random_expressions(rng, 0, 300)
    evs = random_events(rng, 0, 40)
    m = rc.Matcher(rc.MatchConfig(scoring=scoring, index="scan", k=5))
    m.subscribe(exprs)
    return exprs, evs, m.publish(evs, k=5)


@pytest.mark.parametrize("scoring", ["static", "relaxed", "weighted"])
def test_assert_matches_exact_fails_on_corrupted_matches(scoring):
    exprs, evs, got = _match_case(scoring)
    assert_matches_exact(got, exprs, evs, scoring, 5)

    def corrupt(fn):
        """``got`` with the first match ``fn`` changes (fn returns None where it cannot)."""
        for i, m in enumerate(got):
            top = fn(list(m.topk))
            if top is not None:
                return got[:i] + [rc.Match(m.event_id, tuple(top))] + got[i + 1:]
        raise AssertionError(f"no match to corrupt with {fn.__name__}")

    def drop(top):
        return top[:-1] if top else None

    def swap(top):                       # two of different scores, or a tie out of id order
        for i in range(len(top) - 1):
            out = list(top)
            out[i], out[i + 1] = out[i + 1], out[i]
            return out
        return None

    def perturb(top):
        return [(top[0][0], top[0][1] + 1e-6)] + top[1:] if top else None

    def foreign(top):                     # an expression that is not live
        return [(10 ** 9, top[0][1])] + top[1:] if top else None

    for fn in (drop, swap, perturb, foreign):
        with pytest.raises(AssertionError):
            assert_matches_exact(corrupt(fn), exprs, evs, scoring, 5)
    with pytest.raises(AssertionError):                  # one event's answer missing
        assert_matches_exact(got[:-1], exprs, evs, scoring, 5)


@pytest.mark.parametrize("op, value, at", [("between", (1.0, 2.0), 2.0), ("between", (1.0, 2.0), 1.0),
                                           ("<=", 2.0, 2.0), (">=", 2.0, 2.0)])
def test_assert_matches_exact_fails_on_a_closed_bound_read_open(op, value, at):
    """A predicate's closed bound read as open (an event exactly on it left out): the
    answer that leaves the expression out fails; the right one passes."""
    exprs = [rc.Expression(1, [rc.Predicate("x", op, value, 2.0)], score=2.0),
             rc.Expression(2, [rc.Predicate("x", "between", (0.0, 9.0))], score=1.0)]
    evs = [rc.Event(1, {"x": at})]
    for scoring in ("static", "relaxed", "weighted"):
        right = [rc.Match(1, tuple(brute_match(exprs, evs[0], scoring, 5)))]
        assert [i for i, _ in right[0].topk] == [1, 2]
        assert_matches_exact(right, exprs, evs, scoring, 5)
        with pytest.raises(AssertionError):
            assert_matches_exact([rc.Match(1, right[0].topk[1:])], exprs, evs, scoring, 5)


# ----------------------------------------------------------------------------- range top-k
class _CorruptRange:
    """rc.RangeEngine with its answers for one subscription corrupted once ``armed``."""

    def __init__(self, cfg, how):
        self.eng = rc.RangeEngine(cfg)
        self.how, self.sid, self.armed = how, None, False

    def _bad(self, top):
        top = list(top)
        if self.how == "drop":
            return top[:-1]
        if self.how == "swap":
            return [top[1], top[0]] + top[2:]
        return [(top[0][0], top[0][1] + 1e-6)] + top[1:]          # perturb

    def topk(self, sid):
        top = self.eng.topk(sid)
        return self._bad(top) if self.armed and sid == self.sid and len(top) >= 2 else top

    def publish(self, ups):
        out = self.eng.publish(ups)
        if not self.armed:
            return out
        return [rc.Update(u.subscription_id, tuple(self._bad(u.topk)))
                if u.subscription_id == self.sid and len(u.topk) >= 2 else u for u in out]

    def __getattr__(self, name):
        return getattr(self.eng, name)


@pytest.mark.parametrize("how", ["drop", "swap", "perturb"])
@pytest.mark.parametrize("where", ["topk", "updates"])
def test_the_range_oracle_fails_on_corrupted_answers(how, where):
    """test_range_oracle's ``Oracle`` rejects a corrupted topk (checked after every call) and
    corrupted updates; ``swap`` exchanges two objects of equal y too, whose order (smaller id
    first) is exact."""
    from tests.test_range_oracle import Oracle

    cfg = rc.RangeConfig(k=3, method="paint-sparse")
    o = Oracle(cfg)
    o.eng = _CorruptRange(cfg, how)
    o.subscribe([rc.RangeSubscription(1, 0.0, 10.0), rc.RangeSubscription(2, 2.0, 4.0)])
    o.publish([rc.ObjectUpdate(i, float(i), 1.0 + (i % 2)) for i in range(8)])
    assert o.eng.topk(1) == [(0, 1.0), (2, 1.0), (4, 1.0)]
    o.eng.sid, o.eng.armed = 1, True
    if where == "topk":
        o.eng.publish = o.eng.eng.publish
        with pytest.raises(AssertionError):
            o.check()
    else:
        o.eng.topk = o.eng.eng.topk
        with pytest.raises(AssertionError):
            o.publish([rc.ObjectUpdate(0, None, 0.5)])


def test_the_range_oracle_fails_on_a_closed_range_read_open():
    """An object exactly on a range's end belongs to it: an engine that leaves it out (the
    boundary shifted) is rejected."""
    from tests.test_range_oracle import Oracle

    cfg = rc.RangeConfig(k=3, method="paint-sparse")
    o = Oracle(cfg)
    o.subscribe([rc.RangeSubscription(1, 2.0, 4.0)])
    o.publish([rc.ObjectUpdate(i, float(i), 1.0) for i in range(6)])
    assert o.eng.topk(1) == [(2, 1.0), (3, 1.0), (4, 1.0)]
    half_open = lambda sid: [(i, y) for i, y in rc.RangeEngine.topk(o.eng, sid) if i != 4]
    o.eng.topk = half_open
    with pytest.raises(AssertionError):
        o.check()

"""Covering indexes: after every call, each index's cov_k is sound (true covers, at most k,
never the query itself) and complete (min(k, all covers) of them) against the reference of
rankcast.kinds.matching.covering.testing, on expressions with every operator, strings, missing attributes,
open and closed bounds and adjacent floats; and Fact 1 (dominance is containment)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import rankcast as rc
from rankcast.kinds.matching.covering import Covering
from rankcast.kinds.matching.covering.semantic import ordinals
from rankcast.kinds.matching.covering.testing import Witnesses, covers

NUM = ["a", "b", "c"]
STR = ["s", "t"]
WORDS = ["red", "green", "blue", "oslo"]
OPS_NUM = ["<", "<=", "==", "!=", ">=", ">", "in", "not in", "between"]
OPS_STR = ["==", "!=", "in", "not in"]
INDEXES = ["kd-tree", "z-order", "naive"]
MAX = 1.7976931348623157e308


def _num(rng):
    v = float(rng.integers(0, 5))
    r = rng.random()
    if r < 0.1:
        return math.nextafter(v, math.inf)        # adjacent floats: open and closed bounds meet
    if r < 0.13:
        return float(rng.choice([-MAX, MAX]))     # x < -MAX matches nothing; x >= -MAX everything
    return v


def _predicate(rng, attr):
    if attr in STR:
        op = str(rng.choice(OPS_STR))
        if op in ("in", "not in"):
            return rc.Predicate(attr, op, list(rng.choice(WORDS, int(rng.integers(1, 3)), replace=False)))
        return rc.Predicate(attr, op, str(rng.choice(WORDS)))
    op = str(rng.choice(OPS_NUM))
    if op == "between":
        return rc.Predicate(attr, op, tuple(sorted((_num(rng), _num(rng)))))
    if op in ("in", "not in"):
        return rc.Predicate(attr, op, [_num(rng) for _ in range(int(rng.integers(1, 4)))])
    return rc.Predicate(attr, op, _num(rng))


def _expressions(rng, start, n):
    out = []
    for i in range(n):
        attrs = rng.choice(NUM + STR, int(rng.integers(1, 4)), replace=False)
        out.append(rc.Expression(start + i, [_predicate(rng, str(a)) for a in attrs]))
    return out


def check_index(c: Covering, live: dict, ks=(1, 2, 3)):
    """cov_k of every live expression against the reference, for each k."""
    w = Witnesses(live.values())
    rep = {i: int(c.rep[c.node_of[i]]) for i in live}
    for i, e in live.items():
        node = c.node_of[i]
        truth = {rep[j] for j, f in live.items() if c.node_of[j] != node and w.covers(f, e)}
        assert set(c.covering_all(i).tolist()) == truth, i
        for k in ks:
            got = c.cov(i, k).tolist()
            assert len(got) == len(set(got)) == min(k, len(truth)), (i, k, got, truth)
            assert set(got) <= truth and rep[i] not in got


@pytest.mark.parametrize("index", INDEXES)
@pytest.mark.parametrize("seed", [0, 1])
def test_cov_k_sound_and_complete_after_every_call(index, seed):
    rng = np.random.default_rng(seed)
    c = Covering(k=1, index=index, over=4, under=2)     # small buckets: splits and merges happen
    live: dict[int, rc.Expression] = {}
    nid = 0
    for step in range(25):
        if rng.random() < 0.65 or not live:
            new = _expressions(rng, nid, int(rng.integers(1, 12)))
            # identical spellings of live expressions too: they share a node
            if live and rng.random() < 0.5:
                e = live[int(rng.choice(list(live)))]
                new.append(rc.Expression(nid + len(new), e.predicates))
            nid += len(new)
            c.subscribe(new)
            live.update((e.id, e) for e in new)
        else:
            gone = [int(i) for i in rng.choice(list(live), int(rng.integers(1, max(2, len(live) // 3))),
                                               replace=False)]
            c.unsubscribe(gone)
            for i in gone:
                del live[i]
        check_index(c, live)


@pytest.mark.parametrize("index", INDEXES)
def test_rectangles_with_deletes_every_index_agrees_with_brute(index):
    """The paper's workload (closed ranges on every attribute), 6 attributes, churn."""
    rng = np.random.default_rng(7)
    n, A = 1500, 6
    lo = rng.integers(0, 8, (n, A)).astype(float)
    hi = lo + rng.integers(0, 8, (n, A))
    c = Covering(k=2, index=index, over=8, under=2)
    kinds = np.zeros(n, np.int64)
    c.replay_rectangles(kinds[:1000], np.arange(1000), lo[:1000], hi[:1000])
    gone = rng.choice(1000, 400, replace=False)
    c.replay_rectangles(np.ones(400, np.int64), gone, lo[gone], hi[gone])
    c.replay_rectangles(kinds[1000:], np.arange(1000, n), lo[1000:], hi[1000:])
    live = np.setdiff1d(np.arange(n), gone)
    for i in live[::5]:
        node = c.node_of[int(i)]
        cov = lo[live] <= lo[i]
        cov &= hi[live] >= hi[i]
        truth = {int(c.rep[c.node_of[int(j)]]) for j in live[cov.all(axis=1)] if c.node_of[int(j)] != node}
        got = c.cov(int(i), 3).tolist()
        assert set(got) <= truth and len(got) == min(3, len(truth))


def test_fact_1_dominance_is_containment():
    rng = np.random.default_rng(3)
    lo = rng.integers(-5, 5, (300, 3)).astype(float)
    hi = lo + rng.integers(0, 6, (300, 3))
    p = np.empty((300, 6), np.int64)
    p[:, 0::2], p[:, 1::2] = -ordinals(lo), ordinals(hi)
    dom = (p[:, None, :] >= p[None, :, :]).all(axis=2)
    cont = ((lo[:, None] <= lo[None]) & (hi[:, None] >= hi[None])).all(axis=2)
    assert (dom == cont).all()


P = rc.Predicate
CASES = [
    # (a, b, a covers b)
    ([P("x", "<=", 5)], [P("x", "<", 5)], True),
    ([P("x", "<", 5)], [P("x", "<=", 5)], False),
    ([P("x", "<", math.nextafter(5, math.inf))], [P("x", "<=", 5)], True),       # the same set
    ([P("x", ">", 1)], [P("x", "between", (math.nextafter(1, 2), 3))], True),
    ([P("x", ">", 1)], [P("x", "between", (1, 3))], False),
    ([P("x", "in", [1, math.nextafter(1, 2)])], [P("x", "between", (1, math.nextafter(1, 2)))], True),
    ([P("x", "in", [1, 2])], [P("x", "between", (1, 2))], False),
    ([P("x", "!=", 3)], [P("x", "in", [1, 2])], True),
    ([P("x", "!=", 3)], [P("x", "between", (2, 4))], False),
    ([P("x", "not in", [3, 7])], [P("x", "not in", [3, 7, 9])], True),
    ([P("x", "not in", [3, 7, 9])], [P("x", "not in", [3, 7])], False),
    ([P("x", "not in", [3])], [P("x", "<", 3)], True),
    ([P("x", ">=", -MAX)], [P("x", "!=", 1)], True),                           # everything
    ([P("x", "==", 0.0)], [P("x", "==", -0.0)], True),
    ([P("y", "==", 1)], [P("x", "<", -MAX)], True),                            # b matches nothing
    ([P("x", "<", -MAX)], [P("y", "==", 1)], False),
    ([P("x", "<=", 9)], [P("x", "<=", 3), P("y", "==", 1)], True),             # a names less
    ([P("x", "<=", 9), P("y", ">=", -MAX)], [P("x", "<=", 3)], False),         # an unnamed y is no range
    ([P("s", "!=", "a")], [P("s", "==", "b")], True),
    ([P("s", "!=", "a")], [P("s", "not in", ["a", "b"])], True),
    ([P("s", "not in", ["a", "b"])], [P("s", "!=", "a")], False),
    ([P("s", "in", ["a", "b"])], [P("s", "==", "b")], True),
    ([P("s", "in", ["a", "b"])], [P("s", "!=", "c")], False),
    ([P("s", "!=", "c")], [P("s", "in", ["a", "c"])], False),
]


@pytest.mark.parametrize("index", INDEXES)
def test_semantic_cases(index):
    for n, (a, b, want) in enumerate(CASES):
        ea, eb = rc.Expression(1, a), rc.Expression(2, b)
        assert covers(ea, eb) == want, (n, "reference")
        c = Covering(k=1, index=index)
        c.subscribe([ea, eb])
        same = c.node_of[1] == c.node_of[2]
        assert (same or c.covers(1, 2)) == want, n
        assert (same or c.cov(2).tolist() == [1]) == want, n

"""The relation graph G_k: after every call, every edge is a true cover between live nodes,
in-degree is at most k, forwarded iff in-degree 0; every live expression is covered by a
forwarded one (so an event matching anything matches the forwarded set); the messages
follow the paper (forward iff uncovered at arrival, re-forwards before the unsubscription,
unforward iff it was forwarded); identical ranges cannot make the paper's cycle; random and
adversarial deletion orders; state() / from_state() resumes exactly."""
from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

import rankcast as rc
from rankcast.kinds.matching.covering import Covering
from rankcast.kinds.matching.covering.testing import Witnesses, matches

from tests.test_covering_index import NUM, STR, _expressions

P = rc.Predicate


def check_graph(c: Covering, live: dict, rng, events=20):
    w = Witnesses(live.values())
    by_node: dict[int, list] = {}
    for i in live:
        by_node.setdefault(c.node_of[i], []).append(i)
    assert sorted(by_node) == sorted(c.graph.live().tolist())
    fwd = set(c.forwarded().tolist())
    for node, ids in by_node.items():
        e = live[ids[0]]
        par = c.graph.parents(node).tolist()
        assert len(par) <= c.k and len(set(par)) == len(par)
        for p in par:
            assert p in by_node and p != node and w.covers(live[by_node[p][0]], e)
        assert (int(c.rep[node]) in fwd) == (len(par) == 0)
        assert int(c.rep[node]) in ids or c.refs[node] > 0
    # safety: every live expression is covered by a forwarded one, itself or another
    fexprs = [live[by_node[c.node_of[i]][0]] for i in live if int(c.rep[c.node_of[i]]) in fwd]
    for i, e in live.items():
        assert any(w.covers(f, e) for f in fexprs), i
    for n in range(events):
        ev = w.random_event(rng, NUM + STR, n)
        if any(matches(e, ev.values) for e in live.values()):
            assert any(matches(f, ev.values) for f in fexprs)


class Downstream:
    """What the next hop holds, from the messages alone."""

    def __init__(self):
        self.held: set[int] = set()

    def apply(self, msgs):
        for kind, i in msgs:
            if kind in ("forward", "reforward"):
                assert i not in self.held
                self.held.add(i)
            else:
                self.held.remove(i)


@pytest.mark.parametrize("index", ["kd-tree", "z-order", "naive"])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_graph_invariants_safety_and_messages(index, k):
    rng = np.random.default_rng(10 * k)
    c = Covering(k=k, index=index, over=4, under=2)
    live: dict[int, rc.Expression] = {}
    down = Downstream()
    nid = 0
    for step in range(30):
        if rng.random() < 0.6 or not live:
            new = _expressions(rng, nid, int(rng.integers(1, 8)))
            if live and rng.random() < 0.4:
                new.append(rc.Expression(nid + len(new), live[int(rng.choice(list(live)))].predicates))
            nid += len(new)
            before = dict(live)
            msgs = c.subscribe(new)
            # one at a time: forwarded iff no other live expression covered it on arrival
            want = []
            for e in new:
                w = Witnesses(list(before.values()) + [e])
                same = [j for j, f in before.items() if w.covers(f, e) and w.covers(e, f)]
                if not same and not any(w.covers(f, e) for f in before.values()):
                    want.append(("forward", e.id))
                before[e.id] = e
            assert msgs == want
            live.update((e.id, e) for e in new)
        else:
            gone = [int(i) for i in rng.choice(list(live), int(rng.integers(1, max(2, len(live) // 3))),
                                               replace=False)]
            held_before = set(c.forwarded().tolist())
            msgs = c.unsubscribe(gone)
            for i in gone:
                del live[i]
            w = Witnesses(live.values())
            kinds = [m[0] for m in msgs]
            assert all(kd in ("reforward", "unforward") for kd in kinds)
            for kd, i in msgs:
                if kd == "reforward":       # uncovered now, and it was not forwarded before
                    assert i not in held_before and i in c.forwarded()
                    e = live[c.members(i)[0]]
                    assert not any(w.covers(f, e) for j, f in live.items() if c.node_of[j] != c.node_of[i])
                else:
                    assert i in held_before and i not in c.forwarded()
            if len(gone) == 1:              # re-forwards come before the unsubscription they follow
                assert kinds == sorted(kinds, key=lambda kd: kd == "unforward")
        down.apply(msgs)
        assert down.held == set(c.forwarded().tolist())
        check_graph(c, live, rng)


def test_identical_ranges_make_no_cycle():
    """Notes, section 5: x covers t, u == t arrives, x leaves. The literal algorithm links
    t <-> u and forwards neither; here u joins t's node, which is re-forwarded."""
    for index in ("kd-tree", "z-order", "naive"):
        c = Covering(k=1, index=index)
        assert c.subscribe([rc.Expression(1, [P("a", "<=", 10)])]) == [("forward", 1)]
        assert c.subscribe([rc.Expression(2, [P("a", "<=", 5)])]) == []
        # the same set, spelled differently: it joins 2's node (no edge between them)
        assert c.subscribe([rc.Expression(5, [P("a", "<", math.nextafter(5, 9))])]) == []
        assert c.node_of[5] == c.node_of[2] and c.members(2) == [2, 5]
        assert c.subscribe([rc.Expression(4, [P("a", "==", 3)])]) == []
        assert c.unsubscribe([1]) == [("reforward", 2), ("unforward", 1)]
        assert c.forwarded().tolist() == [2]
        assert c.unsubscribe([2]) == []              # 5 keeps the node, forwarded as 2
        assert c.forwarded().tolist() == [2]
        assert c.unsubscribe([5]) == [("reforward", 4), ("unforward", 2)]
        assert c.forwarded().tolist() == [4]


@pytest.mark.parametrize("order", ["random", "most-children-first", "arrival", "reverse"])
def test_deletion_orders(order):
    rng = np.random.default_rng(5)
    c = Covering(k=1, index="kd-tree", over=4, under=2)
    exprs = _expressions(rng, 0, 120)
    exprs += [rc.Expression(1000 + i, [P("a", "between", (0, 4 - i * 0.5))]) for i in range(6)]   # a chain
    c.subscribe(exprs)
    live = {e.id: e for e in exprs}
    while live:
        if order == "random":
            i = int(rng.choice(list(live)))
        elif order == "arrival":
            i = min(live)
        elif order == "reverse":
            i = max(live)
        else:                      # the adversary of the notes: the node with the most children
            i = max(live, key=lambda j: (len(c.graph.children(c.node_of[j])), j))
        c.unsubscribe([i])
        del live[i]
        if len(live) % 7 == 0:
            check_graph(c, live, rng, events=5)
    assert c.n_nodes() == 0 and len(c.forwarded()) == 0


def test_state_round_trip_resumes_exactly():
    rng = np.random.default_rng(2)
    a = Covering(k=2, index="z-order", over=4, under=2)
    exprs = _expressions(rng, 0, 80)
    a.subscribe(exprs[:60])
    a.unsubscribe(list(range(0, 60, 3)))
    b = Covering.from_state(pickle.loads(pickle.dumps(a.state())))
    assert (b.forwarded() == a.forwarded()).all()
    for c in (a, b):
        c.msgs = c.subscribe(exprs[60:]) + c.unsubscribe(list(range(1, 60, 3)))
    assert a.msgs == b.msgs and (a.forwarded() == b.forwarded()).all()
    live = {e.id: e for e in exprs if e.id in b.node_of}
    check_graph(b, live, rng)


def test_cov_calls_k1_cheapest():
    """Theorem 1's accounting: G_1 makes one cov call per subscribe plus one per orphan."""
    rng = np.random.default_rng(4)
    exprs = _expressions(rng, 0, 200)
    c = Covering(k=1)
    c.subscribe(exprs)
    s = c.stats()
    assert s["queries_subscribe"] == c.n_nodes() <= 200
    gone = [int(i) for i in rng.choice(200, 100, replace=False)]
    children = 0
    for i in gone:
        node = c.node_of[i]
        if c.refs[node] == 1:
            children += len(c.graph.children(node))
        c.unsubscribe([i])
    assert c.stats()["queries_unsubscribe"] == children

"""Ranked matching's drivers (docs/matching.md) against brute force on workloads chosen to
break them: partial matches that win under relaxed scoring (low weights, many dimensions),
ties everywhere, events on interval ends, missing attributes, churn; the bounds the box and
pivot drivers stop on, checked against every expression on small inputs; index="auto"'s
switch on wide schemas; the paper workload's query distribution."""
from __future__ import annotations

import numpy as np
import pytest

import rankcast as rc
from rankcast.testing import assert_matches_exact

CORES = [("auto", "auto"), ("auto", "box"), ("auto", "pivot"), ("auto", "paper"), ("scan", "auto"),
         ("ir-tree", "pivot")]
SCORINGS = ["static", "relaxed", "weighted"]


def _boxes(rng, start, n, d, w_hi=0.3, lengths=(0.5, 1.0, 2.0)):
    """``n`` expressions over attributes x0..x{d-1}: each a random subset of them (some
    missing), ``between`` on a half grid (events land on the ends), low weights on a grid
    (ties; partial matches win under relaxed), a few ``>=`` / ``<`` / ``==`` / ``!=`` / ``in``."""
    out = []
    for i in range(n):
        attrs = sorted(rng.choice(d, int(rng.integers(1, d + 1)), replace=False).tolist())
        if rng.random() < 0.5:
            rng.shuffle(attrs)              # predicates not in attribute order: summed in their order
        preds = []
        for a in attrs:
            c = float(rng.integers(0, 9)) / 2
            w = float(rng.choice(np.arange(0.0, w_hi + 1e-9, 0.1)))
            r = rng.random()
            if r < 0.7:
                h = float(rng.choice(lengths))
                preds.append(rc.Predicate(f"x{a}", "between", (c - h, c + h), w))
            elif r < 0.8:
                preds.append(rc.Predicate(f"x{a}", ">=" if rng.random() < 0.5 else "<", c, w))
            elif r < 0.9:
                preds.append(rc.Predicate(f"x{a}", "==" if rng.random() < 0.5 else "!=", c, w))
            else:
                preds.append(rc.Predicate(f"x{a}", "in", sorted({c, c + 0.5, c + 2.0}), w))
        out.append(rc.Expression(start + i, preds, score=float(rng.choice([0.0, 0.5, 1.0, 1.5]))))
    return out


def _events(rng, start, n, d):
    out = []
    for i in range(n):
        attrs = rng.choice(d, int(rng.integers(0, d + 1)), replace=False)
        vals = {f"x{a}": float(rng.integers(0, 9)) / 2 for a in attrs}
        weights = {a: float(rng.choice([0.0, 0.5, 1.0, 2.0])) for a in vals if rng.random() < 0.4} or None
        out.append(rc.Event(start + i, vals, weights=weights))
    return out


def _churn(index, driver, scoring, seed, d, n, w_hi, steps=6, k_choices=(1, 5, 20)):
    rng = np.random.default_rng(seed)
    cfg = rc.MatchConfig(scoring=scoring, index=index, driver=driver, k=5, rebuild_fraction=0.1, rebuild_min=16)
    m = rc.Matcher(cfg)
    live = {e.id: e for e in _boxes(rng, 0, n, d, w_hi)}
    m.subscribe(list(live.values()))
    next_id, next_ev = n + 5, 0
    for step in range(steps):
        evs = _events(rng, next_ev, 8, d)
        next_ev += len(evs)
        k = int(rng.choice(k_choices))
        assert_matches_exact(m.publish(evs, k=k), list(live.values()), evs, scoring, k)
        gone = [int(i) for i in rng.choice(list(live), len(live) // 3, replace=False)]
        m.unsubscribe(gone)
        for i in gone:
            del live[i]
        new = _boxes(rng, next_id, int(rng.integers(1, n // 2)), d, w_hi)
        next_id += len(new) + 3
        m.subscribe(new)
        live.update((e.id, e) for e in new)


@pytest.mark.parametrize("scoring", SCORINGS)
@pytest.mark.parametrize("index,driver", CORES)
def test_partial_matches_win_low_weights_many_dims(index, driver, scoring):
    """d = 7, weights <= 0.3: under relaxed the top-k is mostly partial matches, so a driver
    that only looks for full matches, or stops on a bound that ignores what the other
    dimensions add, fails here."""
    _churn(index, driver, scoring, 1, d=7, n=400, w_hi=0.3)


@pytest.mark.parametrize("scoring", SCORINGS)
@pytest.mark.parametrize("index,driver", CORES)
def test_high_weights_few_dims_with_ties(index, driver, scoring):
    _churn(index, driver, scoring, 2, d=3, n=400, w_hi=1.0, k_choices=(1, 3, 40))


@pytest.mark.parametrize("scoring", ["relaxed", "static"])
@pytest.mark.parametrize("queries", ["shared", "separate"])
def test_paper_workload_every_driver(queries, scoring):
    """The paper's generator (100 distinct weights: ties) with both query distributions."""
    from rankcast.ingest.match_workloads import zipf_workload
    w = zipf_workload(2500, 3, 15, seed=5, queries=queries)
    exprs, evs = w.expressions(), w.events()
    for index, driver in CORES:
        m = rc.Matcher(rc.MatchConfig(scoring=scoring, index=index, driver=driver, k=10))
        m.subscribe(exprs)
        assert_matches_exact(m.publish(evs, k=10), exprs, evs, scoring, 10)


def _brute_scores(exprs, ev, scoring):
    """Per expression: its score if it matches, else None (the contract's definition)."""
    from rankcast.testing import brute_match
    got = dict(brute_match(exprs, ev, scoring, len(exprs)))
    return [got.get(e.id) for e in exprs]


@pytest.mark.parametrize("scoring", SCORINGS)
@pytest.mark.parametrize("seed", range(4))
def test_box_tree_bounds_cover_every_expression(scoring, seed):
    """The threshold the box driver stops on: for random small tables and events, no
    expression under a node ranks before the node's bound (exact bounds: (bound, smallest id at
    the largest key); others with the slack), so nothing left unread could enter the top-k."""
    from rankcast.kinds.matching.boxtree import BoxTree, _node_bound
    from rankcast.kinds.matching.core import MODES, ranks_after
    from rankcast.common.tolerance import EPS
    rng = np.random.default_rng(seed)
    d = int(rng.integers(1, 6))
    exprs = _boxes(rng, 0, 300, d, w_hi=float(rng.choice([0.3, 1.0])))
    cfg = rc.MatchConfig(scoring=scoring, index="auto", driver="box", k=5)
    m = rc.Matcher(cfg)
    m.subscribe(exprs)
    core = m.core
    BoxTree.LEAF, BoxTree.FAN, BoxTree.BAND = 2, 3, 16      # a deep tree on a small table
    try:
        tree = BoxTree(core.table, core.cols, MODES[scoring])
    finally:
        BoxTree.LEAF, BoxTree.FAN, BoxTree.BAND = 4, 8, 4096
    n_nodes = len(tree.maxkey)
    # the entries under every node
    under = [None] * n_nodes
    for v in range(n_nodes):
        if tree.child_count[v] == 0:
            under[v] = list(range(tree.e_start[v], tree.e_end[v]))
    for v in range(n_nodes):
        if under[v] is None:
            under[v] = [i for c in range(tree.child_first[v], tree.child_first[v] + tree.child_count[v]) for i in under[c]]
    n_cols = tree.nlo.shape[1]
    for ev in _events(rng, 0, 25, d):
        m.publish([ev], k=1)                 # sets the dense event
        e = core.ev
        has_q = np.zeros(n_cols, np.bool_)
        q = np.zeros(n_cols)
        attrs = e.attrs[e.attrs < n_cols]
        has_q[attrs], q[attrs] = True, e.val[attrs]
        scale = float(e.ew[e.attrs].max()) if scoring == "weighted" and len(e.attrs) else 1.0
        scores = dict(zip([x.id for x in exprs], _brute_scores(exprs, ev, scoring)))
        for v in range(n_nodes):
            b, exact = _node_bound(v, MODES[scoring], n_cols, has_q, q, tree.nlo, tree.nhi, tree.lacks,
                                   tree.maxkey, tree.mwx, scale)
            for i in under[v]:
                eid = int(tree.eid[i])
                sc = scores[eid]
                if sc is None:
                    continue
                if exact:
                    assert not ranks_after(b, tree.minid[v], sc, eid), (v, b, sc, eid)
                else:
                    assert sc <= b * (1.0 + EPS) + EPS, (v, b, sc, eid)


@pytest.mark.parametrize("seed", range(4))
def test_pivot_rest_bound_covers_every_expression(seed):
    """The pivot driver's relaxed threshold: an expression with no stabbed predicate on the
    pivot scores at most R (the largest weights of the event's other attributes), and an
    expression read from a list scores at most its bound (the weight sum)."""
    from rankcast.kinds.matching.pivot import PivotCore
    rng = np.random.default_rng(seed)
    d = int(rng.integers(2, 6))
    exprs = _boxes(rng, 0, 300, d, w_hi=1.0)
    m = rc.Matcher(rc.MatchConfig(scoring="relaxed", index="sopt-r-tree", driver="pivot", k=5))
    m.subscribe(exprs)
    core = m.core
    assert isinstance(core, PivotCore)
    t = core.table
    for ev in _events(rng, 0, 25, d):
        m.publish([ev], k=3)
        attrs = core.ev.attrs
        lists, rest = core._plan(attrs)
        if not lists:
            continue
        pivot = lists[0][0]
        scores = _brute_scores(exprs, ev, "relaxed")
        q = float(core.ev.val[pivot])
        for e, sc in zip(exprs, scores):
            if sc is None:
                continue
            s = int(t.slots(np.array([e.id]))[0])
            rows = range(t.p_start[s], t.p_end[s])
            stabbed = any(t.p_attr[p] == pivot and t.p_lo[p] <= q <= t.p_hi[p] for p in rows)
            assert sc <= t.wsum[s] * (1 + 1e-9) + 1e-9
            if not stabbed:
                assert sc <= rest * (1 + 1e-9) + 1e-9, (e, sc, rest)


def test_auto_moves_wide_schemas_to_the_be_tree_or_the_paper_driver_exactly():
    """Expressions over 100 attributes (beyond the box tree's columns): index="auto" serves
    them with the BE*-tree (static, weighted) or the Threshold Algorithm (relaxed), with the
    same answers."""
    rng = np.random.default_rng(3)
    exprs = []
    for i in range(400):
        attrs = rng.choice(100, 3, replace=False)
        exprs.append(rc.Expression(i, [rc.Predicate(f"a{int(a)}", "between", (float(rng.integers(0, 5)), 6.0),
                                                    float(rng.choice([0.5, 1.0]))) for a in attrs],
                                   score=float(rng.choice([1.0, 2.0]))))
    for scoring in SCORINGS:
        m = rc.Matcher(rc.MatchConfig(scoring=scoring, index="auto", k=5))
        m.subscribe(exprs[:100])
        m.subscribe(exprs[100:])
        assert m.stats()["driver"] == ("paper" if scoring == "relaxed" else "be-tree")
        evs = [rc.Event(j, {f"a{int(a)}": float(rng.integers(0, 7)) for a in rng.choice(100, 40, replace=False)})
               for j in range(20)]
        assert_matches_exact(m.publish(evs, k=5), exprs, evs, scoring, 5)
        m.unsubscribe(list(range(0, 400, 3)))
        live = [e for e in exprs if e.id % 3]
        assert_matches_exact(m.publish(evs, k=5), live, evs, scoring, 5)


def test_auto_serves_boxes_with_the_box_driver():
    rng = np.random.default_rng(4)
    m = rc.Matcher(rc.MatchConfig(scoring="relaxed", index="auto", k=5))
    m.subscribe(_boxes(rng, 0, 300, 4, w_hi=1.0))
    m.publish(_events(rng, 0, 5, 4))
    s = m.stats()
    assert s["driver"] == "box" and s["nodes"] > 0


def test_zipf_queries_share_the_subscriptions_regions():
    from rankcast.ingest.match_workloads import zipf_workload
    w = zipf_workload(3000, 2, 300, seed=1)
    sep = zipf_workload(3000, 2, 300, seed=1, queries="separate")
    # the subscriptions' centres and the shared queries come from the same cells: most query
    # cells hold a centre; separate queries mostly miss them
    mids = {tuple(c) for c in np.floor(100 * (w.lo + w.hi) / 2).astype(int).tolist()}

    def share(q):
        return np.mean([tuple(c) in mids for c in np.floor(100 * q).astype(int).tolist()])
    assert share(w.queries) > 0.5 > share(sep.queries) + 0.2
    with pytest.raises(ValueError, match="queries"):
        zipf_workload(10, 1, 1, queries="nearby")


def test_driver_config_is_validated():
    with pytest.raises(rc.InvalidInput, match="field 'driver'"):
        rc.MatchConfig(driver="fast")
    with pytest.raises(rc.InvalidInput, match="field 'driver'"):
        rc.MatchConfig(index="sopt-r-tree", driver="box")
    with pytest.raises(rc.InvalidInput, match="field 'driver'"):
        rc.MatchConfig(index="scan", driver="pivot")


@pytest.mark.parametrize("scoring", ["static", "weighted"])
def test_auto_races_the_box_tree_and_the_be_tree_exactly(scoring, monkeypatch):
    """static / weighted on a narrow schema: index="auto" answers its first events with the box
    tree and a BE*-tree side by side (updates go to both), then keeps the faster; exact
    before, during and after."""
    from rankcast.kinds.matching.auto import AutoCore
    monkeypatch.setattr(AutoCore, "RACE_MIN", 64)
    monkeypatch.setattr(AutoCore, "RACE_EVENTS", 12)
    rng = np.random.default_rng(8)
    m = rc.Matcher(rc.MatchConfig(scoring=scoring, index="auto", k=5))
    live = {e.id: e for e in _boxes(rng, 0, 300, 4, w_hi=1.0)}
    m.subscribe(list(live.values()))
    nid = 1000
    for step in range(5):
        evs = _events(rng, 10 * step, 5, 4)
        assert_matches_exact(m.publish(evs, k=5), list(live.values()), evs, scoring, 5)
        gone = [int(i) for i in rng.choice(list(live), 30, replace=False)]
        m.unsubscribe(gone)
        for i in gone:
            del live[i]
        new = _boxes(rng, nid, 40, 4, w_hi=1.0)
        nid += 50
        m.subscribe(new)
        live.update((e.id, e) for e in new)
    s = m.stats()
    assert s["raced_events"] >= 12 and m.core.rival is None and s["driver"] in ("box", "be-tree")


def test_auto_race_is_decided_by_parts_with_the_collector_off(monkeypatch):
    """The race times each raced call in parts, the collector off: one part slowed by
    something else (here the rival's first timed part, by 0.1 s: a full collection of a
    large heap takes that long) does not decide against a rival that is faster in every
    other part, and the answers stay exact."""
    import gc
    import time

    from rankcast.kinds.matching.auto import AutoCore
    from rankcast.kinds.matching.betree import BETreeCore
    from rankcast.kinds.matching.boxtree import BoxCore
    monkeypatch.setattr(AutoCore, "RACE_MIN", 64)
    box_match, be_match = BoxCore.match, BETreeCore.match
    seen = {"rival": 0, "collecting": []}

    def box(self, events, k):
        time.sleep(0.003)                # the box tree 3 ms slower in every part
        return box_match(self, events, k)

    def rival(self, events, k):
        seen["rival"] += 1
        seen["collecting"].append(gc.isenabled())
        if seen["rival"] == 2:           # the first timed part (the first call answers one event, untimed)
            time.sleep(0.1)
        return be_match(self, events, k)

    monkeypatch.setattr(BoxCore, "match", box)
    monkeypatch.setattr(BETreeCore, "match", rival)
    rng = np.random.default_rng(10)
    exprs = _boxes(rng, 0, 300, 4, w_hi=1.0)
    m = rc.Matcher(rc.MatchConfig(scoring="weighted", index="auto", k=5))
    m.subscribe(exprs)
    evs = _events(rng, 0, 41, 4)
    assert_matches_exact(m.publish(evs, k=5), exprs, evs, "weighted", 5)
    s = m.stats()
    assert s["raced_events"] == 40 and s["driver"] == "be-tree" and m.core.rival is None
    # the untimed first event, then AutoCore.RACE_PARTS timed parts, none with the collector on
    assert seen["collecting"][0] and not any(seen["collecting"][1:])
    assert len(seen["collecting"]) == 1 + AutoCore.RACE_PARTS and len(m.core._calls) == AutoCore.RACE_PARTS
    assert gc.isenabled()
    evs = _events(rng, 100, 10, 4)
    assert_matches_exact(m.publish(evs, k=5), exprs, evs, "weighted", 5)


@pytest.mark.parametrize("scoring", ["static", "weighted"])
def test_auto_keeps_dense_tables_on_the_box_tree_without_a_race(scoring, monkeypatch):
    """Every expression names every attribute in use: index="auto" builds no BE*-tree (the
    box tree prunes on every attribute; the race would only add the BE*-tree's build) and
    stays exact."""
    from rankcast.kinds.matching.auto import AutoCore
    monkeypatch.setattr(AutoCore, "RACE_MIN", 64)
    rng = np.random.default_rng(9)
    exprs = [rc.Expression(i, [rc.Predicate(f"x{a}", "between", (float(c), float(c) + 1.5), 0.5)
                               for a, c in enumerate(rng.integers(0, 6, 3))], score=float(rng.integers(1, 4)))
             for i in range(200)]
    m = rc.Matcher(rc.MatchConfig(scoring=scoring, index="auto", k=5))
    m.subscribe(exprs)
    evs = _events(rng, 0, 20, 3)
    assert_matches_exact(m.publish(evs, k=5), exprs, evs, scoring, 5)
    s = m.stats()
    assert s["driver"] == "box" and s["raced_events"] == 0 and m.core.rival is None

"""Covering routing in the ranked-matching cluster: the distribution role routes
each event only to the partitions whose forwarded (uncovered) expressions it matches.

Oracles: brute-force matching (which partitions hold an expression an event matches) and
rc.Matcher (every call's answer). Workload: nested and identical expressions (real covering,
re-forwards on unsubscription) mixed with the matching oracle's random ones (strings, in,
!=, missing attributes), churn between events, several clients on several distributors."""
from __future__ import annotations

import copy

import numpy as np
import pytest

import rankcast as rc
from rankcast.kinds.matching.covering.routing import MatchDistributor, client_of, owner_of
from rankcast.kinds.matching.roles import MatchPolicy
from rankcast.kinds.matching.covering.testing import matches
from rankcast.kinds.matching.predicates import AttributeTable, encode_events, encode_expressions
from rankcast.testing import assert_matches_exact
from tests.test_match_oracle import _events, _expressions


def _nested(rng, start, n, pool):
    """Expressions that cover one another: ranges on a coarse grid, narrowed copies of live
    ones (an extra predicate or a tighter range), identical copies, and random ones."""
    out = []
    for i in range(n):
        eid = start + i
        r = rng.random()
        if pool and r < 0.3:                    # a narrower copy of a live expression
            par = pool[int(rng.integers(len(pool)))]
            preds = list(par.predicates)
            if rng.random() < 0.5:
                preds.append(rc.Predicate("age", "between", tuple(sorted(rng.integers(0, 9, 2) / 2))))
                preds = list({p.attr: p for p in preds}.values())
            out.append(rc.Expression(eid, preds, score=float(rng.choice([0.0, 1.0, 2.0]))))
        elif pool and r < 0.4:                  # identical
            par = pool[int(rng.integers(len(pool)))]
            out.append(rc.Expression(eid, list(par.predicates), score=float(rng.choice([0.0, 1.0]))))
        elif r < 0.8:
            lo = int(rng.integers(0, 18))
            hi = lo + int(rng.integers(0, 20 - lo))
            preds = [rc.Predicate("x", "between", (lo, hi))]
            if rng.random() < 0.5:
                preds.append(rc.Predicate("y", "<=", int(rng.integers(0, 20))))
            out.append(rc.Expression(eid, preds, score=float(rng.choice([0.0, 0.5, 1.0]))))
        else:
            out.append(_expressions(rng, eid, 1)[0])
        pool = pool + [out[-1]]
    return out


def _mixed_events(rng, start, n):
    evs = _events(rng, start, n)
    out = []
    for e in evs:
        vals = dict(e.values)
        if rng.random() < 0.8:
            vals["x"] = float(rng.integers(0, 21))
        if rng.random() < 0.6:
            vals["y"] = float(rng.integers(0, 21))
        out.append(rc.Event(e.id, vals, weights=e.weights))
    return out


# ----------------------------------------------------------------------------- the role alone

@pytest.mark.parametrize("D", [1, 3])
@pytest.mark.parametrize("policy", ["hash", "attribute"])
def test_routing_reaches_exactly_the_partitions_holding_a_match(policy, D):
    """Distributors alone, updates spread as the coordinator spreads them: after every
    subscribe or unsubscribe, every event reaches exactly the partitions holding an
    expression it matches, on every distributor, and each table is no larger than the
    expressions (smaller once expressions cover one another)."""
    rng = np.random.default_rng(17 + D)
    P = 4
    attrs = AttributeTable()
    sample = _nested(rng, 0, 60, [])
    pol = MatchPolicy(policy, P).fit(encode_expressions(sample, AttributeTable())[0])
    dists = [MatchDistributor(pol, d, D, export_metrics=False) for d in range(D)]
    live: dict[int, tuple] = {}               # id -> (expression, partition, owner)
    nid = 0
    for step in range(40):
        if step < 8 or rng.random() < 0.6 or len(live) < 5:
            new = _nested(rng, nid, int(rng.integers(1, 25)), [e for e, _, _ in live.values()])
            nid += len(new)
            batch, pend = encode_expressions(new, attrs)
            attrs.commit(pend)
            parts = pol.place(batch)
            o = int(rng.integers(D))
            upd = dists[o].subscribe_exprs(batch, parts, list(attrs.kinds))
            live.update((e.id, (e, int(p), o)) for e, p in zip(new, parts.tolist()))
        else:
            gone = rng.choice(sorted(live), int(rng.integers(1, max(2, len(live) // 3))), replace=False)
            o = live[int(gone[0])][2]
            gone = np.array([i for i in gone.tolist() if live[i][2] == o], np.int64)
            parts = np.array([live[i][1] for i in gone.tolist()], np.int64)
            upd = dists[o].unsubscribe_exprs(gone, parts)
            for i in gone.tolist():
                del live[i]
        todo = [(o, upd)]                     # as the coordinator spreads them, answers included
        while todo:
            o, upd = todo.pop(0)
            for d in range(D):
                if d != o and (got := dists[d].apply_remote(upd)) is not None:
                    todo.append((d, got))
        evs = _mixed_events(rng, 0, 12)
        eb, pend = encode_events(evs, attrs)
        attrs.commit(pend)
        want = [sorted({p for e, p, _ in live.values() if matches(e, ev.values)}) for ev in evs]
        for dist in dists:
            routing = dist.table.route(eb)
            assert [routing.row(i).tolist() for i in range(len(evs))] == want
        sizes = {len(d.table) for d in dists}
        assert len(sizes) == 1 and sizes.pop() <= len(live)
        assert len(dists[0].table) == sum(len(sd.entries) for d in dists for sd in d.sides.values())
    assert len(dists[0].table) < len(live)


# ----------------------------------------------------------------------------- the cluster

def _cluster(mcfg, policy, partitions, distributors=1, **kw):
    opts = {"runtime": "inproc", **kw.pop("options", {})}
    ccfg = rc.ClusterConfig(engine=mcfg, policy=policy, partitions=partitions, distributors=distributors,
                            actor_cpus=0.05, batch_size=4, name=kw.pop("name", "cover-test"), options=opts, **kw)
    return rc.Cluster.start(ccfg, sample=_nested(np.random.default_rng(99), 0, 60, []), fresh=True)


def _clients(cl, n):
    """``n`` handles on one cluster, each its own client, client ``c``'s subscriptions
    owned by distributor ``c`` (the one its token hashes to)."""
    out = []
    for c in range(n):
        h = copy.copy(cl) if c else cl
        h._client = client_of(c, n)
        out.append(h)
    return out


def _drive(cl, m, mcfg, seed, steps=16, clients=1, live=None, start=0):
    rng = np.random.default_rng(seed)
    hs = _clients(cl, clients)
    live = {} if live is None else live
    nid = nev = start
    for step in range(steps):
        h = hs[int(rng.integers(len(hs)))]
        r = rng.random()
        if r < 0.45 or len(live) < 4:
            new = _nested(rng, nid, int(rng.integers(1, 30)), list(live.values()))
            nid += len(new) + 1
            h.subscribe(new)
            m.subscribe(new)
            live.update((e.id, e) for e in new)
        elif r < 0.7:
            gone = [int(i) for i in rng.choice(list(live), int(rng.integers(1, max(2, len(live) // 3))), replace=False)]
            h.unsubscribe(gone)
            m.unsubscribe(gone)
            for i in gone:
                del live[i]
        evs = _mixed_events(rng, nev, int(rng.integers(1, 11)))
        nev += len(evs)
        k = int(rng.choice([1, 3, 1000]))
        if rng.random() < 0.3:
            assert h.publish(evs, wait=False, k=k) is None
            got = h.flush()
        else:
            got = h.publish(evs, k=k)
        assert got == m.publish(evs, k=k)
        assert_matches_exact(got, list(live.values()), evs, mcfg.scoring, k)
    return live


@pytest.mark.parametrize("distributors", [1, 2, 3])
@pytest.mark.parametrize("partitions", [1, 2, 3, 4])
@pytest.mark.parametrize("policy", ["hash", "attribute"])
@pytest.mark.parametrize("scoring", ["static", "weighted"])
def test_covering_cluster_equals_matcher_after_every_call(scoring, policy, partitions, distributors):
    mcfg = rc.MatchConfig(scoring=scoring, index="sopt-r-tree", k=5, rebuild_min=4, rebuild_fraction=0.3)
    cl = _cluster(mcfg, policy, partitions, distributors)
    try:
        live = _drive(cl, rc.Matcher(mcfg), mcfg, seed=partitions * 7 + len(policy) + distributors,
                      clients=distributors)
        st = cl.stats()
        cov = st["covering"]
        assert st["routing"]["events"] == "covering" and cov["expressions"] == len(live)
        assert cov["routing_table"] < len(live)                # expressions cover one another here
        assert cov["control_messages"] < cov["control_messages_without_covering"]
        assert 0 < st["partitions_reached_per_event"] <= partitions
        if distributors > 1:
            assert cov["saved_between_distributors"] > 0
            assert sum(1 for n in cov["owned_by_distributor"] if n) > 1     # clients on several owners
    finally:
        cl.shutdown()


def test_relaxed_broadcasts_and_the_switch():
    """relaxed scoring keeps broadcasting (covering is conjunctive); covering can be turned
    off for static/weighted; a bad value names the field."""
    rel = rc.MatchConfig(scoring="relaxed", index="ir-tree", k=3)
    cl = _cluster(rel, "attribute", 3)
    try:
        _drive(cl, rc.Matcher(rel), rel, seed=4, steps=6)
        st = cl.stats()
        assert st["covering"] is None and st["partitions_reached_per_event"] == 3.0
    finally:
        cl.shutdown()
    st_cfg = rc.MatchConfig(scoring="static", index="ir-tree", k=3)
    cl = _cluster(st_cfg, "attribute", 3, options={"covering": False})
    try:
        _drive(cl, rc.Matcher(st_cfg), st_cfg, seed=4, steps=6)
        assert cl.stats()["covering"] is None
    finally:
        cl.shutdown()
    with pytest.raises(rc.InvalidInput, match="options.covering"):
        _cluster(rel, "hash", 2, options={"covering": True})
    with pytest.raises(rc.InvalidInput, match="options.covering"):
        _cluster(st_cfg, "hash", 2, options={"covering": "yes"})


def test_owner_of_is_stable():
    assert owner_of(None, 3) == 0 and owner_of("abc", 1) == 0
    assert {owner_of(f"c{i}", 3) for i in range(30)} == {0, 1, 2}
    assert owner_of("abc", 3) == owner_of("abc", 3)


def _tables(cl):
    """Every distributor's routing keys and per-partition forwarded nodes."""
    out = []
    for d in cl._coord.local.dists:
        t = d.local.table.t
        out.append((sorted(t.ids[t.live[: t.n_slots]].tolist()),
                    {p: sd.cov.forwarded().tolist() for p, sd in d.local.sides.items()}))
    return out


def test_routing_state_survives_a_death_and_a_restart(tmp_path):
    """The coverings and routing tables are in the distributors' snapshots: a role death
    (a full recovery: checkpoint, then the log replayed) and a restart of the whole cluster
    from its state directory give back the same tables, and every later answer equals the
    Matcher's."""
    from ray.exceptions import RayActorError

    mcfg = rc.MatchConfig(scoring="static", index="ir-tree", k=4)
    ccfg = rc.ClusterConfig(engine=mcfg, policy="attribute", partitions=3, distributors=2, actor_cpus=0.05,
                            batch_size=4, name="cover-recovery", state_dir=str(tmp_path), checkpoint_every=3600,
                            options={"runtime": "inproc", "durable": True})
    cl = rc.Cluster.start(ccfg, sample=_nested(np.random.default_rng(99), 0, 60, []), fresh=True)
    m = rc.Matcher(mcfg)
    live = _drive(cl, m, mcfg, seed=1, steps=10, clients=2)
    cl.checkpoint()
    _drive(cl, m, mcfg, seed=2, steps=6, clients=2, live=live, start=10_000)     # only in the log
    before = _tables(cl)
    assert sum(len(f) for f in before[0][1].values()) > 0
    co = cl._coord.local
    quiesce, died = co.quiesce, []

    def dies_once():
        if not died:
            died.append(True)
            raise RayActorError()
        return quiesce()
    co.quiesce = dies_once
    _drive(cl, m, mcfg, seed=3, steps=1, clients=2, live=live, start=20_000)
    assert died and len(co.recoveries) == 1
    co.quiesce = quiesce
    _drive(cl, m, mcfg, seed=4, steps=6, clients=2, live=live, start=30_000)
    before = _tables(cl)
    co.store.close_log()
    cl2 = rc.Cluster.start(ccfg)                       # the whole cluster again, from its state
    assert _tables(cl2) == before
    _drive(cl2, m, mcfg, seed=5, steps=8, clients=2, live=live, start=40_000)
    assert cl2.stats()["covering"]["expressions"] == len(live)
    cl2.shutdown()


@pytest.mark.slow     # kills and restarts of Ray processes
def test_a_killed_distributor_resumes_its_routing_on_ray(ray_session, tmp_path):
    """SIGKILL a distributor mid-stream on Ray (two distributors, two clients): the next
    call recovers it from its snapshot and the log, and every answer equals the Matcher's."""
    from tests.kills import Kill, assert_one_recovery

    mcfg = rc.MatchConfig(scoring="weighted", index="ir-tree", k=4)
    ccfg = rc.ClusterConfig(engine=mcfg, policy="attribute", partitions=2, distributors=2, actor_cpus=0.05,
                            batch_size=8, name="cover-kill", state_dir=str(tmp_path), checkpoint_every=0.0)
    cl = rc.Cluster.start(ccfg, sample=_nested(np.random.default_rng(99), 0, 60, []), fresh=True)
    try:
        m = rc.Matcher(mcfg)
        live = _drive(cl, m, mcfg, seed=7, steps=5, clients=2)
        kill = Kill(cl, "distributor", index=1).now()
        _drive(cl, m, mcfg, seed=8, steps=5, clients=2, live=live, start=10_000)
        assert_one_recovery(cl, kill)
        st = cl.stats()
        assert st["covering"]["routing_table"] < len(live)
    finally:
        cl.shutdown()


def test_a_cover_another_distributor_sends_is_not_forwarded_again():
    """The paper between routers: distributor 1's narrow expression is covered by a broad one
    distributor 0 already sends, so it is not forwarded; when the broad one leaves, it is
    re-forwarded (an answer to 0's un-forward) before any event is routed. An identical
    expression is covered the same way."""
    P = 1
    pol = MatchPolicy("hash", P)
    attrs = AttributeTable()
    dists = [MatchDistributor(pol, d, 2, export_metrics=False) for d in range(2)]

    def enc(exprs):
        b, pend = encode_expressions(exprs, attrs)
        attrs.commit(pend)
        return b, np.zeros(len(b), np.int64), list(attrs.kinds)

    def spread(o, upd):
        answers = [x for x in [dists[1 - o].apply_remote(upd)] if x is not None]
        for a in answers:
            assert dists[o].apply_remote(a) is None
        return answers

    broad = rc.Expression(1, [rc.Predicate("x", "between", (0, 10))])
    assert spread(0, dists[0].subscribe_exprs(*enc([broad]))) == []
    up = dists[1].subscribe_exprs(*enc([rc.Expression(2, [rc.Predicate("x", "between", (2, 3))]),
                                        rc.Expression(3, [rc.Predicate("x", "between", (0, 10))])]))
    assert up.n_messages() == 0 and dists[1].counts["forward"] == 0
    spread(1, up)
    assert [len(d.table) for d in dists] == [1, 1]
    answers = spread(0, dists[0].unsubscribe_exprs(np.array([1]), np.zeros(1, np.int64)))
    assert len(answers) == 1 and len(answers[0].add_parts) == 1 and dists[1].counts["reforward"] == 1
    assert [len(d.table) for d in dists] == [1, 1]                # 3 (covering 2) in both tables
    eb, pend = encode_events([rc.Event(1, {"x": 2.5}), rc.Event(2, {"x": 11})], attrs)
    for d in dists:
        r = d.table.route(eb)
        assert r.row(0).tolist() == [0] and r.row(1).tolist() == []

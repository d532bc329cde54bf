"""Ranked matching on the cluster's roles: for every policy and 1 to 4 partitions, the same
rc.Match lists as rc.Matcher (and brute force) after every call, pipelined publishes read
back in event order, listeners, and recovery from a partition's death on Ray."""
from __future__ import annotations

import numpy as np
import pytest

import rankcast as rc
from rankcast.testing import assert_matches_exact
from tests.kills import Kill, assert_one_recovery
from tests.test_match_oracle import _events, _expressions


def _cluster(mcfg, policy, partitions, runtime="inproc", **kw):
    opts = {"runtime": "inproc"} if runtime == "inproc" else {}
    ccfg = rc.ClusterConfig(engine=mcfg, policy=policy, partitions=partitions, actor_cpus=0.05,
                            batch_size=4, name=kw.pop("name", "match-test"), options=opts, **kw)
    return rc.Cluster.start(ccfg, sample=_expressions(np.random.default_rng(99), 0, 50), fresh=True)


def _drive(cl, m, mcfg, seed, steps=14):
    rng = np.random.default_rng(seed)
    live: dict[int, rc.Expression] = {}
    nid = nev = 0
    for step in range(steps):
        r = rng.random()
        if r < 0.4 or not live:
            new = _expressions(rng, nid, int(rng.integers(1, 30)))
            nid += len(new) + 1
            cl.subscribe(new)
            m.subscribe(new)
            live.update((e.id, e) for e in new)
        elif r < 0.55:
            gone = [int(i) for i in rng.choice(list(live), int(rng.integers(1, max(2, len(live) // 3))), replace=False)]
            cl.unsubscribe(gone)
            m.unsubscribe(gone)
            for i in gone:
                del live[i]
        evs = _events(rng, nev, int(rng.integers(1, 11)))
        nev += len(evs)
        k = int(rng.choice([1, 3, 10]))
        if rng.random() < 0.3:            # pipelined: read back in event order by flush
            assert cl.publish(evs, wait=False, k=k) is None
            got = cl.flush()
        else:
            got = cl.publish(evs, k=k)
        assert got == m.publish(evs, k=k)
        assert_matches_exact(got, list(live.values()), evs, mcfg.scoring, k)
    assert cl.stats()["subscriptions"] == len(live)
    return live


@pytest.mark.parametrize("policy,partitions", [(p, n) for p in ("hash", "attribute", "replicate") for n in (1, 2, 4)
                                                if (p, n) != ("replicate", 1)])     # one partition: as hash
@pytest.mark.parametrize("scoring", ["static", "relaxed", "weighted"])
def test_cluster_equals_matcher_after_every_call(scoring, policy, partitions):
    mcfg = rc.MatchConfig(scoring=scoring, index="sopt-r-tree", k=5, rebuild_min=4, rebuild_fraction=0.3)
    cl = _cluster(mcfg, policy, partitions)
    try:
        _drive(cl, rc.Matcher(mcfg), mcfg, seed=partitions * 7 + len(policy))
    finally:
        cl.shutdown()


@pytest.mark.parametrize("index,driver", [("auto", "auto"), ("sopt-r-tree", "pivot")])
@pytest.mark.parametrize("scoring", ["static", "relaxed", "weighted"])
def test_cluster_partitions_serve_the_box_and_pivot_drivers(scoring, index, driver):
    """The partitions build their cores from the configuration: index="auto" (the box
    driver) and the pivot driver answer through the cluster as through one matcher."""
    mcfg = rc.MatchConfig(scoring=scoring, index=index, driver=driver, k=5, rebuild_min=4, rebuild_fraction=0.3)
    cl = _cluster(mcfg, "hash", 2)
    try:
        _drive(cl, rc.Matcher(mcfg), mcfg, seed=31)
        mark = "core_scanned" if driver == "auto" else "core_beyond_pivot"     # counters only these cores keep
        parts = cl.stats()["roles"]["partition"]
        assert len(parts) == 2 and all(mark in p for p in parts)
        assert sum(p["core_events"] for p in parts) > 0
    finally:
        cl.shutdown()


@pytest.mark.parametrize("policy", ["hash", "attribute", "replicate"])
@pytest.mark.parametrize("scoring", ["static", "weighted"])
def test_cluster_serves_the_be_tree_like_the_matcher(scoring, policy):
    mcfg = rc.MatchConfig(scoring=scoring, index="be-tree", k=5, leaf_capacity=2)
    cl = _cluster(mcfg, policy, 2)
    try:
        _drive(cl, rc.Matcher(mcfg), mcfg, seed=11 + len(policy))
    finally:
        cl.shutdown()


def test_listen_follows_matches_and_filters_by_expression():
    mcfg = rc.MatchConfig(scoring="static", index="ir-tree", k=3)
    cl = _cluster(mcfg, "hash", 2)
    try:
        cl.subscribe([rc.Expression(1, [rc.Predicate("x", "<", 5)], score=2.0),
                      rc.Expression(2, [rc.Predicate("x", ">=", 5)], score=1.0)])
        start = cl.position()
        a = cl.publish([rc.Event(10, {"x": 1}), rc.Event(11, {"x": 7})])
        b = cl.publish([rc.Event(12, {"y": 1})])
        got = list(cl.listen(from_position=start + 1, timeout=0.2))
        assert [d.position for d in got] == [start + 2, start + 3]
        assert [d.updates for d in got] == [a, b] and b[0].top == ()
        only2 = list(cl.listen(subscription_ids=[2], from_position=start + 1, timeout=0.2))
        assert [[m.event_id for m in d.updates] for d in only2] == [[11]]
        with pytest.raises(rc.InvalidInput, match="no standing top-k"):
            cl.topk(1)
    finally:
        cl.shutdown()


def test_bad_input_through_the_cluster_changes_nothing():
    mcfg = rc.MatchConfig(scoring="weighted", index="interval-tree")
    cl = _cluster(mcfg, "hash", 2)
    try:
        cl.subscribe([rc.Expression(1, [rc.Predicate("x", "between", (0, 5))])])
        with pytest.raises(rc.InvalidInput, match=r"expression #1 \(id=2\): field 'predicates\[0\].op'"):
            cl.subscribe([rc.Expression(3, [rc.Predicate("x", "==", 1)]), rc.Expression(2, [rc.Predicate("x", "~", 1)])])
        with pytest.raises(rc.InvalidInput, match="holds numbers"):
            cl.publish([rc.Event(1, {"x": "a"})])
        with pytest.raises(rc.UnknownSubscription):
            cl.unsubscribe([3])
        assert [m.top for m in cl.publish([rc.Event(2, {"x": 1})])] == [((1, 1.0),)]
        assert cl.stats()["subscriptions"] == 1
    finally:
        cl.shutdown()


def test_config_refuses_skype_policies_for_matching():
    with pytest.raises(rc.InvalidInput, match="for ranked matching"):
        rc.ClusterConfig(engine=rc.MatchConfig(), policy="prefix")
    assert rc.ClusterConfig(engine=rc.MatchConfig()).policy == "hash"
    assert rc.ClusterConfig(engine=rc.EngineConfig(bounds=(0, 0, 1, 1))).policy == "prefix"


@pytest.mark.parametrize("role,index,policy", [("partition", "sopt-r-tree", "attribute"),
                                               ("aggregator", "sopt-r-tree", "attribute"),
                                               ("distributor", "sopt-r-tree", "attribute"),
                                               ("partition", "be-tree", "attribute"),
                                               ("partition", "be-tree", "replicate")])
@pytest.mark.slow     # kills and restarts of Ray processes
def test_recovers_from_a_killed_role_on_ray(ray_session, tmp_path, role, index, policy):
    """SIGKILL one role's process mid-stream: the next calls recover (checkpoint + log) and
    every answer, and the listener's stream, equal the Matcher's."""
    mcfg = rc.MatchConfig(scoring="relaxed" if index != "be-tree" else "weighted", index=index, k=4, rebuild_min=4,
                          leaf_capacity=2)
    cl = _cluster(mcfg, policy, 2, runtime="ray", name=f"match-kill-{role}-{index}-{policy}", state_dir=str(tmp_path),
                  checkpoint_every=0.0)
    try:
        m = rc.Matcher(mcfg)
        rng = np.random.default_rng(5)
        exprs = _expressions(rng, 0, 120)
        cl.subscribe(exprs)
        m.subscribe(exprs)
        start = cl.position()
        sent = []
        for i in range(6):
            if i == 3:
                kill = Kill(cl, role, index=0).now()
            evs = _events(rng, 100 * i, 8)
            got = cl.publish(evs)
            assert got == m.publish(evs)
            sent.append(got)
            if i == 4:
                more = _expressions(rng, 1000, 20)
                cl.subscribe(more)
                m.subscribe(more)
        seen = list(cl.listen(from_position=start + 1, timeout=0.3))
        assert [d.updates for d in seen] == sent
        assert_one_recovery(cl, kill)
    finally:
        cl.shutdown()


@pytest.mark.parametrize("index", ["ir-tree", "be-tree"])
@pytest.mark.slow     # kills and restarts of Ray processes
def test_whole_cluster_restart_resumes_the_expressions(ray_session, tmp_path, index):
    mcfg = rc.MatchConfig(scoring="weighted", index=index, k=4, leaf_capacity=3)
    kw = dict(name=f"match-restart-{index}", state_dir=str(tmp_path))
    cl = _cluster(mcfg, "hash", 2, runtime="ray", **kw)
    rng = np.random.default_rng(3)
    exprs = _expressions(rng, 0, 80)
    cl.subscribe(exprs)
    cl.unsubscribe([e.id for e in exprs[:10]])
    evs = _events(rng, 0, 12)
    before = cl.publish(evs)
    cl.shutdown(keep_state=True)
    ccfg = rc.ClusterConfig(engine=mcfg, policy="hash", partitions=2, actor_cpus=0.05, batch_size=4, **kw)
    cl = rc.Cluster.start(ccfg)
    try:
        assert cl.stats()["subscriptions"] == 70
        assert cl.publish(evs) == before
        assert_matches_exact(before, exprs[10:], evs, "weighted", 4)
        cl.shutdown(keep_state=True)
        with pytest.raises(rc.InvalidInput, match="another engine config"):
            rc.Cluster.start(ccfg.replace(engine=mcfg.replace(k=5)))
        cl = rc.Cluster.start(ccfg)
        assert cl.publish(evs) == before
    finally:
        cl.shutdown()


def test_bulk_load_from_jsonl_and_parquet_in_process(tmp_path):
    """The kind's tables through the bulk load: JSONL with native values and Parquet give the
    Matcher's answers; a malformed line loads nothing and is named."""
    import json

    import pyarrow.parquet as pq

    from rankcast.ingest.match_tables import events_table, expressions_table
    mcfg = rc.MatchConfig(scoring="static", index="sopt-r-tree", k=4)
    rng = np.random.default_rng(11)
    exprs = _expressions(rng, 0, 90)
    evs = _events(rng, 0, 20)
    m = rc.Matcher(mcfg)
    m.subscribe(exprs)
    want = m.publish(evs)
    lines = [json.dumps({"id": e.id, "score": e.score, "predicates": [
        {"attr": p.attr, "op": p.op, "value": list(p.value) if isinstance(p.value, tuple) else p.value,
         "weight": p.weight} for p in e.predicates]}) for e in exprs]
    (tmp_path / "bad.jsonl").write_text("\n".join(lines[:40] + ["[1, 2]"] + lines[40:]) + "\n")
    (tmp_path / "good.jsonl").write_text("\n".join(lines) + "\n")
    pq.write_table(expressions_table(exprs), tmp_path / "exprs.parquet")
    for src in ("good.jsonl", "exprs.parquet"):
        cl = _cluster(mcfg, "attribute", 2)
        try:
            if src == "good.jsonl":
                with pytest.raises(rc.InvalidInput, match=r"line 41.*expected a JSON object"):
                    cl.load_subscriptions(tmp_path / "bad.jsonl", batch_rows=30, progress=False)
                assert cl.stats()["subscriptions"] == 0
            assert cl.load_subscriptions(tmp_path / src, batch_rows=30, progress=False) == len(exprs)
            assert cl.publish(events_table(evs)) == want
        finally:
            cl.shutdown()


def _expression_files(tmp_path, exprs, evs):
    """An expression table (Parquet) and an event stream (JSONL) on disk."""
    import json

    import pyarrow.parquet as pq

    from rankcast.ingest.match_tables import expressions_table
    pq.write_table(expressions_table(exprs), tmp_path / "exprs.parquet")
    with open(tmp_path / "events.jsonl", "w") as f:
        for e in evs:
            f.write(json.dumps({"id": e.id, "values": dict(e.values)}) + "\n")
    return tmp_path / "exprs.parquet", tmp_path / "events.jsonl"


def test_rankcast_run_starts_a_ranked_matching_cluster_from_its_config_file(tmp_path, capsys):
    """``rankcast run`` with a config of kind ``matching``: the cluster (in this process) loads
    the expression table, replays the events, and reports them under its kind."""
    import json

    from rankcast import cli
    rng = np.random.default_rng(12)
    exprs, evs = _expressions(rng, 0, 60), _events(rng, 0, 25)
    xp, ep = _expression_files(tmp_path, exprs, evs)
    (tmp_path / "match.yaml").write_text(
        "kind: matching\nengine: {scoring: static, k: 3, leaf_capacity: 20}\n"
        "cluster: {name: run-match-inproc, partitions: 2, policy: attribute, options: {runtime: inproc}}\n")
    assert cli.main(["run", "--config", str(tmp_path / "match.yaml"), "--subscriptions", str(xp),
                     "--source", str(ep), "--out", str(tmp_path / "out.json")]) == 0
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["kind"] == "matching" and out["started"]
    assert out["subscriptions_loaded"] == len(exprs) and out["replay"]["messages"] == len(evs)
    assert out["stats"]["subscriptions"] == len(exprs) and out["stats"]["published"] == len(evs)
    assert out["stats"]["policy"] == "attribute" and out["stats"]["partitions"] == 2
    capsys.readouterr()
    # flags alone, without a file; a field of the wrong kind is named
    assert cli.main(["run", "--kind", "matching", "--set", "engine.scoring=relaxed",
                     "--set", "cluster.options={runtime: inproc}", "--set", "cluster.name=run-flags"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "matching"
    assert cli.main(["run", "--kind", "matching", "--set", "engine.bounds=[0, 0, 1, 1]"]) == 2
    assert "section 'engine': unknown field(s) ['bounds']" in capsys.readouterr().err
    assert cli.main(["run", "--kind", "paint"]) == 2
    assert "field 'kind': must be one of" in capsys.readouterr().err


def test_rankcast_run_leaves_a_ranked_matching_cluster_for_rankcast_load(ray_session, tmp_path, capsys):
    """``rankcast run --kind matching --keep`` starts a cluster on Ray and leaves it running:
    ``rankcast load expressions`` loads into it (``rankcast load subscriptions`` is refused),
    and it answers as the Matcher does."""
    from rankcast import cli
    from rankcast.ingest.match_tables import events_table
    rng = np.random.default_rng(13)
    exprs, evs = _expressions(rng, 0, 80), _events(rng, 0, 20)
    xp, _ = _expression_files(tmp_path, exprs, evs)
    mcfg = rc.MatchConfig(scoring="weighted", k=4)
    name, ns = "run-match-ray", "rankcast-tests"
    assert cli.main(["run", "--kind", "matching", "--set", "engine.k=4", "--set", f"cluster.name={name}",
                     "--set", f"cluster.namespace={ns}", "--set", "cluster.partitions=2",
                     "--set", "cluster.actor_cpus=0.05", "--keep"]) == 0
    cl = rc.Cluster.attach(name, namespace=ns)
    try:
        assert cl.kind == "matching" and cl.config().engine == mcfg
        assert cli.main(["load", "subscriptions", str(xp), "--cluster", name, "--namespace", ns]) == 2
        assert "serves ranked matching (expressions and events): it takes no subscriptions" in capsys.readouterr().err
        assert cli.main(["load", "expressions", str(xp), "--cluster", name, "--namespace", ns]) == 0
        m = rc.Matcher(mcfg)
        m.subscribe(exprs)
        assert cl.publish(events_table(evs)) == m.publish(evs)
        assert cl.stats()["subscriptions"] == len(exprs)
    finally:
        cl.shutdown()


def test_a_partitions_warm_loads_both_sides_of_the_race_and_leaves_it_empty():
    """``warm`` (Cluster.warm, before a stream): a partition loads the kernels of its core,
    under index="auto" both the box tree's and the BE*-tree's (the race between them runs in
    a stream's first events), and holds no expression afterwards."""
    from rankcast.kinds.matching import boxtree
    from rankcast.kinds.matching.roles import MatchPartition
    from rankcast.kinds.matching.warmup import WARM_EXPRESSIONS
    from rankcast.kinds.matching.auto import AutoCore

    assert WARM_EXPRESSIONS > AutoCore.RACE_MIN
    p = MatchPartition(rc.MatchConfig(scoring="weighted", index="auto", k=5), 0, export_metrics=False)
    p.warm()
    assert len(p.core) == 0 and p.step == 0 and p.core.stats()["expressions"] == 0
    loaded = [f for f in vars(boxtree).values() if hasattr(f, "signatures") and f.signatures]
    assert loaded, "the box tree's kernels were not loaded"


def test_replicate_places_every_expression_everywhere_and_splits_the_events():
    """``replicate``: each partition holds every expression and answers a run of each step's
    events; covering routing has nothing to route there (asking for it is an error)."""
    mcfg = rc.MatchConfig(scoring="weighted", index="auto", k=3)
    cl = _cluster(mcfg, "replicate", 3)
    try:
        rng = np.random.default_rng(8)
        m = rc.Matcher(mcfg)
        exprs = _expressions(rng, 0, 60)
        cl.subscribe(exprs)
        m.subscribe(exprs)
        evs = _events(rng, 0, 40)
        assert cl.publish(evs) == m.publish(evs)
        st = cl.stats()
        parts = st["roles"]["partition"]
        assert [p["subscriptions"] for p in parts] == [60, 60, 60]
        assert sum(p["messages"] for p in parts) == 40 and all(p["messages"] > 0 for p in parts)
        assert st["partitions_reached_per_event"] == 1.0 and st["routing"]["events"] == "split"
        cl.unsubscribe([e.id for e in exprs[::3]])
        m.unsubscribe([e.id for e in exprs[::3]])
        assert [p["subscriptions"] for p in cl.stats()["roles"]["partition"]] == [40, 40, 40]
        evs = _events(rng, 100, 7)
        assert cl.publish(evs) == m.publish(evs)
    finally:
        cl.shutdown()
    with pytest.raises(rc.InvalidInput, match="options.covering"):
        rc.Cluster.start(rc.ClusterConfig(engine=mcfg, policy="replicate", partitions=2,
                                          options={"runtime": "inproc", "covering": True}), fresh=True)

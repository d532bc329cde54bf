"""Range top-k on the cluster's roles: for every method, an epsilon > 0, both policies and 1
to 4 partitions, the same updates and topk as rc.RangeEngine (itself checked against brute
force in test_range_oracle) after every call, each update sent to exactly the partitions
whose span holds its object before or after it; pipelined publishes read back by flush and
by listeners; updates reach only the partitions whose subscriptions they can reach; bad
input changes nothing."""
from __future__ import annotations

import numpy as np
import pytest

import rankcast as rc
from rankcast.baselines.rangetopk import brute_topk
from rankcast.runtime.coordinator import latest_lists

METHODS = [("paint-dense", 0.0, True), ("paint-dense", 0.5, False), ("paint-sparse", 0.0, False),
           ("paint-sparse", 0.5, True), ("unicast", 0.0, True), ("unicast", 0.0, False)]


def _cluster(rcfg, partitions, policy="kd", runtime="inproc", sample=None, **kw):
    opts = {"runtime": "inproc"} if runtime == "inproc" else {}
    ccfg = rc.ClusterConfig(engine=rcfg, policy=policy, partitions=partitions, actor_cpus=0.05,
                            name=kw.pop("name", "range-test"), options=opts, **kw)
    return rc.Cluster.start(ccfg, sample=sample, fresh=True)


def _subs(rng, first, n):
    out = []
    for i in range(n):
        lo, hi = sorted(rng.choice(np.arange(-1.0, 13.0, 0.5), 2))
        out.append(rc.RangeSubscription(first + i, float(lo), float(hi)))
    return out


def _updates(rng, objs: dict, next_id: int):
    ups, used = [], set()
    for _ in range(int(rng.integers(1, 12))):
        if rng.random() < 0.35 or not objs:
            ups.append(rc.ObjectUpdate(next_id, float(rng.integers(0, 12)), float(rng.integers(0, 6))))
            next_id += 1
        else:
            i = int(rng.choice(list(objs)))
            if i in used:
                continue
            r = rng.random()
            ups.append(rc.ObjectUpdate(i) if r < 0.2 else
                       rc.ObjectUpdate(i, float(rng.integers(0, 12)), float(rng.integers(0, 6))) if r < 0.4 else
                       rc.ObjectUpdate(i, None, float(rng.integers(0, 6))))
        used.add(ups[-1].id)
    for u in ups:
        if u.y is None:
            del objs[u.id]
        else:
            objs[u.id] = (objs[u.id][0] if u.x is None else u.x, u.y)
    return ups, next_id


def _routed(spans, before: dict, after: dict, ups) -> int:
    """(update, partition) pairs of a call: the partitions whose span (closed) holds the
    object's position before or after the update."""
    n = 0
    for u in ups:
        xs = [d[u.id][0] for d in (before, after) if u.id in d]
        n += sum(any(a <= x <= b for x in xs) for a, b in spans)
    return n


def _as_updates(arrays_or_list):
    return [(u.subscription_id, tuple(u.topk)) for u in arrays_or_list]


def _drive(cl, eng, seed, steps=16):
    """Random calls on both; equal after every call. Returns the live subscriptions."""
    rng = np.random.default_rng(seed)
    subs: dict[int, tuple[float, float]] = {}
    objs: dict[int, tuple[float, float]] = {}
    nid = next_obj = 0
    routed = 0
    for step in range(steps):
        r = rng.random()
        if r < 0.25 or not subs:
            new = _subs(rng, nid, int(rng.integers(1, 25)))
            nid += len(new) + 1
            cl.subscribe(new)
            eng.subscribe(new)
            subs.update((s.id, (s.lo, s.hi)) for s in new)
        elif r < 0.35:
            gone = [int(i) for i in rng.choice(list(subs), int(rng.integers(1, max(2, len(subs) // 3))),
                                                 replace=False)]
            cl.unsubscribe(gone)
            eng.unsubscribe(gone)
            for i in gone:
                del subs[i]
        spans = cl.stats()["spans"]
        if rng.random() < 0.3:            # pipelined calls, read back by flush
            want = []
            for _ in range(int(rng.integers(1, 4))):
                before = dict(objs)
                ups, next_obj = _updates(rng, objs, next_obj)
                routed += _routed(spans, before, objs, ups)
                assert cl.publish(ups, wait=False) is None
                want.append(eng.publish(ups))
            got = cl.flush()
            outs = [w for w in want if w]
            if outs:
                from rankcast.common.updates import updates_from_arrays
                arrays = [(np.array([u.subscription_id for u in w], np.int64),
                           np.cumsum([0] + [len(u.topk) for u in w]),
                           np.array([o for u in w for o, _ in u.topk], np.int64),
                           np.array([y for u in w for _, y in u.topk], float)) for w in outs]
                want_flat = updates_from_arrays(*latest_lists(arrays)) if len(arrays) > 1 else outs[0]
            else:
                want_flat = []
            assert _as_updates(got) == _as_updates(want_flat)
        else:
            before = dict(objs)
            ups, next_obj = _updates(rng, objs, next_obj)
            routed += _routed(spans, before, objs, ups)
            assert _as_updates(cl.publish(ups)) == _as_updates(eng.publish(ups))
        ids = sorted(subs)
        got = cl.topk_many(ids)
        for i in ids:
            assert got[i] == eng.topk(i) == brute_topk(objs, *subs[i], eng.cfg.k), i
    st, es = cl.stats(), eng.stats()
    assert st["subscriptions"] == len(subs) and st["objects"] == es["objects"]
    assert st["published"] == es["published"]
    assert st["updates_routed"] == routed
    assert all(any(a <= lo and hi <= b for a, b in st["spans"]) for lo, hi in subs.values())
    for (a, b), part in zip(st["spans"], st["roles"]["partition"]):   # each holds the objects of its span
        assert part["objects"] == sum(a <= x <= b for x, _ in objs.values())
    parts = st["roles"]["partition"]
    assert sum(p["messages_generated"] for p in parts) == st["messages_generated"]
    return subs


@pytest.mark.parametrize("partitions", [1, 2, 4])
@pytest.mark.parametrize("method, epsilon, batch", METHODS)
def test_cluster_equals_range_engine_after_every_call(method, epsilon, batch, partitions):
    rcfg = rc.RangeConfig(k=3, method=method, epsilon=epsilon, batch=batch, leaf_size=4)
    cl = _cluster(rcfg, partitions)
    try:
        _drive(cl, rc.RangeEngine(rcfg), seed=partitions * 13 + len(method) + int(10 * epsilon))
    finally:
        cl.shutdown()


@pytest.mark.parametrize("policy", ["kd", "hash"])
def test_sample_fitted_regions_and_hash_placement(policy):
    rng = np.random.default_rng(4)
    rcfg = rc.RangeConfig(k=2, method="paint-sparse", leaf_size=4)
    cl = _cluster(rcfg, 3, policy=policy, sample=_subs(rng, 0, 60))
    try:
        _drive(cl, rc.RangeEngine(rcfg), seed=21, steps=10)
        routing = cl.stats()["routing"]
        assert routing["policy"] == policy and len(routing["splits"]) == (2 if policy == "kd" else 0)
    finally:
        cl.shutdown()


def test_messages_go_only_to_the_partitions_they_can_reach():
    """Subscriptions in two far apart groups of (lo, hi) space, 2 kd partitions: an object
    among the first group's ranges reaches one partition, which holds it and paints it; the
    other holds and paints nothing."""
    rcfg = rc.RangeConfig(k=2, method="paint-sparse")
    cl = _cluster(rcfg, 2)
    eng = rc.RangeEngine(rcfg)
    try:
        subs = [rc.RangeSubscription(i, float(i % 5), 10.0 + i % 5) for i in range(20)] + \
               [rc.RangeSubscription(100 + i, 1000.0 + i % 5, 1010.0 + i % 5) for i in range(20)]
        cl.subscribe(subs)
        eng.subscribe(subs)
        ups = [rc.ObjectUpdate(j, 3.0 + j, float(j)) for j in range(4)]
        assert _as_updates(cl.publish(ups)) == _as_updates(eng.publish(ups))
        st = cl.stats()
        assert st["messages_generated"] > 0
        assert st["updates_routed"] == 4 and st["partitions_reached_per_update"] == 1.0   # one partition each
        parts = sorted(st["roles"]["partition"], key=lambda p: p["updates"])
        assert parts[0]["updates"] == parts[0]["messages_generated"] == parts[0]["messages_received"] == 0
        assert parts[1]["updates"] == 4 and parts[1]["objects"] == 4
        assert parts[1]["messages_received"] == eng.stats()["messages_received"]
    finally:
        cl.shutdown()


def test_listen_arrow_and_bad_input():
    rcfg = rc.RangeConfig(k=2, method="paint-dense")
    cl = _cluster(rcfg, 2)
    try:
        cl.subscribe([rc.RangeSubscription(1, 0.0, 5.0), rc.RangeSubscription(2, 4.0, 9.0)])
        start = cl.position()
        a = cl.publish([rc.ObjectUpdate(10, 1.0, 3.0), rc.ObjectUpdate(11, 4.5, 2.0)])
        b = cl.publish([rc.ObjectUpdate(12, 8.0, 1.0)])
        seen = list(cl.listen(from_position=start + 1, timeout=0.2))
        assert [d.updates for d in seen] == [a, b] and [d.position for d in seen] == [start + 2, start + 3]
        only1 = list(cl.listen(subscription_ids=[1], from_position=start + 1, timeout=0.2))
        assert [[u.subscription_id for u in d.updates] for d in only1] == [[1]]
        t = cl.publish([rc.ObjectUpdate(11)], updates="arrow")
        assert t.column_names == ["subscription_id", "rank", "object_id", "score"]
        assert t.to_pydict()["object_id"] == [10, 12]
        with pytest.raises(rc.InvalidInput, match=r"range subscription #1 \(id=4\): field 'hi'"):
            cl.subscribe([rc.RangeSubscription(3, 0.0, 1.0), rc.RangeSubscription(4, 2.0, 1.0)])
        with pytest.raises(rc.InvalidInput, match=r"object update #0 \(id=99\): field 'y'"):
            cl.publish([rc.ObjectUpdate(99)])
        with pytest.raises(rc.InvalidInput, match=r"object update #1 \(id=50\): field 'x'"):
            cl.publish([rc.ObjectUpdate(12, None, 0.5), rc.ObjectUpdate(50, None, 1.0)])
        with pytest.raises(rc.InvalidInput, match="already subscribed"):
            cl.subscribe([rc.RangeSubscription(2, 0.0, 1.0)])
        with pytest.raises(rc.UnknownSubscription):
            cl.unsubscribe([3])
        with pytest.raises(rc.UnknownSubscription):
            cl.topk(3)
        assert cl.topk(2) == [(12, 1.0)] and cl.topk(1) == [(10, 3.0)]
        assert cl.stats()["subscriptions"] == 2 and cl.stats()["objects"] == 2
        with pytest.raises(rc.InvalidInput, match="for range top-k"):
            rc.ClusterConfig(engine=rcfg, policy="prefix")
        for name in ("distributors", "aggregators"):
            with pytest.raises(rc.InvalidInput, match=f"field '{name}': range top-k runs its Paint servers in"):
                rc.ClusterConfig(engine=rcfg, **{name: 2})
    finally:
        cl.shutdown()


class _Recorder:
    """rc.RangeEngine that also records the stream a listener must see: (position, updates)
    of every call that changed something."""

    def __init__(self, rcfg):
        self.eng = rc.RangeEngine(rcfg)
        self.stream: list[tuple[int, list]] = []

    def publish(self, ups):
        out = self.eng.publish(ups)
        if out:
            self.stream.append((self.eng.stats()["published"], out))
        return out


@pytest.mark.parametrize("role", ["partition", "coordinator"])
@pytest.mark.slow     # kills and restarts of Ray processes
def test_recovers_from_killed_roles_on_ray(ray_session, tmp_path, role):
    """SIGKILL one of the kind's processes between two calls, then again at a random moment
    of a call: the calls recover (checkpoint + log) and every answer, topk and the
    listener's stream equal the engine's."""
    from tests.kills import Kill, assert_one_recovery

    rcfg = rc.RangeConfig(k=3, method="paint-sparse", epsilon=0.5, leaf_size=4)
    cl = _cluster(rcfg, 3, runtime="ray", name=f"range-kill-{role}", state_dir=str(tmp_path),
                  checkpoint_every=0.2)
    rec = _Recorder(rcfg)
    rng = np.random.default_rng(17)
    subs = _subs(rng, 0, 80)
    objs: dict = {}
    next_obj = 0
    try:
        cl.subscribe(subs)
        rec.eng.subscribe(subs)
        kills = []
        for i in range(12):
            if i == 4:
                kills.append(Kill(cl, role, index=0).now())
            if i == 5:          # the first death met (a call may not reach the role) and recovered
                assert_one_recovery(cl, kills[0])
            if i == 8:          # 10 ms into the next call
                kills.append(Kill(cl, role, index=-1, delay=0.01))
                kills[-1].start()
            if i == 6:
                more = _subs(rng, 1000, 10)
                cl.subscribe(more)
                rec.eng.subscribe(more)
                subs += more
            ups, next_obj = _updates(rng, objs, next_obj)
            assert _as_updates(cl.publish(ups)) == _as_updates(rec.publish(ups))
        got = cl.topk_many([s.id for s in subs])
        assert all(got[s.id] == rec.eng.topk(s.id) == brute_topk(objs, s.lo, s.hi, 3) for s in subs)
        seen = [(d.position, d.updates) for d in cl.listen(from_position=1, timeout=0.3)]
        assert seen == rec.stream
        assert_one_recovery(cl, kills[1])
        assert cl.stats()["objects"] == rec.eng.stats()["objects"]
    finally:
        cl.shutdown()


def test_pipelined_calls_reach_a_listener_without_flush():
    """publish(wait=False) calls are cut at the delivery interval by a listener's poll: the
    listener sees, per subscription, the engine's latest list, at increasing positions."""
    from tests.waits import wait_until

    rcfg = rc.RangeConfig(k=2, method="unicast")
    cl = _cluster(rcfg, 3, delivery_interval=0.05)
    eng = rc.RangeEngine(rcfg)
    try:
        rng = np.random.default_rng(6)
        subs = _subs(rng, 0, 40)
        cl.subscribe(subs)
        eng.subscribe(subs)
        start = cl.position()
        objs: dict = {}
        nxt = 0
        latest: dict = {}
        for _ in range(5):
            ups, nxt = _updates(rng, objs, nxt)
            assert cl.publish(ups, wait=False) is None
            latest.update((u.subscription_id, tuple(u.topk)) for u in eng.publish(ups))
        seen: list = []
        got: dict = {}

        def caught_up():             # listened for, resuming after the last delivery seen
            for d in cl.listen(from_position=seen[-1].position + 1 if seen else start + 1, timeout=0.3):
                seen.append(d)
                got.update((u.subscription_id, tuple(u.topk)) for u in d.updates)
            return got == latest
        wait_until(caught_up, "the listener saw every subscription's latest list")
        assert seen and [d.position for d in seen] == sorted({d.position for d in seen})
        assert got == latest
    finally:
        cl.shutdown()


def test_object_positions_and_routing_against_a_dict():
    """The coordinator's object table through inserts, moves, value changes and deletes of
    3,000 objects (past its first capacity, reusing freed slots): slots, positions and the
    objects a grown span gains equal a dict's; route_updates sends each update to exactly
    the spans holding its object before or after it, in the form each needs."""
    from rankcast.kinds.range.roles import ObjectPositions, route_updates

    rng = np.random.default_rng(8)
    tab, ref = ObjectPositions(), {}
    spans = np.array([[0.0, 4.0], [3.0, 9.0], [20.0, 30.0]])
    for _ in range(40):
        ids = rng.choice(4000, 150, replace=False).astype(np.int64)
        x = np.full(len(ids), np.nan)
        y = rng.integers(0, 50, len(ids)).astype(float)
        for j, i in enumerate(ids.tolist()):
            r = rng.random()
            if i not in ref or r < 0.3:
                x[j] = rng.integers(0, 12)
            elif r < 0.5:
                y[j] = np.inf
        ok = np.array([i in ref or not np.isnan(xx) for i, xx in zip(ids.tolist(), x.tolist())])
        ids, x, y = ids[ok], x[ok], y[ok]
        slots = tab.slots(ids)
        assert ((slots >= 0) == np.array([i in ref for i in ids.tolist()])).all()
        old = tab.positions(slots)
        routed = route_updates(x, y, old, spans)
        for (a, b), got in zip(spans.tolist(), routed):
            want = {}
            for i, xx, yy in zip(ids.tolist(), x.tolist(), y.tolist()):
                before = ref[i][0] if i in ref else None
                after = None if np.isinf(yy) else (before if np.isnan(xx) else xx)
                was = before is not None and a <= before <= b
                now = after is not None and a <= after <= b
                if was and now:
                    want[i] = (xx, yy)
                elif now:
                    want[i] = (after, yy)
                elif was:
                    want[i] = (np.nan, np.inf)
            if got is None:
                assert not want
                continue
            rows, px, py = got
            have = {int(ids[r]): (px[n], py[n]) for n, r in enumerate(rows.tolist())}
            assert have.keys() == want.keys()
            for i, (xx, yy) in want.items():
                assert (np.isnan(xx) and np.isnan(have[i][0]) or have[i][0] == xx) and have[i][1] == yy
        tab.apply(ids, x, y, slots)
        for i, xx, yy in zip(ids.tolist(), x.tolist(), y.tolist()):
            if np.isinf(yy):
                del ref[i]
            else:
                ref[i] = (ref[i][0] if np.isnan(xx) else xx, yy)
        assert len(tab) == len(ref)
    live = np.array(sorted(ref), np.int64)
    assert (tab.positions(tab.slots(live)) == np.array([ref[i][0] for i in live.tolist()])).all()
    gi, gx, gy = tab.between(2.0, 8.0, 4.0, 6.0)
    want = sorted(i for i, (xx, _) in ref.items() if 2 <= xx <= 8 and not 4 <= xx <= 6)
    assert sorted(gi.tolist()) == want and want
    assert len(tab.ids) > 1024 and len(tab.free) > 0        # grown past its first capacity, slots freed
    assert all(ref[i] == (xx, yy) for i, xx, yy in zip(gi.tolist(), gx.tolist(), gy.tolist()))

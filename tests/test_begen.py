"""The BE*-tree paper's workloads (rankcast.ingest.begen): Table III knobs, the
inverse-frequency weights, the match probability, and the GeoNames workload's encoding."""
from __future__ import annotations

import numpy as np
import pytest

from rankcast.baselines.matching import ScanCore
from rankcast.ingest.begen import (JITTER, RANGE_PAD, SCORES, begen, geonames_betree, match_matrix,
                                   measured_match_prob, sizes)
from rankcast.kinds.matching.predicates import BETWEEN, EQ, IN, encode_events, encode_expressions
from rankcast.testing import brute_match


def _rows(off, col):
    return [col[off[i]:off[i + 1]] for i in range(len(off) - 1)]


def _same_batch(x, y, fields):
    for f in fields:
        np.testing.assert_array_equal(getattr(x, f), getattr(y, f), err_msg=f)


EXPR_FIELDS = ("ids", "score", "pred_off", "attr", "op", "a", "b", "weight", "lo", "hi", "set_off", "set_vals")
EVENT_FIELDS = ("ids", "off", "attr", "val", "weight")


def test_knobs_shapes_and_bounds():
    card = 5000
    w = begen(5000, dims=60, cardinality=card, sub_size=6, event_size=12, n_events=200, seed=3)
    e, v = w.exprs, w.events
    assert w.n_attrs == 60 and len(e) == 5000 and len(v) == 200
    assert e.pred_off[0] == 0 and e.pred_off[-1] == len(e.attr) and np.all(np.diff(e.pred_off) >= 1)
    assert e.attr.min() >= 0 and e.attr.max() < 60 and v.attr.min() >= 0 and v.attr.max() < 60
    for col in (e.a, e.b, v.val):
        assert col.min() >= 0 and col.max() <= card - 1 and np.all(col == np.round(col))
    assert set(np.unique(e.op).tolist()) == {EQ, BETWEEN}
    assert np.all(e.a <= e.b) and np.all(e.b - e.a <= 2 * RANGE_PAD + JITTER)
    assert np.all(e.a[e.op == EQ] == e.b[e.op == EQ])
    np.testing.assert_array_equal(e.lo, e.a), np.testing.assert_array_equal(e.hi, e.b)
    assert np.all(e.set_off == 0) and len(e.set_vals) == 0
    # one predicate per attribute; event attributes sorted
    assert all(len(np.unique(r)) == len(r) for r in _rows(e.pred_off, e.attr))
    assert all(np.all(np.diff(r) > 0) for r in _rows(v.off, v.attr))
    sz = sizes(w)
    assert abs(sz["avg_expression_size"] - 6) < 0.3 and abs(sz["avg_event_size"] - 12) < 0.5
    assert sz["attributes_used"] == 60 and sz["predicates"] == len(e.attr)
    w = begen(3000, dims=400, sub_size=30, event_size=45, n_events=100, seed=1)
    sz = sizes(w)
    assert abs(sz["avg_expression_size"] - 30) < 1.5 and abs(sz["avg_event_size"] - 45) < 1.5
    assert len(begen(0, dims=10, n_events=5).exprs) == 0


def test_small_domain_sizes_stay_distinct():
    w = begen(300, dims=20, sub_size=15, event_size=18, attr_dist="zipf", zipf_skew=2.0, n_events=40, seed=2)
    assert all(len(np.unique(r)) == len(r) for r in _rows(w.exprs.pred_off, w.exprs.attr))
    assert all(np.all(np.diff(r) > 0) for r in _rows(w.events.off, w.events.attr))
    assert np.diff(w.events.off).max() <= 20


def test_zipf_skews_attribute_frequency():
    u = np.bincount(begen(20000, dims=100, n_events=100, seed=0).exprs.attr, minlength=100)
    z = np.bincount(begen(20000, dims=100, n_events=100, attr_dist="zipf", seed=0).exprs.attr, minlength=100)
    assert u.max() / u.min() < 2.0
    assert z[0] > 10 * np.median(z) and z[:10].sum() > 0.35 * z.sum()
    assert np.all(np.diff(z[:5]) < 0)          # attribute 0 the most popular, then 1, ...


def _groups(vals, gap=1000):
    vals = np.unique(vals)
    cut = np.flatnonzero(np.diff(vals) > gap) + 1
    return [g.max() - g.min() for g in np.split(vals, cut)]


def test_clusters_concentrate_values():
    cs = 50
    w = begen(4000, dims=20, cardinality=10 ** 7, clusters=2, cluster_size=cs, n_events=200, seed=5)
    for at in range(20):
        vals = np.concatenate([w.exprs.a[w.exprs.attr == at], w.exprs.b[w.exprs.attr == at],
                               w.events.val[w.events.attr == at]])
        ext = _groups(vals)
        assert len(ext) <= 2 and max(ext) <= 2 * cs + 2 * RANGE_PAD + JITTER, (at, ext)
    u = begen(4000, dims=20, cardinality=10 ** 7, clusters=0, n_events=200, seed=5)
    assert all(len(_groups(u.exprs.a[u.exprs.attr == at])) > 50 for at in range(20))


def test_weights_follow_the_inverse_frequency_rule():
    w = begen(20000, dims=50, n_events=500, attr_dist="zipf", seed=4)
    for batch, n in ((w.exprs, len(w.exprs)), (w.events, len(w.events))):
        inv = np.log1p(n / np.bincount(batch.attr, minlength=50).clip(1))[batch.attr]
        assert np.all(np.isfinite(batch.weight)) and np.all(batch.weight > 0)
        assert np.all(batch.weight >= inv - 1e-12)
        assert np.mean(batch.weight == inv) > 0.99            # max(inv, N(0.8 inv, 0.05 inv))
    wt = w.exprs.weight
    assert wt[w.exprs.attr == 0].max() < wt[w.exprs.attr == 49].min()   # popular: lighter
    assert set(np.unique(w.exprs.score).tolist()) == set(SCORES)


def test_deterministic_by_seed():
    a, b, c = (begen(2000, dims=80, n_events=100, seed=s) for s in (7, 7, 8))
    _same_batch(a.exprs, b.exprs, EXPR_FIELDS), _same_batch(a.events, b.events, EVENT_FIELDS)
    assert a.knobs == b.knobs
    assert not np.array_equal(a.exprs.attr[:200], c.exprs.attr[:200])
    g1, g2 = geonames_betree(300, n_events=50, seed=2), geonames_betree(300, n_events=50, seed=2)
    _same_batch(g1.exprs, g2.exprs, EXPR_FIELDS), _same_batch(g1.events, g2.events, EVENT_FIELDS)


@pytest.mark.parametrize("target, dist", [(0.001, "uniform"), (0.01, "uniform"), (0.05, "uniform"),
                                          (0.001, "zipf")])
def test_measured_match_probability_near_target(target, dist):
    w = begen(4000, match_prob=target, attr_dist=dist, n_events=500, seed=11)
    p = measured_match_prob(w, None)
    assert w.measured_match_prob == p
    assert 0.75 * target <= p <= 1.33 * target, p
    # a sample estimates it too
    assert 0.5 * target <= measured_match_prob(w, 1500) <= 2 * target


def test_size_spread_sets_how_sizes_vary():
    """size_spread=0: every expression and event of exactly the average size (the match
    probability still reached); the default spreads them avg +- avg // 4; a spread of 0.5 wider."""
    w0 = begen(4000, sub_size=8, event_size=15, size_spread=0.0, n_events=500, seed=5)
    assert set(np.diff(w0.exprs.pred_off).tolist()) == {8}
    assert set(np.diff(w0.events.off).tolist()) == {15}
    assert w0.knobs["size_spread"] == 0.0
    assert 0.75 * 0.001 <= measured_match_prob(w0, None) <= 1.33 * 0.001
    w1 = begen(4000, sub_size=8, event_size=15, n_events=500, seed=5)
    assert set(np.diff(w1.exprs.pred_off).tolist()) == set(range(6, 11))
    assert set(np.diff(w1.events.off).tolist()) <= set(range(12, 19))
    w2 = begen(4000, sub_size=8, event_size=15, size_spread=0.5, n_events=500, seed=5)
    assert set(np.diff(w2.exprs.pred_off).tolist()) == set(range(4, 13))
    with pytest.raises(ValueError):
        begen(10, size_spread=1.0)


def _scan(w, k):
    core = ScanCore("weighted")
    core.add(w.exprs, w.n_attrs)
    return core.match(w.events, k)


def test_brute_force_and_objects_agree_with_the_scan():
    w = begen(400, dims=30, cardinality=3000, sub_size=4, event_size=10, match_prob=0.05, n_events=30, seed=9)
    mm = match_matrix(w.exprs, w.events, w.n_attrs)
    assert mm.sum() > 0
    full = _scan(w, len(w.exprs))
    for j, (ids, _) in enumerate(full):
        assert set(ids.tolist()) == set(np.flatnonzero(mm[:, j]).tolist())
    exprs, events = w.expression_objects(), w.event_objects()
    names = {n: i for i, n in enumerate(w.attr_names)}
    assert [names[p.attr] for p in exprs[0].predicates] == w.exprs.attr[:w.exprs.pred_off[1]].tolist()
    for (ids, sc), ev in zip(_scan(w, 5), events):
        want = brute_match(exprs, ev, "weighted", 5)
        assert ids.tolist() == [i for i, _ in want]
        np.testing.assert_allclose(sc, [s for _, s in want], rtol=1e-12)
    # the object form encodes back to the batches
    batch, _ = encode_expressions(exprs, w.table)
    _same_batch(batch, w.exprs, EXPR_FIELDS)
    ebatch, _ = encode_events(events, w.table)
    _same_batch(ebatch, w.events, EVENT_FIELDS)


def test_geonames_workload_encodes_consistently():
    from rankcast.ingest.match_workloads import geonames_events
    w = geonames_betree(400, n_events=60, seed=1)
    sz = sizes(w)
    assert w.n_attrs == 6 and sz["expressions"] == 400 and 2 <= sz["avg_expression_size"] <= 4
    assert IN in w.exprs.op.tolist() and EQ in w.exprs.op.tolist()
    events = w.event_objects()
    ref = geonames_events(60, seed=1)
    assert [e.id for e in events] == [e.id for e in ref]
    assert all(e.values == r.values for e, r in zip(events, ref))
    exprs = w.expression_objects()
    assert all(any(p.attr == "latitude" for p in x.predicates) for x in exprs)
    batch, _ = encode_expressions(exprs, w.table)
    _same_batch(batch, w.exprs, EXPR_FIELDS)
    ebatch, _ = encode_events(events, w.table)
    _same_batch(ebatch, w.events, EVENT_FIELDS)
    for b in (w.exprs.weight, w.events.weight):
        assert np.all(np.isfinite(b)) and np.all(b > 0)
    # strings coded alike on both sides: matching the objects = matching the batches
    mm = match_matrix(w.exprs, w.events, w.n_attrs)
    assert mm.sum() > 0
    for (ids, sc), ev, col in zip(_scan(w, 10), events, mm.T):
        want = brute_match(exprs, ev, "weighted", 10)
        assert ids.tolist() == [i for i, _ in want]
        np.testing.assert_allclose(sc, [s for _, s in want], rtol=1e-12)
        assert len(want) == min(10, int(col.sum()))


def test_geonames_match_probability_calibrated():
    w = geonames_betree(2000, n_events=300, seed=0, match_prob=0.005, calibrate_sample=1000)
    p = measured_match_prob(w, None)
    assert 0.5 * 0.005 <= p <= 2 * 0.005, (p, w.knobs)
    assert w.knobs["match_prob"] == 0.005 and w.knobs["radius_scale"] < 1

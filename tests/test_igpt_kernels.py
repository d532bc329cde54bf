"""Small kernels of the message index (rankcast.kinds.spatial.igpt)."""
from __future__ import annotations

import numpy as np
import pytest

from rankcast.kinds.spatial.igpt import _radix_sort


@pytest.mark.parametrize("n,top", [(0, 5), (1, 5), (2, 0), (5, 3), (1000, 10**8), (10_000, 10**8),
                                   (300_000, 10**9), (50, 2**62), (7000, 1), (3, 2**63 - 1)])
def test_radix_sort_sorts_every_size_and_width(n, top):
    """The digit width adapts to the keys' count and size (8 to 16 bits): every choice sorts,
    up to keys of 63 bits (no pass shifts by 64)."""
    a = np.random.default_rng(n).integers(0, top, n, endpoint=True).astype(np.int64)
    assert np.array_equal(_radix_sort(a), np.sort(a))


def _replica_index(indexed):
    """An IGPT over one subscription (terms 1, 2, 3, 4, threshold 0) whose table indexes the
    term positions ``indexed`` marks (None: every one, as an engine's)."""
    import rankcast as rc
    from rankcast.kinds.spatial.columns import SubscriptionBatch
    from rankcast.kinds.spatial.igpt import IGPT
    from rankcast.kinds.spatial.subtable import SubTable

    w = np.full(4, 0.5)
    subs = SubscriptionBatch(np.array([7], np.int64), np.array([0.5]), np.array([0.5]), np.array([1], np.int64),
                             np.array([0.3]), np.array([0, 4], np.int64), np.array([1, 2, 3, 4], np.int64), w)
    table = SubTable()
    slots = table.add(subs, None if indexed is None else np.array(indexed, np.bool_))
    table.theta[slots] = 0.0
    idx = IGPT(table, rc.EngineConfig(bounds=(0, 0, 1, 1), window=10))
    idx.add(slots)
    return idx


def _messages(rows):
    from rankcast.kinds.spatial.columns import MessageBatch
    off = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    terms = np.concatenate([np.array(r, np.int64) for r in rows])
    w = np.concatenate([np.full(len(r), 1.0 / np.sqrt(len(r))) for r in rows])
    n = len(rows)
    return MessageBatch(np.arange(n, dtype=np.int64), np.full(n, 0.5), np.full(n, 0.5), np.full(n, np.nan),
                        off, terms, w)


@pytest.mark.parametrize("own", [True, False])
def test_a_replica_verifies_only_the_pairs_whose_first_shared_term_it_indexes(own, monkeypatch):
    """A replica indexing terms 1 and 3 of (1, 2, 3, 4) keeps the pairs whose first term
    shared with the subscription (in term-id order) is 1 or 3, found there or at a later
    indexed term, with the engine's score, and leaves to the replica of term 2 or 4 (which
    finds it there, where the bound covers the whole score) a pair whose first shared term
    is 2 or 4, even where it meets term 3 here; ``OWN_PAIRS`` off (a measurement) keeps
    whatever the walk finds. An engine's table (every term indexed) keeps every pair."""
    from rankcast.kinds.spatial import igpt
    monkeypatch.setattr(igpt, "OWN_PAIRS", own)
    msgs = _messages([[1, 2], [2, 3], [3], [1, 3, 4], [2, 4], [0, 3, 9], [4], [0, 2, 3, 4], [1]])
    ours = {0, 2, 3, 5, 8}          # first shared term 1 or 3
    found_here = {0, 1, 2, 3, 5, 7, 8}   # shares term 1 or 3 (the walk finds them)
    engine = _replica_index(None)
    m_e, s_e, sc_e = engine.match(msgs)
    assert sorted(m_e.tolist()) == list(range(9)) and engine.stats()["left_to_replicas"] == 0
    rep = _replica_index([True, False, True, False])
    assert rep.subs.partial and not engine.subs.partial
    m, s, sc = rep.match(msgs)
    want = ours if own else found_here
    assert sorted(m.tolist()) == sorted(want)
    e_score = dict(zip(m_e.tolist(), sc_e.tolist()))
    assert all(e_score[i] == x for i, x in zip(m.tolist(), sc.tolist()))
    st = rep.stats()
    assert st["left_to_replicas"] == (len(found_here - ours) if own else 0)
    assert st["verified"] == len(want)


def test_owned_score_is_the_score_or_left_at_the_first_shared_term():
    """``owned_score_at`` against ``score_at`` on random rows: equal bits where the first
    shared term (term-id order) is indexed, NOT_OURS where it is not, NO_MATCH with no
    shared term, whatever the later shared terms' marks."""
    from rankcast.kinds.spatial.scoring import NO_MATCH, NOT_OURS, owned_score_at, score_at
    rng = np.random.default_rng(42)
    seen = {"ours": 0, "left": 0, "none": 0}
    for _ in range(2000):
        st = np.sort(rng.choice(30, int(rng.integers(1, 8)), replace=False)).astype(np.int64)
        mt = np.sort(rng.choice(30, int(rng.integers(1, 8)), replace=False)).astype(np.int64)
        sw, mw = rng.random(len(st)), rng.random(len(mt))
        ix = rng.random(len(st)) < 0.5
        args = (0.2, 0.3, 0.4, st, sw, 0, len(st), 0.6, 0.1, mt, mw, 0, len(mt), 1.5)
        want = score_at(*args)
        got = owned_score_at(*args, ix)
        shared = np.flatnonzero(np.isin(st, mt))
        if not len(shared):
            assert want == NO_MATCH and got == NO_MATCH
            seen["none"] += 1
        elif ix[shared[0]]:
            assert got == want and got != NOT_OURS
            seen["ours"] += 1
        else:
            assert got == NOT_OURS
            seen["left"] += 1
        assert owned_score_at(*args, np.ones(len(st), np.bool_)) == want
    assert min(seen.values()) > 100


@pytest.mark.parametrize("location", ["whole", "suffix"])
def test_one_leaf_prunes_by_the_subscriptions_own_location_and_stays_exact(location, monkeypatch):
    """A few subscriptions over the whole space fit one leaf, whose box bounds SSim by 1 for
    every message inside it (a partition's small index): the entry test then also bounds
    the spatial part by the subscription's own location, so that far pairs are not
    verified. Every pair at or above its threshold is still found, with the score's bits;
    ties at the threshold included."""
    import rankcast as rc
    from rankcast.kinds.spatial.columns import MessageBatch, SubscriptionBatch
    from rankcast.kinds.spatial import igpt
    from rankcast.kinds.spatial.igpt import IGPT
    from rankcast.kinds.spatial.scoring import NO_MATCH, score_py
    monkeypatch.setattr(igpt, "LOCATION", location)
    from rankcast.kinds.spatial.subtable import SubTable

    rng = np.random.default_rng(7)
    n, nm, v = 300, 400, 12
    rows = [np.sort(rng.choice(v, int(rng.integers(1, 5)), replace=False)) for _ in range(n)]
    s_off = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    s_terms = np.concatenate(rows).astype(np.int64)
    s_w = np.concatenate([np.full(len(r), 1.0 / np.sqrt(len(r))) for r in rows])
    sx, sy, alpha = rng.random(n), rng.random(n), rng.uniform(0.2, 0.9, n)
    subs = SubscriptionBatch(np.arange(n, dtype=np.int64), sx, sy, np.ones(n, np.int64), alpha, s_off, s_terms, s_w)
    mrows = [np.sort(rng.choice(v, int(rng.integers(1, 6)), replace=False)) for _ in range(nm)]
    m_off = np.concatenate([[0], np.cumsum([len(r) for r in mrows])]).astype(np.int64)
    m_terms = np.concatenate(mrows).astype(np.int64)
    m_w = np.concatenate([np.full(len(r), 1.0 / np.sqrt(len(r))) for r in mrows])
    mx, my = rng.random(nm), rng.random(nm)
    msgs = MessageBatch(np.arange(nm, dtype=np.int64), mx, my, np.full(nm, np.nan), m_off, m_terms, m_w)
    cfg = rc.EngineConfig(bounds=(0, 0, 1, 1), window=10)
    md = cfg.max_dist
    sc = np.array([[score_py(sx[s], sy[s], alpha[s], rows[s], s_w[s_off[s]:s_off[s + 1]], mx[i], my[i],
                             mrows[i], m_w[m_off[i]:m_off[i + 1]], md) for i in range(nm)] for s in range(n)])
    # thresholds: each subscription's 20th best score (a tie at it must be kept), a few at 0
    theta = np.array([np.sort(r[r != NO_MATCH])[::-1][min(19, int((r != NO_MATCH).sum()) - 1)]
                      if (r != NO_MATCH).any() else 0.0 for r in sc])
    theta[::17] = 0.0
    table = SubTable()
    slots = table.add(subs)
    table.theta[slots] = theta
    idx = IGPT(table, cfg)
    idx.add(slots)
    m, s, got = idx.match(msgs)
    want = {(int(i), int(j)) for j in range(n) for i in range(nm) if sc[j, i] != NO_MATCH and sc[j, i] >= theta[j]}
    assert {(int(i), int(slots.tolist().index(j))) for i, j in zip(m, s)} == want
    assert all(got[x] == sc[slots.tolist().index(int(s[x])), int(m[x])] for x in range(len(m)))
    st = idx.stats()
    assert st["leaves"] == 1 and st["location_pruned"] > 0
    shared = sum(int((sc[j] != NO_MATCH).sum()) for j in range(n))
    assert st["verified"] + st["location_pruned"] <= shared and st["verified"] < 0.6 * shared


@pytest.mark.parametrize("location", ["off", "whole", "suffix"])
def test_a_replica_keeps_a_pair_met_at_a_later_term_whose_whole_score_reaches_theta(location, monkeypatch):
    """The location bound covers the pair's whole score, the terms before the entry's
    included: a replica that indexes only term 2 of (1, 2) meets a far message sharing 1
    and 2 at term 2, where the bound from term 2 on with the exact SSim (0.29) falls below
    theta (0.5) but the score (0.53) does not; the pair stays a result with the engine's
    score, so the replica's buffer is the one it was without the location bound. ``suffix``
    bounds the score from term 2 on there, and the replica leaves the pair to the one of term
    1; an engine's table (both terms indexed) finds it at term 1 under every mode."""
    import rankcast as rc
    from rankcast.kinds.spatial.columns import MessageBatch, SubscriptionBatch
    from rankcast.kinds.spatial import igpt
    from rankcast.kinds.spatial.igpt import IGPT
    from rankcast.kinds.spatial.scoring import score_py
    monkeypatch.setattr(igpt, "LOCATION", location)
    from rankcast.kinds.spatial.subtable import SubTable

    cfg = rc.EngineConfig(bounds=(0, 0, 1, 1), window=10)
    subs = SubscriptionBatch(np.array([3], np.int64), np.array([0.05]), np.array([0.05]), np.array([1], np.int64),
                             np.array([0.5]), np.array([0, 2], np.int64), np.array([1, 2], np.int64),
                             np.array([0.8, 0.6]))
    msgs = MessageBatch(np.array([0], np.int64), np.array([0.95]), np.array([0.95]), np.array([np.nan]),
                        np.array([0, 2], np.int64), np.array([1, 2], np.int64), np.array([0.6, 0.8]))
    want = score_py(0.05, 0.05, 0.5, [1, 2], [0.8, 0.6], 0.95, 0.95, [1, 2], [0.6, 0.8], cfg.max_dist)
    assert 0.5 < want < 0.54
    for indexed in ([False, True], [True, True]):
        table = SubTable()
        slots = table.add(subs, np.array(indexed, np.bool_))
        table.theta[slots] = 0.5
        idx = IGPT(table, cfg)
        idx.add(slots)
        m, s, sc = idx.match(msgs)
        if location == "suffix" and not indexed[0]:
            assert len(m) == 0 and idx.stats()["location_pruned"] == 1
        else:
            assert m.tolist() == [0] and sc.tolist() == [want]
    table = SubTable()                      # above the score: pruned before verification
    slots = table.add(subs, np.array([False, True], np.bool_))
    table.theta[slots] = 0.6
    idx = IGPT(table, cfg)
    idx.add(slots)
    assert len(idx.match(msgs)[0]) == 0
    assert (idx.stats()["verified"], idx.stats()["location_pruned"]) == ((1, 0) if location == "off" else (0, 1))

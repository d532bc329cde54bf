"""Distribution policies (paper 7.3, 8.2): routing shape, the exactness property of each
policy checked pair by pair against the score, and the fitting objectives."""
from __future__ import annotations

import numpy as np
import pytest

from rankcast.kinds.spatial.roles.policies import (KDTree, KeywordMap, Routing, estimate_kscores, keyword_variance,
                                      make_policy, needed_prefix, prefix_lengths)
from rankcast.kinds.spatial.columns import MessageBatch, SubscriptionBatch
from rankcast.config import POLICIES
from rankcast.errors import InvalidInput
from rankcast.kinds.spatial.scoring import NO_MATCH, score_py
from rankcast.kinds.spatial.subtable import SubTable

BOUNDS = (0.0, 0.0, 100.0, 50.0)
MAX_DIST = float(np.hypot(100.0, 50.0))


def _rows(rng, n, n_terms, lo, hi):
    off = np.zeros(n + 1, np.int64)
    tids, ws = [], []
    p = 1.0 / np.arange(1, n_terms + 1)
    p = p[::-1] / p.sum()          # term ids in increasing frequency, as a Vocabulary orders them
    for i in range(n):
        m = int(rng.integers(lo, hi + 1))
        t = np.sort(rng.choice(n_terms, size=m, replace=False, p=p))
        w = rng.random(m) + 0.05
        if rng.random() < 0.2:
            w[:] = 1.0
        w = w / np.sqrt((w * w).sum()) if m else w
        tids.append(t.astype(np.int64))
        ws.append(w)
        off[i + 1] = off[i] + m
    cat = lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt)
    return off, cat(tids, np.int64), cat(ws, np.float64)


def _points(rng, n):
    x = np.where(rng.random(n) < 0.5, rng.normal(25, 5, n), rng.uniform(0, 100, n)).clip(0, 100)
    y = np.where(rng.random(n) < 0.5, rng.normal(40, 3, n), rng.uniform(0, 50, n)).clip(0, 50)
    return x, y


def subs_batch(rng, n, n_terms=60, ids_from=0):
    off, t, w = _rows(rng, n, n_terms, 1, 5)
    x, y = _points(rng, n)
    alpha = rng.random(n)
    alpha[rng.random(n) < 0.1] = 0.0
    alpha[rng.random(n) < 0.1] = 1.0
    return SubscriptionBatch(np.arange(ids_from, ids_from + n, dtype=np.int64), x, y,
                             rng.integers(1, 6, n).astype(np.int64), alpha, off, t, w)


def msgs_batch(rng, n, n_terms=60, ids_from=0):
    off, t, w = _rows(rng, n, n_terms, 0, 7)
    x, y = _points(rng, n)
    return MessageBatch(np.arange(ids_from, ids_from + n, dtype=np.int64), x, y, np.full(n, np.nan),
                        off, t, w)


@pytest.fixture(scope="module")
def sample():
    rng = np.random.default_rng(7)
    return subs_batch(rng, 400), msgs_batch(rng, 600)


def _check_csr(r: Routing, n_rows: int, n_parts: int):
    assert len(r) == n_rows and r.offsets[0] == 0 and np.all(np.diff(r.offsets) >= 0)
    assert r.offsets[-1] == len(r.parts)
    assert np.all((r.parts >= 0) & (r.parts < n_parts))
    for i in range(n_rows):
        row = r.row(i)
        assert np.all(np.diff(row) > 0), "partitions of a row must be sorted and unique"


def _shares_term(s: SubscriptionBatch, i, m: MessageBatch, j) -> bool:
    return bool(np.intersect1d(s.row_terms(i)[0], m.row_terms(j)[0]).size)


@pytest.mark.parametrize("name", POLICIES)
@pytest.mark.parametrize("n_parts", [1, 3, 8])
def test_routing_shape(name, n_parts, sample):
    subs, msgs = sample
    if name in ("spatial-first", "keyword-first") and n_parts == 3:
        opts = {"l1": 3}
    else:
        opts = {}
    pol = make_policy(name, n_parts, BOUNDS, MAX_DIST, window=200, options=opts).fit(subs, msgs)
    rs = pol.route_subscriptions(subs)
    rm = pol.route_messages(msgs)
    _check_csr(rs, len(subs), n_parts)
    _check_csr(rm, len(msgs), n_parts)
    assert np.all(rs.counts() >= 1), "every subscription lives somewhere"
    if not pol.replicates:
        assert np.all(rs.counts() == 1)
    if name in ("hash", "location"):
        assert np.all(rm.counts() == n_parts)
    if name in ("keyword", "prefix", "keyword-first"):
        no_terms = np.diff(msgs.offsets) == 0
        assert np.all(rm.counts()[no_terms] == 0), "a message without terms matches nothing"


def test_hash_is_id_mod_n(sample):
    subs, _ = sample
    pol = make_policy("hash", 5, BOUNDS, MAX_DIST).fit()
    assert np.array_equal(pol.route_subscriptions(subs).parts, subs.ids % 5)


@pytest.mark.parametrize("name", ["keyword", "keyword-first", "spatial-first", "prefix"])
def test_keyword_routing_meets_every_sharing_message(name, sample):
    """With every term in the routing prefix, a message sharing any term with s reaches a
    partition holding s (the keyword policy's exactness; prefix policies at full length)."""
    subs, msgs = sample
    pol = make_policy(name, 6, BOUNDS, MAX_DIST, window=200, options={"l1": 2} if "-" in name else {})
    pol.fit(subs, msgs)
    full = np.diff(subs.offsets)
    rs = pol.route_subscriptions(subs, full)
    rm = pol.route_messages(msgs)
    for i in range(len(subs)):
        ps = set(rs.row(i).tolist())
        for j in range(len(msgs)):
            if _shares_term(subs, i, msgs, j):
                assert ps & set(rm.row(j).tolist()), (i, j)


@pytest.mark.parametrize("name", ["prefix", "spatial-first", "keyword-first"])
def test_prefix_routing_misses_only_messages_below_threshold(name, sample):
    """Lemma 7: with the loose prefix for threshold tau, a message that reaches no replica of
    s scores strictly below tau (so it can never enter a top-k whose kScore >= tau)."""
    subs, msgs = sample
    rng = np.random.default_rng(3)
    pol = make_policy(name, 6, BOUNDS, MAX_DIST, window=200, options={"l1": 3} if "-" in name else {})
    pol.fit(subs, msgs)
    tau = rng.uniform(0.2, 1.0, len(subs))
    plen = prefix_lengths(subs.offsets, subs.weights, subs.alpha, tau)
    lens = np.diff(subs.offsets)
    assert np.all((plen >= 1) & (plen <= lens))
    assert np.any(plen < lens), "the workload should exercise short prefixes"
    rs = pol.route_subscriptions(subs, plen)
    rm = pol.route_messages(msgs)
    missed = 0
    for i in range(len(subs)):
        ps = set(rs.row(i).tolist())
        st, sw = subs.row_terms(i)
        for j in range(len(msgs)):
            if ps & set(rm.row(j).tolist()):
                continue
            mt, mw = msgs.row_terms(j)
            sc = score_py(subs.x[i], subs.y[i], subs.alpha[i], st, sw, msgs.x[j], msgs.y[j], mt, mw, MAX_DIST)
            if sc != NO_MATCH:
                missed += 1
                assert sc < tau[i], (i, j, sc, tau[i])
    assert missed > 0, "some sharing messages should be pruned by the prefix"


def test_prefix_length_edge_cases():
    off = np.array([0, 3, 4, 4 + 3], np.int64)
    w = np.array([0.8, 0.5, np.sqrt(1 - 0.89), 1.0, 0.6, 0.6, np.sqrt(1 - 0.72)])
    alpha = np.array([0.5, 0.5, 0.0])
    assert prefix_lengths(off, w, alpha, np.full(3, np.inf)).tolist() == [1, 1, 1]
    assert prefix_lengths(off, w, alpha, np.full(3, -np.inf)).tolist() == [3, 1, 3]
    assert prefix_lengths(off, w, alpha, np.full(3, 0.0)).tolist() == [3, 1, 3]
    # paper Example 8 shape: alpha = 0, suffix weights below lambda_T are left out
    p = prefix_lengths(off, w, alpha, np.array([2.0, 2.0, 0.6]))
    assert p[0] == 1 and p[2] == 2            # wtsum(w[1:]) = 1.13 >= 0.6 > wtsum(w[2:]) = 0.53
    assert prefix_lengths(off, w, alpha, np.array([2.0, 2.0, 0.5]))[2] == 3
    # alpha = 1: TSim has no weight, no term can be left out unless tau > 1
    assert prefix_lengths(off, w, np.ones(3), np.full(3, 0.99)).tolist() == [3, 1, 3]


def test_needed_prefix_agrees_with_prefix_lengths(sample):
    """A partition's reallocation test and the distributor's prefix reach the same lengths
    bit for bit (they accumulate wtsum in the same order), so reallocation terminates."""
    subs, _ = sample
    table = SubTable()
    slots = table.add(subs)
    rng = np.random.default_rng(11)
    kscore = rng.uniform(0.0, 1.0, len(subs))
    kscore[::7] = -np.inf                       # fewer than k buffered: every term matters
    plen = prefix_lengths(subs.offsets, subs.weights, subs.alpha, kscore)
    ones = np.ones(len(subs), np.int64)
    need = needed_prefix(slots, table.toff, table.tlen, table.wtsum, table.alpha, kscore, ones)
    assert np.array_equal(need, np.maximum(plen, 1))
    assert np.array_equal(need[::7], np.diff(subs.offsets)[::7])
    # already long enough: nothing to do
    again = needed_prefix(slots, table.toff, table.tlen, table.wtsum, table.alpha, kscore, need)
    assert np.array_equal(again, need)


def test_kd_partition_balances_cost(sample):
    """Algorithm 3: the leaves tile the space, every point routes to the leaf containing it,
    and the cost N x p of the leaves is far more even than a split at the middle."""
    subs, msgs = sample
    tree = KDTree.build(BOUNDS, 8, subs.x, subs.y, msgs.x, msgs.y)
    assert tree.n_leaves == 8
    leaves = np.flatnonzero(tree.part >= 0)
    area = sum((tree.cell[l, 2] - tree.cell[l, 0]) * (tree.cell[l, 3] - tree.cell[l, 1]) for l in leaves)
    assert area == pytest.approx(100.0 * 50.0)
    p = tree.route(subs.x, subs.y)
    for l in leaves:
        inside = p == tree.part[l]
        c = tree.cell[l]
        assert np.all((subs.x[inside] >= c[0]) & (subs.x[inside] <= c[2]))
        assert np.all((subs.y[inside] >= c[1]) & (subs.y[inside] <= c[3]))

    def costs(t):
        ps, pm = t.route(subs.x, subs.y), t.route(msgs.x, msgs.y)
        return np.bincount(ps, minlength=8) * np.bincount(pm, minlength=8) / len(msgs)

    mid = KDTree.build(BOUNDS, 8, [], [], [], [])        # no sample: halves the cells
    assert np.std(costs(tree)) < 0.5 * np.std(costs(mid))


def test_kd_split_leaf(sample):
    subs, msgs = sample
    tree = KDTree.build(BOUNDS, 4, subs.x, subs.y, msgs.x, msgs.y)
    before = tree.route(subs.x, subs.y)
    big = int(np.bincount(before).argmax())
    inleaf = before == big
    t2 = tree.split_leaf(big, 4, subs.x[inleaf], subs.y[inleaf], msgs.x, msgs.y)
    after = t2.route(subs.x, subs.y)
    assert t2.n_leaves == 5
    assert np.array_equal(after[~inleaf], before[~inleaf]), "other leaves keep their points"
    assert set(after[inleaf].tolist()) == {big, 4}


def test_keyword_partition_minimises_variance(sample):
    """Algorithm 4 with Eq. 16: consecutive ranges covering the vocabulary, with a cost
    variance (Eq. 17) well below equal-width ranges."""
    subs, msgs = sample
    v = int(max(subs.term_ids.max(), msgs.term_ids.max())) + 1
    km = KeywordMap.build(8, subs.offsets, subs.term_ids, msgs.offsets, msgs.term_ids, v)
    assert km.bounds[0] == 0 and km.bounds[-1] == v and np.all(np.diff(km.bounds) >= 0)
    eq = KeywordMap(np.linspace(0, v, 9).round().astype(np.int64), v)
    var_alg = keyword_variance(km.costs(subs.offsets, subs.term_ids, msgs.offsets, msgs.term_ids))
    var_eq = keyword_variance(eq.costs(subs.offsets, subs.term_ids, msgs.offsets, msgs.term_ids))
    assert var_alg < 0.5 * var_eq
    # unseen terms are spread by id
    assert km.parts(np.array([v, v + 1, v + 9]), np.zeros(3, np.int64)).tolist() == [v % 8, (v + 1) % 8, (v + 9) % 8]


def test_estimate_kscores_matches_brute_force(sample):
    subs, msgs = sample
    est = estimate_kscores(subs, msgs, MAX_DIST, window=len(msgs))   # rank = k
    for i in range(0, len(subs), 17):
        st, sw = subs.row_terms(i)
        sc = [score_py(subs.x[i], subs.y[i], subs.alpha[i], st, sw, msgs.x[j], msgs.y[j],
                       *msgs.row_terms(j), MAX_DIST) for j in range(len(msgs))]
        sc = sorted((s for s in sc if s != NO_MATCH), reverse=True)
        k = int(subs.k[i])
        assert est[i] == (sc[k - 1] if len(sc) >= k else -np.inf)


def test_rows_of_and_bad_levels(sample):
    r = Routing(np.array([0, 2, 2, 3]), np.array([0, 2, 1]))
    assert [x.tolist() for x in r.rows_of(3)] == [[0], [2], [0]]
    with pytest.raises(InvalidInput, match="l1"):
        make_policy("spatial-first", 6, BOUNDS, MAX_DIST, options={"l1": 4})
    with pytest.raises(InvalidInput, match="policy"):
        make_policy("nope", 2, BOUNDS, MAX_DIST)


def _with_hot_term(rng, batch, hot, share):
    """``batch`` with term ``hot`` (the most frequent id) added to a ``share`` of its rows."""
    off, terms, ws = [0], [], []
    for i in range(len(batch)):
        t, w = batch.row_terms(i)
        if rng.random() < share and hot not in t:
            t, w = np.append(t, hot), np.append(w, 0.3)
        terms.append(t)
        ws.append(w / np.sqrt((w * w).sum()) if len(w) else w)
        off.append(off[-1] + len(t))
    cat = lambda xs, dt: np.concatenate(xs).astype(dt)
    fields = dict(vars(batch))
    fields.update(offsets=np.array(off, np.int64), term_ids=cat(terms, np.int64), weights=cat(ws, np.float64))
    return type(batch)(**fields)


@pytest.mark.parametrize("name", ["keyword", "prefix", "spatial-first", "keyword-first"])
def test_a_hot_keyword_gets_several_partitions(name):
    """A keyword whose cost no one partition can carry (in most subscriptions and messages)
    gets several partitions: its subscriptions are spread over them and its messages reach
    every one, so a message sharing any term with s still meets a replica of s."""
    rng = np.random.default_rng(11)
    subs = _with_hot_term(rng, subs_batch(rng, 300), 60, 0.7)
    msgs = _with_hot_term(rng, msgs_batch(rng, 400), 60, 0.7)
    # keyword's cost model scales the sample to the subscriptions expected: at 300 in all, a
    # partition's cost is mostly the messages it receives, which copies do not split
    opts = {"l1": 2} if "-" in name else {"subscriptions_estimate": 100_000}
    pol = make_policy(name, 8, BOUNDS, MAX_DIST, window=200, options=opts).fit(subs, msgs)
    kms = pol.kmaps if name == "spatial-first" else [pol.kmap]
    for km in kms:
        want = {"spatial-first": getattr(pol, "l2", 0), "keyword-first": getattr(pol, "l1", 0)}.get(name, 8)
        assert km.n == want and np.all(km.copies >= 1)
        if name != "prefix":
            assert np.all(np.diff(km.bounds) > 0), "ranges are not empty"
    if name in ("keyword", "prefix"):
        hot = (int(np.searchsorted(pol.kmap.bounds, 60, side="right") - 1) if name == "keyword"
               else int(pol.kmap.group[60]))
        assert pol.kmap.copies[hot] > 1, pol.kmap.copies
        held = pol.kmap.parts(np.full(len(subs), 60), subs.ids)
        assert len(np.unique(held)) == pol.kmap.copies[hot], "the hot keyword's subscriptions are spread"
    rs = pol.route_subscriptions(subs, np.diff(subs.offsets))
    rm = pol.route_messages(msgs)
    _check_csr(rs, len(subs), 8)
    _check_csr(rm, len(msgs), 8)
    for i in range(len(subs)):
        ps = set(rs.row(i).tolist())
        for j in range(len(msgs)):
            if _shares_term(subs, i, msgs, j):
                assert ps & set(rm.row(j).tolist()), (i, j)


def test_placed_cost_ranges_are_the_least_limit_sweep():
    """Keyword's ranges under its cost model (replicas indexing only their placed terms):
    every range of a sweep costs at most the limit and would exceed it with its next term
    (the incremental counts of subscriptions and messages meeting a range agree with the
    model's own); the fitted map's largest cost is no more than the N x p recursion's."""
    from rankcast.kinds.spatial.placement import by_term_prev, sweep
    from rankcast.kinds.spatial.roles.policies import KeywordMap

    rng = np.random.default_rng(5)
    subs = _with_hot_term(rng, subs_batch(rng, 300), 60, 0.5)
    msgs = _with_hot_term(rng, msgs_batch(rng, 400), 60, 0.5)
    pol = make_policy("keyword", 8, BOUNDS, MAX_DIST, window=200,
                      options={"subscriptions_estimate": 20_000}).fit(subs, msgs)
    cost, v = pol.cost, pol.kmap.v_fit
    args = (subs.offsets, subs.term_ids, msgs.offsets, msgs.term_ids)
    fitted = pol.kmap.costs(*args, cost).max()
    assert pol.kmap.n == 8 and np.all(np.diff(pol.kmap.bounds) > 0)
    assert fitted <= KeywordMap.build(8, *args, v).costs(*args, cost).max() + 1e-12
    so, sp = by_term_prev(subs.offsets, subs.term_ids, v)
    mo, mp = by_term_prev(msgs.offsets, msgs.term_ids, v)
    additive = (cost.scale * (cost.A_PAIR * cost.pairs + cost.D_POSTING * cost.walks) / cost.n_msgs)[:v]
    per_sub, per_msg = cost.scale * cost.B_REPLICA, cost.C_MESSAGE / len(msgs)
    for limit in (0.5 * fitted, fitted, 2 * fitted):
        lows, cps = np.zeros(v, np.int64), np.zeros(v, np.int64)
        used, n_r = sweep(limit, 10 ** 6, additive, so, sp, mo, mp, per_sub, per_msg, lows, cps)
        km = KeywordMap(np.append(lows[:n_r], v), v, cps[:n_r])
        assert used == km.n
        per_copy = km.costs(*args, cost)[km.first]
        assert np.all(per_copy <= limit * (1 + 1e-9))
        for r in range(n_r - 1):       # one more term: over the limit
            if cps[r] == 1:
                longer = KeywordMap(np.array([lows[r], lows[r + 1] + 1]), v, np.ones(1, np.int64))
                assert longer.costs(*args, cost)[0] > limit * (1 - 1e-9)


def test_prefix_groups_route_new_terms_exactly(sample):
    """Terms the fitting sample never saw get their group when a subscription first holds
    them: a message sharing any term with a subscription routed at full length (old terms
    and new) still meets one of its replicas, and a term no subscription holds is routed
    nowhere."""
    subs, msgs = sample
    rng = np.random.default_rng(5)
    pol = make_policy("prefix", 6, BOUNDS, MAX_DIST, window=200).fit(subs, msgs)
    late = subs_batch(rng, 150, n_terms=90, ids_from=1000)      # ids 60..89 are new terms
    late_msgs = msgs_batch(rng, 200, n_terms=90, ids_from=1000)
    assert np.any(late.term_ids >= 60) and np.any(late_msgs.term_ids >= 60)
    rs = pol.route_subscriptions(late, np.diff(late.offsets))
    rm = pol.route_messages(late_msgs)
    for i in range(len(late)):
        ps = set(rs.row(i).tolist())
        for j in range(len(late_msgs)):
            if _shares_term(late, i, late_msgs, j):
                assert ps & set(rm.row(j).tolist()), (i, j)
    held = np.zeros(200, bool)
    held[subs.term_ids] = held[late.term_ids] = True
    for j in range(len(late_msgs)):
        terms = late_msgs.row_terms(j)[0]
        if len(terms) and not held[terms].any():
            assert len(rm.row(j)) == 0, "a term no subscription holds is routed nowhere"


def test_prefix_groups_co_locate_a_subscriptions_terms(sample):
    """A subscription's new terms join a group of its other terms, and one whose terms are
    all new keeps them in one group: one replica, however many terms."""
    subs, msgs = sample
    pol = make_policy("prefix", 6, BOUNDS, MAX_DIST, window=200).fit(subs, msgs)
    km = pol.kmap
    t_old = int(subs.term_ids[0])
    one = SubscriptionBatch(np.array([5000, 5001], np.int64), np.array([1.0, 2.0]), np.array([1.0, 2.0]),
                            np.array([3, 3], np.int64), np.array([0.5, 0.5]), np.array([0, 4, 7], np.int64),
                            np.array([100, 101, 102, 103, t_old, 104, 105], np.int64), np.full(7, 0.5))
    order = np.argsort(one.term_ids[4:7], kind="stable")
    one.term_ids[4:7] = one.term_ids[4:7][order]
    rs = pol.route_subscriptions(one, np.diff(one.offsets))
    assert rs.counts().tolist() == [1, 1]
    assert len(set(km.group[[100, 101, 102, 103]].tolist())) == 1
    assert km.group[104] == km.group[105] == km.group[t_old]


def test_prefix_groups_co_locate_sample_prefixes():
    """The fit puts terms that share the sample's prefixes in one group: subscriptions made
    of pairs of terms from a few disjoint clusters get about one replica each, where
    consecutive id ranges would split many pairs."""
    rng = np.random.default_rng(3)
    n, clusters, size = 600, 6, 8
    c = rng.integers(0, clusters, n)
    pairs = np.sort(np.stack([rng.permutation(size)[:2] for _ in range(n)]), axis=1)
    terms = (pairs * clusters + c[:, None]).reshape(-1)     # cluster j: ids j, j + 6, ...
    terms = np.sort(terms.reshape(n, 2), axis=1).reshape(-1)
    off = np.arange(0, 2 * n + 1, 2, dtype=np.int64)
    subs = SubscriptionBatch(np.arange(n, dtype=np.int64), rng.uniform(0, 100, n), rng.uniform(0, 50, n),
                             np.full(n, 3, np.int64), np.zeros(n), off, terms.astype(np.int64),
                             np.full(2 * n, np.sqrt(0.5)))
    msgs = msgs_batch(rng, 400, n_terms=clusters * size)
    pol = make_policy("prefix", clusters, BOUNDS, MAX_DIST, window=400).fit(subs, msgs)
    rep = pol.route_subscriptions(subs, np.full(n, 2)).counts().mean()
    assert rep < 1.2, rep
    kw = make_policy("keyword", clusters, BOUNDS, MAX_DIST, window=400).fit(subs, msgs)
    assert kw.route_subscriptions(subs).counts().mean() > 1.5


def test_prefix_policy_copies_learn_assignments(sample):
    """A distributor's copy of the policy routes messages as the coordinator's only once it
    installs the groups the coordinator's copy gave out (``take_assignments``)."""
    import pickle
    subs, msgs = sample
    rng = np.random.default_rng(8)
    pol = make_policy("prefix", 6, BOUNDS, MAX_DIST, window=200).fit(subs, msgs)
    assert pol.take_assignments() is None
    copy = pickle.loads(pickle.dumps(pol))
    late = subs_batch(rng, 100, n_terms=90, ids_from=1000)
    late_msgs = msgs_batch(rng, 200, n_terms=90, ids_from=1000)
    pol.route_subscriptions(late)
    want = pol.route_messages(late_msgs)
    before = copy.route_messages(late_msgs)
    assert len(before.parts) < len(want.parts), "the copy must miss the new terms until told"
    new = pol.take_assignments()
    assert new is not None and pol.take_assignments() is None
    copy.set_assignments(*new)
    got = copy.route_messages(late_msgs)
    assert np.array_equal(got.offsets, want.offsets) and np.array_equal(got.parts, want.parts)


def test_heavy_copies_least_largest_cost():
    """The copies of the heavy terms and the light partitions give the least largest cost
    per partition of every split of the partitions (brute force over small cases): a heavy
    copy costs its messages plus its share of the rest, a light partition its share of the
    light terms."""
    import itertools
    from rankcast.kinds.spatial.roles.policies.groups import _heavy_copies
    rng = np.random.default_rng(4)
    for _ in range(40):
        h = int(rng.integers(0, 3))
        n, min_light = int(rng.integers(h + 1, 9)), 1
        fixed, shared, light = rng.uniform(0, 2, h), rng.uniform(0, 20, h), float(rng.uniform(0, 20))
        copies, n_light = _heavy_copies(fixed, shared, light, n, min_light)
        assert copies.sum() + n_light == n and np.all(copies >= 1) and n_light >= min_light

        def worst(c, nl):
            return max([light / nl] + [f + s / k for f, s, k in zip(fixed, shared, c)])
        best = min(worst(c, n - sum(c)) for c in itertools.product(range(1, n + 1), repeat=h)
                   if n - sum(c) >= min_light)
        assert worst(copies, n_light) <= best + 1e-12, (fixed, shared, light, n, copies, n_light)


def test_prefix_groups_count_replicas_of_terms_the_fit_did_not_see(sample):
    """Under the group cost, a subscription routed by a term the fit never saw adds one
    replica's load to that term's group (a copy's share where the group has copies), one
    routed by a fitted term adds none (the fit counted those), and a new term then joins the
    group holding the least load."""
    subs, msgs = sample
    pol = make_policy("prefix", 6, BOUNDS, MAX_DIST, window=200,
                      options={"subscriptions_estimate": 10_000}).fit(subs, msgs)
    km = pol.kmap
    assert km.replica > 0
    old = int(subs.term_ids[0])
    one = SubscriptionBatch(np.array([7000, 7001, 7002], np.int64), np.array([1.0, 2.0, 3.0]),
                            np.array([1.0, 2.0, 3.0]), np.array([3, 3, 3], np.int64), np.full(3, 0.5),
                            np.array([0, 1, 2, 3], np.int64), np.array([150, 150, old], np.int64), np.full(3, 1.0))
    km.assign(one.offsets, one.term_ids)
    g = int(km.group[150])
    before = km.load.copy()
    pol.route_subscriptions(one, np.ones(3, np.int64))
    want = before.copy()
    want[g] += 2 * km.replica / km.copies[g]
    assert np.allclose(km.load, want), (km.load - before, g)
    km.load[:] = 100.0
    km.load[3] = 0.0
    km.assign(np.array([0, 1], np.int64), np.array([160], np.int64))
    assert km.group[160] == 3, "a new term joins the least loaded group"


def test_prefix_groups_price_what_the_fit_did_not_see_below_a_sampled_replica(sample):
    """A replica routed by a term the fit did not see, and a new term, load their group at
    ``UNSEEN_COST`` times a sampled one's cost (such terms are rare: few candidates reach
    their replicas' buffers), and so does the fit's leave-one-out estimate of those replicas,
    which the heavy terms' copies are weighed against: a dearer price leaves the heavy term
    fewer copies."""
    from rankcast.kinds.spatial.roles.policies import UNSEEN_COST, GroupCost, TermGroups
    subs, msgs = sample

    def fit(**opt):
        return make_policy("prefix", 6, BOUNDS, MAX_DIST, window=200,
                           options={"subscriptions_estimate": 10_000, **opt}).fit(subs, msgs).kmap
    km, full = fit(), fit(unseen_cost=1.0)
    assert 0 < UNSEEN_COST < 1
    assert np.isclose(full.replica, GroupCost.B_REPLICA)
    assert np.isclose(km.replica, UNSEEN_COST * GroupCost.B_REPLICA)
    assert np.isclose(km.unit, UNSEEN_COST * full.unit) and full.unit > 0
    # one heavy term (0), 39 light ones, and 6,000 sampled prefixes of a term no other row holds
    rng = np.random.default_rng(0)
    v = 6100
    terms = np.concatenate([np.arange(400) % 40, 40 + np.arange(6000)]).astype(np.int64)
    off = np.arange(len(terms) + 1, dtype=np.int64)
    m_terms = rng.integers(0, 40, 200).astype(np.int64)
    m_off = np.arange(201, dtype=np.int64)
    pairs = np.full(v, 10.0) * 0.16 / GroupCost.A_PAIR      # as costly at any fitted A_PAIR
    pairs[0], pairs[40:] = 3000.0 * 0.16 / GroupCost.A_PAIR, 0.0
    model = GroupCost(pairs=pairs, walks=np.zeros(v), n_msgs=200, scale=20.0)
    copies = [TermGroups.build(8, off, terms, off, terms, m_off, m_terms, v, model=model, unseen_cost=f).copies[0]
              for f in (0.0, UNSEEN_COST, 1.0)]
    assert copies[0] >= copies[1] >= copies[2] and copies[0] > copies[2], copies


def test_prefix_groups_split_a_light_term_dearer_than_a_light_partition():
    """A term costing less than an even share of the partitions (so not heavy) but more
    than a light partition's share as placed (co-located terms cost less than they weigh
    alone) gets a group of its own, with copies: left in one light partition, it alone
    would be the largest load."""
    from rankcast.kinds.spatial.roles.policies import GroupCost, TermGroups
    rng = np.random.default_rng(0)
    # term 0 heavy; term 1 alone in its 80 rows; terms 2..81 in pairs sharing every row
    pairs_rows = [np.array([t, t + 1]) for t in np.repeat(np.arange(2, 82, 2), 10)]
    rows = [np.array([0])] * 10 + pairs_rows + [np.array([1])] * 80
    terms = np.concatenate(rows).astype(np.int64)
    off = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    v = 82
    m_off, m_terms = np.arange(401, dtype=np.int64), rng.integers(0, v, 400).astype(np.int64)
    pairs = np.zeros(v)
    pairs[0] = 4000.0
    model = GroupCost(pairs=pairs, walks=np.zeros(v), n_msgs=400, scale=200.0)
    km = TermGroups.build(16, off, terms, off, terms, m_off, m_terms, v, model=model)
    alone = model.scale * model.B_REPLICA * 80     # term 1's replicas (its messages cost little)
    assert alone < km.cap, "term 1 is not heavy by the even share"
    g = km.group[1]
    assert km.copies[g] >= 2 and (km.group == g).sum() == 1, (km.copies, g)
    assert km.load.max() < alone, km.load

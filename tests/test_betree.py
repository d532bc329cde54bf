"""BE*-tree (index="be-tree"): after every call the top-k equals brute force and the tree's
structural invariants hold (rankcast.kinds.matching.betree.check_structure), for both scorings,
both split algorithms, dynamic and batch builds, and leaf capacities small enough to force
deep trees, splits, partitions and expansions; deletion down to an empty tree; churn."""
from __future__ import annotations

import functools

import numpy as np
import pytest

import rankcast as rc
from rankcast.kinds.matching.betree import BETreeCore, check_structure
from rankcast.testing import assert_matches_exact
from tests.test_match_oracle import _events, _expressions


def _matcher(scoring, **opts):
    return rc.Matcher(rc.MatchConfig(scoring=scoring, index="be-tree", k=5), core=functools.partial(BETreeCore, **opts))


def _exact_before_and_after_removing(m, live, removed, evs, ks):
    """The structure holds and the weighted top-k equals brute force for each k in ``ks``, on
    ``live`` as subscribed to ``m``, then again once ``removed`` (some of them) are unsubscribed."""
    for phase in range(2):
        if phase:
            gone = {e.id for e in removed}
            m.unsubscribe(sorted(gone))
            live = [e for e in live if e.id not in gone]
        check_structure(m.core)
        for k in ks:
            assert_matches_exact(m.publish(evs, k=k), live, evs, "weighted", k)


def _drive(m, scoring, seed, steps=25, check=True):
    rng = np.random.default_rng(seed)
    live: dict[int, rc.Expression] = {}
    nid = nev = 0
    for _ in range(steps):
        r = rng.random()
        if r < 0.45 or not live:
            new = _expressions(rng, nid, int(rng.integers(1, 40)))
            nid += len(new) + int(rng.integers(0, 3))
            m.subscribe(new)
            live.update((e.id, e) for e in new)
        elif r < 0.65:
            gone = [int(i) for i in rng.choice(list(live), int(rng.integers(1, max(2, len(live) // 3))), replace=False)]
            m.unsubscribe(gone)
            for i in gone:
                del live[i]
        if check:
            check_structure(m.core)
        evs = _events(rng, nev, 6)
        nev += len(evs)
        k = int(rng.choice([1, 3, 5, 40]))
        assert_matches_exact(m.publish(evs, k=k), list(live.values()), evs, scoring, k)
    return live, nev


@pytest.mark.parametrize("scoring", ["weighted", "static"])
@pytest.mark.parametrize("leaf_capacity", [1, 2, 5])
@pytest.mark.parametrize("split,build", [("exhaustive", "dynamic"), ("approximate", "dynamic"), ("exhaustive", "batch")])
def test_betree_equals_brute_force_and_keeps_its_invariants(scoring, leaf_capacity, split, build):
    for seed in range(1):
        # the match view: rewritten node by node (leaf capacity 1: with garbage repacks, 2: never
        # whole) or whole on most changes (5); summary classes as bit words from 1 or 2 attributes
        view = {1: dict(view_full_share=2.0, view_slack=0, long_class=1),
                2: dict(view_full_share=2.0, long_class=2)}.get(leaf_capacity, {})
        m = _matcher(scoring, leaf_capacity=leaf_capacity, split=split, build=build,
                     beta=4.0 if leaf_capacity == 2 else 1.5, **view)      # 1.5: bottom-up expansion is frequent
        live, nev = _drive(m, scoring, 100 * leaf_capacity + seed)
        # deletion down to an empty tree, then a refill
        m.unsubscribe(list(live))
        check_structure(m.core)
        assert all(x.top == () for x in m.publish(_events(np.random.default_rng(seed), nev, 4)))
        new = _expressions(np.random.default_rng(seed + 50), 5000, 30)
        m.subscribe(new)
        check_structure(m.core)
        evs = _events(np.random.default_rng(seed + 51), nev + 4, 8)
        assert_matches_exact(m.publish(evs, k=3), new, evs, scoring, 3)


def test_deep_tree_uses_every_mechanism():
    """A = 1 on clustered ranges: partitions, data and space splits, bottom-up expansions and
    merges all happen, and the answers stay exact."""
    rng = np.random.default_rng(3)
    m = _matcher("weighted", leaf_capacity=1, beta=1.2)
    exprs = []
    for i in range(400):
        attrs = rng.choice(6, int(rng.integers(1, 5)), replace=False)
        preds = []
        for a in attrs:
            c = float(rng.choice([0, 50, 100])) + float(rng.integers(0, 5)) * (i / 40)
            preds.append(rc.Predicate(f"a{a}", "between", (c, c + float(rng.integers(0, 3))), float(rng.integers(0, 3))))
        exprs.append(rc.Expression(i, preds))
    for j in range(0, 400, 25):
        m.subscribe(exprs[j: j + 25])
    check_structure(m.core)
    gone = [e.id for e in exprs[::3]]
    m.unsubscribe(gone)
    check_structure(m.core)
    live = [e for e in exprs if e.id % 3]
    evs = [rc.Event(i, {f"a{a}": float(rng.integers(0, 120)) for a in range(6)}) for i in range(60)]
    assert_matches_exact(m.publish(evs, k=4), live, evs, "weighted", 4)
    st = m.core.stats()
    assert st["partitions"] > 0 and st["splits"] > 0 and st["expansions"] > 0, st
    assert st["cnodes"] > 10 and st["pnodes"] > 1


def test_top_k_prunes_with_the_summaries():
    """Expressions with small weights are never scanned once k better ones are found."""
    m = _matcher("weighted", leaf_capacity=2)
    strong = [rc.Expression(i, [rc.Predicate("x", "between", (0, 10), 5.0)]) for i in range(3)]
    weak = [rc.Expression(100 + i, [rc.Predicate("y", "between", (i, i + 10), 0.1)]) for i in range(200)]
    m.subscribe(strong + weak)
    (got,) = m.publish([rc.Event(1, {"x": 5, "y": 50})], k=3)
    assert got.top == ((0, 5.0), (1, 5.0), (2, 5.0))
    st = m.stats()
    assert st["random_accesses"] < 50 and st["pruned"] + st["pnodes_pushed"] > 0


def test_config_validates_be_tree_fields_and_scoring():
    with pytest.raises(rc.InvalidInput, match="field 'index'"):
        rc.MatchConfig(scoring="relaxed", index="be-tree")
    for kw, field in (({"leaf_capacity": 0}, "leaf_capacity"), ({"alpha": 0.7}, "alpha"), ({"beta": 0.5}, "beta"),
                      ({"split": "fast"}, "split"), ({"build": "lazy"}, "build"), ({"match_probability": 0}, "match_probability")):
        with pytest.raises(rc.InvalidInput, match=f"field '{field}'"):
            rc.MatchConfig(index="be-tree", **kw)
    assert rc.MatchConfig().leaf_size == 5
    assert rc.MatchConfig(match_probability=0.05).leaf_size == 20
    assert rc.MatchConfig(match_probability=0.5).leaf_size == 160
    assert rc.MatchConfig(leaf_capacity=7).leaf_size == 7
    m = rc.Matcher(rc.MatchConfig(index="be-tree", leaf_capacity=3, build="batch"))
    assert isinstance(m.core, BETreeCore) and m.core.q[0] == 3 and m.core.build == "batch"


@pytest.mark.parametrize("leaf_capacity,long_class", [(2, 16), (5, 16), (2, 1), (5, 3)])
def test_size_class_bounds_stay_exact_on_near_ties(leaf_capacity, long_class):
    """BEGen's workload (sizes 6 to 10, weights almost equal: scores nearly the number of
    predicates, many within rounding of each other) is where the size-class, path and G bounds
    are tight: top-1 and top-5 equal brute force, after inserts and after deletions (summary
    classes of at least ``long_class`` other attributes as bit words: 40 attributes, two words)."""
    from rankcast.ingest.begen import begen
    w = begen(4000, dims=40, cardinality=2000, clusters=2, cluster_size=20, match_prob=0.02, n_events=60,
              seed=leaf_capacity)
    exprs = w.expression_objects()
    m = _matcher("weighted", leaf_capacity=leaf_capacity, long_class=long_class)
    m.subscribe(exprs)
    _exact_before_and_after_removing(m, exprs, exprs[::4], w.event_objects(), (1, 5))


@pytest.mark.parametrize("weight", [0.7, 0.1])
def test_float32_summaries_round_up_on_exact_ties(weight):
    """The view holds summary weights as float32 rounded up (``_write_sum``). With every
    weight ``weight`` (0.7: float32's nearest lies below it; 0.1: above) every expression of
    ``s`` predicates that matches scores exactly its class's bound, so ties abound and the
    smaller id must win: a summary rounded down (or, for 0.7, to nearest) bounds the node
    below the tie held, prunes it, and the top-k misses the smaller id (both mutations fail
    here). Range ends and event values come from one grid of decimals (few of them float32s),
    so events often lie exactly on a range's end."""
    rng = np.random.default_rng(7)
    grid = [0.1 + 1.3 * i for i in range(11)]
    exprs = []
    ids = rng.permutation(600)
    for i in range(600):
        attrs = rng.choice(8, int(rng.integers(2, 6)), replace=False)
        exprs.append(rc.Expression(int(ids[i]), [rc.Predicate(f"a{a}", "between", (grid[lo], grid[lo + 6]), weight)
                                                 for a, lo in zip(attrs, rng.integers(0, 5, len(attrs)))]))
    m = _matcher("weighted", leaf_capacity=2)
    m.subscribe(exprs)
    evs = [rc.Event(j, {f"a{a}": grid[int(rng.integers(0, 11))] for a in range(8) if rng.random() < 0.85})
           for j in range(80)]
    for k in (1, 5):
        assert_matches_exact(m.publish(evs, k=k), exprs, evs, "weighted", k)
    check_structure(m.core)


def test_size_classes_prune_what_one_summary_cannot():
    """A match of 4 predicates among expressions whose attributes together cover the event:
    2-predicate decoys (a smaller class: bounded by 2) and 4-predicate ones with an attribute
    the event lacks (their class has only 3 of the event's attributes). One summary per node
    bounds both by 4, a tie with the match, so they would be read; by class, neither is. (The
    union summaries: ``list_cap`` 0. With list classes the search visits fewer nodes, in
    another order, and may check a few more expressions on the way: at most 12 here.)"""
    for list_cap in (0, 128):
        _size_classes_prune(list_cap)


def _size_classes_prune(list_cap):
    m = _matcher("weighted", leaf_capacity=2, list_cap=list_cap)
    rng = np.random.default_rng(0)
    best = rc.Expression(0, [rc.Predicate(f"a{i}", "between", (0, 10), 1.0) for i in range(4)])
    decoys, near = [], []
    for i in range(150):
        a, b = rng.choice(10, 2, replace=False)
        lo = float(rng.integers(0, 5))
        decoys.append(rc.Expression(1000 + i, [rc.Predicate(f"a{a}", "between", (lo, lo + 6), 1.0),
                                               rc.Predicate(f"a{b}", "between", (lo, lo + 6), 1.0)]))
        trio = rng.choice(10, 3, replace=False)
        near.append(rc.Expression(2000 + i, [rc.Predicate(f"a{x}", "between", (lo, lo + 6), 1.0) for x in trio]
                                  + [rc.Predicate(f"b{i % 7}", "==", 1.0, 1.0)]))
    m.subscribe(decoys + near + [best])
    check_structure(m.core)
    ev = rc.Event(1, {f"a{i}": 5.0 for i in range(10)})
    (got,) = m.publish([ev], k=1)
    assert got.top == ((0, 4.0),)
    st = m.stats()
    assert st["random_accesses"] <= (12 if list_cap else 10) and st["nodes"] <= (8 if list_cap else 40), st
    # an event with exactly the match's attributes (an expression as large as the event matches)
    few = rc.Event(2, {f"a{i}": 5.0 for i in range(4)})
    assert_matches_exact(m.publish([few], k=3), decoys + near + [best], [few], "weighted", 3)


@pytest.mark.parametrize("first", [0, 1])
def test_a_class_whose_bound_ties_the_kth_score_is_still_read(first):
    """Two matches of equal score (4) in different subtrees: whichever the search reaches first,
    the other one's class bound (G = 4) equals the k-th score and must still be read, since the
    smaller id wins the tie."""
    m = _matcher("weighted", leaf_capacity=2)
    rng = np.random.default_rng(1)
    ids = (3, 5) if first else (5, 3)
    pair = [rc.Expression(ids[j], [rc.Predicate(f"a{4 * j + i}", "between", (0, 10), 1.0) for i in range(4)])
            for j in range(2)]
    decoys = []
    for i in range(120):
        a, b = rng.choice(8, 2, replace=False)
        lo = float(rng.integers(0, 5))
        decoys.append(rc.Expression(100 + i, [rc.Predicate(f"a{a}", "between", (lo, lo + 6), 1.0),
                                              rc.Predicate(f"a{b}", "between", (lo, lo + 6), 1.0)]))
    m.subscribe(decoys + pair)
    ev = rc.Event(1, {f"a{i}": 5.0 for i in range(8)})
    for k in (1, 2):
        (got,) = m.publish([ev], k=k)
        assert got.top == ((3, 4.0), (5, 4.0))[:k]


def test_incremental_view_follows_p_nodes_that_change_alone():
    """One insert at a time into a deep tree, the view never rewritten whole: after each, every
    p-directory entry holds its p-node's current block place (check_structure) and the
    answers stay exact."""
    from rankcast.ingest.begen import begen
    w = begen(600, dims=12, cardinality=400, clusters=2, cluster_size=10, match_prob=0.05, n_events=20, seed=4)
    exprs = w.expression_objects()
    m = _matcher("weighted", leaf_capacity=2, view_full_share=2.0, view_slack=10 ** 9)
    live = exprs[:300]
    m.subscribe(live)
    evs = w.event_objects()
    for e in exprs[300::3]:
        m.subscribe([e])
        live.append(e)
        check_structure(m.core)
        assert_matches_exact(m.publish(evs[:5], k=3), live, evs[:5], "weighted", 3)


@pytest.mark.parametrize("long_class", [1, 4])
def test_long_summary_classes_as_bit_words_bound_exactly(long_class):
    """Summary classes of many attributes kept as 32-attribute bit words (``long_class``): the
    attributes span several words, none of them the first (40 others are interned before), the
    weights vary widely, so a wrong word, rank or attribute gives a wrong bound; top-k equals
    brute force after inserts and deletions."""
    rng = np.random.default_rng(7)
    m = _matcher("weighted", leaf_capacity=2, long_class=long_class)
    filler = [rc.Expression(i, [rc.Predicate(f"z{i}", "==", 1.0, 1.0)]) for i in range(40)]
    exprs = []
    for i in range(3000):
        attrs = rng.choice(100, int(rng.integers(2, 7)), replace=False)
        preds = []
        for a in attrs:
            lo = float(rng.integers(0, 8))
            preds.append(rc.Predicate(f"a{a}", "between", (lo, lo + float(rng.integers(1, 4))),
                                      float(rng.choice([0.1, 0.5, 1.0, 3.0, 9.0]))))
        exprs.append(rc.Expression(100 + i, preds))
    m.subscribe(filler + exprs)
    evs = []
    for j in range(40):
        attrs = rng.choice(100, int(rng.integers(10, 60)), replace=False)
        evs.append(rc.Event(j, {f"a{a}": float(rng.integers(0, 10)) for a in attrs},
                            weights={f"a{a}": float(rng.choice([0.2, 1.0, 4.0])) for a in attrs}))
    _exact_before_and_after_removing(m, filler + exprs, exprs[::3], evs, (1, 3))


def test_view_arrays_copied_for_huge_pages_stay_exact(monkeypatch):
    """The match view's arrays, copied into numpy's memory whenever the kernel replaces them
    (``HUGE_BYTES``: here every time), are the ones the search reads: exact after every call."""
    from rankcast.kinds.matching.betree import nodes as bt, tree
    monkeypatch.setattr(tree, "HUGE_BYTES", 0)
    m = _matcher("weighted", leaf_capacity=2)
    _drive(m, "weighted", seed=11, steps=20)
    m2 = _matcher("weighted", leaf_capacity=2, build="batch")
    _drive(m2, "weighted", seed=12, steps=12)
    for core in (m.core, m2.core):          # copies start a cache line (blocks: check_structure)
        assert core.FL[bt.F_HV].ctypes.data % 64 == 0 and core.FL[bt.F_AR].ctypes.data % 64 == 0


def test_packed_and_unpacked_summary_classes_bound_exactly():
    """A summary class whose attributes all fit 16 bits is packed (``_write_sum``: one word
    per attribute and weight, the weight a 16-bit multiple of the class's scale rounded up);
    one holding an attribute from 65,536 on keeps float32 pairs. Attributes 0-29 and
    65,540-65,569 (66,000 interned first by events), mixed within expressions and within
    size classes, weights spread widely: top-k equals brute force and the view is as
    ``check_structure`` derives it, after inserts and deletions, long classes included; and
    with weights beyond float32 (1e39, 1e45: a packed class's scale infinite from about 2e43),
    also against event weights of 0."""
    from rankcast.kinds.matching.betree.nodes import PACK_ATTRS
    rng = np.random.default_rng(5)
    # event weights of 0 against weights beyond float32: a stored bound inf times 0 is NaN
    for long_class, wts, ews in ((32, [0.1, 0.7, 1.0, 3.3, 9.0], [0.3, 1.0, 2.5]),
                                 (3, [0.1, 0.7, 1.0, 3.3, 9.0], [0.3, 1.0, 2.5]),
                                 (5, [0.5, 1e39, 1e45], [0.3, 1.0, 2.5]),
                                 (5, [0.5, 1e39, 1e45], [0.0, 0.0, 0.3, 1.0])):
        m = _matcher("weighted", leaf_capacity=2, long_class=long_class)
        m.publish([rc.Event(j, {f"x{i}": 0.0 for i in range(1000 * j, 1000 * j + 1000)}) for j in range(66)], k=1)
        names = [f"x{i}" for i in range(30)] + [f"x{i}" for i in range(65540, 65570)]
        assert m.core.ev.val.shape[0] >= 66000 and 65540 + 30 > PACK_ATTRS
        exprs = []
        for i in range(1500):
            pool = 30 if i % 2 else 60          # half only low attributes: packed classes
            preds = []
            for a in rng.choice(pool, int(rng.integers(2, 6)), replace=False):
                lo = float(rng.integers(0, 8))
                preds.append(rc.Predicate(names[a], "between", (lo, lo + float(rng.integers(1, 4))),
                                          float(rng.choice(wts))))
            exprs.append(rc.Expression(i, preds))
        m.subscribe(exprs)
        evs = []
        for j in range(40):
            attrs = rng.choice(60, int(rng.integers(6, 40)), replace=False)
            evs.append(rc.Event(100 + j, {names[a]: float(rng.integers(0, 10)) for a in attrs},
                                weights={names[a]: float(rng.choice(ews)) for a in attrs}))
        _exact_before_and_after_removing(m, exprs, exprs[::3], evs, (1, 5))


def _summaries_equal_brute_force(core):
    """Every live c-node's l-node summary equals the (size class, attribute) -> largest weight
    map over the expressions in its l-node, every live p-node's over all the expressions below
    it (exact after inserts only: a deletion leaves p-node maxima stale); keys sorted, each
    once; the most predicates likewise. Returns how many summaries were compared."""
    from rankcast.kinds.matching.betree import nodes as bt
    IL, FL = core.IL, core.FL
    CI, PI = IL[bt.I_C].reshape(-1, bt.NC), IL[bt.I_P].reshape(-1, bt.NP)
    WA, WM, DP, num = IL[bt.I_WA], FL[bt.F_WM], IL[bt.I_DP], IL[bt.I_NUM]
    t = core.table

    def stored(rec, node):
        ws, wc = rec[node, bt.WS], rec[node, bt.WC]
        assert wc <= rec[node, bt.WK] and ws + rec[node, bt.WK] <= num[bt.U_W]
        keys = WA[ws: ws + wc].tolist()
        assert keys == sorted(set(keys)), "summary keys unsorted or repeated"
        return dict(zip(keys, WM[ws: ws + wc].tolist())), int(rec[node, bt.NMAX])

    def brute(slots):
        out, most = {}, 0
        for s in slots:
            size = int(t.p_end[s] - t.p_start[s])
            most = max(most, size)
            for p in range(t.p_start[s], t.p_end[s]):
                key = ((bt.SZ_CAP - size) << 32) | int(t.p_attr[p])
                out[key] = max(out.get(key, -np.inf), float(t.p_w[p]))
        return out, most

    def lnode(c):
        out, s = [], CI[c, bt.C_LH]
        while s >= 0:
            out.append(int(s))
            s = core.nxt[s]
        return out

    def below_p(p):
        out, todo = [], [PI[p, bt.P_ROOT]]
        while todo:
            c = todo.pop()
            out += lnode(c)
            todo += [ch for ch in (CI[c, bt.C_L], CI[c, bt.C_R]) if ch >= 0]
            for x in range(CI[c, bt.C_DS], CI[c, bt.C_DS] + CI[c, bt.C_DC]):
                out += below_p(DP[x])
        return out

    n = 0
    for c in range(num[bt.U_C]):
        if CI[c, bt.C_ALIVE] == 1:
            assert stored(CI, c) == brute(lnode(c)), f"l-node summary of c-node {c}"
            n += 1
    for p in range(num[bt.U_P]):
        if PI[p, bt.P_ALIVE] == 1:
            assert stored(PI, p) == brute(below_p(p)), f"summary of p-node {p}"
            n += 1
    return n


def _exprs_with_twins(rng, nid, n, n_attrs, most, p_twice):
    """``n`` expressions (ids from ``nid``) of 1 to ``most - 1`` distinct attributes of
    ``n_attrs``, each attribute twice (two ranges) with probability ``p_twice``: the public
    API refuses those, the core takes them. Returns (batch, expressions with a twin)."""
    from rankcast.kinds.matching.predicates import BETWEEN, ExpressionBatch
    off, attr, lo, hi, w = [0], [], [], [], []
    twice = 0
    for _ in range(n):
        for a in rng.choice(n_attrs, int(rng.integers(1, most)), replace=False):
            for _ in range(2 if rng.random() < p_twice else 1):
                x = float(rng.integers(0, 20))
                attr.append(a), lo.append(x), hi.append(x + float(rng.integers(0, 9)))
                w.append(float(rng.choice([0.1, 0.4, 0.7, 1.0, 2.5])))
        off.append(len(attr))
        twice += len(set(attr[off[-2]:])) < off[-1] - off[-2]
    m = len(attr)
    lo, hi = np.array(lo), np.array(hi)
    return ExpressionBatch(np.arange(nid, nid + n), np.zeros(n), np.array(off, np.int64), np.array(attr, np.int32),
                           np.full(m, BETWEEN, np.int8), lo, hi, np.array(w), lo, hi, np.zeros(m + 1, np.int64),
                           np.zeros(0)), twice


@pytest.mark.parametrize("leaf_capacity", [1, 3, 5])
def test_summary_upkeep_equals_a_brute_force_recomputation(leaf_capacity):
    """The insert path's summary upkeep (``_sum_add`` / ``_sum_merge``): expressions with an
    attribute twice (two ranges; the public API refuses them, the core takes them: the larger
    weight must be kept, once), with keys both new and already in the summary, of many sizes
    (several classes), summaries that grow past their capacity (relocated, the merge from the
    back over the scratch), inserted in batches of several sizes: after each batch every
    summary equals a recomputation."""
    from rankcast.kinds.matching.betree import nodes as bt
    rng = np.random.default_rng(11 + leaf_capacity)
    core = BETreeCore("weighted", leaf_capacity=leaf_capacity)
    nid = twice = 0
    for batch in (1, 7, 40, 150, 300):
        exprs, doubled = _exprs_with_twins(rng, nid, batch, 24, 13, 0.35)
        twice += doubled
        core.add(exprs, 24)
        nid += batch
        # (not check_structure: with an attribute twice the descent and the boxes take different
        # ones of its ranges, so "L and R never overlap" does not hold; the public API refuses them)
        assert _summaries_equal_brute_force(core) > 0
    num = core.IL[bt.I_NUM]
    assert twice > 50 and num[bt.U_PART] > 0 and num[bt.U_LIVEP] > 3 and num[bt.U_SPLIT] > 0, (twice, num)


def _stored_summaries(core):
    """Every live node's stored summary: ``weighted`` {key: weight} and the most predicates,
    ``static`` the bound; keyed ('c', c-node) / ('p', p-node)."""
    from rankcast.kinds.matching.betree import nodes as bt
    from rankcast.kinds.matching.core import STATIC
    IL, FL = core.IL, core.FL
    CI, PI = IL[bt.I_C].reshape(-1, bt.NC), IL[bt.I_P].reshape(-1, bt.NP)
    WA, WM, num = IL[bt.I_WA], FL[bt.F_WM], IL[bt.I_NUM]
    out = {}
    for tag, R, n, alive, S in (("c", CI, num[bt.U_C], bt.C_ALIVE, FL[bt.F_CS]),
                                ("p", PI, num[bt.U_P], bt.P_ALIVE, FL[bt.F_PS])):
        for x in range(n):
            if R[x, alive] == 1:
                ws, wc = R[x, bt.WS], R[x, bt.WC]
                out[tag, x] = (float(S[x]) if core.mode == STATIC else
                               (dict(zip(WA[ws: ws + wc].tolist(), WM[ws: ws + wc].tolist())), int(R[x, bt.NMAX])))
    return out


def _varied_expressions(rng, start, n):
    """``n`` expressions of 1 to 8 range predicates on attributes x0-x11 (many size classes;
    the rare large ones go deep, so a p-node's most predicates often come from the p-nodes
    below its c-directory, not from its l-nodes)."""
    out = []
    for i in range(n):
        preds = []
        size = int(rng.integers(5, 9) if rng.random() < 0.1 else rng.integers(1, 4))   # large ones rare: deep
        for a in rng.choice(12, size, replace=False):
            lo = float(rng.integers(0, 9))
            preds.append(rc.Predicate(f"x{a}", "between", (lo, lo + float(rng.integers(0, 5))),
                                      float(rng.choice([0.1, 0.5, 1.0, 2.5]))))
        out.append(rc.Expression(start + i, preds, score=float(rng.choice([0.0, 0.5, 1.0, 2.0, 3.5]))))
    return out


def _looser_or_equal(a, b):
    """Summary ``b`` bounds everything summary ``a`` does (a float: the static bound)."""
    if isinstance(a, float):
        return b >= a
    return b[1] >= a[1] and all(b[0].get(k, -1.0) >= w for k, w in a[0].items())


@pytest.mark.parametrize("scoring,dense", [("weighted", True), ("weighted", False), ("static", True)])
def test_lazy_summaries_equal_the_incremental_upkeep(scoring, dense, monkeypatch):
    """Large batches skip the per-expression summary upkeep and recompute the changed nodes'
    summaries once at their end (``_exact_summaries``); small ones keep the incremental path.
    The same calls (batches large and small, single subscribes, deletions) go to a core that
    takes the lazy path whenever it may and to one that never does: the tree is the same
    (insertion reads no summary); up to the first deletion every summary is the same in both
    (and, ``weighted``, equals a brute-force recomputation), after it the lazy one's p-node
    summaries may be tighter (recomputed exactly where the incremental ones keep stale maxima)
    but both still bound, l-node summaries stay the same; the top-k equals brute force after
    every call in both. ``dense``: the recomputation deduplicates keys through a place per
    (size, attribute), else (``LAZY_DENSE`` 0) by sorting all of them."""
    from rankcast.kinds.matching.betree import nodes as bt, tree
    if not dense:
        monkeypatch.setattr(tree, "LAZY_DENSE", 0)
    calls = []
    real = tree._exact_summaries
    monkeypatch.setattr(tree, "_exact_summaries", lambda *a: (calls.append(1), real(*a))[1])
    rng = np.random.default_rng(23 if scoring == "weighted" else 29)
    lazy = _matcher(scoring, leaf_capacity=2, lazy_min=16, lazy_share=2.0)
    eager = _matcher(scoring, leaf_capacity=2, lazy_min=1 << 40)
    live: dict[int, rc.Expression] = {}
    nid = nev = 0
    deleted = False
    plan = [300, 1, 1, 40, 1, 200, "del", 1, 30, 500, "del", 1, 400, 1, "del", 250]
    n_lazy = 0
    for step in plan:
        before = len(calls)
        if step == "del":
            gone = [int(i) for i in rng.choice(list(live), len(live) // 3, replace=False)]
            for m in (lazy, eager):
                m.unsubscribe(gone)
            for i in gone:
                del live[i]
            deleted = True
        else:
            new = _varied_expressions(rng, nid, step)
            nid += step
            for m in (lazy, eager):
                for x in ([new] if step > 1 else [[e] for e in new]):
                    m.subscribe(x)
            live.update((e.id, e) for e in new)
        n_lazy += len(calls) > before
        for m in (lazy, eager):
            check_structure(m.core)
        a, b = _stored_summaries(lazy.core), _stored_summaries(eager.core)
        assert a.keys() == b.keys(), "the same tree either way"
        if not deleted:
            assert a == b, f"lazy summaries differ from the incremental ones at step {step}"
            if scoring == "weighted":
                assert _summaries_equal_brute_force(lazy.core) > 0
        else:
            for key in a:
                if key[0] == "c":
                    assert a[key] == b[key], f"l-node summary of {key}"
                else:
                    assert _looser_or_equal(a[key], b[key]), f"summary of {key}: the incremental one is tighter"
        evs = []
        for j in range(8):
            attrs = [f"x{a}" for a in rng.choice(12, int(rng.integers(2, 13)), replace=False)]
            evs.append(rc.Event(nev + j, {a: float(rng.integers(0, 10)) for a in attrs},
                                weights={a: float(rng.choice([0.5, 1.0, 2.0])) for a in attrs}))
        nev += len(evs)
        for m in (lazy, eager):
            for k in (1, 5):
                assert_matches_exact(m.publish(evs, k=k), list(live.values()), evs, scoring, k)
    # lazy: the 300, 200 (>= 341 / 2), 500, 400 and 250 batches (and rebuilds); never in the eager core
    assert n_lazy >= 4, n_lazy
    if scoring == "weighted":
        # a p-node whose most predicates come from the p-node below its c-directory only: five
        # one-predicate expressions on x0 (the same interval: no split, they stay in its l-node)
        # and one of three predicates, which the c-directory's partition moves into a p-node on x1
        m = _matcher("weighted", leaf_capacity=1, lazy_min=1)
        one = rc.Predicate("x0", "between", (0.0, 1.0), 1.0)
        m.subscribe([rc.Expression(i, [one]) for i in range(5)]
                    + [rc.Expression(5, [one, rc.Predicate("x1", "between", (0.0, 1.0), 1.0),
                                         rc.Predicate("x2", "between", (0.0, 1.0), 1.0)])])
        check_structure(m.core)
        PI = m.core.IL[bt.I_P].reshape(-1, bt.NP)
        assert m.core.IL[bt.I_NUM][bt.U_LIVEP] == 2 and PI[0, bt.NMAX] == 3, PI[:2]
        assert _summaries_equal_brute_force(m.core) > 0


@pytest.mark.parametrize("leaf_capacity,list_cap", [(2, 64), (5, 6), (3, 0)])
def test_list_classes_bound_exactly(leaf_capacity, list_cap):
    """Size classes of nodes with at most ``list_cap`` expressions below are written as list
    classes (``_write_sum``: each expression's own other attributes; ``_vbound``: the best
    expression whose attributes the event all has). Many expressions of few sizes over few
    attributes (the union of a class's attributes covers most events, one expression's
    rarely), weights spread widely: top-k equals brute force and the view is as
    ``check_structure`` derives it (every list class holds exactly the expressions below its
    node) after a bulk subscribe, single subscribes into the lists (the view rewritten node by
    node: every p-node on the path is rewritten) and deletions; with lists the search scans
    fewer l-nodes and evaluates fewer expressions than without (``list_cap`` 0)."""
    from rankcast.kinds.matching.betree import nodes as bt
    rng = np.random.default_rng(17 + list_cap)

    def expr(i):
        preds = []
        for a in rng.choice(16, int(rng.integers(2, 5)), replace=False):
            lo = float(rng.integers(0, 6))
            preds.append(rc.Predicate(f"a{a}", "between", (lo, lo + float(rng.integers(2, 6))),
                                      float(rng.choice([0.1, 0.4, 1.0, 2.5, 7.0]))))
        return rc.Expression(i, preds)

    exprs = [expr(i) for i in range(1500)]
    evs = []
    for j in range(30):
        attrs = rng.choice(16, int(rng.integers(4, 11)), replace=False)
        evs.append(rc.Event(j, {f"a{a}": float(rng.integers(0, 10)) for a in attrs},
                            weights={f"a{a}": float(rng.choice([0.3, 1.0, 3.0])) for a in attrs}))
    opts = dict(leaf_capacity=leaf_capacity, view_full_share=2.0, view_slack=10 ** 9)
    m = _matcher("weighted", list_cap=list_cap, **opts)
    m.subscribe(exprs[:1200])
    live = exprs[:1200]
    for e in exprs[1200:1260]:              # one at a time: into nodes whose view holds lists
        m.subscribe([e])
        live.append(e)
    check_structure(m.core)
    for k in (1, 3, 5):
        assert_matches_exact(m.publish(evs, k=k), live, evs, "weighted", k)
    SU = m.core.FL[bt.F_AR].view(np.uint32)
    n_list = sum(1 for p in range(int(m.core.IL[bt.I_NUM][bt.U_P])) if m.core.IL[bt.I_PV][p] >= 0
                 and _list_classes(SU, int(m.core.IL[bt.I_PV][p])) > 0)
    assert (n_list > 0) == (list_cap > 0), n_list
    if list_cap:
        ref = _matcher("weighted", list_cap=0, **opts)
        ref.subscribe(exprs[:1200])
        for e in exprs[1200:1260]:
            ref.subscribe([e])
        for x in (m, ref):
            x.core.counters[:] = 0
            x.publish(evs, k=3)
        a, b = m.stats(), ref.stats()
        assert a["random_accesses"] < b["random_accesses"] and a["lnodes_scanned"] <= b["lnodes_scanned"], (a, b)
    _exact_before_and_after_removing(m, live, live[::4], evs, (1, 5))
    gone = {e.id for e in live[::4]}
    live = [e for e in live if e.id not in gone]
    for e in exprs[1260:]:
        m.subscribe([e])
        live.append(e)
    check_structure(m.core)
    for k in (1, 5):
        assert_matches_exact(m.publish(evs, k=k), live, evs, "weighted", k)


def _view_summaries(core):
    """Every live node's view summary as 64-bit words, keyed ('c', c-node) / ('p', p-node)
    (the blocks' places and the p-directories, which hold places, left out)."""
    from rankcast.kinds.matching.betree import nodes as bt
    IL, FL = core.IL, core.FL
    AR, HV, PV, num = FL[bt.F_AR], FL[bt.F_HV], IL[bt.I_PV], IL[bt.I_NUM]
    out = {}
    for c in range(int(num[bt.U_C])):
        b = int(HV[c * bt.NV + bt.V_B])
        if b >= 0:
            at = b + 4 + bt.ND * int(AR[b + 2])
            out["c", c] = AR[at: at + int(AR[b])].view(np.int64).tolist()
    for p in range(int(num[bt.U_P])):
        b = int(PV[p])
        if b >= 0:
            out["p", p] = AR[b + 4: b + 4 + int(AR[b])].view(np.int64).tolist()
    return out


def test_full_view_list_classes_with_an_attribute_twice():
    """The full view (``_full_write``) decides list classes through marks of the path's
    attributes (``_once`` with ``MK``), the node-by-node view without: both write every
    summary alike, also where expressions have an attribute twice (the core takes them: no
    list class where one of them is a path attribute twice). The tree is built with the view
    written node by node only, then rewritten whole."""
    from rankcast.kinds.matching.betree import nodes as bt, view
    rng = np.random.default_rng(23)
    core = BETreeCore("weighted", leaf_capacity=2, view_full_share=1e9, view_slack=1 << 50)
    nid = 0
    for batch in (300, 1, 5, 40, 200):
        core.add(_exprs_with_twins(rng, nid, batch, 12, 6, 0.15)[0], 12)
        nid += batch
    num = core.IL[bt.I_NUM]
    assert num[bt.U_AR] > num[bt.U_ARLIVE], "the view was written node by node"
    before = _view_summaries(core)
    t = core.table
    view._full_view(core.IL, core.FL, core.mode, core.nxt, t.p_start, t.p_end, t.p_attr, t.p_op, t.p_a, t.p_b, t.p_w,
                  t.set_off, t.ids, t.score)
    after = _view_summaries(core)
    assert before == after
    # list classes written, and refused below nodes where an expression has a path attribute twice
    SU = core.FL[bt.F_AR].view(np.uint32)
    PV = core.IL[bt.I_PV]
    small = [p for p in range(int(num[bt.U_P])) if PV[p] >= 0 and 0 < core.IL[bt.I_P][p * bt.NP + bt.P_CNT] <= bt.LIST_CAP]
    n_list = sum(_list_classes(SU, int(PV[p])) > 0 for p in small)
    assert 0 < n_list < len(small), (n_list, len(small))


def _list_classes(SU, b):
    """The list classes of the summary of the p-node block at float ``b`` of the view."""
    from rankcast.kinds.matching.betree import nodes as bt
    AR = SU.view(np.float64)
    j, end, n = 2 * (b + 4), 2 * (b + 4 + int(AR[b])) - 1, 0
    while j < end:
        n += bool(int(SU[j + 3]) & bt.LISTC)
        j += 4 + int(SU[j + 2])
    return n


@pytest.mark.parametrize("spec_scale", [0.5, 1.0, 2.0])
def test_speculative_threshold_stays_exact(spec_scale):
    """Events published together search from a threshold taken from the k-th scores of the
    events before them (the module docstring, "Speculative threshold"); an event whose search
    ends without k matches at or above it is searched again from nothing. ``spec_scale`` 0.5
    speculates low (it stands), 2.0 high (most searches are redone): the top-k equals brute
    force either way, with ties and every k."""
    rng = np.random.default_rng(11)
    m = _matcher("weighted", leaf_capacity=2, spec_scale=spec_scale)
    live = _expressions(rng, 0, 600)
    m.subscribe(live)
    nev = 0
    for k in (1, 3, 5, 40):
        evs = _events(rng, nev, 150)
        nev += len(evs)
        assert_matches_exact(m.publish(evs, k=k), live, evs, "weighted", k)
    st = m.core.stats()
    assert st["speculated"] > 0
    if spec_scale > 1.0:
        assert st["speculation_retries"] > 0
    off = _matcher("static", leaf_capacity=2, spec_scale=spec_scale)       # static scores: not speculated
    off.subscribe(live)
    evs = _events(rng, nev, 150)
    assert_matches_exact(off.publish(evs, k=3), live, evs, "static", 3)
    assert off.core.stats()["speculated"] == off.core.stats()["speculation_retries"] == 0

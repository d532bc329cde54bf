"""The scored segment tree and the score-sorted interval tree against the 1-D oracle: every
``next`` batch, concatenated, equals ``sorted(stabbed, key=(-score, item))``; plus each
structure's invariants (notes ``ranked-pubsub-interval-indexes.md`` §5)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rankcast.kinds.matching.intervals.itree import IntervalTreeIndex
from rankcast.kinds.matching.intervals.segment import SegmentTreeIndex

INDEXES = [SegmentTreeIndex, IntervalTreeIndex]
BATCHES = [(1,), (3,), (10_000,), (1, 3, 1000, 2)]


def oracle(lo, hi, score, item, q):
    """(items, scores) of the intervals stabbed by q, in the total order."""
    hit = np.flatnonzero((lo <= q) & (q <= hi))
    order = np.lexsort((item[hit], -score[hit]))
    return item[hit][order], score[hit][order]


def drain(cursor, sizes):
    """Every remaining result of ``cursor``, read in batches cycling through ``sizes``."""
    items, scores = [], []
    k = 0
    while True:
        n = sizes[k % len(sizes)]
        k += 1
        it, sc = cursor.next(n)
        assert it.dtype == np.int64 and sc.dtype == np.float64 and len(it) == len(sc) <= n
        if len(it) == 0:
            break
        items.append(it)
        scores.append(sc)
    return (np.concatenate(items) if items else np.empty(0, np.int64),
            np.concatenate(scores) if scores else np.empty(0, np.float64))


def workload(rng, n, grid=20, p_inf=0.1, p_point=0.15, p_dup=0.1, n_scores=4):
    """Intervals on an integer grid (many shared endpoints), some degenerate, some with an
    infinite end, some duplicated, scores from a few values (many ties), unique items."""
    lo = rng.integers(0, grid, n).astype(np.float64)
    hi = lo + rng.integers(0, max(grid // 3, 1), n)
    point = rng.random(n) < p_point
    hi[point] = lo[point]
    lo[rng.random(n) < p_inf] = -np.inf
    hi[rng.random(n) < p_inf] = np.inf
    score = rng.integers(0, n_scores, n).astype(np.float64) * 0.5
    dup = np.flatnonzero(rng.random(n) < p_dup)
    if n > 1 and len(dup):
        src = rng.integers(0, n, len(dup))
        lo[dup], hi[dup], score[dup] = lo[src], hi[src], score[src]
    item = rng.permutation(4 * n + 1)[:n].astype(np.int64) - 2 * n
    return lo, hi, score, item


def query_points(lo, hi, extra=()):
    """Every finite endpoint, a point between each pair of neighbours, points outside all."""
    ends = np.unique(np.concatenate((lo, hi, np.asarray(extra, np.float64))))
    ends = ends[np.isfinite(ends)]
    if len(ends) == 0:
        return np.array([-1.0, 0.0, 1.0])
    between = (ends[1:] + ends[:-1]) / 2
    return np.concatenate((ends, between, [ends[0] - 1.0, ends[-1] + 1.0]))


def assert_matches_oracle(ix, lo, hi, score, item, qs, sizes):
    for q in qs:
        cursor = ix.open(q)
        got_items, got_scores = drain(cursor, sizes)
        want_items, want_scores = oracle(lo, hi, score, item, q)
        assert np.array_equal(got_items, want_items), (ix.name, q)
        assert np.array_equal(got_scores, want_scores), (ix.name, q)
        # past exhaustion: empty, however often asked
        for n in (0, 1, 7):
            it, sc = cursor.next(n)
            assert len(it) == len(sc) == 0 and it.dtype == np.int64 and sc.dtype == np.float64
        nodes, holes, entries = cursor.counters
        assert entries >= len(want_items) and (nodes >= 1 or len(ix) == 0) and holes <= nodes
        if isinstance(ix, SegmentTreeIndex):
            assert entries == len(want_items)      # every row on the path is stabbed, read once
        else:
            assert holes == 0                      # lo_min/hi_max leave no holes (Lemma 3.1)


def medians(ix):
    return ix.median if isinstance(ix, IntervalTreeIndex) else ()


@pytest.mark.parametrize("cls", INDEXES)
@pytest.mark.parametrize("sizes", BATCHES)
@pytest.mark.parametrize("n,seed", [(2, 1), (5, 2), (17, 3), (60, 4), (400, 5)])
def test_random_workloads_match_oracle(cls, sizes, n, seed):
    lo, hi, score, item = workload(np.random.default_rng(seed), n)
    ix = cls(lo, hi, score, item)
    assert len(ix) == n and ix.nbytes() > 0
    assert_matches_oracle(ix, lo, hi, score, item, query_points(lo, hi, medians(ix)), sizes)


@pytest.mark.parametrize("cls", INDEXES)
def test_larger_float_workload(cls):
    rng = np.random.default_rng(11)
    n = 20_000
    mid = rng.random(n)
    half = rng.random(n) ** 3 * 0.3
    lo, hi = mid - half, mid + half
    lo[rng.random(n) < 0.02] = -np.inf
    hi[rng.random(n) < 0.02] = np.inf
    score = np.round(1 - half, 2)
    item = rng.permutation(n).astype(np.int64)
    ix = cls(lo, hi, score, item)
    qs = np.concatenate((rng.random(60), rng.choice(lo[np.isfinite(lo)], 20),
                         rng.choice(hi[np.isfinite(hi)], 20), [-5.0, 5.0]))
    if cls is IntervalTreeIndex:
        qs = np.concatenate((qs, rng.choice(ix.median, 20)))
    assert_matches_oracle(ix, lo, hi, score, item, qs, (20, 1, 500))


@pytest.mark.parametrize("cls", INDEXES)
def test_empty_and_single(cls):
    empty = cls(np.empty(0), np.empty(0), np.empty(0), np.empty(0, np.int64))
    assert len(empty) == 0
    for q in (-1.0, 0.0, 3.5):
        it, sc = empty.open(q).next(5)
        assert len(it) == len(sc) == 0
    for lo, hi in ((2.0, 2.0), (1.0, 3.0), (-np.inf, 2.0), (2.0, np.inf), (-np.inf, np.inf)):
        args = np.array([lo]), np.array([hi]), np.array([0.5]), np.array([7])
        ix = cls(*args)
        assert len(ix) == 1
        assert_matches_oracle(ix, *args, [-10.0, 1.0, 2.0, 2.5, 3.0, 10.0], (1, 4))


@pytest.mark.parametrize("cls", INDEXES)
def test_all_identical_intervals_and_scores(cls):
    n = 300
    lo, hi = np.full(n, 1.0), np.full(n, 4.0)
    score = np.zeros(n)
    item = np.random.default_rng(3).permutation(n).astype(np.int64) * 3
    ix = cls(lo, hi, score, item)
    assert_matches_oracle(ix, lo, hi, score, item, [0.0, 1.0, 2.0, 4.0, 5.0], (1, 3, 1000))


@pytest.mark.parametrize("cls", INDEXES)
def test_bad_input(cls):
    with pytest.raises(ValueError):
        cls([2.0], [1.0], [1.0], [1])
    with pytest.raises(ValueError):
        cls([1.0], [2.0], [-1.0], [1])
    ix = cls([1.0], [2.0], [1.0], [1])
    with pytest.raises(ValueError):
        ix.open(float("nan"))
    with pytest.raises(ValueError):
        ix.open(1.5).next(-1)


endpoint = st.sampled_from([-np.inf, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0, np.inf])


@st.composite
def intervals(draw):
    pairs = draw(st.lists(st.tuples(endpoint, endpoint, st.sampled_from([0.0, 1.0, 2.5])),
                          max_size=40))
    lo = np.array([min(a, b) for a, b, _ in pairs], np.float64)
    hi = np.array([max(a, b) for a, b, _ in pairs], np.float64)
    score = np.array([s for _, _, s in pairs], np.float64)
    item = np.array(draw(st.permutations(range(len(pairs)))), np.int64) * 5 - 20
    return lo, hi, score, item


@settings(max_examples=150, deadline=None)
@given(intervals(), st.sampled_from(BATCHES))
def test_property_both_indexes(data, sizes):
    lo, hi, score, item = data
    for cls in INDEXES:
        ix = cls(lo, hi, score, item)
        qs = query_points(lo, hi, medians(ix))
        assert_matches_oracle(ix, lo, hi, score, item, qs, sizes)


# ----------------------------------------------------------------------------- invariants

@pytest.mark.parametrize("n,seed", [(1, 0), (50, 1), (3000, 2)])
def test_segment_tree_canonical_covers(n, seed):
    lo, hi, score, item = workload(np.random.default_rng(seed), n, grid=200)
    ix = SegmentTreeIndex(lo, hi, score, item)
    row_of = {int(it): r for r, it in enumerate(item)}

    items, counts = ix.cover_levels()
    assert counts.shape == (n, ix.levels) and counts.max() <= 2
    assert (counts.sum(axis=1) >= 1).all()           # every interval stored somewhere

    nodes, stored_items = ix.stored()
    rows = np.array([row_of[int(it)] for it in stored_items], np.int64)
    ext_lo, ext_hi = ix.node_extents(nodes)
    assert not np.isnan(ext_lo).any()                # nothing stored in the padding
    assert ((lo[rows] <= ext_lo) & (ext_hi <= hi[rows])).all()
    # maximal: the parent's extent is not inside the interval
    parents = nodes[nodes > 1] >> 1
    p_lo, p_hi = ix.node_extents(parents)
    r = rows[nodes > 1]
    assert (np.isnan(p_hi) | (p_lo < lo[r]) | (p_hi > hi[r])).all()
    # each node list in the total order
    for v in np.unique(nodes):
        sel = rows[nodes == v]
        assert np.array_equal(sel, sel[np.lexsort((item[sel], -score[sel]))])


@pytest.mark.parametrize("n,seed", [(1, 0), (50, 1), (3000, 2)])
def test_interval_tree_structure(n, seed):
    lo, hi, score, item = workload(np.random.default_rng(seed), n, grid=200)
    ix = IntervalTreeIndex(lo, hi, score, item)
    node = ix.node_of_rows()
    assert len(node) == n and np.array_equal(np.sort(ix.item), np.sort(item))
    med = ix.median[node]
    assert ((ix.lo <= med) & (med <= ix.hi)).all()   # every interval contains its node's median
    n_nodes = len(ix.median)
    assert (np.diff(ix.start) >= 1).all()            # no empty node
    for v in range(n_nodes):
        a, b = ix.start[v], ix.start[v + 1]
        order = np.lexsort((ix.item[a:b], -ix.score[a:b]))
        assert np.array_equal(order, np.arange(b - a))
        assert ix.lo_min[v] == ix.lo[a:b].min() and ix.hi_max[v] == ix.hi[a:b].max()
    # intervals in the left subtree lie left of the median, in the right subtree right of it
    def subtree(v):
        out, stack = [], [v]
        while stack:
            u = stack.pop()
            if u >= 0:
                out.append(u)
                stack += [ix.left[u], ix.right[u]]
        return np.isin(node, out)
    for v in range(n_nodes):
        if ix.left[v] >= 0:
            assert (ix.hi[subtree(ix.left[v])] < ix.median[v]).all()
        if ix.right[v] >= 0:
            assert (ix.lo[subtree(ix.right[v])] > ix.median[v]).all()
    assert ix.depth <= int(np.log2(max(n, 1))) + 2

"""Scored R-tree and SOPT-R-tree against the 1-D oracle, plus the structural invariants of the
paper (§3.2): Algorithm 2 builds exactly the reduced graph G, |E| <= 3n, the arrangement keeps
every intersecting pair in the total order, extents are the hulls of their subtrees, and a
top-k DFS in a SOPT-R-tree enters at most 2k nodes per level (Theorem 3.2)."""
from __future__ import annotations

import numba
import numpy as np
import pytest

from rankcast.kinds.matching.intervals import base as B
from rankcast.kinds.matching.intervals import rtree as R
from rankcast.kinds.matching.intervals.rtree import (RTreeIndex, SoptRTreeIndex, constraint_graph,
                                               sopt_arrangement, total_order)

INDEXES = (RTreeIndex, SoptRTreeIndex)
INF = np.inf


# ----------------------------------------------------------------------------- oracle & workloads

def oracle(lo, hi, score, item, q):
    """Items and scores stabbed by q, in the total order (score desc, item asc)."""
    rows = np.flatnonzero((lo <= q) & (q <= hi))
    rows = rows[np.lexsort((item[rows], -score[rows]))]
    return item[rows], score[rows]


def drain(cursor, sizes):
    """Concatenate next(s) for s cycling through sizes until a call returns nothing."""
    items, scores, i = [], [], 0
    while True:
        a, s = cursor.next(sizes[i % len(sizes)])
        i += 1
        assert len(a) == len(s)
        if len(a) == 0:
            break
        assert len(a) <= sizes[(i - 1) % len(sizes)]
        items.append(a)
        scores.append(s)
    for n in (1, 5):
        a, s = cursor.next(n)
        assert len(a) == 0 and len(s) == 0
    if not items:
        return np.empty(0, np.int64), np.empty(0)
    return np.concatenate(items), np.concatenate(scores)


def workload(rng, n, kind):
    """Intervals with the awkward cases of the notes (§5): score ties, duplicates, touching and
    degenerate intervals, infinite endpoints."""
    if kind == "grid":              # integer endpoints: touching, duplicates, degenerate
        lo = rng.integers(0, 12, n).astype(np.float64)
        hi = lo + rng.integers(0, 5, n)
    elif kind == "float":
        c = rng.random(n)
        h = rng.pareto(1.5, n) * 0.02
        lo, hi = c - h, c + h
    elif kind == "chain":           # [i, i + 1] touching their neighbours, points [i, i]
        lo = rng.integers(0, max(n // 2, 1), n).astype(np.float64)
        hi = lo + (rng.random(n) < 0.7)
    else:                           # "mixed": grid plus infinities and exact copies
        lo = rng.integers(0, 8, n).astype(np.float64)
        hi = lo + rng.integers(0, 4, n)
        lo[rng.random(n) < 0.1] = -INF
        hi[rng.random(n) < 0.1] = INF
        if n > 3:
            src = rng.integers(0, n, n // 4)
            dst = rng.integers(0, n, n // 4)
            lo[dst], hi[dst] = lo[src], hi[src]
    score = rng.integers(0, 4 if kind != "chain" else 2, n).astype(np.float64)   # many ties
    item = rng.permutation(10 * n + 5)[:n].astype(np.int64)
    return lo, hi, score, item


def queries(lo, hi):
    """Every finite endpoint, the midpoints between them, and points outside everything."""
    v = np.unique(np.concatenate((lo, hi, [0.0])))
    v = v[np.isfinite(v)]
    mids = (v[1:] + v[:-1]) / 2
    return np.concatenate((v, mids, [v[0] - 1.0, v[-1] + 1.0, -1e300, 1e300]))


# ----------------------------------------------------------------------------- results

@pytest.mark.parametrize("cls", INDEXES)
@pytest.mark.parametrize("b", [2, 3, 50, 130])         # 130: a leaf read as several 64-row masks
def test_equals_oracle(cls, b):
    rng = np.random.default_rng(7 + b)
    batches = [(1,), (2, 3), (7, 1, 50), (1000,), (9, 8, 13)]     # the last stop inside leaves read whole
    for kind in ("grid", "float", "mixed", "chain") * 2:
        for n in (0, 1, 2, 5, 17, 64, 150, 400):
            lo, hi, score, item = workload(rng, n, kind)
            idx = cls(lo, hi, score, item, b=b)
            assert len(idx) == n
            for j, q in enumerate(queries(lo, hi)):
                want_items, want_scores = oracle(lo, hi, score, item, q)
                items, scores = drain(idx.open(q), batches[j % len(batches)])
                assert np.array_equal(items, want_items), (kind, n, q)
                assert np.array_equal(scores, want_scores)


@pytest.mark.parametrize("cls", INDEXES)
def test_larger_random_equals_oracle(cls):
    rng = np.random.default_rng(11)
    n = 30_000                                 # 2n+1 pieces span three levels of the bit tree
    lo, hi, score, item = workload(rng, n, "float")
    score = np.round(score + rng.random(n), 1)
    idx = cls(lo, hi, score, item, b=8)
    for q in np.concatenate((rng.random(40), lo[:5], hi[:5])):
        want_items, want_scores = oracle(lo, hi, score, item, q)
        cur = idx.open(q)
        top, _ = cur.next(20)
        assert np.array_equal(top, want_items[:20])
        rest, rest_scores = drain(cur, (1, 100, 3))
        assert np.array_equal(np.concatenate((top, rest)), want_items)
        assert np.array_equal(rest_scores, want_scores[20:])


@pytest.mark.parametrize("cls", INDEXES)
def test_empty_single_and_odd_batches(cls):
    empty = cls([], [], [], [])
    assert len(empty) == 0 and empty.nbytes() >= 0
    cur = empty.open(0.0)
    assert len(cur.next(10)[0]) == 0 and cur.counters.tolist() == [0, 0, 0]

    one = cls([1.0], [1.0], [0.5], [42])
    assert drain(one.open(1.0), (3,))[0].tolist() == [42]
    assert drain(one.open(1.5), (3,))[0].tolist() == []
    cur = one.open(1.0)
    assert len(cur.next(0)[0]) == 0 and len(cur.next(-3)[0]) == 0
    assert cur.next(10 ** 12)[0].tolist() == [42]
    assert len(cur.next(1)[0]) == 0

    inf = cls([-INF, -INF, 3.0], [INF, 0.0, INF], [1.0, 1.0, 1.0], [9, 2, 5])
    assert drain(inf.open(0.0), (1,))[0].tolist() == [2, 9]
    assert drain(inf.open(3.0), (2,))[0].tolist() == [5, 9]
    assert drain(inf.open(1.0), (2,))[0].tolist() == [9]


def test_bad_input():
    with pytest.raises(ValueError):
        RTreeIndex([0.0], [1.0], [1.0], [1], b=1)
    with pytest.raises(ValueError):
        SoptRTreeIndex([0.0, 1.0], [1.0, 2.0], [1.0, 1.0], [3, 3])
    with pytest.raises(ValueError):
        SoptRTreeIndex([2.0], [1.0], [1.0], [3])
    with pytest.raises(ValueError):
        RTreeIndex([0.0], [1.0], [1.0], [1]).open(float("nan"))


@pytest.mark.parametrize("pext", [True, False])
def test_stab8_is_the_stabbing_test(pext, monkeypatch):
    """stab8 over two columns and stab8_rows over the rows of a (n, 3) table (the IR-tree's
    entry pool: lo, hi, score) set bit i exactly when row r + i holds q (stab8_rows with pext
    where the CPU has it, and with lane shuffles)."""
    if pext and not B._PEXT:
        pytest.skip("no BMI2 pext on this CPU")
    monkeypatch.setattr(B, "_PEXT", pext)
    rng = np.random.default_rng(4)
    lo = rng.integers(0, 6, 200).astype(np.float64)
    hi = lo + rng.integers(0, 3, 200)
    lo[::7], hi[::11] = -INF, INF
    rows = np.stack((lo, hi, rng.random(200)), axis=1)
    rows[::5, 2] = np.nan
    kernel = numba.njit(lambda lo, hi, r, q: B.stab8(lo, hi, r, q))
    kernel_rows = numba.njit(lambda a, r, q: B.stab8_rows(a, r, q))
    for q in (-1.0, 0.0, 2.0, 2.5, 5.0, 9.0, -0.0):
        for r in (0, 3, 100, 192):
            want = sum(1 << i for i in range(8) if lo[r + i] <= q <= hi[r + i])
            assert kernel(lo, hi, r, q) == want, (q, r)
            assert kernel_rows(rows, r, q) == want, (q, r)


@pytest.mark.parametrize("cls", INDEXES)
def test_both_kernels_agree(cls):
    """The kernel that loads ahead (deep reads) and the other return the same rows and counters."""
    rng = np.random.default_rng(8)
    lo, hi, score, item = workload(rng, 3000, "float")
    t = cls(lo, hi, score, item, b=50).tree
    qs = np.concatenate((queries(lo, hi)[::40], rng.random(20)))
    out = []
    for kernel in (R._rtree_cursors, R._rtree_cursors_deep):
        for g in (1, 9, 300, 3000):
            gs = np.full(len(qs), g, np.int64)
            o = (np.empty(g * len(qs), np.int64), np.empty(g * len(qs)), np.zeros(len(qs) + 1, np.int64))
            state = (np.zeros((3, t.height), np.int64), np.full(1, -1, np.int64), np.zeros(3, np.int64),
                     np.zeros(t.height, np.int64))
            n = kernel(qs, gs, True, *t._arrays(), *state, *o)
            out.append((o[0][:n].tolist(), o[1][:n].tolist(), o[2].tolist(), state[2].tolist(), state[3].tolist()))
    assert out[:4] == out[4:]
    assert R._kernel(R.DEEP) is R._rtree_cursors and R._kernel(R.DEEP + 1) is R._rtree_cursors_deep


# ----------------------------------------------------------------------------- counters

def reference_counters(idx, q, k):
    """nodes / holes / entries of a top-k left-first DFS, written recursively over extents."""
    t = idx.tree
    H, b = t.height, t.b
    c = {"nodes": 0, "holes": 0, "entries": 0, "got": 0}

    def visit(d, j):                 # returns whether something stabbed was found below
        c["nodes"] += 1
        found = False
        first, stop = j * b, min(j * b + b, t.node_cnt[d + 1])
        for e in range(first, stop):
            if c["got"] == k:
                return True          # stopped inside: neither finished nor a hole
            if d == H - 1:
                c["entries"] += 1
                if t.lo[e] <= q <= t.hi[e]:
                    c["got"] += 1
                    found = True
            else:
                lo, hi = t.extents(d + 1)
                if lo[e] <= q <= hi[e]:
                    found |= visit(d + 1, e)
        if not found:
            c["holes"] += 1
        return found

    if H and t.extents(0)[0][0] <= q <= t.extents(0)[1][0]:
        visit(0, 0)
    return [c["nodes"], c["holes"], c["entries"]]


@pytest.mark.parametrize("cls", INDEXES)
def test_counters_follow_the_dfs(cls):
    rng = np.random.default_rng(3)
    for b in (2, 3, 50):
        lo, hi, score, item = workload(rng, 80 if b < 50 else 400, "float")
        idx = cls(lo, hi, score, item, b=b)
        for q in queries(lo, hi)[::5]:
            for k in (1, 4, 9, 20, 1000):
                cur = idx.open(q)
                cur.next(k)
                assert cur.counters.tolist() == reference_counters(idx, q, k), (b, q, k)
                assert cur.level_nodes.sum() == cur.counters[0]


# ----------------------------------------------------------------------------- structure

def brute_force_graph(lo, hi, score, item):
    """Edges (row pairs) of the reduced graph G straight from its definition: I1 -> I2 iff I1
    comes first in the total order and some point of I1 n I2 lies in no interval strictly
    between them. Candidate points: every endpoint (±inf included, as in Algorithm 2) and a
    point inside every gap between consecutive distinct endpoints or beyond the last."""
    v = np.unique(np.concatenate((lo, hi)))
    pts = list(v)
    for a, b in zip(v[:-1], v[1:]):
        pts.append((a + b) / 2 if np.isfinite(a) and np.isfinite(b)
                   else b - 1 if np.isfinite(b) else a + 1 if np.isfinite(a) else 0.0)
    if np.isfinite(v[0]):
        pts.append(v[0] - 1)
    if np.isfinite(v[-1]):
        pts.append(v[-1] + 1)
    pts = np.array(pts)
    order = total_order(score, item)
    inside = (lo[order, None] <= pts) & (pts <= hi[order, None])      # rank x point
    below = np.vstack((np.zeros((1, len(pts)), np.int64), np.cumsum(inside, axis=0)))
    edges = set()
    n = len(lo)
    for i in range(n):
        for j in range(i + 1, n):
            between = below[j] - below[i + 1]
            if (inside[i] & inside[j] & (between == 0)).any():
                edges.add((int(order[i]), int(order[j])))
    return edges


def csr_pairs(indptr, indices):
    return {(int(r), int(c)) for r in range(len(indptr) - 1)
            for c in indices[indptr[r]:indptr[r + 1]]}


def test_algorithm2_is_the_reduced_graph():
    rng = np.random.default_rng(5)
    for trial in range(300):
        n = int(rng.integers(1, 30))
        lo, hi, score, item = workload(rng, n, ("grid", "float", "mixed", "chain")[trial % 4])
        if trial % 10 == 0:
            lo[0] = hi[0] = (INF, -INF)[trial % 20 == 0]                # a point at infinity
        indptr, indices = constraint_graph(lo, hi, score, item)
        got = csr_pairs(indptr, indices)
        assert len(got) == len(indices)                                   # no duplicate edge
        assert got == brute_force_graph(lo, hi, score, item), trial
        assert len(indices) <= 3 * n


def test_edge_bound_and_index_graph():
    rng = np.random.default_rng(6)
    for kind in ("grid", "float", "mixed", "chain"):
        lo, hi, score, item = workload(rng, 5000, kind)
        idx = SoptRTreeIndex(lo, hi, score, item)
        indptr, indices = idx.edges()
        assert len(indices) == idx.n_edges <= 3 * len(lo)
        want = constraint_graph(lo, hi, score, item)
        assert np.array_equal(indptr, want[0]) and np.array_equal(indices, want[1])
        assert np.array_equal(idx.arrangement, sopt_arrangement(lo, hi, score, item))


def test_arrangements_respect_the_full_graph():
    rng = np.random.default_rng(8)
    for trial in range(120):
        n = int(rng.integers(1, 120))
        lo, hi, score, item = workload(rng, n, ("grid", "float", "mixed", "chain")[trial % 4])
        rank = np.empty(n, np.int64)
        rank[total_order(score, item)] = np.arange(n)
        meets = np.maximum(lo[:, None], lo) <= np.minimum(hi[:, None], hi)
        for cls in INDEXES:
            a = cls(lo, hi, score, item, b=3).arrangement
            assert np.array_equal(np.sort(a), np.arange(n))
            pos = np.empty(n, np.int64)
            pos[a] = np.arange(n)
            i, j = np.nonzero(meets & (rank[:, None] < rank))
            assert (pos[i] < pos[j]).all(), (cls.name, trial)
        assert np.array_equal(RTreeIndex(lo, hi, score, item).arrangement, total_order(score, item))


def test_algorithm1_takes_smallest_ready_left_endpoint():
    # rows 1 and 3 are copies (an edge 1 -> 3), the rest disjoint: smallest left endpoint first
    lo = np.array([5.0, 0.0, 9.0, 0.0])
    hi = lo + 1
    a = SoptRTreeIndex(lo, hi, [1.0, 2.0, 3.0, 2.0], [0, 1, 2, 3]).arrangement
    assert a.tolist() == [1, 3, 0, 2]
    # a chain through a touching pair ([5, 6] and [0, 5]) overrides the left endpoints
    a = SoptRTreeIndex([5.0, 0.0, 4.0], [6.0, 5.0, 4.5], [3.0, 2.0, 1.0], [0, 1, 2]).arrangement
    assert a.tolist() == [0, 1, 2]


@pytest.mark.parametrize("cls", INDEXES)
def test_extents_are_subtree_hulls(cls):
    rng = np.random.default_rng(9)
    for n, b in ((1, 2), (2, 2), (7, 2), (100, 3), (1000, 50), (2501, 50), (130, 5)):
        lo, hi, score, item = workload(rng, n, "mixed")
        idx = cls(lo, hi, score, item, b=b)
        t = idx.tree
        plo, phi = lo[idx.arrangement], hi[idx.arrangement]
        assert np.array_equal(t.lo, plo) and np.array_equal(t.item, item[idx.arrangement])
        assert t.node_cnt[-1] == n and t.node_cnt[0] == 1
        for d in range(t.height):
            span = b ** (t.height - d)                # rows under one node at depth d
            elo, ehi = idx.extents(d)
            assert len(elo) == -(-n // span)
            for j in range(len(elo)):
                assert elo[j] == plo[j * span:(j + 1) * span].min()
                assert ehi[j] == phi[j * span:(j + 1) * span].max()


def test_sopt_enters_at_most_2k_nodes_per_level():
    rng = np.random.default_rng(10)
    n = 20_000
    c = rng.random(n)
    h = rng.pareto(1.0, n) * 0.002                   # short intervals, plenty of holes
    lo, hi = c - h, c + h
    score = np.round(1 - np.minimum(h, 1), 2)
    item = rng.permutation(n).astype(np.int64)
    grid_lo, grid_hi, grid_score, grid_item = workload(rng, 3000, "grid")
    plain_nodes = sopt_nodes = 0
    for data, b in (((lo, hi, score, item), 50), ((lo, hi, score, item), 4),
                    ((grid_lo, grid_hi, grid_score, grid_item), 3)):
        sopt = SoptRTreeIndex(*data, b=b)
        plain = RTreeIndex(*data, b=b)
        for q in np.concatenate((rng.random(60), rng.integers(0, 16, 20).astype(float))):
            for k in (1, 3, 20):
                cur = sopt.open(q)
                cur.next(k)
                assert (cur.level_nodes <= 2 * k).all(), (b, q, k, cur.level_nodes)
                sopt_nodes += cur.counters[0]
                cur = plain.open(q)
                cur.next(k)
                plain_nodes += cur.counters[0]
    assert sopt_nodes < plain_nodes


# ----------------------------------------------------------------------------- the bit tree

@pytest.mark.parametrize("size", [1, 63, 64, 65, 4096, 4097, 300_000])
def test_bit_tree_next_prev(size):
    rng = np.random.default_rng(size)
    words, word_off = R._bits_new(size)
    present = np.zeros(size, bool)
    for _ in range(400):
        x = int(rng.integers(0, size))
        if rng.random() < 0.6:
            R._bits_set(words, word_off, x)
            present[x] = True
        elif present.any():
            x = int(rng.choice(np.flatnonzero(present)))
            R._bits_clear(words, word_off, x)
            present[x] = False
        y = int(rng.integers(0, size))
        on = np.flatnonzero(present)
        after, upto = on[on >= y], on[on <= y]
        assert R._bits_next(words, word_off, y) == (after[0] if len(after) else -1)
        assert R._bits_prev(words, word_off, y) == (upto[-1] if len(upto) else -1)
        assert R._bits_has(words, y) == present[y]

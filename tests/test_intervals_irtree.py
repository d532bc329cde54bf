"""IR-tree (paper §3.1), fully dynamic: equal to the 1-D oracle after every insert/delete call,
and its structure valid after every call. Oracle: ``sorted(stabbed, key=(-score, item))``."""
from __future__ import annotations

import math

import numpy as np
import pytest

from rankcast.kinds.matching.intervals import irtree as ir
from rankcast.kinds.matching.intervals.base import COUNTERS
from rankcast.kinds.matching.intervals.irtree import IRTreeIndex

HOLES = COUNTERS.index("holes")
BATCHES = (1, 2, 3, 5, 8, 13, 1000)


# ----------------------------------------------------------------------------- the oracle
class Model:
    """The intervals the index should hold, as parallel arrays."""

    def __init__(self):
        self.lo = np.zeros(0)
        self.hi = np.zeros(0)
        self.sc = np.zeros(0)
        self.it = np.zeros(0, np.int64)

    def insert(self, lo, hi, sc, it):
        self.lo = np.concatenate([self.lo, lo])
        self.hi = np.concatenate([self.hi, hi])
        self.sc = np.concatenate([self.sc, sc])
        self.it = np.concatenate([self.it, it])

    def delete(self, items):
        keep = ~np.isin(self.it, items)
        self.lo, self.hi, self.sc, self.it = (self.lo[keep], self.hi[keep], self.sc[keep],
                                              self.it[keep])

    def stabbed(self, q):
        m = (self.lo <= q) & (q <= self.hi)
        order = np.lexsort((self.it[m], -self.sc[m]))
        return self.it[m][order], self.sc[m][order]


def read_all(cursor, batches):
    """Everything a cursor yields, in batches cycling through ``batches``, plus a read past the
    end (which must be empty)."""
    items, scores = [], []
    t = 0
    while True:
        n = batches[t % len(batches)]
        t += 1
        i, s = cursor.next(n)
        assert len(i) == len(s) <= n
        items.append(i)
        scores.append(s)
        if len(i) < n:
            break
    i, s = cursor.next(3)
    assert len(i) == len(s) == 0
    return np.concatenate(items), np.concatenate(scores)


def query_points(idx, model, rng, limit=None):
    """Every endpoint, every node median, midpoints between endpoints, points outside."""
    ends = np.concatenate([model.lo, model.hi])
    ends = np.unique(ends[np.isfinite(ends)])
    meds = idx._nd_f[: idx._meta[ir.M_ND_HW], ir.MED]
    meds = meds[idx._nd_i[: idx._meta[ir.M_ND_HW], ir.SIZE] >= 0]
    pts = [ends, meds, (ends[1:] + ends[:-1]) / 2, [-1e9, 1e9, 0.0, 0.5]]
    if len(ends):
        pts.append([ends[0] - 1, ends[-1] + 1])
    pts = np.unique(np.concatenate([np.asarray(p, np.float64) for p in pts]))
    if limit is not None and len(pts) > limit:             # a sample, half of it medians
        meds = rng.permutation(meds)[: limit // 2]
        pts = np.concatenate([rng.choice(pts, limit - len(meds), replace=False), meds])
    return pts


def check_answers(idx, model, rng, limit=None):
    """Every query point: the cursor's sequence equals the oracle's; no holes (Lemma 3.1)."""
    for q in query_points(idx, model, rng, limit):
        want_i, want_s = model.stabbed(q)
        batches = BATCHES[int(rng.integers(len(BATCHES))):] + BATCHES
        cur = idx.open(q)
        got_i, got_s = read_all(cur, batches)
        assert np.array_equal(got_i, want_i), (q, got_i, want_i)
        assert np.array_equal(got_s, want_s), q
        assert cur.counters[HOLES] == 0


# ----------------------------------------------------------------------------- structure
def stair_key(idx, r, q, med):
    """((score, item) of staircase row r at q, as the cursor reads it; whether it is past the
    floor, where a staircase fresh from its node's intervals is exact)."""
    sf, sx, k = idx._sf, idx._sx, ir.K_ST
    sd = int(q > med)
    qq = q if sd == 0 else -q
    a = sum(int(sf[r, sd, j] <= qq) for j in range(1, k + 1))
    return (sf[r, sd, k + 1 + a], int(sx[r, sd, a])), a > 0 and STAIRS_EXACT[0]


STAIRS_EXACT = [False]        # set by the test of a fresh build: no update has touched a staircase


def stabbed_best(own, q):
    """(score, item) first in the total order among the intervals ``own`` holding q."""
    held = [(-x[2], x[3]) for x in own if x[0] <= q <= x[1]]
    s, it = min(held)
    return (-s, it)


def check_structure(idx, model):
    """Every invariant of the layout (module docstring of irtree): interval tree, per-node
    B+-tree (scored R-tree), weight balance, allocation bookkeeping, item directory."""
    meta, nd_f, nd_i, pg = idx._meta, idx._nd_f, idx._nd_i, idx._pg
    ef, ei, ec = idx._ef, idx._ei, idx._ec
    b = idx.b
    n = len(model.it)
    assert len(idx) == n == meta[ir.M_N]
    truth = {int(i): (l, h, s) for l, h, s, i in zip(model.lo, model.hi, model.sc, model.it)}
    owner = {}                                    # item -> node
    pool = np.zeros(len(ei), np.int8)             # pool rows owned by live pages
    pages = [0]
    nodes = [0]
    depth = [0]
    stairs = [0]

    def page(p, level, h, is_root):
        st, cap, cnt = pg[p]
        most = b if level == h - 1 else max(b, 3)
        assert cap >= 0 and 1 <= cnt <= cap <= most
        assert 1 <= st and st + cap <= meta[ir.M_E_HW]
        assert not pool[st - 1: st + cap].any(), "pool blocks overlap"
        pool[st - 1: st + cap] = 1
        assert ei[st - 1] == cnt and ec[st - 1] == p, "header row: entries and page id"
        pages[0] += 1
        if not is_root:
            assert cnt >= (most + 1) // 2
        rows = range(st, st + cnt)
        if level == h - 1:
            assert all(ec[e] == -1 for e in rows)
            return [(ef[e, 0], ef[e, 1], ef[e, 2], int(ei[e])) for e in rows]
        if is_root:
            assert cnt >= 2
        out = []
        for e in rows:
            c = int(ec[int(ec[e]) - 1])
            assert pg[c, ir.START] == ec[e], "the entry holds its child's block start"
            sub = page(c, level + 1, h, False)
            assert ef[e, 0] == min(x[0] for x in sub) and ef[e, 1] == max(x[1] for x in sub)
            assert (ef[e, 2], ei[e]) == (sub[0][2], sub[0][3]), "first key of the child"
            out += sub
        return out

    def node(v, left, right, d):
        """Check node v's subtree (medians of ancestors bound it: left < med < right)."""
        nodes[0] += 1
        depth[0] = max(depth[0], d)
        med = nd_f[v, ir.MED]
        assert (left is None or left < med) and (right is None or med < right), "median BST"
        h = nd_i[v, ir.HEIGHT]
        own = page(int(nd_i[v, ir.ROOT]), 0, h, True) if h else []
        assert (nd_i[v, ir.ROOT] < 0) == (h == 0) == (len(own) == 0)
        if h:                                     # the node's copies of its root page
            st = pg[int(nd_i[v, ir.ROOT]), ir.START]
            assert nd_i[v, ir.RST] == st, "root block start"
            assert (nd_f[v, ir.FKS], nd_i[v, ir.FKI]) == (ef[st, ir.SC], ei[st]), "root first key"
        assert nd_i[v, ir.COUNT] == len(own)
        if h >= 2:                                # >= 2 children per internal page
            half = (max(b, 3) + 1) // 2
            assert h <= 2 + math.log(len(own) / 2) / math.log(half) + 1e-9, "R-tree height"
        keys = [(-x[2], x[3]) for x in own]
        assert keys == sorted(keys) and len(set(keys)) == len(keys), "total order"
        for lo, hi, sc, it in own:
            assert lo <= med <= hi, "every interval of a node contains its median"
            assert left is None or lo > left, "interval in the subtree it belongs to"
            assert right is None or hi < right, "interval in the subtree it belongs to"
            assert truth[it] == (lo, hi, sc)
            assert it not in owner
            owner[it] = v
        if own:
            assert nd_f[v, ir.MINLO] == min(x[0] for x in own)
            assert nd_f[v, ir.MAXHI] == max(x[1] for x in own)
        r = int(nd_i[v, ir.STR])
        if r >= 0:                                # the staircase bounds the best key at every q
            stairs[0] += 1
            assert own and 0 <= r < meta[ir.M_ST_HW]
            for q in {med, *(x[0] for x in own), *(x[1] for x in own)}:
                got, exact = stair_key(idx, r, q, med)
                want = stabbed_best(own, q)
                assert got == want or ir.before(got[0], got[1], want[0], want[1]), "staircase bound"
                assert not exact or got == want, "staircase exact past its floor"
        size = len(own)
        for side, lb, rb in ((ir.LEFT, left, med), (ir.RIGHT, med, right)):
            c = nd_i[v, side]
            if c >= 0:
                size += node(int(c), lb, rb, d + 1)
        assert nd_i[v, ir.SIZE] == size >= 1, "subtree sizes; no empty subtree"
        for side in (ir.LEFT, ir.RIGHT):
            c = nd_i[v, side]
            if c >= 0:
                assert ir.ALPHA_DEN * nd_i[c, ir.SIZE] <= ir.ALPHA_NUM * size, "weight balance"
        return size

    root = meta[ir.M_ROOT]
    if root >= 0:
        assert node(int(root), None, None, 0) == n
    assert n == 0 or depth[0] <= math.log(n) / math.log(1 / ir.ALPHA) + 1e-9, "depth bound"
    assert set(owner) == set(truth)
    # allocation bookkeeping
    assert meta[ir.M_ND_HW] - meta[ir.M_ND_NFREE] == nodes[0]
    assert meta[ir.M_PG_HW] - meta[ir.M_PG_NFREE] == pages[0]
    assert meta[ir.M_E_LIVE] == pool.sum() and meta[ir.M_E_HW] <= len(ei)
    free, v = 0, meta[ir.M_ND_FREE]
    while v >= 0:
        assert nd_i[v, ir.SIZE] == -1
        free, v = free + 1, nd_i[v, ir.LEFT]
    assert free == meta[ir.M_ND_NFREE]
    free, p = 0, meta[ir.M_PG_FREE]
    while p >= 0:
        assert pg[p, ir.CAP] == -1
        free, p = free + 1, pg[p, ir.START]
    assert free == meta[ir.M_PG_NFREE]
    assert meta[ir.M_ST_HW] - meta[ir.M_ST_NFREE] == stairs[0] and meta[ir.M_ST_HW] <= len(idx._sx)
    free, r = 0, meta[ir.M_ST_FREE]
    while r >= 0:
        free, r = free + 1, idx._sx[r, 0, 0]
    assert free == meta[ir.M_ST_NFREE]
    # item directory: item -> (score, node)
    occ = np.flatnonzero(idx._dn >= 0)
    assert len(occ) == n and n <= ir._DIR_LOAD * len(idx._dk) + 1e-9 and len(idx._dk) >= 8
    for s in occ:
        it = int(idx._dk[s])
        assert idx._ds[s] == truth[it][2] and idx._dn[s] == owner[it]
        assert ir._dir_find(idx._dk, idx._dn, it) == s          # reachable from its home slot


def check(idx, model, rng, limit=None):
    check_structure(idx, model)
    check_answers(idx, model, rng, limit)


# ----------------------------------------------------------------------------- workloads
def make(rng, n, kind="mixed", first_item=None):
    """n intervals over a small domain: shared endpoints, score ties, duplicate intervals,
    degenerate [v, v], infinite endpoints. Items: first_item + 3 * (0 .. n-1), shuffled (by
    default from -n: negative ids too)."""
    lo = rng.integers(0, 25, n).astype(np.float64)
    hi = lo + rng.choice([0, 0, 1, 2, 3, 5, 8, 20], n)
    sc = rng.integers(0, 4, n).astype(np.float64)
    if kind in ("mixed", "inf") and n:
        lo[rng.random(n) < 0.1] = -np.inf
        hi[rng.random(n) < 0.1] = np.inf
    if kind == "inf" and n:
        lo[rng.random(n) < 0.3] = -np.inf
        hi[rng.random(n) < 0.3] = np.inf
        far = rng.random(n) < 0.1                   # [inf, inf] and [-inf, -inf]
        lo[far] = hi[far] = np.where(rng.random(far.sum()) < 0.5, np.inf, -np.inf)
    if kind == "mixed" and n > 4:                   # exact duplicates of (lo, hi, score)
        src = rng.integers(0, n, n // 4)
        dst = rng.integers(0, n, n // 4)
        lo[dst], hi[dst], sc[dst] = lo[src], hi[src], sc[src]
    if kind == "points":
        hi = lo.copy()
        sc = rng.random(n).round(1)
    if kind == "disjoint":                           # many short intervals: a deep tree
        lo = rng.permutation(n).astype(np.float64) * 3
        hi = lo + rng.integers(0, 2, n)
    first_item = -n if first_item is None else first_item
    it = first_item + rng.permutation(n).astype(np.int64) * 3
    return lo, hi, sc, it


# ----------------------------------------------------------------------------- tests
@pytest.mark.parametrize("b", [2, 3, 50])
@pytest.mark.parametrize("n", [0, 1, 2, 9, 120])
@pytest.mark.parametrize("kind", ["mixed", "inf", "points", "disjoint"])
def test_build_equals_oracle(b, n, kind):
    """A fresh build: every query point (endpoints, medians, between, outside) read in batches
    of several sizes equals the oracle."""
    rng = np.random.default_rng(1000 * b + 10 * n + len(kind))
    lo, hi, sc, it = make(rng, n, kind)
    idx = IRTreeIndex(lo, hi, sc, it, b=b)
    model = Model()
    model.insert(lo, hi, sc, it)
    check(idx, model, rng)


@pytest.mark.parametrize("b", [2, 3, 50])
def test_churn_equals_oracle_after_every_call(b):
    """Inserts and deletes interleaved in batches of several sizes, down to empty and refilled;
    equal to the oracle and structurally valid after every call."""
    rng = np.random.default_rng(7 + b)
    lo, hi, sc, it = make(rng, 60)
    idx = IRTreeIndex(lo, hi, sc, it, b=b)
    model = Model()
    model.insert(lo, hi, sc, it)
    check(idx, model, rng)
    next_item = 10_000
    for step in range(45):
        if step in (20, 21):                       # everything out, in two calls, then refill
            batch = rng.permutation(model.it)
            batch = batch[: len(batch) // 2] if step == 20 else batch
            idx.delete(batch)
            model.delete(batch)
        elif rng.random() < 0.55 or len(model.it) == 0:
            m = int(rng.choice([1, 2, 5, 17, 40]))
            kind = ["mixed", "inf", "points", "disjoint"][step % 4]
            lo, hi, sc, it = make(rng, m, kind, first_item=next_item)
            next_item += 3 * m
            idx.insert(lo, hi, sc, it)
            model.insert(lo, hi, sc, it)
        else:
            m = min(len(model.it), int(rng.choice([1, 3, 10, 30])))
            batch = rng.choice(model.it, m, replace=False)
            idx.delete(batch)
            model.delete(batch)
        check(idx, model, rng, limit=60)
    assert len(idx) == len(model.it)


def test_sorted_inserts_rebalance():
    """Intervals arriving left to right fall off the tree one after another: the balance
    policy rebuilds subtrees and the depth stays logarithmic."""
    rng = np.random.default_rng(3)
    idx = IRTreeIndex([], [], [], [], b=3)
    model = Model()
    for k in range(0, 200, 5):
        lo = np.arange(k, k + 5, dtype=np.float64) * 2
        hi = lo + 1
        sc = rng.integers(0, 3, 5).astype(np.float64)
        it = np.arange(k, k + 5, dtype=np.int64)
        idx.insert(lo, hi, sc, it)
        model.insert(lo, hi, sc, it)
        check_structure(idx, model)
    assert idx.stats()["rebuilds"] > 0
    check_answers(idx, model, rng)
    for k in range(0, 200, 7):                      # and out again, left to right
        batch = np.arange(k, min(k + 7, 200), dtype=np.int64)
        idx.delete(batch)
        model.delete(batch)
        check(idx, model, rng, limit=30)
    assert len(idx) == 0


@pytest.mark.parametrize("b", [2, 3])
def test_one_node_front_and_back_inserts(b):
    """All intervals in one node, each new one first (or last) in the total order: pages fill
    up instead of chaining, the R-tree height stays logarithmic."""
    rng = np.random.default_rng(b)
    idx = IRTreeIndex([-1.0], [1.0], [0.0], [0], b=b)
    model = Model()
    model.insert([-1.0], [1.0], [0.0], [0])
    for t in range(1, 300):
        sc = float(t) if t % 50 < 40 else -0.0          # ascending scores, then ties at the end
        lo, hi = -float(rng.integers(1, 9)), float(rng.integers(1, 9))
        idx.insert([lo], [hi], [abs(sc)], [t])
        model.insert([lo], [hi], [abs(sc)], [t])
        if t % 25 == 0:
            check(idx, model, rng, limit=20)
    for t in range(0, 300, 3):                           # deletes from the front
        batch = np.arange(299 - t, 299 - t - 3, -1)
        idx.delete(batch[batch >= 0])
        model.delete(batch[batch >= 0])
        if t % 30 == 0:
            check(idx, model, rng, limit=20)


@pytest.mark.parametrize("b", [2, 4, 8])
def test_child_links_survive_every_compaction(b):
    """Internal entries hold their child's block start and every page's header row its entry
    count and id (copies of the page table): checked right after each single insert or delete
    that compacted the pool, and every few updates (splits, merges, even-outs)."""
    rng = np.random.default_rng(11)
    lo, hi, sc, it = make(rng, 400, "mixed")
    idx = IRTreeIndex(lo[:1], hi[:1], sc[:1], it[:1], b=b)
    model = Model()
    model.insert(lo[:1], hi[:1], sc[:1], it[:1])
    seen = 0
    order = rng.permutation(it[1:])[:250]
    steps = [(INS, t) for t in range(1, 400)] + [(DEL, x) for x in order]
    for t, (op, x) in enumerate(steps):
        if op is INS:
            idx.insert(lo[x: x + 1], hi[x: x + 1], sc[x: x + 1], it[x: x + 1])
            model.insert(lo[x: x + 1], hi[x: x + 1], sc[x: x + 1], it[x: x + 1])
        else:
            idx.delete(np.array([x]))
            model.delete(np.array([x]))
        c = idx.stats()["compactions"]
        if c > seen or t % 23 == 0:
            seen = max(seen, c)
            check_structure(idx, model)
    assert seen > 0
    check(idx, model, rng, limit=20)


INS, DEL = "insert", "delete"


def test_one_at_a_time_then_shrink():
    """Single-interval calls (root leaves grow by doubling, the pool compacts), then deletes
    down to under a quarter (full rebuild into exact arrays) and to empty (arrays dropped)."""
    rng = np.random.default_rng(11)
    lo, hi, sc, it = make(rng, 400, "mixed")
    idx = IRTreeIndex(lo[:1], hi[:1], sc[:1], it[:1], b=4)
    model = Model()
    model.insert(lo[:1], hi[:1], sc[:1], it[:1])
    compactions = 0
    for t in range(1, 400):
        idx.insert(lo[t: t + 1], hi[t: t + 1], sc[t: t + 1], it[t: t + 1])
        model.insert(lo[t: t + 1], hi[t: t + 1], sc[t: t + 1], it[t: t + 1])
        compactions = max(compactions, idx.stats()["compactions"])
        if t % 40 == 0:
            check(idx, model, rng, limit=40)
    assert compactions > 0
    full = idx.nbytes()
    order = rng.permutation(it)
    for t in range(0, 400, 1 if len(model.it) < 30 else 25):
        batch = order[t: t + (1 if len(model.it) < 30 else 25)]
        if not len(batch):
            break
        idx.delete(batch)
        model.delete(batch)
        check(idx, model, rng, limit=20)
    idx.delete(model.it)
    model.delete(model.it)
    check(idx, model, rng)
    assert idx.nbytes() < full / 10
    idx.insert(lo[:50], hi[:50], sc[:50], it[:50])
    model.insert(lo[:50], hi[:50], sc[:50], it[:50])
    check(idx, model, rng)


def trim(idx, spare):
    """Cut every table to its high-water mark (spare=False), or to the room one insert needs
    (spare=True: a rebuild after it finds no spare row)."""
    meta, b = idx._meta, idx.b
    h = meta[ir.M_HMAX]
    nodes, pages, rows = (1, h + 2, (h + 2) * (max(b, 3) + 1)) if spare else (0, 0, 0)
    nodes += meta[ir.M_ND_HW]
    pages += meta[ir.M_PG_HW]
    rows += meta[ir.M_E_HW]
    idx._nd_f = idx._nd_f[:nodes].copy()
    idx._nd_i = idx._nd_i[:nodes].copy()
    idx._pg = idx._pg[:pages].copy()
    idx._ef = idx._ef[:rows].copy()
    idx._ei = idx._ei[:rows].copy()
    idx._ec = idx._ec[:rows].copy()
    stairs = meta[ir.M_ST_HW] + (1 if spare else 0)
    idx._sf = idx._sf[:stairs].copy()
    idx._sx = idx._sx[:stairs].copy()


@pytest.mark.parametrize("b", [2, 5])
def test_growth_protocol(b):
    """Kernels stop where a table is full (before an update or a rebuild) and resume after the
    Python layer grows it: every call starts from tables with no spare row."""
    rng = np.random.default_rng(21 + b)
    lo, hi, sc, it = make(rng, 40, "disjoint")
    idx = IRTreeIndex(lo, hi, sc, it, b=b)
    model = Model()
    model.insert(lo, hi, sc, it)
    next_item = 5000
    for step in range(30):
        if len(idx._nd_i) >= idx._meta[ir.M_ND_HW] + 1:
            trim(idx, spare=step % 4 == 1)
        if step % 3 == 2:
            batch = rng.choice(model.it, min(len(model.it), 6), replace=False)
            idx.delete(batch)
            model.delete(batch)
        else:
            lo, hi, sc, it = make(rng, 8, ["disjoint", "mixed"][step % 2], first_item=next_item)
            lo, hi = lo + 100 + 10 * step, hi + 100 + 10 * step   # to the right: rebuilds
            next_item += 3 * 8
            idx.insert(lo, hi, sc, it)
            model.insert(lo, hi, sc, it)
        check(idx, model, rng, limit=30)
    assert idx.stats()["rebuilds"] > 0


def test_intervals_falling_off_the_tree():
    """New leaf nodes: median lo, or hi when lo = -inf, or 0 for (-inf, inf); [inf, inf] and
    [-inf, -inf] (never stabbed); empty calls."""
    rng = np.random.default_rng(4)
    idx = IRTreeIndex([10.0], [10.0], [1.0], [1], b=2)
    model = Model()
    model.insert([10.0], [10.0], [1.0], [1])
    for lo, hi, item in ((-np.inf, 3.0, 2), (12.0, np.inf, 3), (-np.inf, np.inf, 4),
                         (-np.inf, -5.0, 5), (20.0, 20.0, 6), (np.inf, np.inf, 8),
                         (-np.inf, -np.inf, 9), (30.0, 30.0, 10), (-30.0, -30.0, 11)):
        idx.insert([lo], [hi], [2.0], [item])
        model.insert([lo], [hi], [2.0], [item])
        check(idx, model, rng)
    idx.insert([], [], [], [])
    idx.delete([])
    check(idx, model, rng)
    empty = IRTreeIndex([], [], [], [])
    empty.insert([-np.inf], [np.inf], [0.0], [7])
    assert empty._nd_f[empty._meta[ir.M_ROOT], ir.MED] == 0.0
    assert empty.open(-1e300).next(5)[0].tolist() == [7]


def test_errors_leave_the_index_unchanged():
    rng = np.random.default_rng(5)
    lo, hi, sc, it = make(rng, 30)
    idx = IRTreeIndex(lo, hi, sc, it, b=3)
    model = Model()
    model.insert(lo, hi, sc, it)
    with pytest.raises(ValueError, match=str(it[4])):
        idx.insert([0.0, 1.0], [1.0, 2.0], [1.0, 1.0], [999_999, it[4]])
    with pytest.raises(ValueError, match="999999"):
        idx.insert([0.0, 1.0], [1.0, 2.0], [1.0, 1.0], [999_999, 999_999])
    with pytest.raises(ValueError):
        idx.insert([2.0], [1.0], [1.0], [999_998])          # lo > hi
    with pytest.raises(ValueError):
        IRTreeIndex([0.0, 1.0], [1.0, 2.0], [1.0, 1.0], [3, 3])
    with pytest.raises(KeyError, match="123456"):
        idx.delete([it[0], 123456])
    with pytest.raises(KeyError, match=str(it[1])):
        idx.delete([it[1], it[1]])
    with pytest.raises(ValueError):
        IRTreeIndex([], [], [], [], b=1)
    check(idx, model, rng)


def test_cursor_contract():
    rng = np.random.default_rng(9)
    lo, hi, sc, it = make(rng, 40)
    idx = IRTreeIndex(lo, hi, sc, it, b=3)
    cur = idx.open(10.0)
    assert len(cur.next(0)[0]) == 0
    first = cur.next(1)
    assert len(first[0]) == 1
    idx.insert([0.0], [1.0], [1.0], [777_777])
    with pytest.raises(RuntimeError):
        cur.next(5)
    empty = IRTreeIndex([], [], [], [])
    assert len(empty) == 0 and empty.open(0.0).next(10)[0].shape == (0,)
    assert IRTreeIndex.name == "ir-tree" and IRTreeIndex.dynamic
    assert idx.nbytes() > 0


def test_counters_count_work():
    """Counters: the path and the pages entered, the leaf entries scanned, never a hole."""
    rng = np.random.default_rng(2)
    lo, hi, sc, it = make(rng, 500, "mixed")
    idx = IRTreeIndex(lo, hi, sc, it, b=4)
    cur = idx.open(12.0)
    cur.next(5)
    nodes, holes, entries = cur.counters
    assert nodes >= 2 and entries >= 5 and holes == 0
    read_all(cur, (7,))
    assert cur.counters[HOLES] == 0 and cur.counters[COUNTERS.index("entries")] > entries


def best_first_work(idx, model, q, k):
    """(nodes, entries) counters of a best-first search over the pages of path(q) that has
    reported the first ``k`` stabbed intervals at q: the I-tree nodes of the walk, the root page
    of every path node whose extent holds q, then in each such node's R-tree (left-first) every
    page whose parent entry holds q and every leaf entry, up to the first entry whose key comes
    after the k-th result (nothing stops the search when fewer than k are stabbed)."""
    nd_f, nd_i, pg, ef, ei, ec = idx._nd_f, idx._nd_i, idx._pg, idx._ef, idx._ei, idx._ec
    want_i, want_s = model.stabbed(q)
    last = (-want_s[k - 1], int(want_i[k - 1])) if len(want_i) >= k else None
    work = [0, 0]

    def visit(p, level, h):
        """False when the search stops inside page p."""
        st, _, cnt = pg[p]
        for e in range(st, st + cnt):
            if last is not None and (-ef[e, ir.SC], int(ei[e])) > last:
                return False
            if level == h - 1:
                work[1] += 1
            elif ef[e, ir.LO] <= q <= ef[e, ir.HI]:
                work[0] += 1
                if not visit(int(ec[int(ec[e]) - 1]), level + 1, h):
                    return False
        return True

    v = idx._meta[ir.M_ROOT]
    while v >= 0:
        work[0] += 1
        if nd_i[v, ir.COUNT] > 0 and nd_f[v, ir.MINLO] <= q <= nd_f[v, ir.MAXHI]:
            work[0] += 1
            visit(int(nd_i[v, ir.ROOT]), 0, int(nd_i[v, ir.HEIGHT]))
        med = nd_f[v, ir.MED]
        v = nd_i[v, ir.LEFT] if q < med else nd_i[v, ir.RIGHT] if q > med else -1
    return tuple(work)


@pytest.mark.parametrize("b", [2, 4, 50])
def test_best_first_reads_only_what_the_answer_needs(b):
    """The cursor is a best-first search over the pages of path(q): after reporting k rows (in
    one call or several) it has entered every page whose key comes at or before the k-th row's
    and, past them, at most one leaf a slot (a slot merged with another goes on to its next leaf
    while rows are still to be written, before that leaf's first key is compared), and looked
    at every leaf entry that does; past it, a node's scan only finishes the leaf it is in (it
    stops at a stabbed entry), on a fresh build and after churn."""
    rng = np.random.default_rng(50 + b)
    idx, model = IRTreeIndex([], [], [], [], b=b), Model()
    for step in range(3):
        lo, hi, sc, it = make(rng, 400, "mixed", first_item=10_000 * step)
        idx.insert(lo, hi, sc, it)
        model.insert(lo, hi, sc, it)
        gone = rng.choice(model.it, 100, replace=False)
        idx.delete(gone)
        model.delete(gone)
        pts = query_points(idx, model, rng)
        for q in rng.choice(pts, min(40, len(pts)), replace=False):
            cur = idx.open(q)
            slots = len(cur._state[0])       # path nodes whose extent holds q
            read = 0
            for k in (1, 2, 5, 20, 100, 10 ** 6):
                read += len(cur.next(k - read)[0])
                nodes, holes, entries = cur.counters
                want_nodes, want_entries = best_first_work(idx, model, q, k)
                assert want_nodes <= nodes <= want_nodes + slots and holes == 0, (q, k)
                assert want_entries <= entries <= want_entries + slots * (b - 1), (q, k)


@pytest.mark.parametrize("b", [2, 4, 50])
@pytest.mark.parametrize("kernel", ["_cursors", "_cursors_deep"])
def test_both_kernels_equal_the_oracle_in_any_batches(b, kernel):
    """Each cursor kernel, whatever the batch sizes (resuming mid-page, the deep one merging
    two leaves across calls), yields the oracle's sequence, ties included, and never a hole;
    read_many picks the deep kernel above DEEP rows a query and gives the same rows."""
    rng = np.random.default_rng(70 + b)
    idx, model = IRTreeIndex([], [], [], [], b=b), Model()
    for step in range(2):
        lo, hi, sc, it = make(rng, 1500, "mixed", first_item=10_000 * step)
        sc = rng.integers(0, 3, len(sc)).astype(np.float64)       # many ties
        idx.insert(lo, hi, sc, it)
        model.insert(lo, hi, sc, it)
        gone = rng.choice(model.it, 200, replace=False)
        idx.delete(gone)
        model.delete(gone)
    run = getattr(ir, kernel)
    tree = (idx._meta[ir.M_ROOT], idx._nd_f, idx._nd_i, idx._pg, idx._ef, idx._ei, idx._ec, idx._sf, idx._sx)
    pts = query_points(idx, model, rng)
    for q in rng.choice(pts, min(60, len(pts)), replace=False):
        want_i, want_s = model.stabbed(q)
        state = ir._state(*ir._path_shape(q, tree[0], idx._nd_f, idx._nd_i))
        qa = np.array([q])
        run(qa, np.zeros(1, np.int64), True, *tree, *state, np.empty(0, np.int64), np.empty(0), np.zeros(2, np.int64))
        got_i, got_s = [], []
        for t in range(10 ** 6):
            k = (1, 3, 7, 2, 40, 13)[t % 6]
            oi, os_ = np.empty(k, np.int64), np.empty(k)
            c = run(qa, np.array([k]), False, *tree, *state, oi, os_, np.zeros(2, np.int64))
            got_i.append(oi[:c])
            got_s.append(os_[:c])
            if c < k:
                break
        assert np.array_equal(np.concatenate(got_i), want_i), q
        assert np.array_equal(np.concatenate(got_s), want_s), q
        assert state[-1][HOLES] == 0
    qs = rng.choice(pts, 30)
    deep_off, deep_i, deep_s = idx.read_many(qs, ir.DEEP + 1)
    for x, q in enumerate(qs):
        want_i, want_s = model.stabbed(q)
        assert np.array_equal(deep_i[deep_off[x]:deep_off[x + 1]], want_i[: ir.DEEP + 1])
        assert np.array_equal(deep_s[deep_off[x]:deep_off[x + 1]], want_s[: ir.DEEP + 1])
    assert ir._kernel(ir.DEEP) is ir._cursors and ir._kernel(ir.DEEP + 1) is ir._cursors_deep


@pytest.mark.parametrize("b", [2, 5])
def test_staircases_exact_when_built_and_bounds_after_updates(b):
    """Nodes of at least ST_MIN * b intervals keep a staircase: exact past its floor after a
    build and after deletes (those of its records rescan the node); after inserts too (records
    that enter, entries they replace) a bound of the node's best key at every query point; the
    answers equal the oracle's after every call."""
    rng = np.random.default_rng(90 + b)
    lo, hi, sc, it = make(rng, 3000, "mixed")
    sc = np.round(sc, 1)                                          # ties
    idx = IRTreeIndex(lo, hi, sc, it, b=b)
    model = Model()
    model.insert(lo, hi, sc, it)
    assert idx._meta[ir.M_ST_HW] - idx._meta[ir.M_ST_NFREE] >= 3
    STAIRS_EXACT[0] = True
    try:
        check_structure(idx, model)
    finally:
        STAIRS_EXACT[0] = False
    for step in range(6):
        held = {int(x) for x in idx._sx[: idx._meta[ir.M_ST_HW]].reshape(-1)} & set(model.it.tolist())
        gone = np.array(sorted(held)[: 40], np.int64)             # staircase records
        idx.delete(gone)
        model.delete(gone)
        check(idx, model, rng, limit=40)
        if step == 0:                                             # deletes alone keep them exact
            STAIRS_EXACT[0] = True
            try:
                check_structure(idx, model)
            finally:
                STAIRS_EXACT[0] = False
        lo, hi, sc, it = make(rng, 400, "mixed", first_item=100_000 * (step + 1))
        sc = np.round(sc * 1.2, 1)                                # some above every kept score
        idx.insert(lo, hi, sc, it)
        model.insert(lo, hi, sc, it)
        check(idx, model, rng, limit=40)

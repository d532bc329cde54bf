"""Baselines: IPT and CIQ return exactly the pairs with score >= theta; the brute-force core
keeps exact top-k lists. Oracle: enumerate every (message, subscription) pair."""
from __future__ import annotations

import numpy as np
import pytest

from rankcast.baselines import CIQ, IPT, BruteForceCore
from rankcast.baselines.ciq import DEFAULT_DEPTH
from rankcast.baselines.sparse import SparseCore
from rankcast.kinds.spatial.columns import MessageBatch, SubscriptionBatch
from rankcast.config import EngineConfig
from rankcast.kinds.spatial.scoring import NO_MATCH, score_py
from rankcast.kinds.spatial.subtable import SubTable

BOUNDS = (-10.0, -5.0, 30.0, 15.0)
CFG = EngineConfig(bounds=BOUNDS, window=50)


# ----------------------------------------------------------------------------- workloads
def _rows(rng, n, n_terms, max_len, zipf):
    off = np.zeros(n + 1, np.int64)
    tids, ws = [], []
    for i in range(n):
        m = int(rng.integers(0 if zipf == "msg" else 1, max_len + 1))
        if zipf:
            pool = np.minimum(rng.zipf(1.3, size=4 * m + 4) - 1, n_terms - 1)
            t = np.unique(pool)[:m]
        else:
            t = np.sort(rng.choice(n_terms, size=m, replace=False))
        w = rng.random(len(t)) + 0.05
        if rng.random() < 0.2:
            w[:] = 1.0                                     # equal weights: exact ties
        w = w / np.sqrt((w * w).sum()) if len(w) else w
        tids.append(t.astype(np.int64))
        ws.append(w)
        off[i + 1] = off[i] + len(t)
    cat = lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt)
    return off, cat(tids, np.int64), cat(ws, np.float64)


def _points(rng, n, depth=DEFAULT_DEPTH):
    """Uniform points, with some on the space boundary and on Quadtree cell boundaries."""
    xmin, ymin, xmax, ymax = BOUNDS
    x = rng.uniform(xmin, xmax, n)
    y = rng.uniform(ymin, ymax, n)
    side = 2 ** int(rng.integers(1, depth + 1))
    edge = rng.random(n) < 0.3
    x[edge] = xmin + rng.integers(0, side + 1, edge.sum()) * (xmax - xmin) / side
    edge = rng.random(n) < 0.3
    y[edge] = ymin + rng.integers(0, side + 1, edge.sum()) * (ymax - ymin) / side
    corner = rng.random(n) < 0.05
    x[corner] = xmax
    y[corner] = ymin
    clump = rng.random(n) < 0.2                            # coincident points
    x[clump] = 1.25
    y[clump] = 2.5
    return x, y


def make_subs(rng, n, n_terms=30, ids_from=0):
    off, tids, ws = _rows(rng, n, n_terms, 5, zipf=rng.random() < 0.5)
    x, y = _points(rng, n)
    alpha = rng.random(n)
    pick = rng.random(n)
    alpha[pick < 0.15] = 0.0
    alpha[(pick >= 0.15) & (pick < 0.3)] = 1.0
    alpha[(pick >= 0.3) & (pick < 0.35)] = 1.0 - 1e-12
    alpha[(pick >= 0.35) & (pick < 0.4)] = 1e-12
    k = rng.integers(1, 6, n)
    return SubscriptionBatch(np.arange(ids_from, ids_from + n, dtype=np.int64), x, y, k, alpha,
                             off, tids, ws)


def make_msgs(rng, n, n_terms=30, ids_from=0):
    off, tids, ws = _rows(rng, n, n_terms, 8, zipf="msg")
    x, y = _points(rng, n)
    if n > 3:                                              # duplicates: equal scores
        dup = rng.integers(0, n, 3)
        for d in dup:
            j = int(rng.integers(0, n))
            x[j], y[j] = x[d], y[d]
    return MessageBatch(np.arange(ids_from, ids_from + n, dtype=np.int64), x, y,
                        np.full(n, np.nan), off, tids, ws)


def all_scores(subs: SubTable, msgs: MessageBatch) -> np.ndarray:
    """Score of every (message, slot) pair; NO_MATCH where they share no term."""
    out = np.full((len(msgs), len(subs.alive)), NO_MATCH)
    for s in subs.live_slots().tolist():
        st, sw = subs.row(s)
        for i in range(len(msgs)):
            mt, mw = msgs.row_terms(i)
            out[i, s] = score_py(subs.x[s], subs.y[s], subs.alpha[s], st, sw, msgs.x[i],
                                 msgs.y[i], mt, mw, CFG.max_dist)
    return out


def expected_pairs(subs: SubTable, scores: np.ndarray):
    live = np.zeros(scores.shape[1], bool)
    live[subs.live_slots()] = True
    ok = (scores != NO_MATCH) & (scores >= subs.theta[None, : scores.shape[1]]) & live[None, :]
    mi, sl = np.nonzero(ok)
    return mi, sl, scores[mi, sl]


def set_thetas(rng, subs: SubTable, scores: np.ndarray):
    """Thetas: 0, exactly some pair's score (ties with '>='), random, or above everything."""
    for s in subs.live_slots().tolist():
        col = scores[:, s]
        col = col[col != NO_MATCH]
        r = rng.random()
        if r < 0.2:
            subs.theta[s] = 0.0
        elif r < 0.7 and len(col):
            subs.theta[s] = col[rng.integers(0, len(col))]
        elif r < 0.9:
            subs.theta[s] = rng.random()
        else:
            subs.theta[s] = 1.0


def check(dis, subs, msgs, scores):
    mi, sl, sc = dis.match(msgs)
    emi, esl, esc = expected_pairs(subs, scores)
    assert np.all(np.diff(mi) >= 0), "not sorted by message"
    got = sorted(zip(mi.tolist(), sl.tolist(), sc.tolist()))
    exp = sorted(zip(emi.tolist(), esl.tolist(), esc.tolist()))
    assert got == exp


DISSEMINATORS = [("IPT", lambda subs: IPT(subs, CFG)),
                 ("CIQ", lambda subs: CIQ(subs, CFG)),
                 ("CIQ-depth2", lambda subs: CIQ(subs, CFG, depth=2))]


@pytest.mark.parametrize("name,make", DISSEMINATORS, ids=[d[0] for d in DISSEMINATORS])
@pytest.mark.parametrize("seed", range(6))
def test_match_is_exact(name, make, seed):
    rng = np.random.default_rng(seed)
    subs = SubTable()
    dis = make(subs)
    dis.add(subs.add(make_subs(rng, 120)))
    msgs = make_msgs(rng, 60)
    scores = all_scores(subs, msgs)
    set_thetas(rng, subs, scores)
    dis.thresholds_changed(subs.live_slots())
    check(dis, subs, msgs, scores)
    assert dis.stats()["verified"] >= len(expected_pairs(subs, scores)[0])


@pytest.mark.parametrize("name,make", DISSEMINATORS, ids=[d[0] for d in DISSEMINATORS])
def test_match_after_churn_and_threshold_changes(name, make):
    """Removals (slots reused by new subscriptions) and thresholds moving up and down."""
    rng = np.random.default_rng(42)
    subs = SubTable()
    dis = make(subs)
    dis.add(subs.add(make_subs(rng, 80)))
    next_id = 80
    for step in range(6):
        msgs = make_msgs(rng, 40, ids_from=1000 * step)
        scores = all_scores(subs, msgs)
        set_thetas(rng, subs, scores)
        dis.thresholds_changed(subs.live_slots())
        check(dis, subs, msgs, scores)
        # half the thresholds change again, then only those are announced
        changed = subs.live_slots()[rng.random(len(subs.live_slots())) < 0.5]
        subs.theta[changed] = np.where(rng.random(len(changed)) < 0.5, 0.0,
                                       subs.theta[changed] * rng.random(len(changed)))
        dis.thresholds_changed(changed)
        check(dis, subs, msgs, scores)
        live = subs.live_slots()
        gone = live[rng.random(len(live)) < 0.25]
        dis.remove(gone)
        subs.remove(gone)
        new = make_subs(rng, 25, ids_from=next_id)
        next_id += 25
        dis.add(subs.add(new))
        scores = all_scores(subs, msgs)
        set_thetas(rng, subs, scores)
        dis.thresholds_changed(subs.live_slots())
        check(dis, subs, msgs, scores)


@pytest.mark.parametrize("name,make", DISSEMINATORS, ids=[d[0] for d in DISSEMINATORS])
def test_match_edge_cases(name, make):
    """Messages without terms or with terms no subscription has; an empty table."""
    rng = np.random.default_rng(7)
    subs = SubTable()
    dis = make(subs)
    msgs = make_msgs(rng, 10)
    mi, sl, sc = dis.match(msgs)
    assert len(mi) == len(sl) == len(sc) == 0
    dis.add(subs.add(make_subs(rng, 30, n_terms=10)))
    empty = MessageBatch(np.array([1, 2]), np.array([0.0, 1.0]), np.array([0.0, 1.0]),
                         np.full(2, np.nan), np.zeros(3, np.int64), np.zeros(0, np.int64),
                         np.zeros(0))
    assert len(dis.match(empty)[0]) == 0
    foreign = MessageBatch(np.array([3]), np.array([0.0]), np.array([0.0]), np.full(1, np.nan),
                           np.array([0, 2]), np.array([500, 900]), np.array([0.6, 0.8]))
    assert len(dis.match(foreign)[0]) == 0
    # theta 0 for every subscription: every pair sharing a term is a result
    subs.theta[:] = 0.0
    dis.thresholds_changed(subs.live_slots())
    msgs = make_msgs(rng, 30, n_terms=10)
    scores = all_scores(subs, msgs)
    check(dis, subs, msgs, scores)
    assert len(dis.match(msgs)[0]) == int((scores != NO_MATCH).sum())


def test_ipt_prunes_something():
    """With high thresholds the bounds must skip postings, not verify everything."""
    rng = np.random.default_rng(3)
    subs = SubTable()
    ipt, ciq = IPT(subs, CFG), CIQ(subs, CFG)
    slots = subs.add(make_subs(rng, 300))
    ipt.add(slots)
    ciq.add(slots)
    subs.theta[slots] = 0.97
    ciq.thresholds_changed(slots)
    msgs = make_msgs(rng, 100)
    sharing = int((all_scores(subs, msgs) != NO_MATCH).sum())
    ipt.match(msgs)
    ciq.match(msgs)
    assert ipt.stats()["verified"] < sharing
    assert ciq.stats()["verified"] < sharing


# ----------------------------------------------------------------------------- brute core
def oracle_topk(sub_rows, window, max_dist):
    """Top-k of each subscription over ``window`` = list of (seq, id, x, y, terms, weights)."""
    out = {}
    for sid, (x, y, k, alpha, st, sw) in sub_rows.items():
        cands = []
        for seq, mid, mx, my, mt, mw in window:
            sc = score_py(x, y, alpha, st, sw, mx, my, mt, mw, max_dist)
            if sc != NO_MATCH:
                cands.append((sc, seq, mid))
        cands.sort(key=lambda c: (-c[0], -c[1]))
        out[sid] = [(mid, sc) for sc, _seq, mid in cands[:k]]
    return out


@pytest.mark.parametrize("seed", range(4))
def test_brute_core_is_exact(seed):
    """Random stream through the core's own interface: after each batch every list equals
    the oracle, and take_updates reports exactly the lists that changed."""
    rng = np.random.default_rng(100 + seed)
    W = int(rng.integers(5, 40))
    cfg = EngineConfig(bounds=BOUNDS, window=W)
    core = BruteForceCore(cfg)
    sub_rows: dict[int, tuple] = {}
    window: list[tuple] = []
    reported: dict[int, list] = {}
    seq = 0
    next_sub = 0
    next_msg = 0

    def add_subs(n):
        nonlocal next_sub
        b = make_subs(rng, n, n_terms=12, ids_from=next_sub)
        next_sub += n
        core.add(b)
        for i in range(n):
            st, sw = b.row_terms(i)
            sub_rows[int(b.ids[i])] = (b.x[i], b.y[i], int(b.k[i]), b.alpha[i], st, sw)
            reported[int(b.ids[i])] = []

    def take():
        sids, off, ids, scores = core.take_updates()
        got = {int(s): list(zip(ids[off[i]:off[i + 1]].tolist(), scores[off[i]:off[i + 1]].tolist()))
               for i, s in enumerate(sids.tolist())}
        exp = oracle_topk(sub_rows, window, cfg.max_dist)
        changed = {s for s in sub_rows if [m for m, _ in exp[s]] != [m for m, _ in reported[s]]}
        assert set(got) == changed
        for s, lst in got.items():
            assert lst == exp[s]
            reported[s] = lst
        for s in sub_rows:
            assert core.topk(s) == exp[s]

    add_subs(15)
    take()
    for step in range(12):
        n = int(rng.integers(1, 2 * W))                    # sometimes more than the window
        b = make_msgs(rng, n, n_terms=12, ids_from=next_msg)
        next_msg += n
        seqs = np.arange(seq + 1, seq + n + 1, dtype=np.int64)
        seq += n
        core.process(b, seqs, seqs - W)
        for i in range(n):
            mt, mw = b.row_terms(i)
            window.append((int(seqs[i]), int(b.ids[i]), b.x[i], b.y[i], mt, mw))
        window[:] = [m for m in window if m[0] > seq - W]
        take()
        if step % 3 == 1:
            gone = [s for s in sub_rows if rng.random() < 0.3]
            core.remove(np.array(gone, np.int64))
            for s in gone:
                del sub_rows[s]
                del reported[s]
            add_subs(int(rng.integers(1, 8)))
            take()
    st = core.stats()
    assert st["window"] == len(window)
    assert st["messages"] == next_msg


def test_brute_core_rejects_unknown_ids_atomically():
    core = BruteForceCore(CFG)
    rng = np.random.default_rng(1)
    core.add(make_subs(rng, 3))
    from rankcast.errors import UnknownSubscription
    with pytest.raises(UnknownSubscription, match="id=99"):
        core.remove(np.array([0, 99]))
    assert len(core.subs) == 3
    slots, batch, K = core.reeval_requests()
    assert len(slots) == len(batch) == len(K) == 0


# ----------------------------------------------------------------------------- in the engine
def _variant_factories():
    from rankcast.kinds.spatial.core import SkypeCore
    return {
        "IGPT-cSkyband": None,
        "IPT-cSkyband": lambda cfg: SkypeCore(cfg, disseminator=IPT),
        "CIQ-cSkyband": lambda cfg: SkypeCore(cfg, disseminator=CIQ),
        "IGPT-kmax": lambda cfg: SkypeCore(cfg, policy="kmax"),
        "IGPT-Skyband": lambda cfg: SkypeCore(cfg, policy="skyband"),
        "numpy/scipy.sparse": SparseCore,
    }


@pytest.mark.parametrize("window,window_seconds", [(40, None), (None, 6.0)], ids=["count", "time"])
def test_every_benchmark_variant_matches_brute_force(window, window_seconds):
    """The benchmark's methods on one stream of calls: equal updates after every call."""
    import rankcast as rc
    from rankcast.baselines import BruteForceEngine
    from rankcast.testing import assert_engine_exact

    rng = np.random.default_rng(5)
    words = [f"w{i}" for i in range(20)]
    p = np.r_[np.full(5, 0.12), np.full(15, 0.4 / 15)]
    cfg = rc.EngineConfig(bounds=(0, 0, 1, 1), window=window, window_seconds=window_seconds,
                          leaf_capacity=4, batch_size=9)
    ref = BruteForceEngine(cfg)
    engines = {name: rc.Engine(cfg, core=f) for name, f in _variant_factories().items()}

    def loc():
        return float(rng.choice([0.0, 0.5, 1.0, rng.random()])), float(rng.choice([0.0, 0.5, rng.random()]))

    sid = mid = 0
    t = 0.0
    for step in range(45):
        if step % 6 == 0:
            subs = [rc.Subscription(sid + i, *loc(), text=" ".join(rng.choice(words, int(rng.integers(1, 4)), p=p)),
                                    k=int(rng.integers(1, 6)), alpha=float(rng.choice([0.0, 1.0, rng.random()])))
                    for i in range(8)]
            sid += len(subs)
            for e in (ref, *engines.values()):
                e.subscribe(subs)
        elif step % 11 == 10:
            gone = [int(g) for g in rng.choice(list(ref.core.subs.slot_of), 3, replace=False)]
            for e in (ref, *engines.values()):
                e.unsubscribe(gone)
        msgs = []
        for i in range(int(rng.integers(1, 20))):
            t += float(rng.integers(0, 2)) * 0.5
            text = "" if rng.random() < 0.1 else " ".join(rng.choice(words, int(rng.integers(1, 7)), p=p))
            msgs.append(rc.Message(mid, *loc(), text=text, t=t))
            mid += 1
        want = [(u.subscription_id, [m for m, _ in u.topk]) for u in ref.publish(msgs)]
        for name, e in engines.items():
            got = [(u.subscription_id, [m for m, _ in u.topk]) for u in e.publish(msgs)]
            assert got == want, (name, step)
    assert_engine_exact(ref)
    for name, e in engines.items():
        assert_engine_exact(e)
        for s in ref.core.subs.slot_of:
            assert e.topk(s) == ref.topk(s), name


def test_benchmark_variants_agree_on_geonames():
    """The benchmark's premise on real data (GeoNames, as `rankcast bench engine` builds
    it): every method publishes the same updates and ends with the same lists as the
    brute-force engine. Random synthetic streams missed a pruning bug this one finds."""
    import rankcast as rc
    from rankcast.bench._common import build_workload
    from rankcast.bench.engine import METHODS, _factory

    W, M, B = 1000, 300, 100
    work = build_workload("geonames", W + M, 1000, seed=0)
    cfg = rc.EngineConfig(bounds=work.bounds, window=W, vocabulary=work.vocab)
    engines = {k: rc.Engine(cfg, core=_factory(k)) for k in METHODS}
    for e in engines.values():
        e.publish(work.msgs.take(np.arange(W)))
        e.subscribe(work.subs)
    for a in range(W, W + M, B):
        part = work.msgs.take(np.arange(a, a + B))
        outs = {k: [(u.subscription_id, [m for m, _ in u.topk]) for u in e.publish(part)]
                for k, e in engines.items()}
        for k, got in outs.items():
            assert got == outs["brute"], (METHODS[k], a)
    ref = engines["brute"]
    for k, e in engines.items():
        wrong = [s for s in ref.core.subs.slot_of if e.topk(s) != ref.topk(s)]
        assert not wrong, (METHODS[k], wrong[:5])

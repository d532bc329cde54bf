"""The heart of the suite: after every call, every subscription's top-k equals a brute-force
recomputation and the plain-Python reference (its own tokenising, tf-idf weighting, window
and score), and publish reports exactly the subscriptions whose top-k changed."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import rankcast as rc
from rankcast.baselines.brute import BruteForceCore
from rankcast.kinds.spatial.window import MAX_LEVEL, NI_LEVEL, NI_LIVE, MessageWindow
from rankcast.testing import ReferenceEngine, assert_engine_exact, assert_reference_exact

WORDS = [f"w{i}" for i in range(24)]
P = np.r_[np.full(6, 0.1), np.full(18, 0.4 / 18)]
# words whose tokens depend on the documented tokenising: case folding (ß -> ss), NFKC
# (the ligature, full-width letters, a decomposed accent), word characters of other
# scripts and digits, the underscore, and punctuation that splits
WORDS_TFIDF = ["Café", "CAFÉ", "cafe\u0301", "ﬁsh", "FISH", "Straße", "STRASSE", "naïve", "x_y", "x-y",
               "ｗ42", "w42", "٣٤", "日本", "don't", "a.b", "Ωmega", "ωMEGA", "r2d2", "R2-D2"]
P_TFIDF = np.r_[np.full(4, 0.15), np.full(16, 0.4 / 16)]


def _text(rng, lo, hi, words=None):
    words, p = (WORDS, P) if words is None else (words, P_TFIDF)
    return " ".join(rng.choice(words, int(rng.integers(lo, hi + 1)), p=p))


def _loc(rng, clustered):
    if clustered:   # a few tight clusters force deep Quadtree splits and exact ties
        c = rng.integers(0, 3)
        return float(np.clip([0.2, 0.5, 1.0][c] + rng.normal(0, 1e-3), 0, 1)), 0.5 if c == 2 else float(rng.random())
    return float(rng.choice([0.0, 0.25, 0.5, 1.0, rng.random()])), float(rng.choice([0.0, 0.5, 1.0, rng.random()]))


def _subs(rng, start, n, clustered, words=None):
    out = []
    for i in range(n):
        x, y = _loc(rng, clustered)
        alpha = float(rng.choice([0.0, 1.0, 0.5, rng.random()]))
        if rng.random() < 0.3:
            terms = {str(w): float(rng.choice([1.0, 2.0]))
                     for w in rng.choice(WORDS if words is None else words, int(rng.integers(1, 4)), replace=False)}
            out.append(rc.Subscription(start + i, x, y, terms=terms, k=int(rng.integers(1, 7)), alpha=alpha))
        else:
            out.append(rc.Subscription(start + i, x, y, text=_text(rng, 1, 4, words), k=int(rng.integers(1, 7)),
                                       alpha=alpha))
    return out


def _msgs(rng, start, n, t0, clustered, words=None):
    out = []
    t = t0
    for i in range(n):
        x, y = _loc(rng, clustered)
        text = "" if rng.random() < 0.1 else _text(rng, 1, 6, words)
        t += float(rng.integers(0, 3)) * 0.5      # equal times included
        out.append(rc.Message(start + i, x, y, text=text, t=t))
    return out


def assert_buffers_are_skybands(eng):
    """The buffer invariant (rankcast.kinds.spatial.skyband): each buffer holds exactly the
    k-skyband of the window messages scoring at least its theta, each row with its exact
    dominance counter (the newer messages that score at least as high)."""
    from rankcast.testing import brute_topk
    win, seqs = eng.window.snapshot(), eng.window.seqs()
    core, subs = eng.core, eng.core.subs
    seq_of = dict(zip(win.ids.tolist(), np.asarray(seqs).tolist()))
    for s in subs.live_slots().tolist():
        sid, k = int(subs.ids[s]), int(subs.k[s])
        st, sw = subs.row(s)
        scored = brute_topk((float(subs.x[s]), float(subs.y[s]), float(subs.alpha[s]), len(win), st, sw),
                            win, seqs, eng.cfg.max_dist)
        theta = float(subs.theta[s])
        rows = [(seq_of[m], m, sc) for m, sc in scored if sc >= theta]
        want = set()
        for q, m, sc in rows:
            dc = sum(1 for q2, _, sc2 in rows if q2 > q and sc2 >= sc)
            if dc < k:
                want.add((q, m, dc))
        bi, bf, _ = core.buffer(sid)
        got = {(int(r[0]), int(r[1]), int(r[2])) for r in bi}
        assert got == want, (sid, sorted(got - want), sorted(want - got))


def _run(seed, window, window_seconds, clustered, steps=60, leaf_capacity=4, index=None, batch_size=7,
         max_msgs=15, cand_cap=None, flat_upto=None, records=True, search_flat=None, tfidf=False,
         skyband_every=1, on_step=None):
    """Every call played on the engine, the brute-force engine (exact bits) and the
    plain-Python reference (rankings exact, scores within 1e-9), compared after each.
    ``tfidf``: texts of :data:`WORDS_TFIDF` weighted by a vocabulary fitted on a corpus of
    them (the reference counts the corpus itself).
    ``index``: (fine_from, split_at) of the message index, small to force deep nodes.
    ``search_flat``: the message index's ``flat_upto`` (rows with at most that many live
    postings are read flat, the others walk the index); by default -1 (every row walks the
    index) with ``index`` given, else by seed: -1, the default, or 4 (a mix in one batch).
    ``cand_cap``: the room for candidates the subscription index's walk starts every
    publish call with (small: the walk overflows and is redone with more).
    ``flat_upto``: the longest segment the walk reads entry by entry (0: group pruning and
    early termination everywhere); ``records``: False leaves the group records untested (so
    that Theorems 5.3 and 5.4 see every group).
    Odd seeds fetch the default candidates (k + 16 at least); even seeds 2k, which small
    windows often cannot fill, so cuts between equal scores and refetches happen.
    ``skyband_every``: the buffers' invariant is checked after every that many steps and
    after the last (the check merges the deferred candidates); ``on_step(eng)`` runs after
    each step's other checks."""
    rng = np.random.default_rng(seed)
    words = corpus = vocab = None
    if tfidf:
        crng = np.random.default_rng(10_000 + seed)
        words = WORDS_TFIDF
        corpus = [_text(crng, 0, 5, words) for _ in range(60)] + ["Straße ﬁsh", "", "!!"]
        vocab = rc.Vocabulary.fit(corpus)
    cfg = rc.EngineConfig(bounds=(0, 0, 1, 1), window=window, window_seconds=window_seconds,
                          leaf_capacity=leaf_capacity, batch_size=batch_size, vocabulary=vocab,
                          **({} if seed % 2 else {"candidate_extra": 0}))
    eng = rc.Engine(cfg)
    plain = ReferenceEngine(cfg, corpus=corpus)
    if index is not None:
        eng.window.fine_from, eng.window.split_at = index
    if search_flat is None:
        search_flat = -1 if index is not None else (-1, eng.window.flat_upto, 4)[seed % 3]
    eng.window.flat_upto = search_flat
    if flat_upto is not None:
        eng.core.index.flat_upto = flat_upto
    eng.core.index.records = records
    ref = rc.Engine(cfg, core=BruteForceCore)
    sid, mid, t = 0, 0, 0.0
    for step in range(steps):
        r = rng.random()
        if r < 0.15:
            subs = _subs(rng, sid, int(rng.integers(1, 6)), clustered, words)
            sid += len(subs)
            eng.subscribe(subs)
            ref.subscribe(subs)
            plain.subscribe(subs)
        elif r < 0.22 and len(eng.core.subs):
            live = list(eng.core.subs.slot_of)
            gone = list(rng.choice(live, min(len(live), int(rng.integers(1, 3))), replace=False))
            eng.unsubscribe(gone)
            ref.unsubscribe(gone)
            plain.unsubscribe(gone)
        else:
            msgs = _msgs(rng, mid, int(rng.integers(1, max_msgs)), t, clustered, words)
            mid += len(msgs)
            t = max(m.t for m in msgs)
            if cand_cap is not None:
                eng.core.index._cand_cap = cand_cap
            got = eng.publish(msgs)
            want = ref.publish(msgs)
            assert [u.subscription_id for u in got] == [u.subscription_id for u in want], step
            for a, b in zip(got, want):
                assert [m for m, _ in a.topk] == [m for m, _ in b.topk]
            why = plain.updates_mismatch(got, plain.publish(msgs))
            assert why is None, (step, why)
        assert_engine_exact(eng)
        assert_reference_exact(eng, plain)
        if on_step is not None:
            on_step(eng)
        if step % skyband_every == skyband_every - 1 or step == steps - 1:
            assert_buffers_are_skybands(eng)
    return eng


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("clustered", [False, True])
def test_count_window_random(seed, clustered):
    _run(seed, window=40, window_seconds=None, clustered=clustered)


@pytest.mark.parametrize("seed", range(3))
def test_time_window_random(seed):
    _run(100 + seed, window=None, window_seconds=6.0, clustered=seed == 1)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("window", [30, None])
def test_tfidf_texts_against_the_reference(seed, window):
    """Texts whose tokens depend on case folding, NFKC and word characters of several
    scripts, weighted by a fitted vocabulary (unknown terms too: the corpus misses some):
    the engine's encoding and windows against the reference's own, after every call."""
    _run(150 + seed, window=window, window_seconds=None if window else 4.0, clustered=seed == 1, tfidf=True)


def test_reference_tokens_and_weights_follow_the_documented_rules():
    """The reference's tokenising and tf-idf, read from the documentation, on hand-made
    cases (and equal to the vocabulary's own on them)."""
    import math

    from rankcast.kinds.spatial.reference import reference_tokens, reference_weights

    assert reference_tokens("Ｃafé ﬁsh, STRASSE-Straße x_y 42 don't 日本") == \
        ["café", "fish", "strasse", "strasse", "x_y", "42", "don", "t", "日本"]
    assert reference_tokens("cafe\u0301") == ["café"] and reference_tokens(" .,;") == []
    w = reference_weights("a a b", {"a": 1}, 3)          # idf(a) = ln(4/2) + 1, idf(b) = ln(4) + 1
    ra, rb = 2 * (math.log(2) + 1), math.log(4) + 1
    assert w == pytest.approx({"a": ra / math.hypot(ra, rb), "b": rb / math.hypot(ra, rb)}, rel=1e-15)
    assert reference_weights("x y", None, 0) == pytest.approx({"x": 2 ** -0.5, "y": 2 ** -0.5})
    vocab = rc.Vocabulary.fit(["a b", "a", "c"])
    for text in ("a a b", "b c d", "A, b!"):
        assert vocab.weights(text) == pytest.approx(reference_weights(text, {"a": 2, "b": 1, "c": 1}, 3), rel=1e-12)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("clustered", [False, True])
def test_deep_message_index(seed, clustered, monkeypatch):
    """Terms split from 3 live postings and nodes from 2: every level of the message index
    (root, cells, sub-cells, deepest cells) holds postings and expires them, and the
    best-first search must still find exactly the top-k."""
    deepest = [0]
    append = MessageWindow.append

    def recorded(self, *args, **kw):      # the deepest node open after each append (rows are reused)
        append(self, *args, **kw)
        levels = self.nd_i[: self.n_nd, NI_LEVEL][self.nd_i[: self.n_nd, NI_LIVE] > 0]
        deepest[0] = max(deepest[0], int(levels.max(initial=0)))

    monkeypatch.setattr(MessageWindow, "append", recorded)
    _run(300 + seed, window=80, window_seconds=None, clustered=clustered, steps=70, index=(3, 2))
    assert deepest[0] == MAX_LEVEL, deepest[0]


def test_deep_message_index_time_window():
    _run(310, window=None, window_seconds=8.0, clustered=True, steps=70, index=(3, 2))


def test_larger_leaves_and_window():
    _run(7, window=150, window_seconds=None, clustered=False, steps=40, leaf_capacity=50)


@pytest.mark.parametrize("seed", range(3))
def test_buffers_compacted_in_place_after_every_call(seed, monkeypatch):
    """The buffers' pool compacted (in place) whenever it holds any garbage: buffers slide
    down past each other's old rows and shrink their room, and stay exact."""
    from rankcast.kinds.spatial.core import SkypeCore
    monkeypatch.setattr(SkypeCore, "COMPACT_FROM", 0)
    # the cost model's measured C_topk sizes the buffers: unmeasured here, so that how often
    # they outgrow their room does not depend on timing (a cold numba cache made it 2)
    apply = SkypeCore.apply_reevals
    monkeypatch.setattr(SkypeCore, "apply_reevals",
                        lambda self, slots, cands, window_size=None, seconds=None: apply(self, slots, cands, window_size))
    eng = _run(400 + seed, window=60, window_seconds=None, clustered=seed == 1, steps=120)
    assert eng.core.counters["compactions"] >= 3


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), window=st.integers(1, 30), clustered=st.booleans())
def test_property_any_workload(seed, window, clustered):
    _run(seed, window=window, window_seconds=None, clustered=clustered, steps=25)


def test_ties_newer_first():
    cfg = rc.EngineConfig(bounds=(0, 0, 1, 1), window=10)
    eng = rc.Engine(cfg)
    eng.subscribe([rc.Subscription(1, 0.5, 0.5, text="a", k=2, alpha=0.5)])
    ups = eng.publish([rc.Message(i, 0.3, 0.3, text="a") for i in range(4)])
    assert [m for m, _ in eng.topk(1)] == [3, 2]
    assert ups[-1].subscription_id == 1 and [m for m, _ in ups[-1].topk] == [3, 2]


def test_k_larger_than_matches_and_empty_messages():
    cfg = rc.EngineConfig(bounds=(0, 0, 1, 1), window=5)
    eng = rc.Engine(cfg)
    eng.subscribe([rc.Subscription(1, 0, 0, text="a b", k=10, alpha=0.0)])
    eng.publish([rc.Message(1, 1, 1, text="a"), rc.Message(2, 1, 1, text=""), rc.Message(3, 0, 0, text="c")])
    assert [m for m, _ in eng.topk(1)] == [1]
    eng.publish([rc.Message(i, 0, 0, text="") for i in range(10, 15)])   # pushes message 1 out
    assert eng.topk(1) == []
    assert eng.stats()["window"] == 5


def test_core_reads_for_partitions():
    """What a partition reads of a core: kScores (-inf below k rows), top-k rows with their
    sequence numbers, slots by id (-1 when not held), and initial results not reported."""
    eng = _run(11, window=30, window_seconds=None, clustered=False, steps=30)
    core = eng.core
    ids = sorted(core.subs.slot_of)
    slots = core.find_slots(ids + [10**9])
    assert slots[-1] == -1 and (slots[:-1] >= 0).all()
    sub_ids, ks, off, mid, seq, sc = core.topk_rows(slots[:-1])
    kth = core.kth_scores(slots[:-1])
    for r, sid in enumerate(ids):
        top = eng.topk(sid)
        assert sub_ids[r] == sid and ks[r] == core.subs.k[slots[r]]
        assert list(zip(mid[off[r]:off[r + 1]].tolist(), sc[off[r]:off[r + 1]].tolist())) == top
        rows = list(zip(sc[off[r]:off[r + 1]].tolist(), seq[off[r]:off[r + 1]].tolist()))
        assert rows == sorted(rows, reverse=True) and len(set(rows)) == len(rows)   # newer first on ties
        full_k = len(top) == ks[r] and core.buffer(sid)[0].shape[0] >= ks[r]
        assert kth[r] == (top[-1][1] if full_k else -np.inf)
    with pytest.raises(rc.UnknownSubscription, match="id=1000000000"):
        core.slots_of([ids[0], 10**9])


def test_updates_only_for_changed():
    cfg = rc.EngineConfig(bounds=(0, 0, 1, 1), window=100)
    eng = rc.Engine(cfg)
    eng.subscribe([rc.Subscription(1, 0, 0, text="a", k=1), rc.Subscription(2, 0, 0, text="b", k=1)])
    ups = eng.publish([rc.Message(1, 0, 0, text="a")])
    assert [u.subscription_id for u in ups] == [1]
    assert ups[0].topk[0][0] == 1 and abs(ups[0].topk[0][1] - 1.0) < 1e-12
    assert eng.publish([rc.Message(2, 1, 1, text="c")]) == []


@pytest.mark.parametrize("policy", ["skyband", "kmax"])
def test_baseline_reevaluation_policies_exact(policy):
    """The re-evaluation baselines (Skyband 0.95 kScore, kmax k' = 60) share the buffers and
    must be just as exact."""
    from rankcast.kinds.spatial.core import SkypeCore
    rng = np.random.default_rng(5)
    cfg = rc.EngineConfig(bounds=(0, 0, 1, 1), window=60, leaf_capacity=4, batch_size=5)
    eng = rc.Engine(cfg, core=lambda c: SkypeCore(c, policy=policy))
    eng.subscribe(_subs(rng, 0, 40, False))
    mid = 0
    for _ in range(30):
        msgs = _msgs(rng, mid, int(rng.integers(1, 20)), 0.0, False)
        mid += len(msgs)
        eng.publish(msgs)
        assert_engine_exact(eng)


@pytest.mark.slow     # every kernel compiled anew with bounds checks, in a child process
def test_oracle_with_numba_boundscheck(tmp_path):
    """Runs a small oracle workload with numba's bounds checking on (a fresh cache), so an
    out-of-bounds write in any kernel fails loudly instead of corrupting memory."""
    import os
    import subprocess
    import sys
    code = ("import sys; sys.path.insert(0, %r)\n"
            "from tests.test_engine_oracle import _run\n"
            "_run(3, window=20, window_seconds=None, clustered=True, steps=40)\n"
            "_run(4, window=None, window_seconds=4.0, clustered=False, steps=40)\n"
            "_run(5, window=60, window_seconds=None, clustered=True, steps=40, index=(3, 2))\n"
            "_run(6, window=60, window_seconds=None, clustered=True, steps=40, search_flat=4)\n") % os.getcwd()
    env = dict(os.environ, NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=str(tmp_path / "nb"))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.parametrize("seed", [6, 0, 1, 2, 3])
def test_many_shared_terms_with_uneven_weights(seed):
    """Co-located subscriptions and messages sharing several terms with uneven weights, high
    alpha and small k: group pruning and early termination then skip some terms of
    subscriptions already being accumulated, which is where a literal Theorem 5.2 drops true
    results (seed 6 failed before the accumulated sum was completed on revisits)."""
    rng = np.random.default_rng(seed)
    vocab = [f"t{i}" for i in range(12)]
    cfg = rc.EngineConfig(bounds=(0, 0, 1, 1), window=60, leaf_capacity=1000, groups=10, batch_size=16)
    eng = rc.Engine(cfg)

    def terms(lo, hi):
        n = int(rng.integers(lo, hi + 1))
        return {w: float(rng.choice([0.05, 0.3, 1.0, 3.0]) * rng.random() + 0.01)
                for w in rng.choice(vocab, n, replace=False)}

    eng.subscribe([rc.Subscription(i, 0.5 + 0.01 * float(rng.random()), 0.5, terms=terms(3, 6),
                                   k=int(rng.integers(1, 4)), alpha=float(rng.uniform(0.55, 0.9)))
                   for i in range(60)])
    mid = 0
    for _ in range(30):
        msgs = [rc.Message(mid + i, 0.5 + 0.05 * float(rng.random()), 0.5 + 0.05 * float(rng.random()),
                           terms=terms(3, 8)) for i in range(10)]
        mid += len(msgs)
        eng.publish(msgs)
        assert_engine_exact(eng)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("flat_upto", [-1, 10 ** 9])
def test_floored_shard_search_merges_to_the_whole_window_top_k(seed, flat_upto):
    """A window split in shards, the others searched with the first's K-th scores as a floor:
    the merged top-K equals the top-K of the whole window, row for row (ties included: grid
    locations and few words make many equal scores), and a floored row is never complete."""
    from rankcast.kinds.spatial.window import CandidateLists, MessageWindow

    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(80)]
    cfg = rc.EngineConfig(bounds=(0.0, 0.0, 10.0, 10.0), window=5000)
    eng = rc.Engine(cfg)
    text = lambda: " ".join(rng.choice(words, size=int(rng.integers(1, 5))))
    msgs = [rc.Message(i, float(rng.integers(0, 11)), float(rng.integers(0, 11)), text=text())
            for i in range(3000)]
    subs = [rc.Subscription(i, float(rng.integers(0, 11)), float(rng.integers(0, 11)), text=text(),
                            k=int(rng.integers(1, 30)), alpha=float(rng.choice([0.0, 0.3, 0.5, 1.0])))
            for i in range(400)]
    mb, pend = eng.encoder.encode_messages(msgs, time_window=False)
    eng.encoder.commit(pend)
    sb, pend = eng.encoder.encode_subscriptions(subs)
    eng.encoder.commit(pend)
    seqs = np.arange(len(mb), dtype=np.int64)
    K = sb.k.astype(np.int64) * 4
    whole = MessageWindow(cfg)
    whole.append(mb, seqs)
    shards = []
    for s in range(3):
        w = MessageWindow(cfg)
        w.fine_from, w.split_at = 3, 2          # deep trees: every level prunes by the floor
        w.flat_upto = flat_upto                 # or no tree walked: every posting read
        idx = np.flatnonzero(seqs % 3 == s)
        w.append(mb.take(idx), seqs[idx])
        shards.append(w)
    first = shards[0].search(sb, K, after_seq=100, upto_seq=2900)
    floor = first.kth_scores(K)
    assert np.isfinite(floor).any() and not np.isfinite(floor).all()
    rest = [w.search(sb, K, after_seq=100, upto_seq=2900, floor=floor) for w in shards[1:]]
    assert not any(r.complete[np.isfinite(floor)].any() for r in rest)
    got = CandidateLists.merge([first, *rest], K)
    plain = CandidateLists.merge([first, *(w.search(sb, K, after_seq=100, upto_seq=2900)
                                           for w in shards[1:])], K)
    ref = whole.search(sb, K, after_seq=100, upto_seq=2900)
    for name in ("offsets", "seq", "ids", "score"):
        assert np.array_equal(getattr(got, name), getattr(ref, name)), name
    # the flags as without the floor (merged parts may know more than one window's "fewer
    # than K": all K listed and every part exhausted)
    assert np.array_equal(got.complete, plain.complete)


def _check_igpt_layout(eng):
    """Every clean leaf of the subscription index: each group's keys ascending, each key the
    kScore* of its subscription's current theta, suffix maxima exact, and the leaf's minimum
    lambda_s at most every member's (what the in-place re-keying must keep); the term
    directory's row of every segment equals the segment table's, and every subscription's
    row the subscription table's."""
    from rankcast.kinds.spatial import igpt as I
    from rankcast.kinds.spatial.scoring import EPS, alpha_star, kscore_star, lambda_s

    idx, s = eng.core.index, eng.core.subs
    idx.flush()
    ent, hot = idx.ent, idx.hot
    # each subscription's row (what _match reads) equals the subscription table
    live = s.live_slots()
    row = idx.row[live]
    for f, col in (("alpha", s.alpha), ("theta", s.theta), ("toff", s.toff), ("tlen", s.tlen)):
        assert row[f].tolist() == col[live].tolist(), f
    box = idx.nbox[idx.sleaf[live]]
    din = np.minimum.reduce([s.x[live] - box[:, 0], box[:, 2] - s.x[live], s.y[live] - box[:, 1], box[:, 3] - s.y[live]])
    assert row["sdin"].tolist() == din.tolist()
    for L in np.flatnonzero(idx.nchild[: idx.n_nodes] < 0).tolist():
        for g in range(idx.n_g0[L], idx.n_g0[L] + idx.n_ng[L]):
            a, b = idx.gI[g, I.G_START], idx.gI[g, I.G_END]
            # the term directory's copy of the segment row, where its position says
            t, pos = idx.gI[g, I.G_TERM], idx.gI[g, I.G_DIRPOS]
            q0, q1 = idx.gI[g, I.G_GROUPS], idx.gI[g, I.G_GROUPS_END]
            assert pos < idx.td[t, I.D_LEN]
            assert idx.td_pool[idx.td[t, I.D_START] + pos].tolist() == [g, L, a, b, q0, q1]
            p = a
            q = q0
            while p < b:
                gend = ent["gend"][p]
                # the group's record: its end, and bounds on every entry's parts
                rec = idx.grp[q]
                assert q < q1 and rec["end"] == gend
                assert rec["alpha"] >= hot["alpha"][p:gend].max()
                assert rec["tc"] >= hot["tc"][p:gend].max()
                assert rec["tw"] >= hot["tw"][p:gend].max()
                assert rec["thb"] <= hot["thb"][p:gend].min()
                # ... rounded outwards by no more than its margin (a record left behind by a
                # threshold change would be off by far more)
                for f in ("alpha", "tc", "tw"):
                    assert rec[f] <= hot[f][p:gend].max() * (1 + 2e-6) + 1e-6
                lo = hot["thb"][p:gend].min()
                assert rec["thb"] >= lo - 2e-6 * (1 + abs(lo))
                q += 1
                subs = ent["sub"][p:gend]
                keys = ent["key"][p:gend]
                assert all(x <= y for x, y in zip(keys[:-1], keys[1:]))   # -inf for alpha = 1
                want = [kscore_star(float(s.theta[u]), float(s.alpha[u])) for u in subs.tolist()]
                assert keys.tolist() == want
                raw = np.array([s.maxwt[s.toff[u] + q] for u, q in zip(subs, ent["pos"][p:gend])])
                assert ent["smaxwt"][p:gend].tolist() == np.maximum.accumulate(raw[::-1])[::-1].tolist()
                ast = np.array([alpha_star(float(s.alpha[u])) for u in subs.tolist()])
                assert ent["sastar"][p:gend].tolist() == np.maximum.accumulate(ast[::-1])[::-1].tolist()
                assert ent["gend"][p:gend].tolist() == [gend] * (gend - p)
                # the parts of the entry's own Theorem 5.1 test are its subscription's
                al, th, md = s.alpha[subs], s.theta[subs], idx.max_dist
                at = s.toff[subs] + ent["pos"][p:gend]
                assert hot["alpha"][p:gend].tolist() == al.tolist()
                assert hot["sa"][p:gend].tolist() == (al * (1.0 - idx.row["sdin"][subs] / md)).tolist()
                assert hot["sb"][p:gend].tolist() == (al / md).tolist()
                assert hot["tc"][p:gend].tolist() == ((1.0 - al) * s.wtsum[at]).tolist()
                assert hot["tw"][p:gend].tolist() == ((1.0 - al) * s.maxwt[at]).tolist()
                assert hot["thb"][p:gend].tolist() == (th - EPS * (1.0 + np.abs(th))).tolist()
                for u in subs.tolist():
                    assert idx.nminls[L] <= lambda_s(float(s.theta[u]), float(s.alpha[u]))
                p = gend
            assert q == q1


@pytest.mark.parametrize("seed", range(3))
def test_index_keys_follow_every_threshold_change(seed):
    """Thresholds rise and fall with re-evaluations; the index re-keys its entries in place."""
    rng = np.random.default_rng(400 + seed)
    cfg = rc.EngineConfig(bounds=(0, 0, 1, 1), window=25, leaf_capacity=6, batch_size=5, groups=3)
    eng = rc.Engine(cfg)
    sid = mid = 0
    t = 0.0
    rekeyed = 0
    for step in range(50):
        if step % 7 == 0:
            subs = _subs(rng, sid, 12, clustered=seed == 1)
            sid += len(subs)
            eng.subscribe(subs)
        msgs = _msgs(rng, mid, int(rng.integers(1, 12)), t, clustered=seed == 1)
        mid += len(msgs)
        t = max(m.t for m in msgs)
        eng.publish(msgs)
        _check_igpt_layout(eng)
        assert_engine_exact(eng)
        rekeyed = eng.core.index.rekeyed
    assert rekeyed > 0


def test_index_rows_follow_the_term_pool_moves():
    """Subscriptions of many terms come and go until the subscription table compacts its term
    pool (every subscription's term run moves); the index's per-subscription rows follow."""
    rng = np.random.default_rng(77)
    words = [f"v{i}" for i in range(300)]
    eng = rc.Engine(rc.EngineConfig(bounds=(0, 0, 1, 1), window=30, leaf_capacity=6, batch_size=5))
    sid = mid = 0
    live: list[int] = []
    for step in range(12):
        subs = [rc.Subscription(sid + i, float(rng.random()), float(rng.random()), k=int(rng.integers(1, 5)),
                                alpha=float(rng.random()),
                                text=" ".join(rng.choice(words[:8] if rng.random() < 0.5 else words, 40)))
                for i in range(30)]
        sid += len(subs)
        eng.subscribe(subs)
        live += [x.id for x in subs]
        gone = rng.choice(live, 20, replace=False).tolist()
        eng.unsubscribe(gone)
        live = [x for x in live if x not in set(gone)]
        msgs = [rc.Message(mid + i, float(rng.random()), float(rng.random()),
                           text=" ".join(rng.choice(words[:8], 5))) for i in range(10)]
        mid += len(msgs)
        eng.publish(msgs)
        _check_igpt_layout(eng)
        assert_engine_exact(eng)
    assert eng.core.subs.moves > 0
    assert eng.core.index.relayouts > 0     # the checks above saw term-major tables too


@pytest.mark.parametrize("seed", range(3))
def test_group_pruning_everywhere(seed):
    """Segments longer than the flat limit go through the groups (Theorem 5.3) and the
    early-termination search (Theorem 5.4); with the limit at 0 every segment does, on
    leaves large enough to hold long groups (the group records, which would prune most of
    those groups first, are left untested here)."""
    eng = _run(700 + seed, window=60, window_seconds=None, clustered=seed == 1, steps=50,
               leaf_capacity=64, batch_size=30, max_msgs=30, flat_upto=0, records=False)
    st = eng.core.index.stats()
    assert st["groups_pruned"] > 0 and st["entries_checked"] > 0
    assert st["group_records_pruned"] == 0


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("flat_upto", [0, None])
def test_group_records_prune(seed, flat_upto):
    """Each group's record (maxima of alpha and of the text weights, least threshold) skips
    groups whole, in flat segments and ahead of Theorems 5.3 and 5.4, and results stay exact."""
    eng = _run(720 + seed, window=60, window_seconds=None, clustered=seed == 1, steps=50,
               leaf_capacity=64, batch_size=30, max_msgs=30, flat_upto=flat_upto)
    st = eng.core.index.stats()
    assert st["group_records_pruned"] > 0 and st["entries_checked"] > 0


@pytest.mark.parametrize("seed", range(2))
def test_index_walk_redone_when_candidates_overflow(seed):
    """The subscription index answers a batch in one walk with room for a fixed number of
    candidates; with room for one it overflows in almost every call and is redone with
    more room (at least twice as much), and the results stay exact."""
    eng = _run(600 + seed, window=40, window_seconds=None, clustered=seed == 1, steps=40,
               batch_size=60, max_msgs=60, cand_cap=1)
    assert eng.core.index._cand_cap > 1


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("window", [10, 90])
def test_large_batches_merge_many_candidates_per_buffer(seed, window):
    """Publish calls of up to 120 messages in one batch: a buffer gets dozens of candidates
    at once (the sorted merge path), and with window 10 most of the batch expires within it."""
    _run(500 + seed, window=window, window_seconds=None, clustered=seed == 1, steps=30,
         batch_size=500, max_msgs=120)
    _run(510 + seed, window=None, window_seconds=window / 10, clustered=False, steps=30,
         batch_size=500, max_msgs=120)


@pytest.mark.parametrize("seed", range(4))
def test_deferred_candidates_wait_below_the_kth_row_across_calls(seed):
    """Candidates of a full buffer that all score below its k-th row and find no expiring
    row wait in its pending rows (``skyband`` module docstring), across publish calls, until
    a batch merges them (a candidate that reaches the top-k, an expiring row, no room left)
    or a check of the whole buffer does: every call's results exact, the buffers checked
    only every 25 steps (so that pending rows live long); pending rows are used, and filled
    to their room."""
    from rankcast.kinds.spatial.skyband import PENDING

    most = []
    window, window_seconds = ((400, None), (None, 40.0))[seed % 2]
    _run(800 + seed, window=window, window_seconds=window_seconds, clustered=seed >= 2, steps=90,
         batch_size=4, max_msgs=24, skyband_every=25, on_step=lambda e: most.append(int(e.core.buf.pn.max())))
    assert max(most) == PENDING, most


@pytest.mark.parametrize("seed", range(3))
def test_match_on_two_threads_equals_one_walk(seed):
    """A batch matched on two threads (``SideThread``: the caller's work, then the last
    messages of the batch beside the first ones) gives the one walk's arrays exactly, at
    every share of the batch, also when a thread's candidates overflow its room and its walk
    is redone; the caller's work runs once, and an error in it reaches the caller."""
    from rankcast.kinds.spatial.igpt import SideThread

    eng = _run(700 + seed, window=60, window_seconds=None, clustered=seed == 1, steps=25, batch_size=500,
               max_msgs=40)
    rng = np.random.default_rng(seed)
    idx = eng.core.index
    side = SideThread()
    for n in (1, 2, 3, 40):
        batch, _ = eng.encoder.encode_messages(_msgs(rng, 10_000 + 100 * n, n, 1e6, seed == 1), time_window=False)
        want = idx.match(batch)
        for share, cap in ((0.0, None), (0.3, None), (0.5, None), (0.5, 1)):
            side.share = share
            side.one_until = side.batches          # two threads, whatever the machine's load
            if cap is not None:
                idx._cand_cap = cap
            ran = []
            got = idx.match(batch, side, lambda: ran.append(1))
            assert ran == [1]
            for g, w in zip(got, want):
                assert g.dtype == w.dtype and np.array_equal(g, w), (n, share)

    def fails():
        raise RuntimeError("the caller's work failed")
    for one_until in (side.batches, side.batches + 1):      # on two threads, then on one
        side.one_until = one_until
        with pytest.raises(RuntimeError, match="caller's work"):
            idx.match(batch, side, fails)


def test_side_thread_share_ends_both_threads_together():
    """The side thread's share of a batch: both threads walk at the measured rate, the side
    one after the caller's work, so the share that ends them together is
    (1 - work / whole walk) / 2, between 0 (work as long as the walk) and 1/2 (no work)."""
    from rankcast.kinds.spatial.igpt import SideThread

    side = SideThread()
    for _ in range(60):     # a walk of 1 s for 1000 messages, 0.2 s of the caller's work
        cut = side.cut(1000)
        side.learn(1000, cut * 1e-3, 0.2, (1000 - cut) * 1e-3)
    assert side.share == pytest.approx(0.4, abs=1e-3) and side.cut(1000) == 600
    for _ in range(60):
        side.learn(1000, 0.5, 3.0, 0.5)
    assert side.share == pytest.approx(0.0, abs=1e-3) and side.cut(1000) == 1000
    for _ in range(60):
        side.learn(1000, 0.5, 0.0, 0.5)
    assert side.share == pytest.approx(0.5, abs=1e-3)


def test_side_thread_goes_back_to_one_thread_where_no_core_is_free():
    """A batch on two threads whose process got no more CPU time than wall-clock time (no
    free core) sends the next batch to one thread; verdicts in a row hold 1, 2, 4, ... and at
    most PROBE_EVERY - 1 batches (every PROBE_EVERY-th batch tries two again); a batch that
    finds its core again starts the backoff anew at 1."""
    from rankcast.kinds.spatial.igpt import SideThread

    def pattern(side, failures):
        """Which of the next batches run on two threads, each two-thread batch failing."""
        out = []
        while failures:
            two = side.active()
            out.append(two)
            if two:
                side.overlap(0.9)
                failures -= 1
        return out

    side = SideThread()
    assert side.active()
    side.overlap(1.8)                  # a second core was free
    assert side.active() and side.hold == 1
    P = SideThread.PROBE_EVERY
    got = pattern(side, 7)
    T, F = True, False
    assert got == ([T, F] + [T, F, F] + [T] + [F] * 4 + [T] + [F] * 8 + [T] + [F] * (P - 1)
                   + [T] + [F] * (P - 1) + [T])
    assert side.one_until == side.batches + P - 1 and side.verdicts == [7, 1]
    for _ in range(P - 1):
        assert not side.active()
    assert side.active()
    side.overlap(1.5)                  # the core is back: the next failure holds one batch
    assert side.hold == 1 and side.active()
    side.overlap(0.9)
    assert [side.active() for _ in range(2)] == [False, True]


def test_side_thread_backoff_is_capped_by_probe_every():
    """A SideThread made with ``probe_every`` (a solo partition's halves: 8) holds at most
    probe_every - 1 batches; with 2, every other batch; with 1, none (each verdict holds 1)."""
    from rankcast.kinds.spatial.igpt import SideThread

    for probe_every, holds in ((8, [1, 2, 4, 7, 7]), (2, [1, 1, 1]), (1, [1, 1])):
        side = SideThread(probe_every)
        got = []
        for _ in holds:
            assert side.active()
            side.verdict(False)
            n = 0
            while not side.active():
                n += 1
            got.append(n)
            side.batches -= 1          # the probing batch is the next verdict's
        assert got == holds, probe_every


def test_side_thread_verdict_from_each_threads_own_cpu():
    """``threads_ran``: free where each thread got MIN_OWN of a core over its part of the
    batch (its CPU time against its wall clock, less its waits): two threads sharing one
    core get about half each; one thread starved is enough for "no free core", unless the
    process's CPU per wall second (when given) reached MIN_OVERLAP."""
    from rankcast.kinds.spatial.igpt import SideThread

    side = SideThread()
    cases = [(([0.020, 0.018], [0.021, 0.019]), True),      # each thread on its core
             (([0.020, 0.018], [0.040, 0.036]), False),     # one core shared
             (([0.020, 0.009], [0.021, 0.019]), False),     # the side thread starved
             (([0.015, 0.015], [0.0199, 0.0199]), True),    # 0.754 of a core each
             (([0.015, 0.015], [0.0201, 0.0199]), False),
             (([0.0, 0.0], [0.0, 0.0]), False)]             # nothing measured: not free
    for (cpu, wall), free in cases:
        for proc, either in ((None, free), (1.0, free), (1.3, True)):
            side = SideThread()
            assert side.active()
            side.threads_ran(cpu, wall, proc)
            assert side.active() is either and side.verdicts == [int(not either), int(either)], (cpu, wall, proc)


def test_index_directory_skips_terms_under_its_smallest():
    """Subscriptions whose terms all come after many terms of the window (term ids in order of
    first appearance): the subscription index's term directory rows under its smallest
    indexed term are never touched, not even by a re-layout (``_term_major`` starts there),
    the directory ends at its largest indexed term, and every list stays exact through
    re-layouts, subscriptions coming and going."""
    rng = np.random.default_rng(78)
    early = [f"e{i}" for i in range(2100)]     # past twice the directory's first 1,024 rows
    words = [f"w{i}" for i in range(40)]
    eng = rc.Engine(rc.EngineConfig(bounds=(0, 0, 1, 1), window=40, leaf_capacity=6, batch_size=5))
    eng.publish([rc.Message(i, float(rng.random()), float(rng.random()), text=" ".join(early[2 * i: 2 * i + 2]))
                 for i in range(1050)])
    sid, mid, live = 0, 1050, []
    for step in range(10):
        subs = [rc.Subscription(sid + i, float(rng.random()), float(rng.random()), k=int(rng.integers(1, 5)),
                                alpha=float(rng.random()),
                                text=" ".join([words[(sid + i) % len(words)], *rng.choice(words, 3)]))
                for i in range(40)]
        sid += len(subs)
        eng.subscribe(subs)
        live += [x.id for x in subs]
        gone = rng.choice(live, 20, replace=False).tolist()
        eng.unsubscribe(gone)
        live = [x for x in live if x not in set(gone)]
        msgs = [rc.Message(mid + i, float(rng.random()), float(rng.random()),
                           text=" ".join(rng.choice(words + early[:20], 5))) for i in range(12)]
        mid += len(msgs)
        eng.publish(msgs)
        idx = eng.core.index
        _check_igpt_layout(eng)
        assert_engine_exact(eng)
        assert idx._td_lo >= 2100
        assert not idx.td[: idx._td_lo].any()
        assert len(idx.td) == int(eng.core.subs.terms[: eng.core.subs.pool_used].max()) + 1
        # the core's counter (read without the index's stats) is the index's
        assert eng.core.counters["verified"] == idx.stats()["verified"]
    assert eng.core.index.relayouts > 0 and eng.core.counters["verified"] > 0
    # a core pickled before the index kept its smallest term (an older checkpoint) reads the
    # directory from term 0, and goes on exact
    del eng.core.index.__dict__["_td_lo"]
    old = eng
    old.core = pickle.loads(pickle.dumps(eng.core))
    assert old.core.index._td_lo == 0
    for step in range(3):
        old.subscribe([rc.Subscription(sid + i, float(rng.random()), float(rng.random()), k=2, alpha=0.5,
                                       text=" ".join(rng.choice(words + early[:30], 2))) for i in range(30)])
        sid += 30
        old.publish([rc.Message(mid + i, float(rng.random()), float(rng.random()),
                                text=" ".join(rng.choice(words + early[:30], 4))) for i in range(15)])
        mid += 15
        _check_igpt_layout(old)
        assert_engine_exact(old)
    assert old.core.index._td_lo == 0

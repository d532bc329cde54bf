"""The message index's search against brute force, row by row: the best-first walk of the
index and the batch's flat path (every posting of a row's terms, gathered once per batch)
give the same top-K, the same score bits and the same flags, for any mix of the two."""
from __future__ import annotations

import numpy as np
import pytest

import rankcast as rc
from rankcast.kinds.spatial.scoring import below
from rankcast.kinds.spatial.window import (FLAT_BATCH, FLAT_UPTO, NI_CHILD, NI_KEY, NI_LIVE, NI_NEXT, NI_PARENT, NI_PREV,
                                      MessageWindow)
from rankcast.testing import brute_scores

WORDS = [f"w{i}" for i in range(150)]   # more than 64 terms: signatures collide


def _brute(win: MessageWindow, subs, after, upto):
    """Per row: (score, seq) of every window message with after < seq <= upto sharing a
    term with the row, best first (score, then seq), by the plain formula."""
    snap, seqs = win.snapshot(), win.seqs()
    out = []
    for i in range(len(subs)):
        st, sw = subs.row_terms(i)
        sub = (float(subs.x[i]), float(subs.y[i]), float(subs.alpha[i]), 0, st, sw)
        out.append(sorted(((float(sc), q) for sc, q, _ in brute_scores(sub, snap, seqs, win.max_dist)
                           if after < q <= upto), reverse=True))
    return out


def _window(rng, n_msgs, fine_from, split_at):
    cfg = rc.EngineConfig(bounds=(0.0, 0.0, 10.0, 10.0), window=n_msgs)
    eng = rc.Engine(cfg)
    # grid locations and repeated texts: many equal scores, so ties are cut by seq
    texts = [" ".join(rng.choice(WORDS[: int(rng.integers(8, 150))], size=int(rng.integers(1, 9))))
             for _ in range(40)]
    msgs = [rc.Message(i, float(rng.integers(0, 11)), float(rng.integers(0, 11)),
                       text=texts[int(rng.integers(0, 40))] if rng.random() < 0.3 else
                       " ".join(rng.choice(WORDS, size=int(rng.integers(1, 9)))))
            for i in range(n_msgs)]
    subs = [rc.Subscription(i, float(rng.integers(0, 11)), float(rng.integers(0, 11)),
                            text=" ".join(rng.choice(WORDS[: int(rng.integers(5, 150))], size=int(rng.integers(1, 7)))),
                            k=int(rng.integers(1, 20)), alpha=float(rng.choice([0.0, 0.3, 0.5, 1.0, rng.random()])))
            for i in range(200)]
    mb, pend = eng.encoder.encode_messages(msgs, time_window=False)
    eng.encoder.commit(pend)
    sb, pend = eng.encoder.encode_subscriptions(subs)
    eng.encoder.commit(pend)
    win = MessageWindow(cfg)
    win.fine_from, win.split_at = fine_from, split_at
    seqs = np.arange(len(mb), dtype=np.int64) * 2      # gaps: ranges fall between messages
    for a in range(0, len(mb), 97):
        b = min(len(mb), a + 97)
        win.append(mb.take(np.arange(a, b)), seqs[a:b])
    win.expire(int(seqs[len(mb) // 5]))                 # chunks partly expired
    return win, sb


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("flat_upto", [-1, 30, 10 ** 9])
def test_flat_and_best_first_searches_equal_brute_force(seed, flat_upto):
    """``flat_upto``: -1 walks the index for every row, 10**9 reads every row flat, 30 mixes
    the two within a batch. Deep trees (small split sizes) on odd seeds."""
    rng = np.random.default_rng(seed)
    win, sb = _window(rng, 1500, *((3, 2) if seed % 2 else (16, 256)))
    win.flat_upto = flat_upto
    flat = win._flat_rows(sb)[0]
    if flat_upto == 30:
        assert flat.any() and not flat.all()
    K = np.maximum(sb.k * int(rng.integers(1, 4)), 1).astype(np.int64)
    K[::7] = 400                                           # more than any row matches
    seqs = win.seqs()
    for after, upto in ((-1, int(seqs[-1])), (int(seqs[300]), int(seqs[900]) + 1)):
        every = _brute(win, sb, after, upto)
        floor = np.full(len(K), -np.inf)
        pick = rng.random(len(K)) < 0.4
        floor[pick] = rng.choice([0.2, 0.4, 0.5, 0.6], pick.sum())
        for fl in (None, floor):
            got = win.search(sb, K, after_seq=after, upto_seq=upto, floor=fl)
            fl = np.full(len(K), -np.inf) if fl is None else fl
            for i in range(len(K)):
                a, b = got.offsets[i], got.offsets[i + 1]
                rows = list(zip(got.score[a:b].tolist(), got.seq[a:b].tolist()))
                want = [r for r in every[i] if not below(r[0], fl[i])][: K[i]]
                assert rows == want, (i, bool(flat[i]))
                assert bool(got.complete[i]) == (len(rows) < K[i] and fl[i] == -np.inf), i


def test_small_batches_walk_the_index():
    """Gathering reads the whole window: a batch with fewer flat rows than one per
    ``FLAT_BATCH`` live postings walks the index for every row."""
    rng = np.random.default_rng(9)
    win, sb = _window(rng, 1500, 16, 256)
    win.flat_upto = 10 ** 9
    few = (win.tcount - win.thead) // FLAT_BATCH
    assert few >= 2
    assert not win._flat_rows(sb.take(np.arange(few - 1)))[0].any()
    assert win._flat_rows(sb.take(np.arange(few + 1)))[0].all()
    # a batch too small for any flat row (decided before the postings are counted) and one
    # just large enough: both exact
    seqs = win.seqs()
    for n in (1, few - 1, few + 1):
        small = sb.take(np.arange(n))
        K = np.full(n, 5, np.int64)
        got = win.search(small, K, after_seq=-1, upto_seq=int(seqs[-1]))
        every = _brute(win, small, -1, int(seqs[-1]))
        for i in range(n):
            a, b = got.offsets[i], got.offsets[i + 1]
            assert list(zip(got.score[a:b].tolist(), got.seq[a:b].tolist())) == every[i][:5], (n, i)


@pytest.mark.parametrize("seed", range(2))
def test_small_batches_answer_ranges_floors_ids_and_flags(seed):
    """The stream's questions (batches too small for a flat row, answered in one kernel
    call) over every row: a sub-range of seqs, floors, K from 1 to more than any row
    matches; rows, completeness flags, message ids and times equal brute force."""
    rng = np.random.default_rng(20 + seed)
    win, sb = _window(rng, 1500, *((3, 2) if seed else (16, 256)))
    few = (win.tcount - win.thead) // FLAT_BATCH
    snap, seqs = win.snapshot(), win.seqs()
    id_of = dict(zip(seqs.tolist(), snap.ids.tolist()))
    t_of = dict(zip(seqs.tolist(), snap.t.tolist()))
    for after, upto in ((-1, int(seqs[-1])), (int(seqs[200]), int(seqs[1100]) + 1)):
        every = _brute(win, sb, after, upto)
        for a0 in range(0, len(sb), few - 1):
            rows = np.arange(a0, min(len(sb), a0 + few - 1))
            small = sb.take(rows)
            assert not win._flat_rows(small)[0].any()
            K = rng.integers(1, 12, len(rows)).astype(np.int64)
            K[rng.random(len(rows)) < 0.2] = 400
            floor = np.where(rng.random(len(rows)) < 0.4, rng.choice([0.2, 0.4, 0.6], len(rows)), -np.inf)
            got = win.search(small, K, after_seq=after, upto_seq=upto, floor=floor)
            for i, r in enumerate(rows.tolist()):
                a, b = got.offsets[i], got.offsets[i + 1]
                want = [x for x in every[r] if not below(x[0], floor[i])][: K[i]]
                assert list(zip(got.score[a:b].tolist(), got.seq[a:b].tolist())) == want, (r, after)
                assert got.ids[a:b].tolist() == [id_of[q] for q in got.seq[a:b].tolist()], r
                assert np.array_equal(got.t[a:b], [t_of[q] for q in got.seq[a:b].tolist()], equal_nan=True), r
                assert bool(got.complete[i]) == (len(want) < K[i] and floor[i] == -np.inf), r


def test_reserve_keeps_the_index_and_stops_its_growth():
    """``reserve`` mid-stream (the ring wrapped, chunks partly expired) keeps the messages and
    every search exact, and appending up to the reserved number of held messages grows none
    of the index's arrays, where the same appends grow every one of them without it."""
    def grown(reserve: bool):
        win, sb = _window(np.random.default_rng(5), 1500, 3, 2)
        held, before = len(win), win.snapshot()
        if reserve:
            win.reserve(3 * held)
            after = win.snapshot()
            for f in ("ids", "x", "y", "offsets", "term_ids", "weights"):
                assert np.array_equal(getattr(before, f), getattr(after, f)), f
        arrays = (win.r_seq, win.tr_term, win.ch_i, win.nd_i)
        last = int(win.seqs()[-1])
        for rep in range(2):          # the same messages again, under new ids
            for a in range(0, held - 97, 97):
                part = before.take(np.arange(a, a + 97))
                part.ids = part.ids + (rep + 1) * 10 ** 6
                win.append(part, np.arange(last + 1, last + 98, dtype=np.int64))
                last += 97
        assert len(win) > 2.8 * held
        changed = [x is not y for x, y in zip(arrays, (win.r_seq, win.tr_term, win.ch_i, win.nd_i))]
        win.expire(int(win.seqs()[len(win) // 2]))        # through the messages held at the reserve
        return win, sb, last, changed

    plain, _, _, changed = grown(False)
    assert all(changed)
    win, sb, last, changed = grown(True)
    assert not any(changed), changed
    # the same live counts per term and per index node as the window that grew as it went
    assert np.array_equal(win.term_live, plain.term_live[: len(win.term_live)])
    tree = slice(NI_CHILD, None)          # the nodes' links and counts (chunk ids differ)
    assert win.n_nd == plain.n_nd and np.array_equal(win.nd_i[: win.n_nd, tree], plain.nd_i[: plain.n_nd, tree])
    K = np.maximum(sb.k, 1).astype(np.int64)
    got = win.search(sb, K, after_seq=-1, upto_seq=last)
    for i, want in enumerate(_brute(win, sb, -1, last)):
        a, b = got.offsets[i], got.offsets[i + 1]
        assert list(zip(got.score[a:b].tolist(), got.seq[a:b].tolist())) == want[: K[i]], i


def test_window_shard_sizes_its_index_once_half_full():
    """A window shard reserves its ``capacity`` (its share of the window and of the steps in
    flight) in the step where it first holds half of it: its rings then hold the capacity
    without growing (chunks and nodes per message grow at this toy size as nodes split;
    ``test_reserve_keeps_the_index_and_stops_its_growth`` covers them)."""
    from rankcast.kinds.spatial.roles.shard import WindowShard

    win, _ = _window(np.random.default_rng(3), 1500, 16, 256)
    msgs = win.snapshot()
    cfg = rc.EngineConfig(bounds=(0.0, 0.0, 10.0, 10.0), window=800)
    shard = WindowShard(cfg, 0, export_metrics=False, capacity=1000)
    rings = None
    for j, a in enumerate(range(0, 1100, 100), start=1):
        seqs = np.arange(a, a + 100, dtype=np.int64)
        shard.append(j, (msgs.take(np.arange(a, a + 100)), seqs), a + 99 - 1000, a + 99 - 1000)
        assert shard._reserved == (a + 100 >= 500), j
        if a + 100 == 500:
            rings = (shard.window.r_seq, shard.window.tr_term)
            assert len(rings[0]) >= 1000
    assert len(shard.window) == 1000
    assert rings[0] is shard.window.r_seq and rings[1] is shard.window.tr_term


@pytest.mark.parametrize("seed", range(2))
def test_shards_asked_for_a_share_of_k_merge_to_an_exact_prefix(seed):
    """The window split over shards (seq mod S), each asked for fewer than K candidates
    (``asked``): the merge keeps an exact prefix of the whole window's top-K, all K where
    the answers certify them, complete only where every match is listed. With a share of
    1 most rows are cut short; with ``shard_candidates`` most keep K."""
    from rankcast.kinds.spatial.roles.aggregator import merge_candidates, shard_candidates
    rng = np.random.default_rng(40 + seed)
    win, sb = _window(rng, 1500, *((3, 2) if seed else (16, 256)))
    snap, seqs = win.snapshot(), win.seqs()
    S = 5
    shards = []
    for s in range(S):
        w = MessageWindow(rc.EngineConfig(bounds=(0.0, 0.0, 10.0, 10.0), window=1500))
        rows = np.flatnonzero(np.arange(len(seqs)) % S == s)
        w.append(snap.take(rows), seqs[rows])
        shards.append(w)
    K = np.maximum(sb.k * int(rng.integers(1, 4)), 1).astype(np.int64)
    K[::7] = 400
    after, upto = -1, int(seqs[-1])
    every = _brute(win, sb, after, upto)
    for asked in (np.ones(len(K), np.int64), shard_candidates(K, S), K):
        got = merge_candidates([w.search(sb, asked, after_seq=after, upto_seq=upto) for w in shards], K, asked)
        short = 0
        for i in range(len(K)):
            a, b = got.offsets[i], got.offsets[i + 1]
            rows = list(zip(got.score[a:b].tolist(), got.seq[a:b].tolist()))
            want = every[i][: K[i]]
            assert rows == want[: len(rows)], (i, asked[i])
            short += len(rows) < len(want)
            if got.complete[i]:                         # complete: every match listed
                assert rows == every[i], i
            if len(every[i]) < asked[i]:                # no shard filled its share
                assert got.complete[i], i
        if asked is K:
            assert short == 0
        elif asked[0] == 1:
            assert short > len(K) // 4
        else:
            assert short < len(K) // 10


def _check_nodes(win: MessageWindow) -> int:
    """The index's nodes are those of the postings held: every node reachable from a term's
    root has postings below it (its live count, checked against the held postings), its
    sibling links run both ways, ``nd_of`` maps exactly the reachable non-root nodes' keys,
    and every other row of those used is on the free list. Returns the open nodes."""
    nd_i = win.nd_i
    live = np.zeros(win.n_nd, np.int64)
    for q in range(win.thead, win.tcount):          # each held posting counts on its path
        nd = int(win.tr_bk[q & win.tmask])
        while nd >= 0:
            live[nd] += 1
            nd = int(nd_i[nd, NI_PARENT])
    seen = set()
    stack = [int(r) for r in win.term_root if r >= 0]
    for r in stack:
        assert nd_i[r, NI_PARENT] == -1 and nd_i[r, NI_KEY] == -1
    while stack:
        nd = stack.pop()
        assert nd not in seen
        seen.add(nd)
        assert nd_i[nd, NI_LIVE] == live[nd] > 0, nd
        ch, prev = int(nd_i[nd, NI_CHILD]), -1
        while ch >= 0:
            assert nd_i[ch, NI_PARENT] == nd and nd_i[ch, NI_PREV] == prev
            assert win.nd_of[int(nd_i[ch, NI_KEY])] == ch
            stack.append(ch)
            prev, ch = ch, int(nd_i[ch, NI_NEXT])
    assert len(win.nd_of) == sum(1 for nd in seen if nd_i[nd, NI_PARENT] >= 0)
    free = set(win.nd_free[: win.n_nd_free].tolist())
    assert len(free) == win.n_nd_free and not free & seen and len(free) + len(seen) == win.n_nd
    assert not live[list(free)].any()
    return len(seen)


@pytest.mark.parametrize("fine_from,split_at", [(3, 2), (16, 256)])
def test_nodes_close_with_their_last_posting(fine_from, split_at):
    """A sliding window over a stream of new places and drifting words: a node whose last
    posting expires is closed and its row reused, so the rows in use stay those the held
    postings need (a node used to stay forever: about three a message on such a stream), the
    structure stays sound (``_check_nodes``) and every search equals brute force after every
    call, walking the index or reading rows flat."""
    rng = np.random.default_rng(fine_from)
    cfg = rc.EngineConfig(bounds=(0.0, 0.0, 10.0, 10.0), window=300)
    eng = rc.Engine(cfg)
    words = [f"d{i}" for i in range(400)]
    msgs = [rc.Message(i, float(rng.random() * 10), float(rng.random() * 10),
                       text=" ".join(rng.choice(words[i // 8: i // 8 + 60], size=int(rng.integers(1, 6)))))
            for i in range(2400)]
    mb, pend = eng.encoder.encode_messages(msgs, time_window=False)
    eng.encoder.commit(pend)
    subs = [rc.Subscription(i, float(rng.random() * 10), float(rng.random() * 10),
                            text=" ".join(rng.choice(words, size=int(rng.integers(1, 5)))), k=5,
                            alpha=float(rng.choice([0.0, 0.5, 1.0])))
            for i in range(60)]
    sb, pend = eng.encoder.encode_subscriptions(subs)
    eng.encoder.commit(pend)
    win = MessageWindow(cfg)
    win.fine_from, win.split_at = fine_from, split_at
    seqs = np.arange(len(mb), dtype=np.int64)
    most = 0
    for a in range(0, len(mb), 50):
        b = min(len(mb), a + 50)
        win.append(mb.take(np.arange(a, b)), seqs[a:b])
        most = max(most, _check_nodes(win))         # the most open at once: before the expiry
        win.expire(b - 1 - 300)
        _check_nodes(win)
        K = np.full(len(sb), 7, np.int64)
        win.flat_upto = -1 if (a // 50) % 2 else FLAT_UPTO       # the index walked, or rows read flat
        got = win.search(sb, K, after_seq=-1, upto_seq=int(seqs[b - 1]))
        every = _brute(win, sb, -1, int(seqs[b - 1]))
        for i in range(len(sb)):
            lo, hi = got.offsets[i], got.offsets[i + 1]
            assert list(zip(got.score[lo:hi].tolist(), got.seq[lo:hi].tolist())) == every[i][:7], (a, i)
            assert np.array_equal(got.ids[lo:hi], got.seq[lo:hi])        # message i has seq i
    # rows are reused: a new row is taken only when every row is open
    assert win.n_nd == most and win.n_nd_free > 0

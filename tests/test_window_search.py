"""The message index's search against brute force, row by row: the best-first walk of the
index and the batch's flat path (every posting of a row's terms, gathered once per batch)
give the same top-K, the same score bits and the same flags, for any mix of the two."""
from __future__ import annotations

import numpy as np
import pytest

import rankcast as rc
from rankcast.indexing.scoring import below
from rankcast.indexing.window import FLAT_BATCH, MessageWindow
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

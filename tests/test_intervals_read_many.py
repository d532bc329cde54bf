"""``read_many`` (the cursors in one compiled call) of every scored interval index equals the
1-D oracle's first ``g`` rows for every query, for one count and for one count per query;
``entries`` counts what each structure stores."""
from __future__ import annotations

import numpy as np
import pytest

from rankcast.kinds.matching.intervals import INDEX_CLASSES, index_class

from tests.test_intervals_tree import oracle, query_points, workload

NAMES = sorted(INDEX_CLASSES)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("n,seed", [(0, 0), (1, 1), (7, 2), (300, 3)])
@pytest.mark.parametrize("b", [2, 50])
def test_read_many_equals_oracle(name, n, seed, b):
    rng = np.random.default_rng(seed)
    lo, hi, score, item = workload(rng, n)
    ix = index_class(name)(lo, hi, score, item, b=b)
    qs = query_points(lo, hi)
    for g in (0, 1, 5, 10 ** 6, rng.integers(0, 12, len(qs))):
        off, items, scores = ix.read_many(qs, g)
        assert off.shape == (len(qs) + 1,) and off[0] == 0 and off[-1] == len(items) == len(scores)
        gs = np.broadcast_to(np.asarray(g), qs.shape)
        for i, q in enumerate(qs):
            want_items, want_scores = oracle(lo, hi, score, item, q)
            assert np.array_equal(items[off[i]:off[i + 1]], want_items[: gs[i]]), (name, q, gs[i])
            assert np.array_equal(scores[off[i]:off[i + 1]], want_scores[: gs[i]]), (name, q, gs[i])


@pytest.mark.parametrize("name", NAMES)
def test_read_many_bad_input(name):
    ix = index_class(name)(np.zeros(2), np.ones(2), np.ones(2), np.arange(2, dtype=np.int64))
    with pytest.raises(ValueError):
        ix.read_many(np.array([np.nan]), 1)
    with pytest.raises(ValueError):
        ix.read_many(np.array([0.5]), -1)


def test_entries_per_structure():
    rng = np.random.default_rng(5)
    n = 5000
    lo = rng.random(n)
    hi = lo + rng.random(n) * 0.3
    score = rng.random(n)
    item = np.arange(n, dtype=np.int64)
    got = {name: index_class(name)(lo, hi, score, item, b=50).entries() for name in NAMES}
    assert got["interval-tree"] == n
    assert n < got["r-tree"] == got["sopt-r-tree"] <= 1.1 * n      # rows plus one entry per node
    assert n <= got["ir-tree"]
    assert got["segment-tree"] > 2 * n                              # canonical covers: several nodes each

"""The paper's worked numbers (Examples 2 to 6 and 8) through the bound functions, plus the
safety properties every bound must keep (never below the exact value it bounds)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from rankcast.kinds.spatial.scoring import (alpha_star, below, kscore_star, lambda_s, lambda_t, score_py,
                                       ssim_ub, ssim_ub_out, tsim_ub)


def test_example_2_lambda_t():
    # kScore 0.7, alpha 0.6, SSimUB 0.98 -> lambda_T = 0.28
    assert lambda_t(0.7, 0.6, 0.98) == pytest.approx(0.28)


def test_example_3_prefix_skip():
    # wtsum(s1.w4) = 0.1 < lambda_T = 0.28: w4 is outside the location-aware prefix
    assert 0.1 < lambda_t(0.7, 0.6, 0.98)


def test_example_4_max_weight_refinement():
    # SSimUB 0.99 gives lambda_T 0.26 (Example 4)
    assert lambda_t(0.7, 0.6, 0.99) == pytest.approx(0.26, abs=0.006)


def test_example_5_inner_outer_bounds():
    # MaxDist 1.6, inner 0.25, outer 0.3: SSimUB_in 0.84, SSimUB_out 0.81, combined 0.65 and
    # lambda_T(s2, m2) with kScore 0.6, alpha 0.5: 0.20 at SSimUB 1, 0.55 at 0.65.
    assert ssim_ub_out(0.25, 1.6) == pytest.approx(0.84, abs=0.005)
    assert ssim_ub_out(0.3, 1.6) == pytest.approx(0.81, abs=0.005)
    assert ssim_ub(0.25, 0.3, 1.6) == pytest.approx(0.65, abs=0.01)
    assert lambda_t(0.6, 0.5, 1.0) == pytest.approx(0.20)
    assert lambda_t(0.6, 0.5, ssim_ub(0.25, 0.3, 1.6)) == pytest.approx(0.55, abs=0.01)
    # a message inside the cell gets no spatial pruning
    assert ssim_ub(0.25, 0.0, 1.6) == 1.0


def test_example_6_unseen_keywords():
    # TSim(s3[1:2], m3[1:1]) = 0.28; TSimUB(s3[3:], m3[2:]) = min(0.4 * 0.3, 0.5 * 0.3) = 0.12
    # (wtsum_s 0.4, maxwt_s 0.5, wtsum_m 0.3, maxwt_m 0.3); 0.28 + 0.12 < 0.48: skip s3
    ub = tsim_ub(0.4, 0.5, 0.3, 0.3)
    assert ub == pytest.approx(0.12)
    assert below(0.28 + ub, 0.48)


def test_example_8_prefix_lambda():
    # lambda_T(s) with kScore 0.8, alpha 0.6 and SSimUB 1 (Eq. 18): 0.5
    assert lambda_t(0.8, 0.6, 1.0) == pytest.approx(0.5)


def test_starred_forms_and_edges():
    assert alpha_star(0.5) == 1.0 and math.isinf(alpha_star(1.0))
    assert kscore_star(0.3, 0.5) == pytest.approx(0.6)
    assert kscore_star(0.3, 1.0) == -math.inf          # alpha = 1: no textual threshold
    assert lambda_s(0.5, 0.0) == -math.inf             # alpha = 0: no spatial threshold
    assert lambda_s(0.9, 0.5) == pytest.approx(0.8)
    assert math.isinf(lambda_t(0.9, 1.0, 0.5)) and lambda_t(0.4, 1.0, 0.5) == 0.0


def test_below_never_prunes_equal_or_rounding():
    assert not below(0.7, 0.7)
    assert not below(0.7 - 1e-14, 0.7)
    assert below(0.69, 0.7)


def test_ssim_ub_bounds_true_similarity():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        x0, y0, x1, y1 = 0.2, 0.3, 0.5, 0.7
        s = (rng.uniform(x0, x1), rng.uniform(y0, y1))
        m = (rng.choice([rng.random(), x0, x1]), rng.choice([rng.random(), y0, y1]))
        d_in = min(s[0] - x0, x1 - s[0], s[1] - y0, y1 - s[1])
        dx = max(x0 - m[0], 0, m[0] - x1)
        dy = max(y0 - m[1], 0, m[1] - y1)
        d_out = math.hypot(dx, dy)
        true = 1 - math.hypot(s[0] - m[0], s[1] - m[1]) / math.sqrt(2)
        assert not below(ssim_ub(d_in, d_out, math.sqrt(2)), true)


def test_score_formula():
    sc = score_py(0, 0, 0.25, [1, 3], [0.6, 0.8], 3, 4, [3, 7], [1.0, 0.0001], 10.0)
    assert sc == pytest.approx(0.25 * 0.5 + 0.75 * 0.8)
    assert score_py(0, 0, 0.5, [1], [1.0], 0, 0, [2], [1.0], 1.0) == -1.0


def test_weight_sketch_bounds_every_weight():
    # the message index's per-posting sketch: byte t & 7 must bound the weight of every term t
    # of the message, at the byte edges (multiples of 1/255), at 0 and at 1 included
    from rankcast.kinds.spatial.window import _sketch, _sketch_ub
    rng = np.random.default_rng(1)
    edges = np.concatenate([np.arange(256) / 255.0, [0.0, 1.0, np.nextafter(1.0, 0.0)]])
    for trial in range(3000):
        n = int(rng.integers(1, 20))
        terms = rng.choice(10_000, size=n, replace=False)
        w = rng.random(n) if trial % 2 else rng.choice(edges, size=n)
        qw = 0
        for t, x in zip(terms.tolist(), w.tolist()):
            qw = _sketch(qw, t, x)
        for t, x in zip(terms.tolist(), w.tolist()):
            assert _sketch_ub(qw, t) >= x
        # a byte no term of the message maps to stays 0 (it bounds an absent term's weight)
        used = {t & 7 for t in terms.tolist()}
        for b in set(range(8)) - used:
            assert _sketch_ub(qw, b) == 0.0


def test_score_at_equals_score_bit_for_bit():
    """``score_at`` (the verification of igpt._match, terms read in place from pools) gives the
    bits of ``score`` over the same spans, NO_MATCH included, with spans that start and end
    inside larger pools."""
    import numba

    from rankcast.kinds.spatial.scoring import NO_MATCH, score, score_at

    @numba.njit(cache=False)
    def at(sx, sy, alpha, st, sw, s0, s1, mx, my, mt, mw, m0, m1, md):
        return score_at(sx, sy, alpha, st, sw, s0, s1, mx, my, mt, mw, m0, m1, md)

    rng = np.random.default_rng(7)
    seen = {True: 0, False: 0}
    for _ in range(400):
        st = np.sort(rng.choice(40, rng.integers(1, 9), replace=False)).astype(np.int64)
        mt = np.sort(rng.choice(40, rng.integers(1, 12), replace=False)).astype(np.int64)
        sw, mw = rng.random(len(st)), rng.random(len(mt))
        # the spans inside pools with other terms around them (shared ones too)
        ps, pw = np.concatenate([[0, 1], st, [2, 3]]).astype(np.int64), np.concatenate([[.5, .5], sw, [.5, .5]])
        qs, qw = np.concatenate([[5], mt, [1, 2, 3]]).astype(np.int64), np.concatenate([[.5], mw, [.5, .5, .5]])
        args = (rng.random(), rng.random(), rng.random())
        want = score(args[0], args[1], args[2], st, sw, 0.3, 0.6, mt, mw, 1.7)
        got = at(args[0], args[1], args[2], ps, pw, 2, 2 + len(st), 0.3, 0.6, qs, qw, 1, 1 + len(mt), 1.7)
        assert got == want or (math.isnan(got) and math.isnan(want))
        seen[want == NO_MATCH] += 1
    assert seen[True] and seen[False]

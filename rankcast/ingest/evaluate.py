"""Offline evaluation in Spark: exact top-k by brute force, agreement, policy costs, Table 3.

:func:`exact_topk_spark` is the oracle of a running system: it joins subscriptions and
window messages on their shared terms in Spark, scores every pair with the score kernel of
:mod:`rankcast.kinds.spatial.scoring` (so bits agree with the engine), ranks by score desc, then
newer first, and keeps k. :func:`compare` checks a live system against it;
:func:`policy_costs_spark` estimates, before deploying, what each distribution policy of
the paper (7.3) would cost; :func:`workload_stats_spark` gives the Table 3 statistics.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numba
import numpy as np
import pandas as pd
import pyarrow as pa

from rankcast.common.arrays import runs
from rankcast.kinds.spatial.columns import Encoder, MessageBatch, SubscriptionBatch
from rankcast.kinds.spatial.scoring import below, score, suffix_stats
from .readers import to_spark

__all__ = ["exact_topk_spark", "compare", "policy_costs_spark", "workload_stats_spark",
           "encode_snapshot", "loose_prefix_lengths", "keyword_partition", "window_rows",
           "offline_evaluation", "exact_matches_spark", "compare_matches"]

TopK = dict[int, list[tuple[int, float]]]


@numba.njit(cache=True)
def _score_candidates(s, ms, s_x, s_y, s_alpha, s_off, s_terms, s_w,
                      m_x, m_y, m_off, m_terms, m_w, max_dist):
    """Scores of subscription ``s`` against messages ``ms`` (int64[c]) with :func:`score`.

    CSR arrays as in :class:`~rankcast.kinds.spatial.columns.SubscriptionBatch` / ``MessageBatch``.
    Returns float64[c] (NO_MATCH where no term is shared)."""
    out = np.empty(ms.shape[0], np.float64)
    a, b = s_off[s], s_off[s + 1]
    for i in range(ms.shape[0]):
        m = ms[i]
        c, d = m_off[m], m_off[m + 1]
        out[i] = score(s_x[s], s_y[s], s_alpha[s], s_terms[a:b], s_w[a:b],
                       m_x[m], m_y[m], m_terms[c:d], m_w[c:d], max_dist)
    return out


def encode_snapshot(subs, window, cfg, encoder: Encoder | None = None):
    """Subscriptions and window messages as batches with one term dictionary.

    ``subs``/``window`` are anything the Encoder accepts, or already encoded batches (from
    an engine snapshot, so term ids are the engine's). The window's ``seq`` (publish order)
    is its ``seq`` column when it has one, else its row order. Returns (subs, msgs, seq).
    """
    enc = encoder if encoder is not None else Encoder(cfg.bounds, cfg.vocabulary)
    seq = None
    if isinstance(window, (pa.Table, pa.RecordBatch)) and "seq" in window.schema.names:
        seq = np.asarray(window.column("seq").to_numpy(zero_copy_only=False), np.int64)
    elif hasattr(window, "columns") and "seq" in getattr(window, "columns", ()):
        seq = np.asarray(window["seq"], np.int64)
    if isinstance(subs, SubscriptionBatch):
        sb = subs
    else:
        sb, pending = enc.encode_subscriptions(subs)
        enc.commit(pending)
    if isinstance(window, MessageBatch):
        mb = window
    else:
        mb, pending = enc.encode_messages(window, time_window=False)
        enc.commit(pending)
    if seq is None:
        seq = np.arange(len(mb), dtype=np.int64)
    return sb, mb, seq


def _exploded(offsets: np.ndarray, term_ids: np.ndarray, rows: np.ndarray, name: str) -> pd.DataFrame:
    lens = offsets[rows + 1] - offsets[rows]
    pos = np.concatenate([np.arange(offsets[r], offsets[r + 1]) for r in rows]) if len(rows) \
        else np.zeros(0, np.int64)
    return pd.DataFrame({name: np.repeat(rows, lens).astype(np.int64),
                         "term": term_ids[pos].astype(np.int64)})


def exact_topk_spark(subs, window, cfg, spark, *, sample: int | None = None, seed: int = 0,
                     ids: Sequence[int] | None = None, encoder: Encoder | None = None) -> TopK:
    """Exact top-k of subscriptions against a window snapshot, by a brute-force join in Spark.

    ``subs``: a subscription table/batch; ``window``: the messages in the window (table or
    batch, with ``seq`` for publish order, else row order); ``cfg``: the EngineConfig
    (bounds, vocabulary). ``sample`` evaluates that many random subscriptions, ``ids``
    exactly those. Returns {subscription id: [(message id, score), ...] best first}.
    """
    sb, mb, seq = encode_snapshot(subs, window, cfg, encoder)
    rows = np.arange(len(sb), dtype=np.int64)
    if ids is not None:
        pos = {int(i): r for r, i in enumerate(sb.ids.tolist())}
        rows = np.asarray([pos[int(i)] for i in ids], np.int64)
    elif sample is not None and sample < len(sb):
        rows = np.sort(np.random.default_rng(seed).choice(len(sb), sample, replace=False))
    result: TopK = {int(sb.ids[r]): [] for r in rows}
    if not len(rows) or not len(mb):
        return result
    sc = spark.sparkContext
    arrays = {"s_x": sb.x, "s_y": sb.y, "s_alpha": sb.alpha, "s_off": sb.offsets,
              "s_terms": sb.term_ids, "s_w": sb.weights, "s_k": sb.k,
              "m_x": mb.x, "m_y": mb.y, "m_off": mb.offsets, "m_terms": mb.term_ids,
              "m_w": mb.weights, "m_ids": mb.ids, "seq": seq}
    bc = sc.broadcast(arrays)
    max_dist = float(cfg.max_dist)

    def top_of_group(pdf: pd.DataFrame) -> pd.DataFrame:
        a = bc.value
        s = int(pdf["s"].iloc[0])
        ms = pdf["m"].to_numpy(np.int64)
        sc_ = _score_candidates(s, ms, a["s_x"], a["s_y"], a["s_alpha"], a["s_off"],
                                a["s_terms"], a["s_w"], a["m_x"], a["m_y"], a["m_off"],
                                a["m_terms"], a["m_w"], max_dist)
        order = np.lexsort((-a["seq"][ms], -sc_))[: int(a["s_k"][s])]
        return pd.DataFrame({"s": np.full(len(order), s, np.int64),
                             "rank": np.arange(len(order), dtype=np.int32),
                             "m": ms[order], "score": sc_[order]})

    sub_terms = spark.createDataFrame(_exploded(sb.offsets, sb.term_ids, rows, "s"))
    msg_terms = spark.createDataFrame(
        _exploded(mb.offsets, mb.term_ids, np.arange(len(mb), dtype=np.int64), "m"))
    pairs = sub_terms.join(msg_terms, "term").select("s", "m").distinct()
    top = (pairs.groupBy("s")
                .applyInPandas(top_of_group, "s long, rank int, m long, score double")
                .toPandas())
    bc.unpersist()
    top = top.sort_values(["s", "rank"], kind="stable")
    for s, m, v in zip(top["s"].to_numpy(), top["m"].to_numpy(), top["score"].to_numpy()):
        result[int(sb.ids[s])].append((int(mb.ids[m]), float(v)))
    return result


def _rows_agree(exp: Sequence, act: Sequence, tol: float, strict: bool = False) -> bool:
    """Equal top-k lists: same ids in order, or - where scores tie within ``tol`` and not
    ``strict`` - the same scores with the tied messages in any order (the last tie run may
    be cut by k)."""
    exp = [(int(i), float(s)) for i, s in exp]
    act = [(int(i), float(s)) for i, s in act]
    if [i for i, _ in exp] == [i for i, _ in act] and \
            all(abs(a - b) <= tol for (_, a), (_, b) in zip(exp, act)):
        return True
    if strict:
        return False
    if len(exp) != len(act) or any(abs(a[1] - b[1]) > tol for a, b in zip(exp, act)):
        return False
    i = 0
    while i < len(exp):
        j = i + 1
        while j < len(exp) and abs(exp[j][1] - exp[i][1]) <= tol:
            j += 1
        if j < len(exp) and {m for m, _ in exp[i:j]} != {m for m, _ in act[i:j]}:
            return False
        i = j
    return True


def compare(expected: Mapping[int, Sequence], actual: Mapping[int, Sequence] | Any, *,
            tol: float = 1e-9, max_listed: int = 20, strict: bool = False) -> dict:
    """Agreement of ``actual`` top-k lists with ``expected`` ones.

    ``actual`` is a mapping like ``expected`` or any object with ``topk(sub_id)`` (an
    Engine, a Cluster). Returns {"subscriptions", "agree", "agreement" (percent),
    "differing" (ids), "examples" (up to ``max_listed`` expected/actual pairs)}. ``strict``:
    the same ids in the same order (ranked matching breaks ties by id); otherwise tied
    messages may come in any order (see :func:`_rows_agree`).
    """
    get = actual.topk if hasattr(actual, "topk") else (lambda s: actual.get(s, None))
    differing: list[int] = []
    examples: list[dict] = []
    for sid, exp in expected.items():
        try:
            act = get(sid)
        except KeyError:
            act = None
        if act is None or not _rows_agree(exp, act, tol, strict):
            differing.append(int(sid))
            if len(examples) < max_listed:
                examples.append({"id": int(sid), "expected": [list(p) for p in exp],
                                 "actual": None if act is None else [list(p) for p in act]})
    n = len(expected)
    return {"subscriptions": n, "agree": n - len(differing),
            "agreement": 100.0 * (n - len(differing)) / n if n else 100.0,
            "differing": differing, "examples": examples}


# ----------------------------------------------------------------------------- policy costs

@numba.njit(cache=True)
def loose_prefix_lengths(offsets, weights, alpha, kscore):
    """|pref(s)| of every subscription (paper Definition 12, Eq. 18).

    lambda_T(s) = kScore / (1 - alpha) - alpha / (1 - alpha) (SSimUB taken as 1); pref(s)
    is the first p terms (term-id order), p the smallest index >= 1 whose unseen weight sum
    wtsum(s[p:]) (Eq. 3) is safely below lambda_T; all terms when none is or alpha = 1.
    offsets int64[n + 1], weights float64[nnz], alpha float64[n], kscore float64[n] -> int64[n].
    """
    n = alpha.shape[0]
    out = np.empty(n, np.int64)
    longest = 0
    for i in range(n):
        longest = max(longest, offsets[i + 1] - offsets[i])
    wtsum = np.empty(longest + 1, np.float64)
    maxwt = np.empty(longest + 1, np.float64)
    for i in range(n):
        a, b = offsets[i], offsets[i + 1]
        length = b - a
        out[i] = length
        if alpha[i] >= 1.0 or length == 0:
            continue
        lam = kscore[i] / (1.0 - alpha[i]) - alpha[i] / (1.0 - alpha[i])
        suffix_stats(weights[a:b], wtsum[:length + 1], maxwt[:length + 1])
        for p in range(1, length + 1):
            if below(wtsum[p], lam):
                out[i] = p
                break
    return out


def keyword_partition(term_cost: np.ndarray, partitions: int) -> np.ndarray:
    """Consecutive term ranges of equal estimated cost (paper Algorithm 4, additive proxy).

    ``term_cost[t]`` = N(t) x p(t) for term id t (terms ordered by frequency). Cuts fall
    where the cumulative cost crosses i / partitions of the total, which is what recursive
    halving of Algorithm 4 reaches with an additive cost. Returns int64 partition per term.
    """
    v = len(term_cost)
    if v == 0:
        return np.zeros(0, np.int64)
    cum = np.cumsum(np.asarray(term_cost, np.float64))
    total = cum[-1]
    if total <= 0:
        return (np.arange(v) * partitions // v).astype(np.int64)
    return np.minimum((cum - 1e-12 * total) * partitions // total, partitions - 1).astype(np.int64)


def policy_costs_spark(subs, msgs, partitions: int, spark, *, cfg=None, vocabulary=None,
                       kscores: Mapping[int, float] | None = None) -> dict:
    """Replication ratio and communication cost per message of each policy (paper 7.3, Table 2).

    Estimates, computed in Spark from the tables before deploying:

    * hash, location: every subscription once (ratio 1), every message to all N partitions.
    * keyword: the vocabulary (in term-id order) cut into ``partitions`` consecutive ranges
      of equal sum of N(t) x p(t) (N: subscriptions with t, p: share of messages with t);
      a subscription goes to every range its terms touch, a message likewise.
    * prefix: the same with N counting loose prefixes only (Definition 12); kScore per
      subscription from ``kscores`` (e.g. the k-th exact score; 0 = fewer than k results,
      which makes the prefix the whole text, the state of a fresh deployment).

    Returns {policy: {"replication_ratio", "communication_cost", "load_imbalance"}} with
    load_imbalance = max / mean over partitions of the estimated cost N(W_i) x p(W_i)
    (subscriptions by id modulo N for hash; None for location, whose split is the cluster's).
    """
    from rankcast.kinds.spatial.text import TermDictionary
    from .vocab import weigh_spark

    vocab = vocabulary if vocabulary is not None else getattr(cfg, "vocabulary", None)
    if vocab is None:
        from .vocab import fit_vocabulary_spark
        vocab = fit_vocabulary_spark(msgs, spark)
    dictionary = TermDictionary(vocab)
    sdf = to_spark(subs, spark, "subscription")
    sdf, pending = weigh_spark(sdf.select(*[c for c in ("id", "alpha", "text", "terms") if c in sdf.columns]),
                               vocab, terms_col="terms", dictionary=dictionary)
    dictionary.commit(pending)
    mdf = to_spark(msgs, spark, "message")
    mdf, pending = weigh_spark(mdf.select(*[c for c in ("text", "terms") if c in mdf.columns]),
                               vocab, terms_col="terms", dictionary=dictionary)
    dictionary.commit(pending)
    n_terms = len(dictionary)
    ks = dict(kscores or {})
    sdf = sdf.select("id", *(["alpha"] if "alpha" in sdf.columns else []), "term_ids", "weights").cache()
    mdf = mdf.select("term_ids").cache()

    def csr(pdf):
        lists = [np.asarray(t, np.int64) if t is not None else np.zeros(0, np.int64)
                 for t in pdf["term_ids"]]
        off = np.zeros(len(lists) + 1, np.int64)
        np.cumsum([len(t) for t in lists], out=off[1:])
        return off, (np.concatenate(lists) if lists else np.zeros(0, np.int64))

    def sub_rows(pdf):
        """(terms csr, prefix csr) of a batch of weighted subscriptions."""
        off, tid = csr(pdf)
        w = [np.asarray(x, np.float64) if x is not None else np.zeros(0) for x in pdf["weights"]]
        ids = pdf["id"].to_numpy(np.int64)
        alpha = pdf["alpha"].to_numpy(np.float64) if "alpha" in pdf else np.full(len(ids), 0.5)
        kscore = np.asarray([ks.get(int(i), 0.0) for i in ids], np.float64)
        plen = loose_prefix_lengths(off, np.concatenate(w) if w else np.zeros(0), alpha, kscore)
        poff, keep = runs(off[:-1], plen)
        return ids, (off, tid), (poff, tid[keep])

    def term_counts(batches):
        # partial sums per Spark partition; the driver adds them up
        tc = np.zeros(n_terms)
        pc_ = np.zeros(n_terms)
        hc = np.zeros(partitions)
        n = 0
        for pdf in batches:
            if "id" in pdf:
                ids, (off, tid), (poff, ptid) = sub_rows(pdf)
                hc += np.bincount(ids % partitions, minlength=partitions)
                pc_ += np.bincount(ptid, minlength=n_terms)
            else:
                off, tid = csr(pdf)
            tc += np.bincount(tid, minlength=n_terms)   # terms are distinct within a row
            n += len(pdf)
        yield pd.DataFrame({"n": [n], "terms": [tc], "prefix": [pc_], "hash": [hc]})

    schema = "n long, terms array<double>, prefix array<double>, hash array<double>"

    def total(df):
        parts = df.mapInPandas(term_counts, schema).toPandas()
        return (int(parts["n"].sum()), np.sum(np.stack(parts["terms"].to_list()), axis=0),
                np.sum(np.stack(parts["prefix"].to_list()), axis=0),
                np.sum(np.stack(parts["hash"].to_list()), axis=0))

    n_subs, s_terms, s_prefix, hash_load = total(sdf)
    n_msgs, m_terms, _, _ = total(mdf)
    p_term = m_terms / max(n_msgs, 1)
    maps = np.stack([keyword_partition(s_terms * p_term, partitions),
                     keyword_partition(s_prefix * p_term, partitions)])
    bc = spark.sparkContext.broadcast(maps)

    def routed(batches):
        # per policy: sum over rows of distinct partitions, and rows per partition
        m = bc.value
        tot = np.zeros(2)
        per = np.zeros((2, partitions))
        for pdf in batches:
            if "id" in pdf:
                _, full, pref = sub_rows(pdf)
                sets = (full, pref)
            else:
                full = csr(pdf)
                sets = (full, full)
            for q in range(2):
                off, tid = sets[q]
                row = np.repeat(np.arange(len(off) - 1), np.diff(off))
                pairs = np.unique(row * partitions + m[q][tid]) if len(tid) else np.zeros(0, np.int64)
                tot[q] += len(pairs)
                per[q] += np.bincount(pairs % partitions, minlength=partitions)
        yield pd.DataFrame({"total": [tot], "per": [per.ravel()]})

    def route(df):
        parts = df.mapInPandas(routed, "total array<double>, per array<double>").toPandas()
        return (np.sum(np.stack(parts["total"].to_list()), axis=0),
                np.sum(np.stack(parts["per"].to_list()), axis=0).reshape(2, partitions))

    s_tot, s_per = route(sdf)
    m_tot, m_per = route(mdf)
    sdf.unpersist()
    mdf.unpersist()
    bc.unpersist()

    def imbalance(load):
        return float(load.max() / load.mean()) if load.mean() > 0 else 1.0

    report = {
        "hash": {"replication_ratio": 1.0, "communication_cost": float(partitions),
                 "load_imbalance": imbalance(hash_load)},
        "location": {"replication_ratio": 1.0, "communication_cost": float(partitions),
                     "load_imbalance": None},
    }
    for q, policy in enumerate(("keyword", "prefix")):
        report[policy] = {
            "replication_ratio": float(s_tot[q] / max(n_subs, 1)),
            "communication_cost": float(m_tot[q] / max(n_msgs, 1)),
            "load_imbalance": imbalance(s_per[q] * m_per[q] / max(n_msgs, 1)),
        }
    return report


# ----------------------------------------------------------------------------- Table 3

def workload_stats_spark(df_or_path, spark, text_col: str = "text") -> dict:
    """Table 3 statistics in Spark: ``messages``, ``avg_keywords`` (distinct keywords per
    row) and ``distinct_terms``; equal to :func:`rankcast.ingest.datasets.workload_stats`."""
    from pyspark.sql import functions as F

    df = to_spark(df_or_path, spark).select(F.col(text_col).alias("text"))

    def keywords(batches):
        from rankcast.kinds.spatial.text import tokenize

        for pdf in batches:
            terms: list = []
            for text in pdf["text"]:
                terms.append(None)   # one marker row per message
                if isinstance(text, str):
                    terms.extend(set(tokenize(text)))
            yield pd.DataFrame({"term": pd.Series(terms, dtype=object)})

    row = (df.mapInPandas(keywords, "term string")
             .agg(F.sum(F.when(F.col("term").isNull(), 1).otherwise(0)).alias("rows"),
                  F.count("term").alias("keywords"),
                  F.countDistinct("term").alias("distinct"))
             .first())
    n = int(row["rows"] or 0)
    return {"messages": n, "avg_keywords": (row["keywords"] or 0) / n if n else 0.0,
            "distinct_terms": int(row["distinct"] or 0)}


# ----------------------------------------------------------------------------- whole run

def window_rows(t: np.ndarray, cfg) -> np.ndarray:
    """Rows of a published stream (in order, times ``t``) that its window holds at the end."""
    n = len(t)
    if cfg.time_window:
        if n == 0:
            return np.zeros(0, np.int64)
        return np.flatnonzero(t > np.nanmax(t) - cfg.window_seconds).astype(np.int64)
    return np.arange(max(0, n - cfg.window), n, dtype=np.int64)


def offline_evaluation(target, subs, msgs, cfg, spark, *, sample: int | None = 1000, seed: int = 0,
                       partitions: int = 4, policies: bool = True) -> dict:
    """Evaluate a live system that subscribed ``subs`` and then published ``msgs`` in order.

    ``target`` has ``topk(id)`` (an Engine, a Cluster; ``topk_many`` is used when present)
    or is a mapping of id to top-k. The window is rebuilt from the stream and ``cfg``; the
    exact top-k of ``sample`` random subscriptions (all when None) comes from
    :func:`exact_topk_spark`. The report adds the Table 3 statistics of the stream and,
    with ``policies``, :func:`policy_costs_spark` over the sampled subscriptions with their
    exact kScores.
    """
    from .readers import read_messages, read_subscriptions

    subs = read_subscriptions(subs, validate=False)
    msgs = read_messages(msgs, validate=False)
    enc = Encoder(cfg.bounds, cfg.vocabulary)
    sb, pending = enc.encode_subscriptions(subs)
    enc.commit(pending)
    mb, pending = enc.encode_messages(msgs, time_window=cfg.time_window)
    enc.commit(pending)
    rows = window_rows(mb.t, cfg)
    pick = np.arange(len(sb))
    if sample is not None and sample < len(sb):
        pick = np.sort(np.random.default_rng(seed).choice(len(sb), sample, replace=False))
    ids = sb.ids[pick].tolist()
    expected = exact_topk_spark(sb, mb.take(rows), cfg, spark, ids=ids, encoder=enc)
    if hasattr(target, "topk_many"):
        actual = target.topk_many(ids)
    else:
        actual = target
    report = compare(expected, actual)
    report["window"] = int(len(rows))
    report["table3"] = workload_stats_spark(msgs, spark)
    if policies:
        k = dict(zip(sb.ids.tolist(), sb.k.tolist()))
        kscores = {s: (lst[-1][1] if len(lst) >= k[s] else 0.0) for s, lst in expected.items()}
        report["policies"] = policy_costs_spark(subs.take(pa.array(pick)), msgs, partitions, spark,
                                                cfg=cfg, kscores=kscores)
    return report


# ----------------------------------------------------------------------------- ranked matching

def exact_matches_spark(exprs, events, scoring: str, k: int, spark) -> dict[int, list[tuple[int, float]]]:
    """Each event's exact top-k expressions by a brute-force join in Spark: the expression
    table (docs/contract.md, "Tables"; a path, an Arrow table or a DataFrame) is
    split over Spark's tasks; each task checks every one of its expressions against every
    event (the compiled scan of :class:`rankcast.kinds.matching.scan.ScanCore`, the same score
    bits as the engine) and keeps its partial top-k; a window over events keeps the k best
    (score desc, id asc). ``events``: ``rc.Event`` objects or an event table (broadcast).
    Returns {event id: [(expression id, score), ...] best first}."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from rankcast.kinds.matching.scan import ScanCore
    from rankcast.kinds.matching.predicates import AttributeTable, encode_events, encode_expressions
    from .match_tables import events_table

    ev_table = events if isinstance(events, pa.Table) else events_table(events)
    ev_ids = ev_table.column("id").to_pylist()
    result: dict[int, list[tuple[int, float]]] = {int(i): [] for i in ev_ids}
    df = to_spark(exprs, spark, "expression")
    bc = spark.sparkContext.broadcast(ev_table)

    def partial(batches):
        for pdf in batches:
            if not len(pdf):
                continue
            attrs = AttributeTable()
            eb, pend = encode_expressions(pa.Table.from_pandas(pdf, preserve_index=False), attrs)
            attrs.commit(pend)
            evb, pend = encode_events(bc.value, attrs)
            attrs.commit(pend)
            core = ScanCore(scoring)
            core.add(eb, len(attrs))
            core.ev.grow(len(attrs))
            out_e, out_x, out_s = [], [], []
            for e, (ids, sc) in zip(evb.ids.tolist(), core.match(evb, k)):
                out_e.extend([e] * len(ids))
                out_x.extend(ids.tolist())
                out_s.extend(sc.tolist())
            yield pd.DataFrame({"event": np.array(out_e, np.int64), "expr": np.array(out_x, np.int64),
                                "score": np.array(out_s, np.float64)})

    parts = df.select("id", "score", "predicates").mapInPandas(partial, "event long, expr long, score double")
    w = Window.partitionBy("event").orderBy(F.col("score").desc(), F.col("expr").asc())
    top = (parts.withColumn("rank", F.row_number().over(w)).where(F.col("rank") <= k)
           .orderBy("event", "rank").toPandas())
    bc.unpersist()
    for e, x, s in zip(top["event"].tolist(), top["expr"].tolist(), top["score"].tolist()):
        result[int(e)].append((int(x), float(s)))
    return result


def compare_matches(expected: Mapping[int, Sequence], actual: Sequence, *, tol: float = 1e-9,
                    max_listed: int = 20) -> dict:
    """Agreement of live ``rc.Match`` lists with :func:`exact_matches_spark`'s; the same report
    as :func:`compare`, per event, strict: ties are broken by expression id (docs/contract.md)."""
    got = {m.event_id: list(m.top) for m in actual}
    out = compare(expected, got, tol=tol, max_listed=max_listed, strict=True)
    out["events"] = out.pop("subscriptions")
    return out


# ----------------------------------------------------------------------------- range top-k

def brute_range_topk(objs: pa.Table, sid: np.ndarray, lo: np.ndarray, hi: np.ndarray, k: int):
    """The brute-force top-k of ranges: ``objs`` (``id, x, y``, sorted by x), for each range
    the objects with lo <= x <= hi, the k of lowest (y, id). Returns (subscription ids,
    object ids, y) as rows, each range's best first."""
    ox, oy, oid = (objs.column(c).to_numpy() for c in ("x", "y", "id"))
    a = np.searchsorted(ox, lo, side="left")
    b = np.searchsorted(ox, hi, side="right")
    out_s, out_o = [], []
    for s_, i, j in zip(sid.tolist(), a.tolist(), b.tolist()):
        sel = np.lexsort((oid[i:j], oy[i:j]))[:k] + i
        out_s.append(np.full(len(sel), s_, np.int64))
        out_o.append(sel)
    rows = np.concatenate(out_o) if out_o else np.zeros(0, np.int64)
    return (np.concatenate(out_s) if out_s else np.zeros(0, np.int64)), oid[rows].astype(np.int64), \
        oy[rows].astype(np.float64)


def sorted_objects(updates: pa.Table) -> pa.Table:
    """The live objects after an object update table, sorted by (x, id): what
    :func:`brute_range_topk` takes."""
    from .range_tables import final_objects
    objs = final_objects(updates)
    order = np.lexsort((objs.column("id").to_numpy(), objs.column("x").to_numpy()))
    return objs.take(pa.array(order))


def exact_range_topk_spark(subs, updates, k: int, spark, *, sample: int | None = None,
                           seed: int = 0) -> dict[int, list[tuple[int, float]]]:
    """Each range subscription's exact top-k after the object update stream, by brute force
    in Spark: the live objects at the end of ``updates`` (an object update table applied in
    order: :func:`~rankcast.ingest.range_tables.final_objects`) are broadcast, sorted by x;
    the subscription table (a path, an Arrow table or a DataFrame; ``sample`` of them at
    random, None: all) is split over Spark's tasks, and each task takes, for each of its
    ranges, the objects with lo <= x <= hi and keeps the k of lowest (y, id). Returns
    {subscription id: [(object id, y), ...] lowest y first}."""
    from pyspark.sql import functions as F

    from .range_tables import read_object_updates

    upd = updates if isinstance(updates, pa.Table) else read_object_updates(updates, spark, validate=False)
    objs = sorted_objects(upd)
    df = to_spark(subs, spark, "range subscription").select("id", "lo", "hi")
    if sample is not None:
        ids = df.select("id").toPandas()["id"].to_numpy()
        if sample < len(ids):
            pick = np.random.default_rng(seed).choice(ids, sample, replace=False)
            df = df.where(F.col("id").isin([int(i) for i in pick]))
    bc = spark.sparkContext.broadcast(objs)

    def top(batches):
        for pdf in batches:
            sub, obj, y = brute_range_topk(bc.value, pdf["id"].to_numpy(np.int64), pdf["lo"].to_numpy(np.float64),
                                           pdf["hi"].to_numpy(np.float64), k)
            yield pd.DataFrame({"sub": sub, "obj": obj, "y": y})

    subs_pd = df.select("id").toPandas()
    rows = df.mapInPandas(top, "sub long, obj long, y double").toPandas()
    bc.unpersist()
    result: dict[int, list[tuple[int, float]]] = {int(i): [] for i in subs_pd["id"].tolist()}
    for s_, o_, y_ in zip(rows["sub"].tolist(), rows["obj"].tolist(), rows["y"].tolist()):
        result[int(s_)].append((int(o_), float(y_)))
    return result


def compare_ranges(expected: Mapping[int, Sequence], actual, *, tol: float = 0.0, max_listed: int = 20) -> dict:
    """Agreement of live range top-k lists (``actual``: a mapping, or anything with
    ``topk_many`` or ``topk``) with :func:`exact_range_topk_spark`'s, strict: ties are
    broken by object id (docs/contract.md, "Range top-k")."""
    from rankcast.errors import UnknownSubscription

    def one_by_one(target) -> dict:
        got = {}
        for sid in expected:
            try:
                got[sid] = target.topk(sid)
            except UnknownSubscription:
                pass
        return got

    if hasattr(actual, "topk_many"):
        try:
            actual = actual.topk_many(list(expected))
        except UnknownSubscription:         # some are gone: those are missing, one by one
            actual = one_by_one(actual)
    elif hasattr(actual, "topk"):
        actual = one_by_one(actual)
    return compare(expected, actual, tol=tol, max_listed=max_listed, strict=True)

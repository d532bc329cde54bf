"""Columnar batches and the conversion of every accepted input form into them.

Everything that crosses a kernel or an actor boundary is a :class:`SubscriptionBatch` or a
:class:`MessageBatch`: flat numpy arrays with the terms of row ``i`` in
``term_ids[offsets[i]:offsets[i+1]]`` (sorted by term id, weights L2-normalised).

Accepted inputs (wherever the contract says "subscriptions" or "messages"): an iterable of
:class:`~rankcast.Subscription` / :class:`~rankcast.Message`, a pyarrow Table or RecordBatch,
a pandas DataFrame, a Spark DataFrame, a mapping of column name to array, or an already
encoded batch. Field checks here are the ones that need no engine state; the engine adds the
state checks (live ids, ids in the window, time order). Errors name the item by position and
id and the field: ``subscription #3 (id=17): field 'alpha': must be in [0, 1], got nan``.

The size limits of :func:`rankcast.config.limits` (docs/contract.md, "Limits") are checked here too,
each before anything is allocated in proportion to the size it bounds: items per call
before the columns are built, characters of a text before it is tokenised, terms of an item
before its weights are.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from numbers import Real
from typing import Mapping, Sequence

import numpy as np

from rankcast.common.arrays import runs
from rankcast.config import Limits, limits
from rankcast.errors import InvalidInput
from rankcast.model import Message, Subscription
from .text import TermDictionary, Vocabulary
from rankcast.common.validation import _check_ids, _check_real, _check_unique, _first, _missing, _raw_columns, item_error, over_limit, plain, too_many

__all__ = ["SubscriptionBatch", "MessageBatch", "Encoder"]


def _concat_csr(batches, offsets_attr="offsets"):
    offs = [np.zeros(1, np.int64)]
    base = 0
    for b in batches:
        o = getattr(b, offsets_attr)
        offs.append(o[1:] + base)
        base += int(o[-1])
    return np.concatenate(offs)


def _take_csr(offsets, term_ids, weights, idx):
    idx = np.asarray(idx, dtype=np.int64)
    new_off, pos = runs(offsets[idx], offsets[idx + 1] - offsets[idx])
    return new_off, term_ids[pos], weights[pos]


@dataclass
class _Batch:
    def __len__(self) -> int:
        return len(self.ids)

    def take(self, idx):
        """Rows ``idx`` (an integer array or a boolean mask) as a new batch."""
        idx = np.asarray(idx)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
        off, tid, tw = _take_csr(self.offsets, self.term_ids, self.weights, idx)
        kw = {f.name: getattr(self, f.name)[idx] for f in fields(self)
              if f.name not in ("offsets", "term_ids", "weights")}
        return type(self)(offsets=off, term_ids=tid, weights=tw, **kw)

    @classmethod
    def concat(cls, batches: Sequence["_Batch"]):
        batches = list(batches)
        if not batches:
            return cls.empty()
        kw = {f.name: np.concatenate([getattr(b, f.name) for b in batches]) for f in fields(cls)
              if f.name != "offsets"}
        return cls(offsets=_concat_csr(batches), **kw)

    def row_terms(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        a, b = self.offsets[i], self.offsets[i + 1]
        return self.term_ids[a:b], self.weights[a:b]

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, f.name).nbytes for f in fields(self))


@dataclass
class SubscriptionBatch(_Batch):
    ids: np.ndarray        # int64[n]
    x: np.ndarray          # float64[n]
    y: np.ndarray          # float64[n]
    k: np.ndarray          # int64[n]
    alpha: np.ndarray      # float64[n]
    offsets: np.ndarray    # int64[n + 1]
    term_ids: np.ndarray   # int64[nnz], sorted within a row
    weights: np.ndarray    # float64[nnz], unit length per row

    @classmethod
    def empty(cls) -> "SubscriptionBatch":
        f, i = np.zeros(0, np.float64), np.zeros(0, np.int64)
        return cls(i, f, f, i, f, np.zeros(1, np.int64), i, f)


@dataclass
class MessageBatch(_Batch):
    ids: np.ndarray        # int64[n]
    x: np.ndarray          # float64[n]
    y: np.ndarray          # float64[n]
    t: np.ndarray          # float64[n], NaN where a message carries no time
    offsets: np.ndarray    # int64[n + 1]
    term_ids: np.ndarray   # int64[nnz]
    weights: np.ndarray    # float64[nnz]

    @classmethod
    def empty(cls) -> "MessageBatch":
        f, i = np.zeros(0, np.float64), np.zeros(0, np.int64)
        return cls(i, f, f, f, np.zeros(1, np.int64), i, f)


# ----------------------------------------------------------------------------- raw columns

_SUB_FIELDS = ("id", "x", "y", "k", "alpha", "text", "terms")
_MSG_FIELDS = ("id", "x", "y", "text", "terms", "t")


class Encoder:
    """Turns inputs into validated batches against fixed ``bounds`` and a term dictionary.

    ``encode_*`` returns the batch and the new terms it met; the caller commits them with
    :meth:`commit` once the whole call is known to be valid.
    """

    def __init__(self, bounds: Sequence[float], vocabulary: Vocabulary | None = None):
        self.bounds = tuple(float(b) for b in bounds)
        self.terms = TermDictionary(vocabulary)

    @property
    def vocabulary(self) -> Vocabulary:
        return self.terms.vocabulary

    def commit(self, pending: Mapping[str, int]) -> None:
        self.terms.commit(pending)

    # -------------------------------------------------------------------- shared pieces
    def _location(self, kind, ids, x, y):
        x = _check_real(kind, ids, x, "x")
        y = _check_real(kind, ids, y, "y")
        xmin, ymin, xmax, ymax = self.bounds
        for name, v, lo, hi in (("x", x, xmin, xmax), ("y", y, ymin, ymax)):
            bad = ~np.isfinite(v) | (v < lo) | (v > hi)
            if bad.any():
                p = _first(bad)
                raise item_error(kind, p, int(ids[p]), name,
                                 f"must be finite and within bounds [{lo}, {hi}], got {plain(v[p])!r}")
        return x, y

    def _texts(self, kind, ids, texts, terms, n, *, need_terms: bool, pending: dict, lim: Limits):
        texts = list(texts) if texts is not None else [None] * n
        terms = list(terms) if terms is not None else [None] * n
        offsets = np.zeros(n + 1, np.int64)
        all_ids: list[np.ndarray] = []
        all_w: list[np.ndarray] = []
        vocab = self.terms.vocabulary
        lookup = self.terms.lookup
        for p in range(n):
            text, tm = texts[p], terms[p]
            text = None if _missing(text) else text
            tm = None if _missing(tm) else tm
            if (text is None) == (tm is None):
                raise item_error(kind, p, int(ids[p]), "text/terms",
                                 "exactly one of text and terms is required")
            # (term id, raw weight) pairs: tf * idf of the text's tokens, or the given weights
            if text is not None:
                if not isinstance(text, str):
                    raise item_error(kind, p, int(ids[p]), "text",
                                     f"must be a string, got {type(text).__name__}")
                if len(text) > lim.max_text_chars:
                    raise item_error(kind, p, int(ids[p]), "text", over_limit(
                        "characters", len(text), "max_text_chars", lim.max_text_chars))
                raw = vocab.raw_weights(text)
                if len(raw) > lim.max_terms:
                    raise item_error(kind, p, int(ids[p]), "text", over_limit(
                        "distinct terms", len(raw), "max_terms", lim.max_terms))
            else:
                raw = _check_terms(kind, p, int(ids[p]), tm, lim.max_terms)
            pairs = [(lookup(t, pending), v) for t, v in raw.items()]
            if need_terms and not pairs:
                raise item_error(kind, p, int(ids[p]), "text" if text is not None else "terms",
                                 "a subscription needs at least one term")
            pairs.sort()      # by term id (distinct within a row)
            tid = np.array([t for t, _ in pairs], np.int64)
            w = np.array([v for _, v in pairs], np.float64)
            if len(w):
                w = w / math.sqrt(float(np.dot(w, w)))
            all_ids.append(tid)
            all_w.append(w)
            offsets[p + 1] = offsets[p] + len(tid)
        cat = lambda xs, dt: np.concatenate(xs) if xs else np.zeros(0, dt)
        return offsets, cat(all_ids, np.int64), cat(all_w, np.float64)

    # -------------------------------------------------------------------- public
    def encode_subscriptions(self, items) -> tuple[SubscriptionBatch, dict[str, int]]:
        kind = "subscription"
        lim = limits()
        if isinstance(items, SubscriptionBatch):
            self._check_batch_subs(items, lim)
            return items, {}
        cols = _raw_columns(items, kind, Subscription, lim.max_items, _SUB_FIELDS)
        for need in ("id", "x", "y"):
            if need not in cols:
                raise InvalidInput(f"subscription table: missing column '{need}'")
        ids = _check_ids(kind, cols["id"])
        n = len(ids)
        x, y = self._location(kind, ids, cols["x"], cols["y"])
        k = _check_real(kind, ids, cols["k"], "k", integer=True) if "k" in cols \
            else np.full(n, 20, np.int64)
        bad = k < 1
        if bad.any():
            p = _first(bad)
            raise item_error(kind, p, int(ids[p]), "k", f"must be an integer >= 1, got {plain(k[p])}")
        alpha = _check_real(kind, ids, cols["alpha"], "alpha") if "alpha" in cols \
            else np.full(n, 0.5)
        bad = ~((alpha >= 0.0) & (alpha <= 1.0))
        if bad.any():
            p = _first(bad)
            raise item_error(kind, p, int(ids[p]), "alpha", f"must be in [0, 1], got {plain(alpha[p])!r}")
        _check_unique(kind, ids)
        pending: dict[str, int] = {}
        off, tid, w = self._texts(kind, ids, cols.get("text"), cols.get("terms"), n,
                                  need_terms=True, pending=pending, lim=lim)
        return SubscriptionBatch(ids, x, y, k, alpha, off, tid, w), pending

    def encode_messages(self, items, *, time_window: bool) -> tuple[MessageBatch, dict[str, int]]:
        kind = "message"
        lim = limits()
        if isinstance(items, MessageBatch):
            self._check_batch_msgs(items, time_window, lim)
            return items, {}
        cols = _raw_columns(items, kind, Message, lim.max_items, _MSG_FIELDS)
        for need in ("id", "x", "y"):
            if need not in cols:
                raise InvalidInput(f"message table: missing column '{need}'")
        ids = _check_ids(kind, cols["id"])
        n = len(ids)
        x, y = self._location(kind, ids, cols["x"], cols["y"])
        t = self._times(kind, ids, cols.get("t"), n, time_window)
        _check_unique(kind, ids)
        pending: dict[str, int] = {}
        off, tid, w = self._texts(kind, ids, cols.get("text"), cols.get("terms"), n,
                                  need_terms=False, pending=pending, lim=lim)
        return MessageBatch(ids, x, y, t, off, tid, w), pending

    def _times(self, kind, ids, t, n, time_window):
        if t is None:
            t = np.full(n, np.nan)
        else:
            arr = np.asarray(t, dtype=object) if not isinstance(t, np.ndarray) else t
            if arr.dtype.kind in "fiu":
                t = arr.astype(np.float64)
            else:
                t = np.empty(n, np.float64)
                for p, v in enumerate(arr):
                    if v is None:
                        t[p] = np.nan
                    elif isinstance(v, bool) or not isinstance(v, Real):
                        raise item_error(kind, p, int(ids[p]), "t",
                                         f"must be a real number, got {plain(v)!r}")
                    else:
                        t[p] = float(v)
        if time_window:
            bad = ~np.isfinite(t)
            if bad.any():
                p = _first(bad)
                raise item_error(kind, p, int(ids[p]), "t",
                                 f"a time window needs a finite t, got {plain(t[p])!r}")
            bad = np.diff(t) < 0
            if bad.any():
                p = _first(bad) + 1
                raise item_error(kind, p, int(ids[p]), "t",
                                 f"must not decrease, got {plain(t[p])!r} after {plain(t[p - 1])!r}")
        else:
            bad = np.isinf(t)
            if bad.any():
                p = _first(bad)
                raise item_error(kind, p, int(ids[p]), "t", f"must be finite, got {plain(t[p])!r}")
        return t

    def _check_batch_common(self, kind, b, lim: Limits):
        if len(b) > lim.max_items:
            raise too_many(kind, len(b), lim.max_items)
        _check_ids(kind, b.ids)
        self._location(kind, b.ids, b.x, b.y)
        _check_unique(kind, b.ids)
        if len(b.offsets) != len(b) + 1 or b.offsets[0] != 0 or np.any(np.diff(b.offsets) < 0) \
                or b.offsets[-1] != len(b.term_ids) or len(b.weights) != len(b.term_ids):
            raise InvalidInput(f"{kind} batch: malformed term arrays")
        bad = ~np.isfinite(b.weights) | (b.weights <= 0)
        if bad.any():
            row = int(np.searchsorted(b.offsets, _first(bad), side="right") - 1)
            raise item_error(kind, row, int(b.ids[row]), "terms", "weights must be positive and finite")
        if np.any(b.term_ids < 0) or np.any(b.term_ids >= len(self.terms)):
            raise InvalidInput(f"{kind} batch: term id outside the term dictionary")
        # the indexes' bounds take each row sorted by term id and of unit length
        lens = np.diff(b.offsets)
        bad = lens > lim.max_terms
        if bad.any():
            row = _first(bad)
            raise item_error(kind, row, int(b.ids[row]), "terms",
                             over_limit("terms", int(lens[row]), "max_terms", lim.max_terms))
        rows = np.repeat(np.arange(len(b)), lens)
        step = np.diff(b.term_ids)
        bad = (step <= 0) & (rows[1:] == rows[:-1]) if len(step) else np.zeros(0, bool)
        if bad.any():
            row = int(rows[_first(bad) + 1])
            raise item_error(kind, row, int(b.ids[row]), "terms", "term ids must increase within a row")
        full = np.flatnonzero(lens > 0)
        if len(full):
            norm = np.sqrt(np.add.reduceat(b.weights * b.weights, b.offsets[full]))
            bad = np.abs(norm - 1.0) > 1e-9
            if bad.any():
                row = int(full[_first(bad)])
                raise item_error(kind, row, int(b.ids[row]), "terms",
                                 f"weights must have unit length, got norm {norm[_first(bad)]!r}")

    def _check_batch_subs(self, b: SubscriptionBatch, lim: Limits):
        self._check_batch_common("subscription", b, lim)
        bad = (b.k < 1) | ~((b.alpha >= 0) & (b.alpha <= 1)) | (np.diff(b.offsets) == 0)
        if bad.any():
            p = _first(bad)
            raise item_error("subscription", p, int(b.ids[p]), "k/alpha/terms",
                             "k >= 1, alpha in [0, 1] and at least one term are required")

    def _check_batch_msgs(self, b: MessageBatch, time_window: bool, lim: Limits):
        self._check_batch_common("message", b, lim)
        self._times("message", b.ids, b.t, len(b), time_window)


def _check_terms(kind, pos, item_id, tm, max_terms: int) -> dict[str, float]:
    if isinstance(tm, (Mapping, list, tuple, np.ndarray)) and len(tm) > max_terms:
        raise item_error(kind, pos, item_id, "terms", over_limit("terms", len(tm), "max_terms", max_terms))
    if isinstance(tm, Mapping):
        pairs = list(tm.items())
    elif isinstance(tm, (list, tuple, np.ndarray)):  # Arrow map<string,double> as pairs
        try:
            pairs = [(a, b) for a, b in tm]
        except (TypeError, ValueError):
            raise item_error(kind, pos, item_id, "terms", "must map term to weight") from None
    else:
        raise item_error(kind, pos, item_id, "terms",
                         f"must be a mapping of term to weight, got {type(tm).__name__}")
    out: dict[str, float] = {}
    for term, w in pairs:
        if not isinstance(term, str) or not term:
            raise item_error(kind, pos, item_id, "terms", f"term must be a non-empty string, got {term!r}")
        if isinstance(w, bool) or not isinstance(w, Real) or not math.isfinite(w) or w <= 0:
            raise item_error(kind, pos, item_id, "terms",
                             f"weight of {term!r} must be positive and finite, got {plain(w)!r}")
        if term in out:
            raise item_error(kind, pos, item_id, "terms", f"term {term!r} appears twice")
        out[term] = float(w)
    return out


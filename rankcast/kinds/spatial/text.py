"""Tokenisation, tf-idf weighting and the term dictionary.

Tokenisation (the same in the Python and the Spark paths, which call :func:`tokenize`):
the text is NFKC-normalised and case-folded, and a token is a maximal run of Unicode word
characters (``\\w+``). Weighting: ``tf(t) * idf(t)`` with ``tf`` the raw count in the text
and ``idf(t) = ln((1 + N) / (1 + df(t))) + 1`` over the ``N`` documents of the fitted corpus;
a term the vocabulary has never seen has ``df = 0`` and so the largest idf. Every weight
vector is then L2-normalised to unit length.

Term ids: the fitted terms get ids ``0 .. V-1`` in increasing document frequency (ties by
the term itself), the order prefix filtering relies on. Terms met later get the next free
ids in order of first appearance, through a :class:`TermDictionary`.
"""
from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from typing import Iterable, Mapping

import numpy as np

__all__ = ["tokenize", "Vocabulary", "TermDictionary", "idf_value"]

_TOKEN = re.compile(r"\w+")


def tokenize(text: str) -> list[str]:
    """Tokens of ``text``: NFKC-normalised, case-folded runs of word characters."""
    return _TOKEN.findall(unicodedata.normalize("NFKC", text).casefold())


def idf_value(n_docs: int, df: int) -> float:
    """Smoothed inverse document frequency, ``ln((1 + N) / (1 + df)) + 1``."""
    return math.log((1.0 + n_docs) / (1.0 + df)) + 1.0


class Vocabulary:
    """Document frequencies of a corpus; term ids in increasing frequency."""

    def __init__(self, terms: Iterable[str] = (), dfs: Iterable[int] = (), n_docs: int = 0):
        terms = list(terms)
        dfs = [int(d) for d in dfs]
        if len(terms) != len(dfs):
            raise ValueError("terms and dfs differ in length")
        order = sorted(range(len(terms)), key=lambda i: (dfs[i], terms[i]))
        self.terms: list[str] = [terms[i] for i in order]
        self.dfs = np.asarray([dfs[i] for i in order], dtype=np.int64)
        self.n_docs = int(n_docs)
        self.ids: dict[str, int] = {t: i for i, t in enumerate(self.terms)}
        if len(self.ids) != len(self.terms):
            raise ValueError("duplicate term in vocabulary")
        self.idfs = np.array([idf_value(self.n_docs, d) for d in self.dfs], dtype=np.float64)
        self.idf_list: list[float] = self.idfs.tolist()     # the same floats, for per-token use
        self.unknown_idf = idf_value(self.n_docs, 0)

    @classmethod
    def fit(cls, texts: Iterable[str]) -> "Vocabulary":
        """Learn document frequencies from ``texts`` (each text counts a term once)."""
        df: Counter[str] = Counter()
        n = 0
        for text in texts:
            n += 1
            df.update(set(tokenize(text)))
        return cls(df.keys(), df.values(), n)

    def __len__(self) -> int:
        return len(self.terms)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Vocabulary) and self.n_docs == other.n_docs
                and self.terms == other.terms and np.array_equal(self.dfs, other.dfs))

    def idf(self, term: str) -> float:
        i = self.ids.get(term)
        return self.unknown_idf if i is None else self.idf_list[i]

    def raw_weights(self, text: str) -> dict[str, float]:
        """Un-normalised tf-idf weights of ``text``'s tokens, in order of first appearance."""
        counts: dict[str, int] = {}
        for tok in tokenize(text):
            counts[tok] = counts.get(tok, 0) + 1
        ids, idf, unknown = self.ids, self.idf_list, self.unknown_idf
        out: dict[str, float] = {}
        for t, c in counts.items():
            i = ids.get(t)
            out[t] = c * (unknown if i is None else idf[i])
        return out

    def weights(self, text: str) -> dict[str, float]:
        """The normalised tf-idf vector of ``text``, ordered by term id (unknown terms last)."""
        return normalise(self.raw_weights(text), self.ids)

    def to_dict(self) -> dict:
        return {"terms": self.terms, "dfs": self.dfs.tolist(), "n_docs": self.n_docs}

    @classmethod
    def from_dict(cls, d: Mapping) -> "Vocabulary":
        return cls(d["terms"], d["dfs"], d["n_docs"])


def normalise(weights: Mapping[str, float], ids: Mapping[str, int]) -> dict[str, float]:
    """L2-normalise a weight mapping; keys ordered by id, unknown terms after, by name."""
    norm = math.sqrt(sum(w * w for w in weights.values()))
    big = len(ids)
    keys = sorted(weights, key=lambda t: (ids.get(t, big), t))
    return {t: weights[t] / norm for t in keys} if norm > 0 else {}


class TermDictionary:
    """Term string -> term id: the vocabulary's ids, then ids for terms met later.

    ``lookup`` proposes ids for new terms without recording them; ``commit`` records them
    once the call that met them is known to be valid (calls are atomic).
    """

    def __init__(self, vocabulary: Vocabulary | None = None):
        self.vocabulary = vocabulary if vocabulary is not None else Vocabulary()
        self.extra: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.vocabulary) + len(self.extra)

    def lookup(self, term: str, pending: dict[str, int]) -> int:
        i = self.vocabulary.ids.get(term)
        if i is None:
            i = self.extra.get(term)
        if i is None:
            i = pending.get(term)
            if i is None:
                i = len(self) + len(pending)
                pending[term] = i
        return i

    def commit(self, pending: Mapping[str, int]) -> None:
        self.extra.update(pending)

    def mark(self) -> int:
        """A point to :meth:`rollback` to (a multi-part call that may still fail)."""
        return len(self.extra)

    def rollback(self, mark: int) -> None:
        """Forget the terms committed since ``mark`` (the newest ids)."""
        for term in list(self.extra)[mark:]:
            del self.extra[term]

    def term(self, term_id: int) -> str:
        v = self.vocabulary
        if term_id < len(v):
            return v.terms[term_id]
        for t, i in self.extra.items():
            if i == term_id:
                return t
        raise KeyError(term_id)

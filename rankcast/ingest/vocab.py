"""Vocabulary and tf-idf weighting in Spark, equal to the Python path.

Both functions run rankcast's own code inside the Spark Python workers
(:func:`rankcast.kinds.spatial.text.tokenize` for tokens, :class:`rankcast.kinds.spatial.columns.Encoder` for weights),
so the Spark path cannot drift from the engine's: :func:`fit_vocabulary_spark` equals
``Vocabulary.fit`` over the same texts, :func:`weigh_spark` gives the term ids and weights
the Encoder gives for the same table, bit for bit.
"""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np
import pandas as pd

from rankcast.kinds.spatial.text import TermDictionary, Vocabulary
from .readers import to_spark

__all__ = ["fit_vocabulary_spark", "weigh_spark", "new_terms_spark"]

_UNBOUNDED = (-math.inf, -math.inf, math.inf, math.inf)


def fit_vocabulary_spark(df_or_path, spark, text_col: str = "text") -> Vocabulary:
    """Document frequencies of the texts in ``df_or_path`` (Spark DataFrame, path or Arrow/pandas
    table), computed in Spark. Rows whose text is null are not documents; the result equals
    ``Vocabulary.fit`` over the non-null texts in any order."""
    from pyspark.sql import functions as F

    df = to_spark(df_or_path, spark).select(F.col(text_col).alias("text"))

    def partial_counts(batches):
        # One partial document-frequency table per partition; the null term carries the
        # partition's number of documents so that one job yields N too.
        from collections import Counter

        from rankcast.kinds.spatial.text import tokenize

        counts: Counter = Counter()
        n = 0
        for pdf in batches:
            for text in pdf["text"]:
                if isinstance(text, str):
                    n += 1
                    counts.update(set(tokenize(text)))
        yield pd.DataFrame({"term": pd.Series(list(counts) + [None], dtype=object),
                            "df": np.fromiter([*counts.values(), n], np.int64)})

    agg = (df.mapInPandas(partial_counts, "term string, df long")
             .groupBy("term").agg(F.sum("df").alias("df")))
    table = agg.toPandas()
    is_n = table["term"].isna()
    n_docs = int(table.loc[is_n, "df"].sum())
    terms = table.loc[~is_n]
    return Vocabulary(terms["term"].tolist(), terms["df"].astype(np.int64).tolist(), n_docs)


def new_terms_spark(df, vocabulary: Vocabulary, text_col: str = "text",
                    known: Mapping[str, int] | None = None, *,
                    terms_col: str | None = None) -> list[str]:
    """Terms of the rows (text tokens, else ``terms_col`` map keys) that neither
    ``vocabulary`` nor ``known`` holds, in order of first appearance (row order, then
    position in the row): the order in which an Encoder reading the table front to back
    gives them ids."""
    from pyspark.sql import functions as F

    known_terms = set(known or ())
    has_text = text_col in df.columns
    has_terms = terms_col is not None and terms_col in df.columns
    cols = ([F.col(text_col).alias("text")] if has_text else []) + \
           ([F.col(terms_col).alias("terms")] if has_terms else [])
    if not cols:
        return []

    def unknown(batches):
        from pyspark import TaskContext

        from rankcast.kinds.spatial.text import tokenize

        part = TaskContext.get().partitionId()
        row = 0
        terms, rows, pos = [], [], []
        for pdf in batches:
            texts = pdf["text"].tolist() if has_text else [None] * len(pdf)
            maps = pdf["terms"].tolist() if has_terms else [None] * len(pdf)
            for text, tm in zip(texts, maps):
                if isinstance(text, str):
                    keys = dict.fromkeys(tokenize(text))
                else:
                    tm = _as_map(tm)
                    keys = tm.keys() if tm else ()
                for p, t in enumerate(keys):
                    if t not in vocabulary.ids and t not in known_terms:
                        terms.append(t)
                        rows.append(row)
                        pos.append(p)
                row += 1
        yield pd.DataFrame({"term": pd.Series(terms, dtype=object),
                            "part": np.full(len(terms), part, np.int64),
                            "row": np.asarray(rows, np.int64), "pos": np.asarray(pos, np.int64)})

    first = (df.select(*cols)
               .mapInPandas(unknown, "term string, part long, row long, pos long")
               .groupBy("term").agg(F.min(F.struct("part", "row", "pos")).alias("at"))
               .select("term", "at.part", "at.row", "at.pos"))
    table = first.toPandas().sort_values(["part", "row", "pos"], kind="stable")
    return table["term"].tolist()


def weigh_spark(df, vocabulary: Vocabulary, *, text_col: str = "text",
                terms_col: str | None = None, dictionary: TermDictionary | None = None,
                spark=None):
    """Tf-idf weighting and normalisation of a table's texts (and/or ``terms`` maps) in Spark.

    Returns ``(weighted, pending)``: ``weighted`` is ``df`` plus ``term_ids``
    (array<long>, increasing) and ``weights`` (array<double>, unit length) per row, equal
    to the ``offsets/term_ids/weights`` an :class:`~rankcast.kinds.spatial.columns.Encoder` over
    ``vocabulary`` (and ``dictionary``'s later terms) gives for the same rows in the same
    order; ``pending`` maps the terms new to both to the ids given to them, which the caller
    commits to its dictionary (``dictionary.commit(pending)``) once it keeps the result.
    Rows without text and terms get null arrays.
    """
    from pyspark.sql import types as T

    if spark is not None:
        df = to_spark(df, spark)
    dictionary = dictionary if dictionary is not None else TermDictionary(vocabulary)
    if dictionary.vocabulary is not vocabulary and dictionary.vocabulary != vocabulary:
        raise ValueError("weigh_spark: dictionary belongs to another vocabulary")
    has_terms = terms_col is not None and terms_col in df.columns
    has_text = text_col in df.columns
    pending: dict[str, int] = {}
    for t in new_terms_spark(df, vocabulary, text_col, dictionary.extra, terms_col=terms_col):
        dictionary.lookup(t, pending)
    extra = {**dictionary.extra, **pending}

    def weigh(batches):
        from rankcast.kinds.spatial.columns import Encoder

        enc = Encoder(_UNBOUNDED, vocabulary)
        enc.commit(extra)
        for pdf in batches:
            n = len(pdf)
            texts = pdf[text_col].tolist() if has_text else [None] * n
            terms = pdf[terms_col].tolist() if has_terms else [None] * n
            present = [isinstance(a, str) or (b is not None and not _nan(b)) for a, b in zip(texts, terms)]
            idx = [i for i in range(n) if present[i]]
            batch, new = enc.encode_messages(
                {"id": np.asarray(idx, np.int64), "x": np.zeros(len(idx)), "y": np.zeros(len(idx)),
                 "text": [texts[i] if isinstance(texts[i], str) else None for i in idx],
                 "terms": [None if isinstance(texts[i], str) else _as_map(terms[i]) for i in idx]},
                time_window=False)
            if new:
                raise RuntimeError(f"weigh_spark: terms without an id: {sorted(new)[:5]}")
            ids_col: list = [None] * n
            w_col: list = [None] * n
            for j, i in enumerate(idx):
                a, b = batch.offsets[j], batch.offsets[j + 1]
                ids_col[i] = batch.term_ids[a:b]
                w_col[i] = batch.weights[a:b]
            yield pdf.assign(term_ids=ids_col, weights=w_col)

    schema = T.StructType(df.schema.fields + [
        T.StructField("term_ids", T.ArrayType(T.LongType())),
        T.StructField("weights", T.ArrayType(T.DoubleType()))])
    return df.mapInPandas(weigh, schema), pending


def _nan(v) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _as_map(v):
    """A map cell as pandas hands it over (list of pairs or dict) -> dict."""
    if v is None or _nan(v):
        return None
    return dict(v) if not isinstance(v, dict) else v

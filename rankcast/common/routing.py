"""Row -> partitions, as CSR: what a distribution policy of any kind answers for a batch.

:class:`Routing` is the answer (the partitions of row ``i`` are
``parts[offsets[i]:offsets[i+1]]``, sorted, unique); :func:`dedupe_rows`, :func:`join_rows`
and :func:`csr_by` build one from per-term or per-level answers.
"""
from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

__all__ = ["Routing", "dedupe_rows", "join_rows", "csr_by"]


@dataclass
class Routing:
    """Row -> partitions, as CSR (``parts`` sorted and unique within a row)."""

    offsets: np.ndarray   # int64[n + 1]
    parts: np.ndarray     # int64[nnz]

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def counts(self) -> np.ndarray:
        return np.diff(self.offsets)

    def row(self, i: int) -> np.ndarray:
        return self.parts[self.offsets[i]: self.offsets[i + 1]]

    def rows_of(self, n_partitions: int) -> list[np.ndarray]:
        """For each partition, the rows routed to it (ascending)."""
        rows = np.repeat(np.arange(len(self), dtype=np.int64), self.counts())
        order = np.argsort(self.parts, kind="stable")
        cuts = np.cumsum(np.bincount(self.parts, minlength=n_partitions))[:-1]
        return np.split(rows[order], cuts)

    @staticmethod
    def from_single(parts: np.ndarray) -> "Routing":
        parts = np.asarray(parts, np.int64)
        return Routing(np.arange(len(parts) + 1, dtype=np.int64), parts)

    @staticmethod
    def everywhere(n_rows: int, n_partitions: int) -> "Routing":
        return Routing(np.arange(n_rows + 1, dtype=np.int64) * n_partitions,
                       np.tile(np.arange(n_partitions, dtype=np.int64), n_rows))


@numba.njit(cache=True)
def dedupe_rows(offsets, parts):
    """Sort and deduplicate the partitions of every CSR row.

    offsets: int64[n + 1]; parts: int64[nnz]. Returns (offsets, parts) of the cleaned CSR."""
    n = offsets.shape[0] - 1
    out_off = np.zeros(n + 1, np.int64)
    out = np.empty(parts.shape[0], np.int64)
    w = 0
    for r in range(n):
        a = offsets[r]
        b = offsets[r + 1]
        row = np.sort(parts[a:b])
        last = -1
        for i in range(row.shape[0]):
            if i == 0 or row[i] != last:
                out[w] = row[i]
                w += 1
                last = row[i]
        out_off[r + 1] = w
    return out_off, out[:w]


def join_rows(csrs: list[tuple[np.ndarray, np.ndarray]], n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """One CSR whose row ``i`` holds row ``i`` of every CSR of ``csrs`` (not deduplicated)."""
    rows = np.concatenate([np.zeros(0, np.int64)] + [np.repeat(np.arange(n_rows, dtype=np.int64), np.diff(o))
                                                    for o, _ in csrs])
    parts = np.concatenate([np.zeros(0, np.int64)] + [p for _, p in csrs])
    return csr_by(rows, parts, n_rows)


def csr_by(keys: np.ndarray, values: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Inverted CSR: for every key ``0 <= key < n``, the values listed under it (in order)."""
    off = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(keys, minlength=n), out=off[1:])
    return off, values[np.argsort(keys, kind="stable")]

"""The subscription table: one slot per live subscription, struct of arrays.

Every subscription index (IGPT and the baselines) and the result buffers refer to
subscriptions by slot. Terms live in one pool: the terms of slot ``s`` are
``terms[toff[s] : toff[s] + tlen[s]]`` (sorted by id) with their weights ``w``, and with
``wtsum`` / ``maxwt`` (paper Eq. 3 and 4) precomputed per position, and ``indexed``: whether
the subscription index holds the position (every position, except in a cluster replica that
indexes only the terms it is placed for: ``rankcast.kinds.spatial.roles.policies.Policy.index_placed``).
"""
from __future__ import annotations

import numba
import numpy as np

from rankcast.common.arrays import grow
from rankcast.kinds.spatial.columns import SubscriptionBatch
from rankcast.errors import UnknownSubscription

__all__ = ["SubTable"]


@numba.njit(cache=True)
def _fill_pool(offsets, term_ids, weights, dst, p_terms, p_w, p_wtsum, p_maxwt):
    """Copy batch terms into the pool at ``dst`` and compute wtsum / maxwt per position."""
    n = offsets.shape[0] - 1
    for r in range(n):
        a = offsets[r]
        b = offsets[r + 1]
        d = dst[r]
        acc = 0.0
        mx = 0.0
        for i in range(b - 1, a - 1, -1):
            j = d + (i - a)
            p_terms[j] = term_ids[i]
            p_w[j] = weights[i]
            acc += weights[i]
            mx = max(mx, weights[i])
            p_wtsum[j] = acc
            p_maxwt[j] = mx


class SubTable:
    """Slot-addressed subscriptions; slots of removed subscriptions are reused."""

    partial = True        # a table pickled before it kept the flag: assume replicas (always exact)

    def __init__(self, capacity: int = 1024):
        c = max(capacity, 16)
        self.ids = np.zeros(c, np.int64)
        self.x = np.zeros(c)
        self.y = np.zeros(c)
        self.k = np.zeros(c, np.int64)
        self.alpha = np.zeros(c)
        self.theta = np.zeros(c)          # the re-evaluation threshold s.theta (paper 6.2)
        self.alive = np.zeros(c, np.bool_)
        self.toff = np.zeros(c, np.int64)
        self.tlen = np.zeros(c, np.int64)
        self.terms = np.zeros(4 * c, np.int64)
        self.w = np.zeros(4 * c)
        self.wtsum = np.zeros(4 * c)
        self.maxwt = np.zeros(4 * c)
        self.indexed = np.ones(4 * c, np.bool_)
        self.partial = False               # some row added with a term not indexed (a replica)
        self.pool_used = 0
        self.pool_live = 0
        self.n = 0                         # slots ever used (high-water mark)
        self.moves = 0                     # term pool compactions (each moves every toff)
        self.free: list[int] = []
        self.slot_of: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.slot_of)

    def __contains__(self, sub_id: int) -> bool:
        return sub_id in self.slot_of

    def slot(self, sub_id: int) -> int:
        try:
            return self.slot_of[sub_id]
        except KeyError:
            raise UnknownSubscription(f"unknown subscription id={sub_id!r}") from None

    def live_slots(self) -> np.ndarray:
        return np.flatnonzero(self.alive[: self.n])

    def _reserve(self, count: int) -> np.ndarray:
        reuse = min(count, len(self.free))
        slots = [self.free.pop() for _ in range(reuse)]
        fresh = np.arange(self.n, self.n + count - reuse, dtype=np.int64)
        self.n += count - reuse
        for name in ("ids", "x", "y", "k", "alpha", "theta", "alive", "toff", "tlen"):
            setattr(self, name, grow(getattr(self, name), self.n))
        return np.concatenate([np.asarray(slots, np.int64), fresh])

    def add(self, b: SubscriptionBatch, indexed: np.ndarray | None = None) -> np.ndarray:
        """Insert the rows of ``b`` (ids must not be live); returns their slots. ``indexed``:
        bool per term of ``b`` (None: every term), the positions the index holds."""
        n = len(b)
        slots = self._reserve(n)
        lens = np.diff(b.offsets)
        need = self.pool_used + int(lens.sum())
        if need > len(self.terms):
            self._compact(extra=int(lens.sum()))
        dst = self.pool_used + np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
        _fill_pool(b.offsets, b.term_ids, b.weights, dst, self.terms, self.w, self.wtsum, self.maxwt)
        a, z = self.pool_used, self.pool_used + int(lens.sum())
        self.indexed[a:z] = True if indexed is None else np.asarray(indexed, np.bool_)
        if indexed is not None and not self.indexed[a:z].all():
            self.partial = True
        self.pool_used += int(lens.sum())
        self.pool_live += int(lens.sum())
        self.ids[slots] = b.ids
        self.x[slots] = b.x
        self.y[slots] = b.y
        self.k[slots] = b.k
        self.alpha[slots] = b.alpha
        self.theta[slots] = 0.0
        self.alive[slots] = True
        self.toff[slots] = dst
        self.tlen[slots] = lens
        self.slot_of.update(zip(b.ids.tolist(), slots.tolist()))
        return slots

    def remove(self, slots: np.ndarray) -> None:
        for s in slots.tolist():
            del self.slot_of[int(self.ids[s])]
            self.free.append(s)
        self.alive[slots] = False
        self.pool_live -= int(self.tlen[slots].sum())
        self.tlen[slots] = 0

    def _compact(self, extra: int) -> None:
        live = self.live_slots()
        size = max(2 * (self.pool_live + extra), 64)
        arrays = [np.zeros(size, np.int64), np.zeros(size), np.zeros(size), np.zeros(size),
                  np.ones(size, np.bool_)]
        pos = 0
        old = (self.terms, self.w, self.wtsum, self.maxwt, self.indexed)
        for s in live.tolist():
            a, l = self.toff[s], self.tlen[s]
            for new, src in zip(arrays, old):
                new[pos: pos + l] = src[a: a + l]
            self.toff[s] = pos
            pos += l
        self.terms, self.w, self.wtsum, self.maxwt, self.indexed = arrays
        self.pool_used = pos
        self.pool_live = pos
        self.moves += 1

    def row(self, slot: int) -> tuple[np.ndarray, np.ndarray]:
        a, l = self.toff[slot], self.tlen[slot]
        return self.terms[a: a + l], self.w[a: a + l]

    def batch(self, slots: np.ndarray) -> SubscriptionBatch:
        """The subscriptions in ``slots`` as a batch (for routing and re-evaluation requests)."""
        slots = np.asarray(slots, np.int64)
        lens = self.tlen[slots]
        off = np.zeros(len(slots) + 1, np.int64)
        np.cumsum(lens, out=off[1:])
        idx = np.repeat(self.toff[slots], lens) + (np.arange(off[-1]) - np.repeat(off[:-1], lens))
        return SubscriptionBatch(self.ids[slots].copy(), self.x[slots].copy(), self.y[slots].copy(),
                                 self.k[slots].copy(), self.alpha[slots].copy(), off,
                                 self.terms[idx], self.w[idx])

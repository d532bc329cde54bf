"""A straightforward exact engine in numpy and scipy.sparse: the yardstick of the flagship's
speed on dense streams (issue "Flagship speed").

No index, no buffers beyond the top-k, no numba: per publish batch

- the batch's messages are scored against every subscription that shares a term with them
  as one sparse product ``S @ B.T`` (subscriptions x terms times terms x messages; SciPy
  sums each pair over the shared terms in increasing term id, as
  :func:`rankcast.kinds.spatial.scoring.score` does, so the scores are the same bits), plus
  the spatial part;
- the subscriptions whose top-k held a message that expired by the batch's end are
  recomputed from the whole window (``S[lost] @ W.T``); a list shorter than k holds every
  matching window message, so there an expiry only drops the entry;
- every other subscription merges its candidates into its top-k with one ``lexsort`` over
  (subscription, score descending, newer first).

:class:`SparseCore` has the interface of :class:`rankcast.kinds.spatial.core.SkypeCore`, so
``Engine(cfg, core=SparseCore)`` is a complete engine (``rankcast bench engine --methods
sparse``).
"""
from __future__ import annotations

import time
from collections import deque

import numpy as np
import scipy.sparse as sp

from rankcast.kinds.spatial.columns import MessageBatch, SubscriptionBatch
from rankcast.errors import UnknownSubscription
from rankcast.kinds.spatial.subtable import SubTable

__all__ = ["SparseCore"]


def _width(m: sp.csr_matrix, n_terms: int) -> sp.csr_matrix:
    """``m`` with ``n_terms`` columns (term ids only grow)."""
    if m.shape[1] == n_terms:
        return m
    return sp.csr_matrix((m.data, m.indices, m.indptr), shape=(m.shape[0], n_terms))


class SparseCore:
    """Exact top-k by sparse products and lexsort merges (see the module docstring)."""

    def __init__(self, cfg, **_ignored):
        self.cfg = cfg
        self.max_dist = float(cfg.max_dist)
        self.subs = SubTable()
        self._S = None                     # CSR subscriptions x terms of the slots, when fresh
        self.K = 1                         # width of the top-k table (largest k)
        self.tk_seq = np.full((16, 1), -1, np.int64)
        self.tk_id = np.zeros((16, 1), np.int64)
        self.tk_sc = np.full((16, 1), -np.inf)
        self.tk_len = np.zeros(16, np.int64)
        self.changed = np.zeros(16, np.bool_)
        self.rep_id = np.full((16, 1), -1, np.int64)    # the lists reported last (to tell
        self.rep_len = np.zeros(16, np.int64)           # real changes from touched lists)
        self.window: deque = deque()       # (seqs, ids, x, y, CSR messages x terms) per batch
        self.n_terms = 1
        self._stats = {"messages": 0, "amp_seconds": 0.0, "emp_seconds": 0.0, "recomputed": 0,
                       "scored_arrival": 0, "inserted": 0}

    # ------------------------------------------------------------------ subscriptions
    def _grow(self, n: int, K: int) -> None:
        rows = max(n, len(self.tk_len))
        if rows > len(self.tk_len) or K > self.K:
            rows = max(rows, 2 * len(self.tk_len)) if rows > len(self.tk_len) else rows
            K = max(K, self.K)
            for name, fill in (("tk_seq", -1), ("tk_id", 0), ("tk_sc", -np.inf), ("rep_id", -1)):
                a = getattr(self, name)
                b = np.full((rows, K), fill, a.dtype)
                b[: a.shape[0], : a.shape[1]] = a
                setattr(self, name, b)
            for name in ("tk_len", "changed", "rep_len"):
                a = getattr(self, name)
                b = np.zeros(rows, a.dtype)
                b[: len(a)] = a
                setattr(self, name, b)
            self.K = K

    def _matrix(self) -> sp.csr_matrix:
        """Subscriptions (by slot) x terms, weights; rows of dead slots are empty."""
        if self._S is None:
            t = self.subs
            n = t.n
            lens = np.where(t.alive[:n], t.tlen[:n], 0)
            indptr = np.zeros(n + 1, np.int64)
            np.cumsum(lens, out=indptr[1:])
            idx = np.repeat(t.toff[:n], lens) + np.arange(indptr[-1]) - np.repeat(indptr[:-1], lens)
            self.n_terms = max(self.n_terms, int(t.terms[idx].max(initial=0)) + 1)
            self._S = sp.csr_matrix((t.w[idx], t.terms[idx], indptr), shape=(n, self.n_terms))
        return self._S

    def add(self, b: SubscriptionBatch) -> np.ndarray:
        slots = self.subs.add(b)
        self._grow(self.subs.n, int(self.subs.k[slots].max(initial=1)))
        self.tk_len[slots] = 0
        self.tk_seq[slots] = -1
        self.tk_sc[slots] = -np.inf
        self._S = None
        self._recompute(slots)            # initial results (not updates)
        self.changed[slots] = False
        self.rep_id[slots] = self.tk_id[slots]
        self.rep_len[slots] = self.tk_len[slots]
        return slots

    def remove(self, ids) -> None:
        ids = np.asarray(ids, np.int64).ravel()
        for i in ids.tolist():
            if i not in self.subs:
                raise UnknownSubscription(f"unknown subscription id={i!r}")
        slots = np.array([self.subs.slot(i) for i in ids.tolist()], np.int64)
        self.subs.remove(slots)
        self.tk_len[slots] = 0
        self.changed[slots] = False
        self._S = None

    # ------------------------------------------------------------------ scoring
    def _batch_matrix(self, msgs: MessageBatch) -> sp.csr_matrix:
        nt = int(msgs.term_ids.max(initial=-1)) + 1
        if nt > self.n_terms:
            self.n_terms = nt
            self._S = None
        return sp.csr_matrix((msgs.weights, msgs.term_ids, msgs.offsets), shape=(len(msgs), self.n_terms))

    def _pairs(self, S, rows, B, mx, my):
        """(row, column, score) of every pair sharing a term: S[rows] x B.T."""
        A = S[rows] if rows is not None else S
        nt = max(A.shape[1], B.shape[1])
        A, B = _width(A, nt), _width(B, nt)
        P = (A @ B.T).tocoo()
        r, c, ts = P.row.astype(np.int64), P.col.astype(np.int64), P.data
        s = rows[r] if rows is not None else r
        t = self.subs
        dx = t.x[s] - mx[c]
        dy = t.y[s] - my[c]
        ss = 1.0 - np.sqrt(dx * dx + dy * dy) / self.max_dist
        a = t.alpha[s]
        return s, c, a * ss + (1.0 - a) * ts

    def _window_arrays(self):
        seqs = np.concatenate([w[0] for w in self.window]) if self.window else np.zeros(0, np.int64)
        ids = np.concatenate([w[1] for w in self.window]) if self.window else np.zeros(0, np.int64)
        x = np.concatenate([w[2] for w in self.window]) if self.window else np.zeros(0)
        y = np.concatenate([w[3] for w in self.window]) if self.window else np.zeros(0)
        mats = [_width(w[4], self.n_terms) for w in self.window]
        W = sp.vstack(mats, format="csr") if mats else sp.csr_matrix((0, self.n_terms))
        return seqs, ids, x, y, W

    def _install(self, slots, s, seq, mid, sc, keep_old: bool, upto: int = -1) -> None:
        """Top-k of ``slots`` := best k of (current lists, less seqs <= ``upto``, if
        ``keep_old``) + the given rows."""
        if keep_old:
            old = self.tk_seq[slots]
            mask = (old > upto) & (old >= 0)
            s = np.concatenate([np.repeat(slots, mask.sum(axis=1)), s])
            seq = np.concatenate([self.tk_seq[slots][mask], seq])
            mid = np.concatenate([self.tk_id[slots][mask], mid])
            sc = np.concatenate([self.tk_sc[slots][mask], sc])
        order = np.lexsort((-seq, -sc, s))           # by slot, score desc, newer first
        s, seq, mid, sc = s[order], seq[order], mid[order], sc[order]
        first = np.r_[True, s[1:] != s[:-1]] if len(s) else np.zeros(0, np.bool_)
        start = np.flatnonzero(first)
        rank = np.arange(len(s)) - np.repeat(start, np.diff(np.r_[start, len(s)]))
        keep = rank < self.subs.k[s]
        s, seq, mid, sc, rank = s[keep], seq[keep], mid[keep], sc[keep], rank[keep]
        self.tk_len[slots] = 0
        self.tk_seq[slots] = -1
        self.tk_sc[slots] = -np.inf
        self.tk_seq[s, rank] = seq
        self.tk_id[s, rank] = mid
        self.tk_sc[s, rank] = sc
        np.maximum.at(self.tk_len, s, rank + 1)
        self.changed[slots] = True

    def _recompute(self, slots: np.ndarray) -> None:
        if not len(slots):
            return
        seqs, ids, x, y, W = self._window_arrays()
        s, c, sc = self._pairs(self._matrix(), slots, W, x, y)
        self._install(slots, s, seqs[c], ids[c], sc, keep_old=False)
        self._stats["recomputed"] += len(slots)

    # ------------------------------------------------------------------ stream
    def process(self, msgs: MessageBatch, seqs, expire_upto, last: bool = False) -> None:
        t0 = time.perf_counter()
        seqs = np.asarray(seqs, np.int64)
        B = self._batch_matrix(msgs)
        self.window.append((seqs, msgs.ids.copy(), msgs.x.copy(), msgs.y.copy(), B))
        e = int(np.max(expire_upto)) if len(expire_upto) else -1
        self._drop_window(e)
        S = self._matrix()
        s, c, sc = self._pairs(S, None, B, msgs.x, msgs.y)
        keep = seqs[c] > e
        s, c, sc = s[keep], c[keep], sc[keep]
        self._stats["scored_arrival"] += len(s)
        # lists that lost a message: a full one is recomputed from the window, a short one
        # (it held every match) only drops it
        n = self.subs.n
        lost = (self.tk_seq[:n] <= e) & (self.tk_seq[:n] >= 0)
        lost_rows = lost.any(axis=1)
        full = lost_rows & (self.tk_len[:n] >= self.subs.k[:n])
        recompute = np.flatnonzero(full)
        short = np.flatnonzero(lost_rows & ~full)
        t1 = time.perf_counter()
        self._recompute(recompute)
        t2 = time.perf_counter()
        merge = ~np.isin(s, recompute)
        s, c, sc = s[merge], c[merge], sc[merge]
        slots = np.union1d(s, short)
        self._install(slots, s, seqs[c], msgs.ids[c], sc, keep_old=True, upto=e)
        self._stats["inserted"] += len(s)
        self._stats["messages"] += len(msgs)
        self._stats["amp_seconds"] += (t1 - t0) + (time.perf_counter() - t2)
        self._stats["emp_seconds"] += t2 - t1

    def _drop_window(self, e: int) -> None:
        while self.window and self.window[0][0][-1] <= e:
            self.window.popleft()
        if self.window and self.window[0][0][0] <= e:
            seqs, ids, x, y, B = self.window[0]
            k = np.searchsorted(seqs, e, side="right")
            self.window[0] = (seqs[k:], ids[k:], x[k:], y[k:], B[k:])

    def expire(self, upto_seq: int) -> None:
        self._drop_window(upto_seq)

    def reeval_requests(self):
        return np.zeros(0, np.int64), SubscriptionBatch.empty(), np.zeros(0, np.int64)

    def apply_reevals(self, slots, cands, window_size: int) -> None:
        if len(slots):
            raise ValueError("SparseCore never requests re-evaluations")

    # ------------------------------------------------------------------ results
    def take_updates(self):
        n = self.subs.n
        slots = np.flatnonzero(self.changed[:n] & self.subs.alive[:n])
        self.changed[:] = False
        L = self.tk_len[slots]
        live = np.arange(self.K)[None, :] < L[:, None]
        differ = (L != self.rep_len[slots]) | ((self.tk_id[slots] != self.rep_id[slots]) & live).any(axis=1)
        out = slots[differ]
        self.rep_id[out] = self.tk_id[out]
        self.rep_len[out] = self.tk_len[out]
        return self.topk_arrays(out)

    def topk_arrays(self, slots):
        slots = np.asarray(slots, np.int64)
        L = self.tk_len[slots]
        off = np.zeros(len(slots) + 1, np.int64)
        np.cumsum(L, out=off[1:])
        mask = np.arange(self.K)[None, :] < L[:, None]
        return self.subs.ids[slots].copy(), off, self.tk_id[slots][mask], self.tk_sc[slots][mask]

    def topk(self, sub_id: int) -> list[tuple[int, float]]:
        s = self.subs.slot(int(sub_id))
        L = int(self.tk_len[s])
        return list(zip(self.tk_id[s, :L].tolist(), self.tk_sc[s, :L].tolist()))

    def stats(self) -> dict:
        live = self.subs.live_slots()
        out = dict(self._stats)
        out.update({"subscriptions": len(self.subs), "avg_buffer": float(self.tk_len[live].mean()) if len(live) else 0.0,
                    "reevaluations": self._stats["recomputed"], "verified": self._stats["scored_arrival"],
                    "window": int(sum(len(w[0]) for w in self.window))})
        return out

"""The brute-force engine: exact top-k maintenance with no pruning at all.

:class:`BruteForceCore` has the interface of :class:`rankcast.kinds.spatial.core.SkypeCore`, so
``rankcast.kinds.spatial.engine.Engine(cfg, core=BruteForceCore)`` is a complete engine (the reference of
the benchmark and of the oracle tests). It

- scores every arriving message against every subscription that shares a term with it
  (per-term slot lists) and keeps an exact top-k list per subscription, ordered by score
  descending then newer (larger seq) first;
- keeps its own columnar copy of the window, each term's messages chained newest first;
- when a message in a full top-k list expires, recomputes that list by scoring every window
  message that shares a term with the subscription. A list shorter than k holds every
  matching window message, so an expiry there only removes the entry.

It needs no message index, so :meth:`reeval_requests` is always empty.
"""
from __future__ import annotations

import time

import numba
import numpy as np

from rankcast.kinds.spatial.columns import MessageBatch, SubscriptionBatch
from rankcast.errors import InvalidInput, UnknownSubscription
from rankcast.kinds.spatial.scoring import score
from rankcast.kinds.spatial.subtable import SubTable
from rankcast.common.arrays import grow, runs
from ._postings import term_postings

__all__ = ["BruteForceCore", "BruteForceEngine"]

_NONE = np.iinfo(np.int64).max       # tk_min of an empty list


# ----------------------------------------------------------------------------- kernels
@numba.njit(cache=True)
def _append(m_off, m_terms, m_w, m_x, m_y, m_t, m_ids, seqs,
            w_seq, w_id, w_x, w_y, w_t, w_off, hi,
            lg_term, lg_w, lg_prev, lg_msg, lg_hi, head):
    """Append a batch to the window copy at local index ``hi`` and log position ``lg_hi``
    (capacity checked by the caller); each term's chain gets the new message at its head.
    Returns the new (hi, lg_hi)."""
    for i in range(m_off.shape[0] - 1):
        li = hi + i
        w_seq[li] = seqs[i]
        w_id[li] = m_ids[i]
        w_x[li] = m_x[i]
        w_y[li] = m_y[i]
        w_t[li] = m_t[i]
        w_off[li] = lg_hi
        for j in range(m_off[i], m_off[i + 1]):
            t = m_terms[j]
            lg_term[lg_hi] = t
            lg_w[lg_hi] = m_w[j]
            lg_prev[lg_hi] = head[t]
            lg_msg[lg_hi] = li
            head[t] = lg_hi
            lg_hi += 1
        w_off[li + 1] = lg_hi
    return hi + m_off.shape[0] - 1, lg_hi


@numba.njit(cache=True, inline="always")
def _insert_new(s, sc, seq, mid, k, tk_base, tk_len, tk_seq, tk_id, tk_score, tk_min):
    """Offer the newest message to the top-k of ``s``; returns True when the list changed.
    The newcomer is newer than every entry, so it goes before equal scores."""
    K = k[s]
    L = tk_len[s]
    base = tk_base[s]
    if L == K and sc < tk_score[base + K - 1]:
        return False
    p = 0
    while p < L and tk_score[base + p] > sc:
        p += 1
    if L == K:
        dropped = tk_seq[base + K - 1]
        L -= 1
    else:
        dropped = -1
    for q in range(L, p, -1):
        tk_seq[base + q] = tk_seq[base + q - 1]
        tk_id[base + q] = tk_id[base + q - 1]
        tk_score[base + q] = tk_score[base + q - 1]
    tk_seq[base + p] = seq
    tk_id[base + p] = mid
    tk_score[base + p] = sc
    tk_len[s] = L + 1
    if L == 0:
        tk_min[s] = seq
    elif dropped == tk_min[s]:
        mn = tk_seq[base]
        for q in range(1, L + 1):
            mn = min(mn, tk_seq[base + q])
        tk_min[s] = mn
    return True


@numba.njit(cache=True)
def _arrive(m_off, m_terms, m_w, m_x, m_y, m_ids, seqs,
            p_off, p_slot, toff, tlen, s_terms, s_w, sx, sy, alpha, k, max_dist,
            tk_base, tk_len, tk_seq, tk_id, tk_score, tk_min, dirty, stamp, stamp_next):
    """Score each message of a batch against every subscription sharing a term with it and
    offer it to their top-k lists. Returns (pairs scored, pairs that entered a list,
    stamp counter)."""
    n_terms = p_off.shape[0] - 1
    scored = 0
    inserted = 0
    for i in range(m_off.shape[0] - 1):
        a = m_off[i]
        b = m_off[i + 1]
        stamp_next += 1
        for j in range(a, b):
            t = m_terms[j]
            if t >= n_terms:
                break
            for e in range(p_off[t], p_off[t + 1]):
                s = p_slot[e]
                if stamp[s] == stamp_next:
                    continue
                stamp[s] = stamp_next
                q = toff[s]
                sc = score(sx[s], sy[s], alpha[s], s_terms[q:q + tlen[s]], s_w[q:q + tlen[s]],
                           m_x[i], m_y[i], m_terms[a:b], m_w[a:b], max_dist)
                scored += 1
                if _insert_new(s, sc, seqs[i], m_ids[i], k, tk_base, tk_len, tk_seq, tk_id,
                               tk_score, tk_min):
                    dirty[s] = 1
                    inserted += 1
    return scored, inserted, stamp_next


@numba.njit(cache=True)
def _recompute(s, lo, w_seq, w_id, w_x, w_y, w_off, lg_term, lg_w, lg_prev, lg_msg, lg_lo,
               head, toff, tlen, s_terms, s_w, sx, sy, alpha, k, max_dist,
               tk_base, tk_len, tk_seq, tk_id, tk_score, tk_min, mstamp, stamp_next):
    """Top-k of ``s`` from scratch: every window message (local index >= lo) on the chains
    of its terms is scored once. Returns the number of messages scored."""
    K = k[s]
    base = tk_base[s]
    L = 0
    scored = 0
    q0 = toff[s]
    n_head = head.shape[0]
    for p in range(tlen[s]):
        t = s_terms[q0 + p]
        if t >= n_head:
            continue
        e = head[t]
        while e >= lg_lo:
            li = lg_msg[e]
            if li < lo:
                break                              # the chain is newest first
            e = lg_prev[e]
            if mstamp[li] == stamp_next:
                continue
            mstamp[li] = stamp_next
            a = w_off[li]
            b = w_off[li + 1]
            sc = score(sx[s], sy[s], alpha[s], s_terms[q0:q0 + tlen[s]], s_w[q0:q0 + tlen[s]],
                       w_x[li], w_y[li], lg_term[a:b], lg_w[a:b], max_dist)
            scored += 1
            seq = w_seq[li]
            if L == K and (sc < tk_score[base + K - 1]
                           or (sc == tk_score[base + K - 1] and seq < tk_seq[base + K - 1])):
                continue
            pos = 0
            while pos < L and (tk_score[base + pos] > sc
                               or (tk_score[base + pos] == sc and tk_seq[base + pos] > seq)):
                pos += 1
            if L == K:
                L -= 1
            for r in range(L, pos, -1):
                tk_seq[base + r] = tk_seq[base + r - 1]
                tk_id[base + r] = tk_id[base + r - 1]
                tk_score[base + r] = tk_score[base + r - 1]
            tk_seq[base + pos] = seq
            tk_id[base + pos] = w_id[li]
            tk_score[base + pos] = sc
            L += 1
    tk_len[s] = L
    mn = _NONE
    for r in range(L):
        mn = min(mn, tk_seq[base + r])
    tk_min[s] = mn
    return scored


@numba.njit(cache=True)
def _expire(upto, lo, hi, w_seq, w_id, w_x, w_y, w_off, lg_term, lg_w, lg_prev, lg_msg,
            lg_lo, head, p_off, p_slot, toff, tlen, s_terms, s_w, sx, sy, alpha, k, max_dist,
            tk_base, tk_len, tk_seq, tk_id, tk_score, tk_min, dirty, stamp, mstamp, stamp_next):
    """Drop every window message with seq <= upto and repair the lists that held one.

    A list holding an expired entry has tk_min <= upto and shares a term with that entry,
    so the expired messages' terms find them. Returns (new lo, lists recomputed, messages
    scored, stamp counter)."""
    n_terms = p_off.shape[0] - 1
    stamp_next += 1
    hit = stamp_next
    touched = np.empty(16, np.int64)
    nt = 0
    while lo < hi and w_seq[lo] <= upto:
        for j in range(w_off[lo], w_off[lo + 1]):
            t = lg_term[j]
            if t >= n_terms:
                continue
            for e in range(p_off[t], p_off[t + 1]):
                s = p_slot[e]
                if stamp[s] != hit and tk_min[s] <= upto:
                    stamp[s] = hit
                    if nt == touched.shape[0]:
                        bigger = np.empty(2 * nt, np.int64)
                        bigger[:nt] = touched
                        touched = bigger
                    touched[nt] = s
                    nt += 1
        lo += 1
    recomputed = 0
    scored = 0
    for c in range(nt):
        s = touched[c]
        dirty[s] = 1
        if tk_len[s] < k[s]:
            # a short list holds every matching message: only remove the expired ones
            base = tk_base[s]
            L = 0
            mn = _NONE
            for r in range(tk_len[s]):
                if tk_seq[base + r] > upto:
                    tk_seq[base + L] = tk_seq[base + r]
                    tk_id[base + L] = tk_id[base + r]
                    tk_score[base + L] = tk_score[base + r]
                    mn = min(mn, tk_seq[base + L])
                    L += 1
            tk_len[s] = L
            tk_min[s] = mn
        else:
            stamp_next += 1
            scored += _recompute(s, lo, w_seq, w_id, w_x, w_y, w_off, lg_term, lg_w, lg_prev,
                                 lg_msg, lg_lo, head, toff, tlen, s_terms, s_w, sx, sy, alpha,
                                 k, max_dist, tk_base, tk_len, tk_seq, tk_id, tk_score, tk_min,
                                 mstamp, stamp_next)
            recomputed += 1
    return lo, recomputed, scored, stamp_next


@numba.njit(cache=True)
def _recompute_many(slots, lo, w_seq, w_id, w_x, w_y, w_off, lg_term, lg_w, lg_prev, lg_msg,
                    lg_lo, head, toff, tlen, s_terms, s_w, sx, sy, alpha, k, max_dist,
                    tk_base, tk_len, tk_seq, tk_id, tk_score, tk_min, mstamp, stamp_next):
    """:func:`_recompute` for each slot (initial results of new subscriptions)."""
    scored = 0
    for q in range(slots.shape[0]):
        stamp_next += 1
        scored += _recompute(slots[q], lo, w_seq, w_id, w_x, w_y, w_off, lg_term, lg_w,
                             lg_prev, lg_msg, lg_lo, head, toff, tlen, s_terms, s_w, sx, sy,
                             alpha, k, max_dist, tk_base, tk_len, tk_seq, tk_id, tk_score,
                             tk_min, mstamp, stamp_next)
    return scored, stamp_next


@numba.njit(cache=True)
def _changed(slots, tk_base, tk_len, tk_id, tk_score, rep_len, rep_id):
    """Of the dirty ``slots``, those whose top-k ids differ from the last reported ones;
    their reported copy is brought up to date. Returns (changed slots, CSR offsets, ids,
    scores)."""
    flag = np.zeros(slots.shape[0], np.bool_)
    total = 0
    for q in range(slots.shape[0]):
        s = slots[q]
        base = tk_base[s]
        L = tk_len[s]
        same = L == rep_len[s]
        if same:
            for r in range(L):
                if tk_id[base + r] != rep_id[base + r]:
                    same = False
                    break
        if not same:
            flag[q] = True
            total += L
            for r in range(L):
                rep_id[base + r] = tk_id[base + r]
            rep_len[s] = L
    n = 0
    for q in range(slots.shape[0]):
        if flag[q]:
            n += 1
    out_s = np.empty(n, np.int64)
    off = np.zeros(n + 1, np.int64)
    ids = np.empty(total, np.int64)
    scores = np.empty(total)
    c = 0
    for q in range(slots.shape[0]):
        if flag[q]:
            s = slots[q]
            out_s[c] = s
            base = tk_base[s]
            L = tk_len[s]
            for r in range(L):
                ids[off[c] + r] = tk_id[base + r]
                scores[off[c] + r] = tk_score[base + r]
            off[c + 1] = off[c] + L
            c += 1
    return out_s, off, ids, scores


# ----------------------------------------------------------------------------- the core
class BruteForceCore:
    """Exact, unpruned top-k maintenance with the SkypeCore interface (the reference)."""

    def __init__(self, cfg, **_ignored):
        self.cfg = cfg
        self.max_dist = float(cfg.max_dist)
        self.subs = SubTable()
        self._lists = None                       # per-term slot lists, rebuilt when stale
        # window copy: messages at local indexes [lo, hi), their terms at log [lg_lo, lg_hi)
        cap = 1024
        self.w_seq = np.zeros(cap, np.int64)
        self.w_id = np.zeros(cap, np.int64)
        self.w_x = np.zeros(cap)
        self.w_y = np.zeros(cap)
        self.w_t = np.zeros(cap)
        self.w_off = np.zeros(cap + 1, np.int64)
        self.mstamp = np.zeros(cap, np.int64)
        self.lo = self.hi = 0
        self.lg_term = np.zeros(4 * cap, np.int64)
        self.lg_w = np.zeros(4 * cap)
        self.lg_prev = np.full(4 * cap, -1, np.int64)
        self.lg_msg = np.zeros(4 * cap, np.int64)
        self.lg_lo = self.lg_hi = 0
        self.head = np.full(1024, -1, np.int64)
        # top-k lists: slot s owns pool[tk_base[s] : tk_base[s] + k[s]]
        self.tk_base = np.zeros(16, np.int64)
        self.tk_len = np.zeros(16, np.int64)
        self.tk_min = np.full(16, _NONE, np.int64)
        self.rep_len = np.zeros(16, np.int64)    # length of the last reported list
        self.dirty = np.zeros(16, np.uint8)
        self.stamp = np.zeros(16, np.int64)
        self.tk_seq = np.zeros(1024, np.int64)
        self.tk_id = np.zeros(1024, np.int64)
        self.tk_score = np.zeros(1024)
        self.rep_id = np.zeros(1024, np.int64)
        self.pool_used = 0
        self.pool_live = 0
        self.stamp_next = 0
        self._stats = {"messages": 0, "amp_seconds": 0.0, "emp_seconds": 0.0,
                       "scored_arrival": 0, "scored_expiry": 0, "inserted": 0, "recomputed": 0,
                       "initialised": 0}

    # ------------------------------------------------------------------ subscriptions
    def add(self, b: SubscriptionBatch) -> np.ndarray:
        """Insert the subscriptions of ``b`` and compute their initial top-k lists now."""
        ids = b.ids.tolist()
        for pos, i in enumerate(ids):
            if i in self.subs:
                raise InvalidInput(f"subscription #{pos} (id={i}): field 'id': "
                                   f"duplicate id (already subscribed)")
        slots = self.subs.add(b)
        n = len(self.subs.alive)
        for name, fill in (("tk_base", 0), ("tk_len", 0), ("tk_min", _NONE), ("rep_len", 0),
                           ("dirty", 0), ("stamp", 0)):
            setattr(self, name, grow(getattr(self, name), n, fill))
        k = self.subs.k[slots]
        need = int(k.sum())
        if self.pool_used + need > len(self.tk_seq):
            self._compact_pool(need)
        base = self.pool_used + np.concatenate([[0], np.cumsum(k)[:-1]]).astype(np.int64)
        self.tk_base[slots] = base
        self.pool_used += need
        self.pool_live += need
        self.tk_len[slots] = 0
        self.tk_min[slots] = _NONE
        self.rep_len[slots] = 0
        self.dirty[slots] = 1
        self._lists = None
        t0 = time.perf_counter()
        scored, self.stamp_next = _recompute_many(
            slots.astype(np.int64), self.lo, *self._window_args(), *self._sub_args(),
            *self._topk_args(), self.mstamp, self.stamp_next)
        self._stats["initialised"] += len(slots)
        self._stats["init_seconds"] = self._stats.get("init_seconds", 0.0) + time.perf_counter() - t0
        return slots

    def remove(self, ids) -> None:
        ids = np.asarray(ids, np.int64).ravel()
        seen = set()
        for i in ids.tolist():
            if i not in self.subs or i in seen:
                raise UnknownSubscription(f"unknown subscription id={i!r}")
            seen.add(i)
        slots = np.fromiter((self.subs.slot(i) for i in ids.tolist()), np.int64, len(ids))
        self.pool_live -= int(self.subs.k[slots].sum())
        self.dirty[slots] = 0
        self.tk_len[slots] = 0
        self.tk_min[slots] = _NONE
        self.subs.remove(slots)
        self._lists = None

    def _compact_pool(self, extra: int) -> None:
        live = self.subs.live_slots()
        size = max(2 * (self.pool_live + extra), 1024)
        arrays = [np.zeros(size, a.dtype) for a in (self.tk_seq, self.tk_id, self.tk_score, self.rep_id)]
        pos = 0
        for s in live.tolist():
            a, k = int(self.tk_base[s]), int(self.subs.k[s])
            for new, old in zip(arrays, (self.tk_seq, self.tk_id, self.tk_score, self.rep_id)):
                new[pos: pos + k] = old[a: a + k]
            self.tk_base[s] = pos
            pos += k
        self.tk_seq, self.tk_id, self.tk_score, self.rep_id = arrays
        self.pool_used = self.pool_live = pos

    # ------------------------------------------------------------------ argument packs
    def _window_args(self):
        return (self.w_seq, self.w_id, self.w_x, self.w_y, self.w_off, self.lg_term, self.lg_w,
                self.lg_prev, self.lg_msg, self.lg_lo, self.head)

    def _sub_args(self):
        t = self.subs
        return (t.toff, t.tlen, t.terms, t.w, t.x, t.y, t.alpha, t.k, self.max_dist)

    def _topk_args(self):
        return (self.tk_base, self.tk_len, self.tk_seq, self.tk_id, self.tk_score, self.tk_min)

    def _postings(self):
        if self._lists is None:
            off, slot, _pos = term_postings(self.subs)
            self._lists = (off, slot)
        return self._lists

    # ------------------------------------------------------------------ window copy
    def _reserve(self, n_msgs: int, n_terms: int, max_term: int) -> None:
        """Room for a batch: drop the expired prefix when it is large, else grow."""
        if self.hi + n_msgs > len(self.w_seq) or self.lg_hi + n_terms > len(self.lg_term):
            self._shift()
        need = self.hi + n_msgs
        if need > len(self.w_seq):
            size = max(need, 2 * len(self.w_seq))
            for name in ("w_seq", "w_id", "w_x", "w_y", "w_t", "mstamp"):
                setattr(self, name, grow(getattr(self, name), size))
            self.w_off = grow(self.w_off, size + 1)
        need = self.lg_hi + n_terms
        if need > len(self.lg_term):
            size = max(need, 2 * len(self.lg_term))
            self.lg_term = grow(self.lg_term, size)
            self.lg_w = grow(self.lg_w, size)
            self.lg_prev = grow(self.lg_prev, size, -1)
            self.lg_msg = grow(self.lg_msg, size)
        if max_term >= len(self.head):
            self.head = grow(self.head, max_term + 1, -1)

    def _shift(self) -> None:
        """Move the live window to the front of the arrays (indexes shift down)."""
        lo, hi, glo, ghi = self.lo, self.hi, self.lg_lo, self.lg_hi
        if lo == 0 and glo == 0:
            return
        for name in ("w_seq", "w_id", "w_x", "w_y", "w_t"):
            arr = getattr(self, name)
            arr[: hi - lo] = arr[lo:hi]
        self.w_off[: hi - lo + 1] = self.w_off[lo: hi + 1] - glo
        self.mstamp[:] = 0
        self.lg_term[: ghi - glo] = self.lg_term[glo:ghi]
        self.lg_w[: ghi - glo] = self.lg_w[glo:ghi]
        prev = self.lg_prev[glo:ghi] - glo
        prev[prev < 0] = -1
        self.lg_prev[: ghi - glo] = prev
        self.lg_msg[: ghi - glo] = self.lg_msg[glo:ghi] - lo
        h = self.head - glo
        h[h < 0] = -1
        self.head = h
        self.lo, self.hi, self.lg_lo, self.lg_hi = 0, hi - lo, 0, ghi - glo

    # ------------------------------------------------------------------ stream
    def process(self, msgs: MessageBatch, seqs, expire_upto, last: bool = False) -> None:
        """Arrivals of a batch, then every expiry up to the batch's last watermark.

        The final lists are exact whatever the interleaving: a list whose member expired is
        recomputed from the final window, and any other list saw every arrival."""
        n = len(msgs)
        if n == 0:
            return
        seqs = np.asarray(seqs, np.int64)
        expire_upto = np.asarray(expire_upto, np.int64)
        t0 = time.perf_counter()
        max_term = int(msgs.term_ids.max(initial=-1))
        self._reserve(n, len(msgs.term_ids), max_term)
        t_col = msgs.t if msgs.t is not None else np.full(n, np.nan)
        self.hi, self.lg_hi = _append(msgs.offsets, msgs.term_ids, msgs.weights, msgs.x, msgs.y,
                                      t_col, msgs.ids, seqs, self.w_seq, self.w_id, self.w_x,
                                      self.w_y, self.w_t, self.w_off, self.hi, self.lg_term,
                                      self.lg_w, self.lg_prev, self.lg_msg, self.lg_hi, self.head)
        off, slot = self._postings()
        t = self.subs
        scored, inserted, self.stamp_next = _arrive(
            msgs.offsets, msgs.term_ids, msgs.weights, msgs.x, msgs.y, msgs.ids, seqs,
            off, slot, t.toff, t.tlen, t.terms, t.w, t.x, t.y, t.alpha, t.k, self.max_dist,
            *self._topk_args(), self.dirty, self.stamp, self.stamp_next)
        t1 = time.perf_counter()
        self._stats["scored_arrival"] += int(scored)
        self._stats["inserted"] += int(inserted)
        self._stats["amp_seconds"] += t1 - t0
        self._stats["messages"] += n
        self.expire(int(expire_upto.max()))

    def expire(self, upto_seq: int) -> None:
        """Drop window messages with seq <= upto_seq, repairing the affected lists."""
        t0 = time.perf_counter()
        off, slot = self._postings()
        old_lo = self.lo
        self.lo, recomputed, scored, self.stamp_next = _expire(
            int(upto_seq), self.lo, self.hi, *self._window_args(), off, slot,
            *self._sub_args(), *self._topk_args(), self.dirty, self.stamp, self.mstamp,
            self.stamp_next)
        if self.lo > old_lo:
            self.lg_lo = int(self.w_off[self.lo])
        self._stats["recomputed"] += int(recomputed)
        self._stats["scored_expiry"] += int(scored)
        self._stats["emp_seconds"] += time.perf_counter() - t0

    def reeval_requests(self):
        """Always empty: lists are repaired from the core's own window copy."""
        return np.zeros(0, np.int64), SubscriptionBatch.empty(), np.zeros(0, np.int64)

    def apply_reevals(self, slots, cands, window_size: int) -> None:
        if len(slots):
            raise ValueError("BruteForceCore never requests re-evaluations")

    # ------------------------------------------------------------------ results
    def take_updates(self):
        """(sub_ids, offsets, msg_ids, scores) of the lists whose ids changed since the
        previous call (a new subscription starts from an empty list)."""
        slots = np.flatnonzero(self.dirty[: self.subs.n]).astype(np.int64)
        self.dirty[slots] = 0
        out, off, ids, scores = _changed(slots, self.tk_base, self.tk_len, self.tk_id,
                                         self.tk_score, self.rep_len, self.rep_id)
        return self.subs.ids[out].copy(), off, ids, scores

    def topk_arrays(self, slots):
        """(sub_ids, offsets, msg_ids, scores) of the current lists of ``slots``."""
        slots = np.asarray(slots, np.int64)
        off, rows = runs(self.tk_base[slots], self.tk_len[slots])
        return self.subs.ids[slots].copy(), off, self.tk_id[rows], self.tk_score[rows]

    def topk(self, sub_id: int) -> list[tuple[int, float]]:
        s = self.subs.slot(int(sub_id))
        a, L = int(self.tk_base[s]), int(self.tk_len[s])
        return list(zip(self.tk_id[a: a + L].tolist(), self.tk_score[a: a + L].tolist()))

    def stats(self) -> dict:
        live = self.subs.live_slots()
        out = dict(self._stats)
        out.update({
            "subscriptions": len(self.subs),
            "window": int(self.hi - self.lo),
            "avg_buffer": float(self.tk_len[live].mean()) if len(live) else 0.0,
            "reevaluations": 0,
            "verified": self._stats["scored_arrival"],
        })
        return out


def BruteForceEngine(cfg):
    """A complete engine (the public Engine API) on :class:`BruteForceCore`."""
    from rankcast.kinds.spatial.engine import Engine
    return Engine(cfg, core=BruteForceCore)

"""The sliding window and its message index (the re-evaluation side of Skype, paper Sec. 4).

``WindowClock`` turns a stream position into expiry boundaries: before message ``i`` enters,
every sequence number ``<= expire_upto[i]`` leaves (count window: ``seq - W``; time window: the
last message with ``t <= t_i - T``).

``MessageWindow`` keeps the window's messages in insertion order (a ring of columns plus a
ring of their terms) and a message index that answers "the best K messages for subscription
s" without scanning the window: the postings of each term are split into *buckets* by
spatial grid cell (``GRID`` x ``GRID`` over the bounds) and weight band (``BANDS`` geometric
bands) once the term has ``FINE_FROM`` live postings (a rarer term keeps one bucket: splitting
a few postings costs memory and buys no pruning), and each bucket is a chain of chunks of
``CHUNK`` postings in arrival order, with the
bounding box and the largest weight of every bucket and chunk (a flat, append-and-expire
cousin of the IR-tree the paper uses). A query visits the buckets of the subscription's
terms best bound first, skips chunks whose own bound cannot help, and stops when no bucket
can beat the K-th score.
A message is scored only from the list of its first term shared with s, so each message is
scored once; the bound of a chunk covers the rest of s's terms (see ``_text_ub``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np
from numba import types
from numba.typed import Dict

from ..columns import MessageBatch, SubscriptionBatch
from ..config import EngineConfig
from .scoring import EPS, NO_MATCH, below, combine, score, ssim

__all__ = ["WindowClock", "MessageWindow", "CandidateLists", "CHUNK", "GRID", "BANDS", "FINE_FROM"]

CHUNK = 8
FINE_FROM = 256
GRID = 8
BANDS = 8
BAND_RATIO = 0.5
I64_MAX = np.iinfo(np.int64).max


class WindowClock:
    """Expiry boundaries of a stream; the one place that knows the window's extent."""

    def __init__(self, cfg: EngineConfig):
        self.count = cfg.window
        self.seconds = cfg.window_seconds
        self._seq = np.zeros(0, np.int64)    # time windows: (seq, t) of messages still inside
        self._t = np.zeros(0, np.float64)
        self.boundary = -1                   # every seq <= boundary has left
        self.t_max = -math.inf

    def advance(self, seqs: np.ndarray, t: np.ndarray) -> np.ndarray:
        if self.count is not None:
            out = np.maximum(seqs - self.count, -1)
        else:
            all_seq = np.concatenate([self._seq, seqs])
            all_t = np.concatenate([self._t, t])
            idx = np.searchsorted(all_t, t - self.seconds, side="right") - 1
            out = np.where(idx >= 0, all_seq[np.maximum(idx, 0)], -1)
            out = np.maximum(out, self.boundary)
            keep = all_seq > (out[-1] if len(out) else self.boundary)
            self._seq, self._t = all_seq[keep], all_t[keep]
        if len(seqs):
            self.boundary = max(self.boundary, int(out[-1]))
            self.t_max = max(self.t_max, float(np.nanmax(t)) if np.isfinite(t).any() else self.t_max)
        return out.astype(np.int64)


@dataclass
class CandidateLists:
    """Per-subscription candidate messages, best first ((score, seq) descending)."""

    offsets: np.ndarray   # int64[n + 1]
    seq: np.ndarray       # int64
    ids: np.ndarray       # int64
    t: np.ndarray         # float64
    score: np.ndarray     # float64
    complete: np.ndarray  # bool[n]: every matching message of the searched range is listed
    work: np.ndarray | None = None  # int64[n]: postings scored to answer each row

    def __len__(self) -> int:
        return len(self.complete)

    @staticmethod
    def merge(parts: list["CandidateLists"], K: np.ndarray) -> "CandidateLists":
        """Per-row top-K of several lists over disjoint message sets (window shards).

        A row is complete only if it is complete in every part and keeps all it got."""
        K = np.asarray(K, np.int64)
        if len(parts) == 1:
            return parts[0]
        n = len(K)
        bases = np.cumsum([0] + [len(p.seq) for p in parts[:-1]])
        offs = np.stack([p.offsets + b for p, b in zip(parts, bases)])
        cat = lambda name, dt: np.concatenate([getattr(p, name) for p in parts]).astype(dt, copy=False)
        works = np.stack([p.work if p.work is not None else np.zeros(n, np.int64) for p in parts])
        comps = np.stack([p.complete for p in parts])
        off, seq, ids, t, sc, comp, work = _merge_candidates(
            n, K, offs, cat("seq", np.int64), cat("ids", np.int64), cat("t", np.float64),
            cat("score", np.float64), comps, works)
        return CandidateLists(off, seq, ids, t, sc, comp, work)


# --------------------------------------------------------------------------- kernels

@numba.njit(cache=True)
def _merge_candidates(n, K, offs, seqs, ids, ts, scs, comps, works):
    """Per-row top-K[i] of S sorted candidate lists by (score desc, seq desc).

    offs: int64[S, n + 1]; the other arrays are the S lists concatenated (list s starts at
    its own base, given by the row offsets shifted). Returns the merged CSR arrays."""
    S = offs.shape[0]
    out_off = np.zeros(n + 1, np.int64)
    total = 0
    for i in range(n):
        m = 0
        for s in range(S):
            m += offs[s, i + 1] - offs[s, i]
        total += min(m, K[i])
    o_seq = np.empty(total, np.int64)
    o_id = np.empty(total, np.int64)
    o_t = np.empty(total, np.float64)
    o_sc = np.empty(total, np.float64)
    comp = np.ones(n, np.bool_)
    work = np.zeros(n, np.int64)
    head = np.empty(S, np.int64)
    w = 0
    for i in range(n):
        avail = 0
        for s in range(S):
            head[s] = offs[s, i]
            avail += offs[s, i + 1] - offs[s, i]
            if not comps[s, i]:
                comp[i] = False
            work[i] += works[s, i]
        take = min(avail, K[i])
        if take < avail:
            comp[i] = False
        for _ in range(take):
            best = -1
            for s in range(S):
                if head[s] < offs[s, i + 1]:
                    if best < 0:
                        best = s
                    else:
                        a = head[s]
                        b = head[best]
                        if scs[a] > scs[b] or (scs[a] == scs[b] and seqs[a] > seqs[b]):
                            best = s
            r = head[best]
            o_seq[w] = seqs[r]
            o_id[w] = ids[r]
            o_t[w] = ts[r]
            o_sc[w] = scs[r]
            w += 1
            head[best] += 1
        out_off[i + 1] = w
    return out_off, o_seq, o_id, o_t, o_sc, comp, work


@numba.njit(cache=True, inline="always")
def _mindist(px, py, x0, y0, x1, y1):
    dx = max(x0 - px, 0.0, px - x1)
    dy = max(y0 - py, 0.0, py - y1)
    return math.sqrt(dx * dx + dy * dy)


@numba.njit(cache=True, inline="always")
def _text_ub(w, r, a_max):
    """Bound on TSim for a message whose first term shared with s is this one.

    ``w`` is s's weight of the term, ``r`` the L2 norm of s's later weights, ``a_max`` the
    largest weight of the term among the chunk's messages. With ``a`` the message's weight,
    TSim <= w*a + r*sqrt(1 - a*a) (Cauchy-Schwarz on the rest; the message is unit length),
    which grows with ``a`` up to ``w / sqrt(w*w + r*r)``, where it is ``sqrt(w*w + r*r)``.
    The search also takes ``w*a_max + sum(w_l * maxw(t_l))`` over s's later terms, with
    maxw(t) the largest weight term t ever had in this window (it never decreases, so it
    stays an upper bound), and uses the smaller of the two."""
    h = math.sqrt(w * w + r * r)
    if h <= 0.0:
        return 0.0
    if a_max >= w / h:
        return h
    return w * a_max + r * math.sqrt(max(0.0, 1.0 - a_max * a_max))


@numba.njit(cache=True, inline="always")
def _bucket_key(t, x, y, w, bounds, fine):
    """(term, grid cell, weight band) packed in one int64; one coarse key per term."""
    per_term = GRID * GRID * BANDS + 1
    if not fine:
        return t * per_term + GRID * GRID * BANDS
    cx = int((x - bounds[0]) / (bounds[2] - bounds[0]) * GRID)
    cy = int((y - bounds[1]) / (bounds[3] - bounds[1]) * GRID)
    cx = min(max(cx, 0), GRID - 1)
    cy = min(max(cy, 0), GRID - 1)
    band = BANDS - 1
    edge = BAND_RATIO
    while band > 0 and w < edge:   # bands [r, 1], [r^2, r), ... , [0, r^(BANDS-1))
        band -= 1
        edge *= BAND_RATIO
    return t * per_term + (cy * GRID + cx) * BANDS + band


@numba.njit(cache=True)
def _append(seqs, ids, xs, ys, ts, offsets, term_ids, weights, bounds,
            r_seq, r_id, r_x, r_y, r_t, r_toff, r_tlen, mask, count,
            tr_term, tr_w, tr_bk, tmask, tcount,
            ch_seq, ch_w, ch_ins, ch_n, ch_start, ch_next, ch_maxw, ch_box, free_chunks, n_free,
            bk_of, bk_head, bk_tail, bk_next, bk_maxw, bk_box, bk_live, n_bk, term_bk, term_maxw,
            term_live):
    """Append messages to the ring and their postings to their buckets.

    Returns (count, tcount, n_free, n_bk). Capacity is ensured by the caller."""
    for i in range(seqs.shape[0]):
        slot = count & mask
        r_seq[slot] = seqs[i]
        r_id[slot] = ids[i]
        r_x[slot] = xs[i]
        r_y[slot] = ys[i]
        r_t[slot] = ts[i]
        a = offsets[i]
        b = offsets[i + 1]
        r_toff[slot] = tcount
        r_tlen[slot] = b - a
        for j in range(a, b):
            t = term_ids[j]
            key = _bucket_key(t, xs[i], ys[i], weights[j], bounds, term_live[t] >= FINE_FROM)
            if key in bk_of:
                bk = bk_of[key]
            else:
                bk = n_bk
                n_bk += 1
                bk_of[key] = bk
                bk_head[bk] = -1
                bk_tail[bk] = -1
                bk_maxw[bk] = 0.0
                bk_box[bk, 0] = math.inf
                bk_box[bk, 1] = math.inf
                bk_box[bk, 2] = -math.inf
                bk_box[bk, 3] = -math.inf
                bk_live[bk] = 0
                bk_next[bk] = term_bk[t]
                term_bk[t] = bk
            c = bk_tail[bk]
            if c < 0 or ch_n[c] == ch_seq.shape[1]:
                n_free -= 1
                nc = free_chunks[n_free]
                ch_n[nc] = 0
                ch_start[nc] = 0
                ch_next[nc] = -1
                ch_maxw[nc] = 0.0
                ch_box[nc, 0] = math.inf
                ch_box[nc, 1] = math.inf
                ch_box[nc, 2] = -math.inf
                ch_box[nc, 3] = -math.inf
                if c < 0:
                    bk_head[bk] = nc
                else:
                    ch_next[c] = nc
                bk_tail[bk] = nc
                c = nc
            p = ch_n[c]
            ch_seq[c, p] = seqs[i]
            ch_w[c, p] = weights[j]
            ch_ins[c, p] = count
            ch_n[c] = p + 1
            ch_maxw[c] = max(ch_maxw[c], weights[j])
            ch_box[c, 0] = min(ch_box[c, 0], xs[i])
            ch_box[c, 1] = min(ch_box[c, 1], ys[i])
            ch_box[c, 2] = max(ch_box[c, 2], xs[i])
            ch_box[c, 3] = max(ch_box[c, 3], ys[i])
            bk_maxw[bk] = max(bk_maxw[bk], weights[j])
            bk_box[bk, 0] = min(bk_box[bk, 0], xs[i])
            bk_box[bk, 1] = min(bk_box[bk, 1], ys[i])
            bk_box[bk, 2] = max(bk_box[bk, 2], xs[i])
            bk_box[bk, 3] = max(bk_box[bk, 3], ys[i])
            bk_live[bk] += 1
            term_live[t] += 1
            term_maxw[t] = max(term_maxw[t], weights[j])
            tr_term[tcount & tmask] = t
            tr_w[tcount & tmask] = weights[j]
            tr_bk[tcount & tmask] = bk
            tcount += 1
        count += 1
    return count, tcount, n_free, n_bk


@numba.njit(cache=True)
def _expire(upto, head, count, r_seq, r_toff, r_tlen, mask, tr_term, tr_bk, tmask,
            ch_n, ch_start, ch_next, free_chunks, n_free, bk_head, bk_tail, bk_live, term_live):
    """Drop messages with seq <= upto from the front; returns (head, n_free). A message's
    postings are the first live ones of their buckets, which are in arrival order."""
    while head < count and r_seq[head & mask] <= upto:
        slot = head & mask
        a = r_toff[slot]
        for j in range(r_tlen[slot]):
            bk = tr_bk[(a + j) & tmask]
            term_live[tr_term[(a + j) & tmask]] -= 1
            c = bk_head[bk]
            ch_start[c] += 1
            bk_live[bk] -= 1
            if ch_start[c] == ch_n[c]:
                nxt = ch_next[c]
                bk_head[bk] = nxt
                if nxt < 0:
                    bk_tail[bk] = -1
                free_chunks[n_free] = c
                n_free += 1
        head += 1
    return head, n_free


@numba.njit(cache=True, inline="always")
def _sift_down(h_sc, h_seq, h_ins, size, sc, sq, ins):
    """Place (sc, sq, ins) at the root of the min-heap of ``size`` rows ordered by
    (score, seq) and sift it down."""
    k = 0
    while True:
        l = 2 * k + 1
        if l >= size:
            break
        rr = l + 1
        if rr < size and (h_sc[rr] < h_sc[l] or (h_sc[rr] == h_sc[l] and h_seq[rr] < h_seq[l])):
            l = rr
        if h_sc[l] > sc or (h_sc[l] == sc and h_seq[l] > sq):
            break
        h_sc[k] = h_sc[l]; h_seq[k] = h_seq[l]; h_ins[k] = h_ins[l]
        k = l
    h_sc[k] = sc; h_seq[k] = sq; h_ins[k] = ins


@numba.njit(cache=True)
def _search(s_off, s_terms, s_w, s_x, s_y, s_alpha, K, after_seq, upto_seq, max_dist,
            r_seq, r_id, r_x, r_y, r_t, r_toff, r_tlen, mask, tr_term, tr_w, tmask,
            ch_seq, ch_w, ch_ins, ch_n, ch_start, ch_next, ch_maxw, ch_box,
            bk_head, bk_next, bk_maxw, bk_box, bk_live, term_bk, term_maxw, n_terms):
    """Top-K[i] messages for each subscription row, best first.

    Returns (offsets, seq, ins, score, complete, work)."""
    n = K.shape[0]
    out_off = np.zeros(n + 1, np.int64)
    total = 0
    for i in range(n):
        total += K[i]
    o_seq = np.empty(total, np.int64)
    o_ins = np.empty(total, np.int64)
    o_sc = np.empty(total, np.float64)
    complete = np.zeros(n, np.bool_)
    work = np.zeros(n, np.int64)
    pos = 0
    for i in range(n):
        a = s_off[i]
        b = s_off[i + 1]
        q = b - a
        alpha = s_alpha[i]
        sx = s_x[i]
        sy = s_y[i]
        st = s_terms[a:b]
        sw = s_w[a:b]
        rest = np.zeros(q + 1)
        tail = np.zeros(q + 1)   # sum over later terms of w_s * (largest weight of the term)
        for j in range(q - 1, -1, -1):
            rest[j] = rest[j + 1] + sw[j] * sw[j]
            mw_t = term_maxw[st[j]] if st[j] < n_terms else 0.0
            tail[j] = tail[j + 1] + sw[j] * mw_t
        nbk = 0
        for j in range(q):
            t = st[j]
            if t < n_terms:
                bk = term_bk[t]
                while bk >= 0:
                    if bk_live[bk] > 0:
                        nbk += 1
                    bk = bk_next[bk]
        ub = np.empty(nbk)
        cj = np.empty(nbk, np.int64)
        cb = np.empty(nbk, np.int64)
        m = 0
        for j in range(q):
            t = st[j]
            if t >= n_terms:
                continue
            r = math.sqrt(rest[j + 1])
            bk = term_bk[t]
            while bk >= 0:
                if bk_live[bk] > 0:
                    d = _mindist(sx, sy, bk_box[bk, 0], bk_box[bk, 1], bk_box[bk, 2], bk_box[bk, 3])
                    tub = min(_text_ub(sw[j], r, bk_maxw[bk]), sw[j] * bk_maxw[bk] + tail[j + 1])
                    ub[m] = alpha * (1.0 - d / max_dist) + (1.0 - alpha) * tub
                    cj[m] = j
                    cb[m] = bk
                    m += 1
                bk = bk_next[bk]
        order = np.argsort(-ub)
        Ki = K[i]
        h_sc = np.empty(Ki)
        h_seq = np.empty(Ki, np.int64)
        h_ins = np.empty(Ki, np.int64)
        hn = 0
        scored = 0
        for oi in range(nbk):
            e = order[oi]
            if hn == Ki and below(ub[e], h_sc[0]):
                break
            j = cj[e]
            r = math.sqrt(rest[j + 1])
            c = bk_head[cb[e]]
            while c >= 0:
                cur = c
                c = ch_next[c]
                if hn == Ki:
                    d = _mindist(sx, sy, ch_box[cur, 0], ch_box[cur, 1], ch_box[cur, 2], ch_box[cur, 3])
                    tub = min(_text_ub(sw[j], r, ch_maxw[cur]), sw[j] * ch_maxw[cur] + tail[j + 1])
                    cub = alpha * (1.0 - d / max_dist) + (1.0 - alpha) * tub
                    if below(cub, h_sc[0]):
                        continue
                for p in range(ch_start[cur], ch_n[cur]):
                    sq = ch_seq[cur, p]
                    if sq <= after_seq or sq > upto_seq:
                        continue
                    ins = ch_ins[cur, p]
                    slot = ins & mask
                    ta = r_toff[slot]
                    tl = r_tlen[slot]
                    # TSim by the merge of the scoring module (same order, same bits), read
                    # from the ring; a shared term of s before position j means an earlier
                    # term's buckets own this message
                    ts = 0.0
                    shared = 0
                    earlier = False
                    u = 0
                    v = 0
                    while u < q and v < tl:
                        mt = tr_term[(ta + v) & tmask]
                        if st[u] == mt:
                            if u < j:
                                earlier = True
                                break
                            ts += sw[u] * tr_w[(ta + v) & tmask]
                            shared += 1
                            u += 1
                            v += 1
                        elif st[u] < mt:
                            u += 1
                        else:
                            v += 1
                    if earlier or shared == 0:
                        continue
                    sc = combine(alpha, ssim(sx, sy, r_x[slot], r_y[slot], max_dist), ts)
                    scored += 1
                    if hn < Ki:
                        k = hn
                        hn += 1
                        while k > 0:
                            par = (k - 1) // 2
                            if h_sc[par] < sc or (h_sc[par] == sc and h_seq[par] < sq):
                                break
                            h_sc[k] = h_sc[par]; h_seq[k] = h_seq[par]; h_ins[k] = h_ins[par]
                            k = par
                        h_sc[k] = sc; h_seq[k] = sq; h_ins[k] = ins
                    elif sc > h_sc[0] or (sc == h_sc[0] and sq > h_seq[0]):
                        _sift_down(h_sc, h_seq, h_ins, hn, sc, sq, ins)
        # emit best first: pop the min-heap into the tail of the row
        size = hn
        while size > 0:
            u = size - 1
            o_seq[pos + u] = h_seq[0]
            o_ins[pos + u] = h_ins[0]
            o_sc[pos + u] = h_sc[0]
            size -= 1
            _sift_down(h_sc, h_seq, h_ins, size, h_sc[size], h_seq[size], h_ins[size])
        pos += hn
        out_off[i + 1] = pos
        complete[i] = hn < Ki
        work[i] = scored + nbk
    return out_off, o_seq[:pos], o_ins[:pos], o_sc[:pos], complete, work


def _pow2(n: int) -> int:
    return 1 << max(4, int(n - 1).bit_length())


class MessageWindow:
    """The messages of the window (or of one window shard) and their index."""

    def __init__(self, cfg: EngineConfig, capacity: int | None = None):
        self.max_dist = cfg.max_dist
        cap = _pow2(capacity or min(cfg.window or 4096, 1 << 16))
        self._alloc_ring(cap, 8 * cap)
        self.count = 0     # messages ever appended
        self.head = 0      # index of the oldest message still held
        self.tcount = 0
        self.thead = 0
        nch = max(64, cap // 4)
        self.ch_seq = np.zeros((nch, CHUNK), np.int64)
        self.ch_w = np.zeros((nch, CHUNK))
        self.ch_ins = np.zeros((nch, CHUNK), np.int64)
        self.ch_n = np.zeros(nch, np.int64)
        self.ch_start = np.zeros(nch, np.int64)
        self.ch_next = np.full(nch, -1, np.int64)
        self.ch_maxw = np.zeros(nch)
        self.ch_box = np.zeros((nch, 4))
        self.free_chunks = np.arange(nch - 1, -1, -1, dtype=np.int64)
        self.n_free = nch
        self.bounds = np.asarray(cfg.bounds, np.float64)
        self.term_bk = np.full(1024, -1, np.int64)      # first bucket of each term
        self.term_maxw = np.zeros(1024)                 # largest weight each term ever had here
        self.term_live = np.zeros(1024, np.int64)       # live postings of each term
        self.bk_of = Dict.empty(key_type=types.int64, value_type=types.int64)
        nb = 1024
        self.bk_head = np.full(nb, -1, np.int64)
        self.bk_tail = np.full(nb, -1, np.int64)
        self.bk_next = np.full(nb, -1, np.int64)
        self.bk_maxw = np.zeros(nb)
        self.bk_box = np.zeros((nb, 4))
        self.bk_live = np.zeros(nb, np.int64)
        self.n_bk = 0
        self.id_seq: dict[int, int] = {}
        self.last_seq = -1
        self.t_max = -math.inf

    def _alloc_ring(self, cap, tcap):
        self.mask = cap - 1
        self.r_seq = np.zeros(cap, np.int64)
        self.r_id = np.zeros(cap, np.int64)
        self.r_x = np.zeros(cap)
        self.r_y = np.zeros(cap)
        self.r_t = np.zeros(cap)
        self.r_toff = np.zeros(cap, np.int64)
        self.r_tlen = np.zeros(cap, np.int64)
        self.tmask = tcap - 1
        self.tr_term = np.zeros(tcap, np.int64)
        self.tr_w = np.zeros(tcap)
        self.tr_bk = np.zeros(tcap, np.int64)

    def __len__(self) -> int:
        return self.count - self.head

    # ------------------------------------------------------------------ capacity
    def _ensure(self, n_msgs: int, n_terms: int, max_term: int) -> None:
        cap = self.mask + 1
        tcap = self.tmask + 1
        if len(self) + n_msgs > cap or (self.tcount - self.thead) + n_terms > tcap:
            new_cap = _pow2(max(cap, len(self) + n_msgs) * 2)
            new_tcap = _pow2(max(tcap, (self.tcount - self.thead) + n_terms) * 2)
            old = [(a, getattr(self, a)) for a in ("r_seq", "r_id", "r_x", "r_y", "r_t", "r_toff", "r_tlen")]
            old_t, old_w, old_b, old_mask, old_tmask = self.tr_term, self.tr_w, self.tr_bk, self.mask, self.tmask
            self._alloc_ring(new_cap, new_tcap)
            idx = np.arange(self.head, self.count, dtype=np.int64)
            for name, arr in old:
                getattr(self, name)[idx & self.mask] = arr[idx & old_mask]
            tidx = np.arange(self.thead, self.tcount, dtype=np.int64)
            self.tr_term[tidx & self.tmask] = old_t[tidx & old_tmask]
            self.tr_w[tidx & self.tmask] = old_w[tidx & old_tmask]
            self.tr_bk[tidx & self.tmask] = old_b[tidx & old_tmask]
        if self.n_free < n_terms:
            nch = len(self.ch_n)
            grow = max(nch, n_terms)
            for name in ("ch_seq", "ch_w", "ch_ins", "ch_box"):
                a = getattr(self, name)
                setattr(self, name, np.concatenate([a, np.zeros((grow,) + a.shape[1:], a.dtype)]))
            self.ch_n = np.concatenate([self.ch_n, np.zeros(grow, np.int64)])
            self.ch_start = np.concatenate([self.ch_start, np.zeros(grow, np.int64)])
            self.ch_next = np.concatenate([self.ch_next, np.full(grow, -1, np.int64)])
            self.ch_maxw = np.concatenate([self.ch_maxw, np.zeros(grow)])
            # the free stack must be able to hold every chunk: all may be freed at once
            free = np.empty(nch + grow, np.int64)
            free[: self.n_free] = self.free_chunks[: self.n_free]
            free[self.n_free: self.n_free + grow] = np.arange(nch + grow - 1, nch - 1, -1)
            self.free_chunks = free
            self.n_free += grow
        if max_term >= len(self.term_bk):
            n = max(2 * len(self.term_bk), max_term + 1)
            self.term_bk = np.concatenate([self.term_bk, np.full(n - len(self.term_bk), -1, np.int64)])
            self.term_maxw = np.concatenate([self.term_maxw, np.zeros(n - len(self.term_maxw))])
            self.term_live = np.concatenate([self.term_live, np.zeros(n - len(self.term_live), np.int64)])
        if self.n_bk + n_terms > len(self.bk_head):
            n = max(2 * len(self.bk_head), self.n_bk + n_terms)
            for name, fill in (("bk_head", -1), ("bk_tail", -1), ("bk_next", -1), ("bk_maxw", 0), ("bk_live", 0)):
                a = getattr(self, name)
                setattr(self, name, np.concatenate([a, np.full(n - len(a), fill, a.dtype)]))
            self.bk_box = np.concatenate([self.bk_box, np.zeros((n - len(self.bk_box), 4))])

    # ------------------------------------------------------------------ updates
    def append(self, msgs: MessageBatch, seqs: np.ndarray, expire_upto: np.ndarray | None = None) -> None:
        """Add messages (seqs increasing); expire up to ``expire_upto[-1]`` first if given.

        Messages of one batch enter before the batch's expiries apply: a message the batch
        itself pushes out is still appended and then dropped, as in the stream."""
        if len(msgs) == 0:
            if expire_upto is not None and len(expire_upto):
                self.expire(int(expire_upto[-1]))
            return
        n_terms = len(msgs.term_ids)
        self._ensure(len(msgs), n_terms, int(msgs.term_ids.max()) if n_terms else 0)
        self.count, self.tcount, self.n_free, self.n_bk = _append(
            seqs, msgs.ids, msgs.x, msgs.y, msgs.t, msgs.offsets, msgs.term_ids, msgs.weights, self.bounds,
            self.r_seq, self.r_id, self.r_x, self.r_y, self.r_t, self.r_toff, self.r_tlen,
            self.mask, self.count, self.tr_term, self.tr_w, self.tr_bk, self.tmask, self.tcount,
            self.ch_seq, self.ch_w, self.ch_ins, self.ch_n, self.ch_start, self.ch_next,
            self.ch_maxw, self.ch_box, self.free_chunks, self.n_free,
            self.bk_of, self.bk_head, self.bk_tail, self.bk_next, self.bk_maxw, self.bk_box,
            self.bk_live, self.n_bk, self.term_bk, self.term_maxw, self.term_live)
        self.id_seq.update(zip(msgs.ids.tolist(), seqs.tolist()))
        self.last_seq = int(seqs[-1])
        if np.isfinite(msgs.t).any():
            self.t_max = max(self.t_max, float(np.nanmax(msgs.t)))
        if expire_upto is not None and len(expire_upto):
            self.expire(int(expire_upto[-1]))

    def expire(self, upto_seq: int) -> None:
        """Drop every message with seq <= upto_seq."""
        old_head = self.head
        self.head, self.n_free = _expire(
            upto_seq, self.head, self.count, self.r_seq, self.r_toff, self.r_tlen, self.mask,
            self.tr_term, self.tr_bk, self.tmask, self.ch_n, self.ch_start, self.ch_next,
            self.free_chunks, self.n_free, self.bk_head, self.bk_tail, self.bk_live, self.term_live)
        if self.head > old_head:
            idx = np.arange(old_head, self.head, dtype=np.int64) & self.mask
            gone = self.r_id[idx]
            pop = self.id_seq.pop
            for i in gone.tolist():
                pop(i, None)
            last = (self.head - 1) & self.mask
            self.thead = int(self.r_toff[last] + self.r_tlen[last])

    # ------------------------------------------------------------------ queries
    def has_ids(self, ids: np.ndarray) -> np.ndarray:
        d = self.id_seq
        return np.fromiter((i in d for i in ids.tolist()), bool, len(ids))

    def search(self, subs: SubscriptionBatch, K: np.ndarray, after_seq: int = -1,
               upto_seq: int | None = None) -> CandidateLists:
        """Top-K[i] window messages per subscription row (see module docstring)."""
        K = np.asarray(K, np.int64)
        up = I64_MAX if upto_seq is None else int(upto_seq)
        off, seq, ins, sc, comp, work = _search(
            subs.offsets, subs.term_ids, subs.weights, subs.x, subs.y, subs.alpha, K,
            int(after_seq), up, self.max_dist,
            self.r_seq, self.r_id, self.r_x, self.r_y, self.r_t, self.r_toff, self.r_tlen,
            self.mask, self.tr_term, self.tr_w, self.tmask,
            self.ch_seq, self.ch_w, self.ch_ins, self.ch_n, self.ch_start, self.ch_next,
            self.ch_maxw, self.ch_box, self.bk_head, self.bk_next, self.bk_maxw, self.bk_box,
            self.bk_live, self.term_bk, self.term_maxw, len(self.term_bk))
        slots = ins & self.mask
        return CandidateLists(off, seq, self.r_id[slots], self.r_t[slots], sc, comp, work)

    def snapshot(self) -> MessageBatch:
        """The window's messages, oldest first (for offline evaluation and tests)."""
        idx = np.arange(self.head, self.count, dtype=np.int64) & self.mask
        lens = self.r_tlen[idx]
        off = np.zeros(len(idx) + 1, np.int64)
        np.cumsum(lens, out=off[1:])
        tpos = (np.repeat(self.r_toff[idx], lens) + (np.arange(off[-1]) - np.repeat(off[:-1], lens))) & self.tmask
        return MessageBatch(self.r_id[idx].copy(), self.r_x[idx].copy(), self.r_y[idx].copy(),
                            self.r_t[idx].copy(), off, self.tr_term[tpos], self.tr_w[tpos])

    def seqs(self) -> np.ndarray:
        idx = np.arange(self.head, self.count, dtype=np.int64) & self.mask
        return self.r_seq[idx].copy()

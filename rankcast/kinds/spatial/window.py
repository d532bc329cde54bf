"""The sliding window and its message index (the re-evaluation side of Skype, paper Sec. 4).

``WindowClock`` turns a stream position into expiry boundaries: before message ``i`` enters,
every sequence number ``<= expire_upto[i]`` leaves (count window: ``seq - W``; time window: the
last message with ``t <= t_i - T``).

``MessageWindow`` keeps the window's messages in insertion order (a ring of columns plus a
ring of their terms) and a message index that answers "the best K messages for subscription
s" without scanning the window. The postings of each term form a tree (a flat,
append-and-expire cousin of the IR-tree the paper uses): the term's root holds them while the
term has fewer than ``FINE_FROM`` live postings; after that a posting goes down to the node of
its ``GRID`` x ``GRID`` cell and weight band (``BANDS`` geometric bands), and further down to
the node of its ``GRID`` x ``GRID`` sub-cell whenever the node it reached already holds more
than ``SPLIT_AT`` live postings (to ``MAX_LEVEL``). Each node keeps the bounding box and the
largest weight of its subtree and a chain of chunks of ``CHUNK`` postings in arrival order
(each with its own box and largest weight), so expiry pops from chunk heads.

A query is best-first over the trees of the subscription's terms: a max-heap of nodes by
score bound; a popped node's chunks are scanned (chunk bound, then the posting's own bound
from its location and weight, then the exact score from the ring) and its children pushed;
the query stops when no node left can beat the K-th score. A message is scored only from the
postings of its first term shared with s, so each message is scored once; the bounds cover
the rest of s's terms (see ``_text_ub``). A batch is answered in an order (most frequent
term, then Z-curve) that lets neighbouring queries share what is in cache.

Where a row's terms hold few postings (at most ``flat_upto`` live ones, ``FLAT_UPTO`` by
default), reading them all is cheaper than the walk: a best-first walk touches a node or a
chunk (each a cache miss on a large window) for every two or three postings it reads, on
dense streams where every term's postings spread over many cells. A large batch (a bulk
load's initial results) answers those rows from lists gathered once per batch (``_gather``:
each term's live postings in the asked range, in ring order, read from the ring in two
passes): every message sharing a term is scored exactly, from its first shared term's list,
and the best K selected. Both paths give the same rows, bit for bit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np
from numba import types
from numba.typed import Dict

from rankcast.common.arrays import concat_offsets, runs
from rankcast.kinds.spatial.columns import MessageBatch, SubscriptionBatch
from rankcast.config import EngineConfig
from .scoring import below, combine, ssim

__all__ = ["WindowClock", "MessageWindow", "CandidateLists", "CHUNK", "GRID", "BANDS", "FINE_FROM",
           "SPLIT_AT", "MAX_LEVEL", "FLAT_UPTO", "FLAT_BATCH"]

CHUNK = 8
# A term splits early (few postings keep whole-space boxes in its root) and a node late (every
# node popped costs its children's bounds): of the pairs tried, (16, 256) searched fastest on
# all three datasets (GeoNames, TWEETS-like, YELP-like: 1.2-1.45x faster than (256, 64)).
FINE_FROM = 16
SPLIT_AT = 256
MAX_LEVEL = 3
# Rows with at most this many live postings over their terms are read flat (see above). A
# 100k window in two shards, batches of 25k initial searches (thread CPU per row, first shard
# + floored shard): dense stream 13 + 12 us flat against 51 + 43 walked (every row is under
# the limit there); GeoNames 38 + 27 against 42 + 29, and slower than the walk from 8k on
FLAT_UPTO = 4096
HIST = 64           # buckets of the scores a flat row selects its best K from
# A batch reads rows flat only with a flat row per FLAT_BATCH live postings of the window at
# least: gathering the lists reads the whole window (about 4 ms at 450k postings, the walks
# of about 80 dense rows); smaller batches (the stream's re-evaluations) walk the index
FLAT_BATCH = 1024
GRID = 8
BANDS = 8
BAND_RATIO = 0.5
I64_MAX = np.iinfo(np.int64).max
PER_TERM = 1 + sum((GRID ** l) ** 2 * BANDS for l in range(1, MAX_LEVEL + 1))   # node keys per term


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

    def kth_scores(self, K: np.ndarray) -> np.ndarray:
        """Per row, the K[i]-th best score listed, or -inf where fewer are listed: a floor
        for searching the same subscriptions in another shard."""
        n = np.diff(self.offsets)
        out = np.full(len(n), -np.inf)
        full = n >= np.asarray(K, np.int64)
        out[full] = self.score[self.offsets[:-1][full] + np.asarray(K, np.int64)[full] - 1]
        return out

    def take(self, rows: np.ndarray, K: np.ndarray | None = None) -> "CandidateLists":
        """The lists of ``rows``, each cut to its best ``K[i]`` (None: whole): what a search
        for ``K[i]`` would have listed (a cut list is complete only if nothing was cut)."""
        rows = np.asarray(rows, np.int64)
        n = np.diff(self.offsets)[rows]
        comp = self.complete[rows]
        if K is not None:
            K = np.asarray(K, np.int64)
            comp = comp & (n <= K)
            n = np.minimum(n, K)
        off, idx = runs(self.offsets[rows], n)
        return CandidateLists(off, self.seq[idx], self.ids[idx], self.t[idx], self.score[idx], comp,
                              None if self.work is None else self.work[rows])

    @staticmethod
    def concat(parts: list["CandidateLists"]) -> "CandidateLists":
        """The rows of ``parts`` one after the other."""
        if len(parts) == 1:
            return parts[0]
        cat = lambda name: np.concatenate([getattr(p, name) for p in parts])
        work = None if any(p.work is None for p in parts) else cat("work")
        return CandidateLists(concat_offsets([p.offsets for p in parts]), cat("seq"), cat("ids"), cat("t"),
                              cat("score"), cat("complete"), work)

    @staticmethod
    def merge(parts: list["CandidateLists"], K: np.ndarray, asked: np.ndarray | None = None) -> "CandidateLists":
        """Per-row top-K of several lists over disjoint message sets (window shards).

        ``asked``: per row, how many each part was asked for (None: K). A part asked for
        fewer than K that lists all it was asked for lists its best only: the merge keeps
        the rows at or above the lowest listed row of every such part, all the union holds
        there (possibly fewer than K: an exact prefix, not complete). A row is complete only
        if it is complete in every part and keeps all it got."""
        K = np.asarray(K, np.int64)
        if len(parts) == 1:
            return parts[0]
        asked = K if asked is None else np.asarray(asked, np.int64)
        n, S = len(K), len(parts)
        # one concatenation per column (a shard answers a handful of rows: these calls, not
        # the merge, are most of the time)
        cat = lambda name, dt: np.concatenate([getattr(p, name) for p in parts]).astype(dt, copy=False)
        works = np.concatenate([p.work if p.work is not None else np.zeros(n, np.int64) for p in parts])
        off, seq, ids, t, sc, comp, work = _merge_candidates(
            n, K, asked, cat("offsets", np.int64).reshape(S, n + 1), cat("seq", np.int64), cat("ids", np.int64),
            cat("t", np.float64), cat("score", np.float64), cat("complete", np.bool_).reshape(S, n),
            works.astype(np.int64, copy=False).reshape(S, n))
        return CandidateLists(off, seq, ids, t, sc, comp, work)


# --------------------------------------------------------------------------- kernels

@numba.njit(cache=True)
def _merge_candidates(n, K, asked, offs, seqs, ids, ts, scs, comps, works):
    """Per-row top-K[i] of S sorted candidate lists by (score desc, seq desc), cut at the
    lowest listed row of every list that was asked for fewer than K[i] (``asked[i]``) and
    lists that many without being complete: below it, that list's messages are not known.

    offs: int64[S, n + 1], each list's own row offsets (from 0); the other arrays are the S
    lists concatenated (list s starts after the rows of the lists before it). Returns the
    merged CSR arrays."""
    S = offs.shape[0]
    base = np.zeros(S, np.int64)
    for s in range(1, S):
        base[s] = base[s - 1] + offs[s - 1, n]
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
        cut = -1                  # the highest (score, seq) among the cut lists' last rows
        for s in range(S):
            head[s] = base[s] + offs[s, i]
            got = offs[s, i + 1] - offs[s, i]
            avail += got
            if not comps[s, i]:
                comp[i] = False
                if asked[i] < K[i] and got >= asked[i] and got > 0:
                    last = base[s] + offs[s, i + 1] - 1
                    if cut < 0 or scs[last] > scs[cut] or (scs[last] == scs[cut] and seqs[last] > seqs[cut]):
                        cut = last
            work[i] += works[s, i]
        take = min(avail, K[i])
        kept = 0
        while kept < take:
            best = -1
            for s in range(S):
                if head[s] < base[s] + offs[s, i + 1]:
                    if best < 0:
                        best = s
                    else:
                        a = head[s]
                        b = head[best]
                        if scs[a] > scs[b] or (scs[a] == scs[b] and seqs[a] > seqs[b]):
                            best = s
            r = head[best]
            if cut >= 0 and (scs[r] < scs[cut] or (scs[r] == scs[cut] and seqs[r] < seqs[cut])):
                break             # below a cut list's last row: not known to be the next
            o_seq[w] = seqs[r]
            o_id[w] = ids[r]
            o_t[w] = ts[r]
            o_sc[w] = scs[r]
            w += 1
            kept += 1
            head[best] += 1
        if kept < avail:
            comp[i] = False
        out_off[i + 1] = w
    return out_off, o_seq[:w], o_id[:w], o_t[:w], o_sc[:w], comp, work


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
def _node_key(t, level, x, y, w, bounds):
    """(term, level, grid cell of that level, weight band) packed in one int64.

    Level 0 is the term's root (one per term); level l >= 1 cuts the bounds into
    ``GRID**l`` x ``GRID**l`` cells, each split by weight band."""
    if level == 0:
        return t * PER_TERM
    off = 1
    g = 1
    for _ in range(level - 1):
        g *= GRID
        off += g * g * BANDS
    g *= GRID
    cx = int((x - bounds[0]) / (bounds[2] - bounds[0]) * g)
    cy = int((y - bounds[1]) / (bounds[3] - bounds[1]) * g)
    cx = min(max(cx, 0), g - 1)
    cy = min(max(cy, 0), g - 1)
    band = BANDS - 1
    edge = BAND_RATIO
    while band > 0 and w < edge:   # bands [r, 1], [r^2, r), ... , [0, r^(BANDS-1))
        band -= 1
        edge *= BAND_RATIO
    return t * PER_TERM + off + (cy * g + cx) * BANDS + band


# Node rows: float [box x0, y0, x1, y1, largest weight] over the subtree since the node was
# opened (they never shrink, so they stay bounds); int [own chunk head, tail, first child,
# next sibling, parent, level, live postings of the subtree, previous sibling, key in
# ``nd_of`` (-1: a term's root)]. A node whose subtree's last posting expires is closed
# (unlinked, its row reused), so the nodes are those of the postings held.
NF_MAXW = 4
NI_HEAD, NI_TAIL, NI_CHILD, NI_NEXT, NI_PARENT, NI_LEVEL, NI_LIVE, NI_PREV, NI_KEY = range(9)
NI_WIDTH = 9
# Chunk rows (one row of each array per chunk, so a visit touches two places, not ten):
# float [box x0, y0, x1, y1, largest weight, x[CHUNK], y[CHUNK], w[CHUNK]];
# int [count, first live, next chunk, seq[CHUNK], ring position[CHUNK], signature[CHUNK],
# weight sketch[CHUNK]]. A posting's signature has bit ``t & 63`` set for every term t of its
# message, so a query knows, before it reads the message from the ring, which of its other
# terms the message surely lacks; its weight sketch holds in byte ``t & 7`` a bound on the
# message's weights of the terms t of that byte (see ``_sketch``), so the query also knows
# how much the terms it may share can add.
CF_MAXW = 4
CF_X = 5
CF_Y = CF_X + CHUNK
CF_W = CF_Y + CHUNK
CF_WIDTH = CF_W + CHUNK
CI_N, CI_START, CI_NEXT = range(3)
CI_SEQ = 3
CI_INS = CI_SEQ + CHUNK
CI_SIG = CI_INS + CHUNK
CI_QW = CI_SIG + CHUNK
CI_WIDTH = CI_QW + CHUNK


@numba.njit(cache=True, inline="always")
def _sketch(qw, t, w):
    """Weight sketch ``qw`` with the weight ``w`` of term ``t`` added: byte ``t & 7`` holds
    the largest ``floor(255 w) + 1`` (at most 255) of the terms of that byte, so byte / 255
    is above every such weight (weights of unit vectors are at most 1)."""
    sh = 8 * (t & 7)
    v = min(255, int(w * 255.0) + 1)
    if v > ((qw >> sh) & 255):
        qw = (qw & ~(255 << sh)) | (v << sh)
    return qw


@numba.njit(cache=True, inline="always")
def _sketch_ub(qw, t):
    """Bound from sketch ``qw`` on the weight of term ``t`` in the message."""
    return ((qw >> (8 * (t & 7))) & 255) / 255.0


@numba.njit(cache=True, inline="always")
def _reset_box(f, row):
    f[row, 0] = math.inf
    f[row, 1] = math.inf
    f[row, 2] = -math.inf
    f[row, 3] = -math.inf
    f[row, 4] = 0.0


@numba.njit(cache=True, inline="always")
def _grow_box(f, row, x, y, w):
    f[row, 0] = min(f[row, 0], x)
    f[row, 1] = min(f[row, 1], y)
    f[row, 2] = max(f[row, 2], x)
    f[row, 3] = max(f[row, 3], y)
    f[row, 4] = max(f[row, 4], w)


@numba.njit(cache=True, inline="always")
def _new_node(nd_f, nd_i, nd, parent, level):
    _reset_box(nd_f, nd)
    nd_i[nd, NI_HEAD] = -1
    nd_i[nd, NI_TAIL] = -1
    nd_i[nd, NI_CHILD] = -1
    nd_i[nd, NI_NEXT] = -1
    nd_i[nd, NI_PARENT] = parent
    nd_i[nd, NI_LEVEL] = level
    nd_i[nd, NI_LIVE] = 0
    nd_i[nd, NI_PREV] = -1
    nd_i[nd, NI_KEY] = -1


@numba.njit(cache=True, inline="always")
def _open_node(nd_free, n_nd_free, n_nd):
    """A row for a new node: a closed one's, else the next; returns (row, n_nd_free, n_nd)."""
    if n_nd_free > 0:
        n_nd_free -= 1
        return nd_free[n_nd_free], n_nd_free, n_nd
    return n_nd, n_nd_free, n_nd + 1


@numba.njit(cache=True, nogil=True)
def _append(seqs, ids, xs, ys, ts, offsets, term_ids, weights, bounds, fine_from, split_at,
            r_seq, r_id, r_x, r_y, r_t, r_toff, r_tlen, mask, count,
            tr_term, tr_w, tr_bk, tmask, tcount, ch_f, ch_i, free_chunks, n_free,
            nd_of, nd_f, nd_i, n_nd, nd_free, n_nd_free, term_root, term_maxw, term_live):
    """Append messages to the ring and their postings to the index.

    A posting walks down from its term's root, growing every node's bounds and live count
    on the way, and stops at the first node that is not split: the root while the term has
    fewer than ``fine_from`` live postings, a deeper node while it holds ``split_at`` or
    fewer (or at ``MAX_LEVEL``). Returns (count, tcount, n_free, n_nd, n_nd_free). Capacity
    is ensured by the caller."""
    for i in range(seqs.shape[0]):
        slot = count & mask
        x = xs[i]
        y = ys[i]
        r_seq[slot] = seqs[i]
        r_id[slot] = ids[i]
        r_x[slot] = x
        r_y[slot] = y
        r_t[slot] = ts[i]
        a = offsets[i]
        b = offsets[i + 1]
        r_toff[slot] = tcount
        r_tlen[slot] = b - a
        sig = 0
        qw = 0
        for j in range(a, b):
            sig |= 1 << (term_ids[j] & 63)
            qw = _sketch(qw, term_ids[j], weights[j])
        for j in range(a, b):
            t = term_ids[j]
            w = weights[j]
            nd = term_root[t]
            if nd < 0:
                nd, n_nd_free, n_nd = _open_node(nd_free, n_nd_free, n_nd)
                _new_node(nd_f, nd_i, nd, -1, 0)
                term_root[t] = nd
            level = 0
            while True:
                nd_i[nd, NI_LIVE] += 1
                _grow_box(nd_f, nd, x, y, w)
                if level == 0:
                    down = term_live[t] >= fine_from
                else:
                    down = level < MAX_LEVEL and nd_i[nd, NI_LIVE] > split_at
                if not down:
                    break
                key = _node_key(t, level + 1, x, y, w, bounds)
                if key in nd_of:
                    child = nd_of[key]
                else:
                    child, n_nd_free, n_nd = _open_node(nd_free, n_nd_free, n_nd)
                    nd_of[key] = child
                    _new_node(nd_f, nd_i, child, nd, level + 1)
                    nd_i[child, NI_KEY] = key
                    first = nd_i[nd, NI_CHILD]
                    nd_i[child, NI_NEXT] = first
                    if first >= 0:
                        nd_i[first, NI_PREV] = child
                    nd_i[nd, NI_CHILD] = child
                nd = child
                level += 1
            c = nd_i[nd, NI_TAIL]
            if c < 0 or ch_i[c, CI_N] == CHUNK:
                n_free -= 1
                nc = free_chunks[n_free]
                ch_i[nc, CI_N] = 0
                ch_i[nc, CI_START] = 0
                ch_i[nc, CI_NEXT] = -1
                _reset_box(ch_f, nc)
                if c < 0:
                    nd_i[nd, NI_HEAD] = nc
                else:
                    ch_i[c, CI_NEXT] = nc
                nd_i[nd, NI_TAIL] = nc
                c = nc
            p = ch_i[c, CI_N]
            ch_i[c, CI_SEQ + p] = seqs[i]
            ch_i[c, CI_INS + p] = count
            ch_i[c, CI_SIG + p] = sig
            ch_i[c, CI_QW + p] = qw
            ch_f[c, CF_X + p] = x
            ch_f[c, CF_Y + p] = y
            ch_f[c, CF_W + p] = w
            ch_i[c, CI_N] = p + 1
            _grow_box(ch_f, c, x, y, w)
            term_live[t] += 1
            term_maxw[t] = max(term_maxw[t], w)
            tr_term[tcount & tmask] = t
            tr_w[tcount & tmask] = w
            tr_bk[tcount & tmask] = nd
            tcount += 1
        count += 1
    return count, tcount, n_free, n_nd, n_nd_free


@numba.njit(cache=True, nogil=True)
def _expire(upto, head, count, r_seq, r_toff, r_tlen, mask, tr_term, tr_bk, tmask,
            ch_i, free_chunks, n_free, nd_i, nd_of, nd_free, n_nd_free, term_root, term_live):
    """Drop messages with seq <= upto from the front; returns (head, n_free, n_nd_free). A
    message's postings are the first live ones of their nodes, which are in arrival order. A
    node left with no live posting below it is closed (its chunks are free by then)."""
    while head < count and r_seq[head & mask] <= upto:
        slot = head & mask
        a = r_toff[slot]
        for j in range(r_tlen[slot]):
            nd = tr_bk[(a + j) & tmask]
            term_live[tr_term[(a + j) & tmask]] -= 1
            c = nd_i[nd, NI_HEAD]
            ch_i[c, CI_START] += 1
            if ch_i[c, CI_START] == ch_i[c, CI_N]:
                nxt = ch_i[c, CI_NEXT]
                nd_i[nd, NI_HEAD] = nxt
                if nxt < 0:
                    nd_i[nd, NI_TAIL] = -1
                free_chunks[n_free] = c
                n_free += 1
            while nd >= 0:
                nd_i[nd, NI_LIVE] -= 1
                up = nd_i[nd, NI_PARENT]
                if nd_i[nd, NI_LIVE] == 0:
                    if up < 0:
                        term_root[tr_term[(a + j) & tmask]] = -1
                    else:
                        prv = nd_i[nd, NI_PREV]
                        nxt = nd_i[nd, NI_NEXT]
                        if prv >= 0:
                            nd_i[prv, NI_NEXT] = nxt
                        else:
                            nd_i[up, NI_CHILD] = nxt
                        if nxt >= 0:
                            nd_i[nxt, NI_PREV] = prv
                        del nd_of[nd_i[nd, NI_KEY]]
                    nd_free[n_nd_free] = nd
                    n_nd_free += 1
                nd = up
        head += 1
    return head, n_free, n_nd_free


@numba.njit(cache=True, inline="always")
def _pq_push(pu, pj, pn, size, u, j, nd):
    """Push (u, j, nd) on the max-heap by u; grows the arrays when full."""
    if size == pu.shape[0]:
        nu = np.empty(2 * size)
        nj = np.empty(2 * size, np.int64)
        nn = np.empty(2 * size, np.int64)
        nu[:size] = pu
        nj[:size] = pj
        nn[:size] = pn
        pu, pj, pn = nu, nj, nn
    k = size
    while k > 0:
        par = (k - 1) // 2
        if pu[par] >= u:
            break
        pu[k] = pu[par]; pj[k] = pj[par]; pn[k] = pn[par]
        k = par
    pu[k] = u; pj[k] = j; pn[k] = nd
    return pu, pj, pn, size + 1


@numba.njit(cache=True, inline="always")
def _pq_pop(pu, pj, pn, size):
    """Remove the root of the max-heap (the caller has read it); returns the new size."""
    size -= 1
    u = pu[size]
    j = pj[size]
    nd = pn[size]
    k = 0
    while True:
        l = 2 * k + 1
        if l >= size:
            break
        if l + 1 < size and pu[l + 1] > pu[l]:
            l += 1
        if pu[l] <= u:
            break
        pu[k] = pu[l]; pj[k] = pj[l]; pn[k] = pn[l]
        k = l
    if size > 0:
        pu[k] = u; pj[k] = j; pn[k] = nd
    return size


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


@numba.njit(cache=True, inline="always")
def _heap_add(h_sc, h_seq, h_ins, hn, Ki, sc, sq, ins):
    """Offer (sc, sq, ins) to the min-heap of the best ``Ki`` by (score, seq), ``hn`` rows
    held; returns the new count."""
    if hn < Ki:
        k = hn
        while k > 0:
            par = (k - 1) // 2
            if h_sc[par] < sc or (h_sc[par] == sc and h_seq[par] < sq):
                break
            h_sc[k] = h_sc[par]; h_seq[k] = h_seq[par]; h_ins[k] = h_ins[par]
            k = par
        h_sc[k] = sc; h_seq[k] = sq; h_ins[k] = ins
        return hn + 1
    if sc > h_sc[0] or (sc == h_sc[0] and sq > h_seq[0]):
        _sift_down(h_sc, h_seq, h_ins, hn, sc, sq, ins)
    return hn


@numba.njit(cache=True, inline="always")
def _row_ub(sx, sy, alpha, w, r, tail_next, f, row, max_dist):
    """Bound on the score of a posting under node (or chunk) ``row`` of ``f`` that a
    subscription at (sx, sy) scores from its term of weight ``w`` (see ``_text_ub``)."""
    d = _mindist(sx, sy, f[row, 0], f[row, 1], f[row, 2], f[row, 3])
    tub = min(_text_ub(w, r, f[row, 4]), w * f[row, 4] + tail_next)
    return alpha * (1.0 - d / max_dist) + (1.0 - alpha) * tub


@numba.njit(cache=True)
def _zorder(x, y, bounds):
    """Morton code of each point on a 2^16 grid over ``bounds`` (query order for locality)."""
    out = np.empty(x.shape[0], np.int64)
    for i in range(x.shape[0]):
        gx = int(min(max((x[i] - bounds[0]) / (bounds[2] - bounds[0]), 0.0), 1.0) * 65535.0)
        gy = int(min(max((y[i] - bounds[1]) / (bounds[3] - bounds[1]), 0.0), 1.0) * 65535.0)
        z = 0
        for bit in range(16):
            z |= ((gx >> bit) & 1) << (2 * bit)
            z |= ((gy >> bit) & 1) << (2 * bit + 1)
        out[i] = z
    return out


@numba.njit(cache=True, inline="always")
def _insert_best(o_sc, o_seq, o_ins, pos, c, Ki, sc, sq, ins):
    """Insert (sc, sq, ins) into the ``c`` rows ``pos:pos + c`` sorted by (score, seq)
    descending, keeping at most ``Ki``; returns the new count."""
    if c == Ki:
        last = pos + c - 1
        if sc < o_sc[last] or (sc == o_sc[last] and sq < o_seq[last]):
            return c
        c -= 1
    u = pos + c
    while u > pos and (o_sc[u - 1] < sc or (o_sc[u - 1] == sc and o_seq[u - 1] < sq)):
        o_sc[u] = o_sc[u - 1]
        o_seq[u] = o_seq[u - 1]
        o_ins[u] = o_ins[u - 1]
        u -= 1
    o_sc[u] = sc
    o_seq[u] = sq
    o_ins[u] = ins
    return c + 1


@numba.njit(cache=True, nogil=True)
def _gather(terms, n_terms, after_seq, upto_seq, head, count, r_seq, r_x, r_y, r_toff,
            r_tlen, mask, tr_term, tr_w, tmask):
    """The postings of each term in ``terms`` (int64, distinct, each below ``n_terms``)
    whose message has ``after_seq < seq <= upto_seq``, as lists in ring order, read in two
    passes over the messages held (count, then fill): term ``g`` has ``g_off[g]:g_off[g +
    1]`` of ``g_ins`` (ring positions), ``g_w`` (its weights), ``g_x``, ``g_y``, ``g_sig``
    (the message's signature, as in the index) and ``g_seq``. Returns (g_off, g_ins, g_w,
    g_x, g_y, g_sig, g_seq)."""
    g_of = np.full(n_terms, -1, np.int64)
    for g in range(terms.shape[0]):
        g_of[terms[g]] = g
    g_off = np.zeros(terms.shape[0] + 1, np.int64)
    for c in range(head, count):
        slot = c & mask
        if after_seq < r_seq[slot] <= upto_seq:
            a = r_toff[slot]
            for j in range(r_tlen[slot]):
                t = tr_term[(a + j) & tmask]
                if t < n_terms and g_of[t] >= 0:
                    g_off[g_of[t] + 1] += 1
    for g in range(terms.shape[0]):
        g_off[g + 1] += g_off[g]
    total = g_off[terms.shape[0]]
    fill = g_off[:-1].copy()
    g_ins = np.empty(total, np.int64)
    g_w = np.empty(total)
    g_x = np.empty(total)
    g_y = np.empty(total)
    g_sig = np.empty(total, np.int64)
    g_seq = np.empty(total, np.int64)
    for c in range(head, count):
        slot = c & mask
        sq = r_seq[slot]
        if not after_seq < sq <= upto_seq:
            continue
        a = r_toff[slot]
        sig = 0
        for j in range(r_tlen[slot]):
            sig |= 1 << (tr_term[(a + j) & tmask] & 63)
        for j in range(r_tlen[slot]):
            t = tr_term[(a + j) & tmask]
            if t < n_terms and g_of[t] >= 0:
                w = fill[g_of[t]]
                fill[g_of[t]] = w + 1
                g_ins[w] = c
                g_w[w] = tr_w[(a + j) & tmask]
                g_x[w] = r_x[slot]
                g_y[w] = r_y[slot]
                g_sig[w] = sig
                g_seq[w] = sq
    return g_off, g_ins, g_w, g_x, g_y, g_sig, g_seq


@numba.njit(cache=True, nogil=True)
def _search(order, s_off, s_terms, s_w, s_x, s_y, s_alpha, K, after_seq, upto_seq, max_dist,
            r_toff, r_tlen, mask, tr_term, tr_w, tmask, ch_f, ch_i, nd_f, nd_i, term_root,
            term_maxw, n_terms, floor, flat, s_gix, held, g_off, g_ins, g_w, g_x, g_y, g_sig, g_seq):
    """Top-K[i] messages for each subscription row, best first; rows are answered in
    ``order`` (neighbours in that order share index data in cache), output in row order.

    A row with ``flat[i]`` reads every posting of its terms from the batch's gathered lists
    (``_gather``: the term of s's entry ``e`` is list ``s_gix[e]``, or -1, with the postings
    ``g_off[g]:g_off[g + 1]`` of ``g_ins``, ``g_w``, ... in ring order) term by term, so each
    message sharing a term is scored once; ``held`` (int64, a row per term of the longest
    flat row, a bit per ring slot; all zero, and left so) marks which messages each of the
    row's lists holds. The other rows go best-first over the index: the roots of s's terms
    go on a max-heap by bound; a popped node's own chunks are scanned (chunk bound, then each
    posting's own bound, then the exact score) and its children pushed; the search stops
    when the best bound left cannot beat the K-th score (or ``floor[i]``, if higher:
    messages scoring below it are not wanted). Both give the top-K[i] by (score, seq) of
    the messages sharing a term with s
    and not below the floor. Returns (offsets, seq, ins, score, complete, work); a row
    with a finite floor is never complete (what it lacks may lie under the floor)."""
    n = K.shape[0]
    base = np.zeros(n + 1, np.int64)
    for i in range(n):
        base[i + 1] = base[i] + K[i]
    got = np.zeros(n, np.int64)
    o_seq = np.empty(base[n], np.int64)
    o_ins = np.empty(base[n], np.int64)
    o_sc = np.empty(base[n], np.float64)
    work = np.zeros(n, np.int64)
    pu = np.empty(256)
    pj = np.empty(256, np.int64)
    pn = np.empty(256, np.int64)
    q_max = 0
    for i in range(n):
        q_max = max(q_max, s_off[i + 1] - s_off[i])
    lj = np.empty(q_max, np.int64)      # a flat row's lists: its term, first and end
    l_beg = np.empty(q_max, np.int64)   # posting, signature bit and lookup cursor
    l_end = np.empty(q_max, np.int64)
    l_bit = np.empty(q_max, np.int64)
    l_cur = np.empty(q_max, np.int64)
    b_sc = np.empty(1024)               # a flat row's messages not below its floor
    b_seq = np.empty(1024, np.int64)
    b_ins = np.empty(1024, np.int64)
    hist = np.zeros(HIST, np.int64)
    # a walked row's heap and per-term bounds, allocated once for the batch
    k_max = 0
    for i in range(n):
        k_max = max(k_max, K[i])
    h_sc = np.empty(k_max)
    h_seq = np.empty(k_max, np.int64)
    h_ins = np.empty(k_max, np.int64)
    rest = np.empty(q_max + 1)          # sum over later terms of w_s^2
    tail = np.empty(q_max + 1)          # sum over later terms of w_s * (largest weight of the term)
    mw = np.empty(q_max)
    bit = np.empty(q_max, np.int64)     # signature bit of each term of s
    other = np.empty(q_max, np.int64)   # signature bits of s's terms other than term j
    for ii in range(n):
        i = order[ii]
        a = s_off[i]
        b = s_off[i + 1]
        q = b - a
        alpha = s_alpha[i]
        sx = s_x[i]
        sy = s_y[i]
        st = s_terms[a:b]
        sw = s_w[a:b]
        Ki = K[i]
        scored = 0
        if flat[i]:
            # s's gathered lists, term by term: a message is scored from its first list
            # (term) shared with s, its TSim summed in s's term order (the bits of
            # ``scoring.tsim``). A posting whose signature shows none of s's other terms has
            # this term only; otherwise a bit per ring slot of each list says which of the
            # terms it may hold it holds, and a cursor that only moves forward (every list
            # is in ring order) finds the weight.
            nl = 0
            for j in range(q):
                g = s_gix[a + j]
                if g >= 0 and g_off[g] < g_off[g + 1]:
                    lj[nl] = j
                    l_beg[nl] = g_off[g]
                    l_end[nl] = g_off[g + 1]
                    l_bit[nl] = 1 << (st[j] & 63)
                    scored += l_end[nl] - l_beg[nl]
                    nl += 1
            if scored > b_sc.shape[0]:
                b_sc = np.empty(2 * scored)
                b_seq = np.empty(2 * scored, np.int64)
                b_ins = np.empty(2 * scored, np.int64)
            fl = floor[i]
            if nl > 1:                   # which messages each list holds, by ring slot
                for l in range(nl):
                    for p in range(l_beg[l], l_end[l]):
                        sl = g_ins[p] & mask
                        held[l, sl >> 6] |= 1 << (sl & 63)
            cnt = 0
            lo = math.inf
            hi = -math.inf
            for l0 in range(nl):
                oth = 0
                for l in range(nl):
                    if l != l0:
                        oth |= l_bit[l]
                    l_cur[l] = l_beg[l]
                wj = sw[lj[l0]]
                for p in range(l_beg[l0], l_end[l0]):
                    m = g_ins[p]
                    ts = wj * g_w[p]
                    sg = g_sig[p] & oth
                    if sg != 0:
                        sl = m & mask
                        earlier = False
                        for l in range(nl):
                            if l == l0 or sg & l_bit[l] == 0 or (held[l, sl >> 6] >> (sl & 63)) & 1 == 0:
                                continue
                            if l < l0:
                                earlier = True
                                break
                            c = l_cur[l]
                            while g_ins[c] < m:
                                c += 1
                            l_cur[l] = c
                            ts += sw[lj[l]] * g_w[c]
                        if earlier:
                            continue
                    sc = combine(alpha, ssim(sx, sy, g_x[p], g_y[p], max_dist), ts)
                    if not below(sc, fl):
                        b_sc[cnt] = sc
                        b_ins[cnt] = m
                        b_seq[cnt] = g_seq[p]
                        cnt += 1
                        lo = min(lo, sc)
                        hi = max(hi, sc)
            if nl > 1:
                for l in range(nl):
                    for p in range(l_beg[l], l_end[l]):
                        held[l, (g_ins[p] & mask) >> 6] = 0
            # the Ki best by (score, seq): a histogram of the scores (the bucket a monotone
            # function of the score) finds the lowest bucket with Ki at or above it, which
            # holds the Ki-th score; only those are sorted into the row's output space
            cut = 0
            scale = 0.0
            if cnt > Ki and hi > lo:
                scale = (HIST - 1) / (hi - lo)
                hist[:] = 0
                for u in range(cnt):
                    hist[min(int((b_sc[u] - lo) * scale), HIST - 1)] += 1
                cut = HIST - 1
                above = hist[cut]
                while above < Ki:
                    cut -= 1
                    above += hist[cut]
            pos = base[i]
            c = 0
            for u in range(cnt):
                if min(int((b_sc[u] - lo) * scale), HIST - 1) >= cut:
                    c = _insert_best(o_sc, o_seq, o_ins, pos, c, Ki, b_sc[u], b_seq[u], b_ins[u])
            got[i] = c
            work[i] = scored
            continue
        hn = 0
        pushed = 0
        size = 0
        # what must be beaten: the caller's floor (a score that K messages elsewhere reach),
        # then the K-th score once K are held, if higher
        thr = floor[i]
        rest[q] = 0.0
        tail[q] = 0.0
        for j in range(q - 1, -1, -1):
            rest[j] = rest[j + 1] + sw[j] * sw[j]
            mw[j] = term_maxw[st[j]] if st[j] < n_terms else 0.0
            tail[j] = tail[j + 1] + sw[j] * mw[j]
            bit[j] = 1 << (st[j] & 63)
        for j in range(q):
            other[j] = 0
            for l in range(q):
                if l != j:
                    other[j] |= bit[l]
        for j in range(q):
            t = st[j]
            if t < n_terms and term_root[t] >= 0 and nd_i[term_root[t], NI_LIVE] > 0:
                u0 = _row_ub(sx, sy, alpha, sw[j], math.sqrt(rest[j + 1]), tail[j + 1], nd_f,
                             term_root[t], max_dist)
                pu, pj, pn, size = _pq_push(pu, pj, pn, size, u0, j, term_root[t])
                pushed += 1
        while size > 0:
            if below(pu[0], thr):
                break
            j = pj[0]
            node = pn[0]
            size = _pq_pop(pu, pj, pn, size)
            r = math.sqrt(rest[j + 1])
            c = nd_i[node, NI_HEAD]
            while c >= 0:
                cur = c
                c = ch_i[c, CI_NEXT]
                if below(_row_ub(sx, sy, alpha, sw[j], r, tail[j + 1], ch_f, cur, max_dist), thr):
                    continue
                for p in range(ch_i[cur, CI_START], ch_i[cur, CI_N]):
                    sq = ch_i[cur, CI_SEQ + p]
                    if sq <= after_seq or sq > upto_seq:
                        continue
                    ss = ssim(sx, sy, ch_f[cur, CF_X + p], ch_f[cur, CF_Y + p], max_dist)
                    a_w = ch_f[cur, CF_W + p]
                    # what the posting alone tells: its weight, and by its signature which of
                    # s's other terms the message surely lacks; most postings end here, before
                    # the message's terms are read from the ring
                    sig = ch_i[cur, CI_SIG + p]
                    if sig & other[j] == 0:
                        # none of s's other terms: TSim is this one product (the merge's bits)
                        sc = combine(alpha, ss, sw[j] * a_w)
                    else:
                        if thr > -math.inf:
                            pqw = ch_i[cur, CI_QW + p]
                            rs = 0.0
                            tl_ = 0.0
                            for l in range(j + 1, q):
                                if sig & bit[l]:
                                    rs += sw[l] * sw[l]
                                    tl_ += sw[l] * min(mw[l], _sketch_ub(pqw, st[l]))
                            tub = min(_text_ub(sw[j], math.sqrt(rs), a_w), sw[j] * a_w + tl_)
                            if below(combine(alpha, ss, tub), thr):
                                continue
                        slot = ch_i[cur, CI_INS + p] & mask
                        ta = r_toff[slot]
                        tl = r_tlen[slot]
                        # TSim by the merge of the scoring module (same order, same bits), read
                        # from the ring; a shared term of s before position j means an earlier
                        # term's postings own this message
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
                        sc = combine(alpha, ss, ts)
                    if hn == Ki:
                        if not (sc > h_sc[0] or (sc == h_sc[0] and sq > h_seq[0])):
                            continue     # (decided before the ring position is read)
                    elif below(sc, thr):
                        continue         # under the floor
                    scored += 1
                    hn = _heap_add(h_sc, h_seq, h_ins, hn, Ki, sc, sq, ch_i[cur, CI_INS + p])
                    if hn == Ki:
                        thr = max(h_sc[0], floor[i])
            ch = nd_i[node, NI_CHILD]
            while ch >= 0:
                if nd_i[ch, NI_LIVE] > 0:
                    cu = _row_ub(sx, sy, alpha, sw[j], r, tail[j + 1], nd_f, ch, max_dist)
                    if not below(cu, thr):
                        pu, pj, pn, size = _pq_push(pu, pj, pn, size, cu, j, ch)
                        pushed += 1
                ch = nd_i[ch, NI_NEXT]
        # emit best first: pop the min-heap into the tail of the row's space
        pos = base[i]
        hs = hn
        while hs > 0:
            u = hs - 1
            o_seq[pos + u] = h_seq[0]
            o_ins[pos + u] = h_ins[0]
            o_sc[pos + u] = h_sc[0]
            hs -= 1
            _sift_down(h_sc, h_seq, h_ins, hs, h_sc[hs], h_seq[hs], h_ins[hs])
        got[i] = hn
        work[i] = scored + pushed
    # compact the rows (each wrote got[i] of its K[i] places)
    out_off = np.zeros(n + 1, np.int64)
    for i in range(n):
        out_off[i + 1] = out_off[i] + got[i]
    f_seq = np.empty(out_off[n], np.int64)
    f_ins = np.empty(out_off[n], np.int64)
    f_sc = np.empty(out_off[n], np.float64)
    complete = np.empty(n, np.bool_)
    for i in range(n):
        src = base[i]
        dst = out_off[i]
        for u in range(got[i]):
            f_seq[dst + u] = o_seq[src + u]
            f_ins[dst + u] = o_ins[src + u]
            f_sc[dst + u] = o_sc[src + u]
        complete[i] = got[i] < K[i] and floor[i] == -math.inf
    return out_off, f_seq, f_ins, f_sc, complete, work


@numba.njit(cache=True, nogil=True)
def _walk(s_off, s_terms, s_w, s_x, s_y, s_alpha, K, floor, after_seq, upto_seq, max_dist, bounds,
          r_id, r_t, r_toff, r_tlen, mask, tr_term, tr_w, tmask, ch_f, ch_i, nd_f, nd_i, term_root,
          term_maxw):
    """:meth:`MessageWindow.search` of a batch too small for any row to read flat (the
    stream's re-evaluations: most of a window shard's questions, a few rows each), in one
    call: the order of :meth:`MessageWindow.query_order` (a stable sort by (last term,
    Z-code)), every row walked best-first (``_search``), and the messages' ids and times.
    Returns (offsets, seq, ids, t, score, complete, work)."""
    n = K.shape[0]
    key = np.empty(n, np.int64)
    z = _zorder(s_x, s_y, bounds)
    for i in range(n):
        last = s_terms[s_off[i + 1] - 1] if s_off[i + 1] > s_off[i] else -1
        key[i] = ((last + 1) << 32) | z[i]       # Z-codes take 32 bits, term ids far fewer than 2^31
    order = np.argsort(key, kind="mergesort")
    no_flat = np.zeros(n, np.bool_)
    none_i = np.empty(0, np.int64)
    none_f = np.empty(0)
    off, seq, ins, sc, comp, work = _search(
        order, s_off, s_terms, s_w, s_x, s_y, s_alpha, K, after_seq, upto_seq, max_dist, r_toff,
        r_tlen, mask, tr_term, tr_w, tmask, ch_f, ch_i, nd_f, nd_i, term_root, term_maxw,
        term_root.shape[0], floor, no_flat, none_i, np.zeros((0, 1), np.int64), np.zeros(1, np.int64),
        none_i, none_f, none_f, none_f, none_i, none_i)
    ids = np.empty(ins.shape[0], np.int64)
    ts = np.empty(ins.shape[0])
    for r in range(ins.shape[0]):
        ids[r] = r_id[ins[r] & mask]
        ts[r] = r_t[ins[r] & mask]
    return off, seq, ids, ts, sc, comp, work


def _pow2(n: int) -> int:
    return 1 << max(4, int(n - 1).bit_length())


def _extended(arr: np.ndarray, rows: int) -> np.ndarray:
    """``arr`` copied into the first rows of a zeroed array of ``rows`` rows. The zeros are
    the allocator's (pages mapped zeroed at their first touch): rows never written take no
    memory, where a concatenation with zeros would write every one."""
    new = np.zeros((rows,) + arr.shape[1:], arr.dtype)
    new[: len(arr)] = arr
    return new


class MessageWindow:
    """The messages of the window (or of one window shard) and their index.

    ``fine_from`` and ``split_at`` (defaults ``FINE_FROM`` and ``SPLIT_AT``) shape the index
    for postings appended from then on; tests set them small to exercise every level."""

    def __init__(self, cfg: EngineConfig, capacity: int | None = None, track_ids: bool = True):
        self.max_dist = cfg.max_dist
        cap = _pow2(capacity or min(cfg.window or 4096, 1 << 16))
        self._alloc_ring(cap, 8 * cap)
        self.count = 0     # messages ever appended
        self.head = 0      # index of the oldest message still held
        self.tcount = 0
        self.thead = 0
        nch = max(64, cap // 4)
        self.ch_f = np.zeros((nch, CF_WIDTH))
        self.ch_i = np.zeros((nch, CI_WIDTH), np.int64)
        self.free_chunks = np.arange(nch - 1, -1, -1, dtype=np.int64)
        self.n_free = nch
        self.bounds = np.asarray(cfg.bounds, np.float64)
        self.fine_from = FINE_FROM
        self.split_at = SPLIT_AT
        self.flat_upto = FLAT_UPTO
        self._held: list = []       # the flat path's membership bits (one array; ``search``)
        self.term_root = np.full(1024, -1, np.int64)    # root node of each term
        self.term_maxw = np.zeros(1024)                 # largest weight each term ever had here
        self.term_live = np.zeros(1024, np.int64)       # live postings of each term
        self.nd_of = Dict.empty(key_type=types.int64, value_type=types.int64)
        self.nd_f = np.zeros((1024, 5))
        self.nd_i = np.zeros((1024, NI_WIDTH), np.int64)
        self.n_nd = 0                                   # node rows ever used
        self.nd_free = np.zeros(1024, np.int64)         # rows of closed nodes, to reuse
        self.n_nd_free = 0
        # id -> seq of the messages held, for :meth:`has_ids` (an engine's validation); a
        # window shard is not asked (``track_ids=False``): a dict entry per message less
        self.id_seq: dict[int, int] | None = {} if track_ids else None
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
            self._resize_rings(_pow2(max(cap, len(self) + n_msgs) * 2),
                               _pow2(max(tcap, (self.tcount - self.thead) + n_terms) * 2))
        if self.n_free < n_terms:
            self._add_chunks(max(len(self.ch_i), n_terms))
        if max_term >= len(self.term_root):
            n = max(2 * len(self.term_root), max_term + 1)
            self.term_root = np.concatenate([self.term_root, np.full(n - len(self.term_root), -1, np.int64)])
            self.term_maxw = np.concatenate([self.term_maxw, np.zeros(n - len(self.term_maxw))])
            self.term_live = np.concatenate([self.term_live, np.zeros(n - len(self.term_live), np.int64)])
        need = self.n_nd + n_terms * (MAX_LEVEL + 1)    # a posting opens at most one node per level
        if need > len(self.nd_i):
            self._resize_nodes(max(2 * len(self.nd_i), need))

    def reserve(self, n_msgs: int) -> None:
        """Room for ``n_msgs`` held messages, sized from what is held now: as many terms,
        index chunks and index nodes per message, plus a quarter (nodes: at least twice
        those open). A window shard calls it once, with
        its share of the window plus the steps in flight: otherwise its rings and chunk pool
        double inside the stream the first time the steps in flight push it past its initial
        size (a copy of hundreds of milliseconds in the middle of a step). No-op while empty."""
        held = len(self)
        if held == 0 or n_msgs <= 0:
            return
        scale = 1.25 * n_msgs / held
        terms = int((self.tcount - self.thead) * scale) + 1
        if n_msgs > self.mask + 1 or terms > self.tmask + 1:
            self._resize_rings(_pow2(max(self.mask + 1, n_msgs)), _pow2(max(self.tmask + 1, terms)))
        chunks = int((len(self.ch_i) - self.n_free) * scale) + 1
        if chunks > len(self.ch_i):
            self._add_chunks(chunks - len(self.ch_i))
        nodes = int(max(2.0, scale) * (self.n_nd - self.n_nd_free))
        if nodes > len(self.nd_i):
            self._resize_nodes(nodes)

    def _resize_rings(self, new_cap: int, new_tcap: int) -> None:
        """The message and term rings at the given (power of two) sizes, contents kept."""
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

    def _add_chunks(self, grow: int) -> None:
        """``grow`` more (free) chunks in the pool. The new rows are left to the allocator's
        zeroed pages (:func:`_extended`): the free stack hands them out in order, so a row
        takes memory only once a posting needs it, and the pool's doubling costs none."""
        nch = len(self.ch_i)
        self.ch_f = _extended(self.ch_f, nch + grow)
        self.ch_i = _extended(self.ch_i, nch + grow)
        # the free stack must be able to hold every chunk: all may be freed at once
        free = np.empty(nch + grow, np.int64)
        free[: self.n_free] = self.free_chunks[: self.n_free]
        free[self.n_free: self.n_free + grow] = np.arange(nch + grow - 1, nch - 1, -1)
        self.free_chunks = free
        self.n_free += grow

    def _resize_nodes(self, n: int) -> None:
        # rows past the n_nd ever used are untouched until a node needs one (_extended)
        self.nd_f = _extended(self.nd_f, n)
        self.nd_i = _extended(self.nd_i, n)
        self.nd_free = _extended(self.nd_free, n)

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
        self.count, self.tcount, self.n_free, self.n_nd, self.n_nd_free = _append(
            seqs, msgs.ids, msgs.x, msgs.y, msgs.t, msgs.offsets, msgs.term_ids, msgs.weights, self.bounds,
            self.fine_from, self.split_at,
            self.r_seq, self.r_id, self.r_x, self.r_y, self.r_t, self.r_toff, self.r_tlen,
            self.mask, self.count, self.tr_term, self.tr_w, self.tr_bk, self.tmask, self.tcount,
            self.ch_f, self.ch_i, self.free_chunks, self.n_free,
            self.nd_of, self.nd_f, self.nd_i, self.n_nd, self.nd_free, self.n_nd_free, self.term_root,
            self.term_maxw, self.term_live)
        if self.id_seq is not None:
            self.id_seq.update(zip(msgs.ids.tolist(), seqs.tolist()))
        self.last_seq = int(seqs[-1])
        if np.isfinite(msgs.t).any():
            self.t_max = max(self.t_max, float(np.nanmax(msgs.t)))
        if expire_upto is not None and len(expire_upto):
            self.expire(int(expire_upto[-1]))

    def expire(self, upto_seq: int) -> None:
        """Drop every message with seq <= upto_seq."""
        old_head = self.head
        self.head, self.n_free, self.n_nd_free = _expire(
            upto_seq, self.head, self.count, self.r_seq, self.r_toff, self.r_tlen, self.mask,
            self.tr_term, self.tr_bk, self.tmask, self.ch_i, self.free_chunks, self.n_free,
            self.nd_i, self.nd_of, self.nd_free, self.n_nd_free, self.term_root, self.term_live)
        if self.head > old_head:
            if self.id_seq is not None:
                pop = self.id_seq.pop
                for i in self.r_id[np.arange(old_head, self.head, dtype=np.int64) & self.mask].tolist():
                    pop(i, None)
            last = (self.head - 1) & self.mask
            self.thead = int(self.r_toff[last] + self.r_tlen[last])

    # ------------------------------------------------------------------ queries
    def has_ids(self, ids: np.ndarray) -> np.ndarray:
        d = self.id_seq
        return np.fromiter((i in d for i in ids.tolist()), bool, len(ids))

    def search(self, subs: SubscriptionBatch, K: np.ndarray, after_seq: int = -1,
               upto_seq: int | None = None, floor: np.ndarray | None = None,
               scratch: list | None = None) -> CandidateLists:
        """Top-K[i] window messages per subscription row (see module docstring).

        ``floor``: per row, a score that K[i] messages elsewhere (another window shard)
        already reach; only messages scoring at least that are listed, which lets the search
        prune from its first posting on. The top-K of the union stays exact.

        ``scratch``: a list of one array, the caller's own room for the flat path's
        membership bits (None: the window's). Searches that run at once on several threads
        (the halves of a solo partition) each pass their own: nothing else of the window is
        written by a search."""
        K = np.asarray(K, np.int64)
        up = I64_MAX if upto_seq is None else int(upto_seq)
        floor = np.full(len(K), -np.inf) if floor is None else np.asarray(floor, np.float64)
        if len(subs) * FLAT_BATCH < self.tcount - self.thead:
            # too few rows for any to read flat (``_flat_rows``): one kernel call
            return CandidateLists(*_walk(
                subs.offsets, subs.term_ids, subs.weights, subs.x, subs.y, subs.alpha, K, floor,
                int(after_seq), up, self.max_dist, self.bounds, self.r_id, self.r_t, self.r_toff,
                self.r_tlen, self.mask, self.tr_term, self.tr_w, self.tmask, self.ch_f, self.ch_i,
                self.nd_f, self.nd_i, self.term_root, self.term_maxw))
        order = self.query_order(subs)
        flat, s_gix, terms = self._flat_rows(subs)
        lens = np.diff(subs.offsets)[flat]
        q_max = int(lens.max()) if len(lens) else 0
        box = self._held if scratch is None else scratch
        if not box or box[0].shape[0] < q_max or box[0].shape[1] != (self.mask >> 6) + 1:
            box[:] = [np.zeros((q_max, (self.mask >> 6) + 1), np.int64)]
        # no flat row (the stream's small batches): nothing to gather, the window not read
        head = self.count if len(terms) == 0 else self.head
        lists = _gather(terms, len(self.term_root), int(after_seq), up, head, self.count,
                        self.r_seq, self.r_x, self.r_y, self.r_toff, self.r_tlen, self.mask,
                        self.tr_term, self.tr_w, self.tmask)
        off, seq, ins, sc, comp, work = _search(
            order, subs.offsets, subs.term_ids, subs.weights, subs.x, subs.y, subs.alpha, K,
            int(after_seq), up, self.max_dist, self.r_toff, self.r_tlen, self.mask, self.tr_term,
            self.tr_w, self.tmask, self.ch_f, self.ch_i, self.nd_f, self.nd_i, self.term_root,
            self.term_maxw, len(self.term_root), floor, flat, s_gix, box[0], *lists)
        slots = ins & self.mask
        return CandidateLists(off, seq, self.r_id[slots], self.r_t[slots], sc, comp, work)

    def _flat_rows(self, subs: SubscriptionBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Which rows read all their postings (``flat``: those with at most ``flat_upto``
        live postings over their terms, if the batch holds enough of them: ``FLAT_BATCH``),
        the terms to gather for them, and for each term entry of the batch its place among
        those terms (-1: not gathered)."""
        t = subs.term_ids
        if len(subs) * FLAT_BATCH < self.tcount - self.thead:
            # too few rows for any to read flat (below): the stream's small batches
            return np.zeros(len(subs), np.bool_), np.full(len(t), -1, np.int64), np.empty(0, t.dtype)
        known = t < len(self.term_root)
        live = np.zeros(len(t), np.int64)
        live[known] = self.term_live[t[known]]
        cum = np.concatenate([[0], np.cumsum(live)])
        per_row = cum[subs.offsets[1:]] - cum[subs.offsets[:-1]]
        flat = per_row <= self.flat_upto
        if flat.sum() * FLAT_BATCH < self.tcount - self.thead:
            flat[:] = False
        want = np.repeat(flat, np.diff(subs.offsets)) & (live > 0)
        terms = np.unique(t[want])
        s_gix = np.full(len(t), -1, np.int64)
        s_gix[want] = np.searchsorted(terms, t[want])
        return flat, s_gix, terms

    def query_order(self, subs: SubscriptionBatch) -> np.ndarray:
        """The order in which to answer a batch: by the most frequent term (the largest id,
        whose postings are the most to read), then along a Z-curve, so that neighbouring
        queries read the same nodes and chunks while they are in cache."""
        n = len(subs)
        if n < 2:
            return np.arange(n, dtype=np.int64)
        lens = np.diff(subs.offsets)
        last = np.where(lens > 0, subs.term_ids[np.maximum(subs.offsets[1:] - 1, 0)], -1)
        return np.lexsort((_zorder(subs.x, subs.y, self.bounds), last)).astype(np.int64)

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

"""CIQ: the subscription index of Chen et al. (ICDE 2015) as the Skype paper describes and
adapts it (2.2 and 8.1.1): time decay removed, kScore replaced by the threshold theta.

- A regular Quadtree of ``depth`` levels partitions the space. Each subscription is assigned
  to ``3 * depth + 1`` covering cells that form a disjoint partition of the whole space:
  at every level the three siblings of the cell on its own root-to-leaf path, plus its leaf.
  A message location lies in exactly one covering cell of every subscription: the first
  level where its path leaves the subscription's path is a sibling of that path.
- For every (subscription, covering cell) a textual bound MinT is precomputed: the TSim
  the subscription needs to reach theta from the best spatial similarity the cell allows
  (lambda_T of Eq. 2 with ``SSimUB = 1 - mindist(s, cell) / MaxDist``). Thresholds change
  during the run, so ``thresholds_changed`` recomputes the bounds of those subscriptions.
- An inverted file per cell, its posting lists ordered by subscription (slot) id. A message
  visits the cells on its root-to-leaf path and merges the lists of its terms in each
  document-at-a-time (DAAT), getting each subscription's full TSim; those reaching MinT are
  verified with :func:`~rankcast.kinds.spatial.scoring.score`.

MinT is computed from a theta lowered by the relative slack EPS and a spatial bound raised by
EPS, and compared through :func:`~rankcast.kinds.spatial.scoring.below`, so rounding (even for
alpha close to 1, where lambda_T divides by a tiny ``1 - alpha``) never prunes a pair whose
exact score reaches theta.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from rankcast.kinds.spatial.columns import MessageBatch
from rankcast.kinds.spatial.scoring import EPS, below, lambda_t
from rankcast.kinds.spatial.subtable import SubTable
from ._postings import n_terms_of, verify_append

__all__ = ["CIQ", "DEFAULT_DEPTH"]

DEFAULT_DEPTH = 6     # 19 covering cells per subscription; memory grows linearly with depth


@numba.njit(cache=True)
def _leaf_index(x, y, xmin, ymin, xmax, ymax, depth):
    """(ix, iy) of the finest-level cell holding (x, y); coarser levels are its prefixes
    (``ix >> (depth - level)``), so every point has one consistent root-to-leaf path."""
    side = 1 << depth
    fx = (x - xmin) / (xmax - xmin) * side
    fy = (y - ymin) / (ymax - ymin) * side
    ix = min(max(int(math.floor(fx)), 0), side - 1)
    iy = min(max(int(math.floor(fy)), 0), side - 1)
    return ix, iy


@numba.njit(cache=True, inline="always")
def _node_id(level, ix, iy):
    """Linear id of cell (ix, iy) at ``level``: levels are stored one after another."""
    return ((1 << (2 * level)) - 1) // 3 + iy * (1 << level) + ix


@numba.njit(cache=True)
def _cover(x, y, bounds, depth, max_dist, nodes, ssim_max):
    """The 3 * depth + 1 covering cells of a subscription at (x, y) into ``nodes`` (ids)
    and ``ssim_max`` (1 - mindist(s, cell) / MaxDist, raised by EPS: a bound on SSim)."""
    xmin, ymin, xmax, ymax = bounds[0], bounds[1], bounds[2], bounds[3]
    lx, ly = _leaf_index(x, y, xmin, ymin, xmax, ymax, depth)
    c = 0
    for level in range(1, depth + 1):
        px = lx >> (depth - level)
        py = ly >> (depth - level)
        side = 1 << level
        w = (xmax - xmin) / side
        h = (ymax - ymin) / side
        bx = px & ~1
        by = py & ~1
        for dy in range(2):
            for dx in range(2):
                cx = bx + dx
                cy = by + dy
                if cx == px and cy == py and level < depth:
                    continue                   # on the path: refined at the next level
                x0 = xmin + cx * w
                y0 = ymin + cy * h
                ddx = max(x0 - x, 0.0, x - (x0 + w))
                ddy = max(y0 - y, 0.0, y - (y0 + h))
                nodes[c] = _node_id(level, cx, cy)
                if cx == px and cy == py:
                    ssim_max[c] = 1.0
                else:
                    ssim_max[c] = min(1.0, 1.0 - math.sqrt(ddx * ddx + ddy * ddy) / max_dist + EPS)
                c += 1


@numba.njit(cache=True, inline="always")
def _min_t(theta, alpha, ssim_max):
    """MinT of one (subscription, cell): lambda_T (Eq. 2) from a theta lowered by EPS."""
    return lambda_t(theta - EPS * (1.0 + abs(theta)), alpha, ssim_max)


@numba.njit(cache=True)
def _build(live, toff, tlen, terms, w, sx, sy, alpha, theta, bounds, depth, max_dist,
           n_terms, mint):
    """Covering cells, MinT and the per-cell inverted files of the live subscriptions.

    Fills ``mint[slot, c]`` for every live slot and returns (keys int64[L], off int64[L+1],
    slot int32[nnz], cov uint8[nnz], weight float64[nnz]): list ``l`` holds the postings of
    key ``node * n_terms + term`` (keys ascending), each list in increasing slot order."""
    ncov = 3 * depth + 1
    nodes = np.empty(ncov, np.int64)
    ssm = np.empty(ncov)
    total = 0
    for q in range(live.shape[0]):
        total += tlen[live[q]] * ncov
    keys = np.empty(total, np.int64)
    e_slot = np.empty(total, np.int32)
    e_cov = np.empty(total, np.uint8)
    e_w = np.empty(total)
    e = 0
    for q in range(live.shape[0]):
        s = live[q]
        _cover(sx[s], sy[s], bounds, depth, max_dist, nodes, ssm)
        for c in range(ncov):
            mint[s, c] = _min_t(theta[s], alpha[s], ssm[c])
            for p in range(tlen[s]):
                keys[e] = nodes[c] * n_terms + terms[toff[s] + p]
                e_slot[e] = s
                e_cov[e] = c
                e_w[e] = w[toff[s] + p]
                e += 1
    order = np.argsort(keys, kind="mergesort")     # stable: slot order kept within a key
    keys = keys[order]
    e_slot = e_slot[order]
    e_cov = e_cov[order]
    e_w = e_w[order]
    n_lists = 0
    for i in range(total):
        if i == 0 or keys[i] != keys[i - 1]:
            n_lists += 1
    ukeys = np.empty(n_lists, np.int64)
    off = np.empty(n_lists + 1, np.int64)
    l = 0
    for i in range(total):
        if i == 0 or keys[i] != keys[i - 1]:
            ukeys[l] = keys[i]
            off[l] = i
            l += 1
    off[n_lists] = total
    return ukeys, off, e_slot, e_cov, e_w


@numba.njit(cache=True)
def _refresh_mint(slots, sx, sy, alpha, theta, bounds, depth, max_dist, mint):
    """Recompute MinT of every covering cell of ``slots`` after their theta changed."""
    ncov = 3 * depth + 1
    nodes = np.empty(ncov, np.int64)
    ssm = np.empty(ncov)
    for q in range(slots.shape[0]):
        s = slots[q]
        _cover(sx[s], sy[s], bounds, depth, max_dist, nodes, ssm)
        for c in range(ncov):
            mint[s, c] = _min_t(theta[s], alpha[s], ssm[c])


@numba.njit(cache=True)
def _ciq_match(m_off, m_terms, m_w, m_x, m_y, keys, off, e_slot, e_cov, e_w, mint,
               n_terms, bounds, depth, max_dist,
               toff, tlen, s_terms, s_w, sx, sy, alpha, theta):
    """DAAT dissemination of a message batch over the cells on each message's path.

    Returns (msg_idx, slots, scores, verified, scanned): pairs with exact score >= theta,
    sorted by message then slot."""
    n = m_off.shape[0] - 1
    out_m = np.empty(1024, np.int64)
    out_s = np.empty(1024, np.int64)
    out_v = np.empty(1024, np.float64)
    r = 0
    verified = 0
    scanned = 0
    longest = 1
    for i in range(n):
        longest = max(longest, m_off[i + 1] - m_off[i])
    cur = np.empty(longest, np.int64)
    end = np.empty(longest, np.int64)
    wm = np.empty(longest)
    big = np.iinfo(np.int64).max
    for i in range(n):
        a = m_off[i]
        b = m_off[i + 1]
        start = r
        lx, ly = _leaf_index(m_x[i], m_y[i], bounds[0], bounds[1], bounds[2], bounds[3], depth)
        for level in range(0, depth + 1):
            node = _node_id(level, lx >> (depth - level), ly >> (depth - level))
            nl = 0
            for j in range(a, b):
                t = m_terms[j]
                if t >= n_terms:
                    break
                key = node * n_terms + t
                h = np.searchsorted(keys, key)
                if h < keys.shape[0] and keys[h] == key:
                    cur[nl] = off[h]
                    end[nl] = off[h + 1]
                    wm[nl] = m_w[j]
                    nl += 1
            while True:                          # DAAT: smallest slot among the cursors
                s = big
                for l in range(nl):
                    if cur[l] < end[l] and e_slot[cur[l]] < s:
                        s = e_slot[cur[l]]
                if s == big:
                    break
                ts = 0.0
                c = 0
                for l in range(nl):
                    if cur[l] < end[l] and e_slot[cur[l]] == s:
                        ts += e_w[cur[l]] * wm[l]
                        c = e_cov[cur[l]]
                        cur[l] += 1
                        scanned += 1
                mt = mint[s, c]
                if mt == math.inf or below(ts, mt):
                    continue
                verified += 1
                out_m, out_s, out_v, r = verify_append(s, i, a, b, sx, sy, alpha, theta, toff, tlen, s_terms, s_w,
                                                    m_x, m_y, m_terms, m_w, max_dist, out_m, out_s, out_v, r)
        if r - start > 1:
            order = np.argsort(out_s[start:r])
            out_s[start:r] = out_s[start:r][order]
            out_v[start:r] = out_v[start:r][order]
    return out_m[:r].copy(), out_s[:r].copy(), out_v[:r].copy(), verified, scanned


class CIQ:
    """Disseminator after Chen et al. (ICDE 2015), the paper's CIQ baseline (Fig. 13)."""

    def __init__(self, subs: SubTable, cfg, depth: int = DEFAULT_DEPTH):
        if not 1 <= depth <= 12:
            raise ValueError(f"CIQ depth must be in [1, 12], got {depth}")
        self.subs = subs
        self.depth = int(depth)
        self.bounds = np.asarray(cfg.bounds, np.float64)
        self.max_dist = float(cfg.max_dist)
        self._dirty = True
        self._index = None
        self._n_terms = 0
        self._mint = np.zeros((0, 3 * self.depth + 1))
        self._stats = {"messages": 0, "verified": 0, "matched": 0, "scanned": 0,
                       "rebuilds": 0, "mint_refreshed": 0}

    def add(self, slots) -> None:
        self._dirty = True

    def remove(self, slots) -> None:
        self._dirty = True

    def thresholds_changed(self, slots) -> None:
        """Recompute MinT of the covering cells of ``slots`` (their theta changed)."""
        if self._dirty:
            return                               # the next rebuild computes every MinT
        slots = np.asarray(slots, np.int64)
        slots = slots[self.subs.alive[slots]]
        t = self.subs
        _refresh_mint(slots, t.x, t.y, t.alpha, t.theta, self.bounds, self.depth,
                      self.max_dist, self._mint)
        self._stats["mint_refreshed"] += len(slots)

    def flush(self) -> None:
        """Rebuild the index if subscriptions came or went (match does it first)."""
        if not self._dirty:
            return
        t = self.subs
        n = len(t.alive)
        if self._mint.shape[0] < n:
            self._mint = np.zeros((max(n, 2 * self._mint.shape[0], 16), 3 * self.depth + 1))
        self._n_terms = max(n_terms_of(t), 1)
        live = t.live_slots().astype(np.int64)
        if len(t.alive) >= 2**31:
            raise ValueError("CIQ stores slots as int32")
        self._index = _build(live, t.toff, t.tlen, t.terms, t.w, t.x, t.y, t.alpha, t.theta,
                             self.bounds, self.depth, self.max_dist, self._n_terms, self._mint)
        self._dirty = False
        self._stats["rebuilds"] += 1

    def match(self, msgs: MessageBatch):
        """(msg_idx, slots, scores): every live pair sharing a term with score >= theta."""
        self.flush()
        keys, off, e_slot, e_cov, e_w = self._index
        t = self.subs
        mi, sl, sc, verified, scanned = _ciq_match(
            msgs.offsets, msgs.term_ids, msgs.weights, msgs.x, msgs.y, keys, off, e_slot,
            e_cov, e_w, self._mint, self._n_terms, self.bounds, self.depth, self.max_dist,
            t.toff, t.tlen, t.terms, t.w, t.x, t.y, t.alpha, t.theta)
        st = self._stats
        st["messages"] += len(msgs)
        st["verified"] += int(verified)
        st["scanned"] += int(scanned)
        st["matched"] += len(mi)
        return mi, sl, sc

    def stats(self) -> dict:
        out = dict(self._stats)
        if self._index is not None:
            out["postings"] = int(len(self._index[2]))
            out["index_bytes"] = int(sum(a.nbytes for a in self._index) + self._mint.nbytes)
        return out

"""The objects of the range top-k kind and the queries the Paint algorithms ask of them
(paper Section II-B): ``first_k`` to the west and east of a point below a value, ``min_y``
over an x range above a value, and the k lowest in a range (a new subscription's top-k).

Objects live in *slots*: a table of positions ``(x, id)`` sorted lexicographically, so that
objects with equal x still have distinct positions (the paper assumes distinct x). A slot holds
its object's value ``y`` or ``+inf`` when no live object is there (a deleted or moved object
leaves a dead slot until the next rebuild). Values are ordered by ``(y, id, slot)`` everywhere:
equal y break by the smaller object id, and the slot only separates the two slots of one
object while a batch moves it. A segment tree over the slots keeps the slot of the minimum
value of every node; every query below is a descent of that tree.

The slot table is rebuilt (``ObjectTable.ensure``) when a call needs positions it lacks, and
compacted when dead slots outnumber live ones; a rebuild is O(n log n), point updates O(log n).
"""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["ObjectTable", "build_tree", "set_value", "first_k", "range_min", "topk_range",
           "is_less", "below"]


@numba.njit(cache=True, inline="always")
def is_less(ys, ids, a, b):
    """Whether slot ``a``'s value is below slot ``b``'s in the order (y, id, slot)."""
    if ys[a] != ys[b]:
        return ys[a] < ys[b]
    if ids[a] != ids[b]:
        return ids[a] < ids[b]
    return a < b


@numba.njit(cache=True, inline="always")
def below(ys, ids, s, ty, tid, tslot):
    """Whether slot ``s`` holds an object whose value is below the threshold (ty, tid, tslot);
    a dead slot (+inf) never is."""
    if ys[s] == np.inf:
        return False
    if ys[s] != ty:
        return ys[s] < ty
    if ids[s] != tid:
        return ids[s] < tid
    return s < tslot


@numba.njit(cache=True)
def build_tree(ys, ids, n, size):
    """The min tree over slots ``0..n-1``: int64[2 * size], node v holding the slot of its
    minimum (the dummy slot ``n``, value +inf, where a node has no slot); root at 1."""
    tree = np.full(2 * size, n, np.int64)
    for s in range(n):
        tree[size + s] = s
    for v in range(size - 1, 0, -1):
        a = tree[2 * v]
        b = tree[2 * v + 1]
        tree[v] = a if is_less(ys, ids, a, b) else b
    return tree


@numba.njit(cache=True)
def set_value(tree, size, ys, ids, s, y):
    """Set slot ``s``'s value to ``y`` (+inf: no object) and repair the path to the root."""
    ys[s] = y
    v = (s + size) >> 1
    while v >= 1:
        a = tree[2 * v]
        b = tree[2 * v + 1]
        tree[v] = a if is_less(ys, ids, a, b) else b
        v >>= 1


@numba.njit(cache=True)
def _prev_below(tree, size, ys, ids, p, ty, tid, tslot):
    """The largest slot q < p whose value is below the threshold, -1 if none."""
    v = p + size
    found = False
    while v > 1:
        if v & 1 and below(ys, ids, tree[v - 1], ty, tid, tslot):
            v -= 1
            found = True
            break
        v >>= 1
    if not found:
        return -1
    while v < size:
        if below(ys, ids, tree[2 * v + 1], ty, tid, tslot):
            v = 2 * v + 1
        else:
            v = 2 * v
    return v - size


@numba.njit(cache=True)
def _next_below(tree, size, ys, ids, p, ty, tid, tslot):
    """The smallest slot q > p whose value is below the threshold, -1 if none."""
    v = p + size
    found = False
    while v > 1:
        if not (v & 1) and below(ys, ids, tree[v + 1], ty, tid, tslot):
            v += 1
            found = True
            break
        v >>= 1
    if not found:
        return -1
    while v < size:
        if below(ys, ids, tree[2 * v], ty, tid, tslot):
            v = 2 * v
        else:
            v = 2 * v + 1
    return v - size


@numba.njit(cache=True)
def first_k(tree, size, ys, ids, p, ty, tid, tslot, k, west, out):
    """first_k(x_p, y, <-) (``west``) or (->): the first ``k`` slots met moving away from
    slot ``p`` whose values are below (ty, tid, tslot), nearest first, into ``out`` (int64[k]);
    returns how many (the paper pads the rest with -inf / +inf). Slot ``p`` itself is never
    included. O(k log n)."""
    c = 0
    q = p
    while c < k:
        q = _prev_below(tree, size, ys, ids, q, ty, tid, tslot) if west else \
            _next_below(tree, size, ys, ids, q, ty, tid, tslot)
        if q < 0:
            break
        out[c] = q
        c += 1
    return c


@numba.njit(cache=True)
def range_min(tree, size, ys, ids, a, b, dummy):
    """The slot of the minimum value among slots ``a..b-1`` (``dummy``, value +inf, if the
    range is empty)."""
    res = dummy
    if a < 0:
        a = 0
    if b > size:
        b = size
    lo = a + size
    hi = b + size
    while lo < hi:
        if lo & 1:
            c = tree[lo]
            if is_less(ys, ids, c, res):
                res = c
            lo += 1
        if hi & 1:
            hi -= 1
            c = tree[hi]
            if is_less(ys, ids, c, res):
                res = c
        lo >>= 1
        hi >>= 1
    return res


@numba.njit(cache=True)
def topk_range(tree, size, ys, ids, a, b, k, out):
    """The ``k`` live slots of lowest value among slots ``a..b-1``, lowest first, into
    ``out``; returns how many. Best-first over the tree nodes covering the range."""
    cap = 128 + 64 * k
    heap = np.empty(cap, np.int64)
    hn = 0
    if a < 0:
        a = 0
    if b > size:
        b = size
    lo = a + size
    hi = b + size
    while lo < hi:                      # the canonical nodes of [a, b)
        if lo & 1:
            heap[hn] = lo
            hn += 1
            lo += 1
        if hi & 1:
            hi -= 1
            heap[hn] = hi
            hn += 1
        lo >>= 1
        hi >>= 1
    # heapify by the nodes' minimum values
    for i in range(hn // 2 - 1, -1, -1):
        _sift(heap, hn, i, tree, ys, ids)
    c = 0
    while hn > 0 and c < k:
        v = heap[0]
        s = tree[v]
        if ys[s] == np.inf:
            break
        if v >= size:
            out[c] = s
            c += 1
            hn -= 1
            heap[0] = heap[hn]
            _sift(heap, hn, 0, tree, ys, ids)
        else:
            heap[0] = 2 * v
            _sift(heap, hn, 0, tree, ys, ids)
            heap[hn] = 2 * v + 1
            hn += 1
            _sift_up(heap, hn - 1, tree, ys, ids)
    return c


@numba.njit(cache=True, inline="always")
def _sift(heap, n, i, tree, ys, ids):
    while True:
        m = i
        l = 2 * i + 1
        r = l + 1
        if l < n and is_less(ys, ids, tree[heap[l]], tree[heap[m]]):
            m = l
        if r < n and is_less(ys, ids, tree[heap[r]], tree[heap[m]]):
            m = r
        if m == i:
            return
        heap[i], heap[m] = heap[m], heap[i]
        i = m


@numba.njit(cache=True, inline="always")
def _sift_up(heap, i, tree, ys, ids):
    while i > 0:
        p = (i - 1) >> 1
        if is_less(ys, ids, tree[heap[i]], tree[heap[p]]):
            heap[i], heap[p] = heap[p], heap[i]
            i = p
        else:
            return


@numba.njit(cache=True)
def find_slots(xs, ids, n, qx, qid, out):
    """The slot of each position (qx[j], qid[j]) (binary search in the (x, id) order), -1
    where the table lacks it; returns how many are missing."""
    missing = 0
    for j in range(qx.shape[0]):
        lo = 0
        hi = n
        while lo < hi:
            mid = (lo + hi) >> 1
            if xs[mid] < qx[j] or (xs[mid] == qx[j] and ids[mid] < qid[j]):
                lo = mid + 1
            else:
                hi = mid
        if lo < n and xs[lo] == qx[j] and ids[lo] == qid[j]:
            out[j] = lo
        else:
            out[j] = -1
            missing += 1
    return missing


@numba.njit(cache=True)
def ranges_of(xs, n, lo, hi, a_out, b_out):
    """For each closed x range [lo[j], hi[j]], the slots ``a_out[j] .. b_out[j] - 1`` whose
    x lies in it."""
    for j in range(lo.shape[0]):
        a_out[j] = np.searchsorted(xs[:n], lo[j], side="left")
        b_out[j] = np.searchsorted(xs[:n], hi[j], side="right")


@numba.njit(cache=True)
def topk_of_ranges(tree, size, ys, ids, a, b, k, out_slot, out_n):
    """The top-k slots of each slot range ``a[j] .. b[j]-1`` into ``out_slot[j]`` (int64[m, k]),
    their number into ``out_n[j]``."""
    buf = np.empty(k, np.int64)
    for j in range(a.shape[0]):
        c = topk_range(tree, size, ys, ids, a[j], b[j], k, buf)
        out_n[j] = c
        for t in range(c):
            out_slot[j, t] = buf[t]


class ObjectTable:
    """The slots (sorted positions, values) and their min tree; objects' live slots by id.

    Arrays: ``xs``, ``ids``, ``ys`` (length ``n + 1``: slot ``n`` is a dummy of value +inf),
    ``tree`` (int64[2 * size]). ``slot_of`` maps a live object id to its slot."""

    def __init__(self):
        from rankcast.common.idmap import IdMap
        self.slot_of = IdMap()
        self._reset(np.zeros(0), np.zeros(0, np.int64), np.zeros(0))

    def _reset(self, xs, ids, ys) -> None:
        n = len(xs)
        self.n = n
        self.size = 1
        while self.size < n + 1:
            self.size *= 2
        self.xs = np.append(xs, np.inf).astype(np.float64)
        self.ids = np.append(ids, np.iinfo(np.int64).max).astype(np.int64)
        self.ys = np.append(ys, np.inf).astype(np.float64)
        self.tree = build_tree(self.ys, self.ids, n, self.size)
        self.live = int(np.count_nonzero(np.isfinite(ys)))

    @property
    def nbytes(self) -> int:
        return self.xs.nbytes + self.ids.nbytes + self.ys.nbytes + self.tree.nbytes

    def ensure(self, qx: np.ndarray, qid: np.ndarray) -> None:
        """Make sure every position (qx[j], qid[j]) has a slot: rebuild the table with the live
        slots and the missing positions when some are missing, or when dead slots outnumber
        the live ones (compaction)."""
        qx = np.ascontiguousarray(qx, np.float64)
        qid = np.ascontiguousarray(qid, np.int64)
        out = np.empty(len(qx), np.int64)
        missing = find_slots(self.xs, self.ids, self.n, qx, qid, out) if len(qx) else 0
        dead = self.n - self.live
        if not missing and dead <= max(1024, self.live):
            return
        keep = np.flatnonzero(np.isfinite(self.ys[: self.n]))
        # live slots first: a live position asked again keeps its value (the first of equals)
        xs = np.concatenate([self.xs[keep], qx])
        ids = np.concatenate([self.ids[keep], qid])
        ys = np.concatenate([self.ys[keep], np.full(len(qx), np.inf)])
        order = np.lexsort((np.arange(len(xs)), ids, xs))
        xs, ids, ys = xs[order], ids[order], ys[order]
        uniq = np.ones(len(xs), bool)       # a position asked twice gets one slot
        if len(xs) > 1:
            uniq[1:] = (xs[1:] != xs[:-1]) | (ids[1:] != ids[:-1])
        xs, ids, ys = xs[uniq], ids[uniq], ys[uniq]
        self._reset(xs, ids, ys)
        live = np.flatnonzero(np.isfinite(ys))
        from rankcast.common.idmap import IdMap
        self.slot_of = IdMap(2 * len(live) + 16)
        if len(live):
            self.slot_of.put(ids[live], live)

    def slots(self, qx: np.ndarray, qid: np.ndarray) -> np.ndarray:
        """The slots of positions that :meth:`ensure` made sure of."""
        out = np.empty(len(qx), np.int64)
        find_slots(self.xs, self.ids, self.n, np.ascontiguousarray(qx, np.float64),
                   np.ascontiguousarray(qid, np.int64), out)
        return out

    def lookup(self, obj_ids: np.ndarray) -> np.ndarray:
        """The live slot of each object id, -1 where the object is not live."""
        from rankcast.common.idmap import _get
        obj_ids = np.ascontiguousarray(obj_ids, np.int64)
        out = np.empty(len(obj_ids), np.int64)
        m = self.slot_of
        _get(m.state, m.keys, m.vals, obj_ids, out)
        return out

    def topk(self, lo: np.ndarray, hi: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The top-k of closed x ranges [lo, hi]: (object ids int64[m, k], values float64[m, k],
        counts int64[m]), lowest value first."""
        m = len(lo)
        a = np.empty(m, np.int64)
        b = np.empty(m, np.int64)
        ranges_of(self.xs, self.n, np.ascontiguousarray(lo, np.float64), np.ascontiguousarray(hi, np.float64), a, b)
        slot = np.full((m, k), self.n, np.int64)
        cnt = np.zeros(m, np.int64)
        topk_of_ranges(self.tree, self.size, self.ys, self.ids, a, b, k, slot, cnt)
        ids = self.ids[slot]
        ys = self.ys[slot]
        return ids, ys, cnt

    def state(self) -> dict:
        """Plain arrays to rebuild the table from (:meth:`from_state`)."""
        return {"xs": self.xs[: self.n].copy(), "ids": self.ids[: self.n].copy(), "ys": self.ys[: self.n].copy()}

    @classmethod
    def from_state(cls, st: dict) -> "ObjectTable":
        t = cls()
        t._reset(np.asarray(st["xs"], np.float64), np.asarray(st["ids"], np.int64), np.asarray(st["ys"], np.float64))
        live = np.flatnonzero(np.isfinite(t.ys[: t.n]))
        if len(live):
            t.slot_of.put(t.ids[live], live)
        return t

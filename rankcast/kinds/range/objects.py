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

A call that needs positions the table lacks (objects inserted or moved to a new x) gets them in
place (``ObjectTable.ensure``): a new position takes a free dead slot next to its place in the
order, or the live slots between its place and the nearest free slot (at most ``WINDOW`` away)
shift by one towards it, so slots stay positions in x order. Dead slots are no one's between
calls (an object's live slot is found by id), and a moved object frees its old slot, so the free
slots renew themselves. The table is rebuilt, with one spare slot after every ``SPARE_EVERY``
positions, only when no free slot is near enough or dead slots outnumber live ones; a rebuild
is O(n log n), a placement O(d log n) for a shift of d slots, point updates O(log n). A spare
slot repeats the position before it (value +inf), so positions are non-decreasing and only the
first slot of a position can be live: a position's slot is its first occurrence.
"""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["ObjectTable", "build_tree", "set_value", "first_k", "range_min", "topk_range",
           "is_less", "below", "place_positions", "WINDOW", "SPARE_EVERY"]

# how far a new position may shift live slots to reach a free one before the table is rebuilt
WINDOW = 64
# a rebuilt table has one spare (dead) slot after every this many positions
SPARE_EVERY = 8


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


@numba.njit(cache=True, inline="always")
def _key_less(xs, ids, s, x, i):
    """Whether slot ``s``'s position is below (x, i) in the (x, id) order."""
    return xs[s] < x or (xs[s] == x and ids[s] < i)


@numba.njit(cache=True, inline="always")
def _move(xs, ids, ys, held, tree, size, dst, src):
    """Copy slot ``src``'s position, value and hold into slot ``dst`` and repair its path."""
    xs[dst] = xs[src]
    ids[dst] = ids[src]
    held[dst] = held[src]
    set_value(tree, size, ys, ids, dst, ys[src])


@numba.njit(cache=True)
def place_positions(xs, ids, ys, tree, size, n, qx, qid, held, window, moved):
    """Give each position (qx[j], qid[j]) that lacks one a slot in place, keeping slots sorted by
    (x, id): a free slot (dead, not ``held``) beside its place is renamed to it, or the slots
    between its place and the nearest free slot within ``window`` shift one step towards that
    slot. ``held`` (bool[n]) marks the slots the call needs (found or placed positions) and
    moves with them. The destinations of moved slots go to ``moved``. Returns the number of
    moved slots, or -1 when a position found no free slot near enough (the table stays
    consistent, some positions placed)."""
    nm = 0
    for j in range(qx.shape[0]):
        x = qx[j]
        i = qid[j]
        lo = 0
        hi = n
        while lo < hi:
            mid = (lo + hi) >> 1
            if _key_less(xs, ids, mid, x, i):
                lo = mid + 1
            else:
                hi = mid
        p = lo
        if p < n and xs[p] == x and ids[p] == i:
            held[p] = True          # asked twice, or placed before in this call
            continue
        if p >= 1 and ys[p - 1] == np.inf and not held[p - 1]:
            t = p - 1
        elif p < n and ys[p] == np.inf and not held[p]:
            t = p
        else:
            r = -1
            for d in range(p + 1, min(n, p + window)):
                if ys[d] == np.inf and not held[d]:
                    r = d
                    break
            left = -1
            for d in range(p - 2, max(-1, p - 2 - window), -1):
                if ys[d] == np.inf and not held[d]:
                    left = d
                    break
            if r < 0 and left < 0:
                return -1
            if r >= 0 and (left < 0 or r - p <= p - 1 - left):
                for s in range(r, p, -1):
                    _move(xs, ids, ys, held, tree, size, s, s - 1)
                    if ys[s] != np.inf:
                        moved[nm] = s
                        nm += 1
                t = p
            else:
                for s in range(left, p - 1):
                    _move(xs, ids, ys, held, tree, size, s, s + 1)
                    if ys[s] != np.inf:
                        moved[nm] = s
                        nm += 1
                t = p - 1
        xs[t] = x
        ids[t] = i
        held[t] = True
        set_value(tree, size, ys, ids, t, np.inf)
    return nm


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
        """Make sure every position (qx[j], qid[j]) has a slot: place the missing ones in place
        (:func:`place_positions`), or rebuild the table with the live slots, the positions and
        spare slots when that fails or when dead slots outnumber the live ones (compaction)."""
        qx = np.ascontiguousarray(qx, np.float64)
        qid = np.ascontiguousarray(qid, np.int64)
        out = np.empty(len(qx), np.int64)
        missing = find_slots(self.xs, self.ids, self.n, qx, qid, out) if len(qx) else 0
        dead = self.n - self.live
        if dead > max(1024, self.live):
            self._rebuild(qx, qid)
            return
        if not missing:
            return
        held = np.zeros(self.n, np.bool_)
        held[out[out >= 0]] = True
        miss = out < 0
        mx, mid = qx[miss], qid[miss]
        moved = np.empty(len(mx) * (WINDOW + 1), np.int64)
        nm = place_positions(self.xs, self.ids, self.ys, self.tree, self.size, self.n, mx, mid, held,
                             WINDOW, moved)
        if nm < 0:
            self._rebuild(qx, qid)
            return
        if nm:
            s = np.unique(moved[:nm])
            s = s[np.isfinite(self.ys[s])]
            self.slot_of.put(self.ids[s], s)

    def _rebuild(self, qx: np.ndarray, qid: np.ndarray) -> None:
        """The table of the live slots and the positions (qx, qid), a spare slot after every
        ``SPARE_EVERY`` positions; ``slot_of`` anew."""
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
        m = len(xs)
        pos = np.arange(m) + np.arange(m) // SPARE_EVERY      # position i's slot
        src = np.empty(m + m // SPARE_EVERY, np.int64)          # what each slot repeats
        src[pos] = np.arange(m)
        spare = np.ones(len(src), bool)
        spare[pos] = False
        src[spare] = np.arange(SPARE_EVERY - 1, m, SPARE_EVERY)[: int(spare.sum())]
        ys = np.where(spare, np.inf, ys[src])
        xs, ids = xs[src], ids[src]
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

"""An index over subscription points (lo, hi) of the (l, r) subscription space: a static k-d
tree, rebuilt when the subscription set changes, whose nodes keep the bounding box of their
points. It answers the paper's ``snap(G)`` (the smallest box holding the subscriptions inside
box G, Paint-Sparse), an emptiness test, and the delivery of a message box to every
subscription inside it (which the subscriber side runs).

Layout: the points in tree order (``order`` gives each one's position in the input), an
implicit complete tree of ``2 * leaves`` nodes (root 1, children 2v and 2v + 1, leaves from
``leaves`` on), node v holding the points ``start[v] .. end[v] - 1`` and their box
``box[v] = (lo_min, lo_max, hi_min, hi_max)`` (an empty node: +inf, -inf, +inf, -inf).
Boxes of queries are closed: lo in [a0, a1] and hi in [b0, b1].
"""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["PointIndex", "snap", "extreme", "any_in_box_outside", "build_kd", "count_in_boxes", "receipts",
           "localize", "snap_at", "snap_boxes", "extreme_at", "any_outside_at", "local_copy"]

LEAF_SIZE = 32


@numba.njit(cache=True)
def build_kd(lo, hi, leaves):
    """A k-d tree over points (lo, hi) with ``leaves`` leaves (a power of two): returns
    (order int64[m], start int64[2 * leaves], end int64[2 * leaves], box float64[2 * leaves, 4]).
    Each node splits its points at the median of the axis of larger extent."""
    m = lo.shape[0]
    order = np.arange(m)
    start = np.zeros(2 * leaves, np.int64)
    end = np.zeros(2 * leaves, np.int64)
    start[1] = 0
    end[1] = m
    keys = np.empty(m)
    for v in range(1, leaves):
        a = start[v]
        b = end[v]
        mid = a + (b - a) // 2
        if b - a > 1:
            l0 = np.inf
            l1 = -np.inf
            h0 = np.inf
            h1 = -np.inf
            for t in range(a, b):
                i = order[t]
                l0 = min(l0, lo[i])
                l1 = max(l1, lo[i])
                h0 = min(h0, hi[i])
                h1 = max(h1, hi[i])
            use_lo = (l1 - l0) >= (h1 - h0)
            for t in range(a, b):
                keys[t] = lo[order[t]] if use_lo else hi[order[t]]
            idx = np.argsort(keys[a:b], kind="mergesort")
            seg = order[a:b].copy()
            for t in range(b - a):
                order[a + t] = seg[idx[t]]
        start[2 * v] = a
        end[2 * v] = mid
        start[2 * v + 1] = mid
        end[2 * v + 1] = b
    box = np.empty((2 * leaves, 4))
    for v in range(leaves, 2 * leaves):
        box[v, 0] = np.inf
        box[v, 1] = -np.inf
        box[v, 2] = np.inf
        box[v, 3] = -np.inf
        for t in range(start[v], end[v]):
            i = order[t]
            box[v, 0] = min(box[v, 0], lo[i])
            box[v, 1] = max(box[v, 1], lo[i])
            box[v, 2] = min(box[v, 2], hi[i])
            box[v, 3] = max(box[v, 3], hi[i])
    for v in range(leaves - 1, 0, -1):
        box[v, 0] = min(box[2 * v, 0], box[2 * v + 1, 0])
        box[v, 1] = max(box[2 * v, 1], box[2 * v + 1, 1])
        box[v, 2] = min(box[2 * v, 2], box[2 * v + 1, 2])
        box[v, 3] = max(box[2 * v, 3], box[2 * v + 1, 3])
    return order, start, end, box


@numba.njit(cache=True, inline="always")
def _disjoint(box, v, a0, a1, b0, b1):
    return box[v, 0] > a1 or box[v, 1] < a0 or box[v, 2] > b1 or box[v, 3] < b0


@numba.njit(cache=True, inline="always")
def _inside(box, v, a0, a1, b0, b1):
    return box[v, 0] >= a0 and box[v, 1] <= a1 and box[v, 2] >= b0 and box[v, 3] <= b1


@numba.njit(cache=True)
def snap(box, start, end, lo, hi, leaves, a0, a1, b0, b1, out):
    """snap(G) of the paper for the closed box G = [a0, a1] x [b0, b1]: the smallest box
    holding every point inside G, into ``out`` (float64[4]); returns False when G holds none.
    A node is opened only if its points can widen the answer. ``lo``, ``hi``: the points in
    tree order."""
    out[0] = np.inf
    out[1] = -np.inf
    out[2] = np.inf
    out[3] = -np.inf
    if a0 > a1 or b0 > b1:
        return False
    stack = np.empty(64, np.int64)
    sp = 0
    stack[sp] = 1
    sp += 1
    while sp > 0:
        sp -= 1
        v = stack[sp]
        if _disjoint(box, v, a0, a1, b0, b1):
            continue
        if box[v, 0] >= out[0] and box[v, 1] <= out[1] and box[v, 2] >= out[2] and box[v, 3] <= out[3]:
            continue                    # nothing in it can widen the answer
        if _inside(box, v, a0, a1, b0, b1):
            out[0] = min(out[0], box[v, 0])
            out[1] = max(out[1], box[v, 1])
            out[2] = min(out[2], box[v, 2])
            out[3] = max(out[3], box[v, 3])
            continue
        if v >= leaves:
            for t in range(start[v], end[v]):
                if a0 <= lo[t] <= a1 and b0 <= hi[t] <= b1:
                    out[0] = min(out[0], lo[t])
                    out[1] = max(out[1], lo[t])
                    out[2] = min(out[2], hi[t])
                    out[3] = max(out[3], hi[t])
            continue
        stack[sp] = 2 * v
        stack[sp + 1] = 2 * v + 1
        sp += 2
    return out[0] <= out[1]


@numba.njit(cache=True)
def extreme(box, start, end, lo, hi, leaves, a0, a1, b0, b1, col, best):
    """One side of snap(G): the least lo (``col`` 0) or, negated, the greatest hi (``col`` 3) of
    the points in the closed box G = [a0, a1] x [b0, b1], if below ``best`` (else ``best``). A
    node is opened only if its bound on that side beats the best so far, which is why this is
    far cheaper than a whole snap."""
    if a0 > a1 or b0 > b1:
        return best
    stack = np.empty(64, np.int64)
    sp = 1
    stack[0] = 1
    while sp > 0:
        sp -= 1
        v = stack[sp]
        if _disjoint(box, v, a0, a1, b0, b1):
            continue
        bound = box[v, 0] if col == 0 else -box[v, 3]
        if bound >= best:
            continue
        if _inside(box, v, a0, a1, b0, b1):
            best = bound
            continue
        if v >= leaves:
            for t in range(start[v], end[v]):
                if a0 <= lo[t] <= a1 and b0 <= hi[t] <= b1:
                    best = min(best, lo[t] if col == 0 else -hi[t])
            continue
        c0 = box[2 * v, 0] if col == 0 else -box[2 * v, 3]
        c1 = box[2 * v + 1, 0] if col == 0 else -box[2 * v + 1, 3]
        first = 2 * v if c0 <= c1 else 2 * v + 1      # the more promising child popped first
        stack[sp] = 4 * v + 1 - first
        stack[sp + 1] = first
        sp += 2
    return best


@numba.njit(cache=True)
def snap_boxes(box, start, end, lo, hi, leaves, gb, ng, out):
    """snap(G) of each box ``gb[j, :4]``, ``j < ng``, into ``out[j, :4]`` (an empty one:
    +inf, -inf, +inf, -inf), by one walk of the tree for all of them when they are ordered
    west to east with disjoint lo ranges (``gb[j, 1] < gb[j + 1, 0]``: the columns and chains of
    Paint), so that the nodes and leaves around several boxes are read once; any other list
    is snapped box by box. A node carries the boxes it may still widen (a range of them)."""
    for j in range(ng):
        out[j, 0] = np.inf
        out[j, 1] = -np.inf
        out[j, 2] = np.inf
        out[j, 3] = -np.inf
    for j in range(ng - 1):
        if not gb[j, 1] < gb[j + 1, 0]:
            for i in range(ng):
                snap(box, start, end, lo, hi, leaves, gb[i, 0], gb[i, 1], gb[i, 2], gb[i, 3], out[i])
            return
    stack = np.empty((64, 3), np.int64)     # node, first box, one past the last box
    stack[0, 0] = 1
    stack[0, 1] = 0
    stack[0, 2] = ng
    sp = 1
    while sp > 0:
        sp -= 1
        v = stack[sp, 0]
        ja = stack[sp, 1]
        jb = stack[sp, 2]
        n0 = box[v, 0]
        n1 = box[v, 1]
        n2 = box[v, 2]
        n3 = box[v, 3]
        while ja < jb and gb[ja, 1] < n0:
            ja += 1
        while jb > ja and gb[jb - 1, 0] > n1:
            jb -= 1
        na = jb
        nb = ja
        for j in range(ja, jb):
            if gb[j, 0] > gb[j, 1] or gb[j, 2] > gb[j, 3] or _disjoint(box, v, gb[j, 0], gb[j, 1], gb[j, 2], gb[j, 3]):
                continue
            if n0 >= out[j, 0] and n1 <= out[j, 1] and n2 >= out[j, 2] and n3 <= out[j, 3]:
                continue                    # nothing in it can widen box j's answer
            if _inside(box, v, gb[j, 0], gb[j, 1], gb[j, 2], gb[j, 3]):
                out[j, 0] = min(out[j, 0], n0)
                out[j, 1] = max(out[j, 1], n1)
                out[j, 2] = min(out[j, 2], n2)
                out[j, 3] = max(out[j, 3], n3)
                continue
            na = min(na, j)
            nb = j + 1
        if na >= nb:
            continue
        if v >= leaves:
            for j in range(na, nb):
                a0 = gb[j, 0]
                a1 = gb[j, 1]
                b0 = gb[j, 2]
                b1 = gb[j, 3]
                l0 = out[j, 0]
                l1 = out[j, 1]
                h0 = out[j, 2]
                h1 = out[j, 3]
                for t in range(start[v], end[v]):     # branch-free: vectorised
                    x = lo[t]
                    y = hi[t]
                    ok = (a0 <= x) & (x <= a1) & (b0 <= y) & (y <= b1)
                    l0 = min(l0, x if ok else np.inf)
                    l1 = max(l1, x if ok else -np.inf)
                    h0 = min(h0, y if ok else np.inf)
                    h1 = max(h1, y if ok else -np.inf)
                out[j, 0] = l0
                out[j, 1] = l1
                out[j, 2] = h0
                out[j, 3] = h1
            continue
        stack[sp, 0] = 2 * v
        stack[sp, 1] = na
        stack[sp, 2] = nb
        stack[sp + 1, 0] = 2 * v + 1
        stack[sp + 1, 1] = na
        stack[sp + 1, 2] = nb
        sp += 2


@numba.njit(cache=True, inline="always")
def _in(x0, x1, y0, y1, l, r):
    return x0 <= l <= x1 and y0 <= r <= y1


@numba.njit(cache=True)
def any_in_box_outside(box, start, end, lo, hi, leaves, m, g, s):
    """Whether some point lies in the closed box ``m`` (float64[4]) but in neither ``g`` nor
    ``s`` (the emptiness test of Paint-Sparse's greedy merge, paper footnote 7)."""
    stack = np.empty(64, np.int64)
    sp = 0
    stack[sp] = 1
    sp += 1
    while sp > 0:
        sp -= 1
        v = stack[sp]
        if _disjoint(box, v, m[0], m[1], m[2], m[3]):
            continue
        if _inside(box, v, g[0], g[1], g[2], g[3]) or _inside(box, v, s[0], s[1], s[2], s[3]):
            continue
        # a node's box is its points' MEB: not inside s, it holds a point outside s, which is
        # outside g as well if the node is disjoint from g (and the same with g and s swapped)
        if _inside(box, v, m[0], m[1], m[2], m[3]) and (_disjoint(box, v, g[0], g[1], g[2], g[3])
                                                       or _disjoint(box, v, s[0], s[1], s[2], s[3])):
            return True
        if v >= leaves:
            for t in range(start[v], end[v]):
                if _in(m[0], m[1], m[2], m[3], lo[t], hi[t]) and not _in(g[0], g[1], g[2], g[3], lo[t], hi[t]) \
                        and not _in(s[0], s[1], s[2], s[3], lo[t], hi[t]):
                    return True
            continue
        stack[sp] = 2 * v
        stack[sp + 1] = 2 * v + 1
        sp += 2
    return False


# --------------------------------------------------------------------------- local copies
# Paint-Sparse asks tens of snaps, extremes and emptiness tests per update, all inside the
# box of the update's influence region, which at 1M subscriptions mostly holds a few dozen
# points. A *local copy* keeps the points of one box Q (``lq[:4]``; ``lq[4]``: how many, -1 when
# more than the copy holds) in ``lpt`` (float64[2, cap]: lo, hi); a query whose box lies inside
# Q scans them (branch-free, vectorised) instead of walking the tree from the root; any other
# goes to the tree. Both give the same answers; the copy only moves where they are computed.


@numba.njit(cache=True)
def localize(box, start, end, lo, hi, leaves, q0, q1, q2, q3, lq, lpt):
    """Make the local copy hold the points of Q = [q0, q1] x [q2, q3], unless it already
    covers Q (a copy of a larger box answers for Q as well) or Q lies inside a box known to
    hold too many. A walk that finds more than ``lpt.shape[1]`` points stops there."""
    if lq[0] <= q0 and q1 <= lq[1] and lq[2] <= q2 and q3 <= lq[3]:
        return
    lq[0] = q0
    lq[1] = q1
    lq[2] = q2
    lq[3] = q3
    cap = lpt.shape[1]
    c = 0
    stack = np.empty(64, np.int64)
    sp = 1
    stack[0] = 1
    while sp > 0:
        sp -= 1
        v = stack[sp]
        if _disjoint(box, v, q0, q1, q2, q3):
            continue
        inside = _inside(box, v, q0, q1, q2, q3)
        if inside and c + end[v] - start[v] > cap:
            lq[4] = -1                  # known too many without copying them
            return
        if inside or v >= leaves:
            for t in range(start[v], end[v]):
                if inside or (q0 <= lo[t] <= q1 and q2 <= hi[t] <= q3):
                    if c == cap:
                        lq[4] = -1
                        return
                    lpt[0, c] = lo[t]
                    lpt[1, c] = hi[t]
                    c += 1
            continue
        stack[sp] = 2 * v
        stack[sp + 1] = 2 * v + 1
        sp += 2
    lq[4] = c


@numba.njit(cache=True, inline="always")
def _local(lq, a0, a1, b0, b1):
    """Whether the local copy answers for the box [a0, a1] x [b0, b1]."""
    return lq[4] >= 0 and lq[0] <= a0 and a1 <= lq[1] and lq[2] <= b0 and b1 <= lq[3]


@numba.njit(cache=True)
def snap_at(box, start, end, lo, hi, leaves, lq, lpt, a0, a1, b0, b1, out):
    """:func:`snap`, from the local copy when it covers the box."""
    if not _local(lq, a0, a1, b0, b1):
        return snap(box, start, end, lo, hi, leaves, a0, a1, b0, b1, out)
    l0 = np.inf
    l1 = -np.inf
    h0 = np.inf
    h1 = -np.inf
    for t in range(int(lq[4])):
        x = lpt[0, t]
        y = lpt[1, t]
        ok = (a0 <= x) & (x <= a1) & (b0 <= y) & (y <= b1)
        l0 = min(l0, x if ok else np.inf)
        l1 = max(l1, x if ok else -np.inf)
        h0 = min(h0, y if ok else np.inf)
        h1 = max(h1, y if ok else -np.inf)
    out[0] = l0
    out[1] = l1
    out[2] = h0
    out[3] = h1
    return l0 <= l1


@numba.njit(cache=True)
def extreme_at(box, start, end, lo, hi, leaves, lq, lpt, a0, a1, b0, b1, col, best):
    """:func:`extreme`, from the local copy when it covers the box."""
    if a0 > a1 or b0 > b1:
        return best
    if not _local(lq, a0, a1, b0, b1):
        return extreme(box, start, end, lo, hi, leaves, a0, a1, b0, b1, col, best)
    for t in range(int(lq[4])):
        x = lpt[0, t]
        y = lpt[1, t]
        ok = (a0 <= x) & (x <= a1) & (b0 <= y) & (y <= b1)
        best = min(best, (x if col == 0 else -y) if ok else np.inf)
    return best


@numba.njit(cache=True)
def any_outside_at(box, start, end, lo, hi, leaves, lq, lpt, m, g, s):
    """:func:`any_in_box_outside`, from the local copy when it covers ``m``."""
    if not _local(lq, m[0], m[1], m[2], m[3]):
        return any_in_box_outside(box, start, end, lo, hi, leaves, m, g, s)
    found = False
    for t in range(int(lq[4])):
        x = lpt[0, t]
        y = lpt[1, t]
        in_m = (m[0] <= x) & (x <= m[1]) & (m[2] <= y) & (y <= m[3])
        in_g = (g[0] <= x) & (x <= g[1]) & (g[2] <= y) & (y <= g[3])
        in_s = (s[0] <= x) & (x <= s[1]) & (s[2] <= y) & (y <= s[3])
        found |= in_m & ~in_g & ~in_s
    return found


def local_copy(cap: int) -> tuple[np.ndarray, np.ndarray]:
    """An empty local copy (``lq``, ``lpt``) of ``cap`` points: it covers nothing."""
    lq = np.array([np.inf, -np.inf, np.inf, -np.inf, -1.0])
    return lq, np.empty((2, cap))


class PointIndex:
    """The k-d tree over subscription points (see the module docstring). ``lo``, ``hi`` and
    ``key`` (the subscription ids) are kept in tree order."""

    def __init__(self, lo: np.ndarray, hi: np.ndarray, key: np.ndarray, leaf_size: int = LEAF_SIZE):
        m = len(lo)
        leaves = 1
        while leaves * leaf_size < m:
            leaves *= 2
        order, start, end, box = build_kd(np.ascontiguousarray(lo, np.float64),
                                          np.ascontiguousarray(hi, np.float64), leaves)
        self.leaves = leaves
        self.order = order
        self.start, self.end, self.box = start, end, box
        self.lo = np.ascontiguousarray(lo[order], np.float64)
        self.hi = np.ascontiguousarray(hi[order], np.float64)
        self.key = np.ascontiguousarray(np.asarray(key, np.int64)[order])

    def __len__(self) -> int:
        return len(self.lo)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.order, self.start, self.end, self.box, self.lo, self.hi, self.key))

    def arrays(self):
        """(box, start, end, lo, hi, leaves): what the kernels take."""
        return self.box, self.start, self.end, self.lo, self.hi, self.leaves


@numba.njit(cache=True)
def count_in_boxes(box, start, end, lo, hi, leaves, q, out):
    """``out[j]`` = how many points lie in the closed box ``q[j, :4]`` (receipts of a message
    batch, without delivering it)."""
    stack = np.empty(64, np.int64)
    for j in range(q.shape[0]):
        a0 = q[j, 0]
        a1 = q[j, 1]
        b0 = q[j, 2]
        b1 = q[j, 3]
        c = 0
        sp = 1
        stack[0] = 1
        while sp > 0:
            sp -= 1
            v = stack[sp]
            if box[v, 0] > a1 or box[v, 1] < a0 or box[v, 2] > b1 or box[v, 3] < b0:
                continue
            if box[v, 0] >= a0 and box[v, 1] <= a1 and box[v, 2] >= b0 and box[v, 3] <= b1:
                c += end[v] - start[v]
                continue
            if v >= leaves:
                for t in range(start[v], end[v]):
                    if a0 <= lo[t] <= a1 and b0 <= hi[t] <= b1:
                        c += 1
                continue
            stack[sp] = 2 * v
            stack[sp + 1] = 2 * v + 1
            sp += 2
        out[j] = c


def receipts(points: PointIndex, f: np.ndarray) -> np.ndarray:
    """Receipts of each message box (float64[n, >= 4]) on ``points``."""
    out = np.zeros(len(f), np.int64)
    if len(f):
        count_in_boxes(points.box, points.start, points.end, points.lo, points.hi, points.leaves,
                       np.ascontiguousarray(f[:, :4]), out)
    return out

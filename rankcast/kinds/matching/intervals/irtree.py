"""IR-tree (paper §3.1): an interval tree whose node lists are scored R-trees, fully dynamic.

**Interval tree (I-tree).** A node has a median ``med``; of the intervals of its subtree, those
that contain ``med`` stay at the node, those entirely left (``hi < med``) / right (``lo > med``)
of it live in the left / right subtree. A fresh build takes the lower median of the endpoints,
so a child never holds more than half of its parent's subtree. Medians form a strict binary
search tree (a median lies in one of the node's intervals when the node is made), which is how
a delete finds the path to a node.

**Per-node scored R-tree.** The intervals of a node, in the total order of
:func:`~rankcast.kinds.matching.intervals.base.before` (score desc, item asc), are the leaves of a
B+-tree keyed by that order (the paper's packed scored R-tree made updatable): a leaf page holds
intervals, an internal entry holds its child's extent ``[min lo, max hi]`` and the child's first
key. Leaves hold at most ``b`` entries, internal pages at most ``max(b, 3)`` (with at most 2
children and at least 1 a B-tree cannot keep a logarithmic height under updates), every page
below the root at least half its most, an internal root at least 2. Every interval of a node
contains its median, so any two overlap and (Lemma 3.1) a page whose extent holds ``q`` has a
stabbed interval below it: a left-first descent finds the next stabbed interval of a node
without backtracking, and the ``holes`` counter of a cursor stays 0.

**Query.** ``open(q)`` walks path(q) and queues one *slot* per path node whose extent holds
``q``: a resumable left-first DFS of the node's R-tree (explicit stack of (page, position) per
level), not yet started, keyed by the node's best interval holding q as its *staircase* gives it
(below; a node without one: its best interval, the root page's first key).
``next(n)`` is a best-first search over the pages of the whole path, in the total order: the
slot with the first key resumes its DFS, entering child pages whose extent holds ``q`` and
reporting stabbed leaf entries, as long as the best key of the other slots does not come
before the entry it looks at; it then pauses at that entry, keyed by the entry's key (an
internal entry's first key, a stabbed leaf entry's own; the DFS runs in the total order, so
nothing after it in the node comes first). A node's R-tree is descended only as far as its
bounds reach the answer (and, for a slot merged with another, at most one leaf further: the
merge goes on to a slot's next leaf before its first key is compared): a path node that holds
no early result costs its staircase's key, or a scan of a page or two. Cost ``O((k + log n) b log_b n)`` for the top-k (Theorem 3.1). Every step
runs in one compiled kernel (:func:`_cursors`), for one cursor or for many queries
(``read_many``), which merges the leaves of the two first slots while both stand in one (the
answer alternates between the few nodes that hold the best intervals); reads of more than
``DEEP`` rows a query use a second one (:func:`_cursors_deep`) that also reads the other leaves
without a branch per entry.
Counters: ``nodes`` = I-tree nodes on the path plus R-tree pages entered (a
root page when its first key is read), ``holes`` = pages entered and left without a stabbed
interval found below, ``entries`` = leaf entries looked at. A cursor is valid until the next
insert/delete of its index (``next`` then raises RuntimeError).

**Staircases.** The paper's heap holds each path node's best interval holding q, found by a
descent of its R-tree at open; a first key in its place is a bound that a node whose best
interval does not hold q fails after a descent that yields nothing. Since every interval of a
node holds its median, one left of it holds q exactly when its ``lo <= q``, one right of it when
its ``hi >= q``: the node's best interval holding q is a step function of q, its records (the
intervals first in the total order among those with a ``lo`` at most theirs; on the right, a
``hi`` at least theirs). A node of at least ``ST_MIN * b`` intervals keeps, per side, its
``K_ST`` best records with their thresholds and a *floor* (the next record's key, a bound below
the kept thresholds), so that ``open`` reads the node's key at q from ``K_ST`` compares with no
descent: exact past the floor, a bound within it. An insert enters a record where it comes
before the one that answers at its threshold (those it now answers for leave, a list grown past
its entries drops its first); a delete of a kept record recomputes the node's staircase from
its leaves in the total order, read until both sides have their records (other deletes leave
every record in place). Builds and rebuilds give a staircase to every node of the size (a node
that grows to it by inserts gets one when its subtree is next rebuilt). Every answer is a bound
on the node's best key at q, which is all the queue needs to stay exact; on the paper's workload
a read of 20 rows starts fewer than half as many R-tree descents.

**Updates.** Insert descends to the first node whose median the interval contains (a new leaf
node with median ``lo`` (``hi`` when ``lo = -inf``, 0 for ``(-inf, inf)``) when it falls off
the tree) and inserts it into that node's B+-tree: ``O(log n + b log_b n)``, fixing extents and
first keys on the way down and splitting full pages on the way up. Delete finds the item's node
and score in the item directory, walks the median path to the node, removes the entry, then
repairs the pages on the way up (a page below half its most entries merges with a sibling when
both fit in one page and evens out with it otherwise; extents and first keys are recomputed).
A node whose subtree becomes empty is removed.

**Balance policy.** Weight balance: every node ``u`` keeps
``max(size(left), size(right)) <= ALPHA * size(u)`` with ``ALPHA = 0.7`` (size = intervals in
the subtree, own ones included); after each single insert or delete the highest node of the
update path that breaks it (only path nodes change size) is rebuilt from its intervals with fresh
medians, which restores the invariant everywhere. Hence the depth is at most
``log_{1/ALPHA} n`` (about ``1.94 log2 n``); a subtree of ``s`` intervals only breaks the bound
after ``Omega(s)`` updates below it since its last (re)build (a fresh or new node has ratio
<= 1/2), each update lies below ``O(log n)`` nodes, and a rebuild costs ``O(s log s)``: amortised
``O(log^2 n)`` per update on top of the ``O(log n + b log_b n)`` of the update itself. For memory,
when a delete call leaves fewer than a quarter of the most intervals held since the last full
build, the whole index is rebuilt into exact-size arrays (amortised ``O(log n)`` per delete); an
index emptied by deletes drops its arrays.

**Layout** (flat arrays, passed explicitly to every kernel)::

    nd_f[N, 4] float64   MED, MINLO, MAXHI (extent of the node's own intervals), FKS (score of
                         the root page's first key)
    nd_i[N, 9] int64     LEFT, RIGHT, SIZE (subtree), ROOT (page), HEIGHT (R-tree levels, 0 =
                         empty), COUNT (own intervals), FKI (item of the root page's first
                         key), RST (the root page's block start, -1 without one), STR (the
                         node's staircase row, -1 without one)
    pg[P, 3]   int64     START, CAP, NENT: the page's entries are pool rows START .. START + NENT,
                         its block rows START - 1 .. START + CAP (a header row, then CAP rows)
    ef[E, 3]   float64   LO, HI, SC of a leaf interval, or extent and first-key score of a child
    ei[E]      int64     item (leaf) or first-key item (internal entry); NENT in a header row
    ec[E]      int32     the child's START (internal entry), -1 in leaves; the page id in a
                         header row
    dk, ds, dn [H]       item directory (open addressing, linear probing): item -> score, node
    sf[S, 2, 2K+2] float64  staircases (K = K_ST), per side (0: lo, 1: -hi): K + 1 thresholds
                         rising (entry 0 the floor's), then the K + 1 records' scores
    sx[S, 2, K+1] int64  the records' items (a free row chains through its first)
    meta[N_META] int64   root, counts, allocation marks

A cursor descends from an entry straight to its child's rows and entry count (the entry holds
the child's block start, the header row just before it the count), without a page-table load
between: every update that changes a page's count writes its header too, and a compaction, which
moves blocks, rewrites the internal entries' starts (the only other move is of a root page, which
no entry points to). A cursor's open reads a path node's first key and root block from the node
table alone: each update of a node's R-tree and each compaction refresh those copies.

Free node, page and staircase rows are chained in free lists. The entry pool is a bump allocator: a root
leaf grows by doubling its block up to ``b`` rows, freed blocks are garbage until a compaction
(when at least a quarter of the pool is garbage) slides the live pages down; otherwise the pool
grows. Kernels never grow an array: they check for room before each update and return to the
Python layer, which grows the arrays and calls again.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from numba.cpython.unsafe.numbers import trailing_zeros

from rankcast.common.arrays import stays_in_probe_run
from .base import Cursor, IntervalIndex, before, check_intervals, read_args, stab8_rows

__all__ = ["IRTreeIndex", "IRTreeCursor", "ALPHA"]

ALPHA_NUM, ALPHA_DEN = 7, 10                 # weight-balance bound: size(child) <= 0.7 size(node)
ALPHA = ALPHA_NUM / ALPHA_DEN

MED, MINLO, MAXHI, FKS = 0, 1, 2, 3          # nd_f columns
LEFT, RIGHT, SIZE, ROOT, HEIGHT, COUNT, FKI, RST, STR = 0, 1, 2, 3, 4, 5, 6, 7, 8   # nd_i columns
N_I = 9
START, CAP, NENT = 0, 1, 2                   # pg columns
LO, HI, SC = 0, 1, 2                         # ef columns
NODES, HOLES, ENTRIES = 0, 1, 2              # counters (base.COUNTERS order)

(M_ROOT, M_N, M_ND_HW, M_ND_FREE, M_ND_NFREE, M_PG_HW, M_PG_FREE, M_PG_NFREE, M_E_HW, M_E_LIVE,
 M_HMAX, M_NEED_ND, M_NEED_PG, M_NEED_E, M_REBUILDS, M_REBUILT, M_COMPACTIONS,
 M_ST_HW, M_ST_FREE, M_ST_NFREE, M_NEED_ST) = range(21)
N_META = 21

DONE, NEED_ROOM, NEED_REBUILD = 0, 1, 2      # batch kernel status
INSERT, DELETE = 0, 1                        # batch kernel operation
_DIR_LOAD = 0.8                              # item directory: max load factor (linear probing)
_NO_F = np.empty(0, np.float64)
_U0 = np.uint64(0)
_U1 = np.uint64(1)
MAX_ROWS = 2 ** 31 - 1                       # pool rows: internal entries hold block starts as int32
DEEP = 64                                    # rows a query from which the cursor merges two leaves
K_ST = 8                                     # staircase records kept per side, besides the floor
ST_MIN = 8                                   # nodes of at least ST_MIN * b intervals keep a staircase


# ----------------------------------------------------------------------------- allocation

@numba.njit(cache=True)
def _node_alloc(meta, nd_f, nd_i, med):
    """A fresh childless, empty node row with median ``med`` (the caller made room); its id."""
    v = meta[M_ND_FREE]
    if v >= 0:
        meta[M_ND_FREE] = nd_i[v, LEFT]
        meta[M_ND_NFREE] -= 1
    else:
        v = meta[M_ND_HW]
        meta[M_ND_HW] = v + 1
    nd_f[v, MED] = med
    nd_f[v, MINLO] = np.inf
    nd_f[v, MAXHI] = -np.inf
    nd_i[v, LEFT] = -1
    nd_i[v, RIGHT] = -1
    nd_i[v, SIZE] = 0
    nd_i[v, ROOT] = -1
    nd_i[v, HEIGHT] = 0
    nd_i[v, COUNT] = 0
    nd_i[v, RST] = -1
    nd_i[v, STR] = -1
    return v


@numba.njit(cache=True)
def _node_free(meta, nd_i, sx, v):
    """Put node row v on the free list (chained through LEFT; SIZE = -1 marks it free), and its
    staircase row on its own."""
    if nd_i[v, STR] >= 0:
        _st_free(meta, sx, nd_i[v, STR])
        nd_i[v, STR] = -1
    nd_i[v, LEFT] = meta[M_ND_FREE]
    nd_i[v, RIGHT] = -1
    nd_i[v, SIZE] = -1
    nd_i[v, ROOT] = -1
    nd_i[v, HEIGHT] = 0
    nd_i[v, COUNT] = 0
    nd_i[v, RST] = -1
    meta[M_ND_FREE] = v
    meta[M_ND_NFREE] += 1


@numba.njit(cache=True)
def _page_alloc(meta, pg, ei, ec, cap):
    """A fresh empty page with a pool block of a header row and ``cap`` entry rows (the caller
    made room); its id."""
    p = meta[M_PG_FREE]
    if p >= 0:
        meta[M_PG_FREE] = pg[p, START]
        meta[M_PG_NFREE] -= 1
    else:
        p = meta[M_PG_HW]
        meta[M_PG_HW] = p + 1
    st = meta[M_E_HW] + 1
    pg[p, START] = st
    pg[p, CAP] = cap
    pg[p, NENT] = 0
    ei[st - 1] = 0
    ec[st - 1] = p
    meta[M_E_HW] += cap + 1
    meta[M_E_LIVE] += cap + 1
    return p


@numba.njit(cache=True, inline="always")
def _set_n(pg, ei, p, n):
    """Page p holds n entries (its page-table row and its header row's copy)."""
    pg[p, NENT] = n
    ei[pg[p, START] - 1] = n


@numba.njit(cache=True, inline="always")
def _child(ec, e):
    """The page id of internal entry e's child (its header row, just before the block start
    that the entry holds)."""
    return np.int64(ec[np.int64(ec[e]) - 1])


@numba.njit(cache=True)
def _page_free(meta, pg, p):
    """Put page p on the free list (chained through START; CAP = -1 marks it free); its block
    becomes garbage."""
    meta[M_E_LIVE] -= pg[p, CAP] + 1
    pg[p, START] = meta[M_PG_FREE]
    pg[p, CAP] = -1
    pg[p, NENT] = 0
    meta[M_PG_FREE] = p
    meta[M_PG_NFREE] += 1


@numba.njit(cache=True, inline="always")
def _copy_row(ef, ei, ec, src, dst):
    """Copy pool row src to row dst."""
    ef[dst, LO] = ef[src, LO]
    ef[dst, HI] = ef[src, HI]
    ef[dst, SC] = ef[src, SC]
    ei[dst] = ei[src]
    ec[dst] = ec[src]


@numba.njit(cache=True)
def _page_move(meta, pg, ef, ei, ec, p, cap):
    """Move page p, a root page (no parent entry holds its block start), to a fresh pool block
    of ``cap`` entry rows (the old block becomes garbage)."""
    st = pg[p, START]
    ns = meta[M_E_HW] + 1
    for t in range(-1, pg[p, NENT]):
        _copy_row(ef, ei, ec, st + t, ns + t)
    meta[M_E_HW] = ns + cap
    meta[M_E_LIVE] += cap - pg[p, CAP]
    pg[p, START] = ns
    pg[p, CAP] = cap


@numba.njit(cache=True)
def _relink(meta, pg, ec, to_start):
    """Rewrite every internal entry's child link: to the child's page id (to_start False: read
    from the child's header row), or back to its block start (to_start True). Internal entries
    are the live pages' entries with a link (a leaf entry's is -1)."""
    for p in range(meta[M_PG_HW]):
        if pg[p, CAP] < 0:
            continue
        st = pg[p, START]
        for e in range(st, st + pg[p, NENT]):
            if ec[e] < 0:
                continue
            ec[e] = pg[np.int64(ec[e]), START] if to_start else _child(ec, e)


@numba.njit(cache=True)
def _compact(meta, nd_i, pg, ef, ei, ec):
    """Slide every live page's block down to the start of the pool, in block order (internal
    entries then get their children's new block starts): afterwards the pool holds no garbage
    (``meta[M_E_HW] == meta[M_E_LIVE]``)."""
    _relink(meta, pg, ec, False)
    hw = meta[M_PG_HW]
    live = np.empty(hw, np.int64)
    k = 0
    for p in range(hw):
        if pg[p, CAP] >= 0:
            live[k] = p
            k += 1
    key = np.empty(k, np.float64)
    for t in range(k):
        key[t] = -float(pg[live[t], START])     # the total order then sorts by start
    pos = 0
    for t in _sort_total(key, live[:k]):
        p = live[t]
        st = pg[p, START]
        if st != pos + 1:
            for r in range(-1, pg[p, NENT]):
                _copy_row(ef, ei, ec, st + r, pos + 1 + r)
            pg[p, START] = pos + 1
        pos += pg[p, CAP] + 1
    meta[M_E_HW] = pos
    _relink(meta, pg, ec, True)
    for v in range(meta[M_ND_HW]):
        if nd_i[v, SIZE] >= 0 and nd_i[v, ROOT] >= 0:
            nd_i[v, RST] = pg[nd_i[v, ROOT], START]
    meta[M_COMPACTIONS] += 1


@numba.njit(cache=True)
def _room(meta, nd_i, pg, ef, ei, ec, nodes, pages, entries):
    """True when ``nodes`` node rows, ``pages`` page rows and ``entries`` pool rows can be
    allocated, compacting the pool when that suffices and at least a quarter of it is garbage.
    False: meta[M_NEED_*] say what the Python layer must add."""
    ok = True
    if nd_i.shape[0] - meta[M_ND_HW] + meta[M_ND_NFREE] < nodes:
        meta[M_NEED_ND] = nodes
        ok = False
    if pg.shape[0] - meta[M_PG_HW] + meta[M_PG_NFREE] < pages:
        meta[M_NEED_PG] = pages
        ok = False
    cap = ef.shape[0]
    if cap - meta[M_E_HW] < entries:
        if cap - meta[M_E_LIVE] >= entries and 4 * (meta[M_E_HW] - meta[M_E_LIVE]) >= cap:
            _compact(meta, nd_i, pg, ef, ei, ec)
        else:
            meta[M_NEED_E] = entries
            ok = False
    return ok


# ----------------------------------------------------------------------------- staircases

@numba.njit(cache=True)
def _st_alloc(meta, sx):
    """A staircase row (the caller made room); its id."""
    r = meta[M_ST_FREE]
    if r >= 0:
        meta[M_ST_FREE] = sx[r, 0, 0]
        meta[M_ST_NFREE] -= 1
    else:
        r = meta[M_ST_HW]
        meta[M_ST_HW] = r + 1
    return r


@numba.njit(cache=True)
def _st_free(meta, sx, r):
    """Put staircase row r on the free list (chained through its first item)."""
    sx[r, 0, 0] = meta[M_ST_FREE]
    meta[M_ST_FREE] = r
    meta[M_ST_NFREE] += 1


@numba.njit(cache=True, inline="always")
def _st_records():
    """Empty record search of :func:`_st_push`: per side, thresholds, scores, items (K_ST + 1
    each) and the number found."""
    return (np.empty((2, K_ST + 1), np.float64), np.empty((2, K_ST + 1), np.float64),
            np.empty((2, K_ST + 1), np.int64), np.zeros(2, np.int64))


@numba.njit(cache=True, inline="always")
def _st_push(acc_t, acc_s, acc_i, found, lo, hi, sc, it):
    """Feed the next interval of a node in the total order to the record search of
    :func:`_st_fill`: it is a record of side 0 when its lo is below every earlier one's, of
    side 1 when its hi is above. Returns True once both sides hold K_ST + 1 records."""
    for sd in range(2):
        x = lo if sd == 0 else -hi
        f = found[sd]
        if f <= K_ST and (f == 0 or x < acc_t[sd, f - 1]):
            acc_t[sd, f] = x
            acc_s[sd, f] = sc
            acc_i[sd, f] = it
            found[sd] = f + 1
    return found[0] > K_ST and found[1] > K_ST


@numba.njit(cache=True)
def _st_fill(sf, sx, r, acc_t, acc_s, acc_i, found):
    """Write the records found by :func:`_st_push` (best first, thresholds falling) into
    staircase row r, thresholds rising: the worst kept record is the floor (entry 0); with
    fewer records than entries, the first real one is repeated in front with threshold -inf."""
    for sd in range(2):
        f = found[sd]
        for j in range(K_ST + 1):
            a = K_ST - j                 # entry j holds the record a places from the best
            if a >= f:
                a = f - 1
                sf[r, sd, j] = -np.inf
            else:
                sf[r, sd, j] = acc_t[sd, a]
            sf[r, sd, K_ST + 1 + j] = acc_s[sd, a]
            sx[r, sd, j] = acc_i[sd, a]


@numba.njit(cache=True)
def _st_build(sf, sx, r, lo, hi, sc, it, run):
    """Staircase row r of the node whose intervals are ``run`` (indices, in the total order)."""
    acc_t, acc_s, acc_i, found = _st_records()
    for x in run:
        if _st_push(acc_t, acc_s, acc_i, found, lo[x], hi[x], sc[x], it[x]):
            break
    _st_fill(sf, sx, r, acc_t, acc_s, acc_i, found)


@numba.njit(cache=True)
def _st_scan(nd_i, ef, ei, ec, sf, sx, v):
    """Recompute node v's staircase from its leaves, read in the total order until both sides
    have all their records."""
    acc_t, acc_s, acc_i, found = _st_records()
    h = nd_i[v, HEIGHT]
    sst = np.empty(max(h, 1), np.int64)
    spo = np.zeros(max(h, 1), np.int64)
    t = 0
    sst[0] = nd_i[v, RST]
    done = False
    while t >= 0 and not done:
        st = sst[t]
        m = ei[st - 1]
        j = spo[t]
        if j >= m:
            t -= 1
            continue
        spo[t] = j + 1
        e = st + j
        if t == h - 1:
            done = _st_push(acc_t, acc_s, acc_i, found, ef[e, LO], ef[e, HI], ef[e, SC], ei[e])
        else:
            t += 1
            sst[t] = ec[e]
            spo[t] = 0
    _st_fill(sf, sx, nd_i[v, STR], acc_t, acc_s, acc_i, found)


@numba.njit(cache=True)
def _st_insert(sf, sx, r, lo, hi, sc, it):
    """Staircase row r after the node gains (lo, hi, sc, it): on each side, when the interval
    comes before the record that answers at its threshold, it enters there and the records it
    now answers for (threshold at least its own, coming after it) leave; a list grown past its
    entries drops entry 0 (the next one, whose key comes first, becomes the floor), one shrunk
    repeats its first entry in front. Every answer stays a bound on the node's best interval
    holding the query, and exact where it was."""
    n1 = K_ST + 1
    tt = np.empty(n1 + 1, np.float64)
    ts = np.empty(n1 + 1, np.float64)
    ti = np.empty(n1 + 1, np.int64)
    for sd in range(2):
        x = lo if sd == 0 else -hi
        p = 0
        for j in range(n1):
            if sf[r, sd, j] <= x:
                p = j
        if before(sf[r, sd, n1 + p], sx[r, sd, p], sc, it):
            continue
        m = 0
        placed = False
        for j in range(n1):
            tj = sf[r, sd, j]
            sj = sf[r, sd, n1 + j]
            ij = sx[r, sd, j]
            if tj >= x and not before(sj, ij, sc, it):
                continue
            if not placed and tj > x:
                tt[m] = x
                ts[m] = sc
                ti[m] = it
                m += 1
                placed = True
            tt[m] = tj
            ts[m] = sj
            ti[m] = ij
            m += 1
        if not placed:
            tt[m] = x
            ts[m] = sc
            ti[m] = it
            m += 1
        off = m - n1                     # > 0: drop entries in front; < 0: repeat the first
        for j in range(n1):
            a = j + off
            if a < 0:
                sf[r, sd, j] = -np.inf
                a = 0
            else:
                sf[r, sd, j] = tt[a]
            sf[r, sd, n1 + j] = ts[a]
            sx[r, sd, j] = ti[a]


@numba.njit(cache=True, inline="always")
def _st_holds(sx, r, it):
    """Whether item ``it`` is one of staircase row r's records."""
    for sd in range(2):
        for j in range(K_ST + 1):
            if sx[r, sd, j] == it:
                return True
    return False


# ----------------------------------------------------------------------------- item directory

@numba.njit(cache=True, inline="always")
def _home(item, h):
    """splitmix64 of the item, mapped onto the ``h`` slots (multiply-shift: any ``h`` below
    2**32, so the directory needs no power-of-two size): its first slot."""
    z = np.uint64(item) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return np.int64(((z >> np.uint64(32)) * np.uint64(h)) >> np.uint64(32))


@numba.njit(cache=True, inline="always")
def _after(s, h):
    """The slot after ``s`` in a directory of ``h`` slots (cyclically)."""
    s += 1
    return 0 if s == h else s


@numba.njit(cache=True)
def _dir_find(dk, dn, item):
    """Slot of ``item`` in the directory (dk keys, dn node or -1 = empty slot), or -1."""
    h = dk.shape[0]
    s = _home(item, h)
    while dn[s] >= 0:
        if dk[s] == item:
            return s
        s = _after(s, h)
    return -1


@numba.njit(cache=True)
def _dir_put(dk, ds, dn, item, score, node):
    """Set item -> (score, node), adding the item when absent."""
    h = dk.shape[0]
    s = _home(item, h)
    while dn[s] >= 0 and dk[s] != item:
        s = _after(s, h)
    dk[s] = item
    ds[s] = score
    dn[s] = node


@numba.njit(cache=True)
def _dir_remove(dk, ds, dn, s):
    """Empty slot s, shifting later entries of its probe run back (no tombstones)."""
    h = dk.shape[0]
    i = s
    j = s
    while True:
        j = _after(j, h)
        if dn[j] < 0:
            break
        if stays_in_probe_run(i, j, _home(dk[j], h)):
            continue
        dk[i] = dk[j]
        ds[i] = ds[j]
        dn[i] = dn[j]
        i = j
    dn[i] = -1


@numba.njit(cache=True)
def _dir_rehash(dk, ds, dn, nk, nds, ndn):
    """Copy every entry of the directory (dk, ds, dn) into the empty one (nk, nds, ndn)."""
    for s in range(dk.shape[0]):
        if dn[s] >= 0:
            _dir_put(nk, nds, ndn, dk[s], ds[s], np.int64(dn[s]))


@numba.njit(cache=True)
def _dir_first(dk, dn, items, present):
    """Position of the first of ``items`` (int64[m]) that is in the directory (present=True) or
    missing from it (present=False); -1 when none."""
    for t in range(items.shape[0]):
        if (_dir_find(dk, dn, items[t]) >= 0) == present:
            return t
    return -1


def _dir_capacity(n: int) -> int:
    """Directory slots for n items: load at most _DIR_LOAD, at least 8."""
    return max(8, math.ceil(n / _DIR_LOAD))


# ----------------------------------------------------------------------------- R-tree pages

@numba.njit(cache=True)
def _count_before(ef, ei, st, n, sc, it):
    """Number of the n entries from pool row st (in the total order) that come before (sc, it)."""
    a = 0
    z = n
    while a < z:
        mid = (a + z) >> 1
        if before(ef[st + mid, SC], ei[st + mid], sc, it):
            a = mid + 1
        else:
            z = mid
    return a


@numba.njit(cache=True)
def _set_entry(pg, ef, ei, ec, e, c):
    """Make pool row e the parent entry of page c: its extent, its first key, the child id."""
    st = pg[c, START]
    mn = np.inf
    mx = -np.inf
    for t in range(st, st + pg[c, NENT]):
        if ef[t, LO] < mn:
            mn = ef[t, LO]
        if ef[t, HI] > mx:
            mx = ef[t, HI]
    ef[e, LO] = mn
    ef[e, HI] = mx
    ef[e, SC] = ef[st, SC]
    ei[e] = ei[st]
    ec[e] = st


@numba.njit(cache=True)
def _page_insert(meta, pg, ef, ei, ec, p, pos, lo, hi, sc, it, ch, b, tf, ti, tc):
    """Insert entry (lo, hi, sc, it, ch) at position pos of page p, a page of at most b
    entries. A full root leaf below b rows doubles its block; a page full at b rows splits (left
    keeps ceil((b+1)/2) entries): returns the new right page, else -1. tf/ti/tc: scratch rows
    (>= b+1)."""
    n = pg[p, NENT]
    cap = pg[p, CAP]
    if n == cap and cap < b:
        _page_move(meta, pg, ef, ei, ec, p, min(b, 2 * cap))
        cap = pg[p, CAP]
    st = pg[p, START]
    if n < cap:
        for t in range(st + n, st + pos, -1):
            _copy_row(ef, ei, ec, t - 1, t)
        e = st + pos
        ef[e, LO] = lo
        ef[e, HI] = hi
        ef[e, SC] = sc
        ei[e] = it
        ec[e] = ch
        _set_n(pg, ei, p, n + 1)
        return -1
    for t in range(n + 1):
        if t == pos:
            tf[t, LO] = lo
            tf[t, HI] = hi
            tf[t, SC] = sc
            ti[t] = it
            tc[t] = ch
        else:
            s = st + (t if t < pos else t - 1)
            tf[t, LO] = ef[s, LO]
            tf[t, HI] = ef[s, HI]
            tf[t, SC] = ef[s, SC]
            ti[t] = ei[s]
            tc[t] = ec[s]
    nl = (n + 2) // 2
    q = _page_alloc(meta, pg, ei, ec, b)
    qs = pg[q, START]
    for t in range(n + 1):
        e = st + t if t < nl else qs + t - nl
        ef[e, LO] = tf[t, LO]
        ef[e, HI] = tf[t, HI]
        ef[e, SC] = tf[t, SC]
        ei[e] = ti[t]
        ec[e] = tc[t]
    _set_n(pg, ei, p, nl)
    _set_n(pg, ei, q, n + 1 - nl)
    return q


@numba.njit(cache=True)
def _remove_entry(pg, ef, ei, ec, p, pos):
    """Remove entry pos of page p (shift the rest left)."""
    st = pg[p, START]
    n = pg[p, NENT]
    for t in range(st + pos, st + n - 1):
        _copy_row(ef, ei, ec, t + 1, t)
    _set_n(pg, ei, p, n - 1)


@numba.njit(cache=True)
def _node_extent(nd_f, nd_i, pg, ef, v):
    """Recompute node v's extent [min lo, max hi] from its root page."""
    mn = np.inf
    mx = -np.inf
    r = nd_i[v, ROOT]
    if r >= 0:
        st = pg[r, START]
        for t in range(st, st + pg[r, NENT]):
            if ef[t, LO] < mn:
                mn = ef[t, LO]
            if ef[t, HI] > mx:
                mx = ef[t, HI]
    nd_f[v, MINLO] = mn
    nd_f[v, MAXHI] = mx


@numba.njit(cache=True)
def _root_copy(nd_f, nd_i, pg, ef, ei, v):
    """Node v's copies of its root page: the block start and the first key (RST = -1: no
    page)."""
    r = nd_i[v, ROOT]
    if r < 0:
        nd_i[v, RST] = -1
        return
    st = pg[r, START]
    nd_i[v, RST] = st
    nd_f[v, FKS] = ef[st, SC]
    nd_i[v, FKI] = ei[st]


@numba.njit(cache=True, inline="always")
def _fanout(b):
    """Most entries of an internal page: b, but 3 for b = 2 (pages of at most 2 children, at
    least 1, could not keep a B-tree of logarithmic height under updates)."""
    return max(b, 3)


@numba.njit(cache=True)
def _bt_insert(meta, nd_f, nd_i, pg, ef, ei, ec, v, lo, hi, sc, it, b, tf, ti, tc):
    """Insert interval (lo, hi, sc, it) into node v's R-tree: descend by key, widening extents
    and lowering first keys on the way; split full pages on the way up (the caller made room for
    HEIGHT + 1 pages and (HEIGHT + 2) * _fanout(b) pool rows)."""
    bi = _fanout(b)
    h = nd_i[v, HEIGHT]
    if h == 0:
        p = _page_alloc(meta, pg, ei, ec, np.int64(1))
        e = pg[p, START]
        ef[e, LO] = lo
        ef[e, HI] = hi
        ef[e, SC] = sc
        ei[e] = it
        ec[e] = -1
        _set_n(pg, ei, p, 1)
        nd_i[v, ROOT] = p
        nd_i[v, HEIGHT] = 1
        if meta[M_HMAX] < 1:
            meta[M_HMAX] = 1
    else:
        ppg = np.empty(h, np.int64)
        pj = np.empty(h, np.int64)
        p = nd_i[v, ROOT]
        for lvl in range(h - 1):
            st = pg[p, START]
            j = _count_before(ef, ei, st, pg[p, NENT], sc, it) - 1
            if j < 0:
                j = 0
            e = st + j
            if lo < ef[e, LO]:
                ef[e, LO] = lo
            if hi > ef[e, HI]:
                ef[e, HI] = hi
            if before(sc, it, ef[e, SC], ei[e]):
                ef[e, SC] = sc
                ei[e] = it
            ppg[lvl] = p
            pj[lvl] = j
            p = _child(ec, e)
        pos = _count_before(ef, ei, pg[p, START], pg[p, NENT], sc, it)
        q = _page_insert(meta, pg, ef, ei, ec, p, pos, lo, hi, sc, it, np.int64(-1), b, tf, ti,
                         tc)
        lvl = h - 1
        while q >= 0:
            if lvl == 0:
                r = _page_alloc(meta, pg, ei, ec, bi)
                rs = pg[r, START]
                _set_entry(pg, ef, ei, ec, rs, p)
                _set_entry(pg, ef, ei, ec, rs + 1, q)
                _set_n(pg, ei, r, 2)
                nd_i[v, ROOT] = r
                nd_i[v, HEIGHT] = h + 1
                if meta[M_HMAX] < h + 1:
                    meta[M_HMAX] = h + 1
                break
            par = ppg[lvl - 1]
            j = pj[lvl - 1]
            _set_entry(pg, ef, ei, ec, pg[par, START] + j, p)
            qs = pg[q, START]
            mn = np.inf
            mx = -np.inf
            for t in range(qs, qs + pg[q, NENT]):
                mn = min(mn, ef[t, LO])
                mx = max(mx, ef[t, HI])
            q = _page_insert(meta, pg, ef, ei, ec, par, j + 1, mn, mx, ef[qs, SC], ei[qs], qs,
                             bi, tf, ti, tc)
            p = par
            lvl -= 1
    nd_i[v, COUNT] += 1
    if lo < nd_f[v, MINLO]:
        nd_f[v, MINLO] = lo
    if hi > nd_f[v, MAXHI]:
        nd_f[v, MAXHI] = hi
    _root_copy(nd_f, nd_i, pg, ef, ei, v)


@numba.njit(cache=True)
def _bt_delete(meta, nd_f, nd_i, pg, ef, ei, ec, v, sc, it, b, tf, ti, tc):
    """Remove key (sc, it) from node v's R-tree; on the way up, a page below half its most
    entries (b for leaves, _fanout(b) above) merges into a sibling when both fit in one page and
    evens out with it otherwise, and every parent entry gets its child's exact extent and first
    key. A root with one child is replaced by it. The caller made room for b pool rows (a root
    leaf at a quarter of its block moves to half the block)."""
    h = nd_i[v, HEIGHT]
    ppg = np.empty(h, np.int64)
    pj = np.empty(h, np.int64)
    p = nd_i[v, ROOT]
    for lvl in range(h - 1):
        st = pg[p, START]
        n = pg[p, NENT]
        j = _count_before(ef, ei, st, n, sc, it)
        if j == n or ei[st + j] != it:
            j -= 1
        ppg[lvl] = p
        pj[lvl] = j
        p = _child(ec, st + j)
    ppg[h - 1] = p
    st = pg[p, START]
    pos = _count_before(ef, ei, st, pg[p, NENT], sc, it)
    if pos >= pg[p, NENT] or ei[st + pos] != it:
        raise AssertionError("ir-tree: item not where the directory says")
    _remove_entry(pg, ef, ei, ec, p, pos)
    for lvl in range(h - 1, 0, -1):
        p = ppg[lvl]
        par = ppg[lvl - 1]
        j = pj[lvl - 1]
        ps = pg[par, START]
        n = pg[p, NENT]
        most = b if lvl == h - 1 else _fanout(b)
        if n >= (most + 1) // 2:
            _set_entry(pg, ef, ei, ec, ps + j, p)
        else:                                         # par has >= 2 entries: p has a sibling
            jl = j - 1 if j > 0 else j
            lp = _child(ec, ps + jl)
            rp = _child(ec, ps + jl + 1)
            nl = pg[lp, NENT]
            nr = pg[rp, NENT]
            ls = pg[lp, START]
            rs = pg[rp, START]
            tot = nl + nr
            if tot <= most:                           # merge rp into lp
                for t in range(nr):
                    _copy_row(ef, ei, ec, rs + t, ls + nl + t)
                _set_n(pg, ei, lp, tot)
                _page_free(meta, pg, rp)
                _set_entry(pg, ef, ei, ec, ps + jl, lp)
                _remove_entry(pg, ef, ei, ec, par, jl + 1)
            else:                                     # even out: both keep >= half
                for t in range(tot):
                    s = ls + t if t < nl else rs + t - nl
                    tf[t, LO] = ef[s, LO]
                    tf[t, HI] = ef[s, HI]
                    tf[t, SC] = ef[s, SC]
                    ti[t] = ei[s]
                    tc[t] = ec[s]
                kl = tot - tot // 2
                for t in range(tot):
                    e = ls + t if t < kl else rs + t - kl
                    ef[e, LO] = tf[t, LO]
                    ef[e, HI] = tf[t, HI]
                    ef[e, SC] = tf[t, SC]
                    ei[e] = ti[t]
                    ec[e] = tc[t]
                _set_n(pg, ei, lp, kl)
                _set_n(pg, ei, rp, tot - kl)
                _set_entry(pg, ef, ei, ec, ps + jl, lp)
                _set_entry(pg, ef, ei, ec, ps + jl + 1, rp)
    r = ppg[0]
    while nd_i[v, HEIGHT] > 1 and pg[r, NENT] == 1:
        c = _child(ec, pg[r, START])
        _page_free(meta, pg, r)
        r = c
        nd_i[v, ROOT] = r
        nd_i[v, HEIGHT] -= 1
    n = pg[r, NENT]
    if n == 0:
        _page_free(meta, pg, r)
        nd_i[v, ROOT] = -1
        nd_i[v, HEIGHT] = 0
    elif nd_i[v, HEIGHT] == 1 and 4 * n <= pg[r, CAP] and pg[r, CAP] > 1:
        _page_move(meta, pg, ef, ei, ec, r, 2 * n)
    nd_i[v, COUNT] -= 1
    _node_extent(nd_f, nd_i, pg, ef, v)
    _root_copy(nd_f, nd_i, pg, ef, ei, v)


@numba.njit(cache=True)
def _bt_bulk(meta, nd_f, nd_i, pg, ef, ei, ec, v, lo, hi, sc, it, run, b):
    """Pack node v's R-tree from the intervals ``run`` (>= 1 indices into lo/hi/sc/it, in the
    total order): one leaf of exactly len(run) rows when it fits in b, else ceil(k/b) leaves of b
    rows filled evenly, and levels above packed the same way with _fanout(b) (every page then
    holds at least half its most entries)."""
    k = run.shape[0]
    mn = np.inf
    mx = -np.inf
    for t in range(k):
        x = run[t]
        mn = min(mn, lo[x])
        mx = max(mx, hi[x])
    nd_f[v, MINLO] = mn
    nd_f[v, MAXHI] = mx
    nd_i[v, COUNT] = k
    m = (k + b - 1) // b
    level = np.empty(m, np.int64)
    base = k // m
    extra = k % m
    t = 0
    for i in range(m):
        c = base + (1 if i < extra else 0)
        p = _page_alloc(meta, pg, ei, ec, c if m == 1 else b)
        st = pg[p, START]
        for r in range(c):
            x = run[t + r]
            ef[st + r, LO] = lo[x]
            ef[st + r, HI] = hi[x]
            ef[st + r, SC] = sc[x]
            ei[st + r] = it[x]
            ec[st + r] = -1
        _set_n(pg, ei, p, c)
        t += c
        level[i] = p
    h = 1
    bi = _fanout(b)
    while m > 1:
        mm = (m + bi - 1) // bi
        up = np.empty(mm, np.int64)
        base = m // mm
        extra = m % mm
        t = 0
        for i in range(mm):
            c = base + (1 if i < extra else 0)
            p = _page_alloc(meta, pg, ei, ec, bi)
            st = pg[p, START]
            for r in range(c):
                _set_entry(pg, ef, ei, ec, st + r, level[t + r])
            _set_n(pg, ei, p, c)
            t += c
            up[i] = p
        level = up
        m = mm
        h += 1
    nd_i[v, ROOT] = level[0]
    nd_i[v, HEIGHT] = h
    if meta[M_HMAX] < h:
        meta[M_HMAX] = h
    _root_copy(nd_f, nd_i, pg, ef, ei, v)


@numba.njit(cache=True)
def _walk_pages(meta, nd_i, pg, ef, ei, ec, v, lo, hi, sc, it, k, free):
    """Visit node v's R-tree pages: copy its intervals, in the total order, to lo/hi/sc/it from
    position k (when free is False), or free every page (when free is True). Returns (k after,
    pages, pool rows of those pages)."""
    h = nd_i[v, HEIGHT]
    npg = 0
    rows = 0
    if h == 0:
        return k, npg, rows
    spage = np.empty(h, np.int64)
    spos = np.empty(h, np.int64)
    spage[0] = nd_i[v, ROOT]
    spos[0] = 0
    npg += 1
    rows += pg[spage[0], CAP] + 1
    t = 0
    while t >= 0:
        p = spage[t]
        st = pg[p, START]
        if t == h - 1:
            if not free:
                for e in range(st, st + pg[p, NENT]):
                    lo[k] = ef[e, LO]
                    hi[k] = ef[e, HI]
                    sc[k] = ef[e, SC]
                    it[k] = ei[e]
                    k += 1
            else:
                _page_free(meta, pg, p)
            t -= 1
            continue
        j = spos[t]
        if j < pg[p, NENT]:
            spos[t] = j + 1
            c = _child(ec, st + j)
            t += 1
            spage[t] = c
            spos[t] = 0
            npg += 1
            rows += pg[c, CAP] + 1
        else:
            if free:
                _page_free(meta, pg, p)
            t -= 1
    return k, npg, rows


# ----------------------------------------------------------------------------- building

@numba.njit(cache=True)
def _sort_total(sc, it):
    """Permutation of (sc, it) (float64[n], int64[n], distinct pairs) into the total order
    (score desc, item asc): bottom-up merge sort."""
    n = sc.shape[0]
    a = np.arange(n)
    tmp = np.empty(n, np.int64)
    w = 1
    while w < n:
        for s0 in range(0, n, 2 * w):
            m = min(s0 + w, n)
            z = min(s0 + 2 * w, n)
            i = s0
            j = m
            k = s0
            while i < m and j < z:
                if before(sc[a[j]], it[a[j]], sc[a[i]], it[a[i]]):
                    tmp[k] = a[j]
                    j += 1
                else:
                    tmp[k] = a[i]
                    i += 1
                k += 1
            while i < m:
                tmp[k] = a[i]
                i += 1
                k += 1
            while j < z:
                tmp[k] = a[j]
                j += 1
                k += 1
        a, tmp = tmp, a
        w *= 2
    return a


@numba.njit(cache=True)
def _kth(a, n, k):
    """The k-th smallest (0-based) of a[:n] (float64, no NaN), by quickselect; reorders a."""
    lft = 0
    rgt = n - 1
    while lft < rgt:
        x = a[lft]
        y = a[(lft + rgt) >> 1]
        z = a[rgt]
        pivot = max(min(x, y), min(max(x, y), z))
        i = lft
        j = rgt
        while i <= j:
            while a[i] < pivot:
                i += 1
            while a[j] > pivot:
                j -= 1
            if i <= j:
                x = a[i]
                a[i] = a[j]
                a[j] = x
                i += 1
                j -= 1
        if k <= j:
            rgt = j
        elif k >= i:
            lft = i
        else:
            return a[k]
    return a[k]


@numba.njit(cache=True)
def _plan(lo, hi, order):
    """Shape of a fresh interval tree over the intervals ``order`` (int64[n], in the total
    order). Each node takes the lower median of its subtree's 2k endpoints, so a child holds at
    most k/2 intervals. Returns ``perm`` (``order`` regrouped so that each node's intervals are
    one run, still in the total order) and per node (node 0 the root): med, left, right, start
    and count of its run in perm, size of its subtree."""
    n = order.shape[0]
    perm = order.copy()
    tmp = np.empty(n, np.int64)
    ends = np.empty(2 * n, np.float64)
    t_med = np.empty(n, np.float64)
    t_left = np.full(n, -1, np.int64)
    t_right = np.full(n, -1, np.int64)
    t_start = np.empty(n, np.int64)
    t_cnt = np.empty(n, np.int64)
    t_size = np.empty(n, np.int64)
    sa = np.empty(n + 1, np.int64)
    se = np.empty(n + 1, np.int64)
    sp = np.empty(n + 1, np.int64)
    ss = np.empty(n + 1, np.int64)
    top = 0
    nodes = 0
    if n > 0:
        sa[0] = 0
        se[0] = n
        sp[0] = -1
        ss[0] = 0
        top = 1
    while top > 0:
        top -= 1
        a = sa[top]
        z = se[top]
        k = z - a
        for t in range(k):
            x = perm[a + t]
            ends[2 * t] = lo[x]
            ends[2 * t + 1] = hi[x]
        med = _kth(ends, 2 * k, k - 1)
        nl = 0
        nn = 0
        for t in range(a, z):
            x = perm[t]
            if hi[x] < med:
                nl += 1
            elif lo[x] <= med:
                nn += 1
        il = 0
        im = nl
        ir = nl + nn
        for t in range(a, z):
            x = perm[t]
            if hi[x] < med:
                tmp[il] = x
                il += 1
            elif lo[x] <= med:
                tmp[im] = x
                im += 1
            else:
                tmp[ir] = x
                ir += 1
        for t in range(k):
            perm[a + t] = tmp[t]
        v = nodes
        nodes += 1
        t_med[v] = med
        t_start[v] = a + nl
        t_cnt[v] = nn
        t_size[v] = k
        if sp[top] >= 0:
            if ss[top] == LEFT:
                t_left[sp[top]] = v
            else:
                t_right[sp[top]] = v
        if nl > 0:
            sa[top] = a
            se[top] = a + nl
            sp[top] = v
            ss[top] = LEFT
            top += 1
        if a + nl + nn < z:
            sa[top] = a + nl + nn
            se[top] = z
            sp[top] = v
            ss[top] = RIGHT
            top += 1
    return (perm, t_med[:nodes], t_left[:nodes], t_right[:nodes], t_start[:nodes],
            t_cnt[:nodes], t_size[:nodes])


@numba.njit(cache=True)
def _plan_cost(t_cnt, b):
    """(pages, pool rows) that _bt_bulk takes for nodes of t_cnt (>= 1) intervals."""
    pages = 0
    rows = 0
    for v in range(t_cnt.shape[0]):
        k = t_cnt[v]
        if k <= b:
            pages += 1
            rows += k + 1
            continue
        m = (k + b - 1) // b
        pages += m
        rows += m * (b + 1)
        bi = _fanout(b)
        while m > 1:
            m = (m + bi - 1) // bi
            pages += m
            rows += m * (bi + 1)
    return pages, rows


@numba.njit(cache=True)
def _materialize(meta, nd_f, nd_i, pg, ef, ei, ec, dk, ds, dn, sf, sx, lo, hi, sc, it,
                 perm, t_med, t_left, t_right, t_start, t_cnt, t_size, b):
    """Allocate the planned nodes (see _plan), pack their R-trees and point the directory at
    them (the caller made room). Returns the id of the planned root (-1 for no node)."""
    nodes = t_med.shape[0]
    ids = np.empty(nodes, np.int64)
    for v in range(nodes):
        ids[v] = _node_alloc(meta, nd_f, nd_i, t_med[v])
    for v in range(nodes):
        u = ids[v]
        if t_left[v] >= 0:
            nd_i[u, LEFT] = ids[t_left[v]]
        if t_right[v] >= 0:
            nd_i[u, RIGHT] = ids[t_right[v]]
        nd_i[u, SIZE] = t_size[v]
        run = perm[t_start[v]: t_start[v] + t_cnt[v]]
        _bt_bulk(meta, nd_f, nd_i, pg, ef, ei, ec, u, lo, hi, sc, it, run, b)
        if t_cnt[v] >= ST_MIN * b:
            r = _st_alloc(meta, sx)
            nd_i[u, STR] = r
            _st_build(sf, sx, r, lo, hi, sc, it, run)
        for x in run:
            _dir_put(dk, ds, dn, it[x], sc[x], u)
    return ids[0] if nodes > 0 else -1


@numba.njit(cache=True)
def _collect(meta, nd_i, pg, ef, ei, ec, u, nodes):
    """Every interval of node u's subtree (arrays lo, hi, sc, it in node order) and its node ids
    (written to ``nodes``, which must hold them all). Returns (lo, hi, sc, it, #nodes, #pages,
    pool rows of those pages)."""
    s = nd_i[u, SIZE] if u >= 0 else 0
    lo = np.empty(s, np.float64)
    hi = np.empty(s, np.float64)
    sc = np.empty(s, np.float64)
    it = np.empty(s, np.int64)
    k = 0
    npg = 0
    rows = 0
    tail = 0
    if u >= 0:
        nodes[0] = u
        tail = 1
    head = 0
    while head < tail:
        v = nodes[head]
        head += 1
        for side in (LEFT, RIGHT):
            c = nd_i[v, side]
            if c >= 0:
                if tail >= nodes.shape[0]:
                    raise AssertionError("ir-tree: subtree has more nodes than bounded")
                nodes[tail] = c
                tail += 1
        k, a, r = _walk_pages(meta, nd_i, pg, ef, ei, ec, v, lo, hi, sc, it, np.int64(k),
                                np.bool_(False))
        npg += a
        rows += r
    if k != s:
        raise AssertionError("ir-tree: subtree size does not match its intervals")
    return lo, hi, sc, it, tail, npg, rows


@numba.njit(cache=True)
def _collect_all(meta, nd_i, pg, ef, ei, ec):
    """Every interval of the index: (lo, hi, sc, it)."""
    u = meta[M_ROOT]
    nodes = np.empty(max(1, meta[M_ND_HW]), np.int64)
    lo, hi, sc, it, _, _, _ = _collect(meta, nd_i, pg, ef, ei, ec, u, nodes)
    return lo, hi, sc, it


@numba.njit(cache=True)
def _depth_cap(n):
    """Path buffer length: the balance policy bounds the depth by log_{1/ALPHA} n (+1 while an
    insert has not yet been rebalanced)."""
    return int(math.log(n + 2.0) / math.log(ALPHA_DEN / ALPHA_NUM)) + 8


@numba.njit(cache=True)
def _rebuild(meta, nd_f, nd_i, pg, ef, ei, ec, dk, ds, dn, sf, sx, u, b):
    """Rebuild node u's subtree from its intervals with fresh medians (the balance policy).
    Returns False, changing nothing, when the tables lack room (meta[M_NEED_*] say how much)."""
    par = -1
    side = LEFT
    w = meta[M_ROOT]
    m = nd_f[u, MED]
    while w != u:
        par = w
        side = LEFT if m < nd_f[w, MED] else RIGHT
        w = nd_i[w, side]
    s = nd_i[u, SIZE]
    nodes = np.empty(2 * s + 2 * _depth_cap(meta[M_N]), np.int64)
    lo, hi, sc, it, nn, npg, rows = _collect(meta, nd_i, pg, ef, ei, ec, u, nodes)
    order = _sort_total(sc, it)
    perm, t_med, t_left, t_right, t_start, t_cnt, t_size = _plan(lo, hi, order)
    need_pg, need_e = _plan_cost(t_cnt, b)
    ok = True
    if nd_i.shape[0] - meta[M_ND_HW] + meta[M_ND_NFREE] + nn < t_med.shape[0]:
        meta[M_NEED_ND] = t_med.shape[0]
        ok = False
    if pg.shape[0] - meta[M_PG_HW] + meta[M_PG_NFREE] + npg < need_pg:
        meta[M_NEED_PG] = need_pg
        ok = False
    need_st = 0
    for v in range(t_cnt.shape[0]):
        need_st += np.int64(t_cnt[v] >= ST_MIN * b)
    held = 0
    for t in range(nn):
        held += np.int64(nd_i[nodes[t], STR] >= 0)
    if sx.shape[0] - meta[M_ST_HW] + meta[M_ST_NFREE] + held < need_st:
        meta[M_NEED_ST] = need_st
        ok = False
    cap = ef.shape[0]
    live = meta[M_E_LIVE] - rows
    compact = cap - meta[M_E_HW] < need_e
    if compact and (cap - live < need_e or 4 * (meta[M_E_HW] - live) < cap):
        meta[M_NEED_E] = need_e
        ok = False
    if not ok:
        return False
    for t in range(nn):
        v = nodes[t]
        _walk_pages(meta, nd_i, pg, ef, ei, ec, v, lo, hi, sc, it, np.int64(0),
                    np.bool_(True))
        _node_free(meta, nd_i, sx, v)
    if compact:
        _compact(meta, nd_i, pg, ef, ei, ec)
    r = _materialize(meta, nd_f, nd_i, pg, ef, ei, ec, dk, ds, dn, sf, sx, lo, hi, sc, it,
                     perm, t_med, t_left, t_right, t_start, t_cnt, t_size, b)
    if par < 0:
        meta[M_ROOT] = r
    else:
        nd_i[par, side] = r
    meta[M_REBUILDS] += 1
    meta[M_REBUILT] += s
    return True


# ----------------------------------------------------------------------------- updates

@numba.njit(cache=True)
def _scapegoat(nd_i, path, d):
    """The highest of path[:d] with a child holding more than ALPHA of its subtree, or -1."""
    for t in range(d):
        u = path[t]
        s = nd_i[u, SIZE]
        for side in (LEFT, RIGHT):
            c = nd_i[u, side]
            if c >= 0 and ALPHA_DEN * nd_i[c, SIZE] > ALPHA_NUM * s:
                return u
    return -1


@numba.njit(cache=True, inline="always")
def _new_median(lo, hi):
    """Median of a new leaf node for [lo, hi], a point of it: lo, but hi when lo = -inf, and 0
    for (-inf, inf)."""
    if lo > -np.inf:
        return lo
    if hi < np.inf:
        return hi
    return 0.0


@numba.njit(cache=True)
def _insert_one(meta, nd_f, nd_i, pg, ef, ei, ec, dk, ds, dn, sf, sx, lo, hi, sc, it, b, tf, ti, tc):
    """Insert one interval (absent item; the caller made room); returns the node to rebuild
    for the balance policy, or -1."""
    path = np.empty(_depth_cap(meta[M_N] + 1), np.int64)
    v = meta[M_ROOT]
    if v < 0:
        v = _node_alloc(meta, nd_f, nd_i, _new_median(lo, hi))
        meta[M_ROOT] = v
    d = 0
    while True:
        if d >= path.shape[0]:
            raise AssertionError("ir-tree: deeper than the balance policy allows")
        path[d] = v
        d += 1
        nd_i[v, SIZE] += 1
        m = nd_f[v, MED]
        if lo <= m and m <= hi:
            break
        side = LEFT if hi < m else RIGHT
        c = nd_i[v, side]
        if c < 0:
            c = _node_alloc(meta, nd_f, nd_i, _new_median(lo, hi))
            nd_i[v, side] = c
        v = c
    _bt_insert(meta, nd_f, nd_i, pg, ef, ei, ec, v, lo, hi, sc, it, b, tf, ti, tc)
    if nd_i[v, STR] >= 0:
        _st_insert(sf, sx, nd_i[v, STR], lo, hi, sc, it)
    _dir_put(dk, ds, dn, it, sc, v)
    meta[M_N] += 1
    return _scapegoat(nd_i, path, d)


@numba.njit(cache=True)
def _delete_one(meta, nd_f, nd_i, pg, ef, ei, ec, dk, ds, dn, sf, sx, it, b, tf, ti, tc):
    """Delete one present item; removes nodes whose subtree became empty; returns the node to
    rebuild for the balance policy, or -1."""
    slot = _dir_find(dk, dn, it)
    v = dn[slot]
    sc = ds[slot]
    path = np.empty(_depth_cap(meta[M_N]), np.int64)
    m = nd_f[v, MED]
    w = meta[M_ROOT]
    d = 0
    while True:
        if d >= path.shape[0]:
            raise AssertionError("ir-tree: deeper than the balance policy allows")
        path[d] = w
        d += 1
        nd_i[w, SIZE] -= 1
        if w == v:
            break
        w = nd_i[w, LEFT] if m < nd_f[w, MED] else nd_i[w, RIGHT]
    _bt_delete(meta, nd_f, nd_i, pg, ef, ei, ec, v, sc, it, b, tf, ti, tc)
    r = nd_i[v, STR]
    if r >= 0 and nd_i[v, COUNT] > 0 and _st_holds(sx, r, it):
        _st_scan(nd_i, ef, ei, ec, sf, sx, v)
    _dir_remove(dk, ds, dn, slot)
    meta[M_N] -= 1
    while d > 0 and nd_i[path[d - 1], SIZE] == 0:
        u = path[d - 1]
        if d == 1:
            meta[M_ROOT] = -1
        else:
            par = path[d - 2]
            if nd_i[par, LEFT] == u:
                nd_i[par, LEFT] = -1
            else:
                nd_i[par, RIGHT] = -1
        _node_free(meta, nd_i, sx, u)
        d -= 1
    return _scapegoat(nd_i, path, d)


@numba.njit(cache=True)
def _update_batch(op, meta, nd_f, nd_i, pg, ef, ei, ec, dk, ds, dn, sf, sx, lo, hi, sc, it, start,
                  pending, b):
    """One batch of updates from position start on: op INSERT inserts (lo, hi, sc, it) (absent,
    distinct items; the directory has room for all), op DELETE deletes the items ``it``
    (present, distinct; lo/hi/sc unused). First rebuilds node ``pending`` when >= 0. Returns
    (status, position, node): DONE; NEED_ROOM: grow the tables, call again from position;
    NEED_REBUILD: grow, call again from position with pending = node."""
    if pending >= 0 and not _rebuild(meta, nd_f, nd_i, pg, ef, ei, ec, dk, ds, dn, sf, sx, pending, b):
        return NEED_REBUILD, start, pending
    bi = _fanout(b)
    tf = np.empty((2 * bi + 2, 3), np.float64)
    ti = np.empty(2 * bi + 2, np.int64)
    tc = np.empty(2 * bi + 2, np.int32)
    for i in range(start, it.shape[0]):
        if op == INSERT:
            h = meta[M_HMAX]
            if not _room(meta, nd_i, pg, ef, ei, ec, np.int64(1), h + 2, (h + 2) * (bi + 1)):
                return NEED_ROOM, i, -1
            u = _insert_one(meta, nd_f, nd_i, pg, ef, ei, ec, dk, ds, dn, sf, sx,
                            lo[i], hi[i], sc[i], it[i], b, tf, ti, tc)
        else:
            if not _room(meta, nd_i, pg, ef, ei, ec, np.int64(0), np.int64(0), b + 1):
                return NEED_ROOM, i, -1
            u = _delete_one(meta, nd_f, nd_i, pg, ef, ei, ec, dk, ds, dn, sf, sx, it[i], b, tf, ti, tc)
        if u >= 0 and not _rebuild(meta, nd_f, nd_i, pg, ef, ei, ec, dk, ds, dn, sf, sx, u, b):
            return NEED_REBUILD, i + 1, u
    return DONE, it.shape[0], -1


# ----------------------------------------------------------------------------- queries

@numba.njit(cache=True)
def _path_shape(q, root, nd_f, nd_i):
    """What a cursor at q needs room for: (path nodes whose extent holds q, the most R-tree
    levels among them)."""
    npath = 0
    hmax = 1
    v = root
    while v >= 0:
        if nd_i[v, COUNT] > 0 and nd_f[v, MINLO] <= q and q <= nd_f[v, MAXHI]:
            npath += 1
            hmax = max(hmax, nd_i[v, HEIGHT])
        m = nd_f[v, MED]
        if q < m:
            v = nd_i[v, LEFT]
        elif q > m:
            v = nd_i[v, RIGHT]
        else:
            break
    return npath, hmax


@numba.njit(cache=True, inline="always")
def _queue_in(hs, hk, hp, a, s, it, slot):
    """Slot ``slot`` keyed (s, it) into the queue of :func:`_cursors` at position ``a`` or
    before: its ``a`` entries are sorted with the key first in the total order last, and those
    that come after the new key move up one."""
    while a > 0 and before(hs[a - 1], hk[a - 1], s, it):
        hs[a] = hs[a - 1]
        hk[a] = hk[a - 1]
        hp[a] = hp[a - 1]
        a -= 1
    hs[a] = s
    hk[a] = it
    hp[a] = slot


@numba.njit(cache=True, inline="always")
def _chunk(ef, st, j, m, q):
    """Bit ``u`` set when entry ``j + u`` (``u < 8``, ``j + u < m``) of the page at pool row
    ``st`` holds q: one vector compare (:func:`.base.stab8_rows`), rows past the pool tested one
    by one."""
    r = st + j
    if r + 8 <= ef.shape[0]:
        bits = stab8_rows(ef, r, q)
    else:
        bits = _U0
        for y in range(r, ef.shape[0]):
            if ef[y, LO] <= q and q <= ef[y, HI]:
                bits |= _U1 << np.uint64(y - r)
    if m - j < 8:
        bits &= (_U1 << np.uint64(m - j)) - _U1
    return bits


@numba.njit(cache=True, inline="always")
def _stabbed_from(ef, st, j, m, n, q):
    """``(j, m)``: from the chunk of entries ``j ..`` of a leaf page of ``n`` entries at pool
    row ``st`` whose bits are ``m`` (:func:`_chunk`), the first chunk holding a stabbed entry
    and its bits (``m == 0``: none is left)."""
    while m == _U0 and j + 8 < n:
        j += 8
        m = _chunk(ef, st, j, n, q)
    return j, m


@numba.njit(cache=True, inline="always")
def _sibling(q, ef, ei, ec, spage, spos, found, i, t, reported, counters):
    """Slot i's leaf (level t) is done: move the slot's stack onto the next leaf under the same
    parent page whose extent holds q (counted as a page entered). Returns that leaf's pool row
    start (-1, nothing moved, when the leaf is the root or the parent has none left), its entry
    count and its first chunk of stabbed entries as :func:`_stabbed_from` gives it.
    ``reported``: rows the done leaf gave."""
    if t > 0:
        pst = spage[i, t - 1]
        pm = ei[pst - 1]
        j = spos[i, t - 1]
        while j < pm:
            e = pst + j
            j += 1
            if ef[e, LO] <= q and q <= ef[e, HI]:
                if reported > 0 and not found[i, t]:
                    for u in range(t + 1):
                        found[i, u] = True
                st = np.int64(ec[e])
                spos[i, t - 1] = j
                spage[i, t] = st
                spos[i, t] = 0
                found[i, t] = False
                counters[NODES] += 1
                m = ei[st - 1]
                b, mask = _stabbed_from(ef, st, 0, _chunk(ef, st, 0, m, q), m, q)
                return st, m, b, mask
    return np.int64(-1), np.int64(0), np.int64(0), _U0


@numba.njit(cache=True, inline="always")
def _merge(q, end, pg, ef, ei, ec, heights, top, spage, spos, found, hs, hk, hp, n, c, i, counters, out_item,
           out_score):
    """The step of :func:`_steps` when the two first slots of the queue
    (``i = hp[n - 1]`` and ``hp[n - 2]``) both stand in a leaf page: their leaves' stabbed
    entries, found 8 at a time as bit masks (:func:`_chunk`), set bits taken in order, are
    merged in the total order (a switch from one slot to the other is one compare, not a pause
    and a resume through the queue); a slot whose leaf is done goes on in the next leaf under
    the same parent whose extent holds q (:func:`_sibling`: the next leaf of its DFS) while rows
    are still to be written, its entries compared with the other side's as they come (entering
    it on its first key, as a resume through the queue does, would stop the merge at most leaf
    ends), until a slot has no such leaf, ``end`` rows are written or the next row comes after
    the third slot's key. Both slots then stand at their next stabbed entry (or at the end of
    the leaf) and go back into the queue keyed by that entry (a slot whose leaf is done keeps
    the key of its last row: nothing left in its node comes first).
    Returns -1 (nothing done) when a leaf has no stabbed entry left; else the rows now written,
    the leaf entries passed added to ``counters``."""
    i2 = hp[n - 2]
    t = top[i]
    t2 = top[i2]
    if t2 != heights[i2] - 1:
        return -1
    sta = spage[i, t]
    stb = spage[i2, t2]
    ja = spos[i, t]
    jb = spos[i2, t2]
    ma_n = ei[sta - 1]
    mb_n = ei[stb - 1]
    if ja >= ma_n or jb >= mb_n:
        return -1
    # each leaf: the first entry of its mask, the mask
    ba, ma = _stabbed_from(ef, sta, ja, _chunk(ef, sta, ja, ma_n, q), ma_n, q)
    if ma == _U0:
        return -1
    bb, mb = _stabbed_from(ef, stb, jb, _chunk(ef, stb, jb, mb_n, q), mb_n, q)
    if mb == _U0:
        return -1
    if n >= 3:
        ts = hs[n - 3]
        tk = hk[n - 3]
    else:
        ts = -1.0                    # scores are >= 0: no key comes first
        tk = np.int64(0)
    ya = sta + ba + np.int64(trailing_zeros(ma))     # each slot's next stabbed entry and its key
    sa = ef[ya, SC]
    ia = ei[ya]
    yb = stb + bb + np.int64(trailing_zeros(mb))
    sb = ef[yb, SC]
    ib = ei[yb]
    la = ya                          # pool rows of the last entry each slot reported
    lb = yb
    ra = 0                           # rows each slot reported from its current leaf
    rb = 0
    passed = 0
    while c < end:
        if sa > sb or (sa == sb and ia < ib):
            if ts > sa or (ts == sa and tk < ia):
                break
            out_item[c] = ia
            out_score[c] = sa
            c += 1
            ra += 1
            la = ya
            ba, ma = _stabbed_from(ef, sta, ba, ma & (ma - _U1), ma_n, q)
            if ma == _U0:
                if c == end:
                    break
                nst, nn, ba, ma = _sibling(q, ef, ei, ec, spage, spos, found, i, t, ra, counters)
                if nst < 0:
                    break
                passed += ma_n - ja
                sta, ma_n, ja, ra = nst, nn, 0, 0
                if ma == _U0:
                    break
            ya = sta + ba + np.int64(trailing_zeros(ma))
            sa = ef[ya, SC]
            ia = ei[ya]
        else:
            if ts > sb or (ts == sb and tk < ib):
                break
            out_item[c] = ib
            out_score[c] = sb
            c += 1
            rb += 1
            lb = yb
            bb, mb = _stabbed_from(ef, stb, bb, mb & (mb - _U1), mb_n, q)
            if mb == _U0:
                if c == end:
                    break
                nst, nn, bb, mb = _sibling(q, ef, ei, ec, spage, spos, found, i2, t2, rb, counters)
                if nst < 0:
                    break
                passed += mb_n - jb
                stb, mb_n, jb, rb = nst, nn, 0, 0
                if mb == _U0:
                    break
            yb = stb + bb + np.int64(trailing_zeros(mb))
            sb = ef[yb, SC]
            ib = ei[yb]
    # where each slot stands now, and its key
    if ma != _U0:
        na = ba + np.int64(trailing_zeros(ma))
        ka = ef[sta + na, SC]
        ki = ei[sta + na]
    else:
        na = ma_n
        ka = ef[la, SC]              # the leaf is done: it reported a row
        ki = ei[la]
    if mb != _U0:
        nb = bb + np.int64(trailing_zeros(mb))
        kb = ef[stb + nb, SC]
        kbi = ei[stb + nb]
    else:
        nb = mb_n
        kb = ef[lb, SC]
        kbi = ei[lb]
    spos[i, t] = na
    spos[i2, t2] = nb
    if ra > 0 and not found[i, t]:
        for u in range(t + 1):
            found[i, u] = True
    if rb > 0 and not found[i2, t2]:
        for u in range(t2 + 1):
            found[i2, u] = True
    counters[ENTRIES] += passed + na - ja + nb - jb
    _queue_in(hs, hk, hp, n - 2, ka, ki, i)
    _queue_in(hs, hk, hp, n - 1, kb, kbi, i2)
    return c


@numba.njit(cache=True, inline="always")
def _steps(deep, queries, g, fresh, root, nd_f, nd_i, pg, ef, ei, ec, sf, sx, heights, top, spage, spos, found,
           hs, hk, hp, hn, counters, out_item, out_score, out_off):
    """Every cursor step in one kernel, written out flat (a call that passes the arrays costs
    more than most steps). For each query ``q = queries[x]``: when ``fresh``, start a cursor in
    the state arrays (below); then write its next ``g[x]`` stabbed intervals (fewer when none is
    left) to out_item/out_score from ``out_off[x]`` on, ``out_off[x + 1]`` set to where they end.
    Returns the rows written.

    State: one *slot* per path node whose extent holds q: the node's R-tree height heights[s],
    a left-first DFS stack spage/spos[s, :] (page, next position per level) with its current
    level top[s] (-1: exhausted) and found[s, level] (a stabbed interval reported below that
    page); the queue of live slots hp[:hn[0]] with their keys hs/hk, sorted so that the key
    first in the total order is last (a handful of slots: a sorted array beats a heap). A fresh
    slot's DFS has not entered its root page; its key is the page's first key. A step resumes
    the last slot of the queue while the key before it (the best of the others) does not come
    before the entry it looks at: internal entries by their first key (a child page whose
    extent holds q is entered), leaf entries stabbed by q by their own (reported). The DFS
    runs in the total order, so the entry where the slot pauses keys it (nothing after it in
    the node comes first), and the slot moves down the queue to its place.

    A step where the two first slots both stand in a leaf merges their leaves (:func:`_merge`):
    the answer alternates between the few nodes that hold the best stabbed intervals, and a
    switch of slots through the queue costs more than the rows between two switches. When
    ``deep`` (a constant of the two kernels below) a leaf is also read without a branch on
    whether an entry is stabbed (every entry's row is written at the next output position,
    which only a stabbed one advances), which costs more than the branch on short reads but
    less than its mispredictions on long ones, and an internal page is read the same way as
    far as its next entry whose extent holds q, and the slot pauses there
    (keyed by that entry) when it does not come first: the entries passed hold nothing stabbed,
    the pages entered are the same, and a slot pauses and resumes less often (a short read,
    which most often never comes back, pauses at the first entry that does not come first).
    """
    p = 0
    out_off[0] = 0
    n_nodes = 0                      # the counters, kept in registers while the kernel runs
    n_holes = 0
    n_entries = 0
    for x in range(queries.shape[0]):
        q = queries[x]
        if fresh:
            n = 0
            v = root
            while v >= 0:
                n_nodes += 1
                if nd_i[v, COUNT] > 0 and nd_f[v, MINLO] <= q and q <= nd_f[v, MAXHI]:
                    heights[n] = nd_i[v, HEIGHT]
                    top[n] = 0
                    spage[n, 0] = nd_i[v, RST]
                    spos[n, 0] = 0
                    found[n, 0] = False
                    n_nodes += 1
                    r = nd_i[v, STR]
                    if r >= 0:           # the staircase's record at q: the node's best key at q
                        sd = np.int64(q > nd_f[v, MED])
                        qq = q if sd == 0 else -q
                        a = 0
                        for j in range(1, K_ST + 1):
                            a += np.int64(sf[r, sd, j] <= qq)
                        s = sf[r, sd, K_ST + 1 + a]
                        it = sx[r, sd, a]
                    else:
                        s = nd_f[v, FKS]
                        it = nd_i[v, FKI]
                    _queue_in(hs, hk, hp, n, s, it, n)
                    n += 1
                m = nd_f[v, MED]
                if q < m:
                    v = nd_i[v, LEFT]
                elif q > m:
                    v = nd_i[v, RIGHT]
                else:
                    break
            hn[0] = n
        k = g[x]
        c = p
        end = p + k
        n = hn[0]
        while c < end and n > 0:
            if n == 1:
                ts = -1.0                # scores are >= 0: no key comes first
                tk = np.int64(0)
            else:
                ts = hs[n - 2]
                tk = hk[n - 2]
            i = hp[n - 1]
            h = heights[i]
            t = top[i]
            if n >= 2 and t == h - 1:
                c2 = _merge(q, end, pg, ef, ei, ec, heights, top, spage, spos, found, hs, hk, hp, n, c, i,
                            counters, out_item, out_score)
                if c2 >= 0:
                    c = c2
                    continue
            paused = False
            s = 0.0
            it = np.int64(0)
            while t >= 0:
                st = spage[i, t]
                m = ei[st - 1]
                j = spos[i, t]
                if t == h - 1 and deep:
                    c0 = c
                    while j < m:
                        e = st + j
                        s = ef[e, SC]
                        it = ei[e]
                        if c == end:
                            paused = True
                            break
                        stab = (ef[e, LO] <= q) & (q <= ef[e, HI])
                        if stab & ((ts > s) | ((ts == s) & (tk < it))):
                            paused = True
                            break
                        out_item[c] = it         # c < end: a row not stabbed is overwritten
                        out_score[c] = s
                        c += np.int64(stab)
                        j += 1
                    n_entries += j - spos[i, t]
                    if c > c0 and not found[i, t]:
                        for u in range(t + 1):
                            found[i, u] = True
                    if paused:
                        spos[i, t] = j
                        break
                elif t == h - 1:
                    while j < m:
                        e = st + j
                        if c == end:
                            s = ef[e, SC]
                            it = ei[e]
                            paused = True
                            break
                        if ef[e, LO] <= q and q <= ef[e, HI]:
                            s = ef[e, SC]
                            it = ei[e]
                            if ts > s or (ts == s and tk < it):
                                paused = True
                                break
                            out_item[c] = it
                            out_score[c] = s
                            c += 1
                            if not found[i, t]:
                                for u in range(t + 1):
                                    found[i, u] = True
                        j += 1
                        n_entries += 1
                    if paused:
                        spos[i, t] = j
                        break
                else:
                    down = False
                    while j < m:
                        e = st + j
                        if c == end or not deep:
                            s = ef[e, SC]        # the item only when it decides or keys a pause
                            if c == end or ts > s or (ts == s and tk < ei[e]):
                                it = ei[e]
                                paused = True
                                break
                        j += 1
                        if ef[e, LO] <= q and q <= ef[e, HI]:
                            if deep:
                                s = ef[e, SC]
                                it = ei[e]
                                if ts > s or (ts == s and tk < it):
                                    j -= 1
                                    paused = True
                                    break
                            spos[i, t] = j
                            t += 1
                            spage[i, t] = ec[e]
                            spos[i, t] = 0
                            found[i, t] = False
                            n_nodes += 1
                            down = True
                            break
                    if paused:
                        spos[i, t] = j
                        break
                    if down:
                        continue
                if not found[i, t]:          # by Lemma 3.1 never: a page entered holds one
                    n_holes += 1
                t -= 1
            top[i] = t
            if paused:
                _queue_in(hs, hk, hp, n - 1, s, it, i)
            else:
                n -= 1
        hn[0] = n
        p = c
        out_off[x + 1] = p
    counters[NODES] += n_nodes
    counters[HOLES] += n_holes
    counters[ENTRIES] += n_entries
    return p


@numba.njit(cache=True, _nrt=False)
def _cursors(queries, g, fresh, root, nd_f, nd_i, pg, ef, ei, ec, sf, sx, heights, top, spage, spos, found,
             hs, hk, hp, hn, counters, out_item, out_score, out_off):
    """:func:`_steps` for reads of up to ``DEEP`` rows a query (compiled without reference
    counting: it allocates nothing, and an inlined call would otherwise count references to
    every array it is passed)."""
    return _steps(False, queries, g, fresh, root, nd_f, nd_i, pg, ef, ei, ec, sf, sx, heights, top, spage, spos, found,
                  hs, hk, hp, hn, counters, out_item, out_score, out_off)


@numba.njit(cache=True, _nrt=False)
def _cursors_deep(queries, g, fresh, root, nd_f, nd_i, pg, ef, ei, ec, sf, sx, heights, top, spage, spos, found,
                  hs, hk, hp, hn, counters, out_item, out_score, out_off):
    """:func:`_steps` for deeper reads: leaves outside the merge, and internal pages as far as
    their next entry holding q, read without a branch per entry."""
    return _steps(True, queries, g, fresh, root, nd_f, nd_i, pg, ef, ei, ec, sf, sx, heights, top, spage, spos, found,
                  hs, hk, hp, hn, counters, out_item, out_score, out_off)


def _kernel(most: int):
    """The cursor kernel for reads of at most ``most`` rows a query."""
    return _cursors_deep if most > DEEP else _cursors


def _state(npath: int, hmax: int) -> tuple:
    """Empty cursor state for ``npath`` slots of R-trees of at most ``hmax`` levels (see
    :func:`_cursors`): heights, top, spage, spos, found, hs, hk, hp, hn, counters."""
    npath = max(npath, 1)
    hmax = max(hmax, 1)
    return (np.empty(npath, np.int64), np.zeros(npath, np.int64), np.empty((npath, hmax), np.int64),
            np.zeros((npath, hmax), np.int64), np.zeros((npath, hmax), np.bool_), np.empty(npath, np.float64),
            np.empty(npath, np.int64), np.empty(npath, np.int64), np.zeros(1, np.int64),
            np.zeros(3, np.int64))


_NO_ROWS_I = np.empty(0, np.int64)
_NO_ROWS_F = np.empty(0, np.float64)
_ZERO = np.zeros(1, np.int64)


# ----------------------------------------------------------------------------- Python layer

class IRTreeCursor(Cursor):
    """Resumable top-k stabbing query over an :class:`IRTreeIndex` (valid until the index
    changes)."""

    def __init__(self, index: "IRTreeIndex", q: float):
        self._index = index
        self._version = index._version
        self._q = np.array([q], np.float64)
        root = index._meta[M_ROOT]
        self._state = _state(*_path_shape(q, root, index._nd_f, index._nd_i))
        self.counters = self._state[-1]
        self._tree = (root, index._nd_f, index._nd_i, index._pg, index._ef, index._ei, index._ec, index._sf,
                      index._sx)
        _cursors(self._q, _ZERO, True, *self._tree, *self._state, _NO_ROWS_I, _NO_ROWS_F, np.zeros(2, np.int64))
        self._most = len(index)       # no call returns more: bounds the output buffers

    def next(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        if self._index._version != self._version:
            raise RuntimeError("ir-tree cursor used after its index changed")
        n = max(0, min(int(n), self._most))
        items = np.empty(n, np.int64)
        scores = np.empty(n, np.float64)
        if n == 0 or self._state[8][0] == 0:
            return items[:0], scores[:0]
        c = _kernel(n)(self._q, np.array([n], np.int64), False, *self._tree, *self._state, items, scores,
                     np.zeros(2, np.int64))
        return items[:c], scores[:c]


class IRTreeIndex(IntervalIndex):
    """The IR-tree of paper §3.1, fully dynamic (module docstring: layout, costs, balance
    policy). ``b`` is the R-tree branching factor (>= 2)."""

    name = "ir-tree"
    dynamic = True

    def __init__(self, lo, hi, score, item, *, b: int = 50):
        b = int(b)
        if b < 2:
            raise ValueError("ir-tree needs b >= 2")
        self.b = b
        self._version = 0
        lo, hi, score, item = check_intervals(lo, hi, score, item)
        _check_distinct(item, ValueError)
        self._build(lo, hi, score, item)

    # -- building

    def _build(self, lo, hi, sc, it) -> None:
        """Fresh index over the given (validated) intervals, every array at its exact size."""
        n = len(lo)
        perm, t_med, t_left, t_right, t_start, t_cnt, t_size = _plan(lo, hi, _sort_total(sc, it))
        pages, rows = _plan_cost(t_cnt, self.b)
        if rows > MAX_ROWS:
            raise OverflowError(f"ir-tree: {rows} pool rows, more than its int32 child links reach")
        nodes = len(t_med)
        self._nd_f = np.empty((nodes, 4), np.float64)
        self._nd_i = np.empty((nodes, N_I), np.int64)
        stairs = int((t_cnt >= ST_MIN * self.b).sum())
        self._sf = np.empty((stairs, 2, 2 * K_ST + 2), np.float64)
        self._sx = np.empty((stairs, 2, K_ST + 1), np.int64)
        self._pg = np.empty((pages, 3), np.int64)
        self._ef = np.empty((rows, 3), np.float64)
        self._ei = np.empty(rows, np.int64)
        self._ec = np.empty(rows, np.int32)
        h = _dir_capacity(n)
        self._dk = np.empty(h, np.int64)
        self._ds = np.empty(h, np.float64)
        self._dn = np.full(h, -1, np.int32)
        meta = np.zeros(N_META, np.int64)
        meta[M_ROOT] = meta[M_ND_FREE] = meta[M_PG_FREE] = meta[M_ST_FREE] = -1
        self._meta = meta
        meta[M_ROOT] = _materialize(meta, *self._state(), lo, hi, sc, it,
                                    perm, t_med, t_left, t_right, t_start, t_cnt, t_size, self.b)
        meta[M_N] = n
        self._n_peak = n             # most intervals since this build (the shrink rule)

    def _state(self):
        """The arrays every update kernel takes, in their order."""
        return (self._nd_f, self._nd_i, self._pg, self._ef, self._ei, self._ec,
                self._dk, self._ds, self._dn, self._sf, self._sx)

    # -- growth (kernels never grow an array)

    def _grow(self) -> None:
        """Grow the tables named by meta[M_NEED_*] (doubling at least)."""
        meta = self._meta
        need = meta[M_NEED_ND]
        n = len(self._nd_i)
        if need and n - meta[M_ND_HW] + meta[M_ND_NFREE] < need:
            m = max(2 * n, n + need, 16)
            self._nd_f = _grown(self._nd_f, m, meta[M_ND_HW])
            self._nd_i = _grown(self._nd_i, m, meta[M_ND_HW])
        need = meta[M_NEED_PG]
        n = len(self._pg)
        if need and n - meta[M_PG_HW] + meta[M_PG_NFREE] < need:
            self._pg = _grown(self._pg, max(2 * n, n + need, 16), meta[M_PG_HW])
        need = meta[M_NEED_E]
        n = len(self._ei)
        if need and n - meta[M_E_HW] < need:
            m = min(max(2 * n, meta[M_E_HW] + need, 64), MAX_ROWS)
            hw = meta[M_E_HW]
            if m - hw < need:
                raise OverflowError("ir-tree: the pool would pass the rows its int32 child links reach")
            self._ef = _grown(self._ef, m, hw)
            self._ei = _grown(self._ei, m, hw)
            self._ec = _grown(self._ec, m, hw)
        need = meta[M_NEED_ST]
        n = len(self._sx)
        if need and n - meta[M_ST_HW] + meta[M_ST_NFREE] < need:
            m = max(2 * n, n + need, 4)
            self._sf = _grown(self._sf, m, meta[M_ST_HW])
            self._sx = _grown(self._sx, m, meta[M_ST_HW])
        meta[M_NEED_ND] = meta[M_NEED_PG] = meta[M_NEED_E] = meta[M_NEED_ST] = 0

    def _resize_directory(self, n: int) -> None:
        """Directory sized for n items (rehashed into new arrays)."""
        h = _dir_capacity(n)
        if h == len(self._dk):
            return
        dk = np.empty(h, np.int64)
        ds = np.empty(h, np.float64)
        dn = np.full(h, -1, np.int32)
        _dir_rehash(self._dk, self._ds, self._dn, dk, ds, dn)
        self._dk, self._ds, self._dn = dk, ds, dn

    def _run(self, op, lo, hi, sc, it) -> None:
        """Drive _update_batch to the end, growing the tables where it asks."""
        start = 0
        pending = -1
        while True:
            status, start, u = _update_batch(op, self._meta, *self._state(), lo, hi, sc, it,
                                             start, pending, self.b)
            if status == DONE:
                return
            pending = u if status == NEED_REBUILD else -1
            self._grow()

    # -- the interface

    def insert(self, lo, hi, score, item) -> None:
        """Add intervals; ValueError (index unchanged) when an item is present or repeated."""
        lo, hi, score, item = check_intervals(lo, hi, score, item)
        if len(lo) == 0:
            return
        _check_distinct(item, ValueError)
        t = _dir_first(self._dk, self._dn, item, True)
        if t >= 0:
            raise ValueError(f"item {int(item[t])} is already in the index")
        self._version += 1
        n = int(self._meta[M_N])
        if _dir_capacity(n + len(lo)) > len(self._dk):
            self._resize_directory(max(n + len(lo), 2 * n))       # doubling: amortised O(1) per item
        self._run(INSERT, lo, hi, score, item)
        self._n_peak = max(self._n_peak, int(self._meta[M_N]))

    def delete(self, item) -> None:
        """Remove items; KeyError naming an unknown (or repeated) item, index unchanged."""
        item = np.ascontiguousarray(item, np.int64).reshape(-1)
        if len(item) == 0:
            return
        _check_distinct(item, KeyError)
        t = _dir_first(self._dk, self._dn, item, False)
        if t >= 0:
            raise KeyError(int(item[t]))
        self._version += 1
        self._run(DELETE, _NO_F, _NO_F, _NO_F, item)
        n = int(self._meta[M_N])
        if n == 0 or 4 * n < self._n_peak:
            lo, hi, sc, it = _collect_all(self._meta, self._nd_i, self._pg, self._ef, self._ei,
                                          self._ec)
            self._build(lo, hi, sc, it)
        elif _dir_capacity(n) * 4 <= len(self._dk):
            self._resize_directory(n)

    def open(self, q: float) -> IRTreeCursor:
        return IRTreeCursor(self, float(q))

    def __len__(self) -> int:
        return int(self._meta[M_N])

    def nbytes(self) -> int:
        """Bytes of every array held (node and page tables, entry pool, item directory),
        spare capacity included."""
        return int(sum(a.nbytes for a in self._state()) + self._meta.nbytes)

    def entries(self) -> int:
        """Entries of the live pages: one per interval in the leaves, one per child page in the
        internal pages (a page's spare room is in :meth:`nbytes`, not here)."""
        pg = self._pg[: self._meta[M_PG_HW]]
        return int(pg[pg[:, CAP] >= 0, NENT].sum())

    def read_many(self, queries, g):
        queries, g, off = read_args(queries, g, len(self))
        out_item = np.empty(off[-1], np.int64)
        out_score = np.empty(off[-1], np.float64)
        out_off = np.zeros(len(queries) + 1, np.int64)
        meta = self._meta
        state = _state(_depth(meta[M_ROOT], self._nd_i), meta[M_HMAX])
        _kernel(int(g.max(initial=0)))(queries, g, True, meta[M_ROOT], self._nd_f, self._nd_i, self._pg, self._ef,
                                       self._ei, self._ec, self._sf, self._sx, *state, out_item, out_score, out_off)
        return out_off, out_item[: out_off[-1]], out_score[: out_off[-1]]

    def stats(self) -> dict:
        """Shape and bookkeeping of the index: I-tree nodes and depth, pages, R-tree height
        bound, rebuilds (count, intervals rebuilt) and pool compactions since the last full
        build."""
        meta = self._meta
        depth = _depth(meta[M_ROOT], self._nd_i)
        return {"intervals": int(meta[M_N]), "nodes": int(meta[M_ND_HW] - meta[M_ND_NFREE]),
                "depth": depth, "pages": int(meta[M_PG_HW] - meta[M_PG_NFREE]),
                "max_rtree_height": int(meta[M_HMAX]), "rebuilds": int(meta[M_REBUILDS]),
                "rebuilt_intervals": int(meta[M_REBUILT]),
                "compactions": int(meta[M_COMPACTIONS])}


@numba.njit(cache=True)
def _depth(root, nd_i):
    """Number of nodes on the longest root-to-leaf path (0 for no tree)."""
    if root < 0:
        return 0
    stack = np.empty(256, np.int64)
    depth = np.empty(256, np.int64)
    stack[0] = root
    depth[0] = 1
    top = 1
    best = 0
    while top > 0:
        top -= 1
        v = stack[top]
        d = depth[top]
        best = max(best, d)
        for side in (LEFT, RIGHT):
            c = nd_i[v, side]
            if c >= 0:
                if top >= 256:
                    raise AssertionError("ir-tree: too deep")
                stack[top] = c
                depth[top] = d + 1
                top += 1
    return best


def _grown(a: np.ndarray, rows: int, used: int) -> np.ndarray:
    """A copy of a with ``rows`` rows, the first ``used`` of them copied."""
    b = np.empty((rows,) + a.shape[1:], a.dtype)
    b[:used] = a[:used]
    return b


def _check_distinct(item: np.ndarray, error: type) -> None:
    """Raise ``error`` naming an item that appears twice in one call."""
    if len(item) < 2:
        return
    s = np.sort(item)
    dup = np.flatnonzero(s[1:] == s[:-1])
    if len(dup):
        x = int(s[dup[0]])
        raise error(x) if error is KeyError else error(f"item {x} appears twice")

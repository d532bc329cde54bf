"""The BE*-tree (Sadoghi & Jacobsen, "Relevance Matters: Capitalizing on Less"): top-k
matching of Boolean expressions with weights, fully dynamic, as numba kernels over flat
node tables (``index="be-tree"``, scorings ``weighted`` and ``static``).

Shape (paper Section III; notes ``betree-topk-boolean.md`` section 2). Every predicate is an
interval on its attribute (Table I, :mod:`rankcast.kinds.matching.predicates`); candidates found through the
intervals are then checked exactly.

- A **c-node** is a bucket: a box over the attributes chosen by partitioning on its root path
  (``d_1..d_k``, ``d_k`` the *active* dimension), an **l-node** (the expressions whose home it
  is, a doubly linked list over expression slots) and a **p-directory** (a list of p-nodes).
  The root is a c-node of depth 0. A c-node is also its **c-directory** node: it has an
  optional left and right child (same depth, same attributes) that never overlap on the
  active dimension (descendant repelling), so the c-node's own bucket is the paper's overlap
  bucket B_O. Each c-node keeps two boxes: its own bucket (the exact MBB of every expression at
  or below it through its p-directory) and its c-directory subtree (own, L and R).
- A **p-node** holds one attribute, the root of its c-directory, its rank (the expressions
  below it: the optimistic popularity ranking of Section V) and an upper-bound summary.
- Summaries (Section VI): per l-node and per p-node, for ``weighted`` the largest predicate
  weight per attribute and **size class** (the expressions of the same number of predicates;
  a sorted list of (size, attribute) keys, pooled); for ``static`` the largest score.

Bounds (``weighted``; tighter than the paper's ``uscore``, the sum over the event's
attributes of event weight * max weight, and still upper bounds because weights are
non-negative and a match has all its attributes in the event). An expression of ``s``
predicates below a node has the node's path attributes (the p-nodes' attributes from the
root: the event has them all, or the search would not be there) and ``s`` minus that many
others, all among the event's attributes. So a class's bound is the sum of the path's
products (event weight * the class's max weight) plus the largest ``s - path`` products of
its other attributes the event has; a class with fewer of them than that cannot match. The
node's bound is the largest over its classes (0 when none can match). ``G[s]``, the sum of the
event's ``s`` largest products with the global maximum weight of each attribute, bounds
every expression of ``s`` predicates anywhere: classes are read largest first and the reading
stops at a class whose ``G`` is below the k-th score (or below the best class so far); an
expression with more predicates than the event has attributes, or whose ``G`` is below the
k-th score, is not read. Where sizes differ (scores nearly proportional to the number of
predicates, as in BEGen's workload), this is what lets the search skip smaller classes once a
large match is held, as k-index skips its smaller conjunction sizes.

Insertion (Algs. 1-3): at a c-node, the expression goes to the p-node of highest rank among
its attributes not used on the path; in that p-node's c-directory it descends (both children
intersected: stays in the overlap bucket; one: into it; neither: into the one that grows less,
or a new one on the missing side) unless the subtree's box would grow more than ``beta``
times, in which case a new parent bucket holding it is injected above the subtree (bottom-up
expansion). Where no p-node fits it lands in the l-node; an overflowing l-node (more than
``A`` = ``leaf_capacity``) is partitioned (root, overlap buckets and split buckets: the most
popular unused attribute becomes a new p-node, its expressions move to the new c-directory)
or, in a leaf c-directory node, split into L/O/R (Alg. 5) by the exhaustive split (minimum
overlap length; every split point of both orderings in O(n log n) with Fenwick trees over
lower bounds; both sides need ``alpha`` of the bucket) or the approximate one, with the
space-clustering fallback (halving the bucket). Expressions left with no unused attribute stay
in their l-node, which may then exceed ``A``. The whole cascade runs from a work list.
Summaries are kept up per expression (``_sum_add``: into its l-node's and every p-node's on its
path) in small batches; a batch large against the tree (at least ``lazy_min`` expressions and
``1 / lazy_share`` of those already there; a build, a rebuild) skips that upkeep (no decision
of the insertion reads a summary: ranks and boxes only) and only marks the nodes it changes,
then recomputes their summaries exactly, once, at its end (``_exact_summaries``: each l-node
from its expressions, each p-node bottom-up from its c-directory's l-nodes and the p-nodes
below them); after inserts only they equal the per-expression upkeep's.

Deletion: out of its l-node; that bucket's boxes are recomputed from its own expressions and
its children's boxes (the inactive dimensions make this possible without going down) and the
change goes up only while boxes change; p-node ranks drop along the path; the l-node's
summary is recomputed exactly (p-node summaries stay: a stale maximum is still an upper
bound; a later lazy batch recomputes those it changes exactly, so tighter). An emptied leaf bucket is unlinked; an underflowing leaf (fewer than ``alpha * A``)
merges into its parent when the parent is open (merge rule). Dead nodes are reclaimed by a
rebuild once they outnumber live ones.

Top-k (Alg. 6, with one global best-first heap): the root's l-node is scanned unless its bound
cannot beat the k-th score, its p-nodes on attributes the event has are pushed with their
bound; popped in bound order, each p-node's c-directory is searched for the buckets whose
boxes hold the event's value, whose l-nodes are scanned (or pushed, when something with a
higher bound waits in the heap) and whose p-nodes are pushed in turn.
The search stops once the best bound left is below the k-th score (with the relative slack
``EPS``; an equal bound is still searched because a smaller id would win the tie).

Speculative threshold (``weighted``; not in the paper): until k matches are held nothing can be
pruned, and at 1M expressions most of a search happens then (top-5: 53 of its 65 pushes, 41
of them never popped). So the events of one ``match`` call lend each other a threshold: after
each event, its k-th score over ``G[s]`` (the sum of its ``s`` largest products with the
global maximum weights) is kept for every ``s`` up to ``SPEC_SIZES``, over the last
``SPEC_WINDOW`` events; an event searches from ``cut`` = the least kept ratio of the size
whose ratios spread least, times its own ``G[s]``, pruning against it as against a k-th
score. Where the search ends with k matches and the k-th score at or above ``cut``, every
node it pruned had a bound below that k-th score, as without speculation, and it stands;
else the event is searched again from -inf (``speculation_retries`` in ``stats()``), so the
top-k is exact either way. On the bench's workload the ratio over ``G[10]`` varies by 1.5%
between events, and at 1M top-5 944 of 978 speculated searches stand (34 searched again);
speculation pauses while more than a quarter of the recent ones fail.

Match view: matching does not walk the node tables. Every c-node has a hot row (its active
dimension's own and subtree bounds, its c-directory children, the offset of its block, and
the most predicates of an expression in its l-node or below its p-nodes (``static``: their
bound), so that a bucket that cannot beat the k-th score is passed over unread; one cache
line, all the c-directory search reads) and a contiguous block in one float arena (its
p-directory, its l-node summary, then its l-node's expressions as packed predicate rows, each
behind a header with its id and static score, so that a match needs no random read of the id
table), every p-node a small block (summary, root, attribute). A p-directory entry holds its
p-node's block place and most predicates or static bound (a p-node's change therefore marks
its owner too) and its
c-directory box on the p-node's attribute (the root's subtree box: every expression below has
its interval there), so a p-node whose box misses the event's value, or whose ``G`` of its
most predicates cannot beat the k-th score, is passed over without reading its block; a
c-directory root's change therefore marks its owner c-node too. Updates mark the nodes they change (a dirty
list); before the next match the changed nodes' blocks are rewritten at the end of the arena,
or everything anew in depth-first order when most nodes changed (a build) or the arena is half
garbage; every block starts a 64-byte cache line (the arena's copy is line-aligned). A visited bucket is thus one sequential read instead of a pointer chase per
expression. The search hides what latency it can behind other work: a c-node's p-nodes on
the event's attributes are found first and their blocks prefetched together, then its l-node
bounded and scanned, then their bounds computed; a pushed p-node's c-directory root row and a
c-directory node's children rows are prefetched, and so are the next rows of the p-node at the
heap's top while a popped one is searched; a popped p-node's c-directory is searched whole first (the blocks of the
buckets holding the event's value prefetched as they are found), then those buckets visited.
The search itself runs without reference counting (``_match_events``). Summaries are
32-bit words (``_write_sum``): attributes and class headers as uint32, weights as float32
rounded up (the smallest float32 at or above the weight: a bound still, and only bounds read
them; scores come from the float64 weights of the expression rows), half the cache lines of
float64 pairs (at 1M: the arena 442 MiB instead of 559, top-1 and top-5 0.88x the time side by
side on one tree). A class whose attributes all fit 16 bits (any tree of fewer than 65,536
attributes) is *packed*: one 32-bit word per (attribute, weight), the weight as a 16-bit
multiple of the class's scale (its largest stored weight / 65,534, a float32 rounded up),
rounded up, so still a bound, within 1/65,534 of the class's largest weight (at 1M: the arena
401 MiB instead of 442, top-1 0.96x and top-5 0.97x the time side by side). A short summary class's attributes are read in one sequential pass (with A = 5 most classes are short). A
long one (at least ``long_class`` = 32 attributes besides the path's: the top levels' classes
hold hundreds) is kept as 32-attribute bit words only (which attributes), and its bound takes
each attribute's global maximum weight (the one ``G`` uses) instead of the class's own: the
event's attributes, by that product largest first, are taken while the class has them until
it has enough. That still bounds the class (its weights are at most the global ones; with the
paper's weights, where an attribute weighs nearly the same everywhere, it is as tight), reads
a few words instead of scattered weights and needs no sort (at 1M, side by side on one tree:
0.94x the time at top-1 and top-5; a few more nodes visited, 75 instead of 73 at top-5).
A node with few expressions below (at most ``list_cap`` = 128: an l-node, a deep p-node's
subtree) writes its packed short classes as *list classes*: the path's words as before, then
each expression's own other attributes (``size - path`` words each) instead of their union.
Its bound is the path's products plus the best sum over the expressions whose attributes the
event all has (one it misses cannot match): the exact attribute-set bound, where the union's
per-attribute maxima mix attributes of different expressions. A p-node's view is therefore
rewritten whenever an expression enters or leaves below it while it has at most
``list_cap`` (``_rank_add``), so that its lists hold exactly the expressions below it (at
1M, side by side on one tree: top-1 0.70x and top-5 0.64x the time; pops 19.7 instead of 37.4
at top-5, the arena 417 MiB instead of 401).

``build="batch"`` (the paper's BE*-B) puts a whole initial table in the root l-node and
partitions it top-down once; later calls insert one expression at a time.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from numba.typed import List

from rankcast.common.arrays import prefetch
from .core import IN, MODES, NIN, RELAXED, STATIC, DenseEvent, ExpressionTable, find_sorted, holds, lower_bound
from .core import offer_topk as _offer, ranks_after as _worse
from rankcast.common.tolerance import EPS

__all__ = ["BETreeCore", "check_structure"]

# c-node record (int64, NC per node); the summary fields come first in c- and p-nodes alike:
# its attribute list (start, count, capacity in the pool) and the most predicates of an
# expression below it
WS, WC, WK, NMAX = 0, 1, 2, 3
C_L, C_R, C_PAR, C_PN, C_DEP, C_BOX, C_LH, C_LC, C_ALIVE, C_DS, C_DC, C_DK, C_DIRTY = range(4, 17)
NC = 17   # C_DS/C_DC/C_DK: the p-directory, (attribute, p-node) sorted by attribute, in its pool
# p-node record (int64, NP per node)
P_ATTR, P_OWN, P_ROOT, P_CNT, P_ALIVE, P_DIRTY = range(4, 10)
NP = 10
# counters
(U_C, U_P, U_BOX, U_W, U_SPLIT, U_SPACE, U_PART, U_EXPAND, U_MERGE, U_DEADC, U_DEADP, U_LIVEC,
 U_LIVEP, U_D, U_NDIRTY, U_AR, U_ARLIVE, U_LONG, U_LISTC) = range(19)
NU = 20
# summary keys (_wkey): (SZ_CAP - expression size) << 32 | attribute
SZ_CAP = 1 << 24
# the int and float pools (typed lists: kernels grow them in place)
I_C, I_P, I_WA, I_BA, I_NUM, I_DA, I_DP, I_DIRTY, I_PV = range(9)
F_CS, F_PS, F_WM, F_BX, F_HV, F_AR = range(6)
# the match view (module docstring, "Match view"): a hot row per c-node in F_HV ...
# ... (V_M: the most predicates of an expression in its l-node or below its p-nodes; static: their bound)
V_SL, V_SH, V_OL, V_OH, V_L, V_R, V_B, V_M = range(8)
NV = 8
B_OL, B_OH, B_SL, B_SH = range(4)     # a box dimension: own bucket lo, hi; c-directory subtree lo, hi
ND = 5                                # floats of a p-directory entry in the view (_write_c)
# parameters
Q_A, Q_ALPHA, Q_BETA, Q_EXH, Q_MODE, Q_VSHARE, Q_VSLACK, Q_LAZY = range(8)
# lazy summaries (``_exact_summaries``): a batch of at least max(LAZY_MIN, live / LAZY_SHARE)
# expressions (live: before it) skips the per-expression summary upkeep and recomputes the
# summaries of the nodes it changed once at its end
LAZY_MIN = 512
LAZY_SHARE = 4.0
LAZY_DENSE = 1 << 24   # most (size, attribute) places the recomputation's deduplication may take
# work-list tasks
T_CLUSTER, T_PARTITION = 0, 1
# match counters
M_EVENTS, M_CNODES, M_LNODES, M_EVALS, M_PUSHED, M_POPPED, M_PRUNED, M_CDIR, M_SPEC, M_RETRY = range(10)
NM = 10
# the speculative threshold (module docstring, "Speculative threshold"): the k-th score of each of
# the last SPEC_WINDOW events of a call over G[s] (s = 1..SPEC_SIZES), kept in a ring; once
# SPEC_MIN are kept, an event's search starts from the least ratio of the size whose ratios
# spread least, times its own G[s]; paused while the failures' moving average (each speculated
# event weighing 1/SPEC_DECAY) exceeds SPEC_PAUSE, which fades by 1/SPEC_WINDOW per paused event
SPEC_WINDOW = 32
SPEC_MIN = 8
SPEC_SIZES = 16
SPEC_DECAY = 10.0
SPEC_PAUSE = 0.25
# state (``_match_many``'s SS): ratios kept, failure average, the size used, the ring's next row
S_KEPT, S_FAIL, S_SIZE, S_NEXT = range(4)
BLOCK_LINES = 4       # cache lines prefetched of a block to visit (c-node) or to bound (p-node)
HUGE_BYTES = 4 << 20   # numpy asks for transparent huge pages from this size on
VIEW_ALIGN = 8         # floats: every view block starts a 64-byte cache line (the arena is aligned so)
# a packed summary class (_write_sum): one 32-bit word per (attribute, weight), the attribute in the
# low 16 bits (every attribute of the class below PACK_ATTRS), the weight as a 16-bit multiple of
# the class's scale, rounded up (at most PACK_Q of them: the scale is its largest weight / PACK_Q)
PACK_ATTRS = 1 << 16
PACK_Q = 65534.0
PACKED = 1 << 31       # flag in a class header's bit-word count
# a list class (_write_sum): a packed short class of a node with few expressions below (at most
# num[U_LISTC], the option list_cap: an l-node's, a p-node's subtree) written as its expressions'
# own other attributes, expression by expression, instead of their union
LISTC = 1 << 30        # flag in a class header's bit-word count
LIST_CAP = 128
INF = np.inf


# ----------------------------------------------------------------------------- pools
@numba.njit(cache=True)
def _grow_i(IL, w, n):
    a = IL[w]
    if a.shape[0] < n:
        b = np.full(max(n, 2 * a.shape[0]), -1, np.int64)
        b[: a.shape[0]] = a
        IL[w] = b


@numba.njit(cache=True)
def _grow_f(FL, w, n, fill):
    a = FL[w]
    if a.shape[0] < n:
        b = np.full(max(n, 2 * a.shape[0]), fill, np.float64)
        b[: a.shape[0]] = a
        FL[w] = b


@numba.njit(cache=True)
def _grow_view(FL, n):
    """The view's arena grown to at least ``n`` floats, by an eighth at a time: the writers'
    guard (``_full_view`` sizes the arena without list classes; ``_refresh_view`` exactly)."""
    a = FL[F_AR]
    if a.shape[0] < n:
        b = np.zeros(max(n, a.shape[0] + a.shape[0] // 8))
        b[: a.shape[0]] = a
        FL[F_AR] = b


@numba.njit(cache=True)
def _dirty(IL, x):
    num = IL[I_NUM]
    n = num[U_NDIRTY]
    _grow_i(IL, I_DIRTY, n + 1)
    IL[I_DIRTY][n] = x
    num[U_NDIRTY] = n + 1


@numba.njit(cache=True)
def _touch_c(IL, c):
    """c-node ``c`` changed (box, children, l-node, summary or p-directory): its match view
    is rewritten before the next match."""
    CI = IL[I_C]
    if CI[c * NC + C_DIRTY] == 0:
        CI[c * NC + C_DIRTY] = 1
        _dirty(IL, 2 * c)
    pn = CI[c * NC + C_PN]
    if CI[c * NC + C_PAR] == -1 and pn >= 0:      # a c-directory root: its box is in the owner's view
        own = IL[I_P][pn * NP + P_OWN]
        if CI[own * NC + C_DIRTY] == 0:
            CI[own * NC + C_DIRTY] = 1
            _dirty(IL, 2 * own)


@numba.njit(cache=True)
def _touch_p(IL, p):
    """p-node ``p`` changed: its block is rewritten, and so is its owner's (whose p-directory
    entry holds the block's place)."""
    PI = IL[I_P]
    if PI[p * NP + P_DIRTY] == 0:
        PI[p * NP + P_DIRTY] = 1
        _dirty(IL, 2 * p + 1)
        own = PI[p * NP + P_OWN]
        CI = IL[I_C]
        if CI[own * NC + C_DIRTY] == 0:
            CI[own * NC + C_DIRTY] = 1
            _dirty(IL, 2 * own)


@numba.njit(cache=True)
def _rank_add(IL, p, d):
    """p-node ``p``'s rank (the expressions below it) changes by ``d``; its view is rewritten
    where it holds or would now hold list classes (``_below``: at most ``num[U_LISTC]`` below, before
    an insert or after a removal), so that they hold exactly the expressions below it."""
    PI = IL[I_P]
    r = PI[p * NP + P_CNT]
    PI[p * NP + P_CNT] = r + d
    if min(r, r + d) <= IL[I_NUM][U_LISTC]:
        _touch_p(IL, p)


@numba.njit(cache=True)
def _new_c(IL, FL, dep, par, pn, src, extra):
    """A new c-node of depth ``dep`` whose box attributes are those of ``src`` (its first
    ``dep`` or ``dep - 1`` of them) and then ``extra`` (when >= 0). Boxes start empty."""
    num = IL[I_NUM]
    c = num[U_C]
    num[U_C] = c + 1
    num[U_LIVEC] += 1
    _grow_i(IL, I_C, (c + 1) * NC)
    _grow_f(FL, F_CS, c + 1, -INF)
    b = num[U_BOX]
    num[U_BOX] = b + dep
    _grow_i(IL, I_BA, b + dep)
    _grow_f(FL, F_BX, 4 * (b + dep), INF)
    CI = IL[I_C]
    BA = IL[I_BA]
    base = c * NC
    CI[base + WS] = 0
    CI[base + WC] = 0
    CI[base + WK] = 0
    CI[base + NMAX] = 0
    CI[base + C_L] = -1
    CI[base + C_R] = -1
    CI[base + C_PAR] = par
    CI[base + C_PN] = pn
    CI[base + C_DEP] = dep
    CI[base + C_BOX] = b
    CI[base + C_DS] = 0
    CI[base + C_DC] = 0
    CI[base + C_DK] = 0
    CI[base + C_LH] = -1
    CI[base + C_LC] = 0
    CI[base + C_ALIVE] = 1
    CI[base + C_DIRTY] = 0
    n_copy = dep if extra < 0 else dep - 1
    if n_copy > 0:
        sb = CI[src * NC + C_BOX]
        for j in range(n_copy):
            BA[b + j] = BA[sb + j]
    if extra >= 0:
        BA[b + dep - 1] = extra
    FL[F_CS][c] = -INF
    BX = FL[F_BX]
    for j in range(b, b + dep):
        BX[4 * j + B_OL] = INF
        BX[4 * j + B_OH] = -INF
        BX[4 * j + B_SL] = INF
        BX[4 * j + B_SH] = -INF
    _touch_c(IL, c)
    return c


@numba.njit(cache=True)
def _new_p(IL, FL, owner, attr):
    num = IL[I_NUM]
    p = num[U_P]
    num[U_P] = p + 1
    num[U_LIVEP] += 1
    _grow_i(IL, I_P, (p + 1) * NP)
    _grow_f(FL, F_PS, p + 1, -INF)
    PI = IL[I_P]
    base = p * NP
    PI[base + WS] = 0
    PI[base + WC] = 0
    PI[base + WK] = 0
    PI[base + NMAX] = 0
    PI[base + P_ATTR] = attr
    PI[base + P_OWN] = owner
    PI[base + P_CNT] = 0
    PI[base + P_ALIVE] = 1
    PI[base + P_DIRTY] = 0
    FL[F_PS][p] = -INF
    _touch_p(IL, p)
    _d_add(IL, owner, attr, p)
    CI = IL[I_C]
    root = _new_c(IL, FL, CI[owner * NC + C_DEP] + 1, -1, p, owner, attr)
    IL[I_P][base + P_ROOT] = root
    return p


# ----------------------------------------------------------------------------- summaries
@numba.njit(cache=True, inline="always")
def _lower_bound(AR, base, stride, n, a):
    """The first of ``n`` keys ``AR[base + stride * i]`` (ascending) not below ``a``."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) >> 1
        if AR[base + stride * mid] < a:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True, inline="always")
def _sort_desc(tb, n):
    """``tb[:n]`` sorted descending in place (insertion sort: n is an event's size)."""
    for i in range(1, n):
        x = tb[i]
        y = i - 1
        while y >= 0 and tb[y] < x:
            tb[y + 1] = tb[y]
            y -= 1
        tb[y + 1] = x


@numba.njit(cache=True, inline="always")
def _wkey(size, attr):
    """The summary key of attribute ``attr`` in the class of expressions of ``size``
    predicates: sorted by size descending, then attribute."""
    return ((SZ_CAP - size) << 32) | attr


@numba.njit(cache=True)
def _sum_add(IL, FL, q, rec, node, s, p_start, p_end, p_attr, p_w, score):
    """Expression ``s`` into the summary of c-node (``rec`` = I_C) or p-node ``node``
    (``weighted``: its size class, module docstring "Bounds"). In a lazy batch
    (``q[Q_LAZY]``) the node is only marked changed: ``_exact_summaries`` recomputes it."""
    if q[Q_LAZY] > 0:
        if rec == I_C:
            _touch_c(IL, node)
        else:
            _touch_p(IL, node)
        return
    if int(q[Q_MODE]) == STATIC:
        S = FL[F_CS] if rec == I_C else FL[F_PS]
        if S[node] < score[s]:
            S[node] = score[s]
            if rec == I_C:
                _touch_c(IL, node)
            else:
                _touch_p(IL, node)
        return
    base = node * (NC if rec == I_C else NP)
    if rec == I_C:
        _touch_c(IL, node)
    else:
        _touch_p(IL, node)
    R = IL[rec]
    size = p_end[s] - p_start[s]
    if R[base + NMAX] < size:
        R[base + NMAX] = size
    # one pass: the keys already there get their maxima raised in place, the others are
    # gathered sorted (an attribute twice kept once, with its larger weight) in the scratch at
    # the end of the pool, past its last summary, then merged in at once from the back (one
    # shift or relocation of the summary per expression, not one per key)
    ws, wc = R[base + WS], R[base + WC]
    sk = IL[I_NUM][U_W]
    _grow_i(IL, I_WA, sk + size)
    _grow_f(FL, F_WM, sk + size, 0.0)
    WA = IL[I_WA]
    WM = FL[F_WM]
    n = 0
    c0 = lower_bound(WA, ws, ws + wc, _wkey(size, 0))          # the expression's size class:
    c1 = lower_bound(WA, c0, ws + wc, _wkey(size - 1, 0))      # its keys are looked up there only
    for p in range(p_start[s], p_end[s]):
        key = _wkey(size, p_attr[p])
        w = p_w[p]
        lo = lower_bound(WA, c0, c1, key)
        if lo < c1 and WA[lo] == key:
            if WM[lo] < w:
                WM[lo] = w
            continue
        y = sk + n - 1                                 # insertion sort into the scratch
        while y >= sk and WA[y] > key:
            y -= 1
        if y >= sk and WA[y] == key:                   # the attribute again: its larger weight
            if WM[y] < w:
                WM[y] = w
            continue
        for x in range(sk + n - 1, y, -1):
            WA[x + 1] = WA[x]
            WM[x + 1] = WM[x]
        WA[y + 1] = key
        WM[y + 1] = w
        n += 1
    if n > 0:
        _sum_merge(IL, FL, R, base, sk, n)


@numba.njit(cache=True)
def _sum_merge(IL, FL, R, base, sk, n):
    """The ``n`` sorted new keys at ``sk`` (the scratch past the pool's last summary, with
    their weights) merged into the summary of record ``base`` of ``R`` (relocated to the end
    of the pool, doubled, when they do not fit: the merge from the back then writes over the
    scratch only where it has already been read)."""
    ws, wc, wk = R[base + WS], R[base + WC], R[base + WK]
    WA = IL[I_WA]
    WM = FL[F_WM]
    dst = ws
    if wc + n > wk:                                    # relocate to the end of the pool, doubled
        num = IL[I_NUM]
        nk = max(4, 2 * wk)
        while nk < wc + n:
            nk *= 2
        nb = num[U_W]
        num[U_W] = nb + nk
        _grow_i(IL, I_WA, nb + nk)
        _grow_f(FL, F_WM, nb + nk, 0.0)
        WA = IL[I_WA]
        WM = FL[F_WM]
        dst = nb
        R[base + WS] = nb
        R[base + WK] = nk
    # merge from the back: old entries ws..ws+wc and the n new ones into dst..dst+wc+n
    i = wc - 1
    j = n - 1
    o = wc + n - 1
    while j >= 0:
        if i >= 0 and WA[ws + i] > WA[sk + j]:
            WA[dst + o] = WA[ws + i]
            WM[dst + o] = WM[ws + i]
            i -= 1
        else:
            WA[dst + o] = WA[sk + j]
            WM[dst + o] = WM[sk + j]
            j -= 1
        o -= 1
    if dst != ws:
        for x in range(i + 1):
            WA[dst + x] = WA[ws + x]
            WM[dst + x] = WM[ws + x]
    R[base + WC] = wc + n


@numba.njit(cache=True)
def _lnode_summary(IL, FL, q, c, NEXT, p_start, p_end, p_attr, p_w, score):
    """Recompute the l-node summary of ``c`` exactly from its expressions (in a lazy batch:
    only mark it changed, ``_exact_summaries`` does it once at the batch's end)."""
    _touch_c(IL, c)
    if q[Q_LAZY] > 0:
        return
    CI = IL[I_C]
    CI[c * NC + WC] = 0
    CI[c * NC + NMAX] = 0
    FL[F_CS][c] = -INF
    s = CI[c * NC + C_LH]
    while s >= 0:
        _sum_add(IL, FL, q, I_C, c, s, p_start, p_end, p_attr, p_w, score)
        s = NEXT[s]


@numba.njit(cache=True)
def _sum_put(IL, FL, R, base, tk, tw, n):
    """The sorted, deduplicated keys ``tk[:n]`` (weights ``tw``) as the summary of record
    ``base`` of ``R``: in place when they fit its capacity, else in a region of exactly ``n``
    at the end of the pool."""
    if n > R[base + WK]:
        num = IL[I_NUM]
        nb = num[U_W]
        num[U_W] = nb + n
        _grow_i(IL, I_WA, nb + n)
        _grow_f(FL, F_WM, nb + n, 0.0)
        R[base + WS] = nb
        R[base + WK] = n
    WA = IL[I_WA]
    WM = FL[F_WM]
    ws = R[base + WS]
    for i in range(n):
        WA[ws + i] = tk[i]
        WM[ws + i] = tw[i]
    R[base + WC] = n


@numba.njit(cache=True)
def _sorted_unique(tk, tw, m, ok, ow):
    """``tk[:m]`` sorted into ``ok`` with each key once (its largest weight from ``tw`` in
    ``ow``); returns how many."""
    o = np.argsort(tk[:m])
    n = 0
    for i in range(m):
        j = o[i]
        k = tk[j]
        w = tw[j]
        if n > 0 and ok[n - 1] == k:
            if ow[n - 1] < w:
                ow[n - 1] = w
        else:
            ok[n] = k
            ow[n] = w
            n += 1
    return n


@numba.njit(cache=True)
def _dense_unique(tk, tw, m, ok, ow, pos, na):
    """``_sorted_unique`` through ``pos`` (-1 throughout, again on return), a place per key
    (size * ``na`` + attribute): each key found once in one pass, then only the distinct keys
    sorted."""
    n = 0
    for i in range(m):
        k = tk[i]
        x = (SZ_CAP - (k >> 32)) * na + (k & 0xFFFFFFFF)
        j = pos[x]
        if j < 0:
            pos[x] = n
            ok[n] = k
            ow[n] = tw[i]
            n += 1
        elif ow[j] < tw[i]:
            ow[j] = tw[i]
    keys = np.sort(ok[:n])
    for i in range(n):
        tw[i] = ow[pos[(SZ_CAP - (keys[i] >> 32)) * na + (keys[i] & 0xFFFFFFFF)]]
    for i in range(n):
        k = keys[i]
        pos[(SZ_CAP - (k >> 32)) * na + (k & 0xFFFFFFFF)] = -1
        ok[i] = k
        ow[i] = tw[i]
    return n


@numba.njit(cache=True)
def _unique(tk, tw, m, ok, ow, pos, na):
    if pos.shape[0] > 0:
        return _dense_unique(tk, tw, m, ok, ow, pos, na)
    return _sorted_unique(tk, tw, m, ok, ow)


@numba.njit(cache=True)
def _room(tk, tw, m, need):
    """``tk/tw`` with room for ``need`` entries (their first ``m`` kept; doubled at least when
    grown); returns (tk, tw)."""
    if need <= tk.shape[0]:
        return tk, tw
    nk = max(need, 2 * tk.shape[0])
    k2 = np.empty(nk, np.int64)
    w2 = np.empty(nk)
    k2[:m] = tk[:m]
    w2[:m] = tw[:m]
    return k2, w2


@numba.njit(cache=True)
def _put_unique(IL, FL, R, base, tk, tw, m, ok, ow, pos, na):
    """The gathered keys ``tk/tw[:m]``, deduplicated and sorted (``_unique`` into ``ok/ow``,
    grown to ``tk``'s size when short), as the summary of record ``base`` of ``R``; returns
    (ok, ow)."""
    if ok.shape[0] < m:
        ok = np.empty(tk.shape[0], np.int64)
        ow = np.empty(tk.shape[0])
    n = _unique(tk, tw, m, ok, ow, pos, na)
    _sum_put(IL, FL, R, base, ok, ow, n)
    return ok, ow


@numba.njit(cache=True)
def _gather(IL, FL, R, base, tk, tw, m):
    """The summary of record ``base`` of ``R`` appended to ``tk/tw[:m]`` (grown as needed);
    returns (tk, tw, m)."""
    ws, wc = R[base + WS], R[base + WC]
    tk, tw = _room(tk, tw, m, m + wc)
    WA = IL[I_WA]
    WM = FL[F_WM]
    for i in range(wc):
        tk[m + i] = WA[ws + i]
        tw[m + i] = WM[ws + i]
    return tk, tw, m + wc


@numba.njit(cache=True)
def _exact_summaries(IL, FL, q, NEXT, p_start, p_end, p_attr, p_w, score, pos, na):
    """The end of a lazy batch (``q[Q_LAZY]``: ``_sum_add`` and ``_lnode_summary`` only
    marked nodes changed): the summary of every node changed since the last view refresh (the
    view's dirty list, a superset of those whose summaries the batch changed) recomputed
    exactly, once: each c-node's l-node summary from its expressions, then each p-node's
    bottom-up (deepest owners first) as the union of the l-node summaries of its
    c-directory's c-nodes and the summaries of their p-nodes (largest weight per key; the most
    predicates and the static bound likewise the largest): the keys gathered, deduplicated
    through ``pos`` (a place per (size, attribute), ``na`` attributes; empty: by a sort of
    all of them instead), the distinct ones sorted. Nodes not
    changed keep theirs: an l-node summary is always exact, a p-node summary at least an upper
    bound (a deletion leaves it stale), so the union is a bound too, and after inserts only
    every summary equals the incremental upkeep's."""
    num = IL[I_NUM]
    nd = num[U_NDIRTY]
    DL = IL[I_DIRTY]
    static = int(q[Q_MODE]) == STATIC
    tk = np.empty(256, np.int64)
    tw = np.empty(256)
    ok = np.empty(256, np.int64)
    ow = np.empty(256)
    pnodes = np.empty(nd, np.int64)
    n_p = 0
    for i in range(nd):
        x = DL[i]
        if x & 1 == 1:
            pnodes[n_p] = x >> 1
            n_p += 1
            continue
        c = x >> 1
        CI = IL[I_C]
        if CI[c * NC + C_ALIVE] != 1:
            continue
        m = 0
        most = 0
        best = -INF
        s = CI[c * NC + C_LH]
        while s >= 0:
            size = p_end[s] - p_start[s]
            if static:
                best = max(best, score[s])
            else:
                most = max(most, size)
                tk, tw = _room(tk, tw, m, m + size)
                for p in range(p_start[s], p_end[s]):
                    tk[m] = _wkey(size, p_attr[p])
                    tw[m] = p_w[p]
                    m += 1
            s = NEXT[s]
        if static:
            FL[F_CS][c] = best
            continue
        CI[c * NC + NMAX] = most
        ok, ow = _put_unique(IL, FL, CI, c * NC, tk, tw, m, ok, ow, pos, na)
    # p-nodes, deepest owners first: a p-node's c-directory holds the p-nodes of the next depth
    PI = IL[I_P]
    CI = IL[I_C]
    dep = np.empty(n_p, np.int64)
    for i in range(n_p):
        dep[i] = -CI[PI[pnodes[i] * NP + P_OWN] * NC + C_DEP]
    order = np.argsort(dep)
    stack = np.empty(64, np.int64)
    DP = IL[I_DP]
    for i in range(n_p):
        p = pnodes[order[i]]
        PI = IL[I_P]
        CI = IL[I_C]
        if PI[p * NP + P_ALIVE] != 1:
            continue
        m = 0
        most = 0
        best = -INF
        stack[0] = PI[p * NP + P_ROOT]
        ns = 1
        while ns > 0:
            ns -= 1
            c = stack[ns]
            ds, dc = CI[c * NC + C_DS], CI[c * NC + C_DC]
            if ns + 2 > stack.shape[0]:
                bigger = np.empty(2 * stack.shape[0], np.int64)
                bigger[:ns] = stack[:ns]
                stack = bigger
            for ch in (CI[c * NC + C_L], CI[c * NC + C_R]):
                if ch >= 0:
                    stack[ns] = ch
                    ns += 1
            if static:
                best = max(best, FL[F_CS][c])
                for x in range(ds, ds + dc):
                    best = max(best, FL[F_PS][DP[x]])
                continue
            most = max(most, CI[c * NC + NMAX])
            tk, tw, m = _gather(IL, FL, CI, c * NC, tk, tw, m)
            for x in range(ds, ds + dc):
                most = max(most, PI[DP[x] * NP + NMAX])
                tk, tw, m = _gather(IL, FL, PI, DP[x] * NP, tk, tw, m)
        if static:
            FL[F_PS][p] = best
            continue
        PI[p * NP + NMAX] = most
        ok, ow = _put_unique(IL, FL, PI, p * NP, tk, tw, m, ok, ow, pos, na)


@numba.njit(cache=True)
def _d_add(IL, c, attr, p):
    """(attr, p) into the sorted p-directory of c-node ``c`` (relocated, doubled, when full)."""
    _touch_c(IL, c)
    CI = IL[I_C]
    ds, dc, dk = CI[c * NC + C_DS], CI[c * NC + C_DC], CI[c * NC + C_DK]
    if dc == dk:
        num = IL[I_NUM]
        nk = max(4, 2 * dk)
        nb = num[U_D]
        num[U_D] = nb + nk
        _grow_i(IL, I_DA, nb + nk)
        _grow_i(IL, I_DP, nb + nk)
        DA, DP = IL[I_DA], IL[I_DP]
        for j in range(dc):
            DA[nb + j] = DA[ds + j]
            DP[nb + j] = DP[ds + j]
        ds = nb
        CI[c * NC + C_DS] = nb
        CI[c * NC + C_DK] = nk
    DA, DP = IL[I_DA], IL[I_DP]
    j = ds + dc
    while j > ds and DA[j - 1] > attr:
        DA[j] = DA[j - 1]
        DP[j] = DP[j - 1]
        j -= 1
    DA[j] = attr
    DP[j] = p
    CI[c * NC + C_DC] = dc + 1


@numba.njit(cache=True)
def _d_del(IL, c, attr):
    _touch_c(IL, c)
    CI = IL[I_C]
    DA, DP = IL[I_DA], IL[I_DP]
    ds, dc = CI[c * NC + C_DS], CI[c * NC + C_DC]
    x = find_sorted(DA, ds, ds + dc, attr)
    for j in range(x, ds + dc - 1):
        DA[j] = DA[j + 1]
        DP[j] = DP[j + 1]
    CI[c * NC + C_DC] = dc - 1


# ----------------------------------------------------------------------------- l-nodes, boxes
@numba.njit(cache=True, inline="always")
def _l_push(IL, HOME, NEXT, PREV, c, s):
    _touch_c(IL, c)
    CI = IL[I_C]
    h = CI[c * NC + C_LH]
    NEXT[s] = h
    PREV[s] = -1
    if h >= 0:
        PREV[h] = s
    CI[c * NC + C_LH] = s
    CI[c * NC + C_LC] += 1
    HOME[s] = c


@numba.njit(cache=True, inline="always")
def _l_pop(IL, HOME, NEXT, PREV, s):
    c = HOME[s]
    _touch_c(IL, c)
    CI = IL[I_C]
    pv, nx = PREV[s], NEXT[s]
    if pv >= 0:
        NEXT[pv] = nx
    else:
        CI[c * NC + C_LH] = nx
    if nx >= 0:
        PREV[nx] = pv
    CI[c * NC + C_LC] -= 1
    HOME[s] = -1
    NEXT[s] = -1
    PREV[s] = -1


@numba.njit(cache=True, inline="always")
def _ival(s, attr, p_start, p_end, p_attr, p_lo, p_hi):
    for p in range(p_start[s], p_end[s]):
        if p_attr[p] == attr:
            return p_lo[p], p_hi[p]
    return INF, -INF


@numba.njit(cache=True)
def _extend(IL, FL, c, s, own, p_start, p_end, p_attr, p_lo, p_hi):
    """Grow the subtree box (and the own box when ``own``) of ``c`` by expression ``s``."""
    _touch_c(IL, c)
    _extend_box(IL[I_C], IL[I_BA], FL[F_BX], c, s, own, p_start, p_end, p_attr, p_lo, p_hi)


@numba.njit(cache=True, inline="always")
def _extend_box(CI, BA, BX, c, s, own, p_start, p_end, p_attr, p_lo, p_hi):
    """The boxes' growth of ``_extend`` (the node already marked)."""
    b = CI[c * NC + C_BOX]
    for j in range(b, b + CI[c * NC + C_DEP]):
        lo, hi = _ival(s, BA[j], p_start, p_end, p_attr, p_lo, p_hi)
        if lo < BX[4 * j + B_SL]:
            BX[4 * j + B_SL] = lo
        if hi > BX[4 * j + B_SH]:
            BX[4 * j + B_SH] = hi
        if own:
            if lo < BX[4 * j + B_OL]:
                BX[4 * j + B_OL] = lo
            if hi > BX[4 * j + B_OH]:
                BX[4 * j + B_OH] = hi


@numba.njit(cache=True, inline="always")
def _extend_rows(IL, CI, BA, BX, c, s, own, p_start, p_end, p_attr, p_lo, p_hi):
    """``_extend`` with the node tables at hand (``_insert_cdir``'s descent): no list lookups,
    each of which costs numba a reference count update (at 1M, reference counting was about
    half of the build's CPU), and ``_touch_c`` only where it can change something."""
    if CI[c * NC + C_DIRTY] == 0 or (CI[c * NC + C_PAR] == -1 and CI[c * NC + C_PN] >= 0):
        _touch_c(IL, c)
    _extend_box(CI, BA, BX, c, s, own, p_start, p_end, p_attr, p_lo, p_hi)


@numba.njit(cache=True)
def _recompute_own(IL, FL, c, NEXT, p_start, p_end, p_attr, p_lo, p_hi):
    """Own box of ``c`` from its l-node and its p-nodes' subtree boxes; True if it changed."""
    _touch_c(IL, c)
    CI = IL[I_C]
    PI = IL[I_P]
    BA = IL[I_BA]
    BX = FL[F_BX]
    b = CI[c * NC + C_BOX]
    dep = CI[c * NC + C_DEP]
    changed = False
    for j in range(dep):
        at = BA[b + j]
        lo, hi = INF, -INF
        s = CI[c * NC + C_LH]
        while s >= 0:
            a, z = _ival(s, at, p_start, p_end, p_attr, p_lo, p_hi)
            lo = min(lo, a)
            hi = max(hi, z)
            s = NEXT[s]
        DP = IL[I_DP]
        for x in range(CI[c * NC + C_DS], CI[c * NC + C_DS] + CI[c * NC + C_DC]):
            p = DP[x]
            r = PI[p * NP + P_ROOT]
            rb = CI[r * NC + C_BOX] + j
            lo = min(lo, BX[4 * rb + B_SL])
            hi = max(hi, BX[4 * rb + B_SH])
        if lo != BX[4 * (b + j) + B_OL] or hi != BX[4 * (b + j) + B_OH]:
            changed = True
            BX[4 * (b + j) + B_OL] = lo
            BX[4 * (b + j) + B_OH] = hi
    return changed


@numba.njit(cache=True)
def _recompute_sub(IL, FL, c):
    _touch_c(IL, c)
    CI = IL[I_C]
    BX = FL[F_BX]
    b = CI[c * NC + C_BOX]
    lc, rc = CI[c * NC + C_L], CI[c * NC + C_R]
    changed = False
    for j in range(CI[c * NC + C_DEP]):
        lo, hi = BX[4 * (b + j) + B_OL], BX[4 * (b + j) + B_OH]
        for ch in (lc, rc):
            if ch >= 0:
                cb = CI[ch * NC + C_BOX] + j
                lo = min(lo, BX[4 * cb + B_SL])
                hi = max(hi, BX[4 * cb + B_SH])
        if lo != BX[4 * (b + j) + B_SL] or hi != BX[4 * (b + j) + B_SH]:
            changed = True
            BX[4 * (b + j) + B_SL] = lo
            BX[4 * (b + j) + B_SH] = hi
    return changed


@numba.njit(cache=True)
def _refresh_up(IL, FL, c, own_changed, NEXT, p_start, p_end, p_attr, p_lo, p_hi):
    """After the own box of ``c`` was recomputed (``own_changed``: it changed, or a child
    went): subtree boxes up its c-directory, then the owner c-node's own box, and so on up to
    the root, stopping where nothing changes."""
    CI = IL[I_C]
    PI = IL[I_P]
    node = c
    while own_changed and node > 0:
        changed = _recompute_sub(IL, FL, node)
        while changed and CI[node * NC + C_PAR] >= 0:
            node = CI[node * NC + C_PAR]
            changed = _recompute_sub(IL, FL, node)
        if not changed:
            return
        owner = PI[CI[node * NC + C_PN] * NP + P_OWN]
        own_changed = _recompute_own(IL, FL, owner, NEXT, p_start, p_end, p_attr, p_lo, p_hi)
        node = owner


# ----------------------------------------------------------------------------- splitting
@numba.njit(cache=True)
def _fen_add(cnt, mx, i, h):
    n = cnt.shape[0]
    i += 1
    while i <= n:
        cnt[i - 1] += 1
        if h > mx[i - 1]:
            mx[i - 1] = h
        i += i & (-i)


@numba.njit(cache=True)
def _fen_query(cnt, mx, i):
    """(count, max) over positions < i."""
    c = 0
    m = -INF
    while i > 0:
        c += cnt[i - 1]
        if mx[i - 1] > m:
            m = mx[i - 1]
        i -= i & (-i)
    return c, m


@numba.njit(cache=True)
def _best_split_up(lo, hi, alpha):
    """The exhaustive split over the ordering by upper bound (left side = first I).
    Returns (overlap length, overlap count, imbalance, I, threshold) of the best valid I, or
    overlap = -1 when none is valid. Every I in O(log n) with Fenwick trees over the lower
    bounds of the suffix (count and max upper bound of those <= threshold)."""
    n = lo.shape[0]
    order = np.argsort(hi, kind="mergesort")
    l_s = lo[order]
    h_s = hi[order]
    lo_sorted = np.sort(lo)
    rank = np.searchsorted(lo_sorted, l_s)              # rank of each element's lower bound
    cnt = np.zeros(n, np.int64)
    mx = np.full(n, -INF)
    suf_min = INF
    best_ov, best_oc, best_imb, best_i, best_t = -1.0, 0, 0, -1, 0.0
    for I in range(n - 1, alpha - 1, -1):
        _fen_add(cnt, mx, rank[I], h_s[I])
        suf_min = min(suf_min, l_s[I])
        if I > n - alpha:
            continue
        t = h_s[I - 1]
        r = np.searchsorted(lo_sorted, t, side="right")
        oc, omax = _fen_query(cnt, mx, r)
        size = n - I
        rc = size - oc
        if rc < alpha:
            continue
        ov = 0.0 if oc == 0 else omax - suf_min
        imb = abs(I - rc)
        if (best_ov < 0 or ov < best_ov or (ov == best_ov and (oc < best_oc or (oc == best_oc and imb < best_imb)))):
            best_ov, best_oc, best_imb, best_i, best_t = ov, oc, imb, I, t
    return best_ov, best_oc, best_imb, best_i, best_t


@numba.njit(cache=True)
def _split(lo, hi, alpha, exhaustive, blo, bhi):
    """Sides (0 overlap, 1 left, 2 right) of a leaf bucket's expressions, or an empty array
    when no split separates anything. ``blo, bhi``: the bucket on the active dimension."""
    n = lo.shape[0]
    side = np.zeros(n, np.int8)
    found = False
    if exhaustive:
        a = _best_split_up(lo, hi, alpha)
        b = _best_split_up(-hi, -lo, alpha)              # the mirrored ordering
        use_b = b[0] >= 0 and (a[0] < 0 or b[0] < a[0] or (b[0] == a[0] and (b[1] < a[1] or (b[1] == a[1] and b[2] < a[2]))))
        if a[0] >= 0 or b[0] >= 0:
            found = True
            if not use_b:
                # left: the first I by (hi, stable); they all end at or before t
                order = np.argsort(hi, kind="mergesort")
                t = a[4]
                for j in range(n):
                    e = order[j]
                    if j < a[3]:
                        side[e] = 1
                    elif lo[e] > t:
                        side[e] = 2
            else:
                order = np.argsort(-lo, kind="mergesort")
                t = -b[4]                                  # right side starts at or after t
                for j in range(n):
                    e = order[j]
                    if j < b[3]:
                        side[e] = 2
                    elif hi[e] < t:
                        side[e] = 1
    else:
        # approximate: leftmost by upper bound to the left, rightmost by lower bound to the
        # right, alternately; what would touch the other side stays in the overlap bucket
        up = np.argsort(hi, kind="mergesort")
        dn = np.argsort(-lo, kind="mergesort")
        done = np.zeros(n, np.bool_)
        llo, lhi, rlo, rhi = INF, -INF, INF, -INF
        nl = nr = 0
        i = j = 0
        turn = 0
        left = n
        while left > 0:
            if turn == 0:
                while done[up[i]]:
                    i += 1
                e = up[i]
                if lo[e] <= rhi and hi[e] >= rlo:
                    side[e] = 0
                else:
                    side[e] = 1
                    nl += 1
                    llo = min(llo, lo[e])
                    lhi = max(lhi, hi[e])
            else:
                while done[dn[j]]:
                    j += 1
                e = dn[j]
                if lo[e] <= lhi and hi[e] >= llo:
                    side[e] = 0
                else:
                    side[e] = 2
                    nr += 1
                    rlo = min(rlo, lo[e])
                    rhi = max(rhi, hi[e])
            done[e] = True
            left -= 1
            turn = 1 - turn
        # an element placed left before a later right one overlapped it goes to the middle
        for e in range(n):
            if side[e] == 1 and hi[e] >= rlo:
                side[e] = 0
                nl -= 1
            elif side[e] == 2 and lo[e] <= lhi:
                side[e] = 0
                nr -= 1
        found = nl >= alpha and nr >= alpha
        if not found:
            side[:] = 0
    if not found:
        # space clustering: halve the bucket (the median of the finite bounds if it is unbounded)
        if np.isfinite(blo) and np.isfinite(bhi):
            s = 0.5 * (blo + bhi)
        else:
            fin = np.concatenate((lo[np.isfinite(lo)], hi[np.isfinite(hi)]))
            if fin.shape[0] == 0:
                return np.zeros(0, np.int8)
            s = np.median(fin)
        nl = nr = 0
        for e in range(n):
            if hi[e] < s:
                side[e] = 1
                nl += 1
            elif lo[e] > s:
                side[e] = 2
                nr += 1
            else:
                side[e] = 0
        if nl == 0 and nr == 0:
            return np.zeros(0, np.int8)
        return _mark_space(side)
    return side


@numba.njit(cache=True)
def _mark_space(side):
    # space splits are reported with side + 3 so that the caller can count them
    for e in range(side.shape[0]):
        side[e] += 3
    return side


# ----------------------------------------------------------------------------- insertion
@numba.njit(cache=True)
def _attach_child(IL, FL, node, c, which):
    _touch_c(IL, node)
    _touch_c(IL, c)
    CI = IL[I_C]
    CI[node * NC + (C_L if which == 1 else C_R)] = c
    CI[c * NC + C_PAR] = node


@numba.njit(cache=True)
def _insert_cdir(IL, FL, q, root, s, lo, hi, p_start, p_end, p_attr, p_lo, p_hi):
    """Alg. 2: the c-directory node under ``root`` where ``s`` (interval [lo, hi] on the
    active dimension) has its home bucket; boxes on the way are extended."""
    node = root
    beta = q[Q_BETA]
    # the tables, once: the descent adds no node (a new one ends it), so none is replaced
    CI = IL[I_C]
    BX = FL[F_BX]
    BA = IL[I_BA]
    while True:
        lc, rc = CI[node * NC + C_L], CI[node * NC + C_R]
        if lc < 0 and rc < 0:
            _extend_rows(IL, CI, BA, BX, node, s, True, p_start, p_end, p_attr, p_lo, p_hi)
            return node
        d = CI[node * NC + C_DEP]
        j = CI[node * NC + C_BOX] + d - 1
        slo, shi = BX[4 * j + B_SL], BX[4 * j + B_SH]
        nlo, nhi = min(slo, lo), max(shi, hi)
        if (nhi - nlo) > beta * (shi - slo):
            # bottom-up expansion: a new parent bucket holding s above this subtree
            par, pn = CI[node * NC + C_PAR], CI[node * NC + C_PN]
            new = _new_c(IL, FL, d, par, pn, node, -1)
            CI = IL[I_C]
            if par < 0:
                IL[I_P][pn * NP + P_ROOT] = new
                _touch_p(IL, pn)
            else:
                _touch_c(IL, par)
            if par < 0:
                pass
            elif CI[par * NC + C_L] == node:
                CI[par * NC + C_L] = new
            else:
                CI[par * NC + C_R] = new
            _attach_child(IL, FL, new, node, 1 if nhi > shi else 2)
            BX = FL[F_BX]
            b_new, b_old = CI[new * NC + C_BOX], CI[node * NC + C_BOX]
            for t in range(d):
                BX[4 * (b_new + t) + B_SL] = BX[4 * (b_old + t) + B_SL]
                BX[4 * (b_new + t) + B_SH] = BX[4 * (b_old + t) + B_SH]
            _extend(IL, FL, new, s, True, p_start, p_end, p_attr, p_lo, p_hi)
            IL[I_NUM][U_EXPAND] += 1
            return new
        _extend_rows(IL, CI, BA, BX, node, s, False, p_start, p_end, p_attr, p_lo, p_hi)
        il = ir = False
        if lc >= 0:
            lj = CI[lc * NC + C_BOX] + d - 1
            il = lo <= BX[4 * lj + B_SH] and hi >= BX[4 * lj + B_SL]
        if rc >= 0:
            rj = CI[rc * NC + C_BOX] + d - 1
            ir = lo <= BX[4 * rj + B_SH] and hi >= BX[4 * rj + B_SL]
        if il and ir:
            _extend_rows(IL, CI, BA, BX, node, s, True, p_start, p_end, p_attr, p_lo, p_hi)
            return node
        if il:
            node = lc
            continue
        if ir:
            node = rc
            continue
        if lc >= 0 and rc >= 0:
            if hi < BX[4 * lj + B_SL]:
                node = lc
            elif lo > BX[4 * rj + B_SH]:
                node = rc
            elif hi - BX[4 * lj + B_SH] <= BX[4 * rj + B_SL] - lo:          # in the gap: the side that grows less
                node = lc
            else:
                node = rc
            continue
        # one child: s goes to it if on its far side or ... a new child on the missing side
        ch = lc if lc >= 0 else rc
        cj = CI[ch * NC + C_BOX] + d - 1
        missing_right = lc >= 0
        if (missing_right and hi < BX[4 * cj + B_SL]) or (not missing_right and lo > BX[4 * cj + B_SH]):
            node = ch
            continue
        new = _new_c(IL, FL, d, node, CI[node * NC + C_PN], node, -1)
        _attach_child(IL, FL, node, new, 2 if missing_right else 1)
        _extend(IL, FL, new, s, True, p_start, p_end, p_attr, p_lo, p_hi)
        return new


@numba.njit(cache=True)
def _partition(IL, FL, q, c, tasks, n_tasks, HOME, NEXT, PREV, mark, acnt,
               p_start, p_end, p_attr, p_lo, p_hi, p_w, score):
    """Alg. 4: while the l-node of ``c`` overflows, its most popular unused attribute becomes
    a p-node and its expressions move to the new c-directory (clustered next)."""
    A = int(q[Q_A])
    CI = IL[I_C]
    if CI[c * NC + C_LC] <= A:
        return tasks, n_tasks
    BA = IL[I_BA]
    b, dep = CI[c * NC + C_BOX], CI[c * NC + C_DEP]
    for j in range(b, b + dep):
        mark[BA[j]] = -2                                     # used on the path
    # attribute -> expressions of this l-node (CSR over the attributes they have)
    n_pairs = 0
    s = CI[c * NC + C_LH]
    touched = np.empty(16, np.int64)
    n_t = 0
    while s >= 0:
        for p in range(p_start[s], p_end[s]):
            a = p_attr[p]
            if mark[a] == -1:
                if acnt[a] == 0:
                    if n_t == touched.shape[0]:
                        touched = np.concatenate((touched, np.empty(n_t, np.int64)))
                    touched[n_t] = a
                    n_t += 1
                acnt[a] += 1
                n_pairs += 1
        s = NEXT[s]
    attrs = np.sort(touched[:n_t])
    start = np.empty(n_t + 1, np.int64)
    start[0] = 0
    pos_of = np.empty(n_t, np.int64)
    for i in range(n_t):
        start[i + 1] = start[i] + acnt[attrs[i]]
    members = np.empty(n_pairs, np.int64)
    fill = start[:n_t].copy()
    s = CI[c * NC + C_LH]
    while s >= 0:
        for p in range(p_start[s], p_end[s]):
            a = p_attr[p]
            if mark[a] == -1:
                i = np.searchsorted(attrs, a)
                members[fill[i]] = s
                fill[i] += 1
        s = NEXT[s]
    remaining = np.empty(n_t, np.int64)
    for i in range(n_t):
        remaining[i] = acnt[attrs[i]]
        acnt[attrs[i]] = 0
        pos_of[i] = i
    for j in range(b, b + dep):
        mark[BA[j]] = -1
    while IL[I_C][c * NC + C_LC] > A:
        best = -1
        for i in range(n_t):
            if remaining[i] > 0 and (best < 0 or remaining[i] > remaining[best]):
                best = i
        if best < 0:
            break                                           # nothing left to partition on
        a = attrs[best]
        pnode = _new_p(IL, FL, c, a)
        IL[I_NUM][U_PART] += 1
        root = IL[I_P][pnode * NP + P_ROOT]
        for m in range(start[best], start[best + 1]):
            s = members[m]
            if HOME[s] != c:
                continue
            CI = IL[I_C]
            _l_pop(IL, HOME, NEXT, PREV, s)
            for p in range(p_start[s], p_end[s]):          # s leaves every other attribute's count
                at = p_attr[p]
                i = np.searchsorted(attrs, at)
                if i < n_t and attrs[i] == at:
                    remaining[i] -= 1
            lo, hi = _ival(s, a, p_start, p_end, p_attr, p_lo, p_hi)
            home = _insert_cdir(IL, FL, q, root, s, lo, hi, p_start, p_end, p_attr, p_lo, p_hi)
            _l_push(IL, HOME, NEXT, PREV, home, s)
            _sum_add(IL, FL, q, I_C, home, s, p_start, p_end, p_attr, p_w, score)
            _rank_add(IL, pnode, 1)
            _sum_add(IL, FL, q, I_P, pnode, s, p_start, p_end, p_attr, p_w, score)
        tasks, n_tasks = _push_task(tasks, n_tasks, root, T_CLUSTER)
    _lnode_summary(IL, FL, q, c, NEXT, p_start, p_end, p_attr, p_w, score)
    return tasks, n_tasks


@numba.njit(cache=True)
def _push_task(tasks, n, node, kind):
    if n == tasks.shape[0]:
        bigger = np.empty((2 * n + 8, 2), np.int64)
        bigger[:n] = tasks[:n]
        tasks = bigger
    tasks[n, 0] = node
    tasks[n, 1] = kind
    return tasks, n + 1


@numba.njit(cache=True)
def _cluster(IL, FL, q, c, tasks, n_tasks, HOME, NEXT, PREV,
             p_start, p_end, p_attr, p_lo, p_hi, p_w, score):
    """Alg. 5 on a leaf c-directory node that is not partitioned: split it into L/O/R.
    Returns (tasks, n_tasks, done); not done: the split separated nothing (partition it)."""
    CI = IL[I_C]
    n = CI[c * NC + C_LC]
    slots = np.empty(n, np.int64)
    lo = np.empty(n)
    hi = np.empty(n)
    d = CI[c * NC + C_DEP]
    b = CI[c * NC + C_BOX]
    at = IL[I_BA][b + d - 1]
    s = CI[c * NC + C_LH]
    i = 0
    while s >= 0:
        slots[i] = s
        lo[i], hi[i] = _ival(s, at, p_start, p_end, p_attr, p_lo, p_hi)
        i += 1
        s = NEXT[s]
    alpha = max(1, int(np.ceil(q[Q_ALPHA] * n)))
    side = _split(lo, hi, alpha, q[Q_EXH] > 0, FL[F_BX][4 * (b + d - 1) + B_OL], FL[F_BX][4 * (b + d - 1) + B_OH])
    if side.shape[0] == 0:
        return tasks, n_tasks, False
    space = side[0] >= 3
    if space:
        side -= 3
        IL[I_NUM][U_SPACE] += 1
    IL[I_NUM][U_SPLIT] += 1
    pn = CI[c * NC + C_PN]
    kids = np.full(3, -1, np.int64)
    for i in range(n):
        w = side[i]
        if w == 0:
            continue
        if kids[w] < 0:
            kids[w] = _new_c(IL, FL, d, c, pn, c, -1)
            _attach_child(IL, FL, c, kids[w], w)
        ch = kids[w]
        CI = IL[I_C]
        _l_pop(IL, HOME, NEXT, PREV, slots[i])
        _l_push(IL, HOME, NEXT, PREV, ch, slots[i])
        _extend(IL, FL, ch, slots[i], True, p_start, p_end, p_attr, p_lo, p_hi)
        _sum_add(IL, FL, q, I_C, ch, slots[i], p_start, p_end, p_attr, p_w, score)
    _recompute_own(IL, FL, c, NEXT, p_start, p_end, p_attr, p_lo, p_hi)
    _lnode_summary(IL, FL, q, c, NEXT, p_start, p_end, p_attr, p_w, score)
    tasks, n_tasks = _push_task(tasks, n_tasks, c, T_PARTITION)
    for w in (1, 2):
        if kids[w] >= 0:
            tasks, n_tasks = _push_task(tasks, n_tasks, kids[w], T_CLUSTER)
    return tasks, n_tasks, True


@numba.njit(cache=True)
def _settle(IL, FL, q, c0, kind0, HOME, NEXT, PREV, mark, acnt,
            p_start, p_end, p_attr, p_lo, p_hi, p_w, score):
    """Run the partition/cluster cascade from (c0, kind0) until no l-node it reached
    overflows (or can be cut further)."""
    tasks = np.empty((16, 2), np.int64)
    n_tasks = 0
    tasks, n_tasks = _push_task(tasks, n_tasks, c0, kind0)
    A = int(q[Q_A])
    while n_tasks > 0:
        n_tasks -= 1
        c, kind = tasks[n_tasks, 0], tasks[n_tasks, 1]
        CI = IL[I_C]
        if CI[c * NC + C_LC] <= A:
            continue
        leaf = CI[c * NC + C_L] < 0 and CI[c * NC + C_R] < 0 and CI[c * NC + C_DC] == 0
        if kind == T_CLUSTER and c != 0 and leaf:
            tasks, n_tasks, done = _cluster(IL, FL, q, c, tasks, n_tasks, HOME, NEXT, PREV,
                                            p_start, p_end, p_attr, p_lo, p_hi, p_w, score)
            if done:
                continue
        tasks, n_tasks = _partition(IL, FL, q, c, tasks, n_tasks, HOME, NEXT, PREV, mark, acnt,
                                    p_start, p_end, p_attr, p_lo, p_hi, p_w, score)


@numba.njit(cache=True)
def _insert_many(IL, FL, q, slots, HOME, NEXT, PREV, mark, acnt,
                 p_start, p_end, p_attr, p_lo, p_hi, p_w, score):
    """Alg. 1 for each expression slot in turn."""
    for i in range(slots.shape[0]):
        s = slots[i]
        for p in range(p_start[s], p_end[s]):
            mark[p_attr[p]] = p
        c = 0
        while True:
            CI = IL[I_C]
            PI = IL[I_P]
            best = -1
            bc = -1
            DA, DP = IL[I_DA], IL[I_DP]
            ds, dc = CI[c * NC + C_DS], CI[c * NC + C_DC]
            if dc <= 2 * (p_end[s] - p_start[s]):
                for x in range(ds, ds + dc):
                    pn = DP[x]
                    if mark[DA[x]] >= 0 and PI[pn * NP + P_CNT] > bc:
                        best = pn
                        bc = PI[pn * NP + P_CNT]
            else:
                for p in range(p_start[s], p_end[s]):
                    x = find_sorted(DA, ds, ds + dc, p_attr[p])
                    if x >= 0 and PI[DP[x] * NP + P_CNT] > bc:
                        best = DP[x]
                        bc = PI[best * NP + P_CNT]
            if best < 0:
                _l_push(IL, HOME, NEXT, PREV, c, s)
                _sum_add(IL, FL, q, I_C, c, s, p_start, p_end, p_attr, p_w, score)
                for p in range(p_start[s], p_end[s]):
                    mark[p_attr[p]] = -1
                if IL[I_C][c * NC + C_LC] > q[Q_A]:
                    _settle(IL, FL, q, c, T_PARTITION if c == 0 else T_CLUSTER, HOME, NEXT, PREV, mark, acnt,
                            p_start, p_end, p_attr, p_lo, p_hi, p_w, score)
                break
            _rank_add(IL, best, 1)
            _sum_add(IL, FL, q, I_P, best, s, p_start, p_end, p_attr, p_w, score)
            row = mark[PI[best * NP + P_ATTR]]
            c = _insert_cdir(IL, FL, q, PI[best * NP + P_ROOT], s, p_lo[row], p_hi[row],
                             p_start, p_end, p_attr, p_lo, p_hi)
    # mark is -1 again for every attribute


@numba.njit(cache=True)
def _bulk_load(IL, FL, q, slots, HOME, NEXT, PREV, mark, acnt,
               p_start, p_end, p_attr, p_lo, p_hi, p_w, score):
    """BE*-B: every expression into the root l-node, then one top-down cascade."""
    for i in range(slots.shape[0]):
        _l_push(IL, HOME, NEXT, PREV, 0, slots[i])
        _sum_add(IL, FL, q, I_C, 0, slots[i], p_start, p_end, p_attr, p_w, score)
    _settle(IL, FL, q, 0, T_PARTITION, HOME, NEXT, PREV, mark, acnt,
            p_start, p_end, p_attr, p_lo, p_hi, p_w, score)


# ----------------------------------------------------------------------------- deletion
@numba.njit(cache=True)
def _unlink_empty(IL, FL, c):
    """Remove the empty leaf ``c`` (no l-node, no p-directory, no children); returns the
    c-node whose boxes must be recomputed and whether that is its own box (a p-node's owner)
    or its subtree box (a c-directory parent)."""
    _touch_c(IL, c)
    CI = IL[I_C]
    PI = IL[I_P]
    num = IL[I_NUM]
    CI[c * NC + C_ALIVE] = 0
    num[U_DEADC] += 1
    num[U_LIVEC] -= 1
    par = CI[c * NC + C_PAR]
    if par >= 0:
        _touch_c(IL, par)
        CI = IL[I_C]
        if CI[par * NC + C_L] == c:
            CI[par * NC + C_L] = -1
        else:
            CI[par * NC + C_R] = -1
        return par, False
    pn = CI[c * NC + C_PN]
    owner = PI[pn * NP + P_OWN]
    _d_del(IL, owner, PI[pn * NP + P_ATTR])
    PI[pn * NP + P_ALIVE] = 0
    _touch_p(IL, pn)
    num[U_DEADP] += 1
    num[U_LIVEP] -= 1
    return owner, True


@numba.njit(cache=True)
def _remove_many(IL, FL, q, slots, HOME, NEXT, PREV, p_start, p_end, p_attr, p_lo, p_hi, p_w, score):
    A = q[Q_A]
    under = max(1.0, q[Q_ALPHA] * A)
    for i in range(slots.shape[0]):
        s = slots[i]
        CI = IL[I_C]
        PI = IL[I_P]
        c = HOME[s]
        _l_pop(IL, HOME, NEXT, PREV, s)
        node = c                                      # ranks along the path
        while node > 0:
            pn = CI[node * NC + C_PN]
            _rank_add(IL, pn, -1)
            node = PI[pn * NP + P_OWN]
        _lnode_summary(IL, FL, q, c, NEXT, p_start, p_end, p_attr, p_w, score)
        if c == 0:
            continue
        leaf = CI[c * NC + C_L] < 0 and CI[c * NC + C_R] < 0 and CI[c * NC + C_DC] == 0
        par = CI[c * NC + C_PAR]
        n_left = CI[c * NC + C_LC]
        if leaf and 0 < n_left < under and par >= 0 and CI[par * NC + C_DC] == 0 and CI[par * NC + C_LC] + n_left <= A:
            # merge rule: the underflowing leaf goes back into its open parent bucket
            while CI[c * NC + C_LH] >= 0:
                x = CI[c * NC + C_LH]
                _l_pop(IL, HOME, NEXT, PREV, x)
                _l_push(IL, HOME, NEXT, PREV, par, x)
                _sum_add(IL, FL, q, I_C, par, x, p_start, p_end, p_attr, p_w, score)
            IL[I_NUM][U_MERGE] += 1
            n_left = 0
        if leaf and n_left == 0:
            _remove_empty_chain(IL, FL, c, NEXT, p_start, p_end, p_attr, p_lo, p_hi)
            continue
        changed = _recompute_own(IL, FL, c, NEXT, p_start, p_end, p_attr, p_lo, p_hi)
        _refresh_up(IL, FL, c, changed, NEXT, p_start, p_end, p_attr, p_lo, p_hi)


@numba.njit(cache=True)
def _remove_empty_chain(IL, FL, c, NEXT, p_start, p_end, p_attr, p_lo, p_hi):
    """A c-directory node left with nothing (no l-node, p-directory or children) goes too,
    and so on upwards."""
    while c > 0:
        CI = IL[I_C]
        if (CI[c * NC + C_L] >= 0 or CI[c * NC + C_R] >= 0 or CI[c * NC + C_DC] > 0
                or CI[c * NC + C_LC] > 0):
            return
        node, _ = _unlink_empty(IL, FL, c)
        _recompute_own(IL, FL, node, NEXT, p_start, p_end, p_attr, p_lo, p_hi)
        _refresh_up(IL, FL, node, True, NEXT, p_start, p_end, p_attr, p_lo, p_hi)
        c = node


# ----------------------------------------------------------------------------- top-k
@numba.njit(cache=True, inline="always")
def _hpush(hb, hp, n, b, p):
    """Push (b, p) on the max-heap ``hb/hp[:n]`` (the caller keeps room for it); returns the
    new size."""
    j = n
    while j > 0:
        par = (j - 1) >> 1
        if hb[par] < b:
            hb[j] = hb[par]
            hp[j] = hp[par]
            j = par
        else:
            break
    hb[j] = b
    hp[j] = p
    return n + 1


@numba.njit(cache=True, inline="always")
def _hpop(hb, hp, n):
    b, p = hb[0], hp[0]
    n -= 1
    xb, xp = hb[n], hp[n]
    j = 0
    while True:
        l = 2 * j + 1
        if l >= n:
            break
        m = l
        if l + 1 < n and hb[l + 1] > hb[l]:
            m = l + 1
        if hb[m] > xb:
            hb[j] = hb[m]
            hp[j] = hp[m]
            j = m
        else:
            break
    if n > 0:
        hb[j] = xb
        hp[j] = xp
    return b, p, n


# ----------------------------------------------------------------------------- the match view
@numba.njit(cache=True, inline="always")
def _on_path(BA, pb, pd, a):
    """Whether attribute ``a`` is one of the path's ``BA[pb:pb + pd]``."""
    for j in range(pb, pb + pd):
        if BA[j] == a:
            return True
    return False


@numba.njit(cache=True, inline="always")
def _mark_path(MK, BA, pb, pd):
    """The path ``BA[pb:pb + pd]`` marked in ``MK`` (when not empty: a place per attribute
    below ``MK.shape[0] - 1``, the current stamp last; ``_full_write``), so that ``_on_path_m``
    is one read instead of a pass over the path."""
    n = MK.shape[0] - 1
    if n >= 0:
        t = MK[n] + 1
        MK[n] = t
        for j in range(pb, pb + pd):
            if BA[j] < n:
                MK[BA[j]] = t


@numba.njit(cache=True, inline="always")
def _on_path_m(MK, BA, pb, pd, a):
    """``_on_path`` through the marks of ``_mark_path`` (the path last marked) where ``MK``
    holds a place for ``a``."""
    n = MK.shape[0] - 1
    if a < n:
        return MK[a] == MK[n]
    return _on_path(BA, pb, pd, a)


@numba.njit(cache=True)
def _class_shape(WA, i0, i1, BA, pb, pd, MK):
    """Of the size class ``WA[i0:i1]`` under the path ``BA[pb:pb + pd]``: its path attributes,
    its other attributes, the first and the number of 32-attribute words they span
    (``MK``: ``_on_path_m``)."""
    npath = 0
    amin, amax = -1, -1
    for x in range(i0, i1):
        a = WA[x] & 0xFFFFFFFF
        if _on_path_m(MK, BA, pb, pd, a):
            npath += 1
        else:
            if amin < 0:
                amin = a
            amax = a
    if amin < 0:
        return npath, 0, 0, 0
    return npath, i1 - i0 - npath, amin >> 5, (amax >> 5) - (amin >> 5) + 1


@numba.njit(cache=True, inline="always")
def _class_packed(WA, i1):
    """Whether the size class ending at ``WA[i1 - 1]`` (sorted by attribute) is packed: all its
    attributes fit 16 bits."""
    return (WA[i1 - 1] & 0xFFFFFFFF) < PACK_ATTRS


@numba.njit(cache=True, inline="always")
def _quant(w, sc):
    """The fewest multiples of ``sc`` at or above ``w`` (>= 0): a packed weight, still a bound.
    A scale beyond float32 (weights above about 2e43) is infinite: one multiple, an infinite
    bound, as an unpacked float32 weight beyond its range."""
    if sc == np.inf:
        return 1
    q = int(np.ceil(w / sc))
    if q * sc < w:
        q += 1
    return q


@numba.njit(cache=True, inline="always")
def _stack_room(stack, ns, more):
    """``stack`` (``ns`` held) with room for ``more`` entries: itself, or a copy twice that
    size (a c-node's children and its p-nodes' roots, pushed by a walk of the tree)."""
    if ns + more <= stack.shape[0]:
        return stack
    bigger = np.empty(2 * (ns + more), np.int64)
    bigger[:ns] = stack[:ns]
    return bigger


@numba.njit(cache=True, inline="always")
def _gather_l(CI, c, NEXT, XS, nx):
    """The expression slots of c-node ``c``'s l-node appended to ``XS[:nx]``: the new count,
    or -1 when ``XS`` cannot hold them (``_below``)."""
    s = CI[c * NC + C_LH]
    while s >= 0:
        if nx == XS.shape[0]:
            return -1
        XS[nx] = s
        nx += 1
        s = NEXT[s]
    return nx


@numba.njit(cache=True)
def _below(IL, isp, node, NEXT, XS, p_start, p_end, p_attr, BA, pb, pd, MK):
    """The expression slots below p-node ``node`` (``isp``: in its c-directory and every
    p-node below it) or in c-node ``node``'s l-node, into ``XS``; their number, or -1 (no list
    class then) when there are more than ``XS`` holds or one has an attribute twice (its
    predicates off the path ``BA[pb:pb + pd]`` are not its size minus the path's; ``MK``:
    the path's marks, ``_mark_path``, or empty)."""
    cap = XS.shape[0]
    if cap == 0:
        return -1                              # list_cap 0: no list classes
    CI = IL[I_C]
    if not isp:
        nx = _gather_l(CI, node, NEXT, XS, 0)
        return nx if nx < 0 else _once(XS, nx, p_start, p_end, p_attr, BA, pb, pd, MK)
    PI = IL[I_P]
    if PI[node * NP + P_CNT] > cap:
        return -1
    DP = IL[I_DP]
    stack = np.empty(64, np.int64)
    stack[0] = PI[node * NP + P_ROOT]
    ns = 1
    nx = 0
    while ns > 0:
        ns -= 1
        c = stack[ns]
        nx = _gather_l(CI, c, NEXT, XS, nx)
        if nx < 0:
            return -1
        ds, dc = CI[c * NC + C_DS], CI[c * NC + C_DC]
        stack = _stack_room(stack, ns, dc + 2)
        for ch in (CI[c * NC + C_L], CI[c * NC + C_R]):
            if ch >= 0:
                stack[ns] = ch
                ns += 1
        for x in range(ds, ds + dc):
            stack[ns] = PI[DP[x] * NP + P_ROOT]
            ns += 1
    return _once(XS, nx, p_start, p_end, p_attr, BA, pb, pd, MK)


@numba.njit(cache=True)
def _once(XS, nx, p_start, p_end, p_attr, BA, pb, pd, MK):
    """``nx``, or -1 when an expression of ``XS[:nx]`` has other than its size minus ``pd``
    predicates off the path ``BA[pb:pb + pd]`` (an attribute twice: no list class). ``MK``: the
    path's marks (``_mark_path``, ``_on_path_m``: at 1M the full view's gathering 1.3 s ->
    0.3 s), or empty."""
    for i in range(nx):
        s = XS[i]
        o = 0
        for p in range(p_start[s], p_end[s]):
            if not _on_path_m(MK, BA, pb, pd, p_attr[p]):
                o += 1
        if o != p_end[s] - p_start[s] - pd:
            return -1
    return nx


@numba.njit(cache=True)
def _list_count(XS, nx, size, npath, p_start, p_end):
    """Whether the packed short size class ``size`` (``npath`` path attributes) of a node
    whose expressions below are ``XS[:nx]`` is written as a list class: its number of
    expressions if so, else -1. A list class lists each expression's own ``size -
    npath`` other attributes (``_below``: each has exactly that many), where there is at least
    one to list. (Lists only where they take at most 1, 1.5, 2, 3 or 4 times
    the union's words were slower on the bench's 1M tree: README, stop 41.)"""
    need = size - npath
    if nx < 0 or need < 1:
        return -1
    n = 0
    for i in range(nx):
        s = XS[i]
        n += p_end[s] - p_start[s] == size
    return n


@numba.njit(cache=True)
def _sum_floats(IL, R, base, mode, pb, pd, XS, nx, p_start, p_end, p_attr, MK):
    """Floats of the view of the summary of record ``base`` of ``R`` under the path
    ``BA[pb:pb + pd]`` (``_write_sum``)."""
    if mode == STATIC:
        return 0
    WA, BA = IL[I_WA], IL[I_BA]
    long_from = IL[I_NUM][U_LONG]
    ws, wc = R[base + WS], R[base + WC]
    n = 0
    i0 = ws
    while i0 < ws + wc:
        i1 = i0 + 1
        while i1 < ws + wc and (WA[i1] >> 32) == (WA[i0] >> 32):
            i1 += 1
        npath, nother, _, nw = _class_shape(WA, i0, i1, BA, pb, pd, MK)
        pk = _class_packed(WA, i1)
        if pk and nother < long_from:
            size = SZ_CAP - (WA[i0] >> 32)
            nl = _list_count(XS, nx, size, npath, p_start, p_end)
            if nl >= 0:                         # a list class: header, scale, path words, the lists
                n += 5 + npath + nl * (size - npath)
                i0 = i1
                continue
        per = 1 if pk else 2
        n += 4 + pk + per * npath               # a packed class's body starts with its scale
        n += 1 + nw if nother >= long_from else per * nother
        i0 = i1
    return (n + 1) // 2                         # 32-bit words (_write_sum), two a float


@numba.njit(cache=True)
def _p_sum_floats(IL, p, mode, NEXT, p_start, p_end, p_attr, XS, MK):
    """Floats of the view of p-node ``p``'s summary (its path: its root's)."""
    CI = IL[I_C]
    r = IL[I_P][p * NP + P_ROOT]
    pb, pd = CI[r * NC + C_BOX], CI[r * NC + C_DEP]
    _mark_path(MK, IL[I_BA], pb, pd)
    nx = _below(IL, True, p, NEXT, XS, p_start, p_end, p_attr, IL[I_BA], pb, pd, MK) if mode != STATIC else -1
    return _sum_floats(IL, IL[I_P], p * NP, mode, pb, pd, XS, nx, p_start, p_end, p_attr, MK)


@numba.njit(cache=True, inline="always")
def _put_up(S, SU, i, w):
    """``w`` (non-negative) at 32-bit place ``i`` as the smallest float32 at or above it: a
    float32 rounded to nearest may lie below ``w``, and a summary must bound it."""
    S[i] = w
    if S[i] < w:
        SU[i] += 1                              # the next float32 up (w >= 0, finite)


@numba.njit(cache=True)
def _write_sum(IL, FL, R, base, pb, pd, pos, XS, nx, p_start, p_end, p_attr, p_w, MK):
    """The summary of record ``base`` of ``R`` in the view at ``pos`` (returns the end) as
    32-bit words (``AR.view(uint32)`` from ``2 * pos``; half the cache lines of floats): per
    size class, largest first, (size, path attributes, body words, bit words), then the path's
    (attribute, weight) pairs (``BA[pb:pb + pd]``: every expression below has them), then the
    others. A weight is a float32 rounded up (``_put_up``: the bound stays a bound; scores are
    computed from the float64 weights of the expression rows). A short class (fewer others
    than ``num[U_LONG]``; bit words 0) lists them as (attribute, weight) pairs by attribute. A
    long one holds the first 32-attribute word they span, then per word the bit set of its
    attributes, and no weights: its bound takes the global maximum weight of each attribute
    (``_vbound``). An odd word count ends with a 0 word. A packed class (its attributes all
    below ``PACK_ATTRS``; flag ``PACKED`` in its bit-word count) has its body start with a
    float32 scale (its largest stored weight / ``PACK_Q``, rounded up) and holds each pair as
    one word, attribute | (the fewest multiples of the scale at or above the weight) << 16.
    A *list class* (``_list_count``: a packed short class of a node with at most ``num[U_LISTC]``
    expressions below, ``XS[:nx]``; flag ``LISTC``) holds, after its path words, each of its
    expressions' other attributes as packed words, ``size - path`` per expression: its bound
    (``_vbound``) is then exact up to the path's maxima, as the union's is not."""
    AR = FL[F_AR]
    S = AR.view(np.float32)
    SU = AR.view(np.uint32)
    WA = IL[I_WA]
    WM = FL[F_WM]
    BA = IL[I_BA]
    long_from = IL[I_NUM][U_LONG]
    ws, wc = R[base + WS], R[base + WC]
    i0 = ws
    w = 2 * pos
    while i0 < ws + wc:
        cls = WA[i0] >> 32
        i1 = i0 + 1
        while i1 < ws + wc and (WA[i1] >> 32) == cls:
            i1 += 1
        size = SZ_CAP - cls
        npath, nother, wlo, nw = _class_shape(WA, i0, i1, BA, pb, pd, MK)
        if nother < long_from:
            nw = 0
        pk = _class_packed(WA, i1)
        nl = _list_count(XS, nx, size, npath, p_start, p_end) if pk and nw == 0 else -1
        h = w
        SU[h] = size
        SU[h + 1] = npath
        SU[h + 3] = nw | (PACKED if pk else 0) | (LISTC if nl >= 0 else 0)
        w += 4
        sc = 0.0
        if pk:
            # the scale: the largest weight the class stores / PACK_Q, as a float32 rounded up
            wmx = 0.0
            for x in range(i0, i1):
                if nw == 0 or _on_path_m(MK, BA, pb, pd, WA[x] & 0xFFFFFFFF):
                    wmx = max(wmx, WM[x])
            _put_up(S, SU, w, wmx / PACK_Q if wmx > 0 else 1.0)
            sc = float(S[w])
            w += 1
        for j in range(pb, pb + pd):
            x = find_sorted(WA, i0, i1, _wkey(size, BA[j]))
            if x >= 0:
                if pk:
                    SU[w] = BA[j] | (_quant(WM[x], sc) << 16)
                    w += 1
                else:
                    SU[w] = BA[j]
                    _put_up(S, SU, w + 1, WM[x])
                    w += 2
        if nw > 0:
            SU[w] = wlo
            SU[w + 1: w + 1 + nw] = 0
            for x in range(i0, i1):
                a = WA[x] & 0xFFFFFFFF
                if not _on_path_m(MK, BA, pb, pd, a):
                    SU[w + 1 + (a >> 5) - wlo] |= np.uint32(1 << (a & 31))
            w += 1 + nw
        elif nl >= 0:
            for i in range(nx):
                s = XS[i]
                if p_end[s] - p_start[s] == size:
                    for p in range(p_start[s], p_end[s]):
                        a = p_attr[p]
                        if not _on_path_m(MK, BA, pb, pd, a):
                            SU[w] = a | (_quant(p_w[p], sc) << 16)
                            w += 1
        else:
            for x in range(i0, i1):
                a = WA[x] & 0xFFFFFFFF
                if not _on_path_m(MK, BA, pb, pd, a):
                    if pk:
                        SU[w] = a | (_quant(WM[x], sc) << 16)
                        w += 1
                    else:
                        SU[w] = a
                        _put_up(S, SU, w + 1, WM[x])
                        w += 2
        SU[h + 2] = w - h - 4
        i0 = i1
    if w & 1:
        SU[w] = 0
        w += 1
    return w // 2


@numba.njit(cache=True)
def _size_c(IL, c, mode, NEXT, p_start, p_end, p_attr, XS, MK):
    """Floats of the view block of c-node ``c`` (``_write_c``)."""
    CI = IL[I_C]
    base = c * NC
    _mark_path(MK, IL[I_BA], CI[base + C_BOX], CI[base + C_DEP])
    nx = _below(IL, False, c, NEXT, XS, p_start, p_end, p_attr, IL[I_BA], CI[base + C_BOX], CI[base + C_DEP], MK) \
        if mode != STATIC else -1
    return (4 + ND * CI[base + C_DC] + _sum_floats(IL, CI, base, mode, CI[base + C_BOX], CI[base + C_DEP], XS, nx,
                                                   p_start, p_end, p_attr, MK)
            + _expr_floats(CI, c, NEXT, p_start, p_end))


@numba.njit(cache=True, inline="always")
def _expr_floats(CI, c, NEXT, p_start, p_end):
    """Floats of c-node ``c``'s expressions in its view block (``_write_c``: 3 + 4 per
    predicate each)."""
    n = 0
    s = CI[c * NC + C_LH]
    while s >= 0:
        n += 3 + 4 * (p_end[s] - p_start[s])
        s = NEXT[s]
    return n


@numba.njit(cache=True)
def _write_c(IL, FL, c, pos, mode, NEXT, p_start, p_end, p_attr, p_op, p_a, p_b, p_w, set_off, ids, score, XS, MK):
    """The hot row of c-node ``c`` and its block at ``pos`` (returns the end): header
    (summary floats, most predicates or static bound, p-directory size, expression floats),
    the p-directory (attribute, the p-node's block, the p-node's c-directory box on the
    attribute: an event value outside it reaches nothing below, and its most predicates or
    static bound: a p-node that cannot beat the k-th score is passed over unread), the summary
    (``_write_sum``), then per expression (predicates, id as int64 bits, static score) and its predicate rows (attribute * 16 + operator, a or set start, b or
    set end, weight)."""
    CI = IL[I_C]
    HV = FL[F_HV]
    BX = FL[F_BX]
    base = c * NC
    h = c * NV
    dep = CI[base + C_DEP]
    if dep > 0:
        j = CI[base + C_BOX] + dep - 1
        HV[h + V_SL] = BX[4 * j + B_SL]
        HV[h + V_SH] = BX[4 * j + B_SH]
        HV[h + V_OL] = BX[4 * j + B_OL]
        HV[h + V_OH] = BX[4 * j + B_OH]
    else:
        HV[h + V_SL] = -INF
        HV[h + V_SH] = INF
        HV[h + V_OL] = -INF
        HV[h + V_OH] = INF
    HV[h + V_L] = CI[base + C_L]
    HV[h + V_R] = CI[base + C_R]
    HV[h + V_B] = pos
    nd, ds = CI[base + C_DC], CI[base + C_DS]
    _mark_path(MK, IL[I_BA], CI[base + C_BOX], dep)
    nx = _below(IL, False, c, NEXT, XS, p_start, p_end, p_attr, IL[I_BA], CI[base + C_BOX], dep, MK) if mode != STATIC \
        else -1
    nsum = _sum_floats(IL, CI, base, mode, CI[base + C_BOX], dep, XS, nx, p_start, p_end, p_attr, MK)
    _grow_view(FL, pos + 4 + ND * nd + nsum + _expr_floats(CI, c, NEXT, p_start, p_end))
    AR = FL[F_AR]
    AR[pos] = nsum
    AR[pos + 1] = FL[F_CS][c] if mode == STATIC else CI[base + NMAX]
    AR[pos + 2] = nd
    most = AR[pos + 1]
    w = pos + 4
    DA, DP = IL[I_DA], IL[I_DP]
    PI = IL[I_P]
    PV = IL[I_PV]
    for x in range(ds, ds + nd):
        AR[w] = DA[x]
        AR[w + 1] = PV[DP[x]]                  # its block (_full_view sets it once written)
        r = PI[DP[x] * NP + P_ROOT]
        j = CI[r * NC + C_BOX] + CI[r * NC + C_DEP] - 1
        AR[w + 2] = BX[4 * j + B_SL]
        AR[w + 3] = BX[4 * j + B_SH]
        AR[w + 4] = FL[F_PS][DP[x]] if mode == STATIC else PI[DP[x] * NP + NMAX]
        most = max(most, AR[w + 4])
        w += ND
    HV[h + V_M] = most
    if mode != STATIC:
        w = _write_sum(IL, FL, CI, base, CI[base + C_BOX], dep, w, XS, nx, p_start, p_end, p_attr, p_w, MK)
    e0 = w
    ARI = AR.view(np.int64)
    s = CI[base + C_LH]
    while s >= 0:
        AR[w] = p_end[s] - p_start[s]
        ARI[w + 1] = ids[s]                    # its id's bits: no random read of the id table
        AR[w + 2] = score[s] if mode == STATIC else 0.0
        w += 3
        for p in range(p_start[s], p_end[s]):
            op = p_op[p]
            AR[w] = p_attr[p] * 16 + op
            if op == IN or op == NIN:
                AR[w + 1] = set_off[p]
                AR[w + 2] = set_off[p + 1]
            else:
                AR[w + 1] = p_a[p]
                AR[w + 2] = p_b[p]
            AR[w + 3] = p_w[p]
            w += 4
        s = NEXT[s]
    AR[pos + 3] = w - e0
    return w


@numba.njit(cache=True)
def _write_p(IL, FL, p, pos, mode, NEXT, p_start, p_end, p_attr, p_w, XS, MK):
    """The block of p-node ``p`` at ``pos``: (summary floats, most predicates or static bound,
    root c-node, attribute), then its summary (``_write_sum``)."""
    PI = IL[I_P]
    base = p * NP
    IL[I_PV][p] = pos
    r = PI[base + P_ROOT]
    CI = IL[I_C]
    _mark_path(MK, IL[I_BA], CI[r * NC + C_BOX], CI[r * NC + C_DEP])
    nx = _below(IL, True, p, NEXT, XS, p_start, p_end, p_attr, IL[I_BA], CI[r * NC + C_BOX], CI[r * NC + C_DEP], MK) \
        if mode != STATIC else -1
    nsum = _sum_floats(IL, PI, base, mode, CI[r * NC + C_BOX], CI[r * NC + C_DEP], XS, nx, p_start, p_end, p_attr, MK)
    _grow_view(FL, pos + 4 + nsum)
    AR = FL[F_AR]
    AR[pos] = nsum
    AR[pos + 1] = FL[F_PS][p] if mode == STATIC else PI[base + NMAX]
    AR[pos + 2] = r
    AR[pos + 3] = PI[base + P_ATTR]
    w = pos + 4
    if mode != STATIC:
        w = _write_sum(IL, FL, PI, base, CI[r * NC + C_BOX], CI[r * NC + C_DEP], w, XS, nx, p_start, p_end, p_attr, p_w,
                       MK)
    return w


@numba.njit(cache=True, inline="always")
def _aligned(pos):
    """The first place from ``pos`` on where a view block starts a cache line."""
    return (pos + VIEW_ALIGN - 1) & ~(VIEW_ALIGN - 1)


@numba.njit(cache=True)
def _full_view(IL, FL, mode, NEXT, p_start, p_end, p_attr, p_op, p_a, p_b, p_w, set_off, ids, score):
    """Every live node's view anew, blocks in depth-first order (a c-node, its p-nodes, then
    their c-directories and its children)."""
    FL[F_AR] = np.empty(_full_size(IL, mode, NEXT, p_start, p_end, p_attr))
    _full_write(IL, FL, mode, NEXT, p_start, p_end, p_attr, p_op, p_a, p_b, p_w, set_off, ids, score)


@numba.njit(cache=True)
def _marks(p_attr):
    """``_mark_path``'s marks: a place per attribute an expression has, then the stamp."""
    na = 0
    for p in range(p_attr.shape[0]):
        na = max(na, p_attr[p] + 1)
    return np.zeros(na + 1, np.int64)


@numba.njit(cache=True)
def _full_size(IL, mode, NEXT, p_start, p_end, p_attr):
    """Floats of the full view's arena: every live node's block sized without list classes
    (no gathering below every small node: at 1M about 2 s), an eighth more (the writers grow
    the arena where the lists take more than that; by 4% at 1M)."""
    num = IL[I_NUM]
    CI = IL[I_C]
    PI = IL[I_P]
    XS0 = np.empty(0, np.int64)
    MK = _marks(p_attr)
    total = 0
    for c in range(num[U_C]):
        if CI[c * NC + C_ALIVE] == 1:
            total += _size_c(IL, c, mode, NEXT, p_start, p_end, p_attr, XS0, MK) + VIEW_ALIGN - 1
    for p in range(num[U_P]):
        if PI[p * NP + P_ALIVE] == 1:
            total += 4 + _p_sum_floats(IL, p, mode, NEXT, p_start, p_end, p_attr, XS0, MK) + VIEW_ALIGN - 1
    return max(total + total // 8, 64)


@numba.njit(cache=True)
def _full_begin(IL, FL, mode, NEXT, p_start, p_end, p_attr):
    """A full rewrite's start (``_refresh_view`` when most of the tree changed, or
    ``BETreeCore._refresh`` before it writes into an arena of its own): the changed nodes'
    marks cleared, the hot rows and p-node places sized to the tree; returns ``_full_size``."""
    num = IL[I_NUM]
    CI = IL[I_C]
    PI = IL[I_P]
    DL = IL[I_DIRTY]
    for i in range(num[U_NDIRTY]):
        x = DL[i]
        if x & 1 == 0:
            CI[(x >> 1) * NC + C_DIRTY] = 0
        else:
            PI[(x >> 1) * NP + P_DIRTY] = 0
    num[U_NDIRTY] = 0
    _grow_f(FL, F_HV, num[U_C] * NV, -1.0)
    _grow_i(IL, I_PV, num[U_P])
    return _full_size(IL, mode, NEXT, p_start, p_end, p_attr)


@numba.njit(cache=True)
def _full_write(IL, FL, mode, NEXT, p_start, p_end, p_attr, p_op, p_a, p_b, p_w, set_off, ids, score):
    """``_full_view``'s writing into the arena ``FL[F_AR]`` (at least ``_full_size`` floats)."""
    num = IL[I_NUM]
    nc, npn = num[U_C], num[U_P]
    CI = IL[I_C]
    PI = IL[I_P]
    HV = FL[F_HV]
    PV = IL[I_PV]
    for c in range(nc):
        HV[c * NV + V_B] = -1.0
    for p in range(npn):
        PV[p] = -1
    XS = np.empty(num[U_LISTC], np.int64)
    MK = _marks(p_attr)
    stack = np.empty(64, np.int64)
    stack[0] = 0
    ns = 1
    pos = 0
    DP = IL[I_DP]
    while ns > 0:
        ns -= 1
        c = stack[ns]
        cpos = _aligned(pos)
        pos = _write_c(IL, FL, c, cpos, mode, NEXT, p_start, p_end, p_attr, p_op, p_a, p_b, p_w, set_off, ids, score, XS,
                       MK)
        ds, dc = CI[c * NC + C_DS], CI[c * NC + C_DC]
        stack = _stack_room(stack, ns, dc + 2)
        for ch in (CI[c * NC + C_R], CI[c * NC + C_L]):
            if ch >= 0:
                stack[ns] = ch
                ns += 1
        for x in range(ds + dc - 1, ds - 1, -1):
            p = DP[x]
            pos = _write_p(IL, FL, p, _aligned(pos), mode, NEXT, p_start, p_end, p_attr, p_w, XS, MK)
            FL[F_AR][cpos + 4 + ND * (x - ds) + 1] = PV[p]
            stack[ns] = PI[p * NP + P_ROOT]
            ns += 1
    num[U_AR] = pos
    num[U_ARLIVE] = pos


@numba.njit(cache=True)
def _refresh_view(IL, FL, q, mode, NEXT, p_start, p_end, p_attr, p_op, p_a, p_b, p_w, set_off, ids, score):
    """Rewrite the view of every node changed since the last refresh (at the end of the
    arena); everything anew, in depth-first order, when that is most of the tree or the
    arena is more than half garbage (``q[Q_VSHARE]``: the share of live nodes changed above
    which everything is rewritten; ``q[Q_VSLACK]``: arena floats of garbage tolerated beyond
    half)."""
    num = IL[I_NUM]
    nd = num[U_NDIRTY]
    if nd == 0:
        return
    if nd > q[Q_VSHARE] * (num[U_LIVEC] + num[U_LIVEP]):
        # most of the tree changed (a build): everything anew, without sizing the changed
        # nodes first (their gathering below every small node: at 1M about 1.4 s)
        FL[F_AR] = np.empty(_full_begin(IL, FL, mode, NEXT, p_start, p_end, p_attr))
        _full_write(IL, FL, mode, NEXT, p_start, p_end, p_attr, p_op, p_a, p_b, p_w, set_off, ids, score)
        return
    _grow_f(FL, F_HV, num[U_C] * NV, -1.0)
    _grow_i(IL, I_PV, num[U_P])
    CI = IL[I_C]
    PI = IL[I_P]
    HV = FL[F_HV]
    PV = IL[I_PV]
    AR = FL[F_AR]
    DL = IL[I_DIRTY]
    XS = np.empty(num[U_LISTC], np.int64)
    MK = np.empty(0, np.int64)                  # no marks (they take a pass over every predicate)
    freed = 0
    need = 0
    for i in range(nd):
        x = DL[i]
        node = x >> 1
        if x & 1 == 0:
            CI[node * NC + C_DIRTY] = 0
            b = int(HV[node * NV + V_B])
            if b >= 0:
                freed += 4 + ND * int(AR[b + 2]) + int(AR[b]) + int(AR[b + 3])
                HV[node * NV + V_B] = -1.0
            if CI[node * NC + C_ALIVE] == 1:
                need += _size_c(IL, node, mode, NEXT, p_start, p_end, p_attr, XS, MK) + VIEW_ALIGN - 1
        else:
            PI[node * NP + P_DIRTY] = 0
            b = PV[node]
            if b >= 0:
                freed += 4 + int(AR[b])
                PV[node] = -1
            if PI[node * NP + P_ALIVE] == 1:
                need += 4 + _p_sum_floats(IL, node, mode, NEXT, p_start, p_end, p_attr, XS, MK) + VIEW_ALIGN - 1
    num[U_NDIRTY] = 0
    live = num[U_ARLIVE] - freed + need
    if num[U_AR] + need > 2 * live + q[Q_VSLACK]:
        _full_view(IL, FL, mode, NEXT, p_start, p_end, p_attr, p_op, p_a, p_b, p_w, set_off, ids, score)
        return
    _grow_f(FL, F_AR, num[U_AR] + need, 0.0)
    pos = num[U_AR]
    for i in range(nd):                         # p-nodes first: c-nodes' entries hold their places
        x = DL[i]
        node = x >> 1
        if x & 1 == 1 and PI[node * NP + P_ALIVE] == 1:
            pos = _write_p(IL, FL, node, _aligned(pos), mode, NEXT, p_start, p_end, p_attr, p_w, XS, MK)
    for i in range(nd):
        x = DL[i]
        node = x >> 1
        if x & 1 == 0 and CI[node * NC + C_ALIVE] == 1:
            pos = _write_c(IL, FL, node, _aligned(pos), mode, NEXT, p_start, p_end, p_attr, p_op, p_a, p_b, p_w, set_off, ids, score,
                           XS, MK)
    num[U_AR] = pos
    num[U_ARLIVE] = live


@numba.njit(cache=True, inline="always")
def _vbound(mode, S, SU, at, slen, nmx, ev_attr, e0, e1, has, ew, EO, EP, tb, G, cut):
    """The bound of a node's summary (``slen`` floats at ``AR[at:]``, read as 32-bit words:
    ``S``/``SU``, the arena as float32/uint32, ``_write_sum``; module docstring
    "Bounds"): the largest over its size classes of (the path's products, then the largest
    products of the other attributes the event has, up to the class's size); 0 when no class
    can match. ``G[s]``: the sum of the event's ``s`` largest products with the global
    maximum weights, a bound of every expression of ``s`` predicates; a class whose ``G`` is
    below ``cut`` (the k-th score once k are held, else -inf) is not read, nor any smaller
    one. ``EO``/``EP``: the event's attributes and their products with the global maximum
    weights, largest first (``G``'s terms; a long class's bound takes them)."""
    if mode == STATIC:
        return nmx
    m = e1 - e0
    best = 0.0
    j = 2 * at
    end = j + 2 * slen - 1                     # an odd count's last word is padding
    while j < end:
        size = int(SU[j])
        npath = int(SU[j + 1])
        nwf = int(SU[j + 3])
        nw = nwf & (LISTC - 1)
        body = j + 4
        j = body + int(SU[j + 2])
        if size > m:
            continue                           # more attributes than the event has
        g = G[size]
        if g <= best or cut > g * (1.0 + EPS):
            break                              # G grows with the size: no smaller class can do better
        acc = 0.0
        ok = True
        pk = nwf >= PACKED
        sc = 0.0
        if pk:                                 # (attribute | multiple of the scale << 16) words
            sc = float(S[body])
            body += 1
            r0 = body + npath
            for x in range(body, r0):
                u = int(SU[x])
                a = u & 0xFFFF
                if not has[a]:
                    ok = False
                    break
                acc += ew[a] * float(u >> 16)
            if acc > 0.0:                      # an infinite scale times 0 would be NaN
                acc *= sc
        else:                                  # (attribute, float32 weight) pairs
            r0 = body + 2 * npath
            for x in range(body, r0, 2):
                a = int(SU[x])
                if not has[a]:
                    ok = False
                    break
                if ew[a] > 0.0:                # a weight beyond float32 is inf: inf times 0 is NaN
                    acc += ew[a] * S[x + 1]
        if not ok:
            continue
        need = size - npath
        c = 0
        if nw == 0:
            if nwf & LISTC:
                # a list class: per expression its own other attributes; the best of those the
                # event all has (one it misses cannot match)
                lb = -1.0
                x = r0
                while x < j:
                    y = x
                    x += need
                    t = 0.0
                    while y < x:
                        u = int(SU[y])
                        a = u & 0xFFFF
                        if not has[a]:
                            break
                        t += ew[a] * float(u >> 16)
                        y += 1
                    if y == x and t > lb:
                        lb = t
                if lb < 0.0:
                    continue
                if lb > 0.0:                   # an infinite scale times 0 would be NaN
                    acc += lb * sc
                if acc > best:
                    best = acc
                continue
            if pk:
                for x in range(r0, j):         # short: sequential
                    u = int(SU[x])
                    a = u & 0xFFFF
                    if has[a]:
                        tb[c] = ew[a] * float(u >> 16) * sc if ew[a] > 0.0 else 0.0
                        c += 1
            else:
                for x in range(r0, j, 2):
                    a = int(SU[x])
                    if has[a]:
                        tb[c] = ew[a] * S[x + 1] if ew[a] > 0.0 else 0.0
                        c += 1
        else:
            # long: the event's attributes by product with the global maximum weight, largest
            # first, taken while the class has them (a bit of its words) until it has enough.
            # That maximum bounds the class's own weight, so the sum still bounds the class
            # (equal where, as with the paper's weights, an attribute weighs the same
            # everywhere), reads a few words instead of scattered weights, and needs no sort
            wlo = int(SU[r0])
            mw = r0 + 1
            for i in range(m if need > 0 else 0):
                a = EO[i]
                wi = (a >> 5) - wlo
                if wi >= 0 and wi < nw and (int(SU[mw + wi]) >> (a & 31)) & 1:
                    acc += EP[i]
                    c += 1
                    if c == need:
                        break
            if c == need and acc > best:
                best = acc
            continue
        if c < need:
            continue                           # too few of the event's attributes below
        if c > need:
            _sort_desc(tb, c)                  # c is at most the event's size
        for i in range(need):
            acc += tb[i]
        if acc > best:
            best = acc
    return best


@numba.njit(cache=True, inline="always")
def _entry_beaten(mode, nmx, m, G, cut):
    """Whether the p-node of a p-directory entry cannot beat ``cut`` (the search's threshold:
    the k-th score once k are held, or the speculative one), known from the entry alone (its
    block not read): its expressions have at most ``nmx`` predicates, and at most ``m`` can
    match, so each scores at most ``G[min(nmx, m)]`` (``static``: ``nmx`` is the p-node's
    bound)."""
    ebound = nmx if mode == STATIC else G[min(int(nmx), m)]
    return cut > ebound * (1.0 + EPS)


@numba.njit(cache=True, inline="always")
def _consider(mode, HV, AR, S, SU, pb, ev_attr, e0, e1, has, ew, EO, EP, tb, G, cut, hb, hp, nh, cnt):
    """Push the p-node whose block is at ``pb`` (on an attribute the event has, its value in
    the p-node's c-directory box) unless its bound cannot beat ``cut`` (the search's threshold)
    (and prefetch its c-directory root's hot row, read when it is popped); returns the heap's
    size."""
    bnd = _vbound(mode, S, SU, pb + 4, int(AR[pb]), AR[pb + 1], ev_attr, e0, e1, has, ew, EO, EP, tb, G, cut)
    if cut > bnd * (1.0 + EPS):
        cnt[M_PRUNED] += 1
        return nh
    cnt[M_PUSHED] += 1
    prefetch(HV, int(AR[pb + 2]) * NV)
    return _hpush(hb, hp, nh, bnd, pb)


@numba.njit(cache=True, inline="always")
def _scan(mode, AR, ARI, r, end, m, G, has, val, ew, set_vals, tsc, tid, n, k, cnt, cut):
    """Check the expressions of an l-node's view (``AR[r:end]``) against the event, offering
    each match to the top-k (``tsc``/``tid``, ``n`` held); returns ``n`` and the search's
    threshold ``cut``, raised to the k-th score once k are held. An expression with more
    predicates than the event has attributes cannot match, and one of ``s`` predicates scores
    at most ``G[s]``: where that cannot beat ``cut``, neither is read."""
    while r < end:
        hd = r          # (predicates, id bits, static score), then the rows. Not named h: inlined into
                        # _match_events, an h here was read as that function's own h
        size = int(AR[hd])
        q = hd + 3
        r = q + 4 * size
        if size > m or (mode != STATIC and cut > G[size] * (1.0 + EPS)):
            continue                            # cannot match, or cannot enter
        cnt[M_EVALS] += 1
        acc = 0.0
        ok = True
        while q < r:
            code = int(AR[q])
            at = code >> 4
            if not has[at]:
                ok = False
                break
            op = code & 15
            if op == IN or op == NIN:
                h = holds(op, 0.0, 0.0, set_vals, int(AR[q + 1]), int(AR[q + 2]), val[at])
            else:
                h = holds(op, AR[q + 1], AR[q + 2], set_vals, 0, 0, val[at])
            if not h:
                ok = False
                break
            acc += AR[q + 3] * ew[at]
            q += 4
        if ok:
            sc = AR[hd + 2] if mode == STATIC else acc
            if n < k or sc >= tsc[0]:
                n = _offer(tsc, tid, n, k, sc, ARI[hd + 1])
                if n == k and tsc[0] > cut:
                    cut = tsc[0]
    return n, cut


@numba.njit(cache=True, inline="always")
def _found_entry(mode, AR, x, m, G, cut, pbs, npb, cnt):
    """A p-directory entry (at ``AR[x]``) on an attribute the event has, its value in the
    entry's box: its p-node's block is listed in ``pbs`` (and prefetched) unless the entry
    alone shows that it cannot beat ``cut``; returns the count listed."""
    if _entry_beaten(mode, AR[x + 4], m, G, cut):
        cnt[M_PRUNED] += 1
        return npb
    pbs[npb] = int(AR[x + 1])
    _prefetch_block(AR, pbs[npb])
    return npb + 1


@numba.njit(cache=True, inline="always")
def _prefetch_block(AR, b):
    """Prefetch the first ``BLOCK_LINES`` cache lines of the view block at ``AR[b]`` (a block starts
    a line; past its end the hints are wasted, never wrong)."""
    for j in range(b, b + BLOCK_LINES * VIEW_ALIGN, VIEW_ALIGN):
        prefetch(AR, j)


@numba.njit(cache=True)
def _match_many(HV, AR, PV, mode, k, ev_off, ev_attr, ev_val, ev_w, val, has, ew, wmax, set_vals, out_id, out_sc,
                out_n, cnt, spec_scale):
    """Top-k of every event (module docstring) over the match view: the c-directory search
    reads one hot row per node, a visited bucket one contiguous block (its p-directory,
    summary and expressions), a p-node one small block. ``spec_scale``: the speculative
    threshold's factor (1.0; 0 turns speculation off; tests raise it to force retries)."""
    tsc = np.empty(k)
    tid = np.empty(k, np.int64)
    # fixed sizes, so that no array is replaced inside the loops: a p-node is pushed at most
    # once per event, and the c-directory search holds fewer entries than there are c-nodes
    hb = np.empty(PV.shape[0] + HV.shape[0] // NV + 1)
    hp = np.empty(PV.shape[0] + HV.shape[0] // NV + 1, np.int64)
    stack = np.empty(HV.shape[0] // NV + 2, np.int64)
    cq = np.empty(HV.shape[0] // NV + 2, np.int64)
    max_ev = 1
    for e in range(ev_off.shape[0] - 1):
        max_ev = max(max_ev, ev_off[e + 1] - ev_off[e])
    tb = np.empty(max_ev)
    pbs = np.empty(max_ev, np.int64)
    G = np.zeros(max_ev + 1)
    order = np.empty(k, np.int64)
    EO = np.empty(max_ev, np.int64)
    EP = np.empty(max_ev)
    RR = np.full((SPEC_WINDOW, SPEC_SIZES + 1), np.nan)
    SS = np.zeros(4)
    scale = spec_scale if mode != STATIC else 0.0
    _match_events(HV, AR, AR.view(np.int64), AR.view(np.float32), AR.view(np.uint32), mode, k, ev_off, ev_attr, ev_val, ev_w, val, has, ew, wmax, set_vals,
                  out_id, out_sc, out_n, cnt, tsc, tid, hb, hp, stack, cq, tb, pbs, G, order, EO, EP, RR, SS, scale)


@numba.njit(cache=True, inline="always")
def _spec_cut(RR, SS, G, m, scale):
    """The speculative threshold of an event (module docstring, "Speculative threshold"):
    the least kept ratio of the chosen size times the event's ``G[s]`` and ``scale``; -inf
    while too few ratios are kept, while paused, or where the event has fewer attributes."""
    if scale <= 0.0 or SS[S_KEPT] < SPEC_MIN or SS[S_FAIL] > SPEC_PAUSE:
        return -INF
    s = int(SS[S_SIZE])
    if s < 1 or s > m:
        return -INF
    lo = INF
    for i in range(min(int(SS[S_KEPT]), SPEC_WINDOW)):
        x = RR[i, s]
        if x < lo:                     # NaN (an event with fewer attributes) compares false
            lo = x
    if lo == INF or not lo > 0.0:
        return -INF
    return lo * G[s] * scale


@numba.njit(cache=True, inline="always")
def _spec_keep(RR, SS, G, m, kth):
    """Keep an event's k-th score over its ``G[s]`` for every size in the ring, and choose the
    size whose kept ratios spread least (largest over least) among those kept at least
    ``SPEC_MIN`` times and for nine in ten of the events kept (a size that most events exceed
    would leave them without a threshold)."""
    row = int(SS[S_NEXT])
    for s in range(1, SPEC_SIZES + 1):
        RR[row, s] = kth / G[s] if s <= m and G[s] > 0.0 else np.nan
    SS[S_NEXT] = (row + 1) % SPEC_WINDOW
    SS[S_KEPT] += 1
    rows = min(int(SS[S_KEPT]), SPEC_WINDOW)
    best = INF
    for s in range(1, SPEC_SIZES + 1):
        lo, hi, c = INF, 0.0, 0
        for i in range(rows):
            x = RR[i, s]
            if x > 0.0:
                c += 1
                lo = min(lo, x)
                hi = max(hi, x)
        if c >= SPEC_MIN and 10 * c >= 9 * rows and hi / lo < best:
            best = hi / lo
            SS[S_SIZE] = s


@numba.njit(cache=True, _nrt=False)
def _match_events(HV, AR, ARI, S, SU, mode, k, ev_off, ev_attr, ev_val, ev_w, val, has, ew, wmax, set_vals, out_id,
                  out_sc, out_n, cnt, tsc, tid, hb, hp, stack, cq, tb, pbs, G, order, EO, EP, RR, SS, spec_scale):
    """The search of ``_match_many`` over its scratch arrays (allocated there). It allocates
    nothing, so it is compiled without reference counting (numba's ``_nrt=False``): with it,
    every inlined helper that takes arrays (``_vbound``, ``_consider``, ``_scan``) increfs and
    decrefs each of them per call, atomic operations that were ~14% of the samples in ``perf``
    at 1M (top-5 0.046 to 0.040 ms per event side by side). ``RR``/``SS``: the speculative
    threshold's ratios and state (``_spec_cut``)."""
    for e in range(ev_off.shape[0] - 1):
        e0, e1 = ev_off[e], ev_off[e + 1]
        for i in range(e0, e1):
            a = ev_attr[i]
            val[a] = ev_val[i]
            has[a] = True
            ew[a] = ev_w[i]
        # the event's attributes by product of event and global maximum weight, largest first;
        # G[s]: the s largest summed
        m = e1 - e0
        for i in range(m):
            a = ev_attr[e0 + i]
            x = ew[a] * wmax[a]
            j = i - 1
            while j >= 0 and EP[j] < x:
                EP[j + 1] = EP[j]
                EO[j + 1] = EO[j]
                j -= 1
            EP[j + 1] = x
            EO[j + 1] = a
        for i in range(m):
            G[i + 1] = G[i] + EP[i]
        cnt[M_EVENTS] += 1
        spec = _spec_cut(RR, SS, G, m, spec_scale)
        if spec == -INF and SS[S_FAIL] > 0.0:
            SS[S_FAIL] *= 1.0 - 1.0 / SPEC_WINDOW      # paused: the failures fade, slowly
        n = 0
        while True:
            # the search: from the speculative threshold where there is one; it stands (the top-k
            # is exact) where it ends with k held and the k-th score at or above it, else the
            # event is searched again from -inf
            cut = spec
            n = 0
            nh = 0
            c = 0                          # the root first, then the popped p-nodes' buckets
            nq = 0
            qi = 0
            while True:
                if c >= 0:
                    cnt[M_CNODES] += 1
                    b = int(HV[c * NV + V_B])
                    nsum, nd, elen = int(AR[b]), int(AR[b + 2]), int(AR[b + 3])
                    dir0 = b + 4
                    r = dir0 + ND * nd + nsum
                    # the p-nodes on the event's attributes whose box holds its value, found first:
                    # their blocks load while the l-node is bounded and scanned
                    npb = 0
                    if nd > 0:
                        if nd <= 2 * (e1 - e0):
                            for x in range(dir0, dir0 + ND * nd, ND):
                                a = int(AR[x])
                                if has[a] and AR[x + 2] <= val[a] and val[a] <= AR[x + 3]:
                                    npb = _found_entry(mode, AR, x, m, G, cut, pbs, npb, cnt)
                        else:
                            for i in range(e0, e1):
                                a = ev_attr[i]
                                lo = _lower_bound(AR, dir0, ND, nd, a)
                                x = dir0 + ND * lo
                                if lo < nd and AR[x] == a and AR[x + 2] <= val[a] and val[a] <= AR[x + 3]:
                                    npb = _found_entry(mode, AR, x, m, G, cut, pbs, npb, cnt)
                    if elen > 0:
                        bnd = _vbound(mode, S, SU, dir0 + ND * nd, nsum, AR[b + 1], ev_attr, e0, e1, has, ew, EO, EP, tb, G,
                                      cut)
                        if cut > bnd * (1.0 + EPS):
                            cnt[M_PRUNED] += 1
                        elif nh == 0 or bnd >= hb[0]:
                            cnt[M_LNODES] += 1      # nothing better waits: scan it now
                            n, cut = _scan(mode, AR, ARI, r, r + elen, m, G, has, val, ew, set_vals, tsc, tid, n, k,
                                           cnt, cut)
                        else:
                            nh = _hpush(hb, hp, nh, bnd, -1 - c)
                    for i in range(npb):
                        nh = _consider(mode, HV, AR, S, SU, pbs[i], ev_attr, e0, e1, has, ew, EO, EP, tb, G, cut, hb, hp,
                                       nh, cnt)
                # next bucket: from the c-directory searched last, else the best p-node left
                if qi < nq:
                    c = cq[qi]
                    qi += 1
                    continue
                c = -1
                if nh == 0:
                    break
                bnd, pn, nh = _hpop(hb, hp, nh)
                if cut > bnd * (1.0 + EPS):
                    break
                if pn < 0:                          # an l-node left for later
                    b = int(HV[(-1 - pn) * NV + V_B])
                    r = b + 4 + ND * int(AR[b + 2]) + int(AR[b])
                    cnt[M_LNODES] += 1
                    n, cut = _scan(mode, AR, ARI, r, r + int(AR[b + 3]), m, G, has, val, ew, set_vals, tsc, tid,
                                   n, k, cnt, cut)
                    continue
                cnt[M_POPPED] += 1
                if nh > 0 and hp[0] >= 0:
                    # the p-node likely popped next: its c-directory root's row (prefetched when it was
                    # pushed) names the next rows of its search, which load while this one is searched
                    hx = int(AR[hp[0] + 2]) * NV
                    vx = val[int(AR[hp[0] + 3])]
                    for ch in (int(HV[hx + V_L]), int(HV[hx + V_R])):
                        if ch >= 0:
                            prefetch(HV, ch * NV)
                    if HV[hx + V_OL] <= vx and vx <= HV[hx + V_OH]:
                        prefetch(AR, int(HV[hx + V_B]))
                # its c-directory's buckets whose boxes hold the event's value, found first (each
                # found bucket's block prefetched: they load together), then visited in turn
                stack[0] = int(AR[pn + 2])
                v = val[int(AR[pn + 3])]
                ns = 1
                nq = 0
                qi = 0
                while ns > 0:
                    ns -= 1
                    x = stack[ns]
                    cnt[M_CDIR] += 1
                    h = x * NV
                    if v < HV[h + V_SL] or v > HV[h + V_SH]:
                        continue
                    for ch in (int(HV[h + V_L]), int(HV[h + V_R])):
                        if ch >= 0:
                            stack[ns] = ch
                            prefetch(HV, ch * NV)
                            ns += 1
                    if HV[h + V_OL] <= v and v <= HV[h + V_OH]:
                        if _entry_beaten(mode, HV[h + V_M], m, G, cut):
                            cnt[M_PRUNED] += 1      # nothing in its l-node or below its p-nodes can beat the threshold
                            continue
                        cq[nq] = x
                        _prefetch_block(AR, int(HV[h + V_B]))
                        nq += 1
            if spec == -INF:
                break
            if n == k and tsc[0] >= spec:
                cnt[M_SPEC] += 1
                SS[S_FAIL] *= 1.0 - 1.0 / SPEC_DECAY
                break
            cnt[M_RETRY] += 1
            SS[S_FAIL] += (1.0 - SS[S_FAIL]) / SPEC_DECAY
            spec = -INF
        if mode != STATIC and n == k:
            _spec_keep(RR, SS, G, m, tsc[0])
        # best first
        for i in range(n):
            order[i] = i
        for i in range(1, n):
            x = order[i]
            j = i - 1
            while j >= 0 and _worse(tsc[order[j]], tid[order[j]], tsc[x], tid[x]):
                order[j + 1] = order[j]
                j -= 1
            order[j + 1] = x
        for i in range(n):
            out_id[e * k + i] = tid[order[i]]
            out_sc[e * k + i] = tsc[order[i]]
        out_n[e] = n
        for i in range(e0, e1):
            a = ev_attr[i]
            has[a] = False
            ew[a] = 1.0


# ----------------------------------------------------------------------------- the core
def _line_aligned_copy(a: np.ndarray) -> np.ndarray:
    """A copy of ``a`` whose data starts a 64-byte cache line (numpy aligns to 16 bytes)."""
    buf = np.empty(a.nbytes + 64, np.uint8)
    start = -buf.ctypes.data % 64
    out = buf[start: start + a.nbytes].view(a.dtype)
    out[:] = a
    return out


def _line_aligned_empty(n: int) -> np.ndarray:
    """``n`` uninitialised floats starting a 64-byte cache line, in numpy's memory (transparent
    huge pages from ``HUGE_BYTES`` on: ``BETreeCore._refresh``)."""
    buf = np.empty(8 * n + 64, np.uint8)
    start = -buf.ctypes.data % 64
    return buf[start: start + 8 * n].view(np.float64)


class BETreeCore:
    """The BE*-tree behind the interface of :class:`~rankcast.kinds.matching.core.MatchCore`
    (see the module docstring). ``leaf_capacity`` is A, ``alpha`` the minimum share of each
    split side, ``beta`` the growth that triggers bottom-up expansion, ``split``
    ``"exhaustive"`` or ``"approximate"``, ``build`` ``"dynamic"`` (one expression at a time)
    or ``"batch"`` (BE*-B: a first table bulk-loaded top-down); ``view_full_share`` and
    ``view_slack`` when the match view is rewritten whole rather than node by node
    (``_refresh_view``; tests set them to exercise both ways); ``lazy_min`` and ``lazy_share``
    which batches recompute summaries once at their end (module docstring, "Insertion");
    ``spec_scale`` the speculative threshold's factor (module docstring, "Speculative
    threshold": 1.0; 0 turns it off; tests raise it to force searches again)."""

    index_name = "be-tree"

    def __init__(self, scoring: str, index: str = "be-tree", *, leaf_capacity: int = 5, alpha: float = 0.1,
                 beta: float = 4.0, split: str = "exhaustive", build: str = "dynamic", view_full_share: float = 0.25,
                 view_slack: int = 65536, long_class: int = 32, list_cap: int = LIST_CAP, lazy_min: int = LAZY_MIN,
                 lazy_share: float = LAZY_SHARE, spec_scale: float = 1.0, **_):
        self.mode = MODES[scoring]
        if self.mode == RELAXED:
            from rankcast.errors import InvalidInput
            raise InvalidInput("BETreeCore: field 'scoring': the be-tree serves 'static' and 'weighted', not 'relaxed'")
        self.table = ExpressionTable()
        self.ev = DenseEvent(0)
        self.build = build
        self.q = np.array([leaf_capacity, alpha, beta, 1.0 if split == "exhaustive" else 0.0, self.mode,
                           view_full_share, view_slack, 0.0], np.float64)
        self.lazy_min, self.lazy_share = lazy_min, lazy_share
        self.counters = np.zeros(NM, np.int64)
        self.spec_scale = spec_scale
        self.long_class = long_class
        self.list_cap = list_cap
        self._reset_tree()

    def _reset_tree(self):
        self.IL = List([np.full(16 * NC, -1, np.int64), np.full(16 * NP, -1, np.int64), np.zeros(64, np.int64),
                        np.zeros(64, np.int64), np.zeros(NU, np.int64), np.zeros(64, np.int64),
                        np.zeros(64, np.int64), np.zeros(64, np.int64), np.full(16, -1, np.int64)])
        self.FL = List([np.full(16, -INF), np.full(16, -INF), np.zeros(64), np.full(256, INF),
                        np.full(16 * NV, -1.0), np.zeros(64)])
        self.IL[I_NUM][U_LONG] = self.long_class
        self.IL[I_NUM][U_LISTC] = self.list_cap
        _new_c(self.IL, self.FL, 0, -1, -1, 0, -1)                     # the root
        n = self.table.n_slots
        self.home = np.full(n, -1, np.int64)
        self.nxt = np.full(n, -1, np.int64)
        self.prv = np.full(n, -1, np.int64)
        self.mark = np.full(len(self.ev.val), -1, np.int64)
        self.acnt = np.zeros(len(self.ev.val), np.int64)
        if not hasattr(self, "wmax"):
            self.wmax = np.zeros(len(self.ev.val))    # per attribute, the largest weight ever added

    def __len__(self) -> int:
        return self.table.n_live

    # ------------------------------------------------------------------ updates
    def _grow(self, n_attrs: int) -> None:
        self.ev.grow(n_attrs)
        if n_attrs > len(self.mark):
            extra = n_attrs - len(self.mark)
            self.mark = np.r_[self.mark, np.full(extra, -1, np.int64)]
            self.acnt = np.r_[self.acnt, np.zeros(extra, np.int64)]
        if n_attrs > len(self.wmax):
            self.wmax = np.r_[self.wmax, np.zeros(n_attrs - len(self.wmax))]
        n = self.table.n_slots
        if n > len(self.home):
            extra = max(n, 2 * len(self.home)) - len(self.home)
            self.home = np.r_[self.home, np.full(extra, -1, np.int64)]
            self.nxt = np.r_[self.nxt, np.full(extra, -1, np.int64)]
            self.prv = np.r_[self.prv, np.full(extra, -1, np.int64)]

    def _expr_args(self):
        t = self.table
        return t.p_start, t.p_end, t.p_attr, t.p_lo, t.p_hi, t.p_w, t.score

    def add(self, batch, n_attrs: int) -> None:
        slots = self.table.add(batch)
        self._grow(n_attrs)
        np.maximum.at(self.wmax, batch.attr, batch.weight)
        self._insert(slots)
        self._refresh()

    def _refresh(self) -> None:
        """Bring the match view up to date with the tree (the nodes changed since the last
        call; see ``_refresh_view``)."""
        t = self.table
        num = self.IL[I_NUM]
        if num[U_NDIRTY] > self.q[Q_VSHARE] * (num[U_LIVEC] + num[U_LIVEP]):
            # everything anew (a build; _refresh_view's own test): the arena is numpy's
            # line-aligned memory from the start, written in place instead of copied below
            # (at 1M 0.7 s)
            hv = self.FL[F_HV].ctypes.data            # (its hot rows grown: copied below)
            n = _full_begin(self.IL, self.FL, self.mode, self.nxt, t.p_start, t.p_end, t.p_attr)
            self.FL[F_AR] = _line_aligned_empty(n)
            before = [hv, self.FL[F_AR].ctypes.data]
            _full_write(self.IL, self.FL, self.mode, self.nxt, t.p_start, t.p_end, t.p_attr, t.p_op, t.p_a, t.p_b,
                        t.p_w, t.set_off, t.ids, t.score)
        else:
            before = [self.FL[w].ctypes.data for w in (F_HV, F_AR)]
            _refresh_view(self.IL, self.FL, self.q, self.mode, self.nxt, t.p_start, t.p_end, t.p_attr, t.p_op, t.p_a,
                          t.p_b, t.p_w, t.set_off, t.ids, t.score)
        # a view array the kernel replaced is copied once into numpy's memory, which asks the
        # kernel for transparent huge pages (numba's allocator does not): the search's reads
        # land all over these arrays, and with 4 KiB pages most of them also miss the TLB
        # (at 1M, 15% of the top-5 time); the copy starts a cache line, so that a hot row is one
        # line and a block's first line holds as much of it as a line can
        for w, ptr in zip((F_HV, F_AR), before):
            a = self.FL[w]
            if a.ctypes.data != ptr and a.nbytes >= HUGE_BYTES:
                self.FL[w] = _line_aligned_copy(a)

    def _insert(self, slots: np.ndarray) -> None:
        fn = _bulk_load if (self.build == "batch" and self.table.n_live == len(slots)) else _insert_many
        # a batch large against the tree: summaries recomputed once at its end (_exact_summaries)
        lazy = len(slots) >= max(self.lazy_min, (self.table.n_live - len(slots)) / self.lazy_share)
        self.q[Q_LAZY] = 1.0 if lazy else 0.0
        try:
            fn(self.IL, self.FL, self.q, slots, self.home, self.nxt, self.prv, self.mark, self.acnt,
               *self._expr_args())
        finally:
            self.q[Q_LAZY] = 0.0
        if lazy:
            t = self.table
            na = len(self.mark)
            most = int((t.p_end[: t.n_slots] - t.p_start[: t.n_slots]).max(initial=0))
            # a place per (size, attribute) key for the deduplication, unless that is too many
            pos = np.full((most + 1) * na if (most + 1) * na <= LAZY_DENSE else 0, -1, np.int64)
            _exact_summaries(self.IL, self.FL, self.q, self.nxt, t.p_start, t.p_end, t.p_attr, t.p_w, t.score, pos, na)

    def remove(self, ids: np.ndarray) -> None:
        slots = self.table.remove(np.asarray(ids, np.int64))
        t = self.table
        _remove_many(self.IL, self.FL, self.q, slots, self.home, self.nxt, self.prv, t.p_start, t.p_end, t.p_attr,
                     t.p_lo, t.p_hi, t.p_w, t.score)
        num = self.IL[I_NUM]
        keep = t.compact()
        if keep is not None or num[U_DEADC] > max(1024, 2 * num[U_LIVEC]):
            self.rebuild()
        else:
            self._refresh()

    def rebuild(self) -> None:
        """A new tree over the live expressions (dead nodes and slots reclaimed): bulk-loaded
        under ``build="batch"``, else inserted one by one."""
        t = self.table
        t.compact()
        self._reset_tree()
        self._grow(len(self.ev.val))
        live = np.flatnonzero(t.live[: t.n_slots])
        self._insert(live)
        self._refresh()

    # ------------------------------------------------------------------ queries
    def match(self, events, k: int):
        n = len(events)
        out_id = np.empty(n * k, np.int64)
        out_sc = np.empty(n * k)
        out_n = np.zeros(n, np.int64)
        t = self.table
        ev = self.ev
        if len(self.wmax) < len(ev.val):            # the event table was grown from outside
            self.wmax = np.r_[self.wmax, np.zeros(len(ev.val) - len(self.wmax))]
        self._refresh()
        _match_many(self.FL[F_HV], self.FL[F_AR], self.IL[I_PV], self.mode, k, events.off, events.attr, events.val,
                    events.weight, ev.val, ev.has, ev.ew, self.wmax, t.set_vals, out_id, out_sc, out_n, self.counters,
                    float(self.spec_scale))
        return [(out_id[i * k: i * k + out_n[i]], out_sc[i * k: i * k + out_n[i]]) for i in range(n)]

    def stats(self) -> dict:
        num = self.IL[I_NUM]
        c = self.counters
        return {"expressions": len(self), "index": "be-tree", "build": self.build,
                "cnodes": int(num[U_LIVEC]), "pnodes": int(num[U_LIVEP]), "splits": int(num[U_SPLIT]),
                "space_splits": int(num[U_SPACE]), "partitions": int(num[U_PART]),
                "expansions": int(num[U_EXPAND]), "merges": int(num[U_MERGE]), "index_bytes": self.nbytes(),
                "events": int(c[M_EVENTS]), "nodes": int(c[M_CNODES]), "lnodes_scanned": int(c[M_LNODES]),
                "random_accesses": int(c[M_EVALS]), "pnodes_pushed": int(c[M_PUSHED]),
                "pnodes_popped": int(c[M_POPPED]), "pruned": int(c[M_PRUNED]),
                "cdir_nodes": int(c[M_CDIR]), "speculated": int(c[M_SPEC]),
                "speculation_retries": int(c[M_RETRY])}

    def nbytes(self) -> int:
        num = self.IL[I_NUM]
        return int(num[U_C] * NC * 8 + num[U_P] * NP * 8 + num[U_W] * 16 + num[U_D] * 16 + num[U_BOX] * 40
                   + 8 * (num[U_C] + num[U_P]) + 3 * 8 * len(self.home)
                   + self.FL[F_HV].nbytes + self.FL[F_AR].nbytes + self.IL[I_PV].nbytes + self.IL[I_DIRTY].nbytes)


# ----------------------------------------------------------------------------- invariants
def check_structure(core: BETreeCore) -> None:
    """Assert the structural invariants (tests, small inputs): every live expression is in
    exactly one l-node; every bucket's own box is the MBB of the expressions at or below it
    on each of its dimensions and its subtree box the union with its children; L and R never
    overlap on the active dimension; an expression in a bucket with children is enclosed by
    neither child; every summary bounds every expression below it (``weighted``: in its size
    class, every class holding the path's attributes; the global maximum weights bound every
    weight); p-node ranks count the
    expressions below them; the match view is up to date: every live c-node's hot row holds
    its active-dimension boxes and children, its block its summary, p-directory and exactly
    its l-node's expressions (packed predicate rows), every live p-node's block its summary,
    root and attribute."""
    IL, FL = core.IL, core.FL
    CI = IL[I_C].reshape(-1, NC)
    PI = IL[I_P].reshape(-1, NP)
    BA, WA, num = IL[I_BA], IL[I_WA], IL[I_NUM]
    CS, PS, WM, BX = (FL[i] for i in range(4))
    t = core.table
    live = set(np.flatnonzero(t.live[: t.n_slots]).tolist())
    mode = core.mode

    def ival(s, a):
        for p in range(t.p_start[s], t.p_end[s]):
            if t.p_attr[p] == a:
                return t.p_lo[p], t.p_hi[p]
        raise AssertionError(f"slot {s} has no predicate on path attribute {a}")

    def summary(rec, node, Sx):
        """static: the bound; weighted: {(size, attribute): weight}."""
        if mode == STATIC:
            return Sx[node]
        ws, wc = rec[node, WS], rec[node, WC]
        keys = WA[ws: ws + wc]
        assert keys.tolist() == sorted(keys.tolist()), "summary keys unsorted"
        return {(SZ_CAP - (int(x) >> 32), int(x) & 0xFFFFFFFF): float(w) for x, w in zip(keys, WM[ws: ws + wc])}

    def bounded(summ, exprs, path):
        for s in exprs:
            if mode == STATIC:
                assert summ >= t.score[s], "static summary below a score"
            else:
                size = int(t.p_end[s] - t.p_start[s])
                for p in range(t.p_start[s], t.p_end[s]):
                    assert summ.get((size, int(t.p_attr[p])), -1.0) >= t.p_w[p], "weight summary below a weight"
                    assert core.wmax[t.p_attr[p]] >= t.p_w[p], "global maximum weight below a weight"
        if mode != STATIC:
            for size, a in summ:        # the bound takes the path's attributes as in every expression
                assert all((size, x) in summ for x in path), "a size class lacks a path attribute"

    seen = []

    def lnode(c):
        out, s = [], CI[c, C_LH]
        while s >= 0:
            assert core.home[s] == c
            out.append(int(s))
            s = core.nxt[s]
        assert len(out) == CI[c, C_LC]
        return out

    HV, AR, PV = FL[F_HV], FL[F_AR], IL[I_PV]
    assert num[U_NDIRTY] == 0, "match view not refreshed"

    def up32(w):
        """The smallest float32 at or above ``w``, as its bits (inf beyond float32)."""
        with np.errstate(over="ignore"):
            f = np.float32(w)
        if float(f) < float(w):      # as Python floats: numpy would compare a Python float in float32
            f = np.nextafter(f, np.float32(np.inf))
        assert float(f) >= float(w)
        return int(np.array([f], np.float32).view(np.uint32)[0])

    def canon(words):
        """Summary words with each list class's entries (one per expression) sorted: the view
        writes them in the order of its walk below the node."""
        out, j = [], 0
        while j + 4 <= len(words):
            size, npath, nb, flag = words[j: j + 4]
            body = words[j + 4: j + 4 + nb]
            if flag & LISTC:
                need = size - npath
                ents = sorted(tuple(body[x: x + need]) for x in range(1 + npath, nb, need))
                body = body[: 1 + npath] + [x for e in ents for x in e]
            out += [size, npath, nb, flag] + body
            j += 4 + nb
        return out + words[j:]

    def sum_rows(rec, node, path, below):
        """The summary's view as 32-bit words (``_write_sum``): per size class, largest
        first, (size, path attributes, body words, bit words | PACKED if packed | LISTC if a
        list class), a packed class's scale, the path's (attribute, weight rounded up to a
        float32) pairs or packed words, then the others by attribute: as pairs or packed
        words, or (long classes) as the words of their bits, without weights, or (list
        classes: at most ``list_cap`` expressions ``below``) each expression's others as packed
        words; padded to an even count."""
        if mode == STATIC:
            return []
        summ = summary(rec, node, None)
        out = []
        # list classes: at most list_cap below, none with an attribute twice (its predicates off
        # the path are not its size minus the path's)
        lists = 0 < core.list_cap and len(below) <= core.list_cap
        for s in below:
            lists &= sum(int(t.p_attr[p]) not in path for p in range(t.p_start[s], t.p_end[s])) \
                == t.p_end[s] - t.p_start[s] - len(path)
        for size in sorted({z for z, _ in summ}, reverse=True):
            cls = {a: w for (z, a), w in summ.items() if z == size}
            on = [a for a in path if a in cls]
            others = [a for a in sorted(cls) if a not in on]
            long = len(others) >= core.long_class
            if max(cls) < PACK_ATTRS:               # packed: scale, then attribute | multiple << 16
                wmx = max([cls[a] for a in (on if long else on + others)], default=0.0)
                scb = up32(wmx / PACK_Q if wmx > 0 else 1.0)
                sc = float(np.array([scb], np.uint32).view(np.float32)[0])

                def quant(w, sc):
                    q = 1 if math.isinf(sc) else math.ceil(w / sc)
                    q += q * sc < w
                    assert q * sc >= w and q < 1 << 16
                    return q

                def pair(a):
                    return [a | quant(cls[a], sc) << 16]
                body, flag = [scb], PACKED
            else:
                def pair(a):
                    return [a, up32(cls[a])]
                body, flag = [], 0
            body += [x for a in on for x in pair(a)]
            need = size - len(on)
            ents = None
            if flag and not long and need >= 1 and lists:
                ents = [[int(t.p_attr[p]) | quant(t.p_w[p], sc) << 16 for p in range(t.p_start[s], t.p_end[s])
                         if int(t.p_attr[p]) not in path] for s in below if t.p_end[s] - t.p_start[s] == size]
            if ents is not None:                    # a list class: each expression's own others
                body += [x for e in ents for x in e]
                out += [size, len(on), len(body), flag | LISTC] + body
            elif long:                                # words of 32 attributes' bits
                wlo = others[0] >> 5
                words = [0] * ((others[-1] >> 5) - wlo + 1)
                for a in others:
                    words[(a >> 5) - wlo] |= 1 << (a & 31)
                body += [wlo] + words
                out += [size, len(on), len(body), len(words) | flag] + body
            else:
                body += [x for a in others for x in pair(a)]
                out += [size, len(on), len(body), flag] + body
        return out + [0] * (len(out) & 1)

    def view_c(c):
        h = HV[c * NV: (c + 1) * NV]
        d = CI[c, C_DEP]
        if d:
            j = CI[c, C_BOX] + d - 1
            assert list(h[V_SL: V_OH + 1]) == [BX[4 * j + B_SL], BX[4 * j + B_SH], BX[4 * j + B_OL], BX[4 * j + B_OH]], \
                f"hot row of c-node {c}: boxes"
        assert (h[V_L], h[V_R]) == (CI[c, C_L], CI[c, C_R]), f"hot row of c-node {c}: children"
        ds, dc = CI[c, C_DS], CI[c, C_DC]
        dirs = []
        for a, p in zip(IL[I_DA][ds: ds + dc], IL[I_DP][ds: ds + dc]):
            r = PI[p, P_ROOT]
            j = CI[r, C_BOX] + CI[r, C_DEP] - 1
            dirs += [float(a), float(PV[p]), BX[4 * j + B_SL], BX[4 * j + B_SH], PS[p] if mode == STATIC else PI[p, NMAX]]
        exprs = []
        id_at = []                     # places of the ids (int64 bits) in exprs
        for s in lnode(c):
            id_at.append(len(exprs))
            exprs += [t.p_end[s] - t.p_start[s], t.ids[s], t.score[s] if mode == STATIC else 0.0]
            for p in range(t.p_start[s], t.p_end[s]):
                op = int(t.p_op[p])
                setop = op in (IN, NIN)
                exprs += [int(t.p_attr[p]) * 16 + op, t.set_off[p] if setop else t.p_a[p],
                          t.set_off[p + 1] if setop else t.p_b[p], t.p_w[p]]
        d = CI[c, C_DEP]
        sm = sum_rows(CI, c, BA[CI[c, C_BOX]: CI[c, C_BOX] + d].tolist(), lnode(c))
        head = [len(sm) // 2, CS[c] if mode == STATIC else CI[c, NMAX], dc, len(exprs)] + dirs
        assert h[V_M] == max([float(head[1])] + dirs[4::ND]), f"hot row of c-node {c}: most predicates or bound"
        b = int(h[V_B])
        assert b >= 0, f"view block of c-node {c}: none"
        assert b % VIEW_ALIGN == 0, f"view block of c-node {c}: does not start a cache line"
        s0 = b + len(head)
        assert canon(AR[s0: s0 + len(sm) // 2].view(np.uint32).tolist()) == canon(sm), f"view block of c-node {c}: summary"
        got = np.concatenate((AR[b: s0], AR[s0 + len(sm) // 2: s0 + len(sm) // 2 + len(exprs)]))
        for i in id_at:                # an id is stored as its int64 bits
            j = len(head) + i + 1
            assert got[j: j + 1].view(np.int64)[0] == exprs[i + 1], f"view block of c-node {c}: id"
            got[j] = exprs[i + 1] = 0.0
        assert got.tolist() == [float(x) for x in head + exprs], f"view block of c-node {c}"

    def view_p(p, below):
        r = PI[p, P_ROOT]
        sm = sum_rows(PI, p, BA[CI[r, C_BOX]: CI[r, C_BOX] + CI[r, C_DEP]].tolist(), below)
        want = [len(sm) // 2, PS[p] if mode == STATIC else PI[p, NMAX], PI[p, P_ROOT], PI[p, P_ATTR]]
        b = int(PV[p])
        assert b % VIEW_ALIGN == 0, f"view block of p-node {p}: does not start a cache line"
        assert b >= 0 and AR[b: b + 4].tolist() == [float(x) for x in want], f"view block of p-node {p}"
        assert canon(AR[b + 4: b + 4 + len(sm) // 2].view(np.uint32).tolist()) == canon(sm), \
            f"view block of p-node {p}: summary"

    def visit_c(c, path):
        """Check bucket c (and its c-directory children); returns every slot in its c-directory subtree."""
        assert CI[c, C_ALIVE] == 1
        view_c(c)
        d, b = CI[c, C_DEP], CI[c, C_BOX]
        assert BA[b: b + d].tolist() == path
        own = lnode(c)
        seen.extend(own)
        bounded(summary(CI, c, CS), own, path)
        below = list(own)
        attrs = set()
        ds, dc = CI[c, C_DS], CI[c, C_DC]
        assert IL[I_DA][ds: ds + dc].tolist() == sorted(set(IL[I_DA][ds: ds + dc].tolist())), "p-directory unsorted"
        for x in range(ds, ds + dc):
            p = IL[I_DP][x]
            assert PI[p, P_ATTR] == IL[I_DA][x]
            assert PI[p, P_ALIVE] == 1 and PI[p, P_OWN] == c
            a = int(PI[p, P_ATTR])
            assert a not in path and a not in attrs
            attrs.add(a)
            sub = visit_c(int(PI[p, P_ROOT]), path + [a])
            view_p(p, sub)
            assert CI[PI[p, P_ROOT], C_PAR] == -1 and CI[PI[p, P_ROOT], C_PN] == p
            assert PI[p, P_CNT] == len(sub), "p-node rank is not its expression count"
            bounded(summary(PI, p, PS), sub, path + [a])
            below.extend(sub)
        for s in own:       # an l-node holds no expression that a p-node here would take
            assert not ({int(x) for x in t.p_attr[t.p_start[s]: t.p_end[s]]} & attrs)
        for j, a in enumerate(path):
            ivs = [ival(s, a) for s in below]
            lo = min((x[0] for x in ivs), default=np.inf)
            hi = max((x[1] for x in ivs), default=-np.inf)
            assert (BX[4 * (b + j) + B_OL], BX[4 * (b + j) + B_OH]) == (lo, hi), f"own box of c-node {c} dim {j}: {(BX[4 * (b + j) + B_OL], BX[4 * (b + j) + B_OH])} != {(lo, hi)}"
        kids = [int(x) for x in (CI[c, C_L], CI[c, C_R]) if x >= 0]
        subtree = list(below)
        for ch in kids:
            assert CI[ch, C_PAR] == c and CI[ch, C_PN] == CI[c, C_PN] and CI[ch, C_DEP] == d
            subtree.extend(visit_c(ch, path))
        for j, a in enumerate(path):
            ivs = [ival(s, a) for s in subtree]
            lo = min((x[0] for x in ivs), default=np.inf)
            hi = max((x[1] for x in ivs), default=-np.inf)
            assert (BX[4 * (b + j) + B_SL], BX[4 * (b + j) + B_SH]) == (lo, hi), f"subtree box of c-node {c} dim {j}"
        if d and CI[c, C_L] >= 0 and CI[c, C_R] >= 0:
            lb, rb = CI[CI[c, C_L], C_BOX] + d - 1, CI[CI[c, C_R], C_BOX] + d - 1
            assert BX[4 * lb + B_SH] < BX[4 * rb + B_SL] or BX[4 * lb + B_SL] > BX[4 * lb + B_SH] or BX[4 * rb + B_SL] > BX[4 * rb + B_SH], "L and R overlap"
        return subtree

    allx = visit_c(0, [])
    assert sorted(seen) == sorted(live) and len(allx) == len(live), "l-nodes do not hold every live expression once"
    assert num[U_LIVEC] == int(CI[: num[U_C], C_ALIVE].sum())

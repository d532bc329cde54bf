"""Insertion and deletion of the BE*-tree's expressions.

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
"""
from __future__ import annotations

import numba
import numpy as np

from ..core import find_sorted
from .nodes import (B_OH, B_OL, B_SH, B_SL, C_ALIVE, C_BOX, C_DC, C_DEP, C_DIRTY, C_DS, C_L, C_LC, C_LH, C_PAR,
                    C_PN, C_R, F_BX, INF, I_BA, I_C, I_DA, I_DP, I_NUM, I_P, NC, NP, P_ALIVE, P_ATTR, P_CNT, P_OWN,
                    P_ROOT, Q_A, Q_ALPHA, Q_BETA, Q_EXH, T_CLUSTER, T_PARTITION, U_DEADC, U_DEADP, U_EXPAND,
                    U_LIVEC, U_LIVEP, U_MERGE, U_PART, U_SPACE, U_SPLIT, _d_del, _new_c, _new_p, _rank_add,
                    _touch_c, _touch_p)
from .summaries import _lnode_summary, _sum_add
from .split import _split


# ----------------------------------------------------------------------------- l-nodes, boxes
@numba.njit(cache=True, inline="always")
def _l_push(IL, HOME, NEXT, PREV, c, s):
    """Expression slot ``s`` into the l-node of c-node ``c`` (the head of its doubly linked
    list ``NEXT``/``PREV``; ``HOME[s] = c``)."""
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
    """Expression slot ``s`` out of the l-node of its home c-node (``HOME[s]``, then -1)."""
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
    """The interval ``(lo, hi)`` of expression ``s`` on attribute ``attr``; ``(inf, -inf)`` (empty)
    when it has no predicate on it."""
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
    """The c-directory subtree box of ``c`` recomputed from its own box and its children's
    subtree boxes; returns whether it changed."""
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


# ----------------------------------------------------------------------------- insertion
@numba.njit(cache=True)
def _attach_child(IL, FL, node, c, which):
    """c-node ``c`` becomes the left (``which`` 1) or right child of c-directory node ``node``."""
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
    """Task (``node``, ``kind``: ``T_CLUSTER`` or ``T_PARTITION``) onto the work list ``tasks``
    int64[cap, 2] of ``n`` tasks (doubled when full); returns (tasks, n + 1)."""
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
    """Delete the expressions of ``slots`` from the tree: each out of its l-node, the ranks
    along its path dropped, its l-node's summary recomputed, an underflowing leaf merged into
    its open parent (merge rule), an emptied one unlinked, boxes recomputed upwards while
    they change."""
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

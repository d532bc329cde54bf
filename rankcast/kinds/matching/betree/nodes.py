"""The BE*-tree's node tables (package docstring, "Shape"): the record layouts of c-nodes and
p-nodes in flat int64 pools, the float pools (boxes, summaries, the match view), the
counters and parameters every kernel reads; growing the pools, creating nodes, marking them
dirty for the match view, and each c-node's p-directory (sorted (attribute, p-node) pairs).
"""
from __future__ import annotations

import numba
import numpy as np

from ..core import find_sorted


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
# the match view (:mod:`.view`): a hot row per c-node in F_HV ...
# ... (V_M: the most predicates of an expression in its l-node or below its p-nodes; static: their bound)
V_SL, V_SH, V_OL, V_OH, V_L, V_R, V_B, V_M = range(8)
NV = 8
B_OL, B_OH, B_SL, B_SH = range(4)     # a box dimension: own bucket lo, hi; c-directory subtree lo, hi
ND = 5                                # floats of a p-directory entry in the view (_write_c)
# parameters
Q_A, Q_ALPHA, Q_BETA, Q_EXH, Q_MODE, Q_VSHARE, Q_VSLACK, Q_LAZY = range(8)
# work-list tasks
T_CLUSTER, T_PARTITION = 0, 1
# match counters
M_EVENTS, M_CNODES, M_LNODES, M_EVALS, M_PUSHED, M_POPPED, M_PRUNED, M_CDIR, M_SPEC, M_RETRY = range(10)
NM = 10
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
    """Int pool ``w`` of ``IL`` grown to at least ``n`` entries (doubled at least; new ones -1)."""
    a = IL[w]
    if a.shape[0] < n:
        b = np.full(max(n, 2 * a.shape[0]), -1, np.int64)
        b[: a.shape[0]] = a
        IL[w] = b


@numba.njit(cache=True)
def _grow_f(FL, w, n, fill):
    """Float pool ``w`` of ``FL`` grown to at least ``n`` entries (doubled at least; new ones ``fill``)."""
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
    """Node ``x`` (a c-node ``c`` as ``2 * c``, a p-node ``p`` as ``2 * p + 1``) onto the dirty
    list: its match view is rewritten before the next match."""
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
    """A new p-node on attribute ``attr`` in the p-directory of c-node ``owner``, with a
    c-directory root of its own; returns its index."""
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
    """(attr, its p-node) out of the sorted p-directory of c-node ``c``."""
    _touch_c(IL, c)
    CI = IL[I_C]
    DA, DP = IL[I_DA], IL[I_DP]
    ds, dc = CI[c * NC + C_DS], CI[c * NC + C_DC]
    x = find_sorted(DA, ds, ds + dc, attr)
    for j in range(x, ds + dc - 1):
        DA[j] = DA[j + 1]
        DP[j] = DP[j + 1]
    CI[c * NC + C_DC] = dc - 1

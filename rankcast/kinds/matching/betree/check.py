"""The BE*-tree's structural invariants (:func:`check_structure`), checked by the tests after
every call: node records, boxes, ranks, summaries (bounds of every expression below) and the
match view's rows and blocks.
"""
from __future__ import annotations

import math

import numpy as np

from ..core import IN, NIN, STATIC
from .nodes import (B_OH, B_OL, B_SH, B_SL, C_ALIVE, C_BOX, C_DC, C_DEP, C_DS, C_L, C_LC, C_LH, C_PAR, C_PN, C_R,
                    F_AR, F_HV, I_BA, I_C, I_DA, I_DP, I_NUM, I_P, I_PV, I_WA, LISTC, NC, ND, NMAX, NP, NV, PACKED,
                    PACK_ATTRS, PACK_Q, P_ALIVE, P_ATTR, P_CNT, P_OWN, P_ROOT, SZ_CAP, U_C, U_LIVEC, U_NDIRTY,
                    VIEW_ALIGN, V_B, V_L, V_M, V_OH, V_R, V_SL, WC, WS)
from .tree import BETreeCore

__all__ = ["check_structure"]


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

"""Diff arrays: the columns of ``updates="diff"`` as the roles of a cluster make and carry
them, and the composition of consecutive diffs of the same lists into one.

Diff arrays are ``(keys, rank, item_ids, scores, sign)`` (int64, int32, int64, float64, int8):
one row per entry that left (``sign`` -1, ``rank`` its rank before) or entered (+1, its rank
after) a list; a key's rows lie together, its -1 rows then its +1 rows, each by rank
(docs/contract.md, "Updates as diffs"). :func:`rankcast.common.updates.diff_table` makes their
Arrow table. Whole-list update arrays are ``(keys, offsets, item_ids, scores)``: four arrays,
so the length of the tuple tells the forms apart (:func:`is_diff`).
"""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["NO_DIFFS", "is_diff", "n_keys", "concat_diffs", "compose_diffs", "diffs_of_new_lists", "diff_list"]

#: No change, as diff arrays.
NO_DIFFS = (np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int8))


def is_diff(arrays) -> bool:
    """Whether ``arrays`` are diff arrays (five columns), not whole-list update arrays (four)."""
    return len(arrays) == 5


def n_keys(keys: np.ndarray) -> int:
    """The number of runs of equal keys in a diff's key column: the lists it changes."""
    return int(np.count_nonzero(keys[1:] != keys[:-1])) + int(len(keys) > 0)


def concat_diffs(outs: list) -> tuple:
    """Diff arrays of several parts laid end to end (parts whose keys differ, or whose rows
    are meant to be applied one part after the other)."""
    if not outs:
        return NO_DIFFS
    if len(outs) == 1:
        return outs[0]
    return tuple(np.concatenate([o[c] for o in outs]) for c in range(5))


def diffs_of_new_lists(keys_col: np.ndarray, rank: np.ndarray, item_ids: np.ndarray, scores: np.ndarray) -> tuple:
    """The diff arrays of lists that start empty (a ranked-matching event's): every entry of
    each list enters it (``sign`` +1) at its rank; the columns of a whole-list table
    (``key_rank`` of its lists) with the sign added."""
    return (np.asarray(keys_col, np.int64), np.asarray(rank, np.int32), np.asarray(item_ids, np.int64),
            np.asarray(scores, np.float64), np.ones(len(keys_col), np.int8))


def compose_diffs(outs: list) -> tuple:
    """One diff per key from consecutive diffs of the same lists (``outs``: diff arrays, in
    the order they happened; a key may have rows in several of them): applied to the lists
    before the first, the result gives the lists after the last, as the parts applied one
    after the other do. Keys ascending; a key whose lists came back to where they started
    has no row, and an entry that left and came back with the same score has none either."""
    outs = [o for o in outs if len(o[0])]
    if len(outs) <= 1:
        return outs[0] if outs else NO_DIFFS
    keys, rank, ids, sc, sign = concat_diffs(outs)
    sizes = np.array([len(o[0]) for o in outs], np.int64)
    part_start = np.zeros(len(keys), np.bool_)
    part_start[np.cumsum(sizes)[:-1]] = True
    new_run = part_start
    new_run[1:] |= keys[1:] != keys[:-1]
    new_run[0] = True
    run_start = np.append(np.flatnonzero(new_run), len(keys)).astype(np.int64)
    order = np.argsort(keys[run_start[:-1]], kind="stable").astype(np.int64)
    return _compose(keys, rank.astype(np.int32, copy=False), ids, sc, sign, run_start, order)


@numba.njit(cache=True)
def _compose(keys, rank, ids, sc, sign, run_start, order):
    """:func:`compose_diffs`' kernel. ``run_start``: the first row of each run (rows of one
    key within one part; int64[R + 1]); ``order``: the runs by key, stably (a key's runs in
    the order they happened). A key of one run keeps its rows. A key of several runs is
    played on a list of tokens: base positions (>= 0: an entry of the list before the
    first run) and entered rows (-(row + 1)); a -1 row that removes an entered row cancels
    it, one that removes a base position is a -1 row of the result at that position; the
    entered rows left are +1 rows at their final places."""
    n = keys.shape[0]
    o_key = np.empty(n, np.int64)
    o_rank = np.empty(n, np.int32)
    o_id = np.empty(n, np.int64)
    o_sc = np.empty(n, np.float64)
    o_sign = np.empty(n, np.int8)
    w = 0
    R = order.shape[0]
    g = 0
    while g < R:
        h = g + 1
        while h < R and keys[run_start[order[h]]] == keys[run_start[order[g]]]:
            h += 1
        if h == g + 1:                      # one run: its rows as they are
            for r in range(run_start[order[g]], run_start[order[g] + 1]):
                o_key[w] = keys[r]
                o_rank[w] = rank[r]
                o_id[w] = ids[r]
                o_sc[w] = sc[r]
                o_sign[w] = sign[r]
                w += 1
            g = h
            continue
        total = 0
        top = 0
        for x in range(g, h):
            for r in range(run_start[order[x]], run_start[order[x] + 1]):
                total += 1
                top = max(top, rank[r])
        base = top + total
        cur = np.empty(base + total, np.int64)
        for q in range(base):
            cur[q] = q
        m = base
        gone_tok = np.empty(total, np.int64)
        gone_row = np.empty(total, np.int64)
        ng = 0
        for x in range(g, h):
            a = run_start[order[x]]
            b = run_start[order[x] + 1]
            for r in range(b - 1, a - 1, -1):       # leaving rows, from the back
                if sign[r] < 0:
                    q = rank[r] - 1
                    if cur[q] >= 0:
                        gone_tok[ng] = cur[q]
                        gone_row[ng] = r
                        ng += 1
                    for p in range(q, m - 1):
                        cur[p] = cur[p + 1]
                    m -= 1
            for r in range(a, b):                   # entering rows, by rank
                if sign[r] > 0:
                    q = rank[r] - 1
                    for p in range(m, q, -1):
                        cur[p] = cur[p - 1]
                    cur[q] = -(r + 1)
                    m += 1
        # an entry of the first list that left and came back with its score: no row
        keep_gone = np.ones(ng, np.bool_)
        keep_new = np.ones(m, np.bool_)
        for i in range(ng):
            ri = gone_row[i]
            for q in range(m):
                if cur[q] < 0 and keep_new[q]:
                    rq = -cur[q] - 1
                    if ids[rq] == ids[ri] and sc[rq] == sc[ri]:
                        keep_gone[i] = False
                        keep_new[q] = False
                        break
        # the leaving rows by their rank in the first list (few: an insertion sort)
        for i in range(1, ng):
            t, rr, kg = gone_tok[i], gone_row[i], keep_gone[i]
            j = i - 1
            while j >= 0 and gone_tok[j] > t:
                gone_tok[j + 1] = gone_tok[j]
                gone_row[j + 1] = gone_row[j]
                keep_gone[j + 1] = keep_gone[j]
                j -= 1
            gone_tok[j + 1] = t
            gone_row[j + 1] = rr
            keep_gone[j + 1] = kg
        key = keys[run_start[order[g]]]
        for i in range(ng):
            if keep_gone[i]:
                r = gone_row[i]
                o_key[w] = key
                o_rank[w] = gone_tok[i] + 1
                o_id[w] = ids[r]
                o_sc[w] = sc[r]
                o_sign[w] = -1
                w += 1
        for q in range(m):
            if cur[q] < 0 and keep_new[q]:
                r = -cur[q] - 1
                o_key[w] = key
                o_rank[w] = q + 1
                o_id[w] = ids[r]
                o_sc[w] = sc[r]
                o_sign[w] = 1
                w += 1
        g = h
    return o_key[:w], o_rank[:w], o_id[:w], o_sc[:w], o_sign[:w]


@numba.njit(cache=True, nogil=True, inline="always")
def diff_list(x, o_id, c_id, o_key, c_key, o_sc, c_sc, o0, m_old, n_id, d_id, n_key, d_key, n_sc, d_sc, n0, m_new,
              base, which, rank, ids, sc, sign, w, add, ascending=False):
    """The diff rows of one list, found by one merge of the list before and after: old
    entries at rows ``o0 .. o0 + m_old`` of the 2-d arrays ``o_id``, ``o_key``, ``o_sc``
    (columns ``c_id``, ``c_key``, ``c_sc``), new ones at rows ``n0 .. n0 + m_new`` of
    ``n_id``, ``n_key``, ``n_sc`` (columns ``d_id``, ``d_key``, ``d_sc``), each the tail of
    its list from rank ``base + 1`` on, in (score, key) order, descending (the spatial kind:
    score, then seq) or ``ascending`` (range top-k: y, then object id). An entry stays iff
    its key and score are the same. Written at row ``w`` of the output columns, with
    ``which`` = ``x``: the -1 rows (rank before) as the merge finds them, then the +1 rows
    (rank after), their places kept aside in ``add`` (room for ``m_new``). Returns the row
    after the last one written."""
    na = 0
    i = 0
    j = 0
    while i < m_old or j < m_new:
        if i < m_old and j < m_new:
            ko = o_key[o0 + i, c_key]
            kn = n_key[n0 + j, d_key]
            fo = o_sc[o0 + i, c_sc]
            fn = n_sc[n0 + j, d_sc]
            if ko == kn and fo == fn:
                i += 1
                j += 1
                continue
            if ascending:
                old_first = fo < fn or (fo == fn and ko < kn)
            else:
                old_first = fo > fn or (fo == fn and ko > kn)
        else:
            old_first = i < m_old
        if old_first:
            which[w] = x
            rank[w] = base + i + 1
            ids[w] = o_id[o0 + i, c_id]
            sc[w] = o_sc[o0 + i, c_sc]
            sign[w] = -1
            w += 1
            i += 1
        else:
            add[na] = j
            na += 1
            j += 1
    for q in range(na):
        j = add[q]
        which[w] = x
        rank[w] = base + j + 1
        ids[w] = n_id[n0 + j, d_id]
        sc[w] = n_sc[n0 + j, d_sc]
        sign[w] = 1
        w += 1
    return w

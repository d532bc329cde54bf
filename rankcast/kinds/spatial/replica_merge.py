"""The aggregator's state as flat arrays, and the kernels that keep it: the replicas' top-k
lists of every subscription and their merge into its global top-k
(:class:`rankcast.kinds.spatial.roles.aggregator.Aggregator` calls them).

State (all grown by the caller, which passes them explicitly):

- hash table, subscription id -> slot: ``h_key`` int64[cap], ``h_slot`` int64[cap] (-1: an
  empty place; ``cap`` a power of two, at most half full), open addressing with linear
  probing, deletions without tombstones;
- per slot: ``s_id``, ``s_k`` (its k), ``s_alive``, ``s_dirty`` (bool: changed since its last
  emit), ``s_head`` (first list entry of its chain, -1: none), ``s_base_len``,
  ``base_start``, ``base_cap`` (its baseline, the list last reported: ids in ``b_id``, and
  under diffs their seqs and scores in ``b_seq``, ``b_sc``), ``free`` (the free slots);
- per list entry (one per (subscription, partition holding a replica)): ``e_part``,
  ``e_next`` (next entry of the slot's chain), ``e_start``, ``e_len``, ``e_cap`` (its rows in
  the pool), ``e_free`` (the free entries);
- the list pool: ``p_id``, ``p_seq`` int64, ``p_sc`` float64, each list sorted by (score,
  seq) descending;
- ``c``: int64[7], the counters ``C_*`` (updated in place by the kernels).
"""
from __future__ import annotations

import numba
import numpy as np

from rankcast.common.arrays import stays_in_probe_run
from rankcast.common.diffs import diff_list

__all__ = ["C_SLOTS", "C_FREE", "C_B_USED", "C_ENTRIES", "C_E_FREE", "C_P_USED", "C_GARBAGE", "rehash",
           "apply_lists", "merge_slot", "emit_changed", "emit_diffs", "lookup_slots", "forget_subscriptions", "live_entries"]

# the counters of an aggregator's state, one int64 array (the kernels update them in place)
C_SLOTS, C_FREE, C_B_USED, C_ENTRIES, C_E_FREE, C_P_USED, C_GARBAGE = range(7)

_HASH_MUL = -7046029254386353131     # 0x9E3779B97F4A7C15 as an int64 (Fibonacci hashing)


@numba.njit(cache=True, inline="always")
def _home(key, hmask):
    """Home position of ``key`` in a table of ``hmask + 1`` places."""
    return ((key * _HASH_MUL) >> 29) & hmask


@numba.njit(cache=True, inline="always")
def _find(h_key, h_slot, key):
    """Slot of subscription ``key`` (-1: not held). Open addressing, linear probing; a place
    with slot -1 is empty."""
    hmask = h_key.shape[0] - 1
    i = _home(key, hmask)
    while h_slot[i] >= 0:
        if h_key[i] == key:
            return h_slot[i]
        i = (i + 1) & hmask
    return -1


@numba.njit(cache=True, inline="always")
def _insert(h_key, h_slot, key, slot):
    """Add ``key`` -> ``slot`` (``key`` not held; the table has an empty place)."""
    hmask = h_key.shape[0] - 1
    i = _home(key, hmask)
    while h_slot[i] >= 0:
        i = (i + 1) & hmask
    h_key[i] = key
    h_slot[i] = slot


@numba.njit(cache=True)
def _remove(h_key, h_slot, key):
    """Remove ``key`` (held): the entries after it in its probe run move back into the hole
    where their home allows it (no tombstones, lookups stay short)."""
    hmask = h_key.shape[0] - 1
    i = _home(key, hmask)
    while h_key[i] != key or h_slot[i] < 0:
        i = (i + 1) & hmask
    j = i
    while True:
        j = (j + 1) & hmask
        if h_slot[j] < 0:
            break
        if stays_in_probe_run(i, j, _home(h_key[j], hmask)):
            continue
        h_key[i] = h_key[j]
        h_slot[i] = h_slot[j]
        i = j
    h_slot[i] = -1


@numba.njit(cache=True, inline="always")
def _take(c, free, c_free, c_used):
    """A place from the free list ``free`` (``c[c_free]`` of them), else the next new one
    (``c[c_used]`` used so far)."""
    if c[c_free] > 0:
        c[c_free] -= 1
        return free[c[c_free]]
    c[c_used] += 1
    return c[c_used] - 1


@numba.njit(cache=True)
def rehash(cap, s_id, s_alive, n_slots):
    """A hash table of ``cap`` (a power of two) places holding every live slot of the first
    ``n_slots``: (h_key int64[cap], h_slot int64[cap])."""
    h_key = np.zeros(cap, np.int64)
    h_slot = np.full(cap, -1, np.int64)
    for slot in range(n_slots):
        if s_alive[slot]:
            _insert(h_key, h_slot, s_id[slot], slot)
    return h_key, h_slot


@numba.njit(cache=True, inline="always")
def _unlink(slot, part, s_head, e_part, e_next):
    """Take the list entry of (``slot``, ``part``) out of the slot's chain; the entry, or -1."""
    prev = -1
    e = s_head[slot]
    while e >= 0:
        if e_part[e] == part:
            if prev < 0:
                s_head[slot] = e_next[e]
            else:
                e_next[prev] = e_next[e]
            return e
        prev = e
        e = e_next[e]
    return -1


@numba.njit(cache=True)
def apply_lists(part, sub_ids, ks, off, ids, seqs, scs, drop_ids, start, h_key, h_slot,
                s_id, s_k, s_alive, s_dirty, s_head, s_base_len, base_start, base_cap, b_id,
                e_part, e_next, e_start, e_len, e_cap, e_free, free, p_id, p_seq, p_sc, c):
    """Drop the lists of ``drop_ids`` held by partition ``part``, then store the new lists
    of ``sub_ids[start:]`` (rows of the CSR off/ids/seqs/scs); a new subscription gets a
    slot (with a baseline of capacity k), a new (subscription, partition) list an entry in
    the slot's chain. Marks the subscriptions dirty. The caller ensures the capacity of the
    slot, entry and hash arrays (the table at most half full after the new subscriptions);
    where the baselines (``b_id``) or the list pool (``p_*``) lack room, it stops and
    returns the row to go on from once they are grown (a list overwritten in place, the
    stream's usual case, needs none), else the row count. ``c``: the counters (``C_*``),
    updated in place."""
    for i in range(drop_ids.shape[0] if start == 0 else 0):
        slot = _find(h_key, h_slot, drop_ids[i])
        if slot < 0:
            continue
        e = _unlink(slot, part, s_head, e_part, e_next)
        if e >= 0:
            c[C_GARBAGE] += e_cap[e]
            e_cap[e] = 0
            e_free[c[C_E_FREE]] = e
            c[C_E_FREE] += 1
            s_dirty[slot] = True
    for i in range(start, sub_ids.shape[0]):
        sid = sub_ids[i]
        slot = _find(h_key, h_slot, sid)
        if slot < 0:
            if c[C_B_USED] + ks[i] > b_id.shape[0]:
                return i
            slot = _take(c, free, C_FREE, C_SLOTS)
            _insert(h_key, h_slot, sid, slot)
            s_id[slot] = sid
            s_alive[slot] = True
            s_head[slot] = -1
            if base_cap[slot] < ks[i]:
                base_start[slot] = c[C_B_USED]
                base_cap[slot] = ks[i]
                c[C_B_USED] += ks[i]
            s_k[slot] = ks[i]
        e = s_head[slot]
        while e >= 0 and e_part[e] != part:
            e = e_next[e]
        if e < 0:
            e = _take(c, e_free, C_E_FREE, C_ENTRIES)
            e_part[e] = part
            e_next[e] = s_head[slot]
            s_head[slot] = e
            e_cap[e] = 0
        m = off[i + 1] - off[i]
        if e_cap[e] < m:
            if c[C_P_USED] + max(ks[i], m) > p_id.shape[0]:
                return i
            c[C_GARBAGE] += e_cap[e]
            e_start[e] = c[C_P_USED]
            e_cap[e] = max(ks[i], m)
            c[C_P_USED] += e_cap[e]
        a = e_start[e]
        for r in range(m):
            p_id[a + r] = ids[off[i] + r]
            p_seq[a + r] = seqs[off[i] + r]
            p_sc[a + r] = scs[off[i] + r]
        e_len[e] = m
        s_dirty[slot] = True
    return sub_ids.shape[0]


@numba.njit(cache=True)
def merge_slot(slot, s_head, e_next, s_k, e_start, e_len, p_id, p_seq, p_sc,
               o_id, o_seq, o_sc, w, heads, ends):
    """Merge the replica lists of ``slot`` (each sorted by (score, seq) desc) into its top-k,
    written at ``o_*[w:]``; a message held by several replicas appears once. ``heads``,
    ``ends``: scratch, a place per partition. Returns the count."""
    nl = 0
    e = s_head[slot]
    while e >= 0:
        heads[nl] = e_start[e]
        ends[nl] = e_start[e] + e_len[e]
        nl += 1
        e = e_next[e]
    k = s_k[slot]
    if nl == 1:                           # one replica: its list's first k rows
        got = min(k, ends[0] - heads[0])
        a = heads[0]
        for r in range(got):
            o_id[w + r] = p_id[a + r]
            o_seq[w + r] = p_seq[a + r]
            o_sc[w + r] = p_sc[a + r]
        return got
    got = 0
    last_seq = -1
    while got < k:
        best = -1
        for j in range(nl):
            if heads[j] < ends[j]:
                if best < 0:
                    best = j
                else:
                    a = heads[j]
                    b = heads[best]
                    if p_sc[a] > p_sc[b] or (p_sc[a] == p_sc[b] and p_seq[a] > p_seq[b]):
                        best = j
        if best < 0:
            break
        r = heads[best]
        heads[best] += 1
        if got > 0 and p_seq[r] == last_seq:
            continue                      # same message from another replica
        o_id[w + got] = p_id[r]
        o_seq[w + got] = p_seq[r]
        o_sc[w + got] = p_sc[r]
        last_seq = p_seq[r]
        got += 1
    return got


@numba.njit(cache=True)
def emit_changed(slots, silent, n_parts, s_id, s_k, s_dirty, s_head, s_base_len, base_start,
                 b_id, e_next, e_start, e_len, p_id, p_seq, p_sc):
    """For each slot: merged top-k vs the baseline; changed ones are reported (unless
    ``silent``) and become the new baseline. Returns (sub_ids, offsets, msg_ids, scores)."""
    total = 0
    for slot in slots:
        total += s_k[slot]
    o_id = np.empty(total, np.int64)
    o_seq = np.empty(total, np.int64)
    o_sc = np.empty(total, np.float64)
    u_ids = np.empty(slots.shape[0], np.int64)
    u_off = np.zeros(slots.shape[0] + 1, np.int64)
    heads = np.empty(n_parts, np.int64)
    ends = np.empty(n_parts, np.int64)
    nu = 0
    w = 0
    for slot in slots:
        s_dirty[slot] = False
        got = merge_slot(slot, s_head, e_next, s_k, e_start, e_len, p_id, p_seq, p_sc,
                         o_id, o_seq, o_sc, w, heads, ends)
        a = base_start[slot]
        same = got == s_base_len[slot]
        if same:
            for r in range(got):
                if b_id[a + r] != o_id[w + r]:
                    same = False
                    break
        if not same:
            for r in range(got):
                b_id[a + r] = o_id[w + r]
            s_base_len[slot] = got
            if not silent:
                u_ids[nu] = s_id[slot]
                nu += 1
                w += got
                u_off[nu] = w
    return u_ids[:nu], u_off[:nu + 1], o_id[:w], o_sc[:w]


@numba.njit(cache=True)
def emit_diffs(slots, silent, n_parts, s_id, s_k, s_dirty, s_head, s_base_len, base_start,
               b_id, b_seq, b_sc, e_next, e_start, e_len, p_id, p_seq, p_sc):
    """:func:`emit_changed` as diffs: each slot whose merged top-k (ids, in order) differs
    from the baseline gets the rows that left and entered it (``skyband.diff_list``, against
    the baseline's ids, seqs and scores: the slot's -1 rows, then its +1 rows, each by rank)
    and the merged list becomes its baseline. ``silent``: the baselines only. Returns (sub
    ids, rank, msg ids, scores, sign)."""
    cap = 0
    kmax = 1
    for slot in slots:
        cap += s_base_len[slot] + s_k[slot]
        kmax = max(kmax, s_k[slot])
    if silent:
        cap = 0
    key = np.empty(cap, np.int64)
    rank = np.empty(cap, np.int32)
    ids = np.empty(cap, np.int64)
    sc = np.empty(cap, np.float64)
    sign = np.empty(cap, np.int8)
    o_id = np.empty(kmax, np.int64)
    o_seq = np.empty(kmax, np.int64)
    o_sc = np.empty(kmax, np.float64)
    add = np.empty(kmax, np.int64)
    heads = np.empty(n_parts, np.int64)
    ends = np.empty(n_parts, np.int64)
    # the lists as diff_list reads them: one-column 2-d views
    b_id2, b_seq2, b_sc2 = b_id.reshape(-1, 1), b_seq.reshape(-1, 1), b_sc.reshape(-1, 1)
    o_id2, o_seq2, o_sc2 = o_id.reshape(-1, 1), o_seq.reshape(-1, 1), o_sc.reshape(-1, 1)
    w = 0
    for slot in slots:
        s_dirty[slot] = False
        got = merge_slot(slot, s_head, e_next, s_k, e_start, e_len, p_id, p_seq, p_sc,
                         o_id, o_seq, o_sc, 0, heads, ends)
        a = base_start[slot]
        if not silent:
            same = got == s_base_len[slot]
            if same:
                for r in range(got):
                    if b_id[a + r] != o_id[r]:
                        same = False
                        break
            if same:
                continue
            w = diff_list(s_id[slot], b_id2, 0, b_seq2, 0, b_sc2, 0, a, s_base_len[slot], o_id2, 0, o_seq2, 0,
                          o_sc2, 0, 0, got, 0, key, rank, ids, sc, sign, w, add)
        for r in range(got):
            b_id[a + r] = o_id[r]
            b_seq[a + r] = o_seq[r]
            b_sc[a + r] = o_sc[r]
        s_base_len[slot] = got
    return key[:w], rank[:w], ids[:w], sc[:w], sign[:w]


@numba.njit(cache=True)
def lookup_slots(h_key, h_slot, ids):
    """Slots of ``ids`` (int64[n]): int64[n], -1 for unknown ones."""
    out = np.empty(ids.shape[0], np.int64)
    for i in range(ids.shape[0]):
        out[i] = _find(h_key, h_slot, ids[i])
    return out


@numba.njit(cache=True)
def forget_subscriptions(ids, h_key, h_slot, s_alive, s_dirty, s_head, s_base_len, e_next, e_cap, e_free, free, c):
    """Remove the subscriptions ``ids`` (int64[n]; unknown ones are skipped) and all their
    lists: their entries and slots go to the free lists, their rows count as garbage (``c``:
    the counters, updated in place)."""
    for i in range(ids.shape[0]):
        sid = ids[i]
        slot = _find(h_key, h_slot, sid)
        if slot < 0:
            continue
        e = s_head[slot]
        while e >= 0:
            c[C_GARBAGE] += e_cap[e]
            e_cap[e] = 0
            e_free[c[C_E_FREE]] = e
            c[C_E_FREE] += 1
            e = e_next[e]
        s_head[slot] = -1
        _remove(h_key, h_slot, sid)
        s_alive[slot] = False
        s_dirty[slot] = False
        s_base_len[slot] = 0
        free[c[C_FREE]] = slot
        c[C_FREE] += 1


@numba.njit(cache=True)
def live_entries(n_slots, s_alive, s_head, e_next, n_entries):
    """Every list entry of the live subscriptions among the first ``n_slots`` (for pool
    compaction): int64[at most n_entries]."""
    out = np.empty(n_entries, np.int64)
    n = 0
    for slot in range(n_slots):
        if s_alive[slot]:
            e = s_head[slot]
            while e >= 0:
                out[n] = e
                n += 1
                e = e_next[e]
    return out[:n]

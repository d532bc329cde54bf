"""Aggregator (DSkype aggregation bolt), two jobs:

1. re-evaluation (paper streams 6-7): merge the window shards' partial candidate lists of a
   batch of subscriptions into one list per subscription (:func:`merge_candidates`);
2. results: every subscription partition sends the local top-k list of each replica whose
   list changed; the aggregator owning the subscription (``id mod aggregators``) keeps the
   latest list per (subscription, partition) and merges the replicas' lists into the global
   top-k (their union contains it, see ``rankcast.kinds.spatial.roles.policies``). At a call boundary
   :meth:`Aggregator.emit` reports the subscriptions whose merged top-k (ids, in order)
   differs from the one reported at the previous boundary: the Engine's update semantics.

State is flat arrays only: an open-addressing hash table (subscription id -> slot) and, per
slot, a chain of its list entries, one per partition holding a replica (a replica's list is
found by walking the chain, one or two entries, and the merge walks it instead of testing
every partition). Every list of a subscription has room for its k rows, so a new list
overwrites the old one in place. (Numba typed dicts did this before: four hashed lookups
per list applied, each a call into the dict's C code, were most of ``apply``.)
"""
from __future__ import annotations

import numba
import numpy as np

from rankcast.common.arrays import grow, runs, stays_in_probe_run
from ..window import CandidateLists
from rankcast.runtime.metrics import RoleMetrics
from rankcast.runtime.recovery import Recoverable

__all__ = ["Aggregator", "merge_candidates", "shard_candidates", "SHARD_SHARE"]

# the counters of an aggregator's state, one int64 array (the kernels update them in place)
C_SLOTS, C_FREE, C_B_USED, C_ENTRIES, C_E_FREE, C_P_USED, C_GARBAGE = range(7)


# ----------------------------------------------------------------------------- candidate merge

# the per-row top-K merge of the shards' answers is CandidateLists.merge (indexing.window)
merge_candidates = CandidateLists.merge

# Each of S window shards is asked for ceil(SHARD_SHARE * K / S) of a row's K candidates
# (at most K): the best K of the window spread over the shards, and a shard's own best K
# cost it a walk down to its K-th (a prefix x64 stream, 16 shards, K = 80: 80 asked of each
# shard, 1,280 for 80 kept; 15 of each halve their search time). The merge keeps what the
# answers certify (``CandidateLists.merge``): every row at or above the lowest row of each
# shard that listed all it was asked for. On that stream 99.9% of the rows keep K; a row
# that keeps fewer is an exact prefix, not complete, and its partition asks for more (a
# larger K) as it does whenever candidates run out before its cut.
SHARD_SHARE = 3.0


def shard_candidates(K: np.ndarray, shards: int) -> np.ndarray:
    """How many candidates each of ``shards`` window shards is asked for, per row of K."""
    K = np.asarray(K, np.int64)
    if shards <= SHARD_SHARE:
        return K
    return np.minimum(K, np.ceil(SHARD_SHARE * K / shards).astype(np.int64))


# ----------------------------------------------------------------------------- result lists

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
def _rehash(cap, s_id, s_alive, n_slots):
    """A table of ``cap`` (a power of two) places holding every live slot."""
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
def _apply(part, sub_ids, ks, off, ids, seqs, scs, drop_ids, start, h_key, h_slot,
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
def _merge_slot(slot, s_head, e_next, s_k, e_start, e_len, p_id, p_seq, p_sc,
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
def _emit(slots, silent, n_parts, s_id, s_k, s_dirty, s_head, s_base_len, base_start,
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
        got = _merge_slot(slot, s_head, e_next, s_k, e_start, e_len, p_id, p_seq, p_sc,
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
def _lookup(h_key, h_slot, ids):
    """Slots of ``ids`` (-1 for unknown ones)."""
    out = np.empty(ids.shape[0], np.int64)
    for i in range(ids.shape[0]):
        out[i] = _find(h_key, h_slot, ids[i])
    return out


@numba.njit(cache=True)
def _forget(ids, h_key, h_slot, s_alive, s_dirty, s_head, s_base_len, e_next, e_cap, e_free, free, c):
    """Remove subscriptions and all their lists (``c``: the counters, updated in place)."""
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
def _live_entries(n_slots, s_alive, s_head, e_next, n_entries):
    """Every list entry of the live subscriptions (for pool compaction)."""
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


class Aggregator(Recoverable):
    _STATE = ("n_parts", "h_key", "h_slot", "s_id", "s_k", "s_alive", "s_dirty", "s_head", "s_base_len",
              "base_start", "base_cap", "b_id", "free", "e_part", "e_next", "e_start", "e_len", "e_cap",
              "e_free", "p_id", "p_seq", "p_sc", "counts")

    def __init__(self, index: int, n_partitions: int, cluster: str = "rankcast",
                 export_metrics: bool = True, resume=None):
        self.index = index
        self.n_parts = int(n_partitions)
        self.metrics = RoleMetrics("aggregator", index, cluster, export_metrics)
        self.h_key = np.zeros(128, np.int64)           # subscription id -> slot (open addressing)
        self.h_slot = np.full(128, -1, np.int64)
        self.s_id = np.zeros(64, np.int64)
        self.s_k = np.zeros(64, np.int64)
        self.s_alive = np.zeros(64, np.bool_)
        self.s_dirty = np.zeros(64, np.bool_)
        self.s_head = np.full(64, -1, np.int64)        # first list entry of each slot's chain
        self.s_base_len = np.zeros(64, np.int64)
        self.base_start = np.zeros(64, np.int64)
        self.base_cap = np.zeros(64, np.int64)
        self.b_id = np.zeros(1024, np.int64)
        self.free = np.zeros(64, np.int64)
        self.e_part = np.zeros(64, np.int64)           # a list entry: its partition, the next
        self.e_next = np.zeros(64, np.int64)           # entry of its slot, its rows in the pool
        self.e_start = np.zeros(64, np.int64)
        self.e_len = np.zeros(64, np.int64)
        self.e_cap = np.zeros(64, np.int64)
        self.e_free = np.zeros(64, np.int64)
        self.p_id = np.zeros(1024, np.int64)
        self.p_seq = np.zeros(1024, np.int64)
        self.p_sc = np.zeros(1024)
        self.counts = np.zeros(7, np.int64)            # C_*
        self._resume(resume)

    @property
    def n_slots(self) -> int:
        return int(self.counts[C_SLOTS])

    @property
    def p_used(self) -> int:
        return int(self.counts[C_P_USED])

    # ------------------------------------------------------------------ partition-facing
    def merge_candidates(self, K: np.ndarray, *parts: CandidateLists, asked: np.ndarray | None = None
                         ) -> CandidateLists:
        """The shards' answers to one question merged (``asked``: see ``CandidateLists.merge``)."""
        with self.metrics.busy():
            return merge_candidates(list(parts), K, asked)

    def set_partitions(self, n_partitions: int) -> None:
        """More partitions (a location split)."""
        self.n_parts = int(n_partitions)

    def apply(self, part: int, drop_ids: np.ndarray, sub_ids: np.ndarray, ks: np.ndarray,
              offsets: np.ndarray, ids: np.ndarray, seqs: np.ndarray, scores: np.ndarray) -> int:
        """Partition ``part`` dropped ``drop_ids`` and has new lists for ``sub_ids``."""
        with self.metrics.busy():
            n = len(sub_ids)
            ks = np.asarray(ks, np.int64)
            cols = (np.asarray(sub_ids, np.int64), ks, np.asarray(offsets, np.int64), np.asarray(ids, np.int64),
                    np.asarray(seqs, np.int64), np.asarray(scores, np.float64), np.asarray(drop_ids, np.int64))
            self._room(n)
            done = 0
            while True:
                done = _apply(int(part), *cols, done, self.h_key, self.h_slot, self.s_id, self.s_k,
                              self.s_alive, self.s_dirty, self.s_head, self.s_base_len, self.base_start,
                              self.base_cap, self.b_id, self.e_part, self.e_next, self.e_start, self.e_len,
                              self.e_cap, self.e_free, self.free, self.p_id, self.p_seq, self.p_sc, self.counts)
                if done == n:
                    break
                # room for every row left at most (each its k or its rows, the larger)
                rest = np.maximum(ks[done:], np.diff(cols[2][done:]))
                c = self.counts
                self.b_id = grow(self.b_id, int(c[C_B_USED] + ks[done:].sum()))
                for name in ("p_id", "p_seq", "p_sc"):
                    setattr(self, name, grow(getattr(self, name), int(c[C_P_USED] + rest.sum())))
            self.metrics.inc("updates", n)
        return n

    def _room(self, n: int) -> None:
        """Capacity for ``n`` more subscriptions and lists, the hash table at most half full
        after them (the baselines and the pool grow only where ``_apply`` finds them full)."""
        c = self.counts
        slots = int(c[C_SLOTS]) + n
        if slots > len(self.s_id):
            for name in ("s_id", "s_k", "s_base_len", "base_start", "base_cap", "free"):
                setattr(self, name, grow(getattr(self, name), slots))
            self.s_alive = grow(self.s_alive, slots, False)
            self.s_dirty = grow(self.s_dirty, slots, False)
            self.s_head = grow(self.s_head, slots, -1)
        live = int(c[C_SLOTS] - c[C_FREE]) + n
        if 2 * live > len(self.h_key):
            cap = 1 << (4 * live - 1).bit_length()
            self.h_key, self.h_slot = _rehash(cap, self.s_id, self.s_alive, int(c[C_SLOTS]))
        entries = int(c[C_ENTRIES]) + n
        if entries > len(self.e_part):
            for name in ("e_part", "e_next", "e_start", "e_len", "e_cap", "e_free"):
                setattr(self, name, grow(getattr(self, name), entries))

    # ------------------------------------------------------------------ coordinator-facing
    def emit(self, counted: bool = False):
        """(sub_ids, offsets, msg_ids, scores) of the subscriptions whose merged top-k changed
        since the previous emit; they become the new baseline. ``counted``: (number of
        subscriptions, those arrays), two results (``num_returns=2``): the coordinator reads
        the count and leaves the arrays to whoever reads them."""
        with self.metrics.busy():
            n = self.n_slots
            slots = np.flatnonzero(self.s_dirty[:n] & self.s_alive[:n])
            out = self._emit(slots, False)
            return (len(out[0]), out) if counted else out

    def baseline(self, sub_ids: np.ndarray) -> None:
        """Take the current merged top-k of ``sub_ids`` as reported (new subscriptions:
        initial results are not updates)."""
        with self.metrics.busy():
            slots = _lookup(self.h_key, self.h_slot, np.asarray(sub_ids, np.int64))
            self._emit(slots[slots >= 0], True)

    def _emit(self, slots, silent):
        return _emit(slots.astype(np.int64), silent, max(self.n_parts, 1), self.s_id, self.s_k,
                     self.s_dirty, self.s_head, self.s_base_len, self.base_start, self.b_id,
                     self.e_next, self.e_start, self.e_len, self.p_id, self.p_seq, self.p_sc)

    def forget(self, sub_ids: np.ndarray) -> None:
        """Unsubscribed: drop every trace of these subscriptions."""
        with self.metrics.busy():
            _forget(np.asarray(sub_ids, np.int64), self.h_key, self.h_slot, self.s_alive, self.s_dirty,
                    self.s_head, self.s_base_len, self.e_next, self.e_cap, self.e_free, self.free,
                    self.counts)
            if self.counts[C_GARBAGE] > max(1 << 16, self.p_used // 2):
                self._compact()

    def _compact(self) -> None:
        """Rewrite the list pool without the rows no live list holds."""
        c = self.counts
        es = _live_entries(self.n_slots, self.s_alive, self.s_head, self.e_next, int(c[C_ENTRIES]))
        caps = self.e_cap[es]
        new_start = np.concatenate([[0], np.cumsum(caps)[:-1]]).astype(np.int64)
        lens = self.e_len[es]
        src = runs(self.e_start[es], lens)[1]
        dst = runs(new_start, lens)[1]
        for name in ("p_id", "p_seq", "p_sc"):
            a = getattr(self, name)
            b = np.zeros(max(int(caps.sum()) * 2, 1024), a.dtype)
            b[dst] = a[src]
            setattr(self, name, b)
        self.e_start[es] = new_start
        c[C_P_USED] = int(caps.sum())
        c[C_GARBAGE] = 0

    def topk(self, sub_id: int) -> list[tuple[int, float]]:
        return self.topk_many([sub_id])[0]

    def topk_many(self, sub_ids) -> list[list[tuple[int, float]]]:
        slots = _lookup(self.h_key, self.h_slot, np.asarray(sub_ids, np.int64).reshape(-1))
        heads = np.empty(max(self.n_parts, 1), np.int64)
        ends = np.empty(max(self.n_parts, 1), np.int64)
        out = []
        for slot in slots.tolist():
            if slot < 0:
                out.append([])
                continue
            k = int(self.s_k[slot])
            o_id = np.empty(k, np.int64)
            o_seq = np.empty(k, np.int64)
            o_sc = np.empty(k)
            got = _merge_slot(slot, self.s_head, self.e_next, self.s_k, self.e_start, self.e_len,
                              self.p_id, self.p_seq, self.p_sc, o_id, o_seq, o_sc, 0, heads, ends)
            out.append(list(zip(o_id[:got].tolist(), o_sc[:got].tolist())))
        return out

    def replicas(self, sub_id: int) -> list[int]:
        slot = int(_lookup(self.h_key, self.h_slot, np.array([sub_id], np.int64))[0])
        out = []
        e = int(self.s_head[slot]) if slot >= 0 else -1
        while e >= 0:
            out.append(int(self.e_part[e]))
            e = int(self.e_next[e])
        return sorted(out)

    def stats(self) -> dict:
        out = self.metrics.snapshot()
        c = self.counts
        out.update(index=self.index, subscriptions=int(c[C_SLOTS] - c[C_FREE]),
                   lists=int(c[C_ENTRIES] - c[C_E_FREE]), pool_rows=self.p_used)
        return out

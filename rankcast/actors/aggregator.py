"""Aggregator (DSkype aggregation bolt), two jobs:

1. re-evaluation (paper streams 6-7): merge the window shards' partial candidate lists of a
   batch of subscriptions into one list per subscription (:func:`merge_candidates`);
2. results: every subscription partition sends the local top-k list of each replica whose
   list changed; the aggregator owning the subscription (``id mod aggregators``) keeps the
   latest list per (subscription, partition) and merges the replicas' lists into the global
   top-k (their union contains it, see ``rankcast.actors.policies``). At a call boundary
   :meth:`Aggregator.emit` reports the subscriptions whose merged top-k (ids, in order)
   differs from the one reported at the previous boundary: the Engine's update semantics.

State is flat arrays plus two numba typed dicts (subscription id -> slot, (slot, partition)
-> list entry); every list of a subscription has room for its k rows, so a new list
overwrites the old one in place.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.typed import Dict

from .._arrays import grow, runs
from ..indexing.window import CandidateLists
from .metrics import RoleMetrics
from .recovery import Recoverable

__all__ = ["Aggregator", "merge_candidates"]


# ----------------------------------------------------------------------------- candidate merge

# the per-row top-K merge of the shards' answers is CandidateLists.merge (indexing.window)
merge_candidates = CandidateLists.merge


# ----------------------------------------------------------------------------- result lists

@numba.njit(cache=True)
def _slot_of(sub_slot, sub_id, s_id, s_k, s_alive, base_cap, base_start, b_used, k, free, n_free, n_slots):
    """Slot of ``sub_id``, created (with a baseline of capacity k) when new."""
    if sub_id in sub_slot:
        return sub_slot[sub_id], b_used, n_free, n_slots
    if n_free > 0:
        n_free -= 1
        slot = free[n_free]
    else:
        slot = n_slots
        n_slots += 1
    sub_slot[sub_id] = slot
    s_id[slot] = sub_id
    s_alive[slot] = True
    if base_cap[slot] < k:
        base_start[slot] = b_used
        base_cap[slot] = k
        b_used += k
    s_k[slot] = k
    return slot, b_used, n_free, n_slots


@numba.njit(cache=True)
def _apply(part, sub_ids, ks, off, ids, seqs, scs, drop_ids, sub_slot, entries,
           s_id, s_k, s_alive, s_dirty, s_mask, s_base_len, base_start, base_cap, b_used,
           free, n_free, n_slots,
           e_start, e_len, e_cap, n_entries, p_id, p_seq, p_sc, p_used):
    """Drop the lists of ``drop_ids`` held by partition ``part``, then store the new lists
    of ``sub_ids`` (rows of the CSR off/ids/seqs/scs). Marks the subscriptions dirty.
    Capacity of every array is ensured by the caller. Returns the new counters."""
    word = part // 64
    bit = np.uint64(1) << np.uint64(part % 64)
    for i in range(drop_ids.shape[0]):
        sid = drop_ids[i]
        if sid not in sub_slot:
            continue
        slot = sub_slot[sid]
        key = (slot, part)
        if key in entries:
            entries.pop(key)
            s_mask[slot, word] &= ~bit
            s_dirty[slot] = True
    for i in range(sub_ids.shape[0]):
        slot, b_used, n_free, n_slots = _slot_of(sub_slot, sub_ids[i], s_id, s_k, s_alive, base_cap,
                                                 base_start, b_used, ks[i], free, n_free, n_slots)
        if n_slots > s_base_len.shape[0]:
            raise RuntimeError("aggregator: slot capacity")
        key = (slot, part)
        if key in entries:
            e = entries[key]
        else:
            e = n_entries
            n_entries += 1
            entries[key] = e
            e_cap[e] = 0
        m = off[i + 1] - off[i]
        if e_cap[e] < m:
            e_start[e] = p_used
            e_cap[e] = max(ks[i], m)
            p_used += e_cap[e]
        a = e_start[e]
        for r in range(m):
            p_id[a + r] = ids[off[i] + r]
            p_seq[a + r] = seqs[off[i] + r]
            p_sc[a + r] = scs[off[i] + r]
        e_len[e] = m
        s_mask[slot, word] |= bit
        s_dirty[slot] = True
    return b_used, n_free, n_slots, n_entries, p_used


@numba.njit(cache=True)
def _merge_slot(slot, n_parts, entries, s_k, s_mask, e_start, e_len, p_id, p_seq, p_sc,
                o_id, o_seq, o_sc, w):
    """Merge the replica lists of ``slot`` (each sorted by (score, seq) desc) into its top-k,
    written at ``o_*[w:]``; a message held by several replicas appears once. Returns the count."""
    heads = np.empty(n_parts, np.int64)
    ends = np.empty(n_parts, np.int64)
    nl = 0
    for p in range(n_parts):
        if s_mask[slot, p // 64] & (np.uint64(1) << np.uint64(p % 64)):
            e = entries[(slot, p)]
            heads[nl] = e_start[e]
            ends[nl] = e_start[e] + e_len[e]
            nl += 1
    k = s_k[slot]
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
def _emit(slots, silent, n_parts, entries, s_id, s_k, s_mask, s_dirty, s_base_len, base_start,
          b_id, e_start, e_len, p_id, p_seq, p_sc):
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
    nu = 0
    w = 0
    for slot in slots:
        s_dirty[slot] = False
        got = _merge_slot(slot, n_parts, entries, s_k, s_mask, e_start, e_len, p_id, p_seq, p_sc,
                          o_id, o_seq, o_sc, w)
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


_PAIR = types.UniTuple(types.int64, 2)


@numba.njit(cache=True)
def _new_state():
    """The two typed dicts of an aggregator (created in compiled code: cached, no JIT at start)."""
    sub_slot = Dict.empty(key_type=types.int64, value_type=types.int64)
    entries = Dict.empty(key_type=_PAIR, value_type=types.int64)
    return sub_slot, entries


@numba.njit(cache=True)
def _lookup(sub_slot, ids):
    """Slots of ``ids`` (-1 for unknown ones)."""
    out = np.full(ids.shape[0], -1, np.int64)
    for i in range(ids.shape[0]):
        if ids[i] in sub_slot:
            out[i] = sub_slot[ids[i]]
    return out


@numba.njit(cache=True)
def _forget(ids, n_parts, sub_slot, entries, s_mask, s_alive, s_dirty, s_base_len, e_cap, free, n_free):
    """Remove subscriptions and all their lists; returns (n_free, pool rows freed)."""
    garbage = 0
    for i in range(ids.shape[0]):
        sid = ids[i]
        if sid not in sub_slot:
            continue
        slot = sub_slot[sid]
        for p in range(n_parts):
            key = (slot, p)
            if key in entries:
                garbage += e_cap[entries[key]]
                entries.pop(key)
        sub_slot.pop(sid)
        s_mask[slot, :] = 0
        s_alive[slot] = False
        s_dirty[slot] = False
        s_base_len[slot] = 0
        free[n_free] = slot
        n_free += 1
    return n_free, garbage


@numba.njit(cache=True)
def _entries_of(entries):
    """All list entries (for pool compaction)."""
    out = np.empty(len(entries), np.int64)
    i = 0
    for v in entries.values():
        out[i] = v
        i += 1
    return out


@numba.njit(cache=True)
def _dict_arrays(sub_slot, entries):
    """The two typed dicts as arrays: (ids, slots, entry slots, entry partitions, entries)."""
    a = np.empty(len(sub_slot), np.int64)
    b = np.empty(len(sub_slot), np.int64)
    i = 0
    for k, v in sub_slot.items():
        a[i] = k
        b[i] = v
        i += 1
    c = np.empty(len(entries), np.int64)
    d = np.empty(len(entries), np.int64)
    e = np.empty(len(entries), np.int64)
    i = 0
    for k, v in entries.items():
        c[i] = k[0]
        d[i] = k[1]
        e[i] = v
        i += 1
    return a, b, c, d, e


@numba.njit(cache=True)
def _fill_dicts(sub_slot, entries, a, b, c, d, e):
    """Inverse of :func:`_dict_arrays`, into empty dicts."""
    for i in range(a.shape[0]):
        sub_slot[a[i]] = b[i]
    for i in range(c.shape[0]):
        entries[(c[i], d[i])] = e[i]


class Aggregator(Recoverable):
    _STATE = ("n_parts", "s_id", "s_k", "s_alive", "s_dirty", "s_mask", "s_base_len", "base_start",
              "base_cap", "b_id", "b_used", "free", "n_free", "n_slots", "e_start", "e_len", "e_cap",
              "n_entries", "p_id", "p_seq", "p_sc", "p_used", "garbage")

    def __init__(self, index: int, n_partitions: int, cluster: str = "rankcast",
                 export_metrics: bool = True, resume=None):
        self.index = index
        self.n_parts = int(n_partitions)
        self.metrics = RoleMetrics("aggregator", index, cluster, export_metrics)
        self.sub_slot, self.entries = _new_state()
        # the snapshot kernels, compiled (or loaded) now: not seconds into a recovery
        none = np.empty(0, np.int64)
        _fill_dicts(self.sub_slot, self.entries, none, none, none, none, none)
        _dict_arrays(self.sub_slot, self.entries)
        words = max(1, (self.n_parts + 63) // 64)
        self.s_id = np.zeros(64, np.int64)
        self.s_k = np.zeros(64, np.int64)
        self.s_alive = np.zeros(64, np.bool_)
        self.s_dirty = np.zeros(64, np.bool_)
        self.s_mask = np.zeros((64, words), np.uint64)
        self.s_base_len = np.zeros(64, np.int64)
        self.base_start = np.zeros(64, np.int64)
        self.base_cap = np.zeros(64, np.int64)
        self.b_id = np.zeros(1024, np.int64)
        self.b_used = 0
        self.free = np.zeros(64, np.int64)
        self.n_free = 0
        self.n_slots = 0
        self.e_start = np.zeros(64, np.int64)
        self.e_len = np.zeros(64, np.int64)
        self.e_cap = np.zeros(64, np.int64)
        self.n_entries = 0
        self.p_id = np.zeros(1024, np.int64)
        self.p_seq = np.zeros(1024, np.int64)
        self.p_sc = np.zeros(1024)
        self.p_used = 0
        self.garbage = 0
        self._resume(resume)

    def _state(self) -> dict:
        # numba typed dicts do not pickle: they travel as arrays
        return {**super()._state(), "dicts": _dict_arrays(self.sub_slot, self.entries)}

    def _restore(self, state: dict) -> None:
        dicts = state.pop("dicts")
        super()._restore(state)
        _fill_dicts(self.sub_slot, self.entries, *dicts)

    # ------------------------------------------------------------------ partition-facing
    def merge_candidates(self, K: np.ndarray, *parts: CandidateLists) -> CandidateLists:
        with self.metrics.busy():
            return merge_candidates(list(parts), K)

    def set_partitions(self, n_partitions: int) -> None:
        """More partitions (a location split): widen the replica masks."""
        words = max(1, (n_partitions + 63) // 64)
        if words > self.s_mask.shape[1]:
            m = np.zeros((self.s_mask.shape[0], words), np.uint64)
            m[:, : self.s_mask.shape[1]] = self.s_mask
            self.s_mask = m
        self.n_parts = int(n_partitions)

    def apply(self, part: int, drop_ids: np.ndarray, sub_ids: np.ndarray, ks: np.ndarray,
              offsets: np.ndarray, ids: np.ndarray, seqs: np.ndarray, scores: np.ndarray) -> int:
        """Partition ``part`` dropped ``drop_ids`` and has new lists for ``sub_ids``."""
        with self.metrics.busy():
            n = len(sub_ids)
            need_slots = self.n_slots + n
            for name in ("s_id", "s_k", "s_base_len", "base_start", "base_cap", "free"):
                setattr(self, name, grow(getattr(self, name), need_slots))
            self.s_alive = grow(self.s_alive, need_slots, False)
            self.s_dirty = grow(self.s_dirty, need_slots, False)
            self.s_mask = grow(self.s_mask, need_slots)
            kk = int(np.asarray(ks, np.int64).sum()) + int(np.diff(offsets).sum())
            self.b_id = grow(self.b_id, self.b_used + kk)
            for name in ("e_start", "e_len", "e_cap"):
                setattr(self, name, grow(getattr(self, name), self.n_entries + n))
            for name in ("p_id", "p_seq", "p_sc"):
                setattr(self, name, grow(getattr(self, name), self.p_used + kk))
            (self.b_used, self.n_free, self.n_slots, self.n_entries, self.p_used) = _apply(
                int(part), np.asarray(sub_ids, np.int64), np.asarray(ks, np.int64),
                np.asarray(offsets, np.int64), np.asarray(ids, np.int64), np.asarray(seqs, np.int64),
                np.asarray(scores, np.float64), np.asarray(drop_ids, np.int64),
                self.sub_slot, self.entries, self.s_id, self.s_k, self.s_alive, self.s_dirty,
                self.s_mask, self.s_base_len, self.base_start, self.base_cap, self.b_used,
                self.free, self.n_free, self.n_slots, self.e_start, self.e_len, self.e_cap,
                self.n_entries, self.p_id, self.p_seq, self.p_sc, self.p_used)
            self.metrics.inc("updates", n)
        return n

    # ------------------------------------------------------------------ coordinator-facing
    def emit(self, counted: bool = False):
        """(sub_ids, offsets, msg_ids, scores) of the subscriptions whose merged top-k changed
        since the previous emit; they become the new baseline. ``counted``: (number of
        subscriptions, those arrays), two results (``num_returns=2``): the coordinator reads
        the count and leaves the arrays to whoever reads them."""
        with self.metrics.busy():
            slots = np.flatnonzero(self.s_dirty[: self.n_slots] & self.s_alive[: self.n_slots])
            out = self._emit(slots, False)
            return (len(out[0]), out) if counted else out

    def baseline(self, sub_ids: np.ndarray) -> None:
        """Take the current merged top-k of ``sub_ids`` as reported (new subscriptions:
        initial results are not updates)."""
        with self.metrics.busy():
            slots = _lookup(self.sub_slot, np.asarray(sub_ids, np.int64))
            self._emit(slots[slots >= 0], True)

    def _emit(self, slots, silent):
        return _emit(slots.astype(np.int64), silent, self.n_parts, self.entries, self.s_id, self.s_k,
                     self.s_mask, self.s_dirty, self.s_base_len, self.base_start, self.b_id,
                     self.e_start, self.e_len, self.p_id, self.p_seq, self.p_sc)

    def forget(self, sub_ids: np.ndarray) -> None:
        """Unsubscribed: drop every trace of these subscriptions."""
        with self.metrics.busy():
            self.n_free, g = _forget(np.asarray(sub_ids, np.int64), self.n_parts, self.sub_slot,
                                     self.entries, self.s_mask, self.s_alive, self.s_dirty,
                                     self.s_base_len, self.e_cap, self.free, self.n_free)
            self.garbage += int(g)
            if self.garbage > max(1 << 16, self.p_used // 2):
                self._compact()

    def _compact(self) -> None:
        """Rewrite the list pool without the lists of forgotten subscriptions."""
        es = _entries_of(self.entries)
        if len(es) == 0:
            self.p_used = 0
            self.garbage = 0
            return
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
        self.p_used = int(caps.sum())
        self.garbage = 0

    def topk(self, sub_id: int) -> list[tuple[int, float]]:
        return self.topk_many([sub_id])[0]

    def topk_many(self, sub_ids) -> list[list[tuple[int, float]]]:
        slots = _lookup(self.sub_slot, np.asarray(sub_ids, np.int64).reshape(-1))
        out = []
        for slot in slots.tolist():
            if slot < 0:
                out.append([])
                continue
            k = int(self.s_k[slot])
            o_id = np.empty(k, np.int64)
            o_seq = np.empty(k, np.int64)
            o_sc = np.empty(k)
            got = _merge_slot(slot, self.n_parts, self.entries, self.s_k, self.s_mask, self.e_start,
                              self.e_len, self.p_id, self.p_seq, self.p_sc, o_id, o_seq, o_sc, 0)
            out.append(list(zip(o_id[:got].tolist(), o_sc[:got].tolist())))
        return out

    def replicas(self, sub_id: int) -> list[int]:
        slot = int(_lookup(self.sub_slot, np.array([sub_id], np.int64))[0])
        if slot < 0:
            return []
        return [p for p in range(self.n_parts) if (int(self.s_mask[slot, p // 64]) >> (p % 64)) & 1]

    def stats(self) -> dict:
        out = self.metrics.snapshot()
        out.update(index=self.index, subscriptions=int(self.n_slots - self.n_free),
                   lists=int(np.unpackbits(self.s_mask[: self.n_slots].view(np.uint8)).sum()),
                   pool_rows=int(self.p_used))
        return out

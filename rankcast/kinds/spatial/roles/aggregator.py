"""Aggregator (DSkype aggregation bolt), two jobs:

1. re-evaluation (paper streams 6-7): merge the window shards' partial candidate lists of a
   batch of subscriptions into one list per subscription (:func:`merge_candidates`);
2. results: every subscription partition sends the local top-k list of each replica whose
   list changed; the aggregator owning the subscription (``id mod aggregators``) keeps the
   latest list per (subscription, partition) and merges the replicas' lists into the global
   top-k (their union contains it, see ``rankcast.kinds.spatial.roles.policies``). At a call boundary
   :meth:`Aggregator.emit` reports the subscriptions whose merged top-k (ids, in order)
   differs from the one reported at the previous boundary: the Engine's update semantics;
   under diffs (``ClusterConfig(updates="diff")``) as the entries that left and entered each
   such list, found as the merge replaces the list reported before.

State is flat arrays only, kept by the kernels of :mod:`rankcast.kinds.spatial.replica_merge`:
an open-addressing hash table (subscription id -> slot) and, per slot, a chain of its list
entries, one per partition holding a replica (a replica's list is found by walking the
chain, one or two entries, and the merge walks it instead of testing every partition). Every list of a subscription has room for its k rows, so a new list
overwrites the old one in place. (Numba typed dicts did this before: four hashed lookups
per list applied, each a call into the dict's C code, were most of ``apply``.)
"""
from __future__ import annotations

import numpy as np

from rankcast.common.arrays import grow, runs
from rankcast.common.diffs import n_keys
from ..replica_merge import (C_B_USED, C_E_FREE, C_ENTRIES, C_FREE, C_GARBAGE, C_P_USED, C_SLOTS, apply_lists,
                             emit_changed, emit_diffs, forget_subscriptions, live_entries, lookup_slots, merge_slot, rehash)
from ..window import CandidateLists
from rankcast.runtime.metrics import RoleMetrics
from rankcast.runtime.recovery import Recoverable

__all__ = ["Aggregator", "merge_candidates", "shard_candidates", "SHARD_SHARE"]


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


class Aggregator(Recoverable):
    _STATE = ("n_parts", "h_key", "h_slot", "s_id", "s_k", "s_alive", "s_dirty", "s_head", "s_base_len",
              "base_start", "base_cap", "b_id", "b_seq", "b_sc", "free", "e_part", "e_next", "e_start", "e_len", "e_cap",
              "e_free", "p_id", "p_seq", "p_sc", "counts")

    def __init__(self, index: int, n_partitions: int, cluster: str = "rankcast",
                 export_metrics: bool = True, diff: bool = False, resume=None):
        self.index = index
        self.n_parts = int(n_partitions)
        self.diff = bool(diff)          # emit diffs (ClusterConfig.updates), not whole lists
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
        self.b_seq = np.zeros(1024, np.int64)          # under diffs: the baseline's seqs and scores
        self.b_sc = np.zeros(1024)
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

    def _restore(self, state: dict) -> None:
        super()._restore(state)
        for name in ("b_seq", "b_sc"):          # a state from before diffs holds ids alone
            setattr(self, name, grow(getattr(self, name), len(self.b_id)))

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
                done = apply_lists(int(part), *cols, done, self.h_key, self.h_slot, self.s_id, self.s_k,
                                   self.s_alive, self.s_dirty, self.s_head, self.s_base_len, self.base_start,
                                   self.base_cap, self.b_id, self.e_part, self.e_next, self.e_start, self.e_len,
                                   self.e_cap, self.e_free, self.free, self.p_id, self.p_seq, self.p_sc,
                                   self.counts)
                if done == n:
                    break
                # room for every row left at most (each its k or its rows, the larger)
                rest = np.maximum(ks[done:], np.diff(cols[2][done:]))
                c = self.counts
                for name in ("b_id", "b_seq", "b_sc"):
                    setattr(self, name, grow(getattr(self, name), int(c[C_B_USED] + ks[done:].sum())))
                for name in ("p_id", "p_seq", "p_sc"):
                    setattr(self, name, grow(getattr(self, name), int(c[C_P_USED] + rest.sum())))
            self.metrics.inc("updates", n)
        return n

    def _room(self, n: int) -> None:
        """Capacity for ``n`` more subscriptions and lists, the hash table at most half full
        after them (the baselines and the pool grow only where ``apply_lists`` finds them full)."""
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
            self.h_key, self.h_slot = rehash(cap, self.s_id, self.s_alive, int(c[C_SLOTS]))
        entries = int(c[C_ENTRIES]) + n
        if entries > len(self.e_part):
            for name in ("e_part", "e_next", "e_start", "e_len", "e_cap", "e_free"):
                setattr(self, name, grow(getattr(self, name), entries))

    # ------------------------------------------------------------------ coordinator-facing
    def emit(self, counted: bool = False):
        """(sub_ids, offsets, msg_ids, scores) of the subscriptions whose merged top-k changed
        since the previous emit, or under diffs their diff arrays (sub ids, rank, msg ids,
        scores, sign: ``rankcast.common.diffs``); they become the new baseline. ``counted``:
        (number of subscriptions, those arrays), two results (``num_returns=2``): the
        coordinator reads the count and leaves the arrays to whoever reads them."""
        with self.metrics.busy():
            n = self.n_slots
            slots = np.flatnonzero(self.s_dirty[:n] & self.s_alive[:n])
            out = self._emit(slots, False)
            count = n_keys(out[0]) if self.diff else len(out[0])
            return (count, out) if counted else out

    def baseline(self, sub_ids: np.ndarray) -> None:
        """Take the current merged top-k of ``sub_ids`` as reported (new subscriptions:
        initial results are not updates)."""
        with self.metrics.busy():
            slots = lookup_slots(self.h_key, self.h_slot, np.asarray(sub_ids, np.int64))
            self._emit(slots[slots >= 0], True)

    def _emit(self, slots, silent):
        if self.diff:
            return emit_diffs(slots.astype(np.int64), silent, max(self.n_parts, 1), self.s_id, self.s_k,
                              self.s_dirty, self.s_head, self.s_base_len, self.base_start, self.b_id, self.b_seq,
                              self.b_sc, self.e_next, self.e_start, self.e_len, self.p_id, self.p_seq, self.p_sc)
        return emit_changed(slots.astype(np.int64), silent, max(self.n_parts, 1), self.s_id, self.s_k,
                            self.s_dirty, self.s_head, self.s_base_len, self.base_start, self.b_id,
                            self.e_next, self.e_start, self.e_len, self.p_id, self.p_seq, self.p_sc)

    def forget(self, sub_ids: np.ndarray) -> None:
        """Unsubscribed: drop every trace of these subscriptions."""
        with self.metrics.busy():
            forget_subscriptions(np.asarray(sub_ids, np.int64), self.h_key, self.h_slot, self.s_alive,
                                 self.s_dirty, self.s_head, self.s_base_len, self.e_next, self.e_cap, self.e_free,
                                 self.free, self.counts)
            if self.counts[C_GARBAGE] > max(1 << 16, self.p_used // 2):
                self._compact()

    def _compact(self) -> None:
        """Rewrite the list pool without the rows no live list holds."""
        c = self.counts
        es = live_entries(self.n_slots, self.s_alive, self.s_head, self.e_next, int(c[C_ENTRIES]))
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
        slots = lookup_slots(self.h_key, self.h_slot, np.asarray(sub_ids, np.int64).reshape(-1))
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
            got = merge_slot(slot, self.s_head, self.e_next, self.s_k, self.e_start, self.e_len,
                             self.p_id, self.p_seq, self.p_sc, o_id, o_seq, o_sc, 0, heads, ends)
            out.append(list(zip(o_id[:got].tolist(), o_sc[:got].tolist())))
        return out

    def replicas(self, sub_id: int) -> list[int]:
        slot = int(lookup_slots(self.h_key, self.h_slot, np.array([sub_id], np.int64))[0])
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

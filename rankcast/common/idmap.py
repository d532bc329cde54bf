"""An int64 -> int64 map over flat arrays, for the expression id -> table slot lookups of the
ranked-matching drivers: open addressing with linear probing and a multiplicative hash, a
state byte per cell (empty, full, deleted: any int64 is a valid key), rehashed into a table
twice the live keys' size once full and deleted cells pass half of it. Lookups are numba
loops over three arrays (numba's typed dict took about 100 ns per lookup at 1M keys, which
at d = 4 was a fifth of a Threshold-Algorithm run); it pickles as plain arrays.
"""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["IdMap"]

EMPTY, FULL, DELETED = 0, 1, 2


@numba.njit(cache=True, inline="always")
def _home(key, mask):
    h = np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)
    h ^= h >> np.uint64(31)
    return np.int64(h & np.uint64(mask))


@numba.njit(cache=True)
def _put(state, keys, vals, ids, slots):
    """Set keys ``ids`` to ``slots``; returns (keys added, deleted cells reused)."""
    mask = keys.shape[0] - 1
    added = reused = 0
    for i in range(ids.shape[0]):
        key = ids[i]
        j = _home(key, mask)
        free = -1
        while state[j] != EMPTY:
            if state[j] == FULL and keys[j] == key:
                break
            if state[j] == DELETED and free < 0:
                free = j
            j = (j + 1) & mask
        if state[j] == FULL:
            vals[j] = slots[i]
            continue
        if free >= 0:
            j = free
            reused += 1
        state[j] = FULL
        keys[j] = key
        vals[j] = slots[i]
        added += 1
    return added, reused


@numba.njit(cache=True)
def _get(state, keys, vals, ids, out):
    """``out[i]`` = the value of ``ids[i]``, -1 where absent; returns how many were absent."""
    mask = keys.shape[0] - 1
    missing = 0
    for i in range(ids.shape[0]):
        key = ids[i]
        j = _home(key, mask)
        out[i] = -1
        while state[j] != EMPTY:
            if state[j] == FULL and keys[j] == key:
                out[i] = vals[j]
                break
            j = (j + 1) & mask
        if out[i] < 0:
            missing += 1
    return missing


@numba.njit(cache=True)
def _delete(state, keys, ids):
    """Delete keys ``ids`` (absent ones are skipped); returns how many were deleted."""
    mask = keys.shape[0] - 1
    gone = 0
    for i in range(ids.shape[0]):
        key = ids[i]
        j = _home(key, mask)
        while state[j] != EMPTY:
            if state[j] == FULL and keys[j] == key:
                state[j] = DELETED
                gone += 1
                break
            j = (j + 1) & mask
    return gone


class IdMap:
    """int64 keys to int64 values >= 0 (see the module docstring)."""

    def __init__(self, capacity: int = 16):
        cap = 16
        while cap < capacity:
            cap *= 2
        self.state = np.zeros(cap, np.uint8)
        self.keys = np.zeros(cap, np.int64)
        self.vals = np.zeros(cap, np.int64)
        self.n = 0              # full cells
        self.deleted = 0        # deleted cells (probes pass them)

    def __len__(self) -> int:
        return self.n

    def _rehash(self, need: int) -> None:
        full = self.state == FULL
        keys, vals = self.keys[full], self.vals[full]
        cap = 16
        while cap < 2 * (need + len(keys)):
            cap *= 2
        self.state = np.zeros(cap, np.uint8)
        self.keys = np.zeros(cap, np.int64)
        self.vals = np.zeros(cap, np.int64)
        self.deleted = 0
        self.n, _ = _put(self.state, self.keys, self.vals, keys, vals)

    def put(self, ids: np.ndarray, values: np.ndarray) -> None:
        ids = np.ascontiguousarray(ids, np.int64)
        if 2 * (self.n + self.deleted + len(ids)) > len(self.keys):
            self._rehash(len(ids))
        added, reused = _put(self.state, self.keys, self.vals, ids, np.ascontiguousarray(values, np.int64))
        self.n += added
        self.deleted -= reused

    def get(self, ids: np.ndarray) -> np.ndarray:
        """The values of ``ids`` (KeyError naming the first absent one)."""
        ids = np.ascontiguousarray(ids, np.int64)
        out = np.empty(len(ids), np.int64)
        if _get(self.state, self.keys, self.vals, ids, out):
            raise KeyError(int(ids[np.flatnonzero(out < 0)[0]]))
        return out

    def find(self, ids: np.ndarray) -> np.ndarray:
        """The values of ``ids``, -1 where absent (a writable copy of ``ids`` is looked up, so
        that one compiled version serves every caller's arrays)."""
        ids = np.array(ids, np.int64)
        out = np.empty(len(ids), np.int64)
        _get(self.state, self.keys, self.vals, ids, out)
        return out

    def delete(self, ids: np.ndarray) -> None:
        gone = _delete(self.state, self.keys, np.ascontiguousarray(ids, np.int64))
        self.n -= gone
        self.deleted += gone

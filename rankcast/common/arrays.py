"""Array growth shared by every pool and table that grows in place, the expansion of runs of
rows into update rows, and a cache prefetch hint for numba kernels."""
from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["grow", "grown", "runs", "concat_offsets", "expand_runs", "key_rank", "prefetch", "popcount"]


def grow(arr: np.ndarray, n: int, fill=0) -> np.ndarray:
    """``arr`` with room for at least ``n`` rows (doubling, at least 16), new rows set to
    ``fill``; ``arr`` itself when it is long enough. Rows may be multi-dimensional."""
    if n <= arr.shape[0]:
        return arr
    shape = (max(n, 2 * arr.shape[0], 16),) + arr.shape[1:]
    if np.all(np.asarray(fill) == 0):
        # zeroed by the allocator: a large array's pages are mapped and cleared by the kernel
        # at their first touch, so rows never touched (the doubling's slack, a directory's
        # rows for terms never held) cost nothing, and no second pass clears them
        new = np.zeros(shape, dtype=arr.dtype)
        new[: arr.shape[0]] = arr
        return new
    new = np.empty(shape, dtype=arr.dtype)
    new[: arr.shape[0]] = arr
    new[arr.shape[0]:] = fill       # the copied rows are written once, not filled first
    return new


@numba.njit(cache=True)
def grown(arr, cap):
    """:func:`grow` for numba kernels: ``arr`` copied into a new 1-d array of its dtype with
    ``cap`` rows (the rows past ``arr``'s are left unset)."""
    new = np.empty(cap, arr.dtype)
    new[: arr.shape[0]] = arr
    return new


@numba.njit(cache=True, inline="always")
def stays_in_probe_run(hole, j, home):
    """Backward-shift deletion in a linear-probing table: whether the entry at ``j``, whose
    home place is ``home``, stays where it is when place ``hole`` (before ``j`` in the probe
    run, cyclically) is emptied; otherwise it moves into the hole."""
    if hole <= j:
        return hole < home <= j
    return home > hole or home <= j


def runs(starts: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A CSR gather: row r takes ``lens[r]`` consecutive elements from ``starts[r]`` on.
    Returns the offsets of the rows laid end to end and the source index of every element."""
    off = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=off[1:])
    idx = np.repeat(starts, lens) + (np.arange(off[-1], dtype=np.int64) - np.repeat(off[:-1], lens))
    return off, idx


def concat_offsets(offsets: list[np.ndarray]) -> np.ndarray:
    """The CSR offsets of several CSR tables laid end to end (each starts at 0)."""
    base = np.cumsum([0] + [int(o[-1]) for o in offsets[:-1]])
    return np.concatenate([np.zeros(1, np.int64)] + [o[1:] + b for o, b in zip(offsets, base)]).astype(np.int64)


@numba.njit(cache=True, nogil=True)
def expand_runs(keys, starts, lens, ids, id_col, scores, sc_col):
    """The rows of an update table (rankcast.kinds.spatial.engine.updates_table): list ``i`` is rows
    ``starts[i] .. starts[i] + lens[i]`` of the 2-d tables ``ids`` (column ``id_col``) and
    ``scores`` (column ``sc_col``), best first. Returns (key, rank from 1, id, score, empty);
    an empty list is one row flagged ``empty`` (its other columns 0)."""
    n = keys.shape[0]
    total = 0
    for i in range(n):
        total += max(lens[i], 1)
    key = np.empty(total, np.int64)
    rank = np.zeros(total, np.int32)
    out_id = np.zeros(total, np.int64)
    out_sc = np.zeros(total)
    empty = np.zeros(total, np.bool_)
    w = 0
    for i in range(n):
        if lens[i] == 0:
            key[w] = keys[i]
            empty[w] = True
            w += 1
            continue
        a = starts[i]
        for r in range(lens[i]):
            key[w] = keys[i]
            rank[w] = r + 1
            out_id[w] = ids[a + r, id_col]
            out_sc[w] = scores[a + r, sc_col]
            w += 1
    return key, rank, out_id, out_sc, empty


@numba.njit(cache=True, nogil=True)
def key_rank(keys, offsets):
    """The key and rank (from 1) columns of an update table whose lists (rows
    ``offsets[i] .. offsets[i + 1]``, none empty) already lie in the table's order: list
    ``i``'s key on each of its rows, with the row's place in the list. One pass, where
    numpy's repeat, arange, subtraction and cast took four (about half the CPU time of a
    call's table of 300k rows)."""
    a = offsets[0]
    key = np.empty(offsets[keys.shape[0]] - a, np.int64)
    rank = np.empty(key.shape[0], np.int32)
    for i in range(keys.shape[0]):
        lo = offsets[i]
        for p in range(lo, offsets[i + 1]):
            key[p - a] = keys[i]
            rank[p - a] = p - lo + 1
    return key, rank


@intrinsic
def prefetch(typingctx, arr, idx):
    """``prefetch(arr, i)`` in a numba kernel: a hint that ``arr[i]`` (1-d) is read soon, so
    that its cache line loads while other work goes on (LLVM ``llvm.prefetch``, read, high
    locality). It never faults, whatever ``i``: an index outside ``arr`` is only a wasted hint."""
    if not isinstance(arr, types.Array) or arr.ndim != 1 or not isinstance(idx, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        aryty = sig.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        i = context.cast(builder, args[1], sig.args[1], types.intp)
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [i], wraparound=False, boundscheck=False)
        i8p = builder.bitcast(ptr, ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p.type, i32, i32, i32]),
                                            "llvm.prefetch.p0")
        builder.call(fn, [i8p, i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.void(arr, idx), codegen


@intrinsic
def popcount(typingctx, x):
    """``popcount(x)`` in a numba kernel: the number of set bits of the integer ``x``, in its
    type (LLVM ``llvm.ctpop``: one instruction where the CPU has it)."""
    if not isinstance(x, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        fn = builder.module.declare_intrinsic("llvm.ctpop", [args[0].type])
        return builder.call(fn, [args[0]])

    return x(x), codegen

"""What every scored interval index of the ranked pub/sub paper offers (Machanavajjhala et al.,
"Scalable Ranked Publish/Subscribe"; notes: ``shared/notes/ranked-pubsub-interval-indexes.md``).

One index holds closed intervals ``[lo, hi]`` of one attribute (``lo`` may be ``-inf``, ``hi``
``+inf``; ``lo <= hi``), each with a ``score`` (float64, finite, >= 0) and an ``item`` (int64,
unique within the index: the expression id). A query point ``q`` (finite float64) *stabs*
``[lo, hi]`` iff ``lo <= q <= hi``.

Every index answers in one **total order**: score descending, then item ascending
(:func:`before`). ``idx.open(q)`` returns a :class:`Cursor` whose ``next(n)`` gives the next
``n`` stabbed intervals in that order (the paper's resumable ``getnext``, in batches so that
the Python layer is crossed once per batch, not once per interval); fewer than ``n`` only when
none is left. Exact: the concatenation of every ``next`` equals
``sorted(stabbed, key=(-score, item))``.

A cursor counts its work in ``cursor.counters`` (int64 array, :data:`COUNTERS` names the
slots): ``nodes`` visited, ``holes`` (nodes visited whose extent contains ``q`` but below
which nothing stabbed was found on that visit: the paper's holes of R-tree extents), and
``entries`` (intervals looked at).

Static indexes (built once from arrays) get insertions and deletions through
:class:`~rankcast.kinds.matching.intervals.delta.DeltaIndex`; dynamic ones (``dynamic = True``)
implement ``insert`` / ``delete`` themselves.
"""
from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["IntervalIndex", "Cursor", "before", "COUNTERS", "check_intervals", "read_args", "stab8", "stab8_rows"]

COUNTERS = ("nodes", "holes", "entries")


@numba.njit(cache=True, inline="always")
def before(score_a, item_a, score_b, item_b):
    """True when (score_a, item_a) comes first in the total order: higher score, then smaller item."""
    return score_a > score_b or (score_a == score_b and item_a < item_b)


def _has_pext() -> bool:
    """Whether the kernels are compiled for a CPU with BMI2's pext (x86-64)."""
    from llvmlite import binding
    features = numba.config.CPU_FEATURES
    if features is not None:
        return "+bmi2" in features.split(",")
    return numba.config.CPU_NAME in (None, "host") and bool(binding.get_host_cpu_features().get("bmi2"))


_PEXT = _has_pext()


def _f64_array(a, ndim: int) -> bool:
    """Whether the numba type ``a`` is a C-contiguous float64 array of ``ndim`` dimensions."""
    return isinstance(a, types.Array) and a.ndim == ndim and a.layout == "C" and a.dtype == types.float64


def _splat(builder, q):
    """The vector of 8 lanes, each the double ``q``."""
    vt = ir.VectorType(ir.DoubleType(), 8)
    qv = builder.insert_element(ir.Constant(vt, ir.Undefined), q, ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(qv, ir.Constant(vt, ir.Undefined),
                                  ir.Constant(ir.VectorType(ir.IntType(32), 8), [0] * 8))


def _stab8_mask(builder, lo_vec, hi_vec, q):
    """The uint64 of the 8 lanes ``lo_vec <= q <= hi_vec`` (bit i: lane i)."""
    qv = _splat(builder, q)
    hit = builder.and_(builder.fcmp_ordered("<=", lo_vec, qv), builder.fcmp_ordered(">=", hi_vec, qv))
    return builder.zext(builder.bitcast(hit, ir.IntType(8)), ir.IntType(64))


def _row_pointer(context, builder, aty, a, idx):
    """Pointer to ``a[idx]`` (no bounds check), idx a list of intp values."""
    return cgutils.get_item_pointer(context, builder, aty, context.make_array(aty)(context, builder, a), idx,
                                    wraparound=False, boundscheck=False)


@intrinsic
def stab8(typingctx, lo, hi, r, q):
    """``stab8(lo, hi, r, q)`` in a numba kernel: a uint64 whose bit ``i`` (``i < 8``) is set when
    ``lo[r + i] <= q <= hi[r + i]`` (1-d C float64 arrays, ``r + 8 <= len``): one vector compare
    of 8 rows where the CPU has one (LLVM vector IR, lowered for the host)."""
    if not (_f64_array(lo, 1) and lo == hi and isinstance(r, types.Integer) and q == types.float64):
        return None

    def codegen(context, builder, sig, args):
        aty = sig.args[0]
        i = context.cast(builder, args[2], sig.args[2], types.intp)
        vt = ir.VectorType(ir.DoubleType(), 8)
        vecs = [builder.load(builder.bitcast(_row_pointer(context, builder, aty, a, [i]), vt.as_pointer()), align=8)
                for a in args[:2]]
        return _stab8_mask(builder, vecs[0], vecs[1], args[3])

    return types.uint64(lo, hi, r, q), codegen


@intrinsic
def stab8_rows(typingctx, a, r, q):
    """``stab8_rows(a, r, q)`` in a numba kernel: :func:`stab8` over rows ``r .. r + 7`` of a 2-d C
    float64 array of 3 columns, ``lo`` in column 0 and ``hi`` in column 1 (``r + 8 <= len(a)``):
    the 24 values loaded as three vectors, each compared once (``lo <= q`` and ``-hi <= -q``:
    the hi lanes' signs flipped), the bits of the rows' two tests gathered by BMI2 ``pext``;
    where the CPU lacks it, the two columns are taken out by lane shuffles instead."""
    if not (_f64_array(a, 2) and isinstance(r, types.Integer) and q == types.float64):
        return None

    def codegen(context, builder, sig, args):
        aty = sig.args[0]
        i = context.cast(builder, args[1], sig.args[1], types.intp)
        zero = context.get_constant(types.intp, 0)
        ptr = _row_pointer(context, builder, aty, args[0], [i, zero])
        if not _PEXT:
            rows = builder.load(builder.bitcast(ptr, ir.VectorType(ir.DoubleType(), 24).as_pointer()), align=8)
            undef = ir.Constant(rows.type, ir.Undefined)
            i32x8 = ir.VectorType(ir.IntType(32), 8)
            lo_vec = builder.shuffle_vector(rows, undef, ir.Constant(i32x8, [3 * k for k in range(8)]))
            hi_vec = builder.shuffle_vector(rows, undef, ir.Constant(i32x8, [3 * k + 1 for k in range(8)]))
            return _stab8_mask(builder, lo_vec, hi_vec, args[2])
        # lo <= q and -hi <= -q: one compare per 8 values, the hi lanes' signs flipped, then
        # every third bit of the 24 (lo and hi both held) gathered by pext
        i64 = ir.IntType(64)
        vt = ir.VectorType(ir.DoubleType(), 8)
        vi = ir.VectorType(i64, 8)
        qv = builder.bitcast(_splat(builder, args[2]), vi)
        base = builder.bitcast(ptr, vt.as_pointer())
        word = None
        for c in range(3):
            sign = ir.Constant(vi, [(1 << 63) if (8 * c + k) % 3 == 1 else 0 for k in range(8)])
            v = builder.load(builder.gep(base, [ir.Constant(ir.IntType(32), 0)]) if c == 0 else
                             builder.bitcast(builder.gep(builder.bitcast(base, ir.DoubleType().as_pointer()),
                                                         [ir.Constant(i64, 8 * c)]), vt.as_pointer()), align=8)
            x = builder.bitcast(builder.xor(builder.bitcast(v, vi), sign), vt)
            y = builder.bitcast(builder.xor(qv, sign), vt)
            h = builder.zext(builder.bitcast(builder.fcmp_ordered("<=", x, y), ir.IntType(8)), i64)
            h = builder.shl(h, ir.Constant(i64, 8 * c)) if c else h
            word = h if word is None else builder.or_(word, h)
        keep = ir.Constant(i64, sum(1 << (3 * k) for k in range(8)))
        both = builder.and_(builder.and_(word, builder.lshr(word, ir.Constant(i64, 1))), keep)
        pext = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i64, [i64, i64]), "llvm.x86.bmi.pext.64")
        return builder.call(pext, [both, keep])

    return types.uint64(a, r, q), codegen


def check_intervals(lo, hi, score, item) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The four columns as contiguous arrays of the right dtypes (a programming error, not user
    input, raises ValueError: user input is validated before it reaches an index)."""
    lo = np.ascontiguousarray(lo, np.float64)
    hi = np.ascontiguousarray(hi, np.float64)
    score = np.ascontiguousarray(score, np.float64)
    item = np.ascontiguousarray(item, np.int64)
    n = len(lo)
    if not (len(hi) == len(score) == len(item) == n):
        raise ValueError("interval columns of different lengths")
    if n and (np.isnan(lo).any() or np.isnan(hi).any() or (lo > hi).any()):
        raise ValueError("intervals need lo <= hi, no NaN")
    if n and (not np.isfinite(score).all() or (score < 0).any()):
        raise ValueError("scores must be finite and >= 0")
    return lo, hi, score, item


def read_args(queries, g, most: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(queries float64, counts int64 capped at ``most``, output offsets) for ``read_many``."""
    queries = np.ascontiguousarray(queries, np.float64).reshape(-1)
    if np.isnan(queries).any():
        raise ValueError("query point is NaN")
    g = np.broadcast_to(np.asarray(g, np.int64), queries.shape)
    if (g < 0).any():
        raise ValueError("counts must be >= 0")
    g = np.minimum(g, most).astype(np.int64)
    off = np.zeros(len(queries) + 1, np.int64)
    np.cumsum(g, out=off[1:])
    return queries, g, off


class Cursor:
    """A resumable top-k stabbing query (see the module docstring)."""

    counters: np.ndarray

    def next(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Up to ``n`` further stabbed intervals in the total order: (items int64, scores float64)."""
        raise NotImplementedError


class IntervalIndex:
    """A scored interval index over one attribute (see the module docstring)."""

    name: str = ""
    dynamic: bool = False

    def __init__(self, lo, hi, score, item, *, b: int = 50):
        raise NotImplementedError

    def open(self, q: float) -> Cursor:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def nbytes(self) -> int:
        """Bytes of every array the index holds (the memory experiment, paper Table 2)."""
        raise NotImplementedError

    def entries(self) -> int:
        """Entries the index stores (the paper's measure of Table 2): stored interval rows, node
        entries and list rows, each counted once however many fields it has."""
        raise NotImplementedError

    def read_many(self, queries, g) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For every query point ``queries[i]``, open a cursor and read its first ``g[i]``
        stabbed intervals (``g``: one count for all, or one per query), all in one compiled
        call: what the cursors cost with no Python layer between the calls (the paper's
        Fig. 6 measure). Returns (offsets int64[len(queries) + 1], items, scores), query
        ``i``'s rows being ``offsets[i]:offsets[i + 1]``: the same rows as
        ``open(queries[i]).next(g[i])``."""
        raise NotImplementedError

    # dynamic indexes only
    def insert(self, lo, hi, score, item) -> None:
        raise NotImplementedError(f"{self.name} is static: wrap it in DeltaIndex")

    def delete(self, item) -> None:
        raise NotImplementedError(f"{self.name} is static: wrap it in DeltaIndex")

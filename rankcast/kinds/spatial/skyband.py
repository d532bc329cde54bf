"""Per-subscription partial k-skyband buffers (paper Section 6) as flat arrays.

Buffer of slot ``s``: rows ``bstart[s] .. bstart[s] + blen[s]`` of the pool ``bi`` (int64
columns SEQ, ID, DC: sequence number, message id, dominance counter) and ``bf`` (float64
columns T, SC: time, score), ordered by (score desc, seq desc), so the top-k is the first
k rows. Invariant (checked by the oracle tests): the buffer is the k-skyband of every window
message with score >= theta[s] that shares a term with s. Hence the top-k is exact whenever
``blen >= k`` or ``theta == 0``; otherwise the subscription waits for re-evaluation.

Expiry: every subscription with a non-empty buffer sits in the list of the bucket of its
oldest buffered seq (a hash of doubly linked lists), so a message's expiry visits exactly
the buffers that hold it (the paper's "for each subscription whose buffer contains m").

Modes: SKYBAND evicts a row once k newer rows score at least as high (Definition 10/11);
KMAX keeps every row >= theta and raises theta when the buffer outgrows kmax (baseline).

Deferred candidates (SKYBAND): a batch's candidates of a full buffer (theta > 0, k rows at
least) that all score below its k-th row, where no row expires, change nothing of its top-k:
they wait in the slot's few pending rows (``pn`` of them in ``pend``: seq, id, and the
time's and score's float64 bits, in seq order, each newer than every buffered row), merged
with the next batch that visits the buffer for another reason (a candidate that reaches the
top-k, an expiring row, no room left) or by :func:`merge_pending`. So the invariant above
holds for the buffer plus its pending rows; the top-k, the first k rows, is exact as it is.
On a dense stream most candidates land below the k-th row, and a merge rewrites the buffer
from its first candidate's row down: the pending rows make several batches' candidates one
merge.

The helpers a buffer visit calls are inlined (``inline="always"``): a call that hands arrays
back costs reference-count updates on every visit, and on a dense stream, where a batch
visits most buffers, that was a tenth of ``process_batch``.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from rankcast.common.diffs import diff_list

__all__ = ["SEQ", "ID", "DC", "T", "SC", "SKYBAND", "KMAX", "BufferState"]

SEQ, ID, DC = 0, 1, 2
T, SC = 0, 1
SNAP_SC = 2          # a snapshot row: SEQ, ID, and the score's float64 bits
MARK_CHANGED, DIFF_CHANGED = 1, 2     # process_batch's ``last``: how a first touch is recorded
SKYBAND, KMAX = 0, 1
PENDING = 8          # deferred candidates a slot holds at most (module docstring)
P_SEQ, P_ID, P_T, P_SC = 0, 1, 2, 3   # a pending row (time and score as float64 bits)


class BufferState:
    """All buffer arrays of one core; kernels take and return them explicitly."""

    def __init__(self, slots: int = 1024, pool: int = 1 << 14, buckets: int = 1 << 12):
        self.bstart = np.zeros(slots, np.int64)
        self.blen = np.zeros(slots, np.int64)
        self.bcap = np.zeros(slots, np.int64)
        self.oldest = np.full(slots, -1, np.int64)
        self.lnext = np.full(slots, -1, np.int64)
        self.lprev = np.full(slots, -1, np.int64)
        self.epoch_of = np.zeros(slots, np.int64)
        self.snap_off = np.zeros(slots, np.int64)
        self.snap_len = np.zeros(slots, np.int64)
        self.reeval = np.zeros(slots, np.bool_)
        # the share of the window's arrivals that reach each buffer (cost model, Eq. 9-13):
        # 1 in an engine; 0 for a cluster replica, whose buffer holds the whole window's best
        # after a re-evaluation but then gets only the messages routed to its partition
        self.arrival_share = np.ones(slots)
        self.bi = np.zeros((pool, 3), np.int64)
        self.bf = np.zeros((pool, 2))
        self._pending_arrays(slots)
        self.head = np.full(buckets, -1, np.int64)
        self.snap = np.zeros((1 << 12, 3), np.int64)     # top-k rows at an epoch's first touch
        self.used = 0              # pool rows handed out (live and garbage)
        self.snap_used = 0
        self.epoch = 1
        self.expired_upto = -1     # every seq <= this has been expired from the buffers
        self.touched: list[np.ndarray] = []

    def __getstate__(self) -> dict:
        # snapshots keep the rows handed out, not the pools' spare capacity (the kernels
        # grow the pools again as they need)
        st = self.__dict__.copy()
        st["bi"], st["bf"], st["snap"] = self.bi[: self.used], self.bf[: self.used], self.snap[: self.snap_used]
        return st

    def _pending_arrays(self, slots: int) -> None:
        """Deferred candidates (module docstring): up to PENDING rows per slot, a row's four
        fields side by side (a slot's few rows share a cache line or two)."""
        self.pn = np.zeros(slots, np.int64)
        self.pend = np.zeros((slots, PENDING, 4), np.int64)

    def __setstate__(self, st: dict) -> None:
        self.__dict__.update(st)
        if "pn" not in st:                       # a snapshot from before the pending rows
            self._pending_arrays(len(self.bstart))
        if "arrival_share" not in st:             # a snapshot from before the field
            self.arrival_share = np.ones(len(self.bstart))
        if self.snap.ndim == 1:                  # ids alone, from before the rows had scores
            self.snap, self.snap_used = np.zeros((1, 3), np.int64), 0
        for name in ("bi", "bf", "snap"):        # a slice pickles as its own array: keep a row
            a = getattr(self, name)
            if len(a) == 0:
                setattr(self, name, np.zeros((1,) + a.shape[1:], a.dtype))

    def grow_slots(self, n: int) -> None:
        if n <= len(self.bstart):
            return
        m = max(n, 2 * len(self.bstart))
        for name, fill in (("bstart", 0), ("blen", 0), ("bcap", 0), ("oldest", -1), ("lnext", -1),
                           ("lprev", -1), ("epoch_of", 0), ("snap_off", 0), ("snap_len", 0)):
            a = getattr(self, name)
            b = np.full(m, fill, a.dtype)
            b[: len(a)] = a
            setattr(self, name, b)
        r = np.zeros(m, np.bool_)
        r[: len(self.reeval)] = self.reeval
        self.reeval = r
        a = np.ones(m)
        a[: len(self.arrival_share)] = self.arrival_share
        self.arrival_share = a
        old = len(self.pn)
        pn, pend = self.pn, self.pend
        self._pending_arrays(m)
        self.pn[:old], self.pend[:old] = pn, pend


# ----------------------------------------------------------------------------- helpers

@numba.njit(cache=True)
def _grow2(a, need):
    """``a`` (a buffers' pool) with room for ``need`` rows, doubled. The rows past ``a``'s
    are left unset: a pool row is written (``_reserve``) before any buffer holds it, and
    numba's np.zeros writes every page of the new pool (numpy's is mapped lazily), so
    zeroing the slack cost as much as the copy. GeoNames, keyword at 64 partitions: the one
    doubling inside the 5,000-message stream (262,144 -> 524,288 rows, 21 MB) made its
    partition the slowest."""
    n = a.shape[0]
    if need <= n:
        return a
    b = np.empty((max(need, 2 * n), a.shape[1]), a.dtype)
    b[:n] = a
    return b


@numba.njit(cache=True)
def _grow1(a, need):
    n = a.shape[0]
    if need <= n:
        return a
    b = np.zeros(max(need, 2 * n), a.dtype)
    b[:n] = a
    return b


@numba.njit(cache=True, inline="always")
def _move(di, df, d, si, sf, r):
    """Row r of (si, sf) to row d of (di, df), element by element (a row-slice assignment
    builds two array views per row: several times slower in these loops)."""
    di[d, 0] = si[r, 0]
    di[d, 1] = si[r, 1]
    di[d, 2] = si[r, 2]
    df[d, 0] = sf[r, 0]
    df[d, 1] = sf[r, 1]


@numba.njit(cache=True, inline="always")
def _bucket(seq, head):
    return seq & (head.shape[0] - 1)


@numba.njit(cache=True)
def _unlink(s, oldest, lnext, lprev, head):
    if oldest[s] < 0:
        return
    b = _bucket(oldest[s], head)
    p = lprev[s]
    n = lnext[s]
    if p >= 0:
        lnext[p] = n
    else:
        head[b] = n
    if n >= 0:
        lprev[n] = p
    lnext[s] = -1
    lprev[s] = -1
    oldest[s] = -1


@numba.njit(cache=True, inline="always")
def _relink(s, bstart, blen, bi, oldest, lnext, lprev, head):
    """Put s in the list of its (new) oldest buffered seq."""
    _unlink(s, oldest, lnext, lprev, head)
    n = blen[s]
    if n == 0:
        return
    a = bstart[s]
    o = bi[a, SEQ]
    for r in range(a + 1, a + n):
        if bi[r, SEQ] < o:
            o = bi[r, SEQ]
    b = _bucket(o, head)
    oldest[s] = o
    lprev[s] = -1
    lnext[s] = head[b]
    if head[b] >= 0:
        lprev[head[b]] = s
    head[b] = s


@numba.njit(cache=True)
def relink_all(slots, bstart, blen, bi, oldest, lnext, lprev, head):
    """Rebuild every bucket list (after the bucket table was resized)."""
    head[:] = -1
    for s in slots:
        oldest[s] = -1
        lnext[s] = -1
        lprev[s] = -1
        _relink(s, bstart, blen, bi, oldest, lnext, lprev, head)


@numba.njit(cache=True)
def _snapshot(s, k, epoch, epoch_of, snap_off, snap_len, snap, snap_used, bstart, blen, bi, bf, touched,
              n_touched):
    """Record s's top-k before its first change in this epoch: per row its message id, seq
    and score (the score's bits, ``SNAP_SC``), what a diff of the list needs. A list whose
    first change left its diff rows instead (``DIFF_CHANGED``: ``snap_len`` -2 - rows) gets
    the snapshot they stand for now, before its next change (:func:`_undo_diff`)."""
    if epoch_of[s] == epoch:
        if snap_len[s] <= -2:
            snap, snap_used = _undo_diff(s, k, snap_off, snap_len, snap, snap_used, bstart, blen, bi, bf)
        return snap, snap_used, touched, n_touched
    epoch_of[s] = epoch
    m = min(k[s], blen[s])
    snap = _grow2(snap, snap_used + m)
    a = bstart[s]
    bits = bf.view(np.int64)
    for r in range(m):
        snap[snap_used + r, ID] = bi[a + r, ID]
        snap[snap_used + r, SEQ] = bi[a + r, SEQ]
        snap[snap_used + r, SNAP_SC] = bits[a + r, SC]
    snap_off[s] = snap_used
    snap_len[s] = m
    snap_used += m
    touched = _grow1(touched, n_touched + 1)
    touched[n_touched] = s
    n_touched += 1
    return snap, snap_used, touched, n_touched


# A list's first change in an epoch under ``DIFF_CHANGED`` leaves its diff rows in the
# snapshot pool instead of a snapshot of the list before (``snap_len`` -2 - rows): two pool
# rows a diff row, (seq, message id, score bits) then (rank times sign, 0, 0). Made as the
# buffer changes (its rows are in cache then), they cost next to nothing; a snapshot, read
# back at the epoch's end beside the buffer to compare and diff the lists, cost as much as
# the whole-list table of the same lists. A later change in the epoch turns them back into
# the snapshot (_undo_diff), and the usual diff follows.

@numba.njit(cache=True, inline="always")
def _keep_top(s, q0, k, bstart, blen, bi, bf, oi, of):
    """s's top-k rows from row ``q0`` on, copied to ``oi`` / ``of`` (before an expiry that
    leaves the rows above ``q0`` as they are); returns their count."""
    a = bstart[s]
    m = min(k[s], blen[s]) - q0
    for r in range(m):
        _move(oi, of, r, bi, bf, a + q0 + r)
    return max(m, 0)


@numba.njit(cache=True, inline="always")
def _leave_diff(s, base, o_i, o_f, o0, n_old, n_i, n_f, n0, n_new, epoch, epoch_of, snap_off, snap_len, snap,
                snapf, snap_used, touched, n_touched, d_key, d_rank, d_id, d_sc, d_sign, add):
    """s's first change in this epoch: its diff rows, left in the snapshot pool (see above).
    The tails of its top-k from rank ``base + 1`` on (the rows above are the same before and
    after): ``n_old`` rows of ``o_i`` / ``o_f`` from row ``o0`` before the change, ``n_new``
    rows of ``n_i`` / ``n_f`` from row ``n0`` after it (buffer-row layout). ``snapf``: the
    pool as float64 (grown with it)."""
    nd = diff_list(s, o_i, ID, o_i, SEQ, o_f, SC, o0, n_old, n_i, ID, n_i, SEQ, n_f, SC, n0, n_new, base,
                   d_key, d_rank, d_id, d_sc, d_sign, 0, add)
    if snap_used + 2 * nd > snap.shape[0]:
        snap = _grow2(snap, snap_used + 2 * nd)
        snapf = snap.view(np.float64)
    for r in range(nd):
        w = snap_used + 2 * r
        p = d_rank[r] - 1 - base
        snap[w, SEQ] = o_i[o0 + p, SEQ] if d_sign[r] < 0 else n_i[n0 + p, SEQ]
        snap[w, ID] = d_id[r]
        snapf[w, SNAP_SC] = d_sc[r]
        snap[w + 1, SEQ] = d_rank[r] * d_sign[r]
        snap[w + 1, ID] = 0
        snap[w + 1, SNAP_SC] = 0
    epoch_of[s] = epoch
    snap_off[s] = snap_used
    snap_len[s] = -2 - nd
    snap_used += 2 * nd
    touched = _grow1(touched, n_touched + 1)
    touched[n_touched] = s
    return snap, snapf, snap_used, touched, n_touched + 1


@numba.njit(cache=True)
def _undo_diff(s, k, snap_off, snap_len, snap, snap_used, bstart, blen, bi, bf):
    """The snapshot of s's list before its first change in this epoch, from its top-k now and
    the diff rows that change left (their entering rows' places taken out, the leaving rows
    put back at their ranks), in place of the rows."""
    o = snap_off[s]
    nd = -2 - snap_len[s]
    a = bstart[s]
    m = min(k[s], blen[s])
    n_in = 0
    for r in range(nd):
        if snap[o + 2 * r + 1, SEQ] > 0:
            n_in += 1
    m_old = m - n_in + (nd - n_in)
    snap = _grow2(snap, snap_used + m_old)
    snapf = snap.view(np.float64)
    w = snap_used
    i = 0                           # the next row of the list now
    r_out = 0                       # the next leaving row (the -1 rows come first, by rank)
    r_in = nd - n_in                # the next entering row (by rank)
    for q in range(m_old):
        if r_out < nd - n_in and -snap[o + 2 * r_out + 1, SEQ] == q + 1:
            snap[w, SEQ] = snap[o + 2 * r_out, SEQ]
            snap[w, ID] = snap[o + 2 * r_out, ID]
            snap[w, SNAP_SC] = snap[o + 2 * r_out, SNAP_SC]
            r_out += 1
        else:
            while r_in < nd and snap[o + 2 * r_in + 1, SEQ] == i + 1:
                i += 1                  # a row that entered in the change: not in the list before
                r_in += 1
            snap[w, SEQ] = bi[a + i, SEQ]
            snap[w, ID] = bi[a + i, ID]
            snapf[w, SNAP_SC] = bf[a + i, SC]
            i += 1
        w += 1
    snap_off[s] = snap_used
    snap_len[s] = m_old
    return snap, snap_used + m_old


@numba.njit(cache=True, inline="always")
def _mark_changed(s, epoch, epoch_of, snap_len, touched, n_touched):
    """s's top-k changed in this epoch, for good (``process_batch``, ``last``): ``snap_len``
    -1 stands for a snapshot that differs from any list."""
    epoch_of[s] = epoch
    snap_len[s] = -1
    touched = _grow1(touched, n_touched + 1)
    touched[n_touched] = s
    return touched, n_touched + 1


@numba.njit(cache=True, inline="always")
def _reserve(s, need, bstart, blen, bcap, bi, bf, used):
    """Make room for ``need`` rows in s's buffer (moving it to the pool's end if needed)."""
    if need <= bcap[s]:
        return bi, bf, used
    cap = max(need, bcap[s] + bcap[s] // 2 + 2, 4)   # 1.5x: buffers are many and small
    bi = _grow2(bi, used + cap)
    bf = _grow2(bf, used + cap)
    a = bstart[s]
    for r in range(blen[s]):
        _move(bi, bf, used + r, bi, bf, a + r)
    bstart[s] = used
    bcap[s] = cap
    return bi, bf, used + cap


@numba.njit(cache=True)
def _insert(s, seq, mid, t, sc, k, mode, kmax, theta, bstart, blen, bcap, bi, bf, used,
            oldest, lnext, lprev, head):
    """Insert the newest message into s's buffer (paper 6.2.1, first type of update).

    Returns (bi, bf, used, theta_raised)."""
    bi, bf, used = _reserve(s, blen[s] + 1, bstart, blen, bcap, bi, bf, used)
    a = bstart[s]
    n = blen[s]
    p = 0
    while p < n and bf[a + p, SC] > sc:
        p += 1
    # rows from p on score <= sc and are older: the new message dominates them
    w = p
    lost_oldest = False
    for r in range(p, n):
        d = bi[a + r, DC] + 1
        if mode == SKYBAND and d >= k:
            if bi[a + r, SEQ] == oldest[s]:
                lost_oldest = True
            continue
        _move(bi, bf, a + w, bi, bf, a + r)
        bi[a + w, DC] = d
        w += 1
    for r in range(w - 1, p - 1, -1):
        _move(bi, bf, a + r + 1, bi, bf, a + r)
    bi[a + p, SEQ] = seq
    bi[a + p, ID] = mid
    bi[a + p, DC] = 0
    bf[a + p, T] = t
    bf[a + p, SC] = sc
    blen[s] = w + 1
    raised = False
    if mode == KMAX and blen[s] > kmax:
        th = bf[a + kmax - 1, SC]
        m = kmax
        while m < blen[s] and bf[a + m, SC] >= th:
            m += 1
        for r in range(m, blen[s]):
            if bi[a + r, SEQ] == oldest[s]:
                lost_oldest = True
        blen[s] = m
        theta[s] = th
        raised = True
    if lost_oldest or oldest[s] < 0:
        _relink(s, bstart, blen, bi, oldest, lnext, lprev, head)
    return bi, bf, used, raised


@numba.njit(cache=True, inline="always")
def _expire_sub(s, upto, bstart, blen, bi, bf):
    """Drop rows with seq <= upto (paper 6.2.1, second type); no counter changes, since an
    expiring message is older than every other and so dominates none."""
    a = bstart[s]
    w = 0
    for r in range(blen[s]):
        if bi[a + r, SEQ] > upto:
            if w != r:
                _move(bi, bf, a + w, bi, bf, a + r)
            w += 1
    blen[s] = w


@numba.njit(cache=True, inline="always")
def _bucket_span(lo, upto, nb):
    """The bucket positions to walk for the seqs in (lo, upto]: all of them once the span
    reaches the table's size (a bucket's list is then checked by seq, not by position)."""
    if upto - lo >= nb:
        return 0, nb - 1
    return lo + 1, upto


@numba.njit(cache=True)
def _expire_to(lo, upto, k, theta, bstart, blen, bi, bf, oldest, lnext, lprev, head,
               reeval, epoch, epoch_of, snap_off, snap_len, snap, snap_used, touched, n_touched):
    """Expire every buffered seq in (lo, upto]; flag buffers that fall below k."""
    nb = head.shape[0]
    first, last = _bucket_span(lo, upto, nb)
    for q in range(first, last + 1):
        b = q & (nb - 1)
        s = head[b]
        while s >= 0:
            nxt = lnext[s]
            if oldest[s] <= upto:
                snap, snap_used, touched, n_touched = _snapshot(
                    s, k, epoch, epoch_of, snap_off, snap_len, snap, snap_used, bstart, blen, bi, bf,
                    touched, n_touched)
                _expire_sub(s, upto, bstart, blen, bi, bf)
                _relink(s, bstart, blen, bi, oldest, lnext, lprev, head)
                if blen[s] < k[s] and theta[s] > 0.0:
                    reeval[s] = True
            s = nxt
    return snap, snap_used, touched, n_touched


@numba.njit(cache=True, nogil=True)
def process(seqs, ids, ts, expire_upto, cand_off, cand_slot, cand_score,
            k, theta, alive, mode, kmax, expired_upto,
            bstart, blen, bcap, bi, bf, used, oldest, lnext, lprev, head, reeval,
            epoch, epoch_of, snap_off, snap_len, snap, snap_used):
    """Apply a batch in stream order: before message i, expire up to expire_upto[i]; then
    insert it into the buffers of its candidates (cand rows cand_off[i]..cand_off[i+1]).

    Returns the grown arrays, counters (insertions, buffer rows visited) and the touched /
    theta-raised slot lists."""
    touched = np.zeros(64, np.int64)
    n_touched = 0
    raised = np.zeros(16, np.int64)
    n_raised = 0
    inserted = 0
    ops = 0
    for i in range(seqs.shape[0]):
        e = expire_upto[i]
        if e > expired_upto:
            snap, snap_used, touched, n_touched = _expire_to(
                expired_upto, e, k, theta, bstart, blen, bi, bf, oldest, lnext, lprev, head,
                reeval, epoch, epoch_of, snap_off, snap_len, snap, snap_used, touched, n_touched)
            expired_upto = e
        for c in range(cand_off[i], cand_off[i + 1]):
            s = cand_slot[c]
            sc = cand_score[c]
            if not alive[s] or sc < theta[s]:
                continue
            snap, snap_used, touched, n_touched = _snapshot(
                s, k, epoch, epoch_of, snap_off, snap_len, snap, snap_used, bstart, blen, bi, bf,
                touched, n_touched)
            bi, bf, used, r = _insert(s, seqs[i], ids[i], ts[i], sc, k[s], mode, kmax, theta,
                                      bstart, blen, bcap, bi, bf, used, oldest, lnext, lprev, head)
            inserted += 1
            ops += blen[s]
            if r:
                raised = _grow1(raised, n_raised + 1)
                raised[n_raised] = s
                n_raised += 1
    return (bi, bf, used, snap, snap_used, expired_upto, touched[:n_touched], raised[:n_raised],
            inserted, ops)


# ----------------------------------------------------------------------------- micro-batch

@numba.njit(cache=True, inline="always")
def _sort_new(g0, m, g_sc, order):
    """``order`` := positions (from ``g0``) of the ``m`` new rows g0.. by (score desc, seq
    desc); rows come in seq order."""
    for r in range(m):
        order[r] = m - 1 - r                 # seq descending: a stable sort keeps it for ties
    if m <= 24:
        for r in range(1, m):
            x = order[r]
            q = r - 1
            while q >= 0 and g_sc[g0 + order[q]] < g_sc[g0 + x]:
                order[q + 1] = order[q]
                q -= 1
            order[q + 1] = x
    else:
        key = np.empty(m)
        for r in range(m):
            key[r] = -g_sc[g0 + order[r]]
        perm = np.argsort(key, kind="mergesort")
        tmp = order[:m].copy()
        for r in range(m):
            order[r] = tmp[perm[r]]


@numba.njit(cache=True, inline="always")
def _merge_one(s, g0, g1, g_seq, g_id, g_t, g_sc, k, upto, bstart, blen, bi, bf,
               order, fen, dcn, tbi, tbf):
    """Merge the batch's candidates of s (rows g0..g1 of g_*, in seq order, all newer than the
    buffer; indices, not slices: a slice costs two reference-count updates) into
    its buffer in one pass: the k-skyband of (buffer + candidates) with exact dominance
    counters, less the rows with seq <= ``upto`` (expired). A buffered row's counter grows by
    the candidates that score at least as high (all are newer); a candidate's counter is the
    number of newer candidates of the batch that score at least as high.
    The rows that differ from the buffer's are built in ``tbi`` / ``tbf``: the new buffer is
    its first ``p0`` rows as they are (no candidate ranks above them, none of them is dropped,
    so neither their place nor their counter changes), then tbi's rows. ``q0`` is the first
    row whose message differs (a candidate kept there or a buffered row dropped; a candidate
    dropped before it only raises counters). Returns (row count w, oldest seq kept or -1, p0,
    q0); :func:`_install` puts the rows in the buffer."""
    m = g1 - g0
    _sort_new(g0, m, g_sc, order)
    # dominance counts among the candidates: in (score desc, seq desc) order, the rows seen
    # before r that are newer than r dominate it (Fenwick tree over positions in seq order)
    for r in range(m + 1):
        fen[r] = 0
    for r in range(m):
        p = order[r]
        below = 0
        q = p + 1
        while q > 0:
            below += fen[q]
            q -= q & -q
        dcn[p] = r - below                 # seen so far, less those at positions <= p
        q = p + 1
        while q <= m:
            fen[q] += 1
            q += q & -q
    n = blen[s]
    a = bstart[s]
    w = 0
    i = 0
    j = 0
    lo = -1
    p0 = -1                                 # the first row that differs (-1: none yet)
    q0 = -1                                 # the first row of another message
    while i < n or j < m:
        # equal scores: the candidate first (it is newer than every buffered row)
        if j < m and (i >= n or g_sc[g0 + order[j]] >= bf[a + i, SC]):
            p = order[j]
            gp = g0 + p
            j += 1
            if p0 < 0:
                p0 = w                      # kept or not, it raises the counters below it
            if dcn[p] >= k or g_seq[gp] <= upto:
                continue
            if q0 < 0:
                q0 = w
            sq = g_seq[gp]
            o = w - p0
            tbi[o, SEQ] = sq
            tbi[o, ID] = g_id[gp]
            tbi[o, DC] = dcn[p]
            tbf[o, T] = g_t[gp]
            tbf[o, SC] = g_sc[gp]
        else:
            d = bi[a + i, DC] + j
            sq = bi[a + i, SEQ]
            i += 1
            if d >= k or sq <= upto:
                if p0 < 0:
                    p0 = w
                if q0 < 0:
                    q0 = w
                continue
            if p0 >= 0:
                o = w - p0
                tbi[o, SEQ] = sq
                tbi[o, ID] = bi[a + i - 1, ID]
                tbi[o, DC] = d
                tbf[o, T] = bf[a + i - 1, T]
                tbf[o, SC] = bf[a + i - 1, SC]
            # else: j == 0 and w == i - 1: the row stays where it is, as it is
        if lo < 0 or sq < lo:
            lo = sq
        w += 1
    if p0 < 0:
        p0 = w
    if q0 < 0:
        q0 = w
    return w, lo, p0, q0


@numba.njit(cache=True, inline="always")
def _install(s, w, p0, bstart, blen, bcap, bi, bf, used, tbi, tbf):
    """s's buffer := its first ``p0`` rows, then the first ``w - p0`` rows of tbi / tbf
    (``_merge_one``)."""
    bi, bf, used = _reserve(s, w, bstart, blen, bcap, bi, bf, used)
    a = bstart[s] + p0
    for r in range(w - p0):
        _move(bi, bf, a + r, tbi, tbf, r)
    blen[s] = w
    return bi, bf, used


@numba.njit(cache=True, inline="always")
def _merge_room(gmax, rows):
    """Scratch of the merges of one call: a group behind its buffer's pending rows (h_*),
    the candidates' order, Fenwick tree and counters, and the rows a merge writes (``rows``
    at most)."""
    return (np.empty(gmax, np.int64), np.empty(gmax, np.int64), np.empty(gmax), np.empty(gmax),
            np.empty(gmax, np.int64), np.empty(gmax + 1, np.int64), np.empty(gmax, np.int64),
            np.empty((rows, 3), np.int64), np.empty((rows, 2)))


@numba.njit(cache=True, inline="always")
def _take_pending(s, pn, pend, pendf, h_seq, h_id, h_t, h_sc):
    """s's pending rows to h_* (from row 0), in seq order; s keeps none. Returns their count."""
    m = pn[s]
    for r in range(m):
        h_seq[r] = pend[s, r, P_SEQ]
        h_id[r] = pend[s, r, P_ID]
        h_t[r] = pendf[s, r, P_T]
        h_sc[r] = pendf[s, r, P_SC]
    pn[s] = 0
    return m


@numba.njit(cache=True, nogil=True)
def process_batch(seqs, ids, ts, expire_upto, cand_off, cand_slot, cand_score,
                  k, theta, alive, expired_upto,
                  bstart, blen, bcap, bi, bf, used, oldest, lnext, lprev, head, reeval,
                  epoch, epoch_of, snap_off, snap_len, snap, snap_used, last, pn, pend):
    """``process`` for the k-skyband mode, by micro-batch. Only the state at the batch's end
    is observable (updates compare it with the epoch's snapshot), and it is the
    message-by-message result: the k-skyband of the buffer plus the batch's candidates, less
    what expired by the batch's end (an expiring message is older than every message that
    stays, so it dominates none of them). Each subscription that gets candidates or holds an
    expiring row is visited once, in slot order (on a dense stream most of them are: in slot
    order the per-slot arrays and, after a compaction, the pools are read in sequence), its
    pending rows and candidates merged in one pass (``_merge_one``); or its candidates are
    deferred to its pending rows ``pn`` / ``pend`` (module docstring:
    a full buffer without an expiring row, every candidate below its k-th row, room left).
    A buffer below k rows afterwards (theta > 0)
    waits for re-evaluation; one that dipped below k and was refilled by the batch is exact.

    ``last`` (0, ``MARK_CHANGED`` or ``DIFF_CHANGED``): with ``MARK_CHANGED``, nothing but
    this batch's re-evaluations touches the buffers again before the
    epoch ends (the engine's last part of a publish call). A buffer first touched in the epoch
    then keeps no snapshot of its top-k: the merge says where the first changed message sits
    (``q0``, or a top-k row expiring for a buffer without candidates), and a changed list is
    marked (``snap_len`` -1); an unchanged one is left as it is (a later touch finds the same
    top-k to snapshot). A change found so is final, whatever a
    re-evaluation does next: either a top-k row expired (it cannot come back), or a candidate
    of the batch entered the first k rows, and fewer than k window messages rank above it (the
    k-skyband holds every message >= theta that k others do not dominate; what a
    re-evaluation adds scores below theta), so it stays in the top-k, which never held it.
    ``DIFF_CHANGED`` (diffs, in any part of a call) compares the same way, and a changed list
    leaves its diff rows as its rows change: its top-k rows from ``q0`` (or from the first
    expiring one) on before the change (in the buffer until the merge installs its rows;
    copied aside before an expiry drops them) merged with those after it
    (:func:`_leave_diff`), while both are in cache; a
    later change in the epoch turns the rows back into a snapshot (:func:`_snapshot`). A list
    the batch leaves as it is keeps nothing, and a later touch in the epoch finds the same
    list to snapshot.
    Open buffers (theta = 0) are snapshotted as before, so that ``raise_open`` sees them.

    Returns what ``process`` returns (no theta is raised in this mode)."""
    touched = np.zeros(64, np.int64)
    n_touched = 0
    nm = seqs.shape[0]
    nslots = k.shape[0]
    e = expire_upto[nm - 1] if nm > 0 else expired_upto
    if e < expired_upto:
        e = expired_upto
    # 1. candidates per subscription
    cnt = np.zeros(nslots, np.int64)
    dist = np.empty(cand_off[nm], np.int64)
    keep = np.zeros(cand_off[nm], np.bool_)
    n_distinct = 0
    n_cand = 0
    for c in range(cand_off[nm]):
        s = cand_slot[c]
        if not alive[s] or cand_score[c] < theta[s]:
            continue
        keep[c] = True
        if cnt[s] == 0:
            dist[n_distinct] = s
            n_distinct += 1
        cnt[s] += 1
        n_cand += 1
    # 2. buffers holding a seq that expires (the bucket lists of the expiring seqs)
    expiring = np.zeros(nslots, np.bool_)
    only_exp = np.empty(16, np.int64)       # expiring buffers without candidates
    n_exp = 0
    if e > expired_upto:
        nb = head.shape[0]
        first, last_q = _bucket_span(expired_upto, e, nb)
        for q in range(first, last_q + 1):
            s = head[q & (nb - 1)]
            while s >= 0:
                if oldest[s] <= e and not expiring[s]:
                    expiring[s] = True
                    if cnt[s] == 0:
                        only_exp = _grow1(only_exp, n_exp + 1)
                        only_exp[n_exp] = s
                        n_exp += 1
                s = lnext[s]
    # 3. the subscriptions to visit, in slot order
    n_visit = n_distinct + n_exp
    if n_visit * 8 >= nslots:
        visit = np.empty(n_visit, np.int64)
        v = 0
        for s in range(nslots):
            if cnt[s] > 0 or expiring[s]:
                visit[v] = s
                v += 1
    else:
        visit = np.sort(np.concatenate((dist[:n_distinct], only_exp[:n_exp])))
    # 4. group the candidates by subscription, in visiting order (seq order within a group)
    gstart = cnt                            # cnt[s] becomes s's next write position
    pos = 0
    gmax = 0
    rows = 0                                # the most rows a merge can write
    kmax = 1
    for v in range(n_visit):
        s = visit[v]
        c = cnt[s]
        gstart[s] = pos
        pos += c
        gmax = max(gmax, c + pn[s])         # a merge takes the pending rows too
        rows = max(rows, blen[s] + c + pn[s])
        kmax = max(kmax, k[s])
    g_seq = np.empty(n_cand, np.int64)
    g_id = np.empty(n_cand, np.int64)
    g_t = np.empty(n_cand)
    g_sc = np.empty(n_cand)
    for i in range(nm):
        for c in range(cand_off[i], cand_off[i + 1]):
            if not keep[c]:
                continue
            s = cand_slot[c]
            p = gstart[s]
            g_seq[p] = seqs[i]
            g_id[p] = ids[i]
            g_t[p] = ts[i]
            g_sc[p] = cand_score[c]
            gstart[s] = p + 1
    # 5. one visit per subscription
    n_pend = pend.shape[1]
    pendf = pend.view(np.float64)
    h_seq, h_id, h_t, h_sc, order, fen, dcn, tbi, tbf = _merge_room(gmax, rows)
    # DIFF_CHANGED: a list's rows before an expiry, and its diff rows (_leave_diff)
    n_d = kmax if last == DIFF_CHANGED else 0
    oi = np.empty((n_d, 3), np.int64)
    of = np.empty((n_d, 2))
    d_key = np.empty(2 * n_d, np.int64)
    d_rank = np.empty(2 * n_d, np.int32)
    d_id = np.empty(2 * n_d, np.int64)
    d_sc = np.empty(2 * n_d)
    d_sign = np.empty(2 * n_d, np.int8)
    add = np.empty(n_d, np.int64)
    snapf = snap.view(np.float64)
    ops = 0
    g0 = 0
    for v in range(n_visit):
        s = visit[v]
        g1 = gstart[s]                      # the end of s's group after the scatter
        n = blen[s]
        old = oldest[s]
        if (g1 > g0 and old > e and theta[s] > 0.0 and k[s] > 0 and n >= k[s]
                and pn[s] + g1 - g0 <= n_pend):
            # no row expires: candidates all below the k-th row wait (module docstring)
            top = g_sc[g0]
            for r in range(g0 + 1, g1):
                top = max(top, g_sc[r])
            if top < bf[bstart[s] + k[s] - 1, SC]:
                q = pn[s]
                for r in range(g0, g1):
                    pend[s, q, P_SEQ] = g_seq[r]
                    pend[s, q, P_ID] = g_id[r]
                    pendf[s, q, P_T] = g_t[r]
                    pendf[s, q, P_SC] = g_sc[r]
                    q += 1
                pn[s] = q
                ops += g1 - g0
                g0 = g1
                continue
        # compare instead of snapshot: first touch in a last part, an opened buffer aside
        compare = last > 0 and epoch_of[s] != epoch and theta[s] > 0.0
        if not compare:
            snap, snap_used, touched, n_touched = _snapshot(
                s, k, epoch, epoch_of, snap_off, snap_len, snap, snap_used, bstart, blen, bi, bf,
                touched, n_touched)
            if snapf.shape[0] != snap.shape[0]:       # the pool grew
                snapf = snap.view(np.float64)
        m = pn[s]
        ops += n + g1 - g0 + m              # rows visited (the cost model's unit)
        if g1 > g0 or m > 0:
            x_seq, x_id, x_t, x_sc, x0, x1 = g_seq, g_id, g_t, g_sc, g0, g1
            if m > 0:                       # the pending rows, then the batch's (newer)
                _take_pending(s, pn, pend, pendf, h_seq, h_id, h_t, h_sc)
                for r in range(g0, g1):
                    h_seq[m + r - g0] = g_seq[r]
                    h_id[m + r - g0] = g_id[r]
                    h_t[m + r - g0] = g_t[r]
                    h_sc[m + r - g0] = g_sc[r]
                x_seq, x_id, x_t, x_sc, x0, x1 = h_seq, h_id, h_t, h_sc, 0, m + g1 - g0
            w, lo, p0, q0 = _merge_one(s, x0, x1, x_seq, x_id, x_t, x_sc, k[s], e, bstart, blen, bi, bf,
                                       order, fen, dcn, tbi, tbf)
            # the top-k's messages are the same iff they all come before q0 (or none changed)
            if compare and q0 < k[s] and not (q0 == n and w == n):
                if last == DIFF_CHANGED:
                    # the buffer still holds the list before, tbi the rows after from p0 <= q0
                    snap, snapf, snap_used, touched, n_touched = _leave_diff(
                        s, q0, bi, bf, bstart[s] + q0, max(min(k[s], n) - q0, 0), tbi, tbf, q0 - p0,
                        max(min(k[s], w) - q0, 0), epoch, epoch_of, snap_off, snap_len, snap, snapf, snap_used,
                        touched, n_touched, d_key, d_rank, d_id, d_sc, d_sign, add)
                else:
                    touched, n_touched = _mark_changed(s, epoch, epoch_of, snap_len, touched, n_touched)
            bi, bf, used = _install(s, w, p0, bstart, blen, bcap, bi, bf, used, tbi, tbf)
            if lo != old:
                _relink(s, bstart, blen, bi, oldest, lnext, lprev, head)
        else:
            n_old = -1                      # DIFF_CHANGED: the top-k rows kept before the expiry
            q0 = 0
            if compare:
                # the top-k changes iff one of its rows expires
                a = bstart[s]
                for r in range(min(k[s], n)):
                    if bi[a + r, SEQ] <= e:
                        if last == DIFF_CHANGED:
                            q0 = r
                            n_old = _keep_top(s, q0, k, bstart, blen, bi, bf, oi, of)
                        else:
                            touched, n_touched = _mark_changed(s, epoch, epoch_of, snap_len, touched,
                                                               n_touched)
                        break
            _expire_sub(s, e, bstart, blen, bi, bf)
            _relink(s, bstart, blen, bi, oldest, lnext, lprev, head)
            if n_old >= 0:
                snap, snapf, snap_used, touched, n_touched = _leave_diff(
                    s, q0, oi, of, 0, n_old, bi, bf, bstart[s] + q0, max(min(k[s], blen[s]) - q0, 0), epoch,
                    epoch_of, snap_off, snap_len, snap, snapf, snap_used, touched, n_touched, d_key, d_rank, d_id,
                    d_sc, d_sign, add)
        if blen[s] < k[s] and theta[s] > 0.0:
            reeval[s] = True
        g0 = g1
    return (bi, bf, used, snap, snap_used, e, touched[:n_touched], touched[:0], n_cand, ops)


@numba.njit(cache=True, nogil=True)
def merge_pending(slots, k, upto, bstart, blen, bcap, bi, bf, used, oldest, lnext, lprev, head,
                  pn, pend):
    """Merge the pending rows of ``slots`` into their buffers (module docstring), before a
    change that does not come through ``process_batch`` (an expiry without messages) or a
    read of the whole buffer. Every pending row scores below its buffer's k-th row, so the
    top-k stays as it is and nothing is recorded. ``upto``: the expiry watermark."""
    pendf = pend.view(np.float64)
    rows = 0
    for s in slots:
        if pn[s] > 0:
            rows = max(rows, blen[s] + pn[s])
    g_seq, g_id, g_t, g_sc, order, fen, dcn, tbi, tbf = _merge_room(pend.shape[1], rows)
    for s in slots:
        if pn[s] == 0:
            continue
        m = _take_pending(s, pn, pend, pendf, g_seq, g_id, g_t, g_sc)
        old = oldest[s]
        w, lo, p0, q0 = _merge_one(s, 0, m, g_seq, g_id, g_t, g_sc, k[s], upto, bstart, blen, bi, bf,
                                   order, fen, dcn, tbi, tbf)
        bi, bf, used = _install(s, w, p0, bstart, blen, bcap, bi, bf, used, tbi, tbf)
        if lo != old:
            _relink(s, bstart, blen, bi, oldest, lnext, lprev, head)
    return bi, bf, used


@numba.njit(cache=True, nogil=True)
def expire_only(lo, upto, k, theta, bstart, blen, bi, bf, oldest, lnext, lprev, head, reeval,
                epoch, epoch_of, snap_off, snap_len, snap, snap_used):
    touched = np.zeros(64, np.int64)
    snap, snap_used, touched, n = _expire_to(lo, upto, k, theta, bstart, blen, bi, bf, oldest,
                                             lnext, lprev, head, reeval, epoch, epoch_of,
                                             snap_off, snap_len, snap, snap_used, touched, 0)
    return snap, snap_used, touched[:n]


@numba.njit(cache=True, nogil=True)
def raise_open(slots, k, theta, bstart, blen, bi, bf, oldest, lnext, lprev, head):
    """theta = 0 buffers hold every matching message; once they have k rows, theta can
    rise to kScore (rows below it are dropped), so that pruning starts to work for them.
    Returns the slots whose theta rose."""
    out = np.zeros(slots.shape[0], np.int64)
    n = 0
    for s in slots:
        if theta[s] == 0.0 and blen[s] >= k[s] and k[s] > 0:
            a = bstart[s]
            th = bf[a + k[s] - 1, SC]
            if th <= 0.0:
                continue
            m = k[s]
            while m < blen[s] and bf[a + m, SC] >= th:
                m += 1
            if m < blen[s]:
                blen[s] = m
                _relink(s, bstart, blen, bi, oldest, lnext, lprev, head)
            theta[s] = th
            out[n] = s
            n += 1
    return out[:n]


@numba.njit(cache=True)
def cost_cskyband(j, k, window, c_topk, p_arr, p_exp):
    """Expected cost per window update of keeping the j best as the buffer (Eq. 9-13).

    prob(theta) = j / |W|; |A| = k ln(|W| prob / k) (Eq. 9, floored at k: the buffer holds the
    top-k at least); Z' of Eq. 12 with |A'_init| = j; for a buffer that shrinks (time window,
    more expiries than arrivals, or a cluster replica that gets a share of the arrivals) the
    drift bound (j - k + 1) / (prob (p_exp - p_arr)) caps Z'."""
    p = j / max(window, 1.0)
    a_size = k * (1.0 + math.log(max(j / k, 1.0)))
    c_sm = (p_arr + p_exp) * p * a_size
    d = j - k + 1.0
    z = (2.0 * d * j + d * (d + 1.0)) / p
    if p_exp > p_arr:
        z = min(z, d / (p * (p_exp - p_arr)))
    return c_sm + c_topk / z


@numba.njit(cache=True, nogil=True)
def kth_scores(slots, k, bstart, blen, bf):
    """Score of the k-th buffered row of each slot; -inf with fewer rows."""
    out = np.full(slots.shape[0], -np.inf)
    for i in range(slots.shape[0]):
        s = slots[i]
        if blen[s] >= k[s]:
            out[i] = bf[bstart[s] + k[s] - 1, SC]
    return out


@numba.njit(cache=True)
def choose_theta(sc, complete, k, policy, window, c_topk, p_arr, p_exp, kmax):
    """Pick s.theta from the candidates ``sc`` (best first). Returns (theta, rows kept), or
    (-1, -1) when more candidates are needed (the cut would split equal scores).

    policy 0: cost-based (paper 6.2: incremental descent from j = k while the cost falls);
    1: Skyband baseline (0.95 kScore, or the lowest score the candidates certify when they
    stop above it); 2: kmax baseline (keep the kmax best)."""
    n = sc.shape[0]
    if n < k:
        if complete:
            return 0.0, n
        return -1.0, -1
    if policy == 0:
        best = -1
        best_cost = math.inf
        for j in range(k, n + 1):
            th = sc[j - 1]
            if not (complete or th > sc[n - 1]) or (th <= 0.0 and not complete):
                break
            c = cost_cskyband(j, k, window, c_topk, p_arr, p_exp)
            if c >= best_cost:
                break
            best = j
            best_cost = c
        if best < 0:
            return -1.0, -1
        th = sc[best - 1]
    elif policy == 1:
        th = 0.95 * sc[k - 1]
        if not complete and th <= sc[n - 1]:
            # the candidates do not reach 0.95 kScore: the lowest threshold they can certify
            # (strictly above the last one fetched) keeps the buffer exact without a refetch
            if sc[k - 1] <= sc[n - 1]:
                return -1.0, -1
            m = k - 1
            while m + 1 < n and sc[m + 1] > sc[n - 1]:
                m += 1
            th = sc[m]
    else:
        if n < kmax:
            if complete:
                return 0.0, n
            return -1.0, -1
        th = sc[kmax - 1]
        if not complete and th <= sc[n - 1]:
            return -1.0, -1
    if th <= 0.0:
        return 0.0, n
    m = 0
    while m < n and sc[m] >= th:
        m += 1
    return th, m


@numba.njit(cache=True, nogil=True)
def apply_reevals(slots, c_off, c_seq, c_id, c_t, c_sc, c_complete, k, theta, policy, mode, kmax,
                  window, c_topk, p_arr, p_exp, arrival_share,
                  bstart, blen, bcap, bi, bf, used, oldest, lnext, lprev, head, reeval,
                  epoch, epoch_of, snap_off, snap_len, snap, snap_used):
    """Rebuild buffers from re-evaluation candidates (Algorithm 2, lines 2-5).

    ``arrival_share[s]``: the share of the arrivals that reach slot ``s``'s buffer (the cost
    model sees ``p_arr * arrival_share[s]``: a buffer whose expiries outrun its arrivals
    drifts down, Eq. 12's drift bound). Returns grown arrays and the slots that need more
    candidates."""
    more = np.zeros(slots.shape[0], np.int64)
    n_more = 0
    touched = np.zeros(64, np.int64)
    n_touched = 0
    for i in range(slots.shape[0]):
        s = slots[i]
        a0 = c_off[i]
        a1 = c_off[i + 1]
        th, m = choose_theta(c_sc[a0:a1], c_complete[i], k[s], policy, window, c_topk,
                             p_arr * arrival_share[s], p_exp, kmax)
        if m < 0:
            more[n_more] = s
            n_more += 1
            continue
        snap, snap_used, touched, n_touched = _snapshot(
            s, k, epoch, epoch_of, snap_off, snap_len, snap, snap_used, bstart, blen, bi, bf,
            touched, n_touched)
        # k-skyband of the kept rows: a row survives if fewer than k newer rows score >= it
        bi, bf, used = _reserve(s, m, bstart, blen, bcap, bi, bf, used)
        b = bstart[s]
        w = 0
        for r in range(a0, a0 + m):
            d = 0
            for q in range(a0, a0 + m):
                if c_seq[q] > c_seq[r] and c_sc[q] >= c_sc[r]:
                    d += 1
            if mode == 0 and d >= k[s]:
                continue
            bi[b + w, SEQ] = c_seq[r]
            bi[b + w, ID] = c_id[r]
            bi[b + w, DC] = d
            bf[b + w, T] = c_t[r]
            bf[b + w, SC] = c_sc[r]
            w += 1
        blen[s] = w
        theta[s] = th
        reeval[s] = False
        _relink(s, bstart, blen, bi, oldest, lnext, lprev, head)
    return bi, bf, used, snap, snap_used, more[:n_more], touched[:n_touched]


@numba.njit(cache=True, nogil=True)
def cut_rows(slots, k, theta, bstart, blen, bi, bf):
    """Each of ``slots``' buffer cut at its k-th score: the rows scoring at least it (the
    top-k and its ties; every row when fewer than k), laid end to end, with the threshold
    of that cut, ``max(theta, k-th score)``. A buffer holds every k-skyband message scoring
    at least its threshold, in (score desc, seq desc) order: the rows kept are then every
    k-skyband message at or above the new threshold, and each row's dominance counter
    counts rows that are kept too (newer, scoring at least as high), so the cut is a
    buffer as a re-evaluation could leave it (:func:`install_rows`). Returns (thresholds
    float64[n], offsets int64[n + 1], int rows int64[m, 3], float rows float64[m, 2])."""
    n = slots.shape[0]
    off = np.zeros(n + 1, np.int64)
    th = np.empty(n)
    for i in range(n):
        s = slots[i]
        m = blen[s]
        th[i] = theta[s]
        if m >= k[s] and k[s] > 0:
            a = bstart[s]
            kth = bf[a + k[s] - 1, SC]
            if kth > th[i]:
                th[i] = kth
            m = k[s]
            while m < blen[s] and bf[a + m, SC] >= kth:
                m += 1
        off[i + 1] = off[i] + m
    ri = np.empty((off[n], 3), np.int64)
    rf = np.empty((off[n], 2))
    for i in range(n):
        _copy_rows(ri, rf, off[i], bi, bf, bstart[slots[i]], off[i + 1] - off[i])
    return th, off, ri, rf


@numba.njit(cache=True, inline="always")
def _copy_rows(di, df, d, si, sf, s, m):
    """Rows ``s .. s + m`` of (``si``, ``sf``) to rows ``d .. d + m`` of (``di``, ``df``),
    field by field (a row slice would be a view per row)."""
    for r in range(m):
        di[d + r, 0] = si[s + r, 0]
        di[d + r, 1] = si[s + r, 1]
        di[d + r, 2] = si[s + r, 2]
        df[d + r, 0] = sf[s + r, 0]
        df[d + r, 1] = sf[s + r, 1]


@numba.njit(cache=True)
def install_rows(slots, th, off, ri, rf, theta, bstart, blen, bcap, bi, bf, used, oldest, lnext, lprev,
                 head, reeval):
    """Buffers of ``slots`` from the rows of :func:`cut_rows` (in the same order), with their
    thresholds; nothing left to re-evaluate. Returns the grown (bi, bf, used)."""
    for i in range(slots.shape[0]):
        s = slots[i]
        m = off[i + 1] - off[i]
        bi, bf, used = _reserve(s, m, bstart, blen, bcap, bi, bf, used)
        _copy_rows(bi, bf, bstart[s], ri, rf, off[i], m)
        blen[s] = m
        theta[s] = th[i]
        reeval[s] = False
        _relink(s, bstart, blen, bi, oldest, lnext, lprev, head)
    return bi, bf, used


@numba.njit(cache=True, nogil=True)
def gather_topk(slots, k, bstart, blen, bi, bf, with_seqs=True):
    """The top-k rows of ``slots`` laid end to end: (offsets, ids, seqs, scores);
    ``with_seqs=False`` leaves seqs empty (an update's rows need no seqs: a third less to
    write, and to fault in, on the hot path of every call's updates)."""
    n = slots.shape[0]
    off = np.zeros(n + 1, np.int64)
    for i in range(n):
        s = slots[i]
        off[i + 1] = off[i] + min(k[s], blen[s])
    ids = np.empty(off[n], np.int64)
    seqs = np.empty(off[n] if with_seqs else 0, np.int64)
    sc = np.empty(off[n])
    for i in range(n):
        s = slots[i]
        a = bstart[s]
        o = off[i]
        for r in range(off[i + 1] - o):
            ids[o + r] = bi[a + r, ID]
            sc[o + r] = bf[a + r, SC]
        if with_seqs:
            for r in range(off[i + 1] - o):
                seqs[o + r] = bi[a + r, SEQ]
    return off, ids, seqs, sc


@numba.njit(cache=True, nogil=True)
def changed_topk(touched, k, bstart, blen, bi, snap_off, snap_len, snap):
    """Which touched slots have a top-k (ids, in order) different from their snapshot."""
    out = np.zeros(touched.shape[0], np.bool_)
    for i in range(touched.shape[0]):
        s = touched[i]
        m = min(k[s], blen[s])
        if m != snap_len[s]:                # also a change marked without a snapshot (-1)
            out[i] = True
            continue
        a = bstart[s]
        o = snap_off[s]
        for r in range(m):
            if bi[a + r, ID] != snap[o + r, ID]:
                out[i] = True
                break
    return out


@numba.njit(cache=True, nogil=True)
def diff_topk(slots, k, bstart, blen, bi, bf, snap_off, snap_len, snap):
    """The diff rows of ``slots``' top-k lists, slot after slot: (which int64: the index into
    ``slots``, rank int32, message ids int64, scores float64, sign int8), a slot's -1 rows
    (rank before) then its +1 rows (rank after), each by rank. A slot snapshotted in this
    epoch (``snap_len >= 0``) gets the diff of its top-k against the snapshot
    (:func:`diff_list`); one whose only change left its rows (``snap_len <= -2``,
    :func:`_leave_diff`) gets them as they are."""
    n = slots.shape[0]
    cap = 0
    for x in range(n):
        s = slots[x]
        cap += snap_len[s] + min(k[s], blen[s]) if snap_len[s] >= 0 else -2 - snap_len[s]
    which = np.empty(cap, np.int64)
    rank = np.empty(cap, np.int32)
    ids = np.empty(cap, np.int64)
    sc = np.empty(cap)
    sign = np.empty(cap, np.int8)
    snapf = snap.view(np.float64)
    kmax = 0
    for x in range(n):
        kmax = max(kmax, k[slots[x]])
    add = np.empty(kmax, np.int64)          # the +1 rows' positions in the buffer
    w = 0
    for x in range(n):
        s = slots[x]
        o = snap_off[s]
        if snap_len[s] >= 0:
            w = diff_list(x, snap, ID, snap, SEQ, snapf, SNAP_SC, o, snap_len[s], bi, ID, bi, SEQ, bf, SC,
                          bstart[s], min(k[s], blen[s]), 0, which, rank, ids, sc, sign, w, add)
            continue
        for r in range(-2 - snap_len[s]):
            v = snap[o + 2 * r + 1, SEQ]
            which[w] = x
            rank[w] = abs(v)
            ids[w] = snap[o + 2 * r, ID]
            sc[w] = snapf[o + 2 * r, SNAP_SC]
            sign[w] = 1 if v > 0 else -1
            w += 1
    return which[:w], rank[:w], ids[:w], sc[:w], sign[:w]


@numba.njit(cache=True, nogil=True)
def compact(slots, bstart, blen, bcap, bi, bf):
    """Slide the buffers of ``slots`` to the front of the pools, in pool order, in place:
    no second pool, so a compaction costs no transient memory. Each keeps room for half its
    length again (at least 4 rows), never more than it had, so a buffer never overtakes the
    next one. Returns the rows used."""
    order = np.argsort(bstart[slots], kind="mergesort")
    pos = 0
    for o in order:
        s = slots[o]
        if bcap[s] == 0:
            continue
        a = bstart[s]
        n = blen[s]
        for r in range(n):              # pos <= a: rows move down, in ascending order
            _move(bi, bf, pos + r, bi, bf, a + r)
        bstart[s] = pos
        bcap[s] = min(bcap[s], max(n + n // 2 + 2, 4))
        pos += bcap[s]
    return pos

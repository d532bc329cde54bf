"""The subscriber side of the range top-k kind: subscriptions, their top-k lists, and the
delivery of message batches to them with the paper's protocol (Section II-A).

A message (box, object, y) reaches every subscription whose (lo, hi) lies in its box (a
unicast message: the one subscription it names). Each applies, in message order::

    if its list holds the object: overwrite the object's y (y = +inf: remove it)
    else: list <- the k lowest of list u {(object, y)}

lists ordered by (y, id). Ordering (footnote 6) is the server's: an object's new value comes
before the replacement it makes room for. The store keeps the rows in the order of its k-d
tree (:class:`~.points.PointIndex`), so that a box's subscriptions are contiguous runs of
leaves, and keeps each leaf's lists together: as an *entry set* (the leaf's distinct (y,
object) entries in order and a 64-bit mask per row saying which it holds) when they number at
most 64, as they mostly do (neighbouring subscriptions hold nearly the same objects), else
column-wise (a block: entry c of every row of the leaf, then entry c + 1, ...). A batch is
delivered leaf after leaf: the (leaf, message) pairs are found and grouped by leaf, then each
leaf gets its messages in batch order, each applied to all the rows it reaches at once, in
place, while the leaf is in cache, so the lists are streamed once per call whatever the number
of receipts; the masks (or the block) as they were before the call, compared after, give
exactly the subscriptions whose top-k (ids, order or a listed y) differs after the call.
"""
from __future__ import annotations

import sys

import numba
import numpy as np

from numba.cpython.unsafe.numbers import leading_zeros

from rankcast.common.arrays import grown, popcount
from rankcast.common.diffs import diff_list
from rankcast.common.idmap import IdMap, _get
from .points import PointIndex

__all__ = ["SubscriberStore", "DiffColumns", "apply_protocol", "leaf_pairs", "by_leaf", "apply_leaves", "take_changed", "to_blocks",
           "from_blocks"]


@numba.njit(cache=True, inline="always")
def _before(y1, o1, y2, o2):
    return y1 < y2 or (y1 == y2 and o1 < o2)


@numba.njit(cache=True, inline="always")
def _entry_rank(uy, ud, nu, y, d):
    """How many of an entry set's ``nu`` entries sort before (``y``, ``d``)."""
    q = 0
    for u in range(nu):
        q += (uy[u] < y) | ((uy[u] == y) & (ud[u] < d))
    return q


@numba.njit(cache=True, inline="always")
def _entry_insert(uy, ud, nu, q, y, d):
    """(``y``, ``d``) inserted at rank ``q`` of an entry set's ``nu`` entries."""
    for u in range(nu, q, -1):
        uy[u] = uy[u - 1]
        ud[u] = ud[u - 1]
    uy[q] = y
    ud[q] = d


@numba.njit(cache=True, inline="always")
def apply_protocol(j, obj, y, topn, topid, topy, k):
    """The subscriber protocol on row ``j``; returns whether the list changed."""
    n = topn[j]
    pos = -1
    for t in range(n):
        if topid[j, t] == obj:
            pos = t
            break
    if pos >= 0:
        if topy[j, pos] == y:
            return False
        for t in range(pos, n - 1):
            topid[j, t] = topid[j, t + 1]
            topy[j, t] = topy[j, t + 1]
        n -= 1
        if y == np.inf:
            topn[j] = n
            return True
    else:
        if y == np.inf:
            return False
        if n == k:
            if not _before(y, obj, topy[j, n - 1], topid[j, n - 1]):
                return False
            n -= 1
    t = n
    while t > 0 and _before(y, obj, topy[j, t - 1], topid[j, t - 1]):
        topid[j, t] = topid[j, t - 1]
        topy[j, t] = topy[j, t - 1]
        t -= 1
    topid[j, t] = obj
    topy[j, t] = y
    topn[j] = n + 1
    return True


@numba.njit(cache=True)
def leaf_pairs(mf, uleaf, box, leaves):
    """Step 1 of a delivery: which leaves of the k-d tree each message reaches. Returns
    (leaf int64[p], code int64[p]) in message order, ``code = 4 * message + mode``: mode 0 a
    leaf its box crosses (its rows are tested), 1 a leaf inside its box (every row receives
    it), 2 the leaf ``uleaf[m]`` of a unicast message's row (``uleaf[m] >= 0``)."""
    cap = 1024
    p_leaf = np.empty(cap, np.int64)
    p_code = np.empty(cap, np.int64)
    n = 0
    stack = np.empty(64, np.int64)
    for m in range(mf.shape[0]):
        if uleaf[m] >= 0:
            if n == cap:
                cap *= 2
                p_leaf = grown(p_leaf, cap)
                p_code = grown(p_code, cap)
            p_leaf[n] = uleaf[m]
            p_code[n] = 4 * m + 2
            n += 1
            continue
        a0 = mf[m, 0]
        a1 = mf[m, 1]
        b0 = mf[m, 2]
        b1 = mf[m, 3]
        sp = 1
        stack[0] = 1
        while sp > 0:
            sp -= 1
            v = stack[sp]
            if box[v, 0] > a1 or box[v, 1] < a0 or box[v, 2] > b1 or box[v, 3] < b0:
                continue
            full = box[v, 0] >= a0 and box[v, 1] <= a1 and box[v, 2] >= b0 and box[v, 3] <= b1
            if full or v >= leaves:
                first = v
                last = v
                while first < leaves:           # the leaves under v
                    first = 2 * first
                    last = 2 * last + 1
                if n + last - first + 1 > cap:
                    cap = 2 * (n + last - first + 1)
                    p_leaf = grown(p_leaf, cap)
                    p_code = grown(p_code, cap)
                for f in range(first, last + 1):
                    p_leaf[n] = f
                    p_code[n] = 4 * m + (1 if full else 0)
                    n += 1
                continue
            stack[sp] = 2 * v
            stack[sp + 1] = 2 * v + 1
            sp += 2
    return p_leaf[:n], p_code[:n]


@numba.njit(cache=True)
def by_leaf(p_leaf, p_code, leaves):
    """Step 2: the pairs of :func:`leaf_pairs` grouped by leaf, message order kept within a
    leaf (a stable counting sort). Returns (offsets int64[leaves + 1]: leaf ``leaves + j`` owns
    ``codes[offsets[j]:offsets[j + 1]]``, codes)."""
    off = np.zeros(leaves + 1, np.int64)
    for e in range(p_leaf.shape[0]):
        off[p_leaf[e] - leaves + 1] += 1
    for j in range(leaves):
        off[j + 1] += off[j]
    pos = off[:-1].copy()
    codes = np.empty(p_leaf.shape[0], np.int64)
    for e in range(p_leaf.shape[0]):
        j = p_leaf[e] - leaves
        codes[pos[j]] = p_code[e]
        pos[j] += 1
    return off, codes


@numba.njit(cache=True, inline="always")
def _apply_block(ly, lid, nrow, k, obj, y, take, skipped, placed, py, pid):
    """:func:`apply_protocol` on the rows ``t < nrow`` of a block with ``take[t]``, all at once,
    in place. The block holds lists column-wise (``ly[c, t]``, ``lid[c, t]``: entry c of row
    t), padded with y = +inf to k entries. The protocol is the k lowest of (list without
    ``obj``) plus ``(y, obj)`` (a +inf value only pads: a delete): a merge, one branch-free
    pass over the columns (vectorised by the compiler) in which each row reads its old list
    at offset -1, 0 or +1 from the column written (``skipped``: obj's entry passed over,
    ``placed``: (y, obj) written; ``py``, ``pid``: the old entry c - 1, kept while column c - 1
    is overwritten). Columns that every taking row keeps (entries before (y, obj) other than
    obj's) are found first and not rewritten."""
    first = 0
    while first < k:
        keep = True
        for t in range(nrow):
            yc = ly[first, t]
            dc = lid[first, t]
            keep &= (((yc < y) | ((yc == y) & (dc < obj))) & (dc != obj)) | ~take[t]
        if not keep:
            break
        first += 1
    if first == k:
        return
    for t in range(nrow):
        skipped[t] = 0
        placed[t] = 0
    if first > 0:
        for t in range(nrow):
            py[t] = ly[first - 1, t]
            pid[t] = lid[first - 1, t]
    live = y < np.inf
    for c in range(first, k):
        cp = c + 1
        for t in range(nrow):
            y_m = py[t]
            d_m = pid[t]
            y_0 = ly[c, t]
            d_0 = lid[c, t]
            y_p = ly[cp, t] if cp < k else np.inf          # past the end: the (+inf, 0) pad
            d_p = lid[cp, t] if cp < k else 0
            off = skipped[t] - placed[t]
            cy = y_m if off < 0 else (y_0 if off == 0 else y_p)
            cd = d_m if off < 0 else (d_0 if off == 0 else d_p)
            sk = skipped[t] | ((cd == obj) & (cy < np.inf))     # obj's entry: read the next
            off = sk - placed[t]
            cy = y_m if off < 0 else (y_0 if off == 0 else y_p)
            cd = d_m if off < 0 else (d_0 if off == 0 else d_p)
            put = (placed[t] == 0) & live & ((y < cy) | ((y == cy) & (obj < cd)))
            skipped[t] = sk
            placed[t] |= put
            py[t] = y_0
            pid[t] = d_0
            ly[c, t] = (y if put else cy) if take[t] else y_0
            lid[c, t] = (obj if put else cd) if take[t] else d_0


# --------------------------------------------------------------------------- entry sets
# At 1M subscriptions a leaf's rows are neighbours in (lo, hi) and mostly hold the same
# objects: the (y, object) entries of a leaf's lists number about k, not rows * k. A leaf whose
# entries fit in NBITS is kept as an *entry set*: its distinct entries in (y, id) order
# (``uy``, ``ud``: entry u of leaf j at ``[j, u]``, ``nu[j]`` of them) and a bit mask per row
# (``masks[j, t]``: entry u held iff bit 63 - u is set; the row's list is its set bits from
# the highest down). A message is then one search of the leaf's entries (the object's
# entries, where its new value goes) and a few bit operations per row (:func:`_apply_bits`):
# the worst entry of a row is its lowest set bit. A leaf whose entries do not fit keeps the
# column block (``wide[j]``, :func:`_apply_block`) until they fit again.
NBITS = 64
PACK_UPTO = 32          # a leaf is packed into an entry set when it has at most this many entries
PACK_RETRY = 16         # deliveries to a leaf that failed to pack before it is tried again
_ONE = np.uint64(1)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
_ZERO = np.uint64(0)


@numba.njit(cache=True, inline="always")
def _bit(u):
    return _ONE << np.uint64(NBITS - 1 - u)


@numba.njit(cache=True, inline="always")
def _masks_insert(masks, nrow, q):
    """An entry inserted at index q: entries q.. move to q + 1.. (the bits at positions
    63 - q and below move one down; position 0 must be free)."""
    low = _ALL >> np.uint64(q)
    for t in range(nrow):
        m = masks[t]
        masks[t] = (m & ~low) | ((m & low) >> _ONE)


@numba.njit(cache=True, inline="always")
def _masks_remove(masks, nrow, q):
    """Entry q removed: entries q + 1.. move to q.. (bits below position 63 - q move up)."""
    keep = ~(_ALL >> np.uint64(q))
    low = (_ALL >> np.uint64(q + 1)) if q < NBITS - 1 else _ZERO
    for t in range(nrow):
        m = masks[t]
        masks[t] = (m & keep) | ((m & low) << _ONE)


@numba.njit(cache=True)
def _collect(uy, ud, nu, masks, nrow):
    """Entries no row holds dropped from a leaf's entry set; returns how many are left."""
    held = _ZERO
    for t in range(nrow):
        held |= masks[t]
    for u in range(nu - 1, -1, -1):
        if held & _bit(u) == _ZERO:
            for v in range(u, nu - 1):
                uy[v] = uy[v + 1]
                ud[v] = ud[v + 1]
            nu -= 1
            _masks_remove(masks, nrow, u)
    return nu


@numba.njit(cache=True, inline="always")
def _apply_bits(uy, ud, nu, masks, old, cnt, nrow, k, obj, y, take):
    """:func:`apply_protocol` on the rows ``t < nrow`` of an entry-set leaf with ``take[t]``:
    (y, obj) found or inserted among the leaf's entries (``old``, the masks before the call,
    follow the insert), then per row: obj's entries cleared, (y, obj) set, the lowest set bit
    (the worst entry) cleared if the list then holds k + 1 (``cnt``: entries per row). The
    leaf must have room for one more entry. Returns its entry count."""
    bit = _ZERO
    live = y < np.inf
    q = 0
    om = _ZERO                              # obj's entries
    for u in range(nu):                     # one pass: obj's entries and the rank of (y, obj)
        q += (uy[u] < y) | ((uy[u] == y) & (ud[u] < obj))
        om |= _bit(u) if ud[u] == obj else _ZERO
    if live:
        if not (q < nu and uy[q] == y and ud[q] == obj):
            _entry_insert(uy, ud, nu, q, y, obj)
            nu += 1
            _masks_insert(masks, nrow, q)
            _masks_insert(old, nrow, q)
            low = _ALL >> np.uint64(q)      # obj's entries from q on moved one down
            om = (om & ~low) | ((om & low) >> _ONE)
        bit = _bit(q)
    for t in range(nrow):
        m = masks[t]
        m2 = (m & ~om) | bit
        c2 = cnt[t] - ((m & om) != _ZERO) + live
        over = c2 > k
        m2 = (m2 & (m2 - _ONE)) if over else m2
        masks[t] = m2 if take[t] else m
        cnt[t] = (k if over else c2) if take[t] else cnt[t]
    return nu


@numba.njit(cache=True)
def pack_leaf(ly, lid, nrow, k, uy, ud, masks, cap):
    """A column block's lists (``ly``, ``lid``, rows ``t < nrow``) as an entry set (``uy``,
    ``ud``, ``masks``); returns the number of entries, or -1 (nothing usable written) when
    there are more than ``cap``."""
    nu = 0
    for t in range(nrow):
        for c in range(k):
            y = ly[c, t]
            if y == np.inf:
                break
            d = lid[c, t]
            q = _entry_rank(uy, ud, nu, y, d)
            if q < nu and uy[q] == y and ud[q] == d:
                continue
            if nu == cap:
                return -1
            _entry_insert(uy, ud, nu, q, y, d)
            nu += 1
    for t in range(masks.shape[0]):
        m = _ZERO
        if t < nrow:
            for c in range(k):
                y = ly[c, t]
                if y == np.inf:
                    break
                d = lid[c, t]
                q = _entry_rank(uy, ud, nu, y, d)
                m |= _bit(q)
        masks[t] = m
    return nu


@numba.njit(cache=True)
def unpack_leaf(uy, ud, nu, masks, k, ly, lid):
    """An entry-set leaf's lists written to its column block (every row, padded with (+inf, 0))."""
    for t in range(masks.shape[0]):
        m = masks[t]
        c = 0
        for u in range(nu):
            if m & _bit(u) != _ZERO:
                ly[c, t] = uy[u]
                lid[c, t] = ud[u]
                c += 1
        for cc in range(c, k):
            ly[cc, t] = np.inf
            lid[cc, t] = 0


@numba.njit(cache=True)
def pack_all(start, end, leaves, k, by, bid, uy, ud, nu, masks, wide, hold, cap, retry):
    """Every leaf packed into an entry set where its entries are at most ``cap``; the others
    wait ``retry`` deliveries before their next try (``hold``)."""
    for j in range(leaves):
        n = pack_leaf(by[j], bid[j], end[leaves + j] - start[leaves + j], k, uy[j], ud[j], masks[j], cap)
        wide[j] = n < 0
        nu[j] = max(n, 0)
        hold[j] = retry if n < 0 else 0


# --------------------------------------------------------------------------- diffs
# ``updates="diff"``: each changed row's entries that left (-1, rank before) and entered (+1,
# rank after) its list, written by ``apply_leaves`` while the leaf's lists before and after
# the call are in cache, straight into the call's diff columns: rows in the store's (k-d
# tree) order, each row's -1 then +1 entries by rank. Laying them out by subscription id
# instead would read every run back in random order, which at 1M subscriptions cost more
# than finding them. The columns are the caller's (``DiffColumns``): a call at 1M
# subscriptions writes 5M rows (150 MB), and fresh memory, touched page by page as it is
# written, cost 40-55 ms per call, about as much as finding the rows.

@numba.njit(cache=True)
def _room(o_sid, o_rank, o_id, o_y, o_sign, need):
    """The diff columns with room for ``need`` rows (doubled): a leaf's rows are checked at
    once, before it is applied."""
    if need > o_sid.shape[0]:
        cap = max(need, 2 * o_sid.shape[0])
        o_sid = grown(o_sid, cap)
        o_rank = grown(o_rank, cap)
        o_id = grown(o_id, cap)
        o_y = grown(o_y, cap)
        o_sign = grown(o_sign, cap)
    return o_sid, o_rank, o_id, o_y, o_sign


@numba.njit(cache=True, inline="always")
def _diff_bits(sid, uy, ud, o, m, o_sid, o_rank, o_id, o_y, o_sign, nd):
    """A row's diff on an entry-set leaf: mask ``o`` before the call, ``m`` after. Only the
    bits that differ are visited (highest first: entry order); an entry's rank is the
    number of its list's bits from the highest down to its own."""
    for side in range(2):
        mine = o if side == 0 else m
        x = (o & ~m) if side == 0 else (m & ~o)
        sign = -1 if side == 0 else 1
        while x != _ZERO:
            u = np.int64(leading_zeros(x))
            x ^= _bit(u)
            o_sid[nd] = sid
            o_rank[nd] = popcount(mine >> np.uint64(NBITS - 1 - u))
            o_id[nd] = ud[u]
            o_y[nd] = uy[u]
            o_sign[nd] = sign
            nd += 1
    return nd


@numba.njit(cache=True, inline="always")
def _diff_block(sid, oy, oid, ly, lid, t, k, o_sid, o_rank, o_id, o_y, o_sign, nd, add):
    """A row's diff on a column-block leaf: column ``t`` of ``oy``/``oid`` before the call,
    of ``ly``/``lid`` after, each list's entries in (y, id) order and then (+inf, 0) pads
    (``diff_list``, ascending, the object id as the key)."""
    m_old = 0
    m_new = 0
    for c in range(k):
        m_old += oy[c, t] < np.inf
        m_new += ly[c, t] < np.inf
    return diff_list(sid, oid, t, oid, t, oy, t, 0, m_old, lid, t, lid, t, ly, t, 0, m_new, 0,
                     o_sid, o_rank, o_id, o_y, o_sign, nd, add, True)


@numba.njit(cache=True)
def apply_leaves(mf, mi, rows, off, codes, start, end, lo, hi, leaves, topn, by, bid, uy, ud, nu, masks, wide,
                 hold, k, recv, changed, trace, pack_upto, pack_retry, diff, sid, o_sid, o_rank, o_id, o_y, o_sign):
    """Step 3: every leaf's messages applied to its rows, leaf after leaf (a row sees its
    messages in batch order), each message to all its rows at once, in place: on the leaf's
    entry set (:func:`_apply_bits`) if it has room for one entry per message, after dropping
    entries no row holds if needed; else on its column block (``by[j]``, ``bid[j]``: entry c
    of its row t at ``[c, t]``, :func:`_apply_block`), written from the entry set first, and
    packed again afterwards if its entries fit. The rows whose list then differs from before
    the call (ids, order or a y: an entry set's masks against their copy, a block against its
    copy) get ``changed`` set and their ``topn``; a block is packed when its entries are at most
    ``pack_upto`` (tried again ``pack_retry`` deliveries after a failure: ``hold``, so that a
    leaf that stays wide pays the try seldom). ``recv[m]`` counts message ``m``'s receipts.
    With ``diff`` each changed row's diff rows are written too (``_diff_bits``,
    ``_diff_block``; ``sid``: the rows' subscription ids) into the columns ``o_*`` (subscription
    id, rank int32, object id, y, sign int8), grown where they lack room. Returns how many rows
    changed, with ``trace`` every (row, message) receipt, the diff columns (grown or not)
    and their row count. With ``diff`` no row is flagged in ``changed``: the diff names them."""
    cap = 1024 if trace else 0
    nd = 0
    tr = np.empty((cap, 2), np.int64)
    ntr = 0
    size = by.shape[2]
    oy = np.empty((k, size))
    oid = np.empty((k, size), np.int64)
    old = np.empty(size, np.uint64)
    cntb = np.empty(size, np.int64)
    take = np.zeros(size, np.bool_)
    skipped = np.empty(size, np.int64)
    placed = np.empty(size, np.int64)
    py = np.empty(size)
    pid = np.empty(size, np.int64)
    differs = np.empty(size, np.bool_)
    cnt = np.empty(size, np.int64)
    add = np.empty(k, np.int64)             # a block row's +1 places (_diff_block)
    nchanged = 0
    for j in range(leaves):
        nmsg = off[j + 1] - off[j]
        if nmsg == 0:
            continue
        a = start[leaves + j]
        nrow = end[leaves + j] - a
        nvec = (nrow + 7) // 8 * 8              # whole vectors: rows past the leaf's end are
        ly = by[j]                              # (+inf, 0) pads that never take a message
        lid = bid[j]
        lm = masks[j]
        luy = uy[j]
        lud = ud[j]
        lu = nu[j]
        bits = not wide[j]
        if bits and lu + nmsg > NBITS:
            lu = _collect(luy, lud, lu, lm, nvec)
            if lu + nmsg > NBITS:
                unpack_leaf(luy, lud, lu, lm, k, ly, lid)
                bits = False
                wide[j] = True
        for t in range(nrow, nvec):
            take[t] = False
        if bits:
            for t in range(nvec):
                old[t] = lm[t]
                cntb[t] = topn[a + t] if t < nrow else 0
        else:
            for c in range(k):
                for t in range(nvec):
                    oy[c, t] = ly[c, t]
                    oid[c, t] = lid[c, t]
        for e in range(off[j], off[j + 1]):
            m = codes[e] >> 2
            mode = codes[e] & 3
            a0 = mf[m, 0]
            a1 = mf[m, 1]
            b0 = mf[m, 2]
            b1 = mf[m, 3]
            got = 0
            if mode == 1:
                for t in range(nrow):
                    take[t] = True
                got = nrow
            elif mode == 2:
                for t in range(nrow):
                    take[t] = a + t == rows[m]
                    got += take[t]
            else:                               # branch-free: the compiler vectorises it
                for t in range(nrow):
                    lt = lo[a + t]
                    ht = hi[a + t]
                    take[t] = (a0 <= lt) & (lt <= a1) & (b0 <= ht) & (ht <= b1)
                    got += take[t]
            if got == 0:
                continue
            recv[m] += got
            if bits:
                lu = _apply_bits(luy, lud, lu, lm, old, cntb, nvec, k, mi[m, 0], mf[m, 4], take)
            else:
                _apply_block(ly, lid, nvec, k, mi[m, 0], mf[m, 4], take, skipped, placed, py, pid)
            if trace:
                for t in range(nrow):
                    if take[t]:
                        if ntr == tr.shape[0]:
                            nt = np.empty((2 * ntr, 2), np.int64)
                            nt[:ntr] = tr[:ntr]
                            tr = nt
                        tr[ntr, 0] = a + t
                        tr[ntr, 1] = m
                        ntr += 1
        if diff and nd + 2 * k * nrow > o_sid.shape[0]:
            o_sid, o_rank, o_id, o_y, o_sign = _room(o_sid, o_rank, o_id, o_y, o_sign, nd + 2 * k * nrow)
        if bits:
            nu[j] = lu
            for t in range(nrow):
                if lm[t] != old[t]:
                    topn[a + t] = cntb[t]
                    changed[a + t] = not diff
                    nchanged += 1
                    if diff:
                        nd = _diff_bits(sid[a + t], luy, lud, old[t], lm[t], o_sid, o_rank, o_id, o_y, o_sign, nd)
            continue
        for t in range(nvec):                   # lists padded with (+inf, 0): equal lists iff
            differs[t] = False                  # equal columns
            cnt[t] = 0
        for c in range(k):
            for t in range(nvec):
                yc = ly[c, t]
                differs[t] |= (yc != oy[c, t]) | (lid[c, t] != oid[c, t])
                cnt[t] += yc < np.inf
        for t in range(nrow):
            if differs[t]:
                topn[a + t] = cnt[t]
                changed[a + t] = not diff
                nchanged += 1
                if diff:
                    nd = _diff_block(sid[a + t], oy, oid, ly, lid, t, k, o_sid, o_rank, o_id, o_y, o_sign, nd, add)
        if hold[j] > 0:
            hold[j] -= 1
            continue
        n = pack_leaf(ly, lid, nrow, k, luy, lud, lm, pack_upto)
        if n >= 0:
            nu[j] = n
            wide[j] = False
        else:
            hold[j] = pack_retry
    return nchanged, tr[:ntr], (o_sid, o_rank, o_id, o_y, o_sign), nd


@numba.njit(cache=True)
def to_blocks(start, end, leaves, topid, topy, width):
    """Row-major lists (rows in tree order, padded with (+inf, 0)) as leaf blocks: float64 and
    int64 ``[leaves, k, width]``, entry c of leaf j's row t at ``[j, c, t]``."""
    k = topy.shape[1]
    by = np.full((leaves, k, width), np.inf)
    bid = np.zeros((leaves, k, width), np.int64)
    for j in range(leaves):
        a = start[leaves + j]
        for t in range(end[leaves + j] - a):
            for c in range(k):
                by[j, c, t] = topy[a + t, c]
                bid[j, c, t] = topid[a + t, c]
    return by, bid


@numba.njit(cache=True)
def from_blocks(start, leaf_of, leaves, by, bid, uy, ud, nu, masks, wide, rows):
    """The lists of ``rows`` (tree order) read from the leaves (entry sets or column blocks):
    (ids int64[len, k], y float64[len, k]), padded with (+inf, 0)."""
    k = by.shape[1]
    ids = np.empty((rows.shape[0], k), np.int64)
    ys = np.empty((rows.shape[0], k))
    for i in range(rows.shape[0]):
        r = rows[i]
        j = leaf_of[r]
        t = r - start[leaves + j]
        if wide[j]:
            for c in range(k):
                ys[i, c] = by[j, c, t]
                ids[i, c] = bid[j, c, t]
            continue
        m = masks[j, t]
        c = 0
        for u in range(nu[j]):
            if m & _bit(u) != _ZERO:
                ys[i, c] = uy[j, u]
                ids[i, c] = ud[j, u]
                c += 1
        for cc in range(c, k):
            ys[i, cc] = np.inf
            ids[i, cc] = 0
    return ids, ys


@numba.njit(cache=True)
def take_changed(by_sid, changed, count):
    """The changed rows in subscription id order (``by_sid``: every row, by id), flags reset."""
    out = np.empty(count, np.int64)
    c = 0
    for r in by_sid:
        if changed[r]:
            out[c] = r
            c += 1
            changed[r] = False
    return out


class DiffColumns:
    """The diff columns that ``apply_leaves`` writes (subscription id, rank, object id, y,
    sign), kept from call to call: a set is written again by a later call once nothing holds
    its rows any more (the table a caller built on them is gone), so the rows land on memory
    already mapped. Two sets in turn: a caller that keeps one call's table until the next
    call returns leaves the other set free. A set is made anew, with room for a quarter more
    rows than the last call's, when it is held or too small."""

    DTYPES = (np.int64, np.int32, np.int64, np.float64, np.int8)

    def __init__(self):
        self.sets: list = [None, None]
        self.turn = 0
        self.rows = 0           # the last call's rows

    def take(self) -> tuple:
        """A set to write the next call's rows into."""
        cols = self.sets[self.turn]
        need = max(self.rows + self.rows // 4, 1024)
        # held elsewhere: a view of it in a caller's table (the set's tuple and this call's
        # argument are the two references of a free one)
        if cols is None or len(cols[0]) < self.rows or any(sys.getrefcount(cols[j]) > 2 for j in range(5)):
            cols = tuple(np.empty(need, d) for d in self.DTYPES)
        return cols

    def keep(self, cols: tuple, rows: int) -> tuple:
        """The set the call wrote (``take``'s, or grown by the kernel), kept for a later call;
        returns its rows."""
        self.sets[self.turn] = cols
        self.turn ^= 1
        self.rows = rows
        return tuple(c[:rows] for c in cols)


class SubscriberStore:
    """Subscriptions (id, lo, hi) and their top-k lists, rows in k-d tree order. The lists are
    kept per leaf of the tree (``width`` rows a leaf, a multiple of 8), so that delivery applies
    a message to a leaf's lists in place, a vector of rows at a time: a leaf of at most
    ``pack_upto`` distinct entries as an entry set (``uy``, ``ud``, ``nu``, ``masks``; see
    ``NBITS``), any other (``wide``) column-wise (``by``, ``bid``: ``[leaf, entry, row in
    leaf]``, entries past a list's end (+inf, 0)); a leaf moves between the two in delivery."""

    def __init__(self, k: int, leaf_size: int = 32, pack_upto: int = PACK_UPTO, pack_retry: int = PACK_RETRY):
        self.k = k
        self.leaf_size = leaf_size
        self.pack_upto = min(int(pack_upto), NBITS)    # a leaf of more entries keeps its block
        self.pack_retry = int(pack_retry)
        self.row_of = IdMap()
        self._set(np.zeros(0, np.int64), np.zeros(0), np.zeros(0), np.zeros(0, np.int64),
                  np.zeros((0, k), np.int64), np.zeros((0, k)))

    def _set(self, sid, lo, hi, topn, topid, topy) -> None:
        self.points = p = PointIndex(lo, hi, sid, self.leaf_size)
        o = p.order
        self.sid = p.key
        self.topn = np.ascontiguousarray(topn[o], np.int64)
        topid = np.array(topid[o], np.int64, order="C")
        topy = np.array(topy[o], np.float64, order="C")
        pad = np.arange(self.k)[None, :] >= self.topn[:, None]   # invariant: entries past a
        topid[pad] = 0                                              # list's end are (+inf, 0)
        topy[pad] = np.inf
        sizes = p.end[p.leaves:] - p.start[p.leaves:]
        self.width = max(8, (int(sizes.max(initial=0)) + 7) // 8 * 8)
        self.leaf_of = np.repeat(np.arange(p.leaves, dtype=np.int64), sizes)
        self.by, self.bid = to_blocks(p.start, p.end, p.leaves, topid, topy, self.width)
        self.uy = np.empty((p.leaves, NBITS))
        self.ud = np.empty((p.leaves, NBITS), np.int64)
        self.nu = np.zeros(p.leaves, np.int64)
        self.masks = np.zeros((p.leaves, self.width), np.uint64)
        self.wide = np.zeros(p.leaves, np.bool_)
        self.hold = np.zeros(p.leaves, np.int64)
        pack_all(p.start, p.end, p.leaves, self.k, self.by, self.bid, self.uy, self.ud, self.nu, self.masks,
                 self.wide, self.hold, self.pack_upto, self.pack_retry)
        self.by_sid = np.argsort(self.sid, kind="stable")      # rows by subscription id
        self.changed = np.zeros(len(o), np.bool_)
        self._diffs = DiffColumns()  # the diff columns of deliver
        self.row_of = IdMap(2 * len(o) + 16)
        if len(o):
            self.row_of.put(self.sid, np.arange(len(o), dtype=np.int64))

    def __len__(self) -> int:
        return len(self.sid)

    @property
    def lo(self) -> np.ndarray:
        return self.points.lo

    @property
    def hi(self) -> np.ndarray:
        return self.points.hi

    def lists(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The lists of ``rows``: (ids int64[len, k], y float64[len, k]), padded with (+inf, 0)."""
        p = self.points
        return from_blocks(p.start, self.leaf_of, p.leaves, self.by, self.bid, self.uy, self.ud, self.nu,
                           self.masks, self.wide,
                           np.ascontiguousarray(rows, np.int64))

    @property
    def topid(self) -> np.ndarray:
        """Every row's list ids, row-major (a copy)."""
        return self.lists(np.arange(len(self.sid)))[0]

    @property
    def topy(self) -> np.ndarray:
        """Every row's list values, row-major (a copy)."""
        return self.lists(np.arange(len(self.sid)))[1]

    @property
    def nbytes(self) -> int:
        return (self.points.nbytes + self.topn.nbytes + self.by.nbytes + self.bid.nbytes + self.leaf_of.nbytes
                + self.uy.nbytes + self.ud.nbytes + self.nu.nbytes + self.masks.nbytes + self.wide.nbytes
                + self.hold.nbytes
                + self.by_sid.nbytes + self.changed.nbytes + self.row_of.keys.nbytes * 2
                + self.row_of.state.nbytes)

    def rows(self, sub_ids: np.ndarray) -> np.ndarray:
        """The row of each subscription id, -1 where it is not subscribed."""
        sub_ids = np.ascontiguousarray(sub_ids, np.int64)
        out = np.empty(len(sub_ids), np.int64)
        m = self.row_of
        _get(m.state, m.keys, m.vals, sub_ids, out)
        return out

    def add(self, sid, lo, hi, topid, topy, topn) -> None:
        """New subscriptions with their initial top-k lists (rows rebuilt in tree order)."""
        ids, ys = self.lists(np.arange(len(self.sid)))
        self._set(np.concatenate([self.sid, sid]), np.concatenate([self.lo, lo]),
                  np.concatenate([self.hi, hi]), np.concatenate([self.topn, topn]),
                  np.concatenate([ids, topid]), np.concatenate([ys, topy]))

    def remove(self, sub_ids: np.ndarray) -> None:
        keep = np.ones(len(self.sid), bool)
        keep[self.rows(sub_ids)] = False
        ids, ys = self.lists(np.flatnonzero(keep))
        self._set(self.sid[keep], self.lo[keep], self.hi[keep], self.topn[keep], ids, ys)

    def topk(self, row: int) -> list[tuple[int, float]]:
        n = int(self.topn[row])
        ids, ys = self.lists(np.array([row]))
        return list(zip(ids[0, :n].tolist(), ys[0, :n].tolist()))

    def deliver(self, mf: np.ndarray, mi: np.ndarray, trace: bool = False, diff: bool = False):
        """Apply a call's messages, each row's in batch order; returns (rows whose list changed,
        by subscription id; receipts per message; with ``trace`` the (row, message) receipts in
        message order). Three kernels: the leaves each message reaches, those pairs grouped by
        leaf, then leaf after leaf its messages applied to its rows (a leaf's block is in cache
        while its messages are applied). With ``diff`` the first item is instead the call's
        diff columns, made as the leaves are applied (rows in the store's order)."""
        p = self.points
        uleaf = np.full(len(mi), -1, np.int64)
        rows = np.full(len(mi), -1, np.int64)
        uni = mi[:, 2] >= 0 if len(mi) else np.zeros(0, bool)
        if uni.any():
            rows[uni] = self.rows(mi[uni, 2])
            uleaf[uni] = np.searchsorted(p.start[p.leaves:], rows[uni], side="right") - 1 + p.leaves
        recv = np.zeros(len(mi), np.int64)
        mf = np.ascontiguousarray(mf)
        p_leaf, p_code = leaf_pairs(mf, uleaf, p.box, p.leaves)
        off, codes = by_leaf(p_leaf, p_code, p.leaves)
        cols = self._diffs.take() if diff else tuple(np.empty(0, d) for d in DiffColumns.DTYPES)
        count, tr, cols, nd = apply_leaves(mf, np.ascontiguousarray(mi), rows, off, codes, p.start, p.end, p.lo,
                                           p.hi, p.leaves, self.topn, self.by, self.bid, self.uy, self.ud, self.nu,
                                           self.masks, self.wide, self.hold, self.k, recv, self.changed, trace,
                                           self.pack_upto, self.pack_retry, diff, self.sid, *cols)
        changed = self._diffs.keep(cols, nd) if diff else take_changed(self.by_sid, self.changed, count)
        if trace:
            tr = tr[np.lexsort((tr[:, 0], tr[:, 1]))]
        return changed, recv, (tr if trace else None)

    def state(self) -> dict:
        ids, ys = self.lists(np.arange(len(self.sid)))
        return {"sid": self.sid.copy(), "lo": self.lo.copy(), "hi": self.hi.copy(), "topn": self.topn.copy(),
                "topid": ids, "topy": ys}

    @classmethod
    def from_state(cls, st: dict, k: int, leaf_size: int = 32) -> "SubscriberStore":
        s = cls(k, leaf_size)
        s._set(np.asarray(st["sid"], np.int64), np.asarray(st["lo"], np.float64), np.asarray(st["hi"], np.float64),
               np.asarray(st["topn"], np.int64), np.asarray(st["topid"], np.int64), np.asarray(st["topy"], np.float64))
        return s

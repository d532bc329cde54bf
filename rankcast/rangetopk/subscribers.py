"""The subscriber side of the range top-k kind: subscriptions, their top-k lists, and the
delivery of message batches to them with the paper's protocol (Section II-A).

A message (box, object, y) reaches every subscription whose (lo, hi) lies in its box (a
unicast message: the one subscription it names). Each applies, in message order::

    if its list holds the object: overwrite the object's y (y = +inf: remove it)
    else: list <- the k lowest of list u {(object, y)}

lists ordered by (y, id). Ordering (footnote 6) is the server's: an object's new value comes
before the replacement it makes room for. The store keeps the rows in the order of its k-d
tree (:class:`~.points.PointIndex`), so that a box's subscriptions are mostly contiguous, and
records the first change of each row in a call so that :meth:`SubscriberStore.changes` returns
exactly the subscriptions whose top-k (ids, order or a listed y) differs after the call.
"""
from __future__ import annotations

import numba
import numpy as np

from ..indexing.idmap import IdMap, _get
from .points import PointIndex

__all__ = ["SubscriberStore", "deliver", "apply_protocol"]


@numba.njit(cache=True, inline="always")
def _before(y1, o1, y2, o2):
    return y1 < y2 or (y1 == y2 and o1 < o2)


@numba.njit(cache=True)
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


@numba.njit(cache=True, inline="always")
def _receive(j, obj, y, topn, topid, topy, k, touched, epoch, log_row, log_n, log_id, log_y, nlog):
    """One receipt: log the row's list before its first receipt in the call (the log holds a
    row for each subscription at most), then apply the protocol."""
    if touched[j] != epoch:
        touched[j] = epoch
        e = nlog[0]
        log_row[e] = j
        log_n[e] = topn[j]
        for t in range(topn[j]):
            log_id[e, t] = topid[j, t]
            log_y[e, t] = topy[j, t]
        nlog[0] = e + 1
    apply_protocol(j, obj, y, topn, topid, topy, k)


@numba.njit(cache=True)
def deliver(mf, mi, rows, box, start, end, lo, hi, leaves, topn, topid, topy, k, touched, epoch,
            log_row, log_n, log_id, log_y, nlog, recv, trace):
    """Deliver messages in order: message ``m`` (box ``mf[m, :4]``, value ``mf[m, 4]``, object
    ``mi[m, 0]``) reaches the rows in its box, or row ``rows[m]`` when that is >= 0 (unicast);
    ``recv[m]`` counts its receipts. The log (capacity: one entry per row) gets each touched
    row's list before the call; with ``trace``, returns every (row, message) receipt."""
    tr = np.empty((1024 if trace else 0, 2), np.int64)
    ntr = 0
    stack = np.empty(64, np.int64)
    for m in range(mf.shape[0]):
        obj = mi[m, 0]
        y = mf[m, 4]
        if rows[m] >= 0:
            j = rows[m]
            _receive(j, obj, y, topn, topid, topy, k, touched, epoch, log_row, log_n, log_id, log_y, nlog)
            recv[m] += 1
            if trace:
                if ntr == tr.shape[0]:
                    nt = np.empty((2 * ntr, 2), np.int64)
                    nt[:ntr] = tr[:ntr]
                    tr = nt
                tr[ntr, 0] = j
                tr[ntr, 1] = m
                ntr += 1
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
                for t in range(start[v], end[v]):
                    if full or (a0 <= lo[t] <= a1 and b0 <= hi[t] <= b1):
                        _receive(t, obj, y, topn, topid, topy, k, touched, epoch, log_row, log_n, log_id, log_y,
                                 nlog)
                        recv[m] += 1
                        if trace:
                            if ntr == tr.shape[0]:
                                nt = np.empty((2 * ntr, 2), np.int64)
                                nt[:ntr] = tr[:ntr]
                                tr = nt
                            tr[ntr, 0] = t
                            tr[ntr, 1] = m
                            ntr += 1
                continue
            stack[sp] = 2 * v
            stack[sp + 1] = 2 * v + 1
            sp += 2
    return tr[:ntr]


@numba.njit(cache=True)
def _changed(log_row, log_n, log_id, log_y, nlog, topn, topid, topy, out):
    """The logged rows whose list differs from the logged one, into ``out``; returns how many."""
    c = 0
    for e in range(nlog):
        j = log_row[e]
        same = topn[j] == log_n[e]
        if same:
            for t in range(topn[j]):
                if topid[j, t] != log_id[e, t] or topy[j, t] != log_y[e, t]:
                    same = False
                    break
        if not same:
            out[c] = j
            c += 1
    return c


class SubscriberStore:
    """Subscriptions (id, lo, hi) and their top-k lists, rows in k-d tree order."""

    def __init__(self, k: int, leaf_size: int = 32):
        self.k = k
        self.leaf_size = leaf_size
        self.row_of = IdMap()
        self._set(np.zeros(0, np.int64), np.zeros(0), np.zeros(0), np.zeros(0, np.int64),
                  np.zeros((0, k), np.int64), np.zeros((0, k)))

    def _set(self, sid, lo, hi, topn, topid, topy) -> None:
        self.points = PointIndex(lo, hi, sid, self.leaf_size)
        o = self.points.order
        self.sid = self.points.key
        self.topn = np.ascontiguousarray(topn[o], np.int64)
        self.topid = np.ascontiguousarray(topid[o], np.int64)
        self.topy = np.ascontiguousarray(topy[o], np.float64)
        self.touched = np.zeros(len(o), np.int64)
        self.epoch = 0
        self._log = None        # rows' lists before a call: one entry per row at most
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

    @property
    def nbytes(self) -> int:
        return (self.points.nbytes + self.topn.nbytes + self.topid.nbytes + self.topy.nbytes
                + self.touched.nbytes + self.row_of.keys.nbytes * 2 + self.row_of.state.nbytes)

    def rows(self, sub_ids: np.ndarray) -> np.ndarray:
        """The row of each subscription id, -1 where it is not subscribed."""
        sub_ids = np.ascontiguousarray(sub_ids, np.int64)
        out = np.empty(len(sub_ids), np.int64)
        m = self.row_of
        _get(m.state, m.keys, m.vals, sub_ids, out)
        return out

    def add(self, sid, lo, hi, topid, topy, topn) -> None:
        """New subscriptions with their initial top-k lists (rows rebuilt in tree order)."""
        self._set(np.concatenate([self.sid, sid]), np.concatenate([self.lo, lo]),
                  np.concatenate([self.hi, hi]), np.concatenate([self.topn, topn]),
                  np.concatenate([self.topid, topid]), np.concatenate([self.topy, topy]))

    def remove(self, sub_ids: np.ndarray) -> None:
        keep = np.ones(len(self.sid), bool)
        keep[self.rows(sub_ids)] = False
        self._set(self.sid[keep], self.lo[keep], self.hi[keep], self.topn[keep], self.topid[keep], self.topy[keep])

    def topk(self, row: int) -> list[tuple[int, float]]:
        n = int(self.topn[row])
        return list(zip(self.topid[row, :n].tolist(), self.topy[row, :n].tolist()))

    def deliver(self, mf: np.ndarray, mi: np.ndarray, trace: bool = False):
        """Apply a call's messages in order; returns (rows whose list changed, receipts per
        message, and with ``trace`` the (row, message) receipts). Rows are sorted by
        subscription id."""
        self.epoch += 1
        rows = np.full(len(mi), -1, np.int64)
        uni = mi[:, 2] >= 0 if len(mi) else np.zeros(0, bool)
        if uni.any():
            rows[uni] = self.rows(mi[uni, 2])
        recv = np.zeros(len(mi), np.int64)
        if self._log is None or len(self._log[0]) < len(self.sid):
            m = len(self.sid)
            self._log = (np.empty(m, np.int64), np.empty(m, np.int64), np.empty((m, self.k), np.int64),
                         np.empty((m, self.k)))
        nlog = np.zeros(1, np.int64)
        p = self.points
        tr = deliver(np.ascontiguousarray(mf), np.ascontiguousarray(mi), rows, p.box, p.start, p.end, p.lo, p.hi,
                     p.leaves, self.topn, self.topid, self.topy, self.k, self.touched, self.epoch, *self._log, nlog,
                     recv, trace)
        out = np.empty(int(nlog[0]), np.int64)
        c = _changed(*self._log, int(nlog[0]), self.topn, self.topid, self.topy, out)
        changed = out[:c]
        changed = changed[np.argsort(self.sid[changed], kind="stable")]
        return changed, recv, (tr if trace else None)

    def state(self) -> dict:
        return {"sid": self.sid.copy(), "lo": self.lo.copy(), "hi": self.hi.copy(), "topn": self.topn.copy(),
                "topid": self.topid.copy(), "topy": self.topy.copy()}

    @classmethod
    def from_state(cls, st: dict, k: int, leaf_size: int = 32) -> "SubscriberStore":
        s = cls(k, leaf_size)
        s._set(np.asarray(st["sid"], np.int64), np.asarray(st["lo"], np.float64), np.asarray(st["hi"], np.float64),
               np.asarray(st["topn"], np.int64), np.asarray(st["topid"], np.int64), np.asarray(st["topy"], np.float64))
        return s

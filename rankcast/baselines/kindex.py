"""The k-index baseline of ranked matching (Whang et al., "Indexing Boolean Expressions",
VLDB 2009; the ``k-ind`` of the BE*-tree paper's experiments): a static, flat, counting-based
inverted index, behind the interface of :class:`rankcast.kinds.matching.core.MatchCore`
(``rc.Matcher(cfg, core=KIndexCore)``). Serves ``static`` and ``weighted`` scoring.

Index. A conjunction's size ``K`` is its number of ∈-type predicates (``==``, ``in``,
``between``); ``!=`` and ``not in`` are ∉-type and do not count. Conjunctions are partitioned
by ``K``; a partition has one posting list per (attribute, value), whose entries are
(conjunction slot, ∈ or ∉) in slot order. Values are *enumerated*: ``== v`` gives one ∈ entry,
``in S`` one per value, ``between (lo, hi)`` one per integer of ``[lo, hi]`` (the paper's
range blow-up), ``!= v`` / ``not in S`` ∉ entries. Every size-0 conjunction (only ∉
predicates) is in the partition's ``Z`` list, which every event includes. Open ranges
(``<``, ``<=``, ``>``, ``>=``) and ``between`` with non-integral bounds, bounds beyond 2**53 or
more than ``max_enumerate`` values cannot be enumerated: ``add`` raises ``InvalidInput``
naming the expression and predicate, and changes nothing. The index is static, as in the
paper: every ``add`` / ``remove`` rebuilds it (one lexsort of the entries by (K, attribute,
value, slot)). Lists are found by attribute, then by binary search over the attribute's
sorted values.

Discrete domains. k-index serves discrete domains (the paper emulates continuous ones with
a large discrete domain): an event value on an attribute with ``between`` predicates must be
an integer when it lies within the hull ``[min lo, max hi]`` of those ranges, or ``match``
raises ``InvalidInput`` (outside the hull no range can hold it, so the answer stays exact).
``==`` / ``in`` / ``!=`` / ``not in`` compare values exactly, integral or not.

Matching: the conjunction algorithm, per partition from the largest ``K`` down to 0 (``K``
no more than the event's number of attributes). The event's lists of the partition are
gathered (K = 0: with the Z list, and it needs 1); with fewer than ``K`` the partition is
skipped. Repeatedly: sort the lists by current entry (slot, ∉ before ∈); if lists ``0`` and
``K-1`` point at the same slot, the conjunction has all its ∈ predicates satisfied; it is
rejected when list 0's entry is ∉ (then every list at that slot steps past it), else
accepted; the first ``K`` lists then skip (galloping search) to the next possible slot. The
contract's ∉ predicates also require the attribute to be present (Whang's are satisfied by
an absent attribute), so an accepted conjunction's attributes are checked present while its
score is summed (``weighted``: ``weight * event weight`` over its predicates, in predicate
order as :func:`rankcast.kinds.matching.core.evaluate` sums; ``static``: its score).

Top-k (the paper's k-ind(1), fixed top-layer bounds). Each list has an upper bound: the
largest ∈ weight in it (``weighted``) or the largest score of its ∈ conjunctions
(``static``). Once k results are held, a partition is skipped when its bound cannot beat the
k-th: ``weighted``: the sum of the K largest ``list bound * event weight`` plus the partition's
largest ∉ weight sum times the event's largest weight; ``static``: the K-th largest list bound
(a conjunction is in K of the lists, each bound at least its score). An accepted
conjunction is skipped when its own bound cannot (``static``: its score with the id tie
rule; ``weighted``: its weight sum times the largest event weight). Bounds prune only when
the k-th score beats them by the relative slack ``EPS`` (a bound equal to the k-th score is
explored: a smaller id may win), so results are exact: score descending, then id ascending.
"""
from __future__ import annotations

import numba
import numpy as np

from rankcast.common.validation import item_error
from rankcast.errors import InvalidInput
from rankcast.kinds.matching.core import MODES, RELAXED, STATIC, DenseEvent, ExpressionTable, find_sorted
from rankcast.kinds.matching.core import offer_topk as _push, ranks_after as _worse, sift_down_topk
from rankcast.kinds.spatial.scoring import EPS
from rankcast.model import OPERATORS

__all__ = ["KIndexCore"]

LT, LE, EQ, NE, GE, GT, IN, NIN, BETWEEN = range(9)
_IN_TYPE = np.zeros(9, bool)
_IN_TYPE[[EQ, IN, BETWEEN]] = True
_OPEN = np.zeros(9, bool)
_OPEN[[LT, LE, GE, GT]] = True
_EXACT_INT = float(2 ** 53)          # beyond it, float64 cannot enumerate consecutive integers
_BIG = np.iinfo(np.int64).max
# kernel counters (stats)
_C_LISTS, _C_PARTS, _C_PART_PRUNED, _C_ACCEPT, _C_REJECT, _C_CONJ_PRUNED, _C_SKIPS = range(7)
_COUNTER_NAMES = ("lists", "partitions", "partitions_pruned", "candidates", "rejected", "conjunctions_pruned",
                  "skips")


@numba.njit(cache=True, inline="always")
def _skip_to(e_slot, pos, end, target):
    """First position in ``[pos, end)`` whose slot is >= ``target`` (galloping, then binary
    search); ``end`` when none."""
    if pos >= end or e_slot[pos] >= target:
        return pos
    lo = pos                      # e_slot[lo] < target
    step = 1
    hi = lo + step
    while hi < end and e_slot[hi] < target:
        lo = hi
        step *= 2
        hi = lo + step
    if hi > end:
        hi = end
    lo += 1
    while lo < hi:
        mid = (lo + hi) >> 1
        if e_slot[mid] < target:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True)
def _match(ev_off, ev_attr, ev_val, ev_w, k, static, n_dense, n_attrs, max_k, lk, l_val, l_attr, l_ub,
           l_off, e_slot, e_neg, nin_max, ids, score, wsum, p_start, p_end, p_attr, p_w,
           out_ids, out_sc, out_n, counters):
    """Top-k of every event of a batch by the conjunction algorithm (module docstring).

    Lists are grouped by ``g = K * (n_attrs + 1) + attribute`` (the Z list: attribute
    ``n_attrs``), group ``g`` being lists ``lk[g]:lk[g+1]`` in value order; list ``l`` has
    entries ``l_off[l]:l_off[l+1]`` (slots ``e_slot``, ∉ flags ``e_neg``)."""
    has = np.zeros(n_dense, np.bool_)
    ew = np.ones(n_dense)
    n_max = 1
    for e in range(ev_off.shape[0] - 1):
        n_max = max(n_max, ev_off[e + 1] - ev_off[e] + 1)
    plist = np.empty(n_max, np.int64)
    cur = np.empty(n_max, np.int64)
    end = np.empty(n_max, np.int64)
    key = np.empty(n_max, np.int64)
    order = np.empty(n_max, np.int64)
    bnd = np.empty(n_max)
    hs = np.empty(max(k, 1))
    hi = np.empty(max(k, 1), np.int64)
    stride = n_attrs + 1
    for e in range(ev_off.shape[0] - 1):
        a0 = ev_off[e]
        a1 = ev_off[e + 1]
        n_ev = a1 - a0
        max_ew = 0.0
        for q in range(a0, a1):
            has[ev_attr[q]] = True
            ew[ev_attr[q]] = ev_w[q]
            max_ew = max(max_ew, ev_w[q])
        n = 0                      # results held
        for K in range(max_k, -1, -1):
            if K > n_ev:
                continue
            # the event's lists of partition K
            cnt = 0
            for q in range(a0, a1):
                at = ev_attr[q]
                if at >= n_attrs:
                    continue
                g = K * stride + at
                j = find_sorted(l_val, lk[g], lk[g + 1], ev_val[q])
                if j >= 0:
                    plist[cnt] = j
                    cnt += 1
            if K == 0:
                g = n_attrs            # K * stride + n_attrs
                if lk[g + 1] == lk[g]:
                    continue           # no size-0 conjunction
                plist[cnt] = lk[g]
                cnt += 1
            kk = max(K, 1)
            if cnt < kk:
                continue
            counters[_C_PARTS] += 1
            counters[_C_LISTS] += cnt
            # the partition's bound
            for j in range(cnt):
                lj = plist[j]
                if static:
                    bnd[j] = l_ub[lj]
                elif l_attr[lj] < n_attrs:
                    bnd[j] = l_ub[lj] * ew[l_attr[lj]]
                else:
                    bnd[j] = 0.0
            srt = np.sort(bnd[:cnt])
            if static:
                pbound = srt[cnt - kk]
            else:
                pbound = nin_max[K] * max_ew
                for j in range(cnt - kk, cnt):
                    pbound += srt[j]
            if n == k and (hs[0] > pbound if static else hs[0] > pbound * (1.0 + EPS)):
                counters[_C_PART_PRUNED] += 1
                continue
            for j in range(cnt):
                cur[j] = l_off[plist[j]]
                end[j] = l_off[plist[j] + 1]
                order[j] = j
            while True:
                # sort the lists by current entry: slot, then ∉ before ∈ (insertion sort:
                # the order changes little from step to step)
                for j in range(cnt):
                    c = cur[j]
                    key[j] = _BIG if c >= end[j] else 2 * e_slot[c] + (0 if e_neg[c] else 1)
                for j in range(1, cnt):
                    o = order[j]
                    m = j - 1
                    while m >= 0 and key[order[m]] > key[o]:
                        order[m + 1] = order[m]
                        m -= 1
                    order[m + 1] = o
                if key[order[kk - 1]] == _BIG:
                    break
                first = order[0]
                x = e_slot[cur[first]]
                if x == e_slot[cur[order[kk - 1]]]:
                    if e_neg[cur[first]]:
                        counters[_C_REJECT] += 1
                        for j in range(cnt):
                            o = order[j]
                            if cur[o] < end[o] and e_slot[cur[o]] == x:
                                cur[o] += 1
                            else:
                                break
                        continue
                    counters[_C_ACCEPT] += 1
                    if n == k and (_worse(score[x], ids[x], hs[0], hi[0]) if static
                                   else hs[0] > wsum[x] * max_ew * (1.0 + EPS)):
                        counters[_C_CONJ_PRUNED] += 1
                    else:
                        ok = True
                        acc = 0.0
                        for p in range(p_start[x], p_end[x]):
                            at = p_attr[p]
                            if not has[at]:    # a ∉ predicate's attribute is absent
                                ok = False
                                break
                            acc += p_w[p] * ew[at]
                        if ok:
                            n = _push(hs, hi, n, k, score[x] if static else acc, ids[x])
                            if n == k and (hs[0] > pbound if static else hs[0] > pbound * (1.0 + EPS)):
                                counters[_C_PART_PRUNED] += 1
                                break
                    nxt = x + 1
                else:
                    nxt = e_slot[cur[order[kk - 1]]]
                for j in range(kk):
                    o = order[j]
                    c = _skip_to(e_slot, cur[o], end[o], nxt)
                    if c > cur[o] + 1:
                        counters[_C_SKIPS] += 1
                    cur[o] = c
        # best first: pop the worst into the last free place
        out_n[e] = n
        while n > 0:
            n -= 1
            out_ids[e, n] = hi[0]
            out_sc[e, n] = hs[0]
            sift_down_topk(hs, hi, n, hs[n], hi[n])
        for q in range(a0, a1):
            has[ev_attr[q]] = False
            ew[ev_attr[q]] = 1.0


class KIndexCore:
    """The k-index (see the module docstring). ``max_enumerate``: the most values one
    ``between`` may enumerate."""

    index_name = "k-index"

    def __init__(self, scoring: str, index: str = "k-index", *, max_enumerate: int = 100_000, **_):
        if scoring not in MODES:
            raise InvalidInput(f"k-index: field 'scoring': must be 'static' or 'weighted', got {scoring!r}")
        if MODES[scoring] == RELAXED:
            raise InvalidInput("k-index: field 'scoring': serves 'static' and 'weighted' (exact matching), "
                               "not 'relaxed'")
        self.mode = MODES[scoring]
        self.max_enumerate = int(max_enumerate)
        self.table = ExpressionTable()
        self.ev = DenseEvent(0)
        self.n_attrs = 0
        self.counters = dict(events=0, **{c: 0 for c in _COUNTER_NAMES})
        self._build()

    def __len__(self) -> int:
        return self.table.n_live

    # ------------------------------------------------------------------ updates
    def _check(self, batch) -> None:
        """InvalidInput for the first predicate that cannot be enumerated."""
        op = batch.op.astype(np.int64)
        a, b = batch.a, batch.b
        btw = op == BETWEEN
        with np.errstate(invalid="ignore", over="ignore"):
            bad_btw = btw & ((a != np.floor(a)) | (b != np.floor(b)) | (np.abs(a) > _EXACT_INT)
                             | (np.abs(b) > _EXACT_INT) | (b - a + 1 > self.max_enumerate))
        bad = np.flatnonzero(_OPEN[op] | bad_btw)
        if not len(bad):
            return
        r = int(bad[0])
        i = int(np.searchsorted(batch.pred_off, r, side="right") - 1)
        o = int(op[r])
        if _OPEN[o]:
            why = f"cannot enumerate the open range {OPERATORS[o]!r} {a[r]!r}"
        else:
            why = (f"cannot enumerate 'between' ({a[r]!r}, {b[r]!r}): it needs integral bounds within "
                   f"+-2**53 and at most max_enumerate={self.max_enumerate} values")
        raise item_error("expression", i, int(batch.ids[i]), f"predicates[{r - int(batch.pred_off[i])}]",
                         f"k-index indexes discrete values only: {why}")

    def add(self, batch, n_attrs: int) -> None:
        self._check(batch)
        self.n_attrs = max(self.n_attrs, int(n_attrs))
        self.ev.grow(self.n_attrs)
        self.table.add(batch)
        self._build()

    def remove(self, ids) -> None:
        self.table.remove(np.asarray(ids, np.int64))
        self.table.compact()
        self._build()

    def _build(self) -> None:
        """The posting lists of the live expressions (vectorised; module docstring)."""
        t = self.table
        A = self.n_attrs
        live = np.flatnonzero(t.live[: t.n_slots])
        off, rows = t.pred_rows(live)
        owner = np.repeat(live, np.diff(off))                       # slot of every predicate row
        op = t.p_op[rows].astype(np.int64)
        size = np.zeros(t.n_slots, np.int64)                        # K of every slot
        np.add.at(size, owner, _IN_TYPE[op])
        # entries: one per enumerated value of every predicate row
        is_set = (op == IN) | (op == NIN)
        set_n = t.set_off[rows + 1] - t.set_off[rows]
        span = np.where(op == BETWEEN, t.p_b[rows] - t.p_a[rows] + 1, 1).astype(np.int64)
        cnt = np.where(is_set, set_n, span)
        e_off = np.zeros(len(rows) + 1, np.int64)
        np.cumsum(cnt, out=e_off[1:])
        r = np.repeat(np.arange(len(rows)), cnt)
        within = np.arange(e_off[-1], dtype=np.int64) - e_off[:-1][r]
        val = t.p_a[rows][r] + within                               # ==, !=, between
        s = is_set[r]
        val[s] = t.set_vals[t.set_off[rows[r[s]]] + within[s]]
        val = val + 0.0                                             # -0.0 -> 0.0
        slot = owner[r]
        neg = ~_IN_TYPE[op][r]
        attr = t.p_attr[rows][r].astype(np.int64)
        if self.mode == STATIC:
            w = t.score[slot]
        else:
            w = t.p_w[rows][r]
        # the Z entries: every size-0 conjunction
        z = live[size[live] == 0]
        K = np.concatenate((size[slot], np.zeros(len(z), np.int64)))
        attr = np.concatenate((attr, np.full(len(z), A, np.int64)))
        val = np.concatenate((val, np.zeros(len(z))))
        slot = np.concatenate((slot, z))
        neg = np.concatenate((neg, np.zeros(len(z), bool)))
        w = np.concatenate((w, t.score[z] if self.mode == STATIC else np.zeros(len(z))))
        order = np.lexsort((slot, val, attr, K))
        K, attr, val, slot, neg, w = K[order], attr[order], val[order], slot[order], neg[order], w[order]
        n = len(slot)
        start = np.ones(n, bool)
        if n:
            start[1:] = (K[1:] != K[:-1]) | (attr[1:] != attr[:-1]) | (val[1:] != val[:-1])
        heads = np.flatnonzero(start)
        self.max_k = int(size[live].max()) if len(live) else 0
        self.l_off = np.r_[heads, n].astype(np.int64)
        self.l_val = val[heads]
        self.l_attr = attr[heads]
        self.l_ub = np.maximum.reduceat(np.where(neg, 0.0, w), heads) if n else np.zeros(0)
        g = K[heads] * (A + 1) + attr[heads]
        self.lk = np.searchsorted(g, np.arange((self.max_k + 1) * (A + 1) + 1)).astype(np.int64)
        self.e_slot = np.ascontiguousarray(slot, np.int64)
        self.e_neg = np.ascontiguousarray(neg)
        # weighted: the largest ∉ weight sum of every partition
        self.nin_max = np.zeros(self.max_k + 1)
        if self.mode != STATIC and len(live):
            nin = np.bincount(owner, weights=np.where(_IN_TYPE[op], 0.0, t.p_w[rows]), minlength=t.n_slots)
            np.maximum.at(self.nin_max, size[live], nin[live])
        # the hull of the enumerated ranges of every attribute (discrete-domain check)
        btw = rows[op == BETWEEN]
        self.rng_lo = np.full(A, np.inf)
        self.rng_hi = np.full(A, -np.inf)
        np.minimum.at(self.rng_lo, t.p_attr[btw], t.p_a[btw])
        np.maximum.at(self.rng_hi, t.p_attr[btw], t.p_b[btw])

    # ------------------------------------------------------------------ queries
    def _check_events(self, events) -> None:
        if not np.isfinite(self.rng_lo).any():
            return
        at, v = events.attr, events.val
        m = at < len(self.rng_lo)
        atm = np.where(m, at, 0)
        hit = np.flatnonzero(m & (v != np.floor(v)) & (v >= self.rng_lo[atm]) & (v <= self.rng_hi[atm]))
        if len(hit):
            q = int(hit[0])
            e = int(np.searchsorted(events.off, q, side="right") - 1)
            a = int(at[q])
            raise item_error("event", e, int(events.ids[e]), "values",
                             f"k-index serves discrete domains: attribute #{a} has enumerated ranges within "
                             f"[{self.rng_lo[a]!r}, {self.rng_hi[a]!r}], got the non-integral value {float(v[q])!r}")

    def match(self, events, k: int):
        """Top-k (ids, scores) of every event of an EventBatch, best first."""
        self._check_events(events)
        n_ev = len(events)
        kk = max(0, min(int(k), len(self)))
        out_ids = np.zeros((n_ev, kk), np.int64)
        out_sc = np.zeros((n_ev, kk))
        out_n = np.zeros(n_ev, np.int64)
        counters = np.zeros(len(_COUNTER_NAMES), np.int64)
        if kk and n_ev:
            t = self.table
            n_dense = max(self.n_attrs, len(self.ev.val), int(events.attr.max(initial=-1)) + 1)
            _match(events.off, events.attr.astype(np.int64), events.val, events.weight, kk, self.mode == STATIC,
                   n_dense, self.n_attrs, self.max_k, self.lk, self.l_val, self.l_attr, self.l_ub, self.l_off,
                   self.e_slot, self.e_neg, self.nin_max, t.ids, t.score, t.wsum, t.p_start, t.p_end, t.p_attr,
                   t.p_w, out_ids, out_sc, out_n, counters)
        self.counters["events"] += n_ev
        for name, c in zip(_COUNTER_NAMES, counters.tolist()):
            self.counters[name] += c
        return [(out_ids[e, : out_n[e]].copy(), out_sc[e, : out_n[e]].copy()) for e in range(n_ev)]

    def stats(self) -> dict:
        arrays = (self.lk, self.l_val, self.l_attr, self.l_ub, self.l_off, self.e_slot, self.e_neg, self.nin_max)
        return {"expressions": len(self), "index": "k-index", "postings": int(len(self.e_slot)),
                "posting_lists": int(len(self.l_val)), "max_size": self.max_k,
                "index_bytes": int(sum(x.nbytes for x in arrays)), **self.counters}

"""A reference implementation of the spatial-keyword contract, for tests: plain Python,
written from the contract's text alone.

:class:`ReferenceEngine` accepts the calls of ``rc.Engine`` (``subscribe``, ``unsubscribe``,
``publish``, ``topk``, ``stats``) and answers them from its own reading of the contract. It
imports nothing of the engine: not its tokeniser, its tf-idf weighting or term dictionary,
its score kernel, its window clock or its validation. What it shares with the engine is the
contract's data types (``rc.Subscription``, ``rc.Message``, ``rc.Update``, the exceptions)
and, where a vocabulary is configured, the vocabulary's fitted counts (terms, document
frequencies, number of documents; or it counts them itself from a corpus, ``corpus=``).

What it implements, each from the contract and the documented text semantics:

- tokenising: the text NFKC-normalised then case-folded; a token is a maximal run of word
  characters (a character that is alphanumeric, or ``_``), read character by character;
- weighting: a text's term weight is ``tf * idf`` with ``tf`` the count of the token in the
  text and ``idf = ln((1 + N) / (1 + df)) + 1`` over the ``N`` documents of the vocabulary
  (``df = 0`` for a term it does not hold, so the largest idf; no vocabulary: every idf is
  1); given ``terms`` keep their weights, taken as they are; either vector is then divided
  by its Euclidean length;
- score: ``alpha * (1 - dist / MaxDist) + (1 - alpha) * TSim``, ``dist`` Euclidean
  (``math.hypot``), ``MaxDist`` the diagonal of ``bounds``, ``TSim`` the sum over shared
  terms of the products of the weights (``math.fsum``: correctly rounded); no shared term,
  no result;
- ranking: score descending, equal scores the newer message (published later) first, cut at
  ``k``;
- windows: ``window=N`` keeps the last N messages published; ``window_seconds=T`` keeps the
  messages with ``t > t_max - T``, ``t_max`` the largest ``t`` published so far;
- updates: after a ``publish``, one ``rc.Update`` per subscription whose top-k ids (in
  order) differ from those before the call, in subscription id order;
- validation: the malformed inputs the contract lists raise ``rc.InvalidInput`` (or
  ``rc.UnknownSubscription``) and leave the state as it was. Only the exception's type is
  meant to be compared with an engine's, not its message.

Scores are computed another way than the engine's kernel (another order of the sum, another
square root), so they may differ from it in the last bits. :func:`topk_mismatch` compares
an answer with the reference: the ranking exactly, every score within a relative tolerance
(:data:`REL_TOL`), and near-ties honestly (see there).
"""
from __future__ import annotations

import heapq
import math
import unicodedata
from collections import deque
from numbers import Integral, Real
from typing import Iterable, Mapping

from rankcast.errors import InvalidInput, UnknownSubscription
from rankcast.model import Message, Subscription, Update

__all__ = ["REL_TOL", "ReferenceEngine", "reference_tokens", "reference_weights", "topk_mismatch",
           "close_scores"]

REL_TOL = 1e-9
_INT64 = (-(2 ** 63), 2 ** 63 - 1)


# ------------------------------------------------------------------------------ text
def reference_tokens(text: str) -> list[str]:
    """The tokens of ``text``: NFKC, case-folded, maximal runs of alphanumeric characters
    and underscores, in order."""
    s = unicodedata.normalize("NFKC", text).casefold()
    out, cur = [], []
    for ch in s:
        if ch.isalnum() or ch == "_":
            cur.append(ch)
        elif cur:
            out.append("".join(cur))
            cur = []
    if cur:
        out.append("".join(cur))
    return out


def _unit(raw: Mapping[str, float]) -> dict[str, float]:
    norm = math.sqrt(math.fsum(w * w for w in raw.values()))
    return {t: w / norm for t, w in raw.items()} if norm > 0 else {}


def reference_weights(text: str, dfs: Mapping[str, int] | None = None, n_docs: int = 0) -> dict[str, float]:
    """The unit tf-idf vector of ``text`` over a corpus of ``n_docs`` documents with document
    frequencies ``dfs`` (none: every idf is 1)."""
    tf: dict[str, int] = {}
    for tok in reference_tokens(text):
        tf[tok] = tf.get(tok, 0) + 1
    dfs = dfs or {}
    return _unit({t: c * (math.log((1 + n_docs) / (1 + dfs.get(t, 0))) + 1) for t, c in tf.items()})


# ------------------------------------------------------------------------------ comparing
def close_scores(a: float, b: float, rel_tol: float = REL_TOL) -> bool:
    """Whether two scores are equal within ``rel_tol`` relative to the larger magnitude, and
    to at least 1 (scores lie in [0, 1]: near 0 a relative difference means nothing)."""
    return abs(a - b) <= rel_tol * max(1.0, abs(a), abs(b))


def topk_mismatch(got, ranked, k: int, rel_tol: float = REL_TOL) -> str | None:
    """Why the answer ``got`` ((message id, score), best first) is not the top-``k`` of the
    reference ranking ``ranked`` ((score, seq, message id) of every window message sharing a
    term, best first); None when it is.

    The ranking is compared exactly, with one allowance: scores computed two ways may differ
    in their last bits, so two messages whose reference scores are within ``rel_tol``
    (:func:`close_scores`) may be ranked either way by the engine. The reference ranking is
    cut into *near-tie groups* (maximal runs of consecutive entries, each close to the next);
    the answer must hold, at the positions of each group, messages of that group, all of
    them for a group that ends within ``k`` (so a near-tie at the k-th place may be cut
    either way, and nothing else may be exchanged). Besides: exactly ``min(k, len(ranked))``
    distinct entries, each score within ``rel_tol`` of that message's reference score, the
    answer ordered by its own scores descending and, where two of them are exactly equal,
    the newer message first."""
    n = min(k, len(ranked))
    got = [(int(m), float(s)) for m, s in got]
    if len(got) != n:
        return f"{len(got)} entries, the reference has {n}: got {got}, want {_head(ranked, n)}"
    ref = {mid: (sc, seq) for sc, seq, mid in ranked}
    ids = [m for m, _ in got]
    if len(set(ids)) != len(ids):
        return f"a message listed twice: {got}"
    for m, s in got:
        if m not in ref:
            return f"message {m} is not a window message sharing a term: got {got}, want {_head(ranked, n)}"
        if not close_scores(s, ref[m][0], rel_tol):
            return f"message {m} scored {s!r}, the reference {ref[m][0]!r}"
    for (m1, s1), (m2, s2) in zip(got, got[1:]):
        if s1 < s2 or (s1 == s2 and ref[m1][1] < ref[m2][1]):
            return f"messages {m1} and {m2} out of order (score descending, newer first): {got}"
    if ids == [mid for _, _, mid in ranked[:n]]:
        return None
    a = 0
    while a < n:
        b = a + 1
        while b < len(ranked) and close_scores(ranked[b - 1][0], ranked[b][0], rel_tol):
            b += 1
        group = {mid for _, _, mid in ranked[a:b]}
        if not set(ids[a:min(b, n)]) <= group:
            return (f"ranks {a}..{min(b, n) - 1} hold {ids[a:min(b, n)]}, the reference's near-tie group "
                    f"there is {sorted(group)}: got {got}, want {_head(ranked, n)}")
        a = b
    return None


def _head(ranked, n):
    return [(mid, sc) for sc, _, mid in ranked[:n]]


def _unsure(ranked, k: int, rel_tol: float) -> bool:
    """Whether a near-tie touches the first ``k`` ranks (then the engine's top-k ids may
    differ from the reference's, and so may whether they changed)."""
    return any(close_scores(ranked[i][0], ranked[i + 1][0], rel_tol)
               for i in range(min(k, len(ranked) - 1)))


# ------------------------------------------------------------------------------ the engine
class _Sub:
    __slots__ = ("id", "x", "y", "k", "alpha", "w", "scores", "head")

    def __init__(self, sid, x, y, k, alpha, w):
        self.id, self.x, self.y, self.k, self.alpha, self.w = sid, x, y, k, alpha, w
        self.scores: dict[int, tuple[float, int, int]] = {}    # seq -> (-score, -seq, message id)
        self.head: list | None = None                      # cache of head()


class _Msg:
    __slots__ = ("seq", "id", "x", "y", "t", "w", "subs")

    def __init__(self, seq, mid, x, y, t, w):
        self.seq, self.id, self.x, self.y, self.t, self.w = seq, mid, x, y, t, w
        self.subs: list[int] = []                           # subscriptions that scored it


def _bad(kind: str, pos: int, item_id, field: str, why: str) -> InvalidInput:
    return InvalidInput(f"{kind} #{pos} (id={item_id!r}): field '{field}': {why}")


def _is_real(v) -> bool:
    return isinstance(v, Real) and not isinstance(v, bool)


def _is_int64(v) -> bool:
    return isinstance(v, Integral) and not isinstance(v, bool) and _INT64[0] <= int(v) <= _INT64[1]


class ReferenceEngine:
    """The contract's semantics in plain Python (see the module docstring).

    ``ReferenceEngine(cfg)`` reads ``bounds``, ``window``, ``window_seconds`` and
    ``vocabulary`` from an ``rc.EngineConfig`` (or any object with those attributes); keyword
    arguments override them. ``corpus``: texts to count the document frequencies from
    (instead of the vocabulary's counts). ``rel_tol``: the tolerance of :meth:`mismatch`."""

    def __init__(self, cfg=None, *, bounds=None, window=None, window_seconds=None, vocabulary=None,
                 corpus: Iterable[str] | None = None, rel_tol: float = REL_TOL):
        get = lambda name, v: v if v is not None else getattr(cfg, name, None)
        self.bounds = tuple(float(b) for b in get("bounds", bounds))
        self.window_seconds = get("window_seconds", window_seconds)
        self.window = None if self.window_seconds is not None else get("window", window)
        if (self.window is None) == (self.window_seconds is None):
            raise ValueError("ReferenceEngine: exactly one of window and window_seconds")
        xmin, ymin, xmax, ymax = self.bounds
        self.max_dist = math.hypot(xmax - xmin, ymax - ymin)
        self.rel_tol = rel_tol
        if corpus is not None:
            self.dfs: dict[str, int] = {}
            self.n_docs = 0
            for text in corpus:
                self.n_docs += 1
                for tok in set(reference_tokens(text)):
                    self.dfs[tok] = self.dfs.get(tok, 0) + 1
        else:
            vocab = get("vocabulary", vocabulary)
            d = vocab.to_dict() if vocab is not None else {"terms": [], "dfs": [], "n_docs": 0}
            self.dfs = dict(zip(d["terms"], (int(x) for x in d["dfs"])))
            self.n_docs = int(d["n_docs"])
        self.subs: dict[int, _Sub] = {}
        self.by_term: dict[str, set[int]] = {}          # term -> live subscription ids
        self.msgs: deque[_Msg] = deque()                 # the window, oldest first
        self.msg_term: dict[str, dict[int, _Msg]] = {}   # term -> seq -> window message
        self.window_ids: set[int] = set()
        self.next_seq = 0
        self.t_max = -math.inf
        self.published = 0
        self.unsure: set[int] = set()    # subscriptions of the last publish with a near-tie in their top k

    # ----------------------------------------------------------------- validation
    def _vector(self, kind, pos, iid, text, terms, need_terms: bool) -> dict[str, float]:
        if (text is None) == (terms is None):
            raise _bad(kind, pos, iid, "text/terms", "exactly one of text and terms is required")
        if text is not None:
            if not isinstance(text, str):
                raise _bad(kind, pos, iid, "text", "must be a string")
            w = reference_weights(text, self.dfs, self.n_docs)
        else:
            pairs = list(terms.items()) if isinstance(terms, Mapping) else None
            if pairs is None:
                try:
                    pairs = [(a, b) for a, b in terms]
                except (TypeError, ValueError):
                    raise _bad(kind, pos, iid, "terms", "must map term to weight") from None
            raw: dict[str, float] = {}
            for t, v in pairs:
                if not isinstance(t, str) or not t:
                    raise _bad(kind, pos, iid, "terms", "a term must be a non-empty string")
                if not _is_real(v) or not math.isfinite(v) or v <= 0:
                    raise _bad(kind, pos, iid, "terms", "weights must be positive and finite")
                if t in raw:
                    raise _bad(kind, pos, iid, "terms", "a term appears twice")
                raw[t] = float(v)
            w = _unit(raw)
        if need_terms and not w:
            raise _bad(kind, pos, iid, "text/terms", "a subscription needs at least one term")
        return w

    def _place(self, kind, pos, iid, x, y) -> tuple[float, float]:
        xmin, ymin, xmax, ymax = self.bounds
        for name, v, lo, hi in (("x", x, xmin, xmax), ("y", y, ymin, ymax)):
            if not _is_real(v) or not math.isfinite(v) or not lo <= v <= hi:
                raise _bad(kind, pos, iid, name, "must be finite and within bounds")
        return float(x), float(y)

    def _items(self, items, cls, kind) -> list:
        if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
            raise InvalidInput(f"{kind}s: expected an iterable of {cls.__name__}")
        items = list(items)
        seen = set()
        for pos, it in enumerate(items):
            if not isinstance(it, cls):
                raise InvalidInput(f"{kind} #{pos}: expected a {cls.__name__}")
            if not _is_int64(it.id):
                raise _bad(kind, pos, it.id, "id", "must be an int64")
            if int(it.id) in seen:
                raise _bad(kind, pos, it.id, "id", "duplicate id within the call")
            seen.add(int(it.id))
        return items

    # ----------------------------------------------------------------- calls
    def subscribe(self, subs) -> None:
        items = self._items(subs, Subscription, "subscription")
        new = []
        for pos, s in enumerate(items):
            sid = int(s.id)
            x, y = self._place("subscription", pos, sid, s.x, s.y)
            if not isinstance(s.k, Integral) or isinstance(s.k, bool) or s.k < 1:
                raise _bad("subscription", pos, sid, "k", "must be an integer >= 1")
            if not _is_real(s.alpha) or not 0.0 <= s.alpha <= 1.0:
                raise _bad("subscription", pos, sid, "alpha", "must be in [0, 1]")
            if sid in self.subs:
                raise _bad("subscription", pos, sid, "id", "a live subscription has this id")
            w = self._vector("subscription", pos, sid, s.text, s.terms, True)
            new.append(_Sub(sid, x, y, int(s.k), float(s.alpha), w))
        for sub in new:                          # valid: applied
            self.subs[sub.id] = sub
            for t in sub.w:
                self.by_term.setdefault(t, set()).add(sub.id)
            seen: dict[int, _Msg] = {}
            for t in sub.w:
                seen.update(self.msg_term.get(t, {}))
            for seq, m in seen.items():
                sub.scores[seq] = (-self._score(sub, m), -seq, m.id)
                m.subs.append(sub.id)

    def unsubscribe(self, ids) -> None:
        if isinstance(ids, Integral) and not isinstance(ids, bool):
            ids = [ids]
        if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
            raise InvalidInput("unsubscribe: expected subscription ids")
        ids = list(ids)
        for pos, i in enumerate(ids):
            if not _is_int64(i):
                raise _bad("id", pos, i, "id", "must be an int64")
        if len(set(int(i) for i in ids)) != len(ids):
            raise InvalidInput("unsubscribe: duplicate id within the call")
        for i in ids:
            if int(i) not in self.subs:
                raise UnknownSubscription(f"unknown subscription id={int(i)}")
        for i in ids:
            sub = self.subs.pop(int(i))
            for t in sub.w:
                self.by_term[t].discard(sub.id)
            # the messages' lists of subscriptions keep the id: skipped once it is gone

    def publish(self, msgs) -> list[Update]:
        items = self._items(msgs, Message, "message")
        timed = self.window_seconds is not None
        t_last = self.t_max
        new = []
        for pos, m in enumerate(items):
            mid = int(m.id)
            x, y = self._place("message", pos, mid, m.x, m.y)
            t = m.t
            if t is not None and (not _is_real(t) or math.isinf(t)):
                raise _bad("message", pos, mid, "t", "must be a finite number")
            if t is not None and math.isnan(t):
                t = None
            if timed:
                if t is None:
                    raise _bad("message", pos, mid, "t", "a time window needs a finite t")
                if t < t_last:
                    raise _bad("message", pos, mid, "t", "must not decrease")
                t_last = t
            w = self._vector("message", pos, mid, m.text, m.terms, False)
            if mid in self.window_ids:
                raise _bad("message", pos, mid, "id", "a message with this id is in the window")
            new.append((mid, x, y, None if t is None else float(t), w))
        before: dict[int, list[int]] = {}
        touched: set[int] = set()

        def touch(sid):
            if sid not in touched:
                touched.add(sid)
                before[sid] = self.head(sid)

        for mid, x, y, t, w in new:
            msg = _Msg(self.next_seq, mid, x, y, t, w)
            self.next_seq += 1
            self.msgs.append(msg)
            self.window_ids.add(mid)
            for term in w:
                self.msg_term.setdefault(term, {})[msg.seq] = msg
            cand = set()
            for term in w:
                cand |= self.by_term.get(term, set())
            for sid in cand:
                sub = self.subs[sid]
                touch(sid)
                sub.scores[msg.seq] = (-self._score(sub, msg), -msg.seq, mid)
                sub.head = None
                msg.subs.append(sid)
            if t is not None:
                self.t_max = max(self.t_max, t)
            while self.msgs and not self._keeps(self.msgs[0]):
                old = self.msgs.popleft()
                self.window_ids.discard(old.id)
                for term in old.w:
                    del self.msg_term[term][old.seq]
                    if not self.msg_term[term]:
                        del self.msg_term[term]
                for sid in old.subs:
                    sub = self.subs.get(sid)
                    if sub is not None and old.seq in sub.scores:
                        touch(sid)
                        del sub.scores[old.seq]
                        sub.head = None
        self.published += len(new)
        out, self.unsure = [], set()
        for sid in sorted(touched):
            sub = self.subs[sid]
            after = self.head(sid)
            if _unsure(before[sid], sub.k, self.rel_tol) or _unsure(after, sub.k, self.rel_tol):
                self.unsure.add(sid)
            if [m for _, _, m in before[sid][:sub.k]] != [m for _, _, m in after[:sub.k]]:
                out.append(Update(sid, tuple((m, sc) for sc, _, m in after[:sub.k])))
        return out

    # ----------------------------------------------------------------- the contract's formulas
    def _keeps(self, m: _Msg) -> bool:
        """Whether the window still holds ``m`` (the oldest message left)."""
        if self.window is not None:
            return len(self.msgs) <= self.window
        return m.t > self.t_max - self.window_seconds

    def _score(self, sub: _Sub, m: _Msg) -> float:
        ts = math.fsum(wt * m.w[t] for t, wt in sub.w.items() if t in m.w)
        ss = 1.0 - math.hypot(sub.x - m.x, sub.y - m.y) / self.max_dist
        return sub.alpha * ss + (1.0 - sub.alpha) * ts

    # ----------------------------------------------------------------- queries
    def ranking(self, sid: int) -> list[tuple[float, int, int]]:
        """(score, seq, message id) of every window message sharing a term with the
        subscription, best first (score descending, newer first)."""
        sub = self.subs.get(sid)
        if sub is None:
            raise UnknownSubscription(f"unknown subscription id={sid!r}")
        return [(-a, -b, mid) for a, b, mid in sorted(sub.scores.values())]

    def head(self, sid: int) -> list[tuple[float, int, int]]:
        """The first entries of :meth:`ranking`: at least ``k + 1`` (or all), and past every
        near-tie group that reaches rank ``k`` (the next entry is not close to the last)."""
        sub = self.subs[sid]
        if sub.head is None:
            m = sub.k + 1
            while True:
                top = heapq.nsmallest(m, sub.scores.values())
                if len(top) < m or not close_scores(top[-2][0], top[-1][0], self.rel_tol):
                    break
                m *= 2
            sub.head = [(-a, -b, mid) for a, b, mid in top]
        return sub.head

    def topk(self, sub_id) -> list[tuple[int, float]]:
        if isinstance(sub_id, bool) or not isinstance(sub_id, Integral) or int(sub_id) not in self.subs:
            raise UnknownSubscription(f"unknown subscription id={sub_id!r}")
        sub = self.subs[int(sub_id)]
        return [(mid, sc) for sc, _, mid in self.head(sub.id)[:sub.k]]

    def mismatch(self, sub_id: int, got) -> str | None:
        """Why ``got`` is not this subscription's top-k (:func:`topk_mismatch`), or None."""
        sub = self.subs.get(sub_id)
        if sub is None:
            return f"subscription {sub_id} is not live in the reference"
        head = self.head(sub_id)
        n = min(sub.k, len(sub.scores))
        if len(got) == n and all(g[0] == h[2] and close_scores(g[1], h[0], self.rel_tol) for g, h in zip(got, head)) \
                and all(g1[1] > g2[1] or (g1[1] == g2[1] and h1[1] > h2[1])
                        for g1, g2, h1, h2 in zip(got, got[1:], head, head[1:])):
            return None                # the reference's own ranking (the usual case, read from its head)
        return topk_mismatch(got, self.ranking(sub_id), sub.k, self.rel_tol)

    def updates_mismatch(self, got, want) -> str | None:
        """Why ``got`` (the updates an engine returned for a publish call) are not ``want``
        (this reference's updates of the same call, just applied), or None: the same
        subscriptions, in subscription id order, apart from those with a near-tie in their top
        k before or after the call (:attr:`unsure`: whether their ids changed depends on
        rounding); each update's top-k as :meth:`mismatch` wants."""
        ids = [u.subscription_id for u in got]
        if ids != sorted(set(ids)):
            return f"updates not in subscription id order, or repeated: {ids}"
        wanted = {u.subscription_id for u in want}
        for sid in sorted(set(ids) ^ wanted):
            if sid not in self.unsure:
                return (f"subscription {sid}: " + ("updated, but its top-k did not change" if sid in ids
                                                   else "its top-k changed, but no update"))
        for u in got:
            why = self.mismatch(u.subscription_id, u.topk)
            if why is not None:
                return f"update of subscription {u.subscription_id}: {why}"
        return None

    def live(self) -> list[int]:
        """The live subscription ids, ascending."""
        return sorted(self.subs)

    def stats(self) -> dict:
        return {"subscriptions": len(self.subs), "window": len(self.msgs), "published": self.published}

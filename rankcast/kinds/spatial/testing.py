"""Testing tools for clusters (usable in users' own tests): random call sequences with
churn, ties and invalid calls, and a driver that plays them against several targets
(a Cluster, an Engine, the brute-force engine, the plain-Python reference) and asserts
equal outcomes after every call.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rankcast.model import Message, Subscription

__all__ = ["Call", "random_calls", "play", "Mismatch"]


@dataclass
class Call:
    op: str            # "subscribe" | "unsubscribe" | "publish"
    arg: Any


class Mismatch(AssertionError):
    pass


def random_calls(seed: int, n_calls: int = 30, *, bounds=(0.0, 0.0, 10.0, 10.0), vocab: int = 30,
                 time_window: bool = False, max_publish: int = 40, sub_batch: int = 6,
                 invalid: bool = True, sub_terms: tuple[int, int] = (1, 4), msg_terms: tuple[int, int] = (0, 5),
                 alphas=(0.0, 0.2, 0.5, 0.8, 1.0, None)) -> list[Call]:
    """A call sequence: subscriptions and unsubscriptions at any time, publishes of 0 to
    ``max_publish`` messages, exact ties (equal weights, coincident points, repeated
    messages), and some malformed calls that must fail atomically the same way everywhere."""
    rng = np.random.default_rng(seed)
    xmin, ymin, xmax, ymax = bounds
    p = 1.0 / np.arange(1, vocab + 1) ** 0.8
    p /= p.sum()
    spots = rng.uniform([xmin, ymin], [xmax, ymax], (4, 2))

    def point():
        if rng.random() < 0.3:
            return tuple(float(v) for v in spots[rng.integers(len(spots))])
        return float(rng.uniform(xmin, xmax)), float(rng.uniform(ymin, ymax))

    def terms(n):
        idx = rng.choice(vocab, size=n, replace=False, p=p)
        if rng.random() < 0.4:
            return {f"t{i}": 1.0 for i in idx}
        return {f"t{i}": float(rng.choice([0.5, 1.0, 2.0, rng.uniform(0.1, 3)])) for i in idx}

    calls: list[Call] = []
    live: list[int] = []
    next_sub, next_msg, t = 0, 0, 0.0
    recent: list[Message] = []
    for _ in range(n_calls):
        r = rng.random()
        if r < 0.22 or not live:
            n = int(rng.integers(1, sub_batch + 1))
            subs = []
            for i in range(n):
                x, y = point()
                a = alphas[int(rng.integers(len(alphas)))]
                subs.append(Subscription(next_sub + i, x, y,
                                         terms=terms(int(rng.integers(sub_terms[0], sub_terms[1] + 1))),
                                         k=int(rng.integers(1, 6)),
                                         alpha=float(rng.random() if a is None else a)))
            if invalid and rng.random() < 0.1:
                bad = int(rng.integers(n))
                x, y = point()
                subs[bad] = Subscription(subs[bad].id, x, y, terms={"t1": 1.0}, k=0)
                calls.append(Call("subscribe", subs))
                continue
            if invalid and live and rng.random() < 0.1:
                subs[-1] = Subscription(live[0], 1.0, 1.0, terms={"t1": 1.0})
                calls.append(Call("subscribe", subs))
                continue
            next_sub += n
            live += [s.id for s in subs]
            calls.append(Call("subscribe", subs))
        elif r < 0.30:
            m = min(len(live), int(rng.integers(1, 4)))
            ids = [int(i) for i in rng.choice(live, size=m, replace=False)]
            if invalid and rng.random() < 0.15:
                calls.append(Call("unsubscribe", ids + [10**9]))
                continue
            live = [i for i in live if i not in ids]
            calls.append(Call("unsubscribe", ids))
        else:
            n = int(rng.integers(0, max_publish + 1))
            msgs = []
            for i in range(n):
                if time_window:
                    t += float(rng.choice([0.0, 0.5, 1.0, rng.uniform(0, 3)]))
                if recent and rng.random() < 0.1:          # same text and place: equal scores
                    src = recent[int(rng.integers(len(recent)))]
                    msgs.append(Message(next_msg + i, src.x, src.y, terms=src.terms,
                                        t=t if time_window else None))
                    continue
                x, y = point()
                msgs.append(Message(next_msg + i, x, y,
                                    terms=terms(int(rng.integers(msg_terms[0], msg_terms[1] + 1))),
                                    t=t if time_window else None))
            if invalid and n and rng.random() < 0.08:
                bad = msgs[int(rng.integers(n))]
                msgs[-1] = Message(bad.id, 1.0, 1.0, terms={"t2": 1.0}, t=t if time_window else None)
                calls.append(Call("publish", msgs))
                continue
            next_msg += n
            recent = (recent + msgs)[-20:]
            calls.append(Call("publish", msgs))
    return calls


def _outcome(target, call: Call):
    try:
        out = getattr(target, call.op)(call.arg)
    except Exception as e:  # compared by type and message
        return ("error", type(e).__name__, str(e))
    return ("ok", out)


def _is_reference(target) -> bool:
    """A reference (rankcast.testing.ReferenceEngine, or any object with its ``mismatch`` and
    ``updates_mismatch``) judges the other targets' answers instead of matching them bit for
    bit: its scores are computed another way."""
    return hasattr(target, "mismatch") and hasattr(target, "updates_mismatch")


def play(targets: dict[str, Any], calls: list[Call], *, live: set[int] | None = None,
         check_every: int = 1) -> int:
    """Play ``calls`` on every target; after each call the outcomes (updates or the error)
    and the top-k of every live subscription must be equal. Returns the number of
    comparisons made. A target with ``topk_many`` answers all subscriptions in one call.
    ``live``: the subscriptions live before the calls (updated in place).

    A reference target (:func:`_is_reference`, such as ``rankcast.testing.ReferenceEngine``)
    is compared with the first other target: the same outcome (an error of the same type,
    its message not compared), the updates and every top-k as the reference judges them
    (rankings exactly, scores within its tolerance). Where two checks follow each other,
    the updates of a publish (a list of ``rc.Update``) must also be exactly the
    subscriptions whose top-k ids (as the targets answered them) changed, each with its
    top-k after the call."""
    names = [n for n in targets if not _is_reference(targets[n])]
    refs = [n for n in targets if _is_reference(targets[n])]
    if not names:
        raise ValueError("play: at least one target that is not a reference")
    live = set() if live is None else live
    checks = 0
    prev = None                      # the first target's top-k lists at the previous check
    for n, call in enumerate(calls):
        outs = {name: _outcome(targets[name], call) for name in names + refs}
        ref = outs[names[0]]
        for name in names[1:]:
            if outs[name] != ref:
                raise Mismatch(f"call #{n} {call.op}: {names[0]} -> {_short(ref)} but {name} -> {_short(outs[name])}")
        for name in refs:
            got = outs[name]
            if got[:2] != ref[:2] and not (got[0] == ref[0] == "ok"):
                raise Mismatch(f"call #{n} {call.op}: {names[0]} -> {_short(ref)} but {name} -> {_short(got)}")
            if ref[0] == "ok" and call.op == "publish" and isinstance(ref[1], list):
                why = targets[name].updates_mismatch(ref[1], got[1])
                if why is not None:
                    raise Mismatch(f"call #{n} publish: {names[0]}'s updates against {name}: {why}")
        if ref[0] == "ok":
            if call.op == "subscribe":
                live |= {s.id for s in call.arg}
            elif call.op == "unsubscribe":
                live -= set(call.arg)
        if n % check_every and n != len(calls) - 1:
            prev = None
            continue
        ids = sorted(live)
        tops = {name: _topk_all(targets[name], ids) for name in names}
        for name in names[1:]:
            if tops[name] != tops[names[0]]:
                bad = next(i for i in ids if tops[name][i] != tops[names[0]][i])
                raise Mismatch(f"after call #{n} {call.op}: topk({bad}) {names[0]}={tops[names[0]][bad]} "
                               f"{name}={tops[name][bad]}")
        first = tops[names[0]]
        for name in refs:
            if targets[name].live() != ids:
                raise Mismatch(f"after call #{n} {call.op}: {name} holds other subscriptions")
            for i in ids:
                why = targets[name].mismatch(i, first[i])
                if why is not None:
                    raise Mismatch(f"after call #{n} {call.op}: topk({i}) of {names[0]} against {name}: {why}")
        if prev is not None and ref[0] == "ok" and call.op == "publish" and isinstance(ref[1], list):
            changed = [i for i in ids if [m for m, _ in first[i]] != [m for m, _ in prev[i]]]
            ups = ref[1]
            if [u.subscription_id for u in ups] != changed or \
                    any([tuple(e) for e in u.topk] != [tuple(e) for e in first[u.subscription_id]] for u in ups):
                raise Mismatch(f"call #{n} publish: {names[0]} updated {[u.subscription_id for u in ups]}, "
                               f"the subscriptions whose top-k changed are {changed}")
        prev = first
        checks += 1
    return checks


def _topk_all(target, ids):
    if hasattr(target, "topk_many"):
        return target.topk_many(ids)
    return {i: target.topk(i) for i in ids}


def _short(o) -> str:
    s = repr(o)
    return s if len(s) < 300 else s[:300] + "..."

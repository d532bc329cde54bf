"""The aggregator's result lists against a plain model: random applies, replica drops,
forgets and re-subscriptions of many ids (its hash table grows, deletes move entries back,
slots and list entries are reused, the pool is compacted), with the merged top-k of every
subscription and each emit's changes equal to the model's after every call."""
from __future__ import annotations

import numpy as np
import pytest

from rankcast.kinds.spatial.roles.aggregator import Aggregator


def _merged(lists: dict, sid: int, k: int) -> list[tuple[int, float]]:
    rows = sorted({(sc, q, m) for (s, _), rs in lists.items() if s == sid for m, q, sc in rs}, reverse=True)
    return [(m, sc) for sc, q, m in rows[:k]]


def _csr(rows_per_sub):
    off = np.cumsum([0] + [len(r) for r in rows_per_sub]).astype(np.int64)
    flat = [x for r in rows_per_sub for x in r]
    return (off, np.array([m for m, _, _ in flat], np.int64), np.array([q for _, q, _ in flat], np.int64),
            np.array([sc for _, _, sc in flat], float))


@pytest.mark.parametrize("seed", range(3))
def test_aggregator_equals_a_model_through_drops_forgets_and_reuse(seed):
    rng = np.random.default_rng(seed)
    P = 5
    agg = Aggregator(0, P, export_metrics=False)
    lists: dict[tuple[int, int], list] = {}   # (sub, partition) -> rows (msg id, seq, score)
    ks: dict[int, int] = {}
    reported: dict[int, list] = {}
    # ids spread over a wide range and clustered: probe runs collide and wrap around
    pool = np.unique(np.concatenate([rng.integers(0, 1 << 40, 150), np.arange(1000, 1150) * 1024]))
    for call in range(400):
        op = rng.random()
        if op < 0.7:
            part = int(rng.integers(0, P))
            held = [s for (s, p) in lists if p == part]
            drop = sorted(set(rng.choice(held, min(len(held), int(rng.integers(0, 4))), replace=False).tolist())) \
                if held and rng.random() < 0.3 else []
            subs = sorted(set(rng.choice(pool, int(rng.integers(0, 40))).tolist()) - set(drop))
            rows = []
            for s in subs:
                k = ks.setdefault(s, int(rng.integers(1, 6)))
                m = int(rng.integers(0, k + 1))
                seqs = rng.choice(60, m, replace=False)
                # a message's score is a function of (sub, message): replicas agree on it
                r = sorted(((int(q) + 7, int(q), round(float((q * 37 + s) % 11) / 10, 1)) for q in seqs),
                           key=lambda x: (x[2], x[1]), reverse=True)
                rows.append(r)
                lists[(s, part)] = r
            for s in drop:
                lists.pop((s, part), None)
            agg.apply(part, np.array(drop, np.int64), np.array(subs, np.int64),
                      np.array([ks[s] for s in subs], np.int64), *_csr(rows))
        elif op < 0.85:
            gone = sorted(set(rng.choice(pool, int(rng.integers(1, 30))).tolist()))
            agg.forget(np.array(gone, np.int64))
            for s in gone:
                ks.pop(s, None)
                reported.pop(s, None)
                for key in [key for key in lists if key[0] == s]:
                    del lists[key]
            if rng.random() < 0.3:
                agg._compact()
        else:
            ids, off, mids, scs = agg.emit()
            got = {int(i): list(zip(mids[off[j]:off[j + 1]].tolist(), scs[off[j]:off[j + 1]].tolist()))
                   for j, i in enumerate(ids)}
            want = {}
            for s, k in ks.items():
                now = _merged(lists, s, k)
                if now != reported.get(s, []) and (now or s in reported):
                    want[s] = now
                reported[s] = now
            assert got == want, call
        live = sorted(ks)
        assert agg.topk_many(live) == [_merged(lists, s, ks[s]) for s in live], call
        assert agg.stats()["subscriptions"] == len(ks), call
        for s in live[:5]:
            assert agg.replicas(s) == sorted(p for (t, p) in lists if t == s), call

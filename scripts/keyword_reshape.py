"""A bounded reshape of a keyword map from its measured partitions (issue #15), offline:
:func:`reshape_ranges` on `partition_counters.py` JSONs of one map (their
busy times averaged), the new map written for `partition_counters.py` to run:

    PYTHONPATH=$PWD python scripts/keyword_reshape.py <out_map.json> <counters.json>...
    RANKCAST_KMAP=<out_map.json> PYTHONPATH=$PWD python scripts/partition_counters.py out.json keyword 64

Prints the ranges changed and the replicas they hold (what a refit to the new map re-places).
"""
from __future__ import annotations

import json
import sys

import numpy as np

from rankcast.actors.policies import KeywordMap
from rankcast.errors import InvalidInput


def reshape_ranges(km: KeywordMap, busy, messages, fixed: float = 0.006,
                   per_message: float = 7e-6, min_gain: float = 0.02) -> tuple[KeywordMap, list[int]]:
    """A bounded reshape of ``km`` from its partitions' measured busy time (issue #15): while
    the estimated largest partition falls by at least ``min_gain`` (a share), the range of the
    slowest partition gets one more copy, paid for by one copy of another multi-copy range or
    by merging the cheapest two adjacent single-copy ranges. A partition is estimated as ``F + V / copies``: ``F =
    fixed + per_message x`` its messages received (a range's messages reach every copy),
    ``V`` the rest of its range's measured time (a least-squares fit of the partitions'
    counters at 64: about 6 ms and 7 us per message). ``busy``/``messages``: per partition
    of ``km``. Returns the new map (as many partitions; any ranges and copies route
    exactly) and the ranges of ``km`` whose subscriptions it re-places."""
    busy = np.asarray(busy, np.float64)
    messages = np.asarray(messages, np.float64)
    if len(busy) != km.n or len(messages) != km.n:
        raise InvalidInput(f"reshape_ranges: {len(busy)} busy times and {len(messages)} message counts "
                           f"for a map of {km.n} partitions")
    rng = []
    for i in range(len(km.copies)):
        a, c = int(km.first[i]), int(km.copies[i])
        f = fixed + per_message * float(messages[a:a + c].mean())
        rng.append({"lo": int(km.bounds[i]), "c": c, "F": f, "V": float((busy[a:a + c] - f).clip(0).sum()),
                    "orig": [i], "changed": False})

    def est(r, c=None):
        return r["F"] + r["V"] / (c or r["c"])

    while True:
        costs = [est(r) for r in rng]
        w = int(np.argmax(costs))
        options = []      # (largest estimate after, the donor's estimate after, kind, index)
        for i, r in enumerate(rng):
            if i != w and r["c"] > 1:
                d = est(r, r["c"] - 1)
                options.append((max([d] + [c for j, c in enumerate(costs) if j not in (i, w)]), d, "uncopy", i))
        for i in range(len(rng) - 1):
            a, b = rng[i], rng[i + 1]
            if w not in (i, i + 1) and a["c"] == 1 and b["c"] == 1:
                d = a["F"] + b["F"] - fixed + a["V"] + b["V"]
                options.append((max([d] + [c for j, c in enumerate(costs) if j not in (i, i + 1, w)]), d, "merge", i))
        if not options:
            break
        after, _, kind, i = min(options)
        after = max(after, est(rng[w], rng[w]["c"] + 1))
        if after > costs[w] * (1 - min_gain):
            break
        rng[w]["c"] += 1
        rng[w]["changed"] = True
        if kind == "uncopy":
            rng[i]["c"] -= 1
            rng[i]["changed"] = True
        else:
            a, b = rng[i], rng[i + 1]
            rng[i: i + 2] = [{"lo": a["lo"], "c": 1, "F": a["F"] + b["F"] - fixed, "V": a["V"] + b["V"],
                              "orig": a["orig"] + b["orig"], "changed": True}]
    out = KeywordMap(np.array([r["lo"] for r in rng] + [int(km.v_fit)], np.int64), km.v_fit,
                     np.array([r["c"] for r in rng], np.int64))
    return out, sorted(i for r in rng if r["changed"] for i in r["orig"])


def main(out: str, *inputs: str) -> None:
    runs = [json.loads(open(p).read()) for p in inputs]
    r0 = runs[0]["ranges"]
    km = KeywordMap(np.array(r0["bounds"], np.int64), int(r0["bounds"][-1]), np.array(r0["copies"], np.int64))
    busy = np.mean([r["busy"] for r in runs], axis=0)
    msgs = np.array([p["messages"] for p in runs[0]["partitions"]], float)
    held = np.array([p["subscriptions_held"] for p in runs[0]["partitions"]], float)
    new, changed = reshape_ranges(km, busy, msgs)
    moved = sum(held[km.first[i]: km.first[i] + km.copies[i]].sum() for i in changed)
    print(f"ranges {len(km.copies)} -> {len(new.copies)}; changed ranges {changed} (copies "
          f"{[int(km.copies[i]) for i in changed]}) hold {moved:.0f} of {held.sum():.0f} replicas; "
          f"measured max {busy.max():.4f}, mean {busy.mean():.4f}")
    print("new copies", new.copies.tolist())
    open(out, "w").write(json.dumps({"bounds": new.bounds.tolist(), "copies": new.copies.tolist()}))


if __name__ == "__main__":
    main(sys.argv[1], *sys.argv[2:])

"""A bounded reshape of a keyword map from its measured partitions (issue #15), offline:
`rankcast.actors.policies.reshape_ranges` on `partition_counters.py` JSONs of one map (their
busy times averaged), the new map written for `partition_counters.py` to run:

    PYTHONPATH=$PWD python scripts/keyword_reshape.py <out_map.json> <counters.json>...
    RANKCAST_KMAP=<out_map.json> PYTHONPATH=$PWD python scripts/partition_counters.py out.json keyword 64

Prints the ranges changed and the replicas they hold (what a refit to the new map re-places).
"""
from __future__ import annotations

import json
import sys

import numpy as np

from rankcast.actors.policies import KeywordMap, reshape_ranges


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

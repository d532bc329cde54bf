"""Per-partition CPU time and counters of one in-process cluster over `bench cluster`'s
scaling stream (GeoNames, 100k subscriptions, window 20,000, 5,000 messages pipelined,
the bench's topology and 5,000-row fitting sample), with each range's sampled cost
features (keyword policy: candidate pairs, postings, replicas, message share per copy):

    PYTHONPATH=$PWD python scripts/partition_counters.py <out.json> [policy] [partitions] [factors]

``factors``: a JSON object of keyword's cost-model factors to use instead of PlacedCost's
(e.g. '{"D_POSTING": 0.003, "B_REPLICA": 0.00054, "C_MESSAGE": 1.48}').
Environment: RANKCAST_MESSAGES (stream length, 5,000), RANKCAST_OWN_PAIRS=1 (a replica leaves
a pair whose first shared term it does not index; off by default, stop 42), RANKCAST_REPLICA_SHARE (the arrival share a
replica's buffer is sized for, 0), RANKCAST_REPLICA_CANDIDATES (``core.REPLICA_CANDIDATES``).

Prints the stages' CPU seconds and the slowest partitions' counters (messages received,
replicas held, buffer rows inserted, pairs verified); the JSON holds every partition's.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

import rankcast as rc
from rankcast.actors import bench as B
from rankcast.actors.policies import KeywordPolicy, _row_min_max_in
from rankcast.bench._common import build_workload

WINDOW, MESSAGES, SUBS, SAMPLE = 20_000, 5_000, 100_000, 5_000
import os as _os
MESSAGES = int(_os.environ.get("RANKCAST_MESSAGES", MESSAGES))      # a longer stream (re-evaluations)


def _range_features(cl, work) -> dict:
    """Each keyword partition's sampled features: pairs / copies, postings / copies,
    sampled replicas / copies, share of the sampled messages (as the cost model sees them)."""
    coord = cl._coord.local
    pol = coord.policy
    if not isinstance(pol, KeywordPolicy) or not hasattr(pol, "kmap") or getattr(pol, "cost", None) is None:
        return {}
    km, cost = pol.kmap, pol.cost
    sb, mb = coord._encode_sample((B._take(work.subs, 0, SAMPLE), B._take(work.msgs, 0, SAMPLE)))
    feats = np.zeros((km.n, 4))
    for i in range(len(km.copies)):
        lo, hi, c = int(km.bounds[i]), int(km.bounds[i + 1]), int(km.copies[i])
        sm = _row_min_max_in(sb.offsets, sb.term_ids, lo, hi)[0]
        mm = _row_min_max_in(mb.offsets, mb.term_ids, lo, hi)[0]
        feats[km.first[i]: km.first[i] + c] = [cost.pairs[lo:hi].sum() / c, cost.walks[lo:hi].sum() / c,
                                               (sm >= 0).sum() / c, (mm >= 0).sum() / max(len(mb), 1)]
    return {"bounds": km.bounds.tolist(), "copies": km.copies.tolist(), "features": feats.tolist(),
            "scale": cost.scale, "sample_messages": cost.n_msgs}


def main(out: str, policy: str = "keyword", P: int = 64) -> None:
    work = build_workload("geonames", WINDOW + MESSAGES, SUBS, 0)
    cfg = rc.EngineConfig(bounds=work.bounds, window=WINDOW, vocabulary=work.vocab)
    if _os.environ.get("RANKCAST_LEAF_CAPACITY"):      # the partitions' Quadtree leaf capacity
        cfg = cfg.replace(leaf_capacity=int(_os.environ["RANKCAST_LEAF_CAPACITY"]))
    small = build_workload("geonames", 600, 200, 0)      # compile the kernels first
    wcfg = rc.EngineConfig(bounds=small.bounds, window=300, vocabulary=small.vocab)
    B._drive(B._inproc_cluster(small, wcfg, policy, 16, 2, 1, 64, 200), small, 300, 300, 100)
    cl = B._inproc_cluster(work, cfg, policy, P, max(2, P // 4), max(1, P // 16), 1024, SAMPLE,
                           options={"aggregators": max(1, P // 8)}, monitor_every=0.0,
                           delivery_interval=B.SCALE_DELIVERY)
    r = B._drive(cl, work, WINDOW, MESSAGES, 1000, collect=False)
    st = cl.stats()
    d = B._delta(st, r["before"])
    pr = B._projected(d["busy"], MESSAGES)
    parts = []
    for a, b in zip(st["roles"]["partition"], r["before"]["roles"]["partition"]):
        row = {k: a[k] - b.get(k, 0) for k in a
               if isinstance(a[k], (int, float)) and not isinstance(a[k], bool)}
        row["subscriptions_held"] = a["subscriptions"]
        parts.append(row)
    res = {"stage_seconds": pr["stage_seconds"], "partition_balance": pr["partition_balance"],
           "busy": d["busy"]["partition"], "replication_ratio": st.get("replication_ratio"),
           "communication_cost": d["communication_cost"], "partitions": parts,
           "ranges": _range_features(cl, work)}
    cl.shutdown()
    Path(out).write_text(json.dumps(res, default=float))
    print({k: round(v, 4) for k, v in pr["stage_seconds"].items()}, "balance", round(pr["partition_balance"], 3),
          "replication", res["replication_ratio"], "tuples/msg", round(d["communication_cost"], 2))
    busy = np.array(res["busy"])
    for j in np.argsort(-busy)[:8]:
        p = parts[j]
        print(f"partition {j}: {busy[j]:.4f} s, messages {p['messages']}, replicas {p['subscriptions_held']}, "
              f"inserted {p['core_inserted']}, verified {p['core_verified']}")
    tot = {k: sum(p.get(k, 0) for p in parts) for k in ("core_verified", "core_inserted", "core_index_left_to_replicas")}
    print(f"sum {busy.sum():.3f} s, slowest {busy.max():.4f} s, verified {tot['core_verified']}, "
          f"inserted {tot['core_inserted']}, left to replicas {tot['core_index_left_to_replicas']}")


if __name__ == "__main__":
    import os
    if os.environ.get("RANKCAST_REPLICA_SHARE"):     # a replica's buffer sized for this arrival share
        from rankcast.indexing import core as _core
        _share, _set = float(os.environ["RANKCAST_REPLICA_SHARE"]), _core.SkypeCore.set_arrival_share
        _core.SkypeCore.set_arrival_share = lambda self, slots, share: _set(self, slots, _share)
    if os.environ.get("RANKCAST_REPLICA_CANDIDATES"):
        from rankcast.indexing import core as _core
        _core.REPLICA_CANDIDATES = int(os.environ["RANKCAST_REPLICA_CANDIDATES"])
    if os.environ.get("RANKCAST_OWN_PAIRS") in ("0", "1"):   # 1: replicas leave pairs (igpt.OWN_PAIRS)
        from rankcast.indexing import igpt
        if hasattr(igpt, "OWN_PAIRS"):
            igpt.OWN_PAIRS = os.environ["RANKCAST_OWN_PAIRS"] == "1"
    if os.environ.get("RANKCAST_LOCATION_WHOLE") in ("0", "1"):   # older name: 0 suffix, 1 whole
        from rankcast.indexing import igpt
        if hasattr(igpt, "LOCATION"):
            igpt.LOCATION = "whole" if os.environ["RANKCAST_LOCATION_WHOLE"] == "1" else "suffix"
        elif hasattr(igpt, "LOCATION_WHOLE"):
            igpt.LOCATION_WHOLE = os.environ["RANKCAST_LOCATION_WHOLE"] == "1"
    if os.environ.get("RANKCAST_LOCATION"):      # igpt.LOCATION: off, whole, suffix
        from rankcast.indexing import igpt
        igpt.LOCATION = os.environ["RANKCAST_LOCATION"]
    if os.environ.get("RANKCAST_KMAP"):      # a fixed map (scripts/keyword_reshape.py) in place of the fit
        from rankcast.actors.policies import KeywordMap
        _fixed = json.loads(Path(os.environ["RANKCAST_KMAP"]).read_text())
        _build = KeywordMap.build

        def _fixed_build(n_parts, s_off, s_terms, m_off, m_terms, v_fit, cost=None):
            if n_parts != sum(_fixed["copies"]) or int(v_fit) != _fixed["bounds"][-1]:
                return _build(n_parts, s_off, s_terms, m_off, m_terms, v_fit, cost)
            return KeywordMap(np.array(_fixed["bounds"], np.int64), int(v_fit), np.array(_fixed["copies"], np.int64))
        KeywordMap.build = staticmethod(_fixed_build)
    if len(sys.argv) > 4:
        from rankcast.actors.policies import PlacedCost
        for name, value in json.loads(sys.argv[4]).items():
            if not hasattr(PlacedCost, name):
                raise SystemExit(f"PlacedCost has no factor {name}")
            setattr(PlacedCost, name, float(value))
    main(sys.argv[1], *(sys.argv[2:3]), *([int(sys.argv[3])] if len(sys.argv) > 3 else []))

"""``rankcast bench ingest``: the Spark path through RayDP, timed side by side.

One run, one cluster (``--partitions`` partitions, ``--policy``):

1. fill the window: the first ``--window`` messages are replayed from Parquet;
2. bulk load: ``Cluster.load_subscriptions(path)`` of ``--subs`` rows (Parquet read, routed by
   the policy, indexes built in bulk, initial top-k against the window), timed;
3. client path: ``--client-rows`` further rows subscribed through ``Cluster.subscribe`` in
   batches of 1,000 (what a user without the bulk path does), timed; the ratio of the two
   rates is the bulk path's speed-up;
4. replay vs publish: ``--messages`` messages through ``Cluster.replay(path)`` and as many
   again through ``Cluster.publish`` in batches of the same size, each timed; their rates
   are compared.

JSON on stdout and in ``--out``/ingest.json; charts in ``--out``/ingest.png.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from ._common import pyplot, save_figure, write_json

__all__ = ["add_arguments", "main", "plot"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default="geonames", choices=["geonames", "tweets", "yelp", "dense"])
    p.add_argument("--subs", type=int, default=100_000, help="rows bulk-loaded (issue target: 1,000,000)")
    p.add_argument("--client-rows", type=int, default=10_000, help="rows subscribed through the client")
    p.add_argument("--window", type=int, default=20_000, help="count window, filled first (target: 100,000)")
    p.add_argument("--messages", type=int, default=10_000, help="messages replayed, and published")
    p.add_argument("--batch", type=int, default=1_000, help="messages per publish call and replay batch")
    p.add_argument("--policy", default="prefix")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--address", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="out/bench")


def _rate(rows: int, seconds: float) -> dict:
    return {"rows": rows, "seconds": round(seconds, 3), "rows_per_s": round(rows / seconds, 1) if seconds else None}


def _cpu_delta(before: dict, after: dict) -> dict:
    """CPU seconds each role spent between two ``Cluster.stats()["roles"]`` readings (a list
    per role with several actors): where a phase's work went."""
    out = {}
    for role, b in before.items():
        a = after[role]
        if isinstance(b, dict):
            out[role] = round(a["cpu_seconds"] - b["cpu_seconds"], 3)
        else:
            out[role] = [round(y["cpu_seconds"] - x["cpu_seconds"], 3) for x, y in zip(b, a)]
    return out


def main(args: argparse.Namespace) -> dict:
    import rankcast as rc
    from rankcast.ingest import datasets

    W, M, B = args.window, args.messages, args.batch
    n_msgs = W + 2 * M
    print(f"[bench ingest] {args.dataset}: window {W}, {args.subs} + {args.client_rows} subscriptions, "
          f"{M} replayed + {M} published", file=sys.stderr, flush=True)
    bounds, msgs, subs, vocab = datasets.dataset(args.dataset, n_msgs, args.subs + args.client_rows, args.seed)
    res: dict = {}
    with tempfile.TemporaryDirectory(prefix="rankcast-ingest-") as tmp:
        tmp = Path(tmp)
        bulk_p = datasets.write_parquet(subs.slice(0, args.subs), tmp / "subscriptions.parquet")
        fill_p = datasets.write_parquet(msgs.slice(0, W), tmp / "window.parquet")
        replay_p = datasets.write_parquet(msgs.slice(W, M), tmp / "replay.parquet")
        cfg = rc.EngineConfig(bounds=bounds, window=W, vocabulary=vocab)
        ccfg = rc.ClusterConfig(engine=cfg, policy=args.policy, partitions=args.partitions,
                                name="rankcast-bench-ingest", batch_size=B)
        t0 = time.perf_counter()
        cl = rc.Cluster.start(ccfg, address=args.address, fresh=True)
        res["start_seconds"] = round(time.perf_counter() - t0, 3)
        try:
            t0 = time.perf_counter()
            cl.replay(str(fill_p), batch_rows=B)
            res["fill_window"] = _rate(W, time.perf_counter() - t0)

            before = cl.stats()["roles"]
            t0 = time.perf_counter()
            cl.load_subscriptions(str(bulk_p))
            res["bulk_load"] = _rate(args.subs, time.perf_counter() - t0)
            res["bulk_load"]["cpu_seconds_by_role"] = _cpu_delta(before, cl.stats()["roles"])

            client = subs.slice(args.subs, args.client_rows)
            t0 = time.perf_counter()
            for a in range(0, client.num_rows, 1000):
                cl.subscribe(client.slice(a, 1000))
            res["client_subscribe_batches_of_1000"] = _rate(client.num_rows, time.perf_counter() - t0)
            bulk_rate = res["bulk_load"]["rows_per_s"]
            client_rate = res["client_subscribe_batches_of_1000"]["rows_per_s"]
            res["bulk_over_client"] = round(bulk_rate / client_rate, 2) if client_rate else None

            t0 = time.perf_counter()
            cl.replay(str(replay_p), batch_rows=B)
            cl.flush()
            res["replay"] = _rate(M, time.perf_counter() - t0)
            pub = msgs.slice(W + M, M)
            t0 = time.perf_counter()
            for a in range(0, M, B):
                cl.publish(pub.slice(a, B), wait=True)
            res["publish"] = _rate(M, time.perf_counter() - t0)
            res["replay_over_publish"] = round(res["replay"]["rows_per_s"] / res["publish"]["rows_per_s"], 3)
            res["stats"] = json.loads(json.dumps(cl.stats(), default=str))
        finally:
            cl.shutdown()
    report = {"benchmark": "ingest", "config": {k: v for k, v in vars(args).items() if k != "func"},
              "results": res}
    out = Path(args.out)
    write_json(report, out / "ingest.json")
    plot(res, out / "ingest.png")
    print(json.dumps({k: v for k, v in res.items() if k != "stats"}, indent=2))
    print(f"[bench ingest] wrote {out / 'ingest.json'} and {out / 'ingest.png'}", file=sys.stderr)
    return report


def plot(res: dict, path: Path) -> None:
    """Three panels: the bulk load against the 60 s target and the client's time for the same
    rows; where the bulk load's CPU went, by actor; replay against publish."""
    plt = pyplot("rankcast bench ingest")

    fig, ax = plt.subplots(1, 3, figsize=(16, 4.5))
    bulk, client = res["bulk_load"], res["client_subscribe_batches_of_1000"]
    rows = bulk["rows"]
    client_s = rows / client["rows_per_s"] if client.get("rows_per_s") else 0.0
    ax[0].bar(["bulk load", "client, batches of 1,000\n(its rate, same rows)"], [bulk["seconds"], client_s],
              color=["tab:blue", "tab:gray"])
    if rows >= 1_000_000:
        ax[0].axhline(60 * rows / 1_000_000, color="tab:red", ls="--", label="target: 60 s per 1M")
        ax[0].legend()
    ax[0].set_ylabel("seconds")
    ax[0].set_title(f"{rows:,} subscriptions, initial top-k included\n"
                    f"bulk {bulk['rows_per_s']:,.0f} rows/s = {res.get('bulk_over_client')}x the client")
    cpu = bulk.get("cpu_seconds_by_role", {})
    names, secs = [], []
    for role, v in cpu.items():
        vals = v if isinstance(v, list) else [v]
        for i, x in enumerate(vals):
            if x > 0:
                names.append(f"{role} {i}" if len(vals) > 1 else role)
                secs.append(x)
    ax[1].barh(names, secs, color="tab:orange")
    ax[1].invert_yaxis()
    ax[1].set_xlabel("CPU seconds during the bulk load")
    ax[1].set_title(f"{sum(secs):.0f} CPU s in {bulk['seconds']:.0f} s wall")
    rp, pb = res["replay"], res["publish"]
    ax[2].bar(["replay (pipelined)", "publish, wait=True"], [rp["rows_per_s"], pb["rows_per_s"]],
              color=["tab:green", "tab:gray"])
    ax[2].set_ylabel("messages / s")
    ax[2].set_title(f"replay / publish = {res.get('replay_over_publish')}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path, dpi=110)
    plt.close(fig)

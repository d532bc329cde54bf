"""``rankcast bench stream``: the streaming pipeline end to end, on GeoNames.

Parquet files of messages land in a folder; a Spark file-source query (RayDP, on the
cluster's Ray) publishes each micro-batch to the cluster with ``ClusterSink``; a
``DeliveryWriter`` in this process writes the delivery stream as Parquet files.

1. set-up: ``--subs`` subscriptions bulk-loaded, the ``--window`` filled by a replay;
2. throughput: ``--files`` files of ``--file-rows`` messages land at once; messages per
   second from the first landing to the delivery file that covers the last message;
3. latency: ``--latency-files`` files of ``--latency-file-rows`` land one every
   ``--interval`` seconds (below the throughput, so no queue builds up); for each message, the seconds from its file landing
   to the first delivery file covering its stream position being readable (renamed into
   place); p50 and p99 over the messages.

JSON on stdout and in ``--out``/stream.json; charts in ``--out``/stream.png.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from ._common import pyplot, save_figure, write_json

__all__ = ["add_arguments", "main", "plot"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--subs", type=int, default=100_000, help="subscriptions bulk-loaded first")
    p.add_argument("--window", type=int, default=20_000, help="count window, filled first")
    p.add_argument("--files", type=int, default=20, help="files landed at once (throughput)")
    p.add_argument("--file-rows", type=int, default=2_000, help="messages per file")
    p.add_argument("--latency-files", type=int, default=20, help="files landed one by one (latency)")
    p.add_argument("--latency-file-rows", type=int, default=500, help="messages per file (latency)")
    p.add_argument("--interval", type=float, default=4.0, help="seconds between landings (latency)")
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--policy", default="prefix")
    p.add_argument("--max-files-per-trigger", type=int, default=1)
    p.add_argument("--address", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="out/bench")


class _Writer(threading.Thread):
    """A DeliveryWriter in a thread that records when each file became readable."""

    def __init__(self, cl, path: Path):
        super().__init__(daemon=True)
        from rankcast.ingest.streaming import DeliveryWriter
        self.w = DeliveryWriter(cl, path, max_seconds=0.05, poll=0.005)
        self.written: list[tuple[int, float]] = []       # (last position, time readable)
        self.stop_flag = False
        self.error: BaseException | None = None

    def run(self):
        try:
            while not self.stop_flag:
                f = self.w.step()
                if f is None:
                    time.sleep(0.005)
                    continue
                self.written.append((self.w.position - 1, time.time()))
        except BaseException as e:       # reported by the bench
            self.error = e

    def covered_at(self, positions: np.ndarray) -> np.ndarray:
        """For each position, when the first file covering it was readable (nan: none yet)."""
        if not self.written:
            return np.full(len(positions), np.nan)
        last = np.array([p for p, _ in self.written], np.int64)
        at = np.array([t for _, t in self.written])
        i = np.searchsorted(last, positions, side="left")
        out = np.full(len(positions), np.nan)
        ok = i < len(last)
        out[ok] = at[i[ok]]
        return out


def _timed_sink(cl_name: str):
    """A ClusterSink that records, per micro-batch, the seconds spent collecting it to the
    driver and applying it in the cluster (where a micro-batch's time goes)."""
    from rankcast.ingest.streaming import ClusterSink

    class TimedSink(ClusterSink):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.times: list[tuple[float, float, float]] = []     # (start, collect s, apply s)

        def table(self, df):
            self._t0 = time.time()
            out = super().table(df)
            self._t1 = time.time()
            return out

        def __call__(self, df, batch_id):
            out = super().__call__(df, batch_id)
            self.times.append((self._t0, self._t1 - self._t0, time.time() - self._t1))
            return out

    return TimedSink(cl_name, sink="bench")


def _land(table, folder: Path, name: str) -> float:
    """``table`` appears in ``folder`` at once (written aside, renamed in); the landing time."""
    import pyarrow.parquet as pq
    tmp = folder.parent / f".{name}"
    pq.write_table(table, tmp)
    t = time.time()
    os.replace(tmp, folder / name)
    return t


def _wait(cond, timeout: float, what: str) -> None:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"rankcast bench stream: timed out waiting for {what}")
        time.sleep(0.01)


def _last_delivery(cl, start: int) -> int:
    """The position of the last delivery made (at or after ``start``; ``start - 1`` if none)."""
    pos, last = start, start - 1
    while True:
        got, pos = cl.deliveries(pos, updates="none")
        if not got:
            return last
        last = got[-1].position


def _covered(cl, writer: _Writer, end: int, interval: float) -> None:
    """Wait until the cluster applied position ``end``, its pipelined calls were delivered
    (``interval``: the delivery interval), and the writer wrote the file holding the last
    delivery (at ``end``, or before it when the last messages changed no top-k)."""
    _wait(lambda: cl.position() >= end, 600, f"stream position {end}")
    time.sleep(4 * interval)
    last = _last_delivery(cl, writer.w.position)
    while not (writer.written and writer.written[-1][0] >= last):
        if writer.error:
            raise writer.error
        time.sleep(0.01)


def main(args: argparse.Namespace) -> dict:
    import rankcast as rc
    from rankcast.ingest import datasets
    from rankcast.ingest.session import get_spark
    from rankcast.runtime.cluster import _ensure_ray

    W, R = args.window, args.file_rows
    LR = args.latency_file_rows
    n_stream = args.files * R + args.latency_files * LR + 1     # + the first message, alone
    print(f"[bench stream] geonames: window {W}, {args.subs} subscriptions, {args.files} files then "
          f"{args.latency_files} files of {LR} messages", file=sys.stderr, flush=True)
    n_all = datasets.geonames_messages(limit=None, seed=None).num_rows
    if W + n_stream > n_all:
        raise SystemExit(f"rankcast bench stream: {W + n_stream} messages asked, GeoNames has {n_all}")
    bounds, msgs, subs, vocab = datasets.dataset("geonames", W + n_stream, args.subs, args.seed)
    res: dict = {"subscriptions": args.subs, "window": W}
    ccfg = rc.ClusterConfig(engine=rc.EngineConfig(bounds=bounds, window=W, vocabulary=vocab),
                            policy=args.policy, partitions=args.partitions, name="rankcast-bench-stream",
                            delivery_interval=0.05)
    _ensure_ray(args.address, ccfg.namespace)
    spark = get_spark()
    with tempfile.TemporaryDirectory(prefix="rankcast-stream-") as tmp:
        tmp = Path(tmp)
        landing, out = tmp / "landing", tmp / "updates"
        landing.mkdir()
        cl = rc.Cluster.start(ccfg, address=args.address, fresh=True)
        writer = None
        query = None
        try:
            t0 = time.perf_counter()
            cl.load_subscriptions(subs, progress=False)
            cl.replay(msgs.slice(0, W), progress=False)
            cl.warm()
            res["setup_seconds"] = round(time.perf_counter() - t0, 2)
            base = cl.position()
            writer = _Writer(cl, out)
            writer.w.position = base + 1
            writer.start()
            sink = _timed_sink(cl.name)
            schema = spark.createDataFrame(msgs.slice(0, 1).to_pandas()).schema
            query = (spark.readStream.schema(schema).option("maxFilesPerTrigger", args.max_files_per_trigger)
                     .parquet(str(landing)).writeStream.foreachBatch(sink)
                     .option("checkpointLocation", str(tmp / "checkpoint")).start())
            # a first file through the whole path: Spark's and the sink's first-batch costs
            _land(msgs.slice(W, 1), landing, "warm.parquet")
            _wait(lambda: cl.position() > base, 600, "the first micro-batch")
            stream = msgs.slice(W + 1)
            base = cl.position()
            # throughput: every file at once
            landed = [_land(stream.slice(i * R, R), landing, f"t-{i:05d}.parquet") for i in range(args.files)]
            end = base + args.files * R
            _covered(cl, writer, end, ccfg.delivery_interval)
            done = writer.written[-1][1]
            secs = done - landed[0]
            res["throughput"] = {"messages": args.files * R, "seconds": round(secs, 3),
                                 "messages_per_s": round(args.files * R / secs, 1),
                                 "micro_batches": len(sink.results) - 1}
            n_thr = len(sink.times)
            print(f"[bench stream] throughput {res['throughput']}", file=sys.stderr, flush=True)
            # latency: files landing one by one
            base = end
            lat_landed = []
            for i in range(args.latency_files):
                t = _land(stream.slice(args.files * R + i * LR, LR), landing, f"l-{i:05d}.parquet")
                lat_landed.append(t)
                time.sleep(max(0.0, t + args.interval - time.time()))
            end = base + args.latency_files * LR
            _covered(cl, writer, end, ccfg.delivery_interval)
            pos = base + 1 + np.arange(args.latency_files * LR)
            land_t = np.repeat(np.array(lat_landed), LR)
            lat_all = writer.covered_at(pos) - land_t
            res["uncovered_messages"] = int(np.isnan(lat_all).sum())    # after the last update: none covers them
            lat = lat_all[~np.isnan(lat_all)]
            res["latency"] = {"messages": int(len(lat)), "interval_s": args.interval,
                              "offered_messages_per_s": round(LR / args.interval, 1),
                              "p50_s": round(float(np.percentile(lat, 50)), 3),
                              "p99_s": round(float(np.percentile(lat, 99)), 3),
                              "max_s": round(float(lat.max()), 3),
                              "per_file_s": [None if np.isnan(x) else round(float(x), 3) for x in lat_all[::LR]]}
            times = np.array([t[1:] for t in sink.times[1:]])
            res["micro_batch_seconds"] = {"collect_to_driver_mean": round(float(times[:, 0].mean()), 3),
                                          "apply_in_cluster_mean": round(float(times[:, 1].mean()), 3),
                                          "throughput_phase_between_starts_mean":
                                              round(float(np.diff([t[0] for t in sink.times[1:n_thr]]).mean()), 3)
                                              if n_thr > 2 else None}
            res["delivery_files"] = writer.w.files_written
            res["delivery_rows"] = writer.w.rows_written
            res["micro_batches"] = len(sink.results)
            res["replayed_batches"] = sum(1 for r in sink.results if not r.applied)
            print(f"[bench stream] latency p50 {res['latency']['p50_s']} s, p99 {res['latency']['p99_s']} s",
                  file=sys.stderr, flush=True)
        finally:
            if query is not None:
                query.stop()
            if writer is not None:
                writer.stop_flag = True
                writer.join(30)
            cl.shutdown()
    report = {"benchmark": "stream", "config": {k: v for k, v in vars(args).items() if k != "func"},
              "results": res}
    outp = Path(args.out)
    write_json(report, outp / "stream.json")
    plot(res, outp / "stream.png")
    print(json.dumps({k: v for k, v in res.items()}, indent=2))
    print(f"[bench stream] wrote {outp / 'stream.json'} and {outp / 'stream.png'}", file=sys.stderr)
    return report


def plot(res: dict, path: Path) -> None:
    """Two panels: throughput end to end; the latency of each landed file's messages."""
    plt = pyplot("rankcast bench stream")
    fig, ax = plt.subplots(1, 2, figsize=(12, 4.5))
    th = res["throughput"]
    ax[0].bar(["file source -> Spark -> rankcast -> Parquet"], [th["messages_per_s"]], color="tab:blue")
    ax[0].set_ylabel("messages / s")
    ax[0].set_title(f"{th['messages']:,} messages in {th['seconds']:.1f} s, "
                    f"{res['subscriptions']:,} subscriptions")
    lat = res["latency"]
    ax[1].plot(range(1, len(lat["per_file_s"]) + 1), [np.nan if v is None else v for v in lat["per_file_s"]], "o-", color="tab:orange",
               label="each file's messages")
    ax[1].axhline(lat["p50_s"], color="tab:green", ls="--", label=f"p50 {lat['p50_s']} s")
    ax[1].axhline(lat["p99_s"], color="tab:red", ls="--", label=f"p99 {lat['p99_s']} s")
    ax[1].set_xlabel("file landed")
    ax[1].set_ylabel("seconds from landing to readable update file")
    ax[1].set_title(f"{lat['offered_messages_per_s']:,} messages/s offered")
    ax[1].legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path, dpi=110)
    plt.close(fig)

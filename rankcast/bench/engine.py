"""``rankcast bench engine``: IGPT-cSkyband (Skype) against every baseline on one stream.

For each dataset the workload is built and encoded once, then each method runs in its own
subprocess on exactly the same batches (so each peak RSS is that method's alone): a small
warm-up run (every kernel compiled or loaded from numba's cache, outside the timings), then
fill the window (W messages), subscribe (N subscriptions, initial results from the window; the
subscription index is built there too, not in the first batch of the stream), then stream M
messages in publish batches and measure

- AMP: arrival processing per message (dissemination + buffer insertions: the core's
  ``amp_seconds``), in microseconds; also in the calling thread's CPU time (``amp_cpu_us``,
  which other load on the same cores inflates less; every kernel is single-threaded);
- EMP: expiry processing per message (top-k re-evaluation: the core's ``emp_seconds``,
  which includes the time its re-evaluation questions spend in the message index, as the
  Engine measures and reports it; the removal of expired rows from buffers happens in the
  same kernel pass as the insertions and is counted in AMP), in microseconds;
- throughput (messages per second of wall time inside ``Engine.publish``) and per core
  (``cpu_throughput``: per second of the process's CPU time in those calls, which other
  load on the same cores does not inflate), the message
  index upkeep shared by every method (``window_index_us``), what else publish spends
  (``other_us``: validation, update lists), peak RSS, the average buffer size over the stream,
  and the candidates verified per true update (pairs whose exact score was computed by the
  disseminator / pairs that entered a buffer).

Methods (paper 8.1.1): Brute force, IPT-cSkyband, CIQ-cSkyband (dissemination variants),
IGPT-kmax (k' = 60) and IGPT-Skyband (theta = 0.95 kScore) (re-evaluation variants); and the
numpy/scipy.sparse engine (:mod:`rankcast.baselines.sparse`, the yardstick on dense streams)
and IGPT-cSkyband asked for its updates as one Arrow table (``igpt-arrow``). ``--forms arrow,diff``
also runs IGPT-cSkyband in each updates form side by side, the same calls to each engine in
turn (:func:`run_forms`): throughput and rows and bytes per message of each form.
Output: JSON on stdout and in ``--out``/engine.json, bar charts in ``--out``/engine.png.
The paper-scale run is ``rankcast bench engine --subs 1000000 --window 1000000``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from rankcast.common.updates import UPDATE_FORMS
from rankcast.errors import CommandError
from ._common import (Timer, build_workload, chunks, load_workload, peak_rss_mb, progress, pyplot,
                      reset_peak_rss, save_figure, save_workload, write_json)

__all__ = ["METHODS", "add_arguments", "main", "run_method", "summarise"]

# key -> (label, factory description); factories are built in the worker (see _factory)
METHODS = {
    "igpt": "IGPT-cSkyband",
    "brute": "Brute force",
    "ipt": "IPT-cSkyband",
    "ciq": "CIQ-cSkyband",
    "kmax": "IGPT-kmax",
    "skyband": "IGPT-Skyband",
    "sparse": "numpy/scipy.sparse",
    "igpt-arrow": "IGPT-cSkyband, Arrow updates",
}
# what a method's publish calls return (Engine.publish ``updates``); objects by default
FORMS = {"igpt-arrow": "arrow"}
DATASETS = ("geonames", "tweets", "yelp", "dense")


def _factory(key: str):
    from rankcast.baselines import CIQ, IPT, BruteForceCore
    from rankcast.baselines.sparse import SparseCore
    from rankcast.kinds.spatial.core import SkypeCore

    return {
        "igpt": lambda cfg: SkypeCore(cfg),
        "brute": BruteForceCore,
        "ipt": lambda cfg: SkypeCore(cfg, disseminator=IPT),
        "ciq": lambda cfg: SkypeCore(cfg, disseminator=CIQ),
        "kmax": lambda cfg: SkypeCore(cfg, policy="kmax"),
        "skyband": lambda cfg: SkypeCore(cfg, policy="skyband"),
        "sparse": SparseCore,
        "igpt-arrow": lambda cfg: SkypeCore(cfg),
    }[key]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default="all", choices=[*DATASETS, "all"],
                   help="workload (rankcast.ingest.datasets); 'all' runs the three")
    p.add_argument("--subs", type=int, default=10_000, help="subscriptions (paper: 1000000)")
    p.add_argument("--window", type=int, default=10_000, help="count window W (paper: 1000000)")
    p.add_argument("--messages", type=int, default=1_000,
                   help="messages streamed after the window is full (paper: 100000)")
    p.add_argument("--methods", default=",".join(METHODS),
                   help=f"comma-separated subset of {','.join(METHODS)}")
    p.add_argument("--batch", type=int, default=500, help="messages per publish call")
    p.add_argument("--forms", default="",
                   help="updates forms to time side by side, one IGPT-cSkyband engine each, every call "
                        "to each in turn (comma-separated: objects, arrow, diff, none; empty: skip)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="out/bench", help="folder for engine.json and engine.png")
    p.add_argument("--in-process", action="store_true",
                   help="run every method in this process (peak memory is then a delta)")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds allowed to one method (its result is then marked timed out)")


# ----------------------------------------------------------------------------- one method
def _warm_up(work, key: str, form: str, batch: int) -> None:
    """A small run of the method on the same workload before anything is timed: every kernel
    its calls reach (subscriptions, re-evaluations, re-keying, buffer merges, the updates'
    form) is compiled or loaded from numba's cache here, not inside the measured stream."""
    from rankcast.config import EngineConfig
    from rankcast.kinds.spatial.engine import Engine

    window = min(2_000, len(work.msgs) // 2)
    eng = Engine(EngineConfig(bounds=work.bounds, window=window, vocabulary=work.vocab), core=_factory(key))
    eng.publish(work.msgs.take(np.arange(0, window)), updates=form)
    eng.subscribe(work.subs.take(np.arange(0, min(2_000, len(work.subs)))))
    for a, b in chunks(min(len(work.msgs) - window, 3 * batch), batch):
        eng.publish(work.msgs.take(np.arange(window + a, window + b)), updates=form)


def run_method(work, key: str, window: int, messages: int, batch: int, show: bool = True) -> dict:
    """Fill, subscribe and stream one method over ``work``; returns its figures."""
    from rankcast.config import EngineConfig
    from rankcast.kinds.spatial.engine import Engine

    import gc

    form = FORMS.get(key, "objects")
    _warm_up(work, key, form, batch)
    gc.collect()
    reset_peak_rss()
    base_rss = peak_rss_mb()
    cfg = EngineConfig(bounds=work.bounds, window=window, vocabulary=work.vocab)
    eng = Engine(cfg, core=_factory(key))
    search = eng.window.search = Timer(eng.window.search)
    append = eng.window.append = Timer(eng.window.append)
    msgs, subs = work.msgs, work.subs
    if len(msgs) < window + messages:
        raise ValueError(f"workload has {len(msgs)} messages, needs {window + messages}")

    t0 = time.perf_counter()
    with progress(window, f"{METHODS[key]}: fill", show) as bar:
        for a, b in chunks(window, max(batch, 5000)):
            eng.publish(msgs.take(np.arange(a, b)), updates=form)
            bar.update(b - a)
    t_fill = time.perf_counter() - t0
    t0 = time.perf_counter()
    with progress(len(subs), f"{METHODS[key]}: subscribe", show, unit="sub") as bar:
        for a, b in chunks(len(subs), 50_000):
            eng.subscribe(subs.take(np.arange(a, b)))
            bar.update(b - a)
    if hasattr(getattr(eng.core, "index", None), "flush"):
        eng.core.index.flush()     # the subscription index is built here, not in the stream
    t_sub = time.perf_counter() - t0

    stream = [msgs.take(np.arange(window + a, window + b)) for a, b in chunks(messages, batch)]
    s0 = eng.core.stats()
    search0, append0 = search.seconds, append.seconds
    n_updates = 0
    buffers = []
    wall = 0.0                     # publish calls only: the buffer sampling stays outside
    cpu = 0.0                      # their CPU time (every thread of this process): per core
    with progress(messages, f"{METHODS[key]}: stream", show) as bar:
        for part in stream:
            t0, c0 = time.perf_counter(), time.process_time()
            out = eng.publish(part, updates=form)
            wall += time.perf_counter() - t0
            cpu += time.process_time() - c0
            # counting is the bench's work: outside the timed call
            if form == "objects":
                n_updates += len(out)
            else:                           # rows come grouped by subscription id
                col = out.column("subscription_id").to_numpy()
                n_updates += int(np.count_nonzero(np.diff(col))) + (len(col) > 0)
            buffers.append(eng.core.stats()["avg_buffer"])
            bar.update(len(part))
    s1 = eng.core.stats()

    def d(key_, default=0.0):
        return float(s1.get(key_, default)) - float(s0.get(key_, default))

    digest = results_digest(eng.core)
    verified = d("verified")
    inserted = d("inserted")
    search_s = search.seconds - search0
    amp = d("amp_seconds")
    emp = d("emp_seconds")   # includes search_s (Engine passes it to apply_reevals)
    peak = peak_rss_mb()
    return {
        "method": METHODS[key],
        "amp_us": 1e6 * amp / messages,
        "amp_cpu_us": 1e6 * d("amp_cpu_seconds") / messages if "amp_cpu_seconds" in s1 else None,
        "emp_us": 1e6 * emp / messages,
        "window_index_us": 1e6 * (append.seconds - append0) / messages,
        "window_search_us": 1e6 * search_s / messages,   # part of emp_us
        "total_us": 1e6 * wall / messages,
        "other_us": 1e6 * (wall - amp - emp - (append.seconds - append0)) / messages,
        "throughput": messages / wall,
        "cpu_throughput": messages / cpu if cpu > 0 else None,   # per core: messages per CPU second
        "peak_rss_mb": peak,
        "rss_growth_mb": peak - base_rss,
        "avg_buffer": float(np.mean(buffers)) if buffers else 0.0,
        "verified": verified,
        "inserted": inserted,
        "verified_per_update": verified / inserted if inserted else None,
        "updates": n_updates,
        "reevaluations": d("reevaluations") + d("recomputed"),
        "fill_seconds": t_fill,
        "subscribe_seconds": t_sub,
        "stream_seconds": wall,
        "digest": digest,
        "core": {k: v for k, v in s1.items() if isinstance(v, (int, float))},
    }


def results_digest(core) -> str:
    """A hash of every subscription's top-k (ids and score bits, by subscription id): equal
    digests mean equal results, so the benchmark also checks that each method was exact."""
    import hashlib

    slots = core.subs.live_slots()
    sids, off, mids, scores = core.topk_arrays(slots)
    order = np.argsort(sids, kind="stable")
    h = hashlib.sha1()
    for i in order.tolist():
        h.update(np.int64(sids[i]).tobytes())
        h.update(mids[off[i]:off[i + 1]].astype(np.int64).tobytes())
        h.update(np.asarray(scores[off[i]:off[i + 1]], np.float64).tobytes())
    return h.hexdigest()


def _worker(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    work = load_workload(Path(spec["data"]))
    res = run_method(work, spec["method"], spec["window"], spec["messages"], spec["batch"])
    Path(spec["result"]).write_text(json.dumps(res))


def _run_subprocess(data: Path, key: str, args, tmp: Path) -> dict:
    spec = {"data": str(data), "method": key, "window": args.window, "messages": args.messages,
            "batch": args.batch, "result": str(tmp / f"{key}.result.json")}
    spec_path = tmp / f"{key}.spec.json"
    spec_path.write_text(json.dumps(spec))
    cmd = [sys.executable, "-m", "rankcast.bench.engine", "--worker", str(spec_path)]
    try:
        proc = subprocess.run(cmd, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"method": METHODS[key], "error": f"timed out after {args.timeout} s"}
    if proc.returncode != 0:
        return {"method": METHODS[key], "error": f"worker exited with status {proc.returncode}"}
    return json.loads(Path(spec["result"]).read_text())


# ----------------------------------------------------------------------------- summary
def run_forms(work, forms: list[str], window: int, messages: int, batch: int) -> dict:
    """IGPT-cSkyband asked for its updates in each of ``forms``, side by side: one engine per
    form, filled and subscribed alike, then each stream call made to every engine in turn
    (the first one rotating), each call timed. Per form: messages per second of wall time
    inside publish and per CPU second, the lists changed, and the rows and bytes of a table
    form per message."""
    from rankcast.config import EngineConfig
    from rankcast.kinds.spatial.engine import Engine

    cfg = EngineConfig(bounds=work.bounds, window=window, vocabulary=work.vocab)
    msgs, subs = work.msgs, work.subs
    for form in forms:
        _warm_up(work, "igpt", form, batch)
    engines = {f: Engine(cfg) for f in forms}
    for eng in engines.values():
        for a, b in chunks(window, max(batch, 5000)):
            eng.publish(msgs.take(np.arange(a, b)), updates="none")
        for a, b in chunks(len(subs), 50_000):
            eng.subscribe(subs.take(np.arange(a, b)))
        eng.core.index.flush()
    stream = [msgs.take(np.arange(window + a, window + b)) for a, b in chunks(messages, batch)]
    fig = {f: {"wall": 0.0, "cpu": 0.0, "rows": 0, "bytes": 0, "changed": 0} for f in forms}
    for i, part in enumerate(stream):
        for j in range(len(forms)):
            form = forms[(i + j) % len(forms)]
            t0, c0 = time.perf_counter(), time.process_time()
            out = engines[form].publish(part, updates=form)
            fig[form]["wall"] += time.perf_counter() - t0
            fig[form]["cpu"] += time.process_time() - c0
            if form in ("arrow", "diff"):
                col = out.column("subscription_id").to_numpy()
                fig[form]["rows"] += out.num_rows
                fig[form]["bytes"] += out.nbytes
                fig[form]["changed"] += int(np.count_nonzero(np.diff(col))) + (len(col) > 0)
            elif form == "objects":
                fig[form]["changed"] += len(out)
    res = {}
    for form, f in fig.items():
        res[form] = {"throughput": messages / f["wall"], "cpu_throughput": messages / max(f["cpu"], 1e-9),
                     "seconds": f["wall"], "lists_changed_per_message": f["changed"] / messages,
                     "rows_per_message": f["rows"] / messages, "bytes_per_message": f["bytes"] / messages}
        print(f"[bench engine] forms: updates={form:<7} {res[form]['throughput']:8.0f} msg/s "
              f"({res[form]['cpu_throughput']:.0f} per CPU second), "
              f"{res[form]['lists_changed_per_message']:.1f} lists changed, {res[form]['rows_per_message']:.1f} rows, "
              f"{res[form]['bytes_per_message']:.0f} bytes per message", file=sys.stderr, flush=True)
    if "arrow" in res and "diff" in res:
        res["diff_over_arrow"] = {"throughput": res["diff"]["throughput"] / res["arrow"]["throughput"],
                                  "cpu_throughput": res["diff"]["cpu_throughput"] / res["arrow"]["cpu_throughput"],
                                  "target": ">= 1.5"}
    return res


def summarise(results: dict) -> dict:
    """The ratios the issue's targets are stated in, per dataset."""
    out = {}
    for ds, res in results.items():
        if "forms" in res:
            out.setdefault(ds, {})["updates_forms"] = res["forms"].get("diff_over_arrow")
        ig = res.get("igpt")
        if not ig or "error" in ig:
            continue
        r = out.setdefault(ds, {})

        def ratio(other, field):
            o = res.get(other)
            if o and "error" not in o and o.get(field) is not None and (ig.get(field) or 0) > 0:
                return o[field] / ig[field]
            return None

        ref = res.get("brute") if res.get("brute") and "error" not in res["brute"] else ig
        r["same_results_as_" + ("brute" if ref is not ig else "igpt")] = {
            METHODS[m]: v["digest"] == ref["digest"] for m, v in res.items() if m in METHODS and "error" not in v}
        r["amp_ciq_over_igpt"] = ratio("ciq", "amp_us")
        r["amp_ipt_over_igpt"] = ratio("ipt", "amp_us")
        if ig.get("amp_cpu_us"):
            r["amp_cpu_ciq_over_igpt"] = ratio("ciq", "amp_cpu_us")
            r["amp_cpu_ipt_over_igpt"] = ratio("ipt", "amp_cpu_us")
        r["emp_skyband_over_cskyband"] = ratio("skyband", "emp_us")
        r["emp_kmax_over_cskyband"] = ratio("kmax", "emp_us")
        r["time_brute_over_igpt"] = ratio("brute", "total_us")
        r["time_sparse_over_igpt"] = ratio("sparse", "total_us")
        ia = res.get("igpt-arrow")
        r["igpt_arrow_throughput"] = ia["throughput"] if ia and "error" not in ia else None
        r["igpt_arrow_cpu_throughput"] = ia.get("cpu_throughput") if ia and "error" not in ia else None
        r["igpt_throughput"] = ig["throughput"]
        r["igpt_peak_rss_mb"] = ig["peak_rss_mb"]
        r["igpt_avg_buffer"] = ig["avg_buffer"]
    return out


def plot(results: dict, path: Path, title: str) -> None:
    plt = pyplot("rankcast bench engine")

    panels = [("amp_us", "AMP (µs / message)"), ("emp_us", "EMP (µs / message)"),
              ("throughput", "throughput (messages / s)"), ("peak_rss_mb", "peak RSS (MiB)"),
              ("avg_buffer", "average buffer size"), ("verified_per_update", "verified per true update")]
    datasets = list(results)
    methods = [m for m in METHODS if any(m in results[d] and "error" not in results[d][m] for d in datasets)]
    fig, axes = plt.subplots(2, 3, figsize=(16, 8.5))
    width = 0.8 / max(1, len(methods))
    for ax, (field, label) in zip(axes.ravel(), panels):
        for j, m in enumerate(methods):
            vals = []
            for d in datasets:
                r = results[d].get(m)
                v = r.get(field) if r and "error" not in r else None
                vals.append(v if v and v > 0 else np.nan)
            xs = np.arange(len(datasets)) + (j - (len(methods) - 1) / 2) * width
            ax.bar(xs, vals, width, label=METHODS[m])
            for x, d in zip(xs, datasets):      # a log scale cannot draw 0: say it
                r = results[d].get(m)
                if r and "error" not in r and r.get(field) == 0:
                    ax.annotate("0", (x, 0), xycoords=("data", "axes fraction"), ha="center",
                                va="bottom", fontsize=7)
        ax.set_yscale("log")
        ax.set_xticks(np.arange(len(datasets)), datasets)
        ax.set_title(label)
        ax.grid(axis="y", which="both", alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------- command
def main(args: argparse.Namespace) -> dict:
    keys = [k.strip() for k in args.methods.split(",") if k.strip()]
    unknown = [k for k in keys if k not in METHODS]
    if unknown:
        raise CommandError(f"unknown method(s) {unknown}; choose from {list(METHODS)}")
    for name in ("subs", "window", "messages", "batch"):
        if getattr(args, name) < 1:
            raise CommandError(f"--{name} must be >= 1")
    datasets = DATASETS if args.dataset == "all" else (args.dataset,)
    forms = [f.strip() for f in args.forms.split(",") if f.strip()]
    bad = [f for f in forms if f not in UPDATE_FORMS]
    if bad:
        raise CommandError(f"unknown updates form(s) {bad}; choose from {list(UPDATE_FORMS)}")
    out = Path(args.out)
    results: dict = {}
    workloads = {}
    with tempfile.TemporaryDirectory(prefix="rankcast-bench-") as tmpdir:
        tmp = Path(tmpdir)
        for ds in datasets:
            t0 = time.perf_counter()
            print(f"[bench engine] {ds}: building {args.window + args.messages} messages, "
                  f"{args.subs} subscriptions", file=sys.stderr, flush=True)
            work = build_workload(ds, args.window + args.messages, args.subs, args.seed)
            workloads[ds] = dict(work.describe(), build_seconds=time.perf_counter() - t0)
            data = tmp / f"{ds}.npz"
            save_workload(work, data)
            results[ds] = {}
            if forms:
                print(f"[bench engine] {ds}: updates forms {', '.join(forms)} side by side", file=sys.stderr, flush=True)
                results[ds]["forms"] = run_forms(work, forms, args.window, args.messages, args.batch)
            for key in keys:
                print(f"[bench engine] {ds}: {METHODS[key]}", file=sys.stderr, flush=True)
                if args.in_process:
                    res = run_method(work, key, args.window, args.messages, args.batch)
                else:
                    res = _run_subprocess(data, key, args, tmp)
                results[ds][key] = res
                if "error" not in res:
                    print(f"[bench engine] {ds}: {METHODS[key]}: AMP {res['amp_us']:.1f} µs, "
                          f"EMP {res['emp_us']:.1f} µs, {res['throughput']:.0f} msg/s, "
                          f"peak {res['peak_rss_mb']:.0f} MiB, buffer {res['avg_buffer']:.1f}",
                          file=sys.stderr, flush=True)
                else:
                    print(f"[bench engine] {ds}: {METHODS[key]}: {res['error']}", file=sys.stderr)
            del work
    report = {
        "benchmark": "engine",
        "config": {"subscriptions": args.subs, "window": args.window, "messages": args.messages,
                   "batch": args.batch, "seed": args.seed, "methods": keys,
                   "isolation": "in-process" if args.in_process else "subprocess per method",
                   "cpu": _cpu_name(), "cores": os.cpu_count()},
        "workloads": workloads,
        "results": results,
        "summary": summarise(results),
    }
    write_json(report, out / "engine.json")
    plot(results, out / "engine.png",
         f"rankcast bench engine: {args.subs} subscriptions, window {args.window}, "
         f"{args.messages} messages")
    print(json.dumps(report, indent=2))
    print(f"[bench engine] wrote {out / 'engine.json'} and {out / 'engine.png'}", file=sys.stderr)
    return report


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        _worker(sys.argv[2])
    else:
        parser = argparse.ArgumentParser(prog="rankcast bench engine")
        add_arguments(parser)
        main(parser.parse_args())

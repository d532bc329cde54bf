"""Resident memory of the default cluster against one engine (``rankcast bench cluster --memory``).

Each side runs in a fresh process of its own, started the same way, which reads the same
workload (``subs`` subscriptions, a window of ``window`` messages, ``messages`` more to
stream; built once, before both), then:

- **engine**: an ``rc.Engine``; fill the window, subscribe, stream in calls of ``batch``
  messages (``publish(wait=True)``, Arrow updates);
- **cluster**: a local Ray started as rankcast starts it (``local_ray_options``) and
  ``rc.Cluster.start(ClusterConfig(engine=cfg, policy="hash", partitions=2))``: the default
  configuration otherwise, durable state in a fresh state directory; the same calls, then a
  checkpoint (a durable cluster takes one every ``checkpoint_every`` seconds of stream).

Then every process of the side is measured, the calling process included (it holds the
workload on both sides): its resident memory (RSS), its proportional share (PSS: a page
that n processes map counts 1/n in each, so the sum over processes counts every page once:
shared libraries, the pages of Ray's object store) and its unique memory (USS: the pages no
other process maps). Sums of RSS count every shared page once per process that maps it;
sums of PSS are the memory the side takes. The cluster's processes are labelled by what they
do: the client, the coordinator, each partition, each standby process, and Ray's own
(GCS, raylet, agents, workers with no role yet), by name.

Both sides also report a digest of the top-k lists of the same sample of subscriptions:
the cluster's equals the engine's.
"""
from __future__ import annotations

import gc
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

__all__ = ["run_memory_bench", "process_memory", "label_processes"]

MIB = 2 ** 20
CHECK_SUBS = 300          # subscriptions whose top-k lists both sides digest
SETTLE_SECONDS = 3.0      # after the checkpoint: its snapshot writers end, Ray's idle workers settle
# Ray's own processes by a piece of their command line, first match wins
RAY_PROCESSES = (("gcs_server", "gcs server"), ("raylet", "raylet"), ("dashboard/agent.py", "dashboard agent"),
                 ("ray::DashboardAgent", "dashboard agent"), ("runtime_env/agent", "runtime env agent"),
                 ("ray::RuntimeEnvAgent", "runtime env agent"), ("log_monitor.py", "log monitor"),
                 ("autoscaler/_private/monitor.py", "autoscaler monitor"), ("monitor.py", "autoscaler monitor"),
                 ("dashboard/dashboard.py", "API server"), ("ray_process_reaper", "reaper"),
                 ("ray::IDLE", "idle worker"), ("default_worker.py", "worker"))


def process_memory(p) -> dict[str, float] | None:
    """MiB of one process (a ``psutil.Process``): ``rss``, ``pss``, ``uss``, and ``store_pss``:
    the part of its PSS in Ray's object store (its shared-memory file; 0 where the memory map
    is not readable). None: it ended, or its memory is not readable."""
    import psutil
    try:
        m = p.memory_full_info()
    except (psutil.Error, OSError):
        return None
    return {"rss": m.rss / MIB, "pss": getattr(m, "pss", m.rss) / MIB, "uss": m.uss / MIB,
            "store_pss": _store_pss(p.pid) / MIB}


def _store_pss(pid: int) -> int:
    """Bytes of PSS in the mappings of Ray's object store (a file named ``plasma...``)."""
    total, inside = 0, False
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                if line[0] in "0123456789abcdef" and "-" in line.split(" ", 1)[0]:
                    inside = "plasma" in line
                elif inside and line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
    except OSError:
        return 0
    return total


def _ray_label(cmd: str, name: str) -> str:
    for piece, label in RAY_PROCESSES:
        if piece in cmd:
            return "ray: " + label
    return "ray: " + name


def label_processes(topology: dict[str, list[int]], driver: int) -> list[tuple[int, str, str]]:
    """(pid, label, group) of the driver and every process it started: the roles by the
    cluster's ``topology`` (role -> pids), a role's forked child (a snapshot writer) after
    its parent, a role's class with no role (a standby), Ray's own processes by name.
    Groups: ``client``, ``coordinator``, ``partitions`` (or the role's name), ``standby``,
    ``snapshot writers``, ``ray``."""
    import psutil
    role_of = {}
    for role, pids in topology.items():
        if role in ("window",):        # a duty, not a role: its processes are listed under their role
            continue
        for i, pid in enumerate(pids):
            role_of.setdefault(pid, (f"{role}-{i}" if len(pids) > 1 or role != "coordinator" else role, role))
    out = [(driver, "client", "client")]
    for p in psutil.Process(driver).children(recursive=True):
        try:
            cmd = " ".join(p.cmdline() or ())
            name, ppid = p.name(), p.ppid()
        except psutil.Error:
            continue
        if p.pid in role_of:
            label, role = role_of[p.pid]
            out.append((p.pid, label, "partitions" if role == "partition" else role))
        elif ppid in role_of:
            out.append((p.pid, f"{role_of[ppid][0]} (snapshot writer)", "snapshot writers"))
        elif (label := _ray_label(cmd, name)) != "ray: " + name or not cmd.startswith("ray::"):
            out.append((p.pid, label, "ray"))
        else:               # an actor of a class of its own that plays no role: a standby
            out.append((p.pid, f"standby ({cmd.split()[0][5:]})", "standby"))
    return out


def _measure(labelled: list[tuple[int, str, str]]) -> dict:
    """Per process and summed by label and by group (MiB)."""
    import psutil
    procs, by_label, by_group = [], {}, {}
    total = {"rss": 0.0, "pss": 0.0, "uss": 0.0, "store_pss": 0.0}
    for pid, label, group in labelled:
        try:
            m = process_memory(psutil.Process(pid))
        except psutil.Error:
            m = None
        if m is None:
            continue
        procs.append({"pid": pid, "label": label, "group": group, **{k: round(v, 1) for k, v in m.items()}})
        for d, key in ((by_label, label), (by_group, group)):
            s = d.setdefault(key, {"rss": 0.0, "pss": 0.0, "uss": 0.0, "store_pss": 0.0, "processes": 0})
            s["processes"] += 1
            for k in total:
                s[k] += m[k]
        for k in total:
            total[k] += m[k]
    rnd = lambda d: {k: (round(v, 1) if isinstance(v, float) else v) for k, v in d.items()}     # noqa: E731
    return {"processes": procs, "by_label": {k: rnd(v) for k, v in by_label.items()},
            "by_group": {k: rnd(v) for k, v in by_group.items()}, "total": rnd(total)}


def _digest(lists) -> str:
    return hashlib.sha256(repr(lists).encode()).hexdigest()[:16]


def _stream(target, work, window: int, messages: int, batch: int, sub_batch: int = 20_000) -> None:
    """The protocol of ``rankcast bench cluster`` (paper 8.1.1) on an engine or a cluster: fill
    the window, subscribe, then stream ``messages`` in calls of ``batch``, each returning its
    updates as one Arrow table."""
    msgs, subs = work.msgs, work.subs

    def part(batch_, a, z):
        return batch_.take(np.arange(a, min(z, len(batch_))))
    for a in range(0, window, 5000):
        target.publish(part(msgs, a, min(window, a + 5000)), updates="none")
    for a in range(0, len(subs), sub_batch):
        target.subscribe(part(subs, a, a + sub_batch))
    for a in range(window, window + messages, batch):
        target.publish(part(msgs, a, min(window + messages, a + batch)), updates="arrow")


def _child(spec: dict) -> dict:
    """One side, in this (fresh) process: see the module docstring."""
    import psutil

    import rankcast as rc
    from ._common import load_workload

    work = load_workload(Path(spec["workload"]))
    cfg = rc.EngineConfig(bounds=work.bounds, window=spec["window"], vocabulary=work.vocab)
    rng = np.random.default_rng(spec["seed"])
    check = np.sort(rng.choice(work.subs.ids, size=min(CHECK_SUBS, len(work.subs)), replace=False)).tolist()
    gc.collect()
    me = psutil.Process()
    out = {"workload_only": process_memory(me), "workload": work.describe()}
    t0 = time.perf_counter()
    if spec["side"] == "engine":
        eng = rc.Engine(cfg)
        _stream(eng, work, spec["window"], spec["messages"], spec["batch"])
        out["topk_digest"] = _digest({i: eng.topk(i) for i in check})
        out["seconds"] = time.perf_counter() - t0
        gc.collect()
        out["memory"] = _measure([(me.pid, "engine", "engine")])
        return out
    import ray
    from rankcast.config import local_ray_options
    ray.init(**local_ray_options(log_to_driver=False))
    state = tempfile.mkdtemp(prefix="rankcast-memory-")
    ccfg = rc.ClusterConfig(engine=cfg, policy="hash", partitions=2, state_dir=state,
                            name=f"rankcast-memory-{os.getpid()}")
    cl = rc.Cluster.start(ccfg, fresh=True)
    try:
        _stream(cl, work, spec["window"], spec["messages"], spec["batch"])
        out["topk_digest"] = _digest(cl.topk_many(check))
        cl.checkpoint()
        out["seconds"] = time.perf_counter() - t0
        stats = cl.stats()
        out["standby"] = stats["recovery"].get("standby")
        time.sleep(SETTLE_SECONDS)
        gc.collect()
        out["memory"] = _measure(label_processes(cl.topology(), me.pid))
    finally:
        cl.shutdown()
        ray.shutdown()
    return out


def _run_side(spec: dict, progress) -> dict:
    """:func:`_child` in a fresh Python process (``python -m rankcast.bench.memory``)."""
    path = Path(spec["workload"]).parent / f"{spec['side']}.json"
    progress(f"memory: {spec['side']} ({spec['subs']:,} subscriptions, window {spec['window']:,})")
    subprocess.run([sys.executable, "-m", "rankcast.bench.memory", json.dumps(spec), str(path)], check=True)
    return json.loads(path.read_text())


def run_memory_bench(dataset: str = "geonames", subs: int = 100_000, window: int = 100_000,
                     messages: int = 5_000, batch: int = 1_000, seed: int = 0, progress=print) -> dict:
    """Both sides (see the module docstring); the cluster's totals against the engine's
    process: ``ratio`` by RSS (the sum of RSS over the cluster's processes: shared pages
    counted in each), by PSS (every page once), and the cluster's PSS against the engine's RSS."""
    from ._common import build_workload, save_workload

    spec = {"dataset": dataset, "subs": subs, "window": window, "messages": messages, "batch": batch, "seed": seed}
    with tempfile.TemporaryDirectory(prefix="rankcast-memory-") as d:
        # built once, read by both sides: the same arrays in the same form
        save_workload(build_workload(dataset, window + messages, subs, seed), Path(d) / "workload")
        eng = _run_side({**spec, "side": "engine", "workload": str(Path(d) / "workload")}, progress)
        cl = _run_side({**spec, "side": "cluster", "workload": str(Path(d) / "workload")}, progress)
    e, c = eng["memory"]["total"], cl["memory"]["total"]
    out = {"spec": spec, "engine": eng, "cluster": cl,
           "ratio": {"rss": c["rss"] / e["rss"], "pss": c["pss"] / e["pss"], "uss": c["uss"] / e["uss"],
                     "pss_vs_engine_rss": c["pss"] / e["rss"]},
           "topk_equal_engine": eng["topk_digest"] == cl["topk_digest"], "loadavg": os.getloadavg()}
    groups = ", ".join(f"{g} {v['pss']:.0f}" for g, v in sorted(cl["memory"]["by_group"].items(),
                                                                  key=lambda kv: -kv[1]["pss"]))
    progress(f"memory: engine RSS {e['rss']:.0f} MiB (PSS {e['pss']:.0f}); cluster RSS sum {c['rss']:.0f} MiB, "
             f"PSS sum {c['pss']:.0f} ({out['ratio']['pss']:.2f}x the engine's PSS, RSS sums {out['ratio']['rss']:.2f}x); "
             f"PSS by group: {groups}; top-k equal: {out['topk_equal_engine']}")
    return out


def plot_memory(res: dict, path: Path) -> None:
    """Stacked bars: the engine's process against the cluster's processes by group (PSS and RSS)."""
    from ._common import hardware_label, pyplot, save_figure
    plt = pyplot("rankcast bench cluster --memory")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    groups = sorted(res["cluster"]["memory"]["by_group"].items(), key=lambda kv: -kv[1]["pss"])
    x = 0
    for measure in ("pss", "rss"):
        ax.bar(x, res["engine"]["memory"]["total"][measure], 0.6, color="tab:gray")
        bottom = 0.0
        for i, (g, v) in enumerate(groups):
            ax.bar(x + 1, v[measure], 0.6, bottom=bottom, color=f"C{i}", label=g if measure == "pss" else None)
            bottom += v[measure]
        x += 3
    ax.set_xticks([0, 1, 3, 4], ["engine\nPSS", "cluster\nPSS (sum)", "engine\nRSS", "cluster\nRSS (sum)"])
    ax.set_ylabel("MiB")
    s = res["spec"]
    ax.set_title(f"memory, {s['dataset']}: {s['subs']:,} subscriptions, window {s['window']:,}; "
                 f"cluster {res['ratio']['pss']:.2f}x the engine (PSS)\n{hardware_label()}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    spec_, path_ = json.loads(sys.argv[1]), Path(sys.argv[2])
    path_.write_text(json.dumps(_child(spec_), default=float))

"""Shared pieces of the benchmarks: workloads as encoded batches, peak memory, output."""
from __future__ import annotations

import json
import os
import platform
import resource
import sys
import time
from pathlib import Path
from typing import Iterator

import numpy as np

from rankcast.common.extras import require
from rankcast.config import limits
from rankcast.kinds.spatial.columns import Encoder, MessageBatch, SubscriptionBatch
from rankcast.kinds.spatial.text import Vocabulary

__all__ = ["Workload", "build_workload", "save_workload", "load_workload", "peak_rss_mb",
           "reset_peak_rss", "chunks", "write_json", "Timer", "progress", "pyplot",
           "hardware", "hardware_label", "save_figure"]


def pyplot(feature: str, extra: str = "bench"):
    """matplotlib's pyplot drawing to files (the Agg backend), for ``feature``'s plots; a
    missing matplotlib names the extra to install."""
    require("matplotlib", feature, extra).use("Agg")
    import matplotlib.pyplot as plt
    return plt


class Workload:
    """A dataset encoded once: bounds, vocabulary, subscription and message batches."""

    def __init__(self, name, bounds, vocab: Vocabulary, subs: SubscriptionBatch, msgs: MessageBatch,
                 texts: list[str] | None = None):
        self.name = name
        self.bounds = tuple(float(b) for b in bounds)
        self.vocab = vocab
        self.subs = subs
        self.msgs = msgs
        self.texts = texts          # message texts (for showing results), when kept

    def describe(self) -> dict:
        lens = np.diff(self.msgs.offsets)
        slens = np.diff(self.subs.offsets)
        return {"dataset": self.name, "messages": len(self.msgs), "subscriptions": len(self.subs),
                "vocabulary": len(self.vocab), "avg_msg_keywords": float(lens.mean()) if len(lens) else 0.0,
                "avg_sub_keywords": float(slens.mean()) if len(slens) else 0.0}


def _cycle(msgs: MessageBatch, n: int) -> MessageBatch:
    """``n`` messages: ``msgs`` repeated, each round with fresh ids (a finite real stream,
    GeoNames, replayed to fill a window larger than itself)."""
    if n <= len(msgs):
        return msgs.take(np.arange(n))
    span = int(msgs.ids.max()) - int(msgs.ids.min()) + 1
    parts, have, r = [], 0, 0
    while have < n:
        part = msgs.take(np.arange(min(len(msgs), n - have)))
        part.ids = part.ids + r * span
        parts.append(part)
        have += len(part)
        r += 1
    out = MessageBatch.concat(parts)
    out.t = np.arange(n, dtype=np.float64)
    return out


def build_workload(name: str, n_messages: int, n_subscriptions: int, seed: int = 0,
                   keep_texts: bool = False) -> Workload:
    """The dataset ``name`` of :mod:`rankcast.ingest.datasets`, encoded with its vocabulary.
    GeoNames holds about 235k places: a longer stream replays them with fresh ids."""
    from rankcast.ingest import datasets

    limit = n_messages
    if name == "geonames":
        limit = min(n_messages, _geonames_size())
    bounds, mtab, stab, vocab = datasets.dataset(name, limit, n_subscriptions, seed)
    enc = Encoder(bounds, vocab)
    subs, msgs = _encode_in_parts(enc, stab, mtab)
    if enc.terms.extra:
        # terms outside the fitted vocabulary: give them a place in it (df 0) so that the
        # engines, which share this vocabulary, accept the encoded batches as they are
        extra = sorted(enc.terms.extra, key=enc.terms.extra.get)
        vocab = Vocabulary(vocab.terms + extra, vocab.dfs.tolist() + [0] * len(extra), vocab.n_docs)
        subs, msgs = _encode_in_parts(Encoder(bounds, vocab), stab, mtab)
    texts = mtab.column("text").to_pylist() if keep_texts else None
    msgs = _cycle(msgs, n_messages)
    if texts is not None and len(texts) < n_messages:
        texts = [texts[i % len(texts)] for i in range(n_messages)]
    return Workload(name, bounds, vocab, subs, msgs, texts)


def _encode_in_parts(enc, stab, mtab):
    """(subscriptions, messages) of the two tables, encoded in parts of the per-call limit
    (a paper-scale stream is longer than one call may be) and committed part by part."""
    step = limits().max_items
    out = []
    for tab, encode in ((stab, enc.encode_subscriptions),
                        (mtab, lambda t: enc.encode_messages(t, time_window=False))):
        parts = []
        for a in range(0, max(len(tab), 1), step):
            batch, pend = encode(tab.slice(a, step))
            enc.commit(pend)
            parts.append(batch)
        out.append(parts[0] if len(parts) == 1 else type(parts[0]).concat(parts))
    return out


def _geonames_size() -> int:
    from rankcast.ingest.datasets import _geonames_columns
    return len(_geonames_columns()[0])


def save_workload(w: Workload, path: Path) -> None:
    arrays = {f"s_{k}": getattr(w.subs, k) for k in
              ("ids", "x", "y", "k", "alpha", "offsets", "term_ids", "weights")}
    arrays.update({f"m_{k}": getattr(w.msgs, k) for k in
                   ("ids", "x", "y", "t", "offsets", "term_ids", "weights")})
    arrays["bounds"] = np.asarray(w.bounds)
    np.savez(path, **arrays)
    Path(str(path) + ".json").write_text(json.dumps({"name": w.name, "vocab": w.vocab.to_dict()}))


def load_workload(path: Path) -> Workload:
    z = np.load(path if str(path).endswith(".npz") else str(path) + ".npz")
    meta = json.loads(Path(str(path) + ".json").read_text())
    subs = SubscriptionBatch(*(z[f"s_{k}"] for k in
                               ("ids", "x", "y", "k", "alpha", "offsets", "term_ids", "weights")))
    msgs = MessageBatch(*(z[f"m_{k}"] for k in ("ids", "x", "y", "t", "offsets", "term_ids", "weights")))
    return Workload(meta["name"], z["bounds"].tolist(), Vocabulary.from_dict(meta["vocab"]), subs, msgs)


def peak_rss_mb() -> float:
    """Peak resident set size of this process, in MiB.

    VmHWM of /proc/self/status: unlike ``getrusage().ru_maxrss``, which survives execve and
    so reports the parent's peak in a fresh worker, it belongs to this address space and can
    be reset (:func:`reset_peak_rss`)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def reset_peak_rss() -> bool:
    """Reset the peak RSS to the current RSS (Linux >= 4.0); False where unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def chunks(n: int, size: int) -> Iterator[tuple[int, int]]:
    for a in range(0, n, size):
        yield a, min(n, a + size)


def write_json(obj, path: Path) -> None:
    if isinstance(obj, dict) and "hardware" not in obj:
        obj = {**obj, "hardware": hardware()}     # every report says what it measured on
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, sort_keys=False))


class Timer:
    """Accumulates the time spent inside a wrapped callable."""

    def __init__(self, fn):
        self.fn = fn
        self.seconds = 0.0
        self.calls = 0

    def __call__(self, *a, **kw):
        t0 = time.perf_counter()
        try:
            return self.fn(*a, **kw)
        finally:
            self.seconds += time.perf_counter() - t0
            self.calls += 1


def progress(total: int, desc: str, enabled: bool = True, unit: str = "msg"):
    """A tqdm progress bar on stderr; RANKCAST_PROGRESS=0 turns them off. Off a terminal
    (logs) it redraws every 10 s instead of every 0.5 s."""
    from tqdm import tqdm

    show = enabled and os.environ.get("RANKCAST_PROGRESS", "1") != "0"
    return tqdm(total=total, desc=desc, unit=unit, disable=not show, leave=False,
                dynamic_ncols=True, mininterval=0.5 if sys.stderr.isatty() else 10.0)


def hardware() -> dict:
    """The machine a benchmark runs on, read when it runs: CPU model, logical cores,
    architecture and memory (what every bench's JSON records as ``hardware``)."""
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    if not model:
        model = platform.processor() or platform.machine() or "unknown CPU"
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        mem = 0
    return {"cpu": model, "cores": os.cpu_count() or 1, "arch": platform.machine(),
            "memory_gib": round(mem / 2**30, 1)}


def hardware_label(hw: dict | None = None) -> str:
    """The hardware in one line, for plot titles: ``2-core x86_64, AMD EPYC, 24 GB``."""
    hw = hardware() if hw is None else hw
    mem = f", {round(hw['memory_gib'])} GB" if hw.get("memory_gib") else ""
    return f"{hw['cores']}-core {hw['arch']}, {hw['cpu']}{mem}"


def save_figure(fig, path, **kw) -> None:
    """Save a bench's figure with the hardware it measured in its bottom-right corner."""
    fig.text(0.995, 0.005, hardware_label(), ha="right", va="bottom", fontsize=7, color="0.35")
    fig.savefig(path, **kw)

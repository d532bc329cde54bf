"""Prototype (issue #15): a solo partition's subscriptions in two hash halves, on two threads.

The bench's engine workload (``rankcast bench cluster --ray-clusters 1``: GeoNames, 20k
subscriptions, a window of 20k messages, calls of 1,000 messages, Arrow updates), in this
process, no Ray. ``Halves`` holds one message window and two Skype cores, one per half of the
subscriptions (id parity): a call appends its messages to the window once, then runs both
halves' step (matching, buffers, re-evaluations against the window, read-only meanwhile,
their updates) on two threads, and merges the halves' update lists into subscription id order
(the Engine's, and a partition's). Each round times the same calls on a fresh Engine and on
a fresh ``Halves``, alternating call by call, checks every call's table equal to the
engine's, and prints per-call wall-clock medians and the ratio (engine / halves: > 1 is
faster), with the process's CPU time per message.

    PYTHONPATH=$PWD python scripts/solo_halves.py [--calls 10] [--rounds 3]
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

import rankcast as rc
from rankcast.actors.bench import _take
from rankcast.bench._common import build_workload
from rankcast.engine import columns_table
from rankcast.indexing.core import SkypeCore
from rankcast.indexing.window import MessageWindow, WindowClock


class _View:
    """A half's view of the shared window: its own scratch (``_held``), the rest shared."""

    def __init__(self, window):
        self.__dict__["_w"] = window
        self.__dict__["_held"] = np.zeros((0, 0), np.int64)

    def __getattr__(self, name):
        return getattr(self._w, name)

    def __setattr__(self, name, value):
        if name != "_held":
            raise AttributeError(name)
        self.__dict__[name] = value

    def search(self, *a, **kw):
        return MessageWindow.search(self, *a, **kw)

    def query_order(self, subs):
        return MessageWindow.query_order(self, subs)

    def _flat_rows(self, subs):
        return MessageWindow._flat_rows(self, subs)


@numba.njit(cache=True, nogil=True)
def merge_updates(a_ids, a_off, a_mid, a_sc, b_ids, b_off, b_mid, b_sc):
    """Two id-ordered update lists (ids, offsets, message ids, scores) as one, id-ordered."""
    n, m = a_ids.shape[0], b_ids.shape[0]
    rows = a_off[n] - a_off[0] + b_off[m] - b_off[0]
    ids = np.empty(n + m, np.int64)
    off = np.empty(n + m + 1, np.int64)
    mid = np.empty(rows, np.int64)
    sc = np.empty(rows)
    i = j = w = r = 0
    off[0] = 0
    while i < n or j < m:
        if j >= m or (i < n and a_ids[i] < b_ids[j]):
            ids[w] = a_ids[i]
            for p in range(a_off[i], a_off[i + 1]):
                mid[r] = a_mid[p]
                sc[r] = a_sc[p]
                r += 1
            i += 1
        else:
            ids[w] = b_ids[j]
            for p in range(b_off[j], b_off[j + 1]):
                mid[r] = b_mid[p]
                sc[r] = b_sc[p]
                r += 1
            j += 1
        w += 1
        off[w] = r
    return ids, off, mid, sc


class Halves:
    """One window, two Skype cores over the subscription halves (id % 2), two threads."""

    def __init__(self, cfg, threads: int = 2):
        self.cfg = cfg
        self.clock = WindowClock(cfg)
        self.window = MessageWindow(cfg)
        self.cores = [SkypeCore(cfg), SkypeCore(cfg)]
        self.views = [_View(self.window), _View(self.window)]
        self.pool = ThreadPoolExecutor(1) if threads == 2 else None
        self.last_seq = -1

    def subscribe(self, batch):
        for h in range(2):
            part = batch.take(np.flatnonzero(batch.ids % 2 == h))
            if len(part):
                self.cores[h].add(part)
                self._reevaluate(h)
                self.cores[h].take_updates()

    def _reevaluate(self, h):
        core, win = self.cores[h], self.views[h]
        while True:
            slots, req, K = core.reeval_requests()
            if len(slots) == 0:
                return
            t0 = time.perf_counter()
            cands = win.search(req, K)
            core.apply_reevals(slots, cands, len(self.window), time.perf_counter() - t0)

    def publish(self, batch, updates="arrow"):
        c_in = time.thread_time()
        n = len(batch)
        seqs = np.arange(self.last_seq + 1, self.last_seq + 1 + n, dtype=np.int64)
        expire_upto = self.clock.advance(seqs, batch.t)
        before = len(self.window)
        self.window.append(batch, seqs, expire_upto)
        for c in self.cores:
            c.observe_window(len(self.window), n, before + n - len(self.window))
        self.last_seq = int(seqs[-1])

        self.cpu = [time.thread_time() - c_in, 0.0, 0.0, 0.0]   # before, half 0, half 1, after

        def half(h):
            c0 = time.thread_time()
            try:
                return _half(h)
            finally:
                self.cpu[1 + h] = time.thread_time() - c0

        def _half(h):
            core = self.cores[h]
            core.process(batch, seqs, expire_upto, last=True)
            self._reevaluate(h)
            if updates == "none":
                core.discard_updates()
                return None
            return core.take_updates()

        if self.pool is None:
            a, b = half(0), half(1)
        else:
            fut = self.pool.submit(half, 1)
            try:
                a = half(0)
            finally:
                b = fut.result()
        if updates == "none":
            return None
        c0 = time.thread_time()
        out = merge_updates(*a, *b)
        self.cpu[3] = time.thread_time() - c0
        return out


def _table(arrays):
    from rankcast.engine import updates_table
    return updates_table(*arrays)


def _load(target, work, window):
    for a in range(0, window, 5000):
        target.publish(_take(work.msgs, a, min(window, a + 5000)), updates="none")
    target.subscribe(_take(work.subs, 0, len(work.subs)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="geonames")
    ap.add_argument("--subs", type=int, default=20_000)
    ap.add_argument("--window", type=int, default=20_000)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--batch", type=int, default=1_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, choices=[1, 2])
    a = ap.parse_args()
    work = build_workload(a.dataset, a.window + a.calls * a.batch, a.subs, 0)
    cfg = rc.EngineConfig(bounds=work.bounds, window=a.window, vocabulary=work.vocab)
    ratios, e_all, h_all, cp_ratios = [], [], [], []
    for r in range(a.rounds):
        eng, hv = rc.Engine(cfg), Halves(cfg, a.threads)
        subs = _take(work.subs, 0, len(work.subs))
        for a0 in range(0, a.window, 5000):
            part = _take(work.msgs, a0, min(a.window, a0 + 5000))
            eng.publish(part, updates="none")
            hv.publish(part, updates="none")
        eng.subscribe(subs)
        hv.subscribe(subs)
        te, th, ce, ch = [], [], 0.0, 0.0
        cp_e, cp_h, split = [], [], []
        gc.collect()
        gc.disable()
        try:
            for c in range(a.calls):
                part = _take(work.msgs, a.window + c * a.batch, a.window + (c + 1) * a.batch)
                for who in ((0, 1) if c % 2 == 0 else (1, 0)):
                    t0, c0, tc0 = time.perf_counter(), time.process_time(), time.thread_time()
                    if who == 0:
                        tab_e = eng.publish(part, updates="arrow")
                        cp_e.append(time.thread_time() - tc0)
                    else:
                        p = hv.publish(part)
                        t1 = time.thread_time()
                        tab_h = _table(p)
                        # the critical path on two free cores: serial parts + the longer half
                        cp_h.append(hv.cpu[0] + max(hv.cpu[1], hv.cpu[2]) + hv.cpu[3] + time.thread_time() - t1)
                        split.append(hv.cpu[1] / max(hv.cpu[1] + hv.cpu[2], 1e-9))
                    dt, dc = time.perf_counter() - t0, time.process_time() - c0
                    (te if who == 0 else th).append(dt)
                    if who == 0:
                        ce += dc
                    else:
                        ch += dc
                if not tab_e.equals(tab_h):
                    raise AssertionError(f"round {r} call {c}: the halves' table differs from the engine's")
        finally:
            gc.enable()
        me, mh = statistics.median(te), statistics.median(th)
        ratios.append(me / mh)
        e_all += te
        h_all += th
        n = a.calls * a.batch
        print(f"round {r}: engine {me * 1e3:.1f} ms/call, halves {mh * 1e3:.1f} ms/call, "
              f"speed-up {me / mh:.2f}x; CPU us/msg engine {ce / n * 1e6:.1f}, halves {ch / n * 1e6:.1f}; "
              f"rows/call {tab_e.num_rows}; load {os.getloadavg()[0]:.2f}", flush=True)
        cpe, cph = statistics.median(cp_e), statistics.median(cp_h)
        cp_ratios.append(cpe / cph)
        print(f"  CPU critical path (thread CPU, ms/call): engine {cpe * 1e3:.1f}, halves {cph * 1e3:.1f} "
              f"(serial + longer half), {cpe / cph:.2f}x; half 0's share of the halves' CPU "
              f"{statistics.median(split):.2f}", flush=True)
    print(f"median speed-up {statistics.median(ratios):.2f}x (all calls: engine "
          f"{statistics.median(e_all) * 1e3:.1f} ms, halves {statistics.median(h_all) * 1e3:.1f} ms; "
          f"threads {a.threads}); median CPU critical-path speed-up {statistics.median(cp_ratios):.2f}x")


if __name__ == "__main__":
    main()

"""Prototype (issue #15): a solo partition's subscriptions in two hash halves, on two threads.

The bench's engine workload (``rankcast bench cluster --ray-clusters 1``: GeoNames, 20k
subscriptions, a window of 20k messages, calls of 1,000 messages, Arrow updates), in this
process, no Ray. ``Halves`` holds one message window and a ``HalvesCore`` (two Skype cores,
one per half of the subscriptions: id parity) and runs the solo partition's step
(``HalvesCore.step``): the window's append on the second thread, then on each thread a
half's matching, buffers, re-evaluations against the window (read-only meanwhile) and
updates, merged into subscription id order (the Engine's, and a partition's). Each round
times the same calls on a fresh Engine and on a fresh ``Halves``, alternating call by call,
checks every call's Arrow table equal to the engine's, and prints per-call wall-clock
medians and the ratio (engine / halves: > 1 is faster), the process's CPU time per message,
and the CPU critical path (the engine's call against the halves' serial parts plus the
longer half: what two free cores would give, whatever the machine's load).
``--threads 1``: both halves on the calling thread (the split's own cost); ``--merge one``:
the halves' updates merged on the calling thread alone. Per round it also prints the serial
parts of the halves' call (this thread's CPU beside its half, the merge, the Arrow table) and
per call both "free core" measures (the process's CPU per wall second; each half's thread
CPU per wall second of its part, the lower of the two: ``SideThread.threads_ran``). Run it
with the actor's allocator settings (``rankcast.actors.runtime.STEP_ROLE_ENV``) for the
actor's figures:

    MALLOC_MMAP_THRESHOLD_=268435456 MALLOC_TRIM_THRESHOLD_=1099511627776 MALLOC_ARENA_MAX=2 \
    PYTHONPATH=$PWD python scripts/solo_halves.py [--calls 10] [--rounds 3] [--threads 1] [--merge one]
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import rankcast as rc
from rankcast.actors.bench import _take
from rankcast.bench._common import build_workload
from rankcast.indexing.halves import HalvesCore
from rankcast.indexing.window import MessageWindow, WindowClock


class Halves:
    """The solo partition's step without the actor: one window, a HalvesCore over the
    subscription halves (id % 2); ``threads`` 1 runs both halves on the calling thread."""

    def __init__(self, cfg, threads: int = 2):
        self.cfg = cfg
        self.clock = WindowClock(cfg)
        self.window = MessageWindow(cfg)
        self.core = HalvesCore(cfg)
        self.pool = ThreadPoolExecutor(1) if threads == 2 else None
        self.scratch = [[], []]
        self.last_seq = -1
        self.exp_end = -1
        self.cpu = [0.0, 0.0, 0.0]     # this thread's whole call, half 0, half 1 (with the append)

    def subscribe(self, batch):
        self.core.add(batch)
        while True:
            slots, req, K = self.core.reeval_requests()
            if len(slots) == 0:
                break
            self.core.apply_reevals(slots, self.window.search(req, K), len(self.window))
        self.core.take_updates()

    def publish(self, batch, updates="arrow"):
        c_in = time.thread_time()
        n = len(batch)
        seqs = np.arange(self.last_seq + 1, self.last_seq + 1 + n, dtype=np.int64)
        expire_upto = self.clock.advance(seqs, batch.t)
        exp_end, pos_end = int(expire_upto[-1]), int(seqs[-1])
        size, expiries = pos_end - exp_end, max(0, exp_end - self.exp_end)
        self.last_seq, self.exp_end = pos_end, max(self.exp_end, exp_end)

        def observe(core):
            core.expire(exp_end)
            core.observe_window(size, n, expiries)

        def search(h, req, K):
            return self.window.search(req, K, after_seq=exp_end, upto_seq=pos_end, scratch=self.scratch[h])

        take = updates != "none"
        w0, p0 = time.perf_counter(), time.process_time()
        out, _, _ = self.core.step(batch, seqs, expire_upto, True, self.pool,
                                   lambda: self.window.append(batch, seqs, expire_upto), search, observe, take)
        if not take:
            self.core.discard_updates()
        self.cpu = [time.thread_time() - c_in, *self.core.half_cpu]
        # the two verdicts' measures (SideThread.overlap, SideThread.threads_ran)
        self.proc_ratio = (time.process_time() - p0) / max(time.perf_counter() - w0, 1e-9)
        self.own_ratio = min(c / max(w, 1e-9) for c, w in zip(self.core.half_cpu, self.core.half_wall))
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
    ap.add_argument("--merge", default="beside", choices=["beside", "one"],
                    help="one: the halves' updates merged on the calling thread alone (the code before)")
    a = ap.parse_args()
    if a.merge == "one":
        import rankcast.indexing.halves as halves_mod
        halves_mod.merge_updates_beside = lambda x, y, pool: halves_mod.merge_updates(*x, *y)
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
        cp_e, cp_h, split, merge, mwall, serial, tabs, procr, ownr = [], [], [], [], [], [], [], [], []
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
                        # the critical path on two free cores: this thread's own parts (its call
                        # less its half, the table) + the longer half
                        mine, h0, h1 = hv.cpu
                        cp_h.append(mine - h0 + max(h0, h1) + time.thread_time() - t1)
                        split.append(hv.cpu[1] / max(hv.cpu[1] + hv.cpu[2], 1e-9))
                        merge.append(hv.core.merge_cpu)
                        mwall.append(hv.core.merge_wall)
                        serial.append(mine - h0)
                        tabs.append(time.thread_time() - t1)
                        procr.append(hv.proc_ratio)
                        ownr.append(hv.own_ratio)
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
        print(f"  serial parts (ms/call, median): this thread beside its half {statistics.median(serial) * 1e3:.2f} "
              f"(of which the merge {statistics.median(merge) * 1e3:.2f}, its wall clock "
              f"{statistics.median(mwall) * 1e3:.2f}), the Arrow table "
              f"{statistics.median(tabs) * 1e3:.2f}", flush=True)
        print(f"  verdict measures per call: process CPU/wall {' '.join(f'{x:.2f}' for x in procr)}; "
              f"min thread CPU/wall {' '.join(f'{x:.2f}' for x in ownr)}", flush=True)
    print(f"median speed-up {statistics.median(ratios):.2f}x (all calls: engine "
          f"{statistics.median(e_all) * 1e3:.1f} ms, halves {statistics.median(h_all) * 1e3:.1f} ms; "
          f"threads {a.threads}); median CPU critical-path speed-up {statistics.median(cp_ratios):.2f}x")


if __name__ == "__main__":
    main()

"""A/B of ``updates_table``'s in-order path (issue #15): the key and rank columns of a call's
updates (300k rows, lists in id order, none empty: a cluster client's table) by the
``key_rank`` kernel against numpy's repeat / arange / subtraction / cast (the code before),
alternating in one process, thread CPU time, every table equal.

    PYTHONPATH=$PWD python scripts/key_rank_ab.py [--repeats 40]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from rankcast.engine import columns_table, updates_table


def numpy_table(keys, offsets, mids, scores):
    """The in-order path before ``key_rank``."""
    lens = np.diff(offsets)
    a, b = int(offsets[0]), int(offsets[-1])
    rank = (np.arange(1, b - a + 1, dtype=np.int64) - np.repeat(offsets[:-1] - a, lens)).astype(np.int32)
    return columns_table(np.repeat(keys, lens), rank, mids[a:b], scores[a:b], None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=40)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    ids = np.sort(rng.choice(40_000, 19_000, replace=False)).astype(np.int64)
    off = np.zeros(len(ids) + 1, np.int64)
    off[1:] = np.cumsum(rng.integers(1, 31, len(ids)))
    mids, scs = rng.integers(0, 10**6, off[-1]).astype(np.int64), rng.random(off[-1])
    if not updates_table(ids, off, mids, scs).equals(numpy_table(ids, off, mids, scs)):
        raise AssertionError("key_rank's table differs from numpy's")
    new, old = [], []
    for _ in range(a.repeats):
        t0 = time.thread_time()
        updates_table(ids, off, mids, scs)
        new.append(time.thread_time() - t0)
        t0 = time.thread_time()
        numpy_table(ids, off, mids, scs)
        old.append(time.thread_time() - t0)
    mn, mo = statistics.median(new), statistics.median(old)
    print(f"{off[-1]} rows: updates_table {mn * 1e3:.2f} ms CPU (key_rank), numpy's columns {mo * 1e3:.2f} ms "
          f"({mo / mn:.2f}x); load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

"""Node rows of the message index over a sliding window of GeoNames messages, and the CPU
time of its appends and expiries (in batches of 1,000):

    PYTHONPATH=$PWD python scripts/window_nodes.py <window> <messages>
"""
from __future__ import annotations

import sys
import time

import numpy as np

from rankcast.bench._common import build_workload
from rankcast.config import EngineConfig
from rankcast.indexing.window import MessageWindow

BATCH = 1000


def main(window: int, n_messages: int) -> None:
    wl = build_workload("geonames", n_messages, 10)
    win = MessageWindow(EngineConfig(bounds=wl.bounds, window=window))
    n = len(wl.msgs)
    batches = [wl.msgs.take(np.arange(s, min(s + BATCH, n))) for s in range(0, n, BATCH)]
    t = time.process_time()
    for k, b in enumerate(batches):
        s = k * BATCH
        win.append(b, np.arange(s, s + len(b), dtype=np.int64), np.array([s + len(b) - 1 - window], np.int64))
    t = time.process_time() - t
    print(f"window {window}, {n} messages: node rows used {win.n_nd}, open {win.n_nd - win.n_nd_free}, "
          f"node arrays {len(win.nd_i)}; appends and expiries {t:.2f} s CPU ({t / n * 1e6:.2f} us/msg)")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))

"""Node rows of the message index over a sliding window of GeoNames messages, and the CPU time of its
appends and expiries: `PYTHONPATH=$PWD python scripts/window_nodes.py <window> <messages>`."""
import numpy as np, time, sys
from rankcast.bench._common import build_workload
from rankcast.indexing.window import MessageWindow
from rankcast.config import EngineConfig
W = int(sys.argv[1]); N = int(sys.argv[2])
wl = build_workload("geonames", N, 10)
cfg = EngineConfig(bounds=wl.bounds, window=W)
win = MessageWindow(cfg)
msgs = wl.msgs; n = len(msgs); B = 1000
batches = [msgs.take(np.arange(s, min(s + B, n))) for s in range(0, n, B)]
t = time.process_time()
for k, b in enumerate(batches):
    s = k * B
    win.append(b, np.arange(s, s + len(b), dtype=np.int64), np.array([s + len(b) - 1 - W], np.int64))
t = time.process_time() - t
free = getattr(win, "n_nd_free", 0)
print(f"W={W} N={N}: node rows used {win.n_nd}, open {win.n_nd - free}, node arrays {len(win.nd_i)}; append+expire CPU {t:.2f} s ({t / N * 1e6:.2f} us/msg)")

"""The fixed cost of ``SkypeCore.process`` per call and per message: a core with S GeoNames
subscriptions (theta 0) steps batches of 1, 176 and 1,000 messages, either as they are (match)
or with every term id moved past the vocabulary (nomatch: the messages reach the core and match
nothing). Median thread CPU per call:

    PYTHONPATH=$PWD python scripts/core_fixed_cost.py [subscriptions]
"""
import sys, time
import numpy as np
import rankcast as rc
from rankcast.actors import bench as B
from rankcast.bench._common import build_workload
from rankcast.indexing.core import SkypeCore
from rankcast.columns import MessageBatch
S = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
work = build_workload("geonames", 25_000, S, 0)
cfg = rc.EngineConfig(bounds=work.bounds, window=20_000, vocabulary=work.vocab)
msgs = work.msgs
def take(b, a, z):
    return B._take(b, a, z)
for mode in ("match", "nomatch"):
    core = SkypeCore(cfg)
    core.add(work.subs)
    seq = 0
    pos = 0
    times = {}
    for n in (1, 176, 1000):
        ts = []
        for rep in range(30 if n < 1000 else 6):
            m = take(msgs, pos % 20000, pos % 20000 + n)
            if mode == "nomatch":
                m = MessageBatch(m.ids, m.x, m.y, m.t, m.offsets, m.term_ids + 10_000_000, m.weights)
            seqs = np.arange(seq, seq + n, dtype=np.int64)
            exp = np.full(n, seq + n - 20000, np.int64)
            c0 = time.thread_time()
            core.process(m, seqs, exp, False)
            core.expire(int(seq + n - 20000))
            core.discard_updates()
            ts.append(time.thread_time() - c0)
            # reevals ignored: subs stay at theta 0 (open) in this micro test
            seq += n; pos += n
        times[n] = np.median(ts[2:])
    print(mode, {n: f"{t*1e6:.1f} us ({t*1e6/n:.2f} us/msg)" for n, t in times.items()})

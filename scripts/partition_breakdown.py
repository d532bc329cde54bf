"""``scripts/partition_counters.py`` with thread-CPU wrappers around the partitions' methods and
the core's kernels (summed over all 64 partitions, the measured stream only):

    PYTHONPATH=$PWD python scripts/partition_breakdown.py <out.json> {keyword,prefix} 64
"""
import sys, time, collections, functools
sys.argv = [sys.argv[0]] + sys.argv[1:]
from rankcast.indexing import igpt, core as C, skyband as sk
from rankcast.actors import partition as PA
acc = collections.defaultdict(float); calls = collections.Counter(); on = [False]
def wrap(obj, name, label):
    f = getattr(obj, name)
    @functools.wraps(f)
    def w(*a, **k):
        if not on[0]:
            return f(*a, **k)
        c0 = time.thread_time()
        try:
            return f(*a, **k)
        finally:
            acc[label] += time.thread_time() - c0; calls[label] += 1
    setattr(obj, name, w)
wrap(igpt.IGPT, "flush", "igpt.flush")
wrap(igpt.IGPT, "_walk", "igpt._walk(_match)")
wrap(igpt.IGPT, "match", "igpt.match")
wrap(igpt.IGPT, "thresholds_changed", "igpt.thresholds_changed")
wrap(sk, "process_batch", "sk.process_batch")
wrap(sk, "raise_open", "sk.raise_open")
wrap(C.SkypeCore, "process", "core.process")
wrap(C.SkypeCore, "expire", "core.expire")
wrap(C.SkypeCore, "apply_reevals", "core.apply_reevals")
wrap(C.SkypeCore, "reeval_requests", "core.reeval_requests")
wrap(C.SkypeCore, "_end_epoch", "core._end_epoch")
wrap(C.SkypeCore, "_maybe_compact", "core._maybe_compact")
wrap(PA.SubscriptionPartition, "process", "part.process")
wrap(PA.SubscriptionPartition, "ship", "part.ship")
wrap(PA.SubscriptionPartition, "_realloc_requests", "part._realloc_requests")
wrap(PA.SubscriptionPartition, "_apply_ops", "part._apply_ops")
import importlib.util
spec = importlib.util.spec_from_file_location("pc", "scripts/partition_counters.py")
pc = importlib.util.module_from_spec(spec); spec.loader.exec_module(pc)
from rankcast.actors import bench as B
orig = B._drive
n = [0]
def drive(*a, **k):
    n[0] += 1
    if n[0] == 2:
        k = dict(k); prev = k.get("at_start")
        def at_start():
            on[0] = True
            if prev: prev()
        k["at_start"] = at_start
    return orig(*a, **k)
B._drive = drive
pc.B._drive = drive
pc.main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
on[0] = False
for k, v in sorted(acc.items(), key=lambda x: -x[1]):
    print(f"{k:28s} {v:8.4f} s  calls {calls[k]:6d}  {1e6*v/max(calls[k],1):9.1f} us/call")

"""``igpt._match`` of another checkout against this one's on one index (subscriptions at theta 0,
so every candidate pair is verified): asserts equal outputs, prints the median thread CPU of each,
run alternately in one process:

    PYTHONPATH=$PWD python scripts/match_verify_ab.py <other checkout> [subscriptions] [messages] [reps]
"""
import sys, time, importlib.util, numpy as np
import rankcast as rc
from rankcast.actors import bench as B
from rankcast.bench._common import build_workload
from rankcast.indexing.core import SkypeCore
from rankcast.indexing import igpt as new
src = open(sys.argv[1] + "/rankcast/indexing/igpt.py").read().replace("from ..", "from rankcast.").replace("from .scoring", "from rankcast.indexing.scoring").replace("from .subtable", "from rankcast.indexing.subtable")
import tempfile
refpath = tempfile.mkdtemp() + "/igpt_ref.py"
open(refpath, "w").write(src)
spec = importlib.util.spec_from_file_location("igpt_ref", refpath)
ref = importlib.util.module_from_spec(spec); spec.loader.exec_module(ref)
S = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
work = build_workload("geonames", 2000, S, 0)
cfg = rc.EngineConfig(bounds=work.bounds, window=20_000, vocabulary=work.vocab)
core = SkypeCore(cfg); core.add(work.subs)
ix = core.index; ix.flush(); ix._sync_toff()
NM = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
m = B._take(work.msgs, 0, NM); s = ix.subs
args = lambda: (m.offsets, m.term_ids, m.weights, m.x, m.y, ix.max_dist, s.x, s.y, s.terms, s.w, ix.row,
                ix.nbox, ix.nminls, ix.ent, ix.hot, ix.grp, ix.td, ix.td_pool, len(ix.td), ix.flat_upto, ix.records, 1 << 22)
a = ref._match(*args()); b = new._match(*args())
assert all(np.array_equal(x, y) for x, y in zip(a[:3], b[:3])), "outputs differ"
print("pairs verified", a[3][4], "matches", len(a[0]))
T = {"ref": [], "new": []}
for r in range(int(sys.argv[4]) if len(sys.argv) > 4 else 7):
    for name, f in (("ref", ref._match), ("new", new._match)):
        c0 = time.thread_time(); f(*args()); T[name].append(time.thread_time() - c0)
mr, mn = np.median(T["ref"]), np.median(T["new"])
print(f"ref {mr*1e3:.2f} ms  new {mn*1e3:.2f} ms  ratio {mn/mr:.3f}  per pair ref {mr/a[3][4]*1e9:.1f} ns new {mn/a[3][4]*1e9:.1f} ns")

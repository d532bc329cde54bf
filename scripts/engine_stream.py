"""The engine reference stream of `bench cluster --scale` (100k GeoNames subscriptions, window
20,000, 5,000 messages in calls of 1,000, as ``_engine_reference`` drives it), twice on fresh
engines: (CPU, processing CPU) of each run, for A/Bs of changes the engine shares:

    PYTHONPATH=$PWD python scripts/engine_stream.py <label>
"""
import sys
import rankcast as rc
from rankcast.actors import bench as B
from rankcast.bench._common import build_workload
W, M = 20_000, 5_000
work = build_workload("geonames", W + M, 100_000, 0)
cfg = rc.EngineConfig(bounds=work.bounds, window=W, vocabulary=work.vocab)
small = build_workload("geonames", 600, 200, 0)
wcfg = rc.EngineConfig(bounds=small.bounds, window=300, vocabulary=small.vocab)
B._drive(rc.Engine(wcfg), small, 300, 300, 100, pipelined=False)
out = []
for _ in range(2):
    r = B._drive(rc.Engine(cfg), work, W, M, 1000, pipelined=False, collect=False)
    x = B._run_figures(r)
    out.append((round(r["cpu_seconds"], 3), round(x["processing_cpu_seconds"], 3)))
print(sys.argv[1], "engine cpu, processing cpu per run:", out)

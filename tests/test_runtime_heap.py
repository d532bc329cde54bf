"""The heap of the roles whose steps allocate big arrays (rankcast.runtime.backends:
STEP_ROLE_ENV, trim_heap): a step's arrays reuse the pages of the step before (no page
faults per step), and the free pages the heap keeps go back to the system at the next trim
(resident memory stays flat)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rankcast.runtime import backends as runtime
from rankcast.runtime.backends import STEP_ROLE_ENV, writable_class

# a role process in miniature: steps that allocate and free arrays of a few MB, then live
# arrays with holes between them, then a trim through a wrapped role method
_PROCESS = r"""
import json, resource
import numpy as np
from rankcast.runtime import backends as runtime
from rankcast.runtime.backends import writable_class

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

class Role:
    def step(self, n):
        a = np.ones(n)              # a step's candidates, its answers: 24 MB, freed at the end
        return float(a[-1])

role = writable_class(Role)()
role.step(3_000_000)
runtime._heap_trim.due = 0.0                       # due: this call notes the memory held
role.step(10)
f0 = faults()
for _ in range(20):
    role.step(3_000_000)
per_step = (faults() - f0) / 20
junk = [np.ones(500_000) for _ in range(100)]      # 400 MB, every other array freed
live = junk[1::2]
del junk
before = rss_mib()
runtime._heap_trim.due = 0.0                       # due: 400 MB more, so it trims
role.step(10)
print(json.dumps({"faults_per_step": per_step, "rss_before": before, "rss_after": rss_mib(),
                  "trims": runtime._heap_trim.count, "live": len(live)}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc settings")
def test_role_heap_reuses_step_pages_and_gives_free_pages_back():
    env = {**os.environ, **STEP_ROLE_ENV, "PYTHONPATH": os.getcwd()}
    out = json.loads(subprocess.run([sys.executable, "-c", _PROCESS], env=env, check=True,
                                    capture_output=True, text=True).stdout)
    # a 24 MB array mapped anew every step faults its pages in again: thousands per step
    assert out["faults_per_step"] < 100, out
    # the 200 MB of holes go back at the trim; the 200 MB of live arrays stay
    assert out["trims"] == 1
    assert out["rss_before"] - out["rss_after"] > 150, out


class _Role:
    def work(self, fail=False):
        if fail:
            raise ValueError("boom")
        return 1

    def parts(self):
        yield 1


def test_the_stream_roles_run_with_the_step_heap_the_others_with_the_mapped_one():
    from rankcast.kinds.spatial.roles.aggregator import Aggregator
    from rankcast.kinds.spatial.roles.partition import SubscriptionPartition
    from rankcast.kinds.spatial.roles.shard import WindowShard
    assert SubscriptionPartition.RAY_ENV is STEP_ROLE_ENV and WindowShard.RAY_ENV is STEP_ROLE_ENV
    assert not hasattr(Aggregator, "RAY_ENV")       # runtime.ROLE_ENV


def test_role_classes_pickle_by_name_of_the_trim():
    from ray import cloudpickle

    from rankcast.kinds.spatial.roles.shard import WindowShard
    runtime.trim_heap()                             # this process's trim exists
    assert cloudpickle.loads(cloudpickle.dumps(writable_class(WindowShard))).__name__ == "WindowShard"


def test_role_methods_trim_once_memory_grew_checked_every_period(monkeypatch):
    calls = []
    trim = runtime._HeapTrim()
    trim.trim = calls.append
    monkeypatch.setattr(runtime, "_heap_trim", trim)
    monkeypatch.setattr(runtime, "TRIM_BYTES", 30)
    now, rss = [100.0], [1000]
    monkeypatch.setattr(runtime.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(runtime, "_private_resident", lambda: rss[0])
    trim.due = now[0]
    r = writable_class(_Role)()
    r.work()                                        # notes 1000
    assert calls == [] and trim.floor == 1000
    rss[0] = 1200
    r.work()
    assert calls == []                              # grown, but not looked at before the period
    now[0] += runtime.TRIM_CHECK_SECONDS
    rss[0] = 1040
    r.work()
    assert calls == []                              # grown less than TRIM_GROWTH (50)
    now[0] += runtime.TRIM_CHECK_SECONDS
    rss[0] = 1060
    with pytest.raises(ValueError):
        r.work(fail=True)                           # a method that raises trims too
    assert calls == [0] and trim.floor == 1060      # the floor: what is held after the trim
    now[0] += runtime.TRIM_CHECK_SECONDS
    rss[0] = 900
    assert list(r.parts()) == [1]                   # generators too; smaller: the new floor
    assert calls == [0] and trim.floor == 900
    now[0] += runtime.TRIM_CHECK_SECONDS
    monkeypatch.setattr(runtime, "TRIM_BYTES", 100)
    rss[0] = 960
    r.work()
    assert calls == [0]                             # grown by more than TRIM_GROWTH, less than TRIM_BYTES
    now[0] += runtime.TRIM_CHECK_SECONDS
    rss[0] = 1001
    r.work()
    assert calls == [0, 0]

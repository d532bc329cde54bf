"""publish(..., updates=...): the Arrow table and the "none" form carry exactly what the
Update objects carry (after every call, on the engine, the matcher and a cluster on Ray),
and a bad form is refused before anything changes."""
from __future__ import annotations

import pyarrow as pa
import pytest

import rankcast as rc
from rankcast.kinds.spatial.testing import play, random_calls
from rankcast.baselines import BruteForceEngine
from rankcast.common.updates import updates_table

BOUNDS = (0.0, 0.0, 10.0, 10.0)


def updates_from_table(t: pa.Table, key: str = "subscription_id", item: str = "message_id") -> list:
    """The Update list a table stands for (rows grouped by key in table order)."""
    d = t.to_pydict()
    out: list[tuple[int, list]] = []
    for sid, rank, mid, sc in zip(d[key], d["rank"], d[item], d["score"]):
        if not out or out[-1][0] != sid:
            out.append((sid, []))
        if rank is None:
            assert mid is None and sc is None and not out[-1][1]
            continue
        assert rank == len(out[-1][1]) + 1, "ranks run 1, 2, ... per key"
        out[-1][1].append((mid, sc))
    return out


class Form:
    """A target whose publish asks for ``form`` and hands back what it stands for."""

    def __init__(self, target, form: str):
        self.target, self.form = target, form

    def __getattr__(self, name):
        return getattr(self.target, name)

    def publish(self, msgs):
        out = self.target.publish(msgs, updates=self.form)
        if self.form == "none":
            assert out is None
            return "none"
        assert out.schema.names == ["subscription_id", "rank", "message_id", "score"]
        return [rc.Update(s, tuple(l)) for s, l in updates_from_table(out)]


@pytest.mark.parametrize("seed", range(3))
def test_engine_arrow_and_none_forms_equal_objects_after_every_call(seed):
    cfg = rc.EngineConfig(bounds=BOUNDS, window=30, batch_size=7)
    calls = random_calls(seed, 40)
    assert play({"objects": rc.Engine(cfg), "arrow": Form(rc.Engine(cfg), "arrow"),
                 "brute": Form(BruteForceEngine(cfg), "arrow")}, calls) == len(calls)
    assert play({"none": Form(rc.Engine(cfg), "none"), "brute": Form(BruteForceEngine(cfg), "none")},
                calls) == len(calls)


def test_a_top_k_that_empties_is_one_row_of_nulls():
    cfg = rc.EngineConfig(bounds=BOUNDS, window=1)
    eng = rc.Engine(cfg)
    eng.subscribe([rc.Subscription(1, 0, 0, text="a", k=2), rc.Subscription(2, 0, 0, text="b", k=2)])
    assert eng.publish([rc.Message(10, 0, 0, text="a")], updates="arrow").to_pylist() == [
        {"subscription_id": 1, "rank": 1, "message_id": 10, "score": pytest.approx(eng.topk(1)[0][1])}]
    t = eng.publish([rc.Message(11, 0, 0, text="b")], updates="arrow")   # 10 expires
    assert updates_from_table(t) == [(1, []), (2, [(11, eng.topk(2)[0][1])])]
    assert eng.publish([], updates="arrow").num_rows == 0
    assert eng.publish([], updates="none") is None
    assert updates_table([], [0], [], []).schema == t.schema


@pytest.mark.parametrize("seed", range(4))
def test_update_table_from_arrays_in_any_order_equals_the_update_list(seed):
    """updates_table from result arrays: lists in key order and none empty (a cluster
    partition's) take the path that keeps the ids and scores as columns; lists out of order,
    empty ones, and offsets that do not start at 0 take the kernel's: both read as the Update
    list the arrays stand for, ordered by key (or in the given order with by_key=False)."""
    import numpy as np
    from rankcast.common.updates import updates_from_arrays
    rng = np.random.default_rng(seed)
    for trial in range(200):
        n = int(rng.integers(0, 12))
        keys = rng.permutation(50)[:n].astype(np.int64)
        if trial % 2:
            keys = np.sort(keys)
        lens = rng.integers(0 if trial % 3 == 0 else 1, 4, n)
        base = int(rng.integers(0, 3))
        off = base + np.concatenate([[0], np.cumsum(lens)])
        mids = rng.integers(0, 10**6, int(off[-1]) + 2)
        scs = rng.random(int(off[-1]) + 2)
        want = [(u.subscription_id, list(u.topk)) for u in
                updates_from_arrays(keys, off - base, mids[base:], scs[base:])]
        assert updates_from_table(updates_table(keys, off, mids, scs)) == want
        t = updates_table(keys, off, mids, scs, by_key=False)
        assert updates_from_table(t) == [(int(k), list(zip(mids[a:b].tolist(), scs[a:b].tolist())))
                                         for k, a, b in zip(keys, off[:-1], off[1:])]


def test_a_bad_form_changes_nothing():
    eng = rc.Engine(rc.EngineConfig(bounds=BOUNDS, window=5))
    eng.subscribe([rc.Subscription(1, 0, 0, text="a", k=2)])
    with pytest.raises(rc.InvalidInput, match="field 'updates'"):
        eng.publish([rc.Message(1, 0, 0, text="a")], updates="table")
    assert eng.stats()["window"] == 0 and eng.topk(1) == []
    m = rc.Matcher(rc.MatchConfig(k=2))
    with pytest.raises(rc.InvalidInput, match="field 'updates'"):
        m.publish([rc.Event(1, {"x": 1})], updates=None)


def test_matcher_arrow_form_keeps_events_in_input_order():
    m = rc.Matcher(rc.MatchConfig(k=2))
    m.subscribe([rc.Expression(i, [rc.Predicate("x", "<=", i)], score=float(i)) for i in range(1, 5)])
    events = [rc.Event(9, {"x": 3}), rc.Event(4, {"x": 9}), rc.Event(7, {"x": 1})]
    objs = m.publish(events)
    t = m.publish(events, updates="arrow")
    assert t.schema.names == ["event_id", "rank", "expression_id", "score"]
    got = updates_from_table(t, "event_id", "expression_id")
    assert [e for e, _ in got] == [9, 4, 7]
    assert got == [(x.event_id, list(x.top)) for x in objs]
    assert m.publish(events, updates="none") is None


def test_cluster_forms_on_ray(ray_session):
    cfg = rc.EngineConfig(bounds=BOUNDS, window=30)
    ccfg = rc.ClusterConfig(engine=cfg, policy="prefix", partitions=2, window_shards=1, batch_size=6,
                            actor_cpus=0.05, name="test-update-forms")
    cl = rc.Cluster.start(ccfg)
    try:
        calls = random_calls(5, 24)
        assert play({"engine": rc.Engine(cfg), "cluster": Form(cl, "arrow")}, calls) == len(calls)
        with pytest.raises(rc.InvalidInput, match="field 'updates'"):
            cl.publish([rc.Message(10**6, 1, 1, text="t1")], updates="rows")
        assert cl.publish([rc.Message(10**6 + 1, 1, 1, text="t1")], updates="none") is None
        assert cl.publish([rc.Message(10**6 + 2, 1, 1, text="t1")], wait=False, updates="arrow") is None
        assert isinstance(cl.flush(updates="arrow"), pa.Table)
    finally:
        cl.shutdown()


def test_bench_streams_count_the_same_updates_in_both_forms():
    """What `rankcast bench cluster` measures with --updates arrow is the same stream."""
    from rankcast.bench.cluster import _drive, _inproc_cluster
    from rankcast.bench._common import build_workload

    work = build_workload("dense", 500, 300, 0)
    cfg = rc.EngineConfig(bounds=work.bounds, window=300, vocabulary=work.vocab)
    counts = {}
    for form in ("objects", "arrow"):
        counts["engine", form] = _drive(rc.Engine(cfg), work, 300, 200, 50, pipelined=False, updates=form)["updates"]
        cl = _inproc_cluster(work, cfg, "prefix", 2, 1, 1, 32, 200)
        try:
            counts["cluster", form] = _drive(cl, work, 300, 200, 50, pipelined=False, updates=form)["updates"]
        finally:
            cl.shutdown()
    assert len(set(counts.values())) == 1 and counts["engine", "arrow"] > 0, counts


def test_bench_engine_reference_is_its_fastest_run(monkeypatch):
    """`rankcast bench cluster`'s engine reference: the stream runs on fresh engines, and each
    CPU figure is the least of the runs' (one run slowed by other load does not count)."""
    from rankcast.bench import cluster as bench
    from rankcast.bench._common import build_workload

    work = build_workload("dense", 500, 300, 0)
    cfg = rc.EngineConfig(bounds=work.bounds, window=300, vocabulary=work.vocab)
    drive, slow = bench._drive, iter([5.0, 0.0, 5.0])

    def slowed(*a, **kw):          # the first and last runs as if the machine were busy
        r = dict(drive(*a, **kw))
        r["cpu_seconds"] += next(slow)
        return r
    monkeypatch.setattr(bench, "_drive", slowed)
    out, _ = bench._engine_reference(work, cfg, 300, 200, 50, 0, lambda m: None, repeats=3)
    runs = out["repeats"]
    assert len(runs) == 3 and min(runs[0]["cpu_seconds"], runs[2]["cpu_seconds"]) > 5.0
    assert out["cpu_seconds"] == min(r["cpu_seconds"] for r in runs) < 5.0
    assert out["processing_cpu_throughput"] == 200 / min(r["processing_cpu_seconds"] for r in runs)


def test_bench_cpu_accounting_charges_each_process_its_own_time():
    """`rankcast bench cluster`'s CPU accounting of the Ray runs: a role's process is
    charged its own CPU time (by its role's label), the client its own, and the total is
    their sum per message."""
    import subprocess
    import sys
    import time

    from rankcast.bench.cluster import _cpu_per_message, _ProcessCPU

    burn = ("import sys, time\nsys.stdin.readline()\nt = time.process_time()\n"
            "while time.process_time() - t < 0.3:\n    pass\nprint('done', flush=True)\nsys.stdin.readline()\n")
    child = subprocess.Popen([sys.executable, "-c", burn], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        procs = _ProcessCPU({"partition": [child.pid]})
        procs.start()
        child.stdin.write("go\n")
        child.stdin.flush()
        t = time.process_time()
        while time.process_time() - t < 0.2:
            pass
        assert child.stdout.readline().strip() == "done"
        cpu = procs.seconds()
    finally:
        child.stdin.write("end\n")
        child.stdin.flush()
        child.wait(timeout=30)
    assert 0.28 <= cpu["partition0"] < 0.5, cpu
    assert 0.18 <= cpu["client"] < 0.4, cpu
    acc = _cpu_per_message({"partition": [0.1]}, cpu, 0.2, 0.25, 1000)
    assert acc["total"] == sum(cpu.values()) * 1000 and acc["processes"]["partition0"] >= 280, acc
    assert acc["roles_busy"] == {"partition": [100.0]} and acc["engine"] == 250.0, acc


def test_bench_counts_the_cores_the_rest_of_the_machine_took(monkeypatch):
    """The Ray runs' measure of other load: the machine's busy CPU less ours, per wall
    second; a run is quiet where it stayed at most QUIET_OTHER_CORES in both of its streams,
    and the reported median is that of the quiet runs."""
    import time

    from rankcast.bench import cluster as B

    ticks = iter([100.0, 103.0])          # the machine: 3 CPU seconds over 2 wall seconds
    ours = iter([10.0, 11.0])             # of which 1 was ours
    clock = iter([0.0, 2.0])
    o = B._OtherCPU(lambda: next(ours), machine=lambda: next(ticks), clock=lambda: next(clock))
    o.start()
    assert o.cores() == 1.0
    # the machine's own counter sees this process's work
    m0, t = B._machine_busy(), time.process_time()
    while time.process_time() - t < 0.3:
        pass
    assert B._machine_busy() - m0 >= 0.25
    runs = [{"vs_engine": v, "other_cores": {"engine": e, "cluster": c}}
            for v, e, c in ((0.8, 0.0, 1.0), (1.5, 0.1, 0.1), (1.4, 0.0, 0.2), (0.7, 0.9, 0.0))]
    assert [B._quiet(r) for r in runs] == [False, True, True, False]
    assert B._median_run([r for r in runs if B._quiet(r)])["vs_engine"] == 1.4
    assert not B._quiet({"vs_engine": 1.0, "other_cores": {"engine": None, "cluster": 0.0}})
    # --ray-wait-quiet: 0 waits for nothing; a machine under the bound ends the wait at once
    assert B._wait_quiet(0, print) is None
    monkeypatch.setattr(B, "QUIET_OTHER_CORES", 100.0)
    probes, other = [], B._OtherCPU
    monkeypatch.setattr(B, "_OtherCPU", lambda *a, **kw: probes.append(1) or other(*a, **kw))
    assert B._wait_quiet(30, print, probe=0.05) <= 100.0 and len(probes) == 1      # one probe, no wait


def test_a_clients_update_tables_use_the_engines_compiled_kernel():
    """Arrays from Ray's object store are read-only, and numba compiles a kernel once per
    read-only-ness of its arguments: ``updates_table`` gives ``expand_runs`` read-only views
    either way, so the arrays of an engine (writable) and of a cluster client (read-only)
    use one compiled version, which ``Cluster.warm`` loads in the client; the same table."""
    import numpy as np

    from rankcast.common.arrays import expand_runs, key_rank
    from rankcast.runtime.cluster import _warm_client

    _warm_client()

    def same_table_read_only(kernel, arrays):
        """The table of ``arrays`` equals that of read-only copies, and ``kernel`` compiled
        nothing new for them (the warm-up loaded both forms)."""
        n = len(kernel.signatures)
        writable_table = updates_table(*arrays)
        for a in arrays:
            a.flags.writeable = False
        assert updates_table(*arrays).equals(writable_table)
        assert len(kernel.signatures) == n, kernel.signatures
        return writable_table

    writable_table = same_table_read_only(expand_runs, [
        np.array([5, 3, 4], np.int64), np.array([0, 2, 2, 3], np.int64), np.array([1, 2, 9], np.int64),
        np.array([0.9, 0.8, 0.7])])
    assert writable_table.column("subscription_id").to_pylist() == [3, 4, 5, 5]
    # lists in key order, none empty: ``key_rank``, loaded by the warm-up too
    writable_table = same_table_read_only(key_rank, [
        np.array([3, 4, 5], np.int64), np.array([1, 3, 4, 5], np.int64), np.array([1, 2, 9, 6, 0], np.int64),
        np.array([0.9, 0.8, 0.7, 0.6, 0.5])])
    assert writable_table.column("subscription_id").to_pylist() == [3, 3, 4, 5]
    assert writable_table.column("rank").to_pylist() == [1, 2, 1, 1]
    assert writable_table.column("message_id").to_pylist() == [2, 9, 6, 0]


def test_bench_scaling_speedup_is_against_the_fastest_engine_run(monkeypatch, tmp_path):
    """`rankcast bench cluster`'s projected speed-ups: the engine runs again right after each
    cluster's stream, and every speed-up (headline and per call) is taken against the fastest
    engine run of the whole bench, so that a reference measured in a slow spell does not
    inflate them."""
    from rankcast.bench import cluster as bench

    drive, n_engine = bench._drive, [0]

    def slowed(target, *a, **kw):       # every engine run before the clusters as if the machine were busy
        r = dict(drive(target, *a, **kw))
        if isinstance(target, rc.Engine):
            n_engine[0] += 1
            if n_engine[0] <= 5:           # the warm-up's two, then the 3 reference runs
                r["cpu_seconds"] += 5.0
        return r
    monkeypatch.setattr(bench, "_drive", slowed)
    res = bench.run_cluster_bench("dense", subs=300, window=300, messages=200, partitions=2, policies=("hash",),
                                  scale=(2,), scale_policies=("hash",), batch=50, cluster_batch=64, ray=False,
                                  out=str(tmp_path), progress=lambda m: None, scale_subs=0, fit_sample=300,
                                  scale_repeats=1)
    eng = res["scaling_engine"]
    first, after = eng["repeats"][:3], eng["repeats"][3:]
    assert len(after) == 1 and min(r["cpu_seconds"] for r in first) > 5.0 > after[0]["cpu_seconds"]
    pt = res["scaling"]["hash"][0]
    assert pt["engine_after"] == after[0]
    assert eng["processing_cpu_throughput"] == 200 / after[0]["processing_cpu_seconds"]
    assert pt["speedup_vs_engine"] == pt["projected_throughput"] / eng["processing_cpu_throughput"]
    assert pt["per_call"]["speedup_vs_engine"] == pt["per_call"]["projected_throughput"] / (200 / after[0]["cpu_seconds"])
    assert len(res["engine"]["repeats"]) == 3          # the policies' reference is left as it was
    assert pt["topk_equal_engine"] and pt["per_call"]["topk_equal_engine"]


def test_bench_scaling_takes_each_instances_least_cpu_over_its_runs(monkeypatch, tmp_path):
    """The scaling part runs each cluster's stream ``scale_repeats`` times, an engine run after
    each, and projects from each role instance's least CPU time over the runs when every run
    put the same work on every instance (else from the run whose slowest stage is fastest)."""
    from rankcast.bench import cluster as bench

    runs = [{"busy": {"partition": [3.0, 1.0], "shard": [2.0]}, "work": {"partition": [(10, 5), (8, 4)]},
             "stage_seconds": {"partition": 3.0, "shard": 2.0}},
            {"busy": {"partition": [1.5, 2.5], "shard": [1.0]}, "work": {"partition": [(10, 5), (8, 4)]},
             "stage_seconds": {"partition": 2.5, "shard": 1.0}}]
    assert bench._least_busy(runs) == ({"partition": [1.5, 1.0], "shard": [1.0]}, True)
    runs[1]["work"] = {"partition": [(9, 5), (9, 4)]}           # another map: no per-instance least
    assert bench._least_busy(runs) == (runs[1]["busy"], False)
    runs[0]["stage_seconds"]["partition"] = 2.0                 # the run whose slowest stage is fastest
    assert bench._least_busy(runs) == (runs[0]["busy"], False)

    calls = []
    least = bench._least_busy
    monkeypatch.setattr(bench, "_least_busy", lambda rs: calls.append(rs) or least(rs))
    res = bench.run_cluster_bench("dense", subs=300, window=300, messages=200, partitions=2, policies=("hash",),
                                  scale=(2,), scale_policies=("prefix",), batch=50, cluster_batch=64, ray=False,
                                  out=str(tmp_path), progress=lambda m: None, scale_subs=0, fit_sample=300,
                                  scale_repeats=2)
    pt = res["scaling"]["prefix"][0]
    assert len(calls) == 1 and len(calls[0]) == 2 and len(pt["runs"]) == 2
    assert len(res["scaling_engine"]["repeats"]) == 3 + 2        # an engine run after each cluster run
    assert pt["instances_same_work"]                              # the same map twice
    busy, _ = least(calls[0])
    assert pt["stage_seconds"] == {r: max(v) if v else 0.0 for r, v in busy.items()}
    assert pt["projected_throughput"] >= max(x["projected_throughput"] for x in pt["runs"]) * (1 - 1e-9)
    assert pt["topk_equal_engine"] and all(x["topk_equal_engine"] for x in pt["runs"])


@pytest.mark.parametrize("kind", ["matching", "matching-paper", "range"])
def test_bench_kind_clusters_stream_what_their_engines_do(kind):
    """`rankcast bench cluster --kinds`: the calls it times give a cluster of the kind the
    engine's results (here in process, both update forms)."""
    from rankcast.bench.kinds_cluster import _stream, _workload

    cfg, policies, subs, calls, sample, first = _workload(kind, 0, 600)
    calls = calls[:4]
    engine_cls = rc.RangeEngine if kind == "range" else rc.Matcher
    for policy in policies:         # every policy the bench runs the kind's cluster under
        for form in ("objects", "arrow"):
            got = {}
            for name in ("engine", "cluster"):
                target = engine_cls(cfg) if name == "engine" else rc.Cluster.start(rc.ClusterConfig(
                    engine=cfg, policy=policy, partitions=2, options={"runtime": "inproc"}), sample=sample)
                outs = []
                real = target.publish
                target.publish = lambda c, updates=form, wait=True: outs.append(real(c, updates=updates))
                _stream(target, subs, calls, True, form, first=first)
                got[name] = outs
                if name == "cluster":
                    target.shutdown()
            assert got["engine"] == got["cluster"] and any(len(o) for o in got["engine"]), (kind, policy)


def test_bench_times_the_object_builds_of_engine_and_cluster():
    """`rankcast bench cluster` leaves the building of Update objects out of the roles' CPU:
    its timer sees the builds of the engine and of the cluster handle, and none in the
    Arrow form."""
    from rankcast.bench.cluster import _drive, _inproc_cluster
    from rankcast.bench._common import build_workload

    work = build_workload("dense", 500, 300, 0)
    cfg = rc.EngineConfig(bounds=work.bounds, window=300, vocabulary=work.vocab)
    for form in ("objects", "arrow"):
        cl = _inproc_cluster(work, cfg, "hash", 2, 1, 1, 32, 200)
        try:
            runs = {"engine": _drive(rc.Engine(cfg), work, 300, 200, 50, pipelined=False, updates=form),
                    "cluster": _drive(cl, work, 300, 200, 50, pipelined=False, updates=form)}
        finally:
            cl.shutdown()
        for name, r in runs.items():
            assert r["updates"] > 0, (name, form)
            if form == "objects":
                assert 0 < r["build_seconds"] <= r["cpu_seconds"], (name, r)
            else:
                assert r["build_seconds"] == 0.0, (name, r)

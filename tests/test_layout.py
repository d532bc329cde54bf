"""The package's layout as a contract: no import circles, the CLI and the baselines apart from
the production paths, no numba kernel in a role or runtime file, no kind reaching into
another, and the single-process engines importable and exact with Ray, Spark and
matplotlib absent."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import rankcast

PACKAGE = Path(rankcast.__file__).resolve().parent
ROOT = PACKAGE.parent


def _modules() -> dict[str, tuple[Path, bool]]:
    """Every module of the package: dotted name -> (file, is a package's ``__init__``)."""
    out = {}
    for f in sorted(PACKAGE.rglob("*.py")):
        parts = list(f.relative_to(ROOT).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (f, is_pkg)
    return out


def _import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports anywhere in its body (function-level
    imports too: they close a circle as soon as they run). ``from X import name`` counts as
    an import of ``X.name`` when that is a module, else of ``X``; a name outside the package
    is ignored."""
    mods = _modules()

    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for mod, (path, is_pkg) in mods.items():
        here = mod if is_pkg else mod.rpartition(".")[0]
        out = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                out.update(known(a.name) for a in node.names if a.name.split(".")[0] == "rankcast")
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - node.level + 1]
                    src = ".".join(base + ([node.module] if node.module else []))
                else:
                    src = node.module or ""
                if src.split(".")[0] != "rankcast":
                    continue
                for a in node.names:
                    full = f"{src}.{a.name}"
                    out.add(full if full in mods else known(src))
        out.discard(None)
        out.discard(mod)
        graph[mod] = out
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def _cycle_path(graph: dict[str, set[str]], comp: list[str]) -> list[str]:
    """One circle through the first module of a strongly connected component, as a path
    that starts and ends there (breadth-first: a shortest one)."""
    inside, start = set(comp), comp[0]
    prev: dict[str, str | None] = {start: None}
    queue = [start]
    while queue:
        v = queue.pop(0)
        if start in graph[v]:
            path = [v]
            while prev[path[-1]] is not None:
                path.append(prev[path[-1]])
            return path[::-1] + [start]
        for w in sorted(graph[v] & inside):
            if w not in prev:
                prev[w] = v
                queue.append(w)
    return comp


def test_import_graph_has_no_circles_and_keeps_the_cli_and_baselines_apart():
    """Walk every module's imports: no circle; the CLI imported by nothing but ``python -m
    rankcast``; no production module importing a baseline; no kind importing another."""
    graph = _import_graph()
    assert len(graph) > 100 and "rankcast.kinds.spatial.engine" in graph
    circles = [_cycle_path(graph, comp) for comp in _cycles(graph)]
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)

    cli = sorted(m for m, deps in graph.items() if "rankcast.cli" in deps and m != "rankcast.__main__")
    assert not cli, f"modules importing rankcast.cli: {cli}"

    def under(m: str, *pkgs: str) -> bool:
        return any(m == p or m.startswith(p + ".") for p in pkgs)

    baseline_users = sorted((m, sorted(d for d in deps if under(d, "rankcast.baselines")))
                            for m, deps in graph.items()
                            if not under(m, "rankcast.baselines", "rankcast.bench")
                            and any(under(d, "rankcast.baselines") for d in deps))
    assert not baseline_users, f"production modules importing a baseline: {baseline_users}"

    kinds = {m.split(".")[2] for m in graph if under(m, "rankcast.kinds") and m.count(".") >= 2}
    assert {"spatial", "matching", "range"} <= kinds
    crossing = sorted((m, d) for m, deps in graph.items() if under(m, "rankcast.kinds") and m.count(".") >= 2
                      for d in deps if under(d, "rankcast.kinds") and d.count(".") >= 2
                      and d.split(".")[2] != m.split(".")[2])
    assert not crossing, f"a kind importing another kind: {crossing}"


def _is_role_or_runtime(path: Path) -> bool:
    rel = path.relative_to(PACKAGE).parts
    return path.name == "roles.py" or "roles" in rel[:-1] or rel[0] == "runtime"


def test_no_numba_kernel_in_a_role_or_runtime_file():
    """Every hot loop of a role is a call into a kernel module: no ``@numba.njit`` (or
    ``@njit``, ``@numba.jit``) in a file named ``roles.py``, under a ``roles/`` folder or
    under ``runtime/``."""
    files = [p for p, _ in _modules().values() if _is_role_or_runtime(p)]
    assert any(p.name == "roles.py" for p in files) and any("runtime" in p.parts for p in files)
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for dec in node.decorator_list:
                    target = dec.func if isinstance(dec, ast.Call) else dec
                    name = ast.unparse(target)
                    if name.split(".")[-1] in ("njit", "jit"):
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not found, "numba kernels in role or runtime files:\n" + "\n".join(found)


_BLOCKED_RUN = r'''
import importlib, pkgutil, sys

BLOCKED = ("ray", "pyspark", "raydp", "matplotlib")


class Absent:
    """Import of a blocked package fails as if it were not installed."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is absent in this test")
        return None


sys.meta_path.insert(0, Absent())
for name in list(sys.modules):
    if name.split(".")[0] in BLOCKED:
        del sys.modules[name]

import numpy as np
import rankcast as rc

names = []
for pkg in ("rankcast.common", "rankcast.kinds"):
    mod = importlib.import_module(pkg)
    for info in pkgutil.walk_packages(mod.__path__, pkg + "."):
        parts = info.name.split(".")
        if "roles" in parts:            # a cluster role (roles.py, roles/): the runtime's side
            continue
        importlib.import_module(info.name)
        names.append(info.name)
assert len(names) > 40, names

# the spatial-keyword engine, exact against brute force after every call
from rankcast.baselines.brute import BruteForceEngine
from rankcast.kinds.spatial.testing import play, random_calls
from rankcast.testing import assert_engine_exact

cfg = rc.EngineConfig(bounds=(0.0, 0.0, 10.0, 10.0), window=30)
eng = rc.Engine(cfg)
calls = random_calls(11, 12, invalid=False)
assert play({"engine": eng, "brute": BruteForceEngine(cfg)}, calls) == len(calls)
assert_engine_exact(eng)

# ranked matching, exact against the brute-force filter and sort
from rankcast.testing import assert_matches_exact, random_events, random_expressions

rng = np.random.default_rng(5)
m = rc.Matcher(rc.MatchConfig(scoring="weighted", k=3))
exprs = random_expressions(rng, 0, 40)
m.subscribe(exprs)
events = random_events(rng, 0, 6)
assert_matches_exact(m.publish(events), exprs, events, "weighted", 3)

# range top-k, exact against sorting the objects in range
from rankcast.baselines.rangetopk import brute_topk

r = rc.RangeEngine(rc.RangeConfig(k=2))
r.subscribe([rc.RangeSubscription(1, 0.0, 5.0), rc.RangeSubscription(2, 3.0, 9.0)])
objects = {}
for i, (x, y) in enumerate([(1.0, 4.0), (4.0, 2.0), (6.0, 1.0), (8.0, 3.0), (2.0, 0.5)]):
    r.publish([rc.ObjectUpdate(i, x, y)])
    objects[i] = (x, y)
    for sid, lo, hi in ((1, 0.0, 5.0), (2, 3.0, 9.0)):
        assert r.topk(sid) == brute_topk(objects, lo, hi, 2), (sid, r.topk(sid))

loaded = sorted(n for n in sys.modules if n.split(".")[0] in BLOCKED)
assert not loaded, loaded
print("ok", len(names))
'''


def test_single_process_kinds_import_and_run_without_ray_spark_or_matplotlib():
    """In a fresh interpreter where Ray, Spark (pyspark, RayDP) and matplotlib cannot be
    imported: ``rankcast`` and every module of ``rankcast.common`` and of the kinds but their
    cluster roles import, and a small workload of ``rc.Engine``, ``rc.Matcher`` and
    ``rc.RangeEngine`` is exact."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    res = subprocess.run([sys.executable, "-c", _BLOCKED_RUN], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=1800)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-6000:]
    assert res.stdout.strip().startswith("ok"), res.stdout

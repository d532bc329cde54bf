"""Session fixtures: one Ray and one Spark (RayDP) session per test run; the tiers' markers.

A test that uses the ``ray_session`` fixture is marked ``ray``, one that uses ``spark`` is
marked ``spark`` (and ``ray``: Spark runs on Ray through RayDP); tests that start Ray another
way carry the marker themselves. ``make test`` runs ``not (ray or spark or slow) or smoke``."""
from __future__ import annotations

import os
import tempfile

import pytest

os.environ.setdefault("RAY_DEDUP_LOGS", "0")
# clusters keep their durable state here (read when rankcast.config loads): a test run never
# resumes a cluster of an earlier run
os.environ.setdefault("RANKCAST_STATE_DIR", tempfile.mkdtemp(prefix="rankcast-test-state-"))


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray instance shared by the whole run (2 cores: actors use fractional CPUs)."""
    import ray

    from rankcast.config import local_ray_options
    from rankcast.ingest.session import configure_java

    configure_java()   # before Ray starts: RayDP's JVMs inherit JAVA_HOME and the flags
    if not ray.is_initialized():   # the embedded default users get (token auth, loopback), 4 CPUs
        ray.init(**local_ray_options(num_cpus=4, ignore_reinit_error=True, log_to_driver=False,
                                     namespace="rankcast-tests"))
    # Ray 2.60 turns token authentication on for a new local cluster (docs/operations.md, "Security")
    assert os.environ.get("RAY_AUTH_MODE") == "token"
    yield ray
    # left running on purpose: Spark (RayDP) shares it until the end of the run


@pytest.fixture(scope="session")
def spark(ray_session):
    """A RayDP Spark session on the shared Ray instance."""
    from rankcast.ingest.session import get_spark, stop_spark

    session = get_spark()
    yield session
    stop_spark()


_FIXTURE_MARKERS = {"ray_session": ("ray",), "spark": ("ray", "spark")}


def pytest_collection_modifyitems(config, items):
    for item in items:
        have = {m.name for m in item.iter_markers()}
        for fixture in _FIXTURE_MARKERS.keys() & set(getattr(item, "fixturenames", ())):
            for name in _FIXTURE_MARKERS[fixture]:
                if name not in have:
                    item.add_marker(name)
                    have.add(name)

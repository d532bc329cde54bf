"""Session fixtures: one Ray and one Spark (RayDP) session per test run."""
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
    # Ray 2.60 turns token authentication on for a new local cluster (README, "Security")
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

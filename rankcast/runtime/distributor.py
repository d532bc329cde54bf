"""Distributor (DSkype's distribution bolt), the routing role of every kind: routes one
step's messages.

Given a step's messages with their sequence numbers and expiry bounds, it returns one
payload per subscription partition (the rows the kind's policy routes there) and one per
shard (``id mod shards``: each message is stored once; the spatial kind's window shards,
none for a kind without them). The payloads travel through the object store straight to
the partitions and shards; the coordinator only passes their references on, in step
order. Several distributors route different steps in parallel. A policy that sends every
message to every partition needs no routing: a coordinator may then hand a step to the
partitions and shards itself, one hop less on every step's path.

A policy is any object with ``n_partitions``, ``route_messages(msgs) -> Routing``
(:class:`rankcast.common.routing.Routing`) and ``set_assignments(terms, groups)``; a batch
of messages any with ``take(rows)``, ``ids`` and ``len``.
"""
from __future__ import annotations

import time

import numpy as np

from rankcast.runtime.metrics import RoleMetrics
from rankcast.runtime.recovery import Recoverable

__all__ = ["Distributor", "route_step", "shard_payloads"]


def route_step(policy, n_shards: int, msgs, seqs: np.ndarray, exp: np.ndarray):
    """Payloads of one step: [partition 0..P-1: (msgs, seqs, exp) | None] +
    [shard 0..S-1: (msgs, seqs) | None], and the number of tuples sent to partitions."""
    P = policy.n_partitions
    routing = policy.route_messages(msgs)
    out = []
    for rows in routing.rows_of(P):
        out.append((msgs.take(rows), seqs[rows], exp[rows]) if len(rows) else None)
    return out + shard_payloads(msgs, seqs, n_shards), int(len(routing.parts))


def shard_payloads(msgs, seqs: np.ndarray, n_shards: int) -> list:
    """[shard 0..S-1: (msgs, seqs) | None]: each message to shard ``id mod S``."""
    if n_shards == 1:
        return [(msgs, seqs) if len(msgs) else None]
    if n_shards == 0:           # no window to store (the ranked-matching distributors)
        return []
    shard = np.mod(msgs.ids, n_shards)
    out = []
    for s in range(n_shards):
        rows = np.flatnonzero(shard == s)
        out.append((msgs.take(rows), seqs[rows]) if len(rows) else None)
    return out


class Distributor(Recoverable):
    """Stateless but for its policy, which the coordinator's snapshot holds: it is rebuilt
    with the restored policy and snapshots nothing of its own."""

    def __init__(self, policy, n_shards: int, index: int = 0, cluster: str = "rankcast",
                 export_metrics: bool = True, delay: float = 0.0, seed: int = 0):
        self.policy = policy
        self.n_shards = int(n_shards)
        self.index = index
        self.metrics = RoleMetrics("distributor", index, cluster, export_metrics)
        self._delay = float(delay)
        self._rng = np.random.default_rng(seed + 31 * index + 2)

    def route(self, step: int, msgs, seqs: np.ndarray, exp: np.ndarray):
        if self._delay:
            time.sleep(self._rng.random() * self._delay)
        with self.metrics.busy():
            out, tuples = route_step(self.policy, self.n_shards, msgs, seqs, exp)
            self.metrics.inc("messages", len(msgs))
            self.metrics.inc("tuples_out", tuples)
        return out if len(out) > 1 else out[0]   # one payload: Ray's num_returns=1 is the value itself

    def set_assignments(self, terms: np.ndarray, groups: np.ndarray) -> None:
        """Routing state the coordinator's policy gave out (its ``take_assignments``: the
        prefix policy's groups of new terms); steps routed after this call use it."""
        self.policy.set_assignments(terms, groups)

    def set_policy(self, policy) -> None:
        """A new routing (load monitoring); steps routed after this call use it."""
        self.policy = policy

    def stats(self) -> dict:
        out = self.metrics.snapshot()
        out.update(index=self.index)
        return out

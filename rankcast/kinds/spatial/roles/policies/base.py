"""The interface of a distribution policy (:class:`Policy`), what every policy shares, and
the one that needs no fit: hash (paper 7.3.1)."""
from __future__ import annotations

from typing import Any

import numpy as np

from rankcast.common.routing import Routing
from rankcast.runtime.kind import PlacementPolicy
from ...columns import MessageBatch, SubscriptionBatch

__all__ = ["Policy", "HashPolicy"]


class Policy(PlacementPolicy):
    """Base of the spatial-keyword distribution mechanisms. ``prefix`` policies route
    subscriptions by a loose prefix whose length the caller passes (``plen``); the others
    ignore it."""
    # a replica indexes only the terms that place it in its partition (``placement``)
    index_placed = False
    # the Quadtree leaf capacity of its partitions' indexes when there are several (None:
    # the engine's; the coordinator's ``_partition_cfg`` takes the smaller of the two)
    leaf_capacity: int | None = None

    def __init__(self, n_partitions: int, bounds, max_dist: float, window: int = 100_000,
                 options: dict | None = None):
        super().__init__(n_partitions)
        self.bounds = tuple(float(b) for b in bounds)
        self.max_dist = float(max_dist)
        self.window = int(window)
        self.options = dict(options or {})
        self.fitted = False

    # -- to override
    def fit(self, subs: SubscriptionBatch | None = None, msgs: MessageBatch | None = None) -> "Policy":
        self.fitted = True
        return self

    def route_subscriptions(self, subs: SubscriptionBatch, plen: np.ndarray | None = None) -> Routing:
        raise NotImplementedError

    def placement(self, subs: SubscriptionBatch, plen: np.ndarray | None = None) -> np.ndarray:
        """For policies that ``index_placed``: the partition each term of ``subs`` places its
        subscription in (int64 per term, -1 for a term that places it nowhere)."""
        raise NotImplementedError

    def take_assignments(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Routing state given out since the previous call that the distributors' copies of
        this policy must have before they route the next step (None: nothing new)."""
        return None

    def set_assignments(self, terms, groups) -> None:
        """Install what another copy's :meth:`take_assignments` gave out."""

    # -- shared
    def initial_prefix(self, subs: SubscriptionBatch) -> np.ndarray:
        """Prefix length a new subscription is routed with before its threshold is known:
        one term for prefix policies (reallocation grows it), every term otherwise."""
        lens = np.diff(subs.offsets)
        return np.minimum(lens, 1) if self.prefix else lens

    def describe(self) -> dict[str, Any]:
        return {"policy": self.name, "partitions": self.n_partitions}


def _empty_sample_subs() -> SubscriptionBatch:
    return SubscriptionBatch.empty()


class HashPolicy(Policy):
    """Paper 7.3.1: h(s) = s.id mod N_sb (Eq. 14); every message to every partition."""

    name = "hash"

    def route_subscriptions(self, subs, plen=None):
        return Routing.from_single(np.mod(subs.ids, self.n_partitions))

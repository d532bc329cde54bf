"""Distribution mechanisms of DSkype (paper 7.3) and the two hybrids of 8.2.

A policy decides which subscription partitions hold a subscription and which receive a
message. It is fitted once from a sample of subscriptions and messages, then routes whole
columnar batches: ``route_subscriptions`` and ``route_messages`` return a :class:`Routing`
(CSR: the partitions of row ``i`` are ``parts[offsets[i]:offsets[i+1]]``, sorted, unique).

Exactness rests on one property per policy:

* hash (7.3.1), location (7.3.2): a subscription lives in exactly one partition and every
  message goes to every partition.
* keyword (7.3.3): term ``t`` belongs to exactly one partition (``term_parts``); a
  subscription lives in the partitions of all its terms and a message goes to the
  partitions of all its terms, so a message sharing a term with ``s`` meets a replica of ``s``.
* prefix (7.3.4): as keyword, but a subscription lives only in the partitions of its loose
  prefix ``pref(s) = s.psi[:p]`` (Definition 12, terms in term-id order = increasing
  frequency). A message sharing only terms beyond the prefix has
  ``Score <= alpha + (1 - alpha) * wtsum(s.psi[p:])`` (Eq. 18 with SSimUB = 1), so it cannot
  reach the top-k while that bound is below kScore. Each replica checks this against its own
  kScore (never above the global one) whenever its top-k changes (:func:`needed_prefix`);
  when it fails, the prefix grows (lazy reallocation, never shrinks) and that replica is
  re-evaluated, since messages it did not see may now matter (see
  ``rankcast.runtime.coordinator``).
* spatial-first / keyword-first (8.2): location x prefix, partition ``c * l2 + g`` / ``g * l2 + c``.

Terms that the fitting sample never saw (ids at or beyond ``v_fit``) are spread by
``id mod partitions``: any fixed term -> partition map keeps the keyword argument valid.

One module per family: :mod:`.base` (the interface, hash), :mod:`.location` (KD partition),
:mod:`.ranges` (keyword: term ranges), :mod:`.groups` (prefix: term groups), :mod:`.hybrid`
(8.2) and :mod:`.cost` (the cost model and the sample estimates it reads); the kernels they
call live in :mod:`rankcast.kinds.spatial.routing`, :mod:`~rankcast.kinds.spatial.placement`
and :mod:`~rankcast.kinds.spatial.prefix`.
"""
from __future__ import annotations

from rankcast.common.routing import Routing
from rankcast.errors import InvalidInput
from ...prefix import needed_prefix, prefix_lengths
from .base import HashPolicy, Policy
from .cost import GroupCost, PlacedCost, candidate_pairs, estimate_kscores, keyword_variance
from .groups import MSG_COST, UNSEEN_COST, PrefixPolicy, TermGroups
from .hybrid import KeywordFirstPolicy, SpatialFirstPolicy
from .location import KDTree, LocationPolicy
from .ranges import KeywordMap, KeywordPolicy

__all__ = ["Routing", "Policy", "HashPolicy", "LocationPolicy", "KeywordPolicy", "PrefixPolicy",
           "SpatialFirstPolicy", "KeywordFirstPolicy", "KDTree", "KeywordMap", "PlacedCost", "GroupCost",
           "TermGroups", "MSG_COST", "UNSEEN_COST", "make_policy", "prefix_lengths", "needed_prefix",
           "estimate_kscores", "candidate_pairs", "keyword_variance"]


_POLICIES = {p.name: p for p in (HashPolicy, LocationPolicy, KeywordPolicy, PrefixPolicy,
                                 SpatialFirstPolicy, KeywordFirstPolicy)}


def make_policy(name: str, n_partitions: int, bounds, max_dist: float, window: int = 100_000,
                options: dict | None = None) -> Policy:
    """The policy called ``name`` (one of ``rankcast.config.POLICIES``), unfitted."""
    try:
        cls = _POLICIES[name]
    except KeyError:
        raise InvalidInput(f"ClusterConfig: field 'policy': unknown policy {name!r}") from None
    return cls(n_partitions, bounds, max_dist, window, options)

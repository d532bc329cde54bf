"""The cost model of the keyword and prefix partitions (:class:`PlacedCost`,
:class:`GroupCost`), the sample estimates it reads (kScores, candidate pairs per term) and the
variance of the partitions' costs (paper Eq. 17)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rankcast.common.routing import csr_by
from ...columns import MessageBatch, SubscriptionBatch
from ...placement import first_term_pairs, kth_scores

__all__ = ["PlacedCost", "GroupCost", "candidate_pairs", "estimate_kscores", "keyword_variance"]


@dataclass
class PlacedCost:
    """Cost of a keyword partition whose replicas index only their placed terms, in CPU
    microseconds per stream message: ``A_PAIR`` per candidate verified and buffered (the
    sampled pairs whose first shared term lies in the range and whose score reaches a
    replica buffer's depth: :func:`candidate_pairs`), ``D_POSTING`` per posting a message
    meets (a term's subscriptions times its messages), ``B_REPLICA`` per replica held
    (buffers, expiries, deliveries) and ``C_MESSAGE`` per message received. The factors are
    a least-squares fit of the partitions' CPU time in two runs with different ranges
    (GeoNames, 100k subscriptions, 64 partitions, `rankcast bench cluster`): the model
    follows the measured 0.015-0.12 s within 0.015 s, where N x p (Eq. 16) ranks the
    partitions of the most frequent terms, whose low weights prune most pairs, as the
    costliest. ``scale``: subscriptions per sampled one."""

    pairs: np.ndarray        # float64[v_fit]: candidate pairs of each term, in the sample
    walks: np.ndarray        # float64[v_fit]: subscriptions x messages of each term, in the sample
    n_msgs: int              # messages of the sample
    scale: float = 1.0

    A_PAIR = 0.3
    D_POSTING = 0.0026
    B_REPLICA = 0.00076
    C_MESSAGE = 3.8

    def of(self, pairs, walks, n_subs, p):
        """Cost of ``pairs`` sampled candidate pairs, ``walks`` sampled postings met,
        ``n_subs`` sampled replicas and a share ``p`` of the messages."""
        per_msg = 1.0 / max(self.n_msgs, 1)
        return (self.scale * (per_msg * (self.A_PAIR * pairs + self.D_POSTING * walks) + self.B_REPLICA * n_subs)
                + self.C_MESSAGE * p)


class GroupCost(PlacedCost):
    """:class:`PlacedCost` for the prefix policy's term groups, refitted on its own partitions
    (GeoNames, 100k subscriptions, 64 partitions, in process, two runs with different groups:
    a least-squares fit of each partition's CPU time over the stream against its messages
    received, replicas held and its terms' sampled candidates and postings): a prefix
    replica is routed by part of its terms and keeps a deeper buffer (no arrival share), and
    a partition's messages carry every term of the message, so a message received and a
    posting met cost more than in a keyword partition. Unlike the keyword fit, a group also
    pays ``B_REPLICA`` per replica its terms place (:meth:`~.groups.TermGroups.build`). Fitted
    for the prefix partitions' finer leaves (``Policy.leaf_capacity``), on four maps' warm
    runs: the heavy terms' copies no longer verify most of their pairs, so a candidate, a
    posting and a message cost less against a replica; the fit follows the measured
    partitions with correlation 0.85 where the factors fitted at the engine's leaf capacity
    (0.16, 0.0066, 0.00113, 5.8) gave 0.06 and priced a heavy copy at twice its time."""

    A_PAIR = 0.066
    D_POSTING = 0.0033
    B_REPLICA = 0.00127
    C_MESSAGE = 1.0


def _postings(msgs: MessageBatch, v: int) -> tuple[np.ndarray, np.ndarray]:
    """Inverted lists of a message batch by term: (offsets int64[v + 1], message rows)."""
    rows = np.repeat(np.arange(len(msgs), dtype=np.int64), np.diff(msgs.offsets))
    return csr_by(msgs.term_ids, rows, v)


def candidate_pairs(subs: SubscriptionBatch, msgs: MessageBatch, max_dist: float, window: int,
                    depth: float, n_terms: int) -> np.ndarray:
    """Per term, the candidates a replica indexing only its placed terms verifies and buffers,
    estimated on the samples: the pairs whose first shared term it is (where the index's
    bound covers the whole score) scoring at least the ``depth * k``-th best score of the
    subscription over the sample scaled to the window (a replica's buffer is about that
    deep). float64[n_terms], in sample pairs."""
    out = np.zeros(n_terms)
    if len(subs) == 0 or len(msgs) == 0:
        return out
    rank = np.maximum(1, np.ceil(depth * subs.k * len(msgs) / max(window, 1))).astype(np.int64)
    v = max(n_terms, int(max(subs.term_ids.max(initial=-1), msgs.term_ids.max(initial=-1))) + 1)
    post_off, post_msg = _postings(msgs, v)
    tau = kth_scores(subs.x, subs.y, subs.alpha, subs.offsets, subs.term_ids, subs.weights, rank,
                     msgs.x, msgs.y, msgs.offsets, msgs.term_ids, msgs.weights,
                     post_off, post_msg, float(max_dist))
    pairs = first_term_pairs(subs.x, subs.y, subs.alpha, subs.offsets, subs.term_ids, subs.weights, tau,
                             msgs.x, msgs.y, msgs.offsets, msgs.term_ids, msgs.weights,
                             post_off, post_msg, float(max_dist), v)
    return pairs[:n_terms]


def estimate_kscores(subs: SubscriptionBatch, msgs: MessageBatch, max_dist: float,
                     window: int) -> np.ndarray:
    """kScore of each sampled subscription estimated over a message sample: the
    ``ceil(k * |sample| / window)``-th best score (-inf when too few messages match).
    Only steers the balance of the prefix partition; routing stays exact regardless."""
    if len(subs) == 0:
        return np.zeros(0)
    if len(msgs) == 0:
        return np.full(len(subs), -np.inf)
    rank = np.maximum(1, np.ceil(subs.k * len(msgs) / max(window, 1))).astype(np.int64)
    v = int(max(subs.term_ids.max(initial=-1), msgs.term_ids.max(initial=-1))) + 1
    post_off, post_msg = _postings(msgs, v)
    return kth_scores(subs.x, subs.y, subs.alpha, subs.offsets, subs.term_ids, subs.weights, rank,
                      msgs.x, msgs.y, msgs.offsets, msgs.term_ids, msgs.weights,
                      post_off, post_msg, float(max_dist))


def keyword_variance(costs: np.ndarray) -> float:
    """Var of the partition costs (paper Eq. 17)."""
    return float(np.mean((costs - costs.mean()) ** 2)) if len(costs) else 0.0

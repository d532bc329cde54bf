"""The prefix policy (paper 7.3.4): subscriptions routed by their loose prefix, terms placed in
groups of partitions (:class:`TermGroups`) so that one subscription's prefix terms mostly
share a partition."""
from __future__ import annotations

from typing import Any

import numpy as np

from rankcast.common.routing import csr_by, dedupe_rows
from ...columns import MessageBatch, SubscriptionBatch
from ...placement import first_sight, place_light, shared_postings
from ...prefix import prefix_lengths, take_prefix
from ...routing import group_route
from .base import _empty_sample_subs
from .cost import GroupCost, PlacedCost, estimate_kscores
from .ranges import KeywordPolicy

__all__ = ["TermGroups", "PrefixPolicy", "MSG_COST", "SLACK", "PLACE_SLACK", "UNSEEN_COST"]


MSG_COST = 8.0      # cost of one message reaching a partition, in posting entries of the sample


SLACK = 0.1         # a group may exceed the even share of the cost by this fraction


PLACE_SLACK = (-0.35, -0.2, -0.1, 0.0, 0.1)


UNSEEN_COST = 0.3   # a replica (or a new term) the fitting sample did not see, per a sampled one's cost


def _heavy_copies(fixed: np.ndarray, shared: np.ndarray, light: float, n: int,
                  min_light: int) -> tuple[np.ndarray, int]:
    """Copies of each heavy term and the partitions left to the light terms, for ``n``
    partitions: a copy of heavy term ``h`` costs ``fixed[h]`` (its messages reach every
    copy) plus ``shared[h] / copies`` (its postings, candidates and replicas, split), a light
    partition ``light / partitions`` (at least ``min_light`` of them). Each partition beyond
    one per heavy term and ``min_light`` goes, one at a time, to the costliest per partition
    (for these costs, which only fall as partitions are added, the least largest cost)."""
    fixed, shared = np.asarray(fixed, np.float64), np.asarray(shared, np.float64)
    copies = np.ones(len(fixed), np.int64)
    n_light = min_light
    for _ in range(n - len(fixed) - min_light):
        per = fixed + shared / copies
        h = int(np.argmax(per)) if len(per) else -1
        if h < 0 or light / n_light >= per[h]:
            n_light += 1
        else:
            copies[h] += 1
    return copies, n_light


class TermGroups:
    """Term -> group of partitions for the prefix policy: groups of terms that co-occur in
    subscriptions' loose prefixes, so that the prefix terms of one subscription mostly lie in
    one partition (replication counts partitions, not terms), balanced by a cost measured
    on the fitting sample. Group ``g`` owns the ``copies[g]`` partitions from ``first[g]``
    (more than one for a term whose cost no one partition can carry).

    Exactness (the keyword argument, Lemma 7): a message goes to every partition of the
    group of each of its terms, and a subscription to one partition (``id mod copies``) of
    the group of each of its routing terms, so a message sharing a prefix term with ``s``
    meets a replica of ``s``. A term gets its group once and keeps it (:meth:`assign` gives
    the new terms of subscriptions a group before they are routed; a term no subscription
    has is routed nowhere, as no prefix can hold it); only a refit (load monitoring) moves
    terms, and the coordinator then re-places the subscriptions concerned."""

    # a map pickled before replicas were counted (a snapshot's policy) counts none
    replica = 0.0
    fitted = 0
    fitted_mask = np.zeros(0, np.bool_)

    def __init__(self, group: np.ndarray, first: np.ndarray, copies: np.ndarray, load: np.ndarray,
                 cap: float, unit: float, replica: float = 0.0):
        self.group = np.asarray(group, np.int64)
        self.fitted = len(self.group)           # terms below: grouped by the fit (their replicas in load)
        self.fitted_mask = self.group >= 0
        self.replica = float(replica)           # load of a replica routed by a term the fit did not see
        self.first = np.asarray(first, np.int64)
        self.copies = np.asarray(copies, np.int64)
        self.load = np.asarray(load, np.float64)
        self.cap = float(cap)
        self.unit = float(unit)
        self._new: list[np.ndarray] = []    # terms given a group since take_new

    @property
    def n(self) -> int:
        return int(self.copies.sum())

    def _grow(self, v: int) -> None:
        if v > len(self.group):
            self.group = np.concatenate([self.group, np.full(max(v, 2 * len(self.group)) - len(self.group),
                                                             -1, np.int64)])

    def assign(self, offsets, term_ids) -> None:
        """Give every term of these rows (subscriptions) a group (:func:`first_sight`)."""
        term_ids = np.asarray(term_ids, np.int64)
        if len(term_ids) == 0:
            return
        self._grow(int(term_ids.max()) + 1)
        new = first_sight(np.asarray(offsets, np.int64), term_ids, self.group, self.load,
                          self.cap * (1.0 + SLACK), self.unit)
        if len(new):
            self._new.append(new)

    def take_new(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(terms, groups) given since the previous call (for the distributors' copies)."""
        if not self._new:
            return None
        terms = np.concatenate(self._new)
        self._new = []
        return terms, self.group[terms]

    def set_groups(self, terms: np.ndarray, groups: np.ndarray) -> None:
        """Install groups given by another copy of this map (a distributor's)."""
        terms = np.asarray(terms, np.int64)
        if len(terms):
            self._grow(int(terms.max()) + 1)
            self.group[terms] = groups

    def route(self, offsets, term_ids, owners=None, base: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """(offsets, parts) of every row, sorted and unique: ``owners`` (the subscriptions' ids)
        gives a subscription's placement, None a message's partitions."""
        offsets = np.asarray(offsets, np.int64)
        own = (np.repeat(np.asarray(owners, np.int64), np.diff(offsets)) if owners is not None
               else np.zeros(0, np.int64))
        term_ids = np.asarray(term_ids, np.int64)
        if owners is not None and self.replica > 0 and len(term_ids):
            self._count_replicas(term_ids)
        off, parts = group_route(offsets, term_ids, own, self.group, self.first,
                                 self.copies, 0, base)
        return dedupe_rows(off, parts)

    def _count_replicas(self, term_ids: np.ndarray) -> None:
        """Load of the replicas that terms the fit did not see place (routing terms of
        subscriptions): ``replica`` per copy's share, so that :meth:`assign` gives new terms
        to the groups holding fewest (the fit's load counts its own terms' replicas)."""
        g = self.group[term_ids[term_ids < len(self.group)]]
        t = term_ids[term_ids < len(self.group)]
        new = g >= 0
        new[t < self.fitted] &= ~self.fitted_mask[t[t < self.fitted]]
        g = g[new]
        if len(g):
            self.load += self.replica * np.bincount(g, minlength=len(self.load)) / self.copies

    def parts(self, term_ids: np.ndarray, owners: np.ndarray) -> np.ndarray:
        """The partition a subscription ``owners[i]`` is placed in for ``term_ids[i]`` (-1
        for a term with no group)."""
        term_ids = np.asarray(term_ids, np.int64)
        g = np.full(len(term_ids), -1, np.int64)
        known = term_ids < len(self.group)
        g[known] = self.group[term_ids[known]]
        gg = np.maximum(g, 0)
        return np.where(g >= 0, self.first[gg] + np.asarray(owners, np.int64) % self.copies[gg], -1)

    @staticmethod
    def build(n_parts: int, s_off, s_terms, sp_off, sp_terms, m_off, m_terms, v: int,
              msg_cost: float = MSG_COST, model: "PlacedCost | None" = None,
              replicas: bool = True, unseen_cost: float = 1.0) -> "TermGroups":
        """Fit on a sample: subscriptions' terms (``s_off``/``s_terms``) and their loose
        prefixes (``sp_off``/``sp_terms``), messages. A term's cost is what it brings to the
        partition holding it: ``msg_cost`` per message of it plus the posting entries those
        messages walk among its subscriptions (every shared term: :func:`shared_postings`,
        counted on the sample). A term costing more than an even share ``cap`` gets a group
        of its own, with copies (at least a quarter of the partitions stay groups of one):
        :func:`_heavy_copies` splits the partitions so that the largest cost per partition,
        a heavy copy's or a light partition's, is least. The other partitions are groups of
        one, and the remaining terms of the sample's subscriptions join them by
        :func:`place_light`, those in most sampled prefixes first, each group up to the
        light partitions' share times one of ``PLACE_SLACK``; the split is made again with
        the light groups' load as placed (co-location and shared messages lower it), and the
        slack whose placement has the least largest load is kept. Terms only messages hold
        get no group (:meth:`assign` gives one when a subscription holds one).
        ``model``: the cost of replicas that index their placed terms (:class:`PlacedCost`,
        :class:`GroupCost` for the prefix policy), in CPU microseconds per stream message: a
        term's own candidates and postings (in place of every shared term's postings) and
        ``C_MESSAGE`` x its share of the messages (in place of ``msg_cost`` per message);
        with ``replicas``, also ``B_REPLICA`` per replica its sampled prefixes place (less
        where co-located), the replicas of terms the sample does not hold spread over the
        light partitions (estimated leave-one-out: the sampled prefix terms no other sampled
        row holds), and the map then counts each replica routed by a term the fit did not
        see as it comes (:meth:`route`), so that :meth:`assign` gives new terms to the
        groups holding fewest. Such a replica, and a new term, cost ``unseen_cost`` times a
        sampled one (:data:`UNSEEN_COST`: their terms are rare, so few candidates reach their
        buffers; at the full price the light groups that took most of them measured the
        least busy, and the heavy terms got too few copies). A term under ``cap`` that costs
        more than a light partition's share as placed (co-location makes the share less than
        the even one) gets a group of its own with copies too, the costliest first, while the
        largest load falls: in one light partition it alone would be the largest."""
        v = max(int(v), int(s_terms.max(initial=-1)) + 1, int(m_terms.max(initial=-1)) + 1, 1)
        ns, nm = len(s_off) - 1, len(m_off) - 1
        m_rows = np.repeat(np.arange(nm, dtype=np.int64), np.diff(m_off))
        t_moff, t_msgs = csr_by(np.asarray(m_terms, np.int64), m_rows, v)
        m_cnt = np.diff(t_moff).astype(np.float64)
        s_rows = np.repeat(np.arange(ns, dtype=np.int64), np.diff(s_off))
        ta_off, ta_subs = csr_by(np.asarray(s_terms, np.int64), s_rows, v)
        sp_rows = np.repeat(np.arange(ns, dtype=np.int64), np.diff(sp_off))
        t_soff, t_subs = csr_by(np.asarray(sp_terms, np.int64), sp_rows, v)
        n_pref = np.diff(t_soff)
        per_rep = 0.0       # the cost of a replica, where counted (a co-located term saves it)
        if model is None:
            walk = shared_postings(v, t_moff, t_msgs, np.asarray(m_off, np.int64), np.asarray(m_terms, np.int64),
                                   ta_off, ta_subs, np.asarray(s_off, np.int64), np.asarray(s_terms, np.int64))
        else:       # replicas index their placed terms: a term's own postings and candidates
            per_msg = model.scale / max(model.n_msgs, 1)
            walk = np.zeros(v)
            n = min(v, len(model.pairs))
            walk[:n] = per_msg * (model.A_PAIR * model.pairs[:n] + model.D_POSTING * model.walks[:n])
            msg_cost = model.C_MESSAGE / max(nm, 1)
            if replicas:     # the replicas its sampled prefixes place (fewer where co-located)
                per_rep = model.scale * model.B_REPLICA
                walk += per_rep * n_pref
        placed = np.flatnonzero(np.diff(ta_off) > 0)
        cost = msg_cost * m_cnt + walk
        cap = max(cost[placed].sum() / n_parts, 1e-9)
        # heavy terms: their own groups, with copies
        heavy = placed[cost[placed] > cap]
        heavy = heavy[np.argsort(-cost[heavy], kind="stable")]
        min_light = max(n_parts // 4, 1)
        heavy = heavy[: max(n_parts - min_light, 0)]
        # replicas of terms the sample does not hold: their terms join groups as first seen,
        # spread over the light groups (first_sight); their share of the prefix terms,
        # leave-one-out, is that of the sampled prefix terms no other sampled row holds, each
        # at ``unseen_cost`` times a sampled replica's cost
        unseen = unseen_cost * per_rep * float((np.diff(ta_off)[np.asarray(sp_terms, np.int64)] == 1).sum())
        rest = placed[np.argsort(-cost[placed], kind="stable")][len(heavy):]
        sp_off, sp_terms = np.asarray(sp_off, np.int64), np.asarray(sp_terms, np.int64)

        def place(heavy, light, light_cost, slack):
            copies_h, n_light = _heavy_copies(msg_cost * m_cnt[heavy], walk[heavy], light_cost, n_parts,
                                              min_light)
            copies = np.concatenate([copies_h, np.ones(n_parts - int(copies_h.sum()), np.int64)])
            G = len(copies)
            group = np.full(v, -1, np.int64)
            load = np.zeros(G)
            covered = np.zeros((G, max(nm, 1)), np.bool_)
            for g, t in enumerate(heavy.tolist()):
                group[t] = g
                load[g] = msg_cost * m_cnt[t] + walk[t] / copies[g]
                covered[g, t_msgs[t_moff[t]:t_moff[t + 1]]] = True
            place_light(light, t_soff, t_subs, sp_off, sp_terms, t_moff, t_msgs, m_cnt, walk, group, load,
                        copies.astype(np.float64), covered, light_cost / n_light * (1.0 + slack),
                        float(msg_cost), per_rep)
            return copies, group, load

        def split(heavy, rest):
            """The placement of least largest load over PLACE_SLACK: (largest load, copies,
            group, load, the light groups' load as placed)."""
            light = np.sort(rest)
            light = light[np.lexsort((-cost[light], -n_pref[light]))]
            best = None
            for slack in PLACE_SLACK:
                lc = cost[placed].sum() - cost[heavy].sum() + unseen
                for _ in range(2):      # again with the light groups' load as placed (shared messages, co-location)
                    copies, group, load = place(heavy, light, lc, slack) if lc > 0 else place(heavy, light, cap, slack)
                    lc = float(load[len(heavy):].sum()) + unseen
                worst = max(load[:len(heavy)].max(initial=0.0),
                            load[len(heavy):].max(initial=0.0) + unseen / max(len(load) - len(heavy), 1))
                if best is None or worst < best[0]:
                    best = (worst, copies, group, load, lc)
            return best

        best = split(heavy, rest)
        # a light term costing more than a light partition's share as placed (co-location and
        # shared messages make it lower than the fit's estimate) would alone be the largest
        # light load: a group of its own, with the copies _heavy_copies gives it, one term at
        # a time while the largest load falls
        while len(rest) and len(heavy) < n_parts - min_light:
            n_light = len(best[1]) - len(heavy)
            if cost[rest[0]] <= best[4] / max(n_light, 1):
                break
            more = split(np.append(heavy, rest[0]), rest[1:])
            if more[0] >= best[0]:
                break
            best, heavy, rest = more, np.append(heavy, rest[0]), rest[1:]
        _, copies, group, load, _ = best
        first = np.concatenate([[0], np.cumsum(copies)[:-1]]).astype(np.int64)
        if replicas and model is not None:      # replicas are counted as routed (route)
            return TermGroups(group, first, copies, load, cap, unseen_cost * msg_cost,
                              unseen_cost * model.B_REPLICA)
        unit = msg_cost + (1.0 if model is None else model.scale * model.B_REPLICA)
        return TermGroups(group, first, copies, load, cap, unit)

    def describe(self) -> dict[str, Any]:
        return {"groups": len(self.copies), "copies": self.copies.tolist(), "load": self.load.tolist(),
                "cap": self.cap, "terms": int((self.group >= 0).sum())}


class PrefixPolicy(KeywordPolicy):
    """Paper 7.3.4: a subscription lives only in the partitions of its loose prefix, a
    message goes to the partitions of its terms. The term -> partition map is
    :class:`TermGroups`, fitted on the prefixes of the sample (kScores estimated on the
    message sample): terms that share prefixes share partitions, so a subscription needs
    fewer replicas than its prefix has terms. Definition 12 is unchanged (terms in id order);
    only which partition holds which term differs from Algorithm 4's ranges."""

    name = "prefix"
    prefix = True
    cost_model = GroupCost
    # A replica indexes every term of its subscription that the map places in its partition,
    # inside the routed prefix or beyond it (``placement``): that set does not depend on the
    # prefix, so a replica kept when the prefix grows indexes its new prefix terms already.
    # Exact (Definition 12): a message that can reach the top-k shares a term of the current
    # prefix, so its first term shared with ``s`` (term-id order) lies in the prefix; the
    # message goes to every partition of that term, and the one holding ``s`` for it indexes
    # it, where the IGPT bound covers the whole score. That replica held ``s`` when the
    # message arrived, or was added later with a re-evaluation over the whole window.
    index_placed = True

    def fit(self, subs=None, msgs=None):
        subs = subs if subs is not None else _empty_sample_subs()
        msgs = msgs if msgs is not None else MessageBatch.empty()
        self.kmap = self._build(subs, msgs, None)
        self.fitted = True
        return self

    def _build(self, subs, msgs, plen) -> TermGroups:
        """The groups fitted on a sample (``plen``: its prefixes, None: estimated), under
        :class:`PlacedCost` (option ``group_cost``: ``"placed"``, the default) or the shared
        postings of the sample (``"postings"``)."""
        if plen is None:
            tau = estimate_kscores(subs, msgs, self.max_dist, self.window)
            plen = self.sample_plen = prefix_lengths(subs.offsets, subs.weights, subs.alpha, tau)
        sp_off, sp_terms = take_prefix(subs.offsets, subs.term_ids, np.asarray(plen, np.int64))
        v = max(int(self.options.get("v_fit", 0)),
                int(max(subs.term_ids.max(initial=-1), msgs.term_ids.max(initial=-1))) + 1)
        cost = (self._cost(subs, msgs, v, self.options.get("subscriptions_estimate"))
                if self.options.get("group_cost", "placed") == "placed" else None)
        return TermGroups.build(self.n_partitions, subs.offsets, subs.term_ids, sp_off, sp_terms,
                                msgs.offsets, msgs.term_ids, v,
                                float(self.options.get("msg_cost", MSG_COST)), cost,
                                bool(self.options.get("group_replicas", True)),
                                float(self.options.get("unseen_cost", UNSEEN_COST)))

    def route_subscriptions(self, subs, plen=None):
        if plen is None:
            plen = self.initial_prefix(subs)
        self.kmap.assign(subs.offsets, subs.term_ids)      # every term, for later prefixes
        return super().route_subscriptions(subs, plen)

    def placement(self, subs, plen=None):
        """Every term's partition, whatever the prefix (see ``index_placed``): a replica
        indexes the terms placed in its partition; it exists only where a prefix term is."""
        return super().placement(subs, None)

    def take_assignments(self):
        return self.kmap.take_new()

    def set_assignments(self, terms, groups) -> None:
        self.kmap.set_groups(terms, groups)

    def rebalance(self, subs: SubscriptionBatch, msgs: MessageBatch,
                  plen: np.ndarray | None = None, total: int | None = None) -> TermGroups:
        """Load monitoring (7.4): refit the groups on a fresh sample (current subscriptions
        with their current prefixes, recent messages). Returns the previous map; the terms
        of subscriptions outside the sample get their groups when next routed."""
        old = self.kmap
        self.kmap = self._build(subs, msgs, plen if plen is not None else np.diff(subs.offsets))
        self.kmap.assign(subs.offsets, subs.term_ids)
        self.kmap.take_new()           # the coordinator sends the whole policy after a refit
        return old

    def describe(self):
        return {"policy": self.name, "partitions": self.n_partitions, **self.kmap.describe()}

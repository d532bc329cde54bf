"""Where the roles run on a Ray cluster of several nodes (docs/operations.md, "Placement").

Two groups of roles:

- **control roles** (the coordinator, the distributors, the aggregators, and the standby
  processes, which take the place of a lost role and ask no CPU until then): on the node ``ClusterConfig.control_node`` names: ``"head"`` (default; Ray's
  head node), ``"any"`` (where Ray's scheduler puts them), or the name of a custom resource
  (``ray start --resources='{"rankcast_control": 1}'``) that marks the nodes for them;
- **data roles** (subscription partitions, window shards): under ``placement="spread"``
  (default) each new one goes to the live node holding the fewest data roles of the cluster
  (the head last among equals); under ``"pack"`` where Ray's scheduler puts it (it fills
  the caller's node first).

Both ask Ray for a node softly (``NodeAffinitySchedulingStrategy(soft=True)``): a role whose
node has no room goes wherever there is room, and waits for room only when no live node
has any. After a node is lost the roles it held are recreated by the same rule on the
nodes left (the coordinator's recovery), so a lost node's roles spread over the survivors.
"""
from __future__ import annotations

import time
from typing import Any

__all__ = ["PLACEMENTS", "CONTROL_ROLES", "DATA_ROLES", "live_nodes", "head_node_id", "control_options",
           "node_id", "Placer"]

PLACEMENTS = ("spread", "pack")
CONTROL_ROLES = ("coordinator", "distributor", "aggregator")
DATA_ROLES = ("partition", "shard")
HEAD_RESOURCE = "node:__internal_head__"     # the resource Ray gives its head node only
NODES_TTL = 0.5       # seconds a list of the nodes is reused within (one build of the roles)


def live_nodes() -> list[dict]:
    """The live nodes: ``{"node", "address", "head", "resources"}`` each, in Ray's order."""
    import ray
    return [{"node": n["NodeID"], "address": n["NodeManagerAddress"], "head": HEAD_RESOURCE in n["Resources"],
             "resources": dict(n["Resources"])} for n in ray.nodes() if n.get("Alive")]


def head_node_id(nodes: list[dict] | None = None) -> str | None:
    for n in nodes if nodes is not None else live_nodes():
        if n["head"]:
            return n["node"]
    return None


def node_id() -> str | None:
    """The id of the Ray node this process runs on (None: no Ray here)."""
    try:
        import ray
        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
    except Exception:      # not a Ray process
        return None


def control_options(control_node: str, nodes: list[dict] | None = None, soft: bool = True) -> dict[str, Any]:
    """Ray actor options that put a control role where ``control_node`` says (``soft``:
    elsewhere when the head has no room)."""
    if control_node == "any":
        return {}
    if control_node == "head":
        head = head_node_id(nodes)
        if head is None:
            return {}
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        return {"scheduling_strategy": NodeAffinitySchedulingStrategy(head, soft=soft)}
    return {"resources": {control_node: 0.001}}


class Placer:
    """The coordinator's record of where its role processes run, and the options of the next
    one (:meth:`options`). ``on`` records the node of a process (its handle's key), ``forget``
    drops a process that is gone."""

    def __init__(self, placement: str, control_node: str):
        self.placement = placement
        self.control_node = control_node
        self.where: dict[str, str] = {}        # process key -> node id
        self.kinds: dict[str, str] = {}        # process key -> "data" or "control"
        self.avoid: set[str] = set()           # nodes where roles just died (maybe gone)
        self._nodes: list[dict] | None = None
        self._nodes_at = 0.0

    def nodes(self, fresh: bool = False) -> list[dict]:
        now = time.monotonic()
        if fresh or self._nodes is None or now - self._nodes_at > NODES_TTL:
            self._nodes, self._nodes_at = live_nodes(), now
        return self._nodes

    def options(self, role: str) -> tuple[dict[str, Any], str | None]:
        """(Ray actor options, the node asked for or None) of a new process of ``role``."""
        if role not in DATA_ROLES:
            # a standby asks no CPU: it always fits on the head, where Ray's soft affinity
            # did not always put it
            opts = control_options(self.control_node, self.nodes(), soft=role != "standby")
            s = opts.get("scheduling_strategy")
            return opts, getattr(s, "node_id", None)
        if self.placement != "spread":
            return {}, None
        nodes = [n for n in self.nodes() if n["resources"].get("CPU", 0) > 0]
        # a node whose roles just died may be dead before Ray's control store says so
        nodes = [n for n in nodes if n["node"] not in self.avoid] or nodes
        if not nodes:
            return {}, None
        live = {n["node"] for n in nodes}
        load = {n["node"]: 0 for n in nodes}
        for key, node in self.where.items():
            if node in live and self.kinds.get(key) == "data":
                load[node] += 1
        # the fewest data roles first; among equals a worker before the head, then Ray's order
        order = {n["node"]: (load[n["node"]], n["head"], i) for i, n in enumerate(nodes)}
        target = min(order, key=order.__getitem__)
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        return {"scheduling_strategy": NodeAffinitySchedulingStrategy(target, soft=True)}, target

    def on(self, key: str, node: str | None, role: str) -> None:
        if node is not None:
            self.where[key] = node
            self.kinds[key] = "data" if role in DATA_ROLES else "control"

    def forget(self, key: str) -> None:
        self.where.pop(key, None)
        self.kinds.pop(key, None)

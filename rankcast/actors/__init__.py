"""DSkype on Ray: the roles of paper Figure 7 as actors, their routing policies and the
client handle :class:`Cluster`. Orchestration only; every hot loop is in ``rankcast.indexing``
or a numba kernel here."""
from .cluster import Cluster
from .policies import make_policy

__all__ = ["Cluster", "make_policy"]

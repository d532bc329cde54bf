"""rankcast: exact top-k publish/subscribe over sliding windows (Skype / DSkype).

The public names of the contract (``docs/contract.md``)."""
from .common.jitcache import configure as _configure_numba_cache

_configure_numba_cache()  # first: numba's cache directory, before numba loads
from . import _version
from .config import ClusterConfig, EngineConfig, MatchConfig, RangeConfig
from .kinds.spatial.engine import Engine
from .errors import InvalidInput, NoCapacity, UnknownSubscription
from .kinds.matching.matcher import Matcher
from .model import (BatchResult, Delivery, Event, Expression, Match, Message, ObjectUpdate, Predicate, RangeSubscription,
                    Subscription, Update)
from .kinds.range import RangeEngine
from .kinds.spatial.text import Vocabulary
from .common.updates import apply_diffs

__version__ = _version.__version__   # one source: rankcast/_version.py, read by pyproject.toml too
__all__ = ["Subscription", "Message", "Update", "Delivery", "BatchResult", "InvalidInput", "UnknownSubscription",
           "NoCapacity",
           "EngineConfig", "Engine", "Vocabulary", "ClusterConfig", "Cluster",
           "Predicate", "Expression", "Event", "Match", "MatchConfig", "Matcher",
           "RangeSubscription", "ObjectUpdate", "RangeConfig", "RangeEngine", "Covering", "apply_diffs"]


def __getattr__(name):
    if name == "Cluster":   # Ray is imported only by a cluster on Ray (the cluster extra)
        from .runtime.cluster import Cluster
        return Cluster
    if name == "Covering":  # the routing structure, imported on first use
        from .kinds.matching.covering import Covering
        return Covering
    raise AttributeError(name)

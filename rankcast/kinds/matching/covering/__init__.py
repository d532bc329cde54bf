"""Subscription covering (Shen, Tirthapura, Aluru): the relation graph G_k over a covering
index, for the distribution role of the ranked-matching kind. See :mod:`.core` for what
"covers" means per operator and how to use the forwarded set."""
from .core import INDEXES, MESSAGE_KINDS, Covering

__all__ = ["Covering", "INDEXES", "MESSAGE_KINDS"]

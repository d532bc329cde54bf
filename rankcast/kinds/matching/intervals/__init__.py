"""The scored interval indexes of the ranked pub/sub paper, one attribute each (interface:
:mod:`.base`): scored segment tree, score-sorted interval tree, scored R-tree, IR-tree
(dynamic) and SOPT-R-tree; static ones take insertions and deletions through
:class:`.delta.DeltaIndex`."""
from __future__ import annotations

import importlib

from .base import COUNTERS, Cursor, IntervalIndex, before
from .delta import DeltaIndex

__all__ = ["INDEX_CLASSES", "index_class", "make_index", "IntervalIndex", "Cursor", "DeltaIndex", "before",
           "COUNTERS", "AUTO_INDEX"]

INDEX_CLASSES = {                        # name -> (module, class)
    "segment-tree": ("segment", "SegmentTreeIndex"),
    "interval-tree": ("itree", "IntervalTreeIndex"),
    "r-tree": ("rtree", "RTreeIndex"),
    "sopt-r-tree": ("rtree", "SoptRTreeIndex"),
    "ir-tree": ("irtree", "IRTreeIndex"),
}
# index="auto": the paper's fastest structure (Section 5: SOPT-R-tree best across the board
# for reasonable d); its updates go through the delta, rebuilt at rebuild_fraction
AUTO_INDEX = "sopt-r-tree"


def index_class(name: str):
    mod, cls = INDEX_CLASSES[name]
    return getattr(importlib.import_module(f".{mod}", __name__), cls)


def make_index(name: str, lo, hi, score, item, *, b: int = 50, rebuild_fraction: float = 0.05,
               rebuild_min: int = 1024) -> IntervalIndex:
    """A dynamic index of kind ``name`` ("auto" included) over the given intervals."""
    cls = index_class(AUTO_INDEX if name == "auto" else name)
    if cls.dynamic:
        return cls(lo, hi, score, item, b=b)
    return DeltaIndex(cls, lo, hi, score, item, b=b, rebuild_fraction=rebuild_fraction, rebuild_min=rebuild_min)

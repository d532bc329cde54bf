"""The BE*-tree (Sadoghi & Jacobsen, "Relevance Matters: Capitalizing on Less"): top-k
matching of Boolean expressions with weights, fully dynamic, as numba kernels over flat
node tables (``index="be-tree"``, scorings ``weighted`` and ``static``).

Shape (paper Section III; notes ``betree-topk-boolean.md`` section 2). Every predicate is an
interval on its attribute (Table I, :mod:`rankcast.kinds.matching.predicates`); candidates found through the
intervals are then checked exactly.

- A **c-node** is a bucket: a box over the attributes chosen by partitioning on its root path
  (``d_1..d_k``, ``d_k`` the *active* dimension), an **l-node** (the expressions whose home it
  is, a doubly linked list over expression slots) and a **p-directory** (a list of p-nodes).
  The root is a c-node of depth 0. A c-node is also its **c-directory** node: it has an
  optional left and right child (same depth, same attributes) that never overlap on the
  active dimension (descendant repelling), so the c-node's own bucket is the paper's overlap
  bucket B_O. Each c-node keeps two boxes: its own bucket (the exact MBB of every expression at
  or below it through its p-directory) and its c-directory subtree (own, L and R).
- A **p-node** holds one attribute, the root of its c-directory, its rank (the expressions
  below it: the optimistic popularity ranking of Section V) and an upper-bound summary.
- Summaries (Section VI): per l-node and per p-node, for ``weighted`` the largest predicate
  weight per attribute and **size class** (the expressions of the same number of predicates;
  a sorted list of (size, attribute) keys, pooled); for ``static`` the largest score.

Bounds (``weighted``; tighter than the paper's ``uscore``, the sum over the event's
attributes of event weight * max weight, and still upper bounds because weights are
non-negative and a match has all its attributes in the event). An expression of ``s``
predicates below a node has the node's path attributes (the p-nodes' attributes from the
root: the event has them all, or the search would not be there) and ``s`` minus that many
others, all among the event's attributes. So a class's bound is the sum of the path's
products (event weight * the class's max weight) plus the largest ``s - path`` products of
its other attributes the event has; a class with fewer of them than that cannot match. The
node's bound is the largest over its classes (0 when none can match). ``G[s]``, the sum of the
event's ``s`` largest products with the global maximum weight of each attribute, bounds
every expression of ``s`` predicates anywhere: classes are read largest first and the reading
stops at a class whose ``G`` is below the k-th score (or below the best class so far); an
expression with more predicates than the event has attributes, or whose ``G`` is below the
k-th score, is not read. Where sizes differ (scores nearly proportional to the number of
predicates, as in BEGen's workload), this is what lets the search skip smaller classes once a
large match is held, as k-index skips its smaller conjunction sizes.

The package, one module per part: :mod:`.nodes` (the node tables: record layouts, pools,
node creation, p-directories), :mod:`.summaries` (the upper-bound summaries and their
upkeep), :mod:`.update` (insertion and deletion), :mod:`.split` (splitting a leaf bucket),
:mod:`.view` (the match view the search reads), :mod:`.search` (top-k), :mod:`.tree` (the
engine-facing :class:`BETreeCore`) and :mod:`.check` (the structure's invariants, for tests).
"""
from __future__ import annotations

from .check import check_structure
from .tree import BETreeCore

__all__ = ["BETreeCore", "check_structure"]

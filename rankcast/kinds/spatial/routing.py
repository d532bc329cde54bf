"""The spatial kind's routing kernels: the partitions of every row of a batch, from the leaves
of a KD partition (location policies) or from a table of term groups (keyword and prefix
policies); :mod:`rankcast.kinds.spatial.roles.policies` shapes their inputs and outputs.
"""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["kd_route", "group_route"]


@numba.njit(cache=True)
def kd_route(x, y, dim, val, left, right, part):
    """Leaf partition of every point of a KD partition (Algorithm 3's leaves).

    x, y: float64[n]; the tree as node arrays (``KDTree``): dim int64 (0 split by x, 1 by y),
    val float64 (a coordinate <= val goes left), left, right int64 (children), part int64
    (leaf partition, -1 for an inner node); node 0 is the root. Returns int64[n]."""
    n = x.shape[0]
    out = np.empty(n, np.int64)
    for i in range(n):
        node = 0
        while part[node] < 0:
            c = x[i] if dim[node] == 0 else y[i]
            node = left[node] if c <= val[node] else right[node]
        out[i] = part[node]
    return out


@numba.njit(cache=True, inline="always")
def _put_group(out, w, start, copies, owner, one):
    """The partitions of a term group, ``copies`` of them from ``start``, written at
    ``out[w:]``: the one copy ``owner % copies`` of a subscription ``owner`` where ``one``,
    every copy (a message's) otherwise. Returns the next ``w``."""
    if one:
        out[w] = start + owner % copies
        return w + 1
    for j in range(copies):
        out[w + j] = start + j
    return w + copies


@numba.njit(cache=True)
def group_route(offsets, terms, owners, group, first, copies, n_mod, base):
    """Partitions of every row of a CSR of terms (not yet sorted or deduplicated).

    Term ``t`` of group ``g = group[t]`` gives every copy ``first[g] .. first[g] + copies[g]
    - 1`` (a message: ``owners`` empty) or the one copy ``first[g] + owner mod copies[g]``
    (a subscription, ``owners`` int64[nnz]: its id per term). A term beyond ``group`` gives
    partition ``t mod n_mod`` where ``n_mod > 0``, none otherwise; a term of group -1 gives
    none. Returns (offsets, parts), int64[n + 1] and int64[...], each partition shifted by
    ``base``."""
    n = offsets.shape[0] - 1
    one = owners.shape[0] > 0
    nv = group.shape[0]
    out_off = np.zeros(n + 1, np.int64)
    for r in range(n):
        c = 0
        for i in range(offsets[r], offsets[r + 1]):
            t = terms[i]
            if t >= nv:
                c += 1 if n_mod > 0 else 0
            elif group[t] >= 0:
                c += 1 if one else copies[group[t]]
        out_off[r + 1] = out_off[r] + c
    out = np.empty(out_off[n], np.int64)
    w = 0
    for r in range(n):
        for i in range(offsets[r], offsets[r + 1]):
            t = terms[i]
            if t >= nv:
                if n_mod > 0:
                    out[w] = base + t % n_mod
                    w += 1
                continue
            g = group[t]
            if g >= 0:
                w = _put_group(out, w, base + first[g], copies[g], owners[i] if one else 0, one)
    return out_off, out

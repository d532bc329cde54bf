"""A call's updates as they travel between the roles, the coordinator and the client:
update arrays, references to them in the object store, and how several calls' updates
combine."""
from __future__ import annotations

import numpy as np

from rankcast.common.arrays import concat_offsets, runs
from rankcast.common.diffs import compose_diffs, concat_diffs, is_diff, n_keys

from .kind import NO_UPDATES, UpdateArrays
from .backends import Runtime


class RemoteUpdates:
    """What a client gets for a call's updates that are still in the partitions' results:
    the references, which it fetches itself (``Cluster._get``). The update rows (5 MB
    per call of 1,000 messages at 20k subscriptions) then cross the object store once,
    partition to client, instead of twice through the coordinator."""

    __slots__ = ("refs",)

    def __init__(self, refs: list):
        self.refs = refs

    def __getstate__(self):
        return self.refs

    def __setstate__(self, refs):
        self.refs = refs


class UpdateParts:
    """A delivery's update arrays left in the partitions' results (object references; each
    part is id-ordered, the parts are laid end to end), with the number of subscriptions
    they hold. The coordinator fetches them only where it reads them (a listener, a
    ``flush`` of several deliveries, a checkpoint); a pickle holds the arrays."""

    __slots__ = ("refs", "n", "_rt", "_arrays", "_parts")

    def __init__(self, rt: Runtime, refs: list, n: int):
        self.refs, self.n, self._rt, self._arrays, self._parts = list(refs), int(n), rt, None, None

    def parts(self) -> list:
        """The parts' update arrays as fetched (those with rows), not laid end to end: from
        the object store where they are, without a copy."""
        if self._parts is None:
            self._parts = [o for o in self._rt.get(self.refs) if len(o[0])]
        return self._parts

    def arrays(self) -> tuple:
        if self._arrays is None:
            self._arrays = concat_updates(self.parts())
        return self._arrays

    def __reduce__(self):
        return tuple, (self.arrays(),)


def update_arrays(out) -> tuple:
    """The update arrays of ``out`` (arrays, or :class:`UpdateParts`)."""
    return out.arrays() if isinstance(out, UpdateParts) else out


def stored_updates(out):
    """What a delivery chunk keeps of ``out``: update arrays as they are, the parts of
    :class:`UpdateParts` as a list (the same object each time it is asked for), not laid
    end to end: a checkpoint writes hundreds of megabytes of them, which a concatenation
    would copy on the coordinator's thread. :func:`stored_arrays` reads it back."""
    return out.parts() if isinstance(out, UpdateParts) else out


def stored_arrays(kept) -> tuple:
    """The update arrays of what :func:`stored_updates` kept."""
    return concat_updates(kept) if isinstance(kept, list) else kept


def n_updates(out) -> int:
    """Subscriptions updated in ``out`` (arrays, diff arrays, or :class:`UpdateParts`)."""
    if isinstance(out, UpdateParts):
        return out.n
    return n_keys(out[0]) if is_diff(out) else len(out[0])


def for_client(out):
    """A call's result as sent to the client: update parts as their references."""
    return RemoteUpdates(out.refs) if isinstance(out, UpdateParts) else out


def select_rows(arrays: UpdateArrays, keep: np.ndarray) -> UpdateArrays:
    """The rows ``keep`` (a mask) of update arrays (sub_ids, offsets, msg_ids, scores)."""
    ids, off, mids, scs = arrays
    rows = np.flatnonzero(keep)
    new_off, idx = runs(off[rows], off[rows + 1] - off[rows])
    return ids[rows], new_off, mids[idx], scs[idx]


def select_diff_runs(diffs: tuple, hit: np.ndarray) -> tuple:
    """The rows of diff arrays whose run (the rows of one key, together) has a row in
    ``hit`` (a mask over the rows)."""
    keys = diffs[0]
    if not len(keys):
        return diffs
    run = np.cumsum(np.r_[True, keys[1:] != keys[:-1]]) - 1
    keep = np.zeros(int(run[-1]) + 1, np.bool_)
    keep[run[hit]] = True
    rows = keep[run]
    return tuple(c[rows] for c in diffs)


def concat_updates(outs: list[UpdateArrays]) -> UpdateArrays:
    """Update arrays (ids, offsets, item ids, scores) of several parts, laid end to end (diff
    arrays likewise: parts of different keys)."""
    if not outs:
        return NO_UPDATES
    if len(outs) == 1:
        return outs[0]
    if is_diff(outs[0]):
        return concat_diffs(outs)
    return (np.concatenate([o[0] for o in outs]), concat_offsets([o[1] for o in outs]),
            np.concatenate([o[2] for o in outs]), np.concatenate([o[3] for o in outs]))


def latest_lists(outs: list[UpdateArrays]) -> UpdateArrays:
    """Concatenate update arrays keeping, per subscription, the list of the last part (in
    the order of those last occurrences); diff arrays of consecutive changes compose into
    one diff per subscription (:func:`~rankcast.common.diffs.compose_diffs`)."""
    if is_diff(outs[0]):
        return compose_diffs(outs)
    ids = np.concatenate([o[0] for o in outs])
    off = concat_offsets([o[1] for o in outs])
    mids = np.concatenate([o[2] for o in outs])
    scs = np.concatenate([o[3] for o in outs])
    _, first_from_end = np.unique(ids[::-1], return_index=True)
    keep = np.sort(len(ids) - 1 - first_from_end)
    new_off, idx = runs(off[keep], off[keep + 1] - off[keep])
    return ids[keep].astype(np.int64), new_off, mids[idx].astype(np.int64), scs[idx].astype(np.float64)

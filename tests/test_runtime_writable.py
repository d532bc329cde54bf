"""Arrays that arrive read-only (as Ray hands them out of its object store) reach the
roles writable: numba would otherwise compile every kernel again in every actor."""
from __future__ import annotations

import numpy as np

from rankcast.runtime.backends import writable, writable_class
from rankcast.kinds.spatial.columns import MessageBatch


def _ro(a):
    a = np.array(a)
    a.flags.writeable = False
    return a


def test_writable_copies_read_only_arrays_in_rankcast_objects_and_containers():
    b = MessageBatch(ids=_ro([1, 2]), x=_ro([0.1, 0.2]), y=_ro([0.3, 0.4]), t=_ro([0.0, 1.0]),
                     offsets=_ro([0, 1, 2]), term_ids=_ro([3, 4]), weights=_ro([1.0, 2.0]))
    out = writable(([b], {"k": _ro([5])}, _ro([7])))
    assert out[0][0] is b and b.ids.flags.writeable and b.weights.flags.writeable
    assert b.ids.tolist() == [1, 2] and b.offsets.tolist() == [0, 1, 2]
    assert out[1]["k"].flags.writeable and out[1]["k"].tolist() == [5]
    assert out[2].flags.writeable
    w = np.zeros(3)
    assert writable(w) is w                 # already writable: not copied


class _Role:
    def __init__(self, a):
        self.a = a

    def put(self, a, *, b=None):
        return a.flags.writeable and (b is None or b.flags.writeable)

    def many(self, *parts):
        yield from (p.flags.writeable for p in parts)


def test_writable_class_wraps_init_methods_and_generators():
    cls = writable_class(_Role)
    assert cls.__name__ == "_Role" and issubclass(cls, _Role) and writable_class(_Role) is cls
    r = cls(_ro([1.0]))
    assert r.a.flags.writeable
    assert r.put(_ro([1]), b=_ro([2]))
    assert list(r.many(_ro([1]), _ro([2]))) == [True, True]

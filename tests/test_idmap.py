"""IdMap (the ranked-matching id -> slot map) against a dict, through growth, deletes and
reuse of deleted cells, with keys anywhere in int64."""
import pickle

import numpy as np
import pytest

from rankcast.common.idmap import IdMap


@pytest.mark.parametrize("seed", range(4))
def test_idmap_equals_a_dict(seed):
    rng = np.random.default_rng(seed)
    pool = np.r_[np.iinfo(np.int64).min, np.iinfo(np.int64).min + 1, -1, 0, np.iinfo(np.int64).max,
                 rng.integers(-2**62, 2**62, 300), rng.integers(0, 50, 20)]
    m, ref = IdMap(), {}
    for step in range(200):
        op = rng.integers(3)
        ids = np.unique(rng.choice(pool, rng.integers(1, 40)))
        if op < 2:
            vals = rng.integers(0, 10**9, len(ids))
            m.put(ids, vals)
            ref.update(zip(ids.tolist(), vals.tolist()))
        else:
            present = np.array([i for i in ids.tolist() if i in ref], np.int64)
            m.delete(present)
            for i in present.tolist():
                del ref[i]
        assert len(m) == len(ref)
        if ref:
            keys = np.array(list(ref), np.int64)
            assert m.get(keys).tolist() == [ref[k] for k in keys.tolist()]
        absent = [i for i in pool.tolist() if i not in ref]
        if absent:
            with pytest.raises(KeyError):
                m.get(np.array(absent[:1], np.int64))
        if step % 50 == 49:
            m = pickle.loads(pickle.dumps(m))
    assert 2 * (len(m) + m.deleted) <= len(m.keys)

"""Small kernels of the message index (rankcast.indexing.igpt)."""
from __future__ import annotations

import numpy as np
import pytest

from rankcast.indexing.igpt import _radix_sort


@pytest.mark.parametrize("n,top", [(0, 5), (1, 5), (2, 0), (5, 3), (1000, 10**8), (10_000, 10**8),
                                   (300_000, 10**9), (50, 2**62), (7000, 1), (3, 2**63 - 1)])
def test_radix_sort_sorts_every_size_and_width(n, top):
    """The digit width adapts to the keys' count and size (8 to 16 bits): every choice sorts,
    up to keys of 63 bits (no pass shifts by 64)."""
    a = np.random.default_rng(n).integers(0, top, n, endpoint=True).astype(np.int64)
    assert np.array_equal(_radix_sort(a), np.sort(a))

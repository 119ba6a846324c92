"""Prepare's batches: EOS after each document as `np.insert` puts it, by either of `with_eos`' two ways."""

from __future__ import annotations

import numpy as np
import pytest

from olmax.data.prepare.batches import with_eos


@pytest.mark.parametrize("longest", [3, 60, 5000])  # short documents (np.insert), long ones (a slice each)
def test_with_eos_equals_np_insert(longest):
    rng = np.random.default_rng(longest)
    for _ in range(200):
        n = int(rng.integers(0, 30))
        lengths = rng.integers(0, longest + 1, n)
        offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        ids = rng.integers(0, 100_000, int(offsets[-1])).astype(np.uint32)
        add = rng.random(n) < 0.8
        want = np.insert(ids, offsets[1:][add], np.uint32(100257))
        got = with_eos(ids, offsets, add, 100257)
        assert got.dtype == np.uint32 and np.array_equal(got, want)

"""`attach_mix`'s unseen sampling without an N-sized array: the pool by rank equals the old materialized
pool (setdiff of the source's instances and the listed ids), and the same seed draws the same instances."""

from __future__ import annotations

import numpy as np
import pytest

from olmax.data.index import index_from_sizes
from olmax.evals.exposure_file import UnseenPool


def make_index(rng, files=40, seq_len=4):
    counts = rng.integers(0, 900, files)
    counts[3] = 0  # a file too short for one instance, between files of the same source
    labels = [f"s{int(x)}" for x in rng.integers(0, 4, files)]
    sizes = [int(4 * (c * seq_len + rng.integers(0, seq_len))) for c in counts]
    paths = [f"/data/f{i}.npy" for i in range(files)]
    return index_from_sizes(paths, labels, sizes, seq_len, allow_short_files=True)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pool_by_rank_equals_the_materialized_pool(seed):
    rng = np.random.default_rng(seed)
    index = make_index(rng)
    n = index.num_instances
    listed = np.unique(rng.integers(0, n, int(rng.integers(0, n // 2))))
    src_all = index.source_ids(np.arange(n))
    for s in range(len(index.label_names)):
        old = np.setdiff1d(np.flatnonzero(src_all == s), listed)
        pool = UnseenPool(index, s, listed)
        assert pool.size == old.size
        np.testing.assert_array_equal(pool.at(np.arange(pool.size)), old)
        for k in (0, 1, 7, max(0, old.size // 3)):  # Floyd's path and the tail-shuffle path of choice
            k = min(k, old.size)
            want = np.random.default_rng(seed + k).choice(old, size=k, replace=False)
            got = pool.at(
                np.asarray(np.random.default_rng(seed + k).choice(pool.size, size=k, replace=False))
            )
            np.testing.assert_array_equal(got, want)

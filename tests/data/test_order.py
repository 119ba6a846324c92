"""Epoch orders: OLMo-core's PCG64 permutation (memory and memmapped cache) and the Feistel bijection."""

from __future__ import annotations

import multiprocessing
import os

import numpy as np
import pytest

from olmax.data.order import (
    CachedOrder,
    FeistelOrder,
    MemoryOrder,
    epoch_order,
    olmo_core_permutation,
    order_file_path,
)
from olmax.errors import OlmaxError


@pytest.mark.parametrize("n,seed,epoch", [(1, 0, 1), (1000, 34521, 1), (1003, 34521, 2), (77, 5, 9)])
def test_permutation_matches_olmo_core(n, seed, epoch):
    from olmo_core.data.utils import get_rng

    want = np.arange(n, dtype=np.uint32)
    get_rng(seed + epoch).shuffle(want)
    got = olmo_core_permutation(n, seed, epoch)
    assert got.dtype == np.uint32
    np.testing.assert_array_equal(got, want)


def test_epochs_are_one_based():
    with pytest.raises(OlmaxError, match="1-based"):
        olmo_core_permutation(10, 0, 0)
    with pytest.raises(OlmaxError, match="1-based"):
        FeistelOrder(10, 0, 0)


def test_cached_order_is_a_shared_memmap(tmp_path):
    n, seed, epoch = 5000, 3, 2
    order = CachedOrder(str(tmp_path), n, seed, epoch)
    path = order_file_path(str(tmp_path), n, seed, epoch)
    assert order.path == path and os.path.getsize(path) == 4 * n
    np.testing.assert_array_equal(np.fromfile(path, dtype=np.uint32), olmo_core_permutation(n, seed, epoch))
    np.testing.assert_array_equal(order.take(10, 90, 4), MemoryOrder(n, seed, epoch).take(10, 90, 4))
    mtime = os.stat(path).st_mtime_ns
    CachedOrder(str(tmp_path), n, seed, epoch)  # reuses the file, does not rebuild it
    assert os.stat(path).st_mtime_ns == mtime
    assert sorted(os.listdir(tmp_path)) == sorted([os.path.basename(path), os.path.basename(path) + ".lock"])


def test_truncated_cache_file_is_rebuilt(tmp_path):
    path = order_file_path(str(tmp_path), 300, 1, 1)
    np.arange(10, dtype=np.uint32).tofile(path)  # a stale or cut-off file
    order = CachedOrder(str(tmp_path), 300, 1, 1)
    np.testing.assert_array_equal(order.take(0, 300), olmo_core_permutation(300, 1, 1))


def _build(args):
    work_dir, n = args
    return CachedOrder(work_dir, n, 9, 1).take(0, n).tobytes()


def test_concurrent_processes_build_one_file(tmp_path):
    n = 200_000
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        results = pool.map(_build, [(str(tmp_path), n)] * 4)
    assert len(set(results)) == 1
    np.testing.assert_array_equal(np.frombuffer(results[0], dtype=np.uint32), olmo_core_permutation(n, 9, 1))
    leftovers = [f for f in os.listdir(tmp_path) if not f.endswith((".u32", ".u32.lock"))]
    assert not leftovers, "temporary files left behind"


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 17, 64, 65, 1000, 4099, 65536])
def test_feistel_is_a_bijection(n):
    got = FeistelOrder(n, seed=42, epoch=1).take(0, n)
    np.testing.assert_array_equal(np.sort(got), np.arange(n))


def test_feistel_is_keyed_and_pointwise():
    n = 10_007
    a = FeistelOrder(n, seed=1, epoch=1)
    full = a.take(0, n)
    np.testing.assert_array_equal(a.take(100, 5000, 7), full[100:5000:7])  # any slice, computed directly
    np.testing.assert_array_equal(FeistelOrder(n, seed=1, epoch=1).take(0, n), full)
    assert (FeistelOrder(n, seed=1, epoch=2).take(0, n) != full).mean() > 0.99
    assert (FeistelOrder(n, seed=2, epoch=1).take(0, n) != full).mean() > 0.99
    assert abs(np.corrcoef(np.arange(n), full)[0, 1]) < 0.05  # actually shuffled


def test_unknown_order():
    with pytest.raises(OlmaxError, match="unknown order"):
        epoch_order("random", 10, 0, 1)

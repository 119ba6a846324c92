"""Span hashes against brute force; the partitioned reduce."""

from __future__ import annotations

import numpy as np
import pytest

from olmax.audit.partition import equal_runs
from olmax.dedup.spill import PartitionSpill
from olmax.hashing import (
    BASES,
    MERSENNE31,
    PrefixHasher,
    packed_windows,
    spans_hashes,
    window_hashes,
)


def brute(x, k, base):
    return [
        sum(int(x[i + j]) * pow(base, j, MERSENNE31) for j in range(k)) % MERSENNE31
        for i in range(len(x) - k + 1)
    ]


@pytest.mark.parametrize("k", [1, 4, 13, 50])
def test_window_hashes_equal_the_polynomial(k):
    x = np.random.default_rng(k).integers(0, 100_278, size=700, dtype=np.uint32)
    h = window_hashes(x, k)
    want = [(a << 32) | b for a, b in zip(brute(x, k, BASES[0]), brute(x, k, BASES[1]))]
    assert h.tolist() == want
    # position independent, strided and at chosen starts
    assert window_hashes(x[123 : 123 + k], k)[0] == h[123]
    np.testing.assert_array_equal(window_hashes(x, k, stride=7), h[::7])
    starts = np.array([0, 5, 600 - k])
    np.testing.assert_array_equal(PrefixHasher(x).windows_at(k, starts), h[starts])


@pytest.mark.parametrize("k", [1, 4, 13, 50])
def test_packed_windows_equal_the_prefix_sums(k):
    rng = np.random.default_rng(k)
    v = [rng.integers(0, 1 << 20, size=3000, dtype=np.uint64) for _ in BASES]
    packed = (v[0] << np.uint64(32)) | v[1]
    starts = rng.integers(0, 3000 - k + 1, size=900)
    want = PrefixHasher(v).windows_at(k, starts)
    np.testing.assert_array_equal(packed_windows(packed, starts, k), want)
    np.testing.assert_array_equal(packed_windows(packed, starts, k, block=k * 5), want)  # blocks
    np.testing.assert_array_equal(
        packed_windows(packed, np.arange(3000 - k + 1), k), PrefixHasher(v).windows(k)
    )
    assert packed_windows(packed, np.zeros(0, np.int64), k).size == 0


def test_distinct_windows_get_distinct_hashes():
    x = np.random.default_rng(0).integers(0, 50, size=200_000, dtype=np.uint32)  # many near-repeats
    h = window_hashes(x, 8)
    windows = np.lib.stride_tricks.sliding_window_view(x, 8)
    assert np.unique(h).size == np.unique(windows, axis=0).shape[0]


def test_spans_hashes_are_content_hashes():
    x = np.arange(100, dtype=np.uint32)
    y = np.concatenate([x[50:60], x[:50]])
    a = spans_hashes(x, np.array([0, 50]), np.array([10, 60]))
    b = spans_hashes(y, np.array([0, 10]), np.array([10, 20]))
    assert a[1] == b[0] and a[0] != a[1] and b[1] == a[0]


def test_partition_spill_groups_equal_hashes(tmp_path):
    dt = np.dtype([("hash", "<u8"), ("v", "<i8")])
    rng = np.random.default_rng(0)
    hashes = rng.integers(0, 2**64 - 1, size=500, dtype=np.uint64)
    hashes[100:110] = hashes[5]
    with PartitionSpill(dt, bits=3, work_dir=str(tmp_path)) as spill:
        for chunk in np.array_split(np.arange(500), 7):
            rec = np.empty(chunk.size, dt)
            rec["hash"], rec["v"] = hashes[chunk], chunk
            spill.add(rec)
        groups = []
        for part in spill.partitions():
            s, e = equal_runs(part["hash"])
            groups += [part["v"][a:b].tolist() for a, b in zip(s, e)]
    assert groups == [[5, *range(100, 110)]]
    assert not list(tmp_path.iterdir())  # spill files removed

"""Hash-partitioned spill files: records with a 64-bit hash routed by its top bits to one of 2^bits files.

The bounded-memory shape of every pass that joins records by hash (the audits' map-reduce,
olmax.audit.partition; MinHash's candidate pairs out of core, olmax.dedup.minhash_spill): records are
appended to the file of their hash's partition, then read back one partition at a time, so peak memory is
one partition whatever the corpus size. A partition is a range of hashes, so partitions in order are
hashes in order, and the number of partitions never changes a result.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import numpy as np


class PartitionSpill:
    """Append structured records (with a uint64 `hash` field) routed to 2^bits spill files."""

    def __init__(self, dtype: np.dtype, *, bits: int = 4, work_dir: str | None = None):
        self.dtype = np.dtype(dtype)
        if "hash" not in self.dtype.names:
            raise ValueError("records need a uint64 'hash' field")
        self.bits = bits
        if work_dir:
            os.makedirs(work_dir, exist_ok=True)
        self.dir = tempfile.mkdtemp(prefix="olmax-audit-", dir=work_dir)
        self.count = 0

    def _path(self, part: int) -> str:
        return os.path.join(self.dir, f"part-{part:05d}.bin")

    def add(self, records: np.ndarray) -> None:
        if records.size:
            self.add_parts(split_partitions(np.asarray(records, dtype=self.dtype), self.bits))

    def add_parts(self, parts: list[tuple[int, np.ndarray]]) -> None:
        """Append records already split by `split_partitions(records, self.bits)`."""
        for p, recs in parts:
            with open(self._path(p), "ab") as f:
                np.asarray(recs, dtype=self.dtype).tofile(f)
            self.count += int(recs.size)

    def parts(self) -> int:
        """How many partitions hold records."""
        return sum(os.path.exists(self._path(p)) for p in range(1 << self.bits))

    def partitions(self, sort: bool = True) -> Iterator[np.ndarray]:
        """Each non-empty partition's records in partition order, sorted by hash (stable: map order kept
        within a hash); `sort=False` for a reduce that sorts them itself."""
        for p in range(1 << self.bits):
            path = self._path(p)
            if not os.path.exists(path):
                continue
            recs = np.fromfile(path, dtype=self.dtype)
            yield recs[np.argsort(recs["hash"], kind="stable")] if sort else recs

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PartitionSpill:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class ScratchColumn:
    """An int64 column appended block by block to a scratch file, then read back through a memory map
    (the reduces' outputs that outgrow memory, e.g. the exposure file's distinct ids and counts)."""

    def __init__(self, path: str):
        self.path, self.size = path, 0
        self._f = open(path, "wb")

    def append(self, values: np.ndarray) -> None:
        np.asarray(values, dtype=np.int64).tofile(self._f)
        self.size += int(np.size(values))

    def read(self) -> np.ndarray:
        """The whole column, memory-mapped (read-only); no more appends."""
        self._f.close()
        if not self.size:
            return np.zeros(0, np.int64)
        return np.memmap(self.path, dtype=np.int64, mode="r", shape=(self.size,))

    def close(self) -> None:
        self._f.close()


def partition_of(hashes: np.ndarray, bits: int) -> np.ndarray:
    """int64: the partition of each uint64 hash, its top `bits` bits (so partition order is hash order)."""
    if not bits:
        return np.zeros(hashes.size, dtype=np.int64)
    return (np.asarray(hashes, dtype=np.uint64) >> np.uint64(64 - bits)).astype(np.int64)


def split_partitions(records: np.ndarray, bits: int) -> list[tuple[int, np.ndarray]]:
    """[(partition, its records)] for each non-empty partition of `records` (map order kept in each)."""
    if records.size == 0:
        return []
    part = partition_of(records["hash"], bits)
    if bits <= 16:  # a 16-bit key: numpy's stable sort is then a radix sort, O(n)
        part = part.astype(np.uint16)
    order = np.argsort(part, kind="stable")
    records, part = records[order], part[order]
    bounds = np.searchsorted(part, np.arange((1 << bits) + 1))
    return [(p, records[bounds[p] : bounds[p + 1]]) for p in np.flatnonzero(np.diff(bounds)).tolist()]


def partition_bits(
    records: int, record_bytes: int, *, target_bytes: int = 1 << 28, least: int = 4, most: int = 12
) -> int:
    """Bits of hash partitioning so that one partition of `records` records holds about `target_bytes`
    (at least 2^least, at most 2^most partitions). Results never depend on it: a partition is a range of
    hashes, so partitions in order are hashes in order."""
    need = max(1, -(-records * record_bytes // target_bytes))
    return min(most, max(least, (need - 1).bit_length()))

"""Map outputs → hash-partitioned spill files → one partition at a time: the audit's bounded-memory reduce.

Every audit pass has the same shape: a per-file *map* emits fixed-width records keyed by a 64-bit
hash; records are routed by the hash's top `bits` bits to one of 2^bits append-only spill files; the
*reduce* then loads one partition, sorts it by hash and finds equal keys. Peak memory is one file's
map output plus one partition, whatever the corpus size, and each partition can be reduced on a
different machine (the same shape a cluster engine runs).
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
        self.dir = tempfile.mkdtemp(prefix="olmax-audit-", dir=work_dir)
        self.count = 0

    def _path(self, part: int) -> str:
        return os.path.join(self.dir, f"part-{part:05d}.bin")

    def add(self, records: np.ndarray) -> None:
        if records.size == 0:
            return
        records = np.asarray(records, dtype=self.dtype)
        part = (records["hash"] >> np.uint64(64 - self.bits)).astype(np.int64) if self.bits else \
            np.zeros(records.size, dtype=np.int64)
        order = np.argsort(part, kind="stable")
        records, part = records[order], part[order]
        bounds = np.searchsorted(part, np.arange((1 << self.bits) + 1))
        for p in np.flatnonzero(np.diff(bounds)).tolist():
            with open(self._path(p), "ab") as f:
                records[bounds[p]:bounds[p + 1]].tofile(f)
        self.count += int(records.size)

    def partitions(self) -> Iterator[np.ndarray]:
        """Each non-empty partition's records, sorted by hash (stable: map order kept within a hash)."""
        for p in range(1 << self.bits):
            path = self._path(p)
            if not os.path.exists(path):
                continue
            recs = np.fromfile(path, dtype=self.dtype)
            yield recs[np.argsort(recs["hash"], kind="stable")]

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PartitionSpill:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def equal_runs(sorted_hashes: np.ndarray, min_size: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of runs of equal values of length >= min_size in a sorted array."""
    if sorted_hashes.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    change = np.flatnonzero(sorted_hashes[1:] != sorted_hashes[:-1]) + 1
    starts = np.concatenate([[0], change])
    ends = np.concatenate([change, [sorted_hashes.size]])
    keep = ends - starts >= min_size
    return starts[keep], ends[keep]

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
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from olmax.audit.phases import Progress
from olmax.beam import guarded, raise_first_failure


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


def equal_runs(sorted_hashes: np.ndarray, min_size: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of runs of equal values of length >= min_size in a sorted array."""
    if sorted_hashes.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    change = np.flatnonzero(sorted_hashes[1:] != sorted_hashes[:-1]) + 1
    starts = np.concatenate([[0], change])
    ends = np.concatenate([change, [sorted_hashes.size]])
    keep = ends - starts >= min_size
    return starts[keep], ends[keep]


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


def map_reduce(
    elements: Iterable,
    map_fn: Callable,
    reduces: dict[str, tuple[np.dtype, Callable]],
    *,
    bits: int = 4,
    threads: int = 2,
    work_dir: str | None = None,
    progress: MapProgress | None = None,
) -> tuple[list, dict[str, list]]:
    """Map every element, spill its records by hash partition, reduce one partition at a time (the local
    runner; dedup_beam.map_reduce_beam runs the same functions on Apache Beam, with the same result).

    `map_fn(element)` is a generator: it yields `(kind, records)` (a structured array of `reduces[kind][0]`
    with a uint64 `hash` field) and returns a summary. Elements are mapped in `threads` threads; an
    OlmaxError of one (the first in element order) is raised after all were mapped. Each kind's
    `reduces[kind][1](records)` then gets each non-empty partition's records (in no particular order).
    Returns (the summaries in element order, {kind: the reduce results in partition order}). `progress`:
    bars for the map (elements, and their tokens when given) and the reduce (partitions)."""
    spills = {k: PartitionSpill(dtype, bits=bits, work_dir=work_dir) for k, (dtype, _) in reduces.items()}
    lock = threading.Lock()
    elements = list(elements)
    progress = progress or MapProgress(False)
    mapped = Progress(progress.enabled, len(elements), f"{progress.what} map", "file")

    def consume(item):
        gen = map_fn(item[1])
        while True:
            try:
                kind, records = next(gen)
            except StopIteration as stop:
                with lock:
                    mapped.update(1, None if progress.tokens is None else int(progress.tokens[item[0]]))
                return stop.value
            parts = split_partitions(records, bits)
            with lock:
                spills[kind].add_parts(parts)

    try:
        with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
            summaries = list(pool.map(guarded(consume, order=lambda item: (item[0],)), enumerate(elements)))
        mapped.close()
        raise_first_failure(summaries)
        out: dict[str, list] = {}
        total = sum(spill.parts() for spill in spills.values())
        with Progress(progress.enabled, total, f"{progress.what} reduce", "partition") as bar:
            for k, (_, fn) in reduces.items():
                out[k] = []
                for part in spills[k].partitions(sort=False):
                    out[k].append(fn(part))
                    bar.update(1)
        return summaries, out
    finally:
        mapped.close()
        for spill in spills.values():
            spill.close()


@dataclass(frozen=True)
class MapProgress:
    """What `map_reduce` shows while it runs: bars when `enabled` (on a terminal), each element's tokens
    beside the files mapped when `tokens` is given, `what` naming the pass."""

    enabled: bool
    tokens: Sequence[int] | None = None
    what: str = "content"

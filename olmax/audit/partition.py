"""Map outputs → hash-partitioned spill files → one partition at a time: the audit's bounded-memory reduce.

Every audit pass has the same shape: a per-file *map* emits fixed-width records keyed by a 64-bit
hash; records are routed by the hash's top `bits` bits to one of 2^bits append-only spill files; the
*reduce* then loads one partition, sorts it by hash and finds equal keys. Peak memory is one file's
map output plus one partition, whatever the corpus size, and each partition can be reduced on a
different machine (the same shape a cluster engine runs).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from olmax.audit.phases import Progress
from olmax.beam import guarded, raise_first_failure
from olmax.dedup.spill import PartitionSpill, split_partitions


def equal_runs(sorted_hashes: np.ndarray, min_size: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of runs of equal values of length >= min_size in a sorted array."""
    if sorted_hashes.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    change = np.flatnonzero(sorted_hashes[1:] != sorted_hashes[:-1]) + 1
    starts = np.concatenate([[0], change])
    ends = np.concatenate([change, [sorted_hashes.size]])
    keep = ends - starts >= min_size
    return starts[keep], ends[keep]


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

"""MinHash clustering out of core: `olmax.dedup.minhash.cluster`'s tables on scratch disk, so that a corpus
many times the memory is deduplicated in a fixed budget, with the same clusters.

In memory, `cluster` holds every document's shingles (8 bytes each) and signature (4 bytes a hash, 1.1 KB
with Dolma 3's 26 x 11), then buckets each band. Here (`SpilledTables`, filled batch by batch):
- the shingles are appended to a scratch file: the verification reads the candidate pairs' sets only;
- a document's signature is replaced by its band keys (8 bytes a band), appended to one scratch column per
  band;
- the shingle counts stay in memory (8 bytes a document).
`cluster_spilled` then reads one band's keys back at a time (8 bytes a document), buckets them as
`cluster` does (`band_pairs`) and routes the pairs, by a hash of the pair, to partition files on scratch
(olmax.dedup.spill.PartitionSpill); each partition's pairs are made unique, counted and verified on
the shingle sets (read from the scratch file for the documents of the partition's pairs only, never
memory-mapped: mapped pages would count as resident), and the verified edges (the near-duplicates alone) are joined into components in memory
(`components`). Peak memory: about 40 bytes a document for the band being bucketed, one partition of
pairs, and the edges. Candidates, edges, kept documents and Jaccards equal `cluster`'s
(tests/dedup/test_minhash_spill.py).
"""

from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np

from olmax.dedup.minhash import Clusters, band_keys, band_pairs, components, jaccard
from olmax.dedup.params import MinHashParams
from olmax.dedup.spill import PartitionSpill, ScratchColumn, partition_bits
from olmax.hashing import mix64_array

_PAIR = np.dtype([("hash", np.uint64), ("code", np.int64)])
SCRATCH_PREFIX = ".olmax-minhash-"  # the scratch folder's name (hidden in an output folder)


def remove_stale(work_dir: str | None) -> None:
    """Scratch folders a killed run left in `work_dir` (a rerun makes its tables again)."""
    if work_dir and os.path.isdir(work_dir):
        for name in os.listdir(work_dir):
            if name.startswith(SCRATCH_PREFIX):
                shutil.rmtree(os.path.join(work_dir, name), ignore_errors=True)


class SpilledTables:
    """The MinHash tables of documents 0, 1, ... in scratch folder files (`add` per batch, in order)."""

    def __init__(self, params: MinHashParams, work_dir: str | None = None):
        self.params = params
        if work_dir:
            os.makedirs(work_dir, exist_ok=True)
        self.dir = tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=work_dir)
        self.shingles = ScratchColumn(os.path.join(self.dir, "shingles.bin"))
        self.keys = [ScratchColumn(os.path.join(self.dir, f"band-{b:03d}.bin")) for b in range(params.bands)]
        self._counts: list[np.ndarray] = []

    def add(self, shingles: np.ndarray, counts: np.ndarray, sig: np.ndarray) -> None:
        """A batch: its documents' shingles (concatenated, sorted within each document), their counts
        and their signatures (kept as band keys only)."""
        self.shingles.append(np.asarray(shingles, np.uint64).view(np.int64))
        keys = band_keys(sig, self.params)
        for b, col in enumerate(self.keys):
            col.append(np.ascontiguousarray(keys[:, b]).view(np.int64))
        self._counts.append(np.asarray(counts, np.int64))

    @property
    def documents(self) -> int:
        return sum(c.size for c in self._counts)

    def disk_bytes(self) -> int:
        return sum(os.path.getsize(os.path.join(self.dir, f)) for f in os.listdir(self.dir))

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> SpilledTables:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def cluster_spilled(tables: SpilledTables, bits: int | None = None) -> Clusters:
    """`cluster` over the spilled tables (module docstring). `bits`: 2^bits pair partitions (None: sized
    for about 2 pairs a document a band); the result does not depend on it."""
    params = tables.params
    counts = np.concatenate(tables._counts) if tables._counts else np.zeros(0, np.int64)
    n = counts.size
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    for col in (tables.shingles, *tables.keys):
        col.close()  # written: read back below by explicit reads, never mapped (mapped pages count as resident)
    sets = _Sets(tables.shingles.path, offsets)
    members = np.flatnonzero(counts > 0)  # no shingles: nothing to compare
    if bits is None:
        bits = partition_bits(2 * n * params.bands, _PAIR.itemsize)
    edges, candidates = [], 0
    with PartitionSpill(_PAIR, bits=bits, work_dir=tables.dir) as spill:
        if members.size >= 2:
            for col in tables.keys:
                keys = _read_column(col.path, n)[members].view(np.uint64)
                a, b = band_pairs(keys, members)
                del keys
                if a.size:
                    codes = a * np.int64(n) + b
                    recs = np.empty(codes.size, _PAIR)
                    recs["hash"], recs["code"] = mix64_array(codes.view(np.uint64)), codes
                    spill.add(recs)
        for recs in spill.partitions(sort=False):
            codes = np.unique(recs["code"])
            candidates += int(codes.size)
            sim = sets.jaccard(codes // n, codes % n)
            edges.append(codes[sim >= params.threshold])
    codes = np.sort(np.concatenate(edges)) if edges else np.zeros(0, np.int64)
    pairs = np.stack([codes // max(n, 1), codes % max(n, 1)], axis=1)
    return components(None, offsets, pairs, candidates, similarity=sets.jaccard)


def _read_column(path: str, n: int) -> np.ndarray:
    """A scratch column's `n` int64 values, read into memory."""
    out = np.empty(n, np.int64)
    if n:
        with open(path, "rb") as f:
            f.readinto(memoryview(out).cast("B"))
    return out


class _Sets:
    """The spilled shingle sets, read from the scratch file for the documents a verification needs."""

    def __init__(self, path: str, offsets: np.ndarray):
        self.path, self.offsets = path, offsets

    def jaccard(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Exact Jaccard of the shingle sets of documents a[i] and b[i] (`olmax.dedup.minhash.jaccard`)."""
        a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
        if a.size == 0:
            return np.zeros(0, np.float64)
        docs = np.unique(np.concatenate([a, b]))
        starts, counts = self.offsets[docs], np.diff(self.offsets)[docs]
        sub_off = np.zeros(docs.size + 1, np.int64)
        np.cumsum(counts, out=sub_off[1:])
        sub = np.empty(int(sub_off[-1]), np.uint64)
        view = memoryview(sub).cast("B")
        with open(self.path, "rb") as f:
            for i, (start, count) in enumerate(zip(starts.tolist(), counts.tolist())):
                if count:
                    f.seek(start * 8)
                    f.readinto(view[int(sub_off[i]) * 8 : (int(sub_off[i]) + count) * 8])
        return jaccard(sub, sub_off, np.searchsorted(docs, a), np.searchsorted(docs, b))

"""The loader audit's content checks over the audited window's rows, streamed block by block.

The plan replay hands over each block of emitted rows (plan_replay.py); nothing of the window's size is
held. Per row, one fixed-width record goes to a hash-partitioned spill in scratch (partition.py):
- `ContentTally`: (content hash, physical window, source) of each row, 18 bytes, where the content id is
  the first physical window with the row's tokens (content.py `ContentReport.content_of`) and its hash
  the bijective mix64 of it, so equal hashes are equal contents. One partition at a time then gives the
  unplanned repeats (a content's rows beyond those of its most-emitted physical window) and the
  exposure (per source of a content's first emission, distinct contents seen 1x, 2x, ...).
- `ExposureTally`: each row's instance id, 8 bytes, partitioned by id range so partitions in order are
  ids in order; each partition's serve counts are appended to scratch, then written into the
  `olmax-exposure/1` .npz member by member (a .json exposure file is built in memory: small windows).

Memory: one block's records (about 30 bytes per row of the block) and one partition of about 64 MB of
records with its sort (about 60 bytes per record), whatever the window's length; the disk holds 18 + 8
bytes per emitted row until the reduce, and the exposure file 16 bytes per distinct instance plus its
source label.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zipfile
from collections import Counter

import numpy as np

from olmax.atomic import temp_path
from olmax.audit.phases import Progress
from olmax.dedup.spill import PartitionSpill, ScratchColumn, partition_bits
from olmax.hashing import mix64_array
from olmax.jsonio import write_json

ROW_REC = np.dtype([("hash", "<u8"), ("window", "<i8"), ("source", "<i2")])
ID_REC = np.dtype([("hash", "<u8")])
SPILL_TARGET = 1 << 26  # bytes of records per partition


class ContentTally:
    """Unplanned repeats and exposure of the emitted rows (see the module docstring)."""

    def __init__(self, index, locate, rows: int, work_dir: str | None):
        """`locate(ids)`: (physical window, content id) of each instance id, int64 (content.py's
        `ContentReport.physical_windows` and `content_of`, or a packed index's rows and their first copy);
        `rows`: about how many rows the window emits (sizes the partitions)."""
        self.index, self.locate, self.seq_len = index, locate, index.seq_len
        bits = partition_bits(rows, ROW_REC.itemsize, target_bytes=SPILL_TARGET)
        self.spill = PartitionSpill(ROW_REC, bits=bits, work_dir=work_dir)
        self.rows = 0

    def add(self, ids: np.ndarray) -> None:
        """The instance ids of a block of emitted rows, in emission order."""
        if not ids.size:
            return
        window, cid = self.locate(ids)
        rec = np.empty(ids.size, ROW_REC)
        rec["hash"] = mix64_array(cid.astype(np.uint64))
        rec["window"], rec["source"] = window, self.index.source_ids(ids)
        self.spill.add(rec)
        self.rows += ids.size

    def finish(self, progress: bool = False) -> tuple[int, dict[str, dict[str, int]]]:
        """(unplanned repeat rows, {source: {"<n>x": tokens of distinct contents seen n times}})."""
        unplanned, levels = 0, [Counter() for _ in self.index.label_names]
        bar = Progress(
            progress, self.rows, "content checks: the window's rows", "row", tokens_per=self.seq_len
        )
        try:
            for part in self.spill.partitions(sort=False):  # each in emission order
                bar.update(part.size)
                unplanned += _reduce_rows(part, levels)
        finally:
            bar.close()
            self.spill.close()
        exposure = {
            name: {f"{n}x": c * self.seq_len for n, c in sorted(levels[i].items())}
            for i, name in enumerate(self.index.label_names)
        }
        return unplanned, exposure


def _reduce_rows(part: np.ndarray, levels: list[Counter]) -> int:
    """One partition's ROW_REC records, in emission order: adds its contents' exposure levels to `levels`
    (per source, {times seen: contents}); returns its unplanned repeat rows."""
    order = np.argsort(part["hash"])  # records are in emission order: a content's least index is its first
    h = part["hash"][order]
    starts = np.flatnonzero(np.r_[True, h[1:] != h[:-1]])
    seen = np.diff(np.r_[starts, h.size])
    first = np.minimum.reduceat(order, starts)
    key = (seen << 16) | part["source"][first].astype(np.int64)
    for k, c in zip(*(x.tolist() for x in np.unique(key, return_counts=True))):
        levels[k & 0xFFFF][k >> 16] += c
    window = part["window"][order]
    several = np.flatnonzero(np.minimum.reduceat(window, starts) != np.maximum.reduceat(window, starts))
    if not several.size:  # every content emitted from one physical window only: no unplanned repeat
        return 0
    # the few contents emitted from several windows: their rows beyond their most-emitted window's
    sel = np.concatenate([np.arange(starts[g], starts[g] + seen[g]) for g in several.tolist()])
    hp, wp = h[sel], window[sel]
    by_pair = np.lexsort((wp, hp))
    hp, wp = hp[by_pair], wp[by_pair]
    pair_start = np.flatnonzero(np.r_[True, (hp[1:] != hp[:-1]) | (wp[1:] != wp[:-1])])
    pair_rows = np.diff(np.r_[pair_start, hp.size])
    group = np.flatnonzero(np.r_[True, hp[pair_start][1:] != hp[pair_start][:-1]])
    return int((np.add.reduceat(pair_rows, group) - np.maximum.reduceat(pair_rows, group)).sum())


class ExposureTally:
    """Per-instance serve counts of the emitted rows, spilled by instance-id range (module docstring)."""

    def __init__(self, index, rows: int, work_dir: str | None):
        self.index = index
        self.shift = np.uint64(64 - max(1, int(index.num_instances - 1).bit_length()))
        bits = partition_bits(rows, ID_REC.itemsize, target_bytes=SPILL_TARGET)
        self.spill = PartitionSpill(ID_REC, bits=bits, work_dir=work_dir)
        self.rows = 0

    def add(self, ids: np.ndarray) -> None:
        rec = np.empty(ids.size, ID_REC)
        rec["hash"] = ids.astype(np.uint64) << self.shift  # the id's top bits route it: id order kept
        self.spill.add(rec)
        self.rows += ids.size

    def _counts(self, scratch: str, progress: bool) -> tuple[np.ndarray, np.ndarray]:
        """Each partition's sorted distinct ids and their counts, appended to scratch columns (memory-mapped)."""
        ids = ScratchColumn(os.path.join(scratch, "ids"))
        counts = ScratchColumn(os.path.join(scratch, "counts"))
        try:
            with Progress(
                progress, self.rows, "exposure file: count", "row", tokens_per=self.index.seq_len
            ) as bar:
                for part in self.spill.partitions(sort=False):
                    bar.update(part.size)
                    uniq, n = np.unique(part["hash"] >> self.shift, return_counts=True)
                    ids.append(uniq.astype(np.int64))
                    counts.append(n)
            return ids.read(), counts.read()
        finally:
            ids.close()
            counts.close()

    def write(self, path: str, stream, last_step: int, *, progress: bool = False) -> None:
        """The `olmax-exposure/1` file at `path` (.npz, or .json), atomically: instance_id, count, source,
        seq_len, mix, step (olmax/evals/exposure_file.py)."""
        scratch = tempfile.mkdtemp(prefix="olmax-exposure-", dir=stream.work_dir)
        try:
            ids, counts = self._counts(scratch, progress)
            n = ids.size
            names = np.asarray(self.index.label_names)
            scalars = {
                "seq_len": np.int64(stream.seq_len),
                "mix": np.str_(stream.mix),
                "step": np.int64(last_step),
            }
            if path.endswith(".json"):
                fields = {"instance_id": np.asarray(ids), "count": np.asarray(counts)}
                fields["source"] = names[self.index.source_ids(fields["instance_id"])]
                write_json(path, {"format": "olmax-exposure/1", **fields, **scalars}, indent=None)
                return
            source_dtype = np.dtype(f"<U{max([len(x) for x in names] + [1])}")
            with temp_path(path) as tmp, zipfile.ZipFile(tmp, "w", allowZip64=True) as zf:
                _member(zf, "instance_id", np.dtype(np.int64), n, lambda a, b: ids[a:b])
                _member(zf, "count", np.dtype(np.int64), n, lambda a, b: counts[a:b])
                _member(
                    zf,
                    "source",
                    source_dtype,
                    n,
                    lambda a, b: names[self.index.source_ids(np.asarray(ids[a:b]))],
                )
                for key, value in scalars.items():
                    _member(zf, key, value.dtype, None, lambda a, b, v=value: np.asarray(v))
        finally:
            self.spill.close()
            shutil.rmtree(scratch, ignore_errors=True)


_CHUNK = 1 << 22


def _member(zf: zipfile.ZipFile, key: str, dtype: np.dtype, n: int | None, chunk) -> None:
    """One `.npy` member of an .npz, written chunk by chunk (`n` None: a scalar)."""
    header = {
        "descr": np.lib.format.dtype_to_descr(dtype),
        "fortran_order": False,
        "shape": () if n is None else (n,),
    }
    with zf.open(f"{key}.npy", "w", force_zip64=True) as f:
        np.lib.format.write_array_header_2_0(f, header)
        if n is None:
            f.write(np.asarray(chunk(0, 1), dtype=dtype).tobytes())
            return
        for a in range(0, n, _CHUNK):
            f.write(np.ascontiguousarray(chunk(a, min(n, a + _CHUNK)), dtype=dtype).tobytes())

"""Documents packed whole into fixed-length instances: OLMo-core's `NumpyPackedFSLDataset`, bit for bit.

Contract (OLMo-core 3.0 `NumpyPackedFSLDataset` with local files, `generate_doc_lengths=True`):
- the mix's files are shuffled by `random.Random(source_permutation_seed)` (NumpyDatasetConfig), then
  cut into groups of `source_group_size` consecutive files;
- a file's documents end at each EOS, inclusive (with a BOS id: at each EOS followed by BOS, and at a
  final EOS); tokens after a file's last EOS belong to no document; a document longer than L keeps its
  first L tokens (`truncate`) or is cut into L-token pieces (`fragment`). Documents never cross files;
- each group's documents, in file order, are packed by Optimized Best-Fit Decreasing (`obfd`); its
  bins, in creation order, are its instances; group 0's instances are numbered first;
- instance i is its documents concatenated in bin order, padded with PAD to L; `label_mask` is False
  on the padding and `doc_lens` is OLMo-core's `get_document_lengths` of the padded row.
The packing is a pure function of the files' bytes and the options; it is cached under the work dir
by a key of the file names, sizes and mtimes and every option, written atomically.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import hashlib
import multiprocessing
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from olmax.atomic import temp_path
from olmax.data.index import LabelledFiles
from olmax.data.reader import LocalFiles
from olmax.data.tokenfile import read_tokens, token_count
from olmax.errors import OlmaxError
from olmax.storage import is_url

LONG_DOC_STRATEGIES = ("truncate", "fragment")
_SCAN_CHUNK = 1 << 26  # tokens per scanning pass: bounds the scan's temporaries to ~64M bytes each
_CACHE_VERSION = "olmax-packing-v1"


def _check_strategy(long_doc_strategy: str) -> None:
    if long_doc_strategy not in LONG_DOC_STRATEGIES:
        raise OlmaxError(f"long_doc_strategy must be one of {LONG_DOC_STRATEGIES}, got {long_doc_strategy!r}")


def _spans_from_ends(ends: np.ndarray, max_len: int, long_doc_strategy: str) -> np.ndarray:
    """int64 (n, 2) documents from their exclusive ends (the first starts at 0), capped at max_len."""
    ends = ends.astype(np.int64)
    starts = np.zeros_like(ends)
    starts[1:] = ends[:-1]
    if long_doc_strategy == "truncate":
        return np.stack([starts, np.minimum(ends, starts + max_len)], axis=1)
    # fragment: [s, s+L), [s+L, s+2L), ... the last piece ends at the document's end.
    pieces = np.maximum(-(-(ends - starts) // max_len), 1)
    first = np.cumsum(pieces) - pieces
    k = np.arange(int(pieces.sum()), dtype=np.int64) - np.repeat(first, pieces)
    piece_starts = np.repeat(starts, pieces) + k * max_len
    return np.stack([piece_starts, np.minimum(np.repeat(ends, pieces), piece_starts + max_len)], axis=1)


def _last_tokens(tokens: np.ndarray, eos_token_id: int, bos_token_id: int | None) -> np.ndarray:
    """Positions of the last token of each document: OLMo-core's `iter_document_indices` local rule."""
    if bos_token_id is None:
        return np.flatnonzero(tokens == eos_token_id)
    last = np.flatnonzero((tokens[:-1] == eos_token_id) & (tokens[1:] == bos_token_id))
    if tokens.size and tokens[-1] == eos_token_id:
        last = np.append(last, tokens.size - 1)
    return last


def document_spans(
    tokens: np.ndarray,
    eos_token_id: int,
    max_len: int,
    *,
    bos_token_id: int | None = None,
    long_doc_strategy: str = "truncate",
) -> np.ndarray:
    """int64 (n, 2) [start, end) of each document of one token array, OLMo-core's local-array rule.

    A document ends at its EOS inclusive (with `bos_token_id`: at an EOS followed by BOS, or a final EOS);
    tokens after the last EOS belong to no document; longer than `max_len`: truncated or fragmented.
    """
    _check_strategy(long_doc_strategy)
    tokens = np.asarray(tokens)
    return _spans_from_ends(_last_tokens(tokens, eos_token_id, bos_token_id) + 1, max_len, long_doc_strategy)


def document_lengths(row: np.ndarray, eos_token_id: int, bos_token_id: int | None = None) -> np.ndarray:
    """int32: OLMo-core's `get_document_lengths` of one (padded) row; the tail after the last EOS is a
    segment of its own, so padding after an EOS-terminated document is one more 'document'."""
    n = row.shape[0]
    if bos_token_id is None:
        last = np.flatnonzero(row == eos_token_id)
        if row[-1] != eos_token_id:
            last = np.append(last, n - 1)
    else:
        last = np.append(np.flatnonzero((row[:-1] == eos_token_id) & (row[1:] == bos_token_id)), n - 1)
    return np.diff(last, prepend=-1).astype(np.int32)


def batch_doc_lens(input_ids: np.ndarray, eos_token_id: int, bos_token_id: int | None = None) -> np.ndarray:
    """int32 (R, D): `document_lengths` of each row, zero-padded to the most documents in these rows, as
    OLMo-core's collator pads a local batch's `doc_lens`."""
    lens = [document_lengths(row, eos_token_id, bos_token_id) for row in input_ids]
    out = np.zeros((len(lens), max((x.size for x in lens), default=0)), dtype=np.int32)
    for r, x in enumerate(lens):
        out[r, : x.size] = x
    return out


def _check_max_len(max_len: int) -> None:
    if max_len < 1 or max_len & (max_len - 1):
        raise OlmaxError(
            f"--seq-len {max_len} is not a power of two; OLMo-core's packer (OBFD segment "
            f"tree) requires one: use e.g. {1 << max(max_len, 1).bit_length()}"
        )


def obfd(lengths: np.ndarray, max_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Optimized Best-Fit Decreasing, result-identical to OLMo-core's `InstancePacker.pack_documents`.

    Documents are taken by `np.argsort(-lengths)` (int64, numpy's default kind, so ties fall as in
    OLMo-core); each goes to the bin with the smallest remaining capacity >= its length (the oldest such
    bin first), else opens a new bin. Returns (sorted_order int64 (n,): input index of each sorted doc,
    inst_offsets int64 (n_bins + 1,), docs_by_instance int64 (n,): sorted-doc ids per bin in bin order).
    The capacities in use are a two-level bitmap of Python ints (find-next-set-bit in O(1) big-int ops)
    instead of OLMo-core's tree of node objects.
    """
    _check_max_len(max_len)
    lengths = np.asarray(lengths)
    n = lengths.shape[0]
    if n and (lengths.min() < 1 or lengths.max() > max_len):
        raise OlmaxError(
            f"document lengths must lie in [1, {max_len}], got [{lengths.min()}, {lengths.max()}]"
        )
    sorted_order = np.argsort(-1 * lengths.astype(np.int64))
    sorted_lens = lengths[sorted_order].astype(np.int64).tolist()

    shift = (max_len.bit_length() - 1 + 1) // 2  # capacity c lives in word c >> shift, bit c & mask
    mask = (1 << shift) - 1
    words = [0] * ((max_len >> shift) + 1)
    summary = 0  # bit w set iff words[w] != 0
    queues: list[collections.deque | None] = [None] * max_len  # FIFO of bins per remaining capacity
    bin_of = [0] * n
    n_bins = 0
    for i, ln in enumerate(sorted_lens):
        # Smallest capacity c >= ln with a bin: first in ln's own word, else in the next non-empty word.
        w = ln >> shift
        bits = words[w] >> (ln & mask)
        if bits:
            cap = ln + (bits & -bits).bit_length() - 1
        else:
            rest = summary >> (w + 1)
            if rest:
                w += (rest & -rest).bit_length()
                bits = words[w]
                cap = (w << shift) + (bits & -bits).bit_length() - 1
            else:
                cap = 0
        if cap:
            q = queues[cap]
            b = q.popleft()
            if not q:
                w = cap >> shift
                words[w] &= ~(1 << (cap & mask))
                if not words[w]:
                    summary &= ~(1 << w)
            space = cap - ln
        else:
            b = n_bins
            n_bins += 1
            space = max_len - ln
        bin_of[i] = b
        if space:
            q = queues[space]
            if q is None:
                q = queues[space] = collections.deque()
            if not q:
                w = space >> shift
                words[w] |= 1 << (space & mask)
                summary |= 1 << w
            q.append(b)

    bins = np.asarray(bin_of, dtype=np.int64)
    # Docs join a bin in increasing sorted id, so a stable sort by bin gives each bin's docs in order.
    docs_by_instance = np.argsort(bins, kind="stable").astype(np.int64)
    inst_offsets = np.zeros(n_bins + 1, dtype=np.int64)
    np.cumsum(np.bincount(bins, minlength=n_bins), out=inst_offsets[1:])
    return sorted_order.astype(np.int64), inst_offsets, docs_by_instance


def source_permutation(n_files: int, seed: int | None) -> list[int]:
    """OLMo-core's file order under `source_permutation_seed`: range(n) shuffled by random.Random(seed)."""
    order = list(range(n_files))
    if seed is not None:
        random.Random(seed).shuffle(order)
    return order


@dataclass(frozen=True)
class PackSpec:
    """How a mix is packed into instances, as OLMo-core's `NumpyPackedFSLDataset` takes it: the token fields
    (which its fingerprint covers), the long-document strategy and the source groups."""

    eos_token_id: int
    pad_token_id: int
    vocab_size: int
    bos_token_id: int | None = None
    dtype: str = "uint32"
    source_group_size: int = 1
    source_permutation_seed: int | None = None
    long_doc_strategy: str = "truncate"


def file_document_spans(path: str, size: int, max_len: int, spec: PackSpec) -> np.ndarray:
    """`document_spans` of one raw token file, scanned in chunks; a token >= vocab_size is an error."""
    dtype, vocab_size = spec.dtype, spec.vocab_size
    eos_token_id, bos_token_id = spec.eos_token_id, spec.bos_token_id
    tokens = read_tokens(path, dtype)[: token_count(path, size, dtype)]
    n = tokens.size
    if n == 0:
        return np.zeros((0, 2), dtype=np.int64)
    found = []
    for begin in range(0, n, _SCAN_CHUNK):
        end = min(n, begin + _SCAN_CHUNK)
        chunk = tokens[begin:end]
        if chunk.max() >= vocab_size:
            at = begin + int(np.argmax(chunk >= vocab_size))
            raise OlmaxError(
                f"{path}: token {int(tokens[at])} at token offset {at} is >= vocab size "
                f"{vocab_size}; the file was tokenized with another vocabulary or is not {dtype}"
            )
        if bos_token_id is None:
            found.append(begin + np.flatnonzero(chunk == eos_token_id))
        else:  # pairs (EOS, BOS) starting in [begin, end); the final EOS is added once, below
            pair = tokens[begin : min(n, end + 1)]
            found.append(begin + np.flatnonzero((pair[:-1] == eos_token_id) & (pair[1:] == bos_token_id)))
    last = np.concatenate(found)
    if bos_token_id is not None and tokens[-1] == eos_token_id:
        last = np.append(last, n - 1)
    del tokens
    return _spans_from_ends(last + 1, max_len, spec.long_doc_strategy)


def pack_group(
    paths: Sequence[str], sizes: Sequence[int], seq_len: int, spec: PackSpec
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pack one group's documents: (doc_file (group-local), doc_start, doc_len) in instance order, and
    inst_offsets (n_inst + 1,). OLMo-core treats the group as its files concatenated, documents found
    per file: the group's document list is file 0's documents, then file 1's, ..."""
    spans = [file_document_spans(p, s, seq_len, spec) for p, s in zip(paths, sizes)]
    file_of = np.repeat(np.arange(len(spans), dtype=np.int32), [len(s) for s in spans])
    spans_all = np.concatenate(spans) if spans else np.zeros((0, 2), dtype=np.int64)
    lengths = spans_all[:, 1] - spans_all[:, 0]
    sorted_order, inst_offsets, docs_by_instance = obfd(lengths, seq_len)
    docs = sorted_order[docs_by_instance]  # input doc index of each packed doc, in instance order
    return file_of[docs], spans_all[docs, 0], lengths[docs].astype(np.int32), inst_offsets


def _pack_group_job(args: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    return pack_group(*args)


@dataclass(frozen=True)
class PackedIndex(LabelledFiles):
    """The packed instances of a mix; arrays are per packed document in instance order."""

    paths: tuple[str, ...]  # after the source permutation, in group order
    labels: tuple[str, ...]
    sizes: tuple[int, ...]  # bytes
    seq_len: int
    dtype: str
    fingerprint: str
    source_group_size: int
    pad_token_id: int
    eos_token_id: int
    bos_token_id: int | None
    doc_file: np.ndarray = field(repr=False, compare=False)  # int32 (D,): index into paths
    doc_start: np.ndarray = field(repr=False, compare=False)  # int64 (D,): first token offset in the file
    doc_len: np.ndarray = field(repr=False, compare=False)  # int32 (D,)
    inst_offsets: np.ndarray = field(repr=False, compare=False)  # int64 (N + 1,): instance i's docs
    cache_key: str = ""
    cache_path: str | None = None

    @property
    def num_instances(self) -> int:
        return int(self.inst_offsets.shape[0] - 1)

    @property
    def num_documents(self) -> int:
        return int(self.doc_len.shape[0])

    @cached_property
    def num_tokens(self) -> int:
        """Document tokens in the instances (padding excluded)."""
        return int(self.doc_len.sum(dtype=np.int64))

    @property
    def padding_fraction(self) -> float:
        return 1.0 - self.num_tokens / max(1, self.num_instances * self.seq_len)

    @cached_property
    def _reader(self) -> LocalFiles:
        return LocalFiles(self.paths, "packing")

    def _check_ids(self, ids: np.ndarray) -> None:
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_instances):
            raise IndexError(
                f"instance ids must lie in [0, {self.num_instances}), got [{ids.min()}, {ids.max()}]"
            )

    def files_of(self, instance_ids: np.ndarray) -> np.ndarray:
        """int64: the file of each instance's first document (TokenIndex.files_of's meaning for packed rows)."""
        ids = np.asarray(instance_ids, dtype=np.int64)
        self._check_ids(ids)
        return self.doc_file[self.inst_offsets[ids]].astype(np.int64)

    def source_ids(self, instance_ids: np.ndarray) -> np.ndarray:
        """int32: the label id of the file of each instance's first document."""
        ids = np.asarray(instance_ids, dtype=np.int64)
        self._check_ids(ids)
        return self.file_label_ids[self.doc_file[self.inst_offsets[ids]]]

    def instances_covering(self, file_index: int, start: int, end: int) -> np.ndarray:
        """int64: the instances holding any token of file `file_index`'s tokens [start, end)."""
        hit = np.flatnonzero(
            (self.doc_file == file_index) & (self.doc_start < end) & (self.doc_start + self.doc_len > start)
        )
        return np.unique(np.searchsorted(self.inst_offsets, hit, side="right") - 1).astype(np.int64)

    def tokens_by_label(self, instance_ids: np.ndarray | None = None) -> dict[str, int]:
        """Document tokens per source label (padding excluded), in label order: of the whole index, or of the
        rows `instance_ids` (repeats counted), a row's documents each under its own file's label."""
        if instance_ids is None:
            docs = slice(None)
        else:
            ids = np.asarray(instance_ids, dtype=np.int64)
            lo, n = self.inst_offsets[ids], self.inst_offsets[ids + 1] - self.inst_offsets[ids]
            docs = np.repeat(lo - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))  # each row's documents
        per = np.bincount(
            self.file_label_ids[self.doc_file[docs]],
            weights=self.doc_len[docs],
            minlength=len(self.label_names),
        )
        return {name: int(x) for name, x in zip(self.label_names, per)}

    def instance_documents(self, instance_id: int) -> list[tuple[int, int, int]]:
        """(file index, start, end) token spans that instance `instance_id` holds, in row order."""
        i = int(instance_id)
        self._check_ids(np.asarray([i]))
        lo, hi = int(self.inst_offsets[i]), int(self.inst_offsets[i + 1])
        return [
            (int(f), int(s), int(s) + int(n))
            for f, s, n in zip(self.doc_file[lo:hi], self.doc_start[lo:hi], self.doc_len[lo:hi])
        ]

    def read(self, instance_ids: np.ndarray) -> dict[str, np.ndarray]:
        """Rows of these instances: input_ids int32 (n, L), label_mask bool (n, L), source int32 (n,),
        instance_ids int64 (n,). Their document lengths, when wanted, are `doc_lens(input_ids)`."""
        ids = np.asarray(instance_ids, dtype=np.int64).reshape(-1)
        self._check_ids(ids)
        buf = np.zeros((ids.size, self.seq_len), dtype=self.dtype)
        used = np.zeros(ids.size, dtype=np.int64)
        for r, i in enumerate(ids.tolist()):
            pos = 0
            for d in range(int(self.inst_offsets[i]), int(self.inst_offsets[i + 1])):
                n = int(self.doc_len[d])
                self._reader.read_into(int(self.doc_file[d]), int(self.doc_start[d]), buf[r, pos : pos + n])
                pos += n
            used[r] = pos
        # Token ids are < 2^31, so uint32 reinterprets as int32 with no copy.
        input_ids = buf.view(np.int32) if buf.dtype == np.uint32 else buf.astype(np.int32)
        label_mask = np.arange(self.seq_len)[None, :] < used[:, None]
        input_ids[~label_mask] = self.pad_token_id
        return {
            "input_ids": input_ids,
            "label_mask": label_mask,
            "source": self.source_ids(ids),
            "instance_ids": ids,
        }

    def doc_lens(self, input_ids: np.ndarray) -> np.ndarray:
        """OLMo-core's `doc_lens` of packed rows (`batch_doc_lens` with this index's EOS and BOS)."""
        return batch_doc_lens(input_ids, self.eos_token_id, self.bos_token_id)


def packed_fingerprint(paths: Sequence[str], sizes: Sequence[int], seq_len: int, spec: PackSpec) -> str:
    """OLMo-core's `NumpyPackedFSLDataset.fingerprint` (v2.0, local files): sha256 over the class name,
    its fingerprint fields (source_group_size only when > 1) and each file's basename and byte size."""
    h = hashlib.sha256()
    h.update(b"class=NumpyPackedFSLDataset")
    fields = [
        ("vocab_size", spec.vocab_size),
        ("pad_token_id", spec.pad_token_id),
        ("eos_token_id", spec.eos_token_id),
        ("dtype", np.dtype(spec.dtype).type),
        ("long_doc_strategy", spec.long_doc_strategy),
        ("bos_token_id", spec.bos_token_id),
        ("sequence_length", seq_len),
    ]
    if spec.source_group_size > 1:
        fields.append(("source_group_size", spec.source_group_size))
    for name, value in fields:
        h.update(f"{name}={value},".encode())
    for path, size in zip(paths, sizes, strict=True):
        h.update(f"path={os.path.basename(path)},size={size},".encode())
    return h.hexdigest()


def _stat_files(paths: Sequence[str], itemsize: int, dtype: str) -> tuple[list[int], list[int]]:
    """(byte sizes, mtimes in ns); a missing file, a URL or a size off the token grid is an error."""
    sizes, mtimes = [], []
    for path in paths:
        if is_url(path):
            raise OlmaxError(
                f"{path}: packed (document) instances need local token files, since OLMo-core "
                f"takes remote files' document boundaries from metadata files; mirror it locally"
            )
        try:
            st = os.stat(path)
        except FileNotFoundError as e:
            raise OlmaxError(
                f"{path}: token file not found; fix the path in the mix (or --base-dir) or run "
                f"`olmax data prepare` first"
            ) from e
        token_count(path, st.st_size, dtype)
        sizes.append(int(st.st_size))
        mtimes.append(int(st.st_mtime_ns))
    return sizes, mtimes


def _pack_all(
    groups: list[tuple[list[str], list[int]]], seq_len: int, spec: PackSpec, workers: int, progress: bool
) -> list[tuple[np.ndarray, ...]]:
    jobs = [(paths, sizes, seq_len, spec) for paths, sizes in groups]
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(jobs), desc="packing groups", unit="group")
    try:
        if workers <= 1 or len(jobs) <= 1:
            results = []
            for job in jobs:
                results.append(_pack_group_job(job))
                if bar is not None:
                    bar.update()
            return results
        # spawn, not fork: the caller may hold JAX/XLA threads, which a forked child must not inherit.
        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            results = []
            for result in pool.map(_pack_group_job, jobs):
                results.append(result)
                if bar is not None:
                    bar.update()
            return results
    finally:
        if bar is not None:
            bar.close()


def build_packed_index(
    paths: Sequence[str],
    labels: Sequence[str],
    seq_len: int,
    spec: PackSpec,
    *,
    work_dir: str | None = None,
    progress: bool = False,
    workers: int | None = None,
) -> PackedIndex:
    """Pack the mix `paths` (mix order, before the source permutation) into instances of `seq_len` tokens,
    as `spec` says.

    With `work_dir`, the packing is cached in WORK_DIR/packing/<key>.npz and reused; `workers` processes
    pack groups in parallel (default: one per CPU for mixes over 2^26 tokens, else 1).
    """
    _check_max_len(seq_len)
    _check_strategy(spec.long_doc_strategy)
    source_group_size, source_permutation_seed = spec.source_group_size, spec.source_permutation_seed
    if source_group_size < 1:
        raise OlmaxError(f"source_group_size must be >= 1, got {source_group_size}")
    if len(paths) != len(labels):
        raise OlmaxError(f"{len(paths)} paths but {len(labels)} labels")
    if not paths:
        raise OlmaxError("the mix has no files")
    spec = dataclasses.replace(spec, dtype=np.dtype(spec.dtype).name)
    dtype = spec.dtype
    order = source_permutation(len(paths), source_permutation_seed)
    paths = tuple(str(paths[i]) for i in order)
    labels = tuple(labels[i] for i in order)
    sizes, mtimes = _stat_files(paths, np.dtype(dtype).itemsize, dtype)

    key_text = repr(
        (
            _CACHE_VERSION,
            [(os.path.basename(p), s, m) for p, s, m in zip(paths, sizes, mtimes)],
            seq_len,
            spec.eos_token_id,
            spec.bos_token_id,
            spec.vocab_size,
            dtype,
            spec.long_doc_strategy,
            source_group_size,
            source_permutation_seed,
        )
    )
    key = hashlib.sha256(key_text.encode()).hexdigest()[:32]
    cache_path = os.path.join(work_dir, "packing", f"{key}.npz") if work_dir else None
    arrays = _load_cache(cache_path, key) if cache_path else None
    if arrays is None:
        arrays = _pack_mix(paths, sizes, seq_len, spec, workers, progress)
        if cache_path:
            with temp_path(cache_path, suffix=".npz") as tmp:
                np.savez(tmp, key=np.asarray(key), **arrays)
    fingerprint = packed_fingerprint(paths, sizes, seq_len, spec)
    return PackedIndex(
        paths=paths,
        labels=labels,
        sizes=tuple(sizes),
        seq_len=seq_len,
        dtype=dtype,
        fingerprint=fingerprint,
        source_group_size=source_group_size,
        pad_token_id=spec.pad_token_id,
        eos_token_id=spec.eos_token_id,
        bos_token_id=spec.bos_token_id,
        cache_key=key,
        cache_path=cache_path,
        **arrays,
    )


def _load_cache(cache_path: str, key: str) -> dict[str, np.ndarray] | None:
    if not os.path.isfile(cache_path):
        return None
    try:
        with np.load(cache_path) as z:
            if str(z["key"]) != key:
                return None
            return {name: z[name] for name in ("doc_file", "doc_start", "doc_len", "inst_offsets")}
    except (OSError, ValueError, KeyError):
        return None  # unreadable: repack and overwrite


def _pack_mix(
    paths: tuple[str, ...],
    sizes: list[int],
    seq_len: int,
    spec: PackSpec,
    workers: int | None,
    progress: bool,
) -> dict[str, np.ndarray]:
    """Pack every group and number the instances group by group."""
    dtype, group_size = spec.dtype, spec.source_group_size
    starts = list(range(0, len(paths), group_size))
    groups = [(list(paths[s : s + group_size]), sizes[s : s + group_size]) for s in starts]
    if workers is None:
        total_tokens = sum(sizes) // np.dtype(dtype).itemsize
        workers = min(os.cpu_count() or 1, len(groups)) if total_tokens > (1 << 26) else 1
    results = _pack_all(groups, seq_len, spec, workers, progress)
    doc_file = np.concatenate([r[0] + s for r, s in zip(results, starts)]).astype(np.int32)
    doc_start = np.concatenate([r[1] for r in results]).astype(np.int64)
    doc_len = np.concatenate([r[2] for r in results]).astype(np.int32)
    counts = np.concatenate([np.diff(r[3]) for r in results]).astype(np.int64)
    inst_offsets = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=inst_offsets[1:])
    if doc_len.size == 0:
        raise OlmaxError(
            f"{paths[0]}: no complete document in any file of the mix ({len(paths)} files): no "
            f"EOS token {spec.eos_token_id} found; check the EOS id, the dtype ({dtype}) "
            f"and that the files are tokenized documents"
        )
    return {"doc_file": doc_file, "doc_start": doc_start, "doc_len": doc_len, "inst_offsets": inst_offsets}

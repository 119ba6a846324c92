"""Token files to fixed-length instances: sizes, the global instance numbering and the fingerprint.

Contract (OLMo-core `NumpyFSLDataset`): files are taken in mix order; file f holds
floor(tokens_f / L) instances of L consecutive tokens and its tail is dropped; global instance i is
window i - offset_f of the file f whose range [offset_f, offset_f + count_f) holds i. Windows ignore
document boundaries. The fingerprint is OLMo-core's, bit for bit, so a checkpoint written by either
side refuses data whose names, sizes, dtype or special tokens changed.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from olmax.data.mixfile import Mix, read_mix
from olmax.data.stream import DOLMA2_EOS, DOLMA2_PAD, DOLMA2_VOCAB_SIZE
from olmax.data.tokenfile import token_count
from olmax.errors import OlmaxError
from olmax.storage import is_url, url_filesystem


def _dtype_class(dtype: type | np.dtype | str) -> type:
    """The numpy scalar class (`np.uint32`), which is what OLMo-core formats into its fingerprint."""
    return np.dtype(dtype).type


@dataclass(frozen=True)
class TokenFields:
    """The fields OLMo-core's `NumpyFSLDataset` fingerprints beside its files: the token dtype and the
    special ids (default dolma2's, as `TokenizerConfig.dolma2()` gives them)."""

    dtype: type | np.dtype | str = np.uint32
    vocab_size: int = DOLMA2_VOCAB_SIZE
    eos_token_id: int = DOLMA2_EOS
    pad_token_id: int = DOLMA2_PAD
    bos_token_id: int | None = None
    max_target_sequence_length: int | None = None


def data_fingerprint(
    paths: Sequence[str], *, sizes: Sequence[int] | None = None, fields: TokenFields = TokenFields()
) -> str:
    """OLMo-core's `NumpyFSLDataset.fingerprint` (version v2.0) for these token files.

    sha256 over the class name, the special-token/dtype fields and each file's basename and byte size;
    the sequence length is not part of it. `sizes` (bytes) skips the stat of each file when known.
    """
    if sizes is None:
        sizes = file_sizes(paths)
    h = hashlib.sha256()
    h.update(b"class=NumpyFSLDataset")
    named = (
        ("vocab_size", fields.vocab_size),
        ("pad_token_id", fields.pad_token_id),
        ("eos_token_id", fields.eos_token_id),
        ("dtype", _dtype_class(fields.dtype)),
        ("max_target_sequence_length", fields.max_target_sequence_length),
        ("bos_token_id", fields.bos_token_id),
    )
    for name, value in named:
        h.update(f"{name}={value},".encode())
    for path, size in zip(paths, sizes, strict=True):
        h.update(f"path={os.path.basename(path)},size={size},".encode())
    return h.hexdigest()


def _size_of(path: str) -> int:
    try:
        if is_url(path):
            fs, fs_path = url_filesystem(path)
            return int(fs.size(fs_path))
        return os.stat(path).st_size
    except FileNotFoundError as e:
        raise OlmaxError(
            f"{path}: token file not found; fix the path in the mix (or --base-dir) "
            f"or run `olmax data prepare` first"
        ) from e


def file_sizes(paths: Sequence[str], *, threads: int = 16) -> list[int]:
    """Byte size of each file, in order; remote files are stat'ed in parallel."""
    if not any(is_url(p) for p in paths):
        return [_size_of(p) for p in paths]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(_size_of, paths))


class LabelledFiles:
    """Source labels of an index's files (`labels`, one per entry of `paths`), shared by the fixed-window
    and the packed index."""

    labels: tuple[str, ...]

    @cached_property
    def label_names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.labels))

    @cached_property
    def file_label_ids(self) -> np.ndarray:
        """int32 (F,): each file's source id (an index into `label_names`)."""
        ids = {name: i for i, name in enumerate(self.label_names)}
        return np.asarray([ids[label] for label in self.labels], dtype=np.int32)


@dataclass(frozen=True)
class TokenIndex(LabelledFiles):
    """The instances of a mix at sequence length `seq_len`: what the order permutes."""

    paths: tuple[str, ...]
    labels: tuple[str, ...]
    sizes: tuple[int, ...]
    seq_len: int
    dtype: str = "uint32"
    fingerprint: str = ""

    @cached_property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize

    @cached_property
    def counts(self) -> np.ndarray:
        """int64 (F,): instances per file, floor(tokens / L)."""
        return np.asarray(self.sizes, dtype=np.int64) // (self.itemsize * self.seq_len)

    @cached_property
    def offsets(self) -> np.ndarray:
        """int64 (F + 1,): global index of each file's first instance, then the total."""
        return np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)

    @property
    def num_instances(self) -> int:
        return int(self.offsets[-1])

    @property
    def num_tokens(self) -> int:
        """Tokens the instances cover (file tails excluded)."""
        return self.num_instances * self.seq_len

    def locate(self, instance_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(file index, first token offset in that file) of each global instance id, vectorized."""
        ids = np.asarray(instance_ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_instances):
            raise IndexError(
                f"instance ids must lie in [0, {self.num_instances}), got [{ids.min()}, {ids.max()}]"
            )
        files = np.searchsorted(self.offsets, ids, side="right") - 1
        return files, (ids - self.offsets[files]) * self.seq_len

    def instance_documents(self, instance_id: int) -> list[tuple[int, int, int]]:
        """[(file index, start, end)]: the one token span of the file that instance `instance_id` is."""
        f, a = self.locate(np.asarray([instance_id]))
        return [(int(f[0]), int(a[0]), int(a[0]) + self.seq_len)]

    def instances_covering(self, file_index: int, start: int, end: int) -> np.ndarray:
        """int64: the instances holding any token of file `file_index`'s tokens [start, end) (instance j of
        a file is its tokens [jL, (j+1)L); a tail shorter than L is never served)."""
        seq, n = self.seq_len, int(self.counts[file_index])
        lo, hi = start // seq, min(n, (max(end, start + 1) - 1) // seq + 1)
        return np.arange(lo, max(lo, hi), dtype=np.int64) + int(self.offsets[file_index])

    def files_of(self, instance_ids: np.ndarray) -> np.ndarray:
        """int64: the file (index into `paths`) each global instance id is read from."""
        return self.locate(instance_ids)[0]

    def source_ids(self, instance_ids: np.ndarray) -> np.ndarray:
        """int32: the source (label) id of each global instance id."""
        files, _ = self.locate(instance_ids)
        return self.file_label_ids[files]

    def tokens_by_label(self) -> dict[str, int]:
        """Instance tokens per source label, in label order."""
        per = np.bincount(self.file_label_ids, weights=self.counts, minlength=len(self.label_names))
        return {name: int(n) * self.seq_len for name, n in zip(self.label_names, per)}


def index_from_sizes(
    paths: Sequence[str],
    labels: Sequence[str],
    sizes: Sequence[int],
    seq_len: int,
    *,
    fields: TokenFields = TokenFields(),
    allow_short_files: bool = False,
) -> TokenIndex:
    """Validate byte sizes and build the index; `fields` (the dtype, the special ids) go to
    `data_fingerprint`."""
    dtype = fields.dtype
    if seq_len <= 0:
        raise OlmaxError(f"--seq-len must be positive, got {seq_len}")
    itemsize = np.dtype(dtype).itemsize
    for path, size in zip(paths, sizes, strict=True):
        if token_count(path, size, dtype) < seq_len and not allow_short_files:
            raise OlmaxError(
                f"{path}: holds {size // itemsize} tokens, fewer than --seq-len {seq_len}, "
                f"so it would give no instance; drop it from the mix or lower --seq-len"
            )
    fingerprint = data_fingerprint(paths, sizes=sizes, fields=fields)
    return TokenIndex(
        paths=tuple(paths),
        labels=tuple(labels),
        sizes=tuple(int(s) for s in sizes),
        seq_len=seq_len,
        dtype=np.dtype(dtype).name,
        fingerprint=fingerprint,
    )


def build_index(
    mix: Mix,
    seq_len: int,
    *,
    fields: TokenFields = TokenFields(),
    allow_short_files: bool = False,
) -> TokenIndex:
    """Stat every file of `mix` and index it at sequence length `seq_len`.

    Errors (OlmaxError, naming the file): missing file, size not a multiple of the token size, a file
    shorter than `seq_len` (OLMo-core silently gives it no instances; `allow_short_files` does too).
    """
    sizes = file_sizes(mix.paths)
    return index_from_sizes(
        mix.paths,
        mix.labels,
        sizes,
        seq_len,
        fields=fields,
        allow_short_files=allow_short_files,
    )


def open_index(
    mix: str, seq_len: int, *, base_dir: str | None = None, tokenizer: str | None = None, **kwargs
) -> TokenIndex:
    """`read_mix` then `build_index`: the index of mix file `mix` at sequence length `seq_len`."""
    return build_index(read_mix(mix, base_dir=base_dir, tokenizer=tokenizer), seq_len, **kwargs)

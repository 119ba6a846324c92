"""Where documents are in a token file: one reader for the audits, `olmax data which` and the exposure join.

Document boundaries come from the shard's `.csv.gz` sidecar when it exists (rows start,end,id,...),
else from EOS tokens (each document ends with one; a tail without EOS is a last document; ids are
then "#i", the document's ordinal in its file). `DocumentCache` keeps each file's boundaries and ids
as .npy files in a work dir (built once per file, memory-mapped after), so a question about a few
token positions of a thousand 1 GB shards reads a few pages of each instead of every sidecar.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from olmax.data.shards import check_sidecar, read_sidecar, sidecar_path
from olmax.data.stream import DOLMA2_EOS
from olmax.data.tokenfile import read_tokens
from olmax.storage import is_url


@dataclass(frozen=True)
class Documents:
    """Token ranges [starts[i], ends[i]) of a file's documents and their ids (sidecar ids or ordinals)."""

    starts: np.ndarray
    ends: np.ndarray
    ids: Sequence[str] | None  # sidecar ids (a tuple, or memory-mapped); None: document i is f"#{i}"

    def id_of(self, i: int) -> str:
        return self.ids[i] if self.ids is not None else f"#{i}"

    def doc_at(self, positions: np.ndarray) -> np.ndarray:
        """int64: index of the document holding each token position (-1 before the first)."""
        return np.searchsorted(self.starts, positions, side="right") - 1


def documents(path: str, tokens: np.ndarray | None = None, eos_token_id: int = DOLMA2_EOS) -> Documents:
    """The documents of token file `path` (sidecar when present, else EOS scan of `tokens`)."""
    side = sidecar_path(path)
    if not is_url(path) and os.path.exists(side):
        rows = read_sidecar(side)
        check_sidecar(path, rows, len(tokens) if tokens is not None else os.path.getsize(path) // 4)
        starts = np.fromiter((r.start for r in rows), dtype=np.int64, count=len(rows))
        ends = np.fromiter((r.end for r in rows), dtype=np.int64, count=len(rows))
        return Documents(starts, ends, tuple(r.id for r in rows))
    if tokens is None:
        tokens = read_tokens(path)
    ends = np.flatnonzero(np.asarray(tokens) == eos_token_id).astype(np.int64) + 1
    if ends.size == 0 or ends[-1] != len(tokens):
        ends = np.concatenate([ends, [len(tokens)]]) if len(tokens) else ends
    starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
    return Documents(starts, ends, None)


class DocumentCache:
    """`get(path)`: a file's Documents, memory-mapped from `work_dir/documents/` (built on first use,
    written atomically; keyed by the file's absolute path, size and modification time, and its
    sidecar's)."""

    def __init__(self, work_dir: str | os.PathLike):
        self.folder = Path(work_dir) / "documents"
        self._open: dict[str, Documents] = {}

    def _key(self, path: str) -> str:
        parts = [os.path.abspath(path)]
        for p in (path, sidecar_path(path)):
            if os.path.exists(p):
                st = os.stat(p)
                parts += [str(st.st_size), str(st.st_mtime_ns)]
        return hashlib.blake2b("\0".join(parts).encode(), digest_size=12).hexdigest()

    def get(self, path: str) -> Documents:
        if path in self._open:
            return self._open[path]
        if is_url(path):
            docs = documents(path)
        else:
            stem = self.folder / self._key(path)
            files = [Path(f"{stem}.{name}.npy") for name in ("starts", "ends", "ids")]
            if not all(f.exists() for f in files[:2]):
                from olmax.atomic import temp_path

                docs = documents(path)
                ids = np.asarray(
                    [i.encode("utf-8") for i in docs.ids] if docs.ids is not None else [], dtype=np.bytes_
                )
                for f, arr in zip(files, (docs.starts, docs.ends, ids)):
                    with temp_path(f, suffix=".npy") as tmp:
                        np.save(tmp, arr)
            starts, ends = (np.load(f, mmap_mode="r") for f in files[:2])
            ids = np.load(files[2], mmap_mode="r") if files[2].exists() else np.zeros(0, np.bytes_)
            docs = Documents(starts, ends, _LazyIds(ids) if ids.size else None)
        self._open[path] = docs
        return docs


class _LazyIds:
    """Sidecar ids from a memory-mapped bytes array, decoded one at a time (a tuple of a million strings
    would be read whole)."""

    def __init__(self, arr: np.ndarray):
        self.arr = arr

    def __getitem__(self, i: int) -> str:
        return bytes(self.arr[i]).decode("utf-8")

    def __len__(self) -> int:
        return int(self.arr.size)

    def index(self, doc_id: str) -> int:
        hit = np.flatnonzero(self.arr == doc_id.encode("utf-8"))
        if not hit.size:
            raise ValueError(doc_id)
        return int(hit[0])

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

from olmax.data.shards import check_sidecar, sidecar_path, sidecar_rows
from olmax.data.stream import DOLMA2_EOS
from olmax.data.token_reads import TokenFile
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


def sidecar_documents(path: str, tokens: int) -> Documents | None:
    """The documents of token file `path` (a path or a URL) from its sidecar, checked against the file's
    `tokens`; None when it has no sidecar."""
    rows = sidecar_rows(path)
    if rows is None:
        return None
    check_sidecar(path, rows, tokens)
    starts = np.fromiter((r.start for r in rows), dtype=np.int64, count=len(rows))
    ends = np.fromiter((r.end for r in rows), dtype=np.int64, count=len(rows))
    return Documents(starts, ends, tuple(r.id for r in rows))


def documents(path: str, tokens: np.ndarray | None = None, eos_token_id: int = DOLMA2_EOS) -> Documents:
    """The documents of token file `path`, a path or a URL (sidecar when present, else an EOS scan of
    `tokens`, or of the file read block by block)."""
    count = len(tokens) if tokens is not None else len(TokenFile(path)) if is_url(path) else None
    known = sidecar_documents(path, count if count is not None else os.path.getsize(path) // 4)
    if known is not None:
        return known
    bounds = DocumentBounds(None, eos_token_id)
    if tokens is not None:
        ends = bounds.feed(0, np.asarray(tokens))[2]
        parts, total = [ends], len(tokens)
    else:
        f = TokenFile(path)
        parts, total = [bounds.feed(a, block)[2] for a, block in f.blocks()], len(f)
    parts.append(bounds.finish(total)[2])
    ends = np.concatenate(parts).astype(np.int64)
    return Documents(np.concatenate([[0], ends[:-1]]).astype(np.int64), ends, None)


class DocumentBounds:
    """The documents of one token file found as its consecutive blocks go by, in order: `feed(base, block)`
    gives (ordinals, starts, ends) of those that end in the block, `finish(total)` of the one that ends
    with the file. They are `documents()`'s: `known`'s (the sidecar's) when given, else EOS-delimited (a
    tail without EOS is a last document). `open_start()`: where the first document not yet given starts
    (None when none is left)."""

    def __init__(self, known: Documents | None, eos_token_id: int = DOLMA2_EOS):
        self.known, self.eos = known, eos_token_id
        self.next = 0  # ordinal of the next document to give
        self.start = 0  # EOS-delimited: where it starts

    def feed(self, base: int, block: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        end = base + len(block)
        if self.known is not None:
            k = max(self.next, int(np.searchsorted(self.known.ends, end, side="right")))
            out = np.arange(self.next, k), self.known.starts[self.next : k], self.known.ends[self.next : k]
            self.next = k
            return out
        ends = np.flatnonzero(np.asarray(block) == self.eos).astype(np.int64) + (base + 1)
        starts = np.concatenate([[self.start], ends[:-1]]).astype(np.int64) if ends.size else ends
        out = np.arange(self.next, self.next + ends.size), starts, ends
        self.next += ends.size
        if ends.size:
            self.start = int(ends[-1])
        return out

    def finish(self, total: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self.known is not None or self.start >= total:
            none = np.zeros(0, np.int64)
            return none, none, none
        out = np.asarray([self.next]), np.asarray([self.start], np.int64), np.asarray([total], np.int64)
        self.next, self.start = self.next + 1, total
        return out

    def open_start(self) -> int | None:
        if self.known is not None:
            return int(self.known.starts[self.next]) if self.next < self.known.starts.size else None
        return self.start


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


@dataclass(frozen=True)
class DocumentRun:
    """Whole documents of one file, consecutive: ordinals, [starts, ends) as file offsets, and the tokens
    from `base` (the first one's start) to the last one's end."""

    ordinals: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    base: int
    tokens: np.ndarray


def document_runs(
    file: TokenFile, known: Documents | None, eos_token_id: int = DOLMA2_EOS, block_tokens: int | None = None
):
    """Runs of whole documents of token file `file` in order, one per block read (`DocumentBounds`' documents:
    `known`'s, else EOS-delimited), in one pass over it. The document a block's end cuts is carried (its
    head copied) into the next run; what a run holds beyond that views the block."""
    bounds = DocumentBounds(known, eos_token_id)
    carry: list[np.ndarray] = []  # the tokens of the cut document read so far

    def run(base: int, block: np.ndarray, found) -> DocumentRun | None:
        ordinals, starts, ends = found
        if not ordinals.size:
            return None
        lo, hi = int(starts[0]), int(ends[-1])
        tokens = block[lo - base : hi - base] if lo >= base else np.concatenate([*carry, block[: hi - base]])
        return DocumentRun(ordinals, starts, ends, lo, tokens)

    end = 0
    for base, block in file.blocks(block_tokens):
        found = run(base, block, bounds.feed(base, block))
        if found is not None:
            yield found
        end, cut = base + len(block), bounds.open_start()
        if cut is None or cut >= end:
            carry = []
        elif cut < base:
            carry.append(np.array(block))
        else:
            carry = [np.array(block[cut - base :])]
    found = run(end, np.zeros(0, file.dtype), bounds.finish(len(file)))
    if found is not None:
        yield found

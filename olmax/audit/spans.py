"""Where documents are in a token file, and the physical identity of the files a mix lists.

Document boundaries come from the shard's `.csv.gz` sidecar when it exists (rows start,end,id,...),
else from EOS tokens (each document ends with one; a tail without EOS is a last document). Physical
identity (device, inode) tells a path listed twice (planned repetition) from a byte-identical copy
under another name (an accident the content hashes then find).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from olmax.data.index import DOLMA2_EOS
from olmax.data.mixfile import is_url
from olmax.data.shards import check_sidecar, read_sidecar, read_tokens, sidecar_path


@dataclass(frozen=True)
class Documents:
    """Token ranges [starts[i], ends[i]) of a file's documents and their ids (sidecar ids or ordinals)."""

    starts: np.ndarray
    ends: np.ndarray
    ids: tuple[str, ...] | None  # None: no sidecar; the id of document i is f"#{i}"

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


def physical_ids(paths: tuple[str, ...]) -> np.ndarray:
    """int64 (F,): one id per distinct physical file (same inode, or the same URL), in first-seen order."""
    seen: dict[object, int] = {}
    out = np.empty(len(paths), dtype=np.int64)
    for i, p in enumerate(paths):
        if is_url(p):
            key: object = p
        else:
            st = os.stat(p)
            key = (st.st_dev, st.st_ino)
        out[i] = seen.setdefault(key, len(seen))
    return out


def require_local(paths, what: str, hint: str = "") -> None:
    """Content passes read whole files through memmaps: refuse URLs with the fix in the message."""
    remote = [p for p in paths if is_url(p)]
    if remote:
        from olmax.errors import OlmaxError

        raise OlmaxError(f"{remote[0]}: {what} reads every token of the mix's files and needs local "
                         f"copies; mirror the files and pass --base-dir to the mirror{hint}")

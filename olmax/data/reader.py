"""Read windows of raw token files into a caller's buffer: `pread` for local files, fsspec ranges for URLs.

Reads are positioned (no shared file cursor), so one reader serves many threads. A reader pickles
without its open file handles, so Grain worker processes reopen lazily.
"""

from __future__ import annotations

import os
import threading

import numpy as np

from olmax.data.index import TokenIndex
from olmax.data.tokenfile import decode
from olmax.errors import OlmaxError
from olmax.storage import is_url, url_filesystem


class LocalFiles:
    """Positioned reads of local files, each opened once on first use (thread-safe); pickles without its
    open handles. `made_by` names what the files were read by before ("indexing", "packing"), for the
    error when one vanished or shrank since."""

    def __init__(self, paths: tuple[str, ...] | list[str], made_by: str):
        self.paths, self.made_by = tuple(paths), made_by
        self._fds: dict[int, int] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        return {"paths": self.paths, "made_by": self.made_by}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["paths"], state["made_by"])

    def __del__(self) -> None:
        self.close()

    def close(self) -> None:
        for fd in self._fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds = {}

    def fd(self, file_index: int) -> int:
        fd = self._fds.get(file_index)
        if fd is None:
            with self._lock:
                fd = self._fds.get(file_index)
                if fd is None:
                    path = self.paths[file_index]
                    try:
                        fd = os.open(path, os.O_RDONLY)
                    except FileNotFoundError as e:
                        raise OlmaxError(
                            f"{path}: token file vanished after {self.made_by}; restore it "
                            f"or rebuild the index"
                        ) from e
                    self._fds[file_index] = fd
        return fd

    def read_into(self, file_index: int, token_offset: int, out: np.ndarray) -> None:
        """Fill the contiguous array `out` with the file's tokens from `token_offset` on."""
        view = memoryview(out).cast("B")
        offset = token_offset * out.itemsize
        got = os.preadv(self.fd(file_index), [view], offset)
        if got != view.nbytes:
            raise OlmaxError(
                f"{self.paths[file_index]}: short read at byte {offset + got} (wanted {view.nbytes} "
                f"bytes); the file shrank after {self.made_by}"
            )


class TokenReader:
    """Copies L-token windows of the index's files into rows of a (R, L) array of the file dtype."""

    def __init__(self, index: TokenIndex):
        self.index = index
        self._files = LocalFiles(index.paths, "indexing")
        self._remote = np.asarray([is_url(p) for p in index.paths], dtype=bool)

    def __getstate__(self) -> dict:
        return {"index": self.index}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["index"])

    def close(self) -> None:
        self._files.close()

    def read(self, files: np.ndarray, starts: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Fill row r of `out` with the tokens [starts[r], starts[r] + L) of file files[r]."""
        if out.dtype != np.dtype(self.index.dtype) or out.ndim != 2 or not out.flags.c_contiguous:
            raise ValueError(f"out must be a C-contiguous (R, L) {self.index.dtype} array")
        remote = self._remote[files]
        for r in np.flatnonzero(~remote).tolist():
            self._files.read_into(int(files[r]), int(starts[r]), out[r])
        if remote.any():
            self._read_remote(np.flatnonzero(remote).tolist(), files, starts, out)
        return out

    def _read_remote(self, rows: list[int], files: np.ndarray, starts: np.ndarray, out: np.ndarray) -> None:
        """One batched ranged read per URL scheme (fsspec runs the ranges concurrently)."""
        row_bytes = out.shape[1] * out.itemsize
        by_scheme: dict[str, list[int]] = {}
        for r in rows:
            by_scheme.setdefault(self.index.paths[files[r]].split("://", 1)[0], []).append(r)
        for group in by_scheme.values():
            paths = [self.index.paths[files[r]] for r in group]
            fs, _ = url_filesystem(paths[0])
            fs_paths = [url_filesystem(p)[1] for p in paths]
            begins = [int(starts[r]) * out.itemsize for r in group]
            chunks = fs.cat_ranges(fs_paths, begins, [b + row_bytes for b in begins], on_error="return")
            for r, path, begin, chunk in zip(group, paths, begins, chunks):
                if isinstance(chunk, Exception) or len(chunk) != row_bytes:
                    why = chunk if isinstance(chunk, Exception) else f"got {len(chunk)} bytes"
                    raise OlmaxError(
                        f"{path}: ranged read of bytes [{begin}, {begin + row_bytes}) "
                        f"failed ({why}); check the URL and its credentials"
                    )
                out[r] = decode(chunk, out.dtype)


def check_token_ids(index: TokenIndex, vocab_size: int, *, samples: int = 64, seed: int = 0) -> int:
    """Read `samples` random instances and raise if any token id is >= vocab_size; returns ids checked.

    A cheap guard against a mix tokenized with another vocabulary or read with the wrong dtype.
    """
    n = min(samples, index.num_instances)
    ids = np.random.default_rng(seed).choice(index.num_instances, size=n, replace=False)
    files, starts = index.locate(np.sort(ids))
    rows = TokenReader(index).read(files, starts, np.empty((n, index.seq_len), dtype=index.dtype))
    bad = np.argwhere(rows >= vocab_size)
    if bad.size:
        r, c = bad[0]
        raise OlmaxError(
            f"{index.paths[files[r]]}: token {int(rows[r, c])} at token offset "
            f"{int(starts[r]) + int(c)} is >= vocab size {vocab_size}; the file was "
            f"tokenized with another vocabulary or is not {index.dtype}"
        )
    return int(rows.size)


def check_batch_ids(index: TokenIndex, batch: dict[str, np.ndarray], vocab_size: int) -> None:
    """Raise OlmaxError naming the file and token offset when a row of a loader batch holds an id outside
    [0, vocab_size): the trainer's check before a step runs (an embedding lookup would not fail, it
    would train on a clamped row). One vectorised compare per batch; uint32 ids >= 2^31 read as negative."""
    ids = batch["input_ids"]
    bad = np.argwhere((ids < 0) | (ids >= vocab_size))
    if bad.size:
        r, c = (int(v) for v in bad[0])
        files, starts = index.locate(np.asarray(batch["instance_ids"][r : r + 1], dtype=np.int64))
        raise OlmaxError(
            f"{index.paths[files[0]]}: token {int(ids[r, c]) & 0xFFFFFFFF} at token offset "
            f"{int(starts[0]) + c} is >= the model's vocab size {vocab_size}; the file was tokenized "
            f"with another vocabulary or is not {index.dtype}"
        )

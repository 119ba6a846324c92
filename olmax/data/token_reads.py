"""Token files read where they are: the one reader of the content passes, for local files and URLs alike.

A local file (or a `file://` URL) is memory-mapped (olmax.data.tokenfile); any other URL is read by byte
range at its pinned version (olmax.ranged), never downloaded whole: `blocks` reads consecutive blocks with
INFLIGHT requests ahead of the one in use, `forward` gives slices that move forward over them, `read` one
range, `read_ranges` many small ranges of many files at once, `sparse` a file-sized array that holds only
the ranges asked for. Memory: a reader holds its in-flight blocks (INFLIGHT x BLOCK_BYTES) and the one in
use, whatever the file's size; `read_ranges` keeps the last olmax.ranged.PIECE_BYTES of what it read, in aligned
CACHE_BLOCK_BYTES pieces (the byte-for-byte checks of one hash partition after another come back to the
same parts of a copied file: read once, not once a partition).

`physical_key` says when two mix paths are one physical file: a local file's (device, inode); an object's
canonical URL with its pinned size and version. So a path listed twice is one file (a planned repeat) and
a copy under another name is another file, found by its content.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterator

import numpy as np

from olmax import ranged, storage
from olmax.data.tokenfile import DEFAULT_DTYPE, decode, read_tokens, token_count, token_dtype
from olmax.errors import OlmaxError

BLOCK_BYTES = 16 << 20  # one request: its fixed cost (a round trip, the store's lookup) small beside it
INFLIGHT = 4  # requests a reader keeps in flight ahead of the block in use
MERGE_GAP_BYTES = 1 << 20  # `sparse`: ranges this close (and no further than their own length) read as one
CACHE_BLOCK_BYTES = 1 << 20  # `read_many`: the aligned piece it fetches and keeps


class TokenFile:
    """Token file `path` (a path or a URL) of `dtype` tokens; `len()` is its token count."""

    def __init__(self, path: str, dtype: str | np.dtype | type = DEFAULT_DTYPE):
        self.path, self.dtype = str(path), token_dtype(dtype)
        local = storage.local_path(self.path)
        self._object: ranged.Ranged | None = None
        if local is not None:
            try:
                self._tokens = read_tokens(local, self.dtype)
            except FileNotFoundError:
                raise OlmaxError(
                    f"{self.path}: token file not found; fix the path in the mix (or --base-dir)"
                ) from None
            self._len = len(self._tokens)
        else:
            self._object = ranged.Ranged(self.path)
            self._len = token_count(self.path, self._object.size, self.dtype)

    def __len__(self) -> int:
        return self._len

    @property
    def remote(self) -> bool:
        return self._object is not None

    def block_tokens(self) -> int:
        return max(1, BLOCK_BYTES // self.dtype.itemsize)

    def read(self, start: int, stop: int) -> np.ndarray:
        """Tokens [start, stop) (clipped to the file): a read-only view of a local file, one request else."""
        start, stop = max(0, start), min(stop, self._len)
        if self._object is None:
            return self._tokens[start:stop]
        size = self.dtype.itemsize
        return decode(self._object.read(start * size, max(start, stop) * size), self.dtype)

    def blocks(
        self, block_tokens: int | None = None, start: int = 0, stop: int | None = None
    ) -> Iterator[tuple[int, np.ndarray]]:
        """(offset, tokens) of consecutive blocks covering [start, stop): a URL's next INFLIGHT blocks are
        requested before one is handed out. A pass over the whole of a URL ends by checking the object
        still has its pinned version (`Ranged.confirm`)."""
        stop = self._len if stop is None else min(stop, self._len)
        n = block_tokens or self.block_tokens()
        if self._object is None:
            for a in range(start, stop, n):
                yield a, self._tokens[a : min(stop, a + n)]
            return
        size, todo = self.dtype.itemsize, iter(range(start, stop, n))
        pending: deque = deque()

        def fill() -> None:
            while len(pending) <= INFLIGHT:
                a = next(todo, None)
                if a is None:
                    return
                pending.append((a, self._object.submit(a * size, min(stop, a + n) * size)))

        try:
            fill()
            while pending:
                a, future = pending.popleft()
                data = future.result()
                fill()
                yield a, decode(data, self.dtype)
        finally:
            for _, future in pending:
                future.cancel()
        if start == 0 and stop == self._len:
            self._object.confirm()

    def forward(self) -> np.ndarray | ForwardView:
        """Slices of the file for a reader that moves forward: the memory map itself for a local file."""
        return self._tokens if self._object is None else ForwardView(self)

    def sparse(self, ranges: list[tuple[int, int]]) -> np.ndarray:
        """The file's tokens in token ranges `ranges`, at their offsets of a file-sized array (the memory
        map for a local file). A URL's array is zeros elsewhere, pages never written take no memory."""
        if self._object is None:
            return self._tokens
        out = np.zeros(self._len, self.dtype)
        for a, got in self._fetch(ranges):
            out[a : a + got.size] = got
        return out

    def read_many(self, ranges: list[tuple[int, int]]) -> list[np.ndarray]:
        """Tokens [a, b) for each (a, b) of `ranges`, in order. A URL's ranges are read in aligned pieces of
        CACHE_BLOCK_BYTES (consecutive missing pieces in one request, every request in flight at once), kept
        for the next calls (module docstring)."""
        return self.ask_many(ranges)()

    def ask_many(self, ranges: list[tuple[int, int]]) -> Callable[[], list[np.ndarray]]:
        """`read_many` in two steps: this call puts the requests a URL's ranges need in flight, the
        function it returns waits for them and gives `read_many`'s list (so several files' requests can
        be in flight together)."""
        clipped = [(max(0, int(a)), min(int(b), self._len)) for a, b in ranges]
        if self._object is None:
            return lambda: [self._tokens[a:b] for a, b in clipped]
        size, step = self.dtype.itemsize, CACHE_BLOCK_BYTES
        pin = self._object.pin
        wanted = sorted(
            {i for a, b in clipped if b > a for i in range(a * size // step, ((b * size) - 1) // step + 1)}
        )
        have = {i: ranged.PIECES.get((pin.url, pin.version, i)) for i in wanted}
        missing = [i for i in wanted if have[i] is None]
        runs: list[list[int]] = []
        for i in missing:  # consecutive pieces in one request of at most BLOCK_BYTES
            if runs and i == runs[-1][-1] + 1 and (len(runs[-1]) + 1) * step <= BLOCK_BYTES:
                runs[-1].append(i)
            else:
                runs.append([i])
        futures = [(run, self._object.submit(run[0] * step, (run[-1] + 1) * step)) for run in runs]

        def tokens() -> list[np.ndarray]:
            for run, future in futures:
                data = future.result()
                for k, i in enumerate(run):
                    have[i] = bytes(data[k * step : (k + 1) * step])  # a piece kept holds its bytes alone
                    ranged.PIECES.put((pin.url, pin.version, i), have[i])
            out = []
            for a, b in clipped:
                if b <= a:
                    out.append(np.zeros(0, self.dtype))
                    continue
                lo, hi = a * size, b * size  # the range's bytes; each piece gives only its share of them
                first, last = lo // step, (hi - 1) // step
                parts = [
                    memoryview(have[i])[max(lo - i * step, 0) : hi - i * step] for i in range(first, last + 1)
                ]
                out.append(decode(parts[0] if len(parts) == 1 else b"".join(parts), self.dtype))
            return out

        return tokens

    def _fetch(self, ranges: list[tuple[int, int]]) -> list[tuple[int, np.ndarray]]:
        """(start, tokens) of `ranges` merged (`_merged`), every request in flight at once (`sparse`)."""
        size = self.dtype.itemsize
        merged = _merged(ranges, MERGE_GAP_BYTES // size, self.block_tokens())
        futures = [(a, self._object.submit(a * size, b * size)) for a, b in merged]
        return [(a, decode(future.result(), self.dtype)) for a, future in futures]

    def confirm(self) -> None:
        """For a URL: raise the one-line error when the object changed since it was pinned."""
        if self._object is not None:
            self._object.confirm()


class ForwardView:
    """`view[a:b]` of a URL's tokens for slices whose starts never move back: blocks wholly before the
    latest start are let go, those the slice needs are read (with TokenFile.blocks' read-ahead)."""

    def __init__(self, file: TokenFile):
        self.file = file
        self._blocks = file.blocks()
        self._held: deque[tuple[int, np.ndarray]] = deque()
        self._end = 0  # the end of the blocks read so far
        self._low = 0

    def __len__(self) -> int:
        return len(self.file)

    def __getitem__(self, key: slice) -> np.ndarray:
        a, b, step = key.indices(len(self.file))
        if step != 1 or a < self._low:
            raise ValueError(f"ForwardView[{a}:{b}:{step}]: slices move forward, one step at a time")
        self._low = a
        while self._held and self._held[0][0] + self._held[0][1].size <= a:
            self._held.popleft()
        while self._end < b:
            start, block = next(self._blocks)
            self._held.append((start, block))
            self._end = start + block.size
        pieces = [
            block[max(0, a - start) : b - start]
            for start, block in self._held
            if start < b and start + block.size > a
        ]
        if len(pieces) == 1:
            return pieces[0]
        return np.concatenate(pieces) if pieces else np.zeros(0, self.file.dtype)


def _merged(ranges: list[tuple[int, int]], gap: int, most: int) -> list[tuple[int, int]]:
    """Token ranges sorted and joined where one starts within `gap` of the previous end and no further from
    it than its own length (so a join reads at most twice what was asked), while the join stays within
    `most` tokens (a longer range stays alone)."""
    out: list[list[int]] = []
    for a, b in sorted((int(a), int(b)) for a, b in ranges if b > a):
        if out and a - out[-1][1] <= min(gap, b - a) and max(b, out[-1][1]) - out[-1][0] <= most:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def read_ranges(
    requests: list[tuple[str, int, int]], dtype: str | np.dtype | type = DEFAULT_DTYPE
) -> list[np.ndarray]:
    """Tokens [start, start + n) of file `path` for each (path, start, n), in order (`TokenFile.read_many`
    per file). For a batch of small reads (the byte-for-byte checks of duplicate candidates); the caller
    bounds the batch's size."""
    by_path: dict[str, list[int]] = {}
    for i, (path, _, _) in enumerate(requests):
        by_path.setdefault(path, []).append(i)
    out: list[np.ndarray] = [np.zeros(0)] * len(requests)
    asked = [  # every file's requests in flight before the first is waited for
        (
            idx,
            TokenFile(path, dtype).ask_many([(requests[i][1], requests[i][1] + requests[i][2]) for i in idx]),
        )
        for path, idx in by_path.items()
    ]
    for idx, tokens in asked:
        for i, got in zip(idx, tokens()):
            out[i] = got
    return out


def same_tokens(a_path: str, a_start: int, b_path: str, b_start: int, n: int) -> bool:
    """Whether tokens [a_start, a_start + n) of file `a_path` equal [b_start, b_start + n) of `b_path`
    (both must hold n tokens there), compared block by block."""
    a, b = TokenFile(a_path), TokenFile(b_path)
    if len(a) - a_start < n or len(b) - b_start < n:
        return False
    if not (a.remote or b.remote):
        return bool(np.array_equal(a.read(a_start, a_start + n), b.read(b_start, b_start + n)))
    step = a.block_tokens()
    pairs = zip(a.blocks(step, a_start, a_start + n), b.blocks(step, b_start, b_start + n))
    return all(np.array_equal(x, y) for (_, x), (_, y) in pairs)


def read_slice(path: str, start: int, n: int, dtype: str | np.dtype | type = DEFAULT_DTYPE) -> np.ndarray:
    """Tokens [start, start + n) of token file `path`, a path or a URL (one ranged read); fewer when the
    file ends first."""
    return np.array(TokenFile(path, dtype).read(start, start + n))


def physical_key(path: str) -> tuple:
    """What identifies the file `path` names (module docstring): equal keys, one physical file."""
    local = storage.local_path(path)
    if local is not None:
        st = os.stat(local)
        return ("file", st.st_dev, st.st_ino)
    pin = ranged.pin(path)
    return ("object", pin.url, pin.size, pin.version)


def physical_keys(paths: tuple[str, ...] | list[str]) -> list[tuple]:
    """`physical_key` of each path, every object's version asked for at once."""
    ranged.pin_all(list(dict.fromkeys(p for p in paths if storage.local_path(p) is None)))
    return [physical_key(p) for p in paths]

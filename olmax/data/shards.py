"""OLMo-format token shards: raw little-endian uint32 `.npy` (no header, olmax.data.tokenfile) plus a
`.csv.gz` sidecar.

A document on disk is its tokens followed by EOS. The sidecar has one row per document,
`start,end,id,src,loc` (token offsets into the shard, end exclusive, EOS included; the document id; its
source file; its 1-based line or row), as `dolma tokens` writes it. `ShardWriter` writes both under
temporary names and renames them only when the shard is complete, so a final name always holds a whole
shard; the returned `ShardInfo` carries the xxh64 checksum of the token bytes.
"""

from __future__ import annotations

import csv
import errno
import gzip
import io
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import xxhash

from olmax import storage
from olmax.data.tokenfile import encode, token_dtype
from olmax.errors import OlmaxError

# the files of an `olmax data prepare` output folder beside its shards, named here so that its readers
# (`olmax data inspect`) need not import the writer: the resume journal (present while a run is
# unfinished; mix.txt and manifest.json are written last) and the dedup record of removed/edited documents
PREPARE_JOURNAL = ".olmax-prepare.json"
DEDUP_RECORD = "removed.jsonl"


@dataclass
class ShardInfo:
    path: str  # relative to the output folder
    tokens: int
    docs: int
    utf8_bytes: int
    xxh64: str

    def to_json(self) -> dict:
        return asdict(self)


def sidecar_path(shard: str | Path) -> Path:
    shard = Path(shard)
    return (
        shard.with_name(shard.name[: -len(".npy")] + ".csv.gz")
        if shard.name.endswith(".npy")
        else shard.with_name(shard.name + ".csv.gz")
    )


# direct I/O (Linux's O_DIRECT): a shard's bytes go from a reused buffer to the disk, not through the page cache
DIRECT_ALIGN = 4096  # what every device's logical block size divides
DIRECT_BUFFER = 8 << 20
direct_io = hasattr(os, "O_DIRECT")  # False: every shard is written through the page cache (tests set it)


class _DirectFile:
    """A new file written with O_DIRECT: bytes gather in a page-aligned buffer and go to the disk in whole
    blocks, the last one padded and cut back by `ftruncate` at `flush()`. Skipping the page cache saves the
    kernel's copy of every byte (a tenth of prepare's CPU) and keeps a many-GB shard from pushing everything
    else out of the cache. `open()` gives None where the filesystem refuses O_DIRECT (tmpfs, say)."""

    def __init__(self, fd: int):
        import mmap

        self._fd = fd
        self._buf = mmap.mmap(-1, DIRECT_BUFFER)
        self._view = memoryview(self._buf)
        self._fill = 0
        self._size = 0  # bytes on disk

    @classmethod
    def open(cls, path: Path) -> _DirectFile | None:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
        except OSError as e:
            if e.errno == errno.EINVAL:
                return None
            raise
        f = cls(fd)
        try:  # a filesystem may take the flag at open and refuse the first write
            with f._view[:DIRECT_ALIGN] as block:  # (released even on an error: the buffer can close)
                os.write(fd, block)
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
        except OSError as e:
            f.close()
            if e.errno == errno.EINVAL:
                return None
            raise
        return f

    def write(self, data) -> None:
        data = memoryview(data).cast("B")
        while len(data):
            n = min(len(data), DIRECT_BUFFER - self._fill)
            self._view[self._fill : self._fill + n] = data[:n]
            self._fill += n
            data = data[n:]
            if self._fill == DIRECT_BUFFER:
                self._put(DIRECT_BUFFER)

    def _put(self, n: int) -> None:
        done = 0
        while done < n:
            with self._view[done:n] as block:
                done += os.write(self._fd, block)
        self._size += n
        rest = self._fill - n
        self._view[:rest] = self._view[n : self._fill]
        self._fill = rest

    def flush(self) -> None:
        """Everything written onto the disk (the last block padded, then the file cut to its size)."""
        if self._fill:
            size = self._size + self._fill
            padded = -(-self._fill // DIRECT_ALIGN) * DIRECT_ALIGN
            self._view[self._fill : padded] = bytes(padded - self._fill)
            self._fill = padded
            self._put(padded)
            os.ftruncate(self._fd, size)
            self._size = size

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._view.release()
        self._buf.close()


def _open_tokens(path: Path):
    """A new token file for writing: direct I/O where the system and filesystem allow it, else buffered."""
    if direct_io:
        f = _DirectFile.open(path)
        if f is not None:
            return f
    return open(path, "wb")


def sidecar_csv(rows: list[tuple[int, int, str, str, int]]) -> str:
    """The sidecar's CSV text, as `csv.writer(lineterminator="\n")` writes it: each row joined by commas
    when no id or source holds a comma, a quote, a line break or a NUL (what the csv module quotes or
    refuses; the usual case, several times faster than its row by row), else by the csv module itself."""
    text = "".join([f"{a},{b},{i},{s},{n}\n" for a, b, i, s, n in rows])
    plain = text.count(",") == 4 * len(rows) and text.count("\n") == len(rows)
    if plain and not any(c in text for c in '"\r\x00'):
        return text
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


class ShardWriter:
    """Appends documents to one shard; `close()` renames the finished files into place."""

    def __init__(self, path: Path, root: Path):
        self.path, self.root = path, root
        self.tmp = path.with_name(path.name + ".tmp")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = _open_tokens(self.tmp)
        self._hash = xxhash.xxh64()
        self._rows: list[tuple[int, int, str, str, int]] = []
        self.tokens = 0
        self.utf8_bytes = 0

    def add_batch(self, tokens: np.ndarray, lengths: list[int], docs: list, utf8_bytes: int) -> None:
        """Append a batch: `tokens` is the concatenation of the docs' tokens (each with EOS)."""
        buf = encode(tokens)
        try:
            self._f.write(buf)
        except OSError as e:
            raise self._write_error(e) from None
        self._hash.update(buf)
        start = self.tokens
        for n, doc in zip(lengths, docs):
            self._rows.append((start, start + n, doc.id, doc.src, doc.loc))
            start += n
        self.tokens = start
        self.utf8_bytes += utf8_bytes

    def ids(self) -> list[str]:
        """The document ids added so far, in order."""
        return [row[2] for row in self._rows]

    def _write_error(self, e: OSError) -> OlmaxError:
        """A failed write (disk full, a file-size limit): the temporaries go, the error names the shard."""
        self.abort()
        return OlmaxError(
            f"{self.tmp}: cannot write tokens at byte offset {self.tokens * token_dtype().itemsize} "
            f"({e.strerror or e}); free disk space and rerun the same command (finished shards "
            "are kept and resumed)"
        )

    def close(self) -> ShardInfo:
        side = sidecar_path(self.path)
        side_tmp = side.with_name(side.name + ".tmp")
        try:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()
            with (
                open(side_tmp, "wb") as raw,
                gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz,
            ):
                gz.write(sidecar_csv(self._rows).encode("utf-8"))
        except OSError as e:
            side_tmp.unlink(missing_ok=True)
            raise self._write_error(e) from None
        os.replace(self.tmp, self.path)
        os.replace(side_tmp, side)
        return ShardInfo(
            str(self.path.relative_to(self.root)),
            self.tokens,
            len(self._rows),
            self.utf8_bytes,
            self._hash.hexdigest(),
        )

    def abort(self) -> None:
        try:
            self._f.close()
        except OSError:
            pass  # the flush of a failed write fails again; the temporary goes either way
        self.tmp.unlink(missing_ok=True)


@dataclass(frozen=True)
class SidecarRow:
    start: int
    end: int
    id: str
    src: str
    loc: int


def sidecar_of(shard: str) -> str:
    """The sidecar's path or URL of token file `shard` (a path or a URL)."""
    if storage.local_path(shard) is not None and not shard.startswith("file://"):
        return str(sidecar_path(shard))
    folder, name = shard[: shard.rfind("/")], shard[shard.rfind("/") + 1 :]
    return storage.join(folder, sidecar_path(name).name)


def sidecar_rows(shard: str) -> list[SidecarRow] | None:
    """The sidecar rows of token file `shard` (a path or a URL; a URL's sidecar is read into memory);
    None when it has no sidecar."""
    side = sidecar_of(shard)
    if not storage.is_url(side):
        return read_sidecar(side) if os.path.exists(side) else None
    if not storage.exists(side):
        return None
    return read_sidecar(side, storage.read_bytes(side))


def read_sidecar(path: str | Path, data: bytes | None = None) -> list[SidecarRow]:
    """Rows of a `.csv.gz` sidecar (also accepts a shard path and finds its sidecar); `data`: the sidecar's
    bytes, read already (errors still name `path`)."""
    if data is None:
        path = Path(path)
        if path.name.endswith(".npy"):
            path = sidecar_path(path)
    rows = []
    lineno = 0
    try:
        with gzip.open(
            io.BytesIO(data) if data is not None else path, "rt", encoding="utf-8", newline=""
        ) as f:
            for lineno, rec in enumerate(csv.reader(f), start=1):
                if len(rec) < 2:
                    raise OlmaxError(f"{path}:{lineno}: expected start,end,id,src,loc; got {rec!r}")
                start, end = int(rec[0]), int(rec[1])
                doc_id = rec[2] if len(rec) > 2 else ""
                src = rec[3] if len(rec) > 3 else ""
                loc = int(rec[4]) if len(rec) > 4 and rec[4] else 0
                if not 0 <= start <= end or (rows and start < rows[-1].end):
                    raise OlmaxError(
                        f"{path}:{lineno}: document [{start}, {end}) is reversed or overlaps "
                        f"the previous one; the sidecar is corrupt"
                    )
                rows.append(SidecarRow(start, end, doc_id, src, loc))
    except (
        OSError,
        EOFError,
        ValueError,
        csv.Error,
    ) as e:  # a truncated or corrupt gzip, a non-integer field
        raise OlmaxError(
            f"{path}:{lineno + 1}: unreadable sidecar ({e}); rerun `olmax data prepare` for its "
            "shard, or delete the sidecar to fall back to EOS boundaries"
        ) from None
    return rows


def check_sidecar(path: str | Path, rows: list[SidecarRow], tokens: int) -> None:
    """Refuse sidecar rows that reach past the `tokens` of their shard (a sidecar of another shard)."""
    if rows and rows[-1].end > tokens:
        raise OlmaxError(
            f"{sidecar_of(str(path))}:{len(rows)}: document ends at token {rows[-1].end} but the shard "
            f"{path} holds {tokens} tokens; the sidecar belongs to another shard: rerun `olmax "
            "data prepare` or delete the sidecar"
        )

"""Atomic writes: a final name only ever holds a whole file (write a temporary name beside it, then rename).

The one home of whole-file writes (JSON and JSONL go through olmax.jsonio, which calls these). Writers
that stream a large file incrementally (token shards, order files, safetensors) keep their own temporary
names but follow the same rule. A failed write leaves the old file (or nothing) and no temporary behind.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from olmax.errors import OlmaxError


def _umask_now() -> int:
    """The process umask, read without changing it (Linux /proc), else by setting and restoring it."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode `open()` gives a new file under the current umask (0o644 under 022). `mkstemp` makes its
    files 0600 whatever the umask, and a rename keeps the mode, so every temporary-then-rename writer
    chmods its temporary to this before the rename: outputs stay readable by the group and others."""
    return 0o666 & ~_umask_now()


@contextmanager
def temp_path(path: str | os.PathLike, suffix: str = ".tmp") -> Iterator[Path]:
    """A temporary name beside `path` for a writer that needs a file name (savefig, np.savez, a memmap):
    renamed over `path` when the block succeeds, removed when it raises."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    try:
        os.fchmod(fd, file_mode())
    finally:
        os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write `data` to `path` through a temporary file in the same folder, then rename over `path`."""
    with temp_path(path) as tmp, open(tmp, "wb") as f:
        f.write(data)
    return Path(path)


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` (UTF-8) to `path` through a temporary file in the same folder, then rename over `path`."""
    return write_bytes(path, text.encode("utf-8"))


@contextmanager
def exclusive(target: str | os.PathLike, what: str) -> Iterator[Path]:
    """Hold the writer's lock of `target` (an output file or folder) for the block: a second process
    writing the same target refuses at once with an OlmaxError instead of interleaving its writes.

    The lock is a `.NAME.lock` file beside the target, flock'ed (the OS releases it when the holder
    dies, so a killed run never leaves a stale lock) and removed on exit."""

    target = Path(target).absolute()
    target.parent.mkdir(parents=True, exist_ok=True)
    lock = target.with_name(f".{target.name}.lock")
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OlmaxError(
                f"{target}: another olmax process is writing it ({what}, lock {lock}); wait for "
                "it to finish, or choose another output"
            ) from None
        try:
            held = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            held = False
        if held:  # not a lock file its previous holder unlinked between our open and our flock
            break
        os.close(fd)
    try:
        yield target
    finally:
        lock.unlink(missing_ok=True)
        os.close(fd)


def locked_out(fn, what: str):
    """A command handler `fn(args)` run holding the writer's lock of `args.out` (`exclusive`): a second
    process writing the same output refuses at once instead of racing the first. An object-store URL has
    no lock here (the store's final move is atomic); a `file://` URL locks its path."""

    def run(args) -> int:
        out = str(args.out)
        if out.startswith("file://"):
            out = out[len("file://") :]
        elif "://" in out:
            return fn(args)
        with exclusive(out, what):
            return fn(args)

    return run

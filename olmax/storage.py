"""Paths or fsspec URLs (`gs://`, `s3://`, `file://`, `memory://`, ...): the one place olmax reads and writes
files that may live in object storage.

Readers and writers elsewhere work on local files (memmaps, `pread`, gzip, zstd, pyarrow). A command that
takes URLs turns each into a local path here: `file://` and plain paths are used in place; any other URL is
copied into a scratch folder for the time it is read (`local_copy`) or written locally and uploaded when
complete (`upload`, `write_bytes`: to a temporary name first, then moved to the final one, so a reader never
sees half an object). Writing a folder of outputs (`StagedDir`) commits the files that mark it complete
(`manifest.json`, `mix.txt`, a report) last.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from olmax.errors import OlmaxError


def is_url(path: str) -> bool:
    """True for `scheme://...` paths, which are read through fsspec."""
    return "://" in str(path)


def url_filesystem(url: str):
    """(fsspec filesystem, path) for a URL; a missing protocol package is a clear error."""
    import fsspec

    try:
        return fsspec.core.url_to_fs(url)
    except ImportError as e:
        raise OlmaxError(
            f"{url}: reading this URL needs an fsspec backend that is not installed "
            f"({e}); install it (s3fs for s3://, gcsfs for gs://, aiohttp for https://) "
            f"or use a local mirror with --base-dir"
        ) from e


def local_path(path: str) -> str | None:
    """The local path of a plain path or a `file://` URL; None for any other URL."""
    path = str(path)
    if path.startswith("file://"):
        return url_filesystem(path)[1]
    return None if is_url(path) else path


def join(base: str, *parts: str) -> str:
    """`base/part/...` for a local folder or a URL prefix."""
    if is_url(base):
        return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)])
    return os.path.join(base, *parts)


def exists(path: str) -> bool:
    local = local_path(path)
    if local is not None:
        return os.path.exists(local)
    fs, p = url_filesystem(path)
    return bool(fs.exists(p))


def size_and_version(path: str) -> list:
    """[size, version]: what tells a changed input apart (mtime for local files, the store's etag or
    modification time for objects)."""
    local = local_path(path)
    if local is not None:
        st = os.stat(local)
        return [st.st_size, st.st_mtime_ns]
    fs, p = url_filesystem(path)
    info = fs.info(p)
    version = next(
        (
            str(info[k])
            for k in ("etag", "ETag", "md5Hash", "mtime", "updated", "LastModified", "created")
            if info.get(k) is not None
        ),
        "",
    )
    return [int(info.get("size") or 0), version]


def expand(pattern: str, keep_dir) -> list[str]:
    """A URL, a URL glob or a URL folder → sorted URLs of its files. `keep_dir(names)` says whether a folder
    is one input as a whole (a `datasets` folder) given the names in it."""
    fs, p = url_filesystem(pattern)
    if fs.isdir(p):
        names = [os.path.basename(x.rstrip("/")) for x in fs.ls(p, detail=False)]
        if keep_dir(names):
            return [pattern.rstrip("/")]
        found = sorted(x for x in fs.find(p) if not fs.isdir(x))
    elif fs.isfile(p):
        return [pattern]
    else:
        found = sorted(x for x in fs.glob(p) if fs.isfile(x))
    return [fs.unstrip_protocol(x) for x in found]


@contextmanager
def local_copy(path: str, scratch: str | None = None) -> Iterator[str]:
    """A local path holding `path`'s bytes for the block: the path itself when local (or `file://`), else
    a copy (a file or a whole folder) in a scratch folder, removed afterwards."""
    local = local_path(path)
    if local is not None:
        yield local
        return
    fs, p = url_filesystem(path)
    tmp = tempfile.mkdtemp(prefix="olmax-fetch-", dir=scratch)
    try:
        dest = os.path.join(tmp, os.path.basename(p.rstrip("/")) or "data")
        try:
            if fs.isdir(p):
                fs.get(p.rstrip("/") + "/", dest + "/", recursive=True)
            else:
                fs.get(p, dest)
        except FileNotFoundError as e:
            raise OlmaxError(f"{path}: not found ({e})") from None
        yield dest
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def read_bytes(path: str) -> bytes:
    local = local_path(path)
    if local is not None:
        return Path(local).read_bytes()
    fs, p = url_filesystem(path)
    try:
        return fs.cat_file(p)
    except FileNotFoundError as e:
        raise OlmaxError(f"{path}: not found ({e})") from None


def _commit_remote(url: str, put) -> None:
    """`put(fs, path)` writes an object at a temporary name beside `url`, which is then moved into place."""
    fs, p = url_filesystem(url)
    tmp = f"{p}.tmp-{uuid.uuid4().hex[:8]}"
    put(fs, tmp)
    fs.mv(tmp, p)


def upload(local: str, url: str) -> None:
    """Copy local file `local` to `url` under a temporary name, then move it to `url`."""
    dest = local_path(url)
    if dest is not None:
        from olmax.atomic import temp_path

        with temp_path(dest) as tmp:
            shutil.copyfile(local, tmp)
        return
    _commit_remote(url, lambda fs, tmp: fs.put_file(local, tmp))


def write_bytes(url: str, data: bytes) -> None:
    """Write a whole file at a path or URL (temporary name, then rename/move)."""
    local = local_path(url)
    if local is not None:
        from olmax.atomic import write_bytes as write_local

        write_local(local, data)
        return
    _commit_remote(url, lambda fs, tmp: fs.pipe_file(tmp, data))


def move(src: str, dst: str) -> None:
    """Rename a file (local) or move an object (URL) within one store."""
    s, d = local_path(src), local_path(dst)
    if s is not None and d is not None:
        Path(d).parent.mkdir(parents=True, exist_ok=True)
        os.replace(s, d)
        return
    fs, sp = url_filesystem(src)
    fs.mv(sp, url_filesystem(dst)[1])


def remove_tree(path: str) -> None:
    local = local_path(path)
    if local is not None:
        shutil.rmtree(local, ignore_errors=True)
        return
    fs, p = url_filesystem(path)
    if fs.exists(p):
        fs.rm(p, recursive=True)


def list_files(folder: str) -> list[str]:
    """Every file under `folder`, as paths relative to it, sorted."""
    local = local_path(folder)
    if local is not None:
        root = Path(local)
        return (
            sorted(str(f.relative_to(root)) for f in root.rglob("*") if f.is_file()) if root.exists() else []
        )
    fs, p = url_filesystem(folder)
    if not fs.exists(p):
        return []
    base = p.rstrip("/") + "/"
    return sorted(x[len(base) :] for x in fs.find(p) if x.startswith(base))


class StagedDir:
    """An output folder given as a path or URL. Local folders are written in place; for any other URL the
    command writes into a local staging folder and `commit()` uploads it, the files named in `last`
    (what marks the output complete) after all the others."""

    def __init__(self, target: str, scratch: str | None = None):
        self.target = target
        self.local = local_path(target)
        self._tmp = None
        if self.local is None:
            self._tmp = tempfile.mkdtemp(prefix="olmax-stage-", dir=scratch)
            self.local = self._tmp

    @property
    def remote(self) -> bool:
        return self._tmp is not None

    def commit(self, last: tuple[str, ...] = ()) -> None:
        if not self.remote:
            return
        files = list_files(self.local)
        for rel in [f for f in files if f not in last] + [f for f in last if f in files]:
            upload(os.path.join(self.local, rel), join(self.target, rel))

    def cleanup(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)

"""Paths or fsspec URLs (`gs://`, `s3://`, `file://`, `memory://`, ...): the one place olmax reads and writes
files that may live in object storage.

Readers and writers elsewhere work on local files (memmaps, `pread`, gzip, zstd, pyarrow). A command that
takes URLs turns each into a local path here: `file://` and plain paths are used in place; any other URL is
copied into a scratch folder for the time it is read (`local_copy`) or written locally and uploaded when
complete (`upload`, `write_bytes`: to a temporary name first, then moved to the final one, so a reader never
sees half an object; in s3:// and gs:// a single upload is already all or nothing, so it goes to its name
directly). Writing a folder of outputs (`StagedDir`) commits the files that mark it complete
(`manifest.json`, `mix.txt`, a report) last.

A storage library's failure on a URL (botocore, google-auth, gcsfs, aiohttp, or the `FileNotFoundError` /
`PermissionError` fsspec raises) becomes one `OlmaxError` line naming the URL and the fix (`failure`,
`errors_named`); `require_bucket` checks an output's bucket before a command writes anything.
"""

from __future__ import annotations

import os
import re
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
            f"({e}); install it (`pip install 'olmax[cloud]'` for s3:// and gs://, aiohttp for https://) "
            f"or use a local mirror with --base-dir"
        ) from e


# Object stores whose single upload appears all at once (a reader sees the old object or the whole new one).
_WHOLE_UPLOADS = ("s3", "s3a", "gs", "gcs", "memory")
_BUCKETED = ("s3", "s3a", "gs", "gcs")

NO_CREDENTIALS_FIX = (
    "set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE; for gs:// run "
    "`gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS"
)


def scheme_of(url: str) -> str:
    return str(url).split("://", 1)[0].lower() if is_url(url) else ""


def bucket_of(url: str) -> str | None:
    """`scheme://bucket` of an s3:// or gs:// URL; None for other paths."""
    if scheme_of(url) not in _BUCKETED:
        return None
    scheme, rest = str(url).split("://", 1)
    name = rest.split("/", 1)[0]
    return f"{scheme}://{name}" if name else None


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    while exc is not None and exc not in out:
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def error_names(exc: BaseException) -> set[str]:
    """`module.Class` of every exception class in `exc`'s chain (and their bases)."""
    return {f"{c.__module__}.{c.__name__}" for e in _chain(exc) for c in type(e).__mro__}


def error_codes(exc: BaseException) -> set[str]:
    """The error codes a botocore ClientError or a gcsfs HttpError in `exc`'s chain carries."""
    out = set()
    for e in _chain(exc):
        response = getattr(e, "response", None)
        if isinstance(response, dict):
            out.add(str(response.get("Error", {}).get("Code", "")))
        code = getattr(e, "code", None)
        if isinstance(code, int | str) and type(e).__name__ == "HttpError":
            out.add(str(code))
    return out - {""}


_NO_CREDENTIALS = {
    "botocore.exceptions.NoCredentialsError",
    "botocore.exceptions.PartialCredentialsError",
    "botocore.exceptions.CredentialRetrievalError",
    "botocore.exceptions.NoAuthTokenError",
    "botocore.exceptions.TokenRetrievalError",
    "google.auth.exceptions.DefaultCredentialsError",
}
_REJECTED_CODES = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "401"}
_DENIED_CODES = {"AccessDenied", "AllAccessDisabled", "403", "Forbidden"}
_UNREACHABLE = {
    "botocore.exceptions.EndpointConnectionError",
    "botocore.exceptions.ConnectTimeoutError",
    "aiohttp.client_exceptions.ClientConnectorError",
    "aiohttp.client_exceptions.ServerTimeoutError",
}


def failure(url: str, exc: BaseException) -> OlmaxError | None:
    """The one-line error for storage library failure `exc` on `url` (the URL, what happened, the fix);
    None when `exc` is not a storage failure of a URL."""
    if isinstance(exc, OlmaxError) or not is_url(url):
        return None
    names, codes = error_names(exc), error_codes(exc)
    text = " ".join(str(e) for e in _chain(exc))
    if names & _NO_CREDENTIALS:
        return OlmaxError(f"{url}: no credentials found ({NO_CREDENTIALS_FIX})")
    if codes & _REJECTED_CODES or "google.auth.exceptions.RefreshError" in names:
        return OlmaxError(
            f"{url}: the store rejected the credentials ({_one_line(exc)}); check the key, the token "
            f"or the profile ({NO_CREDENTIALS_FIX})"
        )
    if codes & _DENIED_CODES or isinstance(exc, PermissionError):
        return OlmaxError(
            f"{url}: access denied (check the credentials' permissions on {bucket_of(url) or url})"
        )
    if "NoSuchBucket" in codes or re.search(r"bucket does not exist", text, re.IGNORECASE):
        return _missing_bucket(url)
    if names & _UNREACHABLE:
        return OlmaxError(
            f"{url}: cannot reach the store ({_one_line(exc)}); check the network, and AWS_ENDPOINT_URL "
            "or STORAGE_EMULATOR_HOST when set"
        )
    if isinstance(exc, FileNotFoundError) or "NoSuchKey" in codes or "404" in codes:
        bucket = bucket_of(url)
        if bucket is not None and _bucket_missing(bucket):
            return _missing_bucket(url)
        return OlmaxError(f"{url}: not found (check the path)")
    if "botocore.exceptions.BotoCoreError" in names or "gcsfs.retry.HttpError" in names:
        return OlmaxError(f"{url}: the store failed ({_one_line(exc)})")
    return None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _missing_bucket(url: str) -> OlmaxError:
    bucket = bucket_of(url)
    where = f" ({bucket})" if bucket and bucket != url.rstrip("/") else ""
    return OlmaxError(f"{url}: the bucket does not exist{where}; create it, or check the name")


def _bucket_missing(bucket: str) -> bool:
    """True only when the store says the bucket is not there: listing it fails with not found (`exists`
    alone also answers False for a bucket it may not read, e.g. without credentials)."""
    try:
        fs, p = url_filesystem(bucket)
        if fs.exists(p):
            return False
        fs.ls(p, detail=False)
        return False
    except FileNotFoundError:
        return True
    except Exception:
        return False


@contextmanager
def errors_named(url: str) -> Iterator[None]:
    """Run the block; a storage library's failure in it becomes `failure(url, ...)`'s one-line error."""
    try:
        yield
    except OlmaxError:
        raise
    except Exception as e:
        mapped = failure(url, e)
        if mapped is None:
            raise
        raise mapped from None


_LIBRARIES = {"s3": ("/s3fs/", "/botocore/", "/aiobotocore/"), "gs": ("/gcsfs/", "/google/auth/")}


def _raised_in(exc: BaseException) -> str | None:
    """ "s3" or "gs" when `exc` (or an exception in its chain) was raised inside that store's library."""
    for e in _chain(exc):
        tb = e.__traceback__
        while tb is not None:
            name = tb.tb_frame.f_code.co_filename.replace(os.sep, "/")
            for scheme, parts in _LIBRARIES.items():
                if any(part in name for part in parts):
                    return scheme
            tb = tb.tb_next
    return None


def failure_in(exc: BaseException, args: list[str]) -> OlmaxError | None:
    """For a failure no caller named a URL for: when `exc` came from the s3 or gs library, its one-line
    error for the first URL of that store among a command's `args` (`failure`); else None."""
    scheme = _raised_in(exc)
    if scheme is None:
        return None
    urls = [m.group(0) for a in args for m in re.finditer(r"\b[a-z][a-z0-9+]*://[^\s,=]+", a)]
    url = next(
        (u for u in urls if scheme_of(u) in ({"s3", "s3a"} if scheme == "s3" else {"gs", "gcs"})), None
    )
    return failure(url or f"{scheme}://", exc)


def require_bucket(url: str) -> None:
    """Refuse an output URL whose bucket does not exist (or cannot be reached with these credentials)
    before anything is written; nothing for local paths and bucketless URLs."""
    bucket = bucket_of(url)
    if bucket is None:
        return
    with errors_named(url):
        fs, p = url_filesystem(bucket)
        if not fs.exists(p):
            fs.ls(p, detail=False)  # the store's own reason (no such bucket, no credentials, denied)
            raise _missing_bucket(url)


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
    with errors_named(path):
        fs, p = url_filesystem(path)
        return bool(fs.exists(p))


def size_and_version(path: str) -> list:
    """[size, version]: what tells a changed input apart (mtime for local files, the store's etag or
    modification time for objects)."""
    local = local_path(path)
    if local is not None:
        st = os.stat(local)
        return [st.st_size, st.st_mtime_ns]
    with errors_named(path):
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
    with errors_named(pattern):
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
            bucket = bucket_of(pattern)
            if not found and bucket is not None and _bucket_missing(bucket):
                raise _missing_bucket(pattern)
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
        with errors_named(path):
            if fs.isdir(p):
                fs.get(p.rstrip("/") + "/", dest + "/", recursive=True)
            else:
                fs.get(p, dest)
        yield dest
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def read_bytes(path: str) -> bytes:
    local = local_path(path)
    if local is not None:
        return Path(local).read_bytes()
    with errors_named(path):
        fs, p = url_filesystem(path)
        return fs.cat_file(p)


def _commit_remote(url: str, put) -> None:
    """`put(fs, path)` writes the object: at `url` itself in a store whose uploads appear whole (s3://,
    gs://, memory://), elsewhere at a temporary name beside it, then moved into place."""
    with errors_named(url):
        fs, p = url_filesystem(url)
        if scheme_of(url) in _WHOLE_UPLOADS:
            put(fs, p)
            return
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
    with errors_named(src):
        fs, sp = url_filesystem(src)
        fs.mv(sp, url_filesystem(dst)[1])


def remove_tree(path: str) -> None:
    local = local_path(path)
    if local is not None:
        shutil.rmtree(local, ignore_errors=True)
        return
    with errors_named(path):
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
    with errors_named(folder):
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


@contextmanager
def staged_output(target: str, last: tuple[str, ...] = ()) -> Iterator[str]:
    """A local folder to build output folder `target` in. A local `target` is itself (its writer refuses a
    non-empty one). For any other URL: the bucket must exist and the destination be empty (refused
    otherwise, before anything is built); the block writes into an empty staging folder, which is uploaded
    when the block succeeds, the files in `last` (what marks the output complete) after all the others."""
    local = local_path(target)
    if local is not None:
        yield local
        return
    require_bucket(target)
    existing = list_files(target)
    if existing:
        raise OlmaxError(
            f"{target}: the destination is not empty ({len(existing)} files, e.g. {existing[0]}); "
            "choose a new URL or remove what is there"
        )
    staged = StagedDir(target)
    try:
        yield staged.local
        staged.commit(last=last)
    finally:
        staged.cleanup()

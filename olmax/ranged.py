"""Objects in `gs://`, `s3://` and other fsspec stores read in place by byte range, each at one version.

- Identity (`pin`): the first time a process meets an object it records its size and version (S3's ETag,
  GCS's generation, else what the store reports); every later read of that URL in the process must return
  the pinned version's bytes. A driver hands its pins to the workers of a cluster run (`export_pins`,
  `import_pins`), so every process reads the version the driver planned with.
- Reads (`Ranged.submit`): one request per byte range, run on a shared thread pool, so a reader keeps
  several in flight; s3:// asks with `If-Match: ETag` and gs:// for the pinned generation, so a rewritten
  object is refused by the store rather than read. A store that cannot pin a read (an emulator that ignores
  the generation, memory://) is covered by `confirm`: after a whole pass, the object's version is read
  again and compared.
- Transport: an s3:// or gs:// range is fetched with the standard library's HTTP client into a buffer of
  its size (`_fetch_into`: the socket fills it outside the interpreter lock, one connection kept per
  thread and host), the request signed by the store library itself (a presigned URL from s3fs's client,
  gcsfs's URL and credential headers). The libraries' own async clients hand every chunk through the
  interpreter and cost about twice the CPU a GB (docs/scale.md). A store behind a proxy, a requester-pays
  bucket, another fsspec store, or OLMAX_RANGED_CLIENT=library reads through the library instead.
- Faults: a body shorter than asked for (a connection cut mid-object), a connection error, a timeout and
  a 429 / 5xx / SlowDown answer are retried (ATTEMPTS tries with doubling waits, after the store library's
  own retries); what still fails, a changed object and an object removed while it was read are each one
  OlmaxError naming the URL, the bytes and the fix. No retry ever returns bytes of another version.
"""

from __future__ import annotations

import http.client
import inspect
import os
import re
import threading
import time
import urllib.request
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

import numpy as np

from olmax import storage
from olmax.errors import OlmaxError

ATTEMPTS = 5  # tries of one range after the store library's own retries
BACKOFF = 0.2  # seconds before the second try, doubled before each later one
POOL_THREADS = 32  # ranged requests of the whole process in flight at most
SOCKET_TIMEOUT = 60.0  # seconds one socket operation of a direct read may wait
PRESIGN_SECONDS = 3600  # an S3 presigned URL's life; a new one is made after half of it

# what a retry can cure: exceptions anywhere in the chain, and the codes of a store's answer
_TRANSIENT_NAMES = {
    "aiohttp.client_exceptions.ClientPayloadError",
    "aiohttp.client_exceptions.ClientConnectionError",
    "aiohttp.client_exceptions.ServerTimeoutError",
    "asyncio.exceptions.TimeoutError",
    "builtins.TimeoutError",
    "builtins.ConnectionError",
    "http.client.IncompleteRead",
    "botocore.exceptions.IncompleteReadError",
    "botocore.exceptions.ReadTimeoutError",
    "botocore.exceptions.ResponseStreamingError",
    "botocore.exceptions.ConnectionClosedError",
    "fsspec.exceptions.FSTimeoutError",
}
_TRANSIENT_CODES = {
    "SlowDown",
    "InternalError",
    "ServiceUnavailable",
    "RequestTimeout",
    "Throttling",
    "ThrottlingException",
    "TooManyRequests",
    "429",
    "500",
    "502",
    "503",
    "504",
}
_CHANGED_CODES = {"PreconditionFailed", "412"}


@dataclass(frozen=True)
class Pin:
    """One object as this process reads it: its canonical URL, size in bytes and version."""

    url: str
    size: int
    version: str


_pins: dict[str, Pin] = {}
_pins_lock = threading.Lock()


def canonical(url: str) -> str:
    """`scheme://bucket/key` of an object URL, one spelling per object (gcs:// is gs://, s3a:// is s3://)."""
    fs, path = storage.url_filesystem(url)
    proto = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return f"{proto}://{path}"


def _store(fs) -> str:
    """ "s3", "gs" or "" (another fsspec store): how a read pins its version."""
    module = type(fs).__module__
    return "s3" if module.startswith("s3fs") else "gs" if module.startswith("gcsfs") else ""


def _version(info: dict, store: str) -> str:
    keys = {"s3": ("ETag",), "gs": ("generation",)}.get(store, ())
    for key in (*keys, "ETag", "etag", "generation", "mtime", "LastModified", "updated", "created"):
        if info.get(key) is not None:
            return str(info[key])
    return ""


def _stat(url: str) -> Pin:
    """The object's size and version now, read from the store (not from a cached listing)."""
    with storage.errors_named(url):
        fs, path = storage.url_filesystem(url)
        fs.invalidate_cache(path)
        info = fs.info(path)
    return Pin(canonical(url), int(info.get("size") or 0), _version(info, _store(fs)))


def pin(url: str) -> Pin:
    """The version of `url` this process reads: pinned on first use (a missing object is an OlmaxError)."""
    key = canonical(url)
    with _pins_lock:
        have = _pins.get(key)
    if have is not None:
        return have
    found = _stat(url)
    with _pins_lock:
        return _pins.setdefault(key, found)


def pin_all(urls: list[str], threads: int = 16) -> list[Pin]:
    """`pin` of each URL, the store asked about several at once."""
    if len(urls) <= 1:
        return [pin(u) for u in urls]
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="olmax-pin") as pool:
        return list(pool.map(pin, urls))


def export_pins(urls) -> dict[str, list]:
    """The pins of `urls` (object URLs; local paths are skipped) as JSON-able {canonical URL: [size, version]}."""
    return {p.url: [p.size, p.version] for p in pin_all([u for u in urls if storage.local_path(u) is None])}


def import_pins(pins: dict[str, list] | None) -> None:
    """Adopt a driver's pins (`export_pins`) in this process; a pin already held is kept."""
    with _pins_lock:
        for url, (size, version) in (pins or {}).items():
            _pins.setdefault(url, Pin(url, int(size), str(version)))


class WithPins:
    """Picklable `fn` that first adopts a driver's pins (`import_pins`) in whatever process calls it: the map
    and reduce functions a cluster run ships to its workers."""

    def __init__(self, fn, pins: dict[str, list]):
        self.fn, self.pins = fn, pins

    def __call__(self, *args, **kwargs):
        import_pins(self.pins)
        return self.fn(*args, **kwargs)


def forget_pins() -> None:
    """Drop every pin and every piece kept (tests, and a long-lived process starting a new audit of a
    changed mix)."""
    with _pins_lock:
        _pins.clear()
    PIECES.clear()


class _Stats:
    """What this process asked of the stores: requests, bytes, retries and the most requests in flight."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests = self.bytes = self.retries = self.in_flight = self.most_in_flight = 0

    def start(self) -> None:
        with self.lock:
            self.requests += 1
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)

    def end(self, nbytes: int, retried: bool) -> None:
        with self.lock:
            self.in_flight -= 1
            self.bytes += nbytes
            self.retries += int(retried)


_stats = _Stats()


def stats() -> dict[str, int]:
    """{requests, bytes, retries, most_in_flight} of this process's ranged reads so far."""
    with _stats.lock:
        return {k: getattr(_stats, k) for k in ("requests", "bytes", "retries", "most_in_flight")}


PIECE_BYTES = 512 << 20  # what `PIECES` keeps


class Pieces:
    """Pieces of objects read before, keyed by (canonical URL, version, piece number), within PIECE_BYTES
    (the least recently used go first): a reader that comes back to the same parts of an object reads
    them once."""

    def __init__(self) -> None:
        self.held: OrderedDict[tuple, bytes] = OrderedDict()
        self.size = 0
        self.lock = threading.Lock()

    def get(self, key: tuple) -> bytes | None:
        with self.lock:
            data = self.held.get(key)
            if data is not None:
                self.held.move_to_end(key)
            return data

    def put(self, key: tuple, data: bytes) -> None:
        with self.lock:
            if key in self.held:
                return
            self.held[key] = data
            self.size += len(data)
            while self.size > PIECE_BYTES and len(self.held) > 1:
                self.size -= len(self.held.popitem(last=False)[1])

    def clear(self) -> None:
        with self.lock:
            self.held.clear()
            self.size = 0


PIECES = Pieces()


_pool: tuple[int, ThreadPoolExecutor] | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    """The process's pool of ranged requests (a new one after a fork: a pool's threads do not survive it)."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(POOL_THREADS, thread_name_prefix="olmax-range"))
        return _pool[1]


class HttpError(Exception):
    """A store's answer to a direct read that is not the range asked for. `code` is the HTTP status and
    `response` the S3 error code in botocore's shape, so olmax.storage sorts it as it sorts the libraries'
    own errors (retried, changed, denied, missing)."""

    def __init__(self, code: int, body: bytes):
        found = re.search(rb"<Code>([^<]{1,100})</Code>", body)
        name = found.group(1).decode("ascii", "replace") if found else str(code)
        self.code = code
        self.response = {"Error": {"Code": name}}
        super().__init__(f"HTTP {code} {name}")


_held = threading.local()  # this thread's open connections, by (scheme, host)


def _connection(scheme: str, host: str) -> http.client.HTTPConnection:
    """This thread's kept connection to `host` (a new one when none is kept: `_drop` forgets a bad one)."""
    conns = getattr(_held, "conns", None)
    if conns is None:
        conns = _held.conns = {}
    conn = conns.get((scheme, host))
    if conn is None:
        kind = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
        conn = conns[(scheme, host)] = kind(host, timeout=SOCKET_TIMEOUT)
    return conn


def _drop(scheme: str, host: str) -> None:
    conn = getattr(_held, "conns", {}).pop((scheme, host), None)
    if conn is not None:
        conn.close()


def _fetch_into(url: str, headers: dict[str, str], n: int) -> memoryview:
    """GET `url` with `headers` (a Range of `n` bytes) into a new buffer: a read-only view of its bytes, shorter
    than `n` when the body was. A kept connection the server had closed is opened again once, silently."""
    parts = urlsplit(url)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    while True:
        conn = _connection(parts.scheme, parts.netloc)
        reused = conn.sock is not None  # open since an earlier request
        try:
            conn.request("GET", target, headers=headers)
            resp = conn.getresponse()
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
            _drop(parts.scheme, parts.netloc)
            if reused:  # the next turn opens a new connection, which is not retried again
                continue
            raise
        except BaseException:
            _drop(parts.scheme, parts.netloc)
            raise
        break
    try:
        if resp.status not in (200, 206):
            raise HttpError(resp.status, resp.read(1 << 16))
        length = resp.getheader("Content-Length")
        if length is not None and int(length) > n:
            raise OlmaxError(
                f"{url.split('?', 1)[0]}: the store answered a request for {n} bytes with {length} (it "
                "ignored the Range header); check AWS_ENDPOINT_URL or STORAGE_EMULATOR_HOST, or set "
                "OLMAX_RANGED_CLIENT=library"
            )
        view, got = memoryview(np.empty(n, np.uint8)), 0  # not zeroed first: every byte is received into
        while got < n:
            k = resp.readinto(view[got:])
            if not k:
                break
            got += k
        if got < n or not resp.isclosed():
            _drop(parts.scheme, parts.netloc)
        return view[:got].toreadonly()
    except BaseException:
        _drop(parts.scheme, parts.netloc)
        raise


def _proxied(url: str) -> bool:
    """True when the environment routes `url` through a proxy (the libraries honour it; `_fetch_into` does not)."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    return bool(proxies.get(parts.scheme) or proxies.get("all")) and not urllib.request.proxy_bypass(
        parts.hostname or ""
    )


class Ranged:
    """One object read by byte range at its pinned version (`pin`)."""

    def __init__(self, url: str):
        self.url = url
        self.pin = pin(url)
        self.fs, self.path = storage.url_filesystem(url)
        self.store = _store(self.fs)
        self._direct: bool | None = None  # decided on the first request
        self._presigned: tuple[float, str] | None = None
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        return self.pin.size

    def submit(self, start: int, end: int) -> Future:
        """Bytes [start, end) of the object (clipped to its size), read on the pool: a Future of bytes."""
        return _executor().submit(self.read, start, end)

    def read(self, start: int, end: int) -> bytes:
        """Bytes [start, end) of the object (clipped to its size), retried as the module says."""
        end = min(end, self.size)
        if end <= start:
            return b""
        why = ""
        for attempt in range(ATTEMPTS):
            if attempt:
                time.sleep(BACKOFF * 2 ** (attempt - 1))
            _stats.start()
            data = b""
            try:
                data = self._request(start, end)
            except Exception as e:  # noqa: BLE001 - sorted below: retried, changed, removed or reported
                why = self._sort(e)
                continue
            finally:
                _stats.end(len(data), attempt > 0)
            if len(data) == end - start:
                return data
            why = f"{len(data)} of {end - start} bytes came back"
        raise OlmaxError(
            f"{self.url}: reading bytes {start}-{end} failed {ATTEMPTS} times ({why}); check the store "
            "and the network, then rerun"
        )

    def _request(self, start: int, end: int) -> bytes | memoryview:
        if self._direct is None:
            self._direct = self._can_go_direct()
        if self._direct:
            url, headers = self._signed(start, end)
            return _fetch_into(url, headers, end - start)
        if self.store == "s3":
            from fsspec.asyn import sync

            return sync(self.fs.loop, self._s3_get, start, end)
        if self.store == "gs":
            return self.fs.cat_file(self.path, start=start, end=end, generation=self.pin.version)
        return self.fs.cat_file(self.path, start=start, end=end)

    def _can_go_direct(self) -> bool:
        """Whether this object's ranges are read by `_fetch_into` (the module docstring says when not)."""
        if self.store not in ("s3", "gs") or os.environ.get("OLMAX_RANGED_CLIENT", "") == "library":
            return False
        if self.store == "s3" and getattr(self.fs, "req_kw", None):  # requester pays
            return False
        if self.store == "gs" and (getattr(self.fs, "requester_pays", False) or not hasattr(self.fs, "url")):
            return False
        url, _ = self._signed(0, 1)
        return not _proxied(url)

    def _signed(self, start: int, end: int) -> tuple[str, dict[str, str]]:
        """The URL and headers of a GET of bytes [start, end) at the pinned version, signed by the library."""
        span = f"bytes={start}-{end - 1}"
        if self.store == "gs":
            url = self.fs.url(self.path, generation=self.pin.version)
            with self._lock:  # gcsfs refreshes an expired token in here
                headers = self.fs._get_headers({"Range": span})
            return url, headers
        with self._lock:
            if self._presigned is None or time.monotonic() - self._presigned[0] > PRESIGN_SECONDS / 2:
                from fsspec.asyn import sync

                self._presigned = (time.monotonic(), sync(self.fs.loop, self._presign))
            url = self._presigned[1]
        return url, {"Range": span, "If-Match": self.pin.version}

    async def _presign(self) -> str:
        await self.fs.set_session()
        bucket, key, _ = self.fs.split_path(self.path)
        url = self.fs.s3.generate_presigned_url(
            "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=PRESIGN_SECONDS
        )
        return await url if inspect.isawaitable(url) else url

    async def _s3_get(self, start: int, end: int) -> bytes:
        bucket, key, _ = self.fs.split_path(self.path)
        resp = await self.fs._call_s3(
            "get_object", Bucket=bucket, Key=key, Range=f"bytes={start}-{end - 1}", IfMatch=self.pin.version
        )
        body = resp["Body"]
        try:
            return await body.read()
        finally:
            body.close()

    def _sort(self, exc: BaseException) -> str:
        """Why a request failed, when a retry may cure it; else raise the one-line error it deserves."""
        if isinstance(exc, OlmaxError):
            raise exc
        names, codes = storage.error_names(exc), storage.error_codes(exc)
        if codes & _CHANGED_CODES or isinstance(exc, FileNotFoundError) or codes & {"NoSuchKey", "404"}:
            # refused at the pinned version, or gone: the error says what the store holds now; when it
            # still holds that version, the answer was a passing one
            self.confirm()
            return " ".join(str(exc).split()) or type(exc).__name__
        if names & _TRANSIENT_NAMES or codes & _TRANSIENT_CODES:
            return " ".join(str(exc).split()) or type(exc).__name__
        raise storage.failure(self.url, exc) or exc

    def confirm(self) -> None:
        """Raise the one-line error when the object no longer has its pinned size and version."""
        try:
            now = _stat(self.url)
        except OlmaxError:
            raise OlmaxError(
                f"{self.url}: removed while it was being read (it held {self.size} bytes when the command "
                "started); rerun once the data is no longer being changed"
            ) from None
        if (now.size, now.version) != (self.pin.size, self.pin.version):
            raise self._changed(now)

    def _changed(self, now: Pin) -> OlmaxError:
        return OlmaxError(
            f"{self.url}: the object changed while it was being read (version {self.pin.version}, "
            f"{self.pin.size} bytes when the command started; now {now.version}, {now.size} bytes); rerun "
            "once the data is no longer being rewritten"
        )

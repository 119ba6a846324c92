"""Real object-store protocol servers on loopback for the bucket tests: moto's S3 server and a GCS JSON API
emulator (gcp-storage-emulator), each started in this process on a free port of 127.0.0.1, waited for
(bounded) and stopped on exit. `Store` is what a test gets: a fresh bucket's URL prefix, an fsspec
filesystem on it, and the environment a `python -m olmax.cli` subprocess needs to reach the server."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

START_TIMEOUT = 20.0  # seconds a server may take to answer on its port

# gcsfs picks its class at import: the extended one probes a gRPC endpoint the emulator does not serve
# (and waits on it), so the plain JSON API class is selected before anything imports gcsfs.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, what: str, timeout: float = START_TIMEOUT) -> None:
    """Return once 127.0.0.1:`port` accepts a connection; a clear failure after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError as e:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{what} did not answer on 127.0.0.1:{port} within {timeout:.0f} s ({e})"
                ) from None
            time.sleep(0.05)


def _start_in_thread(start, port: int, what: str) -> None:
    """Call a server's blocking `start()` in a daemon thread (its own readiness wait has no timeout) and
    wait for the port instead."""
    failure: list[BaseException] = []

    def run():
        try:
            start()
        except BaseException as e:  # noqa: BLE001 - reported below
            failure.append(e)

    threading.Thread(target=run, daemon=True, name=f"start {what}").start()
    try:
        wait_for_port(port, what)
    except RuntimeError:
        if failure:
            raise RuntimeError(f"{what} failed to start: {failure[0]!r}") from failure[0]
        raise


@dataclass
class Store:
    """One object store: `scheme` ("s3" or "gs"), `endpoint`, the environment a subprocess needs (`env`:
    credentials and the endpoint), and `bucket()` to make a fresh bucket."""

    scheme: str
    endpoint: str
    env: dict[str, str]
    _fs: object = None
    buckets: list[str] = field(default_factory=list)

    @property
    def fs(self):
        """An fsspec filesystem on the server (the tests' own client, not olmax's)."""
        if self._fs is None:
            if self.scheme == "s3":
                import s3fs

                self._fs = s3fs.S3FileSystem(
                    key="testing",
                    secret="testing",
                    client_kwargs={"endpoint_url": self.endpoint},  # a region here would be sent as a
                    # LocationConstraint, which us-east-1 is not
                    skip_instance_cache=True,
                )
            else:
                from gcsfs.core import GCSFileSystem

                self._fs = GCSFileSystem(
                    endpoint_url=self.endpoint, token="anon", project="test", skip_instance_cache=True
                )
        return self._fs

    def bucket(self, prefix: str = "olmax") -> str:
        """A new empty bucket's URL, `s3://NAME` or `gs://NAME`."""
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        self.fs.mkdir(name)
        self.fs.invalidate_cache()
        self.buckets.append(name)
        return f"{self.scheme}://{name}"

    def unused_bucket(self) -> str:
        """The URL of a bucket that does not exist."""
        return f"{self.scheme}://olmax-missing-{uuid.uuid4().hex[:10]}"

    def put_tree(self, local: str | os.PathLike, url: str) -> None:
        """Upload a local folder's files under `url`."""
        from pathlib import Path

        root = Path(local)
        for p in sorted(root.rglob("*")):
            if p.is_file():
                self.fs.put_file(str(p), f"{url.split('://', 1)[1].rstrip('/')}/{p.relative_to(root)}")
        self.fs.invalidate_cache()

    def read_tree(self, url: str) -> dict[str, bytes]:
        """Every object under `url`, keyed by its path relative to `url`."""
        self.fs.invalidate_cache()
        base = url.split("://", 1)[1].rstrip("/") + "/"
        return {p[len(base) :]: self.fs.cat_file(p) for p in sorted(self.fs.find(base)) if p.startswith(base)}


S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@contextmanager
def moto_s3() -> Iterator[Store]:
    """moto's S3 server (`ThreadedMotoServer`) on a free port of 127.0.0.1. botocore, under s3fs, reads
    the endpoint from AWS_ENDPOINT_URL."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    _start_in_thread(server.start, port, "moto's S3 server")
    endpoint = f"http://127.0.0.1:{port}"
    try:
        yield Store("s3", endpoint, {**S3_ENV, "AWS_ENDPOINT_URL": endpoint})
    finally:
        server.stop()


def _multipart_related(raw: bytes, content_type: str) -> dict | None:
    """A `multipart/related` upload body (JSON metadata, then the object's bytes) split as GCS splits it:
    the line break before each delimiter, LF or CRLF as the body's first delimiter line ends, belongs to
    the delimiter and nothing else is removed. None when the body is not of that shape."""
    import json
    import re

    found = re.search(r'boundary="?([^";]+)"?', content_type)
    if found is None:
        return None
    delimiter = b"--" + found.group(1).encode()
    if not raw.startswith(delimiter):
        return None
    brk = b"\r\n" if raw[len(delimiter) :].startswith(b"\r\n") else b"\n"
    parts = raw.split(brk + delimiter)
    parts[0] = parts[0][len(delimiter) :]
    out = []
    for part in parts[:-1] if parts[-1].startswith(b"--") else parts:
        head, _, body = part[len(brk) :].partition(brk + brk)
        out.append((head.decode("latin-1"), body))
    if len(out) != 2:
        return None
    kind = re.search(r"(?im)^content-type:\s*([^;\r\n]+)", out[1][0])
    return {
        "meta": json.loads(out[0][1]),
        "content": out[1][1],
        "content-type": kind.group(1).strip() if kind else "application/octet-stream",
    }


def _exact_uploads() -> None:
    """Make the emulator keep an object's bytes exactly as uploaded. It parses a multipart upload (gcsfs's
    upload of a file under 5 MB) with Python's email parser, which drops a last byte 0x0D (CR) of the
    object: a file ending in CR is stored one byte short, its size no longer what was sent, where GCS
    stores what was sent. A checkpoint step holding such a file never became complete in the bucket (its
    seal lists the true size), and a watcher waited for it in vain."""
    from gcp_storage_emulator import server

    if getattr(server, "_olmax_exact_uploads", False):
        return
    read_data = server._read_data

    def read_exactly(request_handler, query):
        content_type = request_handler.headers.get("Content-Type") or ""
        if not content_type.startswith("multipart/related"):
            return read_data(request_handler, query)
        raw = server._decode_raw_data(server._read_raw_data(request_handler), request_handler)
        parsed = _multipart_related(raw or b"", content_type)
        if parsed is None:
            raise ValueError(f"a multipart/related upload the test emulator cannot split ({content_type})")
        return parsed

    server._read_data = read_exactly
    server._olmax_exact_uploads = True


@contextmanager
def gcs_emulator() -> Iterator[Store]:
    """gcp-storage-emulator's server (in memory) on a free port of 127.0.0.1, keeping uploads' bytes exactly
    (`_exact_uploads`); gcsfs reads its address from STORAGE_EMULATOR_HOST."""
    import logging

    from gcp_storage_emulator.server import create_server

    _exact_uploads()
    logging.getLogger("gcp_storage_emulator").setLevel(logging.CRITICAL)  # no line per missing object
    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True)
    _start_in_thread(server.start, port, "the GCS emulator")
    httpd = getattr(server._api, "_httpd", None)
    if httpd is not None:  # a client that closes a ranged read early is not a server error worth a trace
        httpd.handle_error = lambda request, client_address: None
    endpoint = f"http://127.0.0.1:{port}"
    try:
        yield Store(
            "gs",
            endpoint,
            {
                "STORAGE_EMULATOR_HOST": endpoint,
                "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
                "NO_GCE_CHECK": "true",  # google-auth: no metadata-server probe while looking for credentials
            },
        )
    finally:
        server.stop()


@contextmanager
def object_store(scheme: str) -> Iterator[Store]:
    with {"s3": moto_s3, "gs": gcs_emulator}[scheme]() as store:
        yield store

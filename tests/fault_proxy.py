"""An HTTP proxy on loopback in front of a test object store (tests/object_stores.py) that breaks chosen
requests the way a real store or network does: `slowdown` answers 503 (S3's SlowDown, GCS's
backendError) without asking the store, `cut` forwards the answer's headers and half its body and then
drops the connection, `before` runs a callback (rewrite or remove an object) before forwarding. Each
fault applies to the next `times` requests its `match` accepts; everything else is forwarded as is."""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

from tests.object_stores import free_port, wait_for_port

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}
SLOWDOWN = {
    "s3": (
        b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>SlowDown</Code>"
        b"<Message>Please reduce your request rate.</Message></Error>",
        "application/xml",
    ),
    "gs": (
        b'{"error": {"code": 503, "message": "We encountered an internal error. Please try again.", '
        b'"errors": [{"reason": "backendError"}]}}',
        "application/json",
    ),
}


def ranged_get(name: str) -> Callable[[str, str, dict], bool]:
    """A `match` for the ranged GETs of an object whose path holds `name`."""
    return lambda method, path, headers: method == "GET" and "range" in headers and name in path


@dataclass
class Fault:
    kind: str  # "slowdown", "cut" or "before"
    match: Callable[[str, str, dict], bool]
    times: int = 1
    before: Callable[[], None] | None = None
    hits: int = 0


class FaultProxy:
    """`with FaultProxy(store) as proxy:` a proxy of `store` (an object_stores.Store) on a free port;
    `proxy.env` reaches the store through it, `proxy.faults` is the list of Faults to apply."""

    def __init__(self, store):
        self.store, self.faults = store, []
        self.lock = threading.Lock()
        up = urlparse(store.endpoint)
        self.upstream = (up.hostname, up.port)
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        key = "AWS_ENDPOINT_URL" if store.scheme == "s3" else "STORAGE_EMULATOR_HOST"
        self.env = {**store.env, key: self.endpoint}

    def take(self, method: str, path: str, headers: dict) -> Fault | None:
        """The fault for this request (counted), if one still applies."""
        with self.lock:
            for f in self.faults:
                if f.hits < f.times and f.match(method, path, headers):
                    f.hits += 1
                    return f
        return None

    def __enter__(self) -> FaultProxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    out = b""
                    while (size := int(self.rfile.readline().strip() or b"0", 16)) > 0:
                        out += self.rfile.read(size)
                        self.rfile.readline()
                    self.rfile.readline()
                    return out
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _reply(self, status: int, headers: list, body: bytes, cut: bool = False) -> None:
                self.send_response(status)
                head = self.command == "HEAD"  # its Content-Length is the object's, and no body follows
                for k, v in headers:
                    if k.lower() not in HOP_BY_HOP and (head or k.lower() != "content-length"):
                        self.send_header(k, v)
                if not head:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if head:
                    return
                if cut:  # half the body, then the connection drops
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.wfile.write(body)

            def _forward(self) -> None:
                body = self._body()
                headers = {k.lower(): v for k, v in self.headers.items()}
                fault = proxy.take(self.command, self.path, headers)
                if fault is not None and fault.kind == "slowdown":
                    text, kind = SLOWDOWN[proxy.store.scheme]
                    self._reply(503, [("Content-Type", kind)], text)
                    return
                if fault is not None and fault.before is not None:
                    fault.before()
                conn = http.client.HTTPConnection(*proxy.upstream, timeout=60)
                try:
                    send = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                    conn.request(self.command, self.path, body=body or None, headers=send)
                    resp = conn.getresponse()
                    data = resp.read()
                    self._reply(
                        resp.status, resp.getheaders(), data, cut=fault is not None and fault.kind == "cut"
                    )
                finally:
                    conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True, name="fault proxy").start()
        wait_for_port(self.port, "the fault proxy")
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

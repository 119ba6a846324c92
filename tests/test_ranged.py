"""olmax/ranged.py's direct reads (`_fetch_into`) against a loopback HTTP server that misbehaves on purpose:
the bytes of the range into a read-only buffer over one kept connection, a kept connection the server
closed meanwhile opened again, a 503 slow-down and a body cut short sorted as the retry loop expects, and
a server that ignores the Range header refused in one line. (Reads through moto and the GCS emulator,
faults included, are in tests/audit/test_audit_bucket_faults.py.)"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from olmax import ranged, storage
from olmax.errors import OlmaxError

DATA = np.random.default_rng(0).integers(0, 256, size=1 << 20, dtype=np.uint8).tobytes()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive unless a case closes
    connections: list = []

    def setup(self):
        super().setup()
        Handler.connections.append(self.client_address)

    def log_message(self, *args):
        pass

    def do_GET(self):
        a, b = (int(x) for x in self.headers["Range"].removeprefix("bytes=").split("-"))
        body, status = DATA[a : b + 1], 206
        if self.path == "/slow-down":
            body, status = b"<Error><Code>SlowDown</Code><Message>Reduce your rate</Message></Error>", 503
        elif self.path == "/whole":
            body, status = DATA, 200
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.path == "/cut":
            self.wfile.write(body[: len(body) // 2])
            self.close_connection = True
            return
        self.wfile.write(body)
        if self.path == "/close-after":  # closed without saying so: the client finds out on its next request
            self.close_connection = True


@pytest.fixture(scope="module")
def base():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def no_kept_connections():
    for conn in getattr(ranged._held, "conns", {}).values():
        conn.close()
    ranged._held.conns = {}
    Handler.connections.clear()


def span(a: int, b: int) -> dict[str, str]:
    return {"Range": f"bytes={a}-{b - 1}"}


def test_ranges_come_back_read_only_over_one_kept_connection(base):
    for a, b in [(0, 1), (100, 70_000), (len(DATA) - 5, len(DATA))]:
        got = ranged._fetch_into(f"{base}/ok", span(a, b), b - a)
        assert bytes(got) == DATA[a:b] and got.readonly
    assert len(Handler.connections) == 1


def test_a_connection_the_server_closed_is_opened_again(base):
    for a in range(3):
        assert bytes(ranged._fetch_into(f"{base}/close-after", span(a, a + 10), 10)) == DATA[a : a + 10]
    assert len(Handler.connections) == 3


def test_a_slow_down_and_a_cut_body_are_what_the_retry_loop_retries(base):
    """A 503 is an error the loop retries; a body cut short comes back short, which the loop retries."""
    with pytest.raises(ranged.HttpError) as info:
        ranged._fetch_into(f"{base}/slow-down", span(0, 10), 10)
    assert storage.error_codes(info.value) == {"SlowDown", "503"}
    assert storage.error_codes(info.value) & ranged._TRANSIENT_CODES
    assert bytes(ranged._fetch_into(f"{base}/cut", span(0, 1000), 1000)) == DATA[:500]
    assert bytes(ranged._fetch_into(f"{base}/ok", span(0, 10), 10)) == DATA[:10]  # the thread goes on


def test_a_server_that_ignores_the_range_is_one_error_line(base):
    with pytest.raises(OlmaxError, match=r"/whole: the store answered a request for 10 bytes with 1048576"):
        ranged._fetch_into(f"{base}/whole", span(0, 10), 10)

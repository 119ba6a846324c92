"""Fixtures shared by every test area (a dask.distributed cluster on loopback for the DaskRunner tests), and
the switch CI runs under: with `OLMAX_REQUIRE_ALL=1` a skipped test is a failure, so a missing package or
peer environment (Beam, Dask, OLMo-core, the dedup peers' venv) cannot pass as a skip. A test whose skip
does not mean a broken install (it needs files only some machines have) says so with `may_skip`."""

from __future__ import annotations

import importlib
import os
from contextlib import ExitStack

import pytest

REQUIRE_ALL = os.environ.get("OLMAX_REQUIRE_ALL") == "1"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not (REQUIRE_ALL and report.skipped) or hasattr(report, "wasxfail"):
        return
    if item.get_closest_marker("may_skip") is not None:
        return
    _fail_the_skip(report)


_SKIPPED_MODULES: list[str] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A whole module skipped at import (`pytest.importorskip` at its top) fails the run too, at its end (a
    collection error would stop every other test)."""
    outcome = yield
    report = outcome.get_result()
    if REQUIRE_ALL and report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _SKIPPED_MODULES.append(f"{report.nodeid}: {reason}")


def pytest_terminal_summary(terminalreporter):
    for line in _SKIPPED_MODULES:
        terminalreporter.write_line(f"FAILED (module skipped under OLMAX_REQUIRE_ALL=1) {line}", red=True)


def pytest_sessionfinish(session, exitstatus):
    if _SKIPPED_MODULES and session.exitstatus == 0:
        session.exitstatus = 1


def _fail_the_skip(report) -> None:
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = f"skipped under OLMAX_REQUIRE_ALL=1, where nothing may be missing: {reason}"


@pytest.fixture(scope="session")
def dask_address(object_servers):
    """A scheduler and two single-threaded worker processes on 127.0.0.1 (one cluster per test run), whose
    environment reaches the loopback object stores (`object_servers`), so workers read their buckets."""
    pytest.importorskip("apache_beam")
    pytest.importorskip("distributed")
    from olmax.testing.dask_cluster import dask_cluster

    env = {}
    for scheme, module in (("s3", "moto.server"), ("gs", "gcp_storage_emulator.server")):
        try:
            importlib.import_module(module)
        except ImportError:
            continue  # that store's bucket tests skip; the cluster serves the others
        env.update(object_servers(scheme).env)
    saved = {k: os.environ.get(k) for k in env}
    with ExitStack() as stack:
        os.environ.update(env)  # the workers inherit it when they start; this process gets it back
        try:
            address = stack.enter_context(dask_cluster(workers=2))
        finally:
            for k, v in saved.items():
                os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
        yield address


@pytest.fixture(scope="session")
def object_servers():
    """moto's S3 server and the GCS emulator on loopback (tests/object_stores.py), each started on first
    use and stopped at the end of the test run."""
    from contextlib import ExitStack

    from tests.object_stores import object_store

    started: dict = {}
    with ExitStack() as stack:

        def get(scheme: str):
            if scheme not in started:
                started[scheme] = stack.enter_context(object_store(scheme))
            return started[scheme]

        yield get


class Bucket:
    """A fresh bucket on a loopback server: `url` (`s3://NAME` or `gs://NAME`), `fs` (the tests' own fsspec
    filesystem on it), `server` (the `object_stores.Store`)."""

    def __init__(self, server, url: str):
        self.server, self.url, self.scheme = server, url, server.scheme

    @property
    def fs(self):
        return self.server.fs

    def join(self, *parts: str) -> str:
        return "/".join([self.url, *parts])


@pytest.fixture(params=["s3", "gs"])
def store(request, object_servers, monkeypatch) -> Bucket:
    """A fresh, empty bucket on moto's S3 server or the GCS emulator; the environment (credentials and
    endpoint) is set in os.environ, so `python -m olmax.cli` subprocesses reach the same server."""
    pytest.importorskip({"s3": "s3fs", "gs": "gcsfs"}[request.param])
    pytest.importorskip({"s3": "moto.server", "gs": "gcp_storage_emulator.server"}[request.param])
    server = object_servers(request.param)
    for k, v in server.env.items():
        monkeypatch.setenv(k, v)
    return Bucket(server, server.bucket())

"""Faults while `olmax audit loader` reads a mix in a bucket (moto's S3 server and the GCS emulator, behind a
proxy that breaks chosen requests: tests/fault_proxy.py): 503 slow-downs and reads cut mid-object are
retried and the report is the local one; an object rewritten while it is read, and one the mix lists that
is not there, are one `olmax: error:` line naming it, with no report written (an object removed while it
is read: tests/data/test_token_reads.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.audit.audit_testdata import corpus_folder, write_mix
from tests.fault_proxy import Fault, FaultProxy, ranged_get

pytestmark = pytest.mark.slow  # two protocol servers and ~5 audits per store: about a minute

STREAM = ["--seq-len", "64", "--global-batch-size", "8", "--seed", "7"]


def olmax(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "olmax.cli", *args], capture_output=True, text=True, timeout=300, env=env
    )


@pytest.fixture(scope="module")
def local(corpus, tmp_path_factory) -> dict:
    """A mix of the corpus (code-1 copied under another name) in one folder, and its local report."""
    root = tmp_path_factory.mktemp("bucket-faults")
    data = corpus_folder(corpus, root / "shards")
    names = ["code-0", "code-1", "code-2", "prose-0", "copy"]
    write_mix(data / "mix.txt", [("code", f"{n}.npy") for n in names])
    proc = olmax(
        "audit", "loader", "--mix", str(data / "mix.txt"), *STREAM, "--out", str(root / "r.json"), env=None
    )
    assert proc.returncode == 1, proc.stderr  # the copy fails the gate
    return {"data": data, "report": json.loads((root / "r.json").read_text())}


def comparable(report: dict, folder: str) -> str:
    out = {k: v for k, v in report.items() if k not in ("timing", "performance", "checks_ran", "settings")}
    lines = report["summary"]
    out["summary"] = lines[
        : next((i for i, x in enumerate(lines) if x.startswith("checks ran:")), len(lines))
    ]
    return json.dumps(out, sort_keys=True).replace(folder, "DATA")


def audit(url: str, proxy: FaultProxy, out) -> subprocess.CompletedProcess:
    import os

    return olmax(
        "audit",
        "loader",
        "--mix",
        f"{url}/mix.txt",
        *STREAM,
        "--out",
        str(out),
        env={**os.environ, **proxy.env},
    )


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [x for x in proc.stderr.splitlines() if x.startswith("olmax: error:")]
    assert len(lines) == 1, proc.stderr[-3000:]
    return lines[0]


def test_slow_downs_and_cut_reads_are_retried(store, local, tmp_path):
    url = store.join("shards")
    store.server.put_tree(local["data"], url)
    with FaultProxy(store.server) as proxy:
        proxy.faults = [
            Fault("slowdown", ranged_get("code-"), times=3),
            Fault("cut", ranged_get("prose-0"), times=2),
            Fault("cut", ranged_get("copy"), times=1),
        ]
        proc = audit(url, proxy, tmp_path / "r.json")
        assert [f.hits for f in proxy.faults] == [3, 2, 1]
    assert proc.returncode == 1 and "olmax: error" not in proc.stderr, proc.stderr[-3000:]
    got = json.loads((tmp_path / "r.json").read_text())
    assert comparable(got, url) == comparable(local["report"], str(local["data"]))


def test_an_object_rewritten_during_the_audit_or_missing_is_one_error_line(store, local, tmp_path):
    url = store.join("shards")
    store.server.put_tree(local["data"], url)
    key = f"{url.split('://', 1)[1]}/code-2.npy"
    other = np.random.default_rng(0).integers(0, 1000, store.fs.size(key) // 4).astype(np.uint32).tobytes()
    with FaultProxy(store.server) as proxy:  # the same size, other bytes: only the version tells
        proxy.faults = [Fault("before", ranged_get("code-2"), before=lambda: store.fs.pipe_file(key, other))]
        proc = audit(url, proxy, tmp_path / "rewritten.json")
        assert proxy.faults[0].hits == 1
    line = one_error_line(proc)
    assert f"{url}/code-2.npy" in line and "changed while it was being read" in line, line
    assert not (tmp_path / "rewritten.json").exists()
    store.fs.rm_file(f"{url.split('://', 1)[1]}/prose-0.npy")
    with FaultProxy(store.server) as proxy:
        line = one_error_line(audit(url, proxy, tmp_path / "missing.json"))
    assert f"{url}/prose-0.npy" in line and "not found" in line, line
    assert not (tmp_path / "missing.json").exists()

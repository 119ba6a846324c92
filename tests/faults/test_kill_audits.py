"""SIGKILL at random moments of `olmax audit leaks` and `olmax audit dedup`: the report path never holds a
torn file, and the rerun's report equals an uninterrupted run's (timing fields aside) (slow)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import zlib

import pytest

from olmax.testing.prepare_testdata import pydoc_texts, stdlib_texts
from tests.audit.audit_testdata import tokenize_docs, write_mix, write_shard

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def mix(tmp_path_factory) -> dict:
    from olmax.assets import tokenizer_path
    from olmax.data.tokenize import load_tokenizer
    from olmax.evalsets.read import load_eval

    root = tmp_path_factory.mktemp("kill-audits")
    tok = load_tokenizer(str(tokenizer_path("dolma2", quiet=True)))
    items = [it for it in load_eval("sciq")[1] if len(it.text.split()) >= 30][:40]
    code = [(i, t[:20000]) for i, t in stdlib_texts(120)]
    prose = [(i, t[:8000]) for i, t in pydoc_texts()[:80]]
    for j in range(10):  # planted items, and a copied document (for dedup)
        i, t = code[j]
        code[j] = (i, t[:3000] + "\n" + items[j].text + "\n" + t[3000:])
    code.append(("copy-of-" + code[20][0], code[20][1]))
    write_shard(root / "code.npy", tokenize_docs(tok, code))
    write_shard(root / "prose.npy", tokenize_docs(tok, prose))
    with open(root / "sciq.jsonl", "w") as f:
        for it in items:
            f.write(json.dumps({"id": it.id, "text": it.text}) + "\n")
    return {
        "mix": write_mix(
            root / "mix.txt", [("code", str(root / "code.npy")), ("prose", str(root / "prose.npy"))]
        ),
        "eval": f"sciq={root / 'sciq.jsonl'}",
    }


def olmax_cmd(*args: str) -> list[str]:
    return [
        sys.executable,
        "-c",
        "import sys; from olmax.cli import main; sys.exit(main(sys.argv[1:]))",
        *args,
    ]


def without_timing(report: dict) -> dict:
    return {k: v for k, v in report.items() if k not in ("timing",)}


@pytest.mark.parametrize("command", ["leaks", "dedup"])
def test_sigkill_then_rerun_gives_the_uninterrupted_report(mix, tmp_path, command):
    extra = ["--eval", mix["eval"]] if command == "leaks" else []
    ref_out = tmp_path / "ref.json"
    t = time.perf_counter()
    p = subprocess.run(
        olmax_cmd("audit", command, "--mix", mix["mix"], *extra, "--out", str(ref_out)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    full = time.perf_counter() - t
    assert p.returncode in (0, 1), p.stderr[-2000:]  # 1: the audit found what was planted
    reference = without_timing(json.loads(ref_out.read_text()))
    out = tmp_path / "r.json"
    rng = random.Random(
        zlib.crc32(command.encode())
    )  # the same kill times in every process (hash() is salted)
    for delay in sorted(rng.uniform(0.2, 0.95) * full for _ in range(3)):
        proc = subprocess.Popen(
            olmax_cmd("audit", command, "--mix", mix["mix"], *extra, "--out", str(out)),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        if out.exists():  # only ever a whole report (written to a temporary name, then renamed)
            json.loads(out.read_text())
        p = subprocess.run(
            olmax_cmd("audit", command, "--mix", mix["mix"], *extra, "--out", str(out)),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert p.returncode in (0, 1) and "Traceback" not in p.stderr, p.stderr[-2000:]
        assert without_timing(json.loads(out.read_text())) == reference, f"killed after {delay:.2f}s"
        out.unlink()

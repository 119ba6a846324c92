"""Audit verdicts through the CLI: a gated check that could not run for lack of input makes the verdict
`inconclusive` (exit 3, `=> INCONCLUSIVE` naming the check and what it needs), never a clean pass; the
same audits with that input pass (exit 0)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.audit.audit_testdata import write_mix, write_records

L, G, SEED = 64, 8, 7


def olmax(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "olmax.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def verdict_line(p: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in p.stderr, p.stderr
    return next(ln.strip() for ln in p.stdout.splitlines() if ln.strip().startswith("=> "))


def mix(corpus, tmp_path) -> str:
    s = corpus["shards"]
    return write_mix(
        tmp_path / "mix.txt", [("code", s["code-0"]), ("code", s["code-1"]), ("prose", s["prose-0"])]
    )


def test_a_loader_audit_short_of_an_epoch_is_inconclusive_about_missing_instances(corpus, tmp_path):
    stream = ["--mix", mix(corpus, tmp_path), "--seq-len", str(L), "--global-batch-size", str(G)]
    stream += ["--seed", str(SEED), "--work-dir", str(tmp_path / "work"), "--no-content"]
    short = olmax("audit", "loader", *stream, "--steps", "2", "--out", "short.json", cwd=tmp_path)
    assert short.returncode == 3, short.stdout + short.stderr
    line = verdict_line(short)
    assert line.startswith("=> INCONCLUSIVE: instances_missing could not run (needs a whole epoch replayed")
    assert "SKIP instances_missing: could not run" in short.stdout
    rep = json.loads((tmp_path / "short.json").read_text())
    assert rep["verdict"] == "inconclusive" and rep["checks"]["instances_missing"]["ok"] is None
    whole = olmax("audit", "loader", *stream, "--out", "whole.json", cwd=tmp_path)  # one epoch, the default
    assert whole.returncode == 0 and verdict_line(whole) == "=> PASS", whole.stdout + whole.stderr
    assert json.loads((tmp_path / "whole.json").read_text())["verdict"] == "pass"


def test_a_dedup_audit_with_no_document_long_enough_is_inconclusive(corpus, tmp_path):
    m = mix(corpus, tmp_path)
    none = olmax("audit", "dedup", "--mix", m, "--min-doc-tokens", "1000000", "--out", "d.json", cwd=tmp_path)
    assert none.returncode == 3, none.stdout + none.stderr
    assert "duplicate_documents could not run (needs documents of at least 1000000 tokens" in verdict_line(
        none
    )
    some = olmax("audit", "dedup", "--mix", m, "--out", "d.json", cwd=tmp_path)
    assert some.returncode == 0 and verdict_line(some) == "=> PASS", some.stdout + some.stderr


def test_a_leak_audit_of_a_set_with_no_decidable_item_is_inconclusive(corpus, tmp_path):
    m = mix(corpus, tmp_path)
    tiny = write_records(tmp_path / "tiny.jsonl", [{"id": "a", "text": "yes"}, {"id": "b", "text": "no way"}])
    p = olmax("audit", "leaks", "--mix", m, "--eval", f"tiny={tiny}", "--out", "l.json", cwd=tmp_path)
    assert p.returncode == 3, p.stdout + p.stderr
    line = verdict_line(p)
    assert "contaminated:tiny could not run (needs items of at least 4 words: tiny has 2 item(s)" in line
    words = "which gas do plants take in from the air to make their food"
    real = write_records(tmp_path / "real.jsonl", [{"id": "q", "text": words}])
    ok = olmax("audit", "leaks", "--mix", m, "--eval", f"real={real}", "--out", "l.json", cwd=tmp_path)
    assert ok.returncode == 0 and verdict_line(ok) == "=> PASS", ok.stdout + ok.stderr

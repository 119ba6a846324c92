"""Input documents' errors through `olmax data prepare`: a malformed JSON line is one `olmax: error:` line
with the file, the line, the column and the whole reason, and no output is left behind."""

from __future__ import annotations

import json
import subprocess
import sys


def test_a_raw_control_character_names_file_line_column_and_the_escape(tmp_path, dolma2):
    good = json.dumps({"id": "a", "text": "one"})
    bad = '{"id": "b", "text": "a tab\there"}'  # a raw tab inside a string, as a hand-written exporter leaves
    (tmp_path / "docs.jsonl").write_text(f"{good}\n{bad}\n")
    out = tmp_path / "out"
    p = subprocess.run(
        [sys.executable, "-m", "olmax.cli", "data", "prepare", "--no-progress", "--tokenizer", dolma2]
        + ["--out", str(out), f"src={tmp_path / 'docs.jsonl'}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, p.stderr
    column = bad.index("\t") + 1
    assert lines[0] == (
        f"olmax: error: {tmp_path / 'docs.jsonl'}:2: malformed JSON line (column {column}: a raw control "
        "character '\\t' (U+0009) inside a string; JSON needs it escaped as \\t); fix it or pass "
        "--skip-bad-lines to skip and count such lines"
    )
    assert not (out / "mix.txt").exists()


def test_a_line_cut_short_names_its_own_column_not_the_next_line(tmp_path, dolma2):
    cut = '{"id": "b", "text": '
    (tmp_path / "docs.jsonl").write_text(f"{cut}\n")
    p = subprocess.run(
        [sys.executable, "-m", "olmax.cli", "data", "prepare", "--no-progress", "--tokenizer", dolma2]
        + ["--out", str(tmp_path / "out"), f"src={tmp_path / 'docs.jsonl'}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 2, p.stderr
    assert (
        f":1: malformed JSON line (column {len(cut) + 1}: expecting value, found the end of the line)"
        in p.stderr
    )

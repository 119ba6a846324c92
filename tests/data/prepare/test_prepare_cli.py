"""`olmax data prepare`'s output streams through the CLI: the human summary (the totals headline, then one
line per source) on stderr, in that order, and only the mix path on stdout."""

from __future__ import annotations

import subprocess
import sys

from olmax.testing.prepare_testdata import stdlib_texts, write_jsonl


def test_the_summary_is_on_stderr_in_order_and_stdout_holds_only_the_mix_path(tmp_path, dolma2):
    docs = stdlib_texts(5)
    write_jsonl(tmp_path / "code.jsonl", docs[:3])
    write_jsonl(tmp_path / "more.jsonl", docs[3:])
    out = tmp_path / "out"
    p = subprocess.run(
        [sys.executable, "-m", "olmax.cli", "data", "prepare", "--no-progress", "--tokenizer", dolma2]
        + ["--out", str(out), f"code={tmp_path / 'code.jsonl'}", f"more={tmp_path / 'more.jsonl'}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout == f"{out}/mix.txt\n"
    lines = p.stderr.splitlines()
    # the engine line, the headline, then one line per source, all on stderr and in that order
    assert [ln.split(" ", 1)[0] for ln in lines] == ["olmax:", "olmax:", "code:", "more:"], p.stderr
    assert lines[0].startswith("olmax: tokenizer engine ") and lines[1].startswith("olmax: prepared ")
    lines = lines[1:]
    assert lines[1].startswith("code: 3 docs, ")

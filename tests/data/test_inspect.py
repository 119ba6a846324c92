"""`olmax data inspect` through the CLI on damaged or partial inputs: a mix whose shard was deleted, a prepare
folder a killed run left, a document dedup removed: one `olmax: error:` line that says what happened and
the fix, exit 2, no traceback and nothing on stdout; the counts table of a whole mix is unchanged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from olmax.cli import main
from olmax.data.mixfile import read_mix
from olmax.testing.prepare_testdata import stdlib_texts, write_jsonl


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, dolma2) -> Path:
    """Two sources prepared with exact and substring dedup: code.jsonl holds `copy`, an exact copy of the
    first module, and `part`, 3,000 characters of another module and a tail of its own."""
    raw = tmp_path_factory.mktemp("inspect-raw")
    docs = stdlib_texts(6)
    longest = max(docs[1:4], key=lambda d: len(d[1]))[1]
    assert len(longest) > 3000
    part = longest[:3000] + "\nA closing paragraph of its own, long enough to stay after the cut."
    write_jsonl(raw / "code.jsonl", docs[:4] + [("copy", docs[0][1]), ("part", part)])
    write_jsonl(raw / "more.jsonl", docs[4:])
    out = tmp_path_factory.mktemp("inspect") / "out"
    argv = ["data", "prepare", "--no-progress", "--tokenizer", dolma2, "--out", str(out)]
    argv += ["--dedup", "exact,substring"]
    assert main([*argv, f"code={raw / 'code.jsonl'}", f"more={raw / 'more.jsonl'}"]) == 0
    return out


def inspect(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "olmax.cli", "data", "inspect", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def one_error_line(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 2, f"exit {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    assert "Traceback" not in p.stderr and p.stdout == "", p.stdout + p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("olmax: error: "), p.stderr[-3000:]
    return lines[0]


def copy_of(prepared: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(prepared, tmp_path / "out"))


def test_a_whole_mix_prints_its_table(prepared):
    p = inspect(str(prepared))
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0].split() == ["label", "tokens", "docs", "shard"]
    assert "total code: " in p.stdout and "total more: " in p.stdout


def test_a_deleted_shard_is_one_error_line_and_no_half_table(prepared, tmp_path):
    out = copy_of(prepared, tmp_path)
    shard = Path(read_mix(str(out / "mix.txt")).paths[-1])
    shard.unlink()
    line = one_error_line(inspect(str(out)))
    assert f"{shard}: listed in {out / 'mix.txt'} (label more) but missing" in line
    assert "restore it" in line


def test_a_folder_left_by_a_killed_prepare_says_unfinished_and_to_rerun(prepared, tmp_path):
    out = copy_of(prepared, tmp_path)
    # mix.txt and manifest.json are written last: a kill before them leaves the journal and the shards
    (out / "mix.txt").unlink()
    (out / "manifest.json").unlink()
    for args in ((), ("--verify",)):
        line = one_error_line(inspect(str(out), *args))
        assert "unfinished `olmax data prepare` output" in line
        assert "rerun the same `olmax data prepare` command" in line


def test_a_document_dedup_removed_names_the_stage_and_the_copy_kept(prepared):
    first = stdlib_texts(1)[0][0]
    line = one_error_line(inspect(str(prepared), "--doc", "copy"))
    assert "document id 'copy' was removed by dedup stage exact" in line
    lineno = next(
        i
        for i, r in enumerate(map(json.loads, (prepared / "removed.jsonl").read_text().splitlines()), 1)
        if r["id"] == "copy"
    )
    assert (
        f"({prepared / 'removed.jsonl'}:{lineno}): an exact copy of document {first!r}, which was kept"
        in line
    )
    assert line.endswith(f"inspect --doc {first} to see the copy that stayed")


def test_a_document_dedup_edited_is_shown_with_the_edit_named(prepared, dolma2):
    p = inspect(str(prepared), "--doc", "part", "--tokenizer", dolma2)
    assert p.returncode == 0, p.stderr
    assert "# edited by dedup stage substring: 1 span(s) removed" in p.stdout
    assert "A closing paragraph of its own" in p.stdout


def test_an_unknown_document_is_one_error_line(prepared):
    line = one_error_line(inspect(str(prepared), "--doc", "no-such-doc"))
    assert "document id 'no-such-doc' not found in the sidecars of" in line

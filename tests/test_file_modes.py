"""Outputs are readable by group and others as the umask says (0644 under 022, 0640 under 027), for every
writer that goes through a temporary name (mkstemp makes 0600 files, and a rename keeps the mode): the
atomic writer, reports, a prepared mix's mix.yaml / mix.txt / manifest, the HF export's config.json and
tokenizer_config.json, metrics and checkpoint metadata of a real `olmax train` run."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from olmax.atomic import file_mode, temp_path, write_text
from olmax.data.prepare.demo_mix import write_mix_spec
from olmax.jsonio import write_json
from tests.evals.tokenizer_testdata import make_tokenizer
from tests.train.train_testdata import train_cmd, train_env, write_config, write_mix


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077])
def test_the_atomic_writer_gives_the_umask_mode(tmp_path, mask):
    old = os.umask(mask)
    try:
        assert file_mode() == 0o666 & ~mask
        write_text(tmp_path / "a.json", "{}")
        write_mix_spec(tmp_path / "mix.yaml", {"code": (tmp_path / "in.jsonl", 1.0, 1.0)})
        write_json(tmp_path / "report.json", {"ok": True})
        with temp_path(tmp_path / "b.png") as tmp:
            tmp.write_bytes(b"png")
        open(tmp_path / "plain.txt", "w").close()  # what open() gives, the reference
    finally:
        os.umask(old)
    want = mode(tmp_path / "plain.txt")
    assert want == 0o666 & ~mask
    for name in ("a.json", "b.png", "mix.yaml", "report.json"):
        assert mode(tmp_path / name) == want, name


def test_every_writer_of_a_run_and_its_export_is_0644_under_umask_022(tmp_path):
    mix = write_mix(tmp_path / "data")
    config = write_config(tmp_path / "t.yaml", mix, steps=2, every=2)
    run, export = tmp_path / "run", tmp_path / "hf"
    script = (
        "import os, runpy, sys; os.umask(0o022); sys.argv = ['olmax'] + sys.argv[1:]; "
        "runpy.run_module('olmax.cli', run_name='__main__')"
    )
    tok = make_tokenizer(tmp_path / "tokenizer.json")
    for argv in (
        train_cmd(config, run)[3:],
        ["model", "convert", "--to", "hf", str(run), str(export), "--tokenizer", str(tok)],
    ):
        p = subprocess.run(
            [sys.executable, "-c", script, *argv],
            env=train_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert p.returncode == 0, p.stderr[-3000:]
    files = [
        run / "config.yaml",
        run / "history.jsonl",
        run / "metrics.jsonl",
        *(run / "checkpoints" / "2").rglob("*.json"),
        export / "config.json",
        export / "tokenizer_config.json",
    ]
    assert len(files) > 6 and all(f.is_file() for f in files), files
    assert {str(f.relative_to(tmp_path)): oct(mode(f)) for f in files} == {
        str(f.relative_to(tmp_path)): oct(0o644) for f in files
    }

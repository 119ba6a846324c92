"""The run directory is a record (docs/runs.md), through `olmax train` in a subprocess with a real resume:
config.yaml is written only by a run that trains, after the resume checks; a refused change (data stream,
model) is one error line and leaves the folder byte for byte; a rerun with nothing to train writes
nothing; an allowed change is listed on stderr and appended to history.jsonl; the saved config is the
resume default; paths are absolute, so `--run` commands work from any folder. Training ends with a short
table (JSON behind --json) and prints each in-loop eval."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.evals.tokenizer_testdata import make_tokenizer
from tests.train.train_testdata import train_cmd, train_env, write_config, write_mix

HELD = ["The quick brown fox jumps over the lazy dog.", "def add(a, b):\n    return a + b"]


def olmax(*args: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    import sys

    return subprocess.run(
        [sys.executable, "-m", "olmax.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def train(config: str, run: Path, *args: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        train_cmd(config, run, *args), cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under `folder` with its bytes and mtime: what "nothing changed" compares."""
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def one_error_line(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 2, f"exit {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    assert "Traceback" not in p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("olmax: error: "), p.stderr[-3000:]
    return lines[0]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A finished 2-step run (checkpoint at 2, in-loop eval at 2) started from `root` with a relative
    --mix and a relative eval set path."""
    root = tmp_path_factory.mktemp("record")
    write_mix(root / "data")
    write_mix(root / "other", seed=1)
    (root / "held.jsonl").write_text(
        "".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(HELD))
    )
    config = write_config(
        root / "tiny.yaml",
        "data/mix.txt",
        steps=2,
        every=2,
        train={"eval_every": 2, "eval_sets": ["held=held.jsonl"], "eval_limit": 0},
    )
    env = {**train_env(), "OLMAX_EVAL_TOKENIZER": str(make_tokenizer(root / "tokenizer.json"))}
    p = train("tiny.yaml", Path("run"), cwd=root, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    return root, config, env, p


@pytest.fixture
def run(base, tmp_path) -> Path:
    shutil.copytree(base[0] / "run", tmp_path / "run")
    return tmp_path / "run"


def test_a_fresh_run_records_absolute_paths_one_history_line_and_ends_with_a_table(base):
    root, _, _, p = base
    saved = yaml.safe_load((root / "run" / "config.yaml").read_text())
    assert saved["data"]["mix"] == str(root / "data" / "mix.txt")
    assert saved["train"]["eval_sets"] == [f"held={root / 'held.jsonl'}"]
    history = [json.loads(line) for line in (root / "run" / "history.jsonl").read_text().splitlines()]
    assert [(h["event"], h["from_step"], h["to_step"], h["changed"]) for h in history] == [
        ("start", 0, 2, {})
    ]
    out = p.stdout
    assert "olmax train: step 2 held-out CE: held " in out  # the in-loop eval, as it happens
    for row in ("steps", "tokens", "final loss", "held-out CE", "checkpoint", "time"):
        assert f"  {row} " in out, out
    assert str(root / "run" / "checkpoints" / "2") in out
    assert "{" not in p.stdout + p.stderr  # the JSON summary is behind --json


def test_a_changed_mix_is_refused_and_the_run_dir_is_unchanged(base, run):
    root, config, env, _ = base
    before = snapshot(run)
    p = train(config, run, "--mix", "other/mix.txt", cwd=root, env=env)
    line = one_error_line(p)
    assert "data.mix" in line and str(root / "other" / "mix.txt") in line
    assert snapshot(run) == before


def test_a_changed_model_is_refused_and_the_run_dir_is_unchanged(base, run):
    root, config, env, _ = base
    before = snapshot(run)
    line = one_error_line(train(config, run, "model.n_layers=2", cwd=root, env=env))
    assert "model.n_layers is 4 in this run, the command asks 2" in line
    assert snapshot(run) == before


def test_a_rerun_with_nothing_to_train_writes_nothing(base, run):
    root, _, env, _ = base
    before = snapshot(run)
    p = train("tiny", run, "--steps", "2", cwd=run.parent, env=env)  # another preset, another folder
    assert p.returncode == 0, p.stderr[-3000:]
    assert "nothing to train" in p.stdout
    assert snapshot(run) == before


def test_allowed_changes_are_listed_and_recorded_and_the_saved_config_is_the_default(base, run, tmp_path):
    root, _, env, _ = base
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # the tiny preset differs from the run's config (the demo mix, another model); the saved config wins
    p = train("tiny", run, "--steps", "3", "optim.lr=3e-3", "--json", cwd=elsewhere, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "resumed from step 2" in p.stdout
    assert "config.yaml is the default" in p.stderr and "data.mix" in p.stderr
    assert "resuming with changed settings" in p.stderr and "optim.lr 0.01 -> 0.003" in p.stderr
    assert json.loads(p.stderr.strip().splitlines()[-1])["last"]["step"] == 3  # --json: the summary
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["optim"]["lr"] == 0.003 and saved["data"]["mix"] == str(root / "data" / "mix.txt")
    history = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    assert [h["event"] for h in history] == ["start", "resume"]
    assert history[1]["from_step"] == 2 and history[1]["changed"] == {
        "optim.lr": {"from": 0.01, "to": 0.003},
        "train.steps": {"from": 2, "to": 3},
    }


def test_run_commands_work_from_another_folder(base, tmp_path):
    root, _, env, _ = base
    (tmp_path / "leaks.json").write_text('{"contaminated": []}')
    p = olmax(
        "audit",
        "exposure",
        "--leaks",
        "leaks.json",
        "--run",
        str(root / "run"),
        "--out",
        "x.json",
        cwd=tmp_path,
        env=env,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert os.path.isfile(tmp_path / "x.json")


def test_eval_commands_show_progress_and_name_the_checkpoint_step(base, tmp_path):
    """`eval heldout`, `eval gains` and `eval memorization` on the run: a tqdm bar on stderr (a pipe
    here, as in a batch job) and a line naming the checkpoint step they scored."""
    root, _, env, _ = base
    run, tok, held = root / "run", env["OLMAX_EVAL_TOKENIZER"], f"held={root / 'held.jsonl'}"
    leaks = tmp_path / "leaks.json"
    leaks.write_text(json.dumps({"contaminated": [{"eval": "held", "id": 0}]}))
    common = dict(cwd=tmp_path, env=env)
    p = olmax(
        "eval",
        "heldout",
        "--checkpoint",
        str(run),
        "--eval",
        held,
        "--tokenizer",
        tok,
        "--out",
        "h.json",
        **common,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert f"scored {run}: checkpoint step 2" in p.stdout and "row" in p.stderr and "%|" in p.stderr
    assert json.loads((tmp_path / "h.json").read_text())["checkpoint_step"] == 2
    p = olmax(
        "eval",
        "heldout",
        "--checkpoint",
        str(run),
        "--eval",
        held,
        "--tokenizer",
        tok,
        "--out",
        "h.json",
        "--no-progress",
        **common,
    )
    assert p.returncode == 0 and "%|" not in p.stderr
    p = olmax(
        "eval",
        "gains",
        "--run",
        str(run),
        "--leaks",
        str(leaks),
        "--eval",
        held,
        "--tokenizer",
        tok,
        "--resamples",
        "50",
        "--out",
        "g.json",
        **common,
    )
    # a verdict: 0 clean, 1 flagged, 3 inconclusive (one checkpoint cannot show a gain); this test is about progress
    assert p.returncode in (0, 1, 3), p.stderr[-3000:]
    assert f"scored {run} at checkpoint step(s) 2" in p.stdout and "eval gains" in p.stderr
    p = olmax(
        "eval",
        "memorization",
        "--run",
        str(run),
        "--per-stratum",
        "4",
        "--probe-len",
        "16",
        "--out",
        "m.json",
        **common,
    )
    assert p.returncode in (0, 1, 3), p.stderr[-3000:]
    assert f"scored {run / 'checkpoints'} step 2" in p.stdout and "memorization checks" in p.stderr

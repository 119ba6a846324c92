"""The run record holds every setting that ran, through `olmax train` in a subprocess: eval defaults that
come from the environment are written into config.yaml (and printed by --dry-run, the same YAML), so
`olmax eval watch` on config.yaml alone, with the environment cleared, scores the same sets on the same
documents; a --steps that is not the schedule's horizon is said on stderr and in history.jsonl, with the
last step's lr and the override that aligns them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.evals.tokenizer_testdata import make_tokenizer
from tests.train.train_testdata import metrics, train_cmd, train_env, write_config, write_mix

EVAL_ENV = ("OLMAX_EVAL_SETS", "OLMAX_EVAL_LIMIT", "OLMAX_EVAL_TOKENIZER")
HELD = ["The quick brown fox jumps over the lazy dog.", "def add(a, b):\n    return a + b", "x = 1"]


def clean_env() -> dict:
    env = train_env()
    for k in EVAL_ENV:
        env.pop(k, None)
    return env


def olmax(*args: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "olmax.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def env_run(tmp_path_factory):
    """A 2-step run (t_max 20, in-loop eval at step 2) whose eval sets, limit and tokenizer come only from
    the environment, with a relative eval-set path."""
    root = tmp_path_factory.mktemp("settings")
    write_mix(root / "data")
    (root / "held.jsonl").write_text(
        "".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(HELD))
    )
    tok = make_tokenizer(root / "tokenizer.json")
    config = write_config(root / "tiny.yaml", "data/mix.txt", steps=2, every=2, train={"eval_every": 2})
    env = {**clean_env(), "OLMAX_EVAL_SETS": "held=held.jsonl", "OLMAX_EVAL_LIMIT": "2"}
    env["OLMAX_EVAL_TOKENIZER"] = str(tok)
    dry = olmax("train", "--config", config, "--dry-run", cwd=root, env=env)
    assert dry.returncode == 0, dry.stderr[-3000:]
    p = subprocess.run(train_cmd(config, Path("run")), cwd=root, env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-3000:]
    return root, tok, dry, p


def test_the_record_holds_the_eval_defaults_the_environment_gave(env_run):
    root, tok, _, _ = env_run
    saved = yaml.safe_load((root / "run" / "config.yaml").read_text())["train"]
    assert saved["eval_sets"] == [f"held={root / 'held.jsonl'}"]
    assert saved["eval_limit"] == 2
    assert saved["eval_tokenizer"] == str(tok)
    history = json.loads((root / "run" / "history.jsonl").read_text().splitlines()[0])
    assert history["environment"]["OLMAX_EVAL_LIMIT"] == "2"
    assert history["environment"]["XLA_FLAGS"] == "--xla_force_host_platform_device_count=1"
    step2 = metrics(root / "run")[-1]
    assert step2["step"] == 2 and "eval/held/ce" in step2


def test_dry_run_prints_the_config_the_run_records(env_run):
    root, _, dry, _ = env_run
    printed = yaml.safe_load(dry.stdout.split("\n---\n")[0])
    assert printed == yaml.safe_load((root / "run" / "config.yaml").read_text())


def test_config_yaml_alone_reproduces_the_evals_with_the_environment_cleared(env_run, tmp_path):
    root, _, _, _ = env_run
    p = olmax(
        "eval",
        "watch",
        "--run",
        str(root / "run"),
        "--once",
        "--out",
        str(tmp_path / "ev"),
        cwd=tmp_path,
        env=clean_env(),
    )
    assert p.returncode == 0, p.stderr[-3000:]
    recs = [json.loads(line) for line in (tmp_path / "ev" / "evals.jsonl").read_text().splitlines()]
    held = [r for r in recs if r["kind"] == "heldout"]
    assert [(r["step"], r["eval"], r["documents"]) for r in held] == [(2, "held", 2)]
    assert held[0]["ce"] == metrics(root / "run")[-1]["eval/held/ce"]


def test_a_steps_short_of_the_horizon_is_said_before_step_1_and_recorded(env_run):
    root, _, _, p = env_run
    lines = [ln for ln in p.stderr.splitlines() if "horizon" in ln]
    assert len(lines) == 1, p.stderr[-3000:]
    assert "train.steps 2 stops before the lr schedule's horizon optim.t_max 20" in lines[0]
    assert "optim.t_max=2 aligns" in lines[0]
    schedule = json.loads((root / "run" / "history.jsonl").read_text().splitlines()[0])["schedule"]
    last = metrics(root / "run")[-1]
    assert schedule["aligns"] == "optim.t_max=2" and schedule["t_max"] == 20 and schedule["steps"] == 2
    assert schedule["final_lr"] == pytest.approx(last["lr"], rel=1e-6)  # the lr step 2 ran at
    assert f"lr {schedule['final_lr']:.3g}" in lines[0]


def test_dry_run_says_a_steps_past_the_horizon_and_nothing_when_they_agree(env_run):
    root = env_run[0]
    past = olmax("train", "--config", "tiny.yaml", "--steps", "30", "--dry-run", cwd=root, env=clean_env())
    assert past.returncode == 0, past.stderr[-3000:]
    assert "train.steps 30 runs past the lr schedule's horizon optim.t_max 20: steps 21-30" in past.stdout
    assert "optim.t_max=30 aligns" in past.stdout
    same = olmax(
        "train",
        "--config",
        "tiny.yaml",
        "--steps",
        "30",
        "optim.t_max=30",
        "--dry-run",
        cwd=root,
        env=clean_env(),
    )
    assert same.returncode == 0 and "horizon optim.t_max" not in same.stdout


def test_dry_run_on_the_run_folder_shows_its_recorded_settings_not_the_environment(env_run):
    root = env_run[0]
    env = {**clean_env(), "OLMAX_EVAL_LIMIT": "9"}  # a resumed run keeps its recorded limit
    p = olmax(
        "train", "--config", "tiny.yaml", "--run-dir", "run", "--steps", "4", "--dry-run", cwd=root, env=env
    )
    assert p.returncode == 0, p.stderr[-3000:]
    printed = yaml.safe_load(p.stdout.split("\n---\n")[0])["train"]
    assert printed["eval_sets"] == [f"held={root / 'held.jsonl'}"] and printed["eval_limit"] == 2
    assert printed["steps"] == 4


def test_a_bad_eval_limit_in_the_environment_is_one_error_line(env_run):
    env = {**clean_env(), "OLMAX_EVAL_LIMIT": "all"}
    p = olmax("train", "--config", "tiny.yaml", "--dry-run", cwd=env_run[0], env=env)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert lines[0].startswith("olmax: error: OLMAX_EVAL_LIMIT='all': not a whole number")


def test_a_resume_that_moves_an_unset_horizon_says_so_with_the_lr_and_the_fix(tmp_path):
    write_mix(tmp_path / "data")
    config = write_config(tmp_path / "c.yaml", "data/mix.txt", steps=2, every=2, optim={"t_max": None})
    env = clean_env()
    first = subprocess.run(
        train_cmd(config, Path("run")), cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert first.returncode == 0 and "horizon" not in first.stderr, first.stderr[-3000:]  # t_max = steps
    p = subprocess.run(
        train_cmd(config, Path("run"), "--steps", "4"), cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr[-3000:]
    line = next(ln for ln in p.stderr.splitlines() if "horizon" in ln)
    assert "optim.t_max is unset, so the lr schedule's horizon is train.steps and moves from 2 to 4" in line
    assert line.endswith("optim.t_max=2 keeps the schedule the run had")
    moved = json.loads((tmp_path / "run" / "history.jsonl").read_text().splitlines()[1])["schedule_moved"]
    step3 = next(r for r in metrics(tmp_path / "run") if r["step"] == 3)
    assert (
        moved["lr_after"] == pytest.approx(step3["lr"], rel=1e-6) and moved["lr_before"] != moved["lr_after"]
    )

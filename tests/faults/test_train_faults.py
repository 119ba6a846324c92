"""Faults around `olmax train`, run as the real command in a subprocess: damaged checkpoints, a batch the
devices cannot split, token ids the model cannot embed. Each gets a correct recovery that says what it
did, or one clean error line with exit 2, no traceback, and nothing already written lost."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.train.train_testdata import SEQ, losses, train_cmd, train_env, write_config, write_mix


def olmax_train(config: str, run_dir: Path, *args: str, devices: int = 1) -> subprocess.CompletedProcess:
    return subprocess.run(
        train_cmd(config, run_dir, *args), env=train_env(devices), capture_output=True, text=True, timeout=300
    )


def one_error_line(p: subprocess.CompletedProcess) -> str:
    """The single `olmax: error:` line of a failed run (exit 2, no traceback)."""
    assert "Traceback" not in p.stdout + p.stderr, p.stderr[-3000:]
    assert p.returncode == 2, f"exit {p.returncode}:\n{p.stderr[-3000:]}"
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("olmax: error: "), p.stderr[-3000:]
    return lines[0]


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> tuple[Path, str]:
    """A finished 4-step run with checkpoints at steps 2 and 4."""
    root = tmp_path_factory.mktemp("faults")
    config = write_config(root / "tiny.yaml", write_mix(root / "data"), steps=4, every=2)
    p = olmax_train(config, root / "run")
    assert p.returncode == 0, p.stderr[-3000:]
    return root / "run", config


def copy_run(base: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(base, run)
    return run


def test_newest_checkpoint_without_commit_marker_resumes_from_the_previous_and_says_so(base, tmp_path):
    run0, config = base
    run = copy_run(run0, tmp_path)
    (run / "checkpoints" / "4" / "commit_success.txt").unlink()
    p = olmax_train(config, run, "--steps", "4")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Traceback" not in p.stderr
    assert "checkpoints/4 has no commit_success.txt" in p.stderr and "resuming from step 2" in p.stderr
    assert "resumed from step 2" in p.stdout
    kept = run / "checkpoints-incomplete" / "4"  # moved aside, not deleted
    assert files(kept) == {
        k[2:]: v
        for k, v in files(run0 / "checkpoints").items()
        if k.startswith("4/") and k != "4/commit_success.txt"
    }
    assert (run / "checkpoints" / "4" / "commit_success.txt").exists()  # the rerun's own step 4
    # steps 3 and 4 rerun from the complete checkpoint give the same losses as the first run
    assert losses(run) == losses(run0)


def truncate_largest(step_dir: Path) -> None:
    data = sorted((step_dir / "state").rglob("d/*"), key=lambda f: f.stat().st_size)[-1]
    data.write_bytes(data.read_bytes()[:100])


def test_truncated_newest_checkpoint_resumes_from_the_previous_and_keeps_it(base, tmp_path):
    run0, config = base
    run = copy_run(run0, tmp_path)
    assert (run / "checkpoints" / "4" / "olmax-files.json").exists()  # sealed by the first run
    truncate_largest(run / "checkpoints" / "4")
    truncated = files(run / "checkpoints" / "4")
    p = olmax_train(config, run, "--steps", "4")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Traceback" not in p.stderr
    assert (
        "checkpoints/4 differs from its olmax-files.json" in p.stderr and "resuming from step 2" in p.stderr
    )
    assert "sealed with" in p.stderr  # names the file and both sizes
    assert "resumed from step 2" in p.stdout
    assert files(run / "checkpoints-corrupt" / "4") == truncated  # moved aside, not deleted
    assert losses(run) == losses(run0)  # steps 3 and 4 rerun from step 2 as the first run ran them


def test_truncated_unsealed_checkpoint_is_found_by_the_restore_and_resumes_from_the_previous(base, tmp_path):
    """A step killed between its commit and its seal: Orbax's own read finds the damage (one process)."""
    run0, config = base
    run = copy_run(run0, tmp_path)
    (run / "checkpoints" / "4" / "olmax-files.json").unlink()
    truncate_largest(run / "checkpoints" / "4")
    p = olmax_train(config, run, "--steps", "4")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "checkpoints/4 is corrupt or truncated" in p.stderr and "resuming from step 2" in p.stderr
    # TensorStore's reads still in flight when Orbax gave up print nothing (no "Event loop is closed")
    for noise in ("Traceback", "Event loop", "never retrieved", "TensorStore details"):
        assert noise not in p.stderr, p.stderr[-3000:]
    assert "resumed from step 2" in p.stdout
    assert (run / "checkpoints-corrupt" / "4" / "state").is_dir()
    assert losses(run) == losses(run0)


def test_every_checkpoint_truncated_is_one_clear_error_not_a_restart(base, tmp_path):
    run0, config = base
    run = copy_run(run0, tmp_path)
    for step in ("2", "4"):
        truncate_largest(run / "checkpoints" / step)
    before = {k.split("/", 1)[-1]: v for k, v in files(run).items() if k.startswith("checkpoints/")}
    p = subprocess.run(
        train_cmd(config, run, "--steps", "6"), env=train_env(1), capture_output=True, text=True, timeout=300
    )
    assert "Traceback" not in p.stderr and p.returncode == 2, p.stderr[-3000:]
    assert p.stderr.count("olmax: warning:") == 2 and "no older checkpoint is left" in p.stderr
    line = p.stderr.strip().splitlines()[-1]
    assert (
        line.startswith("olmax: error: ")
        and "no readable checkpoint" in line
        and "refusing to start over" in line
    )
    after = {k.split("/", 1)[-1]: v for k, v in files(run).items() if k.startswith("checkpoints-corrupt/")}
    assert after == before  # every file kept, moved aside
    assert losses(run) == losses(run0)  # no step ran


def test_checkpoint_of_another_model_shape_names_the_parameter(base, tmp_path):
    run0, config = base
    run = copy_run(run0, tmp_path)
    before = files(run)
    # the run's record refuses a model change before the checkpoint is read (docs/runs.md)
    line = one_error_line(olmax_train(config, run, "--steps", "6", "model.d_model=32"))
    assert "config.yaml: model.d_model is 64 in this run, the command asks 32" in line
    assert files(run) == before
    # a run folder without its config.yaml (copied without it): the restore names the parameter
    (run / "config.yaml").unlink()
    before = files(run)
    line = one_error_line(olmax_train(config, run, "--steps", "6", "model.d_model=32"))
    assert "checkpoints/4" in line and "config.yaml" in line
    assert re.search(r"\['params'\]\S*: checkpoint \([\d, ]+\), config \([\d, ]+\)", line), line
    assert files(run) == before


def test_global_batch_not_divisible_by_the_devices(tmp_path):
    config = write_config(tmp_path / "tiny.yaml", write_mix(tmp_path / "data"), steps=1)
    line = one_error_line(olmax_train(config, tmp_path / "run", devices=3))
    assert "global_batch_size 8" in line and "3 devices" in line
    assert not (tmp_path / "run").exists()


def test_token_ids_above_the_vocabulary_fail_before_a_step(tmp_path):
    mix = write_mix(tmp_path / "data")
    shard = tmp_path / "data" / "part-1.npy"
    tokens = np.fromfile(shard, dtype=np.uint32)
    tokens[7::SEQ] = 5000  # one per instance, so the first batch holds one; the test vocabulary is 1000
    tokens.tofile(shard)
    config = write_config(tmp_path / "tiny.yaml", mix, steps=20)  # the schedule's horizon: no notice
    line = one_error_line(olmax_train(config, tmp_path / "run"))
    assert "part-1.npy" in line and "5000" in line
    metrics = tmp_path / "run" / "metrics.jsonl"
    assert not metrics.exists() or metrics.read_text() == ""  # no step ran


def test_a_second_run_on_one_run_dir_refuses(base, tmp_path):
    run0, config = base
    run = copy_run(run0, tmp_path)
    before = files(run)
    code = (
        "import sys, time\nfrom olmax.atomic import exclusive\n"
        "with exclusive(sys.argv[1], 'olmax train'):\n    print('held', flush=True)\n    time.sleep(300)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code, str(run)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        line = one_error_line(olmax_train(config, run, "--steps", "6"))
        assert "another olmax process is writing it" in line and str(run) in line
        assert files(run) == before
    finally:
        holder.kill()
        holder.wait()


def test_the_evals_pick_the_trainers_newest_complete_checkpoint_and_move_nothing(base, tmp_path):
    from olmax.evals.run_dir import latest_step

    run0, _ = base
    assert latest_step(run0) == 4
    run = copy_run(run0, tmp_path)
    truncate_largest(run / "checkpoints" / "4")
    assert latest_step(run) == 2
    shutil.rmtree(run / "checkpoints" / "2")
    assert latest_step(run) is None
    run = copy_run(run0, tmp_path / "b")
    (run / "checkpoints" / "4" / "commit_success.txt").unlink()
    before = files(run)
    assert latest_step(run) == 2
    assert files(run) == before


@pytest.mark.parametrize("async_save", ["false", "true"])
def test_disk_full_while_checkpointing_is_a_clear_error_and_the_rerun_completes(base, tmp_path, async_save):
    """A checkpoint write that fails (here: a file-size limit, as a full disk) stops the run with one olmax
    error naming the step and the newest complete checkpoint; the kept steps are intact, and the same
    command, with space again, resumes there and trains exactly as the uninterrupted run did."""
    run0, config = base
    run = tmp_path / "run"
    shutil.copytree(run0, run)
    shutil.rmtree(run / "checkpoints" / "4")  # a run that got to step 2
    kept = files(run / "checkpoints" / "2")
    limit = 64 * 1024  # below the tiny model's largest array file
    code = (
        "import resource, signal, sys\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
        "from olmax.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    )
    cmd = train_cmd(config, run, "--steps", "4", f"checkpoint.async_save={async_save}")
    p = subprocess.run(
        [sys.executable, "-c", code, *cmd[3:]], env=train_env(1), capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 2, p.stderr[-3000:]
    last = p.stderr.strip().splitlines()[-1]
    assert (
        last.startswith("olmax: error: ")
        and "checkpoints/4: cannot write the checkpoint, the disk is full" in last
    )
    assert "newest complete checkpoint is step 2" in last
    # nothing else: Orbax's writer and commit threads log the same error with a traceback, which olmax drops
    assert "Traceback" not in p.stderr and "Event loop is closed" not in p.stderr, p.stderr[-3000:]
    assert [line for line in p.stderr.strip().splitlines() if not line.startswith("olmax train: ")] == [last]
    assert files(run / "checkpoints" / "2") == kept
    assert not (run / "checkpoints" / "4").exists()
    p = olmax_train(config, run, "--steps", "4")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "resumed from step 2" in p.stdout
    assert losses(run) == losses(run0)

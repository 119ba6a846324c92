"""`olmax train` in subprocesses: SIGKILL at a random moment (or mid-checkpoint-write) then the same
command again resumes from the newest complete checkpoint and gives bitwise the uninterrupted losses;
8 -> 2 -> 8 devices keeps the global batch."""

import os
import random
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.train.train_testdata import losses, run_train, train_cmd, train_env, write_config, write_mix

STEPS = 10


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("kill")
    mix = write_mix(root / "data")
    # checkpoint every step, so a kill lands mid-write often
    return root, write_config(root / "test.yaml", mix, steps=STEPS, every=1)


@pytest.fixture(scope="module")
def reference(setup):
    root, config = setup
    run_train(config, root / "ref")
    return losses(root / "ref")


def _checkpoint_tmp(run: Path) -> bool:
    ckpts = run / "checkpoints"
    return ckpts.is_dir() and any("tmp" in p.name for p in ckpts.iterdir())


def _complete_steps(run: Path) -> list[int]:
    """The steps of the finished checkpoints: Orbax renames a step's temporary directory to `<step>`
    only once every item in it is written."""
    ckpts = run / "checkpoints"
    return sorted(int(p.name) for p in ckpts.iterdir() if p.name.isdigit()) if ckpts.is_dir() else []


def _metric_lines(run: Path) -> int:
    metrics = run / "metrics.jsonl"
    return len(metrics.read_text().splitlines()) if metrics.exists() else 0


RESUMED = re.compile(r"^olmax train: resumed from step (\d+) \(saved on 1 devices\)", re.M)


@dataclass
class Killed:
    torn: bool  # a half-written checkpoint was on disk at the kill
    saved: list[int]  # the complete checkpoints on disk once the killed process was gone
    lines: int  # metrics.jsonl lines the killed run had written
    output: str  # stdout + stderr of the resuming run


def _kill_then_finish(config: str, run: Path, *, wait_lines: int, extra_s: float, mid_write: bool) -> Killed:
    """Start a run, SIGKILL it once metrics.jsonl has `wait_lines` lines and a checkpoint is complete
    (+ extra_s, or at the next temporary checkpoint directory when `mid_write`), then rerun the same
    command."""
    proc = subprocess.Popen(
        train_cmd(config, run), env=train_env(1), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if _metric_lines(run) >= wait_lines and _complete_steps(run):
                break
            time.sleep(0.01)
        if mid_write:
            while time.monotonic() < deadline and proc.poll() is None and not _checkpoint_tmp(run):
                time.sleep(0.0005)
        else:
            time.sleep(extra_s)
        torn = _checkpoint_tmp(run)
        assert proc.poll() is None, f"the run ended before the kill:\n{proc.stderr.read()[-3000:]}"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    saved, lines = _complete_steps(run), _metric_lines(run)
    return Killed(torn, saved, lines, run_train(config, run))


def _assert_resumed_from_newest(killed: Killed) -> None:
    """The rerun said it resumed, from the newest checkpoint that was complete at the kill."""
    assert killed.saved, "no complete checkpoint at the kill: nothing to resume from"
    assert killed.lines >= killed.saved[-1]  # step N's metrics line is written before its checkpoint
    assert [int(n) for n in RESUMED.findall(killed.output)] == [killed.saved[-1]], (
        killed.saved,
        killed.output[-3000:],
    )


def test_sigkill_at_a_random_moment_then_resume_is_bitwise_exact(setup, reference):
    root, config = setup
    rng = random.Random(os.getpid() ^ time.time_ns())  # a different moment each run
    wait_lines, extra = rng.randint(2, STEPS - 3), rng.uniform(0.0, 0.3)
    run = root / "killed"
    killed = _kill_then_finish(config, run, wait_lines=wait_lines, extra_s=extra, mid_write=False)
    _assert_resumed_from_newest(killed)
    got = losses(run)
    assert got.keys() == reference.keys()
    deltas = {s: got[s] - reference[s] for s in reference}
    assert all(d == 0.0 for d in deltas.values()), (wait_lines, extra, killed.saved, deltas)


@pytest.mark.slow
@pytest.mark.parametrize("wait_lines", [2, 5])
def test_sigkill_mid_checkpoint_write_then_resume_is_bitwise_exact(setup, reference, wait_lines):
    root, config = setup
    run = root / f"torn{wait_lines}"
    killed = _kill_then_finish(config, run, wait_lines=wait_lines, extra_s=0.0, mid_write=True)
    assert killed.torn, "the kill did not land while a checkpoint was being written; rerun"
    _assert_resumed_from_newest(killed)
    assert not _checkpoint_tmp(run)  # the resumed run cleaned up the torn write
    assert losses(run) == reference


def test_elastic_2_to_1_device_keeps_the_global_batch(setup, tmp_path):
    """The quick elastic check: steps 1-2 on 2 devices, 3-4 on 1 (2 microbatches of 4 rows)."""
    root, _ = setup
    config = write_config(
        tmp_path / "elastic.yaml",
        str(root / "data" / "mix.txt"),
        steps=4,
        every=2,
        mesh={"per_device_batch": 4},
        work_dir=str(root / "work"),
    )
    run_train(config, tmp_path / "ref2", devices=2)
    run = tmp_path / "elastic"
    run_train(config, run, "--steps", "2", devices=2)
    out = run_train(config, run, devices=1)
    assert "resumed from step 2 (saved on 2 devices)" in out and "2 microbatch(es) of 4 row(s)" in out
    want, got = losses(tmp_path / "ref2"), losses(run)
    assert got[1] == want[1] and got[2] == want[2]
    for s in (3, 4):
        assert abs(got[s] - want[s]) <= 1e-5 * abs(want[s]), (s, got[s], want[s])


@pytest.mark.slow
def test_elastic_8_to_2_to_8_devices_keeps_the_global_batch(setup, tmp_path):
    """Steps 1-4 on 8 devices, 5-7 on 2 (4 microbatches of 1 row per device), 8-10 on 8 again."""
    root, _ = setup
    config = write_config(
        tmp_path / "elastic.yaml",
        str(root / "data" / "mix.txt"),
        steps=STEPS,
        every=2,
        mesh={"per_device_batch": 1},
        work_dir=str(root / "work"),
    )
    run_train(config, tmp_path / "ref8", devices=8)
    run = tmp_path / "elastic"
    run_train(config, run, "--steps", "4", devices=8)
    out = run_train(config, run, "--steps", "7", devices=2)
    assert "resumed from step 4 (saved on 8 devices)" in out and "4 microbatch(es) of 1 row(s)" in out
    run_train(config, run, devices=8)
    want, got = losses(tmp_path / "ref8"), losses(run)
    assert got.keys() == want.keys()
    for s in range(1, 5):
        assert got[s] == want[s], s  # same layout, same numbers
    for s in range(5, STEPS + 1):  # other reduction order on 2 devices: equal to float rounding
        assert abs(got[s] - want[s]) <= 1e-5 * abs(want[s]), (s, got[s], want[s])

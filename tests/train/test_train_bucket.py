"""`olmax train --run-dir URL` and `olmax eval watch --run URL` against moto's S3 server and the GCS emulator
on loopback (tests/object_stores.py): a run SIGKILLed on one machine (its own local mirror) once the bucket
holds a checkpoint, and finished on another from the bucket's newest complete step, gives bitwise the losses
of an uninterrupted local run; the bucket keeps the retention's steps, each sealed; a watcher following the
bucket run through the kill evaluates each step once, in order; one started on a third machine after the
end writes into the bucket the evals.jsonl a watcher of the local run writes, byte for byte, and a restart
elsewhere adds nothing; a missing bucket is one error line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest

from tests.train.train_testdata import (
    in_loop_evals,
    losses,
    run_train,
    train_cmd,
    train_env,
    write_config,
    write_mix,
)

pytestmark = pytest.mark.slow  # three short trainings and three watchers per store: about a minute each

STEPS, EVERY, KEEP = 16, 2, 2


def cli(args: list[str], env: dict, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "olmax.cli", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    """The uninterrupted local run and its watcher's records: what the bucket run must equal."""
    root = tmp_path_factory.mktemp("bucket-train")
    config = write_config(
        root / "tiny.yaml",
        write_mix(root / "data"),
        steps=STEPS,
        checkpoint={"every": EVERY, "keep": KEEP},
        train=in_loop_evals(root),
    )
    env = train_env(1)
    run_train(config, root / "ref")
    watched = cli(["eval", "watch", "--run", str(root / "ref"), "--once"], env)
    assert watched.returncode == 0, watched.stderr[-3000:]
    return root, config, env, losses(root / "ref"), (root / "ref" / "evals" / "evals.jsonl").read_bytes()


def test_a_bucket_run_killed_and_resumed_on_another_machine_is_bitwise_the_local_run(
    store, local_run, tmp_path
):
    from olmax.train.run_mirror import RunMirror

    root, config, env, want_losses, want_evals = local_run
    url = store.join("runs", "tiny")
    env = {**env, **store.server.env}
    fs, root_path = store.fs, url.split("://", 1)[1]
    probe = RunMirror(url, "probe", tmp_path / "probe")

    def start(cmd: list[str], machine: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "olmax.cli", *cmd],
            env={**env, "OLMAX_RUN_STAGING": str(tmp_path / machine)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    # machine a trains until the bucket holds a complete step, then dies (SIGKILL, mid-step or mid-upload)
    first = start(train_cmd(config, url)[3:], "machine-a")
    # a watcher following the bucket run live (results to a local folder) through the kill and the resume
    follower = start(
        ["eval", "watch", "--run", url, "--out", str(tmp_path / "followed"), "--poll-seconds", "0.2"]
        + ["--max-idle-seconds", "300"],
        "machine-d",
    )
    try:
        deadline = time.monotonic() + 300
        while not probe.complete_remote_steps() and first.poll() is None:
            assert time.monotonic() < deadline, "no complete step in the bucket"
            time.sleep(0.05)
        killed_running = first.poll() is None
        first.kill()
        first.wait(60)
        second = subprocess.run(
            train_cmd(config, url),
            env={**env, "OLMAX_RUN_STAGING": str(tmp_path / "machine-b")},
            capture_output=True,
            text=True,
            timeout=300,
        )
        followed_err = follower.communicate(timeout=300)[1]
    finally:
        for p in (first, follower):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert killed_running, "machine a finished before the kill (slow the run down)"
    assert second.returncode == 0, second.stderr[-3000:]
    resumed = re.search(rf"resuming {re.escape(url)} from its step (\d+)", second.stderr)
    assert resumed and int(resumed.group(1)) < STEPS, second.stderr[-3000:]
    assert url in second.stdout  # the summary names the bucket run, not the mirror
    store.fs.invalidate_cache()
    got = {
        r["step"]: r["loss"]
        for r in map(json.loads, fs.cat_file(f"{root_path}/metrics.jsonl").decode().splitlines())
    }
    assert got == want_losses  # bitwise: the same floats at every step, before the kill and after
    steps = sorted(int(p.rsplit("/", 1)[1]) for p in fs.ls(f"{root_path}/checkpoints", detail=False))
    assert steps == [STEPS - EVERY, STEPS]  # the retention's newest KEEP, each sealed
    for s in steps:
        assert fs.exists(f"{root_path}/checkpoints/{s}/olmax-files.json")
    for name in ("config.yaml", "history.jsonl"):
        assert fs.exists(f"{root_path}/{name}"), name

    assert follower.returncode == 0 and "Traceback" not in followed_err, followed_err[-3000:]
    followed = (tmp_path / "followed" / "evals.jsonl").read_text().splitlines()
    steps_followed = [json.loads(line)["step"] for line in followed]
    assert steps_followed == sorted(set(steps_followed)) and steps_followed[-1] == STEPS, steps_followed
    # the steps the local watcher also saw (the retention's last two) have its records exactly
    last = [x for x in followed if json.loads(x)["step"] > STEPS - KEEP * EVERY]
    assert last == want_evals.decode().splitlines()

    # a watcher on a third machine, after the end: the bucket's evals/ gets the local watcher's bytes
    watch = cli(
        ["eval", "watch", "--run", url, "--once"], {**env, "OLMAX_RUN_STAGING": str(tmp_path / "machine-c")}
    )
    assert watch.returncode == 0 and "Traceback" not in watch.stderr, watch.stderr[-3000:]
    store.fs.invalidate_cache()
    assert fs.cat_file(f"{root_path}/evals/evals.jsonl") == want_evals
    assert fs.exists(f"{root_path}/evals/summary.md")
    # restarted from yet another machine: it reads the bucket's records and has nothing to add
    again = cli(
        ["eval", "watch", "--run", url, "--once"], {**env, "OLMAX_RUN_STAGING": str(tmp_path / "machine-e")}
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert "2 step(s) already in" in again.stderr, again.stderr[-3000:]
    store.fs.invalidate_cache()
    assert fs.cat_file(f"{root_path}/evals/evals.jsonl") == want_evals


def test_a_missing_bucket_is_one_line_for_train_and_watch(store, local_run, tmp_path):
    _, config, env, _, _ = local_run
    url = store.server.unused_bucket() + "/run"
    env = {**env, **store.server.env, "OLMAX_RUN_STAGING": str(tmp_path)}
    for proc in (
        subprocess.run(train_cmd(config, url), env=env, capture_output=True, text=True, timeout=300),
        cli(["eval", "watch", "--run", url, "--once"], env),
    ):
        assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        lines = [x for x in proc.stderr.splitlines() if x.startswith("olmax: error:")]
        assert len(lines) == 1 and url.split("/run")[0] in lines[0], proc.stderr[-3000:]

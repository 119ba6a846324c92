"""A pod's run as pods run, on the CPU: JAX processes on 127.0.0.1 (2 CPU devices each, gloo) with their run
folder in a bucket on moto's S3 server (and the GCS emulator), each process with a staging folder of its own
as hosts that share no disk. Every host writes its shards into the bucket, process 0 seals each step; a
rerun on fresh hosts resumes from the bucket's newest complete step; SIGTERM to every process ends the run
in a saved step (exit 75); a process SIGKILLed mid-run or mid-save ends the others (exit 69) with a line
naming it, and nothing complete is damaged. Each resumed run's losses equal a one-process 4-device run's
(fp32, rel 1e-5); `eval watch` scores the bucket run's steps without downloading optimizer state."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from olmax.train.hosts import LOST_PROCESS, PREEMPTED
from olmax.train.run_mirror import RunMirror
from tests.object_stores import free_port
from tests.train.train_testdata import (
    in_loop_evals,
    losses,
    run_train,
    train_cmd,
    train_env,
    write_config,
    write_mix,
)

pytestmark = pytest.mark.slow  # several runs of two JAX processes each: about a minute a test

REF_STEPS = 48  # the uninterrupted one-process run every resumed run is held to
LONG = 5000  # steps a run is asked for when a signal is to end it early


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The data, the configs and the uninterrupted run on one process with 4 devices."""
    root = tmp_path_factory.mktemp("pod")
    mix = write_mix(root / "data")
    evals = in_loop_evals(root)
    configs = {
        every: write_config(
            root / f"every{every}.yaml", mix, steps=LONG, checkpoint={"every": every, "keep": 2}, train=evals
        )
        for every in (2, 4, 1000)
    }
    run_train(configs[1000], root / "ref", "--steps", str(REF_STEPS), devices=4)
    return configs, losses(root / "ref")


def _start(config: str, url: str, staging: Path, processes: int, *args: str, env: dict | None = None):
    """`olmax train --run-dir url` as `processes` JAX processes (2 devices each; one process: 4), each with
    `staging` as its $OLMAX_RUN_STAGING (a host of its own: olmax adds process-<i> under it)."""
    env = {**(env or {}), "OLMAX_RUN_STAGING": str(staging)}
    if processes == 1:
        return [
            subprocess.Popen(
                train_cmd(config, url, *args),
                env={**train_env(4), **env},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        ]
    port = free_port()
    return [
        subprocess.Popen(
            train_cmd(
                config,
                url,
                *args,
                "--coordinator",
                f"127.0.0.1:{port}",
                "--num-processes",
                str(processes),
                "--process-id",
                str(i),
            ),
            env={**train_env(2), **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(processes)
    ]


def _wait(procs, timeout: float) -> list[tuple[int, str]]:
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=timeout)
        out.append((p.returncode, stdout + stderr))
    return out


def _ok(procs, timeout: float = 300) -> str:
    results = _wait(procs, timeout)
    for i, (rc, log) in enumerate(results):
        assert rc == 0, f"process {i} exited {rc}:\n{log[-4000:]}"
    return results[0][1]


def _logged_step(staging: Path) -> int:
    """The newest step process 0 logged in its mirror's metrics.jsonl (0 before any)."""
    found = [*staging.glob("train/*/process-0/metrics.jsonl"), *staging.glob("train/*/metrics.jsonl")]
    if not found:
        return 0
    lines = found[0].read_text().splitlines()
    return json.loads(lines[-1])["step"] if lines else 0


def _when_logged(procs, staging: Path, step: int, timeout: float = 240) -> None:
    end = time.monotonic() + timeout
    while _logged_step(staging) < step:
        assert all(p.poll() is None for p in procs), f"a process ended before step {step} was logged"
        assert time.monotonic() < end, f"step {step} was not logged within {timeout} s"
        time.sleep(0.05)


def _bucket_losses(store, url: str) -> dict[int, float]:
    recs = [
        json.loads(line)
        for line in store.fs.cat_file(f"{url.split('://', 1)[1]}/metrics.jsonl").decode().splitlines()
    ]
    steps = [r["step"] for r in recs]
    assert steps == sorted(set(steps)), f"metrics.jsonl in the bucket: steps not one line each: {steps}"
    return {r["step"]: r["loss"] for r in recs}


def _same_losses(got: dict[int, float], want: dict[int, float], last: int) -> None:
    assert sorted(got) == list(range(1, last + 1)), sorted(got)
    for s in got:
        assert abs(got[s] - want[s]) <= 1e-5 * abs(want[s]), (s, got[s], want[s])


def _complete(url: str, tmp_path: Path) -> list[int]:
    return RunMirror(url, "probe", tmp_path / "probe").complete_remote_steps()


@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_two_hosts_write_one_bucket_run_and_fresh_hosts_resume_it(store, reference, tmp_path):
    configs, want = reference
    url = store.join("runs", "pod")
    root = url.split("://", 1)[1]
    _ok(_start(configs[4], url, tmp_path / "hosts-a", 2, "--steps", "4"))
    assert _complete(url, tmp_path) == [4]
    # the step holds both hosts' shards: the sharded arrays have a file per device, 4 devices in all
    sealed = json.loads(store.fs.cat_file(f"{url.split('://', 1)[1]}/checkpoints/4/olmax-files.json"))[
        "files"
    ]
    embed = sorted(
        n for n in sealed if n.startswith("state/params.") and "embed" in n and not n.endswith(".zarray")
    )
    assert len(embed) == 4, embed
    out = _ok(_start(configs[4], url, tmp_path / "hosts-b", 2, "--steps", "8"))
    assert "resumed from step 4" in out, out[-3000:]
    _same_losses(_bucket_losses(store, url), want, 8)
    assert _complete(url, tmp_path) == [8, 4]
    # and on another process count: one process with 4 devices, a fresh host again
    out = _ok(_start(configs[4], url, tmp_path / "host-c", 1, "--steps", "10"))
    assert "resumed from step 8" in out, out[-3000:]
    _same_losses(_bucket_losses(store, url), want, 10)
    assert _complete(url, tmp_path) == [10, 8]

    # the eval job scores the bucket's steps and downloads no optimizer state
    env = {**train_env(2), "OLMAX_RUN_STAGING": str(tmp_path / "evaluator")}
    watched = subprocess.run(
        [sys.executable, "-m", "olmax.cli", "eval", "watch", "--run", url, "--once"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert watched.returncode == 0, "\n".join(ln for ln in watched.stderr.splitlines() if "olmax" in ln)
    records = [
        json.loads(line)
        for line in store.fs.cat_file(f"{url.split('://', 1)[1]}/evals/evals.jsonl").decode().splitlines()
    ]
    assert sorted({r["step"] for r in records}) == [8, 10]
    costs = {
        c["step"]: c
        for c in map(json.loads, store.fs.cat_file(f"{root}/evals/costs.jsonl").decode().splitlines())
    }
    for step in (8, 10):  # written by two hosts, then by one
        sealed = json.loads(store.fs.cat_file(f"{root}/checkpoints/{step}/olmax-files.json"))["files"]
        optimizer = sum(s for n, s in sealed.items() if n.startswith("state/opt."))
        assert optimizer > 0 and costs[step]["left_in_bucket_bytes"] == optimizer, (costs[step], optimizer)
        seal = store.fs.size(f"{root}/checkpoints/{step}/olmax-files.json")
        assert costs[step]["download_bytes"] == sum(sealed.values()) - optimizer + seal


@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_sigterm_to_every_process_ends_in_a_saved_step(store, reference, tmp_path):
    configs, want = reference
    url = store.join("runs", "preempted")
    procs = _start(configs[1000], url, tmp_path / "hosts-a", 2)
    _when_logged(procs, tmp_path / "hosts-a", 5)
    t0 = time.monotonic()
    for p in procs:
        p.send_signal(signal.SIGTERM)
    results = _wait(procs, 90)
    assert time.monotonic() - t0 < 90
    stopped = set()
    for i, (rc, log) in enumerate(results):
        assert rc == PREEMPTED, f"process {i} exited {rc}:\n{log[-4000:]}"
        line = [ln for ln in log.splitlines() if "preempted at step" in ln]
        assert len(line) == 1 and "the same command resumes it" in line[0], log[-2000:]
        stopped.add(int(line[0].split("preempted at step ")[1].split(":")[0]))
    (step,) = stopped  # every process stopped at the same step
    assert step >= 5 and _complete(url, tmp_path) == [step]
    last = min(step + 3, REF_STEPS)
    out = _ok(_start(configs[1000], url, tmp_path / "hosts-b", 2, "--steps", str(last)))
    assert f"resumed from step {step}" in out, out[-3000:]
    _same_losses(_bucket_losses(store, url), want, last)


@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_sigterm_to_one_process_ends_in_a_saved_step(store, reference, tmp_path):
    configs, want = reference
    url = store.join("runs", "one")
    procs = _start(configs[1000], url, tmp_path / "host-a", 1)
    _when_logged(procs, tmp_path / "host-a", 3)
    procs[0].send_signal(signal.SIGTERM)
    ((rc, log),) = _wait(procs, 90)
    assert rc == PREEMPTED, log[-4000:]
    step = int(log.split("preempted at step ")[1].split(":")[0])
    assert step >= 3 and _complete(url, tmp_path) == [step]
    last = min(step + 3, REF_STEPS)
    out = _ok(_start(configs[1000], url, tmp_path / "host-b", 1, "--steps", str(last)))
    assert f"resumed from step {step}" in out, out[-3000:]
    _same_losses(_bucket_losses(store, url), want, last)


@pytest.mark.parametrize("store", ["s3"], indirect=True)
@pytest.mark.parametrize("when", ["mid-run", "mid-save"])
def test_a_lost_process_ends_the_others_and_the_rerun_resumes(store, reference, tmp_path, when):
    configs, want = reference
    url = store.join("runs", f"lost-{when}")
    root = url.split("://", 1)[1]
    procs = _start(
        configs[4 if when == "mid-run" else 2],
        url,
        tmp_path / "hosts-a",
        2,
        env={"OLMAX_LOST_PROCESS_TIMEOUT": "10"},
    )
    _when_logged(procs, tmp_path / "hosts-a", 5)
    if when == "mid-save":  # kill process 1 once a step past 5 has objects in the bucket and no seal
        end = time.monotonic() + 120
        while True:
            assert time.monotonic() < end and procs[0].poll() is None, "no step seen mid-upload"
            store.fs.invalidate_cache()
            files = store.fs.find(f"{root}/checkpoints") if store.fs.exists(f"{root}/checkpoints") else []
            steps = {int(f.split("/checkpoints/")[1].split("/")[0]) for f in files}
            sealed = {
                int(f.split("/checkpoints/")[1].split("/")[0])
                for f in files
                if f.endswith("olmax-files.json")
            }
            if any(s > 5 for s in steps - sealed):
                break
    procs[1].kill()
    t0 = time.monotonic()
    rc, log = _wait(procs[:1], 240)[0]
    procs[1].wait()
    assert time.monotonic() - t0 < 240
    assert rc == LOST_PROCESS, log[-4000:]
    assert "olmax: error: process 1 of 2 is lost" in log, log[-3000:]
    complete = _complete(url, tmp_path)
    assert complete and complete[0] >= 4, complete
    for step in complete:  # each complete step is whole: its seal's files are there at their sizes
        sealed = json.loads(store.fs.cat_file(f"{root}/checkpoints/{step}/olmax-files.json"))["files"]
        assert all(store.fs.size(f"{root}/checkpoints/{step}/{n}") == s for n, s in sealed.items())
    last = complete[0] + 2
    out = _ok(_start(configs[4], url, tmp_path / "hosts-b", 2, "--steps", str(last)))
    assert f"resumed from step {complete[0]}" in out, out[-3000:]
    _same_losses(_bucket_losses(store, url), want, last)

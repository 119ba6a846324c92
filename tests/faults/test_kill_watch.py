"""`olmax eval watch` beside a real `olmax train`, both subprocesses: the watcher is SIGKILLed once mid-run
(after it has written at least one checkpoint's records) and restarted; a third watcher refuses while the
second runs. The end: exactly one record per checkpoint and set, in step order, with the CE of `olmax eval
heldout` and of the trainer's in-loop eval on each checkpoint, byte-identical to an uninterrupted watcher."""

from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from olmax.cli import main
from tests.evals.tokenizer_testdata import make_tokenizer
from tests.train.train_testdata import train_cmd, train_env, write_config, write_mix

STEPS, EVERY = 40, 4


def read_records(run: Path) -> list[dict]:
    path = run / "evals" / "evals.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def wait_for(cond, what: str, timeout: float = 300.0, procs: tuple = ()) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        for p in procs:
            assert p.poll() is None, f"{what}: a process ended first (exit {p.returncode})"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.slow
def test_watcher_killed_mid_run_and_restarted_records_each_checkpoint_once(tmp_path):
    tok = make_tokenizer(tmp_path / "tokenizer.json")
    held = tmp_path / "held.jsonl"
    held.write_text(
        "".join(
            json.dumps({"id": f"h{i}", "text": t}) + "\n"
            for i, t in enumerate(
                [
                    "The quick brown fox jumps over the lazy dog.",
                    "def add(a, b):\n    return a + b",
                    "Photosynthesis converts light energy into chemical energy.",
                    "Question: Who? Answer: Darwin",
                ]
            )
        )
    )
    sets = [f"held={held}", f"again={held}"]
    config = write_config(
        tmp_path / "tiny.yaml",
        write_mix(tmp_path / "data"),
        steps=STEPS,
        every=EVERY,
        checkpoint={"every": EVERY, "keep": 100},
        train={"eval_every": 8, "eval_sets": sets, "eval_limit": 0},
    )
    run = tmp_path / "run"
    env = {**train_env(1), "OLMAX_EVAL_TOKENIZER": str(tok)}
    watch_cmd = [
        sys.executable,
        "-m",
        "olmax.cli",
        "eval",
        "watch",
        "--run",
        str(run),
        "--poll-seconds",
        "0.2",
        "--max-idle-seconds",
        "300",
    ]
    logs = tmp_path / "logs"
    logs.mkdir()

    def start(cmd: list[str], name: str) -> subprocess.Popen:
        return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=open(logs / name, "w"))  # noqa: SIM115

    first = start(watch_cmd, "watch1")  # before the trainer: it waits for the run's config.yaml
    trainer = start(train_cmd(config, run), "train")
    try:
        wait_for(lambda: read_records(run), "the watcher's first records", procs=(first, trainer))
        time.sleep(random.uniform(0.0, 1.0))  # a random moment after that: maybe mid-step, maybe mid-write
        steps_at_kill = sorted({r["step"] for r in read_records(run)})
        training_at_kill = trainer.poll() is None
        first.send_signal(signal.SIGKILL)
        assert first.wait(60) == -signal.SIGKILL
        second = start(watch_cmd, "watch2")
        wait_for(
            lambda: "olmax eval watch: " in (logs / "watch2").read_text(),
            "the second watcher to start",
            procs=(second,),
        )
        third = subprocess.run([*watch_cmd, "--once"], env=env, capture_output=True, text=True, timeout=300)
        assert trainer.wait(600) == 0, (logs / "train").read_text()[-3000:]
        assert second.wait(600) == 0, (logs / "watch2").read_text()[-3000:]
    finally:
        for p in (first, trainer, locals().get("second")):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    assert training_at_kill, "the trainer finished before the kill: not a mid-run kill (slow the run down)"
    assert steps_at_kill and steps_at_kill[-1] < STEPS, steps_at_kill
    assert third.returncode == 2 and "another olmax process is writing it" in third.stderr, third.stderr[
        -2000:
    ]
    assert "Traceback" not in (logs / "watch2").read_text()

    records = read_records(run)
    want_steps = list(range(EVERY, STEPS + 1, EVERY))
    assert [(r["kind"], r["step"], r["eval"]) for r in records] == [
        ("heldout", s, name) for s in want_steps for name in ("held", "again")
    ]
    in_loop = {r["step"]: r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())}
    for step in want_steps:
        out = tmp_path / f"heldout-{step}.json"
        assert (
            main(
                [
                    "eval",
                    "heldout",
                    "--checkpoint",
                    str(run / "checkpoints" / str(step)),
                    "--eval",
                    sets[0],
                    "--eval",
                    sets[1],
                    "--tokenizer",
                    str(tok),
                    "--seq-len",
                    "32",
                    "--out",
                    str(out),
                ]
            )
            == 0
        )
        want = [r["ce"] for r in json.loads(out.read_text())["results"]]
        got = [r["ce"] for r in records if r["step"] == step]
        assert got == want, (step, got, want)
        if step % 8 == 0:
            assert got == [in_loop[step]["eval/held/ce"], in_loop[step]["eval/again/ce"]]

    # an uninterrupted watcher over a copy of the finished run writes the same bytes
    clean = tmp_path / "clean"
    shutil.copytree(run, clean, ignore=shutil.ignore_patterns("evals", ".evals.lock"))
    p = subprocess.run(
        [*watch_cmd[:6], str(clean), "--once"], env=env, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert (clean / "evals" / "evals.jsonl").read_bytes() == (run / "evals" / "evals.jsonl").read_bytes()

"""Two JAX processes on 127.0.0.1 (jax.distributed, gloo) train one model together, checkpoint, and the
run resumes in one process; losses and the in-loop held-out CE (scored on the two processes' mesh) match a
one-process run on the same 4 devices."""

import json
import socket
import subprocess
from pathlib import Path

import pytest

from tests.evals.tokenizer_testdata import make_tokenizer
from tests.train.train_testdata import (
    losses,
    metrics,
    run_train,
    train_cmd,
    train_env,
    write_config,
    write_mix,
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_processes(config: str, run: Path, *args: str) -> None:
    port = _free_port()
    procs = [
        subprocess.Popen(
            train_cmd(
                config,
                run,
                *args,
                "--coordinator",
                f"127.0.0.1:{port}",
                "--num-processes",
                "2",
                "--process-id",
                str(i),
            ),
            env=train_env(2),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    logs = [p.communicate(timeout=300)[0] for p in procs]
    for i, (p, log) in enumerate(zip(procs, logs)):
        assert p.returncode == 0, f"process {i} failed:\n{log[-4000:]}"


@pytest.mark.slow
def test_two_processes_train_together_and_resume_in_one(tmp_path):
    mix = write_mix(tmp_path / "data")
    held = tmp_path / "held.jsonl"
    texts = ["The quick brown fox.", "def f(x): return x", "Photosynthesis converts light."]
    held.write_text("".join(json.dumps({"id": str(i), "text": t}) + "\n" for i, t in enumerate(texts)))
    tokenizer = str(make_tokenizer(tmp_path / "tokenizer.json"))
    evals = {"eval_every": 2, "eval_sets": [f"held={held}"], "eval_limit": 0, "eval_tokenizer": tokenizer}
    config = write_config(tmp_path / "dist.yaml", mix, steps=6, every=2, train=evals)
    run_train(config, tmp_path / "ref", devices=4)
    run = tmp_path / "two"
    _two_processes(config, run, "--steps", "4")
    ce = {r["step"]: r["eval/held/ce"] for r in metrics(run) if "eval/held/ce" in r}
    ref_ce = {r["step"]: r["eval/held/ce"] for r in metrics(tmp_path / "ref") if "eval/held/ce" in r}
    assert sorted(ce) == [2, 4] and all(abs(ce[s] - ref_ce[s]) <= 1e-5 * ref_ce[s] for s in ce), (ce, ref_ce)
    assert sorted(losses(run)) == [1, 2, 3, 4]
    out = run_train(config, run, devices=4)  # one process, same 4 devices: resumes at step 4
    assert "resumed from step 4" in out
    want, got = losses(tmp_path / "ref"), losses(run)
    assert got.keys() == want.keys()
    for s in want:  # process 0's rows come first in the global array: same rows, other sum order
        assert abs(got[s] - want[s]) <= 1e-5 * abs(want[s]), (s, got[s], want[s])

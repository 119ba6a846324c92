"""bench/peers/loader.py and bench/peers/train_step.py run their peers fairly: drained buffers, the faster AdamW path."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from bench.harness import ROOT
from bench.peers import loader, train_step


class FakeClock:
    """Stands in for time.perf_counter: records how many batches had been taken when it was read."""

    def __init__(self, taken: list[int]):
        self.taken, self.reads = taken, []

    def __call__(self) -> float:
        self.reads.append(self.taken[0])
        return float(len(self.reads))


def test_loader_round_starts_the_clock_only_after_the_drain(monkeypatch):
    monkeypatch.setattr(loader, "BATCHES_PER_EPOCH", 30)
    taken, opened = [0], []

    def open_epoch():
        opened.append(taken[0])

        def batches():
            while True:
                taken[0] += 1
                yield {"input_ids": np.zeros((1, 1), np.int32)}

        return batches()

    clock = FakeClock(taken)
    monkeypatch.setattr(loader.time, "perf_counter", clock)
    setting = loader.Setting("fake", "test", open_epoch)
    setting.round(10)
    # fresh iterator: 1 batch for the dtype, DRAIN untimed, then the clock; 10 timed, then the clock again
    assert clock.reads == [1 + loader.DRAIN, 1 + loader.DRAIN + 10]
    assert setting.dtype == "numpy.int32" and len(setting.rates) == 1
    setting.round(10)  # 19 taken; 19 + 8 + 10 > 30: a fresh epoch-1 iterator, drained again
    assert opened == [0, 19]
    assert clock.reads[2:] == [19 + 1 + loader.DRAIN, 19 + 1 + loader.DRAIN + 10]


def test_loader_names_each_side_s_dtype():
    import torch

    assert loader.describe_dtype(torch.zeros(2, dtype=torch.int64)) == "torch.int64"
    assert loader.describe_dtype(np.zeros(2, np.int32)) == "numpy.int32"


def test_adamw_probe_times_three_paths_and_picks_fused_or_foreach():
    import torch

    params = [torch.nn.Parameter(torch.randn(64, 32)), torch.nn.Parameter(torch.randn(32))]
    before = [p.detach().clone() for p in params]
    choice, medians = train_step.probe_adamw(params, 2)
    assert choice in ("fused", "foreach") and medians[choice] == min(medians["fused"], medians["foreach"])
    assert set(medians) == {"fused", "foreach", "default"} and all(m > 0 for m in medians.values())
    assert all(torch.equal(a, b) for a, b in zip(params, before, strict=True))  # the probe ran on copies
    line = train_step.describe_probe(choice, medians, 2080)
    assert line.endswith(f"using AdamW({choice}=True)") and "default" in line
    assert train_step.adamw(params, "fused").defaults["fused"] is True
    assert train_step.adamw(params, "foreach").defaults["foreach"] is True


@pytest.mark.slow
def test_loader_bench_prints_both_comparisons_and_the_last_line(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.peers.loader",
            "--rounds",
            "1",
            "--batches",
            "20",
            "--skip-resume",
            "--out",
            str(tmp_path),
            "--results",
            str(tmp_path),  # never over the committed bench/results/loader.json
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert (
        "equal parallelism, synchronous (olmax num_threads=0 vs olmo-core num_workers=0, num_threads=0)"
        in out
    )
    assert "best vs best on" in out
    assert "input_ids torch.int64" in out and "input_ids numpy.int32" in out
    assert re.fullmatch(r"loader tokens/s olmax/olmo-core = \d+\.\dx", out.strip().splitlines()[-1])


@pytest.mark.slow
def test_train_step_bench_tiny_prints_the_adamw_choice_and_the_last_line(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.peers.train_step",
            "--d-model",
            "64",
            "--layers",
            "1",
            "--seq",
            "64",
            "--iters",
            "1",
            "--probe-iters",
            "1",
            "--no-compile",
            "--results",
            str(tmp_path),  # never over the committed bench/results/train_step_b1.json
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"using AdamW\((fused|foreach)=True\)", proc.stdout), proc.stdout
    last = proc.stdout.strip().splitlines()[-1]
    assert re.fullmatch(
        r"train tokens/s olmax/hf-torch = \d+\.\d+x \(per interleaved step: median, min-max\)", last
    ), last
    assert (tmp_path / "train_step_b1.json").exists() or list(tmp_path.glob("train_step*.json")), (
        "no record written"
    )

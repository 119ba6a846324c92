"""`olmax data batches` and `olmax data plan` from the command line."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from olmax.cli import main
from olmax.data.index import build_index
from olmax.data.loader import Loader
from olmax.data.mixfile import read_mix
from olmax.data.stream import StreamSpec
from tests.data.loader_testdata import SIZES, write_position_files


@pytest.fixture(scope="module")
def mix_path(tmp_path_factory):
    return write_position_files(str(tmp_path_factory.mktemp("pos")))


def test_batches_writes_process_rows(mix_path, tmp_path):
    out = tmp_path / "b.npy"
    argv = [
        "data",
        "batches",
        "--mix",
        mix_path,
        "--seq-len",
        "16",
        "--global-batch-size",
        "8",
        "--seed",
        "3",
        "--start-step",
        "30",
        "--steps",
        "6",
        "--process-count",
        "2",
        "--process-index",
        "1",
        "--work-dir",
        str(tmp_path / "w"),
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    got = np.load(out)
    assert got.shape == (6, 4, 16) and got.dtype == np.int32
    loader = Loader(
        build_index(read_mix(mix_path), 16),
        StreamSpec(seq_len=16, global_batch_size=8, seed=3, work_dir=str(tmp_path / "w")),
        process_index=1,
        process_count=2,
    )
    it = loader.iterate(loader.state_at(1, 30))
    for n in range(6):  # runs past the end of epoch 1 (33 batches) into epoch 2
        np.testing.assert_array_equal(got[n], next(it)["input_ids"])
    assert [f for f in os.listdir(tmp_path) if f != "w"] == ["b.npy"]


def test_batches_errors_leave_no_output(mix_path, tmp_path, capsys):
    out = tmp_path / "b.npy"
    base = [
        "data",
        "batches",
        "--mix",
        mix_path,
        "--seq-len",
        "16",
        "--seed",
        "3",
        "--steps",
        "2",
        "--out",
        str(out),
    ]
    assert main(base + ["--global-batch-size", "8", "--process-count", "3"]) == 2
    assert "not divisible by --process-count 3" in capsys.readouterr().err
    assert main(base + ["--global-batch-size", "8", "--start-step", "999"]) == 2
    assert "--start-step 999" in capsys.readouterr().err
    assert main(base + ["--global-batch-size", "8", "--seq-len", "4096"]) == 2
    assert "fewer than --seq-len 4096" in capsys.readouterr().err
    assert main(base + ["--global-batch-size", "8", "--check-vocab", "50", "--vocab-size", "1000"]) == 2
    assert "is >= vocab size 1000" in capsys.readouterr().err
    assert not out.exists() and os.listdir(tmp_path) == []


def test_plan(mix_path, tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert (
        main(
            [
                "data",
                "plan",
                "--mix",
                mix_path,
                "--seq-len",
                "16",
                "--global-batch-size",
                "8",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    plan = json.loads(out.read_text())
    instances = sum(n // 16 for n in SIZES)
    assert plan["instances"] == instances and plan["steps_per_epoch"] == instances // 8
    assert plan["file_tokens"] == sum(SIZES)
    assert abs(sum(s["share"] for s in plan["sources"].values()) - 1) < 1e-9
    assert plan["fingerprint"] in text and f"{instances:,}" in text
    assert (
        main(
            [
                "data",
                "plan",
                "--mix",
                str(tmp_path / "missing.txt"),
                "--seq-len",
                "16",
                "--global-batch-size",
                "8",
            ]
        )
        == 2
    )

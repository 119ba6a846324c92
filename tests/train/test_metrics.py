"""metrics.jsonl: the writer truncates past the resume step and writes strict JSON; the readers take the
last train record of each step and skip a torn tail."""

from __future__ import annotations

import json
import math

import pytest

from olmax.errors import OlmaxError
from olmax.metrics import TRAIN_FIELDS, MetricsLog, read_records, train_records
from tests.tb_events import tensorboard_scalars


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_resume_drops_records_past_the_restored_step_and_a_torn_tail(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(
        '{"step": 1, "loss": 3.0}\n{"kind": "heldout", "step": 2, "eval": "s", "ce": 2.0}\n'
        '{"kind": "heldout", "step": null, "eval": "s", "ce": 2.5}\n{"step": 3, "loss": 9.0}\n{"step": 4, "lo'
    )
    log = MetricsLog(tmp_path, resume_step=2, tensorboard=False)
    log.write({"step": 3, "loss": float("nan"), "mfu": None}, tb_every=1)
    log.close()
    assert _lines(tmp_path / "metrics.jsonl") == [
        {"step": 1, "loss": 3.0},
        {"kind": "heldout", "step": 2, "eval": "s", "ce": 2.0},
        {"kind": "heldout", "step": None, "eval": "s", "ce": 2.5},
        {"step": 3, "loss": None, "mfu": None},
    ]


def test_a_malformed_middle_line_stops_the_resume_with_its_line(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{oops\n{"step": 2}\n')
    with pytest.raises(OlmaxError, match=r"metrics\.jsonl:2"):
        MetricsLog(tmp_path, resume_step=5, tensorboard=False)


def test_readers_take_the_last_train_record_per_step(tmp_path):
    recs = [
        {"step": 2, "loss": 5.0},
        {"step": 1, "loss": 6.0},
        {"kind": "heldout", "step": 2, "ce": 1.0},
        {"step": 2, "loss": 4.5},
        {"step": 3, "loss": None},
        {"step": 3, "eval/s/ce": 2.0},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs) + '{"step": 4, "lo')
    assert read_records(tmp_path) == recs
    assert read_records(tmp_path / "metrics.jsonl") == recs
    steps = train_records(tmp_path)
    assert list(steps) == [1, 2] and steps[2]["loss"] == 4.5
    with pytest.raises(OlmaxError, match="pass a run directory that holds metrics.jsonl"):
        read_records(tmp_path / "missing")
    assert TRAIN_FIELDS[:2] == ("step", "loss")


def test_importing_the_schema_module_does_not_import_jax():
    import subprocess
    import sys

    code = "import sys, olmax.metrics, olmax.evals.curves; print('jax' in sys.modules)"
    assert (
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
        == "False"
    )


def test_tensorboard_takes_olmo_core_names(tmp_path):
    rec = {
        "step": 4,
        "loss": 2.5,
        "z_loss": 0.01,
        "grad_norm": 0.7,
        "lr": 3e-4,
        "tokens": 4096,
        "tokens_per_s": 1000.0,
        "mfu": 0.25,
        "skipped": 0,
        "epoch": 1,
        "eval/lm/c4_en/CE loss": 3.0,
        "eval/downstream/arc_easy (accuracy)": 0.5,
        "eval/sciq/ce": 2.0,
    }
    log = MetricsLog(tmp_path, resume_step=0, tensorboard=True)
    log.write(rec, tb_every=2)
    log.write({**rec, "step": 5}, tb_every=2)  # not a multiple of tb_every: metrics.jsonl only
    log.close()
    [events] = (tmp_path / "tb").glob("events.out.tfevents.*")
    got = {(tag, step): value for tag, step, value in tensorboard_scalars(events)}
    assert {step for _, step in got} == {4}
    tags = {tag: value for (tag, _), value in got.items()}
    assert tags == pytest.approx(
        {
            "train/CE_loss": 2.5,
            "train/PPL": math.exp(2.5),
            "train/Z_loss": 0.01,
            "optim/total_grad_norm": 0.7,
            "optim/LR__group_0_": 3e-4,
            "optim/step_skipped": 0.0,
            "throughput/total_tokens": 4096.0,
            "throughput/device/TPS": 1000.0,  # one CPU device in this process
            "throughput/device/MFU": 25.0,
            "train/epoch": 1.0,
            "eval/lm/c4_en/CE_loss": 3.0,
            "eval/downstream/arc_easy__accuracy_": 0.5,
            "eval/sciq/ce": 2.0,
        },
        rel=1e-6,
    )

"""A real run's TensorBoard events, read by TensorBoard's own reader, hold every train scalar of
metrics.jsonl under OLMo-core's names, at every step, with the same values."""

from __future__ import annotations

import math

import pytest

from olmax.metrics import olmo_core_scalars
from tests.tb_events import tensorboard_scalars
from tests.train.train_testdata import metrics, run_train, write_config, write_mix


@pytest.mark.slow
def test_tensorboard_reads_every_train_scalar_of_metrics_jsonl(tmp_path):
    mix = write_mix(tmp_path / "mix")
    cfg = write_config(
        tmp_path / "exp.yaml", mix, steps=4, every=2, train={"tensorboard": True, "log_every": 1}
    )
    run_train(cfg, tmp_path / "run")
    [events] = (tmp_path / "run" / "tb").glob("events.out.tfevents.*")
    got = {(tag, step): value for tag, step, value in tensorboard_scalars(events)}
    want = {}
    for rec in metrics(tmp_path / "run"):
        if rec.get("kind", "train") == "train":
            want.update({(tag, rec["step"]): v for tag, v in olmo_core_scalars(rec).items()})
    assert {step for _, step in want} == {1, 2, 3, 4}
    # TensorBoard tags hold no spaces or parentheses: tensorboardX writes OLMo-core's "train/CE loss" as
    # "train/CE_loss" and "optim/LR (group 0)" as "optim/LR__group_0_"
    want = {(tag.replace(" ", "_").replace("(", "_").replace(")", "_"), s): v for (tag, s), v in want.items()}
    assert set(got) == set(want)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-6, abs=1e-12), key
    assert ("train/CE_loss", 4) in got and math.isfinite(got[("train/CE_loss", 4)])

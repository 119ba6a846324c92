"""olmax/evals/eval_mesh.py and eval_model.py in this process (one CPU device): the --mesh spec, the `auto` shape from the
model's size and a device's memory, one-line errors, and a model placed on a mesh as the scoring runs it.
Meshes of several devices: tests/evals/test_sharded_eval.py."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from olmax.errors import OlmaxError
from olmax.evals.eval_mesh import (
    PARAM_FRACTION,
    auto_shape,
    describe,
    eval_config,
    eval_mesh,
    param_bytes,
    parse_mesh,
)
from olmax.evals.eval_model import EvalModel, as_eval_model
from olmax.model.model_config import olmo3_7b, tiny

GIB = 2**30


def test_mesh_specs():
    assert parse_mesh("auto") is None and parse_mesh(None) is None
    assert parse_mesh("1x8") == (1, 8) and parse_mesh("4X2") == (4, 2)
    for bad in ("8", "0x8", "2x", "x2", "2x2x2", "two"):
        with pytest.raises(OlmaxError, match="--mesh"):
            parse_mesh(bad)


def test_auto_shards_parameters_over_the_fewest_devices_that_hold_them():
    seven_b = param_bytes(olmo3_7b())
    assert 29e9 < seven_b < 30e9  # fp32, the padded vocabulary
    v5e = 16_909_336_064  # a v5e chip's allocator limit (bench/results/tpu_mfu.json)
    assert auto_shape(8, seven_b, v5e) == (1, 8)  # 3.6 GB a chip: under a quarter of 15.75 GiB
    assert auto_shape(4, seven_b, v5e) == (1, 4)  # 7.3 GB a chip: none fits a quarter, so all four
    v5p = 95 * GIB
    assert auto_shape(4, seven_b, v5p) == (2, 2)  # 14.6 GB on each of 2: under a quarter of 95 GiB
    assert auto_shape(8, param_bytes(tiny()), v5e) == (8, 1)  # small models: data-parallel, no gathers
    assert auto_shape(6, 3 * PARAM_FRACTION * 100, 100) == (2, 3)  # fsdp divides the device count
    assert auto_shape(8, seven_b, None) == (1, 8)  # memory unknown: every device shards


def test_a_mesh_larger_than_the_host_is_one_line():
    with pytest.raises(OlmaxError, match=r"--mesh 2x4 needs 8 devices; JAX sees 1 \(cpu\)"):
        eval_mesh("2x4", tiny())


def test_a_model_on_a_mesh_keeps_the_trainer_sharding_rule_and_runs_without_remat():
    from olmax.model import init_model

    cfg = tiny(vocab_size=1000, remat="full")
    model = init_model(cfg, seed=0)
    placed = as_eval_model(model, eval_mesh("auto", cfg), dtype="bfloat16")
    assert isinstance(placed, EvalModel)
    assert placed.cfg == eval_config(cfg, "bfloat16") and placed.cfg.remat == "none"
    assert describe(placed.mesh) == f"1x1 (1 x {jax.devices()[0].device_kind})"
    again = as_eval_model(placed)  # already placed: the same arrays, nothing copied
    assert all(a is b for a, b in zip(jax.tree.leaves(again.params), jax.tree.leaves(placed.params)))
    ids = np.arange(24, dtype=np.int32).reshape(2, 12)
    assert placed(ids).shape == (2, 12, 1000)

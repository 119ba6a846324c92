"""The fp32 parity gate passes a faithful conversion with margin and fails the conversion bugs it exists
to catch: olmax's rope_theta 1% off, the two reordered norms swapped (their weights, or their place in
the block) and a square projection loaded untransposed. Each bug is planted on the olmax side only, as
a real conversion bug would be, and HF's `Olmo3ForCausalLM` on the same checkpoint stays the reference."""

import dataclasses
import json

import jax
import numpy as np
import pytest

from olmax.cli import main
from olmax.model import convert
from olmax.model.hf_reference import save_random_checkpoint
from olmax.model.parity import (
    FP32_MAX_ABS_LOGIT_DIFF,
    FP32_MAX_MEAN_KL,
    THRESHOLDS,
    over_limits,
    run_parity,
    thresholds,
)
from olmax.model.transformer import Block

jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    # 4 heads x head_dim 16 == d_model 64: q_proj and o_proj are square, so a transposed one still loads.
    # Seed 5: a 1% theta error keeps 100% top-1 here, so only the KL and |dlogit| bars can catch it.
    ck = save_random_checkpoint(
        tmp_path_factory.mktemp("gate") / "ck",
        seed=5,
        hidden_size=64,
        num_attention_heads=4,
        head_dim=16,
        num_key_value_heads=4,
        sliding_window=32,
    )
    cfg = json.loads((ck / "config.json").read_text())
    assert cfg["hidden_size"] == cfg["num_attention_heads"] * cfg["head_dim"]
    return ck


def theta_one_percent_off(monkeypatch):
    """olmax reads rope_theta (every layer type's) 1% too large."""
    real = convert.from_hf_config

    def wrong(*args, **kwargs):
        cfg = real(*args, **kwargs)
        sliding = cfg.sliding_rope_theta
        return dataclasses.replace(
            cfg,
            rope_theta=cfg.rope_theta * 1.01,
            sliding_rope_theta=None if sliding is None else sliding * 1.01,
        )

    monkeypatch.setattr(convert, "from_hf_config", wrong)


def norm_weights_swapped(monkeypatch):
    """The conversion maps post_attention_layernorm to the MLP's norm and post_feedforward to attention's."""
    swap = {
        "post_attention_layernorm.weight": "post_feedforward_layernorm.weight",
        "post_feedforward_layernorm.weight": "post_attention_layernorm.weight",
    }
    monkeypatch.setattr(
        convert,
        "LAYER_PARAMS",
        tuple(
            (ours, swap.get(theirs, theirs), transposed) for ours, theirs, transposed in convert.LAYER_PARAMS
        ),
    )


def norms_before_sublayers(monkeypatch):
    """The block normalises each sublayer's input (pre-norm) instead of its output (OLMo 3's reordered norm)."""

    def pre_norm(self, x_BxLxD, cos_LxH, sin_LxH, window, segment_ids_BxL=None):
        h_BxLxD = x_BxLxD + self.attn(self.attn_norm(x_BxLxD), cos_LxH, sin_LxH, window, segment_ids_BxL)
        return h_BxLxD + self.mlp(self.mlp_norm(h_BxLxD))

    monkeypatch.setattr(Block, "__call__", pre_norm)


def untransposed(proj):
    def plant(monkeypatch):
        """The conversion copies HF's (out, in) weight of a square projection as if it were (in, out)."""
        monkeypatch.setattr(
            convert,
            "LAYER_PARAMS",
            tuple(
                (ours, theirs, transposed and ours != ("attn", proj))
                for ours, theirs, transposed in convert.LAYER_PARAMS
            ),
        )

    return plant


BUGS = {
    "rope-theta-1pct": theta_one_percent_off,
    "norm-weights-swapped": norm_weights_swapped,
    "pre-norm-order": norms_before_sublayers,
    "q_proj-transposed": untransposed("q_proj"),
    "o_proj-transposed": untransposed("o_proj"),
}


def test_faithful_conversion_passes_with_margin(checkpoint):
    report = run_parity(checkpoint)  # fp32 both sides, seq 3 x window
    assert report["passed"] and report["over_limits"] == [] and report["thresholds"] == THRESHOLDS["float32"]
    # rounding only, far inside both bars: the figures docs/benchmarks.md gives (mean KL <= 1e-14,
    # max |dlogit| <= 1e-6)
    assert report["mean_kl"] <= 1e-14, report
    assert report["max_abs_logit_diff"] <= 1e-6, report


# each bug's mean KL and max |dlogit| on this checkpoint, as docs/benchmarks.md gives them (lower bounds)
BUG_FLOORS = {
    "rope-theta-1pct": (1e-8, 9e-4),
    "norm-weights-swapped": (8e-3, 0.5),
    "pre-norm-order": (2e-2, 1.0),
    "q_proj-transposed": (5e-3, 0.5),
    "o_proj-transposed": (5e-3, 0.5),
}


@pytest.mark.parametrize("bug", list(BUGS))
def test_planted_conversion_bug_fails_the_fp32_gate(checkpoint, monkeypatch, bug):
    BUGS[bug](monkeypatch)
    report = run_parity(checkpoint)
    assert not report["passed"], report
    # both new bars catch each bug on their own, whatever top-1 does
    assert report["mean_kl"] > FP32_MAX_MEAN_KL and report["max_abs_logit_diff"] > FP32_MAX_ABS_LOGIT_DIFF, (
        report
    )
    # at least what docs/benchmarks.md gives for each bug
    kl_floor, diff_floor = BUG_FLOORS[bug]
    assert report["mean_kl"] >= kl_floor and report["max_abs_logit_diff"] >= diff_floor, report
    assert any(m.startswith("mean KL") for m in report["over_limits"])
    assert any(m.startswith("max |dlogit|") for m in report["over_limits"])
    if bug == "rope-theta-1pct":
        # what the old fp32 gate (mean KL <= 1e-6 and 100% top-1) let through
        assert report["mean_kl"] <= 1e-6 and report["top1_agreement"] == 1.0, report


def test_gate_failure_is_exit_1_with_the_missed_bars(checkpoint, monkeypatch, tmp_path, capsys):
    theta_one_percent_off(monkeypatch)
    out = tmp_path / "r.json"
    assert main(["model", "parity", "--hf", str(checkpoint), "--out", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "FAIL: mean KL" in printed and "max |dlogit|" in printed and "HF logits up to" in printed
    report = json.loads(out.read_text())
    assert report["passed"] is False and len(report["over_limits"]) == 2  # KL and |dlogit|, not top-1


def test_nan_logits_miss_every_bar():
    stats = {"mean_kl": float("nan"), "max_abs_logit_diff": float("nan"), "top1_agreement": float("nan")}
    assert len(over_limits(stats, THRESHOLDS["float32"])) == 3
    assert len(over_limits(stats, THRESHOLDS["bfloat16"])) == 2
    ok = {"mean_kl": 0.0, "max_abs_logit_diff": 0.0, "top1_agreement": 1.0}
    assert over_limits(ok, THRESHOLDS["float32"]) == []


def test_either_side_in_bf16_gets_the_bf16_bars():
    assert thresholds("float32") is THRESHOLDS["float32"]
    assert thresholds("bfloat16") is THRESHOLDS["bfloat16"]
    assert thresholds("float32", hf_dtype="bfloat16") is THRESHOLDS["bfloat16"]
    assert np.isfinite(THRESHOLDS["float32"]["max_abs_logit_diff"])

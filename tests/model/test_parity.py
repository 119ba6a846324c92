"""The parity tool: metrics are right, a random fp32 checkpoint passes at seq 3 x window, a drift fails.
Planted conversion bugs against the fp32 gate: test_parity_gate.py."""

import json

import jax
import numpy as np
import pytest

from olmax.cli import main
from olmax.model import parity
from olmax.model.hf_reference import save_random_checkpoint
from olmax.model.parity import FP32_MAX_ABS_LOGIT_DIFF, FP32_MAX_MEAN_KL, compare_logits, run_parity

jax.config.update("jax_numpy_rank_promotion", "raise")


def test_compare_logits_metrics():
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(5, 11)).astype(np.float32)
    same = compare_logits(ref, ref + 3.0)  # a constant shift is the same distribution
    assert same["mean_kl"] < 1e-12 and same["top1_agreement"] == 1.0
    assert same["max_abs_logit_diff"] == pytest.approx(3.0)
    assert same["ref_max_abs_logit"] == pytest.approx(float(np.abs(ref).max()))
    flipped = ref.copy()
    flipped[0] = -flipped[0]
    out = compare_logits(ref, flipped)
    assert out["top1_agreement"] == pytest.approx(0.8) and out["max_kl"] > 0.1
    p = np.exp(ref[0]) / np.exp(ref[0]).sum()
    q = np.exp(flipped[0]) / np.exp(flipped[0]).sum()
    assert out["max_kl"] == pytest.approx(float((p * np.log(p / q)).sum()), rel=1e-6)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return save_random_checkpoint(tmp_path_factory.mktemp("parity") / "ck", seed=11, num_hidden_layers=8)


def test_random_checkpoint_passes_in_fp32(checkpoint, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["model", "parity", "--hf", str(checkpoint), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["seq_len"] == 48 and report["window"] == 16  # default: 3 x window
    assert report["passed"] and report["mean_kl"] <= FP32_MAX_MEAN_KL and report["top1_agreement"] == 1.0
    assert report["max_abs_logit_diff"] <= FP32_MAX_ABS_LOGIT_DIFF and report["over_limits"] == []
    # the figure the README and docs/benchmarks.md give for a random fp32 checkpoint: mean KL <= 1e-13
    assert report["mean_kl"] <= 1e-13, report["mean_kl"]
    assert "UTF-8 bytes" in report["tokens"]
    assert "mean KL(HF||olmax)" in capsys.readouterr().out


def test_checkpoint_tokenizer_is_used(checkpoint, tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(
        [parity.default_text(20_000)], trainers.BpeTrainer(vocab_size=500, special_tokens=["[UNK]"])
    )
    ck = tmp_path / "ck"
    ck.mkdir()
    for f in checkpoint.iterdir():
        (ck / f.name).write_bytes(f.read_bytes())
    tok.save(str(ck / "tokenizer.json"))
    text = tmp_path / "t.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    report = run_parity(ck, seq_len=64, text_file=text)
    assert report["tokens"].startswith("tokenizer") and report["passed"]


def test_drift_fails_with_exit_1(checkpoint, monkeypatch):
    real = parity.olmax_logits
    monkeypatch.setattr(parity, "olmax_logits", lambda *a: real(*a) * 1.05)
    assert main(["model", "parity", "--hf", str(checkpoint)]) == 1


@pytest.mark.parametrize("ours_noise, passed", [(0.5, True), (2.0, False)])
def test_bf16_rule_compares_with_transformers_own_bf16(checkpoint, monkeypatch, ours_noise, passed):
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(48, 1000)).astype(np.float32)
    noise = rng.normal(size=ref.shape).astype(np.float32) * 0.05
    fake_hf = {"float32": ref, "bfloat16": ref + noise}  # transformers' own bf16 error
    monkeypatch.setattr(parity, "hf_logits", lambda ck, ids, dtype: fake_hf[dtype])
    monkeypatch.setattr(parity, "olmax_logits", lambda ck, ids, dtype: ref + ours_noise * noise)
    report = run_parity(checkpoint, dtype="bfloat16")
    assert report["top1_agreement"] < 0.9875  # fails the fixed bar either way
    assert report["passed"] is passed


def test_short_text_is_an_error(checkpoint, tmp_path, capsys):
    text = tmp_path / "short.txt"
    text.write_text("too short")
    assert main(["model", "parity", "--hf", str(checkpoint), "--text", str(text)]) == 2
    assert "fewer than --seq-len" in capsys.readouterr().err


SWEEP = {
    "mha-window32": dict(num_key_value_heads=4, sliding_window=32),
    "mqa-5-layers": dict(num_key_value_heads=1, num_hidden_layers=5),
    "head-dim-32-d96": dict(
        hidden_size=96, num_attention_heads=4, head_dim=32, num_key_value_heads=2, num_hidden_layers=3
    ),
    "custom-layer-types": dict(
        num_hidden_layers=8,
        layer_types=[
            "full_attention",
            "sliding_attention",
            "full_attention",
            "sliding_attention",
            "sliding_attention",
            "sliding_attention",
            "sliding_attention",
            "full_attention",
        ],
    ),
    "yarn-theta-1e4": dict(
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
        rope_theta=1e4,
    ),
    "real-vocab-std0.1": dict(
        vocab_size=100_278, eos_token_id=100_257, pad_token_id=100_277, initializer_range=0.1
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SWEEP))
def test_unseen_random_checkpoints_fp32_parity_and_round_trip(name, tmp_path):
    from safetensors.numpy import load_file

    from olmax.model.convert import from_hf, to_hf

    ck = save_random_checkpoint(tmp_path / "ck", seed=123, **SWEEP[name])
    report = run_parity(ck)  # seq 3 x window
    assert report["passed"] and report["thresholds"]["max_mean_kl"] == FP32_MAX_MEAN_KL, report
    to_hf(from_hf(ck), tmp_path / "back")
    a, b = load_file(ck / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors")
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in a)

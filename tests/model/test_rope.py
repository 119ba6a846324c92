"""RoPE and YaRN against transformers' Olmo3RotaryEmbedding (simple: 1e-5, fp32)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from transformers.models.olmo3.modeling_olmo3 import apply_rotary_pos_emb

from olmax.model.hf_reference import random_hf_model
from olmax.model.model_config import YarnConfig
from olmax.model.rope import apply_rope, inv_frequencies, rope_tables

jax.config.update("jax_numpy_rank_promotion", "raise")
TOL = 1e-5
YARN = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 64}


def hf_tables(model, seq, layer_type):
    pos = torch.arange(seq)[None]
    x = torch.zeros(1, seq, 4)
    with torch.no_grad():
        cos, sin = model.model.rotary_emb(x, pos, layer_type)
    return cos[0].numpy(), sin[0].numpy()


@pytest.mark.parametrize("head_dim", [16, 32, 128, 256])
def test_default_inverse_frequencies_are_bit_identical_to_torch(head_dim):
    want = (1.0 / (500_000.0 ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))).numpy()
    np.testing.assert_array_equal(inv_frequencies(head_dim, 500_000.0), want)


def test_tables_match_hf_default_and_yarn_only_on_full_layers():
    hf = random_hf_model(rope_scaling=dict(YARN))
    seq = 300  # past original_max_position_embeddings
    yarn = YarnConfig(factor=8.0, original_max_position_embeddings=64)
    for layer_type, scaling in (("sliding_attention", None), ("full_attention", yarn)):
        cos_ref, sin_ref = hf_tables(hf, seq, layer_type)
        cos, sin = rope_tables(jnp.arange(seq), 16, 500_000.0, scaling)
        np.testing.assert_allclose(np.asarray(cos), cos_ref, atol=TOL, rtol=0)
        np.testing.assert_allclose(np.asarray(sin), sin_ref, atol=TOL, rtol=0)
    # the installed transformers leaves sliding layers unscaled (the all-layers regression is not here)
    cos_s, _ = hf_tables(hf, seq, "sliding_attention")
    cos_f, _ = hf_tables(hf, seq, "full_attention")
    assert np.abs(cos_s - cos_f).max() > 0.1


def test_yarn_mscale_and_frequency_blend():
    y = YarnConfig(factor=8.0, original_max_position_embeddings=8192)
    assert y.mscale == pytest.approx(0.1 * np.log(8.0) + 1.0)
    base = inv_frequencies(128, 500_000.0)
    scaled = inv_frequencies(128, 500_000.0, y)
    assert scaled[0] == base[0]  # highest frequency kept (extrapolated)
    assert scaled[-1] == pytest.approx(base[-1] / 8.0)  # lowest frequency interpolated by the factor
    assert np.all(scaled <= base) and np.all(scaled >= base / 8.0 * (1 - 1e-6))


def test_apply_rope_matches_hf_rotate_half():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(2, 20, 4, 16)).astype(np.float32)
    k = rng.normal(size=(2, 20, 2, 16)).astype(np.float32)
    cos, sin = rope_tables(jnp.arange(20), 16, 500_000.0)
    with torch.no_grad():
        q_ref, k_ref = apply_rotary_pos_emb(
            torch.from_numpy(q).transpose(1, 2),
            torch.from_numpy(k).transpose(1, 2),
            torch.from_numpy(np.array(cos))[None],
            torch.from_numpy(np.array(sin))[None],
        )
    np.testing.assert_allclose(
        np.asarray(apply_rope(jnp.asarray(q), cos, sin)), q_ref.transpose(1, 2).numpy(), atol=TOL, rtol=TOL
    )
    np.testing.assert_allclose(
        np.asarray(apply_rope(jnp.asarray(k), cos, sin)), k_ref.transpose(1, 2).numpy(), atol=TOL, rtol=TOL
    )


def test_rope_preserves_relative_position():
    rng = np.random.default_rng(1)
    q = jnp.asarray(rng.normal(size=(1, 1, 1, 16)).astype(np.float32))
    k = jnp.asarray(rng.normal(size=(1, 1, 1, 16)).astype(np.float32))
    cos, sin = rope_tables(jnp.arange(40), 16, 500_000.0)

    def score(i, j):
        return float(
            jnp.sum(
                apply_rope(q, cos[i : i + 1], sin[i : i + 1]) * apply_rope(k, cos[j : j + 1], sin[j : j + 1])
            )
        )

    assert score(9, 3) == pytest.approx(score(36, 30), abs=1e-5)

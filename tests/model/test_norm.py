"""RMSNorm and QK-norm parity with transformers' Olmo3RMSNorm (simple modules: 1e-5, fp32)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from transformers.models.olmo3.modeling_olmo3 import Olmo3RMSNorm

from olmax.model.convert import from_hf
from olmax.model.hf_reference import random_hf_model
from olmax.model.norm import RMSNorm, rms_norm

jax.config.update("jax_numpy_rank_promotion", "raise")
TOL = 1e-5


@pytest.mark.parametrize("eps", [1e-6, 1e-5])
def test_rms_norm_matches_hf(eps):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 7, 48)).astype(np.float32) * 3
    w = (1 + 0.3 * rng.normal(size=48)).astype(np.float32)
    ref_mod = Olmo3RMSNorm(48, eps=eps)
    with torch.no_grad():
        ref_mod.weight.copy_(torch.from_numpy(w))
        ref = ref_mod(torch.from_numpy(x)).numpy()
    ours = RMSNorm(48, eps)
    ours.weight[...] = jnp.asarray(w)
    np.testing.assert_allclose(np.asarray(ours(jnp.asarray(x))), ref, atol=TOL, rtol=TOL)


def test_rms_norm_computes_in_fp32_for_bf16_inputs():
    x = jnp.asarray(np.random.default_rng(1).normal(size=(1, 3, 256)) * 100, jnp.bfloat16)
    w = jnp.ones((256,), jnp.float32)
    out = rms_norm(x, w, 1e-6)
    assert out.dtype == jnp.bfloat16
    want = np.asarray(x, np.float32) / np.sqrt(
        np.mean(np.asarray(x, np.float32) ** 2, -1, keepdims=True) + 1e-6
    )
    np.testing.assert_allclose(np.asarray(out, np.float32), want, rtol=1e-2)  # one bf16 rounding


@pytest.mark.parametrize("n_kv_heads", [4, 2])
def test_qk_norm_over_whole_projection_matches_hf(n_kv_heads, tmp_path):
    hf = random_hf_model(seed=3, num_key_value_heads=n_kv_heads)
    hf.save_pretrained(str(tmp_path))
    ours = from_hf(tmp_path).layer(1).attn
    x = np.random.default_rng(2).normal(size=(2, 9, 64)).astype(np.float32)
    attn = hf.model.layers[1].self_attn
    with torch.no_grad():
        xt = torch.from_numpy(x)
        q_ref = attn.q_norm(attn.q_proj(xt)).numpy()
        k_ref = attn.k_norm(attn.k_proj(xt)).numpy()
    xj = jnp.asarray(x)
    q = ours.q_norm(xj @ ours.q_proj[...])
    k = ours.k_norm(xj @ ours.k_proj[...])
    assert q.shape[-1] == 64 and k.shape[-1] == 16 * n_kv_heads  # normed over all heads at once
    np.testing.assert_allclose(np.asarray(q), q_ref, atol=TOL, rtol=TOL)
    np.testing.assert_allclose(np.asarray(k), k_ref, atol=TOL, rtol=TOL)

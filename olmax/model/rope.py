"""Rotary position embeddings (theta 500,000) with optional YaRN, in HF's rotate-half layout."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from olmax.model.model_config import YarnConfig


def inv_frequencies(head_dim: int, theta: float, yarn: YarnConfig | None = None) -> np.ndarray:
    """Inverse frequencies (head_dim / 2,) in fp32, YaRN-blended when `yarn` is given."""
    exponents = np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)
    # theta ** e in float64 rounded once to fp32: matches torch's fp32 pow bit for bit where numpy's
    # fp32 power is off by an ulp, and at 8192+ positions an ulp in a frequency is a visible angle error
    base_freqs = (np.float64(theta) ** exponents.astype(np.float64)).astype(np.float32)
    extrapolated = (np.float32(1.0) / base_freqs).astype(np.float32)
    if yarn is None:
        return extrapolated
    interpolated = (np.float32(1.0) / (np.float32(yarn.factor) * base_freqs)).astype(np.float32)

    def dim_for_rotations(rotations: float) -> float:
        # the rotary dim whose wavelength fits `rotations` turns into the original context
        ctx = yarn.original_max_position_embeddings
        return head_dim * math.log(ctx / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = dim_for_rotations(yarn.beta_fast), dim_for_rotations(yarn.beta_slow)
    if yarn.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # avoid 0 / 0 in the ramp
    ramp = np.clip(
        (np.arange(head_dim // 2, dtype=np.float32) - np.float32(low)) / np.float32(high - low), 0, 1
    )
    keep = (np.float32(1.0) - ramp).astype(np.float32)  # 1: high-frequency dims keep their frequency
    return (interpolated * (1 - keep) + extrapolated * keep).astype(np.float32)


def rope_tables(
    positions_L: jax.Array, head_dim: int, theta: float, yarn: YarnConfig | None = None
) -> tuple[jax.Array, jax.Array]:
    """cos and sin tables (L, head_dim) in fp32 for integer `positions_L`, YaRN's mscale folded in."""
    inv_freq_H = jnp.asarray(inv_frequencies(head_dim, theta, yarn))
    angles_LxH = positions_L.astype(jnp.float32)[:, None] * inv_freq_H[None, :]
    angles_LxD = jnp.concatenate([angles_LxH, angles_LxH], axis=-1)
    scale = 1.0 if yarn is None else yarn.mscale
    return jnp.cos(angles_LxD) * scale, jnp.sin(angles_LxD) * scale


def apply_rope(x_BxLxNxD: jax.Array, cos_LxD: jax.Array, sin_LxD: jax.Array) -> jax.Array:
    """Rotate pairs (i, i + D/2) of every head by the position's angle; output in x's dtype."""
    half = x_BxLxNxD.shape[-1] // 2
    x1, x2 = x_BxLxNxD[..., :half], x_BxLxNxD[..., half:]
    rotated = jnp.concatenate([-x2, x1], axis=-1)
    cos, sin = cos_LxD[None, :, None, :], sin_LxD[None, :, None, :]
    out = x_BxLxNxD.astype(jnp.float32) * cos + rotated.astype(jnp.float32) * sin
    return out.astype(x_BxLxNxD.dtype)

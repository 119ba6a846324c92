"""RMSNorm computed in fp32 whatever the compute dtype, as OLMo 3 (and HF `Olmo3RMSNorm`) does."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx


def rms_norm(x_BxLxD: jax.Array, weight_D: jax.Array, eps: float) -> jax.Array:
    """x / rms(x) * weight over the last axis, in fp32, cast back to x's dtype.

    Computed on the 2-D (rows, D) view, so the weight's gradient is a reduction over the one leading
    axis: XLA:CPU's reduction of a (1, L, D) product over its middle axis ran 11x slower (7.4 vs 0.66 ms
    for this norm's forward and backward at 1 x 1024 x 512); the values are the same bits.
    """
    x32_NxD = x_BxLxD.reshape(-1, x_BxLxD.shape[-1]).astype(jnp.float32)
    inv_rms_Nx1 = jax.lax.rsqrt(jnp.mean(jnp.square(x32_NxD), axis=-1, keepdims=True) + eps)
    out_NxD = weight_D.astype(jnp.float32)[None, :] * (x32_NxD * inv_rms_Nx1)
    return out_NxD.reshape(x_BxLxD.shape).astype(x_BxLxD.dtype)


class RMSNorm(nnx.Module):
    """A learned per-channel scale (initialised to ones) over the last axis of width `dim`."""

    def __init__(self, dim: int, eps: float):
        self.eps = eps
        self.weight = nnx.Param(jnp.ones((dim,), jnp.float32))

    def __call__(self, x: jax.Array) -> jax.Array:
        return rms_norm(x, self.weight[...], self.eps)

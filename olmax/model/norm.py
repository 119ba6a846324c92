"""RMSNorm computed in fp32 whatever the compute dtype, as OLMo 3 (and HF `Olmo3RMSNorm`) does."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx


def rms_norm(x_BxLxD: jax.Array, weight_D: jax.Array, eps: float) -> jax.Array:
    """x / rms(x) * weight over the last axis, in fp32, cast back to x's dtype."""
    x32 = x_BxLxD.astype(jnp.float32)
    inv_rms = jax.lax.rsqrt(jnp.mean(jnp.square(x32), axis=-1, keepdims=True) + eps)
    weight = weight_D.astype(jnp.float32).reshape((1,) * (x32.ndim - 1) + (-1,))
    return (weight * (x32 * inv_rms)).astype(x_BxLxD.dtype)


class RMSNorm(nnx.Module):
    """A learned per-channel scale (initialised to ones) over the last axis of width `dim`."""

    def __init__(self, dim: int, eps: float):
        self.eps = eps
        self.weight = nnx.Param(jnp.ones((dim,), jnp.float32))

    def __call__(self, x: jax.Array) -> jax.Array:
        return rms_norm(x, self.weight[...], self.eps)

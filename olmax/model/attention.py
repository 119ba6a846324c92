"""OLMo 3 self-attention: QK-norm over whole q/k, RoPE, causal or sliding-window softmax attention.

Window semantics are HF's (`masking_utils.sliding_window_overlay`): with window W, query i sees keys
j with i - W < j <= i, i.e. W keys including itself. Interchangeable kernels compute it, one module each,
behind one dispatch (`attend`): the XLA path (`olmax.model.attention_xla`, the reference and the CPU
default), `jax.nn.dot_product_attention` (`olmax.model.attention_jax`, cuDNN's fused kernel on a GPU) and
splash attention (`olmax.model.attention_splash`, JAX's Pallas kernel, the TPU default). Every kernel
takes q (B, L, N, H) and k, v (B, S, K, H) with grouped KV heads, and optional `segment_ids` that
restrict attention to keys of the same document.

The projections' outputs carry remat names (`olmax.model.remat`), so a remat policy can keep them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from olmax.errors import OlmaxError
from olmax.model import attention_splash, sharding
from olmax.model.attention_jax import attend_jax
from olmax.model.attention_xla import UNROLL_CHUNKS, attend_blocks, attend_chunked, attend_xla
from olmax.model.model_config import ModelConfig
from olmax.model.norm import RMSNorm
from olmax.model.remat import tag
from olmax.model.rope import apply_rope


def truncated_normal(rngs: nnx.Rngs, shape: tuple[int, ...], std: float) -> jax.Array:
    """fp32 normal(0, std) truncated at +-3 std (OLMo-core's init)."""
    return jax.random.truncated_normal(rngs.params(), -3.0, 3.0, shape, jnp.float32) * std


@jax.custom_vjp
def linear(x_BxLxD: jax.Array, w_DxF: jax.Array) -> jax.Array:
    """x @ w in x's dtype, computed on the (B*L, D) view: XLA's CPU backend forms the weight gradient
    of a 2-D matmul in place but transposes a fused copy of every 3-D activation gradient first
    (measured: a SwiGLU backward takes half the time).

    The weight's gradient comes out in fp32 (the matmul accumulates in fp32 and is not rounded to the
    compute dtype): under FSDP each device's partial sum of it then crosses the devices in fp32, as
    OLMo-core reduces gradients (reduce_dtype fp32), while the weight itself is gathered in the compute
    dtype (XLA casts the shard before the all-gather)."""
    return _matmul(x_BxLxD, w_DxF)


def _matmul(x_BxLxD: jax.Array, w_DxF: jax.Array) -> jax.Array:
    out_NxF = x_BxLxD.reshape(-1, x_BxLxD.shape[-1]) @ w_DxF.astype(x_BxLxD.dtype)
    return out_NxF.reshape(*x_BxLxD.shape[:-1], w_DxF.shape[-1])


def _linear_fwd(x_BxLxD: jax.Array, w_DxF: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    return _matmul(x_BxLxD, w_DxF), (x_BxLxD, w_DxF)


def _linear_bwd(res: tuple[jax.Array, jax.Array], g_BxLxF: jax.Array) -> tuple[jax.Array, jax.Array]:
    x_BxLxD, w_DxF = res
    x_NxD = x_BxLxD.reshape(-1, x_BxLxD.shape[-1])
    g_NxF = g_BxLxF.reshape(-1, g_BxLxF.shape[-1])
    dx_NxD = jnp.einsum("nf,df->nd", g_NxF, w_DxF.astype(g_NxF.dtype))
    dw_DxF = jnp.einsum("nd,nf->df", x_NxD, g_NxF, preferred_element_type=jnp.float32)
    return dx_NxD.reshape(x_BxLxD.shape).astype(x_BxLxD.dtype), dw_DxF.astype(w_DxF.dtype)


linear.defvjp(_linear_fwd, _linear_bwd)


def resolve_impl(
    impl: str, dtype: jnp.dtype, seq_len: int, head_dim: int, platform: str | None = None
) -> str:
    """The kernel `impl` names; 'auto' picks by the platform the step is built for (`platform`, else the
    mesh's, `olmax.model.sharding`): splash on a TPU where the shape takes it (whole 128-wide tiles), cuDNN on
    a GPU for 16-bit compute, else the XLA path."""
    platform = platform or sharding.platform()
    if impl == "splash" and platform == "gpu":
        raise OlmaxError(
            "model.attention_impl=splash runs on a TPU (or a CPU, interpreted); on a GPU use auto or cudnn"
        )
    if impl != "auto":
        return impl
    if platform == "tpu" and attention_splash.supports(seq_len, head_dim):
        return "splash"
    return "cudnn" if platform == "gpu" and jnp.dtype(dtype).itemsize == 2 else "xla"


def attend(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    window: int | None,
    segment_ids: jax.Array | None,
    impl: str,
    chunk: int = 0,
) -> jax.Array:
    """Dispatch to one attention kernel by name. `chunk` is the kernel's tiling: for 'xla' the query chunk
    past which it runs in chunks (unrolled with causal skipping up to UNROLL_CHUNKS chunks, scanned beyond),
    for 'splash' the tile edge (0: the one measured best for the shape); 'jax' and 'cudnn' take none."""
    if impl == "xla":
        if 0 < chunk < q.shape[1]:
            if -(-q.shape[1] // chunk) <= UNROLL_CHUNKS:
                return attend_blocks(q, k, v, window, segment_ids, chunk)
            return attend_chunked(q, k, v, window, segment_ids, chunk)
        return attend_xla(q, k, v, window, segment_ids)
    if impl == "splash":
        return attention_splash.attend_splash(
            q, k, v, window, segment_ids, attention_splash.settings_for(q.shape[1], q.shape[-1], chunk)
        )
    if impl in ("jax", "cudnn"):
        return attend_jax(q, k, v, window, segment_ids, None if impl == "jax" else "cudnn")
    raise ValueError(f"unknown attention implementation {impl!r}; use auto, xla, splash, jax or cudnn")


class Attention(nnx.Module):
    """q/k/v projections, RMSNorm over the whole projected q and k, RoPE, attention, output projection."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        d, qd, kvd = cfg.d_model, cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
        self.q_proj = nnx.Param(truncated_normal(rngs, (d, qd), cfg.init_std))
        self.k_proj = nnx.Param(truncated_normal(rngs, (d, kvd), cfg.init_std))
        self.v_proj = nnx.Param(truncated_normal(rngs, (d, kvd), cfg.init_std))
        self.o_proj = nnx.Param(truncated_normal(rngs, (qd, d), cfg.init_std))
        self.q_norm = RMSNorm(qd, cfg.rms_eps)
        self.k_norm = RMSNorm(kvd, cfg.rms_eps)

    def __call__(
        self,
        x_BxLxD: jax.Array,
        cos_LxH: jax.Array,
        sin_LxH: jax.Array,
        window: int | None,
        segment_ids_BxL: jax.Array | None = None,
    ) -> jax.Array:
        cfg, dtype = self.cfg, x_BxLxD.dtype
        b, seq, _ = x_BxLxD.shape
        q_BxLxQ = self.q_norm(tag(linear(x_BxLxD, self.q_proj[...]), "q"))
        k_BxLxK = self.k_norm(tag(linear(x_BxLxD, self.k_proj[...]), "k"))
        v_BxLxK = tag(linear(x_BxLxD, self.v_proj[...]), "v")
        q_BxLxNxH = apply_rope(q_BxLxQ.reshape(b, seq, cfg.n_heads, cfg.head_dim), cos_LxH, sin_LxH)
        k_BxLxKxH = apply_rope(k_BxLxK.reshape(b, seq, cfg.n_kv_heads, cfg.head_dim), cos_LxH, sin_LxH)
        v_BxLxKxH = v_BxLxK.reshape(b, seq, cfg.n_kv_heads, cfg.head_dim)
        impl = resolve_impl(cfg.attention_impl, dtype, seq, cfg.head_dim)
        chunk = cfg.splash_block if impl == "splash" else cfg.attention_chunk
        out_BxLxNxH = attend(q_BxLxNxH, k_BxLxKxH, v_BxLxKxH, window, segment_ids_BxL, impl, chunk)
        return tag(linear(out_BxLxNxH.reshape(b, seq, -1), self.o_proj[...]), "o")

"""Splash attention: JAX's Pallas TPU kernel (`jax.experimental.pallas.ops.tpu.splash_attention`).

It computes what `attend_xla` computes — softmax(q k^T / sqrt(H)) v in fp32 accumulation under HF's
causal or sliding window (W keys, the query itself included), with grouped KV heads (query head h reads
KV head h // (N / K), as HF's repeat_kv lays them out) and optional document masking by segment ids —
without ever forming the (L, S) scores: the kernel walks (block_q, block_kv) tiles and skips every tile
the mask leaves empty, so a sliding layer costs O(L * W).

One traced function serves both targets: `jax.lax.platform_dependent` lowers the Mosaic kernel on a TPU
and the same kernel in Pallas' interpret mode anywhere else (slow; the CPU tests run it at small shapes).
The choice is made when the step is lowered, not when it is traced, so a step compiled ahead of time for
a TPU topology on a CPU host gets the real kernel.

Masks are static (built once per shape from the window, cached), so the kernel knows at compile time
which tiles are empty, full or partial. The kernel leaves q unscaled: q is multiplied by 1/sqrt(H) in
fp32 and cast back first, the one rounding this path adds over `attend_xla` (which scales the fp32
scores).

Under a mesh of several devices (`jax.set_mesh`, as the train step sets it) the kernel runs per device in
`shard_map` with the batch split over every mesh axis, which is how `olmax.train.mesh` lays out rows;
heads and positions stay whole on a device. Without a mesh it runs on the arrays as they are.

Residuals: the kernel names its output and log-sum-exp `RESIDUAL_NAME`, so a remat policy that saves
that name keeps them for the backward pass and the attention forward is not run twice.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu import splash_attention as splash
from jax.sharding import PartitionSpec

from olmax.errors import OlmaxError

RESIDUAL_NAME = (
    "context"  # the kernel's output and log-sum-exp, as a remat policy (olmax.model.remat) names them
)

# Tile edges tried in order when a shape does not divide the chosen one (the kernel needs whole tiles, and
# a KV tile a multiple of the TPU's 128 lanes).
BLOCK_CANDIDATES = (2048, 1024, 512, 256, 128)


@dataclass(frozen=True)
class SplashSettings:
    """One tiling of the kernel: square `block` tiles for the forward and backward passes, and whether the
    backward computes dq, dk and dv in one fused kernel (one pass over the tiles) or in two."""

    block: int = 1024
    fused_bwd: bool = True

    def block_sizes(self, q_len: int, kv_len: int) -> splash.BlockSizes:
        bq, bkv = _fit(self.block, q_len), _fit(self.block, kv_len)
        return splash.BlockSizes(
            block_q=bq,
            block_kv=bkv,
            block_kv_compute=bkv,
            block_q_dkv=bq,
            block_kv_dkv=bkv,
            block_kv_dkv_compute=bkv,
            block_q_dq=None if self.fused_bwd else bq,
            block_kv_dq=None if self.fused_bwd else bkv,
            use_fused_bwd_kernel=self.fused_bwd,
        )


def _fit(block: int, length: int) -> int:
    """The largest tile edge <= `block` that divides `length` (the whole length when it is shorter)."""
    for b in (block, *BLOCK_CANDIDATES):
        if b <= block and length % b == 0:
            return b
    raise OlmaxError(
        f"splash attention needs a sequence length divisible by 128 (got {length}); "
        "pad the sequence to a multiple of 128 or use model.attention_impl=xla"
    )


def settings_for(seq_len: int, head_dim: int, block: int = 0) -> SplashSettings:
    """The tiling for a shape: `block` when given (> 0), else the default (`SplashSettings()`), whose tile
    edge is then fitted to the shape."""
    del head_dim  # one measured default serves head_dim 128 and 256 (docs/tpu.md)
    return SplashSettings(block=block) if block > 0 else SplashSettings()


def supports(seq_len: int, head_dim: int) -> bool:
    """Whether the TPU kernel takes this shape: whole 128-wide tiles along the sequence and the head."""
    return seq_len % 128 == 0 and head_dim % 128 == 0


def _kernel(
    n_heads: int, q_len: int, kv_len: int, window: int | None, settings: SplashSettings, interpret: bool
) -> splash.splash_attention_kernel.SplashAttentionKernel:
    """The kernel for one shape and mask, made afresh in each trace: it holds its tile maps as arrays of
    that trace (JAX caches the numpy work behind them, `mask_info._process_mask`)."""
    shape = (q_len, kv_len)
    # queries are the last q_len of the keys (self-attention: q_len == kv_len, offset 0)
    offset = kv_len - q_len
    if window is None:
        one = splash.CausalMask(shape, offset=offset)
    else:  # keys j with i - W < j <= i: W - 1 to the left, none to the right
        one = splash.LocalMask(shape, window_size=(window - 1, 0), offset=offset)
    return splash.make_splash_mha(
        splash.MultiHeadMask([one] * n_heads),
        block_sizes=settings.block_sizes(q_len, kv_len),
        head_shards=1,
        q_seq_shards=1,
        residual_checkpoint_name=RESIDUAL_NAME,
        interpret=interpret,
    )


def _attend_local(
    q_BxNxLxH: jax.Array,
    k_BxKxSxH: jax.Array,
    v_BxKxSxH: jax.Array,
    segment_ids_BxL: jax.Array | None,
    window: int | None,
    settings: SplashSettings,
) -> jax.Array:
    """The kernel over this device's rows: (B, N, L, H) from the head-major q, k, v."""
    n_heads, q_len, kv_len = q_BxNxLxH.shape[1], q_BxNxLxH.shape[2], k_BxKxSxH.shape[2]

    def run(interpret: bool):
        kernel = _kernel(n_heads, q_len, kv_len, window, settings, interpret)

        def one_row(q, k, v, seg):
            return kernel(q, k, v, segment_ids=None if seg is None else splash.SegmentIds(q=seg, kv=seg))

        def batched(q, k, v, seg):
            return jax.vmap(one_row, in_axes=(0, 0, 0, None if seg is None else 0))(q, k, v, seg)

        return batched

    return jax.lax.platform_dependent(
        q_BxNxLxH,
        k_BxKxSxH,
        v_BxKxSxH,
        segment_ids_BxL,
        tpu=run(False),
        default=run(True),
    )


def attend_splash(
    q_BxLxNxH: jax.Array,
    k_BxSxKxH: jax.Array,
    v_BxSxKxH: jax.Array,
    window: int | None,
    segment_ids_BxS: jax.Array | None = None,
    settings: SplashSettings | None = None,
) -> jax.Array:
    """Self-attention through the splash kernel, in and out in `attend_xla`'s (B, L, N, H) layout."""
    settings = settings or SplashSettings()
    head_dim = q_BxLxNxH.shape[-1]
    if q_BxLxNxH.shape[1] != k_BxSxKxH.shape[1]:
        raise ValueError("attend_splash is self-attention: q and k must have the same length")
    scale = head_dim**-0.5
    q_BxNxLxH = (q_BxLxNxH.astype(jnp.float32) * scale).astype(q_BxLxNxH.dtype).transpose(0, 2, 1, 3)
    k_BxKxSxH = k_BxSxKxH.transpose(0, 2, 1, 3)
    v_BxKxSxH = v_BxSxKxH.transpose(0, 2, 1, 3)
    seg = None if segment_ids_BxS is None else segment_ids_BxS.astype(jnp.int32)
    local = functools.partial(_attend_local, window=window, settings=settings)
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or mesh.size == 1:
        out_BxNxLxH = local(q_BxNxLxH, k_BxKxSxH, v_BxKxSxH, seg)
    else:
        rows = PartitionSpec(tuple(mesh.axis_names))  # the batch over every mesh axis, the rest whole
        out_BxNxLxH = jax.shard_map(
            local,
            mesh=mesh,
            in_specs=(rows, rows, rows, None if seg is None else rows),
            out_specs=rows,
            check_vma=False,
        )(q_BxNxLxH, k_BxKxSxH, v_BxKxSxH, seg)
    return out_BxNxLxH.transpose(0, 2, 1, 3)

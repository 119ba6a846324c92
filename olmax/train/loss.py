"""The training loss: next-token CE over the real vocabulary plus OLMo's z-loss, fused with the LM head.

Labels are the inputs shifted left; the last position of each row has no label and weighs 0
(OLMo-core: labels[-1] = ignore). z-loss = multiplier * logsumexp(logits)^2 per predicted token.
Both come back as fp32 *sums* so microbatches add up before one division by the global token count.

`head_cross_entropy` never materialises the (B, L, V) logits: it scans over blocks of vocabulary
columns with an online logsumexp, and its custom VJP forms (softmax - onehot) block by block, writing
that block of dW and accumulating dh (N x D, small). The softmax block comes either from
recomputing the block's logits (3 + 1 head matmuls, no N x V memory: the accelerator default) or
from the forward's saved exp(logits - running max) blocks, rescaled by exp(max - lse) (3 matmuls
and one exp per logit, N x V fp32 kept: the CPU default up to 2 GiB, where memory is plentiful and
exp is dear). Every matmul keeps all N tokens, so each is large and efficient. With the real 100k
vocabulary the logits dominate memory traffic (docs/field-notes.md), so this is both the memory and the
time win; the arithmetic is the same as `cross_entropy` on full logits up to float summation order.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp

from olmax.model import sharding


def shifted_labels(
    input_ids_BxL: jax.Array, label_mask_BxL: jax.Array | None = None
) -> tuple[jax.Array, jax.Array]:
    """(labels, weights): inputs shifted left with a dummy last label, and weight 0 on it; with a label
    mask (False on a packed row's padding, OLMo-core's `label_mask`), a label weighs what its token's mask says."""
    b, seq = input_ids_BxL.shape
    labels_BxL = jnp.concatenate([input_ids_BxL[:, 1:], jnp.zeros((b, 1), input_ids_BxL.dtype)], axis=1)
    weights_BxL = jnp.broadcast_to((jnp.arange(seq) < seq - 1).astype(jnp.float32)[None, :], (b, seq))
    if label_mask_BxL is not None:
        shifted = jnp.concatenate([label_mask_BxL[:, 1:], jnp.zeros((b, 1), label_mask_BxL.dtype)], axis=1)
        weights_BxL = weights_BxL * shifted.astype(jnp.float32)
    return labels_BxL, weights_BxL


def cross_entropy(
    logits_BxLxV: jax.Array,
    input_ids_BxL: jax.Array,
    z_loss: float,
    vocab_size: int | None = None,
    label_mask_BxL: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(sum of CE, sum of z_loss * lse^2, predicted tokens) from full logits; columns >= vocab_size masked,
    labels whose `label_mask` is False weigh 0."""
    b, seq, v = logits_BxLxV.shape
    logits = logits_BxLxV.astype(jnp.float32)
    if vocab_size is not None and vocab_size < v:
        logits = jnp.where(jnp.arange(v) < vocab_size, logits, -jnp.inf)
    labels_BxL, weights_BxL = shifted_labels(input_ids_BxL, label_mask_BxL)
    lse_BxL = jax.nn.logsumexp(logits, axis=-1)
    label_logit_BxL = jnp.take_along_axis(logits, labels_BxL[..., None], axis=-1)[..., 0]
    ce = jnp.sum((lse_BxL - label_logit_BxL) * weights_BxL)
    z = z_loss * jnp.sum(jnp.square(lse_BxL) * weights_BxL)
    return ce, z, jnp.sum(weights_BxL)


def block_logits(
    h_NxD: jax.Array, w_DxV: jax.Array, first: jax.Array | int, chunk: int, vocab: int
) -> jax.Array:
    """fp32 logits of the `chunk` columns from `first` (read in place); padding columns read -inf."""
    w_DxC = jax.lax.dynamic_slice_in_dim(w_DxV, first, chunk, axis=1)
    logits = jnp.einsum("nd,dc->nc", h_NxD, w_DxC.astype(h_NxD.dtype), preferred_element_type=jnp.float32)
    if isinstance(first, int) and first + chunk <= vocab:
        return logits  # a block known (statically) to hold no padding column
    cols = first + jnp.arange(chunk)
    return jnp.where(cols[None, :] < vocab, logits, -jnp.inf)


def label_logit(logits_NxC: jax.Array, labels_N: jax.Array, first: jax.Array | int) -> jax.Array:
    """Each row's label logit if the label falls in this block, else 0."""
    chunk = logits_NxC.shape[1]
    local = labels_N - first
    inside = (local >= 0) & (local < chunk)
    picked = jnp.take_along_axis(logits_NxC, jnp.clip(local, 0, chunk - 1)[:, None], axis=-1)[:, 0]
    return jnp.where(inside, picked, 0.0)


def _forward(h, w, labels, weights, vocab, chunk, store):
    """Online logsumexp over column blocks: ((sum CE, sum lse^2) weighted, lse per token, saved blocks).

    With `store` the blocks run unrolled (static slices, no scan buffers to zero-fill) and each one's
    exp(logits - running max) and that running max come back, so the backward pass rescales them into
    probabilities instead of recomputing the logits matmul and its exp.
    """
    n = h.shape[0]

    def block(carry, first):
        run_max, run_sum, target_logit = carry
        logits = block_logits(h, w, first, chunk, vocab)
        new_max = jnp.maximum(run_max, jnp.max(logits, axis=-1))
        e_NxC = jnp.exp(logits - new_max[:, None])
        run_sum = run_sum * jnp.exp(run_max - new_max) + jnp.sum(e_NxC, axis=-1)
        return (new_max, run_sum, target_logit + label_logit(logits, labels, first)), (e_NxC, new_max)

    carry = (
        jnp.full((n,), jnp.finfo(jnp.float32).min, jnp.float32),
        jnp.zeros((n,), jnp.float32),
        jnp.zeros((n,), jnp.float32),
    )
    if store:
        saved = []
        for first in range(0, w.shape[1], chunk):
            carry, kept = block(carry, first)
            saved.append(kept)
    else:
        carry, _ = jax.lax.scan(lambda c, f: (block(c, f)[0], None), carry, jnp.arange(0, w.shape[1], chunk))
        saved = None
    run_max, run_sum, target_logit = carry
    lse = run_max + jnp.log(run_sum)
    return (jnp.sum((lse - target_logit) * weights), jnp.sum(jnp.square(lse) * weights)), lse, saved


def _whole(w: jax.Array, dtype: jnp.dtype) -> jax.Array:
    """The head in the compute dtype, whole on every device: under FSDP one all-gather of the cast shards
    before the block loop, which then slices it in place (a loop slicing the sharded fp32 weight would
    gather it in fp32 for every pass over the blocks)."""
    return sharding.replicate(w.astype(dtype))


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6))
def _fused(h, w, labels, weights, vocab, chunk, store):
    return _forward(h, _whole(w, h.dtype), labels, weights, vocab, chunk, False)[0]


def _fused_fwd(h, w, labels, weights, vocab, chunk, store):
    w_whole = _whole(w, h.dtype)
    out, lse, saved = _forward(h, w_whole, labels, weights, vocab, chunk, store)
    # the gathered head is kept for the backward pass (no second gather); `w`'s dtype rides along
    return out, (h, w_whole, jnp.zeros((), w.dtype), labels, weights, lse, saved)


def _fused_bwd(vocab, chunk, store, res, g):
    """dh in the compute dtype; dW in fp32, each block's summed over this device's tokens in fp32 (the
    gradient that then crosses the devices, reduce-scattered in fp32 as OLMo-core reduces)."""
    h, w, w_dtype, labels, weights, lse, saved = res
    g_ce, g_zz = g
    # d/dlogits of w*(lse - label_logit) and of w*lse^2: w*p - w*onehot and 2*w*lse*p
    coef_N = (g_ce + 2.0 * g_zz * lse) * weights

    def block(first, p_NxC):
        """(dh contribution, dW block) of the `chunk` columns from `first`, given their softmax."""
        onehot = (labels - first)[:, None] == jnp.arange(chunk)[None, :]
        dlogits = (p_NxC * coef_N[:, None] - jnp.where(onehot, (g_ce * weights)[:, None], 0.0)).astype(
            h.dtype
        )
        w_DxC = jax.lax.dynamic_slice_in_dim(w, first, chunk, axis=1).astype(h.dtype)
        dh = jnp.einsum("nc,dc->nd", dlogits, w_DxC, preferred_element_type=jnp.float32)
        dw_DxC = jnp.einsum("nd,nc->dc", h, dlogits, preferred_element_type=jnp.float32)
        return dh, sharding.on_shards(dw_DxC, 0)  # under FSDP: reduce-scattered onto the head's rows here

    if store:  # p = exp(logits - m) * exp(m - lse): the forward's exp, rescaled
        dh, dw_blocks = jnp.zeros(h.shape, jnp.float32), []
        for k, (e_NxC, m_N) in enumerate(saved):
            dh_c, dw_c = block(k * chunk, e_NxC * jnp.exp(m_N - lse)[:, None])
            dh = dh + dh_c
            dw_blocks.append(dw_c)
        dw = jnp.concatenate(dw_blocks, axis=1)
    else:  # recompute each block's logits; padding columns give exp(-inf) = 0

        def body(carry, first):
            dh, dw = carry
            dh_c, dw_c = block(first, jnp.exp(block_logits(h, w, first, chunk, vocab) - lse[:, None]))
            return (dh + dh_c, jax.lax.dynamic_update_slice_in_dim(dw, dw_c, first, axis=1)), None

        init = (jnp.zeros(h.shape, jnp.float32), sharding.on_shards(jnp.zeros(w.shape, jnp.float32), 0))
        (dh, dw), _ = jax.lax.scan(body, init, jnp.arange(0, w.shape[1], chunk))
    return dh.astype(h.dtype), dw.astype(w_dtype.dtype), None, None


_fused.defvjp(_fused_fwd, _fused_bwd)


STORE_LIMIT_BYTES = 2 << 30


def default_store(n_tokens: int, columns: int) -> bool:
    """Keep the forward's exp blocks (N x V fp32) for the backward pass on CPU, where host memory is
    plentiful and recomputing logits and exp is dear, up to 2 GiB per microbatch; recompute otherwise."""
    return sharding.platform() == "cpu" and 4 * n_tokens * columns <= STORE_LIMIT_BYTES


def pick_chunk(size: int, want: int) -> int:
    """The largest divisor of `size` that is <= want (>= 1)."""
    for c in range(min(want, size), 0, -1):
        if size % c == 0:
            return c
    return 1


@dataclass(frozen=True)
class HeadLoss:
    """The head loss's settings: the z-loss weight, the real vocabulary (columns past it are masked), the
    vocabulary columns per block (rounded down to a divisor of V) and whether the forward's exp blocks are
    kept for the backward (`store`; default: on CPU, up to 2 GiB of B * L * V fp32)."""

    z_loss: float
    vocab_size: int
    chunk: int
    store: bool | None = None


def head_cross_entropy(
    h_BxLxD: jax.Array,
    w_DxV: jax.Array,
    input_ids_BxL: jax.Array,
    loss: HeadLoss,
    label_mask_BxL: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """`cross_entropy(h @ w, ...)` without the full logits: sums of CE and z-loss, and the token count.

    `w_DxV` may be the padded head (columns >= `loss.vocab_size` are masked); with `loss.store` the backward
    skips recomputing the logits.
    """
    z_loss, vocab_size, chunk, store = loss.z_loss, loss.vocab_size, loss.chunk, loss.store
    b, seq, d = h_BxLxD.shape
    labels_BxL, weights_BxL = shifted_labels(input_ids_BxL, label_mask_BxL)
    ce, zz = _fused(
        h_BxLxD.reshape(b * seq, d),
        w_DxV,
        labels_BxL.reshape(-1),
        weights_BxL.reshape(-1),
        vocab_size,
        pick_chunk(w_DxV.shape[1], chunk),
        default_store(b * seq, w_DxV.shape[1]) if store is None else store,
    )
    return ce, z_loss * zz, jnp.sum(weights_BxL)

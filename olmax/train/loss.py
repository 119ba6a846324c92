"""The training loss: next-token CE over the real vocabulary plus OLMo's z-loss, fused with the LM head.

Labels are the inputs shifted left; the last position of each row has no label and weighs 0
(OLMo-core: labels[-1] = ignore). z-loss = multiplier * logsumexp(logits)^2 per predicted token.
Both come back as fp32 *sums* so microbatches add up before one division by the global token count.

`head_cross_entropy` never materialises the (B, L, V) logits: it scans over blocks of vocabulary
columns with an online logsumexp, and its custom VJP recomputes each block's logits to form
(softmax - onehot), writing that block of dW once and accumulating dh (N x D, small). Every matmul
keeps all N tokens, so each is large and efficient. With the real 100k vocabulary the logits dominate
memory traffic (FIELD-NOTES.md), so this is both the memory and the time win; the arithmetic is the
same as `cross_entropy` on full logits up to float summation order.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp


def shifted_labels(input_ids_BxL: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(labels, weights): inputs shifted left with a dummy last label, and weight 0 on it."""
    b, seq = input_ids_BxL.shape
    labels_BxL = jnp.concatenate([input_ids_BxL[:, 1:], jnp.zeros((b, 1), input_ids_BxL.dtype)], axis=1)
    weights_BxL = jnp.broadcast_to((jnp.arange(seq) < seq - 1).astype(jnp.float32)[None, :], (b, seq))
    return labels_BxL, weights_BxL


def cross_entropy(logits_BxLxV: jax.Array, input_ids_BxL: jax.Array, z_loss: float, vocab_size: int | None = None
                  ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(sum of CE, sum of z_loss * lse^2, predicted tokens) from full logits; columns >= vocab_size masked."""
    b, seq, v = logits_BxLxV.shape
    logits = logits_BxLxV.astype(jnp.float32)
    if vocab_size is not None and vocab_size < v:
        logits = jnp.where(jnp.arange(v) < vocab_size, logits, -jnp.inf)
    labels_BxL, weights_BxL = shifted_labels(input_ids_BxL)
    lse_BxL = jax.nn.logsumexp(logits, axis=-1)
    label_logit_BxL = jnp.take_along_axis(logits, labels_BxL[..., None], axis=-1)[..., 0]
    ce = jnp.sum((lse_BxL - label_logit_BxL) * weights_BxL)
    z = z_loss * jnp.sum(jnp.square(lse_BxL) * weights_BxL)
    return ce, z, jnp.asarray(b * (seq - 1), jnp.float32)


def _column_chunks(w_DxV: jax.Array, chunk: int) -> jax.Array:
    """(D, V) -> (V / chunk, D, chunk): scan over vocabulary column blocks."""
    d, v = w_DxV.shape
    return w_DxV.reshape(d, v // chunk, chunk).swapaxes(0, 1)


def _block_logits(h_NxD: jax.Array, w_DxC: jax.Array, first: jax.Array, vocab: int) -> jax.Array:
    """fp32 logits of one column block; columns at or past `vocab` (padding) read -inf."""
    logits = jnp.einsum("nd,dc->nc", h_NxD, w_DxC.astype(h_NxD.dtype), preferred_element_type=jnp.float32)
    cols = first + jnp.arange(w_DxC.shape[1])
    return jnp.where(cols[None, :] < vocab, logits, -jnp.inf)


def _forward(h, w, labels, weights, vocab, chunk):
    """Online logsumexp over column blocks: (sum CE, sum lse^2) weighted, and lse per token."""
    n = h.shape[0]

    def body(carry, xs):
        run_max, run_sum, label_logit = carry
        w_c, first = xs
        logits = _block_logits(h, w_c, first, vocab)
        new_max = jnp.maximum(run_max, jnp.max(logits, axis=-1))
        run_sum = run_sum * jnp.exp(run_max - new_max) + jnp.sum(jnp.exp(logits - new_max[:, None]), axis=-1)
        local = labels - first
        inside = (local >= 0) & (local < w_c.shape[1])
        picked = jnp.take_along_axis(logits, jnp.clip(local, 0, w_c.shape[1] - 1)[:, None], axis=-1)[:, 0]
        return (new_max, run_sum, label_logit + jnp.where(inside, picked, 0.0)), None

    lowest = jnp.full((n,), jnp.finfo(jnp.float32).min, jnp.float32)
    zeros = jnp.zeros((n,), jnp.float32)
    firsts = jnp.arange(0, w.shape[1], chunk)
    (run_max, run_sum, label_logit), _ = jax.lax.scan(body, (lowest, zeros, zeros), (_column_chunks(w, chunk), firsts))
    lse = run_max + jnp.log(run_sum)
    return (jnp.sum((lse - label_logit) * weights), jnp.sum(jnp.square(lse) * weights)), lse


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def _fused(h, w, labels, weights, vocab, chunk):
    return _forward(h, w, labels, weights, vocab, chunk)[0]


def _fused_fwd(h, w, labels, weights, vocab, chunk):
    out, lse = _forward(h, w, labels, weights, vocab, chunk)
    return out, (h, w, labels, weights, lse)


def _fused_bwd(vocab, chunk, res, g):
    h, w, labels, weights, lse = res
    g_ce, g_zz = g
    # d/dlogits of w*(lse - label_logit) and of w*lse^2: w*p - w*onehot and 2*w*lse*p
    coef_N = (g_ce + 2.0 * g_zz * lse) * weights

    def body(dh, xs):
        w_c, first = xs
        logits = _block_logits(h, w_c, first, vocab)
        p = jnp.exp(logits - lse[:, None])  # softmax block; padding columns exp(-inf) = 0
        onehot = (labels - first)[:, None] == jnp.arange(w_c.shape[1])[None, :]
        dlogits = (p * coef_N[:, None] - jnp.where(onehot, (g_ce * weights)[:, None], 0.0)).astype(h.dtype)
        dh = dh + jnp.einsum("nc,dc->nd", dlogits, w_c.astype(h.dtype), preferred_element_type=jnp.float32)
        dw_c = jnp.einsum("nd,nc->dc", h, dlogits, preferred_element_type=jnp.float32)
        return dh, dw_c

    firsts = jnp.arange(0, w.shape[1], chunk)
    dh, dw_KxDxC = jax.lax.scan(body, jnp.zeros(h.shape, jnp.float32), (_column_chunks(w, chunk), firsts))
    dw = dw_KxDxC.swapaxes(0, 1).reshape(w.shape)
    return dh.astype(h.dtype), dw.astype(w.dtype), None, None


_fused.defvjp(_fused_fwd, _fused_bwd)


def pick_chunk(size: int, want: int) -> int:
    """The largest divisor of `size` that is <= want (>= 1)."""
    for c in range(min(want, size), 0, -1):
        if size % c == 0:
            return c
    return 1


def head_cross_entropy(h_BxLxD: jax.Array, w_DxV: jax.Array, input_ids_BxL: jax.Array, z_loss: float,
                       vocab_size: int, chunk: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """`cross_entropy(h @ w, ...)` without the full logits: sums of CE and z-loss, and the token count.

    `w_DxV` may be the padded head (columns >= vocab_size are masked); `chunk` is the number of
    vocabulary columns per block (rounded down to a divisor of V).
    """
    b, seq, d = h_BxLxD.shape
    labels_BxL, weights_BxL = shifted_labels(input_ids_BxL)
    ce, zz = _fused(h_BxLxD.reshape(b * seq, d), w_DxV, labels_BxL.reshape(-1), weights_BxL.reshape(-1),
                    vocab_size, pick_chunk(w_DxV.shape[1], chunk))
    return ce, z_loss * zz, jnp.asarray(b * (seq - 1), jnp.float32)

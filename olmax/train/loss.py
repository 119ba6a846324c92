"""The training loss: next-token CE over the real vocabulary plus OLMo's z-loss, fused with the LM head.

Labels are the inputs shifted left; the last position of each row has no label and weighs 0
(OLMo-core: labels[-1] = ignore). z-loss = multiplier * logsumexp(logits)^2 per predicted token.
Both come back as fp32 *sums* so microbatches add up before one division by the global token count.

`head_cross_entropy` never materialises the (B, L, V) logits: it scans over chunks of the sequence,
computing each chunk's logits, logsumexp and label logit, and its custom VJP recomputes a chunk's
logits to form (softmax - onehot) and accumulate dW and dx. With the real 100k vocabulary the logits
dominate memory traffic (FIELD-NOTES.md), so this is both the memory and the CPU-time win; the
arithmetic is the same as `cross_entropy` on full logits up to float summation order.
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


def _chunks(a: jax.Array, chunk: int) -> jax.Array:
    """(B, L, ...) -> (L / chunk, B, chunk, ...): scan over sequence chunks, batch (sharded) untouched."""
    b, seq = a.shape[:2]
    return a.reshape(b, seq // chunk, chunk, *a.shape[2:]).swapaxes(0, 1)


def _logits(h_BxCxD: jax.Array, w_DxV: jax.Array, vocab: int) -> jax.Array:
    logits = jnp.einsum("bcd,dv->bcv", h_BxCxD, w_DxV.astype(h_BxCxD.dtype), preferred_element_type=jnp.float32)
    v = logits.shape[-1]
    return logits if vocab >= v else jnp.where(jnp.arange(v) < vocab, logits, -jnp.inf)


def _forward(h, w, labels, weights, vocab, chunk, z_mult):
    def body(_, xs):
        hc, lc, wc = xs
        logits = _logits(hc, w, vocab)
        lse = jax.nn.logsumexp(logits, axis=-1)
        label_logit = jnp.take_along_axis(logits, lc[..., None], axis=-1)[..., 0]
        return None, (lse, jnp.sum((lse - label_logit) * wc), jnp.sum(jnp.square(lse) * wc))

    _, (lse, ce, zz) = jax.lax.scan(body, None, (_chunks(h, chunk), _chunks(labels, chunk), _chunks(weights, chunk)))
    return (jnp.sum(ce), z_mult * jnp.sum(zz)), lse


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6))
def _fused(h, w, labels, weights, vocab, chunk, z_mult):
    return _forward(h, w, labels, weights, vocab, chunk, z_mult)[0]


def _fused_fwd(h, w, labels, weights, vocab, chunk, z_mult):
    out, lse = _forward(h, w, labels, weights, vocab, chunk, z_mult)
    return out, (h, w, labels, weights, lse)


def _fused_bwd(vocab, chunk, z_mult, res, g):
    h, w, labels, weights, lse = res
    g_ce, g_z = g

    def body(dw, xs):
        hc, lc, wc, lsec = xs
        logits = _logits(hc, w, vocab)
        p = jnp.exp(logits - lsec[..., None])  # softmax; masked columns give exp(-inf) = 0
        # d/dlogits of w*(lse - label_logit) + z*w*lse^2 = w*(1 + 2z*lse)*p - w*onehot
        coef = (g_ce + g_z * z_mult * 2.0 * lsec) * wc
        dlogits = p * coef[..., None] - jax.nn.one_hot(lc, p.shape[-1], dtype=p.dtype) * (g_ce * wc)[..., None]
        dhc = jnp.einsum("bcv,dv->bcd", dlogits.astype(hc.dtype), w.astype(hc.dtype),
                         preferred_element_type=jnp.float32).astype(hc.dtype)
        dw = dw + jnp.einsum("bcd,bcv->dv", hc, dlogits.astype(hc.dtype), preferred_element_type=jnp.float32)
        return dw, dhc

    xs = (_chunks(h, chunk), _chunks(labels, chunk), _chunks(weights, chunk), lse)
    dw, dh = jax.lax.scan(body, jnp.zeros(w.shape, jnp.float32), xs)
    return dh.swapaxes(0, 1).reshape(h.shape), dw.astype(w.dtype), None, None


_fused.defvjp(_fused_fwd, _fused_bwd)


def pick_chunk(seq_len: int, want: int) -> int:
    """The largest divisor of seq_len that is <= want (>= 1)."""
    for c in range(min(want, seq_len), 0, -1):
        if seq_len % c == 0:
            return c
    return 1


def head_cross_entropy(h_BxLxD: jax.Array, w_DxV: jax.Array, input_ids_BxL: jax.Array, z_loss: float,
                       vocab_size: int, chunk: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """`cross_entropy(h @ w, ...)` without the full logits: sums of CE and z-loss, and the token count."""
    b, seq, _ = h_BxLxD.shape
    labels_BxL, weights_BxL = shifted_labels(input_ids_BxL)
    ce, z = _fused(h_BxLxD, w_DxV, labels_BxL, weights_BxL, vocab_size, pick_chunk(seq, chunk), z_loss)
    return ce, z, jnp.asarray(b * (seq - 1), jnp.float32)

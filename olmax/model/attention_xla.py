"""The XLA attention kernels: softmax attention written as einsums under an explicit boolean mask.

`attend_xla` forms the whole (L, S) score matrix; `attend_blocks` unrolls it over query chunks that read
only the keys they can see (the causal or window triangle above the diagonal is never computed);
`attend_chunked` scans it over query chunks for long sequences. All three share a hand-written VJP
(`_grouped_attend`) that contracts with the (L, S) matrices in place, and all give the same result.
Window semantics are HF's (W keys, the query itself included); grouped KV heads read as HF's repeat_kv
lays them out; optional `segment_ids` restrict attention to keys of the same document. This is the
reference path every other kernel is tested against, and the CPU default.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def attention_mask(
    q_len: int, k_len: int, window: int | None, segment_ids_BxL: jax.Array | None = None
) -> jax.Array:
    """Boolean mask (B or 1, 1, q_len, k_len): True where a query may attend to a key."""
    q_idx = jnp.arange(q_len)[:, None] + (k_len - q_len)
    k_idx = jnp.arange(k_len)[None, :]
    mask_QxK = k_idx <= q_idx
    if window is not None:
        mask_QxK = mask_QxK & (k_idx > q_idx - window)
    mask = mask_QxK[None, None]
    if segment_ids_BxL is not None:
        same_doc = segment_ids_BxL[:, -q_len:, None] == segment_ids_BxL[:, None, :]
        mask = mask & same_doc[:, None]
    return mask


def _scores(q_BxLxKxGxH: jax.Array, k_BxSxKxH: jax.Array) -> jax.Array:
    """Scaled fp32 scores (B, K, G, L, S). Operands are laid out [batch, free, contracted] x
    [batch, contracted, free] first, so no (L, S)-sized matrix is ever transposed (on CPU those
    transposes cost more than the matmuls)."""
    head_dim = q_BxLxKxGxH.shape[-1]
    q_BxKxGxLxH = q_BxLxKxGxH.transpose(0, 2, 3, 1, 4)
    k_BxKxHxS = k_BxSxKxH.transpose(0, 2, 3, 1)
    return jnp.einsum("bkglh,bkhs->bkgls", q_BxKxGxLxH, k_BxKxHxS, preferred_element_type=jnp.float32) * (
        head_dim**-0.5
    )


def _attend_fwd(q_BxLxKxGxH, k_BxSxKxH, v_BxSxKxH, mask_Bx1xLxS):
    """(output B x L x K x G x H, unnormalised fp32 probabilities exp(s - max) B x K x G x L x S, and the
    reciprocal of their row sums B x K x G x L x 1). The output is normalised after the PV matmul, on the
    (L, H) result rather than the (L, S) probabilities: one fewer pass over the largest tensor."""
    scores = jnp.where(mask_Bx1xLxS[:, :, None], _scores(q_BxLxKxGxH, k_BxSxKxH), jnp.finfo(jnp.float32).min)
    exp_BxKxGxLxS = jnp.exp(scores - jnp.max(scores, axis=-1, keepdims=True))
    inv_sum_BxKxGxLx1 = 1.0 / jnp.sum(exp_BxKxGxLxS, axis=-1, keepdims=True)
    v_BxKxSxH = v_BxSxKxH.transpose(0, 2, 1, 3)
    out = (
        jnp.einsum(
            "bkgls,bksh->bkglh",
            exp_BxKxGxLxS.astype(v_BxSxKxH.dtype),
            v_BxKxSxH,
            preferred_element_type=jnp.float32,
        )
        * inv_sum_BxKxGxLx1
    )
    return out.transpose(0, 3, 1, 2, 4).astype(q_BxLxKxGxH.dtype), exp_BxKxGxLxS, inv_sum_BxKxGxLx1


@jax.custom_vjp
def _grouped_attend(q_BxLxKxGxH, k_BxSxKxH, v_BxSxKxH, mask_Bx1xLxS):
    return _attend_fwd(q_BxLxKxGxH, k_BxSxKxH, v_BxSxKxH, mask_Bx1xLxS)[0]


def _grouped_attend_fwd(q, k, v, mask):
    out, exp, inv_sum = _attend_fwd(q, k, v, mask)
    return out, (q, k, v, mask, exp, inv_sum, out)


def _grouped_attend_bwd(res, d_out_BxLxKxGxH):
    """Softmax attention's gradients written out (as autodiff would derive them) so that every
    contraction with the (L, S) matrices reads them in place: dK and dV are formed transposed.
    With P = E / l (E the saved exponentials, 1/l per row): dV = E^T (dO / l) and
    dS = P * (dP - rowsum(dO * O)) = E * ((dO / l) V^T - rowsum(dO * O) / l), so P is never formed."""
    q, k, v, mask, exp, inv_sum, out = res
    f32 = jnp.float32
    scale = q.shape[-1] ** -0.5
    d_out = d_out_BxLxKxGxH.astype(f32).transpose(0, 2, 3, 1, 4)  # B K G L H
    d_out_l = d_out * inv_sum
    d_probs_l = jnp.einsum("bkglh,bkhs->bkgls", d_out_l, v.astype(f32).transpose(0, 2, 3, 1))
    row_dot_l = jnp.sum(d_out_l * out.astype(f32).transpose(0, 2, 3, 1, 4), axis=-1, keepdims=True)
    # masked scores were replaced by a constant: no gradient reaches them (even in a fully masked row)
    d_scores = jnp.where(mask[:, :, None], exp * (d_probs_l - row_dot_l), 0.0)
    dq = jnp.einsum("bkgls,bksh->bkglh", d_scores, k.astype(f32).transpose(0, 2, 1, 3)) * scale
    dk_BxKxHxS = jnp.einsum("bkhgl,bkgls->bkhs", q.astype(f32).transpose(0, 2, 4, 3, 1), d_scores) * scale
    dv_BxKxHxS = jnp.einsum("bkhgl,bkgls->bkhs", d_out_l.transpose(0, 1, 4, 2, 3), exp)
    return (
        dq.transpose(0, 3, 1, 2, 4).astype(q.dtype),
        dk_BxKxHxS.transpose(0, 3, 1, 2).astype(k.dtype),
        dv_BxKxHxS.transpose(0, 3, 1, 2).astype(v.dtype),
        None,
    )


_grouped_attend.defvjp(_grouped_attend_fwd, _grouped_attend_bwd)


def _masked_softmax_attend(
    q_BxLxNxH: jax.Array, k_BxSxKxH: jax.Array, v_BxSxKxH: jax.Array, mask_Bx1xLxS: jax.Array
) -> jax.Array:
    """Softmax attention under an explicit boolean mask, grouped KV heads, scores and softmax in fp32."""
    b, q_len, n_heads, head_dim = q_BxLxNxH.shape
    n_kv = k_BxSxKxH.shape[2]
    # query head h reads KV head h // group, as HF's repeat_kv lays them out
    q_BxLxKxGxH = q_BxLxNxH.reshape(b, q_len, n_kv, n_heads // n_kv, head_dim)
    out_BxLxKxGxH = _grouped_attend(q_BxLxKxGxH, k_BxSxKxH, v_BxSxKxH, mask_Bx1xLxS)
    return out_BxLxKxGxH.reshape(b, q_len, n_heads, head_dim)


def attend_xla(
    q_BxLxNxH: jax.Array,
    k_BxSxKxH: jax.Array,
    v_BxSxKxH: jax.Array,
    window: int | None,
    segment_ids_BxS: jax.Array | None = None,
) -> jax.Array:
    """Plain softmax attention over the whole (L, S) score matrix with an explicit mask."""
    mask = attention_mask(q_BxLxNxH.shape[1], k_BxSxKxH.shape[1], window, segment_ids_BxS)
    return _masked_softmax_attend(q_BxLxNxH, k_BxSxKxH, v_BxSxKxH, mask)


UNROLL_CHUNKS = 16  # at most this many query chunks run unrolled, each over only the keys it can see
SAVE_PROBS_BYTES = 256 << 20  # unrolled chunks keep their probabilities for the backward up to this


def attend_blocks(
    q_BxLxNxH: jax.Array,
    k_BxLxKxH: jax.Array,
    v_BxLxKxH: jax.Array,
    window: int | None,
    segment_ids_BxL: jax.Array | None = None,
    chunk: int = 256,
) -> jax.Array:
    """Self-attention over query chunks unrolled with static key ranges; same result as `attend_xla`.

    Chunk [a, b) of queries reads only keys [max(0, a - W + 1), b): the causal (and window) triangle
    above the diagonal is never computed, so a full layer does about half the work of `attend_xla`.
    The chunks' probabilities are kept for the backward pass while they total at most
    SAVE_PROBS_BYTES per layer; past that each chunk is rematerialised (`jax.checkpoint`).
    """
    b, seq, n_heads, _ = q_BxLxNxH.shape
    starts = list(range(0, seq, chunk))
    spans = [(a, min(a + chunk, seq), 0 if window is None else max(0, a - window + 1)) for a in starts]
    saved_bytes = sum((hi - a) * (hi - lo) for a, hi, lo in spans) * b * n_heads * 4
    attend_one = (
        _masked_softmax_attend if saved_bytes <= SAVE_PROBS_BYTES else jax.checkpoint(_masked_softmax_attend)
    )
    outs = []
    for a, hi, lo in spans:
        # the chunk's queries are the last hi - a of its keys [lo, hi): attention_mask's own layout
        seg = None if segment_ids_BxL is None else segment_ids_BxL[:, lo:hi]
        mask = attention_mask(hi - a, hi - lo, window, seg)
        outs.append(attend_one(q_BxLxNxH[:, a:hi], k_BxLxKxH[:, lo:hi], v_BxLxKxH[:, lo:hi], mask))
    return jnp.concatenate(outs, axis=1)


def attend_chunked(
    q_BxLxNxH: jax.Array,
    k_BxLxKxH: jax.Array,
    v_BxLxKxH: jax.Array,
    window: int | None,
    segment_ids_BxL: jax.Array | None = None,
    chunk: int = 1024,
) -> jax.Array:
    """Self-attention scanned over query chunks of `chunk` tokens; same result as `attend_xla`.

    A chunk of queries [cC, cC + C) reads only the keys its window can reach, [cC - W, cC + C), so
    sliding layers cost O(L * (C + W)) instead of O(L^2), and scores live one chunk at a time. Each
    chunk is rematerialised in the backward pass, so training memory stays O(C * span) too.
    """
    b, seq, n_heads, head_dim = q_BxLxNxH.shape
    n_chunks = -(-seq // chunk)
    pad = n_chunks * chunk - seq
    left = window if window is not None and window < seq else 0  # keys before a chunk it may still see
    span = chunk + left if left else n_chunks * chunk

    def pad_seq(x: jax.Array, before: int, after: int, value=0) -> jax.Array:
        widths = [(0, 0)] * x.ndim
        widths[1] = (before, after)
        return jnp.pad(x, widths, constant_values=value)

    q_NxBxCxNxH = pad_seq(q_BxLxNxH, 0, pad).reshape(b, n_chunks, chunk, n_heads, head_dim).swapaxes(0, 1)
    k_pad, v_pad = pad_seq(k_BxLxKxH, left, pad), pad_seq(v_BxLxKxH, left, pad)
    seg = jnp.zeros((b, seq), jnp.int32) if segment_ids_BxL is None else segment_ids_BxL
    seg_q_NxBxC = pad_seq(seg, 0, pad).reshape(b, n_chunks, chunk).swapaxes(0, 1)
    seg_k = pad_seq(seg, left, pad)

    @jax.checkpoint
    def one_chunk(c: jax.Array, q_BxCxNxH: jax.Array, seg_q_BxC: jax.Array) -> jax.Array:
        # padded key p sits at absolute position p - left; full layers read every key from 0
        k_start = c * chunk if left else 0
        k_c = jax.lax.dynamic_slice_in_dim(k_pad, k_start, span, axis=1)
        v_c = jax.lax.dynamic_slice_in_dim(v_pad, k_start, span, axis=1)
        seg_k_c = jax.lax.dynamic_slice_in_dim(seg_k, k_start, span, axis=1)
        q_pos = c * chunk + jnp.arange(chunk)[:, None]
        k_pos = k_start - left + jnp.arange(span)[None, :]
        allowed = (k_pos <= q_pos) & (k_pos >= 0)
        if window is not None:
            allowed = allowed & (k_pos > q_pos - window)
        mask = allowed[None, None] & (seg_q_BxC[:, :, None] == seg_k_c[:, None, :])[:, None]
        return _masked_softmax_attend(q_BxCxNxH, k_c, v_c, mask)

    def body(carry: None, xs: tuple[jax.Array, jax.Array, jax.Array]) -> tuple[None, jax.Array]:
        return None, one_chunk(*xs)

    _, out_NxBxCxNxH = jax.lax.scan(body, None, (jnp.arange(n_chunks), q_NxBxCxNxH, seg_q_NxBxC))
    out = out_NxBxCxNxH.swapaxes(0, 1).reshape(b, n_chunks * chunk, n_heads, head_dim)
    return out[:, :seq]

"""The LM head read in vocabulary blocks for scoring: per-token NLL, greedy match and log-probability
moments, without the (N, V) logits.

Both functions take the final hidden states `h_NxD` (N tokens, the compute dtype) and the padded head
`w_DxV` (columns >= `vocab` are padding, read as -inf), and scan over blocks of `chunk` columns as the
trainer's fused head/CE does (`olmax.train.loss`), keeping per token only running reductions:

- `token_scores`: the online log-sum-exp (running max, rescaled sum of exponentials), the target's
  logit and the running argmax (its first index on ties, as `jnp.argmax` over the whole row);
- `token_moments`: the same log-sum-exp, plus the softmax-weighted mean and sum of squared deviations of
  the logits, merged block by block (Chan et al.'s pairwise update, each side's weights rescaled to the
  new running max), which give the mean and standard deviation of log p under the model's own
  distribution (what Min-K%++ standardises a target's log p by).

Memory: one (N, chunk) fp32 block at a time, where full logits take (N, V), beside the head itself, gathered
whole in the compute dtype once before the loop (under FSDP its shards split d_model). The arithmetic equals the
full-logits path's up to the order of float summation (tests/evals/test_head.py holds them to 1e-6).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from olmax.model import sharding
from olmax.train.loss import block_logits, label_logit, pick_chunk

_LOW = jnp.finfo(jnp.float32).min  # a running max before any block: exp(_LOW - m) is 0 for any real m


def _whole(w_DxV: jax.Array, dtype: jnp.dtype) -> jax.Array:
    """The head in the compute dtype, whole on every device of the mesh traced under: one all-gather of the
    cast shards before the block loop, which then slices it in place (as the trainer's head/CE does)."""
    return sharding.replicate(w_DxV.astype(dtype))


def _blocks(w_DxV: jax.Array, chunk: int) -> tuple[jax.Array, int]:
    """The first column of each block and the block width (a divisor of V at most `chunk`)."""
    width = pick_chunk(w_DxV.shape[1], chunk)
    return jnp.arange(0, w_DxV.shape[1], width), width


def token_scores(
    h_NxD: jax.Array, w_DxV: jax.Array, targets_N: jax.Array, vocab: int, chunk: int
) -> tuple[jax.Array, jax.Array]:
    """(-log p(target) fp32, whether the target is the argmax) per token, over the first `vocab` columns."""
    n = h_NxD.shape[0]
    w_DxV = _whole(w_DxV, h_NxD.dtype)
    firsts, width = _blocks(w_DxV, chunk)

    def block(carry, first):
        run_max, run_sum, target, best, best_at = carry
        logits_NxC = block_logits(h_NxD, w_DxV, first, width, vocab)
        block_max = jnp.max(logits_NxC, axis=-1)
        new_max = jnp.maximum(run_max, block_max)
        run_sum = run_sum * jnp.exp(run_max - new_max) + jnp.sum(jnp.exp(logits_NxC - new_max[:, None]), -1)
        target = target + label_logit(logits_NxC, targets_N, first)
        better = block_max > best  # strictly: an earlier block keeps a tie, as argmax keeps the first
        at = first + jnp.argmax(logits_NxC, axis=-1).astype(jnp.int32)
        return (
            new_max,
            run_sum,
            target,
            jnp.where(better, block_max, best),
            jnp.where(better, at, best_at),
        ), None

    init = (
        jnp.full((n,), _LOW, jnp.float32),
        jnp.zeros((n,), jnp.float32),
        jnp.zeros((n,), jnp.float32),
        jnp.full((n,), -jnp.inf, jnp.float32),
        jnp.zeros((n,), jnp.int32),
    )
    (run_max, run_sum, target, _, best_at), _ = jax.lax.scan(block, init, firsts)
    lse = run_max + jnp.log(run_sum)
    return lse - target, best_at == targets_N


def token_moments(
    h_NxD: jax.Array, w_DxV: jax.Array, targets_N: jax.Array, vocab: int, chunk: int
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(log p(target), mean log p, std log p) per token, fp32; mean and std over the model's next-token
    distribution on the first `vocab` columns."""
    n = h_NxD.shape[0]
    w_DxV = _whole(w_DxV, h_NxD.dtype)
    firsts, width = _blocks(w_DxV, chunk)

    def block(carry, first):
        run_max, total, mean, m2, target = carry
        logits_NxC = block_logits(h_NxD, w_DxV, first, width, vocab)
        real_C = (first + jnp.arange(width)) < vocab
        block_max = jnp.max(logits_NxC, axis=-1)
        e_NxC = jnp.where(real_C[None, :], jnp.exp(logits_NxC - block_max[:, None]), 0.0)
        x_NxC = jnp.where(real_C[None, :], logits_NxC, 0.0)
        w_b = jnp.sum(e_NxC, axis=-1)
        has = w_b > 0  # False only for a block of padding columns alone
        mean_b = jnp.where(has, jnp.sum(e_NxC * x_NxC, axis=-1) / jnp.where(has, w_b, 1.0), mean)
        m2_b = jnp.sum(e_NxC * jnp.square(x_NxC - mean_b[:, None]), axis=-1)
        new_max = jnp.maximum(run_max, jnp.where(has, block_max, run_max))
        keep, take = jnp.exp(run_max - new_max), jnp.where(has, jnp.exp(block_max - new_max), 0.0)
        a, b = total * keep, w_b * take
        merged = a + b
        delta = mean_b - mean
        mean = mean + delta * b / merged
        m2 = m2 * keep + m2_b * take + jnp.square(delta) * a * b / merged
        target = target + label_logit(logits_NxC, targets_N, first)
        return (new_max, merged, mean, m2, target), None

    zeros = jnp.zeros((n,), jnp.float32)
    init = (jnp.full((n,), _LOW, jnp.float32), zeros, zeros, zeros, zeros)
    (run_max, total, mean, m2, target), _ = jax.lax.scan(block, init, firsts)
    lse = run_max + jnp.log(total)
    return target - lse, mean - lse, jnp.sqrt(jnp.maximum(m2 / total, 0.0))

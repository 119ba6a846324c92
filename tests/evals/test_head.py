"""olmax/evals/head.py: the LM head read in vocabulary blocks gives, per token, what the full logits give (a
float64 reference): the NLL and the greedy match, and the mean and standard deviation of log p, for block
widths that split the vocabulary evenly, unevenly and into blocks holding padding columns alone."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from olmax.evals.head import token_moments, token_scores


def reference(h: np.ndarray, w: np.ndarray, targets: np.ndarray, vocab: int):
    """(nll, greedy, target log p, mean log p, std log p) from full float64 logits of the real columns."""
    logits = (h.astype(np.float64) @ w.astype(np.float64))[:, :vocab]
    top = logits.max(-1, keepdims=True)
    lse = np.log(np.exp(logits - top).sum(-1)) + top[:, 0]
    logp = logits - lse[:, None]
    p = np.exp(logp)
    mean = (p * logp).sum(-1)
    std = np.sqrt((p * np.square(logp - mean[:, None])).sum(-1))
    target = logp[np.arange(len(targets)), targets]
    return -target, logits.argmax(-1) == targets, target, mean, std


@pytest.fixture(scope="module")
def case():
    rng = np.random.default_rng(0)
    n, d, vocab, padded = 48, 32, 1000, 1152  # 152 padding columns: more than one block of 128 or 64
    h = rng.standard_normal((n, d)).astype(np.float32)
    w = (rng.standard_normal((d, padded)) / np.sqrt(d) * 4).astype(np.float32)
    w[:, vocab:] = 50.0  # padding columns that would win every argmax and dominate the softmax if read
    targets = rng.integers(0, vocab, n).astype(np.int32)
    logits = h @ w[:, :vocab]
    targets[::3] = logits[::3].argmax(-1)  # a third of the tokens are greedy matches
    return h, w, targets, vocab


@pytest.mark.parametrize("chunk", [1152, 384, 128, 64, 100])
def test_blocks_equal_the_full_logits(case, chunk):
    h, w, targets, vocab = case
    nll, greedy, target, mean, std = reference(h, w, targets, vocab)
    got_nll, got_greedy = token_scores(jnp.asarray(h), jnp.asarray(w), jnp.asarray(targets), vocab, chunk)
    np.testing.assert_allclose(np.asarray(got_nll), nll, rtol=1e-6, atol=1e-6)
    assert np.array_equal(np.asarray(got_greedy), greedy) and greedy.sum() >= len(targets) // 3
    got = token_moments(jnp.asarray(h), jnp.asarray(w), jnp.asarray(targets), vocab, chunk)
    for g, want in zip(got, (target, mean, std)):
        np.testing.assert_allclose(np.asarray(g), want, rtol=1e-5, atol=1e-5)


def test_a_tie_goes_to_the_first_column_as_argmax_does():
    """Two columns in different blocks share the row's largest logit: the earlier one is the argmax."""
    h = np.ones((2, 4), np.float32)
    w = np.zeros((4, 256), np.float32)
    w[:, 10] = w[:, 200] = 1.0  # the same logit 4.0 in block 0 and in block 1 (blocks of 128)
    nll, greedy = token_scores(jnp.asarray(h), jnp.asarray(w), jnp.asarray([10, 200], jnp.int32), 256, 128)
    assert np.asarray(greedy).tolist() == [True, False]
    assert float(nll[0]) == pytest.approx(float(nll[1]))


def test_bf16_hidden_states_read_the_head_in_bf16_with_fp32_reductions(case):
    h, w, targets, vocab = case
    nll, _ = token_scores(jnp.asarray(h, jnp.bfloat16), jnp.asarray(w), jnp.asarray(targets), vocab, 384)
    assert nll.dtype == jnp.float32
    want = reference(
        np.asarray(jnp.asarray(h, jnp.bfloat16), np.float32),
        np.asarray(jnp.asarray(w, jnp.bfloat16), np.float32),
        targets,
        vocab,
    )[0]
    np.testing.assert_allclose(np.asarray(nll), want, rtol=2e-3, atol=2e-3)

"""Attention with HF's sliding-window semantics: masks, both kernels, parity with Olmo3Attention (1e-4)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from transformers.masking_utils import causal_mask_function, sliding_window_causal_mask_function

import olmax.model.attention_xla as attention_xla
from olmax.model.attention_jax import attend_jax
from olmax.model.attention_xla import attend_blocks, attend_chunked, attend_xla, attention_mask
from olmax.model.convert import from_hf
from olmax.model.hf_reference import random_hf_model
from olmax.model.rope import rope_tables

jax.config.update("jax_numpy_rank_promotion", "raise")
SIMPLE, COMPOSITE = 1e-5, 1e-4
WINDOW, SEQ = 16, 48  # seq = 3 x window, so every sliding query past 16 drops keys


def hf_mask(seq, window):
    fn = causal_mask_function if window is None else sliding_window_causal_mask_function(window)
    q_idx, kv_idx = torch.arange(seq)[:, None], torch.arange(seq)[None, :]
    return fn(torch.tensor(0), torch.tensor(0), q_idx, kv_idx).expand(seq, seq).numpy()


@pytest.mark.parametrize("window", [None, 1, 5, WINDOW])
def test_mask_is_hf_window_semantics(window):
    ours = np.asarray(attention_mask(SEQ, SEQ, window))[0, 0]
    np.testing.assert_array_equal(ours, hf_mask(SEQ, window))
    if window is not None:
        assert ours.sum(-1).max() == window  # W keys, the query itself included


def test_segment_ids_block_other_documents():
    seg = jnp.asarray([[0, 0, 0, 1, 1, 2]])
    m = np.asarray(attention_mask(6, 6, None, seg))[0, 0]
    assert m[4, 3] and m[4, 4] and not m[4, 2] and not m[5, 4] and m[5, 5]


def random_qkv(seed, n_heads=4, n_kv=2, seq=SEQ, dtype=np.float32):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(2, seq, n_heads, 16)).astype(dtype)
    k = rng.normal(size=(2, seq, n_kv, 16)).astype(dtype)
    v = rng.normal(size=(2, seq, n_kv, 16)).astype(dtype)
    return jnp.asarray(q), jnp.asarray(k), jnp.asarray(v)


@pytest.mark.parametrize("n_kv", [4, 2, 1])
@pytest.mark.parametrize("window", [None, WINDOW])
def test_xla_and_jax_kernels_agree(n_kv, window):
    q, k, v = random_qkv(0, n_kv=n_kv)
    seg = jnp.asarray(np.repeat(np.arange(4), SEQ // 4)[None].repeat(2, 0))
    for s in (None, seg):
        np.testing.assert_allclose(
            np.asarray(attend_xla(q, k, v, window, s)),
            np.asarray(attend_jax(q, k, v, window, s)),
            atol=SIMPLE,
            rtol=SIMPLE,
        )


@pytest.mark.parametrize(
    "seq, window, chunk",
    [(48, WINDOW, 16), (45, WINDOW, 16), (48, None, 16), (50, 7, 8), (40, 100, 16), (48, WINDOW, 5)],
)
def test_chunked_kernel_equals_plain(seq, window, chunk):
    q, k, v = random_qkv(3, n_kv=2, seq=seq)
    seg = jnp.asarray(np.sort(np.random.default_rng(seq).integers(0, 3, size=(2, seq)), axis=1))
    for s in (None, seg):
        np.testing.assert_allclose(
            np.asarray(attend_chunked(q, k, v, window, s, chunk)),
            np.asarray(attend_xla(q, k, v, window, s)),
            atol=SIMPLE,
            rtol=SIMPLE,
        )


@pytest.mark.slow
def test_chunked_kernel_gradients_equal_plain():
    q, k, v = random_qkv(4, n_kv=2, seq=40)

    def loss(fn):
        return lambda q, k, v: jnp.sum(jnp.sin(fn(q, k, v)))

    plain = jax.grad(loss(lambda q, k, v: attend_xla(q, k, v, WINDOW)), argnums=(0, 1, 2))(q, k, v)
    chunked = jax.grad(loss(lambda q, k, v: attend_chunked(q, k, v, WINDOW, None, 16)), argnums=(0, 1, 2))(
        q, k, v
    )
    for a, b in zip(plain, chunked):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=SIMPLE, rtol=SIMPLE)


def test_xla_kernel_matches_brute_force_gqa():
    q, k, v = random_qkv(1, n_heads=4, n_kv=2)
    mask = np.asarray(attention_mask(SEQ, SEQ, WINDOW))[0, 0]
    qn, kn, vn = (np.asarray(t, np.float64) for t in (q, k, v))
    want = np.zeros_like(qn)
    for h in range(4):
        s = np.einsum("bld,bsd->bls", qn[:, :, h], kn[:, :, h // 2]) / 4.0
        s = np.where(mask, s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        want[:, :, h] = np.einsum("bls,bsd->bld", p, vn[:, :, h // 2])
    np.testing.assert_allclose(np.asarray(attend_xla(q, k, v, WINDOW)), want, atol=SIMPLE, rtol=SIMPLE)


def test_document_masking_equals_running_documents_alone():
    q, k, v = random_qkv(2, seq=32)
    seg = jnp.asarray(np.array([0] * 20 + [1] * 12)[None].repeat(2, 0))
    both = attend_xla(q, k, v, WINDOW, seg)
    alone = attend_xla(q[:, 20:], k[:, 20:], v[:, 20:], WINDOW)
    np.testing.assert_allclose(np.asarray(both[:, 20:]), np.asarray(alone), atol=SIMPLE, rtol=SIMPLE)


@pytest.fixture(scope="module", params=[4, 2], ids=["mha", "gqa"])
def pair(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(f"attn{request.param}")
    hf = random_hf_model(seed=5, num_key_value_heads=request.param, num_hidden_layers=4)
    hf.save_pretrained(str(path))
    return hf, from_hf(path)


@pytest.mark.parametrize("layer", [0, 3], ids=["sliding", "full"])
def test_attention_module_matches_hf(pair, layer):
    hf, ours = pair
    x = np.random.default_rng(layer).normal(size=(2, SEQ, 64)).astype(np.float32)
    layer_type = hf.config.layer_types[layer]
    window = WINDOW if layer_type == "sliding_attention" else None
    assert ours.cfg.window(layer) == window
    add_mask = np.where(hf_mask(SEQ, window), 0.0, np.finfo(np.float32).min).astype(np.float32)
    with torch.no_grad():
        xt = torch.from_numpy(x)
        pos_emb = hf.model.rotary_emb(xt, torch.arange(SEQ)[None], layer_type)
        ref, _ = hf.model.layers[layer].self_attn(xt, pos_emb, torch.from_numpy(add_mask)[None, None])
    cos, sin = rope_tables(jnp.arange(SEQ), 16, 500_000.0)
    out = ours.layer(layer).attn(jnp.asarray(x), cos, sin, window)
    np.testing.assert_allclose(np.asarray(out), ref.numpy(), atol=COMPOSITE, rtol=COMPOSITE)


def brute_force_attention(q, k, v, window, segment_ids=None):
    """Softmax attention written the obvious way (no custom VJP), for autodiff to differentiate."""
    group = q.shape[2] // k.shape[2]
    k_full, v_full = jnp.repeat(k, group, axis=2), jnp.repeat(v, group, axis=2)
    scores = jnp.einsum("blnh,bsnh->bnls", q, k_full) / jnp.sqrt(q.shape[-1])
    mask = attention_mask(q.shape[1], k.shape[1], window, segment_ids)
    probs = jax.nn.softmax(jnp.where(mask, scores, -jnp.inf), axis=-1)
    return jnp.einsum("bnls,bsnh->blnh", probs, v_full)


@pytest.mark.parametrize(
    ("n_kv", "window", "documents"),
    [(4, None, False), (2, WINDOW, False), (2, WINDOW, True), (1, None, True)],
)
def test_xla_kernel_gradients_equal_autodiff_of_brute_force(n_kv, window, documents):
    """The XLA kernel's hand-written backward (dK, dV formed transposed) equals autodiff of the plain
    formula, for grouped KV heads, windows and document masks."""
    q, k, v = random_qkv(3, n_kv=n_kv)
    seg = jnp.asarray(np.repeat(np.arange(3), SEQ // 3)[None].repeat(2, 0)) if documents else None
    cotangent = jnp.asarray(np.random.default_rng(4).normal(size=q.shape), jnp.float32)

    def loss(fn):
        return lambda q, k, v: jnp.sum(fn(q, k, v) * cotangent)

    want = jax.grad(loss(lambda q, k, v: brute_force_attention(q, k, v, window, seg)), argnums=(0, 1, 2))(
        q, k, v
    )
    got = jax.grad(loss(lambda q, k, v: attend_xla(q, k, v, window, seg)), argnums=(0, 1, 2))(q, k, v)
    for name, a, b in zip("qkv", want, got):
        np.testing.assert_allclose(
            np.asarray(b), np.asarray(a), atol=SIMPLE, rtol=COMPOSITE, err_msg=f"d{name}"
        )


@pytest.mark.parametrize(
    ("window", "chunk", "remat"), [(None, 16, False), (5, 20, False), (WINDOW, 20, True), (None, 20, True)]
)
def test_unrolled_blocks_equal_plain_values_and_gradients(window, chunk, remat, monkeypatch):
    """Query chunks over only the keys they can see (causal/window triangle skipped; a last chunk
    shorter than the rest when 20 does not divide 48) give attend_xla's output and gradients, with
    probabilities kept or each chunk rematerialised."""
    if remat:
        monkeypatch.setattr(attention_xla, "SAVE_PROBS_BYTES", 0)
    q, k, v = random_qkv(5, n_kv=2)
    seg = jnp.asarray(np.repeat(np.arange(4), SEQ // 4)[None].repeat(2, 0))
    cotangent = jnp.asarray(np.random.default_rng(6).normal(size=q.shape), jnp.float32)

    def loss(fn):
        return lambda q, k, v: jnp.sum(fn(q, k, v) * cotangent)

    for s in (None, seg):
        np.testing.assert_allclose(
            np.asarray(attend_blocks(q, k, v, window, s, chunk)),
            np.asarray(attend_xla(q, k, v, window, s)),
            atol=SIMPLE,
            rtol=SIMPLE,
        )
        want = jax.grad(loss(lambda q, k, v, s=s: attend_xla(q, k, v, window, s)), argnums=(0, 1, 2))(q, k, v)
        got = jax.grad(
            loss(lambda q, k, v, s=s: attend_blocks(q, k, v, window, s, chunk)), argnums=(0, 1, 2)
        )(q, k, v)
        for a, b in zip(want, got):
            np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=SIMPLE, rtol=COMPOSITE)

"""Block and whole-model parity with transformers' Olmo3ForCausalLM (composite: 1e-4, fp32), causality,
window reach, vocab padding, scan grouping and remat."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from olmax.errors import OlmaxError
from olmax.model.convert import from_hf
from olmax.model.hf_reference import random_hf_model
from olmax.model.model_config import tiny
from olmax.model.rope import rope_tables
from olmax.model.transformer import Transformer, init_model, scan_plan

jax.config.update("jax_numpy_rank_promotion", "raise")
COMPOSITE = 1e-4
WINDOW, SEQ = 16, 48  # seq = 3 x window
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}
CASES = {
    "mha": dict(num_key_value_heads=4),
    "gqa": dict(num_key_value_heads=2),
    "gqa-6-layers-yarn": dict(num_key_value_heads=1, num_hidden_layers=6, rope_scaling=dict(YARN)),
}


def forward(model: Transformer, ids: np.ndarray) -> np.ndarray:
    return np.asarray(nnx.jit(lambda m, x: m(x))(model, jnp.asarray(ids)))


@pytest.fixture(scope="module", params=list(CASES))
def pair(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param)
    hf = random_hf_model(seed=7, **CASES[request.param])
    hf.save_pretrained(str(path))
    return hf, from_hf(path)


def test_block_matches_hf(pair):
    hf, ours = pair
    x = np.random.default_rng(0).normal(size=(2, SEQ, 64)).astype(np.float32)
    for layer in (0, 3):
        layer_type = hf.config.layer_types[layer]
        window = ours.cfg.window(layer)
        q, k = np.arange(SEQ)[:, None], np.arange(SEQ)[None]
        allowed = (k <= q) & ((k > q - window) if window else True)
        add_mask = np.where(allowed, 0.0, np.finfo(np.float32).min).astype(np.float32)
        with torch.no_grad():
            xt = torch.from_numpy(x)
            pos_emb = hf.model.rotary_emb(xt, torch.arange(SEQ)[None], layer_type)
            ref = hf.model.layers[layer](
                xt, attention_mask=torch.from_numpy(add_mask)[None, None], position_embeddings=pos_emb
            )
        cfg = ours.cfg
        cos, sin = rope_tables(
            jnp.arange(SEQ), 16, cfg.rope_theta, cfg.rope_scaling if layer_type == "full_attention" else None
        )
        out = ours.layer(layer)(jnp.asarray(x), cos, sin, window)
        np.testing.assert_allclose(np.asarray(out), ref.numpy(), atol=COMPOSITE, rtol=COMPOSITE)


def test_whole_model_matches_hf(pair):
    hf, ours = pair
    ids = np.random.default_rng(1).integers(0, 1000, size=(2, SEQ))
    with torch.no_grad():
        ref = hf(torch.from_numpy(ids)).logits.numpy()
    out = forward(ours, ids)
    assert out.shape == (2, SEQ, 1000) and out.dtype == np.float32
    np.testing.assert_allclose(out, ref, atol=COMPOSITE, rtol=COMPOSITE)
    # the chunked XLA kernel (long-sequence path) and jax.nn.dot_product_attention give the same logits
    for changes in (dict(attention_chunk=16), dict(attention_impl="jax")):
        other = nnx.merge(
            nnx.graphdef(Transformer(ours.cfg.replace(**changes), rngs=nnx.Rngs(0))), nnx.state(ours)
        )
        np.testing.assert_allclose(forward(other, ids), ref, atol=COMPOSITE, rtol=COMPOSITE)


def test_causality():
    model = init_model(tiny())
    ids = np.random.default_rng(2).integers(0, 1000, size=(1, SEQ))
    changed = ids.copy()
    changed[0, 30:] = (changed[0, 30:] + 1) % 1000
    a, b = forward(model, ids), forward(model, changed)
    np.testing.assert_array_equal(a[0, :30], b[0, :30])
    assert np.abs(a[0, 30:] - b[0, 30:]).max() > 1e-3


def test_sliding_window_reach():
    # every layer sliding: a token can only reach window - 1 positions ahead per layer
    cfg = tiny(n_layers=1, layer_types=("sliding_attention",))
    model = init_model(cfg, seed=3)
    ids = np.random.default_rng(3).integers(0, 1000, size=(1, SEQ))
    changed = ids.copy()
    changed[0, 5] = (changed[0, 5] + 1) % 1000
    diff = np.abs(forward(model, ids) - forward(model, changed)).max(-1)[0]
    assert diff[5 : 5 + WINDOW].min() > 0 and diff[5 + WINDOW :].max() == 0 and diff[:5].max() == 0


def test_vocab_padding_rows_are_drawn_as_olmo_core_does():
    """OLMo-core initialises all 1,024 rows (trunc normal, std init_std, cut at 3 std); "zero" keeps the
    padding rows at zero. Real rows are the same draw either way."""
    core = init_model(tiny(vocab_size=1000, vocab_multiple=128), seed=4)
    zero = init_model(tiny(vocab_size=1000, vocab_multiple=128, vocab_padding="zero"), seed=4)
    for name in ("embed", "lm_head"):
        a, b = np.asarray(getattr(core, name)[...]), np.asarray(getattr(zero, name)[...])
        pad_a = a[1000:] if name == "embed" else a[:, 1000:]
        pad_b = b[1000:] if name == "embed" else b[:, 1000:]
        assert pad_a.std() == pytest.approx(0.02, rel=0.15) and np.abs(pad_a).max() <= 0.06 + 1e-6
        np.testing.assert_array_equal(pad_b, 0)
        real = (slice(0, 1000),) if name == "embed" else (slice(None), slice(0, 1000))
        np.testing.assert_array_equal(a[real], b[real])
    with pytest.raises(OlmaxError, match="vocab_padding"):
        tiny(vocab_padding="random")


def test_vocab_padding_changes_no_logit():
    padded = init_model(tiny(vocab_size=1000, vocab_multiple=128, vocab_padding="zero"), seed=4)
    unpadded = Transformer(tiny(vocab_size=1000, vocab_multiple=1), rngs=nnx.Rngs(9))
    state = nnx.state(padded).to_pure_dict()
    state["embed"] = state["embed"][:1000]
    state["lm_head"] = state["lm_head"][:, :1000]
    nnx.update(unpadded, state)
    assert padded.embed.shape == (1024, 64) and unpadded.embed.shape == (1000, 64)
    ids = np.random.default_rng(4).integers(0, 1000, size=(2, SEQ))
    np.testing.assert_array_equal(forward(padded, ids), forward(unpadded, ids))
    padded_logits = np.asarray(padded.head(padded.hidden(jnp.asarray(ids)), padded=True))
    np.testing.assert_array_equal(padded_logits[..., 1000:], 0)  # zero-weight columns
    np.testing.assert_allclose(padded_logits[..., :1000], forward(padded, ids), atol=1e-6, rtol=0)


def test_scan_groups_equal_unrolled_layers():
    cfg = tiny(n_layers=6)
    assert scan_plan(cfg) == (1, 4) and scan_plan(cfg.replace(scan_group=0)) == (0, 1)
    scanned = init_model(cfg, seed=5)
    unrolled = init_model(cfg.replace(scan_group=0), seed=5)
    ids = np.random.default_rng(5).integers(0, 1000, size=(1, SEQ))
    np.testing.assert_allclose(forward(scanned, ids), forward(unrolled, ids), atol=1e-6, rtol=1e-6)


@pytest.mark.slow
def test_remat_changes_no_gradient():
    ids = jnp.asarray(np.random.default_rng(6).integers(0, 1000, size=(1, 32)))

    def grads(remat):
        model = init_model(tiny(remat=remat), seed=6)
        loss = lambda m: jnp.mean(jax.nn.logsumexp(m(ids), -1))  # noqa: E731
        return nnx.state(nnx.jit(nnx.grad(loss))(model)).to_pure_dict()

    base, full = grads("none"), grads("full")
    for a, b in zip(jax.tree.leaves(base), jax.tree.leaves(full)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6, rtol=1e-5)


def test_bf16_compute_keeps_fp32_params_and_tracks_fp32():
    ids = np.random.default_rng(7).integers(0, 1000, size=(1, SEQ))
    f32 = init_model(tiny(), seed=8)
    b16 = init_model(tiny(dtype="bfloat16"), seed=8)
    assert b16.blocks.attn.q_proj.dtype == jnp.float32
    a, b = forward(f32, ids), forward(b16, ids)
    assert b.dtype == np.float32
    assert np.mean(a.argmax(-1) == b.argmax(-1)) > 0.9


def test_packed_documents_see_only_themselves():
    # RoPE is relative, so a document packed after another reads the same logits as when alone
    model = init_model(tiny(), seed=9)
    ids = np.random.default_rng(9).integers(0, 1000, size=(1, 40))
    seg = jnp.asarray([[0] * 15 + [1] * 25])
    packed = nnx.jit(lambda m, x, s: m(x, s))(model, jnp.asarray(ids), seg)
    alone = model(
        ids[:, 15:]
    )  # also the plain eager call on numpy ids (the contract in docs/architecture.md)
    np.testing.assert_allclose(np.asarray(packed)[:, 15:], np.asarray(alone), atol=COMPOSITE, rtol=COMPOSITE)

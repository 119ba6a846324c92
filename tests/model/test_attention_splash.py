"""Splash attention (Pallas, interpret mode on the CPU) equals the XLA path: outputs and gradients under
causal, HF-window and document masks with grouped KV heads, through the dispatch, the layer and a
sharded batch; the dispatch's choice of kernel per platform and shape."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from olmax.errors import OlmaxError
from olmax.model.attention import attend, resolve_impl
from olmax.model.attention_splash import SplashSettings, attend_splash, settings_for
from olmax.model.attention_xla import attend_xla
from olmax.model.model_config import tiny
from olmax.model.transformer import init_model

SIMPLE, COMPOSITE = 1e-5, 1e-4  # levanter's tolerances: one kernel's output; gradients through it
SEQ, HEAD = 256, 16  # two 128-wide tiles: the kernel skips, fills and masks tiles as at full size


def qkv(seed: int, n_heads: int, n_kv: int, seq: int = SEQ, batch: int = 2):
    rng = np.random.default_rng(seed)
    shape_q, shape_kv = (batch, seq, n_heads, HEAD), (batch, seq, n_kv, HEAD)
    return tuple(jnp.asarray(rng.normal(size=s).astype(np.float32)) for s in (shape_q, shape_kv, shape_kv))


def documents(batch: int = 2, seq: int = SEQ) -> jnp.ndarray:
    """Rows of uneven documents whose boundaries fall inside tiles and on them."""
    rows = []
    for cuts in ([0, 37, 128, 200], [0, 5, 6, 130, 255]):
        ids = np.zeros(seq, np.int32)
        for d, start in enumerate(cuts):
            ids[start:] = d
        rows.append(ids)
    return jnp.asarray(np.stack(rows[:batch]))


def losses(fn, q, k, v):
    """A loss with a different weight per output element, so every gradient entry is tested."""
    w = jnp.asarray(np.random.default_rng(9).normal(size=q.shape).astype(np.float32))
    return lambda q, k, v: jnp.sum(fn(q, k, v) * w)


# every pair of head grouping and mask, and of each with and without segments, in the slow suite (12 cases
# cover all pairs of the 3 x 4 x 2); one case with all three at once in the quick one
CASES = [
    pytest.param(
        n_kv, window, segments, marks=() if (n_kv, window, segments) == (2, 100, True) else pytest.mark.slow
    )
    for i, n_kv in enumerate((4, 2, 1))
    for j, window in enumerate((None, 100, 128, 1))
    for segments in [(i + j) % 2 == 0]
]


@pytest.mark.parametrize("n_kv, window, segments", CASES)
def test_splash_equals_xla_outputs_and_gradients(n_kv, window, segments):
    q, k, v = qkv(0, 4, n_kv)
    seg = documents() if segments else None
    settings = SplashSettings(block=128)
    splash_fn = lambda q, k, v: attend_splash(q, k, v, window, seg, settings)  # noqa: E731
    xla_fn = lambda q, k, v: attend_xla(q, k, v, window, seg)  # noqa: E731
    np.testing.assert_allclose(splash_fn(q, k, v), xla_fn(q, k, v), atol=SIMPLE, rtol=SIMPLE)
    g_splash = jax.grad(losses(splash_fn, q, k, v), argnums=(0, 1, 2))(q, k, v)
    g_xla = jax.grad(losses(xla_fn, q, k, v), argnums=(0, 1, 2))(q, k, v)
    for a, b in zip(g_splash, g_xla):
        np.testing.assert_allclose(a, b, atol=COMPOSITE, rtol=COMPOSITE)


@pytest.mark.slow
@pytest.mark.parametrize("fused_bwd", [True, False])
def test_both_backward_kernels_and_larger_tiles_agree(fused_bwd):
    q, k, v = qkv(1, 4, 2, seq=512, batch=1)
    xla_fn = lambda q, k, v: attend_xla(q, k, v, 200, None)  # noqa: E731
    g_xla = jax.grad(losses(xla_fn, q, k, v), argnums=(0, 1, 2))(q, k, v)
    for block in (128, 256):
        settings = SplashSettings(block=block, fused_bwd=fused_bwd)
        fn = lambda q, k, v, s=settings: attend_splash(q, k, v, 200, None, s)  # noqa: E731
        for a, b in zip(jax.grad(losses(fn, q, k, v), argnums=(0, 1, 2))(q, k, v), g_xla):
            np.testing.assert_allclose(a, b, atol=COMPOSITE, rtol=COMPOSITE)


def test_bf16_inputs_stay_close_to_the_fp32_path():
    q, k, v = qkv(2, 4, 2)
    want = attend_xla(q, k, v, None, None)
    got = attend_splash(*(x.astype(jnp.bfloat16) for x in (q, k, v)), None, None, SplashSettings(block=128))
    assert got.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(got, np.float32), want, atol=3e-2, rtol=3e-2)


def test_tiles_fit_the_shape_and_bad_lengths_name_the_fix():
    sizes = SplashSettings(block=2048).block_sizes(512, 512)
    assert (sizes.block_q, sizes.block_kv, sizes.block_q_dkv) == (512, 512, 512)
    assert sizes.use_fused_bwd_kernel and sizes.block_q_dq is None
    assert SplashSettings(block=1024).block_sizes(8192, 8192).block_kv == 1024
    assert SplashSettings(block=1024).block_sizes(384, 384).block_q == 128  # 384 = 3 x 128
    assert settings_for(8192, 128, 512).block == 512
    assert settings_for(8192, 128).block == SplashSettings().block
    with pytest.raises(OlmaxError, match="divisible by 128"):
        SplashSettings().block_sizes(200, 200)


def test_auto_picks_splash_on_a_tpu_for_shapes_it_takes():
    assert resolve_impl("auto", jnp.bfloat16, 8192, 128, platform="tpu") == "splash"
    assert resolve_impl("auto", jnp.float32, 8192, 256, platform="tpu") == "splash"
    assert resolve_impl("auto", jnp.bfloat16, 8192, 64, platform="tpu") == "xla"  # head under 128 lanes
    assert resolve_impl("auto", jnp.bfloat16, 1000, 128, platform="tpu") == "xla"
    assert resolve_impl("auto", jnp.bfloat16, 8192, 128, platform="cpu") == "xla"
    assert resolve_impl("auto", jnp.bfloat16, 8192, 128, platform="gpu") == "cudnn"
    assert resolve_impl("splash", jnp.float32, 256, 16, platform="cpu") == "splash"
    with pytest.raises(OlmaxError, match="on a GPU"):
        resolve_impl("splash", jnp.bfloat16, 8192, 128, platform="gpu")


def test_dispatch_passes_the_tile_through():
    q, k, v = qkv(3, 4, 4)
    np.testing.assert_allclose(
        attend(q, k, v, 64, None, "splash", 128), attend_xla(q, k, v, 64, None), atol=SIMPLE, rtol=SIMPLE
    )


@pytest.mark.slow
def test_a_model_with_splash_equals_the_xla_model():
    """The whole tiny OLMo 3 (GQA 4/2, window 16, one full layer) at seq 256: logits and parameter grads."""
    cfg = tiny(attention_impl="splash", splash_block=128)
    ids = jnp.asarray(np.random.default_rng(4).integers(0, cfg.vocab_size, size=(2, SEQ)))
    seg = documents()

    def grads(cfg):
        model = init_model(cfg, seed=0)
        from flax import nnx

        graphdef, params = nnx.split(model)

        def loss(params):
            logits = nnx.merge(graphdef, params)(ids, seg)
            return jnp.mean(jax.nn.log_softmax(logits)[..., 0]), logits

        return jax.grad(loss, has_aux=True)(params)

    g_splash, logits_splash = grads(cfg)
    g_xla, logits_xla = grads(cfg.replace(attention_impl="xla"))
    np.testing.assert_allclose(logits_splash, logits_xla, atol=COMPOSITE, rtol=COMPOSITE)
    for a, b in zip(jax.tree.leaves(g_splash), jax.tree.leaves(g_xla)):
        np.testing.assert_allclose(a, b, atol=COMPOSITE, rtol=COMPOSITE)

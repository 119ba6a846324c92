"""Optimizer pieces against hand values and against OLMo-core's own torch implementations."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from olmax.train.config import OptimConfig
from olmax.train.loss import HeadLoss, cross_entropy, head_cross_entropy
from olmax.train.optim import (
    adamw_update,
    apply_update,
    decay_mask,
    init_opt_state,
    learning_rate,
    skip_decision,
)

jax.config.update("jax_numpy_rank_promotion", "raise")


def test_schedules_hand_values():
    cos = OptimConfig(lr=1.0, schedule="cosine", warmup_steps=10, alpha_f=0.1)
    assert learning_rate(cos, 0, 110) == 0.0
    assert learning_rate(cos, 5, 110) == 0.5
    assert learning_rate(cos, 10, 110) == 1.0
    assert learning_rate(cos, 60, 110) == pytest.approx(0.55)  # halfway: (1 + 0.1) / 2
    assert learning_rate(cos, 110, 110) == pytest.approx(0.1)
    assert learning_rate(cos, 500, 110) == pytest.approx(0.1)
    half = OptimConfig(lr=1.0, schedule="half_cosine", warmup_steps=10, alpha_f=0.1)
    assert learning_rate(half, 5, 110) == pytest.approx(0.275)  # ramps to the cosine's midpoint 0.55
    assert learning_rate(half, 10, 110) == pytest.approx(0.55)
    assert learning_rate(half, 60, 110) == pytest.approx(0.1 + 0.9 * (1 + math.cos(math.pi * 0.75)) / 2)
    assert learning_rate(half, 110, 110) == pytest.approx(0.1)
    lin = OptimConfig(lr=2.0, schedule="linear", warmup_steps=0, alpha_f=0.0)
    assert [learning_rate(lin, s, 4) for s in range(6)] == [2.0, 1.5, 1.0, 0.5, 0.0, 0.0]
    const = OptimConfig(lr=1.0, schedule="constant", warmup_steps=4)
    assert [learning_rate(const, s, 9) for s in (0, 2, 4, 100)] == [0.0, 0.5, 1.0, 1.0]


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("cosine", dict(warmup_steps=2000, alpha_f=0.1)),
        ("half_cosine", dict(warmup_steps=597_046, alpha_f=0.1)),
        ("linear", dict(warmup_steps=200, alpha_f=0.0)),
    ],
)
def test_schedules_match_olmo_core(name, kwargs):
    from olmo_core.optim import CosWithWarmup, HalfCosWithWarmup, LinearWithWarmup

    ref = {"cosine": CosWithWarmup, "half_cosine": HalfCosWithWarmup, "linear": LinearWithWarmup}[name](
        warmup=kwargs["warmup_steps"], alpha_f=kwargs["alpha_f"]
    )
    cfg = OptimConfig(lr=3e-4, schedule=name, **kwargs)
    t_max = 1_668_931 if name == "half_cosine" else 1_192_093
    for step in (
        0,
        1,
        199,
        200,
        1999,
        2000,
        2001,
        500_000,
        597_045,
        597_046,
        600_000,
        t_max - 1,
        t_max,
        t_max + 5,
    ):
        want = ref.get_lr(3e-4, step, t_max)
        assert learning_rate(cfg, step, t_max) == pytest.approx(want, rel=1e-12, abs=1e-15), step
        traced = float(jax.jit(lambda s: learning_rate(cfg, s, t_max))(jnp.int32(step)))
        assert traced == pytest.approx(want, rel=2e-6, abs=1e-10), step  # fp32 step arithmetic


def _params():
    rng = np.random.default_rng(0)
    return {
        "embed": jnp.asarray(rng.normal(size=(6, 4)), jnp.float32),
        "blocks": {"w": jnp.asarray(rng.normal(size=(2, 4, 3)), jnp.float32)},
        "lm_head": jnp.asarray(rng.normal(size=(4, 6)), jnp.float32),
    }


def test_decay_mask_spares_only_the_embedding():
    assert decay_mask(_params()) == {"embed": False, "blocks": {"w": True}, "lm_head": True}


def test_adamw_matches_olmo_core_two_steps():
    """Two steps of olmax AdamW (with clipping) vs OLMo-core's adamw_step on torch tensors."""
    from olmo_core.optim.adamw import adamw_step

    cfg = OptimConfig(lr=1e-2, weight_decay=0.1, max_grad_norm=1.0)
    params = _params()
    opt = init_opt_state(params, 8)
    rng = np.random.default_rng(1)
    names = ["embed", "blocks.w", "lm_head"]
    flat = lambda t: [t["embed"], t["blocks"]["w"], t["lm_head"]]  # noqa: E731
    ref_p = [torch.tensor(np.asarray(p)) for p in flat(params)]
    ref_m = [torch.zeros_like(p) for p in ref_p]
    ref_v = [torch.zeros_like(p) for p in ref_p]
    ref_steps = [torch.zeros(()) for _ in ref_p]
    for _ in range(2):
        grads = jax.tree.map(lambda p: jnp.asarray(rng.normal(size=p.shape) * 3, jnp.float32), params)
        params, opt, norm = adamw_update(params, grads, opt, jnp.float32(cfg.lr), cfg)
        g = [torch.tensor(np.asarray(x)) for x in flat(grads)]
        total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(x) for x in g]))
        assert float(norm) == pytest.approx(float(total), rel=1e-6)
        coef = min(1.0, 1.0 / (float(total) + 1e-6))
        for i, name in enumerate(names):
            adamw_step(
                ref_p[i],
                g[i] * coef,
                lr=cfg.lr,
                betas=(0.9, 0.95),
                eps=1e-8,
                weight_decay=0.0 if name == "embed" else 0.1,
                exp_avg=ref_m[i],
                exp_avg_sq=ref_v[i],
                step=ref_steps[i],
                step_factor=torch.tensor(1.0),
            )
    for got, want in zip(flat(params), ref_p):
        np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=1e-5, atol=1e-7)
    assert float(opt["count"]) == 2.0


def test_first_adam_step_is_sign_times_lr():
    """Hand value: step 1 moves each weight by lr * g / (|g| + eps), plus decoupled decay."""
    cfg = OptimConfig(lr=0.1, weight_decay=0.5, max_grad_norm=1e9)
    params = {"embed": jnp.ones((2,)), "w": jnp.ones((2,))}
    grads = {"embed": jnp.asarray([2.0, -3.0]), "w": jnp.asarray([4.0, -0.5])}
    new, _, _ = adamw_update(params, grads, init_opt_state(params, 4), jnp.float32(0.1), cfg)
    np.testing.assert_allclose(np.asarray(new["embed"]), [0.9, 1.1], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(new["w"]), [1 - 0.05 - 0.1, 1 - 0.05 + 0.1], rtol=1e-6)


def test_skip_rule_matches_olmo_core():
    """Step factors over a long series with spikes equal OLMo-core's SkipStepOptimizer's."""
    from olmo_core.optim.skip_step_optimizer import SkipStepOptimizer

    cfg = OptimConfig(skip_window=16)  # active once 8 values exist
    ref = SkipStepOptimizer(
        [torch.nn.Parameter(torch.zeros(1))], {}, rolling_interval_length=16, sigma_factor=6
    )
    rng = np.random.default_rng(3)
    hist = init_opt_state({"w": jnp.zeros(1)}, 16)["skip"]
    decisions = []
    for t in range(60):
        loss = np.float32(3.0 + 0.01 * rng.normal() + (5.0 if t in (5, 20, 41) else 0.0))
        norm = np.float32(1.0 + 0.01 * rng.normal() + (9.0 if t in (30, 50) else 0.0))
        ref.latest_loss = torch.tensor(loss)
        ref.latest_grad_norm = torch.tensor(norm)
        want = float(ref.get_step_factor())
        got, hist = skip_decision(hist, jnp.float32(loss), jnp.float32(norm), cfg)
        assert float(got) == want, t
        decisions.append(want)
    # t=5 comes before the rule is live and, still in the window, widens the loss std enough that
    # the t=20 spike passes; the later spikes are skipped
    assert [t for t, d in enumerate(decisions) if d == 0.0] == [30, 41, 50]


def test_skipped_step_keeps_params_and_moments():
    cfg = OptimConfig(lr=0.1, skip_window=4)
    params = {"embed": jnp.ones((3,)), "w": jnp.ones((3,))}
    opt = init_opt_state(params, 4)
    grads = jax.tree.map(lambda p: jnp.full(p.shape, 0.1), params)
    for loss in (1.0, 1.0, 1.0):  # equal losses and grad norms: std 0, nothing exceeds
        params, opt, info = apply_update(params, grads, opt, jnp.float32(0.1), jnp.float32(loss), cfg)
        assert float(info["skipped"]) == 0.0
    before = (params, opt)
    params, opt, info = apply_update(params, grads, opt, jnp.float32(0.1), jnp.float32(50.0), cfg)
    assert float(info["skipped"]) == 1.0
    for a, b in zip(
        jax.tree.leaves((params, {k: opt[k] for k in ("mu", "nu", "count")})),
        jax.tree.leaves((before[0], {k: before[1][k] for k in ("mu", "nu", "count")})),
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert int(opt["skip"]["n"]) == 4  # the skipped step's loss still enters the history, as in OLMo-core


def test_cross_entropy_and_z_loss_hand_values():
    logits = jnp.asarray(np.random.default_rng(0).normal(size=(2, 3, 5)), jnp.float32)
    ids = jnp.asarray([[1, 4, 2], [0, 3, 3]], jnp.int32)
    ce, z, n = cross_entropy(logits, ids, 1e-4)
    lg = np.asarray(logits, np.float64)
    lse = np.log(np.exp(lg).sum(-1))
    want_ce = sum(lse[b, t] - lg[b, t, ids[b, t + 1]] for b in range(2) for t in range(2))
    assert float(n) == 4
    assert float(ce) == pytest.approx(want_ce, rel=1e-6)
    assert float(z) == pytest.approx(1e-4 * (lse[:, :2] ** 2).sum(), rel=1e-6)
    # padded vocabulary columns are excluded from the softmax
    padded = jnp.concatenate([logits, jnp.full((2, 3, 3), 7.0)], axis=-1)
    ce_p, z_p, _ = cross_entropy(padded, ids, 1e-4, vocab_size=5)
    assert float(ce_p) == pytest.approx(float(ce), rel=1e-6) and float(z_p) == pytest.approx(
        float(z), rel=1e-6
    )


@pytest.mark.parametrize("store", [False, True])
@pytest.mark.parametrize("chunk", [1, 4, 8, 24])
def test_fused_head_cross_entropy_matches_full_logits(chunk, store):
    """Value and gradients of the chunked LM-head CE equal the full-logits CE (padded vocab masked),
    whether the backward recomputes each block's logits or rescales the forward's saved exp blocks."""
    rng = np.random.default_rng(chunk)
    h = jnp.asarray(rng.normal(size=(2, 16, 8)), jnp.float32)
    w = jnp.asarray(rng.normal(size=(8, 24)), jnp.float32)
    ids = jnp.asarray(rng.integers(0, 20, (2, 16)), jnp.int32)

    def full(h, w):
        ce, z, _ = cross_entropy(jnp.einsum("bld,dv->blv", h, w), ids, 1e-2, vocab_size=20)
        return ce + z

    def fused(h, w):
        ce, z, _ = head_cross_entropy(h, w, ids, HeadLoss(1e-2, 20, chunk, store))
        return ce + z

    (va, ga), (vb, gb) = jax.value_and_grad(full, (0, 1))(h, w), jax.value_and_grad(fused, (0, 1))(h, w)
    assert float(vb) == pytest.approx(float(va), rel=1e-6)
    for a, b in zip(ga, gb):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(gb[1])[:, 20:], 0.0)  # padding columns get no gradient


def test_fused_head_cross_entropy_saved_blocks_survive_a_late_maximum():
    """The saved exp blocks are relative to the running max when they were made; a later block with a
    far larger logit must rescale them (exp(m - lse)), not leave them stale: both backward modes agree
    with the full-logits gradient when the largest logits sit in the last block."""
    rng = np.random.default_rng(7)
    h = jnp.asarray(rng.normal(size=(1, 12, 4)), jnp.float32)
    w = rng.normal(size=(4, 32)).astype(np.float32)
    w[:, 28:] *= 30.0  # the last block of 4 holds logits ~30x larger than every earlier block
    w = jnp.asarray(w)
    ids = jnp.asarray(rng.integers(0, 32, (1, 12)), jnp.int32)

    def full(w):
        ce, z, _ = cross_entropy(jnp.einsum("bld,dv->blv", h, w), ids, 1e-3)
        return ce + z

    want = np.asarray(jax.grad(full)(w))
    for store in (False, True):
        got = jax.grad(
            lambda w, store=store: sum(head_cross_entropy(h, w, ids, HeadLoss(1e-3, 32, 4, store))[:2])
        )(w)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("vocab_padding", ["olmo-core", "zero"])
@pytest.mark.parametrize("ce_chunk", [0, 8])
def test_training_loss_matches_olmo_core_over_the_padded_vocabulary(vocab_padding, ce_chunk):
    """The step's loss (CE sum + z-loss sum) equals OLMo-core's `cross_entropy_loss` (reduction sum, z-loss
    on) on the model's logits: all padded columns under vocab_padding="olmo-core" (OLMo-core keeps them in
    the softmax), the real vocabulary under "zero"."""
    from flax import nnx
    from olmo_core.nn.functional import cross_entropy_loss

    from olmax.model import init_model, tiny
    from olmax.train.step import make_loss_fn

    model_cfg = tiny(vocab_size=20, vocab_multiple=16, vocab_padding=vocab_padding)  # 32 columns
    optim_cfg = OptimConfig(z_loss=1e-2)
    model = init_model(model_cfg, seed=1)
    params = nnx.state(model).to_pure_dict()
    ids = np.random.default_rng(0).integers(0, 20, (2, 12)).astype(np.int32)
    total, (ce, z) = make_loss_fn(model_cfg, optim_cfg, ce_chunk)(params, {"input_ids": jnp.asarray(ids)})
    logits = np.asarray(model.head(model.hidden(jnp.asarray(ids)), padded=True))
    if vocab_padding == "zero":
        logits = logits[..., :20]
    want_ce, want_z = cross_entropy_loss(
        torch.tensor(logits[:, :-1].reshape(-1, logits.shape[-1])),
        torch.tensor(ids[:, 1:].reshape(-1), dtype=torch.long),
        reduction="sum",
        compute_z_loss=True,
        z_loss_multiplier=1e-2,
    )
    assert float(ce) == pytest.approx(float(want_ce), rel=1e-5)
    assert float(z) == pytest.approx(float(want_z), rel=1e-5)
    assert float(total) == pytest.approx(float(want_ce + want_z), rel=1e-5)


RECIPE_SCHEDULERS = {  # recipe -> the OLMo-core scheduler its official script builds, and Trainer.max_steps
    "olmo3_7b_stage1": ("CosWithWarmup", dict(warmup=2000, alpha_f=0.1), 1_192_093),
    "olmo3_7b_stage1_part2": ("HalfCosWithWarmup", dict(warmup=597_046, alpha_f=0.1), 1_668_931),
    "olmo3_7b_stage2": ("LinearWithWarmup", dict(warmup=0, alpha_f=0.0), 47_684),
    "olmo3_7b_stage3": ("LinearWithWarmup", dict(warmup=200, alpha_f=0.0), 11_921),
}


@pytest.mark.parametrize("recipe", sorted(RECIPE_SCHEDULERS))
def test_each_update_uses_olmo_core_lr_for_its_1_based_step(recipe):
    """The jitted train step that completes step s (1-based, as metrics.jsonl numbers it) runs at OLMo-core's
    `get_lr(lr, s, max_steps)`, OLMo-core's trainer having advanced global_step before the batch: checked at
    steps 1, 2, the end of warmup and the last step of each stage, with the recipe's own optimizer config."""
    import olmo_core.optim as core_optim

    from olmax.model import tiny
    from olmax.train.config import load_config
    from olmax.train.mesh import make_mesh
    from olmax.train.step import make_init, make_train_step

    cfg = load_config(recipe)
    name, kwargs, t_max = RECIPE_SCHEDULERS[recipe]
    assert cfg.optim.t_max == t_max
    ref = getattr(core_optim, name)(**kwargs)
    model_cfg = tiny(n_layers=1, layer_types=("full_attention",), scan_group=1)
    mesh = make_mesh(cfg.mesh, jax.devices()[:1])
    step_fn = make_train_step(
        model_cfg, cfg.optim, mesh, n_micro=1, per_device_batch=2, t_max=cfg.train.steps
    )
    batch = {"input_ids": jnp.asarray(np.random.default_rng(0).integers(0, 990, (2, 16)), jnp.int32)}
    checked = sorted({1, 2, max(cfg.optim.warmup_steps, 1), cfg.train.steps})
    init = make_init(model_cfg, cfg.optim, mesh, 0)
    for s in checked:
        state = {**jax.tree.map(jnp.copy, init), "step": jnp.asarray(s - 1, jnp.int32)}  # the step donates it
        _, m = step_fn(state, batch)
        want = ref.get_lr(cfg.optim.lr, s, t_max)
        assert float(m["lr"]) == pytest.approx(float(want), rel=2e-6, abs=1e-12), (recipe, s)

"""OLMo 3's optimizer: AdamW with the skip-step rule, global-norm clipping, LR schedules, z-loss CE.

Each piece mirrors OLMo-core (v3.0.0) arithmetic, written for JAX:
- schedules: `CosWithWarmup`, `HalfCosWithWarmup`, `LinearWithWarmup`, `ConstantWithWarmup`
  (`olmo_core/optim/scheduler.py`), evaluated at the 1-based global step of the update being taken
  (OLMo-core increments `trainer.global_step` before the batch; skipped steps still advance it);
- clipping: torch `clip_grads_with_norm_` (coefficient max_norm / (norm + 1e-6), capped at 1);
- `SkipStepAdamW` (`olmo_core/optim/adamw.py`): a step whose CE loss or pre-clip grad norm exceeds the
  mean of the previous (up to) 128 values by 6 unbiased standard deviations leaves params, moments and
  the Adam step count untouched; the rule is live once 64 values (the current one included) exist;
- weight decay is decoupled (p <- p - lr * wd * p) and masked off the embedding.
CE and z-loss live in `olmax.train.loss`. Everything here is a pure function of its inputs, so a resumed run recomputes the same numbers.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from olmax.train.config import OptimConfig

CLIP_EPS = 1e-6  # torch.nn.utils.clip_grads_with_norm_


# ----- learning-rate schedules (step -> lr), valid for Python ints and traced int arrays -----


def _where(c, a, b):
    return jnp.where(c, a, b) if isinstance(c, jax.Array) else (a if c else b)


def _cos(x):
    return jnp.cos(x) if isinstance(x, jax.Array) else math.cos(x)


def _warmup(peak: float, step, warmup: int, min_lr: float):
    return min_lr + (peak - min_lr) * (
        jnp.minimum(step, warmup) if isinstance(step, jax.Array) else min(step, warmup)
    ) / max(warmup, 1)


def learning_rate(cfg: OptimConfig, step, t_max: int):
    """LR at global step `step` under `cfg.schedule`: OLMo-core's `get_lr(lr, step, t_max)`, where the
    trainer's step is 1-based (the update that completes step s runs at s)."""
    lr, warmup, eta_min = cfg.lr, cfg.warmup_steps, cfg.lr * cfg.alpha_f
    t_max = cfg.t_max if cfg.t_max is not None else t_max
    if isinstance(step, jax.Array):
        step = step.astype(jnp.float32)
    if cfg.schedule == "constant":
        return _where(step < warmup, _warmup(lr, step, warmup, cfg.warmup_min_lr), lr)
    span = max(t_max - warmup, 1)
    current = step - warmup
    if cfg.schedule == "cosine":
        decayed = eta_min + (lr - eta_min) * (1 + _cos(math.pi * current / span)) / 2
        head = _warmup(lr, step, warmup, cfg.warmup_min_lr)
    elif cfg.schedule == "half_cosine":
        # the second half of a cosine whose first half ended at `warmup` (OLMo 3 stage 1 part 2);
        # the "warmup" ramps to the cosine's midpoint, as OLMo-core's HalfCosWithWarmup does
        decayed = eta_min + (lr - eta_min) * (1 + _cos(math.pi * (current + span) / (2 * span))) / 2
        head = _warmup(eta_min + (lr - eta_min) / 2, step, warmup, cfg.warmup_min_lr)
    elif cfg.schedule == "linear":
        decayed = lr - (lr - eta_min) * (current / span)
        head = _warmup(lr, step, warmup, cfg.warmup_min_lr)
    else:
        raise ValueError(f"unknown schedule {cfg.schedule!r}")
    return _where(step < warmup, head, _where(step >= t_max, eta_min, decayed))


def horizon_mismatch(cfg: OptimConfig, steps: int) -> dict | None:
    """What a run to step `steps` gets from a schedule whose horizon `optim.t_max` is another step, or None
    when they agree (t_max unset means train.steps; a constant schedule has no horizon): `{"steps",
    "t_max", "final_lr", "peak_lr", "end_lr", "aligns", "message"}`, where `final_lr` is the lr of the
    last step, `end_lr` the schedule's final value and `aligns` the override that makes them one."""
    if cfg.schedule == "constant" or not cfg.t_max or cfg.t_max == steps or steps <= 0:
        return None
    final = float(learning_rate(cfg, steps, cfg.t_max))
    end = cfg.lr * cfg.alpha_f
    aligns = f"optim.t_max={steps}"
    if steps < cfg.t_max:
        what = (
            f"train.steps {steps} stops before the lr schedule's horizon optim.t_max {cfg.t_max}: the last "
            f"step runs at lr {final:.3g} (peak {cfg.lr:.3g}), not at the schedule's final {end:.3g}, which "
            f"it reaches at step {cfg.t_max}"
        )
    else:
        what = (
            f"train.steps {steps} runs past the lr schedule's horizon optim.t_max {cfg.t_max}: steps "
            f"{cfg.t_max + 1}-{steps} all run at the schedule's final lr {end:.3g} (peak {cfg.lr:.3g})"
        )
    return {
        "steps": steps,
        "t_max": cfg.t_max,
        "final_lr": final,
        "peak_lr": cfg.lr,
        "end_lr": end,
        "aligns": aligns,
        "message": f"{what}; {aligns} aligns the schedule with --steps {steps} (or --steps {cfg.t_max})"
        + (
            "; a stop before the horizon on purpose (a hard stop, as OLMo 3's stage-1 recipes make) needs neither"
            if steps < cfg.t_max
            else ""
        ),
    }


def horizon_moved(cfg: OptimConfig, start: int, old_steps: int, new_steps: int) -> dict | None:
    """When `optim.t_max` is unset the horizon is train.steps, so a resume at `start` that changes
    train.steps from `old_steps` to `new_steps` moves the schedule under the run: `{"from_t_max",
    "to_t_max", "lr_before", "lr_after", "keeps", "message"}` (the lr of step start + 1 under each
    horizon, and the override that keeps the schedule the run had), or None when nothing moves."""
    if cfg.schedule == "constant" or cfg.t_max or not start or old_steps == new_steps:
        return None
    before = float(learning_rate(cfg, start + 1, old_steps))
    after = float(learning_rate(cfg, start + 1, new_steps))
    keeps = f"optim.t_max={old_steps}"
    return {
        "from_t_max": old_steps,
        "to_t_max": new_steps,
        "lr_before": before,
        "lr_after": after,
        "keeps": keeps,
        "message": f"optim.t_max is unset, so the lr schedule's horizon is train.steps and moves from "
        f"{old_steps} to {new_steps} on this resume: step {start + 1} runs at lr {after:.3g} where the "
        f"run's schedule gave {before:.3g}; {keeps} keeps the schedule the run had",
    }


# ----- AdamW with skip-step -----


def decay_mask(params: dict) -> dict:
    """True where weight decay applies: every parameter but the token embedding."""
    return {k: jax.tree.map(lambda _, decay=(k != "embed"): decay, v) for k, v in params.items()}


def init_opt_state(params: dict, window: int) -> dict:
    """Moments (fp32, shaped like params), the Adam step count, and the skip-step history."""
    zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
    return {
        "mu": zeros,
        "nu": jax.tree.map(jnp.copy, zeros),
        "count": jnp.zeros((), jnp.float32),
        "skip": {
            "loss": jnp.zeros((window,), jnp.float32),
            "grad_norm": jnp.zeros((window,), jnp.float32),
            "n": jnp.zeros((), jnp.int32),
        },
    }


def global_norm(tree: Any) -> jax.Array:
    return jnp.sqrt(sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in jax.tree.leaves(tree)))


def _mean_std(hist: jax.Array, valid: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Mean and unbiased std (torch.std_mean) of the valid entries of a ring buffer."""
    k = jnp.sum(valid).astype(jnp.float32)
    mean = jnp.sum(jnp.where(valid, hist, 0.0)) / jnp.maximum(k, 1.0)
    var = jnp.sum(jnp.where(valid, jnp.square(hist - mean), 0.0)) / jnp.maximum(k - 1.0, 1.0)
    return mean, jnp.sqrt(var)


def skip_decision(
    skip: dict, loss: jax.Array, grad_norm: jax.Array, cfg: OptimConfig
) -> tuple[jax.Array, dict]:
    """(step_factor 1.0 or 0.0, updated history) for this step's CE loss and pre-clip grad norm."""
    window = skip["loss"].shape[0]
    n = skip["n"]
    valid = jnp.arange(window) < jnp.minimum(n, window)
    loss_mean, loss_std = _mean_std(skip["loss"], valid)
    gn_mean, gn_std = _mean_std(skip["grad_norm"], valid)
    ok = jnp.logical_and(
        loss - loss_mean <= cfg.skip_sigma * loss_std, grad_norm - gn_mean <= cfg.skip_sigma * gn_std
    )
    # OLMo-core: inactive while fewer than max(2, window // 2) values (the current one included) exist
    active = (n + 1 >= max(2, window // 2)) & cfg.skip_steps
    factor = jnp.where(active, ok, True).astype(jnp.float32)
    slot = n % window
    new = {
        "loss": skip["loss"].at[slot].set(loss),
        "grad_norm": skip["grad_norm"].at[slot].set(grad_norm),
        "n": n + 1,
    }
    return factor, new


def adamw_update(
    params: dict, grads: dict, opt: dict, lr: jax.Array, cfg: OptimConfig, grad_norm: jax.Array | None = None
) -> tuple[dict, dict, jax.Array]:
    """Clip, then one AdamW step; returns (params, moments+count, pre-clip grad norm). No skip logic."""
    grad_norm = global_norm(grads) if grad_norm is None else grad_norm
    coef = jnp.minimum(cfg.max_grad_norm / (grad_norm + CLIP_EPS), 1.0)
    count = opt["count"] + 1.0
    bc1 = 1.0 - cfg.b1**count
    bc2 = 1.0 - cfg.b2**count

    def leaf(p, g, m, v, decay):
        # one pass per parameter: clipped grad, both moments and the decayed, updated weight
        g = g.astype(jnp.float32) * coef
        m = cfg.b1 * m + (1.0 - cfg.b1) * g
        v = cfg.b2 * v + (1.0 - cfg.b2) * jnp.square(g)
        wd = cfg.weight_decay if decay else 0.0
        update = (m / bc1) / (jnp.sqrt(v) / jnp.sqrt(bc2) + cfg.eps)
        return (p * (1.0 - lr * wd) - lr * update).astype(p.dtype), m, v

    out = jax.tree.map(leaf, params, grads, opt["mu"], opt["nu"], decay_mask(params))
    is_leaf = lambda x: isinstance(x, tuple)  # noqa: E731
    new_params, mu, nu = (jax.tree.map(lambda t, i=i: t[i], out, is_leaf=is_leaf) for i in range(3))
    return new_params, {**opt, "mu": mu, "nu": nu, "count": count}, grad_norm


def apply_update(
    params: dict, grads: dict, opt: dict, lr: jax.Array, loss: jax.Array, cfg: OptimConfig
) -> tuple[dict, dict, dict[str, jax.Array]]:
    """AdamW + skip-step: a skipped step keeps params, moments and count, but records its loss/norm.

    The skip decision needs only the loss and the pre-clip grad norm, so it is taken first and the
    update runs under `lax.cond`: a kept step is one fused pass per parameter, with no select over
    old and new copies of the weights and moments (which cost as much time and memory as the update).
    """
    grad_norm = global_norm(grads)
    factor, skip = skip_decision(opt["skip"], loss, grad_norm, cfg)
    moments = {k: opt[k] for k in ("mu", "nu", "count")}

    def take(params, moments):
        new_params, new_opt, _ = adamw_update(params, grads, moments, lr, cfg, grad_norm)
        return new_params, {k: new_opt[k] for k in ("mu", "nu", "count")}

    params, moments = jax.lax.cond(factor > 0, take, lambda p, m: (p, m), params, moments)
    return params, {**moments, "skip": skip}, {"grad_norm": grad_norm, "skipped": 1.0 - factor}

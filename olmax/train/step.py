"""The jitted train step: microbatched loss and gradients, AdamW + skip-step, metrics.

Contract. `state` is a plain pytree {params, opt, step, rng}; the step is a pure function of
(state, global batch), compiled once for a given mesh, so an uninterrupted run and a run restored
from a checkpoint of the same state compute bit-identical results on the same device layout. The
CE loss is the mean over all G * (L - 1) predicted tokens of the global batch: each microbatch's
gradient is that of its loss sum times 1 / (G * (L - 1)), and the microbatches' gradients add up
(OLMo-core normalizes by the batch's token count the same way); the reported losses are the sums,
divided once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from olmax.model import sharding
from olmax.model.model_config import ModelConfig
from olmax.model.transformer import Transformer
from olmax.train.config import ExperimentConfig, OptimConfig
from olmax.train.loss import HeadLoss, cross_entropy, head_cross_entropy
from olmax.train.mesh import BATCH_AXES, batch_sharding, replicated, state_shardings
from olmax.train.optim import apply_update, init_opt_state, learning_rate


def model_graphdef(cfg: ModelConfig) -> tuple[Any, dict]:
    """(graphdef, abstract params as a plain dict of ShapeDtypeStructs), without allocating weights."""
    abstract = nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0)))
    graphdef, params = nnx.split(abstract)
    return graphdef, params.to_pure_dict()


def init_state(model_cfg: ModelConfig, optim_cfg: OptimConfig, seed: int) -> dict:
    """A fresh train state (unsharded; call under jit with out_shardings to place it)."""
    model = Transformer(model_cfg, rngs=nnx.Rngs(seed))
    return _state_around(nnx.split(model)[1].to_pure_dict(), optim_cfg, seed)


def _state_around(params: dict, optim_cfg: OptimConfig, seed: int) -> dict:
    """A step-0 train state holding `params`: fresh optimizer moments and skip history, the data rng."""
    return {
        "params": params,
        "opt": init_opt_state(params, optim_cfg.skip_window),
        "step": jnp.zeros((), jnp.int32),
        "rng": jax.random.key_data(jax.random.key(seed)),
    }


def abstract_state(model_cfg: ModelConfig, optim_cfg: OptimConfig, mesh: Mesh) -> tuple[Any, Any]:
    """(ShapeDtypeStructs with shardings for the train state, the shardings tree)."""
    shapes = jax.eval_shape(lambda: init_state(model_cfg, optim_cfg, 0))
    shardings = state_shardings(shapes, mesh)
    abstract = jax.tree.map(
        lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes, shardings
    )
    return abstract, shardings


def make_init(model_cfg: ModelConfig, optim_cfg: OptimConfig, mesh: Mesh, seed: int) -> dict:
    """Initialise the train state directly in its FSDP shards."""
    _, shardings = abstract_state(model_cfg, optim_cfg, mesh)
    return jax.jit(lambda: init_state(model_cfg, optim_cfg, seed), out_shardings=shardings)()


def state_from_params(
    params: dict, model_cfg: ModelConfig, optim_cfg: OptimConfig, mesh: Mesh, seed: int
) -> dict:
    """A train state at step 0 around existing `params` (a fresh optimizer), in the train state's shards."""
    _, shardings = abstract_state(model_cfg, optim_cfg, mesh)
    return jax.jit(lambda p: _state_around(p, optim_cfg, seed), out_shardings=shardings)(params)


def default_ce_chunk() -> int:
    """Vocabulary columns per fused LM-head/CE block on the platform the step is built for: 100,352 =
    28 x 3,584 (best measured on CPU) = 7 x 14,336."""
    return 3584 if sharding.platform() == "cpu" else 14_336


def make_loss_fn(
    model_cfg: ModelConfig, optim_cfg: OptimConfig, ce_chunk: int | None = None
) -> Callable[[dict, jax.Array], tuple[jax.Array, tuple[jax.Array, jax.Array]]]:
    """loss(params, {input_ids[, segment_ids]}) -> (CE sum + z-loss sum, (CE sum, z-loss sum)), one microbatch."""
    graphdef, _ = model_graphdef(model_cfg)

    def loss_fn(params: dict, batch: dict) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        chunk = default_ce_chunk() if ce_chunk is None else ce_chunk  # when traced: the mesh's platform
        ids_BxL, segment_ids_BxL = batch["input_ids"], batch.get("segment_ids")
        label_mask_BxL = batch.get("label_mask")  # packed rows: padding predicts nothing
        model = nnx.merge(graphdef, params)
        h_BxLxD = model.hidden(ids_BxL, segment_ids_BxL)
        if chunk == 0:  # reference path: full (B, L, V) logits
            ce, z, _ = cross_entropy(
                model.head(h_BxLxD, padded=True),
                ids_BxL,
                optim_cfg.z_loss,
                model_cfg.loss_vocab,
                label_mask_BxL,
            )
        else:
            # the padded head; columns past loss_vocab (the real vocabulary under vocab_padding="zero") masked
            ce, z, _ = head_cross_entropy(
                h_BxLxD,
                params["lm_head"],
                ids_BxL,
                HeadLoss(optim_cfg.z_loss, model_cfg.loss_vocab, chunk),
                label_mask_BxL=label_mask_BxL,
            )
        return ce + z, (ce, z)

    return loss_fn


def run_train_step(
    cfg: ExperimentConfig, mesh: Mesh, n_micro: int, per_device_batch: int
) -> Callable[[dict, jax.Array], tuple[dict, dict]]:
    """The step a run of `cfg` executes on `mesh`: the trainer's and `olmax train --plan`'s, built in one place."""
    return make_train_step(
        cfg.model,
        cfg.optim,
        mesh,
        n_micro=n_micro,
        per_device_batch=per_device_batch,
        t_max=cfg.optim.t_max or cfg.train.steps,
        ce_chunk=cfg.train.ce_chunk,
    )


def make_train_step(
    model_cfg: ModelConfig,
    optim_cfg: OptimConfig,
    mesh: Mesh,
    *,
    n_micro: int,
    per_device_batch: int,
    t_max: int,
    ce_chunk: int | None = None,
) -> Callable[[dict, jax.Array], tuple[dict, dict]]:
    """jit(step)(state, batch) -> (state, metrics); `batch` maps input_ids (and, with document masks,
    segment_ids) to (G, L) global arrays; microbatch j takes b rows of every device."""
    _, shardings = abstract_state(model_cfg, optim_cfg, mesh)
    n_devices = mesh.size
    micro_sharding = NamedSharding(mesh, PartitionSpec(None, BATCH_AXES, None))
    loss_fn = make_loss_fn(model_cfg, optim_cfg, ce_chunk)

    def scaled_loss(params: dict, batch: dict, scale: float) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        # the 1 / token-count scale enters as the backward pass's seed, so the gradients come out already
        # divided (a separate division would be one more pass over every gradient: ~40 ms at 116 M params)
        total, aux = loss_fn(params, batch)
        return total * scale, aux

    grad_fn = jax.value_and_grad(scaled_loss, has_aux=True)

    def step(state: dict, batch: dict) -> tuple[dict, dict]:
        g_rows, seq = batch["input_ids"].shape
        params = state["params"]

        def split(a_GxL: jax.Array) -> jax.Array:
            # device k holds rows [k*G/D, (k+1)*G/D); microbatch j takes rows j*b..j*b+b-1 of each device
            a = a_GxL.reshape(n_devices, n_micro, per_device_batch, seq).swapaxes(0, 1)
            return jax.lax.with_sharding_constraint(
                a.reshape(n_micro, n_devices * per_device_batch, seq), micro_sharding
            )

        micro = {k: split(v) for k, v in batch.items()}
        # the global count of predicted tokens (OLMo-core divides the summed loss by it): every position but
        # each row's last, or, with a label mask, the labels it keeps
        mask = batch.get("label_mask")
        n_tokens = (
            float(g_rows * (seq - 1))
            if mask is None
            else jnp.maximum(jnp.sum(mask[:, 1:].astype(jnp.float32)), 1.0)
        )
        if n_micro == 1:
            (_, (ce, z)), grads = grad_fn(params, {k: v[0] for k, v in micro.items()}, 1.0 / n_tokens)
        else:

            def accumulate(carry, mb):
                g_acc, ce_acc, z_acc = carry
                (_, (ce, z)), g = grad_fn(params, mb, 1.0 / n_tokens)
                return (jax.tree.map(jnp.add, g_acc, g), ce_acc + ce, z_acc + z), None

            zeros = jax.tree.map(jnp.zeros_like, params)
            zero = jnp.zeros((), jnp.float32)
            (grads, ce, z), _ = jax.lax.scan(accumulate, (zeros, zero, zero), micro)
        loss, z_loss = ce / n_tokens, z / n_tokens
        # OLMo-core advances trainer.global_step before the update, so the update that completes step s
        # (1-based, as the metrics number it) uses the schedule at s: the first one is not at lr 0
        lr = learning_rate(optim_cfg, state["step"] + 1, t_max)
        new_params, new_opt, info = apply_update(params, grads, state["opt"], lr, loss, optim_cfg)
        new_state = {"params": new_params, "opt": new_opt, "step": state["step"] + 1, "rng": state["rng"]}
        metrics = {"loss": loss, "z_loss": z_loss, "lr": jnp.asarray(lr, jnp.float32), **info}
        return new_state, metrics

    metric_sharding = {k: replicated(mesh) for k in ("loss", "z_loss", "lr", "grad_norm", "skipped")}
    jitted = jax.jit(
        step,
        in_shardings=(shardings, batch_sharding(mesh)),
        out_shardings=(shardings, metric_sharding),
        donate_argnums=(0,),
    )
    return OnMesh(jitted, mesh)


class OnMesh:
    """A jitted function traced, lowered and run with its mesh set (`jax.set_mesh`): kernels that run per
    device (splash attention's `shard_map`) read the mesh from there, and the platform choices read the
    mesh's devices (`olmax.model.sharding.platform`). With `compiled` (an executable of `lower(...).compile()`,
    `with_compiled`) calls run it instead of compiling again."""

    def __init__(self, jitted: Callable, mesh: Mesh, compiled: Any = None):
        self.jitted, self.mesh, self.compiled = jitted, mesh, compiled

    def __call__(self, *args: Any) -> Any:
        with jax.set_mesh(self.mesh):
            return (self.jitted if self.compiled is None else self.compiled)(*args)

    def with_compiled(self, compiled: Any) -> OnMesh:
        return OnMesh(self.jitted, self.mesh, compiled)

    def lower(self, *args: Any) -> Any:
        """`jax.jit(...).lower` under the mesh (ahead-of-time compiles, memory plans)."""
        with jax.set_mesh(self.mesh):
            return self.jitted.lower(*args)

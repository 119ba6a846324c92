"""An olmax model on an eval mesh, and the jitted kernels the scoring runs on it (olmax.evals.scoring).

`EvalModel` is a model config at the compute dtype (remat off: olmax.evals.eval_mesh.eval_config), its
parameters as a plain dict of arrays in their FSDP shardings on a (data, fsdp) mesh, and the mesh.
`as_eval_model` makes one from an olmax Transformer wherever its parameters are (the trainer's in-loop
eval passes one on the trainer's mesh), moving them only when they are not in the mesh's shardings.

Each kernel (`compiled_step`: score, token_stats, choices, greedy, logits) is jitted per (config, mesh) and
traced, lowered and run under the mesh (`jax.set_mesh`, as the trainer's step: the splash kernel's
per-device `shard_map` reads it there), its batch rows split over every device of the mesh. What depends on
the hardware (the attention kernel `auto` names, the head's block width) is resolved for the platform of
that mesh (olmax.model.sharding), so a plan compiled on this host for a TPU topology holds the TPU's
kernel. The held-out score and the
Min-K%++ statistics read the LM head in vocabulary blocks (olmax.evals.head): no (L, V) logits of a row
exist at once; a choice's log-probabilities and the next greedy token take the hidden state of one
position per row through the head.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from olmax.evals.eval_mesh import eval_config, param_shardings
from olmax.evals.head import token_moments, token_scores
from olmax.model.sharding import BATCH_AXES
from olmax.train.step import OnMesh, default_ce_chunk, model_graphdef


@dataclass(frozen=True, eq=False)
class EvalModel:
    """A model on an eval mesh: its config, its parameters in their shards, the mesh."""

    cfg: Any  # olmax.model.model_config.ModelConfig at the compute dtype, remat off
    params: dict  # plain dict of arrays, in `param_shardings(cfg, mesh)`
    mesh: Mesh

    def __call__(self, input_ids_BxL: Any) -> jax.Array:
        """Full fp32 logits (B, L, V) over the real vocabulary (the scoring kernels never form them)."""
        ids = np.asarray(input_ids_BxL, np.int32)
        rows = rows_per_batch(ids.shape[0], self.mesh)
        padded = np.concatenate([ids, np.repeat(ids[-1:], rows - ids.shape[0], axis=0)])
        out = compiled_step("logits", self)(self.params, on_rows(self.mesh, padded, np.int32))
        return out[: ids.shape[0]]


def mesh_of(params: dict) -> Mesh:
    """The mesh parameters live on: their NamedSharding's, else a 1 x 1 mesh of the one device holding them."""
    leaf = jax.tree.leaves(params)[0]
    sharding = getattr(leaf, "sharding", None)
    if isinstance(sharding, NamedSharding) and isinstance(sharding.mesh, Mesh):
        mesh = sharding.mesh
        if tuple(mesh.axis_names) == BATCH_AXES:
            return mesh
    device = next(iter(sharding.device_set)) if sharding is not None else jax.devices()[0]
    return Mesh(np.asarray([device], dtype=object).reshape(1, 1), BATCH_AXES)


def as_eval_model(model: Any, mesh: Mesh | None = None, dtype: str | None = None) -> EvalModel:
    """An olmax Transformer (or an EvalModel) on `mesh` (default: where its parameters are, as the
    trainer's in-loop eval passes them), its parameters moved into the mesh's shardings when elsewhere."""
    if isinstance(model, EvalModel):
        cfg, params = model.cfg, model.params
    else:
        cfg, params = model.cfg, nnx.split(model)[1].to_pure_dict()
    cfg = eval_config(cfg, dtype)
    if mesh is None:
        mesh = mesh_of(params)
    shardings = param_shardings(cfg, mesh)
    placed = jax.tree.map(
        lambda a, s: a if getattr(a, "sharding", None) == s else jax.device_put(a, s), params, shardings
    )
    return EvalModel(cfg, placed, mesh)


@functools.lru_cache(maxsize=32)
def _graphdef(cfg: Any) -> Any:
    return model_graphdef(cfg)[0]


def _hidden(cfg: Any, params: dict, ids_BxL: jax.Array) -> jax.Array:
    return nnx.merge(_graphdef(cfg), params).hidden(ids_BxL)


def _head_at(cfg: Any, params: dict, h_BxD: jax.Array) -> jax.Array:
    """fp32 logits over the real vocabulary of one position per row."""
    w_DxV = params["lm_head"][:, : cfg.vocab_size].astype(h_BxD.dtype)
    return jnp.einsum("bd,dv->bv", h_BxD, w_DxV, preferred_element_type=jnp.float32)


def _mesh_scores(cfg, params, inputs_BxL, targets_BxL, mask_BxL):
    b, seq = inputs_BxL.shape
    h_NxD = _hidden(cfg, params, inputs_BxL).reshape(b * seq, -1)
    nll, greedy = token_scores(
        h_NxD, params["lm_head"], targets_BxL.reshape(-1), cfg.vocab_size, default_ce_chunk()
    )
    nll_BxL, greedy_BxL = nll.reshape(b, seq), greedy.reshape(b, seq)
    return (
        jnp.sum(nll_BxL * mask_BxL, axis=-1),
        jnp.sum(mask_BxL, axis=-1),
        jnp.all(greedy_BxL | (mask_BxL == 0), axis=-1),
    )


def _mesh_token_stats(cfg, params, inputs_BxL, targets_BxL):
    b, seq = inputs_BxL.shape
    h_NxD = _hidden(cfg, params, inputs_BxL).reshape(b * seq, -1)
    targets_N = targets_BxL.reshape(-1)
    out = token_moments(h_NxD, params["lm_head"], targets_N, cfg.vocab_size, default_ce_chunk())
    return tuple(x.reshape(b, seq) for x in out)


def _mesh_choices(cfg, params, inputs_BxL, pos_B, cand_BxC):
    h_BxD = _hidden(cfg, params, inputs_BxL)[jnp.arange(inputs_BxL.shape[0]), pos_B]
    return jnp.take_along_axis(jax.nn.log_softmax(_head_at(cfg, params, h_BxD), axis=-1), cand_BxC, axis=-1)


def _mesh_greedy(cfg, params, buf_BxT, cursor_B, n_new):
    rows_B = jnp.arange(buf_BxT.shape[0])

    def step(_, carry):
        buf, cur = carry
        h_BxD = _hidden(cfg, params, buf)[rows_B, cur - 1]
        nxt_B = jnp.argmax(_head_at(cfg, params, h_BxD), axis=-1).astype(buf.dtype)
        return buf.at[rows_B, cur].set(nxt_B), cur + 1

    buf, _ = jax.lax.fori_loop(0, n_new, step, (buf_BxT, cursor_B))
    return buf


def _mesh_logits(cfg, params, inputs_BxL):
    return nnx.merge(_graphdef(cfg), params)(inputs_BxL)


_MESH_KERNELS = {
    "score": _mesh_scores,
    "token_stats": _mesh_token_stats,
    "choices": _mesh_choices,
    "greedy": _mesh_greedy,
    "logits": _mesh_logits,
}


@functools.lru_cache(maxsize=32)
def _mesh_jitted(kind: str, cfg: Any, mesh: Mesh) -> Callable:
    core = functools.partial(_MESH_KERNELS[kind], cfg)
    # per-row results come back whole on every device (a few numbers a row), so each process of a
    # multi-host mesh (the trainer's in-loop eval on a pod slice) reads them all; logits stay split
    out = None if kind == "logits" else NamedSharding(mesh, PartitionSpec())
    return OnMesh(jax.jit(core, static_argnums=(3,) if kind == "greedy" else (), out_shardings=out), mesh)


def compiled_step(kind: str, model: EvalModel) -> Callable:
    """The jitted kernel `kind` (score, token_stats, choices, greedy, logits) of `model`: `fn(params,
    *batch)`, traced, run (and `.lower`ed, for an ahead-of-time plan) under the mesh, so the attention
    kernel and the head's block width are those of the mesh's platform."""
    return _mesh_jitted(kind, model.cfg, model.mesh)


def rows_per_batch(batch_size: int, mesh: Mesh) -> int:
    """Rows a batch holds on `mesh`: `batch_size` rounded up to a multiple of its device count."""
    return -(-max(1, batch_size) // mesh.size) * mesh.size


def on_rows(mesh: Mesh, a: np.ndarray, dtype) -> jax.Array:
    """A batch array placed with its rows split over every device of the mesh."""
    spec = PartitionSpec(BATCH_AXES, *([None] * (a.ndim - 1)))
    return jax.device_put(np.asarray(a, dtype), NamedSharding(mesh, spec))

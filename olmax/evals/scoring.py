"""Jitted scoring and greedy decoding, batched, over an olmax model on its eval mesh (or any callable).

Contract: `score` returns, per row, the summed negative log-likelihood (nats, fp32 reductions) of the
masked targets, the number of masked targets, and whether every masked target is the argmax. Rows are
processed in fixed-size batches (the last one padded with dummy rows), so a set compiles once per
(batch, L). Deterministic for fixed inputs and parameters.

An olmax model (an `EvalModel`, or a Transformer taken where its parameters are: the trainer's in-loop eval
passes one on the trainer's mesh) runs sharded over its mesh, through the kernels of olmax.evals.eval_model
(the LM head read in vocabulary blocks; no (L, V) logits of a row at once); a batch's rows split over the
mesh's devices, so a batch is rounded up to a multiple of their count. Compiled functions are cached per
(model config, mesh), so the trainer calling this every N steps with new parameters does not recompile.
Any other callable `model(input_ids_BxL) -> logits_BxLxV` is scored from its full logits on the default
device (the reference path). Each batch is dispatched before the previous one's results are read.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from olmax.errors import OlmaxError
from olmax.evals.eval_mesh import eval_config, eval_mesh
from olmax.evals.eval_model import EvalModel, as_eval_model, compiled_step, on_rows, rows_per_batch
from olmax.model import from_hf, load_olmax
from olmax.train.export import run_checkpoint


def load_model(
    path: str | os.PathLike, dtype: str | None = None, mesh: str | Mesh | None = None
) -> EvalModel:
    """An olmax model on an eval mesh (`mesh`: a Mesh, a --mesh spec, None for auto) from an HF checkpoint
    dir (config.json + safetensors), an olmax one (model_config.json + params/), a training run folder (its
    newest checkpoint) or one of its `checkpoints/<step>` folders. `dtype`: the compute dtype (default: a
    run's own, else float32). A run's parameters are restored straight into their shards; an HF or olmax
    folder is read onto one device, then sharded."""
    p = Path(path)
    if (found := run_checkpoint(p)) is not None:
        from olmax.evals.run_dir import load_run_model

        return load_run_model(*found, dtype, mesh)[0]
    if (p / "config.json").is_file():
        model = from_hf(p, dtype=dtype or "float32")
    elif (p / "model_config.json").is_file():
        model = load_olmax(p, dtype=dtype or "float32")
    else:
        raise OlmaxError(
            f"{p}: not an HF checkpoint (config.json + *.safetensors), an olmax one "
            "(model_config.json + params/), a training run folder (config.yaml + checkpoints/) or "
            "one of its checkpoints/<step> folders"
        )
    cfg = eval_config(model.cfg)
    return as_eval_model(model, mesh if isinstance(mesh, Mesh) else eval_mesh(mesh, cfg))


# ------------------------------------------------------------------ the reference path: any callable


def _row_scores(model, inputs_BxL: jax.Array, targets_BxL: jax.Array, mask_BxL: jax.Array):
    logits_BxLxV = model(inputs_BxL).astype(jnp.float32)
    lse_BxL = jax.nn.logsumexp(logits_BxLxV, axis=-1)
    target_BxL = jnp.take_along_axis(logits_BxLxV, targets_BxL[..., None], axis=-1)[..., 0]
    nll_B = jnp.sum((lse_BxL - target_BxL) * mask_BxL, axis=-1)
    greedy_B = jnp.all((jnp.argmax(logits_BxLxV, axis=-1) == targets_BxL) | (mask_BxL == 0), axis=-1)
    return nll_B, jnp.sum(mask_BxL, axis=-1), greedy_B


def _token_stats(model, inputs_BxL: jax.Array, targets_BxL: jax.Array):
    """Per position: the target's log-probability, and the mean and standard deviation of the log-probability
    under the model's own next-token distribution (what Min-K%++ standardises the target's by)."""
    logp_BxLxV = jax.nn.log_softmax(model(inputs_BxL).astype(jnp.float32), axis=-1)
    target_BxL = jnp.take_along_axis(logp_BxLxV, targets_BxL[..., None], axis=-1)[..., 0]
    p_BxLxV = jnp.exp(logp_BxLxV)
    mean_BxL = jnp.sum(p_BxLxV * logp_BxLxV, axis=-1)
    var_BxL = jnp.sum(p_BxLxV * jnp.square(logp_BxLxV), axis=-1) - jnp.square(mean_BxL)
    return target_BxL, mean_BxL, jnp.sqrt(jnp.maximum(var_BxL, 0.0))


def _choice_logprobs(model, inputs_BxL: jax.Array, pos_B: jax.Array, cand_BxC: jax.Array):
    logits_BxLxV = model(inputs_BxL).astype(jnp.float32)
    at_BxV = logits_BxLxV[jnp.arange(inputs_BxL.shape[0]), pos_B]
    return jnp.take_along_axis(jax.nn.log_softmax(at_BxV, axis=-1), cand_BxC, axis=-1)


def _greedy(model, buf_BxT: jax.Array, cursor_B: jax.Array, n_new: int):
    rows_B = jnp.arange(buf_BxT.shape[0])

    def step(_, carry):
        buf, cur = carry
        logits_BxTxV = model(buf)
        nxt_B = jnp.argmax(logits_BxTxV[rows_B, cur - 1], axis=-1).astype(buf.dtype)
        return buf.at[rows_B, cur].set(nxt_B), cur + 1

    buf, _ = jax.lax.fori_loop(0, n_new, step, (buf_BxT, cursor_B))
    return buf


_CALLABLE_KERNELS = {
    "score": _row_scores,
    "greedy": _greedy,
    "token_stats": _token_stats,
    "choices": _choice_logprobs,
}


# ------------------------------------------------------------------ binding a model to a kernel


class _Bound:
    """A model bound to one kernel: `run(*batch)` dispatches a batch (numpy arrays, with their dtypes) and
    returns its device outputs; `rows(batch_size)` is how many rows a batch must hold."""

    def __init__(self, model: Any, kind: str):
        self.kind = kind
        if isinstance(model, EvalModel) or _is_transformer(model):
            self.model: EvalModel | None = as_eval_model(model)
            self.callable = None
        else:
            self.model = None
            self.callable = jax.jit(
                functools.partial(_CALLABLE_KERNELS[kind], model),
                static_argnums=(2,) if kind == "greedy" else (),
            )

    def rows(self, batch_size: int) -> int:
        return batch_size if self.model is None else rows_per_batch(batch_size, self.model.mesh)

    def run(self, *batch: tuple[np.ndarray, Any], static: Any = None) -> Any:
        extra = () if static is None else (static,)
        if self.model is None:
            return self.callable(*(jnp.asarray(a, t) for a, t in batch), *extra)
        mesh = self.model.mesh
        fn = compiled_step(self.kind, self.model)
        return fn(self.model.params, *(on_rows(mesh, a, t) for a, t in batch), *extra)


def _is_transformer(model: Any) -> bool:
    from olmax.model.transformer import Transformer

    return isinstance(model, Transformer)


def _progress(total: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="row", disable=not enabled, leave=False)


def batches(batch_size: int, *arrays: np.ndarray) -> Iterator[tuple[int, int, list[np.ndarray]]]:
    """(start, stop, [each array's rows start:stop]) over the rows of `arrays`, the last batch padded to
    `batch_size` with copies of its last row, so every batch has one shape and compiles once."""
    n = arrays[0].shape[0]
    for start in range(0, n, batch_size):
        stop = min(start + batch_size, n)
        pad = batch_size - (stop - start)
        yield (
            start,
            stop,
            [
                np.concatenate([a[start:stop], np.repeat(a[stop - 1 : stop], pad, axis=0)])
                if pad
                else a[start:stop]
                for a in arrays
            ],
        )


def _each_batch(
    bound: _Bound, batch_size: int, arrays: list[tuple[np.ndarray, Any]], static: Any = None
) -> Iterator[tuple[int, int, tuple[np.ndarray, ...]]]:
    """(start, stop, outputs as numpy) per batch; the next batch is dispatched before the previous one's
    outputs are read, so the devices never wait for the host between batches."""
    pending = None
    for start, stop, rows in batches(bound.rows(batch_size), *(a for a, _ in arrays)):
        out = bound.run(*zip(rows, (t for _, t in arrays)), static=static)
        if pending is not None:
            yield pending[0], pending[1], tuple(np.asarray(x) for x in pending[2])
        pending = (start, stop, out if isinstance(out, tuple) else (out,))
    if pending is not None:
        yield pending[0], pending[1], tuple(np.asarray(x) for x in pending[2])


def score(
    model,
    inputs: np.ndarray,
    targets: np.ndarray,
    mask: np.ndarray,
    batch_size: int = 8,
    progress: bool = False,
    desc: str = "score",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(nll (N,) float64, n_targets (N,) int64, all_greedy (N,) bool) for N rows, `batch_size` at a time."""
    n = inputs.shape[0]
    bound = _Bound(model, "score")
    nll, count, greedy = np.zeros(n), np.zeros(n, np.int64), np.zeros(n, bool)
    arrays = [(inputs, np.int32), (targets, np.int32), (mask, np.float32)]
    with _progress(n, desc, progress) as bar:
        for start, stop, (nll_b, count_b, greedy_b) in _each_batch(bound, batch_size, arrays):
            nll[start:stop] = nll_b[: stop - start]
            count[start:stop] = count_b[: stop - start]
            greedy[start:stop] = greedy_b[: stop - start]
            bar.update(stop - start)
    return nll, count, greedy


def token_stats(
    model, inputs: np.ndarray, targets: np.ndarray, batch_size: int = 8
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(log p(target), mean log p, std log p) per position, float32 (N, L) each, `batch_size` rows at a time;
    the mean and std are over the model's next-token distribution at that position."""
    bound = _Bound(model, "token_stats")
    out = [np.zeros(inputs.shape, np.float32) for _ in range(3)]
    for start, stop, res in _each_batch(bound, batch_size, [(inputs, np.int32), (targets, np.int32)]):
        for o, r in zip(out, res):
            o[start:stop] = r[: stop - start]
    return out[0], out[1], out[2]


def choice_logprobs(
    model,
    inputs: np.ndarray,
    positions: np.ndarray,
    candidates: np.ndarray,
    batch_size: int = 8,
    progress: bool = False,
    desc: str = "choices",
) -> np.ndarray:
    """(N, C) float32: log p(candidates[i, c] | inputs[i, : positions[i] + 1]), one forward per row."""
    n = inputs.shape[0]
    bound = _Bound(model, "choices")
    out = np.zeros(candidates.shape, np.float32)
    arrays = [(inputs, np.int32), (positions, np.int32), (candidates, np.int32)]
    with _progress(n, desc, progress) as bar:
        for start, stop, (res,) in _each_batch(bound, batch_size, arrays):
            out[start:stop] = res[: stop - start]
            bar.update(stop - start)
    return out


def greedy_generate(
    model, prompts: list[list[int]], max_new_tokens: int, pad_id: int, batch_size: int = 8, bucket: int = 64
) -> list[list[int]]:
    """Greedy continuations of `max_new_tokens` tokens for each prompt (full forward per token, no KV cache).

    Rows of different prompt lengths decode together: each row writes at its own cursor, and causal
    attention means the padding after a cursor never reaches it.
    """
    if max_new_tokens <= 0:
        return [[] for _ in prompts]
    if any(not p for p in prompts):
        raise OlmaxError("greedy_generate needs a non-empty prompt per row (prefix it with EOS)")
    bound = _Bound(model, "greedy")
    rows = bound.rows(batch_size)
    out: list[list[int]] = []
    for start in range(0, len(prompts), rows):
        group = prompts[start : start + rows]
        longest = max(len(p) for p in group) + max_new_tokens
        t = -(-longest // bucket) * bucket
        buf = np.full((rows, t), pad_id, np.int32)
        cur = np.ones(rows, np.int32)
        for i, p in enumerate(group):
            buf[i, : len(p)] = p
            cur[i] = len(p)
        res = np.asarray(bound.run((buf, np.int32), (cur, np.int32), static=int(max_new_tokens)))
        out.extend(res[i, cur[i] : cur[i] + max_new_tokens].tolist() for i in range(len(group)))
    return out

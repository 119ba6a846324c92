"""Jitted scoring and greedy decoding over any `model(input_ids_BxL) -> logits_BxLxV`, batched.

Contract: `score` returns, per row, the summed negative log-likelihood (nats, fp32 reductions) of the
masked targets, the number of masked targets, and whether every masked target is the argmax. Rows are
processed in fixed-size batches (the last one padded with dummy rows), so a set compiles once per
(batch, L). Compiled functions are cached per model graph, so the trainer calling this every N steps
with new parameters does not recompile. Deterministic for fixed inputs and parameters.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from olmax.errors import OlmaxError
from olmax.evals.run_dir import load_run_model
from olmax.model import from_hf, load_olmax
from olmax.train.export import run_checkpoint


def load_model(path: str | os.PathLike, dtype: str = "float32"):
    """An olmax model from an HF checkpoint dir (config.json + safetensors), an olmax one
    (model_config.json + params/), a training run folder (its newest checkpoint) or one of its
    `checkpoints/<step>` folders."""
    p = Path(path)
    if (p / "config.json").is_file():
        return from_hf(p, dtype=dtype)
    if (p / "model_config.json").is_file():
        return load_olmax(p, dtype=dtype)
    if (found := run_checkpoint(p)) is not None:
        return load_run_model(*found, dtype)[0]
    raise OlmaxError(
        f"{p}: not an HF checkpoint (config.json + *.safetensors), an olmax one "
        "(model_config.json + params/), a training run folder (config.yaml + checkpoints/) or "
        "one of its checkpoints/<step> folders"
    )


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


def _kernel(kind: str) -> Callable:
    """The per-batch function behind each public entry point."""
    return {
        "score": _row_scores,
        "greedy": _greedy,
        "token_stats": _token_stats,
        "choices": _choice_logprobs,
    }[kind]


@functools.lru_cache(maxsize=16)
def _jitted(kind: str, graphdef) -> Callable:
    core = _kernel(kind)
    static = (3,) if kind == "greedy" else ()
    return jax.jit(lambda state, *a: core(nnx.merge(graphdef, state), *a), static_argnums=static)


def _bind(model, kind: str) -> Callable:
    """`fn(*args)` running `kind` on `model`; nnx modules are split so the compile is reused across params."""
    if isinstance(model, nnx.Module):
        graphdef, state = nnx.split(model)
        fn = _jitted(kind, graphdef)
        return lambda *a: fn(state, *a)
    core = _kernel(kind)
    return jax.jit(functools.partial(core, model), static_argnums=(2,) if kind == "greedy" else ())


def _progress(total: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="row", disable=not enabled, leave=False)


def batches(batch_size: int, *arrays: np.ndarray):
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
    fn = _bind(model, "score")
    nll, count, greedy = np.zeros(n), np.zeros(n, np.int64), np.zeros(n, bool)
    with _progress(n, desc, progress) as bar:
        for start, stop, batch in batches(batch_size, inputs, targets, mask):
            out = fn(
                jnp.asarray(batch[0], jnp.int32),
                jnp.asarray(batch[1], jnp.int32),
                jnp.asarray(batch[2], jnp.float32),
            )
            nll_b, count_b, greedy_b = (np.asarray(x) for x in out)
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
    fn = _bind(model, "token_stats")
    out = [np.zeros(inputs.shape, np.float32) for _ in range(3)]
    for start, stop, batch in batches(batch_size, inputs, targets):
        res = fn(jnp.asarray(batch[0], jnp.int32), jnp.asarray(batch[1], jnp.int32))
        for o, r in zip(out, res):
            o[start:stop] = np.asarray(r)[: stop - start]
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
    fn = _bind(model, "choices")
    out = np.zeros(candidates.shape, np.float32)
    with _progress(n, desc, progress) as bar:
        for start, stop, batch in batches(batch_size, inputs, positions, candidates):
            res = fn(*(jnp.asarray(b, jnp.int32) for b in batch))
            out[start:stop] = np.asarray(res)[: stop - start]
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
    fn = _bind(model, "greedy")
    out: list[list[int]] = []
    for start in range(0, len(prompts), batch_size):
        rows = prompts[start : start + batch_size]
        longest = max(len(p) for p in rows) + max_new_tokens
        t = -(-longest // bucket) * bucket
        buf = np.full((batch_size, t), pad_id, np.int32)
        cur = np.ones(batch_size, np.int32)
        for i, p in enumerate(rows):
            buf[i, : len(p)] = p
            cur[i] = len(p)
        res = np.asarray(fn(jnp.asarray(buf), jnp.asarray(cur), int(max_new_tokens)))
        out.extend(res[i, cur[i] : cur[i] + max_new_tokens].tolist() for i in range(len(rows)))
    return out

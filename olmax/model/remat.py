"""Activation rematerialisation: which of a layer's activations the backward pass keeps, by name.

Each layer's forward tags its large intermediates with `tag` (a `checkpoint_name`): the q, k and v
projections (before QK-norm and RoPE), the attention output and its log-sum-exp (`context`: the splash
kernel tags them itself, `olmax.model.attention_splash.RESIDUAL_NAME`), the output projection (`o`), and
the MLP's gate, up and down projections. A policy names what to keep; everything else a layer's backward
needs (norms, RoPE, SiLU, the residual adds, any matmul not kept) is recomputed from the layer's input.

`model.remat` takes:
- `none`: keep everything (no remat);
- `full`: keep nothing but the layer's input, recompute the whole layer;
- `dots` / `dots_no_batch`: JAX's policies that keep every matmul output (with / without batch dims);
- `save:NAME,NAME,...`: keep exactly these names (any of NAMES);
- a preset below, a `save:` list under a name;
- `auto`: resolved before the step is built (`olmax.train.plan.choose`): the first policy of `LADDER` (and
  per-device batch) whose compiled step fits the chip's memory.

What a kept name costs per layer and token (bf16 compute): q/k/v/o/down d_model x 2 bytes each (8 KiB at
d 4096), gate/up mlp_hidden x 2 bytes (21.5 KiB at 11,008), context d_model x 2 bytes + 4 bytes per head;
the layer's input (d_model x 2 bytes) is kept by every policy but `none`. What a name not kept costs is
its recompute: the backward pass needs every matmul's output (each feeds a norm, the SiLU, the attention
kernel or the next matmul's weight gradient), so each one not kept runs again, and the attention forward
runs again unless `context` is kept. Both are counted for a model config in olmax.model.flops
(`kept_bytes_per_token`, `recompute_flops`), which imports this module: this one needs no config. Per byte
kept, `down` saves the most (its matmul is mlp_hidden wide, its output d_model), then `context` (the
attention forward), then the rest alike; on the chip, keeping more than `context` and `down` bought less
than it cost (`LADDER`).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
from jax.ad_checkpoint import checkpoint_name

from olmax.errors import OlmaxError

NAMES = ("q", "k", "v", "context", "o", "gate", "up", "down")

AUTO = "auto"

PRESETS: dict[str, tuple[str, ...]] = {
    # every matmul and the attention output kept: the backward recomputes elementwise work only
    "matmuls": NAMES,
    # the up projection recomputed (one d x mlp_hidden matmul a layer) for 21.5 KiB a token less
    "matmuls_but_up": ("q", "k", "v", "context", "o", "gate", "down"),
    # the attention output only: projections and MLP recomputed, attention not (fits the most layers)
    "context": ("context",),
}

_JAX_POLICIES = {
    "full": None,
    "dots": jax.checkpoint_policies.dots_saveable,
    "dots_no_batch": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


def tag(x: jax.Array, name: str) -> jax.Array:
    """Name `x` for the remat policy (an identity otherwise)."""
    return checkpoint_name(x, name)


def saved_names(spec: str) -> tuple[str, ...] | None:
    """The names a `save:` spec or a preset keeps; None for `none`, `full` and JAX's policies."""
    if spec in PRESETS:
        return PRESETS[spec]
    if spec.startswith("save:"):
        return tuple(n.strip() for n in spec[len("save:") :].split(",") if n.strip())
    return None


# `auto`'s candidates, fastest first. Measured per chip on a v5e at the 7B's shapes (bench/results/
# tpu_slice.json: 32 layers and the real head, seq 8192): `save:context,down` at one row a microbatch
# 60.0% MFU, `save:context,o,down` 56.9%, `full` at two rows 54.3% -- keeping `o` costs more than its
# recompute (a d_model-square matmul) saves, and `down` and the attention output are the two names worth
# their bytes. Above them, the policies that keep more (none of which fits a 7B on a 16 GiB chip);
# below, `save:down` and `context` (16 KiB a token and layer, `save:down` recomputing less).
LADDER = (
    "none",
    "matmuls",
    "matmuls_but_up",
    "save:context,down",
    "save:down",
    "context",
    "full",
)


def check(spec: str) -> None:
    """Raise an OlmaxError naming the fix if `spec` is not a remat policy."""
    names = saved_names(spec)
    if names is None:
        if spec in ("none", AUTO, *_JAX_POLICIES):
            return
        raise OlmaxError(
            f"model.remat {spec!r} is not a remat policy; use auto, none, full, dots, dots_no_batch, "
            f"{', '.join(PRESETS)} or save:NAME,... with names from {', '.join(NAMES)}"
        )
    unknown = [n for n in names if n not in NAMES]
    if unknown or not names:
        raise OlmaxError(
            f"model.remat {spec!r}: {'unknown name(s) ' + ', '.join(unknown) if unknown else 'no names'}; "
            f"save: takes names from {', '.join(NAMES)}"
        )


def policy(spec: str) -> Callable | None:
    """The `jax.checkpoint` policy of a spec other than `none` (None: save nothing); `auto`, which a train
    step resolves before it is built (olmax.train.plan.choose), reads as `full` anywhere else."""
    check(spec)
    if spec == AUTO:  # unresolved (a forward pass, say, where remat changes nothing): the least memory
        spec = "full"
    names = saved_names(spec)
    if names is None:
        return _JAX_POLICIES[spec]
    return jax.checkpoint_policies.save_only_these_names(*names)


def describe(spec: str) -> str:
    """A one-line account of a spec, as the trainer prints it."""
    names = saved_names(spec)
    if spec == "none":
        return "none (every activation kept)"
    if spec == "full":
        return "full (each layer recomputed from its input)"
    if spec == AUTO:
        return "auto (the fastest policy whose step fits the chip, chosen at start)"
    if names is None:
        return f"{spec} (JAX's checkpoint policy)"
    return f"{spec} (keeps {', '.join(names)}; the rest recomputed)"


def kept_names(spec: str) -> set[str]:
    """The names a policy keeps (`none`: all of them; `full` and unresolved `auto`: none)."""
    if spec == "none":
        return set(NAMES)
    if spec in ("full", AUTO):
        return set()
    names = saved_names(spec)
    if names is None:  # JAX's dots policies keep every matmul output
        return set(NAMES) - {"context"}
    return set(names)

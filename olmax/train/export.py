"""A training run's checkpoint as a model: read in place (evals) or exported as an HF checkpoint.

`run_checkpoint(path)` recognises a run folder (`config.yaml` + `checkpoints/`, meaning its newest
complete checkpoint) or one of its `checkpoints/<step>` folders. `restore_run_model` reads the params
of that step (and the loader state and metadata saved with it) into an olmax model, whatever the mesh
the run trained on, onto one device or straight into the shards of another mesh. `export_hf` writes it as an HF `Olmo3ForCausalLM` directory that `transformers`
loads offline: config.json, safetensors (fp32 or bf16), generation_config.json, the run's tokenizer
(tokenizer.json + tokenizer_config.json + special_tokens_map.json, so `AutoTokenizer` needs no hub) and
`olmax_export.json`, the provenance: source run, step, data fingerprint, seed, tokens seen. The same
provenance is in each safetensors file's `__metadata__`. The directory appears only once complete.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import olmax
from olmax.assets import DOLMA2_SHA256, file_sha256, tokenizer_path
from olmax.data.loader import resolve_mix
from olmax.errors import OlmaxError
from olmax.train.config import load_run_config


def run_checkpoint(path: str | os.PathLike) -> tuple[Path, int | None] | None:
    """(run folder, step or None for the newest) when `path` is a run folder or a `checkpoints/<step>`
    folder of one; None otherwise."""
    p = Path(path)
    if (p / "config.yaml").is_file() and (p / "checkpoints").is_dir():
        return p, None
    if p.name.isdigit() and p.parent.name == "checkpoints" and (p.parent.parent / "config.yaml").is_file():
        return p.parent.parent, int(p.name)
    return None


@dataclass(frozen=True)
class RunModel:
    """One checkpoint of a run: the model and what was saved with it."""

    model: object  # olmax.model.transformer.Transformer
    run_dir: Path
    step: int
    config: object  # olmax.train.config.ExperimentConfig
    loader_state: object  # olmax.data.state.LoaderState
    meta: dict


def read_step_model(run_dir: str | Path, step: int, model_cfg, *, gone_ok: bool = False, mesh=None):
    """The model of run `run_dir` at checkpoint `step`, built as `model_cfg` (the run's model at the dtype
    wanted): params only, read-only (`checkpoint.read_params`: safe beside a trainer still saving into the
    run), restored straight into their FSDP shards on `mesh` (a jax.sharding.Mesh with the trainer's axes,
    any device count; default: one device). The one place that loads "the model of run R at step S". With
    `gone_ok`, None when the step was removed while being read (checkpoint retention); otherwise an
    OlmaxError naming the step folder: a checkpoint of another model than the run's config, or a committed
    checkpoint that is damaged."""
    from flax import nnx

    from olmax.train.checkpoint import complete_steps, error_line, read_params
    from olmax.train.mesh import state_shardings
    from olmax.train.step import model_graphdef

    run_dir = Path(run_dir)
    step_dir = run_dir / "checkpoints" / str(step)
    graphdef, abstract = model_graphdef(model_cfg)
    try:
        params = read_params(step_dir, abstract, None if mesh is None else state_shardings(abstract, mesh))
    except Exception as e:  # noqa: BLE001 - Orbax and TensorStore report unreadable files in many ways
        committed = step in complete_steps(run_dir / "checkpoints")
        if gone_ok and not committed:
            return None  # retention removed it while its metadata was read
        if isinstance(e, OlmaxError):  # read_params names the first array whose shape differs
            raise OlmaxError(
                f"{e}: a checkpoint of another model than the run's config ({run_dir / 'config.yaml'}); "
                "evaluate it with its own run folder"
            ) from e
        damaged = "; it is committed, so it is damaged: move it aside and rerun" if committed else ""
        raise OlmaxError(f"{step_dir}: cannot read the checkpoint ({error_line(e)[:200]}){damaged}") from e
    return nnx.merge(graphdef, params)


def restore_run_model(
    run_dir: str | Path, step: int | None = None, dtype: str = "float32", mesh=None
) -> RunModel:
    """Checkpoint `step` (default: the newest complete one) of a training run: its model
    (`read_step_model`, on `mesh` when given), the run's config, and the loader state and metadata saved
    with it."""
    from olmax.train.checkpoint import complete_steps, read_step_info

    run_dir = Path(run_dir)
    cfg = load_run_config(run_dir)
    if step is None:
        steps = complete_steps(run_dir / "checkpoints")
        if not steps:
            raise OlmaxError(
                f"{run_dir / 'checkpoints'}: no complete checkpoint yet (an HF or olmax folder is "
                "read with --checkpoint DIR)"
            )
        step = steps[0]
    elif not (run_dir / "checkpoints" / str(step)).is_dir():
        raise OlmaxError(f"{run_dir / 'checkpoints' / str(step)}: no such checkpoint")
    model = read_step_model(run_dir, step, cfg.model.replace(dtype=dtype), mesh=mesh)
    loader_state, meta = read_step_info(run_dir / "checkpoints" / str(step))
    return RunModel(model, run_dir, step, cfg, loader_state, meta)


def run_tokenizer(cfg, tokenizer: str | None = None) -> Path:
    """The tokenizer.json a run was trained with: `tokenizer` when given (a path or `dolma2`), else the one
    named in the manifest.json beside the run's prepared mix (checked by sha256), else dolma2 when the
    model's vocabulary is dolma2's."""

    if tokenizer is not None:
        return tokenizer_path(tokenizer)
    try:
        manifest = Path(resolve_mix(cfg.data)).parent / "manifest.json"
    except OlmaxError:
        manifest = None
    if manifest is not None and manifest.is_file():
        try:
            info = json.loads(manifest.read_text()).get("tokenizer") or {}
        except ValueError as e:
            raise OlmaxError(f"{manifest}: invalid JSON ({e}); pass --tokenizer") from e
        name, sha = info.get("name"), info.get("sha256")
        if name:
            path = tokenizer_path(name)
            if sha and file_sha256(path) != sha:
                raise OlmaxError(
                    f"{manifest}: the run's data was tokenized with {name} (sha256 {sha[:12]}…), "
                    f"but {path} differs; pass --tokenizer with the original tokenizer.json"
                )
            return path
    if cfg.model.vocab_size == 100_278 and file_sha256(path := tokenizer_path("dolma2")) == DOLMA2_SHA256:
        return path
    raise OlmaxError(
        f"cannot tell which tokenizer the run trained with (no manifest.json beside its mix and a "
        f"{cfg.model.vocab_size}-entry vocabulary that is not dolma2's); pass --tokenizer"
    )


def checkpoint_tokenizer(checkpoint: str | os.PathLike) -> Path:
    """The tokenizer that goes with a checkpoint when none is named: the tokenizer.json in an HF or olmax
    folder, the run's own for a run folder or one of its steps (`run_tokenizer`), else dolma2."""

    local = Path(checkpoint) / "tokenizer.json"
    if local.is_file():
        return local
    if (found := run_checkpoint(checkpoint)) is not None:
        from olmax.train.config import load_run_config

        return run_tokenizer(load_run_config(found[0]))
    return tokenizer_path("dolma2")


def export_hf(
    src: str | os.PathLike,
    out: str | os.PathLike,
    *,
    dtype: str | None = None,
    tokenizer: str | None = None,
    max_shard_bytes: int = 5 << 30,
) -> dict:
    """Write checkpoint `src` (a run folder or `RUN/checkpoints/STEP`) to `out` as an HF directory
    (see the module docstring); returns the provenance recorded in `out/olmax_export.json`."""
    from olmax.model.convert import to_hf

    found = run_checkpoint(src)
    if found is None:
        raise OlmaxError(
            f"{src}: not a training run folder (config.yaml + checkpoints/) or one of its "
            "checkpoints/<step> folders"
        )
    if dtype not in (None, "float32", "bfloat16"):
        raise OlmaxError(f"--dtype {dtype}: export writes float32 or bfloat16")
    tok_path = run_tokenizer(
        load_run_config(found[0]), tokenizer
    )  # before the restore: a missing tokenizer fails fast
    rm = restore_run_model(*found)
    dtype = dtype or "float32"
    cfg = rm.config
    info = {
        "format": "olmax-export-1",
        "olmax_version": olmax.__version__,
        "source_run": str(rm.run_dir.resolve()),
        "step": rm.step,
        "data_fingerprint": rm.loader_state.fingerprint,
        "data_seed": cfg.data.seed,
        "tokens_seen": int(rm.step) * cfg.data.global_batch_size * cfg.data.seq_len,
        "epoch": rm.meta.get("epoch"),
        "run_name": getattr(cfg, "name", None),
        "dtype": dtype,
        "tokenizer_sha256": file_sha256(tok_path),
    }
    to_hf(rm.model, out, dtype, max_shard_bytes=max_shard_bytes, tokenizer_json=tok_path, provenance=info)
    return info

"""The run directory as a record: its saved config, the resume rule, and the append-only history.

Rule (docs/runs.md). `RUN/config.yaml` is written only by a run that trains, after the resume checks
pass; a refused or empty rerun changes nothing. On resume the saved config is the default: the command
line's overrides apply to it, not to the preset (`start_config`). A setting that decides the data stream,
the model or the shape of the saved state is refused (`REFUSED`, one OlmaxError naming the key, the
saved and the asked value); every other differing setting (optimizer, schedule, checkpointing, mesh,
evals, logging) is allowed, printed on stderr and recorded in `RUN/history.jsonl`, one JSON line per
start of training. Paths in the saved config are absolute, so commands that take `--run` work from any
folder; a path a hand-edited config gives relative is read relative to the run directory.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from olmax.atomic import write_text
from olmax.errors import OlmaxError
from olmax.jsonio import append_jsonl
from olmax.train.config import (
    ExperimentConfig,
    absolute_paths,
    dump_yaml,
    load_config,
    load_run_config,
    to_dict,
)
from olmax.train.eval_defaults import with_eval_defaults

HISTORY = "history.jsonl"
CONFIG = "config.yaml"

# data.* except these read knobs (they never change what is seen, olmax.data.stream) decides the stream
DATA_FREE = ("data.num_threads", "data.prefetch_buffer_size", "data.num_workers", "data.work_dir")
# outside model.* and data.*: settings whose change would be ignored or break the saved state
REFUSED = {
    "optim.skip_window": "the skip-step history saved in the optimizer state has this length",
    "train.seed": "the RNG is restored from the checkpoint, so a new seed would be recorded but not used",
    "train.init_from": "it only decides how a fresh run starts",
    "train.monitor_bloom_bits": "the replay monitor's saved state has this size",
}


def flat(cfg: ExperimentConfig) -> dict[str, Any]:
    """The resolved config as {dotted key: value} (`optim.lr`, `model.rope_scaling.factor`)."""
    out: dict[str, Any] = {}

    def walk(prefix: str, d: dict) -> None:
        for k, v in d.items():
            if isinstance(v, dict) and v:
                walk(f"{prefix}{k}.", v)
            else:
                out[f"{prefix}{k}"] = list(v) if isinstance(v, tuple) else v

    walk("", to_dict(cfg))
    return out


def changes(old: ExperimentConfig, new: ExperimentConfig) -> dict[str, tuple[Any, Any]]:
    """{dotted key: (old value, new value)} for every setting that differs."""
    a, b = flat(old), flat(new)
    return {k: (a.get(k), b.get(k)) for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)}


def refusal(key: str) -> str | None:
    """Why `key` may not change on resume, or None when it may."""
    if key.startswith("model."):
        return "the checkpoint holds this model"
    if key.startswith("data.") and key not in DATA_FREE:
        return "the data stream (its order, batches and fingerprint) continues the saved one"
    return REFUSED.get(key)


def check_resume(saved: ExperimentConfig, cfg: ExperimentConfig, run_dir: Path) -> dict[str, tuple]:
    """The allowed changes of `cfg` from the run's saved config; an OlmaxError for a refused one."""
    diff = changes(saved, cfg)
    # the keys a person sets (model.n_layers) before the ones derived from them (model.layer_types)
    refused = sorted(
        ((k, refusal(k)) for k in diff if refusal(k)), key=lambda kw: isinstance(diff[kw[0]][0], list)
    )
    if refused:
        key, why = refused[0]
        old, new = diff[key]
        more = f" (and {', '.join(k for k, _ in refused[1:])})" if len(refused) > 1 else ""
        raise OlmaxError(
            f"{run_dir / CONFIG}: {key} is {old!r} in this run, the command asks {new!r}{more}; {why}: "
            f"resume with the run's own value (drop the flag or override), or train a new --run-dir"
        )
    return diff


def describe(diff: dict[str, tuple]) -> str:
    return "; ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in diff.items())


def record_start(
    cfg: ExperimentConfig,
    run_dir: Path,
    *,
    start: int,
    note: str,
    diff: dict[str, tuple],
    devices: int,
    compute: dict[str, str] | None = None,
) -> None:
    """Write `RUN/config.yaml` and append this start of training to `RUN/history.jsonl` (process 0)."""

    from olmax.train.optim import horizon_mismatch

    write_text(run_dir / CONFIG, dump_yaml(cfg))
    horizon = horizon_mismatch(cfg.optim, cfg.train.steps)
    entry = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "event": "resume" if start else "start",
        "from_step": start,
        "to_step": cfg.train.steps,
        "note": note,
        "devices": devices,
        "compute": compute or {},
        "changed": {k: {"from": old, "to": new} for k, (old, new) in diff.items()},
        "environment": environment(),
    }
    if horizon:
        entry["schedule"] = {k: v for k, v in horizon.items() if k != "message"}
    moved = moved_horizon(cfg, start, diff)
    if moved:
        entry["schedule_moved"] = {k: v for k, v in moved.items() if k != "message"}
    append_jsonl(run_dir / HISTORY, [entry])


def moved_horizon(cfg: ExperimentConfig, start: int, diff: dict[str, tuple]) -> dict | None:
    """olmax.train.optim.horizon_moved for this resume's change of train.steps, if any."""
    from olmax.train.optim import horizon_moved

    if "train.steps" not in diff:
        return None
    return horizon_moved(cfg.optim, start, diff["train.steps"][0], cfg.train.steps)


# the environment variables a run reads (the eval defaults are also filled into config.yaml): the
# cache and work folders, the multi-process settings, and JAX's device and platform flags
ENVIRONMENT_PREFIXES = ("OLMAX_", "XLA_FLAGS", "JAX_PLATFORMS", "HF_HUB_OFFLINE")


def environment() -> dict[str, str]:
    """The environment variables set at this start of training that olmax or JAX read."""
    return {k: os.environ[k] for k in sorted(os.environ) if k.startswith(ENVIRONMENT_PREFIXES)}


def saved_config(run_dir: Path) -> ExperimentConfig | None:
    """The config a run directory holds, or None when it has none (a fresh folder, or an old run)."""

    return load_run_config(run_dir) if (run_dir / CONFIG).is_file() else None


def has_checkpoint(run_dir: str | Path) -> bool:
    """True when `RUN/checkpoints` holds a complete step, i.e. training there resumes."""
    from olmax.train.checkpoint import complete_steps

    return bool(complete_steps(Path(run_dir) / "checkpoints"))


def start_config(recipe: str, overrides: Sequence[str], run_dir: Path | None) -> tuple[ExperimentConfig, str]:
    """The config this start of training uses, and a note for stderr ("" when there is none).

    A fresh run (or a dry run without a run folder): the recipe with the command line's overrides. A
    resume: the run's saved config with the same overrides, training to the command's step (its
    `train.steps` override, else the recipe's); the note lists the recipe's settings that differ and are
    not used. Either way the eval settings left to the environment are filled in (olmax.train.eval_defaults),
    so the record holds what ran."""
    if run_dir is None or not (run_dir / CONFIG).is_file() or not has_checkpoint(run_dir):
        return with_eval_defaults(load_config(recipe, overrides)), ""
    saved = load_run_config(run_dir)
    # the saved paths are read against the run folder, the command line's against the current one
    resumed = with_eval_defaults(absolute_paths(load_config(str(run_dir / CONFIG), overrides, base=saved)))
    asked = absolute_paths(with_eval_defaults(load_config(recipe)))  # the recipe alone
    set_here = {o.split("=", 1)[0].strip() for o in overrides} | set(
        changes(with_eval_defaults(saved), resumed)
    )
    if "train.steps" not in set_here:  # the step to train to is the command's, not a setting of the run
        resumed = resumed.replace(train=dataclasses.replace(resumed.train, steps=asked.train.steps))
    ignored = [k for k in changes(resumed, asked) if k not in set_here | {"train.steps"}]
    if not ignored:
        return resumed, ""
    shown = ", ".join(ignored[:8]) + (f" and {len(ignored) - 8} more" if len(ignored) > 8 else "")
    return resumed, (
        f"olmax train: resuming {run_dir}: its {CONFIG} is the default, so --config {recipe}'s differing "
        f"setting(s) are not used: {shown} (pass an override to change one)"
    )

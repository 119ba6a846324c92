"""The experiment config: one frozen dataclass per area, composed, loaded from YAML with dotted overrides.

A config file (`configs/NAME.yaml`, or any path) has one mapping per area: `model` (a preset name from
`olmax.model.PRESETS` under `preset`, then any `ModelConfig` field), `data`, `optim`, `mesh`,
`checkpoint`, `train`. Overrides are `area.field=value` strings (OmegaConf dotlist syntax) applied on
top. Unknown keys are errors that name the file and the key, so a typo never trains silently with a
default (the reading rules: olmax.recipe). `dump_yaml` writes the fully resolved config, which `load_config`
reads back unchanged.

One `config.py` per area (audit, model, train, data.prepare): the same concept, an area's typed settings.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from olmax.data.mixfile import OLMO_CORE_PREFIX
from olmax.data.stream import DEMO_MIX, UNSET_MIX, StreamSpec
from olmax.errors import OlmaxError
from olmax.model.model_config import PRESETS, ModelConfig, YarnConfig
from olmax.recipe import (
    build,
    closest,
    coerce,
    find_config,
    origin,
    origins_of,
    read_recipe,
    run_config_path,
    unknown_keys,
)


@dataclass(frozen=True)
class OptimConfig:
    """AdamW + schedule + clipping + skip-step + z-loss (OLMo-core SkipStepAdamW, OLMo 3 values)."""

    lr: float = 3e-4
    b1: float = 0.9
    b2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1  # not on the embedding (OLMo-core group override "embeddings.weight")
    max_grad_norm: float = 1.0
    z_loss: float = 1e-5  # z_loss_multiplier
    schedule: str = "cosine"  # cosine | half_cosine | linear | constant (OLMo-core *WithWarmup)
    warmup_steps: int = 2000
    t_max: int | None = None  # schedule horizon in steps; None: train.steps
    alpha_f: float = 0.1  # final LR = alpha_f * lr
    warmup_min_lr: float = 0.0
    skip_sigma: float = 6.0  # skip a step whose loss or grad norm > mean + 6 std of the window
    skip_window: int = 128  # rolling_interval_length
    skip_steps: bool = True


@dataclass(frozen=True)
class MeshConfig:
    """Device mesh axes; -1 means "all devices left". The batch is split over data x fsdp."""

    data: int = 1
    fsdp: int = -1
    per_device_batch: int | None = None  # sequences per device per microbatch; None: G / devices


@dataclass(frozen=True)
class CheckpointConfig:
    every: int = 1000  # OLMo 3 save_interval
    keep: int = 3  # newest complete checkpoints kept
    async_save: bool = True


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 1000  # absolute optimizer step to train to
    seed: int = 0  # parameter init and the saved RNG
    eval_every: int = 0  # held-out eval hook period in steps; 0: never
    # the three eval defaults below are filled in before a run starts (olmax.train.eval_defaults),
    # so RUN/config.yaml and --dry-run show the values that ran, whatever filled them in
    eval_sets: tuple[
        str, ...
    ] = ()  # as --eval (olmax.evalsets.spec); (): $OLMAX_EVAL_SETS, else sciq and arc_easy
    eval_base_dir: str | None = None  # folder holding OLMo-core's eval-data/ (for olmo-core:... sets)
    eval_limit: int | None = None  # documents scored per set; None: $OLMAX_EVAL_LIMIT, else 64; 0: all
    eval_tokenizer: str | None = (
        None  # eval sets' tokenizer.json or name; None: $OLMAX_EVAL_TOKENIZER, else dolma2
    )
    eval_downstream: tuple[str, ...] = ()  # OLMo-core downstream task names (olmax.evals.downstream)
    eval_downstream_limit: int = 0  # documents per downstream task; 0: all, as OLMo-core
    log_every: int = 1  # TensorBoard period (metrics.jsonl gets every step)
    peak_flops: float | None = None  # machine peak FLOP/s for MFU; None: device-kind table, CPU: measured
    progress: bool = True
    tensorboard: bool = True  # TensorBoard event files in RUN_DIR/tb
    ce_chunk: int | None = (
        None  # LM head + CE fused over blocks of this many vocab columns; None: auto; 0: off
    )
    init_from: str | None = None  # a fresh run starts from this checkpoint step dir's params + optimizer
    monitor: bool = (
        True  # online replay monitor (olmax.audit.StreamMonitor): stop at an unplanned repeated row
    )
    monitor_bloom_bits: int = 0  # 0: exact per-epoch row set; else a Bloom filter of this many bits


WANDB_MODES = ("online", "offline", "disabled")


@dataclass(frozen=True)
class WandbConfig:
    """Weights & Biases logging, off unless `project` is set (olmax.train.wandb_log): the train record under
    OLMo-core's metric names at every TensorBoard step, as OLMo-core's W&B callback logs them."""

    project: str | None = None
    entity: str | None = None
    group: str | None = None
    name: str | None = None  # None: the run folder's name
    tags: tuple[str, ...] = ()
    mode: str = (
        "online"  # online (needs WANDB_API_KEY), offline (sync later: wandb sync RUN/wandb/...), disabled
    )

    @property
    def enabled(self) -> bool:
        return self.project is not None and self.mode != "disabled"

    def __post_init__(self) -> None:
        if self.mode not in WANDB_MODES:
            raise OlmaxError(f"wandb.mode={self.mode!r}: one of {', '.join(WANDB_MODES)}")


@dataclass(frozen=True)
class ExperimentConfig:
    name: str = "run"
    model: ModelConfig = field(default_factory=ModelConfig)
    model_preset: str = "olmo3_7b"
    data: StreamSpec = field(default_factory=StreamSpec)  # the data stream (olmax.data.stream)
    optim: OptimConfig = field(default_factory=OptimConfig)
    mesh: MeshConfig = field(default_factory=MeshConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)

    def replace(self, **areas: Any) -> ExperimentConfig:
        return dataclasses.replace(self, **areas)


_AREAS = {
    "data": StreamSpec,
    "optim": OptimConfig,
    "mesh": MeshConfig,
    "checkpoint": CheckpointConfig,
    "train": TrainConfig,
    "wandb": WandbConfig,
}


def _build_model(values: dict, where: str, origins: dict[str, str] | None = None) -> tuple[ModelConfig, str]:
    origins = origins or {}
    values = dict(values)
    preset = values.pop("preset", "olmo3_7b")
    if preset not in PRESETS:
        at = origin(where, "model", "preset", origins)
        raise OlmaxError(f"{at}: unknown model preset {preset!r}; choose from {', '.join(PRESETS)}")
    hints = typing.get_type_hints(ModelConfig)
    names = {f.name for f in dataclasses.fields(ModelConfig)} - {"extra_hf"}
    unknown = sorted(set(values) - names)
    if unknown:
        raise unknown_keys(where, "model", unknown, names | {"preset"}, origins)
    overrides: dict[str, Any] = {}
    for k, v in values.items():
        if k == "rope_scaling":
            overrides[k] = (
                None
                if v is None
                else build(YarnConfig, dict(v), f"{where}.rope_scaling", "model.rope_scaling", origins)
            )
        elif k == "layer_types":
            overrides[k] = tuple(v or ())
        else:
            overrides[k] = coerce(v, hints[k], origin(where, "model", k, origins))
    if "n_layers" in overrides and "layer_types" not in overrides:
        overrides["layer_types"] = ()
    try:
        return PRESETS[preset](**overrides), preset
    except OlmaxError as e:
        raise OlmaxError(f"{where}: {e}") from e


def from_dict(raw: dict, where: str = "config", origins: dict[str, str] | None = None) -> ExperimentConfig:
    """Build and validate an ExperimentConfig from nested plain dicts. `origins` maps a dotted key
    (`optim.lr`) to the command-line override that set it, so its errors name the override, not the file."""
    raw = dict(raw)
    origins = origins or {}
    sections = {"name", "model", *_AREAS}
    unknown = sorted(set(raw) - sections)
    if unknown:
        by = [o for k, o in origins.items() if k.split(".", 1)[0] in unknown]
        raise OlmaxError(
            f"{f'override {by[0]}' if by else where}: unknown section(s) {', '.join(unknown)}"
            f"{closest(unknown[0], sections)}; valid: name, model, {', '.join(_AREAS)}"
        )
    model, preset = _build_model(raw.get("model") or {}, f"{where}: model", origins)
    areas = {k: build(cls, dict(raw.get(k) or {}), f"{where}: {k}", k, origins) for k, cls in _AREAS.items()}
    cfg = ExperimentConfig(name=str(raw.get("name", "run")), model=model, model_preset=preset, **areas)
    validate(cfg, where)
    return cfg


def validate(cfg: ExperimentConfig, where: str = "config") -> None:
    """Cross-field checks that are knowable before touching devices or data."""
    if cfg.train.steps < 0:
        raise OlmaxError(f"{where}: train.steps must be >= 0, got {cfg.train.steps}")
    if cfg.checkpoint.every <= 0 or cfg.checkpoint.keep <= 0:
        raise OlmaxError(f"{where}: checkpoint.every and checkpoint.keep must be positive")
    if cfg.optim.schedule not in ("cosine", "half_cosine", "linear", "constant"):
        raise OlmaxError(
            f"{where}: optim.schedule {cfg.optim.schedule!r}; use cosine, half_cosine, linear or constant"
        )
    if cfg.data.seq_len > cfg.model.max_position_embeddings and cfg.model.rope_scaling is None:
        raise OlmaxError(
            f"{where}: data.seq_len {cfg.data.seq_len} exceeds model.max_position_embeddings "
            f"{cfg.model.max_position_embeddings}; raise it or add rope_scaling"
        )


def load_run_config(run_dir: str | Path) -> ExperimentConfig:
    """The resolved config of a run folder of `olmax train` (`run_config_path`), its paths absolute (a
    relative one, from a hand-edited config, is read relative to the run folder when it exists there)."""
    return absolute_paths(load_config(run_config_path(run_dir)), run_dir, existing_only=True)


def load_config(
    name_or_path: str, overrides: list[str] | tuple[str, ...] = (), *, base: ExperimentConfig | None = None
) -> ExperimentConfig:
    """Read a preset or YAML file, apply `area.key=value` overrides, validate. With `base` (a config
    already loaded from `name_or_path`, e.g. a run's saved config) the overrides apply to it instead."""
    if base is not None:
        raw_base = to_dict(base)
        keys = {o.split("=", 1)[0].strip() for o in overrides}
        if "model.n_layers" in keys and "model.layer_types" not in keys:
            raw_base["model"].pop("layer_types")  # as over a preset: a new depth gets the preset's pattern
        path = Path(name_or_path)
        raw = read_recipe(path, overrides, base=raw_base)
    else:
        path = find_config(name_or_path)
        raw = read_recipe(path, overrides)
    return from_dict(raw, where=str(path), origins=origins_of(overrides))


def to_dict(cfg: ExperimentConfig) -> dict:
    """The resolved config as plain data (round-trips through `from_dict`)."""
    model = dataclasses.asdict(cfg.model)
    model.pop("extra_hf")
    model["layer_types"] = list(cfg.model.layer_types)
    out: dict[str, Any] = {"name": cfg.name, "model": {"preset": cfg.model_preset, **model}}
    for k in _AREAS:
        out[k] = dataclasses.asdict(getattr(cfg, k))
    return out


def dump_yaml(cfg: ExperimentConfig) -> str:
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.create(to_dict(cfg)))


def _absolute(path: str | None, base: Path, existing_only: bool) -> str | None:
    if not path or "://" in path or os.path.isabs(path):
        return path
    full = os.path.abspath(base / os.path.expanduser(path))
    return full if not existing_only or os.path.exists(full) else os.path.abspath(path)


def _tokenizer_path(tokenizer: str | None, base: Path, existing_only: bool) -> str | None:
    """A tokenizer given as a file path made absolute; a name (dolma2) stays."""
    if tokenizer and ("/" in tokenizer or tokenizer.endswith(".json")):
        return _absolute(tokenizer, base, existing_only)
    return tokenizer


def absolute_paths(cfg: ExperimentConfig, base: str | Path | None = None, *, existing_only: bool = False):
    """`cfg` with its file paths (data.mix, data.base_dir, data.work_dir, NAME=PATH eval sets,
    train.init_from, a train.eval_tokenizer file) made absolute against `base` (default the current folder). Names that are not paths
    (the demo mix, `olmo-core:NAME`, URLs, bundled eval sets) stay. `existing_only`: a relative path is
    taken under `base` only when it exists there, else under the current folder (a run folder's
    hand-written relative paths, or an old run's paths as typed)."""

    base = Path(base) if base is not None else Path.cwd()
    d, t = cfg.data, cfg.train
    mix = d.mix
    if mix not in (DEMO_MIX, *UNSET_MIX) and not str(mix).startswith(OLMO_CORE_PREFIX):
        mix = _absolute(mix, base, existing_only)
    sets = []
    for spec in t.eval_sets:
        name, sep, path = spec.partition("=")
        if sep and path:
            sets.append(f"{name}={_absolute(path, base, existing_only)}")
        else:  # a bare path names the set by its file stem, which an absolute path keeps
            sets.append(_absolute(spec, base, existing_only) if "/" in spec else spec)
    return cfg.replace(
        data=dataclasses.replace(
            d,
            mix=mix,
            base_dir=_absolute(d.base_dir, base, existing_only),
            work_dir=_absolute(d.work_dir, base, existing_only),
        ),
        train=dataclasses.replace(
            t,
            eval_sets=tuple(sets),
            init_from=_absolute(t.init_from, base, existing_only),
            eval_tokenizer=_tokenizer_path(t.eval_tokenizer, base, existing_only),
        ),
    )

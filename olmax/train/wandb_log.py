"""The optional Weights & Biases logger (`wandb.project=NAME`): what OLMo-core's W&B callback sends, from olmax.

OLMo-core's `WandBCallback` starts one W&B run per launch in `<work dir>/wandb` with the experiment config,
then `wandb.log(metrics, step=step)` with its metric names, and finishes the run at the end. This does the
same with olmax's train record renamed to OLMo-core's names (olmax.metrics.olmo_core_scalars: `train/CE
loss`, `optim/LR (group 0)`, `throughput/device/TPS`, the in-loop `eval/lm/...` and `eval/downstream/...`), so an
olmax run's curves overlay AI2's OLMo 3 runs in one W&B view. Files go to RUN/wandb; `wandb.mode=offline`
writes there only (upload later with `wandb sync`), and `online` needs WANDB_API_KEY, checked before the run
folder is touched. Only process 0 logs. `wandb` is an optional dependency (`pip install 'olmax[wandb]'`).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from olmax.errors import OlmaxError
from olmax.train.config import WandbConfig


def preflight(cfg: WandbConfig) -> None:
    """Fail before training when W&B logging is asked for and cannot start: the package or the API key."""
    if not cfg.enabled:
        return
    try:
        importlib.import_module("wandb")
    except ImportError as e:
        raise OlmaxError(
            f"wandb.project={cfg.project} asks for W&B logging, but the wandb package is not installed: "
            "pip install 'olmax[wandb]' (or unset wandb.project)"
        ) from e
    if cfg.mode == "online" and not os.environ.get("WANDB_API_KEY"):
        raise OlmaxError(
            f"wandb.project={cfg.project} with wandb.mode=online needs WANDB_API_KEY in the environment; "
            "export it, or set wandb.mode=offline to log under RUN/wandb and `wandb sync` later"
        )


class WandbLog:
    """One W&B run for this launch of the trainer."""

    def __init__(self, cfg: WandbConfig, run_dir: Path, config: dict):
        wandb = importlib.import_module("wandb")
        folder = Path(run_dir) / "wandb"
        folder.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            dir=str(folder),
            project=cfg.project,
            entity=cfg.entity,
            group=cfg.group,
            name=cfg.name or Path(run_dir).name,
            tags=list(cfg.tags) or None,
            config=config,
            mode=cfg.mode,
        )

    def log(self, step: int, scalars: dict[str, float]) -> None:
        self.run.log(scalars, step=step)

    def close(self) -> None:
        self.run.finish()

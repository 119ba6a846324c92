"""metrics.jsonl: the record schema, the trainer's writer (`MetricsLog`) and the readers evals and the demo use.

A run folder's `metrics.jsonl` holds one strict-JSON object per line (olmax.jsonio: NaN/inf are written
as null). Two kinds of record share it; a record without `kind` is a train record.

Train record, one per optimizer step, written by `olmax train` (TRAIN_FIELDS, then optional keys):
  step          int    absolute optimizer step, 1-based
  loss          float  mean cross-entropy of the global batch, nats/token
  z_loss        float  mean z-loss term, per token (0 when optim.z_loss is 0)
  grad_norm     float  global L2 norm of the gradient, before clipping
  lr            float  learning rate applied at this step
  tokens        int    tokens trained through this step: step x global batch x seq_len
  tokens_per_s  float  this step's tokens / its wall time (data wait included, logging excluded)
  mfu           float  model FLOP utilization (0..1): 3 x forward FLOPs of the step / its wall time / the
                       peak; null when the peak is unknown or the ratio would exceed 1 (a wrong peak).
                       On CPU the peak is a measured fp32 (the step's dtype) matmul peak (olmax.train.mfu)
  mfu_peak_flops, mfu_peak
                       on the first record of each start only: the peak FLOP/s and what it is
  skipped       int    1 when the skip-step rule dropped this update (params and moments unchanged), else 0
  epoch         int    1-based epoch the batch came from
  audit_rows, audit_repeats, audit_epoch[, audit_bloom_fp_rate]
                       the online replay monitor's counters (train.monitor on; olmax.audit.monitor)
  eval/<set>/<metric>, eval/<set>/clean/<metric>
                       in-loop held-out eval every train.eval_every steps (olmax.evals.hook):
                       metric is ce, ppl, bpb or tokens

Held-out record (`kind: "heldout"`), from olmax.evals.heldout.run_heldout, appended by
`olmax eval heldout --append-metrics` (HELDOUT_FIELDS): step (null when not given), eval (set name),
subset ("all" | "clean"), ce, ppl, bpb, tokens, bytes, documents, truncated, seq_len, fingerprint,
tokenizer_sha256.

TensorBoard (RUN/tb) takes the train record under OLMo-core's names where OLMo-core logs the same quantity
(`olmo_core_scalars`: `train/CE loss`, `train/PPL`, `train/Z loss`, `optim/total grad norm`, `optim/LR (group
0)`, `optim/step skipped`, `throughput/total tokens`, `throughput/device/TPS`, `throughput/device/MFU` in
percent), the `eval/...` keys as they are (`eval/lm/<label>/CE loss` and `eval/downstream/...` are OLMo-core's
evaluator names already), and every other field as `train/<field>`; the W&B logger (wandb.project) gets the
same scalars at the same steps; tensorboardX writes a space or a
parenthesis in a tag as `_`.

Contract: only process 0 writes; each line is flushed once its step's metrics are read back (after the
next step is dispatched; at once at a checkpoint, an eval or the last step, so a checkpoint never exists
without its step's line); on resume the lines of steps
past the restored checkpoint are dropped first, so each train step appears once in an uninterrupted
file. Readers take the last record of a step and skip a torn last line (a kill mid-write).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from olmax.errors import OlmaxError
from olmax.jsonio import dumps, read_jsonl, write_jsonl

FILE = "metrics.jsonl"
TRAIN_FIELDS = (
    "step",
    "loss",
    "z_loss",
    "grad_norm",
    "lr",
    "tokens",
    "tokens_per_s",
    "mfu",
    "skipped",
    "epoch",
)
HELDOUT_FIELDS = (
    "kind",
    "step",
    "eval",
    "subset",
    "ce",
    "ppl",
    "bpb",
    "tokens",
    "bytes",
    "documents",
    "truncated",
    "seq_len",
    "fingerprint",
    "tokenizer_sha256",
)


# train-record field -> (OLMo-core's metric name, factor): its train module's, optimizer's and speed monitor's
OLMO_CORE_NAMES = {
    "loss": ("train/CE loss", 1.0),
    "z_loss": ("train/Z loss", 1.0),
    "grad_norm": ("optim/total grad norm", 1.0),
    "lr": ("optim/LR (group 0)", 1.0),
    "skipped": ("optim/step skipped", 1.0),
    "tokens": ("throughput/total tokens", 1.0),
    "mfu": ("throughput/device/MFU", 100.0),  # OLMo-core logs MFU in percent
}


def olmo_core_scalars(rec: dict, devices: int = 1) -> dict[str, float]:
    """A train record's numbers under the names a TensorBoard or W&B view of an OLMo-core run uses."""
    out: dict[str, float] = {}
    for key, value in rec.items():
        if key == "step" or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if key in OLMO_CORE_NAMES:
            name, factor = OLMO_CORE_NAMES[key]
            out[name] = value * factor
        elif key == "tokens_per_s":
            out["throughput/device/TPS"] = value / max(devices, 1)  # OLMo-core's is per device
        elif "/" in key:
            out[key] = value
        else:
            out[f"train/{key}"] = value
    if isinstance(rec.get("loss"), int | float) and rec["loss"] < 700:
        out["train/PPL"] = math.exp(rec["loss"])
    return out


def metrics_path(run: str | os.PathLike) -> Path:
    """`run/metrics.jsonl` for a run folder; a file path is taken as the metrics file itself."""
    run = Path(run)
    return run / FILE if run.is_dir() else run


def read_records(run: str | os.PathLike) -> list[dict]:
    """Every record of a run's metrics.jsonl, in file order (a torn last line skipped)."""
    path = metrics_path(run)
    if not path.is_file():
        raise OlmaxError(f"{path}: not found; pass a run directory that holds {FILE}")
    return [r for r in read_jsonl(path) if isinstance(r, dict)]


def is_train(rec: dict) -> bool:
    return rec.get("kind", "train") == "train"


def train_records(run: str | os.PathLike) -> dict[int, dict]:
    """{step: the last train record of that step that has a loss}, in step order."""
    steps: dict[int, dict] = {}
    for rec in read_records(run):
        if is_train(rec) and rec.get("step") is not None and rec.get("loss") is not None:
            steps[int(rec["step"])] = rec
    return dict(sorted(steps.items()))


class MetricsLog:
    """metrics.jsonl (append, one line per step) + TensorBoard events, written by process 0 only."""

    def __init__(
        self,
        run_dir: Path,
        resume_step: int,
        tensorboard: bool = True,
        wandb=None,
        primary: bool | None = None,
    ):
        """`wandb`: an open olmax.train.wandb_log.WandbLog (process 0's), fed the TensorBoard scalars;
        `primary`: whether this process writes (default: process 0)."""
        import jax

        self.path = Path(run_dir) / FILE
        self.primary = jax.process_index() == 0 if primary is None else primary
        self.tb = None
        self.wandb = wandb
        self.devices = jax.device_count()
        if not self.primary:
            return
        if self.path.exists():  # drop records a killed run logged after its last checkpoint
            kept = [
                r
                for r in read_jsonl(self.path)
                if not isinstance(r, dict) or (r.get("step") or 0) <= resume_step
            ]
            write_jsonl(self.path, kept)
        self.file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the run
        if tensorboard:
            from tensorboardX import SummaryWriter

            self.tb = SummaryWriter(str(Path(run_dir) / "tb"))

    def write(self, rec: dict, tb_every: int) -> None:
        if not self.primary:
            return
        self.file.write(dumps(rec) + "\n")
        self.file.flush()
        if rec["step"] % tb_every == 0 and (self.tb is not None or self.wandb is not None):
            scalars = olmo_core_scalars(rec, self.devices)
            if self.tb is not None:
                for k, v in scalars.items():
                    self.tb.add_scalar(k, v, rec["step"])
            if self.wandb is not None:
                self.wandb.log(rec["step"], scalars)

    def close(self) -> None:
        if self.primary:
            self.file.close()
            if self.tb is not None:
                self.tb.close()
            if self.wandb is not None:
                self.wandb.close()

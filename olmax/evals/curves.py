"""Loss curves of a run (DIR/metrics.jsonl) or a reference (another run, or a CSV of a published curve).

metrics.jsonl (schema: olmax.metrics) holds train records `{"step", "loss", ...}` and held-out
results in either of two shapes: keys `eval/<set>/ce` inside a train record (what `olmax train`'s eval
hook writes, see hook.py), or separate records from `run_heldout` (`{"kind": "heldout", "step", "eval",
"subset", "ce", ...}`, what `eval heldout --append-metrics` writes). Only whole sets are read here, not
their clean subsets. OLMo-core's downstream tasks (`eval/downstream/TASK (length-normalized accuracy v2)`, the
in-loop hook's) are read into `downstream`: the metric OLMo-core's plots of OLMo 3 runs show. A CSV has a header with `step` and `loss` (train loss) and optionally one column per
held-out set, named as the set or `heldout/<set>`; empty cells are skipped.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from olmax.errors import OlmaxError
from olmax.metrics import metrics_path, read_records

DOWNSTREAM_PREFIX = "eval/downstream/"
DOWNSTREAM_METRIC = " (length-normalized accuracy v2)"


@dataclass
class Curves:
    source: str
    train_steps: np.ndarray  # int64, ascending
    train_loss: np.ndarray  # float64
    heldout: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # set -> (steps, ce)
    downstream: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # task -> (steps, acc)
    smooth: bool = True  # raw per-step train losses (a run) are smoothed; a published curve is not

    def train_at(self, step: float, window: int) -> float:
        """Train loss near `step`: the mean of the `window` train records nearest to it (a run), or the
        curve interpolated at `step` (a published CSV)."""
        if not self.train_steps.size:
            return float("nan")
        if not self.smooth:
            return float(np.interp(step, self.train_steps, self.train_loss))
        nearest = np.argsort(np.abs(self.train_steps - step), kind="stable")[:window]
        return float(self.train_loss[nearest].mean())


def _sorted(steps: list, values: list) -> tuple[np.ndarray, np.ndarray]:
    s, v = np.asarray(steps, np.float64), np.asarray(values, np.float64)
    order = np.argsort(s, kind="stable")
    s, v = s[order], v[order]
    if s.size:  # a resumed run may log a step twice: keep the last
        keep = np.append(s[1:] != s[:-1], True)
        s, v = s[keep], v[keep]
    return s, v


def read_run(run_dir: str | Path) -> Curves:
    """Train and held-out curves of a run directory's metrics.jsonl."""
    path = metrics_path(run_dir)
    train_s, train_l = [], []
    held: dict[str, tuple[list, list]] = {}
    down: dict[str, tuple[list, list]] = {}
    for r in read_records(path):
        step = r.get("step")
        if step is None:
            continue
        if r.get("kind") == "heldout":
            if r.get("subset", "all") == "all" and r.get("ce") is not None:
                s, v = held.setdefault(str(r["eval"]), ([], []))
                s.append(step)
                v.append(r["ce"])
            continue
        if r.get("loss") is not None:
            train_s.append(step)
            train_l.append(r["loss"])
        for key, value in r.items():
            parts = key.split("/")
            if len(parts) == 3 and parts[0] == "eval" and parts[2] == "ce" and value is not None:
                s, v = held.setdefault(parts[1], ([], []))
                s.append(step)
                v.append(value)
            elif key.startswith(DOWNSTREAM_PREFIX) and key.endswith(DOWNSTREAM_METRIC) and value is not None:
                s, v = down.setdefault(key[len(DOWNSTREAM_PREFIX) : -len(DOWNSTREAM_METRIC)], ([], []))
                s.append(step)
                v.append(value)
    ts, tl = _sorted(train_s, train_l)
    return Curves(
        str(path),
        ts,
        tl,
        {k: _sorted(*v) for k, v in held.items()},
        {k: _sorted(*v) for k, v in down.items()},
    )


def read_csv_curve(path: str | Path) -> Curves:
    """A published curve: CSV with `step`, `loss` and optional held-out columns."""
    path = Path(path)
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except FileNotFoundError:
        raise OlmaxError(f"{path}: reference CSV not found") from None
    if not rows or "step" not in rows[0]:
        raise OlmaxError(f"{path}: expected a header with `step` and `loss` columns")
    cols: dict[str, tuple[list, list]] = {}
    for lineno, row in enumerate(rows, start=2):
        for key, cell in row.items():
            if key == "step" or key is None or cell in (None, ""):
                continue
            try:
                step, value = float(row["step"]), float(cell)
            except ValueError:
                raise OlmaxError(f"{path}:{lineno}: column {key!r} holds {cell!r}, not a number") from None
            name = key.removeprefix("heldout/")
            s, v = cols.setdefault(name, ([], []))
            s.append(step)
            v.append(value)
    train = cols.pop("loss", ([], []))
    ts, tl = _sorted(*train)
    return Curves(str(path), ts, tl, {k: _sorted(*v) for k, v in cols.items()}, smooth=False)


def read_reference(path: str | Path) -> Curves:
    p = Path(path)
    return read_csv_curve(p) if p.suffix.lower() == ".csv" else read_run(p)

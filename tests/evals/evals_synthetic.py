"""Synthetic run directories and reference curves shared by the memorization and plot tests."""

import numpy as np

from olmax.jsonio import append_jsonl

STEPS = 1000


def base_loss(s):
    return 2.0 + 2.5 * np.exp(-s / 200)


def write_run(path, memorize: bool, seed=0):
    """Per-step train loss with noise; held-out every 100 steps. `memorize`: from step 400 on train loss
    keeps falling (a repeated source is being memorized) while held-out stays flat."""
    rng = np.random.default_rng(seed)
    path.mkdir(parents=True, exist_ok=True)
    records = []
    for s in range(STEPS + 1):
        extra = 0.8 * max(0, s - 400) / 600 if memorize else 0.0
        records.append({"step": s, "loss": float(base_loss(s) - extra + rng.normal(0, 0.03))})
        if s % 100 == 0:
            held = (
                base_loss(min(s, 400) if memorize else s)
                + 0.15
                + (0.02 * max(0, s - 400) / 600 if memorize else 0)
            )
            records.append({"kind": "heldout", "step": s, "eval": "c4", "subset": "all", "ce": float(held)})
            records.append({"kind": "heldout", "step": s, "eval": "c4", "subset": "clean", "ce": 99.0})
    append_jsonl(path / "metrics.jsonl", records)
    return path


def write_reference_csv(path):
    steps = np.arange(0, STEPS + 1, 50)
    rows = ["step,loss,heldout/c4"] + [f"{s},{base_loss(s):.5f},{base_loss(s) + 0.15:.5f}" for s in steps]
    path.write_text("\n".join(rows) + "\n")
    return path

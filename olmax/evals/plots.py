"""PNG loss curves for reports: a run's train loss with each held-out set, and a reference when given."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from olmax.atomic import temp_path
from olmax.errors import OlmaxError
from olmax.evals.curves import Curves, read_reference, read_run


def _smoothed(c: Curves, points: int = 200) -> tuple[np.ndarray, np.ndarray]:
    if not c.smooth or c.train_steps.size <= points:
        return c.train_steps, c.train_loss
    k = max(1, c.train_steps.size // points)
    n = c.train_steps.size // k * k
    return c.train_steps[:n].reshape(-1, k).mean(1), c.train_loss[:n].reshape(-1, k).mean(1)


def plot_run(
    run: str | os.PathLike,
    out: str | os.PathLike,
    reference: str | os.PathLike | None = None,
    title: str | None = None,
) -> Path:
    """Write a PNG: train loss (smoothed) and held-out CE per set vs step; dashed: the reference's curves; a
    second panel with each downstream task's length-normalised accuracy when the run logged any."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = read_run(run)
    if not curves.train_steps.size and not curves.heldout:
        raise OlmaxError(f"{curves.source}: no train or held-out records to plot")
    ref = read_reference(reference) if reference else None
    if curves.downstream:  # a second panel: OLMo-core's downstream tasks, as its OLMo 3 plots show them
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 5), dpi=110)
    else:
        fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    if curves.train_steps.size:
        ax.plot(*_smoothed(curves), color=colors[0], label="train")
    for i, (name, (s, v)) in enumerate(sorted(curves.heldout.items()), start=1):
        ax.plot(s, v, "o-", color=colors[i % len(colors)], markersize=3, label=f"held-out {name}")
    if ref is not None:
        if ref.train_steps.size:
            ax.plot(*_smoothed(ref), "--", color=colors[0], alpha=0.7, label="reference train")
        for i, (name, (s, v)) in enumerate(sorted(ref.heldout.items()), start=1):
            j = sorted(curves.heldout).index(name) + 1 if name in curves.heldout else i + len(curves.heldout)
            ax.plot(s, v, "--", color=colors[j % len(colors)], alpha=0.7, label=f"reference {name}")
    if curves.downstream:
        for name, (s, v) in sorted(curves.downstream.items()):
            ax2.plot(s, v, "o-", markersize=3, label=name)
        ax2.set_xlabel("step")
        ax2.set_ylabel("length-normalized accuracy v2")
        ax2.set_title("downstream (OLMo-core's tasks)")
        ax2.grid(alpha=0.3)
        ax2.legend(fontsize=8)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title(title or Path(run).name)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    try:
        with temp_path(out, suffix=".png") as tmp:
            fig.savefig(tmp, format="png", bbox_inches="tight")
    finally:
        plt.close(fig)
    return Path(out)

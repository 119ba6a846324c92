"""Reading TensorBoard event files back in tests with TensorBoard's own reader (`EventAccumulator`, the
code behind TensorBoard's scalar dashboard), so a test sees what a person opening the run would see."""

from __future__ import annotations

from pathlib import Path


def tensorboard_scalars(path: Path) -> list[tuple[str, int, float]]:
    """(tag, step, value) of every scalar in a TensorBoard event file or run folder, tag by tag, each tag's
    points in the order written."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(path), size_guidance={"scalars": 0})  # 0: keep every point, no sampling
    acc.Reload()
    return [(tag, e.step, e.value) for tag in acc.Tags()["scalars"] for e in acc.Scalars(tag)]

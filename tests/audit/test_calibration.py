"""Slow: the leak-rule calibration (real SciQ/ARC/BoolQ items planted into stdlib code and pydoc prose)
must keep recall and precision >= 0.95 for every kind, at two seeds."""

from __future__ import annotations

import pytest


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_calibration_recall_and_precision(seed, tmp_path):
    from olmax.audit.calibrate import run

    res = run(per_kind=40, seed=seed, work=str(tmp_path))
    for kind in ("verbatim", "inside", "short", "edited"):
        assert res[kind]["flagged"] >= 0.95 * res[kind]["items"], (kind, res)
    for kind in ("hard_negative", "unplanted"):
        assert res[kind]["flagged"] <= 0.05 * res[kind]["items"], (kind, res)
    assert res["overall"]["recall"] >= 0.95 and res["overall"]["precision"] >= 0.95

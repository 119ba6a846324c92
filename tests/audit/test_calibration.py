"""The leak calibration (bench/leak_calibration.py: real SciQ / ARC-Easy / BoolQ / OpenBookQA items,
transformed by bench/leak_plants.py and planted into stdlib code and pydoc prose) at seed 1: recall >=
0.95 for every kind of plant (the kinds in SHORT_OF_TARGET: their floor), precision >= 0.95,
false-positive rate <= 0.05 for every kind of negative (the sign flips, other numbers and other values
of the maths questions included), and the items planted into several documents reported with all of
them (slow)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = str(Path(__file__).resolve().parents[2] / "bench")
if BENCH not in sys.path:  # appended: bench/ has loader.py, audit.py, ... that must shadow nothing
    sys.path.append(BENCH)

import leak_calibration as cal  # noqa: E402


@pytest.mark.slow
def test_calibration_recall_precision_and_document_counts(tmp_path):
    res = cal.run(seed=1, per_kind=30, work=tmp_path)  # seed 0 was looked at when the threshold was chosen
    s = cal.summarize(res["records"])
    table = {k: (r["items"], r["flagged"]) for k, r in s["kinds"].items()}
    for kind in cal.POSITIVE:
        r = s["kinds"][kind]
        assert r["items"] == 30 and r["rate"] >= cal.SHORT_OF_TARGET.get(kind, 0.95), (kind, table)
    for kind in cal.NEGATIVE:
        r = s["kinds"][kind]
        assert r["items"] == 30 and r["rate"] <= 0.05, (kind, table)
    assert s["precision"] >= 0.95, table
    for kind in cal.MANY:
        assert s["kinds"][kind]["full_count"] >= 0.95 * s["kinds"][kind]["items"], (kind, s["kinds"][kind])

"""The leak-rule calibration (real SciQ/ARC/BoolQ items planted into stdlib code and pydoc prose) must
keep recall and precision >= 0.95 for every kind, at two seeds (slow); its negatives are independent items."""

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


def test_negatives_exclude_items_sharing_a_passage_with_another():
    """BoolQ-style siblings (one passage, two questions) cannot both enter the pool: planting one
    would really contaminate the other, and the calibration would count a true hit as a false one."""
    from collections import namedtuple

    from olmax.audit.calibrate import independent_items

    Item = namedtuple("Item", "id text")
    passage = "The principal bridesmaid may be called the maid of honor if she is unmarried or matron if married."
    items = [Item("a", passage + " is maid of honour the chief bridesmaid"),
             Item("b", "Photosynthesis turns light into chemical energy in the chloroplasts of green plants."),
             Item("c", passage.upper() + " is the matron of honor married"),
             Item("d", "Short item.")]
    assert [it.id for it in independent_items(items)] == ["a", "b", "d"]

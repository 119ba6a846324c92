"""olmax/evals/power.py: the power it predicts matches tests simulated with the checks' own decision rules
(the membership checks' AUROC and Mann-Whitney z, check 1's mean gain and standard error), the smallest dose
and the windows needed invert it, and the measured effects it assumes are the power records' numbers."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from olmax.evals.membership import auroc
from olmax.evals.power import (
    MEASURED,
    Rule,
    Sample,
    effect_for,
    figures,
    power,
    score_factor,
    smallest_dose,
    windows_needed,
)

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
RANK = Rule("rank", 3.0, 0.6)  # checks 7-10 at the default Thresholds
MEAN = Rule("mean", 3.0, 0.1)  # check 1 at the default Thresholds


def simulated(d: float, n1: int, n2: int, test: Rule, reps: int = 400, seed: int = 0) -> float:
    """The share of `reps` draws (normal scores, the over-served shifted by d standard deviations) the
    check's own rule flags: the membership checks' AUROC and z, or check 1's mean gain over its standard
    error (estimated from the draw, as check_exposure does)."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(reps):
        over, planned = rng.normal(d, 1.0, n1), rng.normal(0.0, 1.0, n2)
        if test.kind == "rank":
            a, z = auroc(over, planned)
            hits += z > test.z and a > test.floor
        else:
            gain = over.mean() - planned.mean()
            se = math.hypot(over.std(ddof=1) / math.sqrt(n1), planned.std(ddof=1) / math.sqrt(n2))
            hits += gain > test.floor and gain > test.z * se
    return hits / reps


@pytest.mark.parametrize(
    "d, n1, n2, test",
    [
        (0.55, 64, 128, RANK),  # z decides (the floor is below z 3 at this sample)
        (0.50, 240, 480, RANK),  # the AUROC floor decides
        (0.40, 240, 480, RANK),  # AUROC 0.61, just over the floor
        (0.30, 400, 400, Rule("rank", 3.0, 0.5)),  # no floor
        (0.15, 300, 600, MEAN),  # 3 standard errors decide (0.1 of sd 1 is under them)
        (0.28, 40, 80, Rule("mean", 1.96, 0.0)),  # check 6's bootstrap interval, as a normal one
    ],
)
def test_power_matches_simulated_checks(d, n1, n2, test):
    predicted = power(d, 1.0, n1, n2, test)
    assert 0.05 < predicted < 0.99  # a case where the answer is not trivially 0 or 1
    assert simulated(d, n1, n2, test) == pytest.approx(predicted, abs=0.07)


def test_no_dose_no_power_beyond_alpha():
    assert power(0.0, 1.0, 100, 200, Rule("rank", 3.0, 0.5)) == pytest.approx(RANK.alpha)
    assert RANK.alpha == pytest.approx(0.00135, abs=1e-5)
    # the floor lowers it: at 240 vs 480 windows an AUROC of 0.6 is z 4.4
    assert power(0.0, 1.0, 240, 480, RANK) < 1e-5


def test_smallest_dose_and_windows_needed_invert_power():
    per, sd = 0.012, 0.02
    dose = smallest_dose(per, sd, Sample(64, 128), RANK, 0.9)
    assert power(per * (dose - 1), sd, 64, 128, RANK) == pytest.approx(0.9, abs=1e-6)
    assert power(per * (dose * 0.98 - 1), sd, 64, 128, RANK) < 0.9
    # a planned-2x window served 2 x D times gains 2 (D - 1) servings: half the dose sees as much
    assert smallest_dose(per, sd, Sample(64, 128, plan=2.0), RANK, 0.9) == pytest.approx(1 + (dose - 1) / 2)
    n = windows_needed(per * 3, sd, 2.0, RANK, 0.9)
    assert power(per * 3, sd, n, 2 * n, RANK) >= 0.9 > power(per * 3, sd, n - 1, 2 * (n - 1), RANK)
    # a shift whose AUROC stays under the 0.6 floor is never flagged at 90%, whatever the sample
    assert windows_needed(0.3, 1.0, 2.0, RANK, 0.9) is None  # AUROC Phi(0.3 / sqrt 2) = 0.584
    assert windows_needed(0.05, 1.0, 2.0, MEAN, 0.9) is None  # under check 1's 0.1 nats
    assert smallest_dose(0.0, sd, Sample(64, 128), RANK, 0.9) is None
    f = figures(per, sd, Sample(64, 128), RANK, target=0.9)
    assert f["smallest_dose"] == pytest.approx(dose) and f["windows_needed"]["4"] == n
    assert set(f["power"]) == {"2", "4"} and f["power"]["2"] < f["power"]["4"]


def test_score_factors_are_the_derivatives_of_each_score():
    ce = np.array([1.0, 2.0])
    planned = {"ce": ce, "zlib": -ce * 63 / np.array([30.0, 42.0]), "reference_ratio": np.array([1.1, 0.9])}
    assert score_factor("exposure", planned) == 1.0
    assert score_factor("zlib", planned) == pytest.approx((63 / 30 + 63 / 42) / 2)
    assert score_factor("reference_ratio", planned) == pytest.approx((1.1 / 1.0 + 0.9 / 2.0) / 2)
    assert score_factor("checkpoint_diff", planned, earlier_share=0.5) == 0.5
    assert score_factor("checkpoint_diff", planned) is None and score_factor("min_k_pp", planned) is None


def test_effect_for_takes_the_nearest_measured_size():
    small, large = MEASURED[0][1], MEASURED[-1][1]
    assert effect_for(200_000) is small and effect_for(7_000_000_000) is large
    assert effect_for(None) is large


def per_serving_at_4x(record: dict) -> float:
    e = record["notes"]["effect"]["4"]
    return e.get("per_serving_nats", e["gain_nats"] / 3)


def non_embedding(setting: dict) -> int:
    from olmax.model import tiny
    from olmax.model.transformer import count_params

    dims = ("d_model", "n_layers", "n_heads", "n_kv_heads", "mlp_hidden")
    given = {k: setting[k] for k in dims if k in setting}
    if "d_model" in given:
        given["head_dim"] = (
            given["d_model"] // given["n_heads"]
        )  # as bench/studies/memorization_power.py builds it
    cfg = tiny(**given)
    return count_params(cfg) - 2 * cfg.vocab_size * cfg.d_model


@pytest.mark.parametrize("name, index", [("mem.json", 0), ("mem_tpu.json", 1)])
def test_measured_effects_are_the_records(name, index):
    """The calculator's effects are the power benchmark's measurements. When a record is measured again,
    this fails: set MEASURED in olmax/evals/power.py to the record's number and model size."""
    record = json.loads((RESULTS / name).read_text())
    size, effect = MEASURED[index]
    assert name in effect.source
    got = per_serving_at_4x(record)
    assert effect.nats == pytest.approx(got, rel=5e-3), f"{name}: set MEASURED[{index}] to {got:.5f}"
    assert size == non_embedding(record["notes"]["setting"])

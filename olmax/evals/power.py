"""The power of the memorization checks: what unplanned dose a check could see at its sample, and how many
windows it would need to see a given one.

A dose is a window served D times its plan: (D - 1) x plan extra servings. What the calculator needs:
  effect   the CE (nats per token) a window loses per extra serving, a measured number (`MEASURED`: the
           power benchmark's paired effect, bench/studies/memorization_power.py), or the user's own (--power-effect)
  spread   each check's score over the run's own as-planned windows (its standard deviation), and how the
           score moves when a window's CE falls (per check: 1 for CE, the window's tokens over its zlib bytes
           for zlib, reference CE / CE^2 for the reference ratio, the share of the run after the earlier
           checkpoint for the checkpoint difference)
  rule     what the check flags on (`Rule`): a rank test (Mann-Whitney z above `z` and AUROC above
           `floor`, checks 7-10) or a mean test (the mean gain above `z` standard errors and above `floor`,
           check 1; check 6 with z 1.96 and no floor)

The arithmetic (normal approximations; a shift `s` of a score with spread `sd` between n1 over-served and
n2 as-planned windows, d = s / sd):
  rank   AUROC = Phi(d / sqrt 2) (two normal groups); the null's standard error of the AUROC
         se0 = sqrt((n1 + n2 + 1) / (12 n1 n2)); a flag needs z = (AUROC - 0.5) / se0 above
         z* = max(z, (floor - 0.5) / se0); power = Phi((AUROC - 0.5) / se0 - z*)
  mean   se = sd sqrt(1/n1 + 1/n2); a flag needs the mean gain above t = max(floor, z se);
         power = Phi((s - t) / se)
  alpha  one-sided, 1 - Phi(z) (0.13% at z 3); at large samples the floor lowers it further
  windows needed: the smallest n1 (with n2 = ratio x n1) whose power reaches the target; none when the
         shift stays under the floor at any sample (a rank test whose AUROC at the dose is under its floor)
The rank test's z is taken as unit-variance under the dose too, a slight overestimate of its spread at
large effects (tests/evals/test_power.py checks the power against simulated tests).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

PHI = NormalDist()
DOSES = (2, 4)  # the doses the calculator always reports (a source listed once more; an epoch repeated twice)


@dataclass(frozen=True)
class Effect:
    """The CE (nats per token) a window loses per extra serving, and where that number was measured."""

    nats: float
    source: str


# Measured by bench/studies/memorization_power.py: each dose's CE gain of the dosed windows over the as-planned
# ones, less the same seed's clean run's (the same windows served once), per extra serving, at 4x (the mean
# over three seeds); keyed by the model's non-embedding parameters. tests/evals/test_power.py reads each
# record and fails when a record was re-measured and its number no longer matches the one here.
MEASURED = (
    (
        172_992,
        Effect(
            0.01257,
            "bench/results/mem.json, the 4x effect per extra serving: olmax tiny (4 layers x 64), "
            "256-byte windows, 1,600 rows a run",
        ),
    ),
    (
        56_648_448,
        Effect(
            0.01888,
            "bench/results/mem_tpu.json, the 4x effect per extra serving: OLMo 3's block at d 768 x 8 "
            "layers, 1,024-byte windows, 1,600 rows a run",
        ),
    ),
)


def effect_for(non_embedding_params: int | None) -> Effect:
    """The measured effect of the model size nearest to `non_embedding_params` on a log scale (the largest
    when the size is unknown)."""
    if not non_embedding_params or non_embedding_params <= 0:
        return MEASURED[-1][1]
    size = math.log(non_embedding_params)
    return min(MEASURED, key=lambda m: abs(math.log(m[0]) - size))[1]


def model_effect(model) -> Effect:
    """`effect_for` the model's non-embedding parameters (an olmax model: its `cfg`)."""
    cfg = getattr(model, "cfg", None)
    if cfg is None:
        return effect_for(None)
    from olmax.model.transformer import count_params

    return effect_for(count_params(cfg) - 2 * cfg.vocab_size * cfg.d_model)


@dataclass(frozen=True)
class Sample:
    """The windows a comparison takes: over-served, as planned, and the over-served ones' planned servings
    (a dose D is (D - 1) x plan servings beyond it)."""

    over: int
    planned: int
    plan: float = 1.0


@dataclass(frozen=True)
class Rule:
    """How a check flags: `rank` (Mann-Whitney z above `z` and AUROC above `floor`) or `mean` (the mean gain
    above `z` standard errors and above `floor`, in the score's units)."""

    kind: str
    z: float
    floor: float

    @property
    def alpha(self) -> float:
        """The one-sided false-alarm rate the test is built for (its floor can only lower it)."""
        return 1.0 - PHI.cdf(self.z)


def power(shift: float, sd: float, n_over: int, n_planned: int, test: Rule) -> float:
    """The chance the check flags a score shift `shift` (spread `sd`) between `n_over` over-served and
    `n_planned` as-planned windows."""
    if n_over < 1 or n_planned < 1:
        return 0.0
    sd = max(sd, 1e-12)
    if test.kind == "rank":
        auc = PHI.cdf(shift / sd / math.sqrt(2.0))
        se0 = math.sqrt((n_over + n_planned + 1) / (12.0 * n_over * n_planned))
        need = max(test.z, (test.floor - 0.5) / se0)
        return PHI.cdf((auc - 0.5) / se0 - need)
    se = sd * math.sqrt(1.0 / n_over + 1.0 / n_planned)
    return PHI.cdf((shift - max(test.floor, test.z * se)) / se)


def smallest_dose(per_serving: float, sd: float, sample: Sample, test: Rule, target: float) -> float | None:
    """The smallest dose D (times the plan) the check flags with probability `target` at `sample`, when each
    extra serving moves its score by `per_serving`; None when no dose up to 10,000x does."""
    if per_serving <= 0:
        return None

    def p(dose: float) -> float:
        return power(per_serving * sample.plan * (dose - 1.0), sd, sample.over, sample.planned, test)

    lo, hi = 1.0, 10_000.0
    if p(hi) < target:
        return None
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if p(mid) < target else (lo, mid)
    return hi


def windows_needed(shift: float, sd: float, ratio: float, test: Rule, target: float) -> int | None:
    """The fewest over-served windows (with `ratio` times as many as planned) at which the check flags a
    shift `shift` with probability `target`; None when no sample does (the shift is under the floor)."""
    if shift <= 0:
        return None

    def p(n: int) -> float:
        return power(shift, sd, n, max(1, math.ceil(ratio * n)), test)

    hi = 1
    while p(hi) < target:
        hi *= 2
        if hi > 1 << 30:
            return None
    lo = hi // 2  # p(lo) < target <= p(hi), or hi is 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if p(mid) < target else (lo, mid)
    return hi


def score_factor(check: str, planned: dict, earlier_share: float | None = None) -> float | None:
    """How far a check's score moves per nat of CE a window loses, from the as-planned windows' scores
    (`planned`: arrays by score name, as membership.window_scores gives them): 1 for the CE gain (check 1),
    tokens over zlib bytes for zlib (-zlib / CE), reference CE / CE^2 for the reference ratio, the share of the
    run after the earlier checkpoint for the checkpoint difference; None for a score with no such model
    (Min-K%++ standardises by the model's own distribution, which a serving moves too)."""
    import numpy as np

    ce = np.maximum(np.asarray(planned["ce"], np.float64), 1e-9)
    if check == "exposure":
        return 1.0
    if check == "zlib":
        return float(np.mean(-np.asarray(planned["zlib"]) / ce))
    if check == "reference_ratio" and "reference_ratio" in planned:
        return float(np.mean(np.asarray(planned["reference_ratio"]) / ce))
    if check == "checkpoint_diff" and earlier_share is not None:
        return float(earlier_share)
    return None


def figures(
    per_serving: float,
    sd: float,
    sample: Sample,
    test: Rule,
    *,
    target: float,
    doses: tuple[int, ...] = DOSES,
) -> dict:
    """What a check could see at `sample`: its power at each of `doses` (times the plan), the smallest dose
    it flags with probability `target`, and the over-served windows (with as many as planned per over-served
    one as here) it would need to reach `target` at each dose."""
    ratio = sample.planned / max(sample.over, 1)
    shift = {d: per_serving * sample.plan * (d - 1) for d in doses}
    return {
        "score_per_serving": per_serving,
        "sd": sd,
        "over_served": sample.over,
        "as_planned": sample.planned,
        "plan": sample.plan,
        "test": test.kind,
        "alpha": test.alpha,
        "target": target,
        "power": {str(d): power(shift[d], sd, sample.over, sample.planned, test) for d in doses},
        "smallest_dose": smallest_dose(per_serving, sd, sample, test, target),
        "windows_needed": {str(d): windows_needed(shift[d], sd, ratio, test, target) for d in doses},
    }


def weakest(per_source: dict[str, dict], dose: int) -> dict | None:
    """A check's power at `dose` over its compared sources: the lowest (a dose in that source is the one it
    could miss), with the source's name; None when no source has power figures."""
    rated = {s: f["power"][str(dose)] for s, f in per_source.items() if f and str(dose) in f["power"]}
    if not rated:
        return None
    src = min(rated, key=rated.get)
    return {"dose": dose, "value": rated[src], "source": src}


def describe(f: dict) -> str:
    """One line: the smallest dose, the power at each reported dose, the windows needed for each."""
    smallest = f"{f['smallest_dose']:.1f}x" if f["smallest_dose"] is not None else "none up to 10,000x here"
    powers = ", ".join(f"{p:.0%} at {d}x" for d, p in f["power"].items())
    needed = ", ".join(
        f"{d}x {n:,}" if n is not None else f"{d}x never (under the test's floor)"
        for d, n in f["windows_needed"].items()
    )
    return (
        f"smallest dose flagged with {f['target']:.0%} power: {smallest}; power {powers} "
        f"({f['over_served']} over-served vs {f['as_planned']} as planned); over-served windows needed: {needed}"
    )

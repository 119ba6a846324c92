"""Membership scores: does the model know text it was served beyond the plan better than text served as planned?

Four scores per training window, each higher for text the model knows better than its difficulty explains:
  min_k_pp         Min-K%++ (Zhang et al. 2024): per next-token position, (log p(x_t) - mu_t) / sigma_t, with mu_t
                   and sigma_t the mean and standard deviation of log p under the model's own next-token
                   distribution at t; the window's score is the mean of its lowest k% (`min_k_fraction`).
  zlib             the zlib-normalised loss (Carlini et al. 2021): -(the window's summed NLL, nats) / (zlib-compressed
                   bytes of its token ids, packed as uint8, uint16 or uint32 by the largest id). Text that is
                   merely repetitive compresses well and so gets no credit for its low loss.
  checkpoint_diff  the CE the window lost between an earlier checkpoint of the same run and the scored one
                   (earlier CE - CE): no reference run needed. Both checkpoints read the same text with the same
                   tokenizer, so a window's own difficulty largely cancels; text served beyond the plan keeps
                   losing loss faster. The earlier checkpoint is the run's earliest kept one (with the default
                   retention, `checkpoint.keep` = 3, the newest three: the earliest is two intervals back).
  reference_ratio  CE of a reference model / CE of the run's model on the window: the reference's difficulty of
                   the same text cancels out. The reference is another run's model (`--reference RUN`, e.g. a
                   healthy run of the same recipe).
The test, per source: the AUROC of the score between the windows served beyond the plan and as many windows
served as planned with the same planned servings (the plan is the null: a source the mix lists twice is
compared with its own windows served twice, never with once-served text); it flags when the Mann-Whitney z of
that AUROC exceeds `membership_z` and the AUROC `membership_auroc`. With no unplanned repetition the two groups
are exchangeable, so the false-positive rate per source is about 1 - Phi(z) (0.13% at z = 3). Each source also
states the smallest AUROC that would flag at its group sizes (`detectable_auroc`): a clean verdict rules out a
separation above it, not below.
"""

from __future__ import annotations

import math
import zlib

import numpy as np
from scipy.stats import rankdata

from olmax.evals.exposure_file import Exposure
from olmax.evals.model_checks import compare_rows, per_source_verdict, sample_rows
from olmax.evals.power import Sample, figures, score_factor
from olmax.evals.scoring import token_stats
from olmax.evals.verdicts import Models, Thresholds, power_doses, power_test, rate_power, skipped_check

SCORES = ("min_k_pp", "zlib", "checkpoint_diff", "reference_ratio")


def window_scores(
    model,
    tokens: np.ndarray,
    *,
    reference=None,
    earlier=None,
    min_k_fraction: float = 0.2,
    batch_size: int = 8,
) -> dict[str, np.ndarray]:
    """Per window (row of `tokens`, scored on every next token as the train loss is): `ce` (nats per target),
    `min_k_pp`, `zlib`; with a reference model `reference_ce` and `reference_ratio`; with an earlier
    checkpoint `earlier_ce` and `checkpoint_diff` (the CE it lost since: earlier_ce - ce)."""
    tokens = np.asarray(tokens)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    lp, mu, sigma = token_stats(model, inputs, targets, batch_size=batch_size)
    ce = -lp.astype(np.float64).mean(axis=1)
    z = (lp - mu) / np.maximum(sigma, 1e-6)
    k = max(1, int(math.ceil(min_k_fraction * z.shape[1])))
    min_k_pp = np.sort(z, axis=1)[:, :k].astype(np.float64).mean(axis=1)
    top = tokens.max(initial=0)
    width = np.uint8 if top < 1 << 8 else np.uint16 if top < 1 << 16 else np.uint32
    packed = [len(zlib.compress(row.astype(width).tobytes(), 9)) for row in tokens]
    out = {"ce": ce, "min_k_pp": min_k_pp, "zlib": -(ce * targets.shape[1]) / np.asarray(packed, np.float64)}
    if reference is not None:
        ref_lp, _, _ = token_stats(reference, inputs, targets, batch_size=batch_size)
        ref_ce = -ref_lp.astype(np.float64).mean(axis=1)
        out["reference_ce"] = ref_ce
        out["reference_ratio"] = ref_ce / np.maximum(ce, 1e-9)
    if earlier is not None:
        old_lp, _, _ = token_stats(earlier, inputs, targets, batch_size=batch_size)
        out["earlier_ce"] = -old_lp.astype(np.float64).mean(axis=1)
        out["checkpoint_diff"] = out["earlier_ce"] - ce
    return out


def _scores(models: Models, tokens: np.ndarray, th: Thresholds) -> dict[str, np.ndarray]:
    """`window_scores` with the run's models (the reference and earlier checkpoint where given) and its probe."""
    return window_scores(
        models.model,
        tokens,
        reference=models.reference,
        earlier=models.earlier,
        min_k_fraction=th.min_k_fraction,
        batch_size=models.probe.batch_size,
    )


def auroc(members: np.ndarray, others: np.ndarray) -> tuple[float, float]:
    """(AUROC, Mann-Whitney z): the chance a member's score exceeds a non-member's (ties count half), and its
    standard score under exchangeability (mean 0.5, the normal approximation of U with the tie correction)."""
    n1, n2 = len(members), len(others)
    ranks = rankdata(np.concatenate([members, others]))
    u = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2)
    _, counts = np.unique(ranks, return_counts=True)
    n = n1 + n2
    tie = float((counts**3 - counts).sum()) / (n * (n - 1)) if n > 1 else 0.0
    var = n1 * n2 / 12.0 * ((n + 1) - tie)
    z = (u - n1 * n2 / 2.0) / math.sqrt(var) if var > 0 else 0.0
    return u / (n1 * n2), z


def detectable_auroc(n_over: int, n_planned: int, th: Thresholds) -> float:
    """The smallest AUROC that flags at these group sizes (z above `membership_z` under the normal
    approximation without ties, and above `membership_auroc`): a clean verdict rules out a separation above
    it, not below. Its distance from 0.5 falls as 1 / sqrt(n) down to that floor: more windows
    (--per-stratum) see smaller effects up to it."""
    n = n_over + n_planned
    spread = math.sqrt((n + 1) / (12.0 * n_over * n_planned))
    return min(1.0, max(th.membership_auroc, 0.5 + th.membership_z * spread))


def score_power(
    name: str, planned: dict[str, np.ndarray], sample: Sample, th: Thresholds, models: Models
) -> dict | None:
    """A score's power figures (olmax/evals/power.py) from the as-planned windows' scores (`planned`): its
    spread there and how far it moves per extra serving (`models.effect`); None for a score the calculator
    has no model of, or without an effect."""
    factor = score_factor(name, planned, models.earlier_share)
    values = planned.get("ce" if name == "exposure" else name)
    if models.effect is None or factor is None or values is None or len(values) < 2:
        return None
    return figures(
        models.effect.nats * factor,
        float(np.std(values, ddof=1)),
        sample,
        power_test(name, th),
        target=th.min_power,
        doses=power_doses(th),
    )


def check_membership(exp: Exposure, th: Thresholds, models: Models) -> dict[str, dict]:
    """The membership checks (`SCORES`), one verdict each, over each source's windows served beyond the plan
    and its as-planned windows matched by planned servings (olmax/evals/model_checks.compare_rows; the first
    `probe_len` tokens of each). With `models.effect` (the CE a window loses per extra serving) each compared
    source states each score's power (`score_power`), and a check that had less than `min_power` at
    `power_dose` is inconclusive."""
    if exp.tokens is None or exp.source is None:
        return dict.fromkeys(SCORES, skipped_check("the exposure file has no tokens/sources; pass --mix"))
    probe = models.probe
    rng = np.random.default_rng(probe.seed + 3)
    length = min(probe.probe_len, exp.tokens.shape[1])
    per_source: dict[str, dict] = {}
    why: dict[str, str] = {}
    for src in sorted(set(exp.source.tolist())):
        comp = compare_rows(rng, exp, th, exp.source == src, probe.per_stratum)
        if isinstance(comp, str):
            why[src] = comp
            continue
        rows = np.concatenate([comp.over, comp.planned_rows])
        per_source[src] = {
            "comparison": comp,
            "scores": _scores(models, exp.tokens[rows, :length], th),
        }
    out = {}
    for name in SCORES:
        if name == "reference_ratio" and models.reference is None:
            out[name] = skipped_check("no reference model: --reference RUN (a run with checkpoints)")
            continue
        if name == "checkpoint_diff" and models.earlier is None:
            out[name] = skipped_check(
                "no earlier checkpoint of this run: keep two (checkpoint.keep >= 2) or pass --step"
            )
            continue
        sources, flagged = {}, []
        for src, s in per_source.items():
            comp = s["comparison"]
            vals = s["scores"][name]
            a, z = auroc(vals[: comp.over.size], vals[comp.over.size :])
            hit = z > th.membership_z and a > th.membership_auroc
            planned = {k: v[comp.over.size :] for k, v in s["scores"].items()}
            rated = score_power(
                name, planned, Sample(comp.over.size, comp.planned_rows.size, comp.plan), th, models
            )
            sources[src] = {
                "auroc": a,
                "z": z,
                "detectable_auroc": detectable_auroc(comp.over.size, comp.planned_rows.size, th),
                "over_served": int(comp.over.size),
                "as_planned": int(comp.planned_rows.size),
                "as_planned_from": comp.where,
                "mean_servings": comp.served,
                "mean_planned": comp.plan,
                "compared": comp.describe(exp.count),
                "flagged": hit,
                **({"power": rated} if rated else {}),
            }
            if hit:
                flagged.append(src)
        used = {
            "reference_ratio": f"; reference {models.reference_name or 'given'}",
            "checkpoint_diff": f"; loss change from {models.earlier_name or 'an earlier checkpoint'}",
        }.get(name, "")
        verdict = per_source_verdict(
            sources,
            flagged,
            why,
            lambda src, w, name=name, used=used: (
                f"source {src}: {name} tells {w['compared']} with AUROC {w['auroc']:.3f} (z {w['z']:+.2f}; "
                f"flags above z {th.membership_z:g} and AUROC {th.membership_auroc:g}: AUROC "
                f"{w['detectable_auroc']:.3f} at this sample){used}"
            ),
            key="z",
        )
        if name == "reference_ratio":
            verdict["reference"] = models.reference_name
        if name == "checkpoint_diff":
            verdict["checkpoints"] = models.earlier_name
        out[name] = rate_power(verdict, {s: w.get("power") for s, w in sources.items()}, th)
    return out


def power_probe(exp: Exposure, th: Thresholds, models: Models) -> dict[str, dict]:
    """What each check could see in each source had part of it been served beyond the plan: per source, the
    windows a comparison would take (`per_stratum` of them as the over-served, as many as planned per
    over-served one as `compare_rows` would take, of the same source and planned count) are drawn from its
    windows served as planned and scored, and each check's power figures come from their spread. Sources
    with fewer than 2 x `min_samples` as-planned windows are left out, with the reason."""
    if exp.tokens is None or exp.source is None:
        return {}
    from olmax.evals.exposure_file import planned_counts

    probe = models.probe
    rng = np.random.default_rng(probe.seed + 5)
    length = min(probe.probe_len, exp.tokens.shape[1])
    planned = planned_counts(exp, th.repeat_min)
    as_planned = (exp.count == planned) & (exp.count > 0)
    out: dict[str, dict] = {}
    for src in sorted(set(exp.source.tolist())):
        mine = exp.source == src
        level = np.bincount(planned[mine & as_planned]).argmax() if (mine & as_planned).any() else 0
        pool = np.flatnonzero(mine & as_planned & (planned == level))
        if pool.size < 2 * th.min_samples:
            out[src] = {"reason": f"{pool.size} windows served as planned: too few to compare"}
            continue
        n_over = min(probe.per_stratum, pool.size // 2)
        n_planned = min(max(1, probe.per_stratum // n_over) * n_over, pool.size - n_over)
        rows = sample_rows(rng, pool, n_over + n_planned)
        scores = _scores(models, exp.tokens[rows, :length], th)
        checks = {}
        for name in ("exposure", *SCORES):
            rated = score_power(name, scores, Sample(n_over, n_planned, float(level)), th, models)
            if rated is not None:
                checks[name] = rated
        out[src] = {"windows": int(pool.size), "planned_servings": int(level), "checks": checks}
    return out

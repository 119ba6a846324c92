"""Memorization checks that need a model and exposure counts: 1 exposure, 4 extract, 5 train_vs_unseen.

Checks 1 and 4 (and the membership checks, olmax/evals/membership.py) compare windows served beyond the
mix's plan with windows served as planned (`compare_rows`): repetition the plan asks for is the null.

See memorization.py for what each check means; every function returns a verdict dict (status, flagged,
message and its numbers). Samples are drawn with fixed seeds, so a report is reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from olmax.evals.curves import Curves
from olmax.evals.exposure_file import Exposure, planned_counts
from olmax.evals.power import Effect, Sample, figures
from olmax.evals.verdicts import (
    Thresholds,
    check_verdict,
    power_doses,
    power_test,
    rate_power,
    skipped_check,
)


def sample_rows(rng: np.random.Generator, rows: np.ndarray, n: int) -> np.ndarray:
    """Up to `n` of `rows`, drawn without replacement by `rng`, in ascending order."""
    return np.sort(rng.choice(rows, size=min(n, rows.size), replace=False)) if rows.size else rows


@dataclass(frozen=True)
class Comparison:
    """Windows served beyond the plan (`over`) and as many served as planned (`planned_rows`), matched by
    planned servings: for each planned count among the over-served windows, as-planned windows with that
    same planned count (so a planned-2x source is compared with itself at 2x, never with 1x text)."""

    over: np.ndarray  # rows of the exposure, over-served
    planned_rows: np.ndarray  # rows served exactly as planned, the same planned counts in the same numbers
    where: str  # "the same source" or "the other sources" (where the as-planned windows came from)
    served: float  # mean servings of the over-served windows
    plan: float  # their mean planned servings
    available: int = 0  # over-served windows of the source in all (`over` is a sample of them)

    def describe(self, count: np.ndarray) -> str:
        sampled = f" (a sample of {self.available:,})" if self.available > self.over.size else ""
        return (
            f"{self.over.size} windows served {self.served:.1f}x where the plan serves {self.plan:.1f}x"
            f"{sampled} vs {self.planned_rows.size} served as planned "
            f"({float(count[self.planned_rows].mean()):.1f}x) of {self.where}"
        )


def compare_rows(
    rng: np.random.Generator, exp: Exposure, th: Thresholds, mine: np.ndarray, n: int
) -> Comparison | str:
    """Up to `n` over-served windows among `mine` (a boolean row mask) and their matched as-planned windows
    (of the same rows where there are enough, else of the others); a string says why there is none."""
    planned = planned_counts(exp, th.repeat_min)
    over_all = np.flatnonzero(mine & (exp.count > planned))
    if not over_all.size:
        return "no window served beyond its plan"
    members = sample_rows(rng, over_all, n)
    as_planned = exp.count == planned
    levels = np.unique(planned[members])
    # up to `n` as-planned windows in all: the same multiple `r` (<= n / over-served) of the over-served
    # windows at every planned count, so both groups hold the planned counts in the same proportions (more
    # baseline windows: a sharper AUROC); a planned count short of as-planned windows trims its members
    per = max(1, n // members.size)
    for scope, where in ((mine, "the same source"), (~mine, "the other sources")):
        groups = [
            (members[planned[members] == level], np.flatnonzero(scope & as_planned & (planned == level)))
            for level in levels
        ]
        r = min(per, min(pool.size / m.size for m, pool in groups))
        if r >= 1:
            keep = [m for m, _ in groups]
            base = [sample_rows(rng, pool, int(r * m.size)) for m, pool in groups]
        else:
            base = [sample_rows(rng, pool, m.size) for m, pool in groups]
            keep = [sample_rows(rng, m, b.size) for (m, _), b in zip(groups, base)]
        over, matched = np.sort(np.concatenate(keep)), np.sort(np.concatenate(base))
        if over.size >= th.min_samples:
            return Comparison(
                over,
                matched,
                where,
                float(exp.count[over].mean()),
                float(planned[over].mean()),
                int(over_all.size),
            )
    return (
        f"{over_all.size} windows served beyond their plan, but fewer than {th.min_samples} have windows "
        "served as planned at the same planned count to compare them with"
    )


def check_exposure(
    model,
    exp: Exposure,
    th: Thresholds,
    *,
    per_stratum: int = 64,
    probe_len: int = 512,
    batch_size: int = 8,
    effect: Effect | None = None,
) -> dict:
    """Check 1: per source, CE on windows served beyond the plan vs windows served as planned (matched by
    planned servings; the first probe_len tokens). Seeing text lowers its loss, so the plan is the null: a
    planned 2x source is compared with its own as-planned windows. Flags when CE(as planned) -
    CE(over-served) exceeds `exposure_gap_nats` and 3 standard errors. With `effect` (the CE a window loses
    per extra serving), each compared source states its power (olmax/evals/power.py) from the spread of its
    as-planned windows' CE, and the check is inconclusive when it had less than `min_power` at `power_dose`."""
    if exp.tokens is None or exp.source is None:
        return skipped_check("the exposure file has no tokens/sources; pass --mix")
    rng = np.random.default_rng(0)  # a fixed sample: the report is reproducible
    length = min(probe_len, exp.tokens.shape[1])
    per_source, flagged, why = {}, [], {}
    for src in sorted(set(exp.source.tolist())):
        comp = compare_rows(rng, exp, th, exp.source == src, per_stratum)
        if isinstance(comp, str):
            why[src] = comp
            continue
        stats, ce = {}, {}
        for label, rows in (("over_served", comp.over), ("as_planned", comp.planned_rows)):
            per_row = ce[label] = _window_ce(model, exp.tokens[rows, :length], batch_size)
            stats[label] = {
                "windows": int(rows.size),
                "ce": float(per_row.mean()),
                "stderr": float(per_row.std(ddof=1) / np.sqrt(rows.size)) if rows.size > 1 else 0.0,
                "mean_servings": float(exp.count[rows].mean()),
            }
        excess = stats["as_planned"]["ce"] - stats["over_served"]["ce"]
        se = float(np.hypot(stats["as_planned"]["stderr"], stats["over_served"]["stderr"]))
        # the smallest gain this sample flags: a clean verdict rules out gains above it, not below
        detectable = max(th.exposure_gap_nats, 3 * se)
        stats.update(
            compared=comp.describe(exp.count),
            excess_nats=excess,
            excess_stderr=se,
            detectable_nats=detectable,
        )
        if excess > th.exposure_gap_nats and excess > 3 * se:
            flagged.append(src)
        if effect is not None and comp.planned_rows.size > 1:
            stats["power"] = figures(
                effect.nats,
                float(ce["as_planned"].std(ddof=1)),
                Sample(int(comp.over.size), int(comp.planned_rows.size), comp.plan),
                power_test("exposure", th),
                target=th.min_power,
                doses=power_doses(th),
            )
        per_source[src] = stats
    verdict = per_source_verdict(
        per_source,
        flagged,
        why,
        lambda src, w: (
            f"source {src}: CE on {w['compared']} is {w['excess_nats']:.3f} (+-{w['excess_stderr']:.3f}) nats "
            f"lower on the over-served ones (flags above {th.exposure_gap_nats} and 3 standard errors: "
            f"{w['detectable_nats']:.3f} nats at this sample)"
        ),
        key="excess_nats",
    )
    return rate_power(verdict, {s: w.get("power") for s, w in per_source.items()}, th)


def per_source_verdict(per_source: dict, flagged: list, why: dict, message, key: str) -> dict:
    """A check's verdict over sources: ok with nothing to compare when no window was served beyond its plan,
    skipped when over-served windows had no as-planned ones to compare with, else the worst source's line."""
    if not per_source:
        if all(w == "no window served beyond its plan" for w in why.values()):
            return {
                **check_verdict(False, "no window was served beyond its plan: nothing unplanned to test"),
                "compared": "nothing",
                "sources": {},
                "not_compared": why,
            }
        return {
            **skipped_check("; ".join(f"{s}: {w}" for s, w in why.items())),
            "sources": {},
            "not_compared": why,
        }
    worst = max(per_source, key=lambda s: per_source[s][key])
    return {
        **check_verdict(bool(flagged), message(worst, per_source[worst])),
        "flagged_sources": flagged,
        "sources": per_source,
        "not_compared": why,
    }


def check_extraction(
    model,
    exp: Exposure,
    th: Thresholds,
    *,
    per_stratum: int = 64,
    batch_size: int = 8,
    pad_id: int = 0,
    seed: int = 0,
) -> dict:
    """Check 4: extractable memorization, the exact-match rate of greedy continuations of training prefixes,
    windows served beyond the plan vs windows served as planned (matched by planned servings)."""
    from olmax.evals.scoring import greedy_generate

    need = th.extract_prefix + th.extract_new
    if exp.tokens is None:
        return skipped_check("the exposure file has no tokens; pass --mix")
    if exp.tokens.shape[1] < need:
        return skipped_check(f"instances have {exp.tokens.shape[1]} tokens, the probe needs {need}")
    rng = np.random.default_rng(seed + 1)
    comp = compare_rows(rng, exp, th, np.ones(exp.count.shape, bool), per_stratum)
    if isinstance(comp, str):
        return per_source_verdict({}, [], {"all": comp}, None, key="")
    out = {}
    for label, rows in (("over_served", comp.over), ("as_planned", comp.planned_rows)):
        prompts = exp.tokens[rows, : th.extract_prefix].tolist()
        want = exp.tokens[rows, th.extract_prefix : need]
        got = np.asarray(greedy_generate(model, prompts, th.extract_new, pad_id, batch_size=batch_size))
        out[label] = {
            "windows": int(rows.size),
            "exact_match_rate": float((got == want).all(axis=1).mean()),
            "token_match_rate": float((got == want).mean()),
        }
    diff = out["over_served"]["exact_match_rate"] - out["as_planned"]["exact_match_rate"]
    hit = diff > th.extract_rate_gap
    msg = (
        f"greedy {th.extract_new}-token continuation of a {th.extract_prefix}-token prefix matches exactly on "
        f"{out['over_served']['exact_match_rate']:.1%} of the over-served and "
        f"{out['as_planned']['exact_match_rate']:.1%} of the as-planned windows ({comp.describe(exp.count)}; "
        f"flags when the difference > {th.extract_rate_gap:.0%})"
    )
    return {**check_verdict(hit, msg, rate_difference=diff), "compared": comp.describe(exp.count), **out}


def _window_ce(model, tokens: np.ndarray, batch_size: int) -> np.ndarray:
    """Per-row CE (nats/token) of whole training windows, scored as the train loss is (last target unused)."""
    from olmax.evals.scoring import score

    targets = np.zeros_like(tokens)
    targets[:, :-1] = tokens[:, 1:]
    mask = np.ones(tokens.shape, np.float32)
    mask[:, -1] = 0
    nll, count, _ = score(model, tokens, targets, mask, batch_size=batch_size)
    return nll / count


def check_train_vs_unseen(
    model,
    run: Curves,
    exp: Exposure,
    th: Thresholds,
    *,
    per_stratum: int = 64,
    batch_size: int = 8,
    seed: int = 0,
) -> dict:
    """Check 5: train loss near the checkpoint step vs the checkpoint's CE on never-served text of the mix."""
    if exp.tokens is None or exp.source is None:
        return skipped_check("the exposure data has no tokens/sources; pass --mix")
    if not run.train_steps.size:
        return skipped_check("metrics.jsonl has no train loss")
    step = exp.step if exp.step is not None else int(run.train_steps[-1])
    before = run.train_steps <= step
    if not before.any():
        return skipped_check(f"no train loss logged at or before step {step}")
    recent = run.train_loss[before][-th.train_window :]
    train = float(recent.mean())
    train_se = float(recent.std(ddof=1) / np.sqrt(recent.size)) if recent.size > 1 else 0.0
    rng = np.random.default_rng(seed + 2)
    served = exp.count >= 1
    sources = {}
    for src in sorted(set(exp.source.tolist())):
        weight = int((served & (exp.source == src)).sum())
        rows = sample_rows(rng, np.flatnonzero((exp.source == src) & (exp.count == 0)), per_stratum)
        entry = {"served_instances": weight, "unseen_instances": int(rows.size)}
        if weight and rows.size >= th.min_samples:
            ce = _window_ce(model, exp.tokens[rows], batch_size)
            entry.update(unseen_ce=float(ce.mean()), stderr=float(ce.std(ddof=1) / np.sqrt(ce.size)))
        sources[src] = entry
    covered = {k: v for k, v in sources.items() if "unseen_ce" in v}
    total = sum(v["served_instances"] for v in sources.values())
    if not covered or not total:
        return {
            **skipped_check("no served source has enough never-served text to compare"),
            "sources": sources,
        }
    w = sum(v["served_instances"] for v in covered.values())
    unseen = sum(v["served_instances"] * v["unseen_ce"] for v in covered.values()) / w
    # standard error of the difference: the unseen sample's and the logged train losses' (step-to-step noise)
    se = float(
        np.sqrt(train_se**2 + sum((v["served_instances"] / w * v["stderr"]) ** 2 for v in covered.values()))
    )
    coverage = w / total
    gap = unseen - train
    hit = gap > th.unseen_gap_nats and gap > 3 * se
    missing = sorted(k for k, v in sources.items() if k not in covered and v["served_instances"])
    msg = (
        f"train loss {train:.3f} (mean of the last {recent.size} steps to {step}) vs {unseen:.3f} (+-{se:.3f}) "
        f"on never-served text of the same sources: {gap:+.3f} nats (flags above {th.unseen_gap_nats} "
        f"and 3 standard errors)"
    )
    if missing:
        msg += f"; {1 - coverage:.0%} of the served stream came from {', '.join(missing)}, with no unseen text left"
    return check_verdict(
        hit,
        msg,
        step=step,
        train_loss=train,
        unseen_ce=unseen,
        gap_nats=gap,
        stderr=se,
        coverage=coverage,
        sources=sources,
    )


def check_contaminated(gains: dict, th: Thresholds) -> dict:
    """Check 6: contaminated eval items improving beyond clean ones (an `olmax eval gains` report's sets).

    Per set, the CE gain at the last scored step (gap clean - contaminated, minus the gap at the first
    scored step) flags when its 95% bootstrap interval lies wholly above `contam_gain_nats`. Sets with
    fewer than `min_samples` items in either group, or a single scored step, are skipped.
    """
    per_set, flagged = {}, []
    for name, block in gains.get("sets", {}).items():
        ce = block.get("metrics", {}).get("ce")
        if ce is None:
            per_set[name] = skipped_check(f"{name}: {block.get('note', 'no CE scores')}")
            continue
        if min(block["contaminated"], block["clean"]) < th.min_samples:
            per_set[name] = skipped_check(
                f"{name}: {block['contaminated']} contaminated and {block['clean']} clean "
                f"items (needs >= {th.min_samples} of each)"
            )
            continue
        steps = block["steps"]
        if len(steps) < 2:
            per_set[name] = skipped_check(
                f"{name}: one checkpoint scored (step {steps[0]}, gap {ce['gap'][0]:+.3f} "
                "nats); the gain needs two"
            )
            continue
        gain, lo, hi = ce["gain"][-1], ce["gain_lo"][-1], ce["gain_hi"][-1]
        hit = lo > th.contam_gain_nats
        msg = (
            f"{name}: from step {steps[0]} to {steps[-1]} the {block['contaminated']} contaminated items gained "
            f"{gain:+.3f} [{lo:+.3f}, {hi:+.3f}] nats of CE over the {block['clean']} clean ones "
            f"(gap {ce['gap'][0]:+.3f} -> {ce['gap'][-1]:+.3f}; flags when the interval is above "
            f"{th.contam_gain_nats})"
        )
        per_set[name] = check_verdict(
            hit, msg, from_step=steps[0], to_step=steps[-1], gain_nats=gain, gain_lo=lo, gain_hi=hi
        )
        if hit:
            flagged.append(name)
    if not per_set or all(v["status"] == "skipped" for v in per_set.values()):
        why = (
            "no set has contaminated and clean items scored at two steps" if per_set else "no eval set scored"
        )
        return {**skipped_check(why), "sets": per_set}
    msg = (
        f"contaminated items improved beyond clean ones on {', '.join(flagged)}"
        if flagged
        else "contaminated items improved no more than clean ones on every set"
    )
    return {**check_verdict(bool(flagged), msg), "sets": per_set}

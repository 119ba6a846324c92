"""Memorization checks that need a model and exposure counts: 1 exposure, 4 extract, 5 train_vs_unseen.

See memorization.py for what each check means; every function returns a verdict dict (status, flagged,
message and its numbers). Samples are drawn with fixed seeds, so a report is reproducible.
"""

from __future__ import annotations

import numpy as np

from olmax.evals.curves import Curves
from olmax.evals.exposure_file import Exposure
from olmax.evals.verdicts import Thresholds, check_verdict, skipped_check


def sample_rows(rng: np.random.Generator, rows: np.ndarray, n: int) -> np.ndarray:
    """Up to `n` of `rows`, drawn without replacement by `rng`, in ascending order."""
    return np.sort(rng.choice(rows, size=min(n, rows.size), replace=False)) if rows.size else rows


def check_exposure(
    model,
    exp: Exposure,
    th: Thresholds,
    *,
    per_stratum: int = 64,
    probe_len: int = 512,
    batch_size: int = 8,
    seed: int = 0,
) -> dict:
    """Check 1: per source, CE on never-served, once-served and repeated instances (first probe_len tokens).

    Seeing text once already lowers its loss a little (more so right after it was seen), so the statistic
    is the *excess* advantage of repeated text: CE(once) - CE(repeated) when a once-seen stratum exists,
    else CE(unseen) - CE(repeated). It flags when that exceeds `exposure_gap_nats` and 3 standard errors.
    """
    from olmax.evals.scoring import score

    if exp.tokens is None or exp.source is None:
        return skipped_check("the exposure file has no tokens/sources; pass --mix")
    rng = np.random.default_rng(seed)
    strata = {"unseen": exp.count == 0, "once": exp.count == 1, "repeated": exp.count >= th.repeat_min}
    length = min(probe_len, exp.tokens.shape[1])
    per_source, flagged = {}, []
    for src in sorted(set(exp.source.tolist())):
        of_src = exp.source == src
        stats = {}
        for label, sel in strata.items():
            rows = sample_rows(rng, np.flatnonzero(of_src & sel), per_stratum)
            if rows.size == 0:
                stats[label] = {"instances": 0, "ce": None}
                continue
            toks = exp.tokens[rows, :length]
            targets = np.zeros_like(toks)
            targets[:, :-1] = toks[:, 1:]
            mask = np.ones(toks.shape, np.float32)
            mask[:, -1] = 0
            nll, count, _ = score(model, toks, targets, mask, batch_size=batch_size)
            per_row = nll / count
            stats[label] = {
                "instances": int(rows.size),
                "ce": float(nll.sum() / count.sum()),
                "stderr": float(per_row.std(ddof=1) / np.sqrt(rows.size)) if rows.size > 1 else None,
                "mean_exposure": float(exp.count[rows].mean()),
            }
        r = stats["repeated"]
        base = next(
            (label for label in ("once", "unseen") if stats[label]["instances"] >= th.min_samples), None
        )
        if r["instances"] >= th.min_samples and base is not None:
            b = stats[base]
            excess = b["ce"] - r["ce"]
            se = float(np.hypot(b["stderr"] or 0.0, r["stderr"] or 0.0))
            stats["compared_with"] = base
            stats["excess_nats"] = excess
            stats["excess_stderr"] = se
            if excess > th.exposure_gap_nats and excess > 3 * se:
                flagged.append(src)
        per_source[src] = stats
    # a source served only repeatedly (e.g. re-listed in the mix until nothing of it is unseen) has no
    # baseline of its own: compare it with the once-seen (else unseen) text of all other sources
    for src, stats in per_source.items():
        r = stats["repeated"]
        if "excess_nats" in stats or r["instances"] < th.min_samples:
            continue
        for base in ("once", "unseen"):
            pool = sample_rows(rng, np.flatnonzero((exp.source != src) & strata[base]), per_stratum)
            if pool.size >= th.min_samples:
                ce = _window_ce(model, exp.tokens[pool, :length], batch_size)
                excess = float(ce.mean()) - r["ce"]
                se = float(np.hypot(ce.std(ddof=1) / np.sqrt(ce.size), r["stderr"] or 0.0))
                stats.update(
                    compared_with=f"{base} (other sources)",
                    baseline_ce=float(ce.mean()),
                    excess_nats=excess,
                    excess_stderr=se,
                )
                if excess > th.exposure_gap_nats and excess > 3 * se:
                    flagged.append(src)
                break
    compared = [s for s, v in per_source.items() if "excess_nats" in v]
    if not compared:
        return {
            **skipped_check(
                f"no source has >= {th.min_samples} repeated (count >= {th.repeat_min}) and "
                f">= {th.min_samples} once-seen or unseen instances"
            ),
            "sources": per_source,
        }
    worst = max(compared, key=lambda s: per_source[s]["excess_nats"])
    w = per_source[worst]
    base = {"once": "once-seen", "unseen": "never-served"}[w["compared_with"].replace(" (other sources)", "")]
    where = (
        "of other sources (it has none of its own)" if "other" in w["compared_with"] else "of the same source"
    )
    msg = (
        f"source {worst}: CE on instances served >= {th.repeat_min}x is {w['excess_nats']:.3f} "
        f"(+-{w['excess_stderr']:.3f}) nats below {base} text {where} "
        f"(flags above {th.exposure_gap_nats} and 3 standard errors)"
    )
    return {**check_verdict(bool(flagged), msg), "flagged_sources": flagged, "sources": per_source}


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
    """Check 4: extractable memorization, exact-match rate of greedy continuations of training prefixes."""
    from olmax.evals.scoring import greedy_generate

    need = th.extract_prefix + th.extract_new
    if exp.tokens is None:
        return skipped_check("the exposure file has no tokens; pass --mix")
    if exp.tokens.shape[1] < need:
        return skipped_check(f"instances have {exp.tokens.shape[1]} tokens, the probe needs {need}")
    rng = np.random.default_rng(seed + 1)
    out = {}
    for label, sel in (("repeated", exp.count >= th.repeat_min), ("unrepeated", exp.count <= 1)):
        rows = sample_rows(rng, np.flatnonzero(sel), per_stratum)
        if rows.size < th.min_samples:
            out[label] = {"instances": int(rows.size)}
            continue
        prompts = exp.tokens[rows, : th.extract_prefix].tolist()
        want = exp.tokens[rows, th.extract_prefix : need]
        got = np.asarray(greedy_generate(model, prompts, th.extract_new, pad_id, batch_size=batch_size))
        out[label] = {
            "instances": int(rows.size),
            "exact_match_rate": float((got == want).all(axis=1).mean()),
            "token_match_rate": float((got == want).mean()),
        }
    if any("exact_match_rate" not in v for v in out.values()):
        return {**skipped_check(f"needs >= {th.min_samples} repeated and unrepeated instances"), **out}
    diff = out["repeated"]["exact_match_rate"] - out["unrepeated"]["exact_match_rate"]
    hit = diff > th.extract_rate_gap
    msg = (
        f"greedy {th.extract_new}-token continuation of a {th.extract_prefix}-token prefix matches exactly on "
        f"{out['repeated']['exact_match_rate']:.1%} of repeated vs {out['unrepeated']['exact_match_rate']:.1%} "
        f"of unrepeated instances (flags when the difference > {th.extract_rate_gap:.0%})"
    )
    return {**check_verdict(hit, msg, rate_difference=diff), **out}


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

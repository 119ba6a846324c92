"""Memorization flags: is a training-loss gain shared by held-out loss, or is the model memorizing?

Ten checks, each with its numbers, thresholds and a one-line verdict. A check lacking its inputs is
"skipped" and says what it needs. The report's verdict has three values (olmax/evals/verdicts.py): flagged
when any check flags (exit 1), clean when none flags and at least `min_checks_ran` checks ran (exit 0),
else inconclusive (exit 3): too few checks could run to say clean.
The plan is the null: the checks that compare windows compare windows served beyond the mix's plan with
windows served as planned, matched by planned servings (a source the mix lists twice is planned 2x; the same
source at 2x its plan is not). The report states, per source, the planned and the served repetition
(`repetition`) and which windows each check compared.
Power (olmax/evals/power.py): each check that compared windows states the chance it had to flag a dose of
2x and 4x the plan at its sample, the smallest dose it sees with `min_power` (90%) and the over-served windows
it would need for each, from the spread of its score over the run's own as-planned windows and a measured
CE effect per extra serving (`power.MEASURED`, by model size, or `--power-effect`). A check below `min_power`
at `power_dose` (4x) says inconclusive; the verdict is clean only when one that compared reached it.
`--power` also asks what each source could have shown had it been over-served (`power_probe`), for runs where
nothing was.
  1 exposure  loss on windows served beyond the plan vs windows served as planned (needs an exposure file
              or a replayable run, and a checkpoint)
  2 gap       over the run's eval steps, the train-loss drop that held-out loss does not share
              (DIR/metrics.jsonl: train records + `run_heldout` records)
  3 reference the train-loss gain over a reference run/curve that held-out loss does not share
  4 extract   32-token prefix -> greedy 32 tokens, exact-match rate on over-served vs as-planned windows
  5 train_vs_unseen  the run's train loss at the checkpoint step vs the checkpoint's loss on mix text it
              never saw, weighted by each source's share of the served stream. Each train batch was unseen
              when its loss was logged, so in a healthy run the two agree (train slightly higher: the
              model improved since); a train loss below unseen text means it is scored on text it knows.
  6 contaminated  eval items the leak audit found in the training data vs the set's clean items, over the
              run's checkpoints: flags when the contaminated items' CE improved beyond the clean items' by
              more than the 95% bootstrap interval (olmax/evals/gains.py; needs --leaks and --eval, or a
              --gains report)
  7 min_k_pp  Min-K%++ of over-served vs as-planned windows (AUROC, Mann-Whitney z)
  8 zlib      the zlib-normalised loss, the same comparison
  9 checkpoint_diff  the loss each window lost between the run's earliest kept checkpoint and the scored
              one, the same comparison (no reference run needed)
 10 reference_ratio  --reference RUN's model's CE over the run's on each window, the same comparison
              (checks 7-10: olmax/evals/membership.py)
Deterministic: strata are sampled with a fixed seed.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np

from olmax.data.stream import StreamSpec
from olmax.errors import OlmaxError
from olmax.evals.curves import Curves, read_reference, read_run
from olmax.evals.exposure_file import Exposure, attach_mix, read_exposure, repetition_by_source
from olmax.evals.gains import GainsInputs, gains_report, score_run
from olmax.evals.membership import SCORES as MEMBERSHIP
from olmax.evals.membership import check_membership, power_probe
from olmax.evals.model_checks import (
    check_contaminated,
    check_exposure,
    check_extraction,
    check_train_vs_unseen,
)
from olmax.evals.plots import plot_run
from olmax.evals.power import Effect, describe, model_effect
from olmax.evals.run_dir import load_run_model, replay_exposure
from olmax.evals.scoring import load_model
from olmax.evals.verdicts import (
    Models,
    Probe,
    Thresholds,
    check_verdict,
    overall_verdict,
    power_test,
    skipped_check,
    verdict_lines,
)
from olmax.jsonio import read_json

__all__ = [
    "CHECK_MEANINGS",
    "Thresholds",
    "check_contaminated",
    "check_exposure",
    "check_extraction",
    "check_gap",
    "check_reference",
    "check_train_vs_unseen",
    "memorization_report",
    "MemorizationInputs",
    "Models",
    "Probe",
    "run_memorization",
    "summary",
]


# The ten checks in one line each (the demo's report prints them beside the verdicts).
CHECK_MEANINGS = {
    "gap": "over the eval steps, the train-loss drop that held-out loss does not share",
    "reference": "the train-loss gain over a reference run that held-out loss does not share",
    "exposure": "loss on windows served beyond the mix's plan vs windows served as planned",
    "extract": "greedy continuation of 32-token prefixes: exact matches, over-served vs as-planned windows",
    "train_vs_unseen": "the logged train loss vs the checkpoint's loss on mix text it never saw",
    "contaminated": "leaked eval items' CE gain vs the set's clean items', beyond a 95% bootstrap interval",
    "min_k_pp": "Min-K%++ (standardised token log-probabilities), over-served vs as-planned windows: AUROC",
    "zlib": "loss over zlib-compressed size, over-served vs as-planned windows: AUROC",
    "checkpoint_diff": "loss lost since the run's earliest kept checkpoint, over-served vs as-planned: AUROC",
    "reference_ratio": "a reference run's loss over this run's, over-served vs as-planned windows: AUROC",
}


def check_gap(run: Curves, th: Thresholds) -> dict:
    """Check 2: for each held-out set, the largest train-loss drop (from an earlier eval step to the last)
    that held-out loss did not share."""
    if not run.heldout:
        return skipped_check("metrics.jsonl has no held-out records; have the trainer call run_heldout")
    per_set, flagged = {}, []
    for name, (steps, ce) in run.heldout.items():
        if steps.size < 2:
            per_set[name] = skipped_check(f"{name}: one eval step only")
            continue
        last = steps[-1]
        t_last = run.train_at(last, th.train_window)
        best = None
        distance = []
        for s, h in zip(steps[:-1], ce[:-1]):
            t_s = run.train_at(s, th.train_window)
            distance.append(abs(h - t_s))
            d_train = t_s - t_last
            d_held = h - ce[-1]
            if (
                not (math.isfinite(d_train) and d_train >= th.min_train_drop)
                or distance[-1] > th.comparable_nats
            ):
                continue
            widening = d_train - d_held
            if best is None or widening > best["widening"]:
                best = {
                    "from_step": int(s),
                    "to_step": int(last),
                    "train_drop": d_train,
                    "heldout_drop": d_held,
                    "widening": widening,
                    "heldout_share": d_held / d_train,
                }
        if best is None:
            if distance and min(distance) > th.comparable_nats:
                per_set[name] = skipped_check(
                    f"{name}: held-out CE is {min(distance):.2f}+ nats from the train loss at "
                    f"every earlier eval step (> {th.comparable_nats}): a set unlike the "
                    "training mix; check 5 compares with never-served mix text instead"
                )
            else:
                per_set[name] = check_verdict(
                    False,
                    f"{name}: train loss fell by less than {th.min_train_drop} between comparable eval steps",
                    train_drop=None,
                )
            continue
        hit = best["widening"] > th.gap_growth_nats and best["heldout_share"] < th.gap_heldout_share
        msg = (
            f"{name}: steps {best['from_step']}->{best['to_step']} train loss fell {best['train_drop']:.3f}, "
            f"held-out {best['heldout_drop']:.3f} (share {best['heldout_share']:.2f}; flags when share < "
            f"{th.gap_heldout_share} and the gap widens > {th.gap_growth_nats} nats)"
        )
        per_set[name] = check_verdict(hit, msg, **best)
        if hit:
            flagged.append(name)
    if all(v["status"] == "skipped" for v in per_set.values()):
        return {
            **skipped_check(
                "no held-out set has two eval steps with a loss comparable to the train loss "
                "(per-set reasons below)"
            ),
            "sets": per_set,
        }
    msg = (
        f"held-out loss did not follow train loss on {', '.join(flagged)}"
        if flagged
        else "held-out loss followed train loss on every set"
    )
    return {**check_verdict(bool(flagged), msg), "sets": per_set}


def check_reference(run: Curves, ref: Curves, th: Thresholds) -> dict:
    """Check 3: at the last step both curves cover, a train-loss gain over the reference that held-out
    loss (against the reference's held-out curve for the same set) does not share."""
    if not run.train_steps.size or not ref.train_steps.size:
        return skipped_check("run or reference has no train-loss curve")
    steps = [run.heldout[n][0] for n in run.heldout] or [run.train_steps]
    common = [s for s in np.unique(np.concatenate(steps)) if ref.train_steps[0] <= s <= ref.train_steps[-1]]
    if not common:
        return skipped_check(
            f"no step of the run lies within the reference's steps "
            f"[{ref.train_steps[0]:.0f}, {ref.train_steps[-1]:.0f}]"
        )
    step = float(common[-1])
    train_gain = ref.train_at(step, th.train_window) - run.train_at(step, th.train_window)
    out = {"step": int(step), "train_gain": train_gain, "sets": {}}
    if train_gain < th.reference_gain_nats:
        return {
            **check_verdict(
                False,
                f"train loss is not below the reference by {th.reference_gain_nats} nats at "
                f"step {int(step)} (gain {train_gain:.3f})",
            ),
            **out,
        }
    flagged = []
    for name, (steps_h, ce) in run.heldout.items():
        if name not in ref.heldout or step not in steps_h:
            continue
        rs, rv = ref.heldout[name]
        if not rs[0] <= step <= rs[-1]:
            continue
        held_gain = float(np.interp(step, rs, rv)) - float(ce[list(steps_h).index(step)])
        share = held_gain / train_gain
        hit = share < th.reference_heldout_share
        out["sets"][name] = {"heldout_gain": held_gain, "heldout_share": share, "flagged": hit}
        if hit:
            flagged.append(name)
    if not out["sets"]:
        return {
            **check_verdict(
                False,
                f"train loss beats the reference by {train_gain:.3f} nats at step {int(step)}, "
                "but the reference has no held-out curve to compare (check 2 still applies)",
            ),
            **out,
            "status": "unattributed",
        }
    msg = (
        f"train loss beats the reference by {train_gain:.3f} nats at step {int(step)}; held-out gain "
        + ", ".join(f"{n} {v['heldout_gain']:.3f}" for n, v in out["sets"].items())
        + f" (flags when held-out keeps < {th.reference_heldout_share} of the gain)"
    )
    return {**check_verdict(bool(flagged), msg), **out}


def memorization_report(
    run: Curves | None,
    *,
    reference: Curves | None = None,
    exposure: Exposure | None = None,
    models: Models | None = None,
    thresholds: Thresholds | None = None,
    gains: dict | None = None,
    progress: bool = False,
) -> dict:
    """All ten checks and the verdict over them (`verdict`: flagged, clean or inconclusive; `flagged` is true
    when any check flags). `reference`: a reference run's curves (check 3); `models`: the checkpoint the model
    checks score; `gains`: an `olmax eval gains` report (check 6). `progress`: a tqdm bar over the checks
    that score the model (the long part). The checks' power assumes `models.effect` (the CE a window loses per
    extra serving; None: the measurement nearest the model's size); `models.probe.power` asks each source's
    power had it been over-served too (`power_probe`)."""
    th = thresholds or Thresholds()
    if models is not None and models.effect is None:
        models = dataclasses.replace(models, effect=model_effect(models.model))
    effect = models.effect if models is not None else None
    checks = {
        "gap": check_gap(run, th) if run is not None else skipped_check("no run metrics"),
        "reference": (
            check_reference(run, reference, th)
            if run is not None and reference is not None
            else skipped_check("no --reference given")
        ),
    }
    model_checks = ("exposure", "extract", "train_vs_unseen")
    if exposure is None or models is None:
        why = skipped_check(
            "needs a model (--checkpoint, or the run's checkpoints/) and exposure counts (--exposure, "
            "else replayed from the run's config.yaml up to the checkpoint's step)"
            if exposure is None and models is None
            else "needs exposure counts (--exposure, or --checkpoint with a run whose config.yaml replays)"
            if exposure is None
            else "needs a model (--checkpoint, or the run's checkpoints/)"
        )
        checks.update(dict.fromkeys(model_checks, why))
        membership = dict.fromkeys(MEMBERSHIP, why)
    else:
        from tqdm import tqdm

        model, probe = models.model, models.probe
        per_stratum, batch_size = probe.per_stratum, probe.batch_size
        with tqdm(total=4, desc="memorization checks", unit="check", disable=not progress) as bar:
            checks["exposure"] = check_exposure(
                model,
                exposure,
                th,
                per_stratum=per_stratum,
                probe_len=probe.probe_len,
                batch_size=batch_size,
                effect=effect,
            )
            bar.update(1)
            checks["extract"] = check_extraction(
                model, exposure, th, per_stratum=per_stratum, batch_size=batch_size, pad_id=models.pad_id
            )
            bar.update(1)
            checks["train_vs_unseen"] = (
                check_train_vs_unseen(
                    model, run, exposure, th, per_stratum=per_stratum, batch_size=batch_size
                )
                if run is not None
                else skipped_check("no run metrics")
            )
            bar.update(1)
            membership = check_membership(exposure, th, models)
            bar.update(1)
    checks["contaminated"] = (
        check_contaminated(gains, th)
        if gains is not None
        else skipped_check("no leak report and eval sets (--leaks, --eval) or --gains report")
    )
    checks.update(membership)  # after check 6: the report lists the checks in their numbered order
    verdict = overall_verdict(checks, th.min_checks_ran, th.min_power)
    rated = {k: c["power"] for k, c in checks.items() if c.get("power")}
    return {
        **verdict,
        "flagged": verdict["verdict"] == "flagged",
        "repetition": repetition_by_source(exposure, th.repeat_min) if exposure is not None else {},
        "checks": checks,
        "power_section": None
        if effect is None or exposure is None
        else {
            "effect_nats": effect.nats,
            "effect_source": effect.source,
            "target": th.min_power,
            "alpha": power_test("zlib", th).alpha,
            "dose": th.power_dose,
            "checks": rated,
            "sources": power_probe(exposure, th, models) if models.probe.power else None,
        },
        "thresholds": dataclasses.asdict(th),
    }


def summary(report: dict) -> str:
    """The verdict (which checks ran, which were skipped and what each needs), the planned and served
    repetition per source, then every check's line."""
    lines = verdict_lines(report, "memorization")
    if report.get("repetition"):
        lines.append(
            "  repetition per source (planned vs served servings per window served; the mix's listing):"
        )
        for src, r in report["repetition"].items():
            mix = f", the mix lists it {r['mix_repetition']:g}x" if r.get("mix_repetition") else ""
            lines.append(
                f"    {src}: planned {r['planned_repetition']:.2f}x, served {r['served_repetition']:.2f}x; "
                f"{r['over_served']} of {r['windows']} windows served beyond the plan (plan: {r['plan']}{mix})"
            )
    lines.append("  checks:")
    for name, c in report["checks"].items():
        lines.append(f"  [{c['status']:>12}] {name}: {c['message']}")
        for sub in (c.get("sets") or {}).values():
            if isinstance(sub, dict) and sub.get("message"):
                lines.append(f"                 {sub['message']}")
    return "\n".join(lines + power_lines(report))


def power_lines(report: dict) -> list[str]:
    """The power section: the effect per serving it assumes and its source; per check that compared windows,
    per source, what it could see; with `--power`, what each source could have shown had it been over-served."""
    sec = report.get("power_section")
    if not sec:
        return []
    lines = [
        f"  power (a dose is servings over the plan's; {sec['effect_nats']:.4f} nats of CE a window loses per "
        f"extra serving, measured: {sec['effect_source']}; target {sec['target']:.0%}, the checks' one-sided "
        f"alpha {sec['alpha']:.2%}):"
    ]
    for name, c in report["checks"].items():
        for src, w in (c.get("sources") or {}).items():
            if isinstance(w, dict) and w.get("power"):
                lines.append(f"    {name}, source {src}: {describe(w['power'])}")
    if sec.get("sources") is not None:
        lines.append("    had a source been served beyond its plan (the windows a comparison would take):")
        for src, got in sec["sources"].items():
            if "reason" in got:
                lines.append(f"      source {src}: {got['reason']}")
                continue
            for name, f in got["checks"].items():
                lines.append(f"      {name}, source {src} ({got['windows']:,} windows): {describe(f)}")
    if len(lines) == 1:
        lines.append(
            "    no check compared windows served beyond the plan (--power asks what each could have seen)"
        )
    return lines


@dataclasses.dataclass(frozen=True)
class MemorizationInputs:
    """What `olmax eval memorization` reads: the run, optional reference / exposure / model, settings."""

    run: str  # run directory holding metrics.jsonl (and checkpoints/, config.yaml)
    reference: str | None = None  # another run dir or a CSV of step,loss[,...]
    exposure: str | None = None  # exposure file; None: RUN/exposure.{npz,json}, else replayed from the run
    checkpoint: str | None = None  # model for checks 1, 4 and 5; None: the run's checkpoint at `step`
    step: int | None = None  # which RUN/checkpoints step (None: the newest)
    replay: bool = True  # without an exposure file, replay the run's data order
    stream: StreamSpec | None = None  # its mix holds the instance tokens when the exposure file has none
    per_stratum: int = 64
    probe_len: int = 512
    batch_size: int = 8
    dtype: str | None = "float32"  # compute dtype; None: the run's
    mesh: str | None = None  # the devices the models shard over (olmax.evals.eval_mesh); None: auto
    thresholds: tuple[str, ...] = ()  # NAME=VALUE overrides of Thresholds
    plot: str | None = None  # also write the loss curves here (PNG)
    # check 6: an `olmax eval gains` report, else one computed from a leak report and eval sets
    gains: str | None = None
    leaks: str | None = None  # `olmax audit leaks` report
    evals: tuple[str, ...] = ()  # NAME or NAME=PATH, as `olmax eval heldout --eval`
    progress: bool = False  # tqdm bars on the scoring
    eval_limit: int | None = None  # first N documents of each set
    tokenizer: str | None = None  # for the eval sets; None: $OLMAX_EVAL_TOKENIZER, else dolma2
    power: bool = False  # also what each source could have shown had it been served beyond its plan
    power_effect: float | None = None  # CE nats a window loses per extra serving (None: power.MEASURED)


def run_memorization(inp: MemorizationInputs) -> dict:
    """Read the inputs, run the checks; returns the report (`report["flagged"]` holds the verdict)."""
    run_dir = Path(inp.run)
    if not run_dir.is_dir():
        raise OlmaxError(f"{run_dir}: not a run directory")
    th = Thresholds.parse(list(inp.thresholds))
    if inp.power_effect is not None and not inp.power_effect > 0:
        raise OlmaxError(
            f"--power-effect {inp.power_effect}: the CE a window loses per extra serving must be > 0 nats"
        )
    run = read_run(run_dir)
    gains = _gains(inp, run_dir)  # before the model loads: a bad --leaks/--eval fails fast
    ref = read_reference(inp.reference) if inp.reference else None
    exp_path = inp.exposure or next(
        (str(p) for p in (run_dir / "exposure.npz", run_dir / "exposure.json") if p.is_file()), None
    )
    exposure = model = None
    pad_id, step = 0, None
    if inp.checkpoint:
        model = load_model(inp.checkpoint, inp.dtype, inp.mesh)
    elif (run_dir / "checkpoints").is_dir():
        model, step = load_run_model(run_dir, inp.step, inp.dtype, inp.mesh)
    if model is not None and model.cfg.pad_token_id is not None:
        pad_id = model.cfg.pad_token_id
    ref_model, ref_name = _reference_model(inp) if model is not None else (None, None)
    earlier, earlier_name, share = (
        _earlier_model(inp, run_dir, step) if model is not None else (None, None, None)
    )
    if exp_path:
        exposure = attach_mix(
            read_exposure(exp_path), inp.stream, unseen_per_source=inp.per_stratum if inp.stream else 0
        )
    elif step is not None and inp.replay:
        exp_path = f"replayed from {run_dir / 'config.yaml'} up to step {step}"
        exposure = replay_exposure(run_dir, step, unseen_per_source=inp.per_stratum)
    report = memorization_report(
        run,
        reference=ref,
        exposure=exposure,
        models=(
            Models(
                model,
                Probe(inp.per_stratum, inp.probe_len, inp.batch_size, power=inp.power),
                pad_id,
                ref_model,
                ref_name,
                earlier,
                earlier_name,
                share,
                Effect(inp.power_effect, "given (--power-effect)") if inp.power_effect is not None else None,
            )
            if model is not None
            else None
        ),
        thresholds=th,
        gains=gains,
        progress=inp.progress,
    )
    report = {
        "run": str(run_dir),
        "reference": inp.reference,
        "exposure": exp_path,
        "checkpoint": inp.checkpoint
        or (f"{run_dir / 'checkpoints'} step {step}" if step is not None else None),
        **report,
    }
    if inp.plot and (run.train_steps.size or run.heldout):
        report["plot"] = str(plot_run(run_dir, inp.plot, reference=inp.reference))
    return report


def _reference_model(inp: MemorizationInputs):
    """Check 10's reference model and its name: `--reference RUN`'s newest checkpoint when RUN has checkpoints;
    (None, None) otherwise."""
    from olmax.train.checkpoint import complete_steps

    if inp.reference and (Path(inp.reference) / "checkpoints").is_dir():
        if complete_steps(Path(inp.reference) / "checkpoints"):
            model, ref_step = load_run_model(inp.reference, None, inp.dtype, inp.mesh)
            return model, f"{inp.reference} step {ref_step}"
    return None, None


def _earlier_model(inp: MemorizationInputs, run_dir, step: int | None):
    """Check 9's earlier checkpoint: this run's earliest kept checkpoint before the scored one, its name
    (which checkpoints the check compares) and the share of the run's steps between them (what part of a
    dose check 9 sees); (None, None, None) when the run kept no earlier one."""
    from olmax.train.checkpoint import complete_steps

    if step is None:
        return None, None, None
    earlier = [s for s in complete_steps(run_dir / "checkpoints") if s < step]
    if not earlier:
        return None, None, None
    model, old = load_run_model(run_dir, min(earlier), inp.dtype, inp.mesh)
    name = f"this run's earliest kept checkpoint (step {old}) to the scored one (step {step})"
    return model, name, (step - old) / step


def _gains(inp: MemorizationInputs, run_dir) -> dict | None:
    """Check 6's input: the given gains report, else one scored now over the run's checkpoints."""
    if inp.gains:
        return read_json(inp.gains, "an `olmax eval gains` report")
    if not inp.leaks or not inp.evals:
        if inp.leaks or inp.evals:
            raise OlmaxError(
                "check 6 needs both --leaks (an `olmax audit leaks` report) and --eval NAME[=PATH]"
            )
        return None
    scores = score_run(
        GainsInputs(
            run=str(run_dir),
            leaks=inp.leaks,
            evals=tuple(inp.evals),
            limit=inp.eval_limit,
            batch_size=inp.batch_size,
            tokenizer=inp.tokenizer,
            dtype=inp.dtype,
            progress=inp.progress,
        )
    )
    return gains_report(scores)

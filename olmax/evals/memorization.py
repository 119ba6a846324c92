"""Memorization flags: is a training-loss gain shared by held-out loss, or is the model memorizing?

Five checks, each with its numbers, thresholds and a one-line verdict; the report's `flagged` is true
when any check flags. A check lacking its inputs is "skipped" (never flagged) and says what it needs.
  1 exposure  loss on training instances served >= repeat_min times vs never-served instances of the
              same source (needs an exposure file and a checkpoint)
  2 gap       over the run's eval steps, the train-loss drop that held-out loss does not share
              (DIR/metrics.jsonl: train records + `run_heldout` records)
  3 reference the train-loss gain over a reference run/curve that held-out loss does not share
  4 extract   32-token prefix -> greedy 32 tokens, exact-match rate on repeated vs unrepeated instances
  5 train_vs_unseen  the run's train loss at the checkpoint step vs the checkpoint's loss on mix text it
              never saw, weighted by each source's share of the served stream. Each train batch was unseen
              when its loss was logged, so in a healthy run the two agree (train slightly higher: the
              model improved since); a train loss below unseen text means it is scored on text it knows.
Deterministic: strata are sampled with a fixed seed.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from olmax.errors import OlmaxError
from olmax.evals.curves import Curves
from olmax.evals.exposure import Exposure


@dataclass(frozen=True)
class Thresholds:
    repeat_min: int = 2  # "repeated": served at least this many times
    min_samples: int = 4  # instances per stratum below which checks 1 and 4 are skipped
    exposure_gap_nats: float = 0.1  # check 1: CE(once-seen, else unseen) - CE(repeated) above this flags
    train_window: int = 20  # train records averaged around a step (raw per-step losses are noisy)
    min_train_drop: float = 0.05  # checks 2-3: a train-loss improvement smaller than this is noise
    # check 2: flag when a held-out set kept less than this share of the train-loss drop since an earlier
    # eval step (and the gap widened by more than gap_growth_nats). Held-out sets unlike the training mix
    # (e.g. QA sets for a code model) improve less than train loss even in a healthy run, so the default
    # only flags held-out loss that (nearly) stopped improving; check 5 is the in-distribution comparison.
    gap_heldout_share: float = 0.1
    gap_growth_nats: float = 0.1
    # check 2 compares from an eval step only where the set's CE is within this of the train loss: a set
    # far from the training distribution says little about memorization (its loss barely moves anyway)
    comparable_nats: float = 0.5
    reference_gain_nats: float = 0.05  # check 3: train-loss gain over the reference that counts
    reference_heldout_share: float = 0.5  # check 3: flag when held-out keeps less than this share of that gain
    extract_prefix: int = 32  # check 4: prompt tokens
    extract_new: int = 32  # check 4: greedy tokens compared
    extract_rate_gap: float = 0.05  # check 4: exact-match rate repeated - unrepeated above this flags
    unseen_gap_nats: float = 0.1  # check 5: CE(unseen mix text) - train loss above this (and 3 s.e.) flags

    @classmethod
    def parse(cls, overrides: list[str]) -> Thresholds:
        fields = {f.name: f.type for f in dataclasses.fields(cls)}
        values = {}
        for item in overrides:
            name, _, raw = item.partition("=")
            if name not in fields or not raw:
                raise OlmaxError(f"--threshold {item!r}: expected NAME=VALUE with NAME one of {sorted(fields)}")
            values[name] = int(raw) if fields[name] == "int" else float(raw)
        return cls(**values)


def _skipped(why: str) -> dict:
    return {"status": "skipped", "flagged": False, "message": why}


def _verdict(flagged: bool, message: str, **numbers) -> dict:
    return {"status": "flagged" if flagged else "ok", "flagged": flagged, "message": message, **numbers}


def check_gap(run: Curves, th: Thresholds) -> dict:
    """Check 2: for each held-out set, the largest train-loss drop (from an earlier eval step to the last)
    that held-out loss did not share."""
    if not run.heldout:
        return _skipped("metrics.jsonl has no held-out records; have the trainer call run_heldout")
    per_set, flagged = {}, []
    for name, (steps, ce) in run.heldout.items():
        if steps.size < 2:
            per_set[name] = _skipped(f"{name}: one eval step only")
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
            if not (math.isfinite(d_train) and d_train >= th.min_train_drop) or distance[-1] > th.comparable_nats:
                continue
            widening = d_train - d_held
            if best is None or widening > best["widening"]:
                best = {"from_step": int(s), "to_step": int(last), "train_drop": d_train, "heldout_drop": d_held,
                        "widening": widening, "heldout_share": d_held / d_train}
        if best is None:
            if distance and min(distance) > th.comparable_nats:
                per_set[name] = _skipped(f"{name}: held-out CE is {min(distance):.2f}+ nats from the train loss at "
                                         f"every earlier eval step (> {th.comparable_nats}): a set unlike the "
                                         "training mix; check 5 compares with never-served mix text instead")
            else:
                per_set[name] = _verdict(False, f"{name}: train loss fell by less than {th.min_train_drop} "
                                         "between comparable eval steps", train_drop=None)
            continue
        hit = best["widening"] > th.gap_growth_nats and best["heldout_share"] < th.gap_heldout_share
        msg = (f"{name}: steps {best['from_step']}->{best['to_step']} train loss fell {best['train_drop']:.3f}, "
               f"held-out {best['heldout_drop']:.3f} (share {best['heldout_share']:.2f}; flags when share < "
               f"{th.gap_heldout_share} and the gap widens > {th.gap_growth_nats} nats)")
        per_set[name] = _verdict(hit, msg, **best)
        if hit:
            flagged.append(name)
    if all(v["status"] == "skipped" for v in per_set.values()):
        return {**_skipped("no held-out set has two eval steps with a loss comparable to the train loss "
                           "(per-set reasons below)"), "sets": per_set}
    msg = (f"held-out loss did not follow train loss on {', '.join(flagged)}" if flagged
           else "held-out loss followed train loss on every set")
    return {**_verdict(bool(flagged), msg), "sets": per_set}


def check_reference(run: Curves, ref: Curves, th: Thresholds) -> dict:
    """Check 3: at the last step both curves cover, a train-loss gain over the reference that held-out
    loss (against the reference's held-out curve for the same set) does not share."""
    if not run.train_steps.size or not ref.train_steps.size:
        return _skipped("run or reference has no train-loss curve")
    steps = [run.heldout[n][0] for n in run.heldout] or [run.train_steps]
    common = [s for s in np.unique(np.concatenate(steps)) if ref.train_steps[0] <= s <= ref.train_steps[-1]]
    if not common:
        return _skipped(f"no step of the run lies within the reference's steps "
                        f"[{ref.train_steps[0]:.0f}, {ref.train_steps[-1]:.0f}]")
    step = float(common[-1])
    train_gain = ref.train_at(step, th.train_window) - run.train_at(step, th.train_window)
    out = {"step": int(step), "train_gain": train_gain, "sets": {}}
    if train_gain < th.reference_gain_nats:
        return {**_verdict(False, f"train loss is not below the reference by {th.reference_gain_nats} nats at "
                           f"step {int(step)} (gain {train_gain:.3f})"), **out}
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
        return {**_verdict(False, f"train loss beats the reference by {train_gain:.3f} nats at step {int(step)}, "
                           "but the reference has no held-out curve to compare (check 2 still applies)"),
                **out, "status": "unattributed"}
    msg = (f"train loss beats the reference by {train_gain:.3f} nats at step {int(step)}; held-out gain "
           + ", ".join(f"{n} {v['heldout_gain']:.3f}" for n, v in out["sets"].items())
           + f" (flags when held-out keeps < {th.reference_heldout_share} of the gain)")
    return {**_verdict(bool(flagged), msg), **out}


def _sample(rng: np.random.Generator, rows: np.ndarray, n: int) -> np.ndarray:
    return np.sort(rng.choice(rows, size=min(n, rows.size), replace=False)) if rows.size else rows


def check_exposure(model, exp: Exposure, th: Thresholds, *, per_stratum: int = 64, probe_len: int = 512,
                   batch_size: int = 8, seed: int = 0) -> dict:
    """Check 1: per source, CE on never-served, once-served and repeated instances (first probe_len tokens).

    Seeing text once already lowers its loss a little (more so right after it was seen), so the statistic
    is the *excess* advantage of repeated text: CE(once) - CE(repeated) when a once-seen stratum exists,
    else CE(unseen) - CE(repeated). It flags when that exceeds `exposure_gap_nats` and 3 standard errors.
    """
    from olmax.evals.scoring import score

    if exp.tokens is None or exp.source is None:
        return _skipped("the exposure file has no tokens/sources; pass --mix")
    rng = np.random.default_rng(seed)
    strata = {"unseen": exp.count == 0, "once": exp.count == 1, "repeated": exp.count >= th.repeat_min}
    length = min(probe_len, exp.tokens.shape[1])
    per_source, flagged = {}, []
    for src in sorted(set(exp.source.tolist())):
        of_src = exp.source == src
        stats = {}
        for label, sel in strata.items():
            rows = _sample(rng, np.flatnonzero(of_src & sel), per_stratum)
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
            stats[label] = {"instances": int(rows.size), "ce": float(nll.sum() / count.sum()),
                            "stderr": float(per_row.std(ddof=1) / np.sqrt(rows.size)) if rows.size > 1 else None,
                            "mean_exposure": float(exp.count[rows].mean())}
        r = stats["repeated"]
        base = next((label for label in ("once", "unseen") if stats[label]["instances"] >= th.min_samples), None)
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
            pool = _sample(rng, np.flatnonzero((exp.source != src) & strata[base]), per_stratum)
            if pool.size >= th.min_samples:
                ce = _window_ce(model, exp.tokens[pool, :length], batch_size)
                excess = float(ce.mean()) - r["ce"]
                se = float(np.hypot(ce.std(ddof=1) / np.sqrt(ce.size), r["stderr"] or 0.0))
                stats.update(compared_with=f"{base} (other sources)", baseline_ce=float(ce.mean()),
                             excess_nats=excess, excess_stderr=se)
                if excess > th.exposure_gap_nats and excess > 3 * se:
                    flagged.append(src)
                break
    compared = [s for s, v in per_source.items() if "excess_nats" in v]
    if not compared:
        return {**_skipped(f"no source has >= {th.min_samples} repeated (count >= {th.repeat_min}) and "
                           f">= {th.min_samples} once-seen or unseen instances"), "sources": per_source}
    worst = max(compared, key=lambda s: per_source[s]["excess_nats"])
    w = per_source[worst]
    base = {"once": "once-seen", "unseen": "never-served"}[w["compared_with"].replace(" (other sources)", "")]
    where = "of other sources (it has none of its own)" if "other" in w["compared_with"] else "of the same source"
    msg = (f"source {worst}: CE on instances served >= {th.repeat_min}x is {w['excess_nats']:.3f} "
           f"(+-{w['excess_stderr']:.3f}) nats below {base} text {where} "
           f"(flags above {th.exposure_gap_nats} and 3 standard errors)")
    return {**_verdict(bool(flagged), msg), "flagged_sources": flagged, "sources": per_source}


def check_extraction(model, exp: Exposure, th: Thresholds, *, per_stratum: int = 64, batch_size: int = 8,
                     pad_id: int = 0, seed: int = 0) -> dict:
    """Check 4: extractable memorization, exact-match rate of greedy continuations of training prefixes."""
    from olmax.evals.scoring import greedy_generate

    need = th.extract_prefix + th.extract_new
    if exp.tokens is None:
        return _skipped("the exposure file has no tokens; pass --mix")
    if exp.tokens.shape[1] < need:
        return _skipped(f"instances have {exp.tokens.shape[1]} tokens, the probe needs {need}")
    rng = np.random.default_rng(seed + 1)
    out = {}
    for label, sel in (("repeated", exp.count >= th.repeat_min), ("unrepeated", exp.count <= 1)):
        rows = _sample(rng, np.flatnonzero(sel), per_stratum)
        if rows.size < th.min_samples:
            out[label] = {"instances": int(rows.size)}
            continue
        prompts = exp.tokens[rows, : th.extract_prefix].tolist()
        want = exp.tokens[rows, th.extract_prefix: need]
        got = np.asarray(greedy_generate(model, prompts, th.extract_new, pad_id, batch_size=batch_size))
        out[label] = {"instances": int(rows.size), "exact_match_rate": float((got == want).all(axis=1).mean()),
                      "token_match_rate": float((got == want).mean())}
    if any("exact_match_rate" not in v for v in out.values()):
        return {**_skipped(f"needs >= {th.min_samples} repeated and unrepeated instances"), **out}
    diff = out["repeated"]["exact_match_rate"] - out["unrepeated"]["exact_match_rate"]
    hit = diff > th.extract_rate_gap
    msg = (f"greedy {th.extract_new}-token continuation of a {th.extract_prefix}-token prefix matches exactly on "
           f"{out['repeated']['exact_match_rate']:.1%} of repeated vs {out['unrepeated']['exact_match_rate']:.1%} "
           f"of unrepeated instances (flags when the difference > {th.extract_rate_gap:.0%})")
    return {**_verdict(hit, msg, rate_difference=diff), **out}


def _window_ce(model, tokens: np.ndarray, batch_size: int) -> np.ndarray:
    """Per-row CE (nats/token) of whole training windows, scored as the train loss is (last target unused)."""
    from olmax.evals.scoring import score

    targets = np.zeros_like(tokens)
    targets[:, :-1] = tokens[:, 1:]
    mask = np.ones(tokens.shape, np.float32)
    mask[:, -1] = 0
    nll, count, _ = score(model, tokens, targets, mask, batch_size=batch_size)
    return nll / count


def check_train_vs_unseen(model, run: Curves, exp: Exposure, th: Thresholds, *, per_stratum: int = 64,
                          batch_size: int = 8, seed: int = 0) -> dict:
    """Check 5: train loss near the checkpoint step vs the checkpoint's CE on never-served text of the mix."""
    if exp.tokens is None or exp.source is None:
        return _skipped("the exposure data has no tokens/sources; pass --mix")
    if not run.train_steps.size:
        return _skipped("metrics.jsonl has no train loss")
    step = exp.step if exp.step is not None else int(run.train_steps[-1])
    before = run.train_steps <= step
    if not before.any():
        return _skipped(f"no train loss logged at or before step {step}")
    recent = run.train_loss[before][-th.train_window:]
    train = float(recent.mean())
    train_se = float(recent.std(ddof=1) / np.sqrt(recent.size)) if recent.size > 1 else 0.0
    rng = np.random.default_rng(seed + 2)
    served = exp.count >= 1
    sources = {}
    for src in sorted(set(exp.source.tolist())):
        weight = int((served & (exp.source == src)).sum())
        rows = _sample(rng, np.flatnonzero((exp.source == src) & (exp.count == 0)), per_stratum)
        entry = {"served_instances": weight, "unseen_instances": int(rows.size)}
        if weight and rows.size >= th.min_samples:
            ce = _window_ce(model, exp.tokens[rows], batch_size)
            entry.update(unseen_ce=float(ce.mean()), stderr=float(ce.std(ddof=1) / np.sqrt(ce.size)))
        sources[src] = entry
    covered = {k: v for k, v in sources.items() if "unseen_ce" in v}
    total = sum(v["served_instances"] for v in sources.values())
    if not covered or not total:
        return {**_skipped("no served source has enough never-served text to compare"), "sources": sources}
    w = sum(v["served_instances"] for v in covered.values())
    unseen = sum(v["served_instances"] * v["unseen_ce"] for v in covered.values()) / w
    # standard error of the difference: the unseen sample's and the logged train losses' (step-to-step noise)
    se = float(np.sqrt(train_se ** 2 + sum((v["served_instances"] / w * v["stderr"]) ** 2
                                           for v in covered.values())))
    coverage = w / total
    gap = unseen - train
    hit = gap > th.unseen_gap_nats and gap > 3 * se
    missing = sorted(k for k, v in sources.items() if k not in covered and v["served_instances"])
    msg = (f"train loss {train:.3f} (mean of the last {recent.size} steps to {step}) vs {unseen:.3f} (+-{se:.3f}) "
           f"on never-served text of the same sources: {gap:+.3f} nats (flags above {th.unseen_gap_nats})")
    if missing:
        msg += f"; {1 - coverage:.0%} of the served stream came from {', '.join(missing)}, with no unseen text left"
    return _verdict(hit, msg, step=step, train_loss=train, unseen_ce=unseen, gap_nats=gap, stderr=se,
                    coverage=coverage, sources=sources)


def memorization_report(run: Curves | None, *, reference: Curves | None = None, exposure: Exposure | None = None,
                        model=None, thresholds: Thresholds | None = None, per_stratum: int = 64,
                        probe_len: int = 512, batch_size: int = 8, pad_id: int = 0) -> dict:
    """All five checks; `flagged` is true when any flags."""
    th = thresholds or Thresholds()
    checks = {
        "gap": check_gap(run, th) if run is not None else _skipped("no run metrics"),
        "reference": (check_reference(run, reference, th) if run is not None and reference is not None
                      else _skipped("no --reference given")),
    }
    if exposure is None:
        checks["exposure"] = checks["extract"] = checks["train_vs_unseen"] = _skipped("no exposure file (--exposure)")
    elif model is None:
        checks["exposure"] = checks["extract"] = checks["train_vs_unseen"] = _skipped("no model (--checkpoint)")
    else:
        checks["exposure"] = check_exposure(model, exposure, th, per_stratum=per_stratum, probe_len=probe_len,
                                            batch_size=batch_size)
        checks["extract"] = check_extraction(model, exposure, th, per_stratum=per_stratum, batch_size=batch_size,
                                             pad_id=pad_id)
        checks["train_vs_unseen"] = (
            check_train_vs_unseen(model, run, exposure, th, per_stratum=per_stratum, batch_size=batch_size)
            if run is not None else _skipped("no run metrics"))
    return {"flagged": any(c["flagged"] for c in checks.values()),
            "checks": checks, "thresholds": dataclasses.asdict(th)}


def summary(report: dict) -> str:
    lines = [f"memorization: {'FLAGGED' if report['flagged'] else 'not flagged'}"]
    for name, c in report["checks"].items():
        lines.append(f"  [{c['status']:>12}] {name}: {c['message']}")
        for sub in (c.get("sets") or {}).values():
            if isinstance(sub, dict) and sub.get("message"):
                lines.append(f"                 {sub['message']}")
    return "\n".join(lines)


def run_memorization(args) -> dict:
    """CLI glue for `olmax eval memorization`: read inputs, run the checks, write the report atomically."""
    from pathlib import Path

    from olmax.evals.curves import read_reference, read_run
    from olmax.evals.exposure import attach_mix, read_exposure
    from olmax.evals.reports import write_json

    run_dir = Path(args.run)
    if not run_dir.is_dir():
        raise OlmaxError(f"{run_dir}: not a run directory")
    th = Thresholds.parse(args.threshold)
    run = read_run(run_dir)
    ref = read_reference(args.reference) if args.reference else None
    exp_path = args.exposure or next((str(p) for p in (run_dir / "exposure.npz", run_dir / "exposure.json")
                                      if p.is_file()), None)
    exposure = model = None
    pad_id, step = 0, None
    if args.checkpoint:
        from olmax.evals.scoring import load_model

        model = load_model(args.checkpoint, args.dtype)
    elif (run_dir / "checkpoints").is_dir():
        from olmax.evals.run_dir import load_run_model

        model, step = load_run_model(run_dir, args.step, args.dtype)
    if model is not None and model.cfg.pad_token_id is not None:
        pad_id = model.cfg.pad_token_id
    if exp_path:
        exposure = attach_mix(read_exposure(exp_path), args.mix, args.base_dir,
                              unseen_per_source=args.per_stratum if args.mix else 0)
    elif step is not None and not args.no_replay:
        from olmax.evals.run_dir import replay_exposure

        exp_path = f"replayed from {run_dir / 'config.yaml'} up to step {step}"
        exposure = replay_exposure(run_dir, step, unseen_per_source=args.per_stratum)
    report = memorization_report(run, reference=ref, exposure=exposure, model=model, thresholds=th,
                                 per_stratum=args.per_stratum, probe_len=args.probe_len,
                                 batch_size=args.batch_size, pad_id=pad_id)
    report = {"run": str(run_dir), "reference": args.reference, "exposure": exp_path,
              "checkpoint": args.checkpoint or (f"{run_dir / 'checkpoints'} step {step}" if step is not None else None),
              **report}
    if getattr(args, "plot", None) and (run.train_steps.size or run.heldout):
        from olmax.evals.plots import plot_run

        report["plot"] = str(plot_run(run_dir, args.plot, reference=args.reference))
    write_json(args.out, report)
    print(summary(report))
    print(f"wrote {args.out}")
    return report

"""Gains attributed to contamination: contaminated vs clean items of each eval set over a run's checkpoints.

For each scored checkpoint, every item of a set is scored alone (one document per instance, as
`olmax eval heldout`): CE (nats/token) and bits-per-byte per item, and, for sets with answer choices (the
bundled sets lm-eval's `olmax_*` tasks cover), whether the highest-loglikelihood choice is the gold one.
An `olmax audit leaks` report splits the items into contaminated and clean; per set and checkpoint:

  gap   = mean(clean) - mean(contaminated) for CE and bpb (positive: contaminated items are easier),
          mean(contaminated) - mean(clean) for accuracy; items weigh equally
  gain  = gap(step) - gap(first scored step): how much more the contaminated items improved
  95% intervals: percentile bootstrap over items, resampled within each group (`resamples` draws, fixed
          seed). The same draws serve every step, so a gain's interval is paired across steps.
  by exposure (with an `olmax audit exposure` report): the CE gap and gain of the contaminated items
          served 0, 1, 2-3, 4-7 and 8+ times, each against all clean items.

A set flags (memorization check "contaminated", model_checks.check_contaminated) when its CE gain at the
last step has a 95% interval wholly above `Thresholds.contam_gain_nats`: the contaminated items improved
beyond the clean ones by more than chance. Deterministic: fixed-seed resampling, fixed-order scoring.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from olmax.atomic import temp_path
from olmax.errors import OlmaxError
from olmax.evals.hook import eval_tokenizer
from olmax.evals.lm_eval_tasks import TASKS
from olmax.evals.model_checks import check_contaminated
from olmax.evals.run_dir import load_run_model
from olmax.evals.verdicts import Thresholds, overall_verdict, verdict_lines
from olmax.evalsets.read import read_eval_rows, resolve_source, template_key
from olmax.evalsets.sets import contaminated_ids, join_leaks, load_eval_set
from olmax.evalsets.spec import parse_eval_specs
from olmax.jsonio import read_json
from olmax.train.config import load_run_config

LN2 = math.log(2.0)
BUCKETS = ((0, 0, "0"), (1, 1, "1"), (2, 3, "2-3"), (4, 7, "4-7"), (8, None, "8+"))  # servings, inclusive
LOWER_IS_BETTER = {"ce": True, "bpb": True, "acc": False}


@dataclass(frozen=True)
class SetScores:
    """Per-item scores of one eval set at each scored checkpoint."""

    name: str
    ids: tuple[str, ...]
    contaminated: np.ndarray  # bool (N,)
    steps: np.ndarray  # int64 (S,), ascending
    metrics: dict[str, np.ndarray]  # "ce", "bpb" and (sets with choices) "acc" -> float64 (S, N)
    exposures: np.ndarray | None = (
        None  # int64 (N,): servings per item (-1: unknown); None: no exposure report
    )


# ------------------------------------------------------------------------------------------ statistics
def _boot_means(values_SxN: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """(R, S): means over items of `resamples` bootstrap draws of the N items (the same draw at every step)."""
    n = values_SxN.shape[1]
    weights_RxN = rng.multinomial(n, np.full(n, 1.0 / n), size=resamples) / n
    return weights_RxN @ values_SxN.T


def _interval(draws_RxS: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = np.percentile(draws_RxS, [2.5, 97.5], axis=0)
    return lo, hi


def gap_stats(
    values_SxN: np.ndarray,
    contaminated: np.ndarray,
    *,
    lower_is_better: bool = True,
    resamples: int = 2000,
    seed: int = 0,
) -> dict:
    """Per step: each group's mean, the gap (contaminated easier: positive) and its gain since step 0, with
    bootstrap 95% intervals (lists over steps)."""
    values_SxN = np.asarray(values_SxN, np.float64)
    contaminated = np.asarray(contaminated, bool)
    clean_SxC, cont_SxK = values_SxN[:, ~contaminated], values_SxN[:, contaminated]
    if not clean_SxC.shape[1] or not cont_SxK.shape[1]:
        raise OlmaxError(
            f"gap needs contaminated and clean items ({cont_SxK.shape[1]} and {clean_SxC.shape[1]})"
        )
    sign = 1.0 if lower_is_better else -1.0
    rng = np.random.default_rng(seed)
    gap_S = sign * (clean_SxC.mean(axis=1) - cont_SxK.mean(axis=1))
    draws_RxS = sign * (_boot_means(clean_SxC, rng, resamples) - _boot_means(cont_SxK, rng, resamples))
    gain_draws_RxS = draws_RxS - draws_RxS[:, :1]
    gap_lo, gap_hi = _interval(draws_RxS)
    gain_lo, gain_hi = _interval(gain_draws_RxS)
    return {
        "clean": clean_SxC.mean(axis=1).tolist(),
        "contaminated": cont_SxK.mean(axis=1).tolist(),
        "gap": gap_S.tolist(),
        "gap_lo": gap_lo.tolist(),
        "gap_hi": gap_hi.tolist(),
        "gain": (gap_S - gap_S[0]).tolist(),
        "gain_lo": gain_lo.tolist(),
        "gain_hi": gain_hi.tolist(),
    }


def exposure_bucket(servings: int) -> str | None:
    """The bucket label of an item served `servings` times (None when unknown, i.e. negative)."""
    for lo, hi, label in BUCKETS:
        if servings >= lo and (hi is None or servings <= hi):
            return label
    return None


def by_exposure(
    ce_SxN: np.ndarray,
    contaminated: np.ndarray,
    exposures: np.ndarray,
    *,
    resamples: int = 2000,
    seed: int = 0,
) -> list[dict]:
    """CE gap and gain at the last step per exposure bucket of the contaminated items (vs all clean items)."""
    out = []
    for _, _, label in BUCKETS:
        sel = contaminated & np.asarray([exposure_bucket(int(e)) == label for e in exposures])
        row: dict = {"bucket": label, "items": int(sel.sum())}
        if sel.any():
            keep = sel | ~contaminated
            st = gap_stats(ce_SxN[:, keep], sel[keep], resamples=resamples, seed=seed)
            row.update(
                {k: st[k][-1] for k in ("gap", "gap_lo", "gap_hi", "gain", "gain_lo", "gain_hi")},
                mean_exposures=float(exposures[sel].mean()),
            )
        out.append(row)
    return out


def set_report(s: SetScores, *, resamples: int = 2000, seed: int = 0) -> dict:
    """The per-set block of the gains report (see the module docstring)."""
    n_cont = int(s.contaminated.sum())
    out: dict = {
        "eval": s.name,
        "items": len(s.ids),
        "contaminated": n_cont,
        "clean": len(s.ids) - n_cont,
        "steps": s.steps.tolist(),
        "metrics": {},
    }
    if not n_cont or n_cont == len(s.ids):
        out["note"] = (
            "no contaminated items" if not n_cont else "every item is contaminated: no clean baseline"
        )
        return out
    for name, values in s.metrics.items():
        out["metrics"][name] = gap_stats(
            values, s.contaminated, lower_is_better=LOWER_IS_BETTER[name], resamples=resamples, seed=seed
        )
    if s.exposures is not None:
        out["by_exposure"] = by_exposure(
            s.metrics["ce"], s.contaminated, s.exposures, resamples=resamples, seed=seed
        )
    return out


def gains_report(
    scores: Sequence[SetScores], *, resamples: int = 2000, seed: int = 0, thresholds=None
) -> dict:
    """Every set's block, the memorization check over them (`verdict`, check "contaminated") and the
    command's three-valued outcome (`outcome`: flagged, clean when a set was compared and none flagged,
    inconclusive when no set could be compared; with its exit status and what each skipped set needs)."""
    th = thresholds or Thresholds()
    sets = {s.name: set_report(s, resamples=resamples, seed=seed) for s in scores}
    report = {"command": "eval gains", "resamples": resamples, "seed": seed, "sets": sets}
    verdict = check_contaminated(report, th)
    return {
        **report,
        "verdict": verdict,
        "outcome": overall_verdict(verdict.get("sets") or {"sets": verdict}),
    }


# ------------------------------------------------------------------------------------------ scoring
@dataclass(frozen=True)
class ChoiceRows:
    """Multiple-choice rows of a set: one scored row per (item, choice), continuation tokens masked in."""

    inputs: np.ndarray  # int32 (M, L)
    targets: np.ndarray  # int32 (M, L)
    mask: np.ndarray  # float32 (M, L)
    item: np.ndarray  # int64 (M,): the item each row belongs to
    gold: np.ndarray  # int64 (N,): the row index of each item's gold choice


def choice_rows(name: str, path: str, tokenizer, seq_len: int, limit: int | None = None) -> ChoiceRows | None:
    """Rows scoring each answer choice after its prompt, as lm-eval's `olmax_*` task for this bundled set
    (olmax/evals/lm_eval_tasks.py) renders it; None for a set without such a task."""
    import jinja2

    source = resolve_source(path)
    key = template_key(name, source)
    task = next((t for t in TASKS.values() if t[0] == key), None)
    if task is None:
        return None
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    prompt_t, choices_t, target_t = (env.from_string(t) for t in task[1:])
    pad, eos = (
        tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
        tokenizer.eos_token_id,
    )
    rows, items, gold = [], [], []
    for i, r in enumerate(read_eval_rows(source, limit)):
        try:
            context = prompt_t.render(**r.record)
            choices = ast.literal_eval(choices_t.render(**r.record))
            target = int(target_t.render(**r.record))
        except (jinja2.TemplateError, ValueError, SyntaxError) as e:
            raise OlmaxError(
                f"{r.part}:{r.loc}: record does not fit the {key} choice template: {e}"
            ) from None
        ctx = tokenizer.encode_batch([context])[0]
        conts = tokenizer.encode_batch([" " + str(c) for c in choices])
        gold.append(len(rows) + target)
        for cont in conts:
            full = ([eos] + ctx + cont)[-seq_len:]  # keep the continuation; cut the prompt's start
            rows.append((full, min(len(cont), len(full) - 1)))
            items.append(i)
    inputs = np.full((len(rows), seq_len), pad, np.int32)
    mask = np.zeros((len(rows), seq_len), np.float32)
    for j, (full, n_cont) in enumerate(rows):
        inputs[j, : len(full)] = full
        mask[j, len(full) - 1 - n_cont : len(full) - 1] = 1.0  # target j = row[j + 1]
    targets = np.full_like(inputs, pad)
    targets[:, :-1] = inputs[:, 1:]
    return ChoiceRows(inputs, targets, mask, np.asarray(items, np.int64), np.asarray(gold, np.int64))


def score_items(model, prepared, choices: ChoiceRows | None, batch_size: int = 8) -> dict[str, np.ndarray]:
    """Per-item CE, bpb (and accuracy when `choices`) of one prepared set (olmax.evals.heldout.PreparedSet)."""
    from olmax.evals.scoring import score

    inst = prepared.instances
    nll, count, _ = score(model, inst.inputs, inst.targets, inst.mask, batch_size=batch_size)
    out = {"ce": nll / np.maximum(count, 1), "bpb": nll / (LN2 * np.maximum(inst.n_bytes, 1))}
    if choices is not None:
        c_nll, _, _ = score(model, choices.inputs, choices.targets, choices.mask, batch_size=batch_size)
        best = np.full(len(count), -np.inf)
        pick = np.zeros(len(count), np.int64)
        for j, (i, ll) in enumerate(zip(choices.item, -c_nll)):
            if ll > best[i]:
                best[i], pick[i] = ll, j
        out["acc"] = (pick == choices.gold).astype(np.float64)
    return out


def exposure_counts(exposure_report: Mapping, eval_set, name: str) -> np.ndarray | None:
    """Servings per item of `eval_set` from an `olmax audit exposure` report (0 for items it does not list
    as contaminated in this set; matched by our id or the audit's); None when it lists nothing of the set."""
    by_id = {str(x["id"]): int(x["exposures"]) for x in exposure_report.get("items", []) if x["eval"] == name}
    if not by_id:
        return None
    theirs = eval_set.audit_ids or (None,) * len(eval_set)
    return np.asarray(
        [by_id.get(d, by_id.get(a, 0) if a is not None else 0) for d, a in zip(eval_set.ids, theirs)],
        np.int64,
    )


@dataclass(frozen=True)
class GainsInputs:
    """What `olmax eval gains` reads (see gains_cli.py for each option)."""

    run: str
    leaks: str
    evals: tuple[str, ...]
    exposure: str | None = None
    steps: tuple[int, ...] = ()  # (): every committed checkpoint
    limit: int | None = None
    seq_len: int | None = None
    batch_size: int = 8
    resamples: int = 2000
    tokenizer: str | None = None  # None: $OLMAX_EVAL_TOKENIZER, else dolma2 (the trainer's eval hook's rule)
    text_field: str = "text"
    dtype: str | None = "float32"  # compute dtype; None: the run's
    mesh: str | None = None  # the devices the model shards over (olmax.evals.eval_mesh); None: auto
    plot_dir: str | None = None
    progress: bool = False


def run_steps(run_dir: str | Path, chosen: Sequence[int] = ()) -> list[int]:
    """The committed checkpoint steps of a run, ascending (or `chosen`, each checked to be one of them)."""
    from olmax.train.checkpoint import complete_steps

    have = sorted(complete_steps(Path(run_dir) / "checkpoints"))
    if not have:
        raise OlmaxError(f"{Path(run_dir) / 'checkpoints'}: no committed checkpoint to score")
    missing = sorted(set(chosen) - set(have))
    if missing:
        raise OlmaxError(
            f"--steps {', '.join(map(str, missing))}: no committed checkpoint; the run has "
            f"{', '.join(map(str, have))}"
        )
    return sorted(set(chosen)) if chosen else have


def score_run(inp: GainsInputs) -> list[SetScores]:
    """Load the sets, then score every item at every chosen checkpoint of the run."""
    from olmax.evals.heldout import prepare_eval_set

    steps = run_steps(inp.run, inp.steps)
    cfg = load_run_config(inp.run)
    seq_len = inp.seq_len or cfg.data.seq_len
    tok = eval_tokenizer(inp.tokenizer)
    leaks = contaminated_ids(read_json(inp.leaks, "an `olmax audit leaks` report"))
    exposure = read_json(inp.exposure, "an `olmax audit exposure` report") if inp.exposure else None
    specs = parse_eval_specs(inp.evals)
    for spec in specs:
        if spec.tokens:
            raise OlmaxError(
                f"--eval {spec.spec}: a token file has no items to compare; give a set of records"
            )
    join_leaks(leaks, [s.name for s in specs])
    sets = []
    for name, path in ((s.name, s.source) for s in specs):
        es = load_eval_set(name, path, text_field=inp.text_field, limit=inp.limit)
        ps = prepare_eval_set(
            es, tok, seq_len, drop_ids=leaks.get(name, set()), vocab_size=cfg.model.vocab_size
        )
        contaminated = np.ones(len(es), bool)
        contaminated[ps.clean_rows] = False
        choices = choice_rows(name, path, tok, seq_len, inp.limit) if inp.text_field == "text" else None
        exp = exposure_counts(exposure, es, name) if exposure is not None else None
        sets.append((es, ps, choices, contaminated, exp))
    per_step = []
    from tqdm import tqdm

    for step in tqdm(steps, desc="eval gains", unit="checkpoint", disable=not inp.progress):
        model, _ = load_run_model(inp.run, step, inp.dtype, inp.mesh)
        per_step.append([score_items(model, ps, ch, inp.batch_size) for _, ps, ch, _, _ in sets])
    out = []
    for k, (es, _, _, contaminated, exp) in enumerate(sets):
        metrics = {m: np.stack([scores[k][m] for scores in per_step]) for m in per_step[0][k]}
        out.append(SetScores(es.name, es.ids, contaminated, np.asarray(steps, np.int64), metrics, exp))
    return out


def run_gains(inp: GainsInputs, thresholds=None) -> dict:
    """Score the run and build the report (`report["verdict"]["flagged"]` is the memorization verdict)."""
    scores = score_run(inp)
    report = {
        "run": str(inp.run),
        "leaks": inp.leaks,
        "exposure": inp.exposure,
        **gains_report(scores, resamples=inp.resamples, thresholds=thresholds),
    }
    if inp.plot_dir:
        report["plots"] = {
            name: str(plot_set(block, Path(inp.plot_dir) / f"gains-{name}.png"))
            for name, block in report["sets"].items()
            if block["metrics"]
        }
    return report


# ------------------------------------------------------------------------------------------ output
def plot_set(block: dict, out: str | Path) -> Path:
    """PNG: CE of contaminated vs clean items over steps with 95% bands, and the CE gap by exposure bucket."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ce, steps = block["metrics"]["ce"], np.asarray(block["steps"])
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    a.plot(steps, ce["clean"], "o-", label=f"clean ({block['clean']})")
    a.plot(steps, ce["contaminated"], "o-", label=f"contaminated ({block['contaminated']})")
    # the band sits on the contaminated curve: clean mean minus the gap's interval
    a.fill_between(
        steps,
        np.asarray(ce["clean"]) - ce["gap_hi"],
        np.asarray(ce["clean"]) - ce["gap_lo"],
        alpha=0.25,
        color="C1",
        label="95% interval of the gap",
    )
    a.set(xlabel="step", ylabel="CE (nats/token, item mean)", title=f"{block['eval']}: contaminated vs clean")
    a.legend()
    rows = [r for r in block.get("by_exposure", []) if r["items"]]
    if rows:
        x = np.arange(len(rows))
        gap = np.asarray([r["gap"] for r in rows])
        err = np.asarray([[r["gap"] - r["gap_lo"] for r in rows], [r["gap_hi"] - r["gap"] for r in rows]])
        b.errorbar(x, gap, yerr=err, fmt="o", capsize=4)
        b.set_xticks(x, [f"{r['bucket']}\n(n={r['items']})" for r in rows])
        b.axhline(0, color="gray", lw=0.8)
        b.set(
            xlabel="servings of the item",
            ylabel="CE gap, clean - contaminated (nats)",
            title=f"gap at step {steps[-1]} by exposure",
        )
    else:
        b.text(0.5, 0.5, "no exposure report (--exposure)", ha="center", va="center")
        b.set_axis_off()
    fig.tight_layout()
    with temp_path(out, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    return Path(out)


def gap_table(report: dict) -> str:
    """Markdown: per set, the last step's CE/bpb/accuracy of both groups, the gap and its gain, with intervals."""
    lines = [
        "| set | step | metric | contaminated | clean | gap [95%] | gain since first step [95%] |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for name, block in report["sets"].items():
        if not block["metrics"]:
            lines.append(
                f"| {name} | | | {block['contaminated']} items | {block['clean']} items | "
                f"{block.get('note', '')} | |"
            )
        for metric, st in block["metrics"].items():
            lines.append(
                f"| {name} | {block['steps'][-1]} | {metric} | {st['contaminated'][-1]:.4f} | "
                f"{st['clean'][-1]:.4f} | {st['gap'][-1]:+.4f} [{st['gap_lo'][-1]:+.4f}, "
                f"{st['gap_hi'][-1]:+.4f}] | {st['gain'][-1]:+.4f} [{st['gain_lo'][-1]:+.4f}, "
                f"{st['gain_hi'][-1]:+.4f}] |"
            )
    return "\n".join(lines)


def summary(report: dict) -> str:
    """The gap table, the by-exposure rows and the verdict, for the terminal."""
    lines = [gap_table(report)]
    for name, block in report["sets"].items():
        for r in block.get("by_exposure", []):
            if r["items"]:
                lines.append(
                    f"{name} served {r['bucket']:>3}x: {r['items']:>4} items, CE gap {r['gap']:+.4f} "
                    f"[{r['gap_lo']:+.4f}, {r['gap_hi']:+.4f}]"
                )
    v = report["verdict"]
    lines.append(f"contaminated vs clean: {v['status'].upper()}: {v['message']}")
    if "outcome" in report:
        lines += verdict_lines(report["outcome"], "eval gains")
    return "\n".join(lines)

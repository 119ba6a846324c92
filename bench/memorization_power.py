"""Calibrated memorization checks with the plan as the null: how often each check flags a tiny model
whose mix plans a source twice and serves another source's windows 2x ... 16x their plan (detection rate
per dose, and the AUROC of each check's statistic between dosed and clean runs), and how often it flags
clean runs, where every window is served exactly as planned (false-positive rate).

Setting (all in-process; one compiled train step serves every run, so only the first run compiles):
  text        real text, byte-level: the standard library's *.py files cut into 256-byte windows (token =
              byte, < 256, within tiny's vocabulary of 1,000); exact duplicate windows dropped; each seed
              shuffles the pool and draws its own disjoint splits from it
  stream      the tiny recipe's shape: `--steps` x `--batch` rows (default 200 x 8 = 1,600 windows of 256
              tokens), shuffled; every row not taken below is a fresh window served once, as planned
  planned 2x  in every mix, a source of `--twice` windows (default 48) the mix lists twice: each served 2x,
              planned 2x (as the demo's prose)
  dosed       a source of `--replayed` windows (default 64: 16k tokens) planned once and served `dose` times
              (a shard copied into the mix dose - 1 times by mistake): dose 16 is 1,024 / 1,600 = 64% of
              the stream, dose 2 is 8%; they are also the "contaminated items" of check 6
  clean       the control: the dosed source served once, as planned. The checks get the labels of a dosed
              run (the dosed source's windows as served `--control-label` = 16x where the plan serves 1x), so
              a flag there is a false positive; the planned-2x source is in the labels as it is (2x, planned
              2x) in every run; `--clean-seeds` (10 for the docs' table) of them
  reference   per seed, a clean run from another initialisation (seed + 1000): check 10's reference model,
              a healthy run of the same recipe as a user would compare against (`--reference RUN`)
  model       olmax `tiny` (4 layers, d 64), AdamW peak lr 3e-3, 10 warmup steps, cosine decay to 10%,
              gradient clipping at 1.0 (the tiny recipe's optimiser); `--checkpoints` evenly spaced (4, as
              tiny's every 25 of 100 steps), of which the newest `--keep` (3, tiny's retention) are kept:
              check 9 compares the earliest kept with the last, check 6 scores the kept ones
Checks (olmax/evals/model_checks.py and membership.py, default Thresholds; every comparison is over-served
vs as-planned windows matched by planned servings: the dosed windows vs fresh windows served once, planned
once): 1 exposure, 4 extract (32-byte greedy continuation of a 32-byte prefix), 5 train_vs_unseen,
6 contaminated (the dosed windows vs `--clean-items` fresh windows served once: CE gain over the kept
checkpoints, bootstrap 95% interval above 0), 7 min_k_pp, 8 zlib, 9 checkpoint_diff (no reference needed),
10 reference_ratio (with the reference run). "Without a reference run" is every check but 10.

    .venv/bin/python bench/memorization_power.py [--seeds 0-2] [--clean-seeds 0-9] [--doses 2,4,8,16]
                                                 [--out POWER.json] [--record] [--smoke]

Printed: per check, the runs flagged per dose and among the clean runs, the smallest dose from which the
check flags in >= 80% of the seeds at that dose and every larger one, the AUROC of the check's statistic
(dosed runs vs clean runs: 0.5 is no power, 1.0 separates them perfectly) and the seconds each check took;
then the same for "any check without the reference" and "any check with it"; then each dose's own effect
on the dosed windows' CE (each seed's gain over the as-planned windows less its clean run's: the same
windows, so their difficulty cancels), the as-planned windows' spread without and net of the reference,
and the over-served windows a mean test would need to expect z 3 at that effect. `--record` writes
bench/results/mem.json (`--name`; bench/record.py; `--smoke` elsewhere). Deterministic for fixed arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from olmax.evals.membership import auroc

CHECKS = (
    "exposure",
    "extract",
    "train_vs_unseen",
    "contaminated",
    "min_k_pp",
    "zlib",
    "checkpoint_diff",
    "reference_ratio",
)
# the verdict a user gets: any check of the set flags (the reference-free set leaves out check 10)
ANY = {"any_without_reference": CHECKS[:-1], "any_with_reference": CHECKS}
DETECT_RATE = 0.8  # "detects at dose d": flags in >= 80% of the seeds at d and at every larger dose


@dataclass(frozen=True)
class Setting:
    """One benchmark configuration (the defaults are the docs' table: the tiny recipe's shape)."""

    seq_len: int = 256  # bytes per window = tokens per training row (check 4 needs 32 + 32)
    batch: int = 8
    steps: int = 200  # 200 x 8 = 1,600 rows of 256 tokens = 410k tokens per run
    lr: float = 3e-3
    warmup: int = 10
    replayed: int = 64  # windows of the dosed source (16k tokens, 4% of the stream at 1x)
    twice: int = 48  # windows of the planned-2x source (6% of the stream)
    clean_items: int = 64  # fresh windows served once: check 6's clean items
    per_stratum: int = 128  # windows per exposure stratum for checks 1, 4, 5 and 7-10
    checkpoints: int = 4  # evenly spaced; the last at `steps` (tiny: every 25 of 100 steps)
    keep: int = 3  # the newest kept (tiny's checkpoint.keep): check 9's earlier model is the oldest of them
    resamples: int = 1000  # bootstrap draws of check 6
    control_label: int = 16  # the servings the clean runs' labels claim for the dosed source's windows

    def checkpoint_steps(self) -> list[int]:
        return [self.steps * (k + 1) // self.checkpoints for k in range(self.checkpoints)]

    def kept_steps(self) -> list[int]:
        return self.checkpoint_steps()[-self.keep :]


# ------------------------------------------------------------------------------------------ data
def text_windows(seq_len: int, limit: int) -> np.ndarray:
    """Up to `limit` distinct `seq_len`-byte windows of the standard library's sources, in a fixed order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    seen, out = set(), []
    for path in sorted(root.glob("*.py")):
        data = path.read_bytes()
        for start in range(0, len(data) - seq_len + 1, seq_len):
            w = data[start : start + seq_len]
            if w not in seen and len(set(w)) > 8:  # skip repeats and runs of spaces or '#'
                seen.add(w)
                out.append(np.frombuffer(w, np.uint8))
        if len(out) >= limit:
            break
    if len(out) < limit:
        raise SystemExit(f"{root}: only {len(out)} distinct windows, the setting needs {limit}")
    return np.stack(out[:limit]).astype(np.int32)


def pool_size(st: Setting) -> int:
    return st.replayed + st.twice + st.per_stratum + st.steps * st.batch


@dataclass(frozen=True)
class Split:
    """One seed's disjoint draws from the pool."""

    dosed: np.ndarray  # (replayed, L): planned once, served `dose` times (once in a clean run)
    twice: np.ndarray  # (twice, L): planned and served twice
    unseen: np.ndarray  # (P, L) never served, never planned: the count-0 stratum (check 5)
    fresh: np.ndarray  # (steps x batch, L) served once each, in order; the first are check 6's clean items


def split(pool: np.ndarray, st: Setting, seed: int) -> Split:
    rows = np.random.default_rng(seed).permutation(pool.shape[0])
    d, t, u, f = np.split(rows, np.cumsum([st.replayed, st.twice, st.per_stratum]))
    return Split(pool[d], pool[t], pool[u], pool[f[: st.steps * st.batch]])


def fresh_rows(st: Setting, dose: int) -> int:
    """How many fresh windows a run at `dose` serves (the rest of the stream)."""
    return st.steps * st.batch - max(dose, 1) * st.replayed - 2 * st.twice


def stream(sp: Split, st: Setting, dose: int, seed: int) -> np.ndarray:
    """(steps x batch, L), shuffled: the dosed windows `dose` times each (once when 0: the clean run), the
    planned-2x windows twice, the rest fresh windows once."""
    n = st.steps * st.batch
    rows = np.concatenate(
        [
            np.repeat(sp.dosed, max(dose, 1), axis=0),
            np.repeat(sp.twice, 2, axis=0),
            sp.fresh[: fresh_rows(st, dose)],
        ]
    )
    return rows[np.random.default_rng(10_000 + seed).permutation(n)]


# ------------------------------------------------------------------------------------------ training
class Trainer:
    """A jitted AdamW step over the tiny model, compiled once and reused for every run of the setting."""

    def __init__(self, st: Setting):
        import jax
        import optax
        from flax import nnx

        from olmax.model import init_model, tiny

        self.st, self.cfg = st, tiny(max_position_embeddings=st.seq_len)
        self.graphdef, _ = nnx.split(init_model(self.cfg, seed=0))
        sched = optax.warmup_cosine_decay_schedule(0.0, st.lr, st.warmup, st.steps, st.lr * 0.1)
        self.opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(sched, weight_decay=0.1))

        def loss(params, ids_BxL):
            logits_BxLxV = nnx.merge(self.graphdef, params)(ids_BxL[:, :-1])
            return optax.softmax_cross_entropy_with_integer_labels(logits_BxLxV, ids_BxL[:, 1:]).mean()

        def step(params, opt_state, ids_BxL):
            val, grads = jax.value_and_grad(loss)(params, ids_BxL)
            updates, opt_state = self.opt.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, val

        self.step = jax.jit(step, donate_argnums=(0, 1))

    def run(self, rows: np.ndarray, seed: int, on_checkpoint=None) -> tuple[np.ndarray, object]:
        """Train on `rows` from a seed's init; `on_checkpoint(step, model)` at each checkpoint; (train losses,
        the final model)."""
        import jax
        import jax.numpy as jnp
        from flax import nnx

        from olmax.model import init_model

        _, params = nnx.split(init_model(self.cfg, seed=seed))
        opt_state = self.opt.init(params)
        marks, losses = set(self.st.checkpoint_steps()), []
        for s in range(1, self.st.steps + 1):
            batch = jnp.asarray(rows[(s - 1) * self.st.batch : s * self.st.batch])
            params, opt_state, val = self.step(params, opt_state, batch)
            losses.append(val)
            if on_checkpoint is not None and s in marks:
                # a copy: the next step donates `params`' buffers
                on_checkpoint(s, nnx.merge(self.graphdef, jax.tree.map(jnp.copy, params)))
        return np.asarray([float(v) for v in losses]), nnx.merge(self.graphdef, params)


# ------------------------------------------------------------------------------------------ checks
def window_ce(model, tokens: np.ndarray) -> np.ndarray:
    """Per-window CE (nats/token) as the train loss scores it: every next token, the last target unused."""
    from olmax.evals.scoring import score

    targets = np.zeros_like(tokens)
    targets[:, :-1] = tokens[:, 1:]
    mask = np.ones(tokens.shape, np.float32)
    mask[:, -1] = 0
    nll, count, _ = score(model, tokens, targets, mask, batch_size=16)
    return nll / count


def statistic(check: str, verdict: dict) -> float | None:
    """The number a check thresholds (larger = more evidence of replay), for the AUROC across runs."""
    if verdict.get("status") == "skipped":
        return None
    if check == "exposure":
        return verdict.get("sources", {}).get("text", {}).get("excess_nats")
    if check == "extract":
        return verdict.get("rate_difference")
    if check == "train_vs_unseen":
        return verdict.get("gap_nats")
    if check == "contaminated":
        return verdict.get("sets", {}).get("replayed", {}).get("gain_lo")
    return verdict.get("sources", {}).get("text", {}).get("z")


@dataclass(frozen=True)
class Trained:
    """One trained run as the checks see it: its final model, its earliest kept checkpoint, check 10's
    reference model, the train losses and check 6's per-kept-checkpoint item CEs."""

    model: object
    earlier: object
    reference: object
    losses: np.ndarray
    item_ce: list[np.ndarray]


def as_planned(sp: Split, st: Setting) -> np.ndarray:
    """The fresh windows the checks compare the dosed ones with: served once, as planned, in every run (the
    first `clean_items` fresh windows are check 6's clean items)."""
    return sp.fresh[st.clean_items : st.clean_items + st.per_stratum]


def exposure_of(sp: Split, st: Setting, dose: int):
    """What exposure counts say of a run (or, for a clean run, claim): the dosed windows served `dose` (the
    clean run: `control_label`) times where the plan serves them once, the planned-2x windows twice as
    planned, fresh served windows once as planned, never-served windows never, as planned."""
    from olmax.evals.exposure_file import Exposure

    label = dose if dose else st.control_label
    fresh = as_planned(sp, st)
    tokens = np.concatenate([sp.dosed, sp.twice, fresh, sp.unseen])
    sizes = [len(sp.dosed), len(sp.twice), len(fresh), len(sp.unseen)]
    counts = np.repeat([label, 2, 1, 0], sizes).astype(np.int64)
    planned = np.repeat([1, 2, 1, 0], sizes).astype(np.int64)
    n = len(tokens)
    return Exposure(
        np.arange(n), counts, np.asarray(["text"] * n), tokens, st.seq_len, None, st.steps, "bench", planned
    )


def run_checks(tr: Trained, sp: Split, st: Setting, dose: int) -> tuple[dict[str, dict], dict[str, float]]:
    """Every check on the final model (check 6 on the kept checkpoints' item scores); (verdicts, seconds)."""
    from olmax.evals.curves import Curves
    from olmax.evals.gains import SetScores, gains_report
    from olmax.evals.membership import check_membership
    from olmax.evals.model_checks import check_exposure, check_extraction, check_train_vs_unseen
    from olmax.evals.verdicts import Models, Probe, Thresholds

    th = Thresholds()
    exp = exposure_of(sp, st, dose)
    curves = Curves("bench", np.arange(1, st.steps + 1), tr.losses)
    n_rep = len(sp.dosed)
    n = n_rep + st.clean_items
    scores = SetScores(
        "replayed",
        tuple(map(str, range(n))),
        np.arange(n) < n_rep,
        np.asarray(st.kept_steps()),
        {"ce": np.stack(tr.item_ce)},
    )
    out, seconds = {}, {}

    def timed(name, fn):
        t = time.perf_counter()
        out[name] = fn()
        seconds[name] = time.perf_counter() - t

    kw = {"per_stratum": st.per_stratum, "batch_size": 16}
    timed("exposure", lambda: check_exposure(tr.model, exp, th, probe_len=st.seq_len, **kw))
    timed("extract", lambda: check_extraction(tr.model, exp, th, **kw))
    timed("train_vs_unseen", lambda: check_train_vs_unseen(tr.model, curves, exp, th, **kw))
    timed(
        "contaminated",
        lambda: gains_report([scores], resamples=st.resamples, thresholds=th)["verdict"],
    )
    t = time.perf_counter()
    first = st.kept_steps()[0]
    models = Models(
        tr.model,
        Probe(st.per_stratum, st.seq_len, kw["batch_size"]),
        reference=tr.reference,
        reference_name="a clean run from another initialisation",
        earlier=tr.earlier,
        earlier_name=f"the earliest kept checkpoint (step {first}) to step {st.steps}",
    )
    membership = check_membership(exp, th, models)
    spent = (time.perf_counter() - t) / len(membership)
    for name, verdict in membership.items():
        out[name], seconds[name] = verdict, spent
    return out, seconds


def window_effect(model, reference, sp: Split, st: Setting) -> dict[str, float]:
    """What the checks must see a dose through: the dosed windows' CE gain over the as-planned windows they
    are compared with, the spread of the as-planned windows' CE (their difficulty: what a check without a
    reference must see past) and of their CE net of the reference run's on the same windows (two runs of one
    recipe: what a check with a reference must see past)."""
    planned = as_planned(sp, st)
    over_ce, plan_ce = window_ce(model, sp.dosed), window_ce(model, planned)
    return {
        "gain_nats": float(plan_ce.mean() - over_ce.mean()),
        "sd_windows_nats": float(plan_ce.std(ddof=1)),
        "sd_net_of_reference_nats": float((window_ce(reference, planned) - plan_ce).std(ddof=1)),
    }


def windows_needed(effect: float, sd: float, z: float = 3.0, ratio: float = 2.0) -> float | None:
    """Over-served windows (with `ratio` times as many as-planned ones) at which a mean gain `effect` over a
    per-window spread `sd` is expected to reach standard score `z`: n = (1 + 1/ratio) (z sd / effect)^2."""
    return (1 + 1 / ratio) * (z * sd / effect) ** 2 if effect > 0 else None


def effect_table(runs: list[dict], doses: list[int]) -> dict:
    """Per dose, the dose's own effect on the dosed windows' loss: each seed's gain at that dose less the
    same seed's clean run's (the same windows, served once: their difficulty cancels), averaged over the
    seeds; the clean runs' spreads; and the over-served windows each kind of check would need to expect z 3
    at that effect (without a reference through the windows' difficulty, with one through two runs' spread)."""
    clean = {r["seed"]: r["effect"] for r in runs if r["dose"] == 0}
    sd_raw = float(np.mean([e["sd_windows_nats"] for e in clean.values()]))
    sd_net = float(np.mean([e["sd_net_of_reference_nats"] for e in clean.values()]))
    out = {"sd_windows_nats": sd_raw, "sd_net_of_reference_nats": sd_net}
    for d in doses:
        paired = [r["effect"]["gain_nats"] - clean[r["seed"]]["gain_nats"] for r in runs if r["dose"] == d]
        gain = float(np.mean(paired)) if paired else float("nan")
        out[str(d)] = {
            "gain_nats": gain,
            "per_seed": paired,
            "windows_needed_without_reference": windows_needed(gain, sd_raw),
            "windows_needed_with_reference": windows_needed(gain, sd_net),
        }
    return out


def format_effect(effect: dict, doses: list[int]) -> str:
    """The dose's own effect on a window's loss and the windows a check would need to see it at z 3."""

    def n(v):
        return f"{v:,.0f}" if v is not None else "none (no gain)"

    lines = [
        f"\nper-window spread of the as-planned windows' CE: {effect['sd_windows_nats']:.3f} nats (their "
        f"difficulty), {effect['sd_net_of_reference_nats']:.3f} net of the reference run's CE",
        "| dose | CE gain of the dosed windows (nats, less the clean run's) | over-served windows for z 3 "
        "without a reference | with a reference |",
        "|---|---|---|---|",
    ]
    for d in doses:
        e = effect[str(d)]
        lines.append(
            f"| {d}x | {e['gain_nats']:+.4f} | {n(e['windows_needed_without_reference'])} | "
            f"{n(e['windows_needed_with_reference'])} |"
        )
    return "\n".join(lines)


def one_run(trainer: Trainer, pool: np.ndarray, st: Setting, seed: int, dose: int, reference) -> dict:
    """Train one run (dose 0: clean) and return each check's verdict on it."""
    sp = split(pool, st, seed)
    items = np.concatenate([sp.dosed, sp.fresh[: st.clean_items]])
    kept, item_ce = {}, []

    def on_checkpoint(step, model):
        if step in st.kept_steps():
            item_ce.append(window_ce(model, items))
            kept.setdefault("earlier", model)

    losses, model = trainer.run(stream(sp, st, dose, seed), seed, on_checkpoint)
    checks, seconds = run_checks(Trained(model, kept["earlier"], reference, losses, item_ce), sp, st, dose)
    return {
        "seed": seed,
        "dose": dose,
        "final_loss": float(losses[-20:].mean()),
        "effect": window_effect(model, reference, sp, st),
        "seconds": seconds,
        "checks": {
            k: {
                "flagged": bool(v["flagged"]),
                "status": v["status"],
                "statistic": statistic(k, v),
                "message": v["message"],
            }
            for k, v in checks.items()
        },
    }


# ------------------------------------------------------------------------------------------ table
def with_any(runs: list[dict]) -> list[dict]:
    """Each run with the verdicts a user gets added as checks: `any_without_reference` and
    `any_with_reference` flag when any check of their set does (statistic: how many flagged)."""
    out = []
    for r in runs:
        checks = dict(r["checks"])
        for name, members in ANY.items():
            hits = sum(checks[c]["flagged"] for c in members if c in checks)
            checks[name] = {"flagged": hits > 0, "status": "ok", "statistic": float(hits), "message": ""}
        out.append({**r, "checks": checks})
    return out


def power_table(runs: list[dict], doses: list[int]) -> dict:
    """Per check (and per `ANY` verdict): flag rate of the clean runs (dose 0), per dose, the smallest dose it
    detects, and the AUROC of its statistic between the runs at each dose and the clean runs."""
    out = {}
    runs = with_any(runs) if runs and ANY.keys().isdisjoint(runs[0]["checks"]) else runs
    for check in [c for c in (*CHECKS, *ANY) if c in runs[0]["checks"]] if runs else CHECKS:
        row = {}
        for d in [0, *doses]:
            at = [r["checks"][check] for r in runs if r["dose"] == d]
            row[str(d)] = {
                "flagged": sum(c["flagged"] for c in at),
                "runs": len(at),
                "skipped": sum(c["status"] == "skipped" for c in at),
            }
        clean = [r["checks"][check].get("statistic") for r in runs if r["dose"] == 0]
        clean = np.asarray([v for v in clean if v is not None], np.float64)
        for d in doses:
            dosed = [r["checks"][check].get("statistic") for r in runs if r["dose"] == d]
            dosed = np.asarray([v for v in dosed if v is not None], np.float64)
            row[str(d)]["auroc"] = float(auroc(dosed, clean)[0]) if dosed.size and clean.size else None
        rate = {d: row[str(d)]["flagged"] / max(row[str(d)]["runs"], 1) for d in doses}
        smallest = next(
            (d for i, d in enumerate(doses) if all(rate[e] >= DETECT_RATE for e in doses[i:])), None
        )
        seconds = [r["seconds"][check] for r in runs if check in r.get("seconds", {})]
        out[check] = {
            "by_dose": row,
            "false_positive_rate": row["0"]["flagged"] / max(row["0"]["runs"], 1),
            "smallest_detected_dose": smallest,
            "seconds_per_run": float(np.mean(seconds)) if seconds else None,
        }
    return out


def format_table(table: dict, doses: list[int]) -> str:
    def cell(c: dict) -> str:
        if c["runs"] and c["skipped"] == c["runs"]:
            return "skip"
        auc = f" ({c['auroc']:.2f})" if c.get("auroc") is not None else ""
        return f"{c['flagged']}/{c['runs']}{auc}"

    head = ["check", "clean (FP)", *[f"{d}x (AUROC)" for d in doses], "detects from", "s/run"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for check, t in table.items():
        smallest = t["smallest_detected_dose"]
        sec = t.get("seconds_per_run")
        lines.append(
            f"| {check} | {cell(t['by_dose']['0'])} | "
            + " | ".join(cell(t["by_dose"][str(d)]) for d in doses)
            + f" | {f'{smallest}x' if smallest else f'no power by {doses[-1]}x'} | "
            + (f"{sec:.2f}" if sec is not None else "-")
            + " |"
        )
    return "\n".join(lines)


def run_power(
    st: Setting,
    seeds: list[int],
    doses: list[int],
    clean_seeds: list[int] | None = None,
    log=print,
) -> dict:
    """The clean runs (each seed of `clean_seeds` and `seeds`, each with its reference run) and every
    (seed, dose) run; returns {"setting", "runs", "table"}."""
    t0 = time.monotonic()
    pool = text_windows(st.seq_len, pool_size(st))
    trainer = Trainer(st)
    runs = []
    clean_seeds = sorted(set(clean_seeds or []) | set(seeds))

    def say(r):
        flags = ", ".join(k for k, v in r["checks"].items() if v["flagged"]) or "none"
        log(
            f"[{time.monotonic() - t0:6.0f}s] seed {r['seed']} dose {r['dose']:>2}x: final loss "
            f"{r['final_loss']:.3f}, flagged: {flags}"
        )

    for seed in clean_seeds:
        sp = split(pool, st, seed)
        _, reference = trainer.run(stream(sp, st, 0, seed), 1000 + seed)
        runs.append(one_run(trainer, pool, st, seed, 0, reference))
        say(runs[-1])
        if seed not in seeds:
            continue
        for dose in doses:
            runs.append(one_run(trainer, pool, st, seed, dose, reference))
            say(runs[-1])
    return {
        "setting": dataclasses.asdict(st),
        "seeds": seeds,
        "clean_seeds": clean_seeds,
        "doses": doses,
        "runs": runs,
        "table": power_table(runs, doses),
        "effect": effect_table(runs, doses),
        "seconds": time.monotonic() - t0,
    }


def parse_seeds(text: str) -> list[int]:
    """`0-2` -> [0, 1, 2]; `0,3` -> [0, 3]."""
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",")]


SMOKE = {
    "steps": 40,
    "batch": 4,
    "seq_len": 64,
    "replayed": 4,
    "twice": 4,
    "clean_items": 8,
    "per_stratum": 8,
}


def write_record(result: dict, argv: list[str], smoke: bool, results, name: str = "mem") -> Path:
    """bench/results/NAME.json (mem.json): the setting, the sizes, every check's flag counts per dose and
    each dose's effect on the dosed windows' loss."""
    from record import Record, package_version

    rec = Record(name, argv=argv, smoke=smoke, results=results)
    rec.side(
        "olmax", version=package_version("olmax"), setting="default Thresholds (olmax/evals/verdicts.py)"
    )
    rec.note("setting", result["setting"])
    rec.note("seeds", result["seeds"])
    rec.note("clean_seeds", result["clean_seeds"])
    rec.note("doses", result["doses"])
    rec.note("table", result["table"])
    rec.note("effect", result["effect"])
    rec.note(
        "runs",
        [
            {
                "seed": r["seed"],
                "dose": r["dose"],
                "final_loss": r["final_loss"],
                "effect": r["effect"],
                "checks": {
                    k: {"flagged": v["flagged"], "statistic": v["statistic"]} for k, v in r["checks"].items()
                },
            }
            for r in result["runs"]
        ],
    )
    for check, t in result["table"].items():
        for dose, c in t["by_dose"].items():
            name = f"{check}.flagged_at_{dose}x" if dose != "0" else f"{check}.flagged_clean"
            rec.figure(name, [c["flagged"]], f"of {c['runs']} runs", runs=c["runs"])
    eff = result["effect"]
    rec.figure("sd_windows", [eff["sd_windows_nats"]], "nats")
    rec.figure("sd_net_of_reference", [eff["sd_net_of_reference_nats"]], "nats")
    for dose in result["doses"]:
        e = eff[str(dose)]
        rec.figure(f"gain_at_{dose}x", e["per_seed"], "nats")
        for side in ("without_reference", "with_reference"):
            if e[f"windows_needed_{side}"] is not None:
                rec.figure(f"windows_needed_{side}_at_{dose}x", [e[f"windows_needed_{side}"]], "windows")
    rec.figure("seconds", [result["seconds"]], "s")
    return rec.write()


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from record import add_arguments

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="0-2", help="seeds of the dosed runs, e.g. 0-2 or 0,5")
    p.add_argument("--clean-seeds", default="0-9", help="seeds of the clean runs (10 for the docs' table)")
    p.add_argument("--doses", default="2,4,8,16", help="servings of each window of the dosed source")
    for f in dataclasses.fields(Setting):
        p.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default)
    p.add_argument("--out", default=None, help="also write the runs and the table as JSON")
    p.add_argument("--record", action="store_true", help="write the record (bench/record.py)")
    p.add_argument("--name", default="mem", help="the record's name: bench/results/NAME.json (default mem)")
    add_arguments(p)
    args = p.parse_args(argv)
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(Setting)}
    if args.smoke:
        values.update(SMOKE)
    st = Setting(**values)
    doses = sorted(int(d) for d in args.doses.split(","))
    if fresh_rows(st, doses[-1]) < st.clean_items + st.per_stratum:
        p.error(
            f"the dosed and planned-2x rows leave too few fresh rows in the {st.steps * st.batch}-row stream"
        )
    result = run_power(st, parse_seeds(args.seeds), doses, parse_seeds(args.clean_seeds))
    print(
        f"\nsetting: {json.dumps(result['setting'])}; dosed seeds {result['seeds']}; clean seeds "
        f"{result['clean_seeds']}; {result['seconds']:.0f} s"
    )
    print(
        "runs flagged / runs per dose (AUROC of the check's statistic, dosed vs clean runs); 'clean' = the "
        f"false-positive rate; 'detects from' = smallest dose flagged in >= {DETECT_RATE:.0%} of seeds there "
        "and above; s/run = seconds the check took per run. Every mix plans a source 2x; a dose is a "
        "source served that many times its plan."
    )
    print(format_table(result["table"], doses))
    print(format_effect(result["effect"], doses))
    if args.out:
        from olmax.jsonio import write_json

        write_json(args.out, result)
        print(f"wrote {args.out}")
    if args.record or args.smoke:
        print(
            f"wrote {write_record(result, sys.argv if argv is None else ['bench/memorization_power.py', *argv], args.smoke, args.results, args.name)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

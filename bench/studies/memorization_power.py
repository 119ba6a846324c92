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

    .venv/bin/python -m bench.studies.memorization_power [--seeds 0-2] [--clean-seeds 0-9] [--doses 2,4,8,16]
                                                 [--out POWER.json] [--record] [--smoke]

On one TPU v5e chip (`--shape tpu`, SHAPES: OLMo 3's block at d 768 x 8 layers, bf16, 1,024-byte windows;
doses 2,4,8; record bench/results/mem_tpu.json with a top-level `summary`): `--probe` (seed 0's reference,
clean and 4x runs: one serving's CE effect and the seconds a run), `--budget-s S` (stop before a run that
would end past S s; the record is written after every run), `--resume RECORD` (keep its runs, run the rest).
Every run also gets check 3 (`run_level`: train loss below its reference's that never-served loss does not
follow; olmax/evals/memorization.py `check_reference`), tabulated beside the others, outside `ANY`.

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
import functools
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
# check 3 (`reference`), the run-level signal: the run's train-loss gain over its reference that its held-out
# loss does not share; tabulated beside the window-level checks, outside the `ANY` verdicts
RUN_LEVEL = "run_level"
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
    # the model: olmax `tiny` with these overrides (the defaults are tiny's own: 4 layers of 64, GQA 4/2,
    # a 16-token window on three layers of four, fp32); `--shape tpu` widens it (SHAPES)
    d_model: int = 64
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 2
    mlp_hidden: int = 160
    window: int = 16  # sliding window of three layers of four (OLMo 3's pattern)
    dtype: str = "float32"  # compute dtype; parameters and AdamW moments stay fp32

    def model_config(self):
        """The olmax model config of the setting: `tiny` with the setting's width, depth and numerics."""
        from olmax.model import tiny

        return tiny(
            max_position_embeddings=self.seq_len,
            d_model=self.d_model,
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            n_kv_heads=self.n_kv_heads,
            head_dim=self.d_model // self.n_heads,
            mlp_hidden=self.mlp_hidden,
            sliding_window=self.window,
            dtype=self.dtype,
        )

    def checkpoint_steps(self) -> list[int]:
        return [self.steps * (k + 1) // self.checkpoints for k in range(self.checkpoints)]

    def kept_steps(self) -> list[int]:
        return self.checkpoint_steps()[-self.keep :]


# ------------------------------------------------------------------------------------------ data
@functools.lru_cache(maxsize=4)  # read once a process: every seed (and a resumed call) draws from it
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

        from olmax.model import init_model

        self.st, self.cfg = st, st.model_config()
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


_TRAINERS: dict[Setting, Trainer] = {}


def trainer_for(st: Setting) -> Trainer:
    """The setting's trainer, built (and its step compiled) once per process: a resumed or repeated call in
    the same process reuses it."""
    if st not in _TRAINERS:
        _TRAINERS[st] = Trainer(st)
    return _TRAINERS[st]


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
    if not clean:  # a record cut short before its first clean run
        return {"sd_windows_nats": None, "sd_net_of_reference_nats": None, **{str(d): None for d in doses}}
    sd_raw = float(np.mean([e["sd_windows_nats"] for e in clean.values()]))
    sd_net = float(np.mean([e["sd_net_of_reference_nats"] for e in clean.values()]))
    out = {"sd_windows_nats": sd_raw, "sd_net_of_reference_nats": sd_net}
    for d in doses:
        paired = [
            r["effect"]["gain_nats"] - clean[r["seed"]]["gain_nats"]
            for r in runs
            if r["dose"] == d and r["seed"] in clean
        ]
        if not paired:  # not run (yet): a record cut short by its budget
            out[str(d)] = None
            continue
        gain = float(np.mean(paired))
        out[str(d)] = {
            "gain_nats": gain,
            "per_seed": paired,
            # the dose's extra servings (d - 1 beyond the plan's one): what one serving does to a window
            "per_serving_nats": gain / (d - 1) if d > 1 else None,
            "windows_needed_without_reference": windows_needed(gain, sd_raw),
            "windows_needed_with_reference": windows_needed(gain, sd_net),
        }
    return out


def format_effect(effect: dict, doses: list[int]) -> str:
    """The dose's own effect on a window's loss and the windows a check would need to see it at z 3."""

    def n(v):
        return f"{v:,.0f}" if v is not None else "none (no gain)"

    if effect["sd_windows_nats"] is None:
        return "\nno clean run yet: no effect to report"
    lines = [
        f"\nper-window spread of the as-planned windows' CE: {effect['sd_windows_nats']:.3f} nats (their "
        f"difficulty), {effect['sd_net_of_reference_nats']:.3f} net of the reference run's CE",
        "| dose | CE gain of the dosed windows (nats, less the clean run's) | over-served windows for z 3 "
        "without a reference | with a reference |",
        "|---|---|---|---|",
    ]
    for d in doses:
        e = effect[str(d)]
        if e is None:
            lines.append(f"| {d}x | not run | - | - |")
            continue
        lines.append(
            f"| {d}x | {e['gain_nats']:+.4f} | {n(e['windows_needed_without_reference'])} | "
            f"{n(e['windows_needed_with_reference'])} |"
        )
    return "\n".join(lines)


@dataclass(frozen=True)
class Reference:
    """A seed's reference run: its final model, its train losses and its mean CE on the seed's never-served
    windows (`unseen`), its held-out loss for the run-level check."""

    model: object
    losses: np.ndarray
    heldout_ce: float


def train_reference(trainer: Trainer, pool: np.ndarray, st: Setting, seed: int) -> Reference:
    """The seed's clean stream from another initialisation (seed + 1000)."""
    sp = split(pool, st, seed)
    losses, model = trainer.run(stream(sp, st, 0, seed), 1000 + seed)
    return Reference(model, losses, float(window_ce(model, sp.unseen).mean()))


def run_level(losses: np.ndarray, heldout_ce: float, ref: Reference, st: Setting) -> dict:
    """Check 3 of `olmax eval memorization` (olmax/evals/memorization.py `check_reference`, default
    Thresholds) on a run and its reference: flags a run whose train loss (the mean of the last
    `train_window` steps) beats the reference's by `reference_gain_nats` while its held-out loss keeps less
    than `reference_heldout_share` of that gain; held-out = the seed's never-served windows (`unseen`).
    Statistic: the train-loss gain held-out loss does not share (train gain - held-out gain, nats)."""
    from olmax.evals.curves import Curves
    from olmax.evals.memorization import check_reference
    from olmax.evals.verdicts import Thresholds

    steps = np.arange(1, st.steps + 1)
    last = np.asarray([st.steps])

    def curve(name, train, held):
        return Curves(name, steps, np.asarray(train, np.float64), {"unseen": (last, np.asarray([held]))})

    v = check_reference(
        curve("run", losses, heldout_ce), curve("ref", ref.losses, ref.heldout_ce), Thresholds()
    )
    held_gain = ref.heldout_ce - heldout_ce
    train_gain = v.get("train_gain")
    return {
        **v,
        "train_gain": train_gain,
        "heldout_gain": held_gain,
        "statistic": None if train_gain is None else float(train_gain - held_gain),
    }


def one_run(
    trainer: Trainer,
    pool: np.ndarray,
    st: Setting,
    seed: int,
    dose: int,
    ref: Reference,
    clock=time.perf_counter,
) -> dict:
    """Train one run (dose 0: clean) and return each check's verdict on it (the run-level check 3 as
    `RUN_LEVEL`), with the seconds its training and its checks took."""
    reference = ref.model
    t_train = clock()
    sp = split(pool, st, seed)
    items = np.concatenate([sp.dosed, sp.fresh[: st.clean_items]])
    kept, item_ce = {}, []

    def on_checkpoint(step, model):
        if step in st.kept_steps():
            item_ce.append(window_ce(model, items))
            kept.setdefault("earlier", model)

    losses, model = trainer.run(stream(sp, st, dose, seed), seed, on_checkpoint)
    train_s = clock() - t_train  # item scoring at the kept checkpoints included
    t_checks = clock()
    checks, seconds = run_checks(Trained(model, kept["earlier"], reference, losses, item_ce), sp, st, dose)
    t = time.perf_counter()
    level = run_level(losses, float(window_ce(model, sp.unseen).mean()), ref, st)
    seconds[RUN_LEVEL] = time.perf_counter() - t
    out = {
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
    out["checks"][RUN_LEVEL] = {
        "flagged": bool(level["flagged"]),
        "status": level["status"],
        "statistic": level["statistic"],
        "message": level["message"],
        "train_gain": level["train_gain"],
        "heldout_gain": level["heldout_gain"],
    }
    out["train_s"], out["check_s"] = train_s, clock() - t_checks
    return out


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
    names = (*CHECKS, RUN_LEVEL, *ANY)
    for check in [c for c in names if any(c in r["checks"] for r in runs)] if runs else CHECKS:
        having = [r for r in runs if check in r["checks"]]  # a resumed record's older runs may lack a check
        row = {}
        for d in [0, *doses]:
            at = [r["checks"][check] for r in having if r["dose"] == d]
            row[str(d)] = {
                "flagged": sum(c["flagged"] for c in at),
                "runs": len(at),
                "skipped": sum(c.get("status") == "skipped" for c in at),
            }
        clean = [r["checks"][check].get("statistic") for r in having if r["dose"] == 0]
        clean = np.asarray([v for v in clean if v is not None], np.float64)
        for d in doses:
            dosed = [r["checks"][check].get("statistic") for r in having if r["dose"] == d]
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


# ------------------------------------------------------------------------------------------ the chip's shape
# `--shape tpu`: the same benchmark on one TPU v5e chip (bf16 peak 197 TFLOP/s), in one process of about
# 9 minutes (docs/evals.md, "On one TPU v5e chip"). OLMo 3's block (SwiGLU, QK-norm, reordered norms,
# RoPE, MHA as the 7B, the 3:1 sliding/full pattern with OLMo 3's 4,096-token window, which at 1,024-byte
# windows spans every layer's whole context) at d_model 768, 8 layers of 12 heads x 64, SwiGLU 2,048
# (OLMo-core's 8/3 rule), bf16 compute over fp32 params and moments. The arithmetic (`plan`):
#   non-embedding params 56.6M; train FLOPs/token = 3 x forward (olmax.model.flops, attention over the keys
#   each query sees and the LM head included) = 382M, 6 x 56.6M = 340M of it
#   tokens/s at 30% MFU (olmax's own step reached 46-60% at large shapes; a 57M model reaches less):
#   0.3 x 197e12 / 382e6 = 155k, so a run of 200 steps x 8 rows x 1,024 tokens (1.64M tokens) is 10.6 s
#   checks: ~2,100 windows scored per checked run (kept checkpoints' items, the checks' strata under the
#   model, its reference and its earliest kept checkpoint, greedy extraction, the effect, held-out) = 2.2M
#   forward tokens = 4.7 s, plus 2 s on the host (bootstrap, zlib, one sync a batch)
#   the table: 10 clean + 9 dosed runs (19 checked) + 10 references = 29 runs: 29 x 10.6 + 19 x 6.7
#   + 90 s compile (the train step, three scoring functions) = 524 s of the ~540 a call has
# Larger does not fit: d 1024 (103M, 88k tokens/s) leaves ~760 rows a run, fewer than an 8x dose's 512 rows
# plus the planned-2x source and the strata the checks need. The stream keeps the CPU table's rows (1,600:
# a serving of the 64-window dosed source is 4% of the run, 8x a third), so the two tables differ only in
# the model and the window length; lr 1e-3 (d 768 at 8k tokens a step), 10% warmup.
SHAPES = {
    "cpu": {},
    "tpu": {
        "seq_len": 1024,
        "batch": 8,
        "steps": 200,
        "lr": 1e-3,
        "warmup": 20,
        "d_model": 768,
        "n_layers": 8,
        "n_heads": 12,
        "n_kv_heads": 12,
        "mlp_hidden": 2048,
        "window": 4096,
        "dtype": "bfloat16",
    },
}
PEAK_FLOPS = 197e12  # TPU v5e, bf16 dense, per chip
PLAN_MFU = 0.3
PLAN_COMPILE_S = 90.0  # the train step and the scoring functions, once per process
PLAN_HOST_S = 2.0  # per checked run: check 6's bootstrap, zlib, a device sync per scoring batch


def scored_windows(st: Setting) -> float:
    """Full windows a checked run scores (forward passes), greedy extraction counted by its tokens."""
    th_new, th_prompt = 32, 32  # Thresholds.extract_new, extract_prefix
    over = min(st.replayed, st.per_stratum)
    compared = over + over * max(1, st.per_stratum // over)  # compare_rows: over-served + as planned
    items = st.keep * (st.replayed + st.clean_items)  # check 6's items at every kept checkpoint
    extract = compared * th_new * (th_prompt + th_new) / st.seq_len  # one forward of 64 tokens a new token
    effect = st.replayed + 2 * st.per_stratum  # window_effect: dosed, as-planned, as-planned by the reference
    heldout = st.per_stratum  # the run-level check's held-out windows
    return items + compared + extract + st.per_stratum + 3 * compared + effect + heldout


def plan(st: Setting, runs: int, references: int) -> dict:
    """Planned seconds on one v5e chip: `runs` checked runs and `references` reference runs (see SHAPES)."""
    from olmax.model.flops import flops_per_token
    from olmax.model.transformer import count_params

    cfg = st.model_config()
    forward = flops_per_token(cfg, st.seq_len)
    rate = PLAN_MFU * PEAK_FLOPS / (3 * forward)
    tokens = st.steps * st.batch * st.seq_len
    train_s = tokens / rate
    check_s = scored_windows(st) * st.seq_len * forward / (PLAN_MFU * PEAK_FLOPS) + PLAN_HOST_S
    return {
        "params_non_embedding": count_params(cfg) - 2 * cfg.vocab_size * cfg.d_model,
        "train_flops_per_token": 3 * forward,
        "tokens_per_s": rate,
        "tokens_per_run": tokens,
        "train_s_per_run": train_s,
        "check_s_per_run": check_s,
        "compile_s": PLAN_COMPILE_S,
        "runs": runs,
        "references": references,
        "total_s": PLAN_COMPILE_S + (runs + references) * train_s + runs * check_s,
    }


def format_plan(p: dict) -> str:
    return (
        f"plan on one v5e chip ({PLAN_MFU:.0%} of {PEAK_FLOPS / 1e12:.0f} TFLOP/s): "
        f"{p['params_non_embedding'] / 1e6:.1f}M non-embedding params, {p['train_flops_per_token'] / 1e6:.0f}M "
        f"train FLOPs/token, {p['tokens_per_s'] / 1e3:.0f}k tokens/s; {p['tokens_per_run'] / 1e6:.2f}M tokens "
        f"a run = {p['train_s_per_run']:.1f} s, checks {p['check_s_per_run']:.1f} s a run; {p['runs']} runs + "
        f"{p['references']} references + {p['compile_s']:.0f} s compile = {p['total_s']:.0f} s"
    )


def schedule(
    seeds: list[int], doses: list[int], clean_seeds: list[int], done=()
) -> list[tuple[int, list[int]]]:
    """Per seed in order, the doses still to run (0: the clean run): every clean seed's clean run, and the
    dosed seeds' doses; the runs already `done` ((seed, dose) pairs) left out, seeds with nothing left too."""
    have = set(done)
    out = []
    for seed in sorted(set(clean_seeds) | set(seeds)):
        wanted = [d for d in [0, *(doses if seed in seeds else [])] if (seed, d) not in have]
        if wanted:
            out.append((seed, wanted))
    return out


def run_power(
    st: Setting,
    seeds: list[int],
    doses: list[int],
    clean_seeds: list[int] | None = None,
    log=print,
    *,
    done: list[dict] | None = None,
    budget_s: float | None = None,
    on_run=None,
    stamp: dict | None = None,
    clock=time.monotonic,
) -> dict:
    """The clean runs (each seed of `clean_seeds` and `seeds`, each with its reference run) and every
    (seed, dose) run; returns {"setting", "runs", "table", ...}.

    `done`: runs of an earlier call (a record's, `read_runs`), kept and not run again (a seed with runs left
    trains its reference again). `budget_s`: before each training, the seconds it is expected to take (the
    last measured run's, the plan's before the first) are added to the seconds spent; past the budget the
    call stops there and says so (`stopped`), its runs so far returned. `on_run(result)` after every run,
    with the result so far (the record is written there, so a call killed midway keeps what it finished).
    `stamp` is added to every new run (device, commit, date, shape)."""
    t0 = clock()
    clean_seeds = sorted(set(clean_seeds or []) | set(seeds))
    runs = list(done or [])
    todo = schedule(seeds, doses, clean_seeds, [(r["seed"], r["dose"]) for r in runs])
    expect = plan(st, sum(len(w) for _, w in todo), len(todo))
    log(format_plan(expect))
    if budget_s is not None and expect["total_s"] > budget_s:
        log(f"the plan is over the {budget_s:.0f} s budget: the call stops before the run that would pass it")
    # the seconds a training and a run's checks are expected to take (measured ones replace the plan's)
    guess = {"train": expect["compile_s"] + expect["train_s_per_run"], "checks": expect["check_s_per_run"]}
    state = {"stopped": None}

    def fits(what: str, trainings: int, checks: int) -> bool:
        need = trainings * guess["train"] + checks * guess["checks"]
        spent = clock() - t0
        if budget_s is None or spent + need <= budget_s:
            return True
        state["stopped"] = (
            f"stopped before {what} at {spent:.0f} s: it needs ~{need:.0f} s of the {budget_s:.0f} s budget"
        )
        log(state["stopped"])
        return False

    def result() -> dict:
        return {
            "setting": dataclasses.asdict(st),
            "seeds": seeds,
            "clean_seeds": clean_seeds,
            "doses": doses,
            "runs": runs,
            "table": power_table(runs, doses),
            "effect": effect_table(runs, doses),
            "seconds": clock() - t0,
            "plan": expect,
            "stopped": state["stopped"],
            "new_runs": len(runs) - len(done or []),
            "left": [
                [s, d]
                for s, w in schedule(seeds, doses, clean_seeds, [(r["seed"], r["dose"]) for r in runs])
                for d in w
            ],
        }

    def say(r):
        flags = ", ".join(k for k, v in r["checks"].items() if v["flagged"]) or "none"
        log(
            f"[{clock() - t0:6.0f}s] seed {r['seed']} dose {r['dose']:>2}x: final loss "
            f"{r['final_loss']:.3f}, train {r['train_s']:.1f} s, checks {r['check_s']:.1f} s, flagged: {flags}"
        )

    for seed, wanted in todo:
        if not fits(f"seed {seed}'s reference run", 2, 1):  # the reference and its first run
            break
        pool, trainer = text_windows(st.seq_len, pool_size(st)), trainer_for(st)
        t = clock()
        ref = train_reference(trainer, pool, st, seed)
        guess["train"] = clock() - t
        log(f"[{clock() - t0:6.0f}s] seed {seed} reference: {guess['train']:.1f} s")
        for dose in wanted:
            if not fits(f"seed {seed} dose {dose}x", 1, 1):
                break
            r = one_run(trainer, pool, st, seed, dose, ref, clock)
            if stamp:
                r["stamp"] = stamp
            r["reference_s"] = guess["train"] if dose == wanted[0] else 0.0
            guess["train"], guess["checks"] = r["train_s"], r["check_s"]
            runs.append(r)
            say(r)
            if on_run is not None:
                on_run(result())
        if state["stopped"]:
            break
    return result()


def summary(result: dict) -> dict:
    """The record's top-level summary: per setting [flagged, runs] of the user's verdict, any check without
    the reference run (`D_noref`) and with it (`D_ref`), D = `clean` or `{dose}x`; the run-level check 3's
    counts and rates (`run_level`: its rate over the dosed runs and its false-alarm rate on clean runs); each
    dose's paired CE effect and its share per extra serving (`effect`); the device."""
    table = result["table"]
    out: dict = {}
    for suffix, name in (("noref", "any_without_reference"), ("ref", "any_with_reference")):
        for d in [0, *result["doses"]]:
            c = table.get(name, {}).get("by_dose", {}).get(str(d), {"flagged": 0, "runs": 0})
            out[f"{'clean' if d == 0 else f'{d}x'}_{suffix}"] = [c["flagged"], c["runs"]]
    level = table.get(RUN_LEVEL, {}).get("by_dose", {})
    counts = {
        ("clean" if d == 0 else f"{d}x"): level.get(str(d), {"flagged": 0, "runs": 0})
        for d in [0, *result["doses"]]
    }
    dosed = [c for k, c in counts.items() if k != "clean"]
    n_dosed = sum(c["runs"] for c in dosed)
    out["run_level"] = {
        **{k: [c["flagged"], c["runs"]] for k, c in counts.items()},
        "rate_dosed": sum(c["flagged"] for c in dosed) / n_dosed if n_dosed else None,
        "false_alarm_rate": counts["clean"]["flagged"] / counts["clean"]["runs"]
        if counts["clean"]["runs"]
        else None,
    }
    out["effect"] = {
        f"{d}x": None
        if result["effect"].get(str(d)) is None
        else {k: result["effect"][str(d)][k] for k in ("gain_nats", "per_serving_nats", "per_seed")}
        for d in result["doses"]
    }
    devices = sorted({r["stamp"]["device"] for r in result["runs"] if r.get("stamp")})
    out["device"] = ", ".join(devices) or None
    out["complete"] = not result.get("left")
    return out


def make_stamp(shape: str) -> dict:
    """What every new run carries: the device it ran on (jax.devices()), the commit, the UTC date, the shape."""
    import datetime

    import jax

    from bench.harness import git_state

    dev = jax.devices()[0]
    return {
        "device": f"{len(jax.devices())} x {dev.device_kind} ({dev.platform})",
        "commit": git_state()["commit"],
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "shape": shape,
    }


def read_runs(path, st: Setting) -> tuple[list[dict], list[dict]]:
    """The runs of a record written by this benchmark (`--resume`) and the calls that made them; the record
    must be of the same setting (its runs would not be comparable otherwise)."""
    from bench.record import read

    rec = read(path)
    notes = rec["notes"]
    if notes.get("setting") != dataclasses.asdict(st):
        diff = {
            k: (notes.get("setting", {}).get(k), v)
            for k, v in dataclasses.asdict(st).items()
            if notes.get("setting", {}).get(k) != v
        }
        raise SystemExit(f"{path}: its setting differs from this one (record, here): {diff}")
    return list(notes.get("runs", [])), list(notes.get("calls", []))


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


def stored_run(r: dict) -> dict:
    """A run as the record keeps it: all `--resume` needs to put it back in the table."""
    keep = ("seed", "dose", "final_loss", "effect", "seconds", "train_s", "check_s", "reference_s", "stamp")
    return {
        **{k: r[k] for k in keep if k in r},
        "checks": {c: {k: x for k, x in v.items() if k != "message"} for c, v in r["checks"].items()},
    }


def write_record(
    result: dict, argv: list[str], smoke: bool, results, name: str = "mem", calls: list[dict] | None = None
) -> Path:
    """bench/results/NAME.json (mem.json): the setting, the sizes, every check's flag counts per dose, each
    dose's effect on the dosed windows' loss, every run (what `--resume` reads back), the calls that made
    them (`calls`: earlier ones from the resumed record, then this one) and the top-level `summary`."""
    from bench.record import Record, package_version

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
    rec.note("runs", [stored_run(r) for r in result["runs"]])
    if "plan" in result:
        rec.note("plan", result["plan"])
    this = {
        "date": rec.data["date"],
        "commit": rec.data.get("commit"),
        "seconds": result["seconds"],
        "runs": result.get("new_runs", len(result["runs"])),
        "stopped": result.get("stopped"),
    }
    rec.note("calls", [*(calls or []), this])
    rec.note("left", result.get("left", []))
    for check, t in result["table"].items():
        for dose, c in t["by_dose"].items():
            name = f"{check}.flagged_at_{dose}x" if dose != "0" else f"{check}.flagged_clean"
            rec.figure(name, [c["flagged"]], f"of {c['runs']} runs", runs=c["runs"])
    eff = result["effect"]
    if eff["sd_windows_nats"] is not None:
        rec.figure("sd_windows", [eff["sd_windows_nats"]], "nats")
        rec.figure("sd_net_of_reference", [eff["sd_net_of_reference_nats"]], "nats")
    for dose in result["doses"]:
        e = eff.get(str(dose))
        if e is None:
            continue
        rec.figure(f"gain_at_{dose}x", e["per_seed"], "nats")
        if e.get("per_serving_nats") is not None:
            rec.figure(f"gain_per_serving_at_{dose}x", [e["per_serving_nats"]], "nats")
        for side in ("without_reference", "with_reference"):
            if e[f"windows_needed_{side}"] is not None:
                rec.figure(f"windows_needed_{side}_at_{dose}x", [e[f"windows_needed_{side}"]], "windows")
    rec.figure("seconds", [result["seconds"]], "s")
    rec.data["summary"] = summary(result)
    return rec.write()


def format_probe(result: dict) -> str:
    """The probe's answer: what one serving does to a window's CE, the seconds a run took and the full
    table's seconds at those (10 clean and 9 dosed runs, 10 references, the compile once)."""
    runs = result["runs"]
    lines = ["\nprobe:"]
    for d in result["doses"]:
        e = result["effect"].get(str(d))
        if e is not None:
            lines.append(
                f"  {d}x: the dosed windows' CE gain less the clean run's {e['gain_nats']:+.4f} nats, "
                f"{e['per_serving_nats']:+.4f} nats per extra serving"
            )
    if runs:
        train = [r["train_s"] for r in runs[1:]] or [runs[0]["train_s"]]  # the first run's steps are warm
        check = [r["check_s"] for r in runs[1:]] or [runs[0]["check_s"]]
        t, c = float(np.mean(train)), float(np.mean(check))
        lines.append(
            "  seconds: "
            + ", ".join(
                f"{r['dose']}x train {r['train_s']:.1f} + checks {r['check_s']:.1f}"
                + (
                    f" (its reference {r['reference_s']:.1f}, compile included)"
                    if r.get("reference_s")
                    else ""
                )
                for r in runs
            )
        )
        # the first reference and the first run's checks carry the compiles
        compile_s = max(runs[0].get("reference_s", 0.0) - t, 0.0) + max(runs[0]["check_s"] - c, 0.0)
        lines.append(
            f"  full table at these: compile ~{compile_s:.0f} s + 29 trainings x {t:.1f} s + 19 x "
            f"{c:.1f} s of checks = {compile_s + 29 * t + 19 * c:.0f} s"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from bench.record import add_arguments

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default=None, help="seeds of the dosed runs, e.g. 0-2 or 0,5 (default 0-2)")
    p.add_argument(
        "--clean-seeds", default=None, help="seeds of the clean runs (default 0-9, the docs' table)"
    )
    p.add_argument(
        "--doses", default=None, help="servings of each window of the dosed source (2,4,8,16; tpu 2,4,8)"
    )
    p.add_argument(
        "--shape",
        choices=sorted(SHAPES),
        default="cpu",
        help="cpu: the tiny model (the defaults); tpu: one v5e chip's shape (SHAPES); options below override it",
    )
    for f in dataclasses.fields(Setting):
        p.add_argument(
            f"--{f.name.replace('_', '-')}", type=type(f.default), default=None, help=f"default {f.default}"
        )
    p.add_argument(
        "--probe",
        action="store_true",
        help="seed 0 only: its reference, clean and 4x runs; prints one serving's CE effect and the seconds",
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="stop before a run that would end past this many seconds (the record keeps the runs so far)",
    )
    p.add_argument(
        "--resume", default=None, help="a record of this benchmark: its runs are kept, the rest run"
    )
    p.add_argument("--out", default=None, help="also write the runs and the table as JSON")
    p.add_argument("--record", action="store_true", help="write the record (bench/record.py)")
    p.add_argument(
        "--name", default=None, help="the record's name: bench/results/NAME.json (default mem; tpu: mem_tpu)"
    )
    add_arguments(p)
    args = p.parse_args(argv)
    values = {**dataclasses.asdict(Setting()), **SHAPES[args.shape]}
    if args.smoke:
        values.update(SMOKE)
    values.update(
        {
            f.name: getattr(args, f.name)
            for f in dataclasses.fields(Setting)
            if getattr(args, f.name) is not None
        }
    )
    st = Setting(**values)
    tpu = args.shape == "tpu"
    seeds, clean, dose_text = (
        args.seeds or "0-2",
        args.clean_seeds or "0-9",
        args.doses or ("2,4,8" if tpu else "2,4,8,16"),
    )
    if args.probe:
        seeds, clean, dose_text = args.seeds or "0", args.clean_seeds or "0", args.doses or "4"
    doses = sorted(int(d) for d in dose_text.split(","))
    if fresh_rows(st, doses[-1]) < st.clean_items + st.per_stratum:
        p.error(
            f"the dosed and planned-2x rows leave too few fresh rows in the {st.steps * st.batch}-row stream"
        )
    name = args.name or ("mem_tpu" if tpu else "mem") + ("_probe" if args.probe else "")
    done, calls = read_runs(args.resume, st) if args.resume else ([], [])
    argv_rec = sys.argv if argv is None else [__file__, *argv]
    recording = args.record or args.smoke

    def save(result):
        return write_record(result, argv_rec, args.smoke, args.results, name, calls)

    result = run_power(
        st,
        parse_seeds(seeds),
        doses,
        parse_seeds(clean),
        done=done,
        budget_s=args.budget_s,
        on_run=save if recording else None,
        stamp=make_stamp(args.shape),
    )
    print(
        f"\nsetting: {json.dumps(result['setting'])}; dosed seeds {result['seeds']}; clean seeds "
        f"{result['clean_seeds']}; {result['seconds']:.0f} s"
    )
    print(
        "runs flagged / runs per dose (AUROC of the check's statistic, dosed vs clean runs); 'clean' = the "
        f"false-positive rate; 'detects from' = smallest dose flagged in >= {DETECT_RATE:.0%} of seeds there "
        "and above; s/run = seconds the check took per run. Every mix plans a source 2x; a dose is a "
        f"source served that many times its plan. '{RUN_LEVEL}' is check 3 (reference), the run-level signal: train loss "
        "below the reference run's that held-out (never-served) loss does not follow."
    )
    print(format_table(result["table"], doses))
    print(format_effect(result["effect"], doses))
    if args.probe:
        print(format_probe(result))
    if result["stopped"]:
        print(f"\n{result['stopped']}; {len(result['left'])} runs left: continue with --resume RECORD")
    if args.out:
        from olmax.jsonio import write_json

        write_json(args.out, result)
        print(f"wrote {args.out}")
    if recording:
        path = save(result)
        print(f"summary: {json.dumps(summary(result))}")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

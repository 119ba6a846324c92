"""Calibrated memorization checks with the plan as the null: how often each check flags a model one of whose
sources was served 2x ... 16x its plan (detection rate per dose, and the AUROC of each check's statistic
between dosed and clean runs), how often it flags clean runs, where every window is served as planned
(false-positive rate), and what power olmax/evals/power.py predicted for each run.

Setting (all in-process; one compiled train step serves every run, so only the first run compiles):
  text        real text, byte-level: the standard library's *.py files cut into windows of `--seq-len` bytes
              (token = byte, < 256, within tiny's vocabulary of 1,000); exact duplicates dropped; the pool is
              shuffled once (fixed seed) and split into the parts below, shared by every run
  stream      `--steps` x `--batch` rows (default 200 x 8 = 1,600): `--compared` windows (784) once each, a
              planned-2x source of `--twice` windows (48) twice each (the mix lists it twice: planned), and
              spare windows once each (the rest: 720); one order (fixed seed) that every run keeps
  reference   one clean run of that stream from another initialisation (seed 1000): check 10's reference
              model and check 3's reference curve for every run, a healthy run of the same recipe and data
              order, as a user would compare against (`--reference RUN`)
  seed s      the initialisation and a draw from the compared windows: its dosed windows, and its as-planned
              windows (never dosed in any of its runs)
  dose d      the seed's first min(`--replayed`, spare // (d - 1)) dosed windows (`--replayed-2x` at 2x: 128
              at 2x, 240 at 4x, 102 at 8x) served d times where the plan serves them once: their d - 1 extra
              servings take the places of as many spare rows (a shard copied into the mix, its copies landing
              where other data was); every other row stays where the reference has it. They are also check
              6's contaminated items
  clean       the seed's stream as planned (the reference's, from the seed's initialisation). The checks get
              the labels of a dosed run: its first `--control` dosed windows (128) as served
              `--control-label` = 16x where the plan serves 1x, so a flag there is a false positive
  compared    every comparison takes the run's over-served windows and `--ratio` (2) as many of the seed's
              as-planned windows (per_stratum = ratio x over-served); check 6's clean items are those same
              windows; check 5 and check 3 read `--unseen` (128) windows never served to any run
  model       olmax `tiny` (4 layers, d 64), AdamW peak lr 3e-3, 10 warmup steps, cosine decay to 10%,
              gradient clipping at 1.0 (the tiny recipe's optimiser); `--checkpoints` evenly spaced (4, as
              tiny's every 25 of 100 steps), of which the newest `--keep` (3, tiny's retention) are kept:
              check 9 compares the earliest kept with the last, check 6 scores the earliest kept and the last
              (its flag reads those two)
Checks (olmax/evals/model_checks.py and membership.py, default Thresholds; every comparison is over-served
vs as-planned windows matched by planned servings): 1 exposure, 4 extract (32-byte greedy continuation of a
32-byte prefix, on `--extract` windows of each group), 5 train_vs_unseen, 6 contaminated (CE gain between
the earliest kept and the last checkpoint, bootstrap 95% interval above 0), 7 min_k_pp, 8 zlib,
9 checkpoint_diff (no reference needed), 10 reference_ratio (with the reference run). "Without a reference
run" is every check but 10.

    .venv/bin/python -m bench.studies.memorization_power [--seeds 0-2] [--clean-seeds 0-9] [--doses 2,4,8,16]
                                                 [--out POWER.json] [--record] [--smoke]

On one TPU v5e chip (`--shape tpu`, SHAPES: OLMo 3's block at d 768 x 8 layers, bf16, 1,024-byte windows;
doses 2,4,8; record bench/results/mem_tpu.json with a top-level `summary`): `--probe` (seed 0's clean and 4x
runs: one serving's CE effect and the seconds a run), `--budget-s S` (stop before a run that would end past
S s; the record is written after every run), `--resume RECORD` (keep its runs, run the rest). `design`
prints, before anything runs, the power each verdict should have at this setting from the previous chip
table's measurements, and `plan` the seconds on the chip from that table's measured rates.
Every run also gets check 3 (`run_level`: train loss below its reference's that never-served loss does not
follow; olmax/evals/memorization.py `check_reference`), tabulated beside the others, outside `ANY`.

Printed: per check, the runs flagged per dose and among the clean runs, the smallest dose from which the
check flags in >= 80% of the seeds at that dose and every larger one, the AUROC of the check's statistic
(dosed runs vs clean runs: 0.5 is no power, 1.0 separates them perfectly), the power olmax/evals/power.py
predicted at 2x and 4x (mean over the runs at that dose) and the seconds each check took; then the same for
"any check without the reference" and "any check with it"; then each dose's own effect on the dosed
windows' CE (each seed's gain over the as-planned windows less its clean run's: the same windows, so their
difficulty cancels), the as-planned windows' spread without and net of the reference, and the over-served
windows the membership checks' rule needs for 90% power at that effect. `--record` writes
bench/results/mem.json (`--name`; bench/record.py; `--smoke` elsewhere). Deterministic for fixed arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from olmax.evals.membership import auroc
from olmax.evals.power import Rule, power

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
TARGET = 0.9  # the power the design aims at for each verdict at its dose (olmax Thresholds.min_power)


@dataclass(frozen=True)
class Setting:
    """One benchmark configuration (the defaults are the docs' table: the tiny recipe's shape)."""

    seq_len: int = 256  # bytes per window = tokens per training row (check 4 needs 32 + 32)
    batch: int = 8
    steps: int = 200  # 200 x 8 = 1,600 rows of 256 tokens = 410k tokens per run
    lr: float = 3e-3
    warmup: int = 10
    compared: int = 784  # windows served once in every run, the seeds' dosed and as-planned windows
    twice: int = 48  # windows of the planned-2x source (6% of the stream)
    unseen: int = 128  # windows never served: checks 5 and 3's held-out text
    replayed: int = 240  # dosed windows of a run, where its extra servings fit the spare rows
    # at 2x: what sees 2x is the reference ratio, a rank test whose AUROC must clear 0.6, so fewer windows
    # that each gain more beat more that each gain less (a larger source's windows gain less: `design`)
    replayed_2x: int = 128
    control: int = 128  # the windows a clean run's labels claim were over-served
    ratio: int = 2  # as-planned windows compared (and check 6's clean items) per over-served window
    extract: int = 64  # windows per group check 4 continues (its greedy decode is the dearest scoring)
    checkpoints: int = 4  # evenly spaced; the last at `steps` (tiny: every 25 of 100 steps)
    keep: int = 3  # the newest kept (tiny's checkpoint.keep): check 9's earlier model is the oldest of them
    resamples: int = 1000  # bootstrap draws of check 6
    control_label: int = 16  # the servings the clean runs' labels claim for their control windows
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

    def item_steps(self) -> list[int]:
        """The checkpoints check 6 scores: the earliest kept and the last (its gain reads those two)."""
        kept = self.kept_steps()
        return sorted({kept[0], kept[-1]})

    def spare(self) -> int:
        """Rows neither compared nor planned 2x: fresh windows served once as planned, whose places a dose's
        extra servings take."""
        return self.steps * self.batch - self.compared - 2 * self.twice

    def dosed_windows(self, dose: int) -> int:
        """The windows a run claims were served beyond the plan: a clean run's labels `control`; a dose d
        serves min(replayed, spare // (d - 1)) windows d times (their d - 1 extra servings fit the spare
        rows)."""
        if dose == 0:
            return self.control
        most = self.replayed_2x if dose == 2 else self.replayed
        return min(most, self.spare() // max(dose - 1, 1))

    def problem(self, doses: list[int]) -> str | None:
        """Why the setting cannot run these doses, or None."""
        drawn = max(self.replayed, self.replayed_2x, self.control)
        if self.spare() < 0:
            return f"{self.compared} compared windows and the planned-2x source overfill the {self.steps * self.batch}-row stream"
        if self.compared - drawn < self.ratio * drawn:
            return (
                f"{self.compared} compared windows hold {drawn} dosed windows but not {self.ratio} x as many "
                "as-planned ones"
            )
        small = [d for d in doses if self.dosed_windows(d) < 4]
        if small:
            return (
                f"dose {small[0]}x: its extra servings leave room for {self.dosed_windows(small[0])} windows"
            )
        return None


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
    return st.compared + st.twice + st.unseen + st.spare()


@dataclass(frozen=True)
class Layout:
    """The pool's split, shared by every run, and the order every run keeps."""

    compared: np.ndarray  # (compared, L): served once, except a seed's dosed windows at a dose
    twice: np.ndarray  # (twice, L): planned and served twice
    unseen: np.ndarray  # (unseen, L): never served, never planned (checks 5 and 3)
    spare: np.ndarray  # (spare, L): served once as planned, displaced by a dose's extra servings
    order: np.ndarray  # (steps x batch,): the stream as rows of [compared, twice, twice, spare]


def layout(pool: np.ndarray, st: Setting) -> Layout:
    rows = np.random.default_rng(0).permutation(pool.shape[0])
    c, t, u, s = np.split(rows, np.cumsum([st.compared, st.twice, st.unseen]))
    order = np.random.default_rng(10_000).permutation(st.steps * st.batch)
    return Layout(pool[c], pool[t], pool[u], pool[s], order)


@dataclass(frozen=True)
class Split:
    """One seed's draw from the compared windows (indices into them)."""

    dosed: np.ndarray  # max(replayed, control): a run at dose d over-serves the first `dosed_windows(d)`
    planned: np.ndarray  # the rest: served once, as planned, in every run of the seed


def split(st: Setting, seed: int) -> Split:
    rows = np.random.default_rng(seed).permutation(st.compared)
    drawn = max(st.replayed, st.replayed_2x, st.control)
    return Split(rows[:drawn], rows[drawn:])


def stream(lay: Layout, sp: Split, st: Setting, dose: int, seed: int) -> np.ndarray:
    """(steps x batch, L) in the reference's order: the compared and spare windows once, the planned-2x ones
    twice; at dose d (> 1) the first `dosed_windows(d)` dosed windows' d - 1 extra servings each take the
    place of a spare row (which rows: drawn by seed and dose)."""
    rows = np.concatenate([lay.compared, lay.twice, lay.twice, lay.spare])[lay.order]
    if dose > 1:
        w = st.dosed_windows(dose)
        spare_at = np.flatnonzero(lay.order >= st.compared + 2 * st.twice)
        rng = np.random.default_rng(20_000 + 100 * seed + dose)
        slots = rng.choice(spare_at, size=(dose - 1) * w, replace=False)
        rows = rows.copy()
        rows[slots] = np.repeat(lay.compared[sp.dosed[:w]], dose - 1, axis=0)
    return rows


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


def predicted(verdict: dict) -> dict[str, float] | None:
    """The power olmax/evals/power.py gave the check at 2x and 4x at this run's sample (None: no model)."""
    f = verdict.get("sources", {}).get("text", {}).get("power")
    return dict(f["power"]) if f else None


@dataclass(frozen=True)
class Trained:
    """One trained run as the checks see it: its final model, its earliest kept checkpoint, check 10's
    reference model, the train losses and check 6's item CEs at `item_steps`."""

    model: object
    earlier: object
    reference: object
    losses: np.ndarray
    item_ce: list[np.ndarray]


def exposure_of(lay: Layout, sp: Split, st: Setting, dose: int):
    """What exposure counts say of a run (or, for a clean run, claim): its over-served windows served `dose`
    (the clean run: `control_label`) times where the plan serves them once, the planned-2x windows twice as
    planned, `ratio` as many of the seed's as-planned windows once as planned, never-served windows never."""
    from olmax.evals.exposure_file import Exposure

    w = st.dosed_windows(dose)
    label = dose if dose else st.control_label
    parts = [
        lay.compared[sp.dosed[:w]],
        lay.twice,
        lay.compared[sp.planned[: st.ratio * w]],
        lay.unseen,
    ]
    sizes = [len(x) for x in parts]
    counts = np.repeat([label, 2, 1, 0], sizes).astype(np.int64)
    planned = np.repeat([1, 2, 1, 0], sizes).astype(np.int64)
    tokens = np.concatenate(parts)
    n = len(tokens)
    return Exposure(
        np.arange(n), counts, np.asarray(["text"] * n), tokens, st.seq_len, None, st.steps, "bench", planned
    )


def items_of(lay: Layout, sp: Split, st: Setting, dose: int) -> np.ndarray:
    """Check 6's items: the run's over-served windows (its contaminated items), then as many as planned per
    over-served one as the other checks compare (its clean items)."""
    w = st.dosed_windows(dose)
    return np.concatenate([lay.compared[sp.dosed[:w]], lay.compared[sp.planned[: st.ratio * w]]])


def run_checks(
    tr: Trained, lay: Layout, sp: Split, st: Setting, dose: int
) -> tuple[dict[str, dict], dict[str, float]]:
    """Every check on the final model (check 6 on the items' scores at `item_steps`); (verdicts, seconds).
    The model checks state their power from the effect olmax measured for a model of this size."""
    from olmax.evals.curves import Curves
    from olmax.evals.gains import SetScores, gains_report
    from olmax.evals.membership import check_membership
    from olmax.evals.model_checks import check_exposure, check_extraction, check_train_vs_unseen
    from olmax.evals.power import model_effect
    from olmax.evals.verdicts import Models, Probe, Thresholds

    th = Thresholds()
    effect = model_effect(tr.model)
    exp = exposure_of(lay, sp, st, dose)
    curves = Curves("bench", np.arange(1, st.steps + 1), tr.losses)
    w = st.dosed_windows(dose)
    n = w * (1 + st.ratio)
    scores = SetScores(
        "replayed",
        tuple(map(str, range(n))),
        np.arange(n) < w,
        np.asarray(st.item_steps()),
        {"ce": np.stack(tr.item_ce)},
    )
    out, seconds = {}, {}

    def timed(name, fn):
        t = time.perf_counter()
        out[name] = fn()
        seconds[name] = time.perf_counter() - t

    kw = {"per_stratum": st.ratio * w, "batch_size": 16}
    timed("exposure", lambda: check_exposure(tr.model, exp, th, probe_len=st.seq_len, effect=effect, **kw))
    timed("extract", lambda: check_extraction(tr.model, exp, th, per_stratum=st.extract, batch_size=16))
    timed("train_vs_unseen", lambda: check_train_vs_unseen(tr.model, curves, exp, th, **kw))
    timed(
        "contaminated",
        lambda: gains_report([scores], resamples=st.resamples, thresholds=th)["verdict"],
    )
    t = time.perf_counter()
    first = st.kept_steps()[0]
    models = Models(
        tr.model,
        Probe(kw["per_stratum"], st.seq_len, kw["batch_size"]),
        reference=tr.reference,
        reference_name="a clean run of the same stream from another initialisation",
        earlier=tr.earlier,
        earlier_name=f"the earliest kept checkpoint (step {first}) to step {st.steps}",
        earlier_share=(st.steps - first) / st.steps,
        effect=effect,
    )
    membership = check_membership(exp, th, models)
    spent = (time.perf_counter() - t) / len(membership)
    for name, verdict in membership.items():
        out[name], seconds[name] = verdict, spent
    return out, seconds


def window_effect(model, ref: Reference, lay: Layout, sp: Split, st: Setting, widths: list[int]) -> dict:
    """What the checks must see a dose through, on windows every run of the seed shares: the mean CE of the
    seed's first w dosed windows for each w in `widths` (a dose's over-served ones; in its clean run, the same
    windows served once), of as many of its as-planned windows as the largest w, the spread of the latter's CE (their
    difficulty: what a check without a reference must see past) and of their CE net of the reference run's
    (what a check with a reference must see past)."""
    n = max(widths)
    dosed = window_ce(model, lay.compared[sp.dosed[:n]])
    planned = window_ce(model, lay.compared[sp.planned[:n]])
    return {
        "dosed_ce": {str(w): float(dosed[:w].mean()) for w in widths},
        "planned_ce": float(planned.mean()),
        "sd_windows_nats": float(planned.std(ddof=1)),
        "sd_net_of_reference_nats": float((ref.compared_ce[sp.planned[:n]] - planned).std(ddof=1)),
    }


def windows_needed(gain: float, sd: float, ratio: float) -> int | None:
    """Over-served windows (with `ratio` times as many as planned) at which the membership checks' rule
    (Mann-Whitney z above 3 and AUROC above 0.6, default Thresholds) flags a CE gain `gain` over a
    per-window spread `sd` with 90% power (olmax/evals/power.py); None when its AUROC stays under 0.6."""
    from olmax.evals.power import windows_needed as needed

    return needed(gain, sd, ratio, Rule("rank", 3.0, 0.6), TARGET) if gain > 0 else None


def effect_table(runs: list[dict], doses: list[int], st: Setting) -> dict:
    """Per dose, the dose's own effect on its over-served windows' loss: each seed's gain (as-planned CE less
    the over-served windows' CE) at that dose less the same seed's clean run's on the same windows (there
    served once: their difficulty cancels), averaged over the seeds; the clean runs' spreads; and the
    over-served windows a membership check would need for 90% power at that effect, without a reference
    (the CE's spread) and with one (the spread net of the reference)."""
    clean = {r["seed"]: r["effect"] for r in runs if r["dose"] == 0 and r.get("effect")}
    if not clean:  # a record cut short before its first clean run
        return {"sd_windows_nats": None, "sd_net_of_reference_nats": None, **{str(d): None for d in doses}}
    sd_raw = float(np.mean([e["sd_windows_nats"] for e in clean.values()]))
    sd_net = float(np.mean([e["sd_net_of_reference_nats"] for e in clean.values()]))
    out = {"sd_windows_nats": sd_raw, "sd_net_of_reference_nats": sd_net}
    for d in doses:
        w = str(st.dosed_windows(d))

        def gain(e, w=w):
            return e["planned_ce"] - e["dosed_ce"][w]

        paired = [
            gain(r["effect"]) - gain(clean[r["seed"]])
            for r in runs
            if r["dose"] == d and r.get("effect") and r["seed"] in clean
        ]
        if not paired:  # not run (yet): a record cut short by its budget
            out[str(d)] = None
            continue
        g = float(np.mean(paired))
        out[str(d)] = {
            "windows": int(w),
            "gain_nats": g,
            "per_seed": paired,
            # the dose's extra servings (d - 1 beyond the plan's one): what one serving does to a window
            "per_serving_nats": g / (d - 1) if d > 1 else None,
            "windows_needed_without_reference": windows_needed(g, sd_raw, st.ratio),
            "windows_needed_with_reference": windows_needed(g, sd_net, st.ratio),
        }
    return out


def format_effect(effect: dict, doses: list[int]) -> str:
    """The dose's own effect on a window's loss and the windows a check would need to see it with 90%."""

    def n(v):
        return f"{v:,}" if v is not None else "never (AUROC under 0.6)"

    if effect["sd_windows_nats"] is None:
        return "\nno clean run yet: no effect to report"
    lines = [
        f"\nper-window spread of the as-planned windows' CE: {effect['sd_windows_nats']:.3f} nats (their "
        f"difficulty), {effect['sd_net_of_reference_nats']:.3f} net of the reference run's CE",
        "| dose | windows | CE gain of the over-served windows (nats, less the clean run's) | per serving | "
        "over-served windows for 90% power without a reference | with a reference |",
        "|---|---|---|---|---|---|",
    ]
    for d in doses:
        e = effect[str(d)]
        if e is None:
            lines.append(f"| {d}x | - | not run | - | - | - |")
            continue
        lines.append(
            f"| {d}x | {e['windows']} | {e['gain_nats']:+.4f} | {e['per_serving_nats']:+.4f} | "
            f"{n(e['windows_needed_without_reference'])} | {n(e['windows_needed_with_reference'])} |"
        )
    return "\n".join(lines)


@dataclass(frozen=True)
class Reference:
    """The reference run: its final model, its train losses, its mean CE on the never-served windows (its
    held-out loss for the run-level check) and its CE on every compared window (for the spreads)."""

    model: object
    losses: np.ndarray
    heldout_ce: float
    compared_ce: np.ndarray


def train_reference(trainer: Trainer, lay: Layout, st: Setting) -> Reference:
    """The stream as planned, from another initialisation (1000)."""
    losses, model = trainer.run(stream(lay, split(st, 0), st, 0, 0), 1000)
    return Reference(
        model, losses, float(window_ce(model, lay.unseen).mean()), window_ce(model, lay.compared)
    )


def run_level(losses: np.ndarray, heldout_ce: float, ref: Reference, st: Setting) -> dict:
    """Check 3 of `olmax eval memorization` (olmax/evals/memorization.py `check_reference`, default
    Thresholds) on a run and its reference: flags a run whose train loss (the mean of the last
    `train_window` steps) beats the reference's by `reference_gain_nats` while its held-out loss keeps less
    than `reference_heldout_share` of that gain; held-out = the never-served windows (`unseen`).
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
    lay: Layout,
    st: Setting,
    seed: int,
    dose: int,
    ref: Reference,
    clock=time.perf_counter,
    widths: list[int] | None = None,
) -> dict:
    """Train one run (dose 0: clean) and return each check's verdict on it (the run-level check 3 as
    `RUN_LEVEL`), with the seconds its training and its checks took; with `widths` (the doses' over-served
    window counts) also the dose's effect on the windows its seed shares (`window_effect`)."""
    t_train = clock()
    sp = split(st, seed)
    items = items_of(lay, sp, st, dose)
    kept, item_ce = {}, []

    def on_checkpoint(step, model):
        if step == st.kept_steps()[0]:
            kept["earlier"] = model
        if step in st.item_steps():
            item_ce.append(window_ce(model, items))

    losses, model = trainer.run(stream(lay, sp, st, dose, seed), seed, on_checkpoint)
    train_s = clock() - t_train  # item scoring at the item steps included
    t_checks = clock()
    checks, seconds = run_checks(
        Trained(model, kept["earlier"], ref.model, losses, item_ce), lay, sp, st, dose
    )
    t = time.perf_counter()
    level = run_level(losses, float(window_ce(model, lay.unseen).mean()), ref, st)
    seconds[RUN_LEVEL] = time.perf_counter() - t
    out = {
        "seed": seed,
        "dose": dose,
        "windows": st.dosed_windows(dose),
        "final_loss": float(losses[-20:].mean()),
        "seconds": seconds,
        "checks": {
            k: {
                "flagged": bool(v["flagged"]),
                "status": v["status"],
                "statistic": statistic(k, v),
                "predicted": predicted(v),
                "message": v["message"],
            }
            for k, v in checks.items()
        },
    }
    if widths:
        t = time.perf_counter()
        out["effect"] = window_effect(model, ref, lay, sp, st, widths)
        seconds["effect"] = time.perf_counter() - t
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
    detects, the AUROC of its statistic between the runs at each dose and the clean runs, and at 2x and 4x
    the mean power olmax/evals/power.py predicted for those runs (`predicted`, where the check has a model)."""
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
            said = [
                r["checks"][check]["predicted"][str(d)]
                for r in having
                if r["dose"] == d and str(d) in (r["checks"][check].get("predicted") or {})
            ]
            if said:
                row[str(d)]["predicted"] = float(np.mean(said))
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
        said = f" [{c['predicted']:.0%}]" if c.get("predicted") is not None else ""
        return f"{c['flagged']}/{c['runs']}{auc}{said}"

    head = ["check", "clean (FP)", *[f"{d}x (AUROC) [predicted]" for d in doses], "detects from", "s/run"]
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
# `--shape tpu`: the same benchmark on one TPU v5e chip, in one process under 9 minutes (docs/evals.md, "On
# one TPU v5e chip"). OLMo 3's block (SwiGLU, QK-norm, reordered norms, RoPE, MHA as the 7B, the 3:1
# sliding/full pattern with OLMo 3's 4,096-token window, which at 1,024-byte windows spans every layer's
# whole context) at d_model 768, 8 layers of 12 heads x 64, SwiGLU 2,048 (OLMo-core's 8/3 rule), bf16
# compute over fp32 params and moments; 56.6M non-embedding parameters; lr 1e-3 (d 768 at 8k tokens a
# step), 10% warmup. The stream keeps the CPU table's rows (1,600), so the two tables differ only in the
# model and the window length.
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

# What the previous chip table measured at the tpu shape (bench/results/mem_tpu.json as committed in
# 1112a2d: a 64-window dosed source, every run in its own order, one reference run per seed; its probe on a
# fresh machine in bench/results/mem_tpu/probe.log). The design and the plan below are computed from these.
MEASURED_TPU = {
    # effect.4.per_serving_nats: the CE a window loses per extra serving (4x: +0.0606 nats over 3 servings;
    # 2x measured +0.0249 for its one, 8x +0.0202 a serving)
    "per_serving_nats": 0.02021,
    # sd_net_of_reference over its 10 clean runs, whose reference trained on their stream in their order
    # (the order every run keeps here); its 2x runs, reshuffled, had 0.051-0.054
    "sd_net_same_order": 0.0349,
    # check 9's Mann-Whitney z at 4x less the same seed's clean run's (64 over-served vs 128 as planned):
    # 3.609 - 2.499, 2.022 + 0.752, 1.226 + 1.044
    "diff_z_at_4x": (1.110, 2.774, 2.270),
    # how a window's effect falls with the source's size where it was measured, on the tiny model at 2x
    # (three seeds each): 0.0157 nats with 64 windows (bench/results/mem.json), 0.0099 with 256
    # (bench/results/mem_large_source.json), i.e. (64 / w)^0.33; the chip's model was measured at 64 only
    "fall_tiny": math.log(0.015737 / 0.009943) / math.log(256 / 64),
    # seconds: a reference run (200 steps x 8 rows, no scoring) 14.40-14.41 s; check 6's items at three
    # kept checkpoints 15.0 - 14.4 s for 3 x 128 windows; check 1 0.38 s for 192 windows; checks 7-10 1.32 s
    # for 192 windows under 3 models; check 4 0.57 s for 192; the first reference and checks on a fresh
    # machine 68.9 and 22.1 s against 14.4 and 3.4 warm (compiles: 54.5 + 18.7 s)
    "train_s_per_row": 14.4 / 1600,
    "item_s_per_window": 0.6 / 384,
    "score_s_per_window": 0.38 / 192,
    "stats_s_per_window": 1.32 / 576,
    "extract_s_per_window": 0.57 / 192,
    "host_s": 0.3,
    "compile_s": 73.0,
}
RANK = Rule("rank", 3.0, 0.6)  # checks 7-10 at default Thresholds (membership_z, membership_auroc)
INTERVAL = Rule("mean", 1.96, 0.0)  # check 6: the lower end of a 95% interval above contam_gain_nats (0)


def design(st: Setting, doses: list[int], clean_runs: int = 10, fall: float = 0.0) -> dict:
    """The power each verdict should have at this setting (olmax/evals/power.py's arithmetic on
    MEASURED_TPU; meaningful for the tpu shape, whose effect that is):
      with a reference   check 10, the rank rule, a shift of per_serving x (d - 1) over a spread of
                         sd_net_same_order (every run keeps the reference's order), at the dose's over-served
                         windows and `ratio` as many as planned
      without one        check 6 (the mean of the CE each item lost between the earliest kept and the last
                         checkpoint, over-served vs as planned, at a 95% interval): check 9's z at 4x measured
                         that same per-window loss as an AUROC, which gives its standardised shift
                         d = sqrt(2) Phi^-1(0.5 + z se0(64, 128)); linear in the servings, d (d_dose - 1) / 3;
                         check 9 itself with the rank rule on the same shift; the verdict's power is at least
                         the larger of the two (they read the same loss, so no more is claimed)
      clean              each check's one-sided false-alarm rate at the clean runs' sample: check 6 2.5%, the
                         rank checks 1 - Phi(max(3, 0.1 / se0)); the any-check verdict's at most their sum, and
                         the chance that no clean run of `clean_runs` is flagged
    Checks 1, 4, 5 and 7 are left out of the powers (1 cannot see a gain under 0.1 nats, 4 and 5 flagged no
    dosed run in either table, 7 has no power model): the verdicts' powers are lower bounds. `fall`: a window
    of a w-window source gains (64 / w)^fall of what a 64-window source's did (0: as measured; the tiny
    model's `fall_tiny`, the case the record's effect table tells apart)."""
    from statistics import NormalDist

    m = MEASURED_TPU
    phi = NormalDist()

    def se0(n1, n2):
        return math.sqrt((n1 + n2 + 1) / (12.0 * n1 * n2))

    d_4x = math.sqrt(2.0) * phi.inv_cdf(0.5 + float(np.mean(m["diff_z_at_4x"])) * se0(64, 128))
    per_serving_d = d_4x / 3
    out: dict = {
        "per_serving_nats": m["per_serving_nats"],
        "diff_d_per_serving": per_serving_d,
        "fall": fall,
    }
    for d in doses:
        w = st.dosed_windows(d)
        n2 = st.ratio * w
        keep = (64 / w) ** fall  # what a window keeps of the 64-window source's effect
        ref = power(m["per_serving_nats"] * keep * (d - 1), m["sd_net_same_order"], w, n2, RANK)
        six = power(per_serving_d * keep * (d - 1), 1.0, w, n2, INTERVAL)
        nine = power(per_serving_d * keep * (d - 1), 1.0, w, n2, RANK)
        noref = max(six, nine)
        out[f"{d}x"] = {
            "windows": w,
            "as_planned": n2,
            "contaminated": six,
            "checkpoint_diff": nine,
            "reference_ratio": ref,
            "noref": noref,
            "ref": max(noref, ref),
        }
    w = st.dosed_windows(0)
    rank_alpha = 1.0 - phi.cdf(max(RANK.z, (RANK.floor - 0.5) / se0(w, st.ratio * w)))
    noref = INTERVAL.alpha + 3 * rank_alpha  # check 6; checks 7-9 (check 1: under its 0.1 nats floor)
    out["clean"] = {
        "windows": w,
        "alpha_contaminated": INTERVAL.alpha,
        "alpha_rank": rank_alpha,
        "alpha_noref": noref,
        "alpha_ref": noref + rank_alpha,
        "none_flagged_noref": (1 - noref) ** clean_runs,
        "none_flagged_ref": (1 - noref - rank_alpha) ** clean_runs,
    }
    return out


def format_design(dz: dict, doses: list[int], clean_runs: int) -> str:
    c = dz["clean"]
    fall = (
        f"if a window of a w-window source gains (64 / w)^{dz['fall']:.2f} of the 64-window source's"
        if dz["fall"]
        else "if a window's effect holds at every source size"
    )
    lines = [
        f"design (olmax/evals/power.py on the previous chip table: {dz['per_serving_nats']:.4f} nats a serving, "
        f"check 9's loss {dz['diff_d_per_serving']:.3f} sd a serving), {fall}: power of each verdict, at least"
    ]
    for d in doses:
        e = dz[f"{d}x"]
        lines.append(
            f"  {d}x ({e['windows']} over-served vs {e['as_planned']} as planned): without a reference "
            f"{e['noref']:.0%} (check 6 {e['contaminated']:.0%}, check 9 {e['checkpoint_diff']:.0%}), with one "
            f"{e['ref']:.0%} (check 10 {e['reference_ratio']:.0%})"
        )
    lines.append(
        f"  clean ({c['windows']} windows labelled over-served): alpha a run {c['alpha_noref']:.1%} without a "
        f"reference, {c['alpha_ref']:.1%} with one (check 6 {c['alpha_contaminated']:.1%}, each rank check "
        f"{c['alpha_rank']:.2%}); no clean run of {clean_runs} flagged: {c['none_flagged_noref']:.0%} / "
        f"{c['none_flagged_ref']:.0%}"
    )
    return "\n".join(lines)


def chip_scale(st: Setting) -> float:
    """A row's FLOPs at this setting over the tpu shape's, which MEASURED_TPU's seconds were measured at."""
    from olmax.model.flops import flops_per_token

    here = flops_per_token(st.model_config(), st.seq_len) * st.seq_len
    chip = Setting(**SHAPES["tpu"])
    return here / (flops_per_token(chip.model_config(), chip.seq_len) * chip.seq_len)


def run_seconds(st: Setting, dose: int, effect: bool) -> dict:
    """A run's planned seconds on the chip (MEASURED_TPU's rates, scaled by `chip_scale`): its training with
    check 6's items, and its checks."""
    m = MEASURED_TPU
    scale = chip_scale(st)
    w = st.dosed_windows(dose)
    compared = w * (1 + st.ratio)
    train = (
        st.steps * st.batch * m["train_s_per_row"] + len(st.item_steps()) * compared * m["item_s_per_window"]
    )
    checks = (
        compared * m["score_s_per_window"]  # check 1
        + 3 * compared * m["stats_s_per_window"]  # checks 7-10: the model, the reference, the earlier
        + 2 * min(st.extract, w) * m["extract_s_per_window"]  # check 4
        + 2 * st.unseen * m["score_s_per_window"]  # check 5 and the run-level check's held-out
        + (2 * max(st.replayed, st.replayed_2x) * m["score_s_per_window"] if effect else 0.0)  # window_effect
    )
    return {"train_s": train * scale, "check_s": checks * scale + m["host_s"]}


def plan(st: Setting, todo: list[tuple[int, list[int]]], effect_seeds: set[int], reference: bool) -> dict:
    """Planned seconds on one v5e chip for the runs `todo` (per seed, its doses; 0 the clean run), the
    reference run first when `reference` (MEASURED_TPU's rates)."""
    m = MEASURED_TPU
    runs = [run_seconds(st, d, s in effect_seeds) for s, ds in todo for d in ds]
    # the reference trains without check 6's items, then scores every compared and never-served window
    rows = st.steps * st.batch * m["train_s_per_row"]
    ref = (rows + (st.compared + st.unseen) * m["score_s_per_window"]) * chip_scale(st)
    total = m["compile_s"] + (ref if reference else 0.0) + sum(r["train_s"] + r["check_s"] for r in runs)
    return {
        "runs": len(runs),
        "reference_s": ref if reference else 0.0,
        "train_s": sum(r["train_s"] for r in runs),
        "check_s": sum(r["check_s"] for r in runs),
        "compile_s": m["compile_s"],
        "total_s": total,
        "first_s": m["compile_s"] + (ref if reference else 0.0),
        "per_run": runs,
    }


def format_plan(p: dict) -> str:
    return (
        f"plan on one v5e chip (the previous chip table's rates): compile {p['compile_s']:.0f} s + the reference "
        f"{p['reference_s']:.0f} s + {p['runs']} runs (training {p['train_s']:.0f} s, checks {p['check_s']:.0f} s) "
        f"= {p['total_s']:.0f} s"
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
    """The reference run, the clean runs (each seed of `clean_seeds` and `seeds`) and every (seed, dose) run;
    returns {"setting", "runs", "table", ...}.

    `done`: runs of an earlier call (a record's, `read_runs`), kept and not run again (the reference is
    trained again). `budget_s`: before each run, the seconds it is expected to take (the plan's for it, times
    the last run's measured over planned seconds; before the first, with the compile and the reference) are
    added to the seconds spent; past the budget the call stops there and says so (`stopped`), its runs so far
    returned. `on_run(result)` after every run, with the result so
    far (the record is written there, so a call killed midway keeps what it finished). `stamp` is added to
    every new run (device, commit, date, shape)."""
    t0 = clock()
    clean_seeds = sorted(set(clean_seeds or []) | set(seeds))
    runs = list(done or [])
    todo = schedule(seeds, doses, clean_seeds, [(r["seed"], r["dose"]) for r in runs])
    widths = sorted({st.dosed_windows(d) for d in doses})
    expect = plan(st, todo, set(seeds), bool(todo))
    for fall in (0.0, MEASURED_TPU["fall_tiny"]):
        log(format_design(design(st, doses, len(clean_seeds), fall), doses, len(clean_seeds)))
    log(format_plan(expect))
    if budget_s is not None and expect["total_s"] > budget_s:
        log(f"the plan is over the {budget_s:.0f} s budget: the call stops before the run that would pass it")
    # what the next run is expected to take: the plan's seconds for it, times the last run's measured over
    # planned seconds (1 before the first), plus the compile and the reference before the first run
    guess = {"first": expect["first_s"], "train": 1.0, "checks": 1.0}
    state = {"stopped": None}

    def fits(what: str, seed: int, dose: int) -> bool:
        p = run_seconds(st, dose, seed in seeds)
        need = guess["first"] + p["train_s"] * guess["train"] + p["check_s"] * guess["checks"]
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
            "effect": effect_table(runs, doses, st),
            "design": design(st, doses, len(clean_seeds)),
            "design_if_it_falls": design(st, doses, len(clean_seeds), MEASURED_TPU["fall_tiny"]),
            "seconds": clock() - t0,
            "plan": {k: v for k, v in expect.items() if k != "per_run"},
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
            f"[{clock() - t0:6.0f}s] seed {r['seed']} dose {r['dose']:>2}x ({r['windows']} windows): final loss "
            f"{r['final_loss']:.3f}, train {r['train_s']:.1f} s, checks {r['check_s']:.1f} s, flagged: {flags}"
        )

    ref = None
    for seed, wanted in todo:
        for dose in wanted:
            if not fits(f"seed {seed} dose {dose}x" + ("" if ref else " and the reference run"), seed, dose):
                break
            if ref is None:  # built (and the step compiled) only once a run is sure to follow
                trainer = trainer_for(st)
                lay = layout(text_windows(st.seq_len, pool_size(st)), st)
                t = clock()
                ref = train_reference(trainer, lay, st)
                log(f"[{clock() - t0:6.0f}s] the reference run: {clock() - t:.1f} s")
            r = one_run(trainer, lay, st, seed, dose, ref, clock, widths if seed in seeds else None)
            if stamp:
                r["stamp"] = stamp
            p = run_seconds(st, dose, seed in seeds)
            guess.update(first=0.0, train=r["train_s"] / p["train_s"], checks=r["check_s"] / p["check_s"])
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
    dose's over-served windows, paired CE effect and its share per extra serving (`effect`); the power the
    design gave each verdict and the clean runs' false-alarm rate (`design`); the device."""
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
        else {
            k: result["effect"][str(d)][k] for k in ("windows", "gain_nats", "per_serving_nats", "per_seed")
        }
        for d in result["doses"]
    }
    dz = result.get("design")
    if dz:  # the powers the design gave each verdict (lower bounds), beside the counts above
        out["design"] = {
            **{f"{d}x_{k}": dz[f"{d}x"][k] for d in result["doses"] for k in ("noref", "ref")},
            "clean_alpha_noref": dz["clean"]["alpha_noref"],
            "clean_alpha_ref": dz["clean"]["alpha_ref"],
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
    "compared": 40,
    "twice": 4,
    "unseen": 8,
    "replayed": 8,
    "replayed_2x": 6,
    "control": 6,
    "extract": 8,
}


def stored_run(r: dict) -> dict:
    """A run as the record keeps it: all `--resume` needs to put it back in the table."""
    keep = ("seed", "dose", "windows", "final_loss", "effect", "seconds", "train_s", "check_s", "stamp")
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
    if "design" in result:
        rec.note("design", result["design"])
        rec.note("design_if_it_falls", result["design_if_it_falls"])
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
    """The probe's answer: what one serving does to a window's CE, and the seconds its runs took against the
    plan's for them."""
    lines = ["\nprobe:"]
    for d in result["doses"]:
        e = result["effect"].get(str(d))
        if e is not None:
            lines.append(
                f"  {d}x ({e['windows']} windows): the over-served windows' CE gain less the clean run's "
                f"{e['gain_nats']:+.4f} nats, {e['per_serving_nats']:+.4f} nats per extra serving"
            )
    lines.append(
        "  seconds: "
        + ", ".join(
            f"{r['dose']}x train {r['train_s']:.1f} + checks {r['check_s']:.1f}" for r in result["runs"]
        )
        + f"; the whole call {result['seconds']:.0f} s against the plan's {result['plan']['total_s']:.0f} s"
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
        help="seed 0 only: the reference, its clean and 4x runs; prints one serving's CE effect and the seconds",
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
    if (problem := st.problem(doses)) is not None:
        p.error(problem)
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

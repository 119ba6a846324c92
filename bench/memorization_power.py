"""Calibrated memorization checks: how often each check flags a tiny model trained with one source replayed
at 1x ... 32x (detection rate per dose), and how often it flags clean runs (false-positive rate).

Setting (all in-process; one compiled train step serves every run, so only the first run compiles):
  text        real text, byte-level: the standard library's *.py files cut into 64-byte windows (token =
              byte, < 256, within tiny's vocabulary of 1,000); exact duplicate windows dropped; each seed
              shuffles the pool and draws its own disjoint splits from it
  replayed    `--replayed` windows (default 32): in a dosed run each is served `dose` times, at random
              steps; they are the "contaminated items" of check 6
  stream      `--steps` x `--batch` rows (default 640 x 4 = 2,560 windows of 64 tokens); every row not
              taken by the replayed source is a fresh window served once, so dose 32 is 1,024 / 2,560 =
              40% of the stream and dose 1 is 1.25%
  clean       the control: dose 0, the replayed source left out (its rows are fresh windows). The checks get
              the same labels as a dosed run (the replayed windows as "served 32x", as check 6's
              contaminated items), so a flag there is a false positive
  model       olmax `tiny` (4 layers, d 64), AdamW peak lr 3e-3, 10 warmup steps, cosine decay to 10%;
              checkpoints at 1/4, 2/4, 3/4 and 4/4 of the steps (check 6 compares the first and the last)
Checks (olmax/evals/model_checks.py, default Thresholds): 1 exposure (repeated vs once-served windows),
4 extract (32-byte greedy continuation of a 32-byte prefix, exact match), 5 train_vs_unseen (train loss of
the last 20 steps vs never-served windows), 6 contaminated (replayed windows vs `--clean-items` never-served
windows: CE gain since the first checkpoint, bootstrap 95% interval above 0). Checks 1 and 4 need items
served >= 2 times, so at dose 1 they are skipped (counted as not flagged).

    .venv/bin/python bench/memorization_power.py [--seeds 0-2] [--doses 1,2,4,8,16,32] [--out POWER.json]

Printed: per check, the flag rate of the clean runs and of each dose, and the smallest dose from which the
check flags in >= 80% of the seeds at that dose and every larger one. Deterministic for fixed arguments.
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

CHECKS = ("exposure", "extract", "train_vs_unseen", "contaminated")
DETECT_RATE = 0.8  # "detects at dose d": flags in >= 80% of the seeds at d and at every larger dose


@dataclass(frozen=True)
class Setting:
    """One benchmark configuration (the defaults are the README's table)."""

    seq_len: int = 64  # bytes per window = tokens per training row (check 4 needs 32 + 32)
    batch: int = 4  # small: each served window weighs 1/4 of an update (memorizes more per serving)
    steps: int = 640  # 640 x 4 = 2,560 rows of 64 tokens = 164k tokens per run
    lr: float = 3e-3
    warmup: int = 10
    replayed: int = 32  # windows of the replayed source
    clean_items: int = 64  # never-served windows: check 6's clean items
    per_stratum: int = 48  # windows per exposure stratum for checks 1, 4 and 5
    checkpoints: int = 4  # evenly spaced; the last at `steps`
    resamples: int = 1000  # bootstrap draws of check 6
    control_label: int = 32  # the servings the clean runs' labels claim for the (unserved) replayed windows

    def checkpoint_steps(self) -> list[int]:
        return [self.steps * (k + 1) // self.checkpoints for k in range(self.checkpoints)]


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


@dataclass(frozen=True)
class Split:
    """One seed's disjoint draws from the pool."""

    replayed: np.ndarray  # (R, L)
    clean: np.ndarray  # (C, L) never served: check 6's clean items
    unseen: np.ndarray  # (P, L) never served: the count-0 stratum of checks 1, 4 and 5
    fresh: np.ndarray  # (steps x batch, L) served once each, in order


def split(pool: np.ndarray, st: Setting, seed: int) -> Split:
    rows = np.random.default_rng(seed).permutation(pool.shape[0])
    cuts = np.cumsum([st.replayed, st.clean_items, st.per_stratum])
    r, c, u, f = np.split(rows, cuts)
    return Split(pool[r], pool[c], pool[u], pool[f[: st.steps * st.batch]])


def stream(sp: Split, st: Setting, dose: int, seed: int) -> np.ndarray:
    """(steps x batch, L): the replayed windows `dose` times each, the rest fresh windows, shuffled."""
    n = st.steps * st.batch
    replays = np.repeat(sp.replayed, dose, axis=0)
    rows = np.concatenate([replays, sp.fresh[: n - replays.shape[0]]])
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
        self.opt = optax.adamw(sched, weight_decay=0.1)

        def loss(params, ids_BxL):
            logits_BxLxV = nnx.merge(self.graphdef, params)(ids_BxL[:, :-1])
            return optax.softmax_cross_entropy_with_integer_labels(logits_BxLxV, ids_BxL[:, 1:]).mean()

        def step(params, opt_state, ids_BxL):
            val, grads = jax.value_and_grad(loss)(params, ids_BxL)
            updates, opt_state = self.opt.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, val

        self.step = jax.jit(step, donate_argnums=(0, 1))

    def run(self, rows: np.ndarray, seed: int, on_checkpoint) -> np.ndarray:
        """Train on `rows` from a seed's init; `on_checkpoint(step, model)` at each checkpoint; train losses."""
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
            if s in marks:
                on_checkpoint(s, nnx.merge(self.graphdef, params))
        return np.asarray([float(v) for v in losses])


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


def run_checks(
    model,
    sp: Split,
    st: Setting,
    dose: int,
    losses: np.ndarray,
    item_ce: list[np.ndarray],
    fresh_served: np.ndarray,
) -> dict[str, dict]:
    """Checks 1, 4, 5 on the final model and check 6 on the per-checkpoint item scores."""
    from olmax.evals.curves import Curves
    from olmax.evals.exposure import Exposure
    from olmax.evals.gains import SetScores, gains_report
    from olmax.evals.model_checks import check_exposure, check_extraction, check_train_vs_unseen
    from olmax.evals.verdicts import Thresholds

    th = Thresholds()
    label = dose if dose else st.control_label
    tokens = np.concatenate([sp.replayed, fresh_served, sp.unseen])
    counts = np.concatenate(
        [np.full(len(sp.replayed), label), np.ones(len(fresh_served)), np.zeros(len(sp.unseen))]
    )
    exp = Exposure(
        np.arange(len(tokens)),
        counts.astype(np.int64),
        np.asarray(["text"] * len(tokens)),
        tokens,
        st.seq_len,
        None,
        st.steps,
        "bench",
    )
    curves = Curves("bench", np.arange(1, st.steps + 1), losses)
    n = len(sp.replayed) + len(sp.clean)
    contaminated = np.arange(n) < len(sp.replayed)
    scores = SetScores(
        "replayed",
        tuple(map(str, range(n))),
        contaminated,
        np.asarray(st.checkpoint_steps()),
        {"ce": np.stack(item_ce)},
    )
    return {
        "exposure": check_exposure(
            model, exp, th, per_stratum=st.per_stratum, probe_len=st.seq_len, batch_size=16
        ),
        "extract": check_extraction(model, exp, th, per_stratum=st.per_stratum, batch_size=16),
        "train_vs_unseen": check_train_vs_unseen(
            model, curves, exp, th, per_stratum=st.per_stratum, batch_size=16
        ),
        "contaminated": gains_report([scores], resamples=st.resamples, thresholds=th)["verdict"],
    }


def one_run(trainer: Trainer, pool: np.ndarray, st: Setting, seed: int, dose: int) -> dict:
    """Train one run and return each check's verdict (flagged, status, message)."""
    sp = split(pool, st, seed)
    rows = stream(sp, st, dose, seed)
    items = np.concatenate([sp.replayed, sp.clean])
    item_ce, last = [], {}

    def on_checkpoint(step, model):
        item_ce.append(window_ce(model, items))
        last["model"] = model

    losses = trainer.run(rows, seed, on_checkpoint)
    served_once = sp.fresh[: st.steps * st.batch - dose * len(sp.replayed)][: st.per_stratum]
    checks = run_checks(last["model"], sp, st, dose, losses, item_ce, served_once)
    return {
        "seed": seed,
        "dose": dose,
        "final_loss": float(losses[-20:].mean()),
        "checks": {
            k: {"flagged": bool(v["flagged"]), "status": v["status"], "message": v["message"]}
            for k, v in checks.items()
        },
    }


# ------------------------------------------------------------------------------------------ table
def power_table(runs: list[dict], doses: list[int]) -> dict:
    """Per check: flag rate of the clean runs (dose 0), per dose, and the smallest dose it detects."""
    out = {}
    for check in CHECKS:
        row = {}
        for d in [0, *doses]:
            at = [r["checks"][check] for r in runs if r["dose"] == d]
            row[str(d)] = {
                "flagged": sum(c["flagged"] for c in at),
                "runs": len(at),
                "skipped": sum(c["status"] == "skipped" for c in at),
            }
        rate = {d: row[str(d)]["flagged"] / max(row[str(d)]["runs"], 1) for d in doses}
        smallest = next(
            (d for i, d in enumerate(doses) if all(rate[e] >= DETECT_RATE for e in doses[i:])), None
        )
        out[check] = {
            "by_dose": row,
            "false_positive_rate": row["0"]["flagged"] / max(row["0"]["runs"], 1),
            "smallest_detected_dose": smallest,
        }
    return out


def format_table(table: dict, doses: list[int]) -> str:
    def cell(c: dict) -> str:
        return "skip" if c["runs"] and c["skipped"] == c["runs"] else f"{c['flagged']}/{c['runs']}"

    head = ["check", "clean (FP)", *[f"{d}x" for d in doses], "detects from"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for check, t in table.items():
        smallest = t["smallest_detected_dose"]
        lines.append(
            f"| {check} | {cell(t['by_dose']['0'])} | "
            + " | ".join(cell(t["by_dose"][str(d)]) for d in doses)
            + f" | {f'{smallest}x' if smallest else f'not at {doses[-1]}x'} |"
        )
    return "\n".join(lines)


def run_power(st: Setting, seeds: list[int], doses: list[int], log=print) -> dict:
    """Every (seed, dose) run plus the clean runs; returns {"setting", "runs", "table"}."""
    t0 = time.monotonic()
    pool = text_windows(st.seq_len, st.replayed + st.clean_items + st.per_stratum + st.steps * st.batch)
    trainer = Trainer(st)
    runs = []
    for seed in seeds:
        for dose in [0, *doses]:
            runs.append(one_run(trainer, pool, st, seed, dose))
            flags = ", ".join(k for k, v in runs[-1]["checks"].items() if v["flagged"]) or "none"
            log(
                f"[{time.monotonic() - t0:6.0f}s] seed {seed} dose {dose:>2}x: final loss "
                f"{runs[-1]['final_loss']:.3f}, flagged: {flags}"
            )
    return {
        "setting": dataclasses.asdict(st),
        "seeds": seeds,
        "doses": doses,
        "runs": runs,
        "table": power_table(runs, doses),
        "seconds": time.monotonic() - t0,
    }


def parse_seeds(text: str) -> list[int]:
    """`0-2` -> [0, 1, 2]; `0,3` -> [0, 3]."""
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="0-2", help="seeds, e.g. 0-2 or 0,5 (>= 3 for the README table)")
    p.add_argument("--doses", default="1,2,4,8,16,32", help="servings of each replayed window")
    for f in dataclasses.fields(Setting):
        p.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default)
    p.add_argument("--out", default=None, help="also write the runs and the table as JSON")
    args = p.parse_args(argv)
    st = Setting(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Setting)})
    doses = sorted(int(d) for d in args.doses.split(","))
    if doses[-1] * st.replayed > st.steps * st.batch:
        p.error(
            f"dose {doses[-1]} x {st.replayed} replayed windows exceeds the {st.steps * st.batch}-row stream"
        )
    result = run_power(st, parse_seeds(args.seeds), doses)
    print(f"\nsetting: {json.dumps(result['setting'])}; seeds {result['seeds']}; {result['seconds']:.0f} s")
    print(
        f"detection rate (runs flagged / runs) per replay dose; 'clean' = dose 0, the false-positive rate; "
        f"'detects from' = smallest dose flagged in >= {DETECT_RATE:.0%} of seeds there and above"
    )
    print(format_table(result["table"], doses))
    if args.out:
        from olmax.jsonio import write_json

        write_json(args.out, result)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

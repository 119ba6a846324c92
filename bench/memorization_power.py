"""Calibrated memorization checks: how often each check flags a tiny model trained with a small source
replayed 2x ... 16x, or with a whole shard listed twice (detection rate per dose, and the AUROC of each
check's statistic between dosed and clean runs), and how often it flags clean runs (false-positive rate).

Setting (all in-process; one compiled train step serves every run, so only the first run compiles):
  text        real text, byte-level: the standard library's *.py files cut into 256-byte windows (token =
              byte, < 256, within tiny's vocabulary of 1,000); exact duplicate windows dropped; each seed
              shuffles the pool and draws its own disjoint splits from it
  stream      the tiny recipe's shape: `--steps` x `--batch` rows (default 200 x 8 = 1,600 windows of 256
              tokens); every row not taken by the replayed text is a fresh window served once
  source      kind 1: a small source of `--replayed` windows (default 64: 16k tokens, 4% of the stream at
              1x), each served `dose` times at random steps (dose 16 is 1,024 / 1,600 = 64% of the stream,
              dose 2 is 8%); they are also the "contaminated items" of check 6
  shard       kind 2: a shard listed twice: `--shard` windows (default 100, 6% of the fresh text) each
              served twice (12.5% of the stream)
  clean       the control: dose 0, nothing replayed (every row a fresh window). The checks get the labels
              of a dosed run (the source's and the shard's windows as served 16x and 2x, as check 6's
              contaminated items), so a flag there is a false positive; `--clean-seeds` (>= 10) of them
  reference   per seed, a clean run from another initialisation (seed + 1000): check 9's reference model,
              a healthy run of the same recipe as a user would compare against (`--reference RUN`)
  model       olmax `tiny` (4 layers, d 64), AdamW peak lr 3e-3, 10 warmup steps, cosine decay to 10%,
              gradient clipping at 1.0 (the tiny recipe's optimiser); checkpoints at 1/4 ... 4/4 of the steps
Checks (olmax/evals/model_checks.py and membership.py, default Thresholds): 1 exposure, 4 extract (32-byte
greedy continuation of a 32-byte prefix), 5 train_vs_unseen, 6 contaminated (replayed windows vs
`--clean-items` never-served windows: CE gain since the first checkpoint, bootstrap 95% interval above 0),
7 min_k_pp, 8 zlib, 9 reference_ratio (repeated vs never-served windows: Mann-Whitney z of the AUROC).

    .venv/bin/python bench/memorization_power.py [--seeds 0-2] [--clean-seeds 0-9] [--doses 2,4,8,16]
                                                 [--out POWER.json]

Printed: per check and kind, the runs flagged per dose and among the clean runs, the smallest dose from
which the check flags in >= 80% of the seeds at that dose and every larger one, the AUROC of the check's
statistic (dosed runs vs clean runs: 0.5 is no power, 1.0 separates them perfectly) and the seconds each
check took. Deterministic for fixed arguments.
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
    "reference_ratio",
)
DETECT_RATE = 0.8  # "detects at dose d": flags in >= 80% of the seeds at d and at every larger dose
KINDS = ("source", "shard")


@dataclass(frozen=True)
class Setting:
    """One benchmark configuration (the defaults are the docs' table: the tiny recipe's shape)."""

    seq_len: int = 256  # bytes per window = tokens per training row (check 4 needs 32 + 32)
    batch: int = 8
    steps: int = 200  # 200 x 8 = 1,600 rows of 256 tokens = 410k tokens per run
    lr: float = 3e-3
    warmup: int = 10
    replayed: int = 64  # windows of the replayed small source (16k tokens, 4% of the stream at 1x)
    shard: int = 100  # windows of the shard listed twice
    clean_items: int = 64  # never-served windows: check 6's clean items
    per_stratum: int = 128  # windows per exposure stratum for checks 1, 4, 5 and 7-9
    checkpoints: int = 4  # evenly spaced; the last at `steps`
    resamples: int = 1000  # bootstrap draws of check 6
    control_label: int = 16  # the servings the clean runs' labels claim for the source's (unserved) windows

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


def pool_size(st: Setting) -> int:
    return max(st.replayed, st.shard) + st.clean_items + st.per_stratum + st.steps * st.batch


@dataclass(frozen=True)
class Split:
    """One seed's disjoint draws from the pool."""

    replayable: (
        np.ndarray
    )  # (max(replayed, shard), L): the source is its first `replayed`, the shard its first `shard`
    clean: np.ndarray  # (C, L) never served: check 6's clean items
    unseen: np.ndarray  # (P, L) never served: the count-0 stratum of checks 1, 4, 5 and 7-9
    fresh: np.ndarray  # (steps x batch, L) served once each, in order


def split(pool: np.ndarray, st: Setting, seed: int) -> Split:
    rows = np.random.default_rng(seed).permutation(pool.shape[0])
    cuts = np.cumsum([max(st.replayed, st.shard), st.clean_items, st.per_stratum])
    r, c, u, f = np.split(rows, cuts)
    return Split(pool[r], pool[c], pool[u], pool[f[: st.steps * st.batch]])


def replayed_of(sp: Split, st: Setting, kind: str) -> np.ndarray:
    return sp.replayable[: st.replayed if kind == "source" else st.shard]


def stream(sp: Split, st: Setting, kind: str, dose: int, seed: int) -> np.ndarray:
    """(steps x batch, L): the kind's windows `dose` times each, the rest fresh windows, shuffled."""
    n = st.steps * st.batch
    replays = np.repeat(replayed_of(sp, st, kind), dose, axis=0)
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
                on_checkpoint(s, nnx.merge(self.graphdef, params))
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


def run_checks(
    model,
    reference,
    sp: Split,
    st: Setting,
    kind: str,
    dose: int,
    losses: np.ndarray,
    item_ce: list[np.ndarray],
) -> tuple[dict[str, dict], dict[str, float]]:
    """Every check on the final model (check 6 on the per-checkpoint item scores); (verdicts, seconds each)."""
    from olmax.evals.curves import Curves
    from olmax.evals.exposure_file import Exposure
    from olmax.evals.gains import SetScores, gains_report
    from olmax.evals.membership import check_membership
    from olmax.evals.model_checks import check_exposure, check_extraction, check_train_vs_unseen
    from olmax.evals.verdicts import Probe, Thresholds

    th = Thresholds()
    replayed = replayed_of(sp, st, kind)
    label = dose if dose else (st.control_label if kind == "source" else 2)
    n_rep = len(replayed)
    fresh_served = sp.fresh[: st.steps * st.batch - dose * n_rep][: st.per_stratum]
    tokens = np.concatenate([replayed, fresh_served, sp.unseen])
    counts = np.concatenate([np.full(n_rep, label), np.ones(len(fresh_served)), np.zeros(len(sp.unseen))])
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
    n = n_rep + len(sp.clean)
    rows = np.concatenate([np.arange(n_rep), len(sp.replayable) + np.arange(len(sp.clean))])
    scores = SetScores(
        "replayed",
        tuple(map(str, range(n))),
        np.arange(n) < n_rep,
        np.asarray(st.checkpoint_steps()),
        {"ce": np.stack(item_ce)[:, rows]},
    )
    out, seconds = {}, {}

    def timed(name, fn):
        t = time.perf_counter()
        out[name] = fn()
        seconds[name] = time.perf_counter() - t

    kw = {"per_stratum": st.per_stratum, "batch_size": 16}
    timed("exposure", lambda: check_exposure(model, exp, th, probe_len=st.seq_len, **kw))
    timed("extract", lambda: check_extraction(model, exp, th, **kw))
    timed("train_vs_unseen", lambda: check_train_vs_unseen(model, curves, exp, th, **kw))
    timed(
        "contaminated",
        lambda: gains_report([scores], resamples=st.resamples, thresholds=th)["verdict"],
    )
    t = time.perf_counter()
    membership = check_membership(
        model,
        exp,
        th,
        reference=reference,
        reference_name="clean run",
        probe=Probe(st.per_stratum, st.seq_len, kw["batch_size"]),
    )
    spent = (time.perf_counter() - t) / len(membership)
    for name, verdict in membership.items():
        out[name], seconds[name] = verdict, spent
    return out, seconds


def one_run(
    trainer: Trainer, pool: np.ndarray, st: Setting, seed: int, dose: int, kinds, reference
) -> list[dict]:
    """Train one run and return, per kind it is scored as, each check's verdict; a clean run (dose 0) is
    scored with every kind's labels, a dosed run with its own kind's (`kinds` holds one)."""
    sp = split(pool, st, seed)
    rows = stream(sp, st, kinds[0], dose, seed)
    items = np.concatenate([sp.replayable, sp.clean])
    item_ce = []
    losses, model = trainer.run(rows, seed, lambda step, m: item_ce.append(window_ce(m, items)))
    out = []
    for kind in kinds:
        checks, seconds = run_checks(model, reference, sp, st, kind, dose, losses, item_ce)
        out.append(
            {
                "seed": seed,
                "kind": kind,
                "dose": dose,
                "final_loss": float(losses[-20:].mean()),
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
        )
    return out


# ------------------------------------------------------------------------------------------ table
def power_table(runs: list[dict], doses: list[int]) -> dict:
    """Per check: flag rate of the clean runs (dose 0), per dose, the smallest dose it detects, and the AUROC of
    its statistic between the runs at each dose and the clean runs."""
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
    shard: bool = True,
    log=print,
) -> dict:
    """The clean runs (each seed of `clean_seeds` and `seeds`), every (seed, dose) run of a replayed source,
    and per seed a shard listed twice; returns {"setting", "runs", "tables": {kind: table}}."""
    t0 = time.monotonic()
    pool = text_windows(st.seq_len, pool_size(st))
    trainer = Trainer(st)
    kinds = KINDS if shard else KINDS[:1]
    runs = []
    clean_seeds = sorted(set(clean_seeds or []) | set(seeds))

    def say(rs):
        for r in rs:
            flags = ", ".join(k for k, v in r["checks"].items() if v["flagged"]) or "none"
            log(
                f"[{time.monotonic() - t0:6.0f}s] seed {r['seed']} {r['kind']} dose {r['dose']:>2}x: final "
                f"loss {r['final_loss']:.3f}, flagged: {flags}"
            )

    for seed in clean_seeds:
        sp = split(pool, st, seed)
        _, reference = trainer.run(stream(sp, st, "source", 0, seed), 1000 + seed)
        runs += one_run(trainer, pool, st, seed, 0, kinds, reference)
        say(runs[-len(kinds) :])
        if seed not in seeds:
            continue
        for dose in doses:
            runs += one_run(trainer, pool, st, seed, dose, ("source",), reference)
            say(runs[-1:])
        if shard:
            runs += one_run(trainer, pool, st, seed, 2, ("shard",), reference)
            say(runs[-1:])
    tables = {"source": power_table([r for r in runs if r["kind"] == "source"], doses)}
    if shard:
        tables["shard"] = power_table([r for r in runs if r["kind"] == "shard"], [2])
    return {
        "setting": dataclasses.asdict(st),
        "seeds": seeds,
        "clean_seeds": clean_seeds,
        "doses": doses,
        "runs": runs,
        "tables": tables,
        "table": tables["source"],
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
    p.add_argument("--seeds", default="0-2", help="seeds of the dosed runs, e.g. 0-2 or 0,5")
    p.add_argument("--clean-seeds", default="0-9", help="seeds of the clean runs (>= 10 for the docs' table)")
    p.add_argument("--doses", default="2,4,8,16", help="servings of each window of the replayed source")
    p.add_argument("--no-shard", action="store_true", help="leave out the shard-listed-twice runs")
    for f in dataclasses.fields(Setting):
        p.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default)
    p.add_argument("--out", default=None, help="also write the runs and the tables as JSON")
    args = p.parse_args(argv)
    st = Setting(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Setting)})
    doses = sorted(int(d) for d in args.doses.split(","))
    if doses[-1] * st.replayed > st.steps * st.batch or 2 * st.shard > st.steps * st.batch:
        p.error(f"the replayed rows exceed the {st.steps * st.batch}-row stream")
    result = run_power(st, parse_seeds(args.seeds), doses, parse_seeds(args.clean_seeds), not args.no_shard)
    print(
        f"\nsetting: {json.dumps(result['setting'])}; dosed seeds {result['seeds']}; clean seeds "
        f"{result['clean_seeds']}; {result['seconds']:.0f} s"
    )
    print(
        f"runs flagged / runs per dose (AUROC of the check's statistic, dosed vs clean runs); 'clean' = the "
        f"false-positive rate; 'detects from' = smallest dose flagged in >= {DETECT_RATE:.0%} of seeds there "
        f"and above; s/run = seconds the check took per run"
    )
    print(f"\nkind: a small source of {st.replayed} windows replayed")
    print(format_table(result["tables"]["source"], doses))
    if "shard" in result["tables"]:
        print(f"\nkind: a shard of {st.shard} windows listed twice")
        print(format_table(result["tables"]["shard"], [2]))
    if args.out:
        from olmax.jsonio import write_json

        write_json(args.out, result)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

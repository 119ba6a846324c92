"""Loss curves trained on one TPU v5e chip: the head-split co-design ablation (the baseline's heads against
heads twice as wide and half as many, over two seeds of the baseline) and the shipped bf16 step against an
fp32 CPU run of the same recipe, init and batches (docs/tpu.md, "Co-design").

The ablation. OLMo 3's block (configs/olmo3_7b_stage1.yaml: reordered norms, QK-norm, SwiGLU, RoPE 500k,
three sliding-window layers and one full, z-loss, skip-step AdamW, bf16 compute over fp32 params and
moments, attention `auto` = splash on the chip, remat `none`, the first of `auto`'s ladder, which fits)
at d_model 1024, 4 layers, SwiGLU 2,816, sequence 2,048 with a 1,024-token window (the 7B's 8,192 and
4,096 over 4), 16 rows a step, the dolma2 vocabulary cut to 16,384 tokens (bench/chip/tpu_train_corpus.py).
The heads: 8 x 128 (the 7B's head width) against 4 x 256, the split the 7B's 32 x 128 against 16 x 256 is
(the same parameters and FLOPs: q, k, v, o are d x d either way, and attention's FLOPs are heads x width).
Three runs on the same rows in the same order, one pass over 20,054,016 tokens of real text each (612
steps): 8 x 128 from seed 0, 4 x 256 from seed 0, 8 x 128 from seed 1 (the seed-to-seed band). Schedule:
lr 1e-3, 60 warmup steps, cosine to 0.1 x at step 612. Each is olmax's own train step
(`olmax.train.step.run_train_step`, as `olmax train` builds it) and its init (`make_init`). Held-out CE
over 64 rows (131,072 tokens) every 68 steps.

Why this size. The 4096-wide block (four layers: 32 x 128 or 16 x 256 at the 7B's own width) trains 8,192
tokens in 0.38 s on the chip (bench/results/tpu_mfu.json): 20 M tokens would take ~15 minutes a run, and one
device call has 10 for all three. At d 1024 a step is 14.7 TFLOP, ~0.18 s at the ~40% of peak a
1024-wide model ran at (bench/results/tpu_seed.json: 46.6% with its 100k-token head), ~110 s a run.

The bf16 run. The recipe, OLMo-core's initial params, the batches and the CPU runs' per-step metrics
(OLMo-core's Trainer in fp32, olmax in fp32 and float64) come from `olmax.testing.train_parity` (its bundle,
written here into bench/out/tpu_train_curves/parity/ and carried); on the chip the same function
(`train_parity.run_olmax`) trains it again in bf16 (attention `auto`: splash) and, as a control, in fp32 at
matmul precision `highest`; each step's loss against each CPU run's is the band.

Timing: steps are dispatched back to back; every 34 steps the metrics are read back (blocking), and the
seconds since the previous read over the steps between is one timing. Left out of the figures: the first
(it holds the program's first run) and any that ran while another program still compiled in a background
thread (it could have held up the dispatching thread). The 4 x 256 run's median over the baseline's is the
step-time ratio.

Run:
    here:       python -m bench.chip.tpu_train_curves --prepare     # bench/out/tpu_train_curves/ (~16 MiB)
    here:       python -m bench.chip.tpu_train_curves --plan        # each program compiled for a v5e (libtpu)
    the device: python3 -m bench.chip.tpu_train_curves --part chip --out $OUT/curves.json
    here:       python -m bench.chip.tpu_train_curves --merge bench/results/tpu_train_curves/curves.json
`--merge` writes bench/results/tpu_train_curves.json and tpu_train_curves.png. `--smoke` runs prepare, the
chip part (on the CPU, tiny shapes, a few steps) and the merge, into bench/out/results/ (`--results`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import statistics
import sys
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.chip import tpu_train_corpus
from bench.harness import BENCH, ROOT, chip_facts, datasheet_peak
from olmax.train.plan import compiled_plan_bytes

RECIPE = ROOT / "configs" / "olmo3_7b_stage1.yaml"
DATA = BENCH / "out" / "tpu_train_curves"  # what --prepare writes and the device call carries
PARITY_DIR = "parity"  # DATA/parity: olmax.testing.train_parity's files
GIB = 2**30
CARRY_MIB = 56  # what a device call may carry beside the checkout's ~5 MiB (64 MiB in all)


@dataclasses.dataclass(frozen=True)
class Size:
    """One size of the benchmark: the model's width, the rows, the schedule and the corpus."""

    d_model: int
    layers: int
    mlp_hidden: int
    heads: dict  # run kind -> (n_heads, head_dim)
    seq: int
    rows: int  # rows a step
    steps: int
    heldout_rows: int
    vocab: int
    warmup: int
    chunk: int  # steps between metric reads (timings)
    eval_every: int

    @property
    def corpus_rows(self) -> tuple[int, int]:
        return self.rows * self.steps, self.heldout_rows


FULL = Size(
    d_model=1024,
    layers=4,  # one period of OLMo 3's layers: three sliding, one full
    mlp_hidden=2816,  # OLMo-core's rule: int(8 * 1024 / 3) rounded up to a multiple of 256
    heads={"hd128": (8, 128), "hd256": (4, 256)},
    seq=2048,
    rows=16,  # 32,768 tokens a step
    steps=612,  # 20,054,016 tokens a run
    heldout_rows=64,
    vocab=16_384,
    warmup=60,
    chunk=34,
    eval_every=68,
)
SMOKE = Size(
    d_model=256,
    layers=1,  # the script's path, not the pattern: one sliding layer compiles in a third of the time
    mlp_hidden=768,
    heads={"hd128": (2, 128), "hd256": (1, 256)},
    seq=128,
    rows=4,
    steps=12,
    heldout_rows=4,
    vocab=512,
    warmup=2,
    chunk=3,
    eval_every=6,
)
LR = 1e-3
# (run name, heads, init seed), in the order the chip runs them
RUNS = (("hd128_seed0", "hd128", 0), ("hd256_seed0", "hd256", 0), ("hd128_seed1", "hd128", 1))
PARITY_VARIANTS = {"bf16": ("bfloat16", None), "fp32": ("float32", "highest")}  # dtype, matmul precision


def say(msg: str) -> None:
    print(f"tpu_train_curves: {msg}", flush=True)


# ------------------------------------------------------------------------------------- the ablation model


def ablation_config(size: Size, heads: str, eos: int):
    """The stage-1 recipe at this size, with these heads, as an ExperimentConfig."""
    import yaml

    from olmax.train.config import from_dict

    raw = yaml.safe_load(RECIPE.read_text())
    n_heads, head_dim = size.heads[heads]
    model = {
        **raw["model"],
        "d_model": size.d_model,
        "n_layers": size.layers,
        "n_heads": n_heads,
        "n_kv_heads": n_heads,
        "head_dim": head_dim,
        "mlp_hidden": size.mlp_hidden,
        "vocab_size": size.vocab,
        "eos_token_id": eos,
        "pad_token_id": None,
        "sliding_window": size.seq // 2,
        "max_position_embeddings": size.seq,
        "remat": "none",
        "attention_impl": "auto",
    }
    optim = {**raw["optim"], "lr": LR, "warmup_steps": size.warmup, "t_max": size.steps}
    data = {**raw["data"], "seq_len": size.seq, "global_batch_size": size.rows}
    train = {**raw["train"], "steps": size.steps, "eval_every": 0}
    mesh = {"data": 1, "fsdp": 1, "per_device_batch": size.rows}
    return from_dict(
        {**raw, "model": model, "optim": optim, "data": data, "train": train, "mesh": mesh}, where=str(RECIPE)
    )


def one_device_mesh(devices: list):
    from olmax.train.config import MeshConfig
    from olmax.train.mesh import make_mesh

    return make_mesh(MeshConfig(data=1, fsdp=1), devices=devices[:1])


def compile_step(cfg, mesh, rows: int) -> dict[str, Any]:
    """The train step (`run_train_step`, as the trainer builds it) compiled for `mesh`: the callable, its
    buffer plan, its kernel calls (the splash kernel's, forward and backward, on a TPU) and seconds."""
    import jax
    import numpy as np

    from olmax.train.mesh import batch_sharding
    from olmax.train.step import abstract_state, run_train_step

    t0 = time.perf_counter()
    step = run_train_step(cfg, mesh, n_micro=1, per_device_batch=rows)
    abstract, _ = abstract_state(cfg.model, cfg.optim, mesh)
    ids = jax.ShapeDtypeStruct((rows, cfg.data.seq_len), np.int32, sharding=batch_sharding(mesh))
    compiled = step.lower(abstract, {"input_ids": ids}).compile()
    return {
        "step": step.with_compiled(compiled),
        "plan_bytes": compiled_plan_bytes(compiled),
        "kernel_calls": compiled.as_text().count("tpu_custom_call"),
        "compile_s": time.perf_counter() - t0,
    }


def compile_heldout(cfg, mesh, rows: int):
    """The held-out CE sum of `rows` rows (the step's own loss function, forward only), compiled."""
    import jax
    import numpy as np

    from olmax.train.mesh import batch_sharding
    from olmax.train.step import OnMesh, abstract_state, make_loss_fn

    abstract, _ = abstract_state(cfg.model, cfg.optim, mesh)
    ids = jax.ShapeDtypeStruct((rows, cfg.data.seq_len), np.int32, sharding=batch_sharding(mesh))
    loss_fn = make_loss_fn(cfg.model, cfg.optim, cfg.train.ce_chunk)
    heldout = OnMesh(jax.jit(lambda p, b: loss_fn(p, b)[1][0]), mesh)
    return heldout.with_compiled(heldout.lower(abstract["params"], {"input_ids": ids}).compile())


def compile_init(cfg, mesh, seed: int):
    """`make_init`'s program for `seed` (`init_state` into the train state's shardings), compiled."""
    import jax

    from olmax.train.step import abstract_state, init_state

    _, shardings = abstract_state(cfg.model, cfg.optim, mesh)
    return jax.jit(lambda: init_state(cfg.model, cfg.optim, seed), out_shardings=shardings).lower().compile()


def submit_compiles(pool, configs: dict, mesh, rows: int, runs) -> dict[tuple, Future]:
    """Every program the ablation runs, each compiling in its own thread, in the order they are needed:
    a run's step and init, then the next run's, the held-out CE programs (first needed at the first
    eval) last. Keys: ("step", heads), ("init", heads, seed), ("heldout", heads)."""
    jobs: dict[tuple, Any] = {}
    for _, heads, seed in runs:
        jobs.setdefault(("step", heads), (compile_step, configs[heads], mesh, rows))
        jobs.setdefault(("init", heads, seed), (compile_init, configs[heads], mesh, seed))
    for _, heads, _ in runs:
        jobs.setdefault(("heldout", heads), (compile_heldout, configs[heads], mesh, rows))
    return {key: pool.submit(*job) for key, job in jobs.items()}


def heldout_ce(program, params, rows, batch_rows: int, mesh) -> float:
    """Mean CE per predicted token over the held-out rows, `batch_rows` at a time."""
    import jax
    import numpy as np

    from olmax.train.mesh import global_batch

    total = 0.0
    for i in range(0, len(rows), batch_rows):
        ids = np.asarray(rows[i : i + batch_rows], np.int32)
        total += float(jax.device_get(program(params, {"input_ids": global_batch(ids, mesh, batch_rows)})))
    return total / (len(rows) * (rows.shape[1] - 1))


def train_run(spec: tuple[str, str, int], programs: dict, cfg, corpus, size: Size, mesh, save) -> dict:
    """One ablation run: a fresh state from its seed, one pass over the training rows, the metrics of every
    step, the seconds of every `chunk` steps and the held-out CE every `eval_every` steps. `programs` maps
    `submit_compiles`'s keys to their futures (and any other background job's key to its future)."""
    import jax
    import numpy as np

    from olmax.train.mesh import global_batch

    name, heads, seed = spec
    out: dict[str, Any] = {"name": name, "heads": heads, "seed": seed, "status": "running"}
    compiled = programs[("step", heads)].result()
    out.update({k: compiled[k] for k in ("plan_bytes", "kernel_calls", "compile_s")})
    out.update(n_heads=cfg.model.n_heads, head_dim=cfg.model.head_dim, steps_done=0, chunks=[], evals=[])
    for k in ("loss", "z_loss", "grad_norm", "lr", "skipped"):
        out[k] = []
    step = compiled["step"]
    say(f"{name}: step compiled in {out['compile_s']:.0f} s, plan {(out['plan_bytes'] or 0) / GIB:.2f} GiB")
    t0 = time.perf_counter()
    state = programs[("init", heads, seed)].result()()  # make_init's program, compiled beforehand
    jax.block_until_ready(state)
    out["init_s"] = time.perf_counter() - t0
    pending: list = []
    busy = lambda: not all(f.done() for f in programs.values())  # noqa: E731
    mark, beside = time.perf_counter(), busy()
    for s in range(size.steps):
        ids = np.asarray(corpus.train[s * size.rows : (s + 1) * size.rows], np.int32)
        state, metrics = step(state, {"input_ids": global_batch(ids, mesh, size.rows)})
        pending.append(metrics)
        done = s + 1
        if done % size.chunk and done != size.steps:
            continue
        got = jax.device_get(pending)
        chunk = {"end_step": done, "steps": len(pending), "seconds": time.perf_counter() - mark}
        # a program compiling in another thread (or a parity run) may have held up this thread's dispatches:
        # one that was running when the stretch began (jobs only ever finish)
        chunk["beside_compiles"] = beside
        out["chunks"].append(chunk)
        for m in got:
            for k in ("loss", "z_loss", "grad_norm", "lr"):
                out[k].append(float(m[k]))
            out["skipped"].append(bool(m["skipped"]))
        pending = []
        out["steps_done"] = done
        line = f"  {name} step {done}: loss {out['loss'][-1]:.4f}, {out['chunks'][-1]['seconds'] / len(got):.4f} s/step"
        if done % size.eval_every == 0 or done == size.steps:
            t_eval = time.perf_counter()
            ce = heldout_ce(
                programs[("heldout", heads)].result(), state["params"], corpus.heldout, size.rows, mesh
            )
            out["evals"].append({"step": done, "ce": ce, "seconds": time.perf_counter() - t_eval})
            line += f", held-out CE {ce:.4f}"
        save(out)
        print(line, flush=True)
        mark, beside = time.perf_counter(), busy()
    del state
    timed = per_step_seconds(out) or [c["seconds"] / c["steps"] for c in out["chunks"]]
    out.update(status="ok", step_s=statistics.median(timed), tokens=size.steps * size.rows * size.seq)
    return out


# ------------------------------------------------------------------------------------------- bf16 vs fp32


def parity_bundle(folder: Path):
    """The recipe, OLMo-core's initial params, the batches and the CPU runs' trajectories that
    `olmax.testing.train_parity.write_bundle` wrote in `folder` (None when there are none)."""
    if not (folder / "recipe.json").is_file():
        return None
    from olmax.testing import train_parity

    return train_parity.read_bundle(folder)


def parity_run(variant: str, bundle) -> dict:
    """The bundle's recipe trained again on this process's first device by `train_parity.run_olmax` (the
    function the CPU's olmax run is) in `variant`'s dtype, attention `auto`: every step's metrics, and its
    loss against each CPU trajectory's (OLMo-core's fp32 Trainer first), as |difference| and relative."""
    import jax

    from olmax.model.attention import resolve_impl
    from olmax.testing import train_parity

    dtype, precision = PARITY_VARIANTS[variant]
    cfg = bundle.model_cfg.replace(dtype=dtype, attention_impl="auto")
    platform = jax.devices()[0].platform
    out: dict[str, Any] = {"variant": variant, "dtype": dtype, "matmul_precision": precision or "default"}
    out["kernel"] = resolve_impl("auto", cfg.dtype, bundle.recipe.seq_len, cfg.head_dim, platform=platform)
    out["recipe"] = bundle.recipe.as_json()
    t0 = time.perf_counter()
    with jax.default_matmul_precision(precision) if precision else contextlib.nullcontext():
        got = train_parity.run_olmax(bundle.recipe, cfg, bundle.params, bundle.batches)
    out.update(seconds=time.perf_counter() - t0, steps=len(got.loss), **got.metrics())
    out["against"] = {}
    for name, ref in bundle.reference.items():
        theirs = ref.loss[: len(got.loss)]
        if len(theirs) < len(got.loss):
            raise ValueError(f"the CPU run {name} has {len(theirs)} losses for {len(got.loss)} steps")
        out["against"][name] = {
            "loss": theirs,
            "abs_diff": [abs(a - b) for a, b in zip(got.loss, theirs, strict=True)],
            "rel_diff": [abs(a - b) / abs(b) for a, b in zip(got.loss, theirs, strict=True)],
        }
    out["status"] = "ok"
    return out


# ---------------------------------------------------------------------------------------- the chip part


def write_part(path: Path, part: dict) -> None:
    """The part's JSON, replaced whole (a temporary name, then a rename): a run cut short keeps what was
    written last."""
    from olmax.atomic import write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(part, indent=1, default=str))


def failure(e: Exception, **about: Any) -> dict:
    return {
        **about,
        "status": "error",
        "error": f"{type(e).__name__}: {e}"[:2000],
        "trace": traceback.format_exc()[-3000:],
    }


def parity_job(variant: str, bundle) -> dict:
    """`parity_run` as a background job: its failure becomes its row."""
    try:
        r = parity_run(variant, bundle)
        first = next(iter(r["against"]))
        worst = max(r["against"][first]["abs_diff"])
        say(f"parity {variant} ({r['kernel']}): |loss - {first}| up to {worst:.2e} over {r['steps']} steps")
    except Exception as e:
        r = failure(e, variant=variant)
        say(f"parity {variant}: {r['error'][:300]}")
    return r


def part_chip(args: argparse.Namespace) -> dict:
    """The three ablation runs one after another on the main thread; in background threads from the start,
    every program they need compiling and the parity recipe's runs (bf16 and the fp32 control: small, not
    timed). A chunk of steps that ran beside any background job is marked (`beside_compiles`). The part's
    JSON is rewritten from the main thread as each run goes, with the parity runs finished so far."""
    import jax

    size = SMOKE if args.smoke else FULL
    out_path = Path(args.out)
    data = Path(args.data)
    corpus = tpu_train_corpus.read(data)
    if corpus.train.shape != (size.rows * size.steps, size.seq):
        raise SystemExit(f"tpu_train_curves: {data} holds rows {corpus.train.shape}; prepare this size again")
    out: dict[str, Any] = {"part": "chip", **chip_facts(), "corpus": corpus.meta, "size": vars(size)}
    out.update(parity=[], runs=[], started=time.time())
    if out["platform"] != "tpu" and not args.smoke:
        raise SystemExit(f"tpu_train_curves: the chip part measures a TPU; JAX's device is {out['platform']}")
    mesh = one_device_mesh(jax.devices())
    out["peak_flops"] = datasheet_peak(jax.devices()[0].device_kind) if out["platform"] == "tpu" else None
    configs = {h: ablation_config(size, h, corpus.meta["eos"]) for h in size.heads}
    bundle = None if args.no_parity else parity_bundle(data / PARITY_DIR)
    variants = args.parity_variants.split(",") if bundle is not None else []
    if bundle is None:
        out["parity_skipped"] = (
            "--no-parity" if args.no_parity else f"no parity bundle in {data / PARITY_DIR}"
        )
        say(f"parity runs skipped: {out['parity_skipped']}")
    runs = RUNS[: args.runs]
    with ThreadPoolExecutor(max_workers=2 * len(configs) + len(runs) + len(variants)) as pool:
        jobs = submit_compiles(pool, configs, mesh, size.rows, runs)
        jobs |= {("parity", v): pool.submit(parity_job, v, bundle) for v in variants}

        def save() -> None:  # only this thread writes, and only this thread changes `out`
            out["parity"] = [jobs[("parity", v)].result() for v in variants if jobs[("parity", v)].done()]
            write_part(out_path, out)

        def keep(run: dict) -> None:
            out["runs"][-1] = run
            save()

        save()
        for spec in runs:
            name, heads, _ = spec
            out["runs"].append({"name": name, "heads": heads, "status": "compiling"})
            try:
                keep(train_run(spec, jobs, configs[heads], corpus, size, mesh, keep))
            except Exception as e:
                keep(failure(e, **out["runs"][-1]))
            r = out["runs"][-1]
            say(f"{name}: {r['status']}, {r.get('step_s', 0):.4f} s/step, {r.get('steps_done', 0)} steps")
        for v in variants:
            jobs[("parity", v)].result()
        out["wall_s"] = time.time() - out["started"]
        save()
    return out


# ----------------------------------------------------------------------------- here: the record, the plot


def smooth(values: list[float], window: int) -> list[float]:
    """Trailing mean over `window` steps (fewer at the start)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v - (values[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def band_check(runs: dict[str, dict], size: dict, window: int) -> dict | None:
    """The 4 x 256 curve against the band the two baseline seeds span, step by step (smoothed over
    `window` steps, from the end of warmup on): where it lies inside [min, max] of the seeds, and how far
    it lies from their mean beside how far apart the seeds are."""
    need = ("hd128_seed0", "hd128_seed1", "hd256_seed0")
    if not all(n in runs and runs[n]["loss"] for n in need):
        return None
    n = min(len(runs[k]["loss"]) for k in need)
    b0, b1, h = (smooth(runs[k]["loss"][:n], window) for k in need)
    first = min(size["warmup"], n - 1)
    steps = range(first, n)
    inside = [min(b0[i], b1[i]) <= h[i] <= max(b0[i], b1[i]) for i in steps]
    return {
        "window": window,
        "from_step": first + 1,
        "steps": n,
        "inside_fraction": sum(inside) / len(inside),
        "hd256_minus_mean": [h[i] - (b0[i] + b1[i]) / 2 for i in steps],
        "seed_half_gap": [abs(b1[i] - b0[i]) / 2 for i in steps],
        "smoothed": {k: v for k, v in zip(need, (b0, b1, h), strict=True)},
    }


def tail(values: list[float], fraction: float = 0.1) -> list[float]:
    """The last `fraction` of a run's values (at least one)."""
    return values[-max(1, int(len(values) * fraction)) :]


def step_flops(size: dict, heads: tuple[int, int], eos: int) -> float:
    """3 x the forward matmul FLOPs of one step (olmax.model.flops), the MFU's numerator."""
    from olmax.model.flops import forward_flops

    name = next(k for k, v in size["heads"].items() if tuple(v) == tuple(heads))
    cfg = ablation_config(Size(**size), name, eos)
    return 3.0 * forward_flops(cfg.model, size["seq"]).total * size["rows"]


def merge(paths: list[Path], args: argparse.Namespace) -> Path:
    """bench/results/tpu_train_curves.json (and .png beside it) from the chip part's JSON files (a later
    file's run of the same name replaces an earlier one's)."""
    from bench.record import Record, format_figure

    parts = [{**json.loads(Path(p).read_text()), "file": Path(p).name} for p in paths]
    if not parts or any(p.get("part") != "chip" for p in parts):
        raise SystemExit("tpu_train_curves: --merge takes the chip part's JSON files")
    runs = {r["name"]: {**r, "source": p["file"]} for p in parts for r in p["runs"]}
    parity = {r["variant"]: {**r, "source": p["file"]} for p in parts for r in p.get("parity", [])}
    first = parts[0]
    size = first["size"]
    rec = Record("tpu_train_curves", argv=sys.argv, smoke=args.smoke, results=args.results)
    rec.note("chip", {k: first.get(k) for k in ("device_kind", "platform", "jax", "bytes_limit")})
    rec.note("inputs", [p["file"] for p in parts])
    rec.note("size", size)
    rec.note("corpus", first["corpus"])
    rec.note("recipe", {"file": str(RECIPE.relative_to(ROOT)), "lr": LR, "runs": RUNS})
    if args.ran_at:
        rec.note("ran_at", args.ran_at)
    rec.side("olmax", version="checkout (commit above)", setting="run_train_step on a 1-device mesh")
    summary: dict[str, Any] = {}
    rec.note(
        "runs",
        [merge_run(rec, r, size, first["corpus"]["eos"], first.get("peak_flops")) for r in runs.values()],
    )
    rec.note("curves", {n: {k: r.get(k) for k in CURVE_KEYS} for n, r in runs.items()})
    merge_step_ratio(rec, runs, summary)
    band = band_check(runs, size, max(1, size["steps"] // 30))
    if band:
        merge_band(rec, runs, band, summary)
    for variant, r in parity.items():
        merge_parity(rec, variant, r, summary)
    rec.data["summary"] = summary
    path = rec.write()
    plot(runs, band, parity, size, path.with_suffix(".png"))
    print(json.dumps(summary, indent=1))
    print("citations for docs/tpu.md (bench/record.py's form):")
    for name, fig in sorted(rec.data["figures"].items()):
        text = format_figure(fig, cite_digits(fig))
        print(f"  [{text}](../bench/results/{path.name}#{name})")
    return path


DIGITS = {"s": 4, "tokens/s": 0, "%": 1, "x": 3, "nats": 3}  # the digits docs/tpu.md cites each unit with


def cite_digits(fig: dict) -> int:
    """The unit's digits, or two significant ones for a small value (a relative difference of 0.004%)."""
    m = abs(fig["median"])
    small = -math.floor(math.log10(m)) + 1 if 0 < m < 1 else 0
    return max(DIGITS.get(fig["unit"], 3), small)


CURVE_KEYS = ("loss", "z_loss", "grad_norm", "lr", "skipped", "evals", "chunks")
TRIO = ("hd128_seed0", "hd128_seed1", "hd256_seed0")


def per_step_seconds(run: dict) -> list[float]:
    """Seconds a step of each timed stretch: not the first (the program's first run), nor one that ran while
    other programs compiled in the same process (unless that leaves none)."""
    timed = run.get("chunks", [])[1:]
    alone = [c for c in timed if not c.get("beside_compiles")]
    return [c["seconds"] / c["steps"] for c in alone or timed]


def merge_run(rec, r: dict, size: dict, eos: int, peak: float | None) -> dict:
    """One run's table line, and its figures: final train loss and held-out CE, step time, tokens/s, MFU."""
    name = r["name"]
    line = {
        k: r.get(k)
        for k in ("name", "heads", "n_heads", "head_dim", "seed", "status", "steps_done", "source")
    }
    line.update(compile_s=r.get("compile_s"), plan_gib=(r.get("plan_bytes") or 0) / GIB)
    if r.get("loss"):
        rec.figure(f"final_loss_{name}", tail(r["loss"]), "nats", what="train loss, last 10% of steps")
        line["final_loss"] = statistics.median(tail(r["loss"]))
    if r.get("evals"):
        rec.figure(f"heldout_ce_{name}", [r["evals"][-1]["ce"]], "nats", step=r["evals"][-1]["step"])
        line["heldout_ce"] = r["evals"][-1]["ce"]
    per_step = per_step_seconds(r)
    if not per_step:
        return line
    how = f"wall seconds a step, over {size['chunk']} steps dispatched back to back, blocked at the end"
    rec.timings(name, "olmax", per_step, "s", how)
    rec.figure(f"step_s_{name}", per_step, "s")
    rec.figure(f"tokens_per_s_{name}", [size["rows"] * size["seq"] / t for t in per_step], "tokens/s")
    flops = step_flops(size, (r["n_heads"], r["head_dim"]), eos)
    line.update(step_s=statistics.median(per_step), flops_per_step=flops)
    if peak:
        rec.figure(f"mfu_{name}", [100 * flops / t / peak for t in per_step], "%")
        line["mfu"] = flops / line["step_s"] / peak
    return line


def merge_step_ratio(rec, runs: dict, summary: dict) -> None:
    """The wide heads' median step time over each baseline run's."""
    wide = per_step_seconds(runs.get("hd256_seed0", {}))
    base = [n for n in ("hd128_seed0", "hd128_seed1") if per_step_seconds(runs.get(n, {}))]
    if wide and base:
        ratios = [statistics.median(wide) / statistics.median(per_step_seconds(runs[n])) for n in base]
        rec.figure("hd256_over_hd128_step", ratios, "x", runs=base)
        summary["hd256_over_hd128_step"] = statistics.median(ratios)


def merge_band(rec, runs: dict, band: dict, summary: dict) -> None:
    """Whether the wide heads' curve stays in the seeds' band, and the final gaps (train and held-out)."""
    rec.note("band", band)
    what = f"steps from {band['from_step']} whose {band['window']}-step mean lies between the seeds'"
    rec.figure("hd256_inside_seed_band", [100 * band["inside_fraction"]], "%", what=what)
    summary["hd256_inside_seed_band"] = band["inside_fraction"]
    gaps = {"final_loss": {n: statistics.median(tail(runs[n]["loss"])) for n in TRIO}}
    if all(runs[n].get("evals") for n in TRIO):
        gaps["heldout"] = {n: runs[n]["evals"][-1]["ce"] for n in TRIO}
    for what, v in gaps.items():
        seed_gap = abs(v["hd128_seed1"] - v["hd128_seed0"])
        wide_gap = v["hd256_seed0"] - (v["hd128_seed0"] + v["hd128_seed1"]) / 2
        rec.figure(f"seed_gap_{what}", [seed_gap], "nats")
        rec.figure(f"hd256_gap_{what}", [wide_gap], "nats", what="4x256 minus the mean of the two seeds")
        summary.update({f"seed_gap_{what}": seed_gap, f"hd256_gap_{what}": wide_gap})


def merge_parity(rec, variant: str, r: dict, summary: dict) -> None:
    """The chip's run of the parity recipe in `variant` against each CPU trajectory: per-step |difference|
    and relative difference as figures (their spread over the steps is the band), and the table."""
    about = {
        k: r.get(k) for k in ("variant", "dtype", "matmul_precision", "kernel", "recipe", "seconds", "source")
    }
    if r.get("status") != "ok":
        rec.note(f"parity_{variant}", {**about, "error": r.get("error")})
        return
    per_step = [{"step": i + 1, "chip": x} for i, x in enumerate(r["loss"])]
    for ref, cmp in r["against"].items():
        key = f"{variant}_vs_{ref}"
        rec.figure(f"{key}_abs", cmp["abs_diff"], "nats", steps=r["steps"], kernel=r["kernel"])
        rec.figure(f"{key}_rel", [100 * x for x in cmp["rel_diff"]], "%", steps=r["steps"])
        rec.figure(f"{key}_step1_rel", [100 * cmp["rel_diff"][0]], "%")
        summary[f"{key}_max_rel"] = max(cmp["rel_diff"])
        summary[f"{key}_median_rel"] = statistics.median(cmp["rel_diff"])
        for row, theirs in zip(per_step, cmp["loss"], strict=True):
            row[ref] = theirs
    rec.note(f"parity_{variant}", {**about, "per_step": per_step, "skipped": r.get("skipped")})


def heads_label(run: dict) -> str:
    return f"{run.get('n_heads')} x {run.get('head_dim')}"


def plot(runs: dict, band: dict | None, parity: dict, size: dict, png: Path) -> None:
    """The curves side by side (panels below), written to `png` atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok_parity = {v: r for v, r in parity.items() if r.get("status") == "ok"}
    panels = 3 if ok_parity else 2
    fig, axes = plt.subplots(1, panels, figsize=(5.4 * panels, 4.3))
    mtok = size["rows"] * size["seq"] / 1e6  # M tokens a step
    panel_curves(axes[0], runs, band, mtok, band["window"] if band else max(1, size["steps"] // 30))
    if band:
        panel_gap(axes[1], runs, band, mtok)
    if ok_parity:
        panel_parity(axes[2], ok_parity)
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    tmp = png.with_name(f".{png.name}.{os.getpid()}.tmp")
    try:
        fig.savefig(tmp, format="png", dpi=110)
        os.replace(tmp, png)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)


COLORS = {"hd128_seed0": "C0", "hd128_seed1": "C2", "hd256_seed0": "C3"}


def panel_curves(ax, runs: dict, band: dict | None, mtok: float, window: int) -> None:
    """Each run's train loss (a trailing mean over `window` steps) and held-out CE (dots) against tokens,
    the band between the two seeds shaded."""
    for name, r in runs.items():
        if r.get("loss"):
            x = [mtok * (i + 1) for i in range(len(r["loss"]))]
            label = f"{heads_label(r)}, seed {r['seed']}"
            ax.plot(x, smooth(r["loss"], window), color=COLORS.get(name), lw=1.2, label=label)
        if r.get("evals"):
            ev = r["evals"]
            ax.plot([mtok * e["step"] for e in ev], [e["ce"] for e in ev], "o", ms=3, color=COLORS.get(name))
    if band:
        b0, b1, h = (band["smoothed"][n] for n in TRIO)
        x = [mtok * (i + 1) for i in range(len(b0))]
        lo_b, hi_b = [min(a, b) for a, b in zip(b0, b1)], [max(a, b) for a, b in zip(b0, b1)]
        ax.fill_between(x, lo_b, hi_b, color="C0", alpha=0.25, lw=0, label="between the seeds")
        q = len(b0) // 4  # the y range of the last three quarters: the first steps fall from ln(vocab)
        lo, hi = min(min(lo_b[q:]), min(h[q:])), max(hi_b[q], h[q])
        ax.set_ylim(lo - 0.1 * (hi - lo), hi + 0.1 * (hi - lo))
    ax.set_xlabel("M tokens")
    ax.set_ylabel(f"train loss, mean of {window} steps (dots: held-out CE)")
    ax.set_title("loss curves")


def panel_gap(ax, runs: dict, band: dict, mtok: float) -> None:
    """The wide heads' loss minus the seeds' mean, against ± half the seeds' gap (train loss smoothed; the
    held-out CE's as circles with the seeds' half-gap as bars)."""
    x = [mtok * (band["from_step"] + i) for i in range(len(band["hd256_minus_mean"]))]
    half = band["seed_half_gap"]
    ax.fill_between(x, [-g for g in half], half, color="C0", alpha=0.25, lw=0, label="± half the seeds' gap")
    wide = heads_label(runs["hd256_seed0"])
    ax.plot(x, band["hd256_minus_mean"], color="C3", lw=1.2, label=f"{wide} − mean of the seeds (train)")
    ev = {n: {e["step"]: e["ce"] for e in runs[n].get("evals", [])} for n in TRIO}
    steps = sorted(set(ev["hd128_seed0"]) & set(ev["hd128_seed1"]) & set(ev["hd256_seed0"]))
    if steps:
        xs = [mtok * s for s in steps]
        mean = [(ev["hd128_seed0"][s] + ev["hd128_seed1"][s]) / 2 for s in steps]
        gap = [ev["hd256_seed0"][s] - m for s, m in zip(steps, mean)]
        bars = [abs(ev["hd128_seed1"][s] - ev["hd128_seed0"][s]) / 2 for s in steps]
        ax.plot(xs, gap, "o", ms=4, color="C3", mfc="none", label="the same, held-out CE")
        ax.errorbar(xs, [0.0] * len(xs), yerr=bars, fmt="none", ecolor="C0", capsize=3)
    ax.axhline(0, color="k", lw=0.6)
    ax.set_xlabel("M tokens")
    ax.set_ylabel("loss difference (nats)")
    ax.set_title(f"{wide} heads against the seeds' band")


def panel_parity(ax, parity: dict) -> None:
    """Each chip run of the parity recipe minus the first CPU trajectory (OLMo-core's fp32 Trainer), and the
    other CPU trajectories minus it (dashed), per step."""
    for i, (variant, r) in enumerate(parity.items()):
        steps = list(range(1, r["steps"] + 1))
        ref = next(iter(r["against"]))
        base = r["against"][ref]["loss"]
        label = f"chip {variant} ({r['kernel']}) − {ref}"
        ax.plot(
            steps, [a - b for a, b in zip(r["loss"], base)], marker=".", lw=1, color=f"C{3 + i}", label=label
        )
        if i == 0:
            for j, (other, cmp) in enumerate((k, v) for k, v in r["against"].items() if k != ref):
                diff = [a - b for a, b in zip(cmp["loss"], base)]
                ax.plot(steps, diff, lw=1, ls="--", color=f"C{j}", label=f"CPU {other} − {ref}")
    ax.axhline(0, color="k", lw=0.6)
    ax.set_xlabel("step")
    ax.set_ylabel("loss difference (nats)")
    ax.set_title("parity recipe: the chip against the CPU")


# -------------------------------------------------------------------------- here: prepare, plan, smoke


def prepare(data: Path, size: Size) -> dict:
    """The corpus rows in `data`, and (not for the smoke: OLMo-core trains it for minutes) the parity
    recipe's bundle in `data`/parity, where this checkout has `olmax.testing.train_parity`."""
    meta = tpu_train_corpus.build(
        data, rows=size.corpus_rows, seq=size.seq, vocab=size.vocab, smoke=size is SMOKE
    )
    say(
        f"{data}: {meta['train_tokens']:,} training tokens ({meta['train_rows']} rows of {meta['seq']}), "
        f"{meta['heldout_tokens']:,} held out, vocabulary {meta['vocab']:,} "
        f"(+{100 * (meta['spelling_growth'] - 1):.1f}% tokens), in {meta['seconds']:.0f} s"
    )
    if size is SMOKE:
        return meta
    try:
        from olmax.testing import train_parity
    except ImportError:
        say("parity bundle not written: olmax.testing.train_parity is not in this checkout")
        return meta
    t0 = time.perf_counter()
    train_parity.make_bundle(data / PARITY_DIR)  # its CHIP_RECIPE, with every CPU trajectory
    mib = sum(f.stat().st_size for f in (data / PARITY_DIR).iterdir()) / 2**20
    say(f"{data / PARITY_DIR}: the parity bundle, {mib:.1f} MiB, in {time.perf_counter() - t0:.0f} s")
    total = sum(f.stat().st_size for f in data.rglob("*") if f.is_file()) / 2**20
    if total > CARRY_MIB:
        say(f"{data} holds {total:.1f} MiB: with the checkout it will not travel (64 MiB a call)")
    return meta


def plan(args: argparse.Namespace) -> list[dict]:
    """Each ablation program compiled for a v5e:1x1 topology here (libtpu importable): the step's buffer
    plan and kernel calls, the held-out CE program's plan, and the seconds each took."""
    from jax.experimental import topologies

    topo = topologies.get_topology_desc("v5e:1x1", "tpu", chips_per_host_bounds=(1, 1, 1), num_slices=1)
    mesh = one_device_mesh(list(topo.devices))
    out = []
    for heads in args.plan_heads.split(","):
        cfg = ablation_config(FULL, heads, eos=0)  # the EOS id does not enter the programs
        r: dict[str, Any] = {"heads": heads, "n_heads": cfg.model.n_heads, "head_dim": cfg.model.head_dim}
        try:
            got = compile_step(cfg, mesh, FULL.rows)
            r.update({k: got[k] for k in ("plan_bytes", "kernel_calls", "compile_s")})
            t0 = time.perf_counter()
            r["eval_plan_bytes"] = compiled_plan_bytes(compile_heldout(cfg, mesh, FULL.rows).compiled)
            r["eval_compile_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            compile_init(cfg, mesh, 0)
            r["init_compile_s"] = time.perf_counter() - t0
            r["flops_per_step"] = 3.0 * forward_flops_total(cfg, FULL) * FULL.rows
        except Exception as e:
            r["error"] = f"{type(e).__name__}: {e}"[:1500]
        out.append(r)
        say(
            f"plan {heads}: step {(r.get('plan_bytes') or 0) / GIB:.2f} GiB, {r.get('kernel_calls')} kernel "
            f"calls, {r.get('flops_per_step', 0) / 1e12:.2f} TFLOP, compiled in {r.get('compile_s', 0):.0f} s; "
            f"held-out CE {(r.get('eval_plan_bytes') or 0) / GIB:.2f} GiB in {r.get('eval_compile_s', 0):.0f} s; "
            f"init in {r.get('init_compile_s', 0):.0f} s {r.get('error', '')[:300]}"
        )
    return out


def forward_flops_total(cfg, size: Size) -> float:
    from olmax.model.flops import forward_flops

    return float(forward_flops(cfg.model, size.seq).total)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from bench.record import add_arguments

    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument(
        "--prepare", action="store_true", help="write the corpus (and the parity bundle) to --data"
    )
    p.add_argument("--part", choices=("chip",), help="run the chip part and write its JSON to --out")
    p.add_argument("--out", default=None, help="where the chip part writes its JSON")
    p.add_argument(
        "--merge", nargs="+", type=Path, help="chip parts' JSON: write bench/results/tpu_train_curves.json"
    )
    p.add_argument("--plan", action="store_true", help="compile the ablation's programs for a v5e here")
    p.add_argument("--plan-heads", default="hd128,hd256", help="--plan: the head layouts compiled")
    p.add_argument(
        "--data", type=Path, default=None, help=f"the corpus folder (default {DATA.relative_to(ROOT)})"
    )
    p.add_argument("--runs", type=int, default=len(RUNS), help="run the first N ablation runs (default all)")
    p.add_argument("--no-parity", action="store_true", help="skip the bf16-vs-fp32 runs")
    p.add_argument(
        "--parity-variants", default=",".join(PARITY_VARIANTS), help="bf16,fp32 (the chip's dtypes)"
    )
    p.add_argument("--ran-at", default=None, help="--merge: the commit whose olmax/ the device call ran")
    add_arguments(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    size = SMOKE if args.smoke else FULL
    if args.data is None:
        args.data = DATA.with_name(DATA.name + "_smoke") if args.smoke else DATA
    if args.merge:
        print(f"wrote {merge(args.merge, args)}")
        return 0
    if args.plan or args.part:  # before JAX starts libtpu (the chip's or the ahead-of-time compiler's)
        from olmax.model.libtpu import libtpu_env

        os.environ.update(libtpu_env(dict(os.environ)))  # the scoped-VMEM limit the `olmax` command sets
    if args.plan:
        res = plan(args)
        if args.out:
            write_part(Path(args.out), {"plans": res})
        return 0 if all("error" not in r for r in res) else 1
    if args.prepare:
        prepare(args.data, size)
        return 0
    if args.part == "chip":
        if not args.out:
            raise SystemExit("tpu_train_curves: --part chip needs --out PATH")
        part = part_chip(args)
        failed = [r["name"] for r in part["runs"] if r["status"] != "ok"]
        failed += [f"parity {r['variant']}" for r in part["parity"] if r["status"] != "ok"]
        say(f"wrote {args.out}" + (f"; failed: {', '.join(failed)}" if failed else ""))
        return 1 if failed else 0
    if args.smoke:  # the whole benchmark at its smoke size on this machine: prepare, the chip part, merge
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        prepare(args.data, size)
        args.out = str(args.data / "chip.json")
        part = part_chip(args)
        args.merge = [Path(args.out)]
        print(f"wrote {merge(args.merge, args)}")
        return 0 if all(r["status"] == "ok" for r in part["runs"] + part["parity"]) else 1
    raise SystemExit(
        "tpu_train_curves: give --prepare, --part chip --out PATH, --merge PARTS, --plan or --smoke"
    )


if __name__ == "__main__":
    sys.exit(main())

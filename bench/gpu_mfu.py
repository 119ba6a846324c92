"""Training MFU of the real OLMo 3 7B shapes on one GPU, measured with olmax's own train step.

What runs. The model is the stage-1 recipe's (configs/olmo3_7b_stage1.yaml: preset olmo3_7b, bf16
compute, fp32 params and AdamW moments): d_model 4096, 32 heads x 128, SwiGLU 11,008, vocabulary
100,278 (head padded to 100,352), sliding window 4096 on layers i % 4 != 3. Only the layer count,
the remat policy and the attention kernel change per row. One step is `olmax.train.step.
make_train_step` as the trainer builds it (fused LM head + CE, z-loss, global-norm clip, skip-step
AdamW, donated state) on a 1-device mesh, batch B x seq 8192 of random token ids.

Memory decides how many layers fit. The donated state is 12 bytes per parameter (fp32 params, two
moments): 18.2 GiB at 4 layers + 2.26 GiB per layer, 81.5 GiB at 32. XLA's CPU buffer plan for this
step (compiled here with the GPU's recompute-mode CE, never run) adds temporaries of 22.3 GiB at 4
layers + 3.0 GiB per layer with remat full (fp32 grads and the updated state, which the skip-step
`lax.cond` does not write in place), which would put 16 layers at ~103 GiB and 24 or more past the
~133 GiB a row gets. The GPU plan may differ; the table reports each row
as measured or OOM, and skips larger layer counts after an OOM with the same settings.

Each row runs in a fresh child process: its peak GPU memory (`device.memory_stats()`) is that
row's alone, and an OOM cannot leave a fragmented allocator behind for the next row. A row compiles
the step ahead of time; when XLA's buffer plan alone exceeds the device's memory limit the row is
reported as OOM without allocating. Timing: `--warmup` untimed steps, then the median of `--steps`
steps, each blocked until the new state and metrics are ready.

MFU = model FLOPs / step time / peak. Model FLOPs per token = 3 x the forward matmul FLOPs of
`olmax.model.flops` (QKVO, attention over the keys each query actually sees in its causal or
4096-wide window, SwiGLU, LM head over the real 100,278 columns); remat recompute and the padded head
columns are not model FLOPs. Two peaks: `--peak-tflops` (default 989, the H100/H200 SXM dense bf16
datasheet figure) and the measured bf16 matmul peak (8192^3, random normal data, best of 5 tries of
10 back-to-back products). A row with fewer layers over-weights the LM head (31% of a 4-layer
step's FLOPs, 10% of a 16-layer one's, 5.3% of the full model's), so the script prints each row's
head share and, where two layer counts ran with the same settings, fits step time = a + b x layers
and extrapolates to the full 32 layers (and likewise peak memory, to say whether 32 would fit).

The last line is `gpu MFU (olmo3_7b shapes, best row) = NN.N%` (the best measured row, against
`--peak-tflops`). `--smoke` shrinks everything (d_model 64, 2 layers, seq 256, vocab 1,000) so the
same code path runs on a CPU in well under a minute; without it the script refuses to run unless JAX's
first device is a GPU.

On the device machine (`run` tool, one H200, no network). Its image already has python3 3.12 with
jax 0.11 + the CUDA 13 plugin, flax, optax, numpy and pyyaml: everything the train step imports.
olmax is not installed there, and `pip install -e .` cannot work offline (it would fetch grain,
array-record, omegaconf, ...), so the script puts this checkout on sys.path itself and needs no setup
step. Untested here: olmax is developed against jax 0.10 / flax 0.12 on CPU, so an API change in the
image's versions would show up as an `error` row. Run (the budget keeps it under ~8 minutes; the
tee keeps the log in $OUT even if the call is cut off):

    set -o pipefail; PYTHONUNBUFFERED=1 python3 bench/gpu_mfu.py --json $OUT/gpu_mfu.json 2>&1 | tee $OUT/gpu_mfu.log

with timeout_s 540. Here (CPU smoke, ~20 s): .venv/bin/python bench/gpu_mfu.py --smoke

Options (GPU defaults; --smoke changes the bracketed ones unless given): --layers 4,16,24,32 [2]
--remat full,dots --attention cudnn [auto] --batch 1 --seq 8192 [256] --steps 5 [3] --warmup 2 [1]
--matmul-n 8192 [256] --budget-s 400 --peak-tflops 989 --mem-fraction 0.95 --ce-chunk N --json PATH.
Peak memory is `peak_bytes_in_use` over the row's process (state init and steps); plan_GiB is XLA's
compile-time buffer plan for the step (arguments + outputs - aliased + temporaries).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "configs" / "olmo3_7b_stage1.yaml"
MARK = "@@gpu_mfu "  # prefix of the one JSON line a child process prints on stdout
GRACE_S = 60.0  # a row may run this far past --budget-s before it is killed
GIB = 2**30
REMATS = ("none", "full", "dots", "dots_no_batch")  # olmax.model.config.RematPolicy
KERNELS = ("cudnn", "jax", "xla", "auto")  # olmax.model.config.AttentionImpl
# --smoke: a CPU-sized model with the same structure (sliding window below the sequence length)
SMOKE_MODEL = dict(
    d_model=64,
    n_heads=4,
    n_kv_heads=4,
    head_dim=16,
    mlp_hidden=176,
    vocab_size=1000,
    sliding_window=128,
    max_position_embeddings=256,
    eos_token_id=999,
    pad_token_id=998,
)

if str(REPO) not in sys.path:  # the device machine runs this checkout without installing it
    sys.path.insert(0, str(REPO))


def recipe_configs(layers: int, remat: str, attention: str, seq: int, smoke: bool):
    """(ModelConfig, OptimConfig) of the stage-1 recipe with this row's layers, remat and attention kernel."""
    import yaml

    from olmax.errors import OlmaxError
    from olmax.train.config import from_dict

    raw = yaml.safe_load(RECIPE.read_text())
    if not isinstance(raw, dict) or "model" not in raw:
        raise OlmaxError(f"{RECIPE}: expected a recipe with a `model` section")
    model = {**raw["model"], "n_layers": layers, "remat": remat, "attention_impl": attention}
    if smoke:
        model.update(SMOKE_MODEL)
    raw = {**raw, "model": model, "data": {**(raw.get("data") or {}), "seq_len": seq}}
    cfg = from_dict(raw, where=str(RECIPE))
    return cfg.model, cfg.optim


# ----- child processes: one probe, one per table row -----


def child_probe(spec: dict) -> dict:
    """Platform facts and the best-of-5 bf16 matmul FLOP/s of an n^3 product (10 per try).

    With `require_gpu` and no GPU, only the facts: the parent refuses to go on, and an 8192^3 product
    on a CPU would take minutes.
    """
    import jax
    import jax.numpy as jnp

    dev = jax.devices()[0]
    stats = dev.memory_stats() or {}
    facts = {
        "platform": dev.platform,
        "device_kind": dev.device_kind,
        "jax": jax.__version__,
        "n_devices": jax.device_count(),
        "bytes_limit": stats.get("bytes_limit"),
    }
    if spec["require_gpu"] and dev.platform != "gpu":
        return facts
    n = spec["matmul_n"]
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.normal(ka, (n, n), jnp.bfloat16)
    b = jax.random.normal(kb, (n, n), jnp.bfloat16)
    mm = jax.jit(jnp.matmul)
    mm(a, b).block_until_ready()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        outs = [mm(a, b) for _ in range(10)]
        jax.block_until_ready(outs)
        best = min(best, (time.perf_counter() - start) / 10)
    return {**facts, "matmul_flops": 2 * n**3 / best}


def child_row(spec: dict) -> dict:
    """Compile, initialise and time olmax's train step for one row; the result as a dict."""
    import jax
    import numpy as np

    from olmax.model.attention import resolve_impl
    from olmax.train.config import MeshConfig
    from olmax.train.mesh import batch_sharding, global_batch, make_mesh
    from olmax.train.step import abstract_state, make_init, make_train_step

    out: dict = {}
    try:
        model_cfg, optim_cfg = recipe_configs(
            spec["layers"], spec["remat"], spec["attention"], spec["seq"], spec["smoke"]
        )
        out["attention_resolved"] = resolve_impl(
            model_cfg.attention_impl, model_cfg.dtype, spec["seq"], model_cfg.head_dim
        )
        dev = jax.devices()[0]
        mesh = make_mesh(MeshConfig(data=1, fsdp=1), devices=[dev])
        b, seq = spec["batch"], spec["seq"]
        step = make_train_step(
            model_cfg,
            optim_cfg,
            mesh,
            n_micro=1,
            per_device_batch=b,
            t_max=optim_cfg.t_max or 1000,
            ce_chunk=spec["ce_chunk"],
        )
        abstract, _ = abstract_state(model_cfg, optim_cfg, mesh)
        ids_spec = jax.ShapeDtypeStruct((b, seq), np.int32, sharding=batch_sharding(mesh))
        t0 = time.perf_counter()
        compiled = step.lower(abstract, {"input_ids": ids_spec}).compile()
        out["compile_s"] = time.perf_counter() - t0
        mem = compiled.memory_analysis()
        limit = (dev.memory_stats() or {}).get("bytes_limit")
        if mem is not None:
            plan = (
                mem.argument_size_in_bytes
                + mem.output_size_in_bytes
                - mem.alias_size_in_bytes
                + mem.temp_size_in_bytes
            )
            out["plan_bytes"] = plan
            if limit and plan > limit:
                out.update(
                    status="oom",
                    error=f"XLA's buffer plan needs {plan / GIB:.1f} GiB > the "
                    f"{limit / GIB:.1f} GiB limit; not allocated",
                )
                return out
        t0 = time.perf_counter()
        state = make_init(model_cfg, optim_cfg, mesh, seed=0)
        jax.block_until_ready(state)
        out["init_s"] = time.perf_counter() - t0
        ids = np.random.default_rng(0).integers(0, model_cfg.vocab_size, size=(b, seq), dtype=np.int32)
        batch = {"input_ids": global_batch(ids, mesh, b)}
        times, losses = [], []
        for i in range(spec["warmup"] + spec["steps"]):
            t0 = time.perf_counter()
            state, metrics = compiled(state, batch)
            jax.block_until_ready((state, metrics))
            dt = time.perf_counter() - t0
            losses.append(float(metrics["loss"]))
            if i >= spec["warmup"]:
                times.append(dt)
        out.update(status="ok", step_times=times, losses=losses)
        stats = dev.memory_stats() or {}
        out["peak_bytes"] = stats.get("peak_bytes_in_use")
        out["bytes_limit"] = stats.get("bytes_limit")
    except Exception as e:  # report every failure as a table row, never a traceback that ends the run
        text = f"{type(e).__name__}: {e}"
        oom = "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower()
        out.update(status="oom" if oom else "error", error=text.strip().splitlines()[0][:300])
    return out


def run_child(kind: str, spec: dict, timeout: float, env: dict) -> dict:
    """The child's JSON result, or {status: timeout | crash, error: one line} when it printed none."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, json.dumps(spec)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "error": f"killed after {timeout:.0f} s (--budget-s + {GRACE_S:.0f} s)"}
    for line in proc.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :])
    tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
    return {"status": "crash", "error": f"child exited {proc.returncode}: {tail[:300]}"}


# ----- the parent: rows, table, extrapolation -----


def parse_list(text: str, kind: type) -> list:
    try:
        return [kind(x) for x in text.split(",") if x.strip()]
    except ValueError as e:
        raise SystemExit(
            f"gpu_mfu: cannot read {text!r} as a comma-separated list of {kind.__name__}: {e}"
        ) from e


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--layers",
        default=None,
        help="layer counts to try, in order; a count at or above one that "
        "ran out of memory with the same batch, remat and kernel is skipped (default 4,16,24,32; "
        "smoke 2)",
    )
    p.add_argument(
        "--remat",
        default="full,dots",
        help="remat policies per layer count, in order: none, full, "
        "dots, dots_no_batch (default full,dots: at 32 layers only full can fit)",
    )
    p.add_argument(
        "--attention",
        default=None,
        help="attention kernels: cudnn, jax, xla, auto (default cudnn, "
        "smoke auto; a cudnn row that fails other than for memory is rerun, and later ones run, with xla)",
    )
    p.add_argument("--batch", default="1", help="sequences per step, comma-separated (default 1)")
    p.add_argument(
        "--seq", type=int, default=None, help="sequence length (default 8192, the recipe's; smoke 256)"
    )
    p.add_argument(
        "--steps", type=int, default=None, help="timed steps per row, median reported (default 5; smoke 3)"
    )
    p.add_argument(
        "--warmup", type=int, default=None, help="untimed steps after compilation (default 2; smoke 1)"
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=400.0,
        help="start no row past this many seconds; a "
        f"running row is killed {GRACE_S:.0f} s later (default 400: all done in under 8 minutes)",
    )
    p.add_argument(
        "--peak-tflops",
        type=float,
        default=989.0,
        help="bf16 dense peak per GPU for MFU (default 989: H100/H200 SXM datasheet)",
    )
    p.add_argument(
        "--matmul-n",
        type=int,
        default=None,
        help="size of the measured bf16 matmul peak (default 8192; smoke 256)",
    )
    p.add_argument(
        "--mem-fraction",
        default="0.95",
        help="XLA_PYTHON_CLIENT_MEM_FRACTION for the rows, "
        "unless already set (default 0.95; JAX's own default 0.75 would cap a row at ~104 GiB)",
    )
    p.add_argument(
        "--ce-chunk", type=int, default=None, help="train.ce_chunk (default: olmax's per-backend choice)"
    )
    p.add_argument("--json", default=None, help="also write every row as JSON to this path")
    p.add_argument(
        "--smoke", action="store_true", help="tiny model, 2 layers, seq 256: a CPU check of this script"
    )
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    defaults = (
        dict(layers="2", seq=256, steps=3, warmup=1, matmul_n=256)
        if args.smoke
        else dict(layers="4,16,24,32", seq=8192, steps=5, warmup=2, matmul_n=8192)
    )
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.attention is None:  # cuDNN flash attention exists on GPUs only: auto picks xla on a CPU
        args.attention = "auto" if args.smoke else "cudnn"
    if args.steps < 1 or args.warmup < 0 or args.seq < 2:
        p.error("--steps must be >= 1, --warmup >= 0 and --seq >= 2")
    for flag, given, allowed in (("--remat", args.remat, REMATS), ("--attention", args.attention, KERNELS)):
        bad = sorted(set(parse_list(given, str)) - set(allowed))
        if bad or not parse_list(given, str):
            p.error(f"{flag} {given!r}: choose from {', '.join(allowed)} (comma-separated)")
    return args


def fmt_gib(n: float | None) -> str:
    return "n/a" if n is None else f"{n / GIB:.1f}"


def extrapolate(
    rows: list[dict],
    full_layers: int,
    full_flops_step: dict,
    peak: float,
    mm_peak: float,
    limit: float | None,
) -> None:
    """Fit step time and peak memory linearly in layers over rows that differ only in layer count."""
    import numpy as np

    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get("status") == "ok":
            groups.setdefault((r["batch"], r["seq"], r["remat"], r["attention_resolved"]), []).append(r)
    done = False
    for (b, seq, remat, attn), rs in groups.items():
        layer_counts = sorted({r["layers"] for r in rs})
        if len(layer_counts) < 2:
            continue
        xs = np.array([r["layers"] for r in rs], float)
        slope, icpt = np.polyfit(xs, np.array([r["step_s"] for r in rs]), 1)
        t_full = icpt + slope * full_layers
        head = (
            f"extrapolated {full_layers}-layer step (remat {remat}, {attn}, batch {b} x {seq}; layers "
            f"{','.join(map(str, layer_counts))})"
        )
        if slope <= 0 or t_full <= 0:
            print(
                f"{head}: none, step time does not grow with layers ({slope * 1e3:.1f} ms/layer): timing noise",
                flush=True,
            )
            done = True
            continue
        line = (
            f"{head}: {icpt:.3f} s + {slope * 1e3:.1f} ms/layer -> {t_full:.3f} s, MFU "
            f"{full_flops_step[b] / t_full / peak:.1%} ({full_flops_step[b] / t_full / mm_peak:.1%} of "
            "the measured matmul peak)"
        )
        peaks = [r.get("peak_bytes") for r in rs]
        if all(p is not None for p in peaks):
            m_slope, m_icpt = np.polyfit(xs, np.array(peaks, float), 1)
            m_full = m_icpt + m_slope * full_layers
            fits = (
                ""
                if not limit
                else (" (fits)" if m_full <= limit else f" (> the {limit / GIB:.1f} GiB limit)")
            )
            line += f"; peak memory ~{m_full / GIB:.1f} GiB{fits}"
        print(line, flush=True)
        done = True
    if not done:
        print(
            "extrapolation: needs two layer counts with the same batch, remat and kernel; none here",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        kind, spec = args.child[0], json.loads(args.child[1])
        result = child_probe(spec) if kind == "probe" else child_row(spec)
        print(MARK + json.dumps(result), flush=True)
        return 0

    t_start = time.perf_counter()
    env = dict(os.environ)
    env.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", args.mem_fraction)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    # this process only orchestrates and counts FLOPs: keep its JAX off the GPU, whose memory the rows
    # need (set before JAX is first imported, which reads it)
    os.environ["JAX_PLATFORMS"] = "cpu"
    from olmax.errors import OlmaxError
    from olmax.model.flops import forward_flops
    from olmax.model.transformer import count_params

    probe = run_child(
        "probe", {"matmul_n": args.matmul_n, "require_gpu": not args.smoke}, args.budget_s + GRACE_S, env
    )
    if "platform" not in probe:
        print(
            f"gpu_mfu: the device probe failed ({probe['error']}); is JAX installed and a device visible?",
            file=sys.stderr,
        )
        return 1
    if probe["platform"] != "gpu" and not args.smoke:
        print(
            f"gpu_mfu: JAX's first device is {probe['platform']} ({probe['device_kind']}), not a GPU. This "
            "benchmark measures 7B-shaped layers on one H200; run it on the GPU machine (command in this "
            "file's docstring), or pass --smoke for the CPU check of the script itself.",
            file=sys.stderr,
        )
        return 2
    layers_list, remats = parse_list(args.layers, int), parse_list(args.remat, str)
    attentions, batches = parse_list(args.attention, str), parse_list(args.batch, int)
    try:
        base_cfg, _ = recipe_configs(4, remats[0], attentions[0], args.seq, args.smoke)
    except OlmaxError as e:
        print(f"gpu_mfu: {e}", file=sys.stderr)
        return 2
    full_layers = 32  # olmo3_7b
    full_cfg = base_cfg.replace(n_layers=full_layers)
    peak = args.peak_tflops * 1e12
    mm_peak = probe["matmul_flops"]
    full = forward_flops(full_cfg, args.seq)
    share = {k: getattr(full, k) / full.total for k in ("projections", "attention", "mlp", "lm_head")}
    print(
        f"device: {probe['device_kind']} ({probe['platform']}, {probe['n_devices']} visible, 1 used), jax "
        f"{probe['jax']}, memory limit {fmt_gib(probe['bytes_limit'])} GiB, XLA_FLAGS={env.get('XLA_FLAGS', '')!r}"
    )
    print(
        f"model: {RECIPE.relative_to(REPO)} (dtype {base_cfg.dtype}, params fp32): d_model {base_cfg.d_model}, "
        f"{base_cfg.n_heads} heads x {base_cfg.head_dim}, MLP {base_cfg.mlp_hidden}, vocab {base_cfg.vocab_size} "
        f"(padded {base_cfg.padded_vocab}), window {base_cfg.sliding_window} on 3 of 4 layers, seq {args.seq}"
        + ("  [SMOKE: shrunk shapes, not olmo3_7b]" if args.smoke else "")
    )
    print(
        f"full {full_layers}-layer model: {count_params(full_cfg) / 1e9:.2f}B params, forward "
        f"{full.per_token / 1e9:.3f} GFLOP/token, train 3x = {3 * full.per_token / 1e9:.3f} GFLOP/token; shares: "
        f"QKVO {share['projections']:.1%}, attention {share['attention']:.1%}, MLP {share['mlp']:.1%}, "
        f"LM head {share['lm_head']:.1%}"
    )
    print(
        f"peaks: --peak-tflops {args.peak_tflops:.0f} TFLOP/s; measured bf16 matmul ({args.matmul_n}^3, best "
        f"of 5) {mm_peak / 1e12:.1f} TFLOP/s = {mm_peak / peak:.0%} of the flag"
    )
    header = (
        f"{'layers':>6} {'batch':>5} {'seq':>5} {'remat':>6} {'attn':>5} {'compile_s':>9} {'step_s':>8} "
        f"{'tokens/s':>9} {'GFLOP/tok':>9} {'head%':>5} {'TFLOP/s':>8} {'MFU':>6} {'MFU_mm':>6} "
        f"{'plan_GiB':>8} {'peak_GiB':>8} {'loss':>6}"
    )
    print(header)
    print("-" * len(header), flush=True)

    plan = [(n, b, r, a) for n in layers_list for b in batches for r in remats for a in attentions]
    rows: list[dict] = []
    fallback = None  # set to "xla" once a cudnn row fails for a reason other than memory
    durations: list[float] = []
    oom_at: dict[tuple, int] = {}  # (batch, remat, kernel) -> fewest layers that ran out of memory
    i = -1
    while i + 1 < len(plan):
        i += 1
        n, b, remat, attn = plan[i]
        attn = fallback if (fallback and attn == "cudnn") else attn
        elapsed = time.perf_counter() - t_start
        expected = min(durations) if durations else 0.0
        if elapsed + expected > args.budget_s:
            print(
                f"# budget: {len(plan) - i} row(s) not started ({elapsed:.0f} s elapsed, a row takes ~"
                f"{expected:.0f} s, --budget-s {args.budget_s:.0f})",
                flush=True,
            )
            break
        if n >= oom_at.get((b, remat, attn), n + 1):  # memory only grows with layers: save the compile
            print(
                f"{n:>6} {b:>5} {args.seq:>5} {remat:>6} {attn:>5} SKIPPED: {oom_at[(b, remat, attn)]} layers "
                "already ran out of memory with these settings",
                flush=True,
            )
            continue
        print(
            f"# row {i + 1}/{len(plan)}: {n} layers, batch {b}, remat {remat}, {attn} (t = {elapsed:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
        spec = dict(
            layers=n,
            batch=b,
            seq=args.seq,
            remat=remat,
            attention=attn,
            steps=args.steps,
            warmup=args.warmup,
            ce_chunk=args.ce_chunk,
            smoke=args.smoke,
        )
        t_row = time.perf_counter()
        row = {**spec, **run_child("row", spec, args.budget_s + GRACE_S - elapsed, env)}
        row["wall_s"] = time.perf_counter() - t_row
        if row["status"] == "ok":  # a failed row can end early; only whole rows predict the next one
            durations.append(row["wall_s"])
        cfg = base_cfg.replace(n_layers=n)
        fwd = forward_flops(cfg, args.seq)
        row["train_flops_per_token"] = 3 * fwd.per_token
        row["head_share"] = fwd.lm_head / fwd.total
        if row["status"] == "ok":
            row["step_s"] = statistics.median(row["step_times"])
            row["tokens_per_s"] = b * args.seq / row["step_s"]
            row["flops_per_s"] = row["train_flops_per_token"] * row["tokens_per_s"]
            row["mfu"] = row["flops_per_s"] / peak
            row["mfu_measured_peak"] = row["flops_per_s"] / mm_peak
            print(
                f"{n:>6} {b:>5} {args.seq:>5} {remat:>6} {row['attention_resolved']:>5} {row['compile_s']:>9.1f} "
                f"{row['step_s']:>8.3f} {row['tokens_per_s']:>9.0f} {row['train_flops_per_token'] / 1e9:>9.4g} "
                f"{row['head_share']:>5.1%} {row['flops_per_s'] / 1e12:>8.4g} {row['mfu']:>6.1%} "
                f"{row['mfu_measured_peak']:>6.1%} {fmt_gib(row.get('plan_bytes')):>8} "
                f"{fmt_gib(row.get('peak_bytes')):>8} {row['losses'][0]:>6.2f}",
                flush=True,
            )
        else:
            print(
                f"{n:>6} {b:>5} {args.seq:>5} {remat:>6} {attn:>5} {row['status'].upper()}: {row['error']}",
                flush=True,
            )
            if row["status"] == "oom":
                oom_at[(b, remat, attn)] = min(n, oom_at.get((b, remat, attn), n))
            if attn == "cudnn" and row["status"] in ("error", "crash") and fallback is None:
                fallback = "xla"
                plan.insert(i + 1, (n, b, remat, "xla"))
                print(
                    "# cudnn attention failed (not for memory): this row again and the later cudnn rows "
                    "run with the xla kernel",
                    flush=True,
                )
        rows.append(row)

    print("-" * len(header))
    ok = [r for r in rows if r["status"] == "ok"]
    full_step_flops = {b: 3 * full.total * b for b in batches}
    shares = {r["layers"]: r["head_share"] for r in rows}
    print(
        "LM head share of model FLOPs: "
        + ", ".join(f"{n} layers {s:.1%}" for n, s in sorted(shares.items()))
        + f"; full {full_layers} layers {share['lm_head']:.1%}. A row's MFU speaks for the full model only as far "
        "as its head runs at the layers' rate: the extrapolation below removes that bias"
    )
    extrapolate(ok, full_layers, full_step_flops, peak, mm_peak, probe["bytes_limit"])
    if args.json:
        from olmax.atomic import write_text

        write_text(args.json, json.dumps({"probe": probe, "args": vars(args), "rows": rows}, indent=1))
    print(f"elapsed {time.perf_counter() - t_start:.0f} s")
    if not ok:
        print("gpu MFU (olmo3_7b shapes, best row) = n/a (no row completed)")
        return 1
    best = max(ok, key=lambda r: r["mfu"])
    print(
        f"best row: {best['layers']} layers, batch {best['batch']}, remat {best['remat']}, "
        f"{best['attention_resolved']}: {best['mfu_measured_peak']:.1%} of the measured matmul peak"
    )
    print(f"gpu MFU (olmo3_7b shapes, best row) = {100 * best['mfu']:.1f}%", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Training MFU of OLMo 3 7B's block on one TPU chip: olmax's own train step beside MaxText's OLMo 3 step.

What runs. olmax's step is `olmax.train.step.make_train_step` as the trainer builds it (fused LM head +
CE with z-loss, global-norm clip, skip-step AdamW, donated state, a 1-device mesh) on the stage-1
recipe's model (configs/olmo3_7b_stage1.yaml: d_model 4096, SwiGLU 11,008, bf16 compute, fp32 params and
moments, window 4096 on layers i % 4 != 3), with this benchmark's layers, vocabulary, heads, batch,
remat policy and attention kernel per row, on random token ids at seq 8192. The default rows are one
period of OLMo 3's layers (4: three sliding, one full) with a 1,024-token vocabulary so the head is
negligible (the block's own MFU), the real 100,278-token head alone (0 layers: it and its fp32 state are
what one chip can hold), and 16 heads x 256 against 32 x 128 (same parameters and FLOPs).

Timing. Each row is compiled ahead of time (`.lower().compile()`); a row whose buffer plan exceeds the
chip's memory is reported as OOM without allocating. Then `--warmup` untimed steps and `--steps` timed
ones, each blocked until the new state and metrics are on the host; the row's figure is the median step.
MaxText's side (bench/chip/maxtext_peer.py) is its own pre-training loop on its `olmo3-7b-pt` port at the same
layers, vocabulary, sequence and batch on synthetic unpacked data, each setting in a child process,
timed by its own per-step log (median of steps 3 to N-1): its launcher's settings and `remat_policy=full`.

MFU = model FLOPs per step / step time / 197 TFLOP/s (the v5e's bf16 datasheet peak), and also over the
measured matmul peak (an 8192^3 bf16 product, best of 5 tries of 10). Model FLOPs = 3 x the forward
matmul FLOPs of `olmax.model.flops` (QKVO, attention over the keys each query sees, SwiGLU, the head over
the real vocabulary); remat recompute is not counted.

Also measured, on the chip at the real shapes: attention alone (one layer's forward and backward, each
kernel and splash tiling, sliding and full), with the splash kernel's outputs and gradients against the
XLA path's; and where a step's time goes (a `jax.profiler` trace of the best row, summed by op kind).

Run on the device machine, from the checkout's root, after `bash bench/setup/tpu_wheels.sh install /tmp/site`
(and `bash bench/setup/maxtext_setup.sh install` for the peer part) and `export
PYTHONPATH=$PYTHONPATH:/tmp/site:$PWD` (the whole device commands: docs/tpu.md#benchmark-and-ci):

    python3 -m bench.chip.tpu_mfu --part olmax --out $OUT/olmax.json      # olmax's rows, sweep, profile
    python3 -m bench.chip.tpu_mfu --part peer --out $OUT/peer.json        # MaxText's rows, then olmax's best row

A device call runs at most 10 minutes and the whole set does not fit one (a row ~85 s on the chip, a MaxText
setting ~160 s, one head layout's sweep ~5 minutes), so each call takes a share: `--rows A,B`, `--no-sweep`,
`--no-rows` (the sweep alone, or MaxText alone), `--sweep-heads`, `--peer-settings`.

and here, `python -m bench.chip.tpu_mfu --merge PART.json ... ` writes bench/results/tpu_mfu.json with the
table and the summary (`block_mfu`, `vs_maxtext`: MaxText's step time over olmax's, from rows measured in
the same command). `--plan` compiles every row for a v5e here, ahead of time, and prints each buffer plan
(needs libtpu: bench/setup/setup_libtpu.sh). `--smoke` runs the olmax part on a CPU at a tiny shape.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from bench.harness import ROOT, chip_facts, datasheet_peak, module_command, run_child
from olmax.train.plan import compiled_plan_bytes

RECIPE = ROOT / "configs" / "olmo3_7b_stage1.yaml"
PEAK_V5E = datasheet_peak("TPU v5 lite")  # the v5e's bf16 dense datasheet peak
GIB = 2**30
HEADS = {
    "32x128": dict(n_heads=32, n_kv_heads=32, head_dim=128),
    "16x256": dict(n_heads=16, n_kv_heads=16, head_dim=256),
}
SMOKE_MODEL = dict(
    d_model=64,
    n_heads=2,
    n_kv_heads=2,
    head_dim=32,
    mlp_hidden=176,
    vocab_size=1000,
    sliding_window=128,
    max_position_embeddings=256,
    eos_token_id=999,
    pad_token_id=998,
)


def row(name: str, **kw: Any) -> dict:
    base = dict(
        layers=4, vocab=1024, heads="32x128", batch=1, seq=8192, remat="matmuls", attention="splash", block=0
    )
    unknown = set(kw) - set(base)
    if unknown:
        raise ValueError(f"row {name}: unknown keys {sorted(unknown)}")
    return {"name": name, **base, **kw}


# The olmax part's rows, in order. The first is the XLA path at remat full (the trainer's CPU default on
# the chip); then the splash kernel under each remat policy; batch 2; the 16 x 256 heads; the real head.
OLMAX_ROWS = [
    row("xla_full", attention="xla", remat="full"),
    row("splash_full", remat="full"),
    row("splash_dots", remat="dots"),
    row("splash_matmuls", remat="matmuls"),
    row("splash_matmuls_but_up", remat="matmuls_but_up"),
    row("splash_b2_full", batch=2, remat="full"),
    row("splash_b2_matmuls_but_up", batch=2, remat="matmuls_but_up"),
    row("hd256_matmuls", heads="16x256", remat="matmuls"),
    row("head_only", layers=0, vocab=100_278, remat="none"),
]


def model_configs(spec: dict, smoke: bool):
    """(ModelConfig, OptimConfig): the stage-1 recipe with this row's shape, kernel and remat."""
    import yaml

    from olmax.train.config import from_dict

    raw = yaml.safe_load(RECIPE.read_text())
    model = {
        **raw["model"],
        **HEADS[spec["heads"]],
        "n_layers": spec["layers"],
        "vocab_size": spec["vocab"],
        "remat": spec["remat"],
        "attention_impl": spec["attention"],
        "splash_block": spec["block"],
    }
    if smoke:
        model.update(SMOKE_MODEL, vocab_size=min(spec["vocab"], SMOKE_MODEL["vocab_size"]))
    raw = {**raw, "model": model, "data": {**raw["data"], "seq_len": spec["seq"]}}
    cfg = from_dict(raw, where=str(RECIPE))
    return cfg.model, cfg.optim


def step_flops(model_cfg, seq: int, batch: int) -> float:
    from olmax.model.flops import forward_flops

    return 3.0 * forward_flops(model_cfg, seq).total * batch


def build(spec: dict, smoke: bool, devices: list):
    """(model cfg, compiled step, abstract state, batch shape struct, mesh) for one row."""
    import jax
    import numpy as np

    from olmax.train.config import MeshConfig
    from olmax.train.mesh import batch_sharding, make_mesh
    from olmax.train.step import abstract_state, make_train_step

    model_cfg, optim_cfg = model_configs(spec, smoke)
    mesh = make_mesh(MeshConfig(data=1, fsdp=1), devices=devices)
    step = make_train_step(model_cfg, optim_cfg, mesh, n_micro=1, per_device_batch=spec["batch"], t_max=1000)
    abstract, _ = abstract_state(model_cfg, optim_cfg, mesh)
    ids = jax.ShapeDtypeStruct((spec["batch"], spec["seq"]), np.int32, sharding=batch_sharding(mesh))
    t0 = time.perf_counter()
    compiled = step.lower(abstract, {"input_ids": ids}).compile()
    return model_cfg, optim_cfg, compiled, mesh, time.perf_counter() - t0


def run_row(spec: dict, args: argparse.Namespace, limit: int | None, trace_dir: str | None = None) -> dict:
    """Compile, initialise and time olmax's step for one row; every failure becomes the row's `error`."""
    import jax
    import numpy as np

    from olmax.model.attention import resolve_impl
    from olmax.model.remat import describe
    from olmax.train.mesh import global_batch
    from olmax.train.step import make_init

    out: dict[str, Any] = {"spec": spec}
    try:
        model_cfg, optim_cfg, compiled, mesh, compile_s = build(spec, args.smoke, jax.devices()[:1])
        out.update(
            compile_s=compile_s,
            plan_bytes=compiled_plan_bytes(compiled),
            kernel=resolve_impl(model_cfg.attention_impl, model_cfg.dtype, spec["seq"], model_cfg.head_dim),
            remat=describe(model_cfg.remat),
            flops_per_step=step_flops(model_cfg, spec["seq"], spec["batch"]),
            params=sum(
                int(np.prod(s.shape))
                for s in jax.tree.leaves(jax.eval_shape(lambda: make_init_shapes(model_cfg, optim_cfg)))
            ),
        )
        if limit and out["plan_bytes"] and out["plan_bytes"] > limit:
            out.update(
                status="oom", error=f"buffer plan {out['plan_bytes'] / GIB:.2f} GiB > {limit / GIB:.2f} GiB"
            )
            return out
        state = make_init(model_cfg, optim_cfg, mesh, seed=0)
        rng = np.random.default_rng(0)
        batches = [
            {
                "input_ids": global_batch(
                    rng.integers(0, model_cfg.vocab_size, (spec["batch"], spec["seq"]), dtype=np.int32),
                    mesh,
                    spec["batch"],
                )
            }
            for _ in range(2)
        ]
        times, losses = [], []
        for i in range(args.warmup + args.steps):
            t0 = time.perf_counter()
            state, metrics = compiled(state, batches[i % 2])
            jax.block_until_ready((state, metrics))
            if i >= args.warmup:
                times.append(time.perf_counter() - t0)
            losses.append(float(metrics["loss"]))
        if trace_dir:
            import gzip

            Path(trace_dir).mkdir(parents=True, exist_ok=True)
            with gzip.open(Path(trace_dir) / "step.hlo.txt.gz", "wt") as f:
                f.write(compiled.as_text())  # fusion names in the trace -> what each fusion holds
            with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
                for i in range(3):
                    state, metrics = compiled(state, batches[i % 2])
                    jax.block_until_ready((state, metrics))
        del state
        out.update(status="ok", step_times=times, losses=losses, step_s=statistics.median(times))
        out["mfu_datasheet"] = out["flops_per_step"] / out["step_s"] / PEAK_V5E
    except Exception as e:  # a row's failure is a table row, never the end of the run
        text = f"{type(e).__name__}: {e}"
        oom = "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower()
        out.update(
            status="oom" if oom else "error", error=text.strip()[:2000], trace=traceback.format_exc()[-3000:]
        )
    return out


def make_init_shapes(model_cfg, optim_cfg):
    """The params of a fresh state (for the parameter count), without allocating."""
    from olmax.train.step import init_state

    return init_state(model_cfg, optim_cfg, 0)["params"]


def matmul_peak(n: int) -> float:
    """Best-of-5 FLOP/s of 10 back-to-back n^3 bf16 products on random normal data."""
    import jax
    import jax.numpy as jnp

    ka, kb = jax.random.split(jax.random.key(0))
    a, b = jax.random.normal(ka, (n, n), jnp.bfloat16), jax.random.normal(kb, (n, n), jnp.bfloat16)
    mm = jax.jit(jnp.matmul)
    mm(a, b).block_until_ready()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        jax.block_until_ready([mm(a, b) for _ in range(10)])
        best = min(best, (time.perf_counter() - t0) / 10)
    return 2 * n**3 / best


# splash tilings tried by the attention sweep: (tile edge, fused backward)
SWEEP = [(512, False), (1024, False), (2048, False), (512, True), (1024, True), (2048, True)]


def attention_sweep(args: argparse.Namespace) -> list[dict]:
    """One layer's attention forward + backward at the real shapes, per kernel and tiling: the median of
    `--steps` blocked calls, and the largest difference of its output and gradients from the XLA path's
    (relative to the XLA path's largest magnitude), with bf16 inputs as the model feeds them."""
    import jax
    import jax.numpy as jnp

    seq = 256 if args.smoke else 8192
    rows = []
    for heads in args.sweep_heads.split(","):
        n, h = (2, 32) if args.smoke else (HEADS[heads]["n_heads"], HEADS[heads]["head_dim"])
        keys = jax.random.split(jax.random.key(1), 4)
        qkvw = [jax.random.normal(kk, (1, seq, n, h), jnp.bfloat16) for kk in keys]
        for window in (128 if args.smoke else 4096, None):
            ref = None
            for kernel, block, fused in [("xla", 256, None)] + [
                ("splash", b, f) for b, f in SWEEP[: 2 if args.smoke else None]
            ]:
                out, flat = time_attention(qkvw, window, kernel, min(block, seq), fused, args.steps)
                out["heads"] = heads
                if flat is not None and ref is None:
                    ref = flat
                elif flat is not None:
                    out["rel_diff"] = [
                        float(abs(a - b).max() / max(abs(b).max(), 1e-30)) for a, b in zip(flat, ref)
                    ]
                rows.append(out)
                print(
                    f"attention {heads} window={window} {kernel} {block} fused={fused}: "
                    f"{out.get('ms', out.get('error', ''))!s:.100}",
                    flush=True,
                )
    return rows


def time_attention(qkvw: list, window: int | None, kernel: str, block: int, fused: bool | None, steps: int):
    """(row, [output, dq, dk, dv] as fp32 numpy, or None on failure) of one kernel's forward + backward."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from olmax.model.attention import attend
    from olmax.model.attention_splash import SplashSettings, attend_splash

    q, k, v, w = qkvw
    if kernel == "xla":
        attn = lambda q, k, v: attend(q, k, v, window, None, "xla", block)  # noqa: E731
    else:
        settings = SplashSettings(block=block, fused_bwd=fused)
        attn = lambda q, k, v: attend_splash(q, k, v, window, None, settings)  # noqa: E731

    def loss(q, k, v):
        out = attn(q, k, v)
        return jnp.sum((out * w).astype(jnp.float32)), out

    fn = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))
    out = {"window": window, "kernel": kernel, "block": block, "fused_bwd": fused}
    try:
        t0 = time.perf_counter()
        (_, o), grads = jax.block_until_ready(fn(q, k, v))
        out["compile_s"] = time.perf_counter() - t0
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            jax.block_until_ready(fn(q, k, v))
            times.append(time.perf_counter() - t0)
        out.update(status="ok", ms=1e3 * statistics.median(times), times_ms=[1e3 * t for t in times])
        return out, [np.asarray(x, np.float32) for x in (o, *grads)]
    except Exception as e:
        out.update(status="error", error=f"{type(e).__name__}: {e}"[:1500])
        return out, None


def profile_summary(trace_dir: str) -> dict:
    """Device time per op kind over a jax.profiler trace (perfetto JSON): the TPU's ops, summed by the
    name's stem (`fusion.12` -> fusion, with a convolution or custom call inside named as such)."""
    import glob
    import gzip
    import re

    files = sorted(glob.glob(f"{trace_dir}/**/perfetto_trace.json.gz", recursive=True))
    if not files:
        return {"error": f"no perfetto trace under {trace_dir}"}
    with gzip.open(files[-1]) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    names = {}  # pid -> process name
    threads = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            names[e["pid"]] = e["args"]["name"]
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
    device_pids = {p for p, n in names.items() if "TPU" in n or "/device:" in n}
    by_kind: dict[str, float] = {}
    by_op: dict[str, float] = {}
    tracks: dict[str, float] = {}
    for e in events:
        if e.get("ph") != "X" or e.get("pid") not in device_pids:
            continue
        track = threads.get((e["pid"], e.get("tid")), "")
        tracks[track] = tracks.get(track, 0.0) + e.get("dur", 0.0)
        if "XLA Ops" not in track:
            continue
        name = e.get("name", "")
        stem = re.sub(r"[._]\d+$", "", name).split(".")[0]
        by_kind[stem] = by_kind.get(stem, 0.0) + e["dur"]
        by_op[name] = by_op.get(name, 0.0) + e["dur"]
    top = sorted(by_op.items(), key=lambda kv: -kv[1])[:40]
    return {
        "file": os.path.basename(files[-1]),
        "device_processes": [names[p] for p in device_pids],
        "tracks_us": tracks,
        "by_kind_us": dict(sorted(by_kind.items(), key=lambda kv: -kv[1])),
        "top_ops_us": top,
        "steps": 3,
    }


def hlo_ops(hlo_text: str) -> dict[str, dict]:
    """Each instruction of a compiled module's text: its opcode, its JAX op path (metadata op_name) and
    whether it is, or calls a computation holding, a matmul (convolution / dot)."""
    import re

    comps: dict[str, str] = {}
    name, body = None, []
    for line in hlo_text.splitlines():
        head = re.match(r"^(?:ENTRY )?%?([\w.\-]+) ", line)
        if head and not line.startswith(" "):
            if name:
                comps[name] = "\n".join(body)
            name, body = head.group(1), []
        elif name:
            body.append(line)
    if name:
        comps[name] = "\n".join(body)
    has_dot = {c: bool(re.search(r" (convolution|dot)\(", b)) for c, b in comps.items()}
    ops: dict[str, dict] = {}
    inst = re.compile(r"^\s+(?:ROOT )?%([\w.\-]+) = .*? ([a-z][\w\-]*)\(")
    for body in comps.values():
        for line in body.splitlines():
            m = inst.match(line)
            if not m:
                continue
            calls = re.search(r"calls=%([\w.\-]+)", line)
            op_name = re.search(r'op_name="([^"]*)"', line)
            ops[m.group(1)] = {
                "opcode": m.group(2),
                "op_name": op_name.group(1) if op_name else "",
                "matmul": m.group(2) in ("convolution", "dot") or bool(calls and has_dot.get(calls.group(1))),
            }
    return ops


def where_time_goes(trace_path: Path, hlo_path: Path, steps: int) -> dict:
    """A traced step's device time by what the ops do, per step (ms): the layers' matmuls forward and
    backward, the splash kernel, the LM head + loss, the AdamW update (the skip-step `cond`), layout copies
    and the elementwise rest (norms, RoPE, SiLU, residual adds), from the trace's op events joined with the
    compiled module's text by op name. Control-flow ops (while, cond) are containers, not counted."""
    import gzip

    with gzip.open(hlo_path, "rt") as f:
        ops = hlo_ops(f.read())
    with gzip.open(trace_path) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    procs = {
        e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in events
        if e.get("ph") == "M" and e.get("name") == "thread_name"
    }
    parts: dict[str, float] = {}
    step_us = 0.0
    for e in events:
        if e.get("ph") != "X" or "TPU" not in procs.get(e.get("pid"), ""):
            continue
        track = threads.get((e["pid"], e.get("tid")), "")
        if track == "Steps":
            step_us += e["dur"]
        if track != "XLA Ops":
            continue
        name = e["name"]
        op = ops.get(name, {"opcode": "", "op_name": "", "matmul": False})
        path = op["op_name"]
        if op["opcode"] in ("while", "cond", "conditional", "call") or name.split(".")[0] in (
            "while",
            "cond",
        ):
            continue
        backward = "transpose(" in path
        if name.startswith("splash"):
            kind = "attention kernel (splash)"
        elif "/cond/" in path:
            kind = "AdamW update"
        elif op["opcode"].startswith("copy") or name.startswith("copy"):
            kind = "layout copies"
        elif op["matmul"] and "/while/" in path:
            kind = "layer matmuls, backward" if backward else "layer matmuls, forward"
        elif op["matmul"]:
            kind = "LM head + loss matmuls"
        elif "/while/" in path:
            kind = "layer elementwise, backward" if backward else "layer elementwise, forward"
        else:
            kind = "other (loss, norms outside the layers, grad norm)"
        parts[kind] = parts.get(kind, 0.0) + e["dur"]
    per_step = {k: v / steps / 1e3 for k, v in sorted(parts.items(), key=lambda kv: -kv[1])}
    return {"step_ms": step_us / steps / 1e3, "ms_per_step": per_step, "steps": steps}


# ----- the parts: what one device command runs -----


def select_rows(names: str | None) -> list[dict]:
    if not names:
        return list(OLMAX_ROWS)
    by_name = {r["name"]: r for r in OLMAX_ROWS}
    unknown = [n for n in names.split(",") if n not in by_name]
    if unknown:
        raise SystemExit(f"tpu_mfu: unknown row(s) {', '.join(unknown)}; rows: {', '.join(by_name)}")
    return [by_name[n] for n in names.split(",")]


def run_rows(specs: list[dict], args: argparse.Namespace, profile: str | None, save=None) -> list[dict]:
    """Each row in turn; `save(rows)` after each, so a run cut short keeps the rows it finished."""
    import jax

    limit = (jax.devices()[0].memory_stats() or {}).get("bytes_limit")
    rows: list[dict] = []
    for spec in specs:
        trace_dir = str(Path(args.out).parent / "trace") if spec["name"] == profile else None
        r = run_row(spec, args, limit, trace_dir)
        if trace_dir and r.get("status") == "ok":
            r["profile"] = profile_summary(trace_dir)
        rows.append(r)
        what = (
            f"{r['step_s']:.4f} s/step, MFU {r['mfu_datasheet']:.1%}"
            if r.get("status") == "ok"
            else r.get("error", "")[:200]
        )
        print(
            f"row {spec['name']}: {r.get('status')} {what} (compile {r.get('compile_s', 0):.0f} s)",
            flush=True,
        )
    return rows


def write_part(path: str, part: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(part, indent=1, default=str))


def part_olmax(args: argparse.Namespace) -> dict:
    """Facts, the matmul peak, the attention sweep and the rows; the part's JSON rewritten after each."""
    out: dict[str, Any] = {"part": "olmax", **chip_facts()}
    out["matmul_flops"] = matmul_peak(256 if args.smoke else 8192)
    print(f"matmul peak {out['matmul_flops'] / 1e12:.1f} TFLOP/s", flush=True)
    write_part(args.out, out)
    if not args.no_sweep:
        out["attention"] = attention_sweep(args)
        write_part(args.out, out)
    if not args.no_rows:
        out["rows"] = run_rows(
            select_rows(args.rows),
            args,
            args.profile,
            lambda rows: write_part(args.out, out | {"rows": rows}),
        )
    return out


def part_peer(args: argparse.Namespace) -> dict:
    """MaxText's settings and olmax's rows, each side in child processes, one after another on the chip."""
    from bench.chip import maxtext_peer

    out: dict[str, Any] = {"part": "peer", "maxtext": [], "olmax": None}
    settings = ["cpu"] if args.smoke else args.peer_settings.split(",")
    shapes = maxtext_peer.CPU_SHAPES if args.smoke else maxtext_peer.TPU_SHAPES
    # on a CPU MaxText runs from its own venv (bench/setup/maxtext_setup.sh fetch); on the chip from /tmp/site
    python = str(ROOT / ".venv-maxtext" / "bin" / "python") if args.smoke else None
    env = dict(os.environ)
    for i, setting in enumerate(settings):
        res = maxtext_peer.run_peer(
            setting=setting,
            **{**shapes, "steps": args.peer_steps},
            timeout_s=args.peer_timeout,
            env=env,
            python=python,
        )
        out["maxtext"].append(res)
        print(f"maxtext {setting}: {res.get('step_s', res.get('error', ''))!s:.200}", flush=True)
        write_part(args.out, out)
        if i == 0 and not args.no_rows:  # olmax after MaxText's first setting: the chip in the same state
            child = Path(args.out).with_name("olmax_rows.json")
            cmd = module_command(
                "bench.chip.tpu_mfu",
                "--part",
                "olmax",
                "--no-sweep",
                "--rows",
                args.rows or "",
                "--out",
                str(child),
                "--steps",
                str(args.steps),
                "--warmup",
                str(args.warmup),
            )
            if args.profile:
                cmd += ["--profile", args.profile]
            if args.smoke:
                cmd += ["--smoke"]
            run = run_child(cmd, env=env)
            out["olmax"] = json.loads(child.read_text()) if child.exists() else {}
            if run.rc != 0:  # what it wrote before it stopped is kept, with why it stopped
                out["olmax"]["error"] = f"olmax child exited {run.rc}"
            write_part(args.out, out)
    return out


# ----- here: the record, from the parts -----


def best_block_row(rows: list[dict]) -> dict | None:
    """The fastest measured row of the 4-layer block at batch 1, 32 x 128 heads, small vocabulary."""
    ok = [
        r
        for r in rows
        if r.get("status") == "ok"
        and r["spec"]["layers"] == 4
        and r["spec"]["batch"] == 1
        and r["spec"]["heads"] == "32x128"
        and r["spec"]["vocab"] == 1024
    ]
    return min(ok, key=lambda r: r["step_s"]) if ok else None


def load_inputs(paths: list[Path]) -> dict[str, list]:
    """The device calls' outputs by kind: `peer` and `olmax` parts, MaxText records run on their own
    (`bench/chip/maxtext_peer.py --json`), `reference` losses computed here; each tagged with its file."""
    kinds: dict[str, list] = {"peer": [], "olmax": [], "maxtext": [], "reference": []}
    for path in paths:
        data = json.loads(Path(path).read_text())
        kind = data.get("part") or ("maxtext" if "setting" in data else None)
        if kind not in kinds:
            raise SystemExit(f"tpu_mfu: {path}: neither a part nor a MaxText record")
        kinds[kind].append({**data, "file": Path(path).name})
    return kinds


def parse_sweep_log(text: str) -> list[dict]:
    """The attention sweep's lines as a part's log prints them (`attention HEADS window=W KERNEL BLOCK
    fused=F: MS`), for a run whose JSON was cut off before the sweep's end."""
    import re

    line = re.compile(r"^attention (\S+) window=(\S+) (\w+) (\d+) fused=(\w+): ([0-9.]+)$")
    rows = []
    for m in map(line.match, text.splitlines()):
        if m:
            heads, window, kernel, block, fused, ms = m.groups()
            rows.append(
                {
                    "heads": heads,
                    "window": None if window == "None" else int(window),
                    "kernel": kernel,
                    "block": int(block),
                    "fused_bwd": None if fused == "None" else fused == "True",
                    "ms": float(ms),
                }
            )
    return rows


def table_line(r: dict, source: str, peak: float) -> dict:
    s = r["spec"]
    line = {
        "source": source,
        **s,
        "status": r["status"],
        "plan_gib": (r.get("plan_bytes") or 0) / GIB,
        "kernel": r.get("kernel"),
        "remat": r.get("remat"),
        "compile_s": r.get("compile_s"),
    }
    if r["status"] == "ok":
        line.update(
            step_s=r["step_s"],
            mfu=r["mfu_datasheet"],
            mfu_measured_peak=r["flops_per_step"] / r["step_s"] / peak,
            tokens_per_s=s["batch"] * s["seq"] / r["step_s"],
            flops_per_step=r["flops_per_step"],
            losses=r["losses"],
        )
    else:
        line["error"] = r.get("error", "")[:300]
    return line


def merge(paths: list[Path], args: argparse.Namespace) -> Path:
    """The record bench/results/tpu_mfu.json from the device calls' outputs (see --help)."""
    from bench.record import Record

    got = load_inputs(paths)
    peer = got["peer"][0] if got["peer"] else None
    from_peer = [{**peer["olmax"], "file": peer["file"]}] if peer and peer.get("olmax") else []
    olmax_parts = from_peer + got["olmax"]  # the command that also ran MaxText first
    rec = Record("tpu_mfu", argv=sys.argv, smoke=args.smoke, results=args.results)
    facts = olmax_parts[0]
    rec.note("chip", {k: facts.get(k) for k in ("device_kind", "jax", "bytes_limit", "libtpu_init_args")})
    rec.note("inputs", [Path(p).name for p in paths])
    if args.ran_at:  # the device ran a copy of a working tree: the commit its library code equals
        rec.note("ran_at", args.ran_at)
    peaks = [p["matmul_flops"] for p in olmax_parts if p.get("matmul_flops")]
    rec.figure("matmul_peak_tflops", [x / 1e12 for x in peaks], "TFLOP/s", what="8192^3 bf16, best of 5 x 10")
    rec.side(
        "olmax",
        version="checkout (commit above)",
        setting="make_train_step, 1-device mesh; kernel, remat and batch per row",
    )
    rec.note("rows", merge_rows(rec, olmax_parts, max(peaks)))
    summary: dict[str, Any] = {}
    same_cmd = olmax_parts[0].get("rows", [])
    best = best_block_row(same_cmd)
    if best:
        name = best["spec"]["name"]
        rec.figure("block_step_s", best["step_times"], "s", row=name)
        for fig, peak in (("block_mfu", PEAK_V5E), ("block_mfu_measured_peak", max(peaks))):
            rec.figure(
                fig, [100 * best["flops_per_step"] / t / peak for t in best["step_times"]], "%", row=name
            )
        summary.update(block_mfu=best["mfu_datasheet"], block_row=name, block_step_s=best["step_s"])
    maxtext_runs = (peer["maxtext"] if peer else []) + got["maxtext"]
    if maxtext_runs:
        merge_peer(rec, maxtext_runs, best, summary, args.smoke)
    merge_ablation(rec, olmax_parts, summary)
    merge_sweep(rec, olmax_parts, args.sweep_log)
    if args.trace and args.hlo:
        profile = where_time_goes(Path(args.trace), Path(args.hlo), 3)
        rec.note(
            "profile",
            {
                "row": args.profile or (best and best["spec"]["name"]),
                "trace": Path(args.trace).name,
                **profile,
            },
        )
    for ref in got["reference"]:
        row = next((r for r in same_cmd if r["spec"]["name"] == ref["row"] and r["status"] == "ok"), None)
        if row:
            diff = abs(row["losses"][0] - ref["loss"]) / ref["loss"]
            rec.note(
                "first_loss_vs_xla_on_cpu",
                {
                    "row": ref["row"],
                    "chip_splash": row["losses"][0],
                    "cpu_xla": ref["loss"],
                    "rel_diff": diff,
                },
            )
            summary["first_loss_rel_diff_vs_xla"] = diff
    rec.data["summary"] = summary
    print_table(rec.data["notes"]["rows"], summary)
    return rec.write()


def merge_rows(rec, olmax_parts: list[dict], peak: float) -> list[dict]:
    """The table's lines; each measured row's steps as a timing and its step time and MFU as figures
    (`step_NAME`, `mfu_NAME`; a row measured again in a later command gets `NAME.N`)."""
    how = "warm in-process wall seconds per step, blocked, after warm-up steps"
    table = []
    for part in olmax_parts:
        for r in part.get("rows", []):
            table.append(table_line(r, part["file"], peak))
            if r["status"] != "ok":
                continue
            key = r["spec"]["name"]
            if f"step_{key}" in rec.data["figures"]:
                key = f"{key}.{len(table)}"
            rec.timings(key, "olmax", r["step_times"], "s", how)
            rec.figure(f"step_{key}", r["step_times"], "s", source=part["file"])
            mfu = [100 * r["flops_per_step"] / t / PEAK_V5E for t in r["step_times"]]
            rec.figure(f"mfu_{key}", mfu, "%", source=part["file"])
    return table


def merge_ablation(rec, olmax_parts: list[dict], summary: dict) -> None:
    """16 x 256 heads over 32 x 128 at the same remat, batch and layers, from rows of the same command."""
    for part in olmax_parts:
        rows = [r for r in part.get("rows", []) if r["status"] == "ok"]
        for r in (r for r in rows if r["spec"]["heads"] == "16x256"):
            want = {k: v for k, v in r["spec"].items() if k not in ("name", "heads")}
            twin = next(
                (
                    q
                    for q in rows
                    if q["spec"]["heads"] == "32x128" and all(q["spec"][k] == v for k, v in want.items())
                ),
                None,
            )
            if twin:
                ratio = r["step_s"] / twin["step_s"]
                names = [r["spec"]["name"], twin["spec"]["name"]]
                rec.figure("hd256_over_hd128_step", [ratio], "x", rows=names, source=part["file"])
                summary["hd256_over_hd128_step"] = ratio


def merge_sweep(rec, olmax_parts: list[dict], sweep_log: str | None) -> None:
    """The attention sweep: one figure per kernel, tiling, heads and mask (`attn_32x128_sliding_splash1024f`:
    f a fused backward, s separate dq and dk/dv kernels)."""
    sweep = [a for p in olmax_parts for a in p.get("attention", []) if a.get("status") == "ok"]
    if sweep_log:
        sweep += parse_sweep_log(Path(sweep_log).read_text())
        rec.note("attention_sweep_source", Path(sweep_log).name)
    for a in sweep:
        mask = "full" if a["window"] is None else "sliding"
        tiling = f"{a['block']}{'f' if a['fused_bwd'] else 's'}" if a["kernel"] == "splash" else ""
        about = {k: a[k] for k in ("heads", "window", "kernel", "block", "fused_bwd")}
        rec.figure(
            f"attn_{a['heads']}_{mask}_{a['kernel']}{tiling}", a.get("times_ms") or [a["ms"]], "ms", **about
        )
    rec.note("attention_sweep", sweep)


def merge_peer(rec, runs: list[dict], best: dict | None, summary: dict, smoke: bool) -> None:
    """MaxText's side: its settings (each setting's exact overrides), step times, plans, the ratio."""
    rec.side(
        "maxtext",
        version=str(runs[0].get("maxtext_version")),
        setting="; ".join(
            f"{m['setting']}: {' '.join(m.get('overrides', []))} {m.get('env_overrides') or ''}".strip()
            for m in runs
        ),
    )
    for m in runs:
        if m.get("step_s"):
            timed = [m["steps_s"][i] for i in m["timed_steps"]]
            rec.timings(f"maxtext_{m['setting']}", "maxtext", timed, "s", "MaxText's logged seconds per step")
            rec.figure(f"maxtext_step_{m['setting']}", timed, "s", plan_gib=m.get("hbm_estimate_gib"))
    rec.note("maxtext_runs", [{k: v for k, v in m.items() if k != "log_tail"} for m in runs])
    # the peer's best setting: its OLMo 3 launcher's (on a CPU smoke, the one setting there is)
    launcher = next(
        (m for m in runs if m["setting"] == ("cpu" if smoke else "launcher") and m.get("step_s")), None
    )
    if launcher and best:
        ratio = launcher["step_s"] / best["step_s"]
        rec.figure(
            "vs_maxtext", [ratio], "x", olmax_row=best["spec"]["name"], maxtext="launcher", same_command=True
        )
        summary.update(
            vs_maxtext=ratio,
            maxtext_step_s=launcher["step_s"],
            maxtext_mfu=best["flops_per_step"] / launcher["step_s"] / PEAK_V5E,
        )


def print_table(table: list[dict], summary: dict) -> None:
    print(f"{'row':28} {'kernel':7} {'remat':24} {'b':>2} {'s/step':>8} {'MFU':>6} {'plan GiB':>9}")
    for t in table:
        step = f"{t['step_s']:.4f}" if t.get("step_s") else t["status"]
        mfu = f"{t['mfu']:.1%}" if t.get("mfu") else ""
        print(
            f"{t['name']:28} {t.get('kernel') or '':7} {(t.get('remat') or '')[:24]:24} {t['batch']:>2} {step:>8} {mfu:>6} {t['plan_gib']:>9.2f}"
        )
    if summary:
        print(json.dumps(summary, indent=1))


# ----- here: the chip's first loss against this CPU's XLA path -----


def reference_loss(spec: dict, smoke: bool) -> dict:
    """The loss of a row's first step (its fresh state from seed 0 on its first batch, as `run_row` makes
    them) computed on this CPU with the XLA attention path and no remat: the chip's splash path at the
    same shapes must give the same value up to bf16 rounding (the two backends round matmuls differently).
    """
    import jax
    import numpy as np

    from olmax.train.step import init_state, make_loss_fn

    spec = {**spec, "attention": "xla", "remat": "none"}
    model_cfg, optim_cfg = model_configs(spec, smoke)
    t0 = time.perf_counter()
    params = jax.jit(lambda: init_state(model_cfg, optim_cfg, 0)["params"])()
    rng = np.random.default_rng(0)
    ids = rng.integers(0, model_cfg.vocab_size, (spec["batch"], spec["seq"]), dtype=np.int32)
    _, (ce, _) = jax.jit(make_loss_fn(model_cfg, optim_cfg))(params, {"input_ids": ids})
    loss = float(ce) / (spec["batch"] * (spec["seq"] - 1))
    return {"row": spec["name"], "kernel": "xla", "loss": loss, "seconds": time.perf_counter() - t0}


# ----- here: plans compiled ahead of time for a v5e -----


def plan(args: argparse.Namespace) -> list[dict]:
    """Each row compiled for a v5e:1x1 topology on this host (libtpu importable): plan GiB, compile s."""
    from jax.experimental import topologies

    topo = topologies.get_topology_desc("v5e:1x1", "tpu", chips_per_host_bounds=(1, 1, 1), num_slices=1)
    out = []
    for spec in select_rows(args.rows):
        spec = {
            **spec,
            **({"seq": args.seq} if args.seq else {}),
            **({"layers": args.layers} if args.layers is not None else {}),
        }
        r = {"spec": spec}
        try:
            _, _, compiled, _, compile_s = build(spec, False, list(topo.devices))
            text = compiled.as_text()
            r.update(
                plan_bytes=compiled_plan_bytes(compiled),
                compile_s=compile_s,
                tpu_custom_calls=text.count("tpu_custom_call"),
            )
            mem = compiled.memory_analysis()
            r.update(argument_bytes=mem.argument_size_in_bytes, temp_bytes=mem.temp_size_in_bytes)
        except Exception as e:
            r["error"] = f"{type(e).__name__}: {e}"[:1500]
        out.append(r)
        print(
            f"plan {spec['name']} seq {spec['seq']} layers {spec['layers']}: "
            f"{(r.get('plan_bytes') or 0) / GIB:.2f} GiB, {r.get('tpu_custom_calls')} kernel calls, "
            f"compile {r.get('compile_s', 0):.0f} s {r.get('error', '')[:300]}",
            flush=True,
        )
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from bench.record import add_arguments

    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument(
        "--part", choices=("olmax", "peer"), help="run one part on the chip and write its JSON to --out"
    )
    p.add_argument(
        "--merge", nargs="+", type=Path, help="parts' JSON files: write the record bench/results/tpu_mfu.json"
    )
    p.add_argument(
        "--reference-loss",
        metavar="ROW",
        default=None,
        help="the row's first-step loss on this CPU through the XLA path (to check the chip's splash path)",
    )
    p.add_argument(
        "--plan",
        action="store_true",
        help="compile the rows for a v5e here, ahead of time, and print the plans",
    )
    p.add_argument("--ran-at", default=None, help="--merge: the commit whose olmax/ the device calls ran")
    p.add_argument("--sweep-log", default=None, help="--merge: a part's log holding the attention sweep")
    p.add_argument("--trace", default=None, help="--merge: the profiled row's perfetto trace (.json.gz)")
    p.add_argument("--hlo", default=None, help="--merge: the profiled row's compiled module text (.txt.gz)")
    p.add_argument("--rows", default=None, help="comma-separated row names (default: all; see OLMAX_ROWS)")
    p.add_argument("--out", default=None, help="where a part writes its JSON")
    p.add_argument("--steps", type=int, default=8, help="timed steps per row (default 8)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per row first (default 2)")
    p.add_argument("--profile", default=None, help="the row whose 3 extra steps are traced by jax.profiler")
    p.add_argument(
        "--no-vmem-flag",
        dest="vmem_flag",
        action="store_false",
        help="leave libtpu's scoped-VMEM limit at its default (olmax.model.libtpu)",
    )
    p.add_argument("--sweep-heads", default="32x128,16x256", help="head layouts the attention sweep runs")
    p.add_argument("--no-sweep", action="store_true", help="skip the attention-alone sweep")
    p.add_argument("--no-rows", action="store_true", help="skip olmax's rows (--part olmax: the sweep alone)")
    p.add_argument(
        "--peer-settings",
        default="launcher,full",
        help="MaxText settings, in order (bench/chip/maxtext_peer.py)",
    )
    p.add_argument("--peer-steps", type=int, default=8)
    p.add_argument("--peer-timeout", type=float, default=240.0)
    p.add_argument("--seq", type=int, default=None, help="--plan: override every row's sequence length")
    p.add_argument("--layers", type=int, default=None, help="--plan: override every row's layer count")
    add_arguments(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.smoke:  # the same rows at the smoke model's sequence length, fewer steps
        args.steps, args.warmup = min(args.steps, 2), 1
        global OLMAX_ROWS
        OLMAX_ROWS = [dict(r, seq=256) for r in OLMAX_ROWS]
    if args.merge:
        print(f"wrote {merge(args.merge, args)}")
        return 0
    if args.reference_loss:
        (spec,) = select_rows(args.reference_loss)
        res = reference_loss(spec, args.smoke)
        print(json.dumps(res))
        if args.out:
            write_part(args.out, {"part": "reference", **res})
        return 0
    if args.plan:
        res = plan(args)
        if args.out:
            Path(args.out).write_text(json.dumps(res, indent=1))
        return 0 if all("error" not in r for r in res) else 1
    if args.part and args.vmem_flag:  # before JAX starts the TPU backend (this process and its children)
        from olmax.model.libtpu import libtpu_env

        os.environ.update(libtpu_env(dict(os.environ)))
    if not args.part or not args.out:
        raise SystemExit("tpu_mfu: give --part olmax|peer with --out PATH, or --merge PARTS, or --plan")
    else:
        import jax

        if args.part == "olmax" and not args.smoke and jax.devices()[0].platform != "tpu":
            raise SystemExit(
                "tpu_mfu: the olmax part measures a TPU; JAX's first device is "
                f"{jax.devices()[0].platform} (use --smoke for the CPU path)"
            )
    part = part_olmax(args) if args.part == "olmax" else part_peer(args)
    write_part(args.out, part)
    print(f"wrote {args.out}")
    failed = (part.get("olmax") or {}).get("error") if args.part == "peer" else None
    if failed:
        print(f"tpu_mfu: {failed}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

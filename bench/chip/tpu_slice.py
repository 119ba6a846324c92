"""OLMo 3 7B on a pod slice: the per-chip step measured on one v5e chip, the slice's plans compiled here.

The chip part (`--part chip`, on the device). A slice's chip runs the 7B's step on its own rows (v5e-256:
2 rows of 8,192 tokens; v5e-64: 8, in microbatches) with every weight gathered to it one layer at a time
in bf16; what it computes and keeps is the 32 layers' work and activations for those rows, and the head's.
One chip cannot hold the 7B's weights and optimizer state, so the chip part times the same work on
what fits: one layer's weights in bf16, as gathered, serving the period of four layers (3 sliding + 1
full) whose scan runs 8 times over (`Transformer.hidden(repeat=8)`: 32 layers of matmuls, attention and
kept activations, the weight's gradient summing its 32 uses) with a 1,024-token head (`stack` rows), and the real 100,278-token head
alone on the same rows (`head` rows: the fused LM-head/CE and its backward, `olmax.train.loss`). A
step's compute on the slice is then a stack row's time plus its head row's; what the emulation leaves
out is small and is added from the plan instead: the embedding's lookup and its all-to-all, the
optimizer's update of a chip's 1/N shard of the state (12 bytes a parameter, ~0.3 GB at 256 chips, a
few milliseconds of HBM traffic), and the collectives (olmax.train.slice_model). Each row's rate is
the fraction of the chip's bf16 peak its executed FLOPs (3 x forward + what the remat policy recomputes)
ran at: the rate `olmax train --plan` predicts a slice's compute from (slice_model.MEASURED_RATE).

Timing: each row is compiled (its plan and compile time kept), run once untimed, then `--steps` times,
each ended by `block_until_ready`; the row's figure is the median. One process runs every row (one
program holds the chip); a row that does not fit is recorded with the compiler's error.

The plan part (`--part plans`, here, libtpu importable): `olmax train --plan` for each slice (v5e-256,
v5e-64, v5p-128, v5p-512) with the shipped `olmo3_7b_stage1`, as JSON; `--part maxtext` MaxText's own
plan of its OLMo 3 7B for v5e-256 (bench/chip/maxtext_peer.py --aot), its compiled step's collectives
counted from XLA's dump by olmax's own parser. `--merge` writes the record bench/results/tpu_slice.json from
the parts (a later maxtext part's settings replace an earlier one's), predicting each slice's step from the
chip's rates.

On the device, one call of ~5 minutes (after `bash bench/setup/tpu_wheels.sh install /tmp/site` and `export
PYTHONPATH=$PYTHONPATH:/tmp/site:$PWD`; the whole command: docs/tpu.md#benchmark-and-ci): `python3 -m
bench.chip.tpu_slice --part chip --out $OUT/chip.json`. Here: `--part chip --smoke` runs the same code on a tiny model on the CPU;
`--check-rows` compiles the chip rows for a v5e ahead of time (libtpu importable) to see that they fit.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from olmax.train.plan import compiled_plan_bytes

GIB = 1 << 30
REPEAT = 8  # one period of 4 layers, run 8 times over: the 7B's 32 layers
SEQ = 8192
HEAD_VOCAB = 100_278  # dolma2's vocabulary (padded to 100,352 by the model)
# (name, kind, remat, rows per microbatch, microbatches): the slices' per-chip rows (olmax train --plan)
ROWS = (
    ("full_b2", "stack", "full", 2, 1),
    ("save_context_down_b1x2", "stack", "save:context,down", 1, 2),
    ("head_b1", "head", "-", 1, 1),
    ("head_b2", "head", "-", 2, 1),
    ("save_context_o_down_b1x2", "stack", "save:context,o,down", 1, 2),
)


def model_config(remat: str, smoke: bool):
    """OLMo 3 7B's layer shapes with one period of layers and a 1,024-token head (smoke: a tiny model)."""
    from olmax.model import PRESETS

    base = PRESETS["tiny" if smoke else "olmo3_7b"]()
    return dataclasses.replace(
        base,
        n_layers=base.scan_group,
        layer_types=base.layer_types[: base.scan_group],
        vocab_size=256 if smoke else 1024,
        dtype="bfloat16",
        remat=remat,
        attention_impl="auto",
    )


def stack_step(cfg, n_micro: int):
    """grads(params, ids (M, b, L)): 32 layers' work on one layer's weights, summed over M microbatches.

    `params` holds one layer (leading axis 1); the step broadcasts it to the period's 4 layers (3 sliding
    windows, 1 full: the slices of a broadcast are the one layer, so nothing is copied) and runs the
    period REPEAT times, so each of the 32 layer runs has a 7B layer's shapes, kernel and kept
    activations while the chip holds 0.44 GB of weights: what a slice's chip holds gathered for one layer.
    The weights are donated to the gradients that replace them (the next call's weights)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from olmax.train.loss import HeadLoss, head_cross_entropy
    from olmax.train.step import model_graphdef

    graphdef, _ = model_graphdef(cfg)
    head = HeadLoss(1e-5, cfg.vocab_size, cfg.padded_vocab)

    def loss(params: dict, ids_BxL: jax.Array) -> jax.Array:
        period = {
            **params,
            "blocks": jax.tree.map(
                lambda a: jnp.broadcast_to(a, (cfg.n_layers, *a.shape[1:])), params["blocks"]
            ),
        }
        model = nnx.merge(graphdef, period)
        h_BxLxD = model.hidden(ids_BxL, repeat=REPEAT)
        ce, z, _ = head_cross_entropy(h_BxLxD, params["lm_head"], ids_BxL, head)
        return ce + z

    grad = jax.grad(loss)

    def step(params: dict, ids_MxBxL: jax.Array) -> dict:
        if n_micro == 1:
            return grad(params, ids_MxBxL[0])

        def add(acc: dict, ids: jax.Array) -> tuple[dict, None]:
            return jax.tree.map(jnp.add, acc, grad(params, ids)), None

        return jax.lax.scan(add, jax.tree.map(jnp.zeros_like, params), ids_MxBxL)[0]

    return jax.jit(step, donate_argnums=(0,))


def stack_args(cfg, rows: int, n_micro: int, seq: int):
    """One layer's bf16 params (as a slice's chip holds a layer once gathered), the small head, token ids."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from olmax.train.config import OptimConfig
    from olmax.train.step import init_state

    def one_layer():
        params = init_state(cfg, OptimConfig(), 0)["params"]
        params = {**params, "blocks": jax.tree.map(lambda a: a[:1], params["blocks"])}
        return jax.tree.map(lambda a: a.astype(jnp.bfloat16), params)

    ids = np.random.default_rng(0).integers(0, cfg.vocab_size, (n_micro, rows, seq), dtype=np.int32)
    return jax.jit(one_layer)(), jnp.asarray(ids)


def head_step():
    """grads(h, w, ids) of the fused LM head + CE: dh and dW, the real head's whole backward."""
    import jax

    from olmax.train.loss import HeadLoss, head_cross_entropy

    def loss(h_BxLxD, w_DxV, ids_BxL):
        ce, z, _ = head_cross_entropy(h_BxLxD, w_DxV, ids_BxL, HeadLoss(1e-5, HEAD_VOCAB, 14_336))
        return ce + z

    return jax.jit(jax.grad(loss, argnums=(0, 1)))


def head_args(d_model: int, vocab: int, rows: int, seq: int, smoke: bool):
    import jax
    import jax.numpy as jnp

    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    h = jax.random.normal(k1, (rows, seq, d_model), jnp.bfloat16)
    w = jax.random.normal(k2, (d_model, vocab), jnp.float32) * 0.02
    ids = jax.random.randint(k3, (rows, seq), 0, HEAD_VOCAB if not smoke else vocab, jnp.int32)
    return h, w, ids


def executed_flops(kind: str, remat: str, rows: int, n_micro: int, seq: int, smoke: bool) -> float:
    """FLOPs a row runs: 3 x forward (+ the policy's recompute) over its tokens."""
    from olmax.model.flops import forward_flops, recompute_flops

    tokens = rows * n_micro * seq
    if kind == "head":
        d = model_config("full", smoke).d_model
        vocab = 256 if smoke else HEAD_VOCAB
        return 3 * 2 * d * vocab * tokens
    period = model_config(remat, smoke)
    cfg = dataclasses.replace(
        period, n_layers=period.n_layers * REPEAT, layer_types=period.layer_types * REPEAT
    )
    fwd = forward_flops(cfg, seq).per_token
    return tokens * (3 * fwd + recompute_flops(cfg, remat, seq))


def build(spec: tuple, smoke: bool, seq: int):
    """(jitted function, a function making its arguments) of one row."""
    name, kind, remat, rows, n_micro = spec
    if kind == "head":
        cfg = model_config("full", smoke)
        vocab = cfg.padded_vocab if smoke else 100_352
        return head_step(), lambda: head_args(cfg.d_model, vocab, rows, seq, smoke)
    cfg = model_config(remat, smoke)
    return stack_step(cfg, n_micro), lambda: stack_args(cfg, rows, n_micro, seq)


def _again(kind: str, args: tuple, out: Any) -> tuple:
    """The next call's arguments: a stack row's weights were donated, its gradients take their place."""
    return (out, *args[1:]) if kind == "stack" else args


def run_row(spec: tuple, smoke: bool, seq: int, steps: int) -> dict[str, Any]:
    """Compile, warm up and time one row; errors (out of memory) come back in the row."""
    import jax

    name, kind, remat, rows, n_micro = spec
    out: dict[str, Any] = {
        "row": name,
        "kind": kind,
        "remat": remat,
        "rows": rows,
        "microbatches": n_micro,
        "seq": seq,
    }
    try:
        fn, make_args = build(spec, smoke, seq)
        args = make_args()
        t0 = time.perf_counter()
        compiled = fn.lower(*args).compile()
        out.update(compile_s=time.perf_counter() - t0, plan_bytes=compiled_plan_bytes(compiled))
        out["splash_calls"] = compiled.as_text().count("tpu_custom_call")
        args = _again(kind, args, jax.block_until_ready(compiled(*args)))  # untimed: the first run
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            result = jax.block_until_ready(compiled(*args))
            times.append(time.perf_counter() - t0)
            args = _again(kind, args, result)
    except Exception as e:  # an out-of-memory compile or run: the row says so, the others go on
        out["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:400]}"
        return out
    flops = executed_flops(kind, remat, rows, n_micro, seq, smoke)
    out.update(times_s=times, step_s=statistics.median(times), executed_flops=flops)
    return out


def chip_part(args: argparse.Namespace) -> dict[str, Any]:
    import jax

    from bench.harness import chip_facts, datasheet_peak

    seq = 256 if args.smoke else SEQ
    device = jax.devices()[0]
    peak = datasheet_peak(device.device_kind) if device.platform == "tpu" else None
    rows = [r for r in ROWS if not args.rows or r[0] in args.rows.split(",")]
    part: dict[str, Any] = {
        "part": "chip",
        "chip": chip_facts(),
        "peak_flops": peak,
        "smoke": args.smoke,
        "rows": [],
    }
    for spec in rows:
        r = run_row(spec, args.smoke, seq, args.steps)
        if peak and "step_s" in r:
            r["rate"] = r["executed_flops"] / r["step_s"] / peak
        part["rows"].append(r)
        print(json.dumps({k: v for k, v in r.items() if k != "times_s"}), flush=True)
        if args.out:  # what is done so far survives a later row's crash
            Path(args.out).write_text(json.dumps(part, indent=1))
    return part


def check_rows(args: argparse.Namespace) -> None:
    """Each chip row compiled for a v5e:1x1 here (libtpu importable): does it fit the chip?"""
    from olmax.train.plan import CHIPS, Topology

    devices = Topology(CHIPS["v5e"], (1, 1)).devices()
    import jax

    for spec in [r for r in ROWS if not args.rows or r[0] in args.rows.split(",")]:
        fn, make_args = build(spec, False, SEQ)
        abstract = jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(
                a.shape, a.dtype, sharding=jax.sharding.SingleDeviceSharding(devices[0])
            ),
            jax.eval_shape(make_args),
        )
        t0 = time.perf_counter()
        try:
            size = compiled_plan_bytes(fn.lower(*abstract).compile())
            print(
                f"{spec[0]}: {size / GIB:.2f} GiB, compiled in {time.perf_counter() - t0:.0f} s", flush=True
            )
        except Exception as e:
            print(f"{spec[0]}: {str(e).splitlines()[0][:300]}", flush=True)


# ----- here: the slices' plans, MaxText's, and the record -----

SLICES = ("v5e-256", "v5e-64", "v5p-128", "v5p-512")
CONFIG = "olmo3_7b_stage1"


def plans_part(args: argparse.Namespace) -> dict[str, Any]:
    """`olmax train --plan` for each slice, in this process (libtpu importable), one JSON part each."""
    import jax

    from olmax.train.config import load_config
    from olmax.train.plan import parse_topology, plan_report

    jax.config.update("jax_platforms", "cpu")
    out = {"part": "plans", "config": CONFIG, "plans": {}}
    for name in (args.slices or ",".join(SLICES)).split(","):
        cfg = load_config(CONFIG, ["data.mix=plan", *args.overrides])
        t0 = time.perf_counter()
        report = plan_report(
            cfg, parse_topology(name), say=lambda line, n=name: print(f"{n}: {line}", flush=True)
        )
        report["wall_s"] = time.perf_counter() - t0
        out["plans"][name] = report
        print(
            f"{name}: remat {report['remat']}, {report.get('plan_bytes_per_chip', 0) / GIB:.2f} GiB",
            flush=True,
        )
        if args.out:
            Path(args.out).write_text(json.dumps(out, indent=1))
    return out


def maxtext_part(args: argparse.Namespace) -> dict[str, Any]:
    """MaxText's own plan of its OLMo 3 7B for v5e-256 at the stage-1 shapes (global batch 512 x 8192: 2 rows a
    chip), compiled here by its train_compile: its launcher's settings, then its remat `full`. XLA dumps each
    compiled step's HLO, and the same parser as olmax's plan counts its collectives (a step the compiler
    refuses for memory is dumped all the same, after its optimizations)."""
    import tempfile

    from bench.chip.maxtext_peer import run_peer

    root = Path(__file__).resolve().parents[2]
    out: dict[str, Any] = {"part": "maxtext", "topology": "v5e-256", "rows": []}
    for setting in (args.settings or "launcher,full").split(","):
        with tempfile.TemporaryDirectory(prefix="maxtext_hlo_") as dump:
            env = {
                "PYTHONPATH": str(root / ".venv-libtpu"),
                "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
                "TPU_WORKER_HOSTNAMES": "localhost",
                "XLA_FLAGS": f"--xla_dump_to={dump} --xla_dump_hlo_as_text --xla_dump_hlo_module_re=train_step",
            }
            rec = run_peer(
                setting,
                layers=32,
                vocab=HEAD_VOCAB,
                seq=SEQ,
                batch=2,
                steps=5,
                timeout_s=2400,
                env=env,
                python=str(root / ".venv-maxtext" / "bin" / "python"),
                site=root / ".venv-maxtext" / "site",
                aot=True,
                topology="v5e-256",
            )
            row = {k: v for k, v in rec.items() if k not in ("log_tail", "command")}
            row.update(maxtext_collectives(Path(dump)))
        out["rows"].append(row)
        gib = rec.get("hbm_estimate_gib") or rec.get("oom_temp_gib")
        print(
            f"maxtext {setting}: {rec.get('error', 'fits')}, {gib} GiB, "
            f"{row.get('whole_gradient_all_reduces')} whole-gradient all-reduces",
            flush=True,
        )
        if args.out:
            Path(args.out).write_text(json.dumps(out, indent=1))
    return out


def maxtext_weight_shapes() -> set[tuple[int, ...]]:
    """The 7B's weight shapes in MaxText's layout (heads kept as their own axis) and in olmax's."""
    from olmax.train.config import load_config

    m = load_config(CONFIG, ["data.mix=plan"]).model
    d, f, h, kv, v = m.d_model, m.mlp_hidden, m.n_heads, m.n_kv_heads, HEAD_VOCAB
    hd = m.head_dim or d // h
    return {
        (d, h, hd),
        (h, hd, d),
        (d, kv, hd),
        (d, f),
        (f, d),
        (d, d),
        (d, v),
        (v, d),
        (d, 100_352),
        (100_352, d),
    }


def maxtext_collectives(dump: Path) -> dict[str, Any]:
    """The collectives of the train step XLA dumped into `dump` (its largest optimized module), by kind,
    and how many all-reduce a weight's whole gradient (leading unit axes dropped, as MaxText's scan adds)."""
    from olmax.train import collectives as coll

    found_files = sorted(dump.glob("*train_step*after_optimizations.txt"), key=lambda f: f.stat().st_size)
    if not found_files:
        return {}
    found = coll.collectives(found_files[-1].read_text())
    squeezed = [dataclasses.replace(c, shape=tuple(n for n in c.shape if n != 1) or (1,)) for c in found]
    whole = coll.whole_gradient_all_reduces(squeezed, maxtext_weight_shapes())
    return {
        "collectives": coll.summarize(found),
        "whole_gradient_all_reduces": len(whole),
        "whole_gradient_all_reduce_dtypes": sorted({c.dtype for c in whole}),
    }


def maxtext_summary(peer: dict) -> dict[str, Any]:
    """MaxText's plans per chip for v5e-256: the whole plan where it compiled, else the temporaries its
    out-of-memory error names (a lower bound of the plan)."""
    rows = {r["setting"]: r for r in peer["rows"]}

    def gib(r: dict | None) -> float | None:
        if not r:
            return None
        return r.get("hbm_estimate_gib") or r.get("oom_temp_gib")

    return {
        "maxtext_plan_gib_v5e_256": gib(rows.get("launcher")),
        "maxtext_fits_v5e_256": "error" not in rows.get("launcher", {"error": 1}),
        "maxtext_full_plan_gib_v5e_256": gib(rows.get("full")),
        "maxtext_full_fits_v5e_256": "error" not in rows.get("full", {"error": 1}),
        "maxtext_whole_gradient_all_reduces_v5e_256": rows.get("launcher", {}).get(
            "whole_gradient_all_reduces"
        ),
    }


def chip_rates(chip: dict) -> dict[tuple[str, int], dict]:
    """Per (remat, rows per microbatch): a slice chip's step on the chip, its stack row plus its head row
    once per microbatch, and the rate its executed FLOPs (the 7B's, real head included) ran at."""
    from olmax.model import PRESETS
    from olmax.train.slice_model import executed_flops_per_token

    heads = {r["rows"]: r for r in chip["rows"] if r["kind"] == "head" and "step_s" in r}
    cfg = dataclasses.replace(PRESETS["olmo3_7b"](), dtype="bfloat16")
    out = {}
    for r in chip["rows"]:
        if r["kind"] != "stack" or "step_s" not in r or r["rows"] not in heads:
            continue
        step = r["step_s"] + r["microbatches"] * heads[r["rows"]]["step_s"]
        tokens = r["rows"] * r["microbatches"] * r["seq"]
        flops = tokens * executed_flops_per_token(
            dataclasses.replace(cfg, remat=r["remat"]), r["remat"], r["seq"]
        )
        out[(r["remat"], r["rows"])] = {
            "row": r["row"],
            "step_s": step,
            "stack_s": r["step_s"],
            "head_s": heads[r["rows"]]["step_s"],
            "rate": flops / step / chip["peak_flops"],
            "mfu": tokens * 3 * _fwd_per_token(cfg, r["seq"]) / step / chip["peak_flops"],
        }
    return out


def _fwd_per_token(cfg, seq: int) -> float:
    from olmax.model.flops import forward_flops

    return forward_flops(cfg, seq).per_token


def predictions(plans: dict, rates: dict) -> dict[str, dict]:
    """Each slice's predicted step from its plan's collectives and the chip's measured rates."""
    from olmax.model import PRESETS
    from olmax.train.collectives import expand
    from olmax.train.plan import parse_topology, torus
    from olmax.train.slice_model import StepShape, predict

    cfg = dataclasses.replace(PRESETS["olmo3_7b"](), dtype="bfloat16")
    table = {k: v["rate"] for k, v in rates.items()}
    out = {}
    for name, plan in plans.items():
        if not plan.get("fits"):
            continue
        pred = predict(
            dataclasses.replace(cfg, remat=plan["remat"]),
            StepShape(plan["remat"], plan["per_device_batch"], plan["microbatches"], plan["seq_len"]),
            torus(parse_topology(name)),
            expand(plan["collective_list"]),
            table,
        )
        tokens = plan["per_device_batch"] * plan["microbatches"] * plan["seq_len"]
        out[name] = {**pred.as_dict(), "tokens_per_chip_per_s": tokens / pred.step_s}
    return out


def merge(args: argparse.Namespace) -> dict[str, Any]:
    """bench/results/tpu_slice.json from the parts: the chip's rows and rates, each slice's plan and
    predicted step, MaxText's plan, and the summary of the figures that matter most."""
    from bench.record import Record
    from olmax.train.config import load_config
    from olmax.train.plan import NOTICE_S, checkpoint_bytes

    parts = [json.loads(Path(p).read_text()) for p in args.merge]
    by = {p["part"]: p for p in parts}
    plans = {name: r for p in parts if p["part"] == "plans" for name, r in p["plans"].items()}
    chip = by.get("chip")
    peers = [p for p in parts if p["part"] == "maxtext"]  # later parts' rows replace earlier ones' settings
    rows = {r["setting"]: r for p in peers for r in p["rows"]}
    peer = {**peers[-1], "rows": list(rows.values())} if peers else None
    rates = chip_rates(chip) if chip else {}
    pred = predictions(plans, rates) if rates else {}
    rec = Record("tpu_slice", argv=sys.argv, smoke=False, results=args.results)
    rec.side("olmax", version="checkout", setting=f"{CONFIG}, model.remat auto, splash attention")
    mt = maxtext_summary(peer) if peer else {}
    if peer:
        version = next((r.get("maxtext_version") for r in peer["rows"] if r.get("maxtext_version")), "0.2.5")
        rec.side(
            "maxtext",
            version=version,
            setting="its OLMo 3 stage-1 launcher's remat and kernel, then remat full",
        )
    v256, v64 = plans.get("v5e-256", {}), plans.get("v5e-64", {})
    summary = {
        "predicted_mfu_v5e_256": pred.get("v5e-256", {}).get("mfu"),
        "per_device_throughput_v5e_64_over_256": (
            pred["v5e-64"]["tokens_per_chip_per_s"] / pred["v5e-256"]["tokens_per_chip_per_s"]
            if "v5e-64" in pred and "v5e-256" in pred
            else None
        ),
        "fp32_weight_all_gathers": v256.get("fp32_weight_all_gathers"),
        "whole_gradient_all_reduces": v256.get("whole_gradient_all_reduces"),
        "olmax_plan_gib_v5e_256": (v256.get("plan_bytes_per_chip") or 0) / GIB or None,
        **mt,
        "remat_v5e_256": v256.get("remat"),
        "remat_v5e_64": v64.get("remat"),
        "measured_on_chip": {f"{k[0]} x {k[1]}": v for k, v in rates.items()},
    }
    for (policy, rows), v in rates.items():
        rec.figure(
            f"chip_step_{v['row']}",
            [v["step_s"]],
            "s",
            remat=policy,
            rows=rows,
            stack_s=v["stack_s"],
            head_s=v["head_s"],
        )
        rec.figure(f"chip_mfu_{v['row']}", [100 * v["mfu"]], "%", remat=policy, rows=rows)
    for name, p in pred.items():
        key = name.replace("-", "_")
        rec.figure(
            f"predicted_step_{key}", [p["step_s"]], "s", compute_s=p["compute_s"], exposed_s=p["exposed_s"]
        )
        rec.figure(f"predicted_mfu_{key}", [100 * p["mfu"]], "%", rate_from=p["rate_from"])
    if summary["per_device_throughput_v5e_64_over_256"]:
        rec.figure(
            "throughput_v5e_64_over_256",
            [100 * summary["per_device_throughput_v5e_64_over_256"]],
            "%",
            what="v5e-64's predicted tokens per chip per second over v5e-256's",
        )
    for name, plan in plans.items():
        if plan.get("plan_bytes_per_chip"):
            rec.figure(
                f"plan_gib_{name.replace('-', '_')}",
                [plan["plan_bytes_per_chip"] / GIB],
                "GiB",
                remat=plan["remat"],
            )
    for name, plan in plans.items():  # what a preemption's save costs each host (olmax train --plan's figure)
        ckpt = checkpoint_bytes(load_config(CONFIG, ["data.mix=plan"]), plan["hosts"])
        key = name.replace("-", "_")
        rec.figure(f"checkpoint_gb_per_host_{key}", [ckpt["checkpoint_bytes_per_host"] / 1e9], "GB")
        rec.figure(
            f"checkpoint_rate_for_notice_{key}",
            [ckpt["checkpoint_rate_for_notice"] / 1e6],
            "MB/s",
            what=f"a host's save and upload rate that fits the checkpoint in a {NOTICE_S} s preemption notice",
        )
    for setting in ("", "full_"):  # its launcher's settings, then its remat full
        if mt.get(f"maxtext_{setting}plan_gib_v5e_256"):
            gib, fits = mt[f"maxtext_{setting}plan_gib_v5e_256"], mt[f"maxtext_{setting}fits_v5e_256"]
            rec.figure(f"maxtext_{setting}plan_gib_v5e_256", [gib], "GiB", fits=fits)
    rec.data.update(
        summary=summary,
        chip=chip,
        rates=[{"remat": k[0], "rows": k[1], **v} for k, v in rates.items()],
        plans=plans,
        predictions=pred,
        maxtext=peer,
    )
    rec.finish([])
    return rec.data


def main(argv: list[str] | None = None) -> int:
    from olmax.model.libtpu import libtpu_env

    os.environ.update(
        libtpu_env(os.environ)
    )  # before JAX starts the chip: splash's tiles need the scoped VMEM
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--part", choices=("chip", "plans", "maxtext"), help="run one part and write its JSON to --out"
    )
    p.add_argument(
        "--slices", default=None, help=f"--part plans: comma-separated slices (default {','.join(SLICES)})"
    )
    p.add_argument(
        "--merge", nargs="+", type=Path, help="parts' JSON files: write bench/results/tpu_slice.json"
    )
    p.add_argument("--results", default=None, help="--merge: the record's folder (default bench/results)")
    p.add_argument(
        "--settings", default=None, help="--part maxtext: comma-separated settings (default launcher,full)"
    )
    p.add_argument("overrides", nargs="*", default=[], help="--part plans: config overrides")
    p.add_argument("--check-rows", action="store_true", help="compile the chip rows for a v5e here (libtpu)")
    p.add_argument("--rows", default=None, help="comma-separated row names (default: all)")
    p.add_argument("--steps", type=int, default=3, help="timed steps per row (after one untimed)")
    p.add_argument("--smoke", action="store_true", help="a tiny model at sequence 256, on any backend")
    p.add_argument("--out", default=None, help="where a part writes its JSON")
    args = p.parse_args(argv)
    if args.check_rows:
        check_rows(args)
        return 0
    if args.merge:
        print(json.dumps(merge(args)["summary"], indent=1))
        return 0
    if args.part == "plans":
        plans_part(args)
        return 0
    if args.part == "maxtext":
        maxtext_part(args)
        return 0
    if args.part == "chip":
        part = chip_part(args)
        return 0 if all("error" not in r for r in part["rows"]) else 1
    p.error("give --part or --check-rows")
    return 2


if __name__ == "__main__":
    sys.exit(main())

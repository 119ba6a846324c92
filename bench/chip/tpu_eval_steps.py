"""What bench/chip/tpu_eval.py compiles and times: OLMo 3 7B's eval step on TPU topologies, ahead of time
(its plan part), and the eval and train rows on one chip (its chip part), all at seq 8192 but under --smoke.

Every model is the stage-1 recipe's (configs/olmo3_7b_stage1.yaml: bf16 compute, fp32 parameters) at the
row's layers and vocabulary. The eval rows run the held-out score kernel of olmax.evals.eval_model on a
model placed as every eval command places it; the train row is the trainer's own step, built as
bench/chip/tpu_mfu.py builds it: compiled ahead of time onto a chip that holds nothing yet (its buffer plan
checked against the chip's memory before anything is allocated), then the state initialised in its shards
and the one compiled step run on it, donating the state each step.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

RECIPE = "olmo3_7b_stage1"
SEQ = 8192
GIB = 2**30
# the hosts an eval job runs on, as Cloud TPU names them (olmax.train.plan.parse_topology: a v5e-8 is one
# host of 8 chips, v5e:2x4; a v5p-8 is 4 chips of 2 cores, v5:2x2x1), by record key
HOSTS = (("v5e_8", "v5e-8"), ("v5e_4", "v5e-4"), ("v5p_8", "v5p-8"))
CHIP = "v5e-1"  # the chip part's one chip
SMOKE_MODEL = [  # the chip part's model on a CPU (--smoke)
    "model.d_model=64",
    "model.n_heads=2",
    "model.n_kv_heads=2",
    "model.head_dim=128",
    "model.mlp_hidden=176",
    "model.sliding_window=128",
    "model.max_position_embeddings=256",
    "model.eos_token_id=999",
    "model.pad_token_id=998",
    "data.seq_len=256",
]
CHIP_ROWS = [  # in the order the chip part runs them (bench/chip/tpu_eval.py ROW_GROUPS: its processes)
    {"name": "train_b1", "kind": "train", "rows": 1, "vocab": 1024},
    {"name": "eval_b1", "kind": "eval", "rows": 1, "vocab": 1024},
    {"name": "eval_b4", "kind": "eval", "rows": 4, "vocab": 1024},
    {"name": "eval_real_vocab_b1", "kind": "eval", "rows": 1, "vocab": 100_278},
]
SMOKE_ROWS = ("train_b1", "eval_b1", "eval_b4")  # every kind of row, on the CPU in seconds
# The train row's remat policies, in order: the fastest that fits this model on a chip (bench/results/
# tpu_mfu.json; planned at 15.21 GiB of 15.75 here), then the next, if the chip refuses the first.
TRAIN_REMATS = ("matmuls", "matmuls_but_up")


def peak_v5e() -> float:
    from olmax.train.mfu import PEAK_FLOPS

    return PEAK_FLOPS["TPU v5 lite"]


def configs(spec: dict, smoke: bool, layers: int = 4, remat: str | None = None):
    """(ModelConfig, OptimConfig): the stage-1 recipe at this row's layers, vocabulary, kernel and remat
    (a train row's first policy, or `remat`)."""
    from olmax.train.config import load_config

    train = spec["kind"] == "train"
    overrides = [
        f"model.n_layers={layers}",
        f"model.vocab_size={spec['vocab']}",
        f"model.remat={(remat or TRAIN_REMATS[0]) if train else 'none'}",
        f"model.attention_impl={'splash' if train or smoke else 'auto'}",
    ]
    cfg = load_config(RECIPE, overrides + (SMOKE_MODEL if smoke else []))
    return cfg.model, cfg.optim


def seq_len(smoke: bool) -> int:
    return 256 if smoke else SEQ


def plan_bytes(compiled) -> int:
    m = compiled.memory_analysis()
    return m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes + m.temp_size_in_bytes


def abstract_model(cfg, mesh):
    """An EvalModel of ShapeDtypeStructs in their shards on `mesh` (nothing allocated)."""
    import jax

    from olmax.evals.eval_mesh import eval_config, param_shardings
    from olmax.evals.eval_model import EvalModel
    from olmax.train.step import model_graphdef

    cfg = eval_config(cfg)
    shardings = param_shardings(cfg, mesh)
    params = jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), model_graphdef(cfg)[1], shardings
    )
    return EvalModel(cfg, params, mesh)


def compile_eval(cfg, mesh, rows: int, seq: int) -> dict:
    """The held-out score kernel of `cfg` for `rows` x `seq` compiled for `mesh`: plan, kernel, calls."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec

    from olmax.evals.eval_mesh import describe
    from olmax.evals.eval_model import compiled_step
    from olmax.model.sharding import BATCH_AXES

    model = abstract_model(cfg, mesh)
    on_rows = NamedSharding(mesh, PartitionSpec(BATCH_AXES, None))
    ids = jax.ShapeDtypeStruct((rows, seq), np.int32, sharding=on_rows)
    mask = jax.ShapeDtypeStruct((rows, seq), np.float32, sharding=on_rows)
    t0 = time.perf_counter()
    compiled = compiled_step("score", model).lower(model.params, ids, ids, mask).compile()
    return {
        "compile_s": time.perf_counter() - t0,
        "plan_bytes": plan_bytes(compiled),
        "argument_bytes": compiled.memory_analysis().argument_size_in_bytes,
        "temp_bytes": compiled.memory_analysis().temp_size_in_bytes,
        "kernel": kernel(model.cfg, mesh, seq),
        "mosaic_calls": compiled.as_text().count("tpu_custom_call"),
        "mesh": describe(mesh),
        "rows": rows,
    }


def build_train(cfg, optim, mesh, seq: int):
    """(the trainer's step for `cfg` at batch 1 on `mesh` running its executable, the executable, compile
    seconds): compiled ahead of time from the state's and the batch's shapes, so nothing is on the chip while
    it compiles and loads, and every step runs this one executable."""
    import jax
    import numpy as np

    from olmax.train.mesh import batch_sharding
    from olmax.train.step import abstract_state, make_train_step

    step = make_train_step(cfg, optim, mesh, n_micro=1, per_device_batch=1, t_max=1000)
    abstract, _ = abstract_state(cfg, optim, mesh)
    ids = jax.ShapeDtypeStruct((1, seq), np.int32, sharding=batch_sharding(mesh))
    t0 = time.perf_counter()
    compiled = step.lower(abstract, {"input_ids": ids}).compile()
    return step.with_compiled(compiled), compiled, time.perf_counter() - t0


def compile_train(cfg, optim, mesh, seq: int) -> dict:
    """The trainer's step for `cfg` at batch 1 compiled for `mesh` (a 1-device mesh): its plan."""
    _, compiled, compile_s = build_train(cfg, optim, mesh, seq)
    mem = compiled.memory_analysis()
    return {
        "compile_s": compile_s,
        "plan_bytes": plan_bytes(compiled),
        "argument_bytes": mem.argument_size_in_bytes,
        "temp_bytes": mem.temp_size_in_bytes,
        "mosaic_calls": compiled.as_text().count("tpu_custom_call"),
    }


def kernel(cfg, mesh, seq: int) -> str:
    """The attention kernel `cfg` runs on `mesh`'s devices at `seq` (what `auto` resolves to there)."""
    import jax.numpy as jnp

    from olmax.model.attention import resolve_impl

    platform = mesh.devices.flat[0].platform
    return resolve_impl(cfg.attention_impl, jnp.dtype(cfg.dtype), seq, cfg.head_dim, platform)


def host_mesh(host: str, shape: tuple[int, int] | None, cfg):
    """A (data, fsdp) mesh over the devices of TPU host `host` (libtpu's description, no chip needed):
    `shape`, or what `--mesh auto` picks there for `cfg`; and the HBM one program may hold on a chip."""
    import numpy as np
    from jax.sharding import Mesh

    from olmax.evals.eval_mesh import auto_shape, param_bytes
    from olmax.model.sharding import BATCH_AXES
    from olmax.train.plan import hbm_limit, parse_topology

    devices = parse_topology(host).devices()
    hbm = hbm_limit(devices[0])
    data, fsdp = shape or auto_shape(len(devices), param_bytes(cfg), hbm)
    return Mesh(np.asarray(devices, dtype=object).reshape(data, fsdp), BATCH_AXES), hbm


def plan_7b(key: str, host: str, layers: int | None) -> dict:
    """The job's eval step of the shipped 7B (or its first `layers` layers) on TPU host `host`."""
    from olmax.evals.eval_model import rows_per_batch
    from olmax.evals.hook import eval_batch_size
    from olmax.train.config import load_config
    from olmax.train.plan import parse_topology

    cfg = load_config(RECIPE).model
    if layers:
        cfg = cfg.replace(n_layers=layers)
    out: dict[str, Any] = {
        "key": key,
        "host": host,
        "topology": parse_topology(host).libtpu_name,
        "layers": cfg.n_layers,
        "seq": SEQ,
        "dtype": cfg.dtype,
    }
    try:
        mesh, hbm = host_mesh(host, None, cfg)
        rows = rows_per_batch(eval_batch_size(SEQ, cfg.vocab_size), mesh)
        out.update(
            chips=mesh.size,
            hbm_bytes=hbm,
            **compile_eval(cfg, mesh, rows, SEQ),
        )
        out["fits"] = out["plan_bytes"] <= hbm
    except Exception as e:  # a plan over the HBM fails to compile: RESOURCE_EXHAUSTED
        out.update(fits=False, error=f"{type(e).__name__}: {e}"[:1500])
    return out


def random_model(cfg, mesh):
    """An EvalModel of `cfg` with fresh parameters initialised in their shards on `mesh`."""
    import jax
    from flax import nnx

    from olmax.evals.eval_mesh import eval_config, param_shardings
    from olmax.evals.eval_model import EvalModel
    from olmax.model.transformer import Transformer

    cfg = eval_config(cfg)
    init = jax.jit(
        lambda: nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))[1].to_pure_dict(),
        out_shardings=param_shardings(cfg, mesh),
    )
    return EvalModel(cfg, init(), mesh)


def eval_row(spec: dict, args: argparse.Namespace) -> dict:
    """Held-out eval of one row: `score` over --batches batches (--reps times), and the kernel alone."""
    import jax
    import numpy as np

    from olmax.evals.eval_mesh import describe, eval_mesh
    from olmax.evals.eval_model import compiled_step, on_rows
    from olmax.evals.scoring import score
    from olmax.model.flops import forward_flops

    cfg, _ = configs(spec, args.smoke)
    seq, rows = seq_len(args.smoke), spec["rows"]
    model = random_model(cfg, eval_mesh("1x1", cfg))
    rng = np.random.default_rng(0)
    ids = rng.integers(0, cfg.vocab_size, (rows * args.batches, seq + 1)).astype(np.int32)
    inputs, targets, mask = ids[:, :-1], ids[:, 1:], np.ones((ids.shape[0], seq), np.float32)
    t0 = time.perf_counter()
    score(model, inputs[:rows], targets[:rows], mask[:rows], batch_size=rows)  # compiles
    compile_s = time.perf_counter() - t0
    walls = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        score(model, inputs, targets, mask, batch_size=rows)
        walls.append(time.perf_counter() - t0)
    fn = compiled_step("score", model)
    batch = [
        on_rows(model.mesh, a[:rows], t)
        for a, t in ((inputs, np.int32), (targets, np.int32), (mask, np.float32))
    ]
    steps = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(model.params, *batch))
        steps.append(time.perf_counter() - t0)
    flops = forward_flops(cfg, seq).total * rows
    tokens = rows * args.batches * seq
    return {
        "spec": spec,
        "status": "ok",
        "kernel": kernel(model.cfg, model.mesh, seq),
        "mesh": describe(model.mesh),
        "seq": seq,
        "compile_s": compile_s,
        "score_wall_s": walls,
        "tokens_per_s": [tokens / w for w in walls],
        "step_s": steps,
        "flops_per_batch": flops,
        "mfu": [flops * args.batches / w / peak_v5e() for w in walls],
        "mfu_kernel": flops / statistics.median(steps) / peak_v5e(),
    }


def train_row(spec: dict, args: argparse.Namespace) -> dict:
    """The trainer's step on the same model and chip, at the first of TRAIN_REMATS whose compiled plan fits
    the chip (checked before anything is allocated) and runs; the policies passed over, and why."""
    import jax

    limit = None if args.smoke else (jax.devices()[0].memory_stats() or {}).get("bytes_limit")
    remats, refused = TRAIN_REMATS[:1] if args.smoke else TRAIN_REMATS, []
    for remat in remats[:-1]:
        try:
            return {**time_train(spec, args, remat, limit), "refused": refused}
        except Exception as e:  # over the chip by the plan, or the chip's own out-of-memory at run time
            if "RESOURCE_EXHAUSTED" not in str(e):
                raise
            refused.append(f"{remat}: {str(e).splitlines()[0][:300]}")
    return {**time_train(spec, args, remats[-1], limit), "refused": refused}


def time_train(spec: dict, args: argparse.Namespace, remat: str, limit: int | None) -> dict:
    """The step compiled (build_train), its plan held to the chip's `limit`, then the state initialised and
    the compiled step timed: --steps blocked steps after 2 untimed ones."""
    import jax
    import numpy as np

    from olmax.model.flops import forward_flops
    from olmax.train.config import MeshConfig
    from olmax.train.mesh import global_batch, make_mesh
    from olmax.train.step import make_init

    cfg, optim = configs(spec, args.smoke, remat=remat)
    seq = seq_len(args.smoke)
    mesh = make_mesh(MeshConfig(data=1, fsdp=1), devices=jax.devices()[:1])
    step, compiled, compile_s = build_train(cfg, optim, mesh, seq)
    plan = plan_bytes(compiled)
    print(f"train_b1 {remat}: compiled in {compile_s:.0f} s, plan {plan / GIB:.2f} GiB", flush=True)
    if limit and plan > limit:
        raise RuntimeError(f"RESOURCE_EXHAUSTED: buffer plan {plan / GIB:.2f} GiB > {limit / GIB:.2f} GiB")
    t0 = time.perf_counter()
    state = make_init(cfg, optim, mesh, seed=0)
    jax.block_until_ready(state)
    init_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    batches = [
        {"input_ids": global_batch(rng.integers(0, cfg.vocab_size, (1, seq), dtype=np.int32), mesh, 1)}
        for _ in range(2)
    ]
    times, losses = [], []
    for i in range(2 + args.steps):
        t1 = time.perf_counter()
        state, metrics = step(state, batches[i % 2])
        jax.block_until_ready((state, metrics))
        if i >= 2:
            times.append(time.perf_counter() - t1)
        losses.append(float(metrics["loss"]))
    del state
    flops = 3 * forward_flops(cfg, seq).total
    return {
        "spec": spec,
        "status": "ok",
        "kernel": kernel(cfg, mesh, seq),
        "remat": cfg.remat,
        "seq": seq,
        "compile_s": compile_s,
        "plan_bytes": plan,
        "init_s": init_s,
        "step_s": times,
        "losses": losses,
        "tokens_per_s": [seq / t for t in times],
        "mfu": [flops / t / peak_v5e() for t in times],
    }

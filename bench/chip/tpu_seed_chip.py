"""What bench/chip/tpu_seed.py's child processes run, and its --plan: the CPU restore of a run's checkpoint
(`child_cpu`), the chip's restores and the logit parity with transformers (`child_chip`), the fp32 KL they
report (`kl_stats_fn`), and the programs compiled ahead of time for a v5e (`plan`). The CPU child leaves its
digests and parameters in the work folder for the chip child; the chip child reports as it goes (result
lines, bench/harness.py), which bench/chip/tpu_seed.py reads into the record (docs/tpu-seed.md)."""

from __future__ import annotations

import argparse
import json
import queue
import shutil
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench import harness


def say(msg: str) -> None:
    print(f"tpu_seed: {msg}", flush=True)


# name -> (compute dtype, attention_impl (None: the run's own, `auto` on the chip: splash), matmul precision)
VARIANTS = {
    "bf16": ("bfloat16", None, None),
    "fp32": ("float32", None, "highest"),
    "fp32_xla": ("float32", "xla", "highest"),
    "bf16_xla": ("bfloat16", "xla", None),
}


# ------------------------------------------------------------------------------------ the child: CPU


def state_digests(state) -> dict[str, dict]:
    """keystr -> {shape, dtype, xxh3_128 of the bytes} for every array of a train state."""
    import jax
    import numpy as np
    import xxhash

    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
        a = np.ascontiguousarray(jax.device_get(leaf))
        out[jax.tree_util.keystr(path)] = {
            "shape": list(a.shape),
            "dtype": str(a.dtype),
            "xxh3_128": xxhash.xxh3_128_hexdigest(a.tobytes()),
        }
    return out


def restore_run(run_dir: Path):
    """(step, state, loader state, metadata) of a run folder's newest complete checkpoint, restored as the
    trainer resumes one: its config's abstract state on this process's mesh."""
    from olmax.train.checkpoint import Checkpointer
    from olmax.train.config import load_run_config
    from olmax.train.mesh import make_mesh
    from olmax.train.step import abstract_state

    cfg = load_run_config(run_dir)
    mesh = make_mesh(cfg.mesh)
    abstract, _ = abstract_state(cfg.model, cfg.optim, mesh)
    ckpt = Checkpointer(run_dir / "checkpoints", cfg.checkpoint)
    try:
        found = ckpt.restore_newest(abstract)
    finally:
        ckpt.close()
    if found is None:
        raise RuntimeError(f"{run_dir}: no complete checkpoint")
    return (*found, cfg)


def child_cpu(args: argparse.Namespace) -> int:
    """On the CPU: restore the uninterrupted run's checkpoint, dump digests and params, save it again."""
    import jax
    import numpy as np

    from olmax.train.checkpoint import Checkpointer

    work = Path(args.work)
    dump, again = work / "cpu_dump", work / "cpu_written"
    for d in (dump, again):
        shutil.rmtree(d, ignore_errors=True)
    t0 = time.perf_counter()
    step, state, loader_state, meta, cfg = restore_run(work / "uninterrupted")
    t_restore = time.perf_counter() - t0
    digests = state_digests(state)
    dump.mkdir(parents=True)
    names = []
    for i, (path, leaf) in enumerate(jax.tree_util.tree_flatten_with_path(state["params"])[0]):
        np.save(dump / f"param{i:03d}.npy", np.asarray(jax.device_get(leaf)))
        names.append("['params']" + jax.tree_util.keystr(path))
    t1 = time.perf_counter()
    # the same state written back as a run checkpoint from the CPU (config.yaml beside it: a run folder)
    again.mkdir(parents=True)
    shutil.copyfile(work / "uninterrupted" / "config.yaml", again / "config.yaml")
    ckpt = Checkpointer(again / "checkpoints", cfg.checkpoint)
    try:
        ckpt.save(step, state, loader_state, {**meta, "devices": jax.device_count(), "written_on": "cpu"})
    finally:
        ckpt.close()
    info = {
        "device": f"{jax.device_count()} x {jax.devices()[0].device_kind} ({jax.devices()[0].platform})",
        "step": step,
        "restore_s": round(t_restore, 2),
        "save_s": round(time.perf_counter() - t1, 2),
        "arrays": len(digests),
        "digests": digests,
        "param_files": names,
    }
    (dump / "cpu.json").write_text(json.dumps(info, indent=1))
    print(
        f"tpu_seed cpu: restored step {step} on {info['device']} in {t_restore:.1f} s, wrote it back",
        flush=True,
    )
    return 0


# ----------------------------------------------------------------------------------- the child: chip


def compare_restore(run_dir: Path, cpu: dict, dump: Path) -> dict:
    """A checkpoint restored on this process's device against the CPU's restore: digests of every array,
    max |difference| and the bytes that differ in every parameter."""
    import jax
    import numpy as np

    t0 = time.perf_counter()
    step, state, _, _, _ = restore_run(run_dir)
    t_restore = time.perf_counter() - t0
    mine = state_digests(state)
    same = [k for k in cpu["digests"] if mine.get(k) == cpu["digests"][k]]
    worst, differing = 0.0, 0
    leaves = jax.tree_util.tree_leaves(state["params"])
    for i, leaf in enumerate(leaves):
        a = np.asarray(jax.device_get(leaf))
        b = np.load(dump / f"param{i:03d}.npy")
        if a.shape != b.shape:
            raise RuntimeError(f"{cpu['param_files'][i]}: {a.shape} here, {b.shape} on the CPU")
        worst = max(worst, float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))))
        differing += int(np.count_nonzero(a.view(np.uint8) != b.view(np.uint8)))
    del state
    return {
        "checkpoint": str(run_dir),
        "step": step,
        "restore_s": round(t_restore, 2),
        "arrays": len(cpu["digests"]),
        "arrays_bitwise_equal": len(same),
        "arrays_differing": sorted(set(cpu["digests"]) - set(same)),
        "params": len(leaves),
        "params_max_abs_diff": worst,
        "params_bytes_differing": differing,
    }


def kl_stats_fn(chunk: int):
    """A jitted comparison of reference logits x and candidate logits y ((L, V) fp32, L a multiple of
    `chunk`) with next-token ids t (L,): per position KL(softmax x || softmax y), top-1 agreement, max
    |x - y|, each side's cross-entropy on t and the reference's entropy.

    KL in fp32 without cancellation. With p = exp(x - max x), Z = sum p, d = x - y and E the p-weighted mean,
    KL = E[d] + log E[e^-d] exactly (lse(y) - lse(x) = log E[e^-d]), for d shifted by any constant (here its
    mean, so that E[d] ~ 0). Written as KL = r + h(r - E[d]) with r = E[e^-d - 1 + d] >= 0 and
    h(u) = log1p(u) - u, both of the size of d^2 and each taken from its Taylor series where its argument is
    small, no two terms of the size of d cancel: the result is good to ~1e-4 of itself whether d is fp32
    rounding (KL ~1e-12) or bf16's (KL ~1e-3), where the plain formula in fp32 loses ~1e-7 of |d| in
    absolute terms (and in float64, ~1e-15 of the logits). Rows go in blocks of `chunk` so the (chunk, V)
    temporaries stay small at V = 100k."""
    import jax
    import jax.numpy as jnp

    def g(d):  # e^-d - 1 + d, without cancellation near 0
        series = d * d * (0.5 - d * (1.0 / 6.0 - d * (1.0 / 24.0 - d / 120.0)))
        return jnp.where(jnp.abs(d) < 0.05, series, jnp.expm1(-d) + d)

    def h(u):  # log1p(u) - u, likewise
        series = -u * u * (0.5 - u * (1.0 / 3.0 - u * (0.25 - u / 5.0)))
        return jnp.where(jnp.abs(u) < 0.05, series, jnp.log1p(u) - u)

    def block(args):
        x, y, t = args
        m = jnp.max(x, axis=-1, keepdims=True)
        p = jnp.exp(x - m)
        z = jnp.sum(p, axis=-1)
        d = x - y
        # y + c has the same softmax for any c: centring d on its mean keeps r and h apart where p sits on
        # one token (then d there is most of E[d], and r and h(u) would both be ~E[d]^2 / 2)
        d = d - (jnp.sum(p * d, axis=-1) / z)[:, None]
        mean_d = jnp.sum(p * d, axis=-1) / z
        r = jnp.sum(p * g(d), axis=-1) / z
        kl = r + h(r - mean_d)
        lse_x = m[:, 0] + jnp.log(z)
        my = jnp.max(y, axis=-1)
        lse_y = my + jnp.log(jnp.sum(jnp.exp(y - my[:, None]), axis=-1))
        xt = jnp.take_along_axis(x, t[:, None], axis=-1)[:, 0]
        yt = jnp.take_along_axis(y, t[:, None], axis=-1)[:, 0]
        ent = jnp.log(z) + jnp.sum(p * (m - x), axis=-1) / z  # lse(x) - E[x] as two terms >= 0
        top1 = jnp.argmax(x, axis=-1) == jnp.argmax(y, axis=-1)
        return kl, top1, jnp.max(jnp.abs(x - y), axis=-1), lse_x - xt, lse_y - yt, ent

    def stats(x, y, t):
        n, v = x.shape
        shaped = (
            x.reshape(n // chunk, chunk, v),
            y.reshape(n // chunk, chunk, v),
            t.reshape(n // chunk, chunk),
        )
        return tuple(o.reshape(n) for o in jax.lax.map(block, shaped))

    return jax.jit(stats)


def hf_worker(hf_dir: Path, ids, attn: str, out: queue.Queue, info: dict) -> None:
    """transformers' Olmo3ForCausalLM in fp32 on the CPU, one sequence after another, into `out`."""
    try:
        import torch
        from transformers import Olmo3ForCausalLM

        t0 = time.perf_counter()
        model = Olmo3ForCausalLM.from_pretrained(
            str(hf_dir), dtype=torch.float32, attn_implementation=attn, use_safetensors=True
        ).eval()
        info.update(
            load_s=round(time.perf_counter() - t0, 2),
            torch=torch.__version__,
            threads=torch.get_num_threads(),
        )
        import transformers

        info["transformers"] = transformers.__version__
        times = info.setdefault("forward_s", [])
        for row in ids:
            t0 = time.perf_counter()
            with torch.no_grad():
                logits = model(torch.as_tensor(row[None], dtype=torch.long)).logits[0].float().numpy()
            times.append(round(time.perf_counter() - t0, 2))
            out.put(logits)
    except BaseException:  # noqa: BLE001 - the main thread reports it
        info["error"] = traceback.format_exc()[-3000:]
        out.put(None)


class Reference:
    """transformers' side of the parity check, started before anything else on the chip so that its CPU
    forwards run beside the restores and the compiles: the held-out ids, and their fp32 logits as they come."""

    def __init__(self, args: argparse.Namespace, work: Path, heldout: Path):
        import numpy as np

        held = np.load(heldout)
        S, L = args.parity_seqs, args.parity_len
        self.ids = np.asarray(held["ids"][:S, :L], np.int32)
        if self.ids.shape != (S, L):
            raise RuntimeError(f"{heldout} holds {held['ids'].shape}, not {S} sequences of {L} tokens")
        self.names = [str(n) for n in held["names"][:S]]
        self.info: dict[str, Any] = {"attn_implementation": args.hf_attn}  # written by the HF thread alone
        # up to three sequences ahead of the device (3.3 GB of fp32 logits each at 8,192 x 100,278)
        self.q: queue.Queue = queue.Queue(maxsize=2)
        threading.Thread(
            target=hf_worker, args=(work / "hf", self.ids, args.hf_attn, self.q, self.info), daemon=True
        ).start()

    def snapshot(self) -> dict:
        return {**self.info, "forward_s": list(self.info.get("forward_s", []))}


def parity(args: argparse.Namespace, work: Path, ref: Reference, res: dict, write) -> None:
    """bf16 / fp32 olmax on this device against transformers fp32 on the CPU, on held-out sequences; the
    figures go into `res` as they come, and `write()` saves the report after each sequence."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    from olmax.model.attention import resolve_impl
    from olmax.train.checkpoint import complete_steps, read_params
    from olmax.train.config import load_run_config
    from olmax.train.step import model_graphdef

    run = work / "uninterrupted"
    ids = ref.ids
    S, L = ids.shape
    res.update(seq_len=L, sequences=S, documents=ref.names, variants={}, hf=ref.snapshot())

    cfg = load_run_config(run)
    step = complete_steps(run / "checkpoints")[0]
    t0 = time.perf_counter()
    params = read_params(run / "checkpoints" / str(step), model_graphdef(cfg.model)[1])  # fp32, on one device
    res.update(step=step, read_params_s=round(time.perf_counter() - t0, 2), train_dtype=cfg.model.dtype)
    x_dev = jax.ShapeDtypeStruct((1, L), jnp.int32)
    lowered = {}
    for name in args.variants:  # traced one by one (the precision is fixed in the lowered program) ...
        dtype, impl, precision = VARIANTS[name]
        impl = impl or cfg.model.attention_impl
        graphdef = model_graphdef(cfg.model.replace(dtype=dtype, attention_impl=impl))[0]

        def fwd(state, x, graphdef=graphdef):
            return nnx.merge(graphdef, state)(x)[0]

        res["variants"][name] = {
            "dtype": dtype,
            "attention": resolve_impl(impl, jnp.dtype(dtype), L, cfg.model.head_dim),
            "matmul_precision": precision or "default",
        }
        try:
            with jax.default_matmul_precision(precision or "default"):
                lowered[name] = jax.jit(fwd).lower(params, x_dev)
        except Exception as e:  # noqa: BLE001 - one variant that does not build leaves the others
            res["variants"][name]["error"] = f"{type(e).__name__}: {str(e)[:1500]}"

    def compile_one(name: str):
        t0 = time.perf_counter()
        try:
            out = lowered[name].compile()
        except Exception as e:  # noqa: BLE001 - likewise
            res["variants"][name]["error"] = f"{type(e).__name__}: {str(e)[:1500]}"
            return None
        res["variants"][name]["compile_s"] = round(time.perf_counter() - t0, 1)
        return out

    t0 = time.perf_counter()
    with ThreadPoolExecutor(
        max(1, len(lowered))
    ) as pool:  # ... and compiled side by side (XLA frees the GIL)
        compiled = {k: c for k, c in zip(lowered, pool.map(compile_one, lowered)) if c is not None}
    res["compile_wall_s"] = round(time.perf_counter() - t0, 1)
    write()
    if not compiled:
        raise RuntimeError(
            "no variant compiled: " + "; ".join(v.get("error", "") for v in res["variants"].values())
        )
    chunk = next(c for c in (512, 256, 128, 64, 32, 16, 8, 4, 2, 1) if L % c == 0)
    stats = kl_stats_fn(chunk)
    per: dict[str, dict[str, list]] = {n: {} for n in compiled}
    hf_ce, hf_ent = [], []
    for i in range(S):
        t0 = time.perf_counter()
        logits = ref.q.get()
        res["hf"] = ref.snapshot()
        if logits is None:
            raise RuntimeError(f"transformers failed:\n{ref.info.get('error')}")
        res.setdefault("hf_wait_s", []).append(round(time.perf_counter() - t0, 2))
        x = jax.device_put(logits)
        del logits
        t = jnp.asarray(np.concatenate([ids[i, 1:], ids[i, :1]]))  # next token; the last position is dropped
        row = jnp.asarray(ids[i][None])
        for name in compiled:
            y = compiled[name](params, row)
            kl, top1, dmax, ce_x, ce_y, ent = (np.asarray(a, np.float64) for a in stats(x, y, t))
            del y
            acc = per[name]
            acc.setdefault("kl", []).append(kl)
            acc.setdefault("top1", []).append(top1)
            acc.setdefault("dmax", []).append(float(dmax.max()))
            acc.setdefault("ce", []).append(float(ce_y[:-1].mean()))
            if name == next(iter(compiled)):
                hf_ce.append(float(ce_x[:-1].mean()))
                hf_ent.append(float(ent.mean()))
        del x
        for name, acc in per.items():  # the figures over the sequences done so far
            kl = np.concatenate(acc["kl"])
            res["variants"][name].update(
                kl_mean=float(kl.mean()),
                kl_p99=float(np.percentile(kl, 99)),
                kl_max=float(kl.max()),
                kl_mean_per_sequence=[float(k.mean()) for k in acc["kl"]],
                top1=float(np.concatenate(acc["top1"]).mean()),
                top1_per_sequence=[float(a.mean()) for a in acc["top1"]],
                max_abs_logit_diff=max(acc["dmax"]),
                ce_per_sequence=acc["ce"],
                positions=int(kl.size),
            )
        res.update(done=i + 1, hf_ce_per_sequence=hf_ce, hf_entropy_per_sequence=hf_ent)
        write()


def child_chip(args: argparse.Namespace, heldout: Path) -> int:
    import jax

    work = Path(args.work)
    report: dict[str, Any] = {}

    def write() -> None:  # the report so far, as the result the parent keeps (bench/harness.py)
        harness.report(**report)

    dev = jax.devices()[0]
    report["device"] = f"{jax.device_count()} x {dev.device_kind} ({dev.platform})"
    report["jax"] = jax.__version__
    write()
    tasks = args.tasks.split(",")
    ref = None
    if "parity" in tasks:
        try:
            ref = Reference(args, work, heldout)
        except Exception:  # noqa: BLE001 - recorded; the restores still run
            report["parity_error"] = traceback.format_exc()[-3000:]
    if "restore" in tasks:
        try:
            dump = work / "cpu_dump"
            cpu = json.loads((dump / "cpu.json").read_text())
            report["restore"] = {
                "chip_written_restored_here": compare_restore(work / "uninterrupted", cpu, dump),
                "cpu_written_restored_here": compare_restore(work / "cpu_written", cpu, dump),
            }
        except Exception:  # noqa: BLE001 - recorded; parity still runs
            report["restore"] = {"error": traceback.format_exc()[-3000:]}
        write()
    if ref is not None:
        report["parity"] = {}
        try:
            parity(args, work, ref, report["parity"], write)
        except Exception:  # noqa: BLE001 - recorded with what was done
            report["parity_error"] = traceback.format_exc()[-3000:]
        write()
    return 0


# ----------------------------------------------------------------------------------------------- plan


def plan(args: argparse.Namespace, config: Path, mix: Path) -> int:
    """The train step and the parity forwards compiled for a v5e:1x1 here (libtpu on PYTHONPATH)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx
    from jax.experimental import topologies

    from olmax.train.config import load_config
    from olmax.train.mesh import batch_sharding, make_mesh, microbatches
    from olmax.train.step import abstract_state, make_train_step, model_graphdef

    topo = topologies.get_topology_desc("v5e:1x1", "tpu", chips_per_host_bounds=(1, 1, 1), num_slices=1)
    cfg = load_config(str(config), [f"data.mix={mix}", *args.override])
    if cfg.model.attention_impl == "auto":  # `auto` resolves by the default backend, the CPU here
        cfg = cfg.replace(model=cfg.model.replace(attention_impl="splash"))
    mesh = make_mesh(cfg.mesh, devices=list(topo.devices))
    n_micro, per = microbatches(cfg.data.global_batch_size, mesh.size, cfg.mesh.per_device_batch)

    def report(program: str, what: str, compiled, seconds: float) -> None:
        """One JSON line per program (its buffer plan, its Mosaic kernels) and the same in words."""
        m = compiled.memory_analysis()
        total = (
            m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes + m.temp_size_in_bytes
        )
        calls = compiled.as_text().count("tpu_custom_call")
        print(
            json.dumps(
                {
                    "program": program,
                    "what": what,
                    "plan_bytes": total,
                    "argument_bytes": m.argument_size_in_bytes,
                    "temp_bytes": m.temp_size_in_bytes,
                    "tpu_custom_calls": calls,
                    "compile_s": round(seconds, 1),
                }
            ),
            flush=True,
        )
        say(
            f"plan {what}: {total / 2**30:.2f} GiB (arguments {m.argument_size_in_bytes / 2**30:.2f}, "
            f"temporaries {m.temp_size_in_bytes / 2**30:.2f}), {calls} Mosaic kernel calls; "
            f"compiled in {seconds:.0f} s"
        )

    if "train" in args.parts:
        step = make_train_step(
            cfg.model, cfg.optim, mesh, n_micro=n_micro, per_device_batch=per, t_max=cfg.optim.t_max or 1
        )
        abstract, _ = abstract_state(cfg.model, cfg.optim, mesh)
        G, L = cfg.data.global_batch_size, cfg.data.seq_len
        ids = jax.ShapeDtypeStruct((G, L), np.int32, sharding=batch_sharding(mesh))
        t0 = time.perf_counter()
        report(
            "train_step",
            f"train step (remat {cfg.model.remat}, {n_micro} microbatches of {per} x {L})",
            step.lower(abstract, {"input_ids": ids}).compile(),
            time.perf_counter() - t0,
        )
    if "parity" in args.parts:
        dev = jax.sharding.SingleDeviceSharding(topo.devices[0])
        for name in args.variants:
            dtype, impl, precision = VARIANTS[name]
            impl = impl or cfg.model.attention_impl
            graphdef, abstract = model_graphdef(cfg.model.replace(dtype=dtype, attention_impl=impl))
            params = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=dev), abstract)
            x = jax.ShapeDtypeStruct((1, args.parity_len), jnp.int32, sharding=dev)

            def fwd(state, x, graphdef=graphdef):
                return nnx.merge(graphdef, state)(x)[0]

            t0 = time.perf_counter()
            with jax.default_matmul_precision(precision or "default"):
                c = jax.jit(fwd).lower(params, x).compile()
            report(
                f"parity_{name}",
                f"parity forward {name} ({dtype}, {impl}) at {args.parity_len}",
                c,
                time.perf_counter() - t0,
            )
    return 0

"""The training loop: restore or initialise, step through the loader's batches, log, evaluate, checkpoint.

Contract (ARCHITECTURE.md, `olmax train`). `train(cfg, run_dir)` trains to the absolute step
`cfg.train.steps`, resuming from the newest complete checkpoint in `run_dir/checkpoints` when one
exists. Checkpoints hold params, optimizer state (moments, Adam count, skip-step history), step, RNG
and the loader state, saved every `checkpoint.every` steps and always at the last step. Given the
same device layout, a resumed run's per-step metrics equal the uninterrupted run's bit for bit; a
different device count keeps the global batch and data order (losses equal up to float reduction
order). `run_dir/metrics.jsonl` holds one JSON object per step; on resume, lines past the restored
step (written before a crash) are dropped first so every step appears once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax

from olmax.atomic import write_text
from olmax.errors import OlmaxError
from olmax.train.config import ExperimentConfig, dump_yaml

# bf16 dense peak FLOP/s per device by `device_kind` prefix (vendor datasheets). CPUs have no datasheet
# figure here: their peak is measured at start (`cpu_matmul_peak`), so CPU MFU = fraction of that.
PEAK_FLOPS = {"NVIDIA H200": 989e12, "NVIDIA H100": 989e12, "NVIDIA A100": 312e12, "TPU v5p": 459e12,
              "TPU v5 lite": 197e12, "TPU v4": 275e12, "TPU7x": 2307e12}

BATCH_KEYS = ("input_ids", "segment_ids")  # loader outputs the step reads
EvalHook = Callable[["EvalContext"], dict[str, float]]


@dataclass
class EvalContext:
    """What a held-out eval hook gets: the step just finished, the model, the mesh, the run folder."""

    step: int
    model: Any  # an nnx Transformer bound to the current (sharded) params
    mesh: Any
    run_dir: Path
    config: ExperimentConfig


def peak_flops(cfg: ExperimentConfig) -> float | None:
    """Machine peak FLOP/s for MFU: train.peak_flops, else the table above, else None (no MFU)."""
    if cfg.train.peak_flops:
        return cfg.train.peak_flops
    dev = jax.devices()[0]
    if dev.platform == "cpu":
        return cpu_matmul_peak() * jax.process_count()
    for kind, flops in PEAK_FLOPS.items():
        if dev.device_kind.startswith(kind):
            return flops * jax.device_count()
    return None


def cpu_matmul_peak(n: int = 1024, tries: int = 5) -> float:
    """This host's fp32 FLOP/s on an n^3 matmul (best of `tries`), one device: the CPU MFU denominator."""
    import jax.numpy as jnp

    a = jnp.ones((n, n), jnp.float32, device=jax.local_devices()[0])
    mm = jax.jit(jnp.dot)
    mm(a, a).block_until_ready()
    best = float("inf")
    for _ in range(tries):
        t = time.perf_counter()
        mm(a, a).block_until_ready()
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best


class MetricsLog:
    """metrics.jsonl (append, one line per step) + TensorBoard events, written by process 0 only."""

    def __init__(self, run_dir: Path, resume_step: int, tensorboard: bool = True):
        self.path = run_dir / "metrics.jsonl"
        self.primary = jax.process_index() == 0
        self.tb = None
        if not self.primary:
            return
        if self.path.exists():  # drop steps a killed run logged after its last checkpoint
            kept = []
            for line in self.path.read_text().splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by the kill
                if rec.get("step", 0) <= resume_step:
                    kept.append(line)
            write_text(self.path, "".join(s + "\n" for s in kept))
        self.file = open(self.path, "a")  # noqa: SIM115 - lives as long as the run
        if tensorboard:
            from tensorboardX import SummaryWriter

            self.tb = SummaryWriter(str(run_dir / "tb"))

    def write(self, rec: dict, tb_every: int) -> None:
        if not self.primary:
            return
        self.file.write(json.dumps(rec) + "\n")
        self.file.flush()
        if self.tb is not None and rec["step"] % tb_every == 0:
            for k, v in rec.items():
                if k != "step" and isinstance(v, (int, float)) and v is not None:
                    self.tb.add_scalar(f"train/{k}" if "/" not in k else k, v, rec["step"])

    def close(self) -> None:
        if self.primary:
            self.file.close()
            if self.tb is not None:
                self.tb.close()


def _monitor(cfg: ExperimentConfig, loader, saved_meta: dict | None):
    """The online replay monitor (None when `train.monitor` is off), restored from a checkpoint's metadata.

    Every process checks the whole global batch (`update_all_hosts` all-gathers the row hashes), so all
    hold the same state; the primary process writes it into the checkpoint's JSON metadata and every
    process restores it, whatever the process count of the run that saved it."""
    if not cfg.train.monitor:
        return None
    from olmax.audit.monitor import StreamMonitor

    monitor = StreamMonitor(steps_per_epoch=loader.batches_per_epoch, index=loader.index,
                            bloom_bits=cfg.train.monitor_bloom_bits or None)
    if saved_meta and saved_meta.get("monitor"):
        monitor.load_state_json(saved_meta["monitor"])
    return monitor


def train(cfg: ExperimentConfig, run_dir: str | Path, *, mix: str | None = None,
          eval_hook: EvalHook | None = None) -> dict:
    """Train to `cfg.train.steps`; returns a summary dict (first/last step run, last metrics, timings)."""
    from flax import nnx

    from olmax.model.flops import flops_per_token
    from olmax.train.checkpoint import Checkpointer
    from olmax.train.data import open_loader, resolve_mix
    from olmax.train.mesh import describe, global_batch, make_mesh, microbatches
    from olmax.train.step import abstract_state, make_init, make_train_step, model_graphdef

    mesh = make_mesh(cfg.mesh)
    n_micro, per_device = microbatches(cfg.data.global_batch_size, mesh.size, cfg.mesh.per_device_batch)
    loader = open_loader(cfg.data, resolve_mix(cfg.data, mix), cfg.model.eos_token_id)
    run_dir = Path(run_dir).resolve()  # created only once the config, mesh and data check out
    run_dir.mkdir(parents=True, exist_ok=True)
    steps = cfg.train.steps
    t_max = cfg.optim.t_max or steps

    ckpt = Checkpointer(run_dir / "checkpoints", cfg.checkpoint)
    start = ckpt.latest_step()
    abstract, _ = abstract_state(cfg.model, cfg.optim, mesh)
    if start is not None:
        state, loader_state, meta = ckpt.restore(start, abstract)
        if int(jax.device_get(state["step"])) != start:
            raise OlmaxError(f"{ckpt.directory / str(start)}: holds step {int(state['step'])}, not {start}")
        note = f"resumed from step {start} (saved on {meta.get('devices')} devices)"
    elif cfg.train.init_from:
        from olmax.train.checkpoint import restore_init
        from olmax.train.optim import init_opt_state

        start, loader_state = 0, None
        state = restore_init(cfg.train.init_from, abstract)
        # a new stage: params, moments and Adam count carry over (OLMo-core load_optim_state=True,
        # load_trainer_state=False); the step, the data position and the skip-step history start afresh
        fresh_skip = jax.jit(lambda: init_opt_state({}, cfg.optim.skip_window)["skip"],
                             out_shardings=jax.tree.map(lambda a: a.sharding, abstract["opt"]["skip"]))()
        state = {**state, "step": jax.device_put(0 * state["step"], abstract["step"].sharding),
                 "opt": {**state["opt"], "skip": fresh_skip}}
        note = f"initialised from {cfg.train.init_from}"
    else:
        start, loader_state = 0, None
        state = make_init(cfg.model, cfg.optim, mesh, cfg.train.seed)
        note = "initialised from scratch"
    if jax.process_index() == 0:
        write_text(run_dir / "config.yaml", dump_yaml(cfg))
    it = loader.iterate(loader_state)
    monitor = _monitor(cfg, loader, meta if start else None)
    log = MetricsLog(run_dir, start, tensorboard=cfg.train.tensorboard)
    summary: dict[str, Any] = {"start_step": start, "steps": steps, "note": note, "mesh": describe(mesh),
                               "microbatches": n_micro, "per_device_batch": per_device}
    if jax.process_index() == 0:
        print(f"olmax train: {note}; {describe(mesh)}; {n_micro} microbatch(es) of {per_device} row(s) per "
              f"device; global batch {cfg.data.global_batch_size} x {cfg.data.seq_len}", flush=True)
    if start >= steps:
        log.close()
        ckpt.close()
        it.close()
        return {**summary, "last": None}

    train_step = make_train_step(cfg.model, cfg.optim, mesh, n_micro=n_micro, per_device_batch=per_device,
                                 t_max=t_max, ce_chunk=cfg.train.ce_chunk)
    tokens_per_step = cfg.data.global_batch_size * cfg.data.seq_len
    flops_per_step = 3 * flops_per_token(cfg.model, cfg.data.seq_len) * tokens_per_step
    peak = peak_flops(cfg)
    summary["peak_flops"] = peak
    graphdef = model_graphdef(cfg.model)[0] if eval_hook else None
    bar = None
    if cfg.train.progress and jax.process_index() == 0:
        from tqdm import tqdm

        bar = tqdm(total=steps, initial=start, unit="step", dynamic_ncols=True)
    meta = {"devices": jax.device_count(), "processes": jax.process_count(), "mesh": dict(mesh.shape),
            "global_batch_size": cfg.data.global_batch_size, "seq_len": cfg.data.seq_len}
    rec: dict[str, Any] = {}
    t_prev = time.perf_counter()
    t_run = t_prev
    try:
        for step in range(start + 1, steps + 1):
            epoch, _ = it.position
            rows = next(it)
            if monitor is not None:  # raises ReplayError naming this step before the row is trained on
                monitor.update_all_hosts(step, rows["input_ids"], instance_ids=rows.get("instance_ids"),
                                         epoch=epoch)
            batch = {k: global_batch(rows[k], mesh, cfg.data.global_batch_size) for k in BATCH_KEYS if k in rows}
            state, metrics = train_step(state, batch)
            metrics = jax.device_get(metrics)
            now = time.perf_counter()
            dt, t_prev = now - t_prev, now
            tps = tokens_per_step / dt
            rec = {"step": step, "loss": float(metrics["loss"]), "z_loss": float(metrics["z_loss"]),
                   "grad_norm": float(metrics["grad_norm"]), "lr": float(metrics["lr"]),
                   "tokens": step * tokens_per_step, "tokens_per_s": tps,
                   "mfu": (flops_per_step / dt / peak) if peak else None, "skipped": int(metrics["skipped"]),
                   "epoch": epoch, **(monitor.counters() if monitor is not None else {})}
            if eval_hook and cfg.train.eval_every and step % cfg.train.eval_every == 0:
                model = nnx.merge(graphdef, state["params"])
                rec.update({f"eval/{k}": v for k, v in eval_hook(EvalContext(step, model, mesh, run_dir, cfg)).items()})
            log.write(rec, cfg.train.log_every)
            if step % cfg.checkpoint.every == 0 or step == steps:
                extra = {"monitor": monitor.state_json()} if monitor is not None else {}
                ckpt.save(step, state, it.state, {**meta, "step": step, "epoch": epoch, **extra})
            if bar is not None:
                bar.set_postfix(loss=f"{rec['loss']:.4f}", tok_s=f"{tps:,.0f}", refresh=False)
                bar.update(1)
            t_prev = time.perf_counter()  # exclude logging and checkpoint launch from the next step's time
    finally:
        if bar is not None:
            bar.close()
        ckpt.close()
        log.close()
        it.close()
    summary.update(last=rec, seconds=time.perf_counter() - t_run)
    return summary


def dry_run(cfg: ExperimentConfig) -> str:
    """The resolved config plus sizes, FLOPs and token counts, without touching data or devices' memory."""
    from olmax.model.flops import flops_per_token
    from olmax.model.transformer import count_params

    tokens_per_step = cfg.data.global_batch_size * cfg.data.seq_len
    fpt = flops_per_token(cfg.model, cfg.data.seq_len)
    lines = [dump_yaml(cfg).rstrip(), "---",
             f"params: {count_params(cfg.model):,} ({count_params(cfg.model, padded=True):,} with vocab padding)",
             f"forward FLOPs/token: {fpt:,.0f} (train step: 3x = {3 * fpt:,.0f})",
             f"tokens/step: {cfg.data.global_batch_size} x {cfg.data.seq_len} = {tokens_per_step:,}",
             f"steps: {cfg.train.steps:,}; tokens: {cfg.train.steps * tokens_per_step:,}",
             f"train FLOPs: {3 * fpt * tokens_per_step * cfg.train.steps:.3e}",
             f"lr schedule: {cfg.optim.schedule}, peak {cfg.optim.lr:g}, warmup {cfg.optim.warmup_steps}, "
             f"horizon {cfg.optim.t_max or cfg.train.steps} steps, final {cfg.optim.alpha_f:g} x peak",
             f"devices: {jax.device_count()} visible (global batch fixed; microbatches derived per device count)"]
    return "\n".join(lines)


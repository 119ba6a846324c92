"""The training loop: restore or initialise, step through the loader's batches, log, evaluate, checkpoint.

Contract (docs/architecture.md, `olmax train`). `train(cfg, run_dir)` trains to the absolute step
`cfg.train.steps`, resuming from the newest complete checkpoint in `run_dir/checkpoints` when one
exists. Checkpoints hold params, optimizer state (moments, Adam count, skip-step history), step, RNG
and the loader state, saved every `checkpoint.every` steps and always at the last step. Given the
same device layout, a resumed run's per-step metrics equal the uninterrupted run's bit for bit; a
different device count keeps the global batch and data order (losses equal up to float reduction
order). `run_dir/metrics.jsonl` holds one JSON object per step; on resume, lines past the restored
step (written before a crash) are dropped first so every step appears once. `run_dir/config.yaml` and
`run_dir/history.jsonl` are written only once the resume checks pass and there is something to train
(olmax.train.runrecord). Where each file lives and which process writes it is the run folder's to say
(olmax.train.run_folder: a local folder, or a bucket through a mirror per host). On a preemption notice
(SIGTERM) every process stops after the same step, which is saved and published before `Preempted` is
raised.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax

from olmax.audit.monitor import StreamMonitor
from olmax.data.loader import open_loader, stream_index
from olmax.data.reader import check_batch_ids
from olmax.errors import OlmaxError
from olmax.metrics import MetricsLog
from olmax.model import remat
from olmax.model.flops import flops_per_token
from olmax.model.transformer import compute_summary
from olmax.train import runrecord, wandb_log
from olmax.train.config import ExperimentConfig, absolute_paths, dump_yaml, to_dict
from olmax.train.hosts import Preempted, StopNotice
from olmax.train.mesh import describe, global_batch, make_mesh, microbatches
from olmax.train.mfu import mfu, peak_flops
from olmax.train.optim import horizon_mismatch
from olmax.train.run_folder import RunFolder, open_run_folder

BATCH_KEYS = ("input_ids", "segment_ids", "label_mask")  # loader outputs the step reads
EvalHook = Callable[["EvalContext"], dict[str, float]]


@dataclass
class EvalContext:
    """What a held-out eval hook gets: the step just finished, the model, the mesh, the run folder."""

    step: int
    model: Any  # an nnx Transformer bound to the current (sharded) params
    mesh: Any
    run_dir: Path
    config: ExperimentConfig


def _monitor(cfg: ExperimentConfig, loader, saved_meta: dict | None):
    """The online replay monitor (None when `train.monitor` is off), restored from a checkpoint's metadata.

    Every process checks the whole global batch (`update_all_hosts` all-gathers the row hashes), so all
    hold the same state; the primary process writes it into the checkpoint's JSON metadata and every
    process restores it, whatever the process count of the run that saved it."""
    if not cfg.train.monitor:
        return None

    monitor = StreamMonitor(
        steps_per_epoch=loader.batches_per_epoch,
        index=loader.index,
        bloom_bits=cfg.train.monitor_bloom_bits or None,
    )
    if saved_meta and saved_meta.get("monitor"):
        monitor.load_state_json(saved_meta["monitor"])
    return monitor


def train(
    cfg: ExperimentConfig,
    run: RunFolder | str | Path,
    *,
    mix: str | None = None,
    eval_hook: EvalHook | None = None,
    resume_note: str = "",
) -> dict:
    """Train to `cfg.train.steps` in `run` (a RunFolder, or a local folder's path); returns a summary dict
    (first/last step run, last metrics, timings). `resume_note` (the CLI's word on how it built `cfg`)
    goes to stderr once the resume checks pass. A preemption notice (SIGTERM) ends the run after the step
    in flight, that step saved and published: `Preempted` (olmax.train.hosts).

    Phases: open the stream and the mesh → restore (or initialise) the state → step through the
    batches, logging, evaluating and checkpointing → close everything, also on an error."""

    folder = run if isinstance(run, RunFolder) else open_run_folder(str(run))
    # from here a SIGTERM lets the step, the save and the upload in flight finish
    with StopNotice(folder.hosts) as stop:
        try:
            summary = _train_in(cfg, folder, stop, mix=mix, eval_hook=eval_hook, resume_note=resume_note)
        except Preempted:
            folder.finish(cfg.checkpoint.keep)  # the stop's step, sealed when the checkpointer closed
            raise
        folder.finish(cfg.checkpoint.keep)
    return summary


def _train_in(
    cfg: ExperimentConfig,
    folder: RunFolder,
    stop: StopNotice,
    *,
    mix: str | None,
    eval_hook: EvalHook | None,
    resume_note: str,
) -> dict:
    """`train`'s body, in `folder` (its docstring)."""
    from olmax.train.step import abstract_state

    if mix is not None:
        cfg = cfg.replace(data=cfg.data.replace(mix=mix))
    cfg = absolute_paths(cfg)  # the record's paths work from any folder
    mesh = make_mesh(cfg.mesh)
    n_micro, per_device = microbatches(cfg.data.global_batch_size, mesh.size, cfg.mesh.per_device_batch)
    stream = cfg.data
    m = cfg.model
    # a packed stream finds documents by the model's EOS and pads with its PAD (fixed windows need neither)
    index = stream_index(
        stream,
        **(
            dict(
                eos_token_id=m.eos_token_id,
                pad_token_id=m.pad_token_id,
                vocab_size=m.vocab_size,
                bos_token_id=m.bos_token_id,
                progress=jax.process_index() == 0,
            )
            if stream.packed
            else {}
        ),
    )
    loader = open_loader(stream, index, eos_token_id=m.eos_token_id, bos_token_id=m.bos_token_id)
    wandb_log.preflight(cfg.wandb)
    run_dir = folder.local.resolve()  # created only once the config, mesh and data check out
    primary = folder.writes_record
    # the resume rule (olmax.train.runrecord): a refused change stops here, before the run dir is touched
    saved = runrecord.saved_config(run_dir) if runrecord.has_checkpoint(run_dir) else None
    diff = runrecord.check_resume(saved, cfg, run_dir) if saved is not None else {}
    run_dir.mkdir(parents=True, exist_ok=True)
    ckpt = folder.checkpointer(cfg.checkpoint)
    abstract, _ = abstract_state(cfg.model, cfg.optim, mesh)
    start, state, loader_state, saved_meta, note = _restore_or_init(cfg, ckpt, abstract, mesh)
    if loader_state is not None:
        try:
            loader.resume_position(loader_state)  # the data check, before anything is written
        except BaseException:
            ckpt.close()
            raise
    if not start:
        diff = {}  # nothing restored: a fresh start, whatever an earlier attempt left in config.yaml
    summary: dict[str, Any] = {
        "start_step": start,
        "steps": cfg.train.steps,
        "note": note,
        "mesh": describe(mesh),
        "microbatches": n_micro,
        "per_device_batch": per_device,
    }
    with ExitStack() as closing:  # checkpointer, loader threads and logs are closed also on an error
        closing.callback(ckpt.close)
        if start >= cfg.train.steps:  # nothing to train: the record stays as it is
            if primary:
                print(
                    f"olmax train: {folder.url} is at step {start}, train.steps is {cfg.train.steps}: "
                    "nothing to train (raise --steps to extend it)",
                    flush=True,
                )
            return {**summary, "last": None}
        run_cfg, step_fn = cfg, None
        if cfg.model.remat == remat.AUTO:  # the fastest policy whose compiled step fits: compiled here, once
            run_cfg, step_fn = _resolve_auto(cfg, mesh)
            n_micro, per_device = step_fn.n_micro, step_fn.per_device_batch
            summary.update(microbatches=n_micro, per_device_batch=per_device)
        # the kernel and remat this run resolves to, for its mesh's devices
        compute = compute_summary(run_cfg.model, cfg.data.seq_len, list(mesh.devices.flat))
        summary["compute"] = compute
        if primary:
            if resume_note:
                print(resume_note, file=sys.stderr, flush=True)
            if diff:
                print(
                    f"olmax train: resuming with changed settings (recorded in {run_dir / runrecord.HISTORY}): "
                    f"{runrecord.describe(diff)}",
                    file=sys.stderr,
                    flush=True,
                )
            runrecord.record_start(
                cfg, run_dir, start=start, note=note, diff=diff, devices=jax.device_count(), compute=compute
            )
            horizon = horizon_mismatch(cfg.optim, cfg.train.steps)
            if horizon:  # before step 1, and in history.jsonl ("schedule")
                print(f"olmax train: {horizon['message']}", file=sys.stderr, flush=True)
            moved = runrecord.moved_horizon(cfg, start, diff)
            if moved:  # and in history.jsonl ("schedule_moved")
                print(f"olmax train: {moved['message']}", file=sys.stderr, flush=True)
            print(
                f"olmax train: {note}; {describe(mesh)}; {n_micro} microbatch(es) of {per_device} row(s) per "
                f"device; global batch {cfg.data.global_batch_size} x {cfg.data.seq_len}",
                flush=True,
            )
            print(
                f"olmax train: {compute['device']}; attention {compute['attention']}; remat {compute['remat']}; "
                f"compute {compute['dtype']}",
                flush=True,
            )
        # the MFU denominator, measured before the loader's threads start (every process, same point)
        peak = peak_flops(cfg)
        summary.update(peak_flops=peak, mfu_peak=getattr(peak, "what", None))
        it = loader.iterate(loader_state)
        closing.callback(it.close)
        wb = None
        if cfg.wandb.enabled and primary:
            wb = wandb_log.WandbLog(cfg.wandb, run_dir, to_dict(cfg))
        log = MetricsLog(run_dir, start, tensorboard=cfg.train.tensorboard, wandb=wb, primary=primary)
        closing.callback(log.close)
        t_run = time.perf_counter()
        parts = RunParts(
            mesh=mesh,
            folder=folder,
            index=loader.index,
            it=it,
            monitor=_monitor(cfg, loader, saved_meta if start else None),
            log=log,
            ckpt=ckpt,
            n_micro=n_micro,
            per_device=per_device,
            compiled=step_fn.executable if step_fn is not None else None,
        )
        steps = _Steps(run_cfg, parts, eval_hook, peak, stop)
        summary["last"] = steps.run(state, start)
    summary["seconds"] = time.perf_counter() - t_run
    summary["eval"] = steps.last_eval
    summary["checkpoint"] = folder.step_url(steps.saved) if steps.saved is not None else None
    summary["run_dir"] = folder.url if folder.mirror is not None else str(run_dir)
    return summary


def _resolve_auto(cfg: ExperimentConfig, mesh) -> tuple[ExperimentConfig, Any]:
    """`model.remat: auto` for this run's devices (olmax.train.plan.choose): the config with the policy and
    rows per device that fit, and its compiled step; each candidate tried is printed by process 0."""
    from olmax.train.plan import choose

    def say(line: str) -> None:
        if jax.process_index() == 0:
            print(f"olmax train: remat auto: {line}", flush=True)

    resolved, got, _ = choose(cfg, list(mesh.devices.flat), say=say)
    return resolved, got


def _restore_or_init(
    cfg: ExperimentConfig, ckpt, abstract: dict, mesh
) -> tuple[int, dict, Any, dict | None, str]:
    """(start step, state, loader state, checkpoint metadata, what happened): the newest complete
    checkpoint, else `train.init_from` (a new stage), else a fresh initialisation."""
    from olmax.train.checkpoint import is_params_folder, restore_init_params
    from olmax.train.step import make_init, state_from_params

    found = ckpt.restore_newest(abstract)
    if found is not None:
        start, state, loader_state, meta = found
        if int(jax.device_get(state["step"])) != start:
            raise OlmaxError(f"{ckpt.directory / str(start)}: holds step {int(state['step'])}, not {start}")
        return (
            start,
            state,
            loader_state,
            meta,
            f"resumed from step {start} (saved on {meta.get('devices')} devices)",
        )
    if cfg.train.init_from and is_params_folder(cfg.train.init_from):
        # a converted model (HF -> olmax): its params, a fresh optimizer, step 0
        params = restore_init_params(cfg.train.init_from, cfg.model, abstract["params"])
        state = state_from_params(params, cfg.model, cfg.optim, mesh, cfg.train.seed)
        return 0, state, None, None, f"initialised from the params of {cfg.train.init_from} (fresh optimizer)"
    if cfg.train.init_from:
        from olmax.train.checkpoint import restore_init
        from olmax.train.optim import init_opt_state

        state = restore_init(cfg.train.init_from, abstract)
        # a new stage: params, moments and Adam count carry over (OLMo-core load_optim_state=True,
        # load_trainer_state=False); the step, the data position and the skip-step history start afresh
        fresh_skip = jax.jit(
            lambda: init_opt_state({}, cfg.optim.skip_window)["skip"],
            out_shardings=jax.tree.map(lambda a: a.sharding, abstract["opt"]["skip"]),
        )()
        state = {
            **state,
            "step": jax.device_put(0 * state["step"], abstract["step"].sharding),
            "opt": {**state["opt"], "skip": fresh_skip},
        }
        return 0, state, None, None, f"initialised from {cfg.train.init_from}"
    return 0, make_init(cfg.model, cfg.optim, mesh, cfg.train.seed), None, None, "initialised from scratch"


@dataclass
class RunParts:
    """What `train` assembles for the step loop: the mesh and run folder, the loader's index and iterator, the
    online replay monitor (or None), the metrics log, the checkpointer and the step's microbatch layout."""

    mesh: Any
    folder: RunFolder
    index: Any
    it: Any
    monitor: Any
    log: MetricsLog
    ckpt: Any
    n_micro: int  # microbatches per step
    per_device: int  # rows per device in a microbatch
    compiled: Any = None  # the train step already compiled for this mesh (model.remat auto), else None


class _Steps:
    """The step loop. Step N+1 is dispatched before step N's metrics are read back, so the host's
    logging, data reading and monitor overlap the device's work (one process, or no monitor); at a checkpoint, an eval and the last
    step the metrics are read first, so a checkpoint never exists without its step's metrics line."""

    def __init__(
        self,
        cfg: ExperimentConfig,
        run: RunParts,
        eval_hook: EvalHook | None,
        peak: float | None,
        stop: StopNotice,
    ):
        from olmax.train.step import model_graphdef, run_train_step

        mesh, monitor, n_micro, per_device = run.mesh, run.monitor, run.n_micro, run.per_device
        self.cfg, self.mesh, self.folder, self.index, self.it, self.monitor = (
            cfg,
            mesh,
            run.folder,
            run.index,
            run.it,
            monitor,
        )
        self.run_dir = run.folder.local.resolve()
        self.log, self.ckpt, self.eval_hook, self.stop = run.log, run.ckpt, eval_hook, stop
        self.train_step = run.compiled or run_train_step(cfg, mesh, n_micro, per_device)
        self.tokens_per_step = cfg.data.global_batch_size * cfg.data.seq_len
        self.flops_per_step = 3 * flops_per_token(cfg.model, cfg.data.seq_len) * self.tokens_per_step
        self.peak = peak
        self.graphdef = model_graphdef(cfg.model)[0] if eval_hook else None
        self.meta = {
            "devices": jax.device_count(),
            "processes": jax.process_count(),
            "mesh": dict(mesh.shape),
            "global_batch_size": cfg.data.global_batch_size,
            "seq_len": cfg.data.seq_len,
        }
        self.bar, self.logged_peak = None, False
        self.last_eval: dict | None = None  # {"step": N, "ce": {set: value}} of the newest in-loop eval
        self.saved: int | None = None  # the newest step checkpointed
        # With several processes the monitor's all-gather is a collective of its own: it must not be
        # issued while a train step's collectives may still be in flight, so the steps do not overlap.
        self.overlap = jax.process_count() == 1 or monitor is None
        if cfg.train.progress and run.folder.writes_record:
            from tqdm import tqdm

            self.bar = tqdm(total=cfg.train.steps, initial=0, unit="step", dynamic_ncols=True)

    def run(self, state: dict, start: int) -> dict:
        """Steps start+1 .. train.steps; returns the last step's metrics record."""
        cfg = self.cfg
        if self.bar is not None:
            self.bar.update(start)
        pending: tuple | None = None  # (step, epoch, counters, device metrics) dispatched, not read back
        rec: dict[str, Any] = {}
        self.t_prev = time.perf_counter()
        try:
            for step in range(start + 1, cfg.train.steps + 1):
                if pending is not None and not self.overlap:
                    done, pending = pending, None
                    rec = self._finish(*done)
                epoch, batch, counters = self._next_batch(step)
                state, metrics = self.train_step(state, batch)
                if pending is not None:
                    done, pending = pending, None
                    rec = self._finish(*done)
                pending = (step, epoch, counters, metrics)
                evaluate = bool(self.eval_hook and cfg.train.eval_every and step % cfg.train.eval_every == 0)
                save = step % cfg.checkpoint.every == 0 or step == cfg.train.steps
                if evaluate or save:
                    done, pending = pending, None
                    rec = self._finish(*done, state=state if evaluate else None)
                if save:
                    self._save(step, epoch, state)
                if self.stop.reached(step):  # a preemption notice: this step is the last, saved whole
                    if pending is not None:
                        done, pending = pending, None
                        rec = self._finish(*done)
                    if self.saved != step:
                        self._save(step, epoch, state)
                    raise Preempted(step, self.folder.step_url(step))
        except BaseException:
            if pending is not None:  # a step the device finished is logged even when the next one fails
                self._finish(*pending)
            raise
        finally:
            if self.bar is not None:
                self.bar.close()
        return rec

    def _save(self, step: int, epoch: int, state: dict) -> None:
        """Checkpoint `step` (its metrics are logged already) and publish what the run folder needs."""
        extra = {"monitor": self.monitor.state_json()} if self.monitor is not None else {}
        self.ckpt.save(step, state, self.it.state, {**self.meta, "step": step, "epoch": epoch, **extra})
        self.saved = step
        self.folder.publish(self.ckpt, step, keep=self.cfg.checkpoint.keep)
        self.t_prev = time.perf_counter()  # the checkpoint is not the next step's time

    def _next_batch(self, step: int) -> tuple[int, dict, dict]:
        """(epoch, the global batch, the monitor's counters after it) of `step`; the monitor sees its rows
        before they are trained on, and an id outside the vocabulary stops the run before the step."""

        epoch, _ = self.it.position
        rows = next(self.it)
        check_batch_ids(self.index, rows, self.cfg.model.vocab_size)
        if self.monitor is not None:  # raises ReplayError naming this step before the row is trained on
            self.monitor.update_all_hosts(
                step, rows["input_ids"], instance_ids=rows.get("instance_ids"), epoch=epoch
            )
        G = self.cfg.data.global_batch_size
        counters = self.monitor.counters() if self.monitor is not None else {}
        return epoch, {k: global_batch(rows[k], self.mesh, G) for k in BATCH_KEYS if k in rows}, counters

    def _finish(self, step: int, epoch: int, counters: dict, metrics, state: dict | None = None) -> dict:
        """Read `step`'s metrics back, evaluate (given the state after it), log; returns the record."""
        metrics = jax.device_get(metrics)
        now = time.perf_counter()
        dt, self.t_prev = now - self.t_prev, now
        tps = self.tokens_per_step / dt
        rec = {
            "step": step,
            "loss": float(metrics["loss"]),
            "z_loss": float(metrics["z_loss"]),
            "grad_norm": float(metrics["grad_norm"]),
            "lr": float(metrics["lr"]),
            "tokens": step * self.tokens_per_step,
            "tokens_per_s": tps,
            "mfu": mfu(self.flops_per_step, dt, self.peak),
            "skipped": int(metrics["skipped"]),
            "epoch": epoch,
            **counters,
        }
        if not self.logged_peak:  # the first record of each start says what `mfu` is a fraction of
            rec.update(
                mfu_peak_flops=float(self.peak) if self.peak else None,
                mfu_peak=getattr(self.peak, "what", None),
            )
            self.logged_peak = True
        if state is not None:
            from flax import nnx

            model = nnx.merge(self.graphdef, state["params"])
            ctx = EvalContext(step, model, self.mesh, self.run_dir, self.cfg)
            found = self.eval_hook(ctx)
            rec.update({f"eval/{k}": v for k, v in found.items()})
            self._say_eval(step, found)
            self.t_prev = time.perf_counter()  # the eval is not the next step's time
        self.log.write(rec, self.cfg.train.log_every)
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{rec['loss']:.4f}", tok_s=f"{tps:,.0f}", refresh=False)
            self.bar.update(1)
        return rec

    def _say_eval(self, step: int, found: dict[str, float]) -> None:
        """One line per in-loop eval (its cross-entropy per set), above the progress bar."""
        ce = {k[: -len("/ce")]: v for k, v in found.items() if k.endswith("/ce")}
        self.last_eval = {"step": step, "ce": ce}
        # downstream tasks: the main metric OLMo-core plots for them, length-normalized accuracy v2
        acc = {
            k[len("downstream/") : -len(" (length-normalized accuracy v2)")]: v
            for k, v in found.items()
            if k.startswith("downstream/") and k.endswith(" (length-normalized accuracy v2)")
        }
        if jax.process_index() != 0 or not (ce or acc):
            return
        line = f"olmax train: step {step} held-out CE: {format_ce(ce) or '-'}"
        if acc:
            line += "; downstream acc (len-norm v2): " + ", ".join(f"{k} {v:.3f}" for k, v in acc.items())
        if self.bar is not None:
            self.bar.write(line)
        else:
            print(line, flush=True)


def format_ce(ce: dict[str, float]) -> str:
    """{"sciq": 2.31, "sciq/clean": 2.30} as "sciq 2.310, sciq/clean 2.300"."""
    return ", ".join(f"{k} {v:.3f}" for k, v in ce.items())


def _duration(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s" if m else f"{seconds:.1f}s"


def summary_table(summary: dict) -> str:
    """The few lines `olmax train` ends with: steps, tokens, final loss, held-out CE, checkpoint, time."""
    last = summary.get("last")
    if not last:
        return ""
    trained = last["step"] - summary["start_step"]
    seconds = summary.get("seconds") or 0.0
    tokens_run = trained * (last["tokens"] // last["step"]) if last["step"] else 0
    ev = summary.get("eval")
    rows = [
        ("steps", f"{summary['start_step']} -> {last['step']} ({trained} trained)"),
        ("tokens", f"{last['tokens']:,} seen in total"),
        ("final loss", f"{last['loss']:.4f} (step {last['step']})"),
        ("held-out CE", f"{format_ce(ev['ce'])} (step {ev['step']})" if ev else "not evaluated in-loop"),
        ("checkpoint", summary.get("checkpoint") or "none"),
        ("time", f"{_duration(seconds)} ({tokens_run / seconds:,.0f} tokens/s)" if seconds else "-"),
    ]
    if summary.get("run_dir"):
        rows.append(("metrics", f"{str(summary['run_dir']).rstrip('/')}/metrics.jsonl"))  # a path or a URL
    width = max(len(k) for k, _ in rows)
    return "\n".join(["olmax train: done"] + [f"  {k:<{width}}  {v}" for k, v in rows])


def dry_run(cfg: ExperimentConfig) -> str:
    """The resolved config plus sizes, FLOPs and token counts, without touching data or devices' memory."""
    from olmax.model.transformer import count_params

    tokens_per_step = cfg.data.global_batch_size * cfg.data.seq_len
    fpt = flops_per_token(cfg.model, cfg.data.seq_len)
    lines = [
        dump_yaml(absolute_paths(cfg)).rstrip(),  # as RUN/config.yaml records it
        "---",
        f"params: {count_params(cfg.model):,} ({count_params(cfg.model, padded=True):,} with vocab padding)",
        f"forward FLOPs/token: {fpt:,.0f} (train step: 3x = {3 * fpt:,.0f})",
        f"tokens/step: {cfg.data.global_batch_size} x {cfg.data.seq_len} = {tokens_per_step:,}",
        f"steps: {cfg.train.steps:,}; tokens: {cfg.train.steps * tokens_per_step:,}",
        f"train FLOPs: {3 * fpt * tokens_per_step * cfg.train.steps:.3e}",
        f"lr schedule: {cfg.optim.schedule}, peak {cfg.optim.lr:g}, warmup {cfg.optim.warmup_steps}, "
        f"horizon {cfg.optim.t_max or cfg.train.steps} steps, final {cfg.optim.alpha_f:g} x peak",
        *([f"schedule: {h['message']}"] if (h := horizon_mismatch(cfg.optim, cfg.train.steps)) else []),
        f"devices: {jax.device_count()} visible (global batch fixed; microbatches derived per device count)",
    ]
    return "\n".join(lines)

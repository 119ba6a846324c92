"""`olmax eval watch`: a job beside a training run that evaluates each committed checkpoint once, in step order.

    follow(WatchSettings(run="RUN"))   # until the run's final step (train.steps) is evaluated

Per checkpoint step: the held-out records of `run_heldout` (CE, perplexity, bits-per-byte per set, and the
clean subset of each set when a leak report is given), optionally one record per lm-eval task and one
memorization record. Everything lands in OUT/evals.jsonl (OUT = RUN/evals by default), then OUT/summary.md
(a step x set table), OUT/curves.png and, when enabled, TensorBoard events under OUT/tb.

The model is sharded over this host's devices (`--mesh`: olmax.evals.eval_mesh), each step's parameters
restored straight into their shards whatever device count wrote them. What a step cost (the download of a
bucket run's step, the restore, the evaluation, tokens scored per second, the mesh) is printed and kept in
OUT/costs.jsonl, one record per evaluation, apart from the records (which hold no timings).

Contract:
  * Only `complete_steps` (Orbax's commit marker and olmax's seal) are evaluated; a step folder still being
    written, or cut short, is never read. Steps are evaluated in ascending order, each once.
  * evals.jsonl is rewritten whole (temporary name, then rename) after each step, so a kill at any moment
    leaves the file of the last finished step; a restart reads it and continues with the next step (a
    killed job redoes at most the step it was on). Records hold no timings: the same run, sets and
    settings give a byte-identical file whether the job was killed and restarted or not.
  * A step that vanishes before it is read (the trainer's retention) gets a `{"kind": "skipped"}` record.
    Steps deleted before the job ever listed them are not known to it and are not recorded.
  * The defaults are the run's in-loop eval settings (olmax.evals.hook): `train.eval_sets`, `train.eval_limit`,
    the tokenizer, seq_len = data.seq_len, the batch size and the model's compute dtype, so the CE equals
    the trainer's `eval/<set>/ce` and `olmax eval heldout` on that checkpoint.
  * Read-only on the run: params are restored straight from `checkpoints/STEP/state` (no CheckpointManager,
    whose start-up removes temporary step folders, i.e. the trainer's save in flight).
  * A run in object storage is read through a local mirror holding one step at a time: each step is
    downloaded just before it is evaluated and removed from the mirror after.
  * The caller holds the writer's lock of OUT (olmax.atomic.exclusive) so two jobs never write it.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from olmax.atomic import exclusive, write_text
from olmax.errors import OlmaxError
from olmax.evals.curves import Curves, read_run
from olmax.evals.downstream import headline, run_downstream, run_tasks
from olmax.evals.downstream import metric_values as downstream_values
from olmax.evals.hook import eval_batch_size, eval_settings, eval_tokenizer
from olmax.evals.plots import plot_run
from olmax.evals.run_dir import replay_exposure
from olmax.evalsets.sets import contaminated_ids
from olmax.jsonio import read_json, read_jsonl, write_jsonl
from olmax.train.config import load_run_config, run_config_path
from olmax.train.export import read_step_model

EVALS = "evals"  # the results folder in the run folder (the default OUT)
RECORDS = "evals.jsonl"
COSTS = "costs.jsonl"
SUMMARY = "summary.md"
CURVES = "curves.png"


@dataclass(frozen=True)
class WatchSettings:
    """What `olmax eval watch` was asked; None fields default to the run's own in-loop eval settings."""

    run: str  # run folder: a path, a file:// URL or an object-store URL (followed through a local mirror)
    out: str | None = None  # results folder; None: RUN/evals
    evals: tuple[
        str, ...
    ] = ()  # NAME=PATH or bundled names; (): train.eval_sets, $OLMAX_EVAL_SETS, sciq+arc_easy
    limit: int | None = None  # documents per set; None: train.eval_limit, $OLMAX_EVAL_LIMIT, 64; 0: all
    tokenizer: str | None = None  # None: the run's train.eval_tokenizer (the in-loop hook's rule)
    seq_len: int | None = None  # None: data.seq_len
    batch_size: int | None = None  # None: the in-loop hook's
    dtype: str | None = None  # compute dtype; None: the run's model.dtype
    mesh: str | None = None  # devices the model shards over (olmax.evals.eval_mesh: DATAxFSDP); None: auto
    text_field: str = "text"
    base_dir: str | None = None  # OLMo-core's eval-data folder; None: train.eval_base_dir
    leaks: str | None = None  # `olmax audit leaks` report: clean-subset records too
    lm_eval: tuple[str, ...] = ()  # lm-eval task names, scored through the olmax adapter
    downstream: tuple[
        str, ...
    ] = ()  # OLMo-core downstream tasks (olmax.evals.downstream); (): train.eval_downstream
    downstream_limit: int | None = None  # documents per task; None: train.eval_downstream_limit; 0: all
    lm_eval_limit: float | None = None
    lm_eval_include: str | None = None
    memorization: bool = False  # run the memorization checks at each evaluated step
    every: int = 1  # only steps that are multiples of this (plus the final step)
    until_step: int | None = None  # None: the run's train.steps
    once: bool = False  # evaluate what is committed now, then return
    poll_seconds: float = 30.0
    max_idle_seconds: float | None = None  # give up when no new checkpoint appears for this long
    tensorboard: bool | None = None  # None: the run's train.tensorboard


def run_folder(run: str) -> Path:
    """The local folder the job reads `run` from: the folder itself (a path or a file:// URL), or for a run in
    object storage its local mirror (olmax.train.run_folder)."""
    from olmax.train.run_folder import reader_folder

    return reader_folder(run, "watch")


def open_mirror(run: str):
    """A bucket run's mirror (None for a local one), with the run's files (config.yaml, evals/ when the
    mirror has none yet: a restarted job continues the bucket's records) pulled; it downloads a step's
    parameters, never its optimizer state."""
    from olmax.train.run_folder import reader_mirror

    mirror = reader_mirror(run, "watch")
    if mirror is not None:
        mirror.pull(want=lambda step: False, keep_local=(EVALS,))
    return mirror


def sync(job: Job) -> None:
    """A bucket run: download the run's changed files and list the bucket's complete steps (each step is
    downloaded when its turn comes: `pull_step`)."""
    if job.mirror is None:
        return
    job.mirror.pull(want=lambda step: False, keep_local=(EVALS,))
    job.remote_steps = job.mirror.complete_remote_steps()


def pull_step(job: Job, step: int) -> None:
    """A bucket run: download `step` into the mirror (nothing when the bucket removed it meanwhile)."""
    if job.mirror is not None:
        job.mirror.pull(want=lambda s: s == step, keep_local=(EVALS,))


def committed(job: Job) -> list[int]:
    """The run's complete steps: the bucket's for a bucket run (as of the last `sync`), else the folder's."""
    from olmax.train.checkpoint import complete_steps

    return list(job.remote_steps) if job.mirror is not None else complete_steps(job.run / "checkpoints")


def publish(job: Job) -> None:
    """A bucket run whose results folder is the mirror's evals/: upload what changed in it."""
    if job.mirror is not None and job.out.resolve() == (job.mirror.local / EVALS).resolve():
        job.mirror.push_files(EVALS)


@dataclass
class Job:
    """Everything prepared once at start: the run's config, the tokenized sets, the output paths."""

    run: Path
    out: Path
    cfg: Any  # olmax.train.config.ExperimentConfig of the run
    model_cfg: Any  # cfg.model at the compute dtype (olmax.evals.eval_mesh.eval_config)
    mesh: Any  # jax.sharding.Mesh the model is sharded over
    sets: list  # olmax.evals.heldout.PreparedSet
    tokenizer: Any
    batch_size: int
    target: int  # the last step to evaluate
    settings: WatchSettings
    records: list[dict] = field(default_factory=list)
    tb: Any = None
    downstream: list = field(default_factory=list)  # olmax.evals.downstream.Task, built once
    mirror: Any = None  # a bucket run's olmax.train.run_mirror.RunMirror; None for a local run
    remote_steps: list[int] = field(default_factory=list)  # a bucket run's complete steps (`sync`)
    costs: list[dict] = field(default_factory=list)  # OUT/costs.jsonl
    costs_this_process: int = 0  # steps evaluated by this process (its first one compiles)


def prepare(settings: WatchSettings, mirror=None) -> Job:
    """Read the run's config and the existing records, tokenize the sets once; OlmaxError on a bad input."""
    from olmax.evals.eval_mesh import eval_config, eval_mesh
    from olmax.evals.heldout import SetReading, prepare_eval_sets

    run = run_folder(settings.run)
    cfg = load_run_config(run)
    if settings.every < 1:
        raise OlmaxError(f"--every {settings.every}: must be >= 1")
    specs, limit = eval_settings(cfg, settings.evals, settings.limit)
    tok = eval_tokenizer(settings.tokenizer or cfg.train.eval_tokenizer)
    seq_len = settings.seq_len or cfg.data.seq_len
    leaks = (
        contaminated_ids(read_json(settings.leaks, "an `olmax audit leaks` report"))
        if settings.leaks
        else None
    )
    reading = SetReading(
        text_field=settings.text_field,
        limit=limit or None,
        vocab_size=cfg.model.vocab_size,
        base_dir=settings.base_dir or getattr(cfg.train, "eval_base_dir", None),
    )
    sets = prepare_eval_sets(specs, tok, seq_len, reading, contaminated=leaks)
    # the in-loop hook's batch: B x L x V fp32 logits within its budget (rows are independent, but one
    # batch shape keeps the numbers bitwise those of the trainer's records)
    batch_size = settings.batch_size or eval_batch_size(seq_len, cfg.model.vocab_size)
    out = Path(settings.out) if settings.out else run / EVALS
    model_cfg = eval_config(cfg.model, settings.dtype)
    job = Job(
        run,
        out,
        cfg,
        model_cfg,
        eval_mesh(settings.mesh, model_cfg),
        sets,
        tok,
        batch_size,
        min(settings.until_step or cfg.train.steps, cfg.train.steps),
        settings,
    )
    job.downstream = run_tasks(cfg, tok, seq_len, settings.downstream, settings.downstream_limit)
    job.mirror = mirror
    job.records = read_records(out)
    job.costs = read_jsonl(out / COSTS) if (out / COSTS).is_file() else []
    check_compatible(job)
    return job


def read_records(out: Path) -> list[dict]:
    """The records already in OUT/evals.jsonl (none when it does not exist)."""
    path = out / RECORDS
    return [r for r in read_jsonl(path) if isinstance(r, dict)] if path.is_file() else []


def check_compatible(job: Job) -> None:
    """Refuse to extend evals.jsonl with a set of the same name but other content or settings."""
    mine = {ps.name: (ps.fingerprint, ps.seq_len, ps.tokenizer_sha256) for ps in job.sets}
    for r in job.records:
        if r.get("kind") != "heldout" or r.get("eval") not in mine:
            continue
        theirs = (r.get("fingerprint"), r.get("seq_len"), r.get("tokenizer_sha256"))
        if theirs != mine[r["eval"]]:
            raise OlmaxError(
                f"{job.out / RECORDS}: set {r['eval']!r} was evaluated at step {r['step']} with "
                f"other content or settings (fingerprint, seq_len, tokenizer {theirs} vs now "
                f"{mine[r['eval']]}); name the set differently, or pass another --out"
            )


def wanted_keys(job: Job) -> set[tuple]:
    """What a finished step holds: one key per held-out set and subset, lm-eval task, memorization."""
    keys = {("heldout", ps.name, "all") for ps in job.sets}
    keys |= {("heldout", ps.name, "clean") for ps in job.sets if ps.clean_rows is not None}
    keys |= {("lm_eval", t) for t in job.settings.lm_eval}
    keys |= {("downstream", t.name) for t in job.downstream}
    return keys | ({("memorization",)} if job.settings.memorization else set())


def record_key(r: dict) -> tuple:
    kind = r.get("kind")
    if kind == "heldout":
        return ("heldout", r.get("eval"), r.get("subset"))
    return (kind, r.get("task")) if kind in ("lm_eval", "downstream") else (kind,)


def done_steps(job: Job) -> set[int]:
    """Steps with every wanted record, or recorded as skipped."""
    want, have = wanted_keys(job), {}
    for r in job.records:
        have.setdefault(r["step"], set()).add(record_key(r))
    return {s for s, keys in have.items() if ("skipped",) in keys or want <= keys}


def pending_steps(job: Job) -> list[int]:
    """The committed steps still to evaluate, ascending: up to the target, multiples of --every (and the
    run's final step)."""
    every, done = job.settings.every, done_steps(job)
    return sorted(
        s
        for s in committed(job)
        if s <= job.target and s not in done and (s % every == 0 or s in (job.target, job.cfg.train.steps))
    )


def reached_target(job: Job) -> bool:
    """The run has a committed (or recorded) step at or past the target."""
    seen = [r["step"] for r in job.records] + committed(job)
    return bool(seen) and max(seen) >= job.target


def evaluate_step(job: Job, model, step: int) -> list[dict]:
    """Every wanted record of `step` for `model`."""
    from olmax.evals.heldout import run_heldout

    records = run_heldout(model, job.sets, step=step, batch_size=job.batch_size)
    for task in job.settings.lm_eval:
        records.append(lm_eval_record(job, model, step, task))
    if job.downstream:
        pad = (
            job.model_cfg.pad_token_id
            if job.model_cfg.pad_token_id is not None
            else job.tokenizer.eos_token_id
        )
        records.extend(run_downstream(model, job.downstream, pad, step=step, batch_size=job.batch_size))
    if job.settings.memorization:
        records.append(memorization_record(job, model, step))
    return records


def lm_eval_record(job: Job, model, step: int, task: str) -> dict:
    """One lm-eval task through the olmax adapter, on the in-memory model of `step`."""
    from olmax.evals.lm_eval_adapter import OlmaxLM, TaskRun, evaluate

    lm = OlmaxLM(model=model, tokenizer=job.tokenizer, batch_size=job.batch_size)
    res = evaluate(
        lm, [task], TaskRun(include_path=job.settings.lm_eval_include, limit=job.settings.lm_eval_limit)
    )
    metrics = {
        k: v for k, v in (res.get("results") or {}).get(task, {}).items() if isinstance(v, int | float)
    }
    samples = (res.get("n-samples") or {}).get(task, {})
    return {
        "kind": "lm_eval",
        "step": step,
        "task": task,
        "metrics": metrics,
        "samples": samples.get("effective"),
        "limit": job.settings.lm_eval_limit,
    }


def memorization_record(job: Job, model, step: int) -> dict:
    """The memorization checks at `step`: the run's curves up to `step`, exposure replayed to `step`."""
    from olmax.evals.memorization import Models, Probe, memorization_report

    run = read_run(job.run)
    keep = run.train_steps <= step
    curves = Curves(
        run.source,
        run.train_steps[keep],
        run.train_loss[keep],
        {k: (s[s <= step], v[s <= step]) for k, (s, v) in run.heldout.items() if np.any(s <= step)},
    )
    report = memorization_report(
        curves,
        exposure=replay_exposure(job.run, step),
        models=Models(model, Probe(batch_size=job.batch_size), job.model_cfg.pad_token_id or 0),
    )
    return {
        "kind": "memorization",
        "step": step,
        "flagged": bool(report["flagged"]),
        "verdict": report["verdict"],
        "checks": {k: v.get("status") for k, v in report["checks"].items()},
    }


def commit(job: Job, new: list[dict]) -> None:
    """Add `new` to evals.jsonl (whole file, atomically; steps ascending), then refresh the views."""
    have = {(r["step"], record_key(r)) for r in job.records}
    fresh = [r for r in new if (r["step"], record_key(r)) not in have]
    records = sorted(
        job.records + fresh, key=lambda r: r["step"]
    )  # stable: a step's records keep their order
    write_jsonl(job.out / RECORDS, records)
    job.records = records
    write_views(job)
    if job.tb is not None:
        tensorboard_scalars(job.tb, fresh)
        job.tb.flush()
    publish(job)


def write_views(job: Job) -> None:
    """OUT/summary.md and OUT/curves.png from the records (both written atomically)."""
    write_text(job.out / SUMMARY, summary_markdown(job.records, job.run))
    if any(r.get("kind") == "heldout" for r in job.records):
        plot_run(job.out / RECORDS, job.out / CURVES, title=f"held-out CE: {job.run.name}")


def summary_markdown(records: list[dict], run: Path) -> str:
    """A step x set table of CE (and lm-eval metrics, memorization verdicts, skipped steps)."""
    cols: list[str] = []
    rows: dict[int, dict[str, str]] = {}
    for r in records:
        kind, cells = r.get("kind"), rows.setdefault(r["step"], {})
        if kind == "heldout":
            col = f"{r['eval']} CE" if r["subset"] == "all" else f"{r['eval']} ({r['subset']}) CE"
            cells[col] = f"{r['ce']:.4f}" if r.get("ce") is not None else "nan"
        elif kind == "lm_eval":
            name, value = next(
                ((k, v) for k, v in sorted(r["metrics"].items()) if k.startswith("acc")), (None, None)
            )
            col = f"{r['task']} {name.split(',')[0]}" if name else r["task"]
            cells[col] = f"{value:.4f}" if value is not None else "-"
        elif kind == "downstream":
            label, value = headline(r)
            col = f"{r['task']} ({label})"
            cells[col] = f"{value:.4f}"
        elif kind == "memorization":
            col = "memorization"
            cells[col] = "FLAGGED" if r["flagged"] else "ok"
        elif kind == "skipped":
            col = "status"
            cells[col] = "skipped: " + r.get("reason", "")
        else:
            continue
        if col not in cols:
            cols.append(col)
    lines = [
        f"# Held-out evals of {run}",
        "",
        f"{len(rows)} checkpoint step(s); records in `{RECORDS}`.",
        "",
        "| step | " + " | ".join(cols) + " |",
        "|---:|" + "---:|" * len(cols),
    ]
    lines += [
        f"| {s} | " + " | ".join(cells.get(c, "") for c in cols) + " |" for s, cells in sorted(rows.items())
    ]
    return "\n".join(lines) + "\n"


def open_tensorboard(job: Job):
    """A SummaryWriter under OUT/tb (the trainer's writer), rebuilt from the records so that it mirrors them."""
    from tensorboardX import SummaryWriter

    tb_dir = job.out / "tb"
    for old in tb_dir.glob("events.out.tfevents.*"):
        old.unlink()
    tb = SummaryWriter(str(tb_dir))
    tensorboard_scalars(tb, job.records)
    return tb


def tensorboard_scalars(tb, records: list[dict]) -> None:
    from olmax.evals.heldout import metric_values

    for r in records:
        if r.get("kind") == "heldout":
            for key, value in metric_values(r).items():
                if not key.endswith("/tokens"):
                    tb.add_scalar(f"eval/{key}", value, r["step"])
        elif r.get("kind") == "downstream":
            for key, value in downstream_values(r).items():
                tb.add_scalar(f"eval/{key}", value, r["step"])
        elif r.get("kind") == "lm_eval":
            for metric, value in r["metrics"].items():
                tb.add_scalar(f"lm_eval/{r['task']}/{metric.split(',')[0]}", value, r["step"])
    tb.flush()


def stderr_log(message: str) -> None:
    print(f"olmax eval watch: {message}", file=sys.stderr, flush=True)


def evaluate_pending(job: Job, log: Callable[[str], None]) -> int:
    """Evaluate (or record as skipped) every pending step, committing after each; returns how many."""
    from olmax.evals.eval_model import as_eval_model
    from olmax.evals.heldout import record_name

    steps = pending_steps(job)
    for step in steps:
        t0 = time.perf_counter()
        pull_step(job, step)
        t1 = time.perf_counter()
        model = read_step_model(job.run, step, job.model_cfg, gone_ok=True, mesh=job.mesh)
        if model is None:
            reason = "removed (checkpoint retention) before it was evaluated"
            commit(job, [{"kind": "skipped", "step": step, "reason": reason}])
            log(f"step {step}: skipped, {reason}")
            continue
        model = as_eval_model(model, job.mesh)
        t2 = time.perf_counter()
        new = evaluate_step(job, model, step)
        t3 = time.perf_counter()
        commit(job, new)
        if job.mirror is not None:  # evaluated: the mirror's copy of the step is not needed again
            shutil.rmtree(job.run / "checkpoints" / str(step), ignore_errors=True)
        cost = step_cost(job, step, new, (t1 - t0, t2 - t1, t3 - t2))
        shown = ", ".join(f"{record_name(r)} CE {r['ce']:.4f}" for r in new if r.get("kind") == "heldout")
        log(f"step {step}: {shown} ({describe_cost(cost)})")
    return len(steps)


def step_cost(job: Job, step: int, new: list[dict], seconds: tuple[float, float, float]) -> dict:
    """What evaluating `step` cost, added to OUT/costs.jsonl (rewritten whole, atomically): the download
    (a bucket run's), the restore and the evaluation in seconds (the job's first step includes compiling),
    the held-out tokens scored and their rate, and where it ran."""
    from olmax.evals.eval_mesh import describe

    download, restore, evaluate = seconds
    tokens = sum(r["tokens"] for r in new if r.get("kind") == "heldout" and r.get("subset") == "all")
    cost = {
        "step": step,
        "download_s": round(download, 3) if job.mirror is not None else None,
        # bytes downloaded, and bytes of the step left in the bucket (its optimizer state)
        **download_bytes(job, step),
        "restore_s": round(restore, 3),
        "eval_s": round(evaluate, 3),
        "tokens": tokens,
        "tokens_per_s": round(tokens / evaluate, 1) if evaluate > 0 else None,
        "mesh": describe(job.mesh),
        "dtype": job.model_cfg.dtype,
        "first": not job.costs_this_process,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    job.costs_this_process += 1
    job.costs = [*job.costs, cost]
    write_jsonl(job.out / COSTS, job.costs)
    publish(job)
    return cost


def download_bytes(job: Job, step: int) -> dict:
    """{"download_bytes", "left_in_bucket_bytes"} of a bucket run's step ({} for a local run)."""
    got = job.mirror.last_download if job.mirror is not None else None
    if not got or got["step"] != step:
        return {}
    return {"download_bytes": got["bytes"], "left_in_bucket_bytes": got["left_bytes"]}


def describe_cost(cost: dict) -> str:
    """`download 85.2 s, restore 12.1 s, eval 30.5 s: 524,288 tokens at 17,190 tokens/s, 1x8 (...)`."""
    parts = [] if cost["download_s"] is None else [f"download {cost['download_s']:.1f} s"]
    if cost.get("download_bytes") is not None:
        parts[-1] += (
            f" ({cost['download_bytes'] / 1e6:,.1f} MB; {cost['left_in_bucket_bytes'] / 1e6:,.1f} MB of optimizer "
            "state left in the bucket)"
        )
    parts += [f"restore {cost['restore_s']:.1f} s", f"eval {cost['eval_s']:.1f} s"]
    rate = f"{cost['tokens_per_s']:,.0f} tokens/s" if cost["tokens_per_s"] else "no rate"
    first = ", compile included" if cost["first"] else ""
    return (
        f"{', '.join(parts)}{first}: {cost['tokens']:,} tokens at {rate} on {cost['mesh']}, {cost['dtype']}"
    )


def follow(settings: WatchSettings, log: Callable[[str], None] = stderr_log, mirror=None) -> Job:
    """Evaluate the run's committed checkpoints until its final step (or `until_step`) is done, or once.
    `mirror`: a bucket run's (`open_mirror`), synchronised before each poll.

    The caller holds `exclusive(job.out)` (see `watch`)."""
    from olmax.evals.eval_mesh import describe

    wait_for_config(settings, log, mirror)
    job = prepare(settings, mirror)
    job.out.mkdir(parents=True, exist_ok=True)
    use_tb = settings.tensorboard if settings.tensorboard is not None else job.cfg.train.tensorboard
    job.tb = open_tensorboard(job) if use_tb else None
    done = sorted(done_steps(job))
    log(
        f"{job.mirror.url if job.mirror is not None else job.run}: {len(job.sets)} set(s) ({', '.join(ps.name for ps in job.sets)}), seq_len "
        f"{job.sets[0].seq_len}, batch {job.batch_size}, {job.model_cfg.dtype} on {describe(job.mesh)}; "
        f"until step {job.target}" + (f"; {len(done)} step(s) already in {job.out / RECORDS}" if done else "")
    )
    idle_since = time.monotonic()
    try:
        while True:
            sync(job)
            if evaluate_pending(job, log):
                idle_since = time.monotonic()
            if settings.once or reached_target(job) and not pending_steps(job):
                break
            if (
                settings.max_idle_seconds is not None
                and time.monotonic() - idle_since > settings.max_idle_seconds
            ):
                raise OlmaxError(
                    f"{job.run / 'checkpoints'}: no new checkpoint for {settings.max_idle_seconds:g} s "
                    f"(waiting for step {job.target}); is the trainer running? Rerun to continue"
                )
            time.sleep(settings.poll_seconds)
    finally:
        if job.tb is not None:
            job.tb.close()
    return job


def wait_for_config(settings: WatchSettings, log: Callable[[str], None], mirror=None) -> None:
    """Started before the trainer: wait (polling) until the run folder holds its config.yaml."""
    config = run_folder(settings.run) / "config.yaml"
    if config.is_file() or settings.once:
        return  # --once on a folder without one: prepare() says what is missing
    shown = f"{mirror.url}/config.yaml" if mirror is not None else config
    log(f"waiting for {shown} (the trainer writes it at start)")
    t0 = time.monotonic()
    while not config.is_file():
        if mirror is not None:
            mirror.pull(want=lambda step: False, keep_local=(EVALS,))
            if config.is_file():
                break
        if settings.max_idle_seconds is not None and time.monotonic() - t0 > settings.max_idle_seconds:
            raise OlmaxError(
                f"{config}: not written within {settings.max_idle_seconds:g} s; is `olmax train "
                f"--run-dir {config.parent}` running?"
            )
        time.sleep(min(settings.poll_seconds, 2.0))


def watch(settings: WatchSettings, log: Callable[[str], None] = stderr_log) -> Job:
    """`follow` holding the writer's lock of the output folder: a second watcher refuses at once."""
    mirror = open_mirror(settings.run)
    run = run_folder(settings.run)
    if settings.once:
        run_config_path(run)  # a mistyped folder is an error before the lock creates anything
    out = Path(settings.out) if settings.out else run / EVALS
    with exclusive(out, "olmax eval watch"):
        return follow(settings, log, mirror)

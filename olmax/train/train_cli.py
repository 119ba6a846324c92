"""`olmax train` (the train area's front end): the command line read once into a `TrainCommand`, its run
folder opened once (olmax.train.run_mirror), its config built once (olmax.train.runrecord.start_config),
then `olmax.train.loop.train`. Also `olmax model convert`'s reading of a training run (`convert_run`).

The in-loop evals are built by the evals area, above this one: the `olmax` command hands their builder in
(`register(sub, eval_hook=...)`), so this front end imports nothing above the trainer.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# builds the in-loop eval hook of an experiment config (olmax.evals.hook.train_hook)
EvalHookBuilder = Callable[[Any], Callable[[Any], dict[str, float]]]


def register(sub: argparse._SubParsersAction, eval_hook: EvalHookBuilder | None = None) -> None:
    """Add `olmax train`; `eval_hook` builds the in-loop evals a recipe with `train.eval_every` runs."""
    p = sub.add_parser(
        "train",
        help="train (or resume) a run from a recipe: tiny, olmo3_7b_stage1, ...",
        description="Train to the absolute step --steps, resuming from the newest complete checkpoint in "
        "--run-dir when there is one (the same command finishes a killed run or extends a finished one). "
        "Writes RUN_DIR/metrics.jsonl (one JSON object per step), RUN_DIR/tb (TensorBoard), "
        "RUN_DIR/config.yaml, RUN_DIR/history.jsonl and RUN_DIR/checkpoints. On resume the run's own "
        "config.yaml is the default and the flags and overrides apply to it: a change of the data stream "
        "or the model is refused, any other change is listed and recorded in history.jsonl "
        "(docs/runs.md). The device count comes from JAX; the global batch "
        "and data order never depend on it. Overrides are area.key=value (model, data, optim, mesh, "
        "checkpoint, train), e.g. optim.lr=1e-3 model.n_layers=2. SIGTERM (a TPU VM's preemption notice) "
        "stops every process after one agreed step, saved, with exit code 75; when a process of a multi-process "
        "run is lost the others exit with code 69 (docs/tpu.md).",
    )
    p.add_argument("overrides", nargs="*", metavar="AREA.KEY=VALUE", help="dotted config overrides")
    p.add_argument("--config", required=True, help="a preset name (configs/NAME.yaml) or a YAML path")
    p.add_argument(
        "--run-dir",
        help="run folder (required unless --dry-run): a local path (every process of the run sees it), or an "
        "s3:// / gs:// URL, trained in a local mirror on each host ($OLMAX_RUN_STAGING, else ~/.cache/olmax/runs) "
        "and uploaded after each checkpoint by every host; a rerun on any hosts resumes from the bucket's newest "
        "complete step",
    )
    p.add_argument("--steps", type=int, help="absolute step to train to (train.steps)")
    p.add_argument("--checkpoint-every", type=int, help="checkpoint period in steps (checkpoint.every)")
    p.add_argument("--mix", help="mix file to train on (data.mix); the tiny recipe defaults to the demo mix")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the resolved config (as RUN_DIR/config.yaml would record it: defaults filled in, and with "
        "--run-dir the config resuming it would use), params, FLOPs/token, steps and tokens, then exit",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="PATH",
        help="end with the run's summary as one JSON line, not the table; with --plan, write the plan to PATH",
    )
    p.add_argument(
        "--plan",
        action="store_true",
        help="compile the step for --topology here, ahead of time (libtpu needed, no chip), and print its per-chip "
        "plan: memory against the chip's HBM, kernel and remat resolved for the target, collectives, predicted "
        "step time and MFU; exits 1 when it does not fit, naming what would",
    )
    p.add_argument(
        "--topology",
        metavar="TYPE",
        help="--plan: a Cloud TPU accelerator type, e.g. v5e-256, v5e-64, v5p-128",
    )
    p.add_argument("--num-slices", type=int, default=1, help="--plan: slices of --topology joined by DCN")
    p.add_argument(
        "--coordinator",
        default=os.environ.get("OLMAX_COORDINATOR"),
        help="multi-process: coordinator host:port for jax.distributed (or $OLMAX_COORDINATOR); not needed on a "
        "Cloud TPU slice, whose workers find each other",
    )
    p.add_argument(
        "--num-processes",
        type=int,
        default=int(os.environ.get("OLMAX_NUM_PROCESSES", "0")) or None,
        help="multi-process: process count (or $OLMAX_NUM_PROCESSES)",
    )
    p.add_argument(
        "--process-id",
        type=int,
        default=int(os.environ.get("OLMAX_PROCESS_ID", "-1")),
        help="multi-process: this process's id (or $OLMAX_PROCESS_ID)",
    )
    p.set_defaults(func=functools.partial(run, eval_hook=eval_hook))


@dataclass(frozen=True)
class Processes:
    """jax.distributed's settings: none (`coordinator` None) for a single-process run."""

    coordinator: str | None
    count: int | None
    index: int


@dataclass(frozen=True)
class Plan:
    """--plan's target: a Cloud TPU accelerator type (None: not given) and how many slices of it."""

    topology: str | None
    num_slices: int


@dataclass(frozen=True)
class TrainCommand:
    """`olmax train`'s command line, read once: the recipe, the run folder as given, every override (the
    dotted ones, then those the flags --steps, --checkpoint-every, --mix and --no-progress stand for), what
    to do and how to report it, and the process settings."""

    config: str
    run_dir: str | None
    overrides: tuple[str, ...]
    dry_run: bool
    json: str | None  # "-": the summary as a JSON line on stderr; a path: --plan's report there
    processes: Processes
    plan: Plan | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> TrainCommand:
        flags = {
            "train.steps": args.steps,
            "checkpoint.every": args.checkpoint_every,
            "data.mix": args.mix,
            "train.progress": "false" if args.no_progress else None,
        }
        dotted, json_to = list(args.overrides), args.json
        if json_to not in (None, "-") and "=" in json_to and "." in json_to.split("=", 1)[0]:
            dotted.insert(0, json_to)  # `--json area.key=value`: an override, not --json's PATH
            json_to = "-"
        return cls(
            config=args.config,
            run_dir=args.run_dir,
            overrides=(*dotted, *(f"{k}={v}" for k, v in flags.items() if v is not None)),
            dry_run=args.dry_run,
            json=json_to,
            processes=Processes(args.coordinator, args.num_processes, args.process_id),
            plan=Plan(args.topology, args.num_slices) if args.plan else None,
        )


def run(args: argparse.Namespace, eval_hook: EvalHookBuilder | None = None) -> int:
    return train_command(TrainCommand.from_args(args), eval_hook)


def train_command(cmd: TrainCommand, eval_hook: EvalHookBuilder | None = None) -> int:
    """Run `cmd`: start the run's processes, open its folder, build the config, then print it (--dry-run)
    or train. A run stopped by a preemption notice returns olmax.train.hosts.PREEMPTED."""
    from olmax.errors import OlmaxError
    from olmax.train.hosts import PREEMPTED, Preempted
    from olmax.train.run_folder import open_run_folder
    from olmax.train.runrecord import start_config

    if cmd.plan is not None:
        return _plan(cmd)
    if not cmd.dry_run:
        if not cmd.run_dir:
            raise OlmaxError("--run-dir is required (the folder for checkpoints and metrics.jsonl)")
        _distributed(cmd.processes)  # before the folder: each host of a bucket run has a mirror of its own
    folder = open_run_folder(cmd.run_dir) if cmd.run_dir else None
    if folder is not None and folder.pulled is not None and folder.writes_record:
        print(
            f"olmax train: resuming {folder.url} from its step {folder.pulled} (downloaded to {folder.local})",
            file=sys.stderr,
            flush=True,
        )
    # with a run folder, the config resuming it would use: a dry run shows what the run would train with
    cfg, note = start_config(cmd.config, cmd.overrides, folder.local if folder else None)
    if cmd.dry_run:
        from olmax.train.loop import dry_run

        if note:
            print(note, file=sys.stderr)
        print(dry_run(cfg))
        return 0
    try:
        summary = _train(cfg, folder, note, eval_hook)
    except Preempted as stop:
        print(f"olmax train: {stop} (exit {PREEMPTED})", file=sys.stderr, flush=True)
        return PREEMPTED
    _report(summary, cmd.json)
    return 0


def _train(cfg, folder, note: str, eval_hook: EvalHookBuilder | None) -> dict:
    """Train `cfg` in `folder` (olmax.train.run_folder.RunFolder) under its lock, with the watchdog that
    ends this process when another process of the run is lost (olmax.train.hosts)."""
    from olmax.atomic import exclusive
    from olmax.data.loader import resolve_mix
    from olmax.data.stream_cli import prepare_named_demo_mix
    from olmax.train.hosts import Watchdog
    from olmax.train.loop import train

    # one run per run directory: a second `olmax train` on it refuses (the processes of one multi-process
    # run share the directory, and process 0 holds the lock for them all; a bucket run's hosts each hold
    # their own mirror)
    own = folder.writes_record or folder.per_host
    lock = exclusive(folder.local, "olmax train") if own else contextlib.nullcontext()
    with lock, Watchdog(folder.hosts, folder.newest_complete):
        prepare_named_demo_mix(cfg.data)  # `mix: demo` (the tiny recipe's), as every stream command does
        resolve_mix(cfg.data)  # a missing mix is reported before the eval sets are read
        hook = eval_hook(cfg) if eval_hook is not None and cfg.train.eval_every else None
        return train(cfg, folder, eval_hook=hook, resume_note=note)


def _plan(cmd: TrainCommand) -> int:
    """`olmax train --plan`: the step compiled for a slice here, printed (and written to --json PATH); exit 1
    when it does not fit, with the settings that would."""
    import jax

    from olmax.errors import OlmaxError
    from olmax.jsonio import write_json
    from olmax.train.config import load_config
    from olmax.train.plan import format_report, parse_topology, plan_report, what_fits

    if not cmd.plan.topology:
        raise OlmaxError("--plan needs --topology (a Cloud TPU accelerator type, e.g. v5e-256)")
    topology = parse_topology(cmd.plan.topology, cmd.plan.num_slices)
    if "JAX_PLATFORMS" not in os.environ:  # a plan needs no chip, and leaves one a run holds alone
        jax.config.update("jax_platforms", "cpu")
    has_mix = any(o.startswith("data.mix=") for o in cmd.overrides)
    cfg = load_config(cmd.config, [*cmd.overrides, *([] if has_mix else ["data.mix=plan"])])  # reads no data

    def say(line: str) -> None:
        print(f"olmax plan: {line}", file=sys.stderr, flush=True)

    say(
        f"compiling {cmd.config} for {topology.name} ({topology.libtpu_name}) on this host; a 7B step takes minutes"
    )
    report = plan_report(cfg, topology, say=say)
    if not report["fits"] and cfg.model.remat != "auto":
        report["what_fits"] = what_fits(cfg, topology, say=say)
    print(format_report(report), flush=True)
    if cmd.json not in (None, "-"):
        write_json(cmd.json, report)
    return 0 if report["fits"] else 1


def _report(summary: dict, as_json: str | None) -> None:
    import jax

    if jax.process_index() != 0:
        return
    if as_json:
        print(json.dumps(summary, default=str), file=sys.stderr)
    elif summary.get("last"):
        from olmax.train.loop import summary_table

        print(summary_table(summary), flush=True)


def _distributed(processes: Processes) -> None:
    """JAX's distributed system for a run of several processes (olmax.train.launch), said once."""
    from olmax.train.launch import start

    started = start(processes.coordinator, processes.count, processes.index)
    if started:
        print(f"olmax train: {started}", file=sys.stderr, flush=True)


def convert_run(args: argparse.Namespace, out: str) -> bool:
    """`olmax model convert` from a training run (olmax.model.model_cli, handed this by the `olmax` command):
    when `args.src` is a run folder or one of its checkpoint steps, write it to `out` in `args.to`'s format
    and say so; False when it is neither (an HF or olmax directory, which the model area reads itself)."""
    from olmax.train.export import export_hf, restore_run_model, run_checkpoint

    found = run_checkpoint(args.src)
    if found is None:
        return False
    if args.to == "hf":
        info = export_hf(args.src, out, dtype=args.dtype, tokenizer=args.tokenizer)
        print(
            f"wrote hf checkpoint {args.out} (run {info['source_run']}, step {info['step']}, "
            f"{info['dtype']}, data fingerprint {info['data_fingerprint']})"
        )
        return True
    from olmax.model.convert import save_olmax

    save_olmax(restore_run_model(*found).model, out)
    print(f"wrote olmax checkpoint {args.out}")
    return True

"""`olmax train` (the train area's front end): parse flags and overrides, build the experiment config, call `olmax.train.loop.train`."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import os
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
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
        "checkpoint, train), e.g. optim.lr=1e-3 model.n_layers=2.",
    )
    p.add_argument("overrides", nargs="*", metavar="AREA.KEY=VALUE", help="dotted config overrides")
    p.add_argument("--config", required=True, help="a preset name (configs/NAME.yaml) or a YAML path")
    p.add_argument(
        "--run-dir",
        help="run folder (required unless --dry-run): a local path, or an s3:// / gs:// URL, trained in a local "
        "mirror ($OLMAX_RUN_STAGING, else ~/.cache/olmax/runs) and uploaded after each checkpoint; a rerun "
        "on any machine resumes from the bucket's newest complete step",
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
        "step time and MFU; exits 1 when it does not fit (naming what would)",
    )
    p.add_argument(
        "--topology",
        metavar="TYPE",
        help="--plan: a Cloud TPU accelerator type, e.g. v5e-256, v5e-64, v5p-128, v6e-64",
    )
    p.add_argument("--num-slices", type=int, default=1, help="--plan: slices of --topology joined by DCN")
    p.add_argument(
        "--coordinator",
        default=os.environ.get("OLMAX_COORDINATOR"),
        help="multi-process: coordinator host:port for jax.distributed (or $OLMAX_COORDINATOR)",
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
    p.set_defaults(func=run)


def _overrides(args: argparse.Namespace) -> list[str]:
    out = list(args.overrides)
    if args.steps is not None:
        out.append(f"train.steps={args.steps}")
    if args.checkpoint_every is not None:
        out.append(f"checkpoint.every={args.checkpoint_every}")
    if args.mix is not None:
        out.append(f"data.mix={args.mix}")
    if args.no_progress:
        out.append("train.progress=false")
    return out


def _distributed(args: argparse.Namespace) -> None:
    import jax

    if not args.coordinator:
        return
    if args.num_processes is None or args.process_id < 0:
        from olmax.errors import OlmaxError

        raise OlmaxError(
            "--coordinator needs --num-processes and --process-id (or OLMAX_NUM_PROCESSES / OLMAX_PROCESS_ID)"
        )
    if os.environ.get("JAX_PLATFORMS", "") == "cpu" or not _has_accelerator():
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=args.coordinator, num_processes=args.num_processes, process_id=args.process_id
    )


def _has_accelerator() -> bool:
    return any(
        importlib.util.find_spec(m) is not None for m in ("jax_cuda12_plugin", "jax_cuda13_plugin", "libtpu")
    )


def _eval_hook(cfg):
    """The held-out eval hook (olmax.evals.hook) when the recipe evaluates in-loop, else None."""
    if not cfg.train.eval_every:
        return None
    from olmax.evals.hook import train_hook

    return train_hook(cfg)


def _resume_config(cfg, args: argparse.Namespace):
    """On resume the run's saved config is the default: the command line's overrides apply to it, and the
    --config file's own differing settings are ignored (said on stderr), all but train.steps, the
    command's target. A fresh run uses `cfg`."""

    from olmax.evals.hook import with_eval_defaults
    from olmax.train import runrecord
    from olmax.train.config import absolute_paths, load_config, load_run_config

    run_dir = Path(args.run_dir)
    if not (run_dir / runrecord.CONFIG).is_file() or not runrecord.has_checkpoint(run_dir):
        return cfg
    saved = str(run_dir / runrecord.CONFIG)
    # the saved paths are read against the run folder, the command line's against the current one
    resumed = absolute_paths(load_config(saved, _overrides(args), base=load_run_config(run_dir)))
    resumed = with_eval_defaults(resumed)  # a run recorded before the defaults were filled in
    # the step to train to is the command's (--steps, else the --config file's), not a setting of the
    # run: rerunning the original command after a shorter --steps run finishes it
    resumed = resumed.replace(train=dataclasses.replace(resumed.train, steps=cfg.train.steps))
    ignored = runrecord.changes(resumed, absolute_paths(cfg))
    args.resume_note = (
        f"olmax train: resuming {run_dir}: its {runrecord.CONFIG} is the default, so --config "
        f"{args.config}'s differing setting(s) are not used: {_some(list(ignored))} (pass an override "
        "to change one)"
        if ignored
        else ""
    )
    return resumed


def _some(names: list[str], n: int = 8) -> str:
    return ", ".join(names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")


def _bucket_run(args: argparse.Namespace):
    """For a `--run-dir` URL in object storage: its local mirror (olmax.train.run_mirror), brought to the
    bucket's newest complete checkpoint when the bucket is further than the mirror (a resume on another
    machine), and `args.run_dir` pointed at it; None for a local folder."""
    from olmax import storage
    from olmax.train.checkpoint import complete_steps
    from olmax.train.run_mirror import RunMirror, is_remote_run

    if not is_remote_run(args.run_dir):
        return None
    storage.require_bucket(args.run_dir)
    mirror = RunMirror(args.run_dir, "train")
    remote = mirror.complete_remote_steps()
    local = complete_steps(mirror.local / "checkpoints")
    if remote and (not local or remote[0] > local[0]):
        print(
            f"olmax train: resuming {mirror.url} from its step {remote[0]} (downloaded to {mirror.local})",
            file=sys.stderr,
            flush=True,
        )
        mirror.pull(newest_only=True)
    args.run_dir = str(mirror.local)
    return mirror


def _json_path(args: argparse.Namespace) -> None:
    """`--json` before an override takes the override as its PATH: give it back to the overrides."""
    if args.json not in (None, "-") and "=" in args.json and "." in args.json.split("=", 1)[0]:
        args.overrides.insert(0, args.json)
        args.json = "-"


def _plan(args: argparse.Namespace) -> int:
    """`olmax train --plan`: the step compiled for a slice here; exit 1 when it does not fit."""
    import jax

    from olmax.errors import OlmaxError
    from olmax.jsonio import write_json
    from olmax.train.config import load_config
    from olmax.train.plan import format_report, parse_topology, plan_report, what_fits

    if not args.topology:
        raise OlmaxError("--plan needs --topology (a Cloud TPU accelerator type, e.g. v5e-256)")
    topology = parse_topology(args.topology, args.num_slices)
    if "JAX_PLATFORMS" not in os.environ:  # a plan needs no chip, and leaves one a run holds alone
        jax.config.update("jax_platforms", "cpu")
    overrides = _overrides(args) + ([] if args.mix else ["data.mix=plan"])  # a plan reads no data
    cfg = load_config(args.config, overrides)

    def say(line: str) -> None:
        print(f"olmax plan: {line}", file=sys.stderr, flush=True)

    say(
        f"compiling {args.config} for {topology.name} ({topology.libtpu_name}) on this host; a 7B step takes minutes"
    )
    report = plan_report(cfg, topology, say=say)
    if not report["fits"] and cfg.model.remat != "auto":
        report["what_fits"] = what_fits(cfg, topology, say=say)
    print(format_report(report), flush=True)
    if args.json and args.json != "-":
        write_json(args.json, report)
    return 0 if report["fits"] else 1


def run(args: argparse.Namespace) -> int:
    from olmax.data.loader import resolve_mix
    from olmax.data.prepare.demo_mix import ensure_stream_mix
    from olmax.errors import OlmaxError
    from olmax.evals.hook import with_eval_defaults
    from olmax.train.config import load_config

    _json_path(args)
    if args.plan:
        return _plan(args)
    # every default the run reads from the environment is filled in here, so the dry run and the record
    # show it (docs/runs.md)
    cfg = with_eval_defaults(load_config(args.config, _overrides(args)))
    mirror = _bucket_run(args) if args.run_dir else None
    if args.run_dir:  # a dry run on a run folder shows what resuming it would train with
        cfg = _resume_config(cfg, args)
    if args.dry_run:
        from olmax.train.loop import dry_run

        if getattr(args, "resume_note", ""):
            print(args.resume_note, file=sys.stderr)
        print(dry_run(cfg))
        return 0
    if not args.run_dir:
        raise OlmaxError("--run-dir is required (the folder for checkpoints and metrics.jsonl)")
    _distributed(args)

    import jax

    if mirror is not None and jax.process_count() > 1:
        raise OlmaxError(
            f"--run-dir {mirror.url}: a bucket run folder is written by one process (its local mirror is a "
            "folder of this machine); for a multi-process run give a shared local folder and copy it to the "
            "bucket"
        )

    from olmax.atomic import exclusive
    from olmax.train.loop import train

    # one run per run directory: a second `olmax train` on it refuses (the processes of one multi-process
    # run share the directory, and process 0 holds the lock for them all)
    lock = exclusive(args.run_dir, "olmax train") if jax.process_index() == 0 else contextlib.nullcontext()
    with lock:
        ensure_stream_mix(cfg.data)  # the demo mix (`mix: demo`) is prepared here, never by the loader
        resolve_mix(cfg.data)  # a missing mix is reported before the eval sets are read
        push = (lambda: mirror.push(keep=cfg.checkpoint.keep)) if mirror is not None else None
        summary = train(
            cfg,
            args.run_dir,
            eval_hook=_eval_hook(cfg),
            resume_note=getattr(args, "resume_note", ""),
            after_save=push,
        )
        if mirror is not None:  # the last step, sealed when the checkpointer closed, and the final record
            push()
            summary["run_dir"] = mirror.url
            if summary.get("checkpoint"):
                summary["checkpoint"] = f"{mirror.url}/checkpoints/{Path(summary['checkpoint']).name}"
    if jax.process_index() == 0:
        if args.json:
            print(json.dumps({k: v for k, v in summary.items()}, default=str), file=sys.stderr)
        elif summary.get("last"):
            from olmax.train.loop import summary_table

            print(summary_table(summary), flush=True)
    return 0

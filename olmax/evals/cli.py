"""`olmax eval ...`: held-out loss/bpb, memorization flags, lm-eval through the olmax adapter, loss plots."""

from __future__ import annotations

import argparse
import sys

from olmax.atomic import locked_out
from olmax.data.stream_cli import add_stream_options


def register(sub: argparse._SubParsersAction) -> None:
    ev = sub.add_parser("eval", help="held-out loss and bits-per-byte, memorization flags, lm-eval, plots")
    ev_sub = ev.add_subparsers(dest="eval_command", metavar="SUBCOMMAND", required=True)

    h = ev_sub.add_parser(
        "heldout", help="token-weighted CE, perplexity and bits-per-byte per held-out set",
        description="One document per instance: [EOS] + doc + [EOS] truncated to --seq-len, right-padded "
        "with PAD, padding masked. Reports CE (nats/token), exp(CE), bits-per-byte = -loglik / (ln 2 x "
        "UTF-8 bytes), token/byte counts and each set's content fingerprint.")
    h.add_argument("--checkpoint", required=True, help="HF checkpoint dir (config.json + safetensors), an "
                   "olmax dir (model_config.json + params/), a training run folder (newest checkpoint) or its "
                   "checkpoints/<step> folder")
    h.add_argument("--eval", action="append", required=True, metavar="NAME=PATH",
                   help="held-out set: jsonl[.gz|.zst], .arrow, .parquet, a datasets folder, or a bundled "
                   "name (sciq, arc_easy, ...); repeatable")
    h.add_argument("--tokenizer", default=None,
                   help="tokenizer.json or dolma2 (default: the checkpoint's tokenizer.json, else dolma2)")
    h.add_argument("--seq-len", type=int, default=None, help="instance length L (default min(2048, the "
                   "model's max_position_embeddings))")
    h.add_argument("--batch-size", type=int, default=8)
    h.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32", help="compute dtype")
    h.add_argument("--text-field", default="text", help="jsonl field / column holding the text")
    h.add_argument("--limit", type=int, default=None, help="first N documents of each set only")
    h.add_argument("--leaks", default=None, help="`olmax audit leaks` report: also report each set's "
                   "clean subset (contaminated ids removed)")
    h.add_argument("--olmo-core-instances", action="store_true",
                   help="rows doc + [EOS] as OLMo-core (first token unscored) instead of [EOS] + doc + [EOS]")
    h.add_argument("--step", type=int, default=None, help="training step to stamp on the records")
    h.add_argument("--append-metrics", default=None, metavar="METRICS.jsonl",
                   help="also append the records to this metrics.jsonl (as the trainer does)")
    h.add_argument("--out", required=True, help="report JSON (written atomically)")
    h.set_defaults(func=locked_out(_heldout, "olmax eval heldout"))

    m = ev_sub.add_parser(
        "memorization", help="flag training-loss gains that held-out loss does not share (exit 1 when flagged)",
        description="Checks: (1) exposure-stratified loss, (4) extractable memorization and (5) train loss vs "
        "never-served mix text, from exposure counts (an --exposure file, else replayed from the run's "
        "config.yaml) and a model (--checkpoint, else the run's newest checkpoint); (2) train/held-out gap "
        "over steps from DIR/metrics.jsonl; (3) gain over a reference run or CSV curve that held-out loss "
        "does not share. Every check reports its numbers and thresholds; the report's \"flagged\" is true "
        "when any check flags, and the command then exits 1.")
    m.add_argument("--run", required=True, help="run directory holding metrics.jsonl")
    m.add_argument("--reference", default=None, help="another run dir (its metrics.jsonl) or a CSV with "
                   "columns step,loss[,<heldout set>...]")
    m.add_argument("--exposure", default=None, help="exposure file (.npz or .json; see olmax/evals/exposure.py)"
                   "; default DIR/exposure.npz or DIR/exposure.json when present")
    m.add_argument("--checkpoint", default=None, help="model for checks 1, 4 and 5 (HF or olmax dir); default: "
                   "the newest Orbax checkpoint in DIR/checkpoints")
    m.add_argument("--step", type=int, default=None, help="which DIR/checkpoints step (default: the newest)")
    m.add_argument("--no-replay", action="store_true", help="without --exposure, do not replay the run's "
                   "loader to count exposures (checks 1, 4 and 5 are then skipped)")
    add_stream_options(m, seq_len=False, batch=False, order=False, work_dir=False)
    m.add_argument("--per-stratum", type=int, default=64, help="instances scored per exposure stratum")
    m.add_argument("--probe-len", type=int, default=512, help="tokens of each instance scored in check 1")
    m.add_argument("--batch-size", type=int, default=8)
    m.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    m.add_argument("--threshold", action="append", default=[], metavar="NAME=VALUE",
                   help="override a threshold (see the report's thresholds block); repeatable")
    m.add_argument("--plot", default=None, metavar="PNG", help="also write the loss curves (train vs each "
                   "held-out set, and the reference) as a PNG")
    m.add_argument("--out", required=True, help="report JSON (written atomically)")
    m.set_defaults(func=locked_out(_memorization, "olmax eval memorization"))

    lm = ev_sub.add_parser(
        "lm-eval", help="run lm-eval tasks on an olmax checkpoint through the `olmax` adapter (offline-capable)",
        description="Calls lm_eval.simple_evaluate with model `olmax`. For offline runs give a task YAML "
        "folder with --include-path (dataset_path: arrow) and set HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1.")
    lm.add_argument("--checkpoint", required=True)
    lm.add_argument("--tasks", required=True, help="comma-separated task names; offline over the bundled "
                    "sets: olmax_arc_easy, olmax_arc_challenge, olmax_boolq, olmax_sciq, olmax_piqa, "
                    "olmax_openbookqa")
    lm.add_argument("--include-path", default=None, help="folder of extra task YAMLs")
    lm.add_argument("--tokenizer", default=None)
    lm.add_argument("--num-fewshot", type=int, default=None)
    lm.add_argument("--limit", type=float, default=None)
    lm.add_argument("--batch-size", type=int, default=8)
    lm.add_argument("--max-length", type=int, default=None)
    lm.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    lm.add_argument("--seed", type=int, default=1234)
    lm.add_argument("--log-samples", action="store_true", help="also store each document's responses (per "
                    "choice: loglikelihood and is-greedy) under \"samples\", to compare with another backend")
    lm.add_argument("--out", required=True, help="report JSON (written atomically)")
    lm.set_defaults(func=locked_out(_lm_eval, "olmax eval lm-eval"))

    p = ev_sub.add_parser("plot", help="PNG loss curves: train vs each held-out set, and vs a reference")
    p.add_argument("--run", required=True, help="run directory holding metrics.jsonl")
    p.add_argument("--reference", default=None, help="run dir or CSV (step,loss[,...])")
    p.add_argument("--out", required=True, help="PNG path")
    p.set_defaults(func=locked_out(_plot, "olmax eval plot"))


def _resolve_tokenizer(arg: str | None, checkpoint: str):
    from olmax.assets import tokenizer_path
    from olmax.data.tokenize import load_tokenizer

    if arg is None:
        from olmax.train.export import checkpoint_tokenizer

        arg = str(checkpoint_tokenizer(checkpoint))
    return load_tokenizer(str(tokenizer_path(arg)))


def _heldout(args: argparse.Namespace) -> int:
    from olmax.evals.heldout import prepare_eval_sets, run_heldout, summary
    from olmax.evals.scoring import load_model
    from olmax.evals.sets import contaminated_ids
    from olmax.jsonio import append_jsonl, read_json, write_json

    model = load_model(args.checkpoint, args.dtype)
    tok = _resolve_tokenizer(args.tokenizer, args.checkpoint)
    seq_len = args.seq_len or min(2048, model.cfg.max_position_embeddings)
    leaks = contaminated_ids(read_json(args.leaks, "an `olmax audit leaks` report")) if args.leaks else None
    sets = prepare_eval_sets(args.eval, tok, seq_len, text_field=args.text_field, limit=args.limit,
                             contaminated=leaks, prefix_eos=not args.olmo_core_instances,
                             vocab_size=model.cfg.vocab_size)
    records = run_heldout(model, sets, step=args.step, batch_size=args.batch_size, progress=sys.stderr.isatty())
    report = {"checkpoint": str(args.checkpoint), "tokenizer": tok.path, "seq_len": seq_len, "dtype": args.dtype,
              "instances": "olmo-core" if args.olmo_core_instances else "eos-prefixed", "results": records}
    write_json(args.out, report)
    if args.append_metrics:
        append_jsonl(args.append_metrics, records)
    print(summary(records))
    print(f"wrote {args.out}")
    return 0


def _memorization(args: argparse.Namespace) -> int:
    from olmax.data.stream_cli import stream_from_args
    from olmax.evals.memorization import MemorizationInputs, run_memorization, summary
    from olmax.jsonio import write_json

    report = run_memorization(MemorizationInputs(
        run=args.run, reference=args.reference, exposure=args.exposure, checkpoint=args.checkpoint,
        step=args.step, replay=not args.no_replay,
        stream=stream_from_args(args) if (args.mix or args.config) else None,
        per_stratum=args.per_stratum, probe_len=args.probe_len, batch_size=args.batch_size, dtype=args.dtype,
        thresholds=tuple(args.threshold), plot=args.plot))
    write_json(args.out, report)
    print(summary(report))
    print(f"wrote {args.out}")
    return 1 if report["flagged"] else 0


def _lm_eval(args: argparse.Namespace) -> int:
    from olmax.evals.lm_eval_adapter import run_lm_eval
    from olmax.jsonio import write_json

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    report = run_lm_eval(args.checkpoint, tasks, tokenizer=args.tokenizer, batch_size=args.batch_size,
                         max_length=args.max_length, dtype=args.dtype, include_path=args.include_path,
                         num_fewshot=args.num_fewshot, limit=args.limit, seed=args.seed,
                         log_samples=args.log_samples)
    write_json(args.out, report)
    for task, metrics in (report.get("results") or {}).items():
        shown = ", ".join(f"{k}={v:.4f}" for k, v in metrics.items() if isinstance(v, float))
        print(f"{task}: {shown}")
    print(f"wrote {args.out}")
    return 0


def _plot(args: argparse.Namespace) -> int:
    from olmax.evals.plots import plot_run

    plot_run(args.run, args.out, reference=args.reference)
    print(f"wrote {args.out}")
    return 0

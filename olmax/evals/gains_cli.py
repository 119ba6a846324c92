"""`olmax eval gains`: contaminated vs clean eval items over a run's checkpoints (olmax/evals/gains.py)."""

from __future__ import annotations

import argparse

from olmax.atomic import locked_out
from olmax.evals.eval_mesh import add_dtype_option, add_mesh_option
from olmax.evalsets.evalsets_cli import add_eval_option

DESCRIPTION = """\
Scores every item of each --eval set alone at each committed checkpoint of --run (or --steps): CE
(nats/token) and bits-per-byte per item, and accuracy (highest-loglikelihood choice, as lm-eval's olmax_*
tasks) for the bundled sets with choices. The --leaks report splits each set into contaminated and clean
items; per set and step the report gives both groups' means, the gap (clean - contaminated for CE and bpb,
contaminated - clean for accuracy: positive means the contaminated items are easier), its gain since the
first scored step, each with a 95% bootstrap interval (items resampled within each group), and with
--exposure (an `olmax audit exposure` report) the CE gap by how often the contaminated items were served
(0, 1, 2-3, 4-7, 8+). A set flags when its CE gain's interval lies wholly above the threshold
(contaminated items improved beyond clean items by more than chance). Exit status: 1 when a set flags,
0 when at least one set was compared and none flags, 3 (inconclusive) when no set could be compared
(too few contaminated or clean items, or one checkpoint scored: the summary says what each set needs),
2 on a bad input."""


def register_gains(ev_sub: argparse._SubParsersAction) -> None:
    """Add `gains` to the `olmax eval` subcommands."""
    g = ev_sub.add_parser(
        "gains",
        help="contaminated vs clean eval items over a run's checkpoints: gap, "
        "bootstrap interval, gap by exposure (exit 1 when contaminated items gain, 3 inconclusive)",
        description=DESCRIPTION,
    )
    g.add_argument("--run", required=True, help="training run folder (config.yaml + checkpoints/)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar (on stderr)")
    g.add_argument("--leaks", required=True, help="`olmax audit leaks` report naming the contaminated items")
    add_eval_option(g, "eval set", required=True, metavar="NAME[=PATH]")
    g.add_argument(
        "--exposure",
        default=None,
        metavar="EXPOSURE.json",
        help="`olmax audit exposure` report: also break the gap down by servings per item",
    )
    g.add_argument(
        "--steps",
        default=None,
        metavar="A,B,...",
        help="checkpoint steps to score (default: every committed checkpoint of the run)",
    )
    g.add_argument("--limit", type=int, default=None, help="first N documents of each set only")
    g.add_argument(
        "--seq-len", type=int, default=None, help="instance length (default: the run's data.seq_len)"
    )
    g.add_argument(
        "--batch-size",
        type=int,
        default=8,
        help="rows per scoring batch (rounded up to a multiple of the mesh's devices)",
    )
    g.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (fixed seed)")
    g.add_argument(
        "--tokenizer",
        default=None,
        help="tokenizer.json or dolma2 (default: $OLMAX_EVAL_TOKENIZER, "
        "else dolma2, as the trainer's eval hook)",
    )
    g.add_argument("--text-field", default="text", help="jsonl field / column holding the text")
    add_dtype_option(g)
    add_mesh_option(g)
    g.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a memorization threshold (contam_gain_nats, min_samples); repeatable",
    )
    g.add_argument("--plot-dir", default=None, help="also write one PNG per set here (gains-NAME.png)")
    g.add_argument("--out", required=True, help="report JSON (written atomically)")
    g.set_defaults(func=locked_out(_gains, "olmax eval gains"))


def parse_steps(text: str | None) -> tuple[int, ...]:
    """`--steps 100,200` -> (100, 200)."""
    from olmax.errors import OlmaxError

    if not text:
        return ()
    try:
        return tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise OlmaxError(f"--steps {text!r}: expected comma-separated step numbers, e.g. 100,200") from None


def _gains(args: argparse.Namespace) -> int:
    from olmax.evals.gains import GainsInputs, run_gains, summary
    from olmax.evals.verdicts import Thresholds
    from olmax.jsonio import write_json

    inp = GainsInputs(
        run=args.run,
        leaks=args.leaks,
        evals=tuple(args.eval),
        exposure=args.exposure,
        steps=parse_steps(args.steps),
        limit=args.limit,
        seq_len=args.seq_len,
        batch_size=args.batch_size,
        resamples=args.resamples,
        tokenizer=args.tokenizer,
        text_field=args.text_field,
        dtype=args.dtype,
        mesh=args.mesh,
        plot_dir=args.plot_dir,
        progress=not args.no_progress,
    )
    report = run_gains(inp, thresholds=Thresholds.parse(list(args.threshold)))
    write_json(args.out, report)
    steps = sorted({s for block in report.get("sets", {}).values() for s in block.get("steps", [])})
    print(f"scored {args.run} at checkpoint step(s) {', '.join(map(str, steps)) or 'none'}")
    print(summary(report))
    print(f"wrote {args.out}")
    return report["outcome"]["exit_code"]

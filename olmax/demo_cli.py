"""`olmax demo --out DIR`: parsing only; the pipeline is olmax.demo.pipeline."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="run the whole pipeline on an embedded default and write a report",
        description="On the Python standard library: fetch the offline assets, prepare a real "
        "code+prose mix, audit it before launch (and a contaminated variant), train the tiny "
        "OLMo 3 with a kill and an exact resume, run held-out evals and the memorization check, "
        "and write DIR/report.md (+ .html). Prints the report's path as its last line.",
    )
    p.add_argument("--out", default="demo-out", help="output folder (default demo-out)")
    p.add_argument("--steps", type=int, default=200, help="training steps of each tiny run (default 200)")
    p.add_argument(
        "--kill-at",
        type=int,
        default=None,
        help="step after which the second run is SIGKILLed (default: 65%% of --steps)",
    )
    p.add_argument("--code-files", type=int, default=400, help="standard-library modules in the code source")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from olmax.demo.pipeline import run_demo

    # run_demo ends with its verdict summary, whose last line is the path of report.html
    run_demo(Path(args.out), steps=args.steps, kill_at=args.kill_at, code_files=args.code_files)
    return 0

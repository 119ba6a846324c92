"""The eval sets' front end: `--eval`, the one option every command that reads eval sets takes (audit leaks, eval heldout / watch /
memorization); what it means is olmax/evalsets/spec.py."""

from __future__ import annotations

import argparse

from olmax.evalsets.spec import OLMO_CORE_PREFIX

FORMS = (
    "NAME=PATH, a bare PATH (named by its file name up to the first dot, the same name in every command) "
    "or a bundled name (sciq, arc_easy, ...). PATH: jsonl[.gz|.zst] (id + text, or "
    "question/answer/passage), .arrow, .parquet, an HF datasets folder (a path or an fsspec URL), or an "
    "OLMo-core raw token file (.npy: documents ended by EOS)"
)


def add_eval_option(
    p: argparse.ArgumentParser | argparse._ArgumentGroup,
    what: str,
    *,
    required: bool = False,
    forms: bool = True,
    olmo_core_suite: bool = False,
    metavar: str = "NAME=PATH",
) -> None:
    """`--eval`, repeatable, into `args.eval` (a list, [] when not given). `what` says what the sets are
    for in this command; `forms` appends the forms a set is given in, `olmo_core_suite` the
    `olmo-core:` perplexity suite (a command with `--base-dir`)."""
    text = f"{what}: {FORMS}" if forms else what
    if olmo_core_suite:
        text += (
            f"; {OLMO_CORE_PREFIX}v3-small-ppl-validation: OLMo-core's 11 perplexity sets under --base-dir"
        )
    p.add_argument(
        "--eval",
        action="append",
        required=required,
        default=None if required else [],
        metavar=metavar,
        help=text + "; repeatable",
    )

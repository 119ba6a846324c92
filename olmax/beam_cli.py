"""`--runner {local,beam}` and Beam's own flags for the commands that run on Apache Beam; parsing only.

Beam's flags come in either of two ways, joined in this order when both are given (a later flag wins):
`--pipeline-options="--runner=X --project=P"` (one word, with '='), or as they come after `--`
(`... --runner beam -- --runner=X --project P`). `--pipeline-options "--runner=X"` (a separate word that
starts with '--') is not one argparse can take; it gets one `olmax: error:` line saying what to write.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from olmax.beam import DEFAULT_PIPELINE_OPTIONS, RUNNERS


def add_runner_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--runner",
        choices=RUNNERS,
        default="local",
        help="local: threads on this machine (default); beam: an Apache Beam pipeline (pip install "
        "'olmax[beam]'), the same per-file functions and the same output, on the runner Beam's flags "
        "(--pipeline-options or after --) name",
    )
    p.add_argument(
        "--pipeline-options",
        metavar='"FLAGS"',
        help="Beam's own flags for --runner beam, one quoted string given with '=' "
        f'(default: "{DEFAULT_PIPELINE_OPTIONS}"); e.g. --pipeline-options="--runner=DataflowRunner '
        '--project=P --region=us-central1 --temp_location=gs://B/tmp"; or give them as they come '
        "after a lone -- at the end: -- --runner=DataflowRunner --project P ...",
    )
    # After a lone `--`, everything is Beam's (split off before argparse sees it: a command's own
    # positionals, like prepare's LABEL=PATH sources, would take the words otherwise)
    p.set_defaults(beam_flags=[])
    parse = p.parse_known_args

    def split_beam_flags(args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        extra = []
        if "--" in args:
            at = args.index("--")
            args, extra = args[:at], args[at + 1 :]
        ns, rest = parse(args, namespace)
        ns.beam_flags = extra
        return ns, rest

    p.parse_known_args = split_beam_flags  # type: ignore[method-assign]
    error = p.error

    def explained(message: str):
        # argparse's own words for a value that starts with '--' tell a user nothing about the fix
        if "--pipeline-options" in message and "expected one argument" in message:
            print(
                "olmax: error: --pipeline-options takes Beam's flags as one word: write "
                "--pipeline-options=\"--runner=X ...\" (with '='), or put them after a lone -- at the end: "
                "--runner beam -- --runner=X ...",
                file=sys.stderr,
            )
            sys.exit(2)
        error(message)

    p.error = explained  # type: ignore[method-assign]


def beam_options(args: argparse.Namespace) -> str | None:
    """The pipeline options text for --runner beam (None: run locally)."""
    from olmax.errors import OlmaxError

    extra = list(getattr(args, "beam_flags", None) or [])
    if extra and not extra[0].startswith("-"):
        raise OlmaxError(f"after --: {extra[0]!r} is not a flag; Beam's flags go there, e.g. -- --runner=X")
    if args.runner != "beam":
        if args.pipeline_options or extra:
            given = (
                "--pipeline-options" if args.pipeline_options else f"Beam's flags after -- ({extra[0]} ...)"
            )
            raise OlmaxError(f"{given} applies to --runner beam only; add --runner beam")
        return None
    if args.pipeline_options is None and not extra:
        return DEFAULT_PIPELINE_OPTIONS
    return " ".join(filter(None, [args.pipeline_options, shlex.join(extra)]))

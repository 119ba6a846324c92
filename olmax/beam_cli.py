"""`--runner {local,beam}` and `--pipeline-options` for the commands that run on Apache Beam; parsing only."""

from __future__ import annotations

import argparse

from olmax.beam import DEFAULT_PIPELINE_OPTIONS, RUNNERS


def add_runner_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--runner",
        choices=RUNNERS,
        default="local",
        help="local: threads on this machine (default); beam: an Apache Beam pipeline (pip install "
        "'olmax[beam]'), the same per-file functions and the same output, on the runner "
        "--pipeline-options names",
    )
    p.add_argument(
        "--pipeline-options",
        metavar='"FLAGS"',
        help="Beam's own flags for --runner beam, one quoted string given with '=' "
        f'(default: "{DEFAULT_PIPELINE_OPTIONS}"); e.g. --pipeline-options="--runner=DataflowRunner '
        '--project=P --region=us-central1 --temp_location=gs://B/tmp"',
    )


def beam_options(args: argparse.Namespace) -> str | None:
    """The pipeline options text for --runner beam (None: run locally)."""
    from olmax.errors import OlmaxError

    if args.runner != "beam":
        if args.pipeline_options:
            raise OlmaxError("--pipeline-options applies to --runner beam only")
        return None
    return args.pipeline_options if args.pipeline_options is not None else DEFAULT_PIPELINE_OPTIONS

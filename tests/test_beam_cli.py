"""Beam's flags on the command line (olmax/beam_cli.py), the same for every command with --runner:
`--pipeline-options="..."`, after a lone `--`, both; the mistakes a Beam user makes, one line each."""

from __future__ import annotations

import pytest

from olmax.beam import DEFAULT_PIPELINE_OPTIONS
from olmax.beam_cli import beam_options
from olmax.cli import build_parser, main
from olmax.errors import OlmaxError

COMMANDS = (
    ["data", "prepare", "--mix", "m.yaml", "--tokenizer", "t.json", "--out", "o"],
    ["audit", "leaks", "--mix", "m.txt", "--eval", "a=b.jsonl", "--out", "r.json"],
    ["audit", "dedup", "--mix", "m.txt", "--out", "r.json"],
    ["audit", "loader", "--mix", "m.txt", "--seq-len", "8", "--global-batch-size", "2", "--out", "r.json"],
)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_every_command_takes_beams_flags_after_a_double_dash(command):
    parser = build_parser()
    flags = ["--runner=DataflowRunner", "--project", "P", "--temp_location=gs://b/t"]
    args = parser.parse_args([*command, "--runner", "beam", "--", *flags])
    assert beam_options(args) == "--runner=DataflowRunner --project P --temp_location=gs://b/t"
    both = parser.parse_args(
        [*command, "--runner", "beam", "--pipeline-options=--region=r", "--", "--project=Q"]
    )
    assert beam_options(both) == "--region=r --project=Q"
    assert beam_options(parser.parse_args([*command, "--runner", "beam"])) == DEFAULT_PIPELINE_OPTIONS
    assert beam_options(parser.parse_args(command)) is None


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_pipeline_options_as_a_separate_word_says_what_to_write(command, capsys):
    with pytest.raises(SystemExit) as e:
        main([*command, "--runner", "beam", "--pipeline-options", "--runner=DirectRunner"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1
    assert (
        err[0].startswith("olmax: error: --pipeline-options") and '--pipeline-options="--runner=X' in err[0]
    )
    assert "-- --runner=X" in err[0] and "expected one argument" not in err[0]


def test_beam_flags_without_runner_beam_or_a_stray_word_are_errors():
    parser = build_parser()
    with pytest.raises(OlmaxError, match="applies to --runner beam only"):
        beam_options(parser.parse_args([*COMMANDS[2], "--", "--runner=DirectRunner"]))
    with pytest.raises(OlmaxError, match="applies to --runner beam only"):
        beam_options(parser.parse_args([*COMMANDS[2], "--pipeline-options=--runner=DirectRunner"]))
    with pytest.raises(OlmaxError, match="'DataflowRunner' is not a flag"):
        beam_options(parser.parse_args([*COMMANDS[2], "--runner", "beam", "--", "DataflowRunner"]))
    # prepare's positional sources stay its own, before the --
    args = parser.parse_args([*COMMANDS[0], "code=a/*.jsonl", "--runner", "beam", "--", "--runner=X"])
    assert args.sources == ["code=a/*.jsonl"] and beam_options(args) == "--runner=X"


def test_pipeline_options_defaults_per_runner():
    pytest.importorskip("apache_beam")
    from apache_beam.options.pipeline_options import DirectOptions, StandardOptions

    from olmax.beam import DASK_RUNNER, pipeline_options

    direct = pipeline_options("--project P")
    assert direct.view_as(StandardOptions).runner == "DirectRunner"
    assert direct.view_as(DirectOptions).direct_num_workers == 2
    # a separate-word --runner, the last one wins (Beam's own rule), the DaskRunner by its short name
    dask = pipeline_options("--runner DirectRunner --runner DaskRunner")
    assert dask.view_as(StandardOptions).runner == DASK_RUNNER
    pytest.importorskip("distributed")
    from apache_beam.runners.dask.dask_runner import DaskOptions

    assert dask.view_as(DaskOptions).partition_size == 1  # one element per task, not 128
    kept = pipeline_options("--runner=DaskRunner --dask_npartitions=3").view_as(DaskOptions)
    assert kept.npartitions == 3 and kept.partition_size is None


def test_a_relative_temp_location_is_made_absolute(tmp_path, monkeypatch):
    """A cluster's workers run in folders of their own: a relative --temp_location must not reach them as
    is (the DaskRunner's workers then wrote their results where the driver never looked)."""
    pytest.importorskip("apache_beam")
    from olmax.beam import Workspace, pipeline_options

    monkeypatch.chdir(tmp_path)
    opts = pipeline_options(
        "--runner=DaskRunner --dask_client_address=tcp://127.0.0.1:1 --temp_location=scratch"
    )
    with Workspace(opts, "audit leaks", local_dir=str(tmp_path / "logs")) as ws:
        assert ws.files.startswith(str(tmp_path / "scratch") + "/")

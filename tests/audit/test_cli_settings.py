"""Each `olmax audit` command's settings are declared once, in its config dataclass: every field has its
option (or is one of the few named here, given another way), and every option's default is the field's, so
the command line and the library cannot drift apart."""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys

import pytest

from olmax.assets import tokenizer_path
from olmax.audit.audit_config import DedupConfig, LeakConfig, LoaderAuditConfig, StreamConfig
from olmax.cli import build_parser
from olmax.data.stream import StreamSpec
from olmax.dedup.params import MinHashParams, NearSettings

# command -> (config, the argv it needs besides the option under test, the fields given another way:
# field -> the option that gives it)
COMMANDS = {
    "loader": (
        LoaderAuditConfig,
        ["--out", "r.json"],
        {"stream": "--mix", "near": "--near", "examples": None},
    ),
    "leaks": (
        LeakConfig,
        ["--out", "r.json"],
        {"stream": "--mix", "evals": "--eval", "chunk_tokens": None},
    ),
    "dedup": (
        DedupConfig,
        ["--out", "r.json"],
        {"stream": "--mix", "near": "--near", "chunk_tokens": None, "examples": None},
    ),
    "stream": (
        StreamConfig,
        ["--out", "r.json", "--batches", "a.npy"],
        {"stream": "--mix", "examples": None},
    ),
}


def _subparser(command: str) -> argparse.ArgumentParser:
    parser = build_parser()
    for path in (("audit",), ("audit", command)):
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        parser = actions[0].choices[path[-1]]
    return parser


def _flag(f: dataclasses.Field) -> str:
    """The option a field should have: its name with dashes, `--no-NAME` for a switch that is on by default."""
    stem = f.name.replace("_", "-")
    return f"--no-{stem}" if f.type == "bool" and f.default is True else f"--{stem}"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_field_has_an_option_whose_default_is_the_fields(command):
    cls, argv, elsewhere = COMMANDS[command]
    options = {s for a in _subparser(command)._actions for s in a.option_strings}
    args = build_parser().parse_args(["audit", command, *argv])
    checked = 0
    for f in dataclasses.fields(cls):
        if f.name in elsewhere:
            assert elsewhere[f.name] is None or elsewhere[f.name] in options, (f.name, elsewhere[f.name])
            continue
        assert _flag(f) in options, f"audit {command}: {cls.__name__}.{f.name} has no {_flag(f)}"
        if f.default is dataclasses.MISSING:  # required (given in argv)
            continue
        got = getattr(args, f.name)
        assert (tuple(got) if isinstance(got, list) else got) == f.default, (command, f.name, got, f.default)
        checked += 1
    assert checked >= 1  # the test compared something


@pytest.mark.parametrize("command", ["loader", "dedup"])
def test_the_minhash_options_default_to_the_params(command):
    _, argv, _ = COMMANDS[command]
    args = build_parser().parse_args(["audit", command, *argv])
    defaults = MinHashParams()
    for f in dataclasses.fields(MinHashParams):
        assert getattr(args, f"minhash_{f.name}") == getattr(defaults, f.name)
    assert args.near is False


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_stream_options_are_unset_so_a_recipe_can_give_them(command):
    _, argv, _ = COMMANDS[command]
    args = build_parser().parse_args(["audit", command, *argv])
    assert args.mix is None and args.base_dir is None and args.tokenizer_id is None
    assert getattr(args, "packed", None) is None


def test_options_become_the_config():
    """What the loader audit's options parse into is the config a library caller would build."""
    from olmax.audit.audit_cli import near_params
    from olmax.cli_fields import values_from_args
    from olmax.data.stream_cli import stream_from_args

    argv = ["audit", "loader", "--mix", "m.txt", "--seq-len", "16", "--global-batch-size", "4", "--out", "r"]
    argv += ["--steps", "3", "--resume-at", "1", "2", "--no-content", "--near", "--minhash-rows", "7"]
    argv += ["--tokenizer", "dolma2"]
    args = build_parser().parse_args(argv)
    cfg = LoaderAuditConfig(
        stream=stream_from_args(args),
        near=near_params(args, "m.txt"),
        **values_from_args(args, LoaderAuditConfig),
    )
    want = LoaderAuditConfig(
        stream=StreamSpec(mix="m.txt", seq_len=16, global_batch_size=4),
        steps=3,
        resume_at=(1, 2),
        content=False,
        near=NearSettings(MinHashParams(rows=7), str(tokenizer_path("dolma2"))),
    )
    assert cfg == want


def test_a_bad_setting_names_the_flag_and_the_config_key(tmp_path):
    got = subprocess.run(
        [
            sys.executable,
            "-m",
            "olmax.cli",
            "audit",
            "dedup",
            "--mix",
            "m.txt",
            "--near",
            "--minhash-ngram",
            "0",
        ]
        + ["--out", str(tmp_path / "r.json")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert got.returncode == 2, got.stderr
    assert got.stderr.strip() == "olmax: error: --minhash-ngram (minhash.ngram) must be at least 1; got 0"

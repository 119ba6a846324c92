"""olmax/cli_fields.py: options generated from config dataclass fields, and how errors name a setting."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import ClassVar

import pytest

from olmax.cli_fields import Option, add_fields, flag_of, named, setting, values_from_args


@dataclass(frozen=True)
class Probe:
    CONFIG_KEY: ClassVar[str] = "probe"

    paths: tuple[str, ...] = setting(help="required, several")
    count: int = setting(3, "a count")
    rate: float | None = setting(None, "a rate", option=Option(exclusive="x"))
    steps: int | None = setting(None, "steps", option=Option(exclusive="x"))
    fast: bool = setting(False, "a switch, off by default")
    checks: bool = setting(True, "a switch, on by default")
    kind: str = setting("a", "one of two", option=Option(choices=("a", "b")))
    ids: tuple[int, ...] = setting((), "ids")
    hidden: int = setting(7, cli=False)


def _parser(**kw) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(exit_on_error=False)
    add_fields(p, Probe, **kw)
    return p


def test_defaults_are_the_fields_and_values_the_config():
    args = _parser().parse_args(["--paths", "x", "y"])
    assert Probe(**values_from_args(args, Probe)) == Probe(paths=("x", "y"))
    args = _parser().parse_args(["--paths", "x", "--fast", "--no-checks", "--ids", "1", "2", "--kind", "b"])
    assert Probe(**values_from_args(args, Probe)) == Probe(
        paths=("x",), fast=True, checks=False, ids=(1, 2), kind="b"
    )
    assert not hasattr(args, "hidden")


def test_required_choices_and_exclusive_are_enforced():
    with pytest.raises(SystemExit):
        _parser().parse_args([])  # --paths is required
    with pytest.raises((SystemExit, argparse.ArgumentError)):
        _parser().parse_args(["--paths", "x", "--kind", "c"])
    with pytest.raises((SystemExit, argparse.ArgumentError)):
        _parser().parse_args(["--paths", "x", "--rate", "1", "--steps", "2"])


def test_unset_keeps_only_what_was_given():
    p = _parser(only=("count", "fast", "kind"), unset=True)
    assert values_from_args(p.parse_args([]), Probe, only=("count", "fast", "kind"), given_only=True) == {}
    args = p.parse_args(["--count", "5", "--fast"])
    assert values_from_args(args, Probe, only=("count", "fast", "kind"), given_only=True) == {
        "count": 5,
        "fast": True,
    }


def test_a_setting_is_named_by_its_flag_and_its_key():
    assert named(Probe, "count") == "--count (probe.count)"
    assert named(Probe, "checks") == "--no-checks (probe.checks)"
    assert named(Probe, "hidden") == "probe.hidden"
    assert flag_of(Probe, "count", prefix="p_") == "--p-count"

"""A command's settings declared once: config dataclass fields carry their flag's help, and the CLI options
are generated from them.

A field declared with `setting(default, "help", ...)` becomes the option `--field-name` (or `flag=`), its
type and default taken from the field, so a default lives in one place (the dataclass) and the command
line cannot drift from it (tests/audit/test_cli_fields.py). A `bool` field defaulting to False is a switch
(`--name`), one defaulting to True is `--no-name`; a `tuple[...]` field takes several values. A field with
`cli=False` has no option of its own (a nested config, a knob the library alone sets).

`named(cls, field)` is how a library error names a setting: the flag beside the config key,
`--min-doc-tokens (audit.loader.min_doc_tokens)`, so the message reads for both a CLI user and a caller
of the library. This module imports only argparse and dataclasses: `olmax X --help` builds every option.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

_META = "olmax"
_TYPES = {"int": int, "float": float, "str": str}


@dataclass(frozen=True)
class Option:
    """How a setting's option is presented, where the default (its field name as a flag, no choices, its type's
    metavar, the parser itself) is not what it should be. `group`: the name of the argument group the option
    goes in (`add_fields(groups=...)`); `exclusive`: options of one name exclude each other."""

    flag: str | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    group: str | None = None
    exclusive: str | None = None


def setting(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    cli: bool = True,
    option: Option = Option(),
    **field_kwargs: Any,
) -> Any:
    """A dataclass field with the metadata its option is made from (`cli=False`: no option)."""
    meta = {
        "help": help,
        "flag": option.flag,
        "choices": tuple(option.choices) if option.choices is not None else None,
        "metavar": option.metavar,
        "cli": cli,
        "group": option.group,
        "exclusive": option.exclusive,
    }
    return dataclasses.field(default=default, metadata={_META: meta}, **field_kwargs)


def _meta(f: dataclasses.Field) -> dict:
    return f.metadata.get(_META) or {"cli": False}


def option_fields(cls: type) -> list[dataclasses.Field]:
    """The fields of `cls` that have an option, in declaration order."""
    return [f for f in dataclasses.fields(cls) if _meta(f)["cli"]]


def flag_of(cls: type, name: str, *, prefix: str = "") -> str:
    """The option of field `name` (`prefix` as given to `add_fields`)."""
    f = {f.name: f for f in dataclasses.fields(cls)}[name]
    meta = _meta(f)
    if meta.get("flag"):
        return meta["flag"]
    stem = (prefix + name).replace("_", "-")
    return f"--no-{stem}" if _kind(f)[0] == "bool" and f.default is True else f"--{stem}"


def key_of(cls: type, name: str) -> str:
    """The config key of field `name`: the class's CONFIG_KEY (its section) and the field."""
    return f"{getattr(cls, 'CONFIG_KEY', cls.__name__)}.{name}"


def named(cls: type, name: str, *, prefix: str = "") -> str:
    """`--flag (config.key)`: a setting as a library error names it (the key alone for a field without an
    option of its own)."""
    f = {f.name: f for f in dataclasses.fields(cls)}[name]
    if not _meta(f)["cli"] and not _meta(f).get("flag"):
        return key_of(cls, name)
    return f"{flag_of(cls, name, prefix=prefix)} ({key_of(cls, name)})"


def _kind(f: dataclasses.Field) -> tuple[str, type | None, bool]:
    """(bool / tuple / scalar, the element type, optional) from the field's annotation."""
    ann = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    parts = [p.strip() for p in ann.split("|")]
    optional = "None" in parts
    (base,) = [p for p in parts if p != "None"]
    if base == "bool":
        return "bool", None, optional
    if base.startswith("tuple["):
        elem = base[len("tuple[") :].split(",")[0].strip()
        return "tuple", _TYPES[elem], optional
    return "scalar", _TYPES[base], optional


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def add_fields(
    p: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type,
    *,
    only: Iterable[str] | None = None,
    prefix: str = "",
    groups: dict[str, Any] | None = None,
    unset: bool = False,
) -> None:
    """One option per field of `cls` that has one (or the fields named in `only`, in that order).

    Each option's dest is `prefix + field`. Its default is the field's default, or with `unset` None
    ("not given": `values_from_args(given_only=True)` then keeps only the flags a user gave, to override
    another source such as a recipe). `groups` maps a field's `group` to the parser or argument group
    it is added to (default `p`)."""
    by_name = {f.name: f for f in dataclasses.fields(cls)}
    chosen = [by_name[n] for n in only] if only is not None else option_fields(cls)
    exclusive: dict[str, Any] = {}
    for f in chosen:
        meta = _meta(f)
        target = (groups or {}).get(meta.get("group"), p)
        if meta.get("exclusive"):
            key = meta["exclusive"]
            if key not in exclusive:
                exclusive[key] = target.add_mutually_exclusive_group()
            target = exclusive[key]
        kind, elem, _ = _kind(f)
        default = _default(f)
        kw: dict[str, Any] = {"dest": prefix + f.name, "help": meta.get("help") or None}
        if meta.get("metavar"):
            kw["metavar"] = meta["metavar"]
        if kind == "bool":
            kw.update(action="store_const", const=not default, default=None if unset else default)
        else:
            kw["type"] = elem
            if meta.get("choices"):
                kw["choices"] = meta["choices"]
            if kind == "tuple":
                kw["nargs"] = "+" if default is dataclasses.MISSING else "*"
            if default is dataclasses.MISSING:
                kw["required"] = True
            else:
                listed = kind == "tuple" and default is not None
                kw["default"] = None if unset else (list(default) if listed else default)
        target.add_argument(flag_of(cls, f.name, prefix=prefix), **kw)


def values_from_args(
    args: argparse.Namespace,
    cls: type,
    *,
    only: Iterable[str] | None = None,
    prefix: str = "",
    given_only: bool = False,
) -> dict[str, Any]:
    """The fields' values the options parsed, by field name (lists back to tuples); `given_only`: only
    the options given (those not None, with `add_fields(unset=True)`)."""
    names = list(only) if only is not None else [f.name for f in option_fields(cls)]
    by_name = {f.name: f for f in dataclasses.fields(cls)}
    out: dict[str, Any] = {}
    for name in names:
        if not hasattr(args, prefix + name):
            continue
        v = getattr(args, prefix + name)
        if given_only and v is None:
            continue
        out[name] = tuple(v) if isinstance(v, list) and _kind(by_name[name])[0] == "tuple" else v
    return out

"""Recipes: experiment config files found by name or path, read as YAML (with dotted overrides), each
section built into its frozen dataclass.

A recipe is `olmax/configs/NAME.yaml` (a preset) or any YAML path, one mapping per area. `build` turns one
area's mapping into its dataclass, each value converted to the field's type (`coerce`); an unknown key or a
bad value is an error naming the file and the key, or the command-line override that set it. The
experiment config composes the areas (olmax.train.config); a command that reads only a recipe's data
section builds that one (olmax.data.stream_cli), with the same rules.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from olmax.errors import OlmaxError

# The presets ship inside the package (pyproject package-data), so an installed wheel finds them from any folder;
# the repository's top-level `configs` is a link to this folder, so documented paths like configs/tiny.yaml work.
CONFIG_DIRS = (Path(__file__).resolve().parent / "configs",)


def find_config(name_or_path: str) -> Path:
    """A YAML path as given, or the preset `olmax/configs/NAME.yaml`."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.is_file():
            raise OlmaxError(f"--config {name_or_path}: no such file")
        return p
    for d in CONFIG_DIRS:
        if (d / f"{name_or_path}.yaml").is_file():
            return d / f"{name_or_path}.yaml"
    names = sorted({q.stem for d in CONFIG_DIRS if d.is_dir() for q in d.glob("*.yaml")})
    raise OlmaxError(f"--config {name_or_path}: not a file and not a preset; presets: {', '.join(names)}")


def coerce(value: Any, hint: Any, where: str) -> Any:
    """Convert a YAML/CLI value to the field's type (CLI values may arrive as strings)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() in ("null", "none")):
            return None
        return coerce(value, args[0], where)
    if origin is tuple:
        # a YAML/CLI list, or one string of ';'-separated items (a bare string is not split into characters)
        return (
            tuple(v.strip() for v in value.split(";") if v.strip())
            if isinstance(value, str)
            else tuple(value)
        )
    try:
        if hint is bool:
            if isinstance(value, str):
                if value.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(value)
                return value.lower() in ("true", "1")
            return bool(value)
        if hint is int:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            return int(float(value)) if isinstance(value, str) else int(value)
        if hint is float:
            return float(value)
        if hint is str:
            return str(value)
    except (TypeError, ValueError) as e:
        raise OlmaxError(f"{where}: {value!r} is not a valid {getattr(hint, '__name__', hint)}") from e
    return value


def closest(key: str, names: set[str]) -> str:
    """ " (did you mean X?)" for the valid name closest to a mistyped `key`, or "": an abbreviation by
    initials (learning_rate for lr), else difflib's closest spelling, else a name the key contains."""

    initials = "".join(part[:1] for part in key.split("_"))
    near = [n for n in sorted(names) if len(key.split("_")) > 1 and n == initials]
    near = near or difflib.get_close_matches(key, sorted(names), n=1, cutoff=0.6)
    near = near or sorted(n for n in names if len(n) > 2 and (n in key or key in n))
    return f" (did you mean {near[0]}?)" if near else ""


def unknown_keys(
    where: str, area: str, unknown: list[str], names: set[str], origins: dict[str, str]
) -> OlmaxError:
    """The error for keys `area` does not have: named by the override that set one, else by the file."""
    for k in unknown:
        if f"{area}.{k}" in origins:
            return OlmaxError(
                f"override {origins[f'{area}.{k}']}: {area} has no key {k!r}{closest(k, names)}; "
                f"valid: {', '.join(sorted(names))}"
            )
    hint = closest(unknown[0], names) if len(unknown) == 1 else ""
    return OlmaxError(
        f"{where}: unknown key(s) {', '.join(unknown)}{hint}; valid: {', '.join(sorted(names))}"
    )


def origin(where: str, area: str, key: str, origins: dict[str, str]) -> str:
    """Where a field's value came from, for its error: the override that set it, else the file's key."""
    return f"override {origins[f'{area}.{key}']}" if f"{area}.{key}" in origins else f"{where}.{key}"


def build(cls: type, values: dict, where: str, area: str = "", origins: dict[str, str] | None = None) -> Any:
    origins = origins or {}
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise unknown_keys(where, area, unknown, names, origins)
    kwargs = {k: coerce(v, hints[k], origin(where, area, k, origins)) for k, v in values.items()}
    try:
        return cls(**kwargs)
    except OlmaxError as e:
        raise OlmaxError(f"{where}: {e}") from None


def run_config_path(run_dir: str | Path) -> str:
    """The resolved config a run folder of `olmax train` holds (`RUN/config.yaml`); an OlmaxError when the
    folder has none."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise OlmaxError(f"{path}: not found; is {run_dir} a folder written by `olmax train`?")
    return str(path)


def read_recipe(path: Path | str, overrides: list[str] | tuple[str, ...] = (), base: Any = None) -> dict:
    """The recipe at `path` (or `base`, a mapping already read) with `area.key=value` overrides merged in,
    as plain nested data."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if base is None:
        try:
            base = OmegaConf.load(path)  # OmegaConf's loader is a yaml.SafeLoader: no tags that run code
        except (OmegaConfBaseException, OSError, ValueError, yaml.YAMLError) as e:
            raise OlmaxError(f"{path}: cannot read config: {e}") from e
    else:
        base = OmegaConf.create(base)
    bad = [
        o for o in overrides if "=" not in o or "." not in o.split("=", 1)[0] and o.split("=")[0] != "name"
    ]
    if bad:
        raise OlmaxError(f"override {bad[0]!r}: write overrides as area.key=value, e.g. optim.lr=1e-3")
    try:
        merged = OmegaConf.merge(base, OmegaConf.from_dotlist(list(overrides)))
        return OmegaConf.to_container(merged, resolve=True) or {}
    except OmegaConfBaseException as e:
        raise OlmaxError(f"{path}: {e}") from e


def origins_of(overrides: list[str] | tuple[str, ...]) -> dict[str, str]:
    """{dotted key: the override that set it}: what an error names instead of the file."""
    return {o.split("=", 1)[0].strip(): o for o in overrides}


def recipe_section(name_or_path: str, area: str, cls: type) -> Any:
    """One area of a recipe built into `cls` (e.g. the `data` section as a StreamSpec)."""
    path = find_config(name_or_path)
    return build(cls, dict(read_recipe(path).get(area) or {}), f"{path}: {area}", area)

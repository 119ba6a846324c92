"""The record of one benchmark run: `bench/results/NAME.json`, the source of every published speed figure.

A benchmark builds one `Record`, names each side it runs, adds every repetition's raw timings and the
figures it publishes, and writes the file at the end:

    from bench.harness import WARM_WALL, interleaved
    from bench.record import Record, add_arguments, package_version

    parser = argparse.ArgumentParser()
    add_arguments(parser)                                   # --smoke, --results DIR
    args = parser.parse_args()
    rec = Record("loader", argv=sys.argv, smoke=args.smoke, results=args.results)
    rec.side("olmax", version=package_version("olmax"), setting="num_threads=2, prefetch 4")
    rec.side("olmo-core", version=package_version("ai2-olmo-core"), setting="num_workers=2")
    runs = interleaved({"olmax": time_olmax, "olmo-core": time_peer}, reps=3)   # A B A B A B
    rec.timings("epoch", "olmax", runs["olmax"], "s", WARM_WALL)
    rec.figure("olmax_tokens_per_s", rates, "M tokens/s")   # stores median, min, max and the values
    rec.write()                                             # bench/results/loader.json

What a record holds: the exact command (`argv`), the commit and whether the tree had changes outside
bench/results/, the UTC start date, the machine (cores, CPU model, memory, load average when the record was
opened and when it was written), each side's package version and setting, every timing list with its unit
and how it was taken, and the figures. Keys are sorted and `schema` says the layout's version, so two
records diff cleanly.

A figure is cited in README.md and docs/ as a link whose text is the figure as the record gives it (its
median, then its min–max when it has more than one value) and whose target is the record plus the
figure's name, e.g. `[412 M tokens/s (398–420)](bench/results/loader.json#olmax_tokens_per_s)`;
tests/bench/test_records.py checks every such citation against the record.

Smoke runs (`--smoke`: a small input, seconds) exercise the whole benchmark in CI; their records go to
`--results DIR` or `bench/out/results/`, never over the committed full-size records in bench/results/.

Timing like for like: both sides of a ratio are timed the same way, and each timing list says which
(`how`: bench/harness.py's PROCESS_CPU, WARM_WALL, ...; its `interleaved` runs the sides A B A B ...).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import re
import shlex
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.harness import BENCH, ROOT, git_state, load_average, machine
from olmax.atomic import write_text
from olmax.jsonio import plain

SCHEMA = 1
RESULTS = BENCH / "results"  # the committed full-size records
SMOKE_RESULTS = BENCH / "out" / "results"  # git-ignored: where smoke runs write unless told otherwise
KEY = re.compile(r"[a-z0-9][a-z0-9_.-]*")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The two options every benchmark takes: `--smoke` and `--results DIR`."""
    parser.add_argument(
        "--smoke", action="store_true", help="a small input that runs the whole benchmark in seconds (CI)"
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=None,
        help=f"folder for NAME.json (default: {RESULTS.relative_to(ROOT)}, or "
        f"{SMOKE_RESULTS.relative_to(ROOT)} with --smoke)",
    )


def shrink(args: argparse.Namespace, **small: Any) -> argparse.Namespace:
    """With `--smoke`, set each option in `small` to its smoke value (the whole benchmark, a small input)."""
    if getattr(args, "smoke", False):
        for name, value in small.items():
            if not hasattr(args, name):
                raise ValueError(f"--smoke sets {name!r}, which the benchmark has no option for")
            setattr(args, name, value)
    return args


def package_version(dist: str) -> str:
    """The installed version of distribution `dist`, or "not installed"."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def summary(values: Sequence[float]) -> dict[str, Any]:
    """median, min, max, n and the values themselves (a figure's body)."""
    if not values:
        raise ValueError("a figure needs at least one value")
    vals = [float(v) for v in values]
    return {
        "median": statistics.median(vals),
        "min": min(vals),
        "max": max(vals),
        "n": len(vals),
        "values": vals,
    }


def format_figure(fig: dict[str, Any], digits: int = 1) -> str:
    """`median unit (min–max)` as the docs write it, e.g. `412.0 M tokens/s (398.2–420.5)`, `4.2x (3.9–4.4)`."""
    sep = "" if fig["unit"] in ("x", "%") else " "
    text = f"{fig['median']:.{digits}f}{sep}{fig['unit']}".rstrip()
    if fig["n"] > 1:
        text += f" ({fig['min']:.{digits}f}–{fig['max']:.{digits}f})"
    return text


def pairwise_ratio(num: Sequence[float], den: Sequence[float]) -> list[float]:
    """num[i] / den[i] for each interleaved repetition i (the ratio's figure keeps each pair's own ratio)."""
    if len(num) != len(den):
        raise ValueError(f"{len(num)} values against {len(den)}: a pairwise ratio needs the same repetitions")
    return [a / b for a, b in zip(num, den, strict=True)]


def command_line(argv: Sequence[str]) -> str:
    """The command as a shell line: `python -m bench.KIND.NAME ARGS` for a bench script (as it is run, from
    the project's root), else `python SCRIPT ARGS` with the script's path relative to the root."""
    if not argv:
        return ""
    script = Path(argv[0])
    rest = [str(a) for a in argv[1:]]
    if script.is_absolute() and script.resolve().is_relative_to(ROOT):
        script = script.resolve().relative_to(ROOT)
        if script.parts[0] == "bench" and script.suffix == ".py":
            return shlex.join(["python", "-m", ".".join(script.with_suffix("").parts), *rest])
    return shlex.join(["python", str(script), *rest])


class Record:
    """One benchmark run's record; `write()` puts it at `results/NAME.json` (see the module docstring)."""

    def __init__(
        self, name: str, argv: Sequence[str] | None = None, smoke: bool = False, results: Path | None = None
    ):
        if not KEY.fullmatch(name):
            raise ValueError(f"record name {name!r}: lower-case letters, digits, '_', '.', '-'")
        folder = Path(results) if results is not None else (SMOKE_RESULTS if smoke else RESULTS)
        if smoke and folder.resolve() == RESULTS.resolve():
            raise ValueError(f"a smoke run never writes into {RESULTS}: pass --results DIR")
        self.name, self.path = name, folder / f"{name}.json"
        self._started = time.perf_counter()
        self.data: dict[str, Any] = {
            "schema": SCHEMA,
            "name": name,
            "command": command_line(argv or []),
            "smoke": bool(smoke),
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "machine": machine(),
            "sides": {},
            "timings": {},
            "figures": {},
            "notes": {},
        }
        self.data.update(git_state())

    def side(self, name: str, version: str, setting: str, **extra: Any) -> None:
        """A side of the comparison: its package version and the setting it ran under (as a user would set it)."""
        self.data["sides"][name] = {"version": version, "setting": setting, **extra}

    def timings(self, label: str, side: str, values: Sequence[float], unit: str, how: str) -> None:
        """Every repetition's raw value of one measurement of one side, in order, with how it was taken."""
        if side not in self.data["sides"]:
            raise ValueError(f"timings for side {side!r}: name it with side() first")
        if not how:
            raise ValueError("say how the timing was taken (PROCESS_CPU, WARM_WALL, ...)")
        key = f"{side}.{label}"
        self.data["timings"][key] = {
            "side": side,
            "label": label,
            "unit": unit,
            "how": how,
            "values": [float(v) for v in values],
        }

    def figure(self, name: str, values: Sequence[float], unit: str, **about: Any) -> dict[str, Any]:
        """A published figure: median, min, max of `values` in `unit` (the unit the docs print it in)."""
        if not KEY.fullmatch(name):
            raise ValueError(f"figure name {name!r}: lower-case letters, digits, '_', '.', '-'")
        fig = {**summary(values), "unit": unit, **about}
        self.data["figures"][name] = fig
        return fig

    def note(self, key: str, value: Any) -> None:
        """Anything else a reader needs to redo the run: input size, seed, a check that passed."""
        self.data["notes"][key] = value

    def write(self) -> Path:
        """Add the load average now and the run's wall seconds, and write the record atomically."""
        self.data["machine"]["load_average_after"] = load_average()
        self.data["wall_s"] = round(time.perf_counter() - self._started, 3)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_text(self.path, json.dumps(plain(self.data), indent=1, sort_keys=True, allow_nan=False) + "\n")
        return self.path

    def finish(self, failed: list[str]) -> int:
        """Write the record, print its path and what failed; the benchmark's exit status (1 on a failure)."""
        print(f"record: {self.write()}")
        if failed:
            print("FAILED: " + "; ".join(failed))
        return 1 if failed else 0


def read(path: str | os.PathLike) -> dict[str, Any]:
    """A record from its file, checked for its schema version."""
    with open(path) as f:
        data = json.load(f)
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: record schema {data.get('schema')!r}, this reader knows {SCHEMA}")
    return data

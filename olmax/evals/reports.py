"""Report plumbing shared by the eval commands: atomic JSON writes and reading a run's metrics.jsonl."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from olmax.errors import OlmaxError


def _finite(obj: Any) -> Any:
    """JSON has no NaN/inf: write them as null so every report parses with a strict reader. numpy
    scalars and arrays become Python ones."""
    if hasattr(obj, "tolist") and not isinstance(obj, str):  # numpy scalar or array
        obj = obj.tolist()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write `obj` as indented JSON to `path` atomically (olmax.atomic)."""
    from olmax.atomic import write_text

    return write_text(path, json.dumps(_finite(obj), indent=2, sort_keys=False) + "\n")


def append_jsonl(path: str | os.PathLike, records: Iterable[dict]) -> None:
    """Append one JSON line per record (what the trainer does with `run_heldout`'s records)."""
    with open(path, "a") as f:
        for r in records:
            f.write(json.dumps(_finite(r)) + "\n")


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Every JSON object of a jsonl file; a torn last line (a run killed mid-write) is skipped."""
    path = Path(path)
    if not path.is_file():
        raise OlmaxError(f"{path}: not found; pass a run directory that holds metrics.jsonl")
    lines = path.read_text().splitlines()
    out = []
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            if i == len(lines):  # the writer was killed mid-line: everything before it is intact
                break
            raise OlmaxError(f"{path}:{i}: malformed JSON line ({e}); fix or remove that line") from None
        if isinstance(obj, dict):
            out.append(obj)
    return out


def read_json(path: str | os.PathLike, what: str) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise OlmaxError(f"{path}: not found ({what})") from None
    except ValueError as e:
        raise OlmaxError(f"{path}: invalid JSON ({e}); expected {what}") from None

"""Audit reports: checks with thresholds, an atomic JSON write and a readable summary."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Check:
    """One named check: its measured value, the threshold it is held to, and whether it gates."""

    name: str
    ok: bool
    value: Any
    threshold: Any = None
    gated: bool = True
    detail: str = ""

    def to_json(self) -> dict:
        return {"ok": bool(self.ok), "gated": self.gated, "value": self.value,
                "threshold": self.threshold, "detail": self.detail}


def checks_json(checks: list[Check]) -> dict:
    return {c.name: c.to_json() for c in checks}


def failed(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.gated and not c.ok]


def _default(o: Any) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (set, tuple)):
        return list(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def write_json(path: str, report: dict) -> None:
    """Write `report` to `path` atomically (olmax.atomic)."""
    from olmax.atomic import write_text

    write_text(path, json.dumps(report, indent=1, default=_default) + "\n")


def summary_lines(title: str, checks: list[Check]) -> list[str]:
    """`PASS/FAIL/info name: value (threshold)` lines, gated failures first."""
    lines = [title]
    for c in sorted(checks, key=lambda c: (c.ok or not c.gated, c.name)):
        tag = ("PASS" if c.ok else "FAIL") if c.gated else "info"
        bound = f" (limit {c.threshold})" if c.threshold is not None else ""
        extra = f" — {c.detail}" if c.detail else ""
        lines.append(f"  {tag} {c.name}: {c.value}{bound}{extra}")
    bad = failed(checks)
    lines.append(f"  => {'FAIL: ' + ', '.join(c.name for c in bad) if bad else 'PASS'}")
    return lines


def write_text_atomic(path: str, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder, then rename."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=os.path.basename(path) + ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise

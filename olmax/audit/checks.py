"""Audit reports: checks with thresholds and a readable summary (written with olmax.jsonio.write_json)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
        return {
            "ok": bool(self.ok),
            "gated": self.gated,
            "value": self.value,
            "threshold": self.threshold,
            "detail": self.detail,
        }


def checks_json(checks: list[Check]) -> dict:
    return {c.name: c.to_json() for c in checks}


def failed(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.gated and not c.ok]


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

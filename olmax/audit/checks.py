"""Audit reports: checks with thresholds and a readable summary (written with olmax.jsonio.write_json).

A report's verdict has three values: `fail` (a gated check failed), `inconclusive` (none failed, but a
gated check could not run for lack of input: its `needs` says what it needs, a flag, a file, more steps)
and `pass` (every gated check ran and passed). The commands exit 1, 3 and 0 for them (`EXIT`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

EXIT = {"pass": 0, "fail": 1, "inconclusive": 3}


@dataclass
class Check:
    """One named check: its measured value, the threshold it is held to, and whether it gates. `needs`
    (non-empty) marks a check that could not run and says what it needs; its `ok` is then unknown."""

    name: str
    ok: bool
    value: Any
    threshold: Any = None
    gated: bool = True
    detail: str = ""
    needs: str = ""

    @property
    def skipped(self) -> bool:
        return bool(self.needs)

    def to_json(self) -> dict:
        out = {
            "ok": None if self.skipped else bool(self.ok),
            "gated": self.gated,
            "value": self.value,
            "threshold": self.threshold,
            "detail": self.detail,
        }
        if self.skipped:
            out["needs"] = self.needs
        return out


def checks_json(checks: list[Check]) -> dict:
    return {c.name: c.to_json() for c in checks}


def failed(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.gated and not c.skipped and not c.ok]


def skipped(checks: list[Check]) -> list[Check]:
    """The gated checks that could not run."""
    return [c for c in checks if c.gated and c.skipped]


def verdict(checks: list[Check]) -> str:
    """`fail`, `inconclusive` or `pass` (module docstring)."""
    return "fail" if failed(checks) else "inconclusive" if skipped(checks) else "pass"


def summary_lines(title: str, checks: list[Check]) -> list[str]:
    """`PASS/FAIL/SKIP/info name: value (threshold)` lines, gated failures first, then the verdict."""
    lines = [title]
    for c in sorted(checks, key=lambda c: (c.ok or c.skipped or not c.gated, c.skipped, c.name)):
        if c.skipped:
            lines.append(f"  SKIP {c.name}: could not run — needs {c.needs}")
            continue
        tag = ("PASS" if c.ok else "FAIL") if c.gated else "info"
        bound = f" (limit {c.threshold})" if c.threshold is not None else ""
        extra = f" — {c.detail}" if c.detail else ""
        lines.append(f"  {tag} {c.name}: {c.value}{bound}{extra}")
    bad, unrun = failed(checks), skipped(checks)
    not_run = "; ".join(f"{c.name} could not run (needs {c.needs})" for c in unrun)
    if bad:
        lines.append(f"  => FAIL: {', '.join(c.name for c in bad)}" + (f"; {not_run}" if unrun else ""))
    elif unrun:
        ran = sum(c.gated and not c.skipped for c in checks)
        lines.append(f"  => INCONCLUSIVE: {not_run}; the {ran} gated check(s) that ran passed")
    else:
        lines.append("  => PASS")
    return lines

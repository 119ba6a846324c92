"""The project's files say what the code does, never how it was made: no sessions, issue numbers or loans.

A reader of the README, docs/, the package, the tests or the benchmarks needs what holds now and the
command that shows it; wording about tickets, the work's past or who measured what is about the work,
not about olmax. The matcher is tested on bad and good lines below (the examples of each pattern), so a
pattern that stops matching fails here too.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("README.md", "CONTRIBUTING.md", "Makefile", ".ci", "docs", "olmax", "tests", "bench", "configs")
SUFFIXES = {".md", ".py", ".sh", ".toml", ".yaml", ".yml", ".cfg", ".txt", ""}
SELF = Path(__file__).resolve()

# Each pattern is wording about the work's history; `HISTORY.search(line)` is a hit.
PATTERNS = (
    r"\bissues?\s*#?\d+",
    r"\(#\d+\)",
    r"\b(?:the|this|that|an earlier|a later)\s+issue\b",
    r"\bissue's\b",
    r"\bfiled by\b",
    r"\blent\b",
    r"\bsessions?\b",  # pytest's fixture scope and Session object are allowed below
    r"\bhelpers?\s+(?:ran|wrote|measured|found|sessions?)\b",
    r"\bthe lead\b",
)
HISTORY = re.compile("|".join(PATTERNS), re.IGNORECASE)
# Spellings that use the words for something else: pytest's fixture scope and its Session object in hooks.
ALLOWED = re.compile(
    r"""scope\s*=\s*["']session["']|\bpytest_sessionfinish\(session\b|\bsession\.exitstatus\b"""
)


def history_hits(line: str) -> list[str]:
    """The history wording in one line (empty when the line is clean)."""
    return [m.group(0) for m in HISTORY.finditer(ALLOWED.sub("", line))]


def scanned_files() -> list[Path]:
    files: list[Path] = []
    for name in SCANNED:
        path = ROOT / name
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files.extend(
                p
                for p in sorted(path.rglob("*"))
                if p.is_file()
                and p.suffix in SUFFIXES
                and "__pycache__" not in p.parts
                and "out" not in p.relative_to(ROOT).parts[:2]
                and p.resolve() != SELF
            )
    return files


@pytest.mark.parametrize(
    "line",
    [
        "Issue 12's second part.",
        "a goal (issue 12) met",
        "the adapter (issue 7)",
        "as the issue measured it",
        "The issue's size",
        "no machine was lent.",
        "shared 2-core machine under load from other sessions",
        "written after a helper session found it",
        "see #12 (#12) for why",
        "as the lead asked",
    ],
)
def test_the_matcher_flags_history_wording(line: str) -> None:
    assert history_hits(line), f"not flagged: {line!r}"


@pytest.mark.parametrize(
    "line",
    [
        '@pytest.fixture(scope="session")',
        "def pytest_sessionfinish(session, exitstatus):",
        "    if failed and session.exitstatus == 0:",
        "    session.exitstatus = 1",
        "subprocess.Popen(cmd, start_new_session=True)",
        "an error names the file and the offset; tissue 35 is a word, not a number",
        "allenai/duplodocus#4 (https://github.com/allenai/duplodocus/issues/4)",
        "the loader issues one read per file",
        "a lead-in line before the quote",
    ],
)
def test_the_matcher_leaves_other_uses_alone(line: str) -> None:
    assert not history_hits(line), f"flagged: {line!r} -> {history_hits(line)}"


def test_no_history_in_the_project() -> None:
    hits = []
    for path in scanned_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for no, line in enumerate(text.splitlines(), 1):
            for hit in history_hits(line):
                hits.append(f"{path.relative_to(ROOT)}:{no}: {hit!r} in {line.strip()[:100]!r}")
    assert not hits, "wording about how the project was made (say what holds now instead):\n" + "\n".join(
        hits
    )

"""Every speed figure in README.md and docs/ is a citation of a benchmark record, and equals it.

The citation form (bench/record.py's docstring): a Markdown link whose text is the figure as the record
gives it, its median and then its min–max when it has more than one value, and whose target is the record
and the figure's name:

    [7.8x (6.3–9.0)](bench/results/loader.json#ratio_best)          (README.md)
    [779 M tokens/s (752–790)](../bench/results/loader.json#ox-sync_tokens_per_s)   (docs/)

The numbers are checked against the record at the precision written (7.8 means 7.75 <= median < 7.85),
so a figure copied by hand, rounded the wrong way or left behind after a rerun fails here. A speed
figure outside a citation (a number with a speed unit or an `x` ratio, outside code) fails too, except in
the sections listed in `UNCITED`, each with the exact count of figures still written by hand there.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

CITATION = re.compile(
    r"\[(?P<text>[^\]\n]+)\]\((?P<path>(?:\.\./)?bench/results/[a-z0-9_.-]+\.json)#(?P<fig>[a-z0-9_.-]+)\)"
)
NUM = r"[0-9][0-9,]*(?:\.[0-9]+)?"
FIGURE_TEXT = re.compile(
    rf"(?P<median>-?{NUM})\s?(?P<unit>[^()0-9][^()]*?)?(?:\s\((?P<min>-?{NUM})–(?P<max>-?{NUM})\))?"
)
# A speed figure written by hand: a rate or a ratio (`x` right after the number; `×` is a dose, not a ratio).
SPEED = re.compile(
    rf"(?<![\w.\"]){NUM}(?:\s?[–-]\s?{NUM})?(?:x(?![\w])(?!\s(?:fewer|more|smaller|larger|apart|away)\b)"
    r"|\s?(?:(?:[kMG]\s)?(?:tokens|documents|docs|rows)/s\b|[kMG]B/(?:CPU-)?s\b|[GT]FLOP/s\b))"
)
CODE = re.compile(r"`[^`\n]*`")

# Sections whose speed figures are not yet record citations: file -> exact count (lower it as they move).
UNCITED = {
    "docs/dedup-benchmarks.md": 1,  # Google ExactSubstr's published figure (Lee et al. 2022), not measured here
}


def figure_text(text: str) -> dict | None:
    m = FIGURE_TEXT.fullmatch(text.strip())
    return m.groupdict() if m else None


def agrees(written: str, value: float) -> bool:
    """`written` is `value` rounded to the digits written (half a unit of the last digit either way)."""
    d = Decimal(written.replace(",", ""))
    half = Decimal(1).scaleb(d.as_tuple().exponent) / 2
    return d - half <= Decimal(repr(value)) < d + half or abs(float(d) - value) <= float(half) * 1.0001


def check_citation(text: str, path: Path, fig_name: str) -> str | None:
    """None when the citation equals its record's figure, else what is wrong."""
    if not path.exists():
        return f"no record {path.relative_to(ROOT)} (run the benchmark that writes it)"
    rec = json.loads(path.read_text())
    if rec.get("smoke"):
        return f"{path.name} is a smoke record"
    fig = rec["figures"].get(fig_name)
    if fig is None:
        return f"{path.name} has no figure {fig_name!r} (it has {sorted(rec['figures'])})"
    parsed = figure_text(text)
    if parsed is None:
        return f"{text!r} is not `MEDIAN UNIT (MIN–MAX)`"
    if (parsed["unit"] or "").strip() != fig["unit"]:
        return f"{text!r}: unit {parsed['unit']!r}, the record's is {fig['unit']!r}"
    if not agrees(parsed["median"], fig["median"]):
        return f"{text!r}: median {parsed['median']}, the record's is {fig['median']}"
    if fig["n"] > 1 and parsed["min"] is None:
        return f"{text!r}: the record has {fig['n']} values; give their min–max"
    if parsed["min"] is not None and not (
        agrees(parsed["min"], fig["min"]) and agrees(parsed["max"], fig["max"])
    ):
        return f"{text!r}: min–max {parsed['min']}–{parsed['max']}, the record's is {fig['min']}–{fig['max']}"
    return None


def prose_lines(text: str):
    """(line number, line) outside fenced and indented code blocks."""
    fenced = False
    for no, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or line.startswith("    ") and not line.lstrip().startswith(("-", "*", "|")):
            continue
        yield no, line


def uncited_figures(line: str) -> list[str]:
    return SPEED.findall(CODE.sub("", CITATION.sub("", line)))


def test_figure_text_reads_median_unit_and_range() -> None:
    assert figure_text("7.8x (6.3–9.0)") == {"median": "7.8", "unit": "x", "min": "6.3", "max": "9.0"}
    assert figure_text("779 M tokens/s (752–790)")["unit"] == "M tokens/s"
    assert figure_text("0.07 s") == {"median": "0.07", "unit": "s", "min": None, "max": None}
    assert figure_text("0.015 nats (-0.001–0.033)") == {
        "median": "0.015",
        "unit": "nats",
        "min": "-0.001",
        "max": "0.033",
    }
    assert figure_text("fast") is None


def test_a_wrong_citation_is_caught(tmp_path: Path) -> None:
    rec = {"smoke": False, "figures": {"r": {"median": 7.84, "min": 6.3, "max": 9.0, "n": 3, "unit": "x"}}}
    path = tmp_path / "loader.json"
    path.write_text(json.dumps(rec))
    assert check_citation("7.8x (6.3–9.0)", path, "r") is None
    assert "median" in check_citation("8.7x (6.3–9.0)", path, "r")
    assert "min–max" in check_citation("7.8x", path, "r")
    assert "min–max" in check_citation("7.8x (6.2–9.0)", path, "r")
    assert "unit" in check_citation("7.8 M tokens/s (6.3–9.0)", path, "r")
    assert "no figure" in check_citation("7.8x (6.3–9.0)", path, "ratio")
    path.write_text(json.dumps({**rec, "smoke": True}))
    assert "smoke" in check_citation("7.8x (6.3–9.0)", path, "r")


def test_a_hand_written_speed_figure_is_caught() -> None:
    assert uncited_figures("the loader 8.7x–18.8x OLMo-core's") == ["8.7x", "18.8x"]
    assert uncited_figures("olmax 180–786 M tokens/s, OLMo-core 16–43 M") == ["180–786 M tokens/s"]
    assert uncited_figures("rensa 2.89 MB/CPU-s") == ["2.89 MB/CPU-s"]
    assert uncited_figures("rensa at 11.7 MB/s per core") == ["11.7 MB/s"]
    cited = "the loader [7.8x (6.3–9.0)](bench/results/loader.json#ratio_best) OLMo-core's"
    assert uncited_figures(cited) == []
    assert (
        uncited_figures("a 4× replay, 26 x 11 bands, `--threads 2x`, 0x1f, 16x16 tiles, 1,000x fewer rows")
        == []
    )


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_citation_equals_its_record(doc: Path) -> None:
    problems = []
    for no, line in prose_lines(doc.read_text()):
        for m in CITATION.finditer(line):
            path = (doc.parent / m["path"]).resolve()
            why = check_citation(m["text"], path, m["fig"])
            if why:
                problems.append(f"{doc.relative_to(ROOT)}:{no}: {why}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_speed_figure_is_a_citation(doc: Path) -> None:
    rel = str(doc.relative_to(ROOT))
    found = [
        f"{rel}:{no}: {fig}" for no, line in prose_lines(doc.read_text()) for fig in uncited_figures(line)
    ]
    allowed = UNCITED.get(rel, 0)
    if allowed:
        assert len(found) == allowed, (
            f"{rel}: {len(found)} hand-written speed figures, UNCITED says {allowed} (cite the record, "
            "then lower the count):\n" + "\n".join(found)
        )
    else:
        assert not found, "speed figures that cite no record (bench/record.py says how):\n" + "\n".join(found)

"""The demo's report: real HTML rendered from its Markdown, opening with a verdict table, plots inlined, every
check name explained; parsed back with the standard library's HTML parser."""

from __future__ import annotations

import ast
import base64
from html.parser import HTMLParser
from pathlib import Path

import pytest

from olmax.audit.loader_audit import CHECK_MEANINGS as LOADER_CHECKS
from olmax.audit.loader_audit import check_meaning
from olmax.demo.report import Report, cell, render_html
from olmax.evals import memorization

ROOT = Path(__file__).resolve().parents[2] / "olmax"
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


class Page(HTMLParser):
    """The parts of a page the tests look at: elements in order (tag, attrs, text) and the text of each."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.elements: list[list] = []
        self.open: list[list] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        el = [tag, dict(attrs), ""]
        self.elements.append(el)
        if tag not in ("img", "meta", "br", "hr"):
            self.open.append(el)

    def handle_endtag(self, tag):
        while self.open:
            if self.open.pop()[0] == tag:
                break

    def handle_data(self, data):
        for el in self.open:
            el[2] += data

    def all(self, tag: str) -> list[list]:
        return [e for e in self.elements if e[0] == tag]


def _report(tmp_path: Path) -> Report:
    (tmp_path / "evals").mkdir()
    (tmp_path / "resume.png").write_bytes(PNG)
    (tmp_path / "evals" / "gains-sciq.png").write_bytes(PNG)
    r = Report(tmp_path)
    r.command(["audit", "loader", "--mix", "a|b.txt"])
    r.verdict("loader gate, clean mix", True, "gated checks failing: none")
    r.verdict("leak audit, contaminated mix", False, "12 items flagged", expected=False)
    r.verdict("exact resume after SIGKILL", False, "max |loss difference| 0.5")
    r.add(
        "3. Pre-launch audit",
        "Loader gate: **passed**, see `loader.json` and a line\nwrapped in the source.\n\n"
        "| check | result | value |\n|---|---|---|\n| rank_union | pass | 0 |\n| identical_files | FAIL | 1 |\n\n"
        "```\nolmax audit loader --mix <x>\n```\n\n![loss](resume.png)\n\n![gains](evals/gains-sciq.png)\n",
    )
    return r


def test_html_is_rendered_markdown(tmp_path):
    r = _report(tmp_path)
    r.write()
    text = (tmp_path / "report.html").read_text()
    page = Page(text)
    assert "**" not in text and "`loader.json`" not in text
    assert [e[2] for e in page.all("strong")][-1] == "passed"
    assert "loader.json" in [e[2] for e in page.all("code")]
    # a wrapped source line stays inside its paragraph
    assert any("a line\nwrapped in the source." in e[2] for e in page.all("p"))
    assert not any(e[2].strip() == "wrapped in the source." for e in page.all("p"))
    # code blocks are escaped, not parsed as tags
    assert any("olmax audit loader --mix <x>" in e[2] for e in page.all("pre"))
    assert not page.all("x")
    # the Markdown file is the same text
    md = (tmp_path / "report.md").read_text()
    assert "**passed**" in md and "`loader.json`" in md


def test_opens_with_the_verdict_table(tmp_path):
    r = _report(tmp_path)
    r.write()
    page = Page((tmp_path / "report.html").read_text())
    first = [e[0] for e in page.elements if e[0] in ("h2", "table")][0]
    assert first == "table"  # before the first section
    rows = [e for e in page.all("td")]
    verdicts = {rows[i][2]: rows[i + 1] for i in range(0, 9, 3)}
    assert verdicts["loader gate, clean mix"][2] == "pass"
    assert verdicts["loader gate, clean mix"][1]["class"] == "pass"
    assert verdicts["leak audit, contaminated mix"][2] == "FAIL (as planted)"
    assert verdicts["leak audit, contaminated mix"][1]["class"] == "pass"  # the planted fault was caught
    assert verdicts["exact resume after SIGKILL"][2] == "FAIL"
    assert verdicts["exact resume after SIGKILL"][1]["class"] == "fail"
    # the headline names the check that came out wrong; the pipe in a cell stays in its cell
    strong = page.all("strong")[0][2]
    assert "1 of 3" in strong and "exact resume after SIGKILL" in strong
    assert rows[8][2] == "max |loss difference| 0.5"
    # a section's check table highlights too
    cls = {e[2]: e[1].get("class") for e in rows}
    assert cls["FAIL"] == "fail" and cls["pass"] == "pass" and cls["0"] is None


def test_every_plot_is_inlined(tmp_path):
    r = _report(tmp_path)
    r.write()
    imgs = Page((tmp_path / "report.html").read_text()).all("img")
    assert len(imgs) == 2
    for img in imgs:
        assert img[1]["src"].startswith("data:image/png;base64,")
        assert base64.b64decode(img[1]["src"].split(",", 1)[1]) == PNG
    md = (tmp_path / "report.md").read_text()
    assert "](resume.png)" in md and "](evals/gains-sciq.png)" in md


def test_missing_image_keeps_its_path(tmp_path):
    page = Page(render_html("# r\n\n![gone](nope.png)\n", tmp_path))
    assert page.all("img")[0][1]["src"] == "nope.png"


def test_cell_is_one_line_with_escaped_pipes():
    assert cell("a |b\n  c") == "a \\|b c"
    page = Page(render_html(f"| x |\n|---|\n| {cell('p|q')} |\n", Path(".")))
    assert [e[2] for e in page.all("td")] == ["p|q"]


def _check_names(path: Path) -> set[str]:
    """The name (first argument) of every `Check(...)` built in `path`; an f-string counts by its prefix."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Check" and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant):
                names.add(arg.value)
            elif isinstance(arg, ast.JoinedStr) and isinstance(arg.values[0], ast.Constant):
                names.add(arg.values[0].value)
    return names


@pytest.mark.parametrize("module", ["loader_audit.py", "dedup.py"])
def test_every_loader_check_is_explained(module):
    names = _check_names(ROOT / "audit" / module)
    assert names, module
    for name in names:
        assert check_meaning(name), f"{module}: check {name!r} has no line in loader_audit.CHECK_MEANINGS"
    assert check_meaning("source_share:web") == LOADER_CHECKS["source_share"]
    assert check_meaning("no_such_check") == ""


def test_every_memorization_check_is_explained():
    report = memorization.memorization_report(None)
    assert set(report["checks"]) == set(memorization.CHECK_MEANINGS)


def test_power_rows_show_what_each_check_could_see():
    """The memorization section's power table: a row per check and source, for the comparisons a check made
    and for what a source would have shown had it been over-served, in the figures power.py computes."""
    from olmax.demo.report import power_rows
    from olmax.evals.power import Rule, Sample, figures

    made = figures(0.01, 0.02, Sample(64, 128), Rule("rank", 3.0, 0.6), target=0.9)
    floor = figures(0.0126, 0.3, Sample(64, 64), Rule("mean", 3.0, 0.1), target=0.9)
    mem = {
        "checks": {"zlib": {"sources": {"code": {"power": made}}}, "gap": {"status": "ok"}},
        "power_section": {
            "target": 0.9,
            "sources": {"prose": {"windows": 80, "checks": {"exposure": floor}}},
        },
    }
    rows = power_rows(mem)
    assert len(rows) == 4 and rows[0].startswith("| comparison | check | source |")
    got = [[c.strip() for c in r.strip("|").split("|")] for r in rows[2:]]
    assert got[0][:4] == ["made", "zlib", "code", "64 vs 128"]
    assert got[0][4] == f"{made['smallest_dose']:.1f}x" and got[0][6] == f"{made['power']['4']:.0%}"
    assert got[0][8] == f"{made['windows_needed']['4']:,}"
    # check 1 cannot see 3 x 0.0126 nats under its 0.1 nats floor at any sample
    assert got[1][:3] == ["had it been over-served", "exposure", "prose"]
    assert got[1][7:] == ["never (under its floor)", "never (under its floor)"]
    assert power_rows({"checks": {}}) == []

"""The demo's report: a verdict table, the commands it ran and a section per step, written as Markdown and as
HTML rendered from that Markdown, and its plots."""

from __future__ import annotations

import base64
import html
import json
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from markdown_it import MarkdownIt
from markdown_it.rules_core import StateCore

from olmax.atomic import write_text

STYLE = (
    "body{font-family:sans-serif;max-width:64em;margin:2em auto;padding:0 1em;line-height:1.45}"
    "pre{background:#f4f4f4;padding:.6em;overflow:auto}code{background:#f4f4f4;padding:0 .2em}"
    "pre code{padding:0}table{border-collapse:collapse;margin:.6em 0}"
    "td,th{border:1px solid #ccc;padding:.2em .5em;vertical-align:top}th{background:#fafafa}"
    "td.pass{background:#dff3df;font-weight:bold}td.fail{background:#f9d6d5;color:#8a1212;font-weight:bold}"
    "img{max-width:100%}"
)


@dataclass(frozen=True)
class Verdict:
    """One line of the report's opening table: a check the demo makes, what it must say, and what it said."""

    check: str
    passed: bool  # what the check itself said (True: pass)
    expected: bool  # what it must say for the demo to be right (False: the demo planted a fault to catch)
    detail: str

    @property
    def as_expected(self) -> bool:
        return self.passed == self.expected

    def cell(self) -> str:
        said = "pass" if self.passed else "FAIL"
        if self.expected:
            return said
        return f"{said} (as planted)" if self.as_expected else f"{said} (a planted fault MISSED)"


class Report:
    """The demo's record: every command it ran, in order, a verdict per check and one section per step;
    written as Markdown (report.md) and a self-contained HTML page (report.html, plots inlined)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.commands: list[str] = []
        self.sections: list[tuple[str, str]] = []
        self.verdicts: list[Verdict] = []
        self.t0 = time.monotonic()

    def command(self, argv: list[str], note: str = "") -> str:
        """Record `olmax ARGV` (with an optional trailing comment) as the next command; returns the line."""
        line = "olmax " + shlex.join(argv) + (f"   # {note}" if note else "")
        self.commands.append(line)
        self.say(f"$ {line}")
        return line

    def say(self, text: str) -> None:
        print(f"\n[olmax demo {time.monotonic() - self.t0:6.0f}s] {text}", file=sys.stderr, flush=True)

    def add(self, title: str, body: str) -> None:
        self.sections.append((title, body.strip() + "\n"))

    def verdict(self, check: str, passed: bool, detail: str, expected: bool = True) -> None:
        """Record one check for the opening table; `expected=False` for a fault the demo planted."""
        self.verdicts.append(Verdict(check, bool(passed), expected, detail))

    def markdown(self) -> str:
        bad = [v.check for v in self.verdicts if not v.as_expected]
        head = (
            f"**All {len(self.verdicts)} checks came out as designed.**"
            if not bad
            else f"**{len(bad)} of {len(self.verdicts)} checks came out wrong: {', '.join(bad)}.**"
        )
        rows = ["| check | verdict | what it shows |", "|---|---|---|"]
        rows += [f"| {cell(v.check)} | {v.cell()} | {cell(v.detail)} |" for v in self.verdicts]
        md = "# olmax demo report\n\n" + head + "\n\n" + "\n".join(rows) + "\n\n"
        md += (
            "A verdict marked *as planted* is a check that must fail: the demo planted that fault "
            "(contaminated text, a copied shard) for the audit to catch.\n\n"
        )
        md += "\n".join(f"## {t}\n\n{b}" for t, b in self.sections)
        md += "\n## Every command, in order\n\n```\n" + "\n".join(self.commands) + "\n```\n"
        return md

    def write(self) -> Path:
        """report.md and report.html (the same text: the HTML is rendered from the Markdown)."""
        md = self.markdown()
        marks = {v.cell(): "pass" if v.as_expected else "fail" for v in self.verdicts}
        page = render_html(md, self.out, marks)
        write_text(self.out / "report.html", page)
        return write_text(self.out / "report.md", md)


def cell(text: object) -> str:
    """`text` as one Markdown table cell: on one line, its pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def render_html(md: str, base: Path, marks: dict[str, str] | None = None) -> str:
    """A standalone HTML page from the report's Markdown (CommonMark + pipe tables, raw HTML escaped): a table
    cell whose text is a key of `marks` gets that class, else `pass` is highlighted green and a cell starting
    `FAIL` red; every image under `base` is inlined as a data URI so the page can be moved or mailed alone."""
    marks = {"pass": "pass", **(marks or {})}
    parser = MarkdownIt("commonmark", {"html": False}).enable("table")

    def decorate(state: StateCore) -> None:
        tokens = state.tokens
        for i, tok in enumerate(tokens):
            if tok.type == "td_open" and i + 1 < len(tokens) and tokens[i + 1].type == "inline":
                text = tokens[i + 1].content.strip()
                mark = marks.get(text) or ("fail" if text.startswith("FAIL") else None)
                if mark:
                    tok.attrJoin("class", mark)
            for child in tok.children or ():
                if child.type == "image":
                    src = str(child.attrGet("src") or "")
                    path = base / src
                    if src and not src.startswith(("data:", "http:", "https:")) and path.is_file():
                        data = base64.b64encode(path.read_bytes()).decode()
                        child.attrSet("src", f"data:image/png;base64,{data}")

    parser.core.ruler.push("olmax_report", decorate)
    title = md.splitlines()[0].lstrip("# ").strip() if md else "report"
    return (
        f"<!doctype html>\n<html lang=en><head><meta charset=utf-8><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head>\n<body>\n{parser.render(md)}</body></html>\n"
    )


def short(v: object, n: int = 90) -> str:
    s = json.dumps(v) if not isinstance(v, str) else v
    return s if len(s) <= n else s[: n - 1] + "…"


def plot_resume(la: dict, lb_all: list[tuple[int, float]], killed: int | None, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5), dpi=100)
    steps = sorted(la)
    ax.plot(steps, [la[s]["loss"] for s in steps], lw=2.5, label="uninterrupted", color="#1f77b4")
    ax.plot(
        [s for s, _ in lb_all], [x for _, x in lb_all], ".", ms=3, label="killed + resumed", color="#d62728"
    )
    if killed:
        ax.axvline(killed, color="gray", ls="--", lw=1, label=f"SIGKILL after step {killed}")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def watch_rows(records: list[dict], train: dict[int, dict]) -> tuple[list[str], float]:
    """(Markdown rows: step x set, the watcher's CE and the trainer's in-loop CE at that step, max |difference|)
    from `olmax eval watch`'s evals.jsonl records and the run's train records by step."""
    rows = ["| step | set | watcher CE | in-loop CE | bits/byte | tokens |", "|---:|---|---:|---:|---:|---:|"]
    worst = 0.0
    for r in records:
        if r.get("kind") == "skipped":
            rows.append(f"| {r['step']} | (skipped: {r.get('reason', '')}) | | | | |")
        if r.get("kind") != "heldout" or r.get("subset") != "all":
            continue
        loop = train.get(r["step"], {}).get(f"eval/{r['eval']}/ce")
        if loop is not None:
            worst = max(worst, abs(loop - r["ce"]))
        shown = f"{loop:.6f}" if loop is not None else "–"
        rows.append(
            f"| {r['step']} | {r['eval']} | {r['ce']:.6f} | {shown} | {r['bpb']:.4f} | {r['tokens']:,} |"
        )
    return rows, worst


def power_rows(mem: dict) -> list[str]:
    """Markdown rows of a memorization report's power section (`olmax eval memorization --power`): per
    check and source, what it could see, from the comparisons it made and, had a source been served beyond
    its plan, from the windows such a comparison would take."""
    sec = mem.get("power_section") or {}

    def pct(f: dict, dose: str) -> str:
        return f"{f['power'][dose]:.0%}" if dose in f["power"] else "–"

    def needed(f: dict, dose: str) -> str:
        n = f["windows_needed"].get(dose)
        return f"{n:,}" if n is not None else "never (under its floor)"

    def row(what: str, name: str, src: str, f: dict) -> str:
        smallest = f"{f['smallest_dose']:.1f}x" if f["smallest_dose"] is not None else "none up to 10,000x"
        return (
            f"| {what} | {name} | {src} | {f['over_served']} vs {f['as_planned']} | {smallest} | "
            f"{pct(f, '2')} | {pct(f, '4')} | {needed(f, '2')} | {needed(f, '4')} |"
        )

    rows = [
        "| comparison | check | source | over-served vs as planned | smallest dose at "
        f"{sec.get('target', 0.9):.0%} | power at 2x | power at 4x | windows for 2x | windows for 4x |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, c in mem.get("checks", {}).items():
        for src, w in (c.get("sources") or {}).items():
            if isinstance(w, dict) and w.get("power"):
                rows.append(row("made", name, src, w["power"]))
    for src, got in (sec.get("sources") or {}).items():
        for name, f in got.get("checks", {}).items():
            rows.append(row("had it been over-served", name, src, f))
    return rows if len(rows) > 2 else []

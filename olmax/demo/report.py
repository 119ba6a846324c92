"""The demo's report: the commands it ran and a section per step, rendered as Markdown and HTML, and its plot."""

from __future__ import annotations

import html
import json
import shlex
import sys
import time
from pathlib import Path

from olmax.atomic import write_text


class Report:
    """The demo's record: every command it ran, in order, and one section per step; written as Markdown and
    a self-contained HTML page."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.commands: list[str] = []
        self.sections: list[tuple[str, str]] = []
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

    def write(self) -> Path:
        md = "# olmax demo report\n\n" + "\n".join(f"## {t}\n\n{b}" for t, b in self.sections)
        md += "\n## Every command, in order\n\n```\n" + "\n".join(self.commands) + "\n```\n"
        page = [
            "<!doctype html><meta charset=utf-8><title>olmax demo report</title><style>body{font-family:"
            "sans-serif;max-width:62em;margin:2em auto;line-height:1.4}pre{background:#f4f4f4;padding:.6em;"
            "overflow:auto}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em}"
            "</style><h1>olmax demo report</h1>"
        ]
        for title, body in self.sections:
            page.append(f"<h2>{html.escape(title)}</h2>{md_to_html(body)}")
        page.append(
            "<h2>Every command, in order</h2><pre>" + html.escape("\n".join(self.commands)) + "</pre>"
        )
        write_text(self.out / "report.html", "\n".join(page))
        return write_text(self.out / "report.md", md)


def md_to_html(body: str) -> str:
    """The small Markdown subset the report uses: code fences, pipe tables, images, paragraphs, bullets."""
    out, lines, i = [], body.splitlines(), 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append("<pre>" + html.escape("\n".join(lines[i + 1 : j])) + "</pre>")
            i = j + 1
        elif line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                cells = [c.strip() for c in lines[i].strip("|").split("|")]
                if not all(set(c) <= set("-: ") for c in cells):
                    rows.append("".join(f"<td>{html.escape(c)}</td>" for c in cells))
                i += 1
            out.append("<table>" + "".join(f"<tr>{r}</tr>" for r in rows) + "</table>")
        elif line.startswith("!["):
            alt, src = line[2:].split("](", 1)
            out.append(
                f'<p><img alt="{html.escape(alt)}" src="{html.escape(src.rstrip(")"))}" width=640></p>'
            )
            i += 1
        elif line.startswith("- "):
            items = []
            while i < len(lines) and lines[i].startswith("- "):
                items.append(f"<li>{html.escape(lines[i][2:])}</li>")
                i += 1
            out.append("<ul>" + "".join(items) + "</ul>")
        else:
            if line.strip():
                out.append(f"<p>{html.escape(line)}</p>")
            i += 1
    return "\n".join(out)


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

"""The demo's report in a real browser: headless Chromium (Debian's `chromium`, driven by Playwright) opens
report.html from disk with every network request refused, and the page must show what a person expects:
every plot loaded, no console or page error, the verdict table first on the screen, nothing wider than a
1280-pixel window. A screenshot of the top of the page is written beside it (slow).

The report is built by the demo's own code (olmax.demo.report: the verdict table, sections, the matplotlib
plots the demo draws, the command list) with the long cells the demo's real report has: paths, commands
and check details."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from olmax.demo.report import Report, plot_resume

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
WIDTH = 1280
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def demo_like_report(out: Path) -> Path:
    la = {s: {"loss": 10.0 / (1 + 0.05 * s)} for s in range(1, 121)}
    lb = [(s, la[s]["loss"]) for s in range(1, 121)]
    plot_resume(la, lb, 60, out / "resume.png")
    r = Report(out)
    r.command(
        [
            "data",
            "prepare",
            "--tokenizer",
            "dolma2",
            "--out",
            str(out / "shards"),
            "code=/usr/lib/python3.11/**/*.py",
        ]
    )
    r.command(
        [
            "audit",
            "loader",
            "--mix",
            str(out / "shards" / "mix.txt"),
            "--epochs",
            "2",
            "--out",
            str(out / "audit"),
        ]
    )
    r.verdict(
        "loader gate, clean mix", True, "gated checks failing: none; 12 checks ran over 2 epochs, 4,096 rows"
    )
    r.verdict(
        "loader gate, a shard copied under another name",
        False,
        f"identical_files: {out / 'shards' / 'code' / 'part-00000.npy'} = {out / 'shards' / 'copy' / 'part-00000.npy'}",
        expected=False,
    )
    r.verdict("leak audit, contaminated mix", False, "12 items flagged: sciq 7, arc_easy 5", expected=False)
    r.verdict("exact resume after SIGKILL", True, "max |loss difference| 0 over 120 steps")
    rows = "| check | result | value | threshold | compared | needs |\n|---|---|---|---|---|---|\n"
    for name in ("rank_union", "identical_files", "duplicate_windows", "unplanned_repeats"):
        rows += (
            f"| {name} | pass | 0 | 0 | 64 windows served 4.0x where the plan serves 1.0x vs 64 served as "
            f"planned (1.0x) of the same source | `{out / 'shards' / 'mix.txt'}` |\n"
        )
    r.add(
        "3. Pre-launch audit", f"Loader gate: **passed**, see `loader.json`.\n\n{rows}\n![loss](resume.png)\n"
    )
    r.add(
        "4. Resume",
        "```\n" + "olmax train --config tiny --run-dir " + str(out / "run") + " --steps 120" * 3 + "\n```\n",
    )
    r.write()
    return out / "report.html"


def test_the_report_renders_offline_in_chromium(tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"{CHROMIUM} is missing: install Debian's chromium (`make setup` does, or apt-get install chromium)"
        )
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    page_path = demo_like_report(tmp_path)
    requests, console_errors, page_errors = [], [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": 900})

            def refuse(route):
                if not route.request.url.startswith(("file:", "data:")):
                    requests.append(route.request.url)
                    route.abort()
                else:
                    route.continue_()

            page.route("**/*", refuse)
            page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: page_errors.append(str(e)))
            page.goto(page_path.as_uri(), wait_until="load")
            images = page.evaluate("() => [...document.images].map(i => [i.complete, i.naturalWidth, i.alt])")
            first = page.evaluate(
                "() => { const t = document.querySelector('table'), h = document.querySelector('h2');"
                " return [t.getBoundingClientRect().top, h.getBoundingClientRect().top, innerHeight,"
                " t.rows[0].innerText, t.rows.length]; }"
            )
            widths = page.evaluate(
                "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
            )
            wide = page.evaluate(
                "() => [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right >"
                " document.documentElement.clientWidth + 1).map(e => e.tagName + ' ' + e.innerText.slice(0, 60))"
            )
            page.screenshot(path=str(tmp_path / "report-top.png"))
        finally:
            browser.close()
    assert requests == [], f"the report asked for the network: {requests}"
    assert console_errors == [] and page_errors == [], (console_errors, page_errors)
    assert images and all(complete and width > 0 for complete, width, _ in images), images
    table_top, heading_top, height, header, n_rows = first
    assert table_top < heading_top and table_top < height / 2, first  # the verdict table, on the first screen
    assert header.split("\t")[:2] == ["check", "verdict"] and n_rows == 5, first
    assert widths[0] <= widths[1], f"wider than a {WIDTH}-pixel window ({widths}): {wide[:5]}"
    shot = tmp_path / "report-top.png"
    assert shot.stat().st_size > 10_000
    if out := os.environ.get("OLMAX_REPORT_SCREENSHOT"):  # to refresh docs/report-screenshot.png
        shutil.copy(shot, out)

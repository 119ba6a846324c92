"""The demo's last lines: one verdict per check, a count of those as expected, and report.html's path.
(The whole `olmax demo` takes ~15 minutes; this checks the summary it ends with, from recorded verdicts.)"""

from __future__ import annotations

from olmax.demo.pipeline import verdict_summary


def test_the_summary_has_a_line_per_check_and_ends_at_report_html(tmp_path):
    verdicts = [
        ("loader gate, clean mix", "passed", True),
        ("kill and resume", "losses differ by 0.01", False),
    ]
    text = verdict_summary(verdicts, 812.4, tmp_path / "report.html")
    lines = text.splitlines()
    assert lines[0] == "olmax demo: 1 of 2 checks as expected, 812 s"
    assert lines[1].split()[:2] == ["ok", "loader"] and "passed" in lines[1]
    assert lines[2].split()[:2] == ["FAIL", "kill"] and "losses differ by 0.01" in lines[2]
    assert lines[-1] == f"report: {tmp_path / 'report.html'}" and len(lines) == 4

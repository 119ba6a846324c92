"""The demo's last lines: a headline (all came out as designed, or which came out wrong), one verdict per
check, and report.html's path.
(The whole `olmax demo` takes ~15 minutes; this checks the summary it ends with, from recorded verdicts.)"""

from __future__ import annotations

from olmax.demo.pipeline import verdict_summary
from olmax.demo.report import Verdict


def test_the_summary_has_a_line_per_check_and_ends_at_report_html(tmp_path):
    verdicts = [
        Verdict("loader gate, clean mix", True, True, "gated checks failing: none"),
        Verdict("exact resume after SIGKILL", False, True, "max |loss difference| 0.01"),
        Verdict("loader gate, copied shard", False, False, "gated checks failing: identical_files"),
    ]
    text = verdict_summary(verdicts, 812.4, tmp_path / "report.html")
    lines = text.splitlines()
    assert lines[0] == "olmax demo: 1 of 3 checks came out wrong: exact resume after SIGKILL, 812 s"
    assert lines[1].split()[:2] == ["ok", "loader"] and "pass: gated checks failing: none" in lines[1]
    assert lines[2].split()[:2] == ["FAIL", "exact"] and "max |loss difference| 0.01" in lines[2]
    assert lines[3].split()[0] == "ok" and "FAIL (as planted)" in lines[3]  # a planted fault caught is ok
    assert lines[-1] == f"report: {tmp_path / 'report.html'}" and len(lines) == 5
    good = verdict_summary([verdicts[0], verdicts[2]], 700, tmp_path / "report.html").splitlines()
    assert good[0] == "olmax demo: all 2 checks came out as designed, 700 s"

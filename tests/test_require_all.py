"""Under OLMAX_REQUIRE_ALL=1 (what CI sets) a skip is a failure: a test skipped for a missing package, a
module skipped at import, but not a test marked `may_skip`; without it they skip as usual."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

TESTS = """
import pytest

def test_needs_a_package_that_is_missing():
    pytest.importorskip("no_such_package_here")

@pytest.mark.may_skip
def test_needs_files_some_machines_lack():
    pytest.skip("no such files here")

def test_runs():
    assert True
"""
MODULE_SKIPPED = "\n".join(
    [
        "import pytest",
        'pytest.importorskip("no_such_package_here")',
        "",
        "def test_never_runs():",
        "    pass",
        "",
    ]
)


def run_pytest(tmp_path: Path, require_all: bool) -> subprocess.CompletedProcess:
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_cases.py").write_text(TESTS)
    (tmp_path / "test_module_skipped.py").write_text(MODULE_SKIPPED)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    may_skip: allowed\n")
    env = {k: v for k, v in os.environ.items() if k != "OLMAX_REQUIRE_ALL"}
    if require_all:
        env["OLMAX_REQUIRE_ALL"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_skips_fail_under_require_all(tmp_path: Path) -> None:
    proc = run_pytest(tmp_path, require_all=True)
    out = proc.stdout
    assert proc.returncode != 0, out
    assert "FAILED test_cases.py::test_needs_a_package_that_is_missing" in out, out
    assert "FAILED (module skipped under OLMAX_REQUIRE_ALL=1) test_module_skipped.py" in out, out
    assert "no_such_package_here" in out and "OLMAX_REQUIRE_ALL=1" in out, out
    assert "SKIPPED" in out and "no such files here" in out, out  # may_skip still skips
    assert "PASSED test_cases.py::test_runs" in out, out


def test_skips_are_skips_without_it(tmp_path: Path) -> None:
    proc = run_pytest(tmp_path, require_all=False)
    assert proc.returncode == 0, proc.stdout
    assert "3 skipped" in proc.stdout and "1 passed" in proc.stdout, proc.stdout

"""pyproject.toml builds its metadata without setuptools' license deprecation box: an SPDX `license`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_metadata_builds_quietly_with_an_spdx_license(tmp_path):
    code = (
        "import sys; from setuptools import build_meta; "
        "print(build_meta.prepare_metadata_for_build_wheel(sys.argv[1]))"
    )
    # -W error: any SetuptoolsDeprecationWarning (the `license = {text = ...}` table) fails the build
    p = subprocess.run(
        [sys.executable, "-W", "error", "-c", code, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Deprecat" not in p.stdout + p.stderr
    metadata = (tmp_path / p.stdout.strip().splitlines()[-1] / "METADATA").read_text()
    assert "License-Expression: Apache-2.0" in metadata

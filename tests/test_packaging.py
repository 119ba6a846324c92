"""An installed wheel (not the editable checkout) finds its presets from any folder (the OLMo 3 recipes and
`tiny` ship as package data, so `olmax train --config tiny` works after a plain `pip install`) and carries
prepare's compiled JSON-lines reader, built from setup.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PRESETS = sorted(p.stem for p in (REPO / "olmax" / "configs").glob("*.yaml"))

# Run from `/` with only the installed copy on the path: it must import from there and find every preset.
PROBE = """
import json, sys
import olmax
from olmax.recipe import find_config
from olmax.train.config import load_config
from olmax.errors import OlmaxError
names = json.loads(sys.argv[1])
out = {"file": olmax.__file__, "configs": {}}
for name in names:
    cfg = load_config(name)
    out["configs"][name] = [str(find_config(name)), cfg.name, cfg.model_preset, cfg.data.seq_len]
try:
    find_config("no_such_preset")
except OlmaxError as e:
    out["unknown"] = str(e)
from olmax.data import readers
out["compiled_reader"] = readers.native_jsonl is not None and readers.native_jsonl.__file__
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The package built into a wheel from a clean copy of the sources, installed into a bare target."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    # a copy, so a stale build/ of the checkout cannot hide a file the wheel would miss
    shutil.copytree(
        REPO / "olmax", src / "olmax", ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so")
    )
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, src / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp / "dist"), str(src)],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp / "dist").glob("olmax-*.whl")
    target = tmp / "site"
    subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True, capture_output=True
    )
    return target


def _run(target: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(target)}
    return subprocess.run(
        [sys.executable, *args], cwd="/", env=env, capture_output=True, text=True, timeout=300
    )


def test_the_repository_has_the_presets():
    assert {"tiny", "olmo3_7b_stage1", "olmo3_7b_stage2", "olmo3_7b_stage3"} <= set(PRESETS)


def test_installed_wheel_loads_every_preset_from_root(installed):
    got = _run(installed, "-c", PROBE, json.dumps(PRESETS))
    assert got.returncode == 0, got.stderr
    out = json.loads(got.stdout)
    assert out["file"].startswith(str(installed)), out["file"]  # the wheel's copy, not the checkout
    assert sorted(out["configs"]) == PRESETS
    for name, (path, run_name, _preset, seq_len) in out["configs"].items():
        assert Path(path).is_relative_to(installed) and Path(path).name == f"{name}.yaml"
        assert run_name and seq_len > 0
    assert out["configs"]["tiny"][2] == "tiny"
    # prepare's compiled JSON-lines reader is built into the wheel (this machine has a C compiler)
    assert out["compiled_reader"] and out["compiled_reader"].startswith(str(installed)), out
    assert out["configs"]["olmo3_7b_stage1"][2].startswith("olmo3_7b")
    # the error for an unknown name lists what the wheel ships, not an empty list
    assert all(name in out["unknown"] for name in PRESETS), out["unknown"]


def test_installed_cli_train_help_from_root(installed):
    got = _run(installed, "-m", "olmax.cli", "train", "--config", "tiny", "--help")
    assert got.returncode == 0, got.stderr
    assert "--config" in got.stdout

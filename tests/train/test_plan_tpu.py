"""`olmax train --plan` for the slices the reproduction runs on, compiled here for TPU topologies (libtpu from
bench/setup/setup_libtpu.sh, no chip): the shipped stage-1 config fits v5e-256 with the remat it resolves
to, runs the splash kernel, and moves no weight in fp32 and no gradient whole; v5e-64 fits at the settings
its recorded plan resolved to. Each 7B compile for a slice takes minutes here, so these are the few CI pays."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from olmax.model import remat

REPO = Path(__file__).resolve().parents[2]
LIBTPU = REPO / ".venv-libtpu"  # bench/setup/setup_libtpu.sh
RECORD = REPO / "bench" / "results" / "tpu_slice.json"


def plan(tmp_path: Path, topology: str, *overrides: str) -> tuple[subprocess.CompletedProcess, dict]:
    assert (LIBTPU / "libtpu").is_dir(), "run bench/setup/setup_libtpu.sh (CI does)"
    out = tmp_path / f"{topology}.json"
    olmax = Path(sys.executable).with_name("olmax")
    env = {**os.environ, "PYTHONPATH": str(LIBTPU), "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}
    env.pop("JAX_PLATFORMS", None)
    cmd = [str(olmax), "train", "--config", "olmo3_7b_stage1", "--plan", "--topology", topology, *overrides]
    proc = subprocess.run(
        [*cmd, "--json", str(out)], capture_output=True, text=True, timeout=1800, env=env, cwd=REPO
    )
    return proc, json.loads(out.read_text()) if out.is_file() else {}


@pytest.mark.slow
def test_stage1_as_shipped_fits_v5e_256_with_splash_and_fsdp_collectives(tmp_path):
    proc, r = plan(tmp_path, "v5e-256")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert r["fits"] and r["plan_bytes_per_chip"] <= r["hbm_bytes_per_chip"] * (1 - r["margin"])
    assert r["remat_asked"] == "auto" and r["remat"] in remat.LADDER and r["remat"] != "full"
    assert r["attention"].startswith("splash") and r["splash_kernel_calls"] > 0
    assert r["fp32_weight_all_gathers"] == 0 and r["whole_gradient_all_reduces"] == 0
    kinds = set(r["collectives"])
    assert "all-gather bf16" in kinds and not any(
        k.startswith("all-gather f32") and r["collectives"][k]["bytes_per_step"] > 1e8 for k in kinds
    )
    assert "fits" in proc.stdout and r["predicted_mfu"] > 0


@pytest.mark.slow
def test_stage1_fits_v5e_64_at_the_settings_its_record_resolved(tmp_path):
    recorded = json.loads(RECORD.read_text())["plans"]["v5e-64"]
    proc, r = plan(
        tmp_path,
        "v5e-64",
        f"model.remat={recorded['remat']}",
        f"mesh.per_device_batch={recorded['per_device_batch']}",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert r["fits"] and r["microbatches"] == recorded["microbatches"]

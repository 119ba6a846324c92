"""`olmax train --plan` for the slices the reproduction runs on, compiled here for TPU topologies (libtpu from
bench/setup/setup_libtpu.sh, no chip): the shipped stage-1 config fits v5e-256 and v5e-64 at the remat and
rows its recorded plans resolved to (bench/results/tpu_slice.json; what `remat: auto` picks is the ladder's
job, tested on the CPU), runs the splash kernel and gathers no weight in fp32; and on a v5e-16 the FSDP
collectives are the reference's: weights gathered in bf16 (the head once), gradients reduce-scattered in
fp32, none all-reduced whole. Each 7B compile for a slice takes minutes here: these are the few CI pays."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
        [*cmd, "--json", str(out)], capture_output=True, text=True, timeout=2400, env=env, cwd=REPO
    )
    return proc, json.loads(out.read_text()) if out.is_file() else {}


def recorded(topology: str) -> list[str]:
    r = json.loads(RECORD.read_text())["plans"][topology]
    return [f"model.remat={r['remat']}", f"mesh.per_device_batch={r['per_device_batch']}"]


@pytest.mark.slow
@pytest.mark.parametrize("topology", ["v5e-256", "v5e-64"])
def test_stage1_fits_the_slice_at_the_remat_it_resolves_to(tmp_path, topology):
    proc, r = plan(tmp_path, topology, *recorded(topology))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert r["fits"] and r["plan_bytes_per_chip"] <= r["hbm_bytes_per_chip"] * (1 - r["margin"])
    assert r["attention"].startswith("splash") and r["splash_kernel_calls"] > 0
    assert r["fp32_weight_all_gathers"] == 0
    assert not any(k.startswith("all-reduce bf16") for k in r["collectives"])  # reductions in fp32
    assert "fits" in proc.stdout and r["predicted_mfu"] > 0


@pytest.mark.slow
def test_fsdp_collectives_on_a_v5e_16(tmp_path):
    """One period of the 7B's layers on 16 chips, one microbatch of 2 rows a chip: the head gathered once in
    bf16, the embedding through an all-to-all, every weight gradient reduce-scattered (windowed einsums) in
    fp32: no fp32 all-gather of a weight, no all-reduce of a whole gradient."""
    proc, r = plan(tmp_path, "v5e-16", "model.n_layers=4", "data.global_batch_size=32", "model.remat=full")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert r["fp32_weight_all_gathers"] == 0 and r["whole_gradient_all_reduces"] == 0
    kinds = r["collectives"]
    assert (
        "all-to-all bf16" in kinds and "collective-permute f32" in kinds
    )  # the lookup; the fp32 reduce-scatters
    head = [c for c in r["collective_list"] if c["kind"] == "all-gather" and c["shape"] == [4096, 100352]]
    assert [(c["dtype"], c["count"], c["runs"]) for c in head] == [("bf16", 1, 1)]

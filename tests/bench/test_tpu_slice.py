"""bench/chip/tpu_slice.py without a chip: its chip part's smoke on the CPU merged into a record with the
committed plans, and the committed record (bench/results/tpu_slice.json): the per-chip compute measured on
the chip, the slices' plans and predictions, MaxText's plan beside olmax's, and the step-time model's rates
equal to the record's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.chip import tpu_slice
from olmax.train import slice_model

REPO = Path(__file__).resolve().parents[2]
RECORD = REPO / "bench" / "results" / "tpu_slice.json"
PARTS = REPO / "bench" / "results" / "tpu_slice"


def test_the_committed_record_predicts_the_slices_from_the_chip():
    r = json.loads(RECORD.read_text())
    s, plans, pred = r["summary"], r["plans"], r["predictions"]
    assert set(plans) == {"v5e-256", "v5e-64", "v5p-128", "v5p-512"} and all(
        p["fits"] for p in plans.values()
    )
    assert all(p["remat_asked"] == "auto" and p["attention"].startswith("splash") for p in plans.values())
    assert s["predicted_mfu_v5e_256"] >= 0.55 and s["predicted_mfu_v5e_256"] == pred["v5e-256"]["mfu"]
    ratio = pred["v5e-64"]["tokens_per_chip_per_s"] / pred["v5e-256"]["tokens_per_chip_per_s"]
    assert s["per_device_throughput_v5e_64_over_256"] == ratio > 0.95
    assert s["fp32_weight_all_gathers"] == 0
    assert s["whole_gradient_all_reduces"] == plans["v5e-256"]["whole_gradient_all_reduces"]
    assert s["maxtext_whole_gradient_all_reduces_v5e_256"] > 0  # libtpu's choice at 256 chips, the peer's too
    assert s["olmax_plan_gib_v5e_256"] <= 15.75 * 0.95 < s["maxtext_plan_gib_v5e_256"]
    measured = {(x["remat"], x["rows"]): round(x["rate"], 4) for x in r["rates"]}
    assert measured == slice_model.MEASURED_RATE, "slice_model.MEASURED_RATE must be the record's rates"
    chip = r["chip"]
    assert chip["chip"]["device_kind"] == "TPU v5 lite" and not any("error" in row for row in chip["rows"])


def test_maxtexts_dumped_step_is_read_for_whole_gradient_all_reduces(tmp_path):
    """MaxText's scan adds a unit axis in front of a layer's weight: its gradient all-reduced whole counts, a
    reduce-scatter of it or an all-reduce of a norm's vector does not, and only the train step's optimized
    module is read (the largest, where XLA dumps several)."""
    layer = "bf16[1,4096,11008]{2,1,0}"
    hlo = f"""HloModule jit_train_step

ENTRY %main (p0: {layer}, p1: f32[4096]) -> ({layer}, f32[4096]) {{
  %p0 = {layer} parameter(0)
  %p1 = f32[4096]{{0}} parameter(1)
  %add = f32[] add(f32[] %p1, f32[] %p1)
  %all-reduce.1 = {layer} all-reduce({layer} %p0), channel_id=1, replica_groups=[1,256]<=[256], to_apply=%add
  %reduce-scatter.2 = bf16[1,16,11008]{{2,1,0}} reduce-scatter({layer} %p0), channel_id=2, replica_groups=[1,256]<=[256], dimensions={{1}}, to_apply=%add
  %all-reduce.3 = f32[4096]{{0}} all-reduce(f32[4096]{{0}} %p1), channel_id=3, replica_groups=[1,256]<=[256], to_apply=%add
  ROOT %t = ({layer}, f32[4096]{{0}}) tuple(%all-reduce.1, %all-reduce.3)
}}
"""
    (tmp_path / "module_0001.jit_train_step.after_optimizations.txt").write_text(hlo)
    (tmp_path / "module_0000.jit_train_step.before_optimizations.txt").write_text(
        hlo.replace("all-reduce.1 ", "x ")
    )
    got = tpu_slice.maxtext_collectives(tmp_path)
    assert got["whole_gradient_all_reduces"] == 1 and got["whole_gradient_all_reduce_dtypes"] == ["bf16"]
    assert (
        got["collectives"]["all-reduce f32"]["collectives"] == 1
        and "reduce-scatter bf16" in got["collectives"]
    )
    assert tpu_slice.maxtext_collectives(tmp_path / "empty") == {}


@pytest.mark.slow
def test_the_chip_part_runs_on_a_cpu_and_merges_into_a_record(tmp_path):
    chip = tmp_path / "chip.json"
    cmd = [sys.executable, "-m", "bench.chip.tpu_slice", "--part", "chip", "--smoke", "--steps", "1"]
    proc = subprocess.run(
        [*cmd, "--rows", "full_b2,head_b2", "--out", str(chip)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    part = json.loads(chip.read_text())
    assert [row["row"] for row in part["rows"]] == ["full_b2", "head_b2"]
    assert all(row["step_s"] > 0 and row["executed_flops"] > 0 for row in part["rows"])
    part.update(peak_flops=197e12, chip={"device_kind": "cpu stand-in"})  # a rate needs a peak: the v5e's
    chip.write_text(json.dumps(part))
    merged = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.chip.tpu_slice",
            "--merge",
            str(chip),
            *map(str, sorted(PARTS.glob("plans_*.json"))),
            "--results",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    assert merged.returncode == 0, merged.stdout[-2000:] + merged.stderr[-2000:]
    rec = json.loads((tmp_path / "tpu_slice.json").read_text())
    assert rec["rates"] and rec["rates"][0]["remat"] == "full"
    assert set(rec["plans"]) == {"v5e-256", "v5e-64", "v5p-128", "v5p-512"} and rec["predictions"]

"""Every benchmark runs whole at its smoke size, so one that no longer runs fails here, not at `make bench`.

Each bench/ script is one of: run here at its smoke size (`SMOKE`), run whole by another test
(`RUN_ELSEWHERE`), or a module the benchmarks import (`MODULES`); a new script in none of them fails
`test_every_bench_script_is_accounted_for`. The smoke runs take about 6 minutes on a loaded 2-core machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"

# script -> its smoke arguments and the records it writes (bench/record.py) under --results
SMOKE: dict[str, tuple[list[str], list[str]]] = {
    "loader.py": (["--smoke"], ["loader"]),
    "train_step.py": (["--smoke"], ["train_step_b1"]),
    "trace.py": (["--smoke"], []),
    "forward.py": (["--smoke"], ["forward"]),
    "train_breakdown.py": (["--smoke"], []),
    "packing.py": (["--smoke"], ["packing"]),
    "dedup_stages.py": (["--smoke"], []),
    "audit.py": (["--smoke"], []),
    "stage1_plan.py": (["--smoke"], []),
    "leak_calibration.py": (["--smoke"], []),
    "beam_parity.py": (["--smoke"], []),
    "audit_mix.py": (["--smoke"], ["audit_mix"]),
    "audit_bucket.py": (["--smoke"], ["audit_bucket"]),
    "audit_near.py": (["--smoke"], ["audit_near"]),
    "leak_speed.py": (["--smoke"], ["leaks"]),
    "audit_dedup.py": (["--smoke"], ["audit_dedup"]),
    "dedup_rates.py": (["--smoke"], ["dedup_rates"]),
    "dedup_pool.py": (["--smoke"], ["dedup_pool"]),
    "dedup_beam.py": (["--smoke"], ["dedup_beam"]),
    "tokenizer_engines.py": (["--smoke"], ["tok-engines"]),
    "prepare.py": (
        ["--smoke", "--input-mb", "2"],
        ["tok"],
    ),  # against `dolma tokens` (its venv built on first use)
}
RUN_ELSEWHERE = {
    "memorization_power.py": "tests/bench/test_memorization_power.py::test_a_16x_dose_is_flagged_and_clean_is_not",
    "dedup.py": "tests/bench/test_dedup_bench.py::test_dedup_bench_tiny_olmax_side",
    "dedup_calibration.py": "tests/bench/test_dedup_bench.py::test_calibration_tiny_runs_olmax_and_meets_the_goals",
    "maxtext_peer.py": "tests/bench/test_maxtext_peer.py::test_maxtext_cpu_smoke",
    "tpu_mfu.py": "tests/bench/test_tpu_mfu.py::test_both_parts_run_on_a_cpu_and_merge_into_a_record",
    # in a venv holding only what the TPU machine holds, from a copy of the files a device call sends
    "tpu_seed.py": "tests/bench/test_tpu_seed.py::test_smoke_runs_in_a_venv_holding_only_what_the_device_holds",
}
MODULES = {
    "engine_ceiling.py",
    "record.py",
    "dedup_corpus.py",
    "dedup_peer.py",
    "leak_plants.py",
    "dask_cluster.py",
    "tpu_seed_chip.py",  # what tpu_seed.py's child processes run
}


def test_every_bench_script_is_accounted_for() -> None:
    scripts = {p.name for p in BENCH.glob("*.py")}
    listed = set(SMOKE) | set(RUN_ELSEWHERE) | MODULES
    assert scripts - listed == set(), "a benchmark with no smoke run: add it to SMOKE"
    assert listed - scripts == set(), "listed here but not in bench/"
    for script, test in RUN_ELSEWHERE.items():
        path, name = test.split("::")
        assert f"def {name}(" in (ROOT / path).read_text(), f"{script}: {test} is gone"


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(SMOKE))
def test_the_benchmark_runs_whole_at_its_smoke_size(script: str, tmp_path: Path) -> None:
    args, records = SMOKE[script]
    if "--smoke" in args:
        args = [*args, "--results", str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=480,
    )
    assert proc.returncode == 0, (
        f"{script} {' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    )
    for name in records:
        rec = json.loads((tmp_path / f"{name}.json").read_text())
        assert rec["smoke"] is True and rec["figures"], f"{name}.json has no figures"
        assert all(t["values"] for t in rec["timings"].values())

"""Every benchmark runs whole at its smoke size, so one that no longer runs fails here, not at `make bench`.

Each bench/ module is one of: run here at its smoke size (`SMOKE`), run whole by another test
(`RUN_ELSEWHERE`), or a module the benchmarks import (`MODULES`); a new module in none of them fails
`test_every_bench_module_is_accounted_for`. bench/'s top level holds the shared harness and the record
format alone; every benchmark sits in the folder of its kind. The smoke runs take about 6 minutes on a
loaded 2-core machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.harness import BENCH, ROOT

# module -> its smoke arguments and the records it writes (bench/record.py) under --results
SMOKE: dict[str, tuple[list[str], list[str]]] = {
    "bench.peers.loader": (["--smoke"], ["loader"]),
    "bench.peers.train_step": (["--smoke"], ["train_step_b1"]),
    "bench.peers.trace": (["--smoke"], []),
    "bench.peers.forward": (["--smoke"], ["forward"]),
    "bench.peers.train_breakdown": (["--smoke"], []),
    "bench.peers.packing": (["--smoke"], ["packing"]),
    "bench.peers.dedup_stages": (["--smoke"], []),
    "bench.peers.audit": (["--smoke"], []),
    "bench.peers.stage1_plan": (["--smoke"], []),
    "bench.studies.leak_calibration": (["--smoke"], []),
    "bench.peers.beam_parity": (["--smoke"], []),
    "bench.peers.audit_mix": (["--smoke"], ["audit_mix"]),
    "bench.peers.audit_bucket": (["--smoke"], ["audit_bucket"]),
    "bench.peers.audit_near": (["--smoke"], ["audit_near"]),
    "bench.peers.leak_speed": (["--smoke"], ["leaks"]),
    "bench.peers.audit_dedup": (["--smoke"], ["audit_dedup"]),
    "bench.peers.dedup_rates": (["--smoke"], ["dedup_rates"]),
    "bench.peers.dedup_pool": (["--smoke"], ["dedup_pool"]),
    "bench.peers.dedup_beam": (["--smoke"], ["dedup_beam"]),
    "bench.peers.tokenizer_engines": (["--smoke"], ["tok-engines"]),
    "bench.peers.prepare": (
        ["--smoke", "--input-mb", "2"],
        ["tok"],
    ),  # against `dolma tokens` (its venv built on first use)
}
RUN_ELSEWHERE = {
    "bench.studies.memorization_power": "tests/bench/test_memorization_power.py::test_a_16x_dose_is_flagged_and_clean_is_not",
    "bench.peers.dedup": "tests/bench/test_dedup_bench.py::test_dedup_bench_tiny_olmax_side",
    "bench.studies.dedup_calibration": "tests/bench/test_dedup_bench.py::test_calibration_tiny_runs_olmax_and_meets_the_goals",
    "bench.chip.maxtext_peer": "tests/bench/test_maxtext_peer.py::test_maxtext_cpu_smoke",
    "bench.chip.tpu_mfu": "tests/bench/test_tpu_mfu.py::test_both_parts_run_on_a_cpu_and_merge_into_a_record",
    # in a venv holding only what the TPU machine holds, from a copy of the files a device call sends
    "bench.chip.tpu_seed": "tests/bench/test_tpu_seed.py::test_smoke_runs_in_a_venv_holding_only_what_the_device_holds",
    "bench.chip.tpu_eval": "tests/bench/test_tpu_eval.py::test_the_cpu_and_chip_parts_run_on_a_cpu_and_merge_into_a_record",
    "bench.chip.tpu_slice": "tests/bench/test_tpu_slice.py::test_the_chip_part_runs_on_a_cpu_and_merges_into_a_record",
    "bench.chip.tpu_train_curves": "tests/bench/test_tpu_train_curves.py::test_the_smoke_trains_three_runs_on_real_text_and_merges_a_record_and_a_plot",
}
MODULES = {
    "bench.harness",
    "bench.record",
    "bench.peers.engine_ceiling",  # bench.peers.prepare's ceiling, run as its own process
    "bench.peers.dedup_peer",  # what bench.peers.dedup runs in the peers' venv
    "bench.chip.tpu_seed_chip",  # what bench.chip.tpu_seed's child processes run
    "bench.chip.tpu_eval_steps",  # the steps bench.chip.tpu_eval times
    "bench.chip.tpu_train_corpus",  # the real text bench.chip.tpu_train_curves trains on
}
TOP_LEVEL = {"__init__.py", "harness.py", "record.py"}  # bench/'s own Python files
KINDS = {"peers", "studies", "chip", "setup", "results"}  # its folders (bench/out/ is git-ignored output)


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def test_every_bench_module_is_accounted_for() -> None:
    modules = {
        module_name(p) for p in BENCH.rglob("*.py") if p.name != "__init__.py" and "out" not in p.parts
    }
    listed = set(SMOKE) | set(RUN_ELSEWHERE) | MODULES
    assert modules - listed == set(), "a benchmark with no smoke run: add it to SMOKE"
    assert listed - modules == set(), "listed here but not in bench/"
    for module, test in RUN_ELSEWHERE.items():
        path, name = test.split("::")
        assert f"def {name}(" in (ROOT / path).read_text(), f"{module}: {test} is gone"


def test_bench_holds_the_harness_and_a_folder_per_kind() -> None:
    assert {p.name for p in BENCH.glob("*.py")} == TOP_LEVEL
    assert {p.name for p in BENCH.iterdir() if p.is_dir() and p.name not in ("out", "__pycache__")} == KINDS
    assert not list((BENCH / "setup").glob("*.py")) and list((BENCH / "setup").glob("*.sh"))


@pytest.mark.slow
@pytest.mark.parametrize("module", sorted(SMOKE))
def test_the_benchmark_runs_whole_at_its_smoke_size(module: str, tmp_path: Path) -> None:
    args, records = SMOKE[module]
    if "--smoke" in args:
        args = [*args, "--results", str(tmp_path)]
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=480,
    )
    assert proc.returncode == 0, (
        f"{module} {' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    )
    for name in records:
        rec = json.loads((tmp_path / f"{name}.json").read_text())
        assert rec["smoke"] is True and rec["figures"], f"{name}.json has no figures"
        assert all(t["values"] for t in rec["timings"].values())

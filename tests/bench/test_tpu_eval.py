"""bench/chip/tpu_eval.py without a chip: the whole 7B eval step compiled ahead of time for a v5e-8 host (it
fits, with the splash kernel), the committed record's summary, the summary and figures the parts merge
into, the device command, a chip row that hangs ended at its limit, and the cpu and chip parts' smoke on
this CPU merged into a record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.chip import tpu_eval
from olmax.train.plan import CHIPS

REPO = Path(__file__).resolve().parents[2]
LIBTPU = REPO / ".venv-libtpu"  # bench/setup/setup_libtpu.sh
RECORD = REPO / "bench" / "results" / "tpu_eval.json"
GIB = 2**30
V5E_HBM = CHIPS["v5e"].hbm_bytes


def run(*args: str, env: dict | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bench.chip.tpu_eval", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=REPO,
    )


@pytest.mark.slow
def test_the_7b_eval_step_compiles_for_a_v5e_8_host_and_fits(tmp_path):
    """The shipped olmo3_7b_stage1 model, all 32 layers, seq 8192, bf16, compiled here for v5e:2x4 on the
    mesh `--mesh auto` picks there (parameters split 8 ways, one row a chip): the attention is the Mosaic
    kernel (`auto` resolved for the mesh's platform, not this host's), and the per-chip plan holds the
    parameters' eighth and fits the chip's HBM. The real depth, because this plan is what the eval job
    runs: a scanned group of 4 layers compiles once, so 32 cost ~2.5 minutes here, not 8 times 4's."""
    assert (LIBTPU / "libtpu").is_dir(), "run bench/setup/setup_libtpu.sh (CI does)"
    out = tmp_path / "plan.json"
    env = {"PYTHONPATH": str(LIBTPU), "JAX_PLATFORMS": "", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}
    proc = run("--part", "plan", "--hosts", "v5e_8", "--no-chip-rows", "--out", str(out), env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (r,) = json.loads(out.read_text())["seven_b"]
    assert (r["topology"], r["layers"], r["seq"], r["dtype"]) == ("v5e:2x4", 32, 8192, "bfloat16"), r
    assert r["mesh"] == "1x8 (8 x TPU v5 lite)" and r["rows"] == 8, r
    assert r["kernel"] == "splash" and r["mosaic_calls"] == 4, r  # the scanned group's 4 layers
    from olmax.evals.eval_mesh import param_bytes
    from olmax.train.config import load_config

    assert r["argument_bytes"] >= param_bytes(load_config("olmo3_7b_stage1").model) / 8, r
    assert r["fits"] and r["plan_bytes"] < V5E_HBM, r["plan_bytes"] / GIB


def test_the_committed_record_has_the_real_7b_fitting_a_v5e_8_host_and_the_cpu_equality():
    rec = json.loads(RECORD.read_text())
    assert not rec["smoke"]
    s = rec["summary"]
    assert s["fits_7b_v5e_8"] is True and s["plans_7b"]["v5e_8"]["layers"] == 32
    assert s["plans_7b"]["v5e_8"]["plan_gib"] < V5E_HBM / GIB
    assert s["sharded_vs_single_max_rel_diff"] <= 1e-6 and s["checkpoint_resharded"] is True
    assert set(tpu_eval.SUMMARY_KEYS) <= set(s)


def part_files(tmp_path: Path) -> list[Path]:
    """Parts as the three commands write them, with made-up figures."""
    plan = {
        "part": "plan",
        "seven_b": [
            {
                "key": "v5e_8",
                "host": "v5e-8",
                "topology": "v5e:2x4",
                "layers": 32,
                "mesh": "1x8 (8 x TPU v5 lite)",
                "rows": 8,
                "plan_bytes": 7 * GIB,
                "hbm_bytes": V5E_HBM,
                "kernel": "splash",
                "fits": True,
            },
            {
                "key": "v5e_4",
                "host": "v5e-4",
                "topology": "v5e:2x2",
                "layers": 32,
                "fits": False,
                "error": "RESOURCE_EXHAUSTED",
            },
        ],
        "chip_rows": [],
    }
    cpu = {
        "part": "cpu",
        "runs": [],
        "steps": 4,
        "dtype": "float32",
        "max_rel_diff": 2e-7,
        "resharded": ["1->8"],
    }

    def row(name, kind, vocab, tps, mfu):
        spec = {"name": name, "kind": kind, "rows": 1, "vocab": vocab}
        times = {"score_wall_s": [1.0, 1.1]} if kind == "eval" else {"step_s": [0.4, 0.41]}
        extra = {"mfu_kernel": mfu} if kind == "eval" else {"remat": "matmuls", "refused": []}
        return {
            "spec": spec,
            "status": "ok",
            "kernel": "splash",
            "tokens_per_s": tps,
            "mfu": mfu,
            **times,
            **extra,
        }

    chip = {
        "part": "chip",
        "rows": [
            row("eval_b1", "eval", 1024, [50e3, 52e3], [0.50, 0.52]),
            row("eval_b4", "eval", 1024, [60e3, 62e3], [0.60, 0.62]),
            row("eval_real_vocab_b1", "eval", 100_278, [90e3], [0.40]),
            row("train_b1", "train", 1024, [20e3, 21e3], [0.55, 0.56]),
            {
                "spec": {"name": "eval_b2", "kind": "eval", "rows": 2, "vocab": 1024},
                "status": "oom",
                "error": "x",
            },
        ],
    }
    paths = []
    for part in (plan, cpu, chip):
        paths.append(tmp_path / f"{part['part']}.json")
        paths[-1].write_text(json.dumps(part))
    return paths


def test_the_summary_reads_each_part_and_compares_the_eval_row_of_the_trained_model(tmp_path):
    """eval_over_train_tokens_per_s and eval_mfu come from the fastest eval row of the train row's model
    (the real-vocabulary row is another model); a missing part leaves its keys null."""
    paths = part_files(tmp_path)
    args = tpu_eval.parse_args(["--merge", *map(str, paths), "--smoke", "--results", str(tmp_path / "r")])
    rec = json.loads(tpu_eval.merge(args.merge, args).read_text())
    s = rec["summary"]
    assert s["fits_7b_v5e_8"] is True and s["plans_7b"]["v5e_4"]["fits"] is False
    assert s["sharded_vs_single_max_rel_diff"] == 2e-7 and s["checkpoint_resharded"] is True
    assert s["eval_row"] == "eval_b4" and s["eval_over_train_tokens_per_s"] == pytest.approx(61e3 / 20.5e3)
    assert s["eval_mfu"] == pytest.approx(0.61) and s["eval_mfu_real_vocab"] == pytest.approx(0.40)
    assert s["train_remat"] == "matmuls" and s["train_source"] == "this chip part"
    assert rec["figures"]["eval_over_train_tokens_per_s"]["train_source"] == "this chip part"
    kept = tmp_path / "r" / "tpu_eval"  # the parts beside the record, as the record names them
    assert {p.name for p in kept.glob("*.json")} == {"plan.json", "cpu.json", "chip.json"}
    assert json.loads((kept / "chip.json").read_text()) == json.loads(paths[2].read_text())
    assert rec["figures"]["plan_7b_v5e_8"]["median"] == 7.0
    assert rec["figures"]["mfu_eval_b4"]["median"] == pytest.approx(61.0)
    assert "tokens_per_s_eval_b2" not in rec["figures"]  # an out-of-memory row is a table line only
    only_plan = tpu_eval.parse_args(["--merge", str(paths[0]), "--smoke", "--results", str(tmp_path / "p")])
    s = json.loads(tpu_eval.merge(only_plan.merge, only_plan).read_text())["summary"]
    assert s["fits_7b_v5e_8"] is True and s["eval_mfu"] is None and s["checkpoint_resharded"] is None


def test_the_device_command_fits_and_carries_only_ignored_folders():
    proc = run("--device-command")
    assert proc.returncode == 0, proc.stderr
    carry_line, command = proc.stdout.splitlines()[0], "\n".join(proc.stdout.splitlines()[1:])
    carry = json.loads(carry_line.removeprefix("carry: "))
    assert len(command) <= 2000 and len(carry) <= 8
    assert "tpu_wheels.sh install" in command and "--part chip" in command and "$OUT/chip.json" in command
    assert command in (REPO / "docs" / "evals.md").read_text()  # the docs give it whole, as it is
    for path in carry:  # a carried folder must be git-ignored, or it would travel twice
        assert subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO).returncode == 0, path


def test_a_chip_row_that_hangs_is_ended_at_its_limit_and_the_rows_after_it_still_run(tmp_path, monkeypatch):
    """The train row and the eval rows run in processes of their own: one that never returns is killed at
    its rows' limit and each of its rows recorded as a timeout, the next process still gets its turn, and
    none starts once --budget-s is spent."""
    import bench.harness

    def hangs(module, *args, python=None):  # every row's child sleeps past its limit
        return [sys.executable, "-c", "import time; time.sleep(60)"]

    monkeypatch.setattr(bench.harness, "module_command", hangs)
    monkeypatch.setattr(tpu_eval, "ROW_LIMIT_S", {"train": 1.0, "eval": 1.0})
    out = tmp_path / "chip.json"
    args = tpu_eval.parse_args(["--part", "chip", "--out", str(out), "--budget-s", "60"])
    part = tpu_eval.part_chip(args)
    assert [r["spec"]["name"] for r in part["rows"]] == [r["name"] for r in tpu_eval.CHIP_ROWS]
    assert all(r["status"] == "timeout" and r["row_wall_s"] < 30 for r in part["rows"]), part["rows"]
    assert len({r["row_wall_s"] for r in part["rows"]}) == len(tpu_eval.ROW_GROUPS)  # one process a group
    assert json.loads(out.read_text())["rows"] == part["rows"]  # rewritten after each process
    args = tpu_eval.parse_args(["--part", "chip", "--out", str(out), "--budget-s", "0"])
    assert {r["status"] for r in tpu_eval.part_chip(args)["rows"]} == {"skipped"}


@pytest.mark.slow
def test_the_cpu_and_chip_parts_run_on_a_cpu_and_merge_into_a_record(tmp_path):
    """--smoke: 2-step runs written on 1 and 2 devices scored on 1 and 2 (CE within 1e-6 of one device),
    and the chip rows on the CPU (splash interpreted): every row measured, the record's summary filled."""
    cpu, chip = tmp_path / "cpu.json", tmp_path / "chip.json"
    proc = run("--part", "cpu", "--smoke", "--out", str(cpu))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    part = json.loads(cpu.read_text())
    assert part["max_rel_diff"] <= 1e-6 and set(part["resharded"]) == {"1->2", "2->1"}, part
    proc = run("--part", "chip", "--smoke", "--out", str(chip), env={"JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads(chip.read_text())["rows"]
    assert [r["spec"]["name"] for r in rows] == ["train_b1", "eval_b1", "eval_b4"]
    assert all(r["status"] == "ok" and r["kernel"] == "splash" for r in rows), rows
    assert rows[0]["plan_bytes"] > 0 and len(rows[0]["losses"]) == 2 + 2  # its compiled step, run 4 times
    proc = run("--merge", str(cpu), str(chip), "--smoke", "--results", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    s = json.loads((tmp_path / "tpu_eval.json").read_text())["summary"]
    assert s["checkpoint_resharded"] is True and s["eval_over_train_tokens_per_s"] > 0 and s["eval_mfu"] > 0
    assert s["train_source"] == "this chip part"
    assert s["fits_7b_v5e_8"] is None  # no plan part merged

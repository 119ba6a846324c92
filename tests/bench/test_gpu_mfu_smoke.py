"""bench/gpu_mfu.py on a CPU: `--smoke` prints its table and the last line; without it, a clear refusal."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_mfu.py"
LAST_LINE = re.compile(r"^gpu MFU \(olmo3_7b shapes, best row\) = \d+\.\d%$")
NUM = r"[-+0-9.e]+%?"
# layers batch seq remat attn, then 8 numbers (compile_s .. MFU_mm), plan_GiB, peak_GiB (n/a on a CPU), loss
ROW = re.compile(rf"^\s*(\d+)\s+1\s+256\s+(dots|full)\s+xla(\s+{NUM}){{8}}\s+{NUM}\s+(n/a|{NUM})\s+({NUM})$")


def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout
    )


def rows(stdout: str) -> list[re.Match]:
    return [m for m in map(ROW.match, stdout.splitlines()) if m]


def test_smoke_prints_a_row_and_the_last_line():
    proc = run("--smoke", "--remat", "full")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert LAST_LINE.match(lines[-1]), (
        f"last line {lines[-1]!r} is not `gpu MFU (olmo3_7b shapes, best row) = NN.N%`"
    )
    assert any(line.split()[:3] == ["layers", "batch", "seq"] for line in lines), proc.stdout
    found = rows(proc.stdout)
    assert [(m.group(1), m.group(2)) for m in found] == [("2", "full")], proc.stdout
    # a real step ran: the first loss of a fresh model is about ln(vocab 1,000) = 6.91
    assert abs(float(found[0].group(5)) - math.log(1000)) < 0.5, proc.stdout
    assert "LM head share of model FLOPs: 2 layers 33.9%" in proc.stdout


def test_refuses_without_a_gpu_unless_smoke():
    proc = run(timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "not a GPU" in proc.stderr and "--smoke" in proc.stderr
    assert "gpu MFU" not in proc.stdout


@pytest.mark.slow
def test_smoke_two_layer_counts_extrapolate_and_write_json(tmp_path):
    out = tmp_path / "gpu_mfu.json"
    proc = run("--smoke", "--layers", "2,4", "--json", str(out), timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [(m.group(1), m.group(2)) for m in rows(proc.stdout)] == [
        ("2", "full"),
        ("2", "dots"),
        ("4", "full"),
        ("4", "dots"),
    ], proc.stdout
    for remat in ("dots", "full"):
        assert f"extrapolated 32-layer step (remat {remat}, xla, batch 1 x 256; layers 2,4)" in proc.stdout
    assert LAST_LINE.match(proc.stdout.strip().splitlines()[-1])
    saved = json.loads(out.read_text())
    assert [r["status"] for r in saved["rows"]] == ["ok"] * 4
    assert all(len(r["step_times"]) == 3 and r["mfu"] > 0 for r in saved["rows"])
    assert saved["probe"]["platform"] == "cpu"


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_mfu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_table_logic_with_fake_rows(monkeypatch, capsys):
    """The parent's GPU path on 7B shapes with fake children: OOM skips, extrapolation, the best row."""
    from olmax.model.config import olmo3_7b
    from olmax.model.flops import forward_flops

    gpu_mfu = load_script()
    gib = 2**30
    step_s = {4: 0.17, 16: 0.53}  # 0.05 s + 30 ms per layer

    def fake_child(kind, spec, timeout, env):
        if kind == "probe":
            return {
                "platform": "gpu",
                "device_kind": "NVIDIA H200",
                "jax": "0",
                "n_devices": 1,
                "bytes_limit": 133 * gib,
                "matmul_flops": 800e12,
            }
        assert spec["seq"] == 8192 and spec["attention"] == "cudnn" and not spec["smoke"]
        if spec["layers"] >= 24:
            return {"status": "oom", "error": "XLA's buffer plan needs 150.0 GiB"}
        return {
            "status": "ok",
            "attention_resolved": "cudnn",
            "compile_s": 30.0,
            "losses": [11.6] * 7,
            "step_times": [step_s[spec["layers"]]] * 5,
            "plan_bytes": 100 * gib,
            "peak_bytes": (10 + 4 * spec["layers"]) * gib,
        }

    monkeypatch.setattr(gpu_mfu, "run_child", fake_child)
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")  # main() sets it for itself; restore it afterwards
    assert gpu_mfu.main([]) == 0
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    assert sum("SKIPPED: 24 layers already ran out of memory" in line for line in lines) == 2, out
    assert sum(" OOM: " in line for line in lines) == 2, out
    full = 3 * forward_flops(olmo3_7b(), 8192).total
    best = 3 * forward_flops(olmo3_7b(n_layers=4), 8192).total / 0.17 / 989e12  # the 4-layer row wins
    assert lines[-1] == f"gpu MFU (olmo3_7b shapes, best row) = {100 * best:.1f}%"
    t32 = 0.05 + 0.03 * 32
    assert (
        f"extrapolated 32-layer step (remat full, cudnn, batch 1 x 8192; layers 4,16): 0.050 s + 30.0 ms/layer "
        f"-> {t32:.3f} s, MFU {full / t32 / 989e12:.1%}"
    ) in out
    assert "peak memory ~138.0 GiB (> the 133.0 GiB limit)" in out
    assert "full 32-layer model: 7.30B params" in out

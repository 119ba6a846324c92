"""bench/chip/tpu_mfu.py without a chip: the TPU step compiled ahead of time for a v5e (the splash kernel really
lowered, the memory plan within what the remat policy keeps), the smoke of both parts on a CPU, and the
record's summary from the parts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.chip import tpu_mfu
from bench.harness import ROOT

LIBTPU = ROOT / ".venv-libtpu"  # bench/setup/setup_libtpu.sh
MAXTEXT_PYTHON = ROOT / ".venv-maxtext" / "bin" / "python"  # bench/setup/maxtext_setup.sh fetch
V5E_BYTES_LIMIT = (
    16_909_336_064  # what the v5e chip's JAX reports as bytes_limit (bench/results/tpu_mfu.json)
)
GIB = 2**30


def run(*args: str, env: dict | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bench.chip.tpu_mfu", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
    )


def saved_bytes_per_token(model_cfg) -> int:
    """What the remat policy keeps per layer and token (bf16), plus the layer input the scan carries."""
    from olmax.model.remat import saved_names

    width = {"gate": model_cfg.mlp_hidden, "up": model_cfg.mlp_hidden}
    names = saved_names(model_cfg.remat) or ()
    per = sum(2 * width.get(n, model_cfg.d_model) for n in names)
    per += 4 * model_cfg.n_heads if "context" in names else 0  # the log-sum-exp, fp32 per head
    return per + 2 * model_cfg.d_model


@pytest.mark.slow
def test_the_v5e_step_compiles_here_with_the_kernel_and_a_plan_that_fits(tmp_path):
    """The real widths (d 4096, 32 x 128, SwiGLU 11,008; one sliding-window layer, seq 2048) compiled for
    v5e:1x1 with splash and remat `matmuls`: the layer's attention is the Mosaic kernel (forward + fused
    backward, not recomputed), and the plan is the state (12 bytes a parameter), the fp32 gradients (4),
    what the policy keeps and at most 1 GiB more, under the chip's limit. One layer, as a v5e compile
    here takes ~45 s a layer; the 4-layer block at seq 8192 is `bench/chip/tpu_mfu.py --plan`."""
    assert (LIBTPU / "libtpu").is_dir(), "run bench/setup/setup_libtpu.sh (CI does)"
    out = tmp_path / "plan.json"
    proc = run(
        "--plan",
        "--rows",
        "splash_matmuls",
        "--seq",
        "2048",
        "--layers",
        "1",
        "--out",
        str(out),
        env={"PYTHONPATH": str(LIBTPU), "ALLOW_MULTIPLE_LIBTPU_LOAD": "1", "JAX_PLATFORMS": ""},
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (res,) = json.loads(out.read_text())
    spec = res["spec"]
    model_cfg, optim_cfg = tpu_mfu.model_configs(spec, smoke=False)
    assert (model_cfg.d_model, model_cfg.n_heads, model_cfg.remat) == (4096, 32, "matmuls")
    assert res["tpu_custom_calls"] == 2 * spec["layers"], res  # Mosaic, not interpret mode; no recompute
    from olmax.model.transformer import count_params

    params = count_params(model_cfg, padded=True)
    activations = saved_bytes_per_token(model_cfg) * spec["seq"] * spec["batch"] * spec["layers"]
    bound = 16 * params + activations + GIB
    assert res["plan_bytes"] <= bound, (res["plan_bytes"] / GIB, bound / GIB)
    assert res["plan_bytes"] >= 16 * params, res  # the state and the gradients are all there
    assert res["plan_bytes"] < V5E_BYTES_LIMIT


@pytest.mark.slow
def test_both_parts_run_on_a_cpu_and_merge_into_a_record(tmp_path):
    assert MAXTEXT_PYTHON.exists(), "run bench/setup/maxtext_setup.sh fetch (CI does)"
    peer = tmp_path / "peer.json"
    proc = run("--part", "peer", "--smoke", "--rows", "splash_matmuls", "--out", str(peer), timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    part = json.loads(peer.read_text())
    (maxtext,) = part["maxtext"]
    assert maxtext["setting"] == "cpu" and maxtext["step_s"] > 0, maxtext
    (row,) = part["olmax"]["rows"]
    assert row["status"] == "ok" and row["kernel"] == "splash", row
    proc = run("--merge", str(peer), "--smoke", "--results", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rec = json.loads((tmp_path / "tpu_mfu.json").read_text())
    summary = rec["summary"]
    assert summary["block_row"] == "splash_matmuls"
    assert summary["vs_maxtext"] == pytest.approx(maxtext["step_s"] / row["step_s"])
    assert summary["block_mfu"] == pytest.approx(row["flops_per_step"] / row["step_s"] / tpu_mfu.PEAK_V5E)
    assert rec["sides"]["maxtext"]["setting"].startswith("cpu: ")


def test_the_block_row_is_the_fastest_comparable_row():
    def r(name, step, **spec):
        base = {"layers": 4, "batch": 1, "heads": "32x128", "vocab": 1024, "name": name}
        return {"status": "ok", "step_s": step, "spec": {**base, **spec}}

    rows = [
        r("a", 0.5),
        r("b", 0.4),
        r("c", 0.1, batch=2),
        r("d", 0.1, heads="16x256"),
        r("e", 0.1, vocab=100_278),
        {"status": "oom", "spec": {"name": "f"}},
    ]
    assert tpu_mfu.best_block_row(rows)["spec"]["name"] == "b"
    assert tpu_mfu.best_block_row(rows[2:]) is None


def test_rows_are_named_once_and_select_rejects_unknown_names():
    names = [r["name"] for r in tpu_mfu.OLMAX_ROWS]
    assert len(names) == len(set(names))
    assert [r["name"] for r in tpu_mfu.select_rows("splash_full,xla_full")] == ["splash_full", "xla_full"]
    with pytest.raises(SystemExit, match="unknown row"):
        tpu_mfu.select_rows("nope")


def test_a_device_call_takes_its_share_of_the_olmax_part(tmp_path, monkeypatch):
    """--no-rows: the sweep alone; --no-sweep --rows: those rows alone (a call of 10 minutes holds one share)."""
    monkeypatch.setattr(tpu_mfu, "chip_facts", lambda: {})
    monkeypatch.setattr(tpu_mfu, "matmul_peak", lambda n: 1.0)
    monkeypatch.setattr(tpu_mfu, "attention_sweep", lambda args: [{"kernel": "splash"}])
    ran: list[list[str]] = []
    monkeypatch.setattr(
        tpu_mfu, "run_rows", lambda specs, *rest: ran.append([s["name"] for s in specs]) or [{"status": "ok"}]
    )
    out = str(tmp_path / "olmax.json")
    part = tpu_mfu.part_olmax(tpu_mfu.parse_args(["--part", "olmax", "--no-rows", "--out", out]))
    assert part["attention"] == [{"kernel": "splash"}] and "rows" not in part and ran == []
    args = tpu_mfu.parse_args(["--part", "olmax", "--no-sweep", "--rows", "splash_matmuls", "--out", out])
    part = tpu_mfu.part_olmax(args)
    assert "attention" not in part and part["rows"] == [{"status": "ok"}] and ran == [["splash_matmuls"]]


def test_the_device_commands_in_tpu_md_are_whole():
    """Each device command docs/tpu.md gives installs the train path, puts it and the checkout on PYTHONPATH,
    then runs a chip module with options that module has, writing under $OUT."""
    import re
    import shlex

    text = (ROOT / "docs" / "tpu.md").read_text()
    commands = [line for line in text.splitlines() if line.startswith("set -o pipefail;")]
    assert len(commands) == 3, commands
    for command in commands:
        assert "bash bench/setup/tpu_wheels.sh install /tmp/site" in command, command
        assert "export PYTHONPATH=$PYTHONPATH:/tmp/site:$PWD;" in command, command
        run = shlex.split(command.rsplit("export PYTHONPATH", 1)[1].split(";", 1)[1].split("2>&1")[0])
        assert run[:2] == ["python3", "-m"] and "$OUT/" in run[run.index("--out") + 1], run
        source = (ROOT / Path(*run[2].split("."))).with_suffix(".py").read_text()
        for flag in (a for a in run[3:] if a.startswith("--")):
            assert re.search(rf"[\"']{flag}[\"']", source), f"{run[2]} has no {flag}"
        if "--part peer" in command:
            assert "bash bench/setup/maxtext_setup.sh install" in command, command

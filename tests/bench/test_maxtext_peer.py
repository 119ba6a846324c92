"""bench/chip/maxtext_peer.py: its reading of MaxText's log, its rows' overrides, its errors as records, and (slow)
MaxText's own OLMo 3 train step end to end on a CPU in the venv bench/setup/maxtext_setup.sh builds."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from bench.chip import maxtext_peer as mp
from bench.harness import ROOT

VENV = ROOT / ".venv-maxtext"

# Lines as MaxText 0.2.5's train loop logs them (absl format), with the ones that must not be mistaken
# for figures: a config line naming `steps`, and the eval line that also carries `seconds:`.
TRAIN_LOG = """\
I1206 08:20:55.275269 139660365843328 pyconfig.py:591] Config param steps: 8
I1206 08:20:55.276607 139660365843328 max_utils.py:835] System Information: Jax Version: 0.10.2
@@result {"memory": {"argument_size_in_bytes": 9815678464, "output_size_in_bytes": 9815521280, \
"alias_size_in_bytes": 9815514624, "temp_size_in_bytes": 7235096576, "generated_code_size_in_bytes": 1}}
I1206 08:21:13.579255 139660365843328 max_utils.py:823] [train] Total estimated memory size: 15.9 GB, \
estimated output size: 9.1 GB, estimated temp size: 6.7 GB, estimated argument size: 9.1 GB, Estimated \
host temp size: 0.0 GB.
Per train step:
 Total TFLOPs: 60.12
I1206 08:21:14.130053 139660365843328 metric_logger.py:265] completed step: 0, seconds: 41.250, \
TFLOP/s/device: 1.4, Tokens/s/device: 198.6, total_weights: 8192, loss: 7.1
I1206 08:21:14.151234 139660365843328 metric_logger.py:265] completed step: 1, seconds: 0.901, loss: 7.0
I1206 08:21:14.175915 139660365843328 metric_logger.py:265] completed step: 2, seconds: 0.400, loss: 6.9
I1206 08:21:14.193069 139660365843328 metric_logger.py:265] completed step: 3, seconds: 0.388, loss: 6.8
I1206 08:21:14.211013 139660365843328 metric_logger.py:265] completed step: 4, seconds: 0.386, loss: 6.7
I1206 08:21:14.211013 139660365843328 metric_logger.py:265] eval metrics after step: 4, seconds: 9.000
I1206 08:21:14.229013 139660365843328 metric_logger.py:265] completed step: 5, seconds: 0.385, loss: 6.6
@@result {"facts": {"maxtext_version": "0.2.5", "tokamax_version": "0.0.12", "device_kind": "TPU v5 lite"}}
"""


def test_parse_log_reads_steps_memory_and_facts():
    got = mp.parse_log(TRAIN_LOG)
    assert got["steps_s"] == [41.25, 0.901, 0.4, 0.388, 0.386, 0.385]
    assert got["timed_steps"] == [3, 4, 5]
    assert got["step_s"] == pytest.approx(0.386)
    # the exact bytes win over MaxText's one-decimal line: args + outputs - aliased + temporaries
    assert got["hbm_estimate_gib"] == pytest.approx(15.88, abs=1e-3)
    assert got["memory_bytes"]["temp_size_in_bytes"] == 7235096576
    assert got["maxtext_tflops_per_step"] == 60.12
    assert got["jax_version"] == "0.10.2"
    assert got["device_kind"] == "TPU v5 lite" and got["maxtext_version"] == "0.2.5"


def test_parse_log_falls_back_to_maxtexts_lines():
    no_marker = "\n".join(line for line in TRAIN_LOG.splitlines() if '@@result {"memory"' not in line)
    assert mp.parse_log(no_marker)["hbm_estimate_gib"] == 15.9
    aot = (
        "Memory analysis: CompiledMemoryStats(generated_code_size_in_bytes=48, argument_size_in_bytes="
        f"{3 * 2**30}, output_size_in_bytes={3 * 2**30}, alias_size_in_bytes={3 * 2**30}, "
        f"temp_size_in_bytes={2**29}, host_temp_size_in_bytes=0)"
    )
    got = mp.parse_log(aot)
    assert got["hbm_estimate_gib"] == 3.5 and "steps_s" not in got
    assert mp.parse_log("completed step: 0, seconds: 9.0\ncompleted step: 1, seconds: 1.0") == {
        "steps_s": [9.0, 1.0]
    }


def test_overrides_of_each_setting():
    full = mp.overrides_for("full", layers=4, vocab=1024, seq=8192, batch=2, steps=8)
    for arg in (
        "model_name=olmo3-7b-pt",
        "override_model_config=true",
        "packing=false",
        "dataset_type=synthetic",
    ):
        assert arg in full
    assert "per_device_batch_size=2" in full and "remat_policy=full" in full
    launcher = mp.overrides_for("launcher", layers=4, vocab=1024, seq=8192, batch=1, steps=8)
    for arg in (
        "remat_policy=custom",
        "mlpwo=device",
        "use_tokamax_splash=True",
        "sa_block_kv_dkv_compute=2048",
    ):
        assert arg in launcher
    assert mp.SETTINGS["launcher"].env == {"LIBTPU_INIT_ARGS": "--xla_tpu_scoped_vmem_limit_kib=65536"}
    # each MaxText key once: a repeated key would leave which value wins to MaxText's parser
    for args in (full, launcher, mp.overrides_for("cpu", 4, 256, 128, 1, 6)):
        keys = [a.split("=", 1)[0] for a in args]
        assert len(keys) == len(set(keys)), keys
    with pytest.raises(ValueError, match="unknown setting"):
        mp.overrides_for("fast", 4, 1024, 8192, 1, 8)


def test_child_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "--xla_a=1")
    monkeypatch.setenv("PYTHONPATH", "/jax/here")
    monkeypatch.setenv(
        "JAX_NUMPY_RANK_PROMOTION", "raise"
    )  # olmax's tests set it; MaxText needs JAX's default
    env = mp.child_environment("launcher", {"TPU_X": "1"}, tmp_path)
    assert env["LIBTPU_INIT_ARGS"] == "--xla_a=1 --xla_tpu_scoped_vmem_limit_kib=65536"
    # the JAX already there stays first; then this checkout (the child is this module), then MaxText
    assert env["PYTHONPATH"] == os.pathsep.join(["/jax/here", str(ROOT), str(tmp_path)])
    assert env["TPU_X"] == "1" and "JAX_NUMPY_RANK_PROMOTION" not in env
    assert mp.child_environment("cpu", None, tmp_path)["JAX_PLATFORMS"] == "cpu"


def test_failures_come_back_as_records(tmp_path, monkeypatch):
    monkeypatch.delenv("MAXTEXT_SITE", raising=False)
    monkeypatch.setattr(mp, "DEVICE_SITE", tmp_path / "absent")
    monkeypatch.setattr(mp, "CPU_SITE", tmp_path / "absent")
    assert "at least 4" in mp.run_peer("cpu", 4, 256, 128, 1, 3)["error"]
    rec = mp.run_peer("cpu", 4, 256, 128, 1, 6)
    assert "not installed" in rec["error"] and rec["overrides"][0] == "model_name=olmo3-7b-pt"
    # a folder without MaxText: the child fails at its import; the parent reports, it does not raise
    empty = tmp_path / "site"
    empty.mkdir()
    rec = mp.run_peer("cpu", 4, 256, 128, 1, 6, timeout_s=120, site=empty)
    assert rec["error"].startswith("MaxText exited with status"), rec
    assert "No module named" in rec["log_tail"], rec["log_tail"]
    rec = mp.run_peer("cpu", 4, 256, 128, 1, 6, timeout_s=0.2, site=empty)
    assert rec["error"] == "timed out after 0.2 s" and "log_tail" in rec
    # a chip still held by the program before: one more try, then the error
    busy = tmp_path / "busy"
    busy.write_text("#!/bin/sh\necho 'Internal error when accessing libtpu multi-process lockfile'\nexit 1\n")
    busy.chmod(0o755)
    monkeypatch.setattr(mp, "BUSY_WAIT_S", 0.0)
    rec = mp.run_peer("full", 4, 1024, 8192, 1, 8, timeout_s=30, site=empty, python=str(busy))
    assert rec["retried_busy_chip"] and rec["error"] == "MaxText exited with status 1", rec
    assert "lockfile" in rec["log_tail"]


@pytest.mark.slow
@pytest.mark.skipif(
    not (VENV / "bin" / "python").exists(), reason="no MaxText venv: bench/setup/maxtext_setup.sh fetch"
)
def test_maxtext_cpu_smoke(tmp_path):
    """MaxText's own train loop, tiny OLMo 3 on the CPU, through the command line as CI runs it."""
    out = tmp_path / "row.json"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MAXTEXT_SITE")}
    proc = subprocess.run(
        [str(VENV / "bin" / "python"), "-m", "bench.chip.maxtext_peer", "--setting", "cpu"]
        + ["--site", str(VENV / "site"), "--json", str(out), "--timeout-s", "150"],
        capture_output=True,
        text=True,
        timeout=200,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    rec = json.loads(out.read_text())
    assert "error" not in rec, rec.get("log_tail")
    assert rec["setting"] == "cpu" and rec["mode"] == "train"
    assert rec["overrides"] == mp.overrides_for("cpu", **mp.CPU_SHAPES)
    assert rec["command"][-len(rec["overrides"]) :] == rec["overrides"]
    assert len(rec["steps_s"]) == mp.CPU_SHAPES["steps"] and all(s > 0 for s in rec["steps_s"])
    assert rec["timed_steps"] == list(range(3, mp.CPU_SHAPES["steps"])) and rec["step_s"] > 0
    assert rec["hbm_estimate_gib"] > 0 and rec["memory_bytes"]["temp_size_in_bytes"] > 0
    assert rec["maxtext_version"] == "0.2.5" and rec["tokamax_version"] == "0.0.12"
    assert rec["jax_version"] == "0.10.2" and rec["device_kind"] == "cpu"
    assert "maxtext overrides: " + " ".join(rec["overrides"]) in proc.stdout
    assert proc.stdout.rstrip().splitlines()[-1].startswith("maxtext cpu (train): ")

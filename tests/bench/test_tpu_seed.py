"""bench/chip/tpu_seed.py (with bench/chip/tpu_seed_chip.py) and bench/setup/tpu_wheels.sh without a chip: the fp32 KL it computes on the device against a
float64 reference, the device command and what it carries, the seed's train step and parity forwards
compiled for a v5e (they fit), and the whole smoke run in a venv that holds only what the device will hold
(its JAX stack, the index packages and the carried wheels named by tpu_wheels.sh), from a copy of exactly
the files a device call sends."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.chip import tpu_seed, tpu_seed_chip
from bench.harness import ROOT

WHEELS_SH = ROOT / "bench" / "setup" / "tpu_wheels.sh"
STANDIN = ROOT / ".venv-tpu-seed"  # bench/setup/tpu_wheels.sh fetch


def kl_naive(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """KL(softmax x || softmax y) in float64 as written: sum p (log p - log q)."""
    x, y = x.astype(np.float64), y.astype(np.float64)
    lp = x - x.max(-1, keepdims=True)
    lp -= np.log(np.exp(lp).sum(-1, keepdims=True))
    lq = y - y.max(-1, keepdims=True)
    lq -= np.log(np.exp(lq).sum(-1, keepdims=True))
    return (np.exp(lp) * (lp - lq)).sum(-1)


def kl_reference(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The same in float64 through the identity KL = E[d] + log E[e^-d] (d = x - y, E over softmax x),
    with expm1 / log1p: no term of the logits' size cancels, so it stays exact where `kl_naive`'s float64
    loses ~1e-15 of the logits in each log-probability (a fifth of a 1e-12 KL)."""
    x, y = x.astype(np.float64), y.astype(np.float64)
    p = np.exp(x - x.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    d = x - y
    r = (p * (np.expm1(-d) + d)).sum(-1)
    u = r - (p * d).sum(-1)
    return r + (np.log1p(u) - u)


def test_the_reference_is_the_kl():
    rng = np.random.default_rng(1)
    x = 4 * rng.standard_normal((8, 3000))
    y = x + 0.3 * rng.standard_normal((8, 3000))
    np.testing.assert_allclose(kl_reference(x, y), kl_naive(x, y), rtol=1e-9)


@pytest.mark.parametrize("scale", [1e-6, 1e-4, 1e-2])
def test_fp32_kl_matches_float64_at_fp32_and_bf16_sized_differences(scale):
    """The device's fp32 KL against float64, where the candidate differs by fp32 rounding (KL ~1e-10) up to
    bf16's (KL ~1e-2): within 1e-4 of itself; top-1, max |d|, cross-entropy and entropy too."""
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    L, V = 64, 5000
    x = (4 * rng.standard_normal((L, V))).astype(np.float32)
    x[np.arange(L), rng.integers(0, V, L)] += 12  # peaked, as a trained model's
    y = (x + scale * np.abs(x).max() * rng.standard_normal((L, V))).astype(np.float32)
    t = rng.integers(0, V, L).astype(np.int32)
    stats = tpu_seed_chip.kl_stats_fn(16)(jnp.asarray(x), jnp.asarray(y), jnp.asarray(t))
    kl, top1, dmax, ce_x, ce_y, ent = (np.asarray(a, np.float64) for a in stats)
    ref = kl_reference(x, y)
    assert ref.min() > 0
    np.testing.assert_allclose(kl, ref, rtol=1e-4)
    assert np.array_equal(top1, x.argmax(-1) == y.argmax(-1))
    np.testing.assert_allclose(dmax, np.abs(x.astype(np.float64) - y).max(-1), rtol=1e-6)
    lse = np.log(np.exp(x.astype(np.float64) - x.max(-1, keepdims=True)).sum(-1)) + x.max(-1)
    np.testing.assert_allclose(ce_x, lse - x[np.arange(L), t], rtol=1e-5)
    p = np.exp(x.astype(np.float64) - lse[:, None])
    np.testing.assert_allclose(ent, -(p * np.log(p)).sum(-1), rtol=1e-3)  # 6e-4 nats here: fp32 sum of p
    assert np.all(ce_y > 0)


def test_compute_line_and_report_lines_are_read_from_the_run_log():
    lines = [
        "noise",
        "olmax train: initialised from scratch; 1 devices (tpu), mesh data=1 x fsdp=1; 4 microbatch(es) of 1",
        "olmax train: 1 x TPU v5 lite (tpu); attention splash (1024x1024 tiles, fused backward); remat matmuls "
        "(keeps q, k; the rest recomputed); compute bfloat16",
        "olmax train: done",
        "  steps        0 -> 30 (30 trained)",
        "W1206 a warning",
    ]
    got = tpu_seed.compute_line(lines)
    assert got["device"] == "1 x TPU v5 lite (tpu)"
    assert got["attention"].startswith("splash (1024x1024 tiles")
    assert got["remat"].startswith("matmuls")
    assert got["compute"] == "bfloat16"
    assert tpu_seed.olmax_lines(lines) == lines[1:5]
    assert tpu_seed.compute_line(["olmax train: done"]) == {"compute_line": None}


def test_arguments_default_by_size_and_refuse_a_kill_after_the_last_step():
    a = tpu_seed.parse_args([])
    assert (a.steps, a.every, a.parity_len, a.parity_seqs) == (30, 10, 8192, 4)
    assert a.parts == list(tpu_seed.PARTS) and a.variants == list(tpu_seed.VARIANTS)
    s = tpu_seed.parse_args(["--smoke", "--parts", "train,resume"])
    assert (s.steps, s.every, s.parity_len) == (6, 3, 256) and s.parts == ["train", "resume"]
    for bad in (["--every", "30"], ["--parts", "train,evals"], ["--variants", "fp16"]):
        with pytest.raises(SystemExit):
            tpu_seed.parse_args(bad)


def test_the_device_command_fits_and_carries_only_ignored_folders():
    out = subprocess.run(
        ["bash", str(WHEELS_SH), "command"], capture_output=True, text=True, check=True
    ).stdout
    carry_line, command = out.splitlines()[0], "\n".join(out.splitlines()[1:])
    carry = json.loads(carry_line.removeprefix("carry: "))
    assert len(command) <= 2000 and len(carry) <= 8
    assert "tpu_wheels.sh install" in command and "-m bench.chip.tpu_seed" in command and "$OUT" in command
    for path in carry:  # a carried folder must be git-ignored, or it would travel twice
        assert subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT).returncode == 0, path
    data = str(tpu_seed.DATA.relative_to(ROOT))
    assert data in carry


def traveling_tree(dest: Path) -> None:
    """Copy the files a device call sends: tracked and untracked-but-not-ignored (git's own list)."""
    names = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, names):
        src = ROOT / name.decode()
        if src.is_file():
            (dest / name.decode()).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name.decode())


@pytest.mark.slow
def test_smoke_runs_in_a_venv_holding_only_what_the_device_holds(tmp_path):
    """bench/setup/tpu_wheels.sh fetch builds the stand-in (the device's JAX stack, then its installs exactly as
    the device runs them); the smoke then runs every part from a copy of the sent files, with the stand-in's
    interpreter and nothing else on its path: the resume is bitwise, the restores are exact and the parity
    figures are those of a bf16 and an fp32 forward of the same model."""
    fetch = subprocess.run(["bash", str(WHEELS_SH), "fetch"], capture_output=True, text=True, timeout=3600)
    assert fetch.returncode == 0, fetch.stdout[-3000:] + fetch.stderr[-3000:]
    tree = tmp_path / "tree"
    traveling_tree(tree)
    assert not list((tree / "olmax").rglob("*.so")), "a git-ignored build would not travel"
    prep = subprocess.run(
        [sys.executable, "-m", "bench.chip.tpu_seed", "--prepare"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tree,
    )
    assert prep.returncode == 0, prep.stdout[-3000:] + prep.stderr[-3000:]
    site = STANDIN / "site"
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "JAX_", "OLMAX_"))
    }
    env.update(
        PATH=f"{site / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        # the device: its JAX first, then the installs; the checkout is the working folder (`python -m`)
        PYTHONPATH=str(site),
        JAX_PLATFORMS="cpu",
    )
    res = tmp_path / "res"
    smoke = subprocess.run(
        [
            str(STANDIN / "bin" / "python"),
            "-m",
            "bench.chip.tpu_seed",
            "--smoke",
            "--work",
            str(tmp_path / "work"),
        ]
        + ["--results", str(res), "--parity-site", str(STANDIN / "site-parity")],
        capture_output=True,
        text=True,
        timeout=3000,
        cwd=tree,
        env=env,
    )
    assert smoke.returncode == 0, smoke.stdout[-6000:] + smoke.stderr[-3000:]
    rec = json.loads((res / "tpu_seed.json").read_text())
    s, parts = rec["summary"], rec["parts"]

    train = parts["train"]
    assert train["command"].split()[0] == str(site / "bin" / "olmax")  # the command a user types
    assert train["attention"].startswith("splash") and train["remat"].startswith("matmuls")
    assert train["steps_logged"] == 6 and train["loss_last"] < train["loss_first"]

    resume = parts["resume"]
    assert resume["killed_rc"] == -9 and resume["resumed_from"] == 3 and resume["killed_after_step"] > 3
    assert resume["steps_compared"] == 6 and s["resume_max_abs_delta"] == 0.0

    restore = parts["chip"]["restore"]
    for side in ("chip_written_restored_here", "cpu_written_restored_here"):
        r = restore[side]
        assert r["arrays"] == r["arrays_bitwise_equal"] > 0 and r["params_max_abs_diff"] == 0.0, r

    assert s["seq_len"] == 256 and parts["chip"]["parity"]["done"] == 2
    assert abs(s["fp32_kl_mean"]) < 1e-9, s  # the same model in fp32 on both sides: rounding only
    assert s["fp32_kl_mean"] < s["bf16_kl_mean"] < 1e-3, s  # bf16 compute: larger, still small
    assert s["bf16_top1"] >= 0.9 and s["fp32_xla_kl_mean"] < 1e-9, s
    variants = parts["chip"]["parity"]["variants"]
    assert variants["bf16"]["attention"] == "splash" and variants["bf16_xla"]["attention"] == "xla"

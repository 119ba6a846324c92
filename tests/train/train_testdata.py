"""Shared builders for the trainer tests: small random-token mixes, test configs, subprocess runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

# 21 + 15 + 10 + 15 = 61 windows of 32 tokens -> 7 global batches of 8 per epoch (tail of 5 dropped),
# so a 10-step run crosses the epoch 1 -> 2 boundary after step 7.
SIZES = (700, 500, 333, 480)
VOCAB = 1000  # olmax.model.tiny
SEQ, GBS = 32, 8
STEPS_PER_EPOCH = 7
# XLA's persistent compilation cache, shared by the test processes: identical steps compile once
CACHE_DIR = os.environ.get(
    "OLMAX_TEST_JAX_CACHE", os.path.join(os.environ.get("TMPDIR", "/tmp"), "olmax-test-jax-cache")
)


def write_mix(folder: Path, sizes: Sequence[int] = SIZES, seed: int = 0) -> str:
    """Raw uint32 token files (tokens < 998, below tiny's special ids) and their mix.txt."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    lines = []
    for i, n in enumerate(sizes):
        # a repeating motif plus noise gives the tiny model something learnable
        base = np.tile(rng.integers(0, 998, 50), n // 50 + 1)[:n]
        noise = rng.integers(0, 998, n)
        tokens = np.where(rng.random(n) < 0.7, base, noise).astype(np.uint32)
        tokens.tofile(folder / f"part-{i}.npy")
        lines.append(f"{'web' if i % 2 == 0 else 'code'},part-{i}.npy")
    (folder / "mix.txt").write_text("\n".join(lines) + "\n")
    return str(folder / "mix.txt")


def write_config(
    path: Path, mix: str, *, steps: int = 10, every: int = 3, work_dir: str = "", **extra: dict
) -> str:
    """A tiny-model experiment YAML over `mix`; `extra` maps an area to field overrides."""
    cfg = {
        "name": "test",
        "model": {
            "preset": "tiny",
            "max_position_embeddings": 64,
            "vocab_size": VOCAB,
            "eos_token_id": 999,
            "pad_token_id": 998,
        },
        "data": {
            "mix": mix,
            "seq_len": SEQ,
            "global_batch_size": GBS,
            "seed": 7,
            "num_threads": 0,
            "work_dir": work_dir or str(path.parent / "work"),
        },
        "optim": {"lr": 1e-2, "schedule": "cosine", "warmup_steps": 2, "t_max": 20},
        "mesh": {},
        "checkpoint": {"every": every, "keep": 2},
        "train": {"steps": steps, "progress": False, "tensorboard": False},
    }
    for area, fields in extra.items():
        cfg[area] = {**cfg.get(area, {}), **fields}
    import yaml

    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def losses(run_dir: Path) -> dict[int, float]:
    recs = metrics(run_dir)
    steps = [r["step"] for r in recs]
    assert steps == sorted(set(steps)), f"{run_dir}/metrics.jsonl: steps not one line each: {steps}"
    return {r["step"]: r["loss"] for r in recs}


def train_env(devices: int = 1) -> dict:
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "JAX_COMPILATION_CACHE_DIR": CACHE_DIR,
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
    }
    env.pop("OLMAX_COORDINATOR", None)
    return env


def train_cmd(config: str, run_dir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "olmax.cli", "train", "--config", config, "--run-dir", str(run_dir), *args]


def run_train(config: str, run_dir: Path, *args: str, devices: int = 1, timeout: int = 300) -> str:
    """`olmax train` in a subprocess with `devices` forced host devices; returns its output."""
    p = subprocess.run(
        train_cmd(config, run_dir, *args),
        env=train_env(devices),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert p.returncode == 0, f"olmax train failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}"
    return p.stdout + p.stderr


HELD_TEXTS = ("The quick brown fox jumps over the lazy dog.", "def add(a, b): return a + b")


def in_loop_evals(root: Path) -> dict:
    """A two-document held-out set and a tokenizer under `root`, as the `train` area's eval settings."""
    from tests.evals.tokenizer_testdata import make_tokenizer

    held = root / "held.jsonl"
    held.write_text("".join(json.dumps({"id": f"h{i}", "text": t}) + "\n" for i, t in enumerate(HELD_TEXTS)))
    tok = make_tokenizer(root / "tokenizer.json")
    return {"eval_sets": [f"held={held}"], "eval_limit": 0, "eval_tokenizer": str(tok)}

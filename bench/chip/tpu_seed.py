"""olmax's training claims on one TPU v5e chip, as one device command: `olmax train` from the CLI, bitwise
resume after a SIGKILL, a chip checkpoint restored on the CPU (and back), and bf16 logit parity with HF
transformers at the full 8,192-token context (docs/tpu-seed.md).

Parts (`--parts`, in this order; each adds to the record as soon as it ends, so a run cut short keeps what
it finished):

  train   `olmax train --config bench/chip/tpu_seed.yaml --run-dir WORK/uninterrupted --mix MIX --steps N
          --checkpoint-every K` as a user types it (the `olmax` command, else `python -m olmax.cli`), on the
          standard-library mix `--prepare` wrote: the run's own lines naming the device, attention kernel and
          remat policy, and its tokens/s and MFU per step from metrics.jsonl.
  resume  the same command on WORK/killed, SIGKILLed once checkpoint K is committed and a later step is
          logged, then run again (it resumes from K): loss, z-loss and grad norm at every step against the
          uninterrupted run's, as |difference|. Every process after the first loads the compiled step from
          JAX's persistent compilation cache (WORK/jax-cache) instead of compiling it again.
  cpu     the uninterrupted run's newest checkpoint restored by a process with JAX_PLATFORMS=cpu through
          the trainer's own restore (olmax.train.checkpoint.Checkpointer.restore_newest), every array's
          digest kept and the parameters dumped, and the restored state saved again as a CPU-written
          checkpoint; then a process on the chip restores both checkpoints the same way and compares every
          array with the CPU's (digest) and every parameter (max |difference|).
  parity  the run exported by `olmax model convert --to hf`; transformers' Olmo3ForCausalLM in fp32 on the
          host's CPU against olmax on the chip over held-out standard-library code (sequences of
          --parity-len tokens, documents the run never trained on): KL(HF || olmax) per token (mean, p99,
          max), top-1 agreement, max |logit difference| and each side's cross-entropy, for each of
          --variants: bf16 (the run's compute dtype, the kernel `auto` picks), fp32 under
          jax.default_matmul_precision('highest'), and each again with attention_impl=xla, which tells the
          attention kernel's share of the difference apart.

Here (online):  python -m bench.chip.tpu_seed --prepare   writes bench/out/tpu_seed/ (the mix's shards, the
held-out token ids, the dolma2 tokenizer for OLMAX_CACHE; ~10 MB), which the device call carries with the
wheels of bench/setup/tpu_wheels.sh. `--plan` compiles the train step and the parity forward for a v5e here,
ahead of time (libtpu on PYTHONPATH: bench/setup/setup_libtpu.sh), and prints each buffer plan.

On the device (bench/setup/tpu_wheels.sh command prints the whole line):
    python3 -m bench.chip.tpu_seed --results $OUT --parity-site /tmp/site-parity

`--smoke` runs every part on the CPU with the same config file at a small size (the splash kernel in
Pallas' interpret mode, 256-token sequences). The record is `bench/results/tpu_seed.json` (`--results`);
its `summary` holds resume_max_abs_delta, bf16_kl_mean, bf16_top1, fp32_kl_mean and seq_len (null for a
part that did not run).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from bench.chip import tpu_seed_chip
from bench.chip.tpu_seed_chip import VARIANTS, say
from bench.harness import BENCH, PROCESS_WALL, ROOT, Child, ChildRun, module_command
from bench.record import Record, add_arguments

# The environment the command was started with, before anything here imports JAX (whose TPU set-up edits
# os.environ): every child process starts from it, as the same command typed in a shell would.
USER_ENV = dict(os.environ)
CONFIG = BENCH / "chip" / "tpu_seed.yaml"
DATA = BENCH / "out" / "tpu_seed"  # what --prepare writes and the device call carries (git-ignored)
MIX = DATA / "mix" / "shards" / "mix.txt"
HELDOUT = DATA / "heldout.npz"
CACHE = DATA / "cache"  # OLMAX_CACHE: tokenizers/allenai_dolma2.json
PARTS = ("train", "resume", "cpu", "parity")
HELDOUT_DOCS = 8  # sequences --prepare keeps (the parity part takes the first --parity-seqs)
HELDOUT_LEN = 8192
FULL = dict(steps=30, every=10, parity_seqs=4, parity_len=8192)
SMOKE = dict(steps=6, every=3, parity_seqs=2, parity_len=256)
# The smoke's model: the same file with these overrides, as a user would type them. head_dim 128 and a
# sequence of whole 128-token tiles keep the splash kernel (interpreted on a CPU) on the path; a 128-token
# window under 256-token sequences keeps the sliding layers sliding.
SMOKE_OVERRIDES = (
    "model.d_model=128",
    "model.n_layers=4",
    "model.n_heads=1",
    "model.n_kv_heads=1",
    "model.mlp_hidden=256",
    "model.sliding_window=128",
    "model.attention_impl=splash",
    "data.seq_len=256",
    "data.global_batch_size=2",
    "mesh.per_device_batch=1",
    "optim.warmup_steps=2",
    "optim.t_max=6",
)
# what a program prints when the chip is still held by the one before it
CHIP_BUSY = (
    "libtpu_lockfile",
    "multi-process lockfile",
    "TPU is already in use",
    "Unable to initialize backend 'tpu'",
)


# ---------------------------------------------------------------------------------------------- prepare


def heldout_documents(n: int, length: int) -> tuple[list[str], Any]:
    """(names, ids (n, length)): the first `n` standard-library modules past the demo mix's (in its sorted
    order, tests left out) whose dolma2 encoding has at least `length` tokens, each its first `length`."""
    import sysconfig

    import numpy as np
    from tokenizers import Tokenizer

    from olmax.assets import tokenizer_path
    from olmax.data.prepare.demo_mix import CODE_FILES

    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if "test" not in p.parts and "site-packages" not in p.parts)
    tok = Tokenizer.from_file(str(tokenizer_path("dolma2")))
    names, rows = [], []
    for p in files[CODE_FILES:]:  # the mix trains on files[:CODE_FILES] (olmax.data.prepare.demo_mix)
        rel = str(p.relative_to(root))
        if "test" in rel:
            continue
        ids = tok.encode(p.read_text(encoding="utf-8", errors="replace"), add_special_tokens=False).ids
        if len(ids) >= length:
            names.append(rel)
            rows.append(np.asarray(ids[:length], np.int32))
            if len(rows) == n:
                break
    if len(rows) < n:
        raise SystemExit(f"tpu_seed: only {len(rows)} held-out modules of {length} tokens, {n} wanted")
    return names, np.stack(rows)


def prepare(args: argparse.Namespace) -> int:
    """Write bench/out/tpu_seed/: the demo's standard-library mix (shards only), the held-out ids and the
    dolma2 tokenizer; everything the device needs that it cannot make without a network."""
    import numpy as np

    from olmax.assets import tokenizer_path
    from olmax.data.prepare.demo_mix import prepare_demo_mix

    t0 = time.perf_counter()
    DATA.mkdir(parents=True, exist_ok=True)
    mix = prepare_demo_mix(DATA / "mix")
    shutil.rmtree(DATA / "mix" / "raw", ignore_errors=True)  # the mix reads the shards alone
    names, ids = heldout_documents(HELDOUT_DOCS, HELDOUT_LEN)
    np.savez(HELDOUT, ids=ids, names=np.asarray(names))
    (CACHE / "tokenizers").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tokenizer_path("dolma2"), CACHE / "tokenizers" / "allenai_dolma2.json")
    size = sum(f.stat().st_size for f in DATA.rglob("*") if f.is_file())
    say(
        f"prepared {mix}, {len(names)} held-out modules ({', '.join(names)}) in {time.perf_counter() - t0:.0f} s"
    )
    say(f"{DATA} holds {size / 2**20:.1f} MiB")
    return 0


# ------------------------------------------------------------------------------------------ processes


def child_env(args: argparse.Namespace, work: Path, cpu: bool = False, parity: bool = False) -> dict:
    """The environment of every process this benchmark starts: the compile cache, the carried tokenizer,
    no network, the checkout (and the parity packages) on PYTHONPATH, and the CPU where asked."""
    env = dict(USER_ENV)
    path = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(ROOT) not in path:
        path.append(str(ROOT))
    if parity and args.parity_site:
        path.append(str(args.parity_site))
    env.update(
        PYTHONPATH=os.pathsep.join(path),
        PYTHONUNBUFFERED="1",
        JAX_COMPILATION_CACHE_DIR=str(work / "jax-cache"),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
        OLMAX_CACHE=str(CACHE),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )
    if cpu or args.smoke:
        env["JAX_PLATFORMS"] = "cpu"
    if cpu:  # a CPU helper beside a process on the chip never takes libtpu's lock file
        env["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"
    return env


def olmax_command() -> list[str]:
    """`olmax` as a user runs it: the installed command, else the module it runs."""
    found = shutil.which("olmax")
    return [found] if found else [sys.executable, "-m", "olmax.cli"]


def start(argv: list[str], env: dict, log: Path, tag: str) -> Child:
    """A child process whose output goes, line by line, to its log file and to this process's stdout."""
    say(f"[{tag}] $ {' '.join(argv)}")
    return Child(argv, env=env, log=log, echo=f"[{tag}] ")


def run_proc(argv: list[str], env: dict, log: Path, tag: str, retries: int = 1) -> ChildRun:
    """Run to its end; once more, after 5 s, when it failed because the chip was still held by the process
    before it (the chip can refuse a program started just after another ended)."""
    for attempt in range(retries + 1):
        run = start(argv, env, log, tag).wait()
        busy = run.rc != 0 and any(m in line for line in run.lines for m in CHIP_BUSY)
        if not busy or attempt == retries:
            return run
        say(f"[{tag}] the chip was not free yet; again in 5 s")
        time.sleep(5)
    raise AssertionError("unreachable")


def train_argv(args: argparse.Namespace, run_dir: Path) -> list[str]:
    return [
        *olmax_command(),
        "train",
        "--config",
        str(CONFIG.relative_to(ROOT)),
        "--run-dir",
        str(run_dir),
        "--mix",
        str(MIX.relative_to(ROOT)),
        "--steps",
        str(args.steps),
        "--checkpoint-every",
        str(args.every),
        "--no-progress",
        *(SMOKE_OVERRIDES if args.smoke else ()),
        *args.override,
    ]


def metrics(run_dir: Path) -> dict[int, dict]:
    from olmax.metrics import train_records

    return train_records(run_dir) if (run_dir / "metrics.jsonl").is_file() else {}


def step_seconds(m: dict[int, dict], step: int) -> float | None:
    """A logged step's wall seconds (its tokens over its tokens/s)."""
    r = m.get(step)
    if not r or not r.get("tokens_per_s"):
        return None
    return round(r["tokens"] / r["step"] / r["tokens_per_s"], 3)


def committed(run_dir: Path) -> list[int]:
    from olmax.train.checkpoint import complete_steps

    return complete_steps(run_dir / "checkpoints")


def compute_line(lines: list[str]) -> dict:
    """What the run says it runs on: `olmax train: DEVICE; attention KERNEL; remat POLICY; compute DTYPE`."""
    for line in lines:
        if line.startswith("olmax train: ") and "; attention " in line and "; remat " in line:
            fields = line[len("olmax train: ") :].split("; ")
            out = {"compute_line": line, "device": fields[0]}
            for f in fields[1:]:
                key, _, value = f.partition(" ")
                out[key] = value
            return out
    return {"compute_line": None}


def olmax_lines(lines: list[str]) -> list[str]:
    """The run's own report: its `olmax ...` lines and the summary table under `olmax train: done`."""
    out, table = [], False
    for line in lines:
        if line.startswith("olmax"):
            out.append(line)
            table = line.startswith("olmax train: done")
        elif table and line.startswith("  "):
            out.append(line)
        else:
            table = False
    return out


# ------------------------------------------------------------------------------------------- the parts


def part_train(args, work: Path, rec: Record) -> dict:
    """The uninterrupted run, from the CLI."""
    run = work / "uninterrupted"
    shutil.rmtree(run, ignore_errors=True)
    argv = train_argv(args, run)
    ran = run_proc(argv, child_env(args, work), work / "uninterrupted.log", "train")
    rc, wall, lines = ran.rc, ran.wall_s, ran.lines
    m = metrics(run)
    out: dict[str, Any] = {
        "command": " ".join(argv),
        "rc": rc,
        "wall_s": round(wall, 1),
        "log": olmax_lines(lines),
        "steps_logged": len(m),
        "checkpoints": committed(run),
    }
    out.update(compute_line(lines))
    rec.timings("part_train", "olmax", [wall], "s", PROCESS_WALL)
    if rc != 0 or len(m) != args.steps:
        return {**out, "error": f"olmax train exited {rc} with {len(m)} of {args.steps} steps logged"}
    steady = [m[s] for s in sorted(m) if s > 2]  # step 1 compiles; step 2 may wait on the first transfer
    first = m[min(m)]
    out.update(
        loss_first=first["loss"],
        loss_last=m[max(m)]["loss"],
        mfu_peak=first.get("mfu_peak"),
        tokens_per_step=first["tokens"],
        step1_s=step_seconds(m, min(m)),  # compile included
    )
    tps = [r["tokens_per_s"] for r in steady]
    mfu = [100 * r["mfu"] for r in steady if r.get("mfu") is not None]
    if tps:
        rec.figure("tokens_per_s", tps, "tokens/s", steps=f"{min(m) + 2}-{max(m)}")
    if mfu:
        rec.figure("mfu", mfu, "%", steps=f"{min(m) + 2}-{max(m)}", peak=first.get("mfu_peak"))
    return out


def kill_after_checkpoint(argv, env, log, run: Path, every: int) -> tuple[int | None, int, float]:
    """(step logged when killed or None, exit status, wall seconds): `argv` started and SIGKILLed as soon
    as checkpoint `every` is committed and a later step is logged; started once more when the chip was
    still held by the process before it."""
    for attempt in range(2):
        proc = start(argv, env, log, "kill")
        while proc.running():
            time.sleep(0.05)
            try:
                seen = max(metrics(run), default=0)
            except (ValueError, OSError):
                continue
            if seen > every and every in committed(run):
                proc.kill()
                ended = proc.wait()
                return seen, ended.rc, ended.wall_s
        ended = proc.wait()
        if attempt or not any(m in line for line in ended.lines for m in CHIP_BUSY):
            return None, ended.rc, ended.wall_s
        say("[kill] the chip was not free yet; again in 5 s")
        time.sleep(5)
    raise AssertionError("unreachable")


def part_resume(args, work: Path, rec: Record) -> dict:
    """The same command SIGKILLed after checkpoint K, run again; every step against the uninterrupted run."""
    run, ref = work / "killed", work / "uninterrupted"
    shutil.rmtree(run, ignore_errors=True)
    argv, env, log = train_argv(args, run), child_env(args, work), work / "killed.log"
    t0 = time.perf_counter()
    killed_after, rc_kill, wall_kill = kill_after_checkpoint(argv, env, log, run, args.every)
    before = metrics(run)
    if killed_after is None:
        return {
            "command": " ".join(argv),
            "killed_rc": rc_kill,
            "error": f"the run ended (exit {rc_kill}) before checkpoint {args.every} was committed with a "
            "later step logged: nothing was killed (raise --steps or lower --checkpoint-every)",
        }
    resumed_from = max(committed(run), default=0)
    time.sleep(2)  # the killed process's hold on the chip ends with it; give the runtime a moment
    ran = run_proc(argv, env, log, "resume")
    rc, wall, lines = ran.rc, ran.wall_s, ran.lines
    a, b = metrics(ref), metrics(run)
    # each process's first step, compile included: the first process compiles, the later ones load the
    # step from the persistent compilation cache
    first_s = {
        "uninterrupted": step_seconds(a, 1),
        "killed": step_seconds(before, 1),
        "resumed": step_seconds(b, resumed_from + 1),
    }
    rows, worst = [], 0.0
    for s in sorted(set(a) | set(b)):
        row: dict[str, Any] = {"step": s}
        for k in ("loss", "z_loss", "grad_norm"):
            x, y = a.get(s, {}).get(k), b.get(s, {}).get(k)
            row[k] = [x, y]
            d = abs(x - y) if x is not None and y is not None else None
            row[f"d_{k}"] = d
            worst = max(worst, d if d is not None else float("inf"))
        rows.append(row)
    missing = sorted(set(range(1, args.steps + 1)) - (set(a) & set(b)))
    out = {
        "command": " ".join(argv),
        "killed_after_step": killed_after,
        "killed_rc": rc_kill,
        "first_step_s": first_s,
        "resumed_from": resumed_from,
        "steps_logged_before_kill": len(before),
        "pre_kill_max_abs_delta": max(
            (abs(a[s]["loss"] - r["loss"]) for s, r in before.items() if s in a), default=None
        ),
        "rc": rc,
        "wall_s": [round(wall_kill, 1), round(wall, 1)],
        "resume_log": olmax_lines(lines),
        "steps_compared": len(rows) - len(missing),
        "missing_steps": missing,
        "max_abs_delta": worst if not missing else None,
        "per_step": rows,
    }
    rec.timings("part_resume", "olmax", [time.perf_counter() - t0], "s", PROCESS_WALL)
    if rc != 0 or missing:
        out["error"] = f"the resumed run exited {rc}; steps missing from the comparison: {missing}"
    shutil.rmtree(run / "checkpoints", ignore_errors=True)  # 3.7 GB a step at full size; compared already
    return out


def cpu_restore(args, work: Path) -> dict:
    """The CPU restore child (`child_cpu`), JAX_PLATFORMS=cpu."""
    argv = module_command("bench.chip.tpu_seed", "--child", "cpu", "--work", str(work))
    if args.smoke:
        argv.append("--smoke")
    ran = run_proc(argv, child_env(args, work, cpu=True), work / "cpu.log", "cpu")
    return {"rc": ran.rc, "wall_s": round(ran.wall_s, 1)}


def hf_export(args, work: Path) -> dict:
    """`olmax model convert --to hf` of the uninterrupted run, on the CPU."""
    hf = work / "hf"
    shutil.rmtree(hf, ignore_errors=True)
    argv = [*olmax_command(), "model", "convert", "--to", "hf", str(work / "uninterrupted"), str(hf)]
    argv += ["--dtype", "float32"]
    env = child_env(args, work, cpu=True, parity=True)
    ran = run_proc(argv, env, work / "convert.log", "convert")
    return {"command": " ".join(argv), "rc": ran.rc, "wall_s": round(ran.wall_s, 1), "log": ran.lines}


def cpu_side(args, work: Path, box: dict) -> None:
    """The CPU work on the uninterrupted run (restore, then the HF export once the parity packages are in),
    each step's result in `box`; a step already done there is not run again."""
    try:
        if "cpu" in args.parts and (box.get("cpu") or {}).get("rc") != 0:
            box["cpu"] = cpu_restore(args, work)
        if "parity" in args.parts and (box.get("convert") or {}).get("rc") != 0:
            wait_parity_site(args, box)
            box["convert"] = hf_export(args, work)
    except Exception:  # noqa: BLE001 - reported in the record
        box["error"] = traceback.format_exc()[-3000:]


def start_cpu_side(args, work: Path) -> tuple[threading.Thread, dict]:
    """`cpu_side` in the background, beside the resume part's processes on the chip."""
    box: dict[str, Any] = {}
    t = threading.Thread(target=cpu_side, args=(args, work, box), daemon=True)
    t.start()
    return t, box


_parity_install: dict[str, Any] = {}


def start_parity_site(args, work: Path) -> None:
    """Install transformers + torch into --parity-site in the background (bench/setup/tpu_wheels.sh
    install-parity), unless they import already."""
    if "parity" not in args.parts or not args.parity_site:
        return
    probe = subprocess.run(
        [sys.executable, "-c", "import torch, transformers"],
        env={**USER_ENV, "PYTHONPATH": os.pathsep.join([USER_ENV.get("PYTHONPATH", ""), args.parity_site])},
        capture_output=True,
    )
    if probe.returncode == 0:
        _parity_install["done"] = "already importable"
        return
    argv = ["bash", str(BENCH / "setup" / "tpu_wheels.sh"), "install-parity", str(args.parity_site)]
    _parity_install["proc"] = start(argv, dict(USER_ENV), work / "install-parity.log", "install-parity")


def wait_parity_site(args, box: dict) -> None:
    proc = _parity_install.get("proc")
    if proc is not None and "rc" not in _parity_install:
        ended = proc.wait()
        _parity_install.update(rc=ended.rc, wall_s=round(ended.wall_s, 1))
        box["install_parity"] = {"rc": ended.rc, "wall_s": round(ended.wall_s, 1)}
        if ended.rc != 0:
            raise RuntimeError(f"installing the parity packages into {args.parity_site} exited {ended.rc}")


def run_chip_child(args, work: Path, tasks: list[str]) -> dict:
    """One process on the chip for the restore comparison and the parity check; its report as it stands
    (it reports after each piece, so a crash or a timeout keeps the pieces done)."""
    argv = module_command("bench.chip.tpu_seed", "--child", "chip", "--tasks", ",".join(tasks))
    argv += [
        "--work",
        str(work),
        "--parity-seqs",
        str(args.parity_seqs),
        "--parity-len",
        str(args.parity_len),
    ]
    argv += ["--variants", ",".join(args.variants), "--hf-attn", args.hf_attn]
    if args.smoke:
        argv.append("--smoke")
    ran = run_proc(argv, child_env(args, work, parity="parity" in tasks), work / "chip.log", "chip")
    return {**ran.result, "rc": ran.rc, "wall_s": round(ran.wall_s, 1)}


# ----------------------------------------------------------------------------------------------- main


def pick_work(args: argparse.Namespace) -> Path:
    """--work, else the roomier of /tmp and bench/out (checkpoints take 3.7 GB each at full size)."""
    if args.work:
        return Path(args.work).resolve()
    candidates = [Path("/tmp"), BENCH / "out"]
    for c in candidates:
        c.mkdir(parents=True, exist_ok=True)
    best = max(candidates, key=lambda c: shutil.disk_usage(c).free)
    return (best / ("tpu_seed_smoke" if args.smoke else "tpu_seed_work")).resolve()


def summarize(rec: Record, parts: dict) -> None:
    resume = parts.get("resume") or {}
    chip = parts.get("chip") or {}
    par = chip.get("parity") or {}
    v = par.get("variants") or {}
    restore = chip.get("restore") or {}
    rec.data["summary"] = {
        "resume_max_abs_delta": resume.get("max_abs_delta"),
        "bf16_kl_mean": (v.get("bf16") or {}).get("kl_mean"),
        "bf16_top1": (v.get("bf16") or {}).get("top1"),
        "fp32_kl_mean": (v.get("fp32") or {}).get("kl_mean"),
        "seq_len": par.get("seq_len") if v else None,
        "bf16_kl_p99": (v.get("bf16") or {}).get("kl_p99"),
        "fp32_top1": (v.get("fp32") or {}).get("top1"),
        "bf16_xla_kl_mean": (v.get("bf16_xla") or {}).get("kl_mean"),
        "fp32_xla_kl_mean": (v.get("fp32_xla") or {}).get("kl_mean"),
        "cpu_restore_params_max_abs_diff": (restore.get("chip_written_restored_here") or {}).get(
            "params_max_abs_diff"
        ),
        "chip_restore_of_cpu_checkpoint_params_max_abs_diff": (
            restore.get("cpu_written_restored_here") or {}
        ).get("params_max_abs_diff"),
        "device": chip.get("device") or (parts.get("train") or {}).get("device"),
    }
    for name, body in v.items():
        if body.get("kl_mean_per_sequence"):
            rec.figure(f"{name}_kl_mean", body["kl_mean_per_sequence"], "nats", seq_len=par.get("seq_len"))
            rec.figure(f"{name}_top1", [100 * x for x in body["top1_per_sequence"]], "%")
    rec.data["parts"] = parts


class Bench:
    """One run of the benchmark: the record, and each part's report added to it as soon as it ends."""

    def __init__(self, args: argparse.Namespace):
        import olmax

        self.args, self.work = args, pick_work(args)
        self.work.mkdir(parents=True, exist_ok=True)
        self.rec = Record("tpu_seed", argv=sys.argv, smoke=args.smoke, results=args.results)
        self.rec.side(
            "olmax", version=olmax.__version__, setting=f"{CONFIG.relative_to(ROOT)}, the `olmax` CLI"
        )
        self.rec.note(
            "work", {"dir": str(self.work), "free_gib": round(shutil.disk_usage(self.work).free / 2**30, 1)}
        )
        keys = ("parts", "steps", "every", "parity_seqs", "parity_len", "variants", "hf_attn")
        self.rec.note("settings", {k: getattr(args, k) for k in keys})
        self.rec.note("olmax_command", olmax_command())
        self.parts: dict[str, Any] = {}
        self.failed: list[str] = []
        self.done("start", {"python": sys.version.split()[0], "pythonpath": os.environ.get("PYTHONPATH", "")})

    def done(self, name: str, body: dict) -> None:
        self.parts[name] = body
        summarize(self.rec, self.parts)
        say(f"record: {self.rec.write()}")

    def wanted(self, *names: str) -> bool:
        return any(n in self.args.parts for n in names)

    def train_and_resume(self) -> tuple[threading.Thread, dict] | None:
        """The train and resume parts; the CPU side starts in the background once the run exists."""
        args, work, side = self.args, self.work, None
        if self.wanted("train"):
            shutil.rmtree(work / "jax-cache", ignore_errors=True)  # a fresh run compiles in its first process
            if not self.part("train", part_train, args, work, self.rec):
                return None  # the other parts need the run
        if self.wanted("cpu", "parity"):
            side = start_cpu_side(args, work)  # CPU work beside the resume part's chip processes
        if self.wanted("resume"):
            self.part("resume", part_resume, args, work, self.rec)
        return side

    def part(self, name: str, fn, *a) -> bool:
        """Run one part into the record; False when it failed (its report then says how)."""
        try:
            body = fn(*a)
        except Exception as e:  # noqa: BLE001 - the record says what failed
            body = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]}
        self.done(name, body)
        if "error" in body:
            self.failed.append(name)
        return "error" not in body

    def cpu_side_results(self, side: tuple[threading.Thread, dict]) -> list[str]:
        """Wait for the CPU side, run again alone what failed beside the chip; the chip child's tasks."""
        thread, box = side
        t0 = time.perf_counter()
        thread.join()
        waited = round(time.perf_counter() - t0, 1)
        failed_first = [k for k in ("cpu", "convert") if k in box and box[k].get("rc") != 0]
        failed_first += ["error"] if "error" in box else []
        if failed_first:
            box["first_try"] = {k: box.pop(k) for k in failed_first}
            cpu_side(self.args, self.work, box)
        self.done("cpu_side", {**box, "waited_s": waited})
        tasks = []
        for part, step, task in (("cpu", "cpu", "restore"), ("parity", "convert", "parity")):
            if self.wanted(part):
                if (box.get(step) or {}).get("rc") == 0:
                    tasks.append(task)
                else:
                    self.failed.append(part)
        return tasks

    def chip(self, tasks: list[str]) -> None:
        t0 = time.perf_counter()
        report = run_chip_child(self.args, self.work, tasks)
        self.rec.timings("part_chip", "olmax", [time.perf_counter() - t0], "s", PROCESS_WALL)
        self.done("chip", report)
        restore = report.get("restore") or {}
        if "restore" in tasks and ("error" in restore or not restore):
            self.failed.append("cpu")
        par = report.get("parity") or {}
        broken = [n for n, v in (par.get("variants") or {}).items() if "error" in v]
        if "parity" in tasks and (report.get("parity_error") or not par.get("done") or broken):
            self.failed.append("parity")
        if "parity" in tasks:
            hf = (report.get("parity") or {}).get("hf", {})
            self.rec.side(
                "transformers",
                version=hf.get("transformers", "-"),
                setting=f"Olmo3ForCausalLM, float32, attn_implementation={self.args.hf_attn}, torch on the CPU",
            )

    def finish(self) -> int:
        summarize(self.rec, self.parts)
        say(f"summary: {json.dumps(self.rec.data['summary'])}")
        return self.rec.finish(list(dict.fromkeys(self.failed)))


def run(args: argparse.Namespace) -> int:
    """train -> resume (the CPU side beside it) -> the chip's restores and parity; the record after each."""
    for need in (MIX, HELDOUT, CACHE / "tokenizers" / "allenai_dolma2.json"):
        if not need.is_file():
            raise SystemExit(
                f"tpu_seed: {need} is missing: run `python -m bench.chip.tpu_seed --prepare` (online)"
            )
    import jax

    jax.config.update("jax_platforms", "cpu")  # this process only watches; its children hold the chip
    bench = Bench(args)
    start_parity_site(args, bench.work)
    side = bench.train_and_resume()
    tasks = bench.cpu_side_results(side) if side is not None else []
    if tasks:
        bench.chip(tasks)
    return bench.finish()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(p)
    p.add_argument("--prepare", action="store_true", help="here, online: write bench/out/tpu_seed/ and exit")
    p.add_argument("--plan", action="store_true", help="compile the parts' programs for a v5e here and exit")
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    p.add_argument("--work", default=None, help="scratch folder (default: the roomier of /tmp and bench/out)")
    p.add_argument("--steps", type=int, default=None, help=f"steps of each run (default {FULL['steps']})")
    p.add_argument("--every", type=int, default=None, help=f"checkpoint period (default {FULL['every']})")
    p.add_argument(
        "--parity-seqs", type=int, default=None, help=f"held-out sequences (default {FULL['parity_seqs']})"
    )
    p.add_argument(
        "--parity-len", type=int, default=None, help=f"tokens per sequence (default {FULL['parity_len']})"
    )
    p.add_argument(
        "--variants", default=",".join(VARIANTS), help=f"olmax sides of the parity: {', '.join(VARIANTS)}"
    )
    p.add_argument("--hf-attn", default="sdpa", help="transformers' attn_implementation (sdpa, eager)")
    p.add_argument(
        "--parity-site",
        default=None,
        help="folder for transformers + torch (bench/setup/tpu_wheels.sh install-parity)",
    )
    p.add_argument("--override", action="append", default=[], help="one more AREA.KEY=VALUE for olmax train")
    p.add_argument("--child", choices=("cpu", "chip"), default=None, help=argparse.SUPPRESS)
    p.add_argument("--tasks", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    sizes = SMOKE if args.smoke else FULL
    for k, v in sizes.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    args.parts = [s.strip() for s in args.parts.split(",") if s.strip()]
    args.variants = [s.strip() for s in args.variants.split(",") if s.strip()]
    bad = [s for s in args.parts if s not in PARTS] + [s for s in args.variants if s not in VARIANTS]
    if bad:
        p.error(f"unknown part or variant: {', '.join(bad)}")
    if not 0 < args.every < args.steps:
        p.error("--every must be below --steps: the resume part kills the run after checkpoint --every")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child == "cpu":
        return tpu_seed_chip.child_cpu(args)
    if args.child == "chip":
        return tpu_seed_chip.child_chip(args, HELDOUT)
    if args.prepare:
        return prepare(args)
    if args.plan:
        return tpu_seed_chip.plan(args, CONFIG, MIX)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())

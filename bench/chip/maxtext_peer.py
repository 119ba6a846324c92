"""MaxText's own OLMo 3 train step on one device: the peer side of the TPU train-step benchmark.

What runs. Google's MaxText 0.2.5 (PyPI `maxtext`, installed by bench/setup/maxtext_setup.sh), its own
pre-training loop `maxtext.trainers.pre_train.train.main` with its `configs/base.yml`, on AI2's OLMo 3 7B
as MaxText ships it (`model_name=olmo3-7b-pt`): d_model 4096, 32 heads x 128, SwiGLU 11,008, sliding
window 4096 on three layers of every four, fp32 weights and AdamW state, bf16 compute. Only the layer
count (`base_num_decoder_layers`), the vocabulary (`vocab_size`), the sequence (`max_target_length`)
and the batch (`per_device_batch_size`) change (`override_model_config=true`); the data are MaxText's
synthetic batches, unpacked (`packing=false`, one document a row, as olmax's rows), with no checkpoints
and no TensorBoard.

Settings (`--setting`), each MaxText's own way of running the model:
  full      `remat_policy=full`; MaxText picks the attention kernel itself.
  launcher  what MaxText's OLMo 3 stage-1 launcher (trainers/pre_train/scripts/olmo/
            run_olmo3_7b_stage1.sh) passes for speed: `remat_policy=custom` keeping the layer input,
            attention context and the q/k/v/out and MLP projections on the device, the iota
            embedding, tokamax's splash attention with 2048 blocks and the fused backward kernel, and
            `LIBTPU_INIT_ARGS=--xla_tpu_scoped_vmem_limit_kib=65536` (the 2048-block kernel needs more
            scoped VMEM than the default 16 MiB). The launcher's optimizer settings (z-loss, fp32
            logits, skip-step) are left at base.yml's, as for `full`.
  cpu       the same loop on a CPU with a tiny model (`hardware=cpu`, `attention=dot_product`,
            d_model 64): the CI smoke.
The exact overrides of each row are printed and kept in its record.

How it is timed. MaxText logs `completed step: N, seconds: S` for each step, S being the host's wall
time between the ends of consecutive step dispatches. Dispatch is asynchronous but MaxText reads each
step's metrics one step later, so in the steady state S is the device's step time. MaxText compiles
the step before its loop; steps 0-2 still carry start-up costs (the first dispatches and the first of
those late reads), so a row's figure `step_s` is the median of steps 3 .. N-1 (0-based, as MaxText
numbers them; `timed_steps` lists them). Memory is the compiler's
buffer plan for the train step (arguments + outputs - aliased + temporaries, MaxText's own sum), read
from the compiled executable's memory analysis; the runtime's peak counts only arguments on the TPU.

MaxText keeps its compilation cache in ~/jax_cache (base.yml's `jax_cache_dir`), so a row run again on
the same machine compiles faster; the timed steps do not change.

Each row runs in a child process (one program holds a TPU at a time; a crash or an out-of-memory
cannot take the caller down); this process never imports JAX. The child (this module, `--child`) reports
its memory plan and facts as result lines (bench/harness.py). It imports MaxText from the install folder
(`--site`, appended to PYTHONPATH so the interpreter's own JAX stays first), adds a no-op
`jax.experimental.xla_metadata.must_fuse_call` (JAX >= 0.11 API that MaxText imports and calls only in
its non-TPU flash kernel), and calls MaxText's `main`. Errors (MaxText not installed, a crash, a
timeout, out of HBM) come back as a record with `error` and the log's tail.

`--aot` compiles the row's step ahead of time for a v5e chip instead of running it (MaxText's
`train_compile` with `compile_topology=v5e-1`, or the slice `--topology` names, e.g. v5e-256; needs libtpu in the interpreter's environment:
`bench/setup/maxtext_setup.sh fetch --libtpu`) and reports the same memory plan without a chip.

On the TPU machine (after `bench/setup/maxtext_setup.sh install`, which fills /tmp/site):
    python3 -m bench.chip.maxtext_peer --setting launcher --json $OUT/maxtext_launcher.json
Here (CPU smoke, ~30 s):
    .venv-maxtext/bin/python -m bench.chip.maxtext_peer --setting cpu --site .venv-maxtext/site
From bench/chip/tpu_mfu.py: `from bench.chip.maxtext_peer import run_peer`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

from bench.harness import ROOT, module_command, report, results, run_child

FIRST_TIMED_STEP = 3  # steps 0-2: the first dispatches and the first one-step-late metric reads
TAIL_LINES = 60
GIB = 2**30
FLAG_VARS = ("LIBTPU_INIT_ARGS", "XLA_FLAGS")  # space-separated compiler flags
DEVICE_SITE = Path("/tmp/site")  # where `bench/setup/maxtext_setup.sh install` puts MaxText on the device
CPU_SITE = ROOT / ".venv-maxtext" / "site"  # where `fetch` puts it for the CPU venv

# Every row: MaxText's OLMo 3 7B, its synthetic data unpacked, nothing written but the log.
COMMON = (
    "model_name=olmo3-7b-pt",
    "override_model_config=true",
    "dataset_type=synthetic",
    "packing=false",
    "enable_checkpointing=false",
    "skip_jax_distributed_system=true",
    "enable_tensorboard=false",
    "run_name=maxtext_peer",
)
# The stage-1 launcher's remat and attention-kernel settings (see the docstring).
LAUNCHER = (
    "remat_policy=custom",
    *(
        f"{name}=device"
        for name in (
            "decoder_layer_input",
            "context",
            "query_proj",
            "key_proj",
            "value_proj",
            "qkv_proj",
            "out_proj",
            "mlpwi_0",
            "mlpwo",
        )
    ),
    "use_iota_embed=True",
    "use_tokamax_splash=True",
    "attention=flash",
    *(f"sa_block_{name}=2048" for name in ("q", "kv", "kv_compute", "q_dkv", "kv_dkv", "kv_dkv_compute")),
    "sa_q_layout=SEQ_MINOR",
    "sa_k_layout=SEQ_MINOR",
    "sa_v_layout=HEAD_DIM_MINOR",
    "sa_use_fused_bwd_kernel=True",
)
# A model small enough for a CPU in seconds, with the same structure: a sliding window (32) below the
# sequence, grouped into MaxText's period of four layers.
CPU_MODEL = (
    "hardware=cpu",
    "attention=dot_product",
    "base_emb_dim=64",
    "base_num_query_heads=4",
    "base_num_kv_heads=4",
    "head_dim=16",
    "base_mlp_dim=128",
    "sliding_window_size=32",
)


class Setting(NamedTuple):
    overrides: tuple[str, ...]
    env: dict[str, str]  # added to the child's environment


SETTINGS: dict[str, Setting] = {
    "full": Setting(("remat_policy=full",), {}),
    "launcher": Setting(LAUNCHER, {"LIBTPU_INIT_ARGS": "--xla_tpu_scoped_vmem_limit_kib=65536"}),
    "cpu": Setting(("remat_policy=full", *CPU_MODEL), {"JAX_PLATFORMS": "cpu"}),
}
# Shapes: the TPU rows' defaults (one period of OLMo 3's layers, a vocabulary small enough that the head
# does not decide the step), and the CPU smoke's.
TPU_SHAPES = dict(layers=4, vocab=1024, seq=8192, batch=1, steps=8)
CPU_SHAPES = dict(layers=4, vocab=256, seq=128, batch=1, steps=6)
AOT_TOPOLOGY = "v5e-1"  # what --aot compiles for unless --topology names a slice (MaxText's own names)


def overrides_for(setting: str, layers: int, vocab: int, seq: int, batch: int, steps: int) -> list[str]:
    """The `key=value` arguments that follow base.yml on MaxText's command line for this row."""
    if setting not in SETTINGS:
        raise ValueError(f"unknown setting {setting!r}; one of {', '.join(SETTINGS)}")
    shapes = [
        f"base_num_decoder_layers={layers}",
        f"vocab_size={vocab}",
        f"max_target_length={seq}",
        f"per_device_batch_size={batch}",
        f"steps={steps}",
    ]
    return [*COMMON, *shapes, *SETTINGS[setting].overrides]


# ----- reading MaxText's log -----

STEP_RE = re.compile(r"completed step: (\d+), seconds: ([0-9.]+)")
# max_utils.print_compiled_memory_stats: "GB" there are GiB (it divides by 1024**3)
TRAIN_MEM_RE = re.compile(
    r"\[train\] Total estimated memory size: ([0-9.]+) GB, estimated output size: ([0-9.]+) GB, "
    r"estimated temp size: ([0-9.]+) GB, estimated argument size: ([0-9.]+) GB"
)
AOT_MEM_RE = re.compile(r"Memory analysis: CompiledMemoryStats\((.*)\)")
FIELD_RE = re.compile(r"(\w+_in_bytes)=(\d+)")
TFLOPS_RE = re.compile(r"Total TFLOPs: ([0-9.]+)")
JAX_RE = re.compile(r"Jax Version: (\S+)")
BUSY_RE = re.compile(r"libtpu multi-process lockfile|TPU is already in use|Device or resource busy")
BUSY_WAIT_S = 5.0
OOM_RE = re.compile(r"RESOURCE_EXHAUSTED|Ran out of memory|out of memory|exceeds the memory limit", re.I)
# XLA's out-of-memory line names what the step's temporaries alone need, in GiB ("G")
OOM_TEMP_RE = re.compile(
    r"memory required for HLO temporaries \(([0-9.]+)G\) exceeds available HBM \(([0-9.]+)G\)"
)


def plan_bytes(stats: dict[str, int]) -> int:
    """MaxText's total of a memory analysis: arguments + outputs - aliased + temporaries."""
    return (
        stats["argument_size_in_bytes"]
        + stats["output_size_in_bytes"]
        - stats["alias_size_in_bytes"]
        + stats["temp_size_in_bytes"]
    )


def parse_log(text: str) -> dict[str, Any]:
    """What a MaxText run's log says: step times, the memory plan, MaxText's FLOP count, versions.

    `steps_s` lists the seconds of steps 0, 1, ... in order (a step logged twice keeps its last line).
    The memory plan comes from the child's exact byte counts (its result) when present, else from
    MaxText's own line (0.1 GiB resolution) or train_compile's `Memory analysis:` line.
    """
    out: dict[str, Any] = {}
    steps: dict[int, float] = {}
    reported = results(text.splitlines())
    facts: dict[str, Any] = reported.get("facts", {})
    memory: dict[str, int] | None = reported.get("memory")
    for line in text.splitlines():
        if m := STEP_RE.search(line):
            steps[int(m.group(1))] = float(m.group(2))
        elif memory is None and (m := AOT_MEM_RE.search(line)):
            memory = {k: int(v) for k, v in FIELD_RE.findall(m.group(1))}
        elif m := TRAIN_MEM_RE.search(line):
            out.setdefault("hbm_estimate_gib", float(m.group(1)))
        elif m := TFLOPS_RE.search(line):
            out["maxtext_tflops_per_step"] = float(m.group(1))
        elif m := JAX_RE.search(line):
            out.setdefault("jax_version", m.group(1))
    if memory is not None and "temp_size_in_bytes" in memory:
        out["memory_bytes"] = memory
        out["hbm_estimate_gib"] = round(plan_bytes(memory) / GIB, 3)
    if steps:
        if sorted(steps) != list(range(len(steps))):
            out["steps_logged"] = sorted(steps)
        out["steps_s"] = [steps[k] for k in sorted(steps)]
        timed = [k for k in sorted(steps) if k >= FIRST_TIMED_STEP]
        if timed:
            out["timed_steps"] = timed
            out["step_s"] = statistics.median(steps[k] for k in timed)
    out.update(facts)
    return out


# ----- the parent: one row in a child process -----


def find_site(site: str | Path | None) -> Path | None:
    """The folder MaxText was installed into: `site`, else $MAXTEXT_SITE, else /tmp/site (the device),
    else .venv-maxtext/site (this checkout's CPU venv); None when none exists."""
    for cand in (site, os.environ.get("MAXTEXT_SITE"), DEVICE_SITE, CPU_SITE):
        if cand and Path(cand).is_dir():
            return Path(cand).resolve()
    return None


def _tail(text: str, n: int = TAIL_LINES) -> str:
    # MaxText prints one line per config parameter (~1,000); they only bury the error
    lines = [line for line in text.splitlines() if "Config param " not in line]
    return "\n".join(lines[-n:])


def child_environment(setting: str, env: dict[str, str] | None, site: Path) -> dict[str, str]:
    """This process's environment with the setting's variables and `env` added, and the project's root
    (this module) and `site` at the end of PYTHONPATH."""
    child_env = dict(os.environ)
    for key, value in {**SETTINGS[setting].env, **(env or {})}.items():
        # compiler flags add to any the caller already set; other variables replace
        joined = key in FLAG_VARS and child_env.get(key)
        child_env[key] = f"{child_env[key]} {value}" if joined else value
    child_env["PYTHONUNBUFFERED"] = "1"
    # MaxText relies on JAX's default implicit rank promotion (its RoPE divides (b, s, 1, 1) by (d,)):
    # a stricter setting inherited from the caller (olmax's tests set it) would fail MaxText, not olmax
    child_env.pop("JAX_NUMPY_RANK_PROMOTION", None)
    # appended, so the interpreter's own JAX (first on the device's PYTHONPATH) stays in charge
    paths = [p for p in child_env.get("PYTHONPATH", "").split(os.pathsep) if p]
    child_env["PYTHONPATH"] = os.pathsep.join([*paths, str(ROOT), str(site)])
    return child_env


def _run_child(
    cmd: list[str], env: dict[str, str], cwd: str, log: Path, timeout_s: float
) -> tuple[int, bool]:
    """Run `cmd` in its own process group with its output in `log` (written anew); (exit status,
    whether it was killed at `timeout_s`, with anything it started)."""
    log.unlink(missing_ok=True)
    run = run_child(cmd, env=env, cwd=cwd, log=log, echo=None, timeout_s=timeout_s)
    return run.rc, run.timed_out


def run_peer(
    setting: str,
    layers: int,
    vocab: int,
    seq: int,
    batch: int,
    steps: int,
    timeout_s: float = 900.0,
    env: dict[str, str] | None = None,
    *,
    python: str | None = None,
    site: str | Path | None = None,
    aot: bool = False,
    topology: str = AOT_TOPOLOGY,
    log_path: str | Path | None = None,
) -> dict[str, Any]:
    """Run (or, with `aot`, compile for a v5e chip) one MaxText row in a child process; its record.

    `env`: variables added to the child's environment over this process's and the setting's.
    `python`: the child's interpreter (default: this one). `site`: MaxText's install folder (see
    `find_site`). `log_path`: keep the child's whole log there. Never raises for a failed row: the
    record then has `error` and `log_tail`.
    """
    args = overrides_for(setting, layers, vocab, seq, batch, steps)
    if aot:
        args += [f"compile_topology={topology}", "compile_topology_num_slices=1"]
    rec: dict[str, Any] = {
        "setting": setting,
        "mode": "aot" if aot else "train",
        "shapes": dict(layers=layers, vocab=vocab, seq=seq, batch=batch, steps=steps),
        "overrides": args,
        "env_overrides": dict(SETTINGS[setting].env),
    }
    if not aot and steps <= FIRST_TIMED_STEP:
        rec["error"] = (
            f"steps={steps}: at least {FIRST_TIMED_STEP + 1} (steps 0..{FIRST_TIMED_STEP - 1} are untimed)"
        )
        return rec
    found = find_site(site)
    if found is None:
        rec["error"] = (
            "MaxText is not installed: no --site, $MAXTEXT_SITE, /tmp/site or .venv-maxtext/site "
            "(bench/setup/maxtext_setup.sh install, or fetch here)"
        )
        return rec
    child_env = child_environment(setting, env, found)
    cmd = module_command("bench.chip.maxtext_peer", "--child", rec["mode"], *args, python=python)
    rec["site"] = str(found)
    rec["command"] = cmd
    with tempfile.TemporaryDirectory(prefix="maxtext_peer_") as tmp:
        log = Path(log_path) if log_path else Path(tmp) / "maxtext.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        rc, timed_out = _run_child(cmd, child_env, tmp, log, timeout_s)
        text = log.read_text(errors="replace")
        if rc != 0 and not timed_out and BUSY_RE.search(text):
            # the chip can refuse a program that starts just as the previous one ends: once more
            time.sleep(BUSY_WAIT_S)
            rec["retried_busy_chip"] = True
            rc, timed_out = _run_child(cmd, child_env, tmp, log, timeout_s)
            text = log.read_text(errors="replace")
        rec["wall_s"] = round(time.perf_counter() - start, 1)
    rec.update(parse_log(text))
    failed = timed_out or rc != 0 or (not aot and "step_s" not in rec) or (aot and "memory_bytes" not in rec)
    if failed:
        if timed_out:
            rec["error"] = f"timed out after {timeout_s:g} s"
        elif OOM_RE.search(text):
            rec["error"] = "out of memory (HBM)" if setting != "cpu" else "out of memory"
            need = OOM_TEMP_RE.search(text)
            if need:
                rec["oom_temp_gib"], rec["oom_hbm_gib"] = float(need.group(1)), float(need.group(2))
        elif rc != 0:
            rec["error"] = f"MaxText exited with status {rc}"
        else:
            rec["error"] = f"too few steps to time (steps 0..{FIRST_TIMED_STEP - 1} are not timed)"
        rec["log_tail"] = _tail(text)
    return rec


def summary_line(rec: dict[str, Any]) -> str:
    """One line for people: the row's figure or its error."""
    head = f"maxtext {rec['setting']} ({rec['mode']})"
    if "error" in rec:
        return f"{head}: ERROR {rec['error']}"
    mem = f"memory plan {rec['hbm_estimate_gib']:.2f} GiB" if "hbm_estimate_gib" in rec else "no memory plan"
    if rec["mode"] == "aot":
        return f"{head}: compiled for v5e-1, {mem}"
    steps = rec["timed_steps"]
    return (
        f"{head}: {rec['step_s']:.4f} s/step (median of steps {steps[0]}-{steps[-1]}), {mem}, "
        f"{rec.get('device_kind', '?')}"
    )


# ----- the child: MaxText itself -----


def _no_fuse(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Stand-in for JAX >= 0.11's `must_fuse_call` (a fusion hint): the function unchanged."""
    return fn


def child(mode: str, overrides: list[str]) -> None:
    """Run MaxText's train main (or train_compile's, for `aot`) on base.yml + overrides; print facts."""
    import importlib.metadata as md

    import jax
    import jax.experimental.xla_metadata as xla_metadata

    if not hasattr(xla_metadata, "must_fuse_call"):
        xla_metadata.must_fuse_call = _no_fuse  # before MaxText imports it
    import maxtext
    from absl import app
    from maxtext.utils import max_utils

    def emit_memory(stats: Any) -> None:
        if stats is not None:
            fields = ("argument", "output", "alias", "temp", "generated_code")
            report(memory={f"{f}_size_in_bytes": int(getattr(stats, f"{f}_size_in_bytes")) for f in fields})

    if mode == "aot":
        from maxtext.trainers.pre_train import train_compile as entry

        compile_step = entry.jit_and_compile

        def jit_and_compile(*args: Any, **kwargs: Any) -> Any:
            compiled = compile_step(*args, **kwargs)
            emit_memory(compiled.memory_analysis())
            return compiled

        entry.jit_and_compile = jit_and_compile  # the exact bytes, not train_compile's printout
    else:
        from maxtext.trainers.pre_train import train as entry

        print_stats = max_utils.print_compiled_memory_stats

        def print_compiled_memory_stats(stats: Any, prefix: str = "") -> None:
            if prefix == "train":
                emit_memory(stats)  # the exact bytes behind MaxText's one-decimal line
            print_stats(stats, prefix=prefix)

        max_utils.print_compiled_memory_stats = print_compiled_memory_stats

    def version(dist: str) -> str:
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            return "not installed"

    def main(argv: list[str]) -> None:
        entry.main(argv)
        facts = {
            "maxtext_version": version("maxtext"),
            "tokamax_version": version("tokamax"),
            "jax_version": jax.__version__,
            "jaxlib_version": version("jaxlib"),
            "libtpu_version": version("libtpu"),
            "python_version": sys.version.split()[0],
            "config": str(base_yml),
        }
        if mode == "aot":
            topology = next(
                (o.split("=", 1)[1] for o in overrides if o.startswith("compile_topology=")), "v5e-1"
            )
            facts["device_kind"] = f"TPU v5 lite ({topology} topology, compiled only)"
        else:
            # after MaxText's main: the backend is up by then, opened with MaxText's own flags
            dev = jax.devices()[0]
            facts.update(device_kind=dev.device_kind, platform=dev.platform)
        report(facts=facts)

    base_yml = Path(maxtext.__file__).resolve().parent / "configs" / "base.yml"
    app.run(main, argv=[f"maxtext_{mode}", str(base_yml), *overrides])


# ----- command line -----


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setting", choices=sorted(SETTINGS), default="launcher")
    parser.add_argument("--layers", type=int, help="base_num_decoder_layers (4; cpu: 4)")
    parser.add_argument("--vocab", type=int, help="vocab_size (1024; cpu: 256)")
    parser.add_argument("--seq", type=int, help="max_target_length (8192; cpu: 128)")
    parser.add_argument("--batch", type=int, help="per_device_batch_size (1; cpu: 1)")
    parser.add_argument("--steps", type=int, help="steps, timed from step 3 (8; cpu: 6)")
    parser.add_argument("--timeout-s", type=float, default=900.0)
    parser.add_argument(
        "--aot", action="store_true", help="compile for a v5e chip (needs libtpu), do not run"
    )
    parser.add_argument(
        "--topology",
        default=AOT_TOPOLOGY,
        help="--aot: the slice to compile for, e.g. v5e-256 (default v5e-1)",
    )
    parser.add_argument("--python", help="the child's interpreter (default: this one)")
    parser.add_argument(
        "--site", help="MaxText's install folder (default: $MAXTEXT_SITE, /tmp/site, .venv-maxtext/site)"
    )
    parser.add_argument("--log", type=Path, help="keep MaxText's whole log here")
    parser.add_argument("--json", type=Path, help="write the record here")
    args = parser.parse_args(argv)
    defaults = CPU_SHAPES if args.setting == "cpu" else TPU_SHAPES
    shapes = {k: getattr(args, k) if getattr(args, k) is not None else v for k, v in defaults.items()}
    print("maxtext overrides:", " ".join(overrides_for(args.setting, **shapes)), flush=True)
    if SETTINGS[args.setting].env:
        print("maxtext environment:", " ".join(f"{k}={v}" for k, v in SETTINGS[args.setting].env.items()))
    rec = run_peer(
        args.setting,
        timeout_s=args.timeout_s,
        python=args.python,
        site=args.site,
        aot=args.aot,
        topology=args.topology,
        log_path=args.log,
        **shapes,
    )
    rec["argv"] = sys.argv if argv is None else [sys.argv[0], *argv]
    text = json.dumps(rec, indent=1, sort_keys=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    print(text)
    print(summary_line(rec))
    return 1 if "error" in rec else 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(main())

"""The held-out eval job at the chip's speed: OLMo 3 7B's eval step planned for TPU hosts, sharded eval
checked against one device, and eval against train tokens/s on one v5e chip (docs/evals.md).

Parts (each writes a JSON part to --out; `--merge PARTS...` writes the record bench/results/tpu_eval.json):

  plan  (here; libtpu on PYTHONPATH: bench/setup/setup_libtpu.sh) the whole 7B eval step compiled ahead of time:
        the shipped olmo3_7b_stage1 model, seq 8192, bf16, attention `auto` (splash on a TPU), the held-out
        score kernel (olmax.evals.eval_model: the LM head read in vocabulary blocks), the rows one eval
        batch of the job holds (`eval_batch_size` rounded up to the mesh: one a chip), on the mesh `--mesh
        auto` picks there, for a v5e-8 host (v5e:2x4), a v5e-4 (v5e:2x2) and a v5p-8 (v5:2x2x1): the per-chip
        plan (memory_analysis: arguments + outputs - aliases + temporaries), its Mosaic kernel calls and
        whether it fits the chip's HBM (olmax.train.plan's hosts and chips). Then each row of the chip part,
        compiled for one v5e chip (v5e:1x1).
  cpu   (here) tiny runs trained on 1, 4 and 8 CPU devices, each checkpoint scored in fp32 on meshes of
        1, 2 and 8 devices (a child process that sees 8): the largest relative difference of a row's CE
        from the 1-device eval's, and whether a checkpoint written on N devices was read on M != N.
  chip  (the device) OLMo 3 7B's block (4 layers, d 4096, 32 x 128 heads, SwiGLU 11,008, window 4096 on
        three layers of four), the largest the trainer fits on one v5e chip at seq 8192 (its fp32 params
        and AdamW moments: 0.81 B parameters with a 1,024-token vocabulary, bench/results/tpu_mfu.json),
        bf16, splash: the trainer's tokens/s (`make_train_step`, batch 1, remat `matmuls`, its fastest
        setting that fits, else `matmuls_but_up`; compiled ahead of time onto the empty chip, then its
        state initialised and the one compiled step timed, as bench/chip/tpu_mfu.py does), held-out eval
        tokens/s on the same model and chip through `olmax.evals.scoring.score` (rows of 8,192 random
        tokens, host to device and back included, each batch dispatched before the last is read) at 1 and 4
        rows a batch, their ratio, and the eval MFU (forward matmul FLOPs over the attended keys,
        olmax.model.flops, / the v5e's 197 TFLOP/s, olmax.train.mfu); the same model with the real
        100,278-token head, eval only (its train state does not fit a chip). The train row runs in a
        process of its own first, then the three eval rows together in a second (ROW_GROUPS), each process
        ended past its rows' limits (ROW_LIMIT_S) or at the end of --budget-s (510 s), so the whole part fits
        one 10-minute device call: on the chip ~155 s for the train row's process (~70 s of it compiling)
        and ~135 s for an eval row in a process of its own, less together (one start of the chip).

Here, from the repository root (the plan with bench/setup/setup_libtpu.sh's libtpu, no chip needed):

    python -m bench.chip.tpu_eval --part cpu --out bench/results/tpu_eval/cpu.json
    PYTHONPATH=.venv-libtpu JAX_PLATFORMS= python -m bench.chip.tpu_eval --part plan \
        --out bench/results/tpu_eval/plan.json
    python -m bench.chip.tpu_eval --device-command      # the device call: its carry list and command

The device call runs `python3 -m bench.chip.tpu_eval --part chip --out $OUT/chip.json` after installing the
train path's packages (bench/setup/tpu_wheels.sh); with the folder its files came back to as FILES_AT,

    python -m bench.chip.tpu_eval --merge bench/results/tpu_eval/plan.json bench/results/tpu_eval/cpu.json \
        FILES_AT/chip.json --ran-at COMMIT

copies its chip.json (and tpu_eval.log, as chip.log) into bench/results/tpu_eval/ and rewrites the record.

`--smoke`: the cpu part with 2-step runs on 1 and 2 devices, and the chip part on the CPU at a tiny shape
(the splash kernel in Pallas' interpret mode, seq 256; rows train_b1, eval_b1 and eval_b4), each in about
a minute; --merge them with `--smoke --results DIR`. The record's `summary`: fits_7b_v5e_8, sharded_vs_single_max_rel_diff,
checkpoint_resharded, eval_over_train_tokens_per_s, eval_mfu (null until the part that measures it is
merged).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from bench.chip.tpu_eval_steps import (
    CHIP,
    CHIP_ROWS,
    GIB,
    HOSTS,
    SEQ,
    SMOKE_ROWS,
    compile_eval,
    compile_train,
    configs,
    eval_row,
    host_mesh,
    plan_7b,
    train_row,
)
from bench.record import Record, add_arguments

REPO = Path(__file__).resolve().parents[2]
# The device call (the device README: at most 2,000 characters, $OUT comes back): bench/setup/tpu_wheels.sh installs
# the train path's packages from the machine's own index and the carried wheels, then the chip part runs.
CARRY = [".whl-tpu/olmax"]
DEVICE_COMMAND = (
    "set -o pipefail; export PYTHONUNBUFFERED=1; bash bench/setup/tpu_wheels.sh install /tmp/site 2>&1 | tee "
    "$OUT/install.log || exit 1; export PYTHONPATH=$PYTHONPATH:/tmp/site:$PWD PATH=/tmp/site/bin:$PATH; "
    "python3 -m bench.chip.tpu_eval --part chip --out $OUT/chip.json 2>&1 | tee $OUT/tpu_eval.log"
)
CPU_WRITERS, CPU_MESHES = (1, 4, 8), ("1x1", "1x2", "2x1", "1x8", "8x1", "2x4")
SMOKE_WRITERS, SMOKE_MESHES = (1, 2), ("1x1", "1x2", "2x1")


def write_part(path: str | Path, part: dict) -> None:
    from olmax.atomic import write_text

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(part, indent=1, sort_keys=True, default=str) + "\n")


def part_plan(args: argparse.Namespace) -> dict:
    """The 7B's eval step on each host, then the chip rows on one v5e chip; the part rewritten after each."""
    out: dict[str, Any] = {"part": "plan", "seven_b": [], "chip_rows": []}
    for key, host in HOSTS:
        if args.hosts and key not in args.hosts.split(","):
            continue
        r = plan_7b(key, host, args.layers)
        out["seven_b"].append(r)
        write_part(args.out, out)
        print(
            f"7B {host} ({r['topology']}): {(r.get('plan_bytes') or 0) / GIB:.2f} GiB a chip, fits {r['fits']} "
            f"({r.get('mesh')}, {r.get('compile_s', 0):.0f} s) {r.get('error', '')[:300]}",
            flush=True,
        )
    if args.no_chip_rows:
        return out
    for spec in CHIP_ROWS:
        cfg, optim = configs(spec, False)
        r: dict[str, Any] = {"spec": spec}
        try:
            mesh, hbm = host_mesh(CHIP, (1, 1), cfg)
            r.update(
                compile_train(cfg, optim, mesh, SEQ)
                if spec["kind"] == "train"
                else compile_eval(cfg, mesh, spec["rows"], SEQ)
            )
            r["fits"] = r["plan_bytes"] <= hbm
        except Exception as e:
            r.update(fits=False, error=f"{type(e).__name__}: {e}"[:1500])
        out["chip_rows"].append(r)
        write_part(args.out, out)
        print(
            f"{CHIP} {spec['name']}: {(r.get('plan_bytes') or 0) / GIB:.2f} GiB, fits {r['fits']} {r.get('error', '')[:300]}",
            flush=True,
        )
    return out


# ---------------------------------------------------------------------------------------------- cpu


def write_run_config(folder: Path, devices: int, steps: int) -> Path:
    """A tiny-model run (vocab 1,000) over random tokens, checkpointed every 2 steps."""
    import numpy as np
    import yaml

    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(4):
        rng.integers(0, 998, 600).astype(np.uint32).tofile(data / f"part-{i}.npy")
    (data / "mix.txt").write_text("".join(f"web,part-{i}.npy\n" for i in range(4)))
    cfg = {
        "name": f"tiny-on-{devices}",
        "model": {
            "preset": "tiny",
            "vocab_size": 1000,
            "eos_token_id": 999,
            "pad_token_id": 998,
            "max_position_embeddings": 64,
        },
        "data": {
            "mix": str(data / "mix.txt"),
            "seq_len": 32,
            "global_batch_size": 8,
            "seed": 7,
            "num_threads": 0,
            "work_dir": str(folder / "work"),
        },
        "optim": {"lr": 1e-2, "schedule": "cosine", "warmup_steps": 1, "t_max": 20},
        "checkpoint": {"every": 2, "keep": 2},
        "train": {"steps": steps, "progress": False, "tensorboard": False, "eval_every": 0},
    }
    path = folder / f"run{devices}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def cpu_env(devices: int) -> dict:
    return {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
    }


def child(args: list[str], devices: int, timeout: float = 900) -> subprocess.CompletedProcess:
    p = subprocess.run(
        [sys.executable, *args],
        env=cpu_env(devices),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )
    if p.returncode:
        raise RuntimeError(f"{' '.join(args[:4])} failed ({p.returncode}): {p.stderr[-2000:]}")
    return p


def score_child(checkpoint: str, out: str, meshes: list[str]) -> None:
    """(--score-child) 12 rows of fixed random tokens scored in fp32 with `checkpoint` on each mesh."""
    from olmax.testing.sharded_scores import scores_on_meshes

    res = {
        spec: {k: r[k] for k in ("ce", "mesh", "devices")}
        for spec, r in scores_on_meshes(checkpoint, meshes).items()
    }
    write_part(out, res)


def part_cpu(args: argparse.Namespace) -> dict:
    """Runs written on each device count, each scored on each mesh: CE against the 1-device eval's."""
    import numpy as np

    writers, meshes = (SMOKE_WRITERS, SMOKE_MESHES) if args.smoke else (CPU_WRITERS, CPU_MESHES)
    steps = 2 if args.smoke else 4
    out: dict[str, Any] = {"part": "cpu", "smoke": args.smoke, "steps": steps, "dtype": "float32", "runs": []}
    with tempfile.TemporaryDirectory(prefix="tpu_eval_cpu_") as tmp:
        for n in writers:
            folder = Path(tmp) / f"w{n}"
            config = write_run_config(folder, n, steps)
            t0 = time.perf_counter()
            child(["-m", "olmax.cli", "train", "--config", str(config), "--run-dir", str(folder / "run")], n)
            train_s = time.perf_counter() - t0
            scores = folder / "scores.json"
            ckpt = folder / "run" / "checkpoints" / str(steps)
            child(["-m", "bench.chip.tpu_eval", "--score-child", str(ckpt), str(scores), *meshes], max(8, n))
            got = json.loads(scores.read_text())
            one = np.asarray(got["1x1"]["ce"])
            for spec in meshes:
                ce = np.asarray(got[spec]["ce"])
                out["runs"].append(
                    {
                        "written_on": n,
                        "mesh": got[spec]["mesh"],
                        "evaluated_on": got[spec]["devices"],
                        "max_rel_diff_vs_1_device": float(np.max(np.abs(ce - one) / np.abs(one))),
                        "mean_ce": float(ce.mean()),
                        "train_s": train_s,
                    }
                )
            print(
                f"written on {n}: "
                + ", ".join(
                    f"{r['mesh']} {r['max_rel_diff_vs_1_device']:.2e}" for r in out["runs"][-len(meshes) :]
                ),
                flush=True,
            )
    out["max_rel_diff"] = max(r["max_rel_diff_vs_1_device"] for r in out["runs"])
    out["resharded"] = sorted(
        {
            f"{r['written_on']}->{r['evaluated_on']}"
            for r in out["runs"]
            if r["written_on"] != r["evaluated_on"]
        }
    )
    return out


# ---------------------------------------------------------------------------------------------- chip

# A row's process is ended past this many seconds (or at the end of --budget-s, whichever comes first), so a
# row that hangs costs its own line of the table and never the rows after it. Measured on the chip: the train
# row's compile ~70 s (bench/results/tpu_mfu.json's splash_matmuls), an eval row's 20-55 s; each process
# also imports JAX and opens the chip (~15 s).
ROW_LIMIT_S = {"train": 300.0, "eval": 200.0}
CHIP_FACTS = ("platform", "device_kind", "jax", "bytes_limit", "libtpu_init_args")


# The chip part's processes, in order: the train row alone (its state and compile on an empty chip), then the
# eval rows together (one start of JAX and of the chip for the three: ~15 s each saved, so the part fits one
# call), each group ended at the sum of its rows' limits.
ROW_GROUPS = (("train_b1",), ("eval_b1", "eval_b4", "eval_real_vocab_b1"))


def chip_row(args: argparse.Namespace) -> int:
    """(--row NAME[,NAME...], the chip part's child) the rows on this process's first device, one after
    another, the list of their JSON (each with the chip's facts) rewritten to --out after each; a failure is
    the row's status and error."""
    if not args.smoke:  # before JAX starts the TPU backend (olmax.model.libtpu)
        from olmax.model.libtpu import libtpu_env

        os.environ.update(libtpu_env(dict(os.environ)))
    from bench.harness import chip_facts

    facts = chip_facts()
    done: list[dict] = []
    for name in args.row.split(","):
        (spec,) = [r for r in CHIP_ROWS if r["name"] == name]
        try:
            if not args.smoke and facts["platform"] != "tpu":
                raise RuntimeError(
                    f"the chip part measures a TPU; JAX's first device is {facts['platform']} (--smoke for the CPU)"
                )
            r = train_row(spec, args) if spec["kind"] == "train" else eval_row(spec, args)
        except Exception as e:  # a row's failure is a table line, never the end of the run
            text = f"{type(e).__name__}: {e}"
            status = "oom" if "RESOURCE_EXHAUSTED" in text else "error"
            r = {
                "spec": spec,
                "status": status,
                "error": text[:2000],
                "trace": traceback.format_exc()[-2000:],
            }
        done.append({**r, "chip": facts})
        write_part(args.out, done)
    return 0 if all(r["status"] == "ok" for r in done) else 1


def part_chip(args: argparse.Namespace) -> dict:
    """The chip rows in the processes of ROW_GROUPS, one after another (one process holds the chip at a
    time), the train row first; the part rewritten after each group. This process never starts JAX's TPU
    backend."""
    from bench.harness import module_command, run_child

    deadline = time.monotonic() + args.budget_s
    out: dict[str, Any] = {"part": "chip", "smoke": args.smoke, "budget_s": args.budget_s, "rows": []}
    sizes = ["--batches", args.batches, "--reps", args.reps, "--steps", args.steps]
    by_name = {r["name"]: r for r in CHIP_ROWS}
    with tempfile.TemporaryDirectory(prefix="tpu_eval_chip_") as tmp:
        for group in ROW_GROUPS:
            specs = [by_name[n] for n in group if not args.smoke or n in SMOKE_ROWS]
            if not specs:
                continue
            left = deadline - time.monotonic()
            limit = min(sum(ROW_LIMIT_S[s["kind"]] for s in specs), left)
            got: list[dict] = []
            run = None
            if left >= 30:
                path = Path(tmp) / f"{specs[0]['name']}.json"
                names = ",".join(s["name"] for s in specs)
                cmd = module_command("bench.chip.tpu_eval", "--row", names, "--out", path, *sizes)
                run = run_child(
                    cmd + (["--smoke"] if args.smoke else []), timeout_s=limit, echo=f"[{names}] "
                )
                got = json.loads(path.read_text()) if path.is_file() else []
            for spec in specs:
                have = [r for r in got if r["spec"]["name"] == spec["name"]]
                if have:
                    r = have[0]
                elif run is None:
                    r = {"spec": spec, "status": "skipped", "error": f"--budget-s {args.budget_s:.0f} spent"}
                else:
                    why = f"ended at {limit:.0f} s" if run.timed_out else f"exited {run.rc}"
                    r = {"spec": spec, "status": "timeout" if run.timed_out else "error", "error": why}
                if run is not None:
                    r.update(row_wall_s=run.wall_s, log_tail=run.lines[-30:])
                facts = r.pop("chip", None)
                if facts and "device_kind" not in out:
                    out.update({k: facts.get(k) for k in CHIP_FACTS})
                out["rows"].append(r)
                shown = (
                    f"{statistics.median(r['tokens_per_s']):,.0f} tokens/s, MFU {statistics.median(r['mfu']):.1%}"
                    if r["status"] == "ok"
                    else f"{r['status']}: {r['error'][:300]}"
                )
                print(f"{spec['name']}: {shown} (its process {r.get('row_wall_s', 0):.0f} s)", flush=True)
            write_part(args.out, out)
    return out


# ---------------------------------------------------------------------------------------------- the record

SUMMARY_KEYS = (
    "fits_7b_v5e_8",
    "sharded_vs_single_max_rel_diff",
    "checkpoint_resharded",
    "eval_over_train_tokens_per_s",
    "eval_mfu",
)
SCORE_HOW = (
    "warm in-process wall seconds of olmax.evals.scoring.score over --batches batches, after a compiling one"
)
STEP_HOW = "warm in-process wall seconds per step, blocked, after 2 untimed steps"
TRAIN_SOURCE = "this chip part"  # the ratio's train row: the same part's, run in the same device call


def keep_parts(paths: list[Path], folder: Path) -> list[Path]:
    """The parts as the record keeps them, `folder/PART.json` (bench/results/tpu_eval/ beside the committed
    record): a part read from elsewhere (the device call's $OUT) is copied there first, with the log beside it
    (`tpu_eval.log` -> `PART.log`)."""
    kept = []
    for path in map(Path, paths):
        name = json.loads(path.read_text())["part"]
        target = folder / f"{name}.json"
        if path.resolve() != target.resolve():
            write_part(target, json.loads(path.read_text()))
            log = path.parent / "tpu_eval.log"
            if log.is_file():
                from olmax.atomic import write_text

                write_text(folder / f"{name}.log", log.read_text())
        kept.append(target)
    return kept


def merge(paths: list[Path], args: argparse.Namespace) -> Path:
    """The record from the parts: their figures, tables and the summary (null where a part is missing)."""
    rec = Record("tpu_eval", argv=sys.argv, smoke=args.smoke, results=args.results)
    paths = keep_parts(paths, rec.path.parent / "tpu_eval")
    parts = {p["part"]: p for p in (json.loads(path.read_text()) for path in paths)}
    rec.data["command"] = shlex.join(
        ["python", "-m", "bench.chip.tpu_eval", *sys.argv[1:]]
    )  # run as a module
    rec.side(
        "olmax",
        version="checkout (commit above)",
        setting="eval: olmax.evals.eval_model's score kernel (LM head in vocabulary blocks), attention auto, bf16; "
        "train: make_train_step, batch 1, remat matmuls (matmuls_but_up if the chip refuses it)",
    )
    rec.note("parts", {k: Path(p).name for k, p in zip(parts, paths)})
    if args.ran_at:
        rec.note("ran_at", args.ran_at)
    summary: dict[str, Any] = dict.fromkeys(SUMMARY_KEYS)
    if "plan" in parts:
        merge_plan(rec, parts["plan"], summary)
    if "cpu" in parts:
        merge_cpu(rec, parts["cpu"], summary)
    if "chip" in parts:
        merge_chip(rec, parts["chip"], summary)
    rec.data["summary"] = summary
    print(json.dumps(summary, indent=1))
    return rec.write()


def merge_plan(rec: Record, part: dict, summary: dict) -> None:
    plans = {}
    for r in part["seven_b"]:
        if r.get("plan_bytes"):
            rec.figure(
                f"plan_7b_{r['key']}",
                [r["plan_bytes"] / GIB],
                "GiB",
                topology=r["topology"],
                mesh=r["mesh"],
                fits=r["fits"],
            )
        plans[r["key"]] = {
            "host": r["host"],
            "topology": r["topology"],
            "layers": r["layers"],
            "mesh": r.get("mesh"),
            "rows": r.get("rows"),
            "plan_gib": (r.get("plan_bytes") or 0) / GIB or None,
            "hbm_gib": (r.get("hbm_bytes") or 0) / GIB or None,
            "kernel": r.get("kernel"),
            "fits": r["fits"],
        }
    rec.note("plan_7b", part["seven_b"])
    rec.note("plan_chip_rows", part.get("chip_rows", []))
    summary["plans_7b"] = plans
    v5e_8 = plans.get("v5e_8")
    summary["fits_7b_v5e_8"] = bool(v5e_8 and v5e_8["fits"] and v5e_8["layers"] == 32) if v5e_8 else None


def merge_cpu(rec: Record, part: dict, summary: dict) -> None:
    rec.note("sharded_eval", {k: part[k] for k in ("runs", "steps", "dtype", "resharded")})
    # in parts per million: a figure's text in the docs is a plain decimal
    rec.figure("sharded_vs_single_max_rel_diff", [1e6 * part["max_rel_diff"]], "ppm", dtype=part["dtype"])
    summary["sharded_vs_single_max_rel_diff"] = part["max_rel_diff"]
    summary["checkpoint_resharded"] = bool(part["resharded"])
    summary["resharded"] = part["resharded"]


def merge_chip(rec: Record, part: dict, summary: dict) -> None:
    rec.note("chip", {k: v for k, v in part.items() if k != "rows"})
    rec.note("chip_rows", part["rows"])
    ok = {r["spec"]["name"]: r for r in part["rows"] if r["status"] == "ok"}
    for name, r in ok.items():
        if r["spec"]["kind"] == "eval":
            rec.timings(name, "olmax", r["score_wall_s"], "s", SCORE_HOW)
        else:
            rec.timings(name, "olmax", r["step_s"], "s", STEP_HOW)
        rec.figure(f"tokens_per_s_{name}", r["tokens_per_s"], "tokens/s", kernel=r["kernel"])
        rec.figure(f"mfu_{name}", [100 * m for m in r["mfu"]], "%")
    same_model = [r for r in ok.values() if r["spec"]["kind"] == "eval" and r["spec"]["vocab"] == 1024]
    train = ok.get("train_b1")
    if not same_model or train is None:
        return
    best = max(same_model, key=lambda r: statistics.median(r["tokens_per_s"]))
    ratio = statistics.median(best["tokens_per_s"]) / statistics.median(train["tokens_per_s"])
    rec.figure(
        "eval_over_train_tokens_per_s",
        [ratio],
        "x",
        eval_row=best["spec"]["name"],
        train_row=train["spec"]["name"],
        train_source=TRAIN_SOURCE,
    )
    summary.update(
        eval_over_train_tokens_per_s=ratio,
        eval_mfu=statistics.median(best["mfu"]),
        eval_row=best["spec"]["name"],
        eval_tokens_per_s=statistics.median(best["tokens_per_s"]),
        train_tokens_per_s=statistics.median(train["tokens_per_s"]),
        train_remat=train["remat"],
        train_source=TRAIN_SOURCE,
        train_mfu=statistics.median(train["mfu"]),
        eval_kernel_mfu=best["mfu_kernel"],
    )
    if "eval_real_vocab_b1" in ok:
        summary["eval_mfu_real_vocab"] = statistics.median(ok["eval_real_vocab_b1"]["mfu"])


# ---------------------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.chip.tpu_eval",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument("--part", choices=("plan", "cpu", "chip"), help="run one part and write its JSON to --out")
    p.add_argument("--out", default=None, help="where a part writes its JSON")
    p.add_argument("--merge", nargs="+", type=Path, help="parts' JSON files: write the record tpu_eval.json")
    p.add_argument("--row", default=None, help=argparse.SUPPRESS)  # the chip part's child: one row
    p.add_argument(
        "--budget-s",
        type=float,
        default=510.0,
        help="--part chip: seconds for all its rows (510: a 10-minute device call, its install included)",
    )
    p.add_argument("--score-child", nargs="+", help=argparse.SUPPRESS)
    p.add_argument(
        "--layers", type=int, default=None, help="--part plan: the 7B's first N layers (default: all 32)"
    )
    p.add_argument("--no-chip-rows", action="store_true", help="--part plan: the 7B's plans only")
    p.add_argument(
        "--hosts",
        default=None,
        help=f"--part plan: comma-separated keys of {', '.join(k for k, _ in HOSTS)} (default: all)",
    )
    p.add_argument(
        "--device-command", action="store_true", help="print the device call's carry list and command"
    )
    p.add_argument("--batches", type=int, default=8, help="--part chip: batches per timed score() call (8)")
    p.add_argument("--reps", type=int, default=3, help="--part chip: timed score() calls per eval row (3)")
    p.add_argument("--steps", type=int, default=8, help="--part chip: timed kernel calls or train steps (8)")
    p.add_argument("--ran-at", default=None, help="--merge: the commit whose olmax/ the device ran")
    add_arguments(p)
    args = p.parse_args(argv)
    if args.smoke:
        args.batches, args.reps, args.steps = min(args.batches, 2), 1, min(args.steps, 2)
    if args.part and not args.out:
        p.error("--part needs --out PATH")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device_command:
        print(f"carry: {json.dumps(CARRY)}\n{DEVICE_COMMAND}")
        return 0
    if args.score_child:
        score_child(args.score_child[0], args.score_child[1], args.score_child[2:])
        return 0
    if args.row:
        return chip_row(args)
    if args.merge:
        print(f"record: {merge(args.merge, args)}")
        return 0
    if args.part == "plan":
        os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")  # else libtpu looks for other hosts
        os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
        part = part_plan(args)
        failed = [
            r.get("key") or r["spec"]["name"]
            for r in part["seven_b"] + part["chip_rows"]
            if "error" in r and "RESOURCE_EXHAUSTED" not in r["error"]
        ]
    elif args.part == "cpu":
        part = part_cpu(args)
        failed = []
    elif args.part == "chip":
        part = part_chip(args)
        failed = [r["spec"]["name"] for r in part["rows"] if r["status"] != "ok"]
    else:
        raise SystemExit("tpu_eval: give --part plan|cpu|chip with --out PATH, or --merge PARTS")
    write_part(args.out, part)
    print(f"wrote {args.out}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

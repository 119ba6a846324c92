"""`olmax data prepare --dedup` on Apache Beam's DaskRunner with 1 and 2 workers, beside the local runner, on the
same pool of at least 100 MB: wall seconds, MB of text per second, the scaling from 1 to 2 workers, and every
output file compared byte for byte with the local runner's.

The pool is olmax/testing/dedup_pool.py's (`--gb` GB of real lines in ~4 KB documents, 1% planted near-copies),
split over `--files` input files so that the workers have files to share. Each Dask run gets a fresh
loopback cluster of single-threaded workers (olmax/testing/dask_cluster.py: a `dask scheduler` and `dask worker`
processes, as docs/cluster.md starts them). The local runner runs with `--workers 2`. Timing: the wall
seconds of the whole `olmax data prepare` process, start to exit, the same way for every side (the Dask
workers' CPU is in other processes, so no CPU figure is given for them).

    .venv/bin/python -m bench.peers.dedup_beam [--gb 0.1] [--dedup exact,minhash,substring]
    .venv/bin/python -m bench.peers.dedup_beam --smoke        # 5 MB, one Dask worker count

Record: bench/results/dedup_beam.json (bench/record.py; `--smoke` elsewhere).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.harness import PROCESS_WALL
from bench.record import Record, add_arguments, package_version, shrink
from olmax.testing.dask_cluster import dask_cluster, dask_options
from olmax.testing.dedup_pool import build_pool


def split_inputs(pool_dir: Path, folder: Path, files: int) -> None:
    """The pool's documents dealt round-robin over `files` jsonl files (built once)."""
    stamp = folder / ".done"
    if stamp.exists() and len(list(folder.glob("*.jsonl"))) == files:
        return
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    outs = [open(folder / f"part-{i:03d}.jsonl", "w", encoding="utf-8") for i in range(files)]  # noqa: SIM115
    n = 0
    for src in sorted((pool_dir / "input").glob("*.jsonl")):
        with open(src, encoding="utf-8") as f:
            for line in f:
                outs[n % files].write(line)
                n += 1
    for o in outs:
        o.close()
    stamp.write_text(str(n))


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def prepare(out: Path, inputs: str, dedup: str, beam: str | None, log: Path) -> float:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "olmax.cli", "data", "prepare", "--no-progress", "--tokenizer", "dolma2"]
    cmd += ["--out", str(out), "--dedup", dedup, inputs]
    cmd += ["--workers", "2"] if beam is None else ["--runner", "beam", f"--pipeline-options={beam}"]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    log.write_text(proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[3:])}: exit {proc.returncode}; see {log}\n{proc.stderr[-2000:]}")
    return wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=0.1, help="GB of document text (default 0.1)")
    ap.add_argument("--files", type=int, default=8, help="input files (default 8)")
    ap.add_argument("--dedup", default="exact,minhash,substring", help="stages (default all three)")
    ap.add_argument("--dask-workers", default="1,2", help="worker counts (default 1,2)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/olmax-dedup-beam"), help="work folder")
    add_arguments(ap)
    args = shrink(ap.parse_args(), gb=0.005, dask_workers="1")
    workers = [int(w) for w in args.dask_workers.split(",") if w]
    pool = build_pool(args.out / f"pool-{args.gb:g}", args.gb, 0.01)
    inputs_dir = args.out / f"inputs-{args.gb:g}-{args.files}"
    split_inputs(args.out / f"pool-{args.gb:g}", inputs_dir, args.files)
    inputs = f"pool={inputs_dir}"
    mb = pool["text_bytes"] / 1e6
    rec = Record("dedup_beam", argv=sys.argv, smoke=args.smoke, results=args.results)
    rec.side("local", version=package_version("olmax"), setting=f"--dedup {args.dedup} --workers 2")
    for n in workers:
        rec.side(
            f"dask{n}",
            version=package_version("apache-beam"),
            setting=f"--runner beam, DaskRunner on a loopback cluster of {n} single-threaded worker(s)",
        )
    logs = args.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    walls = {"local": prepare(args.out / "out-local", inputs, args.dedup, None, logs / "local.log")}
    want = tree(args.out / "out-local")
    same = {}
    for n in workers:
        with dask_cluster(workers=n) as address:
            beam = dask_options(address, f"--temp_location={args.out / 'dask-temp'}")
            walls[f"dask{n}"] = prepare(
                args.out / f"out-dask{n}", inputs, args.dedup, beam, logs / f"dask{n}.log"
            )
        got = tree(args.out / f"out-dask{n}")
        same[f"dask{n}"] = got == want
        if got != want:
            diff = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
            print(f"dask{n}: {len(diff)} files differ from the local runner's, e.g. {diff[:3]}")
    for side, wall in walls.items():
        rec.timings("prepare", side, [wall], "s", PROCESS_WALL)
        rec.figure(f"{side}_wall", [wall], "s")
        rec.figure(f"{side}_mb_per_s", [mb / wall], "MB/s")
    if 1 in workers and 2 in workers:
        rec.figure("dask_speedup_2_workers", [walls["dask1"] / walls["dask2"]], "x")
    rec.note("text_bytes", pool["text_bytes"])
    rec.note("documents", pool["documents"])
    rec.note("output_equals_local", same)
    rec.note("dedup", args.dedup)
    path = rec.write()
    for side, wall in walls.items():
        print(
            f"{side:>7}: {wall:8.1f} s  {mb / wall:6.2f} MB/s"
            + (f"  output equal: {same[side]}" if side in same else "")
        )
    print(f"record: {path}")
    return 0 if all(same.values()) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except subprocess.CalledProcessError as e:
        raise SystemExit(str(e)) from None

"""`olmax data prepare --dedup exact,minhash` on a pool larger than its memory budget: the MinHash tables move
to scratch disk, the peak stays under --max-memory, every planted near-copy is removed, and the dry-run
estimate is set against the measured memory and time.

The pool: `--gb` GB (10^9 bytes) of document text, each document about 4 KB of lines drawn at random from
the Python standard library's sources and pydoc topics (distinct lines; two such documents share almost no
word 5-gram), written as Dolma-format jsonl files of about 1 GB. A `--planted` share of the documents are
near-copies of an earlier document placed later in the pool, of three kinds in turn: re-wrapped and
upper-cased, one word in 50 edited, and a verbatim copy with a new trailing line. The ground truth is
their ids and the ids they copy; after the run each plant's exact Jaccard with its source on prepare's
shingles says whether it is a near-duplicate by prepare's definition (>= 0.8: every one must be removed;
an edited copy can fall under it). The pool is built once per setting and reused (`--out`).

The run: `--dry-run` first (its estimate), then the whole prepare in a fresh child process with
`--max-memory` (default 4 GiB) and `--workers`, reporting its peak RSS (VmHWM), its CPU and wall seconds,
and the decision pass's CPU seconds as prepare prints them. Then removed.jsonl is set against the plants.
Exits 1 unless the tables went to disk, the peak stayed under --max-memory, no document but the plants
was removed, the near-duplicate plants missed are no more than LSH's banding predicts (a pair at Jaccard
j is a candidate with probability 1 - (1 - j^11)^26; + 3 sigma + 1), and the estimate is within 1.5x of
the measured memory, CPU and wall.

    .venv/bin/python -m bench.peers.dedup_pool [--gb 10] [--max-memory 4GiB] [--workers 2]
    .venv/bin/python -m bench.peers.dedup_pool --smoke         # 0.1 GB, a budget that still spills

Record: bench/results/dedup_pool.json (bench/record.py; `--smoke` elsewhere).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

from bench.harness import PROCESS_CPU, run_child
from bench.peers.dedup_rates import CHILD  # (prepare in-process; prints its VmHWM and CPU at the end)
from bench.record import Record, add_arguments, package_version, shrink
from olmax.testing.dedup_pool import KINDS, build_pool, lsh_miss, plant_jaccards, within_lsh_misses

DECIDED = re.compile(r"dedup decisions for .* in ([0-9.]+)s \(([0-9.]+)s CPU\)")
PEAK = re.compile(r"peak / total\s+([0-9,.]+)\s+([0-9,.]+)\s+([0-9,.]+)\s+([0-9,.]+)")


def run(cmd: list[str], log: Path) -> tuple[dict, str, float]:
    """`olmax data prepare CMD` in a fresh child (dedup_rates.CHILD): its result, its output, wall seconds."""
    log.unlink(missing_ok=True)
    child = run_child([sys.executable, "-c", CHILD, "go", *cmd], log=log, echo=None)
    if not child.result:
        raise SystemExit(f"the child reported nothing (exit {child.rc}); see {log}")
    return child.result, child.text, child.wall_s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=10.0, help="GB of document text (default 10)")
    ap.add_argument("--planted", type=float, default=0.01, help="share of near-copies (default 0.01)")
    ap.add_argument("--max-memory", default="4GiB", help="prepare's --max-memory (default 4GiB)")
    ap.add_argument("--workers", type=int, default=2, help="prepare's --workers (default 2)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/olmax-dedup-pool"), help="pool and output folder")
    add_arguments(ap)
    args = shrink(ap.parse_args(), gb=0.1, max_memory="600MiB")
    print(f"building the pool in {args.out} ({args.gb:g} GB of text) ...", flush=True)
    pool = build_pool(args.out / f"pool-{args.gb:g}", args.gb, args.planted)
    inputs = f"pool={args.out / f'pool-{args.gb:g}' / 'input'}"
    shards = args.out / "shards"
    shutil.rmtree(shards, ignore_errors=True)
    base = ["data", "prepare", "--no-progress", "--tokenizer", "dolma2", "--out", str(shards)]
    base += ["--dedup", "exact,minhash", "--max-memory", args.max_memory, "--workers", str(args.workers)]

    rec = Record("dedup_pool", argv=sys.argv, smoke=args.smoke, results=args.results)
    rec.side(
        "olmax",
        version=package_version("olmax"),
        setting=f"data prepare --dedup exact,minhash --max-memory {args.max_memory} --workers {args.workers}",
    )
    dry, out, _ = run([*base, "--dry-run", inputs], args.out / "dry-run.log")
    peak = PEAK.search(out)
    if dry["rc"] != 0 or peak is None:
        raise SystemExit(f"the dry run refused or printed no estimate:\n{out[-3000:]}")
    est_mem, _, est_cpu, est_wall = (
        float(x.replace(",", "")) * s for x, s in zip(peak.groups(), (1e6, 1e6, 1, 1))
    )
    print(out.strip())
    got, out, wall = run([*base, inputs], args.out / "prepare.log")
    if got["rc"] != 0:
        raise SystemExit(f"prepare failed (exit {got['rc']}):\n{out[-3000:]}")
    decided = DECIDED.search(out)
    spilled = "continuing with them on scratch disk" in out
    removed = [json.loads(x) for x in (shards / "removed.jsonl").read_text().splitlines()]
    by_id = {r["id"]: r["stage"] for r in removed}
    plants = pool["plants"]
    sims = plant_jaccards(args.out / f"pool-{args.gb:g}", plants)
    near = {i for i, j in sims.items() if j >= 0.8}  # near-duplicates by prepare's definition
    found = {
        k: sum(1 for i, (kk, _) in plants.items() if kk == k and i in by_id and i in near) for k in KINDS
    }
    planted_n = {k: sum(1 for i, (kk, _) in plants.items() if kk == k and i in near) for k in KINDS}
    under = {k: sum(1 for i, (kk, _) in plants.items() if kk == k and i not in near) for k in KINDS}
    under_removed = sorted(i for i in plants if i not in near and i in by_id)
    # the misses a run of these plants should expect (lsh_miss), beside the misses it had
    expected = {
        k: sum(lsh_miss(sims[i]) for i, (kk, _) in plants.items() if kk == k and i in near) for k in KINDS
    }
    missed = {k: planted_n[k] - found[k] for k in KINDS}
    false = sorted(i for i in by_id if i not in plants)
    mb = pool["text_bytes"] / 1e6
    rec.timings("prepare", "olmax", [got["cpu"]], "s", PROCESS_CPU)
    rec.figure("input_gb", [pool["text_bytes"] / 1e9], "GB of text")
    rec.figure("peak_rss", [got["rss"] / 2**30], "GiB")
    rec.figure("prepare_cpu", [got["cpu"]], "s")
    rec.figure("prepare_wall", [wall], "s")
    rec.figure("prepare_mb_per_cpu_s", [mb / got["cpu"]], "MB/CPU-s")
    if decided:
        rec.figure("decisions_wall", [float(decided.group(1))], "s")
        rec.figure("decisions_mb_per_cpu_s", [mb / float(decided.group(2))], "MB/CPU-s")
    rec.figure("estimate_memory_ratio", [got["rss"] / est_mem], "x", about="measured peak RSS / estimate")
    rec.figure("estimate_cpu_ratio", [got["cpu"] / est_cpu], "x", about="measured CPU / estimate")
    rec.figure("estimate_wall_ratio", [wall / est_wall], "x", about="measured wall / estimate")
    rec.note("documents", pool["documents"])
    rec.note("planted_near_duplicates", planted_n)
    rec.note("planted_near_duplicates_removed", found)
    rec.note("planted_near_duplicates_missed", missed)
    rec.note("planted_misses_expected_by_lsh", {k: round(v, 2) for k, v in expected.items()})
    rec.note("planted_under_threshold", under)
    rec.note("planted_under_threshold_removed", len(under_removed))
    rec.note("false_removals", len(false))
    rec.note("false_examples", false[:5])
    rec.note("spilled", spilled)
    rec.note("estimate", {"memory_bytes": est_mem, "cpu_s": est_cpu, "wall_s": est_wall})
    rec.note("max_memory", args.max_memory)
    path = rec.write()
    print(
        f"{mb / 1e3:,.2f} GB of text, {pool['documents']:,} documents: peak RSS {got['rss'] / 2**30:.2f} GiB "
        f"(--max-memory {args.max_memory}; estimate {est_mem / 2**30:.2f} GiB), CPU {got['cpu']:,.0f} s "
        f"(estimate {est_cpu:,.0f}), wall {wall:,.0f} s (estimate {est_wall:,.0f}); tables on disk: {spilled}\n"
        f"plants at Jaccard >= 0.8 with their source removed: {found} of {planted_n} (misses LSH's "
        f"banding predicts: {', '.join(f'{k} {v:.1f}' for k, v in expected.items())}); under 0.8: {under} "
        f"({len(under_removed)} removed); other documents removed: {len(false)}\nrecord: {path}"
    )
    # every plant LSH could miss is a coin toss: more misses than expected + 3 sigma + 1 is a failure
    lucky = within_lsh_misses(missed, expected)
    ok = spilled and lucky and not false and got["rss"] <= _size(args.max_memory)
    ratios = (got["rss"] / est_mem, got["cpu"] / est_cpu, wall / est_wall)
    ok = ok and (args.smoke or all(1 / 1.5 <= r <= 1.5 for r in ratios))  # a smoke run is mostly start-up
    shutil.rmtree(shards, ignore_errors=True)
    return 0 if ok else 1


def _size(text: str) -> int:
    from olmax.data.prepare.prepare_cli import parse_size

    return parse_size(text)


if __name__ == "__main__":
    sys.exit(main())

"""Calibrate `olmax data prepare --dedup minhash` on planted near-duplicates it was not built around.

The corpus (olmax/testing/dedup_corpus.py) is real text with web-style near-duplicates and hard negatives,
made without olmax's normaliser and judged by that module's own word 5-gram Jaccard. olmax is driven
only through its CLI (`python -m olmax.cli data prepare ... --dedup minhash`) and read only through
OUT/removed.jsonl. Printed: the hard negatives' true Jaccard, recall per kind and true-Jaccard band,
removals per kind (false ones counted), the cluster-size distribution, and a threshold sweep.

Goals: recall >= 0.95 on pairs at true Jaccard >= 0.87, no hard negative removed, false
removals <= 0.5% of removals, and no cluster larger than the largest planted group. Exits 1 when one
fails (2 when olmax itself fails). Same seed, same machine: the same corpus.

  python -m bench.studies.dedup_calibration [--seed 0] [--per-kind 100] [--singles 1000] [--sweep 0.7,0.8,0.9]

Measured figures and the commands that printed them: docs/dedup-benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.harness import ROOT
from bench.record import add_arguments, shrink
from olmax.testing import dedup_corpus as dc  # noqa: E402

OUT = ROOT / "bench" / "out"
GOAL_RECALL, GOAL_FALSE = 0.95, 0.005


def olmax_cmd(
    out: Path,
    files: list[Path],
    stages: str | None = "minhash",
    extra: list[str] | None = None,
    whole: bool = True,
) -> list[str]:
    """The `olmax data prepare` command line: dolma2, the given dedup stages (None: plain prepare), one
    source: every .jsonl.gz in the folder of `files` (`whole`), else the first of `files` alone."""
    glob = str(files[0].parent / "*.jsonl.gz") if whole else str(files[0])
    return [
        sys.executable,
        "-m",
        "olmax.cli",
        "data",
        "prepare",
        "--tokenizer",
        "dolma2",
        "--out",
        str(out),
        "--overwrite",
        "--no-progress",
        *(["--dedup", stages] if stages else []),
        *(extra or []),
        f"bench={glob}",
    ]


def olmax_env() -> dict[str, str]:
    """The environment for the olmax CLI: this tree's olmax first on the path."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def run_olmax(cmd: list[str]) -> list[dict]:
    """Run prepare; its removal records."""
    env = olmax_env()
    out = Path(cmd[cmd.index("--out") + 1])
    shutil.rmtree(out, ignore_errors=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        print(f"olmax failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}", file=sys.stderr)
        sys.exit(2)
    return read_removed(out / "removed.jsonl")


def read_removed(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def sweep_table(rows: list[tuple[float, dc.Score]]) -> list[str]:
    lines = [
        f"{'threshold':>9}{'recall>=0.87':>14}{'0.80-0.87':>11}{'<0.80':>8}{'removed':>9}{'false':>7}"
        f"{'hard neg':>9}{'largest':>8}"
    ]
    for t, s in rows:
        cells = []
        for band in (">=0.87", "0.80-0.87", "<0.80"):
            c, n = s.recall_at(band)
            cells.append(c / n if n else float("nan"))
        lines.append(
            f"{t:>9.2f}{cells[0]:>14.3f}{cells[1]:>11.3f}{cells[2]:>8.3f}{s.removals:>9}{s.false_removals:>7}"
            f"{s.hard_negatives_removed:>9}{max(s.cluster_sizes, default=0):>8}"
        )
    return lines


def goals(s: dc.Score) -> list[str]:
    """The goals a score misses (empty: all met)."""
    c, n = s.recall_at()
    failed = []
    if not n or c / n < GOAL_RECALL:
        failed.append(f"recall at true J >= 0.87 is {c}/{n}, under {GOAL_RECALL}")
    if s.hard_negatives_removed:
        failed.append(f"{s.hard_negatives_removed} hard negatives removed")
    if s.false_frac > GOAL_FALSE:
        failed.append(f"false removals {100 * s.false_frac:.2f}% of removals, over {100 * GOAL_FALSE:.1f}%")
    if max(s.cluster_sizes, default=0) > s.largest_planted:
        failed.append(f"a cluster of {max(s.cluster_sizes)} documents, larger than any planted group")
    return failed + s.problems[:5]


def print_score(name: str, s: dc.Score) -> None:
    print(f"\n{name}: recall per kind and true-Jaccard band (pairs caught / pairs)")
    print("\n".join(dc.recall_table(s)))
    print(f"{name}: removals per kind of the removed document")
    print("\n".join(dc.removal_table(s)))
    print(f"{name}: {dc.cluster_line(s)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0, help="corpus seed (default 0)")
    ap.add_argument("--per-kind", type=int, default=100, help="groups / documents per kind (default 100)")
    ap.add_argument("--singles", type=int, default=1000, help="unrelated documents (default 1000)")
    ap.add_argument(
        "--sweep",
        default="0.7,0.75,0.8,0.85,0.9",
        help="--minhash-threshold values for the sweep, comma-separated ('' skips it; 0.8 always runs)",
    )
    ap.add_argument("--work", type=Path, default=OUT, help="where the corpus and the outputs go (bench/out)")
    add_arguments(ap)
    args = shrink(ap.parse_args(argv), per_kind=5, singles=50, sweep="0.75", work=OUT / "smoke")

    t0 = time.perf_counter()
    corpus, files = dc.cached(args.work, args.seed, args.per_kind, args.singles)
    kinds: dict[str, int] = {}
    for d in corpus.docs:
        kinds[d.kind] = kinds.get(d.kind, 0) + 1
    print(
        f"corpus: seed {args.seed}, {len(corpus.docs):,} documents, {corpus.text_bytes / 1e6:.2f} MB of text in "
        f"{len(files)} files under {files[0].parent} ({time.perf_counter() - t0:.0f} s); "
        + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
    )
    print("hard negatives: true word 5-gram Jaccard between siblings (none may be removed)")
    print("\n".join(dc.negative_table(corpus)))

    out = args.work / f"dedup-cal-olmax-seed{args.seed}"
    cmd = olmax_cmd(out, files)
    print(f"\nrunning: {' '.join(cmd)}")
    main_score = dc.score(corpus, run_olmax(cmd))
    print_score("olmax --minhash-threshold 0.8", main_score)

    sweep = sorted({float(x) for x in args.sweep.split(",") if x.strip()} | {0.8})
    if len(sweep) > 1:
        rows = []
        for t in sweep:
            if t == 0.8:
                rows.append((t, main_score))
                continue
            rows.append(
                (t, dc.score(corpus, run_olmax(olmax_cmd(out, files, extra=["--minhash-threshold", str(t)]))))
            )
        print(
            "\nthreshold sweep (olmax --minhash-threshold T; recall = pairs caught / pairs per true-J band):"
        )
        print("\n".join(sweep_table(rows)))
    shutil.rmtree(out, ignore_errors=True)

    failed = goals(main_score)
    c, n = main_score.recall_at()
    print(
        f"\ngoals at 0.8: recall at true J >= 0.87 {c / max(n, 1):.3f} (>= {GOAL_RECALL}), hard negatives "
        f"removed {main_score.hard_negatives_removed} (0), false removals {100 * main_score.false_frac:.2f}% "
        f"(<= {100 * GOAL_FALSE:.1f}%), largest cluster {max(main_score.cluster_sizes, default=0)} "
        f"(<= {main_score.largest_planted}): " + ("MET" if not failed else "FAILED: " + "; ".join(failed))
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

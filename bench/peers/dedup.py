"""Benchmark `olmax data prepare --dedup minhash` against datatrove, rensa and datasketch, side by side.

One input for every tool: the planted corpus of olmax/testing/dedup_corpus.py (real text with web-style
near-duplicates and hard negatives), optionally with --filler-mb of bench/peers/prepare.py's real-text corpus
after it for a bigger speed run. Every tool reads the same Dolma jsonl.gz files and writes removal records
({"id", "kept"} a line); each is scored on the planted documents (recall at true Jaccard >= 0.87, false
removals, hard negatives removed, largest cluster) with the same code as bench/studies/dedup_calibration.py.

olmax runs through its CLI only: plain prepare, prepare --dedup minhash and prepare --dedup substring
on the same input, so each stage's own cost is its run minus the plain one (prepare also tokenizes
and writes shards, which the peers do not). The peers run in their own venv (bench/setup/setup_dedup_peers.sh)
through bench/peers/dedup_peer.py. For every run: wall and CPU seconds of the whole process tree, its peak
resident memory (summed over the tree, sampled), documents/s and MB/s per core.

"Per core" is given two ways: MB / (wall s x cores the tool was given) and MB per CPU-second; on a
shared machine the second is the steadier one.

The record (bench/results/dedup.json or `--record NAME`, `--reps` interleaved rounds, 0 for none) is the like-for-like
comparison: olmax's MinHash stage as the CPU seconds of `prepare --dedup minhash` minus those of a plain
prepare of the documents it keeps (the removed ones are never tokenized), against each peer's whole
pipeline (read, shingle, sign, LSH, check, components, removals written), every side a whole process tree
from start to output, in the same round. The last line: `dedup minhash MB per CPU-s olmax/rensa = N.Nx
(MIN–MAX)`.

  python -m bench.peers.dedup [--workers 2] [--per-kind 100] [--singles 1000] [--filler-mb 0] [--peers datatrove,rensa,datasketch]
        [--reps 3]

Measured figures and the commands that printed them: docs/dedup-benchmarks.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import PROCESS_CPU, ROOT, interleaved, run_tree
from bench.record import Record, add_arguments, format_figure, pairwise_ratio, shrink
from bench.studies import dedup_calibration as cal
from olmax.testing import dedup_corpus as dc

OUT = ROOT / "bench" / "out"
PEERS_VENV = ROOT / ".venv-dedup-peers"
PEERS = ("datatrove", "rensa", "datasketch")
# Lee et al., "Deduplicating Training Data Makes Language Models Better" (ACL 2022, arXiv 2107.06499) and
# its code (google-research/deduplicate-text-datasets): published figures, not measured here.
EXACTSUBSTR = (
    "Google's ExactSubstr, published figures (Lee et al. 2022, not rerun here): the suffix array of C4 "
    "(~350 GB of text) built in under 12 h on one 96-core machine with 768 GB of RAM = at least "
    f"{350e9 / (12 * 3600 * 96) / 1e6:.3f} MB/s per core for construction alone; the array itself is 2.7 TB "
    "on disk (~7.7 bytes per input byte, 64-bit offsets), streamed from disk, RAM at most ~2.2 bytes per input byte"
)


@dataclass
class Run:
    """One tool's run: what it was given and what it took."""

    name: str
    setting: str
    cores: int
    wall_s: float
    cpu_s: float
    peak_rss: int  # bytes, summed over the process tree
    stages: dict[str, dict[str, float]] = field(default_factory=dict)
    score: dc.Score | None = None
    decision: tuple[float, float] | None = None  # olmax's own line: its dedup decision pass, wall and CPU s


DECISION_LINE = re.compile(r"olmax: dedup decisions for .* in ([\d.]+)s \(([\d.]+)s CPU\)")


def stage_cost(run: Run, plain: Run) -> tuple[float, float, str] | None:
    """(wall s, CPU s, how known) of an olmax dedup stage alone: the decision pass as olmax reports it,
    else its run minus plain prepare; None when that difference is not above zero (one run cannot tell the
    stage from the noise: nothing is printed for it, see `stage_alone` for the record's rule)."""
    if run.decision and min(run.decision) > 0:
        return run.decision[0], run.decision[1], "olmax's own decision-pass line"
    wall, cpu = run.wall_s - plain.wall_s, run.cpu_s - plain.cpu_s
    if wall <= 0 or cpu <= 0:
        return None
    return wall, cpu, "run minus plain prepare"


def _per_cpu_s(mb: float, cost: tuple[float, float, str] | None) -> str:
    """A stage's MB per CPU-second as printed, or n/a when one run cannot resolve it."""
    if cost is None:
        return "n/a (within one run's noise at this size)"
    return f"+{cost[1]:.1f} CPU-s ({mb / cost[1]:.2f} MB/CPU-s)"


def timed(name: str, cmd: list[str], env: dict | None, log: Path) -> tuple[float, float, int]:
    """Run `cmd` (output to `log`): wall seconds, CPU seconds of its process tree (the kernel's count
    of it and the children it waited for, or the sampled count when larger: datatrove's pool workers are
    not children the runner waits for), peak resident bytes of the tree. Exits when it fails."""
    print(f"running {name}: {' '.join(cmd)}", flush=True)
    run = run_tree(cmd, log, env=env)
    if run.rc != 0:
        sys.exit(f"{name} failed ({run.rc}); last lines of {log}:\n{log.read_text(errors='replace')[-3000:]}")
    return run.wall_s, run.cpu_s, run.peak_bytes


def input_folder(files: list[Path], filler_mb: float, work: Path) -> list[Path]:
    """The files every tool reads: the planted corpus, then (as links in one folder) the filler."""
    if not filler_mb:
        return files
    from bench.peers import (
        prepare as prep_bench,  # bench/peers/prepare.py: its real-text corpus (stdlib, site-packages)
    )

    filler = prep_bench.build_corpus(filler_mb)
    folder = work / f"dedup-speed-input-{files[0].parent.name}-filler{filler_mb:g}mb"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    out = []
    for prefix, group in (("a", files), ("b", sorted(filler.root.glob("*.jsonl.gz")))):
        for p in group:
            link = folder / f"{prefix}-{p.name}"
            link.symlink_to(p.resolve())
            out.append(link)
    return out


def run_olmax(files: list[Path], work: Path, workers: int, stages: str | None, corpus: dc.Corpus) -> Run:
    out = work / f"olmax-{stages or 'plain'}"
    cmd = cal.olmax_cmd(out, files, stages, ["--workers", str(workers)])
    shutil.rmtree(out, ignore_errors=True)
    wall, cpu, peak = timed(
        f"olmax {stages or 'plain'}", cmd, cal.olmax_env(), work / f"olmax-{stages or 'plain'}.log"
    )
    setting = f"olmax data prepare --workers {workers}" + (f" --dedup {stages}" if stages else " (no dedup)")
    if stages == "minhash":
        manifest = json.loads((out / "manifest.json").read_text()).get("dedup", {})
        mh = manifest.get("settings", {}).get("minhash", {})
        setting += f" (ngram {mh.get('ngram')}, {mh.get('bands')} bands x {mh.get('rows')} rows, verified at {mh.get('threshold')})"
    run = Run(f"olmax {stages or 'plain'}", setting, workers, wall, cpu, peak)
    found = DECISION_LINE.search((work / f"olmax-{stages or 'plain'}.log").read_text(errors="replace"))
    if found:
        run.decision = (float(found.group(1)), float(found.group(2)))
    if stages:
        run.score = dc.score(corpus, cal.read_removed(out / "removed.jsonl"))
    shutil.rmtree(out, ignore_errors=True)
    return run


def run_peer(
    tool: str, files: list[Path], work: Path, workers: int, corpus: dc.Corpus, no_check: bool = False
) -> Run:
    out = work / f"peer-{tool}{'-nocheck' if no_check else ''}"
    shutil.rmtree(out, ignore_errors=True)
    cores = workers if tool == "datatrove" else 1
    # by its path: the peers' venv runs it, with nothing of olmax or bench/ on its path
    cmd = [str(PEERS_VENV / "bin" / "python"), str(ROOT / "bench" / "peers" / "dedup_peer.py"), tool]
    cmd += [str(f) for f in files]
    cmd += ["--out", str(out), "--workers", str(cores)] + (["--no-check"] if no_check else [])
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    wall, cpu, peak = timed(tool + (" (no check)" if no_check else ""), cmd, env, work / f"{out.name}.log")
    stats = json.loads((out / "stats.json").read_text())
    run = Run(
        tool + (" no check" if no_check else ""), stats["setting"], cores, wall, cpu, peak, stats["stages"]
    )
    run.score = dc.score(corpus, cal.read_removed(out / "removed.jsonl"))
    shutil.rmtree(out, ignore_errors=True)
    return run


def speed_table(runs: list[Run], mb: float, docs: int) -> list[str]:
    lines = [
        f"{'tool':<22}{'cores':>6}{'wall s':>8}{'CPU s':>8}{'MB/s/core':>10}{'MB/CPU-s':>9}{'docs/CPU-s':>11}"
        f"{'peak MB':>9}{'KB/doc':>8}"
    ]
    for r in runs:
        lines.append(
            f"{r.name:<22}{r.cores:>6}{r.wall_s:>8.1f}{r.cpu_s:>8.1f}{mb / (r.wall_s * r.cores):>10.2f}"
            f"{mb / r.cpu_s:>9.2f}{docs / r.cpu_s:>11.0f}{r.peak_rss / 1e6:>9.0f}{r.peak_rss / docs / 1e3:>8.1f}"
        )
    return lines


def quality_table(runs: list[Run]) -> list[str]:
    lines = [
        f"{'tool':<22}{'recall>=0.87':>13}{'0.80-0.87':>10}{'removed':>8}{'false':>7}{'hard neg':>9}{'largest':>8}"
    ]
    for r in runs:
        if r.score is None:
            continue
        s = r.score
        (c, n), (c2, n2) = s.recall_at(), s.recall_at("0.80-0.87")
        lines.append(
            f"{r.name:<22}{c / max(n, 1):>13.3f}{c2 / max(n2, 1):>10.3f}{s.removals:>8}{s.false_removals:>7}"
            f"{s.hard_negatives_removed:>9}{max(s.cluster_sizes, default=0):>8}"
        )
    return lines


def quality_note(s: dc.Score) -> dict[str, Any]:
    """One tool's decisions on the planted documents, as the record keeps them (the quality table's row)."""
    (c, n), (c2, n2) = s.recall_at(), s.recall_at("0.80-0.87")
    return {
        "removals": s.removals,
        "false": s.false_removals,
        "hard_negatives_removed": s.hard_negatives_removed,
        "recall_at_0.87": f"{c}/{n}",
        "recall_0.80_to_0.87": f"{c2}/{n2}",
        "largest_cluster": max(s.cluster_sizes, default=0),
    }


# Dolma 3's pool through its three stages (allenai/dolma3 pool README; OLMo 3 report): 38.7 B documents
# in, 12.8 B after exact dedup (67% removed), 23% of those removed by MinHash, then the substring step.
POOL_DOCS = (("exact", 38.7e9), ("minhash", 12.8e9), ("substring", 12.8e9 * 0.77))


def pool_estimate(text_bytes: int, docs: int, plain: Run, stage_runs: dict[str, Run | None]) -> list[str]:
    """vCPU-hours for the Dolma 3 pool from this run's CPU-seconds per input byte of each olmax stage
    alone (its run minus plain prepare), at this input's mean document size and at 4 KB a document."""
    lines = [
        "\nDolma 3 pool estimate (vCPU-hours = documents x bytes/doc x CPU-s per byte measured here, each stage "
        "alone; Beam's shuffle and I/O not included):"
    ]
    for size in (text_bytes / docs, 4000.0):
        cells, total, whole = [], 0.0, True
        for stage, n in POOL_DOCS:
            run = stage_runs.get(stage)
            if run is None:
                continue
            cost = stage_cost(run, plain)
            if cost is None:
                cells.append(f"{stage} ({n / 1e9:.1f} B docs) n/a")
                whole = False
                continue
            hours = n * size * cost[1] / text_bytes / 3600
            total += hours
            cells.append(f"{stage} ({n / 1e9:.1f} B docs) {hours:,.0f}")
        kept = POOL_DOCS[-1][1]
        tok = kept * size * plain.cpu_s / text_bytes / 3600
        dedup = f"dedup total {total:,.0f} vCPU-h" if whole else "no dedup total (a stage is n/a)"
        lines.append(
            f"  at {size / 1e3:.2f} KB/doc: " + ", ".join(cells) + f"; {dedup}; "
            f"reading, tokenizing and writing the {kept / 1e9:.2f} B documents kept {tok:,.0f} vCPU-h more"
        )
    return lines


def peer_version(tool: str) -> str:
    """The peer's version in the peers' venv."""
    proc = subprocess.run(
        [
            str(PEERS_VENV / "bin" / "python"),
            "-c",
            f"import importlib.metadata as m; print(m.version({tool!r}))",
        ],
        capture_output=True,
        text=True,
    )
    return proc.stdout.strip() or "unknown"


def write_kept(files: list[Path], removed: set[str], folder: Path) -> list[Path]:
    """The input files without the `removed` documents, one file each, in `folder` (what a plain prepare of
    the documents `--dedup minhash` keeps reads)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    out = []
    for p in files:
        dst = folder / p.name
        with gzip.open(p, "rt", encoding="utf-8") as src, open(dst, "wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as g:
                for line in src:
                    if line.strip() and json.loads(line)["id"] not in removed:
                        g.write(line.encode())
        out.append(dst)
    return out


def stage_alone(with_stage: list[float], without: list[float]) -> list[float] | None:
    """Each round's CPU seconds of a stage alone (the run with it minus the run without it, same round), or
    None where the difference is lost in the noise: a round at or below zero, or the smallest difference
    no bigger than the two sides' spreads over the rounds together. A ratio to such a difference would
    be noise (negative, or tens of times off), so the benchmark says so instead of publishing it."""
    alone = [a - b for a, b in zip(with_stage, without, strict=True)]
    noise = (max(with_stage) - min(with_stage)) + (max(without) - min(without))
    if min(alone) <= 0 or min(alone) <= noise:
        return None
    return alone


def unresolved(rec: Record, stage: str, with_stage: list[float], without: list[float]) -> str:
    """Note in the record why a stage has no figure; the line to print."""
    rec.note(f"unresolved_{stage}", {"with_cpu_s": with_stage, "without_cpu_s": without})
    return (
        f"n/a ({stage} alone is within the rounds' noise at this size: with it "
        + ", ".join(f"{t:.2f}" for t in with_stage)
        + " CPU-s, without "
        + ", ".join(f"{t:.2f}" for t in without)
        + "; use a bigger input, e.g. --filler-mb 96)"
    )


def stage_figures(
    rec: Record,
    cpu: dict[str, list[float]],
    runs: dict[str, list[Run]],
    peers: list[str],
    mb: float,
    docs: int,
    minhash: list[float] | None,
) -> None:
    """The record's per-stage figures, one value a round: olmax's plain prepare and each dedup stage alone
    (its prepare minus the plain prepare of the same round; `minhash` is that stage's, None when it was
    lost in the noise), the memory each stage holds above plain prepare, each peer's own stage timers and
    peak, and the Dolma 3 pool estimate at 4 KB a document (only when every stage run was resolved)."""
    text_bytes = mb * 1e6
    plain = cpu["olmax plain"]
    rec.timings("prepare_plain", "olmax", plain, "s", PROCESS_CPU)
    rec.figure("olmax_plain_mb_per_cpu_s", [mb / t for t in plain], "MB/CPU-s", about="read, tokenize, write")
    alone: dict[str, list[float] | None] = {"minhash": minhash}
    for stage in ("exact", "substring"):
        if f"olmax {stage}" in cpu:
            rec.timings(f"prepare_{stage}", "olmax", cpu[f"olmax {stage}"], "s", PROCESS_CPU)
            alone[stage] = stage_alone(cpu[f"olmax {stage}"], plain)
            if alone[stage] is None:
                print(f"  olmax {stage} stage: {unresolved(rec, stage, cpu[f'olmax {stage}'], plain)}")
                continue
            rec.figure(
                f"olmax_{stage}_mb_per_cpu_s",
                [mb / t for t in alone[stage]],
                "MB/CPU-s",
                about=f"the {stage} stage alone: prepare --dedup {stage} minus plain prepare, same round",
            )
    for stage in ("minhash", "substring"):
        if f"olmax {stage}" in runs:
            above = [
                max(a.peak_rss - b.peak_rss, 0) / text_bytes
                for a, b in zip(runs[f"olmax {stage}"], runs["olmax plain"], strict=True)
            ]
            rec.figure(
                f"olmax_{stage}_rss_per_byte",
                above,
                "bytes/byte",
                about="peak resident memory above plain prepare's, per input byte",
            )
    for tool in peers:
        rec.figure(
            f"{tool}_kb_per_doc",
            [r.peak_rss / docs / 1e3 for r in runs[tool]],
            "KB/doc",
            about="the whole process tree's peak resident memory per document",
        )
        for stage in runs[tool][0].stages:
            key = re.sub(r"[^a-z0-9]+", "_", stage.lower()).strip("_")
            clock = "task_s" if "task_s" in runs[tool][0].stages[stage] else "cpu_s"
            rec.figure(
                f"{tool}_{key}_mb_per_{clock.replace('_s', '')}_s",
                [mb / max(r.stages[stage][clock], 1e-9) for r in runs[tool]],
                "MB/task-s" if clock == "task_s" else "MB/CPU-s",
                about=f"{tool}'s own timer of its {stage} stage"
                + (" (its tasks' seconds summed)" if clock == "task_s" else ""),
            )
    if any(v is None for v in alone.values()):
        return
    per_byte = 4000.0 / text_bytes / 3600  # vCPU-hours per CPU-second measured, per document of 4 KB
    total = [0.0] * len(plain)
    for stage, n in POOL_DOCS:
        if stage in alone:
            hours = [n * per_byte * t for t in alone[stage]]
            total = [a + b for a, b in zip(total, hours, strict=True)]
            rec.figure(f"pool_{stage}_vcpu_h", hours, "vCPU-h", about=f"{int(n):,} documents of 4 KB")
    rec.figure("pool_dedup_vcpu_h", total, "vCPU-h", about="the stages above summed, documents of 4 KB")
    rec.figure(
        "pool_prepare_kept_vcpu_h",
        [POOL_DOCS[-1][1] * per_byte * t for t in plain],
        "vCPU-h",
        about="reading, tokenizing and writing the documents kept, 4 KB each",
    )


def like_for_like(
    args: argparse.Namespace,
    argv: list[str],
    files: list[Path],
    work: Path,
    corpus: dc.Corpus,
    peers: list[str],
    mb: float,
    docs: int,
) -> str | None:
    """The record: olmax's MinHash stage as `prepare --dedup minhash` minus a plain prepare of the documents
    it keeps, against each peer's whole pipeline, every side a whole process tree in CPU seconds, `--reps`
    interleaved rounds. Returns the rensa ratio as printed, or why there is none (None without rensa)."""
    rec = Record(args.record, argv=argv, smoke=args.smoke, results=args.results)
    rec.side(
        "olmax",
        version="this tree",
        setting=f"olmax data prepare --workers {args.workers} --dedup minhash (Dolma 3's defaults: 5-grams, "
        "26 x 11, verified at 0.8), minus olmax data prepare of the documents it keeps",
    )
    probe = work / "olmax-minhash-removals"
    shutil.rmtree(probe, ignore_errors=True)
    subprocess.run(
        cal.olmax_cmd(probe, files, "minhash", ["--workers", str(args.workers)]),
        env=cal.olmax_env(),
        capture_output=True,
        check=True,
    )
    removed = {r["id"] for r in cal.read_removed(probe / "removed.jsonl")}
    shutil.rmtree(probe, ignore_errors=True)
    kept = write_kept(files, removed, work / "kept-input")
    runs: dict[str, list[Run]] = {}

    def side(name: str, fn):
        def call() -> float:
            run = fn()
            runs.setdefault(name, []).append(run)
            return run.cpu_s

        return call

    def olmax(name: str, inputs: list[Path], stages: str | None):
        return side(name, lambda: run_olmax(inputs, work, args.workers, stages, corpus))

    fns = {
        "olmax minhash": olmax("olmax minhash", files, "minhash"),
        "olmax plain of kept": olmax("olmax plain of kept", kept, None),
        "olmax plain": olmax("olmax plain", files, None),
        "olmax exact": olmax("olmax exact", files, "exact"),
    }
    if not args.no_substring:
        fns["olmax substring"] = olmax("olmax substring", files, "substring")
    for tool in peers:
        fns[tool] = side(tool, lambda tool=tool: run_peer(tool, files, work, args.workers, corpus))
    cpu = interleaved(fns, reps=args.reps)
    stage = stage_alone(cpu["olmax minhash"], cpu["olmax plain of kept"])
    rec.timings("prepare_minhash", "olmax", cpu["olmax minhash"], "s", PROCESS_CPU)
    rec.timings("prepare_plain_of_kept", "olmax", cpu["olmax plain of kept"], "s", PROCESS_CPU)
    print(f"\nlike for like, {args.reps} interleaved rounds, every side {PROCESS_CPU}, {mb:.2f} MB:")
    stage_figures(rec, cpu, runs, peers, mb, docs, stage)
    rec.note(
        "input",
        {
            "documents": docs,
            "text_mb": mb,
            "removed_by_olmax": len(removed),
            "filler_mb": args.filler_mb,
            "seed": args.seed,
        },
    )
    if stage is None:
        olmax_rate = unresolved(rec, "minhash", cpu["olmax minhash"], cpu["olmax plain of kept"])
    else:
        olmax_rate = format_figure(
            rec.figure(
                "olmax_mb_per_cpu_s", [mb / t for t in stage], "MB/CPU-s", about="the MinHash stage alone"
            ),
            2,
        )
    print(
        f"  olmax minhash stage (prepare --dedup minhash minus a plain prepare of the documents it keeps, "
        f"{len(removed):,} removed): {olmax_rate}"
    )
    rensa = None
    for tool in peers:
        rec.side(tool, version=peer_version(tool), setting=runs[tool][0].setting)
        rec.timings("pipeline", tool, cpu[tool], "s", PROCESS_CPU)
        rate = rec.figure(f"{tool}_mb_per_cpu_s", [mb / t for t in cpu[tool]], "MB/CPU-s")
        if stage is None:
            ratio = olmax_rate
        else:
            ratio = format_figure(
                rec.figure(
                    f"ratio_{tool}",
                    pairwise_ratio(cpu[tool], stage),
                    "x",
                    about=f"{tool} CPU-s / olmax stage CPU-s, same round",
                )
            )
        score = runs[tool][0].score
        ours = runs["olmax minhash"][0].score
        rec.note(f"{tool}_decisions", {**quality_note(score), "olmax": quality_note(ours)})
        print(
            f"  {tool}: {format_figure(rate, 2)}; olmax/{tool} = {ratio} (removals {score.removals}, false {score.false_removals}; olmax {ours.removals}, false {ours.false_removals})"
        )
        if tool == "rensa":
            rensa = ratio
    print(f"record: {rec.write()}")
    return rensa


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="cores for olmax and datatrove")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--per-kind", type=int, default=100)
    ap.add_argument("--singles", type=int, default=1000)
    ap.add_argument(
        "--filler-mb",
        type=float,
        default=0,
        help="real text (bench/peers/prepare.py's corpus) added for speed",
    )
    ap.add_argument(
        "--peers", default=",".join(PEERS), help="comma list of datatrove,rensa,datasketch ('' for none)"
    )
    ap.add_argument("--no-substring", action="store_true", help="skip the --dedup substring run")
    ap.add_argument("--work", type=Path, default=OUT, help="corpus cache and scratch folder (bench/out)")
    ap.add_argument("--setup-peers", action="store_true", help="build the peers' venv when it is missing")
    ap.add_argument(
        "--reps",
        type=int,
        default=3,
        help="interleaved rounds of the like-for-like comparison that writes the record (default 3; 1 with "
        "--smoke; 0: none, the one-shot tables only)",
    )
    ap.add_argument("--record", default="dedup", help="the record's name: RESULTS/NAME.json (default dedup)")
    add_arguments(ap)
    args = shrink(ap.parse_args(argv), per_kind=5, singles=50, work=OUT / "smoke", reps=1)

    corpus, planted = dc.cached(args.work, args.seed, args.per_kind, args.singles)
    files = input_folder(planted, args.filler_mb, args.work)
    text_bytes = docs = 0
    for p in files:
        for line in gzip.open(p, "rt", encoding="utf-8"):
            text_bytes += len(json.loads(line)["text"].encode())
            docs += 1
    mb = text_bytes / 1e6
    print(
        f"input: {docs:,} documents, {mb:.2f} MB of text in {len(files)} files ({len(corpus.docs):,} planted "
        f"documents, {corpus.text_bytes / 1e6:.2f} MB); {args.workers} cores for olmax and datatrove; load "
        f"average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (other work here stretches wall time)"
    )
    for p in files:  # warm the page cache so no tool pays for the first read
        p.read_bytes()
    work = args.work / "dedup-bench"
    work.mkdir(parents=True, exist_ok=True)

    peers = [p for p in args.peers.split(",") if p]
    if peers and not (PEERS_VENV / "bin" / "python").exists():
        if args.setup_peers:
            subprocess.run(
                ["bash", str(ROOT / "bench" / "setup" / "setup_dedup_peers.sh"), str(PEERS_VENV)], check=True
            )
        else:
            print(
                f"peers skipped: no venv at {PEERS_VENV} (run bench/setup/setup_dedup_peers.sh, or pass --setup-peers)"
            )
            peers = []

    # numba compiles olmax's kernels on first use and caches them: a first, untimed run on one file
    warm = work / "olmax-warmup"
    subprocess.run(
        cal.olmax_cmd(warm, files, "exact,minhash,substring", whole=False),
        env=cal.olmax_env(),
        capture_output=True,
    )
    shutil.rmtree(warm, ignore_errors=True)
    plain = run_olmax(files, work, args.workers, None, corpus)
    minhash = run_olmax(files, work, args.workers, "minhash", corpus)
    runs = [minhash]
    for tool in peers:
        runs.append(run_peer(tool, files, work, args.workers, corpus))
    if "rensa" in peers:
        runs.append(run_peer("rensa", files, work, args.workers, corpus, no_check=True))
    substring = None if args.no_substring else run_olmax(files, work, args.workers, "substring", corpus)
    exact = run_olmax(files, work, args.workers, "exact", corpus)

    # olmax's minhash stage alone (text in -> removals decided), without prepare's tokenizing and writing
    minhash_cost = stage_cost(minhash, plain)
    alone = None
    if minhash_cost is not None:
        wall, cpu, how = minhash_cost
        alone = Run(
            "olmax minhash alone",
            f"the minhash decision pass ({how}); memory: the run's peak minus plain prepare's",
            args.workers,
            wall,
            cpu,
            max(minhash.peak_rss - plain.peak_rss, 0),
        )
    print("\nsettings:")
    for r in [plain, exact, *runs] + ([substring] if substring else []):
        print(f"  {r.name}: {r.setting}")
    print(
        f"\nspeed, end to end (text in -> removals out; olmax prepare also tokenizes and writes shards), {mb:.2f} MB:"
    )
    print("\n".join(speed_table([plain, minhash, *([alone] if alone else []), *runs[1:]], mb, docs)))
    print(
        "\nper stage (peers' own stage timers; datatrove's as the seconds its tasks ran, summed; olmax's "
        "dedup stages from its own decision-pass line, else the run minus plain prepare):"
    )
    print(
        f"  olmax: read+tokenize+write {plain.cpu_s:.1f} CPU-s ({mb / plain.cpu_s:.2f} MB/CPU-s); exact "
        f"{_per_cpu_s(mb, stage_cost(exact, plain))}; minhash {_per_cpu_s(mb, minhash_cost)}"
    )
    for r in runs[1:]:
        cells = ", ".join(
            f"{k} {v['wall_s']:.1f} s wall / {v['task_s']:.1f} task-s ({mb / max(v['task_s'], 1e-9):.2f} MB/task-s)"
            if "task_s" in v
            else f"{k} {v['wall_s']:.1f} s wall / {v['cpu_s']:.1f} CPU-s ({mb / max(v['cpu_s'], 1e-9):.2f} MB/CPU-s)"
            for k, v in r.stages.items()
        )
        print(f"  {r.name}: {cells}")
    print(
        "\nquality on the planted documents (olmax/testing/dedup_corpus.py; recall = pairs caught / pairs):"
    )
    print("\n".join(quality_table(runs)))
    for r in runs:
        if r.score and r.score.cluster_sizes:
            print(f"  {r.name}: {dc.cluster_line(r.score)}")
    if substring:
        extra = stage_cost(substring, plain)
        alone_line = (
            f"{_per_cpu_s(mb, extra)} ({extra[1] / text_bytes * 1e9:.0f} CPU-ns per input byte)"
            if extra
            else _per_cpu_s(mb, extra)
        )
        print(
            f"\nsubstring (--dedup substring, min 500 bytes): {substring.wall_s:.1f} s wall, {substring.cpu_s:.1f} CPU-s "
            f"whole prepare; the stage alone {alone_line}; peak {substring.peak_rss / 1e6:.0f} MB = "
            f"{substring.peak_rss / text_bytes:.1f} bytes per input byte whole prepare, "
            f"{max(substring.peak_rss - plain.peak_rss, 0) / text_bytes:.1f} above plain prepare"
        )
        print(f"  {EXACTSUBSTR}")
    stage_runs = {"exact": exact, "minhash": minhash, "substring": substring}
    print("\n".join(pool_estimate(text_bytes, docs, plain, stage_runs)))
    rensa = None
    if args.reps:
        rensa = like_for_like(
            args,
            [__file__, *(sys.argv[1:] if argv is None else argv)],
            files,
            work,
            corpus,
            peers,
            mb,
            docs,
        )
    ratio = rensa or "n/a (rensa not run like for like)"
    print(f"dedup minhash MB per CPU-s olmax/rensa = {ratio}")
    failed = bool(cal.goals(minhash.score)) if minhash.score else True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

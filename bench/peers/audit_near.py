"""The audits' near-duplicate pass (`audit dedup --near`, `audit loader --near`) on a prepared mix of >= 2 B
tokens of unique text with planted near-copies: time, memory high-water mark, every plant found.

The pool is olmax/testing/dedup_pool.py's (documents of about 4 KB of lines drawn at random from the standard
library's sources and pydoc topics, so two documents share almost no word 5-gram, and a --planted share of
near-copies of an earlier document: re-wrapped and upper-cased, one word in 50 edited, a verbatim copy with
a new trailing line), prepared with `olmax data prepare` (no dedup) into dolma2 shards. The audits' own
function (olmax.audit.near.near_duplicates, what both commands call) then runs over the shards in a fresh
process, the decoded text shingled and clustered through the scratch tables, every cluster kept for the
check. Found: a plant is found when it is removable in its source's cluster. Each plant's exact Jaccard
with its source on prepare's shingles (dedup_pool.plant_jaccards) says whether it must be found (>= 0.8);
LSH's banding may miss a pair at Jaccard j with probability (1 - j^11)^26, so the misses allowed are the
expected number + 3 sigma + 1, as in bench/peers/dedup_pool.py. No document but a plant may be removable.
Exits 1 otherwise.

    .venv/bin/python -m bench.peers.audit_near [--gb 8] [--threads 2]
    .venv/bin/python -m bench.peers.audit_near --smoke         # 0.05 GB

Record: bench/results/audit_near.json (bench/record.py; `--smoke` elsewhere).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from bench.harness import PROCESS_WALL, module_command, report, run_child
from bench.record import Record, add_arguments, package_version
from olmax.testing.dedup_pool import KINDS, build_pool, lsh_miss, plant_jaccards, within_lsh_misses


def child(mix: str, work: str, threads: int) -> dict:
    """near_duplicates over the mix's files in this process, with its time and memory (Phases)."""
    from olmax.assets import tokenizer_path
    from olmax.audit.near import near_duplicates
    from olmax.audit.phases import Phases
    from olmax.data.loader import file_index
    from olmax.data.stream import StreamSpec
    from olmax.dedup.params import MinHashParams, NearSettings

    spec = StreamSpec(mix=mix, work_dir=work)
    index = file_index(spec)
    near = NearSettings(MinHashParams(), str(tokenizer_path("dolma2", quiet=True)))
    with Phases() as phases:
        with phases.phase("near duplicates"):
            t0 = time.process_time()
            rep = near_duplicates(
                list(index.paths), list(index.labels), near, max_clusters=10**9, threads=threads, stream=spec
            )
            cpu = time.process_time() - t0
    rep.pop("removable_tokens_per_file")
    return {"near": rep, "performance": phases.summary(), "cpu_s": cpu}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=None, help="GB of document text (default 8; --smoke 0.05)")
    ap.add_argument("--planted", type=float, default=0.01, help="share of near-copies (default 0.01)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="bench/out/audit-near")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    add_arguments(ap)
    args = ap.parse_args()
    if args.child:
        report(**child(args.child[0], args.child[1], args.threads))
        return 0
    gb = args.gb if args.gb is not None else 0.05 if args.smoke else 8.0
    rec = Record("audit_near", argv=sys.argv, smoke=args.smoke, results=args.results)
    out = Path(args.out).resolve()
    folder = out / f"pool-{gb:g}gb"
    t0 = time.monotonic()
    meta = build_pool(folder, gb, args.planted)
    plants = meta["plants"]
    print(
        f"pool: {meta['text_bytes'] / 1e9:.2f} GB, {meta['documents']:,} documents, {len(plants):,} planted near-copies ({time.monotonic() - t0:.0f} s)"
    )
    shards = folder / "shards"
    if not (shards / "mix.txt").exists():
        t0 = time.monotonic()
        cmd = [sys.executable, "-c", "import sys; from olmax.cli import main; sys.exit(main(sys.argv[1:]))"]
        cmd += [
            "data",
            "prepare",
            "--tokenizer",
            "dolma2",
            "--out",
            str(shards),
            "--workers",
            "2",
            "--no-progress",
        ]
        subprocess.run([*cmd, f"pool={folder / 'input'}/*.jsonl"], check=True)
        print(f"prepared into {shards} ({time.monotonic() - t0:.0f} s)")
    jacc = plant_jaccards(folder, plants)
    rec.side(
        "olmax",
        version=package_version("olmax"),
        setting=f"olmax.audit.near.near_duplicates (audit dedup/loader --near), --threads {args.threads}, "
        "prepare's MinHash defaults (word 5-grams, 26 x 11, Jaccard >= 0.8)",
    )
    work = out / "work"
    cmd = module_command(
        "bench.peers.audit_near", "--child", str(shards / "mix.txt"), str(work), "--out", str(out)
    )
    ran = run_child([*cmd, "--threads", str(args.threads)], check=True)
    wall, rep = ran.wall_s, ran.result
    near, perf = rep["near"], rep["performance"]
    removable_in = {}  # removable document -> the kept document of its cluster
    for c in near["clusters"]:
        for m in c["doc_ids"][1:]:
            removable_in[m] = c["keep"]
    cluster_of = {}
    for c in near["clusters"]:
        for m in c["doc_ids"]:
            cluster_of[m] = c["keep"]
    must = {p for p, j in jacc.items() if j >= 0.8}
    found = {k: 0 for k in KINDS}
    planted_n = {k: 0 for k in KINDS}
    expected_miss = {k: 0.0 for k in KINDS}
    for p in must:
        kind, source = plants[p]
        planted_n[kind] += 1
        expected_miss[kind] += lsh_miss(jacc[p])
        found[kind] += p in removable_in and cluster_of.get(source) == cluster_of[p]
    wrong = sorted(m for m in removable_in if m not in plants)
    missed = {k: planted_n[k] - found[k] for k in KINDS}
    lucky = within_lsh_misses(missed, expected_miss)
    tokens = near["document_tokens"]
    peak = perf["peak_anon_mib"] / 1024
    print(
        f"near pass: {wall:.1f} s whole process, {rep['cpu_s']:.0f} CPU-s, {tokens:,} tokens in "
        f"{near['documents']:,} documents ({tokens / rep['cpu_s'] / 1e6:.2f} M tokens/CPU-s), peak anonymous "
        f"{peak:.2f} GiB (VmHWM {perf['process_vmhwm_mib'] / 1024:.2f} GiB)"
    )
    print(
        f"plants at Jaccard >= 0.8 found: {found} of {planted_n} (misses LSH predicts: "
        + ", ".join(f"{k} {v:.1f}" for k, v in expected_miss.items())
        + f"); under 0.8: {len(jacc) - len(must)}; removable documents that are not plants: {len(wrong)}"
    )
    rec.timings("near.process", "olmax", [wall], "s", PROCESS_WALL)
    rec.figure("seconds", [wall], "s", about="whole process: decode, shingle, sign, spill, cluster, report")
    rec.figure("tokens_per_cpu_s", [tokens / rep["cpu_s"] / 1e6], "M tokens/CPU-s", tokens=tokens)
    rec.figure("peak_anon", [peak], "GiB", about="the process's peak anonymous memory (sampled)")
    rec.figure(
        "vmhwm", [perf["process_vmhwm_mib"] / 1024], "GiB", about="the process's resident high-water mark"
    )
    rec.note("pool", {k: meta[k] for k in ("documents", "text_bytes", "files")} | {"planted": len(plants)})
    rec.note("plants_found", found)
    rec.note("plants_at_jaccard_0.8", planted_n)
    rec.note("plants_missed_expected_by_lsh", {k: round(v, 2) for k, v in expected_miss.items()})
    rec.note("plants_under_0.8", len(jacc) - len(must))
    rec.note("removable_not_planted", len(wrong))
    rec.note("near", {k: v for k, v in near.items() if k not in ("clusters", "sources")})
    print(f"record: {rec.write()}")
    ok = lucky and not wrong
    if not ok:
        print(
            "FAILED: "
            + ("non-plants removable " + str(wrong[:5]) if wrong else "more misses than LSH predicts")
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

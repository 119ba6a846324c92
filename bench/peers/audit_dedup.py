"""Dedup-audit speed end to end: the `olmax audit dedup` command, start to report, on real text read once;
the record is bench/results/audit_dedup.json (the cost table's `audit dedup` row in docs/benchmarks.md).

Training text: every module of the Python standard library (its folders too, site-packages left out)
and the pydoc topics, tokenized with dolma2, each document once, in --files raw uint32 shards ended by
EOS (no sidecar: the audit finds documents by an EOS scan). A prepared stage-1 mix is already
deduplicated, so its documents are mostly distinct, as here. Each repetition runs the command in a
process of its own, `--threads 1`, once with the default exact passes (duplicate documents and repeated
50-token spans) and once with `--near` added (MinHash clusters), interleaved, and is timed as
whole-process CPU seconds (record.PROCESS_CPU: start-up, reading, hashing and the report included). No
peer computes the same report (Dolma's and datatrove's dedup steps remove documents while they run; the
side by side with them is bench/peers/dedup.py), so the record has one side.

    .venv/bin/python -m bench.peers.audit_dedup [--reps 3] [--files 8] [--smoke]

The last line is `dedup audit: E M tokens/CPU-s (exact passes), N M tokens/CPU-s (with --near)`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import sysconfig
import tempfile
from pathlib import Path

import numpy as np

from bench.harness import PROCESS_CPU, ROOT, interleaved, process_cpu
from bench.record import Record, add_arguments, shrink

EOS = 100257  # dolma2's end of document


def texts(limit: int | None) -> list[str]:
    """The stdlib's modules (sorted by path) and the pydoc topics, `limit` modules at most."""
    from pydoc_data.topics import topics

    lib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in lib.rglob("*.py") if "site-packages" not in p.parts)[:limit]
    out = [p.read_text(encoding="utf-8", errors="replace") for p in files]
    return out + [t for _, t in sorted(topics.items())]


def corpus(out: Path, files: int, limit: int | None) -> tuple[Path, int]:
    """The mix file and its token count: every text once, split into `files` shards of whole documents."""
    from olmax.assets import tokenizer_path
    from olmax.data.tokenize import load_tokenizer

    tok = load_tokenizer(str(tokenizer_path("dolma2", quiet=True)))
    docs = [np.asarray([*ids, EOS], dtype=np.uint32) for ids in tok.encode_batch(texts(limit), num_threads=2)]
    lines, total = [], 0
    for k, part in enumerate(np.array_split(np.arange(len(docs)), files)):
        buf = np.concatenate([docs[i] for i in part])
        path = out / f"train-{k:03d}.npy"
        buf.tofile(path)
        lines.append(f"train,{path}")
        total += buf.size
    (out / "mix.txt").write_text("\n".join(lines) + "\n")
    return out / "mix.txt", total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--files", type=int, default=8, help="shards the text is split into (default 8)")
    ap.add_argument("--modules", type=int, default=None, help="read only this many stdlib modules")
    ap.add_argument("--work", help="keep the mix here (default a temporary folder)")
    add_arguments(ap)
    args = shrink(ap.parse_args(), reps=1, files=2, modules=40)

    work = Path(args.work or tempfile.mkdtemp(prefix="olmax-audit-dedup-"))
    work.mkdir(parents=True, exist_ok=True)
    mix, tokens = corpus(work, args.files, args.modules)
    entry = "import sys; from olmax.cli import main; sys.exit(main(sys.argv[1:]))"  # the `olmax` command
    report = work / "dedup.json"
    base = [sys.executable, "-c", entry, "audit", "dedup", "--mix", str(mix), "--threads", "1"]
    base += ["--max-dup-doc-frac", "1", "--max-repeated-span-frac", "1", "--out", str(report)]
    near = ["--near", "--tokenizer", "dolma2", "--max-near-dup-frac", "1"]  # raw shards: name the tokenizer
    cmds = {"exact": base, "near": [*base, *near]}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    rec = Record("audit_dedup", argv=sys.argv, smoke=args.smoke, results=args.results)
    rec.side(
        "olmax",
        version="this tree",
        setting="olmax audit dedup --threads 1 (span 50, documents of 32 tokens or more); and with --near "
        "(Dolma 3's MinHash defaults)",
    )
    for cmd in cmds.values():  # untimed: fills the kernels' compile caches
        process_cpu(cmd, check=True, capture_output=True, cwd=ROOT, env=env)
    found: dict[str, dict] = {}

    def timed(name: str):
        def one() -> float:
            run = process_cpu(cmds[name], check=True, capture_output=True, cwd=ROOT, env=env)
            found[name] = json.loads(report.read_text())
            return run.cpu_s

        return one

    cpu = interleaved({name: timed(name) for name in cmds}, args.reps)
    rates = {}
    for name in cmds:
        rec.timings(f"audit_{name}", "olmax", cpu[name], "s", PROCESS_CPU)
        rates[name] = rec.figure(
            f"olmax_{name}_tokens_per_cpu_s",
            [tokens / c / 1e6 for c in cpu[name]],
            "M tokens/CPU-s",
            tokens=tokens,
        )
    rec.note("input", {"tokens": tokens, "files": args.files, "modules": args.modules or "all"})
    rec.note("verdict", {name: found[name].get("verdict") for name in cmds})
    path = rec.write()
    print(f"input: {tokens:,} tokens in {args.files} files; peer: none (see the docstring); record {path}")
    print(
        f"dedup audit: {rates['exact']['median']:.2f} M tokens/CPU-s (exact passes), "
        f"{rates['near']['median']:.2f} M tokens/CPU-s (with --near)"
    )


if __name__ == "__main__":
    main()

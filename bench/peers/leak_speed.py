"""Leak-audit speed end to end: the `olmax audit leaks` command, start to report, against every bundled
held-out set, on a training mix of --tokens tokens; the record is bench/results/leaks.json.

Training text: the Python standard library and pydoc topics tokenized with dolma2, repeated with a per-copy
shuffle of document order until --tokens is reached (raw uint32 shards, documents ended by EOS, no
sidecar: the audit finds them by an EOS scan), plus one shard of --plants stdlib documents, each with a
bundled eval item of >= 25 words pasted in, so verification runs on real candidates. Each repetition runs
the command in a process of its own (`--threads 1`) and is timed as whole-process CPU seconds
(record.PROCESS_CPU: tokenizer and index build, probing, verification and the report included); the
report's own timing gives the probe + verify part (its `tokens_per_s`, one thread). No peer tool runs
the same audit (decon, the lm-eval janitor and NeMo-Curator decide by other rules and need a cluster
or an index build of their own), so the record has one side and the target is absolute: 20 M tokens/s
per core for the probe + verify part.

    .venv/bin/python -m bench.peers.leak_speed [--tokens 200e6] [--reps 3] [--smoke]

The last line is `leak audit: W M tokens/s per core (whole command), P M tokens/s (probe + verify)`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
from pathlib import Path

import numpy as np

from bench.harness import PROCESS_CPU, ROOT, WARM_WALL, interleaved, process_cpu
from bench.record import Record, add_arguments

EOS = 100257  # dolma2's end of document


def corpus(out: Path, total: int, plants: int, tok) -> Path:
    """The mix file of --tokens shuffled copies of stdlib + pydoc text and one shard of planted items."""
    from olmax.assets import EVAL_SETS
    from olmax.evalsets.read import load_eval
    from olmax.testing.prepare_testdata import pydoc_texts, stdlib_texts

    texts = [t for _, t in stdlib_texts(10_000)] + [t for _, t in pydoc_texts()]
    docs = [np.asarray(list(t) + [EOS], dtype=np.uint32) for t in tok.encode_batch(texts, num_threads=2) if t]
    rng = np.random.default_rng(0)
    lines, written, k = [], 0, 0
    while written < total:
        buf = np.concatenate([docs[i] for i in rng.permutation(len(docs))])[
            : min(50_000_000, total - written)
        ]
        path = out / f"train-{k:03d}.npy"
        buf.tofile(path)
        lines.append(f"train,{path}")
        written += buf.size
        k += 1
    items = [it.text for name in sorted(EVAL_SETS) for it in load_eval(name)[1] if len(it.text.split()) >= 25]
    pick = random.Random(0)
    hosts = pick.sample(texts, min(plants, len(texts)))
    planted = [f"{h[:800]}\n{pick.choice(items)}\n{h[800:]}" for h in hosts]
    ids = tok.encode_batch(planted, num_threads=2)
    np.concatenate([np.asarray(list(t) + [EOS], dtype=np.uint32) for t in ids]).tofile(out / "plants.npy")
    lines.append(f"plants,{out / 'plants.npy'}")
    (out / "mix.txt").write_text("\n".join(lines) + "\n")
    return out / "mix.txt"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=float, default=200e6)
    ap.add_argument("--plants", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--work", help="keep the corpus here (default a temporary folder)")
    add_arguments(ap)
    args = ap.parse_args()
    if args.smoke:
        args.tokens, args.plants, args.reps = 5e6, 100, 1

    from olmax.assets import EVAL_SETS, tokenizer_path
    from olmax.data.tokenize import load_tokenizer

    tok = load_tokenizer(str(tokenizer_path("dolma2", quiet=True)))
    work = Path(args.work or tempfile.mkdtemp(prefix="olmax-leak-speed-"))
    work.mkdir(parents=True, exist_ok=True)
    mix = corpus(work, int(args.tokens), args.plants, tok)
    report = work / "leaks.json"
    entry = "import sys; from olmax.cli import main; sys.exit(main(sys.argv[1:]))"  # the `olmax` command
    cmd = [sys.executable, "-c", entry, "audit", "leaks", "--mix", str(mix), "--threads", "1"]
    for name in sorted(EVAL_SETS):
        cmd += ["--eval", name]
    cmd += ["--gate", "none", "--out", str(report)]
    setting = "olmax audit leaks --threads 1, every bundled set, default rule"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    rec = Record("leaks", argv=sys.argv, smoke=args.smoke, results=args.results)
    rec.side("olmax", version="this tree", setting=setting)
    process_cpu(
        cmd, check=True, capture_output=True, cwd=ROOT, env=env
    )  # untimed: compiles the kernels' caches
    part, tokens = [], [0]

    def one() -> float:
        run = process_cpu(cmd, check=True, capture_output=True, cwd=ROOT, env=env)
        rep = json.loads(report.read_text())
        tokens[0] = rep["training"]["tokens"]
        part.append(rep["timing"]["probe_s"] + rep["timing"]["verify_s"])
        return run.cpu_s

    cpu = interleaved({"olmax": one}, args.reps)["olmax"]
    tokens = tokens[0]
    rec.timings("audit", "olmax", cpu, "s", PROCESS_CPU)
    rec.timings(
        "probe_verify", "olmax", part, "s", WARM_WALL + " (the report's probe_s + verify_s, one thread)"
    )
    whole = rec.figure("olmax_tokens_per_cpu_s", [tokens / c / 1e6 for c in cpu], "M tokens/s", tokens=tokens)
    inner = rec.figure("olmax_probe_verify_tokens_per_s", [tokens / p / 1e6 for p in part], "M tokens/s")
    path = rec.write()
    print(f"peer: none (see the docstring); record {path}")
    print(
        f"leak audit: {whole['median']:.1f} M tokens/s per core (whole command), "
        f"{inner['median']:.1f} M tokens/s (probe + verify) over {tokens:,} tokens"
    )


if __name__ == "__main__":
    main()

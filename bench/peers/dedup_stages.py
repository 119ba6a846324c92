"""olmax's own dedup stages, timed per stage on real text (the stdlib sources and pydoc topics, as
bench/peers/prepare.py), with the memory the decision pass holds per document. The side-by-side run against
datatrove, rensa and datasketch is bench/peers/dedup.py; this one says where olmax's time goes.

    python -m bench.peers.dedup_stages [--copies K]

CPU seconds (time.process_time, one thread) are reported beside wall seconds: per-core MB/s is the
input's MB over CPU seconds, which a loaded machine does not inflate as much as it does wall time.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path

import numpy as np

from bench.record import add_arguments, shrink
from olmax.data.prepare.dedup_stages import DedupSettings, plan
from olmax.data.prepare.local_runner import PrepareConfig
from olmax.data.prepare.mixspec import SourceSpec
from olmax.dedup.minhash import cluster, signatures
from olmax.dedup.params import MinHashParams
from olmax.dedup.shingles import text_shingles
from olmax.dedup.substring import repeated_spans
from olmax.testing.prepare_testdata import pydoc_texts, stdlib_texts, write_jsonl


def timed(fn, *args):
    w, c = time.perf_counter(), time.process_time()
    out = fn(*args)
    return out, time.perf_counter() - w, time.process_time() - c


def corpus(copies: int, files: int = 10_000) -> list[tuple[str, str]]:
    """The stdlib + pydoc texts, and `copies` lightly edited copies of every tenth one (planted work)."""
    docs = stdlib_texts(files) + pydoc_texts()
    extra = []
    for k in range(copies):
        for i, t in docs[::10]:
            extra.append((f"{i}~{k}", t.replace("the", "a", 2) + f"\nedited copy {k}\n"))
    return docs + extra


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=1, help="edited copies of every tenth document")
    ap.add_argument("--docs", type=int, default=10_000, help="stdlib files read (pydoc topics are added)")
    add_arguments(ap)
    args = shrink(ap.parse_args(), docs=40)
    docs = corpus(args.copies, args.docs)
    texts = [t for _, t in docs]
    mb = sum(len(t.encode()) for t in texts) / 1e6
    p = MinHashParams()
    # compile once (numba caches to disk; the first run of a fresh checkout compiles here)
    sh, off = text_shingles(texts[:3], p.ngram)
    cluster(sh, off, signatures(sh, off, p), p)
    repeated_spans([b"x" * 600 + b"y", b"x" * 600, b"z" + b"x" * 600], 500)
    rows = []
    (sh, off), w1, c1 = timed(text_shingles, texts, p.ngram)
    sig, w2, c2 = timed(signatures, sh, off, p)
    cl, w3, c3 = timed(cluster, sh, off, sig, p)
    rows += [("shingle (normalize, word 5-grams)", w1, c1), ("sign (286 hashes)", w2, c2)]
    rows += [("LSH + verify + components", w3, c3)]
    data = [t.encode() for t in texts]
    _, w4, c4 = timed(repeated_spans, data, 500)
    rows.append(("substring (>= 500 bytes)", w4, c4))
    print(f"{len(texts)} documents, {mb:.2f} MB of text; {cl.removed.size} minhash removals")
    print(f"{'stage':36s} {'wall s':>8s} {'CPU s':>8s} {'MB/s/core':>10s}")
    for name, w, c in rows:
        print(f"{name:36s} {w:8.3f} {c:8.3f} {mb / max(c, 1e-9):10.1f}")
    mh = c1 + c2 + c3
    print(f"{'minhash in memory (sum)':36s} {w1 + w2 + w3:8.3f} {mh:8.3f} {mb / mh:10.1f}")
    with tempfile.TemporaryDirectory() as d:
        write_jsonl(Path(d, "docs.jsonl"), docs)
        base = PrepareConfig(tokenizer="dolma2", out=d, sources=(SourceSpec("bench", (f"{d}/docs.jsonl",)),))
        files = {"bench": [f"{d}/docs.jsonl"]}
        for stages in (("minhash",), ("exact", "minhash", "substring")):
            cfg = replace(base, dedup=DedupSettings(stages=stages))
            tracemalloc.start()
            dec, w, c = timed(plan, cfg, files)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            name = "prepare pass: jsonl -> " + ",".join(stages)
            print(
                f"{name:36s} {w:8.3f} {c:8.3f} {mb / max(c, 1e-9):10.1f}   counts {json.dumps(dec['counts'])}"
            )
            print(f"    peak traced memory {peak / 1e6:.1f} MB = {peak / len(docs):,.0f} bytes per document")
    print(
        f"(minhash holds per document its 286 x 4-byte signature and its shingle set, 8 bytes a word; "
        f"mean words per document here: {int(np.diff(off).mean())})"
    )


if __name__ == "__main__":
    main()

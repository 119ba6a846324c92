"""Leak-probe throughput: `olmax audit leaks` machinery over >= 200M training tokens vs >= 1M eval n-grams.

Training tokens: the Python standard library and pydoc topics tokenized with dolma2, repeated with a
per-copy token shuffle of document order until --tokens is reached, written as raw uint32 shards.
Eval side: the bundled held-out sets (all of them) indexed at n = 13 words. Prints peak memory, the
speed of xxh3 over the same bytes (the hashing limit), and, last, the probe rate per core.

    .venv/bin/python bench/audit.py --tokens 200e6 --threads 1
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import xxhash

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "data"))


def _timed(fn, *args) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


def build_corpus(out: Path, total: int, tok, shard_tokens: int) -> list[str]:
    from prepare_testdata import pydoc_texts, stdlib_texts

    texts = [t for _, t in stdlib_texts(10_000)] + [t for _, t in pydoc_texts()]
    ids = tok.encode_batch(texts, num_threads=2)
    docs = [np.asarray(list(t) + [100257], dtype=np.uint32) for t in ids if t]
    rng = np.random.default_rng(0)
    paths, written, k = [], 0, 0
    while written < total:
        order = rng.permutation(len(docs))
        buf = np.concatenate([docs[i] for i in order])[: min(shard_tokens, total - written)]
        path = out / f"train-{k:03d}.npy"
        buf.tofile(path)
        paths.append(str(path))
        written += buf.size
        k += 1
    return paths


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=float, default=200e6)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ngram", type=int, default=13)
    ap.add_argument("--work", default=None, help="folder for the corpus (default a temp dir)")
    args = ap.parse_args()

    from olmax.assets import EVAL_SETS, tokenizer_path
    from olmax.audit.evalindex import EvalIndex
    from olmax.audit.evalsets import load_eval
    from olmax.audit.leaks import HitSet, probe_file
    from olmax.audit.normalize import WordTables
    from olmax.data.tokenize import load_tokenizer

    tok_path = str(tokenizer_path("dolma2", quiet=True))
    tok = load_tokenizer(tok_path)
    work = Path(args.work or tempfile.mkdtemp(prefix="olmax-bench-audit-"))
    work.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    paths = sorted(str(p) for p in work.glob("train-*.npy"))
    if sum(os.path.getsize(p) for p in paths) // 4 < args.tokens:
        paths = build_corpus(work, int(args.tokens), tok, 50_000_000)
    train_tokens = sum(os.path.getsize(p) for p in paths) // 4
    print(f"corpus: {train_tokens:,} tokens in {len(paths)} shards ({time.perf_counter() - t:.1f}s)")

    t = time.perf_counter()
    tables = WordTables(tok_path)
    seqs = []
    for name in EVAL_SETS:
        _, items = load_eval(name)
        for ids in tok.encode_batch([it.text for it in items], num_threads=2):
            seqs.append(tables.words(np.asarray(ids, dtype=np.int64))[0])
    index = EvalIndex(seqs, args.ngram, 4)
    print(f"eval index: {len(seqs):,} items, {index.num_keys:,} keys ({time.perf_counter() - t:.1f}s)")

    data = np.concatenate([np.fromfile(p, dtype=np.uint32) for p in paths[:16]]).tobytes()
    dt = min(_timed(xxhash.xxh3_64_intdigest, data) for _ in range(5))
    print(f"xxh3-64 over the same bytes ({len(data) / 1e6:.0f} MB, best of 5): {len(data) / dt / 1e9:.2f} "
          f"GB/s = {len(data) / 4 / dt / 1e6:.0f}M tokens/s (the hashing limit)")
    del data

    from concurrent.futures import ThreadPoolExecutor

    t = time.perf_counter()
    cpu0 = time.process_time()
    kept = HitSet(6)
    with ThreadPoolExecutor(max_workers=args.threads) as pool:
        for file_hits, _ in pool.map(lambda fp: probe_file(fp[1], fp[0], index, tables, cap_docs=6),
                                     enumerate(paths)):
            kept.add(file_hits)
    hits = kept.result()
    wall = time.perf_counter() - t
    cpu = time.process_time() - cpu0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"probe: {train_tokens:,} tokens in {wall:.1f}s wall, {cpu:.1f}s CPU, {args.threads} thread(s); "
          f"{hits.size:,} hits kept; peak RSS {peak:,.0f} MiB")
    print(f"audit probe tokens/s per core = {train_tokens / cpu / 1e6:.1f}M")


if __name__ == "__main__":
    main()

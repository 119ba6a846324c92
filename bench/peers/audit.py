"""Leak-audit throughput: `olmax audit leaks` (retrieval + verification) over >= 200M training tokens vs
every bundled held-out set (~1M eval n-grams).

Training tokens: the Python standard library and pydoc topics tokenized with dolma2, repeated with a
per-copy shuffle of document order until --tokens is reached, written as raw uint32 shards, plus one
shard of contaminated documents: --plants bundled eval items of >= 25 words, each pasted into a stdlib
document (about 10 per million training tokens at the defaults), so verification runs at a realistic
rate of candidates (every plant is a candidate in every copy of its document, and so are the training
text's own matches of common n-grams). Eval side: the bundled sets indexed as the audit does (n = 8
words, templates out). Prints peak memory, the speed of xxh3 over the same bytes (the hashing limit),
each part's CPU time and candidate count, and, last, the whole audit's rate per core.

    .venv/bin/python -m bench.peers.audit --tokens 200e6 --threads 1
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import xxhash

from bench.record import add_arguments, shrink


def _timed(fn, *args) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


def build_corpus(out: Path, total: int, tok, shard_tokens: int) -> list[str]:
    from olmax.testing.prepare_testdata import pydoc_texts, stdlib_texts

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
    ap.add_argument("--ngram", type=int, default=8)
    ap.add_argument("--plants", type=int, default=2000, help="eval items pasted into training documents")
    ap.add_argument("--work", default=None, help="folder for the corpus (default a temp dir)")
    add_arguments(ap)
    args = shrink(ap.parse_args(), tokens=2e6, plants=50)

    from olmax.assets import EVAL_SETS, tokenizer_path
    from olmax.audit.leaks.eval_side import index_evals
    from olmax.audit.leaks.normalize import word_tables
    from olmax.audit.leaks.run import HitSet, LeakConfig, decide, probe_file
    from olmax.data.stream import StreamSpec
    from olmax.data.tokenize import load_tokenizer

    tok_path = str(tokenizer_path("dolma2", quiet=True))
    tok = load_tokenizer(tok_path)
    work = Path(args.work or tempfile.mkdtemp(prefix="olmax-bench-audit-"))
    work.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    paths = sorted(str(p) for p in work.glob("train-*.npy"))
    if sum(os.path.getsize(p) for p in paths) // 4 < args.tokens:
        paths = build_corpus(work, int(args.tokens), tok, 50_000_000)
    paths.append(str(plant_shard(work / "plants.npy", tok, args.plants)))
    train_tokens = sum(os.path.getsize(p) for p in paths) // 4
    print(
        f"corpus: {train_tokens:,} tokens in {len(paths)} shards, {args.plants:,} planted items "
        f"({time.perf_counter() - t:.1f}s)"
    )

    t = time.perf_counter()
    tables = word_tables(tok_path)
    cfg = LeakConfig(StreamSpec(mix="unused"), evals=tuple(EVAL_SETS), ngram=args.ngram, threads=2)
    ev = index_evals(cfg, tok_path, tables)
    index = ev.index
    print(
        f"eval index: {len(ev.items):,} items, {index.num_keys:,} keys, {index.template_keys:,} template "
        f"windows left out ({time.perf_counter() - t:.1f}s)"
    )

    data = np.concatenate([np.fromfile(p, dtype=np.uint32) for p in paths[:16]]).tobytes()
    dt = min(_timed(xxhash.xxh3_64_intdigest, data) for _ in range(5))
    print(
        f"xxh3-64 over the same bytes ({len(data) / 1e6:.0f} MB, best of 5): {len(data) / dt / 1e9:.2f} "
        f"GB/s = {len(data) / 4 / dt / 1e6:.0f}M tokens/s (the hashing limit)"
    )
    del data

    from concurrent.futures import ThreadPoolExecutor

    t = time.perf_counter()
    cpu0 = time.process_time()
    kept = HitSet(cfg.max_docs_per_key, pair_from=index.pair_from)
    with ThreadPoolExecutor(max_workers=args.threads) as pool:
        for file_hits, _ in pool.map(
            lambda fp: probe_file(fp[1], fp[0], index, tables, cap_docs=cfg.max_docs_per_key),
            enumerate(paths),
        ):
            kept.add(file_hits)
    hits = kept.result()
    wall = time.perf_counter() - t
    cpu_probe = time.process_time() - cpu0
    cpu0 = time.process_time()
    contaminated, _, _, stats, paraphrases = decide(hits, ev, paths, ["bench"] * len(paths), tables, cfg)
    cpu_verify = time.process_time() - cpu0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    found = {(c["eval"], c["id"]) for c in contaminated}
    print(
        f"retrieval: {train_tokens:,} tokens in {wall:.1f}s wall, {cpu_probe:.1f}s CPU, {args.threads} "
        f"thread(s); {hits.size:,} hits kept ({train_tokens / cpu_probe / 1e6:.1f}M tokens/s per core)"
    )
    print(
        f"verification: {stats['pairs']:,} (item, document) pairs, {stats['verified']:,} aligned, "
        f"{stats['paraphrase_candidates']:,} paraphrase candidates read, "
        f"{cpu_verify:.2f}s CPU ({100 * cpu_verify / (cpu_probe + cpu_verify):.1f}% of the audit); "
        f"{len(found):,} items flagged of {args.plants:,} planted, {len(paraphrases):,} reported as "
        f"paraphrase candidates; peak RSS {peak:,.0f} MiB"
    )
    print(f"audit probe tokens/s per core = {train_tokens / (cpu_probe + cpu_verify) / 1e6:.1f}M")


def plant_shard(path: Path, tok, n: int) -> Path:
    """Raw uint32 shard of `n` stdlib documents, each with one bundled eval item (>= 25 words) pasted in."""
    import random

    from olmax.assets import EVAL_SETS
    from olmax.evalsets.read import load_eval
    from olmax.testing.prepare_testdata import stdlib_texts

    rng = random.Random(0)
    pool = [it.text for name in EVAL_SETS for it in load_eval(name)[1] if len(it.text.split()) >= 25]
    hosts = [t for _, t in stdlib_texts(10_000)]
    docs = []
    for text in rng.sample(pool, n):
        host = rng.choice(hosts)[:4000]
        cut = rng.randrange(len(host) + 1)
        docs.append(host[:cut] + "\n" + text + "\n" + host[cut:])
    ids = tok.encode_batch(docs, num_threads=2)
    np.concatenate([np.asarray(list(t) + [100257], dtype=np.uint32) for t in ids]).tofile(path)
    return path


if __name__ == "__main__":
    main()

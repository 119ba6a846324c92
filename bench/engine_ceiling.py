"""The tokenizer engine alone on the texts `olmax data prepare` tokenizes: bench/prepare.py's ceiling.

Usage: python bench/engine_ceiling.py TEXTS_DIR OUT.json [--engine auto]
       python bench/engine_ceiling.py --reader 'GLOB' OUT.json

TEXTS_DIR holds `texts.bin` (the UTF-8 texts back to back) and `offsets.npy` (where each starts, one more
than there are texts), written by bench/prepare.py from its corpus exactly as prepare would tokenize them
(`--dolma-compat`: stripped, the empty ones left out). This process loads the engine as prepare does
(`olmax.data.tokenize.load_tokenizer`, the probe included), cuts the texts into prepare's ~4 MB batches and
encodes them on one thread with `Tokenizer.encode_flat`: no JSON, no decompression, no shards. It writes
OUT.json: the engine and why, the tokens (ids plus one EOS a document, as a shard holds them), and the
CPU seconds of the encode calls alone after an untimed warm-up call. bench/prepare.py times the whole
process the same way it times prepare and dolma.

`--reader GLOB`: prepare's reader alone instead (`olmax.data.prepare.batches.read_batches` over the files:
decompression, JSON parsing, the documents and their batches, no engine): OUT.json gets its CPU seconds
(`read_cpu_s`), what prepare spends before any token exists.
"""

from __future__ import annotations

import argparse
import glob
import json
import time
from pathlib import Path

import numpy as np

from olmax.assets import tokenizer_path
from olmax.data import readers
from olmax.data.prepare.batches import BATCH_TEXT_BYTES, read_batches
from olmax.data.prepare.config import PrepareConfig
from olmax.data.tokenize import load_tokenizer


def read_texts(folder: Path) -> list[str]:
    data = (folder / "texts.bin").read_bytes()
    offsets = np.load(folder / "offsets.npy").tolist()
    return [data[a:b].decode("utf-8") for a, b in zip(offsets[:-1], offsets[1:])]


def batches(texts: list[str]) -> list[list[str]]:
    """prepare's batching (olmax.data.prepare.batches.read_batches): a batch closes at ~4 MB of text."""
    out, cur, size = [], [], 0
    for t in texts:
        cur.append(t)
        size += len(t)
        if size >= BATCH_TEXT_BYTES:
            out.append(cur)
            cur, size = [], 0
    return out + ([cur] if cur else [])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("texts", type=Path, nargs="?")
    ap.add_argument("--reader", metavar="GLOB", help="time prepare's reader on these files instead")
    ap.add_argument("out", type=Path)
    ap.add_argument("--engine", default="auto")
    ap.add_argument("--tokenizer", default="dolma2")
    args = ap.parse_args()
    if args.reader:
        files = sorted(glob.glob(args.reader))
        cfg = PrepareConfig(tokenizer=args.tokenizer, out="", sources=(), dolma_compat=True)
        start = time.process_time()
        docs = sum(len(b) for b in read_batches(files, cfg, "text", (0, 0), readers.ReadStats()))
        result = {"files": len(files), "docs": docs, "read_cpu_s": time.process_time() - start}
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        return
    texts = read_texts(args.texts)
    tok = load_tokenizer(str(tokenizer_path(args.tokenizer, quiet=True)), args.engine)
    tok.encode_flat(["an untimed warm-up call: the engine's first call builds its tables"])
    tokens = 0
    start = time.process_time()
    for batch in batches(texts):
        tokens += int(tok.encode_flat(batch, utf8_checked=True)[0].size)
    warm_cpu = time.process_time() - start
    result = {
        "engine": tok.engine,
        "engine_version": tok.engine_version,
        "engine_reason": tok.engine_reason,
        "tokens": tokens + len(texts),
        "docs": len(texts),
        "warm_cpu_s": warm_cpu,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""The tokenizer engine alone on the texts `olmax data prepare` tokenizes: bench/peers/prepare.py's ceiling.

Usage: python -m bench.peers.engine_ceiling TEXTS_DIR OUT.json [--engine auto]
       python -m bench.peers.engine_ceiling --reader 'GLOB' OUT.json
       python -m bench.peers.engine_ceiling --pieces 'GLOB' OUT.json

TEXTS_DIR holds `texts.bin` (the UTF-8 texts back to back) and `offsets.npy` (where each starts, one more
than there are texts), written by bench/peers/prepare.py from its corpus exactly as prepare would tokenize them
(`--dolma-compat`: stripped, the empty ones left out). This process loads the engine as prepare does
(`olmax.data.tokenize.load_tokenizer`, the probe included), cuts the texts into prepare's ~4 MB batches and
encodes them on one thread with `Tokenizer.encode_utf8`, the engine's fastest way in (gigatoken reads the
UTF-8 buffer itself, with no Python string per text, for less CPU than a list of strings takes): no JSON, no
decompression, no shards. It writes OUT.json: the engine and why, the tokens (ids plus one EOS a document, as a shard holds them), and the
CPU seconds of the encode calls alone after an untimed warm-up call. bench/peers/prepare.py times the whole
process the same way it times prepare and dolma.

`--reader GLOB`: prepare's reader alone instead (`olmax.data.prepare.batches.read_batches` over the files as
prepare reads them: decompression, the compiled reader where it is built, the documents and their batches,
no engine): OUT.json gets its CPU seconds
(`read_cpu_s`), what prepare spends before any token exists.

`--pieces GLOB`: prepare's own pieces, called one after the other in one plain loop on one thread, with
nothing of prepare's around them (no threads, no queues, no journal, no progress, no manifest): its reader
(`read_batches`: the compiled reader where it is built), `encode_docs` and its `ShardWriter` (xxh64, the
write, fsync, the level-9 sidecar) into one shard under OUT.json's folder. OUT.json gets the CPU seconds past
the tokenizer's load and warm-up call (`warm_cpu_s`, the engine's clock), the tokens and the shard's xxh64:
what the pieces cost with no pipeline around them.
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
from olmax.data.prepare.batches import BATCH_TEXT_BYTES, Utf8Batch, encode_docs, read_batches
from olmax.data.prepare.prepare_config import PrepareConfig
from olmax.data.shards import ShardWriter
from olmax.data.tokenize import Tokenizer, load_tokenizer


def read_texts(folder: Path) -> tuple[bytes, np.ndarray]:
    """The texts (UTF-8 back to back) and where each starts (one more offset than there are texts)."""
    return (folder / "texts.bin").read_bytes(), np.load(folder / "offsets.npy")


def batches(utf8: bytes, offsets: np.ndarray) -> list[tuple[bytes, np.ndarray]]:
    """prepare's batching (olmax.data.prepare.batches.read_batches): a batch closes at ~4 MB of text; each
    as its UTF-8 and its texts' offsets from 0."""
    out, first = [], 0
    bounds = offsets.tolist()
    for i in range(1, len(bounds)):
        if bounds[i] - bounds[first] >= BATCH_TEXT_BYTES or i == len(bounds) - 1:
            out.append((utf8[bounds[first] : bounds[i]], offsets[first : i + 1] - bounds[first]))
            first = i
    return out


def bare_pieces(files: list[str], tok: Tokenizer, folder: Path) -> dict:
    """`--pieces`: prepare's pieces in one loop (see the module's docstring), `--dolma-compat`'s texts."""
    cfg = PrepareConfig(tokenizer="", out="", sources=(), dolma_compat=True)
    writer = ShardWriter(folder / "pieces.npy", folder)
    stats = readers.ReadStats()
    for batch in read_batches(files, cfg, "text", (0, 0), stats, utf8=tok.eos_text or ""):
        encoded = encode_docs(tok, batch, dolma_compat=True)
        docs = [doc for _, doc, _ in encoded.kept]
        writer.add_batch(encoded.tokens, encoded.lengths, docs, sum(encoded.nbytes))
    info = writer.close()
    return {"tokens": info.tokens, "docs": info.docs, "xxh64": info.xxh64}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("texts", type=Path, nargs="?")
    ap.add_argument("--reader", metavar="GLOB", help="time prepare's reader on these files instead")
    ap.add_argument("--pieces", metavar="GLOB", help="time prepare's pieces in one bare loop on these files")
    ap.add_argument("out", type=Path)
    ap.add_argument("--engine", default="auto")
    ap.add_argument("--tokenizer", default="dolma2")
    args = ap.parse_args()
    if args.reader:
        files = sorted(glob.glob(args.reader))
        cfg = PrepareConfig(tokenizer=args.tokenizer, out="", sources=(), dolma_compat=True)
        eos_text = load_tokenizer(str(tokenizer_path(args.tokenizer, quiet=True)), args.engine).eos_text
        start = time.process_time()
        stream = read_batches(files, cfg, "text", (0, 0), readers.ReadStats(), utf8=eos_text or "")
        docs = sum(len(b.docs if isinstance(b, Utf8Batch) else b) for b in stream)
        result = {"files": len(files), "docs": docs, "read_cpu_s": time.process_time() - start}
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        return
    tok = load_tokenizer(str(tokenizer_path(args.tokenizer, quiet=True)), args.engine)
    if args.pieces:
        tok.encode_flat(["an untimed warm-up call: the engine's first call builds its tables"])
        start = time.process_time()
        result = bare_pieces(sorted(glob.glob(args.pieces)), tok, args.out.parent)
        result["warm_cpu_s"] = time.process_time() - start
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        return
    utf8, offsets = read_texts(args.texts)
    parts = batches(utf8, offsets)
    tok.encode_flat(["an untimed warm-up call: the engine's first call builds its tables"])
    tokens = 0
    start = time.process_time()
    for part, bounds in parts:
        tokens += int(tok.encode_utf8(part, bounds)[0].size)
    warm_cpu = time.process_time() - start
    result = {
        "engine": tok.engine,
        "engine_version": tok.engine_version,
        "engine_reason": tok.engine_reason,
        "tokens": tokens + len(offsets) - 1,
        "docs": len(offsets) - 1,
        "warm_cpu_s": warm_cpu,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()

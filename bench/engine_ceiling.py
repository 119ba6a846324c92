"""The tokenizer engine alone on the texts `olmax data prepare` tokenizes: bench/prepare.py's ceiling.

Usage: python bench/engine_ceiling.py TEXTS_DIR OUT.json [--engine auto]
       python bench/engine_ceiling.py --reader 'GLOB' OUT.json
       python bench/engine_ceiling.py --pieces 'GLOB' OUT.json

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

`--pieces GLOB`: prepare's own pieces, called one after the other in one plain loop on one thread, with
nothing of prepare's around them (no threads, no queues, no journal, no progress, no manifest, no check of
a line beyond what simdjson gives): each file opened as prepare opens it, cut into lines, each line parsed
by simdjson, its text stripped and sized, ~4 MB batches encoded by the engine, each document's EOS added,
and the tokens written by prepare's `ShardWriter` (xxh64, fsync, the level-9 sidecar) into one shard under
OUT.json's folder. OUT.json gets the CPU seconds past the tokenizer's load and warm-up call (`warm_cpu_s`,
the engine's clock), the tokens and the shard's xxh64: the least any pipeline made of these pieces can
spend, so the best ratio to the engine such a pipeline can show.
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
from olmax.data.prepare.batches import BATCH_TEXT_BYTES, read_batches, utf8_length, with_eos
from olmax.data.prepare.config import PrepareConfig
from olmax.data.shards import ShardWriter
from olmax.data.tokenize import Tokenizer, load_tokenizer


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


def bare_pieces(files: list[str], tok: Tokenizer, folder: Path) -> dict:
    """`--pieces`: prepare's pieces in one loop (see the module's docstring); `--dolma-compat`'s texts."""
    import simdjson

    writer = ShardWriter(folder / "pieces.npy", folder)
    parser = simdjson.Parser()
    docs: list[readers.Doc] = []
    texts: list[str] = []
    sizes: list[int] = []  # UTF-8 bytes, for the shard's record

    def encode() -> None:
        ids, offsets = tok.encode_flat(texts, utf8_checked=True)
        # --dolma-compat: no second EOS after a text whose last token is EOS already
        add_eos = ~((offsets[1:] > offsets[:-1]) & (ids[np.maximum(offsets[1:] - 1, 0)] == tok.eos_token_id))
        tokens = with_eos(ids, offsets, add_eos, tok.eos_token_id)
        writer.add_batch(tokens, (np.diff(offsets) + add_eos).tolist(), docs, sum(sizes))
        docs.clear()
        texts.clear()
        sizes.clear()

    for path in files:
        with readers._open_binary(path) as f:
            head, lineno, size = b"", 0, 0
            while block := f.read(readers.READ_BYTES):
                block = head + block if head else block
                end = block.rfind(b"\n") + 1
                head, view, start = block[end:], memoryview(block), 0
                while start < end:
                    stop = block.find(b"\n", start, end) + 1
                    obj = parser.parse(view[start:stop])
                    text, doc_id = obj.get("text").strip(), obj.get("id")
                    del obj  # simdjson reuses its parser only once no object of the last parse is alive
                    lineno, start = lineno + 1, stop
                    if text:
                        doc = readers.Doc(str(doc_id), text, path, lineno)
                        docs.append(doc)
                        texts.append(text)
                        sizes.append(utf8_length(text, doc))
                        size += len(text)
                        if size >= BATCH_TEXT_BYTES:  # the engine's batches, as the ceiling cuts them
                            encode()
                            size = 0
            if head:
                raise SystemExit(f"{path}: the last line has no newline; --pieces reads whole lines only")
    if texts:
        encode()
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
        start = time.process_time()
        docs = sum(len(b) for b in read_batches(files, cfg, "text", (0, 0), readers.ReadStats()))
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
    texts = read_texts(args.texts)
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

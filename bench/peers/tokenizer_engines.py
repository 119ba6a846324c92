"""Which tokenizer engines give exactly `tokenizers`' ids for dolma2, and how fast each is on one core.

Usage: python -m bench.peers.tokenizer_engines [--reps 3] [--smoke] [--results DIR]

Candidates: every one of gigatoken, fastokens, tokie, tiktoken (olmax's cl100k-shaped path) and `tokenizers`
itself that imports here (install the others beside olmax to compare them; they are not olmax dependencies).
For each:
  1. exactness: its ids against `tokenizers`' (`encode(text, add_special_tokens=False)`) on every text of
     every kind below, counted per kind;
  2. speed: tokens per CPU-second on the code and eval-set texts in prepare's ~4 MB batches, each
     repetition on a freshly loaded engine after an untimed warm-up call, on one thread
     (RAYON_NUM_THREADS=1, FASTOKENS_BPE_THREADS=1, gigatoken's parallel=False), the engines interleaved.
Texts: the standard library's .py files, its pydoc topics, every string of every record of the bundled
eval sets, olmax's probe set (olmax/data/tokenize_probe.py) and long words and whitespace runs. The output
each engine is timed to produce is what prepare needs: every text's ids, as a flat array where the engine
offers one. Writes the record bench/results/tok-engines.json.
"""

from __future__ import annotations

import os

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # before any Rust tokenizer starts its pool
os.environ.setdefault("FASTOKENS_BPE_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import sysconfig  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from bench.harness import WARM_CPU, interleaved  # noqa: E402
from bench.record import Record, add_arguments, format_figure, package_version  # noqa: E402
from olmax.assets import eval_sets_root, tokenizer_path  # noqa: E402
from olmax.data.prepare.batches import BATCH_TEXT_BYTES  # noqa: E402
from olmax.data.tokenize import load_tokenizer  # noqa: E402
from olmax.data.tokenize_probe import probe_texts  # noqa: E402

Encode = Callable[[list[str]], list]  # texts -> each text's ids (a list or an array)


def _gigatoken(path: str) -> Encode:
    import gigatoken

    tok = gigatoken.Tokenizer(path)

    def encode(texts: list[str]) -> list:
        layout = tok.encode_batch(texts, parallel=False).layout
        off, ids = np.asarray(layout.offsets.data), np.asarray(layout.content.data)
        return [ids[a:b] for a, b in zip(off[:-1], off[1:])]

    return encode


def _fastokens(path: str) -> Encode:
    import fastokens

    tok = fastokens.Tokenizer.from_file(path)

    def encode(texts: list[str]) -> list:
        raw, raw_off = tok.encode_batch_flat(texts)
        ids, off = np.frombuffer(raw, np.uint32), np.frombuffer(raw_off, np.uint64).astype(np.int64)
        return [ids[a:b] for a, b in zip(off[:-1], off[1:])]

    return encode


def _tokie(path: str) -> Encode:
    import tokie

    tok = tokie.Tokenizer.from_json(path)
    return lambda texts: [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]


def _tiktoken(path: str) -> Encode:
    enc = load_tokenizer(path, "tiktoken")._impl.enc
    return lambda texts: [enc.encode(t, allowed_special="all") for t in texts]


def _tokenizers(path: str) -> Encode:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(path)
    return lambda texts: [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]


CANDIDATES = {
    "gigatoken": _gigatoken,
    "fastokens": _fastokens,
    "tokie": _tokie,
    "tiktoken": _tiktoken,
    "tokenizers": _tokenizers,
}


def eval_texts(limit: int | None) -> list[str]:
    """Every string field (and string list item) of every record of the bundled eval sets, one text each."""
    import pyarrow as pa

    texts = []
    for arrow in sorted(eval_sets_root(quiet=True).rglob("*.arrow")):
        with pa.memory_map(str(arrow)) as src:
            try:
                table = pa.ipc.open_stream(src).read_all()
            except pa.ArrowInvalid:
                table = pa.ipc.open_file(src).read_all()
        for row in table.to_pylist()[:limit]:
            parts = [v for v in row.values() if isinstance(v, str)]
            parts += [x for v in row.values() if isinstance(v, list) for x in v if isinstance(x, str)]
            if parts:
                texts.append("\n".join(parts))
    return texts


def kinds(smoke: bool) -> dict[str, list[str]]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in stdlib.rglob("*.py") if "site-packages" not in p.parts)[: 60 if smoke else None]
    from pydoc_data.topics import topics

    added = [
        t["content"]
        for t in json.loads(Path(tokenizer_path("dolma2", quiet=True)).read_text())["added_tokens"]
    ]
    hard = ["x" * 200_000, "supercalifragilisticexpialidocious" * 3000, " " * 100_000, "\n" * 50_000 + "end"]
    hard += ["\t \n" * 20_000, "9" * 100_000, "😀" * 20_000, "中" * 30_000, "<|endoftext|>" * 3000]
    return {
        "stdlib code": [p.read_text(encoding="utf-8", errors="replace") for p in files],
        "pydoc prose": [t for _, t in sorted(topics.items())],
        "eval sets": eval_texts(20 if smoke else None),
        "probe set": probe_texts(added),
        "long words, whitespace runs": hard,
    }


def batches(texts: list[str]) -> list[list[str]]:
    out, cur, size = [], [], 0
    for t in texts:
        cur.append(t)
        size += len(t)
        if size >= BATCH_TEXT_BYTES:
            out.append(cur)
            cur, size = [], 0
    return out + ([cur] if cur else [])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    add_arguments(ap)
    args = ap.parse_args()
    path = str(tokenizer_path("dolma2", quiet=True))
    texts = kinds(args.smoke)
    ref = _tokenizers(path)
    want = {k: [list(x) for x in ref(v)] for k, v in texts.items()}
    timed_texts = batches(texts["stdlib code"] + texts["eval sets"])
    timed_tokens = sum(len(x) for k in ("stdlib code", "eval sets") for x in want[k])

    rec = Record("tok-engines", argv=sys.argv, smoke=args.smoke, results=args.results)
    engines = {}
    for name, build in CANDIDATES.items():
        try:
            engines[name] = build(path)
        except ImportError:
            print(f"{name}: not installed")
            continue
        rec.side(name, version=package_version(name), setting="one thread, prepare's 4 MB batches")

    lines, exact_names = [], []
    for name, encode in engines.items():
        counts = {}
        for kind, xs in texts.items():
            got = encode(xs)
            counts[kind] = sum(list(g) == w for g, w in zip(got, want[kind]))
        exact = all(counts[k] == len(texts[k]) for k in texts)
        exact_names += [name] if exact else []
        rec.note(f"{name}.equal_to_tokenizers", {k: f"{counts[k]} / {len(texts[k])}" for k in texts})
        lines.append(
            f"{name}: "
            + ("exact on every text" if exact else "DIFFERS: ")
            + (
                ""
                if exact
                else "; ".join(
                    f"{k} {counts[k]:,}/{len(texts[k]):,}" for k in texts if counts[k] != len(texts[k])
                )
            )
        )

    def timed(name: str) -> Callable[[], float]:
        def run() -> float:
            encode = CANDIDATES[name](path)
            encode(["an untimed warm-up call"])
            start = time.process_time()
            for b in timed_texts:
                encode(b)
            return time.process_time() - start

        return run

    runs = interleaved({name: timed(name) for name in engines}, reps=1 if args.smoke else args.reps)
    for name, secs in runs.items():
        rec.timings("encode", name, secs, "s", WARM_CPU)
        fig = rec.figure(f"{name}_tokens_per_cpu_s", [timed_tokens / s / 1e6 for s in secs], "M tokens/CPU-s")
        lines.append(
            f"{name}: {format_figure(fig)} on one core" + ("" if name in exact_names else " (not exact)")
        )
    rec.note("texts", {k: {"texts": len(v), "tokens": sum(map(len, want[k]))} for k, v in texts.items()})
    rec.note(
        "timed", {"texts": "stdlib code + eval sets", "tokens": timed_tokens, "batches": len(timed_texts)}
    )
    rec.note("exact", exact_names)
    print(f"record: {rec.write()}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

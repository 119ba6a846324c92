"""A dedup pool larger than memory, with planted near-copies and their truth (bench/peers/dedup_pool.py,
audit_near.py and dedup_beam.py run on it).

`--gb` GB (10^9 bytes) of document text, each document about 4 KB of lines drawn at random from the Python
standard library's sources and pydoc topics (distinct lines; two such documents share almost no word
5-gram), written as Dolma-format jsonl files of about 1 GB. A `planted` share of the documents are
near-copies of an earlier document placed later in the pool, of three kinds in turn (`KINDS`): re-wrapped
and upper-cased, one word in 50 edited, and a verbatim copy with a new trailing line. The truth is their
ids and the ids they copy; `plant_jaccards` gives each plant's exact Jaccard with its source on prepare's
shingles (>= 0.8: a near-duplicate by prepare's definition), and `lsh_miss` the chance LSH's banding
never pairs them. The pool is built once per setting and reused.
"""

from __future__ import annotations

import json
import shutil
import sysconfig
import time
from pathlib import Path

import numpy as np

DOC_BYTES = 4000
FILE_BYTES = 1_000_000_000
KINDS = ("rewrapped", "edited", "trailer")


def line_pool() -> list[str]:
    """Distinct lines of real text (20+ characters) in a fixed order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    seen: dict[str, None] = {}
    for path in sorted(root.rglob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for ln in text.splitlines():
            if len(ln.strip()) >= 20:
                seen.setdefault(ln, None)
    from pydoc_data.topics import topics

    for t in topics.values():
        for ln in t.splitlines():
            if len(ln.strip()) >= 20:
                seen.setdefault(ln, None)
    return list(seen)


def near_copy(text: str, kind: str, rng: np.random.Generator) -> str:
    words = text.split()
    if kind == "rewrapped":
        return "\n".join(" ".join(words[k : k + 9]) for k in range(0, len(words), 9)).upper()
    if kind == "edited":
        for k in rng.choice(len(words), size=max(1, len(words) // 50), replace=False).tolist():
            words[k] = words[k] + "x"
        return " ".join(words)
    return text + "\n# copied from an earlier page"


def build_pool(folder: Path, gb: float, planted: float, seed: int = 11) -> dict:
    """Write the pool (or reuse it); returns its description with the planted ids."""
    stamp = folder / "pool.json"
    want = {"gb": gb, "planted": planted, "seed": seed, "doc_bytes": DOC_BYTES, "version": 2}
    if stamp.exists():
        meta = json.loads(stamp.read_text())
        if meta["setting"] == want:
            return meta
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "input").mkdir(parents=True)
    lines = line_pool()
    rng = np.random.default_rng(seed)
    mean_line = sum(map(len, lines[:20000])) / min(20000, len(lines)) + 1
    per_doc = max(2, int(DOC_BYTES / mean_line))
    target, written, docs, f, fi, in_file = int(gb * 1e9), 0, 0, None, 0, 0
    recent: list[tuple[str, str]] = []  # (id, text) of the documents a near-copy may copy (the last 1,000)
    plants: dict[str, list[str]] = {}  # plant id -> [kind, the id it copies]
    t0 = time.monotonic()
    while written < target:
        if f is None or in_file >= FILE_BYTES:
            if f is not None:
                f.close()
            f = open(folder / "input" / f"part-{fi:04d}.jsonl", "w", encoding="utf-8")  # noqa: SIM115
            fi, in_file = fi + 1, 0
        if recent and rng.random() < planted:
            kind = KINDS[len(plants) % len(KINDS)]
            source_id, source = recent[int(rng.integers(len(recent)))]
            text = near_copy(source, kind, rng)
            doc_id = f"plant-{len(plants)}"
            plants[doc_id] = [kind, source_id]
        else:
            text = "\n".join(lines[i] for i in rng.integers(0, len(lines), per_doc).tolist())
            doc_id = f"doc-{docs}"
            recent.append((doc_id, text))
            if len(recent) > 1000:
                recent.pop(0)
        line = json.dumps({"id": doc_id, "text": text}) + "\n"
        f.write(line)
        written += len(text.encode("utf-8"))
        in_file += len(line)
        docs += 1
        if docs % 200_000 == 0:
            print(f"  pool: {written / 1e9:.2f} of {gb:g} GB ({time.monotonic() - t0:.0f} s)", flush=True)
    f.close()
    meta = {"setting": want, "documents": docs, "text_bytes": written, "files": fi, "plants": plants}
    stamp.write_text(json.dumps(meta))
    return meta


def plant_jaccards(folder: Path, plants: dict[str, list[str]]) -> dict[str, float]:
    """Each plant's exact Jaccard with the document it copies, on prepare's shingles (word 5-grams of the
    normalized text): whether it is a near-duplicate by the definition prepare applies (>= 0.8)."""
    from olmax.dedup.minhash import jaccard
    from olmax.dedup.shingles import text_shingles

    wanted = set(plants) | {src for _, src in plants.values()}
    texts: dict[str, str] = {}
    for path in sorted((folder / "input").glob("*.jsonl")):
        with open(path, encoding="utf-8") as f:
            for line in f:
                doc_id = line[8 : line.index('"', 8)]  # {"id": "...": the writer's own layout
                if doc_id in wanted:
                    texts[doc_id] = json.loads(line)["text"]
    ids = sorted(plants)
    pairs = [t for i in ids for t in (texts[i], texts[plants[i][1]])]
    sh, off = text_shingles(pairs, 5)
    idx = np.arange(0, len(pairs), 2)
    return dict(zip(ids, jaccard(sh, off, idx, idx + 1).tolist()))


def lsh_miss(j: float) -> float:
    """The chance LSH's banding (Dolma 3's 26 x 11) never makes a pair at Jaccard j a candidate:
    (1 - j^rows)^bands."""
    return (1 - j**11) ** 26


def within_lsh_misses(missed: dict[str, int], expected: dict[str, float]) -> bool:
    """Every kind's misses at most what LSH predicts + 3 sigma + 1 (each miss a coin toss)."""
    return all(missed[k] <= expected[k] + 3 * expected[k] ** 0.5 + 1 for k in expected)

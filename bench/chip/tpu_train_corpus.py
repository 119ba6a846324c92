"""The real text bench/chip/tpu_train_curves.py trains on: documents found on this machine, tokenized here
with dolma2 cut to a smaller vocabulary, written as rows the device call carries.

Documents. Technical prose (Vim's help files, Node.js's API documentation without its changelogs, Python's
pydoc topics) and Python source (the running interpreter's standard library and site-packages), each file
one document: UTF-8 only, from 200 B to 4 MiB (prose) or 256 KiB (code: larger .py files are mostly
generated tables), exact duplicates dropped, none holding a dolma2 special token's text. Every prose document is taken; Python files are added in a shuffled order (seeded) until the corpus
holds the tokens asked for; then the documents are shuffled together (seeded) and concatenated, each
followed by EOS, as OLMo-core concatenates a mix, and cut into rows. The first rows train (one pass: no
token is seen twice), the rows after the next document boundary are held out.

Vocabulary. dolma2 (100,278 tokens) with its rows kept for the `vocab` most frequent tokens of these
documents, the 256 single-byte tokens and EOS always among them; a rarer token is spelled by the two tokens
its BPE merge joined, recursively, until every piece is kept (lossless: the pieces' bytes are the token's).
At 16,384 this adds ~5% tokens and keeps the LM head (d_model x vocab) small beside four layers of d 1024.

Files (`folder`): `tokens.npz` (train (R, L) and heldout (H, L) rows as uint16, `kept`: the dolma2 id of
each new id) and `corpus.json` (sources, counts, seeds, digests).
"""

from __future__ import annotations

import hashlib
import json
import random
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

MIN_BYTES = 200
MAX_CODE_BYTES = 256 * 1024  # larger .py files are mostly generated tables
MAX_PROSE_BYTES = 4 * 2**20
# prose roots: (source name, root folder, glob); a root this machine lacks adds nothing
PROSE_ROOTS = (
    ("vim_help", "/usr/share/vim", "vim*/doc/*.txt"),
    ("nodejs_docs", "/usr/share/doc/nodejs", "**/*.md"),
)


@dataclass(frozen=True)
class Corpus:
    train: np.ndarray  # (R, L) uint16: row r of step s is train[s * rows + r]
    heldout: np.ndarray  # (H, L) uint16
    meta: dict[str, Any]


def prose_documents() -> list[tuple[str, str, str]]:
    """(source, name, text) of the prose roots' files and the pydoc topics, in a sorted order."""
    from pydoc_data.topics import topics

    docs = []
    for source, root, pattern in PROSE_ROOTS:
        for path in sorted(Path(root).glob(pattern)):
            if "changelog" not in str(path).lower():
                docs += [(source, str(path), t) for t in [read_text(path, MAX_PROSE_BYTES)] if t is not None]
    docs += [("pydoc_topics", f"pydoc:{k}", v) for k, v in sorted(topics.items())]
    return docs


def python_files(smoke: bool) -> list[Path]:
    """The interpreter's standard library (and, but for the smoke, its site-packages) .py files, sorted."""
    paths = sysconfig.get_paths()
    files = {p for p in Path(paths["stdlib"]).rglob("*.py") if "site-packages" not in p.parts}
    if not smoke:
        files |= set(Path(paths["purelib"]).rglob("*.py"))
    return sorted(p for p in files if p.is_file())


def read_text(path: Path, max_bytes: int = MAX_CODE_BYTES) -> str | None:
    """The file's text when it is a document here: UTF-8, MIN_BYTES to `max_bytes`."""
    try:
        size = path.stat().st_size
        if not MIN_BYTES <= size <= max_bytes:
            return None
        return path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def merge_parents(tokenizer_json: dict) -> dict[int, tuple[int, int]]:
    """dolma2 id -> the two ids its BPE merge joined (the first merge that produces the token)."""
    vocab = tokenizer_json["model"]["vocab"]
    parents: dict[int, tuple[int, int]] = {}
    for merge in tokenizer_json["model"]["merges"]:
        a, b = merge.split(" ") if isinstance(merge, str) else merge
        joined = vocab.get(a + b)
        if joined is not None and joined not in parents:
            parents[joined] = (vocab[a], vocab[b])
    return parents


def cut_vocabulary(counts: np.ndarray, tokenizer_json: dict, size: int, eos: int) -> tuple[np.ndarray, list]:
    """(kept: the dolma2 id of each new id, most frequent first, spelling: dolma2 id -> its new ids)."""
    vocab = tokenizer_json["model"]["vocab"]
    singles = sorted(i for s, i in vocab.items() if len(s) == 1)  # byte-level BPE: one per byte
    forced = [*singles, eos]
    order = [int(i) for i in np.lexsort((np.arange(len(counts)), -counts)) if counts[i] > 0]
    forced_set = set(forced)
    kept = forced + [i for i in order if i not in forced_set][: size - len(forced)]
    kept = sorted(kept, key=lambda i: (-counts[i], i))
    new_id = {d: n for n, d in enumerate(kept)}
    parents = merge_parents(tokenizer_json)
    spelling: list[tuple[int, ...] | None] = [None] * len(counts)

    def spell(d: int) -> tuple[int, ...]:
        if d in new_id:
            return (new_id[d],)
        if spelling[d] is None:
            if d not in parents:
                raise ValueError(f"dolma2 id {d} is neither kept nor the result of a merge")
            a, b = parents[d]
            spelling[d] = spell(a) + spell(b)
        return spelling[d]

    for d in np.flatnonzero(counts):
        spelling[d] = spell(int(d))
    return np.asarray(kept, np.uint32), spelling


def respell(ids: np.ndarray, spelling: list) -> np.ndarray:
    """A dolma2 id stream in the cut vocabulary (each id replaced by its spelling), vectorised."""
    used = np.unique(ids)
    length = np.zeros(len(spelling), np.int64)
    start = np.zeros(len(spelling), np.int64)
    flat: list[int] = []
    for d in used:
        start[d], length[d] = len(flat), len(spelling[d])
        flat.extend(spelling[d])
    table = np.asarray(flat, np.int64)
    n = length[ids]
    first = np.repeat(np.cumsum(n) - n, n)
    return table[np.repeat(start[ids], n) + np.arange(int(n.sum())) - first]


def build(folder: Path, *, rows: tuple[int, int], seq: int, vocab: int, smoke: bool, seed: int = 0) -> dict:
    """Write `folder`/tokens.npz and corpus.json for `rows` = (train rows, held-out rows) of `seq` tokens."""
    from tokenizers import Tokenizer

    from olmax.assets import tokenizer_path

    t0 = time.perf_counter()
    tok_path = tokenizer_path("dolma2")
    tokenizer_json = json.loads(Path(tok_path).read_text())
    tok = Tokenizer.from_file(str(tok_path))
    eos = tok.token_to_id("<|endoftext|>")
    specials = [a["content"] for a in tokenizer_json["added_tokens"]]
    # dolma2 tokens wanted: the rows, the gap to a document boundary and a margin (spelling only adds)
    want = (rows[0] + rows[1] + 2) * seq
    seen: set[str] = set()
    docs: list[tuple[str, str, np.ndarray]] = []  # (source, name, dolma2 ids + EOS)

    def take(batch: list[tuple[str, str, str]]) -> int:
        fresh = []
        for source, name, text in batch:
            digest = hashlib.sha256(text.encode()).hexdigest()
            if digest not in seen and not any(s in text for s in specials):
                seen.add(digest)
                fresh.append((source, name, text))
        encoded = tok.encode_batch([t for _, _, t in fresh], add_special_tokens=False)
        for (source, name, _), e in zip(fresh, encoded, strict=True):
            docs.append((source, name, np.asarray([*e.ids, eos], np.uint32)))
        return sum(len(e.ids) + 1 for e in encoded)

    have = take([] if smoke else prose_documents())
    files = python_files(smoke)
    random.Random(seed).shuffle(files)
    step = 16 if smoke else 256
    for i in range(0, len(files), step):
        if have >= want:
            break
        batch = [("python", str(p), t) for p in files[i : i + step] for t in [read_text(p)] if t is not None]
        have += take(batch)
    if have < want:
        raise SystemExit(f"tpu_train_corpus: {have:,} dolma2 tokens of documents here, {want:,} wanted")
    random.Random(seed + 1).shuffle(docs)
    stream = np.concatenate([d for _, _, d in docs])
    counts = np.bincount(stream, minlength=len(tokenizer_json["model"]["vocab"]) + len(specials))
    kept, spelling = cut_vocabulary(counts, tokenizer_json, vocab, eos)
    cut = respell(stream, spelling)
    new_eos = int(np.flatnonzero(kept == eos)[0])
    n_train = rows[0] * seq
    boundary = n_train + int(np.flatnonzero(cut[n_train:] == new_eos)[0]) + 1  # held out from a new document
    heldout = cut[boundary : boundary + rows[1] * seq]
    if len(heldout) < rows[1] * seq:
        raise SystemExit("tpu_train_corpus: too few tokens left for the held-out rows; raise the margin")
    train = cut[:n_train].astype(np.uint16).reshape(rows[0], seq)
    heldout = heldout.astype(np.uint16).reshape(rows[1], seq)
    folder.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(folder / "tokens.npz", train=train, heldout=heldout, kept=kept)
    # the training rows' share of each source: the documents that start before the rows end
    spelled = np.asarray([len(s) if s else 0 for s in spelling], np.int64)
    per_source: dict[str, dict[str, int]] = {}
    position = 0
    for source, _, d in docs:
        n = int(spelled[d].sum())
        if position < n_train:
            s = per_source.setdefault(source, {"documents": 0, "tokens": 0})
            s["documents"] += 1
            s["tokens"] += min(n, n_train - position)
        position += n
    meta = {
        "seq": seq,
        "train_rows": rows[0],
        "heldout_rows": rows[1],
        "train_tokens": int(train.size),
        "heldout_tokens": int(heldout.size),
        "distinct_train_tokens": int(train.size),  # one pass: every training position a different token
        "vocab": int(vocab),
        "eos": new_eos,
        "dolma2_tokens": int(len(stream)),
        "tokens_after_cut": int(len(cut)),
        "spelling_growth": len(cut) / len(stream),
        "kept_share_of_dolma2_tokens": float(counts[kept].sum() / counts.sum()),
        "train_sources": per_source,
        "documents": len(docs),
        "seed": seed,
        "tokenizer_sha256": hashlib.sha256(Path(tok_path).read_bytes()).hexdigest(),
        "tokens_sha256": hashlib.sha256(train.tobytes() + heldout.tobytes()).hexdigest(),
        "smoke": smoke,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    (folder / "corpus.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
    return meta


def read(folder: Path) -> Corpus:
    """The rows and facts `build` wrote, checked against the digest it recorded."""
    meta = json.loads((folder / "corpus.json").read_text())
    with np.load(folder / "tokens.npz") as z:
        train, heldout = z["train"], z["heldout"]
    if hashlib.sha256(train.tobytes() + heldout.tobytes()).hexdigest() != meta["tokens_sha256"]:
        raise SystemExit(f"tpu_train_corpus: {folder}/tokens.npz does not match corpus.json; prepare again")
    return Corpus(train, heldout, meta)

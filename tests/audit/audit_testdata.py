"""Builders for the audit tests: OLMo-format shards with sidecars, mix files, tokenized documents."""

from __future__ import annotations

import json
import os
from collections import namedtuple
from pathlib import Path

import numpy as np

from olmax.data.index import DOLMA2_EOS
from olmax.data.shards import ShardWriter

Doc = namedtuple("Doc", "id src loc")


def write_shard(path: str | os.PathLike, docs: list[tuple[str, list[int]]]) -> Path:
    """A raw uint32 shard (each document's tokens + EOS) with its start,end,id,src,loc sidecar."""
    path = Path(path)
    w = ShardWriter(path, path.parent)
    toks = [np.asarray(list(t) + [DOLMA2_EOS], dtype=np.uint32) for _, t in docs]
    w.add_batch(
        np.concatenate(toks) if toks else np.zeros(0, np.uint32),
        [len(t) for t in toks],
        [Doc(i, "test", n + 1) for n, (i, _) in enumerate(docs)],
        0,
    )
    w.close()
    return path


def corpus_folder(corpus: dict, folder: Path) -> Path:
    """The corpus's shards and sidecars copied into one folder, with `copy.npy`: code-1 again under another
    name, without a sidecar (EOS documents); a mix there can name them by relative path."""
    import shutil

    folder.mkdir(parents=True)
    for name, path in corpus["shards"].items():
        for suffix in (".npy", ".csv.gz"):
            shutil.copy(path[: -len(".npy")] + suffix, folder / f"{name}{suffix}")
    shutil.copy(folder / "code-1.npy", folder / "copy.npy")
    return folder


def write_mix(path: str | os.PathLike, lines: list[tuple[str, str]]) -> str:
    Path(path).write_text("".join(f"{label},{p}\n" for label, p in lines))
    return str(path)


def tokenize_docs(tokenizer, docs: list[tuple[str, str]]) -> list[tuple[str, list[int]]]:
    return list(zip([i for i, _ in docs], tokenizer.encode_batch([t for _, t in docs], num_threads=2)))


def planted_prose_mix(tokenizer, corpus: dict, root: Path, plants: list[str], at: int = 600) -> str:
    """A one-shard mix (label "prose") of the corpus's prose documents, the j-th plant pasted on lines of
    its own into the j-th document at character `at`."""
    prose = [(i, tokenizer.decode(ids)) for i, ids in corpus["prose"]]
    for j, plant in enumerate(plants):
        i, t = prose[j]
        prose[j] = (i, t[:at] + "\n" + plant + "\n" + t[at:])
    write_shard(root / "p.npy", tokenize_docs(tokenizer, prose))
    return write_mix(root / "mix.txt", [("prose", str(root / "p.npy"))])


def write_records(path: Path, records: list[dict]) -> str:
    """`records` as a jsonl eval set; returns its path."""
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)

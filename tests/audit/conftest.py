"""Builders for the audit tests: real text (stdlib sources, pydoc topics) tokenized with dolma2 into
OLMo-format shards with sidecars, and mix files over them."""

from __future__ import annotations

import os
import sys
from collections import namedtuple
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))

from prepare_testdata import pydoc_texts, stdlib_texts  # noqa: E402

from olmax.data.index import DOLMA2_EOS  # noqa: E402
from olmax.data.shards import ShardWriter  # noqa: E402

Doc = namedtuple("Doc", "id src loc")


@pytest.fixture(scope="session")
def tokenizer():
    from olmax.assets import tokenizer_path
    from olmax.data.tokenize import load_tokenizer

    return load_tokenizer(str(tokenizer_path("dolma2", quiet=True)))


def write_shard(path: str | os.PathLike, docs: list[tuple[str, list[int]]]) -> Path:
    """A raw uint32 shard (each document's tokens + EOS) with its start,end,id,src,loc sidecar."""
    path = Path(path)
    w = ShardWriter(path, path.parent)
    toks = [np.asarray(list(t) + [DOLMA2_EOS], dtype=np.uint32) for _, t in docs]
    w.add_batch(np.concatenate(toks) if toks else np.zeros(0, np.uint32), [len(t) for t in toks],
                [Doc(i, "test", n + 1) for n, (i, _) in enumerate(docs)], 0)
    w.close()
    return path


def write_mix(path: str | os.PathLike, lines: list[tuple[str, str]]) -> str:
    Path(path).write_text("".join(f"{label},{p}\n" for label, p in lines))
    return str(path)


def tokenize_docs(tokenizer, docs: list[tuple[str, str]]) -> list[tuple[str, list[int]]]:
    return list(zip([i for i, _ in docs], tokenizer.encode_batch([t for _, t in docs], num_threads=2)))


@pytest.fixture(scope="session")
def corpus(tokenizer, tmp_path_factory) -> dict:
    """Three code shards (stdlib modules) and one prose shard (pydoc topics), real dolma2 tokens."""
    root = tmp_path_factory.mktemp("corpus")
    code = tokenize_docs(tokenizer, [(i, t[:6000]) for i, t in stdlib_texts(60)])
    prose = tokenize_docs(tokenizer, [(i, t[:4000]) for i, t in pydoc_texts()[:60]])
    shards = {}
    for k in range(3):
        shards[f"code-{k}"] = str(write_shard(root / f"code-{k}.npy", code[k::3]))
    shards["prose-0"] = str(write_shard(root / "prose-0.npy", prose))
    return {"root": root, "shards": shards, "code": code, "prose": prose}

"""Fixtures for the audit tests: real text (stdlib sources, pydoc topics) tokenized with dolma2 into
OLMo-format shards with sidecars (builders in audit_testdata.py)."""

from __future__ import annotations

import pytest

from olmax.testing.prepare_testdata import pydoc_texts, stdlib_texts
from tests.audit.audit_testdata import tokenize_docs, write_shard


@pytest.fixture(scope="session")
def tokenizer():
    from olmax.assets import tokenizer_path
    from olmax.data.tokenize import load_tokenizer

    return load_tokenizer(str(tokenizer_path("dolma2", quiet=True)))


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

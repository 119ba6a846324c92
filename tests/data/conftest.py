"""Fixtures shared by the data tests (tests/data/prepare/ too)."""

from __future__ import annotations

import pytest

from olmax.assets import tokenizer_path


@pytest.fixture(scope="session")
def dolma2() -> str:
    """The dolma2 tokenizer.json's path (resolved offline: cache, then the PyPI wheel)."""
    return str(tokenizer_path("dolma2", quiet=True))

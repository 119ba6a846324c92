"""Fixtures shared by the data tests (tests/data/prepare/ too: its tests import this folder's builders)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # prepare_testdata.py, loader_testdata.py

from olmax.assets import tokenizer_path


@pytest.fixture(scope="session")
def dolma2() -> str:
    """The dolma2 tokenizer.json's path (resolved offline: cache, then the PyPI wheel)."""
    return str(tokenizer_path("dolma2", quiet=True))

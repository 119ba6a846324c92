"""Lazy package exports: a package's public names resolve on first use, so importing the package (and
`olmax --help`) stays free of JAX, numpy and the rest until something is actually used."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], list[str]]:
    """(`__getattr__`, `__all__`) for a package whose public `name` lives in module `exports[name]`."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(exports[name]), name)

    return __getattr__, sorted(exports)

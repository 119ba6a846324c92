"""Atomic writes: a final name only ever holds a whole file (write a temporary name beside it, then rename)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` to `path` through a temporary file in the same folder, then rename over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path

"""Real text for the prepare tests: the Python standard library's sources and pydoc topics, as Dolma jsonl."""

from __future__ import annotations

import gzip
import json
import os
import sysconfig
from pathlib import Path

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def stdlib_texts(n: int, start: int = 0) -> list[tuple[str, str]]:
    """(id, text) of `n` standard-library modules, sorted by name (deterministic on a given Python)."""
    files = sorted(p for p in STDLIB.glob("*.py"))[start : start + n]
    return [(p.name, p.read_text(encoding="utf-8", errors="replace")) for p in files]


def pydoc_texts() -> list[tuple[str, str]]:
    from pydoc_data.topics import topics

    return sorted(topics.items())


def write_jsonl(path: str | os.PathLike, docs: list[tuple[str, str]], extra: list[str] = ()) -> Path:
    """Write docs as Dolma jsonl (gz/zst by suffix), then any raw `extra` lines."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"id": i, "text": t, "source": "test"}) for i, t in docs] + list(extra)
    data = ("\n".join(lines) + "\n").encode("utf-8")
    if path.name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    elif path.name.endswith(".zst"):
        import zstandard

        data = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(data)
    return path


def read_folder_bytes(folder: str | os.PathLike) -> dict[str, bytes]:
    """Every output file's bytes, keyed by relative path (the resume journal excluded)."""
    folder = Path(folder)
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != ".olmax-prepare.json"
    }

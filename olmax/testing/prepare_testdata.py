"""Real text for the prepare tests: the Python standard library's sources and pydoc topics, as Dolma jsonl."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import sysconfig
import time
from pathlib import Path

import numpy as np

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


# Synthetic text for the dedup tests: random words, and the word 5-gram Jaccard the near-duplicate stage
# is specified against (computed here independently of olmax's shingler).
def words(n: int, seed: int) -> list[str]:
    """`n` random lowercase words of 3 to 8 letters, the same for a given seed."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    return ["".join(rng.choice(letters, size=int(rng.integers(3, 9)))) for _ in range(n)]


def grams(t: str, n: int = 5) -> set:
    w = re.findall(r"[a-z0-9]+", t.lower())
    return {tuple(w[i : i + n]) for i in range(len(w) - n + 1)}


def jaccard(a: str, b: str) -> float:
    ga, gb = grams(a), grams(b)
    return len(ga & gb) / len(ga | gb)


def kill_after_shards(
    cmd: list[str], out: Path, label: str = "code", shards: int = 3, timeout: float = 120
) -> None:
    """Run the prepare command `cmd` writing into `out` and SIGKILL it once its resume journal lists `shards`
    finished shards of `label`; fails the test if the run ends first."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    journal = Path(out) / ".olmax-prepare.json"
    deadline, killed = time.monotonic() + timeout, False
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            labels = json.loads(journal.read_text())["labels"]
        except (OSError, ValueError, KeyError):
            labels = {}
        if len(labels.get(label, {}).get("shards", [])) >= shards:
            proc.send_signal(signal.SIGKILL)
            killed = True
            break
        time.sleep(0.005)
    proc.wait()
    assert killed, "the run finished before it could be killed; make the input larger"

"""The embedded default mix: the Python standard library's sources (`code`) and pydoc topics (`prose`).

Real text that every Python install carries, so `olmax demo` and the `tiny` recipe need no download:
the raw documents are written as Dolma jsonl, a YAML mix spec plans the shares (prose upsampled 2x, a
planned repeat the audits must not flag) and `olmax.data.prepare.local_runner` tokenizes them with dolma2. Built
once per folder and reused; deterministic for a given Python version.
"""

from __future__ import annotations

import gzip
import json
import sysconfig
from pathlib import Path
from pydoc_data.topics import topics

from olmax.atomic import write_bytes, write_text
from olmax.data.loader import demo_mix_folder
from olmax.data.prepare.entry import prepare
from olmax.data.prepare.local_runner import PrepareConfig
from olmax.data.prepare.mixspec import load_mix_spec
from olmax.data.stream import DEMO_MIX, StreamSpec
from olmax.errors import OlmaxError

CODE_FILES = 400  # standard-library modules in the code source
SOURCES = {"code": (0.75, 1.0), "prose": (0.25, 2.0)}  # label -> (share of the mix, max repetition)


def stdlib_docs(limit: int) -> list[dict]:
    """The first `limit` standard-library modules (tests excluded) as Dolma documents."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if "test" not in p.parts and "site-packages" not in p.parts)
    docs = []
    for p in files[:limit]:
        text = p.read_text(encoding="utf-8", errors="replace")
        if text.strip():
            docs.append({"id": str(p.relative_to(root)), "text": text, "source": "python-stdlib"})
    return docs


def write_jsonl(path: Path, docs: list[dict]) -> None:
    """Documents as Dolma jsonl, gzipped when the name ends in .gz (mtime 0: same bytes every time)."""
    data = "".join(json.dumps(d) + "\n" for d in docs).encode("utf-8")
    write_bytes(path, gzip.compress(data, mtime=0) if path.name.endswith(".gz") else data)


def write_raw(out: Path, code_files: int = CODE_FILES) -> dict[str, Path]:
    """The raw documents under `out/raw` (kept when present): label -> path."""

    paths = {"code": out / "raw" / "code.jsonl.gz", "prose": out / "raw" / "prose.jsonl"}
    if not paths["code"].exists():
        write_jsonl(paths["code"], stdlib_docs(code_files))
    if not paths["prose"].exists():
        write_jsonl(
            paths["prose"],
            [{"id": k, "text": v, "source": "pydoc-topics"} for k, v in sorted(topics.items())],
        )
    return paths


def write_mix_spec(path: Path, sources: dict[str, tuple[Path, float, float]]) -> Path:
    """A YAML mix spec (olmax.data.prepare.mixspec): label -> (input, ratio, max_repetition)."""

    lines = [
        "# olmax demo mix: real code and prose; prose upsampled as Dolma 3 upsamples quality buckets",
        "sources:",
    ]
    for label, (src, ratio, max_rep) in sources.items():
        lines += [
            f"  {label}:",
            f"    paths: [{json.dumps(str(src))}]",
            f"    ratio: {ratio}",
            f"    max_repetition: {max_rep}",
        ]
    return write_text(path, "\n".join(lines) + "\n")


def prepare_settings(out: Path, code_files: int = CODE_FILES) -> dict:
    """Write the raw documents and mix spec under `out`; the `olmax data prepare` settings for them."""
    raw = write_raw(out, code_files)
    spec = write_mix_spec(out / "mix.yaml", {k: (raw[k], *SOURCES[k]) for k in SOURCES})
    return {
        "tokenizer": "dolma2",
        "out": str(out / "shards"),
        "mix_spec": str(spec),
        "workers": 2,
        "shard_bytes": 2_000_000,
    }


def prepare_argv(settings: dict) -> list[str]:
    """The `olmax data prepare` command line for `prepare_settings` (what the demo's report shows)."""
    return [
        "data",
        "prepare",
        "--tokenizer",
        settings["tokenizer"],
        "--out",
        settings["out"],
        "--mix-spec",
        settings["mix_spec"],
        "--workers",
        str(settings["workers"]),
        "--shard-size",
        str(settings["shard_bytes"]),
        "--no-progress",
    ]


def prepare_demo_mix(out: Path, code_files: int = CODE_FILES, progress: bool = False) -> Path:
    """The embedded demo mix under `out` (reused when already prepared): returns `out/shards/mix.txt`."""

    mix = out / "shards" / "mix.txt"
    if mix.is_file():
        return mix
    s = prepare_settings(out, code_files)
    sources, total = load_mix_spec(s["mix_spec"])
    prepare(
        PrepareConfig(
            tokenizer=s["tokenizer"],
            out=s["out"],
            sources=tuple(sources),
            workers=s["workers"],
            shard_bytes=s["shard_bytes"],
            total_tokens=total,
            progress=progress,
        )
    )
    if not mix.is_file():
        raise OlmaxError(f"preparing the demo mix in {out} wrote no {mix}; delete the folder and rerun")
    return mix


def ensure_demo_mix(folder: Path) -> Path:
    """The demo mix under `folder`, prepared by process 0 on first use (all processes wait for it);
    returns its mix.txt."""
    import jax

    path = folder / "shards" / "mix.txt"
    if jax.process_index() == 0:
        prepare_demo_mix(folder)
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices("olmax demo mix prepared")
    return path


def ensure_stream_mix(spec: StreamSpec) -> None:
    """Prepare the demo mix when the stream names it (`mix: demo`, the tiny recipe's default), where
    olmax.data.loader.resolve_mix finds it; any other mix is left to the loader. The commands that read a
    stream call this first, so loading itself never writes shards."""
    if spec.mix == DEMO_MIX:
        ensure_demo_mix(demo_mix_folder(spec))

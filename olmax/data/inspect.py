"""`olmax data inspect`: counts for a shard, a prepare output folder or a mix file; decode one document."""

from __future__ import annotations

import json
from pathlib import Path

import xxhash

from olmax.data.mixfile import read_mix
from olmax.data.shards import read_sidecar, sidecar_path
from olmax.data.tokenfile import read_tokens
from olmax.errors import OlmaxError


def _mix_paths(mix: Path) -> list[tuple[str, Path]]:
    """(label, shard path) for each line of a mix file, resolved as the loader resolves them."""

    m = read_mix(str(mix))
    return [(label, Path(p)) for label, p in zip(m.labels, m.paths)]


def verify_manifest(folder: Path) -> int:
    """Check every shard of a prepare output against manifest.json (token count and xxh64); returns the
    number of shards checked, raising OlmaxError at the first that differs."""

    manifest = folder / "manifest.json"
    try:
        sources = json.loads(manifest.read_text(encoding="utf-8"))["sources"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise OlmaxError(
            f"{manifest}: no readable manifest to verify against ({e}); --verify needs a folder "
            "written by `olmax data prepare`"
        ) from None
    n = 0
    for label, source in sources.items():
        for rec in source["shards"]:
            shard = folder / rec["path"]
            if not shard.exists():
                raise OlmaxError(
                    f"{shard}: listed in {manifest} (source {label}) but missing; rerun `olmax data "
                    "prepare` into a new folder"
                )
            h = xxhash.xxh64()
            with open(shard, "rb") as f:
                while chunk := f.read(1 << 24):
                    h.update(chunk)
            tokens = len(read_tokens(shard))
            if tokens != rec["tokens"] or h.hexdigest() != rec["xxh64"]:
                raise OlmaxError(
                    f"{shard}: {tokens} tokens, xxh64 {h.hexdigest()}; {manifest} records {rec['tokens']} "
                    f"tokens, xxh64 {rec['xxh64']}: the shard changed after prepare; restore it or "
                    "prepare again"
                )
            n += 1
    return n


def inspect_path(
    path: str,
    doc_id: str | None = None,
    tokenizer: str = "dolma2",
    max_chars: int = 2000,
    verify: bool = False,
) -> int:
    p = Path(path)
    if verify:
        if not p.is_dir():
            raise OlmaxError(f"{path}: --verify takes a prepare output folder (holding manifest.json)")
        print(f"verified {verify_manifest(p)} shard(s) against {p / 'manifest.json'}")
    if p.is_dir():
        p = p / "mix.txt"
    if not p.exists():
        raise OlmaxError(f"{path}: no such shard, folder or mix file")
    shards = [("-", p)] if p.suffix == ".npy" else _mix_paths(p)
    per_label: dict[str, list[int]] = {}
    seen = set()
    print(f"{'label':12s} {'tokens':>14s} {'docs':>10s}  shard")
    for label, shard in shards:
        n = len(read_tokens(shard))
        side = sidecar_path(shard)
        docs = len(read_sidecar(side)) if side.exists() else None
        repeat = " (repeat)" if shard in seen else ""
        seen.add(shard)
        print(f"{label:12s} {n:14,d} {docs if docs is not None else '-':>10}  {shard}{repeat}")
        tot = per_label.setdefault(label, [0, 0])
        tot[0] += n
        tot[1] += docs or 0
    total = sum(t for t, _ in per_label.values())
    for label, (t, d) in per_label.items():
        print(f"total {label}: {t:,} tokens, {d:,} docs, share {t / max(1, total):.3f}")
    if doc_id is None:
        return 0
    for _, shard in dict.fromkeys(shards):
        side = sidecar_path(shard)
        if not side.exists():
            continue
        for row in read_sidecar(side):
            if row.id == doc_id:
                from olmax.assets import tokenizer_path
                from olmax.data.tokenize import load_tokenizer

                ids = read_tokens(shard)[row.start : row.end]
                text = load_tokenizer(str(tokenizer_path(tokenizer))).decode(ids.tolist())
                print(
                    f"\n# doc {doc_id}: {shard}[{row.start}:{row.end}] ({row.end - row.start} tokens incl. EOS), "
                    f"from {row.src}:{row.loc}"
                )
                print(text[:max_chars] + ("…" if len(text) > max_chars else ""))
                return 0
    raise OlmaxError(f"document id {doc_id!r} not found in the sidecars of {path}")

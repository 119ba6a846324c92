"""`olmax data inspect`: counts for a shard, a prepare output folder or a mix file; decode one document."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import xxhash

from olmax.data.mixfile import read_mix
from olmax.data.shards import DEDUP_RECORD, PREPARE_JOURNAL, read_sidecar, sidecar_path
from olmax.data.tokenfile import read_tokens
from olmax.errors import OlmaxError
from olmax.jsonio import read_jsonl


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


def _mix_file(p: Path, path: str) -> Path:
    """The shard or mix file `path` names (a prepare output folder: its mix.txt); an OlmaxError that says
    what is there instead: an unfinished prepare run, a folder that is no prepare output, nothing."""
    if p.is_dir():
        if (p / "mix.txt").is_file():
            return p / "mix.txt"
        if (p / PREPARE_JOURNAL).is_file():
            raise OlmaxError(
                f"{path}: an unfinished `olmax data prepare` output ({PREPARE_JOURNAL} records the shards done "
                "so far, mix.txt and manifest.json are written last); rerun the same `olmax data prepare` "
                "command to finish it"
            )
        raise OlmaxError(
            f"{path}: a folder without mix.txt; give a prepare output folder, a mix file or a shard"
        )
    if not p.exists():
        raise OlmaxError(f"{path}: no such shard, folder or mix file")
    return p


@dataclass(frozen=True)
class ShardCount:
    label: str
    shard: Path
    tokens: int
    docs: int | None  # None: no sidecar


def _counts(shards: list[tuple[str, Path]], mix: Path) -> list[ShardCount]:
    """Every shard's token and document count, each shard checked before anything is printed."""
    out = []
    for label, shard in shards:
        if not shard.is_file():
            raise OlmaxError(
                f"{shard}: listed in {mix} (label {label}) but missing; restore it, or prepare the mix again "
                "into a new folder"
            )
        side = sidecar_path(shard)
        docs = len(read_sidecar(side)) if side.exists() else None
        out.append(ShardCount(label, shard, len(read_tokens(shard)), docs))
    return out


def _table(counts: list[ShardCount]) -> list[str]:
    lines = [f"{'label':12s} {'tokens':>14s} {'docs':>10s}  shard"]
    per_label: dict[str, list[int]] = {}
    seen = set()
    for c in counts:
        repeat = " (repeat)" if c.shard in seen else ""
        seen.add(c.shard)
        docs = c.docs if c.docs is not None else "-"
        lines.append(f"{c.label:12s} {c.tokens:14,d} {docs:>10}  {c.shard}{repeat}")
        tot = per_label.setdefault(c.label, [0, 0])
        tot[0] += c.tokens
        tot[1] += c.docs or 0
    total = sum(t for t, _ in per_label.values())
    for label, (t, d) in per_label.items():
        lines.append(f"total {label}: {t:,} tokens, {d:,} docs, share {t / max(1, total):.3f}")
    return lines


def _removal(folder: Path, doc_id: str) -> tuple[int, dict] | None:
    """(line, record) of `doc_id` in a prepare output's removed.jsonl, or None."""
    removed = folder / DEDUP_RECORD
    if not removed.is_file():
        return None
    for lineno, rec in enumerate(read_jsonl(removed), start=1):
        if str(rec.get("id")) == doc_id:
            return lineno, rec
    return None


def _why_removed(doc_id: str, at: tuple[int, dict], removed: Path) -> str:
    lineno, rec = at
    stage, kept = rec.get("stage"), rec.get("kept")
    if stage == "exact":
        what = f"an exact copy of document {kept!r}, which was kept"
    elif stage == "minhash":
        what = f"a near-duplicate (Jaccard {rec.get('jaccard')}) of document {kept!r}, which was kept"
    elif stage == "substring":
        what = f"every byte of it repeats document {kept!r} (kept), so nothing was left to write"
    else:
        what = f"kept: {kept!r}"
    return (
        f"document id {doc_id!r} was removed by dedup stage {stage} ({removed}:{lineno}): {what}; "
        f"inspect --doc {kept} to see the copy that stayed"
    )


def _find_doc(shards: list[tuple[str, Path]], doc_id: str, mix: Path, path: str):
    """(shard, sidecar row) of `doc_id`; an OlmaxError naming the dedup stage that removed it, if one did."""
    for _, shard in dict.fromkeys(shards):
        side = sidecar_path(shard)
        if not side.exists():
            continue
        for row in read_sidecar(side):
            if row.id == doc_id:
                return shard, row
    at = _removal(mix.parent, doc_id)
    if at is not None:
        raise OlmaxError(_why_removed(doc_id, at, mix.parent / DEDUP_RECORD))
    raise OlmaxError(f"document id {doc_id!r} not found in the sidecars of {path}")


def inspect_path(
    path: str,
    doc_id: str | None = None,
    tokenizer: str = "dolma2",
    max_chars: int = 2000,
    verify: bool = False,
) -> int:
    """Print the counts of a shard, a prepare output folder or a mix (and decode `doc_id`); every check
    (a missing or unfinished input, a missing shard, an unknown or removed document) runs before the first
    line is printed, so a failure prints one error line and no partial table."""
    p = Path(path)
    mix = _mix_file(p, path)  # an unfinished prepare folder is said as such, with --verify too
    verified = None
    if verify:
        if not p.is_dir():
            raise OlmaxError(f"{path}: --verify takes a prepare output folder (holding manifest.json)")
        verified = verify_manifest(p)
    shards = [("-", mix)] if mix.suffix == ".npy" else _mix_paths(mix)
    counts = _counts(shards, mix)
    found = _find_doc(shards, doc_id, mix, path) if doc_id is not None else None
    if verified is not None:
        print(f"verified {verified} shard(s) against {p / 'manifest.json'}")
    print("\n".join(_table(counts)))
    if found is None:
        return 0
    from olmax.assets import tokenizer_path
    from olmax.data.tokenize import load_tokenizer

    shard, row = found
    ids = read_tokens(shard)[row.start : row.end]
    text = load_tokenizer(str(tokenizer_path(tokenizer))).decode(ids.tolist())
    print(
        f"\n# doc {doc_id}: {shard}[{row.start}:{row.end}] ({row.end - row.start} tokens incl. EOS), "
        f"from {row.src}:{row.loc}"
    )
    edit = _removal(mix.parent, doc_id)
    if edit is not None:
        spans = edit[1].get("spans") or []
        print(
            f"# edited by dedup stage {edit[1].get('stage')}: {len(spans)} span(s) removed ({mix.parent / DEDUP_RECORD}:{edit[0]})"
        )
    print(text[:max_chars] + ("…" if len(text) > max_chars else ""))
    return 0

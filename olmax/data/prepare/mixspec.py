"""Mix specs (YAML) → the mix.txt that makes every planned repetition explicit.

A spec names sources with their inputs and either `target_tokens` or `ratio` (of `total_tokens`), and a
`max_repetition` (default 1.0: no source is repeated). Once every source is tokenized, a source planned
at r times its tokens is listed floor(r) times whole in mix.txt, plus a prefix of its documents once more
for the fraction: the shard holding the cut is split at the document boundary nearest the cut, so the
repeat is whole files (OLMo-core's `label,path` format cannot express part of a file). A line that
repeats a path is therefore always a planned repeat — the audit relies on it.

Example:
    total_tokens: 20_000_000
    sources:
      code:  {paths: ["data/code/*.jsonl.gz"], ratio: 0.7, max_repetition: 2}
      prose: {paths: ["data/prose/*.jsonl.gz"], ratio: 0.3, max_repetition: 4}
If `total_tokens` is left out with ratios, it is the largest total that keeps every source within its
`max_repetition`.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import yaml

from olmax import storage
from olmax.data.prepare.prepare_config import PrepareConfig, SourceSpec
from olmax.data.shards import ShardWriter, read_sidecar, sidecar_path
from olmax.data.tokenfile import read_tokens
from olmax.errors import OlmaxError


def load_mix_spec(path: str) -> tuple[list[SourceSpec], float | None]:
    """Parse a YAML mix spec → ([SourceSpec], total_tokens). Input paths resolve against the spec's folder."""

    try:
        spec = yaml.safe_load(storage.read_bytes(path).decode("utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise OlmaxError(f"cannot read mix spec {path}: {e}") from e
    except yaml.YAMLError as e:
        raise OlmaxError(f"{path}: not valid YAML ({e})") from e
    if not isinstance(spec, dict) or not isinstance(spec.get("sources"), dict) or not spec["sources"]:
        raise OlmaxError(
            f"{path}: a mix spec needs a `sources:` mapping of label → {{paths, ratio|target_tokens}}"
        )
    local = storage.local_path(path)
    base = str(Path(local).parent) if local is not None else path.rsplit("/", 1)[0]
    sources = []
    known = {"paths", "ratio", "target_tokens", "max_repetition", "text_field"}
    for label, src in spec["sources"].items():
        if isinstance(src, (str, list)):
            src = {"paths": src}
        if not isinstance(src, dict) or "paths" not in src:
            raise OlmaxError(f"{path}: source {label!r} needs `paths` (a glob or a list of globs)")
        unknown = set(src) - known
        if unknown:
            raise OlmaxError(
                f"{path}: source {label!r} has unknown keys {sorted(unknown)} (known: {sorted(known)})"
            )
        if "ratio" in src and "target_tokens" in src:
            raise OlmaxError(f"{path}: source {label!r} gives both ratio and target_tokens; keep one")
        paths = [src["paths"]] if isinstance(src["paths"], str) else list(src["paths"])
        paths = [
            p if storage.is_url(p) or os.path.isabs(os.path.expanduser(p)) else storage.join(base, p)
            for p in paths
        ]
        sources.append(
            SourceSpec(
                label=str(label),
                inputs=tuple(paths),
                target_tokens=float(src["target_tokens"]) if "target_tokens" in src else None,
                ratio=float(src["ratio"]) if "ratio" in src else None,
                max_repetition=float(src.get("max_repetition", 1.0)),
                text_field=src.get("text_field"),
            )
        )
    total = spec.get("total_tokens")
    return sources, (float(total) if total is not None else None)


def planned_tokens(cfg: PrepareConfig, results) -> dict[str, float]:
    """Planned tokens per source from the spec (all of a source once when it states nothing)."""
    specs = {s.label: s for s in cfg.sources}
    total = cfg.total_tokens
    ratios = {lab: s.ratio for lab, s in specs.items() if s.ratio is not None}
    if ratios and total is None:
        total = min(
            r.tokens * specs[r.label].max_repetition / ratios[r.label] for r in results if r.label in ratios
        )
    out = {}
    for r in results:
        s = specs[r.label]
        out[r.label] = (
            s.target_tokens
            if s.target_tokens is not None
            else (s.ratio * total if s.ratio is not None else float(r.tokens))
        )
    return out


def _split_shard(out: Path, result, k: int, cut: int, journal) -> None:
    """Split shard k of a source at token offset `cut` (a doc boundary) into `-a` and `-b` files."""
    info = result.shards[k]
    src = out / info.path
    rows = read_sidecar(src)
    tokens = read_tokens(src, mmap=False)
    n_a = next(i for i, r in enumerate(rows) if r.end == cut) + 1
    stem = src.name[: -len(".npy")]
    infos = []
    for name, part, lo in ((f"{stem}-a.npy", rows[:n_a], 0), (f"{stem}-b.npy", rows[n_a:], cut)):
        w = ShardWriter(src.with_name(name), out)
        hi = part[-1].end
        w.add_batch(tokens[lo:hi], [r.end - r.start for r in part], part, 0)
        new = w.close()
        # UTF-8 bytes split in proportion is not exact; recompute from the docs' share of the shard's tokens
        new.utf8_bytes = round(info.utf8_bytes * (hi - lo) / max(1, info.tokens))
        infos.append(new)
    infos[1].utf8_bytes = info.utf8_bytes - infos[0].utf8_bytes
    rec_path = src.with_suffix(".arrayrecord")
    if rec_path.exists():
        from olmax.data.arrayrecord import split_records

        split_records(
            rec_path, n_a, src.with_name(f"{stem}-a.arrayrecord"), src.with_name(f"{stem}-b.arrayrecord")
        )
    entry = journal.labels[result.label]["shards"]
    old = entry[k]
    entry[k : k + 1] = [dict(old, info=infos[0].to_json()), dict(old, info=infos[1].to_json())]
    journal.save()
    result.shards[k : k + 1] = infos
    for f in (src, sidecar_path(src), rec_path):
        f.unlink(missing_ok=True)


def _snap_cut(out: Path, result, want: int) -> int:
    """The document boundary nearest token `want` of a source (in the source's concatenated stream)."""
    start = 0
    for info in result.shards:
        if want <= start + info.tokens:
            ends = np.array([r.end for r in read_sidecar(out / info.path)], dtype=np.int64) + start
            cand = np.concatenate([[start], ends])
            return int(cand[np.argmin(np.abs(cand - want))])
        start += info.tokens
    return start


def plan_mix(cfg: PrepareConfig, results, out: Path, journal) -> tuple[list[tuple[str, str]], dict]:
    """The mix.txt lines (label, path) and the per-source plan recorded in the manifest."""
    targets = planned_tokens(cfg, results)
    specs = {s.label: s for s in cfg.sources}
    lines: list[tuple[str, str]] = []
    plan = {}
    for r in results:
        target = targets[r.label]
        avail = r.tokens
        if avail == 0:
            if target > 0:
                raise OlmaxError(
                    f"source {r.label}: no tokens (every document empty or skipped) but the mix plans "
                    f"{target:,.0f}"
                )
            plan[r.label] = {"available_tokens": 0, "planned_tokens": 0, "repetition": 0.0}
            continue
        rep = target / avail
        cap = specs[r.label].max_repetition
        if rep > cap * (1 + 1e-9):
            raise OlmaxError(
                f"source {r.label}: the mix plans {target:,.0f} tokens = {rep:.3f}× its {avail:,} "
                f"tokens, above its max_repetition {cap}; lower its share or raise max_repetition"
            )
        full = math.floor(rep + 1e-9)
        cut = _snap_cut(out, r, round((rep - full) * avail)) if rep - full > 1e-9 else 0
        if cut >= avail:
            full, cut = full + 1, 0
        if cut:
            start = 0
            for k, info in enumerate(r.shards):
                if start < cut < start + info.tokens:
                    _split_shard(out, r, k, cut - start, journal)
                    break
                start += info.tokens
        paths = [s.path for s in r.shards]
        lines += [(r.label, p) for _ in range(full) for p in paths]
        start = 0
        for info in r.shards:
            if start + info.tokens > cut:
                break
            lines.append((r.label, info.path))
            start += info.tokens
        planned = full * avail + cut
        plan[r.label] = {
            "available_tokens": avail,
            "target_tokens": round(target),
            "planned_tokens": planned,
            "repetition": round(planned / avail, 6),
            "whole_copies": full,
            "partial_tokens": cut,
        }
    total = sum(p["planned_tokens"] for p in plan.values())
    for p in plan.values():
        p["share"] = round(p["planned_tokens"] / total, 6) if total else 0.0
    if not lines:
        raise OlmaxError("the mix is empty: no source has tokens to plan")
    return lines, plan

"""`olmax audit dedup`: exact duplicate documents and repeated spans (>= 50 tokens) in a mix.

Documents: xxh3-64 of each document (sidecar or EOS boundaries) of each distinct physical file
(content.py; a path listed twice is planned repetition, not a duplicate), confirmed byte for byte.
Spans: the rolling hash of olmax/hashing.py over every `span`-token window (50 by default, the ExactSubstr
threshold) that lies inside one document, at every position of every physical file; the map emits
(hash, file, offset) records per 1M-token chunk into hash-partitioned spill files and the reduce finds
hashes seen at two or more positions (bounded memory; disk about 20 bytes per token). A repeated
span's later occurrences mark their tokens as repeated; the report gives repeated tokens per source,
within-source and cross-source occurrence counts, and examples. Two different spans share a hash
with probability <= ((span - 1) / (2^31 - 1))^2 (5.2e-16 at 50): not re-checked.

One pass over each file (file_pass.py: the document and the span map, read where the file is, a local
memory map or a URL's byte ranges) feeds both reduces (`reduce_documents` in content.py, `reduce_spans`
here), one hash partition at a time, and the driver merges the partitions' results in partition order
(`merge_documents`, `merge_spans`). The local runner (partition.map_reduce: threads, spill files) and
`--runner beam` (dedup_beam.py: the same functions in an Apache Beam pipeline) give the same report.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from functools import partial

import numpy as np

from olmax.audit.audit_config import DedupConfig
from olmax.audit.checks import Check, checks_json, failed, summary_lines, verdict
from olmax.audit.content import merge_documents, reduce_documents
from olmax.audit.file_pass import DOC_REC, SPAN_REC, PassSettings, file_pass
from olmax.audit.partition import equal_runs, map_reduce
from olmax.audit.spans import physical_ids
from olmax.data.loader import file_index
from olmax.data.stream import DOLMA2_EOS
from olmax.data.token_reads import TokenFile
from olmax.dedup.gates import cluster_gate, cluster_lines, parse_removed_frac, removed_frac_gates
from olmax.dedup.spill import partition_bits
from olmax.errors import OlmaxError

INTERVAL_REC = np.dtype([("phys", "<i4"), ("start", "<i8"), ("end", "<i8")])


@dataclass
class SpanRepeats:
    """Repeated spans of one hash partition (or, merged, of all): later occurrences (`windows`; of the
    same source or another), the token ranges they cover (`intervals`, INTERVAL_REC, merged per file) and
    examples."""

    windows: int = 0
    within: int = 0
    across: int = 0
    intervals: np.ndarray = field(default_factory=lambda: np.zeros(0, INTERVAL_REC))
    examples: list[dict] = field(default_factory=list)


def merge_intervals(intervals: np.ndarray) -> np.ndarray:
    """INTERVAL_REC: the union of `intervals` per file, as disjoint ranges sorted by (file, start)."""
    if intervals.size == 0:
        return np.zeros(0, INTERVAL_REC)
    iv = intervals[np.lexsort((intervals["start"], intervals["phys"]))]
    phys, start, end = iv["phys"].astype(np.int64), iv["start"], iv["end"]
    scale = int(end.max()) + 1  # phys * scale + position orders (file, position) in one int64
    reach = np.maximum.accumulate(phys * scale + end)  # the farthest end so far (of this file: files ascend)
    new = np.ones(iv.size, dtype=bool)
    new[1:] = phys[1:] * scale + start[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.concatenate([first[1:], [iv.size]]) - 1
    out = np.empty(first.size, INTERVAL_REC)
    out["phys"], out["start"] = phys[first], start[first]
    out["end"] = reach[last] - phys[first] * scale
    return out


def reduce_spans(
    part: np.ndarray, labels: np.ndarray, span: int, paths: list[str], examples: int = 10
) -> SpanRepeats:
    """The repeated spans among the SPAN_REC records of one hash partition (any order); `labels`: each
    physical file's source id. In each group of equal hashes the first (file, position) is the original,
    the others later occurrences. Examples: the first `examples` groups in hash order."""
    out = SpanRepeats()
    hashes = np.ascontiguousarray(part["hash"])
    by_hash = np.argsort(hashes)  # the order within a hash is set below, by (file, position)
    starts, ends = equal_runs(hashes[by_hash])
    if starts.size == 0:
        return out
    member = np.zeros(part.size + 1, dtype=np.int64)
    np.add.at(member, starts, 1)
    np.add.at(member, ends, -1)
    sel = np.flatnonzero(np.cumsum(member[:-1]) > 0)
    group = np.repeat(np.arange(starts.size), ends - starts)
    recs = part[by_hash[sel]]  # only the records of repeated hashes
    order = np.lexsort((recs["pos"], recs["phys"], group))
    recs, group = recs[order], group[order]
    head = np.ones(recs.size, dtype=bool)
    head[1:] = group[1:] != group[:-1]
    head_of = np.flatnonzero(head)[np.cumsum(head) - 1]
    later = ~head
    out.windows = int(later.sum())
    same = labels[recs["phys"][later]] == labels[recs["phys"][head_of[later]]]
    out.within = int(same.sum())
    out.across = int((~same).sum())
    iv = np.empty(out.windows, INTERVAL_REC)
    iv["phys"], iv["start"] = recs["phys"][later], recs["pos"][later]
    iv["end"] = iv["start"] + span
    out.intervals = merge_intervals(iv)
    heads = np.flatnonzero(head)
    bounds = np.concatenate([heads, [recs.size]])
    for k in range(min(examples, heads.size)):
        g = recs[bounds[k] : bounds[k + 1]]
        out.examples.append(
            {
                "file": paths[int(g[0]["phys"])],
                "offset": int(g[0]["pos"]),
                "occurrences": int(g.size),
                "also_at": [{"file": paths[int(r["phys"])], "offset": int(r["pos"])} for r in g[1:4]],
            }
        )
    return out


def merge_spans(parts: Iterable[SpanRepeats], examples: int = 10) -> SpanRepeats:
    """The partitions' results (in partition order) as one: sums, merged intervals, the first examples."""
    out, intervals = SpanRepeats(), []
    for r in parts:
        out.windows += r.windows
        out.within += r.within
        out.across += r.across
        intervals.append(r.intervals)
        out.examples.extend(r.examples[: max(0, examples - len(out.examples))])
    out.intervals = merge_intervals(np.concatenate(intervals)) if intervals else out.intervals
    return out


def repeated_tokens(intervals: np.ndarray, files: int) -> np.ndarray:
    """int64 (files,): tokens of each file inside merged `intervals`."""
    return np.bincount(
        intervals["phys"], weights=intervals["end"] - intervals["start"], minlength=files
    ).astype(np.int64)


def repeated_spans(
    paths: list[str],
    labels: list[str],
    span: int,
    *,
    chunk_tokens: int = 1 << 20,
    work_dir: str | None = None,
    examples: int = 10,
    eos_token_id: int = DOLMA2_EOS,
) -> dict:
    """Repeated `span`-token windows over distinct token files `paths` (labels: each file's source).

    Returns per-file boolean masks of tokens inside a later occurrence, counts of later occurrences
    within and across sources, and examples. The reduce is vectorized per partition."""
    sizes = [len(TokenFile(p)) for p in paths]
    bits = partition_bits(sum(sizes), SPAN_REC.itemsize)
    settings = PassSettings(docs=False, span=span, chunk_tokens=chunk_tokens, eos_token_id=eos_token_id)
    _, reduced = map_reduce(
        list(enumerate(paths)),
        partial(file_pass, settings=settings),
        {"spans": (SPAN_REC, span_reduce(paths, labels, span, examples))},
        bits=bits,
        threads=1,
        work_dir=work_dir,
    )
    return span_report(merge_spans(reduced["spans"], examples), sizes)


def span_reduce(paths: list[str], labels: list[str], span: int, examples: int):
    """`reduce_spans` for the distinct files `paths` (labels: each file's source), one partition a call."""
    label_id = {name: i for i, name in enumerate(dict.fromkeys(labels))}
    lab = np.asarray([label_id[x] for x in labels], dtype=np.int64)
    return partial(reduce_spans, labels=lab, span=span, paths=list(paths), examples=examples)


def span_report(spans: SpanRepeats, sizes: list[int]) -> dict:
    """`repeated_spans`' result from the merged reduces (`sizes`: each file's tokens), on either runner."""
    diff = [np.zeros(n + 1, dtype=np.int32) for n in sizes]
    for q, a, b in zip(
        spans.intervals["phys"].tolist(), spans.intervals["start"].tolist(), spans.intervals["end"].tolist()
    ):
        diff[q][a] += 1
        diff[q][b] -= 1
    masks = [np.cumsum(d[:-1]) > 0 for d in diff]
    return {
        "sizes": sizes,
        "masks": masks,
        "windows": spans.windows,
        "within": spans.within,
        "across": spans.across,
        "examples": spans.examples,
    }


def audit_dedup(cfg: DedupConfig, beam_options: str | None = None) -> dict:
    """The dedup report of the mix; `beam_options` (Beam's flags, see olmax.beam.pipeline_options) runs
    the map and the reduces as an Apache Beam pipeline instead of threads here, with the same report."""

    index = file_index(cfg.stream)
    phys = physical_ids(index.paths)
    first: dict[int, int] = {}
    for f, p in enumerate(phys.tolist()):
        first.setdefault(p, f)
    paths = [index.paths[first[p]] for p in range(len(first))]
    label_of_phys = [index.labels[first[p]] for p in range(len(paths))]
    names = index.label_names
    label_ids = {name: i for i, name in enumerate(names)}
    lab = np.asarray([label_ids[x] for x in label_of_phys], dtype=np.int64)
    sizes = [int(index.sizes[first[p]]) // index.itemsize for p in range(len(paths))]
    bits = partition_bits(sum(sizes), SPAN_REC.itemsize)
    map_fn = partial(
        file_pass,
        settings=PassSettings(
            min_doc_tokens=cfg.min_doc_tokens,
            span=cfg.span,
            chunk_tokens=cfg.chunk_tokens,
            eos_token_id=cfg.stream.eos_token_id,
        ),
    )
    reduces = {
        "docs": (DOC_REC, partial(reduce_documents, paths=paths, examples=cfg.examples)),
        "spans": (
            SPAN_REC,
            partial(reduce_spans, labels=lab, span=cfg.span, paths=paths, examples=cfg.examples),
        ),
    }
    items = list(enumerate(paths))
    if beam_options is None:
        totals, reduced = map_reduce(
            items, map_fn, reduces, bits=bits, threads=cfg.threads, work_dir=cfg.stream.work_dir
        )
    else:
        from olmax.audit.dedup_beam import map_reduce_beam
        from olmax.ranged import WithPins, export_pins

        pins = export_pins(paths)  # the workers read the versions the driver planned with
        totals, reduced = map_reduce_beam(
            beam_options,
            items,
            WithPins(map_fn, pins),
            {k: WithPins(fn, pins) for k, (_, fn) in reduces.items()},
            bits=bits,
            work_dir=cfg.stream.work_dir,
            what="olmax audit dedup",
        )
    dups = merge_documents(reduced["docs"], cfg.examples)
    spans = merge_spans(reduced["spans"], cfg.examples)
    doc_tokens, docs = sum(t.doc_tokens for t in totals), sum(t.docs for t in totals)
    compared = sum(t.compared for t in totals)
    repeated = repeated_tokens(spans.intervals, len(paths))
    per_source = {name: {"tokens": 0, "repeated_span_tokens": 0} for name in names}
    for p in range(len(paths)):
        s = per_source[label_of_phys[p]]
        s["tokens"] += sizes[p]
        s["repeated_span_tokens"] += int(repeated[p])
    total = max(1, sum(sizes))
    rep_tokens = int(repeated.sum())
    dfrac = dups.tokens / max(1, doc_tokens)
    checks = [
        Check(
            "duplicate_documents",
            dfrac <= cfg.max_dup_doc_frac,
            round(dfrac, 6),
            cfg.max_dup_doc_frac,
            detail=f"{dups.duplicates} documents, {dups.tokens} tokens",
            needs=""
            if compared
            else f"documents of at least {cfg.min_doc_tokens} tokens: the mix has none (--min-doc-tokens)",
        ),
        Check(
            "repeated_spans",
            rep_tokens / total <= cfg.max_repeated_span_frac,
            round(rep_tokens / total, 6),
            cfg.max_repeated_span_frac,
            detail=f"{rep_tokens} tokens inside a later copy of a >= {cfg.span}-token span",
        ),
    ]
    if cfg.near is None and (cfg.max_removed_frac or cfg.max_cluster_size is not None):
        raise OlmaxError(
            "--max-removed-frac and --max-cluster-size gate the near-duplicate clusters: add --near"
        )
    limits = parse_removed_frac(cfg.max_removed_frac)
    cluster_gate(1, cfg.max_cluster_size)  # a bad limit fails before the passes
    near = None
    if cfg.near is not None:
        from olmax.audit.near import near_duplicates

        near = near_duplicates(
            paths,
            label_of_phys,
            cfg.near,
            min_doc_tokens=cfg.min_doc_tokens,
            threads=cfg.threads,
            stream=cfg.stream,
        )
        del near["removable_tokens_per_file"]
        checks.append(
            Check(
                "near_duplicates",
                near["removable_token_frac"] <= cfg.max_near_dup_frac,
                near["removable_token_frac"],
                cfg.max_near_dup_frac,
                detail=f"{near['removable_documents']} documents, {near['removable_tokens']} tokens in "
                f"{near['clusters_total']} clusters beyond the first document of each",
            )
        )
        gates = removed_frac_gates(near["sources"], limits, "tokens")
        gates += cluster_gate(near["largest_cluster"], cfg.max_cluster_size)
        checks += [Check(g.name, g.ok, g.value, g.threshold, detail=g.detail) for g in gates]
    report = {
        "command": "audit dedup",
        "settings": asdict(cfg),
        "files": len(paths),
        "tokens": int(sum(sizes)),
        "documents": docs,
        "duplicate_documents": dups.duplicates,
        "duplicate_document_tokens": dups.tokens,
        "duplicate_document_examples": dups.examples,
        "repeated_span_windows": spans.windows,
        "repeated_span_tokens": rep_tokens,
        "repeated_within_source": spans.within,
        "repeated_across_sources": spans.across,
        "repeated_span_examples": spans.examples,
        "sources": per_source,
        "hashing": (
            f"documents: xxh3-64, byte-confirmed; spans: {cfg.span}-token Karp-Rabin hashes "
            f"(two bases mod 2^31-1), per-pair collision <= ((span-1)/p)^2 = "
            f"{((cfg.span - 1) / (2**31 - 1)) ** 2:.1e}, not re-checked"
        ),
        "checks": checks_json(checks),
        "ok": not failed(checks),
        "verdict": verdict(checks),
    }
    if near is not None:
        report["near_duplicates"] = near
    report["summary"] = summary_lines(
        f"olmax audit dedup: {cfg.stream.mix} ({sum(sizes):,} tokens, {len(paths)} files)", checks
    )
    if near is not None and near["clusters"]:
        shown = [
            {"size": len(c["doc_ids"]), "kept": c["keep"], "first_lines": c["first_lines"]}
            for c in near["clusters"][:5]
        ]
        report["summary"] += ["  biggest near-duplicate clusters (first lines, the kept one first):"]
        report["summary"] += cluster_lines(shown)
    return report

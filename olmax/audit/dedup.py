"""`olmax audit dedup`: exact duplicate documents and repeated spans (>= 50 tokens) in a mix.

Documents: xxh3-64 of each document (sidecar or EOS boundaries) of each distinct physical file
(content.py; a path listed twice is planned repetition, not a duplicate), confirmed byte for byte.
Spans: the rolling hash of hashing.py over every `span`-token window (50 by default, the ExactSubstr
threshold) that lies inside one document, at every position of every physical file; the map emits
(hash, file, offset) records per 1M-token chunk into hash-partitioned spill files and the reduce finds
hashes seen at two or more positions (bounded memory; disk about 20 bytes per token). A repeated
span's later occurrences mark their tokens as repeated; the report gives repeated tokens per source,
within-source and cross-source occurrence counts, and examples. Two different spans share a hash
with probability <= ((span - 1) / (2^31 - 1))^2 (5.2e-16 at 50): not re-checked.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from olmax.audit.hashing import PrefixHasher
from olmax.audit.partition import PartitionSpill, equal_runs
from olmax.audit.report import Check, checks_json, failed, summary_lines
from olmax.data.index import DOLMA2_EOS
from olmax.data.stream import StreamSpec

SPAN_REC = np.dtype([("hash", "<u8"), ("phys", "<i4"), ("pos", "<i8")])


@dataclass(frozen=True)
class DedupConfig:
    """The mix (`stream`: its mix, base dir, {TOKENIZER} value and work dir for spill files are read)
    and the duplicate limits."""

    stream: StreamSpec
    span: int = 50
    min_doc_tokens: int = 32
    max_dup_doc_frac: float = 0.01
    max_repeated_span_frac: float = 0.05
    chunk_tokens: int = 1 << 20
    threads: int = 2
    examples: int = 10


def span_records(tokens: np.ndarray, phys: int, span: int, chunk_tokens: int = 1 << 20):
    """Yield SPAN_REC arrays for every `span`-token window of `tokens` that holds no EOS."""
    n = len(tokens)
    for a in range(0, max(0, n - span + 1), chunk_tokens):
        b = min(n, a + chunk_tokens + span - 1)
        x = np.asarray(tokens[a:b])
        h = PrefixHasher(x).windows(span)
        eos = np.concatenate([[0], np.cumsum(x == DOLMA2_EOS)])
        inside = np.flatnonzero(eos[span:span + h.size] - eos[:h.size] == 0)
        rec = np.empty(inside.size, SPAN_REC)
        rec["hash"], rec["phys"], rec["pos"] = h[inside], phys, inside + a
        yield rec


def repeated_spans(paths: list[str], labels: list[str], span: int, *, chunk_tokens: int = 1 << 20,
                   work_dir: str | None = None, examples: int = 10) -> dict:
    """Repeated `span`-token windows over distinct files `paths` (labels: each file's source).

    Returns per-file boolean masks of tokens inside a later occurrence, counts of later occurrences
    within and across sources, and examples. The reduce is vectorized per partition."""
    from olmax.data.shards import read_tokens

    sizes = [len(read_tokens(p)) for p in paths]
    diff = [np.zeros(n + 1, dtype=np.int32) for n in sizes]
    label_id = {name: i for i, name in enumerate(dict.fromkeys(labels))}
    lab = np.asarray([label_id[x] for x in labels], dtype=np.int64)
    within = across = windows = 0
    found: list[dict] = []
    with PartitionSpill(SPAN_REC, bits=4, work_dir=work_dir) as spill:
        for p, path in enumerate(paths):
            for rec in span_records(read_tokens(path), p, span, chunk_tokens):
                spill.add(rec)
        for part in spill.partitions():
            starts, ends = equal_runs(part["hash"])
            if starts.size == 0:
                continue
            member = np.zeros(part.size + 1, dtype=np.int64)
            np.add.at(member, starts, 1)
            np.add.at(member, ends, -1)
            sel = np.flatnonzero(np.cumsum(member[:-1]) > 0)
            group = np.repeat(np.arange(starts.size), ends - starts)
            recs = part[sel]
            order = np.lexsort((recs["pos"], recs["phys"], group))
            recs, group = recs[order], group[order]
            head = np.ones(recs.size, dtype=bool)
            head[1:] = group[1:] != group[:-1]
            head_of = np.flatnonzero(head)[np.cumsum(head) - 1]
            later = ~head
            windows += int(later.sum())
            same = lab[recs["phys"][later]] == lab[recs["phys"][head_of[later]]]
            within += int(same.sum())
            across += int((~same).sum())
            for q in np.unique(recs["phys"][later]).tolist():
                at = recs["pos"][later & (recs["phys"] == q)]
                np.add.at(diff[q], at, 1)
                np.add.at(diff[q], np.minimum(at + span, sizes[q]), -1)
            for h in np.flatnonzero(head)[: max(0, examples - len(found))].tolist():
                g = recs[h:h + int((group == group[h]).sum())]
                found.append({"file": paths[int(g[0]["phys"])], "offset": int(g[0]["pos"]),
                              "occurrences": int(g.size),
                              "also_at": [{"file": paths[int(r["phys"])], "offset": int(r["pos"])}
                                          for r in g[1:4]]})
    masks = [np.cumsum(d[:-1]) > 0 for d in diff]
    return {"sizes": sizes, "masks": masks, "windows": windows, "within": within, "across": across,
            "examples": found}


def audit_dedup(cfg: DedupConfig) -> dict:
    from olmax.audit.content import scan_content

    index = cfg.stream.file_index()
    content = scan_content(index, min_doc_tokens=cfg.min_doc_tokens, threads=cfg.threads,
                           work_dir=cfg.stream.work_dir, examples=cfg.examples, instances=False)
    paths, phys = content.phys_paths, content.phys
    label_of_phys = {}
    for f, p in enumerate(phys.tolist()):
        label_of_phys.setdefault(p, index.labels[f])
    names = index.label_names
    spans = repeated_spans(paths, [label_of_phys[p] for p in range(len(paths))], cfg.span,
                           chunk_tokens=cfg.chunk_tokens, work_dir=cfg.stream.work_dir, examples=cfg.examples)
    sizes, repeated = spans["sizes"], spans["masks"]
    windows, within, across, examples = spans["windows"], spans["within"], spans["across"], spans["examples"]
    per_source = {name: {"tokens": 0, "repeated_span_tokens": 0} for name in names}
    for p in range(len(paths)):
        s = per_source[label_of_phys[p]]
        s["tokens"] += sizes[p]
        s["repeated_span_tokens"] += int(repeated[p].sum())
    total = max(1, sum(sizes))
    rep_tokens = sum(int(r.sum()) for r in repeated)
    dfrac = content.duplicate_doc_tokens / max(1, content.doc_tokens)
    checks = [
        Check("duplicate_documents", dfrac <= cfg.max_dup_doc_frac, round(dfrac, 6), cfg.max_dup_doc_frac,
              detail=f"{content.duplicate_docs} documents, {content.duplicate_doc_tokens} tokens"),
        Check("repeated_spans", rep_tokens / total <= cfg.max_repeated_span_frac,
              round(rep_tokens / total, 6), cfg.max_repeated_span_frac,
              detail=f"{rep_tokens} tokens inside a later copy of a >= {cfg.span}-token span"),
    ]
    report = {"command": "audit dedup", "settings": asdict(cfg),
              "files": len(paths), "tokens": int(sum(sizes)), "documents": content.docs,
              "duplicate_documents": content.duplicate_docs,
              "duplicate_document_tokens": content.duplicate_doc_tokens,
              "duplicate_document_examples": content.doc_examples,
              "repeated_span_windows": int(windows), "repeated_span_tokens": rep_tokens,
              "repeated_within_source": int(within), "repeated_across_sources": int(across),
              "repeated_span_examples": examples, "sources": per_source,
              "hashing": (f"documents: xxh3-64, byte-confirmed; spans: {cfg.span}-token Karp-Rabin hashes "
                          f"(two bases mod 2^31-1), per-pair collision <= ((span-1)/p)^2 = "
                          f"{((cfg.span - 1) / (2**31 - 1)) ** 2:.1e}, not re-checked"),
              "checks": checks_json(checks), "ok": not failed(checks)}
    report["summary"] = summary_lines(f"olmax audit dedup: {cfg.stream.mix} ({sum(sizes):,} tokens, "
                                      f"{len(paths)} files)", checks)
    return report

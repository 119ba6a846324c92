"""`olmax audit loader --runner beam`: the content checks' reads and hashing as one Apache Beam pipeline.

The plan replay, the plan, label and share checks stay on the driver (they read no tokens). What reads
every token runs on the workers, one physical file per task, in one pass over each file, read where it is
(file_pass.py: xxh3 of every L-token instance window and of every document, the file's digest and, with
--span-tokens, the span windows; a worker reads a bucket's objects itself). The records meet by hash
partition in the reduces (content.py `reduce_instances` and `reduce_documents`, dedup.py's span reduce)
on the workers, which re-read every equal-hash pair byte for byte; the driver assembles the partitions'
results in partition order (content.py `assemble_content`, dedup.py `span_report`), the same report as
the local runner (scan_content, repeated_spans) but its timing. The map-reduce on Beam is
dedup_beam.map_reduce_beam's. The window's rows are then streamed past the result on the driver, by
the same code as locally (window_content.py), so the content checks' counts cannot differ by runner.
"""

from __future__ import annotations

from functools import partial

from olmax.audit.audit_config import LoaderAuditConfig
from olmax.audit.content import ContentReport, assemble_content, content_layout, content_reduces
from olmax.audit.dedup import merge_spans, span_reduce, span_report
from olmax.audit.dedup_beam import map_reduce_beam
from olmax.audit.file_pass import SPAN_REC, PassSettings, file_pass
from olmax.dedup.spill import partition_bits
from olmax.ranged import WithPins, export_pins


def content_on_beam(
    options: str, index, config: LoaderAuditConfig, *, instances: bool, labels: list[str] | None
) -> tuple[ContentReport, dict | None]:
    """(scan_content's ContentReport, repeated_spans' result or None without `config.span_tokens`) of the mix
    `index` from one Beam pipeline (`options`: Beam's flags). `labels`: each physical file's source
    (for the spans)."""
    examples, span_tokens = config.examples, config.span_tokens

    rep = content_layout(index)
    pins = export_pins(rep.phys_paths)  # the workers read the versions the driver planned with
    reduces = {kind: fn for kind, (_, fn) in content_reduces(rep, index.seq_len, examples).items()}
    if span_tokens > 0:
        reduces["spans"] = span_reduce(rep.phys_paths, labels or [], span_tokens, examples)
    reduces = {kind: WithPins(fn, pins) for kind, fn in reduces.items()}
    # the partitioning never changes a result (partitions in order are hashes in order): sized for
    # the largest kind, the spans (one record per token) when asked for, else the instance windows
    per_token = SPAN_REC.itemsize if span_tokens > 0 else 24
    bits = partition_bits(int(index.num_tokens), per_token)
    summaries, reduced = map_reduce_beam(
        options,
        list(enumerate(rep.phys_paths)),
        WithPins(
            partial(
                file_pass,
                settings=PassSettings(
                    seq_len=index.seq_len if instances else None,
                    min_doc_tokens=config.min_doc_tokens,
                    span=span_tokens,
                    eos_token_id=config.stream.eos_token_id,
                ),
            ),
            pins,
        ),
        reduces,
        bits=bits,
        work_dir=config.stream.work_dir,
        what="olmax audit loader",
    )
    content = assemble_content(
        rep, summaries, reduced.get("instances", []), reduced.get("docs", []), examples
    )
    spans = None
    if span_tokens > 0:
        spans = span_report(merge_spans(reduced.get("spans", []), examples), [t.tokens for t in summaries])
    return content, spans

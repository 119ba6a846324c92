"""The audit's eval items: `load_eval(spec)` -> (name, [EvalItem]).

A thin wrapper over olmax.data.evalsets, the one reader of eval sets (formats, item text, ids); the
item helpers are re-exported here for the audit's callers.
"""

from __future__ import annotations

from olmax.data.evalsets import (
    EvalItem,
    audit_items,
    item_answer,
    item_id,
    item_text,
    read_eval_rows,
    resolve_source,
)

__all__ = ["EvalItem", "item_answer", "item_id", "item_text", "load_eval"]


def load_eval(spec: str) -> tuple[str, list[EvalItem]]:
    """`NAME=PATH`, or a bundled set's NAME (a bare path names itself) -> (NAME, items). PATH: a jsonl,
    .arrow or .parquet file, a glob, a `datasets` folder or a folder of these."""
    name, sep, path = spec.partition("=")
    return name, audit_items(read_eval_rows(resolve_source(path if sep else name)))

"""The audit's eval items: `load_eval(spec)` -> (name, [EvalItem]).

A thin wrapper over olmax.data.evalsets, the one reader of eval sets (formats, item text, ids); the
item helpers are re-exported here for the audit's callers.
"""

from __future__ import annotations

import glob
from collections.abc import Iterator
from contextlib import contextmanager

from olmax import storage
from olmax.data.evalsets import (
    EvalItem,
    audit_items,
    item_answer,
    item_continuation,
    item_id,
    item_text,
    read_eval_rows,
    resolve_source,
)
from olmax.data.evalspec import EvalSpec, parse_eval_spec
from olmax.errors import OlmaxError

__all__ = ["EvalItem", "item_answer", "item_continuation", "item_id", "item_text", "load_eval"]


def load_eval(spec: str | EvalSpec) -> tuple[str, list[EvalItem]]:
    """`NAME=PATH`, a bundled set's NAME or a bare path (named as olmax.data.evalspec names it, the same
    name `olmax eval heldout --leaks` joins on) -> (NAME, items). PATH: a jsonl, .arrow or .parquet file, a
    glob, a `datasets` folder or a folder of these; or an fsspec URL of one (`file://` read in place,
    globs too; any other URL, a file or a folder, copied to scratch while read, errors naming the URL)."""
    parsed = spec if isinstance(spec, EvalSpec) else parse_eval_spec(spec)
    name, source = parsed.name, parsed.source
    if parsed.tokens:
        raise OlmaxError(
            f"--eval {parsed.spec}: a token file (.npy) has no text for the leak audit; audit the text "
            "the set was tokenized from"
        )
    if not storage.is_url(source):
        return name, audit_items(read_eval_rows(resolve_source(source)))
    with _local_source(source) as local:
        try:
            return name, audit_items(read_eval_rows(local))
        except OlmaxError as e:
            raise OlmaxError(str(e).replace(local, source.rstrip("/"))) from None


@contextmanager
def _local_source(url: str) -> Iterator[str]:
    local = storage.local_path(url)
    if local is not None:
        yield local
        return
    if glob.has_magic(url):
        raise OlmaxError(
            f"eval set {url!r}: a glob over a URL is not read; give the URL of a file or of a "
            "folder of eval files"
        )
    with storage.local_copy(url) as copy:
        yield copy

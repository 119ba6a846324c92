"""Held-out eval sets for held-out loss: ordered (id, text) documents with a content fingerprint.

A set is an ordered list of (id, text) documents plus a content fingerprint (sha256 over every id and
text, in order), so a report says exactly which documents it scored. `load_eval_set` reads it with
olmax.evalsets.read, the one reader of eval sets (jsonl/arrow/parquet/`datasets` folders or a bundled
set; its `documents` rendering gives the ids and texts, the bundled sets' templates included). The
same read gives the ids `olmax audit leaks` names each document by, so `clean_subset` drops a
contaminated document by either id.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from olmax.errors import OlmaxError
from olmax.evalsets.read import audit_items, documents, read_eval_rows, resolve_source

FINGERPRINT_VERSION = "olmax-evalset/1"


@dataclass(frozen=True)
class EvalSet:
    """An ordered set of held-out documents."""

    name: str
    ids: tuple[str, ...]
    texts: tuple[str, ...]
    source: str  # where it was read from
    audit_ids: tuple[str, ...] = ()  # the id `olmax audit leaks` names each document by (empty: unknown)

    @property
    def fingerprint(self) -> str:
        h = hashlib.sha256(FINGERPRINT_VERSION.encode())
        for doc_id, text in zip(self.ids, self.texts):
            for part in (doc_id, text):
                b = part.encode("utf-8")
                h.update(len(b).to_bytes(8, "little"))
                h.update(b)
        return h.hexdigest()

    def __len__(self) -> int:
        return len(self.ids)


def load_eval_set(name: str, path: str, text_field: str = "text", limit: int | None = None) -> EvalSet:
    """Read set `name` from `path` (jsonl[.gz|.zst], .arrow, .parquet, a glob, a `datasets` folder, a folder
    of these, or a bundled set's short name). `limit` keeps the first documents only."""
    source = resolve_source(path)
    rows = list(read_eval_rows(source, limit))
    if not rows:
        raise OlmaxError(f"eval set {name!r} ({path}) holds no documents")
    docs = documents(name, rows, text_field)
    return EvalSet(
        name,
        tuple(d for d, _ in docs),
        tuple(t for _, t in docs),
        source,
        tuple(it.id for it in audit_items(rows)),
    )


def contaminated_ids(leaks_report: Mapping[str, Any]) -> dict[str, set[str]]:
    """{eval name: contaminated ids} for every set an `olmax audit leaks` report audited (its "sets", a
    set with no contaminated item mapping to an empty set), from its `"contaminated": [{"eval", "id"}]`."""
    rows = leaks_report.get("contaminated")
    if not isinstance(rows, list):
        raise OlmaxError(
            'leaks report has no "contaminated" list; pass the JSON of `olmax audit leaks --out`'
        )
    audited = leaks_report.get("sets")
    out: dict[str, set[str]] = {str(k): set() for k in audited} if isinstance(audited, Mapping) else {}
    for r in rows:
        out.setdefault(str(r["eval"]), set()).add(str(r["id"]))
    return out


def join_leaks(contaminated: Mapping[str, set[str]], names: Sequence[str]) -> None:
    """Refuse a leak list that names none of the eval sets given: its clean subsets would be the whole sets."""
    if names and not set(contaminated) & set(names):
        raise OlmaxError(
            f"--leaks: the report's sets ({', '.join(sorted(contaminated)) or 'none'}) match none of the "
            f"eval sets given ({', '.join(names)}); give each set the name the audit gave it "
            "(NAME=PATH, or the same bare path / bundled name as `olmax audit leaks --eval`)"
        )


def clean_rows(eval_set: EvalSet, drop_ids: set[str]) -> list[int]:
    """Rows of `eval_set` named neither by our id nor by the audit's id in `drop_ids`."""
    if not drop_ids:
        return list(range(len(eval_set)))
    theirs = eval_set.audit_ids or (None,) * len(eval_set)
    return [
        i for i, (d, a) in enumerate(zip(eval_set.ids, theirs)) if d not in drop_ids and a not in drop_ids
    ]


def clean_subset(eval_set: EvalSet, drop_ids: set[str]) -> EvalSet:
    """The documents of `eval_set` whose id is not in `drop_ids` (the audit's clean subset)."""
    keep = clean_rows(eval_set, drop_ids)
    return EvalSet(
        eval_set.name,
        tuple(eval_set.ids[i] for i in keep),
        tuple(eval_set.texts[i] for i in keep),
        eval_set.source,
        tuple(eval_set.audit_ids[i] for i in keep) if eval_set.audit_ids else (),
    )

"""Held-out eval sets: documents from local jsonl/arrow/parquet/`datasets` folders or the bundled sets.

A set is an ordered list of (id, text) documents plus a content fingerprint (sha256 over every id and
text, in order), so a report says exactly which documents it scored. Ids are the ones
`olmax.data.readers` gives (the `id` field/column, else `FILE:LINE` / `FOLDER:ROW`), which is also what
the audit's leaks report names, so `clean_subset` can drop contaminated documents by id.

The bundled multiple-choice sets (see `olmax.assets.EVAL_SETS`) have no `text` column; each is read as
natural text through a fixed template (question followed by its correct answer, or the passage), so a
held-out loss on them is a plain language-modelling loss on that text.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from olmax.errors import OlmaxError

FINGERPRINT_VERSION = "olmax-evalset/1"


@dataclass(frozen=True)
class EvalSet:
    """An ordered set of held-out documents."""

    name: str
    ids: tuple[str, ...]
    texts: tuple[str, ...]
    source: str  # where it was read from

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


def _choices(row: Mapping[str, Any]) -> dict:
    c = row["choices"]
    return ast.literal_eval(c) if isinstance(c, str) else c


def _keyed_answer(row: Mapping[str, Any], question: str) -> str:
    c = _choices(row)
    return f"{row[question]} {c['text'][list(c['label']).index(row['answerKey'])]}"


def _option(row: Mapping[str, Any], options: Sequence[str], label: str, base: int) -> str:
    return str(row[options[int(row[label]) - base]])


def _hellaswag(row: Mapping[str, Any]) -> str:
    endings = row["endings"]
    endings = ast.literal_eval(endings) if isinstance(endings, str) else endings
    return f"{row['ctx']} {endings[int(row['label'])]}"


# Text of one row of each bundled set: the question (or context) followed by its correct answer.
TEMPLATES: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "arc_easy": lambda r: _keyed_answer(r, "question"),
    "arc_challenge": lambda r: _keyed_answer(r, "question"),
    "openbookqa": lambda r: _keyed_answer(r, "question_stem"),
    "boolq": lambda r: f"{r['passage']}\nQuestion: {r['question']}?\nAnswer: {'yes' if r['answer'] in (True, 'True') else 'no'}",
    "sciq": lambda r: (f"{r['support']}\n" if r["support"] else "") + f"Question: {r['question']}\nAnswer: {r['correct_answer']}",
    "hellaswag": _hellaswag,
    "piqa": lambda r: f"{r['goal']} {_option(r, ('sol1', 'sol2'), 'label', 0)}",
    "winogrande": lambda r: r["sentence"].replace("_", _option(r, ("option1", "option2"), "answer", 1)),
    "social_iqa": lambda r: f"{r['context']} {r['question']} {_option(r, ('answerA', 'answerB', 'answerC'), 'label', 1)}",
}


def parse_eval_spec(spec: str) -> tuple[str, str]:
    """`NAME=PATH` → (NAME, PATH); a bare bundled name or path names itself (file stem for paths)."""
    if "=" in spec:
        name, path = spec.split("=", 1)
        if not name or not path:
            raise OlmaxError(f"--eval {spec!r}: expected NAME=PATH (or a bundled set name)")
        return name, path
    return Path(spec.rstrip("/")).name.split(".")[0] if "/" in spec else spec, spec


def _bundled_rows(name: str, path: str, limit: int | None) -> EvalSet:
    import datasets

    ds = datasets.load_from_disk(path)
    if isinstance(ds, datasets.DatasetDict):
        raise OlmaxError(f"{path} is a DatasetDict with splits {list(ds.keys())}; pass one split's folder")
    n = len(ds) if limit is None else min(limit, len(ds))
    template = TEMPLATES[_template_key(name, path)]
    ids, texts = [], []
    for i in range(n):
        row = ds[i]
        ids.append(_own_id(row, i))  # the ids `olmax audit leaks` reports for bundled sets
        texts.append(template(row))
    return EvalSet(name, tuple(ids), tuple(texts), path)


def _template_key(name: str, path: str) -> str | None:
    from olmax.assets import EVAL_SETS

    if name in TEMPLATES:
        return name
    for key, sub in EVAL_SETS.items():
        if key in TEMPLATES and str(path).rstrip("/").endswith(sub):
            return key
    return None


def load_eval_set(name: str, path: str, text_field: str = "text", limit: int | None = None) -> EvalSet:
    """Read set `name` from `path` (jsonl[.gz|.zst], .arrow, .parquet, a `datasets` folder, or a bundled
    set's short name). `limit` keeps the first documents only."""
    from olmax.assets import EVAL_SETS, eval_set_path
    from olmax.data.readers import expand_inputs, read_documents

    if not Path(path).expanduser().exists() and path in EVAL_SETS:
        path = str(eval_set_path(path))
    files = expand_inputs(path)
    if len(files) == 1 and Path(files[0]).is_dir() and _template_key(name, files[0]) and text_field == "text":
        import datasets

        cols = datasets.load_from_disk(files[0]).column_names
        if "text" not in cols:
            return _bundled_rows(name, files[0], limit)
    ids: list[str] = []
    texts: list[str] = []
    for f in files:
        for doc in read_documents(f, text_field=text_field):
            if limit is not None and len(ids) >= limit:
                break
            ids.append(doc.id)
            texts.append(doc.text)
    if not ids:
        raise OlmaxError(f"eval set {name!r} ({path}) holds no documents")
    return EvalSet(name, tuple(ids), tuple(texts), str(path))


def contaminated_ids(leaks_report: Mapping[str, Any]) -> dict[str, set[str]]:
    """{eval name: ids} from an audit leaks report (`"contaminated": [{"eval": NAME, "id": ID, ...}]`)."""
    rows = leaks_report.get("contaminated")
    if not isinstance(rows, list):
        raise OlmaxError("leaks report has no \"contaminated\" list; pass the JSON of `olmax audit leaks --out`")
    out: dict[str, set[str]] = {}
    for r in rows:
        out.setdefault(str(r["eval"]), set()).add(str(r["id"]))
    return out


def _own_id(row: Mapping[str, Any], fallback: int) -> str:
    """The id `olmax audit leaks` gives this row (its rule, olmax.audit.evalsets.item_id)."""
    from olmax.audit.evalsets import item_id

    return str(item_id(row, fallback))


def audit_ids(eval_set: EvalSet) -> tuple[str, ...]:
    """Ids as `olmax audit leaks` names items (read by its own reader, repeats suffixed "#1", "#2", ...);
    empty when the source cannot be re-read or holds fewer items than the set."""
    from olmax.audit.evalsets import load_eval

    path = Path(eval_set.source)
    if not (path.is_dir() or (path.is_file() and path.name.endswith((".jsonl", ".jsonl.gz", ".json", ".json.gz")))):
        return ()
    items = load_eval(f"{eval_set.name}={path}")[1]
    if len(items) < len(eval_set):
        return ()
    return tuple(it.id for it in items[: len(eval_set)])


def clean_rows(eval_set: EvalSet, drop_ids: set[str]) -> list[int]:
    """Rows of `eval_set` named neither by our id nor by the audit's id in `drop_ids`."""
    if not drop_ids:
        return list(range(len(eval_set)))
    theirs = audit_ids(eval_set) or (None,) * len(eval_set)
    return [i for i, (d, a) in enumerate(zip(eval_set.ids, theirs)) if d not in drop_ids and a not in drop_ids]


def clean_subset(eval_set: EvalSet, drop_ids: set[str]) -> EvalSet:
    """The documents of `eval_set` whose id is not in `drop_ids` (the audit's clean subset)."""
    keep = clean_rows(eval_set, drop_ids)
    return EvalSet(eval_set.name, tuple(eval_set.ids[i] for i in keep), tuple(eval_set.texts[i] for i in keep),
                   eval_set.source)

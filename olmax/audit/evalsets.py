"""Held-out eval items as (id, text): jsonl files, HF `datasets` folders, or the bundled sets.

The text of an item is what a contaminated training document must hold: for jsonl, the `text`
field, else its passage/context and question fields joined by spaces (the same for the known HF
schemas: ARC, BoolQ, HellaSwag, PIQA, SciQ, OpenBookQA, WinoGrande, Social IQa, CommonsenseQA, COPA,
MMLU, ...). The answer is left out on purpose: a document holding the question with its answer, or
the question alone, both contain it, so leaving it out can only add recall (the answer alone is
used for records with nothing else).
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass
from pathlib import Path

from olmax.errors import OlmaxError

# Field order of the joined text: context first, then the question, then the answer.
CONTEXT_FIELDS = ("passage", "support", "context", "ctx", "premise", "goal", "sentence", "article")
QUESTION_FIELDS = ("question", "question_stem", "query", "prompt")
ANSWER_FIELDS = ("answer", "answers", "correct_answer", "target", "completion", "response")


@dataclass(frozen=True)
class EvalItem:
    id: str  # unique within its set (a repeated id gets "#1", "#2", ...)
    text: str
    raw_id: object = None  # the id as the source wrote it (int or str), reported as "id"

    @property
    def report_id(self) -> object:
        return self.id if self.raw_id is None else self.raw_id


def _answer_text(row: dict) -> str:
    """The correct answer's text for the common multiple-choice schemas ('' when not derivable)."""
    def pick(options, key) -> str:
        try:
            return str(options[int(key)])
        except (ValueError, IndexError, TypeError, KeyError):
            return ""

    choices = row.get("choices")
    if isinstance(choices, dict) and "text" in choices and "answerKey" in row:  # ARC, OBQA, CSQA
        labels = list(choices.get("label") or [])
        return str(choices["text"][labels.index(row["answerKey"])]) if row["answerKey"] in labels else ""
    if isinstance(choices, list) and "answer" in row:  # MMLU: answer is an index
        return pick(choices, row["answer"])
    if "endings" in row and "label" in row:  # HellaSwag
        return pick(row["endings"], row["label"])
    if "sol1" in row and "label" in row:  # PIQA
        return str(row.get(f"sol{int(row['label']) + 1}", "")) if str(row["label"]).isdigit() else ""
    if "option1" in row and "answer" in row:  # WinoGrande
        return str(row.get(f"option{row['answer']}", ""))
    if "answerA" in row and "label" in row:  # Social IQa (1-based)
        return str(row.get("answer" + "ABC"[int(row["label"]) - 1], "")) if str(row["label"]) in "123" \
            else ""
    if "choice1" in row and "label" in row:  # COPA
        return str(row.get(f"choice{int(row['label']) + 1}", ""))
    for name in ANSWER_FIELDS:
        value = row.get(name)
        if isinstance(value, str):
            return value
        if isinstance(value, list) and value and isinstance(value[0], str):
            return value[0]
    return ""


def item_text(row: dict) -> str:
    """The text of one record (see the module docstring)."""
    if isinstance(row.get("text"), str):
        return row["text"]
    parts = [str(row[f]) for f in CONTEXT_FIELDS if isinstance(row.get(f), str) and row[f].strip()]
    parts += [str(row[f]) for f in QUESTION_FIELDS if isinstance(row.get(f), str) and row[f].strip()]
    if not parts:  # nothing but an answer: match on it
        parts = [_answer_text(row)]
    return " ".join(parts)


def item_answer(row: dict) -> str:
    """The correct answer's text (reported beside an item; not part of what is matched)."""
    return _answer_text(row)


def item_id(row: dict, fallback: object) -> object:
    """The record's own id (id, ind, idx, question_id, doc_id), else `fallback` (its 0-based index)."""
    for name in ("id", "ind", "idx", "question_id", "doc_id"):
        if row.get(name) is not None and str(row[name]) != "":
            return row[name]
    return fallback


def _read_jsonl(path: Path) -> list[EvalItem]:
    opener = gzip.open if path.name.endswith(".gz") else open
    items = []
    with opener(path, "rt", encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise OlmaxError(f"{path}:{lineno}: not JSON ({e.msg}); each line must be an object "
                                 f"with id and text (or question/answer/passage)") from e
            if not isinstance(row, dict):
                raise OlmaxError(f"{path}:{lineno}: expected a JSON object with id and text")
            raw = item_id(row, len(items))
            items.append(EvalItem(str(raw), item_text(row), raw))
    return items


def _dataset_dirs(root: Path) -> list[Path]:
    """Folders under `root` (itself included) that hold a saved HF dataset, sorted."""
    found = sorted({p.parent for p in root.rglob("dataset_info.json")} |
                   {p.parent for p in root.rglob("state.json")})
    return [d for d in found if any(d.glob("*.arrow"))]


def _read_hf(root: Path) -> list[EvalItem]:
    import datasets

    items = []
    dirs = _dataset_dirs(root)
    if not dirs:
        raise OlmaxError(f"{root}: no saved HF dataset inside (no dataset_info.json/state.json with "
                         f".arrow files); pass a jsonl file or a `datasets.save_to_disk` folder")
    for d in dirs:
        ds = datasets.load_from_disk(str(d))
        rel = "" if d == root else str(d.relative_to(root)) + "/"
        for i, row in enumerate(ds):
            raw = item_id(row, i)
            raw = f"{rel}{raw}" if rel else raw
            items.append(EvalItem(str(raw), item_text(row), raw))
    return items


def load_eval(spec: str) -> tuple[str, list[EvalItem]]:
    """`NAME=PATH` or a bundled set's NAME → (NAME, items). PATH: .jsonl[.gz] or an HF datasets folder."""
    name, sep, path = spec.partition("=")
    if not sep:
        from olmax.assets import eval_set_path

        path = str(eval_set_path(name, quiet=True))
    p = Path(os.path.expanduser(path))
    if not p.exists():
        from olmax.assets import EVAL_SETS, eval_set_path

        if path in EVAL_SETS:
            p = eval_set_path(path, quiet=True)
        else:
            raise OlmaxError(f"--eval {spec}: {path} does not exist and is not a bundled set")
    items = _read_jsonl(p) if p.is_file() else _read_hf(p)
    seen: dict[str, int] = {}
    out = []
    for it in items:  # ids must be unique within a set: suffix repeats
        n = seen.get(it.id, 0)
        seen[it.id] = n + 1
        out.append(it if n == 0 else EvalItem(f"{it.id}#{n}", it.text, f"{it.id}#{n}"))
    return name, out

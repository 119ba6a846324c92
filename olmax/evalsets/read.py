"""Held-out eval sets, parsed once and rendered two ways: the audit's items and the evals' documents.

A source is a file, a glob, a folder or a bundled set's short name (olmax.assets.EVAL_SETS, fetched on
first use). A saved `datasets` folder is one part; any other folder is searched for saved `datasets`
folders and for .jsonl[.gz|.zst] / .json / .arrow / .parquet files outside them, each one part, in path
order. `load_eval(spec)` reads the set an `--eval` value names (olmax.evalsets.spec), also from a URL, as
the audit's items; `read_eval_rows` parses the parts (olmax.data.readers.read_rows: every record with all its
fields); the renderings:

- `audit_items` (`olmax audit leaks`): EvalItem(id, text, answer, rivals). The text is what a contaminated training
  document must hold: the `text` field, else the passage/context and question fields joined by spaces
  (the same for the known HF schemas: ARC, BoolQ, HellaSwag, PIQA, SciQ, OpenBookQA, WinoGrande, Social
  IQa, CommonsenseQA, MMLU, ...; StoryCloze's four sentences; COPA's premise without its "cause" /
  "effect"). The answer is left out on purpose: a document holding the question with its answer, or
  the question alone, both contain it, so leaving it out can only add recall (the answer alone is used
  for records with nothing else). Every item whose gold answer is text also carries it (`answer`, with
  the wrong ones as `rivals`; `item_gold`): completion tasks, whose answer continues the context
  (HellaSwag, SWAG, PIQA, COPA, StoryCloze, a `continuation` / `completion` field: `continues`), maths
  items' worked solutions (GSM8K, MATH), QA sets' answer strings and multiple-choice items' gold choice;
  the audit looks for the answer side too. The id is the record's own (`id`,
  `ind`, `idx`, `question_id`, `doc_id`), else its 0-based index in its part, after `PART/` when the
  source has several parts; a repeated id gets "#1", "#2", ...
- `documents` (held-out loss, olmax.evalsets.sets): (id, text). The text is the `text_field` field and the
  id the `id` field, else `FILE:LOC`, as olmax.data.readers names documents. The bundled
  multiple-choice sets have no text field: each record is read as natural text through its set's
  template (the question followed by its correct answer, or the passage), so a held-out loss on them
  is a plain language-modelling loss on that text, and their ids are the audit's.
"""

from __future__ import annotations

import ast
import glob
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from olmax import storage
from olmax.assets import EVAL_SETS, eval_set_path
from olmax.data.readers import JSONL_SUFFIXES, TABLE_SUFFIXES, expand_inputs, read_rows
from olmax.errors import OlmaxError
from olmax.evalsets.spec import EvalSpec, parse_eval_spec

# Field order of the audit's joined text: context first, then the question (the answer only when alone).
CONTEXT_FIELDS = ("passage", "support", "context", "ctx", "premise", "goal", "sentence", "article")
QUESTION_FIELDS = ("question", "question_stem", "query", "prompt", "problem")
ANSWER_FIELDS = ("answer", "answers", "correct_answer", "target", "completion", "response")
# A maths item's worked solution (MATH's `solution`, AQuA's `rationale`, ...); GSM8K writes it in `answer`
# with its final line `#### N` (SOLUTION_END).
SOLUTION_FIELDS = ("solution", "rationale", "explanation", "worked_solution")
SOLUTION_END = "####"
_CALCULATOR = re.compile(r"<<[^<>]*>>")  # GSM8K's calculator annotations: `<<16-3-4=9>>`, no page text
ID_FIELDS = ("id", "ind", "idx", "question_id", "doc_id")
STORY_FIELDS = tuple(f"InputSentence{i}" for i in range(1, 5))  # StoryCloze's context sentences


@dataclass(frozen=True)
class EvalRow:
    """One record of a source, with where it came from."""

    record: dict  # every field, as the source wrote it
    part: str  # the file or `datasets` folder it was read from
    prefix: str  # the part's path relative to the source folder; "" when the source is one part
    index: int  # 0-based position within its part
    loc: int  # 1-based line (jsonl) or row (tables) within its part


# ------------------------------------------------------------------------------------------ parse
def resolve_source(path: str) -> str:
    """`path` as given when it exists or is not a bundled set's name; else the bundled set's local folder."""

    if Path(path).expanduser().exists() or path not in EVAL_SETS:
        return path
    return str(eval_set_path(path))


def _is_dataset_dir(d: Path) -> bool:
    return ((d / "dataset_info.json").is_file() or (d / "state.json").is_file()) and any(d.glob("*.arrow"))


def source_parts(source: str) -> list[tuple[str, str]]:
    """(part, prefix) for each file or `datasets` folder of `source`, in path order (see the module docstring)."""
    p = Path(source).expanduser()
    if p.is_dir() and not _is_dataset_dir(p):
        sets = sorted(
            {
                str(f.parent)
                for f in p.rglob("*")
                if f.name in ("dataset_info.json", "state.json") and _is_dataset_dir(f.parent)
            }
        )
        inside = tuple(d + os.sep for d in sets)
        files = [
            str(f)
            for f in p.rglob("*")
            if f.is_file()
            and f.name.endswith(JSONL_SUFFIXES + TABLE_SUFFIXES)
            and not str(f).startswith(inside)
        ]
        parts = sorted(sets + files)
        if not parts:
            raise OlmaxError(
                f"{source}: no eval records inside (expected .jsonl[.gz|.zst], .json, .arrow or "
                ".parquet files, or a saved `datasets` folder)"
            )
        return [(part, str(Path(part).relative_to(p))) for part in parts]
    if p.is_dir():
        return [(str(p), "")]
    if not p.exists() and not glob.glob(os.path.expanduser(source), recursive=True):
        from olmax.assets import EVAL_SETS

        raise OlmaxError(
            f"eval set {source!r}: no such file or folder, no file matches it as a glob, and it is "
            f"not a bundled set (bundled: {', '.join(sorted(EVAL_SETS))})"
        )
    files = expand_inputs(source)
    if len(files) == 1:
        return [(files[0], "")]
    base = os.path.commonpath(files)
    return [(f, os.path.relpath(f, base)) for f in files]


def read_eval_rows(source: str, limit: int | None = None) -> Iterator[EvalRow]:
    """The records of `source` (a path or glob; see `resolve_source` for bundled names), the first `limit`."""
    n = 0
    for part, prefix in source_parts(source):
        for index, (loc, record) in enumerate(read_rows(part)):
            if limit is not None and n >= limit:
                return
            yield EvalRow(record, part, prefix, index, loc)
            n += 1


# --------------------------------------------------------------------------------- the audit's items
@dataclass(frozen=True)
class EvalItem:
    id: str  # unique within its set (a repeated id gets "#1", "#2", ...)
    text: str
    raw_id: object = None  # the id as the source wrote it (int or str), reported as "id"
    answer: str = ""  # the gold answer's text, when it is text (item_gold; "" for a label or none)
    rivals: tuple[str, ...] = ()  # the task's wrong answers (continuations or choices) of the same item
    continues: bool = True  # the answer continues `text` (a completion task), else it answers it

    @property
    def report_id(self) -> object:
        return self.id if self.raw_id is None else self.raw_id

    @property
    def opening(self) -> str:
        """The item's first ten words, as a report shows which item it is."""
        return " ".join(self.text.split()[:10])


def item_answer(row: Mapping[str, Any]) -> str:
    """The correct answer's text for the common multiple-choice schemas ('' when not derivable); reported
    beside an item, not part of what is matched."""

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
        return str(row.get("answer" + "ABC"[int(row["label"]) - 1], "")) if str(row["label"]) in "123" else ""
    if "choice1" in row and "label" in row:  # COPA
        return str(row.get(f"choice{int(row['label']) + 1}", ""))
    for name in ANSWER_FIELDS:
        value = row.get(name)
        if isinstance(value, str):
            return value
        if isinstance(value, list) and value and isinstance(value[0], str):
            return value[0]
    return ""


def _story(row: Mapping[str, Any]) -> list[str] | None:
    """A story-completion record's context sentences (StoryCloze's two schemas), else None."""
    for names in (STORY_FIELDS, tuple(f"input_sentence_{i}" for i in range(1, 5))):
        if all(isinstance(row.get(f), str) for f in names):
            return [str(row[f]) for f in names]
    return None


def item_continuation(row: Mapping[str, Any]) -> tuple[str, tuple[str, ...]] | None:
    """(gold continuation, wrong continuations) of a completion task's record, whose answer continues
    its context: HellaSwag and SWAG endings, PIQA solutions, COPA choices, StoryCloze endings, and any
    record with a `continuation` or `completion` string beside a context; None for other tasks (their
    answer is a label or a short choice, not text that follows the question)."""

    def split(options: Sequence[Any], label: Any, base: int):
        try:
            i = int(label) - base
        except (TypeError, ValueError):
            return None
        opts = [str(o) for o in options]
        if not 0 <= i < len(opts) or not opts[i].strip():
            return None
        return opts[i], tuple(o for j, o in enumerate(opts) if j != i and o.strip())

    if "endings" in row and "label" in row:  # HellaSwag
        endings = row["endings"]
        endings = ast.literal_eval(endings) if isinstance(endings, str) else endings
        return split(endings, row["label"], 0)
    if "ending0" in row and "label" in row:  # SWAG
        return split([row.get(f"ending{i}", "") for i in range(4)], row["label"], 0)
    if "sol1" in row and "label" in row:  # PIQA
        return split([row.get("sol1", ""), row.get("sol2", "")], row["label"], 0)
    if "choice1" in row and "premise" in row and "label" in row:  # COPA
        return split([row.get("choice1", ""), row.get("choice2", "")], row["label"], 0)
    if "AnswerRightEnding" in row:  # StoryCloze (1-based)
        options = [row.get("RandomFifthSentenceQuiz1", ""), row.get("RandomFifthSentenceQuiz2", "")]
        return split(options, row["AnswerRightEnding"], 1)
    if "answer_right_ending" in row:
        return split(
            [row.get("sentence_quiz1", ""), row.get("sentence_quiz2", "")], row["answer_right_ending"], 1
        )
    for name in ("continuation", "completion"):
        if isinstance(row.get(name), str) and row[name].strip() and item_text(row) != row[name]:
            return row[name], ()
    return None


def item_solution(row: Mapping[str, Any]) -> str:
    """A maths item's worked solution as a page would show it ('' when it has none): a SOLUTION_FIELDS
    string (MATH, AQuA), or GSM8K's `answer`, a solution that ends in `#### N`: its steps, without
    GSM8K's calculator annotations (`<<16-3-4=9>>`) and that last line (a page writes the final answer
    its own way, "The answer is 18."; the steps already hold its number)."""
    for name in SOLUTION_FIELDS:
        value = row.get(name)
        if isinstance(value, str) and value.strip():
            return _CALCULATOR.sub("", value).strip()
    value = row.get("answer")
    if isinstance(value, str) and SOLUTION_END in value:
        return _CALCULATOR.sub("", value.rpartition(SOLUTION_END)[0]).strip()
    return ""


def item_choices(row: Mapping[str, Any]) -> list[str]:
    """Every answer choice's text of a multiple-choice record (ARC, OBQA, CSQA, MMLU, SciQ, Social IQa,
    WinoGrande), the gold one among them; [] for other records."""
    choices = row.get("choices")
    if isinstance(choices, str) and choices.lstrip()[:1] in ("[", "{"):
        choices = ast.literal_eval(choices)
    if isinstance(choices, dict) and isinstance(choices.get("text"), list):
        return [str(c) for c in choices["text"]]
    if isinstance(choices, list):
        return [str(c) for c in choices]
    for names in (
        ("correct_answer", "distractor1", "distractor2", "distractor3"),  # SciQ
        ("answerA", "answerB", "answerC"),  # Social IQa
        ("option1", "option2"),  # WinoGrande
    ):
        if all(isinstance(row.get(n), str) for n in names):
            return [str(row[n]) for n in names]
    return []


def item_gold(row: Mapping[str, Any]) -> tuple[str, tuple[str, ...], bool] | None:
    """(gold answer, wrong answers, continues) of a record whose gold answer is text, else None: a
    completion task's continuation and its wrong ones (`item_continuation`, continues True); else a
    maths item's worked solution (`item_solution`); else the gold answer string (`item_answer`: a QA
    set's answer, a multiple-choice item's gold choice) with the other choices as the wrong ones. None
    when the answer is no text of its own: a label, a boolean, or the record's only text (then it is the
    item's text already). Whether it is long and specific enough to look for is the audit's rule
    (olmax.audit.leaks.eval_side)."""
    cont = item_continuation(row)
    if cont is not None:
        return cont[0], cont[1], True
    text = item_text(row)
    gold = item_solution(row) or item_answer(row)
    if not gold.strip() or gold.strip() == text.strip():
        return None
    norm = " ".join(gold.split()).lower()
    rivals = tuple(c for c in item_choices(row) if c.strip() and " ".join(c.split()).lower() != norm)
    return gold, rivals, False


def item_text(row: Mapping[str, Any]) -> str:
    """The audit's text of one record (see the module docstring)."""
    if isinstance(row.get("text"), str):
        return row["text"]
    story = _story(row)
    if story is not None:
        return " ".join(story)
    if "premise" in row and "choice1" in row:  # COPA: its question ("cause" / "effect") is no text
        return str(row["premise"])
    parts = [str(row[f]) for f in CONTEXT_FIELDS if isinstance(row.get(f), str) and row[f].strip()]
    parts += [str(row[f]) for f in QUESTION_FIELDS if isinstance(row.get(f), str) and row[f].strip()]
    if not parts:  # nothing but an answer: match on it
        parts = [item_answer(row)]
    return " ".join(parts)


def item_id(row: Mapping[str, Any], fallback: object) -> object:
    """The record's own id (ID_FIELDS, first present), else `fallback` (its 0-based index)."""
    for name in ID_FIELDS:
        if row.get(name) is not None and str(row[name]) != "":
            return row[name]
    return fallback


def _own_id(r: EvalRow) -> object:
    raw = item_id(r.record, r.index)
    return f"{r.prefix}/{raw}" if r.prefix else raw


def audit_items(rows: Iterable[EvalRow]) -> list[EvalItem]:
    """The audit's rendering: an EvalItem per record, ids unique within the set (repeats suffixed)."""
    seen: dict[str, int] = {}
    out = []
    for r in rows:
        raw = _own_id(r)
        key = str(raw)
        n = seen.get(key, 0)
        seen[key] = n + 1
        text = item_text(r.record)
        answer, rivals, continues = item_gold(r.record) or ("", (), True)
        if n:
            key = raw = f"{key}#{n}"
        out.append(EvalItem(key, text, raw, answer, rivals, continues))
    return out


# ------------------------------------------------------------------------------ the evals' documents
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
    "boolq": lambda r: (
        f"{r['passage']}\nQuestion: {r['question']}?\nAnswer: {'yes' if r['answer'] in (True, 'True') else 'no'}"
    ),
    "sciq": lambda r: (
        (f"{r['support']}\n" if r["support"] else "")
        + f"Question: {r['question']}\nAnswer: {r['correct_answer']}"
    ),
    "hellaswag": _hellaswag,
    "piqa": lambda r: f"{r['goal']} {_option(r, ('sol1', 'sol2'), 'label', 0)}",
    "winogrande": lambda r: r["sentence"].replace("_", _option(r, ("option1", "option2"), "answer", 1)),
    "social_iqa": lambda r: (
        f"{r['context']} {r['question']} {_option(r, ('answerA', 'answerB', 'answerC'), 'label', 1)}"
    ),
}


def template_key(name: str, path: str) -> str | None:
    """The TEMPLATES key for set `name` read from `path`: the name itself, else the bundled set at `path`."""

    if name in TEMPLATES:
        return name
    for key, sub in EVAL_SETS.items():
        if key in TEMPLATES and str(path).rstrip("/").endswith(sub):
            return key
    return None


def _templated(key: str, r: EvalRow) -> str:
    try:
        return TEMPLATES[key](r.record)
    except (KeyError, ValueError, IndexError, TypeError, SyntaxError) as e:
        raise OlmaxError(
            f"{r.part}:{r.loc}: record does not fit the {key} template ({type(e).__name__}: {e}); "
            "give the records a `text` field"
        ) from None


def _text(r: EvalRow, text_field: str) -> str:
    text = r.record.get(text_field)
    if not isinstance(text, str):
        what = "has no" if text is None else "has a non-string"
        raise OlmaxError(
            f"{r.part}:{r.loc}: record {what} {text_field!r} field (keys: "
            f"{', '.join(sorted(r.record))[:200]}); use --text-field to name another"
        )
    return text


def documents(name: str, rows: Sequence[EvalRow], text_field: str = "text") -> list[tuple[str, str]]:
    """The evals' rendering: (id, text) per record (see the module docstring)."""
    key = template_key(name, rows[0].part) if rows and text_field == "text" else None
    if key is not None and "text" not in rows[0].record:
        return [(str(_own_id(r)), _templated(key, r)) for r in rows]
    out = []
    for r in rows:
        doc_id = r.record.get("id")
        out.append(
            (
                f"{os.path.basename(r.part.rstrip('/'))}:{r.loc}" if doc_id is None else str(doc_id),
                _text(r, text_field),
            )
        )
    return out


def load_eval(spec: str | EvalSpec) -> tuple[str, list[EvalItem]]:
    """`NAME=PATH`, a bundled set's NAME or a bare path (named as olmax.evalsets.spec names it, the same
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

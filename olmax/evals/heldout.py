"""Held-out loss: token-weighted CE, perplexity and bits-per-byte per eval set, at any checkpoint or in-loop.

Two steps, so the trainer tokenizes once and scores every N steps:
  sets = prepare_eval_sets(["c4=/data/c4.jsonl", "sciq"], tokenizer, seq_len=L)   # once
  records = run_heldout(model, sets, step=step)                                  # every N steps
  append_jsonl(run_dir / "metrics.jsonl", records)                               # olmax.jsonio

Each record: {"kind": "heldout", "step", "eval", "subset" ("all" | "clean"), "ce" (nats per token,
token-weighted over the set), "ppl" = exp(ce), "bpb" = sum NLL / (ln 2 x UTF-8 bytes), "tokens", "bytes",
"documents", "truncated", "seq_len", "fingerprint" (the set's content hash), "tokenizer_sha256"}.
A "clean" record is emitted only for sets a leak list names (olmax.evalsets.sets.join_leaks).
An OLMo-core token set (olmax.evals.olmo_core_ppl) is weighted as OLMo-core weighs it: its "tokens" is the
label-mask count its CE is divided by, "targets" the scored targets, "weighting" says so, and "bpb" and
"bytes" are null (no text); its metrics also carry OLMo-core's names (`metric_values`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from olmax.errors import OlmaxError
from olmax.evals import olmo_core_ppl
from olmax.evals.instances import Instances, build_instances
from olmax.evals.scoring import score
from olmax.evalsets.sets import EvalSet, clean_rows, join_leaks, load_eval_set
from olmax.evalsets.spec import EvalSpec, parse_eval_specs

LN2 = math.log(2.0)


@dataclass(frozen=True)
class PreparedSet:
    """An eval set tokenized into instances; `clean_rows` are the rows outside the audit's leak list."""

    name: str
    fingerprint: str
    instances: Instances
    tokenizer_sha256: str
    seq_len: int
    clean_rows: np.ndarray | None = None  # int64 row indices; None: no leak list names the set
    olmo_core: bool = False  # an OLMo-core token file, weighted and named as OLMo-core's LM evaluator


def prepare_eval_set(
    eval_set: EvalSet,
    tokenizer,
    seq_len: int,
    *,
    drop_ids: set[str] | None = None,
    prefix_eos: bool = True,
    vocab_size: int | None = None,
) -> PreparedSet:
    """Tokenize `eval_set` with `tokenizer` (olmax.data.tokenize.Tokenizer) into length-`seq_len` instances."""
    docs = tokenizer.encode_batch(list(eval_set.texts))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if vocab_size is not None:
        top = max([pad, tokenizer.eos_token_id, *(max(d, default=0) for d in docs)])
        if top >= vocab_size:
            raise OlmaxError(
                f"tokenizer {tokenizer.path} produces id {top} but the model's vocabulary has "
                f"{vocab_size} entries; evaluate with the tokenizer the model was trained with (in-loop: "
                "$OLMAX_EVAL_TOKENIZER, or train.eval_every=0 to turn the in-loop evals off)"
            )
    inst = build_instances(
        docs, eval_set.texts, seq_len, tokenizer.eos_token_id, pad, tokenizer.decode, prefix_eos=prefix_eos
    )
    clean = None
    if drop_ids is not None:
        clean = np.asarray(clean_rows(eval_set, drop_ids), np.int64)
    return PreparedSet(eval_set.name, eval_set.fingerprint, inst, tokenizer.sha256, seq_len, clean)


def prepare_token_set(
    spec: EvalSpec, tokenizer, seq_len: int, *, limit: int | None = None, vocab_size: int | None = None
) -> PreparedSet:
    """An OLMo-core token file (olmax.evals.olmo_core_ppl), documents split at the tokenizer's EOS."""
    docs, digest = olmo_core_ppl.token_documents(spec.source, tokenizer.eos_token_id, limit)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    top = max(int(max(d.max() for d in docs)), pad)
    if vocab_size is not None and top >= vocab_size:
        raise OlmaxError(
            f"eval token file {spec.source} holds id {top} but the model's vocabulary has {vocab_size} "
            "entries; score it with the model of its tokenizer"
        )
    inst = olmo_core_ppl.build_padded_instances(docs, seq_len, pad)
    fp = olmo_core_ppl.fingerprint(digest, len(docs))
    return PreparedSet(spec.name, fp, inst, tokenizer.sha256, seq_len, olmo_core=True)


@dataclass(frozen=True)
class SetReading:
    """How `prepare_eval_sets` reads its sets: the text field, at most `limit` documents a set, EOS before
    each document (`prefix_eos`; False: OLMo-core's padded instances), the model's vocabulary size (an id
    past it is an error) and the base dir of OLMo-core's perplexity suites."""

    text_field: str = "text"
    limit: int | None = None
    prefix_eos: bool = True
    vocab_size: int | None = None
    base_dir: str | None = None


def prepare_eval_sets(
    specs: Sequence[str],
    tokenizer,
    seq_len: int,
    reading: SetReading = SetReading(),
    contaminated: Mapping[str, set[str]] | None = None,
) -> list[PreparedSet]:
    """Load and prepare each `--eval` set (olmax.evalsets.spec: `NAME=PATH`, a bundled name, a bare path, an
    OLMo-core suite under `reading.base_dir`); `contaminated` maps set name -> ids to drop (olmax.evalsets.sets)."""
    limit, vocab_size = reading.limit, reading.vocab_size
    parsed = parse_eval_specs(specs, reading.base_dir)
    if contaminated is not None:
        join_leaks(contaminated, [p.name for p in parsed if not p.tokens])
    out = []
    for spec in parsed:
        if spec.tokens:
            out.append(prepare_token_set(spec, tokenizer, seq_len, limit=limit, vocab_size=vocab_size))
            continue
        es = load_eval_set(spec.name, spec.source, text_field=reading.text_field, limit=limit)
        drop = None if contaminated is None else contaminated.get(spec.name)
        out.append(
            prepare_eval_set(
                es, tokenizer, seq_len, drop_ids=drop, prefix_eos=reading.prefix_eos, vocab_size=vocab_size
            )
        )
    return out


def _record(ps: PreparedSet, subset: str, rows: np.ndarray, nll: np.ndarray, step: int | None) -> dict:
    inst = ps.instances
    tokens = int(inst.denominators[rows].sum())
    total = float(nll[rows].sum())
    ce = total / tokens if tokens else float("nan")
    rec = {
        "kind": "heldout",
        "step": step,
        "eval": ps.name,
        "subset": subset,
        "ce": ce,
        "ppl": math.exp(ce) if tokens and ce < 700 else float("nan"),
        "bpb": None,
        "tokens": tokens,
        "bytes": None,
        "documents": int(rows.size),
        "truncated": int(inst.truncated[rows].sum()),
        "seq_len": ps.seq_len,
        "fingerprint": ps.fingerprint,
        "tokenizer_sha256": ps.tokenizer_sha256,
    }
    if ps.olmo_core:  # no text, so no bytes: OLMo-core reports CE and PPL only
        rec.update(targets=int(inst.n_tokens[rows].sum()), weighting=olmo_core_ppl.WEIGHTING)
    else:
        n_bytes = int(inst.n_bytes[rows].sum())
        rec.update(bpb=total / (LN2 * n_bytes) if n_bytes else float("nan"), bytes=n_bytes)
    return rec


def record_name(r: dict) -> str:
    """A held-out record's set as metrics name it: `sciq`, or `sciq/clean` for a subset."""
    return r["eval"] if r["subset"] == "all" else f"{r['eval']}/{r['subset']}"


def metric_values(r: dict) -> dict[str, float]:
    """A held-out record's scalars as metrics.jsonl and TensorBoard name them under `eval/`: `<set>/ce`, ...,
    and for an OLMo-core token set also OLMo-core's LM evaluator names, `lm/<label>/CE loss` and `.../PPL`."""
    key = record_name(r)
    out = {f"{key}/{m}": r[m] for m in ("ce", "ppl", "bpb", "tokens") if r.get(m) is not None}
    if "weighting" in r and r["subset"] == "all":
        out[f"lm/{r['eval']}/CE loss"] = r["ce"]
        out[f"lm/{r['eval']}/PPL"] = r["ppl"]
    return out


def run_heldout(
    model,
    eval_sets: Sequence[PreparedSet],
    *,
    step: int | None = None,
    batch_size: int = 8,
    progress: bool = False,
) -> list[dict]:
    """Score every prepared set with `model(input_ids) -> logits`; one record per set (and per clean subset).

    Pure with respect to the model: no state is kept between calls except compiled functions.
    """
    records = []
    for ps in eval_sets:
        inst = ps.instances
        nll, count, _ = score(
            model,
            inst.inputs,
            inst.targets,
            inst.mask,
            batch_size=batch_size,
            progress=progress,
            desc=f"heldout {ps.name}",
        )
        if not np.array_equal(count, inst.n_tokens):
            raise AssertionError("scored target counts differ from the instance masks")
        records.append(_record(ps, "all", np.arange(len(nll)), nll, step))
        if ps.clean_rows is not None:
            records.append(_record(ps, "clean", ps.clean_rows, nll, step))
    return records


def summary(records: Sequence[dict]) -> str:
    """A readable table of held-out records."""
    lines = [f"{'eval':<30} {'subset':<6} {'docs':>6} {'tokens':>10} {'CE':>8} {'ppl':>10} {'bpb':>7}"]
    for r in records:
        lines.append(
            f"{r['eval']:<30} {r['subset']:<6} {r['documents']:>6} {r['tokens']:>10} "
            f"{r['ce']:>8.4f} {r['ppl']:>10.3f} {'-' if r['bpb'] is None else format(r['bpb'], '.4f'):>7}"
        )
    return "\n".join(lines)

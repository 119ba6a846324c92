"""Held-out loss: token-weighted CE, perplexity and bits-per-byte per eval set, at any checkpoint or in-loop.

Two steps, so the trainer tokenizes once and scores every N steps:
  sets = prepare_eval_sets(["c4=/data/c4.jsonl", "sciq"], tokenizer, seq_len=L)   # once
  records = run_heldout(model, sets, step=step)                                  # every N steps
  append_jsonl(run_dir / "metrics.jsonl", records)                               # olmax.jsonio

Each record: {"kind": "heldout", "step", "eval", "subset" ("all" | "clean"), "ce" (nats per token,
token-weighted over the set), "ppl" = exp(ce), "bpb" = sum NLL / (ln 2 x UTF-8 bytes), "tokens", "bytes",
"documents", "truncated", "seq_len", "fingerprint" (the set's content hash), "tokenizer_sha256"}.
A "clean" record is emitted only for sets a leak list names (olmax.evals.sets.join_leaks).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from olmax.data.evalspec import parse_eval_specs
from olmax.errors import OlmaxError
from olmax.evals.instances import Instances, build_instances
from olmax.evals.scoring import score
from olmax.evals.sets import EvalSet, clean_rows, join_leaks, load_eval_set

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
                f"{vocab_size} entries; evaluate with the tokenizer the model was trained with"
            )
    inst = build_instances(
        docs, eval_set.texts, seq_len, tokenizer.eos_token_id, pad, tokenizer.decode, prefix_eos=prefix_eos
    )
    clean = None
    if drop_ids is not None:
        clean = np.asarray(clean_rows(eval_set, drop_ids), np.int64)
    return PreparedSet(eval_set.name, eval_set.fingerprint, inst, tokenizer.sha256, seq_len, clean)


def prepare_eval_sets(
    specs: Sequence[str],
    tokenizer,
    seq_len: int,
    *,
    text_field: str = "text",
    limit: int | None = None,
    contaminated: Mapping[str, set[str]] | None = None,
    prefix_eos: bool = True,
    vocab_size: int | None = None,
) -> list[PreparedSet]:
    """Load and prepare each `--eval` set (olmax.data.evalspec: `NAME=PATH`, a bundled name, a bare path);
    `contaminated` maps set name -> ids to drop (olmax.evals.sets)."""
    parsed = parse_eval_specs(specs)
    if contaminated is not None:
        join_leaks(contaminated, [p.name for p in parsed])
    out = []
    for spec in parsed:
        es = load_eval_set(spec.name, spec.source, text_field=text_field, limit=limit)
        drop = None if contaminated is None else contaminated.get(spec.name)
        out.append(
            prepare_eval_set(
                es, tokenizer, seq_len, drop_ids=drop, prefix_eos=prefix_eos, vocab_size=vocab_size
            )
        )
    return out


def _record(ps: PreparedSet, subset: str, rows: np.ndarray, nll: np.ndarray, step: int | None) -> dict:
    inst = ps.instances
    tokens = int(inst.n_tokens[rows].sum())
    n_bytes = int(inst.n_bytes[rows].sum())
    total = float(nll[rows].sum())
    ce = total / tokens if tokens else float("nan")
    return {
        "kind": "heldout",
        "step": step,
        "eval": ps.name,
        "subset": subset,
        "ce": ce,
        "ppl": math.exp(ce) if tokens and ce < 700 else float("nan"),
        "bpb": total / (LN2 * n_bytes) if n_bytes else float("nan"),
        "tokens": tokens,
        "bytes": n_bytes,
        "documents": int(rows.size),
        "truncated": int(inst.truncated[rows].sum()),
        "seq_len": ps.seq_len,
        "fingerprint": ps.fingerprint,
        "tokenizer_sha256": ps.tokenizer_sha256,
    }


def record_name(r: dict) -> str:
    """A held-out record's set as metrics name it: `sciq`, or `sciq/clean` for a subset."""
    return r["eval"] if r["subset"] == "all" else f"{r['eval']}/{r['subset']}"


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
    lines = [f"{'eval':<20} {'subset':<6} {'docs':>6} {'tokens':>10} {'CE':>8} {'ppl':>10} {'bpb':>7}"]
    for r in records:
        lines.append(
            f"{r['eval']:<20} {r['subset']:<6} {r['documents']:>6} {r['tokens']:>10} "
            f"{r['ce']:>8.4f} {r['ppl']:>10.3f} {r['bpb']:>7.4f}"
        )
    return "\n".join(lines)

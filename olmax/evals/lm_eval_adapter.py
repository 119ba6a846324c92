"""An lm-eval model registered as `olmax`: loglikelihood, loglikelihood_rolling and generate_until over
an olmax model, scored by the same jitted code as the held-out evals.

Use from Python (the lm-eval CLI cannot import out-of-tree models by itself):
  import olmax.evals.lm_eval_adapter  # registers "olmax"
  lm_eval.simple_evaluate(model="olmax", model_args={"checkpoint": DIR}, tasks=[...])
or `olmax eval lm-eval --checkpoint DIR --tasks T --include-path TASKS_DIR --out R.json`, or wrap an
in-memory model (the trainer's): `OlmaxLM(model=m, tokenizer=tok)`.

Scoring: context + continuation, left-truncated to max_length + 1 tokens, one row each; rows are sorted
by length and padded to a power-of-two bucket so few shapes compile. Empty contexts are conditioned on
EOS (dolma2 has no BOS), as lm-eval's TemplateLM does. Generation is greedy (sampling arguments are
ignored) and stops at EOS or at the first `until` string.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from olmax.assets import tokenizer_path
from olmax.data.tokenize import load_tokenizer
from olmax.errors import OlmaxError, closest
from olmax.evals.lm_eval_tasks import TASKS, bundled_task_dir
from olmax.train.export import checkpoint_tokenizer

log = logging.getLogger(__name__)


def _bucket(n: int, lo: int = 16) -> int:
    return max(lo, 1 << (n - 1).bit_length())


@register_model("olmax")
class OlmaxLM(TemplateLM):
    """lm-eval model over an olmax checkpoint directory (HF or olmax format) or an in-memory model."""

    # lm-eval builds the model from `model_args` strings (and adds its own: device, max_batch_size, ...):
    # these are the ones it reads, with their defaults
    SETTINGS: dict[str, Any] = {
        "batch_size": 8,
        "max_length": None,
        "dtype": None,
        "max_gen_toks": 256,
        "mesh": None,
    }

    def __init__(self, checkpoint: str | None = None, tokenizer=None, model=None, **kwargs):
        """`checkpoint` (a folder) or `model` (in memory); `tokenizer` (a tokenizer or its path; default the
        checkpoint's, else dolma2); kwargs `batch_size` (an int or lm-eval's "N:auto"), `max_length` (default
        the model's positions), `dtype` (default: a run's compute dtype, else float32), `max_gen_toks` and
        `mesh` (the devices the model shards over: olmax.evals.eval_mesh; default auto), as lm-eval passes
        `model_args`; others ignored."""
        super().__init__()
        from olmax.evals.scoring import load_model

        settings = {k: kwargs.pop(k, v) for k, v in self.SETTINGS.items()}
        batch_size, max_length, dtype = settings["batch_size"], settings["max_length"], settings["dtype"]
        max_gen_toks = settings["max_gen_toks"]

        if model is None:
            if checkpoint is None:
                raise OlmaxError("the olmax lm-eval model needs checkpoint=DIR (or model=...)")
            model = load_model(checkpoint, dtype, settings["mesh"])
        self.model = model
        if tokenizer is None or isinstance(tokenizer, str | Path):
            if tokenizer is None:
                tokenizer = str(checkpoint_tokenizer(checkpoint)) if checkpoint else "dolma2"
            tokenizer = load_tokenizer(str(tokenizer_path(str(tokenizer))))
        self.tok = tokenizer
        cfg = getattr(model, "cfg", None)
        self.max_length = int(max_length or (cfg.max_position_embeddings if cfg else 2048))
        self.batch_size = int(str(batch_size).split(":")[0]) if str(batch_size) != "auto" else 8
        self.max_gen_toks = int(max_gen_toks)
        pad = getattr(cfg, "pad_token_id", None) if cfg else None
        self.pad_id = pad if pad is not None else (self.tok.pad_token_id or 0)
        if kwargs:
            log.info("olmax lm-eval model ignores %s", sorted(kwargs))

    @property
    def eot_token_id(self) -> int:
        return self.tok.eos_token_id

    @property
    def tokenizer_name(self) -> str:
        return f"olmax-{self.tok.sha256[:12]}"

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        return self.tok.encode_batch([string])[0]

    def tok_decode(self, tokens: Sequence[int]) -> str:
        return self.tok.decode(list(tokens))

    def _score_rows(
        self, rows: list[tuple[list[int], int]], disable_tqdm: bool = True
    ) -> list[tuple[float, bool]]:
        """Score (tokens, n_continuation) rows: sum log p of the last n tokens, and whether all are greedy."""
        from olmax.evals.scoring import score

        results: list[tuple[float, bool] | None] = [None] * len(rows)
        order = sorted(range(len(rows)), key=lambda i: -len(rows[i][0]))
        groups: dict[int, list[int]] = {}
        for i in order:
            groups.setdefault(min(_bucket(len(rows[i][0]) - 1), self.max_length), []).append(i)
        for width, members in groups.items():
            inputs = np.full((len(members), width), self.pad_id, np.int32)
            targets = np.full_like(inputs, self.pad_id)
            mask = np.zeros(inputs.shape, np.float32)
            for r, i in enumerate(members):
                toks, n_cont = rows[i]
                n = len(toks) - 1
                inputs[r, :n] = toks[:-1]
                targets[r, :n] = toks[1:]
                mask[r, n - n_cont : n] = 1.0
            nll, _, greedy = score(
                self.model,
                inputs,
                targets,
                mask,
                batch_size=self.batch_size,
                progress=not disable_tqdm,
                desc=f"olmax loglikelihood L={width}",
            )
            for r, i in enumerate(members):
                results[i] = (-float(nll[r]), bool(greedy[r]))
        return results  # type: ignore[return-value]

    def _loglikelihood_tokens(
        self, requests, disable_tqdm: bool = False, **kwargs
    ) -> list[tuple[float, bool]]:
        rows = []
        for _, context_enc, continuation_enc in requests:
            if not continuation_enc:
                raise OlmaxError("lm-eval asked for the loglikelihood of an empty continuation")
            whole = (list(context_enc) + list(continuation_enc))[-(self.max_length + 1) :]
            rows.append((whole, min(len(continuation_enc), len(whole) - 1)))
        out = self._score_rows(rows, disable_tqdm)
        for (key, _, _), res in zip(requests, out):
            if key is not None:
                self.cache_hook.add_partial("loglikelihood", key, res)
        return out

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        windows, owner = [], []
        for k, req in enumerate(requests):
            (text,) = req.args
            for ctx, pred in map(
                make_disjoint_window,
                get_rolling_token_windows(
                    self.tok_encode(text),
                    prefix_token=self.prefix_token_id,
                    max_seq_len=self.max_length,
                    context_len=1,
                ),
            ):
                windows.append((None, ctx, pred))
                owner.append(k)
        scores = self._loglikelihood_tokens(windows, disable_tqdm=disable_tqdm) if windows else []
        totals = [0.0] * len(requests)
        for k, (lp, _) in zip(owner, scores):
            totals[k] += lp
        for req, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, total)
        return totals

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        from olmax.evals.scoring import greedy_generate

        out: list[str | None] = [None] * len(requests)
        groups: dict[tuple[int, tuple[str, ...]], list[int]] = {}
        for i, req in enumerate(requests):
            context, gen_kwargs = req.args
            kw = dict(gen_kwargs or {})
            until = kw.get("until") or []
            until = (until,) if isinstance(until, str) else tuple(until)
            groups.setdefault((int(kw.get("max_gen_toks", self.max_gen_toks)), until), []).append(i)
        for (max_new, until), members in groups.items():
            max_new = min(max_new, self.max_length - 1)
            prompts = []
            for i in members:
                ids = self.tok_encode(requests[i].args[0]) or [self.eot_token_id]
                prompts.append(ids[-(self.max_length - max_new) :])
            gens = greedy_generate(self.model, prompts, max_new, self.pad_id, batch_size=self.batch_size)
            for i, gen in zip(members, gens):
                if self.eot_token_id in gen:
                    gen = gen[: gen.index(self.eot_token_id)]
                text = self.tok_decode(gen)
                for stop in until:
                    if stop and stop in text:
                        text = text[: text.index(stop)]
                out[i] = text
                self.cache_hook.add_partial("generate_until", requests[i].args, text)
        return out  # type: ignore[return-value]


@dataclass(frozen=True)
class TaskRun:
    """How lm-eval runs the tasks: task YAMLs of `include_path` (beside the bundled offline ones), whether
    lm-eval's built-in tasks are indexed too (`include_defaults`; None: only when `include_path` does not
    define every task asked for, since indexing them takes ~8 s), few-shot count, documents per task, the
    seed of every random choice, and `log_samples`: also `samples[task]`, per document its id, target and
    the model's response to each request (for loglikelihood tasks `[loglikelihood, is_greedy]` per
    choice), which is what two backends are compared by."""

    include_path: str | list[str] | None = None
    include_defaults: bool | None = None
    num_fewshot: int | None = None
    limit: float | None = None
    seed: int = 1234
    log_samples: bool = False


def evaluate(lm, tasks: Sequence[str], run: TaskRun = TaskRun()) -> dict:
    """Run lm-eval tasks on `lm` (an OlmaxLM, or any lm-eval model such as its `hf` one); returns lm-eval's
    results dict (JSON-safe parts)."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    include_path, include_defaults, seed, log_samples = (
        run.include_path,
        run.include_defaults,
        run.seed,
        run.log_samples,
    )

    ours = [t for t in tasks if t in TASKS]
    if ours:  # the bundled offline tasks: their YAMLs live in a generated folder
        paths = [str(bundled_task_dir(ours))] + ([include_path] if include_path else [])
        include_path = paths if len(paths) > 1 else paths[0]
    tm = None
    if include_path is not None and include_defaults is not True:
        tm = TaskManager(include_path=include_path, include_defaults=False)
        if include_defaults is None and any(t not in tm.all_tasks for t in tasks):
            tm = None
    if tm is None:
        tm = TaskManager(include_path=include_path, include_defaults=include_defaults is not False)
    unknown = [t for t in tasks if t not in tm.all_tasks]
    if unknown:
        close = closest(unknown[0], [*TASKS, *tm.all_tasks])  # the bundled offline tasks, indexed or not
        raise OlmaxError(
            f"unknown lm-eval task(s) {unknown}"
            + (f"; did you mean {', '.join(close)}?" if close else "")
            + " (or give --include-path with their YAMLs; offline: dataset_path: arrow)"
        )
    res = lm_eval.simple_evaluate(
        model=lm,
        tasks=list(tasks),
        num_fewshot=run.num_fewshot,
        limit=run.limit,
        task_manager=tm,
        log_samples=log_samples,
        bootstrap_iters=0,
        random_seed=seed,
        numpy_random_seed=seed,
        torch_random_seed=seed,
        fewshot_random_seed=seed,
    )
    keep = {k: res.get(k) for k in ("results", "versions", "n-shot", "n-samples", "higher_is_better")}
    if log_samples:
        keep["samples"] = {
            task: [
                {
                    "doc_id": x["doc_id"],
                    "target": x.get("target"),
                    "responses": [r[0] if len(r) == 1 else r for r in x["resps"]],
                }
                for x in sorted(rows, key=lambda x: x["doc_id"])
            ]
            for task, rows in (res.get("samples") or {}).items()
        }
    return json.loads(json.dumps(keep, default=str))


def run_lm_eval(
    checkpoint: str,
    tasks: Sequence[str],
    run: TaskRun = TaskRun(),
    tokenizer: str | None = None,
    **model_args,
) -> dict:
    """`olmax eval lm-eval`: score `checkpoint` on `tasks`; returns the report (checkpoint, tasks, results).
    `model_args`: OlmaxLM's (`batch_size`, `max_length`, `dtype`, `max_gen_toks`, `mesh`)."""
    lm = OlmaxLM(checkpoint=checkpoint, tokenizer=tokenizer, **model_args)
    res = evaluate(lm, list(tasks), run)
    return {"checkpoint": checkpoint, "tasks": list(tasks), **res}

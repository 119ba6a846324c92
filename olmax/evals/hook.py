"""The trainer's in-loop held-out eval: `train_hook(cfg)` -> `hook(ctx) -> {"<set>/ce": ..., ...}`.

`olmax train` calls `hook(EvalContext(step, model, mesh, run_dir, config))` every `train.eval_every`
steps and merges the returned floats into that step's metrics.jsonl record as `eval/<set>/<metric>`
(metrics: ce, ppl, bpb, tokens; `<set>/clean/...` for clean subsets; an OLMo-core token set also under
OLMo-core's names, `lm/<label>/CE loss` and `lm/<label>/PPL`: olmax.evals.heldout.metric_values). Sets are tokenized once, when the
hook is built; each call only scores (`run_heldout`), reusing one compiled function across steps.

Which sets: the config's `train.eval_sets` (as `--eval`: olmax.evalsets.spec; OLMo-core suites under
`train.eval_base_dir`), else `$OLMAX_EVAL_SETS`
(`NAME=PATH;NAME=PATH`, or bundled names), else the bundled `sciq` and `arc_easy` sets; `train.eval_limit`,
else `$OLMAX_EVAL_LIMIT`, documents of each (default 64, 0: all); tokenizer `train.eval_tokenizer`, else
`$OLMAX_EVAL_TOKENIZER`, else dolma2; instance length = data.seq_len. `olmax train` fills these three
into the config before it starts (`with_eval_defaults`), so the run's config.yaml holds the values that
ran and reproduces its evals with the environment cleared. OLMo-core's downstream tasks in `train.eval_downstream`
(`train.eval_downstream_limit` documents each, 0: all) are scored too, under `downstream/TASK (...)`, so
the step record holds OLMo-core's `eval/downstream/...` names (olmax.evals.downstream).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any

from olmax.assets import tokenizer_path
from olmax.data.tokenize import load_tokenizer
from olmax.errors import OlmaxError
from olmax.evals.downstream import metric_values as downstream_values
from olmax.evals.downstream import run_downstream, run_tasks

DEFAULT_SETS = ("sciq", "arc_easy")


def flatten(records: list[dict]) -> dict[str, float]:
    """`run_heldout` records -> the flat floats a metrics.jsonl train record carries."""
    from olmax.evals.heldout import metric_values

    out: dict[str, float] = {}
    for r in records:
        out.update(metric_values(r))
    return out


LOGITS_BUDGET = 1 << 29  # fp32 logits elements per eval batch (2 GiB): B x L x V stays below this


def eval_batch_size(seq_len: int, vocab_size: int) -> int:
    """Rows per in-loop eval batch: the full logits of a batch within 2 GiB (1 row at 7B, L = 8192), at most 8."""
    return max(1, min(8, LOGITS_BUDGET // (seq_len * vocab_size)))


DEFAULT_LIMIT = 64
DEFAULT_TOKENIZER = "dolma2"


def default_tokenizer(tokenizer: str | None = None) -> str:
    """The eval sets' tokenizer spec: `tokenizer`, else $OLMAX_EVAL_TOKENIZER, else dolma2."""
    return tokenizer or os.environ.get("OLMAX_EVAL_TOKENIZER") or DEFAULT_TOKENIZER


def eval_tokenizer(tokenizer: str | None = None):
    """The eval sets' tokenizer, loaded: `tokenizer`, else $OLMAX_EVAL_TOKENIZER, else dolma2."""
    return load_tokenizer(str(tokenizer_path(default_tokenizer(tokenizer))))


def _env_limit() -> int:
    raw = os.environ.get("OLMAX_EVAL_LIMIT", "").strip()
    if not raw:
        return DEFAULT_LIMIT
    try:
        return int(raw)
    except ValueError:
        raise OlmaxError(
            f"OLMAX_EVAL_LIMIT={raw!r}: not a whole number; set it to documents per set (0: all) or unset it"
        ) from None


def eval_settings(
    cfg: Any, sets: Sequence[str] | None = None, limit: int | None = None
) -> tuple[list[str], int]:
    """(set specs, documents per set, 0 = all): the in-loop rule (module docstring), which `olmax eval watch`
    follows too so that its numbers are the trainer's."""
    train = getattr(cfg, "train", None)
    env_sets = [s.strip() for s in os.environ.get("OLMAX_EVAL_SETS", "").split(";") if s.strip()]
    specs = list(sets or ()) or list(getattr(train, "eval_sets", ())) or env_sets or list(DEFAULT_SETS)
    if limit is None:
        limit = getattr(train, "eval_limit", None)
    if limit is None:
        limit = _env_limit()
    return specs, limit


def with_eval_defaults(cfg: Any) -> Any:
    """`cfg` (an ExperimentConfig) with `train.eval_sets`, `train.eval_limit` and `train.eval_tokenizer`
    filled in by the in-loop rule (environment, then olmax's defaults) where the config leaves them unset:
    what `olmax train` records and `--dry-run` prints, so nothing the evals read is left to the environment."""
    specs, limit = eval_settings(cfg)
    train = dataclasses.replace(
        cfg.train,
        eval_sets=tuple(specs),
        eval_limit=limit,
        eval_tokenizer=default_tokenizer(cfg.train.eval_tokenizer),
    )
    return cfg.replace(train=train)


def train_hook(
    cfg: Any,
    sets: list[str] | None = None,
    limit: int | None = None,
    tokenizer: str | None = None,
    batch_size: int | None = None,
) -> Callable[[Any], dict[str, float]]:
    """Build the in-loop eval hook for experiment config `cfg` (olmax.train.config.ExperimentConfig).

    `batch_size` defaults to `eval_batch_size`.
    """
    from olmax.evals.heldout import SetReading, prepare_eval_sets, run_heldout

    specs, limit = eval_settings(cfg, sets, limit)
    tok = eval_tokenizer(tokenizer or getattr(getattr(cfg, "train", None), "eval_tokenizer", None))
    if batch_size is None:
        batch_size = eval_batch_size(cfg.data.seq_len, cfg.model.vocab_size)
    reading = SetReading(
        limit=limit or None,
        vocab_size=cfg.model.vocab_size,
        base_dir=getattr(getattr(cfg, "train", None), "eval_base_dir", None),
    )
    prepared = prepare_eval_sets(specs, tok, cfg.data.seq_len, reading)

    tasks = run_tasks(cfg, tok, cfg.data.seq_len)
    pad = getattr(cfg.model, "pad_token_id", None)
    pad = pad if pad is not None else tok.eos_token_id

    def hook(ctx: Any) -> dict[str, float]:
        out = flatten(run_heldout(ctx.model, prepared, step=ctx.step, batch_size=batch_size))
        if tasks:
            for r in run_downstream(ctx.model, tasks, pad, step=ctx.step, batch_size=batch_size):
                out.update(downstream_values(r))
        return out

    return hook

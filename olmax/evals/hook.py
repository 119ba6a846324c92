"""The trainer's in-loop held-out eval: `train_hook(cfg)` -> `hook(ctx) -> {"<set>/ce": ..., ...}`.

`olmax train` calls `hook(EvalContext(step, model, mesh, run_dir, config))` every `train.eval_every`
steps and merges the returned floats into that step's metrics.jsonl record as `eval/<set>/<metric>`
(metrics: ce, ppl, bpb, tokens; `<set>/clean/...` for clean subsets; an OLMo-core token set also under
OLMo-core's names, `lm/<label>/CE loss` and `lm/<label>/PPL`: olmax.evals.heldout.metric_values). Sets are tokenized once, when the
hook is built; each call only scores (`run_heldout`), reusing one compiled function across steps.

Which sets, how many documents of each and the tokenizer: olmax.train.eval_defaults (the config, else
the environment, else olmax's defaults; as `--eval`: olmax.evalsets.spec; OLMo-core suites under
`train.eval_base_dir`), filled into the run's config before it starts; instance length = data.seq_len.
OLMo-core's downstream tasks in `train.eval_downstream` (`train.eval_downstream_limit` documents each,
0: all) are scored too, under `downstream/TASK (...)`, so
the step record holds OLMo-core's `eval/downstream/...` names (olmax.evals.downstream).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from olmax.assets import tokenizer_path
from olmax.data.tokenize import load_tokenizer
from olmax.evals.downstream import metric_values as downstream_values
from olmax.evals.downstream import run_downstream, run_tasks
from olmax.train.eval_defaults import default_tokenizer, eval_settings


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


def eval_tokenizer(tokenizer: str | None = None):
    """The eval sets' tokenizer, loaded: `tokenizer`, else $OLMAX_EVAL_TOKENIZER, else dolma2."""
    return load_tokenizer(str(tokenizer_path(default_tokenizer(tokenizer))))


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

"""Which held-out sets a run's in-loop evals score, how many documents of each and with which tokenizer.

The rule, for each of the three: the config's `train.eval_sets` / `train.eval_limit` /
`train.eval_tokenizer`, else the environment (`$OLMAX_EVAL_SETS` as `NAME=PATH;NAME=PATH` or bundled
names, `$OLMAX_EVAL_LIMIT`, `$OLMAX_EVAL_TOKENIZER`), else olmax's defaults (the bundled `sciq` and
`arc_easy` sets, 64 documents each, dolma2). `olmax train` fills the three into the config before it
starts (`with_eval_defaults`), so the run's config.yaml holds the values that ran and reproduces its evals
with the environment cleared; the in-loop hook (olmax.evals.hook) and `olmax eval watch` read the same rule.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

from olmax.errors import OlmaxError

DEFAULT_SETS = ("sciq", "arc_easy")
DEFAULT_LIMIT = 64
DEFAULT_TOKENIZER = "dolma2"


def default_tokenizer(tokenizer: str | None = None) -> str:
    """The eval sets' tokenizer spec: `tokenizer`, else $OLMAX_EVAL_TOKENIZER, else dolma2."""
    return tokenizer or os.environ.get("OLMAX_EVAL_TOKENIZER") or DEFAULT_TOKENIZER


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

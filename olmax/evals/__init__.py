"""Evals: held-out loss and bits-per-byte, memorization flags, an lm-eval adapter, loss-curve plots.

Modules (heavy imports stay inside each; importing this package is cheap; the eval sets themselves are
olmax.evalsets):
  instances.py   one document per row, truncated to L, right-padded with PAD, label mask on padding
  eval_mesh.py   the eval mesh every eval command shards its model over (--mesh, auto from size and memory)
  eval_model.py  `EvalModel`: a model's parameters in their shards on that mesh, and its jitted kernels
  head.py        the LM head read in vocabulary blocks: per-token NLL, greedy match, log-prob moments
  scoring.py     jitted batched scoring and greedy decoding of a model on its mesh; `load_model`
  heldout.py     `prepare_eval_sets` (once) + `run_heldout(model, sets, step=...) -> records` (every N steps)
  hook.py        `train_hook(cfg)`: the in-loop hook `olmax train` calls every `train.eval_every` steps
  curves.py      train/held-out curves from metrics.jsonl, reference runs and CSV curves
  exposure_file.py  the exposure file format (per-instance served counts) and reading instance tokens
  run_dir.py     from a training run folder: the newest checkpoint's model, exposure by replaying the loader
  memorization.py  the five memorization checks: curve checks 2-3 here, the report and `eval memorization`
  model_checks.py  checks 1, 4, 5 (need a model and exposure counts); verdicts.py: thresholds and verdicts
  power.py       the checks' power: the unplanned dose each could see, the windows it would need
  lm_eval_adapter.py  lm-eval model `olmax` (loglikelihood, loglikelihood_rolling, generate_until)
  plots.py       PNG loss curves
  evals_cli.py   `olmax eval heldout | memorization | lm-eval | plot`

Public API (resolved lazily): `run_heldout`, `prepare_eval_sets`, `run_memorization` /
`MemorizationInputs`, `run_lm_eval`, `train_hook`.
"""

from olmax.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(
    __name__,
    {
        "prepare_eval_sets": "olmax.evals.heldout",
        "run_heldout": "olmax.evals.heldout",
        "MemorizationInputs": "olmax.evals.memorization",
        "run_memorization": "olmax.evals.memorization",
        "run_lm_eval": "olmax.evals.lm_eval_adapter",
        "train_hook": "olmax.evals.hook",
    },
)

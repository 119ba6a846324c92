"""Training: mesh and sharding, optimizer and schedules, train step, checkpoints, the loop.

Public API (resolved lazily: `import olmax.train` stays free of JAX):

- `load_config(name_or_path, overrides)` -> `ExperimentConfig` (presets in configs/*.yaml, dotted
  `area.key=value` overrides), `dump_yaml(cfg)`;
- `train(cfg, run_dir, mix=None, eval_hook=None)` -> summary: trains to `cfg.train.steps`, resuming from
  the newest complete checkpoint in `run_dir`; `dry_run(cfg)` -> the resolved config and sizes as text;
- `EvalContext` / `EvalHook`: `eval_hook(ctx) -> {name: float}` runs every `train.eval_every` steps and
  its values land in that step's metrics.jsonl line as `eval/<name>`; the `olmax` command hands `olmax train`
  the hook built by `olmax.evals.hook.train_hook(cfg)`;
- `Checkpointer`, `make_mesh`, `make_train_step`, `learning_rate` for callers that build their own loop.
"""

from olmax.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(
    __name__,
    {
        "ExperimentConfig": "olmax.train.config",
        "load_config": "olmax.train.config",
        "dump_yaml": "olmax.train.config",
        "train": "olmax.train.loop",
        "dry_run": "olmax.train.loop",
        "EvalContext": "olmax.train.loop",
        "EvalHook": "olmax.train.loop",
        "Checkpointer": "olmax.train.checkpoint",
        "make_mesh": "olmax.train.mesh",
        "make_train_step": "olmax.train.step",
        "learning_rate": "olmax.train.optim",
    },
)

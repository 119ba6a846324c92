"""The leak audit, and only it: which held-out eval items the training data holds (`olmax audit leaks`).

Modules:
  run.py          the phases and the local runner: index, probe, merge, candidates, decide
  leaks_beam.py   the same report from Apache Beam pipelines (`--runner beam`)
  eval_side.py    the units looked for (an item's text, its gold answer, a completion task's join)
  item_index.py   the exact index of the units' word windows (`EvalIndex`)
  normalize.py    words and text tokens of both sides (compiled kernels)
  prefilter.py    the no-false-negative screen in front of the exact lookup
  scratch.py      per-thread scratch arrays for the compiled kernels of normalize.py and prefilter.py
  weights.py      what a word says (the tokenizer's vocabulary ranks): edit costs, key terms, evidence
  align.py        verification: word alignment and the text check
  verify.py       one training file's candidates verified (the map of the second phase)
  paraphrase.py   paraphrase candidates, reported apart
  findings.py     the report's entries, the rule a line per step, the per-set counts and gate

Its settings are `olmax.audit.audit_config.LeakConfig`; its eval sets come from olmax.evalsets.
How it works and how to read its report: docs/leaks.md.
"""

from olmax.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {"audit_leaks": "olmax.audit.leaks.run"})

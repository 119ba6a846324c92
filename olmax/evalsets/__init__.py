"""Eval sets, in one home: what an `--eval` value names and how a set is read, for every command.

Modules:
  spec.py          the name rule: `NAME=PATH`, a bare path, a bundled name or an OLMo-core perplexity suite
                   → `EvalSpec` (the same name in every command, so a leak report joins the held-out report)
  evalsets_cli.py  the `--eval` option, registered once for every command that takes it
  read.py          the one reader: files, globs, folders, `datasets` folders, URLs, bundled sets → rows, rendered
                   as the leak audit's items (`load_eval`, `audit_items`) or as the evals' documents (`documents`)
  sets.py          held-out sets as scored documents with a content fingerprint; clean subsets from a leak report

Public API (resolved lazily): `parse_eval_spec`, `EvalSpec`, `load_eval`, `load_eval_set`, `clean_subset`.
"""

from olmax.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(
    __name__,
    {
        "EvalSpec": "olmax.evalsets.spec",
        "parse_eval_spec": "olmax.evalsets.spec",
        "load_eval": "olmax.evalsets.read",
        "load_eval_set": "olmax.evalsets.sets",
        "clean_subset": "olmax.evalsets.sets",
    },
)

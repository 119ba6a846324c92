"""The one reading of `--eval` (and `train.eval_sets`): `NAME=PATH`, a bare path, a bundled name or an
OLMo-core perplexity suite -> named sources.

Every command that takes an eval set (audit leaks, eval heldout / watch / gains / memorization, the
trainer's in-loop eval) parses it here, so a set carries the same name everywhere and an audit's leak
list joins the held-out report's sets by that name:

- `NAME=PATH`: the set NAME read from PATH (a file, glob, folder, URL or bundled name).
- a bundled name (olmax.assets.EVAL_SETS) that is not an existing path: the set of that name.
- any other bare path: named by its last component up to the first dot (`sets/quiz.jsonl.gz` -> `quiz`,
  `data/sciq/` -> `sciq`). A name that would hold a glob character or be empty is refused: name it.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from dataclasses import dataclass

from olmax.errors import OlmaxError


@dataclass(frozen=True)
class EvalSpec:
    """One named eval set and where it is read from."""

    name: str
    source: str  # a path, glob, URL or bundled name, as given

    @property
    def spec(self) -> str:
        return f"{self.name}={self.source}"


def set_name(path: str) -> str:
    """The name a bare path gives its set: its last component up to the first dot."""
    name = os.path.basename(path.rstrip("/")).split(".")[0]
    if not name or glob.has_magic(name):
        raise OlmaxError(f"--eval {path!r}: cannot name the set after this path; give it as NAME={path}")
    return name


def _is_bundled(spec: str) -> bool:
    from olmax.assets import EVAL_SETS

    return spec in EVAL_SETS and not os.path.exists(os.path.expanduser(spec))


def parse_eval_spec(spec: str) -> EvalSpec:
    """`NAME=PATH`, a bundled name or a bare path -> EvalSpec (the rule of the module docstring)."""
    spec = spec.strip()
    name, sep, path = spec.partition("=")
    if sep and name and not any(c in name for c in "/\\:"):  # NAME=PATH (a path holding '=' is bare)
        if not path:
            raise OlmaxError(f"--eval {spec!r}: expected NAME=PATH (or a bundled set name, or a path)")
        if glob.has_magic(name):
            raise OlmaxError(f"--eval {spec!r}: the name {name!r} holds a glob character")
        source = path
    elif not spec:
        raise OlmaxError("--eval '': expected NAME=PATH, a bundled set name or a path")
    else:
        source = spec
        name = spec if _is_bundled(spec) else set_name(spec)
    return EvalSpec(name, source)


def parse_eval_specs(specs: Sequence[str]) -> list[EvalSpec]:
    """Every `--eval` given; a name given twice is an error."""
    out = [parse_eval_spec(spec) for spec in specs]
    names = [s.name for s in out]
    for name in names:
        if names.count(name) > 1:
            raise OlmaxError(
                f"eval set name {name!r} given twice ({', '.join(s.source for s in out if s.name == name)}); "
                "name them NAME=PATH"
            )
    return out

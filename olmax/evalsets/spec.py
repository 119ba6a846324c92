"""The one reading of `--eval` (and `train.eval_sets`): `NAME=PATH`, a bare path, a bundled name or an
OLMo-core perplexity suite -> named sources.

Every command that takes an eval set (audit leaks, eval heldout / watch / gains / memorization, the
trainer's in-loop eval) parses it here, so a set carries the same name everywhere and an audit's leak
list joins the held-out report's sets by that name:

- `NAME=PATH`: the set NAME read from PATH (a file, glob, folder, URL or bundled name).
- a bundled name (olmax.assets.EVAL_SETS) that is not an existing path: the set of that name.
- any other bare path: named by its last component up to the first dot (`sets/quiz.jsonl.gz` -> `quiz`,
  `data/sciq/` -> `sciq`). A name that would hold a glob character or be empty is refused: name it.
- `olmo-core:MIX` (with a base folder): every `label,path` line of OLMo-core's perplexity manifest MIX,
  `{TOKENIZER}` replaced as OLMo-core replaces it for dolma2, each set named by its label.

A PATH ending in `.npy` is an OLMo-core token file (raw token ids, no header, documents ended by EOS;
olmax.evals.olmo_core_ppl), any other PATH a file of records with text (olmax.evalsets.read).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from dataclasses import dataclass

from olmax.assets import EVAL_SETS
from olmax.errors import OlmaxError

OLMO_CORE_PREFIX = "olmo-core:"

# OLMo-core's perplexity manifest `v3-small-ppl-validation` (src/olmo_core/data/mixes/ in OLMo-core):
# (label, the folder under eval-data/perplexity/v3_small_{TOKENIZER}/); each file is <folder>/val/part-0-00000.npy.
V3_SMALL_PPL = (
    ("c4_en-validation", "c4_en"),
    ("dolma_books-validation", "dolma_books"),
    ("dolma_common-crawl-validation", "dolma_common-crawl"),
    ("dolma_pes2o-validation", "dolma_pes2o"),
    ("dolma_reddit-validation", "dolma_reddit"),
    ("dolma_stack-validation", "dolma_stack"),
    ("dolma_wiki-validation", "dolma_wiki"),
    ("ice-validation", "ice"),
    ("m2d2_s2orc-validation", "m2d2_s2orc"),
    ("pile-validation", "pile"),
    ("wikitext_103-validation", "wikitext_103"),
)
OLMO_CORE_MIXES = {"v3-small-ppl-validation": V3_SMALL_PPL}
# OLMo-core's DataMix.build puts dolma2's ppl files under this {TOKENIZER} (the eval sets are dolma2 tokens).
DOLMA2_TOKENIZER_ID = "dolma2-tokenizer"


@dataclass(frozen=True)
class EvalSpec:
    """One named eval set: where it is read from and whether it holds token ids or records with text."""

    name: str
    source: str  # a path, glob, URL or bundled name, as given (a manifest's file: joined to the base)
    tokens: bool = False  # an OLMo-core raw token file (.npy): scored as OLMo-core's LM evaluator does

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
    return spec in EVAL_SETS and not os.path.exists(os.path.expanduser(spec))


def parse_eval_spec(spec: str) -> EvalSpec:
    """`NAME=PATH`, a bundled name or a bare path -> EvalSpec (the rule of the module docstring)."""
    spec = spec.strip()
    if spec.startswith(OLMO_CORE_PREFIX):
        raise OlmaxError(
            f"--eval {spec}: an OLMo-core suite names several sets; expand it with parse_eval_specs"
        )
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
    return EvalSpec(name, source, tokens=source.endswith(".npy"))


def olmo_core_suite(mix: str, base_dir: str | None) -> list[EvalSpec]:
    """Every set of OLMo-core manifest `mix` under `base_dir`, named by its label; a missing file is an error."""
    if mix not in OLMO_CORE_MIXES:
        raise OlmaxError(
            f"--eval {OLMO_CORE_PREFIX}{mix}: unknown OLMo-core suite (known: {', '.join(OLMO_CORE_MIXES)})"
        )
    if not base_dir:
        raise OlmaxError(
            f"--eval {OLMO_CORE_PREFIX}{mix} needs --base-dir (train.eval_base_dir): the folder holding "
            "eval-data/perplexity/ (OLMo-core's data_root); without those files evaluate other sets"
        )
    out = []
    for label, folder in OLMO_CORE_MIXES[mix]:
        path = os.path.join(
            os.path.expanduser(base_dir),
            f"eval-data/perplexity/v3_small_{DOLMA2_TOKENIZER_ID}/{folder}/val/part-0-00000.npy",
        )
        if not os.path.isfile(path):
            raise OlmaxError(
                f"--eval {OLMO_CORE_PREFIX}{mix}: {path} (set {label}) does not exist; download the suite "
                "under --base-dir as OLMo-core lays it out"
            )
        out.append(EvalSpec(label, path, tokens=True))
    return out


def parse_eval_specs(specs: Sequence[str], base_dir: str | None = None) -> list[EvalSpec]:
    """Every `--eval` given, OLMo-core suites expanded; a name given twice is an error."""
    out: list[EvalSpec] = []
    for spec in specs:
        spec = spec.strip()
        if spec.startswith(OLMO_CORE_PREFIX):
            out += olmo_core_suite(spec[len(OLMO_CORE_PREFIX) :], base_dir)
        else:
            out.append(parse_eval_spec(spec))
    names = [s.name for s in out]
    for name in names:
        if names.count(name) > 1:
            raise OlmaxError(
                f"eval set name {name!r} given twice ({', '.join(s.source for s in out if s.name == name)}); "
                "name them NAME=PATH"
            )
    return out

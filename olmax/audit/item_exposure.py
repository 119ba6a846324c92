"""`olmax audit exposure`: each contaminated eval item joined with the training steps that served it.

Input: an `olmax audit leaks` report (every document that carries each contaminated item, with the token
span of the match in its file) and the stream (mix, L, G, seed, order) the run reads. For each document
span, `olmax.data.trace.where` finds the instances holding any of its tokens and, through each epoch's
inverse order, the global steps (1-based, the trainer's) and rows that served them. Before launch this is
the plan; for a finished run (`--run DIR`) the stream and the last step come from the run folder.

Output: {"items": [{"eval", "id", "score", "documents": [{..., "steps"}], "steps", "exposures",
"first_step", "last_step"}], "sets": {NAME: {"contaminated", "exposed", "exposures"}}, "until_step",
"epochs"}: `exposures` counts servings (a step that holds two instances of the item's documents counts
twice), `steps` the distinct steps. (olmax/evals/exposure_file.py is another thing: how often each training
instance was served, for the memorization checks.)
"""

from __future__ import annotations

from olmax.data.loader import Loader
from olmax.data.trace import InverseOrder, Span, where
from olmax.errors import OlmaxError


def audit_exposure(
    leaks: dict, loader: Loader, *, epochs: int | None = None, until_step: int | None = None
) -> dict:
    """The join of a leak report with the stream `loader` serves (see the module docstring)."""
    if "contaminated" not in leaks:
        raise OlmaxError('the --leaks file is not an `olmax audit leaks` report (no "contaminated" list)')
    inverses: dict[int, InverseOrder] = {}
    items, sets = [], {}
    for c in leaks["contaminated"]:
        docs = []
        all_hits = []
        for d in c.get("documents", []):
            if "token_start" not in d:
                raise OlmaxError(
                    f"leak report item {c.get('eval')}/{c.get('id')}: a document without a token "
                    f"span; rerun `olmax audit leaks` (this olmax writes token_start/token_end)"
                )
            hits = where(
                loader,
                [Span(d["file"], int(d["token_start"]), int(d["token_end"]))],
                epochs=epochs,
                until_step=until_step,
                inverses=inverses,
            )
            docs.append({**d, "steps": sorted({h["step"] for h in hits})})
            all_hits += hits
        served = {(h["step"], h["row"]) for h in all_hits}  # one serving per (step, row)
        steps = sorted({s for s, _ in served})
        items.append(
            {
                "eval": c["eval"],
                "id": c["id"],
                "score": c.get("score"),
                "documents": docs,
                "steps": steps,
                "exposures": len(served),
                "first_step": steps[0] if steps else None,
                "last_step": steps[-1] if steps else None,
            }
        )
        s = sets.setdefault(c["eval"], {"contaminated": 0, "exposed": 0, "exposures": 0})
        s["contaminated"] += 1
        s["exposed"] += bool(steps)
        s["exposures"] += len(served)
    bpe = loader.batches_per_epoch
    return {
        "command": "audit exposure",
        "until_step": until_step if until_step is not None else (epochs or 1) * bpe,
        "epochs": epochs if until_step is None else None,
        "batches_per_epoch": bpe,
        "stream": {
            "mix": loader.spec.mix,
            "seq_len": loader.spec.seq_len,
            "global_batch_size": loader.spec.global_batch_size,
            "seed": loader.spec.seed,
            "order": loader.spec.order,
        },
        "items": items,
        "sets": sets,
    }

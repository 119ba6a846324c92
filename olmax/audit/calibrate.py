"""Leak-rule calibration: plant real eval items into real code and prose, run `olmax audit leaks`, and
print recall and precision per kind of plant.

Training text: the Python standard library's modules (code) and pydoc topics (prose), tokenized with
dolma2. Eval items: bundled SciQ / ARC-Easy / BoolQ items (real prose). Kinds, `--per-kind` items
each: `verbatim` (an item as a document of its own), `inside` (an item pasted into a longer code or
prose document), `short` (an item of fewer than n words pasted into prose), `edited` (random
per-word case changes, doubled spaces, a line break), `hard_negative` (a boilerplate sentence that
--boiler-docs training documents carry, followed by an unplanted item's text: must stay clean), and
`unplanted` items (must stay clean).

    .venv/bin/python -m olmax.audit.calibrate --per-kind 40 [--seed 0] [--ngram 13]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sysconfig
import tempfile
from collections import namedtuple
from pathlib import Path

import numpy as np

BOILERPLATES = (
    "This material is provided for educational purposes only and may be freely copied for "
    "classroom use by teachers and students.",
    "All rights reserved. No part of this publication may be reproduced without the prior written "
    "permission of the publisher.",
)
_Doc = namedtuple("_Doc", "id src loc")


def _write(path: Path, tok, docs: list[tuple[str, str]]) -> None:
    from olmax.data.index import DOLMA2_EOS
    from olmax.data.shards import ShardWriter

    ids = tok.encode_batch([t for _, t in docs], num_threads=2)
    toks = [np.asarray(list(t) + [DOLMA2_EOS], dtype=np.uint32) for t in ids]
    w = ShardWriter(path, path.parent)
    w.add_batch(np.concatenate(toks), [len(t) for t in toks],
                [_Doc(i, "calibration", n + 1) for n, (i, _) in enumerate(docs)], 0)
    w.close()


def _edit(text: str, rng: random.Random) -> str:
    words = [w.lower() if rng.random() < 0.4 else (w.upper() if rng.random() < 0.3 else w)
             for w in text.split(" ")]
    cut = len(words) // 2
    return "  ".join(words[:cut]) + "\n" + " ".join(words[cut:])


def independent_items(items: list, span: int = 8) -> list:
    """Items sharing no run of `span` words with an earlier kept item (BoolQ asks several questions
    about one passage: planting one such item contaminates its siblings for real, which would count
    as a false positive of the detector if a sibling were drawn as an unplanted item)."""
    seen: set[tuple[str, ...]] = set()
    kept = []
    for it in items:
        words = tuple(re.findall(r"\w+", it.text.lower()))
        grams = {words[i:i + span] for i in range(max(1, len(words) - span + 1))}
        if grams & seen:
            continue
        seen |= grams
        kept.append(it)
    return kept


def run(per_kind: int = 40, seed: int = 0, ngram: int = 13, boiler_docs: int = 12,
        work: str | None = None) -> dict:
    from pydoc_data.topics import topics

    from olmax.assets import tokenizer_path
    from olmax.audit.evalsets import load_eval
    from olmax.audit.leaks import LeakConfig, audit_leaks
    from olmax.audit.normalize import word_tables
    from olmax.data.stream import StreamSpec
    from olmax.data.tokenize import load_tokenizer

    rng = random.Random(seed)
    tok_path = str(tokenizer_path("dolma2", quiet=True))
    tok = load_tokenizer(tok_path)
    tables = word_tables(tok_path)

    def nwords(text: str) -> int:
        return tables.words(np.asarray(tok.encode_batch([text])[0], dtype=np.int64))[0][0].size

    pool = [it for name in ("sciq", "arc_easy", "boolq") for it in load_eval(name)[1]]
    rng.shuffle(pool)
    pool = independent_items(pool[:6000])
    long_items = [it for it in pool[:4000] if nwords(it.text) >= ngram + 2]
    short_items = [it for it in pool[:4000] if 5 <= nwords(it.text) < ngram]
    need = 4 * per_kind
    if len(long_items) < need or len(short_items) < 3 * per_kind:
        raise SystemExit("not enough eval items for --per-kind; lower it")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    code = [(p.name, p.read_text(encoding="utf-8", errors="replace")[:8000])
            for p in sorted(stdlib.glob("*.py"))[:300]]
    prose = [(k, v[:6000]) for k, v in sorted(topics.items())]
    rng.shuffle(code)  # hosts below are distinct documents, never one holding a plant
    kinds: dict[str, list[tuple[str, str]]] = {k: [] for k in
                                               ("verbatim", "inside", "short", "edited", "hard_negative",
                                                "unplanted")}
    items: list[tuple[str, str]] = []

    def add(kind: str, item_id: str, text: str) -> None:
        kinds[kind].append((item_id, text))
        items.append((item_id, text))

    for j in range(per_kind):
        it = long_items[j]
        add("verbatim", f"verbatim-{j}", it.text)
        code.append((f"plant-verbatim-{j}", it.text))
    hosts = iter([(prose, i) for i in range(len(prose))] + [(code, i) for i in range(len(code) - per_kind)])

    def paste(text: str, sep: str) -> None:
        docs, i = next(hosts)
        name, t = docs[i]
        cut = rng.randrange(len(t) // 4, max(len(t) // 4 + 1, 3 * len(t) // 4))
        docs[i] = (name, t[:cut] + sep + text + sep + t[cut:])

    for j in range(per_kind):
        it = long_items[per_kind + j]
        add("inside", f"inside-{j}", it.text)
        paste(it.text, "\n")
    for j in range(per_kind):
        it = short_items[j]
        add("short", f"short-{j}", it.text)
        paste(it.text, " ")
    for j in range(per_kind):
        it = long_items[2 * per_kind + j]
        add("edited", f"edited-{j}", it.text)
        prose.append((f"plant-edited-{j}", _edit(it.text, rng)))
    for boiler in BOILERPLATES:  # boilerplate carried by many training documents
        for _ in range(boiler_docs):
            docs, i = next(hosts)
            name, t = docs[i]
            docs[i] = (name, "# " + boiler + "\n" + t)
    for j in range(per_kind):
        pick = short_items if j % 2 else long_items[3 * per_kind:]
        it = pick[per_kind + j if j % 2 else j]
        add("hard_negative", f"hard-{j}", BOILERPLATES[j % 2] + " " + it.text)
    for j in range(per_kind):
        it = short_items[2 * per_kind + j] if j % 2 else long_items[3 * per_kind + per_kind + j]
        add("unplanted", f"unplanted-{j}", it.text)

    root = Path(work or tempfile.mkdtemp(prefix="olmax-calibrate-"))
    root.mkdir(parents=True, exist_ok=True)
    _write(root / "code.npy", tok, code)
    _write(root / "prose.npy", tok, prose)
    (root / "mix.txt").write_text(f"code,{root / 'code.npy'}\nprose,{root / 'prose.npy'}\n")
    with open(root / "items.jsonl", "w") as f:
        for i, t in items:
            f.write(json.dumps({"id": i, "text": t}) + "\n")
    report = audit_leaks(LeakConfig(StreamSpec(mix=str(root / "mix.txt")), evals=(f"cal={root / 'items.jsonl'}",),
                                    ngram=ngram))
    flagged = {c["id"] for c in report["contaminated"]}
    positive = ("verbatim", "inside", "short", "edited")
    out = {}
    for kind, members in kinds.items():
        hit = sum(i in flagged for i, _ in members)
        out[kind] = {"items": len(members), "flagged": hit}
    tp = sum(out[k]["flagged"] for k in positive)
    fp = sum(out[k]["flagged"] for k in kinds if k not in positive)
    out["overall"] = {"recall": tp / max(1, sum(out[k]["items"] for k in positive)),
                      "precision": tp / max(1, tp + fp)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-kind", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ngram", type=int, default=13)
    ap.add_argument("--boiler-docs", type=int, default=12)
    ap.add_argument("--work")
    args = ap.parse_args()
    res = run(args.per_kind, args.seed, args.ngram, args.boiler_docs, args.work)
    print(f"{'kind':<14} {'items':>6} {'flagged':>8}  metric")
    for kind, r in res.items():
        if kind == "overall":
            continue
        positive = kind not in ("hard_negative", "unplanted")
        metric = (f"recall {r['flagged'] / max(1, r['items']):.3f}" if positive else
                  f"false-positive rate {r['flagged'] / max(1, r['items']):.3f}")
        print(f"{kind:<14} {r['items']:>6} {r['flagged']:>8}  {metric}")
    o = res["overall"]
    print(f"overall recall {o['recall']:.3f}, precision {o['precision']:.3f}")


if __name__ == "__main__":
    main()

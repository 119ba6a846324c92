"""Leak-rule calibration: real held-out items, transformed and planted into real text by a generator that
shares no code with the detector, then found (or not) by `olmax audit leaks`; recall per kind of plant.

Plants: `olmax/testing/leak_plants.py` (standard library only, nothing imported from `olmax`: its words are
whitespace runs of the raw text, not the detector's tokens or normalised words; every choice comes from
a seeded `random.Random`). This script uses olmax only for data plumbing: `load_eval` for the bundled
items, the dolma2 tokenizer and `ShardWriter` to write the training shards, and `audit_leaks` to run.

Each seed:
  eval items   bundled SciQ, ARC-Easy, BoolQ and OpenBookQA items of >= 10 words, shuffled, drawn round-
               robin over the sets; an item sharing an 8-word run with an earlier one is left out (one
               BoolQ passage carries several questions: planting one contaminates its siblings for real)
  training     the standard library's *.py files (code, each cut to <= 6000 characters at a line end)
               and pydoc topics (prose, cut into <= 6000-character documents), dolma2 token shards
  positives    `--per-kind` items each, every item used once, every host document used by one plant:
               verbatim, prefix, suffix, each pasted into one host (`_one`) or into 3-6 hosts (`_many`);
               substitute, drop, markup, unicode_variants, rewrap (items of >= 25 words for all but
               verbatim), each pasted into one host
  negatives    `--per-kind` items each, never planted: `unplanted` (clean items of the same sets),
               `generic_sentence` (a clean item after a sentence that 12-16 training documents carry),
               `training_boilerplate` (a clean item after a line found in >= 12 stdlib files)
  short items  and symbols (`plant_symbol_kinds`): a short real item reworded, and maths questions of
               leak_plants.MATH_TEMPLATES (set `math`) verbatim, reworded, with operators or numbers in
               words; hard negatives planted in their place: a sign flipped, a number changed, the same
               template with other values
  answer side  (`plant_answer_kinds`) real HellaSwag, PIQA and COPA records, whose gold continuation is
               what a copy may hold without the prompt: `answer_alone` (the gold ending of >= 10 words)
               and `context_end_answer` (the context's last 5-10 words, then the gold answer); hard
               negatives, another answer of the same item planted: `wrong_ending` (a context end of at
               most half the context, then a distractor; PIQA's two solutions often differ in a word or
               two) and `wrong_ending_alone` (a distractor of >= 10 words). The eval files hold each
               record's own fields plus an "id", so the detector sees context, choices and label; the
               report's `parts` of each flagged item (context / answer / context+answer) is tallied
  renamed      (`plant_paraphrase_kinds`) `variable_renamed`: a maths question with one single-letter
               variable renamed throughout, a copy to a reader
  paraphrases  the report's separate, lower-confidence `paraphrase_candidates`: maths questions (set
               `math`) and GSM8K-style word problems (set `word_problems`, leak_plants.WORD_TEMPLATES),
               `paraphrase` the item's paraphrase template filled with the same values; hard negatives:
               `paraphrase_other_number`, `paraphrase_sign_flip`, `paraphrase_other_name` and
               `same_values_other_problem` (the values in another template's paraphrase)
  solutions    (`plant_solution_kinds`) GSM8K-style word problems (set `gsm8k`, records {id, question,
               answer} with the worked solution in GSM8K's form, leak_plants.WORD_SOLUTIONS) whose solution
               a page holds as it shows it, without the question: `solution_alone`, `solution_edited` (one
               word edit in ten), `solution_written_out` (operators in words); `long_prefix`, the first 13
               words of a real item of >= 19 words alone; hard negatives `solution_other_numbers` (the same
               solution template with other values), `key_term_replaced` (a short real item with its key
               term, its longest uncommon word, replaced by a specialised one) and `common_answer_phrase`
               (set `qa`: a question whose answer is a common phrase, that phrase planted alone)
Each later group draws from a generator of its own (10_000, 20_000, 30_000, 40_000 + seed) after the groups
before it, so the earlier kinds keep their items, plants and hosts (the solution group draws its hosts
afresh: the training text has too few documents for one plant each). The eval files hold the original item texts
(negatives: as built), one file per set. Printed: per copy kind the items, flagged and recall (or
false-positive rate; the paraphrase negatives too, as a copy flag on them is wrong, but not the positive
`paraphrase`), overall precision, how many `_many` items got the planted document count, a threshold
sweep over the reported scores, the parts of the flagged answer-side items, the paraphrase candidates
per paraphrase kind with their recall and precision (every reported item of a negative kind, copy or
paraphrase, is a false one), and a precision-recall PNG.

    .venv/bin/python -m bench.studies.leak_calibration [--seeds 0-1] [--per-kind 40] [--png PNG] [--work DIR]

The last line is `leak calibration: min recall per kind R, precision P over K seeds`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import re
import sys
import sysconfig
import tempfile
import time
from collections import namedtuple
from pathlib import Path

from bench.harness import BENCH
from bench.record import add_arguments, shrink
from olmax.testing import leak_plants as lp

BASE_POSITIVE = (
    "verbatim_one",
    "verbatim_many",
    "prefix_one",
    "prefix_many",
    "suffix_one",
    "suffix_many",
    "substitute",
    "drop",
    "markup",
    "unicode_variants",
    "rewrap",
)
BASE_NEGATIVE = ("unplanted", "generic_sentence", "training_boilerplate")
# the kinds of short items, symbols and written-out forms, planted after the others with a
# generator of their own, so the earlier kinds draw the same items, plants and hosts as before
SYMBOL_POSITIVE = ("short_edit", "math_verbatim", "math_edit", "written_out", "written_numbers")
SYMBOL_NEGATIVE = ("sign_flip", "other_number", "template_values")
# answer-side kinds on the completion sets, then the renamed variable and the paraphrase kinds: each
# group planted after the ones above with a generator of its own, for the same reason
ANSWER_POSITIVE = ("answer_alone", "context_end_answer")
ANSWER_NEGATIVE = ("wrong_ending", "wrong_ending_alone")
RENAMED_POSITIVE = ("variable_renamed",)
PARAPHRASE_POSITIVE = ("paraphrase",)
PARAPHRASE_NEGATIVE = (
    "paraphrase_other_number",
    "paraphrase_sign_flip",
    "paraphrase_other_name",
    "same_values_other_problem",
)
PARAPHRASE_KINDS = PARAPHRASE_POSITIVE + PARAPHRASE_NEGATIVE
# worked solutions (set `gsm8k`: word problems with their GSM8K-form solutions), long prefixes of real items,
# key terms replaced in short real items and common answer phrases (set `qa`): planted after every group
# above with a generator of its own, so those keep their items, plants and hosts
SOLUTION_POSITIVE = ("solution_alone", "solution_edited", "solution_written_out", "long_prefix")
SOLUTION_NEGATIVE = ("solution_other_numbers", "key_term_replaced", "common_answer_phrase")
SOLUTION_SET = "gsm8k"
QA_SET = "qa"
LONG_PREFIX_WORDS = 19  # items of at least this many words carry a long prefix (its first 13)
# copy kinds: recall (positives) and false-positive rate (negatives) of the report's `contaminated`
# flags. The positive paraphrase kind is not a copy and stays out of these figures; the paraphrase
# negatives are in (a copy flag on them is wrong).
POSITIVE = BASE_POSITIVE + SYMBOL_POSITIVE + ANSWER_POSITIVE + RENAMED_POSITIVE + SOLUTION_POSITIVE
NEGATIVE = BASE_NEGATIVE + SYMBOL_NEGATIVE + ANSWER_NEGATIVE + PARAPHRASE_NEGATIVE + SOLUTION_NEGATIVE
MATH_SET = "math"
WORD_SET = "word_problems"
ANSWER_SETS = ("hellaswag", "piqa", "copa")
# the sets each answer kind draws from (COPA's choices are too short for the kinds of >= 10-word answers,
# and its premise too short to hold a context end of at most half of it)
ANSWER_KIND_SETS = {
    "answer_alone": ("hellaswag", "piqa"),
    "context_end_answer": ANSWER_SETS,
    "wrong_ending": ("hellaswag", "piqa"),
    "wrong_ending_alone": ("hellaswag", "piqa"),
}
ANSWER_MIN_WORDS = 10
SHORT_MAX_WORDS = 20
MANY = tuple(k for k in POSITIVE if k.endswith("_many"))
SETS = ("sciq", "arc_easy", "boolq", "openbookqa")
MIN_WORDS, MIN_EDITED_WORDS = 10, 25
DOC_CHARS = 6000
SWEEP = tuple(round(0.5 + 0.05 * i, 2) for i in range(10))  # 0.50 .. 0.95
_Doc = namedtuple("_Doc", "id src loc")


def parse_seeds(text: str) -> list[int]:
    """'0-3' -> [0, 1, 2, 3]; '1,5,7' -> [1, 5, 7]."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        seeds += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
    return seeds


# ------------------------------------------------------------------------------------- training text
def _cut(text: str, limit: int = DOC_CHARS) -> str:
    """`text` cut at the last line end within `limit` characters (at `limit` when there is none)."""
    if len(text) <= limit:
        return text
    end = text.rfind("\n", 0, limit)
    return text[: end + 1] if end > 0 else text[:limit]


def _chunks(text: str, limit: int = DOC_CHARS) -> list[str]:
    out = []
    while text:
        piece = _cut(text, limit)
        out.append(piece)
        text = text[len(piece) :]
    return [p for p in out if p.strip()]


def training_docs() -> list[list[str]]:
    """[[source, name, text]]: the standard library's *.py files (code) and pydoc topics (prose)."""
    from pydoc_data.topics import topics

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    docs = []
    for p in sorted(stdlib.rglob("*.py")):
        if "site-packages" in p.parts:
            continue
        text = _cut(p.read_text(encoding="utf-8", errors="replace"))
        if text.strip():
            docs.append(["code", str(p.relative_to(stdlib)), text])
    for name, body in sorted(topics.items()):
        for j, piece in enumerate(_chunks(body)):
            docs.append(["prose", f"{name}#{j}", piece])
    return docs


def _write_shard(path: Path, tok, docs: list[tuple[str, str]]) -> None:
    """Documents [(id, text)] as one dolma2 token shard (tokens + EOS each) with its sidecar."""
    import numpy as np

    from olmax.data.index import DOLMA2_EOS
    from olmax.data.shards import ShardWriter

    ids = tok.encode_batch([t for _, t in docs], num_threads=2)
    toks = [np.asarray(list(t) + [DOLMA2_EOS], dtype=np.uint32) for t in ids]
    w = ShardWriter(path, path.parent)
    w.add_batch(
        np.concatenate(toks),
        [len(t) for t in toks],
        [_Doc(i, "calibration", n + 1) for n, (i, _) in enumerate(docs)],
        sum(len(t.encode()) for _, t in docs),
    )
    w.close()


# ----------------------------------------------------------------------------------------- eval items
def eval_pools(rng: random.Random) -> tuple[list[tuple[str, object]], list[tuple[str, object]]]:
    """(long, short): (set, EvalItem) pairs, independent of each other, shuffled; long items have >=
    MIN_EDITED_WORDS words (interleaved round-robin over the sets), short ones MIN_WORDS up to that."""
    from olmax.evalsets.read import load_eval

    pool = [(name, it) for name in SETS for it in load_eval(name)[1] if len(it.text.split()) >= MIN_WORDS]
    rng.shuffle(pool)
    pool = [pool[i] for i in lp.independent([it.text for _, it in pool])]
    long = lp.round_robin([p for p in pool if len(p[1].text.split()) >= MIN_EDITED_WORDS], SETS)
    short = [p for p in pool if len(p[1].text.split()) < MIN_EDITED_WORDS]
    return long, short


def _distinct_lines(lines: list[str], k: int) -> list[str]:
    """The first `k` lines of distinct shapes (quoted strings as `q`, runs of words as one `w`): the codec
    tables' `'A'  #  0x41 -> LATIN CAPITAL LETTER A` rows count once, `from x import y` lines once."""
    kept, shapes = [], set()
    for ln in lines:
        shape = re.sub(r"'[^']*'|\"[^\"]*\"", "q", ln)
        shape = re.sub(r"[\w.-]+(?:\s+[\w.-]+)*", "w", " ".join(shape.split()))
        if shape not in shapes:
            shapes.add(shape)
            kept.append(ln)
    return kept[:k]


def _deal(pairs: list, kinds: tuple[str, ...], per_kind: int, rng: random.Random) -> dict[str, list]:
    """The first len(kinds) * per_kind of `pairs`, shuffled and dealt per_kind to each kind."""
    need = len(kinds) * per_kind
    if len(pairs) < need:
        raise SystemExit(f"{need} eval items wanted for {kinds}, {len(pairs)} available; lower --per-kind")
    take = pairs[:need]
    del pairs[:need]
    rng.shuffle(take)
    return {k: take[i * per_kind : (i + 1) * per_kind] for i, k in enumerate(kinds)}


# ------------------------------------------------------------------------------------------- one seed
def build(seed: int, per_kind: int, root: Path, tok) -> tuple[list[dict], list[str]]:
    """Plant one seed's items into the training text under `root`; returns (records, eval specs): a
    record per eval item {kind, eval, id, hosts}, `hosts` the training document ids it was planted in."""
    rng = random.Random(seed)
    long, short = eval_pools(rng)
    edited = (
        "prefix_one",
        "prefix_many",
        "suffix_one",
        "suffix_many",
        "substitute",
        "drop",
        "markup",
        "unicode_variants",
        "rewrap",
    )
    dealt = _deal(long, edited, per_kind, rng)
    rest = short + long  # verbatim plants and negatives: any length >= MIN_WORDS
    rng.shuffle(rest)
    rest = lp.round_robin(rest, SETS)
    dealt.update(_deal(rest, ("verbatim_one", "verbatim_many") + BASE_NEGATIVE, per_kind, rng))

    docs = training_docs()
    ids = [f"{src}-{n}" for n, (src, _, _) in enumerate(docs)]
    code = [t for src, _, t in docs if src == "code"]
    boiler = _distinct_lines([ln for ln, _ in lp.common_lines(code, min_docs=12)], 30)
    texts = [t for _, _, t in docs]
    used: set[int] = set()
    records: list[dict] = []
    per_set: dict[str, list[dict]] = {}

    def record(kind: str, name: str, item, text: str, hosts: list[int], row: dict | None = None) -> None:
        records.append({"kind": kind, "eval": name, "id": str(item.id), "hosts": [ids[h] for h in hosts]})
        per_set.setdefault(name, []).append(row or {"id": str(item.id), "text": text})

    for kind in BASE_POSITIVE:
        base = kind.removesuffix("_one").removesuffix("_many")
        for name, item in dealt[kind]:
            plant = lp.TRANSFORMS[base](item.text, rng)
            pasted = lp.paste(plant, texts, kind in MANY, rng, used)
            for h, t in pasted.items():
                texts[h] = t
            record(kind, name, item, item.text, sorted(pasted))
    for sentence in lp.GENERIC_SENTENCES:  # each carried by 12-16 training documents
        for h, t in lp.on_many(sentence, texts, rng, used, count=rng.randint(12, 16)).items():
            texts[h] = t
    for j, (name, item) in enumerate(dealt["generic_sentence"]):
        sentence = lp.GENERIC_SENTENCES[j % len(lp.GENERIC_SENTENCES)]
        record("generic_sentence", name, item, lp.with_generic_sentence(item.text, sentence), [])
    for name, item in dealt["training_boilerplate"]:
        line = rng.choice(boiler)
        record("training_boilerplate", name, item, lp.with_boilerplate_line(item.text, line), [])
    for name, item in dealt["unplanted"]:
        record("unplanted", name, item, item.text, [])
    made = plant_symbol_kinds(seed, per_kind, rest, texts, used, record)
    plant_answer_kinds(seed, per_kind, texts, used, record)
    plant_paraphrase_kinds(seed, per_kind, texts, used, record, made)
    taken = {(r["eval"], r["id"]) for r in records}
    free = [(name, it) for name, it in rest if (name, str(it.id)) not in taken]
    plant_solution_kinds(seed, per_kind, free, texts, record, made)

    root.mkdir(parents=True, exist_ok=True)
    for src in ("code", "prose"):
        _write_shard(
            root / f"{src}.npy", tok, [(ids[n], texts[n]) for n, (s, _, _) in enumerate(docs) if s == src]
        )
    (root / "mix.txt").write_text(f"code,{root / 'code.npy'}\nprose,{root / 'prose.npy'}\n")
    specs = []
    for name, rows in sorted(per_set.items()):
        path = root / f"{name}.jsonl"
        with open(path, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
        specs.append(f"{name}={path}")
    return records, specs


def plant_symbol_kinds(
    seed: int, per_kind: int, rest: list, texts: list[str], used: set[int], record
) -> set[str]:
    """The short-item and symbol kinds, each pasted into one host: `short_edit` (a real item of <=
    SHORT_MAX_WORDS words left after the other kinds, reworded by one or two word edits), and on maths
    questions of the `math` set (leak_plants.MATH_TEMPLATES): `math_verbatim`, `math_edit` (reworded,
    numbers and operators untouched), `written_out` (operators in words), `written_numbers` (numbers up
    to twenty in words); hard
    negatives, the eval item never planted but a different question from it: `sign_flip`,
    `other_number`, `template_values` (the same template, other values). Returns the maths questions and
    plants made."""
    rng = random.Random(10_000 + seed)
    short = [p for p in rest if len(p[1].text.split()) <= SHORT_MAX_WORDS]
    for name, item in _deal(short, ("short_edit",), per_kind, rng)["short_edit"]:
        pasted = lp.paste(lp.short_edit(item.text, rng), texts, False, rng, used)
        for h, t in pasted.items():
            texts[h] = t
        record("short_edit", name, item, item.text, sorted(pasted))
    transform = {
        "math_verbatim": lambda text, t: text,
        "math_edit": lambda text, t: lp.short_edit(text, rng),
        "written_out": lambda text, t: lp.written_out(text),
        "written_numbers": lambda text, t: lp.written_numbers(text),
        "sign_flip": lambda text, t: lp.sign_flip(text, rng),
        "other_number": lambda text, t: lp.other_number(text, rng),
        "template_values": lambda text, t: lp.template_values(lp.MATH_TEMPLATES[t], text, rng),
    }
    signed = [t for t, tpl in enumerate(lp.MATH_TEMPLATES) if "{op}" in tpl or " - " in tpl]
    spaced = [t for t, tpl in enumerate(lp.MATH_TEMPLATES) if re.search(r" (?:[-+*=]|\{op\}) ", tpl)]
    made: set[str] = set()
    for kind, fn in transform.items():
        pool = {"sign_flip": signed, "written_out": spaced}.get(kind, range(len(lp.MATH_TEMPLATES)))
        for j in range(per_kind):
            t = pool[j % len(pool)]
            while True:  # every eval question distinct, none another's plant, every plant a change
                text = lp.math_item(lp.MATH_TEMPLATES[t], rng)
                plant = fn(text, t)
                if text not in made and plant not in made and (kind == "math_verbatim" or plant != text):
                    break
            made.update((text, plant))
            pasted = lp.paste(plant, texts, False, rng, used)
            for h, new in pasted.items():
                texts[h] = new
            record(
                kind,
                MATH_SET,
                _Item(f"{kind}-{j}", text),
                text,
                [] if kind in SYMBOL_NEGATIVE else sorted(pasted),
            )
    return made


_Item = namedtuple("_Item", "id text")
_Completion = namedtuple("_Completion", "record context choices gold")


def answer_pool(rng: random.Random) -> list[tuple[str, _Completion]]:
    """(set, _Completion) for every record of the bundled completion sets (ANSWER_SETS) with a valid label,
    shuffled; a record sharing an 8-word run of its context and choices with an earlier one is left out
    (HellaSwag's consecutive captions of one video: one item's ending is another's context)."""
    from olmax.evalsets.read import read_eval_rows, resolve_source

    pool = []
    for name in ANSWER_SETS:
        for row in read_eval_rows(resolve_source(name)):
            parts = lp.completion_parts(name, row.record)
            if parts is not None:
                pool.append((name, _Completion(row.record, *parts)))
    rng.shuffle(pool)
    return [pool[i] for i in lp.independent([" ".join([c.context, *c.choices]) for _, c in pool])]


def _answer_fits(kind: str, c: _Completion) -> bool:
    """Whether the item `c` can carry a plant of the answer kind `kind`."""
    if kind == "answer_alone":
        return len(c.choices[c.gold].split()) >= ANSWER_MIN_WORDS
    if kind == "wrong_ending":
        return len(c.context.split()) >= 10 and bool(lp.wrong_choices(c.choices, c.gold))
    if kind == "wrong_ending_alone":
        return any(len(w.split()) >= ANSWER_MIN_WORDS for w in lp.wrong_choices(c.choices, c.gold))
    return True


def plant_answer_kinds(seed: int, per_kind: int, texts: list[str], used: set[int], record) -> None:
    """The answer-side kinds on real HellaSwag / PIQA / COPA records, each plant pasted into one host:
    positives `answer_alone` (the gold ending of >= 10 words) and `context_end_answer` (the context's last
    5-10 words, then the gold answer); hard negatives, the item never planted but another answer of it
    is: `wrong_ending` (a context end of at most half the context, then a distractor) and
    `wrong_ending_alone` (a distractor of >= 10 words). Items round-robin over ANSWER_KIND_SETS, each
    used once; the eval files hold each item's original record with an "id" field added."""
    rng = random.Random(20_000 + seed)
    pool = answer_pool(rng)
    for kind in ANSWER_POSITIVE + ANSWER_NEGATIVE:
        fits = [p for p in pool if p[0] in ANSWER_KIND_SETS[kind] and _answer_fits(kind, p[1])]
        take = lp.round_robin(fits, ANSWER_KIND_SETS[kind])[:per_kind]
        if len(take) < per_kind:
            raise SystemExit(f"{per_kind} items wanted for {kind}, {len(take)} available; lower --per-kind")
        taken = {id(c) for _, c in take}
        pool = [p for p in pool if id(p[1]) not in taken]
        for j, (name, c) in enumerate(take):
            if kind == "answer_alone":
                plant = lp.answer_alone(c.choices[c.gold])
            elif kind == "context_end_answer":
                plant = lp.context_end_answer(c.context, c.choices[c.gold], rng)
            elif kind == "wrong_ending":
                plant = lp.wrong_ending(c.context, c.choices, c.gold, rng)
            else:
                plant = lp.wrong_ending_alone(c.choices, c.gold, rng, ANSWER_MIN_WORDS)
            pasted = lp.paste(plant, texts, False, rng, used)
            for h, new in pasted.items():
                texts[h] = new
            item = _Item(f"{kind}-{j}", c.context)
            row = {"id": item.id, **{k: v for k, v in c.record.items() if k != "id"}}
            record(kind, name, item, c.context, [] if kind in ANSWER_NEGATIVE else sorted(pasted), row)


def _paraphrase_sources(kind: str) -> list[tuple[str, int]]:
    """The (family, template index) cycle a renamed-variable or paraphrase kind draws its items from:
    family "math" (MATH_TEMPLATES) or "word" (WORD_TEMPLATES)."""
    math = list(range(len(lp.MATH_TEMPLATES)))
    word = list(range(len(lp.WORD_TEMPLATES)))
    if kind == "variable_renamed":
        sample = {"a": 2, "b": 3, "c": 4, "op": "+"}
        return [("math", t) for t in math if lp.variables(lp.fill(lp.MATH_TEMPLATES[t], sample))]
    if kind == "paraphrase_sign_flip":
        return [("math", t) for t in math if re.search(r" (?:[-+]|\{op\}) ", lp.MATH_PARAPHRASES[t])]
    if kind == "paraphrase_other_name":
        return [("word", t) for t in word]
    if kind == "same_values_other_problem":  # templates that share their number slots with another
        math = [
            t
            for t in math
            if sum(lp.number_slots(u) == lp.number_slots(lp.MATH_TEMPLATES[t]) for u in lp.MATH_TEMPLATES) > 1
        ]
    pairs = []
    for i in range(max(len(math), len(word))):
        pairs += [("math", math[i % len(math)]), ("word", word[i % len(word)])]
    return pairs


def paraphrase_plant(kind: str, family: str, t: int, rng: random.Random) -> tuple[str, str]:
    """(eval item, plant) of a renamed-variable or paraphrase kind on template `t` of `family`."""
    if family == "math":
        templates, paraphrases, values = lp.MATH_TEMPLATES, lp.MATH_PARAPHRASES, lp.math_values(rng)
    else:
        templates, paraphrases, values = lp.WORD_TEMPLATES, lp.WORD_PARAPHRASES, lp.word_values(rng)
    text = lp.fill(templates[t], values)
    para = lp.fill(paraphrases[t], values)
    if kind == "variable_renamed":
        return text, lp.rename_variable(text, rng)
    if kind == "paraphrase":
        return text, para
    if kind == "paraphrase_other_number":
        return text, lp.other_number(para, rng)
    if kind == "paraphrase_sign_flip":
        return text, lp.sign_flip(para, rng)
    if kind == "paraphrase_other_name":
        return text, lp.fill(paraphrases[t], lp.other_name(values, rng))
    return text, lp.same_values_other_problem(t, values, templates, paraphrases, rng)


def plant_paraphrase_kinds(
    seed: int, per_kind: int, texts: list[str], used: set[int], record, made: set[str]
) -> None:
    """The renamed-variable and paraphrase kinds, each plant pasted into one host: `variable_renamed` (a
    copy: a maths question with one variable renamed throughout); `paraphrase` (the item's paraphrase
    template filled with its values) and its hard negatives, the item never planted: `paraphrase_other_
    number`, `paraphrase_sign_flip`, `paraphrase_other_name`, `same_values_other_problem`. Maths items go
    to the `math` set, word problems to `word_problems`; every item and plant differs from all the maths
    questions and plants in `made` (which grows)."""
    rng = random.Random(30_000 + seed)
    for kind in RENAMED_POSITIVE + PARAPHRASE_KINDS:
        sources = _paraphrase_sources(kind)
        for j in range(per_kind):
            family, t = sources[j % len(sources)]
            while True:  # every eval item distinct, none another's plant, every plant a change
                text, plant = paraphrase_plant(kind, family, t, rng)
                if text not in made and plant not in made and plant != text:
                    break
            made.update((text, plant))
            pasted = lp.paste(plant, texts, False, rng, used)
            for h, new in pasted.items():
                texts[h] = new
            name = MATH_SET if family == "math" else WORD_SET
            record(kind, name, _Item(f"{kind}-{j}", text), text, [] if kind in NEGATIVE else sorted(pasted))


def plant_solution_kinds(
    seed: int, per_kind: int, free: list, texts: list[str], record, made: set[str]
) -> None:
    """Each plant pasted into one host. Word problems of leak_plants.WORD_TEMPLATES (set `gsm8k`, records
    {id, question, answer} with the GSM8K-form solution) whose solution a page holds without the question:
    `solution_alone`, `solution_edited` (one word edit in ten), `solution_written_out` (operators in
    words); hard negative `solution_other_numbers` (the same solution template with other values). Real
    items of the base sets not planted by any other kind: `long_prefix` (the first 13 words of an item of
    >= 19 words), and the hard negative `key_term_replaced` (a short item, <= SHORT_MAX_WORDS words, its
    key term replaced by a specialised one). Set `qa`: `common_answer_phrase`, a question whose answer is
    a common phrase (leak_plants.COMMON_ANSWERS), that phrase planted alone. No word problem here has the
    name and all the numbers of a text in `made` (the earlier groups' items and plants): its solution
    would be a real paraphrase of that item."""
    rng = random.Random(40_000 + seed)
    seen: set[str] = set()
    # the training text has too few documents for one plant each at 40 items a kind: this group's hosts
    # are drawn afresh (a host may also carry a plant of an earlier group, another item's)
    hosts_here: set[int] = set()

    def paste(plant: str) -> list[int]:
        pasted = lp.paste(plant, texts, False, rng, hosts_here)
        for h, new in pasted.items():
            texts[h] = new
        return sorted(pasted)

    for kind in ("solution_alone", "solution_edited", "solution_written_out", "solution_other_numbers"):
        for j in range(per_kind):
            t = j % len(lp.WORD_TEMPLATES)
            while True:
                values = lp.word_values(rng)
                question = lp.fill(lp.WORD_TEMPLATES[t], values)
                slots = lp.number_slots(lp.WORD_TEMPLATES[t])
                if question not in seen and not _shares_values(values, slots, made):
                    break
            seen.add(question)
            solution = lp.word_solution(t, values)
            page = lp.page_solution(solution)
            if kind == "solution_edited":
                page = lp.reword(page, rng)
            elif kind == "solution_written_out":
                page = lp.written_out(page)
            elif kind == "solution_other_numbers":
                while True:
                    other = {**lp.word_values(rng), "name": values["name"]}
                    other = lp.with_name(other, values["name"], "she" if values["sub"] == "she" else "he")
                    if lp.word_solution(t, other) != solution:
                        break
                page = lp.page_solution(lp.word_solution(t, other))
            hosts = paste(page)
            item = _Item(f"{kind}-{j}", question)
            row = {"id": item.id, "question": question, "answer": solution}
            record(kind, SOLUTION_SET, item, question, [] if kind in NEGATIVE else hosts, row)
    long = [p for p in free if len(p[1].text.split()) >= LONG_PREFIX_WORDS]
    for name, item in _deal(long, ("long_prefix",), per_kind, rng)["long_prefix"]:
        record("long_prefix", name, item, item.text, paste(lp.long_prefix(item.text)))
    taken = {id(it) for _, it in free if len(it.text.split()) >= LONG_PREFIX_WORDS}
    short = [
        p
        for p in free
        if len(p[1].text.split()) <= SHORT_MAX_WORDS
        and lp.key_term(p[1].text) is not None
        and id(p[1]) not in taken
    ]
    for name, item in _deal(short, ("key_term_replaced",), per_kind, rng)["key_term_replaced"]:
        paste(lp.key_term_replaced(item.text, rng))
        record("key_term_replaced", name, item, item.text, [])
    phrases = list(lp.COMMON_ANSWERS)
    rng.shuffle(phrases)
    for j in range(per_kind):
        phrase = phrases[j % len(phrases)]
        paste(phrase)
        item = _Item(
            f"common_answer_phrase-{j}",
            f"What does the author of passage {j + 1} conclude about its results?",
        )
        row = {"id": item.id, "question": item.text, "answer": phrase}
        record("common_answer_phrase", QA_SET, item, item.text, [], row)


def _shares_values(values: dict, slots: tuple[str, ...], texts: set[str]) -> bool:
    """Whether one of `texts` holds the name and every number (of the slots `slots`) of a word problem's
    `values`."""
    nums = [str(values[k]) for k in slots]
    for t in texts:
        if values["name"] in t:
            words = set(re.findall(r"\d+", t))
            if all(n in words for n in nums):
                return True
    return False


def scores(report: dict) -> dict[tuple[str, str], dict]:
    """{(eval, id): {score, flagged, n_documents}} of the items the report lists (others score 0); an
    entry without a score (a detector that reports none) scores 1 when flagged, else 0."""
    out: dict[tuple[str, str], dict] = {}
    for flagged, entries in ((True, report.get("contaminated", [])), (False, report.get("near_misses", []))):
        for e in entries:
            key = (e["eval"], str(e["id"]))
            s = float(e.get("score", 1.0 if flagged else 0.0))
            prev = out.setdefault(
                key, {"score": s, "flagged": flagged, "n_documents": e.get("n_documents"), "parts": None}
            )
            if prev["score"] < s:
                prev["score"] = s
            if flagged and not prev["flagged"]:
                prev.update(flagged=True, n_documents=e.get("n_documents"))
            if flagged and isinstance(e.get("parts"), list):
                prev["parts"] = sorted(set(prev["parts"] or []) | set(e["parts"]))
    return out


def paraphrase_keys(report: dict) -> set[tuple[str, str]]:
    """(eval, id) of the items the report lists as paraphrase candidates (none when it has no such list)."""
    return {(e["eval"], str(e["id"])) for e in report.get("paraphrase_candidates", [])}


def run(seed: int, per_kind: int = 40, work: str | Path | None = None) -> dict:
    """One seed: plant, audit, and score every item. Returns {records, threshold, rule, seconds,
    paraphrase_listed}; a record: {kind, eval, id, hosts, score, flagged, n_documents, parts, paraphrase}
    (`parts`: the report's parts of a flagged item, None when it gives none; `paraphrase`: listed among the
    report's paraphrase candidates)."""
    from olmax.assets import tokenizer_path
    from olmax.audit.leaks.run import LeakConfig, audit_leaks
    from olmax.data.stream import StreamSpec
    from olmax.data.tokenize import load_tokenizer

    t0 = time.perf_counter()
    tok = load_tokenizer(str(tokenizer_path("dolma2", quiet=True)))
    with contextlib.ExitStack() as stack:
        root = Path(work or stack.enter_context(tempfile.TemporaryDirectory(prefix="leak-cal-")))
        records, specs = build(seed, per_kind, root, tok)
        t1 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            report = audit_leaks(LeakConfig(StreamSpec(mix=str(root / "mix.txt")), evals=tuple(specs)))
    found = scores(report)
    candidates = paraphrase_keys(report)
    for r in records:
        key = (r["eval"], r["id"])
        f = found.get(key, {})
        r.update(
            score=f.get("score", 0.0),
            flagged=f.get("flagged", False),
            n_documents=f.get("n_documents"),
            parts=f.get("parts") if f.get("flagged") else None,
            paraphrase=key in candidates,
        )
    return {
        "records": records,
        "threshold": report.get("settings", {}).get("threshold"),
        "rule": report.get("rule", ""),
        "seconds": {"build": t1 - t0, "audit": time.perf_counter() - t1},
        "paraphrase_listed": "paraphrase_candidates" in report,
    }


# ------------------------------------------------------------------------------------------- summary
def _counts(records: list[dict], hit) -> tuple[dict[str, tuple[int, int]], float, float, float]:
    """Per kind (items, hits) under the decision `hit(record)`, min recall over positive kinds, overall
    recall and precision."""
    per = {k: (0, 0) for k in POSITIVE + NEGATIVE}
    for r in records:
        if r["kind"] not in per:  # the positive paraphrase kind: not a copy
            continue
        n, h = per[r["kind"]]
        per[r["kind"]] = (n + 1, h + bool(hit(r)))
    tp = sum(per[k][1] for k in POSITIVE)
    fp = sum(per[k][1] for k in NEGATIVE)
    recall = tp / max(1, sum(per[k][0] for k in POSITIVE))
    min_recall = min(per[k][1] / max(1, per[k][0]) for k in POSITIVE)
    return per, min_recall, recall, tp / (tp + fp) if tp + fp else 1.0


def summarize(records: list[dict]) -> dict:
    """The calibration's numbers: per kind {items, flagged, rate, positive (+ full_count for `_many`)},
    min recall over the positive kinds, overall recall and precision (the report's own flags), and the
    threshold sweep [(threshold, min recall per kind, recall, precision)] over the reported scores."""
    per, min_recall, recall, precision = _counts(records, lambda r: r["flagged"])
    kinds = {
        k: {"items": n, "flagged": h, "rate": h / max(1, n), "positive": k in POSITIVE}
        for k, (n, h) in per.items()
    }
    for k in MANY:
        kinds[k]["full_count"] = sum(r["kind"] == k and r["n_documents"] == len(r["hosts"]) for r in records)
    sweep = [(t, *_counts(records, lambda r, t=t: r["score"] >= t - 1e-9)[1:]) for t in SWEEP]
    return {
        "kinds": kinds,
        "min_recall": min_recall,
        "recall": recall,
        "precision": precision,
        "sweep": sweep,
        "parts": {k: _parts(records, k) for k in ANSWER_POSITIVE},
        "paraphrase": _paraphrase_summary(records),
    }


def _parts(records: list[dict], kind: str) -> dict:
    """{flagged, parts}: how many items of `kind` are flagged and, per part the report names ("answer",
    "context+answer", "context", ...; "(none)" for a flagged item without one), how many flagged items it
    names; parts None when no flagged item has them (a detector that reports no parts)."""
    flagged = [r for r in records if r["kind"] == kind and r["flagged"]]
    if not any(r.get("parts") is not None for r in flagged):
        return {"flagged": len(flagged), "parts": None}
    counts: dict[str, int] = {}
    for r in flagged:
        for part in r.get("parts") or ["(none)"]:
            counts[part] = counts.get(part, 0) + 1
    return {"flagged": len(flagged), "parts": counts}


def _paraphrase_summary(records: list[dict]) -> dict:
    """The paraphrase candidates' numbers: per paraphrase kind {items, candidates, rate, copy_flagged,
    positive}; recall (candidates among the `paraphrase` items), precision (reported items of a positive
    kind, copy or paraphrase, over all reported items; None when nothing is reported), the counts, and
    the reported items of the kinds outside the paraphrase ones ({kind: count})."""
    kinds = {}
    for k in PARAPHRASE_KINDS:
        rs = [r for r in records if r["kind"] == k]
        hits = sum(r["paraphrase"] for r in rs)
        kinds[k] = {
            "items": len(rs),
            "candidates": hits,
            "rate": hits / max(1, len(rs)),
            "copy_flagged": sum(r["flagged"] for r in rs),
            "positive": k in PARAPHRASE_POSITIVE,
        }
    tp = sum(r["paraphrase"] for r in records if r["kind"] in POSITIVE + PARAPHRASE_POSITIVE)
    fp = sum(r["paraphrase"] for r in records if r["kind"] in NEGATIVE)
    others: dict[str, int] = {}
    for r in records:
        if r["paraphrase"] and r["kind"] not in PARAPHRASE_KINDS:
            others[r["kind"]] = others.get(r["kind"], 0) + 1
    return {
        "kinds": kinds,
        "recall": kinds["paraphrase"]["rate"],
        "precision": tp / (tp + fp) if tp + fp else None,
        "reported": tp + fp,
        "true_positives": tp,
        "false_positives": fp,
        "other_kinds": others,
    }


def pr_curve(records: list[dict], png: Path, marks: list[tuple[float, float, str]]) -> None:
    """The precision-recall curve over every distinct score as a threshold, written to `png` atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = []
    for t in sorted({r["score"] for r in records} | set(SWEEP) | {1.0}, reverse=True):
        if t <= 0:
            continue
        _, _, rec, prec = _counts(records, lambda r, t=t: r["score"] >= t - 1e-9)
        pts.append((rec, prec))
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label="threshold on score")
    for rec, prec, label in marks:
        ax.scatter([rec], [prec], color="C3", zorder=3)
        ax.annotate(label, (rec, prec), textcoords="offset points", xytext=(-110, -14), fontsize=8)
    ax.set_xlabel("recall (all positive kinds)")
    ax.set_ylabel("precision")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("olmax audit leaks: calibration")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    tmp = png.with_name(f".{png.name}.{os.getpid()}.tmp")
    try:
        fig.savefig(tmp, format="png", dpi=120)
        os.replace(tmp, png)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)


def print_summary(s: dict, threshold, rule: dict | str) -> None:
    if isinstance(rule, dict):  # the report's rule block: a line per step
        print("rule:")
        for name, line in rule.items():
            print(f"  {name}: {line}")
    else:
        print(f"rule: {rule}" if rule else "rule: (not reported)")
    print(f"{'kind':<26} {'items':>6} {'flagged':>8}  metric")
    for k, r in s["kinds"].items():
        metric = "recall" if r["positive"] else "false-positive rate"
        print(f"{k:<26} {r['items']:>6} {r['flagged']:>8}  {metric} {r['rate']:.3f}")
    print(
        f"overall recall {s['recall']:.3f}, precision {s['precision']:.3f}; flag threshold "
        f"{threshold if threshold is not None else 'n/a'}"
    )
    print(
        "planted document count reported (n_documents): "
        + ", ".join(f"{k} {s['kinds'][k]['full_count']}/{s['kinds'][k]['items']}" for k in MANY)
    )
    print("threshold sweep (flag when score >= t):")
    print(f"{'t':>6} {'min recall/kind':>16} {'recall':>8} {'precision':>10}")
    for t, mn, rec, prec in s["sweep"]:
        print(f"{t:>6.2f} {mn:>16.3f} {rec:>8.3f} {prec:>10.3f}")
    print("parts of the flagged answer-side items (report: contaminated[].parts):")
    for k, r in s["parts"].items():
        named = ", ".join(f"{p} {n}" for p, n in sorted(r["parts"].items())) if r["parts"] else "n/a"
        print(f"  {k:<20} flagged {r['flagged']:>4}: {named}")


def print_paraphrase(p: dict, listed: bool) -> None:
    """The paraphrase-candidate section: per paraphrase kind, items, candidates and copy flags; recall and
    precision of the candidates."""
    print(
        "paraphrase candidates (report: paraphrase_candidates"
        + ("" if listed else "; not in the report")
        + "; copy flags shown, not counted):"
    )
    print(f"{'kind':<26} {'items':>6} {'candidates':>11} {'copy flagged':>13}  metric")
    for k, r in p["kinds"].items():
        metric = "recall" if r["positive"] else "false-positive rate"
        print(
            f"{k:<26} {r['items']:>6} {r['candidates']:>11} {r['copy_flagged']:>13}  {metric} {r['rate']:.3f}"
        )
    precision = "n/a (none reported)" if p["precision"] is None else f"{p['precision']:.3f}"
    others = ", ".join(f"{k} {n}" for k, n in sorted(p["other_kinds"].items())) or "none"
    print(
        f"paraphrase recall {p['recall']:.3f}, precision {precision} ({p['true_positives']} true / "
        f"{p['reported']} reported); reported items of other kinds: {others}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-1", help="e.g. 0-3 or 1,5,7")
    ap.add_argument("--per-kind", type=int, default=40)
    ap.add_argument("--png", default=str(BENCH / "results" / "leak_calibration.png"))
    ap.add_argument("--work", help="keep each seed's training shards and eval files under WORK/seed-N")
    add_arguments(ap)
    smoke_png = str(BENCH / "out" / "leak_calibration-smoke.png")
    args = shrink(ap.parse_args(), seeds="0", per_kind=3, png=smoke_png)

    seeds = parse_seeds(args.seeds)
    records: list[dict] = []
    threshold, rule, listed = None, "", False
    for seed in seeds:
        res = run(seed, args.per_kind, Path(args.work) / f"seed-{seed}" if args.work else None)
        records += res["records"]
        threshold, rule = res["threshold"], res["rule"]
        listed = listed or res["paraphrase_listed"]
        s = summarize(res["records"])
        sec = res["seconds"]
        print(
            f"seed {seed}: min recall per kind {s['min_recall']:.3f}, recall {s['recall']:.3f}, precision "
            f"{s['precision']:.3f} (build {sec['build']:.1f}s, audit {sec['audit']:.1f}s)",
            file=sys.stderr,
            flush=True,
        )
    s = summarize(records)
    print_summary(s, threshold, rule)
    print_paraphrase(s["paraphrase"], listed)
    label = "detector's flags" + (f" (score >= {threshold})" if threshold is not None else "")
    pr_curve(records, Path(args.png), [(s["recall"], s["precision"], label)])
    print(f"precision-recall curve: {args.png}")
    print(
        f"leak calibration: min recall per kind {s['min_recall']:.3f}, precision {s['precision']:.3f} "
        f"over {len(seeds)} seeds"
    )


if __name__ == "__main__":
    main()

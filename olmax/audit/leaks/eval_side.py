"""The leak audit's eval side: every set's items as *units* of text to look for, and their exact index.

A unit is a text the training data may hold on its own. Every item gives its own text (the context
and question, olmax.evalsets.read.item_text: part "context"); an item of a completion task (HellaSwag,
PIQA, COPA, StoryCloze, ...: `EvalItem.answer`) also gives, with --answers,

- "answer": its gold continuation alone, when that has at least --answer-words words (shorter ones
  are not specific: "is shown.", "a spoon");
- "context+answer": the join, the context's last --join-words words (4) followed by the answer's first
  --answer-words words (whitespace words of the raw texts), so a document holding the context's end
  run into the gold answer is found whatever the answer's length. When the answer is long enough to be
  a unit, the join is no unit of its own (the answer finds every such document): it is read where the
  answer is found, and names the part `context+answer` when it is there too.

An item whose gold answer answers it rather than continuing it (`EvalItem.continues` False: a maths item's
worked solution, a QA answer, a multiple-choice item's gold choice; olmax.evalsets.read.item_gold) gives
"answer" alone, with the other choices as its rivals, when the answer has at least --answer-words words
and is evidence (`answer_is_evidence`: two specific words, so a common phrase or a bare number is not);
one of up to WINDOWED_WORDS words is also indexed by its short windows.

A completion task's own text (its context) shorter than --answer-words words is not looked for alone:
a PIQA goal such as "How to boil an egg." says nothing of a leak by itself; its join with the gold
answer does. Each unit beyond the context carries the same part of the item's wrong continuations (`rivals`): a
document whose text is as close to a wrong choice as to the gold one holds no answer leak (PIQA's two
solutions often differ in one word; a page listing every choice tells no answer).

Units 0 .. items - 1 are the items' own texts, in item order (so an item's index is its context unit's);
the answer-side units follow, each with its `owner` item. Items with the same words and the same answer
are indexed once and decided as their first copy (`rep_of`, reported as `eval_duplicates`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from olmax.audit.audit_config import LeakConfig
from olmax.audit.leaks.item_index import EvalIndex
from olmax.audit.leaks.normalize import WordTables, item_words, text_tokens
from olmax.audit.leaks.paraphrase import (
    MAX_WORDS,
    PAIR_WINDOW,
    ParaphraseIndex,
    Signature,
    names_of,
    signature,
)
from olmax.audit.leaks.weights import CHEAP_EDIT, MIN_SPECIFIC, specific_count
from olmax.cli_fields import named
from olmax.data.tokenize import load_tokenizer
from olmax.errors import OlmaxError
from olmax.evalsets.read import load_eval
from olmax.evalsets.spec import parse_eval_specs

PARTS = ("context", "answer", "context+answer")
CONTEXT, ANSWER, JOIN = range(3)
SHORT_WORDS_PER_EDIT = 7
MIN_CHEAP_WORDS = 5  # a short unit of this many words may carry one cheap edit
WINDOWED_WORDS = 60  # answers up to this long that continue nothing are also indexed by short windows
SIGN_CHARS = re.compile(r"[0-9+*/=<>^%\u2212\u00d7\u00f7-]")  # a digit or an operator of the text check


@dataclass
class EvalSide:
    """The eval items of every set, in one list, and their units (module docstring) with the index."""

    sets: list[tuple[str, list]]  # (set name, its items)
    set_of: np.ndarray  # int64 (items,): which set each item is from
    items: list  # EvalItem, all sets concatenated
    words: list[np.ndarray]  # per unit: its packed word values (units 0 .. items - 1: the items' texts)
    texts: list[str]  # per unit: its text, which the text check reads
    owner: np.ndarray  # int64 (units,): the item a unit belongs to
    part: np.ndarray  # int64 (units,): its part, an index into PARTS
    rivals: list[tuple[str, ...]]  # per unit: the same part of the item's wrong continuations
    joins: list[str]  # per unit: an answer unit's context -> answer join ("" for others)
    join_words: np.ndarray  # int64 (units,): that join's words
    rep_of: np.ndarray  # int64 (items,): the first item with the same words and answer (itself when unique)
    duplicates: list[dict]
    index: EvalIndex  # over the units
    short_bar: np.ndarray  # int64 (units,): what a short unit's hits must cover (EvalIndex.min_cover)
    signed: np.ndarray  # bool (units,): its text holds a digit or an operator
    signatures: dict  # item -> its paraphrase Signature (items looked for as paraphrases)


def short_allowed(k, cfg: LeakConfig):
    """The edit budget of a short unit of `k` words (an int, or an array of them), in text-check edits
    weighed by what they change (weights.edit_cost): one per SHORT_WORDS_PER_EDIT words, at most
    --short-edits; a unit of MIN_CHEAP_WORDS up to SHORT_WORDS_PER_EDIT words one cheap edit (a common
    word or punctuation), a shorter one none."""
    k = np.asarray(k)
    out = np.minimum(cfg.short_edits, k // SHORT_WORDS_PER_EDIT).astype(np.float64)
    out = np.where((out == 0) & (k >= MIN_CHEAP_WORDS), CHEAP_EDIT, out)
    return out if out.ndim else float(out)


def short_edit_count(k, cfg: LeakConfig):
    """How many edits a short unit's retrieval must survive (EvalIndex.min_cover): its budget, rounded up."""
    return np.ceil(short_allowed(k, cfg)).astype(np.int64)


def answer_units(
    text: str, answer: str, rivals: tuple[str, ...], join_words: int, answer_words: int
) -> list[tuple[int, str, tuple]]:
    """(part, text, rivals) of an item's answer-side units before the answer's own length is known: the
    answer alone and the context -> answer join (module docstring)."""
    tail = " ".join(text.split()[-join_words:]) if join_words > 0 else ""

    def join(a: str) -> str:
        return f"{tail} {' '.join(a.split()[:answer_words])}".strip()

    return [(ANSWER, answer, rivals), (JOIN, join(answer), tuple(join(r) for r in rivals))]


def answer_is_evidence(answer: str, ranks: dict[str, int]) -> bool:
    """Whether a gold answer that does not continue its item (a worked solution, a QA answer, a gold
    choice) says enough to be looked for alone: weights.MIN_SPECIFIC specific words (numbers of two or
    more digits, rare words) among its text tokens. A common phrase ("none of the above is true in
    this case") or a bare number is no evidence of a leak by itself; its length (--answer-words) is
    checked on its words."""
    return specific_count(text_tokens(answer)[0], ranks) >= MIN_SPECIFIC


def index_evals(cfg: LeakConfig, tok_path: str, tables: WordTables) -> EvalSide:
    """Load every --eval set, tokenize its units with the mix's tokenizer, deduplicate, index."""
    sets = [load_eval(spec) for spec in parse_eval_specs(cfg.evals)]
    if not sets:
        raise OlmaxError(
            f"no eval set given; pass {named(LeakConfig, 'evals')} NAME=PATH (or a bundled NAME) at least once"
        )
    tok = load_tokenizer(tok_path)
    threads = max(1, cfg.threads)
    items = [it for _, its in sets for it in its]
    set_of = np.repeat(np.arange(len(sets)), [len(its) for _, its in sets]).astype(np.int64)
    words = item_words(tok.encode_batch([it.text for it in items], num_threads=threads), tables)
    texts = [it.text for it in items]
    owner, part, rivals = list(range(len(items))), [CONTEXT] * len(items), [()] * len(items)
    extra = []  # (owner, part, text, rivals)
    if cfg.answers:
        for i, it in enumerate(items):
            if it.answer and it.continues:
                units = answer_units(it.text, it.answer, it.rivals, cfg.join_words, cfg.answer_words)
                extra += [(i, *u) for u in units]
            elif it.answer and answer_is_evidence(it.answer, tables.ranks):
                extra.append((i, ANSWER, it.answer, it.rivals))
    extra_words = item_words(tok.encode_batch([u[2] for u in extra], num_threads=threads), tables)
    answer_of: dict[int, bytes] = {}  # an item's answer words: part of what makes two items the same
    joins = [""] * len(items)  # per unit: an answer unit's join text, read where the answer is found
    join_words = [0] * len(items)  # and the join's words
    long_answer: set[int] = set()
    for (i, p, text, riv), w in zip(extra, extra_words):
        if p == ANSWER:
            answer_of[i] = w.tobytes()
            if w.size < cfg.answer_words:
                continue
            long_answer.add(i)
        elif p == JOIN and i in long_answer:  # the answer alone finds it: the join only names the part
            joins[-1], join_words[-1] = text, int(w.size)
            continue
        words.append(w)
        texts.append(text)
        owner.append(i)
        part.append(p)
        rivals.append(riv)
        joins.append("")
        join_words.append(0)
    owner_arr = np.asarray(owner, dtype=np.int64)
    # duplicates: the same words and the same answer as an earlier item; none of their units is indexed
    first: dict[tuple[bytes, bytes], int] = {}
    rep_of, dups = np.arange(len(items), dtype=np.int64), []
    for i, it in enumerate(items):
        if not words[i].size:
            continue
        r = first.setdefault((words[i].tobytes(), answer_of.get(i, b"")), i)
        if r != i:
            rep_of[i] = r
            dups.append(
                {
                    "eval": sets[set_of[i]][0],
                    "id": it.report_id,
                    "same_as": {"eval": sets[set_of[r]][0], "id": items[r].report_id},
                }
            )
    # a completion task's context shorter than --answer-words is not looked for alone ("How to boil an
    # egg." is no evidence of a leak); its join with the answer is
    generic = [
        p == CONTEXT
        and cfg.answers
        and bool(items[o].answer)
        and items[o].continues
        and w.size < cfg.answer_words
        for w, o, p in zip(words, owner, part)
    ]
    indexed = [w[:0] if rep_of[o] != o or g else w for w, o, g in zip(words, owner, generic)]
    # an answer that is no continuation (a worked solution) of up to WINDOWED_WORDS words is also indexed by
    # its short windows: two edits in 25 words may leave none of its n-word windows whole
    windowed = [
        p == ANSWER and not items[o].continues and w.size <= WINDOWED_WORDS
        for w, o, p in zip(words, owner, part)
    ]
    eidx = EvalIndex(
        indexed,
        cfg.ngram,
        cfg.min_item_words,
        max_items_per_key=cfg.template_items,
        short_words=np.where(windowed, WINDOWED_WORDS, cfg.short_words),
        short_ngram=cfg.short_ngram,
        groups=owner_arr,
    )
    sigs: dict[int, Signature] = {}
    if cfg.paraphrases:
        names = names_of(texts[: len(items)], tok)
        for i, it in enumerate(items):
            if rep_of[i] == i and cfg.min_item_words <= words[i].size <= MAX_WORDS:
                sig = signature(it.text, names)
                if sig.usable:
                    sigs[i] = sig
        eidx.paraphrase = ParaphraseIndex(list(sigs.items()), tok, tables, PAIR_WINDOW, cfg.template_items)
        sigs = {i: eidx.paraphrase.with_values(s) for i, s in sigs.items() if i in eidx.paraphrase.need}
    return EvalSide(
        sets,
        set_of,
        items,
        words,
        texts,
        owner_arr,
        np.asarray(part, dtype=np.int64),
        rivals,
        joins,
        np.asarray(join_words, dtype=np.int64),
        rep_of,
        dups,
        eidx,
        eidx.min_cover(
            np.where(eidx.lengths_of <= cfg.short_words, short_edit_count(eidx.lengths_of, cfg), 0)
        ),
        np.asarray([SIGN_CHARS.search(t) is not None for t in texts], dtype=bool),
        sigs,
    )

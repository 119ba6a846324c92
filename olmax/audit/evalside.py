"""The leak audit's eval side: every item of every set as the *units* matched in training text, their
words in both readings, and the index over them.

Units. An item's context (its audit text, olmax.data.evalsets.item_text) is one unit. A completion
task's item (HellaSwag, PIQA, COPA, story cloze: one with a gold continuation) has two more: `answer`,
the gold continuation alone when it has at least --min-answer-words words (long enough to be
specific), and `join`, the last JOIN_CONTEXT_WORDS words of the context followed by the first
JOIN_ANSWER_WORDS of the continuation (the context-end -> answer boundary a training document that
holds the completed item has). A unit is matched on its own; the report says which units of an item
leaked.

Readings (normalize.py). A unit's words in the retrieval's reading (no operators) are what is indexed
and probed; its words in the verification's reading (operators as words, numbers and operators
flagged) are what a candidate is aligned against; `qmap` takes a retrieval word position to the
verification's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from olmax.audit.evalindex import EvalIndex
from olmax.audit.normalize import WordTables
from olmax.errors import OlmaxError

PARTS = ("context", "answer", "join")
JOIN_CONTEXT_WORDS = 8
JOIN_ANSWER_WORDS = 12


@dataclass
class EvalSide:
    """The eval items of every set, in one list: their set, their words, duplicates, their units and the
    index over the units."""

    sets: list[tuple[str, list]]  # (set name, its items)
    set_of: np.ndarray  # int64 (items,): which set each item is from
    items: list  # EvalItem, all sets concatenated
    words: list[np.ndarray]  # packed word values of each item's context (retrieval reading)
    rep_of: np.ndarray  # int64 (items,): the first item with the same words (itself when unique)
    duplicates: list[dict]
    unit_item: np.ndarray  # int64 (units,): the item each unit is of
    unit_part: list[str]  # PARTS, per unit
    unit_words: list[np.ndarray]  # retrieval reading, per unit (empty for a duplicate item's units)
    unit_vwords: list[np.ndarray]  # verification reading, per unit
    unit_qmap: list[np.ndarray]  # int64 per unit: retrieval word position -> verification position
    index: EvalIndex


def item_units(text: str, continuation: str, min_answer_words: int) -> list[tuple[str, str]]:
    """(part, text) of one item's units (module docstring); words here are whitespace runs."""
    units = [("context", text)]
    cont = continuation.split()
    if cont:
        if len(cont) >= min_answer_words:
            units.append(("answer", continuation))
        tail = text.split()[-JOIN_CONTEXT_WORDS:]
        units.append(("join", " ".join(tail + cont[:JOIN_ANSWER_WORDS])))
    return units


def index_evals(cfg, tok_path: str, tables: WordTables) -> EvalSide:
    """The eval side of a LeakConfig `cfg`: its sets read, every item's units tokenized and read both
    ways, items with the same words (and continuation) deduplicated (reported), the index built."""
    from olmax.audit.evalsets import load_eval
    from olmax.data.evalspec import parse_eval_specs
    from olmax.data.tokenize import load_tokenizer

    sets = [load_eval(spec) for spec in parse_eval_specs(cfg.evals)]
    if not sets:
        raise OlmaxError("no eval set given; pass --eval NAME=PATH (or a bundled NAME) at least once")
    tok = load_tokenizer(tok_path)
    vtables = tables.verification or tables
    set_of, words, all_items, rep_of, dups = [], [], [], [], []
    unit_item, unit_part, unit_words, unit_vwords, unit_qmap = [], [], [], [], []
    first: dict[tuple[bytes, str], int] = {}
    for s, (name, items) in enumerate(sets):
        units = [item_units(it.text, it.continuation, cfg.min_answer_words) for it in items]
        flat = [t for u in units for _, t in u]
        ids = tok.encode_batch(flat, num_threads=max(1, cfg.threads))
        (packed_all, first_all), (vpacked_all, vfirst_all) = (
            item_words(ids, tables, with_first=True),
            item_words(ids, vtables, with_first=True),
        )
        at = 0
        for it, u in zip(items, units):
            i = len(all_items)
            packed = packed_all[at]
            r = first.setdefault((packed.tobytes(), it.continuation), i) if packed.size else i
            if r != i:  # the same words as an earlier item: indexed once, decided as that one
                a = all_items[r]
                dups.append(
                    {
                        "eval": name,
                        "id": it.report_id,
                        "same_as": {"eval": sets[set_of[r]][0], "id": a.report_id},
                    }
                )
            for j, (part, _) in enumerate(u):
                unit_item.append(i)
                unit_part.append(part)
                w = packed_all[at + j]
                unit_words.append(w if r == i else w[:0])
                unit_vwords.append(vpacked_all[at + j])
                # a retrieval word's verification position: the first there starting at its token
                unit_qmap.append(np.searchsorted(vfirst_all[at + j], first_all[at + j]).astype(np.int64))
            words.append(packed)
            set_of.append(s)
            all_items.append(it)
            rep_of.append(r)
            at += len(u)
    return EvalSide(
        sets,
        np.asarray(set_of, dtype=np.int64),
        all_items,
        words,
        np.asarray(rep_of, np.int64),
        dups,
        np.asarray(unit_item, dtype=np.int64),
        unit_part,
        unit_words,
        unit_vwords,
        unit_qmap,
        EvalIndex(
            unit_words,
            cfg.ngram,
            cfg.min_item_words,
            max_items_per_key=cfg.template_items,
            edit_words=cfg.short_words,
        ),
    )


def item_words(ids: list[list[int]], tables: WordTables, with_first: bool = False):
    """Each item's packed words (`tables.packed_words` of its tokens), in one pass over all of them: the
    items joined with an id past the vocabulary between them (a boundary: no word joins across it, and
    its own boundary word starts at the separator, so it belongs to no item). With `with_first`, also
    each word's first token, counted from the item's start: (words, first tokens)."""
    lengths = np.asarray([len(t) for t in ids], dtype=np.int64)
    ends = np.cumsum(lengths + 1) - 1  # each item's separator
    stream = np.full(int(ends[-1]) + 1 if ids else 0, tables.size - 1, dtype=np.uint32)
    for t, e, k in zip(ids, ends.tolist(), lengths.tolist()):
        stream[e - k : e] = t
    packed, first_tok, _ = tables.packed_words(stream, final=True)
    cut = np.searchsorted(first_tok, ends - lengths)  # each item's first word
    last = np.searchsorted(first_tok, ends)  # its separator's word
    out = [packed[a:b] for a, b in zip(cut.tolist(), last.tolist())]
    if not with_first:
        return out
    starts = (ends - lengths).tolist()
    return out, [first_tok[a:b] - s for a, b, s in zip(cut.tolist(), last.tolist(), starts)]

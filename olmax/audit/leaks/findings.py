"""The leak audit's report: every verified candidate decided by the rule and gathered per item
(`assemble`), the rule a line per step (`rule_lines`), and each set's counts and gate (`per_set`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import numpy as np

from olmax.audit.audit_config import LeakConfig
from olmax.audit.checks import Check
from olmax.audit.leaks.eval_side import (
    MIN_CHEAP_WORDS,
    PARTS,
    SHORT_WORDS_PER_EDIT,
    EvalSide,
    short_allowed,
)
from olmax.audit.leaks.paraphrase import MAX_WORDS, MIN_STEMS, NEAR, PAIR_WINDOW
from olmax.audit.leaks.verify import PARTIAL_MAX_DOCS, PARTIAL_WORDS, Candidate
from olmax.audit.leaks.weights import CHEAP_EDIT, COMMON_RANK, MIN_SPECIFIC, SPECIFIC_RANK
from olmax.jsonio import write_jsonl

MAX_NEAR_MISSES = 1000


def assemble(
    cands: list[Candidate],
    verified: Iterable[tuple],
    ev: EvalSide,
    paths: list[str],
    sources: list,
    cfg: LeakConfig,
) -> tuple[list[dict], list[dict], np.ndarray]:
    """(contaminated items, near misses, flagged mask over all items) from every candidate's verification
    (in any order): each item's documents in candidate order (its own text's first, then its answer
    side's; a document that passes for several parts listed once, with each part), the threshold
    applied, duplicates decided as their first copy."""
    eidx, n_items = ev.index, len(ev.items)
    result = {g: rest for g, *rest in verified}

    def document(g: int, passed: bool) -> dict:
        c = cands[g]
        score, t0, t1, doc_id, edits, conflict, joined = result[g]
        doc = {
            "source": sources[c.file],
            "file": paths[c.file],
            "doc": doc_id,
            "token_start": t0,
            "token_end": t1,
            "score": round(score, 4),
            "saturated_keys": c.saturated,
            "parts": [PARTS[int(ev.part[c.item])]],
        }
        if c.item >= n_items:  # an answer-side unit: its own length
            doc["part_words"] = int(eidx.lengths_of[c.item])
        if c.run:  # the longest run of the unit found contiguously, and the fraction of it that is
            doc["longest_run"] = c.run
            doc["coverage"] = round(c.run / int(eidx.lengths_of[c.item]), 4)
        if edits >= 0:  # weighed by what they change: a cheap one is half an edit
            doc["text_edits"] = int(edits) if float(edits).is_integer() else round(float(edits), 2)
        if conflict:  # another number or operator in the item's place, or a wrong answer: not a copy
            doc.update(score=0.0, aligned_score=round(score, 4), not_a_copy=conflict)
        if passed and 0 <= joined <= short_allowed(int(ev.join_words[c.item]), cfg):
            doc["parts"].append("context+answer")  # the context's end is there too
        return doc

    # first the decisions alone, as arrays (most candidates are neither passed nor an item's best); then
    # the report's documents for what is shown: each item's passed documents, else its best
    m = len(cands)
    unit = np.asarray([c.item for c in cands], dtype=np.int64)
    score = np.asarray([result[g][0] for g in range(m)], dtype=np.float64)
    edits = np.asarray([result[g][4] for g in range(m)], dtype=np.float64)
    conflict = np.asarray([bool(result[g][5]) for g in range(m)], dtype=bool)
    k = eidx.lengths_of[unit] if m else np.zeros(0, np.int64)
    short = (edits >= 0) & (edits <= short_allowed(k, cfg))
    run = np.asarray([c.run for c in cands], dtype=np.int64)
    # a long run of the unit, whatever follows it; a short unit with numbers or operators (a maths
    # question) is the text check's to decide: a run that leaves out a changed number is another problem
    signed_short = ev.signed[unit] & (k <= cfg.short_words) if m else np.zeros(0, bool)
    partial = (run >= np.minimum(k, PARTIAL_WORDS)) & ~signed_short
    ok = ~conflict & (partial | np.where(k <= cfg.short_words, short, score >= cfg.threshold))
    owner = ev.owner[unit] if m else np.zeros(0, np.int64)
    shown = np.where(conflict, 0.0, np.round(score, 4))
    order = np.lexsort((np.arange(m), -shown, owner))  # per item: best score first, then candidate order
    first = np.ones(m, dtype=bool)
    first[1:] = owner[order][1:] != owner[order][:-1]
    best = dict(zip(owner[order][first].tolist(), order[first].tolist()))  # item -> its best candidate
    passes: dict[int, list[int]] = {}  # item -> its passing candidates, in candidate order
    for g in np.flatnonzero(ok).tolist():
        passes.setdefault(int(owner[g]), []).append(g)
    contaminated, near, flagged = [], [], np.zeros(n_items, dtype=bool)
    entry_of: dict[int, dict] = {}
    for item, g_best in best.items():
        k = int(ev.words[item].size)
        passed: dict[tuple, dict] = {}  # (file, document) -> its entry, parts merged
        for x in (document(g, True) for g in passes.get(item, [])):
            prev = passed.setdefault((x["file"], x["doc"]), x)
            if prev is not x:
                prev["parts"] += [p for p in x["parts"] if p not in prev["parts"]]
        parts = {p for x in passed.values() for p in x["parts"]}
        entry = {
            "eval": ev.sets[int(ev.set_of[item])][0],
            "id": ev.items[item].report_id,
            "kind": "short" if k <= cfg.short_words else "aligned",
            "item_words": k,
            "opening": ev.items[item].opening,
            "parts": [p for p in PARTS if p in parts],
            "score": 0.0 if conflict[g_best] else round(float(score[g_best]), 4),
            "n_documents": len(passed),
            "documents": list(passed.values()) or [document(g_best, False)],
        }
        if passed:
            flagged[item] = True
            contaminated.append(entry)
            entry_of[item] = entry
        else:
            near.append(entry)
    # duplicates are decided as their first copy
    for i in np.flatnonzero(ev.rep_of != np.arange(n_items)).tolist():
        r = int(ev.rep_of[i])
        if flagged[r]:
            flagged[i] = True
            src = entry_of[r]
            contaminated.append(
                {
                    **src,
                    "eval": ev.sets[int(ev.set_of[i])][0],
                    "id": ev.items[i].report_id,
                    "opening": ev.items[i].opening,
                    "same_as": {"eval": src["eval"], "id": src["id"]},
                }
            )
    near.sort(key=lambda e: -e["score"])
    return contaminated, near[:MAX_NEAR_MISSES], flagged


def rule_lines(cfg: LeakConfig) -> dict[str, str]:
    """The detection rule as the report states it, a line per step: why an item was or was not reported."""
    n, s = cfg.ngram, cfg.short_ngram
    lines = {
        "retrieve": (
            f"exact {n}-word windows of each unit (an item's text, and its answer side); windows shared "
            f"by >= {cfg.template_items} items are templates, not used"
        ),
        "candidate": (
            f"a (unit, document) pair whose matched windows cover >= max({n}, {cfg.min_cover} x unit "
            f"words); a unit shorter than {n} words: the whole unit"
        ),
        "verify": (
            "longest common subsequence of the unit's words and the document's words around the matches "
            "(inserted, dropped and substituted words tolerated), score = aligned words / unit words; "
            f"contaminated when a document scores >= {cfg.threshold}"
        ),
        "short units": (
            f"units of <= {cfg.short_words} words are also found through their own {s}-word windows "
            f"(a candidate when the windows cover what its allowed edits leave of them wherever the edits "
            f"fall) and are contaminated when their text tokens (normalization.text_check) differ from a "
            f"run of the document's by at most min({cfg.short_edits}, words // {SHORT_WORDS_PER_EDIT}) "
            f"edits ({CHEAP_EDIT} for {MIN_CHEAP_WORDS} or more words under {SHORT_WORDS_PER_EDIT}), each "
            f"edit weighed by the words it touches: {CHEAP_EDIT} when all are common (ids under "
            f"{COMMON_RANK:,} in the tokenizer's vocabulary, negations aside), else 1; a word of the unit "
            "replaced by a specific one inside it is a key term replaced, not a copy"
        ),
        "templated short units": (
            f"a short unit whose {s}-word windows are mostly templates (one template, other numbers) is also "
            f"indexed by each run of {s - 1} words no template window covers (its numbers, its "
            "names), so an edit inside the template still leaves a window to find it by"
        ),
        "text check": (
            "a unit holding a number or an operator, every short unit and every answer-side unit is read "
            "once more as text; a number or operator of the unit standing where the document has another "
            "one (a sign flip, another number) makes the document not a copy (score 0, `not_a_copy` says "
            "which), one only missing or replaced by a word is an edit; a single-letter variable renamed "
            "the same way everywhere is one edit"
        ),
        "partial": (
            f"a run of >= {PARTIAL_WORDS} consecutive words of a unit (all of a shorter one) found in a "
            f"document is a copy whatever follows it (the n-gram tools' rule), unless its {n}-word windows "
            f"are in >= {PARTIAL_MAX_DOCS} documents (common text); reported with `longest_run` and "
            "`coverage`; its numbers and operators must match as above, and a short unit holding any "
            "(a maths question) is decided by the text check alone"
        ),
        "too short": f"items under {cfg.min_item_words} words are not decided",
    }
    if cfg.paraphrases:
        lines["paraphrase candidates"] = (
            f"items of {cfg.min_item_words} to {MAX_WORDS} words with a number, two numbers of two or "
            "more digits or names, and a name, an operator or a rare word are also looked for as "
            f"paraphrases: pairs of their long numbers and names within {PAIR_WINDOW} words retrieve; a "
            "document window of at most 1.5 x the item's text tokens holding every number (59x apart "
            f"from 59) and name of the item, no other number (0 and 1 aside) in or within {NEAR} tokens "
            "of it, no operator it lacks (nor more of one) and one of its own if it has any, and one of "
            f"its rare words nearby (items of >= {MIN_STEMS}, or with no name and no operator) is a "
            "paraphrase candidate; reported "
            "apart (`paraphrase_candidates`), never counted as contaminated, not for an item reported "
            "as a copy"
        )
    if cfg.answers:
        lines["answer side"] = (
            "a completion task's item (HellaSwag, SWAG, PIQA, COPA, StoryCloze, a `continuation` or "
            f"`completion` field) is also looked for as its gold continuation alone (>= {cfg.answer_words} "
            f"words; part `answer`) and as its context's last {cfg.join_words} words joined to the "
            f"answer's first {cfg.answer_words} (part `context+answer`), each decided as a unit of its "
            "length; a document as close (text edits) to a wrong continuation of the same item as to the "
            "gold one is not an answer leak (`not_a_copy`; a tie is the gold's when the wrong one is a "
            "run of it); a completion "
            f"task's context of under {cfg.answer_words} words is not looked for alone; any other task's "
            f"gold answer that is text (a worked solution, a QA answer, a gold choice) is looked for alone "
            f"(part `answer`, the other choices its rivals) when it has >= {cfg.answer_words} words and "
            f"{MIN_SPECIFIC} specific words (numbers of two or more digits, words the tokenizer's "
            f"vocabulary ranks past {SPECIFIC_RANK:,} or does not hold as one token)"
        )
    return lines


def per_set(
    ev: EvalSide, flagged: np.ndarray, cfg: LeakConfig, contaminated: list[dict], paraphrases: list[dict]
) -> tuple[dict, list[Check]]:
    """Each set's counts (and clean subset, with `clean_dir`) and its gate check; `contaminated` and
    `paraphrases` (the report's entries) give the counts per part and of paraphrase candidates."""
    eidx, n_items = ev.index, len(ev.items)
    ngrams_of = np.bincount(ev.owner[eidx.rec_item], minlength=n_items)
    n_words = np.asarray([w.size for w in ev.words[:n_items]], dtype=np.int64)
    too_short = n_words < cfg.min_item_words
    gate = set(cfg.gate) if cfg.gate is not None else {name for name, _ in ev.sets}
    counts, checks = {}, []
    for s, (name, _items) in enumerate(ev.sets):
        sel = ev.set_of == s
        n_bad = int(flagged[sel].sum())
        counts[name] = {
            "items": int(sel.sum()),
            "contaminated": n_bad,
            "percent_contaminated": round(100.0 * n_bad / max(1, int(sel.sum())), 3),
            "too_short_to_decide": int(too_short[sel].sum()),
            "duplicates": int((sel & (ev.rep_of != np.arange(len(ev.items)))).sum()),
            "ngrams": int(ngrams_of[sel].sum()),
            "gated": name in gate,
            "by_part": {p: sum(p in e["parts"] for e in contaminated if e["eval"] == name) for p in PARTS},
            # reported apart, not in `contaminated`
            "paraphrase_candidates": sum(e["eval"] == name for e in paraphrases),
        }
        if cfg.clean_dir:
            clean = [ev.items[i] for i in np.flatnonzero(sel & ~flagged).tolist()]
            out = os.path.join(cfg.clean_dir, f"{name}.jsonl")
            write_jsonl(out, ({"id": it.report_id, "text": it.text} for it in clean))
            counts[name]["clean_subset"] = out
        checks.append(
            Check(
                f"contaminated:{name}",
                n_bad == 0,
                n_bad,
                0,
                gated=name in gate,
                detail=f"{counts[name]['percent_contaminated']}% of {counts[name]['items']} items",
                # no item the rule can decide: clean would be a guess
                needs=""
                if counts[name]["items"] > counts[name]["too_short_to_decide"]
                else f"items of at least {cfg.min_item_words} words: {name} has "
                f"{counts[name]['items']} item(s), none that long (--min-item-words)",
            )
        )
    return counts, checks

"""The leak audit's verification of one training file's candidates (run.py builds them): each copy
candidate aligned (align.verify_candidates) and, from its floor up, read again as text (`text_edits`:
numbers and operators, wrong choices of a completion task, an answer's join); the paraphrase candidates
screened and checked (paraphrase.verify_paraphrases). `verify_file` is what both runners map over files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from olmax.audit.audit_config import LeakConfig
from olmax.audit.leaks.align import CandidateArrays, text_check, verify_candidates
from olmax.audit.leaks.eval_side import SIGN_CHARS, EvalSide, short_allowed
from olmax.audit.leaks.normalize import WORD, WordTables, text_tokens
from olmax.audit.leaks.paraphrase import ParaCandidate, verify_paraphrases
from olmax.audit.spans import documents
from olmax.data.token_reads import TokenFile

TEXT_CHECK_FLOOR = 0.5  # candidates scoring below this are not read as text (no threshold goes lower)
# A contiguous run of this many words of a unit (or all of a shorter one) in a document is a leak, as
# the n-gram tools define one (13-grams: the lm-eval decontamination janitor, NeMo-Curator), unless its
# windows are common in the training text: found in PARTIAL_MAX_DOCS documents or more (NeMo-Curator's
# max_matches).
PARTIAL_WORDS = 13
PARTIAL_MAX_DOCS = 10


@lru_cache(maxsize=1 << 14)
def cached_text_tokens(text: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """normalize.text_tokens of `text`, as tuples, remembered: units, wrong choices and joins recur in
    every file, and so does a region of text copied into many documents (boilerplate, duplicates)."""
    toks, cls = text_tokens(text)
    return tuple(toks), tuple(cls)


@lru_cache(maxsize=1 << 14)
def cached_region_tokens(text: str) -> tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...]]:
    """normalize.text_tokens of a document's region with its tokens' lines, as tuples, remembered."""
    toks, cls, line = text_tokens(text, lines=True)
    return tuple(toks), tuple(cls), tuple(line)


@dataclass(frozen=True)
class Candidate:
    """An (item, document) pair to verify: the item's position `q` and the token offset `pos` of each
    hit, the alignment window `n` (min(ngram, item words)), `short` (an exact whole-item match needed)
    and whether one of its keys reached --max-docs-per-key (`saturated`)."""

    item: int
    file: int
    doc: int
    q: np.ndarray
    pos: np.ndarray
    n: int
    short: bool
    saturated: bool
    floor: float = TEXT_CHECK_FLOOR  # the alignment score from which the text check reads it
    run: int = 0  # words of the longest run of the unit found contiguously there (run.longest_runs)


@dataclass(frozen=True)
class FileCandidates:
    """One training file's candidates (`ids`: their indices in the list `candidates` returned) and the
    words of their items: what `verify_file` needs, on any machine."""

    file: int
    path: str
    ids: tuple[int, ...]
    candidates: tuple[Candidate, ...]
    words: dict  # unit -> its packed word values
    texts: dict  # unit -> its text, which the text check reads (short units, and those with signs)
    rivals: dict  # unit -> the same part of its item's wrong continuations (answer-side units)
    joins: dict = field(default_factory=dict)  # answer unit -> its join's text (EvalSide.joins)
    paraphrase_ids: tuple[int, ...] = ()  # indices in the list `pair_candidates` returned
    paraphrases: tuple[ParaCandidate, ...] = ()
    signatures: dict = field(default_factory=dict)  # item -> its paraphrase Signature
    number_words: np.ndarray | None = None  # ParaphraseIndex.number_values


@dataclass(frozen=True)
class FileVerdicts:
    """What `verify_file` found in one training file."""

    copies: list  # (candidate id, score, token start, token end, document id, text edits, conflict)
    paraphrases: list  # (paraphrase candidate id, score, token start, token end, document id)


def file_tasks(
    cands: list[Candidate], paths: list[str], ev: EvalSide, para: list[ParaCandidate] = ()
) -> list[FileCandidates]:
    """The candidates (and paraphrase candidates) grouped by training file, in file order, with their
    units' words and texts (read by the text check on the worker, only for the candidates that reach
    it) and their items' signatures."""
    by_file: dict[int, list[int]] = {}
    for g, c in enumerate(cands):
        by_file.setdefault(c.file, []).append(g)
    para_of: dict[int, list[int]] = {}
    for g, c in enumerate(para):
        para_of.setdefault(c.file, []).append(g)
        by_file.setdefault(c.file, [])
    tasks = []
    for f, ids in sorted(by_file.items()):
        pids = para_of.get(f, [])
        units = list(dict.fromkeys(cands[g].item for g in ids))
        tasks.append(
            FileCandidates(
                f,
                paths[f],
                tuple(ids),
                tuple(cands[g] for g in ids),
                {u: ev.words[u] for u in units},
                {u: ev.texts[u] for u in units},
                {u: ev.rivals[u] for u in units if ev.rivals[u]},
                {u: ev.joins[u] for u in units if ev.joins[u]},
                tuple(pids),
                tuple(para[g] for g in pids),
                {para[g].item: ev.signatures[para[g].item] for g in pids},
                ev.index.paraphrase.number_values if pids else None,
            )
        )
    return tasks


def verify_file(task: FileCandidates, tables: WordTables) -> FileVerdicts:
    """Map over files: the verdicts of one training file's candidates (the file opened once): copies
    (`verify_copies`) and paraphrase candidates (paraphrase.verify_paraphrases)."""
    if not task.candidates and not task.paraphrases:
        return FileVerdicts([], [])
    file = TokenFile(task.path)
    docs = documents(task.path, None if file.remote else file.forward())
    # a URL's candidate documents only, at their offsets (the checks read nothing outside them)
    held = sorted({c.doc for c in task.candidates} | {c.doc for c in task.paraphrases})
    tokens = file.sparse([(int(docs.starts[d]), int(docs.ends[d])) for d in held])
    copies = verify_copies(task, tokens, docs, tables) if task.candidates else []
    paras = verify_paraphrases(
        tokens, docs, tables, task.paraphrases, task.paraphrase_ids, task.signatures, task.number_words
    )
    return FileVerdicts(copies, paras)


def verify_copies(
    task: FileCandidates, tokens: np.ndarray, docs, tables: WordTables
) -> list[tuple[int, float, int, int, str, int, str]]:
    """(candidate id, score, token start, token end, document id, text edits, conflict) of each
    candidate of one training file, aligned as in the module docstring (align.verify_candidates); the
    text check (`text_edits`) of the candidates scoring at least their `floor`, when their unit is
    short, holds a number or an operator, or has rivals, gives the edits and the conflict (-1 and ''
    where it did not run)."""
    cands = task.candidates
    d = np.asarray([c.doc for c in cands], dtype=np.int64)
    items = list(dict.fromkeys(c.item for c in cands))
    slot = {it: i for i, it in enumerate(items)}
    words = [task.words[it] for it in items]
    flat = CandidateArrays(
        doc_start=docs.starts[d],
        doc_end=docs.ends[d],
        hit_ptr=np.concatenate([[0], np.cumsum([c.q.size for c in cands])]),
        q=np.concatenate([c.q for c in cands]),
        pos=np.concatenate([c.pos for c in cands]),
        items=np.concatenate(words),
        item_ptr=np.concatenate([[0], np.cumsum([w.size for w in words])]),
        item_of=np.asarray([slot[c.item] for c in cands]),
        n=np.asarray([c.n for c in cands]),
        short=np.asarray([c.short for c in cands]),
    )
    scores, t0, t1 = verify_candidates(tokens, tables.kernel_tables, flat)
    out = []
    unit_toks: dict[int, tuple | None] = {}  # the text check's tokens of a unit, None: not read
    rival_toks: dict[int, list[tuple]] = {}  # a unit's rivals' text tokens, read on first use
    for j, (g, s, a, b, doc) in enumerate(
        zip(task.ids, scores.tolist(), t0.tolist(), t1.tolist(), d.tolist())
    ):
        c = cands[j]
        edits, conflict, joined = -1, "", -1
        has_rivals = c.item in task.rivals
        if s == 1.0 and not has_rivals and not SIGN_CHARS.search(task.texts[c.item]):
            edits = 0  # an exact word match of an item with no digit or operator: nothing to check
        elif s >= c.floor:
            if c.item not in unit_toks:
                toks = cached_text_tokens(task.texts[c.item])
                read = c.short or has_rivals or any(k != WORD for k in toks[1])
                unit_toks[c.item] = toks if read else None
            if unit_toks[c.item] is not None:
                if has_rivals and c.item not in rival_toks:
                    rival_toks[c.item] = [cached_text_tokens(r) for r in task.rivals[c.item]]
                texts = UnitTexts(
                    unit_toks[c.item],
                    rival_toks.get(c.item, []),
                    cached_text_tokens(task.joins[c.item]) if c.item in task.joins else None,
                )
                edits, conflict, joined = text_edits(
                    tokens, tables, texts, (a, b, int(docs.starts[doc]), int(docs.ends[doc])), c.short
                )
        out.append((g, float(s), int(a), int(b), docs.id_of(int(doc)), edits, conflict, joined))
    return out


class UnitTexts(NamedTuple):
    """What the text check places in a candidate's text, each as `cached_text_tokens` gives it (tokens,
    classes): the unit's own text, its rivals' (the same part of its item's wrong continuations; none
    for most units) and, for an answer unit, its join's (EvalSide.joins; None when it has none)."""

    unit: tuple
    rivals: list[tuple]
    join: tuple | None = None


def text_edits(
    tokens: np.ndarray,
    tables: WordTables,
    texts: UnitTexts,
    span: tuple[int, int, int, int],
    short: bool = False,
) -> tuple[float, str, float]:
    """The text check of one candidate: the unit's text tokens placed in the document's text around its
    span [t0, t1) (`span`: t0, t1, ds, de; as many tokens as the unit, or its longest rival, has text
    tokens, plus 8, on each side, within the document [ds, de)); (edits, conflict, join edits): edits
    (weighed by what they change) and conflict of align.text_check (a key term replaced counts for a
    `short` unit); a rival (a wrong continuation of the same item) placed there with at most as many
    edits is a conflict (the text is no closer to the gold answer than to a wrong one); an answer unit's
    join tokens placed there give the join edits (-1: no join, or a conflict)."""
    unit_toks, rivals, join = texts
    t0, t1, ds, de = span
    room = max(len(t[0]) for t in [unit_toks, *rivals]) + 8
    region = cached_region_tokens(tables.text(tokens[max(ds, t0 - room) : min(de, t1 + room)]))
    edits, conflict = text_check(unit_toks, region, tables.ranks, key_terms=short)
    if not conflict:
        for r in rivals:
            other, _ = text_check(r, region, tables.ranks)
            # fewer edits wins; a tie is the gold's only when the wrong choice is a run of the gold one
            # (the text holds it inside the gold): else both are there (a page listing the choices)
            if other < edits or (other == edits and not _sub_run(r[0], unit_toks[0])):
                return (
                    edits,
                    f"as close to a wrong choice ({other} vs {edits} edits): {' '.join(r[0][:12])!r}",
                    -1,
                )
    joined = text_check(join, region, tables.ranks)[0] if join is not None and not conflict else -1
    return edits, conflict, joined


def _sub_run(small: list[str], big: list[str]) -> bool:
    """Whether `small` occurs in `big` as a run of consecutive tokens (and is shorter)."""
    k = len(small)
    return 0 < k < len(big) and any(big[i : i + k] == small for i in range(len(big) - k + 1))


def text_floors(k: np.ndarray, signed: np.ndarray, cfg: LeakConfig) -> np.ndarray:
    """The alignment score from which each candidate (its unit's words `k`) is read as text: for a unit
    of more than --short-words words the threshold (below it the unit is no copy whatever the text
    says), for a short unit that of its allowed edits, and for one holding a number or an operator
    (`signed`) two written-out numerals more (each a word changed); at least TEXT_CHECK_FLOOR."""
    short = (k - short_allowed(k, cfg) - np.where(signed, 2, 0)) / np.maximum(1, k) - 1e-9
    return np.maximum(TEXT_CHECK_FLOOR, np.where(k > cfg.short_words, cfg.threshold - 1e-9, short))

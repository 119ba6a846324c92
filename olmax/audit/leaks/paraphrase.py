"""Paraphrase candidates: an eval item's numbers, names and rare words together in a window of a document.

A paraphrase (the same problem, the same numbers and names, other words) shares no long word run with
its item, so the exact windows of the copy rule cannot see it. What it keeps is the item's *signature*
(`Signature`, read off the item's text with normalize.text_tokens, so written-out numerals count as
their digits):

- numbers: every number of the item, as often as it occurs; a number with a letter glued to it ("59x",
  a variable) is a number of its own (`glued_tokens`);
- names: capitalised words that the eval side writes in lower case less than a quarter as often, and
  capitalised inside a sentence at least a quarter of the time, or that are no common word ("Natalia",
  "Monday"; not "The" or "Find": `names_of`);
- operators: + - * / = < > ^ %, as often as each occurs;
- rare words: the item's other words of at least four letters outside a list of common English words,
  by their first five letters ("cookies" and "cookie" alike).

Retrieval (`ParaphraseIndex`). An item's retrieval words are its names and its numbers of two or more
digits (or with their variable); an item with two or more is indexed by every pair of them (one-digit
numbers are too common to retrieve by: they are checked, not probed). The training side marks each word
that is a retrieval word of some item and hashes every pair of marked words at most PAIR_WINDOW words
apart. A pair shared by --template-items items is a template and is not used, and so is a pair found in
PAIR_MAX_DOCS training documents (common in the training text: dates, code; only that many are kept).
A candidate is a run of an item's pair hits in one document that holds all its retrieval words. Items
of more than MAX_WORDS words are not looked for (their copies have long windows).

Decision (`check`). The document's text around the pair hits is read (text tokens, as the text check
does): a paraphrase candidate is a window of at most the item's text tokens and half again (8 at
least) that holds every number and every name of the item and no other number, inside it or within
NEAR tokens of it (0 and 1 aside: "one", "a"; a list, a table or code's numbers are not a problem's),
no operator the item lacks nor more of one than it holds (a sign flipped is another problem) and, for
an item with operators, one of them, and one of the item's rare words within half the item's length
around it when the item has four or more of them or has neither a name nor an operator. Items need a
number, two retrieval words, and a name, an operator or a rare word. The score is the fraction of the signature (numbers, names, rare words) found. Candidates are reported apart (`paraphrase_candidates`) with their own calibration, never
counted as copies, and not at all for an item already reported as a copy.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np
from numba import njit

from olmax.audit.leaks.item_index import SortedKeys, template_mask
from olmax.audit.leaks.normalize import (
    NUMBER,
    OPERATOR,
    WORD,
    WordTables,
    as_token_ids,
    item_words,
    text_tokens,
    words_of,
)
from olmax.audit.leaks.prefilter import WindowFilter
from olmax.hashing import pair_hash

MAX_WORDS = 60  # items up to this many words are looked for as paraphrases
PAIR_WINDOW = 64  # words between the two words of a pair, at most
MAX_SPECIFIC = 12  # retrieval words of an item, at most (its pairs: 66)
PAIR_MAX_DOCS = 64  # a pair in more documents than this is common (dates, code), not evidence
# a marked word pairs with at most this many marked words after it: in a paraphrase the item's own
# numbers and names come one after another (another number among them rules the window out), and pairs
# of neighbours already cover all of them
MAX_NEXT = 4
MIN_STEMS = 4  # items with this many rare words need one of them near the window
NEAR = 1  # tokens each side of a window where another number also rules it out (a list of numbers)
STEM = 5
# Common English words: never a rare word of an item (function words, question words, numerals'
# neighbours and the verbs every word problem has).
COMMON = frozenset(
    """
    about above after again against also although always among another answer anyone anything around
    because been before being below between both cannot could does doing done down during each either
    else enough even every find first from further have having here however into itself just least
    less many might more most much must need never next none only other others otherwise over same
    shall should since some still such take than that their them themselves then there these they this
    those though through together under until upon very want was well were what whatever when where
    whether which while whom whose will with within without would your yours value following true
    false total number numbers left right given correct statement question
    """.split()
)
_CAPITAL = re.compile(r"\b[A-Z][a-z]+(?:'s)?\b")
_LOWER = re.compile(r"\b[a-z]+\b")
SENTENCE_ENDS = ".!?:;"
_GLUED = re.compile(r"(?<![\w.])(\d+)[A-Za-z](?![A-Za-z])")  # 59x, 3n: a number and its variable
VARIABLE_MARK = "xvar"  # a letter run no text token reads otherwise after a number


def starts_sentence(text: str, at: int) -> bool:
    """Whether a word at `at` opens a sentence: at the text's start, after a line end (spaces between
    allowed), or after one of SENTENCE_ENDS and whitespace. Looks back over the whitespace run only."""
    i = at
    while i > 0 and text[i - 1].isspace():
        i -= 1
        if text[i] == "\n":
            return True
    return at == 0 or (0 < i < at and text[i - 1] in SENTENCE_ENDS)


@dataclass(frozen=True)
class Signature:
    """What a paraphrase of an item keeps (module docstring); multisets as sorted tuples."""

    numbers: tuple[str, ...]
    names: tuple[str, ...]
    operators: tuple[str, ...]
    stems: tuple[str, ...]
    tokens: int  # the item's text tokens: the window is 1.5 times this (at least 8 more)
    values: tuple[int, ...] = ()  # its numbers' and names' word values (ParaphraseIndex.with_values)

    @property
    def size(self) -> int:
        return len(self.numbers) + len(self.names)

    @property
    def usable(self) -> bool:
        """Enough to look for: a number, two retrieval words (`retrieval_words`), and more than numbers
        (a name, an operator or a rare word: "21, 22 or 23" alone is any list of numbers)."""
        more = bool(self.names or self.operators or self.stems)
        return bool(self.numbers) and len(retrieval_words(self)) >= 2 and more


def names_of(texts: list[str], tokenizer) -> set[str]:
    """The eval side's names (module docstring), lower-cased: capitalised words written in lower case
    less than a quarter as often, that are capitalised inside a sentence at least a quarter of the time
    or are no common word (their lower-case form after a space is not one token of the tokenizer's
    vocabulary: " natalia" is two, " solve" one)."""
    lower: Counter = Counter()
    capital: Counter = Counter()
    inside: Counter = Counter()
    for t in texts:
        lower.update(_LOWER.findall(t))
        for m in _CAPITAL.finditer(t):
            w = m.group().removesuffix("'s").lower()
            capital[w] += 1
            if not starts_sentence(t, m.start()):
                inside[w] += 1
    proper = {w for w, k in capital.items() if 4 * lower[w] < k}
    named = {w for w in proper if 4 * inside[w] >= capital[w]}
    maybe = sorted(proper - named)
    rare = {w for w, ids in zip(maybe, tokenizer.encode_batch([f" {w}" for w in maybe])) if len(ids) > 1}
    return named | rare


@lru_cache(maxsize=1 << 14)
def glued_tokens(text: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """normalize.text_tokens of `text`, a number with a letter glued to it ("59x") one NUMBER token
    ("59" + VARIABLE_MARK): 59x and 59 are other numbers of a problem, 59x and 59y the same. As tuples,
    remembered (a region of text copied into many documents is read once)."""
    toks, cls = text_tokens(_GLUED.sub(lambda m: f"{m.group(1)} {VARIABLE_MARK}", text))
    out_t, out_c = [], []
    for t, c in zip(toks, cls):
        if t == VARIABLE_MARK and out_c and out_c[-1] == NUMBER:
            out_t[-1] += VARIABLE_MARK
        else:
            out_t.append(t)
            out_c.append(c)
    return tuple(out_t), tuple(out_c)


def signature(text: str, names: set[str]) -> Signature:
    """The signature of one item's text, given the eval side's names."""
    toks, cls = glued_tokens(text)
    numbers = sorted(t for t, c in zip(toks, cls) if c == NUMBER)
    ops = sorted(t for t, c in zip(toks, cls) if c == OPERATOR)
    found = sorted({t for t, c in zip(toks, cls) if c == WORD and t in names})
    stems = sorted(
        {
            t[:STEM]
            for t, c in zip(toks, cls)
            if c == WORD and len(t) >= 4 and t not in COMMON and t not in names
        }
    )
    return Signature(tuple(numbers), tuple(found), tuple(ops), tuple(stems), len(toks))


def check(sig: Signature, region: tuple[list[str], list[int]]) -> tuple[float, int, int] | None:
    """(score, first token, end token) of the best window of a region's text tokens that is a paraphrase
    candidate of the item (module docstring), None when none is."""
    toks, cls = region
    need = Counter(sig.numbers) + Counter(sig.names)
    ops_ok, stems = Counter(sig.operators), set(sig.stems)
    width = sig.tokens + max(8, sig.tokens // 2)
    pad = sig.tokens // 2 + 4
    at = [i for i, (t, c) in enumerate(zip(toks, cls)) if c != OPERATOR and t in need]
    best = None
    have: Counter = Counter()
    lo = 0
    for hi in range(len(at)):  # the shortest windows over `at` that hold every number and name
        have[toks[at[hi]]] += 1
        while have[toks[at[lo]]] > need[toks[at[lo]]]:
            have[toks[at[lo]]] -= 1
            lo += 1
        if any(have[w] < k for w, k in need.items()):
            continue
        a, b = at[lo], at[hi] + 1
        if b - a > width:
            continue
        near = range(max(0, a - NEAR), min(len(toks), b + NEAR))
        numbers = Counter(toks[i] for i in near if cls[i] == NUMBER and toks[i] not in ("0", "1"))
        if any(k > need.get(n, 0) for n, k in numbers.items()):
            continue  # another number among or beside the item's (a list, a table, code; "one" aside)
        # the window's operators, and a sign just before it ("-5")
        ops = Counter(toks[i] for i in range(max(0, a - 1), b) if cls[i] == OPERATOR)
        if any(k > ops_ok.get(o, 0) for o, k in ops.items()) or (ops_ok and not ops):
            continue  # an operator the item lacks, or one more (another problem), or none of its own
        around = {toks[i][:STEM] for i in range(max(0, a - pad), min(len(toks), b + pad)) if cls[i] == WORD}
        found = len(stems & around)
        if found == 0 and (len(stems) >= MIN_STEMS or not (sig.names or sig.operators)):
            continue  # nothing of what the item is about
        score = (sig.size + found) / (sig.size + len(stems))
        if best is None or score > best[0]:
            best = (round(score, 4), a, b)
    return best


def retrieval_words(sig: Signature) -> list[str]:
    """The words an item's pairs are made of: its names and its numbers of two or more digits (or with
    their variable); one-digit numbers are too common to retrieve by (they are checked, not probed)."""
    return [*sig.names, *(n for n in sig.numbers if len(n) >= 2)]


class ParaphraseIndex:
    """The pair keys of the items' long numbers and names (module docstring), and the probe of a word
    stream for them. `items`: (item index, Signature) of the items looked for."""

    def __init__(
        self,
        items: list[tuple[int, Signature]],
        tokenizer,
        tables: WordTables,
        window: int,
        max_items_per_key: int,
    ):
        self.window = window
        words = sorted({w for _, s in items for w in (*s.numbers, *s.names)})
        self.value = value = dict(zip(words, _word_values(words, tokenizer, tables)))
        keys, owners, ends = [], [], []
        self.need = {}  # item -> the bit mask of all its retrieval words (its pairs' ends together)
        for item, s in items:
            spec = sorted({value[w] for w in retrieval_words(s) if value[w]})[:MAX_SPECIFIC]
            if len(spec) < 2:
                continue
            self.need[item] = (1 << len(spec)) - 1
            for i, x in enumerate(spec):
                for j in range(i + 1, len(spec)):
                    keys.append(pair_hash(np.uint64(x), np.uint64(spec[j])))
                    owners.append(item)
                    ends.append((1 << i) | (1 << j))
        key = np.asarray(keys, dtype=np.uint64)
        owner = np.asarray(owners, dtype=np.int64)
        end = np.asarray(ends, dtype=np.int64)
        keep, self.template_keys = template_mask(key, owner, max_items_per_key)
        key, owner, end = key[keep], owner[keep], end[keep]
        order = np.argsort(key, kind="stable")
        key, self.rec_item, self.rec_ends = key[order], owner[order], end[order]
        self.ukeys, first = np.unique(key, return_index=True)
        self.lookup = SortedKeys(self.ukeys)
        self.rec_ptr = np.concatenate([first, [key.size]]).astype(np.int64)
        # the marked words: every retrieval word of an item looked for
        used = {value[w] for i, s in items if i in self.need for w in retrieval_words(s) if value[w]}
        self.values = np.asarray(sorted(used), dtype=np.uint64)
        self.filter = WindowFilter(self.values)
        # the word values of the numbers 2 to 9999 (0 and 1 are "a" and "one" as often as numbers): what
        # tells, in the word stream, a window with other numbers in it
        numbers = [str(i) for i in range(2, 10_000)]
        self.number_values = np.unique(
            np.asarray([v for v in _word_values(numbers, tokenizer, tables) if v], np.uint64)
        )
        # a bit per pair key (a hash's top bits), tested before the exact lookup: most pairs of marked
        # words are no key
        bits = int(np.clip(np.ceil(np.log2(max(1, self.ukeys.size) * 64)), 16, 28))
        self.pair_shift = np.uint64(64 - bits)
        self.pair_bits = np.zeros(1 << (bits - 3), dtype=np.uint8)
        if self.ukeys.size:
            top = (self.ukeys >> self.pair_shift).astype(np.int64)
            np.bitwise_or.at(self.pair_bits, top >> 3, (1 << (top & 7)).astype(np.uint8))

    def with_values(self, sig: Signature) -> Signature:
        """`sig` with its numbers' and names' word values (those that are one word in the stream)."""
        vals = tuple(sorted({self.value[w] for w in (*sig.numbers, *sig.names) if self.value.get(w)}))
        return dataclasses.replace(sig, values=vals)

    @property
    def num_keys(self) -> int:
        return int(self.ukeys.size)

    def probe(self, packed: np.ndarray, first_new: int) -> tuple[np.ndarray, np.ndarray]:
        """(pair key index, position of the pair's first word) of every pair of marked words of the
        packed word values at most `window` words apart whose second word is at or after first_new."""
        if self.ukeys.size == 0 or packed.size == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        lo = max(0, first_new - self.window)
        # the filter's few false marks need no exact check: a pair of them is no key (keys hold values)
        at = self.filter.window_candidates(packed, 1, lo)
        if at.size < 2:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        h, first = _pairs(at, packed[at], self.window, first_new, self.pair_bits, self.pair_shift)
        return self.lookup.find(h, first)


def _word_values(words: list[str], tokenizer, tables: WordTables) -> list[int]:
    """Each word's packed value as the word stream reads it (0 when the text is not one word there)."""
    # a number with its variable is the word stream's number-and-variable word ("59x" reads as "59#")
    ids = tokenizer.encode_batch([f" {w.replace(VARIABLE_MARK, 'x')}" for w in words])
    return [int(p[0]) if p.size == 1 else 0 for p in item_words(ids, tables)]


@njit(cache=True, nogil=True)
def _pairs(at, vals, window, first_new, bits, shift):
    """The pair hashes and first positions of marked words (positions `at`, values): each with the next
    MAX_NEXT within `window` words, the second at or after first_new, equal values skipped, whose bit is
    set in the pair bit table `bits` (top bits of the hash from `shift`)."""
    n = at.size
    out_h = np.empty(n * MAX_NEXT, np.uint64)
    out_p = np.empty(n * MAX_NEXT, np.int64)
    c = 0
    for a in range(n):
        for b in range(a + 1, min(n, a + 1 + MAX_NEXT)):
            if at[b] - at[a] > window:
                break
            if at[b] < first_new or vals[a] == vals[b]:
                continue
            x, y = vals[a], vals[b]
            if x > y:
                x, y = y, x
            h = pair_hash(x, y)
            top = h >> shift
            if (bits[top >> np.uint64(3)] >> (top & np.uint64(7))) & 1:
                out_h[c] = h
                out_p[c] = at[a]
                c += 1
    return out_h[:c], out_p[:c]


# ------------------------------------------------------------------------------------ candidates, verdicts
@dataclass(frozen=True)
class ParaCandidate:
    """An (item, document) pair whose pair hits near one another hold every retrieval word of the item:
    the token offsets of those hits."""

    item: int
    file: int
    doc: int
    pos: np.ndarray


def pair_candidates(hits: np.ndarray, para: ParaphraseIndex, base: int) -> list[ParaCandidate]:
    """The candidates of the pair hits among the merged hit records (keys >= `base`: the paraphrase
    index's keys after the window index's), in (item, file, document, position) order: each run of an
    item's hits in a document whose pairs hold every retrieval word of the item."""
    hits = hits[hits["key"] >= base]
    if hits.size == 0:
        return []
    # a pair found in PAIR_MAX_DOCS documents is common in the training text: no evidence of this item
    new_doc = np.ones(hits.size, dtype=bool)
    new_doc[1:] = (hits["key"][1:] != hits["key"][:-1]) | (hits["file"][1:] != hits["file"][:-1])
    new_doc[1:] |= hits["doc"][1:] != hits["doc"][:-1]
    keys, df = np.unique(hits["key"][new_doc], return_counts=True)
    hits = hits[~np.isin(hits["key"], keys[df >= PAIR_MAX_DOCS])]
    k = hits["key"] - base
    per = para.rec_ptr[k + 1] - para.rec_ptr[k]
    hit_of = np.repeat(np.arange(hits.size), per)
    rec = np.repeat(para.rec_ptr[k], per) + (np.arange(hit_of.size) - np.repeat(np.cumsum(per) - per, per))
    item, f, d, pos = para.rec_item[rec], hits["file"][hit_of], hits["doc"][hit_of], hits["pos"][hit_of]
    ends = para.rec_ends[rec]
    order = np.lexsort((pos, d, f, item))
    item, f, d, pos, ends = item[order], f[order], d[order], pos[order], ends[order]
    brk = np.ones(item.size, dtype=bool)
    # one candidate per run of an item's pair hits in a document, each within 2 x PAIR_WINDOW tokens of
    # the one before: the words of a paraphrase are near one another, not spread over a long document
    brk[1:] = (item[1:] != item[:-1]) | (f[1:] != f[:-1]) | (d[1:] != d[:-1])
    brk[1:] |= pos[1:] - pos[:-1] > 2 * PAIR_WINDOW
    starts = np.flatnonzero(brk)
    covered = np.bitwise_or.reduceat(ends, starts) if starts.size else ends[:0]
    need = np.asarray([para.need[int(i)] for i in item[starts].tolist()], dtype=np.int64)
    bounds = np.append(starts, item.size)
    # a document is a candidate when its pairs hold every retrieval word of the item (within the pair
    # window of one another): all of them must be in a paraphrase
    return [
        ParaCandidate(int(item[a]), int(f[a]), int(d[a]), np.unique(pos[a:b]))
        for a, b, ok in zip(bounds[:-1].tolist(), bounds[1:].tolist(), (covered == need).tolist())
        if ok
    ]


def verify_paraphrases(
    tokens: np.ndarray, docs, tables: WordTables, cands: tuple, ids: tuple, sigs: dict, numbers: np.ndarray
) -> list[tuple[int, float, int, int, str]]:
    """(candidate id, score, token start, token end, document id) of each candidate of one file that is a
    paraphrase candidate: first in the word stream around its hits (`_screen`, compiled, all candidates
    in one call), the fewest words that hold every number and name of the item, within a window's width
    and with no other number (`numbers`: the word values of 2 to 9999) in or beside them; then `check`
    on the text around them (the item's text tokens and 8 each side: the span reported)."""
    if not cands:
        return []
    sig_of = [sigs[c.item] for c in cands]
    need = [np.asarray(sig.values, np.uint64) for sig in sig_of]
    width = np.asarray([sig.tokens + max(8, sig.tokens // 2) for sig in sig_of], np.int64)
    doc = np.asarray([c.doc for c in cands], np.int64)
    ds, de = docs.starts[doc].astype(np.int64), docs.ends[doc].astype(np.int64)
    screened = ScreenCandidates(
        a=np.maximum(ds, np.asarray([int(c.pos.min()) for c in cands]) - 2 * width),
        b=np.minimum(de, np.asarray([int(c.pos.max()) for c in cands]) + 2 * width),
        need=np.concatenate(need) if need else np.zeros(0, np.uint64),
        need_ptr=np.concatenate([[0], np.cumsum([n.size for n in need])]).astype(np.int64),
        width=width,
    )
    t0, t1 = _screen(
        tokens
        if tokens.dtype in (np.uint16, np.uint32) and tokens.flags.c_contiguous
        else as_token_ids(tokens),
        tables.kernel_tables,
        screened,
        numbers,
        NEAR,
    )
    out = []
    for j in np.flatnonzero(t0 >= 0).tolist():
        sig = sig_of[j]
        lo = max(int(ds[j]), int(t0[j]) - sig.tokens - 8)
        hi = min(int(de[j]), int(t1[j]) + sig.tokens + 8)
        found = check(sig, glued_tokens(tables.text(tokens[lo:hi])))
        if found is not None:
            out.append((ids[j], found[0], lo, hi, docs.id_of(int(doc[j]))))
    return out


def paraphrase_entries(
    cands: list[ParaCandidate], verdicts, ev, paths: list[str], sources: list, flagged: np.ndarray
) -> list[dict]:
    """The report's `paraphrase_candidates`: per item not reported as a copy, the documents whose text
    passed `check` (best score first), items by score."""
    by_item: dict[int, dict[tuple, dict]] = {}
    for g, score, t0, t1, doc_id in verdicts:
        c = cands[g]
        if flagged[c.item]:
            continue
        docs = by_item.setdefault(c.item, {})
        prev = docs.get((c.file, doc_id))
        if prev is None or score > prev["score"]:  # a document once, at its best window
            docs[(c.file, doc_id)] = {
                "source": sources[c.file],
                "file": paths[c.file],
                "doc": doc_id,
                "token_start": t0,
                "token_end": t1,
                "score": score,
            }
    out = []
    for item, found in by_item.items():
        docs_found = sorted(found.values(), key=lambda x: -x["score"])
        sig = ev.signatures[item]
        out.append(
            {
                "eval": ev.sets[int(ev.set_of[item])][0],
                "id": ev.items[item].report_id,
                "opening": ev.items[item].opening,
                "score": docs_found[0]["score"],
                "signature": {
                    "numbers": list(sig.numbers),
                    "names": list(sig.names),
                    "rare_words": len(sig.stems),
                },
                "n_documents": len(docs_found),
                "documents": docs_found,
            }
        )
    out.sort(key=lambda e: -e["score"])
    return out


class ScreenCandidates(NamedTuple):
    """One file's paraphrase candidates as `_screen` reads them (one argument: numba reads a NamedTuple
    of arrays in nopython mode): candidate g's tokens [a[g], b[g]) around its hits, the word values it
    needs there need[need_ptr[g]:need_ptr[g + 1]] (its signature's, sorted) and width[g], the most
    words a run holding them all may take."""

    a: np.ndarray  # int64 per candidate
    b: np.ndarray  # int64 per candidate
    need: np.ndarray  # uint64: every candidate's needed values, concatenated
    need_ptr: np.ndarray  # int64, one more than candidates
    width: np.ndarray  # int64 per candidate


@njit(cache=True, nogil=True)
def _min_span(words, need):
    """(span, first, last): the fewest consecutive words holding every value of `need` (sorted, distinct)
    and where they are; span huge when no run does."""
    n = need.size
    count = np.zeros(n, np.int64)
    missing = n
    best, best_lo, best_hi = 1 << 40, 0, 0
    lo = 0
    slot = np.searchsorted(need, words)
    for hi in range(words.size):
        j = slot[hi]
        if j < n and need[j] == words[hi]:
            if count[j] == 0:
                missing -= 1
            count[j] += 1
        while missing == 0:
            if hi - lo + 1 < best:
                best, best_lo, best_hi = hi - lo + 1, lo, hi
            k = slot[lo]
            if k < n and need[k] == words[lo]:
                count[k] -= 1
                if count[k] == 0:
                    missing += 1
            lo += 1
    return best, best_lo, best_hi


@njit(cache=True, nogil=True)
def _sorted_has(values, x):
    i = np.searchsorted(values, x)
    return i < values.size and values[i] == x


@njit(cache=True, nogil=True)
def _screen(tokens, tables, cands, numbers, near):
    """Per candidate g of `cands` (ScreenCandidates): the words of tokens[a[g]:b[g]], the fewest of them
    holding every value of its need[need_ptr[g]:need_ptr[g + 1]]; (first token, end token) of that run
    when it is at most width[g] words and no other number (`numbers`, sorted) lies in it or `near` words
    beside it, else (-1, -1)."""
    a, b, need, need_ptr, width = cands
    m = a.size
    t0 = np.full(m, -1, np.int64)
    t1 = np.full(m, -1, np.int64)
    for g in range(m):
        nd = need[need_ptr[g] : need_ptr[g + 1]]
        vals, first_tok, _ = words_of(tokens[a[g] : b[g]], tables, True)
        span, lo, hi = _min_span(vals, nd)
        if span > width[g]:
            continue
        ok = True
        for i in range(max(0, lo - near), min(vals.size, hi + 1 + near)):
            if _sorted_has(numbers, vals[i]) and not _sorted_has(nd, vals[i]):
                ok = False
                break
        if ok:
            t0[g] = a[g] + first_tok[lo]
            t1[g] = a[g] + (first_tok[hi + 1] if hi + 1 < first_tok.size else b[g] - a[g])
    return t0, t1

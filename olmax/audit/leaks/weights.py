"""How much a word says: the leak audit's information weights, from a background table the tokenizer ships.

The table is the tokenizer's vocabulary (normalize.WordTables.ranks): a byte-level BPE vocabulary adds
its merges in order of frequency in the text it was trained on, so the id of a lower-case word that is
one token after a space is its frequency rank there (" the" 279, " field" 2115, " eggs" 19335), and a
word that is no token of its own (" eigenvalue", " mitochondria") is rarer than every word that is. The
inverse document frequency of a word grows with the log of that rank (Zipf); the audit needs only three
steps of it:

- *common*: one token of rank under COMMON_RANK (function words: "the", "is", "of", "which"), but no
  negation ("not", "no", "never": dropping one turns a question around). An edit touching only common
  words (or punctuation, which the text check does not read) costs CHEAP_EDIT, a number put for
  another number (or an operator for another) VALUE_EDIT, any other edit 1.
- *specific*: a word of rank SPECIFIC_RANK or more, or no one token (nor its stem: "cleans" ranks as
  "clean"), of at least three letters ("duck"
  37085, "chlorophyll"; not "confidence" or "facts", everyday words of ranks 10,000 to 30,000); and a
  number of two or more digits. A gold answer is evidence of a leak on its own only with MIN_SPECIFIC
  of these ("Nobody can tell with any confidence from the facts given above" has none).
  A short item's word standing where the document has a specific word ("field"
  where it says "eigenvalue") is a key term replaced: another question, not an edit (align.text_check
  names it). A word the text puts in place of another that is everyday ("moon", "answer") is an edit.
"""

from __future__ import annotations

from difflib import SequenceMatcher

COMMON_RANK = 1000
SPECIFIC_RANK = 30_000
MIN_SPECIFIC = 2
CHEAP_EDIT = 0.5
VALUE_EDIT = 2.0
NEGATIONS = frozenset("not no nor never none neither nothing nobody without except cannot".split())
INFLECTIONS = ("s", "es", "ed", "d", "ing", "er", "ers", "ly")  # endings whose stem ranks a word
SPELLING = 0.75  # a rare word this close (difflib ratio) to the item's word is a misspelling of it


def rank(word: str, ranks: dict[str, int]) -> int | None:
    """The vocabulary rank of a word or of its stem, the lower ("cleans" 35294 ranks as "clean": an
    inflection is as common as its stem); None when neither is a token."""
    found = [
        ranks[w] for w in (word, *(word[: -len(e)] for e in INFLECTIONS if word.endswith(e))) if w in ranks
    ]
    return min(found) if found else None


def is_common(word: str, ranks: dict[str, int]) -> bool:
    """A function word of the vocabulary's first COMMON_RANK ids, not a negation."""
    return ranks.get(word, COMMON_RANK) < COMMON_RANK and word not in NEGATIONS


def is_specific(word: str, ranks: dict[str, int]) -> bool:
    """A word that tells what a text is about: rank >= SPECIFIC_RANK or no one token (>= 3 letters),
    or a number of two or more digits."""
    if word.isdigit():
        return len(word) >= 2
    if len(word) < 3 or not word.isalpha():
        return False
    r = rank(word, ranks)
    return r is None or r >= SPECIFIC_RANK


def edit_cost(item_word: str | None, doc_word: str | None, ranks: dict[str, int]) -> float:
    """The cost of one edit of the text check: `item_word` dropped (doc_word None), `doc_word` inserted
    (item_word None) or one substituted for the other: CHEAP_EDIT when every token it touches is a
    common word; VALUE_EDIT for a number put for another number, or an operator for another (a value
    changed, where the text check could not read it as a conflict: see align.text_check); else 1 (a
    number or an operator is never cheap; punctuation is never read)."""
    toks = [w for w in (item_word, doc_word) if w is not None]
    if len(toks) == 2 and not any(w.isalpha() for w in toks) and toks[0][0].isdigit() == toks[1][0].isdigit():
        return VALUE_EDIT
    return CHEAP_EDIT if all(w.isalpha() and is_common(w, ranks) for w in toks) else 1.0


def key_term_replaced(item_word: str, doc_word: str, ranks: dict[str, int]) -> bool:
    """Whether a substitution puts a specific term in the place of a word of the item: both are words,
    `doc_word` is specific (`is_specific`) and no misspelling of `item_word`."""
    if not (item_word.isalpha() and doc_word.isalpha() and is_specific(doc_word, ranks)):
        return False
    return SequenceMatcher(None, item_word, doc_word).ratio() < SPELLING


def specific_count(words: list[str], ranks: dict[str, int]) -> int:
    """How many of `words` (text tokens, lower-case) are specific (`is_specific`)."""
    return sum(is_specific(w, ranks) for w in words)

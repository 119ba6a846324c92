"""How much a word says: the leak audit's information weights, from a background table the tokenizer ships.

The table is the tokenizer's vocabulary (normalize.WordTables.ranks): a byte-level BPE vocabulary adds
its merges in order of frequency in the text it was trained on, so the id of a lower-case word that is
one token after a space is its frequency rank there (" the" 279, " field" 2115, " eggs" 19335), and a
word that is no token of its own (" eigenvalue", " mitochondria") is rarer than every word that is. The
inverse document frequency of a word grows with the log of that rank (Zipf); the audit needs only three
steps of it:

- *common*: one token of rank under COMMON_RANK (function words: "the", "is", "of", "which"), but no
  negation ("not", "no", "never": dropping one turns a question around). An edit touching only common
  words (or punctuation, which the text check does not read) costs CHEAP_EDIT, any other edit 1.
- *specific*: a word of rank SPECIFIC_RANK or more, or no one token, of at least three letters; and a
  number of two or more digits. A gold answer is evidence of a leak on its own only with
  MIN_SPECIFIC of these ("The answer cannot be determined from the information given" has none).
- *rare*: a word of at least three letters that is no one token of the vocabulary. A short item's word
  standing where the document has a rare word ("field" where it says "eigenvalue") is a key term
  replaced: another question, not an edit (align.text_check names it).
"""

from __future__ import annotations

from difflib import SequenceMatcher

COMMON_RANK = 1000
SPECIFIC_RANK = 10_000
MIN_SPECIFIC = 2
CHEAP_EDIT = 0.5
NEGATIONS = frozenset("not no nor never none neither nothing nobody without except cannot".split())
SPELLING = 0.75  # a rare word this close (difflib ratio) to the item's word is a misspelling of it


def is_common(word: str, ranks: dict[str, int]) -> bool:
    """A function word of the vocabulary's first COMMON_RANK ids, not a negation."""
    return ranks.get(word, COMMON_RANK) < COMMON_RANK and word not in NEGATIONS


def is_specific(word: str, ranks: dict[str, int]) -> bool:
    """A word that tells what a text is about: rank >= SPECIFIC_RANK or no one token (>= 3 letters),
    or a number of two or more digits."""
    if word.isdigit():
        return len(word) >= 2
    return len(word) >= 3 and word.isalpha() and ranks.get(word, SPECIFIC_RANK) >= SPECIFIC_RANK


def is_rare(word: str, ranks: dict[str, int]) -> bool:
    """A word of three or more letters that is no one token of the vocabulary."""
    return len(word) >= 3 and word.isalpha() and word not in ranks


def edit_cost(item_word: str | None, doc_word: str | None, ranks: dict[str, int]) -> float:
    """The cost of one edit of the text check: `item_word` dropped (doc_word None), `doc_word` inserted
    (item_word None) or one substituted for the other: CHEAP_EDIT when every word it touches is common
    (or no letter word: punctuation is never read), else 1."""
    words = [w for w in (item_word, doc_word) if w is not None and w.isalpha()]
    return CHEAP_EDIT if all(is_common(w, ranks) for w in words) else 1.0


def key_term_replaced(item_word: str, doc_word: str, ranks: dict[str, int]) -> bool:
    """Whether a substitution replaces a term of the item by a rare one: `item_word` is no common word,
    `doc_word` is rare (`is_rare`) and no misspelling of it."""
    if not (item_word.isalpha() and is_rare(doc_word, ranks)) or is_common(item_word, ranks):
        return False
    return SequenceMatcher(None, item_word, doc_word).ratio() < SPELLING


def specific_count(words: list[str], ranks: dict[str, int]) -> int:
    """How many of `words` (text tokens, lower-case) are specific (`is_specific`)."""
    return sum(is_specific(w, ranks) for w in words)

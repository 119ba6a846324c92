"""Plants for the leak calibration: ways an eval item's text turns up in training data, written with no
code shared with the detector.

Standard library only, and nothing imported from `olmax`: a plant is built from the item's raw text
(text in, text out, a seeded `random.Random` for every choice), never from the detector's tokenizer,
word tables or normaliser, so the calibration cannot bend itself around the rule it measures. "Words"
here are whitespace-separated runs of characters, as a reader counts them.

Transformations of an item (each a function `(text, rng) -> text`):
  verbatim          the item unchanged
  prefix / suffix   the first / last 80-90% of its words (the fraction drawn uniformly)
  substitute        every 10th word (random phase) replaced by a different common English word
  drop              every 12th word (random phase) removed
  markup            HTML tags with attributes around sentences and phrases, as a scraped page has them
  unicode_variants  curly quotes, dashes, no-break spaces, ligatures, fullwidth letters, combining
                    accents and NFD forms: the same text to a human reader, different bytes
  rewrap            hard line breaks every 40-80 characters, sometimes indented or "> " quoted

Placements: `on_one` pastes a plant into one host document at a line break; `on_many` pastes it into
3-6 distinct host documents. Negatives: `with_generic_sentence` (a sentence that many training
documents also carry, prepended to a clean item) and `with_boilerplate_line` (a line repeated across
the training text itself, found by `common_lines`). `independent` keeps items that share no long word
run with an earlier item (one BoolQ passage carries several questions: planting one contaminates its
siblings for real).

Short maths questions (MATH_TEMPLATES, numbers drawn per item) carry the symbol kinds: `written_out`,
`written_numbers`, `short_edit` and the hard negatives `sign_flip`, `other_number`, `template_values`;
`rename_variable` renames one single-letter variable throughout (the same question to a reader).

Answer side, for completion tasks whose gold continuation can leak without its prompt
(`completion_parts` reads HellaSwag, PIQA and COPA records): `answer_alone` (the gold answer alone),
`context_end_answer` (the context's last 5-10 words, then the gold answer); hard negatives with a wrong
choice of the same item: `wrong_ending` (a context end of at most half the context, then a distractor)
and `wrong_ending_alone` (a distractor alone).

Paraphrases, a weaker kind of leak than a copy: every template, of MATH_TEMPLATES and of the GSM8K-style
WORD_TEMPLATES (a first name of FIRST_NAMES, objects, 2-4 numbers), has a paraphrase template
(MATH_PARAPHRASES, WORD_PARAPHRASES) with the same slots and other wording: sentence order, synonyms
(biscuits for cookies, pupils for children), other syntax. `fill` puts one item's values into either, so
item and paraphrase hold the same numbers and name. Hard negatives, the same wording with a different
problem: `other_number` or `sign_flip` applied to the paraphrase, `other_name`, and
`same_values_other_problem` (the item's values in another template's paraphrase).
"""

from __future__ import annotations

import random
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence

_TOKEN = re.compile(r"\S+")
_CORE = re.compile(r"^(\W*)(.*?)(\W*)$", re.S)

# Replacement words for `substitute`: common English words, none of them rare enough to stand out.
COMMON_WORDS = (
    "about",
    "after",
    "again",
    "air",
    "also",
    "animal",
    "answer",
    "area",
    "around",
    "away",
    "back",
    "ball",
    "because",
    "before",
    "began",
    "being",
    "below",
    "between",
    "big",
    "black",
    "body",
    "book",
    "both",
    "boy",
    "bring",
    "build",
    "call",
    "came",
    "car",
    "care",
    "carry",
    "cause",
    "change",
    "children",
    "city",
    "close",
    "cold",
    "color",
    "common",
    "country",
    "cover",
    "cross",
    "cut",
    "dark",
    "day",
    "deep",
    "door",
    "down",
    "draw",
    "during",
    "early",
    "earth",
    "east",
    "easy",
    "eat",
    "end",
    "enough",
    "even",
    "every",
    "eye",
    "face",
    "fact",
    "family",
    "far",
    "farm",
    "fast",
    "father",
    "feel",
    "few",
    "field",
    "fire",
    "fish",
    "follow",
    "food",
    "foot",
    "form",
    "found",
    "friend",
    "full",
    "game",
    "garden",
    "girl",
    "give",
    "good",
    "great",
    "green",
    "ground",
    "group",
    "grow",
    "hand",
    "hard",
    "head",
    "hear",
    "heavy",
    "help",
    "high",
    "hold",
    "home",
    "horse",
    "hot",
    "house",
    "idea",
    "important",
    "island",
    "keep",
    "kind",
    "king",
    "land",
    "large",
    "later",
    "learn",
    "leave",
    "letter",
    "life",
    "light",
    "line",
    "list",
    "little",
    "live",
    "long",
    "low",
    "made",
    "main",
    "make",
    "many",
    "map",
    "mark",
    "measure",
    "money",
    "moon",
    "morning",
    "mother",
    "mountain",
    "move",
    "much",
    "music",
    "name",
    "near",
    "need",
    "never",
    "next",
    "night",
    "north",
    "notice",
    "number",
    "often",
    "old",
    "open",
    "order",
    "other",
    "page",
    "paper",
    "part",
    "people",
    "picture",
    "place",
    "plan",
    "play",
    "point",
    "power",
    "press",
    "pull",
    "question",
    "quick",
    "rain",
    "read",
    "real",
    "red",
    "rest",
    "river",
    "road",
    "rock",
    "room",
    "round",
    "run",
    "say",
    "school",
    "sea",
    "second",
    "seem",
    "ship",
    "short",
    "show",
    "side",
    "simple",
    "size",
    "sleep",
    "slow",
    "small",
    "song",
    "soon",
    "sound",
    "south",
    "space",
    "stand",
    "star",
    "start",
    "state",
    "still",
    "stone",
    "story",
    "street",
    "strong",
    "study",
    "sun",
    "table",
    "take",
    "talk",
    "teach",
    "thing",
    "think",
    "thought",
    "together",
    "town",
    "travel",
    "tree",
    "true",
    "turn",
    "under",
    "until",
    "upon",
    "usual",
    "very",
    "voice",
    "walk",
    "want",
    "warm",
    "watch",
    "water",
    "weather",
    "week",
    "west",
    "white",
    "whole",
    "wind",
    "window",
    "winter",
    "wood",
    "word",
    "work",
    "world",
    "write",
    "year",
    "young",
)

# Sentences many training documents carry (copyright lines, footers): prepended to clean items.
GENERIC_SENTENCES = (
    "All rights reserved. No part of this publication may be reproduced without permission.",
    "This material is provided for educational purposes only and may be freely copied for classroom use.",
    "The views expressed here are those of the authors and do not necessarily reflect those of the "
    "publisher.",
)


def words(text: str) -> list[str]:
    """The whitespace-separated words of `text`."""
    return text.split()


def _join_kept(text: str, keep: Sequence[bool]) -> str:
    """`text` without the words whose `keep` is False; a kept word keeps the whitespace before it."""
    out, prev = [], 0
    for m, k in zip(_TOKEN.finditer(text), keep):
        if k:
            out.append((text[prev : m.start()] if out else "") + m.group())
        prev = m.end()
    return "".join(out)


# ------------------------------------------------------------------------------------ transformations
def verbatim(text: str, rng: random.Random | None = None) -> str:
    """The item unchanged."""
    return text


def _kept_count(n: int, rng: random.Random) -> int:
    return max(1, min(n, round(rng.uniform(0.80, 0.90) * n)))


def prefix(text: str, rng: random.Random) -> str:
    """The item's first 80-90% of words (fraction uniform in [0.80, 0.90]), cut after a word, its
    original spacing kept."""
    spans = list(_TOKEN.finditer(text))
    if not spans:
        return text
    return text[: spans[_kept_count(len(spans), rng) - 1].end()]


def suffix(text: str, rng: random.Random) -> str:
    """The item's last 80-90% of words (fraction uniform in [0.80, 0.90]), cut before a word."""
    spans = list(_TOKEN.finditer(text))
    if not spans:
        return text
    return text[spans[len(spans) - _kept_count(len(spans), rng)].start() :]


def _replacement(core: str, rng: random.Random) -> str:
    while True:
        w = rng.choice(COMMON_WORDS)
        if w != core.lower():
            break
    if core[:1].isupper():
        w = w.upper() if len(core) > 1 and core.isupper() else w.capitalize()
    return w


def substitute(text: str, rng: random.Random) -> str:
    """Every 10th word from a random phase in [0, 10) replaced by a common English word that differs
    from it; the word's leading and trailing punctuation and its capitalisation are kept."""
    spans = list(_TOKEN.finditer(text))
    phase = rng.randrange(10)
    out, prev = [], 0
    for i, m in enumerate(spans):
        tok = m.group()
        if i % 10 == phase:
            lead, core, trail = _CORE.match(tok).groups()
            tok = lead + _replacement(core, rng) + trail if core else _replacement(tok, rng)
        out.append(text[prev : m.start()] + tok)
        prev = m.end()
    return "".join(out) + text[prev:]


def drop(text: str, rng: random.Random) -> str:
    """Every 12th word from a random phase in [0, 12) removed, with the whitespace before it."""
    phase = rng.randrange(12)
    n = len(_TOKEN.findall(text))
    return _join_kept(text, [i % 12 != phase for i in range(n)])


_PAGE_OPEN = (
    '<div class="entry-content" itemprop="articleBody">',
    '<div id="mw-content-text" class="mw-body-content">',
    '<article class="post-body" data-id="{n}">',
    '<section class="question-text">',
)
_BLOCKS = (
    ("<p>", "</p>"),
    ('<p class="lead">', "</p>"),
    ("<li>", "</li>"),
    ('<span class="q">', "</span>"),
    ('<div class="text-block">', "</div>"),
    ("", ""),
)
_BREAKS = ("\n", " ", "<br/>\n", "\n\n", " <br/> ", "<br>\n")


def _inline(tag: str, phrase: Sequence[str]) -> tuple[str, str]:
    if tag == "a":
        topic = re.sub(r"\W+", "_", phrase[0]).strip("_") or "Main_Page"
        return f'<a href="/wiki/{topic}" title="{topic.replace("_", " ")}">', "</a>"
    return f"<{tag}>", f"</{tag}>"


def markup(text: str, rng: random.Random) -> str:
    """The item as a scraped web page shows it: a page container tag with attributes, each sentence in
    a block tag (<p>, <li>, <span class="q">, ...) or bare, some phrases of 1-3 words in inline tags
    (<b>, <em>, <a href=... title=...>), sentences separated by newlines or <br/>. Tags sit between
    words or touch them (`<p>The`); the item's words stay whole and in order."""
    toks = text.split()
    sentences, cur = [], []
    for t in toks:
        cur.append(t)
        if re.search(r"[.!?][\"')\]]*$", t):
            sentences.append(cur)
            cur = []
    if cur:
        sentences.append(cur)
    parts = []
    for sent in sentences:
        sent = list(sent)
        if len(sent) >= 2 and rng.random() < 0.6:
            k = rng.randint(1, min(3, len(sent)))
            a = rng.randrange(len(sent) - k + 1)
            op, cl = _inline(rng.choice(("b", "em", "a", "strong")), sent[a : a + k])
            sent[a] = op + sent[a]
            sent[a + k - 1] = sent[a + k - 1] + cl
        op, cl = rng.choice(_BLOCKS)
        parts.append(op + " ".join(sent) + cl)
    body = parts[0] if parts else ""
    for p in parts[1:]:
        body += rng.choice(_BREAKS) + p
    page = rng.choice(_PAGE_OPEN).format(n=rng.randrange(1000, 99999))
    close = "</" + page[1 : page.index(" ")] + ">"
    return page + "\n" + body + "\n" + close


_QUOTE_SINGLE = {True: "\u2018", False: "\u2019"}  # opening / closing (and apostrophe)
_QUOTE_DOUBLE = {True: "\u201c", False: "\u201d"}
_LIGATURES = (("ffi", "\ufb03"), ("ffl", "\ufb04"), ("fi", "\ufb01"), ("fl", "\ufb02"), ("ff", "\ufb00"))


def _curly(text: str) -> str:
    out = []
    for i, c in enumerate(text):
        before = text[i - 1] if i else " "
        opening = before.isspace() or before in "([{\u2014-"
        if c == "'":
            out.append(_QUOTE_SINGLE[opening])
        elif c == '"':
            out.append(_QUOTE_DOUBLE[opening])
        else:
            out.append(c)
    return "".join(out)


def _dashes(text: str, rng: random.Random) -> str:
    text = re.sub(r" (?:-|--) ", " \u2014 ", text)  # a spaced hyphen used as a dash: em dash
    text = re.sub(r"(?<=\d)-(?=\d)", "\u2013", text)  # number ranges: en dash
    return re.sub(r"(?<=\w)-(?=\w)", lambda m: rng.choice(("\u2013", "\u2010", "\u2011")), text)


def _fullwidth(word: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in word)


def _ligature(word: str) -> str | None:
    for plain, lig in _LIGATURES:
        if plain in word:
            return word.replace(plain, lig, 1)
    return None


def _accent(word: str, rng: random.Random) -> str | None:
    spots = [i for i, c in enumerate(word) if c in "aeiouAEIOU"]
    if not spots:
        return None
    i = rng.choice(spots)
    return word[: i + 1] + rng.choice(("\u0301", "\u0300", "\u0308")) + word[i + 1 :]


def unicode_variants(text: str, rng: random.Random) -> str:
    """Text a reader sees as the same, in other code points: straight quotes become curly ones, hyphens
    en dashes / U+2010 / U+2011 and spaced hyphens em dashes, about one space in six a no-break space
    (at least one), and a few words change form: "fi"/"fl"/"ff" ligatures (half the words that have
    one), fullwidth letters (about one word in 25), a combining accent on a vowel (one in 15), words
    with precomposed accents in NFD. The bytes always change when the text has two words."""
    text = _dashes(_curly(text), rng)
    spans = list(_TOKEN.finditer(text))
    out, prev = [], 0
    for m in spans:
        w, r = m.group(), rng.random()
        new = None
        if unicodedata.normalize("NFD", w) != w:
            new = unicodedata.normalize("NFD", w)
        elif r < 1 / 25:
            new = _fullwidth(w)
        elif r < 1 / 25 + 1 / 15:
            new = _accent(w, rng)
        elif rng.random() < 0.5:
            new = _ligature(w)
        out.append((text[prev : m.start()], new or w))
        prev = m.end()
    spaces = [i for i, (sep, _) in enumerate(out) if sep == " "]
    nbsp = set(rng.sample(spaces, max(1, len(spaces) // 6))) if spaces else set()
    return "".join(("\u00a0" if i in nbsp else sep) + w for i, (sep, w) in enumerate(out)) + text[prev:]


def rewrap(text: str, rng: random.Random) -> str:
    """The item's words hard-wrapped at a width drawn in [40, 80] characters, as in email or markdown;
    half the time each line is indented or "> " quoted."""
    width = rng.randint(40, 80)
    lead = rng.choice(("", "", "", "  ", "    ", "> ", "> ", "> > "))
    lines, cur = [], lead
    for w in text.split():
        if cur != lead and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = lead
        cur = cur + w if cur == lead else cur + " " + w
    if cur != lead or not lines:
        lines.append(cur)
    return "\n".join(lines)


TRANSFORMS = {
    "verbatim": verbatim,
    "prefix": prefix,
    "suffix": suffix,
    "substitute": substitute,
    "drop": drop,
    "markup": markup,
    "unicode_variants": unicode_variants,
    "rewrap": rewrap,
}


# ----------------------------------------------------------------------------------------- placement
def on_one(plant: str, host: str, rng: random.Random) -> str:
    """`host` with `plant` pasted on lines of its own at a random line break inside it (at a random
    space when the host has no inner line break)."""
    cuts = [i + 1 for i, c in enumerate(host[:-1]) if c == "\n"]
    if cuts:
        cut = rng.choice(cuts)
        return host[:cut] + plant + "\n" + host[cut:]
    cuts = [i for i, c in enumerate(host) if c == " "]
    if cuts:
        cut = rng.choice(cuts)
        return host[:cut] + "\n" + plant + "\n" + host[cut + 1 :]
    return host + "\n" + plant + "\n"


def pick_hosts(n_docs: int, count: int, rng: random.Random, used: set[int]) -> list[int]:
    """`count` distinct document indices below `n_docs` not in `used`; they are added to `used`."""
    free = [i for i in range(n_docs) if i not in used]
    if len(free) < count:
        raise ValueError(f"{count} host documents wanted, {len(free)} unused left")
    picked = rng.sample(free, count)
    used.update(picked)
    return picked


def on_many(
    plant: str,
    docs: Sequence[str],
    rng: random.Random,
    used: set[int] | None = None,
    count: int | None = None,
) -> dict[int, str]:
    """`plant` pasted (`on_one`) into `count` distinct documents of `docs` (3-6 drawn when None) not in
    `used`, each at its own point: {document index: its new text}. The picks are added to `used`."""
    used = set() if used is None else used
    count = rng.randint(3, 6) if count is None else count
    return {i: on_one(plant, docs[i], rng) for i in pick_hosts(len(docs), count, rng, used)}


# ----------------------------------------------------------------------------------------- negatives
def with_generic_sentence(text: str, sentence: str) -> str:
    """A clean item with a generic sentence (one that many training documents carry) before it."""
    return sentence + " " + text


def with_boilerplate_line(text: str, line: str) -> str:
    """A clean item with a line of the training text's own boilerplate on a line before it."""
    return line + "\n" + text


def common_lines(
    docs: Iterable[str], min_docs: int = 12, min_words: int = 4, min_chars: int = 20
) -> list[tuple[str, int]]:
    """Lines (stripped) that occur in at least `min_docs` of `docs`, with at least `min_words` words and
    `min_chars` characters of which some are letters: [(line, documents)], most common first."""
    df: Counter[str] = Counter()
    for doc in docs:
        df.update({ln.strip() for ln in doc.splitlines()})
    keep = [
        (ln, n)
        for ln, n in df.items()
        if n >= min_docs
        and len(ln) >= min_chars
        and len(ln.split()) >= min_words
        and sum(c.isalpha() for c in ln) >= min_chars // 2
    ]
    return sorted(keep, key=lambda x: (-x[1], x[0]))


def independent(texts: Sequence[str], span: int = 8) -> list[int]:
    """Indices of the texts sharing no run of `span` words (lowercased \\w+ runs) with an earlier kept
    text; a text shorter than `span` words is compared whole."""
    seen: set[tuple[str, ...]] = set()
    kept = []
    for i, t in enumerate(texts):
        ws = tuple(re.findall(r"\w+", t.lower()))
        runs = {ws[j : j + span] for j in range(max(1, len(ws) - span + 1))}
        if runs & seen:
            continue
        seen |= runs
        kept.append(i)
    return kept


def round_robin(pairs: Sequence[tuple[str, object]], names: Sequence[str]) -> list:
    """(set name, item) pairs taken round-robin over the sets `names`, each set's pairs in their given order."""
    by_set = {name: [p for p in pairs if p[0] == name][::-1] for name in names}
    out = []
    while any(by_set.values()):
        for name in names:
            if by_set[name]:
                out.append(by_set[name].pop())
    return out


def paste(plant: str, texts: list[str], many: bool, rng: random.Random, used: set[int]) -> dict[int, str]:
    """{host index: new text}: `plant` pasted into 3-6 documents of `texts` (`many`) or into one, hosts
    not in `used` (which grows)."""
    if many:
        return on_many(plant, texts, rng, used)
    h = pick_hosts(len(texts), 1, rng, used)[0]
    return {h: on_one(plant, texts[h], rng)}


# ------------------------------------------------------------------- short items, symbols, written-out forms
# Short maths questions (one line, numbers and operators) written here from templates: the eval items of
# the symbol kinds. Each template's slots are filled with distinct integers; `{op}` is + or -.
MATH_TEMPLATES = (
    "Solve for x in the equation {a}x {op} {b} = {c}.",
    "What is the value of {a} {op} {b} * {c}?",
    "If y = {a}x {op} {b}, what is y when x = {c}?",
    "Compute {a} * {b} {op} {c} and write down the result.",
    "A box holds {a} red balls and {b} blue balls. If {c} balls are taken out, how many are left?",
    "Simplify the expression {a}(x {op} {b}) - {c}x as far as you can.",
    "Find the number n such that n {op} {a} = {b} * {c}.",
    "The perimeter of a rectangle is {a} cm and one side is {b} cm. How long is the other side?",
)
_SMALL = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty"
).split()
_OPS_SPOKEN = {"+": "plus", "-": "minus", "*": "times", "=": "equals"}
_NUMBER = re.compile(r"\d+")


def math_values(rng: random.Random) -> dict:
    """The values of one maths question: {a}, {b}, {c} distinct integers in [2, 60], {op} + or -."""
    a, b, c = rng.sample(range(2, 61), 3)
    return {"a": a, "b": b, "c": c, "op": rng.choice("+-")}


def math_item(template: str, rng: random.Random) -> str:
    """`template` filled with `math_values`: {a}, {b}, {c} distinct integers in [2, 60], {op} + or -."""
    return template.format(**math_values(rng))


def math_items(n: int, rng: random.Random) -> list[str]:
    """`n` distinct maths questions, round-robin over MATH_TEMPLATES."""
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < n:
        text = math_item(MATH_TEMPLATES[len(out) % len(MATH_TEMPLATES)], rng)
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out


def written_out(text: str, rng: random.Random | None = None) -> str:
    """The item with its spaced operators spoken: `3 + 4 = 7` as `3 plus 4 equals 7`, `*` as `times`."""
    return re.sub(r"(?<= )[-+*=](?= )", lambda m: _OPS_SPOKEN[m.group()], text)


def written_numbers(text: str, rng: random.Random | None = None) -> str:
    """The item with its whole numbers up to twenty as words (`6 cm` as `six cm`; not one glued to a
    variable, as in `20x`)."""
    return re.sub(
        r"(?<![\w.])\d+(?![\w.])",
        lambda m: _SMALL[int(m.group())] if int(m.group()) <= 20 else m.group(),
        text,
    )


def sign_flip(text: str, rng: random.Random) -> str:
    """One spaced `+` or `-` of the item turned into the other (a different question); the text
    unchanged when it has none."""
    spots = [m.start() for m in re.finditer(r"(?<= )[-+](?= )", text)]
    if not spots:
        return text
    i = rng.choice(spots)
    return text[:i] + ("-" if text[i] == "+" else "+") + text[i + 1 :]


def other_number(text: str, rng: random.Random) -> str:
    """One number of the item replaced by another of as many digits (a different question)."""
    spans = list(_NUMBER.finditer(text))
    if not spans:
        return text
    m = rng.choice(spans)
    old = m.group()
    lo, hi = (0, 9) if len(old) == 1 else (10 ** (len(old) - 1), 10 ** len(old) - 1)
    new = old
    while new == old:
        new = str(rng.randint(lo, hi))
    return text[: m.start()] + new + text[m.end() :]


def template_values(template: str, text: str, rng: random.Random) -> str:
    """Another fill of the template `text` came from: the same words, other values."""
    while True:
        other = math_item(template, rng)
        if other != text:
            return other


def _plain(word: str) -> bool:
    """A word with no digit and no operator: edits to wording touch only these."""
    return not re.search(r"[\d+\-*/=<>^%]", word)


def short_edit(text: str, rng: random.Random) -> str:
    """A short item reworded: one word edit per 7 words, at most two (one under 14 words), each a
    substitution by a common word, an inserted common word or a dropped word, at distinct words that
    hold no digit or operator (the numbers and symbols stay as they are)."""
    toks = text.split()
    n_edits = max(1, min(2, len(toks) // 7))
    spots = [i for i, t in enumerate(toks) if _plain(t)]
    picks = sorted(rng.sample(spots, min(n_edits, len(spots))), reverse=True)
    for i in picks:
        kind = rng.choice(("substitute", "insert", "drop"))
        lead, core, trail = _CORE.match(toks[i]).groups()
        if kind == "substitute":
            toks[i] = lead + _replacement(core or toks[i], rng) + trail
        elif kind == "insert":
            toks.insert(i, rng.choice(COMMON_WORDS))
        else:
            del toks[i]
    return " ".join(toks)


# ------------------------------------------------------------------------ answer side (completion tasks)
def context_end(context: str, rng: random.Random, longest: int = 10) -> str:
    """The context's last k words, k uniform in [5, `longest`], cut before a word (the whole context,
    stripped, when it has no more than k words)."""
    spans = list(_TOKEN.finditer(context))
    k = rng.randint(5, max(5, longest))
    if len(spans) <= k:
        return context.strip()
    return context[spans[-k].start() :].rstrip()


def answer_alone(answer: str, rng: random.Random | None = None) -> str:
    """The gold continuation by itself, as a page quoting only the answer has it."""
    return answer.strip()


def context_end_answer(context: str, answer: str, rng: random.Random) -> str:
    """The last 5-10 words of the context (`context_end`) followed by the gold answer: the end of the
    prompt and its continuation, as a page that quotes the finished sentence has them."""
    return context_end(context, rng) + " " + answer.strip()


def wrong_choices(choices: Sequence[str], gold: int) -> list[str]:
    """The choices other than the gold one that differ from it (after stripping), in order."""
    right = choices[gold].strip()
    return [c for i, c in enumerate(choices) if i != gold and c.strip() and c.strip() != right]


def wrong_ending(context: str, choices: Sequence[str], gold: int, rng: random.Random) -> str:
    """The last k words of the context, k uniform in [5, min(10, half its words)] (so the context end is at
    most half of the context), followed by a wrong choice (a distractor of the same item) drawn
    uniformly: the item's prompt end with an answer that is not its own."""
    end = context_end(context, rng, longest=min(10, len(context.split()) // 2))
    return end + " " + rng.choice(wrong_choices(choices, gold)).strip()


def wrong_ending_alone(choices: Sequence[str], gold: int, rng: random.Random, min_words: int = 10) -> str:
    """A wrong choice of the item with at least `min_words` words, drawn uniformly, by itself."""
    return rng.choice([c for c in wrong_choices(choices, gold) if len(c.split()) >= min_words]).strip()


def completion_parts(name: str, record: dict) -> tuple[str, list[str], int] | None:
    """(context, choices, gold index) of a HellaSwag (ctx, endings, label), PIQA (goal, sol1, sol2,
    label) or COPA (premise, choice1, choice2, label) record; None when its label is not a valid index."""
    if name == "hellaswag":
        context, choices = record["ctx"], list(record["endings"])
    elif name == "piqa":
        context, choices = record["goal"], [record["sol1"], record["sol2"]]
    elif name == "copa":
        context, choices = record["premise"], [record["choice1"], record["choice2"]]
    else:
        raise ValueError(f"not a completion set: {name}")
    label = str(record.get("label", ""))
    if not label.isdigit() or int(label) >= len(choices):
        return None
    return str(context), [str(c) for c in choices], int(label)


# ----------------------------------------------------------------------------------- renamed variable
_VARIABLE = re.compile(r"(?<![A-Za-z])([b-hj-z])(?![A-Za-z])")
# Letters a renamed variable may take: no `a` or `i` (words of their own), no `l` or `o` (read as 1, 0),
# no `e` (the constant).
VARIABLE_LETTERS = "bcdfghkmnpqrstuvwxyz"


def variables(text: str) -> list[str]:
    """The single-letter variables of `text` in order of first use: a lowercase letter other than `a`
    and `i` with no letter on either side (`x` in `24x`, `(x`, `n =`; not the `x` of `box`)."""
    return list(dict.fromkeys(_VARIABLE.findall(text)))


def rename_variable(text: str, rng: random.Random) -> str:
    """One single-letter variable of the item (drawn uniformly among `variables`) renamed everywhere it
    occurs to a letter of VARIABLE_LETTERS that is not a variable of the item: the same question under
    another name. The text unchanged when it has no variable."""
    found = variables(text)
    if not found:
        return text
    old = rng.choice(found)
    new = rng.choice([c for c in VARIABLE_LETTERS if c not in found])
    return re.sub(rf"(?<![A-Za-z]){old}(?![A-Za-z])", new, text)


# ---------------------------------------------------------------------------------------- paraphrases
# A paraphrase of each MATH_TEMPLATES entry, in the same order: the same question with the same slots,
# worded otherwise (sentence order, synonyms, other syntax); the maths itself and its answer unchanged.
MATH_PARAPHRASES = (
    "What value of x makes {a}x {op} {b} equal to {c}?",
    "Work out {a} {op} the product of {b} and {c}.",
    "Take x = {c}. Find the value of y, given that y = {a}x {op} {b}.",
    "Find the result of {a} times {b} {op} {c}.",
    "After {c} balls are removed from a box containing {a} red and {b} blue ones, how many balls remain "
    "in the box?",
    "Take {c}x away from {a}(x {op} {b}) and simplify the result.",
    "The product of {b} and {c} is equal to n {op} {a}. What is n?",
    "One side of a rectangle measures {b} cm and its perimeter is {a} cm. Find the length of the side "
    "next to it.",
)

# First names of the word problems, with the pronoun each story uses for them.
FIRST_NAMES = (
    ("Maya", "she"),
    ("Liam", "he"),
    ("Sofia", "she"),
    ("Noah", "he"),
    ("Aisha", "she"),
    ("Mateo", "he"),
    ("Hannah", "she"),
    ("Kenji", "he"),
    ("Priya", "she"),
    ("Omar", "he"),
    ("Chloe", "she"),
    ("Lucas", "he"),
    ("Fatima", "she"),
    ("Diego", "he"),
    ("Grace", "she"),
    ("Ethan", "he"),
    ("Leila", "she"),
    ("Samuel", "he"),
    ("Ingrid", "she"),
    ("Tariq", "he"),
    ("Rosa", "she"),
    ("Felix", "he"),
    ("Yuki", "she"),
    ("Marcus", "he"),
    ("Nadia", "she"),
    ("Oliver", "he"),
    ("Elena", "she"),
    ("Kwame", "he"),
    ("Zoe", "she"),
    ("Arjun", "he"),
)
_PRONOUNS = {
    "she": {"sub": "she", "Sub": "She", "obj": "her", "pos": "her", "Pos": "Her"},
    "he": {"sub": "he", "Sub": "He", "obj": "him", "pos": "his", "Pos": "His"},
}

# Word problems in the style of GSM8K (a person, objects, 2-4 numbers). Slots: {name} and its pronouns
# ({sub} she/he, {obj} her/him, {pos} her/his, capitalised {Sub}, {Pos}); {a} a number in [24, 60] and
# {b}, {c}, {d} numbers in [2, 11], all distinct (every story then has a sensible answer). Every number
# slot occurs once.
WORD_TEMPLATES = (
    "{name} bakes {a} cookies and gives {b} of them to {pos} neighbours. How many cookies does {sub} have "
    "left?",
    "{name} has {a} dollars. {Sub} buys a book that costs {b} dollars. How much money does {name} have now?",
    "{name} reads {b} pages of a novel every day. How many pages does {sub} read in {a} days?",
    "{name} is {b} years old. {Pos} grandmother is {a} years older than {obj}. How old is {pos} grandmother?",
    "{name} picks {a} apples on Monday and {b} apples on Tuesday. {Sub} uses {c} apples to make a pie. How "
    "many apples are left?",
    "{name} already has {a} pencils. {Sub} buys {b} packs of pencils with {c} pencils in each pack. How "
    "many pencils does {sub} have now?",
    "{name} runs {b} miles every day for {c} days and then runs {a} more miles on the weekend. How many "
    "miles does {sub} run in total?",
    "There are {a} children in {name}'s class. {b} of them walk to school and {c} ride bikes. The rest come "
    "by bus. How many children take the bus?",
    "{name} has {a} stickers. {Sub} gives {b} stickers to a friend, buys {c} more and then loses {d}. How "
    "many stickers does {sub} have now?",
    "{name} sells {a} cups of lemonade on Saturday and {b} cups on Sunday for {c} dollars each. {Sub} spent "
    "{d} dollars on lemons and sugar. How much profit does {sub} make?",
    "{name} works {b} hours on Monday, {c} hours on Tuesday and {d} hours on Wednesday. {Sub} earns {a} "
    "dollars an hour. How much does {sub} earn over the three days?",
)
# A paraphrase of each WORD_TEMPLATES entry, in the same order: the same story and question, the same
# slots, told otherwise (the events in another order, synonyms: biscuits for cookies, pupils for
# children, glasses for cups, boxes for packs).
WORD_PARAPHRASES = (
    "{name} made a batch of {a} biscuits. {Sub} handed {b} of them to the people next door. How many "
    "biscuits does {sub} still have?",
    "A book is priced at {b} dollars. If {name} pays for it out of the {a} dollars {sub} had, how much "
    "money is left?",
    "Over a period of {a} days, {name} gets through {b} pages of {pos} book each day. What is the total number "
    "of pages {sub} reads?",
    "{name}'s grandmother was born {a} years before {obj}, and {name} is now {b}. What is the grandmother's "
    "age?",
    "To bake a pie, {name} takes {c} apples from the ones {sub} picked this week: {a} on Monday and {b} on "
    "Tuesday. How many apples remain?",
    "Each box of pencils holds {c} pencils, and {name} buys {b} boxes. Before that {sub} owned {a} "
    "pencils. What is the total number of pencils {sub} has?",
    "Over the weekend {name} covers {a} miles, after running {b} miles a day for {c} days. How far does "
    "{sub} run altogether?",
    "In the class of {name}, {c} of the {a} pupils cycle to school, {b} go on foot and everybody else "
    "arrives by bus. How many pupils travel by bus?",
    "Starting with a collection of {a} stickers, {name} loses {d}, gives {b} away to a friend and buys {c} "
    "new ones. How many stickers are left in {pos} collection?",
    "Lemons and sugar cost {name} {d} dollars. Over the weekend {sub} sold lemonade at {c} dollars a glass: "
    "{a} glasses on Saturday and {b} on Sunday. What was {pos} profit?",
    "Paid {a} dollars for every hour, {name} puts in {d} hours on Wednesday, {c} on Tuesday and {b} on "
    "Monday. What are {pos} total earnings for the three days?",
)
_SLOT = re.compile(r"\{(\w+)\}")
NUMBER_SLOTS = ("a", "b", "c", "d")


def slots(template: str) -> set[str]:
    """The slot names of a template (`{a}` -> "a")."""
    return set(_SLOT.findall(template))


def number_slots(template: str) -> tuple[str, ...]:
    """The number slots of a template, in NUMBER_SLOTS order."""
    return tuple(s for s in NUMBER_SLOTS if s in slots(template))


def with_name(values: dict, name: str, pronoun: str) -> dict:
    """`values` with the person `name` and the forms of `pronoun` ("she" / "he") in their slots."""
    return {**values, "name": name, **_PRONOUNS[pronoun]}


def word_values(rng: random.Random) -> dict:
    """The values of one word problem: a first name of FIRST_NAMES with its pronouns, {a} in [24, 60]
    and {b}, {c}, {d} distinct in [2, 11]."""
    name, pronoun = rng.choice(FIRST_NAMES)
    b, c, d = rng.sample(range(2, 12), 3)
    return with_name({"a": rng.randint(24, 60), "b": b, "c": c, "d": d}, name, pronoun)


def fill(template: str, values: dict) -> str:
    """`template` with its slots filled from `values`."""
    return template.format(**values)


def other_name(values: dict, rng: random.Random) -> dict:
    """`values` with another first name of FIRST_NAMES (drawn uniformly) and its pronouns."""
    name, pronoun = rng.choice([p for p in FIRST_NAMES if p[0] != values["name"]])
    return with_name(values, name, pronoun)


def same_values_other_problem(
    index: int, values: dict, templates: Sequence[str], paraphrases: Sequence[str], rng: random.Random
) -> str:
    """The paraphrase of another template (drawn uniformly among those with the same number slots as
    `templates[index]`) filled with the item's values: the same numbers and name, a different problem."""
    want = number_slots(templates[index])
    others = [j for j, t in enumerate(templates) if j != index and number_slots(t) == want]
    return fill(paraphrases[rng.choice(others)], values)


# ---------------------------------------------------------------------- worked solutions, prefixes, key terms
# A worked solution of each WORD_TEMPLATES entry, in GSM8K's form: steps with calculator annotations
# `<<expression=result>>` and a last line `#### answer`. Each entry: (solution template, its results from
# the values); the results fill {r1}, {r2}, ... in order.
WORD_SOLUTIONS = (
    (
        "{name} starts with {a} cookies and gives away {b} of them, so {sub} has {a} - {b} = "
        "<<{a}-{b}={r1}>>{r1} cookies left.\n#### {r1}",
        lambda v: [v["a"] - v["b"]],
    ),
    (
        "The book costs {b} dollars, so {name} has {a} - {b} = <<{a}-{b}={r1}>>{r1} dollars left over "
        "after buying it.\n#### {r1}",
        lambda v: [v["a"] - v["b"]],
    ),
    (
        "{name} reads {b} pages each day for {a} days, which makes {b} * {a} = <<{b}*{a}={r1}>>{r1} pages "
        "read in all.\n#### {r1}",
        lambda v: [v["b"] * v["a"]],
    ),
    (
        "{Pos} grandmother is {a} years older than {name}, who is {b}, so she is {b} + {a} = "
        "<<{b}+{a}={r1}>>{r1} years old.\n#### {r1}",
        lambda v: [v["b"] + v["a"]],
    ),
    (
        "{name} picks {a} + {b} = <<{a}+{b}={r1}>>{r1} apples over the two days. After the pie there are "
        "{r1} - {c} = <<{r1}-{c}={r2}>>{r2} apples left.\n#### {r2}",
        lambda v: [v["a"] + v["b"], v["a"] + v["b"] - v["c"]],
    ),
    (
        "The packs hold {b} * {c} = <<{b}*{c}={r1}>>{r1} pencils. With the ones {sub} already had, {name} "
        "has {a} + {r1} = <<{a}+{r1}={r2}>>{r2} pencils.\n#### {r2}",
        lambda v: [v["b"] * v["c"], v["a"] + v["b"] * v["c"]],
    ),
    (
        "During the week {name} runs {b} * {c} = <<{b}*{c}={r1}>>{r1} miles. Adding the weekend gives {r1} "
        "+ {a} = <<{r1}+{a}={r2}>>{r2} miles in total.\n#### {r2}",
        lambda v: [v["b"] * v["c"], v["b"] * v["c"] + v["a"]],
    ),
    (
        "Walkers and cyclists together are {b} + {c} = <<{b}+{c}={r1}>>{r1} children, so {a} - {r1} = "
        "<<{a}-{r1}={r2}>>{r2} children take the bus.\n#### {r2}",
        lambda v: [v["b"] + v["c"], v["a"] - v["b"] - v["c"]],
    ),
    (
        "After giving some away {name} has {a} - {b} = <<{a}-{b}={r1}>>{r1} stickers, then {r1} + {c} = "
        "<<{r1}+{c}={r2}>>{r2}, and after the loss {r2} - {d} = <<{r2}-{d}={r3}>>{r3} stickers.\n#### {r3}",
        lambda v: [v["a"] - v["b"], v["a"] - v["b"] + v["c"], v["a"] - v["b"] + v["c"] - v["d"]],
    ),
    (
        "{name} sells {a} + {b} = <<{a}+{b}={r1}>>{r1} cups, earning {r1} * {c} = <<{r1}*{c}={r2}>>{r2} "
        "dollars. The profit is {r2} - {d} = <<{r2}-{d}={r3}>>{r3} dollars.\n#### {r3}",
        lambda v: [
            v["a"] + v["b"],
            (v["a"] + v["b"]) * v["c"],
            (v["a"] + v["b"]) * v["c"] - v["d"],
        ],
    ),
    (
        "{name} works {b} + {c} + {d} = <<{b}+{c}+{d}={r1}>>{r1} hours, so {sub} earns {r1} * {a} = "
        "<<{r1}*{a}={r2}>>{r2} dollars.\n#### {r2}",
        lambda v: [v["b"] + v["c"] + v["d"], (v["b"] + v["c"] + v["d"]) * v["a"]],
    ),
)
_ANNOTATION = re.compile(r"<<[^<>]*>>")


def word_solution(index: int, values: dict) -> str:
    """The GSM8K-form worked solution of WORD_TEMPLATES[index] for `values` (annotations and `####`)."""
    template, results = WORD_SOLUTIONS[index]
    return template.format(**values, **{f"r{i + 1}": r for i, r in enumerate(results(values))})


def page_solution(solution: str, rng: random.Random | None = None) -> str:
    """A worked solution as a page shows it: the calculator annotations gone, `#### N` as a last sentence."""
    text = _ANNOTATION.sub("", solution)
    return re.sub(r"\n#### (\S+)$", r" The answer is \1.", text)


def reword(text: str, rng: random.Random, every: int = 10) -> str:
    """One word edit per `every` words (at least one): a common word substituted, inserted, or a word
    dropped, at distinct words that hold no digit or operator, as `short_edit` makes them."""
    toks = text.split()
    spots = [i for i, t in enumerate(toks) if _plain(t)]
    picks = sorted(rng.sample(spots, min(max(1, len(toks) // every), len(spots))), reverse=True)
    for i in picks:
        kind = rng.choice(("substitute", "insert", "drop"))
        lead, core, trail = _CORE.match(toks[i]).groups()
        if kind == "substitute":
            toks[i] = lead + _replacement(core or toks[i], rng) + trail
        elif kind == "insert":
            toks.insert(i, rng.choice(COMMON_WORDS))
        else:
            del toks[i]
    return " ".join(toks)


def long_prefix(text: str, rng: random.Random | None = None, words: int = 13) -> str:
    """The item's text up to its `words`-th word (a whitespace run holding a letter or digit: a lone
    "." is no word to a reader) alone; the page goes on with text of its own."""
    spans = [m for m in _TOKEN.finditer(text) if re.search(r"[A-Za-z0-9]", m.group())]
    return text[: spans[words - 1].end()] if len(spans) >= words else text


# Specialised terms: what a question about another thing names in a key term's place.
KEY_TERMS = (
    "eigenvalue",
    "isotope",
    "allele",
    "lanthanide",
    "chromatography",
    "ferromagnetism",
    "endosymbiosis",
    "heterozygote",
    "perihelion",
    "stalactite",
    "cytokinesis",
    "ionosphere",
    "permafrost",
    "catalysis",
    "sedimentation",
)


def key_term(text: str) -> int | None:
    """The index of the item's key term: its longest plain word of six or more letters that is no
    common word (COMMON_WORDS), the first of equal length; None when it has none."""
    toks = text.split()
    best = None
    for i, t in enumerate(toks):
        core = _CORE.match(t).group(2)
        if core.isalpha() and len(core) >= 6 and core.lower() not in COMMON_WORDS:
            if best is None or len(core) > len(_CORE.match(toks[best]).group(2)):
                best = i
    return best


def key_term_replaced(text: str, rng: random.Random) -> str:
    """The item with its key term (`key_term`) replaced by a specialised term of KEY_TERMS: another
    question, its wording otherwise the same."""
    toks = text.split()
    i = key_term(text)
    lead, core, trail = _CORE.match(toks[i]).groups()
    toks[i] = lead + rng.choice([t for t in KEY_TERMS if t != core.lower()]) + trail
    return " ".join(toks)


# Answers that are common phrases: every QA set has some, and any page may hold one.
_OPENERS = (
    "It is not possible to say for sure",
    "There is no way to know for certain",
    "Nobody can tell with any confidence",
    "We cannot be sure at this point",
    "It would be hard to give an answer",
    "No one is able to say right now",
)
_REASONS = (
    "from the little that we are told here.",
    "with only the facts that are given above.",
    "without knowing a lot more about the situation.",
    "based on what has been said so far.",
    "until more of the details become clear to us.",
    "because so much of it depends on other things.",
)
COMMON_ANSWERS = tuple(f"{o} {r}" for o in _OPENERS for r in _REASONS)

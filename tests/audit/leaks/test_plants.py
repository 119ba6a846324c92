"""olmax/testing/leak_plants.py, the calibration's plant generator: each transformation does what it says on a
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

from olmax.testing import leak_plants as lp

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
    tree = ast.parse(Path(lp.__file__).read_text())
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


# ------------------------------------------------------------------------------------------ answer side
CONTEXT = (
    "A woman is kneeling beside a flower bed in her garden. She digs a small hole with a trowel and "
    "takes a seedling out of its pot. she"
)
GOLD = "sets the seedling in the hole, presses the soil around it and waters it from a can."
CHOICES = [
    "is then shown riding a bicycle along a beach while waving to the camera.",
    GOLD,
    "puts the pot on her head and dances around the garden with a large umbrella.",
    "eats.",
]


@pytest.mark.parametrize("seed", SEEDS)
def test_context_end_is_the_last_5_to_10_words_of_the_context(seed):
    ws = CONTEXT.split()
    out = lp.context_end(CONTEXT, random.Random(seed)).split()
    assert 5 <= len(out) <= 10 and out == ws[len(ws) - len(out) :]
    assert lp.context_end("Melt the butter.", random.Random(seed)) == "Melt the butter."  # shorter: whole
    short = lp.context_end(CONTEXT, random.Random(seed), longest=6).split()
    assert 5 <= len(short) <= 6


def test_context_end_draws_its_length():
    assert len({len(lp.context_end(CONTEXT, random.Random(s)).split()) for s in SEEDS}) > 2


@pytest.mark.parametrize("seed", SEEDS)
def test_answer_alone_and_context_end_answer_hold_the_gold_answer(seed):
    assert lp.answer_alone("  " + GOLD + " ") == GOLD
    out = lp.context_end_answer(CONTEXT, GOLD, random.Random(seed))
    assert out.endswith(" " + GOLD)
    end = out[: -len(GOLD) - 1]
    assert end == lp.context_end(CONTEXT, random.Random(seed))
    assert 5 <= len(end.split()) <= 10 and CONTEXT.endswith(end)


@pytest.mark.parametrize("seed", SEEDS)
def test_wrong_ending_is_a_short_context_end_and_a_distractor_never_the_gold(seed):
    out = lp.wrong_ending(CONTEXT, CHOICES, 1, random.Random(seed))
    tails = [w for w in CHOICES if w != GOLD and out.endswith(" " + w)]
    assert len(tails) == 1 and GOLD not in out
    end = out[: -len(tails[0]) - 1]
    assert CONTEXT.endswith(end) and 5 <= len(end.split()) <= min(10, len(CONTEXT.split()) // 2)
    assert lp.wrong_ending(CONTEXT, CHOICES, 1, random.Random(seed)) == out


def test_wrong_ending_keeps_the_context_end_at_most_half_the_context():
    context = "How do I keep the sliced apples from browning in the lunch box"  # 13 words: ends of 5-6
    choices = ["Dip the slices in lemon juice.", "Dip the slices in lemon zest."]  # a PIQA-like pair
    for s in range(30):
        out = lp.wrong_ending(context, choices, 0, random.Random(s))
        assert out.endswith(" Dip the slices in lemon zest.")
        assert len(out.split()) - 6 in (5, 6)


@pytest.mark.parametrize("seed", SEEDS)
def test_wrong_ending_alone_is_a_long_distractor(seed):
    out = lp.wrong_ending_alone(CHOICES, 1, random.Random(seed))
    assert out in CHOICES and out != GOLD and len(out.split()) >= 10
    assert {lp.wrong_ending_alone(CHOICES, 1, random.Random(s)) for s in SEEDS} == {CHOICES[0], CHOICES[2]}


def test_wrong_choices_leave_out_the_gold_and_its_duplicates():
    assert lp.wrong_choices(["a b", "c d", " a b "], 0) == ["c d"]


def test_completion_parts_read_hellaswag_piqa_and_copa_records():
    hs = {"ctx": CONTEXT, "endings": CHOICES, "label": "1", "ind": 7}
    piqa = {"goal": "Keep apples from browning.", "sol1": "Use lemon juice.", "sol2": "Use salt.", "label": 0}
    copa = {"premise": "The man fell.", "choice1": "He slipped.", "choice2": "He sang.", "label": 0, "idx": 3}
    assert lp.completion_parts("hellaswag", hs) == (CONTEXT, CHOICES, 1)
    assert lp.completion_parts("piqa", piqa) == (
        "Keep apples from browning.",
        ["Use lemon juice.", "Use salt."],
        0,
    )
    assert lp.completion_parts("copa", copa) == ("The man fell.", ["He slipped.", "He sang."], 0)
    assert lp.completion_parts("piqa", {**piqa, "label": -1}) is None
    assert lp.completion_parts("hellaswag", {**hs, "label": ""}) is None
    with pytest.raises(ValueError):
        lp.completion_parts("boolq", hs)


# ----------------------------------------------------------------------------------- renamed variable
SAMPLE = {"a": 12, "b": 7, "c": 30, "op": "-"}


def test_variables_are_lone_letters_not_articles_or_letters_of_words():
    assert lp.variables("If y = 3x + 2, what is y when x = 4?") == ["y", "x"]
    assert lp.variables("A box holds a red ball; simplify 2(n - 1) in the expression.") == ["n"]
    assert lp.variables("What is the value of 3 + 4 * 5?") == []


@pytest.mark.parametrize("seed", SEEDS)
def test_rename_variable_renames_one_variable_consistently(seed):
    for template in lp.MATH_TEMPLATES:
        text = lp.fill(template, SAMPLE)
        found = lp.variables(text)
        out = lp.rename_variable(text, random.Random(seed))
        if not found:
            assert out == text
            continue
        assert out != text and len(out) == len(text)
        diff = {(a, b) for a, b in zip(text, out) if a != b}
        assert len(diff) == 1  # one letter replaced by one other letter, wherever it stands
        old, new = diff.pop()
        assert old in found and new in lp.VARIABLE_LETTERS and new not in found
        assert out == re.sub(rf"(?<![A-Za-z]){old}(?![A-Za-z])", new, text)
        assert old not in lp.variables(out) and out.split()[0] == text.split()[0]  # words untouched
        assert lp.rename_variable(text, random.Random(seed)) == out


def test_rename_variable_draws_the_letter():
    text = lp.fill(lp.MATH_TEMPLATES[0], SAMPLE)
    assert len({lp.rename_variable(text, random.Random(s)) for s in SEEDS}) > 3


# ---------------------------------------------------------------------------------------- paraphrases
FAMILIES = {
    "math": (lp.MATH_TEMPLATES, lp.MATH_PARAPHRASES, lp.math_values),
    "word": (lp.WORD_TEMPLATES, lp.WORD_PARAPHRASES, lp.word_values),
}


def _numbers(text: str) -> list[str]:
    return re.findall(r"\d+", text)


def _runs(text: str, k: int = 5) -> set[tuple[str, ...]]:
    ws = text.lower().split()
    return {tuple(ws[i : i + k]) for i in range(len(ws) - k + 1)}


def test_word_templates_are_many_with_2_to_4_numbers_and_a_name():
    assert len(lp.WORD_TEMPLATES) >= 8 and len(lp.WORD_PARAPHRASES) == len(lp.WORD_TEMPLATES)
    assert len(lp.MATH_PARAPHRASES) == len(lp.MATH_TEMPLATES)
    for t in lp.WORD_TEMPLATES:
        assert "{name}" in t and 2 <= len(lp.number_slots(t)) <= 4, t
    assert len({n for n, _ in lp.FIRST_NAMES}) == len(lp.FIRST_NAMES) >= 20


@pytest.mark.parametrize("family", FAMILIES)
def test_every_template_has_a_paraphrase_with_the_same_slots_and_other_wording(family):
    templates, paraphrases, draw = FAMILIES[family]
    for t, p in zip(templates, paraphrases):
        assert lp.number_slots(t) == lp.number_slots(p), (t, p)
        assert ("{op}" in t) == ("{op}" in p) and ("{name}" in t) == ("{name}" in p), (t, p)
        for slot in lp.number_slots(t):  # every number slot once: a number names one quantity
            assert t.count("{" + slot + "}") == p.count("{" + slot + "}") == 1, (slot, t, p)
        for seed in SEEDS:
            values = draw(random.Random(seed))
            item, para = lp.fill(t, values), lp.fill(p, values)
            assert sorted(_numbers(item)) == sorted(_numbers(para)), (item, para)
            if "{op}" in t:  # the operator kept as a symbol (a fixed minus may be said in words)
                assert f" {values['op']} " in para, (item, para)
            if family == "word":
                assert values["name"] in item and values["name"] in para
            assert not _runs(item) & _runs(para), (item, para)  # no 5-word run in common


@pytest.mark.parametrize("seed", SEEDS)
def test_word_values_are_a_name_with_its_pronouns_and_distinct_numbers(seed):
    v = lp.word_values(random.Random(seed))
    assert (v["name"], "she" if v["sub"] == "she" else "he") in lp.FIRST_NAMES
    assert {v["sub"], v["obj"], v["pos"]} in ({"she", "her"}, {"he", "him", "his"})
    assert v["Sub"] == v["sub"].capitalize() and v["Pos"] == v["pos"].capitalize()
    assert 24 <= v["a"] <= 60 and all(2 <= v[k] <= 11 for k in "bcd")
    assert len({v[k] for k in "abcd"}) == 4
    assert lp.word_values(random.Random(seed)) == v


@pytest.mark.parametrize("seed", SEEDS)
def test_paraphrase_other_number_changes_one_number_of_the_paraphrase(seed):
    rng = random.Random(seed)
    for templates, paraphrases, draw in FAMILIES.values():
        for t in range(len(templates)):
            values = draw(rng)
            para = lp.fill(paraphrases[t], values)
            out = lp.other_number(para, rng)
            before, after = _numbers(para), _numbers(out)
            assert len(before) == len(after) and sum(a != b for a, b in zip(before, after)) == 1, (para, out)
            assert re.sub(r"\d+", "#", out) == re.sub(r"\d+", "#", para)  # only the number changed


@pytest.mark.parametrize("seed", SEEDS)
def test_paraphrase_sign_flip_flips_one_sign_of_the_paraphrase(seed):
    rng = random.Random(seed)
    for p in lp.MATH_PARAPHRASES:
        para = lp.fill(p, lp.math_values(rng))
        out = lp.sign_flip(para, rng)
        if not re.search(r" [-+] ", para):
            assert out == para
            continue
        diff = [(a, b) for a, b in zip(para, out) if a != b]
        assert len(out) == len(para) and len(diff) == 1 and set(diff[0]) == {"+", "-"}, (para, out)


@pytest.mark.parametrize("seed", SEEDS)
def test_paraphrase_other_name_keeps_the_numbers_and_changes_the_name(seed):
    rng = random.Random(seed)
    for t, p in enumerate(lp.WORD_PARAPHRASES):
        values = lp.word_values(rng)
        other = lp.other_name(values, rng)
        assert other["name"] != values["name"] and (other["name"], other["sub"]) in lp.FIRST_NAMES
        assert all(other[k] == values[k] for k in "abcd")
        item, out = lp.fill(lp.WORD_TEMPLATES[t], values), lp.fill(p, other)
        assert sorted(_numbers(out)) == sorted(_numbers(item))
        assert other["name"] in out and values["name"] not in out


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_same_values_other_problem_puts_the_values_into_another_problem(family, seed):
    templates, paraphrases, draw = FAMILIES[family]
    rng = random.Random(seed)
    for t, template in enumerate(templates):
        if sum(lp.number_slots(u) == lp.number_slots(template) for u in templates) < 2:
            continue  # no other template with these number slots
        values = draw(rng)
        item = lp.fill(template, values)
        out = lp.same_values_other_problem(t, values, templates, paraphrases, rng)
        others = [j for j, p in enumerate(paraphrases) if j != t and lp.fill(p, values) == out]
        assert others and lp.number_slots(templates[others[0]]) == lp.number_slots(template)
        assert out != lp.fill(paraphrases[t], values)
        assert sorted(_numbers(out)) == sorted(_numbers(item))
        if family == "word":
            assert values["name"] in out


def test_new_transforms_are_deterministic_per_seed():
    values = lp.word_values(random.Random(1))
    calls = {
        "context_end_answer": lambda r: lp.context_end_answer(CONTEXT, GOLD, r),
        "wrong_ending": lambda r: lp.wrong_ending(CONTEXT, CHOICES, 1, r),
        "rename_variable": lambda r: lp.rename_variable(lp.fill(lp.MATH_TEMPLATES[2], SAMPLE), r),
        "word_values": lp.word_values,
        "math_values": lp.math_values,
        "other_name": lambda r: lp.other_name(values, r),
        "same_values_other_problem": lambda r: lp.same_values_other_problem(
            0, values, lp.WORD_TEMPLATES, lp.WORD_PARAPHRASES, r
        ),
    }
    for name, fn in calls.items():
        assert fn(random.Random(7)) == fn(random.Random(7)), name
        assert len({repr(fn(random.Random(s))) for s in range(12)}) > 1, name


def test_math_item_draws_what_it_drew_before_math_values():
    """math_item fills from math_values with the same draws in the same order: the maths kinds planted
    before the paraphrase kinds keep their questions."""
    rng = random.Random(3)
    a, b, c = rng.sample(range(2, 61), 3)
    op = rng.choice("+-")
    assert lp.math_item(lp.MATH_TEMPLATES[0], random.Random(3)) == lp.MATH_TEMPLATES[0].format(
        a=a, b=b, c=c, op=op
    )

"""The leak audit's rules for short items and symbols: the text check's tokens (numbers and operators
kept, written-out forms read as symbols), its placement (edits, and the number or operator that stands
where the document has another one), and on planted prose: a short item with a word changed found, a
sign flip or another number not a copy, a copy with written-out operators found."""

from __future__ import annotations

import pytest

from olmax.audit.leaks.align import text_check
from olmax.audit.leaks.normalize import NUMBER, OPERATOR, WORD, text_tokens
from olmax.audit.leaks.run import LeakConfig, audit_leaks
from olmax.data.stream import StreamSpec
from tests.audit.audit_testdata import planted_prose_mix, write_records


def test_text_tokens_keep_numbers_and_operators_and_read_written_forms_as_symbols():
    toks, cls = text_tokens(
        "Solve 3x \u2212 7 = 11; 20 minus five equals fifteen, 6 times 4 is equal to twenty-four"
    )
    assert toks == [
        "solve",
        "3",
        "x",
        "-",
        "7",
        "=",
        "11",
        "20",
        "-",
        "5",
        "=",
        "15",
        "6",
        "*",
        "4",
        "=",
        "24",
    ]
    assert cls[:4] == [WORD, NUMBER, WORD, OPERATOR]
    # a hyphen between letters is no operator; markup and entities go; compatibility forms fold
    assert text_tokens('<p class="q">well-known x-ray</p> &amp; 1,000 \uff15')[0] == [
        "well",
        "known",
        "x",
        "ray",
        "1000",
        "5",
    ]
    assert text_tokens("divided by")[0] == ["/"] and text_tokens("multiplied by")[0] == ["*"]


@pytest.mark.parametrize(
    "doc, edits, conflict",
    [
        ("notes: Solve 3x - 7 = 11 for x. next", 0, ""),
        ("notes: Solve 3x + 7 = 11 for x. next", 1, "'-' vs '+'"),  # a sign flip
        ("notes: Solve 3x - 8 = 11 for x. next", 1, "'7' vs '8'"),  # another number
        ("notes: Solve 3x - 7 = 12 for x.", 1, "'11' vs '12'"),
        ("Solve 3x minus 7 equals 11 for x", 0, ""),  # written out
        ("notes: Find 3x - 7 = 11 for x.", 1, ""),  # a word changed: an edit
        ("notes: Solve 3x - 7 = for x.", 1, ""),  # a number dropped: an edit, not a conflict
        ("notes: Solve 3x - about = 11 for x.", 1, ""),  # a number replaced by a word
    ],
)
def test_text_check_edits_and_conflicts(doc, edits, conflict):
    got = text_check(text_tokens("Solve 3x - 7 = 11 for x."), text_tokens(doc))
    assert got[1] == conflict and (conflict or got[0] == edits), got


def test_a_cut_item_is_not_a_conflict_with_the_text_beside_it():
    # the item's first words are missing; the document has other numbers there (code): no conflict
    item = text_tokens("In 1898 the ship left port 30 days after the war began and reached the coast.")
    region = text_tokens("x = 12; y = 7\nleft port 30 days after the war began and reached the coast. z = 4")
    assert text_check(item, region)[1] == ""
    # ... while a changed last number (an unmatched end of one token) is one
    assert text_check(text_tokens("What is 5 + 3?"), text_tokens("What is 5 + 4? Then 12 apples")) == (
        1,
        "'3' vs '4'",
    )


@pytest.fixture(scope="module")
def planted(tokenizer, tmp_path_factory, corpus):
    root = tmp_path_factory.mktemp("rules")
    items = {
        "edit": "Which organ of the human body filters the blood and produces the urine?",
        "flip": "Solve for x in the equation 14x - 23 = 61 and check the answer.",
        "number": "What is the value of 17 + 38 * 4 when you work it out by hand?",
        "spoken": "A tank holds 45 litres; if 9 + 6 = 15 litres leak out, how much is left?",
        "clean": "Name the gas that green plants take in from the air during photosynthesis today.",
    }
    plants = {
        "edit": "Which organ of the human body cleans the blood and produces the urine?",
        "flip": "Solve for x in the equation 14x + 23 = 61 and check the answer.",
        "number": "What is the value of 17 + 39 * 4 when you work it out by hand?",
        "spoken": "A tank holds 45 litres; if 9 plus 6 equals 15 litres leak out, how much is left?",
    }
    mix = planted_prose_mix(tokenizer, corpus, root, list(plants.values()))
    ev = write_records(root / "q.jsonl", [{"id": k, "text": v} for k, v in items.items()])
    return audit_leaks(LeakConfig(StreamSpec(mix=mix), evals=(f"q={ev}",)))


def test_short_edited_items_are_found_and_changed_numbers_are_not(planted):
    found = {c["id"]: c for c in planted["contaminated"]}
    assert set(found) == {"edit", "spoken"}
    assert found["edit"]["kind"] == "short" and found["edit"]["documents"][0]["text_edits"] == 1
    assert found["spoken"]["documents"][0]["text_edits"] == 0
    near = {c["id"]: c for c in planted["near_misses"]}
    assert near["flip"]["documents"][0]["not_a_copy"] == "'-' vs '+'"
    assert near["number"]["documents"][0]["not_a_copy"] == "'38' vs '39'"
    assert near["flip"]["score"] == 0.0 and near["flip"]["documents"][0]["aligned_score"] > 0.9
    assert set(planted["normalization"]) == {"words", "text_check"}

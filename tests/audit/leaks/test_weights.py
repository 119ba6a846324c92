"""Edits weighed by what they change: the vocabulary's ranks as the background table, a changed function
word half an edit, a key term of a short item replaced by a rare one a conflict that names it, a five-word
item with one cheap edit still a copy."""

from __future__ import annotations

import pytest

from olmax.audit.audit_config import LeakConfig
from olmax.audit.leaks.align import text_check
from olmax.audit.leaks.eval_side import short_allowed
from olmax.audit.leaks.normalize import text_tokens, word_tables
from olmax.audit.leaks.weights import CHEAP_EDIT, VALUE_EDIT, is_common, is_specific
from olmax.data.stream import StreamSpec


@pytest.fixture(scope="module")
def ranks():
    from olmax.assets import tokenizer_path

    return word_tables(str(tokenizer_path("dolma2", quiet=True))).ranks


def test_the_vocabulary_ranks_tell_common_specific_and_rare_words(ranks):
    assert is_common("the", ranks) and is_common("which", ranks) and not is_common("not", ranks)
    assert not is_common("field", ranks) and is_specific("mitochondria", ranks) and is_specific("18", ranks)
    assert (
        is_specific("eigenvalue", ranks) and not is_specific("field", ranks) and not is_specific("7", ranks)
    )
    assert not is_specific("confidence", ranks) and not is_specific("moon", ranks)


def test_a_common_word_changed_is_half_an_edit_and_a_key_term_replaced_is_named(ranks):
    item = text_tokens("Prove that the set of rational numbers is a field under addition.")

    def check(doc: str, key_terms: bool = False) -> tuple[float, str]:
        return text_check(item, text_tokens(doc), ranks, key_terms)

    assert check("Prove that a set of rational numbers is a field under addition.") == (CHEAP_EDIT, "")
    assert check("Prove that the set of real numbers is a field under addition.") == (1, "")
    replaced = "Prove that the set of rational numbers is a semiring under addition."
    assert check(replaced, key_terms=True)[1] == "'field' replaced by 'semiring'"
    # outside short units the key term is not read, and a misspelling is no other term
    assert check(replaced) == (1, "")
    assert check("Prove that the set of rationnal numbers is a field under addition.", True)[1] == ""


def test_a_key_term_at_the_items_edge_counts_only_on_the_copys_line(ranks):
    last = text_tokens("Prove that the set of rational numbers is a field")
    edge = "Prove that the set of rational numbers is a semiring"
    assert text_check(last, text_tokens(edge), ranks, True)[1] == ""  # no layout: a cut copy, maybe
    assert text_check(last, text_tokens(edge, lines=True), ranks, True)[1] == "'field' replaced by 'semiring'"
    cut = text_tokens(edge.replace(" semiring", "\nsemiring"), lines=True)
    assert text_check(last, cut, ranks, True)[1] == ""


def test_five_and_six_word_items_carry_one_cheap_edit_and_four_word_ones_none():
    cfg = LeakConfig(StreamSpec(mix="m"), evals=())
    assert short_allowed(4, cfg) == 0 and short_allowed(5, cfg) == short_allowed(6, cfg) == CHEAP_EDIT
    assert short_allowed(7, cfg) == 1 and short_allowed(14, cfg) == 2 and short_allowed(30, cfg) == 2


def test_a_number_changed_beside_dropped_words_costs_a_changed_value(ranks):
    # the words around 24 are dropped, so the text check cannot hold it in place as a conflict: the
    # changed value still costs more than two cheap edits and the number's own edit
    item = text_tokens(
        "The perimeter of a rectangle is 24 cm and one side is 2 cm. How long is the other side?"
    )
    doc = text_tokens("The perimeter a rectangle 33 cm and one side is 2 cm. How long is the other side?")
    assert text_check(item, doc, ranks) == (2 * CHEAP_EDIT + VALUE_EDIT, "")

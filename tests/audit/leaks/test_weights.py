"""Edits weighed by what they change: the vocabulary's ranks as the background table, a changed function
word half an edit, a key term of a short item replaced by a rare one a conflict that names it, a five-word
item with one cheap edit still a copy."""

from __future__ import annotations

import pytest

from olmax.audit.config import LeakConfig
from olmax.audit.leaks.align import text_check
from olmax.audit.leaks.eval_side import short_allowed
from olmax.audit.leaks.normalize import text_tokens, word_tables
from olmax.audit.leaks.weights import CHEAP_EDIT, is_common, is_rare, is_specific
from olmax.data.stream import StreamSpec


@pytest.fixture(scope="module")
def ranks():
    from olmax.assets import tokenizer_path

    return word_tables(str(tokenizer_path("dolma2", quiet=True))).ranks


def test_the_vocabulary_ranks_tell_common_specific_and_rare_words(ranks):
    assert is_common("the", ranks) and is_common("which", ranks) and not is_common("not", ranks)
    assert not is_common("field", ranks) and is_specific("mitochondria", ranks) and is_specific("18", ranks)
    assert is_rare("eigenvalue", ranks) and not is_rare("field", ranks) and not is_specific("7", ranks)


def test_a_common_word_changed_is_half_an_edit_and_a_key_term_replaced_is_named(ranks):
    item = text_tokens("Prove that the set of rational numbers is a field.")
    assert text_check(item, text_tokens("Prove that a set of rational numbers is a field."), ranks) == (
        CHEAP_EDIT,
        "",
    )
    assert text_check(item, text_tokens("Prove that the set of real numbers is a field."), ranks)[0] == 1
    edits, conflict = text_check(
        item, text_tokens("Prove that the set of rational numbers is a semiring."), ranks, key_terms=True
    )
    assert conflict == "'field' replaced by 'semiring'"
    # a misspelling is no other term, and outside short units the key term is not read
    assert (
        text_check(item, text_tokens("Prove that the set of rationnal numbers is a field."), ranks, True)[1]
        == ""
    )
    assert (
        text_check(item, text_tokens("Prove that the set of rational numbers is a semiring."), ranks)[1] == ""
    )


def test_five_and_six_word_items_carry_one_cheap_edit_and_four_word_ones_none():
    cfg = LeakConfig(StreamSpec(mix="m"), evals=())
    assert short_allowed(4, cfg) == 0 and short_allowed(5, cfg) == short_allowed(6, cfg) == CHEAP_EDIT
    assert short_allowed(7, cfg) == 1 and short_allowed(14, cfg) == 2 and short_allowed(30, cfg) == 2

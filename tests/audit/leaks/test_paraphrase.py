"""Paraphrase candidates (olmax/audit/leaks/paraphrase.py): names, signatures and the window rule on text; the
pair probe against a plain reading of it; and on planted prose: a paraphrase reported apart (never
counted as contaminated), a paraphrase with a number changed, a sign flipped or another name not
reported, and an item found as a copy not reported again as a paraphrase."""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest

from olmax.audit.leaks.normalize import word_tables
from olmax.audit.leaks.paraphrase import (
    MAX_NEXT,
    PAIR_WINDOW,
    ParaphraseIndex,
    Signature,
    check,
    glued_tokens,
    names_of,
    retrieval_words,
    signature,
    starts_sentence,
)
from olmax.audit.leaks.run import LeakConfig, audit_leaks
from olmax.data.stream import StreamSpec
from tests.audit.audit_testdata import planted_prose_mix, tokenize_docs, write_mix, write_records, write_shard

ITEM = "Natalia sold clips to 48 of her friends in April, and then she sold 24 clips in May. How many clips did Natalia sell?"
PARAPHRASE = (
    "In April Natalia sold 48 clips to friends; in May she managed 24 more clips. What was her clip total?"
)


def test_starts_sentence_reads_the_prefix_as_the_sentence_rule_does() -> None:
    # the rule as a regex over everything before the word; starts_sentence looks back over whitespace only
    rule = re.compile(r"(?:^|[.!?:;]\s+|\n\s*)$")
    rng = random.Random(7)
    alphabet = "ab .!?:;,\n\t\u00a0\u2028X"
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        at = rng.randint(0, len(text))
        assert starts_sentence(text, at) == bool(rule.search(text[:at])), (text, at)
    assert starts_sentence("Bob met Ann. Then", 13) and not starts_sentence("Bob met Ann", 8)
    assert starts_sentence("end\n  Next", 6) and not starts_sentence("  Lead", 2)


def _tables():
    from olmax.assets import tokenizer_path

    return word_tables(str(tokenizer_path("dolma2", quiet=True)))


def test_names_are_capitalised_words_the_eval_side_does_not_write_in_lower_case(tokenizer):
    texts = [ITEM, "What is the capital of France? The answer is Paris.", "Find the value of x. then find y."]
    names = names_of(texts, tokenizer)
    assert {"natalia", "april", "may", "france", "paris"} <= names
    assert not {"how", "what", "the", "find", "in"} & names  # sentence starts, common words


def test_a_signature_keeps_numbers_names_operators_and_rare_words(tokenizer):
    sig = signature(ITEM, names_of([ITEM], tokenizer))
    assert sig.numbers == ("24", "48") and sig.names == ("april", "may", "natalia")
    assert sig.operators == () and "clips" in sig.stems and "sold" in sig.stems
    assert sig.usable and retrieval_words(sig) == ["april", "may", "natalia", "24", "48"]
    maths = signature("If y = 59x - 18, what is y when x = 29?", set())
    assert maths.numbers == ("18", "29", "59xvar") and maths.operators == ("-", "=", "=")
    # a number with its variable stays one number: 59x is not 59, and 59y is 59x
    assert glued_tokens("59x + 1")[0] == ("59xvar", "+", "1") == glued_tokens("59y + 1")[0]
    assert not signature("Which of 21, 22 or 23?", set()).usable  # numbers alone: any list of numbers


@pytest.mark.parametrize(
    "text, found",
    [
        (PARAPHRASE, True),
        ("In April Natalia sold 47 clips to friends; in May she managed 24 more clips.", False),  # a number
        ("In April Maria sold 48 clips to friends; in May she managed 24 more clips.", False),  # a name
        ("In April Natalia sold 48 clips, 12 pins and 24 more clips in May.", False),  # another number
        ("april 10, 24, 48, may 60 natalia", False),  # a list of numbers
        (
            "Natalia, April 48 and May 24: the weather was fine all spring long that year.",
            False,
        ),  # no rare word
    ],
)
def test_the_window_rule(tokenizer, text, found):
    sig = signature(ITEM, names_of([ITEM], tokenizer))
    got = check(sig, glued_tokens(f"Some text before. {text} And text after."))
    assert (got is not None) == found, got
    if found:
        assert 0 < got[0] <= 1


def test_a_flipped_sign_or_a_lost_operator_is_another_problem():
    sig = signature("What is the value of 14 + 37 * 31?", set())
    assert check(sig, glued_tokens("Work out 14 + the product of 37 and 31.")) is not None
    assert check(sig, glued_tokens("Work out 14 - the product of 37 and 31.")) is None  # sign flipped
    assert check(sig, glued_tokens("After 31 balls of 37 are removed, 14 remain.")) is None  # no operator


def test_the_pair_probe_equals_a_plain_reading(tokenizer):
    tables = _tables()
    items = [
        (0, signature(ITEM, names_of([ITEM], tokenizer))),
        (1, signature("Compute 12 * 35 + 7 now.", set())),
    ]
    para = ParaphraseIndex(items, tokenizer, tables, window=PAIR_WINDOW, max_items_per_key=10)
    text = "x " * 30 + "Natalia had 48 pens and 24 clips. " + "y " * 80 + "So 12 times 35 plus 7." + " May"
    words, _, _ = tables.packed_words(np.asarray(tokenizer.encode_batch([text])[0], dtype=np.int64))
    keys, first = para.probe(words, 0)
    got = sorted(set(zip(para.rec_item[para.rec_ptr[keys]].tolist(), first.tolist())))
    # plainly: each word that is a retrieval word of some item, with each of the next MAX_NEXT such words
    # within the window, when both are the same item's, by the first one's place
    want = set()
    marked = {int(v): i for i, s in items for v in [para.value[w] for w in retrieval_words(s)]}
    spots = [(p, int(v)) for p, v in enumerate(words.tolist()) if int(v) in marked]
    for j, (p, v) in enumerate(spots):
        for q, u in spots[j + 1 : j + 1 + MAX_NEXT]:
            if v != u and q - p <= PAIR_WINDOW and marked[v] == marked[u]:
                want.add((marked[v], p))
    assert got == sorted(want) and {i for i, _ in got} == {0, 1}


@pytest.fixture(scope="module")
def planted(tokenizer, tmp_path_factory, corpus):
    root = tmp_path_factory.mktemp("paraphrase")
    items = {
        "para": ITEM,
        "number": "Omar packs 36 boxes on Monday and 52 boxes on Tuesday. How many boxes did Omar pack?",
        "name": "Leila reads 45 pages on Saturday and 27 pages on Sunday. How many pages did Leila read?",
        "copy": "Kwame bakes 64 muffins and sells 38 of them at the market. How many muffins are left?",
    }
    plants = {
        "para": PARAPHRASE,
        "number": "On Monday Omar packed 36 boxes, and on Tuesday another 51 boxes. Total boxes packed?",
        "name": "On Saturday Rosa read 45 pages and on Sunday 27 more pages. How many pages in all?",
        "copy": items["copy"],
    }
    mix = planted_prose_mix(tokenizer, corpus, root, list(plants.values()), at=700)
    ev = write_records(root / "problems.jsonl", [{"id": k, "text": v} for k, v in items.items()])
    return audit_leaks(LeakConfig(StreamSpec(mix=mix), evals=(f"problems={ev}",)))


def test_a_paraphrase_is_reported_apart_and_never_counted(planted):
    assert [c["id"] for c in planted["contaminated"]] == ["copy"]
    para = {e["id"]: e for e in planted["paraphrase_candidates"]}
    assert set(para) == {"para"}, para
    e = para["para"]
    assert e["signature"]["numbers"] == ["24", "48"] and "natalia" in e["signature"]["names"]
    assert e["n_documents"] == 1 and 0 < e["score"] <= 1
    doc = e["documents"][0]
    assert doc["token_start"] < doc["token_end"] and doc["source"] == "prose"
    s = planted["sets"]["problems"]
    assert s["contaminated"] == 1 and s["paraphrase_candidates"] == 1 and planted["ok"] is False
    assert "paraphrase candidates" in planted["rule"]
    assert any("paraphrase" in line for line in planted["summary"])


def test_paraphrases_off(tokenizer, tmp_path, corpus):
    ev = tmp_path / "p.jsonl"
    ev.write_text(json.dumps({"id": "para", "text": ITEM}) + "\n")
    prose = [(i, tokenizer.decode(ids)) for i, ids in corpus["prose"][:3]]
    prose[0] = (prose[0][0], prose[0][1] + "\n" + PARAPHRASE + "\n")
    write_shard(tmp_path / "p.npy", tokenize_docs(tokenizer, prose))
    mix = write_mix(tmp_path / "mix.txt", [("prose", str(tmp_path / "p.npy"))])
    on = audit_leaks(LeakConfig(StreamSpec(mix=mix), evals=(f"p={ev}",)))
    off = audit_leaks(LeakConfig(StreamSpec(mix=mix), evals=(f"p={ev}",), paraphrases=False))
    assert [e["id"] for e in on["paraphrase_candidates"]] == ["para"]
    assert off["paraphrase_candidates"] == [] and "paraphrase candidates" not in off["rule"]
    assert on["ok"] and on["contaminated"] == []  # a paraphrase never fails the gate


def test_signature_is_plain_data():
    s = Signature(("1",), (), (), (), 3)
    assert s.size == 1 and not s.usable

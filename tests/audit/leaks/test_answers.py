"""The leak audit's answer side and templated short items: completion records carry their gold and wrong
continuations, the eval side's units, the exact coverage bar a short item's hits must reach, a templated
item's core runs, a renamed variable as one edit, and on planted prose: the gold answer alone and the
context's end run into it found with their parts, a wrong choice (a PIQA minimal pair) not."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from olmax.audit.leaks.align import text_check
from olmax.audit.leaks.eval_side import ANSWER, CONTEXT, JOIN, answer_units
from olmax.audit.leaks.item_index import EvalIndex
from olmax.audit.leaks.normalize import text_tokens
from olmax.audit.leaks.run import LeakConfig, audit_leaks
from olmax.data.stream import StreamSpec
from olmax.evalsets.read import item_continuation, item_text
from tests.audit.audit_testdata import planted_prose_mix, tokenize_docs, write_mix, write_records, write_shard

HELLASWAG = {
    "ctx": "A man is standing on a ladder against the side of a house. he",
    "endings": [
        "is using wrap to wrap a pair of skis.",
        "starts scraping the old paint off the window frame with a wide putty knife.",
        "is holding a rubik's cube.",
        "jumps into the pool below.",
    ],
    "label": "1",
}
PIQA = {
    "goal": "How do I keep a cast iron pan from rusting after I wash it at night?",
    "sol1": "Dry the pan completely on a warm burner, then rub a thin coat of vegetable oil over the inside.",
    "sol2": "Dry the pan completely on a warm burner, then rub a thin coat of dish soap over the inside.",
    "label": 0,
}


def test_completion_records_carry_gold_and_wrong_continuations():
    gold, rivals = item_continuation(HELLASWAG)
    assert gold == HELLASWAG["endings"][1] and len(rivals) == 3 and gold not in rivals
    assert item_continuation(PIQA) == (PIQA["sol1"], (PIQA["sol2"],))
    copa = {
        "premise": "The man fell.",
        "choice1": "He slipped.",
        "choice2": "He won.",
        "question": "cause",
        "label": 0,
    }
    assert item_continuation(copa) == ("He slipped.", ("He won.",))
    assert item_text(copa) == "The man fell."  # its question word is no text
    story = {f"InputSentence{i}": f"Sentence {i}." for i in range(1, 5)}
    story |= {
        "RandomFifthSentenceQuiz1": "Wrong end.",
        "RandomFifthSentenceQuiz2": "Right end.",
        "AnswerRightEnding": 2,
    }
    assert item_text(story) == "Sentence 1. Sentence 2. Sentence 3. Sentence 4."
    assert item_continuation(story) == ("Right end.", ("Wrong end.",))
    assert item_continuation({"context": "Once upon a time", "continuation": "there was a king."})[0]
    # question answering is not a completion task: its answer is a label or a short choice
    arc = {"question": "Q?", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "B"}
    assert item_continuation(arc) is None and item_continuation({"text": "plain"}) is None


def test_answer_units_are_the_answer_alone_and_the_context_end_joined_to_it():
    units = answer_units("one two three four five six", "alpha beta gamma", ("delta epsilon",), 4, 2)
    assert units == [
        (ANSWER, "alpha beta gamma", ("delta epsilon",)),
        (JOIN, "three four five six alpha beta", ("three four five six delta epsilon",)),
    ]
    assert CONTEXT == 0


def _index(items: list[list[int]], **kw) -> EvalIndex:
    return EvalIndex([np.asarray(w, dtype=np.uint64) for w in items], **kw)


def test_min_cover_is_the_coverage_left_after_the_worst_placed_edits():
    # 10 words, every 4-word window indexed: one edit at a word breaks the windows holding it
    ix = _index([list(range(1, 11))], n=8, min_item_words=4, short_words=20, short_ngram=4)
    for edits in (0, 1, 2):
        brute = 10
        for spots in itertools.combinations(range(10), edits):
            live = [
                (q, w)
                for q, w in zip(ix.rec_q.tolist(), ix.rec_w.tolist())
                if not any(q <= s < q + w for s in spots)
            ]
            cov = {q + j for q, w in live for j in range(w)}
            brute = min(brute, len(cov))
        assert ix.min_cover(np.asarray([edits]))[0] == max(1, brute)


def test_a_templated_item_is_indexed_by_the_run_no_template_covers():
    # twelve items of one template, "solve for x in the equation A B C": the template's windows are
    # shared by all of them (not indexed); each item's last three words are its core
    tmpl = [101, 102, 103, 104, 105, 106]
    items = [tmpl + [200 + i, 300 + i, 400 + i] for i in range(12)]
    ix = _index(items, n=8, min_item_words=4, max_items_per_key=10, short_words=20, short_ngram=4)
    assert ix.core_lengths == [3] and ix.template_keys >= 3
    core = ix.rec_w == 3
    assert sorted(ix.rec_item[core].tolist()) == list(range(12)) and set(ix.rec_q[core].tolist()) == {6}
    # a copy with "the" changed still hits the core: the coverage bar after one edit allows it
    doc = np.asarray([9, 9] + tmpl[:4] + [999, tmpl[5]] + items[3][6:] + [9], dtype=np.uint64)
    keys, _ = ix.probe(doc, 0)
    assert set(ix.rec_item[ix.rec_ptr[keys]].tolist()) == {3}
    assert ix.min_cover(np.asarray([1] * 12))[3] <= 3


def test_a_variable_renamed_everywhere_is_one_edit_and_a_letter_changed_once_is_not_a_rename():
    item = text_tokens("If y = 3x + 5, what is y when x = 11?")
    assert text_check(item, text_tokens("If y = 3t + 5, what is y when t = 11?")) == (1, "")
    assert text_check(item, text_tokens("If z = 3t + 5, what is z when t = 11?")) == (2, "")
    assert text_check(item, text_tokens("If y = 3t + 5, what is y when x = 11?"))[0] == 1
    # renamed onto a letter the item already uses: two edits, not a rename
    assert text_check(item, text_tokens("If y = 3y + 5, what is y when y = 11?"))[0] == 2


@pytest.fixture(scope="module")
def planted(tokenizer, tmp_path_factory, corpus):
    root = tmp_path_factory.mktemp("answers")
    wrong = {
        "goal": "How can I keep the bread I bake at home fresh for longer than a day or two?",
        "sol1": "Wrap the cooled loaf tightly in a clean cotton towel and keep it inside a bread box.",
        "sol2": "Wrap the cooled loaf tightly in a clean paper towel and keep it inside a bread box.",
        "label": 0,
    }
    listed = {
        "ctx": "Two kids are building a sandcastle on the beach near the water. they",
        "endings": [
            "fly away on a large yellow kite over the distant hills.",
            "pour buckets of wet sand into a tall tower and pat the sides flat with their hands.",
            "start reading a newspaper about the stock market.",
            "sing a song to the fish swimming in the ocean.",
        ],
        "label": "1",
    }
    records = [
        {"id": "alone", **HELLASWAG},
        {"id": "joined", **PIQA},
        {"id": "wrong", **wrong},
        {"id": "listed", **listed},
    ]
    plants = [
        HELLASWAG["endings"][1],  # the gold ending alone
        "... I wash it at night? " + PIQA["sol1"],  # the context's end run into the gold answer
        "longer than a day or two? " + wrong["sol2"],  # the context's end, then the WRONG solution
        " ".join(listed["endings"]),  # every ending listed: no answer told
    ]
    mix = planted_prose_mix(tokenizer, corpus, root, plants, at=500)
    ev = write_records(root / "tasks.jsonl", records)
    return audit_leaks(LeakConfig(StreamSpec(mix=mix), evals=(f"tasks={ev}",)))


def test_answer_side_leaks_are_found_with_their_part_and_wrong_choices_are_not(planted):
    found = {c["id"]: c for c in planted["contaminated"]}
    assert set(found) == {"alone", "joined"}, found
    assert found["alone"]["parts"] == ["answer"]
    assert "context+answer" in found["joined"]["parts"]
    doc = found["joined"]["documents"][0]
    assert doc["parts"][0] in ("answer", "context+answer") and doc["text_edits"] == 0
    near = {c["id"]: c for c in planted["near_misses"]}
    assert "wrong choice" in near["wrong"]["documents"][0]["not_a_copy"]
    assert planted["sets"]["tasks"]["by_part"]["answer"] >= 1
    assert "answer side" in planted["rule"] and all(isinstance(v, str) for v in planted["rule"].values())


def test_answers_off_looks_for_the_context_only(tokenizer, tmp_path, corpus):
    ev = tmp_path / "t.jsonl"
    ev.write_text(json.dumps({"id": "a", **HELLASWAG}) + "\n")
    prose = [(i, tokenizer.decode(ids)) for i, ids in corpus["prose"][:3]]
    prose[0] = (prose[0][0], prose[0][1] + "\n" + HELLASWAG["endings"][1] + "\n")
    write_shard(tmp_path / "p.npy", tokenize_docs(tokenizer, prose))
    mix = write_mix(tmp_path / "mix.txt", [("prose", str(tmp_path / "p.npy"))])
    on = audit_leaks(LeakConfig(StreamSpec(mix=mix), evals=(f"t={ev}",)))
    off = audit_leaks(LeakConfig(StreamSpec(mix=mix), evals=(f"t={ev}",), answers=False))
    assert [c["id"] for c in on["contaminated"]] == ["a"] and off["contaminated"] == []
    assert "answer side" not in off["rule"]

"""Eval item readers: jsonl (text, or question/answer/passage), HF folders, bundled sets by name."""

from __future__ import annotations

import json

import pytest

from olmax.audit.evalsets import item_answer, item_text, load_eval
from olmax.errors import OlmaxError


def test_jsonl_text_and_fields(tmp_path):
    p = tmp_path / "e.jsonl"
    rows = [{"id": "a", "text": "plain text item"},
            {"id": "b", "passage": "Some passage.", "question": "what is it?", "answer": "x"},
            {"question": "no id here", "answer": "y"},
            {"id": "a", "text": "same id again"}]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n")
    name, items = load_eval(f"mine={p}")
    assert name == "mine"
    assert [(it.id, it.text) for it in items] == [
        ("a", "plain text item"), ("b", "Some passage. what is it?"), ("e.jsonl:3", "no id here"),
        ("a#1", "same id again")]


def test_bad_jsonl_names_the_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"id": 1, "text": "ok"}\n{not json\n')
    with pytest.raises(OlmaxError, match="bad.jsonl:2"):
        load_eval(f"x={p}")


@pytest.mark.parametrize("name,count,field", [("arc_easy", 570, "question"), ("boolq", 3270, "passage"),
                                              ("sciq", 1000, "question"), ("copa", 100, "premise")])
def test_bundled_sets(name, count, field):
    try:
        _, items = load_eval(name)
    except OlmaxError as e:
        pytest.skip(f"bundled sets unavailable: {e}")
    assert len(items) == count and len({it.id for it in items}) == count
    assert all(it.text.strip() for it in items)


def test_mmlu_folder_of_subjects():
    try:
        _, items = load_eval("mmlu")
    except OlmaxError as e:
        pytest.skip(f"bundled sets unavailable: {e}")
    subjects = {it.id.split("/")[0] for it in items}
    assert len(subjects) == 57 and any(it.id.startswith("anatomy/test/") for it in items)


def test_answers_of_known_schemas():
    arc = {"question": "Q?", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "B"}
    assert item_text(arc) == "Q?" and item_answer(arc) == "b"
    assert item_answer({"question": "Q", "choices": ["x", "y"], "answer": 1}) == "y"
    assert item_answer({"ctx": "c", "endings": ["e0", "e1"], "label": "1"}) == "e1"
    assert item_answer({"goal": "g", "sol1": "s1", "sol2": "s2", "label": 1}) == "s2"
    assert item_answer({"sentence": "s _", "option1": "o1", "option2": "o2", "answer": "2"}) == "o2"
    assert item_answer({"context": "c", "answerA": "a", "answerB": "b", "answerC": "c", "label": "3"}) == "c"
    assert item_answer({"premise": "p", "choice1": "c1", "choice2": "c2", "label": 0}) == "c1"

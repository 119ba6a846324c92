"""Eval item readers: jsonl (text, or question/answer/passage), HF folders, bundled sets by name."""

from __future__ import annotations

import json

import pytest

from olmax.data.stream import StreamSpec
from olmax.errors import OlmaxError
from olmax.evalsets.read import item_answer, item_text, load_eval


def test_jsonl_text_and_fields(tmp_path):
    p = tmp_path / "e.jsonl"
    rows = [
        {"id": "a", "text": "plain text item"},
        {"id": "b", "passage": "Some passage.", "question": "what is it?", "answer": "x"},
        {"question": "no id here", "answer": "y"},
        {"id": "a", "text": "same id again"},
    ]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n")
    name, items = load_eval(f"mine={p}")
    assert name == "mine"
    assert [(it.report_id, it.text) for it in items] == [
        ("a", "plain text item"),
        ("b", "Some passage. what is it?"),
        (2, "no id here"),
        ("a#1", "same id again"),
    ]


def test_integer_ids_are_reported_as_integers(tmp_path, tokenizer):
    from olmax.audit.leaks.run import LeakConfig, audit_leaks
    from tests.audit.audit_testdata import tokenize_docs, write_mix, write_shard

    planted = "the sky was green over the northern quarry all night long"
    ev = tmp_path / "e.jsonl"
    ev.write_text(
        json.dumps({"id": 7, "text": planted})
        + "\n"
        + json.dumps({"id": 8, "text": "an item nobody planted in any training text"})
        + "\n"
    )
    shard = write_shard(tmp_path / "t.npy", tokenize_docs(tokenizer, [("d", "x = 1\n# " + planted)]))
    mix = write_mix(tmp_path / "mix.txt", [("code", str(shard))])
    rep = audit_leaks(LeakConfig(StreamSpec(mix=mix), evals=(f"e={ev}",), clean_dir=str(tmp_path / "c")))
    assert [c["id"] for c in rep["contaminated"]] == [7]
    assert json.loads((tmp_path / "c" / "e.jsonl").read_text())["id"] == 8


def test_bad_jsonl_names_the_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"id": 1, "text": "ok"}\n{not json\n')
    with pytest.raises(OlmaxError, match="bad.jsonl:2"):
        load_eval(f"x={p}")


@pytest.mark.parametrize(
    "name,count,field",
    [
        ("arc_easy", 570, "question"),
        ("boolq", 3270, "passage"),
        ("sciq", 1000, "question"),
        ("copa", 100, "premise"),
    ],
)
def test_bundled_sets(name, count, field):
    _, items = load_eval(name)  # fetched into the olmax cache on first use, as tests/test_assets.py checks
    assert len(items) == count and len({it.id for it in items}) == count
    assert all(it.text.strip() for it in items)


def test_mmlu_folder_of_subjects():
    _, items = load_eval("mmlu")
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


def test_saved_hf_dataset_folder_as_eval_set(tmp_path, tokenizer):
    import datasets

    from olmax.audit.leaks.run import LeakConfig, audit_leaks
    from tests.audit.audit_testdata import tokenize_docs, write_mix, write_shard

    rows = {
        "question": [
            "Which gas do green plants take in from the air to make their food?",
            "What is the boiling point of water at sea level in degrees Celsius?",
        ],
        "answer": ["carbon dioxide", "one hundred"],
    }
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "qa"))
    planted = f"Q: {rows['question'][1]}\nA: {rows['answer'][1]}"
    shard = write_shard(tmp_path / "t.npy", tokenize_docs(tokenizer, [("d", "print(1)\n" + planted)]))
    mix = write_mix(tmp_path / "mix.txt", [("code", str(shard))])
    rep = audit_leaks(LeakConfig(StreamSpec(mix=mix), evals=(f"qa={tmp_path / 'qa'}",)))
    assert [(c["eval"], c["id"], c["kind"]) for c in rep["contaminated"]] == [("qa", 1, "short")]  # 14 words


def test_gold_answers_of_every_task_whose_answer_is_text():
    from olmax.evalsets.read import item_gold

    gsm = {"question": "Janet has 16 eggs ...", "answer": "She sells 16 - 7 = <<16-7=9>>9 eggs.\n#### 9"}
    assert item_gold(gsm) == ("She sells 16 - 7 = 9 eggs.", (), False)  # no annotations, no `#### 9`
    math = {"problem": "What is 2 + 3?", "solution": "We add: $2+3=\\boxed{5}$."}
    assert item_text(math) == "What is 2 + 3?" and item_gold(math)[0] == "We add: $2+3=\\boxed{5}$."
    arc = {
        "question": "Which gas do plants take in?",
        "choices": {"text": ["carbon dioxide", "oxygen", "helium"], "label": ["A", "B", "C"]},
        "answerKey": "A",
    }
    assert item_gold(arc) == ("carbon dioxide", ("oxygen", "helium"), False)
    assert item_gold({"passage": "p", "question": "is it?", "answer": True}) is None  # a boolean is no text
    assert item_gold({"question": "only an answer"}) is None
    story = {"ctx": "A man", "endings": ["runs.", "sits."], "label": "0"}
    assert item_gold(story) == ("runs.", ("sits.",), True)  # a completion task's answer continues it

"""The answer side of tasks whose gold answer answers the item rather than continuing it: a maths item's
worked solution (GSM8K, MATH), a QA set's long answer, a multiple-choice item's distinctive gold choice.
On planted prose: the solution alone, with its operators written out, and a long gold choice are found as
part `answer`; the same solution with other numbers, a common answer phrase and a wrong choice are not."""

from __future__ import annotations

import pytest

from olmax.audit.leaks.eval_side import answer_is_evidence
from olmax.audit.leaks.normalize import word_tables
from olmax.audit.leaks.run import LeakConfig, audit_leaks
from olmax.data.stream import StreamSpec
from tests.audit.audit_testdata import planted_prose_mix, write_records

GSM8K = {
    "question": "Janet's ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes "
    "muffins for her friends every day with four. She sells the remainder at the farmers' market daily "
    "for $2 per fresh duck egg. How much in dollars does she make every day at the farmers' market?",
    "answer": "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\nShe makes 9 * 2 = $<<9*2=18>>18 "
    "every day at the farmer's market.\n#### 18",
}
OTHER = {  # the same solution template, other numbers
    "question": "Maria's hens lay 21 eggs per day. She eats five for breakfast every morning and bakes "
    "cakes for her friends every day with six. She sells the remainder at the farmers' market daily for "
    "$3 per fresh hen egg. How much in dollars does she make every day at the farmers' market?",
    "answer": "Maria sells 21 - 5 - 6 = <<21-5-6=10>>10 hen eggs a day.\nShe makes 10 * 3 = $<<10*3=30>>30 "
    "every day at the farmer's market.\n#### 30",
}
MATH = {
    "problem": "What is the sum of all positive integer divisors of 77?",
    "solution": "Since $77=7\\cdot11$, the divisors of 77 are 1, 7, 11 and 77. Their sum is "
    "$1+7+11+77=\\boxed{96}$.",
}
CHOICE = {
    "question": "Which process lets green plants store the energy of sunlight?",
    "choices": {
        "text": [
            "Chlorophyll in chloroplasts captures sunlight and converts carbon dioxide into glucose",
            "Roots absorb minerals",
            "Stomata release water vapour",
            "Mitochondria burn glucose",
        ],
        "label": ["A", "B", "C", "D"],
    },
    "answerKey": "A",
}
COMMON = {
    "question": "What can be concluded about the outcome of the experiment described in the report?",
    "answer": "It is not possible to tell from the information that is given here.",
}


def test_a_common_phrase_or_a_bare_number_is_no_evidence_alone(tokenizer):
    from olmax.assets import tokenizer_path

    ranks = word_tables(str(tokenizer_path("dolma2", quiet=True))).ranks
    assert not answer_is_evidence(COMMON["answer"], ranks)
    assert not answer_is_evidence("18", ranks)
    assert answer_is_evidence(GSM8K["answer"], ranks) and answer_is_evidence(MATH["solution"], ranks)
    assert answer_is_evidence(CHOICE["choices"]["text"][0], ranks)


def _solution_plant(sol: str) -> str:
    return sol.replace("<<16-3-4=9>>", "").replace("$<<9*2=18>>", "$").replace("#### 18", "The answer is 18.")


@pytest.fixture(scope="module")
def report(tokenizer, tmp_path_factory, corpus):
    root = tmp_path_factory.mktemp("solutions")
    records = [
        {"id": "gsm", **GSM8K},
        {"id": "gsm-spoken", **{**GSM8K, "question": GSM8K["question"].replace("Janet", "Anna")}},
        {"id": "other", **OTHER},
        {"id": "math", **MATH},
        {"id": "choice", **CHOICE},
        {"id": "common", **COMMON},
    ]
    spoken = (
        "Anna sells 16 minus 3 minus 4 equals 9 duck eggs a day. She makes 9 times 2 equals $18 every day "
    )
    plants = [
        "Worked answer: " + _solution_plant(GSM8K["answer"]),  # the solution alone
        spoken.replace("Anna", "Janet") + "at the farmer's market.",  # operators written out
        "Maria sells 21 - 5 - 6 = 10 hen eggs a day. She makes 10 * 4 = $40 every day at the farmer's market.",
        "Note. " + MATH["solution"],
        "Answer: " + CHOICE["choices"]["text"][0] + ".",
        "Sadly, " + COMMON["answer"],
    ]
    mix = planted_prose_mix(tokenizer, corpus, root, plants, at=500)
    ev = write_records(root / "qa.jsonl", records)
    return audit_leaks(LeakConfig(StreamSpec(mix=mix), evals=(f"qa={ev}",)))


def test_solutions_and_gold_choices_are_found_as_answers_and_other_numbers_are_not(report):
    found = {c["id"]: c for c in report["contaminated"]}
    assert {"gsm", "gsm-spoken", "math", "choice"} <= set(found), sorted(found)
    for i in ("gsm", "gsm-spoken", "math", "choice"):
        assert found[i]["parts"] == ["answer"], found[i]
    assert "other" not in found and "common" not in found
    assert report["sets"]["qa"]["by_part"]["answer"] >= 3

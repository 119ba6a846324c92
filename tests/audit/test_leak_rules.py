"""The leak rules of short items, maths and completion tasks, end to end on hand-written cases: a short
item with a word edited is a copy, a sign flip or another number is not, written-out operators and a
renamed variable read the same, and a completion task's gold answer and its join are found (and named)
while a wrong completion of the same context is not."""

from __future__ import annotations

import json

import pytest
from audit_testdata import tokenize_docs, write_mix, write_shard

from olmax.audit.leaks import LeakConfig, audit_leaks
from olmax.data.stream import StreamSpec

ITEMS = {
    "edit": "Which organ of the human body produces insulin to regulate the level of sugar in blood?",
    "flip": "Solve for x when 3x - 7 = 11 and report the value of x to the nearest whole number.",
    "number": "A train travels 120 miles in 2 hours at a steady speed; what is its speed per hour?",
    "written": "Compute the value: 20 - 5 = 15 and 6 * 4 = 24 so what is the sum of both results?",
    "renamed": "Find all real numbers x such that x^2 - 5x + 6 = 0 holds for the function of x.",
}
PLANTS = {
    "edit": "Which organ of the human body makes insulin to regulate the level of sugar in blood?",
    "flip": "Solve for x when 3x + 7 = 11 and report the value of x to the nearest whole number.",
    "number": "A train travels 130 miles in 2 hours at a steady speed; what is its speed per hour?",
    "written": "Compute the value: 20 minus 5 equals 15 and 6 times 4 equals 24 so what is the sum of both results?",
    "renamed": "Find all real numbers y such that y^2 - 5y + 6 = 0 holds for the function of y.",
}
CONTEXT = (
    "A woman is standing in a kitchen holding a large bowl of flour and eggs. She cracks the eggs into "
    "the bowl and begins to whisk them together with a fork. She"
)
GOLD = "pours the mixture into a hot pan and flips the pancake over with a spatula when it bubbles."
WRONG = "puts on her running shoes and jogs down the street past the houses and the old church tower."
SHORT_GOLD = "adds a cup of milk."


@pytest.fixture(scope="module")
def report(tokenizer, corpus, tmp_path_factory):
    root = tmp_path_factory.mktemp("rules")
    hosts = [t for _, t in ((i, tokenizer.decode(ids)) for i, ids in corpus["prose"][:12])]
    tail = " ".join(CONTEXT.split()[-10:])
    texts = [p for p in PLANTS.values()] + [GOLD, f"{tail} {SHORT_GOLD}", f"{tail} {WRONG}"]
    docs = [
        (f"doc-{j}", hosts[j][:1500] + "\n" + t + "\n" + hosts[j][1500:3000]) for j, t in enumerate(texts)
    ]
    shard = write_shard(root / "train.npy", tokenize_docs(tokenizer, docs))
    mix = write_mix(root / "mix.txt", [("train", str(shard))])
    rows = [{"id": k, "text": v} for k, v in ITEMS.items()]
    rows += [
        {"id": "gold", "text": CONTEXT, "continuation": GOLD},
        {"id": "join", "text": CONTEXT, "continuation": SHORT_GOLD},
        {"id": "wrong", "text": CONTEXT.replace("woman", "man"), "continuation": GOLD.replace("hot", "cold")},
    ]
    path = root / "items.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return audit_leaks(LeakConfig(StreamSpec(mix=mix), evals=(f"q={path}",)))


def test_wording_edits_are_copies_meaning_edits_are_not(report):
    found = {c["id"]: c for c in report["contaminated"]}
    assert {"edit", "written", "renamed"} <= set(found)
    assert found["edit"]["documents"][0]["match"] == "edits" and found["edit"]["documents"][0]["edits"] == 1
    assert "flip" not in found and "number" not in found
    near = {e["id"]: e for e in report["near_misses"]}
    assert near["flip"]["documents"][0]["edits"] == "a number or an operator changed"


def test_answer_side_parts_are_named_and_a_wrong_completion_is_not_a_copy(report):
    found = {c["id"]: c for c in report["contaminated"]}
    assert found["gold"]["parts"] == ["answer"] and found["gold"]["kind"] == "copy"
    assert found["join"]["parts"] == ["join"]
    assert "wrong" not in found
    assert any(line.startswith("units:") for line in report["rule"])
    assert any("operators" in line for line in report["normalization"])

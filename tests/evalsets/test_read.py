"""The one eval-set reader: one parse of every format, the audit's items and the evals' documents from it."""

from __future__ import annotations

import json

import pytest

from olmax.errors import OlmaxError
from olmax.evalsets.read import audit_items, documents, load_eval, read_eval_rows, source_parts
from olmax.evalsets.sets import clean_rows, load_eval_set


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_both_renderings_come_from_one_read(tmp_path):
    p = _jsonl(
        tmp_path / "e.jsonl", [{"id": "a", "text": "one"}, {"text": "two"}, {"id": "a", "text": "three"}]
    )
    rows = list(read_eval_rows(str(p)))
    assert [(r.loc, r.index, r.prefix) for r in rows] == [(1, 0, ""), (2, 1, ""), (3, 2, "")]
    assert [(it.id, it.text) for it in audit_items(rows)] == [("a", "one"), ("1", "two"), ("a#1", "three")]
    assert documents("e", rows) == [("a", "one"), ("e.jsonl:2", "two"), ("a", "three")]
    es = load_eval_set("e", str(p))
    assert es.ids == ("a", "e.jsonl:2", "a") and es.audit_ids == ("a", "1", "a#1")
    assert clean_rows(es, {"1"}) == [0, 2] and clean_rows(es, {"a#1"}) == [
        0,
        1,
    ]  # the audit's ids drop rows too
    assert load_eval(f"e={p}")[1] == audit_items(rows)


def test_folders_parquet_and_globs_read_alike(tmp_path):
    import datasets

    folder = tmp_path / "sets"
    folder.mkdir()
    _jsonl(folder / "a.jsonl", [{"text": "a0"}, {"text": "a1"}])
    ds = datasets.Dataset.from_dict({"text": ["t0", "t1"], "question": ["q0", "q1"]})
    ds.save_to_disk(str(folder / "saved"))
    ds.to_parquet(str(folder / "b.parquet"))
    assert [prefix for _, prefix in source_parts(str(folder))] == ["a.jsonl", "b.parquet", "saved"]
    es = load_eval_set("s", str(folder))
    assert es.texts == ("a0", "a1", "t0", "t1", "t0", "t1")
    assert es.ids[:3] == ("a.jsonl:1", "a.jsonl:2", "b.parquet:1") and es.ids[-1] == "saved:2"
    assert es.audit_ids == ("a.jsonl/0", "a.jsonl/1", "b.parquet/0", "b.parquet/1", "saved/0", "saved/1")
    assert load_eval_set("s", str(folder), limit=3).texts == ("a0", "a1", "t0")
    assert load_eval_set("g", str(folder / "*.jsonl")).texts == ("a0", "a1")
    assert [it.text for it in load_eval(f"s={folder / 'saved'}")[1]] == ["t0", "t1"]


def test_bad_inputs_name_the_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n[1, 2]\n')
    with pytest.raises(OlmaxError, match=r"bad\.jsonl:2: malformed JSON line .*one JSON object"):
        load_eval(f"x={bad}")
    no_text = _jsonl(tmp_path / "q.jsonl", [{"text": "ok"}, {"question": "q?"}])
    with pytest.raises(OlmaxError, match=r"q\.jsonl:2: record has no 'text' field .*--text-field"):
        load_eval_set("q", str(no_text))
    sciq_like = _jsonl(tmp_path / "s.jsonl", [{"question": "q?"}])  # named sciq: templated, but misses fields
    with pytest.raises(OlmaxError, match=r"s\.jsonl:1: record does not fit the sciq template"):
        load_eval_set("sciq", str(sciq_like))
    with pytest.raises(OlmaxError, match="not a bundled set"):
        load_eval(f"x={tmp_path / 'missing.jsonl'}")
    (tmp_path / "empty").mkdir()
    with pytest.raises(OlmaxError, match="no eval records inside"):
        load_eval_set("e", str(tmp_path / "empty"))

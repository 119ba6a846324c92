"""`data prepare --dedup`'s summary (removed, edited, emptied per stage; the biggest clusters with their
first lines) and its gates (`--max-removed-frac [SOURCE=]X`, `--max-cluster-size N`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from olmax.cli import main
from olmax.testing.prepare_testdata import words, write_jsonl


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    """web: w1, three near copies of it (one word in 50 changed), p1 holding a 700-byte passage P and
    p2 = P alone (cut to nothing), p3 = P inside other words (edited); books: b1 unrelated."""
    d = tmp_path_factory.mktemp("gates-raw")
    v = words(3000, 5)
    w1 = "Dear reader,\n" + " ".join(v[:250])
    near = []
    for k in range(3):
        w = list(v[:250])
        for j in range(k, 250, 50):
            w[j] = "changed"
        near.append((f"w1~{k}", "Dear reader,\n" + " ".join(w)))
    passage = " ".join(v[1000:1130])[:700]
    p1 = " ".join(v[400:440]) + "\n" + passage
    p3 = " ".join(v[500:540]) + " " + passage + " " + " ".join(v[540:560])
    web = [("w1", w1), *near, ("p1", p1), ("p2", passage), ("p3", p3)]
    write_jsonl(d / "web.jsonl", web)
    write_jsonl(d / "books.jsonl", [("b1", " ".join(v[2000:2300]))])
    return d


def prepare(tmp_path: Path, raw: Path, dolma2: str, *extra: str) -> int:
    argv = ["data", "prepare", "--no-progress", "--tokenizer", dolma2, "--out", str(tmp_path / "out")]
    argv += ["--dedup", "exact,minhash,substring", *extra]
    return main([*argv, f"web={raw}/web.jsonl", f"books={raw}/books.jsonl"])


def test_the_summary_says_removed_edited_emptied(tmp_path, raw, dolma2, capsys):
    assert prepare(tmp_path, raw, dolma2) == 0
    out = capsys.readouterr().err
    dd = json.loads((tmp_path / "out" / "manifest.json").read_text())["dedup"]
    assert dd["outcomes"] == {
        "exact": {"removed": 0},
        "minhash": {"removed": 3},
        "substring": {"edited": 1, "emptied": 1},
    }
    assert "dedup (documents): exact removed 0; minhash removed 3; substring edited 1, emptied 1" in out
    assert "web: 3 docs" in out and "skipped 0 empty" in out  # p2, cut to nothing, is not "empty input"
    records = [json.loads(x) for x in (tmp_path / "out" / "removed.jsonl").read_text().splitlines()]
    assert [r["id"] for r in records if r.get("emptied")] == ["p2"]
    web = dd["sources"]["web"]
    assert web["documents"] == 7 and web["stages"]["minhash"]["documents"] == 3
    assert web["stages"]["substring"] == {"documents": 1, "text_bytes": 1400}  # p2 whole, p3's copy
    # the biggest cluster, its members' first lines side by side
    assert dd["largest_cluster"] == 4 and dd["clusters"][0]["kept"] == "w1"
    assert dd["clusters"][0]["first_lines"] == ["Dear reader,"] * 4
    assert "4 docs, kept w1: 'Dear reader,' | 'Dear reader,' | 'Dear reader,' | 'Dear reader,'" in out


def test_a_failing_gate_exits_1_after_the_report(tmp_path, raw, dolma2, capsys):
    assert prepare(tmp_path, raw, dolma2, "--max-removed-frac", "0.6", "--max-removed-frac", "books=0") == 0
    out = capsys.readouterr().err
    web = {r["id"]: len(r["text"].encode()) for r in map(json.loads, (raw / "web.jsonl").open())}
    share = sum(web[f"w1~{k}"] for k in range(3)) / sum(web.values())  # more than 3 of 7 documents
    assert f"PASS removed_frac[minhash/web]: {round(share, 6)} (limit 0.6)" in out
    assert "PASS removed_frac[exact/books]: 0.0 (limit 0.0)" in out
    assert prepare(tmp_path, raw, dolma2, "--max-removed-frac", "0.5", "--overwrite") == 1
    out = capsys.readouterr().err
    assert "FAIL removed_frac[minhash/web]" in out and "gate failed: removed_frac[minhash/web]" in out
    assert (tmp_path / "out" / "mix.txt").exists() and (tmp_path / "out" / "removed.jsonl").exists()
    assert prepare(tmp_path, raw, dolma2, "--max-cluster-size", "3", "--overwrite") == 1
    assert "FAIL max_cluster_size: 4 (limit 3)" in capsys.readouterr().err
    assert prepare(tmp_path, raw, dolma2, "--max-cluster-size", "4", "--overwrite") == 0


@pytest.mark.parametrize(
    "extra, words_",
    [
        (["--max-removed-frac", "web=1.5"], "a fraction in [0, 1]"),
        (["--max-removed-frac", "news=0.2"], "source 'news', which is not in this run"),
        (["--max-cluster-size", "0"], "at least 1"),
    ],
)
def test_bad_gates_fail_before_anything_is_written(tmp_path, raw, dolma2, capsys, extra, words_):
    assert prepare(tmp_path, raw, dolma2, *extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("olmax: error:") and words_ in err[0]
    assert not (tmp_path / "out").exists()

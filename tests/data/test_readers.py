"""Reading Dolma jsonl: the fast path (ISA-L inflate, orjson) gives exactly the documents and errors of
gzip + `json.loads`, on every line orjson reads differently or not at all; and a malformed JSON line is one
`olmax: error:` line with the file, the line, the column and the whole reason, with no output left behind."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest
from prepare_testdata import pydoc_texts, stdlib_texts

from olmax.data import readers
from olmax.errors import OlmaxError

# lines where orjson and json part ways; json's reading is what prepare has always given
ODD_LINES = [
    '{"id": 123456789012345678901234567890, "text": "a big integer id"}',
    '{"id": 1e400, "text": "an id json reads as inf"}',
    '{"id": 2.50, "text": "a float id"}',
    '{"id": -0.0, "text": "negative zero"}',
    '{"id": "nan", "score": NaN, "text": "NaN in another field"}',
    '{"id": "s", "meta": "\\ud800", "text": "a lone surrogate escape in another field"}',
    '{"id": "dup", "text": "first", "text": "the last duplicate key wins"}',
    '   {"id": "ws", "text": "leading and trailing whitespace"}   \r',
    '{"id": "esc", "text": "\\u00e9\\ud83d\\ude00\\n\\t\\"\\\\ \\u2028"}',
    '{"id": "deep", "text": "nested", "x": ' + "[" * 300 + "]" * 300 + "}",
    '{"id": 7, "text": "an int id"}',
]


def _json_docs(lines: list[str], name: str) -> list[tuple[str, str, int]]:
    """What plain `json.loads` makes of the lines: (id, text, line)."""
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        obj = json.loads(line)
        out.append((f"{name}:{n}" if obj.get("id") is None else str(obj["id"]), obj["text"], n))
    return out


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_fast_reading_equals_json_on_real_and_odd_lines(tmp_path, suffix):
    docs = stdlib_texts(30) + pydoc_texts()[:30]
    lines = [json.dumps({"id": i, "text": t}) for i, t in docs] + ODD_LINES + [""]
    lines += [
        json.dumps({"text": "no id", "n": 1}, ensure_ascii=False),
        json.dumps({"id": "ü", "text": "中文"}),
    ]
    data = ("\n".join(lines) + "\n").encode()
    path = tmp_path / f"a{suffix}"
    path.write_bytes(gzip.compress(data, mtime=0) if suffix.endswith(".gz") else data)
    got = [(d.id, d.text, d.loc) for d in readers.read_jsonl(str(path))]
    assert got == _json_docs(lines, path.name)
    assert got[len(docs)][0] == "123456789012345678901234567890"  # not orjson's float
    assert got[len(docs) + 1][0] == "inf"


def test_bad_lines_give_the_same_errors(tmp_path):
    path = tmp_path / "b.jsonl"
    path.write_bytes(b'{"id": "a", "text": "ok"}\n{"id": "b", "text": "\xc3("}\n')
    # 26 bytes of line 1, then 21 into line 2
    with pytest.raises(OlmaxError, match=r"b\.jsonl:2: invalid UTF-8 at byte offset 47 \(invalid"):
        list(readers.read_jsonl(str(path)))
    path.write_bytes(b'{"id": "a", "text": "ok"}\n{"id": "b", "text": "cut\n')
    with pytest.raises(
        OlmaxError, match=r"b\.jsonl:2: malformed JSON line \(column 21: a string starts here and never"
    ):
        list(readers.read_jsonl(str(path)))
    gz = tmp_path / "c.jsonl.gz"
    gz.write_bytes(gzip.compress(b'{"id": "a", "text": "ok"}\n' * 2000, mtime=0)[:-30])
    with pytest.raises(OlmaxError, match=r"c\.jsonl\.gz: corrupt or truncated gz data after line \d+"):
        list(readers.read_jsonl(str(gz)))


def test_a_raw_control_character_names_file_line_column_and_the_escape(tmp_path, dolma2):
    good = json.dumps({"id": "a", "text": "one"})
    bad = '{"id": "b", "text": "a tab\there"}'  # a raw tab inside a string, as a hand-written exporter leaves
    (tmp_path / "docs.jsonl").write_text(f"{good}\n{bad}\n")
    out = tmp_path / "out"
    p = subprocess.run(
        [sys.executable, "-m", "olmax.cli", "data", "prepare", "--no-progress", "--tokenizer", dolma2]
        + ["--out", str(out), f"src={tmp_path / 'docs.jsonl'}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, p.stderr
    column = bad.index("\t") + 1
    assert lines[0] == (
        f"olmax: error: {tmp_path / 'docs.jsonl'}:2: malformed JSON line (column {column}: a raw control "
        "character '\\t' (U+0009) inside a string; JSON needs it escaped as \\t); fix it or pass "
        "--skip-bad-lines to skip and count such lines"
    )
    assert not (out / "mix.txt").exists()


def test_a_line_cut_short_names_its_own_column_not_the_next_line(tmp_path, dolma2):
    cut = '{"id": "b", "text": '
    (tmp_path / "docs.jsonl").write_text(f"{cut}\n")
    p = subprocess.run(
        [sys.executable, "-m", "olmax.cli", "data", "prepare", "--no-progress", "--tokenizer", dolma2]
        + ["--out", str(tmp_path / "out"), f"src={tmp_path / 'docs.jsonl'}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 2, p.stderr
    assert (
        f":1: malformed JSON line (column {len(cut) + 1}: expecting value, found the end of the line)"
        in p.stderr
    )

"""Reading Dolma jsonl: the fast path (ISA-L inflate, orjson) gives exactly the documents and errors of
gzip + `json.loads`, on every line orjson reads differently or not at all."""

from __future__ import annotations

import gzip
import json

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
    with pytest.raises(OlmaxError, match=r"b\.jsonl:2: malformed JSON line \(column 25: Invalid control"):
        list(readers.read_jsonl(str(path)))
    gz = tmp_path / "c.jsonl.gz"
    gz.write_bytes(gzip.compress(b'{"id": "a", "text": "ok"}\n' * 2000, mtime=0)[:-30])
    with pytest.raises(OlmaxError, match=r"c\.jsonl\.gz: corrupt or truncated gz data after line \d+"):
        list(readers.read_jsonl(str(gz)))

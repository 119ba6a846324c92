"""JSON/JSONL files: strict JSON out (NaN/inf as null, numpy converted), torn-tail-tolerant JSONL in."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from olmax.errors import OlmaxError
from olmax.jsonio import append_jsonl, dumps, read_json, read_jsonl, write_json, write_jsonl


def test_non_finite_floats_are_null_and_numpy_is_converted(tmp_path):
    obj = {
        "nan": float("nan"),
        "inf": -math.inf,
        "f32": np.float32(0.5),
        "i64": np.int64(3),
        "arr": np.arange(3),
        "nan_arr": np.array([1.0, np.nan]),
        "ok": np.bool_(True),
        "t": (1, 2),
        "s": {"b", "a"},
        "path": tmp_path / "x",
        np.int64(7): "numpy key",
    }
    p = write_json(tmp_path / "r.json", obj)
    text = p.read_text()
    assert "NaN" not in text and "Infinity" not in text and text.endswith("}\n")
    back = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    assert back == {
        "nan": None,
        "inf": None,
        "f32": 0.5,
        "i64": 3,
        "arr": [0, 1, 2],
        "nan_arr": [1.0, None],
        "ok": True,
        "t": [1, 2],
        "s": ["a", "b"],
        "path": str(tmp_path / "x"),
        "7": "numpy key",
    }
    assert dumps({"a": float("inf")}) == '{"a": null}'
    with pytest.raises(TypeError, match="object"):
        dumps({"x": object()})


def test_append_and_read_round_trip(tmp_path):
    p = tmp_path / "m.jsonl"
    append_jsonl(p, [{"step": 1, "loss": float("nan")}])
    append_jsonl(p, [{"step": 2}, {"step": 3}])
    assert read_jsonl(p) == [{"step": 1, "loss": None}, {"step": 2}, {"step": 3}]
    write_jsonl(p, [{"a": 1}, [2]])
    assert p.read_text() == '{"a": 1}\n[2]\n' and read_jsonl(p) == [{"a": 1}, [2]]


def test_a_torn_last_line_is_skipped(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text('{"step": 1}\n\n{"step": 2}\n{"step": 3, "lo')
    assert read_jsonl(p) == [{"step": 1}, {"step": 2}]
    # appending after a torn tail starts a new line: the new record stays whole, the torn one is reported
    append_jsonl(p, [{"step": 4}])
    with pytest.raises(OlmaxError, match=r"m\.jsonl:4: malformed JSON line"):
        read_jsonl(p)


def test_a_malformed_middle_or_terminated_line_names_file_and_line(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text('{"step": 1}\n{oops\n{"step": 3}\n')
    with pytest.raises(OlmaxError, match=r"m\.jsonl:2: malformed JSON line .*fix or remove that line"):
        read_jsonl(p)
    p.write_text('{"step": 1}\n{oops\n')  # ends with its newline: written whole, so not a torn tail
    with pytest.raises(OlmaxError, match=r"m\.jsonl:2"):
        read_jsonl(p)


def test_missing_and_invalid_files_are_named(tmp_path):
    with pytest.raises(OlmaxError, match="nope.jsonl: not found"):
        read_jsonl(tmp_path / "nope.jsonl")
    with pytest.raises(OlmaxError, match=r"r\.json: not found \(a report\)"):
        read_json(tmp_path / "r.json", "a report")
    (tmp_path / "r.json").write_text("{")
    with pytest.raises(OlmaxError, match="invalid JSON .*expected a report"):
        read_json(tmp_path / "r.json", "a report")
    assert read_json(write_json(tmp_path / "r.json", [1]), "a list") == [1]


@pytest.mark.parametrize(
    "line, reason",
    [
        (
            '{"a": "x\ty"}',
            "column 9: a raw control character '\\t' (U+0009) inside a string; JSON needs it escaped as \\t",
        ),
        (
            '{"a": "x\x01"}',
            "column 9: a raw control character '\\x01' (U+0001) inside a string; JSON needs it escaped as \\u0001",
        ),
        (
            '{"a": "xy',
            "column 7: a string starts here and never ends (a missing closing quote, or a line cut short)",
        ),
        (
            '{"a": 1} {"b": 2}',
            "column 10: more text after a whole JSON value ('{\"b\": 2}'); one value per line",
        ),
        ('{"a": }', "column 7: expecting value, found '}'"),
        ('{"a": ', "column 7: expecting value, found the end of the line"),
    ],
)
def test_a_malformed_line_gives_its_column_and_the_whole_reason(tmp_path, line, reason):
    p = tmp_path / "m.jsonl"
    p.write_text('{"ok": 1}\n' + line + "\n")
    with pytest.raises(OlmaxError) as e:
        read_jsonl(p)
    assert str(e.value) == f"{p}:2: malformed JSON line ({reason}); fix or remove that line"

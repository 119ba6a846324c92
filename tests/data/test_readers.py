"""Reading Dolma jsonl: the fast path (ISA-L inflate, lines cut from blocks in place, simdjson) gives exactly
the documents and errors of gzip + `json.loads`, on every line simdjson reads differently or not at all,
on thousands of lines mutated at random and on lines that straddle the reader's blocks; and a malformed
JSON line is one `olmax: error:` line with the file, the line, the column and the whole reason, with no
output left behind."""

from __future__ import annotations

import gzip
import json
import random
import subprocess
import sys

import numpy as np
import pytest

from olmax.data import readers
from olmax.errors import OlmaxError
from olmax.testing.prepare_testdata import pydoc_texts, stdlib_texts

# lines where a fast parser and json part ways; json's reading is what prepare has always given
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
    '{"id": "k", "text": "first", "te\\u0078t": "an escaped duplicate key wins too"}',
    '{"id": [1, 2], "text": "an array id"}',
    '{"id": {"a": 1}, "text": "an object id"}',
    '{"id": true, "text": "a boolean id"}',
    '{"id": 18446744073709551615, "text": "the largest 64-bit id"}',
    '{"id": -9223372036854775809, "text": "past the smallest 64-bit id"}',
    '{"id": 1E2, "text": "an exponent id"}',
    '{"id": "nul", "text": "a \\u0000 inside"}',
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


def _json_fields(line: bytes) -> tuple[str, object] | None:
    """What `json.loads` makes of a line: (text, id) when it is an object with a string text, else None."""
    try:
        obj = json.loads(line.decode("utf-8"))
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
        return None
    return obj["text"], obj.get("id")


# bytes a mutation inserts or writes over: JSON's structure, escapes, numbers, literals, whitespace, control
# characters, a byte-order mark and broken or overlong UTF-8
ALPHABET = [bytes([c]) for c in b'"\\{}[],:.-+eE0159untrfal \t\r\x00\x1f\x7f'] + [
    b"\\u",
    b"\\ud800",
    b"\\udc00",
    b"\\ud83d\\ude00",
    b"\xef\xbb\xbf",
    b"\xff",
    b"\xc3",
    b"\xc3\xa9",
    b"\xed\xa0\x80",
    b"\xc0\x80",
    b"\xf4\x90\x80\x80",
    b"NaN",
    b"Infinity",
    b"1e400",
    b"123456789012345678901234567890",
    b'"text":',
    b'"id":',
]


def _mutants(seed: int, n: int) -> list[bytes]:
    """`n` lines made from real Dolma-shaped ones by one to three random byte edits each."""
    rng = random.Random(seed)
    texts = [t for _, t in stdlib_texts(3)] + [t for _, t in pydoc_texts()[:3]]
    bases = []
    for k, t in enumerate(texts):
        t = t[: rng.randrange(20, 400)] + "é😀\u2028"
        doc = {"id": [f"doc-{k}", k, None, 2**70, 1.5][k % 5], "text": t, "meta": {"n": [1, 2.5, None]}}
        bases.append(json.dumps(doc, ensure_ascii=bool(k % 2)).encode())
    out = []
    for _ in range(n):
        line = bytearray(rng.choice(bases))
        for _ in range(rng.randrange(1, 4)):
            at = rng.randrange(len(line) + 1)
            what = rng.random()
            if what < 0.3 and at < len(line):
                del line[at : at + rng.randrange(1, 4)]
            elif what < 0.65:
                line[at:at] = rng.choice(ALPHABET)
            else:
                piece = rng.choice(ALPHABET)
                line[at : at + len(piece)] = piece
        out.append(bytes(line))
    return out


def test_the_fast_path_answers_only_what_json_answers():
    """Whenever simdjson's reading of a line is taken, `json.loads` gives the same text and id; otherwise
    the line goes down the json path. Thousands of real lines edited at random, many of them malformed."""
    import simdjson

    parser = simdjson.Parser()
    taken = 0
    for line in _mutants(seed=20261205, n=6000):
        if line[:1] != b"{":
            continue  # read by json alone
        fast = readers._fast_fields(parser, memoryview(line), "text", "id")
        if fast is None:
            continue
        taken += 1
        want = _json_fields(line)
        assert want is not None, line
        assert fast[0] == want[0] and type(fast[1]) is type(want[1]) and str(fast[1]) == str(want[1]), line
    assert taken > 1000  # most lines stay readable by both: the fast path is really exercised


@pytest.mark.parametrize("read_bytes", [7, 64, 4096])
def test_lines_straddling_blocks_give_the_same_documents_and_errors(tmp_path, monkeypatch, read_bytes):
    """Blocks smaller than a line (the line is put together from pieces), a few lines, many lines: the
    same documents as one whole read; a bad line's error names the same line and byte offset."""
    docs = stdlib_texts(5) + pydoc_texts()[:5]
    lines = [json.dumps({"id": i, "text": t}, ensure_ascii=False) for i, t in docs] + ODD_LINES + ["", "  "]
    data = ("\n".join(lines) + "\n").encode()
    path = tmp_path / "s.jsonl.gz"
    path.write_bytes(gzip.compress(data, mtime=0))
    want = [(d.id, d.text, d.loc) for d in readers.read_jsonl(str(path))]
    monkeypatch.setattr(readers, "READ_BYTES", read_bytes)
    assert [(d.id, d.text, d.loc) for d in readers.read_jsonl(str(path))] == want
    assert [(d.id, d.text, d.loc) for d in readers.read_jsonl(str(path), start_after=7)] == want[7:]
    bad = data + b'{"id": "x", "text": "caf\xe9"}\n'
    path.write_bytes(gzip.compress(bad, mtime=0))
    with pytest.raises(
        OlmaxError, match=rf"s\.jsonl\.gz:{len(lines) + 1}: invalid UTF-8 at byte offset {len(data) + 24} "
    ):
        list(readers.read_jsonl(str(path)))


def test_mutated_files_read_as_json_reads_them(tmp_path):
    """Whole files of mutated lines, with --skip-bad-lines: the same documents and bad-line count as
    reading every line with `json.loads` (the fast path switched off)."""
    path = tmp_path / "m.jsonl"
    # what stops prepare rather than being skipped and counted is left out: invalid UTF-8, and a line json
    # reads as an object without a string text
    keep = []
    for ln in _mutants(seed=7, n=3000):
        ln = ln.replace(b"\n", b" ").replace(b"\r", b" ")  # one line each
        try:
            obj = json.loads(ln.decode("utf-8"))
        except UnicodeDecodeError:
            continue
        except ValueError:
            keep.append(ln)  # malformed: skipped and counted by both
            continue
        if isinstance(obj, dict) and isinstance(obj.get("text"), str):
            keep.append(ln)
    path.write_bytes(b"\n".join(keep) + b"\n")

    def read(fast: bool):
        stats = readers.ReadStats()
        try:
            got = [
                (d.id, d.text, d.loc) for d in readers.read_jsonl(str(path), skip_bad_lines=True, stats=stats)
            ]
        except OlmaxError as e:
            return str(e), stats.bad_lines
        return got, stats.bad_lines

    fast = read(True)
    real = readers._fast_fields
    try:
        readers._fast_fields = lambda *a: None
        slow = read(False)
    finally:
        readers._fast_fields = real
    assert fast == slow
    assert isinstance(fast[0], list) and len(fast[0]) > 500 and fast[1] > 100


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
    # a byte-order mark before a line's object: json refuses it (simdjson would skip it)
    path.write_bytes(b'{"id": "a", "text": "ok"}\n\xef\xbb\xbf{"id": "b", "text": "bom"}\n')
    with pytest.raises(OlmaxError, match=r"b\.jsonl:2: malformed JSON line \(column 1: unexpected UTF-8 BOM"):
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


# ------------------------------------------------------------------------------ the compiled reader
needs_native = pytest.mark.skipif(
    readers.native_jsonl is None, reason="olmax.data.jsonl_scan is not built (no C compiler at install)"
)


def _scan(buf: bytes, head: bytes = b"", strip: bool = False, eos: bytes = b"", rule: int = 0):
    """The compiled reader over buf (after head), as (items, texts of the lines it read, EOS flags)."""
    texts, ends, items, added = readers.native_jsonl.scan(
        buf, 0, len(buf), head, b"text", b"id", strip, eos, rule
    )
    bounds = [0, *np.frombuffer(ends, dtype=np.int64).tolist()]
    return items, [texts[a:b] for a, b in zip(bounds, bounds[1:])], list(added)


@needs_native
def test_the_compiled_reader_answers_only_what_json_answers():
    """Whenever the compiled reader reads a line itself, `json.loads` gives the same text (stripped too, as
    `str.strip` strips) and id; every other line comes back whole, at its place. Thousands of real lines
    edited at random, many of them malformed, the lines json and simdjson part ways on, and real ones."""
    real = [json.dumps({"id": i, "text": t}, ensure_ascii=k % 2 == 0).encode() for k, (i, t) in
            enumerate(stdlib_texts(20) + pydoc_texts()[:20])]  # fmt: skip
    lines = _mutants(seed=20261206, n=6000) + [ln.encode() for ln in ODD_LINES] + real
    taken = 0
    for strip in (False, True):
        for line in lines:
            if b"\n" in line:
                continue
            (item,), texts, _ = _scan(line + b"\n", strip=strip)
            if type(item) is tuple:
                assert item == (0, line + b"\n")
                continue
            taken += 1
            want = _json_fields(line)
            assert want is not None, line
            text = want[0].strip() if strip else want[0]
            assert texts == [text.encode("utf-8")], line
            assert item == (None if want[1] is None else str(want[1])), line
    assert taken > 2500  # most lines stay readable: the compiled reader is really exercised
    for line in real:  # every plain Dolma line is read by it, none handed back
        assert type(_scan(line + b"\n")[0][0]) is not tuple


@needs_native
def test_the_compiled_reader_strips_what_str_strip_strips():
    """Every code point that `str.isspace` calls whitespace, every one below U+3100 and a sample of the
    rest, at both ends of a text: the same text as `str.strip`."""
    rng = random.Random(5)
    points = {c for c in range(0x110000) if chr(c).isspace()} | set(range(0x3100))
    points |= {rng.randrange(0x3100, 0x110000) for _ in range(3000)}
    points = sorted(c for c in points if not 0xD800 <= c <= 0xDFFF)
    texts = [chr(c) * 2 + "x" + chr(c) + "y" + chr(c) * 3 for c in points]
    buf = "".join(
        json.dumps({"text": t}, ensure_ascii=k % 2 == 0) + "\n" for k, t in enumerate(texts)
    ).encode()
    items, got, _ = _scan(buf, strip=True)
    assert all(type(i) is not tuple for i in items)
    assert got == [t.strip().encode("utf-8") for t in texts]


@needs_native
def test_the_compiled_reader_writes_eos_after_texts_by_its_rule(tmp_path):
    buf = b"".join(json.dumps({"text": t}).encode() + b"\n" for t in ["a", "", " b<E> ", "c<E>", "<E>"])
    items, texts, added = _scan(buf, strip=True, eos=b"<E>", rule=2)  # not after a text ending in it
    assert texts == [b"a<E>", b"", b"b<E>", b"c<E>", b"<E>"] and added == [1, 0, 0, 0, 0]
    items, texts, added = _scan(buf, eos=b"<E>", rule=1)  # after every non-empty text
    assert texts == [b"a<E>", b"", b" b<E> <E>", b"c<E><E>", b"<E><E>"] and added == [1, 0, 1, 1, 1]
    assert _scan(buf)[1] == [b"a", b"", b" b<E> ", b"c<E>", b"<E>"]
    # a text with a line read by json.loads around it: the same rule in Python
    mixed = tmp_path / "m.jsonl"
    mixed.write_bytes(b'{"text": "x"}\n{"text": "y", "n": NaN}\n{"text": "z<E>"}\n')
    form = readers.Utf8Form(eos=b"<E>", eos_once=True)
    (part,) = readers.read_jsonl_utf8(str(mixed), form=form)
    bounds = part.offsets.tolist()
    assert [part.utf8[a:b] for a, b in zip(bounds, bounds[1:])] == [b"x<E>", b"y<E>", b"z<E>"]
    assert part.eos.tolist() == [True, True, False]


@needs_native
@pytest.mark.parametrize("read_bytes", [7, 64, 4096, readers.READ_BYTES])
def test_utf8_reading_gives_read_jsonl_documents_and_errors(tmp_path, monkeypatch, read_bytes):
    """`read_jsonl_utf8` (the compiled reader, json.loads for the lines it hands back) against `read_jsonl`:
    the same ids, lines, texts (stripped, with EOS written after, as asked), bad-line counts and skipped
    lines, with blocks that cut lines anywhere, after a resume point, and the same errors."""
    docs = stdlib_texts(5) + pydoc_texts()[:5]
    lines = [json.dumps({"id": i, "text": t}, ensure_ascii=False) for i, t in docs] + ODD_LINES + ["", "  "]
    lines += ['{"id": "bad", "text": ', json.dumps({"id": "end", "text": "the last line, no newline"})]
    data = "\n".join(lines).encode()
    path = tmp_path / "s.jsonl.gz"
    path.write_bytes(gzip.compress(data, mtime=0))
    monkeypatch.setattr(readers, "READ_BYTES", read_bytes)

    def utf8_docs(**kw):
        stats = readers.ReadStats()
        out = []
        form = readers.Utf8Form(strip=kw.pop("strip", False), eos=kw.pop("eos", b""), eos_once=True)
        for part in readers.read_jsonl_utf8(str(path), skip_bad_lines=True, stats=stats, form=form, **kw):
            bounds = part.offsets.tolist()
            for k, doc in enumerate(part.docs):
                text = part.utf8[bounds[k] : bounds[k + 1]]
                if part.eos[k]:
                    assert text.endswith(form.eos)
                    text = text[: -len(form.eos)]
                out.append((doc.id, text.decode("utf-8"), doc.loc, part.bad[k]))
        return out, stats.bad_lines

    for after in (0, 7, len(lines) - 1):
        stats = readers.ReadStats()
        want = [(d.id, d.text, d.loc, stats.bad_lines)
                for d in readers.read_jsonl(str(path), skip_bad_lines=True, stats=stats, start_after=after)]  # fmt: skip
        assert utf8_docs(start_after=after) == (want, stats.bad_lines)
        stripped = [(i, t.strip(), n, b) for i, t, n, b in want]
        assert utf8_docs(start_after=after, strip=True, eos=b"<|endoftext|>") == (stripped, stats.bad_lines)
    # the errors: a bad line not skipped, invalid UTF-8, a lone surrogate in a text, a truncated stream
    good = "\n".join(ln for ln in lines if not ln.startswith('{"id": "bad"')).encode() + b"\n"
    n = good.count(b"\n") + 1
    for raw, error in [
        (b'{"id": "x", "text": \n', rf"s\.jsonl\.gz:{n}: malformed JSON line \(column 21: expecting value"),
        (
            b'{"id": "x", "text": "caf\xe9"}\n',
            rf"s\.jsonl\.gz:{n}: invalid UTF-8 at byte offset {len(good) + 24} ",
        ),
        (
            b'{"id": "x", "text": "\\ud800"}\n',
            rf"s\.jsonl\.gz:{n}: document 'x' holds a lone surrogate escape at",
        ),
    ]:
        path.write_bytes(gzip.compress(good + raw, mtime=0))
        with pytest.raises(OlmaxError, match=error):
            list(readers.read_jsonl_utf8(str(path)))
        if "surrogate" not in error:
            with pytest.raises(OlmaxError, match=error):
                list(readers.read_jsonl(str(path)))
    path.write_bytes(gzip.compress(b'{"id": "a", "text": "ok"}\n' * 2000, mtime=0)[:-30])
    with pytest.raises(OlmaxError, match=r"s\.jsonl\.gz: corrupt or truncated gz data after line \d+"):
        list(readers.read_jsonl_utf8(str(path)))


@needs_native
def test_mutated_files_read_as_json_reads_them_by_the_compiled_reader_too(tmp_path):
    """Whole files of mutated lines with --skip-bad-lines: `read_jsonl_utf8` gives `read_jsonl`'s documents
    and bad-line count."""
    keep = []
    for ln in _mutants(seed=11, n=3000):
        ln = ln.replace(b"\n", b" ").replace(b"\r", b" ")
        try:
            obj = json.loads(ln.decode("utf-8"))
        except UnicodeDecodeError:
            continue
        except ValueError:
            keep.append(ln)
            continue
        if isinstance(obj, dict) and isinstance(obj.get("text"), str):
            try:
                obj["text"].encode("utf-8")
            except UnicodeEncodeError:
                continue  # a lone surrogate in a text stops prepare: not a skipped line
            keep.append(ln)
    path = tmp_path / "m.jsonl"
    path.write_bytes(b"\n".join(keep) + b"\n")
    stats = readers.ReadStats()
    want = [
        (d.id, d.text.encode(), d.loc)
        for d in readers.read_jsonl(str(path), skip_bad_lines=True, stats=stats)
    ]
    got_stats = readers.ReadStats()
    got = []
    for part in readers.read_jsonl_utf8(str(path), skip_bad_lines=True, stats=got_stats):
        bounds = part.offsets.tolist()
        got += [(d.id, part.utf8[bounds[k] : bounds[k + 1]], d.loc) for k, d in enumerate(part.docs)]
    assert got == want and got_stats.bad_lines == stats.bad_lines
    assert len(got) > 500 and stats.bad_lines > 100

"""Readers of document files: jsonl (.jsonl, .json, either .gz or .zst), .arrow, .parquet, `datasets` folders.

The one parse of these formats. `read_documents` yields `Doc(id, text, src, loc)` for prepare;
`read_rows` yields `(loc, record)` with every field of a record, for olmax.evalsets.read. Both go in file
order, `loc` being the 1-based line (jsonl) or row (tables), so a resumed run can skip exactly the
documents it already wrote. Bad input raises `OlmaxError` naming the file, the line and the byte offset
(of the decompressed stream for .gz/.zst).
"""

from __future__ import annotations

import glob
import gzip
import io
import json
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import simdjson

from olmax import storage
from olmax.errors import OlmaxError
from olmax.jsonio import json_error

try:  # prepare's compiled JSON-lines reader (olmax/data/jsonl_scan.c), built by `pip install` where a C compiler is
    from olmax.data import jsonl_scan as native_jsonl
except ImportError:  # none: every line is read by simdjson / json.loads, with the same documents and errors
    native_jsonl = None

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".json.gz", ".json.zst", ".json")
TABLE_SUFFIXES = (".arrow", ".parquet")


@dataclass(frozen=True)
class Doc:
    id: str
    text: str
    src: str
    loc: int


@dataclass
class ReadStats:
    """What a reader skipped, and why (recorded in manifest.json)."""

    bad_lines: int = 0
    bad_line_examples: list[str] = field(default_factory=list)


def is_table(path: str) -> bool:
    """Whether an input is read as a table (a `datasets` folder, `.arrow`, `.parquet`); else it is jsonl."""
    return os.path.isdir(path) or path.endswith(TABLE_SUFFIXES)


def _is_dataset_folder(names) -> bool:
    return "dataset_info.json" in names or "state.json" in names


def expand_inputs(spec: str) -> list[str]:
    """A path, a glob or a folder → a sorted list of input files (a `datasets` folder stays one input).
    An fsspec URL (a file, a glob or a folder) gives URLs; a `file://` URL gives local paths."""

    local = storage.local_path(spec)
    if local is None:
        found = storage.expand(spec, _is_dataset_folder)
        files = (
            found
            if found == [spec.rstrip("/")]
            else [f for f in found if f.endswith(JSONL_SUFFIXES + TABLE_SUFFIXES)]
        )
        if not files:
            raise OlmaxError(
                f"input {spec!r} matches no file (expected .jsonl[.gz|.zst], .arrow, .parquet or a "
                "datasets folder)"
            )
        return files
    spec = local
    p = Path(spec).expanduser()
    if p.is_dir():
        if _is_dataset_folder(os.listdir(p)):
            return [str(p)]
        files = sorted(
            str(f) for f in p.rglob("*") if f.is_file() and f.name.endswith(JSONL_SUFFIXES + TABLE_SUFFIXES)
        )
    elif p.is_file():
        files = [str(p)]
    else:
        files = sorted(f for f in glob.glob(os.path.expanduser(spec), recursive=True) if os.path.isfile(f))
    if not files:
        raise OlmaxError(
            f"input {spec!r} matches no file (expected .jsonl[.gz|.zst], .arrow, .parquet or a "
            "datasets folder)"
        )
    return files


class _ZstdFrames(io.RawIOBase):
    """The decompressed bytes of every frame of a .zst file, raising ValueError on a frame cut short.

    (zstandard's `stream_reader` stops after the first frame and ends silently inside a truncated one.)"""

    def __init__(self, path: str):
        import zstandard

        self._file = open(path, "rb")
        self._new = zstandard.ZstdDecompressor().decompressobj
        self._dobj = None  # None between frames
        self._pending = memoryview(b"")  # decompressed, not yet read (a view: no copy per read)

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        while not self._pending:
            data = self._dobj.unused_data if self._dobj is not None and self._dobj.eof else b""
            if self._dobj is None or self._dobj.eof:
                self._dobj = None
            if not data:
                data = self._file.read(1 << 18)  # 256 KB in: a few MB out for text
            if not data:
                if self._dobj is not None:
                    raise ValueError("the file ends inside a zstd frame (truncated)")
                return 0
            if self._dobj is None:
                self._dobj = self._new()
            self._pending = memoryview(self._dobj.decompress(data))
        n = min(len(buf), len(self._pending))
        buf[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n

    def close(self) -> None:
        self._file.close()
        super().close()


def _open_binary(path: str) -> io.BufferedIOBase:
    if os.path.getsize(path) == 0:
        raise OlmaxError(
            f"{path}: the file is empty (0 bytes), a download or copy cut short?; restore it or "
            "leave it out of the inputs"
        )
    if path.endswith(".gz"):
        # ISA-L's inflate: the same bytes as zlib's at 2-3x the speed (prepare reads .gz at the tokenizer's pace)
        from isal import igzip

        return igzip.open(path, "rb")
    if path.endswith(".zst"):
        return io.BufferedReader(_ZstdFrames(path), buffer_size=1 << 20)
    return open(path, "rb")


# what a reader takes from its file at a time: lines are cut out of these blocks in place (no copy per line)
READ_BYTES = 4 << 20


def _line_spans(f: io.BufferedIOBase) -> Iterator[tuple[bytes, int, int]]:
    """(buffer, start, end) of each line of binary file `f` in order: the line is `buffer[start:end]`, its
    newline included (the last line may have none). Lines are cut out of blocks of READ_BYTES in place; only
    a line that straddles two blocks is copied."""
    head: list[bytes] = []  # the start of a line begun in earlier blocks
    while True:
        block = f.read(READ_BYTES)
        if not block:
            if head:
                line = b"".join(head)
                yield line, 0, len(line)
            return
        start = 0
        if head:
            nl = block.find(b"\n")
            if nl < 0:
                head.append(block)
                continue
            head.append(block[: nl + 1])
            line = b"".join(head)
            head = []
            yield line, 0, len(line)
            start = nl + 1
        last = block.rfind(b"\n") + 1  # just past the block's last newline (0: none)
        while start < last:
            nl = block.find(b"\n", start, last)
            yield block, start, nl + 1
            start = nl + 1
        if start < len(block):
            head.append(block[start:])


def _decode_errors() -> tuple[type[BaseException], ...]:
    """What a corrupt or truncated .gz/.zst raises while it is read."""

    import zstandard
    from isal import isal_zlib

    return (EOFError, zlib.error, isal_zlib.error, zstandard.ZstdError, gzip.BadGzipFile, ValueError)


def _fast_fields(parser, line: memoryview, text_field: str, id_field: str) -> tuple[str, object] | None:
    """(text, id) of a JSON line by simdjson (UTF-8 checked and parsed in one pass; the other fields are
    validated but never made into Python objects) when that is exactly what `json.loads` gives; None sends
    the line down the json path (which also gives the same errors as ever): any simdjson error (NaN, 1e400, integers past 64 bits and lone surrogate escapes are json's
    extensions), a line that is not an object, a key written twice (simdjson finds the first, json keeps
    the last), a text that is not a string, an id that is a float, an array or an object. The caller makes
    sure the line starts with `{` (simdjson skips a byte-order mark, json refuses it)."""
    try:
        obj = parser.parse(line)
    except Exception:  # noqa: BLE001 - whatever simdjson refuses, json decides (and names the error)
        return None
    if not isinstance(obj, simdjson.Object):
        return None
    keys = list(obj.keys())
    if len(set(keys)) != len(keys):
        return None
    text, doc_id = obj.get(text_field), obj.get(id_field)
    if not isinstance(text, str) or not (doc_id is None or isinstance(doc_id, str | int)):
        return None  # (bool is an int: str(True) is json's "True" too)
    return text, doc_id


@dataclass
class Utf8Docs:
    """Documents of a stretch of one jsonl file with their texts as UTF-8, back to back: `docs[i]`'s text is
    `utf8[offsets[i]:offsets[i + 1]]` (its `Doc.text` is "" and never read), followed by the end-of-text
    token's text where `eos[i]` (see `read_jsonl_utf8`); `bad[i]` is the bad lines the reader had counted
    when it read `docs[i]`."""

    docs: list[Doc]
    bad: list[int]
    utf8: bytes
    offsets: np.ndarray
    eos: np.ndarray  # bool, one per document


def corrupt_stream(path: str, lineno: int, offset: int, e: BaseException) -> OlmaxError:
    return OlmaxError(
        f"{path}: corrupt or truncated {path.rsplit('.', 1)[-1]} data after line {lineno}, "
        f"at byte offset {offset} of the decompressed stream ({e}); re-download or "
        "re-compress the file"
    )


def lone_surrogate(doc: Doc, e: UnicodeEncodeError) -> OlmaxError:
    """The error for a document whose text holds a lone surrogate (`e`: its UTF-8 encoding's failure)."""
    return OlmaxError(
        f"{doc.src}:{doc.loc}: document {doc.id!r} holds a lone surrogate escape at "
        f"character {e.start} (not valid Unicode); fix the escape in the JSON"
    )


@dataclass(frozen=True)
class Utf8Form:
    """How `read_jsonl_utf8` hands over texts: `str.strip()`ped when `strip`; followed by `eos` (the end-of-text
    token's text, b"" for none) when not empty, and with `eos_once` not when the text ends with it already."""

    strip: bool = False
    eos: bytes = b""
    eos_once: bool = False

    @property
    def rule(self) -> int:
        """The compiled reader's EOS rule: 0 none, 1 after every non-empty text, 2 not twice."""
        return (2 if self.eos_once else 1) if self.eos else 0

    def text(self, text: str, doc: Doc) -> tuple[bytes, bool]:
        """A text json.loads read, handed over as the compiled reader hands its own: (UTF-8, EOS added)."""
        text = text.strip() if self.strip else text
        try:
            utf8 = text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise lone_surrogate(doc, e) from None
        add = bool(self.rule and utf8 and (self.rule == 1 or not utf8.endswith(self.eos)))
        return (utf8 + self.eos if add else utf8), add


def read_jsonl_utf8(
    path: str,
    text_field: str = "text",
    id_field: str = "id",
    skip_bad_lines: bool = False,
    start_after: int = 0,
    stats: ReadStats | None = None,
    form: Utf8Form = Utf8Form(),
) -> Iterator[Utf8Docs]:
    """`read_jsonl`'s documents (the same ids, locs, texts, skipped lines and errors), with their texts as
    UTF-8 (as `form` says: stripped, EOS after them) and no Python string per text, a block of the file at a
    time: the compiled reader (`native_jsonl`, which must be there) reads every line it can read exactly as
    `json.loads` would and hands back the others, which `json.loads` reads here as in `read_jsonl`. A text
    with a lone surrogate escape (not valid Unicode) is an error naming it."""
    base = os.path.basename(path)
    stats = stats if stats is not None else ReadStats()
    keys = (text_field.encode("utf-8"), id_field.encode("utf-8"))

    def documents(lineno: int, offset: int, scanned: tuple) -> Iterator[Utf8Docs]:
        """The documents of one `native_jsonl.scan` (`scanned`: what it returned; its lines start after
        line `lineno`, at decompressed byte `offset`); the lines it handed back are read by json.loads."""
        texts, ends, items, added = scanned
        docs, bad = [], []
        others: dict[int, tuple[bytes, bool]] = {}  # a document json.loads read: its place → UTF-8, EOS
        for n, item in enumerate(items, lineno + 1):
            if type(item) is not tuple:
                docs.append(Doc(_doc_id(base, n, item), "", path, n))
                bad.append(stats.bad_lines)
                continue
            pos, raw = item
            fields = _json_fields(path, n, offset + pos, raw, skip_bad_lines, stats, (text_field, id_field))
            if fields is None:
                continue
            doc = Doc(_doc_id(base, n, fields[1]), "", path, n)
            others[len(docs)] = form.text(fields[0], doc)
            docs.append(doc)
            bad.append(stats.bad_lines)
        if docs:
            yield _utf8_docs(docs, bad, texts, ends, added, others)

    lineno, offset, head = 0, 0, b""  # lines read, their decompressed bytes, a line begun and not ended
    with _open_binary(path) as f:
        while True:
            try:
                block = f.read(READ_BYTES)
            except _decode_errors() as e:
                raise corrupt_stream(path, lineno, offset, e) from None
            # read up to the block's last newline; at the end of the file, what is left (a last line
            # with no newline)
            last = block.rfind(b"\n") + 1
            if block and not last:
                head += block  # a line longer than the block
                continue
            start = 0
            while lineno < start_after and (head or start < last):  # a resumed run skips what it wrote
                nl = block.find(b"\n", start, last)
                end = nl + 1 if nl >= 0 else last
                offset += len(head) + end - start
                lineno, head, start = lineno + 1, b"", end
            if head or start < last:
                scanned = native_jsonl.scan(block, start, last, head, *keys, form.strip, form.eos, form.rule)
                yield from documents(lineno, offset, scanned)
                lineno += len(scanned[2])
                offset += len(head) + last - start
            if not block:
                return
            head = block[last:]


def _utf8_docs(docs, bad, texts: bytes, ends: bytes, added: bytes, others: dict) -> Utf8Docs:
    """The `Utf8Docs` of one scan: the compiled reader's texts (`texts`, ending at `ends`, EOS after those
    `added` says), with the texts json.loads read (`others`: place → (UTF-8, EOS added)) put in between."""
    ends = np.frombuffer(ends, dtype=np.int64)
    flags = np.frombuffer(added, dtype=np.bool_)
    offsets = np.zeros(len(docs) + 1, dtype=np.int64)
    if not others:
        offsets[1:] = ends
        return Utf8Docs(docs, bad, texts, offsets, flags)
    # the texts json.loads read go between the others (a copy of the block's texts: rare)
    view, parts, eos_at, k = memoryview(texts), [], [], 0
    for i in range(len(docs)):
        if i in others:
            utf8, add = others[i]
        else:
            utf8, add = view[int(ends[k - 1]) if k else 0 : int(ends[k])], bool(flags[k])
            k += 1
        parts.append(utf8)
        eos_at.append(add)
    offsets[1:] = np.cumsum([len(part) for part in parts])
    return Utf8Docs(docs, bad, b"".join(parts), offsets, np.array(eos_at, dtype=np.bool_))


def _jsonl_lines(path: str, start_after: int = 0) -> Iterator[tuple[int, int, bytes, int, int]]:
    """(1-based line, byte offset, buffer, start, end) of every line of a jsonl file after line
    `start_after` (the offset is the line's in the decompressed stream); a corrupt or truncated .gz/.zst
    raises OlmaxError naming the last whole line read."""
    offset, lineno = 0, 0
    with _open_binary(path) as f:
        spans = _line_spans(f)
        while True:
            try:
                buf, start, end = next(spans)
            except StopIteration:
                return
            except _decode_errors() as e:
                raise corrupt_stream(path, lineno, offset, e) from None
            lineno += 1
            line_offset, offset = offset, offset + end - start
            if lineno > start_after:
                yield lineno, line_offset, buf, start, end


def _json_object(
    path: str, lineno: int, line_offset: int, raw: bytes, fix: str, skip_bad_lines: bool, stats: ReadStats
) -> dict | None:
    """The object of one JSON line by `json.loads`, None for a blank line or a bad line skipped and
    counted (`skip_bad_lines`); otherwise a bad line raises OlmaxError naming the file, the line (and the
    byte offset for bad UTF-8), ending with `fix`."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        where = f"{path}:{lineno}: invalid UTF-8 at byte offset {line_offset + e.start}"
        if path.endswith((".gz", ".zst")):
            where += " of the decompressed stream"
        raise OlmaxError(f"{where} ({e.reason}); re-encode the file as UTF-8") from None
    if not line.strip():
        return None
    try:
        obj = json.loads(line.rstrip("\r\n"))  # without its newline: an error's column is on this line
        if not isinstance(obj, dict):
            raise ValueError("a JSON line must be an object")
    except ValueError as e:
        why = json_error(e) if isinstance(e, json.JSONDecodeError) else str(e)
        msg = f"{path}:{lineno}: malformed JSON line ({why})"
        if not skip_bad_lines:
            raise OlmaxError(f"{msg}; {fix}") from None
        stats.bad_lines += 1
        if len(stats.bad_line_examples) < 5:
            stats.bad_line_examples.append(msg)
        return None
    return obj


def _jsonl_objects(
    path: str,
    fix: str,
    skip_bad_lines: bool = False,
    start_after: int = 0,
    stats: ReadStats | None = None,
) -> Iterator[tuple[int, dict]]:
    """(1-based line, object) of every non-blank line of a jsonl file after line `start_after`, by
    `json.loads`; a bad line raises OlmaxError naming the file, the line (and the byte offset for bad
    UTF-8), ending with `fix`."""
    stats = stats if stats is not None else ReadStats()
    for lineno, line_offset, buf, start, end in _jsonl_lines(path, start_after):
        obj = _json_object(path, lineno, line_offset, buf[start:end], fix, skip_bad_lines, stats)
        if obj is not None:
            yield lineno, obj


def read_jsonl(
    path: str,
    text_field: str = "text",
    id_field: str = "id",
    skip_bad_lines: bool = False,
    start_after: int = 0,
    stats: ReadStats | None = None,
) -> Iterator[Doc]:
    """Documents of a Dolma-format jsonl file, from line `start_after + 1` on. Each line is read by
    simdjson where that gives `json.loads`' result (`_fast_fields`), by `json.loads` otherwise."""
    base = os.path.basename(path)
    stats = stats if stats is not None else ReadStats()
    parser = simdjson.Parser()
    view_of, view = None, memoryview(b"")
    for lineno, line_offset, buf, start, end in _jsonl_lines(path, start_after):
        fields = None
        if buf[start] == 0x7B:  # "{"
            if buf is not view_of:
                view_of, view = buf, memoryview(buf)
            fields = _fast_fields(parser, view[start:end], text_field, id_field)
        if fields is None:
            raw = buf[start:end]
            fields = _json_fields(
                path, lineno, line_offset, raw, skip_bad_lines, stats, (text_field, id_field)
            )
            if fields is None:
                continue
        yield Doc(_doc_id(base, lineno, fields[1]), fields[0], path, lineno)


_BAD_LINE_FIX = "fix it or pass --skip-bad-lines to skip and count such lines"


def _json_fields(
    path: str, lineno: int, line_offset: int, raw: bytes, skip_bad_lines: bool, stats: ReadStats, keys
) -> tuple[str, object] | None:
    """(text, id) of a document line read by `json.loads` (`keys`: the text and id fields' names), None for
    a blank line or a bad one skipped and counted; a line with no string text is an error naming it."""
    obj = _json_object(path, lineno, line_offset, raw, _BAD_LINE_FIX, skip_bad_lines, stats)
    if obj is None:
        return None
    text, doc_id = obj.get(keys[0]), obj.get(keys[1])
    if not isinstance(text, str):
        what = "has no" if text is None else "has a non-string"
        raise OlmaxError(
            f"{path}:{lineno}: document {what} {keys[0]!r} field "
            f"(keys: {', '.join(sorted(obj))[:200]}); use --text-field to name another"
        )
    return text, doc_id


def _doc_id(base: str, lineno: int, doc_id: object) -> str:
    """A document's id: its id field as `str` gives it, or FILE:LINE when it has none."""
    return f"{base}:{lineno}" if doc_id is None else str(doc_id)


def _open_table(path: str):
    """A pyarrow Table over a `datasets` folder (memory-mapped), an `.arrow` file or a `.parquet` file; an
    unreadable one raises OlmaxError naming the file (for a folder, the first data file that fails)."""
    import pyarrow as pa

    try:
        return _load_table(path)
    except (pa.ArrowException, OSError, ValueError) as e:
        if not os.path.isdir(path):
            raise OlmaxError(
                f"{path}: not a readable {path.rsplit('.', 1)[-1]} file, truncated or corrupt ({e}); "
                "re-download or re-export it"
            ) from None
        for name in ("state.json", "dataset_info.json"):
            try:
                json.loads(Path(path, name).read_text(encoding="utf-8"))
            except (OSError, ValueError) as bad:
                raise OlmaxError(
                    f"{path}: not a readable datasets folder: {name} is missing or corrupt ({bad}); "
                    "write the folder again with Dataset.save_to_disk"
                ) from None
        for data in sorted(Path(path).glob("*.arrow")):
            try:
                _load_table(str(data))
            except (pa.ArrowException, OSError, ValueError) as bad:
                raise OlmaxError(
                    f"{data}: truncated or corrupt data file of the datasets folder {path} ({bad}); "
                    "write the folder again with Dataset.save_to_disk"
                ) from None
        raise OlmaxError(f"{path}: not a readable datasets folder ({e})") from None


def _load_table(path: str):
    if os.path.isdir(path):
        return _datasets_folder_table(path)
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        return pq.read_table(path)
    return _arrow_stream(path)


def _arrow_stream(path: str):
    """One Arrow stream file (what `datasets` writes), memory-mapped: `datasets.Dataset.from_file`'s table
    without importing `datasets` (a second of start-up)."""
    import pyarrow as pa

    with pa.memory_map(path) as src:
        return pa.ipc.open_stream(src).read_all()


def _datasets_folder_table(path: str):
    """A `Dataset.save_to_disk` folder's table: the Arrow stream files its state.json lists, in order, as
    `datasets.load_from_disk` reads them."""
    import pyarrow as pa

    if os.path.exists(os.path.join(path, "dataset_dict.json")):
        splits = json.loads(Path(path, "dataset_dict.json").read_text(encoding="utf-8")).get("splits")
        raise OlmaxError(f"{path} is a DatasetDict with splits {splits}; pass one split's folder")
    state = json.loads(Path(path, "state.json").read_text(encoding="utf-8"))
    # load_from_disk needs dataset_info.json whole too: a corrupt one is an error here as there
    json.loads(Path(path, "dataset_info.json").read_text(encoding="utf-8"))
    if state.get("_indices_data_files"):  # a view through an indices mapping: datasets applies it
        import datasets

        return datasets.load_from_disk(path).flatten_indices().data.table
    try:
        files = [str(f["filename"]) for f in state.get("_data_files") or []]
    except (KeyError, TypeError, AttributeError):
        raise ValueError("state.json's _data_files are not {filename: ...} entries") from None
    if not files:
        raise ValueError("state.json lists no _data_files")
    tables = [_arrow_stream(os.path.join(path, name)) for name in files]
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def read_table(
    path: str, text_field: str = "text", id_field: str = "id", start_after: int = 0, batch_rows: int = 1024
) -> Iterator[Doc]:
    """Documents of an HF `datasets` folder, `.arrow` file or `.parquet` file (row order, 1-based `loc`)."""
    table = _open_table(path)
    columns = list(table.column_names)
    if text_field not in columns:
        raise OlmaxError(
            f"{path}: no {text_field!r} column (columns: {', '.join(columns)}); use --text-field"
        )
    has_id = id_field in columns
    base = os.path.basename(path.rstrip("/"))
    for start in range(start_after, table.num_rows, batch_rows):
        chunk = table.slice(start, batch_rows)
        texts = chunk.column(text_field).to_pylist()
        ids = chunk.column(id_field).to_pylist() if has_id else None
        for i, text in enumerate(texts):
            row = start + i + 1
            if not isinstance(text, str):
                raise OlmaxError(
                    f"{path}: row {row} has a non-string {text_field!r} value ({type(text).__name__})"
                )
            yield Doc(str(ids[i]) if has_id else f"{base}:{row}", text, path, row)


def read_rows(path: str, batch_rows: int = 1024) -> Iterator[tuple[int, dict]]:
    """(loc, record) of every record of one input, whatever its fields: the 1-based line of a jsonl file
    or row of a table (`datasets` folder, `.arrow`, `.parquet`), each as a dict of all its fields."""
    if not is_table(path):
        yield from _jsonl_objects(path, "each line must be one JSON object")
        return
    table = _open_table(path)
    for start in range(0, table.num_rows, batch_rows):
        for i, row in enumerate(table.slice(start, batch_rows).to_pylist()):
            yield start + i + 1, row


def read_documents(
    path: str,
    text_field: str = "text",
    id_field: str = "id",
    skip_bad_lines: bool = False,
    start_after: int = 0,
    stats: ReadStats | None = None,
) -> Iterator[Doc]:
    """Dispatch on the input's kind; see `read_jsonl` and `read_table`. An fsspec URL is read from a local
    copy; its documents and errors name the URL."""

    if storage.local_path(path) is None:
        with storage.local_copy(path) as local:
            try:
                for doc in read_documents(local, text_field, id_field, skip_bad_lines, start_after, stats):
                    yield Doc(doc.id, doc.text, path, doc.loc)
            except OlmaxError as e:
                raise OlmaxError(str(e).replace(local, path)) from None
            finally:
                if stats is not None:
                    stats.bad_line_examples[:] = [m.replace(local, path) for m in stats.bad_line_examples]
        return
    if is_table(path):
        yield from read_table(path, text_field, id_field, start_after)
    else:
        yield from read_jsonl(path, text_field, id_field, skip_bad_lines, start_after, stats)

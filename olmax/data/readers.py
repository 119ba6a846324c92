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

import orjson

from olmax import storage
from olmax.errors import OlmaxError
from olmax.jsonio import json_error

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

        # read through a 1 MiB buffer: lines are cut from it, not from igzip's own small reads (a quarter
        # less CPU to iterate over a file's lines)
        return io.BufferedReader(igzip.open(path, "rb"), buffer_size=1 << 20)
    if path.endswith(".zst"):
        return io.BufferedReader(_ZstdFrames(path), buffer_size=1 << 20)
    return open(path, "rb")


def _decode_errors() -> tuple[type[BaseException], ...]:
    """What a corrupt or truncated .gz/.zst raises while it is read."""

    import zstandard
    from isal import isal_zlib

    return (EOFError, zlib.error, isal_zlib.error, zstandard.ZstdError, gzip.BadGzipFile, ValueError)


def _fast_object(raw: bytes, id_field: str) -> dict | None:
    """The object of a JSON line by orjson (UTF-8 checked and parsed in one pass, at twice json's speed)
    when it is exactly what `json.loads` gives; None sends the line down the json path (which also gives
    the same errors as ever): a line not starting with `{`, any orjson error (NaN, 1e400 and lone surrogate
    escapes are json's extensions), and an id orjson read as a float (it reads an integer past 64 bits as
    one)."""
    if raw[:1] != b"{":
        return None
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return None if isinstance(obj.get(id_field), float) else obj


def _jsonl_objects(
    path: str,
    fix: str,
    skip_bad_lines: bool = False,
    start_after: int = 0,
    stats: ReadStats | None = None,
    fast_id_field: str | None = None,
) -> Iterator[tuple[int, dict]]:
    """(1-based line, object) of every non-blank line of a jsonl file after line `start_after`; a bad line
    raises OlmaxError naming the file, the line (and the byte offset for bad UTF-8), ending with `fix`.
    `fast_id_field`: parse with orjson where it gives json's result (`_fast_object`), this being the id."""
    stats = stats if stats is not None else ReadStats()
    offset, lineno = 0, 0
    with _open_binary(path) as f:
        lines = iter(f)
        while True:
            try:
                raw = next(lines)
            except StopIteration:
                break
            except _decode_errors() as e:
                raise OlmaxError(
                    f"{path}: corrupt or truncated {path.rsplit('.', 1)[-1]} data after line {lineno}, "
                    f"at byte offset {offset} of the decompressed stream ({e}); re-download or "
                    "re-compress the file"
                ) from None
            lineno += 1
            line_offset, offset = offset, offset + len(raw)
            if lineno <= start_after:
                continue
            obj = None if fast_id_field is None else _fast_object(raw, fast_id_field)
            if obj is not None:
                yield lineno, obj
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                where = f"{path}:{lineno}: invalid UTF-8 at byte offset {line_offset + e.start}"
                if path.endswith((".gz", ".zst")):
                    where += " of the decompressed stream"
                raise OlmaxError(f"{where} ({e.reason}); re-encode the file as UTF-8") from None
            if not line.strip():
                continue
            try:
                obj = json.loads(
                    line.rstrip("\r\n")
                )  # without its newline: an error's column is on this line
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
                continue
            yield lineno, obj


def read_jsonl(
    path: str,
    text_field: str = "text",
    id_field: str = "id",
    skip_bad_lines: bool = False,
    start_after: int = 0,
    stats: ReadStats | None = None,
) -> Iterator[Doc]:
    """Documents of a Dolma-format jsonl file, from line `start_after + 1` on."""
    base = os.path.basename(path)
    fix = "fix it or pass --skip-bad-lines to skip and count such lines"
    for lineno, obj in _jsonl_objects(path, fix, skip_bad_lines, start_after, stats, id_field):
        text = obj.get(text_field)
        if not isinstance(text, str):
            what = "has no" if text is None else "has a non-string"
            raise OlmaxError(
                f"{path}:{lineno}: document {what} {text_field!r} field "
                f"(keys: {', '.join(sorted(obj))[:200]}); use --text-field to name another"
            )
        doc_id = obj.get(id_field)
        doc_id = f"{base}:{lineno}" if doc_id is None else str(doc_id)
        yield Doc(doc_id, text, path, lineno)


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
    if not (os.path.isdir(path) or path.endswith(TABLE_SUFFIXES)):
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
    if os.path.isdir(path) or path.endswith(TABLE_SUFFIXES):
        yield from read_table(path, text_field, id_field, start_after)
    else:
        yield from read_jsonl(path, text_field, id_field, skip_bad_lines, start_after, stats)

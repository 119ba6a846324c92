"""Document readers for prepare: Dolma jsonl (.jsonl, .jsonl.gz, .jsonl.zst) and HF `datasets` folders.

Every reader yields `Doc(id, text, src, loc)` in file order, `loc` being the 1-based line (jsonl) or row
(datasets), so a resumed run can skip exactly the documents it already wrote. Bad input raises
`OlmaxError` naming the file, the line and the byte offset (of the decompressed stream for .gz/.zst).
"""

from __future__ import annotations

import glob
import gzip
import io
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from olmax.errors import OlmaxError

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


def expand_inputs(spec: str) -> list[str]:
    """A path, a glob or a folder → a sorted list of input files (a `datasets` folder stays one input)."""
    p = Path(spec).expanduser()
    if p.is_dir():
        if (p / "dataset_info.json").exists() or (p / "state.json").exists():
            return [str(p)]
        files = sorted(str(f) for f in p.rglob("*") if f.is_file() and f.name.endswith(JSONL_SUFFIXES + TABLE_SUFFIXES))
    elif p.is_file():
        files = [str(p)]
    else:
        files = sorted(f for f in glob.glob(os.path.expanduser(spec), recursive=True) if os.path.isfile(f))
    if not files:
        raise OlmaxError(f"input {spec!r} matches no file (expected .jsonl[.gz|.zst], .arrow, .parquet or a "
                         "datasets folder)")
    return files


def _open_binary(path: str) -> io.BufferedIOBase:
    if path.endswith(".gz"):
        return gzip.open(path, "rb")
    if path.endswith(".zst"):
        import zstandard

        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), closefd=True))
    return open(path, "rb")


def read_jsonl(path: str, text_field: str = "text", id_field: str = "id", skip_bad_lines: bool = False,
               start_after: int = 0, stats: ReadStats | None = None) -> Iterator[Doc]:
    """Documents of a Dolma-format jsonl file, from line `start_after + 1` on."""
    stats = stats if stats is not None else ReadStats()
    base = os.path.basename(path)
    offset = 0
    with _open_binary(path) as f:
        for lineno, raw in enumerate(f, start=1):
            line_offset, offset = offset, offset + len(raw)
            if lineno <= start_after:
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
                obj = json.loads(line)
                if not isinstance(obj, dict):
                    raise ValueError("a JSON line must be an object")
            except ValueError as e:
                col = getattr(e, "colno", None)
                msg = f"{path}:{lineno}: malformed JSON line" + (f" (column {col}: {e.msg})" if col else f" ({e})")
                if not skip_bad_lines:
                    raise OlmaxError(msg + "; fix it or pass --skip-bad-lines to skip and count such lines") from None
                stats.bad_lines += 1
                if len(stats.bad_line_examples) < 5:
                    stats.bad_line_examples.append(msg)
                continue
            text = obj.get(text_field)
            if not isinstance(text, str):
                what = "has no" if text is None else "has a non-string"
                raise OlmaxError(f"{path}:{lineno}: document {what} {text_field!r} field "
                                 f"(keys: {', '.join(sorted(obj))[:200]}); use --text-field to name another")
            doc_id = obj.get(id_field)
            doc_id = f"{base}:{lineno}" if doc_id is None else str(doc_id)
            yield Doc(doc_id, text, path, lineno)


def _open_table(path: str):
    """A pyarrow Table over a `datasets` folder (memory-mapped), an `.arrow` file or a `.parquet` file."""
    if os.path.isdir(path):
        import datasets

        ds = datasets.load_from_disk(path)
        if isinstance(ds, datasets.DatasetDict):
            raise OlmaxError(f"{path} is a DatasetDict with splits {list(ds.keys())}; pass one split's folder")
        if ds._indices is not None:
            ds = ds.flatten_indices()
        return ds.data.table
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        return pq.read_table(path)
    import datasets

    return datasets.Dataset.from_file(path).data.table


def read_table(path: str, text_field: str = "text", id_field: str = "id", start_after: int = 0,
               batch_rows: int = 1024) -> Iterator[Doc]:
    """Documents of an HF `datasets` folder, `.arrow` file or `.parquet` file (row order, 1-based `loc`)."""
    table = _open_table(path)
    columns = list(table.column_names)
    if text_field not in columns:
        raise OlmaxError(f"{path}: no {text_field!r} column (columns: {', '.join(columns)}); use --text-field")
    has_id = id_field in columns
    base = os.path.basename(path.rstrip("/"))
    for start in range(start_after, table.num_rows, batch_rows):
        chunk = table.slice(start, batch_rows)
        texts = chunk.column(text_field).to_pylist()
        ids = chunk.column(id_field).to_pylist() if has_id else None
        for i, text in enumerate(texts):
            row = start + i + 1
            if not isinstance(text, str):
                raise OlmaxError(f"{path}: row {row} has a non-string {text_field!r} value ({type(text).__name__})")
            yield Doc(str(ids[i]) if has_id else f"{base}:{row}", text, path, row)


def read_documents(path: str, text_field: str = "text", id_field: str = "id", skip_bad_lines: bool = False,
                   start_after: int = 0, stats: ReadStats | None = None) -> Iterator[Doc]:
    """Dispatch on the input's kind; see `read_jsonl` and `read_table`."""
    if os.path.isdir(path) or path.endswith(TABLE_SUFFIXES):
        yield from read_table(path, text_field, id_field, start_after)
    else:
        yield from read_jsonl(path, text_field, id_field, skip_bad_lines, start_after, stats)

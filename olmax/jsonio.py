"""JSON and JSONL files: strict JSON out (atomic whole files, appended lines), torn-tail-tolerant JSONL in.

One policy for every report and log olmax writes: strict JSON, so any reader parses it. NaN and
±inf become null; numpy scalars and arrays become Python numbers and lists; tuples and sets become
lists (sets sorted); paths become strings. A whole file is written atomically (olmax.atomic). A JSONL
file is appended one line per record; its reader skips a torn last line (a writer killed mid-line, the
only line that can lack its newline) and names `file:line` for any other malformed line.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from olmax.atomic import write_text
from olmax.errors import OlmaxError


def plain(obj: Any) -> Any:
    """`obj` as strict-JSON-ready Python values (see the module docstring)."""
    if isinstance(obj, str | bool | int | None):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {_key(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [plain(v) for v in obj]
    if isinstance(obj, set | frozenset):
        return [plain(v) for v in sorted(obj, key=repr)]
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if hasattr(obj, "tolist"):  # a numpy scalar or array
        return plain(obj.tolist())
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def _key(k: Any) -> Any:
    return k.tolist() if hasattr(k, "tolist") and not isinstance(k, str) else k


def dumps(obj: Any, indent: int | None = None) -> str:
    """Strict JSON text of `obj` (one line when `indent` is None)."""
    return json.dumps(plain(obj), indent=indent, allow_nan=False)


def write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> Path:
    """Write `obj` as strict JSON to `path` atomically (indented unless `indent` is None), newline-ended."""
    return write_text(path, dumps(obj, indent) + "\n")


def write_jsonl(path: str | os.PathLike, records: Iterable[Any]) -> Path:
    """Write a whole JSONL file atomically, one strict-JSON line per record."""
    return write_text(path, "".join(dumps(r) + "\n" for r in records))


def append_jsonl(path: str | os.PathLike, records: Iterable[Any]) -> None:
    """Append one strict-JSON line per record. A file left ending mid-line (a torn tail) gets a newline
    first, so the new records stay whole and the torn line is reported by `read_jsonl`, not merged."""
    text = "".join(dumps(r) + "\n" for r in records)
    path = Path(path)
    with open(path, "a+b") as f:
        if f.tell() > 0:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                text = "\n" + text
        f.write(text.encode("utf-8"))


ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def json_error(e: json.JSONDecodeError) -> str:
    """`column C: REASON` for a JSON decode error, the reason in full: Python's message cut before its
    position ("Invalid control character at") completed with what was found there and what JSON needs.
    The caller names the line (a JSONL line is decoded on its own, so the decoder's line is 1)."""
    doc, pos = e.doc, e.pos
    found = doc[pos] if 0 <= pos < len(doc) else ""
    if e.msg.startswith("Invalid control character") and found:
        escaped = ESCAPES.get(found, f"\\u{ord(found):04x}")
        reason = (
            f"a raw control character {found!r} (U+{ord(found):04X}) inside a string; JSON needs it "
            f"escaped as {escaped}"
        )
    elif e.msg.startswith("Unterminated string"):
        reason = "a string starts here and never ends (a missing closing quote, or a line cut short)"
    elif e.msg == "Extra data":
        reason = f"more text after a whole JSON value ({doc[pos : pos + 20]!r}); one value per line"
    else:
        at = doc[pos : pos + 20].rstrip("\n")
        reason = e.msg[:1].lower() + e.msg[1:] + (f", found {at!r}" if at else ", found the end of the line")
    return f"column {e.colno}: {reason}"


def read_jsonl(path: str | os.PathLike) -> list[Any]:
    """Every value of a JSONL file, in order; blank lines are skipped, and so is a torn last line (one
    without its newline that does not parse). Any other malformed line raises OlmaxError `file:line`."""
    path = Path(path)
    try:
        data = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise OlmaxError(f"{path}: not found") from None
    lines = data.split("\n")  # the last element is "" when the file ends with a newline
    out = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except ValueError as e:
            if lineno == len(lines):  # no newline after it: cut by a kill mid-write, all before it is whole
                break
            why = json_error(e) if isinstance(e, json.JSONDecodeError) else str(e)
            raise OlmaxError(
                f"{path}:{lineno}: malformed JSON line ({why}); fix or remove that line"
            ) from None
    return out


def read_json(path: str | os.PathLike, what: str) -> Any:
    """The JSON value in `path`; OlmaxError naming the file and `what` was expected when absent or invalid."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise OlmaxError(f"{path}: not found ({what})") from None
    except json.JSONDecodeError as e:
        raise OlmaxError(f"{path}:{e.lineno}: invalid JSON ({json_error(e)}); expected {what}") from None
    except ValueError as e:
        raise OlmaxError(f"{path}: invalid JSON ({e}); expected {what}") from None

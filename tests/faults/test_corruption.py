"""The corruption suite: every bad input a user can feed olmax gets one clean error line, exit 2, no traceback.

Each case builds a small bad input in a temporary folder, runs the real CLI (`olmax.cli.main`, in
process: an exception other than OlmaxError escapes and fails the test with its traceback) and asserts:
the exit status, exactly one stderr line `olmax: error: ...` that names the file (and the line, byte,
row or token offset where one applies), no "Traceback" in the output, and that the command's outputs are
absent or byte-identical to what was there before (a pre-existing `--out` file is planted to check it).
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from olmax.cli import main
from olmax.data.loader import open_loader
from olmax.testing.prepare_testdata import stdlib_texts, write_jsonl
from tests.audit.audit_testdata import write_shard

OLD_REPORT = b'{"previous": "report"}\n'


@dataclass
class Case:
    """A command over a bad input and what its one error line must say."""

    argv: list[str]
    names: list[str]  # substrings the error line must contain (the file, the field, ...)
    offset: str | None = None  # a regex the error line must match (the line / byte / row / token offset)
    outputs: list[Path] = field(default_factory=list)  # must be absent or unchanged afterwards
    code: int = 2


CASES: dict[str, Callable[[Path], Case]] = {}


def case(name: str):
    def register(build: Callable[[Path], Case]) -> Callable[[Path], Case]:
        assert name not in CASES, name
        CASES[name] = build
        return build

    return register


def snapshot(paths: list[Path]) -> dict[str, bytes | None]:
    """Every file under `paths` (a file or a folder) and its bytes; None for an absent path."""
    out: dict[str, bytes | None] = {}
    for p in paths:
        if p.is_dir():
            out.update({str(f): f.read_bytes() for f in sorted(p.rglob("*")) if f.is_file()})
            out[str(p)] = b"<dir>"
        else:
            out[str(p)] = p.read_bytes() if p.exists() else None
    return out


# ---------------------------------------------------------------------------------------------------
# documents → `olmax data prepare`

DOCS = [(i, t[:3000]) for i, t in stdlib_texts(6)]
LINE = r"(line|:)\s?\d+"
BYTE = r"byte( offset)? \d+"


def jsonl_bytes(docs=DOCS, extra: tuple[bytes, ...] = ()) -> bytes:
    lines = [json.dumps({"id": i, "text": t}).encode() for i, t in docs] + list(extra)
    return b"\n".join(lines) + b"\n"


def zst(data: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor().compress(data)


def prepare_case(
    tmp: Path,
    name: str,
    data: bytes | None = None,
    *,
    label: str = "web",
    offset: str | None = None,
    names: tuple[str, ...] = (),
    extra: tuple[str, ...] = (),
    target: str | None = None,
) -> Case:
    """`olmax data prepare` of one input file holding `data`; the output folder must stay absent."""
    src = tmp / "raw" / name
    if data is not None:
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_bytes(data)
    out = tmp / "out"
    argv = [
        "data",
        "prepare",
        "--no-progress",
        "--tokenizer",
        "dolma2",
        "--out",
        str(out),
        *extra,
        f"{label}={target or src}",
    ]
    return Case(argv, [src.name, *names], offset, [out])


@case("doc-gz-truncated")
def _(tmp):
    data = gzip.compress(jsonl_bytes(), mtime=0)
    return prepare_case(tmp, "a.jsonl.gz", data[: len(data) // 2], offset=BYTE)


@case("doc-gz-truncated-header")
def _(tmp):
    return prepare_case(tmp, "a.jsonl.gz", gzip.compress(jsonl_bytes(), mtime=0)[:6], offset=BYTE)


@case("doc-gz-bad-crc")
def _(tmp):
    data = bytearray(gzip.compress(jsonl_bytes(), mtime=0))
    data[-8:-4] = bytes(b ^ 0xFF for b in data[-8:-4])
    return prepare_case(tmp, "a.jsonl.gz", bytes(data), offset=BYTE)


@case("doc-gz-corrupt-block")
def _(tmp):
    data = bytearray(gzip.compress(jsonl_bytes(), mtime=0))
    for k in range(200, 260):
        data[k] ^= 0x5A
    return prepare_case(tmp, "a.jsonl.gz", bytes(data))


@case("doc-gz-not-gzip")
def _(tmp):
    return prepare_case(tmp, "a.jsonl.gz", jsonl_bytes(), offset=BYTE)


@case("doc-gz-trailing-garbage")
def _(tmp):
    return prepare_case(tmp, "a.jsonl.gz", gzip.compress(jsonl_bytes(), mtime=0) + b"garbage!", offset=BYTE)


@case("doc-zst-truncated")
def _(tmp):
    data = zst(jsonl_bytes())
    return prepare_case(tmp, "a.jsonl.zst", data[: len(data) // 2], offset=BYTE)


@case("doc-zst-bad-frame")
def _(tmp):
    data = bytearray(zst(jsonl_bytes()))
    for k in range(40, 120):
        data[k] ^= 0xA5
    return prepare_case(tmp, "a.jsonl.zst", bytes(data), offset=BYTE)


@case("doc-zst-bad-second-frame")
def _(tmp):
    second = bytearray(zst(jsonl_bytes(DOCS[:2])))
    for k in range(20, 60):
        second[k] ^= 0xA5
    return prepare_case(tmp, "a.jsonl.zst", zst(jsonl_bytes()) + bytes(second), offset=BYTE)


@case("doc-zst-not-zstd")
def _(tmp):
    return prepare_case(tmp, "a.jsonl.zst", jsonl_bytes(), offset=BYTE)


@case("doc-zst-empty-file")
def _(tmp):
    return prepare_case(tmp, "a.jsonl.zst", b"", names=("empty",))


@case("doc-gz-empty-file")
def _(tmp):
    return prepare_case(tmp, "a.jsonl.gz", b"", names=("empty",))


@case("doc-empty-file")
def _(tmp):
    return prepare_case(tmp, "a.jsonl", b"", names=("empty",))


@case("doc-only-blank-lines")
def _(tmp):
    return prepare_case(tmp, "a.jsonl", b"\n  \n\n", names=("no documents",))


@case("doc-non-utf8")
def _(tmp):
    bad = b'{"id": "x", "text": "caf\xe9 au lait"}'
    return prepare_case(
        tmp, "a.jsonl", jsonl_bytes(extra=(bad,)), offset=r":7: invalid UTF-8 at byte offset \d+"
    )


@case("doc-non-utf8-gz")
def _(tmp):
    bad = b'{"id": "x", "text": "\xff\xfe"}'
    data = gzip.compress(jsonl_bytes(extra=(bad,)), mtime=0)
    return prepare_case(
        tmp, "a.jsonl.gz", data, offset=r":7: invalid UTF-8 at byte offset \d+ of the decompressed"
    )


@case("doc-non-utf8-zst")
def _(tmp):
    return prepare_case(
        tmp, "a.jsonl.zst", zst(b'{"id": "x", "text": "\xc3("}\n'), offset=r":1: invalid UTF-8"
    )


@case("doc-utf16-bom")
def _(tmp):
    return prepare_case(tmp, "a.jsonl", jsonl_bytes(DOCS[:1]).decode().encode("utf-16"), offset=r":1: ")


@case("doc-nul-in-line")
def _(tmp):
    return prepare_case(
        tmp,
        "a.jsonl",
        jsonl_bytes(extra=(b'{"id": "x", "text": "a\x00b"}',)),
        offset=r":7: malformed JSON line \(column \d+",
    )


@case("doc-nul-block")
def _(tmp):
    # a file preallocated and never written (a crash mid-copy): NUL bytes where lines should be
    return prepare_case(tmp, "a.jsonl", jsonl_bytes(DOCS[:2]) + b"\x00" * 4096, offset=r":3: malformed JSON")


@case("doc-long-line-malformed")
def _(tmp):
    # one 20 MB line cut short: the error names the line and stays one short line
    data = b'{"id": "x", "text": "' + b"abcdefgh " * (20 * 1024 * 1024 // 9)
    return prepare_case(tmp, "a.jsonl", jsonl_bytes(DOCS[:1]) + data, offset=r":2: malformed JSON")


@pytest.mark.slow
def test_a_200_mb_single_line_cut_short_is_one_short_error(tmp_path: Path, capsys) -> None:
    """The size a user met: one 200 MB line, cut short (the 20 MB case runs in the default suite)."""
    data = b'{"id": "x", "text": "' + b"abcdefgh " * (200 * 1024 * 1024 // 9)
    c = prepare_case(tmp_path, "a.jsonl", jsonl_bytes(DOCS[:1]) + data, offset=r":2: malformed JSON")
    del data
    capsys.readouterr()
    assert main(c.argv) == 2
    cap = capsys.readouterr()
    lines = [ln for ln in cap.err.splitlines() if ln.strip()]
    assert "Traceback" not in cap.err and len(lines) == 1 and len(lines[0]) < 1000, cap.err[:2000]
    assert lines[0].startswith("olmax: error: ") and "a.jsonl" in lines[0] and re.search(c.offset, lines[0])
    assert not (tmp_path / "out").exists()


@case("doc-truncated-last-line")
def _(tmp):
    data = jsonl_bytes()
    return prepare_case(tmp, "a.jsonl", data[:-40], offset=r":6: malformed JSON")


for _kind, _raw in {
    "list": b"[1, 2]",
    "string": b'"just text"',
    "number": b"42",
    "null": b"null",
    "true": b"true",
}.items():

    def _not_object(tmp, raw=_raw):
        return prepare_case(
            tmp, "a.jsonl", jsonl_bytes(DOCS[:2], extra=(raw,)), offset=r":3: ", names=("object",)
        )

    case(f"doc-json-not-object-{_kind}")(_not_object)

for _kind, _val in {"int": 42, "null": None, "list": ["a"], "dict": {"t": "a"}, "bool": True}.items():

    def _text_not_str(tmp, val=_val):
        bad = json.dumps({"id": "x", "text": val}).encode()
        return prepare_case(
            tmp, "a.jsonl", jsonl_bytes(DOCS[:3], extra=(bad,)), offset=r":4: ", names=("'text'",)
        )

    case(f"doc-text-not-string-{_kind}")(_text_not_str)


@case("doc-text-field-missing")
def _(tmp):
    return prepare_case(
        tmp, "a.jsonl", jsonl_bytes(extra=(b'{"id": "x", "body": "a"}',)), offset=r":7: ", names=("'text'",)
    )


@case("doc-input-missing")
def _(tmp):
    return prepare_case(tmp, "nothing-here.jsonl", None, names=("matches no file",))


def _table(n: int = 20):
    import pyarrow as pa

    return pa.table(
        {"id": [f"d{i}" for i in range(n)], "text": [f"document number {i} " * 20 for i in range(n)]}
    )


def _parquet_bytes(table) -> bytes:
    import io

    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def _arrow_bytes(table) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


@case("doc-parquet-truncated")
def _(tmp):
    data = _parquet_bytes(_table())
    return prepare_case(tmp, "a.parquet", data[: len(data) // 2])


@case("doc-parquet-not-parquet")
def _(tmp):
    return prepare_case(tmp, "a.parquet", jsonl_bytes())


@case("doc-parquet-text-not-string")
def _(tmp):
    import pyarrow as pa

    return prepare_case(
        tmp,
        "a.parquet",
        _parquet_bytes(pa.table({"id": ["a"], "text": [3]})),
        offset=r"row 1",
        names=("'text'",),
    )


@case("doc-parquet-no-text-column")
def _(tmp):
    import pyarrow as pa

    return prepare_case(
        tmp, "a.parquet", _parquet_bytes(pa.table({"id": ["a"], "body": ["x"]})), names=("'text'",)
    )


@case("doc-arrow-truncated")
def _(tmp):
    data = _arrow_bytes(_table(200))
    return prepare_case(tmp, "a.arrow", data[: len(data) // 2])


@case("doc-arrow-not-arrow")
def _(tmp):
    return prepare_case(tmp, "a.arrow", b"\x00\x01not an arrow stream at all" * 10)


def _datasets_folder(tmp: Path) -> Path:
    import datasets

    folder = tmp / "raw" / "ds"
    datasets.Dataset.from_dict({"id": ["a", "b"], "text": ["one doc", "two doc"]}).save_to_disk(str(folder))
    return folder


@case("doc-datasets-missing-state")
def _(tmp):
    folder = _datasets_folder(tmp)
    (folder / "state.json").unlink()
    return prepare_case(tmp, "ds", None, target=str(folder), names=("state.json",))


@case("doc-datasets-truncated-arrow")
def _(tmp):
    folder = _datasets_folder(tmp)
    arrow = sorted(folder.glob("*.arrow"))[0]
    arrow.write_bytes(arrow.read_bytes()[:100])
    return prepare_case(tmp, "ds", None, target=str(folder), names=(arrow.name,))


@case("doc-datasets-bad-state-json")
def _(tmp):
    folder = _datasets_folder(tmp)
    (folder / "state.json").write_text('{"_data_files": [')
    return prepare_case(tmp, "ds", None, target=str(folder), names=("state.json",))


for _kind, _label in {
    "dotdot": "../escape",
    "absolute": "/tmp/escape",
    "slash": "a/b",
    "dot": "..",
    "nul": "a\x00b",
    "hidden": ".hidden",
}.items():

    def _bad_label(tmp, label=_label):
        c = prepare_case(tmp, "a.jsonl", jsonl_bytes(DOCS[:1]), label=label)
        c.names = ["source label"]
        c.outputs.append(tmp / "escape")
        return c

    case(f"label-outside-out-{_kind}")(_bad_label)


def _mix_spec_case(tmp: Path, text: str, names: tuple[str, ...] = ()) -> Case:
    src = tmp / "raw" / "a.jsonl"
    src.parent.mkdir(parents=True)
    src.write_bytes(jsonl_bytes(DOCS[:2]))
    spec = tmp / "mix.yaml"
    spec.write_text(text.replace("SRC", str(src)))
    out = tmp / "out"
    argv = [
        "data",
        "prepare",
        "--no-progress",
        "--tokenizer",
        "dolma2",
        "--out",
        str(out),
        "--mix-spec",
        str(spec),
    ]
    return Case(argv, ["mix.yaml", *names], None, [out, tmp / "pwned"])


@case("mixspec-python-tag")
def _(tmp):
    return _mix_spec_case(tmp, f"sources: !!python/object/apply:os.system ['touch {tmp}/pwned']\n")


@case("mixspec-not-a-mapping")
def _(tmp):
    return _mix_spec_case(tmp, "- just\n- a list\n")


@case("mixspec-bad-yaml")
def _(tmp):
    return _mix_spec_case(tmp, "sources: [unclosed\n", names=("line",))


@case("mixspec-unknown-key")
def _(tmp):
    return _mix_spec_case(tmp, "sources:\n  web:\n    paths: [SRC]\n    ratoi: 1.0\n", names=("ratoi",))


@case("mixspec-label-escape")
def _(tmp):
    c = _mix_spec_case(tmp, "sources:\n  ../../escape:\n    paths: [SRC]\n")
    c.names = ["source label '../../escape'"]
    return c


@case("tokenizer-truncated")
def _(tmp):
    from olmax.assets import tokenizer_path

    tok = tmp / "tok" / "tokenizer.json"
    tok.parent.mkdir()
    tok.write_bytes(tokenizer_path("dolma2", quiet=True).read_bytes()[:5000])
    c = prepare_case(tmp, "a.jsonl", jsonl_bytes(DOCS[:1]))
    c.argv[c.argv.index("dolma2")] = str(tok)
    c.names = ["tokenizer.json"]
    return c


# ---------------------------------------------------------------------------------------------------
# token shards and mixes → `olmax data plan / batches`, `olmax audit loader / leaks / dedup`

SEQ, GBS = 16, 2


def shard_docs(n: int, length: int, seed: int = 0) -> list[tuple[str, list[int]]]:
    rng = np.random.default_rng(seed)
    return [(f"doc{seed}-{i}", rng.integers(0, 50_000, length).tolist()) for i in range(n)]


def mix_of(tmp: Path, n_shards: int = 2) -> tuple[Path, list[Path]]:
    """A mix of `n_shards` healthy shards (with sidecars) under tmp/mix."""
    folder = tmp / "mix"
    shards = [write_shard(folder / f"s{k}.npy", shard_docs(8, 40, seed=k)) for k in range(n_shards)]
    mix = folder / "mix.txt"
    mix.write_text("".join(f"web,s{k}.npy\n" for k in range(n_shards)))
    return mix, shards


def report_out(tmp: Path) -> Path:
    out = tmp / "report.json"
    out.write_bytes(OLD_REPORT)
    return out


def batches_case(tmp: Path, mix: Path, names: list[str], offset: str | None = None, extra=()) -> Case:
    out = tmp / "batches.npy"
    out.write_bytes(b"previous batches")
    argv = [
        "data",
        "batches",
        "--mix",
        str(mix),
        "--seq-len",
        str(SEQ),
        "--global-batch-size",
        str(GBS),
        "--steps",
        "2",
        "--work-dir",
        str(tmp / "work"),
        "--out",
        str(out),
        *extra,
    ]
    return Case(argv, names, offset, [out])


def plan_case(tmp: Path, mix: Path, names: list[str], offset: str | None = None, extra=()) -> Case:
    out = report_out(tmp)
    argv = [
        "data",
        "plan",
        "--mix",
        str(mix),
        "--seq-len",
        str(SEQ),
        "--global-batch-size",
        str(GBS),
        "--out",
        str(out),
        *extra,
    ]
    return Case(argv, names, offset, [out])


def audit_case(tmp: Path, kind: str, mix: Path, names: list[str], offset: str | None = None) -> Case:
    out = report_out(tmp)
    stream = ["--mix", str(mix)]
    if kind == "loader":
        argv = [
            "audit",
            "loader",
            *stream,
            "--seq-len",
            str(SEQ),
            "--global-batch-size",
            str(GBS),
            "--work-dir",
            str(tmp / "work"),
            "--out",
            str(out),
        ]
    elif kind == "leaks":
        ev = tmp / "eval.jsonl"
        ev.write_text(
            json.dumps({"id": "q1", "text": "what is the capital of France and why is it Paris"}) + "\n"
        )
        argv = ["audit", "leaks", *stream, "--eval", f"probe={ev}", "--out", str(out)]
    else:
        argv = ["audit", "dedup", *stream, "--span", "8", "--min-doc-tokens", "4", "--out", str(out)]
    return Case(argv, names, offset, [out])


def _odd_shard(tmp):
    mix, shards = mix_of(tmp)
    with open(shards[1], "ab") as f:
        f.write(b"\x01\x02\x03")
    return mix, shards


@case("shard-size-not-multiple-of-4-plan")
def _(tmp):
    mix, shards = _odd_shard(tmp)
    return plan_case(tmp, mix, [shards[1].name, "multiple of 4"], offset=r"byte \d+")


@case("shard-size-not-multiple-of-4-batches")
def _(tmp):
    mix, shards = _odd_shard(tmp)
    return batches_case(tmp, mix, [shards[1].name, "multiple of 4"], offset=r"byte \d+")


for _kind in ("loader", "leaks", "dedup"):

    def _odd_audit(tmp, kind=_kind):
        mix, shards = _odd_shard(tmp)
        return audit_case(tmp, kind, mix, [shards[1].name, "multiple of 4"], offset=r"byte \d+")

    case(f"shard-size-not-multiple-of-4-audit-{_kind}")(_odd_audit)


@case("shard-ids-above-vocab-batches")
def _(tmp):
    mix, shards = mix_of(tmp)
    tokens = np.fromfile(shards[0], dtype=np.uint32)
    tokens[5] = 200_000
    tokens.tofile(shards[0])
    return batches_case(
        tmp,
        mix,
        [shards[0].name, "200000"],
        offset=r"token \d+|offset \d+",
        extra=("--check-vocab", "100000"),
    )


@case("shard-ids-above-vocab-plan")
def _(tmp):
    mix, shards = mix_of(tmp)
    tokens = np.fromfile(shards[1], dtype=np.uint32)
    tokens[3] = 0xFFFFFFFF
    tokens.tofile(shards[1])
    return plan_case(
        tmp, mix, [shards[1].name], offset=r"token \d+|offset \d+", extra=("--check-vocab", "100000")
    )


@case("mix-missing-file")
def _(tmp):
    mix, _ = mix_of(tmp)
    with open(mix, "a") as f:
        f.write("code,gone.npy\n")
    return plan_case(tmp, mix, ["gone.npy", "fix the path in the mix"])


@case("mix-missing-file-batches")
def _(tmp):
    mix, _ = mix_of(tmp)
    mix.write_text("web,s0.npy\nweb,missing/s9.npy\n")
    return batches_case(tmp, mix, ["s9.npy", "not found"])


for _kind in ("loader", "leaks", "dedup"):

    def _missing_audit(tmp, kind=_kind):
        mix, _ = mix_of(tmp)
        mix.write_text("web,s0.npy\nweb,nope.npy\n")
        return audit_case(tmp, kind, mix, ["nope.npy"])

    case(f"mix-missing-file-audit-{_kind}")(_missing_audit)


@case("mix-path-outside-base")
def _(tmp):
    mix, _ = mix_of(tmp)
    write_shard(tmp / "elsewhere.npy", shard_docs(4, 40, seed=9))
    mix.write_text("web,s0.npy\nweb,../elsewhere.npy\n")
    return plan_case(tmp, mix, ["../elsewhere.npy", "--base-dir"], offset=r":2|line 2")


@case("mix-malformed-line")
def _(tmp):
    mix, _ = mix_of(tmp)
    mix.write_text("web,s0.npy\njust-a-path-no-label\n")
    return plan_case(tmp, mix, ["mix.txt"], offset=r":2|line 2")


@case("mix-empty")
def _(tmp):
    mix, _ = mix_of(tmp)
    mix.write_text("# nothing here\n\n")
    return plan_case(tmp, mix, ["mix.txt"])


@case("mix-not-utf8")
def _(tmp):
    mix, _ = mix_of(tmp)
    mix.write_bytes(b"web,s0.npy\nw\xffb,s1.npy\n")
    return plan_case(tmp, mix, ["mix.txt"], offset=r":2|line 2|byte \d+")


@case("mix-file-missing")
def _(tmp):
    return plan_case(tmp, tmp / "no-mix.txt", ["no-mix.txt"])


def _sidecar_case(tmp: Path, kind: str, damage: Callable[[Path], None]) -> Case:
    mix, shards = mix_of(tmp)
    sidecar = shards[1].with_name(shards[1].name[: -len(".npy")] + ".csv.gz")
    assert sidecar.exists(), sidecar
    damage(sidecar)
    return audit_case(tmp, kind, mix, [sidecar.name])


for _kind in ("loader", "dedup"):
    case(f"sidecar-truncated-audit-{_kind}")(
        lambda tmp, k=_kind: _sidecar_case(tmp, k, lambda p: p.write_bytes(p.read_bytes()[:30]))
    )
    case(f"sidecar-beyond-shard-audit-{_kind}")(
        lambda tmp, k=_kind: _sidecar_case(
            tmp,
            k,
            lambda p: p.write_bytes(
                gzip.compress(gzip.decompress(p.read_bytes()) + b"9000,9100,extra,test,99\n", mtime=0)
            ),
        )
    )
    case(f"sidecar-garbage-row-audit-{_kind}")(
        lambda tmp, k=_kind: _sidecar_case(
            tmp, k, lambda p: p.write_bytes(gzip.compress(b"0,abc,x,y,z\n", mtime=0))
        )
    )


def prepared(tmp: Path) -> tuple[Path, Path]:
    """A small healthy prepare output and its one shard."""
    src = write_jsonl(tmp / "raw" / "a.jsonl", DOCS)
    out = tmp / "prepared"
    assert (
        main(["data", "prepare", "--no-progress", "--tokenizer", "dolma2", "--out", str(out), f"web={src}"])
        == 0
    )
    return out, next(out.rglob("*.npy"))


def verify_case(tmp: Path, damage: Callable[[Path], None], names: list[str]) -> Case:
    out, shard = prepared(tmp)
    damage(shard)
    return Case(["data", "inspect", "--verify", str(out)], [shard.name, *names], None, [out])


def _flip_token(shard: Path) -> None:
    tokens = np.fromfile(shard, dtype=np.uint32)
    tokens[10] ^= 1
    tokens.tofile(shard)


@case("manifest-xxh64-mismatch")
def _(tmp):
    return verify_case(tmp, _flip_token, ["xxh64", "manifest.json"])


@case("manifest-shard-shorter")
def _(tmp):
    return verify_case(tmp, lambda p: p.write_bytes(p.read_bytes()[:-8]), ["tokens", "manifest.json"])


@case("manifest-shard-missing")
def _(tmp):
    return verify_case(tmp, Path.unlink, ["missing", "manifest.json"])


def test_verify_passes_a_healthy_prepare_output(tmp_path: Path, capsys) -> None:
    out, _ = prepared(tmp_path)
    capsys.readouterr()
    assert main(["data", "inspect", "--verify", str(out)]) == 0
    assert "verified 1 shard(s)" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------------
# configs and command lines → `olmax train --dry-run` / `olmax train`


def _train_yaml(tmp: Path, **areas) -> Path:
    """A tiny-model recipe over a healthy mix; `areas` maps an area to field overrides (None drops one)."""
    mix, _ = mix_of(tmp)
    cfg = {
        "name": "t",
        "model": {"preset": "tiny", "max_position_embeddings": 64},
        "data": {
            "mix": str(mix),
            "seq_len": SEQ,
            "global_batch_size": GBS,
            "num_threads": 0,
            "work_dir": str(tmp / "work"),
        },
        "train": {"steps": 2, "progress": False, "tensorboard": False},
    }
    for area, fields in areas.items():
        cfg[area] = {**cfg.get(area, {}), **fields}
    import yaml

    path = tmp / "recipe.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def train_case(
    tmp: Path,
    names: list[str],
    overrides: tuple[str, ...] = (),
    *,
    dry_run: bool = True,
    recipe: Path | None = None,
    **areas,
) -> Case:
    recipe = recipe or _train_yaml(tmp, **areas)
    run = tmp / "run"
    argv = [
        "train",
        "--config",
        str(recipe),
        *(["--dry-run"] if dry_run else ["--run-dir", str(run)]),
        *overrides,
    ]
    return Case(argv, names, None, [run])


TRAIN_BAD = {
    "unknown-section": ({"trainer": {"steps": 1}}, (), ["recipe.yaml", "trainer"]),
    "unknown-data-key": ({"data": {"seq_length": 16}}, (), ["recipe.yaml", "seq_length"]),
    "unknown-model-key": ({"model": {"hidden": 8}}, (), ["recipe.yaml", "hidden"]),
    "unknown-optim-key": ({"optim": {"learning_rate": 1.0}}, (), ["recipe.yaml", "learning_rate"]),
    "wrong-type-seq-len": ({"data": {"seq_len": "long"}}, (), ["recipe.yaml", "seq_len", "'long'"]),
    "wrong-type-lr": ({"optim": {"lr": "fast"}}, (), ["recipe.yaml", "lr", "'fast'"]),
    "wrong-type-steps-float": ({"train": {"steps": 2.5}}, (), ["recipe.yaml", "steps"]),
    "wrong-type-section": ({}, ("data=3",), []),
    "zero-batch": ({"data": {"global_batch_size": 0}}, (), ["recipe.yaml", "global_batch_size"]),
    "negative-batch": ({"data": {"global_batch_size": -8}}, (), ["recipe.yaml", "global_batch_size"]),
    "zero-seq-len": ({"data": {"seq_len": 0}}, (), ["recipe.yaml", "seq_len"]),
    "negative-steps": ({"train": {"steps": -1}}, (), ["recipe.yaml", "steps"]),
    "seq-len-above-max": ({"data": {"seq_len": 128}}, (), ["recipe.yaml", "seq_len 128", "64"]),
    "override-unknown-key": ({}, ("optim.lrr=1",), ["lrr"]),
    "override-wrong-type": ({}, ("data.seq_len=abc",), ["seq_len", "'abc'"]),
    "override-seq-len-above-max": ({}, ("data.seq_len=4096",), ["seq_len 4096"]),
    "override-negative-batch": ({}, ("data.global_batch_size=-2",), ["global_batch_size"]),
    "override-malformed": ({}, ("optim.lr",), ["optim.lr", "area.key=value"]),
    "zero-checkpoint-every": ({"checkpoint": {"every": 0}}, (), ["recipe.yaml", "checkpoint.every"]),
}

for _kind, (_areas, _over, _names) in TRAIN_BAD.items():

    def _train_bad(tmp, areas=_areas, over=_over, names=_names):
        return train_case(tmp, names, over, **areas)

    case(f"train-config-{_kind}")(_train_bad)


@case("train-config-missing")
def _(tmp):
    return train_case(tmp, ["nope.yaml"], recipe=tmp / "nope.yaml")


@case("train-config-python-tag")
def _(tmp):
    recipe = tmp / "recipe.yaml"
    recipe.write_text(f"name: !!python/object/apply:os.system ['touch {tmp}/pwned']\n")
    c = train_case(tmp, ["recipe.yaml"], recipe=recipe)
    c.outputs.append(tmp / "pwned")
    return c


@case("train-config-bad-yaml")
def _(tmp):
    recipe = tmp / "recipe.yaml"
    recipe.write_text("data: {seq_len: 16\n")
    return train_case(tmp, ["recipe.yaml"], recipe=recipe)


@case("train-mix-missing-file")
def _(tmp):
    recipe = _train_yaml(tmp)
    (tmp / "mix" / "mix.txt").write_text("web,s0.npy\nweb,lost.npy\n")
    return train_case(tmp, ["lost.npy"], recipe=recipe, dry_run=False)


@case("train-shard-not-multiple-of-4")
def _(tmp):
    recipe = _train_yaml(tmp)
    with open(tmp / "mix" / "s1.npy", "ab") as f:
        f.write(b"\x00")
    return train_case(tmp, ["s1.npy", "multiple of 4"], recipe=recipe, dry_run=False)


# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_gets_one_clean_error(name: str, tmp_path: Path, capsys) -> None:
    c = CASES[name](tmp_path)
    before = snapshot(c.outputs)
    capsys.readouterr()
    rc = main(c.argv)
    cap = capsys.readouterr()
    assert "Traceback" not in cap.out + cap.err
    lines = [ln for ln in cap.err.splitlines() if ln.strip()]
    assert rc == c.code, f"exit {rc}, expected {c.code}; stderr:\n{cap.err}"
    assert len(lines) == 1, f"expected one stderr line, got {len(lines)}:\n{cap.err[:3000]}"
    line = lines[0]
    assert line.startswith("olmax: error: "), line
    assert len(line) < 1000, f"error line of {len(line)} chars: {line[:300]}..."
    for s in c.names:
        assert s in line, f"{s!r} not named in: {line}"
    if c.offset:
        assert re.search(c.offset, line), f"no offset /{c.offset}/ in: {line}"
    assert snapshot(c.outputs) == before, "the command left or changed output"
    for p in c.outputs:
        parent = p if p.is_dir() else p.parent
        if parent.exists():
            assert not [t for t in parent.rglob("*") if t.name.endswith(".tmp")], "temporary left behind"


def test_document_ids_never_name_files(tmp_path: Path, capsys) -> None:
    """Ids are data: `../`, absolute paths, NUL and newlines land in the sidecar verbatim, never in a path."""
    from olmax.data.shards import read_sidecar

    ids = ["../../escape", "/tmp/abs-escape", "a\x00b", "line\nbreak,comma", "..", "C:\\win"]
    docs = [{"id": i, "text": f"document {k} " * 30} for k, i in enumerate(ids)]
    src = tmp_path / "raw" / "a.jsonl"
    src.parent.mkdir()
    src.write_text("".join(json.dumps(d) + "\n" for d in docs))
    out = tmp_path / "sub" / "out"
    outside = sorted(p for p in tmp_path.rglob("*"))
    assert (
        main(
            [
                "data",
                "prepare",
                "--no-progress",
                "--tokenizer",
                "dolma2",
                "--out",
                str(out),
                "--format",
                "arrayrecord",
                f"web={src}",
            ]
        )
        == 0
    )
    capsys.readouterr()
    created = sorted(set(tmp_path.rglob("*")) - set(outside))
    assert all(p == tmp_path / "sub" or out in (p, *p.parents) for p in created), created
    assert not Path("/tmp/abs-escape").exists()
    shards = sorted(out.rglob("*.npy"))
    assert [r.id for s in shards for r in read_sidecar(s)] == ids


def hold_lock(target: Path):
    """Another process holding the writer's lock of `target` until it is killed (a running writer)."""
    import subprocess

    code = (
        "import sys, time\nfrom olmax.atomic import exclusive\n"
        "with exclusive(sys.argv[1], 'test'):\n    print('held', flush=True)\n    time.sleep(120)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code, str(target)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def refused_while_held(target: Path, argv: list[str], capsys) -> str:
    """`olmax ARGV` while another process holds the lock of `target`: exit 2 and one error line (returned)."""
    holder = hold_lock(target)
    try:
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("olmax: error: ") and "\n" not in err and "another olmax process" in err
        return err
    finally:
        holder.kill()
        holder.wait()


def test_a_second_writer_of_one_prepare_output_refuses(tmp_path: Path, capsys) -> None:
    src = write_jsonl(tmp_path / "raw" / "a.jsonl", DOCS[:2])
    out = tmp_path / "out"
    argv = ["data", "prepare", "--no-progress", "--tokenizer", "dolma2", "--out", str(out), f"web={src}"]
    err = refused_while_held(out, argv, capsys)
    assert str(out) in err and not out.exists()
    assert main(argv) == 0  # the holder died: its lock went with it
    assert (out / "mix.txt").exists() and not (tmp_path / ".out.lock").exists()


@pytest.mark.parametrize(
    "command,extra",
    [
        ("audit dedup", []),
        ("audit exposure", ["--leaks", "leaks.json", "--seq-len", "8", "--global-batch-size", "2"]),
        ("eval memorization", ["--run", "no-such-run"]),
    ],
)
def test_a_second_writer_of_one_report_refuses(tmp_path: Path, capsys, command: str, extra: list) -> None:
    """Reports are locked for the whole command: the second writer of one --out stops before any work."""
    out = tmp_path / "r.json"
    missing = "no-such-run" if "--run" in extra else "no-such-mix.txt"
    argv = [*command.split(), "--out", str(out), *extra]
    argv += [] if "--run" in extra else ["--mix", str(tmp_path / "no-such-mix.txt")]
    err = refused_while_held(out, argv, capsys)
    assert f"olmax {command}" in err and not out.exists()
    assert main(argv) == 2  # the holder died: now the command runs, and fails on its missing input instead
    assert missing in capsys.readouterr().err and not out.exists()


def run_with_file_size_limit(argv: list[str], limit: int):
    """`olmax ARGV` in a subprocess whose files cannot grow past `limit` bytes (a disk that fills up)."""
    import subprocess

    # set in the child itself (no preexec_fn: forking a process that runs JAX threads is unsafe); with
    # SIGXFSZ ignored a write past the limit fails with EFBIG instead of killing the process
    code = (
        "import resource, signal, sys\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
        "from olmax.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    )
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=300)


def outputs(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and (p.name.endswith((".npy", ".csv.gz")) or p.name == "mix.txt")
    }


def test_disk_full_during_prepare_is_one_error_and_the_rerun_completes(tmp_path: Path) -> None:
    src = write_jsonl(tmp_path / "raw" / "a.jsonl", [(i, t[:6000]) for i, t in stdlib_texts(30)])
    argv = ["data", "prepare", "--no-progress", "--tokenizer", "dolma2", f"web={src}", "--out"]
    p = run_with_file_size_limit([*argv, str(tmp_path / "out")], 64 * 1024)
    assert "Traceback" not in p.stderr and p.returncode == 2, p.stderr[-3000:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("olmax: error: "), p.stderr
    assert "web-00000.npy" in lines[0] and "byte offset" in lines[0] and "free disk space" in lines[0]
    assert not (tmp_path / "out").exists()  # nothing half-written left behind
    assert main([*argv, str(tmp_path / "out")]) == 0  # space freed: the same command completes
    assert main([*argv, str(tmp_path / "clean")]) == 0
    assert outputs(tmp_path / "out") == outputs(tmp_path / "clean") != {}


def test_disk_full_while_writing_a_report_keeps_the_previous_one(tmp_path: Path) -> None:
    mix, _ = mix_of(tmp_path)
    out = report_out(tmp_path)
    p = run_with_file_size_limit(
        [
            "data",
            "plan",
            "--mix",
            str(mix),
            "--seq-len",
            str(SEQ),
            "--global-batch-size",
            str(GBS),
            "--out",
            str(out),
        ],
        200,
    )
    assert "Traceback" not in p.stderr and p.returncode == 2, p.stderr[-3000:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("olmax: error: ") and "free disk space" in lines[0], (
        p.stderr
    )
    assert out.read_bytes() == OLD_REPORT
    assert [f.name for f in tmp_path.iterdir() if f.name.startswith(".")] == []


def test_batch_id_check_names_the_file_and_token_offset_of_a_bad_id(tmp_path: Path) -> None:
    """`check_batch_ids` (the trainer's pre-step guard) finds every out-of-vocabulary id a batch holds."""
    from olmax.data.reader import check_batch_ids
    from olmax.data.stream import StreamSpec
    from olmax.errors import OlmaxError

    mix, shards = mix_of(tmp_path)
    tokens = np.fromfile(shards[1], dtype=np.uint32)
    tokens[37] = 0xFFFFFFF0  # reads as a negative int32
    tokens.tofile(shards[1])
    spec = StreamSpec(
        mix=str(mix), seq_len=SEQ, global_batch_size=GBS, work_dir=str(tmp_path / "work"), num_threads=0
    )
    loader = open_loader(spec, process_index=0, process_count=1)
    found = []
    it = loader.iterate()
    for _ in range(
        loader.batches_per_epoch
    ):  # every batch of the epoch; only the one holding offset 37 fails
        try:
            check_batch_ids(loader.index, next(it), 100_278)
        except OlmaxError as e:
            found.append(str(e))
    assert len(found) == 1, found
    assert "s1.npy: token 4294967280 at token offset 37 is >= the model's vocab size 100278" in found[0]


def test_every_frame_of_a_multi_frame_zst_is_read() -> None:
    """zstd's streaming reader stops after the first frame by default: a concatenated .zst (pzstd, `cat`)
    would lose documents silently."""
    from olmax.data.readers import read_documents

    frames = [zst(jsonl_bytes(DOCS[:2])), zst(jsonl_bytes(DOCS[2:5])), zst(jsonl_bytes(DOCS[5:]))]
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "a.jsonl.zst"
        path.write_bytes(b"".join(frames))
        docs = list(read_documents(str(path)))
    assert [d.id for d in docs] == [i for i, _ in DOCS] and [d.loc for d in docs] == list(range(1, 7))

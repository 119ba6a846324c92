"""`olmax data prepare --runner beam`: the local runner's bytes from an Apache Beam pipeline (DirectRunner,
2 worker processes; the DaskRunner on a loopback dask.distributed cluster), fsspec URLs in and out, and bad
input reported as one line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from olmax.data.prepare.entry import prepare
from olmax.data.prepare.local_runner import PrepareConfig
from olmax.data.prepare.mixspec import load_mix_spec
from olmax.data.prepare.prepare_beam import plan_shards
from olmax.testing.prepare_testdata import pydoc_texts, stdlib_texts, write_jsonl

pytest.importorskip("apache_beam")
MULTI = "--runner=DirectRunner --direct_num_workers=2 --direct_running_mode=multi_processing"


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    """Real code and prose in five files of three formats, one malformed line, one empty text."""
    d = tmp_path_factory.mktemp("raw")
    code = stdlib_texts(60)
    write_jsonl(d / "code" / "a.jsonl.gz", code[:20])
    write_jsonl(
        d / "code" / "b.jsonl", code[20:35], extra=['{"id": "torn", "text": ', '{"id": "e", "text": ""}']
    )
    write_jsonl(d / "code" / "c.jsonl.zst", code[35:])
    # the source ends on one document larger than a shard: its last shard reaches the target at the end
    write_jsonl(d / "code" / "d.jsonl", [("big", "\n".join(t for _, t in stdlib_texts(16, start=60)))])
    write_jsonl(d / "prose" / "p1.jsonl", pydoc_texts()[:50])
    write_jsonl(d / "prose" / "p2.jsonl", pydoc_texts()[50:120])
    (d / "mix.yaml").write_text(
        "sources:\n  code: {paths: 'code/*', ratio: 0.55, max_repetition: 2}\n"
        "  prose: {paths: 'prose/*.jsonl', ratio: 0.45, max_repetition: 2}\n"
        "total_tokens: 300000\n"
    )
    return d


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def config(raw: Path, dolma2: str, out: str, spec: str | None = None, **kw) -> PrepareConfig:
    sources, total = load_mix_spec(spec or str(raw / "mix.yaml"))
    return PrepareConfig(
        tokenizer=dolma2,
        out=out,
        sources=tuple(sources),
        total_tokens=total,
        shard_bytes=160_000,
        skip_bad_lines=True,
        progress=False,
        **kw,
    )


def test_plan_shards_closes_at_the_first_boundary_past_the_target():
    lengths = [np.array([3, 4, 2]), np.array([], dtype=np.int64), np.array([5, 1, 9])]
    # 3+4 >= 6 closes shard 0; 2+5 >= 6 closes shard 1 across a file (the empty one contributes nothing)
    assert plan_shards(lengths, 6) == [[(0, 0, 2)], [(0, 2, 3), (2, 0, 1)], [(2, 1, 3)]]
    assert plan_shards(lengths, 100) == [[(0, 0, 3), (2, 0, 3)]]


def test_beam_writes_the_local_runners_bytes(tmp_path, raw, dolma2):
    """Byte for byte: shards, sidecars, ArrayRecords, the split shard of a partial copy, mix.txt, manifest.json
    and the resume journal, with 2 worker processes; the inputs given as file:// URLs and the mix spec too."""
    local = prepare(config(raw, dolma2, str(tmp_path / "local"), arrayrecord=True))
    url_spec = tmp_path / "url-mix.yaml"
    url_spec.write_text(
        (raw / "mix.yaml")
        .read_text()
        .replace("'code/*'", f"'file://{raw}/code/*'")
        .replace("'prose/", f"'{raw}/prose/")
    )
    beamed = prepare(
        config(raw, dolma2, f"file://{tmp_path / 'beam'}", spec=f"file://{url_spec}", arrayrecord=True),
        beam_options=MULTI,
    )
    assert beamed["mix"] == local["mix"] and beamed["fingerprint"] == local["fingerprint"]
    a, b = folder_bytes(tmp_path / "local"), folder_bytes(tmp_path / "beam")
    assert a.keys() == b.keys()
    assert [k for k in a if a[k] != b[k]] == []
    # the test exercised what it claims: several shards per source, a split shard, a skipped bad line, a last
    # shard closed at its target (journaled with its last document's position, not the end of the input)
    journal = json.loads(a[".olmax-prepare.json"])
    assert journal["labels"]["code"]["shards"][-1]["next"] == [3, 1]
    assert sum(k.endswith(".npy") for k in a) >= 6 and any(k.endswith("-a.npy") for k in a)
    assert local["sources"]["code"]["skipped"] == {
        "empty_docs": 1,
        "bad_lines": 1,
        "bad_line_examples": [
            f"{raw}/code/b.jsonl:16: malformed JSON line (column 24: expecting value, found the end of the line)"
        ],
    }
    assert not (tmp_path / "beam" / ".olmax-beam").exists()


@pytest.mark.slow  # a dask.distributed cluster (started once per test run) and a pipeline on it: ~30-60 s
def test_the_dask_runner_writes_the_local_runners_bytes(tmp_path, raw, dolma2, dask_address):
    """On a dask.distributed cluster (a scheduler and two worker processes on loopback), byte for byte."""
    from olmax.testing.dask_cluster import dask_options

    local = prepare(config(raw, dolma2, str(tmp_path / "local"), arrayrecord=True))
    options = dask_options(dask_address, f"--temp_location={tmp_path / 'temp'}")
    beamed = prepare(config(raw, dolma2, str(tmp_path / "dask"), arrayrecord=True), beam_options=options)
    assert beamed["mix"] == local["mix"] and beamed["fingerprint"] == local["fingerprint"]
    a, b = folder_bytes(tmp_path / "local"), folder_bytes(tmp_path / "dask")
    assert a.keys() == b.keys() and sum(k.endswith(".npy") for k in a) >= 6
    assert [k for k in a if a[k] != b[k]] == []


def test_object_store_in_and_out(tmp_path, raw, dolma2):
    """memory:// inputs and outputs (an fsspec store standing for gs:// or s3://): the local runner stages and
    uploads; Beam's workers (one process: a memory store is per process) upload each shard. Same bytes."""
    import fsspec

    fs = fsspec.filesystem("memory")
    for p in raw.rglob("*.json*"):
        fs.put_file(str(p), f"/olmax-test-in/{p.relative_to(raw)}")
    fs.pipe_file("/olmax-test-in/mix.yaml", (raw / "mix.yaml").read_bytes())
    try:
        spec = "memory://olmax-test-in/mix.yaml"
        prepare(config(raw, dolma2, "memory://olmax-test-out/local", spec=spec))
        prepare(
            config(raw, dolma2, "memory://olmax-test-out/beam", spec=spec),
            beam_options="--runner=DirectRunner --direct_running_mode=in_memory",
        )
        prepare(config(raw, dolma2, str(tmp_path / "disk")))

        def read(prefix):
            return {p[len(prefix) :]: fs.cat_file(p) for p in fs.find(prefix)}

        a, b = read("/olmax-test-out/local/"), read("/olmax-test-out/beam/")
        disk = folder_bytes(tmp_path / "disk")
        assert a.keys() == b.keys() == disk.keys()
        assert [k for k in a if a[k] != b[k]] == []
        # the same documents as from local files; only the names of the inputs differ
        assert [k for k in a if k.endswith((".npy", "mix.txt")) and a[k] != disk[k]] == []
        assert re.search(
            rb"memory:///?olmax-test-in/code/b\.jsonl:16: malformed JSON line", a["manifest.json"]
        )
    finally:
        fs.rm("/olmax-test-in", recursive=True)
        if fs.exists("/olmax-test-out"):
            fs.rm("/olmax-test-out", recursive=True)


def test_bad_input_is_one_line_and_leaves_no_output(tmp_path, dolma2):
    write_jsonl(tmp_path / "in" / "ok.jsonl", stdlib_texts(3))
    write_jsonl(tmp_path / "in" / "bad.jsonl", [("a", "one")], extra=['{"id": "x", "text": "ok"'])
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "olmax.cli",
            "data",
            "prepare",
            "--no-progress",
            "--tokenizer",
            dolma2,
            "--out",
            str(out),
            f"src=file://{tmp_path}/in",
            "--runner",
            "beam",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("olmax: error:")]
    assert errors == [
        f"olmax: error: {tmp_path}/in/bad.jsonl:2: malformed JSON line (column 25: expecting ',' "
        "delimiter, found the end of the line); fix it or pass --skip-bad-lines to skip and count such lines"
    ]
    assert "Traceback" not in proc.stderr
    assert not out.exists()


def test_pipeline_options_must_name_beam(tmp_path, dolma2, capsys):
    from olmax.cli import main

    assert (
        main(
            [
                "data",
                "prepare",
                "--tokenizer",
                dolma2,
                "--out",
                str(tmp_path / "o"),
                "--pipeline-options=--runner=DirectRunner",
                f"x={tmp_path}",
            ]
        )
        == 2
    )
    assert "--pipeline-options applies to --runner beam only" in capsys.readouterr().err

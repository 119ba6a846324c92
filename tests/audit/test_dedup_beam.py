"""`olmax audit dedup --runner beam` (DirectRunner, 2 worker processes; the DaskRunner on a loopback
dask.distributed cluster) against the local runner; the mix's files given as fsspec URLs; bad shards as
one-line errors in both runners."""

from __future__ import annotations

import json
import shutil

import fsspec
import numpy as np
import pytest

from olmax.audit.dedup import DedupConfig, audit_dedup
from olmax.cli import main
from olmax.data.stream import StreamSpec
from olmax.errors import OlmaxError
from tests.audit.audit_testdata import write_mix, write_shard

OPTIONS = "--runner=DirectRunner --direct_num_workers=2 --direct_running_mode=multi_processing"


def config(mix: str, work_dir) -> DedupConfig:
    # small chunks: a file's span records reach the combiner as many arrays per partition
    return DedupConfig(StreamSpec(mix=mix, work_dir=str(work_dir)), chunk_tokens=3000, examples=4)


@pytest.fixture(scope="module")
def planted(corpus, tmp_path_factory):
    """Two sources; whole documents copied across files and within one; spans pasted into new documents;
    one path listed twice (planned repetition). Returns (root, shard paths, mix lines, local report)."""
    root = tmp_path_factory.mktemp("dedup-beam")
    code, prose = corpus["code"], corpus["prose"]
    a = write_shard(root / "a.npy", code[:12])
    b = write_shard(
        root / "b.npy",
        [
            *prose[:15],
            ("copy", code[0][1]),
            ("copy2", prose[3][1]),
            *[(f"paste{i}", list(prose[20 + i][1][:30]) + list(code[i + 1][1][100:260])) for i in range(6)],
        ],
    )
    c = write_shard(root / "c.npy", [*code[12:20], ("again", code[0][1]), ("tail", list(code[5][1][-200:]))])
    lines = [("code", str(a)), ("prose", str(b)), ("code", str(c)), ("prose", str(b))]
    work = root / "work"
    work.mkdir()
    rep = audit_dedup(config(write_mix(root / "mix.txt", lines), work))
    assert rep["files"] == 3 and rep["duplicate_documents"] >= 3 and rep["repeated_across_sources"] > 0
    assert len(rep["repeated_span_examples"]) == 4 and rep["repeated_span_windows"] > 4
    return root, [a, b, c], lines, rep


def without_paths(report: dict, *replace: tuple[str, str]) -> dict:
    text = json.dumps({k: v for k, v in report.items() if k not in ("settings", "summary")})
    for old, new in replace:
        text = text.replace(old, new)
    return json.loads(text)


def test_beam_report_equals_the_local_report(planted):
    pytest.importorskip("apache_beam")
    root, _, _, local = planted
    beam = audit_dedup(config(str(root / "mix.txt"), root / "work"), beam_options=OPTIONS)
    assert beam == local  # every field: counts, per-source tokens, examples and their order, checks


def test_file_urls_on_beam_and_memory_urls_locally_give_the_same_report(planted):
    pytest.importorskip("apache_beam")
    root, _, lines, local = planted
    expected = without_paths(local)
    url_mix = write_mix(root / "mix-file-urls.txt", [(lab, "file://" + p) for lab, p in lines])
    on_beam = audit_dedup(config(url_mix, root / "work"), beam_options=OPTIONS)
    assert without_paths(on_beam, ("file://", "")) == expected
    # another protocol: each shard (and its sidecar) is copied to scratch while read, duplicates are
    # re-read by ranged reads
    fs = fsspec.filesystem("memory")
    for _, p in lines[:3]:
        for f in (p, p[: -len(".npy")] + ".csv.gz"):
            fs.pipe_file(f"/dedup-beam{f}", open(f, "rb").read())
    mem_mix = write_mix(root / "mix-memory.txt", [(lab, f"memory://dedup-beam{p}") for lab, p in lines])
    in_memory = audit_dedup(config(mem_mix, root / "work"))
    assert without_paths(in_memory, ("memory://dedup-beam", "")) == expected


def run_cli(mix: str, tmp_path, capsys, *runner: str) -> tuple[int, list[str]]:
    capsys.readouterr()
    rc = main(
        [
            "audit",
            "dedup",
            "--mix",
            mix,
            "--out",
            str(tmp_path / "r.json"),
            "--work-dir",
            str(tmp_path),
            *runner,
        ]
    )
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return rc, [line for line in err.splitlines() if line.startswith("olmax: error:")]


def test_bad_shards_are_one_line_errors_in_both_runners(planted, tmp_path, capsys):
    pytest.importorskip("apache_beam")
    root, (a, b, c), _, _ = planted
    beam = ("--runner", "beam", f"--pipeline-options={OPTIONS}")
    # a shard cut mid-token and a missing shard: refused when the mix is indexed, before any map
    cut = tmp_path / "cut.npy"
    cut.write_bytes(a.read_bytes()[:-3])
    gone = str(tmp_path / "gone.npy")
    for bad, what in ((str(cut), "not a multiple of 4"), (gone, "not found")):
        mix = write_mix(tmp_path / "mix.txt", [("code", str(a)), ("code", bad)])
        for runner in ((), beam):
            rc, errors = run_cli(mix, tmp_path, capsys, *runner)
            assert rc != 0 and len(errors) == 1 and bad in errors[0] and what in errors[0], errors
    # the sidecar of a longer shard: found by the map on a worker, reported as the local runner does
    wrong = tmp_path / "wrong.npy"
    wrong.write_bytes(a.read_bytes()[:4000])
    shutil.copy(str(a)[: -len(".npy")] + ".csv.gz", tmp_path / "wrong.csv.gz")
    mix = write_mix(tmp_path / "mix.txt", [("code", str(c)), ("code", str(wrong)), ("prose", str(b))])
    found = []
    for runner in ((), beam):
        rc, errors = run_cli(mix, tmp_path, capsys, *runner)
        assert rc != 0 and len(errors) == 1 and str(wrong) in errors[0] and "sidecar" in errors[0], errors
        found.append(errors[0])
    assert found[0] == found[1]
    with pytest.raises(OlmaxError, match="belongs to another shard"):
        audit_dedup(config(mix, tmp_path))


def test_span_intervals_merge_like_a_mask():
    from olmax.audit.dedup import INTERVAL_REC, merge_intervals, repeated_tokens

    rng = np.random.default_rng(1)
    iv = np.zeros(400, INTERVAL_REC)
    iv["phys"] = rng.integers(0, 3, iv.size)
    iv["start"] = rng.integers(0, 5000, iv.size)
    iv["end"] = iv["start"] + rng.integers(1, 80, iv.size)
    masks = np.zeros((3, 6000), bool)
    for p, s, e in iv.tolist():
        masks[p, s:e] = True
    merged = merge_intervals(iv)
    assert (repeated_tokens(merged, 3) == masks.sum(axis=1)).all()
    assert (merged["end"] > merged["start"]).all()
    same_file = merged["phys"][1:] == merged["phys"][:-1]
    assert (merged["start"][1:][same_file] > merged["end"][:-1][same_file]).all()  # disjoint, sorted


@pytest.mark.slow  # a dask.distributed cluster (started once per test run) and a pipeline on it: ~30-60 s
def test_the_dask_runner_gives_the_local_report(planted, dask_address, tmp_path):
    """On a dask.distributed cluster (a scheduler and two worker processes on loopback): the map's
    records reach the combine keyed by (kind, partition), whatever the runner does with tagged outputs."""
    from olmax.testing.dask_cluster import dask_options

    root, _, _, local = planted
    options = dask_options(dask_address, f"--temp_location={tmp_path}")
    assert audit_dedup(config(str(root / "mix.txt"), root / "work"), beam_options=options) == local
    assert list(tmp_path.iterdir()) == []  # the job's files are gone

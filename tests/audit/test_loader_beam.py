"""`olmax audit loader --runner beam`: the content checks (duplicate instances and documents, identical
files, unplanned repeat rows, repeated spans) hashed on Beam workers (DirectRunner with 2 worker
processes, and the DaskRunner on a loopback dask.distributed cluster) give the local runner's report
but its timing, on a mix built to hold every kind of repeat."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from olmax.audit.loader_audit import LoaderAuditConfig, audit_loader
from olmax.cli import main
from olmax.data.stream import StreamSpec
from olmax.data.tokenfile import read_tokens
from tests.audit.audit_testdata import write_mix, write_shard

pytest.importorskip("apache_beam")

L, G, SEED = 64, 8, 7
DIRECT = "--runner=DirectRunner --direct_num_workers=2 --direct_running_mode=multi_processing"


@pytest.fixture(scope="module")
def repeats(corpus, tmp_path_factory) -> dict:
    """The corpus's shards; code-1 again under another name (identical file: duplicate instances and
    documents); code-2 shifted by three tokens (only spans repeat); a shard of new documents, two copied
    from code-0 and prose-0 (duplicate documents, windows misaligned); code-0 listed twice (planned)."""
    root = tmp_path_factory.mktemp("loader-beam")
    s = corpus["shards"]
    copy = root / "copy.npy"
    shutil.copy(s["code-1"], copy)
    shutil.copy(s["code-1"][: -len(".npy")] + ".csv.gz", root / "copy.csv.gz")
    shifted = root / "shifted.npy"
    np.concatenate([np.asarray([11, 12, 13], np.uint32), read_tokens(s["code-2"])]).tofile(shifted)
    code, prose = corpus["code"], corpus["prose"]
    mixed = write_shard(root / "mixed.npy", [("x", prose[40][1][:90]), code[0], ("y", code[40][1]), prose[3]])
    lines = [
        ("code", s["code-0"]),
        ("code", s["code-1"]),
        ("code", s["code-2"]),
        ("prose", s["prose-0"]),
        ("code", str(copy)),
        ("code", str(shifted)),
        ("prose", str(mixed)),
        ("code", s["code-0"]),
    ]
    return {"root": root, "mix": write_mix(root / "mix.txt", lines)}


def config(mix: str, work) -> LoaderAuditConfig:
    spec = StreamSpec(mix=mix, seq_len=L, global_batch_size=G, seed=SEED, work_dir=str(work))
    return LoaderAuditConfig(stream=spec, span_tokens=50, examples=4)


def _without_timing(report: dict) -> dict:
    """The report but where and how fast it ran: `timing`, `performance`, `checks_ran` and the summary's
    lines from "checks ran:" on (phase times and memory)."""
    out = {k: v for k, v in report.items() if k not in ("timing", "performance", "checks_ran")}
    lines = report["summary"]
    cut = next((i for i, line in enumerate(lines) if line.startswith("checks ran:")), len(lines))
    out["summary"] = lines[:cut]
    return out


@pytest.fixture(scope="module")
def local(repeats) -> dict:
    rep = audit_loader(config(repeats["mix"], repeats["root"] / "work"))
    c = rep["content"]
    assert c["duplicate_instances"] > 0 and c["duplicate_documents"] >= 2 and len(c["identical_files"]) == 1
    assert c["unplanned_repeat_rows"] > 0 and c["repeated_spans"]["repeated_tokens"] > 0
    assert rep["timing"]["content_runner"].startswith("local")
    return rep


def test_beam_gives_the_local_report(repeats, local):
    rep = audit_loader(config(repeats["mix"], repeats["root"] / "work"), beam_options=DIRECT)
    assert rep["timing"]["content_runner"].startswith("DirectRunner (2 workers")
    assert rep["checks_ran"]["content"].startswith("beam") and local["checks_ran"]["content"] == "local"
    assert json.dumps(_without_timing(rep)) == json.dumps(_without_timing(local))  # examples in order too


@pytest.mark.slow  # a dask.distributed cluster (started once per test run) and a pipeline on it: ~30-60 s
def test_the_dask_runner_gives_the_local_report(repeats, local, dask_address, tmp_path):
    from olmax.testing.dask_cluster import dask_options

    options = dask_options(dask_address, f"--temp_location={tmp_path}")
    rep = audit_loader(config(repeats["mix"], repeats["root"] / "work"), beam_options=options)
    assert rep["timing"]["content_runner"].endswith("DaskRunner")
    assert json.dumps(_without_timing(rep)) == json.dumps(_without_timing(local))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # three Beam pipelines and two local audits through the CLI: ~80 s
def test_cli_takes_beams_flags_after_a_double_dash_and_a_worker_error_is_one_line(
    corpus, repeats, tmp_path, capsys
):
    out = tmp_path / "r.json"
    base = ["audit", "loader", "--mix", repeats["mix"], "--seq-len", str(L), "--global-batch-size", str(G)]
    base += ["--seed", str(SEED), "--span-tokens", "50", "--work-dir", str(tmp_path)]
    rc = main([*base, "--out", str(out), "--runner", "beam", "--", *DIRECT.split()])
    assert rc == 1  # the mix repeats content above the limits
    rep = json.loads(out.read_text())
    assert rep["timing"]["content_runner"].startswith("DirectRunner (2 workers")
    # a shard with the sidecar of a longer one: found by the map (on a worker), the local runner's line
    s = corpus["shards"]
    wrong = tmp_path / "wrong.npy"
    wrong.write_bytes(open(s["code-0"], "rb").read()[:40000])
    shutil.copy(s["code-0"][: -len(".npy")] + ".csv.gz", tmp_path / "wrong.csv.gz")
    mix = write_mix(
        tmp_path / "bad.txt", [("code", s["code-1"]), ("code", str(wrong)), ("prose", s["prose-0"])]
    )
    args = [a if a != repeats["mix"] else mix for a in base] + ["--out", str(tmp_path / "r2.json")]
    found = []
    for runner in ([], ["--runner", "beam", "--", *DIRECT.split()]):
        capsys.readouterr()
        rc = main([*args, *runner])
        err = capsys.readouterr().err
        errors = [line for line in err.splitlines() if line.startswith("olmax: error:")]
        assert rc == 2 and len(errors) == 1 and str(wrong) in errors[0] and "Traceback" not in err, err
        found.append(errors[0])
    assert found[0] == found[1]

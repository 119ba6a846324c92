"""`olmax audit leaks --runner beam` (Apache Beam, DirectRunner with 2 worker processes, and the DaskRunner
on a loopback dask.distributed cluster) against the local
runner: the same report on real text (stdlib code and pydoc prose shards, tests/audit/conftest.py) with
eval items taken from it (verbatim, one word in nine substituted, half copied in short runs, short) and items it does not
hold; training files and eval sets as fsspec URLs (`file://`, `memory://`); bad input as a one-line error
from the driver and from a worker."""

from __future__ import annotations

import json
import re
import shutil

import fsspec
import pytest

from olmax.audit.leaks.run import LeakConfig, audit_leaks
from olmax.cli import main
from olmax.data.stream import StreamSpec
from olmax.data.token_reads import TokenFile
from olmax.errors import OlmaxError
from olmax.testing.prepare_testdata import pydoc_texts
from tests.audit.audit_testdata import write_mix

pytest.importorskip("apache_beam")

BEAM = "--runner=DirectRunner --direct_num_workers=2 --direct_running_mode=multi_processing"
SHARDS = ("code-0", "code-1", "code-2", "prose-0")


def _run(words: list[str], most: int) -> list[str]:
    """The first of `words` that hold at most `most` letter-and-digit runs (code: `f(x, y)` is three)."""
    out: list[str] = []
    for w in words:
        if len(re.findall(r"[A-Za-z0-9]+", " ".join(out + [w]))) > most:
            break
        out.append(w)
    return out


def _words(tokenizer, ids) -> list[str]:
    return tokenizer.decode(ids).split()


@pytest.fixture(scope="module")
def leak_data(corpus, tokenizer, tmp_path_factory) -> dict:
    """A mix of the corpus's four shards (code-0 listed twice: probed once) and two eval sets."""
    root = corpus["root"]
    out = tmp_path_factory.mktemp("leaks-beam")
    # documents of at least 150 words (code: in document order, so spread over the three shards)
    code = [w for w in (_words(tokenizer, ids) for _, ids in corpus["code"]) if len(w) >= 150]
    prose = [w for w in (_words(tokenizer, ids) for _, ids in corpus["prose"]) if len(w) >= 150]
    # pydoc topics the prose shard does not hold
    outside = [w for w in (t.split() for _, t in pydoc_texts()[60:]) if len(w) >= 40]
    code_items, prose_items = [], []
    for j in range(6):  # verbatim
        code_items.append({"id": f"verbatim-{j}", "text": " ".join(code[2 * j][60:100])})
    code_items.append({"id": "verbatim-0-again", "text": code_items[0]["text"].upper()})  # same words
    for j in range(3):  # half the item copied, in runs of <= 10 words (a partial match needs 13): a near miss
        src, other = code[2 * j + 1][80:], outside[j][:20]
        code_items.append(
            {
                "id": f"half-{j}",
                "text": " ".join(_run(src, 10) + other[:10] + _run(src[40:], 10) + other[10:]),
            }
        )
    for j in range(4):  # one word in nine substituted
        words = [("zebra" if m % 9 == 4 else w) for m, w in enumerate(prose[2 * j][40:85])]
        prose_items.append({"id": f"edited-{j}", "text": " ".join(words)})
    for j in range(3):  # short: an exact whole-item match
        prose_items.append({"id": f"short-{j}", "text": " ".join(prose[2 * j + 1][30:42])})
    for j in range(5):  # not in the training text
        prose_items.append({"id": f"clean-{j}", "text": " ".join(outside[3 + j][:40])})
    evals = {}
    for name, items in (("code", code_items), ("prose", prose_items)):
        evals[name] = out / f"{name}.jsonl"
        evals[name].write_text("".join(json.dumps(it) + "\n" for it in items))
    lines = [("code", f"{s}.npy") for s in SHARDS[:3]] + [("prose", "prose-0.npy"), ("code", "code-0.npy")]
    mix = write_mix(out / "mix.txt", [(label, str(root / rel)) for label, rel in lines])
    rel_mix = write_mix(out / "rel-mix.txt", lines)  # relative paths: resolved against --base-dir
    return {
        "root": root,
        "out": out,
        "mix": mix,
        "rel_mix": rel_mix,
        "evals": tuple(f"{name}={p}" for name, p in evals.items()),
        "eval_files": evals,
    }


def _without(report: dict, *fields: str) -> dict:
    return {k: v for k, v in report.items() if k not in fields}


@pytest.fixture(scope="module")
def local_report(leak_data) -> dict:
    return audit_leaks(LeakConfig(StreamSpec(mix=leak_data["mix"]), evals=leak_data["evals"]))


def test_beam_gives_the_local_report(leak_data, local_report):
    rep = local_report
    found = {(c["eval"], c["id"]) for c in rep["contaminated"]}
    assert {("code", f"verbatim-{j}") for j in range(6)} | {("code", "verbatim-0-again")} <= found
    assert not any(i.startswith(("clean-", "half-")) for _, i in found)
    assert {c["id"] for c in rep["near_misses"]} >= {f"half-{j}" for j in range(3)}
    assert rep["eval_duplicates"] and rep["training"]["files"] == 4 and not rep["ok"]
    assert {c["kind"] for c in rep["contaminated"]} == {"aligned", "short"}
    beam = audit_leaks(
        LeakConfig(StreamSpec(mix=leak_data["mix"]), evals=leak_data["evals"]), beam_options=BEAM
    )
    assert beam["timing"]["runner"].startswith("DirectRunner (2 workers")
    assert _without(beam, "timing") == _without(rep, "timing")


@pytest.mark.slow  # a dask.distributed cluster (started once per test run) and a pipeline on it: ~30-60 s
def test_the_dask_runner_gives_the_local_report(leak_data, local_report, dask_address, tmp_path):
    """On a dask.distributed cluster (a scheduler and two worker processes on loopback); the eval index
    and word tables reach the workers as .npz and JSON under --temp_location, never a pickle."""
    from olmax.testing.dask_cluster import dask_options

    options = dask_options(dask_address, f"--temp_location={tmp_path}")
    beam = audit_leaks(
        LeakConfig(StreamSpec(mix=leak_data["mix"]), evals=leak_data["evals"]), beam_options=options
    )
    assert beam["timing"]["runner"] == "apache_beam.runners.dask.dask_runner.DaskRunner"
    assert _without(beam, "timing") == _without(local_report, "timing")
    assert list(tmp_path.iterdir()) == []


def _normalized(report: dict, names: dict[str, str]) -> dict:
    """The report but its timing and settings, each key of `names` replaced by its value (file names,
    the mix in the summary)."""
    text = json.dumps(_without(report, "timing", "settings"))
    for old, new in names.items():
        text = text.replace(old, new)
    return json.loads(text)


def test_file_urls_give_the_same_report(leak_data, local_report):
    root = leak_data["root"]
    evals = tuple(f"{name}=file://{p}" for name, p in leak_data["eval_files"].items())
    rep = audit_leaks(
        LeakConfig(StreamSpec(mix=f"file://{leak_data['rel_mix']}", base_dir=f"file://{root}"), evals=evals)
    )
    files = {d["file"] for c in rep["contaminated"] for d in c["documents"]}
    assert files and all(f.startswith(f"file://{root}/") for f in files)  # the mix's paths as given
    assert _normalized(
        rep, {f"file://{leak_data['rel_mix']}": "MIX", f"file://{root}/": "ROOT/"}
    ) == _normalized(local_report, {leak_data["mix"]: "MIX", f"{root}/": "ROOT/"})


def test_object_store_urls_are_read_through_local_copies(leak_data, local_report):
    # memory:// stands for gs:// or s3://: each shard (and its sidecar: the document ids) is copied to
    # scratch while it is read; so is the eval set
    root = leak_data["root"]
    fs = fsspec.filesystem("memory")
    base = "memory://olmax-leaks-beam"
    try:
        for s in SHARDS:
            for suffix in (".npy", ".csv.gz"):
                fs.pipe(f"{base}/{s}{suffix}", (root / f"{s}{suffix}").read_bytes())
        for name, p in leak_data["eval_files"].items():
            fs.pipe(f"{base}/{name}.jsonl", p.read_bytes())
        evals = tuple(f"{name}={base}/{name}.jsonl" for name in leak_data["eval_files"])
        rep = audit_leaks(LeakConfig(StreamSpec(mix=leak_data["rel_mix"], base_dir=base), evals=evals))
    finally:
        fs.rm("/olmax-leaks-beam", recursive=True)
    assert _normalized(rep, {leak_data["rel_mix"]: "MIX", f"{base}/": "ROOT/"}) == _normalized(
        local_report, {leak_data["mix"]: "MIX", f"{root}/": "ROOT/"}
    )


def _one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [x for x in err.splitlines() if x.startswith("olmax: error:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("runner", ["local", "beam"])
def test_a_missing_shard_or_eval_file_is_one_line(leak_data, tmp_path, capsys, runner):
    flags = ["--runner", runner] + ([f"--pipeline-options={BEAM}"] if runner == "beam" else [])
    missing = tmp_path / "gone.npy"
    mix = write_mix(
        tmp_path / "mix.txt", [("code", str(leak_data["root"] / "code-0.npy")), ("x", str(missing))]
    )
    argv = ["audit", "leaks", "--out", str(tmp_path / "r.json"), *flags]
    assert main([*argv, "--mix", mix, *(f"--eval={e}" for e in leak_data["evals"])]) != 0
    assert str(missing) in _one_error_line(capsys.readouterr().err)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "text": "fine"}\n{"id": 2, "text": \n')
    assert main([*argv, "--mix", leak_data["mix"], f"--eval=bad=file://{bad}"]) != 0
    assert f"file://{bad}" in _one_error_line(capsys.readouterr().err)
    assert main([*argv, "--mix", leak_data["mix"], "--eval=gone=file:///nonexistent/evals.jsonl"]) != 0
    assert "file:///nonexistent/evals.jsonl" in _one_error_line(capsys.readouterr().err)


def test_a_worker_failure_is_one_line_naming_the_file(leak_data, tmp_path, capsys):
    # a corrupt sidecar is read in the worker that probes its shard (on its first hit): the worker's
    # error comes back as a value and the driver reports it, naming the file as the mix does (a URL)
    for suffix in (".npy", ".csv.gz"):
        shutil.copy(leak_data["root"] / f"code-0{suffix}", tmp_path / f"code-0{suffix}")
    (tmp_path / "code-0.csv.gz").write_bytes(b"not gzip")
    mix = write_mix(tmp_path / "mix.txt", [("code", "code-0.npy")])
    argv = [
        "audit",
        "leaks",
        "--mix",
        mix,
        "--base-dir",
        f"file://{tmp_path}",
        "--out",
        str(tmp_path / "r.json"),
        *(f"--eval={e}" for e in leak_data["evals"]),
    ]
    assert main([*argv, "--runner", "beam", f"--pipeline-options={BEAM}"]) != 0
    line = _one_error_line(capsys.readouterr().err)
    assert f"file://{tmp_path}/code-0.csv.gz" in line and "unreadable sidecar" in line
    assert main(argv) != 0
    assert _one_error_line(capsys.readouterr().err) == line


def test_a_file_gone_by_the_time_it_is_read_is_named(tmp_path):
    for path in (
        str(tmp_path / "gone.npy"),
        f"file://{tmp_path}/gone.npy",
        "memory://olmax-leaks-beam/gone.npy",
    ):
        with pytest.raises(OlmaxError, match=re.escape(path)):
            TokenFile(path)

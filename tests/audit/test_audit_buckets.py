"""The audits of a mix in a bucket (moto's S3 server and the GCS emulator on loopback, tests/object_stores.py)
read its objects in place and give the local report, timing aside, every plant found: `audit loader` with
its content checks, `--exposure-out` and `--near`, `audit stream`, `audit dedup --near` and `audit leaks`,
on the local runner and (`--runner beam`) on Beam's DaskRunner, whose workers read the bucket themselves.

The plants: a shard copied under another name, one listed twice (a planned repeat, not a duplicate),
documents copied into another shard, eval items pasted into the prose, and in the emitted rows a row
served twice and a row shifted off the window grid."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from olmax import ranged
from olmax.audit.audit_config import DedupConfig, LeakConfig, LoaderAuditConfig, StreamConfig
from olmax.audit.dedup import audit_dedup
from olmax.audit.emitted import audit_stream
from olmax.audit.leaks.run import audit_leaks
from olmax.audit.loader_audit import audit_loader
from olmax.audit.near import near_tokenizer
from olmax.data.index import open_index
from olmax.data.loader import Loader
from olmax.data.stream import StreamSpec
from olmax.dedup.params import MinHashParams, NearSettings
from olmax.testing.prepare_testdata import pydoc_texts
from tests.audit.audit_testdata import corpus_folder, write_mix, write_shard

pytestmark = pytest.mark.slow  # two protocol servers, a dask cluster, ~16 audits: about two minutes

L, G, SEED = 64, 8, 7


@pytest.fixture(scope="module")
def mix(corpus, tmp_path_factory) -> dict:
    """The plants' mix in one folder (relative paths: the same mix.txt works where the folder is copied),
    the eval set and two hosts' emitted rows with a repeated and a shifted row."""
    root = tmp_path_factory.mktemp("bucket-audits")
    data = corpus_folder(corpus, root / "shards")
    code, prose = corpus["code"], corpus["prose"]
    write_shard(data / "mixed.npy", [code[0], ("y", code[40][1]), prose[3]])
    names = ["code-0", "code-1", "code-2", "prose-0", "copy", "mixed", "code-0"]
    labels = ["code", "code", "code", "prose", "code", "prose", "code"]
    mix = write_mix(data / "mix.txt", [(lab, f"{n}.npy") for lab, n in zip(labels, names)])
    (data / "manifest.json").write_text(json.dumps({"tokenizer": {"name": "dolma2"}}))
    texts = [t for _, t in pydoc_texts()]
    long = [t[:4000].split() for t in texts[:60] if len(t[:4000].split()) >= 80]
    items = [{"id": f"copied-{j}", "text": " ".join(long[3 * j][20:60])} for j in range(3)]
    outside = [t.split() for t in texts[60:] if len(t.split()) >= 45]
    items += [{"id": f"clean-{j}", "text": " ".join(outside[j][:40])} for j in range(3)]
    (data / "items.jsonl").write_text("".join(json.dumps(it) + "\n" for it in items))
    index = open_index(mix, L)
    spec = StreamSpec(seq_len=L, global_batch_size=G, seed=SEED, work_dir=str(root / "w"), num_threads=0)
    hosts = [Loader(index, spec, process_index=r, process_count=2) for r in range(2)]
    batches = [np.stack([h.batch(1, k)["input_ids"] for k in range(6)]) for h in hosts]
    batches[1][4, 0] = batches[0][1, 2]  # a row served again
    first = np.fromfile(data / "code-2.npy", np.uint32)
    batches[0][5, 1] = first[7 : 7 + L]  # a row off the window grid
    emitted = []
    for r, b in enumerate(batches):
        np.save(root / f"host-{r}.npy", b)
        emitted.append(str(root / f"host-{r}.npy"))
    return {"root": root, "data": data, "emitted": emitted}


def audits(mix_url: str, data: dict, work: Path, beam: str | None = None) -> dict[str, dict]:
    """The four audits of `mix_url` (the local runner, or Beam where an audit has one: `beam`'s flags)."""
    stream = StreamSpec(mix=mix_url, seq_len=L, global_batch_size=G, seed=SEED, work_dir=str(work))
    near = NearSettings(MinHashParams(), near_tokenizer(mix_url, None))  # named by the manifest beside it
    exposure = work / "exposure.json"
    out = {
        "loader": audit_loader(
            LoaderAuditConfig(stream=stream, near=near, examples=4, exposure_out=str(exposure)),
            beam_options=beam,
        ),
        "dedup": audit_dedup(DedupConfig(stream=stream, near=near, examples=4), beam_options=beam),
        "leaks": audit_leaks(
            LeakConfig(stream=stream, evals=(f"items={mix_url.rsplit('/', 1)[0]}/items.jsonl",)), beam
        ),
    }
    if beam is None:
        out["stream"] = audit_stream(StreamConfig(stream=stream, batches=tuple(data["emitted"])))
    out["exposure"] = json.loads(exposure.read_text())
    return out


def comparable(report: dict, names: dict[str, str]) -> str:
    """The report but where and how fast it ran, with `names` (the data's folder or URL, the work folder)
    replaced by what they stand for."""
    out = {k: v for k, v in report.items() if k not in ("timing", "performance", "checks_ran")}
    out.pop("settings", None)
    lines = report.get("summary", [])
    out["summary"] = lines[
        : next((i for i, x in enumerate(lines) if x.startswith("checks ran:")), len(lines))
    ]
    text = json.dumps(out, sort_keys=True)
    for name, meaning in names.items():
        text = text.replace(name, meaning)
    return text


@pytest.fixture(scope="module")
def local(mix) -> dict:
    reps = audits(str(mix["data"] / "mix.txt"), mix, mix["root"] / "local")
    c = reps["loader"]["content"]
    # the copy is found, code-0 listed twice is not (one physical file: a planned repeat)
    data = str(mix["data"])
    assert c["identical_files"] == [{"file": f"{data}/copy.npy", "same_as_file": f"{data}/code-1.npy"}]
    assert c["duplicate_documents"] >= 2 and c["unplanned_repeat_rows"] > 0
    s = reps["stream"]
    assert s["unplanned_repeated_rows"] >= 1 and s["foreign_kinds"]["misaligned"] == 1
    assert {c["id"] for c in reps["leaks"]["contaminated"]} == {f"copied-{j}" for j in range(3)}
    assert (
        reps["dedup"]["duplicate_documents"] >= 2 and reps["dedup"]["near_duplicates"]["clusters_total"] >= 1
    )
    return reps


def in_bucket(store, mix) -> str:
    url = store.join("shards")
    store.server.put_tree(mix["data"], url)
    return url


def same_reports(got: dict, url: str, work, local: dict, mix) -> None:
    here = {str(mix["data"]): "DATA", str(mix["root"] / "local"): "WORK"}
    there = {url: "DATA", str(work): "WORK"}
    for name, report in got.items():
        assert comparable(report, there) == comparable(local[name], here), name


def test_bucket_audits_give_the_local_reports(store, mix, local, tmp_path):
    url = in_bucket(store, mix)
    try:
        got = audits(f"{url}/mix.txt", mix, tmp_path)
    finally:
        ranged.forget_pins()
    assert got.keys() == local.keys()
    same_reports(got, url, tmp_path, local, mix)


def test_the_dask_runner_reads_the_bucket_and_gives_the_local_reports(
    store, mix, local, dask_address, tmp_path
):
    from olmax.testing.dask_cluster import dask_options

    url = in_bucket(store, mix)
    options = dask_options(dask_address, f"--temp_location={tmp_path / 'temp'}")
    try:
        got = audits(f"{url}/mix.txt", mix, tmp_path, beam=options)
    finally:
        ranged.forget_pins()
    assert got["loader"]["checks_ran"]["content"].startswith("beam")
    same_reports(got, url, tmp_path, local, mix)

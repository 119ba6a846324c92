"""`olmax data prepare --dedup ... --runner beam`: the local runner's bytes (shards, sidecars, decisions,
removed.jsonl, manifest.json, mix.txt, journal) for each stage and all three, on the DirectRunner with
2 worker processes; components by min-label propagation against union-find."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from olmax.cli import main
from olmax.dedup.components import min_labels
from olmax.testing.prepare_testdata import (
    jaccard,
    pydoc_texts,
    read_folder_bytes,
    stdlib_texts,
    words,
    write_jsonl,
)

pytest.importorskip("apache_beam")
MULTI = "--runner=DirectRunner --direct_num_workers=2 --direct_running_mode=multi_processing"
# few rows per band: a pair at Jaccard ~0.7 shares a bucket almost surely, then fails verification
SMALL_BANDS = ("--minhash-bands", "20", "--minhash-rows", "3")


def edit(text: str, at: tuple[int, ...], word: str) -> str:
    w = text.split(" ")
    for k in at:
        w[k] = word
    return " ".join(w)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """Two sources, four files. a, b = a with 3 words changed, c = b with 3 more (a~b, b~c verified,
    a-c at ~0.73 a candidate that fails); x copies a exactly (in the second source); p1, p2, p3 hold the
    same 700-byte passage P; u1, u2 unrelated; an empty text."""
    d = tmp_path_factory.mktemp("dedup-beam-raw")
    v = words(3000, 7)
    a = " ".join(v[:200])
    b = edit(a, (30, 90, 150), "alpha")
    c = edit(b, (60, 120, 180), "beta")
    passage = " ".join(v[1000:1130])[:700]
    docs = {
        "u1": " ".join(v[300:420]),
        "a": a,
        "p1": "One. " + " ".join(v[500:560]) + "\n" + passage + "\n" + " ".join(v[560:600]),
        "b": b,
        "u2": " ".join(v[700:800]),
        "c": c,
        "p2": " ".join(v[800:840]) + " {" + passage + "} " + " ".join(v[840:860]),
        "x": a,
        "p3": "Two: " + passage + " — end",
    }
    assert jaccard(a, b) >= 0.8 and jaccard(b, c) >= 0.8 and jaccard(a, c) < 0.8
    write_jsonl(
        d / "web" / "1.jsonl",
        [(k, docs[k]) for k in ("u1", "a", "p1", "b")],
        extra=['{"id": "e", "text": ""}'],
    )
    write_jsonl(d / "web" / "2.jsonl", [(k, docs[k]) for k in ("u2", "c", "p2")])
    write_jsonl(d / "books.jsonl", [("x", docs["x"]), ("p3", docs["p3"])])
    return d, docs


def prepare(out: Path, raw: Path, dolma2: str, *extra: str) -> dict[str, bytes]:
    argv = [
        "data",
        "prepare",
        "--no-progress",
        "--tokenizer",
        dolma2,
        "--out",
        str(out),
        "--shard-size",
        "4KB",
    ]
    assert main([*argv, *extra, f"web={raw}/web", f"books={raw}/books.jsonl"]) == 0
    return read_folder_bytes(out)


def beam_and_local(tmp_path: Path, raw: Path, dolma2: str, name: str, *extra: str) -> dict[str, bytes]:
    local = prepare(tmp_path / f"{name}-local", raw, dolma2, *extra)
    beam = prepare(
        tmp_path / f"{name}-beam", raw, dolma2, *extra, "--runner", "beam", f"--pipeline-options={MULTI}"
    )
    assert sorted(beam) == sorted(local)
    for k in local:
        assert beam[k] == local[k], k
    return local


def test_all_three_stages_on_beam_give_the_local_bytes(tmp_path, corpus, dolma2):
    raw, docs = corpus
    out = beam_and_local(
        tmp_path,
        raw,
        dolma2,
        "all",
        "--dedup",
        "exact,minhash,substring",
        *SMALL_BANDS,
        "--substring-partition-bytes",
        "3000",
    )
    records = [json.loads(x) for x in out["removed.jsonl"].decode().splitlines()]
    by_id = {r["id"]: r for r in records}
    assert by_id["b"]["stage"] == by_id["c"]["stage"] == "minhash"
    assert by_id["b"]["kept"] == by_id["c"]["kept"] == "a"  # c reaches a through b only
    assert by_id["c"]["jaccard"] == round(jaccard(docs["a"], docs["c"]), 6) < 0.8
    assert by_id["x"] == {"id": "x", "source": "books", "stage": "exact", "kept": "a"}
    assert {r["stage"] for r in records} == {"exact", "minhash", "substring"}
    dedup = json.loads(out["manifest.json"])["dedup"]
    assert dedup["minhash_candidate_pairs"] > 2  # a-c (and unrelated pairs) collided and failed
    assert dedup["substring_partitions"] > 1


@pytest.mark.slow  # a dask.distributed cluster (started once per test run) and the dedup pipelines on it
def test_the_dask_runner_gives_the_local_bytes_for_all_three_stages(tmp_path, corpus, dolma2, dask_address):
    """The dedup pipelines (exact, minhash with its propagation rounds, substring partitions) on Beam's
    DaskRunner over a scheduler and two worker processes on loopback: the local runner's bytes."""
    from olmax.testing.dask_cluster import dask_options

    raw, _ = corpus
    extra = ("--dedup", "exact,minhash,substring", *SMALL_BANDS, "--substring-partition-bytes", "3000")
    local = prepare(tmp_path / "local", raw, dolma2, *extra)
    options = dask_options(dask_address, f"--temp_location={tmp_path / 'temp'}")
    dask = prepare(
        tmp_path / "dask", raw, dolma2, *extra, "--runner", "beam", f"--pipeline-options={options}"
    )
    assert sorted(dask) == sorted(local) and "removed.jsonl" in local
    assert [k for k in local if dask[k] != local[k]] == []


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["exact", "minhash", "substring"])
def test_each_stage_on_beam_gives_the_local_bytes(tmp_path, corpus, dolma2, stage):
    raw, _ = corpus
    out = beam_and_local(tmp_path, raw, dolma2, stage, "--dedup", stage)
    assert {json.loads(x)["stage"] for x in out["removed.jsonl"].decode().splitlines()} == {stage}


def test_components_by_propagation_are_union_finds(tmp_path):
    """A scrambled chain of 24 nodes (longer than one round reaches) and random small components: one
    round leaves labels to change (the driver would rerun), 32 give union-find's labels."""
    from olmax import beam
    from olmax.data.prepare.dedup_stages_beam import components

    bm = beam.require_beam()
    rng = np.random.default_rng(3)
    perm = rng.permutation(24)
    edges = [(int(perm[i]), int(perm[i + 1])) for i in range(23)]
    edges += [(int(a), int(b)) for a, b in rng.integers(24, 80, size=(30, 2)) if a != b]
    edges = [(min(a, b), max(a, b)) for a, b in edges]
    want = min_labels(80, np.array([e[0] for e in edges]), np.array([e[1] for e in edges]))
    nodes = {x for e in edges for x in e}
    for rounds in (1, 32):  # 32 > the chain: plain propagation alone has converged
        folder = str(tmp_path / f"r{rounds}")

        def build(p, rounds=rounds, folder=folder):
            labels, changed = components(bm, p | bm.Create(edges), rounds)
            beam.collect(labels, folder, "labels")
            beam.collect(changed, folder, "changed")

        beam.run(build, beam.pipeline_options("--runner=DirectRunner"), str(tmp_path / "log"), "components")
        changed = sum(beam.collected(folder, "changed"))
        got = dict(beam.collected(folder, "labels"))
        assert set(got) == nodes
        if rounds == 1:
            assert changed > 0 and got != {x: int(want[x]) for x in nodes}
        else:
            assert changed == 0 and got == {x: int(want[x]) for x in nodes}


@pytest.mark.slow
def test_beam_dedup_on_real_text_with_a_big_bucket(tmp_path, dolma2):
    """Real code and prose, edited copies, a family of 40 near-duplicate pages (one bucket over
    ANCHORS members), pasted paragraphs, several small substring partitions: the local bytes."""
    raw = tmp_path / "raw"
    code = stdlib_texts(40)
    prose = pydoc_texts()[:60]
    base = prose[0][1][:3000]
    family = [(f"fam-{k}", base + f"\nfooter {k} " + " ".join(words(8, k))) for k in range(40)]
    copies = []
    for k in range(0, 40, 4):
        i, t = code[k]
        copies.append((f"copy-{i}", t))
        copies.append((f"edit-{i}", t.replace("self", "this", 3) + "\n# trailer\n"))
        copies.append((f"paste-{i}", prose[k][1][:1500] + "\n" + code[(k + 1) % 40][1][-1200:]))
    write_jsonl(raw / "web" / "a.jsonl", code[:20] + family[:20])
    write_jsonl(raw / "web" / "b.jsonl.gz", code[20:] + copies[:15])
    write_jsonl(raw / "books.jsonl", prose + family[20:] + copies[15:])
    out = beam_and_local(
        tmp_path,
        raw,
        dolma2,
        "big",
        "--dedup",
        "exact,minhash,substring",
        "--substring-partition-bytes",
        "200KB",
    )
    records = [json.loads(x) for x in out["removed.jsonl"].decode().splitlines()]
    assert sum(r["id"].startswith("fam-") and r["stage"] == "minhash" for r in records) >= 30
    assert {r["stage"] for r in records} == {"exact", "minhash", "substring"}

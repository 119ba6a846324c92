"""`olmax data batches --packed`: the loader's packed stream (OLMo 3 stage 3) against OLMo-core's
NumpyPackedFSLDataset under NumpyFSLDataLoader, rows and document lengths, for 1 and 2 processes."""

from __future__ import annotations

import os

import numpy as np
import pytest

from olmax.cli import main
from olmax.data.loader import open_loader
from tests.data.test_packing import (
    EOS,
    GROUP,
    PAD,
    PERM_SEED,
    SEED,
    G,
    L,
    olmo_core_batches,
    olmo_core_dataset,
    write_document_files,
)

STEPS = 6


@pytest.fixture(scope="module")
def mix(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mix")
    paths = write_document_files(str(folder), n_files=26, seed=5)
    (folder / "mix.txt").write_text(
        "".join(f"src{i % 3},{os.path.basename(p)}\n" for i, p in enumerate(paths))
    )
    return folder, paths


def trimmed(lens: np.ndarray) -> list[list[int]]:
    return [[int(x) for x in row if x] for row in lens.reshape(-1, lens.shape[-1])]


@pytest.mark.parametrize("P", [1, 2])
def test_packed_batches_and_document_lengths_equal_olmo_core(mix, tmp_path, P):
    folder, paths = mix
    reference = olmo_core_dataset(paths, str(tmp_path / "oc"))
    per_epoch = len(reference) // G
    for rank in range(P):
        ref = olmo_core_batches(reference, str(tmp_path / "oc"), 1, dp_world_size=P, dp_rank=rank)
        out, lens = tmp_path / f"b{rank}.npy", tmp_path / f"l{rank}.npy"
        assert (
            main(
                [
                    "data",
                    "batches",
                    "--mix",
                    str(folder / "mix.txt"),
                    "--seq-len",
                    str(L),
                    "--global-batch-size",
                    str(G),
                    "--seed",
                    str(SEED),
                    "--packed",
                    "--source-group-size",
                    str(GROUP),
                    "--source-permutation-seed",
                    str(PERM_SEED),
                    "--steps",
                    str(min(STEPS, per_epoch)),
                    "--process-count",
                    str(P),
                    "--process-index",
                    str(rank),
                    "--eos-token-id",
                    str(EOS),
                    "--pad-token-id",
                    str(PAD),
                    "--work-dir",
                    str(tmp_path / "w"),
                    "--out",
                    str(out),
                    "--doc-lens-out",
                    str(lens),
                ]
            )
            == 0
        )
        rows, doc_lens = np.load(out), np.load(lens)
        assert rows.shape == (min(STEPS, per_epoch), G // P, L)
        for step in range(rows.shape[0]):
            ids, ref_lens, _ = ref[step]
            np.testing.assert_array_equal(rows[step], ids, err_msg=f"{P=} {rank=} {step=}")
            assert trimmed(doc_lens[step]) == trimmed(ref_lens), (P, rank, step)
            assert (doc_lens[step].sum(-1) == L).all()  # every token in exactly one segment


def test_packed_plan_and_options_are_checked(mix, tmp_path, capsys, monkeypatch):
    folder, _ = mix
    monkeypatch.setenv("OLMAX_WORK_DIR", str(tmp_path / "w"))  # where the packing is cached
    common = ["--mix", str(folder / "mix.txt"), "--seq-len", str(L), "--global-batch-size", str(G)]
    assert (
        main(
            [
                "data",
                "plan",
                *common,
                "--packed",
                "--source-group-size",
                "8",
                "--eos-token-id",
                str(EOS),
                "--pad-token-id",
                str(PAD),
                "--json",
            ]
        )
        == 0
    )
    plan = __import__("json").loads(capsys.readouterr().out)
    assert plan["packed"] and plan["instances"] > 0 and 0 <= plan["padding_fraction"] < 0.5
    assert main(["data", "plan", *common, "--source-group-size", "8"]) == 2  # packed options need --packed
    assert "apply to packed streams only" in capsys.readouterr().err
    assert main(["data", "plan", *common[:2], "--seq-len", "48", *common[4:], "--packed"]) == 2  # OBFD: 2^k
    assert "power of two" in capsys.readouterr().err


def test_which_where_and_loader_audit_read_packed_rows(mix, tmp_path, monkeypatch, capsys):
    """`data which` names each packed row's documents (their tokens are the row's unpadded tokens),
    `data where` finds exactly the steps whose rows hold a token of a file range (checked by a walk over
    the epoch), and the loader audit passes on a packed stream."""
    import json

    from olmax.data.stream import StreamSpec

    folder, paths = mix
    monkeypatch.setenv("OLMAX_WORK_DIR", str(tmp_path / "w"))
    flags = [
        "--mix",
        str(folder / "mix.txt"),
        "--seq-len",
        str(L),
        "--global-batch-size",
        str(G),
        "--seed",
        str(SEED),
        "--packed",
        "--source-group-size",
        str(GROUP),
        "--source-permutation-seed",
        str(PERM_SEED),
    ]
    spec = StreamSpec(
        mix=str(folder / "mix.txt"),
        seq_len=L,
        global_batch_size=G,
        seed=SEED,
        packed=True,
        source_group_size=GROUP,
        source_permutation_seed=PERM_SEED,
        work_dir=str(tmp_path / "w"),
    )
    loader = open_loader(spec, process_index=0, process_count=1)
    batch = loader.batch(1, 2)  # global step 3
    assert main(["data", "which", *flags, "--step", "3", "--out", str(tmp_path / "which.json")]) == 0
    rows = json.loads((tmp_path / "which.json").read_text())["rows"]
    for r, row in enumerate(rows):
        assert row["instance"] == int(batch["instance_ids"][r])
        assert sum(s["end"] - s["start"] for s in row["segments"]) == int(batch["label_mask"][r].sum())
        files = [loader.index.paths[f] for f, _, _ in loader.index.instance_documents(row["instance"])]
        assert [s["file"] for s in row["segments"]] == files  # one whole document per segment, in row order
    target = paths[4]
    assert (
        main(
            [
                "data",
                "where",
                *flags,
                "--file",
                target,
                "--tokens",
                "0:40",
                "--out",
                str(tmp_path / "where.json"),
            ]
        )
        == 0
    )
    found = sorted({h["step"] for h in json.loads((tmp_path / "where.json").read_text())["hits"]})
    index, want = loader.index, set()
    f = index.paths.index(target)
    for b in range(loader.batches_per_epoch):
        for inst in loader.batch(1, b)["instance_ids"].tolist():
            if any(ff == f and a < 40 and e > 0 for ff, a, e in index.instance_documents(inst)):
                want.add(b + 1)
    assert found == sorted(want) and found
    assert (
        main(
            [
                "audit",
                "loader",
                *flags,
                "--exposure-out",
                str(tmp_path / "x.npz"),
                "--out",
                str(tmp_path / "la.json"),
            ]
        )
        == 0
    )
    report = json.loads((tmp_path / "la.json").read_text())
    assert report["ok"] and report["content"]["duplicate_instances"] == 0
    served = np.load(tmp_path / "x.npz")  # one epoch: every served packed row once
    assert report["exposure_file"] and served["count"].tolist() == [1] * served["instance_id"].size
    assert served["instance_id"].size == loader.batches_per_epoch * G
    assert report["content"]["documents"] > 0 and report["content"]["unplanned_repeat_rows"] == 0


def test_loader_audit_content_checks_on_packed_rows(tmp_path, monkeypatch):
    """The content checks on a packed stream: a file copied under another name packs into rows equal to
    the original's (duplicate instances, identical files, emitted rows repeating content), and its
    documents repeat; the clean mix passes."""
    import json
    import shutil

    paths = write_document_files(str(tmp_path / "mix"), n_files=8, seed=9)
    monkeypatch.setenv("OLMAX_WORK_DIR", str(tmp_path / "w"))
    lines = [f"web,{os.path.basename(p)}" for p in paths]
    (tmp_path / "mix" / "clean.txt").write_text("\n".join(lines) + "\n")
    shutil.copyfile(paths[2], tmp_path / "mix" / "copy.npy")
    (tmp_path / "mix" / "bad.txt").write_text("\n".join([*lines, "web,copy.npy"]) + "\n")
    flags = ["--seq-len", str(L), "--global-batch-size", "4", "--packed", "--epochs", "1"]
    assert (
        main(
            [
                "audit",
                "loader",
                "--mix",
                str(tmp_path / "mix" / "clean.txt"),
                *flags,
                "--out",
                str(tmp_path / "clean.json"),
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "audit",
                "loader",
                "--mix",
                str(tmp_path / "mix" / "bad.txt"),
                *flags,
                "--out",
                str(tmp_path / "bad.json"),
            ]
        )
        == 1
    )
    content = json.loads((tmp_path / "bad.json").read_text())["content"]
    assert content["duplicate_instances"] > 0 and content["duplicate_documents"] > 0
    assert content["identical_files"] and content["unplanned_repeat_rows"] > 0
    first = content["duplicate_instance_examples"][0]
    assert first["same_as_instance"] < first["instance"]


def test_stream_audit_matches_packed_rows_and_catches_a_repeat(mix, tmp_path):
    """`olmax audit stream` on the packed batches two processes emit: every row matched to a packed instance,
    none repeated; a row copied into a later step is an unplanned repeat (exit 1)."""
    import json

    folder, _ = mix
    flags = [
        "--mix",
        str(folder / "mix.txt"),
        "--seq-len",
        str(L),
        "--global-batch-size",
        str(G),
        "--seed",
        str(SEED),
        "--packed",
        "--source-group-size",
        str(GROUP),
        "--source-permutation-seed",
        str(PERM_SEED),
        "--work-dir",
        str(tmp_path / "w"),
    ]
    hosts = []
    for rank in range(2):
        hosts.append(tmp_path / f"h{rank}.npy")
        assert (
            main(
                [
                    "data",
                    "batches",
                    *flags,
                    "--steps",
                    "5",
                    "--process-count",
                    "2",
                    "--process-index",
                    str(rank),
                    "--eos-token-id",
                    str(EOS),
                    "--pad-token-id",
                    str(PAD),
                    "--out",
                    str(hosts[-1]),
                ]
            )
            == 0
        )
    audit = [
        "audit",
        "stream",
        *flags[:2],
        "--seq-len",
        str(L),
        "--packed",
        "--source-group-size",
        str(GROUP),
        "--source-permutation-seed",
        str(PERM_SEED),
        "--work-dir",
        str(tmp_path / "w"),
    ]
    assert main([*audit, "--batches", *map(str, hosts), "--out", str(tmp_path / "ok.json")]) == 0
    ok = json.loads((tmp_path / "ok.json").read_text())
    assert ok["rows"] == 5 * G and ok["repeated_rows"] == 0 and ok["foreign_rows"] == 0
    bad = np.load(hosts[0])
    bad[3, 1] = bad[0, 0]
    np.save(tmp_path / "bad.npy", bad)
    assert (
        main(
            [
                *audit,
                "--batches",
                str(tmp_path / "bad.npy"),
                str(hosts[1]),
                "--out",
                str(tmp_path / "bad.json"),
            ]
        )
        == 1
    )
    report = json.loads((tmp_path / "bad.json").read_text())
    assert report["repeated_rows"] == 1 and report["unplanned_repeated_rows"] == 1

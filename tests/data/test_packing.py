"""Packed (document) instances against OLMo-core's NumpyPackedFSLDataset, InstancePacker and loader."""

from __future__ import annotations

import os
import random
from dataclasses import replace

import numpy as np
import pytest

from olmax.data.order import epoch_order
from olmax.data.packing import (
    PackSpec,
    build_packed_index,
    document_lengths,
    document_spans,
    obfd,
    source_permutation,
)
from olmax.errors import OlmaxError

L, G, SEED, GROUP, PERM_SEED = 64, 8, 7, 8, 123
EOS, PAD, VOCAB = 100257, 100277, 100278


def write_document_files(folder: str, n_files: int = 30, seed: int = 0, bos: int | None = None) -> list[str]:
    """Raw uint32 files of random documents ending in EOS (a long tail past L, some of exactly L; with
    `bos`, most start with it); every fourth file ends with an unterminated tail, one has no EOS at all."""
    rng = np.random.default_rng(seed)
    os.makedirs(folder, exist_ok=True)
    paths = []
    for f in range(n_files):
        docs = []
        for _ in range(int(rng.integers(5, 40))):
            n = int(min(rng.geometric(1 / 20), 3 * L)) if rng.random() > 0.05 else L
            doc = np.append(rng.integers(0, 50_000, n - 1), EOS)
            if bos is not None and rng.random() > 0.1:
                doc[0] = bos
            docs.append(doc)
        if f % 4 == 3:
            docs.append(rng.integers(0, 50_000, int(rng.integers(1, 30))))
        tokens = np.concatenate(docs) if f != 17 else rng.integers(0, 50_000, 50)
        path = os.path.join(folder, f"part-{f:03d}.npy")
        tokens.astype(np.uint32).tofile(path)
        paths.append(path)
    return paths


def olmo_core_dataset(paths: list[str], work_dir: str, **kwargs):
    """OLMo-core's packed dataset over the files as NumpyDatasetConfig would give them (shuffled)."""
    from olmo_core.data import NumpyPackedFSLDataset

    order = list(range(len(paths)))
    random.Random(PERM_SEED).shuffle(order)
    dataset = NumpyPackedFSLDataset(
        *[paths[i] for i in order],
        sequence_length=L,
        pad_token_id=PAD,
        eos_token_id=EOS,
        vocab_size=VOCAB,
        dtype=np.uint32,
        generate_doc_lengths=True,
        **{"source_group_size": GROUP, **kwargs},
    )
    dataset.work_dir = work_dir
    dataset.prepare()
    return dataset


def olmo_core_batches(dataset, work_dir: str, epoch: int, *, dp_world_size: int = 1, dp_rank: int = 0):
    """One epoch of OLMo-core's NumpyFSLDataLoader local batches: (input_ids, doc_lens, index)."""
    from olmo_core.data import DataCollator, NumpyDataLoaderBase

    loader = NumpyDataLoaderBase.wrap_numpy_dataset(
        dataset,
        global_batch_size=G * L,
        collator=DataCollator(pad_token_id=PAD),
        work_dir=work_dir,
        seed=SEED,
        dp_world_size=dp_world_size,
        dp_rank=dp_rank,
    )
    loader.reshuffle(epoch=epoch)
    out = [(b["input_ids"].numpy(), b["doc_lens"].numpy(), b["index"].numpy()) for b in loader]
    loader.reset()
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_document_files(str(tmp_path_factory.mktemp("docs")))


@pytest.fixture(scope="module")
def reference(files, tmp_path_factory):
    return olmo_core_dataset(files, str(tmp_path_factory.mktemp("oc")))


@pytest.fixture(scope="module")
def packed(files, tmp_path_factory):
    return build_packed_index(
        files,
        [f"s{i % 3}" for i in range(len(files))],
        L,
        PackSpec(EOS, PAD, VOCAB, source_group_size=GROUP, source_permutation_seed=PERM_SEED),
        work_dir=str(tmp_path_factory.mktemp("w")),
    )


def test_every_instance_equals_olmo_core(reference, packed):
    assert packed.num_instances == len(reference)
    rows = packed.read(np.arange(packed.num_instances))
    lens = packed.doc_lens(rows["input_ids"])
    for i in range(len(reference)):
        ref = reference[i]
        np.testing.assert_array_equal(rows["input_ids"][i], ref["input_ids"].numpy(), err_msg=f"{i=}")
        np.testing.assert_array_equal(rows["label_mask"][i], ref["label_mask"].numpy(), err_msg=f"{i=}")
        ref_lens = ref["doc_lens"].numpy()
        np.testing.assert_array_equal(lens[i, : ref_lens.size], ref_lens, err_msg=f"{i=}")
        assert not lens[i, ref_lens.size :].any()


@pytest.mark.parametrize("bos,strategy,group", [(None, "fragment", 1), (50_001, "truncate", 3)])
def test_other_options_equal_olmo_core(tmp_path, bos, strategy, group):
    from olmo_core.data.types import LongDocStrategy

    files = write_document_files(str(tmp_path / "d"), n_files=10, seed=2, bos=bos)
    ref = olmo_core_dataset(
        files,
        str(tmp_path / "oc"),
        bos_token_id=bos,
        long_doc_strategy=LongDocStrategy(strategy),
        source_group_size=group,
    )
    packed = build_packed_index(
        files,
        ["a"] * len(files),
        L,
        PackSpec(
            EOS,
            PAD,
            VOCAB,
            bos_token_id=bos,
            long_doc_strategy=strategy,
            source_group_size=group,
            source_permutation_seed=PERM_SEED,
        ),
    )
    assert packed.num_instances == len(ref) and packed.fingerprint == ref.fingerprint
    rows = packed.read(np.arange(packed.num_instances))
    lens = packed.doc_lens(rows["input_ids"])
    for i in range(len(ref)):
        np.testing.assert_array_equal(rows["input_ids"][i], ref[i]["input_ids"].numpy(), err_msg=f"{i=}")
        ref_lens = ref[i]["doc_lens"].numpy()
        np.testing.assert_array_equal(lens[i, : ref_lens.size], ref_lens, err_msg=f"{i=}")


def test_instances_hold_what_they_say(packed):
    # Guards the reference comparison: docs end in EOS or are L-token truncations, none is repeated.
    rows = packed.read(np.arange(packed.num_instances))
    seen = set()
    for i in range(packed.num_instances):
        docs = packed.instance_documents(i)
        assert sum(e - s for _, s, e in docs) == rows["label_mask"][i].sum() <= L
        for f, s, e in docs:
            tokens = np.fromfile(packed.paths[f], dtype=np.uint32)
            assert tokens[e - 1] == EOS or e - s == L
            assert (f, s) not in seen
            seen.add((f, s))
        assert rows["source"][i] == packed.file_label_ids[docs[0][0]]
    assert 0 < packed.padding_fraction < 0.5


def test_fingerprint_equals_olmo_core(reference, packed):
    assert packed.fingerprint == reference.fingerprint


@pytest.mark.parametrize("P", [1, 2])
def test_global_batches_equal_olmo_core_loader(reference, packed, tmp_path, P):
    per_epoch = packed.num_instances // G
    for epoch in (1, 2):
        order = epoch_order("olmo-core", packed.num_instances, SEED, epoch, str(tmp_path))
        for rank in range(P):
            ref = olmo_core_batches(reference, str(tmp_path / "oc"), epoch, dp_world_size=P, dp_rank=rank)
            assert len(ref) == per_epoch
            for step, (ids, doc_lens, index) in enumerate(ref):
                mine = order.take(step * G + rank, (step + 1) * G, P).astype(np.int64)
                np.testing.assert_array_equal(mine, index)
                rows = packed.read(mine)
                np.testing.assert_array_equal(rows["input_ids"], ids, err_msg=f"{epoch=} {step=} {rank=}")
                # The collator pads doc_lens with zeros to the most documents of the local batch.
                np.testing.assert_array_equal(
                    packed.doc_lens(rows["input_ids"]), doc_lens, err_msg=f"{epoch=} {step=} {rank=}"
                )


def reference_pack(lengths: np.ndarray, max_len: int) -> tuple[list[int], list[list[int]]]:
    from olmo_core.data.utils import InstancePacker

    idx = np.stack([np.zeros(len(lengths), np.uint64), np.asarray(lengths, np.uint64)], axis=1)
    instances, sorted_idx, _ = InstancePacker(max_len).pack_documents(idx)
    return sorted_idx[:, 1].astype(np.int64).tolist(), instances


@pytest.mark.parametrize(
    "max_len,lengths",
    [
        (1024, np.random.default_rng(0).integers(1, 1025, 10_000)),
        (1024, np.random.default_rng(1).integers(1, 9, 10_000) * 128),  # few values: many ties
        (64, np.minimum(np.random.default_rng(2).geometric(0.05, 10_000), 64)),
        (64, np.full(100, 64)),  # every doc exactly L
        (64, np.full(101, 33)),  # L/2 + 1: one per bin
        (64, np.full(100, 32)),  # exactly two per bin
        (1, np.ones(7, dtype=np.int64)),
        (2, np.random.default_rng(3).integers(1, 3, 50)),
        (16, np.array([], dtype=np.int64)),
    ],
)
def test_obfd_equals_instance_packer(max_len, lengths):
    sorted_lens, instances = reference_pack(lengths, max_len)
    order, offsets, docs = obfd(lengths, max_len)
    np.testing.assert_array_equal(np.asarray(lengths)[order], sorted_lens)
    assert offsets.tolist() == np.cumsum([0] + [len(b) for b in instances]).tolist()
    assert docs.tolist() == [d for b in instances for d in b]


def test_obfd_rejects_bad_input():
    with pytest.raises(OlmaxError, match="power of two"):
        obfd(np.array([3]), 48)
    with pytest.raises(OlmaxError, match=r"\[1, 16\]"):
        obfd(np.array([17]), 16)


@pytest.mark.parametrize("bos", [None, 7])
@pytest.mark.parametrize("strategy", ["truncate", "fragment"])
def test_document_spans_equal_olmo_core(tmp_path, bos, strategy):
    from olmo_core.data.types import LongDocStrategy
    from olmo_core.data.utils import iter_document_indices_with_max_sequence_length

    rng = np.random.default_rng(5)
    tokens = rng.choice(
        np.array([1, 2, 3, EOS, 7], dtype=np.uint32), size=3000, p=[0.3, 0.3, 0.3, 0.05, 0.05]
    )
    tokens[-1] = EOS
    for cut in (3000, 2990):
        path = tmp_path / f"t{cut}.npy"
        tokens[:cut].tofile(path)
        ref = list(
            iter_document_indices_with_max_sequence_length(
                path,
                16,
                eos_token_id=EOS,
                bos_token_id=bos,
                dtype=np.uint32,
                long_doc_strategy=LongDocStrategy(strategy),
            )
        )
        got = document_spans(tokens[:cut], EOS, 16, bos_token_id=bos, long_doc_strategy=strategy)
        assert got.tolist() == [list(x) for x in ref]


@pytest.mark.parametrize("bos", [None, 7])
def test_document_lengths_equal_olmo_core(bos):
    from olmo_core.data.utils import get_document_lengths

    rng = np.random.default_rng(6)
    for _ in range(200):
        row = rng.choice(np.array([1, EOS, 7, PAD]), size=int(rng.integers(1, 20)))
        ref = get_document_lengths(row, EOS, bos_token_id=bos).numpy()
        np.testing.assert_array_equal(document_lengths(row, EOS, bos), ref)


def test_source_permutation_is_olmo_cores():
    order = list(range(10))
    random.Random(3).shuffle(order)
    assert source_permutation(10, 3) == order
    assert source_permutation(4, None) == [0, 1, 2, 3]


def test_cache_is_reused_and_keyed_on_inputs(files, tmp_path):
    files = write_document_files(str(tmp_path / "d"), n_files=6, seed=1)
    spec = PackSpec(EOS, PAD, VOCAB, source_group_size=2)
    work_dir = str(tmp_path / "w")
    labels = ["a"] * len(files)
    first = build_packed_index(files, labels, L, spec, work_dir=work_dir)
    mtime = os.stat(first.cache_path).st_mtime_ns
    again = build_packed_index(files, labels, L, spec, work_dir=work_dir)
    assert again.cache_path == first.cache_path and os.stat(again.cache_path).st_mtime_ns == mtime
    np.testing.assert_array_equal(again.doc_start, first.doc_start)
    assert build_packed_index(files, labels, 2 * L, spec, work_dir=work_dir).cache_key != first.cache_key
    assert (
        build_packed_index(files, labels, L, replace(spec, source_group_size=3), work_dir=work_dir).cache_key
        != first.cache_key
    )
    tokens = np.fromfile(files[0], dtype=np.uint32)
    tokens[:5] = EOS  # same size, new content
    tokens.tofile(files[0])
    changed = build_packed_index(files, labels, L, spec, work_dir=work_dir)
    assert changed.cache_key != first.cache_key and changed.num_documents > first.num_documents


def test_parallel_packing_equals_serial(files, packed, tmp_path):
    par = build_packed_index(
        files,
        [f"s{i % 3}" for i in range(len(files))],
        L,
        PackSpec(EOS, PAD, VOCAB, source_group_size=GROUP, source_permutation_seed=PERM_SEED),
        workers=2,
    )
    for name in ("doc_file", "doc_start", "doc_len", "inst_offsets"):
        np.testing.assert_array_equal(getattr(par, name), getattr(packed, name))


def test_bad_inputs_name_the_file(tmp_path):
    good = tmp_path / "good.npy"
    np.array([1, 2, EOS], dtype=np.uint32).tofile(good)
    spec = PackSpec(EOS, PAD, VOCAB)
    odd = tmp_path / "odd.npy"
    odd.write_bytes(b"\0" * 10)
    with pytest.raises(OlmaxError, match=r"odd\.npy: size 10 bytes"):
        build_packed_index([str(good), str(odd)], ["a", "a"], L, spec)
    big = tmp_path / "big.npy"
    np.array([1, VOCAB + 3, EOS], dtype=np.uint32).tofile(big)
    with pytest.raises(OlmaxError, match=r"big\.npy: token 100281 at token offset 1"):
        build_packed_index([str(big)], ["a"], L, spec)
    noeos = tmp_path / "noeos.npy"
    np.array([1, 2, 3], dtype=np.uint32).tofile(noeos)
    with pytest.raises(OlmaxError, match=r"noeos\.npy: no complete document"):
        build_packed_index([str(noeos)], ["a"], L, spec)
    with pytest.raises(OlmaxError, match=r"missing\.npy: token file not found"):
        build_packed_index([str(tmp_path / "missing.npy")], ["a"], L, spec)
    with pytest.raises(OlmaxError, match="not a power of two"):
        build_packed_index([str(good)], ["a"], 48, spec)

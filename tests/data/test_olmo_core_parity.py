"""Independent check against OLMo-core's NumpyFSLDataLoader: same global batches, process I holds rows I::P."""

from __future__ import annotations

import numpy as np
import pytest

from olmax.data.index import build_index
from olmax.data.loader import Loader
from olmax.data.mixfile import read_mix
from olmax.data.stream import StreamSpec
from tests.data.loader_testdata import (
    SIZES,
    expected_rows,
    olmo_core_epoch,
    olmo_core_loader,
    write_position_files,
)

L, G, SEED = 16, 8, 7


@pytest.fixture(scope="module")
def mix(tmp_path_factory):
    return read_mix(write_position_files(str(tmp_path_factory.mktemp("positions"))))


@pytest.fixture(scope="module")
def reference(mix, tmp_path_factory):
    """OLMo-core's global batches (P=1) for epochs 1 and 2."""
    loader = olmo_core_loader(mix.paths, L, G, SEED, str(tmp_path_factory.mktemp("oc")))
    return {epoch: olmo_core_epoch(loader, epoch) for epoch in (1, 2)}


def test_reference_is_what_we_think(reference):
    # Guards the comparison itself: OLMo-core's rows hold their own positions and epochs differ.
    n_instances = sum(n // L for n in SIZES)
    assert len(reference[1]) == n_instances // G
    for ids, index in reference[1]:
        np.testing.assert_array_equal(ids, expected_rows(index, L))
    assert not np.array_equal(reference[1][0][1], reference[2][0][1])


@pytest.mark.parametrize("P", [1, 2, 4, 8])
def test_global_batches_equal_olmo_core_for_every_process_count(mix, reference, tmp_path, P):
    index = build_index(mix, L)
    for rank in range(P):
        loader = Loader(
            index,
            StreamSpec(seq_len=L, global_batch_size=G, seed=SEED, work_dir=str(tmp_path)),
            process_index=rank,
            process_count=P,
        )
        it = loader.iterate()
        for epoch in (1, 2):
            assert it.position == (epoch, 0)
            for step, (ids, inst) in enumerate(reference[epoch]):
                batch = next(it)
                np.testing.assert_array_equal(batch["input_ids"], ids[rank::P], err_msg=f"{epoch=} {step=}")
                np.testing.assert_array_equal(batch["instance_ids"], inst[rank::P])


@pytest.mark.parametrize("P", [2, 4])
def test_processes_match_olmo_core_ranks(mix, tmp_path, P):
    # OLMo-core's own dp_rank slicing against ours, rank by rank, epoch 2.
    index = build_index(mix, L)
    for rank in range(P):
        ref = olmo_core_epoch(
            olmo_core_loader(mix.paths, L, G, SEED, str(tmp_path / "oc"), dp_world_size=P, dp_rank=rank), 2
        )
        loader = Loader(
            index,
            StreamSpec(seq_len=L, global_batch_size=G, seed=SEED, work_dir=str(tmp_path)),
            process_index=rank,
            process_count=P,
        )
        for step, (ids, _) in enumerate(ref):
            np.testing.assert_array_equal(loader.batch(2, step)["input_ids"], ids)


def test_random_start_step_gives_exact_continuation(mix, reference, tmp_path):
    index = build_index(mix, L)
    rng = np.random.default_rng(0)
    steps = len(reference[1])
    for _ in range(4):
        epoch, start = int(rng.integers(1, 3)), int(rng.integers(0, steps))
        P = int(rng.choice([1, 2, 4]))
        rank = int(rng.integers(0, P))
        loader = Loader(
            index,
            StreamSpec(seq_len=L, global_batch_size=G, seed=SEED, work_dir=str(tmp_path)),
            process_index=rank,
            process_count=P,
        )
        it = loader.iterate(loader.state_at(epoch, start))
        for step in range(start, steps):
            np.testing.assert_array_equal(next(it)["input_ids"], reference[epoch][step][0][rank::P])


def test_every_instance_exactly_once_per_epoch(mix, tmp_path):
    index = build_index(mix, L)
    P = 4
    seen = []
    for rank in range(P):
        loader = Loader(
            index,
            StreamSpec(seq_len=L, global_batch_size=G, seed=SEED, work_dir=str(tmp_path)),
            process_index=rank,
            process_count=P,
        )
        seen += [loader.batch(1, s)["instance_ids"] for s in range(loader.batches_per_epoch)]
    seen = np.concatenate(seen)
    kept = (index.num_instances // G) * G
    assert seen.size == kept and np.unique(seen).size == kept
    assert seen.max() < index.num_instances


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 34521])
def test_parity_on_larger_random_layouts(tmp_path, seed):
    # Many files of random sizes, a longer L and P = 8: every batch of two epochs, every rank.
    rng = np.random.default_rng(seed)
    sizes = rng.integers(100, 20_000, size=40).tolist()
    labels = [f"s{i % 5}" for i in range(40)]
    mix = read_mix(write_position_files(str(tmp_path / "d"), sizes, labels))
    seq_len, gbs, P = 64, 32, 8
    index = build_index(mix, seq_len, allow_short_files=True)
    ref = olmo_core_loader(mix.paths, seq_len, gbs, seed, str(tmp_path / "oc"))
    for epoch in (1, 2):
        batches = olmo_core_epoch(ref, epoch)
        for rank in range(P):
            loader = Loader(
                index,
                StreamSpec(seq_len=seq_len, global_batch_size=gbs, seed=seed, work_dir=str(tmp_path / "w")),
                process_index=rank,
                process_count=P,
            )
            assert loader.batches_per_epoch == len(batches)
            for step, (ids, _) in enumerate(batches):
                np.testing.assert_array_equal(loader.batch(epoch, step)["input_ids"], ids[rank::P])

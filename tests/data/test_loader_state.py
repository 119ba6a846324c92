"""Loader state through Orbax: resumes equal the unbroken stream, across epochs, P and G changes."""

from __future__ import annotations

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from olmax.data.index import build_index
from olmax.data.loader import Loader
from olmax.data.loader_checkpoint import LoaderRestore, LoaderSave
from olmax.data.mixfile import read_mix
from olmax.data.state import LoaderState
from olmax.data.stream import StreamSpec
from olmax.errors import OlmaxError
from tests.data.loader_testdata import olmo_core_loader, write_position_files

jax.config.update("jax_numpy_rank_promotion", "raise")

L, G, SEED = 16, 8, 11


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return build_index(read_mix(write_position_files(str(tmp_path_factory.mktemp("pos")))), L)


def make(index, work_dir, *, G=G, P=1, rank=0, seed=SEED, **kw):
    return Loader(
        index,
        StreamSpec(seq_len=L, global_batch_size=G, seed=seed, work_dir=str(work_dir), **kw),
        process_index=rank,
        process_count=P,
    )


def save_and_restore(directory, step: int, state: LoaderState) -> LoaderState:
    """Round-trip a state through an Orbax CheckpointManager, beside a jax array like a train state."""
    with ocp.CheckpointManager(directory) as mngr:
        mngr.save(
            step,
            args=ocp.args.Composite(
                params=ocp.args.StandardSave({"w": jax.numpy.ones(3)}), data=LoaderSave(state)
            ),
        )
        mngr.wait_until_finished()
    with ocp.CheckpointManager(directory) as mngr:
        restored = mngr.restore(step, args=ocp.args.Composite(data=LoaderRestore()))
    return restored.data


def unbroken(loader, n: int) -> list[np.ndarray]:
    it = loader.iterate()
    return [next(it)["instance_ids"] for _ in range(n)]


def test_restore_at_random_steps_including_across_epochs(index, tmp_path):
    loader = make(index, tmp_path, num_threads=2)
    bpe = loader.batches_per_epoch
    total = 2 * bpe + 5  # runs into epoch 3
    stream = unbroken(loader, total)
    rng = np.random.default_rng(3)
    cuts = sorted({bpe - 1, bpe, 2 * bpe - 2, *rng.integers(1, total - 1, size=3).tolist()})
    for cut in cuts:
        it = make(index, tmp_path).iterate()
        for _ in range(cut):
            next(it)
        state = save_and_restore(tmp_path / f"ckpt-{cut}", cut, it.state)
        assert state == it.state
        resumed = make(index, tmp_path, num_threads=3).iterate(state)
        for k in range(cut, total):
            np.testing.assert_array_equal(next(resumed)["instance_ids"], stream[k], err_msg=f"{cut=} {k=}")


def test_epoch_rollover_state(index, tmp_path):
    loader = make(index, tmp_path)
    it = loader.iterate()
    for _ in range(loader.batches_per_epoch):
        next(it)
    assert (it.state.epoch, it.state.tokens_processed) == (2, 0)
    assert it.position == (2, 0)


def run_processes(
    index, work_dir, P: int, state: LoaderState, n: int
) -> tuple[list[np.ndarray], LoaderState]:
    """n global batches reassembled from P processes' rows (row j of process I is position I + j*P)."""
    rows = []
    states = set()
    for rank in range(P):
        it = make(index, work_dir, P=P, rank=rank).iterate(state)
        rows.append([next(it)["instance_ids"] for _ in range(n)])
        states.add(it.state)
    assert len(states) == 1, "every process must end in the same state"
    batches = []
    for k in range(n):
        batch = np.empty(G, dtype=np.int64)
        for rank in range(P):
            batch[rank::P] = rows[rank][k]
        batches.append(batch)
    return batches, states.pop()


def test_process_count_8_to_2_to_8(index, tmp_path):
    bpe = make(index, tmp_path).batches_per_epoch
    stream = unbroken(make(index, tmp_path), bpe + 6)
    state = make(index, tmp_path).state_at(1, 0)
    got = []
    for P, n in ((8, 7), (2, bpe - 7 + 3), (8, 3)):
        batches, state = run_processes(index, tmp_path, P, state, n)
        state = save_and_restore(tmp_path / f"p{P}-{len(got)}", len(got) + n, state)
        got += batches
    assert len(got) == len(stream)
    for k, (a, b) in enumerate(zip(got, stream)):
        np.testing.assert_array_equal(a, b, err_msg=f"batch {k}")


@pytest.mark.parametrize("consumed", [4, 5])
def test_global_batch_doubled_follows_olmo_core(index, tmp_path, consumed):
    # OLMo-core: save after `consumed` batches of G, load into a loader of 2G, continue; 5 is odd, so
    # OLMo-core's floor(tokens / batch tokens) rule re-reads half a batch, and so must we.
    ref = olmo_core_loader(index.paths, L, G, SEED, str(tmp_path / "oc"))
    ref.reshuffle(epoch=1)
    it_ref = iter(ref)
    for _ in range(consumed):
        next(it_ref)
    ref_state = ref.state_dict()
    ref2 = olmo_core_loader(index.paths, L, 2 * G, SEED, str(tmp_path / "oc"))
    ref2.load_state_dict(ref_state)
    ref2.reshuffle(epoch=ref_state["epoch"])
    expected = [b["index"].numpy() for b in ref2]

    it = make(index, tmp_path).iterate()
    for _ in range(consumed):
        next(it)
    state = save_and_restore(tmp_path / "ckpt", consumed, it.state)
    assert state.tokens_processed == ref_state["tokens_processed"]
    if consumed % 2:
        with pytest.warns(UserWarning, match="partial batch"):
            resumed = make(index, tmp_path, G=2 * G).iterate(state)
    else:
        resumed = make(index, tmp_path, G=2 * G).iterate(state)
    assert len(expected) > 0
    for k, want in enumerate(expected):
        np.testing.assert_array_equal(next(resumed)["instance_ids"], want, err_msg=f"batch {k}")
    assert resumed.position == (2, 0)


def test_global_batch_halved(index, tmp_path):
    stream = np.concatenate(unbroken(make(index, tmp_path), 6))
    it = make(index, tmp_path).iterate()
    for _ in range(3):
        next(it)
    half = make(index, tmp_path, G=G // 2).iterate(it.state)
    got = np.concatenate([next(half)["instance_ids"] for _ in range(6)])
    np.testing.assert_array_equal(got, stream[3 * G :])


def test_resume_refuses_changed_data_or_seed(index, tmp_path):
    state = make(index, tmp_path).iterate().state
    other = build_index(
        read_mix(write_position_files(str(tmp_path / "other"), sizes=(999, 500), labels=("a", "b"))), L
    )
    with pytest.raises(OlmaxError, match="fingerprint"):
        make(other, tmp_path).iterate(state)
    with pytest.raises(OlmaxError, match="seed 11"):
        make(index, tmp_path, seed=12).iterate(state)
    with pytest.raises(OlmaxError, match="order"):
        make(index, tmp_path, order="feistel").iterate(state)


def test_state_dict_roundtrip_and_bad_state(tmp_path):
    state = LoaderState("ab" * 32, 1, 2, 4096, 16, 8)
    assert LoaderState.from_dict(state.to_dict()) == state
    assert state.to_dict()["batches_processed"] == 32
    with pytest.raises(OlmaxError, match="missing"):
        LoaderState.from_dict({"seed": 1}, origin="x.json")

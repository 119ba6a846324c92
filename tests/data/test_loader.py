"""The Grain pipeline: batch contents, document masks, prefetch invariance, one sharding layer, errors."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from olmax.data.grain_source import BatchSource, document_masks
from olmax.data.index import build_index
from olmax.data.loader import Loader
from olmax.data.mixfile import read_mix
from olmax.data.stream import StreamSpec
from olmax.errors import OlmaxError
from tests.data.loader_testdata import LABELS, expected_rows, write_position_files

L, G, SEED = 16, 8, 5


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return build_index(read_mix(write_position_files(str(tmp_path_factory.mktemp("pos")))), L)


LOADER_ARGS = ("num_epochs", "eos_token_id", "bos_token_id")  # Loader's own; the rest describe the stream


def make(index, work_dir, *, P=1, rank=0, **kw):
    own = {k: kw.pop(k) for k in LOADER_ARGS if k in kw}
    spec = StreamSpec(seq_len=L, global_batch_size=G, seed=SEED, work_dir=str(work_dir), **kw)
    return Loader(index, spec, process_index=rank, process_count=P, **own)


def test_batch_fields(index, tmp_path):
    loader = make(index, tmp_path, P=2, rank=1)
    batch = loader.batch(1, 3)
    np.testing.assert_array_equal(loader.instance_ids(1, 3), batch["instance_ids"])
    assert set(batch) == {"input_ids", "instance_ids", "source"}
    assert batch["input_ids"].dtype == np.int32 and batch["input_ids"].shape == (G // 2, L)
    np.testing.assert_array_equal(batch["input_ids"], expected_rows(batch["instance_ids"], L))
    names = index.label_names
    files, _ = index.locate(batch["instance_ids"])
    assert [names[s] for s in batch["source"]] == [LABELS[f] for f in files]


def _masks_by_hand(row, eos, bos):
    seg, pos, s, p = [], [], 0, 0
    for t, tok in enumerate(row):
        if bos is not None and tok == bos and t > 0:
            s, p = s + 1, 0
        elif bos is not None and tok == bos:
            s = 1
        seg.append(s)
        pos.append(p)
        p += 1
        if bos is None and tok == eos:
            s, p = s + 1, 0
    return seg, pos


@pytest.mark.parametrize("bos", [None, 7])
def test_document_masks(bos):
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 10, size=(6, 40)).astype(np.int32)
    ids[0, -1] = ids[1, 0] = 9
    seg, pos = document_masks(ids, eos_token_id=9, bos_token_id=bos)
    for r in range(ids.shape[0]):
        want_seg, want_pos = _masks_by_hand(ids[r].tolist(), 9, bos)
        assert seg[r].tolist() == want_seg and pos[r].tolist() == want_pos


def test_masks_in_batches(index, tmp_path):
    batch = make(index, tmp_path, document_masks=True, eos_token_id=100).batch(1, 0)
    seg, pos = document_masks(batch["input_ids"], 100)
    np.testing.assert_array_equal(batch["segment_ids"], seg)
    np.testing.assert_array_equal(batch["positions"], pos)


@pytest.mark.parametrize("threads,buffer", [(1, 1), (4, 8)])
def test_prefetch_does_not_change_the_stream(index, tmp_path, threads, buffer):
    n = 2 * make(index, tmp_path).batches_per_epoch + 3
    plain = make(index, tmp_path, num_threads=0).iterate()
    want = [next(plain)["instance_ids"] for _ in range(n)]
    it = make(index, tmp_path, num_threads=threads, prefetch_buffer_size=buffer).iterate()
    for k in range(n):
        np.testing.assert_array_equal(next(it)["instance_ids"], want[k])


def test_processes_partition_each_global_batch(index, tmp_path):
    # Exactly one layer shards: the union of all processes' rows is the global batch, no row twice.
    P = 4
    full = make(index, tmp_path)
    for step in range(full.batches_per_epoch):
        parts = [make(index, tmp_path, P=P, rank=r).batch(2, step)["instance_ids"] for r in range(P)]
        np.testing.assert_array_equal(
            np.sort(np.concatenate(parts)), np.sort(full.batch(2, step)["instance_ids"])
        )


def test_feistel_order_covers_each_instance_once(index, tmp_path):
    loader = make(index, tmp_path, order="feistel")
    seen = np.concatenate([loader.batch(1, s)["instance_ids"] for s in range(loader.batches_per_epoch)])
    assert np.unique(seen).size == seen.size == loader.batches_per_epoch * G
    other = np.concatenate([loader.batch(2, s)["instance_ids"] for s in range(loader.batches_per_epoch)])
    assert not np.array_equal(seen, other)


def test_source_repr_is_stable_and_pickles(index, tmp_path):
    a = make(index, tmp_path, P=2, rank=1).source
    b = make(index, tmp_path, P=2, rank=1).source
    assert repr(a) == repr(b) and index.fingerprint in repr(a) and "process=1/2" in repr(a)
    c = pickle.loads(pickle.dumps(a))
    np.testing.assert_array_equal(c[5]["input_ids"], a[5]["input_ids"])
    assert len(a) >= a.batches_per_epoch


def test_bad_settings(index, tmp_path):
    with pytest.raises(OlmaxError, match="--global-batch-size 8 is not divisible by --process-count 3"):
        make(index, tmp_path, P=3)
    with pytest.raises(OlmaxError, match="--process-index 2 is outside"):
        make(index, tmp_path, P=2, rank=2)
    with pytest.raises(OlmaxError, match="fewer than one global batch"):
        BatchSource(
            index, StreamSpec(seq_len=index.seq_len, global_batch_size=index.num_instances + 1, seed=0)
        )
    loader = make(index, tmp_path)
    with pytest.raises(OlmaxError, match="--start-step"):
        loader.state_at(1, loader.batches_per_epoch)
    with pytest.raises(OlmaxError, match="1-based"):
        loader.state_at(0, 0)


def test_num_epochs_bounds_the_stream(index, tmp_path):
    loader = make(index, tmp_path, num_epochs=1)
    assert sum(1 for _ in loader.iterate()) == loader.batches_per_epoch


def test_prefetch_processes_do_not_change_the_stream(index, tmp_path):
    n = make(index, tmp_path).batches_per_epoch + 4
    plain = make(index, tmp_path, num_threads=0).iterate()
    want = [next(plain)["instance_ids"] for _ in range(n)]
    it = make(index, tmp_path, num_workers=2).iterate(make(index, tmp_path).state_at(1, 0))
    try:
        for k in range(n):
            np.testing.assert_array_equal(next(it)["instance_ids"], want[k])
    finally:
        it.close()


def test_loaders_of_one_process_share_one_order_mapping(index, tmp_path):
    """One loader per rank in one process (the loader audit) maps the order file once, not once per rank."""
    a, b = make(index, tmp_path, P=2, rank=0), make(index, tmp_path, P=2, rank=1)
    assert a.epoch_order(1) is b.epoch_order(1)
    np.testing.assert_array_equal(
        np.sort(np.concatenate([a.rows(1, 0, 4), b.rows(1, 0, 4)], axis=1)),
        np.sort(a.epoch_order(1).take(0, 4 * G).reshape(4, G), axis=1),
    )

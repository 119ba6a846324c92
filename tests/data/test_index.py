"""The index: instances per file, instance -> (file, window), source ids, and OLMo-core's fingerprint."""

from __future__ import annotations

import os

import numpy as np
import pytest

from olmax.data.index import TokenFields, build_index, data_fingerprint, index_from_sizes
from olmax.data.mixfile import Mix, read_mix
from olmax.data.reader import TokenReader, check_token_ids
from olmax.errors import OlmaxError
from tests.data.loader_testdata import LABELS, SIZES, expected_rows, write_position_files

L = 16


@pytest.fixture(scope="module")
def mix(tmp_path_factory):
    return read_mix(write_position_files(str(tmp_path_factory.mktemp("pos"))))


def test_counts_offsets_and_locate(mix):
    index = build_index(mix, L)
    np.testing.assert_array_equal(index.counts, [n // L for n in SIZES])
    assert index.num_instances == sum(n // L for n in SIZES)
    ids = np.arange(index.num_instances)
    files, starts = index.locate(ids)
    rows = TokenReader(index).read(files, starts, np.empty((ids.size, L), dtype=np.uint32))
    np.testing.assert_array_equal(rows.astype(np.int32), expected_rows(ids, L))
    names = list(dict.fromkeys(LABELS))
    np.testing.assert_array_equal(index.source_ids(ids), [names.index(LABELS[f]) for f in files])
    with pytest.raises(IndexError):
        index.locate(np.array([index.num_instances]))


def test_tokens_by_label(mix):
    index = build_index(mix, L)
    shares = index.tokens_by_label()
    assert shares["code"] == (37 // L + 77 // L) * L
    assert sum(shares.values()) == index.num_tokens


@pytest.mark.parametrize("dtype,bos,vocab", [(np.uint32, None, 100278), (np.uint16, 1, 50280)])
def test_fingerprint_equals_olmo_core(mix, dtype, bos, vocab):
    from olmo_core.data import NumpyFSLDataset

    ref = NumpyFSLDataset(
        *mix.paths,
        sequence_length=L,
        pad_token_id=1,
        eos_token_id=2,
        vocab_size=vocab,
        dtype=dtype,
        bos_token_id=bos,
    )
    got = data_fingerprint(
        mix.paths,
        fields=TokenFields(dtype=dtype, vocab_size=vocab, pad_token_id=1, eos_token_id=2, bos_token_id=bos),
    )
    assert got == ref.fingerprint
    default = NumpyFSLDataset(
        *mix.paths,
        sequence_length=L,
        pad_token_id=100277,
        eos_token_id=100257,
        vocab_size=100278,
        dtype=np.uint32,
    )
    assert build_index(mix, L).fingerprint == default.fingerprint
    assert data_fingerprint(mix.paths) == default.fingerprint


def test_fingerprint_sees_sizes_and_names(mix):
    base = data_fingerprint(mix.paths)
    sizes = [os.path.getsize(p) for p in mix.paths]
    assert data_fingerprint(mix.paths, sizes=sizes) == base
    assert data_fingerprint(mix.paths, sizes=[sizes[0] + 4, *sizes[1:]]) != base
    assert data_fingerprint(list(reversed(mix.paths)), sizes=sizes[::-1]) != base


def test_bad_files(tmp_path):
    odd = tmp_path / "odd.npy"
    odd.write_bytes(b"\0" * 4098)
    with pytest.raises(OlmaxError, match=r"odd\.npy.*not a multiple of 4.*byte 4096"):
        build_index(Mix((str(odd),), ("a",), "m"), L)
    with pytest.raises(OlmaxError, match=r"nothere\.npy: token file not found"):
        build_index(Mix((str(tmp_path / "nothere.npy"),), ("a",), "m"), L)
    short = tmp_path / "short.npy"
    np.arange(10, dtype=np.uint32).tofile(short)
    with pytest.raises(OlmaxError, match=r"short\.npy: holds 10 tokens, fewer than --seq-len 16"):
        build_index(Mix((str(short),), ("a",), "m"), L)
    with pytest.raises(OlmaxError, match="--seq-len must be positive"):
        index_from_sizes(["x"], ["a"], [64], 0)


def test_short_files_allowed_like_olmo_core(tmp_path):
    short = tmp_path / "short.npy"
    np.arange(10, dtype=np.uint32).tofile(short)
    long = tmp_path / "long.npy"
    np.arange(40, dtype=np.uint32).tofile(long)
    index = build_index(Mix((str(short), str(long)), ("a", "b"), "m"), L, allow_short_files=True)
    assert index.counts.tolist() == [0, 2]


def test_sampled_vocab_check(mix, tmp_path):
    index = build_index(mix, L)
    assert check_token_ids(index, vocab_size=10_000, samples=8) == 8 * L
    with pytest.raises(
        OlmaxError, match=r"part-\d+\.npy: token \d+ at token offset \d+ is >= vocab size 100"
    ):
        check_token_ids(index, vocab_size=100, samples=400)


def test_fsspec_urls_read_like_local_files(mix):
    import fsspec

    fs = fsspec.filesystem("memory")
    urls = []
    for i, path in enumerate(mix.paths):
        with open(path, "rb") as f:
            fs.pipe(f"/olmax-test/p{i}.npy", f.read())
        urls.append(f"memory://olmax-test/p{i}.npy")
    local = build_index(mix, L)
    remote = build_index(Mix(tuple(urls), mix.labels, "m"), L)
    assert remote.sizes == local.sizes
    ids = np.arange(local.num_instances)[::3]
    out = [
        TokenReader(ix).read(*ix.locate(ids), np.empty((ids.size, L), np.uint32)) for ix in (local, remote)
    ]
    np.testing.assert_array_equal(out[0], out[1])
    with pytest.raises(OlmaxError, match="not found"):
        build_index(Mix(("memory://olmax-test/missing.npy",), ("a",), "m"), L)


def test_remote_errors_and_file_urls(mix, tmp_path):
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/olmax-short/p.npy", np.arange(64, dtype=np.uint32).tobytes())
    index = build_index(Mix(("memory://olmax-short/p.npy",), ("a",), "m"), L)
    fs.pipe("/olmax-short/p.npy", np.arange(20, dtype=np.uint32).tobytes())  # shrinks after indexing
    with pytest.raises(OlmaxError, match=r"p\.npy: ranged read of bytes \[128, 192\)"):
        TokenReader(index).read(*index.locate(np.array([2])), np.empty((1, L), np.uint32))
    folder = os.path.dirname(mix.paths[0])
    url_mix = tmp_path / "url-mix.txt"
    url_mix.write_text("".join(f"{lab},{os.path.basename(p)}\n" for lab, p in zip(mix.labels, mix.paths)))
    from olmax.data.index import open_index

    by_url = open_index(str(url_mix), L, base_dir=f"file://{folder}")
    assert by_url.paths[0] == f"file://{folder}/part-000.npy"
    assert by_url.fingerprint == build_index(mix, L).fingerprint  # basenames and sizes only
    ids = np.arange(by_url.num_instances)
    rows = TokenReader(by_url).read(*by_url.locate(ids), np.empty((ids.size, L), np.uint32))
    np.testing.assert_array_equal(rows.astype(np.int32), expected_rows(ids, L))

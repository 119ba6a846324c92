"""Token files (olmax.data.tokenfile): uint16 and uint32, the size check, ranged reads, and a uint16 stream
read end to end by the loader with the dtype taken from the StreamSpec."""

from __future__ import annotations

import fsspec
import numpy as np
import pytest

from olmax.data.loader import file_index, open_loader, stream_index
from olmax.data.stream import StreamSpec
from olmax.data.token_reads import read_slice
from olmax.data.tokenfile import (
    decode,
    encode,
    read_tokens,
    token_count,
    token_dtype,
    write_tokens,
)
from olmax.errors import OlmaxError


@pytest.mark.parametrize("dtype", ["uint16", "uint32"])
def test_round_trip(tmp_path, dtype):
    tokens = np.array([0, 1, 65_535, 7, 3], dtype=np.int64)
    path = write_tokens(tmp_path / "t.npy", tokens, dtype)
    assert path.stat().st_size == tokens.size * np.dtype(dtype).itemsize
    for mmap in (True, False):
        got = read_tokens(path, dtype, mmap=mmap)
        assert got.dtype == np.dtype(dtype) and got.tolist() == tokens.tolist()
    assert read_slice(str(path), 1, 3, dtype).tolist() == [1, 65_535, 7]
    assert read_slice(str(path), 4, 10, dtype).tolist() == [3]  # the file ends first
    assert decode(encode(tokens, dtype), dtype).tolist() == tokens.tolist()


def test_the_same_bytes_read_as_another_dtype_differ(tmp_path):
    path = write_tokens(tmp_path / "t.npy", np.array([1, 2]), "uint16")
    assert read_tokens(path, "uint32").tolist() == [1 + (2 << 16)]


def test_size_off_the_token_grid_names_the_byte(tmp_path):
    path = tmp_path / "cut.npy"
    path.write_bytes(b"\0" * 10)
    with pytest.raises(OlmaxError, match=r"cut\.npy: size 10 bytes is not a multiple of 4.*byte 8"):
        read_tokens(path)
    assert token_count(path, 10, "uint16") == 5
    empty = tmp_path / "empty.npy"
    empty.write_bytes(b"")
    assert read_tokens(empty).size == 0


def test_bad_dtype_and_ids_that_do_not_fit():
    with pytest.raises(OlmaxError, match="uint16 or uint32"):
        token_dtype("int64")
    with pytest.raises(OlmaxError, match="do not fit uint16"):
        encode(np.array([70_000]), "uint16")
    with pytest.raises(OlmaxError, match="do not fit uint32"):
        encode(np.array([-1]), "uint32")
    with pytest.raises(OlmaxError, match="dtype 'int8'"):
        StreamSpec(dtype="int8")


def test_ranged_read_of_a_url():
    fs = fsspec.filesystem("memory")
    fs.pipe("/olmax-tokenfile/t.npy", np.arange(10, dtype="<u2").tobytes())
    assert read_slice("memory:///olmax-tokenfile/t.npy", 2, 3, "uint16").tolist() == [2, 3, 4]
    with pytest.raises(OlmaxError, match="not found"):
        read_slice("memory:///olmax-tokenfile/gone.npy", 0, 1)


def test_a_uint16_stream_reads_its_tokens(tmp_path):
    L = 8
    a = np.arange(0, 4 * L, dtype=np.int64)
    b = np.arange(1000, 1000 + 2 * L, dtype=np.int64)
    write_tokens(tmp_path / "a.npy", a, "uint16")
    write_tokens(tmp_path / "b.npy", b, "uint16")
    (tmp_path / "mix.txt").write_text("x,a.npy\ny,b.npy\n")
    spec = StreamSpec(
        mix=str(tmp_path / "mix.txt"),
        seq_len=L,
        global_batch_size=2,
        dtype="uint16",
        order="feistel",
        work_dir=str(tmp_path),
        num_threads=0,
    )
    index = stream_index(spec)
    assert index.dtype == "uint16" and index.num_instances == 6
    loader = open_loader(spec, index, process_index=0, process_count=1)
    windows = {tuple(a[i * L : (i + 1) * L]) for i in range(4)} | {
        tuple(b[i * L : (i + 1) * L]) for i in range(2)
    }
    seen = set()
    for step in range(loader.batches_per_epoch):
        for row in loader.batch(1, step)["input_ids"]:
            seen.add(tuple(int(t) for t in row))
    assert seen == windows  # every window, read as uint16 (as uint32 the 8-token rows would not exist)
    with pytest.raises(OlmaxError, match="content audits"):
        file_index(spec)

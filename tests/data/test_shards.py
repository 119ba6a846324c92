"""A shard's token file written with direct I/O (O_DIRECT, through a reused aligned buffer) holds exactly the
bytes a buffered write gives, for every size around the block and buffer bounds; a filesystem that refuses
direct I/O gets a buffered write; a failed write is one error naming the shard, with nothing left."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest

from olmax.data import shards
from olmax.data.readers import Doc
from olmax.data.shards import ShardWriter, read_sidecar
from olmax.data.tokenfile import read_tokens
from olmax.errors import OlmaxError

needs_direct = pytest.mark.skipif(not hasattr(os, "O_DIRECT"), reason="no O_DIRECT on this system")


def _write(tmp_path, name: str, pieces: list[np.ndarray]):
    w = ShardWriter(tmp_path / name, tmp_path)
    for k, piece in enumerate(pieces):
        w.add_batch(piece, [len(piece)], [Doc(f"d{k}", "", "src", k + 1)], 3)
    return w, w.close()


@needs_direct
def test_direct_writes_give_the_buffered_bytes(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    align, buffer = shards.DIRECT_ALIGN // 4, shards.DIRECT_BUFFER // 4  # in tokens
    sizes = [[0], [1], [align - 1], [align], [align + 1], [buffer], [buffer - 1, 2], [buffer + 1],
             [3, buffer, align, 5], list(rng.integers(1, 3 * align, 40)), [2 * buffer + 7]]  # fmt: skip
    for n, parts in enumerate(sizes):
        pieces = [rng.integers(0, 100_278, size=int(s), dtype=np.uint32) for s in parts]
        w, direct = _write(tmp_path, f"direct-{n}.npy", pieces)
        assert isinstance(w._f, shards._DirectFile), "the filesystem here takes direct I/O"
        monkeypatch.setattr(shards, "direct_io", False)
        w, buffered = _write(tmp_path, f"buffered-{n}.npy", pieces)
        monkeypatch.setattr(shards, "direct_io", True)
        assert not isinstance(w._f, shards._DirectFile)
        assert (tmp_path / direct.path).read_bytes() == (tmp_path / buffered.path).read_bytes()
        assert np.array_equal(read_tokens(tmp_path / direct.path), np.concatenate(pieces))
        assert direct.xxh64 == buffered.xxh64 and direct.tokens == sum(parts)
        assert [r.id for r in read_sidecar(tmp_path / direct.path)] == [f"d{k}" for k in range(len(parts))]
        assert not list(tmp_path.glob("*.tmp"))


@needs_direct
def test_a_filesystem_without_direct_io_gets_buffered_writes(tmp_path, monkeypatch):
    real = os.open

    def refuse(path, flags, *args):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(path, flags, *args)

    monkeypatch.setattr(os, "open", refuse)
    tokens = np.arange(10_000, dtype=np.uint32)
    w, info = _write(tmp_path, "t.npy", [tokens])
    assert not isinstance(w._f, shards._DirectFile)
    assert np.array_equal(read_tokens(tmp_path / info.path), tokens)
    # one that takes the flag at open and refuses the first write
    monkeypatch.setattr(os, "open", real)
    real_write = os.write
    refused = []

    def refuse_write(fd, data):
        if not refused:
            refused.append(fd)
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", refuse_write)
    w, info = _write(tmp_path, "u.npy", [tokens])
    assert refused and not isinstance(w._f, shards._DirectFile)
    assert np.array_equal(read_tokens(tmp_path / info.path), tokens)


@needs_direct
def test_a_full_disk_is_one_error_naming_the_shard(tmp_path, monkeypatch):
    """(A buffered write's full disk: tests/faults/test_corruption.py, under a real file-size limit.)"""
    w = ShardWriter(tmp_path / "f.npy", tmp_path)
    assert isinstance(w._f, shards._DirectFile)

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    big = np.zeros(shards.DIRECT_BUFFER, dtype=np.uint32)  # more than the buffer holds: a write is due
    monkeypatch.setattr(os, "write", full)
    with pytest.raises(
        OlmaxError, match=r"f\.npy\.tmp: cannot write tokens at byte offset 0 \(No space left"
    ):
        w.add_batch(big, [len(big)], [Doc("a", "", "src", 1)], 1)
    assert not list(tmp_path.iterdir())


def test_the_sidecar_csv_is_the_csv_modules():
    """Plain ids and sources (joined directly) and ones with commas, quotes, line breaks, spaces and
    non-ASCII (left to the csv module): the csv module's text either way."""
    import csv
    import io
    import random

    rng = random.Random(3)
    pieces = ["doc", "a,b", 'say "hi"', "line\nbreak", "cr\rhere", " pad ", "é中😀", "", "x" * 50, "\t", "'"]
    for n in range(300):
        rows = [
            (k * 7, k * 7 + 7, "".join(rng.choices(pieces, k=rng.randrange(0, 3))), rng.choice(pieces), k + 1)
            for k in range(rng.randrange(0, 6))
        ]
        if n % 3 == 0:  # most real sidecars: nothing to quote
            rows = [(a, b, f"id-{k}", "/data/part-00.jsonl.gz", k) for k, (a, b, *_) in enumerate(rows)]
        want = io.StringIO()
        csv.writer(want, lineterminator="\n").writerows(rows)
        assert shards.sidecar_csv(rows) == want.getvalue(), rows

"""Token files read where they are (olmax.data.token_reads, olmax.ranged): blocks, forward slices, batched and
sparse reads give a local file's tokens for any block size, for a local path, a file:// URL and an object
URL (memory://, and a store that fails some requests); a physical file is one key however it is named,
a copy is another; a rewrite or a removal while a file is read is one error naming it, never its bytes."""

from __future__ import annotations

import os
import shutil
import uuid

import fsspec
import numpy as np
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from olmax import ranged
from olmax.data import token_reads
from olmax.data.token_reads import TokenFile, physical_key, read_ranges, same_tokens
from olmax.errors import OlmaxError


class FlakyFileSystem(MemoryFileSystem):
    """memory:// whose ranged reads fail as told: `plan` is a list of faults taken one per read
    ("cut": half the bytes, "reset": a connection reset, "slow": a store's 503 answer, None: no fault)."""

    protocol = "flaky"
    plan: list = []
    reads = 0

    @classmethod
    def _strip_protocol(cls, path):
        return super()._strip_protocol(path.replace("flaky://", "memory://", 1))

    def cat_file(self, path, start=None, end=None, **kwargs):
        type(self).reads += 1
        fault = self.plan.pop(0) if self.plan else None
        data = super().cat_file(path, start=start, end=end, **kwargs)
        if fault == "cut":
            return data[: len(data) // 2]
        if fault == "reset":
            raise ConnectionResetError("connection reset by peer")
        if fault == "slow":
            raise OSError("503 SlowDown") from _HttpError(503)
        return data


class _HttpError(Exception):
    """What gcsfs raises for a store's error answer (its class name and `code` are what olmax reads)."""

    def __init__(self, code: int):
        super().__init__(f"{code}")
        self.code = code


_HttpError.__name__ = "HttpError"
fsspec.register_implementation("flaky", FlakyFileSystem, clobber=True)


@pytest.fixture
def tokens() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 100_000, 10_007).astype(np.uint32)


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(token_reads, "BLOCK_BYTES", 4 * 1000)
    monkeypatch.setattr(token_reads, "MERGE_GAP_BYTES", 4 * 50)
    monkeypatch.setattr(ranged, "BACKOFF", 0.001)
    yield
    ranged.forget_pins()


def urls_of(tmp_path, tokens) -> list[str]:
    """The same tokens as a local path, a file:// URL and two object URLs (memory://, flaky://)."""
    local = tmp_path / "t.npy"
    tokens.tofile(local)
    name = uuid.uuid4().hex[:8]
    for proto in ("memory", "flaky"):
        fsspec.filesystem(proto).pipe(f"/olmax-reads-{name}/t.npy", tokens.tobytes())
    return [
        str(local),
        f"file://{local}",
        f"memory:///olmax-reads-{name}/t.npy",
        f"flaky:///olmax-reads-{name}/t.npy",
    ]


def test_every_read_gives_the_files_tokens(tmp_path, tokens, small_blocks):
    for url in urls_of(tmp_path, tokens):
        f = TokenFile(url)
        assert len(f) == tokens.size and f.remote == url.startswith(("memory", "flaky"))
        for n in (None, 1, 999, 4096, 20_000):
            parts = list(f.blocks(n))
            assert [a for a, _ in parts] == list(range(0, tokens.size, n or 1000))
            assert np.array_equal(np.concatenate([b for _, b in parts]), tokens)
        assert [a for a, _ in f.blocks(1000, 2500, 5000)] == [2500, 3500, 4500]
        assert np.array_equal(f.read(10_000, 20_000), tokens[10_000:])
        view, got = f.forward(), []
        for a in range(0, tokens.size, 700):
            got.append(np.array(view[a : a + 900])[:700])
        assert np.array_equal(np.concatenate(got), tokens)
        ranges = [(5, 9), (9_000, 10_007), (100, 3_000), (2_990, 3_100), (7, 7)]
        assert all(np.array_equal(x, tokens[a:b]) for x, (a, b) in zip(f.read_many(ranges), ranges))
        sparse = f.sparse([(100, 200), (9_000, 9_500)])
        assert np.array_equal(sparse[100:200], tokens[100:200]) and np.array_equal(
            sparse[9_000:9_500], tokens[9_000:9_500]
        )
    assert same_tokens(urls_of(tmp_path, tokens)[2], 0, str(tmp_path / "t.npy"), 0, tokens.size)
    a, b = urls_of(tmp_path, tokens)[2:]
    got = read_ranges([(a, 3, 4), (b, 0, 2), (a, 10_000, 50)])
    assert [x.tolist() for x in got] == [tokens[3:7].tolist(), tokens[:2].tolist(), tokens[10_000:].tolist()]


def test_a_forward_view_refuses_to_go_back(tmp_path, tokens, small_blocks):
    view = TokenFile(urls_of(tmp_path, tokens)[2]).forward()
    assert np.array_equal(view[3000:3100], tokens[3000:3100])
    with pytest.raises(ValueError, match="move forward"):
        view[2000:2100]


def test_faults_are_retried_and_never_give_short_bytes(tmp_path, tokens, small_blocks):
    url = urls_of(tmp_path, tokens)[3]
    FlakyFileSystem.plan = ["cut", "reset", "slow", None, "cut"]
    parts = list(TokenFile(url).blocks())
    assert np.array_equal(np.concatenate([b for _, b in parts]), tokens)
    assert not FlakyFileSystem.plan
    FlakyFileSystem.plan = ["cut"] * ranged.ATTEMPTS
    with pytest.raises(
        OlmaxError, match=rf"{url}: reading bytes 0-4000 failed {ranged.ATTEMPTS} times \(2000 of 4000"
    ):
        TokenFile(url).read(0, 1000)


def test_a_rewrite_or_a_removal_during_a_pass_is_one_error(tmp_path, tokens, small_blocks):
    url = urls_of(tmp_path, tokens)[2]
    fs, path = fsspec.core.url_to_fs(url)
    blocks = TokenFile(url).blocks()
    next(blocks)
    fs.pipe(path, (tokens + 1).tobytes())  # same size, other bytes
    with pytest.raises(OlmaxError, match=rf"{url}: the object changed while it was being read"):
        list(blocks)
    ranged.forget_pins()
    blocks = TokenFile(url).blocks()
    next(blocks)
    fs.rm(path)
    with pytest.raises(OlmaxError, match=rf"{url}: removed while it was being read"):
        list(blocks)
    ranged.forget_pins()
    with pytest.raises(OlmaxError, match=rf"{url}: not found"):
        TokenFile(url)


def test_physical_keys_name_files_not_paths(tmp_path, tokens, small_blocks):
    local, as_url, mem, _ = urls_of(tmp_path, tokens)
    os.link(local, tmp_path / "hard.npy")
    shutil.copy(local, tmp_path / "copy.npy")
    assert physical_key(local) == physical_key(as_url) == physical_key(str(tmp_path / "hard.npy"))
    assert physical_key(local) != physical_key(str(tmp_path / "copy.npy"))
    fs, path = fsspec.core.url_to_fs(mem)
    fs.copy(path, path + ".copy")
    assert physical_key(mem) == physical_key(mem.replace("memory:///", "memory://"))
    assert physical_key(mem + ".copy") != physical_key(mem)
    assert physical_key(mem)[2:] == (tokens.nbytes, ranged.pin(mem).version)


def test_many_small_ranges_read_each_piece_once(tmp_path, tokens, small_blocks, monkeypatch):
    """read_many fetches aligned pieces (consecutive missing ones in one request) and keeps them: ranges
    across piece boundaries come back right, and a second call over the same parts asks the store nothing."""
    monkeypatch.setattr(token_reads, "CACHE_BLOCK_BYTES", 4 * 300)
    url = urls_of(tmp_path, tokens)[2]
    f = TokenFile(url)
    ranges = [(0, 10), (295, 305), (299, 901), (5000, 5001), (9_990, 10_007), (40, 40)]
    before = ranged.stats()["requests"]
    got = f.read_many(ranges)
    assert all(np.array_equal(x, tokens[a:b]) for x, (a, b) in zip(got, ranges))
    # pieces 0-3 in one request (with BLOCK_BYTES 4000: at most 3 pieces a request, so two), 16, 33
    assert ranged.stats()["requests"] - before == 4
    again = TokenFile(url).read_many([(100, 200), (9_995, 10_000)])
    assert [x.tolist() for x in again] == [tokens[100:200].tolist(), tokens[9_995:10_000].tolist()]
    assert ranged.stats()["requests"] - before == 4

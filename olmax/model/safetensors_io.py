"""Read and write safetensors files directly (numpy memmaps, no torch): lazy reads, streamed writes.

Format: an 8-byte little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets}},
then the raw little-endian tensor bytes, offsets relative to the end of the header.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

import ml_dtypes
import numpy as np

from olmax.errors import OlmaxError
from olmax.jsonio import write_json

DTYPES = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "BF16": ml_dtypes.bfloat16,
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U8": np.uint8,
    "BOOL": np.bool_,
}
NAMES = {np.dtype(v): k for k, v in DTYPES.items()}
INDEX = "model.safetensors.index.json"


class SafetensorsReader:
    """Every tensor of a checkpoint directory (one file or an index of shards), read lazily on `get`."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)
        index = self.directory / INDEX
        if index.exists():
            try:
                weight_map = json.loads(index.read_text())["weight_map"]
            except (ValueError, KeyError) as e:
                raise OlmaxError(f"{index}: not a safetensors index ({e}); re-save the checkpoint") from e
            files = sorted(set(weight_map.values()))
        else:
            files = sorted(p.name for p in self.directory.glob("*.safetensors"))
        if not files:
            raise OlmaxError(
                f"{self.directory}: no *.safetensors files; point at an HF checkpoint directory "
                "saved with safe_serialization (model.safetensors or an index)"
            )
        self._where: dict[str, tuple[Path, dict]] = {}
        self._maps: dict[Path, np.memmap] = {}
        for name in files:
            path = self.directory / name
            header, data_start = read_header(path)
            for key, info in header.items():
                if key != "__metadata__":
                    self._where[key] = (path, {**info, "start": data_start})

    def names(self) -> list[str]:
        return sorted(self._where)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._lookup(name)[1]["shape"])

    def dtype(self, name: str) -> np.dtype:
        return np.dtype(DTYPES[self._lookup(name)[1]["dtype"]])

    def get(self, name: str) -> np.ndarray:
        """A read-only view of tensor `name` backed by the file (no copy until you convert it)."""
        path, info = self._lookup(name)
        if path not in self._maps:
            self._maps[path] = np.memmap(path, dtype=np.uint8, mode="r")
        begin, end = info["data_offsets"]
        raw = self._maps[path][info["start"] + begin : info["start"] + end]
        dtype = np.dtype(DTYPES[info["dtype"]])
        expected = int(np.prod(info["shape"], dtype=np.int64)) * dtype.itemsize
        if raw.size != expected:
            raise OlmaxError(
                f"{path}: tensor {name} has {raw.size} bytes at offset {info['start'] + begin}, "
                f"expected {expected}; the file is truncated, re-download or re-save it"
            )
        return raw.view(dtype).reshape(info["shape"])

    def _lookup(self, name: str) -> tuple[Path, dict]:
        if name not in self._where:
            raise OlmaxError(
                f"{self.directory}: tensor {name!r} not found; is this an Olmo3ForCausalLM checkpoint?"
            )
        return self._where[name]


def read_header(path: Path) -> tuple[dict, int]:
    """The JSON header of one safetensors file and the byte offset where its data starts."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise OlmaxError(f"{path}: shorter than a safetensors header (offset 0); the file is truncated")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            raise OlmaxError(
                f"{path}: header length {n} at offset 0 exceeds the file; not a safetensors file"
            )
        try:
            header = json.loads(f.read(n))
        except ValueError as e:
            raise OlmaxError(f"{path}: bad JSON header at offset 8 ({e}); not a safetensors file") from e
    for key, info in header.items():
        if key != "__metadata__" and info.get("dtype") not in DTYPES:
            raise OlmaxError(f"{path}: tensor {key} has unsupported dtype {info.get('dtype')!r}")
    return header, 8 + n


TensorSpec = tuple[str, tuple[int, ...], np.dtype, Callable[[], np.ndarray]]


def write_checkpoint(
    directory: Path,
    tensors: Iterable[TensorSpec],
    max_shard_bytes: int = 5 << 30,
    metadata: dict[str, str] | None = None,
) -> list[str]:
    """Stream tensors (name, shape, dtype, producer) into shard files under `directory`.

    Each producer is called once, when its tensor is written, so at most one tensor is in memory.
    Writes one `model.safetensors`, or `model-0000i-of-0000n.safetensors` shards plus an index.
    `metadata` (string values) joins `{"format": "pt"}` in every shard's `__metadata__`.
    """
    specs = list(tensors)
    shards: list[list[TensorSpec]] = [[]]
    used = 0
    for spec in specs:
        nbytes = int(np.prod(spec[1], dtype=np.int64)) * np.dtype(spec[2]).itemsize
        if shards[-1] and used + nbytes > max_shard_bytes:
            shards.append([])
            used = 0
        shards[-1].append(spec)
        used += nbytes
    names = (
        ["model.safetensors"]
        if len(shards) == 1
        else [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    )
    weight_map, total = {}, 0
    for fname, shard in zip(names, shards):
        total += _write_shard(directory / fname, shard, metadata or {})
        weight_map.update({spec[0]: fname for spec in shard})
    if len(shards) > 1:
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        write_json(directory / INDEX, index)
    return names


def _write_shard(path: Path, shard: list[TensorSpec], metadata: dict[str, str]) -> int:
    header: dict = {"__metadata__": {**metadata, "format": "pt"}}
    offset = 0
    for name, shape, dtype, _ in shard:
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        header[name] = {
            "dtype": NAMES[np.dtype(dtype)],
            "shape": list(shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # keep the data 8-byte aligned, as safetensors does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for name, shape, dtype, produce in shard:
            arr = np.ascontiguousarray(produce(), dtype=dtype)
            if arr.shape != tuple(shape):
                raise ValueError(f"tensor {name}: produced shape {arr.shape}, planned {tuple(shape)}")
            f.write(memoryview(arr.reshape(-1).view(np.uint8)))
    return offset


class AtomicDirectory:
    """Build a directory under a temporary sibling name; rename it into place only on success."""

    def __init__(self, target: str | os.PathLike):
        self.target = Path(target)
        if self.target.exists() and (not self.target.is_dir() or any(self.target.iterdir())):
            raise OlmaxError(
                f"{self.target}: already exists and is not an empty directory; "
                "choose a new output path or delete it first"
            )
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.target.name}.tmp-", dir=self.target.parent))
        os.chmod(self.tmp, 0o755)  # mkdtemp makes it private; the result is an ordinary directory

    def __enter__(self) -> Path:
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return
        if self.target.exists():
            self.target.rmdir()  # empty, checked above
        os.replace(self.tmp, self.target)

"""Token files, the one place they are opened and written: raw little-endian token ids, no header.

OLMo-core's mixes come as uint32 (dolma2's 100k vocabulary) and uint16 (GPT-2-sized vocabularies); the dtype
is the stream's (`StreamSpec.dtype`) or the manifest's, never guessed from the bytes. A file whose size is not
a whole number of tokens is refused naming the byte where the last whole token ends. Local files are
memory-mapped (reads touch only the pages used); olmax.data.token_reads reads a URL's bytes by range and
decodes them here.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from olmax.errors import OlmaxError

DTYPES = ("uint16", "uint32")
DEFAULT_DTYPE = "uint32"  # what `olmax data prepare` writes (dolma2's ids exceed 65,535)


def token_dtype(dtype: str | np.dtype | type = DEFAULT_DTYPE) -> np.dtype:
    """The little-endian numpy dtype of a token file of `dtype` ("uint16" or "uint32")."""
    name = np.dtype(dtype).name
    if name not in DTYPES:
        raise OlmaxError(f"token dtype {name!r}: token files are {' or '.join(DTYPES)}")
    return np.dtype(name).newbyteorder("<")


def token_count(path: str | os.PathLike, size: int, dtype: str | np.dtype | type = DEFAULT_DTYPE) -> int:
    """Tokens in a file of `size` bytes; OlmaxError naming `path` when it ends mid-token."""
    itemsize = token_dtype(dtype).itemsize
    if size % itemsize:
        name = np.dtype(dtype).name
        raise OlmaxError(
            f"{path}: size {size} bytes is not a multiple of {itemsize} ({name} tokens); the file ends "
            f"mid-token at byte {size - size % itemsize}: it is truncated, not a raw token file or not {name}"
        )
    return size // itemsize


def read_tokens(
    path: str | os.PathLike, dtype: str | np.dtype | type = DEFAULT_DTYPE, *, mmap: bool = True
) -> np.ndarray:
    """A local token file's tokens (memory-mapped, read-only; `mmap=False` reads them into memory)."""
    dt = token_dtype(dtype)
    n = token_count(path, os.path.getsize(path), dt)
    if n == 0:
        return np.zeros(0, dtype=dt)
    if mmap:
        return np.memmap(path, dtype=dt, mode="r", shape=(n,))
    return np.fromfile(path, dtype=dt)


def decode(data: bytes | bytearray | memoryview, dtype: str | np.dtype | type = DEFAULT_DTYPE) -> np.ndarray:
    """Token ids from the raw bytes of a token file (a read-only view when `data` is immutable)."""
    return np.frombuffer(data, dtype=token_dtype(dtype))


def encode(tokens: np.ndarray, dtype: str | np.dtype | type = DEFAULT_DTYPE) -> memoryview:
    """The bytes of `tokens` in a token file, as a read-only buffer over `tokens` itself when it is already
    contiguous in the file's dtype (no copy: prepare writes every token through here); OlmaxError when an
    id does not fit the dtype (not checked when the array's own dtype is the file's: every id fits)."""
    dt = token_dtype(dtype)
    arr = np.asarray(tokens)
    if arr.size and arr.dtype != dt and (int(arr.min()) < 0 or int(arr.max()) > np.iinfo(dt).max):
        raise OlmaxError(f"token ids {int(arr.min())}..{int(arr.max())} do not fit {dt.name} token files")
    out = np.ascontiguousarray(arr, dtype=dt)
    return memoryview(out.reshape(-1).view(np.uint8)).toreadonly()


def write_tokens(
    path: str | os.PathLike, tokens: np.ndarray, dtype: str | np.dtype | type = DEFAULT_DTYPE
) -> Path:
    """Write `tokens` as token file `path` (callers rename a finished temporary into place)."""
    Path(path).write_bytes(encode(tokens, dtype))
    return Path(path)
